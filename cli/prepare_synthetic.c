/* skiplm prepare --synthetic mqar (prepare.h): multi-query associative recall as token shards
 * with a loss mask, the layout of Zoology's MQAR (Arora et al., 2023). A sequence of --seq
 * tokens holds --pairs key-value pairs (key, value, key, value, ...), then --queries queries,
 * each a key of an earlier pair followed by that pair's value; the loss mask is 1 on those
 * answer values only, so a model is scored on recalling them (eval --accuracy). Keys are the
 * tokens 1..K, values K+1..V-1 (K = (V-1)/2), token 0 fills the rest of the sequence; keys
 * are distinct within a sequence, and so are values. Placement: near puts the filler first,
 * so the queried pairs (the last --queries of the pairs) sit just before the queries; far puts
 * it between the pairs and the queries and queries the first pairs, so every answer lies at
 * least the filler's length back. Every sequence is drawn from its own generator, seeded by
 * (--seed, stream, index): the same options give the same bytes. The sequences follow each
 * other in train.bin and val.bin, each stream closed by one token V-1 (mask 0) so that a
 * loader's window k of --seq tokens is sequence k and the largest id of the data is V-1
 * (train --data without a tokenizer reads the vocabulary V from it). */
#include "prepare.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_STREAM_TOKENS ((size_t)1 << 31)

typedef struct {
    const char *out, *task, *placement;
    int vocab, pairs, queries, seq, train_seqs, val_seqs, far;
    uint64_t seed;
} mqar_opts;

/* splitmix64: one 64-bit state, a well-mixed output per step */
static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* uniform in [0, n) (rejection, no modulo bias) */
static uint32_t below(uint64_t *s, uint32_t n) {
    const uint64_t lim = UINT64_MAX - UINT64_MAX % n;
    uint64_t r;
    do r = next_u64(s); while (r >= lim);
    return (uint32_t)(r % n);
}

/* k distinct values of [lo, lo + n) in random order: a partial Fisher-Yates shuffle of pool */
static void draw_distinct(uint64_t *s, int32_t *pool, int n, int lo, int k, int32_t *out) {
    for (int i = 0; i < n; i++) pool[i] = lo + i;
    for (int i = 0; i < k; i++) {
        int j = i + (int)below(s, (uint32_t)(n - i));
        int32_t t = pool[i]; pool[i] = pool[j]; pool[j] = t;
        out[i] = pool[i];
    }
}

static int parse_opts(mqar_opts *o, int argc, char **argv) {
    *o = (mqar_opts){.out = "data/mqar", .placement = "near", .vocab = 256, .pairs = 8, .queries = -1, .seq = 64,
                     .train_seqs = 20000, .val_seqs = 1000};
    cli_opt opts[] = {
        {"synthetic", 's', &o->task, "the task: mqar (multi-query associative recall)"},
        {"out", 's', &o->out, "output folder (data/mqar)"},
        {"vocab", 'i', &o->vocab, "vocabulary V: keys 1..K, values K+1..V-1 with K = (V-1)/2, 0 the filler; at most 65536 (256)"},
        {"pairs", 'i', &o->pairs, "key-value pairs a sequence holds (8)"},
        {"queries", 'i', &o->queries, "queries a sequence ends with, each of a different pair, at most --pairs (--pairs)"},
        {"seq", 'i', &o->seq, "tokens a sequence, at least 2 (pairs + queries); give train and eval the same --seq (64)"},
        {"placement", 's', &o->placement, "near: the queried pairs just before the queries, the filler first; far: the "
                                          "filler between the pairs and the queries, the first pairs queried (near)"},
        {"train-sequences", 'i', &o->train_seqs, "sequences in train.bin (20000)"},
        {"val-sequences", 'i', &o->val_seqs, "sequences in val.bin (1000)"},
        {"seed", 'u', &o->seed, "seed of the draws (0)"},
        {0},
    };
    int np;
    char *pos[1];
    int rc = cli_parse(argc, argv, "prepare", "--synthetic mqar [options]   (docs/data.md, \"Synthetic tasks\")", opts,
                       pos, 0, &np, NULL, NULL);
    if (rc) return rc;
    if (strcmp(o->task, "mqar")) { fprintf(stderr, "skiplm prepare: --synthetic: unknown task '%s' (known: mqar)\n", o->task); return 2; }
    if (o->queries < 0) o->queries = o->pairs;
    const int K = (o->vocab - 1) / 2;
    if (o->vocab < 3 || o->vocab > 65536) { fprintf(stderr, "skiplm prepare: --vocab must be in 3..65536 (got %d)\n", o->vocab); return 2; }
    if (o->pairs < 1) { fprintf(stderr, "skiplm prepare: --pairs must be >= 1\n"); return 2; }
    if (o->pairs > K) {
        fprintf(stderr, "skiplm prepare: --pairs %d needs %d distinct keys, but --vocab %d has %d (tokens 1..%d): give "
                "--vocab >= %d\n", o->pairs, o->pairs, o->vocab, K, K, 2 * o->pairs + 1);
        return 2;
    }
    if (o->queries < 1 || o->queries > o->pairs) {
        fprintf(stderr, "skiplm prepare: --queries must be in 1..%d (--pairs; each query asks a different pair)\n", o->pairs);
        return 2;
    }
    if (o->seq < 2 * (o->pairs + o->queries)) {
        fprintf(stderr, "skiplm prepare: --seq %d is too short for %d pairs and %d queries (2 tokens each): give --seq >= %d\n",
                o->seq, o->pairs, o->queries, 2 * (o->pairs + o->queries));
        return 2;
    }
    if (!strcmp(o->placement, "near")) o->far = 0;
    else if (!strcmp(o->placement, "far")) o->far = 1;
    else { fprintf(stderr, "skiplm prepare: --placement must be near or far (got '%s')\n", o->placement); return 2; }
    if (o->train_seqs < 1 || o->val_seqs < 1) { fprintf(stderr, "skiplm prepare: --train-sequences and --val-sequences must be >= 1\n"); return 2; }
    const int most = o->train_seqs > o->val_seqs ? o->train_seqs : o->val_seqs;
    if ((double)most * o->seq + 1 > (double)MAX_STREAM_TOKENS) {
        fprintf(stderr, "skiplm prepare: %d sequences of %d tokens exceed the %zu tokens of one shard\n", most, o->seq,
                MAX_STREAM_TOKENS);
        return 2;
    }
    return 0;
}

/* Sequence idx of stream v (0 train, 1 val) into ids and mask (seq entries each). */
static void make_sequence(const mqar_opts *o, int v, uint64_t idx, int32_t *pool, int32_t *keys, int32_t *vals,
                          int32_t *order, int32_t *ids, uint8_t *mask) {
    const int P = o->pairs, Q = o->queries, T = o->seq, K = (o->vocab - 1) / 2;
    const int G = T - 2 * (P + Q);
    uint64_t s = o->seed ^ ((uint64_t)v << 62);
    s = next_u64(&s) ^ idx;
    s = next_u64(&s);
    draw_distinct(&s, pool, K, 1, P, keys);
    draw_distinct(&s, pool, o->vocab - 1 - K, K + 1, P, vals);
    /* the queried pairs: the last Q (near) or the first Q (far), asked in a random order */
    draw_distinct(&s, pool, Q, o->far ? 0 : P - Q, Q, order);
    memset(ids, 0, (size_t)T * sizeof *ids);
    memset(mask, 0, (size_t)T);
    const int p0 = o->far ? 0 : G, q0 = 2 * P + G;
    for (int i = 0; i < P; i++) { ids[p0 + 2 * i] = keys[i]; ids[p0 + 2 * i + 1] = vals[i]; }
    for (int j = 0; j < Q; j++) {
        ids[q0 + 2 * j] = keys[order[j]];
        ids[q0 + 2 * j + 1] = vals[order[j]];
        mask[q0 + 2 * j + 1] = 1;
    }
}

static int write_meta(const mqar_opts *o, const prep_written *wr) {
    const int K = (o->vocab - 1) / 2;
    char meta[2048], path[4200];
    int ml = snprintf(meta, sizeof meta,
        "{\"synthetic\": \"mqar\", \"vocab_size\": %d, \"seq\": %d, \"pairs\": %d, \"queries\": %d, \"placement\": \"%s\", "
        "\"filler\": %d, \"keys\": [1, %d], \"values\": [%d, %d], \"seed\": %llu, \"train_sequences\": %d, "
        "\"val_sequences\": %d, \"shard_version\": %d, \"layout\": \"single\", \"train_files\": 1, \"val_files\": 1, "
        "\"train_tokens\": %llu, \"val_tokens\": %llu, \"train_masked_tokens\": %llu, \"val_masked_tokens\": %llu}\n",
        o->vocab, o->seq, o->pairs, o->queries, o->placement, o->seq - 2 * (o->pairs + o->queries), K, K + 1,
        o->vocab - 1, (unsigned long long)o->seed, o->train_seqs, o->val_seqs, SK_SHARD_VERSION,
        (unsigned long long)wr->tokens[0], (unsigned long long)wr->tokens[1], (unsigned long long)wr->masked[0],
        (unsigned long long)wr->masked[1]);
    snprintf(path, sizeof path, "%s/meta.json", o->out);
    return sk_write_atomic(path, meta, (size_t)ml) ? cli_fail("prepare") : 0;
}

int prep_synthetic(int argc, char **argv) {
    mqar_opts o;
    int rc = parse_opts(&o, argc, argv);
    if (rc) return rc == 1 ? 0 : rc;
    const int T = o.seq, P = o.pairs;
    int32_t *ids = malloc((size_t)T * sizeof *ids), *pool = malloc((size_t)o.vocab * sizeof *pool);
    int32_t *keys = malloc((size_t)P * sizeof *keys), *vals = malloc((size_t)P * sizeof *vals);
    int32_t *order = malloc((size_t)P * sizeof *order);
    uint8_t *mask = malloc((size_t)T);
    prep_writer *w = NULL;
    prep_written wr = {0};
    if (!ids || !pool || !keys || !vals || !order || !mask) { fprintf(stderr, "skiplm prepare: out of memory\n"); rc = 1; }
    /* train --data would take a tokenizer left by an earlier text prepare for this data's */
    static const char *const toks[] = {"tokenizer.json", "vocab.json", "encoder.json"};
    for (int i = 0; i < 3 && !rc; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", o.out, toks[i]);
        if (!access(path, F_OK)) {
            fprintf(stderr, "skiplm prepare: %s holds a tokenizer (%s) that train --data would read with these shards: "
                    "give a new or empty --out\n", o.out, toks[i]);
            rc = 2;
        }
    }
    if (!rc && prep_writer_open(&w, o.out, 0, MAX_STREAM_TOKENS, SK_SHARD_VERSION, 1)) rc = cli_fail("prepare");
    for (int v = 0; v < 2 && !rc; v++) {
        const int n = v ? o.val_seqs : o.train_seqs;
        for (int i = 0; i < n && !rc; i++) {
            make_sequence(&o, v, (uint64_t)i, pool, keys, vals, order, ids, mask);
            if (prep_writer_add(w, v, ids, mask, (size_t)T)) rc = cli_fail("prepare");
        }
        const int32_t close = o.vocab - 1;
        const uint8_t off = 0;
        if (!rc && prep_writer_add(w, v, &close, &off, 1)) rc = cli_fail("prepare");
    }
    if (!rc && prep_writer_finish(w, &wr)) rc = cli_fail("prepare");
    if (rc && w) prep_writer_abort(w);
    if (!rc) rc = write_meta(&o, &wr);
    if (!rc)
        printf("prepared %s: MQAR, %d train and %d val sequences of %d tokens (%d pairs, %d queries, %s, %d filler), "
               "vocabulary %d; train with --seq %d\n", o.out, o.train_seqs, o.val_seqs, T, P, o.queries, o.placement,
               T - 2 * (P + o.queries), o.vocab, T);
    prep_writer_free(w);
    free(ids); free(pool); free(keys); free(vals); free(order); free(mask);
    return rc;
}
