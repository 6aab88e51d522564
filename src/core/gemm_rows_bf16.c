/* Decoding's bf16 matrix products, sk_linear_forward_bf16 (ops.h): out (N, OC) = inp (N, IC) @
 * W^T + b with W (OC, IC) in bf16 and each activation rounded to bf16 (to nearest even, as
 * sk_bf16_from_f32), every product of two bf16 values added in fp32: the arithmetic of the
 * CPU's bf16 dot-product instruction, vdpbf16ps (avx512_bf16), which computes it on CPUs that
 * have it, and which every other CPU emulates bit for bit.
 *
 * The order, fixed by IC alone (not by N, a row's place in its tile, or the thread count):
 * k in blocks of 32, block j = [32j, 32j + 32), the last one zero-padded; lane l (0..15) of
 * chain j mod 2 takes, for each of its blocks in turn, the product of elements 32j + 2l + 1,
 * then that of 32j + 2l, each added with one rounding to nearest even, a denormal input read as
 * zero and a denormal result flushed to zero (vdpbf16ps's rules, whatever MXCSR says: checked
 * against the instruction, 32 million lanes of random bits, before this was written). The two
 * chains are added lane by lane, lane l + lane l + 8 (l < 8), those eight folded as gemm_rows.c's
 * hsum8 ((y0 + y4) + (y2 + y6)) + ((y1 + y5) + (y3 + y7)), and the bias added last.
 *
 * A product of two bf16 values is exact in fp32 (8 + 8 significant bits), so a fused multiply-add
 * on the widened values rounds once, as vdpbf16ps does: the emulation (AVX-512F or AVX2 + FMA)
 * runs its multiply-adds with MXCSR's DAZ and FTZ set (and restored before the folds), and a
 * build without AVX2 and FMA uses fmaf with the flushes written out. So a row's outputs are the
 * same bits on every CPU, with or without avx512_bf16, and whatever the batch.
 *
 * The activations are rounded once per call into a bf16 copy, each row zero-padded to a
 * multiple of 32 (on the stack for small batches, else allocated; if that fails, in groups of
 * rows through the stack copy). Tiles: with vdpbf16ps 4 rows x 3 outputs, both chains in
 * registers (24 zmm accumulators); the AVX-512F emulation 4 x 2; AVX2 2 x 2, one chain at a time
 * (gemm_rows.c's passes). SKIPLM_DOT_EMULATE=1 in the environment (or sk_rows_set_emulate)
 * makes a CPU with avx512_bf16 take the emulation. */
#include "core/gemm_rows.h"
#include "core/ops.h"
#include "core/ops_bf16.h"
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__)
#define BD_VEC 1
#endif
#if defined(__x86_64__) && ((defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10) || (defined(__clang__) && __clang_major__ >= 9))
#define BD_NATIVE 1
#endif
#if defined(BD_VEC) || defined(BD_NATIVE)
#include <immintrin.h>
#endif

#define SK_PAR(work) ((size_t)(work) >= 32768)
#define AI static inline __attribute__((always_inline))
#define XB_STACK 8192               /* bf16 activations on the stack: 16 KiB */

/* ------------------------------------------------------------ dispatch */

static int g_mode = -1;             /* 1: vdpbf16ps, 0: the emulation, -1: not decided yet */

static int cpu_has_bf16(void) {
#ifdef BD_NATIVE
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
#else
    return 0;
#endif
}

static int use_native(void) {
    int m = __atomic_load_n(&g_mode, __ATOMIC_RELAXED);
    if (m < 0) {
        m = !sk_dot_emulate_env() && cpu_has_bf16();
        __atomic_store_n(&g_mode, m, __ATOMIC_RELAXED);
    }
    return m;
}

int sk_rows_bf16_native(void) { return use_native(); }

void sk_rows_set_emulate(int on) {
    __atomic_store_n(&g_mode, on ? 0 : cpu_has_bf16(), __ATOMIC_RELAXED);
}

/* --------------------------------------------------------- the scalar order */

static float daz(float v) { return fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v; }

/* one output, element by element (a build without AVX2 + FMA), from the row's bf16 copy xb or,
 * with xb NULL, its fp32 values xf rounded here */
static float dot_scalar(const uint16_t *xb, const float *xf, const uint16_t *w, int IC) {
    float c[2][16] = {{0}}, v[16], y[8];
    for (int k = 0; k < IC; k += 32)
        for (int l = 0; l < 16; l++) {
            float *a = &c[(k / 32) & 1][l];
            for (int e = 1; e >= 0; e--) {
                const int i = k + 2 * l + e;
                const float xv = i < IC ? daz(sk_bf16_to_f32(xb ? xb[i] : sk_bf16_from_f32(xf[i]))) : 0.0f, wv = i < IC ? daz(sk_bf16_to_f32(w[i])) : 0.0f;
                *a = daz(fmaf(xv, wv, *a));                /* the flush of a denormal result */
            }
        }
    for (int l = 0; l < 16; l++) v[l] = c[0][l] + c[1][l];
    for (int l = 0; l < 8; l++) y[l] = v[l] + v[l + 8];
    return ((y[0] + y[4]) + (y[2] + y[6])) + ((y[1] + y[5]) + (y[3] + y[7]));
}

/* ------------------------------------------------------------ vdpbf16ps */

#ifdef BD_NATIVE
#define NAT __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512bf16")))
enum { NR = 4, NO = 3 };

NAT AI float nat_fold(__m512 c0, __m512 c1) {
    const __m512 v = _mm512_add_ps(c0, c1);
    const __m256 y = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(y), _mm256_extractf128_ps(y, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 32 weights from k, zero past IC */
NAT AI __m512i nat_w(const uint16_t *w, int k, int IC) {
    if (k + 32 <= IC) return _mm512_loadu_si512((const void *)(w + k));
    return _mm512_maskz_loadu_epi16((__mmask32)((1u << (IC - k)) - 1u), w + k);
}

/* block j into chain C of every (row, output) of the tile */
#define NAT_STEP(C, J) do { \
        const int k_ = 32 * (J); \
        __m512i wv[NO]; \
        for (int o = 0; o < O; o++) wv[o] = nat_w(w + (size_t)o * IC, k_, IC); \
        for (int r = 0; r < R; r++) { \
            const __m512i xv = _mm512_loadu_si512((const void *)(xb + (size_t)r * ldx + k_)); \
            for (int o = 0; o < O; o++) acc[C][r][o] = _mm512_dpbf16_ps(acc[C][r][o], (__m512bh)xv, (__m512bh)wv[o]); \
        } \
    } while (0)

NAT AI void nat_tile(float *out, size_t ldo, const uint16_t *xb, size_t ldx, const uint16_t *w, const float *b,
                     int IC, int R, int O) {
    const int nb = (IC + 31) / 32;
    __m512 acc[2][NR][NO];
    for (int c = 0; c < 2; c++)
        for (int r = 0; r < R; r++)
            for (int o = 0; o < O; o++) acc[c][r][o] = _mm512_setzero_ps();
    int j = 0;
    for (; j + 2 <= nb; j += 2) { NAT_STEP(0, j); NAT_STEP(1, j + 1); }
    if (j < nb) NAT_STEP(0, j);
    for (int r = 0; r < R; r++)
        for (int o = 0; o < O; o++) out[r * ldo + o] = (b ? b[o] : 0.0f) + nat_fold(acc[0][r][o], acc[1][r][o]);
}
#undef NAT_STEP

#define NAT_CASE(RR, OO) case (RR) * 8 + (OO): nat_tile(out + (size_t)n * OC + o0, (size_t)OC, xb + (size_t)n * ldx, (size_t)ldx, wo, bb, IC, RR, OO); break
/* output tile t (weight rows t * NO ...) for every row, NR rows at a time */
NAT static void nat_col(int t, float *out, const uint16_t *xb, int ldx, const uint16_t *w, const float *b, int N, int IC, int OC) {
    const int o0 = t * NO, O = OC - o0 < NO ? OC - o0 : NO;
    const uint16_t *wo = w + (size_t)o0 * IC;
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

/* ------------------------------------------------------------ the emulation */

#ifdef BD_VEC
#if defined(__AVX512F__)
typedef __m512 ev;                  /* one chain of 16 lanes */
typedef __m512i evi;
#define ER 4
#define EO 2
#define EPASS 1
AI evi ev_load(const uint16_t *p) { return _mm512_loadu_si512((const void *)p); }
AI ev ev_odd(evi d) { return _mm512_castsi512_ps(_mm512_and_si512(d, _mm512_set1_epi32((int)0xffff0000u))); }
AI ev ev_even(evi d) { return _mm512_castsi512_ps(_mm512_slli_epi32(d, 16)); }
AI ev ev_zero(void) { return _mm512_setzero_ps(); }
AI ev ev_fma(ev a, ev b, ev c) { return _mm512_fmadd_ps(a, b, c); }
AI void ev_store(float *p, ev v) { _mm512_storeu_ps(p, v); }
AI __m256 ev_half_sum(const float *c0, const float *c1) {  /* lanes l + l + 8 of c0 + c1 */
    const __m512 v = _mm512_add_ps(_mm512_loadu_ps(c0), _mm512_loadu_ps(c1));
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
#define EMU_NAME "emulated vdpbf16ps (avx512 fmadd with DAZ/FTZ), tiles of 4 rows x 2 outputs"
#else
typedef struct { __m256 lo, hi; } ev;
typedef struct { __m256i lo, hi; } evi;
#define ER 2
#define EO 2
#define EPASS 2
AI evi ev_load(const uint16_t *p) {
    evi r = {_mm256_loadu_si256((const __m256i *)p), _mm256_loadu_si256((const __m256i *)(p + 16))};
    return r;
}
AI ev ev_odd(evi d) {
    const __m256i m = _mm256_set1_epi32((int)0xffff0000u);
    ev r = {_mm256_castsi256_ps(_mm256_and_si256(d.lo, m)), _mm256_castsi256_ps(_mm256_and_si256(d.hi, m))};
    return r;
}
AI ev ev_even(evi d) {
    ev r = {_mm256_castsi256_ps(_mm256_slli_epi32(d.lo, 16)), _mm256_castsi256_ps(_mm256_slli_epi32(d.hi, 16))};
    return r;
}
AI ev ev_zero(void) { ev r = {_mm256_setzero_ps(), _mm256_setzero_ps()}; return r; }
AI ev ev_fma(ev a, ev b, ev c) { ev r = {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)}; return r; }
AI void ev_store(float *p, ev v) { _mm256_storeu_ps(p, v.lo); _mm256_storeu_ps(p + 8, v.hi); }
AI __m256 ev_half_sum(const float *c0, const float *c1) {
    const __m256 lo = _mm256_add_ps(_mm256_loadu_ps(c0), _mm256_loadu_ps(c1));
    const __m256 hi = _mm256_add_ps(_mm256_loadu_ps(c0 + 8), _mm256_loadu_ps(c1 + 8));
    return _mm256_add_ps(lo, hi);
}
#define EMU_NAME "emulated vdpbf16ps (avx2 fmadd with DAZ/FTZ), tiles of 2 rows x 2 outputs"
#endif

/* 32 weights from k as 16 pairs, zero past IC */
AI evi emu_w(const uint16_t *w, int k, int IC) {
    if (k + 32 <= IC) return ev_load(w + k);
    uint16_t t[32] = {0};
    memcpy(t, w + k, sizeof(uint16_t) * (size_t)(IC - k));
    return ev_load(t);
}

/* The chains of an R x O tile into ch[(r * EO + o) * 2 + chain][16]: multiply-adds only (with
 * DAZ and FTZ set by the caller). Pass p takes the blocks of chain p (EPASS 2), or both. */
AI void emu_body(float (*ch)[16], const uint16_t *xb, size_t ldx, const uint16_t *w, int IC, int R, int O) {
    const int nb = (IC + 31) / 32, HC = 2 / EPASS;
    for (int p = 0; p < EPASS; p++) {
        ev a[2][ER][EO];
        for (int h = 0; h < HC; h++)
            for (int r = 0; r < R; r++)
                for (int o = 0; o < O; o++) a[h][r][o] = ev_zero();
        for (int j0 = p; j0 < nb; j0 += 2) {
            for (int h = 0; h < HC && j0 + h < nb; h++) {
                const int k = 32 * (j0 + h);
                ev wo[EO], we[EO];
                for (int o = 0; o < O; o++) {
                    const evi d = emu_w(w + (size_t)o * IC, k, IC);
                    wo[o] = ev_odd(d); we[o] = ev_even(d);
                }
                for (int r = 0; r < R; r++) {
                    const evi d = ev_load(xb + (size_t)r * ldx + k);
                    const ev xo = ev_odd(d), xe = ev_even(d);
                    for (int o = 0; o < O; o++) a[h][r][o] = ev_fma(xe, we[o], ev_fma(xo, wo[o], a[h][r][o]));
                }
            }
        }
        for (int h = 0; h < HC; h++)
            for (int r = 0; r < R; r++)
                for (int o = 0; o < O; o++) ev_store(ch[(r * EO + o) * 2 + p + h], a[h][r][o]);
    }
}

#define EMU_CASE(RR, OO) case (RR) * 8 + (OO): emu_body(ch, xb, ldx, w, IC, RR, OO); break
__attribute__((noinline)) static void emu_chains(float (*ch)[16], const uint16_t *xb, size_t ldx, const uint16_t *w, int IC, int R, int O) {
    switch (R * 8 + O) {
    EMU_CASE(1, 1); EMU_CASE(1, 2); EMU_CASE(2, 1); EMU_CASE(2, 2);
#if ER >= 4
    EMU_CASE(3, 1); EMU_CASE(3, 2); EMU_CASE(4, 1); EMU_CASE(4, 2);
#endif
    }
}
#undef EMU_CASE

static void emu_col(int t, float *out, const uint16_t *xb, int ldx, const uint16_t *w, const float *b, int N, int IC, int OC) {
    const int o0 = t * EO, O = OC - o0 < EO ? OC - o0 : EO;
    const uint16_t *wo = w + (size_t)o0 * IC;
    float ch[ER * EO * 2][16];
    for (int n = 0; n < N; n += ER) {
        const int R = N - n < ER ? N - n : ER;
        const unsigned csr = _mm_getcsr();
        _mm_setcsr(csr | 0x8040u);                            /* FTZ | DAZ: vdpbf16ps's rules */
        emu_chains(ch, xb + (size_t)n * ldx, (size_t)ldx, wo, IC, R, O);
        _mm_setcsr(csr);
        __asm__ volatile("" ::: "memory");                    /* the folds after the restore */
        for (int r = 0; r < R; r++)
            for (int o = 0; o < O; o++) {
                const __m256 y = ev_half_sum(ch[(r * EO + o) * 2], ch[(r * EO + o) * 2 + 1]);
                __m128 s = _mm_add_ps(_mm256_castps256_ps128(y), _mm256_extractf128_ps(y, 1));
                s = _mm_add_ps(s, _mm_movehl_ps(s, s));
                s = _mm_add_ss(s, _mm_movehdup_ps(s));
                out[(size_t)(n + r) * OC + o0 + o] = (b ? b[o0 + o] : 0.0f) + _mm_cvtss_f32(s);
            }
    }
}
#else
#define EMU_NAME "scalar fmaf with explicit DAZ/FTZ (vdpbf16ps's order)"
#define EO 1
static void emu_col(int t, float *out, const uint16_t *xb, int ldx, const uint16_t *w, const float *b, int N, int IC, int OC) {
    for (int n = 0; n < N; n++)
        out[(size_t)n * OC + t] = (b ? b[t] : 0.0f) + dot_scalar(xb + (size_t)n * ldx, NULL, w + (size_t)t * IC, IC);
}
#endif

/* --------------------------------------------------------------- entry */

const char *sk_rows_bf16_kernel(void) {
#ifdef BD_NATIVE
    if (use_native()) return "avx512_bf16 vdpbf16ps, tiles of 4 rows x 3 outputs";
#endif
    return EMU_NAME;
}

/* rows [n0, n0 + n) of the batch through every output, from their bf16 copy xb (row stride ldx) */
static void rows_pass(float *out, const uint16_t *xb, int ldx, const uint16_t *w, const float *b, int n, int IC, int OC, int native) {
#ifdef BD_NATIVE
    if (native) {
        const int tiles = (OC + NO - 1) / NO;
        #pragma omp parallel for schedule(static) if(SK_PAR((size_t)n * OC * IC))
        for (int t = 0; t < tiles; t++) nat_col(t, out, xb, ldx, w, b, n, IC, OC);
        return;
    }
#endif
    (void)native;
    const int tiles = (OC + EO - 1) / EO;
    #pragma omp parallel for schedule(static) if(SK_PAR((size_t)n * OC * IC))
    for (int t = 0; t < tiles; t++) emu_col(t, out, xb, ldx, w, b, n, IC, OC);
}

/* rows of x rounded to bf16, each zero-padded to ldx */
static void round_rows(uint16_t *xb, int ldx, const float *x, int n, int IC) {
    sk_round_bf16_2d(xb, ldx, x, IC, n, IC);
    for (int r = 0; r < n; r++) memset(xb + (size_t)r * ldx + IC, 0, sizeof(uint16_t) * (size_t)(ldx - IC));
}

void sk_linear_forward_bf16(float *out, const float *inp, const uint16_t *w, const float *b, int N, int IC, int OC) {
    if (N <= 0 || OC <= 0) return;
    const int ldx = (IC + 31) & ~31, native = use_native();
    uint16_t stk[XB_STACK];
    const size_t need = (size_t)N * ldx;
    uint16_t *xb = need <= XB_STACK ? stk : malloc(sizeof(uint16_t) * need);
    if (xb) {
        round_rows(xb, ldx, inp, N, IC);
        rows_pass(out, xb, ldx, w, b, N, IC, OC, native);
        if (xb != stk) free(xb);
        return;
    }
    /* no memory for the whole batch: as many rows at a time as the stack copy holds (the
     * same bits: a row's outputs do not depend on the others) */
    const int g = ldx <= XB_STACK ? XB_STACK / ldx : 0;
    for (int n = 0; n < N; n += g > 0 ? g : 1) {
        if (g > 0) {
            const int m = N - n < g ? N - n : g;
            round_rows(stk, ldx, inp + (size_t)n * IC, m, IC);
            rows_pass(out + (size_t)n * OC, stk, ldx, w, b, m, IC, OC, native);
            continue;
        }
        /* a row wider than the stack copy: element by element, rounded as it goes */
        for (int o = 0; o < OC; o++)
            out[(size_t)n * OC + o] = (b ? b[o] : 0.0f) + dot_scalar(NULL, inp + (size_t)n * IC, w + (size_t)o * IC, IC);
    }
}
