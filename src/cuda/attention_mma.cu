/* Fused attention on tensor cores with the scores in registers (FlashAttention-2's scheme),
 * forward and backward: the default for --bf16 (cu_attn.tc = 1). Same contract, grids of
 * work, causal rule, dropout hash, lse and bf16 rounding points as attention_tc.cu's wmma
 * kernels: Q (times the softmax scale), K and V rounded to bf16 as their tiles are loaded,
 * P rounded after the running max is subtracted and the dropout mask applied; scores,
 * softmax statistics and the output accumulator in fp32. (The backward: further down.)
 *
 * Forward. A block is NW warps (4, or 8 with cu_attn.mma_warps = 8) and 16 NW query rows (16 per
 * warp; 32 with cu_attn.mma_rows = 32: MR = 2 row tiles per warp, each fragment of the walked
 * tile serving both, the same products added in the same order; measured slower on an H200),
 * and walks the visible keys in tiles of WT = 64. Each warp keeps its Q rows as mma A
 * fragments for the whole kernel. Per key tile:
 *   S = Q K^T   mma.m16n8k16, K's B fragments by ldmatrix (K rows are S's columns);
 *   softmax     in the accumulators: lane (g, t) holds rows g and g + 8 at columns
 *               8n + 2t, 8n + 2t + 1, so a row's max and sum are two shuffles over the
 *               4 lanes t of the group;
 *   O += P V    the S accumulators of two adjacent 8-column tiles are exactly the A fragment
 *               of a 16-wide k step (mma.cuh's layouts), so P goes from the softmax to the
 *               next mma as bf16 pairs without touching shared memory; V's B fragments by
 *               ldmatrix.trans.
 * What goes through shared memory is only the bf16 Q, K and V tiles (rows padded by 8
 * elements: a stride of an odd number of 16-byte units, so ldmatrix's 8 row reads hit 8
 * different bank groups). Compared with the wmma kernel this saves, per key tile, the S tile
 * round trip through shared memory, the O-update tile's, and two of the four barriers.
 *
 * Loads. With cu_attn's bf16 copies (q16, k16, v16: what the model's --bf16 forward writes
 * once per layer, Q already scaled) the tiles are cp.async copies, 16 bytes per thread per
 * copy, and with two buffers per walked tile (NB = 2, where the shared memory allows it)
 * the copy of the next K/V tile is issued before the math of this one, so the load runs
 * under the tensor-core work instead of stalling it:
 *     issue tile 0
 *     for each tile t:  issue t+1 into the other buffer; wait for t; barrier;
 *                       math on t; barrier (its buffer may be overwritten next)
 * With one buffer the copy of t+1 is issued after the second barrier. Without the bf16
 * copies (an fp32 KV cache's prefill, the tests' fp32 views) the same loop loads the fp32
 * views and rounds them on the way, as the wmma kernels do; each of q, k, v is read from its
 * bf16 copy when it has one (a bf16 KV cache's prefill: k and v, while q is the chunk's fp32). The values in the tiles are the same
 * bits either way (but for a NaN's payload). */
#include "attention_common.cuh"
#include "mma.cuh"

/* rows of the walked tiles with two row tiles per warp (cu_attn.mma_rows = 32): forward, dQ, dK dV */
#define MR2_FWD_WT 64
#define MR2_DQ_WT 32
#define MR2_DKV_WT 16

/* NW warps per block (4 or 8: cu_attn.mma_warps), each owning 16 rows of the block's tile of
 * 16 NW rows: query rows in the forward and dQ kernels, key rows in the dK/dV kernel. */
template <int DM, int NW, int MR = 1, int WT = 64> struct Mma {
    static constexpr int S = DM + 8;                  /* bf16 row stride in shared memory */
    static constexpr int RB = 16 * NW * MR, NTH = 32 * NW;  /* the block's rows, its threads */
    /* forward: Q (RB rows), nb buffers of K and V (WT rows) */
    static constexpr size_t fwd(int nb) { return sizeof(uint16_t) * (RB + 2 * nb * WT) * S; }
    /* backward: two resident tiles of RB rows, nb pairs of walked tiles of WT rows, lse and
     * Di of the query rows (RB resident ones, or nb walked tiles of WT) */
    static constexpr size_t bwd(int nb) {
        return sizeof(uint16_t) * 2 * (RB + nb * WT) * S + 2 * sizeof(float) * (RB > nb * WT ? RB : nb * WT);
    }
};

/* rows [r0, r0 + n) of a strided fp32 head, times s, into a bf16 tile of `rows` rows and DM
 * columns (stride DM + 8) as bf16 pairs, by NTH threads; zero padded past n rows and D columns */
template <int DM, int NTH>
__device__ __forceinline__ void load_pairs(uint16_t *dst, const float *src, long st, int r0, int n, int rows, int D,
                                           float s) {
    constexpr int P = DM / 2;
    uint32_t *d32 = (uint32_t *)dst;
    for (int e = threadIdx.x; e < rows * P; e += NTH) {
        const int r = e / P, c = 2 * (e % P);
        float x0 = 0.0f, x1 = 0.0f;
        if (r < n) {
            const float *row = src + (long)(r0 + r) * st;
            if (c < D) x0 = row[c] * s;
            if (c + 1 < D) x1 = row[c + 1] * s;
        }
        sts32(d32 + (r * (DM + 8) + c) / 2, pack_bf16x2(x0, x1));
    }
}

/* rows [r0, r0 + n) of a strided bf16 head into a tile of `rows` rows (stride DM + 8), zero
 * padded past n rows and D columns: 16-byte cp.async copies (joining the thread's open group)
 * when vec (D, the strides and the address multiples of 8 elements), else 2-byte loads */
template <int DM, int NTH>
__device__ __forceinline__ void load_tile16(uint16_t *dst, const uint16_t *src, long st, int r0, int n, int rows,
                                            int D, bool vec) {
    constexpr int U = DM / 8;                          /* 16-byte units per row */
    for (int e = threadIdx.x; e < rows * U; e += NTH) {
        const int r = e / U, c = 8 * (e % U);
        uint16_t *d = dst + r * (DM + 8) + c;
        if (vec && r < n && c < D) {
            cp_async16(d, src + (long)(r0 + r) * st + c);
            continue;
        }
        uint32_t w[4] = {0u, 0u, 0u, 0u};
        if (r < n) {
            const uint16_t *row = src + (long)(r0 + r) * st;
#pragma unroll
            for (int k = 0; k < 8; k++)
                if (c + k < D) w[k / 2] |= (uint32_t)row[c + k] << (16 * (k & 1));
        }
#pragma unroll
        for (int k = 0; k < 4; k++) sts32(d + 2 * k, w[k]);
    }
}

/* a head's tile: from its bf16 copy src16 when there is one (already scaled), else from the
 * fp32 view src times s */
template <int DM, int NTH>
__device__ __forceinline__ void load_head(uint16_t *dst, const uint16_t *src16, const float *src, long st, int r0,
                                          int n, int rows, int D, float s, bool vec) {
    if (src16) load_tile16<DM, NTH>(dst, src16, st, r0, n, rows, D, vec);
    else load_pairs<DM, NTH>(dst, src, st, r0, n, rows, D, s);
}

/* the K and V tiles of key rows [j0, j0 + nk) of kv head hk, batch b (`rows` rows) */
template <int DM, int NTH>
__device__ __forceinline__ void load_kv(const cu_attn &a, uint16_t *Ks, uint16_t *Vs, int b, int hk, int j0, int nk,
                                        int rows, bool vec) {
    const long ko = b * a.k_sb + hk * a.k_sh, vo = b * a.v_sb + hk * a.v_sh;
    /* (k, v are NULL over a bf16 KV cache: no offset from them then) */
    load_head<DM, NTH>(Ks, a.k16 ? a.k16 + ko : NULL, a.k16 ? NULL : a.k + ko, a.k_st, j0, nk, rows, a.D, 1.0f, vec);
    load_head<DM, NTH>(Vs, a.v16 ? a.v16 + vo : NULL, a.v16 ? NULL : a.v + vo, a.v_st, j0, nk, rows, a.D, 1.0f, vec);
}

/* zeroes n accumulator tiles of 16 x 8 */
template <int N>
__device__ __forceinline__ void zero(float (&x)[N][4]) {
#pragma unroll
    for (int n = 0; n < N; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) x[n][e] = 0.0f;
}

/* max / sum over the 4 lanes of a group (the lanes holding one score row) */
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* the A fragment of rows r0..r0+15, columns 16kd.. of a resident tile */
template <int DM>
__device__ __forceinline__ void lda(uint32_t (&f)[4], const uint16_t *X, int r0, int kd, int lane) {
    ldsm_x4(f, X + (r0 + (lane & 15)) * (DM + 8) + kd * 16 + 8 * (lane >> 4));
}
/* B fragments of two 8-column tiles (columns = rows 16np.. of Y, k = columns 16kd..) for X Y^T */
template <int DM>
__device__ __forceinline__ void ldb_t(uint32_t (&f)[4], const uint16_t *Y, int np, int kd, int lane) {
    ldsm_x4(f, Y + (np * 16 + (lane & 7) + 8 * (lane >> 4)) * (DM + 8) + kd * 16 + 8 * ((lane >> 3) & 1));
}
/* B fragments of two 8-column tiles (columns 16dp.. of Y, k = rows 16kk..) for X Y */
template <int DM>
__device__ __forceinline__ void ldb(uint32_t (&f)[4], const uint16_t *Y, int kk, int dp, int lane) {
    ldsm_x4_trans(f, Y + (kk * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * (DM + 8) + dp * 16 + 8 * (lane >> 4));
}

/* C[mr] (16 x WT) = X Y^T for the warp's row tiles r0 + 16 mr of X and the WT rows of Y
 * (k = head dims); each B fragment of Y serves the MR row tiles */
template <int DM, int MR, int WT>
__device__ __forceinline__ void product_xyT(float (&c)[MR][WT / 8][4], const uint16_t *X, int r0, const uint16_t *Y,
                                            int lane) {
#pragma unroll
    for (int mr = 0; mr < MR; mr++) zero(c[mr]);
#pragma unroll
    for (int kd = 0; kd < DM / 16; kd++) {
        uint32_t xf[MR][4];
#pragma unroll
        for (int mr = 0; mr < MR; mr++) lda<DM>(xf[mr], X, r0 + 16 * mr, kd, lane);
#pragma unroll
        for (int np = 0; np < WT / 16; np++) {
            uint32_t yf[4];
            ldb_t<DM>(yf, Y, np, kd, lane);
#pragma unroll
            for (int mr = 0; mr < MR; mr++) {
                mma_bf16_16816(c[mr][2 * np], xf[mr], yf[0], yf[1]);
                mma_bf16_16816(c[mr][2 * np + 1], xf[mr], yf[2], yf[3]);
            }
        }
    }
}

/* A fragment (16 x 16, k = columns 16kk..) from the accumulators of two adjacent 8-column tiles
 * of a 16 x WT product, rounded to bf16: mma.cuh's C layout is its A layout */
template <int N>
__device__ __forceinline__ void a_frag(uint32_t (&f)[4], const float (&x)[N][4], int kk) {
    f[0] = pack_bf16x2(x[2 * kk][0], x[2 * kk][1]);
    f[1] = pack_bf16x2(x[2 * kk][2], x[2 * kk][3]);
    f[2] = pack_bf16x2(x[2 * kk + 1][0], x[2 * kk + 1][1]);
    f[3] = pack_bf16x2(x[2 * kk + 1][2], x[2 * kk + 1][3]);
}

/* acc[mr] (16 x DM) += af[mr] (16 x 16) times rows 16kk..16kk+15 of a resident (., DM) tile Y;
 * each B fragment of Y serves the MR row tiles */
template <int DM, int MR>
__device__ __forceinline__ void mma_rows_y(float (&acc)[MR][DM / 8][4], const uint32_t (&af)[MR][4],
                                           const uint16_t *Y, int kk, int lane) {
#pragma unroll
    for (int dp = 0; dp < DM / 16; dp++) {          /* head dims 16dp.. as two 8-column tiles */
        uint32_t yf[4];
        ldb<DM>(yf, Y, kk, dp, lane);
#pragma unroll
        for (int mr = 0; mr < MR; mr++) {
            mma_bf16_16816(acc[mr][2 * dp], af[mr], yf[0], yf[1]);
            mma_bf16_16816(acc[mr][2 * dp + 1], af[mr], yf[2], yf[3]);
        }
    }
}

/* acc[mr] (16 x DM) += A[mr] Y, A[mr] (16 x WT) in accumulator layout (rounded to bf16 here),
 * Y a resident (WT, DM) tile */
template <int DM, int MR, int WT>
__device__ __forceinline__ void product_acc(float (&acc)[MR][DM / 8][4], const float (&A)[MR][WT / 8][4],
                                            const uint16_t *Y, int lane) {
#pragma unroll
    for (int kk = 0; kk < WT / 16; kk++) {
        uint32_t af[MR][4];
#pragma unroll
        for (int mr = 0; mr < MR; mr++) a_frag(af[mr], A[mr], kk);
        mma_rows_y<DM, MR>(acc, af, Y, kk, lane);
    }
}

template <int DM, int NW, int NB, int MR, int WT, int MINB = 1>
__global__ void __launch_bounds__(32 * NW, MINB) attn_mma_fwd_k(cu_attn a, int vec) {
    typedef Mma<DM, NW, MR, WT> M;
    constexpr int S = M::S, KD = DM / 16, NS = WT / 8, NO = DM / 8, NTH = M::NTH;
    DYN_SMEM_BYTES(smem);
    uint16_t *Qs = (uint16_t *)smem, *Ks = Qs + M::RB * S, *Vs = Ks + NB * WT * S;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int qt = gridDim.x - 1 - blockIdx.x;        /* heaviest causal tiles first */
    const int h = blockIdx.y, b = blockIdx.z, hk = h / (a.H / a.Hkv);
    const int i0 = qt * M::RB, nq = min(M::RB, a.Lq - i0), D = a.D;
    const int hr = h - use_run(a, hk);                /* the head's index in its run: the dropout hash's */
    const long qo = b * a.q_sb + h * a.q_sh;

    load_head<DM, NTH>(Qs, a.q16 ? a.q16 + qo : NULL, a.q + qo, a.q_st, i0, nq, M::RB, D, a.scale, vec);
    cp_commit();
    const int jend = key_end(a, i0, nq), ntiles = (jend + WT - 1) / WT;
    if (ntiles > 0) {
        load_kv<DM, NTH>(a, Ks, Vs, b, hk, 0, min(WT, jend), WT, vec);
        cp_commit();
        cp_wait<1>();                 /* Q's copies; tile 0's may still be in flight */
    } else cp_wait<0>();
    __syncthreads();
    uint32_t qf[MR][KD][4];           /* the warp's 16 MR Q rows as A fragments */
#pragma unroll
    for (int mr = 0; mr < MR; mr++)
#pragma unroll
        for (int kd = 0; kd < KD; kd++)
            ldsm_x4(qf[mr][kd], Qs + ((warp * MR + mr) * 16 + (lane & 15)) * S + kd * 16 + 8 * (lane >> 4));

    /* this lane's rows: local (warp MR + mr) 16 + g + 8 hi */
    float o[MR][NO][4], m[MR][2], l[MR][2];
    uint64_t rk[MR][2];
    bool row_ok[MR][2];
#pragma unroll
    for (int mr = 0; mr < MR; mr++) {
#pragma unroll
        for (int hi = 0; hi < 2; hi++) {
            const int r = (warp * MR + mr) * 16 + g + 8 * hi;
            m[mr][hi] = -INFINITY; l[mr][hi] = 0.0f;
            row_ok[mr][hi] = r < nq;
            rk[mr][hi] = a.dropout ? rowkey(a.seed, b, hr, i0 + r) : 0;
        }
        zero(o[mr]);
    }

    for (int it = 0; it < ntiles; it++) {
        const int j0 = it * WT, nk = min(WT, jend - j0), buf = NB == 2 ? it & 1 : 0;
        if (NB == 2 && it + 1 < ntiles) {      /* the next tile's copy runs under this one's math */
            load_kv<DM, NTH>(a, Ks + (buf ^ 1) * WT * S, Vs + (buf ^ 1) * WT * S, b, hk, j0 + WT,
                             min(WT, jend - j0 - WT), WT, vec);
            cp_commit();
            cp_wait<1>();
        } else cp_wait<0>();
        __syncthreads();              /* tile it is in every thread's view */
        const uint16_t *Kt = Ks + buf * WT * S, *Vt = Vs + buf * WT * S;

        float s[MR][NS][4];
#pragma unroll
        for (int mr = 0; mr < MR; mr++) zero(s[mr]);
#pragma unroll
        for (int kd = 0; kd < KD; kd++)
#pragma unroll
            for (int np = 0; np < NS / 2; np++) {          /* key rows 16np.. as two 8-column tiles */
                uint32_t kf[4];
                ldsm_x4(kf, Kt + (np * 16 + (lane & 7) + 8 * (lane >> 4)) * S + kd * 16 + 8 * ((lane >> 3) & 1));
#pragma unroll
                for (int mr = 0; mr < MR; mr++) {          /* each K fragment serves the warp's MR row tiles */
                    mma_bf16_16816(s[mr][2 * np], qf[mr][kd], kf[0], kf[1]);
                    mma_bf16_16816(s[mr][2 * np + 1], qf[mr][kd], kf[2], kf[3]);
                }
            }

        /* a key tile wholly visible to the block's first row (so to all) skips the per-element
         * mask; padding rows past nq then see it too, harmlessly: they are never written */
        const bool full = nk == WT && (!a.causal || (long)j0 + WT - 1 <= (long)i0 + a.causal_offset);
#pragma unroll
        for (int mr = 0; mr < MR; mr++)
#pragma unroll
        for (int hi = 0; hi < 2; hi++) {
            const int i = i0 + (warp * MR + mr) * 16 + g + 8 * hi;
            float mx = -INFINITY;
#pragma unroll
            for (int n = 0; n < NS; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int c = 8 * n + 2 * t + e;
                    float &x = s[mr][n][2 * hi + e];
                    if (!full && !(row_ok[mr][hi] && c < nk && allowed(a, i, j0 + c))) x = -INFINITY;
                    mx = fmaxf(mx, x);
                }
            mx = quad_max(mx);
            const float mnew = fmaxf(m[mr][hi], mx);
            float alpha = 1.0f, sum = 0.0f;
            if (mnew == -INFINITY) {  /* nothing visible yet in this row */
#pragma unroll
                for (int n = 0; n < NS; n++) { s[mr][n][2 * hi] = 0.0f; s[mr][n][2 * hi + 1] = 0.0f; }
            } else {
                /* e^(x - m) as 2^(x log2 e - m log2 e): one FMA and the exp2 unit per score;
                 * alpha exactly 1 while the max stays (a wholly masked tile changes nothing) */
                const float ml = mnew * LOG2E;
                alpha = exp_rescale<true>(m[mr][hi], mnew);
#pragma unroll
                for (int n = 0; n < NS; n++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        float &x = s[mr][n][2 * hi + e];
                        x = exp_shift<true>(x, mnew, ml);
                        sum += x;
                    }
            }
            sum = quad_sum(sum);
            if (mnew != -INFINITY) { l[mr][hi] = l[mr][hi] * alpha + sum; m[mr][hi] = mnew; }
            if (a.dropout && row_ok[mr][hi]) {
#pragma unroll
                for (int n = 0; n < NS; n++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int c = 8 * n + 2 * t + e;
                        float &x = s[mr][n][2 * hi + e];
                        x = (c < nk && keep(rk[mr][hi], j0 + c, a.thr)) ? x * a.inv_keep : 0.0f;
                    }
            }
#pragma unroll
            for (int n = 0; n < NO; n++) { o[mr][n][2 * hi] *= alpha; o[mr][n][2 * hi + 1] *= alpha; }
        }

        product_acc<DM, MR, WT>(o, s, Vt, lane);   /* O += P V, P straight from the accumulators */
        __syncthreads();              /* every warp is done with tile it's buffers */
        if (NB == 1 && it + 1 < ntiles) {
            load_kv<DM, NTH>(a, Ks, Vs, b, hk, j0 + WT, min(WT, jend - j0 - WT), WT, vec);
            cp_commit();
        }
    }

    /* out = O / l, lse = m + log(l) (+inf for a row that saw no key) */
#pragma unroll
    for (int mr = 0; mr < MR; mr++)
#pragma unroll
    for (int hi = 0; hi < 2; hi++) {
        if (!row_ok[mr][hi]) continue;
        const int i = i0 + (warp * MR + mr) * 16 + g + 8 * hi;
        const float inv = l[mr][hi] > 0.0f ? 1.0f / l[mr][hi] : 0.0f;
        const long off = b * a.o_sb + h * a.o_sh + (long)i * a.o_st;
#pragma unroll
        for (int n = 0; n < NO; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int d = 8 * n + 2 * t + e;
                if (d < D) put(a.out, a.out16, off + d, o[mr][n][2 * hi + e] * inv);
            }
        if (t == 0 && a.lse)
            a.lse[((size_t)b * a.H + h) * a.Lq + i] = l[mr][hi] > 0.0f ? m[mr][hi] + logf(l[mr][hi]) : INFINITY;
    }
}
/* ----------------------------------------------------------------- backward
 * The same two kernels as attention_tc.cu (dQ per query tile; dK, dV per key tile and kv
 * head), with the same rounding points: P (times the dropout mask) before dV += P^T dO, dS
 * before dQ += dS K and dK += dS^T Q. A block is again 4 warps of 16 rows: query rows in the
 * dQ kernel, key rows in the dK/dV kernel, which therefore computes S^T = K Q^T and
 * dP^T = V dO^T, so that P^T and dS^T come out of the accumulators already as the A
 * fragments of dV's and dK's products. The A fragments of the resident tiles are read from
 * shared memory at each use (ldmatrix), which keeps head size 128 within the registers.
 * With 4 warps of 16 rows the default is one kernel for all three (FQ, the fused backward,
 * at attn_mma_dkv_k): the dK/dV kernel also adds dQ, in key-tile order; the dQ kernel stays
 * for the other block shapes and cu_attn.bwd_split. */

/* Q (scaled) and dO tiles in bf16 (`rows` rows), lse and Di of query rows [i0, i0 + nq) of
 * head h (padded rows: lse = +inf, so their P is 0, and Di = 0), as copies of the thread's
 * open cp.async group where they can be */
template <int DM, int NTH>
__device__ __forceinline__ void load_q_side_mma(const cu_attn &a, const float *dout, const float *Di, int b, int h,
                                                int i0, int nq, int rows, uint16_t *Qs, uint16_t *dOs, float *lse_s,
                                                float *di_s, bool vec) {
    const long qo = b * a.q_sb + h * a.q_sh, oo = b * a.o_sb + h * a.o_sh;
    load_head<DM, NTH>(Qs, a.q16 ? a.q16 + qo : NULL, a.q + qo, a.q_st, i0, nq, rows, a.D, a.scale, vec);
    load_head<DM, NTH>(dOs, a.dout16 ? a.dout16 + oo : NULL, a.dout16 ? NULL : dout + oo, a.o_st, i0, nq, rows, a.D, 1.0f,
                       vec);
    const size_t base = ((size_t)b * a.H + h) * a.Lq + i0;
    for (int r = threadIdx.x; r < rows; r += NTH) {
        if (r < nq) {
            cp_async4(lse_s + r, a.lse + base + r);
            cp_async4(di_s + r, Di + base + r);
        } else {
            lse_s[r] = INFINITY;
            di_s[r] = 0.0f;
        }
    }
}

/* P = exp(S - lse) (0 where masked), Z = dropout factor, dS = P (Z dP - Di) for one element
 * of query i, key j: s becomes Z P, dp becomes dS. L2 = lse log2(e): P = 2^(S log2 e - L2). */
__device__ __forceinline__ void bwd_element(const cu_attn &a, float &s, float &dp, bool ok, float L2, float di,
                                            uint64_t rk, int j) {
    const float p = ok ? exp_shift<true>(s, 0.0f, L2) : 0.0f;
    float z = 1.0f;
    if (a.dropout) z = (ok && keep(rk, j, a.thr)) ? a.inv_keep : 0.0f;
    dp = p * (z * dp - di);
    s = p * z;
}

template <int DM, int NW, int NB, int MR, int WT>
__global__ void __launch_bounds__(32 * NW) attn_mma_dq_k(cu_attn a, const float *dout, float *dq, const float *Di, int vec) {
    typedef Mma<DM, NW, MR, WT> M;
    constexpr int S = M::S, NS = WT / 8, NO = DM / 8, NTH = M::NTH;
    DYN_SMEM_BYTES(smem);
    uint16_t *Qs = (uint16_t *)smem, *dOs = Qs + M::RB * S, *Ks = dOs + M::RB * S, *Vs = Ks + NB * WT * S;
    float *lse_s = (float *)(Vs + NB * WT * S), *di_s = lse_s + M::RB;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int qt = gridDim.x - 1 - blockIdx.x;
    const int h = blockIdx.y, b = blockIdx.z, hk = h / (a.H / a.Hkv);
    const int i0 = qt * M::RB, nq = min(M::RB, a.Lq - i0), D = a.D;
    const int hr = h - use_run(a, hk);
    load_q_side_mma<DM, NTH>(a, dout, Di, b, h, i0, nq, M::RB, Qs, dOs, lse_s, di_s, vec);
    cp_commit();
    const int jend = key_end(a, i0, nq), ntiles = (jend + WT - 1) / WT;
    if (ntiles > 0) {
        load_kv<DM, NTH>(a, Ks, Vs, b, hk, 0, min(WT, jend), WT, vec);
        cp_commit();
    }
    float acc[MR][NO][4];
#pragma unroll
    for (int mr = 0; mr < MR; mr++) zero(acc[mr]);
    for (int it = 0; it < ntiles; it++) {     /* the forward's pipeline over the K/V tiles */
        const int j0 = it * WT, nk = min(WT, jend - j0), buf = NB == 2 ? it & 1 : 0;
        if (NB == 2 && it + 1 < ntiles) {
            load_kv<DM, NTH>(a, Ks + (buf ^ 1) * WT * S, Vs + (buf ^ 1) * WT * S, b, hk, j0 + WT,
                             min(WT, jend - j0 - WT), WT, vec);
            cp_commit();
            cp_wait<1>();
        } else cp_wait<0>();
        __syncthreads();              /* tile it (and, the first time, Q's side) in every thread's view */
        const uint16_t *Kt = Ks + buf * WT * S, *Vt = Vs + buf * WT * S;
        float s[MR][NS][4], dp[MR][NS][4];
        product_xyT<DM, MR, WT>(s, Qs, warp * MR * 16, Kt, lane);
        product_xyT<DM, MR, WT>(dp, dOs, warp * MR * 16, Vt, lane);
        /* padded query rows have lse = +inf: their P is 0 without the mask */
        const bool full = nk == WT && (!a.causal || (long)j0 + WT - 1 <= (long)i0 + a.causal_offset);
#pragma unroll
        for (int mr = 0; mr < MR; mr++)
#pragma unroll
        for (int hi = 0; hi < 2; hi++) {
            const int r = (warp * MR + mr) * 16 + g + 8 * hi, i = i0 + r;
            const float L = lse_s[r] * LOG2E, di = di_s[r];
            const uint64_t rk = (a.dropout && r < nq) ? rowkey(a.seed, b, hr, i) : 0;
#pragma unroll
            for (int n = 0; n < NS; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int c = 8 * n + 2 * t + e;
                    const bool ok = full || (r < nq && c < nk && allowed(a, i, j0 + c));
                    bwd_element(a, s[mr][n][2 * hi + e], dp[mr][n][2 * hi + e], ok, L, di, rk, j0 + c);
                }
        }
        product_acc<DM, MR, WT>(acc, dp, Kt, lane);                 /* dQ += dS K */
        __syncthreads();              /* every warp is done with tile it's buffers */
        if (NB == 1 && it + 1 < ntiles) {
            load_kv<DM, NTH>(a, Ks, Vs, b, hk, j0 + WT, min(WT, jend - j0 - WT), WT, vec);
            cp_commit();
        }
    }
    cp_wait<0>();                     /* nothing left in flight (no key tile: Q's side) */
#pragma unroll
    for (int mr = 0; mr < MR; mr++)
#pragma unroll
    for (int hi = 0; hi < 2; hi++) {
        const int r = (warp * MR + mr) * 16 + g + 8 * hi;
        if (r >= nq) continue;
        float *row = dq + b * a.q_sb + h * a.q_sh + (long)(i0 + r) * a.q_st;
#pragma unroll
        for (int n = 0; n < NO; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int d = 8 * n + 2 * t + e;
                if (d < D) row[d] += a.scale * acc[mr][n][2 * hi + e];
            }
    }
}

/* The dK/dV kernel; with FQ (the fused backward, 4 warps of 16 rows) it also computes dQ.
 * Per walked query tile it then writes dS^T (bf16, the values dK's product rounds) to
 * shared memory and each warp computes dQ's contribution for 16 query rows, dS K over the
 * block's keys, and adds it to dq in global memory; the dQ kernel and its recomputation of
 * S and dP (two of the seven products) are gone. The additions stay deterministic: the
 * key tiles add into each query tile in ascending order, key tile kt after kt - 1 (a counter
 * per head and query tile, released by kt - 1 once its additions are done: sems below). So
 * that a block never waits for one that cannot run, blocks take their (key tile, kv head,
 * batch) from a ticket in the order they start, key tile slowest: the block a block waits
 * for started before it and waits only for earlier ones, and the heaviest causal tiles (the
 * first keys) still start first. The query tiles are walked downwards (below), so that key
 * tile kt meets each one in step with kt - 1. */
template <int DM, int NW, int NB, int MR, int WT, bool FQ = false, int MINB = 1>
__global__ void __launch_bounds__(32 * NW, MINB) attn_mma_dkv_k(cu_attn a, const float *dout, float *dk, float *dv, const float *Di, int vec,
                                                          float *dq, int *sync, int dq2) {
    typedef Mma<DM, NW, MR, WT> M;
    constexpr int S = M::S, NS = WT / 8, NO = DM / 8, NTH = M::NTH, RB = M::RB;
    static_assert(!FQ || (NW == 4 && MR == 1 && WT == 16 * NW), "the fused backward: 4 warps of 16 rows");
    DYN_SMEM_BYTES(smem);
    uint16_t *Ks = (uint16_t *)smem, *Vs = Ks + RB * S, *Qs = Vs + RB * S, *dOs = Qs + NB * WT * S;
    float *lse_s = (float *)(dOs + NB * WT * S), *di_s = lse_s + NB * WT;
    uint16_t *dSs = (uint16_t *)(lse_s + 2 * (RB > NB * WT ? RB : NB * WT));   /* FQ: dS^T, RB x (WT + 8) */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    int kt = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
    if (FQ) {                         /* the ticket: key tile slowest, then batch, then kv head */
        __shared__ int ticket;
        if (threadIdx.x == 0) ticket = atomicAdd(sync, 1);
        __syncthreads();
        const int tk = ticket, per = a.B * a.Hkv;
        kt = tk / per; b = tk % per / a.Hkv; hk = tk % a.Hkv;
    }
    const int group = a.H / a.Hkv, nqt_all = (a.Lq + WT - 1) / WT;
    const int j0 = kt * RB, nk = min(RB, a.Lk - j0), D = a.D;
    const int hfirst = use_run(a, hk, dk, dv);
    load_kv<DM, NTH>(a, Ks, Vs, b, hk, j0, nk, RB, vec);
    cp_commit();
    float ak[MR][NO][4], av[MR][NO][4];
#pragma unroll
    for (int mr = 0; mr < MR; mr++) { zero(ak[mr]); zero(av[mr]); }
    int istart = 0;                   /* first query tile that sees key j0 under the causal rule */
    if (a.causal) {
        long st = (long)j0 - a.causal_offset;
        istart = st >= a.Lq ? a.Lq : st < 0 ? 0 : (int)(st / WT) * WT;
    }
    /* the walked tiles: the query tiles from istart of each head of the group, in turn; with
     * FQ from the last query tile down to istart, each tile for every head of the group, so
     * that a key tile walks its query tiles in step with the key tile before it (which has one
     * more, the lowest): it waits for that one's additions to a tile only about as long as
     * they take, not for it to reach the tile (ascending, each key tile would start one tile
     * behind the one before, and a chain of key tiles running at once would idle) */
    const int nqt = (a.Lq - istart + WT - 1) / WT, ntiles = group * nqt, h_0 = hk * group;
    const int ilast = istart + (nqt - 1) * WT;
    int h = h_0, i0 = FQ ? ilast : istart;    /* tile it */
    if (ntiles > 0) {
        load_q_side_mma<DM, NTH>(a, dout, Di, b, h, i0, min(WT, a.Lq - i0), WT, Qs, dOs, lse_s, di_s, vec);
        cp_commit();
    }
    for (int it = 0; it < ntiles; it++) {
        const int nq = min(WT, a.Lq - i0), buf = NB == 2 ? it & 1 : 0;
        int i1, h1;                   /* tile it + 1 */
        if (FQ) { h1 = h + 1 < h_0 + group ? h + 1 : h_0; i1 = h + 1 < h_0 + group ? i0 : i0 - WT; }
        else { i1 = i0 + WT < a.Lq ? i0 + WT : istart; h1 = i0 + WT < a.Lq ? h : h + 1; }
        if (NB == 2 && it + 1 < ntiles) {     /* the next query tile's copy runs under this one's math */
            const int o = (buf ^ 1) * WT;
            load_q_side_mma<DM, NTH>(a, dout, Di, b, h1, i1, min(WT, a.Lq - i1), WT, Qs + o * S, dOs + o * S,
                                     lse_s + o, di_s + o, vec);
            cp_commit();
            cp_wait<1>();
        } else cp_wait<0>();
        __syncthreads();              /* tile it (and, the first time, K and V) in every thread's view */
        {
            const uint16_t *Qt = Qs + buf * WT * S, *dOt = dOs + buf * WT * S;
            const float *lse_t = lse_s + buf * WT, *di_t = di_s + buf * WT;
            float st[MR][NS][4], dpt[MR][NS][4];                 /* S^T, dP^T: key rows, query columns */
            product_xyT<DM, MR, WT>(st, Ks, warp * MR * 16, Qt, lane);
            product_xyT<DM, MR, WT>(dpt, Vs, warp * MR * 16, dOt, lane);
            /* padded keys must be masked (their S is 0, not -inf); padded queries have P = 0 */
            const bool full = nk == RB && (!a.causal || (long)j0 + RB - 1 <= (long)i0 + a.causal_offset);
#pragma unroll
            for (int n = 0; n < NS; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int c = 8 * n + 2 * t + e, i = i0 + c;
                    const float L = lse_t[c] * LOG2E, di = di_t[c];
                    const uint64_t rk = (a.dropout && c < nq) ? rowkey(a.seed, b, h - hfirst, i) : 0;
#pragma unroll
                    for (int mr = 0; mr < MR; mr++)
#pragma unroll
                    for (int hi = 0; hi < 2; hi++) {
                        const int jr = (warp * MR + mr) * 16 + g + 8 * hi;
                        const bool ok = full || (c < nq && jr < nk && allowed(a, i, j0 + jr));
                        bwd_element(a, st[mr][n][2 * hi + e], dpt[mr][n][2 * hi + e], ok, L, di, rk, j0 + jr);
                    }
                }
            if (FQ) {                 /* dS^T into shared memory: the warp's 16 key rows */
#pragma unroll
                for (int n = 0; n < NS; n++)
#pragma unroll
                    for (int hi = 0; hi < 2; hi++)
                        sts32(dSs + (warp * 16 + g + 8 * hi) * (WT + 8) + 8 * n + 2 * t,
                              pack_bf16x2(dpt[0][n][2 * hi], dpt[0][n][2 * hi + 1]));
            }
            product_acc<DM, MR, WT>(av, st, dOt, lane);                 /* dV += (Z P)^T dO */
            product_acc<DM, MR, WT>(ak, dpt, Qt, lane);                 /* dK += dS^T Q (Q scaled) */
        }
        int *sem = NULL;
        if (FQ) {
            __syncthreads();          /* dS^T whole */
            float aq[1][NO][4];       /* dQ += dS K for query rows i0 + 16 warp.. */
            zero(aq[0]);
#pragma unroll
            for (int kk = 0; kk < RB / 16; kk++) {
                uint32_t af[1][4];    /* dS's A fragment: dS^T's tile, transposed as it is read */
                ldsm_x4_trans(af[0], dSs + (kk * 16 + (lane & 7) + 8 * (lane >> 4)) * (WT + 8) + warp * 16 +
                                         8 * ((lane >> 3) & 1));
                mma_rows_y<DM, 1>(aq, af, Ks, kk, lane);
            }
            sem = sync + 1 + ((size_t)b * a.H + h) * nqt_all + i0 / WT;
            if (lane == 0) flag_wait_ge(sem, kt);    /* key tiles 0 .. kt - 1 have added theirs */
            __syncwarp();
#pragma unroll
            for (int hi = 0; hi < 2; hi++) {
                const int r = warp * 16 + g + 8 * hi;
                if (r >= nq) continue;
                float *row = dq + b * a.q_sb + h * a.q_sh + (long)(i0 + r) * a.q_st;
#pragma unroll
                for (int n = 0; n < NO; n++) {
                    const int d = 8 * n + 2 * t;
                    const float x = a.scale * aq[0][n][2 * hi], y = a.scale * aq[0][n][2 * hi + 1];
                    if (dq2 && d + 1 < a.D) red_add2(row + d, x, y);
                    else {
                        if (d < a.D) red_add(row + d, x);
                        if (d + 1 < a.D) red_add(row + d + 1, y);
                    }
                }
            }
        }
        __syncthreads();              /* every warp is done with tile it's buffers (and its dQ additions) */
        if (FQ && threadIdx.x == 0) flag_release(sem, kt + 1);
        if (NB == 1 && it + 1 < ntiles) {
            load_q_side_mma<DM, NTH>(a, dout, Di, b, h1, i1, min(WT, a.Lq - i1), WT, Qs, dOs, lse_s, di_s, vec);
            cp_commit();
        }
        h = h1;
        i0 = i1;
    }
    cp_wait<0>();                     /* nothing left in flight (no query tile: K and V) */
#pragma unroll
    for (int mr = 0; mr < MR; mr++)
#pragma unroll
    for (int hi = 0; hi < 2; hi++) {
        const int jr = (warp * MR + mr) * 16 + g + 8 * hi;
        if (jr >= nk) continue;
        const long koff = b * a.k_sb + hk * a.k_sh + (long)(j0 + jr) * a.k_st;
        const long voff = b * a.v_sb + hk * a.v_sh + (long)(j0 + jr) * a.v_st;
#pragma unroll
        for (int n = 0; n < NO; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int d = 8 * n + 2 * t + e;
                if (d >= D) continue;
                if (dk) dk[koff + d] += ak[mr][n][2 * hi + e];
                if (dv) dv[voff + d] += av[mr][n][2 * hi + e];
            }
    }
}
/* the bf16 copies can go as 16-byte cp.async copies: D, the strides and the address of every
 * copy given are multiples of 8 elements */
static bool al8(const uint16_t *p, long sb, long sh, long st) {
    return !p || ((uintptr_t)p % 16 == 0 && sb % 8 == 0 && sh % 8 == 0 && st % 8 == 0);
}
static int vec16(const cu_attn *a, bool backward) {
    bool ok = a->D % 8 == 0 && al8(a->q16, a->q_sb, a->q_sh, a->q_st) && al8(a->k16, a->k_sb, a->k_sh, a->k_st) &&
              al8(a->v16, a->v_sb, a->v_sh, a->v_st) && (!backward || al8(a->dout16, a->o_sb, a->o_sh, a->o_st));
    for (int r = 0; r < a->nruns; r++)
        ok = ok && al8(a->run[r].k16, a->k_sb, a->k_sh, a->k_st) && al8(a->run[r].v16, a->v_sb, a->v_sh, a->v_st);
    return ok;
}

/* The buffers per walked tile: 2 where this device lets a block have the shared memory
 * (bytes(2)), unless a->stages asks for 1. The first call opts the kernels in (opt_in(nb,
 * bytes) for each nb they may run with; should the opt-in for 2 fail, they run with 1).
 * Returns 1 or 2, or minus a cudaError_t. */
template <typename F>
static int walk_buffers(const cu_attn *a, int &nb_max, F opt_in, size_t bytes1, size_t bytes2) {
    if (!nb_max) {
        cudaError_t e = opt_in(1, bytes1);
        if (e != cudaSuccess) return -(int)e;
        int nb = bytes2 <= (size_t)smem_optin_max() ? 2 : 1;
        if (nb == 2 && opt_in(2, bytes2) != cudaSuccess) {
            (void)cudaGetLastError();                  /* not sticky: clear it, keep one buffer */
            nb = 1;
        }
        nb_max = nb;
    }
    return a->stages == 1 ? 1 : nb_max;
}

template <int DM, int NW, int MR, int WT, int MINB = 1>
static int mma_fwd(const cu_attn *a) {
    typedef Mma<DM, NW, MR, WT> M;
    typedef void (*K)(cu_attn, int);
    static int nb_max = 0;
    const K kern[2] = {attn_mma_fwd_k<DM, NW, 1, MR, WT, MINB>, attn_mma_fwd_k<DM, NW, 2, MR, WT, MINB>};
    const int nb = walk_buffers(a, nb_max, [&](int n, size_t bytes) { return smem_opt_in((const void *)kern[n - 1], bytes); },
                                M::fwd(1), M::fwd(2));
    if (nb < 0) return -nb;
    dim3 grid((a->Lq + M::RB - 1) / M::RB, a->H, a->B);
    LAUNCH(kern[nb - 1], grid, M::NTH, M::fwd(nb), *a, vec16(a, false));
    return (int)cudaGetLastError();
}

/* dQ with MRQ row tiles per warp walking key tiles of WTQ, dK dV with MRK walking query tiles
 * of WTK; one buffer count for all, the largest block's shared memory deciding. With sync
 * (the counters, zeroed here) and 4 warps of 16 rows, dQ, dK and dV come from the fused
 * kernel (unless a->bwd_split); else dQ from its own kernel. */
template <int DM, int NW, int MRQ, int WTQ, int MRK, int WTK>
static int mma_bwd(const cu_attn *a, const float *dout, float *dq, float *dk, float *dv, const float *Di, int *sync) {
    typedef Mma<DM, NW, MRQ, WTQ> MQ;
    typedef Mma<DM, NW, MRK, WTK> MK;
    constexpr bool CAN_FUSE = NW == 4 && MRK == 1 && WTK == 16 * NW;
    typedef void (*Kq)(cu_attn, const float *, float *, const float *, int);
    typedef void (*Kkv)(cu_attn, const float *, float *, float *, const float *, int, float *, int *, int);
    static int nb_max = 0;
    const Kq kdq[2] = {attn_mma_dq_k<DM, NW, 1, MRQ, WTQ>, attn_mma_dq_k<DM, NW, 2, MRQ, WTQ>};
    const Kkv kdkv[2] = {attn_mma_dkv_k<DM, NW, 1, MRK, WTK>, attn_mma_dkv_k<DM, NW, 2, MRK, WTK>};
    /* the fused kernel fits 3 blocks per SM up to head size 64 (registers capped at 168, a
     * few spills; at head size 128 the shared memory allows 1): on an H200 that took the
     * backward at B=1 x T=16384 from 135.7 to 116.8 ms, and the B=8 x 1024 step from 24.1 to
     * 23.3 ms, against the 254 registers and 2 blocks the compiler picks unasked */
    constexpr int FMINB = DM <= 64 ? 3 : 1;
    Kkv kfused[2] = {NULL, NULL};
    if constexpr (CAN_FUSE) {
        kfused[0] = attn_mma_dkv_k<DM, NW, 1, MRK, WTK, true, FMINB>;
        kfused[1] = attn_mma_dkv_k<DM, NW, 2, MRK, WTK, true, FMINB>;
    }
    const size_t ds_bytes = CAN_FUSE ? sizeof(uint16_t) * MK::RB * (WTK + 8) : 0;   /* the fused kernel's dS^T */
    auto most = [&](int n) { return MQ::bwd(n) > MK::bwd(n) + ds_bytes ? MQ::bwd(n) : MK::bwd(n) + ds_bytes; };
    const int nb = walk_buffers(a, nb_max, [&](int n, size_t) {
        cudaError_t e = smem_opt_in((const void *)kdq[n - 1], MQ::bwd(n));
        if (e == cudaSuccess) e = smem_opt_in((const void *)kdkv[n - 1], MK::bwd(n));
        if (e == cudaSuccess && kfused[n - 1]) e = smem_opt_in((const void *)kfused[n - 1], MK::bwd(n) + ds_bytes);
        return e;
    }, most(1), most(2));
    if (nb < 0) return -nb;
    const int vec = vec16(a, true);
    if (CAN_FUSE && sync && dq && (dk || dv) && !a->bwd_split) {
        const size_t ints = 1 + (size_t)a->B * a->H * ((a->Lq + WTK - 1) / WTK);
        cudaError_t e = cudaMemsetAsync(sync, 0, ints * sizeof(int), sk_cu_stream);
        if (e != cudaSuccess) return (int)e;
        /* dQ's additions in pairs (8-byte aligned) where the view allows */
        const int dq2 = (uintptr_t)dq % 8 == 0 && a->q_sb % 2 == 0 && a->q_sh % 2 == 0 && a->q_st % 2 == 0;
        const unsigned blocks = (unsigned)((a->Lk + MK::RB - 1) / MK::RB) * a->Hkv * a->B;
        LAUNCH(kfused[nb - 1], blocks, MK::NTH, MK::bwd(nb) + ds_bytes, *a, dout, dk, dv, Di, vec, dq, sync, dq2);
        return (int)cudaGetLastError();
    }
    if (dq) {
        dim3 grid((a->Lq + MQ::RB - 1) / MQ::RB, a->H, a->B);
        LAUNCH(kdq[nb - 1], grid, MQ::NTH, MQ::bwd(nb), *a, dout, dq, Di, vec);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return (int)e;
    }
    if (dk || dv) {
        dim3 grid((a->Lk + MK::RB - 1) / MK::RB, a->Hkv, a->B);
        LAUNCH(kdkv[nb - 1], grid, MK::NTH, MK::bwd(nb), *a, dout, dk, dv, Di, vec, (float *)NULL, (int *)NULL, 0);
    }
    return (int)cudaGetLastError();
}

/* the blocks: 8 warps of 16 rows (cu_attn.mma_warps = 8); 4 warps of 32 rows, two row tiles
 * per warp sharing each fragment of the walked tile (cu_attn.mma_rows = 32); else 4 warps of
 * 16 rows. Walked tiles: 64 rows, 32 for the backward's two row tiles (registers). */
template <int DM>
static int mma_fwd_w(const cu_attn *a) {
    if (a->mma_warps == 8) return mma_fwd<DM, 8, 1, 64>(a);
    if (a->mma_rows == 32) return mma_fwd<DM, 4, 2, MR2_FWD_WT>(a);
    /* up to head size 64, 4 blocks per SM (registers capped at 128, a few spills, 46 KiB of
     * shared memory each): on an H200 the forward at B=1 x T=16384 went from 36.6 to 32.3 ms
     * (the 166 registers the compiler picks unasked leave 3 blocks) */
    if (DM <= 64) return mma_fwd<DM, 4, 1, 64, 4>(a);
    return mma_fwd<DM, 4, 1, 64>(a);
}
template <int DM>
static int mma_bwd_w(const cu_attn *a, const float *dout, float *dq, float *dk, float *dv, const float *Di,
                     int *sync) {
    if (a->mma_warps == 8) return mma_bwd<DM, 8, 1, 64, 1, 64>(a, dout, dq, dk, dv, Di, sync);
    if (a->mma_rows == 32) return mma_bwd<DM, 4, 2, MR2_DQ_WT, 2, MR2_DKV_WT>(a, dout, dq, dk, dv, Di, sync);
    return mma_bwd<DM, 4, 1, 64, 1, 64>(a, dout, dq, dk, dv, Di, sync);
}

extern "C" int cu_attn_mma_forward(const cu_attn *a) {
    if (a->D <= 16) return mma_fwd_w<16>(a);
    if (a->D <= 32) return mma_fwd_w<32>(a);
    if (a->D <= 64) return mma_fwd_w<64>(a);
    if (a->D <= 128) return mma_fwd_w<128>(a);
    return -1;
}

extern "C" int cu_attn_mma_backward(const cu_attn *a, const float *dout, float *dq, float *dk, float *dv,
                                    const float *Di, int *sync) {
    if (a->D <= 16) return mma_bwd_w<16>(a, dout, dq, dk, dv, Di, sync);
    if (a->D <= 32) return mma_bwd_w<32>(a, dout, dq, dk, dv, Di, sync);
    if (a->D <= 64) return mma_bwd_w<64>(a, dout, dq, dk, dv, Di, sync);
    if (a->D <= 128) return mma_bwd_w<128>(a, dout, dq, dk, dv, Di, sync);
    return -1;
}
