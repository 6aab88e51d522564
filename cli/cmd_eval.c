/* skiplm eval: mean loss and perplexity of a weights file (or checkpoint) on token shards,
 * on the CPU or (build-cuda/skiplm --device cuda) the GPU; with --by-position also the mean
 * loss of each range of positions in the sequence (where long context helps, later positions'
 * loss falls below earlier ones'). In order: the command line (parse_opts), the model and the
 * loader with the memory check (open_eval), the batches (eval_batches), then the result, the
 * positions' table, the accuracy and the --dump-logits file (report). With --accuracy also the
 * exact-match accuracy of the argmax of the logits on the targets that count (all, or with
 * loss masks beside the shards the masked-in ones: the answers of a synthetic task), per
 * token and per sequence (a sequence is right when all its counted targets are). With --kv-cache
 * (or --kv-bf16, K and V stored in bf16) each sequence is scored through the decoder's KV cache
 * instead of the training forward pass (forward_kv): the loss that sample's logits give. */
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
    const char *weights, *dump, *device, *pos_out, *acc_out;
    const char *choices, *choices_out, *delim, *tok_path;       /* --choices (cli/eval_choices.c) */
    char **shards;
    cli_model_opts mo;
    int n_shards, B, T, max_batches, tf32, bf16, q8, use_cuda, by_pos, buckets, accuracy, kv_cache, kv_bf16;
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
    float *logits;               /* with --dump-logits: every batch's; else with --accuracy: one batch's */
    double *pos_sum, *pos_n;     /* with --by-position: per position, the summed loss and the targets */
    sk_kvcache *kv;              /* with --kv-cache: one sequence of --seq positions */
    float *seq_logits;           /* with --kv-cache, without --dump-logits or --accuracy: one sequence's */
    uint64_t tok_n, tok_right, seq_n, seq_right;   /* with --accuracy: counted targets and sequences, and the right ones */
#ifdef SKIPLM_CUDA
    sk_cuda_model *cm;           /* with --device cuda */
#endif
} eval_run;

/* The command line into o (pos holds its positional arguments). cli_parse's status: 0, 1
 * (--help) or 2. */
static int parse_opts(eval_opts *o, int argc, char **argv, char **pos) {
    *o = (eval_opts){.device = "cpu", .B = 8, .buckets = 16, .delim = " "};
    cli_opt opts[] = {
        {"batch", 'i', &o->B, "sequences per batch (8)"},
        {"seq", 'i', &o->T, "sequence length (the model's block_size)"},
        {"max-batches", 'i', &o->max_batches, "stop after N batches (0 = the whole shard)"},
        {"dump-logits", 's', &o->dump, "write inputs, targets and logits of the evaluated batches to this safetensors file"},
        {"by-position", 'b', &o->by_pos, "also the mean loss by position in the sequence, in --buckets equal ranges (CPU)"},
        {"buckets", 'i', &o->buckets, "ranges of positions of --by-position, at most --seq (16)"},
        {"position-out", 's', &o->pos_out, "write --by-position's table to this file: CSV if it ends in .csv, else JSON (implies --by-position)"},
        {"accuracy", 'b', &o->accuracy, "also the exact-match accuracy of the argmax on the counted (masked-in) targets, "
                                         "per token and per sequence (all its counted targets right)"},
        {"accuracy-out", 's', &o->acc_out, "write --accuracy's figures to this file: CSV if it ends in .csv, else JSON (implies --accuracy)"},
        {"device", 's', &o->device, "cpu, or cuda in a CUDA build (make cuda: build-cuda/skiplm) (cpu)"},
        {"tf32", 'b', &o->tf32, "with --device cuda: TF32 tensor-core GEMMs"},
        {"bf16", 'b', &o->bf16, "the forward pass of train --bf16: bf16 GEMMs with fp32 accumulation on a bf16 copy of "
                                "the weights and bf16 attention products, the rest fp32 (the CPU's needs oneDNN)"},
        {"q8", 'b', &o->q8, "the model with its 2-D weights quantized to 8 bits (q8_0, as sample --q8 decodes; fp32 activations, as its decoding steps), on the CPU; implied by a quantized file"},
        {"kv-cache", 'b', &o->kv_cache, "score each sequence through the decoder's KV cache (as sample computes logits) instead of the training forward pass (CPU)"},
        {"kv-bf16", 'b', &o->kv_bf16, "--kv-cache with K and V stored in bf16, as sample --kv-bf16: the loss that rounding costs (CPU)"},
        {"choices", 's', &o->choices, "multiple choice instead of shards: a JSONL file of {context, endings, label} (HellaSwag's); acc and acc_norm"},
        {"choices-out", 's', &o->choices_out, "with --choices: each item's log-likelihoods to this file: CSV if it ends in .csv, else JSON"},
        {"choice-delim", 's', &o->delim, "with --choices: text put before each ending (\" \", as llm.c and lm-evaluation-harness)"},
        {"tokenizer", 's', &o->tok_path, "with --choices: the tokenizer (default: the model's, as sample finds it)"},
        CLI_MODEL_OPTS(&o->mo),
        {0},
    };
    int np;
    int rc = cli_parse(argc, argv, "eval", "WEIGHTS SHARD... [options] | WEIGHTS --choices FILE.jsonl [options]", opts, pos, 64, &np,
                       NULL, NULL);
    if (rc) return rc;
    if (o->choices) {
        if (np != 1) { fprintf(stderr, "skiplm eval: --choices takes the weights only, no shards\n"); return 2; }
        if (strcmp(o->device, "cpu") || o->dump || o->by_pos || o->pos_out || o->accuracy || o->acc_out) {
            fprintf(stderr, "skiplm eval: --choices runs on the CPU, without --dump-logits, --by-position or --accuracy\n");
            return 2;
        }
        o->weights = pos[0];
        return 0;
    }
    if (o->choices_out || o->tok_path) { fprintf(stderr, "skiplm eval: --choices-out and --tokenizer are for --choices\n"); return 2; }
    if (np < 2) { fprintf(stderr, "skiplm eval: give a weights file and at least one token shard\n"); return 2; }
    o->weights = pos[0]; o->shards = pos + 1; o->n_shards = np - 1;
    if (o->B < 1) { fprintf(stderr, "skiplm eval: --batch must be >= 1\n"); return 2; }
    if (o->T < 0) { fprintf(stderr, "skiplm eval: --seq must be >= 1 (0 = the model's block_size)\n"); return 2; }
    if (o->max_batches < 0) { fprintf(stderr, "skiplm eval: --max-batches must be >= 0\n"); return 2; }
    if (o->pos_out) o->by_pos = 1;
    if (o->acc_out) o->accuracy = 1;
    if (o->buckets < 1) { fprintf(stderr, "skiplm eval: --buckets must be >= 1\n"); return 2; }
    o->use_cuda = cli_device("eval", o->device);
    if (o->use_cuda < 0) return 2;
    if (o->tf32 && o->bf16) { fprintf(stderr, "skiplm eval: --tf32 and --bf16 exclude each other\n"); return 2; }
    if (o->tf32 && !o->use_cuda) {
        fprintf(stderr, "skiplm eval: --tf32 needs --device cuda\n");
        return 2;
    }
    if (o->bf16 && !o->use_cuda && !sk_bf16_available()) {
        fprintf(stderr, "skiplm eval: --bf16 on the CPU needs oneDNN, and this skiplm was built without it: install "
                "libdnnl-dev (Debian/Ubuntu; bash scripts/install_deps.sh does) and rebuild with make\n");
        return 2;
    }
    if (o->q8 && (o->use_cuda || o->bf16 || o->tf32)) { fprintf(stderr, "skiplm eval: --q8 is for the CPU, without --bf16 or --tf32\n"); return 2; }
    if (o->use_cuda && !cli_cuda_built("eval")) return 2;
    if (o->by_pos && o->use_cuda) { fprintf(stderr, "skiplm eval: --by-position runs on the CPU (the device model gives the mean only)\n"); return 2; }
    if (o->kv_bf16) o->kv_cache = 1;
    if (o->kv_cache && (o->use_cuda || o->bf16 || o->by_pos)) {
        fprintf(stderr, "skiplm eval: --kv-cache and --kv-bf16 decode on the CPU, without --bf16 (the training pass's GEMMs) or --by-position\n");
        return 2;
    }
    return 0;
}

/* Refuse up front what cannot fit: the inputs and targets of every evaluated batch are kept
 * (for the dump), and with --dump-logits all their logits. 0, or 1 (said). */
static int check_memory(const eval_run *e, const eval_opts *o) {
    double need = (double)e->BT * (double)e->nb *
                      (2.0 * sizeof(int32_t) + (o->dump ? (double)e->c->vocab_size * sizeof(float) : 0.0)) +
                  (o->accuracy && !o->dump ? (double)e->BT * e->c->vocab_size * sizeof(float) : 0.0) +
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
    if (o->bf16 && !o->use_cuda) {
        if (sk_model_set_bf16(e->m, 1)) return cli_fail("eval");
        fprintf(stderr, "skiplm eval: bf16 GEMMs with fp32 accumulation (%s, %s)%s\n", sk_bf16_version(), sk_bf16_isa(),
                sk_bf16_native() ? "" : "; this CPU has no native bf16: slower than fp32");
    }
    if (o->T <= 0) o->T = e->c->block_size;
    if (o->T > e->c->block_size) {
        fprintf(stderr, "skiplm eval: --seq %d exceeds the model's block_size %d\n", o->T, e->c->block_size);
        return 2;
    }
    if (o->by_pos && o->buckets > o->T) {
        fprintf(stderr, "skiplm eval: --buckets %d is more than the %d positions of a sequence (--seq)\n", o->buckets, o->T);
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
    e->logits = o->dump ? malloc(e->BT * e->nb * e->c->vocab_size * sizeof(float))
              : o->accuracy ? malloc(e->BT * e->c->vocab_size * sizeof(float)) : NULL;
    if (o->by_pos) { e->pos_sum = calloc(o->T, sizeof(double)); e->pos_n = calloc(o->T, sizeof(double)); }
    if (!e->x || !e->y || ((o->dump || o->accuracy) && !e->logits) || (o->by_pos && (!e->pos_sum || !e->pos_n))) {
        fprintf(stderr, "skiplm eval: out of memory\n");
        return 1;
    }
    if (o->kv_cache) {
        /* the decoder with the model's weights (8-bit ones for a quantized model, as sample) */
        sk_kvcache_params kp = sk_kvcache_default_params();
        kp.max_T = o->T;
        kp.weights = sk_model_q8(e->m) ? SK_WEIGHTS_Q8 : SK_WEIGHTS_F32;
        kp.kv_type = o->kv_bf16 ? SK_KV_BF16 : SK_KV_F32;
        if (sk_kvcache_new_params(&e->kv, e->m, &kp)) return cli_fail("eval");
        if (!e->logits && !(e->seq_logits = malloc(sizeof(float) * o->T * e->c->vocab_size))) {
            fprintf(stderr, "skiplm eval: out of memory\n");
            return 1;
        }
        fprintf(stderr, "skiplm eval: through the KV cache, K/V in %s\n", o->kv_bf16 ? "bf16" : "fp32");
    }
    return 0;
}

/* --by-position: batch i's per-token losses added to their positions' sums */
static void add_positions(eval_run *e, const eval_opts *o, uint64_t i) {
    const float *l = sk_model_losses(e->m);
    const int32_t *y = e->y + i * e->BT;
    for (size_t k = 0; l && k < e->BT; k++)
        if (y[k] >= 0) { e->pos_sum[k % o->T] += l[k]; e->pos_n[k % o->T] += 1; }
}

/* --accuracy: batch i's argmax (the first of equal maxima, as PyTorch's) against its counted
 * targets; a sequence with at least one counted target is right when all of them are */
static void add_accuracy(eval_run *e, const eval_opts *o, uint64_t i) {
    const int V = e->c->vocab_size;
    const int32_t *y = e->y + i * e->BT;
    const float *lg = o->dump ? e->logits + i * e->BT * V : e->logits;
    for (int b = 0; b < o->B; b++) {
        int counted = 0, all = 1;
        for (int t = 0; t < o->T; t++) {
            const size_t k = (size_t)b * o->T + t;
            if (y[k] < 0) continue;
            const float *row = lg + k * V;
            int best = 0;
            for (int v = 1; v < V; v++) if (row[v] > row[best]) best = v;
            counted = 1;
            e->tok_n++;
            if (best == y[k]) e->tok_right++; else all = 0;
        }
        e->seq_n += counted;
        e->seq_right += counted && all;
    }
}

/* --accuracy's figures on stdout, and with --accuracy-out as CSV or JSON, written
 * atomically. 0, or 1 (said). */
static int report_accuracy(const eval_run *e, const eval_opts *o, double mean) {
    const double ta = (double)e->tok_right / (double)e->tok_n, sa = (double)e->seq_right / (double)e->seq_n;
    printf("accuracy: tokens %llu of %llu (%.4f), sequences %llu of %llu (%.4f)\n", (unsigned long long)e->tok_right,
           (unsigned long long)e->tok_n, ta, (unsigned long long)e->seq_right, (unsigned long long)e->seq_n, sa);
    if (!o->acc_out) return 0;
    char buf[512];
    const size_t ol = strlen(o->acc_out);
    const int csv = ol >= 4 && !strcmp(o->acc_out + ol - 4, ".csv");
    const int n = csv ? snprintf(buf, sizeof buf, "tokens,tokens_right,token_accuracy,sequences,sequences_right,"
                                 "sequence_accuracy,loss\n%llu,%llu,%.6f,%llu,%llu,%.6f,%.6f\n", (unsigned long long)e->tok_n,
                                 (unsigned long long)e->tok_right, ta, (unsigned long long)e->seq_n,
                                 (unsigned long long)e->seq_right, sa, mean)
                      : snprintf(buf, sizeof buf, "{\"tokens\": %llu, \"tokens_right\": %llu, \"token_accuracy\": %.6f, "
                                 "\"sequences\": %llu, \"sequences_right\": %llu, \"sequence_accuracy\": %.6f, \"loss\": %.6f}\n",
                                 (unsigned long long)e->tok_n, (unsigned long long)e->tok_right, ta,
                                 (unsigned long long)e->seq_n, (unsigned long long)e->seq_right, sa, mean);
    return sk_write_atomic(o->acc_out, buf, (size_t)n) ? cli_fail("eval") : 0;
}

/* The positions' table: bucket b covers positions [b T / N, (b + 1) T / N) of a sequence
 * (position 0 predicts the second token from the first alone). On stdout, and with
 * --position-out as CSV or JSON, written atomically. 0, or 1 (said). */
static int report_positions(const eval_run *e, const eval_opts *o, double mean) {
    const int N = o->buckets, T = o->T;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = o->pos_out ? open_memstream(&buf, &len) : NULL;
    const size_t ol = o->pos_out ? strlen(o->pos_out) : 0;
    const int csv = ol >= 4 && !strcmp(o->pos_out + ol - 4, ".csv");
    if (o->pos_out && !f) return sk_error(SK_ENOMEM, "out of memory"), cli_fail("eval");
    if (f) fprintf(f, csv ? "bucket,pos_start,pos_end,tokens,loss\n" : "{\"seq\": %d, \"loss\": %.6f, \"buckets\": [", T, mean);
    printf("loss by position (%d ranges of %d positions):\n", N, T);
    for (int b = 0; b < N; b++) {
        const int p0 = (int)((long)b * T / N), p1 = (int)((long)(b + 1) * T / N);
        double sum = 0, n = 0;
        for (int p = p0; p < p1; p++) { sum += e->pos_sum[p]; n += e->pos_n[p]; }
        const double m = n > 0 ? sum / n : NAN;
        printf("  positions %5d-%-5d loss %.6f tokens %.0f\n", p0, p1 - 1, m, n);
        if (f && csv) fprintf(f, "%d,%d,%d,%.0f,%.6f\n", b, p0, p1, n, m);
        else if (f && n > 0) fprintf(f, "%s{\"start\": %d, \"end\": %d, \"tokens\": %.0f, \"loss\": %.6f}", b ? ", " : "", p0, p1, n, m);
        else if (f) fprintf(f, "%s{\"start\": %d, \"end\": %d, \"tokens\": 0, \"loss\": null}", b ? ", " : "", p0, p1);
    }
    if (!f) return 0;
    if (!csv) fputs("]}\n", f);
    fclose(f);
    int rc = sk_write_atomic(o->pos_out, buf, len) ? cli_fail("eval") : 0;
    free(buf);
    return rc;
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
    float *lo = o->dump ? e->logits + i * e->BT * e->c->vocab_size : e->logits;
#ifdef SKIPLM_CUDA
    if (e->cm) return sk_cuda_forward(e->cm, x, y, o->B, o->T, loss, lo);
#endif
    return sk_model_forward(e->m, x, y, o->B, o->T, loss, lo);
}

/* --kv-cache: batch i's sequences decoded through the KV cache (sk_model_decode_all), each
 * anew; *loss the mean cross-entropy of their logits over the targets that count (NaN if
 * none), as the forward pass's. */
static int forward_kv(eval_run *e, const eval_opts *o, uint64_t i, float *loss) {
    const int V = e->c->vocab_size, T = o->T;
    const int32_t *x = e->x + i * e->BT, *y = e->y + i * e->BT;
    float *lo = o->dump ? e->logits + i * e->BT * V : e->logits;
    double sum = 0;
    size_t n = 0;
    for (int b = 0; b < o->B; b++) {
        float *lg = lo ? lo + (size_t)b * T * V : e->seq_logits;
        sk_kvcache_reset(e->kv);
        if (sk_model_decode_all(e->m, e->kv, 0, x + (size_t)b * T, T, lg)) return 1;
        for (int t = 0; t < T; t++) {
            const int32_t tg = y[(size_t)b * T + t];
            if (tg < 0) continue;
            const float *row = lg + (size_t)t * V;
            float mx = row[0];
            for (int v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
            double s = 0;
            for (int v = 0; v < V; v++) s += exp((double)row[v] - mx);
            sum += log(s) + mx - row[tg];
            n++;
        }
    }
    *loss = n ? (float)(sum / (double)n) : NAN;
    return 0;
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
        if ((o->kv_cache ? forward_kv(e, o, i, &loss) : forward(e, o, i, &loss))) return cli_fail("eval");   /* also for --dump-logits */
        if (o->by_pos) add_positions(e, o, i);
        if (o->accuracy) add_accuracy(e, o, i);
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
    if (o->by_pos && report_positions(e, o, mean)) return 1;
    if (o->accuracy && report_accuracy(e, o, mean)) return 1;
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
    free(e->x); free(e->y); free(e->logits); free(e->pos_sum); free(e->pos_n); free(e->seq_logits);
    sk_kvcache_free(e->kv);
    sk_loader_free(e->L);
    sk_model_free(e->m);
}

int cmd_eval(int argc, char **argv) {
    eval_opts o;
    char *pos[64];
    int rc = parse_opts(&o, argc, argv, pos);
    if (rc) return rc == 1 ? 0 : rc;
    if (o.choices) return cli_eval_choices(o.weights, o.choices, &o.mo, o.tok_path, o.choices_out, o.delim, o.q8);
    eval_run e = {0};
    double mean = 0;
    rc = open_eval(&e, &o);
    if (!rc) rc = eval_batches(&e, &o, &mean) || report(&e, &o, mean);
    eval_free(&e);
    return rc;
}
