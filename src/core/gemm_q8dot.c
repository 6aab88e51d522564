/* Prompt chunks with 8-bit weights through int8 dot products (sk_linear_forward_q8_prompt,
 * quant.h): out (N, OC) = inp (N, IC) @ (q * d)^T + b with each input row quantized per block
 * of SK_Q8_BLOCK = 32, as llama.cpp's Q8_0 x Q8_0: the block's scale e = max|x| / 127 (fp32),
 * its values p = x / e rounded to nearest even (0 where the block is all zero), so that each
 * block's dot product sum_k p_k q_k is an exact integer.
 *
 * The order, fixed by IC alone (not by N, a row's place in a tile, the thread count or the
 * CPU): the blocks in pairs (2j, 2j + 1), the last pair zero-padded; lane l (0..15) takes the
 * integer sum of 4 consecutive products, k = 64j + 4l .. 64j + 4l + 3 (exact in int32), and adds
 * it to its fp32 chain with one fused multiply-add: c_l = fma((float)sum, e_b * d_b, c_l), where
 * b is the lane's block (e_b * d_b rounded to fp32 first). The 16 lanes are folded as
 * gemm_rows_bf16.c's (l + l + 8, then ((y0 + y4) + (y2 + y6)) + ((y1 + y5) + (y3 + y7))) and the
 * bias added last. Integer sums are exact, so every instruction set computes the same bits:
 * vpdpbusd (AVX512-VNNI, chosen at run time, on p + 128 as unsigned bytes, less 128 * sum q of
 * the lane's weights, which a vpdpbusd of 128s gives), vpmaddubsw + vpmaddwd (AVX2: |q| times p
 * with q's sign, at most 2 * 127 * 127 per pair, no saturation), or plain C.
 *
 * Decoding does not come here: its 8-bit kernel keeps fp32 activations (gemm_rows.c), so that
 * eval --q8 measures what decoding computes; infer.c sends a prompt's chunks of more than
 * SK_ROWS_MAX tokens here on CPUs with AVX512-VNNI. SKIPLM_DOT_EMULATE=1 (sk_rows_set_emulate)
 * makes such a CPU take the AVX2 / C path here too. */
#include "core/ops.h"
#include "core/quant.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__)
#define QD_VEC 1
#endif
#if defined(__x86_64__) && ((defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10) || (defined(__clang__) && __clang_major__ >= 9))
#define QD_NATIVE 1
#endif
#if defined(QD_VEC) || defined(QD_NATIVE)
#include <immintrin.h>
#endif

#define SK_PAR(work) ((size_t)(work) >= 32768)
#define AI static inline __attribute__((always_inline))

/* ------------------------------------------------------------ dispatch */

static int g_mode = -1;             /* 1: vpdpbusd, 0: without, -1: not decided yet */

static int cpu_has_vnni(void) {
#ifdef QD_NATIVE
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
#else
    return 0;
#endif
}

static int use_native(void) {
    int m = __atomic_load_n(&g_mode, __ATOMIC_RELAXED);
    if (m < 0) {
        m = !sk_dot_emulate_env() && cpu_has_vnni();
        __atomic_store_n(&g_mode, m, __ATOMIC_RELAXED);
    }
    return m;
}

int sk_q8_prompt_native(void) { return use_native(); }
void sk_q8_prompt_set_emulate(int on) { __atomic_store_n(&g_mode, on ? 0 : cpu_has_vnni(), __ATOMIC_RELAXED); }

/* ------------------------------------------------ the quantized activations */

/* A row's copy: for pair j, 64 bytes p + 128 (unsigned; 128 where padded) at xu + 64 j, and 16
 * fp32 block scales [e_2j x 8, e_2j+1 x 8] at sx + 16 j (0 where padded). */
typedef struct { uint8_t *xu; float *sx; int np, ldu, lds; } qrows;

static void quantize_rows(const qrows *Q, const float *x, int N, int IC) {
    const int nb = IC / SK_Q8_BLOCK;
    #pragma omp parallel for schedule(static) if(SK_PAR((size_t)N * IC))
    for (int r = 0; r < N; r++) {
        uint8_t *u = Q->xu + (size_t)r * Q->ldu;
        float *s = Q->sx + (size_t)r * Q->lds;
        for (int b = 0; b < 2 * Q->np; b++) {
            const float *xb = x + (size_t)r * IC + (size_t)b * SK_Q8_BLOCK;
            float amax = 0.0f, e = 0.0f;
            if (b < nb)
                for (int k = 0; k < SK_Q8_BLOCK; k++) { const float a = fabsf(xb[k]); amax = a > amax ? a : amax; }
            e = amax / 127.0f;
            for (int k = 0; k < SK_Q8_BLOCK; k++) {
                float v = b < nb && e > 0.0f ? nearbyintf(xb[k] / e) : 0.0f;
                v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v == v ? v : 0.0f;   /* (NaN, inf: 0) */
                u[(size_t)b * SK_Q8_BLOCK + k] = (uint8_t)((int)v + 128);
            }
            for (int l = 0; l < 8; l++) s[(b / 2) * 16 + (b & 1) * 8 + l] = e;
        }
    }
}

#ifndef QD_VEC
/* the 16 weight scales [d_2j x 8, d_2j+1 x 8] of pair j of a weight row with nb blocks */
static inline void w_scales(float *ws, const uint16_t *d, int j, int nb) {
    const float a = sk_f16_to_f32(d[2 * j]), b = 2 * j + 1 < nb ? sk_f16_to_f32(d[2 * j + 1]) : 0.0f;
    for (int l = 0; l < 8; l++) { ws[l] = a; ws[8 + l] = b; }
}

/* fold 16 lanes */
static inline float fold16(const float *c) {
    float y[8];
    for (int l = 0; l < 8; l++) y[l] = c[l] + c[l + 8];
    return ((y[0] + y[4]) + (y[2] + y[6])) + ((y[1] + y[5]) + (y[3] + y[7]));
}

/* --------------------------------------------------------- plain C, one output */

static float dot_c(const uint8_t *xu, const float *sx, const int8_t *q, const uint16_t *d, int IC, int np) {
    const int nb = IC / SK_Q8_BLOCK;
    float c[16] = {0}, ws[16];
    for (int j = 0; j < np; j++) {
        w_scales(ws, d, j, nb);
        for (int l = 0; l < 16; l++) {
            int32_t s = 0;
            for (int t = 0; t < 4; t++) {
                const int k = 64 * j + 4 * l + t;
                if (k < IC) s += ((int32_t)xu[k] - 128) * q[k];
            }
            c[l] = fmaf((float)s, sx[16 * j + l] * ws[l], c[l]);
        }
    }
    return fold16(c);
}
#endif

/* ------------------------------------------------------------ vpdpbusd */

#ifdef QD_NATIVE
#define NAT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
enum { NR = 4, NO = 3 };

NAT AI float nat_fold(__m512 v) {
    const __m256 y = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(y), _mm256_extractf128_ps(y, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

NAT AI void nat_tile(float *out, size_t ldo, const qrows *Q, int n0, const int8_t *q, const uint16_t *d, const float *b,
                     int IC, int R, int O) {
    const int nb = IC / SK_Q8_BLOCK;
    const __m512i k128 = _mm512_set1_epi8((char)0x80);
    const __m512i lohi = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    __m512 acc[NR][NO];
    for (int r = 0; r < R; r++)
        for (int o = 0; o < O; o++) acc[r][o] = _mm512_setzero_ps();
    for (int j = 0; j < Q->np; j++) {
        const int k = 64 * j;
        const __mmask64 m = k + 64 <= IC ? ~(__mmask64)0 : (((__mmask64)1 << (IC - k)) - 1);
        __m512i wv[NO], nc[NO];
        __m512 ws[NO];
        for (int o = 0; o < O; o++) {
            wv[o] = _mm512_maskz_loadu_epi8(m, q + (size_t)o * IC + k);
            nc[o] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), k128, wv[o]));
            const uint16_t *dd = d + (size_t)o * nb + 2 * j;
            const uint32_t two = 2 * j + 1 < nb ? (uint32_t)dd[0] | (uint32_t)dd[1] << 16 : dd[0];
            ws[o] = _mm512_permutexvar_ps(lohi, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128((int)two))));
        }
        for (int r = 0; r < R; r++) {
            const __m512i xv = _mm512_loadu_si512((const void *)(Q->xu + (size_t)(n0 + r) * Q->ldu + k));
            const __m512 sx = _mm512_loadu_ps(Q->sx + (size_t)(n0 + r) * Q->lds + 16 * j);
            for (int o = 0; o < O; o++) {
                const __m512i s = _mm512_dpbusd_epi32(nc[o], xv, wv[o]);
                acc[r][o] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(sx, ws[o]), acc[r][o]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int o = 0; o < O; o++) out[r * ldo + o] = (b ? b[o] : 0.0f) + nat_fold(acc[r][o]);
}

#define NAT_CASE(RR, OO) case (RR) * 8 + (OO): nat_tile(out + (size_t)n * OC + o0, (size_t)OC, Q, n, qo, dd, bb, IC, RR, OO); break
NAT static void nat_col(int t, float *out, const qrows *Q, const int8_t *q, const uint16_t *d, const float *b, int N, int IC, int OC) {
    const int o0 = t * NO, O = OC - o0 < NO ? OC - o0 : NO, nb = IC / SK_Q8_BLOCK;
    const int8_t *qo = q + (size_t)o0 * IC;
    const uint16_t *dd = d + (size_t)o0 * nb;
    const float *bb = b ? b + o0 : NULL;
    for (int n = 0; n < N; n += NR) {
        const int R = N - n < NR ? N - n : NR;
        switch (R * 8 + O) {
        NAT_CASE(1, 1); NAT_CASE(1, 2); NAT_CASE(1, 3);
        NAT_CASE(2, 1); NAT_CASE(2, 2); NAT_CASE(2, 3);
        NAT_CASE(3, 1); NAT_CASE(3, 2); NAT_CASE(3, 3);
        NAT_CASE(4, 1); NAT_CASE(4, 2); NAT_CASE(4, 3);
        }
    }
}
#undef NAT_CASE
#endif

/* ------------------------------------------------------------ AVX2 */

#ifdef QD_VEC
#define ER 2
#define EO 2
/* the 8 lane sums of one block: |q| times p with q's sign, pairs to int16, fours to int32 */
AI __m256i lanes8(__m256i xu, __m256i w) {
    const __m256i p = _mm256_sub_epi8(xu, _mm256_set1_epi8((char)0x80));      /* p + 128 - 128 (wraps to p) */
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(p, w));
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

AI void emu_tile(float *out, size_t ldo, const qrows *Q, int n0, const int8_t *q, const uint16_t *d, const float *b,
                 int IC, int R, int O) {
    const int nb = IC / SK_Q8_BLOCK;
    __m256 acc[ER][EO][2];
    for (int r = 0; r < R; r++)
        for (int o = 0; o < O; o++) acc[r][o][0] = acc[r][o][1] = _mm256_setzero_ps();
    for (int j = 0; j < Q->np; j++) {
        const int k = 64 * j, two = 2 * j + 1 < nb;
        __m256i wv[EO][2];
        __m256 ws[EO][2];
        for (int o = 0; o < O; o++) {
            const int8_t *qw = q + (size_t)o * IC + k;
            wv[o][0] = _mm256_loadu_si256((const __m256i *)qw);
            wv[o][1] = two ? _mm256_loadu_si256((const __m256i *)(qw + 32)) : _mm256_setzero_si256();
            ws[o][0] = _mm256_set1_ps(sk_f16_to_f32(d[(size_t)o * nb + 2 * j]));
            ws[o][1] = two ? _mm256_set1_ps(sk_f16_to_f32(d[(size_t)o * nb + 2 * j + 1])) : _mm256_setzero_ps();
        }
        for (int r = 0; r < R; r++) {
            const uint8_t *xr = Q->xu + (size_t)(n0 + r) * Q->ldu + k;
            const float *sr = Q->sx + (size_t)(n0 + r) * Q->lds + 16 * j;
            for (int h = 0; h < 2; h++) {
                const __m256i xv = _mm256_loadu_si256((const __m256i *)(xr + 32 * h));
                const __m256 sx = _mm256_loadu_ps(sr + 8 * h);
                for (int o = 0; o < O; o++)
                    acc[r][o][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes8(xv, wv[o][h])), _mm256_mul_ps(sx, ws[o][h]), acc[r][o][h]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int o = 0; o < O; o++) {
            const __m256 y = _mm256_add_ps(acc[r][o][0], acc[r][o][1]);
            __m128 s = _mm_add_ps(_mm256_castps256_ps128(y), _mm256_extractf128_ps(y, 1));
            s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            s = _mm_add_ss(s, _mm_movehdup_ps(s));
            out[r * ldo + o] = (b ? b[o] : 0.0f) + _mm_cvtss_f32(s);
        }
}

#define EMU_CASE(RR, OO) case (RR) * 8 + (OO): emu_tile(out + (size_t)n * OC + o0, (size_t)OC, Q, n, qo, dd, bb, IC, RR, OO); break
static void emu_col(int t, float *out, const qrows *Q, const int8_t *q, const uint16_t *d, const float *b, int N, int IC, int OC) {
    const int o0 = t * EO, O = OC - o0 < EO ? OC - o0 : EO, nb = IC / SK_Q8_BLOCK;
    const int8_t *qo = q + (size_t)o0 * IC;
    const uint16_t *dd = d + (size_t)o0 * nb;
    const float *bb = b ? b + o0 : NULL;
    for (int n = 0; n < N; n += ER) {
        const int R = N - n < ER ? N - n : ER;
        switch (R * 8 + O) { EMU_CASE(1, 1); EMU_CASE(1, 2); EMU_CASE(2, 1); EMU_CASE(2, 2); }
    }
}
#undef EMU_CASE
#define EMU_NAME "avx2 vpmaddubsw + vpmaddwd, tiles of 2 rows x 2 outputs"
#else
#define EO 1
static void emu_col(int t, float *out, const qrows *Q, const int8_t *q, const uint16_t *d, const float *b, int N, int IC, int OC) {
    const int nb = IC / SK_Q8_BLOCK;
    for (int n = 0; n < N; n++)
        out[(size_t)n * OC + t] = (b ? b[t] : 0.0f) + dot_c(Q->xu + (size_t)n * Q->ldu, Q->sx + (size_t)n * Q->lds,
                                                           q + (size_t)t * IC, d + (size_t)t * nb, IC, Q->np);
}
#define EMU_NAME "plain C integer sums"
#endif

/* --------------------------------------------------------------- entry */

const char *sk_q8_prompt_kernel(void) {
#ifdef QD_NATIVE
    if (use_native()) return "avx512_vnni vpdpbusd, tiles of 4 rows x 3 outputs";
#endif
    return EMU_NAME;
}

int sk_linear_forward_q8_prompt(float *out, const float *inp, const int8_t *q, const uint16_t *d, const float *b,
                                int N, int IC, int OC) {
    if (N <= 0 || OC <= 0) return SK_OK;
    if (IC % SK_Q8_BLOCK) return sk_error(SK_EINVAL, "8-bit weights: width %d is not a multiple of %d", IC, SK_Q8_BLOCK);
    qrows Q;
    Q.np = (IC / SK_Q8_BLOCK + 1) / 2;
    Q.ldu = 64 * Q.np;
    Q.lds = 16 * Q.np;
    Q.xu = malloc((size_t)N * Q.ldu + sizeof(float) * (size_t)N * Q.lds + 64);
    if (!Q.xu) return sk_error(SK_ENOMEM, "out of memory for a prompt's 8-bit activations (%d x %d)", N, IC);
    Q.sx = (float *)(void *)(Q.xu + (((size_t)N * Q.ldu + 63) & ~(size_t)63));
    quantize_rows(&Q, inp, N, IC);
    const int native = use_native();
#ifdef QD_NATIVE
    if (native) {
        const int tiles = (OC + NO - 1) / NO;
        #pragma omp parallel for schedule(static) if(SK_PAR((size_t)N * OC * IC))
        for (int t = 0; t < tiles; t++) nat_col(t, out, &Q, q, d, b, N, IC, OC);
        free(Q.xu);
        return SK_OK;
    }
#endif
    (void)native;
    const int tiles = (OC + EO - 1) / EO;
    #pragma omp parallel for schedule(static) if(SK_PAR((size_t)N * OC * IC))
    for (int t = 0; t < tiles; t++) emu_col(t, out, &Q, q, d, b, N, IC, OC);
    free(Q.xu);
    return SK_OK;
}
