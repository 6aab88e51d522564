/* CUDA kernels: LayerNorm and RMSNorm forward and backward, the column sums of their weight
 * gradients and of biases, bias broadcast and bias + residual (src/core/ops.c); each mirrors
 * its CPU twin, see src/cuda/cuda_kernels.h for the contracts. */
#include "kernels_common.cuh"

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
