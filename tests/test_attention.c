/* Attention: fused (tiled, online-softmax) path against the plain reference, finite
 * differences, dropout statistics, thread-count independence, masks, error messages. */
#include "skiplm.h"
#include "test.h"
#include "core/attention_internal.h"   /* sk_attn_bwd_path */
#include "core/ops.h"                  /* sk_bf16_from_f32, sk_bf16_to_f32 */
#include <omp.h>
#include <stdint.h>

/* ------------------------------------------------ buffers with guard regions */
#define GUARD 32
#define GVAL 12345.0f
static float *galloc(size_t n) {
    float *p = calloc(n + 2 * GUARD, sizeof(float));
    for (int i = 0; i < GUARD; i++) p[i] = p[GUARD + n + i] = GVAL;

    return p + GUARD;
}
static int gok(const float *p, size_t n) {
    for (int i = 0; i < GUARD; i++)
        if (p[-GUARD + i] != GVAL || p[n + i] != GVAL) return 0;
    return 1;
}
static void gfree(float *p) { if (p) free(p - GUARD); }
static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) if (!isfinite(x[i])) return 0;
    return 1;
}

/* ------------------------------------------------------------ a test case */
enum { L_BHLD = 0, L_BLHD = 1, L_FUSED = 2 };   /* memory layouts of q/k/v/out */
enum { M_NONE = 0, M_R2, M_R3, M_R4, M_PAD, M_KEYS4 };  /* mask kinds */

typedef struct {
    int B, H, Hkv, Lq, Lk, D, causal, off, mask, layout, weights, avg;
    float p, scale;
    uint64_t seed;
} cfg;

typedef struct {
    cfg c;
    sk_attn a;
    float *q, *k, *v, *base;        /* base: fused buffer (L_FUSED) */
    size_t nq, nk, nbase;
    uint8_t *mask;
    float *out, *lse, *w;
    size_t nout, nlse, nw;
} case_t;

static void setup(case_t *t, cfg c, unsigned long long seed) {
    memset(t, 0, sizeof *t);
    t->c = c;
    sk_attn *a = &t->a;
    int B = c.B, H = c.H, Hkv = c.Hkv, Lq = c.Lq, Lk = c.Lk, D = c.D;
    t->nq = (size_t)B * H * Lq * D; t->nk = (size_t)B * Hkv * Lk * D;
    t->nout = t->nq; t->nlse = (size_t)B * H * Lq;
    t->out = galloc(t->nout); t->lse = galloc(t->nlse);
    memset(a, 0, sizeof *a);
    a->B = B; a->H = H; a->Hkv = Hkv; a->Lq = Lq; a->Lk = Lk; a->D = D;
    if (c.layout == L_FUSED) {      /* (B, T, 3C): q at 0, k at C, v at 2C */
        int C = H * D;
        t->nbase = (size_t)B * Lq * 3 * C;
        t->base = galloc(t->nbase);
        fill_uniform(t->base, t->nbase, &seed);
        a->q = t->base; a->k = t->base + C; a->v = t->base + 2 * C;
        a->q_sb = a->k_sb = a->v_sb = (long)Lq * 3 * C;
        a->q_sh = a->k_sh = a->v_sh = D;
        a->q_st = a->k_st = a->v_st = 3 * C;
    } else {
        t->q = galloc(t->nq); t->k = galloc(t->nk); t->v = galloc(t->nk);
        fill_uniform(t->q, t->nq, &seed); fill_uniform(t->k, t->nk, &seed); fill_uniform(t->v, t->nk, &seed);
        for (size_t i = 0; i < t->nq; i++) t->q[i] *= 2.0f;   /* sharper softmax */
        a->q = t->q; a->k = t->k; a->v = t->v;
        if (c.layout == L_BHLD) {
            a->q_sb = (long)H * Lq * D; a->q_sh = (long)Lq * D; a->q_st = D;
            a->k_sb = a->v_sb = (long)Hkv * Lk * D; a->k_sh = a->v_sh = (long)Lk * D; a->k_st = a->v_st = D;
        } else {
            a->q_sb = (long)Lq * H * D; a->q_sh = D; a->q_st = (long)H * D;
            a->k_sb = a->v_sb = (long)Lk * Hkv * D; a->k_sh = a->v_sh = D; a->k_st = a->v_st = (long)Hkv * D;
        }
    }
    a->out = t->out;
    if (c.layout == L_BHLD) { a->o_sb = (long)H * Lq * D; a->o_sh = (long)Lq * D; a->o_st = D; }
    else { a->o_sb = (long)Lq * H * D; a->o_sh = D; a->o_st = (long)H * D; }
    a->lse = t->lse;
    a->scale = c.scale;
    a->is_causal = c.causal; a->causal_offset = c.off;
    a->dropout_p = c.p; a->training = c.p > 0; a->seed = c.seed;
    if (c.mask != M_NONE) {
        int shape[4], rank;
        switch (c.mask) {
        case M_R2: rank = 2; shape[0] = Lq; shape[1] = Lk; break;
        case M_R3: rank = 3; shape[0] = B; shape[1] = Lq; shape[2] = Lk; break;
        case M_R4: rank = 4; shape[0] = B; shape[1] = H; shape[2] = Lq; shape[3] = Lk; break;
        case M_PAD: rank = 3; shape[0] = B; shape[1] = 1; shape[2] = Lk; break;
        default: rank = 4; shape[0] = 1; shape[1] = 1; shape[2] = 1; shape[3] = Lk; break;
        }
        size_t n = 1;
        for (int i = 0; i < rank; i++) n *= shape[i];
        t->mask = malloc(n);
        unsigned long long s = seed ^ 0x5555;
        for (size_t i = 0; i < n; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            t->mask[i] = (s >> 33) % 4 != 0;        /* 75% allowed */
        }
        if (c.mask == M_PAD)                          /* padding: batch b keeps Lk - 3b keys */
            for (int b = 0; b < B; b++)
                for (int j = 0; j < Lk; j++) t->mask[(size_t)b * Lk + j] = j < Lk - 3 * b - 1;
        if (c.mask == M_R4)                           /* one fully masked row per (b,h) */
            for (int b = 0; b < B; b++)
                for (int h = 0; h < H; h++)
                    memset(t->mask + (((size_t)b * H + h) * Lq + (b + h) % Lq) * Lk, 0, Lk);
        CHECK(sk_attn_set_mask(a, t->mask, rank, shape) == 0, "set_mask rank %d", rank);
    }
    if (c.weights) {
        t->nw = (size_t)B * (c.avg ? 1 : H) * Lq * Lk;
        t->w = galloc(t->nw);
        a->weights = t->w; a->weights_avg = c.avg;
    }
}

static void teardown(case_t *t) {
    gfree(t->q); gfree(t->k); gfree(t->v); gfree(t->base);
    gfree(t->out); gfree(t->lse); gfree(t->w); free(t->mask);
}

static const char *cname(const cfg *c, char *buf) {
    static const char *mk[] = {"none", "rank2", "rank3", "rank4", "pad", "keys4"};
    static const char *lay[] = {"bhld", "blhd", "fusedqkv"};
    sprintf(buf, "B=%d H=%d Hkv=%d Lq=%d Lk=%d D=%d causal=%d off=%d mask=%s %s p=%g w=%d%s",
            c->B, c->H, c->Hkv, c->Lq, c->Lk, c->D, c->causal, c->off, mk[c->mask], lay[c->layout],
            (double)c->p, c->weights, c->avg ? "avg" : "");
    return buf;
}

/* Element (b,h,t,:) of a strided tensor copied into contiguous (B,H,L,D) */
static void gather(float *dst, const float *src, int B, int H, int L, int D, long sb, long sh, long st) {
    for (int b = 0; b < B; b++) for (int h = 0; h < H; h++) for (int t = 0; t < L; t++)
        memcpy(dst + (((size_t)b * H + h) * L + t) * D, src + b * sb + h * sh + t * st, D * sizeof(float));
}

/* Fused vs reference: forward (out, lse, weights) and backward (dq, dk, dv, accumulated
 * on top of random initial values to check +=). */
static void compare_case(cfg c) {
    char name[256];
    cname(&c, name);
    case_t f, r;
    setup(&f, c, 42); setup(&r, c, 42);
    int rc1 = sk_attn_forward(&f.a), rc2 = sk_attn_forward_ref(&r.a);
    CHECK(rc1 == 0 && rc2 == 0, "forward runs [%s] %s", name, sk_last_error());
    const sk_attn *a = &f.a;
    float *of = malloc(f.nq * 4), *orf = malloc(f.nq * 4);
    gather(of, f.out, c.B, c.H, c.Lq, c.D, a->o_sb, a->o_sh, a->o_st);
    gather(orf, r.out, c.B, c.H, c.Lq, c.D, a->o_sb, a->o_sh, a->o_st);
    double d = max_abs_diff(of, orf, f.nq);
    CHECK(allclose(of, orf, f.nq, 2e-5, 2e-6) && all_finite(of, f.nq), "fused out == ref out [%s] maxdiff %.2e", name, d);
    int lse_ok = 1;
    for (size_t i = 0; i < f.nlse; i++) {
        if (isinf(r.lse[i]) || isinf(f.lse[i])) { if (f.lse[i] != r.lse[i]) lse_ok = 0; }
        else if (fabsf(f.lse[i] - r.lse[i]) > 1e-5f + 1e-5f * fabsf(r.lse[i])) lse_ok = 0;
    }
    CHECK(lse_ok, "fused lse == ref lse [%s]", name);
    if (c.weights) {
        d = max_abs_diff(f.w, r.w, f.nw);
        CHECK(allclose(f.w, r.w, f.nw, 2e-5, 2e-6) && gok(f.w, f.nw), "fused weights == ref [%s] maxdiff %.2e", name, d);
    }
    /* backward */
    unsigned long long s = 7;
    size_t nqbuf = c.layout == L_FUSED ? f.nbase : f.nq, nkbuf = c.layout == L_FUSED ? f.nbase : f.nk;
    float *dout = galloc(f.nout);
    fill_uniform(dout, f.nout, &s);
    float *g[2][3];
    for (int w = 0; w < 2; w++) {
        if (c.layout == L_FUSED) {   /* one gradient buffer for the fused qkv */
            g[w][0] = galloc(f.nbase);
            unsigned long long s2 = 99; fill_uniform(g[w][0], f.nbase, &s2);
            int C = c.H * c.D;
            g[w][1] = g[w][0] + C; g[w][2] = g[w][0] + 2 * C;
        } else {
            for (int i = 0; i < 3; i++) {
                size_t n = i == 0 ? f.nq : f.nk;
                g[w][i] = galloc(n);
                unsigned long long s2 = 99 + i; fill_uniform(g[w][i], n, &s2);
            }
        }
    }
    rc1 = sk_attn_backward(&f.a, dout, g[0][0], g[0][1], g[0][2]);
    rc2 = sk_attn_backward_ref(&r.a, dout, g[1][0], g[1][1], g[1][2]);
    CHECK(rc1 == 0 && rc2 == 0, "backward runs [%s] %s", name, sk_last_error());
    if (c.layout == L_FUSED) {
        d = max_abs_diff(g[0][0], g[1][0], f.nbase);
        CHECK(allclose(g[0][0], g[1][0], f.nbase, 1e-4, 1e-5) && gok(g[0][0], f.nbase),
              "fused dqkv == ref [%s] maxdiff %.2e", name, d);
    } else {
        const char *nm[3] = {"dq", "dk", "dv"};
        for (int i = 0; i < 3; i++) {
            size_t n = i == 0 ? nqbuf : nkbuf;
            d = max_abs_diff(g[0][i], g[1][i], n);
            CHECK(allclose(g[0][i], g[1][i], n, 1e-4, 1e-5) && gok(g[0][i], n) && all_finite(g[0][i], n),
                  "fused %s == ref [%s] maxdiff %.2e", nm[i], name, d);
        }
    }
    CHECK(gok(f.out, f.nout) && gok(f.lse, f.nlse) && gok(dout, f.nout) &&
          (c.layout != L_FUSED || gok(f.base, f.nbase)), "guards intact [%s]", name);
    for (int w = 0; w < 2; w++) {
        gfree(g[w][0]);
        if (c.layout != L_FUSED) { gfree(g[w][1]); gfree(g[w][2]); }
    }
    gfree(dout); free(of); free(orf);
    teardown(&f); teardown(&r);
}

/* ------------------------------------------------ finite-difference gradients */
static double loss_of(case_t *t, const float *R, int ref) {
    if (ref) sk_attn_forward_ref(&t->a); else sk_attn_forward(&t->a);
    double s = 0;
    for (size_t i = 0; i < t->nout; i++) s += (double)t->out[i] * R[i];
    return s;
}
static void fd_case(cfg c, int ref) {
    char name[256];
    cname(&c, name);
    case_t t;
    setup(&t, c, 3);
    float *R = malloc(t.nout * 4);
    unsigned long long s = 11;
    fill_uniform(R, t.nout, &s);
    loss_of(&t, R, ref);
    float *dq = calloc(t.nq, 4), *dk = calloc(t.nk, 4), *dv = calloc(t.nk, 4);
    if (ref) sk_attn_backward_ref(&t.a, R, dq, dk, dv); else sk_attn_backward(&t.a, R, dq, dk, dv);
    float *x[3] = {t.q, t.k, t.v}, *gr[3] = {dq, dk, dv};
    size_t n[3] = {t.nq, t.nk, t.nk};
    double worst = 0;
    const float eps = 1e-2f;
    for (int which = 0; which < 3; which++)
        for (size_t i = 0; i < n[which]; i++) {
            float old = x[which][i];
            x[which][i] = old + eps; double lp = loss_of(&t, R, ref);
            x[which][i] = old - eps; double lm = loss_of(&t, R, ref);
            x[which][i] = old;
            double num = (lp - lm) / (2 * eps);
            /* float forward: loss rounding ~1e-6, central difference truncation ~eps^2 */
            double err = fabs(num - gr[which][i]) / (1e-3 + 1e-2 * fabs(num));
            if (err > worst) worst = err;
        }
    CHECK(worst <= 1.0, "finite differences %s [%s] worst err/tol %.3f", ref ? "ref" : "fused", name, worst);
    free(R); free(dq); free(dk); free(dv);
    teardown(&t);
}

/* ------------------------------------------------------------- dropout */
static void dropout_tests(void) {
    const float p = 0.25f;
    cfg c = {.B = 1, .H = 4, .Hkv = 4, .Lq = 128, .Lk = 128, .D = 16, .weights = 1, .seed = 1234};
    case_t base, dr, dr2, dr3, ev;
    setup(&base, c, 5);
    sk_attn_forward(&base.a);
    c.p = p;
    setup(&dr, c, 5); setup(&dr2, c, 5);
    sk_attn_forward(&dr.a); sk_attn_forward(&dr2.a);
    c.seed = 4321;
    setup(&dr3, c, 5);
    sk_attn_forward(&dr3.a);
    size_t n = dr.nw, zeros = 0, bad_scale = 0;
    double var = 0, dev = 0;
    int rows = c.B * c.H * c.Lq;
    for (int r = 0; r < rows; r++) {
        double sum = 0;
        for (int j = 0; j < c.Lk; j++) {
            size_t i = (size_t)r * c.Lk + j;
            float w0 = base.w[i], w1 = dr.w[i];
            if (w1 == 0.0f) zeros++;
            else if (fabsf(w1 - w0 / (1 - p)) > 1e-6f * fabsf(w1) + 1e-12f) bad_scale++;
            sum += w1;
            var += (double)w0 * w0 * p / (1 - p);
        }
        dev += sum - 1.0;       /* E[sum_j dropped w] = 1 */
    }
    double frac = (double)zeros / n, sd = sqrt(p * (1 - p) / n);
    CHECK(fabs(frac - p) < 5 * sd, "dropout: fraction dropped %.4f vs p=%.2f (5 sd = %.4f)", frac, (double)p, 5 * sd);
    CHECK(bad_scale == 0, "dropout: kept weights scaled by 1/(1-p) (%zu bad)", bad_scale);
    CHECK(fabs(dev) < 5 * sqrt(var), "dropout: expected row sum 1, total deviation %.4f (5 sd = %.4f)", dev, 5 * sqrt(var));
    CHECK(memcmp(dr.out, dr2.out, dr.nout * 4) == 0 && memcmp(dr.w, dr2.w, n * 4) == 0,
          "dropout: same seed -> identical output");
    CHECK(memcmp(dr.out, dr3.out, dr.nout * 4) != 0, "dropout: different seed -> different output");
    CHECK(memcmp(dr.out, base.out, dr.nout * 4) != 0, "dropout: changes the output when training");
    /* out == dropped weights @ v */
    double worst = 0;
    for (int h = 0; h < c.H; h++)
        for (int i = 0; i < c.Lq; i++)
            for (int t = 0; t < c.D; t++) {
                double s = 0;
                for (int j = 0; j < c.Lk; j++)
                    s += (double)dr.w[((size_t)h * c.Lq + i) * c.Lk + j] * dr.v[((size_t)h * c.Lk + j) * c.D + t];
                double e = fabs(s - dr.out[((size_t)h * c.Lq + i) * c.D + t]);
                if (e > worst) worst = e;
            }
    CHECK(worst < 1e-5, "dropout: out == returned (post-dropout) weights @ v, maxdiff %.2e", worst);
    /* not training: dropout off */
    c.seed = 1234;
    setup(&ev, c, 5);
    ev.a.training = 0;
    sk_attn_forward(&ev.a);
    CHECK(memcmp(ev.out, base.out, ev.nout * 4) == 0, "dropout: inactive when training=0");
    teardown(&base); teardown(&dr); teardown(&dr2); teardown(&dr3); teardown(&ev);
}

/* ------------------------------------------------------------- threads */
static void thread_test(cfg c) {
    char name[256];
    cname(&c, name);
    float *res[2][5];
    size_t sz[5];
    for (int run = 0; run < 2; run++) {
        omp_set_num_threads(run == 0 ? 1 : 2);
        case_t t;
        setup(&t, c, 77);
        sk_attn_forward(&t.a);
        float *dout = malloc(t.nout * 4);
        unsigned long long s = 8; fill_uniform(dout, t.nout, &s);
        float *dq = calloc(t.nq, 4), *dk = calloc(t.nk, 4), *dv = calloc(t.nk, 4);
        sk_attn_backward(&t.a, dout, dq, dk, dv);
        res[run][0] = malloc(t.nout * 4); memcpy(res[run][0], t.out, t.nout * 4);
        res[run][1] = malloc(t.nlse * 4); memcpy(res[run][1], t.lse, t.nlse * 4);
        res[run][2] = dq; res[run][3] = dk; res[run][4] = dv;
        sz[0] = t.nout; sz[1] = t.nlse; sz[2] = t.nq; sz[3] = sz[4] = t.nk;
        free(dout);
        teardown(&t);
    }
    omp_set_num_threads(2);
    int same = 1;
    for (int i = 0; i < 5; i++) same &= memcmp(res[0][i], res[1][i], sz[i] * 4) == 0;
    CHECK(same, "bit-identical out/lse/dq/dk/dv with 1 and 2 threads [%s]", name);
    for (int r = 0; r < 2; r++) for (int i = 0; i < 5; i++) free(res[r][i]);
}

/* The fused backward (one item per kv head, dq accumulated alongside dk/dv) and the two-pass
 * one must agree bit for bit: the path is chosen by shape and thread count. */
static void path_test(cfg c) {
    char name[256];
    cname(&c, name);
    float *res[2][3];
    size_t sz[3];
    for (int run = 0; run < 2; run++) {
        sk_attn_bwd_path = run == 0 ? 1 : 2;
        case_t t;
        setup(&t, c, 78);
        sk_attn_forward(&t.a);
        float *dout = malloc(t.nout * 4);
        unsigned long long s = 9; fill_uniform(dout, t.nout, &s);
        float *dq = calloc(t.nq, 4), *dk = calloc(t.nk, 4), *dv = calloc(t.nk, 4);
        sk_attn_backward(&t.a, dout, dq, dk, dv);
        res[run][0] = dq; res[run][1] = dk; res[run][2] = dv;
        sz[0] = t.nq; sz[1] = sz[2] = t.nk;
        free(dout);
        teardown(&t);
    }
    sk_attn_bwd_path = 0;
    int same = 1;
    double md = 0;
    for (int i = 0; i < 3; i++) {
        same &= memcmp(res[0][i], res[1][i], sz[i] * 4) == 0;
        for (size_t j = 0; j < sz[i]; j++) md = fmax(md, fabs(res[0][i][j] - res[1][i][j]));
    }
    CHECK(same, "fused and two-pass backward bit-identical dq/dk/dv (max diff %.1e) [%s]", md, name);
    for (int r = 0; r < 2; r++) for (int i = 0; i < 3; i++) free(res[r][i]);
}

/* ---------------------------------------------------- fully masked rows */
static void masked_row_test(void) {
    /* causal with a negative offset: queries 0..2 see no key; plus a rank-4 mask case */
    cfg c = {.B = 1, .H = 2, .Hkv = 2, .Lq = 7, .Lk = 7, .D = 8, .causal = 1, .off = -3, .weights = 1};
    for (int ref = 0; ref < 2; ref++) {
        case_t t;
        setup(&t, c, 9);
        if (ref) sk_attn_forward_ref(&t.a); else sk_attn_forward(&t.a);
        float *dout = malloc(t.nout * 4);
        unsigned long long s = 1; fill_uniform(dout, t.nout, &s);
        float *dq = calloc(t.nq, 4), *dk = calloc(t.nk, 4), *dv = calloc(t.nk, 4);
        if (ref) sk_attn_backward_ref(&t.a, dout, dq, dk, dv); else sk_attn_backward(&t.a, dout, dq, dk, dv);
        int zero = 1;
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 3; i++) {
                for (int d = 0; d < 8; d++) {
                    if (t.out[((size_t)h * 7 + i) * 8 + d] != 0.0f) zero = 0;
                    if (dq[((size_t)h * 7 + i) * 8 + d] != 0.0f) zero = 0;
                }
                for (int j = 0; j < 7; j++) if (t.w[((size_t)h * 7 + i) * 7 + j] != 0.0f) zero = 0;
                if (t.lse[h * 7 + i] != INFINITY) zero = 0;
            }
        /* keys 4..6 are seen by nobody: zero dk, dv */
        for (int h = 0; h < 2; h++) for (int j = 4; j < 7; j++) for (int d = 0; d < 8; d++)
            if (dk[((size_t)h * 7 + j) * 8 + d] != 0.0f || dv[((size_t)h * 7 + j) * 8 + d] != 0.0f) zero = 0;
        int fin = all_finite(t.out, t.nout) && all_finite(dq, t.nq) && all_finite(dk, t.nk) &&
                  all_finite(dv, t.nk) && all_finite(t.w, t.nw);
        CHECK(zero && fin, "%s: fully masked rows give out 0, weights 0, lse +inf, zero grads, no NaN",
              ref ? "ref" : "fused");
        free(dout); free(dq); free(dk); free(dv);
        teardown(&t);
    }
}

/* ------------------------------------------------------------- errors */
static void expect_err(int rc, const char *needle, const char *what) {
    const char *msg = sk_last_error();
    CHECK(rc == SK_EINVAL && strstr(msg, needle) != NULL, "error: %s -> \"%s\"", what, msg);
}
static void error_tests(void) {
    float q[2 * 4 * 8] = {0}, o[2 * 4 * 8];
    uint8_t m[16];
    memset(m, 1, sizeof m);
    sk_attn a;
    sk_attn_init_bhld(&a, 1, 2, 4, 4, 8, q, q, q, o);
    int shape2[2] = {4, 4};
    sk_attn_set_mask(&a, m, 2, shape2);
    a.is_causal = 1;
    int rc = sk_attn_forward(&a);
    CHECK(rc == SK_EINVAL && strcmp(sk_last_error(), "Explicit attn_mask should not be set when is_causal=True") == 0,
          "error: mask + is_causal gives PyTorch's exact message");
    rc = sk_attn_forward_ref(&a);
    CHECK(rc == SK_EINVAL && strcmp(sk_last_error(), "Explicit attn_mask should not be set when is_causal=True") == 0,
          "error: mask + is_causal (ref) gives PyTorch's exact message");
    a.is_causal = 0;
    int bad[2] = {4, 3};
    sk_attn_set_mask(&a, m, 2, bad);
    expect_err(sk_attn_forward(&a), "attn_mask shape (1, 1, 4, 3) does not broadcast", "mask shape mismatch");
    int shape5[5] = {1, 1, 1, 4, 4};
    expect_err(sk_attn_set_mask(&a, m, 5, shape5), "rank 2, 3 or 4", "mask rank 5");
    sk_attn_set_mask(&a, NULL, 0, NULL);
    a.dropout_p = 1.0f;
    expect_err(sk_attn_forward(&a), "dropout_p must be in [0, 1)", "dropout_p = 1");
    a.dropout_p = -0.1f;
    expect_err(sk_attn_forward(&a), "dropout_p must be in [0, 1)", "dropout_p < 0");
    a.dropout_p = NAN;
    expect_err(sk_attn_forward(&a), "dropout_p must be in [0, 1)", "dropout_p NaN");
    a.dropout_p = 0;
    a.Hkv = 3;
    expect_err(sk_attn_forward(&a), "Hkv=3 (key/value heads) must divide H=2", "Hkv not dividing H");
    a.Hkv = 2; a.Lk = 0;
    expect_err(sk_attn_forward(&a), "must be positive", "Lk = 0");
    a.Lk = 4;
    a.lse = NULL;
    expect_err(sk_attn_backward(&a, o, q, q, q), "lse is NULL", "backward without lse");
    sk_mha mh = {.embed_dim = 8, .n_head = 4, .n_kv_head = 3, .head_dim = 2, .wq = q, .wk = q, .wv = q, .wo = q};
    float cache[1];
    sk_attn opt;
    memset(&opt, 0, sizeof opt);
    expect_err(sk_mha_forward(&mh, &opt, 1, 2, 2, q, q, o, cache), "n_kv_head=3 must divide n_head=4", "mha GQA");
}

/* ---------------------------------------------------- MHA finite differences */
static void mha_fd_test(int self_attn, int causal) {
    const int B = 2, Lq = 5, Lk = self_attn ? 5 : 4, E = 6, H = 4, Hkv = 2, D = 3;
    unsigned long long s = 31;
    float wq[12 * 6], wk[6 * 6], wv[6 * 6], wo[6 * 12], bq[12], bk[6], bv[6], bo[6];
    fill_uniform(wq, sizeof wq / 4, &s); fill_uniform(wk, sizeof wk / 4, &s);
    fill_uniform(wv, sizeof wv / 4, &s); fill_uniform(wo, sizeof wo / 4, &s);
    fill_uniform(bq, 12, &s); fill_uniform(bk, 6, &s); fill_uniform(bv, 6, &s); fill_uniform(bo, 6, &s);
    sk_mha m = {E, H, Hkv, D, wq, wk, wv, wo, bq, bk, bv, bo};
    float xq[2 * 5 * 6], xkv[2 * 5 * 6], out[2 * 5 * 6], R[2 * 5 * 6];
    fill_uniform(xq, sizeof xq / 4, &s); fill_uniform(xkv, sizeof xkv / 4, &s); fill_uniform(R, sizeof R / 4, &s);
    const float *kvin = self_attn ? xq : xkv;
    float *cache = malloc(sk_mha_cache_floats(&m, B, Lq, Lk) * 4);
    sk_attn opt;
    memset(&opt, 0, sizeof opt);
    opt.is_causal = causal;
    sk_mha_forward(&m, &opt, B, Lq, Lk, xq, kvin, out, cache);
    float dxq[60] = {0}, dxkv[60] = {0};
    float gwq[72] = {0}, gwk[36] = {0}, gwv[36] = {0}, gwo[72] = {0}, gbq[12] = {0}, gbk[6] = {0}, gbv[6] = {0}, gbo[6] = {0};
    sk_mha_grads g = {gwq, gwk, gwv, gwo, gbq, gbk, gbv, gbo};
    int rc = sk_mha_backward(&m, &opt, B, Lq, Lk, xq, kvin, cache, R, dxq, self_attn ? dxq : dxkv, &g);
    CHECK(rc == 0, "mha backward runs %s", sk_last_error());
    float *xs[] = {xq, xkv, wq, wk, wv, wo, bq, bk, bv, bo};
    float *gs[] = {dxq, dxkv, gwq, gwk, gwv, gwo, gbq, gbk, gbv, gbo};
    int ns[] = {B * Lq * E, B * Lk * E, 72, 36, 36, 72, 12, 6, 6, 6};
    double worst = 0;
    for (int w = 0; w < 10; w++) {
        if (self_attn && w == 1) continue;
        for (int i = 0; i < ns[w]; i++) {
            float old = xs[w][i];
            double l[2];
            for (int sg = 0; sg < 2; sg++) {
                xs[w][i] = old + (sg ? -1e-2f : 1e-2f);
                sk_attn o2; memset(&o2, 0, sizeof o2); o2.is_causal = causal;
                sk_mha_forward(&m, &o2, B, Lq, Lk, xq, kvin, out, cache);
                l[sg] = 0;
                for (int t = 0; t < B * Lq * E; t++) l[sg] += (double)out[t] * R[t];
            }
            xs[w][i] = old;
            double num = (l[0] - l[1]) / 2e-2;
            double err = fabs(num - gs[w][i]) / (2e-3 + 1e-2 * fabs(num));
            if (err > worst) worst = err;
        }
    }
    CHECK(worst <= 1.0, "mha finite differences (%s, causal=%d, GQA 4/2, biases) worst err/tol %.3f",
          self_attn ? "self, dq_in == dkv_in" : "cross", causal, worst);
    free(cache);
}

/* bf16 K and V (k16, v16: a bf16 KV cache): the output has the bits of the fp32 forward on the
 * same values widened, in the few-rows path (decoding) and the tiled one, strided heads as the
 * cache lays them out (B, Lk, Hkv, D) with room between sequences, GQA, D not a multiple of 8;
 * what it refuses. */
static void bf16_kv_case(int B, int H, int Hkv, int Lq, int Lk, int D, int causal) {
    const long st = (long)Hkv * D, sb = (long)(Lk + 5) * st;     /* 5 positions of room per sequence */
    const size_t nkv = (size_t)B * sb, nq = (size_t)B * Lq * H * D;
    float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nkv), *v = malloc(sizeof(float) * nkv);
    float *o32 = malloc(sizeof(float) * nq), *o16 = malloc(sizeof(float) * nq);
    uint16_t *k16 = malloc(sizeof(uint16_t) * nkv), *v16 = malloc(sizeof(uint16_t) * nkv);
    unsigned long long seed = 77;
    fill_uniform(q, nq, &seed); fill_uniform(k, nkv, &seed); fill_uniform(v, nkv, &seed);
    for (size_t i = 0; i < nkv; i++) {
        k16[i] = sk_bf16_from_f32(k[i] * 3.0f); k[i] = sk_bf16_to_f32(k16[i]);
        v16[i] = sk_bf16_from_f32(v[i]); v[i] = sk_bf16_to_f32(v16[i]);
    }
    sk_attn a;
    memset(&a, 0, sizeof a);
    a.B = B; a.H = H; a.Hkv = Hkv; a.Lq = Lq; a.Lk = Lk; a.D = D;
    a.q = q; a.q_sb = (long)Lq * H * D; a.q_sh = D; a.q_st = (long)H * D;
    a.k = k; a.k_sb = sb; a.k_sh = D; a.k_st = st;
    a.v = v; a.v_sb = sb; a.v_sh = D; a.v_st = st;
    a.out = o32; a.o_sb = (long)Lq * H * D; a.o_sh = D; a.o_st = (long)H * D;
    a.is_causal = causal; a.causal_offset = causal ? Lk - Lq : 0;
    int r32 = sk_attn_forward(&a);
    a.k = a.v = NULL; a.k16 = k16; a.v16 = v16; a.out = o16;
    int r16 = sk_attn_forward(&a);
    CHECK(r32 == 0 && r16 == 0 && !memcmp(o32, o16, sizeof(float) * nq) && max_abs(o16, nq) > 0,
          "bf16 K/V B=%d H=%d Hkv=%d Lq=%d Lk=%d D=%d%s: the bits of fp32 K/V holding the same values", B, H, Hkv, Lq, Lk, D,
          causal ? " causal" : "");
    float *dq = calloc(nq, sizeof(float));
    expect_err(sk_attn_backward(&a, o16, dq, NULL, NULL), "forward only", "backward with bf16 K/V");
    expect_err(sk_attn_forward_ref(&a), "sk_attn_forward only", "the reference with bf16 K/V");
    a.weights = o32;
    expect_err(sk_attn_forward(&a), "for inference", "weights with bf16 K/V");
    a.weights = NULL; a.v16 = NULL; a.v = v;
    expect_err(sk_attn_forward(&a), "both k16 and v16", "k16 with an fp32 v");
    free(q); free(k); free(v); free(o32); free(o16); free(k16); free(v16); free(dq);
}

int main(void) {
    omp_set_num_threads(2);
    /* fused == reference across tile-boundary lengths, layouts, masks, GQA */
    cfg cases[] = {
        {.B = 2, .H = 3, .Hkv = 3, .Lq = 70, .Lk = 70, .D = 16},
        {.B = 2, .H = 4, .Hkv = 2, .Lq = 130, .Lk = 129, .D = 8, .causal = 1, .layout = L_BLHD},
        {.B = 1, .H = 2, .Hkv = 2, .Lq = 65, .Lk = 200, .D = 32, .causal = 1, .off = 135},
        {.B = 1, .H = 2, .Hkv = 1, .Lq = 1, .Lk = 150, .D = 64, .causal = 1, .off = 149, .layout = L_BLHD},
        {.B = 2, .H = 2, .Hkv = 1, .Lq = 63, .Lk = 77, .D = 64, .mask = M_R4, .weights = 1},
        {.B = 2, .H = 3, .Hkv = 3, .Lq = 66, .Lk = 67, .D = 20, .mask = M_R2, .weights = 1, .avg = 1},
        {.B = 3, .H = 2, .Hkv = 2, .Lq = 40, .Lk = 90, .D = 40, .mask = M_R3, .scale = 0.3f},
        {.B = 3, .H = 6, .Hkv = 2, .Lq = 33, .Lk = 129, .D = 8, .mask = M_PAD, .layout = L_BLHD},
        {.B = 2, .H = 6, .Hkv = 3, .Lq = 17, .Lk = 70, .D = 12, .mask = M_KEYS4, .weights = 1, .avg = 1},
        {.B = 2, .H = 4, .Hkv = 4, .Lq = 100, .Lk = 100, .D = 32, .causal = 1, .layout = L_FUSED},
        {.B = 1, .H = 3, .Hkv = 3, .Lq = 70, .Lk = 70, .D = 8, .causal = 1, .off = -10, .weights = 1},
        {.B = 2, .H = 4, .Hkv = 2, .Lq = 90, .Lk = 90, .D = 16, .causal = 1, .p = 0.2f, .seed = 5, .weights = 1},
        {.B = 1, .H = 2, .Hkv = 2, .Lq = 70, .Lk = 75, .D = 24, .mask = M_R4, .p = 0.5f, .seed = 6, .layout = L_BLHD},
        /* query tiles of at most 4 rows (dot products on the keys in place): with dropout and
         * a causal offset; strided keys and values read in place (MQA, fused qkv) */
        {.B = 2, .H = 4, .Hkv = 2, .Lq = 66, .Lk = 70, .D = 64, .causal = 1, .off = 4, .p = 0.3f, .seed = 8, .weights = 1},
        {.B = 2, .H = 4, .Hkv = 1, .Lq = 2, .Lk = 67, .D = 64, .mask = M_R2, .layout = L_BLHD},
        {.B = 2, .H = 4, .Hkv = 4, .Lq = 3, .Lk = 3, .D = 64, .causal = 1, .layout = L_FUSED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) compare_case(cases[i]);
    bf16_kv_case(3, 4, 2, 1, 150, 64, 1);      /* a decoding step: the few-rows path */
    bf16_kv_case(2, 4, 4, 3, 70, 20, 1);
    bf16_kv_case(2, 6, 2, 70, 130, 32, 1);     /* a prompt chunk: tiles of keys */
    bf16_kv_case(1, 2, 1, 65, 65, 8, 0);

    cfg fd[] = {
        {.B = 1, .H = 2, .Hkv = 1, .Lq = 3, .Lk = 4, .D = 3},
        {.B = 2, .H = 2, .Hkv = 2, .Lq = 4, .Lk = 4, .D = 3, .causal = 1},
        {.B = 1, .H = 2, .Hkv = 2, .Lq = 4, .Lk = 5, .D = 2, .mask = M_R4},
        {.B = 1, .H = 2, .Hkv = 1, .Lq = 3, .Lk = 4, .D = 3, .p = 0.3f, .seed = 3, .scale = 0.7f},
    };
    for (size_t i = 0; i < sizeof fd / sizeof fd[0]; i++) { fd_case(fd[i], 0); fd_case(fd[i], 1); }

    dropout_tests();
    masked_row_test();
    thread_test((cfg){.B = 2, .H = 4, .Hkv = 2, .Lq = 300, .Lk = 300, .D = 64, .causal = 1, .p = 0.1f, .seed = 9});
    thread_test((cfg){.B = 1, .H = 3, .Hkv = 3, .Lq = 150, .Lk = 260, .D = 40, .mask = M_R4, .layout = L_BLHD});
    path_test((cfg){.B = 2, .H = 4, .Hkv = 2, .Lq = 300, .Lk = 300, .D = 64, .causal = 1, .p = 0.1f, .seed = 9});
    path_test((cfg){.B = 1, .H = 3, .Hkv = 3, .Lq = 150, .Lk = 260, .D = 40, .mask = M_R4, .layout = L_BLHD});
    path_test((cfg){.B = 2, .H = 6, .Hkv = 2, .Lq = 70, .Lk = 200, .D = 16, .causal = 1, .off = 130});
    path_test((cfg){.B = 1, .H = 2, .Hkv = 1, .Lq = 200, .Lk = 90, .D = 24, .causal = 1, .off = -37});
    path_test((cfg){.B = 3, .H = 2, .Hkv = 2, .Lq = 129, .Lk = 129, .D = 8});
    error_tests();
    mha_fd_test(1, 1);
    mha_fd_test(0, 0);
    TEST_END();
}
