/* skiplm training: token shards and the data loader (exact positions for resume), AdamW
 * with nanoGPT's schedule and clipping, the trainer (steps, validation, checkpoints that
 * resume bit for bit, a device backend) and data parallelism over MPI. Included by
 * skiplm.h; docs/training.md, docs/distributed.md. */
#ifndef SKIPLM_TRAIN_H
#define SKIPLM_TRAIN_H
#include <stddef.h>
#include <stdint.h>
#include "skiplm_io.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ shards
 *
 * llm.c layout: 256 little-endian int32 header (magic 20240520, version, token count at
 * [2], rest 0), then count tokens: uint16 in version 1, uint32 in version 2 (llm.c's Llama 3
 * shards; what a vocabulary over 65,536 tokens needs). Raw headerless uint16 files (nanoGPT)
 * are read too: an even-sized file that does not start with the magic. */
#define SK_SHARD_MAGIC 20240520
#define SK_SHARD_VERSION 1       /* uint16 tokens */
#define SK_SHARD_VERSION_U32 2   /* uint32 tokens */
#define SK_SHARD_VERSION_MASK 100 /* skiplm's loss mask beside a token shard: uint8 0/1 */
#define SK_SHARD_HEADER_INTS 256

typedef struct {
    char *path;
    const uint16_t *tokens;  /* n tokens (read-only mapping) of a version 1 or headerless file, else NULL */
    const uint32_t *tokens32;/* n tokens of a version 2 file, else NULL */
    const uint8_t *mask;     /* n loss-mask entries of a mask file (sk_mask_open), else NULL */
    size_t n;
    int version;             /* 1 or 2 (0: headerless) */
    int headerless;          /* 1: raw uint16 file */
    void *map_;              /* internal */
    size_t map_len_;
} sk_shard;

/* Token i of a shard of either width. */
static inline uint32_t sk_shard_at(const sk_shard *s, size_t i) {
    return s->tokens32 ? s->tokens32[i] : s->tokens[i];
}

/* Write ids (each 0..65535) as a version 1 shard, atomically. */
int sk_shard_write(const char *path, const int32_t *ids, size_t n);
/* Write ids as a shard of the given version: 1 (uint16, ids 0..65535) or 2 (uint32, ids >= 0). */
int sk_shard_write_version(const char *path, const int32_t *ids, size_t n, int version);
int sk_shard_open(sk_shard *s, const char *path);
void sk_shard_close(sk_shard *s);
/* Loss masks (supervised fine-tuning): one uint8 per token of the shard beside it, 1 where
 * the token is a target whose loss counts (an assistant's reply), 0 where it is only
 * context. Same header (magic, version SK_SHARD_VERSION_MASK, count), then the bytes. The
 * mask of "DIR/x.bin" is "DIR/x.mask.bin" (sk_mask_path; other names get ".mask" added). */
int sk_mask_write(const char *path, const uint8_t *mask, size_t n);
int sk_mask_open(sk_shard *s, const char *path);
/* The mask path of a shard into out (n bytes); SK_EINVAL if it does not fit. */
int sk_mask_path(const char *shard, char *out, size_t n);
/* 0 if every token is < vocab_size; else SK_EFORMAT naming the first bad token, whose
 * position and value go to *pos and *value (either may be NULL). */
int sk_shard_check_vocab(const sk_shard *s, int vocab_size, size_t *pos, int *value);

/* ------------------------------------------------------------------ loader
 *
 * Windows of T+1 tokens for next-token prediction: window k of a shard is tokens
 * [k*T, k*T + T] (neighbours share one token), so a shard of n tokens has (n-1)/T windows.
 * All windows of all shards form one list of N windows. An epoch visits each window once,
 * in list order (shuffle = 0) or in a seeded pseudo-random order that is different for each
 * epoch (shuffle = 1): the shards in a permuted order, and within each shard its windows
 * permuted, so that an epoch reads one shard after another (a corpus larger than memory
 * streams through the page cache). The epochs are concatenated into one stream; a step takes
 * the next B * world_size windows of that stream and rank r gets the r-th block of B, so
 * the ranks together read exactly what one process with batch B * world_size reads.
 * A shard with a loss mask beside it (sk_mask_path) gives the target -1 (ignored: the
 * model's loss is the mean over the others, as PyTorch's ignore_index) wherever the mask is
 * 0, in sk_loader_next_xy; shards without one count every target. */
typedef struct {
    int B, T;
    uint64_t seed;
    int shuffle;
    int rank, world_size;    /* world_size 0 or 1: single process */
    int vocab_size;          /* > 0: check every shard's tokens at open */
} sk_loader_cfg;

/* The position to store in a checkpoint; restoring checks that it fits the data. */
typedef struct {
    uint64_t consumed;       /* windows consumed by all ranks together */
    uint64_t seed;
    uint64_t n_windows;
    int64_t T;
} sk_loader_pos;

typedef struct sk_loader sk_loader;

int sk_loader_open(sk_loader **L, const char *const *paths, int n_paths, const sk_loader_cfg *cfg);
void sk_loader_free(sk_loader *L);
/* Next batch as B rows of T+1 tokens: inputs are [:, :T], targets [:, 1:]. */
int sk_loader_next(sk_loader *L, int32_t *batch);
/* Same, split llm.c-style into inputs x (B, T) and targets y (B, T). */
int sk_loader_next_xy(sk_loader *L, int32_t *x, int32_t *y);
uint64_t sk_loader_n_windows(const sk_loader *L);
int sk_loader_has_mask(const sk_loader *L);         /* 1 if any shard has a loss mask */
/* Shards shorter than one window of T+1 tokens: they give no window (the last shard of a
 * stream may be short); open fails only when no shard gives one. */
int sk_loader_n_short(const sk_loader *L);
uint64_t sk_loader_epoch(const sk_loader *L);       /* epochs completed so far */
void sk_loader_get_pos(const sk_loader *L, sk_loader_pos *pos);
int sk_loader_set_pos(sk_loader *L, const sk_loader_pos *pos);

/* ------------------------------------------------------------- optimizer
 *
 * The parameter buffer is walked as a list of spans: pieces of the named tensors of at
 * most SK_SPAN_FLOATS floats, in buffer order, each with the tensor's decay flag. Floats
 * that belong to no tensor (the padded vocabulary rows of wte) are in no span: the
 * optimizer never touches them, so they stay zero. The span list depends only on the
 * model layout, never on the thread count: reductions over it (the gradient norm) sum
 * one double per span, in span order, and are bit-identical for any number of threads. */
#define SK_SPAN_FLOATS 8192

typedef struct {
    size_t offset, n;        /* floats within the parameter buffer */
    int decay;               /* decoupled weight decay applies */
} sk_span;

/* Split tensors (offset/numel/decay, as sk_model_tensors gives them) into spans.
 * *spans is malloc'd (free() it). */
int sk_spans_build(const sk_tensor *tensors, int n_tensors, sk_span **spans, int *n_spans);

/* AdamW hyperparameters; defaults (sk_adamw_default) are nanoGPT's:
 * lr 6e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1. */
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
} sk_adamw_cfg;
void sk_adamw_default(sk_adamw_cfg *c);

/* One AdamW step, exactly torch.optim.AdamW (PyTorch 1.13, single-tensor path), t >= 1
 * the step count after this update:
 *     p *= 1 - lr*wd                      (spans with decay only)
 *     m  = b1*m + (1-b1)*g
 *     v  = b2*v + (1-b2)*g*g
 *     p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
 * lr overrides c->lr (the scheduled value). One fused pass, OpenMP over spans. */
void sk_adamw_step(float *params, const float *grads, float *m, float *v,
                   const sk_span *spans, int n_spans, const sk_adamw_cfg *c, double lr, long t);
/* The same, also writing each updated weight rounded to bf16 into p16 (a bf16 copy of params with
 * the same offsets: sk_model_params_bf16) in the same pass: the fp32 results are sk_adamw_step's. */
void sk_adamw_step_bf16(float *params, const float *grads, float *m, float *v, const sk_span *spans,
                        int n_spans, const sk_adamw_cfg *c, double lr, long t, uint16_t *p16);

/* Global L2 norm of the gradients over the spans, accumulated in double, deterministic
 * (independent of the thread count). */
double sk_grad_norm(const float *grads, const sk_span *spans, int n_spans);
/* torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6); if coef < 1 the
 * gradients are multiplied by it. Returns the coefficient applied (1 if none). */
float sk_clip_grads(float *grads, const sk_span *spans, int n_spans, double norm, float max_norm);

/* nanoGPT's schedule: lr*(it+1)/(warmup+1) for it < warmup, then cosine from lr down to
 * min_lr at it = decay_iters, then min_lr. it counts optimizer steps from 0. */
typedef struct {
    double lr, min_lr;
    long warmup, decay_iters;
} sk_lr_sched;
double sk_lr_at(const sk_lr_sched *s, long it);

/* --------------------------------------------------------------- trainer */

typedef struct {
    int steps;               /* optimizer steps in the whole run */
    int B, T;                /* micro-batch */
    int accum;               /* micro-steps per optimizer step (tokens/step = accum*B*T) */
    float lr, min_lr;
    int warmup, lr_decay_steps;   /* lr_decay_steps 0 = steps */
    float beta1, beta2, eps, weight_decay;
    float grad_clip;         /* 0 = no clipping */
    uint64_t seed;           /* model init, dropout and shuffling */
    int shuffle;             /* data order (0: sequential windows) */
    int skip_nonfinite;      /* skip the update of a step with a non-finite loss / grad norm */
    int eval_every, eval_batches;   /* validation every N steps (0 = never) */
    int ckpt_every;          /* checkpoint every N steps (0 = only at the end) */
    int world_size;          /* data-parallel ranks (1: single process); must equal sk_dist_size().
                              * The global batch is B * accum * world_size: a resume may change B,
                              * accum and world_size as long as that product stays the same */
    int zero;                /* 1: ZeRO stage 1, the AdamW state is sharded over the ranks */
    int bf16;                /* 1: bf16 mixed precision (the model's, sk_model_set_bf16, or the device's):
                              * recorded in checkpoints, so a resume can keep it; not compared */
} sk_train_cfg;
/* Defaults: nanoGPT's optimizer, B 8, T 0 (= block_size), accum 1, warmup 0, clip 1.0,
 * seed 1337, shuffle 1, eval every 100 steps on 10 batches, checkpoint every 500. */
void sk_train_default(sk_train_cfg *c);

/* What one step did. */
typedef struct {
    int step;                /* 1-based index of the step just done */
    float loss;              /* mean training loss over the micro-steps */
    double lr, grad_norm;
    int skipped;             /* the update was skipped: 1 non-finite loss or gradient norm,
                              * 2 no masked-in target in the step's batches (loss masks) */
    uint64_t tokens;         /* tokens processed by this step */
} sk_step_info;

typedef struct sk_trainer sk_trainer;

/* The gradient hook runs after backward and before clipping/update, once per step, on
 * the whole gradient buffer (n floats) and the step's mean loss. With world_size > 1 the
 * trainer's own data-parallel reduction (below) follows the hook, so the hook sees this
 * rank's gradients. A non-zero return aborts the step (on every rank, see sk_dist_agree). */
typedef int (*sk_grad_hook)(float *grads, size_t n, float *loss, void *ctx);

/* A trainer over model m (not owned) reading batches from train (not owned), and
 * validation batches from val (may be NULL; not owned). The loaders must have been
 * opened with B and T of cfg. Allocates gradients and the AdamW state (zero). */
int sk_trainer_new(sk_trainer **tr, sk_model *m, const sk_train_cfg *cfg, sk_loader *train, sk_loader *val);
void sk_trainer_free(sk_trainer *tr);
void sk_trainer_set_grad_hook(sk_trainer *tr, sk_grad_hook fn, void *ctx);
/* Steps done so far (0 for a fresh trainer, the checkpoint's step after a resume). */
int sk_trainer_step_count(const sk_trainer *tr);
int sk_trainer_skipped(const sk_trainer *tr);   /* steps whose update was skipped */

/* One optimizer step: accum micro-steps of forward+backward (grad_scale 1/accum, dropout
 * seeded by (seed, step, micro-step): stateless, so a resumed run draws the same masks;
 * with world_size > 1 the micro-step index is micro * world_size + rank, so the ranks
 * draw different masks and a run with dropout equals a single-process one only in law),
 * hook, gradient norm, NaN guard, clipping, scheduled AdamW update.
 * A non-finite loss or gradient norm returns SK_ENUM with "step N: non-finite <what>"
 * and leaves the parameters untouched, unless cfg.skip_nonfinite (then info->skipped). */
int sk_trainer_step(sk_trainer *tr, sk_step_info *info);
/* With loss masks on the training data (sk_loader_has_mask) the step's loss is the mean over
 * the masked-in targets of all its micro-steps on all ranks (PyTorch's cross-entropy with
 * ignore_index over the step's whole batch): the micro-batches are read first and micro-step
 * k is weighted by its share of the targets; a micro-step with none is skipped, a step with
 * none makes no update (info->skipped = 2, counted in sk_trainer_skipped). Validation is
 * then the mean over the masked-in targets of its batches too (NaN when they have none). */
/* Mean loss over eval_batches fixed validation batches (the first ones of val, the same
 * at every evaluation). */
int sk_trainer_eval(sk_trainer *tr, float *val_loss);

/* Checkpoint: one safetensors file with the model (as sk_model_save, so eval/sample read
 * it directly), "optim.m" and "optim.v" (F32, flat over the whole parameter buffer) and
 * metadata "train.*": step, Adam step count, skipped steps, loader position, seed and
 * every hyperparameter; extra_meta (NULL-terminated key/value pairs, may be NULL) is
 * added as is (the CLI records the tokenizer). Written atomically. */
int sk_trainer_save(const sk_trainer *tr, const char *path, const char *const *extra_meta);

/* Resume from a parsed checkpoint: the model config must equal m's and the hyperparameters
 * those of the trainer (except eval_every, eval_batches, ckpt_every) or SK_EINVAL names the
 * first differing field and both values. Restores parameters (bit-exact), m, v, the step
 * counters and the train loader's position. Nothing is written. */
int sk_trainer_resume(sk_trainer *tr, const sk_safetensors *ckpt, const char *path);

/* Read the hyperparameters stored in a checkpoint into *cfg (fields absent from the file
 * are left as they are). */
int sk_train_cfg_from_st(sk_train_cfg *cfg, const sk_safetensors *ckpt, const char *path);
/* Compare two model configs / two training configs; on a difference returns SK_EINVAL
 * with "<what>: field '<name>' is <a> in <a_name> but <b> in <b_name>". */
int sk_config_diff(const sk_config *a, const sk_config *b, const char *a_name, const char *b_name);
int sk_train_cfg_diff(const sk_train_cfg *a, const sk_train_cfg *b, const char *a_name, const char *b_name);

/* A device backend (the CUDA one: src/cuda/, include/skiplm_cuda.h). With one set, the
 * parameters, gradients and AdamW moments live on the device and the trainer calls these
 * instead of the CPU model and optimizer; it keeps everything else (data order, schedule,
 * NaN guard, clipping decision, checkpoints, resume). pull copies the device state into
 * the host model's parameters and the trainer's m and v (before a checkpoint is written),
 * push the other way (when the backend is set, and after a resume). update applies AdamW
 * with the gradients multiplied by clip_coef first (1 = no clipping). The gradient hook
 * gets grads = NULL, n = 0 with a backend. With world_size > 1 the backend needs grads_mean;
 * with zero = 1 also shard, and then grads_mean, grad_norm, update, pull and push take the
 * ZeRO-1 meanings given below (m and v: this rank's shard only, as the trainer's are).
 * Every function returns 0 or an error code with sk_error's message. */
typedef struct {
    void *ctx;
    int (*zero_grad)(void *ctx);
    int (*forward_backward)(void *ctx, const int32_t *x, const int32_t *y, int B, int T,
                            float grad_scale, uint64_t dropout_seed, float *loss);
    int (*forward)(void *ctx, const int32_t *x, const int32_t *y, int B, int T, float *loss);
    int (*grad_norm)(void *ctx, double *norm);
    int (*update)(void *ctx, const sk_adamw_cfg *c, double lr, long t, float clip_coef);
    int (*pull)(void *ctx, float *params, float *m, float *v);
    int (*push)(void *ctx, const float *params, const float *m, const float *v);
    /* Data parallelism (world_size > 1; NULL: one process only): replace every rank's device
     * gradients by their mean over the ranks, the same bits on every rank. Collective. */
    int (*grads_mean)(void *ctx);
    /* ZeRO-1 (zero = 1, world_size > 1; NULL: refused). Called once, before the first push,
     * with the trainer's shards: rank r owns the parameter buffer range [starts[r],
     * starts[r+1]) and the spans [span_displs[r], span_displs[r] + span_counts[r]) (in
     * sk_spans_build's order). From then on the device keeps only this rank's range of m
     * and v (pull and push move that range); grads_mean leaves the mean in this rank's
     * range only (reduce-scatter); grad_norm is still the norm of the whole mean gradient
     * (per-span squares all-gathered, added in span order); update applies AdamW to this
     * rank's range, then all-gathers the parameters. Collective. */
    int (*shard)(void *ctx, const size_t *starts, const int *span_counts, const int *span_displs);
} sk_train_backend;
/* Attach a backend (copied) and push the current state to it. */
int sk_trainer_set_backend(sk_trainer *tr, const sk_train_backend *be);
/* The clipping coefficient of sk_clip_grads without applying it: max_norm / (norm + 1e-6)
 * in float, or 1 when that is not below 1. */
float sk_clip_coef(double norm, float max_norm);

/* ------------------------------------------------------------ distributed
 *
 * Data parallelism over MPI (src/train/dist.c, docs/distributed.md). Built with `make MPI=1`
 * (mpicc, -DSK_HAVE_MPI); the plain build has the same functions for one process (rank 0
 * of 1, every collective a copy). An MPI build started without mpirun does not initialise
 * MPI and runs as one process too.
 *
 * With cfg.world_size > 1 every trainer call is collective: each rank reads its block of
 * each global batch (sk_loader_cfg rank/world_size), and after the gradient hook
 *   zero = 0: gradients are averaged over the ranks (reduce-scatter + all-gather: every
 *             element is summed once, so all ranks hold the same bits), then the usual
 *             norm / clip / AdamW run on every rank;
 *   zero = 1: reduce-scatter only; rank r owns a contiguous run of spans, computes their
 *             squared norms (all-gathered and added in span order: the same norm as one
 *             process), clips and updates its shard with its 1/N of m and v, then the
 *             parameters are all-gathered.
 * The loss (and the validation loss) is averaged over the ranks. Errors inside a step,
 * an evaluation or a save are agreed: every rank returns the failing rank's message.
 * Only rank 0 writes checkpoints (ZeRO gathers m and v to it first: the file is the one a
 * single process writes); every rank reads them on resume. The collectives the trainer
 * uses inside a step are internal (src/train/dist.h). */
int sk_dist_init(void);          /* MPI_Init when started by mpirun (idempotent) */
void sk_dist_finalize(void);
int sk_dist_rank(void);
int sk_dist_size(void);          /* 1 without MPI */
/* Stop every rank now (MPI_Abort; exit() in one process). For errors outside the agreed
 * points, after the message is printed. */
void sk_dist_abort(int status);
/* Collective: rc is this rank's result. Returns 0 if every rank passed 0; otherwise every
 * rank returns the lowest failing rank's code, with its message as
 * "rank R: <message>" (the failing rank's own message unchanged when world_size is 1). */
int sk_dist_agree(int rc);
/* In-place maximum over the ranks. */
int sk_dist_max_f64(double *x, int n);
/* All-gather variable-length double arrays: rank r contributes counts[r] values into
 * all[displs[r] ..]. */
int sk_dist_allgather_f64(const double *mine, double *all, const int *counts, const int *displs);
/* Seconds spent inside collectives since the start (for the benchmark). */
double sk_dist_comm_seconds(void);


/* ------------------------------------------------------------------ LoRA
 *
 * Low-rank adapters on a frozen base (src/train/lora.c, docs/training.md): each adapted
 * matrix W0 (out, in) computes W0 x + s B A drop(x) with A (r, in), B (out, r), s = alpha / r
 * (PEFT's LoRA with lora_dropout; no rslora or DoRA). Targets: "q,k,v,o,gate,up,down" (Llama's
 * *_proj; the full names work too), GPT-2's "c_attn,c_proj,c_fc", or "all" (every matrix of
 * the layers). */
typedef struct sk_lora sk_lora;
/* A new adapter: A uniform in +-1/sqrt(in) (nn.Linear's init, as PEFT's), B zero (the model
 * starts as the base). */
int sk_lora_new(sk_lora **l, const sk_model *m, int rank, float alpha, const char *targets, uint64_t seed);
/* PEFT's adapter_config.json + adapter_model.safetensors in dir, for the base m (its current
 * weights are the base). Refused: another peft_type, rslora, DoRA, bias terms, missing or
 * misshapen tensors, tensors for modules the config does not adapt. */
int sk_lora_load(sk_lora **l, const sk_model *m, const char *dir);
/* Frees the adapter (a model it is attached to must not run after: sk_lora_detach first). */
void sk_lora_free(sk_lora *l);
int sk_lora_count(const sk_lora *l);              /* matrices adapted */
size_t sk_lora_num_params(const sk_lora *l);      /* floats of A and B */
size_t sk_lora_base_floats(const sk_lora *l);     /* floats of the adapted base matrices */
float *sk_lora_weights(sk_lora *l);               /* A and B of every matrix */
float *sk_lora_grads(sk_lora *l);                 /* their gradients */
float *sk_lora_moments(sk_lora *l, int which);    /* AdamW's m (0) or v (1), as A and B */
/* Training: the adapters attached to m as branches of their own (core/model.h's sk_adapters)
 * for batches of up to max_tokens = B * T tokens, with dropout p on each adapter's input in
 * training passes (sk_model_forward_backward; adapter i's mask is sk_dropout's with the pass's
 * dropout seed and stream SK_LORA_STREAM0 + i). m is frozen: its gradient buffer is freed and
 * never made again, its backward pass computes only the activations' and the adapters'
 * gradients (accumulated into sk_lora_grads). sk_model_forward then computes the adapted model
 * too (without dropout). */
#define SK_LORA_STREAM0 (1ull << 32)
int sk_lora_attach(sk_lora *l, sk_model *m, int max_tokens, float dropout);
void sk_lora_detach(sk_lora *l, sk_model *m);
size_t sk_lora_workspace_bytes(const sk_lora *l); /* the attached branches' workspaces */
void sk_lora_zero_grad(sk_lora *l);
/* The model's adapted matrices set to W + s B A for good (sample, eval, serve, export --lora):
 * an 8-bit model's merged matrices are quantized again, as sk_model_quantize_q8 quantizes, and
 * its fp32 weights set to their values. */
int sk_lora_merge(const sk_lora *l, sk_model *m);
/* Clip (clip > 0) and one AdamW step on A and B; returns the gradient norm (no update when it
 * is not finite). */
double sk_lora_step(sk_lora *l, const sk_adamw_cfg *c, double lr, long t, float clip);
/* Write PEFT's two files into dir (which must exist); base: base_model_name_or_path, or NULL. */
int sk_lora_save(const sk_lora *l, const sk_model *m, const char *dir, const char *base);

#ifdef __cplusplus
}
#endif
#endif
