/* The elementwise ops of bf16 mixed precision on the CPU (sk_model_set_bf16): the fp32 ops of
 * core/ops.h with a bf16 side, for the activations that are stored in bf16 because only GEMMs
 * read them (the norms' outputs, the MLP's pre-activation and activation, and their gradients).
 * Arithmetic is fp32, the same operations as the fp32 op: a bf16 output is the fp32 op's result
 * rounded to nearest even (sk_bf16_from_f32), a bf16 input is widened exactly. Results do not
 * depend on the thread count. docs/training.md, "bf16 mixed precision". */
#ifndef SK_OPS_BF16_H
#define SK_OPS_BF16_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* sk_bf16_from_f32 without a branch (so that loops vectorise): round to nearest even, a NaN
 * stays a quiet NaN (its sign and high payload kept), overflow goes to infinity */
static inline uint16_t sk_rne_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40u) : (uint16_t)r;
}

/* out = x rounded to bf16, n values (a vectorised sk_bf16_from_f32_n) */
void sk_round_bf16(uint16_t *out, const float *x, size_t n);
/* rows x cols of x (row stride ldx) rounded into out (row stride ldo) */
void sk_round_bf16_2d(uint16_t *out, int ldo, const float *x, int ldx, int rows, int cols);

/* sk_layernorm_forward / sk_rmsnorm_forward with the output rounded to bf16 */
void sk_layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const float *inp,
                               const float *w, const float *b, int N, int C, float eps);
void sk_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const float *inp, const float *w,
                             int N, int C, float eps);

/* The MLP activations on a bf16 pre-activation h, output rounded to bf16; the backward reads h
 * (bf16) and the fp32 gradient of the activation, and writes dh rounded to bf16. */
void sk_gelu_forward_bf16(uint16_t *out, const uint16_t *inp, size_t n, int tanh_approx);
void sk_gelu_backward_bf16(uint16_t *dinp, const uint16_t *inp, const float *dout, size_t n, int tanh_approx);
void sk_relu_forward_bf16(uint16_t *out, const uint16_t *inp, size_t n);
void sk_relu_backward_bf16(uint16_t *dinp, const uint16_t *inp, const float *dout, size_t n);
/* h (N, 2F) = [a | b]: out (N, F) = silu(a) * b; dh (N, 2F) the gradients of a and b */
void sk_swiglu_forward_bf16(uint16_t *out, const uint16_t *h, int N, int F);
void sk_swiglu_backward_bf16(uint16_t *dh, const uint16_t *h, const float *dout, int N, int F);

/* out (C) += column sums of x (N, C) in bf16, rows in order (sk_colsum_add's order) */
void sk_colsum_add_bf16(float *out, const uint16_t *x, int N, int C);
#endif
