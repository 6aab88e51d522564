/* skiplm CUDA backend (built by `make cuda`, -DSKIPLM_CUDA; see docs/cuda.md).
 *
 * A device model mirrors an sk_model: the same single parameter buffer, same layout, so the
 * weights move with one copy each way and the same safetensors files and checkpoints are
 * used. Gradients, AdamW's m and v and all activations live on the GPU; the host model
 * supplies the config, the Skip-Layer routing tables and the tensor table.
 *
 * Precision: fp32 throughout (SK_CUDA_FP32, the parity mode: cuBLAS without TF32); fp32
 * with TF32 tensor-core GEMMs (SK_CUDA_TF32: faster, ~1e-3 relative GEMM error); or bf16
 * mixed precision (SK_CUDA_BF16): every GEMM multiplies bf16 operands on the tensor cores
 * with fp32 accumulation and an fp32 result; the weights' bf16 copy is refreshed from the
 * fp32 master weights after every update; activations, attention, norms, the loss,
 * gradients and AdamW's state stay fp32.
 *
 * Not a part of skiplm.h: include it where the build defines SKIPLM_CUDA. */
#ifndef SKIPLM_CUDA_H
#define SKIPLM_CUDA_H
#include "skiplm_train.h"
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SK_CUDA_FP32 = 0, SK_CUDA_TF32 = 1, SK_CUDA_BF16 = 2 } sk_cuda_precision;
/* "fp32", "fp32 with TF32 GEMMs", "bf16 mixed precision (fp32 master weights)" */
const char *sk_cuda_precision_name(sk_cuda_precision p);

typedef struct sk_cuda_model sk_cuda_model;

/* Name and memory of the current device ("NVIDIA H100 80GB HBM3, 79.1 GiB, sm_90"), or an
 * error (no device, driver too old) with the CUDA message. */
int sk_cuda_device_info(char *buf, size_t n);

/* A device model for m (not owned: it must outlive the device model), with m's parameters
 * uploaded. Families: gpt2 and llama, any routing table, dropout, head size <= 128. */
int sk_cuda_model_new(sk_cuda_model **out, sk_model *m, sk_cuda_precision prec);
/* The same for inference only (sampling, evaluation): the parameters alone on the device (and
 * their bf16 copy in SK_CUDA_BF16), no gradients and no AdamW state, a quarter of the
 * training model's parameter memory. The calls that need gradients or moments refuse it
 * with SK_EINVAL; sk_cuda_forward and the KV-cache calls work. */
int sk_cuda_model_new_inference(sk_cuda_model **out, sk_model *m, sk_cuda_precision prec);
void sk_cuda_model_free(sk_cuda_model *cm);
sk_model *sk_cuda_host_model(sk_cuda_model *cm);

/* Host <-> device copies of the parameter buffer (sk_model_params layout) and of the
 * gradient buffer (n_params floats each; grads may be requested before any backward: zeros). */
int sk_cuda_upload_params(sk_cuda_model *cm, const float *params);
int sk_cuda_download_params(sk_cuda_model *cm, float *params);
int sk_cuda_download_grads(sk_cuda_model *cm, float *grads);
/* AdamW moments (n_params floats each; NULL skips one). */
int sk_cuda_upload_adam(sk_cuda_model *cm, const float *m, const float *v);
int sk_cuda_download_adam(sk_cuda_model *cm, float *m, float *v);

/* Reserve activations for (B, T) (done lazily by the calls below). */
int sk_cuda_reserve(sk_cuda_model *cm, int B, int T);
/* As sk_model_forward / sk_model_forward_backward: host token arrays in, loss (and
 * logits (B, T, vocab_size) on the host, if non-NULL) out; gradients of loss * grad_scale
 * are ADDED to the device gradient buffer. */
int sk_cuda_forward(sk_cuda_model *cm, const int32_t *inputs, const int32_t *targets, int B, int T,
                    float *loss, float *logits);
int sk_cuda_forward_backward(sk_cuda_model *cm, const int32_t *inputs, const int32_t *targets, int B, int T,
                             float grad_scale, uint64_t dropout_seed, float *loss);
int sk_cuda_zero_grad(sk_cuda_model *cm);
/* sk_grad_norm over the device gradients (per-span sums in double, added on the host in
 * span order). */
int sk_cuda_grad_norm(sk_cuda_model *cm, double *norm);
/* sk_adamw_step on the device with the gradients first multiplied by clip_coef (1 = none). */
int sk_cuda_adamw_step(sk_cuda_model *cm, const sk_adamw_cfg *c, double lr, long t, float clip_coef);
/* Wait for the device (for timings). */
int sk_cuda_sync(void);
/* Per-op GPU time (bench --profile): after sk_cuda_profile_start every kernel launch, GEMM
 * and attention call is timed with CUDA events; sk_cuda_profile_report waits for the device
 * and prints, per op, the calls and milliseconds per step over `steps` steps and their share
 * of profiled_step_ms (the profiled steps' wall time; step_ms, an unprofiled step's, is
 * printed beside it), then stops profiling and frees the events. */
void sk_cuda_profile_start(void);
int sk_cuda_profile_report(FILE *f, int steps, double step_ms, double profiled_step_ms);
/* Device memory in use (total - free, all processes) and the total, in bytes. */
int sk_cuda_memory(size_t *used, size_t *total);

/* ------------------------------------------------------- data parallelism
 * One GPU per MPI rank (a CUDA build with MPI=1: build-cuda-mpi/, docs/cuda.md). */
/* Make this rank's GPU the current device: its rank among the ranks on its node, modulo
 * the GPUs visible. Call it before anything else touches the GPU. */
int sk_cuda_select_device(void);
/* Collective: what the gradient mean needs (the NCCL communicator, or the pinned host
 * buffer); a no-op on one process. */
int sk_cuda_dist_init(sk_cuda_model *cm);
/* 1 when the gradient mean uses NCCL (built with it and SKIPLM_NCCL is not 0). */
int sk_cuda_nccl_enabled(void);

/* The trainer backend over this device model (sk_trainer_set_backend); it has grads_mean
 * and shard (src/cuda/cuda_internal.h: sk_cuda_grads_mean, sk_cuda_shard). */
void sk_cuda_train_backend(sk_cuda_model *cm, sk_train_backend *be);

/* ----------------------------------------------------------- generation
 * A KV cache on the GPU with sk_kvcache's layout and slot map (only the KV heads some layer
 * reads are stored; SLA's borrowed heads read the lending layer's cache in place), and the
 * decoding of sk_model_decode. Sampling stays on the host (sk_sample_token on the returned
 * logits), so with the same seed the GPU generates the CPU's tokens whenever the logits agree.
 * chunk: tokens per prefill pass (scratch memory grows with it; 0 = 512, capped at max_T).
 * K and V are stored in bf16 when cm is a --bf16 model with the tensor-core attention (the
 * default there; SKIPLM_CUDA_KV16=0 keeps them fp32): the prefill's attention rounds them to
 * bf16 anyway, so the cache is half the size and a decoding step reads half the bytes. Such a
 * cache is refused to a model that cannot read it (fp32, TF32, or other attention kernels). */
typedef struct sk_cuda_kvcache sk_cuda_kvcache;
int sk_cuda_kvcache_new(sk_cuda_kvcache **kv, sk_cuda_model *cm, int max_T, int chunk);
void sk_cuda_kvcache_free(sk_cuda_kvcache *kv);
void sk_cuda_kvcache_reset(sk_cuda_kvcache *kv);
void sk_cuda_kvcache_truncate(sk_cuda_kvcache *kv, int n);         /* as sk_kvcache_truncate */
int sk_cuda_kvcache_pos(const sk_cuda_kvcache *kv);                 /* tokens in the cache */
size_t sk_cuda_kvcache_bytes(const sk_cuda_kvcache *kv);            /* bytes of cached K/V */
size_t sk_cuda_kvcache_bytes_full(const sk_cuda_kvcache *kv);       /* same model without SLA's savings */
int sk_cuda_kvcache_bf16(const sk_cuda_kvcache *kv);                /* 1: K/V in bf16, 0: fp32 */
/* 1 when single-token steps run as a CUDA graph (the default; SKIPLM_CUDA_GRAPHS=0 at
 * sk_cuda_kvcache_new, or sk_cuda_kvcache_set_graphs, turns it off; so does a failed
 * capture, with a warning) */
int sk_cuda_kvcache_graphs(const sk_cuda_kvcache *kv);
void sk_cuda_kvcache_set_graphs(sk_cuda_kvcache *kv, int on);      /* turn them on or off */
/* As sk_model_decode: append n tokens at positions pos..pos+n-1 (a batched prefill in chunks
 * through the fused attention) and copy the logits (vocab_size floats) of the last one to
 * the host (logits may be NULL). Fails with SK_EINVAL when they do not fit in the cache. */
int sk_cuda_prefill(sk_cuda_model *cm, sk_cuda_kvcache *kv, const int32_t *tokens, int n, float *logits);
/* One decoding step: the token at position pos (single-query attention over the cache), as
 * one CUDA graph launch when graphs are on (captured again when the position reaches a new
 * 128-key split of the attention, or with another device model). */
int sk_cuda_decode(sk_cuda_model *cm, sk_cuda_kvcache *kv, int32_t token, float *logits);

/* cuBLAS GEMM rate in GFLOP/s for C (M, N) = A (M, K) B^T in the given precision (SGEMM,
 * TF32, or GemmEx with bf16 A and B), best of a few runs (the benchmark's reference for MFU). */
int sk_cuda_sgemm_rate(int M, int N, int K, sk_cuda_precision prec, double *gflops);

#ifdef __cplusplus
}
#endif
#endif
