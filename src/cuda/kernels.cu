/* CUDA kernels for every layer op except attention (src/cuda/attention.cu): embeddings,
 * LayerNorm/RMSNorm, bias, GELU/ReLU/SwiGLU, RoPE, residual, dropout, the fused softmax
 * cross-entropy, AdamW and the gradient norm. Each mirrors its CPU twin in src/ops.c,
 * src/model.c or src/optim.c; see src/cuda/cuda_kernels.h for the contracts.
 *
 * Determinism: no atomics anywhere. Every reduction over rows runs in a fixed order that
 * depends only on the shapes (row chunks, then the chunks in order), so a run is
 * bit-identical from run to run on the same GPU. */
#include "cuda_kernels.h"
#include "cuda_compat.cuh"
#include <math.h>

#define BS 256

static unsigned blocks_for(size_t n, int bs) {
    size_t b = (n + bs - 1) / bs;
    return (unsigned)(b < 1 ? 1 : b);
}

/* ---------------------------------------------------------------- reductions */

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Block-wide sum or max (blockDim.x a multiple of 32); every thread gets the result. */
template <bool MAX>
__device__ float block_reduce(float v) {
    __shared__ float sh[32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = MAX ? warp_max(v) : warp_sum(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        float x = lane < nw ? sh[lane] : (MAX ? -INFINITY : 0.0f);
        x = MAX ? warp_max(x) : warp_sum(x);
        if (lane == 0) sh[0] = x;
    }
    __syncthreads();
    float r = sh[0];
    __syncthreads();          /* sh may be reused by the next call */
    return r;
}

__device__ double block_sum_d(double v) {
    __shared__ double sh[32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum_d(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        double x = lane < nw ? sh[lane] : 0.0;
        x = warp_sum_d(x);
        if (lane == 0) sh[0] = x;
    }
    __syncthreads();
    double r = sh[0];
    __syncthreads();
    return r;
}

/* ------------------------------------------------------------------ embeddings */

extern "C" { __thread cudaStream_t sk_cu_stream = 0; }

__global__ void encoder_fwd_k(float *out, const int32_t *tok, const float *wte, const float *wpe, const int32_t *pos0_d,
                              int T, int C, size_t n) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    size_t bt = idx / C;
    int c = (int)(idx % C), t = (int)(bt % T) + (pos0_d ? *pos0_d : 0);
    float e = wte[(size_t)tok[bt] * C + c];
    out[idx] = wpe ? e + wpe[(size_t)t * C + c] : e;
}
extern "C" void cu_encoder_forward(float *out, const int32_t *tok, const float *wte, const float *wpe,
                                   const int32_t *pos0_d, int B, int T, int C) {
    size_t n = (size_t)B * T * C;
    LAUNCH(encoder_fwd_k, blocks_for(n, BS), BS, 0, out, tok, wte, wpe, pos0_d, T, C, n);
}

/* one block per distinct token u; threads over columns; positions in increasing order */
__global__ void encoder_bwd_wte_k(float *dwte, const float *dout, const int32_t *uniq, const int32_t *off,
                                  const int32_t *pos, int C) {
    const int u = blockIdx.x;
    float *d = dwte + (size_t)uniq[u] * C;
    const int k0 = off[u], k1 = off[u + 1];
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = d[c];
        for (int k = k0; k < k1; k++) acc += dout[(size_t)pos[k] * C + c];
        d[c] = acc;
    }
}
extern "C" void cu_encoder_backward_wte(float *dwte, const float *dout, const int32_t *uniq, const int32_t *off,
                                        const int32_t *pos, int n_uniq, int C) {
    if (n_uniq > 0) LAUNCH(encoder_bwd_wte_k, n_uniq, 128, 0, dwte, dout, uniq, off, pos, C);
}

__global__ void encoder_bwd_wpe_k(float *dwpe, const float *dout, int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * C) return;
    float acc = dwpe[idx];
    for (int b = 0; b < B; b++) acc += dout[(size_t)b * T * C + idx];
    dwpe[idx] = acc;
}
extern "C" void cu_encoder_backward_wpe(float *dwpe, const float *dout, int B, int T, int C) {
    LAUNCH(encoder_bwd_wpe_k, blocks_for((size_t)T * C, BS), BS, 0, dwpe, dout, B, T, C);
}

/* ----------------------------------------------------------------------- norms */

/* one warp per row */
__global__ void layernorm_fwd_k(float *out, uint16_t *out16, float *mean, float *rstd, const float *inp, const float *w,
                                const float *b, int N, int C, float eps) {
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;                      /* uniform over the warp */
    const float *x = inp + (size_t)row * C;
    const size_t o = (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += x[c];
    const float m = warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) { float d = x[c] - m; v += d * d; }
    v = warp_sum(v) / C;
    const float r = 1.0f / sqrtf(v + eps);
    for (int c = lane; c < C; c += 32) put(out, out16, o + c, (x[c] - m) * r * w[c] + (b ? b[c] : 0.0f));
    if (lane == 0) { if (mean) mean[row] = m; rstd[row] = r; }
}
extern "C" void cu_layernorm_forward(float *out, uint16_t *out16, float *mean, float *rstd, const float *inp,
                                     const float *w, const float *b, int N, int C, float eps) {
    LAUNCH(layernorm_fwd_k, blocks_for((size_t)N, BS / 32), BS, 0, out, out16, mean, rstd, inp, w, b, N, C, eps);
}

__global__ void layernorm_bwd_dx_k(float *dinp, const float *dout, const uint16_t *dout16, int rnd, const float *inp,
                                   const float *w, const float *mean, const float *rstd, int N, int C) {
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const size_t o = (size_t)row * C;
    const float *x = inp + o;
    float *dx = dinp + o;
    const float m = mean[row], s = rstd[row];
    float dmean = 0.0f, dnx = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float dn = w[c] * get_r(dout, dout16, o + c, rnd);
        dmean += dn;
        dnx += dn * (x[c] - m) * s;
    }
    dmean = warp_sum(dmean) / C;
    dnx = warp_sum(dnx) / C;
    for (int c = lane; c < C; c += 32) {
        float nx = (x[c] - m) * s;
        dx[c] += s * (w[c] * get_r(dout, dout16, o + c, rnd) - dmean - nx * dnx);
    }
}

/* Row chunks of the two-stage column reductions. */
extern "C" int cu_colsum_chunks(int N) { return N < 256 ? (N > 0 ? N : 1) : 256; }

/* Stage 1: part[r, c] (and part[R + r, c]) = sums over the rows of chunk r, in row order.
 * mode 0: column sums of x (or x16, bf16), x rounded to bf16 into copy16 (packed) when
 * given; mode 1: LayerNorm dw (dy * xhat) and db (dy); mode 2: RMSNorm dw (dy * x * rstd);
 * dy read as get_r(dy, dy16, rnd) (cu_layernorm_backward). */
__global__ void colsum_part_k(float *part, const float *x, const uint16_t *x16, uint16_t *copy16, const float *dy,
                              const uint16_t *dy16, int rnd, const float *mean, const float *rstd, int N, int ncols,
                              int ld, int R, int mode) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
    if (c >= ncols) return;
    const int per = (N + R - 1) / R, n0 = r * per, n1 = min(N, n0 + per);
    float a = 0.0f, bsum = 0.0f;
    for (int n = n0; n < n1; n++) {
        if (mode == 0) {
            const float v = get(x, x16, (size_t)n * ld + c);
            a += v;
            if (copy16) copy16[(size_t)n * ncols + c] = bf16_bits(v);
        } else if (mode == 1) {
            float g = get_r(dy, dy16, (size_t)n * ncols + c, rnd);
            a += g * (x[(size_t)n * ncols + c] - mean[n]) * rstd[n];
            bsum += g;
        } else {
            a += get_r(dy, dy16, (size_t)n * ncols + c, rnd) * x[(size_t)n * ncols + c] * rstd[n];
        }
    }
    part[(size_t)r * ncols + c] = a;
    if (mode == 1) part[(size_t)(R + r) * ncols + c] = bsum;
}
/* Stage 2: out[c] += sum over the chunks in order (out2 likewise from the second half). */
__global__ void colsum_finish_k(float *out, float *out2, const float *part, int ncols, int R) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= ncols) return;
    float a = 0.0f, b = 0.0f;
    for (int r = 0; r < R; r++) a += part[(size_t)r * ncols + c];
    out[c] += a;
    if (out2) {
        for (int r = 0; r < R; r++) b += part[(size_t)(R + r) * ncols + c];
        out2[c] += b;
    }
}

/* A norm's whole backward in one pass over dy and x (mean NULL: RMSNorm): dinp as the
 * warp-per-row kernels above (the same expressions, so the same bits), and the weight (and
 * bias) gradients' partial column sums of the block's rows, in a fixed order: block g owns
 * rows [g * per, (g + 1) * per), its warp i the rows i, i + NW, ... of them, each lane its
 * columns lane + 32k (k < K) in registers; the warps' sums are then added in warp order into
 * part[g] (and part[G + g]), which colsum_finish_k adds in block order. Deterministic, one
 * read of dy and x where the dx kernel and the column-sum pass each read both. */
template <int K>
__global__ void __launch_bounds__(BS) norm_bwd_fused_k(float *dinp, float *part, const float *dout,
                                                       const uint16_t *dout16, int rnd, const float *inp,
                                                       const float *w, const float *mean, const float *rstd, int N,
                                                       int C, int per) {
    __shared__ float red[2][32 * K];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, NW = blockDim.x >> 5, g = blockIdx.x;
    const int n0 = g * per, n1 = min(N, n0 + per);
    float wv[K], aw[K], ab[K];
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int c = lane + 32 * k;
        wv[k] = c < C ? w[c] : 0.0f;
        aw[k] = ab[k] = 0.0f;
    }
    for (int n = n0 + warp; n < n1; n += NW) {
        const size_t o = (size_t)n * C;
        const float *x = inp + o;
        float *dx = dinp + o;
        const float s = rstd[n];
        if (mean) {
            const float m = mean[n];
            float dmean = 0.0f, dnx = 0.0f;
#pragma unroll
            for (int k = 0; k < K; k++) {
                const int c = lane + 32 * k;
                if (c >= C) break;
                float dn = wv[k] * get_r(dout, dout16, o + c, rnd);
                dmean += dn;
                dnx += dn * (x[c] - m) * s;
            }
            dmean = warp_sum(dmean) / C;
            dnx = warp_sum(dnx) / C;
#pragma unroll
            for (int k = 0; k < K; k++) {
                const int c = lane + 32 * k;
                if (c >= C) break;
                const float gy = get_r(dout, dout16, o + c, rnd), nx = (x[c] - m) * s;
                dx[c] += s * (wv[k] * gy - dmean - nx * dnx);
                aw[k] += gy * (x[c] - m) * s;
                ab[k] += gy;
            }
        } else {
            float dot = 0.0f;
#pragma unroll
            for (int k = 0; k < K; k++) {
                const int c = lane + 32 * k;
                if (c >= C) break;
                dot += wv[k] * get_r(dout, dout16, o + c, rnd) * x[c];
            }
            dot = warp_sum(dot) * (s * s / C);
#pragma unroll
            for (int k = 0; k < K; k++) {
                const int c = lane + 32 * k;
                if (c >= C) break;
                const float gy = get_r(dout, dout16, o + c, rnd);
                dx[c] += s * (wv[k] * gy - x[c] * dot);
                aw[k] += gy * x[c] * s;
            }
        }
    }
    for (int i = 0; i < NW; i++) {            /* the warps' sums, in warp order */
        if (warp == i)
#pragma unroll
            for (int k = 0; k < K; k++) {
                const int c = lane + 32 * k;
                if (c >= C) break;
                red[0][c] = i ? red[0][c] + aw[k] : aw[k];
                red[1][c] = i ? red[1][c] + ab[k] : ab[k];
            }
        __syncthreads();
    }
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        part[(size_t)g * C + c] = red[0][c];
        if (mean) part[(size_t)(gridDim.x + g) * C + c] = red[1][c];
    }
}
/* the fused backward for C up to 2048 (the lanes' column registers, K of 4 to 64); else 0 */
static int norm_backward_fused(float *dinp, float *dw, float *db, const float *dout, const uint16_t *dout16, int rnd,
                               const float *inp, const float *w, const float *mean, const float *rstd, int N, int C,
                               float *part) {
    typedef void (*Kern)(float *, float *, const float *, const uint16_t *, int, const float *, const float *,
                         const float *, const float *, int, int, int);
    const int k = (C + 31) / 32;
    const Kern kern = k <= 4 ? norm_bwd_fused_k<4> : k <= 8 ? norm_bwd_fused_k<8> : k <= 16 ? norm_bwd_fused_k<16>
                    : k <= 24 ? norm_bwd_fused_k<24> : k <= 32 ? norm_bwd_fused_k<32> : k <= 48 ? norm_bwd_fused_k<48>
                    : k <= 64 ? norm_bwd_fused_k<64> : NULL;
    if (!kern || N <= 0) return 0;
    /* 16 rows per block (2 per warp), at most cu_colsum_chunks(N) blocks: part's size */
    const int G = min(cu_colsum_chunks(N), (N + 15) / 16), per = (N + G - 1) / G;
    LAUNCH(kern, G, BS, 0, dinp, part, dout, dout16, rnd, inp, w, mean, rstd, N, C, per);
    LAUNCH(colsum_finish_k, blocks_for((size_t)C, 128), 128, 0, dw, db, part, C, G);
    return 1;
}

extern "C" void cu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const uint16_t *dout16,
                                      int rnd, const float *inp, const float *w, const float *mean, const float *rstd,
                                      int N, int C, float *part, int fused) {
    if (fused && norm_backward_fused(dinp, dw, db, dout, dout16, rnd, inp, w, mean, rstd, N, C, part)) return;
    LAUNCH(layernorm_bwd_dx_k, blocks_for((size_t)N, BS / 32), BS, 0, dinp, dout, dout16, rnd, inp, w, mean, rstd, N, C);
    const int R = cu_colsum_chunks(N);
    dim3 g(blocks_for((size_t)C, 128), R);
    LAUNCH(colsum_part_k, g, 128, 0, part, inp, NULL, NULL, dout, dout16, rnd, mean, rstd, N, C, C, R, 1);
    LAUNCH(colsum_finish_k, blocks_for((size_t)C, 128), 128, 0, dw, db, part, C, R);
}

extern "C" void cu_colsum_add(float *out, const float *x, const uint16_t *x16, uint16_t *copy16, int N, int ncols,
                              int ld, float *part) {
    const int R = cu_colsum_chunks(N);
    dim3 g(blocks_for((size_t)ncols, 128), R);
    LAUNCH(colsum_part_k, g, 128, 0, part, x, x16, copy16, NULL, NULL, 0, NULL, NULL, N, ncols, ld, R, 0);
    LAUNCH(colsum_finish_k, blocks_for((size_t)ncols, 128), 128, 0, out, NULL, part, ncols, R);
}

__global__ void rmsnorm_fwd_k(float *out, uint16_t *out16, float *rstd, const float *inp, const float *w, int N, int C, float eps) {
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    const size_t o = (size_t)row * C;
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) ss += x[c] * x[c];
    const float s = 1.0f / sqrtf(warp_sum(ss) / C + eps);
    for (int c = lane; c < C; c += 32) put(out, out16, o + c, w[c] * (x[c] * s));
    if (lane == 0) rstd[row] = s;
}
extern "C" void cu_rmsnorm_forward(float *out, uint16_t *out16, float *rstd, const float *inp, const float *w,
                                   int N, int C, float eps) {
    LAUNCH(rmsnorm_fwd_k, blocks_for((size_t)N, BS / 32), BS, 0, out, out16, rstd, inp, w, N, C, eps);
}

__global__ void rmsnorm_bwd_dx_k(float *dinp, const float *dout, const uint16_t *dout16, int rnd, const float *inp,
                                 const float *w, const float *rstd, int N, int C) {
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const size_t o = (size_t)row * C;
    const float *x = inp + o;
    float *dx = dinp + o;
    const float s = rstd[row];
    float dot = 0.0f;
    for (int c = lane; c < C; c += 32) dot += w[c] * get_r(dout, dout16, o + c, rnd) * x[c];
    dot = warp_sum(dot) * (s * s / C);
    for (int c = lane; c < C; c += 32) dx[c] += s * (w[c] * get_r(dout, dout16, o + c, rnd) - x[c] * dot);
}
extern "C" void cu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const uint16_t *dout16, int rnd,
                                    const float *inp, const float *w, const float *rstd, int N, int C, float *part,
                                    int fused) {
    if (fused && norm_backward_fused(dinp, dw, NULL, dout, dout16, rnd, inp, w, NULL, rstd, N, C, part)) return;
    LAUNCH(rmsnorm_bwd_dx_k, blocks_for((size_t)N, BS / 32), BS, 0, dinp, dout, dout16, rnd, inp, w, rstd, N, C);
    const int R = cu_colsum_chunks(N);
    dim3 g(blocks_for((size_t)C, 128), R);
    LAUNCH(colsum_part_k, g, 128, 0, part, inp, NULL, NULL, dout, dout16, rnd, NULL, rstd, N, C, C, R, 2);
    LAUNCH(colsum_finish_k, blocks_for((size_t)C, 128), 128, 0, dw, NULL, part, C, R);
}

__global__ void bias_broadcast_k(float *out, const float *b, int ncols, int ld, size_t n) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    size_t r = idx / ncols;
    int c = (int)(idx % ncols);
    out[r * ld + c] = b[c];
}
extern "C" void cu_bias_broadcast(float *out, const float *b, int N, int ncols, int ld) {
    size_t n = (size_t)N * ncols;
    LAUNCH(bias_broadcast_k, blocks_for(n, BS), BS, 0, out, b, ncols, ld, n);
}

__global__ void bias_residual_k(float *out, const float *res, const float *b, int ncols, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = b ? res[i] + b[i % (size_t)ncols] : res[i];
}
extern "C" void cu_bias_residual(float *out, const float *res, const float *b, int N, int ncols) {
    size_t n = (size_t)N * ncols;
    LAUNCH(bias_residual_k, blocks_for(n, BS), BS, 0, out, res, b, ncols, n);
}

/* ----------------------------------------------------------------- elementwise */

#define SQRT_2_OVER_PI 0.7978845608028654f
#define INV_SQRT2 0.7071067811865476f
#define INV_SQRT_2PI 0.3989422804014327f

/* The MLP activations read the pre-activation h from inp (fp32) or, in bf16, from inp16.
 * They take the c_fc bias b (F, or NULL): x = h + b is written back in h's place (rounded
 * to bf16 in inp16, and activated as rounded: the backward reads what the forward used), so
 * the GEMM before runs without it. The backward reads dout or dout16 and writes dinp or
 * dinp16 (fp32, or bf16 when that is only a GEMM's operand). */
__device__ __forceinline__ float gelu_grad(float x, int tanh_approx) {
    if (!tanh_approx) return 0.5f * (1.0f + erff(x * INV_SQRT2)) + x * INV_SQRT_2PI * expf(-0.5f * x * x);
    float u = SQRT_2_OVER_PI * (x + 0.044715f * x * x * x);
    float t = tanhf(u);
    float du = SQRT_2_OVER_PI * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}
__global__ void gelu_fwd_k(float *out, uint16_t *out16, float *inp, uint16_t *inp16, const float *b, int F, size_t n,
                           int tanh_approx) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = get(inp, inp16, i);
    if (b) x = put_get(inp, inp16, i, x + b[i % (size_t)F]);
    put(out, out16, i, tanh_approx ? 0.5f * x * (1.0f + tanhf(SQRT_2_OVER_PI * (x + 0.044715f * x * x * x)))
                                   : 0.5f * x * (1.0f + erff(x * INV_SQRT2)));
}
extern "C" void cu_gelu_forward(float *out, uint16_t *out16, float *inp, uint16_t *inp16, const float *b, int F,
                                size_t n, int tanh_approx) {
    LAUNCH(gelu_fwd_k, blocks_for(n, BS), BS, 0, out, out16, inp, inp16, b, F, n, tanh_approx);
}

__global__ void gelu_bwd_k(float *dinp, uint16_t *dinp16, const float *inp, const uint16_t *inp16, const float *dout,
                           const uint16_t *dout16, size_t n, int tanh_approx) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    put(dinp, dinp16, i, gelu_grad(get(inp, inp16, i), tanh_approx) * get(dout, dout16, i));
}
extern "C" void cu_gelu_backward(float *dinp, uint16_t *dinp16, const float *inp, const uint16_t *inp16,
                                 const float *dout, const uint16_t *dout16, size_t n, int tanh_approx) {
    LAUNCH(gelu_bwd_k, blocks_for(n, BS), BS, 0, dinp, dinp16, inp, inp16, dout, dout16, n, tanh_approx);
}

__global__ void relu_fwd_k(float *out, uint16_t *out16, float *inp, uint16_t *inp16, const float *b, int F, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = get(inp, inp16, i);
    if (b) x = put_get(inp, inp16, i, x + b[i % (size_t)F]);
    put(out, out16, i, x > 0.0f ? x : 0.0f);
}
__global__ void relu_bwd_k(float *dinp, uint16_t *dinp16, const float *inp, const uint16_t *inp16, const float *dout,
                           const uint16_t *dout16, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) put(dinp, dinp16, i, get(inp, inp16, i) > 0.0f ? get(dout, dout16, i) : 0.0f);
}
extern "C" void cu_relu_forward(float *out, uint16_t *out16, float *inp, uint16_t *inp16, const float *b, int F,
                                size_t n) {
    LAUNCH(relu_fwd_k, blocks_for(n, BS), BS, 0, out, out16, inp, inp16, b, F, n);
}
extern "C" void cu_relu_backward(float *dinp, uint16_t *dinp16, const float *inp, const uint16_t *inp16,
                                 const float *dout, const uint16_t *dout16, size_t n) {
    LAUNCH(relu_bwd_k, blocks_for(n, BS), BS, 0, dinp, dinp16, inp, inp16, dout, dout16, n);
}

/* h (N, 2F) = [a | b]: out = silu(a) * b */
__global__ void swiglu_fwd_k(float *out, uint16_t *out16, const float *h, const uint16_t *h16, int F, size_t n) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    size_t r = idx / F;
    int f = (int)(idx % F);
    float a = get(h, h16, r * 2 * F + f), b = get(h, h16, r * 2 * F + F + f);
    put(out, out16, idx, a / (1.0f + expf(-a)) * b);
}
__global__ void swiglu_bwd_k(float *dh, uint16_t *dh16, const float *h, const uint16_t *h16, const float *dout,
                             const uint16_t *dout16, int F, size_t n) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    size_t r = idx / F;
    int f = (int)(idx % F);
    float a = get(h, h16, r * 2 * F + f), b = get(h, h16, r * 2 * F + F + f), dy = get(dout, dout16, idx);
    float sg = 1.0f / (1.0f + expf(-a)), silu = a * sg;
    put(dh, dh16, r * 2 * F + f, dy * b * sg * (1.0f + a * (1.0f - sg)));
    put(dh, dh16, r * 2 * F + F + f, dy * silu);
}
extern "C" void cu_swiglu_forward(float *out, uint16_t *out16, const float *h, const uint16_t *h16, int N, int F) {
    size_t n = (size_t)N * F;
    LAUNCH(swiglu_fwd_k, blocks_for(n, BS), BS, 0, out, out16, h, h16, F, n);
}
extern "C" void cu_swiglu_backward(float *dh, uint16_t *dh16, const float *h, const uint16_t *h16, const float *dout,
                                   const uint16_t *dout16, int N, int F) {
    size_t n = (size_t)N * F;
    LAUNCH(swiglu_bwd_k, blocks_for(n, BS), BS, 0, dh, dh16, h, h16, dout, dout16, F, n);
}

/* one thread per rotated pair (bt, head, j) */
__global__ void rope_k(float *x, const float *table, int T, int row, int col0, int n_heads, int hs, int pos0,
                       float sgn, size_t n) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    const int half = hs / 2;
    int j = (int)(idx % half);
    size_t rest = idx / half;
    int h = (int)(rest % n_heads);
    size_t bt = rest / n_heads;
    const float *tab = table + (size_t)(pos0 + (int)(bt % T)) * hs;
    float *v = x + bt * row + col0 + (size_t)h * hs;
    float c = tab[2 * j], s = sgn * tab[2 * j + 1];
    float a = v[2 * j], b = v[2 * j + 1];
    v[2 * j] = a * c - b * s;
    v[2 * j + 1] = a * s + b * c;
}
extern "C" void cu_rope(float *x, const float *table, int B, int T, int row, int col0, int n_heads, int hs, int pos0, int inverse) {
    size_t n = (size_t)B * T * n_heads * (hs / 2);
    if (n) LAUNCH(rope_k, blocks_for(n, BS), BS, 0, x, table, T, row, col0, n_heads, hs, pos0, inverse ? -1.0f : 1.0f, n);
}

__global__ void add_k(float *y, const float *x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}
extern "C" void cu_add_inplace(float *y, const float *x, size_t n) { LAUNCH(add_k, blocks_for(n, BS), BS, 0, y, x, n); }

/* ------------------------------------------------------------- precision */

__global__ void to_bf16_k(uint16_t *dst, const float *src, size_t n, int cols, size_t ld) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = bf16_bits(src[(i / cols) * ld + i % cols]);
}
/* one thread per pair of head dims (2e, 2e+1) of a (row, head) */
__global__ void qkv_bf16_k(uint16_t *dst, const float *src, const float *bias, const float *rope, size_t n, int T,
                           int ld, int c0, int heads, int hs, int rope_cols, int qcols, float scale) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int half = (hs + 1) / 2;
    if (i >= n) return;
    const int e = (int)(i % half), u = (int)(i / half % heads);
    const size_t r = i / half / heads;
    const int c = c0 + u * hs + 2 * e;
    const size_t at = r * ld + c;
    float a = src[at] + (bias ? bias[c] : 0.0f);
    const float s = c < qcols ? scale : 1.0f;          /* the attention kernels' own rounding */
    if (2 * e + 1 >= hs) { dst[at] = bf16_bits(a * s); return; }
    float b = src[at + 1] + (bias ? bias[c + 1] : 0.0f);
    if (rope && c < rope_cols) {                       /* as rope_k */
        const float *tab = rope + (r % T) * hs;
        const float co = tab[2 * e], si = tab[2 * e + 1], a0 = a;
        a = a0 * co - b * si;
        b = a0 * si + b * co;
    }
    dst[at] = bf16_bits(a * s);
    dst[at + 1] = bf16_bits(b * s);
}
extern "C" void cu_qkv_bf16(uint16_t *dst, const float *src, const float *bias, const float *rope, int N, int T, int ld,
                            int c0, int c1, int hs, int rope_cols, int qcols, float scale) {
    const int heads = (c1 - c0) / hs;
    const size_t n = (size_t)N * heads * ((hs + 1) / 2);
    if (n) LAUNCH(qkv_bf16_k, blocks_for(n, BS), BS, 0, dst, src, bias, rope, n, T, ld, c0, heads, hs, rope_cols,
                  qcols, scale);
}
extern "C" void cu_to_bf16(uint16_t *dst, const float *src, size_t rows, int cols, size_t ld) {
    const size_t n = rows * (size_t)cols;
    if (n) LAUNCH(to_bf16_k, blocks_for(n, BS), BS, 0, dst, src, n, cols, ld);
}

/* sk_hash32 of src/ops.h, bit for bit */
__device__ __forceinline__ uint32_t hash32(uint64_t seed, uint64_t stream, uint64_t i) {
    uint64_t z = seed ^ (stream * 0x9E3779B97F4A7C15ULL) ^ (i * 0xD1B54A32D192ED03ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (uint32_t)(z >> 32);
}
__global__ void dropout_k(float *x, size_t n, uint32_t thr, float scale, uint64_t seed, uint64_t stream) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = hash32(seed, stream, i) >= thr ? x[i] * scale : 0.0f;
}
extern "C" void cu_dropout(float *x, size_t n, float p, uint64_t seed, uint64_t stream) {
    if (p <= 0.0f || n == 0) return;
    uint32_t thr = (uint32_t)fmin((double)p * 4294967296.0, 4294967295.0);
    LAUNCH(dropout_k, blocks_for(n, BS), BS, 0, x, n, thr, 1.0f / (1.0f - p), seed, stream);
}

/* ------------------------------------------------------------------ classifier */

/* One pass over the row for both softmax statistics (an online max and rescaled sum per
 * thread, combined across the block), a second for the gradient: two reads of the logits,
 * the least the gradient allows. */
/* one block per row; the logits are fp32 (logits) or bf16 (z16: the gradient then
 * replaces them in bf16) */
__global__ void crossentropy_k(float *logits, uint16_t *z16, float *losses, const int32_t *targets, int V, int Vp,
                               float row_scale, int backward) {
    const int r = blockIdx.x;
    float *z = z16 ? NULL : logits + (size_t)r * Vp;
    uint16_t *zh = z16 ? z16 + (size_t)r * Vp : NULL;
#define ZV(v) (zh ? bf16_float(zh[v]) : z[v])
    const int tgt = targets[r];
    float m = -INFINITY, s = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        const float x = ZV(v);
        if (x > m) { s = s * expf(m - x) + 1.0f; m = x; }     /* expf(-inf) = 0 on the first */
        else if (x != -INFINITY) s += expf(x - m);           /* -inf adds 0; a NaN makes s NaN */
    }
    const float mx = block_reduce<true>(m);
    const float sum = block_reduce<false>(s == 0.0f ? 0.0f : s * expf(m - mx));   /* NaN stays NaN */
    const float lse = mx + logf(sum);
    if (threadIdx.x == 0) losses[r] = tgt >= 0 ? lse - ZV(tgt) : 0.0f;
    if (!backward) return;
    __syncthreads();          /* z[tgt] is read above before any thread overwrites it */
    const float sc = tgt >= 0 ? row_scale : 0.0f;
    for (int v = threadIdx.x; v < Vp; v += blockDim.x) {
        float g = 0.0f;
        if (v < V) {
            g = sc * expf(ZV(v) - lse);
            if (v == tgt) g -= sc;
        }
        if (zh) zh[v] = bf16_bits(g);
        else z[v] = g;
    }
#undef ZV
}
extern "C" void cu_crossentropy(float *logits, uint16_t *z16, float *losses, const int32_t *targets, int N, int V,
                                int Vp, float row_scale, int backward) {
    if (N > 0) LAUNCH(crossentropy_k, N, 512, 0, logits, z16, losses, targets, V, Vp, row_scale, backward);
}

/* ------------------------------------------------------------------- optimizer */

/* __f*_rn: no contraction into FMA, so each operation rounds as on the CPU (src/optim.c) */
__global__ void adamw_k(float *p, uint16_t *p16, const float *g, float *m, float *v, const cu_span *spans, float decay,
                        float b1, float b2, float a1, float a2, float step_size, float bc2_sqrt, float eps,
                        int wd, float clip_coef) {
    const cu_span sp = spans[blockIdx.x];
    const int dec = wd && sp.decay;
    const size_t stride = (size_t)blockDim.x * gridDim.y;
    for (size_t i = (size_t)blockIdx.y * blockDim.x + threadIdx.x; i < sp.n; i += stride) {
        const size_t o = sp.offset + i;
        float gi = g[o];
        if (clip_coef != 1.0f) gi = __fmul_rn(gi, clip_coef);
        float pi = p[o];
        if (dec) pi = __fmul_rn(pi, decay);
        float mi = __fadd_rn(__fmul_rn(m[o], b1), __fmul_rn(a1, gi));
        float vi = __fadd_rn(__fmul_rn(v[o], b2), __fmul_rn(__fmul_rn(a2, gi), gi));
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
        pi = __fadd_rn(pi, __fmul_rn(-step_size, __fdiv_rn(mi, denom)));
        p[o] = pi; m[o] = mi; v[o] = vi;
        if (p16) p16[o] = bf16_bits(pi);
    }
}
/* about 16 elements per thread per block, at most 64 blocks per span */
extern "C" int cu_span_split(size_t max_span) {
    size_t s = (max_span + (size_t)BS * 16 - 1) / ((size_t)BS * 16);
    return s < 1 ? 1 : s > 64 ? 64 : (int)s;
}
extern "C" void cu_adamw(float *p, uint16_t *p16, const float *g, float *m, float *v, const cu_span *spans, int n_spans,
                         int split, float decay, float b1, float b2, float a1, float a2, float step_size, float bc2_sqrt,
                         float eps, int wd, float clip_coef) {
    if (n_spans > 0)
        LAUNCH(adamw_k, dim3(n_spans, split), BS, 0, p, p16, g, m, v, spans, decay, b1, b2, a1, a2, step_size, bc2_sqrt,
               eps, wd, clip_coef);
}

__global__ void span_sq_k(double *part, const float *g, const cu_span *spans) {
    const cu_span sp = spans[blockIdx.x];
    double acc = 0.0;
    const size_t stride = (size_t)blockDim.x * gridDim.y;
    for (size_t i = (size_t)blockIdx.y * blockDim.x + threadIdx.x; i < sp.n; i += stride) {
        double x = (double)g[sp.offset + i];
        acc += x * x;
    }
    acc = block_sum_d(acc);
    if (threadIdx.x == 0) part[(size_t)blockIdx.x * gridDim.y + blockIdx.y] = acc;
}
extern "C" void cu_span_sq(double *part, const float *g, const cu_span *spans, int n_spans, int split) {
    if (n_spans > 0) LAUNCH(span_sq_k, dim3(n_spans, split), BS, 0, part, g, spans);
}
