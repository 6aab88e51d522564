/* skiplm train --lora R: LoRA fine-tuning of a frozen base (docs/training.md): only the
 * adapters (sk_lora, src/train/lora.c) are trained, with AdamW, on token shards (loss masks
 * beside them are honoured, as prepare --chat writes them for SFT); the result is PEFT's
 * adapter folder (adapter_config.json, adapter_model.safetensors), which sample, chat, serve,
 * eval and export apply with --lora DIR. */
#include "cli.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *init, *data, *train, *val, *out, *targets;
    int rank, steps, B, T, accum, warmup, log_every, q8, val_batches;
    float alpha, dropout, lr, min_lr, wd, clip;
    uint64_t seed;
    cli_model_opts mo;
} lora_opts;

/* the shards of spec (a file, a glob or a folder's stream) into paths */
static int shards(const char *spec, const char *stream, cli_docs *d) {
    char record[4096];
    return cli_find_shards(spec, stream, d, record, sizeof record);
}

/* the mean loss over n batches of L */
static double mean_loss(sk_model *m, sk_loader *L, int n, int B, int T, int32_t *x, int32_t *y) {
    double s = 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        float loss;
        if (sk_loader_next_xy(L, x, y) || sk_model_forward(m, x, y, B, T, &loss, NULL)) return NAN;
        if (isfinite(loss)) { s += loss; k++; }
    }
    return k ? s / k : NAN;
}

int cmd_train_lora(int argc, char **argv) {
    lora_opts o = {.rank = 0, .steps = 100, .B = 8, .accum = 1, .log_every = 10, .alpha = 0, .lr = 2e-4f, .min_lr = -1,
                   .clip = 1.0f, .seed = 1337, .val_batches = 10};
    cli_opt opts[] = {
        {"lora", 'i', &o.rank, "the adapters' rank r (required)"},
        {"lora-alpha", 'f', &o.alpha, "alpha: the adapters are scaled by alpha / r (default r: scale 1)"},
        {"lora-targets", 's', &o.targets, "the matrices to adapt: Llama q,k,v,o,gate,up,down; GPT-2 c_attn,c_proj,c_fc; or all (default: all)"},
        {"lora-dropout", 'f', &o.dropout, "dropout on the adapters' input: only 0 (the adapters are trained through the merged weights)"},
        {"init", 's', &o.init, "the frozen base: weights, a Hugging Face folder or a GGUF file (required)"},
        {"data", 's', &o.data, "directory with train.bin (+ val.bin), as prepare writes it"},
        {"train", 's', &o.train, "training shard, or a glob of them in quotes (instead of --data)"},
        {"val", 's', &o.val, "validation shard or glob: its loss before and after (default: --data's val stream, if any)"},
        {"out", 's', &o.out, "the adapter folder to write (created if missing)"},
        {"steps", 'i', &o.steps, "optimizer steps (100)"},
        {"batch", 'i', &o.B, "sequences per micro-batch (8)"},
        {"seq", 'i', &o.T, "sequence length (the model's block_size)"},
        {"accum", 'i', &o.accum, "micro-batches per step (1)"},
        {"lr", 'f', &o.lr, "learning rate (2e-4)"},
        {"min-lr", 'f', &o.min_lr, "cosine decay floor (lr / 10)"},
        {"warmup", 'i', &o.warmup, "warmup steps (0)"},
        {"weight-decay", 'f', &o.wd, "AdamW weight decay on the adapters (0)"},
        {"grad-clip", 'f', &o.clip, "clip the adapters' gradient norm (1.0; 0 = off)"},
        {"seed", 'u', &o.seed, "adapter init, dropout of the base's config and data order (1337)"},
        {"log-every", 'i', &o.log_every, "print the loss every N steps (10)"},
        {"val-batches", 'i', &o.val_batches, "validation batches (10)"},
        {"q8", 'b', &o.q8, "QLoRA-style: the base's matrices quantized to 8 bits (q8_0) and frozen there"},
        {"n_head", 'i', &o.mo.n_head, CLI_N_HEAD_HELP},
        {0},
    };
    char *pos[1]; int np;
    int rc = cli_parse(argc, argv, "train", "--lora R --init BASE (--data DIR | --train SHARDS) --out ADAPTER_DIR [options]", opts,
                       pos, 0, &np, NULL, NULL);
    if (rc) return rc == 1 ? 0 : rc;
    if (o.rank < 1) { fprintf(stderr, "skiplm train: --lora R needs a rank >= 1\n"); return 2; }
    if (!o.init || !o.out || (!o.data == !o.train)) {
        fprintf(stderr, "skiplm train: --lora needs --init BASE, --out DIR and one of --data DIR or --train SHARDS\n");
        return 2;
    }
    if (o.dropout != 0) {
        fprintf(stderr, "skiplm train: --lora-dropout %g: skiplm trains the adapters through the gradient of the merged weights, "
                "which has no dropout of the adapters' own input (give 0)\n", (double)o.dropout);
        return 2;
    }
    if (o.steps < 1 || o.B < 1 || o.accum < 1 || o.T < 0 || o.log_every < 1) {
        fprintf(stderr, "skiplm train: --steps, --batch, --accum, --log-every must be >= 1 and --seq >= 0\n");
        return 2;
    }
    if (o.alpha == 0) o.alpha = (float)o.rank;
    if (o.min_lr < 0) o.min_lr = o.lr / 10;
    sk_model *m = NULL;
    sk_lora *l = NULL;
    sk_loader *L = NULL, *V = NULL;
    cli_docs td = {0}, vd = {0};
    int32_t *x = NULL, *y = NULL;
    rc = 1;
    if (cli_load_model(&m, o.init, &o.mo)) { cli_fail("train"); goto done; }
    const sk_config *c = sk_model_config(m);
    if (o.T == 0) o.T = c->block_size;
    if (o.T > c->block_size) { fprintf(stderr, "skiplm train: --seq %d exceeds the model's block_size %d\n", o.T, c->block_size); goto done; }
    if (o.q8 && sk_model_quantize_q8(m)) { cli_fail("train"); goto done; }
    const int q8 = sk_model_q8(m);
    if (sk_lora_new(&l, m, o.rank, o.alpha, o.targets ? o.targets : "all", o.seed)) { cli_fail("train"); goto done; }
    /* the data */
    const char *tspec = o.train ? o.train : o.data;
    if (shards(tspec, "train", &td)) { cli_fail("train"); goto done; }
    sk_loader_cfg lc = {.B = o.B, .T = o.T, .seed = o.seed, .shuffle = 1, .vocab_size = c->vocab_size};
    if (sk_loader_open(&L, (const char *const *)td.v, td.n, &lc)) { cli_fail("train"); goto done; }
    if (o.val || o.data) {
        if (!shards(o.val ? o.val : o.data, "val", &vd)) {
            sk_loader_cfg vc = lc;
            vc.shuffle = 0;
            if (sk_loader_open(&V, (const char *const *)vd.v, vd.n, &vc)) { cli_fail("train"); goto done; }
        } else if (o.val) { cli_fail("train"); goto done; }
    }
    const size_t BT = (size_t)o.B * o.T;
    x = malloc(BT * sizeof *x); y = malloc(BT * sizeof *y);
    if (!x || !y) { fprintf(stderr, "skiplm train: out of memory\n"); goto done; }
    /* memory: the model's fp32 weights and gradients, the copy of the adapted matrices, A and B
     * with their gradients and AdamW moments (activations besides) */
    const double np_base = (double)sk_model_num_params(m);
    const double bytes = 4.0 * np_base * 2 + 4.0 * (double)sk_lora_base_floats(l) + 16.0 * (double)sk_lora_num_params(l);
    printf("lora: rank %d, alpha %g (scale %g), %d matrices, %zu adapter parameters (%.3f%% of the base's %.0f)%s\n", o.rank,
           (double)o.alpha, (double)o.alpha / o.rank, sk_lora_count(l), sk_lora_num_params(l),
           100.0 * (double)sk_lora_num_params(l) / np_base, np_base, q8 ? ", base in 8 bits (q8_0)" : "");
    printf("lora: memory %.2f bytes per base parameter besides activations (fp32 weights and their gradient buffer %.0f, "
           "the adapted matrices' copy %.2f, adapters with AdamW state %.2f); full fine-tuning holds 16 (weights, gradients, "
           "AdamW m and v)\n", bytes / np_base, 8.0, 4.0 * (double)sk_lora_base_floats(l) / np_base,
           16.0 * (double)sk_lora_num_params(l) / np_base);
    if (V) printf("lora: val loss before %.6f\n", mean_loss(m, V, o.val_batches, o.B, o.T, x, y));
    sk_adamw_cfg ac;
    sk_adamw_default(&ac);
    ac.lr = o.lr; ac.weight_decay = o.wd;
    sk_lr_sched sched = {o.lr, o.min_lr, o.warmup, o.steps};
    const double t0 = sk_now();
    for (int step = 1; step <= o.steps; step++) {
        sk_lora_apply(l, m);
        sk_model_zero_grad(m);
        double ls = 0;
        int n_ok = 0;
        for (int a = 0; a < o.accum; a++) {
            float loss;
            if (sk_loader_next_xy(L, x, y) ||
                sk_model_forward_backward(m, x, y, o.B, o.T, 1.0f / o.accum, o.seed + (uint64_t)step * 1000003u + a, &loss)) {
                cli_fail("train");
                goto done;
            }
            if (isfinite(loss)) { ls += loss; n_ok++; }
        }
        sk_lora_backward(l, m);
        const double lr = sk_lr_at(&sched, step - 1);
        const double norm = n_ok ? sk_lora_step(l, &ac, lr, step, o.clip) : NAN;
        if (step % o.log_every == 0 || step == o.steps)
            printf("step %d/%d loss %.6f lr %.3g grad norm %.4f%s (%.1f s)\n", step, o.steps, n_ok ? ls / n_ok : NAN, lr, norm,
                   isfinite(norm) ? "" : " (skipped: no finite gradient)", sk_now() - t0);
    }
    sk_lora_apply(l, m);
    if (V) printf("lora: val loss after %.6f\n", mean_loss(m, V, o.val_batches, o.B, o.T, x, y));
    if (cli_mkdir_p(o.out)) { fprintf(stderr, "skiplm train: cannot create %s\n", o.out); goto done; }
    if (sk_lora_save(l, m, o.out, o.init)) { cli_fail("train"); goto done; }
    printf("wrote %s: adapter_config.json, adapter_model.safetensors (apply with --lora %s)\n", o.out, o.out);
    rc = 0;
done:
    free(x); free(y);
    sk_loader_free(L); sk_loader_free(V);
    cli_docs_free(&td); cli_docs_free(&vd);
    sk_lora_free(l);
    sk_model_free(m);
    return rc;
}
