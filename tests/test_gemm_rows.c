/* Decoding's batch-invariant matrix products (src/core/gemm_rows.c, gemm_rows_bf16.c), fp32,
 * bf16 and 8-bit weights: every row of a batch of 1..32 rows gives the bits it gets alone, on
 * 1 and 2 threads, at widths with every remainder (32-wide steps, 8-wide steps, scalars) and
 * output counts that leave every tile tail; each output has the bits of one fixed summation
 * order, written out here in scalar code (fp32: the order of the one-row kernel before the
 * tiles, so decoding's fp32 results are unchanged; bf16: vdpbf16ps's order on activations
 * rounded to bf16); the 8-bit kernel gives the fp32 kernel's bits on the dequantized weights.
 * bf16 runs both on the CPU's vdpbf16ps (where it has avx512_bf16) and on the emulation, and
 * the file's AVX2 and SSE2 builds (compiled into this test by the Makefile on x86-64) must
 * give the same bits, also for random bit patterns (denormals, infinities, NaNs). The 8-bit
 * prompt kernel (gemm_q8dot.c: activations quantized per block, int8 dot products) likewise on
 * every path, and within its quantization error of x . (q * d). Then whole models: a decoding
 * step of N = 1..32 sequences gives each sequence the logits' bits of decoding it alone, in all
 * three precisions, and bf16 decoding on the emulation gives the bits of the CPU's path. */
#include "test.h"
#include "test_models.h"
#include "skiplm.h"
#include "core/ops.h"
#include "core/quant.h"
#include "core/gemm_rows.h"
#include <float.h>
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

/* x . w for bf16 w in gemm_rows_bf16.c's order: x rounded to bf16; blocks of 32 (the last
 * zero-padded), block j into chain j % 2, lane l: element 2l + 1 then 2l, each an fma with a
 * denormal input read as zero and a denormal result flushed (vdpbf16ps); chains added, lanes
 * l + l + 8, then ((y0 + y4) + (y2 + y6)) + ((y1 + y5) + (y3 + y7)) */
static float flush(float v) { return fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v; }
static float ref_bf16(const float *x, const uint16_t *w, int n) {
    float c[2][16] = {{0}}, v[16], y[8];
    for (int j = 0; 32 * j < n; j++)
        for (int l = 0; l < 16; l++)
            for (int e = 1; e >= 0; e--) {
                const int k = 32 * j + 2 * l + e;
                const float xv = k < n ? flush(sk_bf16_to_f32(sk_bf16_from_f32(x[k]))) : 0.0f;
                const float wv = k < n ? flush(sk_bf16_to_f32(w[k])) : 0.0f;
                c[j & 1][l] = flush(fmaf(xv, wv, c[j & 1][l]));
            }
    for (int l = 0; l < 16; l++) v[l] = c[0][l] + c[1][l];
    for (int l = 0; l < 8; l++) y[l] = v[l] + v[l + 8];
    return ((y[0] + y[4]) + (y[2] + y[6])) + ((y[1] + y[5]) + (y[3] + y[7]));
}

/* the same file built for AVX2 (-march=x86-64-v3) and for SSE2 (-march=x86-64), names suffixed */
#ifdef SK_ROWS_VARIANTS
void sk_linear_forward_bf16_avx2(float *out, const float *inp, const uint16_t *w, const float *b, int N, int IC, int OC);
void sk_rows_set_emulate_avx2(int on);
const char *sk_rows_bf16_kernel_avx2(void);
void sk_linear_forward_bf16_sse2(float *out, const float *inp, const uint16_t *w, const float *b, int N, int IC, int OC);
void sk_rows_set_emulate_sse2(int on);
const char *sk_rows_bf16_kernel_sse2(void);
int sk_linear_forward_q8_prompt_avx2(float *out, const float *inp, const int8_t *q, const uint16_t *d, const float *b, int N, int IC, int OC);
void sk_q8_prompt_set_emulate_avx2(int on);
const char *sk_q8_prompt_kernel_avx2(void);
int sk_linear_forward_q8_prompt_sse2(float *out, const float *inp, const int8_t *q, const uint16_t *d, const float *b, int N, int IC, int OC);
void sk_q8_prompt_set_emulate_sse2(int on);
const char *sk_q8_prompt_kernel_sse2(void);
#endif

/* x . (q * d) in gemm_q8dot.c's order: x quantized per block of 32 (e = max|x| / 127, p = x / e
 * to nearest even); blocks in pairs (the last zero-padded), lane l of pair j the integer sum of
 * k = 64j + 4l .. 64j + 4l + 3, added as fma(sum, e_b * d_b, c_l); lanes folded as ref_bf16's */
static float ref_q8p(const float *x, const int8_t *q, const uint16_t *d, int n) {
    const int nb = n / 32;
    int p[4096];
    float e[128], c[16] = {0}, v[8];
    for (int b = 0; b < nb; b++) {
        float amax = 0;
        for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(x[32 * b + k]));
        e[b] = amax / 127.0f;
        for (int k = 0; k < 32; k++) p[32 * b + k] = e[b] > 0 ? (int)nearbyintf(x[32 * b + k] / e[b]) : 0;
    }
    for (int j = 0; 64 * j < n; j++)
        for (int l = 0; l < 16; l++) {
            const int b = 2 * j + l / 8;
            int32_t sum = 0;
            for (int t = 0; t < 4; t++)
                if (b < nb) sum += p[64 * j + 4 * l + t] * q[64 * j + 4 * l + t];
            const float sc = b < nb ? e[b] * sk_f16_to_f32(d[b]) : 0.0f;
            c[l] = fmaf((float)sum, sc, c[l]);
        }
    for (int l = 0; l < 8; l++) v[l] = c[l] + c[l + 8];
    return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
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
            const float dot = kind == 1 ? ref_bf16(x + (size_t)r * IC, w16 + (size_t)o * IC, IC) : ref_dot(x + (size_t)r * IC, wf + (size_t)o * IC, IC);
            float want = (bias ? b[o] : 0.0f) + dot, got = all[(size_t)r * OC + o];
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
    for (int run = 0; run < 4; run++) {
        /* bf16 on this CPU's path, then on the emulation (the same path where the CPU lacks avx512_bf16) */
        const int kind = run < 2 ? run : run - 1;
        sk_rows_set_emulate(run == 2);
        const char *kname = kind == 1 ? sk_rows_bf16_kernel() : sk_rows_kernel();
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
                  names[kind], th, th > 1 ? "s" : "", kname, NMAX,
                  kind == 2 ? ", which are the fp32 kernel's on q * d" : "", shapes, worst);
        }
    }
    sk_rows_set_emulate(0);
    omp_set_num_threads(2);
}

/* a random bf16 / fp32 bit pattern: every exponent, denormals, infinities and NaNs included */
static uint32_t rbits(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 21); }

/* one bf16 matrix product through each path this build has: the CPU's (vdpbf16ps or not), the
 * emulation, the AVX2 and SSE2 builds of the file; all must be the bits of ref_bf16 (NaN where
 * it is NaN). special: operands of random bits (denormals, huge values, infinities, NaNs); else
 * ordinary values. */
static int paths_agree(int special, int IC, int OC, int N, int *npaths, int *finite, int *tiny) {
    float *x = malloc(sizeof(float) * N * IC), *b = malloc(sizeof(float) * OC), *want = malloc(sizeof(float) * N * OC);
    float *got = malloc(sizeof(float) * N * OC);
    uint16_t *w = malloc(sizeof(uint16_t) * OC * IC);
    /* special: tiny values (fp32 and bf16 denormals, products and sums below FLT_MIN) in most
     * places, random bits (huge, infinite, NaN) in row 0 and output 0 */
    for (int i = 0; i < N * IC; i++) {
        uint32_t u = rbits() | (rbits() << 11 & 0xfffff800u);
        x[i] = frand();
        if (special) x[i] = ldexpf(frand(), -118 - (int)(rbits() % 30));
        if (special && i < IC && i % 5 == 0) memcpy(&x[i], &u, 4);        /* row 0 */
    }
    for (int i = 0; i < OC * IC; i++) {
        w[i] = sk_bf16_from_f32(frand());
        if (special && i % 2 == 1) w[i] = sk_bf16_from_f32(ldexpf(frand(), -(int)(rbits() % 30)));
        if (special && i % 5 == 0) w[i] = (uint16_t)(rbits() & 0x80ffu);          /* bf16 denormals */
        if (special && i < IC && i % 7 == 3) w[i] = (uint16_t)rbits();    /* output 0 */
    }
    for (int i = 0; i < OC; i++) b[i] = frand();
    for (int r = 0; r < N; r++)
        for (int o = 0; o < OC; o++) want[(size_t)r * OC + o] = (special ? 0.0f : b[o]) + ref_bf16(x + (size_t)r * IC, w + (size_t)o * IC, IC);
    const float *bb = special ? NULL : b;                  /* (a bias would hide the tiny sums) */
    for (size_t i = 0; i < (size_t)N * OC; i++) {
        *finite += isfinite(want[i]) != 0;
        *tiny += fabsf(want[i]) < 1e-30f;
    }
    int ok = 1, n = 0;
#define SAME(call) do {         call; n++;         for (size_t i_ = 0; i_ < (size_t)N * OC; i_++)             if (memcmp(&got[i_], &want[i_], 4) && !(isnan(got[i_]) && isnan(want[i_]))) { ok = 0; break; }     } while (0)
    for (int e = 0; e < 2; e++) {
        sk_rows_set_emulate(e);
        SAME(sk_linear_forward_bf16(got, x, w, bb, N, IC, OC));
#ifdef SK_ROWS_VARIANTS
        sk_rows_set_emulate_avx2(e);
        SAME(sk_linear_forward_bf16_avx2(got, x, w, bb, N, IC, OC));
        sk_rows_set_emulate_sse2(e);
        SAME(sk_linear_forward_bf16_sse2(got, x, w, bb, N, IC, OC));
#endif
    }
#undef SAME
    sk_rows_set_emulate(0);
    *npaths = n;
    free(x); free(b); free(want); free(got); free(w);
    return ok;
}

static void bf16_paths(void) {
#ifdef SK_ROWS_VARIANTS
    sk_rows_set_emulate_avx2(1);
    sk_rows_set_emulate_sse2(1);
    printf("# bf16 paths: %s; %s; %s\n", sk_rows_bf16_kernel(), sk_rows_bf16_kernel_avx2(), sk_rows_bf16_kernel_sse2());
#else
    printf("# bf16 paths: %s (no AVX2 / SSE2 builds of the file in this test)\n", sk_rows_bf16_kernel());
#endif
    static const int shapes[][3] = {{768, 67, 19}, {45, 7, 5}, {96, 13, 32}, {7, 3, 4}, {200, 5, 9}};
    for (int special = 0; special < 2; special++) {
        int ok = 1, np = 0, finite = 0, tiny = 0, total = 0;
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            ok &= paths_agree(special, shapes[i][0], shapes[i][1], shapes[i][2], &np, &finite, &tiny);
            total += shapes[i][1] * shapes[i][2];
        }
        CHECK(ok, "bf16 weights, %s: vdpbf16ps (where the CPU has it), its emulation, and the AVX2 and SSE2 builds "
              "(%d paths) give the bits of the scalar order, 5 shapes, %d of %d outputs finite, %d below 1e-30", special ? "tiny operands "
              "(denormals, products and sums below FLT_MIN), random bits in one row and one output (huge, infinite, NaN)" : "ordinary values",
              np, finite, total, tiny);
    }
}

/* Prompt chunks with 8-bit weights (gemm_q8dot.c): every path (vpdpbusd where the CPU has
 * avx512_vnni, the path without it, the AVX2 and SSE2 builds) gives ref_q8p's bits for each row
 * of batches of 1..32 rows, on 1 and 2 threads; and the result is x . (q * d) within the error
 * the activations' quantization allows (sum_k |q_k d_k| e_b / 2, plus fp32 rounding), which is
 * measurably not zero. */
static void q8_prompt(void) {
#ifdef SK_ROWS_VARIANTS
    sk_q8_prompt_set_emulate_avx2(1);
    sk_q8_prompt_set_emulate_sse2(1);
    printf("# 8-bit prompt paths: %s; %s; %s\n", sk_q8_prompt_kernel(), sk_q8_prompt_kernel_avx2(), sk_q8_prompt_kernel_sse2());
#else
    printf("# 8-bit prompt path: %s\n", sk_q8_prompt_kernel());
#endif
    static const int ic_all[] = {32, 64, 96, 288, 768}, oc_all[] = {1, 2, 3, 4, 5, 13, 67};
    int same = 1, paths = 0, shapes = 0;
    double worst_ratio = 0, apart = 0;
    for (size_t i = 0; i < sizeof ic_all / sizeof ic_all[0]; i++)
        for (size_t jj = 0; jj < sizeof oc_all / sizeof oc_all[0]; jj++) {
            const int IC = ic_all[i], OC = oc_all[jj];
            float *x = malloc(sizeof(float) * NMAX * IC), *w = malloc(sizeof(float) * OC * IC), *wf = malloc(sizeof(float) * OC * IC);
            float *b = malloc(sizeof(float) * OC), *all = malloc(sizeof(float) * NMAX * OC), *one = malloc(sizeof(float) * OC);
            uint16_t *d = malloc(sizeof(uint16_t) * OC * IC / 32);
            int8_t *q = malloc((size_t)OC * IC);
            for (int k = 0; k < NMAX * IC; k++) x[k] = frand();
            for (int k = 0; k < OC * IC; k++) w[k] = frand();
            for (int k = 0; k < IC; k += 32) memset(x + k, 0, sizeof(float) * 32 * (k == 64));   /* an all-zero block */
            for (int k = 0; k < OC; k++) b[k] = frand();
            sk_q8_quantize(q, d, w, (size_t)OC * IC);
            sk_q8_dequantize(wf, q, d, (size_t)OC * IC);
            const float *bb = (i + jj) & 1 ? b : NULL;
            for (int e = 0; e < 2; e++)
                for (int th = 1; th <= 2; th++) {
                    omp_set_num_threads(th);
                    sk_q8_prompt_set_emulate(e);
                    for (int N = 1; N <= NMAX; N += N < 8 ? 1 : 7) {
                        same &= sk_linear_forward_q8_prompt(all, x, q, d, bb, N, IC, OC) == 0;
                        for (int r = 0; r < N; r++)
                            for (int o = 0; o < OC; o++) {
                                float want = (bb ? b[o] : 0.0f) + ref_q8p(x + (size_t)r * IC, q + (size_t)o * IC, d + (size_t)o * (IC / 32), IC);
                                same &= !memcmp(&want, &all[(size_t)r * OC + o], 4);
                            }
                        paths++;
                    }
                }
            sk_q8_prompt_set_emulate(0);
            omp_set_num_threads(2);
#ifdef SK_ROWS_VARIANTS
            for (int e = 0; e < 2; e++) {
                sk_q8_prompt_set_emulate_avx2(e);
                sk_q8_prompt_set_emulate_sse2(e);
                same &= sk_linear_forward_q8_prompt_avx2(one, x + (size_t)5 * IC, q, d, bb, 1, IC, OC) == 0;
                for (int o = 0; o < OC; o++) {
                    float want = (bb ? b[o] : 0.0f) + ref_q8p(x + (size_t)5 * IC, q + (size_t)o * IC, d + (size_t)o * (IC / 32), IC);
                    same &= !memcmp(&want, &one[o], 4);
                }
                same &= sk_linear_forward_q8_prompt_sse2(one, x + (size_t)5 * IC, q, d, bb, 1, IC, OC) == 0;
                for (int o = 0; o < OC; o++) {
                    float want = (bb ? b[o] : 0.0f) + ref_q8p(x + (size_t)5 * IC, q + (size_t)o * IC, d + (size_t)o * (IC / 32), IC);
                    same &= !memcmp(&want, &one[o], 4);
                }
                paths += 2;
            }
#endif
            /* accuracy: against the double sum on the unquantized activations */
            sk_linear_forward_q8_prompt(all, x, q, d, bb, NMAX, IC, OC);
            for (int r = 0; r < NMAX; r++)
                for (int o = 0; o < OC; o++) {
                    const float *xr = x + (size_t)r * IC, *wr = wf + (size_t)o * IC;
                    double exact = bb ? b[o] : 0.0, bound = 0, mag = fabs(exact);
                    for (int k = 0; k < IC; k++) exact += (double)xr[k] * wr[k];
                    for (int bk = 0; bk < IC / 32; bk++) {
                        float amax = 0;
                        for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(xr[32 * bk + k]));
                        for (int k = 0; k < 32; k++) {
                            bound += fabs(wr[32 * bk + k]) * (amax / 127.0) * 0.5;
                            mag += fabs(wr[32 * bk + k]) * (fabs(xr[32 * bk + k]) + amax / 127.0);
                        }
                    }
                    bound = bound * 1.0001 + mag * (IC + 2) * 0x1p-23;
                    const double err = fabs(all[(size_t)r * OC + o] - exact);
                    if (err / bound > worst_ratio) worst_ratio = err / bound;
                    if (err > apart) apart = err;
                }
            shapes++;
            free(x); free(w); free(wf); free(b); free(all); free(one); free(d); free(q);
        }
    CHECK(same, "8-bit prompt chunks (%s): every row of batches of 1..32 rows, on 1 and 2 threads, with and without "
          "vpdpbusd, and the AVX2 and SSE2 builds: the bits of the fixed order (%d runs, %d shapes)", sk_q8_prompt_kernel(), paths, shapes);
    CHECK(worst_ratio <= 1.0 && apart > 1e-4, "8-bit prompt chunks: within the activations' quantization error of x . (q * d) "
          "(worst %.2f of the bound; largest error %.1e: the activations are quantized)", worst_ratio, apart);
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
    if (wt == SK_WEIGHTS_BF16 && ok) {
        /* the whole model on the emulation: the bits of the CPU's path (vdpbf16ps where it has it) */
        int same = 1;
        sk_rows_set_emulate(1);
        for (int s = 0; s < NS && same; s += 5) {
            sk_kvcache_reset(k1);
            same = sk_model_decode(m, k1, toks[s], plen[s], lg) == 0 && sk_model_decode(m, k1, toks[s] + plen[s], 1, lg) == 0 &&
                   !memcmp(lg, ref + (size_t)s * V, sizeof(float) * V);
        }
        sk_rows_set_emulate(0);
        CHECK(same, "%s, bf16 weights: decoding on the emulation (%s) gives the logits' bits of %s", name, "SKIPLM_DOT_EMULATE=1",
              sk_rows_bf16_kernel());
    }
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
    bf16_paths();
    q8_prompt();
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
