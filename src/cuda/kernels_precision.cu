/* CUDA kernels: bf16 copies of activations and of the fused QKV projection, and dropout
 * (src/core/ops_bf16.c, src/core/model.c); each mirrors its CPU twin, see
 * src/cuda/cuda_kernels.h for the contracts. */
#include "kernels_common.cuh"

/* ------------------------------------------------------------- precision */

__global__ void to_bf16_k(uint16_t *dst, const float *src, size_t n, int cols, size_t ld) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = bf16_bits(src[(i / cols) * ld + i % cols]);
}
/* one thread per pair of head dims (2e, 2e+1) of a (row, head) */
__global__ void qkv_bf16_k(uint16_t *dst, const float *src, const float *bias, const float *rope, size_t n, int T,
                           int ld, int c0, int heads, int hs, int rope_cols, int qcols, float scale) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int half = (hs + 1) / 2;
    if (i >= n) return;
    const int e = (int)(i % half), u = (int)(i / half % heads);
    const size_t r = i / half / heads;
    const int c = c0 + u * hs + 2 * e;
    const size_t at = r * ld + c;
    float a = src[at] + (bias ? bias[c] : 0.0f);
    const float s = c < qcols ? scale : 1.0f;          /* the attention kernels' own rounding */
    if (2 * e + 1 >= hs) { dst[at] = bf16_bits(a * s); return; }
    float b = src[at + 1] + (bias ? bias[c + 1] : 0.0f);
    if (rope && c < rope_cols) {                       /* as rope_k */
        const float *tab = rope + (r % T) * hs;
        const float co = tab[2 * e], si = tab[2 * e + 1], a0 = a;
        a = a0 * co - b * si;
        b = a0 * si + b * co;
    }
    dst[at] = bf16_bits(a * s);
    dst[at + 1] = bf16_bits(b * s);
}
extern "C" void cu_qkv_bf16(uint16_t *dst, const float *src, const float *bias, const float *rope, int N, int T, int ld,
                            int c0, int c1, int hs, int rope_cols, int qcols, float scale) {
    const int heads = (c1 - c0) / hs;
    const size_t n = (size_t)N * heads * ((hs + 1) / 2);
    if (n) LAUNCH(qkv_bf16_k, blocks_for(n, BS), BS, 0, dst, src, bias, rope, n, T, ld, c0, heads, hs, rope_cols,
                  qcols, scale);
}
extern "C" void cu_to_bf16(uint16_t *dst, const float *src, size_t rows, int cols, size_t ld) {
    const size_t n = rows * (size_t)cols;
    if (n) LAUNCH(to_bf16_k, blocks_for(n, BS), BS, 0, dst, src, n, cols, ld);
}

/* sk_hash32 of src/core/ops.h, bit for bit */
__device__ __forceinline__ uint32_t hash32(uint64_t seed, uint64_t stream, uint64_t i) {
    uint64_t z = seed ^ (stream * 0x9E3779B97F4A7C15ULL) ^ (i * 0xD1B54A32D192ED03ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (uint32_t)(z >> 32);
}
__global__ void dropout_k(float *x, size_t n, uint32_t thr, float scale, uint64_t seed, uint64_t stream) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = hash32(seed, stream, i) >= thr ? x[i] * scale : 0.0f;
}
extern "C" void cu_dropout(float *x, size_t n, float p, uint64_t seed, uint64_t stream) {
    if (p <= 0.0f || n == 0) return;
    uint32_t thr = (uint32_t)fmin((double)p * 4294967296.0, 4294967295.0);
    LAUNCH(dropout_k, blocks_for(n, BS), BS, 0, x, n, thr, 1.0f / (1.0f - p), seed, stream);
}
