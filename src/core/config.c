/* Model configuration: defaults, presets, validation (the Skip-Layer routing through its plan,
 * src/core/route.c), parsing, RoPE's frequencies. */
#include "core/config.h"
#include "core/route.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sk_config_default(sk_config *c) {
    memset(c, 0, sizeof *c);
    c->family = SK_GPT2;
    c->n_layer = 4; c->n_head = 4; c->n_embd = 128; c->block_size = 256;
    c->bias = 1; c->gelu = SK_GELU_ERF;
    c->norm_eps = 1e-5f; c->rope_theta = 1e6f;
    c->rope_factor = 1.0f; c->rope_low_freq_factor = 1.0f; c->rope_high_freq_factor = 4.0f;
    c->rope_original_ctx = 8192;
}

int sk_config_preset(sk_config *c, const char *name) {
    sk_config_default(c);
    struct { const char *name; int L, H, C, T, V; } p[] = {
        {"gpt2", 12, 12, 768, 1024, 50257},
        {"gpt2-medium", 24, 16, 1024, 1024, 50257},
        {"gpt2-large", 36, 20, 1280, 1024, 50257},
        {"nano", 4, 4, 128, 256, 0},
        {"small", 6, 6, 384, 256, 0},
    };
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) {
        if (strcmp(name, p[i].name) == 0) {
            c->n_layer = p[i].L; c->n_head = p[i].H; c->n_embd = p[i].C;
            c->block_size = p[i].T; c->vocab_size = p[i].V;
            return SK_OK;
        }
    }
    return sk_error(SK_EINVAL, "unknown preset '%s' (known: gpt2, gpt2-medium, gpt2-large, nano, small)", name);
}

/* Runs before sk_config_check, so n_layer and n_head may be anything an option parsed:
 * the products are taken in 64 bits (the check refuses such values afterwards). */
void sk_config_sla_default(sk_config *c) {
    c->n_skip_layer = (int)(3LL * c->n_layer / 4);
    int kvh = c->n_kv_head > 0 ? c->n_kv_head : c->n_head;
    int group = c->n_head / (kvh > 0 ? kvh : 1);
    if (group < 1) group = 1;
    /* 3/4 of the heads, rounded down to whole KV groups (at least one group). */
    int nh = (int)(3LL * c->n_head / 4 / group * group);
    c->n_skip_head = nh > 0 ? nh : group;
}

static int derive_sizes(sk_config *c);

#define RANGE(field, lo, hi) do { \
    if ((long long)c->field < (long long)(lo) || (long long)c->field > (long long)(hi)) \
        return sk_error(SK_EINVAL, "config: %s = %lld is out of range [%lld, %lld]", #field, \
                        (long long)c->field, (long long)(lo), (long long)(hi)); } while (0)

int sk_config_check(sk_config *c) { return sk_config_check_plan(c, NULL); }

/* a config's plan, checked as sk_config_check checks it (here, not in route.c: the check
 * builds the plan, so route.c never calls back into this file) */
int sk_route_plan_new(sk_route_plan **plan, const sk_config *cfg) {
    sk_config c = *cfg;
    return sk_config_check_plan(&c, plan);
}

int sk_config_check_plan(sk_config *c, sk_route_plan **plan) {
    if (plan) *plan = NULL;
    if (c->family != SK_GPT2 && c->family != SK_LLAMA)
        return sk_error(SK_EINVAL, "config: family must be gpt2 or llama");
    RANGE(n_layer, 1, 1024);
    RANGE(n_head, 1, 1024);
    RANGE(n_embd, 1, 65536);
    RANGE(block_size, 1, 1 << 24);
    RANGE(vocab_size, 1, 1 << 24);
    if (c->n_embd % c->n_head)
        return sk_error(SK_EINVAL, "config: n_embd (%d) must be a multiple of n_head (%d)", c->n_embd, c->n_head);
    if (c->n_kv_head == 0) c->n_kv_head = c->n_head;
    RANGE(n_kv_head, 1, c->n_head);
    if (c->n_head % c->n_kv_head)
        return sk_error(SK_EINVAL, "config: n_kv_head (%d) must divide n_head (%d)", c->n_kv_head, c->n_head);
    if (c->family == SK_GPT2 && c->n_kv_head != c->n_head)
        return sk_error(SK_EINVAL, "config: n_kv_head must equal n_head (%d) for the gpt2 family", c->n_head);
    if (c->family == SK_LLAMA && (c->n_embd / c->n_head) % 2)
        return sk_error(SK_EINVAL, "config: head size n_embd/n_head (%d) must be even for RoPE", c->n_embd / c->n_head);
    if (!(c->dropout >= 0.0f && c->dropout < 1.0f))
        return sk_error(SK_EINVAL, "config: dropout = %g is out of range [0, 1)", c->dropout);
    if (!(c->norm_eps > 0.0f && c->norm_eps < 1.0f))
        return sk_error(SK_EINVAL, "config: norm_eps = %g is out of range (0, 1)", c->norm_eps);
    if (!(c->rope_theta > 1.0f))
        return sk_error(SK_EINVAL, "config: rope_theta = %g must be > 1", c->rope_theta);
    if (c->rope_scaling != SK_ROPE_NONE) {
        if (c->rope_scaling != SK_ROPE_LINEAR && c->rope_scaling != SK_ROPE_LLAMA3)
            return sk_error(SK_EINVAL, "config: rope_scaling must be none, linear or llama3");
        if (c->family != SK_LLAMA || c->sinusoidal)
            return sk_error(SK_EINVAL, "config: rope_scaling needs RoPE (the llama family without sinusoidal positions)");
        if (!(c->rope_factor >= 1.0f))
            return sk_error(SK_EINVAL, "config: rope_factor = %g must be >= 1", c->rope_factor);
        if (c->rope_scaling == SK_ROPE_LLAMA3) {
            if (!(c->rope_low_freq_factor > 0.0f && c->rope_high_freq_factor > c->rope_low_freq_factor))
                return sk_error(SK_EINVAL, "config: rope_low_freq_factor = %g and rope_high_freq_factor = %g must "
                                "satisfy 0 < low < high", c->rope_low_freq_factor, c->rope_high_freq_factor);
            RANGE(rope_original_ctx, 1, 1 << 24);
        }
    }
    if (c->bias != 0 && c->bias != 1) return sk_error(SK_EINVAL, "config: bias must be 0 or 1");
    if (c->family == SK_LLAMA) c->bias = 0;          /* the llama family has no bias vectors but qkv_bias's */
    if (c->sinusoidal != 0 && c->sinusoidal != 1) return sk_error(SK_EINVAL, "config: sinusoidal must be 0 or 1");
    if (c->relu != 0 && c->relu != 1) return sk_error(SK_EINVAL, "config: relu must be 0 or 1");
    if (c->untied_head != 0 && c->untied_head != 1) return sk_error(SK_EINVAL, "config: untied_head must be 0 or 1");
    if (c->qkv_bias != 0 && c->qkv_bias != 1) return sk_error(SK_EINVAL, "config: qkv_bias must be 0 or 1");
    if (c->qkv_bias && c->family != SK_LLAMA)
        return sk_error(SK_EINVAL, "config: qkv_bias is the llama family's (GPT-2's biases are `bias`)");
    if (c->sinusoidal && c->n_embd % 2) return sk_error(SK_EINVAL, "config: n_embd (%d) must be even for sinusoidal positions", c->n_embd);
    if (c->gelu != SK_GELU_ERF && c->gelu != SK_GELU_TANH)
        return sk_error(SK_EINVAL, "config: gelu must be erf or tanh");
    RANGE(n_skip_layer, 0, INT_MAX);
    if (memchr(c->routing, 0, sizeof c->routing) == NULL)
        return sk_error(SK_EINVAL, "config: routing is longer than %zu characters", sizeof c->routing - 1);
    RANGE(n_skip_head, 0, c->n_head);
    int group = c->n_head / c->n_kv_head;
    if (c->n_skip_head % group)
        return sk_error(SK_EINVAL, "config: n_skip_head (%d) must be a multiple of the KV group size n_head/n_kv_head (%d)",
                        c->n_skip_head, group);
    sk_route_plan *p;
    int rc = sk_route_plan_build(&p, c);
    if (rc) return rc;
    rc = derive_sizes(c);
    if (rc || !plan) sk_route_plan_free(p);
    else *plan = p;
    return rc;
}

/* The rest of sk_config_check: padded_vocab_size and ffn_hidden, derived and checked. */
static int derive_sizes(sk_config *c) {
    if (c->padded_vocab_size == 0) c->padded_vocab_size = (c->vocab_size + 63) / 64 * 64;
    if (c->padded_vocab_size < c->vocab_size)
        return sk_error(SK_EINVAL, "config: padded_vocab_size (%d) must be >= vocab_size (%d)",
                        c->padded_vocab_size, c->vocab_size);
    if (c->family == SK_LLAMA && c->ffn_hidden == 0 && !c->relu) {
        /* Llama's rule: 2/3 of 4C, rounded up to a multiple of 64. */
        int h = 8 * c->n_embd / 3;
        c->ffn_hidden = (h + 63) / 64 * 64;
    }
    if (c->ffn_hidden == 0) c->ffn_hidden = 4 * c->n_embd;
    RANGE(ffn_hidden, 1, 1 << 20);
    return SK_OK;
}

static int parse_int(const char *key, const char *v, int *out) {
    char *end; errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < INT_MIN || x > INT_MAX)
        return sk_error(SK_EINVAL, "config: %s = '%s' is not an integer", key, v);
    *out = (int)x;
    return SK_OK;
}
static int parse_float(const char *key, const char *v, float *out) {
    char *end; errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x) || !isfinite((float)x))
        return sk_error(SK_EINVAL, "config: %s = '%s' is not a finite number", key, v);
    *out = (float)x;
    return SK_OK;
}

int sk_config_set(sk_config *c, const char *k, const char *v) {
    struct { const char *name; int *ip; float *fp; } f[] = {
        {"n_layer", &c->n_layer, 0}, {"n_head", &c->n_head, 0}, {"n_kv_head", &c->n_kv_head, 0},
        {"n_embd", &c->n_embd, 0}, {"block_size", &c->block_size, 0},
        {"vocab_size", &c->vocab_size, 0}, {"padded_vocab_size", &c->padded_vocab_size, 0},
        {"bias", &c->bias, 0}, {"n_skip_layer", &c->n_skip_layer, 0},
        {"n_skip_head", &c->n_skip_head, 0}, {"ffn_hidden", &c->ffn_hidden, 0},
        {"sinusoidal", &c->sinusoidal, 0}, {"relu", &c->relu, 0}, {"untied_head", &c->untied_head, 0},
        {"qkv_bias", &c->qkv_bias, 0},
        {"dropout", 0, &c->dropout}, {"norm_eps", 0, &c->norm_eps}, {"rope_theta", 0, &c->rope_theta},
        {"rope_factor", 0, &c->rope_factor}, {"rope_low_freq_factor", 0, &c->rope_low_freq_factor},
        {"rope_high_freq_factor", 0, &c->rope_high_freq_factor}, {"rope_original_ctx", &c->rope_original_ctx, 0},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (strcmp(k, f[i].name)) continue;
        return f[i].ip ? parse_int(k, v, f[i].ip) : parse_float(k, v, f[i].fp);
    }
    if (!strcmp(k, "gelu")) {
        if (!strcmp(v, "erf")) c->gelu = SK_GELU_ERF;
        else if (!strcmp(v, "tanh")) c->gelu = SK_GELU_TANH;
        else return sk_error(SK_EINVAL, "config: gelu = '%s' (allowed: erf, tanh)", v);
        return SK_OK;
    }
    if (!strcmp(k, "rope_scaling")) {
        if (!strcmp(v, "none")) c->rope_scaling = SK_ROPE_NONE;
        else if (!strcmp(v, "linear")) c->rope_scaling = SK_ROPE_LINEAR;
        else if (!strcmp(v, "llama3")) c->rope_scaling = SK_ROPE_LLAMA3;
        else return sk_error(SK_EINVAL, "config: rope_scaling = '%s' (allowed: none, linear, llama3)", v);
        return SK_OK;
    }
    if (!strcmp(k, "routing")) {
        if (strlen(v) >= sizeof c->routing)
            return sk_error(SK_EINVAL, "config: routing is longer than %zu characters", sizeof c->routing - 1);
        size_t j = 0;
        for (const char *q = v; *q; q++) if (*q != ' ') c->routing[j++] = *q;
        c->routing[j] = 0;
        return SK_OK;
    }
    if (!strcmp(k, "family")) {
        if (!strcmp(v, "gpt2")) c->family = SK_GPT2;
        else if (!strcmp(v, "llama")) c->family = SK_LLAMA;
        else return sk_error(SK_EINVAL, "config: family = '%s' (allowed: gpt2, llama)", v);
        return SK_OK;
    }
    return sk_error(SK_EINVAL, "config: unknown field '%s'", k);
}

/* printf onto the end of the string in buf (n bytes) */
static void append(char *buf, size_t n, const char *fmt, ...) {
    size_t l = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + l, n > l ? n - l : 0, fmt, ap);
    va_end(ap);
}

void sk_config_describe(const sk_config *c, char *buf, size_t n) {
    snprintf(buf, n, "%s L=%d H=%d KV=%d C=%d F=%d T=%d V=%d bias=%d mlp=%s pos=%s dropout=%g skip=%d/%d",
             c->family == SK_GPT2 ? "gpt2" : "llama", c->n_layer, c->n_head, c->n_kv_head,
             c->n_embd, c->ffn_hidden, c->block_size, c->vocab_size, c->bias,
             c->relu ? "relu" : c->family == SK_LLAMA ? "swiglu" : c->gelu == SK_GELU_TANH ? "gelu-tanh" : "gelu",
             c->sinusoidal ? "sinusoidal" : c->family == SK_LLAMA ? "rope" : "learned",
             c->dropout, c->n_skip_layer, c->n_skip_head);
    if (c->untied_head) append(buf, n, " head=untied");
    if (c->qkv_bias && c->family == SK_LLAMA) append(buf, n, " qkv_bias=1");
    if (c->rope_scaling == SK_ROPE_LINEAR && c->family == SK_LLAMA) append(buf, n, " rope=linear/%g", c->rope_factor);
    if (c->rope_scaling == SK_ROPE_LLAMA3 && c->family == SK_LLAMA)
        append(buf, n, " rope=llama3/%g(%g,%g,%d)", c->rope_factor, c->rope_low_freq_factor, c->rope_high_freq_factor,
               c->rope_original_ctx);
    if (c->routing[0]) append(buf, n, " routing=%s", c->routing);
}

/* RoPE's frequencies, with Hugging Face's rope_scaling (transformers' modeling_rope_utils):
 * "linear" divides every frequency by factor (positions stretched factor times); "llama3"
 * (Llama 3.1 / 3.2) leaves the fast ones (wavelength 2 pi / f below original_ctx /
 * high_freq_factor) alone, divides the slow ones (wavelength above original_ctx /
 * low_freq_factor) by factor, and blends the two in between with weight
 * s = (original_ctx / wavelength - low) / (high - low): f ((1 - s) / factor + s). */
void sk_rope_freqs(const sk_config *c, int hs, double *freq) {
    const double pi = 3.14159265358979323846, k = c->rope_factor;
    const double lo = c->rope_low_freq_factor, hi = c->rope_high_freq_factor, ctx = c->rope_original_ctx;
    for (int j = 0; j < hs / 2; j++) {
        double f = 1.0 / pow((double)c->rope_theta, (double)(2 * j) / hs);
        if (c->rope_scaling == SK_ROPE_LINEAR) f /= k;
        else if (c->rope_scaling == SK_ROPE_LLAMA3) {
            double wavelen = 2 * pi / f;
            if (wavelen > ctx / lo) f /= k;
            else if (!(wavelen < ctx / hi)) {
                double s = (ctx / wavelen - lo) / (hi - lo);
                f = (1 - s) * f / k + s * f;
            }
        }
        freq[j] = f;
    }
}
