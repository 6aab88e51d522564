/* skiplm train --lora R: LoRA fine-tuning of a frozen base (docs/training.md): only the
 * adapters (sk_lora, src/train/lora.c) are trained, with AdamW, on token shards (loss masks
 * beside them are honoured, as prepare --chat writes them for SFT); the base holds no gradient
 * buffer and no AdamW state. The result is PEFT's adapter folder (adapter_config.json,
 * adapter_model.safetensors), which sample, chat, serve, eval and export apply with --lora DIR;
 * beside it lora_state.safetensors (A and B, their AdamW moments, the step, the data position
 * and the options that must not change) from which --resume goes on bit for bit. */
#include "cli.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *init, *data, *train, *val, *out, *targets, *resume;
    int rank, steps, B, T, accum, warmup, log_every, q8, val_batches, ckpt_every;
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

/* the options a resumed run must share with the run it goes on from */
static void fingerprint(const lora_opts *o, char *buf, size_t n) {
    snprintf(buf, n, "rank=%d alpha=%.9g targets=%s dropout=%.9g seed=%llu steps=%d batch=%d seq=%d accum=%d lr=%.9g "
             "min_lr=%.9g warmup=%d wd=%.9g clip=%.9g q8=%d", o->rank, (double)o->alpha, o->targets ? o->targets : "all",
             (double)o->dropout, (unsigned long long)o->seed, o->steps, o->B, o->T, o->accum, (double)o->lr,
             (double)o->min_lr, o->warmup, (double)o->wd, (double)o->clip, o->q8);
}

#define STATE_FILE "lora_state.safetensors"

/* OUT/lora_state.safetensors (atomically): A and B, AdamW's m and v, the step, the data position */
static int save_state(const lora_opts *o, sk_lora *l, const sk_loader *L, int step) {
    char path[4096], fp[512], num[5][32];
    snprintf(path, sizeof path, "%s/" STATE_FILE, o->out);
    fingerprint(o, fp, sizeof fp);
    sk_loader_pos pos;
    sk_loader_get_pos(L, &pos);
    snprintf(num[0], sizeof num[0], "%d", step);
    snprintf(num[1], sizeof num[1], "%llu", (unsigned long long)pos.consumed);
    snprintf(num[2], sizeof num[2], "%llu", (unsigned long long)pos.seed);
    snprintf(num[3], sizeof num[3], "%llu", (unsigned long long)pos.n_windows);
    snprintf(num[4], sizeof num[4], "%lld", (long long)pos.T);
    sk_st_writer *w = sk_st_writer_new();
    if (!w) return sk_error(SK_ENOMEM, "out of memory");
    int64_t n = (int64_t)sk_lora_num_params(l);
    int rc = sk_st_add(w, "weights", SK_F32, 1, &n, sk_lora_weights(l));
    if (!rc) rc = sk_st_add(w, "adam_m", SK_F32, 1, &n, sk_lora_moments(l, 0));
    if (!rc) rc = sk_st_add(w, "adam_v", SK_F32, 1, &n, sk_lora_moments(l, 1));
    if (!rc) rc = sk_st_add_meta(w, "options", fp);
    if (!rc) rc = sk_st_add_meta(w, "step", num[0]);
    if (!rc) rc = sk_st_add_meta(w, "data_consumed", num[1]);
    if (!rc) rc = sk_st_add_meta(w, "data_seed", num[2]);
    if (!rc) rc = sk_st_add_meta(w, "data_windows", num[3]);
    if (!rc) rc = sk_st_add_meta(w, "data_T", num[4]);
    if (!rc) rc = sk_st_write(w, path);
    sk_st_writer_free(w);
    return rc;
}

/* the state of --resume (a folder or its lora_state.safetensors): the adapter's numbers, the
 * data position; returns the step it was saved at, or -1 */
static int load_state(const lora_opts *o, sk_lora *l, sk_loader *L) {
    char path[4096], fp[512];
    const size_t rl = strlen(o->resume);
    if (rl > 12 && !strcmp(o->resume + rl - 12, ".safetensors")) snprintf(path, sizeof path, "%s", o->resume);
    else snprintf(path, sizeof path, "%s/" STATE_FILE, o->resume);
    sk_safetensors st;
    if (sk_st_read(path, &st)) return -1;
    int step = -1;
    fingerprint(o, fp, sizeof fp);
    const char *ofp = sk_st_meta(&st, "options"), *s_step = sk_st_meta(&st, "step"), *c = sk_st_meta(&st, "data_consumed"),
               *sd = sk_st_meta(&st, "data_seed"), *nw = sk_st_meta(&st, "data_windows"), *t = sk_st_meta(&st, "data_T");
    const size_t n = sk_lora_num_params(l);
    if (!ofp || !s_step || !c || !sd || !nw || !t) {
        sk_error(SK_EFORMAT, "%s is not a LoRA training state (its metadata lacks options, step or the data position)", path);
    } else if (strcmp(ofp, fp)) {
        sk_error(SK_EINVAL, "%s was saved with other options: %s (this run: %s); give the same ones to --resume", path, ofp, fp);
    } else if (sk_st_get_f32(&st, "weights", sk_lora_weights(l), n) || sk_st_get_f32(&st, "adam_m", sk_lora_moments(l, 0), n) ||
               sk_st_get_f32(&st, "adam_v", sk_lora_moments(l, 1), n)) {
        /* the error says which tensor */
    } else {
        sk_loader_pos pos = {strtoull(c, NULL, 10), strtoull(sd, NULL, 10), strtoull(nw, NULL, 10), strtoll(t, NULL, 10)};
        step = atoi(s_step);
        if (step < 1 || step > o->steps) step = -1, sk_error(SK_EFORMAT, "%s: step %s is not within --steps %d", path, s_step, o->steps);
        else if (sk_loader_set_pos(L, &pos)) step = -1;
    }
    sk_st_free(&st);
    return step;
}

int cmd_train_lora(int argc, char **argv) {
    lora_opts o = {.rank = 0, .steps = 100, .B = 8, .accum = 1, .log_every = 10, .alpha = 0, .lr = 2e-4f, .min_lr = -1,
                   .clip = 1.0f, .seed = 1337, .val_batches = 10};
    cli_opt opts[] = {
        {"lora", 'i', &o.rank, "the adapters' rank r (required)"},
        {"lora-alpha", 'f', &o.alpha, "alpha: the adapters are scaled by alpha / r (default r: scale 1)"},
        {"lora-targets", 's', &o.targets, "the matrices to adapt: Llama q,k,v,o,gate,up,down; GPT-2 c_attn,c_proj,c_fc; or all (default: all)"},
        {"lora-dropout", 'f', &o.dropout, "dropout probability on each adapter's input (PEFT's lora_dropout; its own mask per adapter, drawn from --seed and the step) (0)"},
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
        {"seed", 'u', &o.seed, "adapter init, dropout (the adapters' and the base config's) and data order (1337)"},
        {"log-every", 'i', &o.log_every, "print the loss every N steps (10)"},
        {"val-batches", 'i', &o.val_batches, "validation batches (10)"},
        {"ckpt-every", 'i', &o.ckpt_every, "write the adapter and " STATE_FILE " every N steps (0: at the end only)"},
        {"resume", 's', &o.resume, "go on from the " STATE_FILE " in this folder (or that file), with the same options, bit for bit as if never stopped"},
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
    if (!(o.dropout >= 0 && o.dropout < 1)) {
        fprintf(stderr, "skiplm train: --lora-dropout %g: give a probability 0 <= p < 1\n", (double)o.dropout);
        return 2;
    }
    if (o.steps < 1 || o.B < 1 || o.accum < 1 || o.T < 0 || o.log_every < 1 || o.ckpt_every < 0) {
        fprintf(stderr, "skiplm train: --steps, --batch, --accum, --log-every must be >= 1, --seq and --ckpt-every >= 0\n");
        return 2;
    }
    if (o.alpha == 0) o.alpha = (float)o.rank;
    if (o.min_lr < 0) o.min_lr = o.lr / 10;
    /* SKIPLM_TEST_FAIL_AT=0:STEP (tests): stop with an error before that step, as a crash would */
    int fail_step = -1;
    const char *fa = getenv("SKIPLM_TEST_FAIL_AT");
    if (fa && !strncmp(fa, "0:", 2)) fail_step = atoi(fa + 2);
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
    int start = 0;
    if (o.resume && (start = load_state(&o, l, L)) < 0) { cli_fail("train"); goto done; }
    /* the adapters as branches on the frozen base: no gradient buffer, no AdamW state for it */
    if (sk_lora_attach(l, m, (int)BT, o.dropout)) { cli_fail("train"); goto done; }
    if (sk_model_reserve(m, o.B, o.T, 1)) { cli_fail("train"); goto done; }
    const double np_base = (double)sk_model_num_params(m), na = (double)sk_lora_num_params(l);
    const double w_bytes = 4.0 * np_base + (q8 ? (double)sk_model_q8_bytes(m) : 0.0);
    const double act = (double)sk_model_activation_bytes(m, o.B, o.T, 1) + (double)sk_lora_workspace_bytes(l);
    printf("lora: rank %d, alpha %g (scale %g), dropout %g, %d matrices, %zu adapter parameters (%.3f%% of the base's %.0f)%s\n",
           o.rank, (double)o.alpha, (double)o.alpha / o.rank, (double)o.dropout, sk_lora_count(l), sk_lora_num_params(l),
           100.0 * na / np_base, np_base, q8 ? ", base in 8 bits (q8_0)" : "");
    printf("lora: allocated: base weights %.0f bytes (%.2f per base parameter), base gradients 0, base AdamW state 0; "
           "adapters with gradients and AdamW state %.0f bytes (16 per adapter parameter); activations and workspaces %.0f "
           "bytes at B=%d, T=%d\n", w_bytes, w_bytes / np_base, 16.0 * na, act, o.B, o.T);
    printf("lora: %.2f bytes per base parameter besides activations; full fine-tuning holds 16 (fp32 weights, gradients, "
           "AdamW m and v)\n", (w_bytes + 16.0 * na) / np_base);
    if (V && !start) printf("lora: val loss before %.6f\n", mean_loss(m, V, o.val_batches, o.B, o.T, x, y));
    if (start) printf("lora: resumed at step %d of %d from %s\n", start, o.steps, o.resume);
    sk_adamw_cfg ac;
    sk_adamw_default(&ac);
    ac.lr = o.lr; ac.weight_decay = o.wd;
    sk_lr_sched sched = {o.lr, o.min_lr, o.warmup, o.steps};
    if (cli_mkdir_p(o.out)) { fprintf(stderr, "skiplm train: cannot create %s\n", o.out); goto done; }
    const double t0 = sk_now();
    for (int step = start + 1; step <= o.steps; step++) {
        if (step == fail_step) {
            fprintf(stderr, "skiplm train: step %d: injected failure (SKIPLM_TEST_FAIL_AT)\n", step);
            goto done;
        }
        sk_lora_zero_grad(l);
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
        const double lr = sk_lr_at(&sched, step - 1);
        const double norm = n_ok ? sk_lora_step(l, &ac, lr, step, o.clip) : NAN;
        if (step % o.log_every == 0 || step == o.steps)
            printf("step %d/%d loss %.6f lr %.3g grad norm %.4f%s (%.1f s)\n", step, o.steps, n_ok ? ls / n_ok : NAN, lr, norm,
                   isfinite(norm) ? "" : " (skipped: no finite gradient)", sk_now() - t0);
        if (step == o.steps || (o.ckpt_every && step % o.ckpt_every == 0)) {
            if (sk_lora_save(l, m, o.out, o.init) || save_state(&o, l, L, step)) { cli_fail("train"); goto done; }
        }
        fflush(stdout);
    }
    if (V) printf("lora: val loss after %.6f\n", mean_loss(m, V, o.val_batches, o.B, o.T, x, y));
    printf("lora: peak RSS %.1f MiB\n", cli_peak_rss_mib());
    printf("wrote %s: adapter_config.json, adapter_model.safetensors (apply with --lora %s), " STATE_FILE "\n", o.out, o.out);
    rc = 0;
done:
    free(x); free(y);
    sk_loader_free(L); sk_loader_free(V);
    cli_docs_free(&td); cli_docs_free(&vd);
    if (l) sk_lora_detach(l, m);
    sk_lora_free(l);
    sk_model_free(m);
    return rc;
}
