/* Model weights as safetensors: nanoGPT / HF tensor names, config in __metadata__.
 * Llama q/k projections: skiplm rotates adjacent pairs (x[2j], x[2j+1]) (SPEC §3), HF's
 * code rotates halves (x[j], x[j+d/2]); rows are permuted on export and back on import,
 * as HF's own Llama conversion does, so HF code gets the same results.
 *
 * Files as Hugging Face's transformers writes them load too (a folder with model.safetensors
 * and config.json, as on the Hub): the config comes from config.json where the file has no
 * skiplm metadata, GPT-2's blocks may lack the "transformer." prefix (GPT2Model's names,
 * those of the Hub's "gpt2"), and GPT-2's four Linear weights may be stored (in, out), as
 * HF's Conv1D holds them (y = x W + b); they are transposed on load. */
#include "base/fileio.h"
#include "base/json.h"
#include "core/model.h"
#include <math.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- metadata */

typedef struct { const char *key; int is_float; size_t off; } meta_field;
#define MF(f, isf) { #f, isf, offsetof(sk_config, f) }
static const meta_field META[] = {
    MF(n_layer, 0), MF(n_head, 0), MF(n_kv_head, 0), MF(n_embd, 0), MF(block_size, 0),
    MF(vocab_size, 0), MF(padded_vocab_size, 0), MF(bias, 0), MF(n_skip_layer, 0),
    MF(n_skip_head, 0), MF(ffn_hidden, 0), MF(sinusoidal, 0), MF(relu, 0), MF(untied_head, 0), MF(qkv_bias, 0), MF(dropout, 1), MF(norm_eps, 1), MF(rope_theta, 1),
    MF(rope_factor, 1), MF(rope_low_freq_factor, 1), MF(rope_high_freq_factor, 1), MF(rope_original_ctx, 0),
};
#undef MF

static int write_config_meta(sk_st_writer *w, const sk_config *c) {
    char buf[64];
    int rc = sk_st_add_meta(w, "format", "skiplm");
    if (!rc) rc = sk_st_add_meta(w, "family", c->family == SK_GPT2 ? "gpt2" : "llama");
    if (!rc) rc = sk_st_add_meta(w, "gelu", c->gelu == SK_GELU_TANH ? "tanh" : "erf");
    if (!rc && c->routing[0]) rc = sk_st_add_meta(w, "routing", c->routing);
    if (!rc && c->rope_scaling != SK_ROPE_NONE)
        rc = sk_st_add_meta(w, "rope_scaling", c->rope_scaling == SK_ROPE_LINEAR ? "linear" : "llama3");
    for (size_t i = 0; !rc && i < sizeof META / sizeof META[0]; i++) {
        const char *p = (const char *)c + META[i].off;
        if (META[i].is_float) snprintf(buf, sizeof buf, "%.9g", (double)*(const float *)p);
        else snprintf(buf, sizeof buf, "%d", *(const int *)p);
        rc = sk_st_add_meta(w, META[i].key, buf);
    }
    return rc;
}

/* ------------------------------------------------- Hugging Face layouts */

/* The name the file stores one of the model's tensors under: the model's own, or for GPT-2
 * the same without "transformer." (GPT2Model, the Hub's "gpt2" files); NULL if neither. */
static const char *file_name(const sk_safetensors *st, const char *name) {
    if (sk_st_find(st, name)) return name;
    if (!strncmp(name, "transformer.", 12) && sk_st_find(st, name + 12)) return name + 12;
    return NULL;
}
static const sk_st_tensor *find_named(const sk_safetensors *st, const char *name) {
    const char *n = file_name(st, name);
    return n ? sk_st_find(st, n) : NULL;
}

/* GPT-2's Linear weights stored (in, out), as HF's Conv1D holds them: layer 0's c_attn
 * says so by its shape, (C, 3C) rather than (3C, C); the file is read one way throughout. */
static int gpt2_conv1d(const sk_safetensors *st) {
    const sk_st_tensor *t = find_named(st, "transformer.h.0.attn.c_attn.weight");
    return t && t->ndim == 2 && t->shape[1] > t->shape[0];
}
static int is_gpt2_linear(const sk_model *m, const char *name) {
    if (m->cfg.family != SK_GPT2) return 0;
    static const char *const sfx[] = {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"};
    size_t n = strlen(name);
    for (int i = 0; i < 4; i++) {
        size_t k = strlen(sfx[i]);
        if (n > k && !strcmp(name + n - k, sfx[i])) return 1;
    }
    return 0;
}

/* dst (C, R) = src (R, C)^T, in 32 x 32 tiles (a row-by-row loop strides through memory on
 * every write: 3x slower for GPT-2's matrices) */
static void transpose(float *dst, const float *src, size_t R, size_t C) {
    for (size_t r0 = 0; r0 < R; r0 += 32)
        for (size_t c0 = 0; c0 < C; c0 += 32) {
            const size_t r1 = r0 + 32 < R ? r0 + 32 : R, c1 = c0 + 32 < C ? c0 + 32 : C;
            for (size_t r = r0; r < r1; r++)
                for (size_t c = c0; c < c1; c++) dst[c * R + r] = src[r * C + c];
        }
}

/* A path as given: a weights file, or a folder holding model.safetensors (HF's layout). */
char *sk_weights_file(const char *path) {
    struct stat sb;
    int dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    size_t n = strlen(path) + 20;
    char *f = malloc(n);
    if (!f) { sk_error(SK_ENOMEM, "out of memory"); return NULL; }
    snprintf(f, n, dir ? "%s/model.safetensors" : "%s", path);
    return f;
}

/* One config.json value: JSON number (integral for integer fields), string or bool. */
static int hf_set(sk_config *c, const sk_json *v, const char *key, const char *field, const char *cfg_path) {
    char buf[64];
    if (v->type == SK_JSON_NUM) {
        int is_int = 1;
        for (size_t i = 0; i < sizeof META / sizeof META[0]; i++)
            if (!strcmp(field, META[i].key)) is_int = !META[i].is_float;
        if (is_int && (v->num != floor(v->num) || fabs(v->num) > 1e9))
            return sk_error(SK_EFORMAT, "%s: \"%s\" must be a whole number (got %.17g)", cfg_path, key, v->num);
        snprintf(buf, sizeof buf, is_int ? "%.0f" : "%.9g", v->num);
    } else if (v->type == SK_JSON_BOOL) snprintf(buf, sizeof buf, "%d", v->boolean);
    else return sk_error(SK_EFORMAT, "%s: \"%s\" must be a number", cfg_path, key);
    if (sk_config_set(c, field, buf)) return sk_error(SK_EFORMAT, "%s: \"%s\": %s", cfg_path, key, sk_last_error());
    return SK_OK;
}

/* config.json's rope_scaling: {"rope_type" (or the older "type"): "linear" | "llama3" |
 * "default", "factor", and for llama3 "low_freq_factor", "high_freq_factor",
 * "original_max_position_embeddings"}. The other types (dynamic, yarn, longrope, ...) are
 * refused by name. */
static int hf_rope_scaling(sk_config *c, const sk_json *rs, int llama, const char *cp, const char *key) {
    if (!llama) return sk_error(SK_EFORMAT, "%s: \"%s\" is set: GPT-2 has no RoPE", cp, key);
    if (rs->type != SK_JSON_OBJ) return sk_error(SK_EFORMAT, "%s: \"%s\" must be an object or null", cp, key);
    const sk_json *ty = sk_json_get(rs, "rope_type");
    if (!ty) ty = sk_json_get(rs, "type");
    if (!ty || ty->type != SK_JSON_STR)
        return sk_error(SK_EFORMAT, "%s: %s: \"rope_type\" must be a string", cp, key);
    if (!strcmp(ty->str, "default")) return SK_OK;
    if (strcmp(ty->str, "linear") && strcmp(ty->str, "llama3"))
        return sk_error(SK_EFORMAT, "%s: %s type \"%s\": skiplm has \"linear\" and \"llama3\"", cp, key, ty->str);
    int rc = sk_config_set(c, "rope_scaling", ty->str);
    static const char *const keys[][2] = {
        {"factor", "rope_factor"}, {"low_freq_factor", "rope_low_freq_factor"},
        {"high_freq_factor", "rope_high_freq_factor"}, {"original_max_position_embeddings", "rope_original_ctx"},
    };
    const int nk = !strcmp(ty->str, "linear") ? 1 : 4;
    for (int i = 0; !rc && i < nk; i++) {
        const sk_json *v = sk_json_get(rs, keys[i][0]);
        char name[80];
        snprintf(name, sizeof name, "%s.%s", key, keys[i][0]);
        if (!v || v->type == SK_JSON_NULL) rc = sk_error(SK_EFORMAT, "%s: \"%s\" is missing", cp, name);
        else rc = hf_set(c, v, name, keys[i][1], cp);
    }
    return rc;
}

/* The JSON object in the file `name` beside a weights file, into *j and its path into cp
 * (cap bytes). 0 with j->type SK_JSON_NULL when there is no such file; an error naming the
 * file when it cannot be read or is not a JSON object. The caller frees j. */
static int read_json_beside(const char *weights_path, const char *name, sk_json *j, char *cp, size_t cap) {
    memset(j, 0, sizeof *j);
    const char *slash = strrchr(weights_path, '/');
    const size_t dl = slash ? (size_t)(slash - weights_path) + 1 : 0;
    if (dl + strlen(name) >= cap) return sk_error(SK_EINVAL, "%s: path too long", weights_path);
    snprintf(cp, cap, "%.*s%s", (int)dl, weights_path, name);
    struct stat sb;
    if (stat(cp, &sb) != 0) return SK_OK;
    uint8_t *text; size_t len;
    char err[160];
    int rc = sk_read_file(cp, &text, &len);
    if (rc) return rc;
    if (sk_json_parse((const char *)text, len, j, err, sizeof err)) rc = sk_error(SK_EFORMAT, "%s: %s", cp, err);
    else if (j->type != SK_JSON_OBJ) rc = sk_error(SK_EFORMAT, "%s: not a JSON object", cp);
    free(text);
    return rc;
}

/* The config of a file without skiplm metadata from the config.json beside it (HF's keys
 * for model_type "gpt2" and "llama"), where there is one. Settings skiplm's models do not
 * have are refused by name rather than silently giving other numbers. */
static int apply_hf_config(sk_config *c, const char *weights_path, int *found, int *tie) {
    *found = 0; *tie = -1;
    char cp[4096];
    sk_json j;
    int rc = read_json_beside(weights_path, "config.json", &j, cp, sizeof cp);
    if (!rc && j.type == SK_JSON_NULL) return SK_OK;          /* no config.json */
    /* without a model_type it is some other tool's config.json, not HF's: not read */
    const sk_json *mt = rc ? NULL : sk_json_get(&j, "model_type");
    if (!rc && !mt) goto done;
    if (!rc && (mt->type != SK_JSON_STR || (strcmp(mt->str, "gpt2") && strcmp(mt->str, "llama") && strcmp(mt->str, "qwen2") &&
                                            strcmp(mt->str, "mistral"))))
        rc = sk_error(SK_EFORMAT, "%s: model_type %s%s%s: skiplm reads \"gpt2\", \"llama\", \"mistral\" and \"qwen2\"", cp,
                      mt->type == SK_JSON_STR ? "\"" : "", mt->type == SK_JSON_STR ? mt->str : "not a string",
                      mt->type == SK_JSON_STR ? "\"" : "");
    if (rc) goto done;
    /* Qwen2 is Llama with biases on the q, k, v projections (and no attention_bias key);
     * Mistral is Llama with an optional sliding window */
    const int qwen2 = !strcmp(mt->str, "qwen2"), mistral = !strcmp(mt->str, "mistral");
    const int llama = qwen2 || mistral || !strcmp(mt->str, "llama");
    /* HF key, skiplm field, required (what the shapes alone do not pin down, or would be a guess) */
    static const char *const gpt2_keys[][3] = {
        {"n_layer", "n_layer", "1"}, {"n_head", "n_head", "1"}, {"n_embd", "n_embd", "1"},
        {"n_positions", "block_size", "1"}, {"vocab_size", "vocab_size", "1"},
        {"layer_norm_epsilon", "norm_eps", ""}, {"n_inner", "ffn_hidden", ""},
    };
    static const char *const llama_keys[][3] = {
        {"num_hidden_layers", "n_layer", "1"}, {"num_attention_heads", "n_head", "1"},
        {"num_key_value_heads", "n_kv_head", ""}, {"hidden_size", "n_embd", "1"},
        {"intermediate_size", "ffn_hidden", "1"}, {"max_position_embeddings", "block_size", "1"},
        {"vocab_size", "vocab_size", "1"}, {"rms_norm_eps", "norm_eps", ""}, {"rope_theta", "rope_theta", ""},
    };
    if ((rc = sk_config_set(c, "family", llama ? "llama" : "gpt2"))) goto done;
    /* HF's defaults where config.json leaves a key out */
    if (llama) { c->bias = 0; c->norm_eps = 1e-6f; c->rope_theta = 10000.0f; c->qkv_bias = qwen2; }
    else { c->bias = 1; c->gelu = SK_GELU_TANH; }     /* GPT-2's gelu_new unless it says otherwise */
    const char *const (*keys)[3] = llama ? llama_keys : gpt2_keys;
    const size_t nk = llama ? sizeof llama_keys / sizeof llama_keys[0] : sizeof gpt2_keys / sizeof gpt2_keys[0];
    for (size_t i = 0; !rc && i < nk; i++) {
        const sk_json *v = sk_json_get(&j, keys[i][0]);
        if (v && v->type != SK_JSON_NULL) rc = hf_set(c, v, keys[i][0], keys[i][1], cp);
        else if (keys[i][2][0]) rc = sk_error(SK_EFORMAT, "%s: \"%s\" is missing", cp, keys[i][0]);
    }
    if (rc) goto done;
    /* the activation */
    const sk_json *act = sk_json_get(&j, llama ? "hidden_act" : "activation_function");
    if (act && act->type == SK_JSON_STR) {
        const char *a = act->str;
        if (llama && strcmp(a, "silu"))
            rc = sk_error(SK_EFORMAT, "%s: hidden_act \"%s\": skiplm's Llama MLP is SwiGLU (\"silu\")", cp, a);
        else if (!llama && (!strcmp(a, "gelu_new") || !strcmp(a, "gelu_pytorch_tanh"))) c->gelu = SK_GELU_TANH;
        else if (!llama && !strcmp(a, "gelu")) c->gelu = SK_GELU_ERF;
        else if (!llama && !strcmp(a, "relu")) c->relu = 1;
        else if (!llama)
            rc = sk_error(SK_EFORMAT, "%s: activation_function \"%s\": skiplm has gelu_new, gelu_pytorch_tanh, gelu and relu", cp, a);
        if (rc) goto done;
    }
    /* settings that would change the numbers and that skiplm's models do not have */
    static const char *const off[] = {"scale_attn_by_inverse_layer_idx", "attention_bias", "mlp_bias"};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
        const sk_json *v = sk_json_get(&j, off[i]);
        if (v && !(v->type == SK_JSON_NULL || (v->type == SK_JSON_BOOL && !v->boolean))) {
            rc = sk_error(SK_EFORMAT, "%s: \"%s\" is set: skiplm's models do not have it", cp, off[i]);
            goto done;
        }
    }
    const sk_json *tw = sk_json_get(&j, "tie_word_embeddings");   /* HF's default: GPT-2 true, Llama false */
    if (tw && tw->type == SK_JSON_BOOL) *tie = tw->boolean;
    else if (tw && tw->type != SK_JSON_NULL) {
        rc = sk_error(SK_EFORMAT, "%s: \"tie_word_embeddings\" must be true or false", cp);
        goto done;
    } else if (!llama) *tie = 1;
    const sk_json *rs = sk_json_get(&j, "rope_scaling");
    if (rs && rs->type != SK_JSON_NULL && (rc = hf_rope_scaling(c, rs, llama, cp, "rope_scaling"))) goto done;
    /* transformers v5 writes RoPE's settings as rope_parameters {rope_type, rope_theta, factor,
     * ...} instead of rope_theta and rope_scaling: read the same way; both layouts at once are
     * taken only where they agree */
    const sk_json *rp = sk_json_get(&j, "rope_parameters");
    if (rp && rp->type != SK_JSON_NULL) {
        const float theta0 = c->rope_theta;                   /* the top-level rope_theta, or the default */
        if (rs && rs->type != SK_JSON_NULL) {
            rc = sk_error(SK_EFORMAT, "%s: both \"rope_parameters\" and \"rope_scaling\" are set", cp);
            goto done;
        }
        if ((rc = hf_rope_scaling(c, rp, llama, cp, "rope_parameters"))) goto done;
        const sk_json *th = sk_json_get(rp, "rope_theta");
        if (th && th->type != SK_JSON_NULL && (rc = hf_set(c, th, "rope_parameters.rope_theta", "rope_theta", cp))) goto done;
        const sk_json *top = sk_json_get(&j, "rope_theta");
        if (top && top->type != SK_JSON_NULL && th && th->type != SK_JSON_NULL && theta0 != c->rope_theta) {
            rc = sk_error(SK_EFORMAT, "%s: \"rope_theta\" (%g) and \"rope_parameters.rope_theta\" (%g) disagree", cp,
                          (double)theta0, (double)c->rope_theta);
            goto done;
        }
    }
    static const char *const qwen_off[] = {"use_sliding_window", "use_mrope"};     /* Qwen2's, off by default */
    for (size_t i = 0; qwen2 && i < sizeof qwen_off / sizeof qwen_off[0]; i++) {
        const sk_json *v = sk_json_get(&j, qwen_off[i]);
        if (v && v->type == SK_JSON_BOOL && v->boolean) {
            rc = sk_error(SK_EFORMAT, "%s: \"%s\" is true: skiplm's attention sees the whole causal context", cp, qwen_off[i]);
            goto done;
        }
    }
    const sk_json *sw = mistral ? sk_json_get(&j, "sliding_window") : NULL;
    if (sw && sw->type != SK_JSON_NULL && !(sw->type == SK_JSON_NUM && sw->num >= c->block_size)) {
        rc = sk_error(SK_EFORMAT, "%s: \"sliding_window\" is set below max_position_embeddings: skiplm's attention sees the "
                      "whole causal context", cp);
        goto done;
    }
    const sk_json *sc = sk_json_get(&j, "scale_attn_weights");     /* GPT-2: scores / sqrt(d) unless false */
    if (sc && sc->type == SK_JSON_BOOL && !sc->boolean) {
        rc = sk_error(SK_EFORMAT, "%s: \"scale_attn_weights\" is false: skiplm's attention always scales by 1/sqrt(d)", cp);
        goto done;
    }
    const sk_json *hd = sk_json_get(&j, "head_dim");
    if (llama && hd && hd->type == SK_JSON_NUM && c->n_head > 0 && hd->num * c->n_head != c->n_embd) {
        rc = sk_error(SK_EFORMAT, "%s: head_dim %.0f is not hidden_size / num_attention_heads", cp, hd->num);
        goto done;
    }
    *found = 1;
done:
    sk_json_free(&j);
    return rc;
}

/* eos_token_id from generation_config.json (what transformers' generate stops at), else config.json */
int sk_hf_eos_ids(const char *path, int32_t *ids, int max, int *n) {
    *n = 0;
    char *file = sk_weights_file(path);
    if (!file) return SK_ENOMEM;
    int rc = SK_OK;
    static const char *const names[2] = {"generation_config.json", "config.json"};
    for (int f = 0; f < 2 && !rc && !*n; f++) {
        char cp[4096];
        sk_json j;
        rc = read_json_beside(file, names[f], &j, cp, sizeof cp);
        /* a config.json without model_type is some other tool's (as apply_hf_config reads it) */
        const int ok = !rc && j.type == SK_JSON_OBJ && (f == 0 || sk_json_get(&j, "model_type"));
        const sk_json *e = ok ? sk_json_get(&j, "eos_token_id") : NULL;
        const int list = e && e->type == SK_JSON_ARR;
        for (int i = 0; e && e->type != SK_JSON_NULL && i < (list ? e->n : 1); i++) {
            const sk_json *v = list ? &e->items[i] : e;
            if (v->type != SK_JSON_NUM || v->num != floor(v->num) || v->num < 0 || v->num > 2147483647.0) {
                rc = sk_error(SK_EFORMAT, "%s: eos_token_id must be a whole number >= 0 or a list of them", cp);
                break;
            }
            if (*n < max) ids[(*n)++] = (int32_t)v->num;
        }
        sk_json_free(&j);
    }
    free(file);
    return rc;
}

/* 1 if the file holds an lm_head.weight that is not, byte for byte, its token embedding */
static int head_differs(const sk_safetensors *st, const char *emb_name) {
    const sk_st_tensor *h = sk_st_find(st, "lm_head.weight"), *e = find_named(st, emb_name);
    if (!h) return 0;
    if (!e || h->dtype != e->dtype || h->nbytes != e->nbytes) return 1;
    return memcmp(st->data + h->offset, st->data + e->offset, h->nbytes) != 0;
}

/* heads_known (may be NULL): whether n_head came from the metadata or config.json; the shapes
 * cannot tell it */

static int config_from_st(sk_config *c, const sk_safetensors *st, const char *path, int *heads_known) {
    sk_config_default(c);
    const char *fmt = sk_st_meta(st, "format");
    int hf = 0, tie = -1, rc = SK_OK;
    if (!fmt || strcmp(fmt, "skiplm")) {
        /* not written by skiplm: HF's config.json beside it, where there is one */
        if ((rc = apply_hf_config(c, path, &hf, &tie))) return rc;
    }
    const char *fam = sk_st_meta(st, "family");
    if (!fam) fam = hf ? (c->family == SK_LLAMA ? "llama" : "gpt2")
                       : sk_st_find(st, "model.embed_tokens.weight") ? "llama" : "gpt2";   /* a guess from the names */
    if (!hf) {
        rc = sk_config_set(c, "family", fam);
        if (!strcmp(fam, "llama")) { c->bias = 0; c->norm_eps = 1e-6f; }
        /* GPT-2's own files (Conv1D layout) use its tanh GELU */
        else if (gpt2_conv1d(st)) c->gelu = SK_GELU_TANH;
    }
    const char *g = sk_st_meta(st, "gelu");
    if (!rc && g) rc = sk_config_set(c, "gelu", g);
    const char *rt = sk_st_meta(st, "routing");
    if (!rc && rt) rc = sk_config_set(c, "routing", rt);
    const char *rs = sk_st_meta(st, "rope_scaling");
    if (!rc && rs) rc = sk_config_set(c, "rope_scaling", rs);
    for (size_t i = 0; !rc && i < sizeof META / sizeof META[0]; i++) {
        const char *v = sk_st_meta(st, META[i].key);
        if (v) rc = sk_config_set(c, META[i].key, v);
    }
    if (rc) return sk_error(rc, "%s: metadata: %s", path, sk_last_error());
    /* the head: skiplm's metadata says (untied_head), or config.json (tie_word_embeddings; a
     * Llama config.json without it is HF's default, untied, where the file has an lm_head);
     * a file that says nothing is untied when its lm_head.weight is not its embedding */
    const char *emb = c->family == SK_GPT2 ? "transformer.wte.weight" : "model.embed_tokens.weight";
    if (!sk_st_meta(st, "untied_head")) {
        if (tie >= 0) c->untied_head = !tie;
        else if (hf) c->untied_head = sk_st_find(st, "lm_head.weight") != NULL;
        else c->untied_head = head_differs(st, emb);
    }
    if (heads_known) *heads_known = hf || sk_st_meta(st, "n_head");
    if (hf) return SK_OK;              /* config.json said it all */
    /* infer what the shapes tell, where the metadata said nothing */
    const sk_st_tensor *wte = find_named(st, emb);
    if (wte && wte->ndim == 2) {
        if (!sk_st_meta(st, "vocab_size")) c->vocab_size = (int)wte->shape[0];
        if (!sk_st_meta(st, "n_embd")) c->n_embd = (int)wte->shape[1];
    }
    const sk_st_tensor *wpe = find_named(st, "transformer.wpe.weight");
    if (wpe && wpe->ndim == 2 && !sk_st_meta(st, "block_size")) c->block_size = (int)wpe->shape[0];
    if (c->family == SK_LLAMA && !sk_st_meta(st, "qkv_bias"))
        c->qkv_bias = find_named(st, "model.layers.0.self_attn.q_proj.bias") != NULL;
    /* the MLP's width: rows of the first up-projection ((in, out) in a Conv1D file) */
    const sk_st_tensor *fc = find_named(st, c->family == SK_GPT2 ? "transformer.h.0.mlp.c_fc.weight"
                                                                 : "model.layers.0.mlp.gate_proj.weight");
    if (fc && fc->ndim == 2 && !sk_st_meta(st, "ffn_hidden"))
        c->ffn_hidden = (int)fc->shape[c->family == SK_GPT2 && gpt2_conv1d(st) ? 1 : 0];
    if (!sk_st_meta(st, "n_layer")) {
        int L = 0;
        char name[96];
        for (;;) {
            snprintf(name, sizeof name, c->family == SK_GPT2 ? "transformer.h.%d.ln_1.weight" : "model.layers.%d.input_layernorm.weight", L);
            if (!find_named(st, name)) break;
            L++;
        }
        if (L) c->n_layer = L;
    }
    if (c->family == SK_GPT2 && !sk_st_meta(st, "bias")) c->bias = find_named(st, "transformer.ln_f.bias") != NULL;
    return SK_OK;
}

int sk_config_from_file(sk_config *cfg, const char *path) {
    char *file = sk_weights_file(path);
    if (!file) return SK_ENOMEM;
    sk_safetensors st;
    int rc = sk_st_read(file, &st);
    if (!rc) {
        rc = config_from_st(cfg, &st, file, NULL);
        sk_st_free(&st);
    }
    free(file);
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

/* q/k projection weights and biases (qkv_bias): their rows are permuted */
static int is_rope_proj(const sk_model *m, const char *name, int *n_heads) {
    if (m->cfg.family != SK_LLAMA) return 0;
    if (strstr(name, "self_attn.q_proj.")) { *n_heads = m->H; return 1; }
    if (strstr(name, "self_attn.k_proj.")) { *n_heads = m->Hkv; return 1; }
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
            permute_rope_rows(tmp[i], data, nh, m->hs, t->ndim > 1 ? m->C : 1, 1);
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
    *out = NULL;
    char *file = sk_weights_file(path);
    if (!file) return SK_ENOMEM;
    sk_safetensors st;
    int rc = sk_st_read(file, &st);
    if (!rc) {
        rc = sk_model_load_st(out, &st, file, override);
        sk_st_free(&st);
    }
    free(file);
    return rc;
}

int sk_model_load_st(sk_model **out, const sk_safetensors *stp, const char *path, const sk_config *override) {
    *out = NULL;
    const sk_safetensors st = *stp;
    int rc;
    sk_config cfg;
    int heads_known;
    if ((rc = config_from_st(&cfg, &st, path, &heads_known))) goto done;
    if (heads_known && override && override->n_head && override->n_head != cfg.n_head) {
        /* the head count changes no shape: a contradiction would silently change the model */
        rc = sk_error(SK_EINVAL, "%s: n_head %d was given but the file says %d", path, override->n_head, cfg.n_head);
        goto done;
    }
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
    if (!heads_known && !(override && override->n_head)) {
        rc = sk_error(SK_EFORMAT, "%s: n_head is not in the file's metadata (nor a config.json beside it) and cannot be inferred from shapes; "
                      "give it explicitly (--n_head N)", path);
        goto done;
    }
    sk_model *m;
    if ((rc = sk_model_new_empty(&m, &cfg))) { rc = sk_error(rc, "%s: %s", path, sk_last_error()); goto done; }
    const int conv1d = gpt2_conv1d(&st);
    /* one scratch for the tensors stored in another order than skiplm's: read there, then
     * rearranged into place (fresh memory for each would be paged in and zeroed each time) */
    size_t scratch_n = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        int nh;
        const sk_tensor *t = &m->tensors[i];
        if ((conv1d && is_gpt2_linear(m, t->name)) || is_rope_proj(m, t->name, &nh))
            scratch_n = t->numel > scratch_n ? t->numel : scratch_n;
    }
    float *scratch = scratch_n ? malloc(scratch_n * sizeof(float)) : NULL;
    if (scratch_n && !scratch) rc = sk_error(SK_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < m->n_tensors; i++) {
        const sk_tensor *t = &m->tensors[i];
        const char *fname = file_name(&st, t->name);
        const sk_st_tensor *ft = fname ? sk_st_find(&st, fname) : NULL;
        /* the shape the file must hold: (in, out) for a Conv1D file's Linear weights */
        const int tr = conv1d && is_gpt2_linear(m, t->name);
        const int64_t want0 = tr ? t->shape[1] : t->shape[0], want1 = tr ? t->shape[0] : t->shape[1];
        if (!ft) {
            rc = sk_error(SK_EFORMAT, "%s: tensor '%s' is missing (config: %d layers%s)", path, t->name,
                          m->L, m->cfg.bias ? ", with biases" : ", no biases");
            break;
        }
        if (ft->ndim != t->ndim || ft->shape[0] != want0 || (t->ndim > 1 && ft->shape[1] != want1)) {
            rc = sk_error(SK_EFORMAT, "%s: tensor '%s' has shape [%lld%s%lld] but the config needs [%lld%s%lld]%s",
                          path, fname, (long long)ft->shape[0], ft->ndim > 1 ? ", " : "", ft->ndim > 1 ? (long long)ft->shape[1] : 0LL,
                          (long long)want0, t->ndim > 1 ? ", " : "", t->ndim > 1 ? (long long)want1 : 0LL,
                          tr ? " (the file stores GPT-2's Linear weights (in, out), as HF's Conv1D)" : "");
            if (ft->ndim == 1 && t->ndim == 1)
                rc = sk_error(SK_EFORMAT, "%s: tensor '%s' has %lld elements but the config needs %lld",
                              path, t->name, (long long)ft->shape[0], (long long)t->shape[0]);
            break;
        }
        float *dst = m->params + t->offset;
        int nh = 0;
        const int rope = is_rope_proj(m, t->name, &nh);
        if ((rc = sk_st_get_f32(&st, fname, tr || rope ? scratch : dst, t->numel))) break;
        if (tr) transpose(dst, scratch, (size_t)t->shape[1], (size_t)t->shape[0]);   /* (in, out) -> (out, in) */
        if (rope) permute_rope_rows(dst, scratch, nh, m->hs, t->ndim > 1 ? m->C : 1, 0);
        for (size_t k = 0; k < t->numel; k++)
            if (!isfinite(dst[k])) {
                rc = sk_error(SK_ENUM, "%s: tensor '%s' holds a non-finite value at element %zu", path, fname, k);
                break;
            }
        if (rc) break;
    }
    free(scratch);
    /* a tied model's file may hold lm_head.weight too (GPT2LMHeadModel's): it must equal the embedding */
    const char *head = "lm_head.weight";
    if (!rc && !m->cfg.untied_head && sk_st_find(&st, head)) {
        size_t n = (size_t)m->cfg.vocab_size * m->C;
        float *tmp = malloc(n * sizeof(float));
        if (!tmp) rc = sk_error(SK_ENOMEM, "out of memory");
        else if (!(rc = sk_st_get_f32(&st, head, tmp, n)) && memcmp(tmp, m->params, n * sizeof(float)))
            rc = sk_error(SK_EFORMAT, "%s: lm_head.weight differs from the token embedding, but the config ties them "
                          "(tie_word_embeddings, or untied_head 0)", path);
        free(tmp);
    }
    if (rc) sk_model_free(m);
    else *out = m;
done:
    return rc;
}

/* ------------------------------------------- save as Hugging Face's layout */

/* dir/model.safetensors and dir/config.json as transformers writes GPT2LMHeadModel or
 * LlamaForCausalLM (Qwen2ForCausalLM with qkv_bias; dir must exist). Only what those models compute can be written: no
 * Skip-Layer routing, no sinusoidal positions, no ReLU MLP in Llama. A GPT-2 without biases
 * gets zero biases (the same function), its Linear weights are written (in, out) as Conv1D. */
int sk_model_save_hf(const sk_model *m, const char *dir) {
    const sk_config *c = &m->cfg;
    const int gpt2 = c->family == SK_GPT2;
    for (int l = 0; l < m->L; l++)
        for (int r = 0; r < m->n_runs[l]; r++)
            if (m->runs[(size_t)l * m->H + r].src != l)
                return sk_error(SK_EINVAL, "Hugging Face's %s has no Skip-Layer Attention: layer %d reads layer %d's K/V",
                                gpt2 ? "GPT-2" : "Llama", l, m->runs[(size_t)l * m->H + r].src);
    if (c->sinusoidal) return sk_error(SK_EINVAL, "Hugging Face's %s has no sinusoidal positions", gpt2 ? "GPT-2" : "Llama");
    if (!gpt2 && c->relu) return sk_error(SK_EINVAL, "Hugging Face's Llama has no plain ReLU MLP (its MLP is gated)");
    const size_t zn = (size_t)(m->QKV > m->F ? m->QKV : m->F) + (size_t)m->C;
    float *zeros = calloc(zn, sizeof(float));
    float **tmp = calloc((size_t)m->n_tensors, sizeof(float *));
    sk_st_writer *w = sk_st_writer_new();
    int rc = zeros && tmp && w ? sk_st_add_meta(w, "format", "pt") : sk_error(SK_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < m->n_tensors; i++) {
        const sk_tensor *t = &m->tensors[i];
        const float *data = m->params + t->offset;
        int64_t shape[2] = {t->shape[0], t->ndim > 1 ? t->shape[1] : 0};
        int nh = 0;
        if (is_gpt2_linear(m, t->name) || is_rope_proj(m, t->name, &nh)) {
            if (!(tmp[i] = malloc(t->numel * sizeof(float)))) { rc = sk_error(SK_ENOMEM, "out of memory"); break; }
            if (!gpt2) permute_rope_rows(tmp[i], data, nh, m->hs, t->ndim > 1 ? m->C : 1, 1);
            else {                                          /* (out, in) -> Conv1D's (in, out) */
                transpose(tmp[i], data, (size_t)t->shape[0], (size_t)t->shape[1]);
                shape[0] = t->shape[1]; shape[1] = t->shape[0];
            }
            data = tmp[i];
        }
        rc = sk_st_add(w, t->name, SK_F32, t->ndim, shape, data);
        /* a GPT-2 without biases: zero biases after each weight that HF's has one for */
        const char *dot = strrchr(t->name, '.');
        if (!rc && gpt2 && !c->bias && dot && !strcmp(dot, ".weight") && strncmp(t->name, "transformer.w", 13) &&
            strcmp(t->name, "lm_head.weight")) {
            char bn[96];
            snprintf(bn, sizeof bn, "%.*s.bias", (int)(dot - t->name), t->name);
            int64_t bs[1] = {is_gpt2_linear(m, t->name) ? t->shape[0] : m->C};
            rc = sk_st_add(w, bn, SK_F32, 1, bs, zeros);
        }
    }
    size_t n = strlen(dir) + 32;
    char *path = malloc(n), *json = malloc(2048);
    if (!rc && (!path || !json)) rc = sk_error(SK_ENOMEM, "out of memory");
    if (!rc) {
        snprintf(path, n, "%s/model.safetensors", dir);
        rc = sk_st_write(w, path);
    }
    if (!rc) {
        char inner[32], scaling[256] = "null", qwen[128];
        /* Qwen2Config's sliding_window defaults to 4096, which some transformers releases apply
         * even with use_sliding_window false: none, spelled out */
        snprintf(qwen, sizeof qwen, "\n  \"use_sliding_window\": false,\n  \"sliding_window\": null,\n  \"max_window_layers\": %d,",
                 c->n_layer);
        if (c->rope_scaling == SK_ROPE_LINEAR)
            snprintf(scaling, sizeof scaling, "{\"rope_type\": \"linear\", \"factor\": %.9g}", (double)c->rope_factor);
        else if (c->rope_scaling == SK_ROPE_LLAMA3)
            snprintf(scaling, sizeof scaling, "{\"rope_type\": \"llama3\", \"factor\": %.9g, \"low_freq_factor\": %.9g, "
                     "\"high_freq_factor\": %.9g, \"original_max_position_embeddings\": %d}", (double)c->rope_factor,
                     (double)c->rope_low_freq_factor, (double)c->rope_high_freq_factor, c->rope_original_ctx);
        if (gpt2 && m->F != 4 * m->C) snprintf(inner, sizeof inner, "%d", m->F);
        else snprintf(inner, sizeof inner, "null");
        int len = gpt2 ?
            snprintf(json, 2048,
                     "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
                     "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_embd\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n"
                     "  \"vocab_size\": %d,\n  \"n_inner\": %s,\n  \"activation_function\": \"%s\",\n"
                     "  \"layer_norm_epsilon\": %.9g,\n  \"embd_pdrop\": %.9g,\n  \"attn_pdrop\": %.9g,\n  \"resid_pdrop\": %.9g,\n"
                     "  \"scale_attn_weights\": true,\n  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"float32\"\n}\n",
                     c->n_layer, c->n_head, c->n_embd, c->block_size, c->block_size, c->vocab_size, inner,
                     c->relu ? "relu" : c->gelu == SK_GELU_TANH ? "gelu_new" : "gelu", (double)c->norm_eps,
                     (double)c->dropout, (double)c->dropout, (double)c->dropout, c->untied_head ? "false" : "true") :
            snprintf(json, 2048,
                     "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n"
                     "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n"
                     "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"max_position_embeddings\": %d,\n"
                     "  \"vocab_size\": %d,\n  \"rms_norm_eps\": %.9g,\n  \"rope_theta\": %.9g,\n  \"hidden_act\": \"silu\",\n"
                     "  \"attention_dropout\": %.9g,%s\n  \"mlp_bias\": false,\n"
                     "  \"rope_scaling\": %s,\n  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"float32\"\n}\n",
                     c->qkv_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM", c->qkv_bias ? "qwen2" : "llama",
                     c->n_layer, c->n_head, m->Hkv, c->n_embd, m->F, c->block_size, c->vocab_size, (double)c->norm_eps,
                     (double)c->rope_theta, (double)c->dropout,
                     c->qkv_bias ? qwen : "\n  \"attention_bias\": false,",
                     scaling, c->untied_head ? "false" : "true");
        snprintf(path, n, "%s/config.json", dir);
        rc = sk_write_atomic(path, json, (size_t)len);
    }
    if (w) sk_st_writer_free(w);
    for (int i = 0; tmp && i < m->n_tensors; i++) free(tmp[i]);
    free(tmp); free(zeros); free(path); free(json);
    return rc;
}
