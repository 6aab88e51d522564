/* GPU vs CPU parity of cached generation (make cuda-test; needs a GPU; on the CPU emulator:
 * make cuda-emu-test). Not part of make test.
 *
 * For small random models of both families, with and without SLA (the paper's rule, routing
 * tables with cross-layer and multi-source borrowing, a layer that stores nothing), GQA and
 * MQA, head sizes 16..128, learned and sinusoidal positions, with identical weights:
 *   1. the GPU KV cache has the CPU's size (SLA's saving included);
 *   2. a prompt prefilled in chunks (lengths not multiples of the chunk or the attention
 *      tiles): last-token logits within 1e-4 of sk_model_decode's;
 *   3. decoding steps fed the same tokens: logits within 1e-4 at every step, the greedy
 *      token identical, and the token sampled with temperature/top-k/top-p from the same
 *      seed identical;
 *   4. a second multi-token prefill after decoding (queries at an offset), then more steps;
 *   5. cache full: the step past max_T fails with SK_EINVAL and changes nothing; after a
 *      reset the prompt gives the same logits again; bad tokens are refused.
 * The cases run on inference-only device models (sk_cuda_model_new_inference, as `sample`),
 * which the api case checks against a training model and for refusing training calls.
 * bf16 (SK_CUDA_BF16: bf16 GEMMs, single-token steps included), twice:
 *   - with the fp32 attention kernels (SKIPLM_CUDA_TC_ATTN=0): the logits of a chunked
 *     prefill equal the bf16 full forward over the same tokens (1e-4: the same bf16
 *     operands, only the summation order differs), those of every decoding step are within
 *     one bf16 ulp of the largest logit (a different order can round an activation to the
 *     neighbouring bf16 value);
 *   - with the tensor-core attention (the default): the chunked prefill equals the full
 *     forward (1e-4: each query row takes the same key tiles in the same order), the decoding
 *     steps (fp32 single-query attention over the cache) stay within bf16's rounding of it;
 *     the cache is bf16: half the bytes of an fp32 one (SKIPLM_CUDA_KV16=0), the same
 *     prefill logits to the last bit (the attention rounded the fp32 cache's K/V to the same
 *     bf16 values), decoding steps that differ from the fp32 cache's (they read rounded K/V)
 *     but within bf16's rounding; an fp32 model may not use it, a bad SKIPLM_CUDA_KV16 is
 *     refused; one query head per decoding block (SKIPLM_CUDA_DECODE_HEADS=1) instead of the
 *     GQA group's 2 or 4 gives the same logits to the last bit, a value not dividing the group
 *     is refused;
 * and both stay near the CPU's fp32.
 * Prints PASS/FAIL per check and "N passed, N failed"; exits non-zero on failure. */
#include "skiplm.h"
#include "skiplm_cuda.h"
#include "../test.h"
#include "cuda_test.h"
#include <stdint.h>

static int n_pass = 0;
#define CHECK2(cond, ...) do { int ok_ = (cond); CHECK(ok_, __VA_ARGS__); n_pass += ok_; } while (0)

typedef struct {
    const char *name;
    const char *fields;      /* "key=value ..." for sk_config_set */
    int prompt, steps;       /* prompt length, decoding steps (each side) */
    int chunk;               /* GPU prefill chunk (0 = default); prompt % chunk != 1: a last chunk of
                                one token is a decoding step (fp32 math), which run_bf16 does not expect */
    int mid;                 /* tokens of the second prefill (after the steps), 0 = none */
} icase;

static const icase CASES[] = {
    {"gpt2 baseline hs16 chunked", "n_layer=3 n_head=4 n_embd=64 vocab_size=97 block_size=128", 37, 12, 16, 9},
    {"gpt2 SLA 2/3 hs16", "n_layer=4 n_head=4 n_embd=64 vocab_size=97 block_size=128 n_skip_layer=2 n_skip_head=3", 29, 10, 0, 5},
    {"gpt2 routing cross-layer", "n_layer=4 n_head=4 n_embd=64 vocab_size=97 block_size=128 routing=1,3:*=-1", 21, 8, 8, 3},
    {"gpt2 routing multi-source", "n_layer=4 n_head=4 n_embd=64 vocab_size=97 block_size=128 routing=2-3:0-1=-2;3:2-3=@0", 33, 8, 0, 0},
    {"gpt2 SLA all heads 4/4", "n_layer=3 n_head=4 n_embd=64 vocab_size=97 block_size=128 n_skip_layer=1 n_skip_head=4", 19, 8, 0, 2},
    {"gpt2 hs64 SLA long (split keys)", "n_layer=3 n_head=4 n_embd=256 vocab_size=97 block_size=256 n_skip_layer=2 n_skip_head=2", 140, 6, 64, 0},
    {"gpt2 hs48 sinusoidal tanh nobias", "n_layer=2 n_head=2 n_embd=96 vocab_size=97 block_size=128 sinusoidal=1 gelu=tanh bias=0", 23, 8, 0, 4},
    {"gpt2 hs128 SLA relu", "n_layer=2 n_head=2 n_embd=256 vocab_size=97 block_size=128 n_skip_layer=1 n_skip_head=1 relu=1", 17, 6, 0, 0},
    {"llama GQA 4/2 SLA", "family=llama n_layer=3 n_head=4 n_kv_head=2 n_embd=64 vocab_size=97 block_size=128 n_skip_layer=2 n_skip_head=2 bias=0", 27, 10, 10, 6},
    {"llama MQA all heads hs32", "family=llama n_layer=2 n_head=4 n_kv_head=1 n_embd=128 vocab_size=97 block_size=128 n_skip_layer=1 n_skip_head=4 bias=0", 25, 8, 0, 0},
    {"llama GQA routing long", "family=llama n_layer=3 n_head=4 n_kv_head=2 n_embd=64 vocab_size=97 block_size=256 routing=2:0-1=@0;2:2-3=-1 bias=0", 131, 6, 0, 3},
    {"llama untied head rope llama3", "family=llama n_layer=2 n_head=4 n_kv_head=2 n_embd=64 vocab_size=97 block_size=128 "
     "bias=0 untied_head=1 rope_theta=10000 rope_scaling=llama3 rope_factor=8 rope_original_ctx=64", 35, 8, 8, 4},
    {"llama qkv bias GQA SLA", "family=llama n_layer=3 n_head=4 n_kv_head=2 n_embd=64 vocab_size=97 block_size=128 bias=0 "
     "qkv_bias=1 n_skip_layer=1 n_skip_head=2", 29, 8, 10, 3},
};

static void random_tokens(int32_t *x, int n, int V, uint64_t seed) {
    uint64_t r = test_lcg_seed(seed);
    for (int i = 0; i < n; i++) x[i] = TEST_TOKEN(&r, V);
}

static void run_case(const icase *tc) {
    sk_config cfg;
    if (test_config(tc->fields, &cfg)) { CHECK2(0, "%s: config: %s", tc->name, sk_last_error()); return; }
    sk_model *m = NULL;
    sk_cuda_model *cm = NULL;
    sk_kvcache *kc = NULL;
    sk_cuda_kvcache *kg = NULL;
    if (sk_model_new(&m, &cfg, 4321)) { CHECK2(0, "%s: model: %s", tc->name, sk_last_error()); return; }
    const int V = cfg.vocab_size, P = tc->prompt, max_T = P + tc->steps + tc->mid + tc->steps;
    float *lc = malloc(sizeof(float) * V), *lg = malloc(sizeof(float) * V), *l0 = malloc(sizeof(float) * V);
    int32_t *prompt = malloc(sizeof(int32_t) * (P + tc->mid));
    random_tokens(prompt, P + tc->mid, V, 11);
    if (sk_cuda_model_new_inference(&cm, m, SK_CUDA_FP32) || sk_cuda_kvcache_new(&kg, cm, max_T, tc->chunk) ||
        sk_kvcache_new_params(&kc, m, &(sk_kvcache_params){.max_T = max_T, .n_seq = 1})) {
        CHECK2(0, "%s: setup: %s", tc->name, sk_last_error());
        goto done;
    }
    /* 1. the same slot map, the same size */
    CHECK2(sk_cuda_kvcache_bytes(kg) == sk_kvcache_bytes(kc) && sk_cuda_kvcache_bytes_full(kg) == sk_kvcache_bytes_full(kc),
           "%s: KV cache %zu bytes (%zu without SLA) on both sides", tc->name, sk_cuda_kvcache_bytes(kg),
           sk_cuda_kvcache_bytes_full(kg));

    /* 2. prefill */
    if (sk_model_decode(m, kc, prompt, P, lc) || sk_cuda_prefill(cm, kg, prompt, P, lg)) {
        CHECK2(0, "%s: prefill: %s", tc->name, sk_last_error());
        goto done;
    }
    memcpy(l0, lg, sizeof(float) * V);
    double d = max_abs_diff(lc, lg, V);
    CHECK2(d <= 1e-4, "%s: prefill of %d tokens (chunk %d): logits max |diff| %.2e (max |logit| %.3f)", tc->name, P,
           tc->chunk, d, max_abs(lc, V));

    /* 3./4. decoding steps, a second prefill, more steps */
    double worst = 0, worst_mid = 0;
    int greedy_same = 0, sampled_same = 0, n_steps = 0;
    uint64_t rng_c = 2024, rng_g = 2024;
    for (int phase = 0; phase < 2; phase++) {
        if (phase == 1) {
            if (!tc->mid) break;
            if (sk_model_decode(m, kc, prompt + P, tc->mid, lc) || sk_cuda_prefill(cm, kg, prompt + P, tc->mid, lg)) {
                CHECK2(0, "%s: second prefill: %s", tc->name, sk_last_error());
                goto done;
            }
            worst_mid = max_abs_diff(lc, lg, V);
        }
        for (int s = 0; s < tc->steps; s++) {
            int gc = sk_sample_token(lc, V, 0.0f, 0, 1.0f, NULL), gg = sk_sample_token(lg, V, 0.0f, 0, 1.0f, NULL);
            int tcpu = sk_sample_token(lc, V, 0.9f, 20, 0.95f, &rng_c);
            int tgpu = sk_sample_token(lg, V, 0.9f, 20, 0.95f, &rng_g);
            greedy_same += gc == gg;
            sampled_same += tcpu == tgpu;
            n_steps++;
            int32_t next = s % 2 ? gc : tcpu;          /* both sides get the CPU's token */
            if (sk_model_decode(m, kc, &next, 1, lc) || sk_cuda_decode(cm, kg, next, lg)) {
                CHECK2(0, "%s: decoding step %d: %s", tc->name, s, sk_last_error());
                goto done;
            }
            worst = fmax(worst, max_abs_diff(lc, lg, V));
        }
    }
    CHECK2(worst <= 1e-4 && worst_mid <= 1e-4, "%s: %d decoding steps%s: logits max |diff| %.2e (second prefill %.2e)",
           tc->name, n_steps, tc->mid ? " around a second prefill" : "", worst, worst_mid);
    CHECK2(greedy_same == n_steps && sampled_same == n_steps,
           "%s: greedy tokens identical %d/%d, sampled (T 0.9, top-k 20, top-p 0.95, same seed) %d/%d", tc->name,
           greedy_same, n_steps, sampled_same, n_steps);
    CHECK2(sk_cuda_kvcache_pos(kg) == sk_kvcache_pos(kc) && sk_cuda_kvcache_pos(kg) == max_T - (tc->mid ? 0 : tc->steps),
           "%s: cache positions %d on both sides", tc->name, sk_cuda_kvcache_pos(kg));

    /* 5. cache full, reset, bad tokens */
    {
        int32_t t = 1;
        while (sk_cuda_kvcache_pos(kg) < max_T)
            if (sk_cuda_decode(cm, kg, t, lg)) { CHECK2(0, "%s: filling the cache: %s", tc->name, sk_last_error()); goto done; }
        int rc = sk_cuda_decode(cm, kg, t, lg);
        CHECK2(rc == SK_EINVAL && strstr(sk_last_error(), "do not fit") && sk_cuda_kvcache_pos(kg) == max_T,
               "%s: step past max_T=%d refused: %s", tc->name, max_T, rc ? sk_last_error() : "(no error)");
        int32_t bad = V;
        rc = sk_cuda_prefill(cm, kg, &bad, 1, lg);
        sk_cuda_kvcache_reset(kg);
        int rc2 = sk_cuda_decode(cm, kg, -1, lg);
        CHECK2(rc == SK_EINVAL && rc2 == SK_EINVAL && sk_cuda_kvcache_pos(kg) == 0,
               "%s: tokens %d and -1 refused: %s", tc->name, V, sk_last_error());
        if (sk_cuda_prefill(cm, kg, prompt, P, lg)) { CHECK2(0, "%s: prefill after reset: %s", tc->name, sk_last_error()); goto done; }
        d = max_abs_diff(l0, lg, V);
        CHECK2(d <= 1e-6, "%s: after a reset the prompt gives the same logits (max |diff| %.2e)", tc->name, d);
    }
done:
    free(lc); free(lg); free(l0); free(prompt);
    sk_kvcache_free(kc);
    sk_cuda_kvcache_free(kg);
    sk_cuda_model_free(cm);
    sk_model_free(m);
}

/* max over i of |a_i - b_i| beyond b_i's own bf16 rounding (half a bf16 ulp at b_i: b = f 2^e,
 * f in [0.5, 1), ulp 2^(e-8)): the bf16 forward gives its logits in bf16, cached generation
 * keeps them in fp32 */
static double beyond_bf16(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        int e;
        frexp(b[i], &e);
        double d = fabs((double)a[i] - b[i]) - (b[i] != 0.0f ? ldexp(1.0, e - 9) : 0.0);
        if (!(d <= m)) m = isnan(d) ? INFINITY : d;        /* a NaN logit is no match */
    }
    return m;
}

/* bf16 cached generation: prefill + steps vs the bf16 full forward and the CPU's fp32;
 * tc: the tensor-core attention for the forward pass and the prefill (else fp32 kernels) */
static void run_bf16(const icase *tc, int attn_tc) {
    sk_config cfg;
    const char *mode = attn_tc ? "tensor-core attention" : "fp32 attention";
    if (test_config(tc->fields, &cfg)) { CHECK2(0, "bf16 %s: config", tc->name); return; }
    sk_model *m = NULL;
    sk_cuda_model *cm = NULL, *c32 = NULL;
    sk_cuda_kvcache *kg = NULL, *kd = NULL, *kh = NULL, *bad = NULL;
    const int V = cfg.vocab_size, P = tc->prompt, n = P + tc->steps;
    int32_t *tok = malloc(sizeof(int32_t) * n);
    float *full = malloc(sizeof(float) * n * V), *cpu = malloc(sizeof(float) * n * V), *lg = malloc(sizeof(float) * V);
    float *ld = malloc(sizeof(float) * V), *lh = malloc(sizeof(float) * V);
    random_tokens(tok, n, V, 13);
    if (!attn_tc) setenv("SKIPLM_CUDA_TC_ATTN", "0", 1);        /* read when the model is made */
    int rc0 = sk_model_new(&m, &cfg, 4321) || sk_cuda_model_new_inference(&cm, m, SK_CUDA_BF16);
    unsetenv("SKIPLM_CUDA_TC_ATTN");
    setenv("SKIPLM_CUDA_KV16", "0", 1);                         /* read when a cache is made */
    rc0 = rc0 || sk_cuda_kvcache_new(&kd, cm, n, tc->chunk);    /* an fp32 cache, the same model */
    unsetenv("SKIPLM_CUDA_KV16");
    setenv("SKIPLM_CUDA_DECODE_HEADS", "1", 1);                 /* one query head per decoding block */
    rc0 = rc0 || sk_cuda_kvcache_new(&kh, cm, n, tc->chunk);
    unsetenv("SKIPLM_CUDA_DECODE_HEADS");
    if (rc0 || sk_cuda_kvcache_new(&kg, cm, n, tc->chunk) || sk_cuda_forward(cm, tok, NULL, 1, n, NULL, full) ||
        sk_model_forward(m, tok, NULL, 1, n, NULL, cpu)) {
        CHECK2(0, "bf16 %s (%s): setup: %s", tc->name, mode, sk_last_error());
        goto done;
    }
    double d_pre = 0, d_steps = 0, d_cpu = 0, big = max_abs(cpu, (size_t)n * V), k_pre = -1, k_steps = 0, h_all = 0;
    for (int t = P - 1; t < n; t++) {
        int rc = t == P - 1 ? sk_cuda_prefill(cm, kg, tok, P, lg) : sk_cuda_decode(cm, kg, tok[t], lg);
        rc = rc ? rc : t == P - 1 ? sk_cuda_prefill(cm, kd, tok, P, ld) : sk_cuda_decode(cm, kd, tok[t], ld);
        rc = rc ? rc : t == P - 1 ? sk_cuda_prefill(cm, kh, tok, P, lh) : sk_cuda_decode(cm, kh, tok[t], lh);
        h_all = fmax(h_all, max_abs_diff(lg, lh, V));
        if (rc) { CHECK2(0, "bf16 %s (%s): position %d: %s", tc->name, mode, t, sk_last_error()); goto done; }
        double d = beyond_bf16(lg, full + (size_t)t * V, V);
        if (t == P - 1) d_pre = d;
        else d_steps = fmax(d_steps, d);
        d_cpu = fmax(d_cpu, max_abs_diff(lg, cpu + (size_t)t * V, V));
        if (t == P - 1) k_pre = max_abs_diff(lg, ld, V);
        else k_steps = fmax(k_steps, max_abs_diff(lg, ld, V));
    }
    /* the decoding steps: the forward's attention rounded P to bf16, the step's did not; with
     * the fp32 attention kernels the steps' GEMVs and the forward's cuBLAS GEMMs add the same
     * bf16 products in different orders, so an activation rounded to bf16 can come out one
     * bf16 ulp (2^-8 relative) apart, which the layers after carry to the logits (an H200:
     * 9.0e-4 at max |logit| 1.0; the emulator's orders agree): one bf16 ulp of the largest
     * logit */
    const double step_tol = (attn_tc ? 2e-2 : 4e-3) * fmax(1.0, big);
    CHECK2(d_pre <= 1e-4 && d_steps <= step_tol && d_cpu <= 2e-2 * fmax(1.0, big) && d_cpu > 1e-5,
           "bf16 %s (%s): prefill %d (chunk %d) vs the bf16 forward (beyond its bf16 logits' rounding) max |diff| %.2e, %d steps %.2e (tolerance %.0e), "
           "vs CPU fp32 %.2e (max |logit| %.2f)", tc->name, mode, P, tc->chunk, d_pre, tc->steps, d_steps, step_tol,
           d_cpu, big);
    if (attn_tc) {
        /* the bf16 cache against the fp32 one: same prefill bits, steps apart by bf16's rounding */
        CHECK2(sk_cuda_kvcache_bf16(kg) == 1 && sk_cuda_kvcache_bf16(kd) == 0 &&
               2 * sk_cuda_kvcache_bytes(kg) == sk_cuda_kvcache_bytes(kd) &&
               2 * sk_cuda_kvcache_bytes_full(kg) == sk_cuda_kvcache_bytes_full(kd) && k_pre == 0 && k_steps > 0 &&
               k_steps <= 2e-2 * fmax(1.0, big),
               "bf16 %s: bf16 KV cache %zu bytes (fp32 %zu): prefill logits == the fp32 cache's (max |diff| %.1e), "
               "%d steps apart by %.2e (> 0, tolerance %.0e)", tc->name, sk_cuda_kvcache_bytes(kg),
               sk_cuda_kvcache_bytes(kd), k_pre, tc->steps, k_steps, 2e-2 * fmax(1.0, big));
        /* a model that cannot read bf16 K/V is refused the cache, which stays as it was */
        int pos = sk_cuda_kvcache_pos(kg), r1 = sk_cuda_model_new_inference(&c32, m, SK_CUDA_FP32);
        int r2 = r1 ? r1 : sk_cuda_decode(c32, kg, tok[0], lg);
        int ok2 = r2 == SK_EINVAL && strstr(sk_last_error(), "holds bf16 K/V") && sk_cuda_kvcache_pos(kg) == pos;
        setenv("SKIPLM_CUDA_KV16", "2", 1);
        int r3 = sk_cuda_kvcache_new(&bad, cm, n, 0);
        unsetenv("SKIPLM_CUDA_KV16");
        CHECK2(ok2 && r3 == SK_EINVAL && !bad && strstr(sk_last_error(), "SKIPLM_CUDA_KV16='2'"),
               "bf16 %s: the bf16 cache refused to an fp32 model (rc %d), SKIPLM_CUDA_KV16=2 refused (rc %d): %s",
               tc->name, r2, r3, sk_last_error());
        /* query heads per decoding block: the same bits; 3 (or 2 with MHA) refused */
        setenv("SKIPLM_CUDA_DECODE_HEADS", cfg.n_kv_head && cfg.n_head / cfg.n_kv_head % 2 == 0 ? "3" : "2", 1);
        int r4 = sk_cuda_kvcache_new(&bad, cm, n, 0);
        unsetenv("SKIPLM_CUDA_DECODE_HEADS");
        CHECK2(h_all == 0 && r4 == SK_EINVAL && !bad && strstr(sk_last_error(), "SKIPLM_CUDA_DECODE_HEADS="),
               "bf16 %s: SKIPLM_CUDA_DECODE_HEADS=1 gives the same logits at every position (max |diff| %.1e, must "
               "be 0); a value that does not divide the group is refused: %s", tc->name, h_all, sk_last_error());
    } else {
        CHECK2(sk_cuda_kvcache_bf16(kg) == 0 && k_pre == 0 && k_steps == 0,
               "bf16 %s (%s): the cache is fp32 (the fp32 kernels read it); SKIPLM_CUDA_KV16=0 changes nothing",
               tc->name, mode);
    }
done:
    free(tok); free(full); free(cpu); free(lg); free(ld); free(lh);
    sk_cuda_kvcache_free(kg);
    sk_cuda_kvcache_free(kd);
    sk_cuda_kvcache_free(kh);
    sk_cuda_model_free(cm);
    sk_cuda_model_free(c32);
    sk_model_free(m);
}

/* A cache is tied to its model; arguments are checked. */
static void run_api(void) {
    sk_config cfg;
    test_config("n_layer=2 n_head=2 n_embd=32 vocab_size=50 block_size=32", &cfg);
    sk_model *m1 = NULL, *m2 = NULL;
    sk_cuda_model *c1 = NULL, *c2 = NULL;
    sk_cuda_kvcache *kv = NULL, *bad = NULL;
    float logits[50];
    if (sk_model_new(&m1, &cfg, 1) || sk_model_new(&m2, &cfg, 2) || sk_cuda_model_new(&c1, m1, SK_CUDA_FP32) ||
        sk_cuda_model_new(&c2, m2, SK_CUDA_FP32) || sk_cuda_kvcache_new(&kv, c1, 32, 0)) {
        CHECK2(0, "api: setup: %s", sk_last_error());
    } else {
        int r1 = sk_cuda_decode(c2, kv, 3, logits);
        CHECK2(r1 == SK_EINVAL, "api: a cache used with another model is refused: %s", sk_last_error());
        int r2 = sk_cuda_kvcache_new(&bad, c1, 33, 0);
        int r3 = sk_cuda_kvcache_new(&bad, c1, 0, 0);
        int32_t one = 1;
        int r4 = sk_cuda_prefill(c1, kv, &one, 0, logits);
        CHECK2(r2 == SK_EINVAL && r3 == SK_EINVAL && r4 == SK_EINVAL && !bad,
               "api: max_T above block_size or 0, and n = 0, are refused: %s", sk_last_error());
        /* an inference-only model: the training model's forward, and no training calls */
        sk_cuda_model *ci = NULL;
        int32_t x[20], y[20];
        for (int i = 0; i < 20; i++) { x[i] = (i * 7) % 50; y[i] = (i * 3) % 50; }
        float la[2 * 10 * 50], lb[2 * 10 * 50], l1 = 0, l2 = 0;
        double g = 0;
        if (sk_cuda_model_new_inference(&ci, m1, SK_CUDA_FP32) || sk_cuda_forward(c1, x, y, 2, 10, &l1, la) ||
            sk_cuda_forward(ci, x, y, 2, 10, &l2, lb)) {
            CHECK2(0, "api: inference-only model: %s", sk_last_error());
        } else {
            CHECK2(l1 == l2 && max_abs_diff(la, lb, 2 * 10 * 50) == 0,
                   "api: inference-only model: loss and logits identical to the training model's (%.6f)", l1);
            int e1 = sk_cuda_zero_grad(ci), e2 = sk_cuda_forward_backward(ci, x, y, 2, 10, 1.0f, 0, &l2);
            int e3 = sk_cuda_grad_norm(ci, &g), e4 = sk_cuda_download_adam(ci, la, NULL);
            CHECK2(e1 == SK_EINVAL && e2 == SK_EINVAL && e3 == SK_EINVAL && e4 == SK_EINVAL &&
                   strstr(sk_last_error(), "no gradients or AdamW state"),
                   "api: inference-only model refuses the training calls: %s", sk_last_error());
        }
        sk_cuda_model_free(ci);
    }
    sk_cuda_kvcache_free(kv);
    sk_cuda_model_free(c1); sk_cuda_model_free(c2);
    sk_model_free(m1); sk_model_free(m2);
}

/* Single-token steps as CUDA graphs (the default) against the same steps without
 * (SKIPLM_CUDA_GRAPHS=0): the same kernels, so the same logits at every position (1e-5: on
 * a GPU cuBLAS may pick another algorithm with the graph's workspace; 0 on the emulator),
 * across the 128-key split boundary (a graph per split count), in fp32 and bf16; a prefill
 * in between (not a graph) and a reset keep them equal; graphs stay on. A graph replayed
 * with stale positions or grids is off by ~1e-2. */
static void run_graphs(const char *name, const char *fields, int prec) {
    sk_config cfg;
    if (test_config(fields, &cfg)) { CHECK2(0, "graphs %s: config", name); return; }
    sk_model *m = NULL;
    sk_cuda_model *cm = NULL;
    sk_cuda_kvcache *kg = NULL, *kd = NULL;
    const int V = cfg.vocab_size, P = 120, steps = 20, n = P + steps;
    int32_t *tok = malloc(sizeof(int32_t) * n);
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V);
    random_tokens(tok, n, V, 5);
    int rc = sk_model_new(&m, &cfg, 99) || sk_cuda_model_new_inference(&cm, m, prec) ||
             sk_cuda_kvcache_new(&kg, cm, cfg.block_size, 0);
    setenv("SKIPLM_CUDA_GRAPHS", "0", 1);
    rc = rc || sk_cuda_kvcache_new(&kd, cm, cfg.block_size, 0);
    unsetenv("SKIPLM_CUDA_GRAPHS");
    if (rc) { CHECK2(0, "graphs %s: setup: %s", name, sk_last_error()); goto done; }
    double worst = 0;
    for (int round = 0; round < 2; round++) {        /* the second after a reset */
        if (sk_cuda_prefill(cm, kg, tok, P, a) || sk_cuda_prefill(cm, kd, tok, P, b)) {
            CHECK2(0, "graphs %s: prefill: %s", name, sk_last_error());
            goto done;
        }
        for (int t = P; t < n; t++) {
            if (sk_cuda_decode(cm, kg, tok[t], a) || sk_cuda_decode(cm, kd, tok[t], b)) {
                CHECK2(0, "graphs %s: step %d: %s", name, t, sk_last_error());
                goto done;
            }
            worst = fmax(worst, max_abs_diff(a, b, V));
            if (t == P + 5 && round == 0) {             /* a 3-token prefill between steps */
                if (sk_cuda_prefill(cm, kg, tok, 3, a) || sk_cuda_prefill(cm, kd, tok, 3, b)) {
                    CHECK2(0, "graphs %s: mid prefill: %s", name, sk_last_error());
                    goto done;
                }
                worst = fmax(worst, max_abs_diff(a, b, V));
            }
        }
        sk_cuda_kvcache_reset(kg);
        sk_cuda_kvcache_reset(kd);
    }
    CHECK2(worst <= 1e-5 && sk_cuda_kvcache_graphs(kg) == 1 && sk_cuda_kvcache_graphs(kd) == 0,
           "graphs %s (%s): %d steps from position %d (across the 128-key split) with graphs == without "
           "(max |diff| %.2e, tolerance 1e-5), twice; graphs on %d / off %d", name, prec == SK_CUDA_BF16 ? "bf16" : "fp32", steps, P,
           worst, sk_cuda_kvcache_graphs(kg), sk_cuda_kvcache_graphs(kd));
done:
    free(tok); free(a); free(b);
    sk_cuda_kvcache_free(kg);
    sk_cuda_kvcache_free(kd);
    sk_cuda_model_free(cm);
    sk_model_free(m);
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
    if (!only || strstr("api", only)) run_api();
    static const char *GRAPH_CASES[][2] = {
        {"gpt2 SLA", "n_layer=3 n_head=4 n_embd=64 vocab_size=97 block_size=160 n_skip_layer=1 n_skip_head=2"},
        {"llama GQA SLA", "family=llama n_layer=3 n_head=4 n_kv_head=2 n_embd=64 vocab_size=97 block_size=160 n_skip_layer=1 n_skip_head=2"},
    };
    for (size_t i = 0; i < 2; i++)
        for (int bf = 0; bf < 2; bf++) {
            char name[128];
            snprintf(name, sizeof name, "graphs %s", GRAPH_CASES[i][0]);
            if (!only || strstr(name, only)) run_graphs(GRAPH_CASES[i][0], GRAPH_CASES[i][1], bf ? SK_CUDA_BF16 : SK_CUDA_FP32);
        }
    static const int BF16_CASES[] = {0, 5, 8, 11, 12};   /* gpt2 chunked, gpt2 hs64 SLA long, llama GQA SLA, untied, qkv bias */
    for (size_t i = 0; i < sizeof BF16_CASES / sizeof BF16_CASES[0]; i++) {
        char name[128];
        snprintf(name, sizeof name, "bf16 %s", CASES[BF16_CASES[i]].name);
        if (!only || strstr(name, only)) { run_bf16(&CASES[BF16_CASES[i]], 1); run_bf16(&CASES[BF16_CASES[i]], 0); }
    }
    printf("%d passed, %d failed\n", n_pass, sk_test_failed);
    return sk_test_failed ? 1 : 0;
}
