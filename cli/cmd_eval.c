/* skiplm eval: mean loss and perplexity of a weights file (or checkpoint) on token shards. */
#include "cli.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_eval(int argc, char **argv) {
    int B = 8, T = 0, max_batches = 0;
    const char *dump = NULL;
    cli_opt opts[] = {
        {"batch", 'i', &B, "sequences per batch (8)"},
        {"seq", 'i', &T, "sequence length (the model's block_size)"},
        {"max-batches", 'i', &max_batches, "stop after N batches (0 = the whole shard)"},
        {"dump-logits", 's', &dump, "write inputs, targets and logits of the evaluated batches to this safetensors file"},
        {0},
    };
    char *pos[64]; int np;
    int rc = cli_parse(argc, argv, "eval", "WEIGHTS SHARD... [options]", opts, pos, 64, &np, NULL, NULL);
    if (rc) return rc == 1 ? 0 : rc;
    if (np < 2) { fprintf(stderr, "skiplm eval: give a weights file and at least one token shard\n"); return 2; }
    if (B < 1) { fprintf(stderr, "skiplm eval: --batch must be >= 1\n"); return 2; }
    if (T < 0) { fprintf(stderr, "skiplm eval: --seq must be >= 1 (0 = the model's block_size)\n"); return 2; }
    if (max_batches < 0) { fprintf(stderr, "skiplm eval: --max-batches must be >= 0\n"); return 2; }
    sk_model *m;
    if (sk_model_load(&m, pos[0], NULL)) return cli_fail("eval");
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
    double sum = 0;
    for (uint64_t i = 0; i < nb; i++) {
        float loss;
        if (sk_loader_next_xy(L, x + i * BT, y + i * BT) ||
            sk_model_forward(m, x + i * BT, y + i * BT, B, T, &loss, dump ? logits + i * BT * c->vocab_size : NULL))
            return cli_fail("eval");
        sum += loss;
    }
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
