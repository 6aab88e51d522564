/* Model weights as safetensors: nanoGPT / HF tensor names, config in __metadata__.
 * Llama q/k projections: skiplm rotates adjacent pairs (x[2j], x[2j+1]) (SPEC §3), HF's
 * code rotates halves (x[j], x[j+d/2]); rows are permuted on export and back on import,
 * as HF's own Llama conversion does, so HF code gets the same results. */
#include "model.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- metadata */

typedef struct { const char *key; int is_float; size_t off; } meta_field;
#define MF(f, isf) { #f, isf, offsetof(sk_config, f) }
static const meta_field META[] = {
    MF(n_layer, 0), MF(n_head, 0), MF(n_kv_head, 0), MF(n_embd, 0), MF(block_size, 0),
    MF(vocab_size, 0), MF(padded_vocab_size, 0), MF(bias, 0), MF(n_skip_layer, 0),
    MF(n_skip_head, 0), MF(ffn_hidden, 0), MF(sinusoidal, 0), MF(relu, 0), MF(dropout, 1), MF(norm_eps, 1), MF(rope_theta, 1),
};
#undef MF

static int write_config_meta(sk_st_writer *w, const sk_config *c) {
    char buf[64];
    int rc = sk_st_add_meta(w, "format", "skiplm");
    if (!rc) rc = sk_st_add_meta(w, "family", c->family == SK_GPT2 ? "gpt2" : "llama");
    if (!rc) rc = sk_st_add_meta(w, "gelu", c->gelu == SK_GELU_TANH ? "tanh" : "erf");
    if (!rc && c->routing[0]) rc = sk_st_add_meta(w, "routing", c->routing);
    for (size_t i = 0; !rc && i < sizeof META / sizeof META[0]; i++) {
        const char *p = (const char *)c + META[i].off;
        if (META[i].is_float) snprintf(buf, sizeof buf, "%.9g", (double)*(const float *)p);
        else snprintf(buf, sizeof buf, "%d", *(const int *)p);
        rc = sk_st_add_meta(w, META[i].key, buf);
    }
    return rc;
}

static int config_from_st(sk_config *c, const sk_safetensors *st, const char *path) {
    sk_config_default(c);
    const char *fam = sk_st_meta(st, "family");
    if (!fam) {
        /* no skiplm metadata: guess the family from the names, the rest must come from overrides */
        fam = sk_st_find(st, "model.embed_tokens.weight") ? "llama" : "gpt2";
    }
    int rc = sk_config_set(c, "family", fam);
    const char *g = sk_st_meta(st, "gelu");
    if (!rc && g) rc = sk_config_set(c, "gelu", g);
    const char *rt = sk_st_meta(st, "routing");
    if (!rc && rt) rc = sk_config_set(c, "routing", rt);
    if (!strcmp(fam, "llama")) { c->bias = 0; c->norm_eps = 1e-6f; }
    for (size_t i = 0; !rc && i < sizeof META / sizeof META[0]; i++) {
        const char *v = sk_st_meta(st, META[i].key);
        if (v) rc = sk_config_set(c, META[i].key, v);
    }
    if (rc) return sk_error(rc, "%s: metadata: %s", path, sk_last_error());
    /* infer what the shapes tell, where the metadata said nothing */
    const sk_st_tensor *wte = sk_st_find(st, c->family == SK_GPT2 ? "transformer.wte.weight" : "model.embed_tokens.weight");
    if (wte && wte->ndim == 2) {
        if (!sk_st_meta(st, "vocab_size")) c->vocab_size = (int)wte->shape[0];
        if (!sk_st_meta(st, "n_embd")) c->n_embd = (int)wte->shape[1];
    }
    const sk_st_tensor *wpe = sk_st_find(st, "transformer.wpe.weight");
    if (wpe && wpe->ndim == 2 && !sk_st_meta(st, "block_size")) c->block_size = (int)wpe->shape[0];
    if (!sk_st_meta(st, "n_layer")) {
        int L = 0;
        char name[96];
        for (;;) {
            snprintf(name, sizeof name, c->family == SK_GPT2 ? "transformer.h.%d.ln_1.weight" : "model.layers.%d.input_layernorm.weight", L);
            if (!sk_st_find(st, name)) break;
            L++;
        }
        if (L) c->n_layer = L;
    }
    if (c->family == SK_GPT2 && !sk_st_meta(st, "bias")) c->bias = sk_st_find(st, "transformer.ln_f.bias") != NULL;
    return SK_OK;
}

int sk_config_from_file(sk_config *cfg, const char *path) {
    sk_safetensors st;
    int rc = sk_st_read(path, &st);
    if (rc) return rc;
    rc = config_from_st(cfg, &st, path);
    sk_st_free(&st);
    return rc;
}

/* --------------------------------------------------- q/k row permutation */

/* rows of n_heads heads of size d, each row of width C: pairs -> halves (to_hf) or back */
static void permute_rope_rows(float *dst, const float *src, int n_heads, int d, int C, int to_hf) {
    for (int h = 0; h < n_heads; h++)
        for (int j = 0; j < d / 2; j++)
            for (int e = 0; e < 2; e++) {
                size_t pair_row = (size_t)h * d + 2 * j + e, half_row = (size_t)h * d + j + e * (d / 2);
                size_t to = to_hf ? half_row : pair_row, from = to_hf ? pair_row : half_row;
                memcpy(dst + to * C, src + from * C, sizeof(float) * C);
            }
}

static int is_rope_proj(const sk_model *m, const char *name, int *n_heads) {
    if (m->cfg.family != SK_LLAMA) return 0;
    if (strstr(name, "self_attn.q_proj.weight")) { *n_heads = m->H; return 1; }
    if (strstr(name, "self_attn.k_proj.weight")) { *n_heads = m->Hkv; return 1; }
    return 0;
}

/* ------------------------------------------------------------ save / load */

int sk_model_save(const sk_model *m, const char *path) { return sk_model_save_with(m, path, NULL); }

int sk_model_save_with(const sk_model *m, const char *path, sk_st_writer *extra) {
    sk_st_writer *w = extra ? extra : sk_st_writer_new();
    if (!w) return sk_error(SK_ENOMEM, "out of memory");
    int rc = write_config_meta(w, &m->cfg);
    float **tmp = calloc(m->n_tensors, sizeof(float *));
    for (int i = 0; !rc && i < m->n_tensors; i++) {
        const sk_tensor *t = &m->tensors[i];
        const float *data = m->params + t->offset;
        int nh;
        if (is_rope_proj(m, t->name, &nh)) {
            tmp[i] = malloc(t->numel * sizeof(float));
            if (!tmp[i]) { rc = sk_error(SK_ENOMEM, "out of memory"); break; }
            permute_rope_rows(tmp[i], data, nh, m->hs, m->C, 1);
            data = tmp[i];
        }
        rc = sk_st_add(w, t->name, SK_F32, t->ndim, t->shape, data);
    }
    if (!rc) rc = sk_st_write(w, path);
    if (!extra) sk_st_writer_free(w);
    for (int i = 0; i < m->n_tensors; i++) free(tmp[i]);
    free(tmp);
    return rc;
}

int sk_model_load(sk_model **out, const char *path, const sk_config *override) {
    sk_safetensors st;
    *out = NULL;
    int rc = sk_st_read(path, &st);
    if (rc) return rc;
    rc = sk_model_load_st(out, &st, path, override);
    sk_st_free(&st);
    return rc;
}

int sk_model_load_st(sk_model **out, const sk_safetensors *stp, const char *path, const sk_config *override) {
    *out = NULL;
    const sk_safetensors st = *stp;
    int rc;
    sk_config cfg;
    if ((rc = config_from_st(&cfg, &st, path))) goto done;
    if (override) {
        /* non-zero fields of the override win */
        const sk_config *o = override;
        for (size_t i = 0; i < sizeof META / sizeof META[0]; i++) {
            const char *src = (const char *)o + META[i].off;
            char *dst = (char *)&cfg + META[i].off;
            if (META[i].is_float ? *(const float *)src != 0.0f : *(const int *)src != 0)
                memcpy(dst, src, META[i].is_float ? sizeof(float) : sizeof(int));
        }
    }
    if (!sk_st_meta(&st, "n_head") && !(override && override->n_head)) {
        rc = sk_error(SK_EFORMAT, "%s: n_head is not in the file's metadata and cannot be inferred from shapes; give it explicitly", path);
        goto done;
    }
    sk_model *m;
    if ((rc = sk_model_new(&m, &cfg, 0))) { rc = sk_error(rc, "%s: %s", path, sk_last_error()); goto done; }
    memset(m->params, 0, m->n_params * sizeof(float));
    for (int i = 0; i < m->n_tensors; i++) {
        const sk_tensor *t = &m->tensors[i];
        const sk_st_tensor *ft = sk_st_find(&st, t->name);
        if (!ft) {
            rc = sk_error(SK_EFORMAT, "%s: tensor '%s' is missing (config: %d layers%s)", path, t->name,
                          m->L, m->cfg.bias ? ", with biases" : ", no biases");
            break;
        }
        if (ft->ndim != t->ndim || ft->shape[0] != t->shape[0] || (t->ndim > 1 && ft->shape[1] != t->shape[1])) {
            rc = sk_error(SK_EFORMAT, "%s: tensor '%s' has shape [%lld%s%lld] but the config needs [%lld%s%lld]",
                          path, t->name, (long long)ft->shape[0], ft->ndim > 1 ? ", " : "", ft->ndim > 1 ? (long long)ft->shape[1] : 0LL,
                          (long long)t->shape[0], t->ndim > 1 ? ", " : "", t->ndim > 1 ? (long long)t->shape[1] : 0LL);
            if (ft->ndim == 1 && t->ndim == 1)
                rc = sk_error(SK_EFORMAT, "%s: tensor '%s' has %lld elements but the config needs %lld",
                              path, t->name, (long long)ft->shape[0], (long long)t->shape[0]);
            break;
        }
        float *dst = m->params + t->offset;
        int nh;
        if ((rc = sk_st_get_f32(&st, t->name, dst, t->numel))) break;
        if (is_rope_proj(m, t->name, &nh)) {
            float *tmp = malloc(t->numel * sizeof(float));
            if (!tmp) { rc = sk_error(SK_ENOMEM, "out of memory"); break; }
            permute_rope_rows(tmp, dst, nh, m->hs, m->C, 0);
            memcpy(dst, tmp, t->numel * sizeof(float));
            free(tmp);
        }
        for (size_t k = 0; k < t->numel; k++)
            if (!isfinite(dst[k])) {
                rc = sk_error(SK_ENUM, "%s: tensor '%s' holds a non-finite value at element %zu", path, t->name, k);
                break;
            }
        if (rc) break;
    }
    /* an untied lm_head must equal the embedding: skiplm ties them */
    const char *head = "lm_head.weight";
    if (!rc && sk_st_find(&st, head)) {
        size_t n = (size_t)m->cfg.vocab_size * m->C;
        float *tmp = malloc(n * sizeof(float));
        if (!tmp) rc = sk_error(SK_ENOMEM, "out of memory");
        else if (!(rc = sk_st_get_f32(&st, head, tmp, n)) && memcmp(tmp, m->params, n * sizeof(float)))
            rc = sk_error(SK_EFORMAT, "%s: lm_head.weight differs from the token embedding; skiplm ties them", path);
        free(tmp);
    }
    if (rc) sk_model_free(m);
    else *out = m;
done:
    return rc;
}
