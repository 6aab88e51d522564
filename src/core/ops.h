/* Layer ops as forward/backward pairs over raw float arrays (llm.c style).
 * Backward functions ACCUMULATE (+=) into their gradient outputs.
 * N = number of rows (tokens, B*T). */
#ifndef SK_OPS_H
#define SK_OPS_H
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* out (N, OC) = inp (N, IC) @ w^T + b,  w (OC, IC), b (OC) or NULL. */
void sk_linear_forward(float *out, const float *inp, const float *w, const float *b,
                       int N, int IC, int OC);
/* The same for the few rows of a decoding step (gemm_rows.c), with w in fp32, or (OC, IC) in
 * bf16 (decoding with SK_WEIGHTS_BF16; gemm_rows_bf16.c: the activations rounded to bf16,
 * each bf16 x bf16 product added in fp32 in vdpbf16ps's order): each row's outputs have the
 * bits that row gets alone, for any N, any thread count, and any x86 CPU. */
void sk_linear_forward_rows(float *out, const float *inp, const float *w, const float *b, int N, int IC, int OC);
void sk_linear_forward_bf16(float *out, const float *inp, const uint16_t *w, const float *b,
                            int N, int IC, int OC);
uint16_t sk_bf16_from_f32(float f);                      /* round to nearest even */
static inline float sk_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
void sk_bf16_from_f32_n(uint16_t *out, const float *x, size_t n);
void sk_bf16_to_f32_n(float *out, const uint16_t *x, size_t n);
/* dinp (N, IC) = dout @ w (overwritten; may be NULL);
 * dw (OC, IC) += dout^T @ inp (dw may be NULL: a frozen weight);  db (OC) += colsum(dout) (db may be NULL). */
void sk_linear_backward(float *dinp, float *dw, float *db, const float *dout,
                        const float *inp, const float *w, int N, int IC, int OC);
/* C (M, N) = alpha * op(A) op(B) + beta * C, row-major; the one GEMM entry point. */
void sk_gemm(int transA, int transB, int M, int N, int K, float alpha,
             const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* LayerNorm over the last dim C: out = (x - mean) * rstd * w + b (b may be NULL).
 * Saves mean, rstd (N). */
void sk_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C, float eps);
/* dinp += the input's gradient; dw, db += the weights' (dw NULL: only dinp) */
void sk_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                           const float *inp, const float *w, const float *mean,
                           const float *rstd, int N, int C);

/* GELU, exact (erf) or tanh approximation. */
void sk_gelu_forward(float *out, const float *inp, size_t n, int tanh_approx);
/* dinp = gelu'(inp) * dout  (overwrites, may alias dout) */
void sk_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n, int tanh_approx);

/* ReLU; backward dinp = dout * (inp > 0) (overwrites). */
void sk_relu_forward(float *out, const float *inp, size_t n);
void sk_relu_backward(float *dinp, const float *inp, const float *dout, size_t n);
/* Fixed sinusoidal positions (max_pos, C): PE(p, 2i) = sin(p / 10000^(2i/C)),
 * PE(p, 2i+1) = cos(p / 10000^(2i/C)). */
void sk_sinusoidal_table(float *pe, int max_pos, int C);

/* out (B, T, C) = wte[tok] + wpe[t] (wpe may be NULL) */
void sk_embed_forward(float *out, const int32_t *tok, const float *wte, const float *wpe,
                      int B, int T, int C);
void sk_embed_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                       int B, int T, int C);

/* Inverted dropout keyed by a counter hash: element i of stream s is kept iff
 * hash(seed, s, i) >= p * 2^32, then scaled by 1/(1-p). In place; the backward is
 * the same call on the gradient. p == 0 is a no-op. */
void sk_dropout(float *x, size_t n, float p, uint64_t seed, uint64_t stream);
/* The keep test itself (shared with attention). */
static inline uint32_t sk_hash32(uint64_t seed, uint64_t stream, uint64_t i) {
    uint64_t z = seed ^ (stream * 0x9E3779B97F4A7C15ULL) ^ (i * 0xD1B54A32D192ED03ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (uint32_t)(z >> 32);
}

/* y += x */
void sk_add_inplace(float *y, const float *x, size_t n);

/* Sum over rows of a (N, C) matrix, added into out (C), in a fixed order that does
 * not depend on the thread count. */
void sk_colsum_add(float *out, const float *x, int N, int C);

/* Deterministic generator for initialisation (splitmix64 + Box-Muller). */
typedef struct { uint64_t s; } sk_rng;
uint64_t sk_rng_u64(sk_rng *r);
float sk_rng_uniform(sk_rng *r);          /* [0, 1) */
float sk_rng_normal(sk_rng *r);

double sk_now(void);                      /* monotonic seconds */
/* SKIPLM_DOT_EMULATE set (and not "0"): decoding's and prompts' bf16 and int8 dot-product
 * kernels (gemm_rows_bf16.c, gemm_q8dot.c) take their exact emulation instead of the
 * instruction, the same bits either way */
static inline int sk_dot_emulate_env(void) {
    const char *e = getenv("SKIPLM_DOT_EMULATE");
    return e && *e && strcmp(e, "0");
}

#endif

/* RMSNorm: out = w * x / sqrt(mean(x^2) + eps). Saves rstd (N). */
void sk_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w,
                        int N, int C, float eps);
/* dinp += the input's gradient; dw += the weight's (dw NULL: only dinp) */
void sk_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                         const float *w, const float *rstd, int N, int C);

/* RoPE on n_heads heads of size hs inside rows of width row (heads start at col0):
 * pairs (x[2j], x[2j+1]) of the head at position pos0 + t are rotated by angle
 * (pos0 + t) * freq[j] (theta^(-2j/hs), or rescaled: sk_rope_freqs); table (max_pos, hs/2, 2)
 * holds (cos, sin). inverse = 1 rotates back (the backward pass). x is (B, T, row). */
void sk_rope_table(float *table, int max_pos, int hs, const double *freq);
void sk_rope(float *x, const float *table, int B, int T, int row, int col0, int n_heads,
             int hs, int pos0, int inverse);

/* SwiGLU on h (N, 2F) = [a | b]: out (N, F) = silu(a) * b. */
void sk_swiglu_forward(float *out, const float *h, int N, int F);
/* dh (N, 2F) = gradients of a and b (overwritten). */
void sk_swiglu_backward(float *dh, const float *h, const float *dout, int N, int F);
