/* skiplm attention: scaled dot-product attention with PyTorch's contract (forward and
 * backward, masks, causal offsets, dropout, grouped-query heads) and a multi-head attention
 * module with self- and cross-attention. The model calls it once per run of heads that read
 * the same layer's K/V (Skip-Layer Attention). Included by skiplm.h; docs/attention.md. */
#ifndef SKIPLM_ATTENTION_H
#define SKIPLM_ATTENTION_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* --------------------------------------------------------------- attention
 *
 * Scaled dot-product attention with PyTorch's contract
 * (torch.nn.functional.scaled_dot_product_attention):
 *     out = softmax(q k^T * scale + mask) v
 * over strided (B, H, L, D) views: element (b, h, t, d) of q is
 *     q[b*q_sb + h*q_sh + t*q_st + d]
 * so (B, L, D) is H = 1, and the heads of a fused (B, T, 3C) qkv buffer are views with
 * no copy. Grouped-query attention: query head h reads key/value head h / (H / Hkv).
 *
 * The default path is tiled with an online softmax (FlashAttention-style): it never
 * holds an Lq x Lk matrix, and saves only the log-sum-exp per query row (B, H, Lq)
 * for the backward pass. When weights are requested they are written as well.
 *
 * Masking: a boolean mask (1 = may attend, PyTorch's meaning) of rank 2 (Lq, Lk),
 * rank 3 (B|1, Lq, Lk) or rank 4 (B|1, H|1, Lq, Lk) that broadcasts; mask_shape holds the
 * full rank-4 broadcast shape (use 1 for broadcast dims, Lq = 1 for a (B, 1, Lk) padding
 * mask; sk_attn_set_mask fills it). Rank 3 is PyTorch's meaning for (B, L, D) inputs; for
 * a rank-3 mask that PyTorch would align with H, pass it as rank 4 (1, H, Lq, Lk).
 * is_causal: query i may attend key j iff j <= i + causal_offset (offset 0 is PyTorch's
 * top-left tril; a KV-cache decode step of queries at positions p.. uses offset p).
 * A query row whose keys are all masked has output 0, weights 0, lse = +INFINITY and zero
 * gradients (PyTorch's math path gives NaN there; see docs/attention.md).
 *
 * Dropout (training only, p in [0, 1)): each weight is kept with probability 1-p and
 * scaled by 1/(1-p). The keep decision is a hash of (seed, b, h, i, j), so the backward
 * pass regenerates it and a run is reproducible for a given seed. Returned weights are
 * the ones applied to v, i.e. after dropout (as PyTorch 1.13 returns them).
 *
 * Results are bit-identical for any OpenMP thread count. out must not alias q, k, v.
 */
typedef struct {
    int B, H, Hkv, Lq, Lk, D;       /* Hkv = H for plain multi-head attention */
    const float *q; long q_sb, q_sh, q_st;
    const float *k; long k_sb, k_sh, k_st;
    const float *v; long v_sb, v_sh, v_st;
    float *out; long o_sb, o_sh, o_st;
    float scale;                    /* 0 => 1/sqrt(D) */
    int is_causal;
    int causal_offset;
    const uint8_t *mask;            /* NULL or contiguous bool tensor of mask_shape */
    int mask_shape[4];              /* (B|1, H|1, Lq, Lk) */
    float dropout_p;                /* applied only when training != 0 */
    int training;
    uint64_t seed;
    float *lse;                     /* (B, H, Lq) contiguous: saved by forward, read by backward; may be NULL in forward */
    float *weights;                 /* NULL, or (B, H, Lq, Lk) / (B, Lq, Lk) per weights_avg */
    int weights_avg;                /* 1 => average the weights over heads */
    int bf16;                       /* 1 => bf16 dot products (bf16 mixed precision): every
                                     * product's operands (q, k, v, the weights P, dout and the
                                     * score gradient) rounded to bf16, products summed in fp32;
                                     * softmax statistics, lse and D_i in fp32. See
                                     * sk_attn_bf16_native and docs/attention.md. */
    /* Forward only: K and V in bf16 (a bf16 KV cache) instead of k and v (which are then NULL),
     * with k's and v's strides in elements; each value is widened exactly to fp32 as it is read,
     * so out equals the fp32 forward on the widened K and V, bit for bit. No weights, no
     * training; the backward refuses them. */
    const uint16_t *k16, *v16;
} sk_attn;

/* Fill a descriptor for contiguous (B, H, L, D) tensors (H = Hkv, no mask, no dropout). */
void sk_attn_init_bhld(sk_attn *a, int B, int H, int Lq, int Lk, int D,
                       const float *q, const float *k, const float *v, float *out);
/* Attach a contiguous boolean mask of rank 2, 3 or 4 with PyTorch's broadcasting. */
int sk_attn_set_mask(sk_attn *a, const uint8_t *mask, int rank, const int *shape);
/* Check shapes/strides/mask/dropout; returns SK_EINVAL with a message naming the problem.
 * Passing both a mask and is_causal gives PyTorch's message
 * "Explicit attn_mask should not be set when is_causal=True". */
int sk_attn_check(const sk_attn *a);
int sk_attn_forward(const sk_attn *a);
/* Gradients, accumulated (+=) into dq, dk, dv which share the strides of q, k, v (any
 * of them may be NULL to skip it; they may be views of one fused buffer).
 * Needs a->out and a->lse from the forward pass. dout has the strides of out. */
int sk_attn_backward(const sk_attn *a, const float *dout, float *dq, float *dk, float *dv);
/* With bf16 set, do the dot products run on avx512_bf16 (vdpbf16ps)? 1 where the CPU has it
 * and the environment does not set SKIPLM_NO_AVX512BF16 (to anything but 0); 0: the same
 * products, each rounded to fp32 in the same order, by fp32 fused multiply-adds on the
 * widened operands (any CPU). */
int sk_attn_bf16_native(void);

/* Multi-head attention module, nn.MultiheadAttention-like, batch_first:
 * q_in (B, Lq, E), kv_in (B, Lk, E) (self-attention: kv_in == q_in),
 * in_proj: Wq (H*D, E), Wk (Hkv*D, E), Wv (Hkv*D, E), out_proj Wo (E, H*D); biases optional.
 * Cross-attention is kv_in != q_in. GQA/MQA via n_kv_head dividing n_head. */
typedef struct {
    int embed_dim, n_head, n_kv_head, head_dim;
    const float *wq, *wk, *wv, *wo;     /* required */
    const float *bq, *bk, *bv, *bo;     /* NULL = no bias */
} sk_mha;
typedef struct {
    float *q, *k, *v, *att, *lse;       /* saved activations, sizes from sk_mha_cache_floats */
} sk_mha_cache;
typedef struct {
    float *wq, *wk, *wv, *wo, *bq, *bk, *bv, *bo;   /* accumulated (+=); bias grads may be NULL */
} sk_mha_grads;
size_t sk_mha_cache_floats(const sk_mha *m, int B, int Lq, int Lk);
/* attn carries mask / causal / dropout / weights options; its shape and tensor fields are
 * filled by the call. cache must hold sk_mha_cache_floats() floats (q, k, v, att, lse).
 * Backward accumulates (+=) into dq_in, dkv_in (either may be NULL; for self-attention
 * they may be the same buffer) and the grads in g. */
int sk_mha_forward(const sk_mha *m, sk_attn *attn, int B, int Lq, int Lk,
                   const float *q_in, const float *kv_in, float *out, float *cache);
int sk_mha_backward(const sk_mha *m, const sk_attn *attn, int B, int Lq, int Lk,
                    const float *q_in, const float *kv_in, const float *cache,
                    const float *dout, float *dq_in, float *dkv_in, sk_mha_grads *g);

#ifdef __cplusplus
}
#endif
#endif
