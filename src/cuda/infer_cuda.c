/* Cached generation on the GPU: the device twin of src/core/infer.c.
 *
 * The KV cache has sk_kvcache's layout and slot map: per layer, K and V of the KV heads that
 * some layer reads (the model's routing plan), (max_T, n_store, hs) each, K stored after RoPE. An SLA
 * layer computes and stores only its own read heads; its borrowed heads' attention reads
 * the lender layer's cache in place (a strided view: nothing is copied). With --bf16 and the
 * mma.sync attention (the default there) K and V are stored in bf16: the values the
 * prefill's tensor-core attention rounded them to anyway, so its logits do not change, and
 * half the bytes for the cache and for every decoding step's reads of it
 * (SKIPLM_CUDA_KV16=0 at sk_cuda_kvcache_new keeps fp32).
 *
 * sk_cuda_prefill appends n tokens in chunks of up to kv->chunk: per layer the norm, the
 * q/k/v projection of q and of the stored heads' K/V (the training's column ranges), one
 * kernel that adds the bias, applies RoPE at the chunk's positions and writes K/V to the
 * cache rows, the fused attention of attention.cu with causal offset pos0 (queries pos0..,
 * keys 0..pos0+n), then c_proj and the MLP, each projection added onto the residual stream
 * in place (beta = 1); a single token (a decoding step) takes the single-query split-K
 * kernel of infer_kernels.cu, and in fp32 cublasSgemv for the projections.
 * The logits of the last token only are computed and copied to the host (vocab_size
 * floats): sampling stays on the host (sk_sample_token), so for the same seed the GPU picks
 * the CPU's tokens whenever the logits agree. */
#include "cuda_internal.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SK_CUDA_PREFILL_CHUNK 512    /* default tokens per prefill pass */

struct sk_cuda_kvcache {
    const sk_model *m;               /* the host model the cache was made for */
    int L, max_T, pos, hs, chunk;
    int *n_store;                    /* (L) KV heads stored per layer */
    int *slot;                       /* (L, Hkv) cache slot of each KV head, or -1 (sk_kvcache's map) */
    int kv16;                        /* 1: K/V in bf16 (k16, v16), else fp32 (k, v) */
    int decode_heads;                /* cu_attn.decode_heads: SKIPLM_CUDA_DECODE_HEADS, or 0 (automatic) */
    float **k, **v;                  /* (L) device pointers, (max_T, n_store, hs) each (fp32) */
    uint16_t **k16, **v16;           /* (L) the same in bf16 */
    size_t elems, elems_full;        /* K/V elements; the same without SLA's saving */
    float *mem;                      /* device: the K/V, then the scratch */
    /* device scratch for one chunk */
    float *x, *ln, *qkv, *att, *fch, *act, *stat, *logits, *part;
    uint16_t *ln16, *att16, *act16;  /* SK_CUDA_BF16: ln, att and act in bf16 instead (GEMM inputs only) */
    uint16_t *fch16;                 /* SK_CUDA_BF16: fch in bf16, as in training (sk_cuda_model.fch16) */
    int32_t *tok;                    /* device: pos0, then the chunk's tokens, then slot_d */
    int *slot_d;                     /* device copy of slot */
    int32_t *io_h;                   /* pinned host: pos0 and the tokens, uploaded as one */
    /* a decoding step (one token) as a CUDA graph: captured once per count of 128-key splits
     * of the decoding attention (the grid; the position itself is read on the device) */
    int graphs;                      /* 1: use graphs; 0: off (SKIPLM_CUDA_GRAPHS=0, or a capture failed) */
    cudaStream_t stream;             /* the graph's stream (non-blocking) */
    cudaEvent_t ready;               /* recorded on the legacy stream: the graph waits for it */
    cudaGraphExec_t *exec;           /* [s]: the step for positions with s splits, or NULL */
    unsigned char *warm;             /* [s]: a step with s splits ran without a graph already */
    int n_exec;                      /* cu_decode_splits(max_T) + 1 */
    unsigned long long exec_serial;  /* the device model they were captured with (its serial) */
    float *logits_h;                 /* pinned host: the step's logits (vocab_size) */
    void *blas_ws;                   /* cuBLAS workspace while capturing */
};

#define SK_CUDA_GRAPH_WS ((size_t)32 << 20)   /* cuBLAS's recommendation on Hopper */

void sk_cuda_kvcache_free(sk_cuda_kvcache *kv) {
    if (!kv) return;
    for (int i = 0; kv->exec && i < kv->n_exec; i++)
        if (kv->exec[i]) cudaGraphExecDestroy(kv->exec[i]);
    free(kv->exec); free(kv->warm);
    if (kv->stream) cudaStreamDestroy(kv->stream);
    if (kv->ready) cudaEventDestroy(kv->ready);
    cudaFree(kv->mem); cudaFree(kv->tok); cudaFree(kv->blas_ws);
    cudaFreeHost(kv->io_h); cudaFreeHost(kv->logits_h);
    free(kv->n_store); free(kv->slot); free(kv->k); free(kv->v); free(kv->k16); free(kv->v16);
    free(kv);
}
static size_t kv_elem(const sk_cuda_kvcache *kv) { return kv->kv16 ? sizeof(uint16_t) : sizeof(float); }
size_t sk_cuda_kvcache_bytes(const sk_cuda_kvcache *kv) { return kv->elems * kv_elem(kv); }
size_t sk_cuda_kvcache_bytes_full(const sk_cuda_kvcache *kv) { return kv->elems_full * kv_elem(kv); }
int sk_cuda_kvcache_bf16(const sk_cuda_kvcache *kv) { return kv->kv16; }
int sk_cuda_kvcache_pos(const sk_cuda_kvcache *kv) { return kv->pos; }
void sk_cuda_kvcache_reset(sk_cuda_kvcache *kv) { kv->pos = 0; }
void sk_cuda_kvcache_truncate(sk_cuda_kvcache *kv, int n) { if (n >= 0 && n <= kv->pos) kv->pos = n; }
int sk_cuda_kvcache_graphs(const sk_cuda_kvcache *kv) { return kv->graphs; }
void sk_cuda_kvcache_set_graphs(sk_cuda_kvcache *kv, int on) { kv->graphs = on != 0; }

/* Lays out (or counts, base == NULL) the K/V of every layer, then the chunk scratch; each
 * view 256-byte aligned. */
static size_t kv_layout(sk_cuda_kvcache *kv, float *base) {
    const sk_model *m = kv->m;
    size_t ch = (size_t)kv->chunk, C = m->C, Ffc = m->gated ? 2 * (size_t)m->F : (size_t)m->F;
    size_t total = 0;
#define V(ptr, size) do { if (base) ptr = base + total; total += ((size_t)(size) + 63) / 64 * 64; } while (0)
    for (int l = 0; l < m->L; l++) {
        size_t n = (size_t)kv->max_T * kv->n_store[l] * m->hs;
        if (kv->kv16) {              /* bf16: half a float per element */
            float *k = NULL, *v = NULL;
            V(k, (n + 1) / 2);
            V(v, (n + 1) / 2);
            if (base) { kv->k16[l] = (uint16_t *)k; kv->v16[l] = (uint16_t *)v; }
        } else {
            V(kv->k[l], n);
            V(kv->v[l], n);
        }
    }
    V(kv->x, ch * C);
    V(kv->ln, ch * C);
    V(kv->att, ch * C);
    V(kv->qkv, ch * m->QKV);
    V(kv->fch, ch * Ffc);
    V(kv->act, ch * m->F);
    V(kv->stat, 2 * ch);
    V(kv->logits, m->Vp);
    V(kv->part, (size_t)m->H * cu_decode_splits(kv->max_T) * (m->hs + 2));
    float *h16[4];                   /* bf16 views: half a float per element */
    V(h16[0], (ch * C + 1) / 2);
    V(h16[1], (ch * C + 1) / 2);
    V(h16[2], (ch * m->F + 1) / 2);
    V(h16[3], (ch * Ffc + 1) / 2);
    if (base) {
        kv->ln16 = (uint16_t *)h16[0]; kv->att16 = (uint16_t *)h16[1]; kv->act16 = (uint16_t *)h16[2];
        kv->fch16 = (uint16_t *)h16[3];
    }
#undef V
    return total;
}

static int kvcache_new(sk_cuda_kvcache *kv, const sk_model *m, int max_T, int chunk, int kv16) {
    kv->m = m; kv->L = m->L; kv->max_T = max_T; kv->hs = m->hs; kv->kv16 = kv16;
    kv->chunk = chunk > 0 ? chunk : SK_CUDA_PREFILL_CHUNK;
    if (kv->chunk > max_T) kv->chunk = max_T;
    kv->n_store = calloc(m->L, sizeof(int));
    kv->slot = malloc(sizeof(int) * m->L * m->Hkv);
    kv->k = calloc(m->L, sizeof(float *));
    kv->v = calloc(m->L, sizeof(float *));
    kv->k16 = calloc(m->L, sizeof(uint16_t *));
    kv->v16 = calloc(m->L, sizeof(uint16_t *));
    if (!kv->n_store || !kv->slot || !kv->k || !kv->v || !kv->k16 || !kv->v16)
        return sk_error(SK_ENOMEM, "out of memory for the KV cache");
    for (int l = 0; l < m->L; l++) {
        /* the CPU cache's slot map (src/core/infer.c): only the KV heads some layer reads */
        for (int j = 0; j < m->Hkv; j++)
            kv->slot[l * m->Hkv + j] = sk_route_plan_kv_stored(m->plan, l, j) ? kv->n_store[l]++ : -1;
        kv->elems += 2 * (size_t)max_T * kv->n_store[l] * m->hs;
        kv->elems_full += 2 * (size_t)max_T * m->Hkv * m->hs;
    }
    size_t total = kv_layout(kv, NULL);
    char what[200];
    snprintf(what, sizeof what, "the GPU KV cache for %d positions (%zu bytes of %s K/V, prefill chunk %d)", max_T,
             sk_cuda_kvcache_bytes(kv), kv16 ? "bf16" : "fp32", kv->chunk);
    TRY(sk_cu_alloc(&kv->mem, total * sizeof(float), what));
    kv_layout(kv, kv->mem);
    const size_t nslot = (size_t)m->L * m->Hkv;
    TRY(sk_cu_alloc(&kv->tok, (1 + (size_t)kv->chunk + nslot) * sizeof(int32_t), "the prefill tokens and the cache slots"));
    kv->slot_d = kv->tok + 1 + kv->chunk;
    CU(cudaMemcpy(kv->slot_d, kv->slot, nslot * sizeof(int), cudaMemcpyHostToDevice));
    CU(cudaMallocHost((void **)&kv->io_h, (1 + (size_t)kv->chunk) * sizeof(int32_t)));
    /* what the decoding graphs need, made whether they start on or off (set_graphs) */
    const char *g = getenv("SKIPLM_CUDA_GRAPHS");
    kv->graphs = !(g && !strcmp(g, "0"));
    CU(cudaMallocHost((void **)&kv->logits_h, (size_t)m->cfg.vocab_size * sizeof(float)));
    TRY(sk_cu_alloc(&kv->blas_ws, SK_CUDA_GRAPH_WS, "the cuBLAS workspace of the decoding graph"));
    CU(cudaStreamCreateWithFlags(&kv->stream, cudaStreamNonBlocking));
    CU(cudaEventCreateWithFlags(&kv->ready, cudaEventDisableTiming));
    kv->n_exec = cu_decode_splits(max_T) + 1;
    kv->exec = calloc((size_t)kv->n_exec, sizeof *kv->exec);
    kv->warm = calloc((size_t)kv->n_exec, 1);
    if (!kv->exec || !kv->warm) return sk_error(SK_ENOMEM, "out of memory");
    return SK_OK;
}

/* a model whose prefill attention can read a bf16 cache: the mma.sync kernels of --bf16 */
static int kv16_model(const sk_cuda_model *cm) { return cm->prec == SK_CUDA_BF16 && cm->attn_tc == 1; }

int sk_cuda_kvcache_new(sk_cuda_kvcache **out, sk_cuda_model *cm, int max_T, int chunk) {
    *out = NULL;
    const sk_model *m = cm->m;
    if (max_T < 1 || max_T > m->cfg.block_size)
        return sk_error(SK_EINVAL, "KV cache length %d must be in [1, block_size=%d]", max_T, m->cfg.block_size);
    if (chunk < 0) return sk_error(SK_EINVAL, "prefill chunk %d must be >= 0 (0: the default %d)", chunk, SK_CUDA_PREFILL_CHUNK);
    const char *e16 = getenv("SKIPLM_CUDA_KV16");
    if (e16 && *e16 && strcmp(e16, "0") && strcmp(e16, "1"))
        return sk_error(SK_EINVAL, "SKIPLM_CUDA_KV16='%s': give 0 (an fp32 KV cache) or 1 (bf16 where the model "
                        "reads it, the default: --bf16 with the tensor-core attention; fp32 otherwise)", e16);
    const char *dh = getenv("SKIPLM_CUDA_DECODE_HEADS");
    const int group = m->H / m->Hkv;
    if (dh && *dh && ((strcmp(dh, "1") && strcmp(dh, "2") && strcmp(dh, "4")) || group % atoi(dh)))
        return sk_error(SK_EINVAL, "SKIPLM_CUDA_DECODE_HEADS='%s': give 1, 2 or 4 query heads per block of the "
                        "decoding attention, dividing the model's %d query heads per KV head", dh, group);
    const int kv16 = kv16_model(cm) && !(e16 && !strcmp(e16, "0"));
    sk_cuda_kvcache *kv = calloc(1, sizeof *kv);
    if (!kv) return sk_error(SK_ENOMEM, "out of memory");
    kv->decode_heads = dh && *dh ? atoi(dh) : 0;
    int rc = kvcache_new(kv, m, max_T, chunk, kv16);
    if (rc) { sk_cuda_kvcache_free(kv); return rc; }
    *out = kv;
    return SK_OK;
}

/* ------------------------------------------------------------------ ops */

/* out (n, OC; row stride ldo) = inp (n, IC) @ w^T, or with acc out += it: one fp32 token by
 * cublasSgemv, a chunk (or, in bf16, any n: the weights' bf16 copy halves a decoding step's
 * reads) by sk_cu_linear(_res), reading inp16 (bf16) when given. w is row-major (OC, IC),
 * i.e. column-major (IC, OC): y = w_cm^T x. The biases are added by the kernels around. */
static int linear(sk_cuda_model *cm, float *out, int ldo, const float *inp, const uint16_t *inp16, const float *w,
                  int n, int IC, int OC, int acc) {
    if (n == 1 && cm->prec != SK_CUDA_BF16) {
        const float one = 1.0f, beta = acc ? 1.0f : 0.0f;
        PROF("GEMV x W^T, one token", BLAS(cublasSgemv(cm->blas, CUBLAS_OP_T, IC, OC, &one, w, IC, inp, 1, &beta, out, 1)));
        return SK_OK;
    }
    return acc ? sk_cu_linear_res(cm, out, out, inp, inp16, w, NULL, n, IC, OC)
               : sk_cu_linear(cm, out, ldo, inp, inp16, w, NULL, n, IC, OC);
}
/* x (n, C) += inp (n, IC) @ w^T + b: a residual branch's projection added in place */
static int linear_res(sk_cuda_model *cm, float *x, const float *inp, const uint16_t *inp16, const float *w,
                      const float *b, int n, int IC) {
    const int C = cm->m->C;
    if (b) K(cu_bias_residual(x, x, b, n, C));
    return linear(cm, x, C, inp, inp16, w, n, IC, C, 1);
}

/* In bf16 the norm and the MLP activation write kv->ln16 / kv->act16 (the GEMMs' bf16
 * input, what rounding kv->ln / kv->act would give) and skip the fp32 form. */
static uint16_t *bf16_or_null(const sk_cuda_model *cm, uint16_t *p) { return cm->prec == SK_CUDA_BF16 ? p : NULL; }

static int norm(sk_cuda_model *cm, sk_cuda_kvcache *kv, const float *x, const float *w, const float *b, int n) {
    const sk_model *m = cm->m;
    uint16_t *o16 = bf16_or_null(cm, kv->ln16);
    if (m->cfg.family == SK_GPT2) K(cu_layernorm_forward(kv->ln, o16, kv->stat, kv->stat + kv->chunk, x, w, b, n, m->C, m->cfg.norm_eps));
    else K(cu_rmsnorm_forward(kv->ln, o16, kv->stat, x, w, n, m->C, m->cfg.norm_eps));
    return SK_OK;
}

/* act = f(ln @ fcw^T + b), c_fc's bias added by the activation kernel; in bf16 the
 * pre-activation is bf16 (fch16), as in training */
static int mlp_up(sk_cuda_model *cm, sk_cuda_kvcache *kv, const float *w, const float *b, int n) {
    const sk_model *m = cm->m;
    const int C = m->C, Ffc = m->gated ? 2 * m->F : m->F;
    uint16_t *ln16 = bf16_or_null(cm, kv->ln16), *fch16 = bf16_or_null(cm, kv->fch16);
    if (fch16) TRY(sk_cu_linear16(cm, fch16, Ffc, kv->ln, ln16, w, n, C, Ffc));
    else TRY(linear(cm, kv->fch, Ffc, kv->ln, ln16, w, n, C, Ffc, 0));
    return sk_cu_mlp_act_forward(cm, kv->act, bf16_or_null(cm, kv->act16), kv->fch, fch16, b, n);
}

static int attn_rc(int rc, const char *what, int l, int part) {
    if (rc == -1)
        return sk_error(SK_EINVAL, "CUDA %s attention: unsupported shape at layer %d (head size above 128, or query "
                        "heads per block not dividing the GQA group?)", what, l);
    if (rc) return sk_error(SK_EIO, "CUDA %s attention, layer %d call %d: %s", what, l, part, cudaGetErrorString((cudaError_t)rc));
    return sk_cu_kcheck(what, __FILE__, __LINE__);
}

/* ------------------------------------------------------------- decoding */

/* The work of n (<= kv->chunk) tokens at positions pos0..pos0+n-1 (src/core/infer.c's
 * decode_chunk, op by op), after io_h (pos0, tokens) was filled: uploads it, runs the layers,
 * and with `out` set leaves the last token's logits there (host memory). The position is
 * read on the device (kv->tok[0]) by every kernel that needs it, so that a single-token step
 * captured into a graph serves every position with the same split count; the host pos0
 * only sizes the decoding attention's grid (and drives a prefill chunk's attention).
 * graph: being captured on kv->stream (asynchronous copies, the pinned buffers). */
static int decode_work(sk_cuda_model *cm, sk_cuda_kvcache *kv, int n, int pos0, float *out, int graph) {
    const sk_model *m = cm->m;
    const sk_params *p = &cm->p;
    int C = m->C, F = m->F, H = m->H, Hkv = m->Hkv, hs = m->hs;
    int Ffc = m->gated ? 2 * F : F, group = H / Hkv;
    const int32_t *pos_d = kv->tok, *tok_d = kv->tok + 1;
    if (graph) CU(cudaMemcpyAsync(kv->tok, kv->io_h, sizeof(int32_t) * (1 + n), cudaMemcpyHostToDevice, kv->stream));
    else CU(cudaMemcpy(kv->tok, kv->io_h, sizeof(int32_t) * (1 + n), cudaMemcpyHostToDevice));
    const float *wpe = p->wpe ? p->wpe : cm->pos_table;
    const uint16_t *ln16 = bf16_or_null(cm, kv->ln16);
    uint16_t *att16 = bf16_or_null(cm, kv->att16);
    K(cu_encoder_forward(kv->x, tok_d, p->wte, wpe, pos_d, 1, n, C));
    for (int l = 0; l < m->L; l++) {
        const float *qkvw = p->qkvw + (size_t)l * m->QKV * C, *qkvb = p->qkvb ? p->qkvb + (size_t)l * m->QKV : NULL;
        int ns = kv->n_store[l], ld = ns * hs;
        TRY(norm(cm, kv, kv->x, p->ln1w + (size_t)l * C, p->ln1b ? p->ln1b + (size_t)l * C : NULL, n));
        /* the q/k/v columns some layer reads (q, and k and v of the stored heads: as in
         * training, one GEMM per column range), then bias, RoPE, and k, v to the cache rows */
        int ncols;
        const int *cols = sk_route_cols(m->plan, l, &ncols);
        for (int i = 0; i < ncols; i++)
            TRY(linear(cm, kv->qkv + cols[2 * i], m->QKV, kv->ln, ln16, qkvw + (size_t)cols[2 * i] * C, n, C,
                       cols[2 * i + 1], 0));
        K(cu_qkv_to_cache(kv->qkv, n, H, Hkv, hs, qkvb, cm->rope, pos_d, kv->slot_d + l * Hkv, kv->k[l], kv->v[l],
                          kv->k16[l], kv->v16[l], ld));
        for (int part = 0; part < m->plan->n_runs[l]; part++) {
            const sk_route *r = sk_route_run(m->plan, l, part);
            int h0 = r->h0, nh = r->nh, src = r->src, sn = kv->n_store[src];
            int kslot = kv->slot[src * Hkv + h0 / group];
            cu_attn a;
            memset(&a, 0, sizeof a);
            a.B = 1; a.H = nh; a.Hkv = nh / group; a.Lq = n; a.Lk = pos0 + n; a.D = hs;
            a.q = kv->qkv + (size_t)h0 * hs;             a.q_sh = hs; a.q_st = m->QKV;
            const size_t ko = (size_t)kslot * hs;      /* a bf16 cache: its k16, v16 instead of k, v */
            if (kv->kv16) { a.k16 = kv->k16[src] + ko; a.v16 = kv->v16[src] + ko; }
            else { a.k = kv->k[src] + ko; a.v = kv->v[src] + ko; }
            a.k_sh = a.v_sh = hs; a.k_st = a.v_st = (long)sn * hs;
            a.out = kv->att + (size_t)h0 * hs;           a.o_sh = hs; a.o_st = C;
            a.out16 = att16 ? att16 + (size_t)h0 * hs : NULL;   /* bf16: only the projection reads it */
            a.scale = 1.0f / sqrtf((float)hs);
            a.causal = 1; a.causal_offset = pos0;
            a.inv_keep = 1.0f;
            a.pos_d = n == 1 ? pos_d : NULL;      /* decoding: Lk from the device */
            a.decode_heads = kv->decode_heads;
            a.tc = cm->attn_tc;                  /* the prefill's kernel; decoding is fp32 math */
            a.mma_warps = cm->attn_warps;
            a.mma_rows = cm->attn_rows;
            a.stages = cm->attn_stages;
            if (n == 1) PROF("attention decode", TRY(attn_rc(cu_attn_decode(&a, kv->part), "decoding", l, part)));
            else PROF("attention prefill", TRY(attn_rc(cu_attn_forward(&a), "prefill", l, part)));
        }
        TRY(linear_res(cm, kv->x, kv->att, att16, p->attprojw + (size_t)l * C * C,
                       p->attprojb ? p->attprojb + (size_t)l * C : NULL, n, C));
        TRY(norm(cm, kv, kv->x, p->ln2w + (size_t)l * C, p->ln2b ? p->ln2b + (size_t)l * C : NULL, n));
        TRY(mlp_up(cm, kv, p->fcw + (size_t)l * Ffc * C, p->fcb ? p->fcb + (size_t)l * F : NULL, n));
        TRY(linear_res(cm, kv->x, kv->act, bf16_or_null(cm, kv->act16), p->fcprojw + (size_t)l * C * F,
                       p->fcprojb ? p->fcprojb + (size_t)l * C : NULL, n, F));
    }
    if (out) {
        /* only the last token's logits: final norm of its row, then (1, Vp) = lnf @ lm_head^T */
        TRY(norm(cm, kv, kv->x + (size_t)(n - 1) * C, p->lnfw, p->lnfb, 1));
        TRY(linear(cm, kv->logits, m->Vp, kv->ln, ln16, p->lmhead, 1, C, m->Vp, 0));
        const size_t bytes = sizeof(float) * m->cfg.vocab_size;
        if (graph) CU(cudaMemcpyAsync(out, kv->logits, bytes, cudaMemcpyDeviceToHost, kv->stream));
        else CU(cudaMemcpy(out, kv->logits, bytes, cudaMemcpyDeviceToHost));
    }
    return SK_OK;
}

/* Captures one decoding step at position pos0 into *exec (for pos0's split count): every
 * launch and cuBLAS call on kv->stream, then instantiated. */
static int capture_step(sk_cuda_model *cm, sk_cuda_kvcache *kv, int pos0, cudaGraphExec_t *exec) {
    BLAS(cublasSetStream(cm->blas, kv->stream));
    cublasStatus_t ws = cublasSetWorkspace(cm->blas, kv->blas_ws, SK_CUDA_GRAPH_WS);
    cudaGraph_t g = NULL;
    cudaError_t e = ws == CUBLAS_STATUS_SUCCESS ? cudaStreamBeginCapture(kv->stream, cudaStreamCaptureModeThreadLocal)
                                                : cudaErrorInvalidValue;
    int rc = SK_OK;
    if (e == cudaSuccess) {
        sk_cu_stream = kv->stream;
        rc = decode_work(cm, kv, 1, pos0, kv->logits_h, 1);
        sk_cu_stream = 0;
        cudaError_t e2 = cudaStreamEndCapture(kv->stream, &g);
        if (rc == SK_OK && e2 != cudaSuccess) rc = sk_cu_fail(e2, "cudaStreamEndCapture", __FILE__, __LINE__);
    } else {
        rc = ws != CUBLAS_STATUS_SUCCESS ? sk_cu_blas_fail(ws, "cublasSetWorkspace", __FILE__, __LINE__)
                                         : sk_cu_fail(e, "cudaStreamBeginCapture", __FILE__, __LINE__);
    }
    cublasSetStream(cm->blas, 0);        /* back to the legacy stream (and its default workspace) */
    if (rc == SK_OK) {
        e = cudaGraphInstantiate(exec, g, 0);
        if (e != cudaSuccess) { *exec = NULL; rc = sk_cu_fail(e, "cudaGraphInstantiate", __FILE__, __LINE__); }
    }
    if (g) cudaGraphDestroy(g);
    if (rc) cudaGetLastError();               /* a failed capture leaves no launch error behind */
    return rc;
}

/* n (<= kv->chunk) tokens at positions pos..pos+n-1. A single token goes through the step's
 * graph when graphs are on (not while bench --profile records, nor with SKIPLM_CUDA_SYNC=1):
 * one launch instead of ten or more per layer. One graph per split count of the decoding
 * attention, captured the second time a position needs it (the first step runs its kernels
 * and cuBLAS calls directly, so that nothing is loaded or initialised for the first time
 * inside a capture) and kept; all are dropped when another device model decodes into this
 * cache. A capture that fails turns graphs off for this cache, with a warning, and the step
 * runs without. */
static int decode_chunk(sk_cuda_model *cm, sk_cuda_kvcache *kv, const int32_t *tok, int n, float *logits) {
    const int pos0 = kv->pos, V = cm->m->cfg.vocab_size;
    kv->io_h[0] = pos0;
    memcpy(kv->io_h + 1, tok, sizeof(int32_t) * n);
    if (n == 1 && kv->graphs && !sk_cu_prof_on() && !sk_cu_sync_each()) {
        if (kv->exec_serial != cm->serial) {
            for (int i = 0; i < kv->n_exec; i++) {
                if (kv->exec[i]) { cudaGraphExecDestroy(kv->exec[i]); kv->exec[i] = NULL; }
                kv->warm[i] = 0;
            }
            kv->exec_serial = cm->serial;
        }
        const int sp = cu_decode_splits(pos0 + 1);
        cudaGraphExec_t *exec = &kv->exec[sp];
        int rc = !*exec && kv->warm[sp] ? capture_step(cm, kv, pos0, exec) : SK_OK;
        if (rc == SK_OK && *exec) {
            /* the non-blocking stream does not wait for the legacy one by itself: a prefill
             * (or an upload, a training step) may still be running there */
            CU(cudaEventRecord(kv->ready, 0));
            CU(cudaStreamWaitEvent(kv->stream, kv->ready, 0));
            CU(cudaGraphLaunch(*exec, kv->stream));
            CU(cudaStreamSynchronize(kv->stream));
            if (logits) memcpy(logits, kv->logits_h, sizeof(float) * V);
            kv->pos += n;
            return SK_OK;
        }
        if (rc == SK_OK) kv->warm[sp] = 1;        /* runs directly below; the next one is captured */
        else {
            fprintf(stderr, "skiplm: capturing the decoding step as a CUDA graph failed (%s); decoding without "
                    "graphs\n", sk_last_error());
            kv->graphs = 0;
        }
    }
    TRY(decode_work(cm, kv, n, pos0, logits, 0));
    kv->pos += n;
    return SK_OK;
}



int sk_cuda_prefill(sk_cuda_model *cm, sk_cuda_kvcache *kv, const int32_t *tokens, int n, float *logits) {
    const sk_model *m = cm->m;
    if (n < 1) return sk_error(SK_EINVAL, "decode needs at least one token");
    if (kv->m != m) return sk_error(SK_EINVAL, "GPU KV cache was made for another model");
    if (kv->kv16 && !kv16_model(cm))
        return sk_error(SK_EINVAL, "this GPU KV cache holds bf16 K/V, which only a --bf16 model with the tensor-core "
                        "attention reads; make an fp32 cache for this model (or SKIPLM_CUDA_KV16=0)");
    if (kv->pos + n > kv->max_T)
        return sk_error(SK_EINVAL, "KV cache holds %d positions; %d + %d tokens do not fit", kv->max_T, kv->pos, n);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab_size)
            return sk_error(SK_EINVAL, "token %d at position %d is outside the vocabulary [0, %d)", tokens[i], i, m->cfg.vocab_size);
    for (int i = 0; i < n; i += kv->chunk) {
        int k = n - i < kv->chunk ? n - i : kv->chunk;
        TRY(decode_chunk(cm, kv, tokens + i, k, i + k == n ? logits : NULL));
    }
    return SK_OK;
}

int sk_cuda_decode(sk_cuda_model *cm, sk_cuda_kvcache *kv, int32_t token, float *logits) {
    return sk_cuda_prefill(cm, kv, &token, 1, logits);
}
