/* CUDA kernels: AdamW over the parameter spans and the gradient norm's partial sums
 * (src/train/optim.c); each mirrors its CPU twin, see src/cuda/cuda_kernels.h for the
 * contracts. */
#include "kernels_common.cuh"

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

/* ------------------------------------------------------------------- optimizer */

/* __f*_rn: no contraction into FMA, so each operation rounds as on the CPU (src/train/optim.c) */
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
