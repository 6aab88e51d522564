/* CUDA kernels for every layer op except attention (src/cuda/attention.cu): embeddings,
 * LayerNorm/RMSNorm, bias, GELU/ReLU/SwiGLU, RoPE, residual, dropout, the fused softmax
 * cross-entropy, AdamW and the gradient norm. Each mirrors its CPU twin in src/core/ops.c,
 * src/core/model.c or src/train/optim.c; see src/cuda/cuda_kernels.h for the contracts.
 *
 * Determinism: no atomics anywhere. Every reduction over rows runs in a fixed order that
 * depends only on the shapes (row chunks, then the chunks in order), so a run is
 * bit-identical from run to run on the same GPU. */
#include "cuda_kernels.h"
#include "cuda_compat.cuh"
#include "mma.cuh"
#include <math.h>

#define BS 256

static unsigned blocks_for(size_t n, int bs) {
    size_t b = (n + bs - 1) / bs;
    return (unsigned)(b < 1 ? 1 : b);
}

/* ------------------------------------------------------------ vector access
 * The memory-bound kernels move 8 or 16 bytes per access where the shapes and the
 * addresses allow it (checked on the host at each launch: al() below), each thread V
 * consecutive elements, and fall back to one element per access (V = 1) otherwise. The math
 * per element and its rounding points stay those of the scalar code, so the results are the
 * same bits either way. */
#ifdef SK_CUDA_EMU
struct alignas(16) sk_u4 { uint32_t x, y, z, w; };
struct alignas(8) sk_u2 { uint32_t x, y; };
#include <cstdio>
#include <cstdlib>
static void emu_misaligned(const void *p, size_t n) {
    fprintf(stderr, "emulator: a %zu-byte vector access at %p is misaligned (a fault on a GPU)\n", n, p);
    abort();
}
#else
typedef uint4 sk_u4;
typedef uint2 sk_u2;
#endif
/* one aligned load / store of T (uint32_t, sk_u2, sk_u4) */
template <class T> __device__ __forceinline__ T ld_raw(const void *p) {
#ifdef SK_CUDA_EMU
    if ((uintptr_t)p % sizeof(T)) emu_misaligned(p, sizeof(T));
    T v;
    memcpy(&v, p, sizeof v);
    return v;
#else
    return *reinterpret_cast<const T *>(p);
#endif
}
template <class T> __device__ __forceinline__ void st_raw(void *p, T v) {
#ifdef SK_CUDA_EMU
    if ((uintptr_t)p % sizeof(T)) emu_misaligned(p, sizeof(T));
    memcpy(p, &v, sizeof v);
#else
    __stwb(reinterpret_cast<T *>(p), v);       /* st.global.wb: the default store, kept whole */
#endif
}
/* W consecutive 32-bit words at p (W = 1, 2, 4 or 8; p aligned to 4 W bytes, 16 for 8) */
template <int W> __device__ __forceinline__ void ld_words(const void *p, uint32_t (&w)[W]) {
    static_assert(W == 1 || W == 2 || W == 4 || W == 8, "1, 2, 4 or 8 words");
    if constexpr (W >= 4) {
#pragma unroll
        for (int h = 0; h < W; h += 4) {
            const sk_u4 q = ld_raw<sk_u4>((const uint32_t *)p + h);
            w[h] = q.x; w[h + 1] = q.y; w[h + 2] = q.z; w[h + 3] = q.w;
        }
    } else if constexpr (W == 2) {
        const sk_u2 q = ld_raw<sk_u2>(p);
        w[0] = q.x; w[1] = q.y;
    } else {
        w[0] = ld_raw<uint32_t>(p);
    }
}
template <int W> __device__ __forceinline__ void st_words(void *p, const uint32_t (&w)[W]) {
    static_assert(W == 1 || W == 2 || W == 4 || W == 8, "1, 2, 4 or 8 words");
    if constexpr (W >= 4) {
#pragma unroll
        for (int h = 0; h < W; h += 4) {
            sk_u4 q;
            q.x = w[h]; q.y = w[h + 1]; q.z = w[h + 2]; q.w = w[h + 3];
            st_raw<sk_u4>((uint32_t *)p + h, q);
        }
    } else if constexpr (W == 2) {
        sk_u2 q;
        q.x = w[0]; q.y = w[1];
        st_raw<sk_u2>(p, q);
    } else {
        st_raw<uint32_t>(p, w[0]);
    }
}
/* the low / high bf16 of a word, widened (exact) */
__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
/* two values rounded to bf16 into one word (lo at the lower address), as bf16_bits */
__device__ __forceinline__ uint32_t bf16_pair(float lo, float hi) {
    return (uint32_t)bf16_bits(lo) | (uint32_t)bf16_bits(hi) << 16;
}
/* The same for values that are the result of a float operation (FADD, FMUL, FFMA, ...): on
 * the GPU one cvt.rn.bf16x2.f32 for the pair. Round to nearest even, as bf16_bits; the two
 * differ only in a NaN's payload, and a GPU's float operations return the canonical NaN
 * (0x7fffffff), which both round to 0x7fff: the same bits. Not for values merely loaded. */
__device__ __forceinline__ uint32_t bf16_pair_op(float lo, float hi) {
#ifdef SK_CUDA_EMU
    return bf16_pair(lo, hi);
#else
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&h);
#endif
}
/* V consecutive elements i.. of x16 (bf16) when given, else of x (fp32), as get(); i a
 * multiple of V, the element aligned to its V-element size (V = 1, 2, 4 or 8) */
template <int V> __device__ __forceinline__ void ldv(const float *x, const uint16_t *x16, size_t i, float (&v)[V]) {
    if constexpr (V == 1) {
        v[0] = get(x, x16, i);
    } else if (x16) {
        uint32_t w[V / 2];
        ld_words<V / 2>(x16 + i, w);
#pragma unroll
        for (int k = 0; k < V / 2; k++) { v[2 * k] = bf16_lo(w[k]); v[2 * k + 1] = bf16_hi(w[k]); }
    } else {
        uint32_t w[V];
        ld_words<V>(x + i, w);
#pragma unroll
        for (int k = 0; k < V; k++) v[k] = __uint_as_float(w[k]);
    }
}
/* V consecutive elements i.. into out16 (rounded to bf16) when given, else into out, as
 * put(); OP: the values are float operations' results (bf16_pair_op) */
template <int V, bool OP = false>
__device__ __forceinline__ void stv(float *out, uint16_t *out16, size_t i, const float (&v)[V]) {
    if constexpr (V == 1) {
        put(out, out16, i, v[0]);
    } else if (out16) {
        uint32_t w[V / 2];
#pragma unroll
        for (int k = 0; k < V / 2; k++) w[k] = OP ? bf16_pair_op(v[2 * k], v[2 * k + 1]) : bf16_pair(v[2 * k], v[2 * k + 1]);
        st_words<V / 2>(out16 + i, w);
    } else {
        uint32_t w[V];
#pragma unroll
        for (int k = 0; k < V; k++) w[k] = __float_as_uint(v[k]);
        st_words<V>(out + i, w);
    }
}
/* the host's checks: p (NULL passes) aligned to `bytes` */
static int al(const void *p, size_t bytes) { return (uintptr_t)p % bytes == 0; }

/* A grid over rows x column groups: gridDim.y rows at a time (the kernels stride by it),
 * blocks of a multiple of 32 threads over the nv groups of a row, balanced over gridDim.x. */
static void rows_grid(size_t rows, size_t nv, dim3 *grid, int *block) {
    size_t gx = (nv + 255) / 256;
    if (gx < 1) gx = 1;
    size_t bs = ((nv + gx - 1) / gx + 31) / 32 * 32;
    if (bs < 32) bs = 32;
    *grid = dim3((unsigned)gx, (unsigned)(rows < 1 ? 1 : rows < 65535 ? rows : 65535));
    *block = (int)bs;
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

/* one warp per row. Two forms: the loop (any C: each lane its columns lane + 32k, the row
 * read three times, from the cache after the first) and the float4 form (C a multiple of 4 up
 * to 128 K4, 16-byte aligned rows: each lane its groups of 4 columns 4 (lane + 32 i), held
 * in registers, one 16-byte load each). They add the row in different orders (so their last
 * bits differ); each order is fixed. */
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
/* a row of C floats into the warp's registers: lane holds columns 4 (lane + 32 i) .. + 3,
 * zero past C (the float4 norm kernels) */
template <int K4>
__device__ __forceinline__ void load_row4(const float *x, int C, int lane, float (&xv)[K4][4]) {
#pragma unroll
    for (int i = 0; i < K4; i++) {
        if (4 * (lane + 32 * i) < C) ldv<4>(x, NULL, 4 * (lane + 32 * i), xv[i]);
        else xv[i][0] = xv[i][1] = xv[i][2] = xv[i][3] = 0.0f;
    }
}
template <int K4>
__global__ void layernorm_fwd_v4_k(float *out, uint16_t *out16, float *mean, float *rstd, const float *inp,
                                   const float *w, const float *b, int N, int C, float eps) {
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;                      /* uniform over the warp */
    const size_t o = (size_t)row * C;
    float xv[K4][4];
    load_row4(inp + o, C, lane, xv);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < K4; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) s += xv[i][e];          /* the padding adds 0 */
    const float m = warp_sum(s) / C;
    float v = 0.0f;
#pragma unroll
    for (int i = 0; i < K4; i++)
        if (4 * (lane + 32 * i) < C)
#pragma unroll
            for (int e = 0; e < 4; e++) { float d = xv[i][e] - m; v += d * d; }
    v = warp_sum(v) / C;
    const float r = 1.0f / sqrtf(v + eps);
#pragma unroll
    for (int i = 0; i < K4; i++) {
        const int c = 4 * (lane + 32 * i);
        if (c >= C) break;
        float wv[4], bv[4] = {0.0f, 0.0f, 0.0f, 0.0f}, y[4];
        ldv<4>(w, NULL, c, wv);
        if (b) ldv<4>(b, NULL, c, bv);
#pragma unroll
        for (int e = 0; e < 4; e++) y[e] = (xv[i][e] - m) * r * wv[e] + bv[e];
        stv<4, true>(out, out16, o + c, y);
    }
    if (lane == 0) { if (mean) mean[row] = m; rstd[row] = r; }
}
/* the float4 forms' K4 (groups of 4 columns per lane) for C, or 0: the loop form */
static int norm_k4(int C, const void *x, const void *w, const void *b, const float *out, const uint16_t *out16) {
    if (C <= 0 || C % 4 || !al(x, 16) || !al(w, 16) || !al(b, 16) || !al(out, 16) || !al(out16, 8)) return 0;
    const int g = (C + 127) / 128;             /* groups per lane */
    return g <= 1 ? 1 : g <= 2 ? 2 : g <= 4 ? 4 : g <= 6 ? 6 : g <= 8 ? 8 : g <= 12 ? 12 : g <= 16 ? 16 : 0;
}
extern "C" void cu_layernorm_forward(float *out, uint16_t *out16, float *mean, float *rstd, const float *inp,
                                     const float *w, const float *b, int N, int C, float eps) {
    typedef void (*Kern)(float *, uint16_t *, float *, float *, const float *, const float *, const float *, int, int,
                         float);
    if (N <= 0) return;
    const int k4 = norm_k4(C, inp, w, b, out, out16);
    const Kern kern = k4 == 1 ? layernorm_fwd_v4_k<1> : k4 == 2 ? layernorm_fwd_v4_k<2> : k4 == 4 ? layernorm_fwd_v4_k<4>
                    : k4 == 6 ? layernorm_fwd_v4_k<6> : k4 == 8 ? layernorm_fwd_v4_k<8>
                    : k4 == 12 ? layernorm_fwd_v4_k<12> : k4 == 16 ? layernorm_fwd_v4_k<16> : layernorm_fwd_k;
    LAUNCH(kern, blocks_for((size_t)N, BS / 32), BS, 0, out, out16, mean, rstd, inp, w, b, N, C, eps);
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
/* Row chunks of the two-stage column reductions. */
extern "C" int cu_colsum_chunks(int N) { return N < 256 ? (N > 0 ? N : 1) : 256; }

/* a gradient's V elements i.. as get_r: from g16 (bf16), else from g, rounded first when rnd */
template <int V> __device__ __forceinline__ void ldv_r(const float *g, const uint16_t *g16, size_t i, int rnd,
                                                       float (&v)[V]) {
    ldv<V>(g, g16, i, v);
    if (!g16 && rnd)
#pragma unroll
        for (int e = 0; e < V; e++) v[e] = bf16_float(bf16_bits(v[e]));
}

/* one row n of colsum_part_k: its loads (v: x, g: dy), then its sums */
template <int V, int MODE>
__device__ __forceinline__ void colsum_load(float (&v)[V], float (&g)[V], const float *x, const uint16_t *x16,
                                            const float *dy, const uint16_t *dy16, int rnd, int n, int ncols, int ld,
                                            int c) {
    if (MODE == 0) {
        ldv<V>(x, x16, (size_t)n * ld + c, v);
    } else {
        ldv_r<V>(dy, dy16, (size_t)n * ncols + c, rnd, g);
        ldv<V>(x, NULL, (size_t)n * ncols + c, v);
    }
}
template <int V, int MODE>
__device__ __forceinline__ void colsum_add_row(float (&a)[V], float (&bsum)[V], const float (&v)[V],
                                               const float (&g)[V], uint16_t *copy16, const float *mean,
                                               const float *rstd, int n, int ncols, int c) {
    if (MODE == 0) {
#pragma unroll
        for (int e = 0; e < V; e++) a[e] += v[e];
        if (copy16) stv<V>(NULL, copy16, (size_t)n * ncols + c, v);
    } else if (MODE == 1) {
        const float m = mean[n], s = rstd[n];
#pragma unroll
        for (int e = 0; e < V; e++) {
            a[e] += g[e] * (v[e] - m) * s;
            bsum[e] += g[e];
        }
    } else {
        const float s = rstd[n];
#pragma unroll
        for (int e = 0; e < V; e++) a[e] += g[e] * v[e] * s;
    }
}
/* Stage 1: part[r, c] (and part[R + r, c]) = sums over the rows of chunk r, in row order.
 * MODE 0: column sums of x (or x16, bf16), x rounded to bf16 into copy16 (packed) when
 * given; MODE 1: LayerNorm dw (dy * xhat) and db (dy); MODE 2: RMSNorm dw (dy * x * rstd);
 * dy read as get_r(dy, dy16, rnd) (cu_layernorm_backward). Each thread V consecutive columns
 * (one 8- or 16-byte access per row and operand where the shapes and addresses allow it),
 * the loads of U rows issued before their sums, which still add the rows one by one in
 * order: the same order (and bits) for any V. */
template <int V, int MODE>
__global__ void colsum_part_k(float *part, const float *x, const uint16_t *x16, uint16_t *copy16, const float *dy,
                              const uint16_t *dy16, int rnd, const float *mean, const float *rstd, int N, int ncols,
                              int ld, int R) {
    constexpr int U = V >= 8 ? 4 : 8;
    const int c = (blockIdx.x * blockDim.x + threadIdx.x) * V, r = blockIdx.y;
    if (c >= ncols) return;
    const int per = (N + R - 1) / R, n0 = r * per, n1 = min(N, n0 + per);
    float a[V], bsum[V];
#pragma unroll
    for (int e = 0; e < V; e++) a[e] = bsum[e] = 0.0f;
    int n = n0;
    for (; n + U <= n1; n += U) {              /* U rows' loads in flight together */
        float v[U][V], g[U][V];
#pragma unroll
        for (int u = 0; u < U; u++) colsum_load<V, MODE>(v[u], g[u], x, x16, dy, dy16, rnd, n + u, ncols, ld, c);
#pragma unroll
        for (int u = 0; u < U; u++) colsum_add_row<V, MODE>(a, bsum, v[u], g[u], copy16, mean, rstd, n + u, ncols, c);
    }
    for (; n < n1; n++) {
        float v[V], g[V];
        colsum_load<V, MODE>(v, g, x, x16, dy, dy16, rnd, n, ncols, ld, c);
        colsum_add_row<V, MODE>(a, bsum, v, g, copy16, mean, rstd, n, ncols, c);
    }
#pragma unroll
    for (int e = 0; e < V; e++) {
        part[(size_t)r * ncols + c + e] = a[e];
        if (MODE == 1) part[(size_t)(R + r) * ncols + c + e] = bsum[e];
    }
}
/* Stage 1's launch: V = 8, 4 or 1, the most the shapes and addresses allow */
static void colsum_part(float *part, const float *x, const uint16_t *x16, uint16_t *copy16, const float *dy,
                        const uint16_t *dy16, int rnd, const float *mean, const float *rstd, int N, int ncols, int ld,
                        int R, int mode) {
    typedef void (*Kern)(float *, const float *, const uint16_t *, uint16_t *, const float *, const uint16_t *, int,
                         const float *, const float *, int, int, int, int);
    int V = 1;
    if (mode == 0) {
        /* per row: x16 8 elements at 16 bytes (or 4 at 8), x 4 at 16; copy16 V at 2 V bytes */
        if (x16 && ncols % 8 == 0 && ld % 8 == 0 && al(x16, 16) && al(copy16, 16)) V = 8;
        else if (ncols % 4 == 0 && ld % 4 == 0 && (x16 ? al(x16, 8) : al(x, 16)) && al(copy16, 8)) V = 4;
    } else if (ncols % 4 == 0 && al(x, 16) && (dy16 ? al(dy16, 8) : al(dy, 16))) {
        V = 4;
    }
    static const Kern K[3][3] = {{colsum_part_k<1, 0>, colsum_part_k<4, 0>, colsum_part_k<8, 0>},
                                 {colsum_part_k<1, 1>, colsum_part_k<4, 1>, colsum_part_k<4, 1>},
                                 {colsum_part_k<1, 2>, colsum_part_k<4, 2>, colsum_part_k<4, 2>}};
    const Kern kern = K[mode][V == 8 ? 2 : V == 4 ? 1 : 0];
    const size_t nv = (size_t)ncols / V;
    const unsigned gx = blocks_for(nv, 128);
    const int bs = (int)(((nv + gx - 1) / gx + 31) / 32 * 32);
    LAUNCH(kern, dim3(gx, R), bs, 0, part, x, x16, copy16, dy, dy16, rnd, mean, rstd, N, ncols, ld, R);
}

/* Stage 2: out[c] += the sum of the R chunks' partials part[r, c] (blockIdx.y = 1: out2 from
 * part[R + r, c]), in a fixed order: 16 groups of consecutive chunks, each added in order by
 * a warp (its loads in flight together), then the 16 group sums in order. Blocks of 512
 * threads over 32 columns. */
#define FINISH_GROUPS 16
__global__ void __launch_bounds__(32 * FINISH_GROUPS) colsum_finish_k(float *out, float *out2, const float *part,
                                                                      int ncols, int R) {
    __shared__ float sh[FINISH_GROUPS][32];
    const int cl = threadIdx.x & 31, j = threadIdx.x >> 5, c = blockIdx.x * 32 + cl;
    const float *p = part + (size_t)blockIdx.y * R * ncols;
    const int r0 = (int)((long long)j * R / FINISH_GROUPS), r1 = (int)((long long)(j + 1) * R / FINISH_GROUPS);
    float a = 0.0f;
    if (c < ncols) {
        int r = r0;
        for (; r + 16 <= r1; r += 16) {
            float t[16];
#pragma unroll
            for (int u = 0; u < 16; u++) t[u] = p[(size_t)(r + u) * ncols + c];
#pragma unroll
            for (int u = 0; u < 16; u++) a += t[u];
        }
        for (; r < r1; r++) a += p[(size_t)r * ncols + c];
    }
    sh[j][cl] = a;
    __syncthreads();
    if (j == 0 && c < ncols) {
        float t = sh[0][cl];
#pragma unroll
        for (int i = 1; i < FINISH_GROUPS; i++) t += sh[i][cl];
        (blockIdx.y ? out2 : out)[c] += t;
    }
}
static void colsum_finish(float *out, float *out2, const float *part, int ncols, int R) {
    LAUNCH(colsum_finish_k, dim3(blocks_for((size_t)ncols, 32), out2 ? 2 : 1), 32 * FINISH_GROUPS, 0, out, out2, part,
           ncols, R);
}

/* dinp of a norm's backward (LN false: RMSNorm) in the float4 form (C a multiple of 4,
 * 16-byte aligned rows; dout16 8-byte aligned): one warp per row, each lane its groups of 4
 * columns 4 (lane + 32 i), one access per group and operand; the second pass reads dy and
 * x again (from the cache). The same expressions as layernorm_bwd_dx_k / rmsnorm_bwd_dx_k,
 * the row's sums added in another (fixed) order. */
template <bool LN>
__global__ void norm_bwd_dx_v4_k(float *dinp, const float *dout, const uint16_t *dout16, int rnd, const float *inp,
                                 const float *w, const float *mean, const float *rstd, int N, int C) {
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const size_t o = (size_t)row * C;
    const float *x = inp + o;
    float *dx = dinp + o;
    const float m = LN ? mean[row] : 0.0f, s = rstd[row];
    float a1 = 0.0f, a2 = 0.0f;
    for (int c = 4 * lane; c < C; c += 128) {
        float g[4], xv[4], wv[4];
        ldv_r<4>(dout, dout16, o + c, rnd, g);
        ldv<4>(x, NULL, c, xv);
        ldv<4>(w, NULL, c, wv);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            if (LN) {
                float dn = wv[e] * g[e];
                a1 += dn;
                a2 += dn * (xv[e] - m) * s;
            } else {
                a1 += wv[e] * g[e] * xv[e];
            }
        }
    }
    const float dmean = LN ? warp_sum(a1) / C : 0.0f, dnx = LN ? warp_sum(a2) / C : 0.0f;
    const float dot = LN ? 0.0f : warp_sum(a1) * (s * s / C);
    for (int c = 4 * lane; c < C; c += 128) {
        float g[4], xv[4], wv[4], d[4];
        ldv_r<4>(dout, dout16, o + c, rnd, g);
        ldv<4>(x, NULL, c, xv);
        ldv<4>(w, NULL, c, wv);
        ldv<4>(dx, NULL, c, d);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            if (LN) {
                float nx = (xv[e] - m) * s;
                d[e] += s * (wv[e] * g[e] - dmean - nx * dnx);
            } else {
                d[e] += s * (wv[e] * g[e] - xv[e] * dot);
            }
        }
        stv<4>(dx, NULL, c, d);
    }
}

/* A norm's backward: dinp by a warp per row (the float4 form where the shapes and addresses
 * allow it), then the weight (and bias) gradients by the column-sum passes (colsum_part_k
 * MODE 1 / 2, then colsum_finish_k): deterministic. On an H200 (GPT-2 124M, N = 8192,
 * C = 768) this measured faster than the earlier one-pass kernel (dinp and both column sums
 * from one read of dy and x), whose per-lane column accumulators held it to 16 warps per SM:
 * 46 / 58 us against 72 / 99 us (dy in bf16 / fp32 rounded), though it reads dy and x twice. */
static void norm_backward(float *dinp, float *dw, float *db, const float *dout, const uint16_t *dout16, int rnd,
                          const float *inp, const float *w, const float *mean, const float *rstd, int N, int C,
                          float *part) {
    if (N <= 0 || C <= 0) return;
    const int v4 = C % 4 == 0 && al(inp, 16) && al(dinp, 16) && al(w, 16) && (dout16 ? al(dout16, 8) : al(dout, 16));
    if (v4 && mean)
        LAUNCH(norm_bwd_dx_v4_k<true>, blocks_for((size_t)N, BS / 32), BS, 0, dinp, dout, dout16, rnd, inp, w, mean,
               rstd, N, C);
    else if (v4)
        LAUNCH(norm_bwd_dx_v4_k<false>, blocks_for((size_t)N, BS / 32), BS, 0, dinp, dout, dout16, rnd, inp, w, mean,
               rstd, N, C);
    else if (mean)
        LAUNCH(layernorm_bwd_dx_k, blocks_for((size_t)N, BS / 32), BS, 0, dinp, dout, dout16, rnd, inp, w, mean, rstd,
               N, C);
    else
        LAUNCH(rmsnorm_bwd_dx_k, blocks_for((size_t)N, BS / 32), BS, 0, dinp, dout, dout16, rnd, inp, w, rstd, N, C);
    const int R = cu_colsum_chunks(N);
    colsum_part(part, inp, NULL, NULL, dout, dout16, rnd, mean, rstd, N, C, C, R, mean ? 1 : 2);
    colsum_finish(dw, mean ? db : NULL, part, C, R);
}

extern "C" void cu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const uint16_t *dout16,
                                      int rnd, const float *inp, const float *w, const float *mean, const float *rstd,
                                      int N, int C, float *part) {
    norm_backward(dinp, dw, db, dout, dout16, rnd, inp, w, mean, rstd, N, C, part);
}

extern "C" void cu_colsum_add(float *out, const float *x, const uint16_t *x16, uint16_t *copy16, int N, int ncols,
                              int ld, float *part) {
    if (N <= 0 || ncols <= 0) return;
    const int R = cu_colsum_chunks(N);
    colsum_part(part, x, x16, copy16, NULL, NULL, 0, NULL, NULL, N, ncols, ld, R, 0);
    colsum_finish(out, NULL, part, ncols, R);
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
/* the float4 form, as layernorm_fwd_v4_k */
template <int K4>
__global__ void rmsnorm_fwd_v4_k(float *out, uint16_t *out16, float *rstd, const float *inp, const float *w, int N,
                                 int C, float eps) {
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const size_t o = (size_t)row * C;
    float xv[K4][4];
    load_row4(inp + o, C, lane, xv);
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < K4; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) ss += xv[i][e] * xv[i][e];
    const float s = 1.0f / sqrtf(warp_sum(ss) / C + eps);
#pragma unroll
    for (int i = 0; i < K4; i++) {
        const int c = 4 * (lane + 32 * i);
        if (c >= C) break;
        float wv[4], y[4];
        ldv<4>(w, NULL, c, wv);
#pragma unroll
        for (int e = 0; e < 4; e++) y[e] = wv[e] * (xv[i][e] * s);
        stv<4, true>(out, out16, o + c, y);
    }
    if (lane == 0) rstd[row] = s;
}
extern "C" void cu_rmsnorm_forward(float *out, uint16_t *out16, float *rstd, const float *inp, const float *w,
                                   int N, int C, float eps) {
    typedef void (*Kern)(float *, uint16_t *, float *, const float *, const float *, int, int, float);
    if (N <= 0) return;
    const int k4 = norm_k4(C, inp, w, NULL, out, out16);
    const Kern kern = k4 == 1 ? rmsnorm_fwd_v4_k<1> : k4 == 2 ? rmsnorm_fwd_v4_k<2> : k4 == 4 ? rmsnorm_fwd_v4_k<4>
                    : k4 == 6 ? rmsnorm_fwd_v4_k<6> : k4 == 8 ? rmsnorm_fwd_v4_k<8>
                    : k4 == 12 ? rmsnorm_fwd_v4_k<12> : k4 == 16 ? rmsnorm_fwd_v4_k<16> : rmsnorm_fwd_k;
    LAUNCH(kern, blocks_for((size_t)N, BS / 32), BS, 0, out, out16, rstd, inp, w, N, C, eps);
}

extern "C" void cu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const uint16_t *dout16, int rnd,
                                    const float *inp, const float *w, const float *rstd, int N, int C, float *part) {
    norm_backward(dinp, dw, NULL, dout, dout16, rnd, inp, w, NULL, rstd, N, C, part);
}

/* The row kernels below: blockIdx.y strides over the rows, threads over groups of V
 * consecutive columns (no division per element); V > 1 where the row lengths and the
 * addresses allow V-element accesses, checked by the launches. */
template <int V>
__global__ void bias_broadcast_k(float *out, const float *b, int N, int ncols, int ld) {
    const int c = (blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (c >= ncols) return;
    float v[V];
    ldv<V>(b, NULL, c, v);
    for (size_t r = blockIdx.y; r < (size_t)N; r += gridDim.y) stv<V>(out, NULL, r * ld + c, v);
}
extern "C" void cu_bias_broadcast(float *out, const float *b, int N, int ncols, int ld) {
    if (N <= 0 || ncols <= 0) return;
    const int V = ncols % 4 == 0 && ld % 4 == 0 && al(out, 16) && al(b, 16) ? 4 : 1;
    dim3 g;
    int bs;
    rows_grid((size_t)N, (size_t)ncols / V, &g, &bs);
    if (V == 4) LAUNCH(bias_broadcast_k<4>, g, bs, 0, out, b, N, ncols, ld);
    else LAUNCH(bias_broadcast_k<1>, g, bs, 0, out, b, N, ncols, ld);
}

template <int V>
__global__ void bias_residual_k(float *out, const float *res, const float *b, int N, int ncols) {
    const int c = (blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (c >= ncols) return;
    float bv[V];
    if (b) ldv<V>(b, NULL, c, bv);
    for (size_t r = blockIdx.y; r < (size_t)N; r += gridDim.y) {
        float v[V];
        ldv<V>(res, NULL, r * ncols + c, v);
        if (b)
#pragma unroll
            for (int e = 0; e < V; e++) v[e] = v[e] + bv[e];
        stv<V>(out, NULL, r * ncols + c, v);
    }
}
extern "C" void cu_bias_residual(float *out, const float *res, const float *b, int N, int ncols) {
    if (N <= 0 || ncols <= 0) return;
    const int V = ncols % 4 == 0 && al(out, 16) && al(res, 16) && al(b, 16) ? 4 : 1;
    dim3 g;
    int bs;
    rows_grid((size_t)N, (size_t)ncols / V, &g, &bs);
    if (V == 4) LAUNCH(bias_residual_k<4>, g, bs, 0, out, res, b, N, ncols);
    else LAUNCH(bias_residual_k<1>, g, bs, 0, out, res, b, N, ncols);
}

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

/* sk_hash32 of src/core/ops.h, bit for bit */
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

/* The bf16 path (z16): one read and one write of the logits. One block per row, the row
 * copied once into shared memory (cp.async, 16 bytes per copy, no registers held), so that a
 * block needs few registers and two rows share an SM, one's copy overlapping the other's
 * arithmetic. Each thread works on the NV groups of 8 columns it copied, j = threadIdx.x +
 * k blockDim.x, with no barrier before: it takes the max m of its values and the sum s of
 * exp(x - m) (m = 0 when -inf: no values, or all -inf), then the block combines the (m, s)
 * pairs (rescaling each sum to the larger max, a sum of 0 staying 0 as in crossentropy_k),
 * lse = max + log(sum); then the gradient. A NaN logit makes its sum, so lse, the loss and
 * the gradient NaN; a +inf one too (exp(inf - inf)), as in crossentropy_k. exp(x - c) is
 * exp2f((x - c) log2(e)) (ex2.approx: a few ulp, far below the gradient's bf16 rounding;
 * exactly 1 at x = c), but for the target's gradient, sc (p - 1), where p near 1 would
 * cancel: that one is crossentropy_k's expression. The fp32 path (crossentropy_k,
 * bit-for-bit with the CPU) keeps expf throughout. */
#define CE_LOG2E 1.4426950408889634f
__device__ __forceinline__ float ce_safe(float m) { return m == -INFINITY ? 0.0f : m; }
/* s (relative to ce_safe(m)) relative to ce_safe(M), M >= m */
__device__ __forceinline__ float ce_rescale(float s, float m, float M) {
    return s == 0.0f ? 0.0f : s * exp2f((ce_safe(m) - ce_safe(M)) * CE_LOG2E);
}
__device__ __forceinline__ void ce_combine(float &m, float &s, float mo, float so) {
    const float M = fmaxf(m, mo);
    s = ce_rescale(s, m, M) + ce_rescale(so, mo, M);
    m = M;
}
#define CE_X(q, e) ((e) & 1 ? bf16_hi(q[(e) >> 1]) : bf16_lo(q[(e) >> 1]))
/* f(x) for each logit x of the row in shared memory that this thread copied (its groups of 8
 * columns j = threadIdx.x + k T, T = blockDim.x) and that is below V, in order */
template <int NV, typename F>
__device__ __forceinline__ void ce_each(const uint16_t *zs, int T, int nvec, int vfull, int V, F f) {
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const int j = threadIdx.x + k * T;
        if (j >= nvec || j * 8 >= V) break;
        uint32_t q[4];
        ld_words<4>(zs + (size_t)j * 8, q);
        if (j < vfull) {
#pragma unroll
            for (int e = 0; e < 8; e++) f(CE_X(q, e));
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++) if (j * 8 + e < V) f(CE_X(q, e));
        }
    }
}
template <int NV>
__global__ void __launch_bounds__(1024, 2) crossentropy16_k(uint16_t *z16, float *losses, const int32_t *targets,
                                                            int V, int Vp, float row_scale, int backward) {
    DYN_SMEM_BYTES(zbytes);                    /* the row, Vp bf16 */
    __shared__ float shm[32], shs[32];
    uint16_t *zs = (uint16_t *)zbytes;
    const int r = blockIdx.x, T = blockDim.x, nvec = Vp >> 3, vfull = V >> 3;
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = T >> 5;
    uint16_t *zh = z16 + (size_t)r * Vp;
    const int tgt = targets[r];
    const float zt = threadIdx.x == 0 && tgt >= 0 ? bf16_float(zh[tgt]) : 0.0f;   /* before any write */
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const int j = threadIdx.x + k * T;
        if (j < nvec) cp_async16(zs + (size_t)j * 8, zh + (size_t)j * 8);
    }
    cp_commit();
    cp_wait<0>();                              /* this thread's copies landed: all it reads */
    float m = -INFINITY;
    ce_each<NV>(zs, T, nvec, vfull, V, [&](float x) { m = fmaxf(m, x); });
    const float ms = ce_safe(m);
    float s = 0.0f;
    ce_each<NV>(zs, T, nvec, vfull, V, [&](float x) { s += exp2f((x - ms) * CE_LOG2E); });
    for (int o = 16; o > 0; o >>= 1) {
        const float mo = __shfl_xor_sync(0xffffffffu, m, o), so = __shfl_xor_sync(0xffffffffu, s, o);
        ce_combine(m, s, mo, so);
    }
    if (lane == 0) { shm[wid] = m; shs[wid] = s; }
    __syncthreads();
    if (wid == 0) {
        m = lane < nw ? shm[lane] : -INFINITY;
        s = lane < nw ? shs[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) {
            const float mo = __shfl_xor_sync(0xffffffffu, m, o), so = __shfl_xor_sync(0xffffffffu, s, o);
            ce_combine(m, s, mo, so);
        }
        if (lane == 0) { shm[0] = m; shs[0] = s; }
    }
    __syncthreads();
    const float lse = shm[0] + logf(shs[0]);
    if (threadIdx.x == 0) losses[r] = tgt >= 0 ? lse - zt : 0.0f;
    if (!backward) return;
    const float sc = tgt >= 0 ? row_scale : 0.0f;
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const int j = threadIdx.x + k * T;
        if (j >= nvec) break;
        uint32_t q[4], w[4];
        ld_words<4>(zs + (size_t)j * 8, q);
        float g[8];
        if (j < vfull) {
#pragma unroll
            for (int e = 0; e < 8; e++) g[e] = sc * exp2f((CE_X(q, e) - lse) * CE_LOG2E);
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++) g[e] = j * 8 + e < V ? sc * exp2f((CE_X(q, e) - lse) * CE_LOG2E) : 0.0f;
        }
        const int d = tgt - j * 8;
        if ((unsigned)d < 8u && tgt < V)      /* the target's p - 1 cancels: expf there, as crossentropy_k */
#pragma unroll
            for (int e = 0; e < 8; e++) if (e == d) g[e] = sc * expf(CE_X(q, e) - lse) - sc;
#pragma unroll
        for (int e = 0; e < 4; e++) w[e] = bf16_pair_op(g[2 * e], g[2 * e + 1]);
        st_words<4>(zh + (size_t)j * 8, w);
    }
#undef CE_X
}
/* a kernel with more than 48 KiB of dynamic shared memory says so before its launch (the
 * setting is the current device's: made at every call, as the attention kernels do) */
static int ce_smem_opt_in(const void *fn, size_t bytes) {
    if (bytes <= 48 * 1024) return 1;
    if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) != cudaSuccess) {
        (void)cudaGetLastError();             /* not sticky: the fallback kernel runs instead */
        return 0;
    }
    return 1;
}
extern "C" void cu_crossentropy(float *logits, uint16_t *z16, float *losses, const int32_t *targets, int N, int V,
                                int Vp, float row_scale, int backward) {
    typedef void (*Kern)(uint16_t *, float *, const int32_t *, int, int, float, int);
    if (N <= 0) return;
    if (z16 && Vp % 8 == 0 && al(z16, 16) && V > 0 && V <= Vp) {
        /* NV groups of 8 per thread, the fewest with at most 1024 threads, blocks of whole warps */
        const int nvec = Vp / 8;
        const int nv = nvec <= 1024 ? 1 : nvec <= 2048 ? 2 : nvec <= 4096 ? 4 : nvec <= 8192 ? 8 : nvec <= 16384 ? 16 : 0;
        const Kern kern = nv == 1 ? crossentropy16_k<1> : nv == 2 ? crossentropy16_k<2> : nv == 4 ? crossentropy16_k<4>
                        : nv == 8 ? crossentropy16_k<8> : crossentropy16_k<16>;
        const size_t smem = (size_t)Vp * 2;   /* the row; up to the opt-in limit (227 KiB: Vp up to ~116k) */
        if (nv && ce_smem_opt_in((const void *)kern, smem)) {
            const int T = ((nvec + nv - 1) / nv + 31) / 32 * 32;
            LAUNCH(kern, N, T, smem, z16, losses, targets, V, Vp, row_scale, backward);
            return;
        }
    }
    LAUNCH(crossentropy_k, N, 512, 0, logits, z16, losses, targets, V, Vp, row_scale, backward);
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
