/* skiplm CUDA backend (built by `make cuda`, -DSKIPLM_CUDA; see docs/cuda.md).
 *
 * A device model mirrors an sk_model: the same single parameter buffer, same layout, so the
 * weights move with one copy each way and the same safetensors files and checkpoints are
 * used. Gradients, AdamW's m and v and all activations live on the GPU; the host model
 * supplies the config, the Skip-Layer routing tables and the tensor table.
 *
 * Precision: fp32 throughout (SK_CUDA_FP32, the parity mode: cuBLAS without TF32), or fp32
 * with TF32 tensor-core GEMMs (SK_CUDA_TF32: faster, ~1e-3 relative GEMM error).
 *
 * Not a part of skiplm.h: include it where the build defines SKIPLM_CUDA. */
#ifndef SKIPLM_CUDA_H
#define SKIPLM_CUDA_H
#include "skiplm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SK_CUDA_FP32 = 0, SK_CUDA_TF32 = 1 } sk_cuda_precision;

typedef struct sk_cuda_model sk_cuda_model;

/* Name and memory of the current device ("NVIDIA H100 80GB HBM3, 79.1 GiB, sm_90"), or an
 * error (no device, driver too old) with the CUDA message. */
int sk_cuda_device_info(char *buf, size_t n);

/* A device model for m (not owned: it must outlive the device model), with m's parameters
 * uploaded. Families: gpt2 and llama, any routing table, dropout, head size <= 128. */
int sk_cuda_model_new(sk_cuda_model **out, sk_model *m, sk_cuda_precision prec);
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
/* Device memory in use (total - free, all processes) and the total, in bytes. */
int sk_cuda_memory(size_t *used, size_t *total);

/* The trainer backend over this device model (sk_trainer_set_backend). */
void sk_cuda_train_backend(sk_cuda_model *cm, sk_train_backend *be);

/* cuBLAS SGEMM rate in GFLOP/s for C (M, N) = A (M, K) B^T in the given precision, best of
 * a few runs (the benchmark's reference for MFU). */
int sk_cuda_sgemm_rate(int M, int N, int K, sk_cuda_precision prec, double *gflops);

#ifdef __cplusplus
}
#endif
#endif
