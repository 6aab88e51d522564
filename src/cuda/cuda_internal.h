/* Host-side internals of the CUDA backend, shared by the device model (model_cuda.c) and
 * cached generation (infer_cuda.c): the device model's struct, the error checks, device
 * allocation and the row-major GEMM. Not a public header. */
#ifndef SK_CUDA_INTERNAL_H
#define SK_CUDA_INTERNAL_H
#include "skiplm_cuda.h"
#include "core/model.h"
#include "core/config.h"
#include "train/dist.h"
#include "cuda_kernels.h"
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

/* rows per warp of the tensor-core attention unless SKIPLM_CUDA_MMA_ROWS says */
#define SK_CUDA_MMA_ROWS_DEFAULT 16

struct sk_cuda_model {
    sk_model *m;                      /* host model: config, routing, tensor table (not owned) */
    sk_cuda_precision prec;
    unsigned long long serial;        /* unique per device model made in this process */
    cublasHandle_t blas;
    float *params, *grads, *mom, *vel;   /* device, n_params floats each */
    uint16_t *params16;               /* SK_CUDA_BF16: params rounded to bf16 (same layout), else NULL */
    uint16_t *op16[2]; size_t op16_n[2];  /* SK_CUDA_BF16: the GEMM's activation operands in bf16 */
    int attn_tc;                      /* attention on tensor cores (cu_attn.tc): 1 with SK_CUDA_BF16
                                         unless SKIPLM_CUDA_TC_ATTN=0 (0) or =wmma (2); single-token
                                         decoding stays fp32 */
    int attn_warps;                   /* cu_attn.mma_warps: SKIPLM_CUDA_MMA_WARPS (4 or 8), default 4 */
    int attn_bwd_split;               /* cu_attn.bwd_split: SKIPLM_CUDA_ATTN_BWD=split */
    int attn_rows;                    /* cu_attn.mma_rows: SKIPLM_CUDA_MMA_ROWS (16 or 32) */
    int attn_stages;                  /* cu_attn.stages: SKIPLM_CUDA_ATTN_STAGES (1 or 2), default 0 (2 where it fits) */
    int attn_merge;                   /* an SLA layer's attention in one launch (cu_attn.nruns) where the
                                         kernels take runs: SKIPLM_CUDA_ATTN_MERGE (default 1) */
    sk_params p, g;                   /* device views (sk_params_views on the device buffers) */
    float *pos_table;                 /* sinusoidal positions (block_size, C), or NULL */
    float *rope;                      /* RoPE table (block_size, hs/2, 2), or NULL */
    cu_span *spans; int n_spans;      /* AdamW / norm spans (device) */
    int span_split;                   /* blocks per span (cu_span_split) */
    double *sq_d, *sq_h;              /* squared-norm partials, n_spans * span_split: device, host */
    /* activations for (B, T) */
    int B, T;
    float *acts_mem;
    sk_acts a;                        /* device views, src/core/model.h's layout names */
    /* SK_CUDA_BF16: the activations that are only GEMM inputs, kept in bf16 instead of fp32
     * (a.ln1, a.atty, a.ln2, a.fch_act and a.lnf are then NULL): written so by their kernels,
     * read as they are by the forward GEMM and again by the weight-gradient GEMM (and the
     * attention output by the attention backward, for Di). Else NULL. */
    uint16_t *ln1_16, *atty16, *ln2_16, *act16, *lnf16;
    /* SK_CUDA_BF16: the MLP's pre-activation (per layer, a.fch's layout; written by c_fc's
     * GEMM in bf16, its bias added in place by the activation kernel, read by the activation
     * and its backward) and, in the backward, one layer's gradients of the activation and of
     * the pre-activation (a.dfch_act's and a.dfch's layouts: written by a GEMM and by the
     * activation's backward, read by the activation's backward, c_fc's two GEMMs and its bias
     * gradient). a.fch, a.dfch and a.dfch_act are then NULL. Else NULL. */
    uint16_t *fch16, *dfch16, *dact16;
    /* SK_CUDA_BF16 with the mma.sync attention (attn_tc == 1): q (times the softmax scale), k
     * and v in bf16, per layer with a.qkv's layout, written once after the q/k/v projection
     * and read by the attention forward and backward (cu_attn.q16 ...); a.qkv is then one
     * layer's fp32 scratch. Else NULL. */
    uint16_t *qkv16;
    /* SK_CUDA_BF16: the input gradient (N, C) of the GEMMs that read a norm's output or the
     * attention's, in bf16 as that GEMM writes it (autocast's rounding point), one at a time,
     * each read by the next kernel: the norm's backward, or, with attn_tc == 1, the
     * attention's backward as its dO (cu_attn.dout16). Else NULL. */
    uint16_t *dx16;
    uint16_t *logits16;               /* SK_CUDA_BF16: the logits (N, Vp) in bf16, then their
                                         gradient in their place; a.logits is then NULL */
    float *part;                      /* column-sum partials (2 * R * max(QKV, Ffc, C)) */
    float *Di;                        /* attention backward scratch (B, H, T) */
    int32_t *tok_d, *tok_h;           /* inputs, targets, uniq, off (N+1), pos: 5N + 1 ints */
    int32_t *slot_h;                  /* (Vp) token -> bucket, -1 when unused */
    int32_t *next_h;                  /* (N) bucket cursors */
    float *losses_h;                  /* (N) */
    int n_uniq;
    /* data parallelism (dist_cuda.c) */
    void *nccl;                       /* ncclComm_t, or NULL */
    float *grads_h;                   /* pinned host copy of the gradients (mean without NCCL) */
    /* ZeRO-1 (sk_cuda_shard; zero = 0 until then): this rank owns the buffer range [z_base,
     * z_base + z_n) and the spans [z_s_lo, z_s_lo + z_n_spans); mom and vel hold z_n floats */
    int zero;
    size_t *z_starts;                 /* (world + 1) shard boundaries, host */
    int *z_counts, *z_displs;         /* (world) spans per rank and their first span, host */
    size_t z_base, z_n;
    int z_s_lo, z_n_spans;
    cu_span *z_spans;                 /* this rank's spans, offsets relative to z_base (device) */
    double *span_sq;                  /* (n_spans) squared norm per span, host */
};

/* sk_error(SK_EIO, ...) naming the call, file and line and CUDA's / cuBLAS's message */
int sk_cu_fail(cudaError_t e, const char *what, const char *file, int line);
int sk_cu_blas_fail(cublasStatus_t s, const char *what, const char *file, int line);
/* After a kernel launch: its launch error (and, with SKIPLM_CUDA_SYNC=1, its execution
 * error after a synchronisation) through sk_cu_fail. */
int sk_cu_kcheck(const char *name, const char *file, int line);
/* 1 when SKIPLM_CUDA_SYNC=1 (every launch synchronised: no graph capture then) */
int sk_cu_sync_each(void);
/* 1 while bench --profile records (events on the default stream: no graph capture then) */
int sk_cu_prof_on(void);
/* cudaMalloc into *(void **)p with a message naming what, how much, and the free memory;
 * 0 bytes gives NULL. */
int sk_cu_alloc(void *p, size_t bytes, const char *what);
/* Row-major C (M, N) = alpha op(A) op(B) + beta C on cm's cuBLAS handle (sk_gemm's contract).
 * SK_CUDA_BF16: A and B are multiplied in bf16 (a pointer into the parameters reads their
 * bf16 copy; any other operand is rounded into a scratch buffer first), C stays fp32. */
int sk_cu_gemm(sk_cuda_model *cm, int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc);
/* A linear layer: out (N, OC; row stride ldo) = inp (N, IC) @ w^T + b (b may be NULL). In
 * SK_CUDA_BF16 the input may be given as inp16, already bf16 (inp is then not read). */
int sk_cu_linear(sk_cuda_model *cm, float *out, int ldo, const float *inp, const uint16_t *inp16,
                 const float *w, const float *b, int N, int IC, int OC);
/* SK_CUDA_BF16 only: out16 (N, OC; row stride ldo) = inp @ w^T rounded to bf16 (no bias),
 * inp given as inp16 when it is bf16 (the MLP's pre-activation, training and generation). */
int sk_cu_linear16(sk_cuda_model *cm, uint16_t *out16, int ldo, const float *inp, const uint16_t *inp16,
                   const float *w, int N, int IC, int OC);
/* The MLP's activation of N rows: act = f(h + b), c_fc's bias b (NULL: none) added in place
 * in h first; each of act / h as fp32 or, when act16 / h16 is given, bf16 (cu_gelu_forward). */
int sk_cu_mlp_act_forward(sk_cuda_model *cm, float *act, uint16_t *act16, float *h, uint16_t *h16, const float *b,
                          int N);
/* out (N, OC, contiguous) = res + inp @ w^T + b, res possibly out itself: residual and bias
 * first, the GEMM added onto them (beta = 1). */
int sk_cu_linear_res(sk_cuda_model *cm, float *out, const float *res, const float *inp, const uint16_t *inp16,
                     const float *w, const float *b, int N, int IC, int OC);

/* cudaMallocHost (pinned memory) with the message of sk_cu_alloc. */
int sk_cu_alloc_host(void *p, size_t bytes, const char *what);
/* The trainer backend's grads_mean and shard (dist_cuda.c). */
/* Collective: every rank's device gradients replaced by their mean over the ranks (the same
 * bits on every rank): ncclAllReduce when built with NCCL, else through host memory and
 * MPI. sk_cuda_dist_init must have run. */
int sk_cuda_grads_mean(sk_cuda_model *cm);
/* ZeRO-1 over the ranks (sk_train_backend.shard's contract, called by the trainer with
 * zero = 1): keeps only this rank's shard of AdamW's m and v on the device; from then on
 * sk_cuda_grads_mean is a reduce-scatter, sk_cuda_grad_norm all-gathers the per-span
 * squares, sk_cuda_adamw_step updates this rank's range and all-gathers the parameters,
 * and sk_cuda_upload_adam / sk_cuda_download_adam move the shard. Collective. */
int sk_cuda_shard(sk_cuda_model *cm, const size_t *starts, const int *span_counts, const int *span_displs);
/* ZeRO-1: after this rank's AdamW update, every rank's parameters from their owners
 * (dist_cuda.c). */
int sk_cu_params_allgather(sk_cuda_model *cm);
/* Releases the NCCL communicator and the host gradient buffer (sk_cuda_model_free). */
void sk_cu_dist_free(sk_cuda_model *cm);
/* Refresh the bf16 copy of the parameters (SK_CUDA_BF16; a no-op otherwise). */
int sk_cu_params_changed(sk_cuda_model *cm);

#define CU(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) return sk_cu_fail(e_, #call, __FILE__, __LINE__); } while (0)
#define BLAS(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) return sk_cu_blas_fail(s_, #call, __FILE__, __LINE__); } while (0)
#define TRY(call) do { int rc_ = (call); if (rc_) return rc_; } while (0)
#define KCHECK(name) TRY(sk_cu_kcheck(name, __FILE__, __LINE__))
/* Profiling (prof.c, sk_cuda_profile_start): the region between begin and end is timed with
 * two CUDA events and counted under name (up to its '('); no-ops when off. */
void sk_cu_prof_begin(void);
void sk_cu_prof_end(const char *name);
#define PROF(name, stmt) do { sk_cu_prof_begin(); stmt; sk_cu_prof_end(name); } while (0)
/* a kernel launch (the cu_* call) followed by its check; a profiled region */
#define K(call) do { sk_cu_prof_begin(); call; KCHECK(#call); sk_cu_prof_end(#call); } while (0)
#endif
