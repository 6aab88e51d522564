/* Decoding's batch-invariant matrix products (src/core/gemm_rows.c), fp32, bf16 and 8-bit
 * weights: every row of a batch of 1..32 rows gives the bits it gets alone, on 1 and 2
 * threads, at widths with every remainder (32-wide steps, 8-wide steps, scalars) and output
 * counts that leave every tile tail; each output has the bits of one fixed summation order,
 * written out here in scalar code (the order of the one-row kernel before the tiles, so
 * decoding's fp32 and bf16 results are unchanged); the 8-bit kernel gives the fp32 kernel's
 * bits on the dequantized weights. Then whole models: a decoding step of N = 1..32 sequences
 * gives each sequence the logits' bits of decoding it alone, in all three precisions. */
#include "test.h"
#include "test_models.h"
#include "skiplm.h"
#include "core/ops.h"
#include "core/quant.h"
#include "core/gemm_rows.h"
#include <omp.h>

static uint64_t rng = 88172645463325252ull;
static float frand(void) {                /* in [-1, 1) times 2^e, e in [-6, 5]: sums that depend on their order */
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    float u = (float)(rng >> 40) / 8388608.0f - 1.0f;
    int e = (int)((rng >> 20) % 12) - 6;
    return ldexpf(u, e);
}

/* x . w in the kernels' order (see gemm_rows.c) */
static float ref_dot(const float *x, const float *w, int n) {
    int k = 0;
#if defined(__AVX2__) && defined(__FMA__)
    float c[32] = {0}, v[8], h[4];
    for (; k + 32 <= n; k += 32)
        for (int j = 0; j < 32; j++) c[j] = fmaf(w[k + j], x[k + j], c[j]);
    for (; k + 8 <= n; k += 8)
        for (int j = 0; j < 8; j++) c[j] = fmaf(w[k + j], x[k + j], c[j]);
    for (int j = 0; j < 8; j++) v[j] = (c[j] + c[8 + j]) + (c[16 + j] + c[24 + j]);
    for (int j = 0; j < 4; j++) h[j] = v[j] + v[4 + j];
    float s = (h[0] + h[2]) + (h[1] + h[3]);
#else
    float a[8] = {0};
    for (; k + 8 <= n; k += 8)
        for (int j = 0; j < 8; j++) a[j] += x[k + j] * w[k + j];
    float s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
#endif
    for (; k < n; k++) s += x[k] * w[k];
    return s;
}

enum { NMAX = 32 };

/* one weight kind at one shape: batches of 1..NMAX rows against each row alone and against
 * ref_dot on the weights as floats (wf: fp32, bf16 widened, or q * d) */
static int kind_shape(int kind, int IC, int OC, int bias, double *worst_ref) {
    float *x = malloc(sizeof(float) * NMAX * IC), *w = malloc(sizeof(float) * OC * IC), *wf = malloc(sizeof(float) * OC * IC);
    float *b = malloc(sizeof(float) * OC), *all = malloc(sizeof(float) * NMAX * OC), *one = malloc(sizeof(float) * OC);
    float *viaf = malloc(sizeof(float) * NMAX * OC);
    uint16_t *w16 = malloc(sizeof(uint16_t) * OC * IC), *d = malloc(sizeof(uint16_t) * OC * (IC / 32 + 1));
    int8_t *q = malloc((size_t)OC * IC);
    for (int i = 0; i < NMAX * IC; i++) x[i] = frand();
    for (int i = 0; i < OC * IC; i++) w[i] = frand();
    for (int i = 0; i < OC; i++) b[i] = frand();
    if (kind == 1) {
        sk_bf16_from_f32_n(w16, w, (size_t)OC * IC);
        sk_bf16_to_f32_n(wf, w16, (size_t)OC * IC);
    } else if (kind == 2) {
        sk_q8_quantize(q, d, w, (size_t)OC * IC);
        sk_q8_dequantize(wf, q, d, (size_t)OC * IC);
    } else {
        memcpy(wf, w, sizeof(float) * OC * IC);
    }
    const float *bb = bias ? b : NULL;
#define RUN(o, in, n) (kind == 0 ? sk_linear_forward_rows(o, in, w, bb, n, IC, OC) \
                     : kind == 1 ? sk_linear_forward_bf16(o, in, w16, bb, n, IC, OC) \
                     : sk_linear_forward_q8(o, in, q, d, bb, n, IC, OC))
    int ok = 1;
    for (int N = 1; N <= NMAX; N++) {
        RUN(all, x, N);
        for (int r = 0; r < N; r++) {
            RUN(one, x + (size_t)r * IC, 1);
            ok &= !memcmp(one, all + (size_t)r * OC, sizeof(float) * OC);
        }
    }
    /* the full batch against the scalar order (and, for 8 bits, against the fp32 kernel on q * d) */
    for (int r = 0; r < NMAX; r++)
        for (int o = 0; o < OC; o++) {
            float want = (bias ? b[o] : 0.0f) + ref_dot(x + (size_t)r * IC, wf + (size_t)o * IC, IC), got = all[(size_t)r * OC + o];
            if (memcmp(&want, &got, 4)) { ok = 0; double e = fabs((double)want - got); if (e > *worst_ref) *worst_ref = e; }
        }
    if (kind == 2) {
        sk_linear_forward_rows(viaf, x, wf, bb, NMAX, IC, OC);
        ok &= !memcmp(viaf, all, sizeof(float) * NMAX * OC);
    }
#undef RUN
    free(x); free(w); free(wf); free(b); free(all); free(one); free(viaf); free(w16); free(d); free(q);
    return ok;
}

static void kernels(void) {
    static const char *names[] = {"fp32", "bf16", "8-bit"};
    /* widths: 32-wide steps only, + an 8-wide step, + scalars, scalars only, model widths;
     * outputs: every remainder of the tiles, and enough work for the threads to split */
    static const int ic_all[] = {32, 40, 45, 7, 13, 96, 200, 288, 768};
    static const int oc_all[] = {1, 2, 3, 4, 5, 7, 13, 67};
    for (int kind = 0; kind < 3; kind++)
        for (int th = 1; th <= 2; th++) {
            omp_set_num_threads(th);
            int ok = 1, shapes = 0;
            double worst = 0;
            for (size_t i = 0; i < sizeof ic_all / sizeof ic_all[0]; i++)
                for (size_t j = 0; j < sizeof oc_all / sizeof oc_all[0]; j++) {
                    if (kind == 2 && ic_all[i] % 32) continue;             /* 8-bit rows are whole blocks */
                    ok &= kind_shape(kind, ic_all[i], oc_all[j], (int)(i + j) & 1, &worst);
                    shapes++;
                }
            CHECK(ok, "%s weights, %d thread%s (%s): each row of batches of 1..%d rows has the bits it gets alone and "
                  "the bits of the fixed summation order%s, %d shapes (widths 7-768, 1-67 outputs; worst diff %.2e)",
                  names[kind], th, th > 1 ? "s" : "", sk_rows_kernel(), NMAX,
                  kind == 2 ? ", which are the fp32 kernel's on q * d" : "", shapes, worst);
        }
    omp_set_num_threads(2);
}

/* the same two rows through the 2-thread split of a large matrix and through one thread */
static void threads_large(void) {
    enum { IC = 768, OC = 2051, N = 19 };
    float *x = malloc(sizeof(float) * N * IC), *w = malloc(sizeof(float) * OC * IC), *a = malloc(sizeof(float) * N * OC), *c = malloc(sizeof(float) * N * OC);
    for (int i = 0; i < N * IC; i++) x[i] = frand();
    for (int i = 0; i < OC * IC; i++) w[i] = frand();
    omp_set_num_threads(1);
    sk_linear_forward_rows(a, x, w, NULL, N, IC, OC);
    omp_set_num_threads(2);
    sk_linear_forward_rows(c, x, w, NULL, N, IC, OC);
    CHECK(!memcmp(a, c, sizeof(float) * N * OC), "a 2051 x 768 matrix, 19 rows: the same bits on 1 and 2 threads");
    free(x); free(w); free(a); free(c);
}

/* Whole models: sequence s decoded alone (a prompt of 1 + s % 3 tokens, then one token) against
 * the same step taken by the first N sequences together, N = 1..32. */
static void model_case(const char *name, sk_config cfg, sk_weights wt) {
    enum { NS = 32, PMAX = 3 };
    sk_model *m = test_model(name, &cfg, 7);
    if (!m) return;
    const int V = cfg.vocab_size;
    sk_kvcache *kb = NULL, *k1 = NULL;
    float *ref = malloc(sizeof(float) * NS * V), *lg = malloc(sizeof(float) * NS * V);
    int32_t toks[NS][PMAX + 1], step[NS];
    int seqs[NS], plen[NS];
    int ok = test_kv(&kb, m, 8, NS, wt, SK_KV_F32) == 0 && test_kv(&k1, m, 8, 1, wt, SK_KV_F32) == 0;
    for (int s = 0; s < NS && ok; s++) {
        plen[s] = 1 + s % PMAX;
        for (int i = 0; i <= plen[s]; i++) toks[s][i] = (s * 7 + i * 5 + 3) % V;
        sk_kvcache_reset(k1);
        ok = sk_model_decode(m, k1, toks[s], plen[s], lg) == 0 && sk_model_decode(m, k1, toks[s] + plen[s], 1, ref + (size_t)s * V) == 0 &&
             sk_model_decode_seq(m, kb, s, toks[s], plen[s], lg) == 0;
        seqs[s] = s; step[s] = toks[s][plen[s]];
    }
    const char *wname = wt == SK_WEIGHTS_BF16 ? "bf16" : wt == SK_WEIGHTS_Q8 ? "8-bit" : "fp32";
    for (int th = 1; th <= 2; th++) {
        omp_set_num_threads(th);
        int same = ok, bad = 0;
        for (int N = 1; N <= NS && same; N++) {
            same &= sk_model_decode_batch(m, kb, seqs, step, N, lg) == 0;
            for (int s = 0; s < N && same; s++) {
                if (memcmp(lg + (size_t)s * V, ref + (size_t)s * V, sizeof(float) * V)) { same = 0; bad = N; }
                sk_kvcache_seq_truncate(kb, s, plen[s]);
            }
        }
        CHECK(same, "%s, %s weights, %d thread%s: a step of N = 1..%d sequences gives each the logits' bits of decoding it "
              "alone (first N that differs: %d, 0 for none)", name, wname, th, th > 1 ? "s" : "", NS, bad);
    }
    omp_set_num_threads(2);
    free(ref); free(lg);
    sk_kvcache_free(kb); sk_kvcache_free(k1);
    sk_model_free(m);
}

int main(void) {
    printf("# row kernel: %s\n", sk_rows_kernel());
    kernels();
    threads_large();
    sk_config c, g;
    sk_config_default(&c);
    c.family = SK_LLAMA; c.n_layer = 2; c.n_head = 4; c.n_kv_head = 2; c.n_embd = 96; c.ffn_hidden = 160;
    c.vocab_size = 77; c.block_size = 16; c.bias = 0; c.norm_eps = 1e-5f;
    for (int wt = 0; wt < 3; wt++) model_case("llama 96 wide, GQA", c, (sk_weights)wt);
    sk_config_default(&g);
    g.n_layer = 2; g.n_head = 3; g.n_embd = 45; g.vocab_size = 51; g.block_size = 16;
    model_case("gpt2 45 wide", g, SK_WEIGHTS_F32);
    model_case("gpt2 45 wide", g, SK_WEIGHTS_BF16);
    return sk_test_failed ? 1 : 0;
}
