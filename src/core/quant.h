/* 8-bit weights (Q8_0, as llama.cpp names it): each row of a 2-D weight in blocks of
 * SK_Q8_BLOCK consecutive inputs, each block int8 values q and one fp16 scale d, the weight
 * being q * d (q in [-127, 127], d = max|w| / 127 of the block rounded up to fp16).
 * The decoding kernel keeps the activations in fp32: the decode step computes exactly
 * x . dequantize(w), so the full forward pass of the dequantized model (eval) measures what
 * decoding computes (docs/performance.md says why the activations are not quantized there);
 * only a prompt's long chunks quantize them (sk_linear_forward_q8_prompt). */
#ifndef SK_QUANT_H
#define SK_QUANT_H
#include <stddef.h>
#include <stdint.h>
#include "skiplm_model.h"

#define SK_Q8_BLOCK 32

/* IEEE half <-> float: to half rounds to nearest even (overflow to infinity), to float is exact. */
uint16_t sk_f16_from_f32(float f);
float sk_f16_to_f32(uint16_t h);

/* q (n), d (n / SK_Q8_BLOCK) = the blocks of w (n, a multiple of SK_Q8_BLOCK); d is
 * max|w| / 127 rounded up to fp16, so every |w - q d| <= d / 2 (no weight is clipped; below
 * 127 * 2^-14, in fp16's subnormals, the steps are coarser than max|w| / 127). */
void sk_q8_quantize(int8_t *q, uint16_t *d, const float *w, size_t n);
/* w (n) = q * d, exactly (an int8 times an fp16 is a float). */
void sk_q8_dequantize(float *w, const int8_t *q, const uint16_t *d, size_t n);

/* out (N, OC) = inp (N, IC) @ (q * d)^T + b for a few rows (decoding); IC a multiple of
 * SK_Q8_BLOCK; q (OC, IC), d (OC, IC / SK_Q8_BLOCK) (gemm_rows.c). The bits of
 * sk_linear_forward_rows on the dequantized matrix: each row's as it is alone, for any N and
 * any thread count. */
void sk_linear_forward_q8(float *out, const float *inp, const int8_t *q, const uint16_t *d, const float *b,
                          int N, int IC, int OC);

/* The same for a prompt chunk (gemm_q8dot.c): each input row quantized per block of
 * SK_Q8_BLOCK to int8 with an fp32 scale (as llama.cpp's Q8_0 x Q8_0), integer block dot
 * products, scaled sums in fp32 in one fixed order: each row's bits do not depend on N, the
 * thread count or the CPU (AVX512-VNNI's vpdpbusd, AVX2, or plain C). Not decoding's numerics
 * (the activations are quantized). SK_OK, or SK_ENOMEM / SK_EINVAL (IC not a multiple of
 * SK_Q8_BLOCK) with nothing written. */
int sk_linear_forward_q8_prompt(float *out, const float *inp, const int8_t *q, const uint16_t *d, const float *b,
                                int N, int IC, int OC);
/* 1 where it runs on vpdpbusd (avx512_vnni): infer.c sends long prompt chunks to it then. */
int sk_q8_prompt_native(void);
/* its code path on this CPU; 1: the path without VNNI even where the CPU has it (the same bits;
 * SKIPLM_DOT_EMULATE=1 in the environment sets it at the first call) */
const char *sk_q8_prompt_kernel(void);
void sk_q8_prompt_set_emulate(int on);

/* A model's 2-D weights in Q8_0 (sk_model_quantize_q8, or a quantized file): q at the same
 * offsets as the fp32 parameters (only the matrices' ranges are used), the scales of each
 * stacked region (wte, wpe, qkv, attention projection, MLP in and out, lm_head) after the
 * previous region's. */
#define SK_Q8_MAX_REGIONS 8
typedef struct sk_q8 {
    int8_t *q;                  /* (n_params) */
    uint16_t *d;                /* (n_scales) */
    size_t n_scales;
    int n_reg;
    struct { size_t off, n, d_off; } reg[SK_Q8_MAX_REGIONS];   /* floats [off, off+n), scales from d_off */
} sk_q8;

/* Allocate m's (zeroed) 8-bit copy with its regions; refused (SK_EINVAL) unless n_embd and the
 * MLP width are multiples of SK_Q8_BLOCK. */
int sk_q8_alloc(const sk_model *m, sk_q8 **z);
/* The scales of the row that starts at parameter offset off (inside a region), or NULL. */
const uint16_t *sk_q8_scales(const sk_q8 *z, size_t off);
void sk_q8_free(sk_q8 *z);
#endif
