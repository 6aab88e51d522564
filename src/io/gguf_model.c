/* A model from a GGUF file and to one (docs/files.md): the config from the architecture's
 * metadata (llama, qwen2, gpt2: what llama.cpp's convert_hf_to_gguf.py writes), tensor names
 * mapped between skiplm's (HF's) and llama.cpp's, and the tensor layouts:
 *   - llama (Llama, Mistral): llama.cpp rotates adjacent pairs, and its converter permutes HF's
 *     q/k rows (halves) into that order: exactly skiplm's own order, so the rows are taken and
 *     written as they are (HF's halves appear only in skiplm's HF files, weights.c);
 *   - qwen2: llama.cpp rotates halves (NEOX) and stores q/k as HF does: permuted as a HF file's;
 *   - gpt2: fused attn_qkv, Linear weights (out, in) as llama.cpp's converter transposes HF's
 *     Conv1D: skiplm's own layout.
 * Types: F32, F16, BF16 converted to fp32; Q8_0 (blocks of an fp16 scale then 32 int8, one
 * block per 32 consecutive elements of a row) is skiplm's q8 (the same blocks, held as an
 * int8 array and a scale array): a Q8_0 matrix is copied exactly, no requantization. */
#include "core/model.h"
#include "core/quant.h"
#include "io/io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------- names */

/* skiplm's name prefix within a layer -> llama.cpp's */
static const char *const LLAMA_NAMES[][2] = {
    {"input_layernorm.", "attn_norm."}, {"self_attn.q_proj.", "attn_q."}, {"self_attn.k_proj.", "attn_k."},
    {"self_attn.v_proj.", "attn_v."}, {"self_attn.o_proj.", "attn_output."}, {"post_attention_layernorm.", "ffn_norm."},
    {"mlp.gate_proj.", "ffn_gate."}, {"mlp.up_proj.", "ffn_up."}, {"mlp.down_proj.", "ffn_down."},
};
static const char *const GPT2_NAMES[][2] = {
    {"ln_1.", "attn_norm."}, {"attn.c_attn.", "attn_qkv."}, {"attn.c_proj.", "attn_output."},
    {"ln_2.", "ffn_norm."}, {"mlp.c_fc.", "ffn_up."}, {"mlp.c_proj.", "ffn_down."},
};
static const char *const TOP_NAMES[][2] = {
    {"model.embed_tokens.weight", "token_embd.weight"}, {"model.norm.weight", "output_norm.weight"},
    {"transformer.wte.weight", "token_embd.weight"}, {"transformer.wpe.weight", "position_embd.weight"},
    {"transformer.ln_f.weight", "output_norm.weight"}, {"transformer.ln_f.bias", "output_norm.bias"},
    {"lm_head.weight", "output.weight"},
};

/* llama.cpp's name of one of the model's tensors into out; 1 if it has none */
static int gguf_name(const char *name, char *out, size_t n) {
    for (size_t i = 0; i < sizeof TOP_NAMES / sizeof TOP_NAMES[0]; i++)
        if (!strcmp(name, TOP_NAMES[i][0])) { snprintf(out, n, "%s", TOP_NAMES[i][1]); return 0; }
    int l, k = 0;
    const char *const (*tab)[2] = NULL;
    size_t nt = 0;
    if (sscanf(name, "model.layers.%d.%n", &l, &k) == 1 && k) { tab = LLAMA_NAMES; nt = sizeof LLAMA_NAMES / sizeof LLAMA_NAMES[0]; }
    else if (sscanf(name, "transformer.h.%d.%n", &l, &k) == 1 && k) { tab = GPT2_NAMES; nt = sizeof GPT2_NAMES / sizeof GPT2_NAMES[0]; }
    for (size_t i = 0; tab && i < nt; i++) {
        size_t pl = strlen(tab[i][0]);
        if (!strncmp(name + k, tab[i][0], pl)) { snprintf(out, n, "blk.%d.%s%s", l, tab[i][1], name + k + pl); return 0; }
    }
    return 1;
}

/* ---------------------------------------------------------------- config */

static int get_req(const sk_gguf *g, const char *arch, const char *key, int64_t *v, int64_t lo, int64_t hi) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    int r = sk_gguf_get_int(g, k, v);
    if (r < 0) return SK_EFORMAT;
    if (r > 0) return sk_error(SK_EFORMAT, "%s: metadata '%s' is missing", g->path, k);
    if (*v < lo || *v > hi) return sk_error(SK_EFORMAT, "%s: metadata '%s' is %lld (allowed %lld to %lld)", g->path, k, (long long)*v, (long long)lo, (long long)hi);
    return SK_OK;
}
/* an optional number: 0 (set), 1 (absent), or an error (< 0 mapped to SK_EFORMAT) */
static int get_opt_f(const sk_gguf *g, const char *arch, const char *key, double *v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    int r = sk_gguf_get_float(g, k, v);
    if (r == 0 && !isfinite(*v)) return sk_error(SK_EFORMAT, "%s: metadata '%s' is not finite", g->path, k), -1;
    return r;
}

static int bytes_equal(const sk_gguf_tensor *a, const sk_gguf_tensor *b) {
    return a && b && a->type == b->type && a->nbytes == b->nbytes && !memcmp(a->ne, b->ne, sizeof a->ne) &&
           !memcmp(a->data, b->data, (size_t)a->nbytes);
}

/* *neox: q/k rows in HF's halves order (qwen2) */
static int gguf_config(sk_config *c, const sk_gguf *g, int *neox) {
    sk_config_default(c);
    size_t al;
    const char *a = sk_gguf_get_str(g, "general.architecture", &al);
    if (!a) return sk_error(SK_EFORMAT, "%s: metadata 'general.architecture' (a string) is missing", g->path);
    char arch[32];
    if (al >= sizeof arch || memchr(a, 0, al)) return sk_error(SK_EFORMAT, "%s: general.architecture is not a short name", g->path);
    memcpy(arch, a, al); arch[al] = 0;
    const int gpt2 = !strcmp(arch, "gpt2"), qwen2 = !strcmp(arch, "qwen2"), llama = !strcmp(arch, "llama");
    if (!gpt2 && !qwen2 && !llama)
        return sk_error(SK_EFORMAT, "%s: architecture '%s': skiplm runs GGUF files of llama (Llama, Mistral), qwen2 and gpt2",
                        g->path, arch);
    *neox = qwen2;
    int64_t L, C, H, T, F, Hkv;
    int rc;
    if ((rc = get_req(g, arch, "block_count", &L, 1, 4096)) || (rc = get_req(g, arch, "embedding_length", &C, 1, 1 << 20)) ||
        (rc = get_req(g, arch, "attention.head_count", &H, 1, 1 << 16)) || (rc = get_req(g, arch, "context_length", &T, 1, 1 << 24)))
        return rc;
    char k[128];
    snprintf(k, sizeof k, "%s.feed_forward_length", arch);
    if (gpt2 && sk_gguf_find(g, k) == NULL) F = 4 * C;
    else if ((rc = get_req(g, arch, "feed_forward_length", &F, 1, 1 << 24))) return rc;
    snprintf(k, sizeof k, "%s.attention.head_count_kv", arch);
    if (sk_gguf_find(g, k) == NULL) Hkv = H;
    else if ((rc = get_req(g, arch, "attention.head_count_kv", &Hkv, 1, H))) return rc;
    if (C % H) return sk_error(SK_EFORMAT, "%s: embedding_length %lld is not a multiple of head_count %lld", g->path, (long long)C, (long long)H);
    static const char *const dims[] = {"attention.key_length", "attention.value_length", "rope.dimension_count"};
    for (int i = gpt2 ? 2 : 0; i < 3; i++) {
        int64_t d;
        snprintf(k, sizeof k, "%s.%s", arch, dims[i]);
        int r = sk_gguf_get_int(g, k, &d);
        if (r < 0) return SK_EFORMAT;
        if (r == 0 && d != C / H)
            return sk_error(SK_EFORMAT, "%s: %s is %lld: skiplm's heads are embedding_length / head_count = %lld wide, all rotated",
                            g->path, k, (long long)d, (long long)(C / H));
    }
    static const char *const off[] = {"expert_count", "attention.sliding_window", "attention.clamp_kqv", "logit_scale"};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
        double v;
        int r = get_opt_f(g, arch, off[i], &v);
        if (r < 0) return SK_EFORMAT;
        if (r == 0 && v != 0 && !(i == 1 && v >= T) && !(i == 3 && v == 1))
            return sk_error(SK_EFORMAT, "%s: %s.%s is set: skiplm's models do not have it", g->path, arch, off[i]);
    }
    char buf[64];
#define SET(field, val) do { snprintf(buf, sizeof buf, "%lld", (long long)(val)); if ((rc = sk_config_set(c, field, buf))) return sk_error(rc, "%s: %s", g->path, sk_last_error()); } while (0)
    if ((rc = sk_config_set(c, "family", gpt2 ? "gpt2" : "llama"))) return rc;
    SET("n_layer", L); SET("n_embd", C); SET("n_head", H); SET("block_size", T); SET("ffn_hidden", F);
    if (!gpt2) SET("n_kv_head", Hkv);
#undef SET
    double eps, theta;
    int r = get_opt_f(g, arch, gpt2 ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon", &eps);
    if (r < 0) return SK_EFORMAT;
    if (r > 0) return sk_error(SK_EFORMAT, "%s: metadata '%s.%s' is missing", g->path, arch, gpt2 ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon");
    if (!(eps > 0 && eps < 1)) return sk_error(SK_EFORMAT, "%s: the norm epsilon %g is not in (0, 1)", g->path, eps);
    c->norm_eps = (float)eps;
    if (gpt2) {
        c->bias = 1;
        c->gelu = SK_GELU_TANH;                      /* llama.cpp's GPT-2: ggml_gelu, the tanh form */
        size_t gl;
        const char *ge = sk_gguf_get_str(g, "skiplm.gelu", &gl);   /* skiplm's export of an erf-GELU model */
        if (ge && gl == 3 && !memcmp(ge, "erf", 3)) c->gelu = SK_GELU_ERF;
    } else {
        c->bias = 0;
        r = get_opt_f(g, arch, "rope.freq_base", &theta);
        if (r < 0) return SK_EFORMAT;
        c->rope_theta = r ? 10000.0f : (float)theta;
        size_t sl;
        snprintf(k, sizeof k, "%s.rope.scaling.type", arch);
        const char *st = sk_gguf_get_str(g, k, &sl);
        if (st && !(sl == 4 && !memcmp(st, "none", 4))) {
            double f;
            if (!(sl == 6 && !memcmp(st, "linear", 6)))
                return sk_error(SK_EFORMAT, "%s: %s is '%.*s': skiplm reads RoPE scaling none and linear from a GGUF file", g->path,
                                k, (int)(sl < 32 ? sl : 32), st);
            if (get_opt_f(g, arch, "rope.scaling.factor", &f) || !(f > 0))
                return sk_error(SK_EFORMAT, "%s: linear RoPE scaling needs a positive %s.rope.scaling.factor", g->path, arch);
            c->rope_scaling = SK_ROPE_LINEAR;
            c->rope_factor = (float)f;
        }
        if (sk_gguf_tensor_find(g, "rope_freqs.weight"))
            return sk_error(SK_EFORMAT, "%s: tensor 'rope_freqs.weight' (Llama 3.1's RoPE frequency factors) is not read by skiplm: "
                            "load the model's Hugging Face folder instead (its config.json's rope_scaling llama3)", g->path);
        c->qkv_bias = sk_gguf_tensor_find(g, "blk.0.attn_q.bias") != NULL;
    }
    const sk_gguf_tensor *emb = sk_gguf_tensor_find(g, "token_embd.weight"), *out = sk_gguf_tensor_find(g, "output.weight");
    if (!emb || emb->ndim != 2) return sk_error(SK_EFORMAT, "%s: tensor 'token_embd.weight' (2-D) is missing", g->path);
    if (emb->ne[1] > (1 << 24)) return sk_error(SK_EFORMAT, "%s: a vocabulary of %lld tokens", g->path, (long long)emb->ne[1]);
    c->vocab_size = (int)emb->ne[1];
    c->untied_head = out && !bytes_equal(out, emb);
    if ((rc = sk_config_check(c))) return sk_error(rc, "%s: %s", g->path, sk_last_error());
    return SK_OK;
}

/* ------------------------------------------------------------ conversion */

static float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* n elements of a F32/F16/BF16/Q8_0 tensor into fp32 */
static void to_f32(float *dst, const sk_gguf_tensor *t, size_t n) {
    const uint8_t *p = t->data;
    switch (t->type) {
    case SK_GGML_F32: memcpy(dst, p, n * 4); break;
    case SK_GGML_F16: for (size_t i = 0; i < n; i++) dst[i] = sk_f16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8)); break;
    case SK_GGML_BF16: for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8)); break;
    case SK_GGML_Q8_0:
        for (size_t b = 0; b < n / 32; b++) {
            const uint8_t *blk = p + 34 * b;
            const float d = sk_f16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
            for (int k = 0; k < 32; k++) dst[32 * b + k] = (float)(int8_t)blk[2 + k] * d;
        }
        break;
    }
}

/* a Q8_0 tensor of n elements into q (n) and d (n / 32); SK_ENUM for a non-finite scale */
static int split_q8(int8_t *q, uint16_t *d, const sk_gguf_tensor *t, size_t n, const char *path) {
    for (size_t b = 0; b < n / 32; b++) {
        const uint8_t *blk = t->data + 34 * b;
        d[b] = (uint16_t)(blk[0] | blk[1] << 8);
        if ((d[b] & 0x7c00u) == 0x7c00u)
            return sk_error(SK_ENUM, "%s: tensor '%s': block %zu has a non-finite scale", path, t->name, b);
        memcpy(q + 32 * b, blk + 2, 32);
    }
    return SK_OK;
}

int sk_model_load_gguf(sk_model **out, const sk_gguf *g, const sk_config *override) {
    *out = NULL;
    sk_config cfg;
    int neox = 0, rc = gguf_config(&cfg, g, &neox);
    if (rc) return rc;
    if (override) {
        if (override->n_head && override->n_head != cfg.n_head)
            return sk_error(SK_EINVAL, "%s: n_head %d was given but the file says %d", g->path, override->n_head, cfg.n_head);
        if (override->routing[0]) memcpy(cfg.routing, override->routing, sizeof cfg.routing);
        if (override->n_skip_layer) cfg.n_skip_layer = override->n_skip_layer;
        if (override->n_skip_head) cfg.n_skip_head = override->n_skip_head;
    }
    sk_model *m;
    if ((rc = sk_model_new_empty(&m, &cfg))) return sk_error(rc, "%s: %s", g->path, sk_last_error());
    /* 8-bit: any matrix stored Q8_0 */
    int q8 = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        char gn[128];
        const sk_gguf_tensor *gt = gguf_name(m->tensors[i].name, gn, sizeof gn) ? NULL : sk_gguf_tensor_find(g, gn);
        if (gt && gt->type == SK_GGML_Q8_0 && m->tensors[i].ndim == 2) q8 = 1;
    }
    sk_q8 *z = NULL;
    if (q8 && (rc = sk_q8_alloc(m, &z))) { rc = sk_error(rc, "%s: %s", g->path, sk_last_error()); goto fail; }
    size_t scratch_n = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        int nh;
        if (neox && sk_hf_rope_proj(m, m->tensors[i].name, &nh)) scratch_n = m->tensors[i].numel > scratch_n ? m->tensors[i].numel : scratch_n;
    }
    float *scratch = scratch_n ? malloc(scratch_n * sizeof(float)) : NULL;
    if (scratch_n && !scratch) { rc = sk_error(SK_ENOMEM, "out of memory"); goto fail; }
    for (int i = 0; !rc && i < m->n_tensors; i++) {
        const sk_tensor *t = &m->tensors[i];
        char gn[128];
        const sk_gguf_tensor *gt = gguf_name(t->name, gn, sizeof gn) ? NULL : sk_gguf_tensor_find(g, gn);
        if (!gt) { rc = sk_error(SK_EFORMAT, "%s: tensor '%s' (skiplm's %s) is missing", g->path, gn, t->name); break; }
        const int64_t cols = t->ndim == 2 ? t->shape[1] : t->shape[0], rows = t->ndim == 2 ? t->shape[0] : 1;
        if (gt->ndim != t->ndim || gt->ne[0] != cols || (t->ndim == 2 && gt->ne[1] != rows)) {
            rc = sk_error(SK_EFORMAT, "%s: tensor '%s' has ne [%lld, %lld] but the config needs [%lld, %lld] (ne[0] the row length)",
                          g->path, gn, (long long)gt->ne[0], (long long)(gt->ndim > 1 ? gt->ne[1] : 1), (long long)cols, (long long)rows);
            break;
        }
        if (gt->type != SK_GGML_F32 && gt->type != SK_GGML_F16 && gt->type != SK_GGML_BF16 && gt->type != SK_GGML_Q8_0) {
            rc = sk_error(SK_EFORMAT, "%s: tensor '%s' is %s: skiplm reads GGUF tensors of types F32, F16, BF16 and Q8_0 (make one "
                          "with llama.cpp: llama-quantize --allow-requantize IN.gguf OUT.gguf Q8_0 (the weights are requantized: "
                          "better from an F16 file), or convert_hf_to_gguf.py --outtype q8_0 from the Hugging Face folder)",
                          g->path, gn, sk_ggml_type_name(gt->type));
            break;
        }
        int nh = 0;
        const int rope = neox && sk_hf_rope_proj(m, t->name, &nh);
        float *dst = m->params + t->offset;
        if (z && t->ndim == 2 && gt->type == SK_GGML_Q8_0) {
            int8_t *q = z->q + t->offset;
            uint16_t *d = (uint16_t *)sk_q8_scales(z, t->offset);
            const size_t nb = (size_t)cols / 32;
            if (rope) {     /* int8 rows and scale rows from halves to pairs, through scratch */
                int8_t *sq = (int8_t *)scratch;              /* 4 n bytes: n for q, n / 16 for d */
                uint16_t *sd = (uint16_t *)(sq + t->numel);
                if (!(rc = split_q8(sq, sd, gt, t->numel, g->path))) {
                    sk_permute_rows_bytes(q, sq, nh, m->hs, (size_t)cols, 0);
                    sk_permute_rows_bytes(d, sd, nh, m->hs, nb * sizeof *d, 0);
                }
            } else rc = split_q8(q, d, gt, t->numel, g->path);
            if (!rc) sk_q8_dequantize(dst, q, d, t->numel);
            continue;
        }
        to_f32(rope ? scratch : dst, gt, t->numel);
        if (rope) sk_hf_permute_rope_rows(dst, scratch, nh, m->hs, t->ndim > 1 ? (int)cols : 1, 0);
        for (size_t k = 0; k < t->numel; k++)
            if (!isfinite(dst[k])) { rc = sk_error(SK_ENUM, "%s: tensor '%s' holds a non-finite value at element %zu", g->path, gn, k); break; }
        /* a matrix of another type in an 8-bit file: quantized as --q8 would */
        if (!rc && z && t->ndim == 2) {
            uint16_t *d = (uint16_t *)sk_q8_scales(z, t->offset);
            sk_q8_quantize(z->q + t->offset, d, dst, t->numel);
            sk_q8_dequantize(dst, z->q + t->offset, d, t->numel);
        }
    }
    free(scratch);
    /* every tensor of the file is the model's (a tied model's output.weight is its embedding's
     * copy): one that is not (a bias skiplm's models lack, say) would change the numbers */
    for (int k = 0; !rc && k < g->n_tensors; k++) {
        const char *gn = g->tensors[k].name;
        int used = !strcmp(gn, "output.weight");
        for (int i = 0; !used && i < m->n_tensors; i++) {
            char n2[128];
            used = !gguf_name(m->tensors[i].name, n2, sizeof n2) && !strcmp(n2, gn);
        }
        if (!used) rc = sk_error(SK_EFORMAT, "%s: tensor '%s' is not part of skiplm's %s model (a weight skiplm's models do not "
                                 "have)", g->path, gn, m->cfg.family == SK_GPT2 ? "gpt2" : "llama");
    }
    if (rc) goto fail;
    m->q8 = z;
    *out = m;
    return SK_OK;
fail:
    sk_q8_free(z);
    sk_model_free(m);
    return rc;
}

/* --------------------------------------------------------------- export */

static uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);       /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                                              /* nearest even */
    return (uint16_t)(u >> 16);
}

/* the ggml file_type of a model whose matrices are `type` */
static uint32_t file_type(int type) { return type == SK_GGML_Q8_0 ? 7 : type == SK_GGML_BF16 ? 32 : 0; }

int sk_model_to_gguf(const sk_model *m, sk_gguf_writer *w, int type) {
    const sk_config *c = &m->cfg;
    const int gpt2 = c->family == SK_GPT2;
    const char *arch = gpt2 ? "gpt2" : c->qkv_bias ? "qwen2" : "llama";
    if (type != SK_GGML_F32 && type != SK_GGML_BF16 && type != SK_GGML_Q8_0)
        return sk_error(SK_EINVAL, "GGUF export writes the types f32, bf16 and q8_0 (got %s)", sk_ggml_type_name(type));
    if (m->q8 && type != SK_GGML_Q8_0)
        return sk_error(SK_EINVAL, "the model's weights are 8-bit: it is written as q8_0 (its own blocks) or from the fp32 weights");
    int bl, bs;
    if (sk_route_borrows(m->plan, &bl, &bs))
        return sk_error(SK_EINVAL, "llama.cpp has no Skip-Layer Attention (layer %d reads layer %d's K/V): a GGUF file "
                        "would compute another model; keep skiplm's safetensors file for it", bl, bs);
    if (c->sinusoidal) return sk_error(SK_EINVAL, "llama.cpp's %s has no sinusoidal positions", arch);
    if (c->relu) return sk_error(SK_EINVAL, "llama.cpp's %s has no ReLU MLP", arch);
    if (c->rope_scaling == SK_ROPE_LLAMA3)
        return sk_error(SK_EINVAL, "RoPE scaling llama3 is not written to GGUF by skiplm (llama.cpp needs a rope_freqs tensor): "
                        "export a Hugging Face folder and convert it with llama.cpp's convert_hf_to_gguf.py");
    if (type == SK_GGML_Q8_0 && (m->C % 32 || m->F % 32))
        return sk_error(SK_EINVAL, "q8_0 needs n_embd and the MLP width to be multiples of 32 (n_embd %d, MLP %d)", m->C, m->F);
    char k[128];
    int rc = sk_gguf_add_str(w, "general.architecture", arch, strlen(arch));
    if (!rc) rc = sk_gguf_add_str(w, "general.name", "skiplm", 6);
    if (!rc) rc = sk_gguf_add_u32(w, "general.file_type", file_type(type));
#define U32(key, v) do { snprintf(k, sizeof k, "%s.%s", arch, key); if (!rc) rc = sk_gguf_add_u32(w, k, (uint32_t)(v)); } while (0)
#define F32(key, v) do { snprintf(k, sizeof k, "%s.%s", arch, key); if (!rc) rc = sk_gguf_add_f32(w, k, (float)(v)); } while (0)
    U32("context_length", c->block_size);
    U32("embedding_length", c->n_embd);
    U32("block_count", c->n_layer);
    U32("feed_forward_length", m->F);
    U32("attention.head_count", c->n_head);
    U32("vocab_size", c->vocab_size);
    if (gpt2) F32("attention.layer_norm_epsilon", c->norm_eps);
    else {
        U32("attention.head_count_kv", m->Hkv);
        F32("attention.layer_norm_rms_epsilon", c->norm_eps);
        F32("rope.freq_base", c->rope_theta);
        U32("rope.dimension_count", m->hs);
        if (c->rope_scaling == SK_ROPE_LINEAR) {
            snprintf(k, sizeof k, "%s.rope.scaling.type", arch);
            if (!rc) rc = sk_gguf_add_str(w, k, "linear", 6);
            F32("rope.scaling.factor", c->rope_factor);
        }
    }
#undef U32
#undef F32
    /* llama.cpp computes GPT-2's tanh GELU; skiplm reads this key back to compute the erf one */
    if (!rc && gpt2 && c->gelu == SK_GELU_ERF) rc = sk_gguf_add_str(w, "skiplm.gelu", "erf", 3);
    for (int i = 0; !rc && i < m->n_tensors; i++) {
        const sk_tensor *t = &m->tensors[i];
        char gn[128];
        if (gguf_name(t->name, gn, sizeof gn)) return sk_error(SK_EINVAL, "tensor '%s' has no GGUF name", t->name);
        const int64_t cols = t->ndim == 2 ? t->shape[1] : t->shape[0], rows = t->ndim == 2 ? t->shape[0] : 1;
        const int64_t ne[2] = {cols, rows};
        const float *src = m->params + t->offset;
        int nh;
        const int rope = !gpt2 && c->qkv_bias && sk_hf_rope_proj(m, t->name, &nh);   /* qwen2: HF's halves */
        const int tt = t->ndim == 2 ? type : SK_GGML_F32;
        const size_t n = t->numel;
        void *buf;
        if (tt == SK_GGML_Q8_0) {
            uint8_t *b = malloc(n / 32 * 34);
            int8_t *q = malloc(n);
            uint16_t *d = malloc(n / 32 * sizeof *d);
            rc = b && q && d ? SK_OK : sk_error(SK_ENOMEM, "out of memory");
            if (!rc) {
                if (m->q8) { memcpy(q, m->q8->q + t->offset, n); memcpy(d, sk_q8_scales(m->q8, t->offset), n / 32 * sizeof *d); }
                else sk_q8_quantize(q, d, src, n);
                if (rope) {
                    int8_t *q2 = malloc(n);
                    uint16_t *d2 = malloc(n / 32 * sizeof *d);
                    if (!q2 || !d2) rc = sk_error(SK_ENOMEM, "out of memory");
                    else {
                        sk_permute_rows_bytes(q2, q, nh, m->hs, (size_t)cols, 1);
                        sk_permute_rows_bytes(d2, d, nh, m->hs, (size_t)cols / 32 * sizeof *d, 1);
                        memcpy(q, q2, n); memcpy(d, d2, n / 32 * sizeof *d);
                    }
                    free(q2); free(d2);
                }
                for (size_t bl = 0; bl < n / 32; bl++) {
                    b[34 * bl] = (uint8_t)(d[bl] & 0xff); b[34 * bl + 1] = (uint8_t)(d[bl] >> 8);
                    memcpy(b + 34 * bl + 2, q + 32 * bl, 32);
                }
            }
            free(q); free(d);
            buf = b;
            if (rc) { free(b); break; }
        } else {
            float *f = malloc(n * sizeof(float));
            if (!f) { rc = sk_error(SK_ENOMEM, "out of memory"); break; }
            if (rope) sk_hf_permute_rope_rows(f, src, nh, m->hs, t->ndim > 1 ? (int)cols : 1, 1);
            else memcpy(f, src, n * sizeof(float));
            if (tt == SK_GGML_BF16) {
                uint16_t *h = (uint16_t *)f;                    /* in place: element i is read before it is written */
                for (size_t j = 0; j < n; j++) h[j] = f32_to_bf16(f[j]);
            }
            buf = f;
        }
        rc = sk_gguf_add_tensor(w, gn, tt, t->ndim, ne, buf, 1);
        /* a GPT-2 without biases: zero biases where llama.cpp's GPT-2 requires them (the same function) */
        const size_t gl = strlen(gn);
        if (!rc && gpt2 && !c->bias && gl > 7 && !strcmp(gn + gl - 7, ".weight") && strncmp(gn, "token_embd", 10) &&
            strncmp(gn, "position_embd", 13) && strcmp(gn, "output.weight")) {
            char bn[140];
            snprintf(bn, sizeof bn, "%.*s.bias", (int)(gl - 7), gn);
            const int64_t bne[1] = {t->ndim == 2 ? rows : cols};
            float *z = calloc((size_t)bne[0], sizeof(float));
            rc = z ? sk_gguf_add_tensor(w, bn, SK_GGML_F32, 1, bne, z, 1) : sk_error(SK_ENOMEM, "out of memory");
        }
        /* GPT-2's head in llama.cpp: output.weight, a copy of the embedding when tied (as its converter writes it) */
        if (!rc && gpt2 && !c->untied_head && !strcmp(t->name, "transformer.wte.weight")) {
            size_t bytes = tt == SK_GGML_Q8_0 ? n / 32 * 34 : tt == SK_GGML_BF16 ? n * 2 : n * 4;
            void *cp = malloc(bytes);
            if (!cp) { rc = sk_error(SK_ENOMEM, "out of memory"); break; }
            memcpy(cp, buf, bytes);
            rc = sk_gguf_add_tensor(w, "output.weight", tt, 2, ne, cp, 1);
        }
    }
    return rc;
}
