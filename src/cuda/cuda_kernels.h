/* CUDA kernels of skiplm, as plain launch functions callable from C (src/cuda/model_cuda.c).
 * Every op mirrors its CPU twin in src/core/ops.c / src/core/attention_flash.c: same arguments, same
 * math, same conventions (backward ops ACCUMULATE into gradients unless said otherwise).
 * All pointers are device pointers; all launches go to sk_cu_stream (the legacy default
 * stream but while a decoding step is captured) and return without synchronising: the caller checks cudaGetLastError() after each launch
 * (model_cuda.c's KCHECK, which also synchronises when SKIPLM_CUDA_SYNC=1).
 * N = rows (tokens, B*T). */
#ifndef SK_CUDA_KERNELS_H
#define SK_CUDA_KERNELS_H
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The stream every launch from this thread goes to: 0 (the legacy default stream), except
 * while cached generation captures a decoding step into a CUDA graph (infer_cuda.c). */
extern __thread cudaStream_t sk_cu_stream;

/* The same layout as sk_span (include/skiplm_train.h); model_cuda.c asserts it. */
typedef struct { size_t offset, n; int decay; } cu_span;

/* ------------------------------------------------------------ embeddings */
/* out (B, T, C) = wte[tok] + wpe[pos0 + t] (wpe may be NULL: also the sinusoidal table;
 * pos0 = *pos0_d, a device int, or 0 when pos0_d is NULL: cached generation's offset) */
void cu_encoder_forward(float *out, const int32_t *tok, const float *wte, const float *wpe, const int32_t *pos0_d,
                        int B, int T, int C);
/* dwte[uniq[u]] += sum of dout rows pos[off[u] .. off[u+1]) in that order (the CPU's
 * order: positions increasing), one block per distinct token: deterministic, no atomics. */
void cu_encoder_backward_wte(float *dwte, const float *dout, const int32_t *uniq, const int32_t *off,
                             const int32_t *pos, int n_uniq, int C);
/* dwpe[t] += sum over b of dout[b, t] (b increasing). */
void cu_encoder_backward_wpe(float *dwpe, const float *dout, int B, int T, int C);

/* ----------------------------------------------------------------- norms */
/* The forward ops below whose output is only ever a GEMM's input (the norms, the MLP's
 * activation) take out16: NULL, or where the output goes instead, rounded to bf16 (bf16
 * mixed precision keeps these activations in bf16; out is then unused and may be NULL). */
/* LayerNorm over C: saves mean, rstd (N). b may be NULL. */
void cu_layernorm_forward(float *out, uint16_t *out16, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C, float eps);
/* dinp += ..., dw += ..., db += ... (db may be NULL). part: scratch of 2 * R * C floats,
 * R = cu_colsum_chunks(N). A dx kernel (a warp per row), then a column-sum pass and its
 * finish (deterministic: fixed row chunks, added in a fixed order). The gradient dout is read from dout16 (bf16) when given, else from dout, rounded to bf16 first
 * when rnd (bf16 mixed precision: the input gradient of the GEMM that reads the norm's
 * output is that GEMM's bf16 output, as under autocast; an fp32 sum of several GEMMs'
 * outputs then stands for it). */
void cu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const uint16_t *dout16, int rnd,
                           const float *inp, const float *w, const float *mean, const float *rstd, int N, int C,
                           float *part);
/* RMSNorm (Llama): saves rstd (N). */
void cu_rmsnorm_forward(float *out, uint16_t *out16, float *rstd, const float *inp, const float *w,
                        int N, int C, float eps);
void cu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const uint16_t *dout16, int rnd,
                         const float *inp, const float *w, const float *rstd, int N, int C, float *part);

/* Column sums: out (ncols) += sum over rows of x (N rows, leading dimension ld; or of x16,
 * bf16, when given), in two deterministic stages (R row chunks, then the chunks in order).
 * copy16 (may be NULL): x rounded to bf16 is also written there, packed (N, ncols), as it is
 * read: a linear layer's bias gradient and its dY's bf16 copy for the two GEMMs in one pass.
 * part: R * ncols floats. */
int cu_colsum_chunks(int N);
void cu_colsum_add(float *out, const float *x, const uint16_t *x16, uint16_t *copy16, int N, int ncols, int ld,
                   float *part);
/* out rows (N, ncols, leading dimension ld) = b: a bias broadcast before a beta = 1 GEMM. */
void cu_bias_broadcast(float *out, const float *b, int N, int ncols, int ld);
/* out (N, ncols, contiguous) = res + b (b may be NULL; out may be res): a residual and a
 * bias written before a beta = 1 GEMM adds a projection onto them. */
void cu_bias_residual(float *out, const float *res, const float *b, int N, int ncols);

/* ----------------------------------------------------------- elementwise */
/* GELU / ReLU forward of inp (n = N x F): with the c_fc bias b (F floats; NULL: none) they
 * first add it to inp in place (the pre-activation the backward reads), so c_fc's GEMM runs
 * without its bias (no broadcast pass, beta = 0). SwiGLU (Llama) has no bias. Each tensor is
 * an fp32 / bf16 pair: a non-NULL x16 (bf16) is used instead of x (which may be NULL). In
 * bf16 mixed precision the pre-activation is bf16 (inp16, h16: c_fc's GEMM writes it so,
 * and the bias is added and rounded again in place), and in the backward the activation's
 * gradient dout16 (the GEMM's output) and dinp16 / dh16 (only GEMM operands and a bias's
 * column sum) are bf16 too. The backward overwrites dinp / dh. */
void cu_gelu_forward(float *out, uint16_t *out16, float *inp, uint16_t *inp16, const float *b, int F, size_t n,
                     int tanh_approx);
void cu_gelu_backward(float *dinp, uint16_t *dinp16, const float *inp, const uint16_t *inp16, const float *dout,
                      const uint16_t *dout16, size_t n, int tanh_approx);
void cu_relu_forward(float *out, uint16_t *out16, float *inp, uint16_t *inp16, const float *b, int F, size_t n);
void cu_relu_backward(float *dinp, uint16_t *dinp16, const float *inp, const uint16_t *inp16, const float *dout,
                      const uint16_t *dout16, size_t n);
void cu_swiglu_forward(float *out, uint16_t *out16, const float *h, const uint16_t *h16, int N, int F);
void cu_swiglu_backward(float *dh, uint16_t *dh16, const float *h, const uint16_t *h16, const float *dout,
                        const uint16_t *dout16, int N, int F);
/* RoPE as sk_rope: table (max_pos, hs/2, 2) cos/sin on the device. */
void cu_rope(float *x, const float *table, int B, int T, int row, int col0, int n_heads, int hs, int pos0, int inverse);
void cu_add_inplace(float *y, const float *x, size_t n);
/* dst (rows, cols, packed) = src (rows, cols, leading dimension ld) rounded to bf16 (nearest
 * even; raw bits, __nv_bfloat16's layout): the operands of the bf16 GEMMs. */
void cu_to_bf16(uint16_t *dst, const float *src, size_t rows, int cols, size_t ld);
/* The end of the q/k/v projection in --bf16 (the GEMM without its bias), into the attention's
 * bf16 copy (cu_attn.q16 ...): over N rows (B*T, positions n % T) of the whole heads of hs
 * columns in [c0, c1) (leading dimension ld, both): x = src + bias (bias may be NULL), RoPE
 * (rope: cu_rope's table, or NULL) in the columns below rope_cols (q and k), times scale in
 * the columns below qcols (q), rounded to bf16 into dst. One pass where the bias broadcast,
 * the GEMM's beta = 1 read, RoPE and the copy were. */
void cu_qkv_bf16(uint16_t *dst, const float *src, const float *bias, const float *rope, int N, int T, int ld, int c0,
                 int c1, int hs, int rope_cols, int qcols, float scale);
/* sk_dropout: keep element i iff sk_hash32(seed, stream, i) >= p * 2^32, scale 1/(1-p). */
void cu_dropout(float *x, size_t n, float p, uint64_t seed, uint64_t stream);

/* ------------------------------------------------------------ classifier */
/* Per row of logits (N, Vp; fp32 logits, or bf16 z16 when given): lse over the first V
 * columns, losses[r] = lse - z[target] (0 for target < 0). backward: the row's gradient
 * s * (softmax - onehot(target)) over the first V columns (s = row_scale, 0 for ignored rows)
 * and 0 on the padding columns replaces the row, in its own precision (bf16 for z16: the
 * classifier's backward GEMMs read it as it is). */
void cu_crossentropy(float *logits, uint16_t *z16, float *losses, const int32_t *targets, int N, int V, int Vp,
                     float row_scale, int backward);

/* ------------------------------------------------------------- optimizer */
/* The span kernels below run `split` blocks per span (grid n_spans x split), so that a
 * model of a few large tensors still fills the GPU: cu_span_split(largest span). */
int cu_span_split(size_t max_span);
/* AdamW over the spans, op by op as sk_adamw_step (no FMA contraction); the gradient is
 * first multiplied by clip_coef when clip_coef != 1 (sk_clip_grads folded in). Elementwise,
 * so the split does not change a bit. p16 (may be NULL): the weights' bf16 copy, at p's
 * offsets, written with each updated weight (instead of a rounding pass over all of them). */
void cu_adamw(float *p, uint16_t *p16, const float *g, float *m, float *v, const cu_span *spans, int n_spans,
              int split, float decay, float b1, float b2, float a1, float a2, float step_size, float bc2_sqrt,
              float eps, int wd, float clip_coef);
/* part[s * split + y] = sum of g^2 over the y-th share of span s, in double (fixed order:
 * deterministic); the caller adds the n_spans * split partials. */
void cu_span_sq(double *part, const float *g, const cu_span *spans, int n_spans, int split);

/* ------------------------------------------------------------- attention
 * Fused causal/non-causal attention over strided (B, H, L, D) views, the layout of sk_attn:
 * element (b, h, t, d) of q is q[b*q_sb + h*q_sh + t*q_st + d]. GQA: head h reads kv head
 * h / (H / Hkv). lse (B, H, Lq) contiguous. Dropout regenerates the CPU's hash
 * (src/core/attention_internal.h) exactly. D from 1 to 128.
 *
 * SLA in one launch: with nruns > 0 the kv heads come in runs, each with its own K/V
 * source (run[r]: from kv head hk0 up to the next run's hk0). A run's k, v (k16, v16, and
 * in a backward dk, dv) are its source layer's views of kv head 0, with the strides of the
 * descriptor's k, v, so kv head hk of the run is at k + hk * k_sh as without runs; its
 * dropout seed is its own, and its heads count from its first query head in the dropout
 * hash, as in a call per run. The descriptor's k, v, k16, v16 and seed are then unused.
 * Each head's arithmetic is the same as in a call per run (the same bits out); what one
 * launch saves is the second launch's tail: a causal grid of heaviest-first tiles ends
 * with its light tiles only when every head is in it. The fp32 and mma.sync kernels take
 * runs, the wmma kernels do not (cu_attn_tc_* refuse them). */
#define CU_ATTN_RUNS 8
typedef struct {
    int hk0;                       /* first kv head of the run */
    const float *k, *v;
    const uint16_t *k16, *v16;
    float *dk, *dv;
    uint64_t seed;
} cu_attn_run;
typedef struct {
    int B, H, Hkv, Lq, Lk, D;
    const float *q; long q_sb, q_sh, q_st;
    const float *k; long k_sb, k_sh, k_st;
    const float *v; long v_sb, v_sh, v_st;
    float *out; long o_sb, o_sh, o_st;
    uint16_t *out16;               /* if set, the output goes here in bf16 instead of to out (same
                                      strides; the backward's Di reads it): cu_attn_forward,
                                      cu_attn_backward, cu_attn_decode */
    float scale;
    int causal, causal_offset;     /* key j allowed for query i iff j <= i + causal_offset */
    int dropout;                   /* 1: dropout active */
    uint64_t thr;                  /* keep iff (hash >> 32) >= thr, thr = p * 2^32 */
    float inv_keep;
    uint64_t seed;
    float *lse;
    int tc;                        /* bf16 operands on tensor cores: 1 (--bf16), the mma.sync
                                      kernels of attention_mma.cu; 2, the wmma kernels of
                                      attention_tc.cu (a second implementation the tests
                                      compare with); 0: fp32 */
    int mma_warps;                 /* tc == 1: warps per block, 8 (tiles of 128 rows) or else 4 (64) */
    int mma_rows;                  /* tc == 1 with 4 warps: rows per warp, 32 (two row tiles sharing
                                      each fragment of the walked tile: tiles of 128 rows) or else 16 */
    int bwd_split;                 /* tc == 1 backward: 1 runs dQ in a kernel of its own (which
                                      recomputes S and dP: 7 products) instead of in the dK/dV
                                      kernel (the fused backward, 5 products: 4 warps of 16 rows,
                                      cu_attn_backward's scratch) */
    int stages;                    /* tc == 1: buffers per walked tile, 2 (the next tile's copy
                                      overlaps this one's math) where the shared memory allows
                                      it, 1 when 1 */
    const uint16_t *q16, *k16, *v16; /* tc == 1, each optional: bf16 copies of q TIMES scale, k
                                      and v, with the strides of q, k, v, which the kernels then
                                      read (16-byte cp.async copies where D, the strides and the
                                      addresses are multiples of 8 elements) instead of q, k, v;
                                      in a backward q, k, v still name the views that dq, dk, dv
                                      mirror, in a forward k, v may be NULL (a bf16 KV cache's
                                      prefill). cu_attn_decode reads k16, v16 (unscaled q) when
                                      set, whatever tc */
    uint16_t *dout16;              /* tc == 1 backward, optional: dO in bf16 with out's strides,
                                      which the kernels read: written there by the Di pass from
                                      dout, or, when the backward is given no dout, already
                                      there (--bf16: the output projection's input-gradient
                                      GEMM writes it) */
    const int32_t *pos_d;          /* cu_attn_decode only: if set, the query's position on the
                                      device, and Lk = *pos_d + 1 (<= Lk, same split count) */
    int decode_heads;              /* cu_attn_decode only: query heads per block, sharing their
                                      KV head's rows: 1, 2 or 4 dividing H / Hkv; 0: the most
                                      that divides it (the results are the same bits) */
    int nruns;                     /* 0, or the runs of run[] (at most CU_ATTN_RUNS; not in
                                      cu_attn_decode): SLA's sources in one launch, above */
    cu_attn_run run[CU_ATTN_RUNS];
} cu_attn;
/* 0, or a cudaError_t code (launch failure), or -1 for an unsupported D. */
int cu_attn_forward(const cu_attn *a);
/* Gradients accumulated into dq, dk, dv (strides of q, k, v; dk/dv may point into another
 * layer's gradient buffer: SLA). Di: scratch of cu_attn_scratch(B, H, Lq) floats (Di itself,
 * then the fused backward's counters). dout may be NULL with tc == 1 and a->dout16 (dO
 * already in bf16). */
int cu_attn_backward(const cu_attn *a, const float *dout, float *dq, float *dk, float *dv, float *Di);
/* the floats of cu_attn_backward's scratch */
size_t cu_attn_scratch(int B, int H, int Lq);
/* The tensor-core kernels behind a->tc (attention_tc.cu); cu_attn_backward computes Di first. */
int cu_attn_tc_forward(const cu_attn *a);
int cu_attn_tc_backward(const cu_attn *a, const float *dout, float *dq, float *dk, float *dv, const float *Di);
/* The register-resident (mma.sync) kernels behind a->tc == 1 (attention_mma.cu). */
int cu_attn_mma_forward(const cu_attn *a);
int cu_attn_mma_backward(const cu_attn *a, const float *dout, float *dq, float *dk, float *dv, const float *Di,
                         int *sync);

/* ---------------------------------------------- cached generation (infer_kernels.cu)
 * Single-query attention over a KV cache (one decoding step): a->Lq must be 1 and every key
 * 0..Lk-1 is visible (the query is the newest position; causal and causal_offset are not
 * read), no dropout, no lse. Views as cu_attn_forward, so GQA (head h reads KV head
 * h / (H / Hkv)) and SLA (k, v pointing into the lending layer's cache) work the same way.
 * The keys are split in chunks of CU_DECODE_KEYS: one block per (chunk, head, batch) writes
 * its partial (D outputs, max, sum) to part, then one block per (head, batch) adds the
 * chunks in order: deterministic, no atomics. part: B * H * cu_decode_splits(Lk) * (D + 2)
 * floats. Returns 0, a cudaError_t code (launch failure) or -1 (D outside 1..128). */
#define CU_DECODE_KEYS 128
int cu_decode_splits(int Lk);
int cu_attn_decode(const cu_attn *a, float *part);
/* The end of a chunk's q/k/v projection (qkv: n rows of (H + 2 Hkv) hs, the GEMM without its
 * bias): adds the bias (may be NULL), applies RoPE to q and k (rope: cu_rope's table, or NULL)
 * at positions pos0.. (pos0 = *pos0_d, on the device), keeps q in qkv and writes k, v of KV
 * head j to row pos0 + i, slot slot[j] (device memory; -1: not stored, not read) of kc / vc
 * (rows of ld elements), or, with kc16 / vc16 given (a bf16 cache; kc, vc unused), rounded
 * to bf16 there. */
void cu_qkv_to_cache(float *qkv, int n, int H, int Hkv, int hs, const float *bias, const float *rope,
                     const int32_t *pos0_d, const int *slot, float *kc, float *vc, uint16_t *kc16, uint16_t *vc16,
                     int ld);

#ifdef __cplusplus
}
#endif
#endif
