/* Optimizer unit tests: AdamW against hand-computed values and a double-precision
 * reference, the nanoGPT schedule at known points, clip_grad_norm_ semantics, the decay
 * mask, padded (span-less) floats left alone, and a gradient norm that is bit-identical
 * for any thread count. */
#include "skiplm.h"
#include "train/trainer.h"
#include "test.h"
#include <omp.h>

static sk_tensor tensor(size_t off, size_t n, int decay) {
    sk_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "t%zu", off);
    t.offset = off; t.numel = n; t.ndim = 1; t.shape[0] = (int64_t)n; t.decay = decay;
    return t;
}

static void test_adamw_hand(void) {
    /* p = 1, g = 0.5, lr 0.1, wd 0.1, betas (0.9, 0.95), t = 1:
     * decayed p = 0.99; m = 0.05; v = 0.0125; step_size = 0.1 / 0.1 = 1;
     * denom = sqrt(0.0125)/sqrt(0.05) + 1e-8 = 0.5 + 1e-8; p = 0.99 - 0.05/0.5 = 0.89.
     * Without decay: 1 - 0.1 = 0.9. */
    float p[2] = {1, 1}, g[2] = {0.5f, 0.5f}, m[2] = {0}, v[2] = {0};
    sk_tensor ts[2] = {tensor(0, 1, 1), tensor(1, 1, 0)};
    sk_span *sp; int ns;
    sk_spans_build(ts, 2, &sp, &ns);
    sk_adamw_cfg c = {0.1f, 0.9f, 0.95f, 1e-8f, 0.1f};
    sk_adamw_step(p, g, m, v, sp, ns, &c, 0.1, 1);
    CHECK(fabs(p[0] - 0.89) < 1e-6, "AdamW step 1 with decay: p = %.8f (hand: 0.89)", p[0]);
    CHECK(fabs(p[1] - 0.9) < 1e-6, "AdamW step 1 without decay: p = %.8f (hand: 0.90)", p[1]);
    CHECK(fabs(m[0] - 0.05) < 1e-8 * 0.05 * 100 && fabs(v[0] - 0.0125) < 1e-7 * 0.0125 * 10, "moments after step 1: m %.6g v %.6g", m[0], v[0]);
    free(sp);
}

static void test_adamw_ref(void) {
    /* several steps on random data against a double-precision transcription of
     * torch.optim.AdamW's single-tensor update, with a changing lr */
    enum { N = 20000 };
    static float p[N], g[N], m[N], v[N];
    static double pd[N], md[N], vd[N];
    unsigned long long s = 42;
    fill_uniform(p, N, &s);
    for (int i = 0; i < N; i++) { pd[i] = p[i]; m[i] = v[i] = 0; md[i] = vd[i] = 0; }
    sk_tensor ts[3] = {tensor(0, 9000, 1), tensor(9000, 1000, 0), tensor(10000, 10000, 1)};
    sk_span *sp; int ns;
    sk_spans_build(ts, 3, &sp, &ns);
    sk_adamw_cfg c;
    sk_adamw_default(&c);
    double worst = 0;
    for (long t = 1; t <= 5; t++) {
        double lr = 1e-3 * t;
        fill_uniform(g, N, &s);
        for (int i = 0; i < N; i++) g[i] *= 0.01f * (float)t;
        sk_adamw_step(p, g, m, v, sp, ns, &c, lr, t);
        double b1 = c.beta1, b2 = c.beta2;
        for (int i = 0; i < N; i++) {
            int dec = i < 9000 || i >= 10000;
            if (dec) pd[i] *= 1 - lr * c.weight_decay;
            md[i] = b1 * md[i] + (1 - b1) * g[i];
            vd[i] = b2 * vd[i] + (1 - b2) * (double)g[i] * g[i];
            double denom = sqrt(vd[i]) / sqrt(1 - pow(b2, t)) + c.eps;
            pd[i] -= lr / (1 - pow(b1, t)) * md[i] / denom;
        }
    }
    for (int i = 0; i < N; i++) worst = fmax(worst, fabs(p[i] - pd[i]));
    CHECK(worst < 1e-6, "AdamW 5 steps vs double reference: max abs diff %.2e", worst);
    free(sp);
}

static void test_schedule(void) {
    sk_lr_sched s = {6e-4, 6e-5, 10, 110};
    CHECK(fabs(sk_lr_at(&s, 0) - 6e-4 * 1 / 11) < 1e-15, "warmup it=0: %.6g = lr*1/11", sk_lr_at(&s, 0));
    CHECK(fabs(sk_lr_at(&s, 9) - 6e-4 * 10 / 11) < 1e-15, "warmup it=9: %.6g = lr*10/11", sk_lr_at(&s, 9));
    CHECK(fabs(sk_lr_at(&s, 10) - 6e-4) < 1e-15, "end of warmup it=10: %.6g = lr", sk_lr_at(&s, 10));
    CHECK(fabs(sk_lr_at(&s, 60) - 3.3e-4) < 1e-12, "cosine midpoint it=60: %.6g = (lr+min_lr)/2", sk_lr_at(&s, 60));
    double q = 6e-5 + 0.5 * (1 + cos(M_PI * 0.25)) * (6e-4 - 6e-5);
    CHECK(fabs(sk_lr_at(&s, 35) - q) < 1e-15, "cosine quarter it=35: %.8g = %.8g", sk_lr_at(&s, 35), q);
    CHECK(fabs(sk_lr_at(&s, 110) - 6e-5) < 1e-15 && sk_lr_at(&s, 111) == 6e-5 && sk_lr_at(&s, 5000) == 6e-5,
          "it >= decay_iters: min_lr (%.6g, %.6g)", sk_lr_at(&s, 110), sk_lr_at(&s, 111));
    sk_lr_sched z = {1e-3, 1e-4, 0, 10};
    CHECK(sk_lr_at(&z, 0) == 1e-3, "no warmup: it=0 gives lr");
}

static void test_clip(void) {
    float g[4] = {3, 0, 4, 0};
    sk_tensor ts[2] = {tensor(0, 2, 1), tensor(2, 2, 0)};
    sk_span *sp; int ns;
    sk_spans_build(ts, 2, &sp, &ns);
    double n = sk_grad_norm(g, sp, ns);
    CHECK(n == 5.0, "grad norm of (3, 0, 4, 0) = %g", n);
    float coef = sk_clip_grads(g, sp, ns, n, 1.0f);
    float want = 1.0f / (5.0f + 1e-6f);
    CHECK(coef == want && g[0] == 3 * want && g[2] == 4 * want, "clip to 1: coef %.9g = 1/(5+1e-6), g0 %.7f", coef, g[0]);
    float h[4] = {0.3f, 0, 0.4f, 0};
    coef = sk_clip_grads(h, sp, ns, sk_grad_norm(h, sp, ns), 1.0f);
    CHECK(coef == 1.0f && h[0] == 0.3f && h[2] == 0.4f, "norm 0.5 < 1: unchanged");
    /* the coefficient alone (what the CUDA update multiplies by when it is not 1): clamped to 1 */
    CHECK(sk_clip_coef(0.5, 1.0f) == 1.0f && sk_clip_coef(0.0, 1.0f) == 1.0f && sk_clip_coef(5.0, 1.0f) == want,
          "sk_clip_coef: 1 below the limit and at norm 0, 1/(5+1e-6) above it");
    free(sp);
}

static void test_mask_and_gaps(void) {
    /* tensors [0,100) decay, [100,150) no decay, a gap [150,200) (like padded vocab rows),
     * [200,300) decay. Zero gradients: AdamW moves only decayed params, by exactly the
     * decay factor; the gap is never touched (not even read into the update). */
    enum { N = 300 };
    float p[N], g[N], m[N], v[N];
    for (int i = 0; i < N; i++) { p[i] = 1.0f; g[i] = 0; m[i] = v[i] = 0; }
    for (int i = 150; i < 200; i++) { g[i] = 1e3f; p[i] = 0; }
    sk_tensor ts[3] = {tensor(200, 100, 1), tensor(0, 100, 1), tensor(100, 50, 0)};   /* out of order */
    sk_span *sp; int ns;
    sk_spans_build(ts, 3, &sp, &ns);
    int ordered = 1;
    for (int i = 1; i < ns; i++) ordered &= sp[i].offset > sp[i - 1].offset;
    CHECK(ordered && ns == 3, "spans in buffer order (%d spans)", ns);
    sk_adamw_cfg c = {0.1f, 0.9f, 0.95f, 1e-8f, 0.5f};
    sk_adamw_step(p, g, m, v, sp, ns, &c, 0.1, 1);
    int ok_dec = 1, ok_nodec = 1, ok_gap = 1;
    for (int i = 0; i < 100; i++) ok_dec &= p[i] == 0.95f && p[200 + i] == 0.95f;
    for (int i = 100; i < 150; i++) ok_nodec &= p[i] == 1.0f;
    for (int i = 150; i < 200; i++) ok_gap &= p[i] == 0.0f && m[i] == 0 && v[i] == 0;
    CHECK(ok_dec, "decay=1 tensors decayed by 1 - lr*wd = 0.95");
    CHECK(ok_nodec, "decay=0 tensor not decayed");
    CHECK(ok_gap, "floats outside every tensor (padding) untouched");
    double n = sk_grad_norm(g, sp, ns);
    CHECK(n == 0.0, "gap excluded from the grad norm (%g)", n);
    free(sp);
}

static void test_norm_threads(void) {
    enum { N = 1000003 };
    float *g = malloc(N * sizeof(float));
    unsigned long long s = 7;
    fill_uniform(g, N, &s);
    for (int i = 0; i < N; i += 97) g[i] *= 1000.0f;       /* a wide dynamic range */
    sk_tensor ts[3] = {tensor(0, 123457, 1), tensor(123457, 500000, 0), tensor(623457, N - 623457, 1)};
    sk_span *sp; int ns;
    sk_spans_build(ts, 3, &sp, &ns);
    size_t cover = 0; int maxn = 1;
    for (int i = 0; i < ns; i++) { cover += sp[i].n; maxn &= sp[i].n <= SK_SPAN_FLOATS; }
    CHECK(cover == N && maxn, "spans cover all %d floats in pieces of <= %d", N, SK_SPAN_FLOATS);
    long double ref = 0;
    for (int i = 0; i < N; i++) ref += (long double)g[i] * g[i];
    double ref_n = sqrtl(ref);
    int max_threads = omp_get_max_threads();
    double n1 = 0;
    int same = 1;
    int counts[] = {1, 2, 3, 4, 7, 16};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        omp_set_num_threads(counts[k]);
        double n = sk_grad_norm(g, sp, ns);
        if (k == 0) n1 = n;
        else if (memcmp(&n, &n1, sizeof n)) { same = 0; printf("  threads %d: %.17g vs %.17g\n", counts[k], n, n1); }
    }
    omp_set_num_threads(max_threads);
    CHECK(same, "grad norm bit-identical for 1, 2, 3, 4, 7, 16 threads (%.17g)", n1);
    CHECK(fabs(n1 - ref_n) <= 1e-12 * ref_n, "grad norm vs long double: rel diff %.1e", fabs(n1 - ref_n) / ref_n);
    free(sp); free(g);
}

static void test_dropout_seed(void) {
    uint64_t a = sk_dropout_seed(1, 5, 0), b = sk_dropout_seed(1, 5, 1), c = sk_dropout_seed(1, 6, 0), d = sk_dropout_seed(2, 5, 0);
    CHECK(a == sk_dropout_seed(1, 5, 0) && a != b && a != c && a != d && b != c,
          "dropout seeds: stateless, distinct per (seed, step, micro-step)");
}

int main(void) {
    test_adamw_hand();
    test_adamw_ref();
    test_schedule();
    test_clip();
    test_mask_and_gaps();
    test_norm_threads();
    test_dropout_seed();
    TEST_END();
}
