/* What the two fused attention implementations share (attention.cu: fp32 on CUDA cores;
 * attention_tc.cu: bf16 operands on tensor cores): the dropout hash of
 * src/core/attention_internal.h, the causal rule, the half-warp reductions of the 16 x 16 thread
 * grid, and the elementwise part of the backward pass. */
#ifndef SK_ATTENTION_COMMON_CUH
#define SK_ATTENTION_COMMON_CUH
#include "cuda_kernels.h"
#include "cuda_compat.cuh"
#include <math.h>

#define NT 256

/* a kernel with more than 48 KiB of dynamic shared memory must say so once, before its
 * first launch */
static inline cudaError_t smem_opt_in(const void *fn, size_t bytes) {
    if (bytes <= 48 * 1024) return cudaSuccess;
    return cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

/* the most dynamic shared memory a block of this device may opt in to (asked once) */
static inline int smem_optin_max(void) {
    static int v = 0;
    if (!v) {
        int dev = 0, x = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&x, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess || x <= 0)
            x = 48 * 1024;
        v = x;
    }
    return v;
}

/* ----------------------------------------------- dropout hash (attention_internal.h) */
__device__ __forceinline__ uint64_t mix64(uint64_t x) {
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27; x *= 0x94d049bb133111ebULL;
    x ^= x >> 31; return x;
}
__device__ __forceinline__ uint64_t rowkey(uint64_t seed, int b, int h, int i) {
    return mix64(mix64(seed) + (((uint64_t)b << 48) ^ ((uint64_t)h << 32) ^ (uint64_t)(uint32_t)i));
}
__device__ __forceinline__ bool keep(uint64_t rk, int j, uint64_t thr) {
    return (mix64(rk + (uint64_t)j * 0x9e3779b97f4a7c15ULL) >> 32) >= thr;
}

__device__ __forceinline__ float half_warp_max(float v) {
    for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float half_warp_sum(float v) {
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* SLA in one launch (cu_attn.nruns > 0): the run that kv head hk belongs to becomes the
 * descriptor's K/V source, dropout seed and (in a backward) dK/dV destination. Returns the
 * run's first query head, from which its heads count in the dropout hash (0 without runs).
 * The run is picked with compile-time indices only, so the descriptor stays in the kernel's
 * parameter space. */
__device__ __forceinline__ int use_run(cu_attn &a, int hk, float *&dk, float *&dv) {
    if (!a.nruns) return 0;
    int r = 0;
#pragma unroll
    for (int i = 1; i < CU_ATTN_RUNS; i++)
        if (i < a.nruns && hk >= a.run[i].hk0) r = i;
    int h0 = 0;
#pragma unroll
    for (int i = 0; i < CU_ATTN_RUNS; i++)
        if (i == r) {
            a.k = a.run[i].k; a.v = a.run[i].v; a.k16 = a.run[i].k16; a.v16 = a.run[i].v16;
            dk = a.run[i].dk; dv = a.run[i].dv; a.seed = a.run[i].seed;
            h0 = a.run[i].hk0 * (a.H / a.Hkv);
        }
    return h0;
}
__device__ __forceinline__ int use_run(cu_attn &a, int hk) {
    float *dk = NULL, *dv = NULL;
    return use_run(a, hk, dk, dv);
}

/* may query i attend key j (global indices)? */
__device__ __forceinline__ bool allowed(const cu_attn &a, int i, int j) {
    return !a.causal || (long)j <= (long)i + a.causal_offset;
}

/* keys [0, end) visible to query rows [i0, i0 + nq) */
__device__ __forceinline__ int key_end(const cu_attn &a, int i0, int nq) {
    if (!a.causal) return a.Lk;
    long e = (long)i0 + nq - 1 + a.causal_offset + 1;
    return e < 0 ? 0 : (e < a.Lk ? (int)e : a.Lk);
}

/* The forward pass's per-thread row state for rows i0 + ty + 16 ii: the output accumulator
 * o = 0, running max m = -inf and sum l = 0, and the row's dropout key. */
template <int RQ, int RD>
__device__ __forceinline__ void init_rows(const cu_attn &a, float (&o)[RQ][RD], float (&m)[RQ], float (&l)[RQ],
                                          uint64_t (&rk)[RQ], int b, int h, int i0, int ty) {
#pragma unroll
    for (int ii = 0; ii < RQ; ii++) {
        m[ii] = -INFINITY; l[ii] = 0.0f;
        rk[ii] = a.dropout ? rowkey(a.seed, b, h, i0 + ty + 16 * ii) : 0;
#pragma unroll
        for (int dd = 0; dd < RD; dd++) o[ii][dd] = 0.0f;
    }
}

/* ------------------------------------------------ forward: one score row of a tile
 * The online-softmax step of the 16 lanes (one half-warp) that hold score row i of a key
 * tile at columns j0 + tx + 16*jj: masks s (the row is valid, the column is below nk and
 * allowed), updates the row's running max m and sum l, and leaves in s the probabilities
 * P = exp(s - m) times the dropout factor. Returns alpha, the factor that rescales the row's
 * output accumulator (1 while the row has seen no visible key). */
/* e^(x - m): the fp32 kernels call expf as the CPU does; the bf16 tensor-core kernels (whose P
 * is rounded to bf16 next) take 2^(x log2 e - m log2 e), one FMA and the exp2 unit, with
 * ml = m log2 e */
#define LOG2E 1.4426950408889634f
template <bool EXP2>
__device__ __forceinline__ float exp_shift(float x, float m, float ml) {
    return EXP2 ? exp2f(fmaf(x, LOG2E, -ml)) : expf(x - m);
}
/* the running max's rescaling factor e^(m_old - m): exactly 1 while the max stays */
template <bool EXP2>
__device__ __forceinline__ float exp_rescale(float m_old, float m) {
    return EXP2 ? exp2f((m_old - m) * LOG2E) : expf(m_old - m);
}

template <int RK, bool EXP2 = false>
__device__ __forceinline__ float softmax_row(const cu_attn &a, float (&s)[RK], bool row_ok, int i, int j0, int nk,
                                             int tx, uint64_t rk, float &m, float &l) {
    float mx = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < RK; jj++) {
        const int c = tx + 16 * jj;
        if (!(row_ok && c < nk && allowed(a, i, j0 + c))) s[jj] = -INFINITY;
        mx = fmaxf(mx, s[jj]);
    }
    mx = half_warp_max(mx);
    const float mnew = fmaxf(m, mx);
    float alpha = 1.0f, sum = 0.0f;
    if (mnew == -INFINITY) {          /* nothing visible yet in this row */
#pragma unroll
        for (int jj = 0; jj < RK; jj++) s[jj] = 0.0f;
    } else {
        const float ml = mnew * LOG2E;
        alpha = exp_rescale<EXP2>(m, mnew);
#pragma unroll
        for (int jj = 0; jj < RK; jj++) { s[jj] = exp_shift<EXP2>(s[jj], mnew, ml); sum += s[jj]; }
    }
    sum = half_warp_sum(sum);
    if (mnew != -INFINITY) { l = l * alpha + sum; m = mnew; }
    if (a.dropout && row_ok) {
#pragma unroll
        for (int jj = 0; jj < RK; jj++) {
            const int c = tx + 16 * jj;
            s[jj] = (c < nk && keep(rk, j0 + c, a.thr)) ? s[jj] * a.inv_keep : 0.0f;
        }
    }
    return alpha;
}

/* The end of the forward pass for query row i of head h: out = o / l over the head dims
 * tx + 16*dd below D, and lse = m + log(l) (+inf for a row that saw no key) */
template <int RD>
__device__ __forceinline__ void finish_row(const cu_attn &a, const float (&o)[RD], float m, float l, int b, int h,
                                           int i, int tx) {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const long off = b * a.o_sb + h * a.o_sh + (long)i * a.o_st;
#pragma unroll
    for (int dd = 0; dd < RD; dd++) {
        const int d = tx + 16 * dd;
        if (d < a.D) put(a.out, a.out16, off + d, o[dd] * inv);
    }
    if (tx == 0 && a.lse) a.lse[((size_t)b * a.H + h) * a.Lq + i] = l > 0.0f ? m + logf(l) : INFINITY;
}

/* P = exp(S - lse) (0 where masked), Z = dropout factor, dS = P (Z dP - Di): in place,
 * s becomes Z*P and dp becomes dS. */
template <int RQ, int RK, bool EXP2 = false>
__device__ __forceinline__ void bwd_elementwise(const cu_attn &a, float (&s)[RQ][RK], float (&dp)[RQ][RK],
                                                const float *lse_s, const float *di_s, int b, int h,
                                                int i0, int nq, int j0, int nk, int ty, int tx) {
#pragma unroll
    for (int ii = 0; ii < RQ; ii++) {
        const int r = ty + 16 * ii, i = i0 + r;
        const float L = lse_s[r], L2 = L * LOG2E, di = di_s[r];
        const uint64_t rk = (a.dropout && r < nq) ? rowkey(a.seed, b, h, i) : 0;
#pragma unroll
        for (int jj = 0; jj < RK; jj++) {
            const int c = tx + 16 * jj;
            const bool ok = r < nq && c < nk && allowed(a, i, j0 + c);
            const float p = ok ? exp_shift<EXP2>(s[ii][jj], L, L2) : 0.0f;   /* L = +inf (row all masked) gives 0 */
            float z = 1.0f;
            if (a.dropout) z = (ok && keep(rk, j0 + c, a.thr)) ? a.inv_keep : 0.0f;
            dp[ii][jj] = p * (z * dp[ii][jj] - di);
            s[ii][jj] = p * z;
        }
    }
}

#endif
