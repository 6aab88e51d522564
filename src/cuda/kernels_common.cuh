/* What the op kernels (src/cuda/kernels_*.cu) share: the launch helpers, vector access of 8 or
 * 16 bytes, and warp and block reductions.
 *
 * Determinism: no atomics anywhere. Every reduction over rows runs in a fixed order that
 * depends only on the shapes (row chunks, then the chunks in order), so a run is
 * bit-identical from run to run on the same GPU. */
#ifndef SK_CUDA_KERNELS_COMMON_CUH
#define SK_CUDA_KERNELS_COMMON_CUH
#include "cuda_kernels.h"
#include "cuda_compat.cuh"
#include "mma.cuh"
#include <math.h>

#define BS 256

static inline unsigned blocks_for(size_t n, int bs) {
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
static inline void emu_misaligned(const void *p, size_t n) {
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
static inline int al(const void *p, size_t bytes) { return (uintptr_t)p % bytes == 0; }

/* A grid over rows x column groups: gridDim.y rows at a time (the kernels stride by it),
 * blocks of a multiple of 32 threads over the nv groups of a row, balanced over gridDim.x. */
static inline void rows_grid(size_t rows, size_t nv, dim3 *grid, int *block) {
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
#endif
