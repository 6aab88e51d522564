/* skiplm model: the configuration (GPT-2 and Llama families, Skip-Layer routing), the
 * decoder-only transformer (one parameter buffer with named views; forward, backward),
 * cached decoding with a KV cache that stores only the K/V some layer reads, and sampling.
 * Included by skiplm.h; docs/architecture.md. */
#ifndef SKIPLM_MODEL_H
#define SKIPLM_MODEL_H
#include <stddef.h>
#include <stdint.h>
#include "skiplm_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ config */

typedef enum { SK_GPT2 = 0, SK_LLAMA = 1 } sk_family;
typedef enum { SK_GELU_ERF = 0, SK_GELU_TANH = 1 } sk_gelu;
/* RoPE frequency scaling, Hugging Face's rope_scaling.rope_type: none, "linear", "llama3" */
typedef enum { SK_ROPE_NONE = 0, SK_ROPE_LINEAR = 1, SK_ROPE_LLAMA3 = 2 } sk_rope_scaling;

typedef struct {
    sk_family family;
    int n_layer, n_head, n_kv_head, n_embd;
    int block_size;          /* maximum sequence length */
    int vocab_size;          /* real vocabulary */
    int padded_vocab_size;   /* rows of wte in memory (multiple of 64 >= vocab_size); 0 = derive */
    int bias;                /* GPT-2: biases in Linear and LayerNorm */
    float dropout;           /* on embeddings, attention weights, attention and MLP outputs */
    sk_gelu gelu;            /* GPT-2 activation */
    int n_skip_layer;        /* SLA: layer l's last n_skip_head heads read layer l-n_skip_layer's K/V */
    int n_skip_head;
    float norm_eps;          /* LayerNorm / RMSNorm epsilon */
    int sinusoidal;          /* 1: fixed sinusoidal positions added to the embeddings, replacing
                                learned positions (gpt2) or RoPE (llama) */
    int relu;                /* 1: two-layer ReLU MLP, replacing GELU (gpt2) or SwiGLU (llama) */
    int untied_head;         /* 1: lm_head is its own (vocab, n_embd) matrix; 0: tied to the embedding */
    char routing[200];       /* general K/V routing table (overrides n_skip_*); "" = paper SLA
                                or none. Grammar: src/core/config.c, docs/models.md */
    /* Llama family */
    float rope_theta;
    int ffn_hidden;          /* SwiGLU hidden size; 0 = derive */
    int qkv_bias;            /* 1: biases on the q, k, v projections (Qwen2) */
    sk_rope_scaling rope_scaling;   /* frequencies theta^(-2j/d) rescaled (sk_rope_freqs) */
    float rope_factor;              /* linear, llama3: 1 = unchanged */
    float rope_low_freq_factor, rope_high_freq_factor;   /* llama3 (default 1, 4) */
    int rope_original_ctx;          /* llama3: original_max_position_embeddings (default 8192) */
} sk_config;

/* Fill cfg from a preset name: "gpt2" (124M), "gpt2-medium" (350M), "gpt2-large" (774M),
 * "nano" (4L/4H/128), "small" (6L/6H/384). vocab_size is set to GPT-2's 50257 for the
 * gpt2* presets and left at 0 (to be given) for the small ones. */
int sk_config_preset(sk_config *cfg, const char *name);
/* Default values for every field (GPT-2 family, no SLA). */
void sk_config_default(sk_config *cfg);
/* Turn SLA on with the paper's 3/4 rule: n_skip_layer = 3L/4, n_skip_head = 3h/4. */
void sk_config_sla_default(sk_config *cfg);
/* Validate (and derive padded_vocab_size, n_kv_head, ffn_hidden). Errors name the field
 * and the allowed range. */
int sk_config_check(sk_config *cfg);
/* Set a field by name from a string ("n_layer", "gelu" = erf|tanh, "bias" = 0|1, ...). */
int sk_config_set(sk_config *cfg, const char *key, const char *value);
/* One-line human description. */
void sk_config_describe(const sk_config *cfg, char *buf, size_t n);

/* Skip-Layer routing: who reads whose K/V, decided in one place (src/core/route.c) from the
 * paper's rule (n_skip_layer/n_skip_head) or the general table `routing`, and built once into
 * a plan that the model keeps (sk_route_plan_of) and every device reads. */
typedef struct { int h0, nh, src; } sk_route;   /* query heads [h0, h0+nh) read layer src */
typedef struct sk_route_plan sk_route_plan;
/* The plan of a config, checked as sk_config_check does (a bad routing table is SK_EINVAL
 * naming the rule's offset in the table). Free it with sk_route_plan_free. */
int sk_route_plan_new(sk_route_plan **plan, const sk_config *cfg);
void sk_route_plan_free(sk_route_plan *plan);
/* Layer l's runs of consecutive query heads with one source layer, in head order (one
 * attention call each): *runs points into the plan; returns how many (0 for no such layer). */
int sk_route_plan_runs(const sk_route_plan *plan, int layer, const sk_route **runs);
/* The layer whose own K/V query head h of layer l reads (-1 for no such head). */
int sk_route_plan_source(const sk_route_plan *plan, int layer, int head);
/* 1 if some layer (l itself or one above) reads KV head j of layer l: the KV cache stores
 * only those, and the q/k/v projection computes only their K and V. */
int sk_route_plan_kv_stored(const sk_route_plan *plan, int layer, int kv_head);
/* 1 if a layer above reads layer l's K/V. */
int sk_route_plan_lends(const sk_route_plan *plan, int layer);
/* Bytes of K and V per token (fp32) that a KV cache keeps for layer l. */
size_t sk_route_plan_kv_bytes(const sk_route_plan *plan, int layer);
/* Layer l's plan in words, as `skiplm info` prints it, e.g. for layer 9 of GPT-2 with SLA
 * 9/6: "heads 0-5 -> layer 9, heads 6-11 -> layer 0; stores K/V heads 0-5 (3072 bytes per
 * token)", with "; lends K/V" after it when a layer above reads it. Truncated to n bytes;
 * 64 + 48 * (n_head + n_kv_head) always suffice. */
void sk_route_plan_describe(const sk_route_plan *plan, int layer, char *buf, size_t n);

/* ------------------------------------------------------------------- model */

typedef struct sk_model sk_model;

/* A named parameter tensor inside the one parameter buffer. */
typedef struct {
    char name[80];           /* nanoGPT / HF name, e.g. "transformer.h.0.attn.c_attn.weight" */
    size_t offset, numel;    /* in floats, within sk_model_params() */
    int ndim;
    int64_t shape[2];        /* shape as stored in files (wte: vocab_size rows, not padded) */
    int decay;               /* AdamW weight decay applies (matrices and embeddings) */
} sk_tensor;

/* New model with parameters initialised as nanoGPT does (N(0, 0.02), residual
 * projections N(0, 0.02/sqrt(2L)), norms 1/0, biases 0) from seed. */
int sk_model_new(sk_model **m, const sk_config *cfg, uint64_t seed);
/* The same with every weight 0, skipping the random initialisation (seconds for GPT-2
 * 124M): for weights about to be loaded or copied in. */
int sk_model_new_empty(sk_model **m, const sk_config *cfg);
void sk_model_free(sk_model *m);
const sk_config *sk_model_config(const sk_model *m);
/* The model's routing plan (owned by the model). */
const sk_route_plan *sk_route_plan_of(const sk_model *m);
/* The fp32 parameters, to read or write. In bf16 mode (sk_model_set_bf16) each call marks the
 * weights' bf16 copy stale (the next pass rounds it anew): write through a pointer obtained after
 * the last pass, not one kept from before it. */
float *sk_model_params(sk_model *m);
float *sk_model_grads(sk_model *m);       /* NULL until the first forward_backward */
size_t sk_model_num_params(const sk_model *m);   /* floats in the buffer (padded vocab included) */
const sk_tensor *sk_model_tensors(const sk_model *m, int *n);
const sk_tensor *sk_model_tensor(const sk_model *m, const char *name);

/* Reserve activations for batches up to (B, T); done lazily by the calls below.
 * with_grads also reserves the gradient buffers. Returns SK_ENOMEM with the byte count
 * if the request exceeds the memory limit (sk_memory_limit); with_grads counts the whole
 * training footprint: parameters, gradients, AdamW m and v, activations. */
int sk_model_reserve(sk_model *m, int B, int T, int with_grads);
/* Activation recomputation (checkpointing per layer): 1 keeps only each layer's output (and
 * the qkv of layers whose K/V are borrowed) and re-runs each layer's forward inside the
 * backward pass: about a third more compute, activation memory per token ~ (L + 30) * C
 * floats instead of ~ 17 * L * C. 0 never; -1 (default) only when training would not fit
 * the memory limit otherwise. Results are bit-identical either way. */
void sk_model_set_recompute(sk_model *m, int mode);
/* Bytes of activations per token for training (forward saved + backward scratch). */
size_t sk_model_activation_bytes(const sk_model *m, int B, int T, int with_grads);

/* bf16 mixed precision on the CPU (docs/training.md), the CUDA backend's --bf16 recipe: with
 * on = 1 every matrix product of the forward and backward passes (the q/k/v, output and MLP
 * projections and the classifier: activations, input gradients, weight gradients) multiplies
 * bf16 operands, rounded to nearest even, with fp32 accumulation, through oneDNN. The weights'
 * operands come from a bf16 copy of the parameters, rounded again before the first pass after a
 * change (sk_model_params hands out the fp32 buffer, so a caller may have written it); the
 * parameters and gradients stay fp32 (gradients accumulate in fp32 over micro-steps). Norms, the
 * attention, softmax, the loss and the embeddings run in fp32; the activations that only GEMMs
 * read (the norms' outputs, the MLP's pre-activation and activation, and their gradients) are
 * kept in bf16. Needs a build with oneDNN: SK_EINVAL saying what to install otherwise, or for an
 * 8-bit model. on = 0 returns to fp32. */
int sk_model_set_bf16(sk_model *m, int on);
int sk_model_bf16(const sk_model *m);
/* For an optimizer that rounds the weights it updates into the bf16 copy in the same pass
 * (sk_adamw_step_bf16, the trainer's): the copy, brought up to date first if stale, or NULL outside
 * bf16 mode. Having updated every parameter it updates (through a pointer from sk_model_params
 * got after this call) and written their copies, the caller calls sk_model_params_bf16_synced:
 * the next pass then uses the copy as it is instead of rounding the whole buffer again. */
uint16_t *sk_model_params_bf16(sk_model *m);
void sk_model_params_bf16_synced(sk_model *m);
/* 1 if this build has oneDNN (bf16 GEMMs for sk_model_set_bf16). */
int sk_bf16_available(void);
/* 1 if oneDNN runs bf16 natively on this CPU (avx512_bf16 or AMX); 0: through a slower fallback
 * (oneDNN's emulation, or fp32 GEMMs on widened operands). DNNL_MAX_CPU_ISA caps it. */
int sk_bf16_native(void);
const char *sk_bf16_isa(void);           /* oneDNN's ISA on this CPU: "avx512_core_bf16", "avx2", ... */
const char *sk_bf16_version(void);       /* "oneDNN 2.6.3", or "none" */
/* GFLOP/s of a bf16 GEMM C (M, N) = A (M, K) B^T with fp32 accumulation (best of 4 after a warm-up);
 * impl (n bytes, may be NULL) receives oneDNN's implementation name. 0 on failure. */
double sk_bf16_gemm_rate(int M, int N, int K, char *impl, size_t n);
/* Forward. inputs (B, T) token ids; targets (B, T) or NULL; a target < 0 is ignored.
 * *loss = mean cross-entropy over the non-ignored targets (NaN if there are none).
 * logits: NULL, or (B, T, vocab_size) to receive them. Inference mode: no dropout. */
int sk_model_forward(sk_model *m, const int32_t *inputs, const int32_t *targets,
                     int B, int T, float *loss, float *logits);
/* The per-token losses (B, T) of the last forward pass given targets (0 where a target was
 * ignored, < 0), or NULL before any: what the mean loss averages (eval --by-position). */
const float *sk_model_losses(const sk_model *m);
/* The final norm's output (B, T, n_embd) of the last sk_model_forward: the hidden states the
 * classifier reads (what skiplm serve's /v1/embeddings pools), or NULL before any, after a
 * training pass, or for a bf16-trained model (which keeps them in bf16 only). */
const float *sk_model_hidden(const sk_model *m);
/* Forward and backward in training mode: gradients of (loss * grad_scale) are ADDED to
 * the gradient buffer (call sk_model_zero_grad first; accumulation across micro-steps
 * works by not zeroing). Dropout uses dropout_seed. */
int sk_model_forward_backward(sk_model *m, const int32_t *inputs, const int32_t *targets,
                              int B, int T, float grad_scale, uint64_t dropout_seed,
                              float *loss);
void sk_model_zero_grad(sk_model *m);

/* 8-bit weights (Q8_0): every 2-D weight (matrices, embeddings, learned positions, lm_head)
 * in blocks of 32 consecutive inputs of a row, each block int8 values q and one fp16 scale d
 * (max|w| / 127), the weight being q * d. In place: the fp32 weights become their dequantized
 * values (so the full forward pass, eval, computes the quantized model), an 8-bit copy is kept
 * for decoding (SK_WEIGHTS_Q8) and sk_model_save writes the quantized file (docs/files.md).
 * Needs n_embd and the MLP width to be multiples of 32. Training refuses a quantized model. */
int sk_model_quantize_q8(sk_model *m);
int sk_model_q8(const sk_model *m);       /* 1: quantized (sk_model_quantize_q8 or a quantized file) */
size_t sk_model_q8_bytes(const sk_model *m);   /* the 8-bit copy's bytes (int8 values and fp16 scales), 0 if none */

/* Per-phase timers (seconds, accumulated since the last reset). */
typedef struct { double matmul, attention, norm, elementwise, classifier; } sk_phase_times;
void sk_model_phase_times(const sk_model *m, sk_phase_times *t, int reset);

/* -------------------------------------------------------------- inference
 *
 * KV cache: per layer, K and V of the KV heads that some layer will read, for positions
 * 0..max_T-1 of each of n_seq sequences. With SLA, a layer that borrows its skip heads and
 * lends nothing computes and stores only its own heads' K/V; the borrowed heads read the lower
 * layer's cache. One constructor takes a parameter struct (as llama.cpp's llama_context_params):
 *
 *     sk_kvcache_params kp = sk_kvcache_default_params();   // fp32, 1 sequence, block_size
 *     kp.max_T = 512; kp.n_seq = 4;                          // 4 sequences of 512 positions
 *     kp.weights = SK_WEIGHTS_BF16;                          // decode with bf16 weights
 *     kp.kv_type = SK_KV_BF16;                               // and K/V stored in bf16
 *     sk_kvcache *kv;
 *     if (sk_kvcache_new_params(&kv, model, &kp)) fprintf(stderr, "%s\n", sk_last_error());
 *     sk_model_decode_seq(model, kv, 0, prompt, n, logits); // sequence 0's prompt
 *     ...
 *     sk_kvcache_free(kv);
 */
typedef struct sk_kvcache sk_kvcache;
#define SK_KV_MAX_SEQS 1024
/* The weights a decoding step reads: the model's fp32 ones; a bf16 copy of the model's 2-D
 * weights (every matrix, the tied embedding / classifier and learned positions; rounded to
 * nearest even when the cache is made, so later changes to the model are not seen): a step
 * reads half the bytes, norms, biases and all arithmetic stay fp32, so the logits equal fp32
 * decoding on a model whose 2-D weights were rounded to bf16; or 8-bit ones (the model's own
 * if it is quantized, else a Q8_0 copy made with the cache, as sk_model_quantize_q8 makes
 * them, leaving the model unchanged): the activations stay fp32, the logits equal fp32
 * decoding of the dequantized model up to summation order. */
typedef enum { SK_WEIGHTS_F32 = 0, SK_WEIGHTS_BF16 = 1, SK_WEIGHTS_Q8 = 2 } sk_weights;
/* How K and V are stored: fp32, or bf16 (half the bytes; as llama.cpp's default F16 cache):
 * each K (after RoPE) and V value is rounded to nearest even when it is written and widened
 * back (exactly) to fp32 when the attention reads it; all arithmetic stays fp32. The logits
 * are those of fp32 decoding whose cached K and V were rounded to bf16. */
typedef enum { SK_KV_F32 = 0, SK_KV_BF16 = 1 } sk_kv_type;
typedef struct {
    int max_T;               /* positions per sequence, 1..block_size; 0 = the model's block_size */
    int n_seq;               /* sequences side by side, 1..SK_KV_MAX_SEQS (each with its own
                                positions; the weights' copy and the scratch are shared) */
    sk_weights weights;      /* what the matrix products read */
    sk_kv_type kv_type;      /* how K and V are stored */
} sk_kvcache_params;
/* max_T 0 (block_size), n_seq 1, SK_WEIGHTS_F32, SK_KV_F32 */
sk_kvcache_params sk_kvcache_default_params(void);
/* A cache for model m (which must outlive it). SK_EINVAL names a field out of range; SK_ENOMEM
 * gives the bytes when they pass the memory limit (sk_memory_limit). */
int sk_kvcache_new_params(sk_kvcache **kv, const sk_model *m, const sk_kvcache_params *params);
/* Bytes of K/V one position of one sequence takes (both K and V, every layer's stored heads),
 * as such a cache would store them: what a memory budget divides by (serve --kv-memory). */
size_t sk_kvcache_bytes_per_token(const sk_model *m, sk_kv_type kv_type);
sk_kvcache_params sk_kvcache_get_params(const sk_kvcache *kv);   /* max_T resolved */
void sk_kvcache_free(sk_kvcache *kv);
size_t sk_kvcache_bytes(const sk_kvcache *kv);            /* bytes of cached K/V */
size_t sk_kvcache_bytes_full(const sk_kvcache *kv);       /* same model without SLA's savings */
int sk_kvcache_pos(const sk_kvcache *kv);                 /* tokens in the cache (sequence 0) */
void sk_kvcache_reset(sk_kvcache *kv);
/* Keep the first n positions (0 <= n <= pos; other values change nothing): the next tokens
 * go at position n (a chat re-uses the cache up to where the new prompt differs). */
void sk_kvcache_truncate(sk_kvcache *kv, int n);
/* Append n tokens at positions pos..pos+n-1 (pos = tokens already cached) and write the
 * logits (vocab_size) of the last one. They are decoded SK_DECODE_CHUNK at a time: a cache
 * truncated to a multiple of SK_DECODE_CHUNK of a prompt decoded from there (or from 0), then
 * decoded on with another prompt sharing that prefix, gives the bits of decoding the other
 * prompt anew (a prompt cache that changes nothing). */
#define SK_DECODE_CHUNK 64
int sk_model_decode(sk_model *m, sk_kvcache *kv, const int32_t *tokens, int n, float *logits);

/* Several sequences decoded side by side (skiplm sample --samples N, serve --parallel N):
 * sequence 0 is the one the functions above work on. A batch step reads every weight matrix
 * once for all its sequences, so it costs about what one sequence's step costs while the
 * weights' traffic dominates. */
int sk_kvcache_n_seq(const sk_kvcache *kv);
int sk_kvcache_seq_pos(const sk_kvcache *kv, int s);      /* tokens in sequence s (-1: no such s) */
void sk_kvcache_seq_truncate(sk_kvcache *kv, int s, int n); /* as sk_kvcache_truncate; 0 resets */
/* Sequence dst becomes a copy of sequence src (a prompt decoded once, then sampled n ways). */
int sk_kvcache_seq_copy(sk_kvcache *kv, int dst, int src);
/* As sk_model_decode, for sequence s. */
int sk_model_decode_seq(sk_model *m, sk_kvcache *kv, int s, const int32_t *tokens, int n, float *logits);
/* As sk_model_decode_seq, writing the logits of every token: logits (n, vocab_size), row i
 * predicting the token after tokens[i] (eval --kv-bf16 scores a text through the cache). */
int sk_model_decode_all(sk_model *m, sk_kvcache *kv, int s, const int32_t *tokens, int n, float *logits);
/* One token for each of n distinct sequences seqs[i] (tokens[i] at position
 * sk_kvcache_seq_pos(seqs[i])): logits (n, vocab_size), row i for seqs[i]. The bits of decoding
 * each sequence alone: a row never depends on the others (the matrix products stream each
 * weight row once for all n rows, each row summed as it would be alone). */
int sk_model_decode_batch(sk_model *m, sk_kvcache *kv, const int *seqs, const int32_t *tokens, int n, float *logits);

/* Sampling from logits (vocab_size): temperature 0 = greedy (argmax, lowest id on ties);
 * else softmax(logits / temperature) restricted to the top_k most likely (0 = all) and to
 * the smallest set whose probability reaches top_p (1 = all). rng_state advances. */
int sk_sample_token(const float *logits, int V, float temperature, int top_k, float top_p,
                    uint64_t *rng_state);

/* A sampling step as transformers' generate() makes it: the repetition penalty on the logits
 * of every distinct id in ctx (divided by it if positive, multiplied if negative; 1 = off),
 * then temperature (0 = greedy, after the penalty), top-k, top-p and min-p (keep tokens at
 * least min_p times as likely as the most likely one; 0 = off), in that order. */
typedef struct {
    float temperature;
    int top_k;                  /* 0 = all */
    float top_p;                /* 1 = all */
    float min_p;                /* 0 = off */
    float repetition_penalty;   /* 1 = off */
} sk_sampling;
int sk_sample(const float *logits, int V, const sk_sampling *s, const int32_t *ctx, size_t n_ctx, uint64_t *rng_state);
/* The distribution sk_sample draws from (probs: V, 0 where cut; one-hot when greedy). */
int sk_sample_dist(const float *logits, int V, const sk_sampling *s, const int32_t *ctx, size_t n_ctx, float *probs);

#ifdef __cplusplus
}
#endif
#endif
