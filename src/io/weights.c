/* Model weights as safetensors: nanoGPT / HF tensor names, config in __metadata__.
 * Llama q/k projections: skiplm rotates adjacent pairs (x[2j], x[2j+1]), HF's
 * code rotates halves (x[j], x[j+d/2]); rows are permuted on export and back on import,
 * as HF's own Llama conversion does, so HF code gets the same results.
 *
 * Files as Hugging Face's transformers writes them load too (a folder with model.safetensors
 * and config.json, as on the Hub): the config comes from config.json (hf.c) where the file
 * has no skiplm metadata, GPT-2's blocks may lack the "transformer." prefix (GPT2Model's
 * names, those of the Hub's "gpt2"), and GPT-2's four Linear weights may be stored (in, out),
 * as HF's Conv1D holds them (y = x W + b); they are transposed on load. */
#include "base/fileio.h"
#include "base/json.h"
#include "core/model.h"
#include "core/quant.h"
#include "io/io.h"
#include <math.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- metadata */

/* The SLA paper's own names (nanoGPT's GPTConfig in its listing) for two of the fields */
static const char *const PAPER[][2] = {{"num_skip_layer", "n_skip_layer"}, {"num_skip_head", "n_skip_head"}};
static const size_t PAPER_OFF[] = {offsetof(sk_config, n_skip_layer), offsetof(sk_config, n_skip_head)};

/* Keys that skiplm reads or writes besides the config fields (sk_meta_fields) */
static const char *const META_OTHER[] = {"format", "family", "gelu", "routing", "rope_scaling", "tokenizer",
                                         "tokenizer_path", "tokenizer_kind"};

/* A key that names no field skiplm knows but reads like one: a lowercase identifier with a
 * config word in it (what another trainer's config would write) */
static int looks_like_field(const char *k) {
    for (const char *p = k; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')) return 0;
    static const char *const words[] = {"layer", "head", "embd", "embed", "skip", "vocab", "block", "hidden",
                                        "dim", "rope", "norm", "ctx", "dropout", "bias", "gelu", "theta",
                                        "position", "routing", "tie", "kv", "ffn", "mlp"};
    if (!strncmp(k, "n_", 2) || !strncmp(k, "num_", 4)) return 1;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strstr(k, words[i])) return 1;
    return 0;
}

int sk_meta_unknown_keys(const sk_safetensors *st, const char **keys, int max) {
    int n = 0;
    for (int i = 0; i < st->n_meta; i++) {
        const char *k = st->meta_keys[i];
        int known = !strncmp(k, "train.", 6);
        for (size_t j = 0; !known && j < sk_n_meta_fields; j++) known = !strcmp(k, sk_meta_fields[j].key);
        for (size_t j = 0; !known && j < sizeof PAPER / sizeof PAPER[0]; j++) known = !strcmp(k, PAPER[j][0]);
        for (size_t j = 0; !known && j < sizeof META_OTHER / sizeof META_OTHER[0]; j++) known = !strcmp(k, META_OTHER[j]);
        if (known || !looks_like_field(k)) continue;
        if (n < max) keys[n] = k;
        n++;
    }
    return n;
}

static int write_config_meta(sk_st_writer *w, const sk_config *c) {
    char buf[64];
    int rc = sk_st_add_meta(w, "format", "skiplm");
    if (!rc) rc = sk_st_add_meta(w, "family", c->family == SK_GPT2 ? "gpt2" : "llama");
    if (!rc) rc = sk_st_add_meta(w, "gelu", c->gelu == SK_GELU_TANH ? "tanh" : "erf");
    if (!rc && c->routing[0]) rc = sk_st_add_meta(w, "routing", c->routing);
    if (!rc && c->rope_scaling != SK_ROPE_NONE)
        rc = sk_st_add_meta(w, "rope_scaling", c->rope_scaling == SK_ROPE_LINEAR ? "linear" : "llama3");
    for (size_t i = 0; !rc && i < sk_n_meta_fields; i++) {
        const char *p = (const char *)c + sk_meta_fields[i].off;
        if (sk_meta_fields[i].is_float) snprintf(buf, sizeof buf, "%.9g", (double)*(const float *)p);
        else snprintf(buf, sizeof buf, "%d", *(const int *)p);
        rc = sk_st_add_meta(w, sk_meta_fields[i].key, buf);
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
        if ((rc = sk_hf_apply_config(c, path, &hf, &tie))) return rc;
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
    for (size_t i = 0; !rc && i < sk_n_meta_fields; i++) {
        const char *v = sk_st_meta(st, sk_meta_fields[i].key);
        if (v) rc = sk_config_set(c, sk_meta_fields[i].key, v);
    }
    for (size_t i = 0; !rc && i < sizeof PAPER / sizeof PAPER[0]; i++) {
        const char *v = sk_st_meta(st, PAPER[i][0]), *own = sk_st_meta(st, PAPER[i][1]);
        if (!v) continue;
        sk_config a = *c;
        if ((rc = sk_config_set(&a, PAPER[i][1], v))) break;
        if (own && *(int *)((char *)&a + PAPER_OFF[i]) != *(int *)((char *)c + PAPER_OFF[i])) {
            rc = sk_error(SK_EFORMAT, "%s is %s but %s is %s", PAPER[i][0], v, PAPER[i][1], own);
            break;
        }
        *c = a;
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
    if (sk_is_gguf(file)) {            /* the config of the model it holds */
        sk_model *m;
        int rc = sk_model_load(&m, file, NULL);
        if (!rc) *cfg = *sk_model_config(m);
        sk_model_free(m);
        free(file);
        return rc;
    }
    sk_safetensors st;
    int rc = sk_st_read(file, &st);
    if (!rc) {
        rc = config_from_st(cfg, &st, file, NULL);
        sk_st_free(&st);
    }
    free(file);
    return rc;
}

/* ------------------------------------------------------------ save / load */

int sk_model_save(const sk_model *m, const char *path) { return sk_model_save_with(m, path, NULL); }

int sk_model_save_meta(const sk_model *m, const char *path, const char *const *meta) {
    sk_st_writer *w = sk_st_writer_new();
    if (!w) return sk_error(SK_ENOMEM, "out of memory");
    int rc = SK_OK;
    for (int i = 0; !rc && meta && meta[i]; i += 2)
        if (meta[i + 1]) rc = sk_st_add_meta(w, meta[i], meta[i + 1]);
    if (!rc) rc = sk_model_save_with(m, path, w);
    sk_st_writer_free(w);
    return rc;
}

/* A quantized model's matrix: int8 `name` (rows, cols) and fp16 `name`_scale (rows, cols / 32)
 * (docs/files.md); tmp[0..1] receive the row-permuted copies of Llama's q/k projections. */
static int add_q8_tensor(sk_st_writer *w, const sk_model *m, const sk_tensor *t, void **tmp) {
    const int8_t *q = m->q8->q + t->offset;
    const uint16_t *d = sk_q8_scales(m->q8, t->offset);
    const int64_t nb = t->shape[1] / SK_Q8_BLOCK, sshape[2] = {t->shape[0], nb};
    int nh;
    if (sk_hf_rope_proj(m, t->name, &nh)) {
        tmp[0] = malloc(t->numel);
        tmp[1] = malloc((size_t)t->shape[0] * nb * sizeof *d);
        if (!tmp[0] || !tmp[1]) return sk_error(SK_ENOMEM, "out of memory");
        sk_permute_rows_bytes(tmp[0], q, nh, m->hs, (size_t)t->shape[1], 1);
        sk_permute_rows_bytes(tmp[1], d, nh, m->hs, (size_t)nb * sizeof *d, 1);
        q = tmp[0]; d = tmp[1];
    }
    char sname[96];
    snprintf(sname, sizeof sname, "%s_scale", t->name);
    int rc = sk_st_add(w, t->name, SK_I8, 2, t->shape, q);
    return rc ? rc : sk_st_add(w, sname, SK_F16, 2, sshape, d);
}

int sk_model_save_with(const sk_model *m, const char *path, sk_st_writer *extra) {
    sk_st_writer *w = extra ? extra : sk_st_writer_new();
    if (!w) return sk_error(SK_ENOMEM, "out of memory");
    int rc = write_config_meta(w, &m->cfg);
    if (!rc && m->q8) rc = sk_st_add_meta(w, "quantization", "q8_0");
    void **tmp = calloc(2 * (size_t)m->n_tensors, sizeof(void *));
    if (!tmp && !rc) rc = sk_error(SK_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < m->n_tensors; i++) {
        const sk_tensor *t = &m->tensors[i];
        const float *data = m->params + t->offset;
        int nh;
        if (m->q8 && t->ndim == 2) {
            rc = add_q8_tensor(w, m, t, tmp + 2 * i);
            continue;
        }
        if (sk_hf_rope_proj(m, t->name, &nh)) {
            float *buf = malloc(t->numel * sizeof(float));
            if (!(tmp[2 * i] = buf)) { rc = sk_error(SK_ENOMEM, "out of memory"); break; }
            sk_hf_permute_rope_rows(buf, data, nh, m->hs, t->ndim > 1 ? m->C : 1, 1);
            data = buf;
        }
        rc = sk_st_add(w, t->name, SK_F32, t->ndim, t->shape, data);
    }
    if (!rc) rc = sk_st_write(w, path);
    if (!extra) sk_st_writer_free(w);
    for (int i = 0; tmp && i < 2 * m->n_tensors; i++) free(tmp[i]);
    free(tmp);
    return rc;
}

int sk_model_load(sk_model **out, const char *path, const sk_config *override) {
    *out = NULL;
    char *file = sk_weights_file(path);
    if (!file) return SK_ENOMEM;
    if (sk_is_gguf(file)) {
        sk_gguf g;
        int rc = sk_gguf_read(file, &g);
        if (!rc) rc = sk_model_load_gguf(out, &g, override);
        sk_gguf_free(&g);
        free(file);
        return rc;
    }
    sk_safetensors st;
    int rc = sk_st_read(file, &st);
    if (!rc) {
        rc = sk_model_load_st(out, &st, file, override);
        sk_st_free(&st);
    }
    free(file);
    return rc;
}

/* One matrix of a quantized file (add_q8_tensor): int8 values and fp16 scales checked and
 * copied into the model's 8-bit copy z (Llama's q/k rows back in skiplm's order through
 * scratch), then dequantized into the fp32 weights. */
static int load_q8_tensor(sk_model *m, sk_q8 *z, const sk_safetensors *st, const char *path, const sk_tensor *t,
                          const sk_st_tensor *ft, void *scratch) {
    if (ft->dtype != SK_I8)
        return sk_error(SK_EFORMAT, "%s: tensor '%s' is not int8, but the file says its matrices are 8-bit (quantization q8_0)", path, t->name);
    char sname[96];
    snprintf(sname, sizeof sname, "%s_scale", t->name);
    const sk_st_tensor *fs = sk_st_find(st, sname);
    const int64_t nb = t->shape[1] / SK_Q8_BLOCK;
    if (!fs) return sk_error(SK_EFORMAT, "%s: tensor '%s' (the scales of '%s') is missing", path, sname, t->name);
    if (fs->dtype != SK_F16 || fs->ndim != 2 || fs->shape[0] != t->shape[0] || fs->shape[1] != nb)
        return sk_error(SK_EFORMAT, "%s: tensor '%s' must be float16 of shape [%lld, %lld] (one scale per %d weights of a row)",
                        path, sname, (long long)t->shape[0], (long long)nb, SK_Q8_BLOCK);
    int8_t *q = z->q + t->offset;
    uint16_t *d = (uint16_t *)sk_q8_scales(z, t->offset);
    const size_t nd = (size_t)t->shape[0] * nb;
    int nh;
    const int rope = sk_hf_rope_proj(m, t->name, &nh);
    memcpy(rope ? scratch : (void *)q, st->data + ft->offset, t->numel);
    if (rope) sk_permute_rows_bytes(q, scratch, nh, m->hs, (size_t)t->shape[1], 0);
    const uint8_t *sb = st->data + fs->offset;
    uint16_t *dd = rope ? (uint16_t *)scratch : d;
    for (size_t k = 0; k < nd; k++) {
        dd[k] = (uint16_t)(sb[2 * k] | (sb[2 * k + 1] << 8));            /* little-endian, maybe unaligned */
        if ((dd[k] & 0x7c00u) == 0x7c00u)
            return sk_error(SK_ENUM, "%s: tensor '%s' holds a non-finite scale at element %zu", path, sname, k);
    }
    if (rope) sk_permute_rows_bytes(d, scratch, nh, m->hs, (size_t)nb * sizeof *d, 0);
    sk_q8_dequantize(m->params + t->offset, q, d, t->numel);
    return SK_OK;
}

/* The SLA setting of the override (n_skip_layer, n_skip_head, routing: its non-zero ones) is
 * for a file without one; where the file's own routes heads (n_skip_* both > 0, or a routing
 * table) a different value would silently change the model, as a different n_head would. */
static int check_sla_override(const sk_config *file, const sk_config *o, const char *path) {
    const int has = file->routing[0] || (file->n_skip_layer > 0 && file->n_skip_head > 0);
    if (!has) return SK_OK;
    if (o->n_skip_layer && o->n_skip_layer != file->n_skip_layer)
        return sk_error(SK_EINVAL, "%s: n_skip_layer %d was given but the file says %d", path, o->n_skip_layer, file->n_skip_layer);
    if (o->n_skip_head && o->n_skip_head != file->n_skip_head)
        return sk_error(SK_EINVAL, "%s: n_skip_head %d was given but the file says %d", path, o->n_skip_head, file->n_skip_head);
    if (o->routing[0] && strcmp(o->routing, file->routing))
        return sk_error(SK_EINVAL, "%s: routing '%s' was given but the file says '%s'", path, o->routing,
                        file->routing[0] ? file->routing : "(none: paper SLA from n_skip_layer/n_skip_head)");
    return SK_OK;
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
    if (override && (rc = check_sla_override(&cfg, override, path))) goto done;
    if (override) {
        /* non-zero fields of the override win */
        const sk_config *o = override;
        if (o->routing[0]) memcpy(cfg.routing, o->routing, sizeof cfg.routing);
        for (size_t i = 0; i < sk_n_meta_fields; i++) {
            const char *src = (const char *)o + sk_meta_fields[i].off;
            char *dst = (char *)&cfg + sk_meta_fields[i].off;
            if (sk_meta_fields[i].is_float ? *(const float *)src != 0.0f : *(const int *)src != 0)
                memcpy(dst, src, sk_meta_fields[i].is_float ? sizeof(float) : sizeof(int));
        }
    }
    if (!heads_known && !(override && override->n_head)) {
        rc = sk_error(SK_EFORMAT, "%s: n_head is not in the file's metadata (nor a config.json beside it) and cannot be inferred from shapes; "
                      "give it explicitly (--n_head N)", path);
        goto done;
    }
    /* an 8-bit file (sk_model_quantize_q8, skiplm quantize) */
    const char *quant = sk_st_meta(&st, "quantization");
    if (quant && strcmp(quant, "q8_0")) {
        rc = sk_error(SK_EFORMAT, "%s: quantization '%s' is not one skiplm reads (it reads q8_0)", path, quant);
        goto done;
    }
    sk_model *m;
    if ((rc = sk_model_new_empty(&m, &cfg))) { rc = sk_error(rc, "%s: %s", path, sk_last_error()); goto done; }
    sk_q8 *z = NULL;
    if (quant && (rc = sk_q8_alloc(m, &z))) {
        rc = sk_error(rc, "%s: %s", path, sk_last_error());
        sk_model_free(m);
        goto done;
    }
    const int conv1d = !z && gpt2_conv1d(&st);   /* an 8-bit file stores (out, in) */
    /* one scratch for the tensors stored in another order than skiplm's: read there, then
     * rearranged into place (fresh memory for each would be paged in and zeroed each time) */
    size_t scratch_n = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        int nh;
        const sk_tensor *t = &m->tensors[i];
        if ((conv1d && sk_hf_gpt2_linear(m, t->name)) || sk_hf_rope_proj(m, t->name, &nh))
            scratch_n = t->numel > scratch_n ? t->numel : scratch_n;
        if (z && sk_hf_rope_proj(m, t->name, &nh)) scratch_n = t->numel / 2 + 1 > scratch_n ? t->numel / 2 + 1 : scratch_n;
    }
    float *scratch = scratch_n ? malloc(scratch_n * sizeof(float)) : NULL;
    if (scratch_n && !scratch) rc = sk_error(SK_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < m->n_tensors; i++) {
        const sk_tensor *t = &m->tensors[i];
        const char *fname = file_name(&st, t->name);
        const sk_st_tensor *ft = fname ? sk_st_find(&st, fname) : NULL;
        /* the shape the file must hold: (in, out) for a Conv1D file's Linear weights */
        const int tr = conv1d && sk_hf_gpt2_linear(m, t->name);
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
        if (z && t->ndim == 2) {
            if ((rc = load_q8_tensor(m, z, &st, path, t, ft, scratch))) break;
            continue;
        }
        int nh = 0;
        const int rope = sk_hf_rope_proj(m, t->name, &nh);
        if ((rc = sk_st_get_f32(&st, fname, tr || rope ? scratch : dst, t->numel))) break;
        if (tr) sk_transpose(dst, scratch, (size_t)t->shape[1], (size_t)t->shape[0]);   /* (in, out) -> (out, in) */
        if (rope) sk_hf_permute_rope_rows(dst, scratch, nh, m->hs, t->ndim > 1 ? m->C : 1, 0);
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
    if (!rc && z && !m->cfg.untied_head && sk_st_find(&st, head))
        rc = sk_error(SK_EFORMAT, "%s: the 8-bit file holds lm_head.weight, but the config ties it to the token embedding", path);
    if (!rc && !z && !m->cfg.untied_head && sk_st_find(&st, head)) {
        size_t n = (size_t)m->cfg.vocab_size * m->C;
        float *tmp = malloc(n * sizeof(float));
        if (!tmp) rc = sk_error(SK_ENOMEM, "out of memory");
        else if (!(rc = sk_st_get_f32(&st, head, tmp, n)) && memcmp(tmp, m->params, n * sizeof(float)))
            rc = sk_error(SK_EFORMAT, "%s: lm_head.weight differs from the token embedding, but the config ties them "
                          "(tie_word_embeddings, or untied_head 0)", path);
        free(tmp);
    }
    if (rc) { sk_q8_free(z); sk_model_free(m); }
    else { m->q8 = z; *out = m; }
done:
    return rc;
}

