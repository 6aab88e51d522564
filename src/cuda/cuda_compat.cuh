/* What the kernels need from CUDA beyond plain C++: dynamic shared memory and kernel
 * launches, behind two macros so that the same sources also build against the CPU emulator
 * of tests/cuda/emu/ (make cuda-emu-test: -DSK_CUDA_EMU), which runs every thread of a
 * block as a fiber with real barriers, to check the kernels without a GPU. */
#ifndef SK_CUDA_COMPAT_CUH
#define SK_CUDA_COMPAT_CUH
#ifdef SK_CUDA_EMU
#include "sk_cuda_emu.h"
#else
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <mma.h>
/* float *name: the block's dynamic shared memory */
#define DYN_SMEM(name) extern __shared__ float name[]
/* unsigned char *name: the same, 128-byte aligned (wmma tiles need 256-bit alignment) */
#define DYN_SMEM_BYTES(name) extern __shared__ __align__(128) unsigned char name[]
/* kernel<<<grid, block, smem, sk_cu_stream>>>(args...); `kernel` may be a pointer to a
 * __global__ function */
#define LAUNCH(kernel, grid, block, smem, ...) kernel<<<(grid), (block), (smem), sk_cu_stream>>>(__VA_ARGS__)
#endif
#include <stdint.h>

/* fp32 -> bf16 bits, rounded to nearest even (a NaN stays a quiet NaN): __float2bfloat16_rn,
 * written out so that the emulator rounds exactly as the GPU does. */
__device__ __forceinline__ uint16_t bf16_bits(float f) {
    const uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
/* bf16 bits -> fp32 (exact) */
__device__ __forceinline__ float bf16_float(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
/* An op's output element i: fp32 into out, or, when out16 is given (bf16 mixed precision:
 * the output is only a GEMM's input), rounded to bf16 into out16 instead. */
__device__ __forceinline__ void put(float *out, uint16_t *out16, size_t i, float v) {
    if (out16) out16[i] = bf16_bits(v);
    else out[i] = v;
}
/* An op's input element i: from x16 (bf16) when given, else from x (fp32). */
__device__ __forceinline__ float get(const float *x, const uint16_t *x16, size_t i) {
    return x16 ? bf16_float(x16[i]) : x[i];
}
/* A gradient's element i: from g16 (bf16) when given, else from g (fp32), rounded to bf16
 * first when rnd (a sum of GEMM outputs, read as the one bf16 GEMM output it stands for). */
__device__ __forceinline__ float get_r(const float *g, const uint16_t *g16, size_t i, int rnd) {
    return g16 ? bf16_float(g16[i]) : rnd ? bf16_float(bf16_bits(g[i])) : g[i];
}
/* put, returning the value as stored (rounded to bf16 in out16): what a later get reads */
__device__ __forceinline__ float put_get(float *out, uint16_t *out16, size_t i, float v) {
    if (!out16) { out[i] = v; return v; }
    const uint16_t h = bf16_bits(v);
    out16[i] = h;
    return bf16_float(h);
}
#endif
