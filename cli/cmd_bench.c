/* skiplm bench: training step speed (ms/step, tokens/s, GFLOP/s, MFU against an SGEMM
 * rate measured in the same run, time per phase, peak RSS) and generation speed, on the CPU
 * or (build-cuda/skiplm --device cuda) the GPU. */
#include "cli.h"
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#ifdef SK_HAVE_BLAS
#include <cblas.h>
#endif
#ifdef SKIPLM_CUDA
#include "skiplm_cuda.h"
#endif

static double peak_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of times[0..n) (sorted in place). */
static double median(double *times, int n) {
    qsort(times, n, sizeof(double), cmp_double);
    return times[n / 2];
}

/* GFLOP/s of a training step of B x T tokens in sec seconds: 6 flops per token and parameter
 * that takes part in a matmul (wte as the classifier, not wpe), and attention's 6 L T C. */
static double step_gflops(const sk_model *m, int B, int T, double sec) {
    const sk_config *c = sk_model_config(m);
    int nt; const sk_tensor *ts = sk_model_tensors(m, &nt);
    double n_matmul = 0;
    for (int i = 0; i < nt; i++) if (ts[i].ndim == 2 && !strstr(ts[i].name, "wpe")) n_matmul += ts[i].numel;
    double flops = (6.0 * n_matmul + 6.0 * c->n_layer * T * c->n_embd) * (B * T);
    return flops / sec / 1e9;
}

/* The training batch: N inputs and targets below V, the same in every run. */
static void random_batch(int32_t *x, int32_t *y, int N, int V) {
    uint64_t r = 42;
    for (int i = 0; i < N; i++) { r = r * 6364136223846793005ULL + 1; x[i] = (int32_t)((r >> 33) % V); y[i] = (int32_t)((r >> 13) % V); }
}

/* GFLOP/s of C (M, N) = A (M, K) B^T, best of a few runs. */
static double sgemm_rate(int M, int N, int K) {
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * N * K), *C = malloc(sizeof(float) * M * N);
    for (size_t i = 0; i < (size_t)M * K; i++) A[i] = (float)((i * 7) % 13) * 0.01f;
    for (size_t i = 0; i < (size_t)N * K; i++) B[i] = (float)((i * 5) % 11) * 0.01f;
    double best = 1e30;
    for (int r = 0; r < 4; r++) {
        double t0 = sk_now();
#ifdef SK_HAVE_BLAS
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N);
#else
        for (int i = 0; i < M; i++) for (int j = 0; j < N; j++) { float s = 0; for (int k = 0; k < K; k++) s += A[(size_t)i * K + k] * B[(size_t)j * K + k]; C[(size_t)i * N + j] = s; }
#endif
        double t = sk_now() - t0;
        if (t < best) best = t;
    }
    free(A); free(B); free(C);
    return 2.0 * M * N * K / best / 1e9;
}

#ifdef SKIPLM_CUDA
static void print_gpu_memory(void) {
    size_t used = 0, total = 0;
    if (!sk_cuda_memory(&used, &total))
        printf("  GPU memory in use %.2f GiB of %.2f GiB\n", used / 1073741824.0, total / 1073741824.0);
}

/* The training benchmark on the GPU: the same step as the CPU one (forward + backward,
 * gradient norm, clipping, AdamW), timed from the host with the device synchronised. */
static int bench_cuda(const sk_config *cfg, int B, int T, int steps, int warmup, sk_cuda_precision prec, double peak_tflops,
                      int profile) {
    char dev[256];
    if (sk_cuda_device_info(dev, sizeof dev)) return cli_fail("bench");
    printf("device: cuda: %s, %s\n", dev, sk_cuda_precision_name(prec));
    sk_model *m;
    if (sk_model_new(&m, cfg, 1)) return cli_fail("bench");
    printf("parameters: %.2fM\n", sk_model_num_params(m) / 1e6);
    if ((long long)B * T > INT_MAX) { fprintf(stderr, "skiplm bench: --batch x --seq is too many tokens\n"); return 2; }
    int N = B * T, C = cfg->n_embd;
    sk_cuda_model *cm;
    if (sk_cuda_model_new(&cm, m, prec) || sk_cuda_reserve(cm, B, T)) return cli_fail("bench");
    double g1, g2, g3;
    if (sk_cuda_sgemm_rate(N, 4 * C, C, prec, &g1) || sk_cuda_sgemm_rate(N, C, 4 * C, prec, &g2) ||
        sk_cuda_sgemm_rate(N, 3 * C, C, prec, &g3))
        return cli_fail("bench");
    double ref = fmax(g1, fmax(g2, g3));
    printf("cuBLAS GEMM (%s) on this model's shapes: %.0f / %.0f / %.0f GFLOP/s -> reference rate %.0f GFLOP/s\n",
           prec == SK_CUDA_BF16 ? "bf16" : prec == SK_CUDA_TF32 ? "TF32" : "fp32", g1, g2, g3, ref);
    int32_t *x = malloc(sizeof(int32_t) * N), *y = malloc(sizeof(int32_t) * N);
    double *times = malloc(sizeof(double) * steps);
    if (!x || !y || !times) { fprintf(stderr, "skiplm bench: out of memory\n"); return 1; }
    random_batch(x, y, N, cfg->vocab_size);
    sk_adamw_cfg ac;
    sk_adamw_default(&ac);
    double t_prof = 0;
    /* warm-up, timed steps, then (--profile) the profiled ones */
    for (int s = 1 - warmup; s <= steps + profile; s++) {
        if (s == steps + 1) { sk_cuda_profile_start(); t_prof = sk_now(); }
        double t0 = sk_now(), norm;
        float loss;
        if (sk_cuda_zero_grad(cm) || sk_cuda_forward_backward(cm, x, y, B, T, 1.0f, (uint64_t)s, &loss) ||
            sk_cuda_grad_norm(cm, &norm) ||
            sk_cuda_adamw_step(cm, &ac, 1e-4, s + warmup, sk_clip_coef(norm, 1.0f)) || sk_cuda_sync())
            return cli_fail("bench");
        if (s > 0 && s <= steps) times[s - 1] = sk_now() - t0;
        if (s == 1 - warmup || s == steps) printf("  step %d: loss %.4f, grad norm %.4f\n", s, loss, norm);
    }
    if (profile) t_prof = sk_now() - t_prof;
    double med = median(times, steps), gf = step_gflops(m, B, T, med);
    printf("train: B=%d T=%d: %.2f ms/step (median of %d), %.0f tokens/s, %.1f TFLOP/s, MFU %.1f%% of the sgemm rate",
           B, T, med * 1e3, steps, N / med, gf / 1e3, 100.0 * gf / ref);
    if (peak_tflops > 0) printf(", %.1f%% of %.0f TFLOP/s", 100.0 * gf / (peak_tflops * 1e3), peak_tflops);
    printf("\n");
    print_gpu_memory();
    if (profile && sk_cuda_profile_report(stdout, profile, med * 1e3, t_prof / profile * 1e3)) return cli_fail("bench");
    free(x); free(y); free(times);
    sk_cuda_model_free(cm);
    sk_model_free(m);
    return 0;
}

/* n greedy decoding steps after tokens[0..P) (prefilled in one call), timed separately */
static int gen_cuda_run(sk_cuda_model *cm, sk_cuda_kvcache *kv, const int32_t *tokens, int P, int n, int V,
                        float *logits, double *t_prefill, double *t_gen) {
    sk_cuda_kvcache_reset(kv);
    double t0 = sk_now();
    if (sk_cuda_prefill(cm, kv, tokens, P, logits)) return 1;    /* the logits copy synchronises */
    double t1 = sk_now();
    for (int i = 0; i < n; i++) {
        int32_t tok = sk_sample_token(logits, V, 0, 0, 1, NULL);
        if (sk_cuda_decode(cm, kv, tok, logits)) return 1;
    }
    *t_prefill = t1 - t0;
    *t_gen = sk_now() - t1;
    return 0;
}

/* Generation on the GPU: n greedy tokens after a 1-token prompt (the CPU benchmark's
 * measure), then a prompt of P tokens prefilled in one call and n tokens after it (decoding
 * at a long context, where SLA's smaller cache is read at every step). */
static int bench_cuda_gen(const sk_config *cfg, int T, int gen, sk_cuda_precision prec, int profile) {
    char dev[256];
    if (sk_cuda_device_info(dev, sizeof dev)) return cli_fail("bench");
    sk_model *m;
    sk_cuda_model *cm;
    sk_cuda_kvcache *kv;
    if (sk_model_new(&m, cfg, 1)) return cli_fail("bench");
    int n = gen < cfg->block_size ? gen : cfg->block_size - 1;
    int P = T < cfg->block_size - n ? T : cfg->block_size - n;
    if (P < 1) P = 1;
    if (sk_cuda_model_new_inference(&cm, m, prec) || sk_cuda_kvcache_new(&kv, cm, P + n, 0))
        return cli_fail("bench");
    printf("generation on cuda: %s, %s\n", dev, prec == SK_CUDA_TF32 ? "fp32 with TF32 prefill GEMMs" : sk_cuda_precision_name(prec));
    int V = cfg->vocab_size;
    float *logits = malloc(sizeof(float) * V);
    int32_t *prompt = malloc(sizeof(int32_t) * P);
    if (!logits || !prompt) { fprintf(stderr, "skiplm bench: out of memory\n"); return 1; }
    uint64_t r = 7;
    for (int i = 0; i < P; i++) { r = r * 6364136223846793005ULL + 1; prompt[i] = (int32_t)((r >> 33) % V); }
    double tp, tg, bytes = 4.0 * sk_model_num_params(m);
    int32_t zero = 0;
    if (gen_cuda_run(cm, kv, prompt, P < 8 ? P : 8, 4, V, logits, &tp, &tg)) return cli_fail("bench");   /* warm-up */
    if (gen_cuda_run(cm, kv, &zero, 1, n, V, logits, &tp, &tg)) return cli_fail("bench");
    printf("generate: %d tokens, %.1f tok/s (weights streamed at %.1f GB/s), decoding steps %s\n", n, n / tg,
           bytes * n / tg / 1e9, sk_cuda_kvcache_graphs(kv) ? "as CUDA graphs" : "without CUDA graphs");
    if (gen_cuda_run(cm, kv, prompt, P, n, V, logits, &tp, &tg)) return cli_fail("bench");
    printf("prefill: %d tokens in %.2f ms, %.0f tok/s; then generate: %d tokens at positions %d..%d, %.1f tok/s; "
           "KV cache (%s) %.2f MiB for %d positions (%.2f MiB without SLA)\n", P, tp * 1e3, P / tp, n, P, P + n - 1,
           n / tg, sk_cuda_kvcache_bf16(kv) ? "bf16" : "fp32", sk_cuda_kvcache_bytes(kv) / 1048576.0, P + n,
           sk_cuda_kvcache_bytes_full(kv) / 1048576.0);
    print_gpu_memory();
    if (profile) {       /* decoding after a 1-token prompt, per op: unprofiled, then profiled */
        double tp2, tg2;
        sk_cuda_kvcache_set_graphs(kv, 0);      /* a profiled step has no graph: compare like with like */
        if (gen_cuda_run(cm, kv, &zero, 1, n, V, logits, &tp, &tg)) return cli_fail("bench");
        sk_cuda_profile_start();
        if (gen_cuda_run(cm, kv, &zero, 1, n, V, logits, &tp2, &tg2)) return cli_fail("bench");
        printf("decoding, per token (%d steps: the 1-token prompt and %d decoded):\n", n + 1, n);
        if (sk_cuda_profile_report(stdout, n + 1, (tp + tg) / (n + 1) * 1e3, (tp2 + tg2) / (n + 1) * 1e3))
            return cli_fail("bench");
    }
    free(logits); free(prompt);
    sk_cuda_kvcache_free(kv);
    sk_cuda_model_free(cm);
    sk_model_free(m);
    return 0;
}
#endif

/* The GEMM rates on the model's shapes for N tokens, (N, 4C, C), (N, C, 4C), (N, 3C, C): fp32
 * (OpenBLAS sgemm) or bf16 (oneDNN, fp32 accumulation); returns the best, the reference rate of
 * the MFU. */
static double gemm_rates(int N, int C, int bf16, int print) {
    char impl[96] = "";
    double g[3];
    const int shape[3][3] = {{N, 4 * C, C}, {N, C, 4 * C}, {N, 3 * C, C}};
    for (int i = 0; i < 3; i++)
        g[i] = bf16 ? sk_bf16_gemm_rate(shape[i][0], shape[i][1], shape[i][2], i ? NULL : impl, sizeof impl)
                    : sgemm_rate(shape[i][0], shape[i][1], shape[i][2]);
    double peak = fmax(g[0], fmax(g[1], g[2]));
    if (print && bf16)
        printf("bf16 GEMM (%s, %s) on this model's shapes: %.1f / %.1f / %.1f GFLOP/s -> reference rate %.1f GFLOP/s\n",
               sk_bf16_version(), impl, g[0], g[1], g[2], peak);
    else if (print)
        printf("sgemm (OpenBLAS) on this model's shapes: %.1f / %.1f / %.1f GFLOP/s -> reference rate %.1f GFLOP/s\n", g[0], g[1], g[2], peak);
    return peak;
}

/* The training benchmark on the CPU: warm-up steps, then timed ones (forward + backward,
 * gradient norm, clipping, AdamW), with the time of each phase; in bf16 mixed precision with
 * bf16 (sk_model_set_bf16), its MFU against the bf16 GEMM rate. */
static int bench_train(sk_model *m, int B, int T, int steps, int warmup, int recompute, int bf16) {
    /* refuse up front what cannot fit (parameters, gradients, AdamW m and v, activations)
     * before the sgemm probe allocates its matrices */
    if ((long long)B * T > INT_MAX) { fprintf(stderr, "skiplm bench: --batch x --seq = %lld tokens is too many\n", (long long)B * T); return 2; }
    if (bf16 && sk_model_set_bf16(m, 1)) return cli_fail("bench");
    if (sk_model_reserve(m, B, T, 1)) return cli_fail("bench");
    const sk_config *cfg = sk_model_config(m);
    int N = B * T, C = cfg->n_embd;
    if (bf16) {
        printf("train: bf16 mixed precision (bf16 GEMMs with fp32 accumulation, %s, %s; attention products in bf16: %s)\n",
               sk_bf16_version(), sk_bf16_isa(), sk_attn_bf16_native() ? "avx512_bf16" : "fp32 fused multiply-adds");
        if (!sk_bf16_native())
            printf("note: this CPU has no native bf16 instructions (avx512_bf16 or AMX; oneDNN sees %s): bf16 computes "
                   "through a fallback here and will be slower than fp32\n", sk_bf16_isa());
    }
    double peak = gemm_rates(N, C, bf16, 1);
    int32_t *x = malloc(sizeof(int32_t) * N), *y = malloc(sizeof(int32_t) * N);
    random_batch(x, y, N, cfg->vocab_size);
    int nt; const sk_tensor *ts = sk_model_tensors(m, &nt);
    sk_span *spans; int ns;
    sk_spans_build(ts, nt, &spans, &ns);
    size_t P = sk_model_num_params(m);
    float *mom = calloc(P, sizeof(float)), *vel = calloc(P, sizeof(float));
    sk_adamw_cfg ac;
    sk_adamw_default(&ac);
    double *times = malloc(sizeof(double) * steps), t_opt = 0;
    sk_phase_times ph;
    for (int s = 1 - warmup; s <= steps; s++) {
        if (s == 1) { sk_model_phase_times(m, &ph, 1); t_opt = 0; }
        double t0 = sk_now();
        float loss;
        sk_model_zero_grad(m);
        if (sk_model_forward_backward(m, x, y, B, T, 1.0f, (uint64_t)s, &loss)) return cli_fail("bench");
        double t1 = sk_now();
        float *g = sk_model_grads(m);
        double norm = sk_grad_norm(g, spans, ns);
        sk_clip_grads(g, spans, ns, norm, 1.0f);
        uint16_t *p16 = sk_model_params_bf16(m);     /* bf16: the update rounds the weights' copy too */
        if (p16) {
            sk_adamw_step_bf16(sk_model_params(m), g, mom, vel, spans, ns, &ac, 1e-4, s + warmup, p16);
            sk_model_params_bf16_synced(m);
        } else {
            sk_adamw_step(sk_model_params(m), g, mom, vel, spans, ns, &ac, 1e-4, s + warmup);
        }
        double t2 = sk_now();
        if (s > 0) { times[s - 1] = t2 - t0; t_opt += t2 - t1; }
    }
    sk_model_phase_times(m, &ph, 1);
    double med = median(times, steps), gf = step_gflops(m, B, T, med);
    printf("train: B=%d T=%d: %.1f ms/step (median of %d), %.0f tokens/s, %.1f GFLOP/s, MFU %.1f%% of the %s rate\n",
           B, T, med * 1e3, steps, N / med, gf, 100.0 * gf / peak, bf16 ? "bf16 GEMM" : "sgemm");
    double tot = ph.matmul + ph.attention + ph.norm + ph.elementwise + ph.classifier + t_opt;
    printf("  per step: matmul %.1f ms, attention %.1f ms, norms %.1f ms, elementwise %.1f ms, classifier+loss %.1f ms, adamw %.1f ms (other %.1f ms)\n",
           ph.matmul / steps * 1e3, ph.attention / steps * 1e3, ph.norm / steps * 1e3, ph.elementwise / steps * 1e3,
           ph.classifier / steps * 1e3, t_opt / steps * 1e3, (med * steps - tot) / steps * 1e3);
    /* each phase's share of the timed steps' total time (the phases are summed over the same steps) */
    double all = 0;
    for (int s = 0; s < steps; s++) all += times[s];
    all = all > 0 ? all / 100 : 1;
    printf("  share of the step: matmul %.1f%%, attention %.1f%%, norms %.1f%%, elementwise %.1f%%, classifier+loss %.1f%%, adamw %.1f%%\n",
           ph.matmul / all, ph.attention / all, ph.norm / all, ph.elementwise / all, ph.classifier / all, t_opt / all);
    printf("  recompute %s; activations %.1f MiB (%zu bytes/token), peak RSS %.1f MiB\n",
           recompute == 1 ? "on" : recompute == 0 ? "off" : "auto",
           sk_model_activation_bytes(m, B, T, 1) / 1048576.0, sk_model_activation_bytes(m, B, T, 1) / (size_t)N, peak_rss_mib());
    free(x); free(y); free(spans); free(mom); free(vel); free(times);
    return 0;
}

/* The generation benchmark on the CPU: a prompt of P tokens (timed when P > 1, as a prefill)
 * decoded once and copied to S sequences, then gen tokens (at most block_size - P) for each of
 * them side by side (as sample --samples), with weights w (fp32, bf16 or 8-bit) and K/V stored
 * as kt (fp32, or bf16 with --kv-bf16). */
static int bench_gen(sk_model *m, int gen, int S, int P, sk_weights w, sk_kv_type kt) {
    const sk_config *cfg = sk_model_config(m);
    int n = gen < cfg->block_size - P ? gen : cfg->block_size - P, V = cfg->vocab_size;
    sk_kvcache *kv = NULL;
    float *logits = malloc(sizeof(float) * (size_t)S * V);
    int32_t *tok = calloc(S > P ? S : P, sizeof(int32_t));
    int *seqs = malloc(sizeof(int) * S);
    const char *wname = w == SK_WEIGHTS_BF16 ? "bf16" : w == SK_WEIGHTS_Q8 ? "q8_0" : "fp32";
    sk_kvcache_params kp = sk_kvcache_default_params();
    kp.max_T = P + n; kp.n_seq = S; kp.weights = w; kp.kv_type = kt;
    int bad = !logits || !tok || !seqs ? sk_error(SK_ENOMEM, "out of memory") : sk_kvcache_new_params(&kv, m, &kp);
    for (int i = 0; i < P; i++) tok[i] = (int32_t)((7u * (unsigned)i + 1u) % (unsigned)V);   /* any tokens: the work is the same */
    double tp = sk_now();
    bad = bad || sk_model_decode(m, kv, tok, P, logits);
    tp = sk_now() - tp;
    if (!bad && P > 1)
        printf("prefill: %d tokens in %.2f ms, %.1f tok/s (%s weights)\n", P, tp * 1e3, P / tp, wname);
    for (int s = 0; s < S && !bad; s++) {
        seqs[s] = s;
        if (s) { sk_kvcache_seq_copy(kv, s, 0); memcpy(logits + (size_t)s * V, logits, sizeof(float) * V); }
    }
    uint64_t rng = 7;
    double t0 = sk_now();
    for (int i = 0; i < n && !bad; i++) {
        /* greedy for one sequence; sampled for several, or they would stay equal */
        for (int s = 0; s < S; s++) tok[s] = sk_sample_token(logits + (size_t)s * V, V, S > 1 ? 1.0f : 0.0f, 0, 1, &rng);
        bad = sk_model_decode_batch(m, kv, seqs, tok, S, logits);
    }
    double dt = sk_now() - t0;
    if (!bad && n > 0) {
        /* q8_0: a byte per weight and an fp16 scale per 32 */
        double bytes = (w == SK_WEIGHTS_BF16 ? 2.0 : w == SK_WEIGHTS_Q8 ? 34.0 / 32.0 : 4.0) * sk_model_num_params(m);
        printf("generate: %d tokens x %d sequence%s, %.1f tok/s (%s weights streamed at %.1f GB/s), KV cache%s %.2f MiB (%.2f MiB without SLA)\n",
               n, S, S > 1 ? "s" : "", (double)n * S / dt, wname, bytes * n / dt / 1e9, kt == SK_KV_BF16 ? " (bf16 K/V)" : "",
               sk_kvcache_bytes(kv) / 1048576.0, sk_kvcache_bytes_full(kv) / 1048576.0);
        /* not built: K and V in q8_0 blocks (an int8 a value, an fp16 scale per 32) would take
         * 34 bytes per 128 of fp32 */
        if (w == SK_WEIGHTS_Q8 && kt == SK_KV_F32)
            printf("an 8-bit KV cache (q8_0 blocks, not built) would hold it in %.2f MiB, %.2f MiB less\n",
                   sk_kvcache_bytes(kv) * (34.0 / 128) / 1048576.0, sk_kvcache_bytes(kv) * (94.0 / 128) / 1048576.0);
    }
    free(logits); free(tok); free(seqs);
    sk_kvcache_free(kv);
    return bad ? cli_fail("bench") : 0;
}

int cmd_bench(int argc, char **argv) {
    int gen_seqs = 1, prefill = 1;
    const char *model = NULL;
    int B = 4, T = 0, steps = 5, gen = 256, no_train = 0, no_gen = 0, recompute = -1, warmup = 1, tf32 = 0, bf16 = 0,
        q8 = 0, profile = 0, gemm_rate = 0, kv_bf16 = 0;
    const char *device = "cpu";
    float peak_tflops = 0;
    cli_opt opts[] = {
        {"batch", 'i', &B, "sequences per step (4)"},
        {"seq", 'i', &T, "sequence length (block_size); with --device cuda also the generation prompt"},
        {"steps", 'i', &steps, "timed training steps (5)"},
        {"warmup", 'i', &warmup, "untimed steps first (1)"},
        {"recompute", 'i', &recompute, "activation recomputation: 1 on, 0 off, -1 only if needed to fit (-1)"},
        {"gen", 'i', &gen, "tokens to generate for the generation benchmark (256)"},
        {"no-train", 'b', &no_train, "skip the training benchmark"},
        {"no-gen", 'b', &no_gen, "skip the generation benchmark"},
        {"gen-seqs", 'i', &gen_seqs, "sequences generated side by side in the generation benchmark (CPU; as sample --samples) (1)"},
        {"prefill", 'i', &prefill, "CPU: the generation benchmark's prompt length; above 1 its decoding is timed too (1)"},
        {"model", 's', &model, "CPU: the generation benchmark on this model (any file sample loads; a quantized one in 8 bits), "
                               "not a random one of the model options; no training benchmark"},
        {"device", 's', &device, "cpu, or cuda in a CUDA build (make cuda: build-cuda/skiplm) (cpu)"},
        {"tf32", 'b', &tf32, "with --device cuda: TF32 tensor-core GEMMs"},
        {"bf16", 'b', &bf16, "bf16 mixed precision training (bf16 GEMMs and attention products, fp32 master weights; the CPU's needs oneDNN), and "
                             "on the CPU generation with bf16 weights"},
        {"gemm-rate", 'b', &gemm_rate, "print the fp32 (OpenBLAS) and bf16 (oneDNN) GEMM rates on the model's shapes for "
                                       "--batch x --seq tokens, and nothing else"},
        {"q8", 'b', &q8, "on the CPU: generation with 8-bit weights (q8_0, as sample --q8)"},
        {"kv-bf16", 'b', &kv_bf16, "on the CPU: generation with K and V stored in bf16 (half the KV cache, as sample --kv-bf16)"},
        {"peak-tflops", 'f', &peak_tflops, "with --device cuda: also report MFU against this peak (e.g. 989 for H100 SXM bf16 dense)"},
        {"profile", 'i', &profile, "with --device cuda: N more training steps (and the decoding steps) timed per op with CUDA events, as a table (0)"},
        {0},
    };
    sk_config cfg;
    sk_config_preset(&cfg, "gpt2");
    char *pos[1]; int np, given;
    int rc = cli_parse(argc, argv, "bench", "[model options] [options]   (default model: gpt2 124M)", opts, pos, 0, &np, &cfg, &given);
    if (rc) return rc == 1 ? 0 : rc;
    if (model && (given || strcmp(device, "cpu"))) {
        fprintf(stderr, "skiplm bench: --model takes the model's own configuration, on the CPU (no model options, no --device cuda)\n");
        return 2;
    }
    if (model) no_train = 1;
    if (prefill < 1) { fprintf(stderr, "skiplm bench: --prefill must be at least 1\n"); return 2; }
    if (prefill > 1 && strcmp(device, "cpu")) {
        fprintf(stderr, "skiplm bench: --prefill is for the CPU (with --device cuda, --seq is the generation prompt)\n");
        return 2;
    }
    if (cfg.vocab_size == 0) cfg.vocab_size = 50257;
    if (sk_config_check(&cfg)) return cli_fail("bench");
    if (T <= 0) T = cfg.block_size;
    if (B < 1 || steps < 1 || gen < 0 || warmup < 0 || profile < 0 || T > cfg.block_size) { fprintf(stderr, "skiplm bench: bad --batch/--seq/--steps/--gen/--warmup/--profile\n"); return 2; }
    char desc[256];
    sk_config_describe(&cfg, desc, sizeof desc);
    const int use_cuda = cli_device("bench", device);
    if (use_cuda < 0) return 2;
    if (tf32 && bf16) { fprintf(stderr, "skiplm bench: --tf32 and --bf16 exclude each other\n"); return 2; }
    if (q8 && (bf16 || use_cuda || no_gen || (gen == 0 && prefill < 2))) {
        fprintf(stderr, "skiplm bench: --q8 applies to the CPU's generation benchmark, without --bf16\n");
        return 2;
    }
    if (kv_bf16 && (use_cuda || no_gen || (gen == 0 && prefill < 2))) {
        fprintf(stderr, "skiplm bench: --kv-bf16 applies to the CPU's generation benchmark\n");
        return 2;
    }
    if (gen_seqs < 1 || gen_seqs > SK_KV_MAX_SEQS) { fprintf(stderr, "skiplm bench: --gen-seqs must be in [1, %d]\n", SK_KV_MAX_SEQS); return 2; }
    if (gen_seqs > 1 && use_cuda) { fprintf(stderr, "skiplm bench: --gen-seqs is for the CPU (the CUDA decoder runs one sequence)\n"); return 2; }
    if (profile && !use_cuda) { fprintf(stderr, "skiplm bench: --profile needs --device cuda\n"); return 2; }
    if (tf32 && !use_cuda) { fprintf(stderr, "skiplm bench: --tf32 needs --device cuda\n"); return 2; }
    if (bf16 && !use_cuda && !no_train && !gemm_rate && !sk_bf16_available()) {
        fprintf(stderr, "skiplm bench: --bf16 training on the CPU needs oneDNN, and this skiplm was built without it: install "
                "libdnnl-dev (Debian/Ubuntu; bash scripts/install_deps.sh does) and rebuild with make (or give --no-train: "
                "generation with bf16 weights needs nothing)\n");
        return 2;
    }
    if (gemm_rate && use_cuda) { fprintf(stderr, "skiplm bench: --gemm-rate measures the CPU's GEMMs\n"); return 2; }
    if (use_cuda && !cli_cuda_built("bench")) return 2;
    if (gemm_rate) {
        if ((long long)B * T > INT_MAX) { fprintf(stderr, "skiplm bench: --batch x --seq is too many tokens\n"); return 2; }
        printf("bench: %s\nthreads: %d OpenMP\n", desc, omp_get_max_threads());
        double f = gemm_rates(B * T, cfg.n_embd, 0, 1);
        double h = sk_bf16_available() ? gemm_rates(B * T, cfg.n_embd, 1, 1) : 0.0;
        printf("gemm-rate: fp32 %.1f GFLOP/s, bf16 %.1f GFLOP/s (%s, %s%s)\n", f, h, sk_bf16_version(), sk_bf16_isa(),
               sk_bf16_available() && !sk_bf16_native() ? ", no native bf16" : "");
        return 0;
    }
#ifdef SKIPLM_CUDA
    if (use_cuda) {
        const sk_cuda_precision prec = bf16 ? SK_CUDA_BF16 : tf32 ? SK_CUDA_TF32 : SK_CUDA_FP32;
        printf("bench: %s\n", desc);
        if (!no_train && (rc = bench_cuda(&cfg, B, T, steps, warmup, prec, peak_tflops, profile))) return rc;
        if (!no_gen && gen > 0) return bench_cuda_gen(&cfg, T, gen, prec, profile);
        return 0;
    }
#endif
    (void)tf32; (void)peak_tflops;
    sk_model *m;
    if (model) {
        if (cli_load_model(&m, model, NULL)) return cli_fail("bench");
        cfg = *sk_model_config(m);
        sk_config_describe(&cfg, desc, sizeof desc);
        if (sk_model_q8(m) && bf16) {
            sk_model_free(m);
            fprintf(stderr, "skiplm bench: %s holds 8-bit weights: --bf16 does not apply\n", model);
            return 2;
        }
        q8 |= sk_model_q8(m);
    } else if (sk_model_new(&m, &cfg, 1)) {
        return cli_fail("bench");
    }
    if (!no_gen && prefill >= cfg.block_size) {
        sk_model_free(m);
        fprintf(stderr, "skiplm bench: --prefill %d leaves no position of block_size %d to generate\n", prefill, cfg.block_size);
        return 2;
    }
    printf("bench: %s%s%s\nthreads: %d OpenMP\n", model ? model : "", model ? ": " : "", desc, omp_get_max_threads());
    sk_model_set_recompute(m, recompute);
    printf("parameters: %.2fM\n", sk_model_num_params(m) / 1e6);
    if ((!no_train && (rc = bench_train(m, B, T, steps, warmup, recompute, bf16))) ||
        (!no_gen && (gen > 0 || prefill > 1) &&
         (rc = bench_gen(m, gen, gen_seqs, prefill, q8 ? SK_WEIGHTS_Q8 : bf16 ? SK_WEIGHTS_BF16 : SK_WEIGHTS_F32,
                         kv_bf16 ? SK_KV_BF16 : SK_KV_F32)))) {
        sk_model_free(m);
        return rc;
    }
    printf("peak RSS %.1f MiB\n", peak_rss_mib());
    sk_model_free(m);
    return 0;
}
