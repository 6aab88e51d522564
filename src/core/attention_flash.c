/* Fused attention: tiled forward with an online softmax and a recomputing backward,
 * FlashAttention-2 style. Never holds an Lq x Lk matrix: per thread only a few
 * BQ x BK / BQ x D tiles (about 100 KiB at D = 64), plus lse and D_i = rowsum(dout*out)
 * of size (B, H, Lq).
 *
 * Determinism: every output element is produced by exactly one work item, in a fixed
 * order that depends only on the shapes (never on the thread count or the schedule), so
 * results are bit-identical for any number of OpenMP threads and from run to run.
 *   forward   : items (b, h, query tile), keys in increasing tiles;
 *   backward 1: dq, items (b, h, query tile), keys in increasing tiles;
 *   backward 2: dk, dv, items (b, kv head, key tile), looping over the query heads of the
 *               group and all query tiles in order; no atomics, no cross-thread sums.
 */
#include "skiplm_base.h"
#include "skiplm_attention.h"
#include "core/attention_internal.h"
#include "core/attention_tiles.h"
#include "core/ops.h"
#include "core/vmath.h"
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef __AVX__
#include <immintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

int sk_attn_bwd_path = 0;   /* 0 auto, 1 two passes (dq; dk+dv), 2 fused (see sk_attn_backward) */

/* BQ, BK, the masking, the key range and the backward's elementwise middle are in
 * core/attention_tiles.h (shared with the bf16 tiles of attention_bf16.c). */

/* sk_fexp (vectorisable expf) is in src/core/vmath.h. */

/* Register tile: C[i..i+R, c..c+W) = (acc_in ? C : 0) + sum over k = 0..K-1, in increasing
 * order, of A(r, k) * Bm[k, c..c+W), where A(r, k) = A[(i + r) * ars + k * aks]. R and W are
 * constants at every call, so the accumulators live in registers. Every element is summed
 * in the same order whatever the tile shape, so the blocking never changes the bits. */
static inline __attribute__((always_inline)) void tile(
        float *restrict C, int ldc, const float *restrict A, long ars, long aks,
        const float *restrict Bm, int ldb, int i, int c, int K, int acc_in, const int R, const int W) {
    float acc[8][32];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < W; t++) acc[r][t] = acc_in ? C[(size_t)(i + r) * ldc + c + t] : 0.0f;
    const float *a = A + (size_t)i * ars;
    for (int k = 0; k < K; k++) {
        const float *bk = Bm + (size_t)k * ldb + c;
        for (int r = 0; r < R; r++) {
            const float x = a[r * ars + k * aks];
            for (int t = 0; t < W; t++) acc[r][t] = fmaf(x, bk[t], acc[r][t]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < W; t++) C[(size_t)(i + r) * ldc + c + t] = acc[r][t];
}

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
/* AVX2 has 16 vector registers of 8 floats: the 8 x 32 tile above (32 registers of
 * accumulators) spills there on every k. This is the same tile, R rows x 16 columns (2R
 * registers, R <= 6), written with intrinsics so the accumulators stay in registers: the same
 * fused multiply-adds in the same order over k, so the same bits. */
#define SK_TILE_AVX2 1
static inline __attribute__((always_inline)) void tile16(
        float *restrict C, int ldc, const float *restrict A, long ars, long aks,
        const float *restrict Bm, int ldb, int i, int c, int K, int acc_in, const int R) {
    __m256 acc[6][2];
    for (int r = 0; r < R; r++)
        for (int h = 0; h < 2; h++)
            acc[r][h] = acc_in ? _mm256_loadu_ps(C + (size_t)(i + r) * ldc + c + 8 * h) : _mm256_setzero_ps();
    const float *a = A + (size_t)i * ars;
    for (int k = 0; k < K; k++) {
        const float *bk = Bm + (size_t)k * ldb + c;
        __m256 b0 = _mm256_loadu_ps(bk), b1 = _mm256_loadu_ps(bk + 8);
        for (int r = 0; r < R; r++) {
            __m256 x = _mm256_broadcast_ss(a + r * ars + k * aks);
            acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int h = 0; h < 2; h++) _mm256_storeu_ps(C + (size_t)(i + r) * ldc + c + 8 * h, acc[r][h]);
}
#define TILE_ROWS 6
#else
#define TILE_ROWS 8
#endif

/* One row block of R rows across all N columns: 32-, 16- and 8-wide tiles, then single columns
 * (with AVX2: 16-wide intrinsic tiles first). */
static inline __attribute__((always_inline)) void row_block(
        float *restrict C, int ldc, const float *restrict A, long ars, long aks,
        const float *restrict Bm, int ldb, int i, int N, int K, int acc_in, const int R) {
    int c = 0;
#ifdef SK_TILE_AVX2
    for (; c + 16 <= N; c += 16) tile16(C, ldc, A, ars, aks, Bm, ldb, i, c, K, acc_in, R);
#else
    for (; c + 32 <= N; c += 32) tile(C, ldc, A, ars, aks, Bm, ldb, i, c, K, acc_in, R, 32);
    for (; c + 16 <= N; c += 16) tile(C, ldc, A, ars, aks, Bm, ldb, i, c, K, acc_in, R, 16);
#endif
    for (; c + 8 <= N; c += 8) tile(C, ldc, A, ars, aks, Bm, ldb, i, c, K, acc_in, R, 8);
    for (; c < N; c++) tile(C, ldc, A, ars, aks, Bm, ldb, i, c, K, acc_in, R, 1);
}

/* C (M x N, ldc) = (acc_in ? C : 0) + op(A) Bm with Bm K x N (ldb), where op(A) is A (M x K,
 * strides ars = lda, aks = 1) or A^T (A stored K x M: ars = 1, aks = lda). */
static void gemm_any(float *restrict C, int ldc, const float *restrict A, long ars, long aks,
                     const float *restrict Bm, int ldb, int M, int N, int K, int acc_in) {
    int i = 0;
    for (; i + TILE_ROWS <= M; i += TILE_ROWS) row_block(C, ldc, A, ars, aks, Bm, ldb, i, N, K, acc_in, TILE_ROWS);
    for (; i + 4 <= M; i += 4) row_block(C, ldc, A, ars, aks, Bm, ldb, i, N, K, acc_in, 4);
    for (; i < M; i++) row_block(C, ldc, A, ars, aks, Bm, ldb, i, N, K, acc_in, 1);
}

/* C (M x N) = or += A (M x K, lda) * Bm (K x N, ldb). */
static void gemm(float *restrict C, int ldc, const float *restrict A, int lda,
                 const float *restrict Bm, int ldb, int M, int N, int K, int acc_in) {
    gemm_any(C, ldc, A, lda, 1, Bm, ldb, M, N, K, acc_in);
}

/* C (M x N) += A^T Bm, A stored K x M (lda). */
static void gemm_tn(float *restrict C, int ldc, const float *restrict A, int lda,
                    const float *restrict Bm, int ldb, int M, int N, int K) {
    gemm_any(C, ldc, A, 1, lda, Bm, ldb, M, N, K, 1);
}

/* Row i (global) of a strided head into dst[0..D), optionally scaled. */
static inline void load_row(float *restrict dst, const float *restrict src, int D, float s) {
    for (int t = 0; t < D; t++) dst[t] = src[t] * s;
}

/* Keys [j0, j0+nk) of one head: transposed (D x BK) and/or row-major (BK x D), zero-padded. */
static void load_keys(float *restrict T, float *restrict R, const float *base, long st,
                      int j0, int nk, int D) {
    if (T) {
        for (int t = 0; t < D; t++) for (int j = nk; j < BK; j++) T[t * BK + j] = 0.0f;
        int j = 0;
#ifdef __AVX__
        if (D % 8 == 0)
            for (; j + 8 <= nk; j += 8)
                for (int t = 0; t < D; t += 8) transpose8(T + t * BK + j, BK, base + (long)(j0 + j) * st + t, st);
#endif
        for (; j < nk; j++) {
            const float *src = base + (long)(j0 + j) * st;
            for (int t = 0; t < D; t++) T[t * BK + j] = src[t];
        }
    }
    if (R) {
        for (int j = 0; j < nk; j++) memcpy(R + (size_t)j * D, base + (long)(j0 + j) * st, sizeof(float) * D);
        memset(R + (size_t)nk * D, 0, sizeof(float) * (size_t)(BK - nk) * D);
    }
}

/* Rows [j0, j0+nk) of one head of a bf16 K or V (a bf16 KV cache), widened exactly to fp32
 * into R (BK x D, row-major, zero-padded): what load_keys copies from an fp32 one. */
static void widen_rows(float *restrict R, const uint16_t *base, long st, int j0, int nk, int D) {
    for (int j = 0; j < nk; j++) {            /* inline: this runs inside the attention's threads */
        const uint16_t *src = base + (long)(j0 + j) * st;
        float *dst = R + (size_t)j * D;
        for (int t = 0; t < D; t++) dst[t] = sk_bf16_to_f32(src[t]);
    }
    memset(R + (size_t)nk * D, 0, sizeof(float) * (size_t)(BK - nk) * D);
}

/* Query tiles of at most FEW_ROWS rows (decoding, a short last tile) skip the key
 * transposition, which would cost as much as their products: S = Q K^T as dot products
 * on the keys in place, and O += P V reads V in place. */
#define FEW_ROWS 4

/* Q_r . k over t: lane u (of 8) sums t = u, u + 8, ... by fused multiply-adds, the lanes are
 * added as ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), then the D mod 8 tail in order.
 * The AVX2 forms (one key, or four at once with the lanes added by hadd) and the portable one
 * give the same bits. */
#if defined(__AVX2__) && defined(__FMA__)
#define SK_DOT_AVX2 1
static inline float lanes_sum(__m256 a) {
    __m256 h = _mm256_hadd_ps(a, a);                 /* l0+l1, l2+l3 | l4+l5, l6+l7 */
    h = _mm256_hadd_ps(h, h);
    return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}
#endif

static inline float dot8(const float *restrict q, const float *restrict k, int D) {
    float s;
    int t = 0;
#ifdef SK_DOT_AVX2
    __m256 acc = _mm256_setzero_ps();
    for (; t + 8 <= D; t += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + t), _mm256_loadu_ps(k + t), acc);
    s = lanes_sum(acc);
#else
    float l[8] = {0};
    for (; t + 8 <= D; t += 8)
        for (int u = 0; u < 8; u++) l[u] = fmaf(q[t + u], k[t + u], l[u]);
    s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
#endif
    for (; t < D; t++) s = fmaf(q[t], k[t], s);
    return s;
}

/* S[r][j] = Q_r . K_{j0+j} for r < nq, j < nk (rows of S are BK apart; the rest is left for
 * mask_row, which sets every j >= nk to -inf). With AVX2 and D a multiple of 8, four keys at
 * a time: four accumulators in flight and one horizontal add for the four. */
static void scores_few(float *restrict S, const float *restrict Q, int nq, int D,
                       const float *kb, long st, int j0, int nk) {
    int j = 0;
#ifdef SK_DOT_AVX2
    if (D % 8 == 0)
        for (; j + 4 <= nk; j += 4) {
            const float *k0 = kb + (long)(j0 + j) * st, *k1 = k0 + st, *k2 = k1 + st, *k3 = k2 + st;
            for (int r = 0; r < nq; r++) {
                const float *q = Q + r * D;
                __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
                for (int t = 0; t < D; t += 8) {
                    const __m256 x = _mm256_loadu_ps(q + t);
                    a0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k0 + t), a0);
                    a1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k1 + t), a1);
                    a2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k2 + t), a2);
                    a3 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k3 + t), a3);
                }
                /* per accumulator: (l0+l1)+(l2+l3) in the low half, (l4+l5)+(l6+l7) in the high */
                const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
                _mm_storeu_ps(S + r * BK + j, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
            }
        }
#endif
    for (; j < nk; j++) {
        const float *kj = kb + (long)(j0 + j) * st;
        for (int r = 0; r < nq; r++) S[r * BK + j] = dot8(Q + r * D, kj, D);
    }
}

/* ------------------------------------------------------------------ forward */

static void fwd_item(const sk_attn *a, const sk_attn_plan *P, int b, int h, int qt, float *ws, float *lse_out) {
    const int D = a->D, Lq = a->Lq, Lk = a->Lk;
    const int i0 = qt * BQ, nq = imin(BQ, Lq - i0), hk = h / P->group;
    float *Q = ws, *Kt = Q + BQ * D, *V = Kt + D * BK, *S = V + BK * D, *O = S + BQ * BK;
    float *m = O + BQ * D, *l = m + BQ;
    const float *qb = a->q + b * a->q_sb + h * a->q_sh;
    /* fp32 K/V, or bf16 ones (k16, v16) whose tiles are widened into V first: the keys (then
     * read as an fp32 head of stride D), then the values; the products are the same */
    const float *kb = a->k ? a->k + b * a->k_sb + hk * a->k_sh : NULL;
    const float *vb = a->v ? a->v + b * a->v_sb + hk * a->v_sh : NULL;
    const uint16_t *kb16 = a->k16 ? a->k16 + b * a->k_sb + hk * a->k_sh : NULL;
    const uint16_t *vb16 = a->v16 ? a->v16 + b * a->v_sb + hk * a->v_sh : NULL;
    for (int i = 0; i < nq; i++) load_row(Q + i * D, qb + (long)(i0 + i) * a->q_st, D, P->scale);
    memset(O, 0, sizeof(float) * BQ * D);
    for (int i = 0; i < nq; i++) { m[i] = -INFINITY; l[i] = 0.0f; }
    const int jend = key_end(P, Lk, i0, nq), few = nq <= FEW_ROWS;
    for (int j0 = 0; j0 < jend; j0 += BK) {
        const int nk = imin(BK, jend - j0);
        const float *kj = kb;
        long kst = a->k_st;
        int kj0 = j0;
        if (kb16) {
            widen_rows(V, kb16, a->k_st, j0, nk, D);
            kj = V; kst = D; kj0 = 0;
        }
        if (few) {
            scores_few(S, Q, nq, D, kj, kst, kj0, nk);
        } else {
            load_keys(Kt, NULL, kj, kst, kj0, nk, D);
            gemm(S, BK, Q, D, Kt, BK, nq, BK, D, 0);
        }
        const float *Vj = V;                  /* the value rows, copied or in place */
        int ldv = D;
        if (vb16) {
            widen_rows(V, vb16, a->v_st, j0, nk, D);
        } else if (few && a->v_st <= INT_MAX) {
            Vj = vb + (long)j0 * a->v_st;
            ldv = (int)a->v_st;
        } else {
            load_keys(NULL, V, vb, a->v_st, j0, nk, D);
        }
        /* per row: mask, running max, exponentials and their sum, in place. The max halves the
         * row (the same value in any order unless a score is NaN, which makes the row NaN
         * anyway); the sum runs in 8 lanes (lane t takes j = t mod 8), added in a fixed tree at
         * the end, so its order depends only on BK. Both vectorise. */
        float alpha[BQ], sum[BQ];
        unsigned char live[BQ];
        for (int i = 0; i < nq; i++) {
            float *s = S + i * BK;
            mask_row(s, P, b, h, i0 + i, j0, nk);
            float u[BK / 2];                  /* max by halving: plain elementwise loops */
            for (int t = 0; t < BK / 2; t++) u[t] = s[t + BK / 2] > s[t] ? s[t + BK / 2] : s[t];
            for (int w = BK / 4; w >= 8; w /= 2)
                for (int t = 0; t < w; t++) u[t] = u[t + w] > u[t] ? u[t + w] : u[t];
            float mx = -INFINITY;
            for (int t = 0; t < 8; t++) mx = u[t] > mx ? u[t] : mx;
            float mnew = mx > m[i] ? mx : m[i];
            if (mnew == -INFINITY) {          /* nothing visible yet in this row */
                for (int j = 0; j < BK; j++) s[j] = 0.0f;
                live[i] = 0;
                continue;
            }
            live[i] = 1;
            alpha[i] = sk_fexp(m[i] - mnew);
            m[i] = mnew;
            float acc[8] = {0};
            for (int j = 0; j < BK; j += 8)
                for (int t = 0; t < 8; t++) {
                    const float e = sk_fexp(s[j + t] - mnew);
                    s[j + t] = e;
                    acc[t] += e;
                }
            sum[i] = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
        }
        for (int i = 0; i < nq; i++) {
            if (!live[i]) continue;
            float *s = S + i * BK;
            l[i] = l[i] * alpha[i] + sum[i];
            if (alpha[i] != 1.0f) for (int t = 0; t < D; t++) O[i * D + t] *= alpha[i];
            if (P->dropout) {
                uint64_t rk = sk_attn_rowkey(P, b, h, i0 + i);
                for (int j = 0; j < nk; j++) s[j] = sk_attn_keep(P, rk, j0 + j) ? s[j] * P->inv_keep : 0.0f;
            }
        }
        gemm(O, D, S, BK, Vj, ldv, nq, D, nk, 1);
    }
    for (int i = 0; i < nq; i++) {
        float *o = a->out + b * a->o_sb + h * a->o_sh + (long)(i0 + i) * a->o_st;
        float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        for (int t = 0; t < D; t++) o[t] = O[i * D + t] * inv;
        if (lse_out) lse_out[((size_t)b * a->H + h) * Lq + i0 + i] = l[i] > 0.0f ? m[i] + logf(l[i]) : INFINITY;
    }
}

/* Weights from the saved lse: W = exp(s - lse) * dropout, per head or averaged (sum, / H).
 * Items are (b, query row), heads summed in order. */
static void weights_pass(const sk_attn *a, const sk_attn_plan *P, const float *lse) {
    const int B = a->B, H = a->H, Lq = a->Lq, Lk = a->Lk, D = a->D;
    long n_items = (long)B * Lq;
    int fail = 0;
    #pragma omp parallel
    {
        float *qs = alloc_ws((size_t)D + BK);
        if (!qs) {
            #pragma omp atomic write
            fail = 1;
        }
        #pragma omp for schedule(dynamic, 16)
        for (long it = 0; it < n_items; it++) {
            if (!qs) continue;
            int b = (int)(it / Lq), i = (int)(it % Lq);
            float *wavg = a->weights_avg ? a->weights + ((size_t)b * Lq + i) * Lk : NULL;
            if (wavg) memset(wavg, 0, sizeof(float) * Lk);
            for (int h = 0; h < H; h++) {
                int hk = h / P->group;
                float *w = wavg ? NULL : a->weights + (((size_t)b * H + h) * Lq + i) * Lk;
                const float *qi = a->q + b * a->q_sb + h * a->q_sh + (long)i * a->q_st;
                if (!P->bf16) load_row(qs, qi, D, P->scale);
                float L = lse[((size_t)b * H + h) * Lq + i];
                uint64_t rk = P->dropout ? sk_attn_rowkey(P, b, h, i) : 0;
                const float *kb = a->k + b * a->k_sb + hk * a->k_sh;
                for (int j = 0; j < Lk; j++) {
                    float x = 0.0f;
                    if (sk_attn_allowed(P, b, h, i, j) && L != INFINITY) {
                        const float *kj = kb + (long)j * a->k_st;
                        float s = 0.0f;
                        if (P->bf16) s = sk_attn_bf16_score(qi, kj, D, P->scale);
                        else for (int t = 0; t < D; t++) s = fmaf(qs[t], kj[t], s);
                        x = sk_fexp(s - L);
                        if (P->dropout) x = sk_attn_keep(P, rk, j) ? x * P->inv_keep : 0.0f;
                    }
                    if (wavg) wavg[j] += x; else w[j] = x;
                }
            }
            if (wavg) for (int j = 0; j < Lk; j++) wavg[j] /= (float)H;
        }
        free(qs);
    }
    (void)fail;
}

int sk_attn_forward(const sk_attn *a) {
    int rc = sk_attn_check(a);
    if (rc) return rc;
    sk_attn_plan P;
    sk_attn_plan_init(&P, a);
    const int B = a->B, H = a->H, Lq = a->Lq, D = a->D;
    float *lse = a->lse, *tmp_lse = NULL;
    if (!lse && a->weights) {
        tmp_lse = malloc(sizeof(float) * (size_t)B * H * Lq);
        if (!tmp_lse) return sk_error(SK_ENOMEM, "attention: out of memory for lse");
        lse = tmp_lse;
    }
    const int nqt = (Lq + BQ - 1) / BQ;
    const long n_items = (long)B * H * nqt;
    const size_t ws_n = P.bf16 ? sk_attn_bf16_fwd_ws(D)
                               : (size_t)BQ * D * 2 + (size_t)D * BK + (size_t)BK * D + (size_t)BQ * BK + 2 * BQ;
    int fail = 0;
    #pragma omp parallel
    {
        float *ws = alloc_ws(ws_n);
        if (!ws) {
            #pragma omp atomic write
            fail = 1;
        }
        /* heaviest (last, under causal) query tiles first */
        #pragma omp for schedule(dynamic, 1)
        for (long it = 0; it < n_items; it++) {
            if (!ws) continue;
            int qt = nqt - 1 - (int)(it % nqt);
            int bh = (int)(it / nqt);
            if (P.bf16) sk_attn_bf16_fwd_item(a, &P, bh / H, bh % H, qt, ws, lse);
            else fwd_item(a, &P, bh / H, bh % H, qt, ws, lse);
        }
        free(ws);
    }
    if (!fail && a->weights) weights_pass(a, &P, lse);
    free(tmp_lse);
    if (fail) return sk_error(SK_ENOMEM, "attention: out of memory for tile workspace");
    return SK_OK;
}

/* ----------------------------------------------------------------- backward */

static void bwd_dq_item(const sk_attn *a, const sk_attn_plan *P, int b, int h, int qt,
                        const float *dout, const float *Dall, float *dq, float *ws) {
    const int D = a->D, Lq = a->Lq, Lk = a->Lk;
    const int i0 = qt * BQ, nq = imin(BQ, Lq - i0), hk = h / P->group;
    float *Q = ws, *dO = Q + BQ * D, *Kt = dO + BQ * D, *Vt = Kt + D * BK, *K = Vt + D * BK;
    float *S = K + BK * D, *dP = S + BQ * BK, *dQ = dP + BQ * BK;
    const float *qb = a->q + b * a->q_sb + h * a->q_sh;
    const float *kb = a->k + b * a->k_sb + hk * a->k_sh;
    const float *vb = a->v + b * a->v_sb + hk * a->v_sh;
    const float *ob = dout + b * a->o_sb + h * a->o_sh;
    const float *lse = a->lse + ((size_t)b * a->H + h) * Lq + i0;
    const float *Di = Dall + ((size_t)b * a->H + h) * Lq + i0;
    for (int i = 0; i < nq; i++) {
        load_row(Q + i * D, qb + (long)(i0 + i) * a->q_st, D, P->scale);
        load_row(dO + i * D, ob + (long)(i0 + i) * a->o_st, D, 1.0f);
    }
    memset(dQ, 0, sizeof(float) * BQ * D);
    const int jend = key_end(P, Lk, i0, nq);
    for (int j0 = 0; j0 < jend; j0 += BK) {
        const int nk = imin(BK, jend - j0);
        load_keys(Kt, K, kb, a->k_st, j0, nk, D);
        load_keys(Vt, NULL, vb, a->v_st, j0, nk, D);
        gemm(S, BK, Q, D, Kt, BK, nq, BK, D, 0);
        gemm(dP, BK, dO, D, Vt, BK, nq, BK, D, 0);
        bwd_elementwise(P, b, h, i0, nq, j0, nk, S, dP, lse, Di, NULL);
        gemm(dQ, D, S, BK, K, D, nq, D, nk, 1);
    }
    for (int i = 0; i < nq; i++) {
        float *g = dq + b * a->q_sb + h * a->q_sh + (long)(i0 + i) * a->q_st;
        for (int t = 0; t < D; t++) g[t] += P->scale * dQ[i * D + t];
    }
}

/* dK, dV of key tile kt of kv head hk. With dQacc (group x Lq x D, this item's own), also
 * dQacc += dS K for every (query head, query tile) visited, summing over exactly the keys
 * and in exactly the order bwd_dq_item does, so the fused path is bit-identical to it. */
static void bwd_dkv_item(const sk_attn *a, const sk_attn_plan *P, int b, int hk, int kt,
                         const float *dout, const float *Dall, float *dk, float *dv, float *ws,
                         float *dQacc) {
    const int D = a->D, Lq = a->Lq, Lk = a->Lk;
    const int j0 = kt * BK, nk = imin(BK, Lk - j0);
    float *Q = ws, *dO = Q + BQ * D, *Kt = dO + BQ * D, *Vt = Kt + D * BK;
    float *S = Vt + D * BK, *dP = S + BQ * BK, *PZ = dP + BQ * BK;
    float *dK = PZ + BQ * BK, *dV = dK + BK * D, *K = dV + BK * D;
    load_keys(Kt, dQacc ? K : NULL, a->k + b * a->k_sb + hk * a->k_sh, a->k_st, j0, nk, D);
    load_keys(Vt, NULL, a->v + b * a->v_sb + hk * a->v_sh, a->v_st, j0, nk, D);
    memset(dK, 0, sizeof(float) * BK * D);
    memset(dV, 0, sizeof(float) * BK * D);
    /* first query that sees key j0 under the causal rule: i + off >= j0 */
    int istart = 0;
    if (P->causal) {
        long s = (long)j0 - P->off;
        if (s >= Lq) goto done;
        istart = s < 0 ? 0 : (int)(s / BQ) * BQ;
    }
    for (int h = hk * P->group; h < (hk + 1) * P->group; h++) {
        const float *qb = a->q + b * a->q_sb + h * a->q_sh;
        const float *ob = dout + b * a->o_sb + h * a->o_sh;
        const float *lse = a->lse + ((size_t)b * a->H + h) * Lq;
        const float *Di = Dall + ((size_t)b * a->H + h) * Lq;
        for (int i0 = istart; i0 < Lq; i0 += BQ) {
            const int nq = imin(BQ, Lq - i0);
            for (int i = 0; i < nq; i++) {
                load_row(Q + i * D, qb + (long)(i0 + i) * a->q_st, D, P->scale);
                load_row(dO + i * D, ob + (long)(i0 + i) * a->o_st, D, 1.0f);
            }
            gemm(S, BK, Q, D, Kt, BK, nq, BK, D, 0);
            gemm(dP, BK, dO, D, Vt, BK, nq, BK, D, 0);
            bwd_elementwise(P, b, h, i0, nq, j0, nk, S, dP, lse + i0, Di + i0, PZ);
            gemm_tn(dV, D, PZ, BK, dO, D, nk, D, nq);    /* dV += (Z P)^T dO */
            gemm_tn(dK, D, S, BK, Q, D, nk, D, nq);      /* dK += dS^T (scale q) */
            if (dQacc) {                                 /* dQ += dS K over bwd_dq_item's keys */
                const int nkq = imin(BK, key_end(P, Lk, i0, nq) - j0);
                gemm(dQacc + ((size_t)(h - hk * P->group) * Lq + i0) * D, D, S, BK, K, D, nq, D, nkq, 1);
            }
        }
    }
done:
    for (int j = 0; j < nk; j++) {
        if (dk) { float *g = dk + b * a->k_sb + hk * a->k_sh + (long)(j0 + j) * a->k_st;
                  for (int t = 0; t < D; t++) g[t] += dK[j * D + t]; }
        if (dv) { float *g = dv + b * a->v_sb + hk * a->v_sh + (long)(j0 + j) * a->v_st;
                  for (int t = 0; t < D; t++) g[t] += dV[j * D + t]; }
    }
}

int sk_attn_backward(const sk_attn *a, const float *dout, float *dq, float *dk, float *dv) {
    int rc = sk_attn_check(a);
    if (rc) return rc;
    if (a->k16) return sk_error(SK_EINVAL, "attention backward: bf16 K/V (k16, v16) are forward only");
    if (!dout) return sk_error(SK_EINVAL, "attention backward: dout is NULL");
    if (!a->lse) return sk_error(SK_EINVAL, "attention backward: a->lse is NULL (save it in the forward pass)");
    sk_attn_plan P;
    sk_attn_plan_init(&P, a);
    const int B = a->B, H = a->H, Hkv = a->Hkv, Lq = a->Lq, Lk = a->Lk, D = a->D;
    /* D_i = rowsum(dout * out), (B, H, Lq) */
    float *Dall = malloc(sizeof(float) * (size_t)B * H * Lq);
    if (!Dall) return sk_error(SK_ENOMEM, "attention backward: out of memory");
    #pragma omp parallel for schedule(static)
    for (long r = 0; r < (long)B * H * Lq; r++) {
        int b = (int)(r / ((long)H * Lq)), h = (int)(r / Lq % H), i = (int)(r % Lq);
        const float *o = a->out + b * a->o_sb + h * a->o_sh + (long)i * a->o_st;
        const float *g = dout + b * a->o_sb + h * a->o_sh + (long)i * a->o_st;
        float s = 0.0f;
        for (int t = 0; t < D; t++) s = fmaf(o[t], g[t], s);
        Dall[r] = s;
    }
    const size_t ws_n = P.bf16 ? sk_attn_bf16_bwd_ws(D)
                               : (size_t)BQ * D * 2 + (size_t)D * BK * 2 + (size_t)BK * D * 3 + (size_t)BQ * BK * 3;
    int fail = 0;
    const int nqt = (Lq + BQ - 1) / BQ, nkt = (Lk + BK - 1) / BK;
    /* Fused path: one item per (b, kv head) does all its key tiles and also accumulates the
     * group's dq, skipping the dq pass's second recomputation of S, dP and the exponentials.
     * Used when there are enough items to keep the threads busy; bit-identical either way. */
    int nthr = 1;
#ifdef _OPENMP
    nthr = omp_get_max_threads();
#endif
    const int fused = dq && (dk || dv) && (sk_attn_bwd_path == 2 ||
                      (sk_attn_bwd_path == 0 && (long)B * Hkv >= 2L * nthr));
    const size_t acc_n = (size_t)P.group * Lq * D;
    #pragma omp parallel
    {
        float *ws = alloc_ws(ws_n);
        float *dQacc = fused ? alloc_ws(acc_n) : NULL;
        if (!ws || (fused && !dQacc)) {
            #pragma omp atomic write
            fail = 1;
        }
        if (fused) {
            #pragma omp for schedule(dynamic, 1)
            for (long it = 0; it < (long)B * Hkv; it++) {
                if (!ws || !dQacc) continue;
                int b = (int)(it / Hkv), hk = (int)(it % Hkv);
                memset(dQacc, 0, sizeof(float) * acc_n);
                for (int kt = 0; kt < nkt; kt++) {
                    if (P.bf16) sk_attn_bf16_dkv_item(a, &P, b, hk, kt, dout, Dall, dk, dv, ws, dQacc);
                    else bwd_dkv_item(a, &P, b, hk, kt, dout, Dall, dk, dv, ws, dQacc);
                }
                for (int g = 0; g < P.group; g++) {
                    const int h = hk * P.group + g;
                    for (int i = 0; i < Lq; i++) {
                        float *d = dq + b * a->q_sb + h * a->q_sh + (long)i * a->q_st;
                        const float *s = dQacc + ((size_t)g * Lq + i) * D;
                        for (int t = 0; t < D; t++) d[t] += P.scale * s[t];
                    }
                }
            }
        }
        if (dq && !fused) {
            #pragma omp for schedule(dynamic, 1)
            for (long it = 0; it < (long)B * H * nqt; it++) {
                if (!ws) continue;
                int qt = nqt - 1 - (int)(it % nqt), bh = (int)(it / nqt);
                if (P.bf16) sk_attn_bf16_dq_item(a, &P, bh / H, bh % H, qt, dout, Dall, dq, ws);
                else bwd_dq_item(a, &P, bh / H, bh % H, qt, dout, Dall, dq, ws);
            }
        }
        if ((dk || dv) && !fused) {
            #pragma omp for schedule(dynamic, 1)
            for (long it = 0; it < (long)B * Hkv * nkt; it++) {
                if (!ws) continue;
                int kt = (int)(it % nkt), bh = (int)(it / nkt);
                if (P.bf16) sk_attn_bf16_dkv_item(a, &P, bh / Hkv, bh % Hkv, kt, dout, Dall, dk, dv, ws, NULL);
                else bwd_dkv_item(a, &P, bh / Hkv, bh % Hkv, kt, dout, Dall, dk, dv, ws, NULL);
            }
        }
        free(ws);
        free(dQacc);
    }
    free(Dall);
    if (fail) return sk_error(SK_ENOMEM, "attention backward: out of memory for tile workspace");
    return SK_OK;
}
