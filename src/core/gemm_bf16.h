/* bf16 GEMMs with fp32 accumulation, for bf16 mixed precision on the CPU (sk_model_set_bf16):
 * oneDNN's matmul primitive (Debian's libdnnl-dev, built in with SK_HAVE_DNNL), one primitive
 * per shape created on first use and kept; oneDNN picks the kernel for the CPU (AMX, avx512_bf16,
 * or its own emulation). Where oneDNN has no bf16 matmul for the CPU (oneDNN 2.6 on AVX2) and in
 * a build without oneDNN, the operands are widened to fp32 (exact) and multiplied by sk_gemm:
 * the same products, summed in another order. Thread-safe (the cache is locked; each thread runs
 * on its own oneDNN stream and scratchpad). docs/training.md, "bf16 mixed precision". */
#ifndef SK_GEMM_BF16_H
#define SK_GEMM_BF16_H
#include <stddef.h>
#include <stdint.h>

/* C (M, N) = op(A) op(B) [+ bias] [+ C], row-major, every product of two bf16 values added in
 * fp32:
 *   op(A) (M, K): A stored (M, K) with row stride lda, or with transA stored (K, M): A^T;
 *   op(B) (K, N): B stored (K, N) with row stride ldb, or with transB stored (N, K): B^T;
 *   bias: (N) fp32, added to every row, or NULL;
 *   C: fp32 (C16 NULL; accumulate = 1 adds the product to it), or bf16 (C NULL, C16: the fp32
 *   result, bias included, rounded to nearest even once; accumulate must be 0); row stride ldc.
 * Returns SK_OK, or SK_ENOMEM / SK_EINVAL with sk_error's message. */
int sk_gemm_bf16(int transA, int transB, int M, int N, int K, const uint16_t *A, int lda,
                 const uint16_t *B, int ldb, const float *bias, int accumulate, float *C, uint16_t *C16,
                 int ldc);

/* Primitives in the cache (for the tests: one per shape). */
int sk_gemm_bf16_cached(void);
/* How the last primitive made for these arguments (any buffers) computes: oneDNN's
 * implementation name ("brg:avx512_core_bf16", "gemm:jit", ...) or "fallback: fp32 sgemm on
 * widened operands". */
const char *sk_gemm_bf16_impl(int transA, int transB, int M, int N, int K, int lda, int ldb,
                              int has_bias, int accumulate, int c16, int ldc);
#endif
