/* CPU emulation of the CUDA C++ the kernels use (included by src/cuda/cuda_compat.cuh
 * under -DSK_CUDA_EMU, compiled as C++ by g++). Each block runs its threads as fibers in
 * one OS thread: __syncthreads() and warp shuffles are real barriers (a thread waits until
 * every live thread of its block / warp arrives), a barrier that can never complete (a
 * divergent __syncthreads or shuffle) aborts with a message, and dynamic shared memory
 * starts filled with NaN. Blocks run one after the other, in grid order (SK_EMU_ORDER=reverse:
 * in reverse order, and the threads of each barrier interval last to first). */
#ifndef SK_CUDA_EMU_H
#define SK_CUDA_EMU_H
#include "cuda_runtime_api.h"
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <utility>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static        /* blocks run one at a time: a function static is the block's */

struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
extern dim3 emu_blockIdx, emu_blockDim, emu_gridDim;
unsigned emu_tid(void);
#define threadIdx (uint3{emu_tid(), 0u, 0u})
#define blockIdx emu_blockIdx
#define blockDim emu_blockDim
#define gridDim emu_gridDim

void emu_syncthreads(void);
void emu_syncwarp(void);
double *emu_warp_slots(void);
void *emu_dyn_smem(void);
#define __syncthreads() emu_syncthreads()
template <typename T> static inline T emu_shfl_xor(T v, int o) {
    double *slot = emu_warp_slots();
    unsigned t = emu_tid();
    slot[t] = (double)v;                  /* float and double round-trip exactly */
    emu_syncwarp();
    T r = (T)slot[t ^ (unsigned)o];
    emu_syncwarp();
    return r;
}
#define __shfl_xor_sync(mask, v, o) emu_shfl_xor((v), (o))
static inline float __fmul_rn(float a, float b) { return a * b; }   /* built with -ffp-contract=off */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline int min(int a, int b) { return a < b ? a : b; }
/* blocks run one at a time: an atomic is a plain read-modify-write */
static inline int atomicAdd(int *p, int v) { const int o = *p; *p = o + v; return o; }

void emu_launch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, const std::function<void()> &body);
#define DYN_SMEM(name) float *name = (float *)emu_dyn_smem()
#define DYN_SMEM_BYTES(name) unsigned char *name = (unsigned char *)emu_dyn_smem()
#define __syncwarp() emu_syncwarp()
/* the arguments are evaluated and copied at the launch, as CUDA copies kernel parameters
 * (a launch recorded into a graph keeps the values it was captured with) */
template <typename... P> static auto emu_fn(void (*f)(P...)) { return f; }
template <typename F> struct emu_params;
template <typename... P> struct emu_params<void (*)(P...)> { using type = std::tuple<std::decay_t<P>...>; };
template <typename F, typename T> static std::function<void()> emu_bind(F f, T vals) {
    return [f, vals]() { std::apply(f, vals); };
}
#define LAUNCH(kernel, grid, block, smem, ...) \
    emu_launch(dim3(grid), dim3(block), (size_t)(smem), sk_cu_stream, \
               emu_bind(emu_fn(kernel), typename emu_params<decltype(emu_fn(kernel))>::type(__VA_ARGS__)))
#include "sk_wmma_emu.h"
#include "sk_mma_emu.h"
#endif
