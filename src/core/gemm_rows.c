/* Decoding's matrix products: out (N, OC) = inp (N, IC) @ W^T + b for the few rows of a
 * decoding step (one token of each of N sequences, or a short prompt chunk), with W (OC, IC)
 * in fp32 or 8-bit (Q8_0) form and fp32 activations: sk_linear_forward_rows and
 * sk_linear_forward_q8 (declared in ops.h and quant.h). bf16 weights, whose activations are
 * rounded to bf16 for the CPU's bf16 dot products, are gemm_rows_bf16.c's.
 *
 * Batch invariance. Every output x_r . w_o is summed in one fixed order that depends on
 * nothing but IC: four 8-lane chains (lanes k mod 32 in [0,8), [8,16), [16,24), [24,32)), each
 * a sequence of fused multiply-adds over k = 0, 32, 64, ... ; an 8-wide remainder into the
 * first chain; the four chains added ((c0 + c1) + (c2 + c3)), that vector's eight lanes folded
 * by hsum8; then the scalar remainder, k in order. (The one-row kernel of earlier versions,
 * dot_w, summed exactly so: fp32 results are the bits they were.) 8-bit weights take
 * the same order on their widened values q * d, which are exact floats: sk_linear_forward_q8
 * gives the bits of sk_linear_forward_rows on the dequantized matrix.
 *
 * Register tiles. Rows and outputs are computed TILE_R x TILE_O at a time: each weight vector
 * loaded (and widened) once serves TILE_R rows, each input vector TILE_O outputs. A chain's
 * operations are the same whatever tile it sits in, whatever its place in the tile and
 * whatever the tile's size (tails of 1..TILE_R-1 rows or outputs are the same code with a
 * smaller constant), and each output is one thread's: row r of a batch of N gets the bits it
 * gets alone, for any N and any thread count.
 *
 * AVX-512 holds chains c0|c1 and c2|c3 of one output in two zmm registers: a 4 x 3 tile is 24
 * accumulators of the 32 registers. AVX2 has 16 registers, too few for 4 ymm chains of even a
 * 2 x 2 tile, so it computes chains c0, c1 over all of k first and then c2, c3 (each chain's
 * operations unchanged) in a 2 x 2 tile. Without AVX2 and FMA a scalar loop sums in its own
 * fixed order (eight partial sums), also the same for every row and thread count. */
#include "core/gemm_rows.h"
#include "core/ops.h"
#include "core/quant.h"
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#define SK_PAR(work) ((size_t)(work) >= 32768)
#define SK_INLINE static inline __attribute__((always_inline))

enum { W_F32, W_Q8 };

#if defined(__F16C__)
#define F16(h) _cvtsh_ss(h)
#else
#define F16(h) sk_f16_to_f32(h)
#endif

/* the weight row of output o: fp32 or int8 elements */
SK_INLINE const void *w_row(const void *w, size_t o, int IC, int kind) {
    return kind == W_F32 ? (const void *)((const float *)w + o * IC) : (const void *)((const int8_t *)w + o * IC);
}

/* weight k of a row as a float (8-bit: q * d of its block, exact) */
SK_INLINE float w_at(const void *w, const uint16_t *d, int k, int kind) {
    return kind == W_F32 ? ((const float *)w)[k] : (float)((const int8_t *)w)[k] * F16(d[k / SK_Q8_BLOCK]);
}

/* the scalar remainder k..n-1, added to s in order */
SK_INLINE float dot_tail(float s, const float *x, const void *w, const uint16_t *d, int k, int n, int kind) {
    for (; k < n; k++) s += x[k] * w_at(w, d, k, kind);
    return s;
}

#if defined(__AVX2__) && defined(__FMA__)

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 8 weights from k as floats (8-bit: times the block's scale s) */
SK_INLINE __m256 w8(const void *w, int k, int kind, float s) {
    if (kind == W_F32) return _mm256_loadu_ps((const float *)w + k);
    __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)((const int8_t *)w + k))));
    return _mm256_mul_ps(q, _mm256_set1_ps(s));
}

#if defined(__AVX512F__)
/* 16 lanes: chains c0|c1 (or c2|c3) of one output in one register */
typedef __m512 v16;
#define TILE_R 4
#define TILE_O 3
#define NPASS 1                     /* both halves of each 32-wide step in one pass over k */
SK_INLINE v16 v_zero(void) { return _mm512_setzero_ps(); }
SK_INLINE v16 v_fma(v16 a, v16 b, v16 c) { return _mm512_fmadd_ps(a, b, c); }
/* the input in a register, shared by the tile's outputs (an empty asm keeps the compiler from
 * folding the load into each multiply-add: one load per row instead of one per output; the
 * same for fp32 weights below) */
SK_INLINE v16 v_x(const float *p) {
    v16 r = _mm512_loadu_ps(p);
    __asm__("" : "+v"(r));
    return r;
}
SK_INLINE v16 v_w(const void *w, int k, int kind, float s) {
    if (kind == W_F32) {                          /* in a register too, shared by the tile's rows */
        v16 r = _mm512_loadu_ps((const float *)w + k);
        __asm__("" : "+v"(r));
        return r;
    }
    __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)((const int8_t *)w + k))));
    return _mm512_mul_ps(q, _mm512_set1_ps(s));
}
SK_INLINE __m256 v_lo(v16 a) { return _mm512_castps512_ps256(a); }
SK_INLINE __m256 v_hi(v16 a) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)); }
#define SK_ROWS_NAME "avx512, tiles of 4 rows x 3 outputs"
#else
/* 16 lanes as two ymm registers */
typedef struct { __m256 lo, hi; } v16;
#define TILE_R 2
#define TILE_O 2
#define NPASS 2                     /* chains c0, c1 over all of k, then c2, c3 */
SK_INLINE v16 v_zero(void) { v16 r = {_mm256_setzero_ps(), _mm256_setzero_ps()}; return r; }
SK_INLINE v16 v_fma(v16 a, v16 b, v16 c) {
    v16 r = {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
    return r;
}
/* loads kept in registers, as with AVX-512 */
SK_INLINE v16 v_x(const float *p) {
    v16 r = {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
    __asm__("" : "+x"(r.lo), "+x"(r.hi));
    return r;
}
SK_INLINE v16 v_w(const void *w, int k, int kind, float s) {
    v16 r = {w8(w, k, kind, s), w8(w, k + 8, kind, s)};
    if (kind == W_F32) __asm__("" : "+x"(r.lo), "+x"(r.hi));
    return r;
}
SK_INLINE __m256 v_lo(v16 a) { return a.lo; }
SK_INLINE __m256 v_hi(v16 a) { return a.hi; }
#define SK_ROWS_NAME "avx2, tiles of 2 rows x 2 outputs"
#endif

#define HP (2 / NPASS)              /* 16-lane halves of a 32-wide step per pass */

/* out[r * ldo + o] = b[o] + x_r . w_o for r < R, o < O (R, O constants at each call) */
SK_INLINE void tile(float *out, size_t ldo, const float *x, size_t ldx, const void *w, const uint16_t *d,
                    const float *b, int IC, int R, int O, int kind) {
    const int n32 = IC & ~31, nb = IC / SK_Q8_BLOCK;
    const void *wr[TILE_O];
    for (int o = 0; o < O; o++) wr[o] = w_row(w, (size_t)o, IC, kind);
    v16 acc[2][TILE_R][TILE_O];                       /* [half][row][output]: c0|c1, c2|c3 */
    for (int p = 0; p < NPASS; p++) {
        v16 a[HP][TILE_R][TILE_O];
        for (int h = 0; h < HP; h++)
            for (int r = 0; r < R; r++)
                for (int o = 0; o < O; o++) a[h][r][o] = v_zero();
        for (int k = 0; k < n32; k += 32) {
            v16 wv[HP][TILE_O];
            for (int o = 0; o < O; o++) {
                const float s = kind == W_Q8 ? F16(d[(size_t)o * nb + k / SK_Q8_BLOCK]) : 0.0f;
                for (int h = 0; h < HP; h++) wv[h][o] = v_w(wr[o], k + 16 * (p * HP + h), kind, s);
            }
            for (int r = 0; r < R; r++)
                for (int h = 0; h < HP; h++) {
                    const v16 xv = v_x(x + r * ldx + k + 16 * (p * HP + h));
                    for (int o = 0; o < O; o++) a[h][r][o] = v_fma(wv[h][o], xv, a[h][r][o]);
                }
        }
        for (int h = 0; h < HP; h++)
            for (int r = 0; r < R; r++)
                for (int o = 0; o < O; o++) acc[p * HP + h][r][o] = a[h][r][o];
    }
    for (int r = 0; r < R; r++)
        for (int o = 0; o < O; o++) {
            const float *xr = x + r * ldx;
            const uint16_t *dr = kind == W_Q8 ? d + (size_t)o * nb : NULL;
            __m256 c0 = v_lo(acc[0][r][o]), c1 = v_hi(acc[0][r][o]), c2 = v_lo(acc[1][r][o]), c3 = v_hi(acc[1][r][o]);
            int k = n32;
            for (; k + 8 <= IC; k += 8)
                c0 = _mm256_fmadd_ps(w8(wr[o], k, kind, kind == W_Q8 ? F16(dr[k / SK_Q8_BLOCK]) : 0.0f), _mm256_loadu_ps(xr + k), c0);
            const float s = hsum8(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)));
            out[r * ldo + o] = (b ? b[o] : 0.0f) + dot_tail(s, xr, wr[o], dr, k, IC, kind);
        }
}

#else  /* no AVX2 + FMA: one output of one row at a time */

#define TILE_R 1
#define TILE_O 1
#define SK_ROWS_NAME "scalar"
SK_INLINE void tile(float *out, size_t ldo, const float *x, size_t ldx, const void *w, const uint16_t *d,
                    const float *b, int IC, int R, int O, int kind) {
    (void)ldo; (void)ldx; (void)R; (void)O;
    float a[8] = {0};
    int k = 0;
    for (; k + 8 <= IC; k += 8)
        for (int j = 0; j < 8; j++) a[j] += x[k + j] * w_at(w, d, k + j, kind);
    const float s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    out[0] = (b ? b[0] : 0.0f) + dot_tail(s, x, w, d, k, IC, kind);
}

#endif

const char *sk_rows_kernel(void) { return SK_ROWS_NAME; }

_Static_assert((TILE_R <= 2 && TILE_O <= 2) || (TILE_R == 4 && TILE_O == 3), "tile_any lists these tile sizes' shapes only");

/* one R x O tile with R and O as constants, so that its accumulators stay in registers */
#define TILE_CASE(RR, OO) \
    case (RR) * 8 + (OO): tile(out + o0, (size_t)OC, x, (size_t)IC, wo, dd, bb, IC, RR, OO, kind); break
SK_INLINE void tile_any(float *out, size_t o0, const float *x, const void *wo, const uint16_t *dd, const float *bb,
                        int IC, int OC, int R, int O, int kind) {
    switch (R * 8 + O) {
    TILE_CASE(1, 1);
#if TILE_O >= 2
    TILE_CASE(1, 2);
#endif
#if TILE_O >= 3
    TILE_CASE(1, 3);
#endif
#if TILE_R >= 2
    TILE_CASE(2, 1);
#if TILE_O >= 2
    TILE_CASE(2, 2);
#endif
#if TILE_O >= 3
    TILE_CASE(2, 3);
#endif
#endif
#if TILE_R >= 3
    TILE_CASE(3, 1); TILE_CASE(3, 2); TILE_CASE(3, 3);
#endif
#if TILE_R >= 4
    TILE_CASE(4, 1); TILE_CASE(4, 2); TILE_CASE(4, 3);
#endif
    }
}
#undef TILE_CASE

/* Output tile t (weight rows t * TILE_O ...) for every row of the batch, TILE_R rows at a time. */
SK_INLINE void out_tile(int t, float *out, const float *inp, const void *w, const uint16_t *d, const float *b,
                        int N, int IC, int OC, int kind) {
    const int o0 = t * TILE_O, O = OC - o0 < TILE_O ? OC - o0 : TILE_O;
    const void *wo = w_row(w, (size_t)o0, IC, kind);
    const uint16_t *dd = kind == W_Q8 ? d + (size_t)o0 * (IC / SK_Q8_BLOCK) : NULL;
    const float *bb = b ? b + o0 : NULL;
    for (int n = 0; n < N; n += TILE_R) {
        const int R = N - n < TILE_R ? N - n : TILE_R;
        tile_any(out + (size_t)n * OC, (size_t)o0, inp + (size_t)n * IC, wo, dd, bb, IC, OC, R, O, kind);
    }
}

/* Each thread takes whole tiles of TILE_O weight rows (read from memory once per step) and runs
 * every row of the batch through them. The weight kind is a constant inside each parallel loop
 * (a loop of its own per kind), so each kind's tiles compile without a test on it. */
#define ROWS_LOOP(KIND, W, D) do { \
        const int tiles = (OC + TILE_O - 1) / TILE_O; \
        _Pragma("omp parallel for schedule(static) if(SK_PAR((N) * (size_t)OC * IC))") \
        for (int t = 0; t < tiles; t++) out_tile(t, out, inp, W, D, b, N, IC, OC, KIND); \
    } while (0)

void sk_linear_forward_rows(float *out, const float *inp, const float *w, const float *b, int N, int IC, int OC) {
    ROWS_LOOP(W_F32, w, NULL);
}

void sk_linear_forward_q8(float *out, const float *inp, const int8_t *q, const uint16_t *d, const float *b,
                          int N, int IC, int OC) {
    ROWS_LOOP(W_Q8, q, d);
}
