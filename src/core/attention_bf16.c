/* The fused attention's tiles in bf16 (sk_attn.bf16: bf16 mixed precision): the work items,
 * tiling, masking and dropout of attention_flash.c, with every matrix product a bf16 dot product
 * summed in fp32. Called by sk_attn_forward / sk_attn_backward (attention_flash.c), which own
 * the OpenMP loops; the determinism argument there holds here too.
 *
 * Operands. Each product multiplies values rounded to bf16 (nearest even, sk_rne_bf16; a
 * denormal counts as zero, as vdpbf16ps reads it) and adds the products, exact in fp32, in fp32:
 *   forward   S = scale (q . k)   O = (P~ v) / l   P~ = bf16(Z exp(S - c)), l = rowsum exp(S - c)
 *   backward  S again, dP = dO . v, dS = P (Z dP - D_i) with P = exp(S - lse) (fp32),
 *             dV = bf16(Z P)^T dO, dK = scale bf16(dS)^T q, dQ = scale bf16(dS) k
 * where Z is the dropout factor. The softmax statistics (the shift c, l, lse) and
 * D_i = rowsum(dO * O) stay fp32, as do O and the gradients.
 *
 * Power-of-two shifts. The forward's online softmax subtracts from a row's scores c = k ln 2,
 * k = ceil(max * log2 e) over the keys seen so far, instead of the running max: rescaling the
 * partial sums by exp(c_old - c_new) = 2^(k_old - k_new) is then exact and commutes with rounding
 * to bf16, so the weights a key tile rounds are the ones a single pass over the whole row would
 * round, whatever the tiling (a reference rounds exp(S - c) for c any integer multiple of ln 2
 * near the row's max; e.g. tests/ref/bf16_ref.py).
 *
 * Layout. vdpbf16ps works on pairs: lane n of acc += a.hi * b[n].hi, then += a.lo * b[n].lo, each
 * sum rounded to fp32, where a is one 32-bit word (two bf16 consecutive along the reduction)
 * broadcast, and b[n] the word of output column n. So an A operand is rows of words (pairs along
 * the reduction: q, dO, P~, dS rows), read at A[r * ars + p * aks] (aks = 1, or the transposed
 * dS^T and (ZP)^T), and a B operand is pair rows, word (p, n) = (x[2p][n], x[2p+1][n]): the keys
 * transposed for S and dP, and pairs of rows of v, k, q and dO for P~ v, dS k, dS^T q, (ZP)^T dO.
 * Without avx512_bf16 (or with SKIPLM_NO_AVX512BF16 set) the same two fused multiply-adds per
 * word run in fp32 in the same order, which gives the same bits: a product of two bf16 is exact
 * in fp32. The one difference: vdpbf16ps flushes a partial sum below 2^-126 to zero. */
#include "skiplm_base.h"
#include "skiplm_attention.h"
#include "core/attention_internal.h"
#include "core/attention_tiles.h"
#include "core/ops_bf16.h"
#include "core/vmath.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__clang__) ? __clang_major__ >= 9 : __GNUC__ >= 10)
#define SK_ATTN_DP 1
#include <immintrin.h>
#define DP_TARGET __attribute__((target("avx512bf16,avx512f,avx512bw,avx512vl")))
#endif

int sk_attn_bf16_native(void) {
#ifdef SK_ATTN_DP
    const char *e = getenv("SKIPLM_NO_AVX512BF16");
    if (e && *e && strcmp(e, "0") != 0) return 0;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
#else
    return 0;
#endif
}

/* ------------------------------------------------------------------ packing */

static inline float f32_of(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }

/* x rounded to bf16, nearest even; a denormal result becomes a zero of its sign */
static inline uint32_t bf16_of(float x) {
    uint32_t r = sk_rne_bf16(x);
    return (r & 0x7f80u) ? r : (r & 0x8000u);
}
static inline uint32_t pair_of(float lo, float hi) { return bf16_of(lo) | bf16_of(hi) << 16; }

static inline int pad16(int n) { return (n + 15) & ~15; }

/* Rows of words: dst[r * ldd + t] = (x_r[2t], x_r[2t + 1]) for r < n, t < ceil(W / 2), a zero
 * high half when W is odd; x_r = src + r * st. */
static void pack_rows(uint32_t *restrict dst, int ldd, const float *src, long st, int n, int W) {
    for (int r = 0; r < n; r++) {
        const float *restrict x = src + r * st;
        uint32_t *restrict d = dst + (size_t)r * ldd;
        for (int t = 0; t < W / 2; t++) d[t] = pair_of(x[2 * t], x[2 * t + 1]);
        if (W & 1) d[W / 2] = pair_of(x[W - 1], 0.0f);
    }
}

/* Pair rows: dst[p * ldd + c] = (x_2p[c], x_2p+1[c]) for p < ceil(n / 2), c < W (a zero high
 * half for the last pair of an odd n), zero for W <= c < Wpad. */
static void pack_pairs(uint32_t *restrict dst, int ldd, const float *src, long st, int n, int W, int Wpad) {
    for (int p = 0; p < (n + 1) / 2; p++) {
        const float *restrict x0 = src + 2 * p * st, *restrict x1 = x0 + st;
        uint32_t *restrict d = dst + (size_t)p * ldd;
        if (2 * p + 1 < n) for (int c = 0; c < W; c++) d[c] = pair_of(x0[c], x1[c]);
        else for (int c = 0; c < W; c++) d[c] = pair_of(x0[c], 0.0f);
        for (int c = W; c < Wpad; c++) d[c] = 0;
    }
}

/* Keys (or values) [0, nk) of a tile, x_j = src + j * st, as the B operand of a product with
 * rows of D: T[t * BK + j] = (x_j[2t], x_j[2t + 1]), zero for nk <= j < BK; R (BK x D2 words) is
 * scratch. */
static void pack_cols(uint32_t *restrict T, uint32_t *restrict R, const float *src, long st, int nk, int D) {
    const int D2 = (D + 1) / 2;
    pack_rows(R, D2, src, st, nk, D);
    memset(R + (size_t)nk * D2, 0, sizeof(uint32_t) * (size_t)(BK - nk) * D2);
    int t0 = 0;
#ifdef __AVX__
    /* 8 x 8 blocks of words, moved as floats (a move keeps the bits) */
    for (; t0 + 8 <= D2; t0 += 8)
        for (int j = 0; j < BK; j += 8)
            transpose8((float *)(T + (size_t)t0 * BK + j), BK, (const float *)(R + (size_t)j * D2 + t0), D2);
#endif
    for (int t = t0; t < D2; t++)
        for (int j = 0; j < BK; j++) T[(size_t)t * BK + j] = R[(size_t)j * D2 + t];
}

/* ---------------------------------------------------------- dot products
 *
 * C (M x N, ldc) = (acc_in ? C : 0) + sum over p < Kp, in increasing order, of the pair products
 * of A(r, p) = A[r * ars + p * aks] and B[p * ldb + n]: per word, hi * hi then lo * lo, each
 * added in fp32. B's rows are readable (and finite) up to pad16(N) words. */

#ifdef SK_ATTN_DP
static inline __attribute__((always_inline)) DP_TARGET void dp_tile(
        float *restrict C, int ldc, const uint32_t *restrict A, long ars, long aks,
        const uint32_t *restrict B, int ldb, int i, int c, int Kp, int acc_in, __mmask16 last,
        const int R, const int NV) {
    __m512 acc[6][4];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++)
            acc[r][v] = acc_in ? _mm512_maskz_loadu_ps(v == NV - 1 ? last : 0xffff, C + (size_t)(i + r) * ldc + c + 16 * v)
                               : _mm512_setzero_ps();
    const uint32_t *a = A + (size_t)i * ars;
    for (int p = 0; p < Kp; p++) {
        const uint32_t *bp = B + (size_t)p * ldb + c;
        __m512i bv[4];
        for (int v = 0; v < NV; v++) bv[v] = _mm512_loadu_si512(bp + 16 * v);
        for (int r = 0; r < R; r++) {
            const __m512i x = _mm512_set1_epi32((int)a[r * ars + p * aks]);
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)x, (__m512bh)bv[v]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++)
            _mm512_mask_storeu_ps(C + (size_t)(i + r) * ldc + c + 16 * v, v == NV - 1 ? last : 0xffff, acc[r][v]);
}

/* R rows across all N columns, 64 at a time (4 x 16 lanes: with R = 6, 24 accumulators) */
static inline __attribute__((always_inline)) DP_TARGET void dp_rows(
        float *restrict C, int ldc, const uint32_t *restrict A, long ars, long aks,
        const uint32_t *restrict B, int ldb, int i, int N, int Kp, int acc_in, const int R) {
    for (int c = 0; c < N; c += 64) {
        const int rem = N - c, nv = rem >= 64 ? 4 : (rem + 15) / 16, tail = rem >= 64 ? 16 : rem - 16 * (nv - 1);
        const __mmask16 last = tail == 16 ? (__mmask16)0xffff : (__mmask16)((1u << tail) - 1);
        switch (nv) {
        case 4: dp_tile(C, ldc, A, ars, aks, B, ldb, i, c, Kp, acc_in, last, R, 4); break;
        case 3: dp_tile(C, ldc, A, ars, aks, B, ldb, i, c, Kp, acc_in, last, R, 3); break;
        case 2: dp_tile(C, ldc, A, ars, aks, B, ldb, i, c, Kp, acc_in, last, R, 2); break;
        default: dp_tile(C, ldc, A, ars, aks, B, ldb, i, c, Kp, acc_in, last, R, 1); break;
        }
    }
}

static DP_TARGET void gemm_dp(float *restrict C, int ldc, const uint32_t *restrict A, long ars, long aks,
                              const uint32_t *restrict B, int ldb, int M, int N, int Kp, int acc_in) {
    int i = 0;
    for (; i + 6 <= M; i += 6) dp_rows(C, ldc, A, ars, aks, B, ldb, i, N, Kp, acc_in, 6);
    for (; i + 4 <= M; i += 4) dp_rows(C, ldc, A, ars, aks, B, ldb, i, N, Kp, acc_in, 4);
    for (; i + 2 <= M; i += 2) dp_rows(C, ldc, A, ars, aks, B, ldb, i, N, Kp, acc_in, 2);
    for (; i < M; i++) dp_rows(C, ldc, A, ars, aks, B, ldb, i, N, Kp, acc_in, 1);
}
#endif

/* The same sums by fp32 fused multiply-adds on the widened halves: R rows x 16 columns */
static inline __attribute__((always_inline)) void fma_tile(
        float *restrict C, int ldc, const uint32_t *restrict A, long ars, long aks,
        const uint32_t *restrict B, int ldb, int i, int c, int W, int Kp, int acc_in, const int R) {
    float acc[4][16];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < 16; t++) acc[r][t] = acc_in && t < W ? C[(size_t)(i + r) * ldc + c + t] : 0.0f;
    const uint32_t *a = A + (size_t)i * ars;
    for (int p = 0; p < Kp; p++) {
        const uint32_t *bp = B + (size_t)p * ldb + c;
        float lo[16], hi[16];
        for (int t = 0; t < 16; t++) { lo[t] = f32_of(bp[t] << 16); hi[t] = f32_of(bp[t] & 0xffff0000u); }
        for (int r = 0; r < R; r++) {
            const uint32_t w = a[r * ars + p * aks];
            const float xl = f32_of(w << 16), xh = f32_of(w & 0xffff0000u);
            for (int t = 0; t < 16; t++) acc[r][t] = fmaf(xl, lo[t], fmaf(xh, hi[t], acc[r][t]));
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < W; t++) C[(size_t)(i + r) * ldc + c + t] = acc[r][t];
}

static void gemm_fma(float *restrict C, int ldc, const uint32_t *restrict A, long ars, long aks,
                     const uint32_t *restrict B, int ldb, int M, int N, int Kp, int acc_in) {
    for (int c = 0; c < N; c += 16) {
        const int W = imin(16, N - c);
        int i = 0;
        for (; i + 4 <= M; i += 4) fma_tile(C, ldc, A, ars, aks, B, ldb, i, c, W, Kp, acc_in, 4);
        for (; i < M; i++) fma_tile(C, ldc, A, ars, aks, B, ldb, i, c, W, Kp, acc_in, 1);
    }
}

static void gemm16(int kind, float *restrict C, int ldc, const uint32_t *restrict A, long ars, long aks,
                   const uint32_t *restrict B, int ldb, int M, int N, int Kp, int acc_in) {
#ifdef SK_ATTN_DP
    if (kind == SK_ATTN_BF16_DP) { gemm_dp(C, ldc, A, ars, aks, B, ldb, M, N, Kp, acc_in); return; }
#endif
    gemm_fma(C, ldc, A, ars, aks, B, ldb, M, N, Kp, acc_in);
}

/* S (nq x BK) = scale * (Qh . Kt): the scores of a tile */
static void scores(int kind, float *restrict S, const uint32_t *Qh, const uint32_t *Kt, int nq, int D2, float scale) {
    gemm16(kind, S, BK, Qh, D2, 1, Kt, BK, nq, BK, D2, 0);
    for (int i = 0; i < nq; i++)
        for (int j = 0; j < BK; j++) S[i * BK + j] *= scale;
}

float sk_attn_bf16_score(const float *q, const float *k, int D, float scale) {
    float s = 0.0f;
    for (int t = 0; t < D; t++) s = fmaf(f32_of(bf16_of(q[t]) << 16), f32_of(bf16_of(k[t]) << 16), s);
    return s * scale;
}

/* ---------------------------------------------------------- workspaces
 * Carved from one buffer of 4-byte units, each piece 64-byte aligned; base NULL just counts. */

static void *carve(void *base, size_t *off, size_t n) {
    void *p = base ? (char *)base + *off * 4 : NULL;
    *off += (n + 15) & ~(size_t)15;
    return p;
}
#define CARVE(ptr, n) ((ptr) = carve(base, &off, (n)))

typedef struct {
    uint32_t *Qh, *Kt, *Rt, *Vp, *Ph;
    float *S, *O, *m, *l;
} fwd_ws;

static size_t fwd_carve(fwd_ws *w, float *base, int D) {
    const size_t D2 = (size_t)(D + 1) / 2, DP = (size_t)pad16(D);
    size_t off = 0;
    CARVE(w->Qh, BQ * D2); CARVE(w->Kt, D2 * BK); CARVE(w->Rt, BK * D2); CARVE(w->Vp, BK / 2 * DP);
    CARVE(w->Ph, BQ * BK / 2); CARVE(w->S, BQ * BK); CARVE(w->O, BQ * (size_t)D); CARVE(w->m, BQ);
    CARVE(w->l, BQ);
    return off;
}

typedef struct {
    uint32_t *Qh, *dOh, *Qp, *dOp, *Kt, *Vt, *Rt, *Kp, *PZp, *dSp, *dSh;
    float *S, *dP, *PZ, *dK, *dV, *dQ;
} bwd_ws;

static size_t bwd_carve(bwd_ws *w, float *base, int D) {
    const size_t D2 = (size_t)(D + 1) / 2, DP = (size_t)pad16(D);
    size_t off = 0;
    CARVE(w->Qh, BQ * D2); CARVE(w->dOh, BQ * D2); CARVE(w->Qp, BQ / 2 * DP); CARVE(w->dOp, BQ / 2 * DP);
    CARVE(w->Kt, D2 * BK); CARVE(w->Vt, D2 * BK); CARVE(w->Rt, BK * D2); CARVE(w->Kp, BK / 2 * DP);
    CARVE(w->PZp, BQ / 2 * BK); CARVE(w->dSp, BQ / 2 * BK); CARVE(w->dSh, BQ * BK / 2);
    CARVE(w->S, BQ * BK); CARVE(w->dP, BQ * BK); CARVE(w->PZ, BQ * BK);
    CARVE(w->dK, BK * (size_t)D); CARVE(w->dV, BK * (size_t)D); CARVE(w->dQ, BQ * (size_t)D);
    return off;
}

size_t sk_attn_bf16_fwd_ws(int D) { fwd_ws w; return fwd_carve(&w, NULL, D); }
size_t sk_attn_bf16_bwd_ws(int D) { bwd_ws w; return bwd_carve(&w, NULL, D); }

/* ------------------------------------------------------------------ forward */

#define LOG2E 1.44269504088896341f
#define LN2 0.693147180559945309f

void sk_attn_bf16_fwd_item(const sk_attn *a, const sk_attn_plan *P, int b, int h, int qt, float *ws, float *lse_out) {
    const int D = a->D, Lq = a->Lq, Lk = a->Lk, D2 = (D + 1) / 2, DP = pad16(D);
    const int i0 = qt * BQ, nq = imin(BQ, Lq - i0), hk = h / P->group;
    fwd_ws w;
    fwd_carve(&w, ws, D);
    float *S = w.S, *O = w.O, *m = w.m, *l = w.l;     /* m: the shift's k (c = k ln 2) per row */
    const float *qb = a->q + b * a->q_sb + h * a->q_sh;
    const float *kb = a->k + b * a->k_sb + hk * a->k_sh;
    const float *vb = a->v + b * a->v_sb + hk * a->v_sh;
    pack_rows(w.Qh, D2, qb + (long)i0 * a->q_st, a->q_st, nq, D);
    memset(O, 0, sizeof(float) * BQ * D);
    for (int i = 0; i < nq; i++) { m[i] = -INFINITY; l[i] = 0.0f; }
    const int jend = key_end(P, Lk, i0, nq);
    for (int j0 = 0; j0 < jend; j0 += BK) {
        const int nk = imin(BK, jend - j0);
        pack_cols(w.Kt, w.Rt, kb + (long)j0 * a->k_st, a->k_st, nk, D);
        pack_pairs(w.Vp, DP, vb + (long)j0 * a->v_st, a->v_st, nk, D, DP);
        scores(P->bf16, S, w.Qh, w.Kt, nq, D2, P->scale);
        /* per row, as attention_flash.c's forward (mask, max by halving, the sum in 8 lanes), but
         * shifted by the power of two c = k ln 2 at or above the running max */
        float alpha[BQ], sum[BQ];
        unsigned char live[BQ];
        for (int i = 0; i < nq; i++) {
            float *s = S + i * BK;
            mask_row(s, P, b, h, i0 + i, j0, nk);
            float u[BK / 2];
            for (int t = 0; t < BK / 2; t++) u[t] = s[t + BK / 2] > s[t] ? s[t + BK / 2] : s[t];
            for (int v = BK / 4; v >= 8; v /= 2)
                for (int t = 0; t < v; t++) u[t] = u[t + v] > u[t] ? u[t + v] : u[t];
            float mx = -INFINITY;
            for (int t = 0; t < 8; t++) mx = u[t] > mx ? u[t] : mx;
            const float kx = ceilf(mx * LOG2E), knew = kx > m[i] ? kx : m[i];
            if (knew == -INFINITY) {          /* nothing visible yet in this row */
                for (int j = 0; j < BK; j++) s[j] = 0.0f;
                live[i] = 0;
                continue;
            }
            live[i] = 1;
            /* 2^(k_old - k_new), exact; the first visible tile finds O = 0 and l = 0 */
            alpha[i] = m[i] == -INFINITY ? 1.0f : ldexpf(1.0f, (int)fmaxf(m[i] - knew, -300.0f));
            m[i] = knew;
            const float c = knew * LN2;
            float acc[8] = {0};
            for (int j = 0; j < BK; j += 8)
                for (int t = 0; t < 8; t++) {
                    const float e = sk_fexp(s[j + t] - c);
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
        pack_rows(w.Ph, BK / 2, S, BK, nq, BK);
        gemm16(P->bf16, O, D, w.Ph, BK / 2, 1, w.Vp, DP, nq, D, (nk + 1) / 2, 1);
    }
    for (int i = 0; i < nq; i++) {
        float *o = a->out + b * a->o_sb + h * a->o_sh + (long)(i0 + i) * a->o_st;
        float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        for (int t = 0; t < D; t++) o[t] = O[i * D + t] * inv;
        if (lse_out) lse_out[((size_t)b * a->H + h) * Lq + i0 + i] = l[i] > 0.0f ? m[i] * LN2 + logf(l[i]) : INFINITY;
    }
}

/* ----------------------------------------------------------------- backward */

void sk_attn_bf16_dq_item(const sk_attn *a, const sk_attn_plan *P, int b, int h, int qt,
                          const float *dout, const float *Dall, float *dq, float *ws) {
    const int D = a->D, Lq = a->Lq, Lk = a->Lk, D2 = (D + 1) / 2, DP = pad16(D);
    const int i0 = qt * BQ, nq = imin(BQ, Lq - i0), hk = h / P->group;
    bwd_ws w;
    bwd_carve(&w, ws, D);
    const float *qb = a->q + b * a->q_sb + h * a->q_sh;
    const float *kb = a->k + b * a->k_sb + hk * a->k_sh;
    const float *vb = a->v + b * a->v_sb + hk * a->v_sh;
    const float *ob = dout + b * a->o_sb + h * a->o_sh;
    const float *lse = a->lse + ((size_t)b * a->H + h) * Lq + i0;
    const float *Di = Dall + ((size_t)b * a->H + h) * Lq + i0;
    pack_rows(w.Qh, D2, qb + (long)i0 * a->q_st, a->q_st, nq, D);
    pack_rows(w.dOh, D2, ob + (long)i0 * a->o_st, a->o_st, nq, D);
    memset(w.dQ, 0, sizeof(float) * BQ * D);
    const int jend = key_end(P, Lk, i0, nq);
    for (int j0 = 0; j0 < jend; j0 += BK) {
        const int nk = imin(BK, jend - j0);
        pack_cols(w.Kt, w.Rt, kb + (long)j0 * a->k_st, a->k_st, nk, D);
        pack_cols(w.Vt, w.Rt, vb + (long)j0 * a->v_st, a->v_st, nk, D);
        pack_pairs(w.Kp, DP, kb + (long)j0 * a->k_st, a->k_st, nk, D, DP);
        scores(P->bf16, w.S, w.Qh, w.Kt, nq, D2, P->scale);
        gemm16(P->bf16, w.dP, BK, w.dOh, D2, 1, w.Vt, BK, nq, BK, D2, 0);
        bwd_elementwise(P, b, h, i0, nq, j0, nk, w.S, w.dP, lse, Di, NULL);
        pack_rows(w.dSh, BK / 2, w.S, BK, nq, nk);
        gemm16(P->bf16, w.dQ, D, w.dSh, BK / 2, 1, w.Kp, DP, nq, D, (nk + 1) / 2, 1);
    }
    for (int i = 0; i < nq; i++) {
        float *g = dq + b * a->q_sb + h * a->q_sh + (long)(i0 + i) * a->q_st;
        for (int t = 0; t < D; t++) g[t] += P->scale * w.dQ[i * D + t];
    }
}

/* dK, dV of key tile kt of kv head hk; with dQacc also dQacc += dS k over exactly the keys and
 * in the order of sk_attn_bf16_dq_item (the fused path; see attention_flash.c's bwd_dkv_item). */
void sk_attn_bf16_dkv_item(const sk_attn *a, const sk_attn_plan *P, int b, int hk, int kt,
                           const float *dout, const float *Dall, float *dk, float *dv, float *ws, float *dQacc) {
    const int D = a->D, Lq = a->Lq, Lk = a->Lk, D2 = (D + 1) / 2, DP = pad16(D);
    const int j0 = kt * BK, nk = imin(BK, Lk - j0);
    bwd_ws w;
    bwd_carve(&w, ws, D);
    const float *kb = a->k + b * a->k_sb + hk * a->k_sh + (long)j0 * a->k_st;
    pack_cols(w.Kt, w.Rt, kb, a->k_st, nk, D);
    pack_cols(w.Vt, w.Rt, a->v + b * a->v_sb + hk * a->v_sh + (long)j0 * a->v_st, a->v_st, nk, D);
    if (dQacc) pack_pairs(w.Kp, DP, kb, a->k_st, nk, D, DP);
    memset(w.dK, 0, sizeof(float) * BK * D);
    memset(w.dV, 0, sizeof(float) * BK * D);
    int istart = 0;                   /* first query that sees key j0 under the causal rule */
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
            const float *q0 = qb + (long)i0 * a->q_st, *o0 = ob + (long)i0 * a->o_st;
            pack_rows(w.Qh, D2, q0, a->q_st, nq, D);
            pack_rows(w.dOh, D2, o0, a->o_st, nq, D);
            pack_pairs(w.Qp, DP, q0, a->q_st, nq, D, DP);
            pack_pairs(w.dOp, DP, o0, a->o_st, nq, D, DP);
            scores(P->bf16, w.S, w.Qh, w.Kt, nq, D2, P->scale);
            gemm16(P->bf16, w.dP, BK, w.dOh, D2, 1, w.Vt, BK, nq, BK, D2, 0);
            bwd_elementwise(P, b, h, i0, nq, j0, nk, w.S, w.dP, lse + i0, Di + i0, w.PZ);
            pack_pairs(w.PZp, BK, w.PZ, BK, nq, BK, BK);
            pack_pairs(w.dSp, BK, w.S, BK, nq, BK, BK);
            /* dV += (Z P)^T dO, dK += dS^T q: the transposed A is read down the pair rows */
            gemm16(P->bf16, w.dV, D, w.PZp, 1, BK, w.dOp, DP, nk, D, (nq + 1) / 2, 1);
            gemm16(P->bf16, w.dK, D, w.dSp, 1, BK, w.Qp, DP, nk, D, (nq + 1) / 2, 1);
            const int nkq = dQacc ? imin(BK, key_end(P, Lk, i0, nq) - j0) : 0;
            if (nkq > 0) {      /* a query tile from istart on sees a key of this tile */
                pack_rows(w.dSh, BK / 2, w.S, BK, nq, nkq);
                gemm16(P->bf16, dQacc + ((size_t)(h - hk * P->group) * Lq + i0) * D, D, w.dSh, BK / 2, 1,
                       w.Kp, DP, nq, D, (nkq + 1) / 2, 1);
            }
        }
    }
done:
    for (int j = 0; j < nk; j++) {
        if (dk) { float *g = dk + b * a->k_sb + hk * a->k_sh + (long)(j0 + j) * a->k_st;
                  for (int t = 0; t < D; t++) g[t] += P->scale * w.dK[j * D + t]; }
        if (dv) { float *g = dv + b * a->v_sb + hk * a->v_sh + (long)(j0 + j) * a->v_st;
                  for (int t = 0; t < D; t++) g[t] += w.dV[j * D + t]; }
    }
}
