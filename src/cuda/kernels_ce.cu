/* CUDA kernels: the fused softmax cross-entropy of the classifier, fp32 and bf16 logits
 * (src/core/ops.c); each mirrors its CPU twin, see src/cuda/cuda_kernels.h for the contracts. */
#include "kernels_common.cuh"

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
