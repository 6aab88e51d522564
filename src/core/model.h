/* Internal layout of sk_model: one parameter buffer with named views, one gradient
 * buffer with the same views, and activations planned up front for (B, T). */
#ifndef SK_MODEL_INTERNAL_H
#define SK_MODEL_INTERNAL_H
#include "skiplm_model.h"
#include "skiplm_attention.h"
#include "core/route.h"

/* Stacked per-layer tensors: (L, ...) so one pointer + layer offset reaches any layer.
 * GPT-2:  fc = c_fc (F, C),               fcproj = c_proj (C, F)
 * Llama:  fc = [w1; w3] stacked (2F, C),  fcproj = w2 (C, F); no biases, no ln*b, no wpe. */
typedef struct {
    float *wte;                  /* (Vp, C) */
    float *wpe;                  /* (block_size, C) or NULL */
    float *ln1w, *ln1b;          /* (L, C) */
    float *qkvw, *qkvb;          /* (L, QKV, C), (L, QKV); QKV = (H + 2*Hkv) * hs */
    float *attprojw, *attprojb;  /* (L, C, C), (L, C) */
    float *ln2w, *ln2b;          /* (L, C) */
    float *fcw, *fcb;            /* (L, F or 2F, C), (L, F) */
    float *fcprojw, *fcprojb;    /* (L, C, F), (L, C) */
    float *lnfw, *lnfb;          /* (C) */
    float *lmhead;               /* (Vp, C): its own matrix (untied_head), else the same as wte */
} sk_params;

/* With recompute on, the per-layer activations marked (L, ...) below exist once (a
 * workspace that the backward pass refills layer by layer by re-running its forward), and
 * qkv is kept only for lending layers (+1 workspace slot): memory per token no longer
 * grows with 16C per layer but with C (the layer outputs res3) per layer. */
typedef struct {
    float *encoded;                       /* (B, T, C) */
    float *ln1, *ln1_mean, *ln1_rstd;     /* (L, B, T, C), (L, B, T) x2 */
    float *qkv;                           /* (L, B, T, QKV) */
    float *atty;                          /* (L, B, T, C) attention output before c_proj */
    float *lse;                           /* (L, B, H, T) */
    float *res2;                          /* (L, B, T, C) residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *fch;                           /* (L, B, T, F or 2F) before the activation */
    float *fch_act;                       /* (L, B, T, F) */
    float *res3;                          /* (L, B, T, C) residual after MLP = block output */
    float *lnf, *lnf_mean, *lnf_rstd;     /* (B, T, C), (B, T) x2 */
    float *logits;                        /* (chunk, Vp) classifier scratch */
    float *losses;                        /* (B, T) */
    /* backward */
    float *dres, *dbtc, *dbtc2;           /* (B, T, C) */
    float *dfch, *dfch_act;               /* (B, T, F or 2F), (B, T, F) */
    float *dqkv_lend;                     /* (n_lenders, B, T, QKV): layers whose K/V are borrowed */
    float *dqkv_own;                      /* (B, T, QKV) scratch for the others */
    /* bf16 mixed precision (sk_model_set_bf16): the activations that only GEMMs read are kept
     * in bf16 and their fp32 buffers above (ln1, ln2, fch, fch_act, lnf, dfch) are not made */
    uint16_t *ln1_16, *ln2_16;            /* (L, B, T, C) the norms' outputs */
    uint16_t *fch16;                      /* (L, B, T, F or 2F) the MLP's pre-activation */
    uint16_t *act16;                      /* (L, B, T, F) the MLP's activation */
    uint16_t *lnf16;                      /* (B, T, C) */
    uint16_t *x16;                        /* (B, T, C) the attention output, rounded for c_proj */
    uint16_t *dy16;                       /* (B, T, max(QKV, C)) a backward dY rounded for its GEMMs */
    uint16_t *dfch16;                     /* (B, T, F or 2F) the pre-activation's gradient */
    uint16_t *dlogits16;                  /* (chunk, Vp) the logits' gradient */
} sk_acts;

/* Low-rank adapters computed as branches of their own (LoRA training on a frozen base,
 * src/train/lora.c): adapter i acts on rows [row0, row0 + out) of a layer's matrix at one of
 * the four sites, y[:, rows] += scale * drop(x) A^T B^T, x the matrix's input (N, in). In
 * training passes drop is dropout of p = dropout on x, its mask the counter-based hash of
 * (the pass's dropout seed, stream, element) as sk_dropout draws it: each adapter its own
 * mask (PEFT's lora_dropout, one nn.Dropout per adapted module); evaluation passes use x.
 * The backward pass accumulates dA (r, in) and dB (out, r) and adds the branch's part of the
 * input's gradient. u (N, r) holds drop(x) A^T between the passes; the workspaces are the
 * caller's, for up to max_tokens = B * T tokens. */
enum { SK_SITE_QKV = 0, SK_SITE_ATTPROJ = 1, SK_SITE_FC = 2, SK_SITE_FCPROJ = 3 };
typedef struct {
    int layer, site, row0, out, in;
    const float *A, *B;                   /* (r, in), (out, r) */
    float *dA, *dB;                       /* accumulated by the backward pass */
    float *u;                             /* (max_tokens, r) */
    uint64_t stream;                      /* the dropout mask's stream */
} sk_adapter;
typedef struct {
    int n, rank;
    float scale, dropout;
    sk_adapter *a;
    float *scratch;                       /* (max_tokens, the largest in) */
    float *scratch_r;                     /* (max_tokens, rank) */
    size_t max_tokens;
} sk_adapters;

struct sk_model {
    sk_config cfg;
    int L, C, H, Hkv, hs, QKV, F, Vp;
    float *params; size_t n_params;
    float *grads;
    sk_params p, g;
    sk_tensor *tensors; int n_tensors;
    /* activations */
    int B, T, acts_have_grads, chunk;
    int losses_valid;                     /* a.losses holds the last forward pass's (sk_model_losses) */
    int hidden_valid;                     /* a.lnf holds the last forward pass's final norm (sk_model_hidden) */
    float *acts_mem; size_t acts_floats;
    sk_acts a;
    sk_route_plan *plan;                  /* the Skip-Layer routing, built with the model (core/route.h):
                                             each layer's attention calls (runs), the q/k/v columns
                                             some layer reads, the layers that lend (their qkv is
                                             kept, a slot of dqkv_lend each) */
    float *rope;                          /* (block_size, hs/2, 2) cos/sin for Llama, or NULL */
    float *sinus;                         /* (block_size, C) fixed positions, or NULL */
    int gated;                            /* SwiGLU: fc holds [w1; w3] (2F rows) */
    sk_phase_times times;
    int recompute;                        /* -1 auto (on only if needed to fit), 0 off, 1 on */
    int recompute_on;                     /* the mode of the current activation plan */
    struct sk_q8 *q8;                     /* 8-bit matrices (core/quant.h), or NULL; with them the
                                             fp32 matrices hold their dequantized values */
    int bf16;                             /* bf16 mixed precision (sk_model_set_bf16) */
    uint16_t *params16;                   /* with it, params rounded to bf16 (the same layout): the
                                             GEMMs' weight operands */
    int params16_stale;                   /* params may have changed since params16 was rounded
                                             (set by sk_model_params); the next pass rounds anew */
    int frozen;                           /* no weight gradients: no gradient buffer, the backward
                                             pass computes only the activations' gradients (and
                                             the adapters') */
    const sk_adapters *ad;                /* LoRA branches, or NULL */
};

/* One layer's activation views (see sk_acts). */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *lse, *res2, *ln2, *ln2_mean, *ln2_rstd,
          *fch, *fch_act, *res3;
    uint16_t *ln1_16, *ln2_16, *fch16, *act16;    /* bf16 mixed precision */
} sk_layer_acts;

/* act (N, F) = the MLP activation of h (N, F or 2F), for the model's kind. */
void sk_mlp_act_forward(const sk_model *m, float *act, const float *h, int N);
/* Layers whose K/V some other layer reads (the plan's lend_index >= 0): the slots of dqkv_lend. */
int sk_model_n_lenders(const sk_model *m);
/* Freeze the weights (on = 1: the gradient buffer is freed and never made; the backward pass
 * computes no weight gradient) or not. */
void sk_model_set_frozen(sk_model *m, int on);
/* Attach adapters (NULL detaches); refused in bf16 mode. ad must outlive its use. */
int sk_model_set_adapters(sk_model *m, const sk_adapters *ad);
/* The float offset of layer l's matrix at site (SK_SITE_*) in the parameter buffer. */
size_t sk_model_site_offset(const sk_model *m, int l, int site);

/* Dropout streams: one per (layer, site); the embedding uses layer = L. Both devices draw the
 * same masks from them. */
enum { SK_DROP_ATTN_W = 0, SK_DROP_ATTN_OUT = 1, SK_DROP_MLP_OUT = 2 };
static inline uint64_t sk_drop_stream(int layer, int site) { return (uint64_t)layer * 4 + site + 1; }

/* One attention call of a training pass over (B, T) tokens: run `part` of layer l's plan.
 * Both devices make their descriptors (sk_attn, the CUDA backend's cu_attn) from it, adding
 * their base pointers: q (and dQ) into layer l's qkv (B, T, QKV), k and v into the source
 * layer's qkv (the lender's own K/V: a strided view, no copy), out into l's attention output
 * (B, T, C), lse into l's (B, H, T). Offsets and strides are in floats. */
typedef struct {
    int h0, nh, nkv, src;        /* query heads [h0, h0+nh), their nkv KV heads, from layer src */
    size_t q, k, v, out, lse;    /* offsets */
    long qkv_sb, qkv_st;         /* q, k, v: batch and token strides (head stride hs) */
    long out_sb, out_st;         /* out: batch and token strides (head stride hs) */
    uint64_t seed;               /* the call's dropout seed on the attention weights */
} sk_attn_call;
void sk_model_attn_call(const sk_model *m, int l, int part, int B, int T, uint64_t seed, sk_attn_call *c);
/* Views of the parameter/gradient buffers (set by the model, used by checkpoints). */
void sk_params_views(const sk_model *m, float *base, sk_params *p);
#endif
