/* CUDA kernels: elementwise ops: GELU, ReLU and SwiGLU forward and backward (with the bias
 * folded in), RoPE and the residual add (src/core/ops.c, src/core/model.c); each mirrors its
 * CPU twin, see src/cuda/cuda_kernels.h for the contracts. */
#include "kernels_common.cuh"

/* ----------------------------------------------------------------- elementwise */

#define SQRT_2_OVER_PI 0.7978845608028654f
#define INV_SQRT2 0.7071067811865476f
#define INV_SQRT_2PI 0.3989422804014327f

/* The MLP activations read the pre-activation h from inp (fp32) or, in bf16, from inp16.
 * They take the c_fc bias b (F, or NULL): x = h + b is written back in h's place (rounded
 * to bf16 in inp16, and activated as rounded: the backward reads what the forward used), so
 * the GEMM before runs without it. The backward reads dout or dout16 and writes dinp or
 * dinp16 (fp32, or bf16 when that is only a GEMM's operand).
 * The forwards run over rows of F (the last one partial when F does not divide n: then
 * V = 1), the backwards over the n elements, V consecutive ones per thread (the tail, past
 * the last whole group of V, one by one). */
__device__ __forceinline__ float gelu_grad(float x, int tanh_approx) {
    if (!tanh_approx) return 0.5f * (1.0f + erff(x * INV_SQRT2)) + x * INV_SQRT_2PI * expf(-0.5f * x * x);
    float u = SQRT_2_OVER_PI * (x + 0.044715f * x * x * x);
    float t = tanhf(u);
    float du = SQRT_2_OVER_PI * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}
__device__ __forceinline__ float gelu_fwd(float x, int tanh_approx) {
    return tanh_approx ? 0.5f * x * (1.0f + tanhf(SQRT_2_OVER_PI * (x + 0.044715f * x * x * x)))
                       : 0.5f * x * (1.0f + erff(x * INV_SQRT2));
}
/* the pre-activation with its bias, written back and returned as stored (put_get) */
template <int V>
__device__ __forceinline__ void add_bias_in_place(float *inp, uint16_t *inp16, const float *b, size_t i, int c,
                                                  float (&x)[V]) {
#pragma unroll
    for (int k = 0; k < V; k++) {
        x[k] = x[k] + b[c + k];
        if (inp16) x[k] = bf16_float(bf16_bits(x[k]));
    }
    stv<V, true>(inp, inp16, i, x);
}
/* ACT 0: GELU (erf), 1: GELU (tanh), 2: ReLU */
template <int ACT> __device__ __forceinline__ float act_fwd(float x) {
    return ACT == 2 ? (x > 0.0f ? x : 0.0f) : gelu_fwd(x, ACT);
}
template <int V, int ACT>
__global__ void act_fwd_k(float *out, uint16_t *out16, float *inp, uint16_t *inp16, const float *b, int F, size_t n) {
    const size_t rows = (n + F - 1) / F;
    for (size_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const size_t o = r * F;
        const int cols = n - o < (size_t)F ? (int)(n - o) : F;
        for (int c = (blockIdx.x * blockDim.x + threadIdx.x) * V; c < cols; c += gridDim.x * blockDim.x * V) {
            float x[V], y[V];
            ldv<V>(inp, inp16, o + c, x);
            if (b) add_bias_in_place<V>(inp, inp16, b, o + c, c, x);
#pragma unroll
            for (int k = 0; k < V; k++) y[k] = act_fwd<ACT>(x[k]);
            stv<V, ACT != 2>(out, out16, o + c, y);
        }
    }
}
static void act_forward(int act, float *out, uint16_t *out16, float *inp, uint16_t *inp16, const float *b, int F,
                        size_t n) {
    typedef void (*Kern)(float *, uint16_t *, float *, uint16_t *, const float *, int, size_t);
    if (n == 0 || F <= 0) return;
    const int V = F % 8 == 0 && n % F == 0 && al(out, 16) && al(out16, 16) && al(inp, 16) && al(inp16, 16) ? 8 : 1;
    static const Kern K[2][3] = {{act_fwd_k<1, 0>, act_fwd_k<1, 1>, act_fwd_k<1, 2>},
                                 {act_fwd_k<8, 0>, act_fwd_k<8, 1>, act_fwd_k<8, 2>}};
    dim3 g;
    int bs;
    rows_grid((n + F - 1) / F, ((size_t)F + V - 1) / V, &g, &bs);
    LAUNCH(K[V == 8][act], g, bs, 0, out, out16, inp, inp16, b, F, n);
}
extern "C" void cu_gelu_forward(float *out, uint16_t *out16, float *inp, uint16_t *inp16, const float *b, int F,
                                size_t n, int tanh_approx) {
    act_forward(tanh_approx ? 1 : 0, out, out16, inp, inp16, b, F, n);
}
extern "C" void cu_relu_forward(float *out, uint16_t *out16, float *inp, uint16_t *inp16, const float *b, int F,
                                size_t n) {
    act_forward(2, out, out16, inp, inp16, b, F, n);
}

/* ACT as act_fwd_k: dinp = act'(x) * dout */
template <int ACT> __device__ __forceinline__ float act_bwd(float x, float d) {
    return ACT == 2 ? (x > 0.0f ? d : 0.0f) : gelu_grad(x, ACT) * d;
}
template <int V, int ACT>
__global__ void act_bwd_k(float *dinp, uint16_t *dinp16, const float *inp, const uint16_t *inp16, const float *dout,
                          const uint16_t *dout16, size_t n) {
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i >= n) return;
    if (i + V <= n) {
        float x[V], d[V], g[V];
        ldv<V>(inp, inp16, i, x);
        ldv<V>(dout, dout16, i, d);
#pragma unroll
        for (int k = 0; k < V; k++) g[k] = act_bwd<ACT>(x[k], d[k]);
        stv<V, ACT != 2>(dinp, dinp16, i, g);       /* ReLU passes dout through: bf16_bits */
    } else {
        for (size_t j = i; j < n; j++) put(dinp, dinp16, j, act_bwd<ACT>(get(inp, inp16, j), get(dout, dout16, j)));
    }
}
static void act_backward(int act, float *dinp, uint16_t *dinp16, const float *inp, const uint16_t *inp16,
                         const float *dout, const uint16_t *dout16, size_t n) {
    typedef void (*Kern)(float *, uint16_t *, const float *, const uint16_t *, const float *, const uint16_t *, size_t);
    if (n == 0) return;
    const int V = al(dinp, 16) && al(dinp16, 16) && al(inp, 16) && al(inp16, 16) && al(dout, 16) && al(dout16, 16)
                ? 8 : 1;
    static const Kern K[2][3] = {{act_bwd_k<1, 0>, act_bwd_k<1, 1>, act_bwd_k<1, 2>},
                                 {act_bwd_k<8, 0>, act_bwd_k<8, 1>, act_bwd_k<8, 2>}};
    LAUNCH(K[V == 8][act], blocks_for((n + V - 1) / V, BS), BS, 0, dinp, dinp16, inp, inp16, dout, dout16, n);
}
extern "C" void cu_gelu_backward(float *dinp, uint16_t *dinp16, const float *inp, const uint16_t *inp16,
                                 const float *dout, const uint16_t *dout16, size_t n, int tanh_approx) {
    act_backward(tanh_approx ? 1 : 0, dinp, dinp16, inp, inp16, dout, dout16, n);
}
extern "C" void cu_relu_backward(float *dinp, uint16_t *dinp16, const float *inp, const uint16_t *inp16,
                                 const float *dout, const uint16_t *dout16, size_t n) {
    act_backward(2, dinp, dinp16, inp, inp16, dout, dout16, n);
}

/* h (N, 2F) = [a | b]: out = silu(a) * b; rows as act_fwd_k */
template <int V>
__global__ void swiglu_fwd_k(float *out, uint16_t *out16, const float *h, const uint16_t *h16, int N, int F) {
    for (size_t r = blockIdx.y; r < (size_t)N; r += gridDim.y)
        for (int f = (blockIdx.x * blockDim.x + threadIdx.x) * V; f < F; f += gridDim.x * blockDim.x * V) {
            float a[V], b[V], y[V];
            ldv<V>(h, h16, r * 2 * F + f, a);
            ldv<V>(h, h16, r * 2 * F + F + f, b);
#pragma unroll
            for (int k = 0; k < V; k++) y[k] = a[k] / (1.0f + expf(-a[k])) * b[k];
            stv<V, true>(out, out16, r * F + f, y);
        }
}
template <int V>
__global__ void swiglu_bwd_k(float *dh, uint16_t *dh16, const float *h, const uint16_t *h16, const float *dout,
                             const uint16_t *dout16, int N, int F) {
    for (size_t r = blockIdx.y; r < (size_t)N; r += gridDim.y)
        for (int f = (blockIdx.x * blockDim.x + threadIdx.x) * V; f < F; f += gridDim.x * blockDim.x * V) {
            float a[V], b[V], dy[V], ga[V], gb[V];
            ldv<V>(h, h16, r * 2 * F + f, a);
            ldv<V>(h, h16, r * 2 * F + F + f, b);
            ldv<V>(dout, dout16, r * F + f, dy);
#pragma unroll
            for (int k = 0; k < V; k++) {
                float sg = 1.0f / (1.0f + expf(-a[k])), silu = a[k] * sg;
                ga[k] = dy[k] * b[k] * sg * (1.0f + a[k] * (1.0f - sg));
                gb[k] = dy[k] * silu;
            }
            stv<V, true>(dh, dh16, r * 2 * F + f, ga);
            stv<V, true>(dh, dh16, r * 2 * F + F + f, gb);
        }
}
extern "C" void cu_swiglu_forward(float *out, uint16_t *out16, const float *h, const uint16_t *h16, int N, int F) {
    if (N <= 0 || F <= 0) return;
    const int V = F % 8 == 0 && al(out, 16) && al(out16, 16) && al(h, 16) && al(h16, 16) ? 8 : 1;
    dim3 g;
    int bs;
    rows_grid((size_t)N, ((size_t)F + V - 1) / V, &g, &bs);
    if (V == 8) LAUNCH(swiglu_fwd_k<8>, g, bs, 0, out, out16, h, h16, N, F);
    else LAUNCH(swiglu_fwd_k<1>, g, bs, 0, out, out16, h, h16, N, F);
}
extern "C" void cu_swiglu_backward(float *dh, uint16_t *dh16, const float *h, const uint16_t *h16, const float *dout,
                                   const uint16_t *dout16, int N, int F) {
    if (N <= 0 || F <= 0) return;
    const int V = F % 8 == 0 && al(dh, 16) && al(dh16, 16) && al(h, 16) && al(h16, 16) && al(dout, 16) &&
                  al(dout16, 16) ? 8 : 1;
    dim3 g;
    int bs;
    rows_grid((size_t)N, ((size_t)F + V - 1) / V, &g, &bs);
    if (V == 8) LAUNCH(swiglu_bwd_k<8>, g, bs, 0, dh, dh16, h, h16, dout, dout16, N, F);
    else LAUNCH(swiglu_bwd_k<1>, g, bs, 0, dh, dh16, h, h16, dout, dout16, N, F);
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
