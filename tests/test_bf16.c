/* bf16 mixed precision on the CPU, in C (the PyTorch comparisons are tests/test_bf16_torch.py):
 *  1. each elementwise op of core/ops_bf16.c is its fp32 op's result rounded to bf16, bit for bit
 *     (norms, GELU erf/tanh, ReLU, SwiGLU, forward and backward), the bf16 column sums equal the
 *     fp32 ones on the widened values;
 *  2. the GEMM cache: one primitive per shape, reused for other buffers; GEMMs run from several
 *     threads at once give the bits of the same GEMMs run one after another;
 *  3. the model: bf16 forward_backward is deterministic, recomputation gives the same bits,
 *     sk_model_params() makes the next pass round the weights anew (a weight written through it
 *     is seen), switching back to fp32 gives the fp32 bits, bf16 activations take less memory.
 * Built without oneDNN: the GEMM checks run on the fallback, and sk_model_set_bf16 must refuse
 * naming libdnnl-dev (the model checks print SKIP). */
#include "test.h"
#include "skiplm.h"
#include "core/gemm_bf16.h"
#include "core/ops.h"
#include "core/ops_bf16.h"
#include <omp.h>
#include <pthread.h>

static float urand(unsigned long long *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}
static void fill(float *x, size_t n, float scale, unsigned long long *s) { for (size_t i = 0; i < n; i++) x[i] = scale * urand(s); }
static void fill16(uint16_t *x, size_t n, float scale, unsigned long long *s) { for (size_t i = 0; i < n; i++) x[i] = sk_bf16_from_f32(scale * urand(s)); }
static int same16(const uint16_t *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) if (a[i] != sk_bf16_from_f32(b[i])) return 0;
    return 1;
}

/* ------------------------------------------------------------ 1. the ops */
static void ops(void) {
    enum { N = 37, C = 72, F = 50 };
    unsigned long long s = 7;
    float *x = malloc(sizeof(float) * N * C * 2), *w = malloc(sizeof(float) * C), *b = malloc(sizeof(float) * C);
    float *o = malloc(sizeof(float) * N * C * 2), *m1 = malloc(sizeof(float) * N), *r1 = malloc(sizeof(float) * N);
    float *m2 = malloc(sizeof(float) * N), *r2 = malloc(sizeof(float) * N), *d = malloc(sizeof(float) * N * C * 2);
    uint16_t *o16 = malloc(sizeof(uint16_t) * N * C * 2), *h16 = malloc(sizeof(uint16_t) * N * C * 2);
    fill(x, (size_t)N * C, 3.0f, &s); fill(w, C, 1.0f, &s); fill(b, C, 0.5f, &s);
    sk_layernorm_forward(o, m1, r1, x, w, b, N, C, 1e-5f);
    sk_layernorm_forward_bf16(o16, m2, r2, x, w, b, N, C, 1e-5f);
    CHECK(same16(o16, o, (size_t)N * C) && !memcmp(m1, m2, sizeof(float) * N) && !memcmp(r1, r2, sizeof(float) * N),
          "layernorm to bf16: the fp32 op's output rounded, mean and rstd the same bits");
    sk_layernorm_forward(o, m1, r1, x, w, NULL, N, C, 1e-5f);
    sk_layernorm_forward_bf16(o16, m2, r2, x, w, NULL, N, C, 1e-5f);
    CHECK(same16(o16, o, (size_t)N * C), "layernorm without a bias to bf16: the fp32 op's output rounded");
    sk_rmsnorm_forward(o, r1, x, w, N, C, 1e-6f);
    sk_rmsnorm_forward_bf16(o16, r2, x, w, N, C, 1e-6f);
    CHECK(same16(o16, o, (size_t)N * C) && !memcmp(r1, r2, sizeof(float) * N), "rmsnorm to bf16: the fp32 op's output rounded");
    /* activations: h in bf16 (its widened values for the fp32 op), dout fp32 */
    const size_t n = (size_t)N * F;
    fill16(h16, 2 * n, 4.0f, &s);
    sk_bf16_to_f32_n(x, h16, 2 * n);
    fill(d, 2 * n, 1.0f, &s);
    for (int t = 0; t < 2; t++) {
        sk_gelu_forward(o, x, n, t);
        sk_gelu_forward_bf16(o16, h16, n, t);
        CHECK(same16(o16, o, n), "gelu (%s) on bf16: the fp32 op's output rounded", t ? "tanh" : "erf");
        sk_gelu_backward(o, x, d, n, t);
        sk_gelu_backward_bf16(o16, h16, d, n, t);
        CHECK(same16(o16, o, n), "gelu (%s) backward from bf16: the fp32 op's gradient rounded", t ? "tanh" : "erf");
    }
    sk_relu_forward(o, x, n); sk_relu_forward_bf16(o16, h16, n);
    CHECK(same16(o16, o, n), "relu on bf16");
    sk_relu_backward(o, x, d, n); sk_relu_backward_bf16(o16, h16, d, n);
    CHECK(same16(o16, o, n), "relu backward from bf16");
    sk_swiglu_forward(o, x, N, F); sk_swiglu_forward_bf16(o16, h16, N, F);
    CHECK(same16(o16, o, n), "swiglu on bf16 [a | b]: the fp32 op's output rounded");
    sk_swiglu_backward(o, x, d, N, F); sk_swiglu_backward_bf16(o16, h16, d, N, F);
    CHECK(same16(o16, o, 2 * n), "swiglu backward from bf16: both halves of the fp32 op's gradient rounded");
    float c1[2 * F] = {0}, c2[2 * F] = {0};
    sk_colsum_add(c1, x, N, 2 * F);
    sk_colsum_add_bf16(c2, h16, N, 2 * F);
    CHECK(!memcmp(c1, c2, sizeof c1), "bf16 column sums: the fp32 sums of the widened values, the same bits");
    sk_round_bf16(o16, d, 2 * n);
    CHECK(same16(o16, d, 2 * n), "sk_round_bf16: sk_bf16_from_f32's bits");
    free(x); free(w); free(b); free(o); free(m1); free(r1); free(m2); free(r2); free(d); free(o16); free(h16);
}

/* ------------------------------------------------------------ 2. GEMMs */
typedef struct { int ta, tb, M, N, K, acc; const uint16_t *A, *B; const float *bias; float *C; int rc; } job;
static void run_job(job *j) {
    int lda = j->ta ? j->M : j->K, ldb = j->tb ? j->K : j->N;
    j->rc = sk_gemm_bf16(j->ta, j->tb, j->M, j->N, j->K, j->A, lda, j->B, ldb, j->bias, j->acc, j->C, NULL, j->N);
}
static void *thread_main(void *arg) {
    job *js = arg;
    for (int r = 0; r < 20; r++)
        for (int i = 0; i < 3; i++) {
            memset(js[i].C, 0, sizeof(float) * js[i].M * js[i].N);
            run_job(&js[i]);
        }
    return NULL;
}
static void gemms(void) {
    enum { M = 96, N = 80, K = 64, T = 4 };
    unsigned long long s = 3;
    uint16_t *A = malloc(sizeof(uint16_t) * M * K), *B = malloc(sizeof(uint16_t) * N * K), *A2 = malloc(sizeof(uint16_t) * M * K);
    float bias[N], *C = calloc((size_t)M * N, sizeof(float)), *C2 = calloc((size_t)M * N, sizeof(float));
    fill16(A, (size_t)M * K, 1.0f, &s); fill16(B, (size_t)N * K, 1.0f, &s); fill(bias, N, 1.0f, &s);
    memcpy(A2, A, sizeof(uint16_t) * M * K);
    int n0 = sk_gemm_bf16_cached();
    int rc = sk_gemm_bf16(0, 1, M, N, K, A, K, B, K, bias, 0, C, NULL, N);
    int n1 = sk_gemm_bf16_cached();
    rc |= sk_gemm_bf16(0, 1, M, N, K, A2, K, B, K, bias, 0, C2, NULL, N);
    int n2 = sk_gemm_bf16_cached();
    rc |= sk_gemm_bf16(0, 1, M, N - 1, K - 1, A, K, B, K, bias, 0, C2, NULL, N - 1);
    int n3 = sk_gemm_bf16_cached();
#ifdef SK_HAVE_DNNL
    CHECK(!rc && n1 == n0 + 1 && n2 == n1 && n3 == n2 + 1, "one cached primitive per shape (%d -> %d -> %d -> %d), "
          "reused for other buffers", n0, n1, n2, n3);
#else
    CHECK(!rc && n3 == 0, "built without oneDNN: the GEMMs run on the fallback (no primitives)");
#endif
    /* several threads at once, each its own shapes and buffers, 20 times: the serial bits; the
     * three kinds (X W^T + bias, dY W, dW += dY^T X), each thread's M its own */
    uint16_t *big = malloc(sizeof(uint16_t) * 128 * 128 * 2);
    fill16(big, 128 * 128 * 2, 1.0f, &s);
    const int dims[3][6] = {{0, 1, 96, 80, 64, 0}, {0, 0, 96, 64, 80, 0}, {1, 0, 64, 80, 96, 1}};
    job ref[T][3], js[T][3];
    for (int t = 0; t < T; t++)
        for (int i = 0; i < 3; i++) {
            job j = {dims[i][0], dims[i][1], dims[i][2] - 3 * t, dims[i][3], dims[i][4], dims[i][5], big, big + 128 * 128,
                     i == 0 ? bias : NULL, NULL, 0};
            ref[t][i] = js[t][i] = j;
            ref[t][i].C = calloc((size_t)j.M * j.N, sizeof(float));
            js[t][i].C = calloc((size_t)j.M * j.N, sizeof(float));
            run_job(&ref[t][i]);
        }
    pthread_t th[T];
    for (int t = 0; t < T; t++) pthread_create(&th[t], NULL, thread_main, js[t]);
    for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
    int ok = 1;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < 3; i++) {
            ok &= !ref[t][i].rc && !js[t][i].rc && !memcmp(ref[t][i].C, js[t][i].C, sizeof(float) * js[t][i].M * js[t][i].N);
            free(ref[t][i].C); free(js[t][i].C);
        }
    CHECK(ok, "%d threads running bf16 GEMMs at once (3 shapes each, 20 times): the serial results, bit for bit", T);
    free(A); free(A2); free(B); free(C); free(C2); free(big);
}

/* ------------------------------------------------------------ 3. the model */
static int fb(sk_model *m, const int32_t *x, const int32_t *y, int B, int T, float *loss, float *g) {
    sk_model_zero_grad(m);
    if (sk_model_forward_backward(m, x, y, B, T, 1.0f, 5, loss)) return 1;
    memcpy(g, sk_model_grads(m), sizeof(float) * sk_model_num_params(m));
    return 0;
}
static void model(void) {
    sk_config cfg;
    sk_config_default(&cfg);
    cfg.n_layer = 3; cfg.n_head = 4; cfg.n_embd = 32; cfg.block_size = 16; cfg.vocab_size = 53; cfg.dropout = 0.1f;
    cfg.n_skip_layer = 1; cfg.n_skip_head = 2;
    sk_model *m;
    if (sk_model_new(&m, &cfg, 11)) { CHECK(0, "model: %s", sk_last_error()); return; }
    if (!sk_bf16_available()) {
        int rc = sk_model_set_bf16(m, 1);
        CHECK(rc == SK_EINVAL && strstr(sk_last_error(), "libdnnl-dev") && !sk_model_bf16(m),
              "built without oneDNN: sk_model_set_bf16 refuses, naming libdnnl-dev (%s)", sk_last_error());
        if (getenv("CI") && !strcmp(getenv("CI"), "true"))
            CHECK(0, "oneDNN (libdnnl-dev) is not built in but CI=true: scripts/install_deps.sh should have installed it");
        else printf("SKIP the bf16 model checks: this skiplm was built without oneDNN\n");
        sk_model_free(m);
        return;
    }
    enum { B = 3, T = 16 };
    int32_t x[B * T], y[B * T];
    for (int i = 0; i < B * T; i++) { x[i] = (i * 7) % 53; y[i] = (i * 11 + 3) % 53; }
    size_t P = sk_model_num_params(m);
    float *g32 = malloc(sizeof(float) * P), *g1 = malloc(sizeof(float) * P), *g2 = malloc(sizeof(float) * P), *g3 = malloc(sizeof(float) * P);
    float l32, l1, l2, l3;
    size_t a32 = sk_model_activation_bytes(m, B, T, 1);
    int rc = fb(m, x, y, B, T, &l32, g32);
    rc |= sk_model_set_bf16(m, 1);
    size_t a16 = sk_model_activation_bytes(m, B, T, 1);
    rc |= fb(m, x, y, B, T, &l1, g1) | fb(m, x, y, B, T, &l2, g2);
    CHECK(!rc && sk_model_bf16(m) && l1 == l2 && !memcmp(g1, g2, sizeof(float) * P), "bf16 forward_backward twice: the same bits");
    double d = max_abs_diff(g1, g32, P), gm = max_abs(g32, P);
    CHECK(l1 != l32 && fabs(l1 - l32) < 1e-2 * l32 && d > 1e-6 * gm && d < 0.1 * gm,
          "bf16 differs from fp32, a little: loss %.6f vs %.6f, gradients max diff %.1e (max %.1e)", l1, l32, d, gm);
    CHECK(a16 < a32, "bf16 activations take less memory: %zu bytes instead of %zu for B=%d, T=%d", a16, a32, B, T);
    sk_model_set_recompute(m, 1);
    rc = fb(m, x, y, B, T, &l3, g3);
    CHECK(!rc && l3 == l1 && !memcmp(g3, g1, sizeof(float) * P), "bf16 with recomputation: the same bits as without");
    sk_model_set_recompute(m, 0);
    /* a weight written through sk_model_params is seen by the next pass (its bf16 copy is rounded anew) */
    float *p = sk_model_params(m);
    int nt; const sk_tensor *ts = sk_model_tensors(m, &nt);
    const sk_tensor *fc = sk_model_tensor(m, "transformer.h.1.mlp.c_fc.weight");
    for (size_t i = 0; i < fc->numel; i++) p[fc->offset + i] *= 2.0f;
    rc = fb(m, x, y, B, T, &l3, g3);
    CHECK(!rc && l3 != l1, "a weight changed through sk_model_params() changes the next bf16 pass (loss %.6f -> %.6f)", l1, l3);
    p = sk_model_params(m);     /* written after a pass: through a pointer handed out anew */
    for (size_t i = 0; i < fc->numel; i++) p[fc->offset + i] *= 0.5f;
    rc = fb(m, x, y, B, T, &l3, g3);
    CHECK(!rc && l3 == l1 && !memcmp(g3, g1, sizeof(float) * P), "... and changed back, the first pass's bits again");
    (void)ts; (void)nt;
    rc = sk_model_set_bf16(m, 0) || fb(m, x, y, B, T, &l3, g3);
    CHECK(!rc && !sk_model_bf16(m) && l3 == l32 && !memcmp(g3, g32, sizeof(float) * P), "back to fp32: the fp32 bits");
    /* the forward alone (eval), with logits, in bf16 */
    float lf;
    float *logits = malloc(sizeof(float) * B * T * 53);
    rc = sk_model_set_bf16(m, 1) || sk_model_forward(m, x, y, B, T, &lf, logits);
    CHECK(!rc && fabsf(lf - l1) <= 1e-6f * l1 + 0.02f, "bf16 forward alone (no dropout): loss %.6f", lf);
    free(logits);
    rc = sk_model_set_bf16(m, 0) || sk_model_quantize_q8(m);
    int rq = sk_model_set_bf16(m, 1);
    CHECK(!rc && rq == SK_EINVAL && strstr(sk_last_error(), "8-bit") && !sk_model_bf16(m),
          "an 8-bit model refuses bf16: %s", sk_last_error());
    free(g32); free(g1); free(g2); free(g3);
    sk_model_free(m);
}

/* sk_adamw_step_bf16: sk_adamw_step's fp32 results, and the updated weights rounded into p16 */
static void adamw(void) {
    enum { P = 3000 };
    unsigned long long s = 9;
    float *p1 = malloc(sizeof(float) * P), *p2 = malloc(sizeof(float) * P), *g = malloc(sizeof(float) * P);
    float *m1 = calloc(P, sizeof(float)), *v1 = calloc(P, sizeof(float)), *m2 = calloc(P, sizeof(float)), *v2 = calloc(P, sizeof(float));
    uint16_t *p16 = malloc(sizeof(uint16_t) * P);
    fill(p1, P, 1.0f, &s); memcpy(p2, p1, sizeof(float) * P);
    for (int i = 0; i < P; i++) p16[i] = 0x7fc0;                     /* NaN where no span writes */
    sk_span spans[3] = {{0, 1000, 1}, {1000, 700, 0}, {2000, 1000, 1}};   /* [1700, 2000) in none */
    sk_adamw_cfg c;
    sk_adamw_default(&c);
    for (int t = 1; t <= 3; t++) {
        fill(g, P, 0.1f, &s);
        sk_adamw_step(p1, g, m1, v1, spans, 3, &c, 1e-3, t);
        sk_adamw_step_bf16(p2, g, m2, v2, spans, 3, &c, 1e-3, t, p16);
    }
    int ok = !memcmp(p1, p2, sizeof(float) * P) && !memcmp(m1, m2, sizeof(float) * P) && !memcmp(v1, v2, sizeof(float) * P);
    int r = 1;
    for (int i = 0; i < P; i++) r &= (i >= 1700 && i < 2000) ? p16[i] == 0x7fc0 : p16[i] == sk_bf16_from_f32(p2[i]);
    CHECK(ok && r, "sk_adamw_step_bf16: sk_adamw_step's weights, m and v, and the updated weights (only they) rounded into the copy");
    free(p1); free(p2); free(g); free(m1); free(v1); free(m2); free(v2); free(p16);
}

int main(void) {
    printf("info: oneDNN %d, native bf16 %d, ISA %s, %s, %d threads\n", sk_bf16_available(), sk_bf16_native(), sk_bf16_isa(),
           sk_bf16_version(), omp_get_max_threads());
    ops();
    gemms();
    adamw();
    model();
    return sk_test_failed ? 1 : 0;
}
