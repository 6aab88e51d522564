/* Fused attention on the GPU, FlashAttention-2 style, in fp32: the twin of
 * src/core/attention_flash.c (same tiles in spirit, same math, same dropout hash).
 *
 *   forward    : one block per (query tile, head, batch); keys in increasing tiles with an
 *                online softmax; saves lse = m + log(l) per query row. O(T) memory.
 *   backward 0 : Di = rowsum(dO * O) per query row.
 *   backward 1 : dQ, one block per (query tile, head, batch), recomputing P from lse.
 *   backward 2 : dK, dV, one block per (key tile, kv head, batch), looping over the query
 *                heads of its group and the query tiles in order.
 * Every output element is written by exactly one block, so there are no atomics and the
 * result is deterministic; dK/dV are ADDED (+=) to what is there, which is how SLA's
 * borrowed heads send their gradient into the lending layer's buffer (model_cuda.c).
 *
 * All tensors are strided views (sk_attn's layout), read in place: SLA's borrowed heads pass
 * the lender layer's K/V columns of its qkv activation, nothing is copied.
 *
 * Thread layout: 256 threads as a 16 x 16 grid (ty, tx). In a score tile S (BQ x BK) the
 * thread owns rows ty + 16*ii and columns tx + 16*jj, so the 16 lanes holding one row are
 * one half-warp: row max/sum are __shfl_xor over offsets 8..1. The output accumulator of
 * rows ty + 16*ii and head dims tx + 16*dd stays in registers. DM (a multiple of 16 >= D)
 * is a template parameter; head dims D..DM-1 are zero padding. Q/K/V/dO rows in shared
 * memory have stride DM+1 and score rows BK+1, which keeps the walks free of bank conflicts. */
#include "attention_common.cuh"

/* rows [r0, r0 + n) of a strided head into dst (rows x DM, stride ds), times s; zero padded
 * to `rows` rows and DM columns */
template <int DM>
__device__ __forceinline__ void load_tile(float *dst, int ds, int rows, const float *src, long st,
                                          int r0, int n, int D, float s) {
    for (int e = threadIdx.x; e < rows * DM; e += NT) {
        int r = e / DM, d = e % DM;
        dst[r * ds + d] = (r < n && d < D) ? src[(long)(r0 + r) * st + d] * s : 0.0f;
    }
}

/* ------------------------------------------------------------------ forward */

template <int DM, int BQ, int BK>
__global__ void __launch_bounds__(NT) attn_fwd_k(cu_attn a) {
    constexpr int RQ = BQ / 16, RK = BK / 16, RD = DM / 16, KS = DM + 1, PS = BK + 1;
    DYN_SMEM(smem);
    float *Qs = smem;                 /* BQ x KS */
    float *Ks = Qs + BQ * KS;         /* BK x KS */
    float *Vs = Ks + BK * KS;         /* BK x DM */
    float *Ps = Vs + BK * DM;         /* BQ x PS */
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int qt = gridDim.x - 1 - blockIdx.x;        /* heaviest causal tiles first */
    const int h = blockIdx.y, b = blockIdx.z, hk = h / (a.H / a.Hkv);
    const int i0 = qt * BQ, nq = min(BQ, a.Lq - i0), D = a.D;
    const int hr = h - use_run(a, hk);                /* the head's index in its run: the dropout hash's */
    const float *qb = a.q + b * a.q_sb + h * a.q_sh;
    const float *kb = a.k + b * a.k_sb + hk * a.k_sh;
    const float *vb = a.v + b * a.v_sb + hk * a.v_sh;

    load_tile<DM>(Qs, KS, BQ, qb, a.q_st, i0, nq, D, a.scale);
    float o[RQ][RD], mrow[RQ], lrow[RQ];
    uint64_t rk[RQ];
    init_rows(a, o, mrow, lrow, rk, b, hr, i0, ty);
    const int jend = key_end(a, i0, nq);
    for (int j0 = 0; j0 < jend; j0 += BK) {
        const int nk = min(BK, jend - j0);
        __syncthreads();              /* the previous tile's reads are done; Qs is visible */
        load_tile<DM>(Ks, KS, BK, kb, a.k_st, j0, nk, D, 1.0f);
        load_tile<DM>(Vs, DM, BK, vb, a.v_st, j0, nk, D, 1.0f);
        __syncthreads();
        float s[RQ][RK];
#pragma unroll
        for (int ii = 0; ii < RQ; ii++)
#pragma unroll
            for (int jj = 0; jj < RK; jj++) s[ii][jj] = 0.0f;
#pragma unroll 8
        for (int d = 0; d < DM; d++) {
            float qv[RQ], kv[RK];
#pragma unroll
            for (int ii = 0; ii < RQ; ii++) qv[ii] = Qs[(ty + 16 * ii) * KS + d];
#pragma unroll
            for (int jj = 0; jj < RK; jj++) kv[jj] = Ks[(tx + 16 * jj) * KS + d];
#pragma unroll
            for (int ii = 0; ii < RQ; ii++)
#pragma unroll
                for (int jj = 0; jj < RK; jj++) s[ii][jj] = fmaf(qv[ii], kv[jj], s[ii][jj]);
        }
        /* mask, online softmax per row (the row's 16 lanes agree on m, l, alpha) */
#pragma unroll
        for (int ii = 0; ii < RQ; ii++) {
            const int r = ty + 16 * ii;
            const float alpha = softmax_row<RK>(a, s[ii], r < nq, i0 + r, j0, nk, tx, rk[ii], mrow[ii], lrow[ii]);
#pragma unroll
            for (int dd = 0; dd < RD; dd++) o[ii][dd] *= alpha;
#pragma unroll
            for (int jj = 0; jj < RK; jj++) Ps[r * PS + tx + 16 * jj] = s[ii][jj];
        }
        __syncthreads();
        /* O += P V */
#pragma unroll 4
        for (int j = 0; j < BK; j++) {
            float pv[RQ];
#pragma unroll
            for (int ii = 0; ii < RQ; ii++) pv[ii] = Ps[(ty + 16 * ii) * PS + j];
#pragma unroll
            for (int dd = 0; dd < RD; dd++) {
                const float vv = Vs[j * DM + tx + 16 * dd];
#pragma unroll
                for (int ii = 0; ii < RQ; ii++) o[ii][dd] = fmaf(pv[ii], vv, o[ii][dd]);
            }
        }
    }
#pragma unroll
    for (int ii = 0; ii < RQ; ii++)
        if (ty + 16 * ii < nq) finish_row<RD>(a, o[ii], mrow[ii], lrow[ii], b, h, i0 + ty + 16 * ii, tx);
}

/* ----------------------------------------------------------------- backward */

/* Di[(b*H + h)*Lq + i] = sum_d dout * out: one warp per query row (which also writes dout in
 * bf16 to a.dout16 when it is given: the tensor-core kernels' dO; without dout, dO is read
 * from a.dout16) */
__global__ void attn_di_k(cu_attn a, const float *dout, float *Di) {
    const long row = (long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= (long)a.B * a.H * a.Lq) return;
    const int i = (int)(row % a.Lq), h = (int)(row / a.Lq % a.H), b = (int)(row / ((long)a.Lq * a.H));
    const long off = b * a.o_sb + h * a.o_sh + (long)i * a.o_st;
    const uint16_t *dout16 = dout ? NULL : a.dout16;      /* dO's bf16 form as input */
    float s = 0.0f;
    for (int d = lane; d < a.D; d += 32) s += get(a.out, a.out16, off + d) * get(dout, dout16, off + d);
    if (a.dout16 && dout) for (int d = lane; d < a.D; d += 32) a.dout16[off + d] = bf16_bits(dout[off + d]);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) Di[row] = s;
}

/* S = Q K^T and dP = dO V^T for the thread's (row, column) entries; Q, dO, K and V all have
 * row stride KS = DM + 1. */
template <int DM, int RQ, int RK, int KS>
__device__ __forceinline__ void scores_dp(float (&s)[RQ][RK], float (&dp)[RQ][RK], const float *Qs,
                                          const float *dOs, const float *Ks, const float *Vs, int ty, int tx) {
#pragma unroll
    for (int ii = 0; ii < RQ; ii++)
#pragma unroll
        for (int jj = 0; jj < RK; jj++) { s[ii][jj] = 0.0f; dp[ii][jj] = 0.0f; }
#pragma unroll 4
    for (int d = 0; d < DM; d++) {
        float qv[RQ], ov[RQ], kv[RK], vv[RK];
#pragma unroll
        for (int ii = 0; ii < RQ; ii++) { qv[ii] = Qs[(ty + 16 * ii) * KS + d]; ov[ii] = dOs[(ty + 16 * ii) * KS + d]; }
#pragma unroll
        for (int jj = 0; jj < RK; jj++) { kv[jj] = Ks[(tx + 16 * jj) * KS + d]; vv[jj] = Vs[(tx + 16 * jj) * KS + d]; }
#pragma unroll
        for (int ii = 0; ii < RQ; ii++)
#pragma unroll
            for (int jj = 0; jj < RK; jj++) {
                s[ii][jj] = fmaf(qv[ii], kv[jj], s[ii][jj]);
                dp[ii][jj] = fmaf(ov[ii], vv[jj], dp[ii][jj]);
            }
    }
}

/* Loads the query-side tiles of rows [i0, i0 + nq) of head h: Q (scaled), dO, lse and Di
 * (padded rows get lse = +inf, so their P is 0). */
template <int DM, int BQ>
__device__ __forceinline__ void load_q_side(const cu_attn &a, const float *dout, const float *Di, int b, int h,
                                            int i0, int nq, float *Qs, float *dOs, float *lse_s, float *di_s) {
    load_tile<DM>(Qs, DM + 1, BQ, a.q + b * a.q_sb + h * a.q_sh, a.q_st, i0, nq, a.D, a.scale);
    load_tile<DM>(dOs, DM + 1, BQ, dout + b * a.o_sb + h * a.o_sh, a.o_st, i0, nq, a.D, 1.0f);
    const size_t base = ((size_t)b * a.H + h) * a.Lq + i0;
    for (int r = threadIdx.x; r < BQ; r += NT) {
        lse_s[r] = r < nq ? a.lse[base + r] : INFINITY;
        di_s[r] = r < nq ? Di[base + r] : 0.0f;
    }
}

template <int DM, int BQ, int BK>
__global__ void __launch_bounds__(NT) attn_bwd_dq_k(cu_attn a, const float *dout, float *dq, const float *Di) {
    constexpr int RQ = BQ / 16, RK = BK / 16, RD = DM / 16, KS = DM + 1, PS = BK + 1;
    DYN_SMEM(smem);
    float *Qs = smem;                 /* BQ x KS (scaled q) */
    float *dOs = Qs + BQ * KS;        /* BQ x KS */
    float *Ks = dOs + BQ * KS;        /* BK x KS */
    float *Vs = Ks + BK * KS;         /* BK x KS */
    float *DSs = Vs + BK * KS;        /* BQ x PS */
    float *lse_s = DSs + BQ * PS, *di_s = lse_s + BQ;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int qt = gridDim.x - 1 - blockIdx.x;
    const int h = blockIdx.y, b = blockIdx.z, hk = h / (a.H / a.Hkv);
    const int i0 = qt * BQ, nq = min(BQ, a.Lq - i0), D = a.D;
    const int hr = h - use_run(a, hk);
    const float *kb = a.k + b * a.k_sb + hk * a.k_sh;
    const float *vb = a.v + b * a.v_sb + hk * a.v_sh;
    load_q_side<DM, BQ>(a, dout, Di, b, h, i0, nq, Qs, dOs, lse_s, di_s);
    float acc[RQ][RD];
#pragma unroll
    for (int ii = 0; ii < RQ; ii++)
#pragma unroll
        for (int dd = 0; dd < RD; dd++) acc[ii][dd] = 0.0f;
    const int jend = key_end(a, i0, nq);
    for (int j0 = 0; j0 < jend; j0 += BK) {
        const int nk = min(BK, jend - j0);
        __syncthreads();
        load_tile<DM>(Ks, KS, BK, kb, a.k_st, j0, nk, D, 1.0f);
        load_tile<DM>(Vs, KS, BK, vb, a.v_st, j0, nk, D, 1.0f);
        __syncthreads();
        float s[RQ][RK], dp[RQ][RK];
        scores_dp<DM, RQ, RK, KS>(s, dp, Qs, dOs, Ks, Vs, ty, tx);
        bwd_elementwise<RQ, RK>(a, s, dp, lse_s, di_s, b, hr, i0, nq, j0, nk, ty, tx);
#pragma unroll
        for (int ii = 0; ii < RQ; ii++)
#pragma unroll
            for (int jj = 0; jj < RK; jj++) DSs[(ty + 16 * ii) * PS + tx + 16 * jj] = dp[ii][jj];
        __syncthreads();
        /* dQ += dS K */
#pragma unroll 4
        for (int j = 0; j < BK; j++) {
            float dsv[RQ];
#pragma unroll
            for (int ii = 0; ii < RQ; ii++) dsv[ii] = DSs[(ty + 16 * ii) * PS + j];
#pragma unroll
            for (int dd = 0; dd < RD; dd++) {
                const float kv = Ks[j * KS + tx + 16 * dd];
#pragma unroll
                for (int ii = 0; ii < RQ; ii++) acc[ii][dd] = fmaf(dsv[ii], kv, acc[ii][dd]);
            }
        }
    }
#pragma unroll
    for (int ii = 0; ii < RQ; ii++) {
        const int r = ty + 16 * ii;
        if (r >= nq) continue;
        float *g = dq + b * a.q_sb + h * a.q_sh + (long)(i0 + r) * a.q_st;
#pragma unroll
        for (int dd = 0; dd < RD; dd++) {
            const int d = tx + 16 * dd;
            if (d < D) g[d] += a.scale * acc[ii][dd];
        }
    }
}

template <int DM, int BQ, int BK>
__global__ void __launch_bounds__(NT) attn_bwd_dkv_k(cu_attn a, const float *dout, float *dk, float *dv, const float *Di) {
    constexpr int RQ = BQ / 16, RK = BK / 16, RD = DM / 16, KS = DM + 1, PS = BK + 1;
    DYN_SMEM(smem);
    float *Ks = smem;                 /* BK x KS */
    float *Vs = Ks + BK * KS;         /* BK x KS */
    float *Qs = Vs + BK * KS;         /* BQ x KS (scaled q) */
    float *dOs = Qs + BQ * KS;        /* BQ x KS */
    float *Ps = dOs + BQ * KS;        /* BQ x PS: Z*P */
    float *DSs = Ps + BQ * PS;        /* BQ x PS: dS */
    float *lse_s = DSs + BQ * PS, *di_s = lse_s + BQ;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int kt = blockIdx.x, hk = blockIdx.y, b = blockIdx.z, group = a.H / a.Hkv;
    const int j0 = kt * BK, nk = min(BK, a.Lk - j0), D = a.D;
    const int hfirst = use_run(a, hk, dk, dv);
    load_tile<DM>(Ks, KS, BK, a.k + b * a.k_sb + hk * a.k_sh, a.k_st, j0, nk, D, 1.0f);
    load_tile<DM>(Vs, KS, BK, a.v + b * a.v_sb + hk * a.v_sh, a.v_st, j0, nk, D, 1.0f);
    /* accumulators: key rows ty + 16*kk, head dims tx + 16*dd */
    float ak[RK][RD], av[RK][RD];
#pragma unroll
    for (int kk = 0; kk < RK; kk++)
#pragma unroll
        for (int dd = 0; dd < RD; dd++) { ak[kk][dd] = 0.0f; av[kk][dd] = 0.0f; }
    /* first query that sees key j0 under the causal rule: i + off >= j0 */
    int istart = 0;
    if (a.causal) {
        long st = (long)j0 - a.causal_offset;
        istart = st >= a.Lq ? a.Lq : st < 0 ? 0 : (int)(st / BQ) * BQ;
    }
    for (int h = hk * group; h < (hk + 1) * group; h++) {
        for (int i0 = istart; i0 < a.Lq; i0 += BQ) {
            const int nq = min(BQ, a.Lq - i0);
            __syncthreads();          /* previous tile's reads done (and K/V loads visible) */
            load_q_side<DM, BQ>(a, dout, Di, b, h, i0, nq, Qs, dOs, lse_s, di_s);
            __syncthreads();
            float s[RQ][RK], dp[RQ][RK];
            scores_dp<DM, RQ, RK, KS>(s, dp, Qs, dOs, Ks, Vs, ty, tx);
            bwd_elementwise<RQ, RK>(a, s, dp, lse_s, di_s, b, h - hfirst, i0, nq, j0, nk, ty, tx);
#pragma unroll
            for (int ii = 0; ii < RQ; ii++)
#pragma unroll
                for (int jj = 0; jj < RK; jj++) {
                    Ps[(ty + 16 * ii) * PS + tx + 16 * jj] = s[ii][jj];
                    DSs[(ty + 16 * ii) * PS + tx + 16 * jj] = dp[ii][jj];
                }
            __syncthreads();
            /* dV += (Z P)^T dO,  dK += dS^T Q (q already scaled) */
#pragma unroll 4
            for (int i = 0; i < BQ; i++) {
                float pz[RK], ds[RK];
#pragma unroll
                for (int kk = 0; kk < RK; kk++) { pz[kk] = Ps[i * PS + ty + 16 * kk]; ds[kk] = DSs[i * PS + ty + 16 * kk]; }
#pragma unroll
                for (int dd = 0; dd < RD; dd++) {
                    const float ov = dOs[i * KS + tx + 16 * dd], qv = Qs[i * KS + tx + 16 * dd];
#pragma unroll
                    for (int kk = 0; kk < RK; kk++) {
                        av[kk][dd] = fmaf(pz[kk], ov, av[kk][dd]);
                        ak[kk][dd] = fmaf(ds[kk], qv, ak[kk][dd]);
                    }
                }
            }
        }
    }
#pragma unroll
    for (int kk = 0; kk < RK; kk++) {
        const int r = ty + 16 * kk;
        if (r >= nk) continue;
#pragma unroll
        for (int dd = 0; dd < RD; dd++) {
            const int d = tx + 16 * dd;
            if (d >= D) continue;
            if (dk) dk[b * a.k_sb + hk * a.k_sh + (long)(j0 + r) * a.k_st + d] += ak[kk][dd];
            if (dv) dv[b * a.v_sb + hk * a.v_sh + (long)(j0 + r) * a.v_st + d] += av[kk][dd];
        }
    }
}

/* ------------------------------------------------------------------ launchers */

template <int DM, int BQ, int BK> struct AttnCfg {
    /* the layouts at the top of each kernel */
    static constexpr size_t fwd_smem = sizeof(float) * ((size_t)BQ * (DM + 1) + (size_t)BK * (DM + 1) + (size_t)BK * DM + (size_t)BQ * (BK + 1));
    static constexpr size_t dq_smem = sizeof(float) * (2 * (size_t)BQ * (DM + 1) + 2 * (size_t)BK * (DM + 1) + (size_t)BQ * (BK + 1) + 2 * BQ);
    static constexpr size_t dkv_smem = sizeof(float) * (2 * (size_t)BK * (DM + 1) + 2 * (size_t)BQ * (DM + 1) + 2 * (size_t)BQ * (BK + 1) + 2 * BQ);
};

template <int DM, int BQ, int BK>
static int fwd_launch(const cu_attn *a) {
    typedef AttnCfg<DM, BQ, BK> K;
    static bool ready = false;
    if (!ready) {
        cudaError_t e = smem_opt_in((const void *)attn_fwd_k<DM, BQ, BK>, K::fwd_smem);
        if (e != cudaSuccess) return (int)e;
        ready = true;
    }
    dim3 grid((a->Lq + BQ - 1) / BQ, a->H, a->B);
    void (*kern)(cu_attn) = attn_fwd_k<DM, BQ, BK>;
    LAUNCH(kern, grid, NT, K::fwd_smem, *a);
    return (int)cudaGetLastError();
}

template <int DM, int BQ, int BK>
static int bwd_launch(const cu_attn *a, const float *dout, float *dq, float *dk, float *dv, const float *Di) {
    typedef AttnCfg<DM, BQ, BK> K;
    static bool ready = false;
    if (!ready) {
        cudaError_t e = smem_opt_in((const void *)attn_bwd_dq_k<DM, BQ, BK>, K::dq_smem);
        if (e == cudaSuccess) e = smem_opt_in((const void *)attn_bwd_dkv_k<DM, BQ, BK>, K::dkv_smem);
        if (e != cudaSuccess) return (int)e;
        ready = true;
    }
    if (dq) {
        dim3 grid((a->Lq + BQ - 1) / BQ, a->H, a->B);
        void (*kern)(cu_attn, const float *, float *, const float *) = attn_bwd_dq_k<DM, BQ, BK>;
        LAUNCH(kern, grid, NT, K::dq_smem, *a, dout, dq, Di);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return (int)e;
    }
    if (dk || dv) {
        dim3 grid((a->Lk + BK - 1) / BK, a->Hkv, a->B);
        void (*kern)(cu_attn, const float *, float *, float *, const float *) = attn_bwd_dkv_k<DM, BQ, BK>;
        LAUNCH(kern, grid, NT, K::dkv_smem, *a, dout, dk, dv, Di);
    }
    return (int)cudaGetLastError();
}

extern "C" int cu_attn_forward(const cu_attn *a) {
    if (a->B < 1 || a->H < 1 || a->Lq < 1) return 0;
    if (a->tc == 1) return cu_attn_mma_forward(a);
    if (a->tc) return cu_attn_tc_forward(a);
    if (a->D <= 16) return fwd_launch<16, 64, 64>(a);
    if (a->D <= 32) return fwd_launch<32, 64, 64>(a);
    if (a->D <= 64) return fwd_launch<64, 64, 64>(a);
    if (a->D <= 128) return fwd_launch<128, 32, 32>(a);
    return -1;
}

/* Di (B*H*Lq floats), then the fused backward's ticket and one counter per head and query
 * tile of 16 rows or more, with room to spare */
extern "C" size_t cu_attn_scratch(int B, int H, int Lq) {
    return (size_t)B * H * Lq + (size_t)B * H * ((Lq + 15) / 16) + 16;
}

extern "C" int cu_attn_backward(const cu_attn *a, const float *dout, float *dq, float *dk, float *dv, float *Di) {
    if (a->B < 1 || a->H < 1 || a->Lq < 1) return 0;
    if (a->D > 128) return -1;
    if (!dout && (a->tc != 1 || !a->dout16)) return (int)cudaErrorInvalidValue;   /* dO only in dout16: mma only */
    const long rows = (long)a->B * a->H * a->Lq;
    LAUNCH(attn_di_k, (unsigned)((rows + 7) / 8), 256, 0, *a, dout, Di);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return (int)e;
    if (a->tc == 1) return cu_attn_mma_backward(a, dout, dq, dk, dv, Di, (int *)(Di + rows));
    if (a->tc) return cu_attn_tc_backward(a, dout, dq, dk, dv, Di);
    if (a->D <= 16) return bwd_launch<16, 64, 64>(a, dout, dq, dk, dv, Di);
    if (a->D <= 32) return bwd_launch<32, 64, 64>(a, dout, dq, dk, dv, Di);
    if (a->D <= 64) return bwd_launch<64, 64, 64>(a, dout, dq, dk, dv, Di);
    return bwd_launch<128, 32, 32>(a, dout, dq, dk, dv, Di);
}
