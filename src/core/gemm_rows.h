/* Decoding's batch-invariant matrix products (gemm_rows.c). The entry points are
 * sk_linear_forward_rows and sk_linear_forward_bf16 (ops.h) and sk_linear_forward_q8
 * (quant.h): out (N, OC) = inp (N, IC) @ W^T + b, each row the bits it gets alone, for any N
 * and any thread count. */
#ifndef SK_GEMM_ROWS_H
#define SK_GEMM_ROWS_H

/* The code path this build uses, e.g. "avx512, tiles of 4 rows x 3 outputs" (tests, bench). */
const char *sk_rows_kernel(void);

#endif
