/* GPU vs CPU parity of the CUDA backend (make cuda-test; needs a GPU; not part of make test).
 *
 * For small random models of both families, with and without SLA, several routing tables,
 * head sizes 16..128 (every attention tile configuration), dropout, and sequence lengths
 * that are not multiples of the attention tiles, with identical weights and batch:
 *   1. forward: loss (1e-5 relative) and logits (1e-4 absolute);
 *   2. forward + backward: loss and every gradient tensor within 1e-4 * max(1, max|g|)
 *      (the tolerance of the engine's PyTorch tests);
 *   3. gradient norm of the GPU gradients: GPU vs sk_grad_norm (1e-9 relative);
 *   4. one AdamW step with clipping from the same (GPU) gradients: parameters, m and v
 *      bit-identical to sk_adamw_step (the kernel rounds op by op as src/train/optim.c);
 *   5. three more training steps each on its own side: losses within 1e-4 relative, final
 *      parameters within 1e-4 absolute (lr 1e-3);
 * and the trainer (sk_trainer with the CUDA backend vs the CPU trainer, on a token shard):
 * losses of 4 steps, a checkpoint pulled from the device, the parameters equal.
 * bf16 mixed precision (SK_CUDA_BF16):
 *   - the GEMM: every transpose pair, strided operands, alpha/beta, operands in the parameters
 *     (their bf16 copy, also after an upload and an AdamW step) and outside them, against a
 *     double-precision product of the operands rounded to bf16 on the host (1e-5), and
 *     measurably away from the fp32 product (so the bf16 path really ran);
 *   - the model: loss, logits and every gradient tensor near the CPU's fp32 values (bf16
 *     tolerances: relative L2 error per tensor), and not equal to them;
 *   - the trainer: 8 steps of bf16 training track the CPU's fp32 loss curve;
 *   - the tensor-core attention (cu_attn.tc) alone against the fp32 kernels on the same
 *     bf16-valued inputs through strided views: output, lse, dQ, dK, dV within bf16's
 *     rounding, not equal, nothing outside the views touched;
 *   - the MLP's kernels in bf16 (pre-activation, activation and their gradients in bf16): the
 *     fp32 kernels' outputs on the same values, rounded once, to the bit;
 *   - the activations that only feed GEMMs are kept in bf16: the measured activation memory
 *     is smaller than fp32's by what their fp32 copies took, less their bf16 copies.
 * A NaN weight gives a NaN loss (forward and training, fp32 and bf16).
 * Prints PASS/FAIL per check and "N passed, N failed"; exits non-zero on failure. */
#include "skiplm.h"
#include "skiplm_cuda.h"
#include "../test.h"
#include "cuda_test.h"
#include "cuda/cuda_internal.h"      /* sk_cu_gemm and the device buffers, for the bf16 GEMM test */
#include <stdint.h>

static int n_pass = 0;
#define CHECK2(cond, ...) do { int ok_ = (cond); CHECK(ok_, __VA_ARGS__); n_pass += ok_; } while (0)

typedef struct {
    const char *name;
    const char *fields;      /* "key=value key=value ..." for sk_config_set */
    int B, T;
} tcase;

static const tcase CASES[] = {
    {"gpt2 baseline hs16", "n_layer=3 n_head=4 n_embd=64 vocab_size=97 block_size=128", 2, 37},
    {"gpt2 SLA 2/3 hs16 T=70", "n_layer=4 n_head=4 n_embd=64 vocab_size=97 block_size=128 n_skip_layer=2 n_skip_head=3", 2, 70},
    {"gpt2 SLA 1/2 hs32 tanh nobias", "n_layer=3 n_head=4 n_embd=128 vocab_size=200 block_size=128 n_skip_layer=1 n_skip_head=2 gelu=tanh bias=0", 2, 100},
    {"gpt2 routing cross-layer", "n_layer=4 n_head=4 n_embd=64 vocab_size=97 block_size=128 routing=1,3:*=-1", 2, 45},
    {"gpt2 routing multi-source", "n_layer=4 n_head=4 n_embd=64 vocab_size=97 block_size=128 routing=2-3:0-1=-2;3:2-3=@0", 1, 66},
    {"gpt2 SLA all heads 4/4", "n_layer=3 n_head=4 n_embd=64 vocab_size=97 block_size=128 n_skip_layer=1 n_skip_head=4", 2, 29},
    {"gpt2 hs64 SLA T=130", "n_layer=3 n_head=4 n_embd=256 vocab_size=97 block_size=256 n_skip_layer=2 n_skip_head=2", 1, 130},
    {"gpt2 hs128 SLA T=65", "n_layer=2 n_head=2 n_embd=256 vocab_size=97 block_size=128 n_skip_layer=1 n_skip_head=1", 2, 65},
    {"gpt2 hs48 (padded head) T=50", "n_layer=2 n_head=2 n_embd=96 vocab_size=97 block_size=128", 2, 50},
    {"gpt2 relu sinusoidal", "n_layer=2 n_head=4 n_embd=64 vocab_size=97 block_size=64 relu=1 sinusoidal=1", 3, 33},
    {"gpt2 dropout 0.1 SLA", "n_layer=3 n_head=4 n_embd=64 vocab_size=97 block_size=128 n_skip_layer=1 n_skip_head=2 dropout=0.1", 2, 67},
    {"gpt2 T=256 B=3 SLA", "n_layer=2 n_head=4 n_embd=128 vocab_size=300 block_size=256 n_skip_layer=1 n_skip_head=3", 3, 256},
    {"llama GQA 4/2 SLA", "family=llama n_layer=3 n_head=4 n_kv_head=2 n_embd=64 vocab_size=97 block_size=128 n_skip_layer=2 n_skip_head=2 bias=0", 2, 45},
    {"llama MQA all heads hs32", "family=llama n_layer=2 n_head=4 n_kv_head=1 n_embd=128 vocab_size=97 block_size=128 n_skip_layer=1 n_skip_head=4 bias=0 rope_theta=10000", 2, 66},
    {"llama relu", "family=llama n_layer=2 n_head=4 n_embd=64 vocab_size=97 block_size=64 relu=1 bias=0", 2, 31},
    {"gpt2 untied head SLA", "n_layer=2 n_head=4 n_embd=64 vocab_size=97 block_size=64 untied_head=1 n_skip_layer=1 n_skip_head=2", 2, 33},
    {"llama untied head rope llama3", "family=llama n_layer=2 n_head=4 n_kv_head=2 n_embd=64 vocab_size=97 block_size=128 bias=0 "
     "untied_head=1 rope_theta=10000 rope_scaling=llama3 rope_factor=8 rope_original_ctx=64", 2, 40},
    {"llama qkv bias GQA SLA", "family=llama n_layer=3 n_head=4 n_kv_head=2 n_embd=64 vocab_size=97 block_size=128 bias=0 "
     "qkv_bias=1 n_skip_layer=1 n_skip_head=2", 2, 37},
};

static void random_batch(int32_t *x, int32_t *y, int n, int V, uint64_t seed) {
    uint64_t r = test_lcg_seed(seed);
    for (int i = 0; i < n; i++) {
        x[i] = TEST_TOKEN(&r, V);
        uint64_t u = test_lcg(&r);
        y[i] = (u >> 60) == 0 ? -1 : (int32_t)((u >> 33) % (uint64_t)V);    /* ~1/16 ignored */
    }
}

static double rel(double a, double b) { return fabs(a - b) / fmax(1e-30, fabs(b)); }

/* one training step on either side; returns the loss, writes the norm */
static int step_cpu(sk_model *m, const int32_t *x, const int32_t *y, int B, int T, float *mo, float *ve,
                    const sk_span *sp, int ns, const sk_adamw_cfg *ac, long t, uint64_t seed, float *loss, double *norm) {
    sk_model_zero_grad(m);
    if (sk_model_forward_backward(m, x, y, B, T, 1.0f, seed, loss)) return -1;
    float *g = sk_model_grads(m);
    *norm = sk_grad_norm(g, sp, ns);
    sk_clip_grads(g, sp, ns, *norm, 1.0f);
    sk_adamw_step(sk_model_params(m), g, mo, ve, sp, ns, ac, ac->lr, t);
    return 0;
}
static int step_gpu(sk_cuda_model *cm, const int32_t *x, const int32_t *y, int B, int T, const sk_adamw_cfg *ac,
                    long t, uint64_t seed, float *loss, double *norm) {
    if (sk_cuda_zero_grad(cm) || sk_cuda_forward_backward(cm, x, y, B, T, 1.0f, seed, loss)) return -1;
    if (sk_cuda_grad_norm(cm, norm)) return -1;
    return sk_cuda_adamw_step(cm, ac, ac->lr, t, sk_clip_coef(*norm, 1.0f));
}

static int perturb_params(sk_model *m, sk_cuda_model *cm);

static void run_case(const tcase *tc) {
    sk_config cfg;
    if (test_config(tc->fields, &cfg)) { CHECK2(0, "%s: config: %s", tc->name, sk_last_error()); return; }
    sk_model *m = NULL;
    sk_cuda_model *cm = NULL;
    if (sk_model_new(&m, &cfg, 1234)) { CHECK2(0, "%s: model: %s", tc->name, sk_last_error()); return; }
    sk_model_set_recompute(m, 0);
    if (sk_cuda_model_new(&cm, m, SK_CUDA_FP32)) { CHECK2(0, "%s: cuda model: %s", tc->name, sk_last_error()); sk_model_free(m); return; }
    const int B = tc->B, T = tc->T, N = B * T, V = cfg.vocab_size;
    const size_t P = sk_model_num_params(m);
    int32_t *x = malloc(sizeof(int32_t) * N), *y = malloc(sizeof(int32_t) * N);
    float *lc = malloc(sizeof(float) * N * V), *lg = malloc(sizeof(float) * N * V);
    float *gg = malloc(sizeof(float) * P), *pg = malloc(sizeof(float) * P);
    float *mc = calloc(P, sizeof(float)), *vc = calloc(P, sizeof(float));
    float *mg = malloc(sizeof(float) * P), *vg = malloc(sizeof(float) * P);
    random_batch(x, y, N, V, 77);
    if (perturb_params(m, cm)) { CHECK2(0, "%s: upload: %s", tc->name, sk_last_error()); goto done; }
    int nt; const sk_tensor *ts = sk_model_tensors(m, &nt);
    sk_span *sp; int ns;
    sk_spans_build(ts, nt, &sp, &ns);
    const uint64_t seed = 99;

    /* 1. forward */
    float loss_c = 0, loss_g = 0;
    int rc = sk_model_forward(m, x, y, B, T, &loss_c, lc);
    int rg = sk_cuda_forward(cm, x, y, B, T, &loss_g, lg);
    if (rc || rg) { CHECK2(0, "%s: forward failed: %s", tc->name, sk_last_error()); goto done; }
    double dl = max_abs_diff(lc, lg, (size_t)N * V);
    CHECK2(rel(loss_g, loss_c) <= 1e-5, "%s: forward loss cpu %.7f gpu %.7f (rel %.2e)", tc->name, loss_c, loss_g, rel(loss_g, loss_c));
    CHECK2(dl <= 1e-4, "%s: logits max |diff| %.2e (max |logit| %.3f)", tc->name, dl, max_abs(lc, (size_t)N * V));

    /* 2. forward + backward */
    sk_model_zero_grad(m);
    rc = sk_model_forward_backward(m, x, y, B, T, 1.0f, seed, &loss_c);
    rg = sk_cuda_zero_grad(cm) || sk_cuda_forward_backward(cm, x, y, B, T, 1.0f, seed, &loss_g) || sk_cuda_download_grads(cm, gg);
    if (rc || rg) { CHECK2(0, "%s: forward_backward failed: %s", tc->name, sk_last_error()); goto done; }
    CHECK2(rel(loss_g, loss_c) <= 1e-5, "%s: training loss cpu %.7f gpu %.7f", tc->name, loss_c, loss_g);
    {
        const float *gc = sk_model_grads(m);
        int bad = 0;
        double worst = 0; const char *worst_name = "";
        for (int i = 0; i < nt; i++) {
            double d = max_abs_diff(gc + ts[i].offset, gg + ts[i].offset, ts[i].numel);
            double tol = 1e-4 * fmax(1.0, max_abs(gc + ts[i].offset, ts[i].numel));
            if (d / tol > worst) { worst = d / tol; worst_name = ts[i].name; }
            if (!(d <= tol)) {
                bad++;
                printf("  %s: %s max |diff| %.3e, tol %.1e, max |g| %.3e\n", tc->name, ts[i].name, d, tol,
                       max_abs(gc + ts[i].offset, ts[i].numel));
            }
        }
        /* the padded vocabulary rows of wte: 0 on both sides */
        CHECK2(bad == 0, "%s: all %d gradient tensors within tolerance (worst %s at %.2f of tol)", tc->name, nt,
               worst_name, worst);
    }

    /* 3. gradient norm */
    double ng = 0;
    if (sk_cuda_grad_norm(cm, &ng)) { CHECK2(0, "%s: grad norm: %s", tc->name, sk_last_error()); goto done; }
    double nc = sk_grad_norm(gg, sp, ns);
    CHECK2(rel(ng, nc) <= 1e-9, "%s: grad norm gpu %.10g vs cpu on the same grads %.10g", tc->name, ng, nc);

    /* 4. one AdamW step with clipping from the same gradients: bit-identical */
    sk_adamw_cfg ac;
    sk_adamw_default(&ac);
    ac.lr = 1e-3f;
    {
        float coef = sk_clip_coef(nc, (float)(nc * 0.5));     /* forces clipping */
        float *p = sk_model_params(m);
        sk_clip_grads(gg, sp, ns, nc, (float)(nc * 0.5));
        sk_adamw_step(p, gg, mc, vc, sp, ns, &ac, ac.lr, 1);
        if (sk_cuda_adamw_step(cm, &ac, ac.lr, 1, coef) || sk_cuda_download_params(cm, pg) ||
            sk_cuda_download_adam(cm, mg, vg)) {
            CHECK2(0, "%s: adamw: %s", tc->name, sk_last_error());
            goto done;
        }
        double dp = max_abs_diff(p, pg, P), dm = max_abs_diff(mc, mg, P), dv = max_abs_diff(vc, vg, P);
        CHECK2(dp == 0 && dm == 0 && dv == 0, "%s: AdamW step (clip coef %.3f) bit-identical: max |diff| p %.2e m %.2e v %.2e",
               tc->name, coef, dp, dm, dv);
    }

    /* 5. three more steps, each side on its own */
    {
        double worst = 0;
        for (long t = 2; t <= 4; t++) {
            float l1 = 0, l2 = 0;
            double n1 = 0, n2 = 0;
            random_batch(x, y, N, V, 100 + t);
            if (step_cpu(m, x, y, B, T, mc, vc, sp, ns, &ac, t, seed + t, &l1, &n1) ||
                step_gpu(cm, x, y, B, T, &ac, t, seed + t, &l2, &n2)) {
                CHECK2(0, "%s: training step %ld: %s", tc->name, t, sk_last_error());
                goto done;
            }
            worst = fmax(worst, rel(l2, l1));
            if (t == 4) printf("  %s: step 4 loss cpu %.6f gpu %.6f, norm cpu %.6f gpu %.6f\n", tc->name, l1, l2, n1, n2);
        }
        CHECK2(worst <= 1e-4, "%s: losses of 3 training steps within 1e-4 relative (worst %.2e)", tc->name, worst);
        if (sk_cuda_download_params(cm, pg)) { CHECK2(0, "%s: download: %s", tc->name, sk_last_error()); goto done; }
        double dp = max_abs_diff(sk_model_params(m), pg, P);
        CHECK2(dp <= 1e-4, "%s: parameters after 4 steps max |diff| %.2e", tc->name, dp);
    }
done:
    free(x); free(y); free(lc); free(lg); free(gg); free(pg); free(mc); free(vc); free(mg); free(vg); free(sp);
    sk_cuda_model_free(cm);
    sk_model_free(m);
}

/* ------------------------------------------------------------------ bf16 */

/* fp32 rounded to bf16 (nearest even) and back: what the GPU's operands hold */
static float bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return f;
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}
/* bf16 bits of x, rounded to nearest even */
static uint16_t bf16_bits_h(float x) {
    uint32_t u;
    x = bf16_round(x);
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}
/* row-major C (M, N) = alpha op(A) op(B) + beta C in double, operands optionally bf16-rounded */
static void ref_gemm(int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                     float beta, const float *C0, double *C, int ldc, int round) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int k = 0; k < K; k++) {
                float a = tA ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                float b = tB ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                if (round) { a = bf16_round(a); b = bf16_round(b); }
                acc += (double)a * b;
            }
            C[(size_t)i * ldc + j] = alpha * acc + beta * (double)C0[(size_t)i * ldc + j];
        }
}
static void fill(float *x, size_t n, uint64_t seed) {
    uint64_t r = seed * 0x9E3779B97F4A7C15ULL + 7;
    for (size_t i = 0; i < n; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
}

/* Moves every weight off its initial value (biases start at 0 and norm weights at 1, which
 * would hide a bias or norm weight applied wrongly), on the host and on the device. */
static int perturb_params(sk_model *m, sk_cuda_model *cm) {
    const size_t P = sk_model_num_params(m);
    float *w = sk_model_params(m), *noise = malloc(sizeof(float) * P);
    if (!noise) return SK_ENOMEM;
    fill(noise, P, 31);
    for (size_t i = 0; i < P; i++) w[i] += 0.05f * noise[i];
    free(noise);
    return sk_cuda_upload_params(cm, w);
}

/* One bf16 GEMM on the device (A from the parameters at offset a_off, or from an activation
 * buffer when a_off < 0; B the other way round) against the host references. */
static void bf16_gemm_case(sk_cuda_model *cm, const float *host_params, int tA, int tB, int a_in_params,
                           const char *what) {
    const int M = 37, N = 29, K = 45;
    const int ar = tA ? K : M, ac = tA ? M : K, br = tB ? N : K, bc = tB ? K : N;
    const int lda = ac + 3, ldb = bc + 5, ldc = N + 2;
    const size_t na = (size_t)ar * lda, nb = (size_t)br * ldb, nc = (size_t)M * ldc;
    const size_t w_off = 301;                 /* an odd offset into the parameters */
    float *ha = malloc(na * sizeof(float)), *hb = malloc(nb * sizeof(float)), *hc = malloc(nc * sizeof(float));
    float *out = malloc(nc * sizeof(float));
    double *r16 = malloc(nc * sizeof(double)), *r32 = malloc(nc * sizeof(double));
    float *dact = NULL, *dc = NULL;
    fill(hc, nc, 3);
    /* the operand taken from the parameters reads the host copy of them; the other is random */
    float *act_h = a_in_params ? hb : ha;
    const size_t act_n = a_in_params ? nb : na;
    fill(act_h, act_n, 5 + tA + 2 * tB);
    if (a_in_params) memcpy(ha, host_params + w_off, na * sizeof(float));
    else memcpy(hb, host_params + w_off, nb * sizeof(float));
    int ok = cudaMalloc((void **)&dact, act_n * sizeof(float)) == cudaSuccess &&
             cudaMalloc((void **)&dc, nc * sizeof(float)) == cudaSuccess &&
             cudaMemcpy(dact, act_h, act_n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess &&
             cudaMemcpy(dc, hc, nc * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess;
    const float *dA = a_in_params ? cm->params + w_off : dact, *dB = a_in_params ? dact : cm->params + w_off;
    ok = ok && !sk_cu_gemm(cm, tA, tB, M, N, K, 1.25f, dA, lda, dB, ldb, 0.5f, dc, ldc) &&
         cudaMemcpy(out, dc, nc * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess;
    if (!ok) { CHECK2(0, "bf16 gemm %s: %s", what, sk_last_error()); goto done; }
    ref_gemm(tA, tB, M, N, K, 1.25f, ha, lda, hb, ldb, 0.5f, hc, r16, ldc, 1);
    ref_gemm(tA, tB, M, N, K, 1.25f, ha, lda, hb, ldb, 0.5f, hc, r32, ldc, 0);
    double d16 = 0, d32 = 0, big = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            size_t k = (size_t)i * ldc + j;
            d16 = fmax(d16, fabs(out[k] - r16[k]));
            d32 = fmax(d32, fabs(out[k] - r32[k]));
            big = fmax(big, fabs(r16[k]));
        }
    CHECK2(d16 <= 1e-5 * fmax(1.0, big) && d32 >= 1e-4 * big,
           "bf16 gemm %s (tA=%d tB=%d, weights as %s): max |diff| vs bf16-rounded product %.2e, vs fp32 product %.2e (max |C| %.2f)",
           what, tA, tB, a_in_params ? "A" : "B", d16, d32, big);
done:
    cudaFree(dact); cudaFree(dc);
    free(ha); free(hb); free(hc); free(out); free(r16); free(r32);
}

static void run_bf16_gemm(void) {
    sk_config cfg;
    test_config("n_layer=2 n_head=4 n_embd=64 vocab_size=97 block_size=64", &cfg);
    sk_model *m = NULL;
    sk_cuda_model *cm = NULL;
    if (sk_model_new(&m, &cfg, 11) || sk_cuda_model_new(&cm, m, SK_CUDA_BF16)) {
        CHECK2(0, "bf16 gemm: setup: %s", sk_last_error());
        sk_model_free(m);
        return;
    }
    const size_t P = sk_model_num_params(m);
    float *hp = malloc(P * sizeof(float));
    memcpy(hp, sk_model_params(m), P * sizeof(float));
    for (int t = 0; t < 4; t++) bf16_gemm_case(cm, hp, t & 1, t >> 1, 1, "initial weights");
    for (int t = 0; t < 4; t++) bf16_gemm_case(cm, hp, t & 1, t >> 1, 0, "initial weights");
    /* the bf16 copy follows an upload ... */
    fill(hp, P, 99);
    if (sk_cuda_upload_params(cm, hp)) CHECK2(0, "bf16 gemm: upload: %s", sk_last_error());
    bf16_gemm_case(cm, hp, 0, 1, 1, "after an upload");
    /* ... and an AdamW step (from a batch's gradients, with weight decay and clipping) */
    sk_adamw_cfg ac;
    sk_adamw_default(&ac);
    ac.weight_decay = 0.5f;
    int32_t x[2 * 16], y[2 * 16];
    random_batch(x, y, 2 * 16, cfg.vocab_size, 5);
    if (sk_cuda_zero_grad(cm) || sk_cuda_forward_backward(cm, x, y, 2, 16, 1.0f, 0, NULL) ||
        sk_cuda_adamw_step(cm, &ac, 0.1, 1, 0.5f) || sk_cuda_download_params(cm, hp))
        CHECK2(0, "bf16 gemm: adamw: %s", sk_last_error());
    bf16_gemm_case(cm, hp, 1, 0, 0, "after an AdamW step");
    {                       /* AdamW writes the copy with each weight: all of it, the rounded bits */
        uint16_t *h16 = malloc(P * sizeof(uint16_t));
        float *pre = malloc(P * sizeof(float));
        size_t bad = 0, moved = 0;
        if (h16 && pre && !cudaMemcpy(h16, cm->params16, P * sizeof(uint16_t), cudaMemcpyDeviceToHost)) {
            fill(pre, P, 99);                                   /* the weights before the step */
            for (size_t i = 0; i < P; i++) {
                bad += h16[i] != bf16_bits_h(hp[i]);
                moved += bf16_bits_h(hp[i]) != bf16_bits_h(pre[i]);
            }
        } else bad = P;
        free(pre);
        CHECK2(bad == 0 && moved > P / 4, "bf16 gemm: after an AdamW step the weights' bf16 copy is the rounded weights: "
               "%zu of %zu off (must be 0; %zu moved by the step)", bad, P, moved);
        free(h16);
    }
    free(hp);
    sk_cuda_model_free(cm);
    sk_model_free(m);
}

/* relative L2 error |a - b| / |b| */
static double rel_l2(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) { d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]); r += (double)b[i] * b[i]; }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

/* ------------------------------------------------- tensor-core attention (cu_attn.tc) */

typedef struct {
    const char *name;
    int B, H, Hkv, Lq, Lk, D, causal, offset;
    float dropout;
    int odd;                          /* views at odd offsets and strides (no 16-byte copies) */
} acase;

static const acase ACASES[] = {
    {"causal hs64 T=130", 2, 4, 4, 130, 130, 64, 1, 0, 0.0f, 0},
    {"causal hs16 GQA 4/2 T=70", 2, 4, 2, 70, 70, 16, 1, 0, 0.0f, 0},
    {"causal hs128 MQA T=65", 1, 2, 1, 65, 65, 128, 1, 0, 0.0f, 0},
    {"causal hs40 (padded) T=100 odd strides", 2, 2, 2, 100, 100, 40, 1, 0, 0.0f, 1},
    {"causal hs20 (padded, not 8-aligned) T=90", 1, 2, 2, 90, 90, 20, 1, 0, 0.0f, 0},
    {"causal hs32 dropout 0.1 odd strides", 2, 4, 2, 67, 67, 32, 1, 0, 0.1f, 1},
    {"prefill chunk hs64 (Lq 37, Lk 150, offset 113)", 1, 4, 2, 37, 150, 64, 1, 113, 0.0f, 0},
    {"causal offset -20 (rows that see nothing) hs32", 1, 2, 2, 70, 50, 32, 1, -20, 0.0f, 0},
    {"non-causal cross hs48 (Lq 50, Lk 90) odd strides", 2, 2, 1, 50, 90, 48, 0, 0, 0.0f, 1},
    {"single query hs64 (Lq 1, Lk 200)", 1, 2, 2, 1, 200, 64, 1, 199, 0.0f, 0},
    {"single query hs40 GQA 4/2 (Lq 1, Lk 300) odd strides", 2, 4, 2, 1, 300, 40, 1, 299, 0.0f, 1},
    {"single query hs32 GQA 8/2 (Lq 1, Lk 129)", 1, 8, 2, 1, 129, 32, 1, 128, 0.0f, 0},
    {"single query hs128 GQA 16/2 (Lq 1, Lk 257)", 1, 16, 2, 1, 257, 128, 1, 256, 0.0f, 0},
    {"single query hs40 GQA 12/2 (Lq 1, Lk 140) odd strides", 1, 12, 2, 1, 140, 40, 1, 139, 0.0f, 1},
};

/* max |a - b| over n values, +inf == +inf (the lse of a row that sees no key) */
static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        if (a[i] == b[i]) continue;
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d;                          /* NaN or inf sticks */
    }
    return m;
}
/* The MLP's bf16 path, kernel by kernel, against the fp32 kernels on the same values: in
 * bf16 c_fc's GEMM writes the pre-activation h in bf16, the activation adds c_fc's bias and
 * rounds h + b in place, then activates it (act16); the backward reads h16 and the
 * activation's gradient dact16 (another GEMM's bf16 output) and writes dh16, which c_fc's
 * two GEMMs and its bias gradient read. Each bf16 output must be the fp32 kernel's output on
 * the rounded inputs, rounded once: the same bits (GELU erf and tanh, ReLU, SwiGLU; rows of
 * an odd width). The bias gradient's column sum from dh16 equals the fp32 sum of the same
 * values, to the bit; and a column sum of fp32 values that also writes their bf16 copy (a
 * linear layer's bias gradient and its dY's rounding in one pass) writes the rounded bits. */
static void run_bf16_mlp_kernels(void) {
    static const char *const NAME[4] = {"gelu", "gelu tanh", "relu", "swiglu"};
    const int N = 37, F = 45;
    for (int kind = 0; kind < 4; kind++) {
        const int gated = kind == 3, W = gated ? 2 * F : F;     /* h's width */
        const size_t nh = (size_t)N * W, na = (size_t)N * F;
        float *h = malloc(nh * 4), *b = malloc(F * 4), *da = malloc(na * 4), *hb = malloc(nh * 4);
        float *act = malloc(na * 4), *dh = malloc(nh * 4), *dhw = malloc(nh * 4), *cs = malloc(W * 4), *cs16 = malloc(W * 4);
        uint16_t *h16 = malloc(nh * 2), *da16 = malloc(na * 2), *act16 = malloc(na * 2), *dh16 = malloc(nh * 2);
        uint16_t *cp16 = malloc(nh * 2), *d_cp16 = NULL;
        float *d_h = NULL, *d_b = NULL, *d_act = NULL, *d_da = NULL, *d_dh = NULL, *d_cs = NULL, *d_part = NULL;
        uint16_t *d_h16 = NULL, *d_act16 = NULL, *d_da16 = NULL, *d_dh16 = NULL;
        int ok = h && b && da && hb && act && dh && dhw && cs && cs16 && h16 && da16 && act16 && dh16 && cp16 &&
                 !cudaMalloc((void **)&d_cp16, nh * 2) &&
                 !cudaMalloc((void **)&d_h, nh * 4) && !cudaMalloc((void **)&d_b, F * 4) &&
                 !cudaMalloc((void **)&d_act, na * 4) && !cudaMalloc((void **)&d_da, na * 4) &&
                 !cudaMalloc((void **)&d_dh, nh * 4) && !cudaMalloc((void **)&d_cs, W * 4) &&
                 !cudaMalloc((void **)&d_part, (size_t)cu_colsum_chunks(N) * W * 4) &&
                 !cudaMalloc((void **)&d_h16, nh * 2) && !cudaMalloc((void **)&d_act16, na * 2) &&
                 !cudaMalloc((void **)&d_da16, na * 2) && !cudaMalloc((void **)&d_dh16, nh * 2);
        if (!ok) { CHECK2(0, "bf16 mlp kernels %s: allocation", NAME[kind]); goto next; }
        fill(h, nh, 11 + kind); fill(b, F, 21 + kind); fill(da, na, 31 + kind);
        for (size_t i = 0; i < nh; i++) { h[i] = bf16_round(3.0f * h[i]); h16[i] = bf16_bits_h(h[i]); }
        for (size_t i = 0; i < na; i++) { da[i] = bf16_round(da[i]); da16[i] = bf16_bits_h(da[i]); }
        /* the reference: h + b rounded on the host, then the fp32 kernels (no bias) */
        const float *bias = gated ? NULL : b;
        for (size_t i = 0; i < nh; i++) hb[i] = bias ? bf16_round(h[i] + bias[i % F]) : h[i];
        cudaMemcpy(d_h, hb, nh * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(d_da, da, na * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(d_b, b, F * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(d_h16, h16, nh * 2, cudaMemcpyHostToDevice);
        cudaMemcpy(d_da16, da16, na * 2, cudaMemcpyHostToDevice);
        if (kind < 2) {
            cu_gelu_forward(d_act, NULL, d_h, NULL, NULL, F, na, kind);
            cu_gelu_backward(d_dh, NULL, d_h, NULL, d_da, NULL, na, kind);
            cu_gelu_forward(NULL, d_act16, NULL, d_h16, d_b, F, na, kind);
            cu_gelu_backward(NULL, d_dh16, NULL, d_h16, NULL, d_da16, na, kind);
        } else if (kind == 2) {
            cu_relu_forward(d_act, NULL, d_h, NULL, NULL, F, na);
            cu_relu_backward(d_dh, NULL, d_h, NULL, d_da, NULL, na);
            cu_relu_forward(NULL, d_act16, NULL, d_h16, d_b, F, na);
            cu_relu_backward(NULL, d_dh16, NULL, d_h16, NULL, d_da16, na);
        } else {
            cu_swiglu_forward(d_act, NULL, d_h, NULL, N, F);
            cu_swiglu_backward(d_dh, NULL, d_h, NULL, d_da, NULL, N, F);
            cu_swiglu_forward(NULL, d_act16, NULL, d_h16, N, F);
            cu_swiglu_backward(NULL, d_dh16, NULL, d_h16, NULL, d_da16, N, F);
        }
        cudaMemcpy(act, d_act, na * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(dh, d_dh, nh * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(act16, d_act16, na * 2, cudaMemcpyDeviceToHost);
        cudaMemcpy(h16, d_h16, nh * 2, cudaMemcpyDeviceToHost);
        cudaMemcpy(dh16, d_dh16, nh * 2, cudaMemcpyDeviceToHost);
        cudaMemset(d_cs, 0, W * 4);           /* the fp32 dh's column sums and bf16 copy, in one pass */
        cu_colsum_add(d_cs, d_dh, NULL, d_cp16, N, W, W, d_part);
        cudaMemcpy(cp16, d_cp16, nh * 2, cudaMemcpyDeviceToHost);
        /* ... and of a range of its columns (ld > ncols, as q/k/v's ranges): the copy packed */
        const int c0 = 3, cw = W - 7;
        uint16_t *rg16 = malloc((size_t)N * cw * 2);
        cu_colsum_add(d_cs, d_dh + c0, NULL, d_cp16, N, cw, W, d_part);
        size_t bad_rg = rg16 ? 0 : 1;
        if (rg16) {
            cudaMemcpy(rg16, d_cp16, (size_t)N * cw * 2, cudaMemcpyDeviceToHost);
            for (int r = 0; r < N; r++)
                for (int c = 0; c < cw; c++) bad_rg += rg16[(size_t)r * cw + c] != bf16_bits_h(dh[(size_t)r * W + c0 + c]);
        }
        free(rg16);
        /* the bias gradient: from dh16, and in fp32 from its values widened */
        for (size_t i = 0; i < nh; i++) {
            uint32_t u = (uint32_t)dh16[i] << 16;
            memcpy(&dhw[i], &u, 4);
        }
        cudaMemcpy(d_dh, dhw, nh * 4, cudaMemcpyHostToDevice);
        cudaMemset(d_cs, 0, W * 4);
        cu_colsum_add(d_cs, d_dh, NULL, NULL, N, W, W, d_part);
        cudaMemcpy(cs, d_cs, W * 4, cudaMemcpyDeviceToHost);
        cudaMemset(d_cs, 0, W * 4);
        cu_colsum_add(d_cs, NULL, d_dh16, NULL, N, W, W, d_part);
        cudaMemcpy(cs16, d_cs, W * 4, cudaMemcpyDeviceToHost);
        if (cudaDeviceSynchronize()) { CHECK2(0, "bf16 mlp kernels %s: the kernels failed", NAME[kind]); goto next; }
        size_t bad_h = 0, bad_a = 0, bad_d = 0, bad_c = 0, zero_d = 0, bad_cp = 0, exact = 0;
        for (size_t i = 0; i < nh; i++) bad_h += h16[i] != bf16_bits_h(hb[i]);
        for (size_t i = 0; i < na; i++) bad_a += act16[i] != bf16_bits_h(act[i]);
        for (size_t i = 0; i < nh; i++) { bad_d += dh16[i] != bf16_bits_h(dh[i]); zero_d += dh16[i] == 0; }
        for (int c = 0; c < W; c++) bad_c += memcmp(&cs[c], &cs16[c], 4) != 0;
        for (size_t i = 0; i < nh; i++) { bad_cp += cp16[i] != bf16_bits_h(dh[i]); exact += bf16_round(dh[i]) == dh[i]; }
        CHECK2(!bad_h && !bad_a && !bad_d && !bad_c && !bad_cp && !bad_rg && zero_d < nh / 2 + 1 &&
               (exact < nh || kind == 2),
               "bf16 mlp kernels %s: h + b rounded in place %zu, act16 %zu, dh16 %zu elements off the fp32 kernels' "
               "rounded output, bias gradient from dh16 %zu of %d columns off, the column sum's bf16 copy of the fp32 "
               "dh %zu off, of a column range %zu off (all must be 0; %zu of %zu dh16 zero, %zu fp32 dh already bf16: "
               "all only for ReLU)", NAME[kind], bad_h, bad_a, bad_d, bad_c, W, bad_cp, bad_rg, zero_d, nh, exact);
    next:
        free(h); free(b); free(da); free(hb); free(act); free(dh); free(dhw); free(cs); free(cs16);
        free(h16); free(da16); free(act16); free(dh16); free(cp16); cudaFree(d_cp16);
        cudaFree(d_h); cudaFree(d_b); cudaFree(d_act); cudaFree(d_da); cudaFree(d_dh); cudaFree(d_cs); cudaFree(d_part);
        cudaFree(d_h16); cudaFree(d_act16); cudaFree(d_da16); cudaFree(d_dh16);
    }
}

/* The norms' backward (a dx kernel, 16-byte accesses where C is a multiple of 4, then the
 * weight and bias gradients' partial column sums and the partials in order) against a
 * double-precision host reference on the device's mean and rstd: dinp, dw and db, all added
 * to, within 1e-5 of the largest value (dinp) or of the sum of the terms' sizes (dw, db).
 * Shapes: rows of an odd width and of a multiple of 4; more rows than 256 chunks of 16 (several
 * rows per chunk); C = 2051.
 * In bf16 a norm's backward reads its input gradient as the GEMM that consumed the norm's
 * output wrote it: in bf16 (dout16), or, for q/k/v computed over several column ranges, as
 * the fp32 sum of their GEMMs rounded to bf16 on reading (rnd). Both must give the same bits
 * as the fp32 kernel given the rounded values; and the unrounded fp32 gradient must give
 * other bits (the rounding is real). */
static void run_norm_kernels(void) {
    static const char *const NAME[2] = {"layernorm", "rmsnorm"};
    static const int SHAPE[4][2] = {{37, 45}, {37, 44}, {4133, 40}, {5, 2051}};
    for (int sh = 0; sh < 4; sh++)
    for (int kind = 0; kind < 2; kind++) {
        const int N = SHAPE[sh][0], C = SHAPE[sh][1];
        const size_t n = (size_t)N * C;
        char name[64];
        snprintf(name, sizeof name, "%s %dx%d", NAME[kind], N, C);
        float *x = malloc(n * 4), *g = malloc(n * 4), *gr = malloc(n * 4), *w = malloc(C * 4), *b = malloc(C * 4);
        float *d0 = malloc(n * 4), *mean = malloc(N * 4), *rstd = malloc(N * 4), *res[4][3] = {{NULL}};
        uint16_t *g16 = malloc(n * 2);
        float *d_x = NULL, *d_g = NULL, *d_w = NULL, *d_b = NULL, *d_out = NULL, *d_mean = NULL, *d_rstd = NULL;
        float *d_dx = NULL, *d_dw = NULL, *d_db = NULL, *d_part = NULL;
        uint16_t *d_g16 = NULL;
        int ok = x && g && gr && w && b && d0 && mean && rstd && g16;
        for (int v = 0; v < 4; v++)
            for (int k = 0; k < 3; k++) ok = (res[v][k] = malloc((k ? (size_t)C : n) * 4)) != NULL && ok;
        ok = ok && !cudaMalloc((void **)&d_x, n * 4) && !cudaMalloc((void **)&d_g, n * 4) &&
             !cudaMalloc((void **)&d_w, C * 4) && !cudaMalloc((void **)&d_b, C * 4) && !cudaMalloc((void **)&d_out, n * 4) &&
             !cudaMalloc((void **)&d_mean, N * 4) && !cudaMalloc((void **)&d_rstd, N * 4) &&
             !cudaMalloc((void **)&d_dx, n * 4) && !cudaMalloc((void **)&d_dw, C * 4) && !cudaMalloc((void **)&d_db, C * 4) &&
             !cudaMalloc((void **)&d_part, (size_t)2 * cu_colsum_chunks(N) * C * 4) && !cudaMalloc((void **)&d_g16, n * 2);
        if (!ok) { CHECK2(0, "norm backward %s: allocation", name); goto next; }
        fill(x, n, 41 + kind); fill(g, n, 43 + kind); fill(w, C, 45 + kind); fill(b, C, 47 + kind); fill(d0, n, 49);
        for (int c = 0; c < C; c++) w[c] += 1.0f;
        for (size_t i = 0; i < n; i++) { x[i] += 0.3f * (float)(i % 7); gr[i] = bf16_round(g[i]); g16[i] = bf16_bits_h(g[i]); }
        cudaMemcpy(d_x, x, n * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(d_w, w, C * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(d_b, b, C * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(d_g16, g16, n * 2, cudaMemcpyHostToDevice);
        if (kind == 0) cu_layernorm_forward(d_out, NULL, d_mean, d_rstd, d_x, d_w, d_b, N, C, 1e-5f);
        else cu_rmsnorm_forward(d_out, NULL, d_rstd, d_x, d_w, N, C, 1e-5f);
        cudaMemcpy(mean, d_mean, N * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(rstd, d_rstd, N * 4, cudaMemcpyDeviceToHost);
        /* v = 0: fp32 rounded values; 1: dout16; 2: fp32 unrounded, rnd; 3: fp32 unrounded */
        for (int v = 0; v < 4; v++) {
            cudaMemcpy(d_g, v ? g : gr, n * 4, cudaMemcpyHostToDevice);
            cudaMemcpy(d_dx, d0, n * 4, cudaMemcpyHostToDevice);          /* all three are added to */
            cudaMemcpy(d_dw, d0 + 1, C * 4, cudaMemcpyHostToDevice);
            cudaMemcpy(d_db, d0 + 2, C * 4, cudaMemcpyHostToDevice);
            const float *dg = v == 1 ? NULL : d_g;
            const uint16_t *dg16 = v == 1 ? d_g16 : NULL;
            if (kind == 0)
                cu_layernorm_backward(d_dx, d_dw, d_db, dg, dg16, v == 2, d_x, d_w, d_mean, d_rstd, N, C, d_part);
            else cu_rmsnorm_backward(d_dx, d_dw, dg, dg16, v == 2, d_x, d_w, d_rstd, N, C, d_part);
            cudaMemcpy(res[v][0], d_dx, n * 4, cudaMemcpyDeviceToHost);
            cudaMemcpy(res[v][1], d_dw, C * 4, cudaMemcpyDeviceToHost);
            cudaMemcpy(res[v][2], d_db, C * 4, cudaMemcpyDeviceToHost);
        }
        if (cudaDeviceSynchronize()) { CHECK2(0, "norm backward %s: the kernels failed", name); goto next; }
        {                                 /* the reference (v = 0), in double */
            double *rdw = calloc(C, sizeof(double)), *rdb = calloc(C, sizeof(double));
            double *sw = calloc(C, sizeof(double)), *sb = calloc(C, sizeof(double));
            double ex = 0, mx = 0, ew = 0, eb = 0;
            if (!rdw || !rdb || !sw || !sb) ex = INFINITY;
            for (int r = 0; r < N && rdw && rdb && sw && sb; r++) {
                const float *xr = x + (size_t)r * C, *gy = gr + (size_t)r * C;
                double s = rstd[r], m = kind ? 0.0 : mean[r], a1 = 0, a2 = 0;
                for (int c = 0; c < C; c++) {
                    double xh = (xr[c] - m) * s;
                    a1 += w[c] * (double)gy[c];
                    a2 += w[c] * (double)gy[c] * (kind ? (double)xr[c] : xh);
                }
                for (int c = 0; c < C; c++) {
                    double xh = (xr[c] - m) * s, dn = w[c] * (double)gy[c];
                    double want = d0[(size_t)r * C + c] +
                                  (kind ? s * (dn - xr[c] * a2 * s * s / C) : s * (dn - a1 / C - xh * a2 / C));
                    ex = fmax(ex, fabs(want - res[0][0][(size_t)r * C + c]));
                    mx = fmax(mx, fabs(want));
                    rdw[c] += gy[c] * xh; sw[c] += fabs(gy[c] * xh);
                    rdb[c] += gy[c]; sb[c] += fabs(gy[c]);
                }
            }
            for (int c = 0; c < C && rdw && rdb && sw && sb; c++) {
                ew = fmax(ew, fabs(d0[1 + c] + rdw[c] - res[0][1][c]) / (1.0 + sw[c]));
                if (!kind) eb = fmax(eb, fabs(d0[2 + c] + rdb[c] - res[0][2][c]) / (1.0 + sb[c]));
            }
            CHECK2(ex <= 1e-5 * fmax(1.0, mx) && ew <= 1e-5 && eb <= 1e-5 && mx > 0,
                   "norm backward %s: vs the double reference: dinp %.2e (max %.2f), dw %.2e, db %.2e (relative to "
                   "the sum of the terms' sizes)", name, ex, mx, ew, eb);
            free(rdw); free(rdb); free(sw); free(sb);
        }
        size_t off[4] = {0, 0, 0, 0};
        for (int v = 1; v < 4; v++)
            for (int k = 0; k < (kind ? 2 : 3); k++)
                for (size_t i = 0; i < (k ? (size_t)C : n); i++) off[v] += memcmp(&res[v][k][i], &res[0][k][i], 4) != 0;
        CHECK2(!off[1] && !off[2] && off[3] > n / 2,
               "norm backward %s, bf16: from dout16 %zu, from fp32 rounded on reading %zu values off the fp32 kernel's "
               "on the rounded gradient (must be 0); unrounded %zu off (must be most of the %zu)", name, off[1],
               off[2], off[3], n + (kind ? 1 : 2) * (size_t)C);
    next:
        free(x); free(g); free(gr); free(w); free(b); free(d0); free(mean); free(rstd); free(g16);
        for (int v = 0; v < 4; v++)
            for (int k = 0; k < 3; k++) free(res[v][k]);
        cudaFree(d_x); cudaFree(d_g); cudaFree(d_w); cudaFree(d_b); cudaFree(d_out); cudaFree(d_mean); cudaFree(d_rstd);
        cudaFree(d_dx); cudaFree(d_dw); cudaFree(d_db); cudaFree(d_part); cudaFree(d_g16);
    }
}

/* The bf16 tensor-core kernels against the fp32 kernels (themselves checked against the CPU
 * above) on the same bf16-valued inputs, through SLA-style strided views: q in one buffer,
 * K/V in the K/V columns of another with another row stride (both at 16-byte aligned offsets
 * and strides, or odd ones), outputs and gradients added (+=) to what is there. Only P and dS are rounded in the tensor-core path (and Q's scale
 * when it is not a power of two), so the results must agree to bf16's rounding (1e-2 of the
 * largest value), and differ (so the tensor-core path really ran). Both tensor-core
 * implementations run: tc = 1 (the mma.sync kernels, --bf16's, with blocks of 4 and of 8
 * warps, and of 4 warps of 32 rows: two row tiles per warp, which must give the bits of 16
 * rows per warp, the same products being added in the same order) and tc = 2 (the wmma
 * kernels).
 * They round the same values at the same points, so they must agree far more closely (1e-3
 * of the largest value: only the fp32 summation order differs, which on a GPU can move a P
 * or dS element to the next bf16 value; on the emulator they agree to ~1e-7).
 * The mma kernels also run from bf16 copies of q (times the scale), k, v and dO (cu_attn's
 * q16 ... dout16: the model's --bf16 path, copied with cp.async where aligned), with two
 * buffers per walked tile and with one: the tiles then hold the same bits, so the results
 * must be the same to the last bit as the fp32 views'. So must the backward given no fp32 dO
 * (--bf16's: the output projection's GEMM writes dO in bf16, and the Di pass reads it there).
 * A bf16 KV cache's reads (forward only): the mma forward with fp32 q and k, v from their
 * bf16 copies alone (k, v NULL: a prefill chunk), the same bits as from the fp32 views; and
 * where the query sees every key (Lq 1), the decoding kernel (cu_attn_decode, fp32 math)
 * from the fp32 views and from the bf16 copies: the same bits, and the fp32 kernel's output
 * to 1e-5; with GQA its blocks serve 2 or 4 query heads of a KV head at once (groups of 2, 4,
 * 6 and 8: one block per KV head, or 2 or 3), which must give the bits of one head per block. */
/* The mma kernels' backward is fused (dQ added by the dK/dV kernel, in key-tile order) with 4
 * warps of 16 rows, and split in two kernels otherwise ("mma 8 warps", "mma 32 rows per
 * warp") or when asked ("mma, split backward"): the two give the same output and lse bits,
 * and dQ, dK and dV to the fp32 summation order (1e-3 of the largest value: the fused kernel
 * walks the query tiles the other way, and adds dQ per key tile); the fused one twice gives
 * the same bits (its additions to dQ are ordered, not racing). */
enum { NKIND = 12 };
static const char *const KIND[NKIND] = {"fp32", "mma", "wmma", "mma 8 warps", "mma from bf16 copies",
                                        "mma from bf16 copies, 1 buffer", "mma 8 warps from bf16 copies",
                                        "mma from bf16 copies, no fp32 dO", "mma 32 rows per warp",
                                        "mma 32 rows per warp from bf16 copies", "mma, split backward",
                                        "mma, again"};
static void run_tc_attention(const acase *c) {
    const int B = c->B, H = c->H, Hkv = c->Hkv, Lq = c->Lq, Lk = c->Lk, D = c->D;
    const long qoff = c->odd ? 1 : 8, koff = c->odd ? 2 : 8;
    const long qst = (long)H * D + (c->odd ? 3 : 8), kst = 2L * Hkv * D + (c->odd ? 5 : 16);
    const size_t nq = (size_t)B * Lq * qst, nkv = (size_t)B * Lk * kst, no = (size_t)B * Lq * H * D;
    const size_t nlse = (size_t)B * H * Lq;
    const float scale = 1.0f / sqrtf((float)D);
    float *hq = malloc(nq * 4), *hkv = malloc(nkv * 4), *hdo = malloc(no * 4);
    uint16_t *hq16 = malloc(nq * 2), *hkv16 = malloc(nkv * 2), *hdo16 = malloc(no * 2), *dq16 = NULL, *dkv16 = NULL, *ddo16 = NULL;
    float *out[NKIND], *lse[NKIND], *gq[NKIND], *gkv[NKIND], *gq0 = malloc(nq * 4), *gkv0 = malloc(nkv * 4);
    float *dq = NULL, *dkv = NULL, *dout = NULL, *dlse = NULL, *ddo = NULL, *dgq = NULL, *dgkv = NULL, *dDi = NULL;
    int ok = hq && hkv && hdo && gq0 && gkv0 && hq16 && hkv16 && hdo16;
    for (int t = 0; t < NKIND; t++) {
        out[t] = malloc(no * 4); lse[t] = malloc(nlse * 4); gq[t] = malloc(nq * 4); gkv[t] = malloc(nkv * 4);
        ok = ok && out[t] && lse[t] && gq[t] && gkv[t];
    }
    ok = ok && !cudaMalloc((void **)&dq, nq * 4) && !cudaMalloc((void **)&dkv, nkv * 4) &&
         !cudaMalloc((void **)&dout, no * 4) && !cudaMalloc((void **)&dlse, nlse * 4) &&
         !cudaMalloc((void **)&ddo, no * 4) && !cudaMalloc((void **)&dgq, nq * 4) &&
         !cudaMalloc((void **)&dgkv, nkv * 4) && !cudaMalloc((void **)&dDi, cu_attn_scratch(B, H, Lq) * 4) &&
         !cudaMalloc((void **)&dq16, nq * 2) && !cudaMalloc((void **)&dkv16, nkv * 2) &&
         !cudaMalloc((void **)&ddo16, no * 2);
    if (!ok) { CHECK2(0, "tc attention %s: allocation", c->name); goto done; }
    fill(hq, nq, 1); fill(hkv, nkv, 2); fill(hdo, no, 3); fill(gq0, nq, 4); fill(gkv0, nkv, 5);
    for (size_t i = 0; i < nq; i++) hq[i] = bf16_round(2.0f * hq[i]);          /* sharper softmax */
    for (size_t i = 0; i < nkv; i++) hkv[i] = bf16_round(2.0f * hkv[i]);
    for (size_t i = 0; i < no; i++) hdo[i] = bf16_round(hdo[i]);
    for (size_t i = 0; i < nq; i++) hq16[i] = bf16_bits_h(hq[i] * scale);     /* as the model's copy */
    for (size_t i = 0; i < nkv; i++) hkv16[i] = bf16_bits_h(hkv[i]);
    cudaMemcpy(dq, hq, nq * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dkv, hkv, nkv * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(ddo, hdo, no * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dq16, hq16, nq * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dkv16, hkv16, nkv * 2, cudaMemcpyHostToDevice);
    for (int t = 0; t < NKIND; t++) {
        cu_attn a;
        memset(&a, 0, sizeof a);
        a.B = B; a.H = H; a.Hkv = Hkv; a.Lq = Lq; a.Lk = Lk; a.D = D;
        a.q = dq + qoff;              a.q_sb = Lq * qst;  a.q_sh = D; a.q_st = qst;
        a.k = dkv + koff;             a.k_sb = Lk * kst;  a.k_sh = D; a.k_st = kst;
        a.v = dkv + koff + Hkv * D;   a.v_sb = Lk * kst;  a.v_sh = D; a.v_st = kst;
        a.out = dout;                 a.o_sb = (long)Lq * H * D; a.o_sh = D; a.o_st = (long)H * D;
        a.scale = scale;
        a.causal = c->causal; a.causal_offset = c->offset;
        a.dropout = c->dropout > 0; a.thr = (uint64_t)((double)c->dropout * 4294967296.0);
        a.inv_keep = a.dropout ? 1.0f / (1.0f - c->dropout) : 1.0f;
        a.seed = 0x1234567890abcdefULL;
        a.lse = dlse;
        a.tc = t == 0 || t == 2 ? t : 1;
        a.mma_warps = t == 3 || t == 6 ? 8 : 4;
        a.mma_rows = t == 8 || t == 9 ? 32 : 16;
        a.stages = t == 5 ? 1 : 0;
        a.bwd_split = t == 10;
        if (t >= 4 && t != 8 && t < 10) {
            a.q16 = dq16 + qoff; a.k16 = dkv16 + koff; a.v16 = dkv16 + koff + Hkv * D;
            a.dout16 = ddo16;
        }
        if (t == 7) {                 /* dO's bits written here, the backward given no dout */
            for (size_t i = 0; i < no; i++) hdo16[i] = bf16_bits_h(hdo[i]);
            cudaMemcpy(ddo16, hdo16, no * 2, cudaMemcpyHostToDevice);
        }
        cudaMemcpy(dgq, gq0, nq * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(dgkv, gkv0, nkv * 4, cudaMemcpyHostToDevice);
        int rc = cu_attn_forward(&a);
        if (!rc) rc = cu_attn_backward(&a, t == 7 ? NULL : ddo, dgq + qoff, dgkv + koff, dgkv + koff + Hkv * D, dDi);
        if (!rc) rc = (int)cudaDeviceSynchronize();
        if (rc) { CHECK2(0, "tc attention %s: %s kernels failed (%d)", c->name, KIND[t], rc); goto done; }
        cudaMemcpy(out[t], dout, no * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(lse[t], dlse, nlse * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(gq[t], dgq, nq * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(gkv[t], dgkv, nkv * 4, cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < nq; i++) gq[t][i] -= gq0[i];                  /* the gradient added */
        for (size_t i = 0; i < nkv; i++) gkv[t][i] -= gkv0[i];
    }
    {                                     /* a bf16 KV cache: k16, v16 alone (k, v NULL) */
        float *o16 = malloc(no * 4), *l16 = malloc(nlse * 4), *od = malloc(no * 4), *od16 = malloc(no * 4);
        float *od1 = malloc(no * 4), *dpart = NULL;
        const int decode = Lq == 1 && (!c->causal || c->offset >= Lk - 1);
        const size_t npart = (size_t)B * H * cu_decode_splits(Lk) * (D + 2);
        int rc = !o16 || !l16 || !od || !od16 || !od1 || cudaMalloc((void **)&dpart, npart * 4);
        for (int t = 0; t < 4 && !rc; t++) {     /* mma forward; decoding from fp32, bf16, bf16 1 head per block */
            if (t && !decode) break;
            cu_attn a;
            memset(&a, 0, sizeof a);
            a.B = B; a.H = H; a.Hkv = Hkv; a.Lq = Lq; a.Lk = Lk; a.D = D;
            a.q = dq + qoff;              a.q_sb = Lq * qst;  a.q_sh = D; a.q_st = qst;
            a.k_sb = a.v_sb = Lk * kst;   a.k_sh = a.v_sh = D; a.k_st = a.v_st = kst;
            if (t == 1) { a.k = dkv + koff; a.v = dkv + koff + Hkv * D; }
            else { a.k16 = dkv16 + koff; a.v16 = dkv16 + koff + Hkv * D; }
            a.out = dout;                 a.o_sb = (long)Lq * H * D; a.o_sh = D; a.o_st = (long)H * D;
            a.scale = scale; a.causal = c->causal; a.causal_offset = c->offset; a.inv_keep = 1.0f;
            a.lse = dlse; a.tc = 1; a.mma_warps = 4;
            a.decode_heads = t == 3 ? 1 : 0;
            rc = t == 0 ? cu_attn_forward(&a) : cu_attn_decode(&a, dpart);
            if (!rc) rc = (int)cudaDeviceSynchronize();
            cudaMemcpy(t == 0 ? o16 : t == 1 ? od : t == 2 ? od16 : od1, dout, no * 4, cudaMemcpyDeviceToHost);
            if (t == 0) cudaMemcpy(l16, dlse, nlse * 4, cudaMemcpyDeviceToHost);
        }
        if (rc) CHECK2(0, "tc attention %s: the bf16-cache reads failed (%d)", c->name, rc);
        else if (c->dropout == 0) {       /* (with dropout the mma forward above dropped nothing) */
            CHECK2(max_diff(o16, out[1], no) == 0 && max_diff(l16, lse[1], nlse) == 0,
                   "tc attention %s: mma forward with fp32 q, k/v from bf16 copies alone (a bf16 KV cache's prefill) "
                   "vs the fp32 views: output %.2e, lse %.2e (must be 0)", c->name, max_diff(o16, out[1], no),
                   max_diff(l16, lse[1], nlse));
            if (decode) {
                double mo = max_abs(out[0], no), d0 = max_diff(od, out[0], no), d16 = max_diff(od16, od, no);
                double d1 = max_diff(od1, od16, no);
                CHECK2(d16 == 0 && d1 == 0 && d0 <= 1e-5 * fmax(1.0, mo) && mo > 0,
                       "tc attention %s: decoding kernel from bf16 K/V == from fp32 K/V (%.2e), %d query heads per "
                       "block == 1 (%.2e; both must be 0), vs the fp32 kernel %.2e (max |o| %.2f)", c->name, d16,
                       H / Hkv % 4 == 0 ? 4 : H / Hkv % 2 == 0 ? 2 : 1, d1, d0, mo);
            }
        }
        free(o16); free(l16); free(od); free(od16); free(od1);
        cudaFree(dpart);
    }
    for (int t = 1; t < 11; t++) {        /* (the kinds from bf16 copies: checked below against these) */
        if ((t >= 4 && t < 8) || t == 9) continue;
        const char *kind = KIND[t];
        double mo = max_abs(out[0], no), d_o = max_diff(out[t], out[0], no), d_l = max_diff(lse[t], lse[0], nlse);
        double mq = max_abs(gq[0], nq), d_q = max_diff(gq[t], gq[0], nq);
        double mkv = max_abs(gkv[0], nkv), d_kv = max_diff(gkv[t], gkv[0], nkv);
        int untouched = 1;            /* the columns outside the views keep their values exactly */
        for (size_t i = 0; i < nq; i++) {
            long col = (long)(i % (size_t)qst);
            if ((col < qoff || col >= qoff + (long)H * D) && gq[t][i] != 0.0f) untouched = 0;
        }
        for (size_t i = 0; i < nkv; i++) {
            long col = (long)(i % (size_t)kst);
            if ((col < koff || col >= koff + 2L * Hkv * D) && gkv[t][i] != 0.0f) untouched = 0;
        }
        CHECK2(d_o <= 1e-2 * mo && d_o > 0 && d_l <= 1e-2 && mo > 0,
               "tc attention %s, %s: output max |diff| %.2e (max |o| %.2f), lse %.2e", c->name, kind, d_o, mo, d_l);
        CHECK2(d_q <= 1e-2 * mq && d_kv <= 1e-2 * mkv && d_q > 0 && mq > 0 && mkv > 0 && untouched,
               "tc attention %s, %s: dq max |diff| %.2e (max %.2f), dk/dv %.2e (max %.2f), outside the views %s",
               c->name, kind, d_q, mq, d_kv, mkv, untouched ? "untouched" : "CHANGED");
    }
    for (int t = 1; t < 4; t += 2) {
        double mo = max_abs(out[2], no), d_o = max_diff(out[t], out[2], no), d_l = max_diff(lse[t], lse[2], nlse);
        double mq = max_abs(gq[2], nq), d_q = max_diff(gq[t], gq[2], nq);
        double mkv = max_abs(gkv[2], nkv), d_kv = max_diff(gkv[t], gkv[2], nkv);
        CHECK2(d_o <= 1e-3 * mo && d_l <= 1e-4 && mo > 0,
               "tc attention %s: %s vs wmma: output max |diff| %.2e (max |o| %.2f), lse %.2e", c->name, KIND[t], d_o,
               mo, d_l);
        CHECK2(d_q <= 1e-3 * mq && d_kv <= 1e-3 * mkv && mq > 0 && mkv > 0,
               "tc attention %s: %s vs wmma: dq max |diff| %.2e (max %.2f), dk/dv %.2e (max %.2f)", c->name, KIND[t],
               d_q, mq, d_kv, mkv);
    }
    {                                     /* fused against split; fused twice */
        const double mq = max_abs(gq[10], nq), d_q = max_diff(gq[1], gq[10], nq);
        const double mkv = max_abs(gkv[10], nkv), d_kv = max_diff(gkv[1], gkv[10], nkv);
        CHECK2(max_diff(out[1], out[10], no) == 0 && max_diff(lse[1], lse[10], nlse) == 0 && d_q <= 1e-3 * mq &&
               d_kv <= 1e-3 * mkv && mq > 0 && mkv > 0,
               "tc attention %s: fused vs split backward: output %.2e, lse %.2e (these 0), dq %.2e (max %.2f), dk/dv "
               "%.2e (max %.2f)", c->name, max_diff(out[1], out[10], no), max_diff(lse[1], lse[10], nlse), d_q, mq,
               d_kv, mkv);
        CHECK2(max_diff(gq[1], gq[11], nq) == 0 && max_diff(gkv[1], gkv[11], nkv) == 0,
               "tc attention %s: the fused backward twice: dq %.2e, dk/dv %.2e (must be 0)", c->name,
               max_diff(gq[1], gq[11], nq), max_diff(gkv[1], gkv[11], nkv));
    }
    for (int t = 4; t < 10; t++) {        /* the same bits as from the fp32 views */
        /* (and 32 rows per warp: the same products, added in the same order, as 16 split) */
        const int r = t == 6 ? 3 : t == 9 ? 8 : t == 8 ? 10 : 1;
        const int same = max_diff(out[t], out[r], no) == 0 && max_diff(lse[t], lse[r], nlse) == 0 &&
                         max_diff(gq[t], gq[r], nq) == 0 && max_diff(gkv[t], gkv[r], nkv) == 0;
        CHECK2(same, "tc attention %s: %s vs %s: output %.2e, lse %.2e, dq %.2e, dk/dv %.2e (must be 0)", c->name,
               KIND[t], KIND[r], max_diff(out[t], out[r], no), max_diff(lse[t], lse[r], nlse),
               max_diff(gq[t], gq[r], nq), max_diff(gkv[t], gkv[r], nkv));
    }
done:
    for (int t = 0; t < NKIND; t++) { free(out[t]); free(lse[t]); free(gq[t]); free(gkv[t]); }
    free(hq); free(hkv); free(hdo); free(gq0); free(gkv0); free(hq16); free(hkv16); free(hdo16);
    cudaFree(dq); cudaFree(dkv); cudaFree(dout); cudaFree(dlse); cudaFree(ddo); cudaFree(dgq); cudaFree(dgkv); cudaFree(dDi);
    cudaFree(dq16); cudaFree(dkv16); cudaFree(ddo16);
}

/* A NaN anywhere in the logits makes the loss NaN (the trainer's guard stops on it), in
 * fp32 and in bf16 (where the gradient of the logits is written in bf16 by the same kernel):
 * one NaN in the token embedding, which the classifier shares, poisons one logit per row. */
static void run_nan_loss(void) {
    sk_config cfg;
    if (test_config(CASES[0].fields, &cfg)) { CHECK2(0, "nan loss: config"); return; }
    for (int bf = 0; bf < 2; bf++) {
        sk_model *m = NULL;
        sk_cuda_model *cm = NULL;
        const char *pr = bf ? "bf16" : "fp32";
        if (sk_model_new(&m, &cfg, 5) || sk_cuda_model_new(&cm, m, bf ? SK_CUDA_BF16 : SK_CUDA_FP32)) {
            CHECK2(0, "nan loss %s: setup: %s", pr, sk_last_error());
            sk_model_free(m);
            return;
        }
        const int B = 2, T = 16, N = B * T;
        int32_t x[32], y[32];
        random_batch(x, y, N, cfg.vocab_size, 3);
        float loss_f = 0, loss_b = 0;
        int ok = !sk_cuda_forward(cm, x, y, B, T, &loss_f, NULL) && isfinite(loss_f);
        sk_model_params(m)[(size_t)7 * cfg.n_embd + 3] = NAN;          /* wte[7][3] */
        ok = ok && !sk_cuda_upload_params(cm, sk_model_params(m)) && !sk_cuda_forward(cm, x, y, B, T, &loss_f, NULL) &&
             !sk_cuda_zero_grad(cm) && !sk_cuda_forward_backward(cm, x, y, B, T, 1.0f, 1, &loss_b);
        CHECK2(ok && isnan(loss_f) && isnan(loss_b), "nan loss %s: a NaN weight gives forward loss %f, training loss %f (%s)",
               pr, loss_f, loss_b, ok ? "both must be NaN" : sk_last_error());
        sk_cuda_model_free(cm);
        sk_model_free(m);
    }
}

/* bf16 keeps the activations that only feed GEMMs (both norms' outputs, the attention output,
 * the MLP activation, the final norm), the logits, the MLP's pre-activation and the
 * backward's two MLP gradients in bf16 and drops their fp32 form: the activations of (B, T)
 * take 2 x (L x B x T x (3C + 2F) + B x T x (C + Vp + 2F)) bytes less than in fp32, plus the
 * q/k/v and input-gradient differences below (measured on the device). */
static void run_bf16_memory(void) {
    sk_config cfg;
    if (test_config("n_layer=4 n_head=4 n_embd=512 vocab_size=97 block_size=512", &cfg)) {
        CHECK2(0, "bf16 memory: config");
        return;
    }
    const int B = 4, T = 512;
    double delta[2] = {0, 0};
    for (int bf = 0; bf < 2; bf++) {
        sk_model *m = NULL;
        sk_cuda_model *cm = NULL;
        size_t u0 = 0, u1 = 0, tot;
        if (sk_model_new(&m, &cfg, 1) || sk_cuda_model_new(&cm, m, bf ? SK_CUDA_BF16 : SK_CUDA_FP32) ||
            sk_cuda_memory(&u0, &tot) || sk_cuda_reserve(cm, B, T) || sk_cuda_memory(&u1, &tot)) {
            CHECK2(0, "bf16 memory: %s", sk_last_error());
            sk_cuda_model_free(cm); sk_model_free(m);
            return;
        }
        delta[bf] = (double)u1 - (double)u0;
        sk_cuda_model_free(cm);
        sk_model_free(m);
    }
    const double L = cfg.n_layer, C = cfg.n_embd, F = 4 * C, BT = (double)B * T, Vp = cfg.padded_vocab_size;
    /* half a float per GEMM-only activation and logit; q/k/v: bf16 per layer, fp32 for one
     * layer, where fp32 per layer was; the backward's bf16 input gradients (dx16) where
     * an fp32 one (dbtc2) was */
    const double qkv = 3 * C * BT * (2 * (L - 2)) + 2 * BT * C;
    const double want = 2 * (L * BT * (3 * C + 2 * F) + BT * (C + Vp + 2 * F)) + qkv, got = delta[0] - delta[1];
    CHECK2(fabs(got - want) <= 0.03 * want, "bf16 memory: activations %.1f MiB in fp32, %.1f MiB in bf16: %.2f MiB less, expected %.2f",
           delta[0] / 1048576, delta[1] / 1048576, got / 1048576, want / 1048576);
}

/* shapes the device cannot take are refused with a message, before anything is allocated */
static void run_reserve_limits(void) {
    sk_config cfg;
    test_config("n_layer=1 n_head=2 n_embd=32 vocab_size=97 block_size=64", &cfg);
    sk_model *m = NULL;
    sk_cuda_model *cm = NULL;
    if (sk_model_new(&m, &cfg, 1) || sk_cuda_model_new(&cm, m, SK_CUDA_FP32)) {
        CHECK2(0, "reserve limits: setup: %s", sk_last_error());
        sk_model_free(m);
        return;
    }
    static const struct { int B, T; const char *msg; } bad[] = {
        {0, 8, "must be >= 1"}, {2, 0, "must be >= 1"}, {1, 65, "exceeds block_size"},
        {1 << 25, 64, "too many"}, {65536, 1, "above 65535"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = sk_cuda_reserve(cm, bad[i].B, bad[i].T);
        CHECK2(rc == SK_EINVAL && strstr(sk_last_error(), bad[i].msg), "reserve limits: B=%d T=%d refused (rc %d): %s",
               bad[i].B, bad[i].T, rc, sk_last_error());
    }
    CHECK2(sk_cuda_reserve(cm, 65535, 1) == SK_OK, "reserve limits: B=65535 T=1 accepted: %s", sk_last_error());
    sk_cuda_model_free(cm);
    sk_model_free(m);
}

/* bf16 mixed precision against the CPU's fp32 on the same weights and batch. */
static void run_bf16_case(const tcase *tc) {
    sk_config cfg;
    if (test_config(tc->fields, &cfg)) { CHECK2(0, "bf16 %s: config", tc->name); return; }
    sk_model *m = NULL;
    sk_cuda_model *cm = NULL;
    if (sk_model_new(&m, &cfg, 1234) || sk_cuda_model_new(&cm, m, SK_CUDA_BF16)) {
        CHECK2(0, "bf16 %s: setup: %s", tc->name, sk_last_error());
        sk_model_free(m);
        return;
    }
    const int B = tc->B, T = tc->T, N = B * T, V = cfg.vocab_size;
    const size_t P = sk_model_num_params(m);
    int32_t *x = malloc(sizeof(int32_t) * N), *y = malloc(sizeof(int32_t) * N);
    float *lc = malloc(sizeof(float) * N * V), *lg = malloc(sizeof(float) * N * V), *gg = malloc(sizeof(float) * P);
    random_batch(x, y, N, V, 77);
    if (perturb_params(m, cm)) { CHECK2(0, "bf16 %s: upload: %s", tc->name, sk_last_error()); goto done; }
    float loss_c = 0, loss_g = 0;
    if (sk_model_forward(m, x, y, B, T, &loss_c, lc) || sk_cuda_forward(cm, x, y, B, T, &loss_g, lg)) {
        CHECK2(0, "bf16 %s: forward: %s", tc->name, sk_last_error());
        goto done;
    }
    double dl = max_abs_diff(lc, lg, (size_t)N * V), ml = max_abs(lc, (size_t)N * V);
    CHECK2(rel(loss_g, loss_c) <= 1e-3 && dl <= 2e-2 * fmax(1.0, ml) && dl > 0,
           "bf16 %s: forward loss cpu fp32 %.6f gpu bf16 %.6f (rel %.2e), logits max |diff| %.2e (max |logit| %.2f)",
           tc->name, loss_c, loss_g, rel(loss_g, loss_c), dl, ml);
    sk_model_zero_grad(m);
    if (sk_model_forward_backward(m, x, y, B, T, 1.0f, 5, &loss_c) || sk_cuda_zero_grad(cm) ||
        sk_cuda_forward_backward(cm, x, y, B, T, 1.0f, 5, &loss_g) || sk_cuda_download_grads(cm, gg)) {
        CHECK2(0, "bf16 %s: backward: %s", tc->name, sk_last_error());
        goto done;
    }
    {
        int nt; const sk_tensor *ts = sk_model_tensors(m, &nt);
        const float *gc = sk_model_grads(m);
        double worst = 0; const char *wn = "";
        for (int i = 0; i < nt; i++) {
            double e = rel_l2(gg + ts[i].offset, gc + ts[i].offset, ts[i].numel);
            if (e > worst) { worst = e; wn = ts[i].name; }
        }
        CHECK2(worst <= 2e-2 && worst > 0, "bf16 %s: all %d gradient tensors within 2e-2 relative L2 of fp32 (worst %s %.2e)",
               tc->name, nt, wn, worst);
    }
done:
    free(x); free(y); free(lc); free(lg); free(gg);
    sk_cuda_model_free(cm);
    sk_model_free(m);
}

/* The trainer with the CUDA backend against the CPU trainer on the same shard: fp32 for 4
 * steps (parity), bf16 for 12 (it tracks the CPU's fp32 loss curve). */
static void run_trainer(void) {
    if (test_tmp_open("skiplm_cuda")) { CHECK2(0, "trainer: temp dir"); return; }
    const char *shard = test_path("train.bin");
    const int n_tok = 20000, V = 97;
    {
        size_t bytes = 256 * 4 + (size_t)n_tok * 2;
        unsigned char *buf = calloc(1, bytes);
        int32_t hdr[3] = {20240520, 1, n_tok};
        memcpy(buf, hdr, sizeof hdr);
        uint64_t r = 5;
        for (int i = 0; i < n_tok; i++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            uint16_t t = (uint16_t)((i % 7 == 0) ? (int)((r >> 33) % V) : (i * 31 + (i >> 3)) % V);   /* learnable */
            memcpy(buf + 1024 + 2 * (size_t)i, &t, 2);
        }
        test_write(shard, buf, bytes);
        free(buf);
    }
    sk_config cfg;
    test_config("n_layer=3 n_head=4 n_embd=64 vocab_size=97 block_size=64 n_skip_layer=1 n_skip_head=2", &cfg);
    sk_train_cfg tc;
    sk_train_default(&tc);
    enum { S = 8, S32 = 4 };                      /* steps: CPU and bf16; fp32 GPU */
    tc.steps = S; tc.B = 4; tc.T = 64; tc.accum = 2; tc.lr = 3e-3f; tc.min_lr = 3e-4f; tc.warmup = 1;
    tc.eval_every = 0; tc.ckpt_every = 0;
    sk_loader_cfg lc = {.B = tc.B, .T = tc.T, .seed = tc.seed, .shuffle = 1, .vocab_size = V, .rank = 0, .world_size = 1};
    static const char *dev_name[3] = {"cpu", "gpu fp32", "gpu bf16"};
    const int n_steps[3] = {S, S32, S};
    float loss[3][S];
    float *params[3] = {0, 0, 0}, *cpu_at_s32 = NULL;
    size_t P = 0;
    for (int dev = 0; dev < 3; dev++) {
        sk_model *m = NULL;
        sk_loader *L = NULL;
        sk_trainer *tr = NULL;
        sk_cuda_model *cm = NULL;
        const char *paths[1] = {shard};
        if (sk_model_new(&m, &cfg, tc.seed) || sk_loader_open(&L, paths, 1, &lc) || sk_trainer_new(&tr, m, &tc, L, NULL)) {
            CHECK2(0, "trainer setup: %s", sk_last_error());
        } else {
            int ok = 1;
            P = sk_model_num_params(m);
            if (dev) {
                sk_train_backend be;
                ok = !sk_cuda_model_new(&cm, m, dev == 2 ? SK_CUDA_BF16 : SK_CUDA_FP32);
                if (ok) { sk_cuda_train_backend(cm, &be); ok = !sk_trainer_set_backend(tr, &be); }
                if (!ok) CHECK2(0, "trainer backend: %s", sk_last_error());
            }
            for (int s = 0; ok && s < n_steps[dev]; s++) {
                sk_step_info info;
                if (sk_trainer_step(tr, &info)) { CHECK2(0, "trainer step (%s): %s", dev_name[dev], sk_last_error()); ok = 0; }
                else loss[dev][s] = info.loss;
                if (ok && dev == 0 && s == S32 - 1) {
                    cpu_at_s32 = malloc(P * sizeof(float));
                    memcpy(cpu_at_s32, sk_model_params(m), P * sizeof(float));
                }
            }
            char ck[32];
            snprintf(ck, sizeof ck, "dev%d.safetensors", dev);
            if (ok && sk_trainer_save(tr, test_path(ck), NULL)) { CHECK2(0, "trainer save: %s", sk_last_error()); ok = 0; }
            if (ok) {
                params[dev] = malloc(P * sizeof(float));
                memcpy(params[dev], sk_model_params(m), P * sizeof(float));   /* pulled from the GPU by the save */
            }
        }
        sk_trainer_free(tr);
        sk_cuda_model_free(cm);
        sk_loader_free(L);
        sk_model_free(m);
    }
    if (params[0] && params[1] && cpu_at_s32) {
        double worst = 0;
        for (int s = 0; s < S32; s++) worst = fmax(worst, rel(loss[1][s], loss[0][s]));
        printf("  trainer losses cpu %.5f %.5f %.5f %.5f gpu %.5f %.5f %.5f %.5f\n", loss[0][0], loss[0][1], loss[0][2],
               loss[0][3], loss[1][0], loss[1][1], loss[1][2], loss[1][3]);
        CHECK2(worst <= 1e-4, "trainer: 4 steps (accum 2, SLA) losses within 1e-4 relative (worst %.2e)", worst);
        double dp = max_abs_diff(cpu_at_s32, params[1], P);
        CHECK2(dp <= 1e-4, "trainer: checkpointed parameters max |diff| %.2e", dp);
    }
    if (params[0] && params[2]) {
        double worst = 0;
        printf("  trainer bf16 vs cpu fp32 losses:");
        for (int s = 0; s < S; s++) {
            worst = fmax(worst, rel(loss[2][s], loss[0][s]));
            printf(" %.4f/%.4f", loss[2][s], loss[0][s]);
        }
        printf("\n");
        CHECK2(worst <= 2e-3 && loss[2][S - 1] < loss[2][0] - 0.3f,
               "trainer: %d bf16 steps track the fp32 loss curve within 2e-3 relative (worst %.2e; loss %.3f -> %.3f)",
               S, worst, loss[2][0], loss[2][S - 1]);
        double e = rel_l2(params[2], params[0], P);
        CHECK2(e <= 1e-2, "trainer: bf16 checkpoint parameters within 1e-2 relative L2 of fp32 (%.2e)", e);
    }
    free(params[0]); free(params[1]); free(params[2]); free(cpu_at_s32);
    test_tmp_close();
}

int main(int argc, char **argv) {
    char dev[256];
    if (sk_cuda_device_info(dev, sizeof dev)) {
        printf("FAIL no usable GPU: %s\n0 passed, 1 failed\n", sk_last_error());
        return 1;
    }
    printf("device: %s\n", dev);
    const char *only = argc > 1 ? argv[1] : NULL;    /* optional: run only cases whose name contains this */
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
        if (!only || strstr(CASES[i].name, only)) run_case(&CASES[i]);
    if (!only || strstr("bf16 gemm", only)) run_bf16_gemm();
    if (!only || strstr("bf16 mlp kernels", only)) run_bf16_mlp_kernels();
    if (!only || strstr("norm backward", only)) run_norm_kernels();
    for (size_t i = 0; i < sizeof ACASES / sizeof ACASES[0]; i++) {
        char name[160];
        snprintf(name, sizeof name, "tc attention %s", ACASES[i].name);
        if (!only || strstr(name, only)) run_tc_attention(&ACASES[i]);
    }
    /* every tensor-core tile configuration (head sizes 16, 32, 48, 64, 128), dropout, GQA/MQA,
     * a multi-source routing table, untied heads, q/k/v biases */
    static const int BF16_CASES[] = {1, 4, 6, 7, 8, 10, 12, 13, 15, 16, 17};
    for (size_t i = 0; i < sizeof BF16_CASES / sizeof BF16_CASES[0]; i++) {
        const tcase *tc = &CASES[BF16_CASES[i]];
        char name[128];
        snprintf(name, sizeof name, "bf16 %s", tc->name);
        if (!only || strstr(name, only)) run_bf16_case(tc);
    }
    if (!only || strstr("reserve limits", only)) run_reserve_limits();
    if (!only || strstr("bf16 memory", only)) run_bf16_memory();
    if (!only || strstr("nan loss", only)) run_nan_loss();
    if (!only || strstr("trainer", only)) run_trainer();
    printf("%d passed, %d failed\n", n_pass, sk_test_failed);
    return sk_test_failed ? 1 : 0;
}
