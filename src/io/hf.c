/* Hugging Face folders: the config.json beside a weights file (HF's keys for gpt2, llama,
 * mistral and qwen2, read into an sk_config; what skiplm's models do not have is refused by
 * name), the end-of-sequence ids of generation_config.json, and the export of a model as
 * transformers writes GPT2LMHeadModel / LlamaForCausalLM (sk_model_save_hf). The tensor
 * layouts both directions share (Conv1D, RoPE rows) are in weights.c. */
#include "base/fileio.h"
#include "base/json.h"
#include "core/model.h"
#include "io/io.h"
#include <math.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One config.json value: JSON number (integral for integer fields), string or bool. */
static int hf_set(sk_config *c, const sk_json *v, const char *key, const char *field, const char *cfg_path) {
    char buf[64];
    if (v->type == SK_JSON_NUM) {
        int is_int = !sk_meta_is_float(field);
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
int sk_hf_apply_config(sk_config *c, const char *weights_path, int *found, int *tie) {
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
    if (sk_is_gguf(file)) {            /* a GGUF file's end-of-sequence, end-of-turn and end-of-message ids */
        sk_gguf g;
        rc = sk_gguf_read(file, &g);
        static const char *const keys[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"};
        for (int k = 0; !rc && k < 3; k++) {
            int64_t v;
            int r = sk_gguf_get_int(&g, keys[k], &v);
            if (r < 0 || (r == 0 && (v < 0 || v > 2147483647))) rc = sk_error(SK_EFORMAT, "%s: %s must be a token id", file, keys[k]);
            else if (r == 0 && *n < max && !(*n && ids[*n - 1] == (int32_t)v)) ids[(*n)++] = (int32_t)v;
        }
        sk_gguf_free(&g);
        free(file);
        return rc;
    }
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

/* ------------------------------------------- save as Hugging Face's layout */

/* dir/model.safetensors and dir/config.json as transformers writes GPT2LMHeadModel or
 * LlamaForCausalLM (Qwen2ForCausalLM with qkv_bias; dir must exist). Only what those models compute can be written: no
 * Skip-Layer routing, no sinusoidal positions, no ReLU MLP in Llama. A GPT-2 without biases
 * gets zero biases (the same function), its Linear weights are written (in, out) as Conv1D. */
int sk_model_save_hf(const sk_model *m, const char *dir) {
    const sk_config *c = &m->cfg;
    const int gpt2 = c->family == SK_GPT2;
    if (m->q8)
        return sk_error(SK_EINVAL, "the model's weights are 8-bit (a quantized file, skiplm quantize): a Hugging Face folder needs the fp32 weights they were quantized from");
    int bl, bs;
    if (sk_route_borrows(m->plan, &bl, &bs))
        return sk_error(SK_EINVAL, "Hugging Face's %s has no Skip-Layer Attention: layer %d reads layer %d's K/V",
                        gpt2 ? "GPT-2" : "Llama", bl, bs);
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
        if (sk_hf_gpt2_linear(m, t->name) || sk_hf_rope_proj(m, t->name, &nh)) {
            if (!(tmp[i] = malloc(t->numel * sizeof(float)))) { rc = sk_error(SK_ENOMEM, "out of memory"); break; }
            if (!gpt2) sk_hf_permute_rope_rows(tmp[i], data, nh, m->hs, t->ndim > 1 ? m->C : 1, 1);
            else {                                          /* (out, in) -> Conv1D's (in, out) */
                sk_transpose(tmp[i], data, (size_t)t->shape[0], (size_t)t->shape[1]);
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
            int64_t bs[1] = {sk_hf_gpt2_linear(m, t->name) ? t->shape[0] : m->C};
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

