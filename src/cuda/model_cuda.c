/* The device model: the decoder-only transformer of src/core/model.c on a CUDA GPU, in fp32.
 *
 * The call sequence of layer_forward / backward_blocks below is src/core/model.c's, line for
 * line, with each op replaced by its kernel (src/cuda/kernels_*.cu, attention.cu) and each
 * GEMM by cuBLAS. The parameter buffer has sk_model's layout (the views come from the same
 * sk_params_views), so weights move with one cudaMemcpy. Skip-Layer routing comes from
 * the host model's plan (m->plan, src/core/route.h: runs, q/k/v columns, lenders) and each
 * attention call's views and dropout seed from src/core/model.c's sk_model_attn_call, as the
 * CPU's: each layer makes one attention call per run of heads with the same K/V source, on strided views of the qkv
 * activations (the lender's own columns for borrowed heads: no copy), and the borrowed
 * heads' dK/dV are added into the lender's gradient buffer (dqkv_lend), which is complete
 * when the backward pass reaches the lender (borrowers sit above it).
 *
 * No activation recomputation here: every layer's activations stay on the GPU (GPT-2 124M
 * needs ~0.6 MB per token plus the (B*T, Vp) logits: 13 GB at T = 16384).
 *
 * Errors: every CUDA and cuBLAS call is checked; a kernel launch is checked right after it
 * (KCHECK), and with SKIPLM_CUDA_SYNC=1 also synchronised, so an asynchronous fault is
 * reported with the name of the kernel that caused it. */
#include "cuda_internal.h"
#include "core/ops.h"
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(cu_span) == sizeof(sk_span), "cu_span must mirror sk_span");
_Static_assert(offsetof(cu_span, n) == offsetof(sk_span, n), "cu_span must mirror sk_span");
_Static_assert(offsetof(cu_span, decay) == offsetof(sk_span, decay), "cu_span must mirror sk_span");

/* ------------------------------------------------------------ the model */


sk_model *sk_cuda_host_model(sk_cuda_model *cm) { return cm->m; }

static void free_acts(sk_cuda_model *cm) {
    cudaFree(cm->acts_mem); cudaFree(cm->tok_d);
    free(cm->tok_h); free(cm->losses_h); free(cm->next_h);
    cm->acts_mem = NULL; cm->tok_d = NULL; cm->tok_h = NULL; cm->losses_h = NULL; cm->next_h = NULL;
    cm->ln1_16 = cm->atty16 = cm->ln2_16 = cm->act16 = cm->lnf16 = cm->logits16 = NULL;
    cm->qkv16 = cm->dx16 = NULL;
    cm->B = cm->T = 0;
}

void sk_cuda_model_free(sk_cuda_model *cm) {
    if (!cm) return;
    free_acts(cm);
    sk_cu_dist_free(cm);
    cudaFree(cm->params); cudaFree(cm->grads); cudaFree(cm->mom); cudaFree(cm->vel);
    cudaFree(cm->params16); cudaFree(cm->op16[0]); cudaFree(cm->op16[1]);
    cudaFree(cm->pos_table); cudaFree(cm->rope); cudaFree(cm->spans); cudaFree(cm->sq_d);
    free(cm->sq_h); free(cm->span_sq); free(cm->slot_h);
    if (cm->blas) cublasDestroy(cm->blas);
    free(cm);
}

/* training = 0: the parameters alone (sk_cuda_model_new_inference) */
static int model_new(sk_cuda_model *cm, sk_model *m, sk_cuda_precision prec, int training) {
    cm->m = m; cm->prec = prec;
    const char *tc = getenv("SKIPLM_CUDA_TC_ATTN");
    if (tc && *tc && strcmp(tc, "0") && strcmp(tc, "1") && strcmp(tc, "wmma"))
        return sk_error(SK_EINVAL, "SKIPLM_CUDA_TC_ATTN='%s': give 0 (the fp32 attention kernels), 1 (tensor "
                        "cores with --bf16, the default) or wmma (the older tensor-core kernels)", tc);
    cm->attn_tc = prec != SK_CUDA_BF16 || (tc && !strcmp(tc, "0")) ? 0 : tc && !strcmp(tc, "wmma") ? 2 : 1;
    const char *w = getenv("SKIPLM_CUDA_MMA_WARPS");
    if (w && *w && strcmp(w, "4") && strcmp(w, "8"))
        return sk_error(SK_EINVAL, "SKIPLM_CUDA_MMA_WARPS='%s': give 4 (tiles of 64 rows, the default) or 8 (128 "
                        "rows) warps per block of the tensor-core attention", w);
    cm->attn_warps = w && !strcmp(w, "8") ? 8 : 4;
    const char *rw = getenv("SKIPLM_CUDA_MMA_ROWS");
    if (rw && *rw && strcmp(rw, "16") && strcmp(rw, "32"))
        return sk_error(SK_EINVAL, "SKIPLM_CUDA_MMA_ROWS='%s': give 16 (rows per warp of the tensor-core attention) "
                        "or 32 (two row tiles per warp sharing each fragment of the walked tile)", rw);
    cm->attn_rows = rw && *rw ? atoi(rw) : SK_CUDA_MMA_ROWS_DEFAULT;
    const char *st = getenv("SKIPLM_CUDA_ATTN_STAGES");
    if (st && *st && strcmp(st, "1") && strcmp(st, "2"))
        return sk_error(SK_EINVAL, "SKIPLM_CUDA_ATTN_STAGES='%s': give 1 (one buffer per K/V tile) or 2 (two: the "
                        "next tile's copy overlaps this one's math, the default where the shared memory allows)", st);
    cm->attn_stages = st && !strcmp(st, "1") ? 1 : 0;
    const char *bw = getenv("SKIPLM_CUDA_ATTN_BWD");
    if (bw && *bw && strcmp(bw, "fused") && strcmp(bw, "split"))
        return sk_error(SK_EINVAL, "SKIPLM_CUDA_ATTN_BWD='%s': give fused (dQ computed by the dK/dV kernel, the "
                        "default) or split (dQ by a kernel of its own, which recomputes S and dP)", bw);
    cm->attn_bwd_split = bw && !strcmp(bw, "split");
    const char *mg = getenv("SKIPLM_CUDA_ATTN_MERGE");
    if (mg && *mg && strcmp(mg, "0") && strcmp(mg, "1"))
        return sk_error(SK_EINVAL, "SKIPLM_CUDA_ATTN_MERGE='%s': give 1 (the attention of an SLA layer's heads, "
                        "own and borrowed, in one launch: the default) or 0 (one launch per K/V source)", mg);
    cm->attn_merge = !(mg && !strcmp(mg, "0"));
    if (m->hs > 128)
        return sk_error(SK_EINVAL, "CUDA: head size %d is above the attention kernel's 128", m->hs);
    BLAS(cublasCreate(&cm->blas));
    if (prec != SK_CUDA_FP32 && prec != SK_CUDA_TF32 && prec != SK_CUDA_BF16)
        return sk_error(SK_EINVAL, "CUDA: unknown precision %d", (int)prec);
    /* bf16: no reduced-precision (bf16) split-K reductions when a GEMM writes bf16 (the logits) */
    BLAS(cublasSetMathMode(cm->blas, prec == SK_CUDA_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                     : prec == SK_CUDA_BF16
                                         ? (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)
                                         : CUBLAS_DEFAULT_MATH));
    static unsigned long long serial;        /* tells device models apart (KV cache graphs) */
    cm->serial = ++serial;
    size_t P = m->n_params * sizeof(float);
    TRY(sk_cu_alloc(&cm->params, P, "the parameters"));
    CU(cudaMemcpy(cm->params, m->params, P, cudaMemcpyHostToDevice));
    if (training) {
        TRY(sk_cu_alloc(&cm->grads, P, "the gradients"));
        TRY(sk_cu_alloc(&cm->mom, P, "AdamW's m"));
        TRY(sk_cu_alloc(&cm->vel, P, "AdamW's v"));
        CU(cudaMemset(cm->grads, 0, P));
        CU(cudaMemset(cm->mom, 0, P));
        CU(cudaMemset(cm->vel, 0, P));
        sk_params_views(m, cm->grads, &cm->g);
    }
    if (prec == SK_CUDA_BF16) {
        TRY(sk_cu_alloc(&cm->params16, m->n_params * sizeof(uint16_t), "the bf16 copy of the parameters"));
        TRY(sk_cu_params_changed(cm));
    }
    sk_params_views(m, cm->params, &cm->p);
    if (m->sinus) {
        size_t b = (size_t)m->cfg.block_size * m->C * sizeof(float);
        TRY(sk_cu_alloc(&cm->pos_table, b, "the sinusoidal position table"));
        CU(cudaMemcpy(cm->pos_table, m->sinus, b, cudaMemcpyHostToDevice));
    }
    if (m->rope) {
        size_t b = (size_t)m->cfg.block_size * m->hs * sizeof(float);
        TRY(sk_cu_alloc(&cm->rope, b, "the RoPE table"));
        CU(cudaMemcpy(cm->rope, m->rope, b, cudaMemcpyHostToDevice));
    }
    sk_span *spans;
    TRY(sk_spans_build(m->tensors, m->n_tensors, &spans, &cm->n_spans));
    size_t max_span = 0;
    for (int i = 0; i < cm->n_spans; i++) max_span = spans[i].n > max_span ? spans[i].n : max_span;
    cm->span_split = cu_span_split(max_span);
    int rc = sk_cu_alloc(&cm->spans, (size_t)cm->n_spans * sizeof(cu_span), "the parameter spans");
    if (!rc && cm->n_spans) {
        cudaError_t e = cudaMemcpy(cm->spans, spans, (size_t)cm->n_spans * sizeof(cu_span), cudaMemcpyHostToDevice);
        if (e != cudaSuccess) rc = sk_cu_fail(e, "cudaMemcpy(spans)", __FILE__, __LINE__);
    }
    free(spans);
    if (rc) return rc;
    size_t n_part = (size_t)(cm->n_spans ? cm->n_spans : 1) * cm->span_split;
    TRY(sk_cu_alloc(&cm->sq_d, n_part * sizeof(double), "the norm partials"));
    cm->sq_h = malloc(n_part * sizeof(double));
    cm->span_sq = malloc((size_t)(cm->n_spans ? cm->n_spans : 1) * sizeof(double));
    cm->slot_h = malloc((size_t)m->Vp * sizeof(int32_t));
    if (!cm->sq_h || !cm->span_sq || !cm->slot_h) return sk_error(SK_ENOMEM, "out of memory");
    for (int i = 0; i < m->Vp; i++) cm->slot_h[i] = -1;
    return SK_OK;
}

static int model_create(sk_cuda_model **out, sk_model *m, sk_cuda_precision prec, int training) {
    *out = NULL;
    sk_cuda_model *cm = calloc(1, sizeof *cm);
    if (!cm) return sk_error(SK_ENOMEM, "out of memory");
    int rc = model_new(cm, m, prec, training);
    if (rc) { sk_cuda_model_free(cm); return rc; }
    *out = cm;
    return SK_OK;
}
int sk_cuda_model_new(sk_cuda_model **out, sk_model *m, sk_cuda_precision prec) {
    return model_create(out, m, prec, 1);
}
int sk_cuda_model_new_inference(sk_cuda_model **out, sk_model *m, sk_cuda_precision prec) {
    return model_create(out, m, prec, 0);
}

/* the calls that need the gradients or AdamW's state refuse an inference-only model */
#define NEED_TRAINING(cm) do { if (!(cm)->grads) return sk_error(SK_EINVAL, "CUDA: %s: this device model " \
    "holds no gradients or AdamW state (it was made by sk_cuda_model_new_inference)", __func__); } while (0)

const char *sk_cuda_precision_name(sk_cuda_precision p) {
    return p == SK_CUDA_TF32 ? "fp32 with TF32 GEMMs"
         : p == SK_CUDA_BF16 ? "bf16 mixed precision (bf16 GEMMs, fp32 master weights)" : "fp32";
}

int sk_cu_params_changed(sk_cuda_model *cm) {
    if (cm->params16) K(cu_to_bf16(cm->params16, cm->params, cm->m->n_params, 1, 1));
    return SK_OK;
}

int sk_cuda_upload_params(sk_cuda_model *cm, const float *params) {
    CU(cudaMemcpy(cm->params, params, cm->m->n_params * sizeof(float), cudaMemcpyHostToDevice));
    return sk_cu_params_changed(cm);
}
int sk_cuda_download_params(sk_cuda_model *cm, float *params) {
    CU(cudaMemcpy(params, cm->params, cm->m->n_params * sizeof(float), cudaMemcpyDeviceToHost));
    return SK_OK;
}
int sk_cuda_download_grads(sk_cuda_model *cm, float *grads) {
    NEED_TRAINING(cm);
    CU(cudaMemcpy(grads, cm->grads, cm->m->n_params * sizeof(float), cudaMemcpyDeviceToHost));
    return SK_OK;
}
int sk_cuda_upload_adam(sk_cuda_model *cm, const float *mo, const float *ve) {
    NEED_TRAINING(cm);
    size_t b = (cm->zero ? cm->z_n : cm->m->n_params) * sizeof(float);
    if (mo) CU(cudaMemcpy(cm->mom, mo, b, cudaMemcpyHostToDevice));
    if (ve) CU(cudaMemcpy(cm->vel, ve, b, cudaMemcpyHostToDevice));
    return SK_OK;
}
int sk_cuda_download_adam(sk_cuda_model *cm, float *mo, float *ve) {
    NEED_TRAINING(cm);
    size_t b = (cm->zero ? cm->z_n : cm->m->n_params) * sizeof(float);
    if (mo) CU(cudaMemcpy(mo, cm->mom, b, cudaMemcpyDeviceToHost));
    if (ve) CU(cudaMemcpy(ve, cm->vel, b, cudaMemcpyDeviceToHost));
    return SK_OK;
}
int sk_cuda_zero_grad(sk_cuda_model *cm) {
    NEED_TRAINING(cm);
    CU(cudaMemset(cm->grads, 0, cm->m->n_params * sizeof(float)));
    return SK_OK;
}

/* ----------------------------------------------------------- activations */

static int imax(int a, int b) { return a > b ? a : b; }

/* Lays out (or counts, base == NULL) the activations of (B, T): sk_acts with every layer
 * kept (L copies), full logits (N, Vp), the backward scratch, then part and Di. */
static size_t acts_layout(const sk_cuda_model *cm, int B, int T, float *base, sk_acts *a, float **part, float **Di,
                          uint16_t **a16) {
    const sk_model *m = cm->m;
    size_t BT = (size_t)B * T, C = m->C, F = m->F, L = m->L;
    size_t Ffc = m->gated ? 2 * F : F;
    int gpt = m->cfg.family == SK_GPT2;
    size_t R = (size_t)cu_colsum_chunks((int)BT);
    /* in bf16, the GEMM-only activations are bf16 (half a float each), the fp32 ones absent */
    const size_t f32 = cm->prec == SK_CUDA_BF16 ? 0 : 1, h16 = 1 - f32;
    /* with the mma.sync attention, q/k/v are kept in bf16 (qkv16) and the fp32 qkv is one
     * layer's scratch */
    const size_t q16 = h16 && cm->attn_tc == 1;
    float *h[11];
    size_t sizes[48]; float **ptrs[48]; int n = 0;
#define A(ptr, size) do { ptrs[n] = &(ptr); sizes[n++] = (size); } while (0)
    A(a->encoded, BT * C);
    A(h[0], h16 * (L * BT * C + 1) / 2); A(h[1], h16 * (L * BT * C + 1) / 2); A(h[2], h16 * (L * BT * C + 1) / 2);
    A(h[3], h16 * (L * BT * F + 1) / 2); A(h[4], h16 * (BT * C + 1) / 2);
    A(h[5], h16 * (BT * m->Vp + 1) / 2);          /* the logits, then their gradient in place */
    A(h[6], q16 * (L * BT * m->QKV + 1) / 2); A(h[7], h16 * (BT * C + 1) / 2);   /* qkv16, dx16 */
    /* the MLP's pre-activation (per layer) and, in the backward, its gradient and the
     * activation's (one layer's scratch) */
    A(h[8], h16 * (L * BT * Ffc + 1) / 2); A(h[9], h16 * (BT * Ffc + 1) / 2); A(h[10], h16 * (BT * F + 1) / 2);
    A(a->ln1, f32 * L * BT * C); A(a->ln1_mean, gpt ? L * BT : 0); A(a->ln1_rstd, L * BT);
    A(a->qkv, (q16 ? 1 : L) * BT * m->QKV);
    A(a->atty, f32 * L * BT * C);
    A(a->lse, L * BT * m->H);
    A(a->res2, L * BT * C);
    A(a->ln2, f32 * L * BT * C); A(a->ln2_mean, gpt ? L * BT : 0); A(a->ln2_rstd, L * BT);
    A(a->fch, f32 * L * BT * Ffc);
    A(a->fch_act, f32 * L * BT * F);
    A(a->res3, L * BT * C);
    A(a->lnf, f32 * BT * C); A(a->lnf_mean, gpt ? BT : 0); A(a->lnf_rstd, BT);
    A(a->logits, f32 * BT * m->Vp);
    A(a->losses, BT);
    /* dbtc2: the attention's dO and c_fc's input gradient, both in dx16 with q16 */
    A(a->dres, BT * C); A(a->dbtc, BT * C); A(a->dbtc2, (1 - q16) * BT * C);
    A(a->dfch, f32 * BT * Ffc); A(a->dfch_act, f32 * BT * F);
    A(a->dqkv_lend, (size_t)sk_model_n_lenders(m) * BT * m->QKV);
    A(a->dqkv_own, BT * m->QKV);
    A(*part, 2 * R * (size_t)imax(imax(m->QKV, (int)Ffc), m->C));
    A(*Di, cu_attn_scratch(B, m->H, T));
#undef A
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (base) *ptrs[i] = sizes[i] ? base + total : NULL;
        total += (sizes[i] + 63) / 64 * 64;    /* 256-byte aligned views */
    }
    for (int i = 0; i < 11; i++) a16[i] = base ? (uint16_t *)h[i] : NULL;
    return total;
}

int sk_cuda_reserve(sk_cuda_model *cm, int B, int T) {
    const sk_model *m = cm->m;
    if (B < 1 || T < 1) return sk_error(SK_EINVAL, "batch size B=%d and sequence length T=%d must be >= 1", B, T);
    if (T > m->cfg.block_size) return sk_error(SK_EINVAL, "sequence length T=%d exceeds block_size=%d", T, m->cfg.block_size);
    if ((long long)B * T > (1LL << 30)) return sk_error(SK_EINVAL, "B x T = %lld tokens is too many", (long long)B * T);
    if (B > 65535) return sk_error(SK_EINVAL, "batch size B=%d is above 65535 (the attention's grid z)", B);
    if (cm->acts_mem && cm->B == B && cm->T == T) return SK_OK;
    free_acts(cm);
    sk_acts a;
    float *part, *Di;
    uint16_t *a16[11];
    size_t floats = acts_layout(cm, B, T, NULL, &a, &part, &Di, a16);
    char what[160];
    snprintf(what, sizeof what, "the activations for B=%d x T=%d", B, T);
    TRY(sk_cu_alloc(&cm->acts_mem, floats * sizeof(float), what));
    acts_layout(cm, B, T, cm->acts_mem, &cm->a, &cm->part, &cm->Di, a16);
    cm->ln1_16 = a16[0]; cm->atty16 = a16[1]; cm->ln2_16 = a16[2]; cm->act16 = a16[3]; cm->lnf16 = a16[4];
    cm->logits16 = a16[5]; cm->qkv16 = a16[6]; cm->dx16 = a16[7];
    cm->fch16 = a16[8]; cm->dfch16 = a16[9]; cm->dact16 = a16[10];
    size_t N = (size_t)B * T;
    TRY(sk_cu_alloc(&cm->tok_d, (5 * N + 1) * sizeof(int32_t), "the token buffers"));
    cm->tok_h = malloc((5 * N + 1) * sizeof(int32_t));
    cm->losses_h = malloc(N * sizeof(float));
    cm->next_h = malloc(N * sizeof(int32_t));
    if (!cm->tok_h || !cm->losses_h || !cm->next_h) { free_acts(cm); return sk_error(SK_ENOMEM, "out of memory"); }
    cm->B = B; cm->T = T;
    return SK_OK;
}

/* ------------------------------------------------------------------ GEMM */

/* bf16 scratch slot 0 or 1 of at least n elements, grown on demand */
static int op16_reserve(sk_cuda_model *cm, int slot, size_t n) {
    if (n <= cm->op16_n[slot]) return SK_OK;
    cudaFree(cm->op16[slot]);
    cm->op16[slot] = NULL; cm->op16_n[slot] = 0;
    TRY(sk_cu_alloc(&cm->op16[slot], n * sizeof(uint16_t), "a bf16 GEMM operand"));
    cm->op16_n[slot] = n;
    return SK_OK;
}
/* The bf16 form of a row-major operand X (rows, cols, ld) for slot 0 or 1: inside the
 * parameters, their bf16 copy at the same offset (same ld); anything else rounded into the
 * slot's scratch buffer (packed: ld = cols), grown on demand. */
static int bf16_operand(sk_cuda_model *cm, int slot, const float *X, int rows, int cols, int ld,
                        const uint16_t **out, int *ld16) {
    const uintptr_t x = (uintptr_t)X, p0 = (uintptr_t)cm->params;
    if (x >= p0 && x < p0 + cm->m->n_params * sizeof(float)) {
        *out = cm->params16 + (x - p0) / sizeof(float);
        *ld16 = ld;
        return SK_OK;
    }
    TRY(op16_reserve(cm, slot, (size_t)rows * cols));
    K(cu_to_bf16(cm->op16[slot], X, (size_t)rows, cols, (size_t)ld));
    *out = cm->op16[slot];
    *ld16 = cols;
    return SK_OK;
}

/* Row-major C (M, N) = alpha op(A) op(B) + beta C, the contract of sk_gemm (src/core/ops.h).
 * cuBLAS is column-major: a row-major X (r x c, ld) is the column-major X^T with the same
 * ld, so we ask for C^T (N x M) = op(B)^T op(A)^T, i.e. swap the operands and the sizes. */
/* A16 (with lda16) and B16 (ldb16), when given, are A and B already in bf16 (SK_CUDA_BF16
 * only; A or B is then not read): a backward pass rounds dY once for the two GEMMs that read
 * it, the classifier's dY comes out of the cross-entropy kernel in bf16, and the norms and
 * the MLP activation write their outputs in bf16. C16, when given (SK_CUDA_BF16, beta = 0,
 * K > 0), receives C rounded to bf16 instead of C (the MLP's pre-activation and, in the
 * backward, the activation's gradient: only read by elementwise kernels that widen them). */
static int gemm(sk_cuda_model *cm, int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda,
                const uint16_t *A16, int lda16, const float *B, int ldb, const uint16_t *B16, int ldb16,
                float beta, float *C, uint16_t *C16, int ldc) {
    if (cm->prec != SK_CUDA_BF16 || K <= 0) {
        BLAS(cublasSgemm(cm->blas, tB ? CUBLAS_OP_T : CUBLAS_OP_N, tA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                         &alpha, B, ldb, A, lda, &beta, C, ldc));
        return SK_OK;
    }
    if (!A16) TRY(bf16_operand(cm, 0, A, tA ? K : M, tA ? M : K, lda, &A16, &lda16));
    if (!B16) TRY(bf16_operand(cm, 1, B, tB ? N : K, tB ? K : N, ldb, &B16, &ldb16));
    BLAS(cublasGemmEx(cm->blas, tB ? CUBLAS_OP_T : CUBLAS_OP_N, tA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha,
                      B16, CUDA_R_16BF, ldb16, A16, CUDA_R_16BF, lda16, &beta, C16 ? (void *)C16 : (void *)C,
                      C16 ? CUDA_R_16BF : CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return SK_OK;
}
/* the profile's names: the three GEMMs of a linear layer (and of the classifier) */
static const char *gemm_name(int tA, int tB) {
    return !tA && tB ? "GEMM forward, X W^T" : !tA ? "GEMM input gradient, dY W" : "GEMM weight gradient, dY^T X";
}
int sk_cu_gemm(sk_cuda_model *cm, int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return SK_OK;
    int rc;
    PROF(gemm_name(tA, tB), rc = gemm(cm, tA, tB, M, N, K, alpha, A, lda, NULL, 0, B, ldb, NULL, 0, beta, C, NULL, ldc));
    return rc;
}

/* The backward pass of a linear layer y = x W^T over cw output columns: dx (N, IC,
 * overwritten or, with accumulate, added to; may be NULL) = dY W, dW += dY^T x. dY (ld ldy)
 * is read by both GEMMs; in bf16 it is rounded once for the two (unless dy16 is given), and
 * x may be given as x16, already bf16 (x is then not read). In bf16, dx16 (given instead of
 * dx, no accumulate) receives dx rounded to bf16. */
static int linear_grads(sk_cuda_model *cm, float *dx, uint16_t *dx16, int accumulate, float *dw, const float *dy,
                        int ldy, const uint16_t *dy16, int ldy16, const float *x, const uint16_t *x16, const float *w,
                        int N, int IC, int cw) {
    if (N <= 0 || cw <= 0) return SK_OK;
    if (cm->prec == SK_CUDA_BF16 && !dy16) TRY(bf16_operand(cm, 0, dy, N, cw, ldy, &dy16, &ldy16));
    int rc;
    if (dx || dx16) {
        PROF(gemm_name(0, 0), rc = gemm(cm, 0, 0, N, IC, cw, 1.0f, dy, ldy, dy16, ldy16, w, IC, NULL, 0,
                                        accumulate ? 1.0f : 0.0f, dx, dx16, IC));
        TRY(rc);
    }
    PROF(gemm_name(1, 0),
         rc = gemm(cm, 1, 0, cw, IC, N, 1.0f, dy, ldy, dy16, ldy16, x, IC, x16, IC, 1.0f, dw, NULL, IC));
    return rc;
}

int sk_cu_linear(sk_cuda_model *cm, float *out, int ldo, const float *inp, const uint16_t *inp16,
                 const float *w, const float *b, int N, int IC, int OC) {
    if (N <= 0 || OC <= 0) return SK_OK;
    if (b) K(cu_bias_broadcast(out, b, N, OC, ldo));
    int rc;
    PROF(gemm_name(0, 1), rc = gemm(cm, 0, 1, N, OC, IC, 1.0f, inp, IC, inp16, IC, w, IC, NULL, 0,
                                    b ? 1.0f : 0.0f, out, NULL, ldo));
    return rc;
}
int sk_cu_linear16(sk_cuda_model *cm, uint16_t *out16, int ldo, const float *inp, const uint16_t *inp16,
                   const float *w, int N, int IC, int OC) {
    if (N <= 0 || OC <= 0) return SK_OK;
    if (cm->prec != SK_CUDA_BF16 || IC <= 0)
        return sk_error(SK_EINVAL, "internal: a bf16 GEMM output needs the bf16 precision and IC >= 1");
    int rc;
    PROF(gemm_name(0, 1), rc = gemm(cm, 0, 1, N, OC, IC, 1.0f, inp, IC, inp16, IC, w, IC, NULL, 0, 0.0f, NULL, out16,
                                    ldo));
    return rc;
}
/* out (N, OC, contiguous) = res + inp @ w^T + b (out may be res): the residual and the bias
 * are written first (nothing to write when out is res and there is no bias) and the GEMM adds
 * onto them, one pass over out fewer than a projection followed by a residual add. */
int sk_cu_linear_res(sk_cuda_model *cm, float *out, const float *res, const float *inp, const uint16_t *inp16,
                     const float *w, const float *b, int N, int IC, int OC) {
    if (N <= 0 || OC <= 0) return SK_OK;
    if (out != res || b) K(cu_bias_residual(out, res, b, N, OC));
    int rc;
    PROF(gemm_name(0, 1), rc = gemm(cm, 0, 1, N, OC, IC, 1.0f, inp, IC, inp16, IC, w, IC, NULL, 0, 1.0f, out, NULL, OC));
    return rc;
}
/* A bias's gradient, db (cw) += colsum(dy) over N rows (dy's ld ldy, or *dy16's *ldy16 when
 * given). In bf16, when dy has no bf16 form yet (*dy16 NULL), the same pass rounds it into
 * slot 0's scratch, as bf16_operand would, and returns it in *dy16 / *ldy16 for the two
 * GEMMs that follow: one read of dy for the three. Nothing without db. */
static int bias_grad(sk_cuda_model *cm, float *db, const float *dy, int ldy, const uint16_t **dy16, int *ldy16, int N,
                     int cw) {
    if (!db || N <= 0 || cw <= 0) return SK_OK;
    uint16_t *copy = NULL;
    if (cm->prec == SK_CUDA_BF16 && !*dy16) {
        TRY(op16_reserve(cm, 0, (size_t)N * cw));
        copy = cm->op16[0];
    }
    K(cu_colsum_add(db, *dy16 ? NULL : dy, *dy16, copy, N, cw, *dy16 ? *ldy16 : ldy, cm->part));
    if (copy) { *dy16 = copy; *ldy16 = cw; }
    return SK_OK;
}
/* dinp = dout @ w (overwritten, may be NULL; in bf16 dinp16 instead, rounded); dw += dout^T
 * @ inp; db += colsum(dout). In bf16 dout may be given as dout16 (dout is then not read). */
static int linear_backward(sk_cuda_model *cm, float *dinp, uint16_t *dinp16, float *dw, float *db, const float *dout,
                           const uint16_t *dout16, const float *inp, const uint16_t *inp16, const float *w, int N,
                           int IC, int OC) {
    int ld16 = OC;
    TRY(bias_grad(cm, db, dout, OC, &dout16, &ld16, N, OC));
    return linear_grads(cm, dinp, dinp16, 0, dw, dout, OC, dout16, ld16, inp, inp16, w, N, IC, OC);
}

/* --------------------------------------------------------------- forward */

/* layer l's q/k/v in fp32 (with qkv16: the one layer's scratch, whose layout the copies share) */
static float *qkv_of(const sk_cuda_model *cm, int l) {
    return cm->a.qkv + (cm->qkv16 ? 0 : (size_t)l * cm->B * cm->T * cm->m->QKV);
}
static uint16_t *qkv16_of(const sk_cuda_model *cm, int l) {
    return cm->qkv16 + (size_t)l * cm->B * cm->T * cm->m->QKV;
}
static float *dqkv_of(const sk_cuda_model *cm, int l) {
    int k = cm->m->plan->lend_index[l];
    size_t BT = (size_t)cm->B * cm->T;
    return k >= 0 ? cm->a.dqkv_lend + (size_t)k * BT * cm->m->QKV : cm->a.dqkv_own;
}
static void layer_acts(const sk_cuda_model *cm, int l, sk_layer_acts *la) {
    const sk_model *m = cm->m;
    const sk_acts *a = &cm->a;
    size_t BT = (size_t)cm->B * cm->T, C = m->C, F = m->F, Ffc = m->gated ? 2 * F : F, w = (size_t)l;
    la->ln1 = a->ln1 ? a->ln1 + w * BT * C : NULL;              /* NULL in bf16: ln1_16 */
    la->ln1_mean = a->ln1_mean ? a->ln1_mean + w * BT : NULL;
    la->ln1_rstd = a->ln1_rstd + w * BT;
    la->qkv = qkv_of(cm, l);
    la->atty = a->atty ? a->atty + w * BT * C : NULL;
    la->lse = a->lse + w * BT * m->H;
    la->res2 = a->res2 + w * BT * C;
    la->ln2 = a->ln2 ? a->ln2 + w * BT * C : NULL;
    la->ln2_mean = a->ln2_mean ? a->ln2_mean + w * BT : NULL;
    la->ln2_rstd = a->ln2_rstd + w * BT;
    la->fch = a->fch ? a->fch + w * BT * Ffc : NULL;          /* NULL in bf16: fch16 */
    la->fch_act = a->fch_act ? a->fch_act + w * BT * F : NULL;
    la->res3 = a->res3 + w * BT * C;
}

/* layer l's rows of a bf16 activation (width columns per token), or NULL outside bf16 */
static uint16_t *at16(const sk_cuda_model *cm, uint16_t *base, int l, size_t width) {
    return base ? base + (size_t)l * cm->B * cm->T * width : NULL;
}

/* The attention call `part` of layer l: sk_model_attn_call's views (the CPU's, src/core/model.c)
 * and seed, with the device's own kernel settings. */
static void attn_desc(const sk_cuda_model *cm, cu_attn *a, int l, int part, int B, int T, float dropout,
                      uint64_t seed, int training, const sk_layer_acts *la) {
    const sk_model *m = cm->m;
    sk_attn_call c;
    sk_model_attn_call(m, l, part, B, T, seed, &c);
    const float *qkv_kv = c.src == l ? la->qkv : qkv_of(cm, c.src);
    const long hs = m->hs;
    memset(a, 0, sizeof *a);
    a->B = B; a->H = c.nh; a->Hkv = c.nkv; a->Lq = T; a->Lk = T; a->D = m->hs;
    a->q = la->qkv + c.q;    a->q_sb = c.qkv_sb; a->q_sh = hs; a->q_st = c.qkv_st;
    a->k = qkv_kv + c.k;     a->k_sb = c.qkv_sb; a->k_sh = hs; a->k_st = c.qkv_st;
    a->v = qkv_kv + c.v;     a->v_sb = c.qkv_sb; a->v_sh = hs; a->v_st = c.qkv_st;
    uint16_t *o16 = at16(cm, cm->atty16, l, m->C);                 /* bf16: only the bf16 output */
    a->out = la->atty ? la->atty + c.out : NULL;  a->o_sb = c.out_sb; a->o_sh = hs; a->o_st = c.out_st;
    a->out16 = o16 ? o16 + c.out : NULL;
    a->scale = 1.0f / sqrtf((float)m->hs);
    a->causal = 1; a->causal_offset = 0;
    a->dropout = training && dropout > 0.0f;
    a->thr = (uint64_t)((double)dropout * 4294967296.0);
    a->inv_keep = a->dropout ? 1.0f / (1.0f - dropout) : 1.0f;
    a->seed = c.seed;
    a->lse = la->lse + c.lse;
    a->tc = cm->attn_tc;
    a->mma_warps = cm->attn_warps;
    a->mma_rows = cm->attn_rows;
    a->stages = cm->attn_stages;
    a->bwd_split = cm->attn_bwd_split;
    if (cm->qkv16) {                  /* the bf16 copies, at the fp32 views' offsets */
        a->q16 = qkv16_of(cm, l) + c.q;
        a->k16 = qkv16_of(cm, c.src) + c.k;
        a->v16 = qkv16_of(cm, c.src) + c.v;
        a->dout16 = cm->dx16 + c.out;
    }
}

/* The calls of layer l's attention: 1 when its runs (own heads, borrowed heads) go in one
 * launch (cu_attn.nruns), else one per run. */
static int attn_calls(const sk_cuda_model *cm, int l) {
    const int n = cm->m->plan->n_runs[l];
    return n > 1 && n <= CU_ATTN_RUNS && cm->attn_merge && cm->attn_tc != 2 ? 1 : n;
}

/* The attention of layer l's heads, all runs in one launch: run 0's descriptor widened to
 * every head (q, out, lse, dO from head 0), each run's K/V source and dropout seed in
 * a->run[] (and with dqkv, the gradient buffer of layer l, each run's dK/dV destination in
 * its source layer's gradient buffer). */
static void attn_desc_merged(const sk_cuda_model *cm, cu_attn *a, int l, int B, int T, float dropout, uint64_t seed,
                             int training, const sk_layer_acts *la, int backward) {
    const sk_model *m = cm->m;
    attn_desc(cm, a, l, 0, B, T, dropout, seed, training, la);
    const int hs = m->hs, group = m->H / m->Hkv;
    const long kcol = (long)m->H * hs, vcol = kcol + (long)m->Hkv * hs;
    a->H = m->H; a->Hkv = m->Hkv;
    a->q = la->qkv;
    a->out = la->atty;
    a->out16 = at16(cm, cm->atty16, l, m->C);
    a->lse = la->lse;
    if (cm->qkv16) { a->q16 = qkv16_of(cm, l); a->dout16 = cm->dx16; }
    a->nruns = m->plan->n_runs[l];
    for (int part = 0; part < a->nruns; part++) {
        sk_attn_call c;
        sk_model_attn_call(m, l, part, B, T, seed, &c);
        const float *src = c.src == l ? la->qkv : qkv_of(cm, c.src);
        cu_attn_run *u = &a->run[part];
        u->hk0 = c.h0 / group;
        u->k = src + kcol;
        u->v = src + vcol;
        if (cm->qkv16) { u->k16 = qkv16_of(cm, c.src) + kcol; u->v16 = qkv16_of(cm, c.src) + vcol; }
        if (backward) { u->dk = dqkv_of(cm, c.src) + kcol; u->dv = dqkv_of(cm, c.src) + vcol; }
        u->seed = c.seed;
    }
}

static int attn_rc(int rc, const char *what, int l, int part) {
    if (rc == -1) return sk_error(SK_EINVAL, "CUDA attention: head size above 128 (layer %d)", l);
    if (rc) return sk_error(SK_EIO, "CUDA attention %s, layer %d call %d: %s", what, l, part,
                            cudaGetErrorString((cudaError_t)rc));
    return sk_cu_kcheck(what, __FILE__, __LINE__);
}

static int norm_forward(sk_cuda_model *cm, float *out, uint16_t *out16, float *mean, float *rstd, const float *inp,
                        const float *w, const float *b, int N) {
    const sk_model *m = cm->m;
    if (m->cfg.family == SK_GPT2) K(cu_layernorm_forward(out, out16, mean, rstd, inp, w, b, N, m->C, m->cfg.norm_eps));
    else K(cu_rmsnorm_forward(out, out16, rstd, inp, w, N, m->C, m->cfg.norm_eps));
    return SK_OK;
}
/* dout16 (bf16) given: dout is not read; else, in bf16, dout (fp32) is a sum of GEMM outputs
 * that stands for one bf16 GEMM output and is rounded as it is read */
static int norm_backward(sk_cuda_model *cm, float *dinp, float *dw, float *db, const float *dout,
                         const uint16_t *dout16, const float *inp, const float *w, const float *mean,
                         const float *rstd, int N) {
    const sk_model *m = cm->m;
    const int rnd = cm->prec == SK_CUDA_BF16;
    if (m->cfg.family == SK_GPT2)
        K(cu_layernorm_backward(dinp, dw, db, dout, dout16, rnd, inp, w, mean, rstd, N, m->C, cm->part));
    else K(cu_rmsnorm_backward(dinp, dw, dout, dout16, rnd, inp, w, rstd, N, m->C, cm->part));
    return SK_OK;
}
/* act = f(h + b): c_fc's bias b (GPT-2; NULL for none) is added by the activation kernel,
 * which writes h + b back to h for the backward. In bf16, h16, act16, dh16 and dact16
 * instead of their fp32 forms (cu_gelu_forward). */
int sk_cu_mlp_act_forward(sk_cuda_model *cm, float *act, uint16_t *act16, float *h, uint16_t *h16, const float *b,
                          int N) {
    const sk_model *m = cm->m;
    size_t n = (size_t)N * m->F;
    if (m->cfg.relu) K(cu_relu_forward(act, act16, h, h16, b, m->F, n));
    else if (m->gated) K(cu_swiglu_forward(act, act16, h, h16, N, m->F));   /* llama: no biases */
    else K(cu_gelu_forward(act, act16, h, h16, b, m->F, n, m->cfg.gelu == SK_GELU_TANH));
    return SK_OK;
}
static int mlp_act_backward(sk_cuda_model *cm, float *dh, uint16_t *dh16, const float *h, const uint16_t *h16,
                            const float *dact, const uint16_t *dact16, int N) {
    const sk_model *m = cm->m;
    size_t n = (size_t)N * m->F;
    if (m->cfg.relu) K(cu_relu_backward(dh, dh16, h, h16, dact, dact16, n));
    else if (m->gated) K(cu_swiglu_backward(dh, dh16, h, h16, dact, dact16, N, m->F));
    else K(cu_gelu_backward(dh, dh16, h, h16, dact, dact16, n, m->cfg.gelu == SK_GELU_TANH));
    return SK_OK;
}

/* qkv (N, QKV) = ln1 @ Wqkv^T + b over the column ranges some layer reads (model.c); without
 * the bias when the model keeps q/k/v in bf16 (cu_qkv_bf16 adds it). */
static int qkv_forward(sk_cuda_model *cm, int l, float *qkv, const float *ln1, const uint16_t *ln1_16, int N) {
    const sk_model *m = cm->m;
    const float *w = cm->p.qkvw + (size_t)l * m->QKV * m->C;
    const float *b = cm->p.qkvb && !cm->qkv16 ? cm->p.qkvb + (size_t)l * m->QKV : NULL;
    int n, C = m->C, QKV = m->QKV;
    const int *r = sk_route_cols(m->plan, l, &n);
    for (int i = 0; i < n; i++) {
        int c0 = r[2 * i], cw = r[2 * i + 1];
        TRY(sk_cu_linear(cm, qkv + c0, QKV, ln1, ln1_16, w + (size_t)c0 * C, b ? b + c0 : NULL, N, C, cw));
    }
    return SK_OK;
}
/* dln1 = dqkv @ W over the computed column ranges. In bf16 *dln1_16, when one GEMM computes
 * it (one range), receives it rounded; with several ranges it is their fp32 sum in dln1 and
 * *dln1_16 is set to NULL (norm_backward rounds the sum as it reads it). */
static int qkv_backward(sk_cuda_model *cm, int l, float *dln1, uint16_t **dln1_16, const float *dqkv,
                        const float *ln1, const uint16_t *ln1_16, int N) {
    const sk_model *m = cm->m;
    size_t off = (size_t)l * m->QKV * m->C;
    const float *w = cm->p.qkvw + off;
    float *dw = cm->g.qkvw + off, *db = cm->g.qkvb ? cm->g.qkvb + (size_t)l * m->QKV : NULL;
    int n, C = m->C, QKV = m->QKV;
    const int *r = sk_route_cols(m->plan, l, &n);
    if (n != 1) *dln1_16 = NULL;
    for (int i = 0; i < n; i++) {
        int c0 = r[2 * i], cw = r[2 * i + 1];
        const uint16_t *dy16 = NULL;
        int ld16 = 0;
        TRY(bias_grad(cm, db ? db + c0 : NULL, dqkv + c0, QKV, &dy16, &ld16, N, cw));
        TRY(linear_grads(cm, *dln1_16 ? NULL : dln1, *dln1_16, i > 0, dw + (size_t)c0 * C, dqkv + c0, QKV, dy16, ld16,
                         ln1, ln1_16, w + (size_t)c0 * C, N, C, cw));
    }
    return SK_OK;
}

/* out = res + dropout(inp @ w^T + b), a residual branch's projection (N rows of C): without
 * dropout the GEMM adds onto res + b (sk_cu_linear_res) */
static int proj_residual(sk_cuda_model *cm, float *out, const float *res, const float *inp, const uint16_t *inp16,
                         const float *w, const float *b, int N, int IC, float drop, uint64_t seed, uint64_t stream) {
    const int C = cm->m->C;
    if (drop <= 0.0f) return sk_cu_linear_res(cm, out, res, inp, inp16, w, b, N, IC, C);
    TRY(sk_cu_linear(cm, out, C, inp, inp16, w, b, N, IC, C));
    K(cu_dropout(out, (size_t)N * C, drop, seed, stream));
    K(cu_add_inplace(out, res, (size_t)N * C));
    return SK_OK;
}

static int layer_forward(sk_cuda_model *cm, int l, const float *x, const sk_layer_acts *la, int B, int T,
                         int training, uint64_t seed) {
    const sk_model *m = cm->m;
    const sk_params *p = &cm->p;
    int C = m->C, F = m->F, N = B * T;
    int Ffc = m->gated ? 2 * F : F;
    float drop = training ? m->cfg.dropout : 0.0f;
    uint16_t *ln1_16 = at16(cm, cm->ln1_16, l, C), *ln2_16 = at16(cm, cm->ln2_16, l, C), *act16 = at16(cm, cm->act16, l, F);
    uint16_t *fch16 = at16(cm, cm->fch16, l, Ffc);
    TRY(norm_forward(cm, la->ln1, ln1_16, la->ln1_mean, la->ln1_rstd, x, p->ln1w + (size_t)l * C,
                     p->ln1b ? p->ln1b + (size_t)l * C : NULL, N));
    TRY(qkv_forward(cm, l, la->qkv, la->ln1, ln1_16, N));
    if (cm->qkv16) {                  /* bias, RoPE and the bf16 copy in one pass, over the columns computed */
        int nc;
        const int *r = sk_route_cols(m->plan, l, &nc);
        const float *qb = p->qkvb ? p->qkvb + (size_t)l * m->QKV : NULL;
        for (int i = 0; i < nc; i++)
            K(cu_qkv_bf16(qkv16_of(cm, l), la->qkv, qb, cm->rope, N, T, m->QKV, r[2 * i], r[2 * i] + r[2 * i + 1],
                          m->hs, (m->H + m->Hkv) * m->hs, m->H * m->hs, 1.0f / sqrtf((float)m->hs)));
    } else if (cm->rope) K(cu_rope(la->qkv, cm->rope, B, T, m->QKV, 0, m->H + m->Hkv, m->hs, 0, 0));
    for (int part = 0, calls = attn_calls(cm, l); part < calls; part++) {
        cu_attn d;
        if (calls == 1 && m->plan->n_runs[l] > 1) attn_desc_merged(cm, &d, l, B, T, drop, seed, training, la, 0);
        else attn_desc(cm, &d, l, part, B, T, drop, seed, training, la);
        PROF(d.tc ? "attention forward, tensor cores" : "attention forward",
             TRY(attn_rc(cu_attn_forward(&d), "forward", l, part)));
    }
    TRY(proj_residual(cm, la->res2, x, la->atty, at16(cm, cm->atty16, l, C), p->attprojw + (size_t)l * C * C,
                      p->attprojb ? p->attprojb + (size_t)l * C : NULL, N, C, drop, seed, sk_drop_stream(l, SK_DROP_ATTN_OUT)));
    TRY(norm_forward(cm, la->ln2, ln2_16, la->ln2_mean, la->ln2_rstd, la->res2, p->ln2w + (size_t)l * C,
                     p->ln2b ? p->ln2b + (size_t)l * C : NULL, N));
    if (fch16) TRY(sk_cu_linear16(cm, fch16, Ffc, la->ln2, ln2_16, p->fcw + (size_t)l * Ffc * C, N, C, Ffc));
    else TRY(sk_cu_linear(cm, la->fch, Ffc, la->ln2, ln2_16, p->fcw + (size_t)l * Ffc * C, NULL, N, C, Ffc));
    TRY(sk_cu_mlp_act_forward(cm, la->fch_act, act16, la->fch, fch16, p->fcb ? p->fcb + (size_t)l * F : NULL, N));
    return proj_residual(cm, la->res3, la->res2, la->fch_act, act16, p->fcprojw + (size_t)l * C * F,
                         p->fcprojb ? p->fcprojb + (size_t)l * C : NULL, N, F, drop, seed, sk_drop_stream(l, SK_DROP_MLP_OUT));
}

static int forward_blocks(sk_cuda_model *cm, int B, int T, int training, uint64_t seed) {
    const sk_model *m = cm->m;
    const sk_params *p = &cm->p;
    sk_acts *a = &cm->a;
    int L = m->L, C = m->C, N = B * T;
    size_t BT = (size_t)N;
    float drop = training ? m->cfg.dropout : 0.0f;
    K(cu_encoder_forward(a->encoded, cm->tok_d, p->wte, p->wpe ? p->wpe : cm->pos_table, NULL, B, T, C));
    K(cu_dropout(a->encoded, BT * C, drop, seed, sk_drop_stream(L, 0)));
    for (int l = 0; l < L; l++) {
        sk_layer_acts la;
        layer_acts(cm, l, &la);
        TRY(layer_forward(cm, l, l == 0 ? a->encoded : a->res3 + (size_t)(l - 1) * BT * C, &la, B, T, training, seed));
    }
    return norm_forward(cm, a->lnf, cm->lnf16, a->lnf_mean, a->lnf_rstd, a->res3 + (size_t)(L - 1) * BT * C, p->lnfw, p->lnfb, N);
}

/* bf16: the logits (N, Vp) = lnf16 @ lm_head16^T come out of the GEMM in bf16 (as under
 * PyTorch's autocast, where the matmul's output is bf16 and the loss upcasts it): half the
 * bytes of fp32 logits, and the cross-entropy writes their gradient over them. */
static int logits_bf16(sk_cuda_model *cm, uint16_t *z16, int N) {
    const sk_model *m = cm->m;
    const uint16_t *w16;
    int ldw16;
    TRY(bf16_operand(cm, 1, cm->p.lmhead, m->Vp, m->C, m->C, &w16, &ldw16));
    const float one = 1.0f, zero = 0.0f;
    PROF(gemm_name(0, 1), BLAS(cublasGemmEx(cm->blas, CUBLAS_OP_T, CUBLAS_OP_N, m->Vp, N, m->C, &one, w16, CUDA_R_16BF,
                                            ldw16, cm->lnf16, CUDA_R_16BF, m->C, &zero, z16, CUDA_R_16BF, m->Vp,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)));
    return SK_OK;
}
/* the first vocab_size columns of the N rows of logits to the host, as floats */
static int download_logits(sk_cuda_model *cm, float *out, int N) {
    const int V = cm->m->cfg.vocab_size, Vp = cm->m->Vp;
    if (cm->prec != SK_CUDA_BF16) {
        CU(cudaMemcpy2D(out, sizeof(float) * V, cm->a.logits, sizeof(float) * Vp, sizeof(float) * V, N,
                        cudaMemcpyDeviceToHost));
        return SK_OK;
    }
    /* each row's V bf16 values into the second half of its bytes, then widened in place from
     * the front: float v overwrites bf16 values 2v - V and 2v - V + 1, both already read */
    CU(cudaMemcpy2D((uint16_t *)out + V, sizeof(float) * V, cm->logits16, sizeof(uint16_t) * Vp, sizeof(uint16_t) * V,
                    N, cudaMemcpyDeviceToHost));
    for (int r = 0; r < N; r++) {
        float *row = out + (size_t)r * V;
        const unsigned char *h = (const unsigned char *)row + sizeof(uint16_t) * V;
        for (int v = 0; v < V; v++) {
            uint16_t b16;
            memcpy(&b16, h + sizeof(uint16_t) * v, sizeof b16);
            uint32_t u = (uint32_t)b16 << 16;
            memcpy(row + v, &u, sizeof u);
        }
    }
    return SK_OK;
}

/* Classifier: logits = lnf @ lm_head^T (N, Vp; lm_head is wte when tied), softmax
 * cross-entropy over the real vocabulary;
 * with dlnf the gradient of (scale * mean loss) goes to dlnf (overwritten; in bf16 to
 * cm->dx16 instead, rounded) and lm_head (added). */
static int classifier(sk_cuda_model *cm, const int32_t *targets, int N, float *loss, float *logits_out,
                      float *dlnf, float scale) {
    const sk_model *m = cm->m;
    int V = m->cfg.vocab_size, Vp = m->Vp, C = m->C;
    sk_acts *a = &cm->a;
    size_t n_valid = 0;
    if (targets) for (int i = 0; i < N; i++) n_valid += targets[i] >= 0;
    float row_scale = n_valid ? scale / (float)n_valid : 0.0f;
    uint16_t *z16 = cm->prec == SK_CUDA_BF16 ? cm->logits16 : NULL;
    if (z16) TRY(logits_bf16(cm, z16, N));
    else TRY(sk_cu_linear(cm, a->logits, Vp, a->lnf, cm->lnf16, cm->p.lmhead, NULL, N, C, Vp));
    if (logits_out) TRY(download_logits(cm, logits_out, N));
    if (targets)              /* always, with dlnf (sk_cuda_forward_backward) */
        K(cu_crossentropy(a->logits, z16, a->losses, cm->tok_d + N, N, V, Vp, row_scale, dlnf != NULL));
    /* in bf16 the gradient has replaced the logits, in bf16: the GEMMs read it as it is */
    if (dlnf) TRY(linear_grads(cm, z16 ? NULL : dlnf, z16 ? cm->dx16 : NULL, 0, cm->g.lmhead, a->logits, Vp, z16, Vp,
                               a->lnf, cm->lnf16, cm->p.lmhead, N, C, Vp));
    if (loss) {
        double s = 0.0;
        if (targets) {
            CU(cudaMemcpy(cm->losses_h, a->losses, sizeof(float) * N, cudaMemcpyDeviceToHost));
            for (int i = 0; i < N; i++) s += cm->losses_h[i];
        }
        *loss = targets && n_valid ? (float)(s / (double)n_valid) : NAN;
    }
    return SK_OK;
}

/* Checks the tokens and uploads inputs, targets and, for the embedding backward, the
 * positions of each distinct input token in increasing order (a counting sort). */
static int upload_tokens(sk_cuda_model *cm, const int32_t *inputs, const int32_t *targets, int N) {
    const sk_model *m = cm->m;
    int V = m->cfg.vocab_size;
    for (int i = 0; i < N; i++) {
        if (inputs[i] < 0 || inputs[i] >= V)
            return sk_error(SK_EINVAL, "input token %d at position %d is outside the vocabulary [0, %d)", inputs[i], i, V);
        if (targets && targets[i] >= V)
            return sk_error(SK_EINVAL, "target token %d at position %d is outside the vocabulary [0, %d)", targets[i], i, V);
    }
    const size_t n = (size_t)N;
    int32_t *h = cm->tok_h, *in = h, *tg = h + n, *uniq = h + 2 * n, *off = h + 3 * n, *pos = h + 4 * n + 1;
    memcpy(in, inputs, sizeof(int32_t) * N);
    if (targets) memcpy(tg, targets, sizeof(int32_t) * N);
    else for (int i = 0; i < N; i++) tg[i] = -1;
    int nu = 0;
    for (int i = 0; i < N; i++) {            /* buckets in order of first appearance */
        int t = in[i];
        if (cm->slot_h[t] < 0) { cm->slot_h[t] = nu; uniq[nu] = t; off[nu + 1] = 0; nu++; }
        off[cm->slot_h[t] + 1]++;
    }
    off[0] = 0;
    for (int u = 0; u < nu; u++) off[u + 1] += off[u];
    /* positions of bucket u in increasing i; cursors next[u] start at off[u] */
    int32_t *next = cm->next_h;
    for (int u = 0; u < nu; u++) next[u] = off[u];
    for (int i = 0; i < N; i++) pos[next[cm->slot_h[in[i]]]++] = i;
    for (int u = 0; u < nu; u++) cm->slot_h[uniq[u]] = -1;
    cm->n_uniq = nu;
    CU(cudaMemcpy(cm->tok_d, h, sizeof(int32_t) * (5 * (size_t)N + 1), cudaMemcpyHostToDevice));
    return SK_OK;
}

int sk_cuda_forward(sk_cuda_model *cm, const int32_t *inputs, const int32_t *targets, int B, int T,
                    float *loss, float *logits) {
    TRY(sk_cuda_reserve(cm, B, T));
    TRY(upload_tokens(cm, inputs, targets, B * T));
    TRY(forward_blocks(cm, B, T, 0, 0));
    return classifier(cm, targets, B * T, loss, logits, NULL, 0.0f);
}

/* -------------------------------------------------------------- backward */

/* The gradient that reaches a residual branch's output (site of layer l): with dropout a
 * masked copy of dres in dbtc; without, dres itself, read in place (no copy): the branch's
 * backward only reads it, and dres changes only after, when the norm's backward adds to it. */
static int branch_grad(sk_cuda_model *cm, float drop, uint64_t seed, int l, int site, const float **dy) {
    sk_acts *a = &cm->a;
    size_t n = (size_t)cm->B * cm->T * cm->m->C;
    *dy = a->dres;
    if (!(drop > 0.0f)) return SK_OK;
    CU(cudaMemcpy(a->dbtc, a->dres, n * sizeof(float), cudaMemcpyDeviceToDevice));
    K(cu_dropout(a->dbtc, n, drop, seed, sk_drop_stream(l, site)));
    *dy = a->dbtc;
    return SK_OK;
}

static int backward_blocks(sk_cuda_model *cm, int B, int T, uint64_t seed) {
    const sk_model *m = cm->m;
    const sk_params *p = &cm->p;
    sk_params *g = &cm->g;
    sk_acts *a = &cm->a;
    int L = m->L, C = m->C, F = m->F, N = B * T;
    int Ffc = m->gated ? 2 * F : F;
    size_t BT = (size_t)N;
    float drop = m->cfg.dropout;

    /* a->dbtc (in bf16 cm->dx16) holds dlnf from the classifier. In bf16 the input gradients
     * of the GEMMs that read a norm's output or the attention's are bf16 (dx16, one at a time) */
    uint16_t *dx16 = cm->dx16;
    CU(cudaMemset(a->dres, 0, BT * C * sizeof(float)));
    TRY(norm_backward(cm, a->dres, g->lnfw, g->lnfb, a->dbtc, dx16, a->res3 + (size_t)(L - 1) * BT * C, p->lnfw,
                      a->lnf_mean, a->lnf_rstd, N));
    if (a->dqkv_lend) CU(cudaMemset(a->dqkv_lend, 0, (size_t)sk_model_n_lenders(m) * BT * m->QKV * sizeof(float)));
    for (int l = L - 1; l >= 0; l--) {
        const float *x = l == 0 ? a->encoded : a->res3 + (size_t)(l - 1) * BT * C;
        sk_layer_acts la;
        layer_acts(cm, l, &la);
        /* MLP: res3 = res2 + drop(fcproj(act(fc(norm2(res2))))) */
        const float *dy;
        TRY(branch_grad(cm, drop, seed, l, SK_DROP_MLP_OUT, &dy));
        /* in bf16 the activation's gradient and the pre-activation's are bf16 (dact16, dfch16) */
        TRY(linear_backward(cm, a->dfch_act, cm->dact16, g->fcprojw + (size_t)l * C * F,
                            g->fcprojb ? g->fcprojb + (size_t)l * C : NULL, dy, NULL, la.fch_act,
                            at16(cm, cm->act16, l, F), p->fcprojw + (size_t)l * C * F, N, F, C));
        TRY(mlp_act_backward(cm, a->dfch, cm->dfch16, la.fch, at16(cm, cm->fch16, l, Ffc), a->dfch_act, cm->dact16, N));
        TRY(linear_backward(cm, dx16 ? NULL : a->dbtc2, dx16, g->fcw + (size_t)l * Ffc * C,
                            g->fcb ? g->fcb + (size_t)l * F : NULL, a->dfch, cm->dfch16, la.ln2,
                            at16(cm, cm->ln2_16, l, C), p->fcw + (size_t)l * Ffc * C, N, C, Ffc));
        TRY(norm_backward(cm, a->dres, g->ln2w + (size_t)l * C, g->ln2b ? g->ln2b + (size_t)l * C : NULL,
                          a->dbtc2, dx16, la.res2, p->ln2w + (size_t)l * C, la.ln2_mean, la.ln2_rstd, N));
        /* attention: res2 = x + drop(attproj(attn(qkv(norm1(x))))); with the mma.sync
         * attention (qkv16) its dO comes out of the projection's GEMM in bf16 (dx16) */
        TRY(branch_grad(cm, drop, seed, l, SK_DROP_ATTN_OUT, &dy));
        uint16_t *datt16 = cm->qkv16 ? dx16 : NULL;
        TRY(linear_backward(cm, datt16 ? NULL : a->dbtc2, datt16, g->attprojw + (size_t)l * C * C,
                            g->attprojb ? g->attprojb + (size_t)l * C : NULL, dy, NULL, la.atty,
                            at16(cm, cm->atty16, l, C), p->attprojw + (size_t)l * C * C, N, C, C));
        float *dqkv = dqkv_of(cm, l);
        if (m->plan->lend_index[l] < 0) CU(cudaMemset(dqkv, 0, BT * m->QKV * sizeof(float)));
        for (int part = 0, calls = attn_calls(cm, l); part < calls; part++) {
            cu_attn d;
            if (calls == 1 && m->plan->n_runs[l] > 1) {
                attn_desc_merged(cm, &d, l, B, T, drop, seed, 1, &la, 1);
                const float *dout = datt16 ? NULL : a->dbtc2;
                /* dk, dv: any non-NULL pair asks for dK/dV; each run adds into its own (d.run[]) */
                PROF(d.tc ? "attention backward, tensor cores" : "attention backward",
                     TRY(attn_rc(cu_attn_backward(&d, dout, dqkv, d.run[0].dk, d.run[0].dv, cm->Di), "backward", l, 0)));
                continue;
            }
            attn_desc(cm, &d, l, part, B, T, drop, seed, 1, &la);
            int src = sk_route_run(m->plan, l, part)->src;
            float *dsrc = dqkv_of(cm, src);
            const float *qkv_src = src == l ? la.qkv : qkv_of(cm, src);
            /* dq/dk/dv share the strides of q/k/v; translate the pointers into the gradient buffers */
            float *dq = dqkv + (d.q - la.qkv);
            float *dk = dsrc + (d.k - qkv_src);
            float *dv = dsrc + (d.v - qkv_src);
            /* d.out's view (NULL: d.dout16 holds dO) */
            const float *dout = datt16 ? NULL : a->dbtc2 + (size_t)sk_route_run(m->plan, l, part)->h0 * m->hs;
            PROF(d.tc ? "attention backward, tensor cores" : "attention backward",
                 TRY(attn_rc(cu_attn_backward(&d, dout, dq, dk, dv, cm->Di), "backward", l, part)));
        }
        if (cm->rope) K(cu_rope(dqkv, cm->rope, B, T, m->QKV, 0, m->H + m->Hkv, m->hs, 0, 1));
        uint16_t *dln1_16 = dx16;
        TRY(qkv_backward(cm, l, a->dbtc, &dln1_16, dqkv, la.ln1, at16(cm, cm->ln1_16, l, C), N));
        TRY(norm_backward(cm, a->dres, g->ln1w + (size_t)l * C, g->ln1b ? g->ln1b + (size_t)l * C : NULL,
                          a->dbtc, dln1_16, x, p->ln1w + (size_t)l * C, la.ln1_mean, la.ln1_rstd, N));
    }
    K(cu_dropout(a->dres, BT * C, drop, seed, sk_drop_stream(L, 0)));
    const int32_t *h = cm->tok_d;
    K(cu_encoder_backward_wte(g->wte, a->dres, h + 2 * (size_t)N, h + 3 * (size_t)N, h + 4 * (size_t)N + 1, cm->n_uniq, C));
    if (g->wpe) K(cu_encoder_backward_wpe(g->wpe, a->dres, B, T, C));
    return SK_OK;
}

int sk_cuda_forward_backward(sk_cuda_model *cm, const int32_t *inputs, const int32_t *targets, int B, int T,
                             float grad_scale, uint64_t dropout_seed, float *loss) {
    NEED_TRAINING(cm);
    if (!targets) return sk_error(SK_EINVAL, "forward_backward needs targets");
    TRY(sk_cuda_reserve(cm, B, T));
    TRY(upload_tokens(cm, inputs, targets, B * T));
    TRY(forward_blocks(cm, B, T, 1, dropout_seed));
    TRY(classifier(cm, targets, B * T, loss, NULL, cm->a.dbtc, grad_scale));
    return backward_blocks(cm, B, T, dropout_seed);
}

/* ------------------------------------------------------------- optimizer */

/* As sk_grad_norm: one double per span (its blocks' partials added in order), the spans
 * added in order. ZeRO-1: this rank's spans, all-gathered first (the same norm). */
int sk_cuda_grad_norm(sk_cuda_model *cm, double *norm) {
    NEED_TRAINING(cm);
    const int S = cm->zero ? cm->z_n_spans : cm->n_spans, split = cm->span_split;
    double *sq = cm->span_sq + (cm->zero ? cm->z_s_lo : 0);
    if (S) {
        K(cu_span_sq(cm->sq_d, cm->zero ? cm->grads + cm->z_base : cm->grads, cm->zero ? cm->z_spans : cm->spans, S, split));
        CU(cudaMemcpy(cm->sq_h, cm->sq_d, sizeof(double) * S * split, cudaMemcpyDeviceToHost));
    }
    for (int s = 0; s < S; s++) {
        double acc = 0;
        for (int j = 0; j < split; j++) acc += cm->sq_h[(size_t)s * split + j];
        sq[s] = acc;
    }
    if (cm->zero) TRY(sk_dist_allgather_f64(sq, cm->span_sq, cm->z_counts, cm->z_displs));
    double sum = 0;
    for (int s = 0; s < cm->n_spans; s++) sum += cm->span_sq[s];
    *norm = sqrt(sum);
    return SK_OK;
}

/* The scalars exactly as sk_adamw_step computes them (double, rounded once to float). */
int sk_cuda_adamw_step(sk_cuda_model *cm, const sk_adamw_cfg *c, double lr, long t, float clip_coef) {
    NEED_TRAINING(cm);
    double b1 = c->beta1, b2 = c->beta2;
    const float decay = (float)(1.0 - lr * (double)c->weight_decay);
    const float fb1 = (float)b1, fb2 = (float)b2, a1 = (float)(1.0 - b1), a2 = (float)(1.0 - b2);
    const float step_size = (float)(lr / (1.0 - pow(b1, (double)t)));
    const float bc2_sqrt = (float)sqrt(1.0 - pow(b2, (double)t));
    if (!cm->zero) {    /* the bf16 copy of each weight written with it (the spans cover every tensor) */
        K(cu_adamw(cm->params, cm->params16, cm->grads, cm->mom, cm->vel, cm->spans, cm->n_spans, cm->span_split, decay,
                   fb1, fb2, a1, a2, step_size, bc2_sqrt, c->eps, c->weight_decay != 0.0f, clip_coef));
        return SK_OK;
    }
    /* ZeRO-1: this rank's range with its m and v, then everyone's range, then the bf16 copy */
    K(cu_adamw(cm->params + cm->z_base, NULL, cm->grads + cm->z_base, cm->mom, cm->vel, cm->z_spans, cm->z_n_spans,
               cm->span_split, decay, fb1, fb2, a1, a2, step_size, bc2_sqrt, c->eps, c->weight_decay != 0.0f,
               clip_coef));
    TRY(sk_cu_params_allgather(cm));
    return sk_cu_params_changed(cm);
}

/* --------------------------------------------------------- trainer backend */

static int be_zero(void *ctx) { return sk_cuda_zero_grad(ctx); }
static int be_fb(void *ctx, const int32_t *x, const int32_t *y, int B, int T, float s, uint64_t seed, float *loss) {
    return sk_cuda_forward_backward(ctx, x, y, B, T, s, seed, loss);
}
static int be_fwd(void *ctx, const int32_t *x, const int32_t *y, int B, int T, float *loss) {
    return sk_cuda_forward(ctx, x, y, B, T, loss, NULL);
}
static int be_norm(void *ctx, double *norm) { return sk_cuda_grad_norm(ctx, norm); }
static int be_update(void *ctx, const sk_adamw_cfg *c, double lr, long t, float coef) {
    return sk_cuda_adamw_step(ctx, c, lr, t, coef);
}
static int be_pull(void *ctx, float *params, float *mo, float *ve) {
    TRY(sk_cuda_download_params(ctx, params));
    return sk_cuda_download_adam(ctx, mo, ve);
}
static int be_push(void *ctx, const float *params, const float *mo, const float *ve) {
    TRY(sk_cuda_upload_params(ctx, params));
    return sk_cuda_upload_adam(ctx, mo, ve);
}

static int be_mean(void *ctx) { return sk_cuda_grads_mean(ctx); }
static int be_shard(void *ctx, const size_t *starts, const int *counts, const int *displs) {
    return sk_cuda_shard(ctx, starts, counts, displs);
}

void sk_cuda_train_backend(sk_cuda_model *cm, sk_train_backend *be) {
    memset(be, 0, sizeof *be);
    be->ctx = cm;
    be->zero_grad = be_zero; be->forward_backward = be_fb; be->forward = be_fwd;
    be->grad_norm = be_norm; be->update = be_update; be->pull = be_pull; be->push = be_push;
    be->grads_mean = be_mean; be->shard = be_shard;
}

/* ------------------------------------------------------------- benchmark */

int sk_cuda_sgemm_rate(int M, int N, int Kd, sk_cuda_precision prec, double *gflops) {
    *gflops = 0;
    cublasHandle_t h;
    BLAS(cublasCreate(&h));
    void *A = NULL, *B = NULL;
    float *C = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    const int bf16 = prec == SK_CUDA_BF16;
    const size_t es = bf16 ? sizeof(uint16_t) : sizeof(float);   /* A and B in the GEMMs' operand type */
    int rc = sk_cu_alloc(&A, es * M * (size_t)Kd, "the sgemm probe");
    if (!rc) rc = sk_cu_alloc(&B, es * N * (size_t)Kd, "the sgemm probe");
    if (!rc) rc = sk_cu_alloc(&C, sizeof(float) * M * (size_t)N, "the sgemm probe");
    if (!rc && (cudaMemset(A, 0, es * M * (size_t)Kd) != cudaSuccess ||
                cudaMemset(B, 0, es * N * (size_t)Kd) != cudaSuccess ||
                cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess))
        rc = sk_error(SK_EIO, "CUDA: sgemm probe setup failed: %s", cudaGetErrorString(cudaGetLastError()));
    if (!rc && cublasSetMathMode(h, prec == SK_CUDA_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS)
        rc = sk_error(SK_EIO, "cuBLAS: cublasSetMathMode failed");
    float best = 1e30f, one = 1.0f, zero = 0.0f;
    for (int r = 0; !rc && r < 6; r++) {
        float ms = 0;
        cudaEventRecord(e0, 0);
        /* row-major C (M, N) = A (M, K) B^T */
        cublasStatus_t s = bf16 ? cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, Kd, &one, B, CUDA_R_16BF, Kd, A,
                                               CUDA_R_16BF, Kd, &zero, C, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                                               CUBLAS_GEMM_DEFAULT)
                                : cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, Kd, &one, B, Kd, A, Kd, &zero, C, N);
        cudaEventRecord(e1, 0);
        if (s != CUBLAS_STATUS_SUCCESS) { rc = sk_cu_blas_fail(s, "cublasSgemm (probe)", __FILE__, __LINE__); break; }
        if (cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) {
            rc = sk_error(SK_EIO, "CUDA: sgemm probe timing failed: %s", cudaGetErrorString(cudaGetLastError()));
            break;
        }
        if (r > 0 && ms < best) best = ms;      /* the first run warms up */
    }
    if (!rc) *gflops = 2.0 * M * (double)N * Kd / (fmax(best, 1e-3) * 1e-3) / 1e9;   /* 1 us: the events' floor */
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(A); cudaFree(B); cudaFree(C);
    cublasDestroy(h);
    return rc;
}
