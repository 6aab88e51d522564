/* Kernels of cached generation on the GPU (src/cuda/infer_cuda.c): the single-query
 * attention of a decoding step over the KV cache. Prefill chunks (several queries) use the
 * fused attention of attention.cu with a causal offset; every other op of a decoding step
 * is a kernel of kernels_*.cu or cuBLAS.
 *
 * Decoding attention ("split-K", as in flash-decoding): for one query row per head, the
 * keys 0..Lk-1 are cut in chunks of CU_DECODE_KEYS (= the block's 128 threads). A block
 * (chunk, G query heads of one KV head, batch; per head):
 *   scores   each of the 4 warps takes keys w, w+4, ...; a key's dot product is spread
 *            over the 32 lanes (lane l holds head dims l, l+32, l+64, l+96: coalesced
 *            reads of the K row) and summed with a warp reduction;
 *   softmax  thread t owns score t: block max m, p = exp(s - m), block sum l;
 *   P V      the warps again take keys w, w+4, ..., lanes the head dims (coalesced V
 *            rows); the 4 warp partials are added in warp order;
 * a warp loads the rows of DU = 4 of its keys before it uses the first (a step is bound by
 * these reads: several in flight per warp, not one; the math and its order are unchanged),
 * and with GQA a block serves G = 4 or 2 query heads of one KV head (the most of 4, 2, 1
 * that divides the group), so each K and V row is read once for them instead of once per head,
 * and writes (o[0..D), m, l) to part. The combine kernel (one block per head, batch) takes
 * M = max m_s, L = sum exp(m_s - M) l_s and out = sum exp(m_s - M) o_s / L over the chunks
 * in order. Same math as the CPU's flash attention up to the summation order. With a bf16
 * cache (cu_attn's k16, v16; KV16) the K and V rows are read as bf16 and widened: half the
 * bytes, the same fp32 math on the values the prefill's tensor-core attention reads.
 *
 * qkv_to_cache_k finishes a chunk's q/k/v GEMM (bias, RoPE) and writes k and v straight to
 * the cache rows (rounded to bf16 for a bf16 cache): one launch where a GEMM per K/V run, bias
 * broadcasts and RoPE passes were. */
#include "cuda_kernels.h"
#include "cuda_compat.cuh"
#include <math.h>
#include <type_traits>

#define DNT 128                      /* threads per block: 4 warps; == CU_DECODE_KEYS */
#define DNW (DNT / 32)
#define DU 4                         /* keys per warp whose K or V rows are loaded together */

__device__ __forceinline__ float dec_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float dec_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* block-wide max or sum over DNT threads; every thread gets the result */
template <bool MAX>
__device__ float dec_block_reduce(float v) {
    __shared__ float sh[DNW];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = MAX ? dec_warp_max(v) : dec_warp_sum(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    float r = sh[0];
    for (int i = 1; i < DNW; i++) r = MAX ? fmaxf(r, sh[i]) : r + sh[i];
    __syncthreads();                 /* sh is reused by the next call */
    return r;
}

/* element i of a cache row: fp32, or bf16 widened */
__device__ __forceinline__ float kv_at(const float *r, int i) { return r[i]; }
__device__ __forceinline__ float kv_at(const uint16_t *r, int i) { return bf16_float(r[i]); }

/* x[u] = this lane's head dims (lane + 32 dd) of the row of key j1 + u DNW, u < DU, from
 * rows of stride st at base; 0 past nk keys or D dims. All DU rows' loads come before any use. */
template <int RD, typename E>
__device__ __forceinline__ void load_rows(E (&x)[DU][RD], const E *base, long st, int j1, int nk, int lane, int D) {
#pragma unroll
    for (int u = 0; u < DU; u++) {
        const int j = j1 + u * DNW;
        const E *r = base + (long)j * st;
#pragma unroll
        for (int dd = 0; dd < RD; dd++) {
            const int d = lane + 32 * dd;
            x[u][dd] = j < nk && d < D ? r[d] : (E)0;
        }
    }
}

/* RD = head dims per lane (D <= 32 * RD); KV16: the cache is bf16 (a.k16, a.v16); G: query
 * heads per block, all of one KV head (G divides H / Hkv), which share its K and V rows: each
 * row is read once for the G heads. A head's math is the same whatever G. */
template <int RD, bool KV16, int G>
__global__ void __launch_bounds__(DNT) attn_decode_part_k(cu_attn a, float *part, int nsplit) {
    typedef typename std::conditional<KV16, uint16_t, float>::type E;
    __shared__ float sc[G][CU_DECODE_KEYS];
    __shared__ float red[DNW][G][32 * RD];
    const int t = threadIdx.x, lane = t & 31, w = t >> 5;
    const int s = blockIdx.x, h0 = blockIdx.y * G, b = blockIdx.z, hk = h0 / (a.H / a.Hkv), D = a.D;
    const int Lk = a.pos_d ? *a.pos_d + 1 : a.Lk;        /* a graph's step: its position */
    const int j0 = s * CU_DECODE_KEYS, nk = min(CU_DECODE_KEYS, Lk - j0);
    const E *kb = (const E *)(KV16 ? (const void *)a.k16 : (const void *)a.k) + b * a.k_sb + hk * a.k_sh + (long)j0 * a.k_st;
    const E *vb = (const E *)(KV16 ? (const void *)a.v16 : (const void *)a.v) + b * a.v_sb + hk * a.v_sh + (long)j0 * a.v_st;
    float qv[G][RD];
#pragma unroll
    for (int g = 0; g < G; g++) {
        const float *q = a.q + b * a.q_sb + (h0 + g) * a.q_sh;
#pragma unroll
        for (int dd = 0; dd < RD; dd++) {
            const int d = lane + 32 * dd;
            qv[g][dd] = d < D ? q[d] * a.scale : 0.0f;
        }
    }
    /* a warp's keys DU at a time: their rows' loads are all issued before the first
     * reduction (and before any store that the compiler could not tell from them) */
    for (int j1 = w; j1 < nk; j1 += DU * DNW) {  /* same trip count for the whole warp */
        E kx[DU][RD];
        load_rows(kx, kb, a.k_st, j1, nk, lane, D);
#pragma unroll
        for (int u = 0; u < DU; u++)
#pragma unroll
            for (int g = 0; g < G; g++) {
                float x = 0.0f;
#pragma unroll
                for (int dd = 0; dd < RD; dd++)
                    if (lane + 32 * dd < D) x = fmaf(qv[g][dd], kv_at(kx[u], dd), x);
                x = dec_warp_sum(x);
                if (lane == 0 && j1 + u * DNW < nk) sc[g][j1 + u * DNW] = x;
            }
    }
    __syncthreads();
    float mx[G], l[G];
#pragma unroll
    for (int g = 0; g < G; g++) {    /* thread t reads and writes only score t of each head here */
        const float sv = t < nk ? sc[g][t] : -INFINITY;
        mx[g] = dec_block_reduce<true>(sv);               /* nk >= 1: finite */
        const float p = t < nk ? expf(sv - mx[g]) : 0.0f;
        l[g] = dec_block_reduce<false>(p);
        sc[g][t] = p;
    }
    __syncthreads();
    float o[G][RD];
#pragma unroll
    for (int g = 0; g < G; g++)
#pragma unroll
        for (int dd = 0; dd < RD; dd++) o[g][dd] = 0.0f;
    for (int j1 = w; j1 < nk; j1 += DU * DNW) {  /* DU keys' V rows in flight, then in key order */
        E vx[DU][RD];
        load_rows(vx, vb, a.v_st, j1, nk, lane, D);
#pragma unroll
        for (int u = 0; u < DU; u++) {
            if (j1 + u * DNW >= nk) break;
#pragma unroll
            for (int g = 0; g < G; g++) {
                const float pj = sc[g][j1 + u * DNW];
#pragma unroll
                for (int dd = 0; dd < RD; dd++)
                    if (lane + 32 * dd < D) o[g][dd] = fmaf(pj, kv_at(vx[u], dd), o[g][dd]);
            }
        }
    }
#pragma unroll
    for (int g = 0; g < G; g++)
#pragma unroll
        for (int dd = 0; dd < RD; dd++) red[w][g][lane + 32 * dd] = o[g][dd];
    __syncthreads();
#pragma unroll
    for (int g = 0; g < G; g++) {
        float *pp = part + (((size_t)b * a.H + h0 + g) * nsplit + s) * (size_t)(D + 2);
        for (int d = t; d < D; d += DNT) {
            float acc = red[0][g][d];
            for (int i = 1; i < DNW; i++) acc += red[i][g][d];
            pp[d] = acc;
        }
        if (t == 0) { pp[D] = mx[g]; pp[D + 1] = l[g]; }
    }
}

/* one block per (head, batch): the chunks' partials combined in chunk order */
__global__ void __launch_bounds__(DNT) attn_decode_combine_k(cu_attn a, const float *part, int nsplit) {
    const int h = blockIdx.x, b = blockIdx.y, D = a.D;
    const size_t row = (size_t)(D + 2);
    const float *pp = part + ((size_t)b * a.H + h) * nsplit * row;
    float M = -INFINITY;
    for (int s = 0; s < nsplit; s++) M = fmaxf(M, pp[s * row + D]);
    float L = 0.0f;
    for (int s = 0; s < nsplit; s++) L += expf(pp[s * row + D] - M) * pp[s * row + D + 1];
    const long off = b * a.o_sb + h * a.o_sh;
    for (int d = threadIdx.x; d < D; d += DNT) {
        float acc = 0.0f;
        for (int s = 0; s < nsplit; s++) acc += expf(pp[s * row + D] - M) * pp[s * row + d];
        put(a.out, a.out16, off + d, acc / L);
    }
}

/* After the q/k/v GEMM of n tokens at positions pos0..: one thread per pair of head dims
 * (2e, 2e+1) of a (token, head) of qkv (n rows of QKV = (H + 2 Hkv) hs). Adds the bias, turns
 * q and k by RoPE (table: sk_rope's cos/sin rows; NULL: none), leaves q in place and writes k
 * and v of each stored KV head (slot[j] >= 0) to its cache row. */
__global__ void qkv_to_cache_k(float *qkv, int n, int H, int Hkv, int hs, const float *bias, const float *rope,
                               const int32_t *pos0_d, const int *slot, float *kc, float *vc, uint16_t *kc16,
                               uint16_t *vc16, int ld) {
    const int half = (hs + 1) / 2, heads = H + 2 * Hkv, pos0 = *pos0_d;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)n * heads * half) return;
    const int e = (int)(idx % half), u = (int)(idx / half % heads), i = (int)(idx / half / heads);
    const int kind = u < H ? 0 : u < H + Hkv ? 1 : 2, j = kind == 0 ? u : kind == 1 ? u - H : u - H - Hkv;
    float *out = NULL;
    uint16_t *out16 = NULL;
    if (kind == 0) out = qkv + (size_t)i * (H + 2 * Hkv) * hs + (size_t)u * hs;
    else {
        if (slot[j] < 0) return;             /* no layer reads this KV head: not computed */
        const size_t o = (size_t)(pos0 + i) * ld + (size_t)slot[j] * hs;
        if (kc16) out16 = (kind == 1 ? kc16 : vc16) + o;
        else out = (kind == 1 ? kc : vc) + o;
    }
    const size_t c = (size_t)u * hs + 2 * e;
    const float *in = qkv + (size_t)i * (H + 2 * Hkv) * hs + c;
    float a = in[0] + (bias ? bias[c] : 0.0f);
    if (2 * e + 1 >= hs) { put(out, out16, 2 * e, a); return; }
    float b = in[1] + (bias ? bias[c + 1] : 0.0f);
    if (rope && kind < 2) {                  /* as rope_k (kernels_act.cu) */
        const float *tab = rope + (size_t)(pos0 + i) * hs;
        const float co = tab[2 * e], si = tab[2 * e + 1], a0 = a;
        a = a0 * co - b * si;
        b = a0 * si + b * co;
    }
    put(out, out16, 2 * e, a);
    put(out, out16, 2 * e + 1, b);
}
extern "C" void cu_qkv_to_cache(float *qkv, int n, int H, int Hkv, int hs, const float *bias, const float *rope,
                                const int32_t *pos0_d, const int *slot, float *kc, float *vc, uint16_t *kc16,
                                uint16_t *vc16, int ld) {
    const size_t work = (size_t)n * (H + 2 * Hkv) * ((hs + 1) / 2);
    if (work) LAUNCH(qkv_to_cache_k, (unsigned)((work + DNT - 1) / DNT), DNT, 0, qkv, n, H, Hkv, hs, bias, rope, pos0_d,
                     slot, kc, vc, kc16, vc16, ld);
}

extern "C" int cu_decode_splits(int Lk) { return Lk < 1 ? 1 : (Lk + CU_DECODE_KEYS - 1) / CU_DECODE_KEYS; }

template <int RD, int G>
static void (*decode_kernel(bool kv16))(cu_attn, float *, int) {
    return kv16 ? attn_decode_part_k<RD, true, G> : attn_decode_part_k<RD, false, G>;
}
template <int RD>
static int decode_launch(const cu_attn *a, float *part, int G) {
    const int ns = cu_decode_splits(a->Lk);
    dim3 grid((unsigned)ns, (unsigned)(a->H / G), (unsigned)a->B);
    void (*kern)(cu_attn, float *, int) = G == 4 ? decode_kernel<RD, 4>(a->k16) : G == 2 ? decode_kernel<RD, 2>(a->k16)
                                                                                        : decode_kernel<RD, 1>(a->k16);
    LAUNCH(kern, grid, DNT, 0, *a, part, ns);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return (int)e;
    dim3 grid2((unsigned)a->H, (unsigned)a->B);
    LAUNCH(attn_decode_combine_k, grid2, DNT, 0, *a, (const float *)part, ns);
    return (int)cudaGetLastError();
}

extern "C" int cu_attn_decode(const cu_attn *a, float *part) {
    if (a->B < 1 || a->H < 1 || a->Lk < 1) return 0;
    if (a->D < 1 || a->D > 128 || a->Lq != 1 || !a->k16 != !a->v16 || a->Hkv < 1 || a->H % a->Hkv) return -1;
    const int group = a->H / a->Hkv;
    const int G = a->decode_heads ? a->decode_heads : group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 1;
    if ((G != 1 && G != 2 && G != 4) || group % G) return -1;
    switch ((a->D + 31) / 32) {
    case 1: return decode_launch<1>(a, part, G);
    case 2: return decode_launch<2>(a, part, G);
    case 3: return decode_launch<3>(a, part, G);
    default: return decode_launch<4>(a, part, G);
    }
}
