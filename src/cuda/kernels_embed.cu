/* CUDA kernels: token and position embeddings, forward and backward (src/core/ops.c); each
 * mirrors its CPU twin, see src/cuda/cuda_kernels.h for the contracts. */
#include "kernels_common.cuh"

/* ------------------------------------------------------------------ embeddings */

extern "C" { __thread cudaStream_t sk_cu_stream = 0; }

__global__ void encoder_fwd_k(float *out, const int32_t *tok, const float *wte, const float *wpe, const int32_t *pos0_d,
                              int T, int C, size_t n) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    size_t bt = idx / C;
    int c = (int)(idx % C), t = (int)(bt % T) + (pos0_d ? *pos0_d : 0);
    float e = wte[(size_t)tok[bt] * C + c];
    out[idx] = wpe ? e + wpe[(size_t)t * C + c] : e;
}
extern "C" void cu_encoder_forward(float *out, const int32_t *tok, const float *wte, const float *wpe,
                                   const int32_t *pos0_d, int B, int T, int C) {
    size_t n = (size_t)B * T * C;
    LAUNCH(encoder_fwd_k, blocks_for(n, BS), BS, 0, out, tok, wte, wpe, pos0_d, T, C, n);
}

/* one block per distinct token u; threads over columns; positions in increasing order */
__global__ void encoder_bwd_wte_k(float *dwte, const float *dout, const int32_t *uniq, const int32_t *off,
                                  const int32_t *pos, int C) {
    const int u = blockIdx.x;
    float *d = dwte + (size_t)uniq[u] * C;
    const int k0 = off[u], k1 = off[u + 1];
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = d[c];
        for (int k = k0; k < k1; k++) acc += dout[(size_t)pos[k] * C + c];
        d[c] = acc;
    }
}
extern "C" void cu_encoder_backward_wte(float *dwte, const float *dout, const int32_t *uniq, const int32_t *off,
                                        const int32_t *pos, int n_uniq, int C) {
    if (n_uniq > 0) LAUNCH(encoder_bwd_wte_k, n_uniq, 128, 0, dwte, dout, uniq, off, pos, C);
}

__global__ void encoder_bwd_wpe_k(float *dwpe, const float *dout, int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * C) return;
    float acc = dwpe[idx];
    for (int b = 0; b < B; b++) acc += dout[(size_t)b * T * C + idx];
    dwpe[idx] = acc;
}
extern "C" void cu_encoder_backward_wpe(float *dwpe, const float *dout, int B, int T, int C) {
    LAUNCH(encoder_bwd_wpe_k, blocks_for((size_t)T * C, BS), BS, 0, dwpe, dout, B, T, C);
}
