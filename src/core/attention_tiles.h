/* The tiles of the fused attention kernel (attention_flash.c: fp32; attention_bf16.c: bf16 dot
 * products): their sizes, the masking of a score row, the causal key range, the workspace and
 * the elementwise middle of the backward pass, shared so that both precisions mask, drop out and
 * differentiate alike. */
#ifndef SK_ATTENTION_TILES_H
#define SK_ATTENTION_TILES_H
#include "skiplm_attention.h"
#include "core/attention_internal.h"
#include "core/vmath.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#ifdef __AVX__
#include <immintrin.h>
#endif

#define BQ 64          /* query rows per tile */
#define BK 64          /* keys per tile */

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

#ifdef __AVX__
/* dst[c * ldd + r] = src[r * lds + c] for r, c < 8: an 8 x 8 transpose in registers. */
static inline void transpose8(float *restrict dst, long ldd, const float *restrict src, long lds) {
    __m256 r[8], t[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * lds);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);       /* a0 b0 a1 b1 | a4 b4 a5 b5 */
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);   /* a2 b2 a3 b3 | a6 b6 a7 b7 */
    }
    for (int i = 0; i < 8; i += 4)
        for (int h = 0; h < 2; h++) {
            r[i + 2 * h] = _mm256_shuffle_ps(t[i + h], t[i + 2 + h], 0x44);
            r[i + 2 * h + 1] = _mm256_shuffle_ps(t[i + h], t[i + 2 + h], 0xEE);
        }
    /* r[c], c < 4: column c of rows 0-3 in the low half, column c + 4 in the high; r[c + 4]: rows 4-7 */
    for (int c = 0; c < 4; c++) {
        _mm256_storeu_ps(dst + c * ldd, _mm256_permute2f128_ps(r[c], r[c + 4], 0x20));
        _mm256_storeu_ps(dst + (c + 4) * ldd, _mm256_permute2f128_ps(r[c], r[c + 4], 0x31));
    }
}
#endif

/* Mask one score row s[0..BK) of global query i against keys j0.. (nk valid): -inf where
 * not allowed. Returns the number of allowed keys in the tile (0 => row all masked). */
static inline void mask_row(float *restrict s, const sk_attn_plan *P, int b, int h, int i, int j0, int nk) {
    int lim = nk;
    if (P->causal) {
        long l = (long)i + P->off - j0 + 1;
        lim = l < 0 ? 0 : (l < nk ? (int)l : nk);
    }
    for (int j = lim; j < BK; j++) s[j] = -INFINITY;
    if (P->mask) {
        const uint8_t *m = P->mask + b * P->m_sb + h * P->m_sh + i * P->m_si + j0 * P->m_sj;
        for (int j = 0; j < nk; j++) if (!m[j * P->m_sj]) s[j] = -INFINITY;
    }
}

/* Key range [0, jend) that query rows [i0, i0+nq) can see under the causal rule. */
static inline int key_end(const sk_attn_plan *P, int Lk, int i0, int nq) {
    if (!P->causal) return Lk;
    long e = (long)i0 + nq - 1 + P->off + 1;
    return e < 0 ? 0 : (e < Lk ? (int)e : Lk);
}

static inline float *alloc_ws(size_t n) {
    return aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
}
/* Elementwise middle of the backward for one (query tile, key tile): from scores S and
 * dP = dO V^T compute P = exp(S - lse) (0 where masked), and dS = P * (Z dP - D_i), where
 * Z is the dropout factor. Writes dS into S and, if PZ is given, Z*P into PZ (both BQ x BK,
 * row-major). */
static inline void bwd_elementwise(const sk_attn_plan *P, int b, int h, int i0, int nq, int j0, int nk,
                                   float *restrict S, const float *restrict dP, const float *restrict lse,
                                   const float *restrict Di, float *restrict PZ) {
    for (int i = 0; i < nq; i++) {
        float *s = S + i * BK;
        const float *dp = dP + i * BK;
        mask_row(s, P, b, h, i0 + i, j0, nk);
        const float L = lse[i], di = Di[i];
        float z[BK];
        if (P->dropout) {
            uint64_t rk = sk_attn_rowkey(P, b, h, i0 + i);
            for (int j = 0; j < BK; j++) z[j] = (j < nk && sk_attn_keep(P, rk, j0 + j)) ? P->inv_keep : 0.0f;
        } else {
            for (int j = 0; j < BK; j++) z[j] = 1.0f;
        }
        float *pz = PZ ? PZ + i * BK : NULL;
        for (int j = 0; j < BK; j++) {
            float p = sk_fexp(s[j] - L);          /* s = -inf or L = +inf => 0 */
            if (pz) pz[j] = p * z[j];
            s[j] = p * (z[j] * dp[j] - di);
        }
    }
}

/* The bf16 tiles (attention_bf16.c), for a descriptor with bf16 set; plan->bf16 says which
 * dot products run (SK_ATTN_BF16_*). Workspace sizes are in floats (4-byte units). */
size_t sk_attn_bf16_fwd_ws(int D);
size_t sk_attn_bf16_bwd_ws(int D);
void sk_attn_bf16_fwd_item(const sk_attn *a, const sk_attn_plan *P, int b, int h, int qt, float *ws, float *lse_out);
void sk_attn_bf16_dq_item(const sk_attn *a, const sk_attn_plan *P, int b, int h, int qt,
                          const float *dout, const float *Dall, float *dq, float *ws);
void sk_attn_bf16_dkv_item(const sk_attn *a, const sk_attn_plan *P, int b, int hk, int kt,
                           const float *dout, const float *Dall, float *dk, float *dv, float *ws, float *dQacc);
/* W = exp(scale * bf16(q).bf16(k) - lse) for weights_pass: one score */
float sk_attn_bf16_score(const float *q, const float *k, int D, float scale);
#endif
