/* KV-cache decoding: greedy generation with the cache equals generation by full
 * recomputation token for token, and the cached logits equal the full forward's; with and
 * without SLA, GPT-2 and Llama families. Decoding with bf16 weights (activations rounded to
 * bf16 for the matrix products) differs from fp32 decoding by rounding only. Also checks the cache saving of SLA and sampling. */
#include "test.h"
#include "test_models.h"
#include "skiplm.h"
#include "core/ops.h"
#include <omp.h>

/* Decode seq[0..T): the prompt in one call, then one token per call; logits of every call
 * into lg (rows of V). Returns the number of rows, or -1. */
static int decode_all(sk_model *m, sk_kvcache *kv, const int32_t *seq, int T, int prompt_len, float *lg, int V) {
    sk_kvcache_reset(kv);
    if (sk_model_decode(m, kv, seq, prompt_len, lg)) return -1;
    int r = 1;
    for (int i = prompt_len; i < T; i++, r++)
        if (sk_model_decode(m, kv, seq + i, 1, lg + (size_t)r * V)) return -1;
    return r;
}

/* bf16 weights: the cache's copy, with each matrix product's input rounded to bf16 (the
 * kernel's exact order is test_gemm_rows's), differs from fp32 decoding, on the original weights
 * or on weights rounded to bf16, by rounding only. */
static void bf16_case(const char *name, sk_model *m, const int32_t *seq, int T, int prompt_len) {
    int V = sk_model_config(m)->vocab_size;
    size_t np = sk_model_num_params(m), rows = (size_t)(T - prompt_len + 1) * V;
    float *p = sk_model_params(m), *keep = malloc(np * sizeof(float));
    float *lb = malloc(rows * sizeof(float)), *lr = malloc(rows * sizeof(float)), *l32 = malloc(rows * sizeof(float));
    memcpy(keep, p, np * sizeof(float));
    sk_kvcache *kb = NULL, *kr = NULL;
    int ok = test_kv(&kb, m, T, 1, SK_WEIGHTS_BF16, SK_KV_F32) == 0 && sk_kvcache_get_params(kb).weights == SK_WEIGHTS_BF16 &&
             test_kv(&kr, m, T, 1, SK_WEIGHTS_F32, SK_KV_F32) == 0 && sk_kvcache_get_params(kr).weights == SK_WEIGHTS_F32;
    CHECK(ok, "%s: bf16 and fp32 caches made", name);
    if (!ok) goto out;
    int r1 = decode_all(m, kb, seq, T, prompt_len, lb, V), r2 = decode_all(m, kr, seq, T, prompt_len, l32, V);
    int nt; const sk_tensor *ts = sk_model_tensors(m, &nt);
    for (int i = 0; i < nt; i++)
        if (ts[i].ndim == 2)
            for (size_t k = 0; k < ts[i].numel; k++) p[ts[i].offset + k] = sk_bf16_to_f32(sk_bf16_from_f32(p[ts[i].offset + k]));
    int r3 = decode_all(m, kr, seq, T, prompt_len, lr, V);
    memcpy(p, keep, np * sizeof(float));
    double scale = max_abs(lr, rows), d_w = max_abs_diff(lb, lr, rows), d_32 = max_abs_diff(lb, l32, rows);
    CHECK(r1 > 0 && r1 == r2 && r2 == r3, "%s: bf16 and fp32 decoding ran (%d calls)", name, r1);
    CHECK(d_32 < 0.05 * scale && d_w < 0.05 * scale, "%s: and differs from fp32 decoding by rounding only (%.2e from the fp32 "
          "weights' logits, %.2e from the bf16-rounded weights')", name, d_32, d_w);
out:
    sk_kvcache_free(kb); sk_kvcache_free(kr);
    free(keep); free(lb); free(lr); free(l32);
}


static void run_case(const char *name, sk_config cfg, int prompt_len, int n_new) {
    sk_model *m = test_model(name, &cfg, 7);
    if (!m) return;
    int V = cfg.vocab_size, T = prompt_len + n_new;
    int32_t *seq = calloc(T, sizeof(int32_t));
    for (int i = 0; i < prompt_len; i++) seq[i] = (i * 7 + 3) % V;
    float *lg = malloc(sizeof(float) * V), *full = malloc(sizeof(float) * (size_t)T * V);
    sk_kvcache *kv;
    CHECK(test_kv(&kv, m, T, 1, SK_WEIGHTS_F32, SK_KV_F32) == 0, "%s: cache allocated", name);
    int same = 1, n = prompt_len;
    double maxd = 0;
    CHECK(sk_model_decode(m, kv, seq, prompt_len, lg) == 0, "%s: prefill %d tokens", name, prompt_len);
    for (int step = 0; step < n_new; step++) {
        /* full recomputation over seq[0..n) */
        sk_model_forward(m, seq, NULL, 1, n, NULL, full);
        const float *last = full + (size_t)(n - 1) * V;
        double d = max_abs_diff(lg, last, V);
        if (d > maxd) maxd = d;
        int a = sk_sample_token(lg, V, 0, 0, 1, NULL), b = sk_sample_token(last, V, 0, 0, 1, NULL);
        if (a != b) same = 0;
        seq[n++] = a;
        if (step + 1 < n_new && sk_model_decode(m, kv, seq + n - 1, 1, lg)) { CHECK(0, "%s: decode: %s", name, sk_last_error()); break; }
    }
    CHECK(same, "%s: greedy tokens with the cache equal full recomputation (%d new)", name, n_new);
    CHECK(maxd <= 1e-4, "%s: cached logits max abs diff %.2e vs full forward", name, maxd);
    bf16_case(name, m, seq, T, prompt_len);
    printf("   %s: cache %zu bytes, without SLA's saving %zu bytes\n", name, sk_kvcache_bytes(kv), sk_kvcache_bytes_full(kv));
    if ((cfg.n_skip_layer > 0 && cfg.n_skip_head > 0 && cfg.n_skip_layer < cfg.n_layer) || cfg.routing[0])
        CHECK(sk_kvcache_bytes(kv) < sk_kvcache_bytes_full(kv), "%s: SLA cache is smaller (%zu < %zu)", name,
              sk_kvcache_bytes(kv), sk_kvcache_bytes_full(kv));
    else
        CHECK(sk_kvcache_bytes(kv) == sk_kvcache_bytes_full(kv), "%s: no saving without SLA", name);
    /* overflow is refused */
    int32_t t0 = 0;
    while (sk_kvcache_pos(kv) < T) sk_model_decode(m, kv, &t0, 1, lg);
    CHECK(sk_model_decode(m, kv, &t0, 1, lg) != 0 && strstr(sk_last_error(), "do not fit"), "%s: full cache refused: %s", name, sk_last_error());
    int32_t bad = V;
    sk_kvcache_reset(kv);
    CHECK(sk_model_decode(m, kv, &bad, 1, lg) != 0 && strstr(sk_last_error(), "outside the vocabulary"), "%s: out-of-vocab token refused", name);
    sk_model *other;
    sk_kvcache *kb;
    if (sk_model_new(&other, sk_model_config(m), 1) == 0 && test_kv(&kb, other, T, 1, SK_WEIGHTS_BF16, SK_KV_F32) == 0) {
        CHECK(sk_model_decode(m, kb, &t0, 1, lg) != 0 && strstr(sk_last_error(), "another model"),
              "%s: a bf16 cache made for another model (same shapes) is refused", name);
        sk_kvcache_free(kb);
        sk_model_free(other);
    }
    sk_kvcache_free(kv);
    free(seq); free(lg); free(full);
    sk_model_free(m);
}

/* Decoding gives the same bits on 1 and 3 threads (its GEMV and its attention split work,
 * never a sum), with positions long enough that the attention runs in parallel. */
static void threads_case(void) {
    sk_config c;
    sk_config_default(&c);
    c.n_layer = 2; c.n_head = 8; c.n_embd = 512; c.vocab_size = 64; c.block_size = 300;
    c.n_skip_layer = 1; c.n_skip_head = 4;
    sk_model *m = test_model("threads", &c, 3);
    if (!m) return;
    const int T = 280, P = 8, V = c.vocab_size, threads = omp_get_max_threads();
    int32_t *seq = malloc(sizeof(int32_t) * T);
    for (int i = 0; i < T; i++) seq[i] = (i * 13 + 5) % V;
    float *l1 = malloc(sizeof(float) * (size_t)(T - P + 1) * V), *l3 = malloc(sizeof(float) * (size_t)(T - P + 1) * V);
    sk_kvcache *kv = NULL;
    int ok = test_kv(&kv, m, T, 1, SK_WEIGHTS_F32, SK_KV_F32) == 0;
    omp_set_num_threads(1);
    ok = ok && decode_all(m, kv, seq, T, P, l1, V) > 0;
    omp_set_num_threads(3);
    ok = ok && decode_all(m, kv, seq, T, P, l3, V) > 0;
    omp_set_num_threads(threads);
    CHECK(ok && !memcmp(l1, l3, sizeof(float) * (size_t)(T - P + 1) * V),
          "decoding 280 positions (8 heads of 64, SLA) gives the same logits' bits on 1 and 3 threads");
    sk_kvcache_free(kv);
    free(seq); free(l1); free(l3);
    sk_model_free(m);
}

/* bf16 K/V (SK_KV_BF16): half the bytes (sk_kvcache_bytes_per_token says so too), logits close
 * to the fp32 cache's but not equal (the rounding happens); sk_model_decode_all's rows equal
 * one call per token's in both, its last row the bits of sk_model_decode_seq's; the
 * parameters' refusals. A 70-token prompt crosses a decode chunk. */
static void kv16_case(const char *name, sk_config cfg) {
    enum { P = 70, N = 12, T = P + N };
    if (cfg.block_size < T) cfg.block_size = T;
    sk_model *m = test_model(name, &cfg, 5);
    if (!m) return;
    const int V = cfg.vocab_size;
    int32_t seq[T];
    for (int i = 0; i < T; i++) seq[i] = (i * 11 + 4) % V;
    const size_t rows = (size_t)(N + 1) * V;
    float *l32 = malloc(sizeof(float) * rows), *l16 = malloc(sizeof(float) * rows);
    float *all = malloc(sizeof(float) * (size_t)T * V), *one = malloc(sizeof(float) * (size_t)T * V), *lg = malloc(sizeof(float) * V);
    sk_kvcache *k32 = NULL, *k16 = NULL;
    int ok = test_kv(&k32, m, T, 1, SK_WEIGHTS_F32, SK_KV_F32) == 0 && test_kv(&k16, m, T, 1, SK_WEIGHTS_F32, SK_KV_BF16) == 0;
    CHECK(ok, "%s: fp32 and bf16 K/V caches made", name);
    if (!ok) goto out;
    CHECK(sk_kvcache_bytes(k16) * 2 == sk_kvcache_bytes(k32) && sk_kvcache_bytes_full(k16) * 2 == sk_kvcache_bytes_full(k32) &&
          sk_kvcache_bytes_per_token(m, SK_KV_F32) * T == sk_kvcache_bytes(k32) && sk_kvcache_bytes_per_token(m, SK_KV_BF16) * T == sk_kvcache_bytes(k16) &&
          sk_kvcache_get_params(k16).kv_type == SK_KV_BF16,
          "%s: bf16 K/V take half the bytes (%zu of %zu; %zu per position)", name, sk_kvcache_bytes(k16), sk_kvcache_bytes(k32),
          sk_kvcache_bytes_per_token(m, SK_KV_BF16));
    int r1 = decode_all(m, k32, seq, T, P, l32, V), r2 = decode_all(m, k16, seq, T, P, l16, V);
    double scale = max_abs(l32, rows), d = max_abs_diff(l16, l32, rows);
    CHECK(r1 == N + 1 && r2 == N + 1 && d > 0 && d < 0.02 * scale,
          "%s: bf16 K/V logits differ from fp32 K/V's by the rounding only (max diff %.2e, |logits| %.2f)", name, d, scale);
    /* decode_all: every position's logits; the same as one token at a time, up to the prefill's
     * summation order; its last row (12 tokens: the decoding kernels) the bits of decode_seq */
    for (int kt = 0; kt < 2; kt++) {
        sk_kvcache *kv = kt ? k16 : k32;
        sk_kvcache_reset(kv);
        int a = sk_model_decode_all(m, kv, 0, seq, T, all) == 0 && sk_kvcache_pos(kv) == T;
        sk_kvcache_reset(kv);
        for (int i = 0; i < T && a; i++) a = sk_model_decode(m, kv, seq + i, 1, one + (size_t)i * V) == 0;
        double da = max_abs_diff(all, one, (size_t)T * V), sc = max_abs(one, (size_t)T * V);
        sk_kvcache_reset(kv);
        int b = sk_model_decode_all(m, kv, 0, seq, N, all) == 0;
        sk_kvcache_reset(kv);
        b = b && sk_model_decode_seq(m, kv, 0, seq, N, lg) == 0 && !memcmp(all + (size_t)(N - 1) * V, lg, sizeof(float) * V);
        CHECK(a && b && da <= 1e-4 * (sc > 1 ? sc : 1), "%s, %s K/V: decode_all's %d rows equal one token at a time (max diff %.2e), "
              "its last of %d the bits of decode_seq", name, kt ? "bf16" : "fp32", T, da, N);
    }
    sk_kvcache *bad = NULL;
    sk_kvcache_params kp = sk_kvcache_default_params();
    kp.kv_type = (sk_kv_type)7;
    CHECK(sk_kvcache_new_params(&bad, m, &kp) != 0 && !bad && strstr(sk_last_error(), "K/V type"), "%s: K/V type 7 refused: %s", name, sk_last_error());
    CHECK(sk_kvcache_new_params(&bad, m, NULL) != 0 && !bad, "%s: no parameters refused: %s", name, sk_last_error());
    kp = sk_kvcache_default_params();
    kp.max_T = cfg.block_size + 1;
    CHECK(sk_kvcache_new_params(&bad, m, &kp) != 0 && !bad && strstr(sk_last_error(), "block_size"), "%s: max_T past block_size refused: %s", name, sk_last_error());
    kp.max_T = 0; kp.n_seq = 0;
    CHECK(sk_kvcache_new_params(&bad, m, &kp) != 0 && !bad && strstr(sk_last_error(), "sequences"), "%s: 0 sequences refused: %s", name, sk_last_error());
    kp.n_seq = 2;
    ok = sk_kvcache_new_params(&bad, m, &kp) == 0 && sk_kvcache_get_params(bad).max_T == cfg.block_size && sk_kvcache_n_seq(bad) == 2;
    CHECK(ok, "%s: max_T 0 is the block_size (%d)", name, ok ? sk_kvcache_get_params(bad).max_T : -1);
    sk_kvcache_free(bad);
out:
    sk_kvcache_free(k32); sk_kvcache_free(k16);
    free(l32); free(l16); free(all); free(one); free(lg);
    sk_model_free(m);
}

/* Batched decoding (sk_model_decode_batch): NS sequences side by side in one cache give the
 * bits of each decoded alone (a server's reply must not depend on what else is in the batch). A: prompts of different lengths (each row at its own position); B: one
 * prompt decoded once and copied (equal positions: one attention call per pass); C: a subset
 * in descending order. NS > SK_DECODE_CHUNK, so a batch takes two passes. */
static void batch_case(const char *name, sk_config cfg, sk_weights wt, sk_kv_type kt) {
    enum { NS = 70, STEPS = 4, PB = 6 };
    sk_model *m = test_model(name, &cfg, 11);
    if (!m) return;
    const int V = cfg.vocab_size, maxT = PB + STEPS + 1;   /* = 7 + STEPS: C fills sequences 9, 5, 2 */
    sk_kvcache *kb = NULL, *k1 = NULL;
    int ok = test_kv(&kb, m, maxT, NS, wt, kt) == 0 && test_kv(&k1, m, maxT, 1, wt, kt) == 0;
    CHECK(ok, "%s: caches for %d sequences and for one", name, NS);
    if (!ok) { sk_kvcache_free(kb); sk_kvcache_free(k1); sk_model_free(m); return; }
    CHECK(sk_kvcache_n_seq(kb) == NS && sk_kvcache_bytes(kb) == (size_t)NS * sk_kvcache_bytes(k1) && sk_kvcache_get_params(kb).weights == wt &&
          sk_kvcache_get_params(kb).kv_type == kt,
          "%s: the cache holds %d sequences' K/V (%zu bytes)", name, NS, sk_kvcache_bytes(kb));
    float *ref = malloc(sizeof(float) * (size_t)NS * (STEPS + 2) * V), *lg = malloc(sizeof(float) * (size_t)NS * V);
    int32_t arr[NS][8 + STEPS + 1], tok[NS];
    int seqs[NS], plen[NS];
    double worst = 0, scale = 1;
    /* A: sequence s has a prompt of 1 + s % 7 tokens */
    for (int s = 0; s < NS; s++) {
        plen[s] = 1 + s % 7;
        for (int i = 0; i < plen[s] + STEPS; i++) arr[s][i] = (s * 5 + i * 3 + 1) % V;
        decode_all(m, k1, arr[s], plen[s] + STEPS, plen[s], ref + (size_t)s * (STEPS + 2) * V, V);
        double a = max_abs(ref + (size_t)s * (STEPS + 2) * V, (size_t)(STEPS + 1) * V);
        if (a > scale) scale = a;
        if (sk_model_decode_seq(m, kb, s, arr[s], plen[s], lg)) { CHECK(0, "%s: prefill: %s", name, sk_last_error()); goto out; }
        double d = max_abs_diff(lg, ref + (size_t)s * (STEPS + 2) * V, V);
        if (d > worst) worst = d;
    }
    for (int j = 0; j < STEPS; j++) {
        for (int s = 0; s < NS; s++) { seqs[s] = s; tok[s] = arr[s][plen[s] + j]; }
        if (sk_model_decode_batch(m, kb, seqs, tok, NS, lg)) { CHECK(0, "%s: batch: %s", name, sk_last_error()); goto out; }
        for (int s = 0; s < NS; s++) {
            double d = max_abs_diff(lg + (size_t)s * V, ref + ((size_t)s * (STEPS + 2) + j + 1) * V, V);
            if (d > worst) worst = d;
        }
    }
    int pos_ok = 1;
    for (int s = 0; s < NS; s++) pos_ok &= sk_kvcache_seq_pos(kb, s) == plen[s] + STEPS;
    CHECK(pos_ok && worst == 0, "%s: A, %d prompts of 1-7 tokens, then %d batch steps: logits have the bits of one "
          "sequence at a time (max diff %.2e, |logits| %.1f)", name, NS, STEPS, worst, scale);
    /* B and C: one prompt, copied; sequence s then reads its own tokens */
    worst = 0;
    for (int s = 0; s < NS; s++) {
        for (int i = 0; i < PB + STEPS + 1; i++) arr[s][i] = i < PB ? (i * 7 + 2) % V : (s * 3 + i) % V;
        decode_all(m, k1, arr[s], PB + STEPS + 1, PB, ref + (size_t)s * (STEPS + 2) * V, V);
        sk_kvcache_seq_truncate(kb, s, 0);
    }
    if (sk_model_decode_seq(m, kb, 0, arr[0], PB, lg)) { CHECK(0, "%s: prefill: %s", name, sk_last_error()); goto out; }
    for (int s = 1; s < NS; s++) sk_kvcache_seq_copy(kb, s, 0);
    for (int j = 0; j < STEPS; j++) {
        for (int s = 0; s < NS; s++) { seqs[s] = s; tok[s] = arr[s][PB + j]; }
        if (sk_model_decode_batch(m, kb, seqs, tok, NS, lg)) { CHECK(0, "%s: batch: %s", name, sk_last_error()); goto out; }
        for (int s = 0; s < NS; s++) {
            double d = max_abs_diff(lg + (size_t)s * V, ref + ((size_t)s * (STEPS + 2) + j + 1) * V, V);
            if (d > worst) worst = d;
        }
    }
    CHECK(worst == 0, "%s: B, a prompt decoded once and copied to %d sequences, %d batch steps: the same bits (max diff %.2e)",
          name, NS, STEPS, worst);
    worst = 0;
    int sub[3] = {9, 5, 2};
    for (int i = 0; i < 3; i++) tok[i] = arr[sub[i]][PB + STEPS];
    ok = sk_model_decode_batch(m, kb, sub, tok, 3, lg) == 0;
    for (int i = 0; i < 3; i++) {
        double d = max_abs_diff(lg + (size_t)i * V, ref + ((size_t)sub[i] * (STEPS + 2) + STEPS + 1) * V, V);
        if (d > worst) worst = d;
    }
    CHECK(ok && worst == 0 && sk_kvcache_seq_pos(kb, 9) == PB + STEPS + 1 && sk_kvcache_seq_pos(kb, 8) == PB + STEPS,
          "%s: C, sequences 9, 5, 2 step on, the others stay (max diff %.2e)", name, worst);
    /* refusals, the cache unchanged */
    int two[2] = {3, 3}, bad[1] = {NS}, t2[2] = {1, 1}, oov[1] = {V};
    CHECK(sk_model_decode_batch(m, kb, two, t2, 2, lg) != 0 && strstr(sk_last_error(), "twice"), "%s: a sequence twice refused: %s", name, sk_last_error());
    CHECK(sk_model_decode_batch(m, kb, bad, t2, 1, lg) != 0 && strstr(sk_last_error(), "not in the cache"), "%s: sequence %d refused: %s", name, NS, sk_last_error());
    CHECK(sk_model_decode_batch(m, kb, sub, oov, 1, lg) != 0 && strstr(sk_last_error(), "outside the vocabulary"), "%s: out-of-vocab token refused", name);
    CHECK(sk_model_decode_batch(m, kb, sub, tok, 1, lg) != 0 && strstr(sk_last_error(), "is full"), "%s: a full sequence refused: %s", name, sk_last_error());
    CHECK(sk_kvcache_seq_copy(kb, NS, 0) != 0 && sk_kvcache_seq_pos(kb, NS) == -1 && sk_kvcache_seq_pos(kb, 9) == PB + STEPS + 1,
          "%s: copying to a sequence not in the cache refused; positions unchanged", name);
out:
    free(ref); free(lg);
    sk_kvcache_free(kb); sk_kvcache_free(k1);
    sk_model_free(m);
}

/* A cache kept up to a multiple of SK_DECODE_CHUNK of one prompt and decoded on with another
 * that shares that prefix gives the bits of decoding the other anew (a server's prompt cache);
 * kept up to another length it need not (the chunks' matrix products differ). */
static void prefix_case(const char *name, sk_config cfg, int bf16) {
    enum { PA = 150, PB = 171, SHARE = 140 };
    sk_model *m = test_model(name, &cfg, 13);
    if (!m) return;
    const int V = cfg.vocab_size;
    int32_t a[PA], b[PB];
    for (int i = 0; i < PA; i++) a[i] = (i * 11 + 4) % V;
    for (int i = 0; i < PB; i++) b[i] = i < SHARE ? a[i] : (i * 5 + 1) % V;
    float *fresh = malloc(sizeof(float) * V), *reuse = malloc(sizeof(float) * V), *lg = malloc(sizeof(float) * V);
    sk_kvcache *kv = NULL;
    int ok = test_kv(&kv, m, PB, 2, bf16, SK_KV_F32) == 0 && sk_model_decode_seq(m, kv, 0, b, PB, fresh) == 0 &&
             sk_model_decode_seq(m, kv, 1, a, PA, lg) == 0;
    const int keep = SHARE / SK_DECODE_CHUNK * SK_DECODE_CHUNK;
    sk_kvcache_seq_truncate(kv, 1, keep);
    ok = ok && sk_model_decode_seq(m, kv, 1, b + keep, PB - keep, reuse) == 0;
    CHECK(ok && keep == 128 && !memcmp(fresh, reuse, sizeof(float) * V),
          "%s: a cache kept to %d (a multiple of SK_DECODE_CHUNK) of another prompt and decoded on: the bits of a fresh decode",
          name, keep);
    sk_kvcache_free(kv);
    free(fresh); free(reuse); free(lg);
    sk_model_free(m);
}

/* The sampler against a full sort of the vocabulary (what it did before it selected only the
 * head): the same draws, token for token, for top-k, top-p and both, on peaked, flat and tied
 * logits, vocabularies below and above the 256-entry first head. */
typedef struct { float p; int id; } ref_pi;
static int ref_desc(const void *a, const void *b) {
    const ref_pi *x = a, *y = b;
    return x->p < y->p ? 1 : x->p > y->p ? -1 : x->id - y->id;
}
static int ref_sample(const float *lg, int V, float temp, int top_k, float top_p, uint64_t *rng) {
    int best = 0;
    for (int i = 1; i < V; i++) if (lg[i] > lg[best]) best = i;
    ref_pi *pi = malloc(sizeof *pi * V);
    double sum = 0;
    for (int i = 0; i < V; i++) { pi[i].id = i; pi[i].p = expf((lg[i] - lg[best]) / temp); sum += pi[i].p; }
    int n = V;
    if ((top_k > 0 && top_k < V) || top_p < 1.0f) {
        qsort(pi, V, sizeof *pi, ref_desc);
        if (top_k > 0 && top_k < n) n = top_k;
        double kept = 0, acc = 0;
        for (int i = 0; i < n; i++) kept += pi[i].p;
        if (n == V) kept = sum;                      /* the whole mass: summed in id order */
        if (top_p < 1.0f)
            for (int i = 0; i < n; i++) { acc += pi[i].p; if (acc >= top_p * kept) { n = i + 1; break; } }
        sum = 0;
        for (int i = 0; i < n; i++) sum += pi[i].p;
    }
    sk_rng r = {*rng};
    uint64_t z = sk_rng_u64(&r);
    *rng = r.s;
    double u = (z >> 11) * (1.0 / 9007199254740992.0) * sum, acc = 0;
    int pick = pi[n - 1].id;
    for (int i = 0; i < n; i++) { acc += pi[i].p; if (u < acc) { pick = pi[i].id; break; } }
    free(pi);
    return pick;
}
static void sampler_vs_sort(void) {
    static const int Vs[] = {5, 200, 256, 257, 1000, 50257};
    static const struct { int k; float p; } kp[] = {{0, 1.0f}, {1, 1.0f}, {40, 1.0f}, {300, 1.0f}, {0, 0.9f},
                                                    {0, 0.5f}, {0, 0.999f}, {0, 1e-6f}, {50, 0.95f}, {400, 0.8f}};
    unsigned long long s = 17;
    int draws = 0, diff = 0;
    for (size_t vi = 0; vi < sizeof Vs / sizeof Vs[0]; vi++) {
        int V = Vs[vi];
        float *lg = malloc(sizeof(float) * V);
        for (int kind = 0; kind < 3; kind++) {
            fill_uniform(lg, V, &s);
            /* 0: peaked (a few large logits), 1: flat, 2: ties (8 distinct values) */
            for (int i = 0; i < V; i++)
                lg[i] = kind == 0 ? lg[i] * 4 + (i % 97 == 3 ? 6.0f : 0.0f) : kind == 1 ? lg[i] * 0.1f : (float)((int)((lg[i] + 1) * 4));
            for (size_t c = 0; c < sizeof kp / sizeof kp[0]; c++)
                for (int t = 0; t < 2; t++) {
                    float temp = t ? 1.3f : 0.7f;
                    uint64_t r1 = 99 + c, r2 = 99 + c;
                    for (int d = 0; d < 6; d++, draws++)
                        diff += sk_sample_token(lg, V, temp, kp[c].k, kp[c].p, &r1) != ref_sample(lg, V, temp, kp[c].k, kp[c].p, &r2);
                }
        }
        free(lg);
    }
    CHECK(diff == 0 && draws > 1000, "sampler: the head's selection draws what a full sort of the vocabulary draws (%d of %d differ)", diff, draws);
    /* top-p's share is of the whole mass: two logits of 10 among 50255 in [-10, -9.5] at
     * temperature 0.5 each hold 0.5 - 2e-13, so the nucleus of 0.5 is both of them (a sum in
     * descending order rounds the tail away and keeps one) */
    int V = 50257, cnt[2] = {0, 0};
    float *lg = malloc(sizeof(float) * V);
    fill_uniform(lg, V, &s);
    for (int i = 0; i < V; i++) lg[i] = i == 50000 || i == 50100 ? 10.0f : -9.75f + 0.25f * lg[i];
    for (uint64_t seed = 1; seed <= 200; seed++) {
        uint64_t r = seed;
        int t = sk_sample_token(lg, V, 0.5f, 0, 0.5f, &r);
        cnt[0] += t == 50000; cnt[1] += t == 50100;
    }
    free(lg);
    CHECK(cnt[0] + cnt[1] == 200 && cnt[0] > 50 && cnt[1] > 50,
          "sampler: top-p 0.5 over two tokens of 0.5 - 2e-13 each keeps both (%d and %d of 200 draws)", cnt[0], cnt[1]);
}

/* Rounding to bf16 on known bit patterns, and the bf16 linear kernel on every length class
 * (32-wide blocks, 8-wide blocks, scalar tail) against a double-precision sum. */
/* The row kernels give each row the bits it gets alone, whatever the number of rows and
 * whatever its neighbours (two rows by two weight rows at a time where the CPU allows), at
 * widths with every kind of tail (32-blocks, 8-blocks, scalars) and an odd output count. */
static void rows_invariance(void) {
    enum { N = 7, OC = 9 };
    const int widths[] = {45, 32, 13, 96};
    int ok = 1;
    for (int wi = 0; wi < 4; wi++) {
        const int IC = widths[wi];
        float *x = malloc(sizeof(float) * N * IC), *w = malloc(sizeof(float) * OC * IC), b[OC], all[N * OC], one[OC];
        uint16_t *w16 = malloc(sizeof(uint16_t) * OC * IC);
        for (int i = 0; i < N * IC; i++) x[i] = sinf(0.37f * i) * 1.7f;
        for (int i = 0; i < OC * IC; i++) w[i] = cosf(0.11f * i + 0.5f) * 0.9f;
        for (int i = 0; i < OC; i++) b[i] = 0.01f * i;
        sk_bf16_from_f32_n(w16, w, (size_t)OC * IC);
        for (int bf = 0; bf < 2; bf++) {
            if (bf) sk_linear_forward_bf16(all, x, w16, b, N, IC, OC);
            else sk_linear_forward_rows(all, x, w, b, N, IC, OC);
            for (int n = 0; n < N; n++) {
                if (bf) sk_linear_forward_bf16(one, x + (size_t)n * IC, w16, b, 1, IC, OC);
                else sk_linear_forward_rows(one, x + (size_t)n * IC, w, b, 1, IC, OC);
                ok &= !memcmp(one, all + (size_t)n * OC, sizeof one);
            }
        }
        free(x); free(w); free(w16);
    }
    CHECK(ok, "the row kernels (fp32 and bf16) give each of 7 rows the bits it gets alone, widths 45/32/13/96, 9 outputs");
}

static void bf16_kernels(void) {
    static const struct { uint32_t in; uint16_t out; } cases[] = {
        {0x3f800000u, 0x3f80}, {0x3f808000u, 0x3f80}, {0x3f818000u, 0x3f82}, {0x3f808001u, 0x3f81},
        {0x3f80ffffu, 0x3f81}, {0xc0000000u, 0xc000}, {0x7f7fffffu, 0x7f80}, {0x7f800000u, 0x7f80},
        {0xff800000u, 0xff80}, {0x00000001u, 0x0000}, {0x00008000u, 0x0000}, {0x00018000u, 0x0002},
        {0x80000000u, 0x8000}, {0x7fc00000u, 0x7fc0}, {0x7f800001u, 0x7fc0}, {0xffffffffu, 0xffff},
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float f; memcpy(&f, &cases[i].in, 4);
        uint16_t h = sk_bf16_from_f32(f);
        if (h != cases[i].out) { ok = 0; printf("   bf16(0x%08x) = 0x%04x, want 0x%04x\n", cases[i].in, h, cases[i].out); }
    }
    CHECK(ok, "fp32 -> bf16 rounds to nearest even on %zu known bit patterns (ties, overflow, NaN, denormals)",
          sizeof cases / sizeof cases[0]);
    unsigned long long s = 3;
    double worst = 0;
    for (int IC = 1; IC <= 77; IC += 3) {
        int N = 1 + IC % 3, OC = 5;
        float *x = malloc(sizeof(float) * N * IC), *w = malloc(sizeof(float) * OC * IC), b[5], out[15];
        uint16_t *w16 = malloc(2 * (size_t)OC * IC);
        fill_uniform(x, (size_t)N * IC, &s); fill_uniform(w, (size_t)OC * IC, &s); fill_uniform(b, 5, &s);
        sk_bf16_from_f32_n(w16, w, (size_t)OC * IC);
        sk_linear_forward_bf16(out, x, w16, IC % 2 ? b : NULL, N, IC, OC);
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                double r = IC % 2 ? b[o] : 0;
                for (int k = 0; k < IC; k++) r += (double)sk_bf16_to_f32(sk_bf16_from_f32(x[n * IC + k])) * sk_bf16_to_f32(w16[o * IC + k]);
                double d = fabs(out[n * OC + o] - r);
                if (d > worst) worst = d;
            }
        free(x); free(w); free(w16);
    }
    CHECK(worst < 1e-5, "bf16 linear kernel equals a double sum on bf16 weights and bf16-rounded activations, IC 1..76, N 1..3 (max diff %.2e)", worst);
    /* the fp32 kernel of decoding: the same sums, and the same bits on 1 and 3 threads (a
     * matrix big enough to be split) */
    worst = 0;
    int same = 1, threads = omp_get_max_threads();
    for (int IC = 1; IC <= 300; IC += IC < 80 ? 3 : 110) {
        int N = 1 + IC % 3, OC = IC > 80 ? 700 : 5;
        float *x = malloc(sizeof(float) * N * IC), *w = malloc(sizeof(float) * OC * IC), *b = malloc(sizeof(float) * OC);
        float *out = malloc(sizeof(float) * N * OC), *out3 = malloc(sizeof(float) * N * OC);
        fill_uniform(x, (size_t)N * IC, &s); fill_uniform(w, (size_t)OC * IC, &s); fill_uniform(b, OC, &s);
        omp_set_num_threads(1);
        sk_linear_forward_rows(out, x, w, IC % 2 ? b : NULL, N, IC, OC);
        omp_set_num_threads(3);
        sk_linear_forward_rows(out3, x, w, IC % 2 ? b : NULL, N, IC, OC);
        same &= !memcmp(out, out3, sizeof(float) * N * OC);
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                double r = IC % 2 ? b[o] : 0;
                for (int k = 0; k < IC; k++) r += (double)x[n * IC + k] * w[o * IC + k];
                double d = fabs(out[n * OC + o] - r);
                if (d > worst) worst = d;
            }
        free(x); free(w); free(b); free(out); free(out3);
    }
    omp_set_num_threads(threads);
    CHECK(worst < 1e-5 && same, "fp32 decoding linear kernel equals a double sum, IC 1..300, N 1..3 (max diff %.2e), "
          "bit-identical on 1 and 3 threads", worst);
}

int main(void) {
    rows_invariance();
    bf16_kernels();
    sampler_vs_sort();
    threads_case();
    sk_config c;
    sk_config_default(&c);
    c.n_layer = 4; c.n_head = 4; c.n_embd = 32; c.vocab_size = 50; c.block_size = 160;
    run_case("gpt2 baseline", c, 5, 20);
    c.n_skip_layer = 2; c.n_skip_head = 2;
    run_case("gpt2 sla 2/2", c, 70, 12);    /* prompt longer than one decode chunk */
    c.n_skip_layer = 1; c.n_skip_head = 4;
    run_case("gpt2 sla 1/4 (all heads)", c, 3, 15);
    c.n_skip_layer = 0; c.n_skip_head = 0; c.n_layer = 6;
    sk_config_set(&c, "routing", "3-5:1=-3;4-5:3=-1;5:0=@1");   /* stored heads not contiguous */
    run_case("gpt2 multi-source routing", c, 7, 15);
    batch_case("batch: gpt2 multi-source routing", c, SK_WEIGHTS_F32, SK_KV_F32);
    for (int th = 1; th <= 2; th++) {
        omp_set_num_threads(th);
        batch_case(th == 1 ? "batch: gpt2 multi-source routing, bf16 K/V, 1 thread" : "batch: gpt2 multi-source routing, bf16 K/V, 2 threads",
                   c, SK_WEIGHTS_F32, SK_KV_BF16);
    }
    kv16_case("bf16 K/V: gpt2 multi-source routing", c);
    c.routing[0] = 0; c.n_layer = 4;
    sk_config_default(&c);
    c.family = SK_LLAMA; c.n_layer = 4; c.n_head = 4; c.n_kv_head = 2; c.n_embd = 32; c.vocab_size = 50;
    c.block_size = 64; c.bias = 0; c.norm_eps = 1e-6f;
    run_case("llama gqa", c, 4, 20);
    c.n_skip_layer = 3; c.n_skip_head = 2;
    run_case("llama gqa sla 3/2", c, 9, 20);
    c.sinusoidal = 1; c.relu = 1;
    run_case("llama sinusoidal relu sla", c, 6, 10);
    c.sinusoidal = 0; c.relu = 0; c.n_skip_layer = 2; c.vocab_size = 1000;  /* bf16: the classifier widens in blocks */
    batch_case("batch: llama gqa sla 2/2", c, SK_WEIGHTS_F32, SK_KV_F32);
    batch_case("batch: llama gqa sla 2/2, bf16", c, SK_WEIGHTS_BF16, SK_KV_F32);
    for (int th = 1; th <= 2; th++) {
        omp_set_num_threads(th);
        batch_case(th == 1 ? "batch: llama gqa sla 2/2, bf16 K/V, 1 thread" : "batch: llama gqa sla 2/2, bf16 K/V, 2 threads",
                   c, SK_WEIGHTS_F32, SK_KV_BF16);
        batch_case(th == 1 ? "batch: llama gqa sla 2/2, 8-bit weights, bf16 K/V, 1 thread" : "batch: llama gqa sla 2/2, 8-bit weights, bf16 K/V, 2 threads",
                   c, SK_WEIGHTS_Q8, SK_KV_BF16);
    }
    kv16_case("bf16 K/V: llama gqa sla 2/2", c);
    c.block_size = 200;
    prefix_case("prompt cache: llama gqa sla 2/2", c, 0);
    prefix_case("prompt cache: llama gqa sla 2/2, bf16", c, 1);
    sk_config_default(&c);
    c.n_layer = 3; c.n_head = 2; c.n_embd = 16; c.vocab_size = 40; c.block_size = 40;
    c.sinusoidal = 1; c.relu = 1; c.n_skip_layer = 1; c.n_skip_head = 1;
    run_case("gpt2 sinusoidal relu sla", c, 4, 12);

    /* sampling: greedy, top-k 1 = greedy, seeded reproducibility, top-p keeps the head */
    float lg[5] = {0.1f, 2.0f, -1.0f, 1.9f, 0.0f};
    CHECK(sk_sample_token(lg, 5, 0, 0, 1, NULL) == 1, "greedy picks the argmax");
    uint64_t r1 = 5, r2 = 5; int same = 1, cnt[5] = {0};
    for (int i = 0; i < 2000; i++) {
        int a = sk_sample_token(lg, 5, 1.0f, 0, 1.0f, &r1), b = sk_sample_token(lg, 5, 1.0f, 0, 1.0f, &r2);
        same &= a == b; cnt[a]++;
    }
    CHECK(same, "same seed, same samples");
    double z = expf(0.1f) + expf(2.0f) + expf(-1.0f) + expf(1.9f) + expf(0.0f);
    CHECK(fabs(cnt[1] / 2000.0 - expf(2.0f) / z) < 0.04, "temperature-1 frequency of the top token %.3f ~ %.3f", cnt[1] / 2000.0, expf(2.0f) / z);
    int ok = 1; uint64_t r = 9;
    for (int i = 0; i < 500; i++) { int a = sk_sample_token(lg, 5, 1.0f, 2, 1.0f, &r); ok &= a == 1 || a == 3; }
    CHECK(ok, "top-k 2 only draws the two most likely tokens");
    ok = 1;
    for (int i = 0; i < 500; i++) ok &= sk_sample_token(lg, 5, 1.0f, 0, 0.3f, &r) == 1;
    CHECK(ok, "top-p 0.3 keeps only the most likely token");
    TEST_END();
}
