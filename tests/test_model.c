/* Model engine in C: finite-difference gradient checks of every layer kind (single ops and
 * whole models, dropout included), config validation messages, refusal of corrupt weight
 * files, determinism and thread-count behaviour. The PyTorch comparison is
 * tests/test_gpt2_torch.py. */
#include <limits.h>
#include "test.h"
#include "skiplm.h"
#include "core/config.h"
#include "core/ops.h"
#include "core/vmath.h"
#include <omp.h>
#include <unistd.h>

/* query head h of layer l's source layer, and whether layer l lends, from the config's routing
 * plan (-2: the plan was refused) */
static int plan_source(const sk_config *c, int l, int h) {
    sk_route_plan *p;
    if (sk_route_plan_new(&p, c)) return -2;
    int s = sk_route_plan_source(p, l, h);
    sk_route_plan_free(p);
    return s;
}
static int plan_lends(const sk_config *c, int l) {
    sk_route_plan *p;
    if (sk_route_plan_new(&p, c)) return -2;
    int s = sk_route_plan_lends(p, l);
    sk_route_plan_free(p);
    return s;
}

/* ---------------------------------------------------- op-level FD checks
 * f(x) = sum(op(x) * r) for a fixed random r; the backward with dout = r must equal the
 * central difference of f in each input element. */

#define EPS 1e-2f
typedef void (*fwd_fn)(float *out, const float *in, void *ctx);

static double fd_check(fwd_fn f, void *ctx, float *x, int nx, int nout, const float *analytic, const float *r) {
    float *o1 = malloc(sizeof(float) * nout), *o2 = malloc(sizeof(float) * nout);
    double worst = 0;
    for (int i = 0; i < nx; i++) {
        float keep = x[i];
        x[i] = keep + EPS; f(o1, x, ctx);
        x[i] = keep - EPS; f(o2, x, ctx);
        x[i] = keep;
        double s = 0;
        for (int k = 0; k < nout; k++) s += ((double)o1[k] - o2[k]) * r[k];
        double fd = s / (2 * EPS);
        double err = fabs(fd - analytic[i]) / (1e-2 + fabs(fd));
        if (err > worst) worst = err;
    }
    free(o1); free(o2);
    return worst;
}

typedef struct { int N, C, IC, OC, T, H, hs, F, tanh_; float *w, *b, *aux; int32_t *tok; } ctx_t;

static void f_ln(float *out, const float *in, void *c_) {
    ctx_t *c = c_; float st[64];
    sk_layernorm_forward(out, st, st + 32, in, c->w, c->b, c->N, c->C, 1e-5f);
}
static void f_ln_w(float *out, const float *w, void *c_) {
    ctx_t *c = c_; float st[64];
    sk_layernorm_forward(out, st, st + 32, c->aux, w, c->b, c->N, c->C, 1e-5f);
}
static void f_rms(float *out, const float *in, void *c_) {
    ctx_t *c = c_; float st[32];
    sk_rmsnorm_forward(out, st, in, c->w, c->N, c->C, 1e-6f);
}
static void f_rms_w(float *out, const float *w, void *c_) {
    ctx_t *c = c_; float st[32];
    sk_rmsnorm_forward(out, st, c->aux, w, c->N, c->C, 1e-6f);
}
static void f_gelu(float *out, const float *in, void *c_) { ctx_t *c = c_; sk_gelu_forward(out, in, c->N, c->tanh_); }
static void f_relu(float *out, const float *in, void *c_) { ctx_t *c = c_; sk_relu_forward(out, in, c->N); }
static void f_lin(float *out, const float *in, void *c_) { ctx_t *c = c_; sk_linear_forward(out, in, c->w, c->b, c->N, c->IC, c->OC); }
static void f_lin_w(float *out, const float *w, void *c_) { ctx_t *c = c_; sk_linear_forward(out, c->aux, w, c->b, c->N, c->IC, c->OC); }
static void f_swiglu(float *out, const float *in, void *c_) { ctx_t *c = c_; sk_swiglu_forward(out, in, c->N, c->F); }
static void f_rope(float *out, const float *in, void *c_) {
    ctx_t *c = c_;
    memcpy(out, in, sizeof(float) * c->T * c->H * c->hs);
    sk_rope(out, c->aux, 1, c->T, c->H * c->hs, 0, c->H, c->hs, 3, 0);
}
static void f_embed(float *out, const float *wte, void *c_) { ctx_t *c = c_; sk_embed_forward(out, c->tok, wte, c->aux, 1, c->T, c->C); }

/* the vectorised float math against libm (double) */
static void vmath_checks(void) {
    double we = 0, wf = 0, wt = 0;
    for (float x = -87.3f; x < 88.0f; x += 0.001237f) {
        double e = exp((double)x), rel = fabs(sk_fexp(x) - e) / e;
        if (rel > we) we = rel;
    }
    for (float x = -6.0f; x < 6.0f; x += 0.0001f) {
        wf = fmax(wf, fabs(sk_ferf(x) - erf((double)x)));
        wt = fmax(wt, fabs(sk_ftanh(x) - tanh((double)x)));
    }
    CHECK(we < 2.5e-7, "sk_fexp within 2 ulp of exp on [-87.3, 88] (max rel %.2e)", we);
    CHECK(sk_fexp(-100.0f) == 0.0f && isnan(sk_fexp(NAN)) && isinf(sk_fexp(INFINITY)) == 0 && sk_fexp(-INFINITY) == 0.0f,
          "sk_fexp: 0 below -87.3 and at -inf, NaN stays NaN, +inf clamps");
    CHECK(wf < 6e-7, "sk_ferf within 6e-7 of erf (max abs %.2e)", wf);
    CHECK(wt < 2e-7, "sk_ftanh within 2e-7 of tanh (max abs %.2e)", wt);
}

static void op_checks(void) {
    unsigned long long s = 11;
    ctx_t c = {0};
    float x[96], w[32], b[32], r[256], g[256], out[256], st[64];
    /* LayerNorm: input, weight, bias */
    c.N = 3; c.C = 8; c.w = w; c.b = b;
    fill_uniform(x, 24, &s); fill_uniform(w, 8, &s); fill_uniform(b, 8, &s); fill_uniform(r, 24, &s);
    float dw[8] = {0}, db[8] = {0};
    memset(g, 0, sizeof g);
    sk_layernorm_forward(out, st, st + 32, x, w, b, 3, 8, 1e-5f);
    sk_layernorm_backward(g, dw, db, r, x, w, st, st + 32, 3, 8);
    double e = fd_check(f_ln, &c, x, 24, 24, g, r);
    CHECK(e < 2e-2, "layernorm dinp vs finite differences (worst rel err %.1e)", e);
    c.aux = x;
    e = fd_check(f_ln_w, &c, w, 8, 24, dw, r);
    CHECK(e < 2e-2, "layernorm dweight vs finite differences (worst rel err %.1e)", e);
    /* RMSNorm */
    memset(g, 0, sizeof g); memset(dw, 0, sizeof dw);
    sk_rmsnorm_forward(out, st, x, w, 3, 8, 1e-6f);
    sk_rmsnorm_backward(g, dw, r, x, w, st, 3, 8);
    e = fd_check(f_rms, &c, x, 24, 24, g, r);
    CHECK(e < 2e-2, "rmsnorm dinp vs finite differences (worst rel err %.1e)", e);
    e = fd_check(f_rms_w, &c, w, 8, 24, dw, r);
    CHECK(e < 2e-2, "rmsnorm dweight vs finite differences (worst rel err %.1e)", e);
    /* GELU, both kinds */
    for (int t = 0; t < 2; t++) {
        c.N = 24; c.tanh_ = t;
        for (int i = 0; i < 24; i++) x[i] *= 3;
        sk_gelu_backward(g, x, r, 24, t);
        e = fd_check(f_gelu, &c, x, 24, 24, g, r);
        CHECK(e < 2e-2, "gelu (%s) vs finite differences (worst rel err %.1e)", t ? "tanh" : "erf", e);
        for (int i = 0; i < 24; i++) x[i] /= 3;
    }
    /* ReLU, inputs kept away from the kink */
    c.N = 24;
    for (int i = 0; i < 24; i++) x[i] = x[i] >= 0 ? x[i] + 0.1f : x[i] - 0.1f;
    sk_relu_backward(g, x, r, 24);
    e = fd_check(f_relu, &c, x, 24, 24, g, r);
    CHECK(e < 2e-2, "relu vs finite differences (worst rel err %.1e)", e);
    /* Linear: input, weight, bias */
    float lw[40], lb[5], dlw[40] = {0}, dlb[5] = {0};
    c.N = 3; c.IC = 8; c.OC = 5; c.w = lw; c.b = lb;
    fill_uniform(lw, 40, &s); fill_uniform(lb, 5, &s);
    sk_linear_backward(g, dlw, dlb, r, x, lw, 3, 8, 5);
    e = fd_check(f_lin, &c, x, 24, 15, g, r);
    CHECK(e < 2e-2, "linear dinp vs finite differences (worst rel err %.1e)", e);
    c.aux = x;
    e = fd_check(f_lin_w, &c, lw, 40, 15, dlw, r);
    CHECK(e < 2e-2, "linear dweight vs finite differences (worst rel err %.1e)", e);
    double bs = 0; for (int k = 0; k < 3; k++) bs += r[k * 5 + 2];
    CHECK(fabs(dlb[2] - bs) < 1e-5, "linear dbias = column sum of dout");
    /* SwiGLU */
    c.N = 3; c.F = 4;
    sk_swiglu_backward(g, x, r, 3, 4);
    e = fd_check(f_swiglu, &c, x, 24, 12, g, r);
    CHECK(e < 2e-2, "swiglu vs finite differences (worst rel err %.1e)", e);
    /* RoPE: backward is the inverse rotation */
    float tab[10 * 8];
    double freq[4];
    sk_config rc; sk_config_default(&rc); rc.rope_theta = 10000.0f;
    sk_rope_freqs(&rc, 8, freq);
    sk_rope_table(tab, 10, 8, freq);
    c.T = 3; c.H = 2; c.hs = 8; c.aux = tab;
    float xr[48], gr[48];
    fill_uniform(xr, 48, &s); fill_uniform(r, 48, &s);
    memcpy(gr, r, sizeof gr);
    sk_rope(gr, tab, 1, 3, 16, 0, 2, 8, 3, 1);
    e = fd_check(f_rope, &c, xr, 48, 48, gr, r);
    CHECK(e < 2e-2, "rope backward vs finite differences (worst rel err %.1e)", e);
    /* Embedding (wte with wpe) */
    int32_t tok[4] = {2, 0, 2, 1};
    float wte[3 * 4], wpe[4 * 4], dwte[12] = {0}, dwpe[16] = {0};
    fill_uniform(wte, 12, &s); fill_uniform(wpe, 16, &s); fill_uniform(r, 16, &s);
    c.T = 4; c.C = 4; c.tok = tok; c.aux = wpe;
    sk_embed_backward(dwte, dwpe, r, tok, 1, 4, 4);
    e = fd_check(f_embed, &c, wte, 12, 16, dwte, r);
    CHECK(e < 2e-2, "embedding dwte (repeated token) vs finite differences (worst rel err %.1e)", e);
}

/* ---------------------------------------------- whole-model FD checks */

static void model_fd(const char *name, sk_config cfg) {
    sk_model *m;
    if (sk_model_new(&m, &cfg, 3)) { CHECK(0, "%s: %s", name, sk_last_error()); return; }
    float *p = sk_model_params(m);
    int nt; const sk_tensor *ts = sk_model_tensors(m, &nt);
    unsigned long long s = 99;
    for (int i = 0; i < nt; i++) {   /* move every parameter off its init so each path matters */
        float tmp[1];
        for (size_t k = 0; k < ts[i].numel; k++) { fill_uniform(tmp, 1, &s); p[ts[i].offset + k] += 0.2f * tmp[0]; }
    }
    int B = 2, T = 7, N = B * T;
    int32_t in[14], tg[14];
    for (int i = 0; i < N; i++) { in[i] = (i * 5 + 1) % cfg.vocab_size; tg[i] = (i * 3 + 2) % cfg.vocab_size; }
    tg[3] = -1;
    float loss;
    sk_model_zero_grad(m);
    if (sk_model_forward_backward(m, in, tg, B, T, 1.0f, 1234, &loss)) { CHECK(0, "%s: %s", name, sk_last_error()); return; }
    const float *g = sk_model_grads(m);
    double worst = 0; const char *wname = "";
    int checked = 0;
    for (int i = 0; i < nt; i++) {
        /* the two largest-gradient entries of each tensor, and one fixed entry */
        size_t idx[3] = {0, 0, ts[i].numel / 2};
        for (size_t k = 0; k < ts[i].numel; k++) {
            double a = fabs(g[ts[i].offset + k]);
            if (a > fabs(g[ts[i].offset + idx[0]])) { idx[1] = idx[0]; idx[0] = k; }
            else if (a > fabs(g[ts[i].offset + idx[1]]) || idx[1] == idx[0]) idx[1] = k;
        }
        for (int j = 0; j < 3; j++) {
            float *w = p + ts[i].offset + idx[j], keep = *w, l1, l2;
            const float h = 1e-2f;
            *w = keep + h;
            sk_model_zero_grad(m);
            sk_model_forward_backward(m, in, tg, B, T, 1.0f, 1234, &l1);
            *w = keep - h;
            sk_model_zero_grad(m);
            sk_model_forward_backward(m, in, tg, B, T, 1.0f, 1234, &l2);
            *w = keep;
            double fd = ((double)l1 - l2) / (2 * h);
            double an = 0;
            sk_model_zero_grad(m);
            sk_model_forward_backward(m, in, tg, B, T, 1.0f, 1234, &loss);
            an = sk_model_grads(m)[ts[i].offset + idx[j]];
            double err = fabs(fd - an) / (2e-3 + fabs(fd));
            if (err > worst) { worst = err; wname = ts[i].name; }
            checked++;
        }
    }
    CHECK(worst < 5e-2, "%s: %d gradient entries vs finite differences of the loss (worst rel err %.1e at %s)",
          name, checked, worst, wname);
    sk_model_free(m);
}

/* --------------------------------------------------------- configs */

static void config_checks(void) {
    struct { const char *k, *v, *expect; } bad[] = {
        {"n_embd", "30", "n_embd (30) must be a multiple of n_head (4)"},
        {"n_skip_head", "5", "n_skip_head = 5 is out of range [0, 4]"},
        {"n_layer", "0", "n_layer = 0 is out of range [1, 1024]"},
        {"n_head", "-2", "n_head = -2 is out of range"},
        {"block_size", "0", "block_size = 0 is out of range"},
        {"dropout", "1", "dropout = 1 is out of range [0, 1)"},
        {"n_kv_head", "3", "n_kv_head"},
        {"vocab_size", "0", "vocab_size = 0 is out of range"},
        {"n_skip_layer", "-1", "n_skip_layer = -1 is out of range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sk_config c;
        sk_config_default(&c);
        c.vocab_size = 10;
        sk_config_set(&c, bad[i].k, bad[i].v);
        int rc = sk_config_check(&c);
        CHECK(rc == SK_EINVAL && strstr(sk_last_error(), bad[i].expect), "bad config %s=%s refused: %s", bad[i].k, bad[i].v, sk_last_error());
    }
    sk_config c;
    sk_config_default(&c);
    CHECK(sk_config_set(&c, "gelu", "relu6") == SK_EINVAL && strstr(sk_last_error(), "allowed: erf, tanh"), "bad gelu kind: %s", sk_last_error());
    CHECK(sk_config_set(&c, "n_layer", "4x") == SK_EINVAL && strstr(sk_last_error(), "not an integer"), "non-integer field: %s", sk_last_error());
    CHECK(sk_config_set(&c, "n_layers", "4") == SK_EINVAL && strstr(sk_last_error(), "unknown field 'n_layers'"), "unknown field: %s", sk_last_error());
    CHECK(sk_config_preset(&c, "gpt3") == SK_EINVAL, "unknown preset: %s", sk_last_error());
    /* GQA: n_skip_head must be whole KV groups */
    sk_config_default(&c);
    c.family = SK_LLAMA; c.vocab_size = 10; c.n_head = 4; c.n_kv_head = 2; c.n_skip_layer = 1; c.n_skip_head = 1;
    CHECK(sk_config_check(&c) == SK_EINVAL && strstr(sk_last_error(), "multiple of the KV group size"), "GQA skip heads must be whole groups: %s", sk_last_error());
    /* the llama family has no bias vectors: the default bias = 1 becomes 0, so the
     * description (and a saved config) says what the model has */
    sk_config_default(&c);
    c.family = SK_LLAMA; c.vocab_size = 10; c.n_head = 4; c.n_kv_head = 2;
    char desc[256];
    int llama_rc = sk_config_check(&c);
    sk_config_describe(&c, desc, sizeof desc);
    CHECK(llama_rc == 0 && c.bias == 0 && strstr(desc, "bias=0"), "llama config has bias=0: %s", desc);
    /* presets and the 3/4 rule */
    CHECK(sk_config_preset(&c, "gpt2") == 0 && c.n_layer == 12 && c.n_head == 12 && c.n_embd == 768 && c.vocab_size == 50257, "gpt2 preset is 12/12/768");
    sk_config_sla_default(&c);
    CHECK(c.n_skip_layer == 9 && c.n_skip_head == 9, "SLA 3/4 rule at 12 layers: 9/9");
    sk_config_check(&c);
    CHECK(c.padded_vocab_size == 50304, "padded vocab 50304 (got %d)", c.padded_vocab_size);
    sk_config_preset(&c, "gpt2-medium"); sk_config_sla_default(&c);
    CHECK(c.n_layer == 24 && c.n_head == 16 && c.n_embd == 1024 && c.n_skip_layer == 18 && c.n_skip_head == 12, "gpt2-medium 24/16/1024, SLA 18/12");
    sk_config_preset(&c, "gpt2-large"); sk_config_sla_default(&c);
    CHECK(c.n_layer == 36 && c.n_head == 20 && c.n_embd == 1280 && c.n_skip_layer == 27 && c.n_skip_head == 15, "gpt2-large 36/20/1280, SLA 27/15");
    /* the 3/4 rule runs before the check, on whatever the options parsed: huge values must
     * not overflow (fuzz_config found 3 * 1111111110; UBSan in make test SAN=1) and are then
     * refused by the check */
    c.n_layer = 1111111110; c.n_head = INT_MAX; c.n_kv_head = 0;
    sk_config_sla_default(&c);
    CHECK(c.n_skip_layer == 833333332 && c.n_skip_head == 1610612735 && sk_config_check(&c) == SK_EINVAL,
          "SLA 3/4 rule on n_layer 1111111110, n_head INT_MAX: %d/%d without overflow, then refused (%s)",
          c.n_skip_layer, c.n_skip_head, sk_last_error());
    /* routing */
    sk_config_default(&c);
    c.n_layer = 12; c.n_head = 12; c.n_embd = 48; c.n_skip_layer = 9; c.n_skip_head = 6; c.vocab_size = 10;
    CHECK(plan_source(&c, 8, 11) == 8 && plan_source(&c, 9, 5) == 9 && plan_source(&c, 9, 6) == 0 &&
          plan_source(&c, 11, 11) == 2, "routing: layer 9 head 6 reads layer 0, layer 11 reads layer 2");
    CHECK(plan_lends(&c, 2) && !plan_lends(&c, 3), "layers 0-2 lend, 3+ do not");
    c.n_skip_layer = 12;
    CHECK(plan_source(&c, 11, 11) == 11 && !plan_lends(&c, 0), "n_skip_layer >= n_layer: no skip");
    /* the general routing table */
    sk_config r;
    sk_config_default(&r);
    r.n_layer = 12; r.n_head = 12; r.vocab_size = 10; r.n_embd = 48;
    sk_config_set(&r, "routing", "9-11:6-11=-9");
    CHECK(sk_config_check(&r) == 0, "routing '9-11:6-11=-9' accepted");
    sk_config p = r; p.routing[0] = 0; p.n_skip_layer = 9; p.n_skip_head = 6;
    int same = 1;
    for (int l = 0; l < 12; l++) for (int h = 0; h < 12; h++) same &= plan_source(&r, l, h) == plan_source(&p, l, h);
    CHECK(same, "routing '9-11:6-11=-9' equals paper SLA 9/6 head by head");
    sk_config_set(&r, "routing", "1,3,5,7,9,11:*=-1");
    sk_config_check(&r);
    CHECK(plan_source(&r, 3, 0) == 2 && plan_source(&r, 4, 5) == 4 && plan_lends(&r, 2) && !plan_lends(&r, 3),
          "cross-layer attention: odd layers read the layer below");
    sk_config_set(&r, "routing", "6-11:6-8=-3; 9-11:9-11=-9");
    sk_config_check(&r);
    sk_route_plan *plan;
    const sk_route *runs = NULL;
    int nr = sk_route_plan_new(&plan, &r) == 0 ? sk_route_plan_runs(plan, 10, &runs) : 0;
    CHECK(nr == 3 && runs[0].src == 10 && runs[1].h0 == 6 && runs[1].src == 7 && runs[2].h0 == 9 && runs[2].src == 1,
          "multi-source: layer 10 reads itself, layer 7 (heads 6-8) and layer 1 (heads 9-11)");
    if (nr) sk_route_plan_free(plan);
    sk_config_set(&r, "routing", "*:6-11=-9");
    CHECK(sk_config_check(&r) == 0 && plan_source(&r, 3, 8) == 3 && plan_source(&r, 10, 8) == 1, "'*' layers skip layers without a source");
    const char *bad_routes[][2] = {
        {"2:0-3=-3", "layer 2 cannot read layer -1"}, {"12:0=-1", "outside [0, 12)"}, {"3:0-12=-1", "heads 0-12 outside"},
        {"3:0-1=+1", "source must be"}, {"3:0-1", "expected '='"}, {"3-1:0=-1", "outside"}, {"3:0=@5", "cannot read layer 5"},
        {"x", "expected a layer number"}, {"3:0=-1;;", "expected a layer number"},
    };
    for (size_t i = 0; i < sizeof bad_routes / sizeof bad_routes[0]; i++) {
        sk_config_set(&r, "routing", bad_routes[i][0]);
        int rc = sk_config_check(&r);
        CHECK(rc == SK_EINVAL && strstr(sk_last_error(), bad_routes[i][1]), "bad routing '%s': %s", bad_routes[i][0], sk_last_error());
    }
    sk_config_set(&r, "routing", "9-11:6-11=-9");
    r.n_skip_layer = 9;
    CHECK(sk_config_check(&r) == SK_EINVAL && strstr(sk_last_error(), "not both"), "routing with n_skip_*: %s", sk_last_error());
    sk_config_default(&r);
    r.family = SK_LLAMA; r.n_head = 4; r.n_kv_head = 2; r.vocab_size = 10;
    sk_config_set(&r, "routing", "2:1-3=-1");
    CHECK(sk_config_check(&r) == SK_EINVAL && strstr(sk_last_error(), "share a KV head"), "GQA routing must keep KV groups whole: %s", sk_last_error());
}

/* ------------------------------------------------------ weight files */

static void file_checks(void) {
    sk_config c;
    sk_config_default(&c);
    c.n_layer = 2; c.n_head = 2; c.n_embd = 16; c.vocab_size = 30; c.block_size = 16;
    sk_model *m, *m2;
    sk_model_new(&m, &c, 1);
    char path[] = "/tmp/sk_test_model_XXXXXX";
    int fd = mkstemp(path); close(fd);
    CHECK(sk_model_save(m, path) == 0, "save");
    CHECK(sk_model_load(&m2, path, NULL) == 0, "load back");
    if (m2) {
        CHECK(memcmp(sk_model_params(m), sk_model_params(m2), sizeof(float) * sk_model_num_params(m)) == 0, "round trip is bit-exact");
        sk_model_free(m2);
    }
    /* truncate: every cut must be refused with a message naming the file */
    FILE *f = fopen(path, "rb"); fseek(f, 0, SEEK_END); long n = ftell(f); rewind(f);
    char *buf = malloc(n); fread(buf, 1, n, f); fclose(f);
    char p2[64]; snprintf(p2, sizeof p2, "%s.cut", path);
    int all = 1;
    long cuts[] = {0, 4, 8, 20, n / 2, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        f = fopen(p2, "wb"); fwrite(buf, 1, cuts[i], f); fclose(f);
        int rc = sk_model_load(&m2, p2, NULL);
        if (rc == 0 || !strstr(sk_last_error(), p2)) { all = 0; printf("   cut %ld: rc %d '%s'\n", cuts[i], rc, sk_last_error()); }
        if (rc == 0) sk_model_free(m2);
    }
    CHECK(all, "truncated weight files refused with the path in the message (last: %s)", sk_last_error());
    /* wrong config: a 3-layer config reading a 2-layer file */
    sk_config o; memset(&o, 0, sizeof o); o.n_layer = 3;
    CHECK(sk_model_load(&m2, path, &o) != 0 && strstr(sk_last_error(), "transformer.h.2.ln_1.weight' is missing"), "missing tensor named: %s", sk_last_error());
    memset(&o, 0, sizeof o); o.n_embd = 32; o.n_head = 2;
    CHECK(sk_model_load(&m2, path, &o) != 0 && strstr(sk_last_error(), "has shape"), "shape mismatch named: %s", sk_last_error());
    /* a NaN inside a tensor */
    sk_model_params(m)[5] = NAN;
    sk_model_save(m, p2);
    CHECK(sk_model_load(&m2, p2, NULL) == SK_ENUM && strstr(sk_last_error(), "non-finite"), "NaN weights refused: %s", sk_last_error());
    CHECK(sk_model_load(&m2, "/nonexistent/w.safetensors", NULL) != 0 && strstr(sk_last_error(), "/nonexistent/w.safetensors"), "missing file: %s", sk_last_error());
    unlink(p2); unlink(path); free(buf);
    sk_model_free(m);
}

/* ---------------------------------------------------- determinism */

static void determinism_checks(void) {
    sk_config c;
    sk_config_default(&c);
    c.n_layer = 3; c.n_head = 4; c.n_embd = 64; c.vocab_size = 300; c.block_size = 64;
    c.n_skip_layer = 1; c.n_skip_head = 2; c.dropout = 0.1f;
    sk_model *m;
    sk_model_new(&m, &c, 5);
    int B = 4, T = 48, N = B * T;
    int32_t *in = malloc(sizeof(int32_t) * N), *tg = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) { in[i] = (i * 37 + 11) % 300; tg[i] = (i * 13 + 5) % 300; }
    size_t np = sk_model_num_params(m);
    float *g1 = malloc(np * sizeof(float)), *g2 = malloc(np * sizeof(float)), l1, l2, l3;
    int nthr = omp_get_max_threads();
    sk_model_zero_grad(m);
    sk_model_forward_backward(m, in, tg, B, T, 1.0f, 77, &l1);
    memcpy(g1, sk_model_grads(m), np * sizeof(float));
    sk_model_zero_grad(m);
    sk_model_forward_backward(m, in, tg, B, T, 1.0f, 77, &l2);
    CHECK(l1 == l2 && memcmp(g1, sk_model_grads(m), np * sizeof(float)) == 0, "two runs, same threads (%d): bit-identical loss and gradients", nthr);
    sk_model_zero_grad(m);
    sk_model_forward_backward(m, in, tg, B, T, 1.0f, 78, &l3);
    CHECK(l3 != l1, "another dropout seed changes the loss (%.6f vs %.6f)", l3, l1);
    omp_set_num_threads(1);
    sk_model_zero_grad(m);
    sk_model_forward_backward(m, in, tg, B, T, 1.0f, 77, &l2);
    memcpy(g2, sk_model_grads(m), np * sizeof(float));
    omp_set_num_threads(nthr);
    double gd = max_abs_diff(g1, g2, np);
    CHECK(fabs(l1 - l2) <= 1e-6 * fabs(l1) && gd <= 1e-5 * fmax(1.0, max_abs(g1, np)),
          "1 thread vs %d: loss diff %.1e, gradient max diff %.1e (float reassociation only)", nthr, fabs(l1 - l2), gd);
    /* activation recomputation: bit-identical loss and gradients, less memory */
    size_t full_bytes = sk_model_activation_bytes(m, B, T, 1);
    sk_model_set_recompute(m, 1);
    size_t rec_bytes = sk_model_activation_bytes(m, B, T, 1);
    sk_model_zero_grad(m);
    sk_model_forward_backward(m, in, tg, B, T, 1.0f, 77, &l2);
    CHECK(l2 == l1 && memcmp(g1, sk_model_grads(m), np * sizeof(float)) == 0,
          "recompute (SLA + dropout): bit-identical loss and gradients");
    CHECK(rec_bytes < full_bytes, "recompute: activations %zu bytes vs %zu without", rec_bytes, full_bytes);
    {
        sk_config g2; sk_config_preset(&g2, "gpt2"); sk_config_sla_default(&g2);
        sk_model *mg;
        if (sk_model_new(&mg, &g2, 1) == 0) {
            size_t fb = sk_model_activation_bytes(mg, 1, 1024, 1);
            sk_model_set_recompute(mg, 1);
            size_t rb = sk_model_activation_bytes(mg, 1, 1024, 1);
            CHECK(rb * 2 < fb, "gpt2 124M SLA, T=1024: %zu bytes/token with recompute vs %zu without", rb / 1024, fb / 1024);
            sk_model_free(mg);
        }
    }
    sk_model_set_recompute(m, 0);
    /* auto: recompute switches on when training would not fit the limit otherwise */
    sk_model_set_recompute(m, -1);
    sk_set_memory_limit(4 * np * sizeof(float) + (full_bytes + rec_bytes) / 2);
    sk_model_zero_grad(m);
    int rc_auto = sk_model_forward_backward(m, in, tg, B, T, 1.0f, 77, &l2);
    CHECK(rc_auto == 0 && l2 == l1 && memcmp(g1, sk_model_grads(m), np * sizeof(float)) == 0,
          "auto recompute under a tight memory limit trains, bit-identically (rc %d)", rc_auto);
    sk_set_memory_limit(0);
    sk_model_set_recompute(m, 0);
    /* accumulation: two calls without zeroing = 2x one call */
    sk_model_zero_grad(m);
    sk_model_forward_backward(m, in, tg, B, T, 0.5f, 77, &l2);
    sk_model_forward_backward(m, in, tg, B, T, 0.5f, 77, &l2);
    CHECK(max_abs_diff(sk_model_grads(m), g1, np) <= 1e-6 * fmax(1.0, max_abs(g1, np)), "gradients accumulate across calls with grad_scale");
    /* out-of-range tokens */
    in[5] = 300;
    CHECK(sk_model_forward(m, in, tg, B, T, &l2, NULL) == SK_EINVAL && strstr(sk_last_error(), "outside the vocabulary"), "input token out of range: %s", sk_last_error());
    in[5] = 0; tg[7] = 1000;
    CHECK(sk_model_forward(m, in, tg, B, T, &l2, NULL) == SK_EINVAL && strstr(sk_last_error(), "target token 1000"), "target out of range: %s", sk_last_error());
    CHECK(sk_model_forward(m, in, NULL, 1, 65, &l2, NULL) == SK_EINVAL && strstr(sk_last_error(), "exceeds block_size"), "T > block_size: %s", sk_last_error());
    /* memory limit */
    sk_set_memory_limit(1 << 20);
    sk_model *m3;
    CHECK(sk_model_new(&m3, &c, 1) == 0, "small model fits 1 MiB? (params only)");
    CHECK(sk_model_forward(m3, in, NULL, 64, 64, &l2, NULL) == SK_ENOMEM && strstr(sk_last_error(), "bytes"), "huge batch refused up front: %s", sk_last_error());
    sk_model_free(m3);
    sk_set_memory_limit(0);
    free(in); free(tg); free(g1); free(g2);
    sk_model_free(m);
}

int main(void) {
    vmath_checks();
    op_checks();
    sk_config c;
    sk_config_default(&c);
    c.n_layer = 3; c.n_head = 4; c.n_embd = 16; c.vocab_size = 23; c.block_size = 8;
    model_fd("gpt2 tiny", c);
    c.n_skip_layer = 1; c.n_skip_head = 2; c.gelu = SK_GELU_TANH;
    model_fd("gpt2 tiny SLA 1/2 tanh", c);
    c.dropout = 0.2f; c.bias = 0;
    model_fd("gpt2 tiny SLA dropout 0.2 no bias", c);
    sk_config_default(&c);
    c.family = SK_LLAMA; c.n_layer = 3; c.n_head = 4; c.n_kv_head = 2; c.n_embd = 16; c.vocab_size = 23;
    c.block_size = 8; c.bias = 0; c.n_skip_layer = 2; c.n_skip_head = 2;
    model_fd("llama tiny GQA SLA", c);
    /* ReLU's kink defeats whole-model finite differences; it is checked per op above and
     * against PyTorch (tests/test_gpt2_torch.py) */
    c.sinusoidal = 1; c.dropout = 0.1f;
    model_fd("llama tiny sinusoidal dropout", c);
    sk_config_default(&c);
    c.n_layer = 2; c.n_head = 2; c.n_embd = 16; c.vocab_size = 23; c.block_size = 8; c.sinusoidal = 1;
    model_fd("gpt2 tiny sinusoidal", c);
    /* the sinusoidal table is the seed's formula */
    float pe[50 * 16];
    sk_sinusoidal_table(pe, 50, 16);
    double worst = 0;
    for (int p = 0; p < 50; p++)
        for (int i = 0; i < 8; i++) {
            double div = pow(10000.0, 2.0 * i / 16);
            worst = fmax(worst, fabs(pe[p * 16 + 2 * i] - sin(p / div)));
            worst = fmax(worst, fabs(pe[p * 16 + 2 * i + 1] - cos(p / div)));
        }
    CHECK(worst < 1e-6, "sinusoidal table equals sin/cos(pos / 10000^(2i/d)) (max diff %.1e)", worst);
    config_checks();
    file_checks();
    determinism_checks();
    TEST_END();
}
