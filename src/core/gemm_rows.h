/* Decoding's batch-invariant matrix products (gemm_rows.c, gemm_rows_bf16.c). The entry points
 * are sk_linear_forward_rows and sk_linear_forward_bf16 (ops.h) and sk_linear_forward_q8
 * (quant.h): out (N, OC) = inp (N, IC) @ W^T + b, each row the bits it gets alone, for any N
 * and any thread count. */
#ifndef SK_GEMM_ROWS_H
#define SK_GEMM_ROWS_H

/* The code path this build uses, e.g. "avx512, tiles of 4 rows x 3 outputs" (tests, bench). */
const char *sk_rows_kernel(void);
/* The path sk_linear_forward_bf16 takes on this CPU (gemm_rows_bf16.c): vdpbf16ps where the CPU
 * has avx512_bf16, else its exact emulation. */
const char *sk_rows_bf16_kernel(void);
/* 1 where sk_linear_forward_bf16 runs on vdpbf16ps (then prompts go through it too: infer.c). */
int sk_rows_bf16_native(void);
/* 1: the emulation even where the CPU has the instructions (the same bits; for the tests); 0:
 * the instructions where the CPU has them. The environment's SKIPLM_DOT_EMULATE=1 sets 1 at the
 * first call. */
void sk_rows_set_emulate(int on);

#endif
