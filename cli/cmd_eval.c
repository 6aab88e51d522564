/* skiplm eval: mean loss and perplexity of a weights file (or checkpoint) on token shards,
 * on the CPU or (build-cuda/skiplm --device cuda) the GPU. */
#include "cli.h"
#ifdef SKIPLM_CUDA
#include "skiplm_cuda.h"
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_eval(int argc, char **argv) {
    int n_head = 0;
    int B = 8, T = 0, max_batches = 0, tf32 = 0, bf16 = 0;
    const char *dump = NULL, *device = "cpu";
    cli_opt opts[] = {
        {"batch", 'i', &B, "sequences per batch (8)"},
        {"seq", 'i', &T, "sequence length (the model's block_size)"},
        {"max-batches", 'i', &max_batches, "stop after N batches (0 = the whole shard)"},
        {"dump-logits", 's', &dump, "write inputs, targets and logits of the evaluated batches to this safetensors file"},
        {"device", 's', &device, "cpu, or cuda in a CUDA build (make cuda: build-cuda/skiplm) (cpu)"},
        {"tf32", 'b', &tf32, "with --device cuda: TF32 tensor-core GEMMs"},
        {"bf16", 'b', &bf16, "with --device cuda: bf16 GEMMs (bf16 copy of the weights, fp32 everything else)"},
        {"n_head", 'i', &n_head, CLI_N_HEAD_HELP},
        {0},
    };
    char *pos[64]; int np;
    int rc = cli_parse(argc, argv, "eval", "WEIGHTS SHARD... [options]", opts, pos, 64, &np, NULL, NULL);
    if (rc) return rc == 1 ? 0 : rc;
    if (np < 2) { fprintf(stderr, "skiplm eval: give a weights file and at least one token shard\n"); return 2; }
    if (B < 1) { fprintf(stderr, "skiplm eval: --batch must be >= 1\n"); return 2; }
    if (T < 0) { fprintf(stderr, "skiplm eval: --seq must be >= 1 (0 = the model's block_size)\n"); return 2; }
    if (max_batches < 0) { fprintf(stderr, "skiplm eval: --max-batches must be >= 0\n"); return 2; }
    const int use_cuda = cli_device("eval", device);
    if (use_cuda < 0) return 2;
    if (tf32 && bf16) { fprintf(stderr, "skiplm eval: --tf32 and --bf16 exclude each other\n"); return 2; }
    if ((tf32 || bf16) && !use_cuda) { fprintf(stderr, "skiplm eval: --%s needs --device cuda\n", tf32 ? "tf32" : "bf16"); return 2; }
    if (use_cuda && !cli_cuda_built("eval")) return 2;
    sk_model *m;
    if (cli_load_model(&m, pos[0], n_head)) return cli_fail("eval");
    const sk_config *c = sk_model_config(m);
    if (T <= 0) T = c->block_size;
    if (T > c->block_size) { fprintf(stderr, "skiplm eval: --seq %d exceeds the model's block_size %d\n", T, c->block_size); return 2; }
    sk_loader_cfg lc = {.B = B, .T = T, .vocab_size = c->vocab_size};
    sk_loader *L;
    if (sk_loader_open(&L, (const char *const *)pos + 1, np - 1, &lc)) { sk_model_free(m); return cli_fail("eval"); }
    uint64_t nwin = sk_loader_n_windows(L);
    uint64_t nb = nwin / (uint64_t)B;
    if (nb == 0) {
        fprintf(stderr, "skiplm eval: the shards hold %llu windows of %d tokens, fewer than one batch of %d\n",
                (unsigned long long)nwin, T + 1, B);
        sk_loader_free(L); sk_model_free(m);
        return 1;
    }
    if (max_batches > 0 && (uint64_t)max_batches < nb) nb = (uint64_t)max_batches;
    size_t BT = (size_t)B * T;
    /* inputs and targets of every evaluated batch are kept (for the dump), and with
     * --dump-logits all their logits: refuse up front what cannot fit */
    double need = (double)BT * (double)nb * (2.0 * sizeof(int32_t) + (dump ? (double)c->vocab_size * sizeof(float) : 0.0)) +
                  (double)sk_model_num_params(m) * sizeof(float);
    char what[160];
    snprintf(what, sizeof what, "eval of %llu batches of %d x %d%s (with the model)", (unsigned long long)nb, B, T,
             dump ? " keeping all logits for --dump-logits" : "");
    if (need >= 1.8e19 ? sk_error(SK_ENOMEM, "%s needs %.3g bytes", what, need) : sk_mem_check((size_t)need, what)) {
        sk_loader_free(L); sk_model_free(m);
        return cli_fail("eval");
    }
    int32_t *x = malloc(BT * sizeof(int32_t) * nb), *y = malloc(BT * sizeof(int32_t) * nb);
    float *logits = dump ? malloc(BT * nb * c->vocab_size * sizeof(float)) : NULL;
    if (!x || !y || (dump && !logits)) { fprintf(stderr, "skiplm eval: out of memory\n"); return 1; }
    /* the forward pass of one batch: the CPU model's, or an inference-only device model's */
#ifdef SKIPLM_CUDA
    sk_cuda_model *cm = NULL;
    if (use_cuda) {
        char dev[256];
        const sk_cuda_precision prec = bf16 ? SK_CUDA_BF16 : tf32 ? SK_CUDA_TF32 : SK_CUDA_FP32;
        if (sk_cuda_select_device() || sk_cuda_device_info(dev, sizeof dev) || sk_cuda_model_new_inference(&cm, m, prec))
            return cli_fail("eval");
        fprintf(stderr, "skiplm eval: device cuda: %s, %s\n", dev, sk_cuda_precision_name(prec));
    }
#endif
    double sum = 0;
    for (uint64_t i = 0; i < nb; i++) {
        float loss;
        float *lo = dump ? logits + i * BT * c->vocab_size : NULL;
        if (sk_loader_next_xy(L, x + i * BT, y + i * BT)) return cli_fail("eval");
#ifdef SKIPLM_CUDA
        if (cm ? sk_cuda_forward(cm, x + i * BT, y + i * BT, B, T, &loss, lo)
               : sk_model_forward(m, x + i * BT, y + i * BT, B, T, &loss, lo))
            return cli_fail("eval");
#else
        if (sk_model_forward(m, x + i * BT, y + i * BT, B, T, &loss, lo)) return cli_fail("eval");
#endif
        sum += loss;
    }
#ifdef SKIPLM_CUDA
    sk_cuda_model_free(cm);
#endif
    double mean = sum / nb;
    printf("loss %.6f ppl %.4f tokens %llu batches %llu\n", mean, exp(mean),
           (unsigned long long)(nb * BT), (unsigned long long)nb);
    if (dump) {
        sk_st_writer *w = sk_st_writer_new();
        int64_t s2[2] = {(int64_t)(nb * B), T}, s3[3] = {(int64_t)(nb * B), T, c->vocab_size};
        sk_st_add(w, "inputs", SK_I32, 2, s2, x);
        sk_st_add(w, "targets", SK_I32, 2, s2, y);
        sk_st_add(w, "logits", SK_F32, 3, s3, logits);
        if (sk_st_write(w, dump)) return cli_fail("eval");
        sk_st_writer_free(w);
    }
    free(x); free(y); free(logits);
    sk_loader_free(L);
    sk_model_free(m);
    return 0;
}
