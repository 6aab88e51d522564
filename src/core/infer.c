/* Cached inference: decode tokens one chunk at a time against a KV cache (sampling from
 * the logits is sample.c).
 * The layer sequence mirrors forward_blocks() in model.c; the Skip-Layer routing comes
 * from the model's plan (core/route.h): its runs, and its KV heads read (the cache's slots). */
#include "core/model.h"
#include "core/config.h"
#include "core/ops.h"
#include "core/ops_bf16.h"
#include "core/quant.h"
#include "core/gemm_rows.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


struct sk_kvcache {
    int L, max_T, hs, n_seq;
    sk_kvcache_params par;   /* as made, max_T resolved */
    int *pos;                /* (n_seq): tokens cached of each sequence */
    int *n_store;            /* KV heads stored per layer */
    int *slot;               /* (L, Hkv): cache slot of each KV head, or -1 if no layer reads it */
    /* per layer (n_seq, max_T, n_store, hs): fp32 (k, v), or with SK_KV_BF16 bf16 (k16, v16),
     * the other pair NULL */
    float **k, **v;
    uint16_t **k16, **v16;
    void *mem; size_t elems, elems_full, esize;   /* K/V values, the same without SLA, bytes each */
    /* scratch for one chunk: SK_DECODE_CHUNK rows (a prompt's tokens, or one token of each of
     * that many sequences) */
    float *x, *ln, *q, *att, *tmp, *fch, *act, *logits_all;
    /* SK_WEIGHTS_BF16: a bf16 copy of the model's parameters (same offsets), taken when
     * the cache is made, which the matrix products read instead of the fp32 weights */
    uint16_t *w16; const float *w16_base;
    float *w32; size_t w32_floats; /* weight rows widened back to fp32, for prefill chunks */
    /* SK_WEIGHTS_Q8: the model's own 8-bit weights (a quantized model), else a copy made with
     * the cache (q8_own); same offsets as the parameters */
    const sk_q8 *q8; sk_q8 *q8_own; const float *q8_base;
};


sk_kvcache_params sk_kvcache_default_params(void) {
    return (sk_kvcache_params){.max_T = 0, .n_seq = 1, .weights = SK_WEIGHTS_F32, .kv_type = SK_KV_F32};
}

/* The cache slots of layer l's KV heads (slot[j], -1 where no layer reads head j); returns how
 * many are stored. Only the KV heads some layer reads: with SLA, a borrowing layer's own skip
 * heads are read by nobody unless it lends them. */
static int kv_slots(const sk_model *m, int l, int *slot) {
    int n = 0;
    for (int j = 0; j < m->Hkv; j++) slot[j] = sk_route_plan_kv_stored(m->plan, l, j) ? n++ : -1;
    return n;
}

size_t sk_kvcache_bytes_per_token(const sk_model *m, sk_kv_type kv_type) {
    int *slot = malloc(sizeof(int) * m->Hkv);
    if (!slot) return 0;
    size_t n = 0;
    for (int l = 0; l < m->L; l++) n += 2 * (size_t)kv_slots(m, l, slot) * m->hs;
    free(slot);
    return n * (kv_type == SK_KV_BF16 ? sizeof(uint16_t) : sizeof(float));
}

int sk_kvcache_new_params(sk_kvcache **out, const sk_model *m, const sk_kvcache_params *par) {
    *out = NULL;
    if (!par) return sk_error(SK_EINVAL, "the KV cache needs its parameters (sk_kvcache_default_params)");
    const sk_weights wt = par->weights;
    const int bf16 = wt == SK_WEIGHTS_BF16, q8 = wt == SK_WEIGHTS_Q8, n_seq = par->n_seq;
    const int max_T = par->max_T ? par->max_T : m->cfg.block_size;
    if (max_T < 1 || max_T > m->cfg.block_size)
        return sk_error(SK_EINVAL, "KV cache length %d must be in [1, block_size=%d]", max_T, m->cfg.block_size);
    if (wt != SK_WEIGHTS_F32 && !bf16 && !q8) return sk_error(SK_EINVAL, "unknown weights type %d for the KV cache", (int)wt);
    if (par->kv_type != SK_KV_F32 && par->kv_type != SK_KV_BF16)
        return sk_error(SK_EINVAL, "unknown K/V type %d for the KV cache (SK_KV_F32 or SK_KV_BF16)", (int)par->kv_type);
    if (n_seq < 1 || n_seq > SK_KV_MAX_SEQS)
        return sk_error(SK_EINVAL, "a KV cache holds 1 to %d sequences (asked for %d)", SK_KV_MAX_SEQS, n_seq);
    const int kv16 = par->kv_type == SK_KV_BF16;
    sk_kvcache *kv = calloc(1, sizeof *kv);
    if (!kv) return sk_error(SK_ENOMEM, "out of memory");
    kv->L = m->L; kv->max_T = max_T; kv->hs = m->hs; kv->n_seq = n_seq;
    kv->par = *par; kv->par.max_T = max_T;
    kv->esize = kv16 ? sizeof(uint16_t) : sizeof(float);
    kv->pos = calloc(n_seq, sizeof(int));
    kv->n_store = calloc(m->L, sizeof(int));
    kv->slot = malloc(sizeof(int) * m->L * m->Hkv);
    if (kv16) { kv->k16 = calloc(m->L, sizeof(uint16_t *)); kv->v16 = calloc(m->L, sizeof(uint16_t *)); }
    else { kv->k = calloc(m->L, sizeof(float *)); kv->v = calloc(m->L, sizeof(float *)); }
    if (!kv->pos || !kv->n_store || !kv->slot || (kv16 ? !kv->k16 || !kv->v16 : !kv->k || !kv->v)) {
        sk_kvcache_free(kv);
        return sk_error(SK_ENOMEM, "out of memory for the KV cache");
    }
    for (int l = 0; l < m->L; l++) {
        kv->n_store[l] = kv_slots(m, l, kv->slot + l * m->Hkv);
        kv->elems += 2 * (size_t)n_seq * max_T * kv->n_store[l] * m->hs;
        kv->elems_full += 2 * (size_t)n_seq * max_T * m->Hkv * m->hs;
    }
    int ch = SK_DECODE_CHUNK, Ffc = m->gated ? 2 * m->F : m->F;
    int lrows = n_seq < ch ? n_seq : ch;          /* logits rows: one per sequence of a batch pass */
    size_t scratch = (size_t)ch * (5 * m->C + (size_t)m->H * m->hs + Ffc + m->F) + (size_t)lrows * m->Vp;
    char what[240];
    char seqs[48] = "";
    if (n_seq > 1) snprintf(seqs, sizeof seqs, "%d sequences of ", n_seq);
    snprintf(what, sizeof what, "the KV cache for %s%d positions (%zu bytes of %sK/V, %zu of scratch%s) with the model (%zu bytes)",
             seqs, max_T, kv->elems * kv->esize, kv16 ? "bf16 " : "", scratch * sizeof(float), bf16 ? ", a bf16 copy of the weights" : q8 && !m->q8 ? ", an 8-bit copy of the weights" : "",
             m->n_params * sizeof(float));
    /* the largest matrix a prefill widens (F <= Ffc); the classifier (a batch's logits) goes
     * in blocks of as many rows */
    size_t big = (size_t)m->C * (m->QKV > Ffc ? m->QKV : Ffc);
    size_t copy = bf16 ? m->n_params * 2 : q8 && !m->q8 ? m->n_params + m->n_params / 16 : 0;
    int rc = sk_mem_check(kv->elems * kv->esize + (scratch + m->n_params) * sizeof(float) + copy + (bf16 || q8 ? big * 4 : 0), what);
    if (rc) { sk_kvcache_free(kv); return rc; }
    if (q8) {
        if (!m->q8) {
            /* the copy sk_model_quantize_q8 would make, leaving the model as it is */
            if ((rc = sk_q8_alloc(m, &kv->q8_own))) { sk_kvcache_free(kv); return rc; }
            for (int i = 0; i < kv->q8_own->n_reg; i++)
                sk_q8_quantize(kv->q8_own->q + kv->q8_own->reg[i].off, kv->q8_own->d + kv->q8_own->reg[i].d_off,
                               m->params + kv->q8_own->reg[i].off, kv->q8_own->reg[i].n);
        }
        kv->q8 = m->q8 ? m->q8 : kv->q8_own;
        kv->q8_base = m->params;
        kv->w32 = malloc(big * sizeof *kv->w32);
        kv->w32_floats = big;
        if (!kv->w32) { sk_kvcache_free(kv); return sk_error(SK_ENOMEM, "out of memory for the prefill's weight rows"); }
    }
    if (bf16) {
        kv->w16 = malloc(m->n_params * sizeof *kv->w16);
        kv->w32 = malloc(big * sizeof *kv->w32);
        kv->w32_floats = big;
        if (!kv->w16 || !kv->w32) { sk_kvcache_free(kv); return sk_error(SK_ENOMEM, "out of memory for the bf16 weights"); }
        sk_bf16_from_f32_n(kv->w16, m->params, m->n_params);
        kv->w16_base = m->params;
    }
    /* the K/V (elems is even: bf16's end keeps the scratch's floats aligned), then the scratch */
    kv->mem = malloc(kv->elems * kv->esize + scratch * sizeof(float));
    if (!kv->mem) { sk_kvcache_free(kv); return sk_error(SK_ENOMEM, "out of memory for the KV cache"); }
    float *p;
    if (kv16) {
        uint16_t *h = kv->mem;
        for (int l = 0; l < m->L; l++) {
            size_t n = (size_t)n_seq * max_T * kv->n_store[l] * m->hs;
            kv->k16[l] = h; h += n;
            kv->v16[l] = h; h += n;
        }
        p = (float *)h;
    } else {
        p = kv->mem;
        for (int l = 0; l < m->L; l++) {
            size_t n = (size_t)n_seq * max_T * kv->n_store[l] * m->hs;
            kv->k[l] = p; p += n;
            kv->v[l] = p; p += n;
        }
    }
    kv->x = p; p += (size_t)ch * m->C;
    kv->ln = p; p += (size_t)ch * m->C;
    kv->att = p; p += (size_t)ch * m->C;
    kv->tmp = p; p += (size_t)2 * ch * m->C;   /* also K/V staging when stored heads are not contiguous */
    kv->q = p; p += (size_t)ch * m->H * m->hs;
    kv->fch = p; p += (size_t)ch * Ffc;
    kv->act = p; p += (size_t)ch * m->F;
    kv->logits_all = p;
    *out = kv;
    return SK_OK;
}

sk_kvcache_params sk_kvcache_get_params(const sk_kvcache *kv) { return kv->par; }
int sk_kvcache_n_seq(const sk_kvcache *kv) { return kv->n_seq; }

void sk_kvcache_free(sk_kvcache *kv) {
    if (!kv) return;
    free(kv->pos); free(kv->n_store); free(kv->slot); free(kv->k); free(kv->v); free(kv->k16); free(kv->v16);
    free(kv->mem); free(kv->w16); free(kv->w32);
    sk_q8_free(kv->q8_own);
    free(kv);
}
size_t sk_kvcache_bytes(const sk_kvcache *kv) { return kv->elems * kv->esize; }
size_t sk_kvcache_bytes_full(const sk_kvcache *kv) { return kv->elems_full * kv->esize; }
int sk_kvcache_pos(const sk_kvcache *kv) { return kv->pos[0]; }
void sk_kvcache_reset(sk_kvcache *kv) { kv->pos[0] = 0; }
void sk_kvcache_truncate(sk_kvcache *kv, int n) { sk_kvcache_seq_truncate(kv, 0, n); }
int sk_kvcache_seq_pos(const sk_kvcache *kv, int s) { return s >= 0 && s < kv->n_seq ? kv->pos[s] : -1; }
void sk_kvcache_seq_truncate(sk_kvcache *kv, int s, int n) {
    if (s >= 0 && s < kv->n_seq && n >= 0 && n <= kv->pos[s]) kv->pos[s] = n;
}

/* Offset of layer l, sequence s, position t in that layer's K (or V), in values */
static size_t kv_off(const sk_kvcache *kv, int l, int s, int t) {
    return ((size_t)s * kv->max_T + t) * kv->n_store[l] * kv->hs;
}
/* K (or V) of layer l, sequence s, position t: an fp32 cache's, a bf16 cache's */
static float *kv_at(const sk_kvcache *kv, float *const *base, int l, int s, int t) { return base[l] + kv_off(kv, l, s, t); }
static uint16_t *kv_at16(const sk_kvcache *kv, uint16_t *const *base, int l, int s, int t) { return base[l] + kv_off(kv, l, s, t); }

int sk_kvcache_seq_copy(sk_kvcache *kv, int dst, int src) {
    if (dst < 0 || dst >= kv->n_seq || src < 0 || src >= kv->n_seq)
        return sk_error(SK_EINVAL, "sequence %d or %d is not in the cache's [0, %d)", dst, src, kv->n_seq);
    if (dst == src) return SK_OK;
    for (int l = 0; l < kv->L; l++) {
        size_t bytes = kv->esize * kv->pos[src] * kv->n_store[l] * kv->hs;
        if (kv->k16) {
            memcpy(kv_at16(kv, kv->k16, l, dst, 0), kv_at16(kv, kv->k16, l, src, 0), bytes);
            memcpy(kv_at16(kv, kv->v16, l, dst, 0), kv_at16(kv, kv->v16, l, src, 0), bytes);
        } else {
            memcpy(kv_at(kv, kv->k, l, dst, 0), kv_at(kv, kv->k, l, src, 0), bytes);
            memcpy(kv_at(kv, kv->v, l, dst, 0), kv_at(kv, kv->v, l, src, 0), bytes);
        }
    }
    kv->pos[dst] = kv->pos[src];
    return SK_OK;
}

static void norm(const sk_model *m, float *out, const float *x, const float *w, const float *b, int n, float *stat) {
    if (m->cfg.family == SK_GPT2) sk_layernorm_forward(out, stat, stat + n, x, w, b, n, m->C, m->cfg.norm_eps);
    else sk_rmsnorm_forward(out, stat, x, w, n, m->C, m->cfg.norm_eps);
}

/* Up to this many rows of a prompt chunk the matrix products stream each weight row once for
 * all of them (the decoding kernels of gemm_rows.c, fp32, bf16 or 8-bit); more go to the GEMM.
 * A batch of sequences always takes the decoding kernels (their results must not depend on the
 * batch). Measured on the 2-core AVX2 machine at stories15M's shapes, fp32, with the one-row
 * kernel before the register tiles: 2.2x the GEMM's speed at 4 rows, 1.5x at 12, 0.7x at 16. */
#define SK_ROWS_MAX 12

/* out (n, OC) = inp (n, IC) @ w^T + b, from the cache's 8-bit or bf16 copy of w if it has one:
 * a few rows read it directly (bf16 on a CPU with avx512_bf16: any number; 8-bit on one with
 * avx512_vnni: more through the int8 prompt kernel); more widen it back to fp32 (exactly: bf16 -> fp32 and q * d are
 * lossless), a block of w32's rows at a time, for the GEMM, which is compute-bound there. rows:
 * the decoding kernels whatever n is, so that each row's result is what it would be alone (a
 * batch of sequences, whose every row must not depend on the others). */
static void linear(const sk_kvcache *kv, float *out, const float *inp, const float *w, const float *b, int n, int IC, int OC, int rows) {
    if (kv->q8) {
        size_t off = (size_t)(w - kv->q8_base);
        const int8_t *q = kv->q8->q + off;
        const uint16_t *d = sk_q8_scales(kv->q8, off);
        if (rows || n <= SK_ROWS_MAX) { sk_linear_forward_q8(out, inp, q, d, b, n, IC, OC); return; }
        /* a longer prompt chunk on a CPU with AVX512-VNNI: int8 dot products on activations
         * quantized per block (gemm_q8dot.c); without the memory for them, the GEMM below */
        if (sk_q8_prompt_native() && sk_linear_forward_q8_prompt(out, inp, q, d, b, n, IC, OC) == SK_OK) return;
        int blk = (int)(kv->w32_floats / IC);
        for (int o = 0; o < OC; o += blk) {
            int nb = OC - o < blk ? OC - o : blk;
            sk_q8_dequantize(kv->w32, q + (size_t)o * IC, d + (size_t)o * (IC / SK_Q8_BLOCK), (size_t)nb * IC);
            for (int i = 0; i < n; i++)
                if (b) memcpy(out + (size_t)i * OC + o, b + o, sizeof(float) * nb);
            sk_gemm(0, 1, n, nb, IC, 1.0f, inp, IC, kv->w32, IC, b ? 1.0f : 0.0f, out + o, OC);
        }
        return;
    }
    const uint16_t *w16 = kv->w16 ? kv->w16 + (w - kv->w16_base) : NULL;
    /* bf16 weights on a CPU with vdpbf16ps: every chunk through its tiles (bf16 activations, as
     * decoding; faster than widening the weights for sgemm) */
    if (rows || n <= SK_ROWS_MAX || (w16 && sk_rows_bf16_native())) {
        if (w16) sk_linear_forward_bf16(out, inp, w16, b, n, IC, OC);
        else sk_linear_forward_rows(out, inp, w, b, n, IC, OC);
        return;
    }
    if (!w16) { sk_linear_forward(out, inp, w, b, n, IC, OC); return; }
    int blk = (int)(kv->w32_floats / IC);
    for (int o = 0; o < OC; o += blk) {
        int nb = OC - o < blk ? OC - o : blk;
        sk_bf16_to_f32_n(kv->w32, w16 + (size_t)o * IC, (size_t)nb * IC);
        for (int i = 0; i < n; i++)
            if (b) memcpy(out + (size_t)i * OC + o, b + o, sizeof(float) * nb);
        sk_gemm(0, 1, n, nb, IC, 1.0f, inp, IC, kv->w32, IC, b ? 1.0f : 0.0f, out + o, OC);
    }
}

/* One pass of n <= SK_DECODE_CHUNK rows: a prompt chunk of sequence s (seqs NULL: row i at
 * position pos[s] + i), or one token of each of n distinct sequences seqs[i] (row i at
 * pos[seqs[i]]). logits: the last row's (prompt chunk; every row's with all) or every row's
 * (n, vocab_size). */
static int decode_chunk(sk_model *m, sk_kvcache *kv, const int32_t *tok, int n, int s, const int *seqs, float *logits, int all) {
    const sk_config *c = &m->cfg;
    const sk_params *p = &m->p;
    int C = m->C, F = m->F, H = m->H, Hkv = m->Hkv, hs = m->hs;
    int Ffc = m->gated ? 2 * F : F, group = H / Hkv;
    int rs[SK_DECODE_CHUNK], rp[SK_DECODE_CHUNK];     /* each row's sequence and position */
    for (int i = 0; i < n; i++) {
        rs[i] = seqs ? seqs[i] : s;
        rp[i] = seqs ? kv->pos[rs[i]] : kv->pos[s] + i;
    }
    /* contiguous: the rows are consecutive positions of one sequence (a prompt chunk); rows:
     * the rows are distinct sequences, each computed as it would be alone */
    const int contig = !seqs || n == 1, rows = seqs != NULL;
    const float *wpe = p->wpe ? p->wpe : m->sinus;
    float stat[2 * SK_DECODE_CHUNK];
    for (int i = 0; i < n; i++) {
        const float *e = p->wte + (size_t)tok[i] * C, *q = wpe ? wpe + (size_t)rp[i] * C : NULL;
        float *x = kv->x + (size_t)i * C;
        if (kv->q8) {                         /* the 8-bit rows, dequantized (learned positions too) */
            size_t eo = (size_t)(e - kv->q8_base);
            sk_q8_dequantize(x, kv->q8->q + eo, sk_q8_scales(kv->q8, eo), (size_t)C);
            if (p->wpe) {
                float *row = kv->tmp;
                size_t qo = (size_t)(q - kv->q8_base);
                sk_q8_dequantize(row, kv->q8->q + qo, sk_q8_scales(kv->q8, qo), (size_t)C);
                for (int j = 0; j < C; j++) x[j] += row[j];
            } else if (q) {
                for (int j = 0; j < C; j++) x[j] += q[j];
            }
        } else if (kv->w16) {                 /* the bf16 copy's rows (learned positions too) */
            const uint16_t *e16 = kv->w16 + (e - kv->w16_base), *q16 = p->wpe ? kv->w16 + (q - kv->w16_base) : NULL;
            for (int j = 0; j < C; j++) x[j] = sk_bf16_to_f32(e16[j]) + (q16 ? sk_bf16_to_f32(q16[j]) : q ? q[j] : 0.0f);
        } else {
            for (int j = 0; j < C; j++) x[j] = e[j] + (q ? q[j] : 0.0f);
        }
    }
    for (int l = 0; l < m->L; l++) {
        const float *qkvw = p->qkvw + (size_t)l * m->QKV * C, *qkvb = p->qkvb ? p->qkvb + (size_t)l * m->QKV : NULL;
        int ns = kv->n_store[l];
        norm(m, kv->ln, kv->x, p->ln1w + (size_t)l * C, p->ln1b ? p->ln1b + (size_t)l * C : NULL, n, stat);
        /* q for all heads; k and v only for the stored heads, written straight into the cache
         * when the rows are its consecutive positions and the heads all of its slots */
        linear(kv, kv->q, kv->ln, qkvw, qkvb, n, C, H * hs, rows);
        const int kv16 = kv->k16 != NULL;
        float *kc = kv16 ? NULL : kv_at(kv, kv->k, l, rs[0], rp[0]), *vc = kv16 ? NULL : kv_at(kv, kv->v, l, rs[0], rp[0]);
        const int *slot = kv->slot + l * Hkv;
        for (int j = 0; j < Hkv;) {
            /* a run of stored KV heads [j, e) maps to consecutive slots */
            if (slot[j] < 0) { j++; continue; }
            int e = j + 1;
            while (e < Hkv && slot[e] >= 0) e++;
            int w = (e - j) * hs, direct = contig && ns == e - j && !kv16;
            float *kt = direct ? kc : kv->tmp, *vt = direct ? vc : kv->tmp + (size_t)n * w;
            linear(kv, kt, kv->ln, qkvw + (size_t)(H + j) * hs * C, qkvb ? qkvb + (H + j) * hs : NULL, n, C, w, rows);
            linear(kv, vt, kv->ln, qkvw + (size_t)(H + Hkv + j) * hs * C, qkvb ? qkvb + (H + Hkv + j) * hs : NULL, n, C, w, rows);
            if (kv16) {
                /* a bf16 cache stores K after RoPE, as the fp32 one: rotate the staged rows (a
                 * head's rotation depends only on its position), then round K and V into it */
                if (m->rope) {
                    if (contig) sk_rope(kt, m->rope, 1, n, w, 0, e - j, hs, rp[0], 0);
                    else for (int i = 0; i < n; i++) sk_rope(kt + (size_t)i * w, m->rope, 1, 1, w, 0, e - j, hs, rp[i], 0);
                }
                for (int i = 0; i < n; i++) {
                    uint16_t *k16 = kv_at16(kv, kv->k16, l, rs[i], rp[i]) + (size_t)slot[j] * hs;
                    uint16_t *v16 = kv_at16(kv, kv->v16, l, rs[i], rp[i]) + (size_t)slot[j] * hs;
                    const float *kr = kt + (size_t)i * w, *vr = vt + (size_t)i * w;
                    for (int t = 0; t < w; t++) { k16[t] = sk_rne_bf16(kr[t]); v16[t] = sk_rne_bf16(vr[t]); }
                }
            } else if (!direct)
                for (int i = 0; i < n; i++) {
                    memcpy(kv_at(kv, kv->k, l, rs[i], rp[i]) + (size_t)slot[j] * hs, kt + (size_t)i * w, sizeof(float) * w);
                    memcpy(kv_at(kv, kv->v, l, rs[i], rp[i]) + (size_t)slot[j] * hs, vt + (size_t)i * w, sizeof(float) * w);
                }
            j = e;
        }
        if (m->rope) {
            if (contig) {
                sk_rope(kv->q, m->rope, 1, n, H * hs, 0, H, hs, rp[0], 0);
                if (!kv16) sk_rope(kc, m->rope, 1, n, ns * hs, 0, ns, hs, rp[0], 0);
            } else {
                for (int i = 0; i < n; i++) {
                    sk_rope(kv->q + (size_t)i * H * hs, m->rope, 1, 1, H * hs, 0, H, hs, rp[i], 0);
                    if (!kv16) sk_rope(kv_at(kv, kv->k, l, rs[i], rp[i]), m->rope, 1, 1, ns * hs, 0, ns, hs, rp[i], 0);
                }
            }
        }
        /* attention: a prompt chunk in one call per route; a batch's rows in runs of equal
         * position and evenly spaced sequences (one call for sequences 0..n-1 in step) */
        for (int i = 0; i < n;) {
            int e = i + 1, ds = 0;
            if (!contig) {
                if (e < n && rp[e] == rp[i] && rs[e] > rs[i]) ds = rs[e] - rs[i];
                while (ds && e < n && rp[e] == rp[i] && rs[e] - rs[e - 1] == ds) e++;
            } else {
                e = n;
            }
            int Lq = contig ? n : 1, nb = contig ? 1 : e - i;
            for (int part = 0; part < m->plan->n_runs[l]; part++) {
                const sk_route *r = sk_route_run(m->plan, l, part);
                int h0 = r->h0, nh = r->nh, src = r->src, sn = kv->n_store[src];
                int kslot = kv->slot[src * Hkv + h0 / group];
                long seq_st = (long)kv->max_T * sn * hs;
                sk_attn a;
                memset(&a, 0, sizeof a);
                a.B = nb; a.H = nh; a.Hkv = nh / group; a.Lq = Lq; a.Lk = rp[i] + Lq; a.D = hs;
                a.q = kv->q + (size_t)i * H * hs + (size_t)h0 * hs; a.q_sb = (long)H * hs; a.q_sh = hs; a.q_st = (long)H * hs;
                if (kv16) {       /* read in bf16, widened to fp32 by the attention */
                    a.k16 = kv_at16(kv, kv->k16, src, rs[i], 0) + (size_t)kslot * hs;
                    a.v16 = kv_at16(kv, kv->v16, src, rs[i], 0) + (size_t)kslot * hs;
                } else {
                    a.k = kv_at(kv, kv->k, src, rs[i], 0) + (size_t)kslot * hs;
                    a.v = kv_at(kv, kv->v, src, rs[i], 0) + (size_t)kslot * hs;
                }
                a.k_sb = ds * seq_st; a.k_sh = hs; a.k_st = (long)sn * hs;
                a.v_sb = ds * seq_st; a.v_sh = hs; a.v_st = (long)sn * hs;
                a.out = kv->att + (size_t)i * C + (size_t)h0 * hs; a.o_sb = C; a.o_sh = hs; a.o_st = C;
                a.is_causal = 1; a.causal_offset = rp[i];
                int rc = sk_attn_forward(&a);
                if (rc) return rc;
            }
            i = e;
        }
        linear(kv, kv->tmp, kv->att, p->attprojw + (size_t)l * C * C, p->attprojb ? p->attprojb + (size_t)l * C : NULL, n, C, C, rows);
        sk_add_inplace(kv->x, kv->tmp, (size_t)n * C);
        norm(m, kv->ln, kv->x, p->ln2w + (size_t)l * C, p->ln2b ? p->ln2b + (size_t)l * C : NULL, n, stat);
        linear(kv, kv->fch, kv->ln, p->fcw + (size_t)l * Ffc * C, p->fcb ? p->fcb + (size_t)l * F : NULL, n, C, Ffc, rows);
        sk_mlp_act_forward(m, kv->act, kv->fch, n);
        linear(kv, kv->tmp, kv->act, p->fcprojw + (size_t)l * C * F, p->fcprojb ? p->fcprojb + (size_t)l * C : NULL, n, F, C, rows);
        sk_add_inplace(kv->x, kv->tmp, (size_t)n * C);
    }
    for (int i = 0; i < n; i++) kv->pos[rs[i]] = rp[i] + 1;
    if (logits && all) {
        /* every row's logits straight into the caller's (n, vocab_size) */
        norm(m, kv->ln, kv->x, p->lnfw, p->lnfb, n, stat);
        linear(kv, logits, kv->ln, p->lmhead, NULL, n, C, c->vocab_size, rows);
    } else if (logits) {
        /* a prompt chunk needs only its last token's logits, a batch every row's */
        int r0 = seqs ? 0 : n - 1, nr = n - r0, OC = kv->w16 || kv->q8 ? c->vocab_size : m->Vp;
        norm(m, kv->ln, kv->x + (size_t)r0 * C, p->lnfw, p->lnfb, nr, stat);
        linear(kv, kv->logits_all, kv->ln, p->lmhead, NULL, nr, C, OC, rows);
        for (int i = 0; i < nr; i++)
            memcpy(logits + (size_t)i * c->vocab_size, kv->logits_all + (size_t)i * OC, sizeof(float) * c->vocab_size);
    }
    return SK_OK;
}

static int check_tokens(const sk_model *m, const int32_t *tokens, int n) {
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab_size)
            return sk_error(SK_EINVAL, "token %d at position %d is outside the vocabulary [0, %d)", tokens[i], i, m->cfg.vocab_size);
    return SK_OK;
}
static int check_cache(const sk_model *m, const sk_kvcache *kv) {
    if (kv->L != m->L || kv->hs != m->hs || (kv->w16 && kv->w16_base != m->params) || (kv->q8 && kv->q8_base != m->params))
        return sk_error(SK_EINVAL, "KV cache was made for another model");
    return SK_OK;
}

static int decode_seq(sk_model *m, sk_kvcache *kv, int s, const int32_t *tokens, int n, float *logits, int all) {
    if (n < 1) return sk_error(SK_EINVAL, "decode needs at least one token");
    int rc = check_cache(m, kv);
    if (rc) return rc;
    if (s < 0 || s >= kv->n_seq) return sk_error(SK_EINVAL, "sequence %d is not in the cache's [0, %d)", s, kv->n_seq);
    if (kv->pos[s] + n > kv->max_T)
        return sk_error(SK_EINVAL, "KV cache holds %d positions; %d + %d tokens do not fit", kv->max_T, kv->pos[s], n);
    if ((rc = check_tokens(m, tokens, n))) return rc;
    for (int i = 0; i < n; i += SK_DECODE_CHUNK) {
        int k = n - i < SK_DECODE_CHUNK ? n - i : SK_DECODE_CHUNK;
        float *lo = all ? logits + (size_t)i * m->cfg.vocab_size : i + k == n ? logits : NULL;
        if ((rc = decode_chunk(m, kv, tokens + i, k, s, NULL, lo, all))) return rc;
    }
    return SK_OK;
}

int sk_model_decode_seq(sk_model *m, sk_kvcache *kv, int s, const int32_t *tokens, int n, float *logits) {
    return decode_seq(m, kv, s, tokens, n, logits, 0);
}

int sk_model_decode_all(sk_model *m, sk_kvcache *kv, int s, const int32_t *tokens, int n, float *logits) {
    if (!logits) return sk_error(SK_EINVAL, "decode_all needs a logits buffer (n, vocab_size)");
    return decode_seq(m, kv, s, tokens, n, logits, 1);
}

int sk_model_decode(sk_model *m, sk_kvcache *kv, const int32_t *tokens, int n, float *logits) {
    return sk_model_decode_seq(m, kv, 0, tokens, n, logits);
}

int sk_model_decode_batch(sk_model *m, sk_kvcache *kv, const int *seqs, const int32_t *tokens, int n, float *logits) {
    if (n < 1) return sk_error(SK_EINVAL, "decode needs at least one sequence");
    int rc = check_cache(m, kv);
    if (rc || (rc = check_tokens(m, tokens, n))) return rc;
    char *seen = calloc(kv->n_seq, 1);
    if (!seen) return sk_error(SK_ENOMEM, "out of memory");
    for (int i = 0; i < n && !rc; i++) {
        int s = seqs[i];
        if (s < 0 || s >= kv->n_seq) rc = sk_error(SK_EINVAL, "sequence %d is not in the cache's [0, %d)", s, kv->n_seq);
        else if (seen[s]++) rc = sk_error(SK_EINVAL, "sequence %d appears twice in one batch", s);
        else if (kv->pos[s] + 1 > kv->max_T)
            rc = sk_error(SK_EINVAL, "KV cache holds %d positions; sequence %d is full", kv->max_T, s);
    }
    free(seen);
    for (int i = 0; i < n && !rc; i += SK_DECODE_CHUNK) {
        int k = n - i < SK_DECODE_CHUNK ? n - i : SK_DECODE_CHUNK;
        rc = decode_chunk(m, kv, tokens + i, k, 0, seqs + i, logits ? logits + (size_t)i * m->cfg.vocab_size : NULL, 0);
    }
    return rc;
}
