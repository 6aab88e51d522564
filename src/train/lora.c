/* LoRA adapters (docs/training.md): for each adapted matrix W0 (out, in) of the frozen base,
 * A (r, in) and B (out, r), the layer computing W0 x + s B A drop(x), s = alpha / r (PEFT's
 * LoRA with lora_dropout, use_rslora false). Training attaches the adapters to the model as
 * branches of their own (sk_adapters, core/model.h) on a frozen base: the model's backward
 * pass computes no weight gradient and holds no gradient buffer, the branches accumulate dA and
 * dB, and only A and B have AdamW state. Each adapter draws its dropout mask from its own
 * stream, SK_LORA_STREAM0 + its index, with the pass's dropout seed.
 *
 * Files: PEFT's adapter_config.json and adapter_model.safetensors, tensor names
 * base_model.model.<module>.lora_A.weight (r, in) and .lora_B.weight (out, r) with <module>
 * the Hugging Face module name (model.layers.N.self_attn.q_proj, transformer.h.N.attn.c_attn).
 * A Llama q/k projection's rows are in HF's order in files (as the base's are), so lora_B's
 * rows of q_proj and k_proj are permuted on save and back on load. */
#include "base/fileio.h"
#include "base/json.h"
#include "core/model.h"
#include "core/quant.h"
#include "io/io.h"
#include "skiplm_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int tensor;                 /* index in the model's tensor table */
    size_t off;                 /* floats in the parameter buffer */
    int out, in, nh;            /* nh > 0: q/k projection of nh heads (rows permuted in files) */
    char module[96];            /* the HF module name, e.g. model.layers.0.self_attn.q_proj */
    size_t a, b;                /* offsets of A and B in the adapter's buffers */
} lora_t;

struct sk_lora {
    int rank;
    float alpha, scale;
    lora_t *t; int n;
    float *w, *g, *m, *v;       /* A and B of every matrix, their gradients and AdamW moments */
    size_t nw;
    size_t nw0;                 /* floats of the adapted base matrices */
    float dropout;              /* the training's (sk_lora_attach), written as lora_dropout */
    sk_adapters ad;             /* the branches while attached (sk_lora_attach) */
    char targets[256];          /* the short names, comma-separated */
    int gpt2;
};

/* the short name of a 2-D tensor inside a layer, and its module name; 0 if it is not one */
static int module_of(const sk_tensor *t, char *module, size_t n, const char **shortname) {
    if (t->ndim != 2) return 0;
    const size_t len = strlen(t->name);
    if (len < 8 || strcmp(t->name + len - 7, ".weight")) return 0;
    if (strncmp(t->name, "model.layers.", 13) && strncmp(t->name, "transformer.h.", 14)) return 0;
    snprintf(module, n, "%.*s", (int)(len - 7), t->name);
    const char *dot = strrchr(module, '.');
    *shortname = dot ? dot + 1 : module;
    return 1;
}

/* the target list: "q,k,v,o,gate,up,down" (q_proj ...) or full names; GPT-2: c_attn, c_proj
 * (both), c_fc; "all": every matrix of the layers */
static int targeted(const char *targets, const char *shortname, int gpt2) {
    if (!strcmp(targets, "all")) return 1;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", targets);
    for (char *s = strtok(buf, ","); s; s = strtok(NULL, ",")) {
        if (!strcmp(s, shortname)) return 1;
        char full[64];
        snprintf(full, sizeof full, "%s_proj", s);
        if (!gpt2 && !strcmp(full, shortname)) return 1;
    }
    return 0;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void sk_lora_free(sk_lora *l) {
    if (!l) return;
    sk_lora_detach(l, NULL);
    free(l->t); free(l->w); free(l->g); free(l->m); free(l->v);
    free(l);
}

/* the table of adapted matrices and the buffers (A, B zero) */
static int lora_alloc(sk_lora **out, const sk_model *m, int rank, float alpha, const char *targets) {
    *out = NULL;
    const sk_config *c = sk_model_config(m);
    if (rank < 1 || rank > 4096) return sk_error(SK_EINVAL, "LoRA rank %d: give 1 to 4096", rank);
    if (!(alpha > 0) || !isfinite(alpha)) return sk_error(SK_EINVAL, "LoRA alpha must be a positive number");
    sk_lora *l = calloc(1, sizeof *l);
    if (!l) return sk_error(SK_ENOMEM, "out of memory");
    l->rank = rank; l->alpha = alpha; l->scale = alpha / (float)rank;
    l->gpt2 = c->family == SK_GPT2;
    snprintf(l->targets, sizeof l->targets, "%s", targets);
    int nt;
    const sk_tensor *ts = sk_model_tensors(m, &nt);
    l->t = calloc((size_t)nt, sizeof *l->t);
    if (!l->t) { sk_lora_free(l); return sk_error(SK_ENOMEM, "out of memory"); }
    int found_any = 0;
    for (int i = 0; i < nt; i++) {
        char module[96];
        const char *sn;
        if (!module_of(&ts[i], module, sizeof module, &sn) || !targeted(targets, sn, l->gpt2)) continue;
        lora_t *e = &l->t[l->n++];
        e->tensor = i; e->off = ts[i].offset;
        e->out = (int)ts[i].shape[0]; e->in = (int)ts[i].shape[1];
        snprintf(e->module, sizeof e->module, "%s", module);
        e->nh = 0;
        if (!l->gpt2 && (!strcmp(sn, "q_proj") || !strcmp(sn, "k_proj")))
            e->nh = !strcmp(sn, "q_proj") ? c->n_head : (c->n_kv_head ? c->n_kv_head : c->n_head);
        e->a = l->nw; l->nw += (size_t)rank * e->in;
        e->b = l->nw; l->nw += (size_t)e->out * rank;
        l->nw0 += (size_t)e->out * e->in;
        found_any = 1;
    }
    if (!found_any) {
        sk_lora_free(l);
        return sk_error(SK_EINVAL, "LoRA targets '%s' name no matrix of the model (%s: %s)", targets,
                        c->family == SK_GPT2 ? "GPT-2" : "Llama", c->family == SK_GPT2 ? "c_attn, c_proj, c_fc" : "q, k, v, o, gate, up, down");
    }
    int rc = sk_mem_check(4 * l->nw * sizeof(float), "the LoRA adapter (A, B, their gradients and AdamW state)");
    if (!rc) {
        l->w = calloc(l->nw, sizeof(float)); l->g = calloc(l->nw, sizeof(float));
        l->m = calloc(l->nw, sizeof(float)); l->v = calloc(l->nw, sizeof(float));
        if (!l->w || !l->g || !l->m || !l->v) rc = sk_error(SK_ENOMEM, "out of memory for the LoRA adapter");
    }
    if (rc) { sk_lora_free(l); return rc; }
    *out = l;
    return SK_OK;
}

int sk_lora_new(sk_lora **out, const sk_model *m, int rank, float alpha, const char *targets, uint64_t seed) {
    int rc = lora_alloc(out, m, rank, alpha, targets);
    if (rc) return rc;
    sk_lora *l = *out;
    /* PEFT's init: A as nn.Linear's default (kaiming_uniform, a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in))), B zero */
    uint64_t s = seed ? seed : 1;
    for (int i = 0; i < l->n; i++) {
        const float bound = 1.0f / sqrtf((float)l->t[i].in);
        float *A = l->w + l->t[i].a;
        for (size_t k = 0; k < (size_t)rank * l->t[i].in; k++)
            A[k] = bound * (float)(2.0 * ((double)(splitmix(&s) >> 11) / 9007199254740992.0) - 1.0);
    }
    return SK_OK;
}

int sk_lora_count(const sk_lora *l) { return l->n; }
size_t sk_lora_num_params(const sk_lora *l) { return l->nw; }
size_t sk_lora_base_floats(const sk_lora *l) { return l->nw0; }
float *sk_lora_weights(sk_lora *l) { return l->w; }
float *sk_lora_grads(sk_lora *l) { return l->g; }

/* W += s B A for every adapted matrix (the model then computes the adapted model) */
static void merge_into(const sk_lora *l, sk_model *m) {
    float *p = sk_model_params(m);
    for (int i = 0; i < l->n; i++) {
        const lora_t *e = &l->t[i];
        const float *A = l->w + e->a, *B = l->w + e->b;
        float *W = p + e->off;
        const int r = l->rank, in = e->in;
        #pragma omp parallel for schedule(static)
        for (int o = 0; o < e->out; o++) {
            float *row = W + (size_t)o * in;
            for (int j = 0; j < in; j++) {
                float acc = 0.0f;
                for (int k = 0; k < r; k++) acc += B[(size_t)o * r + k] * A[(size_t)k * in + j];
                row[j] = row[j] + l->scale * acc;
            }
        }
    }
}

/* the site of a module (SK_SITE_*) and its layer; -1 if none */
static int site_of(const char *module, int *layer) {
    const char *p = !strncmp(module, "model.layers.", 13) ? module + 13 : !strncmp(module, "transformer.h.", 14) ? module + 14 : NULL;
    if (!p) return -1;
    char *end;
    long n = strtol(p, &end, 10);
    if (end == p || *end != '.') return -1;
    *layer = (int)n;
    static const char *const names[][2] = {
        {"self_attn.q_proj", "0"}, {"self_attn.k_proj", "0"}, {"self_attn.v_proj", "0"}, {"attn.c_attn", "0"},
        {"self_attn.o_proj", "1"}, {"attn.c_proj", "1"}, {"mlp.gate_proj", "2"}, {"mlp.up_proj", "2"}, {"mlp.c_fc", "2"},
        {"mlp.down_proj", "3"}, {"mlp.c_proj", "3"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(end + 1, names[i][0])) return names[i][1][0] - '0';
    return -1;
}

int sk_lora_attach(sk_lora *l, sk_model *m, int max_tokens, float dropout) {
    if (!(dropout >= 0.0f && dropout < 1.0f)) return sk_error(SK_EINVAL, "LoRA dropout %g: give 0 <= p < 1", (double)dropout);
    if (max_tokens < 1) return sk_error(SK_EINVAL, "LoRA: max_tokens must be >= 1");
    sk_lora_detach(l, m);
    sk_adapters *ad = &l->ad;
    l->dropout = dropout;
    ad->rank = l->rank; ad->scale = l->scale; ad->dropout = dropout; ad->max_tokens = (size_t)max_tokens;
    const size_t N = (size_t)max_tokens;
    int max_in = 0;
    for (int i = 0; i < l->n; i++) max_in = l->t[i].in > max_in ? l->t[i].in : max_in;
    const size_t bytes = (N * (size_t)max_in + N * (size_t)l->rank * (size_t)(l->n + 1)) * sizeof(float);
    int rc = sk_mem_check(bytes, "the LoRA branches' workspaces");
    if (rc) return rc;
    ad->a = calloc((size_t)l->n, sizeof *ad->a);
    ad->scratch = malloc(N * (size_t)max_in * sizeof(float));
    ad->scratch_r = malloc(N * (size_t)l->rank * sizeof(float));
    if (!ad->a || !ad->scratch || !ad->scratch_r) { sk_lora_detach(l, m); return sk_error(SK_ENOMEM, "out of memory for the LoRA branches"); }
    ad->n = l->n;
    for (int i = 0; i < l->n; i++) {
        const lora_t *e = &l->t[i];
        sk_adapter *a = &ad->a[i];
        int layer = -1;
        const int site = site_of(e->module, &layer);
        if (site < 0 || layer < 0 || layer >= m->L) { sk_lora_detach(l, m); return sk_error(SK_EINVAL, "LoRA: %s is no matrix of a layer", e->module); }
        const size_t base = sk_model_site_offset(m, layer, site);
        if (e->off < base || (e->off - base) % (size_t)e->in) {
            sk_lora_detach(l, m);
            return sk_error(SK_EINVAL, "LoRA: %s does not lie in its layer's matrix", e->module);
        }
        a->layer = layer; a->site = site; a->row0 = (int)((e->off - base) / (size_t)e->in);
        a->out = e->out; a->in = e->in;
        a->A = l->w + e->a; a->B = l->w + e->b;
        a->dA = l->g + e->a; a->dB = l->g + e->b;
        a->stream = SK_LORA_STREAM0 + (uint64_t)i;
        a->u = malloc(N * (size_t)l->rank * sizeof(float));
        if (!a->u) { sk_lora_detach(l, m); return sk_error(SK_ENOMEM, "out of memory for the LoRA branches"); }
    }
    sk_model_set_frozen(m, 1);
    if ((rc = sk_model_set_adapters(m, ad))) { sk_lora_detach(l, m); return rc; }
    return SK_OK;
}

void sk_lora_detach(sk_lora *l, sk_model *m) {
    if (m && m->ad == &l->ad) sk_model_set_adapters(m, NULL);
    if (l->ad.a) for (int i = 0; i < l->ad.n; i++) free(l->ad.a[i].u);
    free(l->ad.a); free(l->ad.scratch); free(l->ad.scratch_r);
    memset(&l->ad, 0, sizeof l->ad);
}

size_t sk_lora_workspace_bytes(const sk_lora *l) {
    const sk_adapters *ad = &l->ad;
    if (!ad->a) return 0;
    int max_in = 0;
    for (int i = 0; i < l->n; i++) max_in = l->t[i].in > max_in ? l->t[i].in : max_in;
    return (ad->max_tokens * (size_t)max_in + ad->max_tokens * (size_t)l->rank * (size_t)(l->n + 1)) * sizeof(float);
}

void sk_lora_zero_grad(sk_lora *l) { memset(l->g, 0, l->nw * sizeof(float)); }

float *sk_lora_moments(sk_lora *l, int which) { return which ? l->v : l->m; }

double sk_lora_step(sk_lora *l, const sk_adamw_cfg *c, double lr, long t, float clip) {
    /* A and B as spans of at most SK_SPAN_FLOATS, as the model's; weight decay only where asked (c->weight_decay) */
    const int ns = (int)((l->nw + SK_SPAN_FLOATS - 1) / SK_SPAN_FLOATS);
    sk_span *spans = malloc((size_t)ns * sizeof *spans);
    if (!spans) return NAN;
    for (int i = 0; i < ns; i++) {
        spans[i].offset = (size_t)i * SK_SPAN_FLOATS;
        spans[i].n = l->nw - spans[i].offset < SK_SPAN_FLOATS ? l->nw - spans[i].offset : SK_SPAN_FLOATS;
        spans[i].decay = c->weight_decay > 0;
    }
    double norm = sk_grad_norm(l->g, spans, ns);
    if (clip > 0 && isfinite(norm)) sk_clip_grads(l->g, spans, ns, norm, clip);
    if (isfinite(norm)) sk_adamw_step(l->w, l->g, l->m, l->v, spans, ns, c, lr, t);
    free(spans);
    return norm;
}

int sk_lora_merge(const sk_lora *l, sk_model *m) {
    merge_into(l, m);
    if (!m->q8) return SK_OK;
    /* an 8-bit base: each merged matrix quantized again (as --q8 quantizes), its fp32 copy set to the result */
    float *p = sk_model_params(m);
    for (int i = 0; i < l->n; i++) {
        const lora_t *e = &l->t[i];
        uint16_t *d = (uint16_t *)sk_q8_scales(m->q8, e->off);
        const size_t n = (size_t)e->out * e->in;
        if (!d || n % SK_Q8_BLOCK) return sk_error(SK_EINVAL, "the 8-bit base has no scales for %s", e->module);
        sk_q8_quantize(m->q8->q + e->off, d, p + e->off, n);
        sk_q8_dequantize(p + e->off, m->q8->q + e->off, d, n);
    }
    return SK_OK;
}

/* ---------------------------------------------------------------- files */

int sk_lora_save(const sk_lora *l, const sk_model *m, const char *dir, const char *base) {
    (void)m;
    sk_st_writer *w = sk_st_writer_new();
    float *tmp = malloc(l->nw * sizeof(float));
    char (*names)[160] = malloc((size_t)l->n * 2 * sizeof *names);
    int rc = w && tmp && names ? sk_st_add_meta(w, "format", "pt") : sk_error(SK_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < l->n; i++) {
        const lora_t *e = &l->t[i];
        const float *B = l->w + e->b;
        if (e->nh) {                                  /* lora_B's rows in HF's order, as the base's */
            sk_hf_permute_rope_rows(tmp + e->b, B, e->nh, e->out / e->nh, l->rank, 1);
            B = tmp + e->b;
        }
        snprintf(names[2 * i], 160, "base_model.model.%s.lora_A.weight", e->module);
        snprintf(names[2 * i + 1], 160, "base_model.model.%s.lora_B.weight", e->module);
        const int64_t sa[2] = {l->rank, e->in}, sb[2] = {e->out, l->rank};
        rc = sk_st_add(w, names[2 * i], SK_F32, 2, sa, l->w + e->a);
        if (!rc) rc = sk_st_add(w, names[2 * i + 1], SK_F32, 2, sb, B);
    }
    size_t n = strlen(dir) + 40;
    char *path = malloc(n);
    if (!rc && !path) rc = sk_error(SK_ENOMEM, "out of memory");
    if (!rc) {
        snprintf(path, n, "%s/adapter_model.safetensors", dir);
        rc = sk_st_write(w, path);
    }
    if (!rc) {
        /* the target modules' short names that were adapted, in table order, without repeats */
        char mods[512] = "";
        size_t ml = 0;
        for (int i = 0; i < l->n; i++) {
            const char *sn = strrchr(l->t[i].module, '.') + 1;
            char q[72];
            snprintf(q, sizeof q, "\"%s\"", sn);
            if (strstr(mods, q)) continue;
            ml += (size_t)snprintf(mods + ml, sizeof mods - ml, "%s%s", ml ? ", " : "", q);
        }
        char *json = NULL;
        size_t jl = 0, jc = 0;
        char head[1024];
        int hl = snprintf(head, sizeof head,
                          "{\n  \"peft_type\": \"LORA\",\n  \"task_type\": \"CAUSAL_LM\",\n  \"r\": %d,\n  \"lora_alpha\": %.9g,\n"
                          "  \"lora_dropout\": %.9g,\n  \"target_modules\": [%s],\n  \"bias\": \"none\",\n"
                          "  \"fan_in_fan_out\": %s,\n  \"use_rslora\": false,\n  \"use_dora\": false,\n"
                          "  \"init_lora_weights\": true,\n  \"inference_mode\": true,\n  \"modules_to_save\": null,\n"
                          "  \"layers_to_transform\": null,\n  \"base_model_name_or_path\": ",
                          l->rank, (double)l->alpha, (double)l->dropout, mods, l->gpt2 ? "true" : "false");
        if (sk_json_write_raw(&json, &jl, &jc, head, (size_t)hl) ||
            (base ? sk_json_write_str(&json, &jl, &jc, base, strlen(base)) : sk_json_write_raw(&json, &jl, &jc, "null", 4)) ||
            sk_json_write_raw(&json, &jl, &jc, "\n}\n", 3))
            rc = sk_error(SK_EINVAL, "the base model's name is not valid UTF-8");
        else {
            snprintf(path, n, "%s/adapter_config.json", dir);
            rc = sk_write_atomic(path, json, jl);
        }
        free(json);
    }
    free(path); free(tmp); free(names);
    sk_st_writer_free(w);
    return rc;
}

int sk_lora_load(sk_lora **out, const sk_model *m, const char *dir) {
    *out = NULL;
    size_t n = strlen(dir) + 40;
    char *path = malloc(n);
    if (!path) return sk_error(SK_ENOMEM, "out of memory");
    snprintf(path, n, "%s/adapter_config.json", dir);
    uint8_t *text; size_t len;
    int rc = sk_read_file(path, &text, &len);
    if (rc) { free(path); return rc; }
    sk_json j;
    char err[160];
    rc = sk_json_parse((const char *)text, len, &j, err, sizeof err) ? sk_error(SK_EFORMAT, "%s: %s", path, err) : SK_OK;
    free(text);
    if (rc) { free(path); return rc; }
    const sk_json *pt = sk_json_get(&j, "peft_type"), *r = sk_json_get(&j, "r"), *a = sk_json_get(&j, "lora_alpha");
    const sk_json *tm = sk_json_get(&j, "target_modules"), *rs = sk_json_get(&j, "use_rslora"), *dora = sk_json_get(&j, "use_dora");
    const sk_json *bias = sk_json_get(&j, "bias");
    char targets[256] = "";
    if (j.type != SK_JSON_OBJ || !pt || pt->type != SK_JSON_STR || strcmp(pt->str, "LORA"))
        rc = sk_error(SK_EFORMAT, "%s: peft_type must be \"LORA\"", path);
    else if (!r || r->type != SK_JSON_NUM || r->num != floor(r->num) || r->num < 1 || r->num > 4096)
        rc = sk_error(SK_EFORMAT, "%s: \"r\" must be a whole number from 1 to 4096", path);
    else if (!a || a->type != SK_JSON_NUM || !(a->num > 0))
        rc = sk_error(SK_EFORMAT, "%s: \"lora_alpha\" must be a positive number", path);
    else if ((rs && rs->type == SK_JSON_BOOL && rs->boolean) || (dora && dora->type == SK_JSON_BOOL && dora->boolean))
        rc = sk_error(SK_EFORMAT, "%s: use_rslora / use_dora are not supported (skiplm's LoRA scales by lora_alpha / r)", path);
    else if (bias && bias->type == SK_JSON_STR && strcmp(bias->str, "none"))
        rc = sk_error(SK_EFORMAT, "%s: bias \"%s\": skiplm's adapters have no bias terms (\"none\")", path, bias->str);
    else if (!tm || tm->type != SK_JSON_ARR || tm->n == 0)
        rc = sk_error(SK_EFORMAT, "%s: \"target_modules\" must be a non-empty list of names", path);
    for (int i = 0; !rc && i < tm->n; i++) {
        if (tm->items[i].type != SK_JSON_STR || strlen(targets) + tm->items[i].str_len + 2 >= sizeof targets)
            rc = sk_error(SK_EFORMAT, "%s: target_modules[%d] is not a short name", path, i);
        else { if (targets[0]) strcat(targets, ","); strcat(targets, tm->items[i].str); }
    }
    const int rank = rc ? 0 : (int)r->num;
    const float alpha = rc ? 0 : (float)a->num;
    sk_json_free(&j);
    sk_lora *l = NULL;
    if (!rc && (rc = lora_alloc(&l, m, rank, alpha, targets))) rc = sk_error(rc, "%s: %s", path, sk_last_error());
    sk_safetensors st;
    memset(&st, 0, sizeof st);
    if (!rc) {
        snprintf(path, n, "%s/adapter_model.safetensors", dir);
        rc = sk_st_read(path, &st);
    }
    int used = 0;
    for (int i = 0; !rc && i < l->n; i++) {
        lora_t *e = &l->t[i];
        char an[160], bn[160];
        snprintf(an, sizeof an, "base_model.model.%s.lora_A.weight", e->module);
        snprintf(bn, sizeof bn, "base_model.model.%s.lora_B.weight", e->module);
        const sk_st_tensor *ta = sk_st_find(&st, an), *tb = sk_st_find(&st, bn);
        if (!ta || !tb) { rc = sk_error(SK_EFORMAT, "%s: tensor '%s' is missing (target_modules names it)", path, ta ? bn : an); break; }
        if (ta->ndim != 2 || ta->shape[0] != rank || ta->shape[1] != e->in || tb->ndim != 2 || tb->shape[0] != e->out || tb->shape[1] != rank) {
            rc = sk_error(SK_EFORMAT, "%s: '%s' / '%s' must be [%d, %d] and [%d, %d] for the base model", path, an, bn, rank, e->in, e->out, rank);
            break;
        }
        if ((rc = sk_st_get_f32(&st, an, l->w + e->a, (size_t)rank * e->in))) break;
        if ((rc = sk_st_get_f32(&st, bn, e->nh ? l->g : l->w + e->b, (size_t)e->out * rank))) break;
        if (e->nh) sk_hf_permute_rope_rows(l->w + e->b, l->g, e->nh, e->out / e->nh, rank, 0);
        used += 2;
    }
    for (size_t k = 0; !rc && k < l->nw; k++)
        if (!isfinite(l->w[k])) rc = sk_error(SK_ENUM, "%s: a non-finite adapter weight", path);
    if (!rc && used != st.n_tensors)
        rc = sk_error(SK_EFORMAT, "%s: %d tensors, of which %d are the adapters of the model's target modules: the others "
                      "(another base model's, or a layer the config leaves out) are not used", path, st.n_tensors, used);
    if (l) memset(l->g, 0, l->nw * sizeof(float));
    sk_st_free(&st);
    free(path);
    if (rc) { sk_lora_free(l); return rc; }
    *out = l;
    return SK_OK;
}
