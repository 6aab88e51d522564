/* Fused attention on tensor cores: the kernels of attention.cu (same grids, same tiles of
 * work, same online softmax, dropout hash, lse and Di, the same += into dq/dk/dv) with the
 * five matrix products done by bf16 warp-matrix instructions (nvcuda::wmma, m16n16k16,
 * fp32 accumulation). With cu_attn.tc == 2 (SKIPLM_CUDA_TC_ATTN=wmma): --bf16 uses the
 * mma.sync kernels of attention_mma.cu, which round the same values at the same points, and
 * the tests compare the two; the fp32 kernels stay the parity path.
 *
 * What is rounded to bf16: Q (after the softmax scale), K, V and dO as their tiles are
 * loaded; P (after the running max is subtracted, and the dropout mask applied) before P V
 * and P^T dO; dS before dS K and dS^T Q. Scores, softmax statistics, lse, Di and every
 * accumulator are fp32: FlashAttention-2's bf16 recipe.
 *
 * A block is 256 threads = 8 warps, query and key tiles of 64 rows. Each product tile is
 * cut into 16 x 16 sub-tiles dealt round-robin to the warps. The products whose result the
 * 16 x 16 thread grid of attention.cu needs elementwise (S, dP, and O's update P V, which is
 * rescaled row by row) go through shared memory: the warps store their fp32 sub-tiles, and
 * after a barrier thread (ty, tx) reads rows ty + 16*ii, columns tx + 16*jj, exactly the
 * elements it owns in the fp32 kernel, so the softmax and the backward's elementwise code are
 * shared with it. The products that only accumulate (dQ, dK, dV) stay in the warps'
 * accumulator fragments for the whole kernel and go through shared memory once at the end.
 *
 * Shared memory rows are padded: bf16 rows by 8 elements (ldm a multiple of 8, as wmma
 * requires), fp32 rows to a stride of 16 (mod 32) floats, so rows ty and ty + 1 of a warp
 * fall 16 banks apart. */
#include "attention_common.cuh"
#include <type_traits>

namespace wmma = nvcuda::wmma;
typedef __nv_bfloat16 bf16;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc_frag;
template <typename L> using a_frag = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, L>;
template <typename L> using b_frag = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, L>;

#define TB 64                      /* query and key tile rows */

/* the layout of a kernel's shared memory: bf16 tiles of stride DM + 8, fp32 tiles of
 * stride TB + 16 (scores) or OS (outputs), bf16 P/dS of stride TB + 8 */
template <int DM> struct TcLayout {
    static constexpr int QS = DM + 8, SS = TB + 16, OS = DM % 32 == 16 ? DM + 32 : DM + 16, PS = TB + 8;
    static constexpr size_t tile16 = sizeof(bf16) * TB * QS;        /* one Q/K/V/dO tile */
    static constexpr size_t tile32 = sizeof(float) * TB * SS;       /* one S/dP tile */
    static constexpr size_t out32 = sizeof(float) * TB * OS;        /* an fp32 (64, DM) tile */
    static constexpr size_t p16 = sizeof(bf16) * TB * PS;           /* one P/dS tile */
    /* forward: Q K V | S | P | O-update */
    static constexpr size_t fwd = 3 * tile16 + tile32 + p16 + out32;
    /* dQ: Q dO K V | S dP (the final dQ tile reuses them) | dS | lse Di */
    static constexpr size_t sdp = 2 * tile32 > out32 ? 2 * tile32 : out32;
    static constexpr size_t dq = 4 * tile16 + sdp + p16 + 2 * sizeof(float) * TB;
    /* dK dV: K V Q dO | S dP (the final dK, dV tiles reuse them) | P dS | lse Di */
    static constexpr size_t dkv = 4 * tile16 + sdp + 2 * p16 + 2 * sizeof(float) * TB;
};

/* rows [r0, r0 + n) of a strided fp32 head into a bf16 tile (TB x DM, stride ds), times s,
 * rounded to nearest; zero padded to TB rows and DM columns */
template <int DM>
__device__ __forceinline__ void load_tile16(bf16 *dst, int ds, const float *src, long st, int r0, int n, int D,
                                            float s) {
    for (int e = threadIdx.x; e < TB * DM; e += NT) {
        int r = e / DM, d = e % DM;
        dst[r * ds + d] = __float2bfloat16_rn((r < n && d < D) ? src[(long)(r0 + r) * st + d] * s : 0.0f);
    }
}

/* C (TB x TB, fp32, stride SS) = X Y^T for bf16 tiles X, Y (TB x DM, stride QS): the
 * scores Q K^T or dP = dO V^T. Sub-tile t of the 16 goes to warp t % 8. */
template <int DM>
__device__ __forceinline__ void product_xyT(float *C, const bf16 *X, const bf16 *Y) {
    typedef TcLayout<DM> L;
    const int warp = threadIdx.x >> 5;
    for (int t = warp; t < (TB / 16) * (TB / 16); t += NT / 32) {
        const int tr = t / (TB / 16), tc = t % (TB / 16);
        acc_frag c;
        wmma::fill_fragment(c, 0.0f);
#pragma unroll
        for (int k = 0; k < DM; k += 16) {
            a_frag<wmma::row_major> x;
            b_frag<wmma::col_major> y;                  /* Y^T: column j of Y^T is row j of Y */
            wmma::load_matrix_sync(x, X + tr * 16 * L::QS + k, L::QS);
            wmma::load_matrix_sync(y, Y + tc * 16 * L::QS + k, L::QS);
            wmma::mma_sync(c, x, y, c);
        }
        wmma::store_matrix_sync(C + tr * 16 * L::SS + tc * 16, c, L::SS, wmma::mem_row_major);
    }
}

/* the (TB, DM) output tiles: tile t = (row block t / (DM/16), column block t % (DM/16)) goes
 * to warp t % 8, so a warp holds NACC of them */
template <int DM> struct OutTiles {
    static constexpr int N = (TB / 16) * (DM / 16);
    static constexpr int NACC = (N + NT / 32 - 1) / (NT / 32);
};

/* acc[u] (+)= op(A) B for the warp's output tiles, op(A) (TB x TB) from a bf16 tile of
 * stride PS (row-major: A itself; col-major: A^T), B (TB x DM) a bf16 tile of stride QS */
template <int DM, typename LA>
__device__ __forceinline__ void product_acc(acc_frag (&acc)[OutTiles<DM>::NACC], const bf16 *A, const bf16 *B) {
    typedef TcLayout<DM> L;
    typedef OutTiles<DM> O;
    const int warp = threadIdx.x >> 5;
    const bool col = std::is_same<LA, wmma::col_major>::value;
#pragma unroll
    for (int u = 0; u < O::NACC; u++) {
        const int t = warp + u * (NT / 32);
        if (O::N % (NT / 32) != 0 && t >= O::N) break;             /* warp-uniform */
        const int tr = t / (DM / 16), td = t % (DM / 16);
#pragma unroll
        for (int k = 0; k < TB; k += 16) {
            a_frag<LA> x;
            b_frag<wmma::row_major> y;
            /* row-major A: rows tr*16.., columns k..; col-major (A^T): element (m, kk) at A[kk*PS + m] */
            wmma::load_matrix_sync(x, col ? A + k * L::PS + tr * 16 : A + tr * 16 * L::PS + k, L::PS);
            wmma::load_matrix_sync(y, B + k * L::QS + td * 16, L::QS);
            wmma::mma_sync(acc[u], x, y, acc[u]);
        }
    }
}

template <int DM>
__device__ __forceinline__ void acc_zero(acc_frag (&acc)[OutTiles<DM>::NACC]) {
#pragma unroll
    for (int u = 0; u < OutTiles<DM>::NACC; u++) wmma::fill_fragment(acc[u], 0.0f);
}

/* stores the warp's accumulators into an fp32 (TB, DM) tile of stride OS */
template <int DM>
__device__ __forceinline__ void acc_store(float *out, acc_frag (&acc)[OutTiles<DM>::NACC]) {
    typedef OutTiles<DM> O;
    const int warp = threadIdx.x >> 5;
#pragma unroll
    for (int u = 0; u < O::NACC; u++) {
        const int t = warp + u * (NT / 32);
        if (O::N % (NT / 32) != 0 && t >= O::N) break;
        wmma::store_matrix_sync(out + (t / (DM / 16)) * 16 * TcLayout<DM>::OS + (t % (DM / 16)) * 16, acc[u],
                                TcLayout<DM>::OS, wmma::mem_row_major);
    }
}

/* ------------------------------------------------------------------ forward */

template <int DM>
__global__ void __launch_bounds__(NT) attn_tc_fwd_k(cu_attn a) {
    typedef TcLayout<DM> L;
    constexpr int R = TB / 16, RD = DM / 16;
    DYN_SMEM_BYTES(smem);
    bf16 *Qs = (bf16 *)smem, *Ks = Qs + TB * L::QS, *Vs = Ks + TB * L::QS;
    float *Ss = (float *)(Vs + TB * L::QS);
    bf16 *Ps = (bf16 *)(Ss + TB * L::SS);
    float *Os = (float *)(Ps + TB * L::PS);
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int qt = gridDim.x - 1 - blockIdx.x;        /* heaviest causal tiles first */
    const int h = blockIdx.y, b = blockIdx.z, hk = h / (a.H / a.Hkv);
    const int i0 = qt * TB, nq = min(TB, a.Lq - i0), D = a.D;
    const float *kb = a.k + b * a.k_sb + hk * a.k_sh;
    const float *vb = a.v + b * a.v_sb + hk * a.v_sh;

    load_tile16<DM>(Qs, L::QS, a.q + b * a.q_sb + h * a.q_sh, a.q_st, i0, nq, D, a.scale);
    float o[R][RD], mrow[R], lrow[R];
    uint64_t rk[R];
    init_rows(a, o, mrow, lrow, rk, b, h, i0, ty);
    const int jend = key_end(a, i0, nq);
    for (int j0 = 0; j0 < jend; j0 += TB) {
        const int nk = min(TB, jend - j0);
        __syncthreads();              /* the previous tile's reads are done; Qs is visible */
        load_tile16<DM>(Ks, L::QS, kb, a.k_st, j0, nk, D, 1.0f);
        load_tile16<DM>(Vs, L::QS, vb, a.v_st, j0, nk, D, 1.0f);
        __syncthreads();
        product_xyT<DM>(Ss, Qs, Ks);
        __syncthreads();
        /* mask, online softmax per row, as attention.cu */
#pragma unroll
        for (int ii = 0; ii < R; ii++) {
            const int r = ty + 16 * ii;
            float s[R];
#pragma unroll
            for (int jj = 0; jj < R; jj++) s[jj] = Ss[r * L::SS + tx + 16 * jj];
            const float alpha = softmax_row<R, true>(a, s, r < nq, i0 + r, j0, nk, tx, rk[ii], mrow[ii], lrow[ii]);
#pragma unroll
            for (int dd = 0; dd < RD; dd++) o[ii][dd] *= alpha;
#pragma unroll
            for (int jj = 0; jj < R; jj++) Ps[r * L::PS + tx + 16 * jj] = __float2bfloat16_rn(s[jj]);
        }
        __syncthreads();
        /* Os = P V, then each thread adds its elements to its rescaled accumulator */
        {
            acc_frag pv[OutTiles<DM>::NACC];
            acc_zero<DM>(pv);
            product_acc<DM, wmma::row_major>(pv, Ps, Vs);
            acc_store<DM>(Os, pv);
        }
        __syncthreads();
#pragma unroll
        for (int ii = 0; ii < R; ii++)
#pragma unroll
            for (int dd = 0; dd < RD; dd++) o[ii][dd] += Os[(ty + 16 * ii) * L::OS + tx + 16 * dd];
    }
#pragma unroll
    for (int ii = 0; ii < R; ii++)
        if (ty + 16 * ii < nq) finish_row<RD>(a, o[ii], mrow[ii], lrow[ii], b, h, i0 + ty + 16 * ii, tx);
}

/* ----------------------------------------------------------------- backward */

/* Q (scaled) and dO tiles in bf16, lse and Di of rows [i0, i0 + nq) of head h (padded rows:
 * lse = +inf, so their P is 0) */
template <int DM>
__device__ __forceinline__ void load_q_side16(const cu_attn &a, const float *dout, const float *Di, int b, int h,
                                              int i0, int nq, bf16 *Qs, bf16 *dOs, float *lse_s, float *di_s) {
    typedef TcLayout<DM> L;
    load_tile16<DM>(Qs, L::QS, a.q + b * a.q_sb + h * a.q_sh, a.q_st, i0, nq, a.D, a.scale);
    load_tile16<DM>(dOs, L::QS, dout + b * a.o_sb + h * a.o_sh, a.o_st, i0, nq, a.D, 1.0f);
    const size_t base = ((size_t)b * a.H + h) * a.Lq + i0;
    for (int r = threadIdx.x; r < TB; r += NT) {
        lse_s[r] = r < nq ? a.lse[base + r] : INFINITY;
        di_s[r] = r < nq ? Di[base + r] : 0.0f;
    }
}

/* the thread's elements of S and dP from shared memory */
template <int DM>
__device__ __forceinline__ void read_sdp(float (&s)[TB / 16][TB / 16], float (&dp)[TB / 16][TB / 16], const float *Ss,
                                         const float *DPs, int ty, int tx) {
#pragma unroll
    for (int ii = 0; ii < TB / 16; ii++)
#pragma unroll
        for (int jj = 0; jj < TB / 16; jj++) {
            const int e = (ty + 16 * ii) * TcLayout<DM>::SS + tx + 16 * jj;
            s[ii][jj] = Ss[e];
            dp[ii][jj] = DPs[e];
        }
}

/* The step both backward kernels share, for the tiles in shared memory (Q scaled, K, dO, V):
 * S = Q K^T and dP = dO V^T on the tensor cores, then the thread's elements through
 * bwd_elementwise: s becomes P (dropout applied), dp becomes dS. */
template <int DM>
__device__ __forceinline__ void scores_and_ds(const cu_attn &a, float (&s)[TB / 16][TB / 16], float (&dp)[TB / 16][TB / 16],
                                              const bf16 *Qs, const bf16 *Ks, const bf16 *dOs, const bf16 *Vs, float *Ss,
                                              float *DPs, const float *lse_s, const float *di_s, int b, int h, int i0,
                                              int nq, int j0, int nk, int ty, int tx) {
    product_xyT<DM>(Ss, Qs, Ks);
    product_xyT<DM>(DPs, dOs, Vs);
    __syncthreads();
    read_sdp<DM>(s, dp, Ss, DPs, ty, tx);
    bwd_elementwise<TB / 16, TB / 16, true>(a, s, dp, lse_s, di_s, b, h, i0, nq, j0, nk, ty, tx);
}

/* rows [r0, r0 + n) of a strided head g += s * (an fp32 tile of stride OS), head dims < D */
template <int DM>
__device__ __forceinline__ void add_rows(float *g, long st, const float *Out, int r0, int n, int D, float s) {
    for (int e = threadIdx.x; e < n * DM; e += NT) {
        const int r = e / DM, d = e % DM;
        if (d < D) g[(long)(r0 + r) * st + d] += s * Out[r * TcLayout<DM>::OS + d];
    }
}

template <int DM>
__global__ void __launch_bounds__(NT) attn_tc_dq_k(cu_attn a, const float *dout, float *dq, const float *Di) {
    typedef TcLayout<DM> L;
    constexpr int R = TB / 16;
    DYN_SMEM_BYTES(smem);
    bf16 *Qs = (bf16 *)smem, *dOs = Qs + TB * L::QS, *Ks = dOs + TB * L::QS, *Vs = Ks + TB * L::QS;
    float *Ss = (float *)(Vs + TB * L::QS), *DPs = Ss + TB * L::SS, *Out = Ss;
    bf16 *DSs = (bf16 *)(smem + 4 * L::tile16 + L::sdp);
    float *lse_s = (float *)(DSs + TB * L::PS), *di_s = lse_s + TB;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int qt = gridDim.x - 1 - blockIdx.x;
    const int h = blockIdx.y, b = blockIdx.z, hk = h / (a.H / a.Hkv);
    const int i0 = qt * TB, nq = min(TB, a.Lq - i0), D = a.D;
    const float *kb = a.k + b * a.k_sb + hk * a.k_sh;
    const float *vb = a.v + b * a.v_sb + hk * a.v_sh;
    load_q_side16<DM>(a, dout, Di, b, h, i0, nq, Qs, dOs, lse_s, di_s);
    acc_frag acc[OutTiles<DM>::NACC];
    acc_zero<DM>(acc);
    const int jend = key_end(a, i0, nq);
    for (int j0 = 0; j0 < jend; j0 += TB) {
        const int nk = min(TB, jend - j0);
        __syncthreads();
        load_tile16<DM>(Ks, L::QS, kb, a.k_st, j0, nk, D, 1.0f);
        load_tile16<DM>(Vs, L::QS, vb, a.v_st, j0, nk, D, 1.0f);
        __syncthreads();
        float s[R][R], dp[R][R];
        scores_and_ds<DM>(a, s, dp, Qs, Ks, dOs, Vs, Ss, DPs, lse_s, di_s, b, h, i0, nq, j0, nk, ty, tx);
#pragma unroll
        for (int ii = 0; ii < R; ii++)
#pragma unroll
            for (int jj = 0; jj < R; jj++) DSs[(ty + 16 * ii) * L::PS + tx + 16 * jj] = __float2bfloat16_rn(dp[ii][jj]);
        __syncthreads();
        product_acc<DM, wmma::row_major>(acc, DSs, Ks);           /* dQ += dS K */
    }
    __syncthreads();                  /* every warp is done with Ss/DPs */
    acc_store<DM>(Out, acc);
    __syncthreads();
    add_rows<DM>(dq + b * a.q_sb + h * a.q_sh, a.q_st, Out, i0, nq, D, a.scale);
}

/* two blocks per SM for head sizes up to 64: 128 registers per thread (ptxas then spills
 * about 40 bytes) and 97 KB of shared memory per block; for 128, no minimum (0), which
 * leaves ptxas at about 180 registers, one block per SM */
template <int DM>
__global__ void __launch_bounds__(NT, DM <= 64 ? 2 : 0) attn_tc_dkv_k(cu_attn a, const float *dout, float *dk, float *dv, const float *Di) {
    typedef TcLayout<DM> L;
    constexpr int R = TB / 16;
    DYN_SMEM_BYTES(smem);
    bf16 *Ks = (bf16 *)smem, *Vs = Ks + TB * L::QS, *Qs = Vs + TB * L::QS, *dOs = Qs + TB * L::QS;
    float *Ss = (float *)(dOs + TB * L::QS), *DPs = Ss + TB * L::SS, *Out = Ss;
    bf16 *Ps = (bf16 *)(smem + 4 * L::tile16 + L::sdp), *DSs = Ps + TB * L::PS;
    float *lse_s = (float *)(DSs + TB * L::PS), *di_s = lse_s + TB;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int kt = blockIdx.x, hk = blockIdx.y, b = blockIdx.z, group = a.H / a.Hkv;
    const int j0 = kt * TB, nk = min(TB, a.Lk - j0), D = a.D;
    load_tile16<DM>(Ks, L::QS, a.k + b * a.k_sb + hk * a.k_sh, a.k_st, j0, nk, D, 1.0f);
    load_tile16<DM>(Vs, L::QS, a.v + b * a.v_sb + hk * a.v_sh, a.v_st, j0, nk, D, 1.0f);
    acc_frag ak[OutTiles<DM>::NACC], av[OutTiles<DM>::NACC];
    acc_zero<DM>(ak);
    acc_zero<DM>(av);
    int istart = 0;                   /* first query tile that sees key j0 under the causal rule */
    if (a.causal) {
        long st = (long)j0 - a.causal_offset;
        istart = st >= a.Lq ? a.Lq : st < 0 ? 0 : (int)(st / TB) * TB;
    }
    for (int h = hk * group; h < (hk + 1) * group; h++) {
        for (int i0 = istart; i0 < a.Lq; i0 += TB) {
            const int nq = min(TB, a.Lq - i0);
            __syncthreads();
            load_q_side16<DM>(a, dout, Di, b, h, i0, nq, Qs, dOs, lse_s, di_s);
            __syncthreads();
            float s[R][R], dp[R][R];
            scores_and_ds<DM>(a, s, dp, Qs, Ks, dOs, Vs, Ss, DPs, lse_s, di_s, b, h, i0, nq, j0, nk, ty, tx);
#pragma unroll
            for (int ii = 0; ii < R; ii++)
#pragma unroll
                for (int jj = 0; jj < R; jj++) {
                    const int e = (ty + 16 * ii) * L::PS + tx + 16 * jj;
                    Ps[e] = __float2bfloat16_rn(s[ii][jj]);
                    DSs[e] = __float2bfloat16_rn(dp[ii][jj]);
                }
            __syncthreads();
            product_acc<DM, wmma::col_major>(av, Ps, dOs);        /* dV += (Z P)^T dO */
            product_acc<DM, wmma::col_major>(ak, DSs, Qs);        /* dK += dS^T Q (Q scaled) */
        }
    }
    __syncthreads();                  /* every warp is done with Ss/DPs */
    acc_store<DM>(Out, ak);
    __syncthreads();
    if (dk) add_rows<DM>(dk + b * a.k_sb + hk * a.k_sh, a.k_st, Out, j0, nk, D, 1.0f);
    __syncthreads();                  /* every thread is done reading dK's tile */
    acc_store<DM>(Out, av);
    __syncthreads();
    if (dv) add_rows<DM>(dv + b * a.v_sb + hk * a.v_sh, a.v_st, Out, j0, nk, D, 1.0f);
}

/* ------------------------------------------------------------------ launchers */

template <int DM>
static int tc_fwd(const cu_attn *a) {
    static bool ready = false;
    if (!ready) {
        cudaError_t e = smem_opt_in((const void *)attn_tc_fwd_k<DM>, TcLayout<DM>::fwd);
        if (e != cudaSuccess) return (int)e;
        ready = true;
    }
    dim3 grid((a->Lq + TB - 1) / TB, a->H, a->B);
    void (*kern)(cu_attn) = attn_tc_fwd_k<DM>;
    LAUNCH(kern, grid, NT, TcLayout<DM>::fwd, *a);
    return (int)cudaGetLastError();
}

template <int DM>
static int tc_bwd(const cu_attn *a, const float *dout, float *dq, float *dk, float *dv, const float *Di) {
    static bool ready = false;
    if (!ready) {
        cudaError_t e = smem_opt_in((const void *)attn_tc_dq_k<DM>, TcLayout<DM>::dq);
        if (e == cudaSuccess) e = smem_opt_in((const void *)attn_tc_dkv_k<DM>, TcLayout<DM>::dkv);
        if (e != cudaSuccess) return (int)e;
        ready = true;
    }
    if (dq) {
        dim3 grid((a->Lq + TB - 1) / TB, a->H, a->B);
        void (*kern)(cu_attn, const float *, float *, const float *) = attn_tc_dq_k<DM>;
        LAUNCH(kern, grid, NT, TcLayout<DM>::dq, *a, dout, dq, Di);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return (int)e;
    }
    if (dk || dv) {
        dim3 grid((a->Lk + TB - 1) / TB, a->Hkv, a->B);
        void (*kern)(cu_attn, const float *, float *, float *, const float *) = attn_tc_dkv_k<DM>;
        LAUNCH(kern, grid, NT, TcLayout<DM>::dkv, *a, dout, dk, dv, Di);
    }
    return (int)cudaGetLastError();
}

extern "C" int cu_attn_tc_forward(const cu_attn *a) {
    if (a->nruns) return (int)cudaErrorInvalidValue;           /* runs: one call each (cu_attn) */
    if (a->D <= 16) return tc_fwd<16>(a);
    if (a->D <= 32) return tc_fwd<32>(a);
    if (a->D <= 64) return tc_fwd<64>(a);
    if (a->D <= 128) return tc_fwd<128>(a);
    return -1;
}

extern "C" int cu_attn_tc_backward(const cu_attn *a, const float *dout, float *dq, float *dk, float *dv,
                                   const float *Di) {
    if (a->nruns) return (int)cudaErrorInvalidValue;
    if (a->D <= 16) return tc_bwd<16>(a, dout, dq, dk, dv, Di);
    if (a->D <= 32) return tc_bwd<32>(a, dout, dq, dk, dv, Di);
    if (a->D <= 64) return tc_bwd<64>(a, dout, dq, dk, dv, Di);
    if (a->D <= 128) return tc_bwd<128>(a, dout, dq, dk, dv, Di);
    return -1;
}
