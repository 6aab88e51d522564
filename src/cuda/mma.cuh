/* The warp-level tensor-core instructions of the register-resident attention
 * (attention_mma.cu), as PTX: their register layouts are documented (PTX ISA, "Matrix
 * Fragments for mma.m16n8k16" and "ldmatrix"), unlike wmma's, so a kernel can keep scores
 * and probabilities in registers and do the softmax there. With -DSK_CUDA_EMU the same
 * names are the emulator's (tests/cuda/emu/sk_mma_emu.h), which implements those layouts.
 *
 * Lane l of a warp is in group g = l / 4 at position t = l % 4. A uint32_t holds two bf16,
 * the lower-indexed element in the low half.
 *   A (16 x 16, row-major) a[4]: a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..], a[2] = A[g][2t+8..],
 *                                a[3] = A[g+8][2t+8..]
 *   B (16 x 8)             b[2]: b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g]
 *   C, D (16 x 8, fp32)    c[4]: c[0], c[1] = C[g][2t], C[g][2t+1]; c[2], c[3] = C[g+8][2t..]
 *   ldmatrix .x4: lanes 8i..8i+7 give the row addresses (16 bytes each, 16-byte aligned) of
 *     8 x 8 matrix i, and r[i] gets M_i[g][2t..2t+1]; with .trans, M_i[2t..2t+1][g].
 * And the asynchronous copies (sm_80) that feed the tiles: cp_async16 / cp_async4 copy 16 / 4
 * bytes (both addresses aligned to that) from global to shared memory without passing
 * through registers; cp_commit closes this thread's open group of copies; cp_wait<N> waits
 * until at most N of its committed groups are still in flight. The data is then visible to
 * this thread, and to the block after a __syncthreads. sts32 is a plain 4-byte store into a
 * tile, named so that the emulator can check it. */
#ifndef SK_MMA_CUH
#define SK_MMA_CUH
#include "cuda_compat.cuh"

#ifdef SK_CUDA_EMU
#define mma_bf16_16816 emu_mma_bf16_16816
#define ldsm_x4 emu_ldsm_x4
#define ldsm_x4_trans emu_ldsm_x4_trans
#define cp_async16(dst, src) emu_cp_async((dst), (src), 16)
#define cp_async4(dst, src) emu_cp_async((dst), (src), 4)
#define cp_commit emu_cp_commit
#define sts32 emu_sts32
template <int N> static inline void cp_wait() { emu_cp_wait(N); }
#define flag_wait_ge emu_flag_wait_ge
#define flag_release emu_flag_release
#define red_add emu_red_add
#define red_add2 emu_red_add2
/* two floats as bf16x2, rounded to nearest even */
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    return (uint32_t)bf16_bits(lo) | ((uint32_t)bf16_bits(hi) << 16);
}
#else
/* d += a b: m16n8k16, bf16 operands, fp32 accumulation */
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* four 8 x 8 bf16 matrices from shared memory; p: this lane's row address */
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    const size_t g = __cvta_generic_to_global(src);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(g) : "memory");
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    const size_t g = __cvta_generic_to_global(src);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(g) : "memory");
}
/* a 4-byte store to a shared-memory tile (the emulator checks it against the other warps' reads) */
__device__ __forceinline__ void sts32(void *p, uint32_t v) { *(uint32_t *)p = v; }
/* ("memory": no memory access is moved across these, barrier or not) */
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
/* Ordering between blocks: flag_wait_ge spins until *p >= v (an acquire: what the releasing
 * block wrote before its release is then visible to this thread, and to its warp after a
 * __syncwarp); flag_release stores v with release semantics (after a __syncthreads, the
 * block's earlier writes are visible to whoever acquires it). red_add / red_add2 add to
 * global memory without reading back (fire-and-forget reductions, performed at L2). */
__device__ __forceinline__ void flag_wait_ge(const int *p, int v) {
    for (;;) {
        int x;
        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(x) : "l"(p) : "memory");
        if (x >= v) return;
        __nanosleep(20);
    }
}
__device__ __forceinline__ void flag_release(int *p, int v) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void red_add(float *p, float x) { atomicAdd(p, x); }
/* p 8-byte aligned: one vector reduction on sm_90, two scalar ones before */
__device__ __forceinline__ void red_add2(float *p, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float2 *>(p), make_float2(x, y));
#else
    atomicAdd(p, x);
    atomicAdd(p + 1, y);
#endif
}
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);    /* .x (low half) = lo */
    return *reinterpret_cast<uint32_t *>(&v);
}
#endif
#endif
