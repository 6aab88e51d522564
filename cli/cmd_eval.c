/* skiplm eval: mean loss and perplexity of a weights file (or checkpoint) on token shards,
 * on the CPU or (build-cuda/skiplm --device cuda) the GPU. In order: the command line
 * (parse_opts), the model and the loader with the memory check (open_eval), the batches
 * (eval_batches), then the result and the --dump-logits file (report). */
#include "cli.h"
#ifdef SKIPLM_CUDA
#include "skiplm_cuda.h"
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The command line. */
typedef struct {
    const char *weights, *dump, *device;
    char **shards;
    cli_model_opts mo;
    int n_shards, B, T, max_batches, tf32, bf16, q8, use_cuda;
} eval_opts;

/* An evaluation: the model, its loader and the inputs, targets (and logits) of every batch
 * (eval_free frees them). */
typedef struct {
    sk_model *m;
    const sk_config *c;
    sk_loader *L;
    uint64_t nb;                 /* batches to evaluate */
    size_t BT;
    int32_t *x, *y;
    float *logits;               /* with --dump-logits */
#ifdef SKIPLM_CUDA
    sk_cuda_model *cm;           /* with --device cuda */
#endif
} eval_run;

/* The command line into o (pos holds its positional arguments). cli_parse's status: 0, 1
 * (--help) or 2. */
static int parse_opts(eval_opts *o, int argc, char **argv, char **pos) {
    *o = (eval_opts){.device = "cpu", .B = 8};
    cli_opt opts[] = {
        {"batch", 'i', &o->B, "sequences per batch (8)"},
        {"seq", 'i', &o->T, "sequence length (the model's block_size)"},
        {"max-batches", 'i', &o->max_batches, "stop after N batches (0 = the whole shard)"},
        {"dump-logits", 's', &o->dump, "write inputs, targets and logits of the evaluated batches to this safetensors file"},
        {"device", 's', &o->device, "cpu, or cuda in a CUDA build (make cuda: build-cuda/skiplm) (cpu)"},
        {"tf32", 'b', &o->tf32, "with --device cuda: TF32 tensor-core GEMMs"},
        {"bf16", 'b', &o->bf16, "with --device cuda: bf16 GEMMs (bf16 copy of the weights, fp32 everything else)"},
        {"q8", 'b', &o->q8, "the model with its 2-D weights quantized to 8 bits (q8_0, as sample --q8 decodes; fp32 activations), on the CPU; implied by a quantized file"},
        CLI_MODEL_OPTS(&o->mo),
        {0},
    };
    int np;
    int rc = cli_parse(argc, argv, "eval", "WEIGHTS SHARD... [options]", opts, pos, 64, &np, NULL, NULL);
    if (rc) return rc;
    if (np < 2) { fprintf(stderr, "skiplm eval: give a weights file and at least one token shard\n"); return 2; }
    o->weights = pos[0]; o->shards = pos + 1; o->n_shards = np - 1;
    if (o->B < 1) { fprintf(stderr, "skiplm eval: --batch must be >= 1\n"); return 2; }
    if (o->T < 0) { fprintf(stderr, "skiplm eval: --seq must be >= 1 (0 = the model's block_size)\n"); return 2; }
    if (o->max_batches < 0) { fprintf(stderr, "skiplm eval: --max-batches must be >= 0\n"); return 2; }
    o->use_cuda = cli_device("eval", o->device);
    if (o->use_cuda < 0) return 2;
    if (o->tf32 && o->bf16) { fprintf(stderr, "skiplm eval: --tf32 and --bf16 exclude each other\n"); return 2; }
    if ((o->tf32 || o->bf16) && !o->use_cuda) {
        fprintf(stderr, "skiplm eval: --%s needs --device cuda\n", o->tf32 ? "tf32" : "bf16");
        return 2;
    }
    if (o->q8 && (o->use_cuda || o->bf16 || o->tf32)) { fprintf(stderr, "skiplm eval: --q8 is for the CPU, without --bf16 or --tf32\n"); return 2; }
    if (o->use_cuda && !cli_cuda_built("eval")) return 2;
    return 0;
}

/* Refuse up front what cannot fit: the inputs and targets of every evaluated batch are kept
 * (for the dump), and with --dump-logits all their logits. 0, or 1 (said). */
static int check_memory(const eval_run *e, const eval_opts *o) {
    double need = (double)e->BT * (double)e->nb *
                      (2.0 * sizeof(int32_t) + (o->dump ? (double)e->c->vocab_size * sizeof(float) : 0.0)) +
                  (double)sk_model_num_params(e->m) * sizeof(float);
    char what[160];
    snprintf(what, sizeof what, "eval of %llu batches of %d x %d%s (with the model)", (unsigned long long)e->nb,
             o->B, o->T, o->dump ? " keeping all logits for --dump-logits" : "");
    if (need >= 1.8e19 ? sk_error(SK_ENOMEM, "%s needs %.3g bytes", what, need) : sk_mem_check((size_t)need, what))
        return cli_fail("eval");
    return 0;
}

/* The model (o->T set to its block_size when not given), the loader over the shards, the
 * number of batches and their buffers. 0, or the exit status (said). */
static int open_eval(eval_run *e, eval_opts *o) {
    if (cli_load_model(&e->m, o->weights, &o->mo)) return cli_fail("eval");
    e->c = sk_model_config(e->m);
    /* 8-bit weights: the fp32 forward pass of their dequantized values, which is what 8-bit
     * decoding computes (its activations stay fp32) */
    if (sk_model_q8(e->m) && o->use_cuda) {
        fprintf(stderr, "skiplm eval: %s holds 8-bit weights: evaluate it on the CPU\n", o->weights);
        return 2;
    }
    if (o->q8 && sk_model_quantize_q8(e->m)) return cli_fail("eval");
    if (sk_model_q8(e->m)) fprintf(stderr, "skiplm eval: weights in 8 bits (q8_0)%s\n", o->q8 ? "" : ", as the file holds them");
    if (o->T <= 0) o->T = e->c->block_size;
    if (o->T > e->c->block_size) {
        fprintf(stderr, "skiplm eval: --seq %d exceeds the model's block_size %d\n", o->T, e->c->block_size);
        return 2;
    }
    sk_loader_cfg lc = {.B = o->B, .T = o->T, .vocab_size = e->c->vocab_size};
    if (sk_loader_open(&e->L, (const char *const *)o->shards, o->n_shards, &lc)) return cli_fail("eval");
    uint64_t nwin = sk_loader_n_windows(e->L);
    e->nb = nwin / (uint64_t)o->B;
    if (e->nb == 0) {
        fprintf(stderr, "skiplm eval: the shards hold %llu windows of %d tokens, fewer than one batch of %d\n",
                (unsigned long long)nwin, o->T + 1, o->B);
        return 1;
    }
    if (o->max_batches > 0 && (uint64_t)o->max_batches < e->nb) e->nb = (uint64_t)o->max_batches;
    e->BT = (size_t)o->B * o->T;
    if (check_memory(e, o)) return 1;
    e->x = malloc(e->BT * sizeof(int32_t) * e->nb);
    e->y = malloc(e->BT * sizeof(int32_t) * e->nb);
    e->logits = o->dump ? malloc(e->BT * e->nb * e->c->vocab_size * sizeof(float)) : NULL;
    if (!e->x || !e->y || (o->dump && !e->logits)) { fprintf(stderr, "skiplm eval: out of memory\n"); return 1; }
    return 0;
}

/* With --device cuda: the inference-only device model, said on stderr. 0, or 1 (said). */
static int open_device(eval_run *e, const eval_opts *o) {
#ifdef SKIPLM_CUDA
    if (!o->use_cuda) return 0;
    char dev[256];
    const sk_cuda_precision prec = o->bf16 ? SK_CUDA_BF16 : o->tf32 ? SK_CUDA_TF32 : SK_CUDA_FP32;
    if (sk_cuda_select_device() || sk_cuda_device_info(dev, sizeof dev) || sk_cuda_model_new_inference(&e->cm, e->m, prec))
        return cli_fail("eval");
    fprintf(stderr, "skiplm eval: device cuda: %s, %s\n", dev, sk_cuda_precision_name(prec));
#endif
    return 0;
}

/* The forward pass of batch i: the CPU model's, or the device model's. */
static int forward(eval_run *e, const eval_opts *o, uint64_t i, float *loss) {
    const int32_t *x = e->x + i * e->BT, *y = e->y + i * e->BT;
    float *lo = o->dump ? e->logits + i * e->BT * e->c->vocab_size : NULL;
#ifdef SKIPLM_CUDA
    if (e->cm) return sk_cuda_forward(e->cm, x, y, o->B, o->T, loss, lo);
#endif
    return sk_model_forward(e->m, x, y, o->B, o->T, loss, lo);
}

/* The mean loss over the batches into *mean: over all their targets, or with loss masks beside
 * the shards over the masked-in ones (a batch with none adds nothing). 0, or 1 (said). */
static int eval_batches(eval_run *e, const eval_opts *o, double *mean) {
    if (open_device(e, o)) return 1;
    double sum = 0, n_all = 0;
    for (uint64_t i = 0; i < e->nb; i++) {
        float loss = 0;
        if (sk_loader_next_xy(e->L, e->x + i * e->BT, e->y + i * e->BT)) return cli_fail("eval");
        size_t n = 0;
        for (size_t k = 0; k < e->BT; k++) n += e->y[i * e->BT + k] >= 0;
        if (forward(e, o, i, &loss)) return cli_fail("eval");     /* also for --dump-logits */
        if (n) sum += (double)loss * n;
        n_all += (double)n;
    }
#ifdef SKIPLM_CUDA
    sk_cuda_model_free(e->cm);
    e->cm = NULL;
#endif
    if (n_all == 0) { fprintf(stderr, "skiplm eval: every target of the batches is masked out (loss mask 0)\n"); return 1; }
    *mean = sum / n_all;
    return 0;
}

/* The result on stdout, and with --dump-logits the inputs, targets and logits. 0, or 1. */
static int report(const eval_run *e, const eval_opts *o, double mean) {
    printf("loss %.6f ppl %.4f tokens %llu batches %llu\n", mean, exp(mean),
           (unsigned long long)(e->nb * e->BT), (unsigned long long)e->nb);
    if (!o->dump) return 0;
    sk_st_writer *w = sk_st_writer_new();
    int64_t s2[2] = {(int64_t)(e->nb * o->B), o->T}, s3[3] = {(int64_t)(e->nb * o->B), o->T, e->c->vocab_size};
    sk_st_add(w, "inputs", SK_I32, 2, s2, e->x);
    sk_st_add(w, "targets", SK_I32, 2, s2, e->y);
    sk_st_add(w, "logits", SK_F32, 3, s3, e->logits);
    int rc = sk_st_write(w, o->dump) ? cli_fail("eval") : 0;
    sk_st_writer_free(w);
    return rc;
}

static void eval_free(eval_run *e) {
#ifdef SKIPLM_CUDA
    sk_cuda_model_free(e->cm);
#endif
    free(e->x); free(e->y); free(e->logits);
    sk_loader_free(e->L);
    sk_model_free(e->m);
}

int cmd_eval(int argc, char **argv) {
    eval_opts o;
    char *pos[64];
    int rc = parse_opts(&o, argc, argv, pos);
    if (rc) return rc == 1 ? 0 : rc;
    eval_run e = {0};
    double mean = 0;
    rc = open_eval(&e, &o);
    if (!rc) rc = eval_batches(&e, &o, &mean) || report(&e, &o, mean);
    eval_free(&e);
    return rc;
}
