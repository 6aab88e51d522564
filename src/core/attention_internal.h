/* Internals shared by the attention reference (attention.c) and the fused kernels
 * (attention_flash.c): the resolved options of one call and the dropout hash. */
#ifndef SK_ATTENTION_INTERNAL_H
#define SK_ATTENTION_INTERNAL_H
#include "skiplm_attention.h"
#include <math.h>
#include <stdint.h>

typedef struct {
    float scale;                    /* resolved: a->scale or 1/sqrt(D) */
    int group;                      /* H / Hkv query heads per key/value head */
    int causal, off;                /* key j allowed for query i iff j <= i + off */
    const uint8_t *mask;            /* broadcast strides (0 on size-1 dims) */
    long m_sb, m_sh, m_si, m_sj;
    int dropout;                    /* dropout active (training && p > 0) */
    uint64_t thr;                   /* keep iff 32-bit hash >= thr, thr = p * 2^32 */
    float inv_keep;                 /* 1 / (1 - p) */
    uint64_t seed;
    int bf16;                       /* a->bf16: SK_ATTN_FP32, or which bf16 dot products run */
} sk_attn_plan;

enum { SK_ATTN_FP32 = 0, SK_ATTN_BF16_FMA = 1, SK_ATTN_BF16_DP = 2 };

static inline void sk_attn_plan_init(sk_attn_plan *P, const sk_attn *a) {
    P->scale = a->scale != 0.0f ? a->scale : 1.0f / sqrtf((float)a->D);
    P->group = a->H / a->Hkv;
    P->causal = a->is_causal;
    P->off = a->causal_offset;
    P->mask = a->mask;
    P->m_sb = P->m_sh = P->m_si = P->m_sj = 0;
    if (a->mask) {
        const int *s = a->mask_shape;
        P->m_sj = s[3] > 1 ? 1 : 0;
        P->m_si = s[2] > 1 ? (long)s[3] : 0;
        P->m_sh = s[1] > 1 ? (long)s[2] * s[3] : 0;
        P->m_sb = s[0] > 1 ? (long)s[1] * s[2] * s[3] : 0;
    }
    P->dropout = a->training && a->dropout_p > 0.0f;
    P->thr = (uint64_t)((double)a->dropout_p * 4294967296.0);
    P->inv_keep = P->dropout ? 1.0f / (1.0f - a->dropout_p) : 1.0f;
    P->seed = a->seed;
    P->bf16 = a->bf16 ? (sk_attn_bf16_native() ? SK_ATTN_BF16_DP : SK_ATTN_BF16_FMA) : SK_ATTN_FP32;
}

/* Plain reference (materialises the Lq x Lk scores); the same contract as sk_attn_forward /
 * sk_attn_backward (in fp32: it ignores bf16), for tests. */
int sk_attn_forward_ref(const sk_attn *a);
int sk_attn_backward_ref(const sk_attn *a, const float *dout, float *dq, float *dk, float *dv);

/* Backward strategy of the fused kernel: 0 chooses, 1 forces the two-pass path, 2 the fused
 * one (for tests: both must give bit-identical gradients). */
extern int sk_attn_bwd_path;

/* May query i attend key j (causal rule and/or boolean mask)? */
static inline int sk_attn_allowed(const sk_attn_plan *P, int b, int h, int i, int j) {
    if (P->causal) return (long)j <= (long)i + P->off;
    if (P->mask) return P->mask[b * P->m_sb + h * P->m_sh + i * P->m_si + j * P->m_sj] != 0;
    return 1;
}

/* splitmix64 finaliser: a bijective 64-bit mix with good avalanche. */
static inline uint64_t sk_mix64(uint64_t x) {
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27; x *= 0x94d049bb133111ebULL;
    x ^= x >> 31; return x;
}
/* Dropout keep decision, a pure function of (seed, b, h, i, j):
 *   row = mix(mix(seed) + (b << 48 ^ h << 32 ^ i)),  u = mix(row + j * golden) >> 32,
 *   keep iff u >= p * 2^32.  The forward and backward passes regenerate it identically. */
static inline uint64_t sk_attn_rowkey(const sk_attn_plan *P, int b, int h, int i) {
    return sk_mix64(sk_mix64(P->seed) + (((uint64_t)b << 48) ^ ((uint64_t)h << 32) ^ (uint64_t)(uint32_t)i));
}
static inline int sk_attn_keep(const sk_attn_plan *P, uint64_t rowkey, int j) {
    return (sk_mix64(rowkey + (uint64_t)j * 0x9e3779b97f4a7c15ULL) >> 32) >= P->thr;
}
#endif
