/* The decoder-only transformer: GPT-2/nanoGPT and Llama/minimind families with
 * Skip-Layer Attention. The call sequence in forward() and backward() is the model. */
#include "core/model.h"
#include "core/gemm_bf16.h"
#include "core/ops_bf16.h"
#include "core/quant.h"
#include "core/config.h"
#include "core/ops.h"
#include "core/vmath.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ parameters */

static size_t sz_layer_qkv(const sk_model *m) { return (size_t)m->QKV * m->C; }

/* Sizes of the stacked regions, in layout order. */
enum { P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB, P_LN2W, P_LN2B,
       P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB, P_LMHEAD, P_COUNT };

static void param_sizes(const sk_model *m, size_t s[P_COUNT]) {
    const sk_config *c = &m->cfg;
    int gpt = c->family == SK_GPT2, b = gpt && c->bias;
    size_t L = m->L, C = m->C, F = m->F;
    s[P_WTE] = (size_t)m->Vp * C;
    s[P_WPE] = gpt && !c->sinusoidal ? (size_t)c->block_size * C : 0;
    s[P_LN1W] = L * C;              s[P_LN1B] = b ? L * C : 0;
    s[P_QKVW] = L * sz_layer_qkv(m); s[P_QKVB] = b || (!gpt && c->qkv_bias) ? L * m->QKV : 0;
    s[P_ATTPROJW] = L * C * C;      s[P_ATTPROJB] = b ? L * C : 0;
    s[P_LN2W] = L * C;              s[P_LN2B] = b ? L * C : 0;
    s[P_FCW] = L * (m->gated ? 2 * F : F) * C; s[P_FCB] = b ? L * F : 0;
    s[P_FCPROJW] = L * C * F;       s[P_FCPROJB] = b ? L * C : 0;
    s[P_LNFW] = C;                  s[P_LNFB] = b ? C : 0;
    s[P_LMHEAD] = c->untied_head ? (size_t)m->Vp * C : 0;     /* last: a tied model is its prefix */
}

void sk_params_views(const sk_model *m, float *base, sk_params *p) {
    size_t s[P_COUNT];
    param_sizes(m, s);
    float **ptr[P_COUNT] = {&p->wte, &p->wpe, &p->ln1w, &p->ln1b, &p->qkvw, &p->qkvb,
                            &p->attprojw, &p->attprojb, &p->ln2w, &p->ln2b, &p->fcw, &p->fcb,
                            &p->fcprojw, &p->fcprojb, &p->lnfw, &p->lnfb, &p->lmhead};
    for (int i = 0; i < P_COUNT; i++) {
        *ptr[i] = s[i] ? base : NULL;
        base += s[i];
    }
    if (!p->lmhead) p->lmhead = p->wte;   /* tied: the classifier reads (and its gradient adds to) wte */
}

static void add_tensor(sk_model *m, const char *name, const float *at, int ndim,
                       int64_t d0, int64_t d1, int decay) {
    sk_tensor *t = &m->tensors[m->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->offset = (size_t)(at - m->params);
    t->ndim = ndim; t->shape[0] = d0; t->shape[1] = ndim > 1 ? d1 : 1;
    t->numel = (size_t)d0 * (ndim > 1 ? (size_t)d1 : 1);
    t->decay = decay;
}

/* The file names of every tensor. Llama q/k rows are stored in our interleaved-pair
 * RoPE order; checkpoint.c permutes them to HF's half-split order on export. */
static int build_tensor_table(sk_model *m) {
    const sk_config *c = &m->cfg;
    const sk_params *p = &m->p;
    int L = m->L, C = m->C, F = m->F;
    m->tensors = calloc((size_t)19 * L + 9, sizeof(sk_tensor));
    if (!m->tensors) return sk_error(SK_ENOMEM, "out of memory for the model's tensor table");
    char n[80];
    if (c->family == SK_GPT2) {
        add_tensor(m, "transformer.wte.weight", p->wte, 2, c->vocab_size, C, 1);
        if (p->wpe) add_tensor(m, "transformer.wpe.weight", p->wpe, 2, c->block_size, C, 1);
        for (int l = 0; l < L; l++) {
#define T1(suffix, ptr, d0) do { snprintf(n, sizeof n, "transformer.h.%d.%s", l, suffix); \
            add_tensor(m, n, ptr, 1, d0, 0, 0); } while (0)
#define T2(suffix, ptr, d0, d1) do { snprintf(n, sizeof n, "transformer.h.%d.%s", l, suffix); \
            add_tensor(m, n, ptr, 2, d0, d1, 1); } while (0)
            T1("ln_1.weight", p->ln1w + (size_t)l * C, C);
            if (c->bias) T1("ln_1.bias", p->ln1b + (size_t)l * C, C);
            T2("attn.c_attn.weight", p->qkvw + l * sz_layer_qkv(m), m->QKV, C);
            if (c->bias) T1("attn.c_attn.bias", p->qkvb + (size_t)l * m->QKV, m->QKV);
            T2("attn.c_proj.weight", p->attprojw + (size_t)l * C * C, C, C);
            if (c->bias) T1("attn.c_proj.bias", p->attprojb + (size_t)l * C, C);
            T1("ln_2.weight", p->ln2w + (size_t)l * C, C);
            if (c->bias) T1("ln_2.bias", p->ln2b + (size_t)l * C, C);
            T2("mlp.c_fc.weight", p->fcw + (size_t)l * F * C, F, C);
            if (c->bias) T1("mlp.c_fc.bias", p->fcb + (size_t)l * F, F);
            T2("mlp.c_proj.weight", p->fcprojw + (size_t)l * C * F, C, F);
            if (c->bias) T1("mlp.c_proj.bias", p->fcprojb + (size_t)l * C, C);
#undef T1
#undef T2
        }
        add_tensor(m, "transformer.ln_f.weight", p->lnfw, 1, C, 0, 0);
        if (c->bias) add_tensor(m, "transformer.ln_f.bias", p->lnfb, 1, C, 0, 0);
        if (c->untied_head) add_tensor(m, "lm_head.weight", p->lmhead, 2, c->vocab_size, C, 1);
    } else {
        int hs = m->hs, qd = m->H * hs, kd = m->Hkv * hs;
        add_tensor(m, "model.embed_tokens.weight", p->wte, 2, c->vocab_size, C, 1);
        for (int l = 0; l < L; l++) {
            const float *qkv = p->qkvw + l * sz_layer_qkv(m), *fc = p->fcw + (size_t)l * (m->gated ? 2 : 1) * F * C;
#define LT(suffix, ptr, nd, d0, d1) do { snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix); \
            add_tensor(m, n, ptr, nd, d0, d1, nd > 1); } while (0)
            LT("input_layernorm.weight", p->ln1w + (size_t)l * C, 1, C, 0);
            LT("self_attn.q_proj.weight", qkv, 2, qd, C);
            LT("self_attn.k_proj.weight", qkv + (size_t)qd * C, 2, kd, C);
            LT("self_attn.v_proj.weight", qkv + (size_t)(qd + kd) * C, 2, kd, C);
            if (c->qkv_bias) {                              /* Qwen2's q, k, v biases */
                const float *qb = p->qkvb + (size_t)l * m->QKV;
                LT("self_attn.q_proj.bias", qb, 1, qd, 0);
                LT("self_attn.k_proj.bias", qb + qd, 1, kd, 0);
                LT("self_attn.v_proj.bias", qb + qd + kd, 1, kd, 0);
            }
            LT("self_attn.o_proj.weight", p->attprojw + (size_t)l * C * C, 2, C, C);
            LT("post_attention_layernorm.weight", p->ln2w + (size_t)l * C, 1, C, 0);
            LT("mlp.gate_proj.weight", fc, 2, F, C);
            if (m->gated) LT("mlp.up_proj.weight", fc + (size_t)F * C, 2, F, C);
            LT("mlp.down_proj.weight", p->fcprojw + (size_t)l * C * F, 2, C, F);
#undef LT
        }
        add_tensor(m, "model.norm.weight", p->lnfw, 1, C, 0, 0);
        if (c->untied_head) add_tensor(m, "lm_head.weight", p->lmhead, 2, c->vocab_size, C, 1);
    }
    return SK_OK;
}

static void init_weights(sk_model *m, uint64_t seed) {
    sk_rng r = {seed};
    const sk_config *c = &m->cfg;
    float std_proj = 0.02f / sqrtf(2.0f * m->L);
    memset(m->params, 0, m->n_params * sizeof(float));
    for (int i = 0; i < m->n_tensors; i++) {
        const sk_tensor *t = &m->tensors[i];
        float *w = m->params + t->offset;
        const char *nm = t->name;
        int is_norm = strstr(nm, "ln_") || strstr(nm, "layernorm") || strstr(nm, "model.norm");
        if (is_norm && strstr(nm, ".weight")) {
            for (size_t k = 0; k < t->numel; k++) w[k] = 1.0f;
        } else if (t->ndim == 2) {
            int proj = strstr(nm, "c_proj.weight") || strstr(nm, "o_proj") || strstr(nm, "down_proj");
            float std = proj ? std_proj : 0.02f;
            for (size_t k = 0; k < t->numel; k++) w[k] = std * sk_rng_normal(&r);
        }   /* biases stay 0 */
    }
    (void)c;
}

#define check_alloc sk_mem_check

/* init: the random initialisation from seed; else all weights 0 (lazily zeroed pages),
 * for a model whose weights are about to be loaded or copied */
static int model_create(sk_model **out, const sk_config *cfg_in, int init, uint64_t seed) {
    *out = NULL;
    sk_config cfg = *cfg_in;
    sk_route_plan *plan;
    int rc = sk_config_check_plan(&cfg, &plan);
    if (rc) return rc;
    sk_model *m = calloc(1, sizeof *m);
    if (!m) { sk_route_plan_free(plan); return sk_error(SK_ENOMEM, "out of memory"); }
    m->cfg = cfg;
    m->plan = plan;
    m->L = cfg.n_layer; m->C = cfg.n_embd; m->H = cfg.n_head; m->Hkv = cfg.n_kv_head;
    m->hs = m->C / m->H; m->QKV = (m->H + 2 * m->Hkv) * m->hs;
    m->F = cfg.ffn_hidden; m->Vp = cfg.padded_vocab_size;
    m->gated = cfg.family == SK_LLAMA && !cfg.relu;
    size_t s[P_COUNT];
    param_sizes(m, s);
    for (int i = 0; i < P_COUNT; i++) m->n_params += s[i];
    /* the position table (sinusoidal or RoPE) is block_size rows: count it too */
    size_t table = cfg.sinusoidal ? (size_t)cfg.block_size * m->C
                 : cfg.family == SK_LLAMA ? (size_t)cfg.block_size * m->hs : 0;
    char what[160];
    snprintf(what, sizeof what, "the model (%zu parameters%s)", m->n_params,
             table ? " and its position table" : "");
    if ((rc = check_alloc((m->n_params + table) * sizeof(float), what))) { sk_model_free(m); return rc; }
    m->params = init ? malloc(m->n_params * sizeof(float)) : calloc(m->n_params, sizeof(float));
    if (!m->params) {
        rc = sk_error(SK_ENOMEM, "out of memory for %zu parameters", m->n_params);
        sk_model_free(m);
        return rc;
    }
    sk_params_views(m, m->params, &m->p);
    if ((rc = build_tensor_table(m))) { sk_model_free(m); return rc; }
    if (cfg.sinusoidal) m->sinus = malloc(table * sizeof(float));
    else if (cfg.family == SK_LLAMA) m->rope = malloc(table * sizeof(float));
    if (table && !m->sinus && !m->rope) {
        sk_model_free(m);
        return sk_error(SK_ENOMEM, "out of memory for the model's tables");
    }
    if (m->sinus) sk_sinusoidal_table(m->sinus, cfg.block_size, m->C);
    if (m->rope) {
        double *freq = malloc(sizeof(double) * (size_t)(m->hs / 2));
        if (!freq) { sk_model_free(m); return sk_error(SK_ENOMEM, "out of memory for the model's tables"); }
        sk_rope_freqs(&cfg, m->hs, freq);
        sk_rope_table(m->rope, cfg.block_size, m->hs, freq);
        free(freq);
    }
    if (init) init_weights(m, seed);
    m->recompute = -1;
    *out = m;
    return SK_OK;
}

int sk_model_new(sk_model **out, const sk_config *cfg, uint64_t seed) { return model_create(out, cfg, 1, seed); }
int sk_model_new_empty(sk_model **out, const sk_config *cfg) { return model_create(out, cfg, 0, 0); }

void sk_model_free(sk_model *m) {
    if (!m) return;
    free(m->params); free(m->grads); free(m->tensors); free(m->acts_mem);
    free(m->rope); free(m->sinus); free(m->params16);
    sk_route_plan_free(m->plan);
    sk_q8_free(m->q8);
    free(m);
}

const sk_config *sk_model_config(const sk_model *m) { return &m->cfg; }
const sk_route_plan *sk_route_plan_of(const sk_model *m) { return m->plan; }
/* A caller may write the parameters through this pointer: in bf16 mode their bf16 copy is
 * rounded anew before the next pass. */
float *sk_model_params(sk_model *m) { m->params16_stale = 1; return m->params; }
float *sk_model_grads(sk_model *m) { return m->grads; }
size_t sk_model_num_params(const sk_model *m) { return m->n_params; }
const sk_tensor *sk_model_tensors(const sk_model *m, int *n) { *n = m->n_tensors; return m->tensors; }
const sk_tensor *sk_model_tensor(const sk_model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
    return NULL;
}

void sk_model_set_frozen(sk_model *m, int on) {
    m->frozen = on != 0;
    if (m->frozen && m->grads) {
        free(m->grads);
        m->grads = NULL;
        memset(&m->g, 0, sizeof m->g);
    }
}

int sk_model_set_adapters(sk_model *m, const sk_adapters *ad) {
    if (ad && m->bf16) return sk_error(SK_EINVAL, "LoRA branches run in fp32: not with bf16 mixed precision");
    m->ad = ad;
    return SK_OK;
}

size_t sk_model_site_offset(const sk_model *m, int l, int site) {
    const float *w = site == SK_SITE_QKV ? m->p.qkvw + (size_t)l * m->QKV * m->C
                   : site == SK_SITE_ATTPROJ ? m->p.attprojw + (size_t)l * m->C * m->C
                   : site == SK_SITE_FC ? m->p.fcw + (size_t)l * (m->gated ? 2 * m->F : m->F) * m->C
                   : m->p.fcprojw + (size_t)l * m->C * m->F;
    return (size_t)(w - m->params);
}

void sk_model_zero_grad(sk_model *m) {
    if (m->grads) memset(m->grads, 0, m->n_params * sizeof(float));
}

void sk_model_phase_times(const sk_model *m, sk_phase_times *t, int reset) {
    *t = m->times;
    if (reset) memset((void *)&m->times, 0, sizeof m->times);
}

/* ----------------------------------------------------------- activations */

int sk_model_n_lenders(const sk_model *m) { return m->plan->n_lenders; }

/* Rows of the classifier chunk: about 16M floats of logits at most. */
static int classifier_chunk(const sk_model *m, int N) {
    int r = (int)((16u << 20) / (unsigned)m->Vp);
    if (r < 16) r = 16;
    return r < N ? r : N;
}

/* Lays out (or just counts, when base == NULL) the activations for (B, T). In bf16 mode the
 * activations that only GEMMs read are bf16 (half a float each) and their fp32 buffers absent. */
static size_t acts_layout(const sk_model *m, int B, int T, int grads, int recompute, float *base, sk_acts *a) {
    size_t BT = (size_t)B * T, C = m->C, F = m->F;
    size_t Ffc = m->gated ? 2 * F : F;
    int gpt = m->cfg.family == SK_GPT2;
    size_t L = recompute ? 1 : (size_t)m->L;                     /* per-layer workspaces */
    size_t Lq = recompute ? (size_t)sk_model_n_lenders(m) + 1 : (size_t)m->L;   /* qkv slots */
    const size_t h = m->bf16 ? 1 : 0, f = 1 - h;                 /* bf16 / fp32 storage */
    const size_t chunk = (size_t)classifier_chunk(m, (int)BT);
    float *v16[9] = {0};
    uint16_t **p16[9] = {&a->ln1_16, &a->ln2_16, &a->fch16, &a->act16, &a->lnf16, &a->x16, &a->dy16, &a->dfch16, &a->dlogits16};
    size_t sizes[48]; float **ptrs[48]; int n = 0;
#define A(ptr, size) do { ptrs[n] = &a->ptr; sizes[n++] = (size); } while (0)
#define H(i, size) do { ptrs[n] = &v16[i]; sizes[n++] = ((size) + 1) / 2; } while (0)
    A(encoded, BT * C);
    A(ln1, f * L * BT * C); A(ln1_mean, gpt ? L * BT : 0); A(ln1_rstd, L * BT);
    A(qkv, Lq * BT * m->QKV);
    A(atty, L * BT * C);
    A(lse, L * BT * m->H);
    A(res2, L * BT * C);
    A(ln2, f * L * BT * C); A(ln2_mean, gpt ? L * BT : 0); A(ln2_rstd, L * BT);
    A(fch, f * L * BT * Ffc);
    A(fch_act, f * L * BT * F);
    A(res3, (size_t)m->L * BT * C);
    A(lnf, f * BT * C); A(lnf_mean, gpt ? BT : 0); A(lnf_rstd, BT);
    A(logits, chunk * m->Vp);
    A(losses, BT);
    H(0, h * L * BT * C); H(1, h * L * BT * C); H(2, h * L * BT * Ffc); H(3, h * L * BT * F);
    H(4, h * BT * C); H(5, h * BT * C);
    if (grads) {
        A(dres, BT * C); A(dbtc, BT * C); A(dbtc2, BT * C);
        A(dfch, f * BT * Ffc); A(dfch_act, BT * F);
        A(dqkv_lend, (size_t)sk_model_n_lenders(m) * BT * m->QKV);
        A(dqkv_own, BT * m->QKV);
        H(6, h * BT * ((size_t)m->QKV > C ? (size_t)m->QKV : C)); H(7, h * BT * Ffc); H(8, h * chunk * m->Vp);
    }
#undef A
#undef H
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (base) *ptrs[i] = sizes[i] ? base + total : NULL;
        total += (sizes[i] + 15) / 16 * 16;    /* 64-byte aligned views */
    }
    if (base)
        for (int i = 0; i < 9; i++) *p16[i] = (uint16_t *)v16[i];
    return total;
}

int sk_model_set_bf16(sk_model *m, int on) {
    on = on != 0;
    if (on == m->bf16) return SK_OK;
    if (on && !sk_bf16_available())
        return sk_error(SK_EINVAL, "bf16 on the CPU needs oneDNN, and this skiplm was built without it: install "
                        "libdnnl-dev (Debian/Ubuntu; bash scripts/install_deps.sh does) and rebuild (make)");
    if (on && m->q8) return sk_error(SK_EINVAL, "the weights are 8-bit (a quantized file): bf16 does not apply");
    if (on) {
        char what[96];
        snprintf(what, sizeof what, "the bf16 copy of the weights (%zu parameters)", m->n_params);
        int rc = check_alloc(m->n_params * (sizeof(float) + sizeof(uint16_t)), what);
        if (rc) return rc;
        m->params16 = malloc(m->n_params * sizeof(uint16_t));
        if (!m->params16) return sk_error(SK_ENOMEM, "out of memory for %s", what);
    } else {
        free(m->params16);
        m->params16 = NULL;
    }
    m->bf16 = on;
    m->params16_stale = 1;
    free(m->acts_mem);
    m->acts_mem = NULL;     /* the activations are laid out anew: bf16 ones replace fp32 ones */
    return SK_OK;
}

int sk_model_bf16(const sk_model *m) { return m->bf16; }

static void bf16_weights(sk_model *m);
uint16_t *sk_model_params_bf16(sk_model *m) {
    if (!m->bf16) return NULL;
    bf16_weights(m);
    return m->params16;
}
void sk_model_params_bf16_synced(sk_model *m) { if (m->bf16) m->params16_stale = 0; }

size_t sk_model_activation_bytes(const sk_model *m, int B, int T, int with_grads) {
    sk_acts a;
    return acts_layout(m, B, T, with_grads, m->recompute == 1, NULL, &a) * sizeof(float);
}

void sk_model_set_recompute(sk_model *m, int mode) {
    m->recompute = mode < 0 ? -1 : mode > 0;
    free(m->acts_mem);
    m->acts_mem = NULL;     /* the next call plans the activations again */
}

/* The views of layer l's activations (the shared workspace when recomputing). */
static size_t qkv_slot(const sk_model *m, int l) {
    if (!m->recompute_on) return (size_t)l;
    const int k = m->plan->lend_index[l];
    return k >= 0 ? (size_t)k : (size_t)sk_model_n_lenders(m);
}
static float *qkv_of(const sk_model *m, int l) {
    return m->a.qkv + qkv_slot(m, l) * (size_t)m->B * m->T * m->QKV;
}
static void layer_acts(const sk_model *m, int l, sk_layer_acts *la) {
    const sk_acts *a = &m->a;
    size_t BT = (size_t)m->B * m->T, C = m->C, F = m->F, Ffc = m->gated ? 2 * F : F;
    size_t w = m->recompute_on ? 0 : (size_t)l;
    la->ln1 = a->ln1 ? a->ln1 + w * BT * C : NULL;
    la->ln1_mean = a->ln1_mean ? a->ln1_mean + w * BT : NULL;
    la->ln1_rstd = a->ln1_rstd + w * BT;
    la->qkv = qkv_of(m, l);
    la->atty = a->atty + w * BT * C;
    la->lse = a->lse + w * BT * m->H;
    la->res2 = a->res2 + w * BT * C;
    la->ln2 = a->ln2 ? a->ln2 + w * BT * C : NULL;
    la->ln2_mean = a->ln2_mean ? a->ln2_mean + w * BT : NULL;
    la->ln2_rstd = a->ln2_rstd + w * BT;
    la->fch = a->fch ? a->fch + w * BT * Ffc : NULL;
    la->fch_act = a->fch_act ? a->fch_act + w * BT * F : NULL;
    la->res3 = a->res3 + (size_t)l * BT * C;
    la->ln1_16 = a->ln1_16 ? a->ln1_16 + w * BT * C : NULL;
    la->ln2_16 = a->ln2_16 ? a->ln2_16 + w * BT * C : NULL;
    la->fch16 = a->fch16 ? a->fch16 + w * BT * Ffc : NULL;
    la->act16 = a->act16 ? a->act16 + w * BT * F : NULL;
}

int sk_model_reserve(sk_model *m, int B, int T, int with_grads) {
    if (B < 1 || T < 1) return sk_error(SK_EINVAL, "batch size B=%d and sequence length T=%d must be >= 1", B, T);
    if (T > m->cfg.block_size)
        return sk_error(SK_EINVAL, "sequence length T=%d exceeds block_size=%d", T, m->cfg.block_size);
    if (m->acts_mem && B == m->B && T == m->T && (m->acts_have_grads || !with_grads))
        return SK_OK;
    m->B = B; m->T = T;      /* qkv_of() and layer_acts() index with these */
    /* Activations grow linearly with B: refuse a B whose byte count would overflow size_t
     * before computing it (B * T * L * C can exceed 2^64 for absurd requests). */
    size_t per_seq = acts_layout(m, 1, T, with_grads, m->recompute == 1, NULL, &m->a) * sizeof(float);
    if (per_seq && (size_t)B > (SIZE_MAX / 2) / per_seq)
        return sk_error(SK_ENOMEM, "the activations for B=%d x T=%d need more than %zu bytes", B, T, SIZE_MAX / 2);
    /* recompute: on when asked; in auto mode, only for training that would not fit otherwise */
    int rec = m->recompute == 1;
    if (m->recompute == -1 && with_grads) {
        size_t full = acts_layout(m, B, T, 1, 0, NULL, &m->a) * sizeof(float);
        rec = sk_mem_check(4 * m->n_params * sizeof(float) + full, "probe") != SK_OK;
    }
    size_t floats = acts_layout(m, B, T, with_grads, rec, NULL, &m->a);
    size_t P = m->n_params * sizeof(float), A = floats * sizeof(float);
    size_t P16 = m->bf16 ? m->n_params * sizeof(uint16_t) : 0;    /* the weights' bf16 copy */
    char p16[64] = "";
    if (P16) snprintf(p16, sizeof p16, " + bf16 weights %zu", P16);
    int rc;
    char what[320];
    if (with_grads && m->frozen) {
        /* a frozen base (LoRA): no weight gradients, no AdamW state */
        snprintf(what, sizeof what, "training on frozen weights with B=%d, T=%d (parameters %zu + activations %zu bytes)",
                 B, T, P, A);
        rc = check_alloc(P + A, what);
    } else if (with_grads) {
        /* training: every training path (sk_trainer_new, bench) also holds AdamW's m and v,
         * so the up-front number is the whole run's: parameters, gradients, m, v, activations */
        snprintf(what, sizeof what, "training with B=%d, T=%d (parameters %zu + gradients %zu + AdamW m and v %zu%s + "
                 "activations %zu bytes)", B, T, P, P, 2 * P, p16, A);
        rc = check_alloc(4 * P + P16 + A, what);
    } else {
        snprintf(what, sizeof what, "the forward pass with B=%d, T=%d (parameters %zu%s + activations %zu bytes)", B, T, P, p16, A);
        rc = check_alloc(P + P16 + A, what);
    }
    if (rc) return rc;
    free(m->acts_mem);
    m->acts_mem = aligned_alloc(64, floats * sizeof(float));
    if (!m->acts_mem) return sk_error(SK_ENOMEM, "out of memory for %zu bytes of activations", floats * sizeof(float));
    acts_layout(m, B, T, with_grads, rec, m->acts_mem, &m->a);
    m->acts_floats = floats;
    m->recompute_on = rec;
    m->B = B; m->T = T; m->acts_have_grads = with_grads;
    m->chunk = classifier_chunk(m, B * T);
    if (with_grads && !m->grads && !m->frozen) {
        m->grads = calloc(m->n_params, sizeof(float));
        if (!m->grads) return sk_error(SK_ENOMEM, "out of memory for the gradients");
        sk_params_views(m, m->grads, &m->g);
    }
    return SK_OK;
}

/* --------------------------------------------------------------- forward */

#define TIMED(field, stmt) do { double t0_ = sk_now(); stmt; m->times.field += sk_now() - t0_; } while (0)

/* The attention call `part` of layer l (sk_attn_call, shared with the CUDA backend): with
 * paper SLA, own heads [0, split) on the layer's own K/V and the borrowed heads [split, H) on
 * the K/V of layer l - n_skip_layer. */
void sk_model_attn_call(const sk_model *m, int l, int part, int B, int T, uint64_t seed, sk_attn_call *c) {
    const sk_route *r = sk_route_run(m->plan, l, part);
    const int group = m->H / m->Hkv, hs = m->hs;
    c->h0 = r->h0; c->nh = r->nh; c->nkv = r->nh / group; c->src = r->src;
    c->q = (size_t)r->h0 * hs;
    c->k = (size_t)m->H * hs + (size_t)(r->h0 / group) * hs;
    c->v = c->k + (size_t)m->Hkv * hs;
    c->out = (size_t)r->h0 * hs;
    c->lse = (size_t)B * r->h0 * T;
    c->qkv_sb = (long)T * m->QKV; c->qkv_st = m->QKV;
    c->out_sb = (long)T * m->C; c->out_st = m->C;
    c->seed = sk_hash32(seed, sk_drop_stream(l, SK_DROP_ATTN_W), (uint64_t)part) |
              ((uint64_t)sk_hash32(seed, 7, (uint64_t)l * 2 + part) << 32);
}

/* The CPU's descriptor of that call: views into the qkv buffers, no copies. */
static void attn_desc(const sk_model *m, sk_attn *a, int l, int part, int B, int T,
                      float dropout, uint64_t seed, int training, const sk_layer_acts *la) {
    sk_attn_call c;
    sk_model_attn_call(m, l, part, B, T, seed, &c);
    const float *qkv_kv = c.src == l ? la->qkv : qkv_of(m, c.src);
    const long hs = m->hs;
    memset(a, 0, sizeof *a);
    a->B = B; a->H = c.nh; a->Hkv = c.nkv; a->Lq = T; a->Lk = T; a->D = m->hs;
    a->q = la->qkv + c.q;    a->q_sb = c.qkv_sb; a->q_sh = hs; a->q_st = c.qkv_st;
    a->k = qkv_kv + c.k;     a->k_sb = c.qkv_sb; a->k_sh = hs; a->k_st = c.qkv_st;
    a->v = qkv_kv + c.v;     a->v_sb = c.qkv_sb; a->v_sh = hs; a->v_st = c.qkv_st;
    a->out = la->atty + c.out; a->o_sb = c.out_sb; a->o_sh = hs; a->o_st = c.out_st;
    a->is_causal = 1;
    a->dropout_p = dropout; a->training = training;
    a->seed = c.seed;
    a->lse = la->lse + c.lse;
    a->bf16 = m->bf16;              /* bf16 mode: the attention's products in bf16 too */
}

static int check_tokens(const sk_model *m, const int32_t *inputs, const int32_t *targets, size_t n) {
    int V = m->cfg.vocab_size;
    for (size_t i = 0; i < n; i++) {
        if (inputs[i] < 0 || inputs[i] >= V)
            return sk_error(SK_EINVAL, "input token %d at position %zu is outside the vocabulary [0, %d)", inputs[i], i, V);
        if (targets && targets[i] >= V)
            return sk_error(SK_EINVAL, "target token %d at position %zu is outside the vocabulary [0, %d)", targets[i], i, V);
    }
    return SK_OK;
}

static void norm_forward(const sk_model *m, float *out, float *mean, float *rstd, const float *inp,
                         const float *w, const float *b, int N) {
    if (m->cfg.family == SK_GPT2) sk_layernorm_forward(out, mean, rstd, inp, w, b, N, m->C, m->cfg.norm_eps);
    else sk_rmsnorm_forward(out, rstd, inp, w, N, m->C, m->cfg.norm_eps);
}
static void norm_backward(const sk_model *m, float *dinp, float *dw, float *db, const float *dout,
                          const float *inp, const float *w, const float *mean, const float *rstd, int N) {
    if (m->cfg.family == SK_GPT2) sk_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, m->C);
    else sk_rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, m->C);
}

/* The MLP's activation: GELU (gpt2), SwiGLU (llama), or ReLU (either, config relu). */
void sk_mlp_act_forward(const sk_model *m, float *act, const float *h, int N) {
    size_t n = (size_t)N * m->F;
    if (m->cfg.relu) sk_relu_forward(act, h, n);
    else if (m->gated) sk_swiglu_forward(act, h, N, m->F);
    else sk_gelu_forward(act, h, n, m->cfg.gelu == SK_GELU_TANH);
}
static void sk_mlp_act_backward(const sk_model *m, float *dh, const float *h, const float *dact, int N) {
    size_t n = (size_t)N * m->F;
    if (m->cfg.relu) sk_relu_backward(dh, h, dact, n);
    else if (m->gated) sk_swiglu_backward(dh, h, dact, N, m->F);
    else sk_gelu_backward(dh, h, dact, n, m->cfg.gelu == SK_GELU_TANH);
}

/* ------------------------------------------------- bf16 mixed precision
 *
 * In bf16 mode (sk_model_set_bf16) each GEMM multiplies bf16 operands with fp32 accumulation
 * (sk_gemm_bf16): the weights from params16, the activations that only GEMMs read from their
 * bf16 buffers (written rounded by the op before: the norms, the MLP's activation and its
 * backward), and any other operand rounded into a scratch first (the attention's output, each
 * backward dY, dqkv). Everything else is the fp32 code. */

/* W's bf16 copy: the same offset in params16 */
static const uint16_t *w16(const sk_model *m, const float *w) { return m->params16 + (w - m->params); }

/* Round the parameters into params16 if they may have changed since the last time. */
static void bf16_weights(sk_model *m) {
    if (!m->bf16 || !m->params16_stale) return;
    sk_round_bf16(m->params16, m->params, m->n_params);
    m->params16_stale = 0;
}

static void norm_forward16(const sk_model *m, uint16_t *out, float *mean, float *rstd, const float *inp,
                           const float *w, const float *b, int N) {
    if (m->cfg.family == SK_GPT2) sk_layernorm_forward_bf16(out, mean, rstd, inp, w, b, N, m->C, m->cfg.norm_eps);
    else sk_rmsnorm_forward_bf16(out, rstd, inp, w, N, m->C, m->cfg.norm_eps);
}
static void mlp_act_forward16(const sk_model *m, uint16_t *act, const uint16_t *h, int N) {
    size_t n = (size_t)N * m->F;
    if (m->cfg.relu) sk_relu_forward_bf16(act, h, n);
    else if (m->gated) sk_swiglu_forward_bf16(act, h, N, m->F);
    else sk_gelu_forward_bf16(act, h, n, m->cfg.gelu == SK_GELU_TANH);
}
static void mlp_act_backward16(const sk_model *m, uint16_t *dh, const uint16_t *h, const float *dact, int N) {
    size_t n = (size_t)N * m->F;
    if (m->cfg.relu) sk_relu_backward_bf16(dh, h, dact, n);
    else if (m->gated) sk_swiglu_backward_bf16(dh, h, dact, N, m->F);
    else sk_gelu_backward_bf16(dh, h, dact, n, m->cfg.gelu == SK_GELU_TANH);
}

/* out (N, OC) = x (N, IC) @ W^T + b in bf16: out fp32, or out16 rounded once */
static int linear16_forward(const sk_model *m, float *out, uint16_t *out16, const uint16_t *x, const float *w,
                            const float *b, int N, int IC, int OC) {
    return sk_gemm_bf16(0, 1, N, OC, IC, x, IC, w16(m, w), IC, b, 0, out, out16, OC);
}
/* dx (N, IC) = dy @ W (overwritten; fp32), dW (OC, IC) += dy^T @ x, from the bf16 dy and x */
static int linear16_backward(const sk_model *m, float *dx, float *dw, const uint16_t *dy, const uint16_t *x,
                             const float *w, int N, int IC, int OC) {
    int rc = sk_gemm_bf16(0, 0, N, IC, OC, dy, OC, w16(m, w), IC, NULL, 0, dx, NULL, IC);
    return rc ? rc : sk_gemm_bf16(1, 0, OC, IC, N, dy, OC, x, IC, NULL, 1, dw, NULL, IC);
}

/* qkv_forward in bf16: the same column ranges */
static int qkv_forward16(const sk_model *m, int l, float *qkv, const uint16_t *ln1, int N) {
    const float *w = m->p.qkvw + (size_t)l * m->QKV * m->C, *b = m->p.qkvb ? m->p.qkvb + (size_t)l * m->QKV : NULL;
    int n, C = m->C, QKV = m->QKV, rc = SK_OK;
    const int *r = sk_route_cols(m->plan, l, &n);
    for (int i = 0; i < n && !rc; i++) {
        int c0 = r[2 * i], cw = r[2 * i + 1];
        rc = sk_gemm_bf16(0, 1, N, cw, C, ln1, C, w16(m, w) + (size_t)c0 * C, C, b ? b + c0 : NULL, 0, qkv + c0, NULL, QKV);
    }
    return rc;
}

/* qkv_backward in bf16: dqkv16 is dqkv rounded (the GEMMs' operand); the bias gradient sums the
 * fp32 dqkv as the fp32 path does */
static int qkv_backward16(sk_model *m, int l, float *dln1, const float *dqkv, const uint16_t *dqkv16,
                          const uint16_t *ln1, int N) {
    size_t off = (size_t)l * m->QKV * m->C;
    const uint16_t *w = w16(m, m->p.qkvw + off);
    float *dw = m->g.qkvw + off, *db = m->g.qkvb ? m->g.qkvb + (size_t)l * m->QKV : NULL;
    int n, C = m->C, QKV = m->QKV, rc = SK_OK;
    const int *r = sk_route_cols(m->plan, l, &n);
    if (n == 1 && r[1] == QKV) {
        rc = sk_gemm_bf16(0, 0, N, C, QKV, dqkv16, QKV, w, C, NULL, 0, dln1, NULL, C);
        if (!rc) rc = sk_gemm_bf16(1, 0, QKV, C, N, dqkv16, QKV, ln1, C, NULL, 1, dw, NULL, C);
        if (!rc && db) sk_colsum_add(db, dqkv, N, QKV);
        return rc;
    }
    for (int i = 0; i < n && !rc; i++) {
        int c0 = r[2 * i], cw = r[2 * i + 1];
        rc = sk_gemm_bf16(0, 0, N, C, cw, dqkv16 + c0, QKV, w + (size_t)c0 * C, C, NULL, i > 0, dln1, NULL, C);
        if (!rc) rc = sk_gemm_bf16(1, 0, cw, C, N, dqkv16 + c0, QKV, ln1, C, NULL, 1, dw + (size_t)c0 * C, NULL, C);
        if (db) {
            for (int t = 0; t < N; t++) {
                const float *row = dqkv + (size_t)t * QKV + c0;
                for (int c = 0; c < cw; c++) db[c0 + c] += row[c];
            }
        }
    }
    return rc;
}

/* qkv (N, QKV) = ln1 @ Wqkv^T + b, computing only the columns some layer reads (the rest
 * of the row is left as it is: nobody reads it). */
static void qkv_forward(const sk_model *m, int l, float *qkv, const float *ln1, int N) {
    const float *w = m->p.qkvw + (size_t)l * m->QKV * m->C, *b = m->p.qkvb ? m->p.qkvb + (size_t)l * m->QKV : NULL;
    int n, C = m->C, QKV = m->QKV;
    const int *r = sk_route_cols(m->plan, l, &n);
    if (n == 1 && r[1] == QKV) { sk_linear_forward(qkv, ln1, w, b, N, C, QKV); return; }
    for (int i = 0; i < n; i++) {
        int c0 = r[2 * i], cw = r[2 * i + 1];
        if (b)
            for (int t = 0; t < N; t++) memcpy(qkv + (size_t)t * QKV + c0, b + c0, sizeof(float) * cw);
        sk_gemm(0, 1, N, cw, C, 1.0f, ln1, C, w + (size_t)c0 * C, C, b ? 1.0f : 0.0f, qkv + c0, QKV);
    }
}

/* Backward of qkv_forward: dln1 (N, C) = dqkv @ W (overwritten), dW and db accumulated, over
 * the computed columns only (the others have zero gradient). */
static void qkv_backward(sk_model *m, int l, float *dln1, const float *dqkv, const float *ln1, int N) {
    size_t off = (size_t)l * m->QKV * m->C;
    const float *w = m->p.qkvw + off;
    float *dw = m->g.qkvw ? m->g.qkvw + off : NULL, *db = m->g.qkvb ? m->g.qkvb + (size_t)l * m->QKV : NULL;
    int n, C = m->C, QKV = m->QKV;
    const int *r = sk_route_cols(m->plan, l, &n);
    if (n == 1 && r[1] == QKV) { sk_linear_backward(dln1, dw, db, dqkv, ln1, w, N, C, QKV); return; }
    for (int i = 0; i < n; i++) {
        int c0 = r[2 * i], cw = r[2 * i + 1];
        sk_gemm(0, 0, N, C, cw, 1.0f, dqkv + c0, QKV, w + (size_t)c0 * C, C, i ? 1.0f : 0.0f, dln1, C);
        if (dw) sk_gemm(1, 0, cw, C, N, 1.0f, dqkv + c0, QKV, ln1, C, 1.0f, dw + (size_t)c0 * C, C);
        if (db) {
            /* column sums of the strided block, rows in order (thread-count independent) */
            for (int t = 0; t < N; t++) {
                const float *row = dqkv + (size_t)t * QKV + c0;
                for (int c = 0; c < cw; c++) db[c0 + c] += row[c];
            }
        }
    }
}

/* ------------------------------------------------------------- adapters */

/* x's dropped copy for adapter a (in the scratch), or x itself */
static const float *adapter_input(const sk_model *m, const sk_adapter *a, const float *x, int N, int training, uint64_t seed) {
    const sk_adapters *ad = m->ad;
    if (!training || !(ad->dropout > 0.0f)) return x;
    const size_t n = (size_t)N * a->in;
    memcpy(ad->scratch, x, n * sizeof(float));
    sk_dropout(ad->scratch, n, ad->dropout, seed, a->stream);
    return ad->scratch;
}

/* y (N, ldy): rows [row0, row0 + out) of the site's output += scale * drop(x) A^T B^T */
static void adapters_forward(sk_model *m, int l, int site, float *y, int ldy, const float *x, int N, int training,
                             uint64_t seed) {
    const sk_adapters *ad = m->ad;
    if (!ad) return;
    for (int i = 0; i < ad->n; i++) {
        const sk_adapter *a = &ad->a[i];
        if (a->layer != l || a->site != site) continue;
        const float *xin = adapter_input(m, a, x, N, training, seed);
        sk_gemm(0, 1, N, ad->rank, a->in, 1.0f, xin, a->in, a->A, a->in, 0.0f, a->u, ad->rank);
        sk_gemm(0, 1, N, a->out, ad->rank, ad->scale, a->u, ad->rank, a->B, ad->rank, 1.0f, y + a->row0, ldy);
    }
}

/* From dy (N, ldy), the site's output gradient: dB += scale dy^T u, du = scale dy B,
 * dA += du^T drop(x), dx (N, in) += drop'(du A) (the same mask) */
static void adapters_backward(sk_model *m, int l, int site, float *dx, const float *dy, int ldy, const float *x, int N,
                              uint64_t seed) {
    const sk_adapters *ad = m->ad;
    if (!ad) return;
    const int r = ad->rank;
    for (int i = 0; i < ad->n; i++) {
        const sk_adapter *a = &ad->a[i];
        if (a->layer != l || a->site != site) continue;
        const float *g = dy + a->row0;
        sk_gemm(1, 0, a->out, r, N, ad->scale, g, ldy, a->u, r, 1.0f, a->dB, r);
        sk_gemm(0, 0, N, r, a->out, ad->scale, g, ldy, a->B, r, 0.0f, ad->scratch_r, r);
        const float *xin = adapter_input(m, a, x, N, 1, seed);
        sk_gemm(1, 0, r, a->in, N, 1.0f, ad->scratch_r, r, xin, a->in, 1.0f, a->dA, a->in);
        if (ad->dropout > 0.0f) {
            const size_t n = (size_t)N * a->in;
            sk_gemm(0, 0, N, a->in, r, 1.0f, ad->scratch_r, r, a->A, a->in, 0.0f, ad->scratch, a->in);
            sk_dropout(ad->scratch, n, ad->dropout, seed, a->stream);
            sk_add_inplace(dx, ad->scratch, n);
        } else {
            sk_gemm(0, 0, N, a->in, r, 1.0f, ad->scratch_r, r, a->A, a->in, 1.0f, dx, a->in);
        }
    }
}

/* One block: x -> la->res3, saving what the backward pass needs in la. In bf16 mode (h) the
 * norms write bf16 outputs, the GEMMs read bf16 operands and c_fc writes a bf16 pre-activation. */
static int layer_forward(sk_model *m, int l, const float *x, const sk_layer_acts *la, int B, int T,
                         int training, uint64_t seed) {
    const sk_config *c = &m->cfg;
    const sk_params *p = &m->p;
    int C = m->C, F = m->F, N = B * T, rc = SK_OK;
    int Ffc = m->gated ? 2 * F : F;
    const int h = m->bf16;
    size_t BT = (size_t)N;
    float drop = training ? c->dropout : 0.0f;
    const float *ln1w = p->ln1w + (size_t)l * C, *ln1b = p->ln1b ? p->ln1b + (size_t)l * C : NULL;
    if (h) {
        TIMED(norm, norm_forward16(m, la->ln1_16, la->ln1_mean, la->ln1_rstd, x, ln1w, ln1b, N));
        TIMED(matmul, rc = qkv_forward16(m, l, la->qkv, la->ln1_16, N));
        if (rc) return rc;
    } else {
        TIMED(norm, norm_forward(m, la->ln1, la->ln1_mean, la->ln1_rstd, x, ln1w, ln1b, N));
        TIMED(matmul, qkv_forward(m, l, la->qkv, la->ln1, N));
        TIMED(matmul, adapters_forward(m, l, SK_SITE_QKV, la->qkv, m->QKV, la->ln1, N, training, seed));
    }
    if (m->rope) TIMED(elementwise, sk_rope(la->qkv, m->rope, B, T, m->QKV, 0, m->H + m->Hkv, m->hs, 0, 0));
    for (int part = 0; part < m->plan->n_runs[l]; part++) {
        sk_attn d;
        attn_desc(m, &d, l, part, B, T, drop, seed, training, la);
        TIMED(attention, rc = sk_attn_forward(&d));
        if (rc) return rc;
    }
    const float *projw = p->attprojw + (size_t)l * C * C, *projb = p->attprojb ? p->attprojb + (size_t)l * C : NULL;
    if (h) {
        TIMED(elementwise, sk_round_bf16(m->a.x16, la->atty, BT * C));
        TIMED(matmul, rc = linear16_forward(m, la->res2, NULL, m->a.x16, projw, projb, N, C, C));
        if (rc) return rc;
    } else {
        TIMED(matmul, sk_linear_forward(la->res2, la->atty, projw, projb, N, C, C));
        TIMED(matmul, adapters_forward(m, l, SK_SITE_ATTPROJ, la->res2, C, la->atty, N, training, seed));
    }
    sk_dropout(la->res2, BT * C, drop, seed, sk_drop_stream(l, SK_DROP_ATTN_OUT));
    TIMED(elementwise, sk_add_inplace(la->res2, x, BT * C));
    const float *ln2w = p->ln2w + (size_t)l * C, *ln2b = p->ln2b ? p->ln2b + (size_t)l * C : NULL;
    const float *fcw = p->fcw + (size_t)l * Ffc * C, *fcb = p->fcb ? p->fcb + (size_t)l * F : NULL;
    const float *fcprojw = p->fcprojw + (size_t)l * C * F, *fcprojb = p->fcprojb ? p->fcprojb + (size_t)l * C : NULL;
    if (h) {
        TIMED(norm, norm_forward16(m, la->ln2_16, la->ln2_mean, la->ln2_rstd, la->res2, ln2w, ln2b, N));
        TIMED(matmul, rc = linear16_forward(m, NULL, la->fch16, la->ln2_16, fcw, fcb, N, C, Ffc));
        if (rc) return rc;
        TIMED(elementwise, mlp_act_forward16(m, la->act16, la->fch16, N));
        TIMED(matmul, rc = linear16_forward(m, la->res3, NULL, la->act16, fcprojw, fcprojb, N, F, C));
        if (rc) return rc;
    } else {
        TIMED(norm, norm_forward(m, la->ln2, la->ln2_mean, la->ln2_rstd, la->res2, ln2w, ln2b, N));
        TIMED(matmul, sk_linear_forward(la->fch, la->ln2, fcw, fcb, N, C, Ffc));
        TIMED(matmul, adapters_forward(m, l, SK_SITE_FC, la->fch, Ffc, la->ln2, N, training, seed));
        TIMED(elementwise, sk_mlp_act_forward(m, la->fch_act, la->fch, N));
        TIMED(matmul, sk_linear_forward(la->res3, la->fch_act, fcprojw, fcprojb, N, F, C));
        TIMED(matmul, adapters_forward(m, l, SK_SITE_FCPROJ, la->res3, C, la->fch_act, N, training, seed));
    }
    sk_dropout(la->res3, BT * C, drop, seed, sk_drop_stream(l, SK_DROP_MLP_OUT));
    TIMED(elementwise, sk_add_inplace(la->res3, la->res2, BT * C));
    return SK_OK;
}

/* Runs the blocks and the final norm; the classifier is done by the callers. */
static int forward_blocks(sk_model *m, const int32_t *inputs, int B, int T, int training, uint64_t seed) {
    const sk_config *c = &m->cfg;
    const sk_params *p = &m->p;
    sk_acts *a = &m->a;
    int L = m->L, C = m->C, N = B * T;
    size_t BT = (size_t)N;
    float drop = training ? c->dropout : 0.0f;

    if (m->bf16 && m->ad) return sk_error(SK_EINVAL, "LoRA branches run in fp32: not with bf16 mixed precision");
    if (m->ad && (size_t)N > m->ad->max_tokens)
        return sk_error(SK_EINVAL, "the LoRA workspaces hold %zu tokens, the batch has %d", m->ad->max_tokens, N);
    if (m->bf16) TIMED(elementwise, bf16_weights(m));
    TIMED(elementwise, sk_embed_forward(a->encoded, inputs, p->wte, p->wpe ? p->wpe : m->sinus, B, T, C));
    sk_dropout(a->encoded, BT * C, drop, seed, sk_drop_stream(L, 0));
    for (int l = 0; l < L; l++) {
        sk_layer_acts la;
        layer_acts(m, l, &la);
        int rc = layer_forward(m, l, l == 0 ? a->encoded : a->res3 + (size_t)(l - 1) * BT * C, &la, B, T, training, seed);
        if (rc) return rc;
    }
    const float *xf = a->res3 + (size_t)(L - 1) * BT * C;
    if (m->bf16) TIMED(norm, norm_forward16(m, a->lnf16, a->lnf_mean, a->lnf_rstd, xf, p->lnfw, p->lnfb, N));
    else TIMED(norm, norm_forward(m, a->lnf, a->lnf_mean, a->lnf_rstd, xf, p->lnfw, p->lnfb, N));
    return SK_OK;
}

/* Classifier over row chunks: logits = lnf @ lm_head^T (wte when tied), softmax cross-entropy
 * over the real vocabulary. With dlnf != NULL it also writes the gradient of (scale * mean
 * loss) into dlnf (N, C) and adds the lm_head gradient, so the (N, Vp) logits are never held
 * whole. */
static int classifier(sk_model *m, const int32_t *targets, int N, float *loss, float *logits_out,
                      float *dlnf, float scale) {
    int V = m->cfg.vocab_size, Vp = m->Vp, C = m->C, rc = SK_OK;
    sk_acts *a = &m->a;
    /* bf16: the logits come out of a bf16 GEMM in fp32, and their gradient is rounded to bf16
     * (dlogits16) for the two backward GEMMs */
    const int h = m->bf16;
    const uint16_t *lm16 = h ? w16(m, m->p.lmhead) : NULL;
    size_t n_valid = 0;
    if (targets) for (int i = 0; i < N; i++) n_valid += targets[i] >= 0;
    float row_scale = n_valid ? scale / (float)n_valid : 0.0f;
    for (int r0 = 0; r0 < N && !rc; r0 += m->chunk) {
        int R = N - r0 < m->chunk ? N - r0 : m->chunk;
        float *lg = a->logits;
        if (h) TIMED(classifier, rc = sk_gemm_bf16(0, 1, R, Vp, C, a->lnf16 + (size_t)r0 * C, C, lm16, C, NULL, 0, lg, NULL, Vp));
        else TIMED(classifier, sk_gemm(0, 1, R, Vp, C, 1.0f, a->lnf + (size_t)r0 * C, C, m->p.lmhead, C, 0.0f, lg, Vp));
        if (rc) break;
        double t0 = sk_now();
        if (logits_out)
            for (int r = 0; r < R; r++) memcpy(logits_out + (size_t)(r0 + r) * V, lg + (size_t)r * Vp, sizeof(float) * V);
        uint16_t *d16 = h && dlnf ? a->dlogits16 : NULL;
        if (targets) {
            #pragma omp parallel for schedule(static)
            for (int r = 0; r < R; r++) {
                float *z = lg + (size_t)r * Vp;
                int tgt = targets[r0 + r];
                float mx = -INFINITY;
                for (int v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
                float sum = 0.0f;
                for (int v = 0; v < V; v++) sum += sk_fexp(z[v] - mx);
                float lse = mx + logf(sum);
                a->losses[r0 + r] = tgt >= 0 ? lse - z[tgt] : 0.0f;
                if (dlnf) {
                    float s = tgt >= 0 ? row_scale : 0.0f;
                    for (int v = 0; v < V; v++) z[v] = s * sk_fexp(z[v] - lse);
                    if (tgt >= 0) z[tgt] -= s;
                    for (int v = V; v < Vp; v++) z[v] = 0.0f;
                    if (d16) {
                        uint16_t *o = d16 + (size_t)r * Vp;
                        #pragma omp simd
                        for (int v = 0; v < Vp; v++) o[v] = sk_rne_bf16(z[v]);
                    }
                }
            }
        }
        m->times.classifier += sk_now() - t0;
        if (dlnf && h) {
            TIMED(classifier, rc = sk_gemm_bf16(0, 0, R, C, Vp, d16, Vp, lm16, C, NULL, 0, dlnf + (size_t)r0 * C, NULL, C));
            if (!rc && m->g.lmhead)
                TIMED(classifier, rc = sk_gemm_bf16(1, 0, Vp, C, R, d16, Vp, a->lnf16 + (size_t)r0 * C, C, NULL, 1, m->g.lmhead, NULL, C));
        } else if (dlnf) {
            TIMED(classifier, sk_gemm(0, 0, R, C, Vp, 1.0f, lg, Vp, m->p.lmhead, C, 0.0f, dlnf + (size_t)r0 * C, C));
            if (m->g.lmhead) TIMED(classifier, sk_gemm(1, 0, Vp, C, R, 1.0f, lg, Vp, a->lnf + (size_t)r0 * C, C, 1.0f, m->g.lmhead, C));
        }
    }
    if (rc) return rc;
    if (loss) {
        double s = 0.0;
        if (targets) for (int i = 0; i < N; i++) s += a->losses[i];
        *loss = targets && n_valid ? (float)(s / (double)n_valid) : NAN;
    }
    return SK_OK;
}

const float *sk_model_losses(const sk_model *m) { return m->losses_valid ? m->a.losses : NULL; }
const float *sk_model_hidden(const sk_model *m) { return m->hidden_valid && !m->bf16 ? m->a.lnf : NULL; }

int sk_model_forward(sk_model *m, const int32_t *inputs, const int32_t *targets,
                     int B, int T, float *loss, float *logits) {
    m->losses_valid = m->hidden_valid = 0;
    int rc = sk_model_reserve(m, B, T, m->acts_have_grads);
    if (rc) return rc;
    if ((rc = check_tokens(m, inputs, targets, (size_t)B * T))) return rc;
    if ((rc = forward_blocks(m, inputs, B, T, 0, 0))) return rc;
    m->hidden_valid = 1;
    if ((rc = classifier(m, targets, B * T, loss, logits, NULL, 0.0f))) return rc;
    m->losses_valid = targets != NULL;
    return SK_OK;
}

/* -------------------------------------------------------------- backward */

static float *dqkv_of(sk_model *m, int l, size_t BT) {
    int k = m->plan->lend_index[l];
    return k >= 0 ? m->a.dqkv_lend + (size_t)k * BT * m->QKV : m->a.dqkv_own;
}

/* The gradient that reaches a residual branch's output (site of layer l): with dropout a
 * masked copy of dres in dbtc; without, dres itself, read in place (no copy): the branch's
 * backward only reads it, and dres changes only after, when the norm's backward adds to it. */
static const float *branch_grad(sk_model *m, float drop, uint64_t seed, int l, int site, size_t BT) {
    sk_acts *a = &m->a;
    if (!(drop > 0.0f)) return a->dres;
    memcpy(a->dbtc, a->dres, BT * m->C * sizeof(float));
    sk_dropout(a->dbtc, BT * m->C, drop, seed, sk_drop_stream(l, site));
    return a->dbtc;
}

static int backward_blocks(sk_model *m, const int32_t *inputs, int B, int T, uint64_t seed) {
    const sk_config *c = &m->cfg;
    const sk_params *p = &m->p;
    sk_params *g = &m->g;
    sk_acts *a = &m->a;
    int L = m->L, C = m->C, F = m->F, N = B * T;
    int Ffc = m->gated ? 2 * F : F;
    size_t BT = (size_t)N;
    float drop = c->dropout;
    const int h = m->bf16;
    /* a weight's gradient, or NULL for a frozen model (no gradient buffer) */
#define GV(ptr, off) ((ptr) ? (ptr) + (off) : NULL)

    /* a->dbtc holds dlnf from the classifier */
    memset(a->dres, 0, BT * C * sizeof(float));
    TIMED(norm, norm_backward(m, a->dres, g->lnfw, g->lnfb, a->dbtc, a->res3 + (size_t)(L - 1) * BT * C,
                              p->lnfw, a->lnf_mean, a->lnf_rstd, N));
    if (a->dqkv_lend) memset(a->dqkv_lend, 0, (size_t)sk_model_n_lenders(m) * BT * m->QKV * sizeof(float));
    for (int l = L - 1; l >= 0; l--) {
        const float *x = l == 0 ? a->encoded : a->res3 + (size_t)(l - 1) * BT * C;
        sk_layer_acts la;
        layer_acts(m, l, &la);
        if (m->recompute_on) {
            /* refill the workspace with this layer's forward (bit-identical: same inputs, same
             * dropout streams); its output lands in res3[l], which holds the same values */
            int rc = layer_forward(m, l, x, &la, B, T, 1, seed);
            if (rc) return rc;
        }
        const float *ln1 = la.ln1, *atty = la.atty, *res2 = la.res2, *ln2 = la.ln2, *fch = la.fch, *fch_act = la.fch_act;
        const float *fcprojw = p->fcprojw + (size_t)l * C * F, *fcw = p->fcw + (size_t)l * Ffc * C;
        const float *attprojw = p->attprojw + (size_t)l * C * C;
        float *g_fcprojb = g->fcprojb ? g->fcprojb + (size_t)l * C : NULL, *g_fcb = g->fcb ? g->fcb + (size_t)l * F : NULL;
        float *g_attprojb = g->attprojb ? g->attprojb + (size_t)l * C : NULL;
        int rc = SK_OK;
        /* MLP: res3 = res2 + drop(fcproj(act(fc(norm2(res2))))) */
        const float *dy = branch_grad(m, drop, seed, l, SK_DROP_MLP_OUT, BT);
        if (h) {
            /* dY rounded once for its two GEMMs; the bias gradient sums the fp32 dY */
            TIMED(elementwise, sk_round_bf16(a->dy16, dy, BT * C));
            TIMED(matmul, rc = linear16_backward(m, a->dfch_act, GV(g->fcprojw, (size_t)l * C * F), a->dy16, la.act16, fcprojw, N, F, C));
            if (rc) return rc;
            if (g_fcprojb) TIMED(matmul, sk_colsum_add(g_fcprojb, dy, N, C));
            TIMED(elementwise, mlp_act_backward16(m, a->dfch16, la.fch16, a->dfch_act, N));
            TIMED(matmul, rc = linear16_backward(m, a->dbtc2, GV(g->fcw, (size_t)l * Ffc * C), a->dfch16, la.ln2_16, fcw, N, C, Ffc));
            if (rc) return rc;
            if (g_fcb) TIMED(matmul, sk_colsum_add_bf16(g_fcb, a->dfch16, N, Ffc));
        } else {
            TIMED(matmul, sk_linear_backward(a->dfch_act, GV(g->fcprojw, (size_t)l * C * F), g_fcprojb, dy, fch_act, fcprojw, N, F, C));
            TIMED(matmul, adapters_backward(m, l, SK_SITE_FCPROJ, a->dfch_act, dy, C, fch_act, N, seed));
            TIMED(elementwise, sk_mlp_act_backward(m, a->dfch, fch, a->dfch_act, N));
            TIMED(matmul, sk_linear_backward(a->dbtc2, GV(g->fcw, (size_t)l * Ffc * C), g_fcb, a->dfch, ln2, fcw, N, C, Ffc));
            TIMED(matmul, adapters_backward(m, l, SK_SITE_FC, a->dbtc2, a->dfch, Ffc, ln2, N, seed));
        }
        TIMED(norm, norm_backward(m, a->dres, GV(g->ln2w, (size_t)l * C), g->ln2b ? g->ln2b + (size_t)l * C : NULL,
                                  a->dbtc2, res2, p->ln2w + (size_t)l * C, la.ln2_mean, la.ln2_rstd, N));
        /* attention: res2 = x + drop(attproj(attn(qkv(norm1(x))))) */
        dy = branch_grad(m, drop, seed, l, SK_DROP_ATTN_OUT, BT);
        if (h) {
            TIMED(elementwise, sk_round_bf16(a->dy16, dy, BT * C));
            TIMED(elementwise, sk_round_bf16(a->x16, atty, BT * C));
            TIMED(matmul, rc = linear16_backward(m, a->dbtc2, GV(g->attprojw, (size_t)l * C * C), a->dy16, a->x16, attprojw, N, C, C));
            if (rc) return rc;
            if (g_attprojb) TIMED(matmul, sk_colsum_add(g_attprojb, dy, N, C));
        } else {
            TIMED(matmul, sk_linear_backward(a->dbtc2, GV(g->attprojw, (size_t)l * C * C), g_attprojb, dy, atty, attprojw, N, C, C));
            TIMED(matmul, adapters_backward(m, l, SK_SITE_ATTPROJ, a->dbtc2, dy, C, atty, N, seed));
        }
        float *dqkv = dqkv_of(m, l, BT);
        if (m->plan->lend_index[l] < 0) memset(dqkv, 0, BT * m->QKV * sizeof(float));
        for (int part = 0; part < m->plan->n_runs[l]; part++) {
            sk_attn d;
            attn_desc(m, &d, l, part, B, T, drop, seed, 1, &la);
            int src = sk_route_run(m->plan, l, part)->src;
            float *dsrc = dqkv_of(m, src, BT);
            const float *qkv_src = src == l ? la.qkv : qkv_of(m, src);
            /* dq/dk/dv share the strides of q/k/v; translate the pointers into the gradient buffers */
            float *dq = dqkv + (d.q - la.qkv);
            float *dk = dsrc + (d.k - qkv_src);
            float *dv = dsrc + (d.v - qkv_src);
            const float *dout = a->dbtc2 + (d.out - la.atty);
            TIMED(attention, rc = sk_attn_backward(&d, dout, dq, dk, dv));
            if (rc) return rc;
        }
        if (m->rope) TIMED(elementwise, sk_rope(dqkv, m->rope, B, T, m->QKV, 0, m->H + m->Hkv, m->hs, 0, 1));
        if (h) {
            TIMED(elementwise, sk_round_bf16(a->dy16, dqkv, BT * m->QKV));
            TIMED(matmul, rc = qkv_backward16(m, l, a->dbtc, dqkv, a->dy16, la.ln1_16, N));
            if (rc) return rc;
        } else {
            TIMED(matmul, qkv_backward(m, l, a->dbtc, dqkv, ln1, N));
            TIMED(matmul, adapters_backward(m, l, SK_SITE_QKV, a->dbtc, dqkv, m->QKV, ln1, N, seed));
        }
        TIMED(norm, norm_backward(m, a->dres, GV(g->ln1w, (size_t)l * C), g->ln1b ? g->ln1b + (size_t)l * C : NULL,
                                  a->dbtc, x, p->ln1w + (size_t)l * C, la.ln1_mean, la.ln1_rstd, N));
    }
    if (m->frozen) return SK_OK;      /* the embedding's gradient is its only use */
    sk_dropout(a->dres, BT * C, drop, seed, sk_drop_stream(L, 0));
    TIMED(elementwise, sk_embed_backward(g->wte, g->wpe, a->dres, inputs, B, T, C));
    return SK_OK;
#undef GV
}

int sk_model_forward_backward(sk_model *m, const int32_t *inputs, const int32_t *targets,
                              int B, int T, float grad_scale, uint64_t dropout_seed, float *loss) {
    if (!targets) return sk_error(SK_EINVAL, "forward_backward needs targets");
    if (m->frozen && m->bf16) return sk_error(SK_EINVAL, "a frozen model trains in fp32: not with bf16 mixed precision");
    m->losses_valid = m->hidden_valid = 0;
    int rc = sk_model_reserve(m, B, T, 1);
    if (rc) return rc;
    if ((rc = check_tokens(m, inputs, targets, (size_t)B * T))) return rc;
    if ((rc = forward_blocks(m, inputs, B, T, 1, dropout_seed))) return rc;
    if ((rc = classifier(m, targets, B * T, loss, NULL, m->a.dbtc, grad_scale))) return rc;
    m->losses_valid = 1;
    return backward_blocks(m, inputs, B, T, dropout_seed);
}
