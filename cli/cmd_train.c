/* skiplm train: train a model from scratch (or from --init weights), with validation,
 * periodic checkpoints, exact resume, a live progress line and a JSON-lines log.
 * Everything is checked before anything is written: a bad option, a missing or empty
 * shard, a token outside the vocabulary or too little data leaves the output untouched.
 * In order: what the run starts from and the command line (train_opts), the hyperparameters,
 * the data and vocabulary, the config against the file started from, the loaders, the model
 * and trainer (resumed; on the GPU with --device cuda), the output directory; then the
 * training loop (progress line, validation, log.jsonl, checkpoints) and its summary. */
#include "train.h"
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* the gradient hook of SKIPLM_TEST_FAIL_AT (fail_at, train.h) */
static int fail_hook(float *g, size_t n, float *loss, void *ctx) {
    const fail_at *f = ctx;
    if (sk_dist_rank() == f->rank && sk_trainer_step_count(f->tr) + 1 == f->step)
        return sk_error(SK_EINVAL, "step %d: injected failure (SKIPLM_TEST_FAIL_AT)", f->step);
    return SK_OK;
}

/* The training loop's bookkeeping, for the progress line, the messages and the summary. */
typedef struct {
    int tty, print_every;
    double t_start, ema_ms;
    int start_step, last_ckpt;
    float last_val, last_loss;
} loop_state;

/* One step's outcome. */
typedef struct {
    sk_step_info info;
    double ms;
    int do_eval;
    float val;
} step_result;

/* Find the value of --name / --name=value in argv before the full parse. */
static const char *prescan(int argc, char **argv, const char *name) {
    size_t n = strlen(name);
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) || strncmp(argv[i] + 2, name, n)) continue;
        if (argv[i][2 + n] == '=') return argv[i] + 3 + n;
        if (argv[i][2 + n] == 0 && i + 1 < argc) return argv[i + 1];
    }
    return NULL;
}

/* Rewrite the log keeping the complete lines of steps <= last_step (a resumed run
 * continues the log of its checkpoint, without the steps that will be redone). */
static int trim_log(const char *path, int last_step) {
    char *data; size_t len;
    if (!file_exists(path)) return 0;
    if (cli_read_file(path, &data, &len)) return -1;
    char *out = malloc(len + 1);
    size_t o = 0;
    for (char *line = data; *line;) {
        char *nl = strchr(line, '\n');
        if (!nl) break;                        /* a torn last line */
        const char *s = strstr(line, "\"step\":");
        if (s && s < nl && atoi(s + 7) <= last_step) { memcpy(out + o, line, nl - line + 1); o += nl - line + 1; }
        line = nl + 1;
    }
    int rc = sk_write_atomic(path, out, o);
    free(out); free(data);
    return rc ? -1 : 0;
}

static void fmt_time(double s, char *buf, size_t n) {
    if (!(s >= 0) || s > 1e8) { snprintf(buf, n, "?"); return; }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, n, "%lds", t);
}

/* ------------------------------------------------------------------ setup */

/* What the run starts from: the model config is the checkpoint's (--resume) or the weights'
 * (--init) when there are any, so that model options given with them are checked against the
 * file. 0, or the exit status. */
static int open_start(train_run *r, int argc, char **argv) {
    const char *init = prescan(argc, argv, "init");
    r->resume = prescan(argc, argv, "resume");
    sk_config_default(&r->cfg);
    r->cfg.vocab_size = 0;
    if (r->resume && init) { fprintf(stderr, "skiplm train: --resume and --init exclude each other\n"); return 2; }
    if (r->resume) {
        snprintf(r->ckpt_path, sizeof r->ckpt_path, is_dir(r->resume) ? "%s/ckpt.safetensors" : "%s", r->resume);
        if (sk_st_read(r->ckpt_path, &r->ck) || sk_model_load_st(&r->m, &r->ck, r->ckpt_path, NULL))
            return train_fail("cannot resume: %s", sk_last_error());
        if (sk_model_q8(r->m))
            return train_fail("cannot resume: %s holds 8-bit weights (skiplm quantize), not a training checkpoint", r->ckpt_path);
        if (!sk_st_meta(&r->ck, "train.step"))
            return train_fail("cannot resume: %s is a weights file, not a training checkpoint (use --init to start from it)", r->ckpt_path);
        r->cfg = *sk_model_config(r->m);
    } else if (init) {
        const char *nh = prescan(argc, argv, "n_head");       /* for a file that does not say */
        cli_model_opts mo = {.n_head = nh ? atoi(nh) : 0};
        if (cli_load_model(&r->m, init, &mo)) return cli_fail("train");
        r->cfg = *sk_model_config(r->m);
    }
    if (r->m && sk_model_q8(r->m))
        return train_fail("%s holds 8-bit weights (skiplm quantize): training needs the fp32 weights it was quantized from", init);
    return 0;
}

/* The command line into o, and the model options into cfg. cli_parse's status: 0, 1 (--help)
 * or 2. */
static int parse_opts(train_opts *o, int argc, char **argv, sk_config *cfg) {
    *o = (train_opts){.device = "cpu", .print_every = 10, .recompute = -1,
                      .steps = UNSET_I, .B = UNSET_I, .T = UNSET_I, .tps = UNSET_I, .accum = UNSET_I, .warmup = UNSET_I,
                      .decay = UNSET_I, .eval_every = UNSET_I, .eval_batches = UNSET_I, .ckpt_every = UNSET_I,
                      .shuffle = UNSET_I, .lr = NAN, .min_lr = NAN, .wd = NAN, .b1 = NAN, .b2 = NAN, .eps = NAN,
                      .clip = NAN, .seed = UNSET_U};
    cli_opt opts[] = {
        {"data", 's', &o->data, "directory with train.bin + val.bin or train_000000.bin ... + val_000000.bin ..., and the tokenizer (as skiplm prepare writes)"},
        {"train", 's', &o->train, "training shard, or a glob of them in quotes: 'DIR/*train_*.bin' (instead of --data)"},
        {"val", 's', &o->val, "validation shard or glob (instead of --data; optional)"},
        {"tokenizer", 's', &o->tokenizer, "tokenizer: char vocabulary JSON, tokenizer.json or GPT-2 folder (default: found in --data)"},
        {"out", 's', &o->out, "output directory: ckpt.safetensors, log.jsonl (out)"},
        {"resume", 's', &o->resume, "continue from a checkpoint (file or run directory)"},
        {"init", 's', &o->init, "start from these weights instead of a random init"},
        {"lora", 'i', &o->lora, "LoRA fine-tuning of --init's frozen weights with adapters of rank R: see skiplm train --lora 1 --help"},
        {"overwrite", 'b', &o->overwrite, "allow starting a fresh run over an existing checkpoint in --out"},
        {"steps", 'i', &o->steps, "optimizer steps (1000)"},
        {"batch", 'i', &o->B, "sequences per micro-batch (8)"},
        {"seq", 'i', &o->T, "sequence length (block_size)"},
        {"tokens-per-step", 'i', &o->tps, "tokens per optimizer step (all ranks), a multiple of batch*seq*ranks (batch*seq*ranks)"},
        {"grad-accum", 'i', &o->accum, "micro-steps per optimizer step (alternative to --tokens-per-step)"},
        {"lr", 'f', &o->lr, "peak learning rate (6e-4)"},
        {"min-lr", 'f', &o->min_lr, "final learning rate of the cosine decay (lr/10)"},
        {"warmup", 'i', &o->warmup, "linear warmup steps (0)"},
        {"lr-decay-steps", 'i', &o->decay, "cosine decay length in steps (steps)"},
        {"weight-decay", 'f', &o->wd, "AdamW decoupled weight decay on matrices and embeddings (0.1)"},
        {"beta1", 'f', &o->b1, "AdamW beta1 (0.9)"},
        {"beta2", 'f', &o->b2, "AdamW beta2 (0.95)"},
        {"eps", 'f', &o->eps, "AdamW epsilon (1e-8)"},
        {"grad-clip", 'f', &o->clip, "clip the global gradient norm to this (1.0; 0 = off)"},
        {"eval-every", 'i', &o->eval_every, "validation loss every N steps (100; 0 = only at the end)"},
        {"eval-batches", 'i', &o->eval_batches, "validation batches, the same ones each time (10)"},
        {"ckpt-every", 'i', &o->ckpt_every, "checkpoint every N steps (500; 0 = only at the end)"},
        {"seed", 'u', &o->seed, "seed of the init, dropout and data order (1337)"},
        {"shuffle", 'i', &o->shuffle, "1: seeded shuffled windows, 0: sequential windows (1)"},
        {"skip-nonfinite", 'b', &o->skip_nonfinite, "skip the update of a step whose loss or gradient is not finite"},
        {"print-every", 'i', &o->print_every, "progress line every N steps when stderr is not a terminal (10)"},
        {"recompute", 'i', &o->recompute, "activation recomputation per layer: 1 on (less memory, ~1/3 more compute), 0 off, -1 only if needed to fit (-1)"},
        {"zero", 'i', &o->zero, "under mpirun: 1 = shard the AdamW state over the ranks (ZeRO stage 1), 0 = replicate it (0)"},
        {"device", 's', &o->device, "cpu, or cuda in a CUDA build (make cuda: build-cuda/skiplm) (cpu)"},
        {"tf32", 'b', &o->tf32, "with --device cuda: TF32 tensor-core GEMMs (faster, ~1e-3 relative GEMM error)"},
        {"bf16", 'b', &o->bf16, "bf16 mixed precision: every GEMM (and on the CPU the attention's products) on bf16 operands with fp32 accumulation, fp32 master weights, "
                                "gradients and AdamW state (CPU: needs oneDNN, libdnnl-dev; --device cuda: tensor cores). A resumed "
                                "run keeps its checkpoint's precision"},
        {"fp32", 'b', &o->fp32, "with --resume: go on in fp32 from a checkpoint of a --bf16 run"},
        {0},
    };
    char *pos[4]; int np, cfg_given = 0;
    return cli_parse(argc, argv, "train", "--data DIR | --train FILE [--val FILE]  [options]", opts, pos, 0, &np, cfg, &cfg_given);
}

/* The hyperparameters: defaults < checkpoint < command line (which must agree with a
 * checkpoint, checked in match_config); the device. */
static int set_hparams(train_run *r, const train_opts *o) {
    sk_train_cfg *tc = &r->tc;
    sk_train_default(tc);
    if (r->resume) { if (sk_train_cfg_from_st(tc, &r->ck, r->ckpt_path)) return cli_fail("train"); r->ck_tc = *tc; }
#define SETI(v, f) if (o->v != UNSET_I) tc->f = o->v
#define SETF(v, f) if (!isnan(o->v)) tc->f = o->v
    SETI(steps, steps); SETI(B, B); SETI(T, T); SETI(warmup, warmup); SETI(decay, lr_decay_steps);
    SETI(eval_every, eval_every); SETI(eval_batches, eval_batches); SETI(ckpt_every, ckpt_every);
    SETI(shuffle, shuffle);
    SETF(lr, lr); SETF(min_lr, min_lr); SETF(wd, weight_decay); SETF(b1, beta1); SETF(b2, beta2);
    SETF(eps, eps); SETF(clip, grad_clip);
#undef SETI
#undef SETF
    if (o->seed != UNSET_U) tc->seed = o->seed;
    if (o->skip_nonfinite) tc->skip_nonfinite = 1;
    if (o->zero != 0 && o->zero != 1) return train_fail("--zero must be 0 or 1 (got %d)", o->zero);
    if ((r->use_cuda = cli_device("train", o->device)) < 0) return 1;
    if (r->use_cuda && !cli_cuda_built("train")) return 1;
    if (o->tf32 && o->bf16) return train_fail("--tf32 and --bf16 exclude each other");
    if (o->fp32 && o->bf16) return train_fail("--fp32 and --bf16 exclude each other");
    if (o->tf32 && !r->use_cuda) return train_fail("--tf32 needs --device cuda");
    /* the precision: a checkpoint's (train.bf16) unless the command line says otherwise */
    r->bf16_from_ckpt = r->resume && tc->bf16 && !o->bf16 && !o->fp32 && !o->tf32;
    if (o->bf16) tc->bf16 = 1;
    if (o->fp32 || o->tf32) tc->bf16 = 0;
    if (tc->bf16 && !r->use_cuda && !sk_bf16_available())
        return train_fail("--bf16 on the CPU needs oneDNN, and this skiplm was built without it: install libdnnl-dev "
                          "(Debian/Ubuntu; bash scripts/install_deps.sh does) and rebuild with make%s; nothing was written",
                          r->bf16_from_ckpt ? " (the checkpoint was trained with --bf16; --fp32 goes on in fp32)" : "");
    if (o->recompute < -1 || o->recompute > 1) return train_fail("--recompute must be -1, 0 or 1 (got %d)", o->recompute);
    tc->zero = o->zero;
    tc->world_size = r->world;
    /* resuming on another number of ranks: the same global batch, split over these ranks */
    const sk_train_cfg *ck = &r->ck_tc;
    if (r->resume && o->B == UNSET_I && ck->world_size != r->world) {
        long g = (long)ck->B * ck->world_size;
        if (g % r->world)
            return train_fail("cannot resume: the checkpoint's global batch is %d x %d ranks x %d grad-accum; give --batch and "
                        "--grad-accum so that batch x grad-accum x %d ranks = %ld", ck->B, ck->world_size, ck->accum,
                        r->world, g * ck->accum);
        tc->B = (int)(g / r->world);
    }
    if (!r->resume && isnan(o->min_lr)) tc->min_lr = tc->lr / 10;
    if (!r->resume && tc->T == 0) tc->T = r->cfg.block_size;
    return 0;
}

/* The ranges of the hyperparameters; the micro-steps of an optimizer step. */
static int check_hparams(train_run *r, const train_opts *o) {
    sk_train_cfg *tc = &r->tc;
    if (tc->steps < 1) return train_fail("--steps must be >= 1 (got %d)", tc->steps);
    if (tc->B < 1) return train_fail("--batch must be >= 1 (got %d)", tc->B);
    if (tc->T < 1) return train_fail("--seq must be >= 1 (got %d)", tc->T);
    if (tc->T > r->cfg.block_size) return train_fail("--seq %d exceeds the model's block_size %d (give --block_size)", tc->T, r->cfg.block_size);
    if (tc->shuffle != 0 && tc->shuffle != 1) return train_fail("--shuffle must be 0 or 1 (got %d)", tc->shuffle);
    if (!(tc->lr >= 0) || !isfinite(tc->lr)) return train_fail("--lr must be a finite number >= 0");
    if (!(tc->min_lr >= 0) || tc->min_lr > tc->lr) return train_fail("--min-lr must be in [0, lr]");
    if (tc->warmup < 0) return train_fail("--warmup must be >= 0");
    if (tc->lr_decay_steps < 0) return train_fail("--lr-decay-steps must be >= 0");
    if (!(tc->weight_decay >= 0)) return train_fail("--weight-decay must be >= 0");
    if (!(tc->beta1 >= 0 && tc->beta1 < 1) || !(tc->beta2 >= 0 && tc->beta2 < 1)) return train_fail("--beta1 and --beta2 must be in [0, 1)");
    if (!(tc->eps > 0)) return train_fail("--eps must be > 0");
    if (!(tc->grad_clip >= 0)) return train_fail("--grad-clip must be >= 0 (0 = off)");
    if (tc->eval_every < 0 || tc->eval_batches < 0 || tc->ckpt_every < 0) return train_fail("--eval-every, --eval-batches and --ckpt-every must be >= 0");
    if (o->print_every < 1) return train_fail("--print-every must be >= 1");
    const long bt = (long)tc->B * tc->T * r->world;
    if (o->tps != UNSET_I && o->accum != UNSET_I) return train_fail("give --tokens-per-step or --grad-accum, not both");
    if (o->tps != UNSET_I) {
        if (o->tps < 1 || o->tps % bt) return train_fail("--tokens-per-step %d must be a positive multiple of batch*seq*ranks = %ld", o->tps, bt);
        tc->accum = (int)(o->tps / bt);
    } else if (o->accum != UNSET_I) {
        if (o->accum < 1) return train_fail("--grad-accum must be >= 1");
        tc->accum = o->accum;
    } else if (!r->resume) tc->accum = 1;
    if (tc->lr_decay_steps == 0) tc->lr_decay_steps = tc->steps;
    return 0;
}

/* --init weights in the run's config. Starting from weights may change what no weight depends
 * on: the Skip-Layer routing (SLA adds no parameters, so a baseline, e.g. GPT-2's own, can be
 * fine-tuned with SLA), dropout, and for RoPE the context and its frequencies (block_size,
 * rope_theta, rope_scaling: a longer context fine-tuned with position interpolation or a
 * larger base); the rest must match the file. */
static int reconfigure_init(train_run *r) {
    const sk_config *cfg = &r->cfg;
    sk_config w = *sk_model_config(r->m);
    /* a file whose own routing sends heads elsewhere is that SLA model: the command line may
     * not change it (as with --n_head); a baseline's may be added */
    if ((w.routing[0] || (w.n_skip_layer > 0 && w.n_skip_head > 0)) &&
        (w.n_skip_layer != cfg->n_skip_layer || w.n_skip_head != cfg->n_skip_head || strcmp(w.routing, cfg->routing)))
        return train_fail("the --init weights are a Skip-Layer model (n_skip_layer %d, n_skip_head %d%s%s) but the command line "
                    "says n_skip_layer %d, n_skip_head %d%s%s; nothing was written", w.n_skip_layer, w.n_skip_head,
                    w.routing[0] ? ", routing " : "", w.routing, cfg->n_skip_layer, cfg->n_skip_head,
                    cfg->routing[0] ? ", routing " : "", cfg->routing);
    w.n_skip_layer = cfg->n_skip_layer; w.n_skip_head = cfg->n_skip_head; w.dropout = cfg->dropout;
    memcpy(w.routing, cfg->routing, sizeof w.routing);
    if (w.family == SK_LLAMA && !w.sinusoidal && cfg->family == SK_LLAMA && !cfg->sinusoidal) {
        w.block_size = cfg->block_size; w.rope_theta = cfg->rope_theta; w.rope_scaling = cfg->rope_scaling;
        w.rope_factor = cfg->rope_factor; w.rope_low_freq_factor = cfg->rope_low_freq_factor;
        w.rope_high_freq_factor = cfg->rope_high_freq_factor; w.rope_original_ctx = cfg->rope_original_ctx;
    }
    if (sk_config_diff(&w, cfg, "the --init weights", "the command line")) return train_fail("%s; nothing was written", sk_last_error());
    sk_model *m2;
    if (sk_model_new_empty(&m2, cfg)) return cli_fail("train");
    if (sk_model_num_params(m2) != sk_model_num_params(r->m)) { sk_model_free(m2); return train_fail("internal: the routing changed the parameter count"); }
    memcpy(sk_model_params(m2), sk_model_params(r->m), sk_model_num_params(r->m) * sizeof(float));
    sk_model_free(r->m);
    r->m = m2;
    return 0;
}

/* The config and hyperparameters against the file the run starts from: --init weights
 * (reconfigure_init), or a checkpoint, which the command line must not change. */
static int match_config(train_run *r) {
    if (r->m && !r->resume && reconfigure_init(r)) return 1;
    if (r->m && r->resume && sk_config_diff(sk_model_config(r->m), &r->cfg, "the checkpoint", "the command line"))
        return train_fail("%s; nothing was written", sk_last_error());
    if (r->resume && sk_train_cfg_diff(&r->ck_tc, &r->tc, "the checkpoint", "the command line"))
        return train_fail("cannot resume: %s (resuming must not change the training run; nothing was written)", sk_last_error());
    return 0;
}

/* The model (a new one from the seed unless it came from a file), the trainer (with the test's
 * fault injection), the resumed state, and with --device cuda the device model, which holds
 * parameters, gradients, AdamW state and activations from here on (the host model keeps the
 * config and receives the state for each checkpoint). */
static int build_trainer(train_run *r, const train_opts *o) {
    if (!r->m && sk_model_new(&r->m, &r->cfg, r->tc.seed)) return cli_fail("train");
    sk_model_set_recompute(r->m, o->recompute);
    if (r->tc.bf16 && !r->use_cuda && sk_model_set_bf16(r->m, 1)) return cli_fail("train");
    if (sk_trainer_new(&r->tr, r->m, &r->tc, r->Ltr, r->Lval)) return cli_fail("train");
    r->fault = (fail_at){-1, -1, r->tr};
    const char *fa = getenv("SKIPLM_TEST_FAIL_AT");
    if (fa && sscanf(fa, "%d:%d", &r->fault.rank, &r->fault.step) == 2) sk_trainer_set_grad_hook(r->tr, fail_hook, &r->fault);
    if (r->resume && sk_trainer_resume(r->tr, &r->ck, r->ckpt_path))
        return train_fail("cannot resume: %s; nothing was written", sk_last_error());
#ifdef SKIPLM_CUDA
    r->prec = r->tc.bf16 ? SK_CUDA_BF16 : o->tf32 ? SK_CUDA_TF32 : SK_CUDA_FP32;
    if (r->use_cuda) {
        sk_train_backend be;
        if (sk_cuda_select_device() || sk_cuda_device_info(r->devdesc, sizeof r->devdesc)) return cli_fail("train");
        if (sk_cuda_model_new(&r->cm, r->m, r->prec)) return cli_fail("train");
        if (sk_cuda_dist_init(r->cm)) return cli_fail("train");    /* collective: NCCL or the host buffer */
        sk_cuda_train_backend(r->cm, &be);
        if (sk_trainer_set_backend(r->tr, &be)) return cli_fail("train");
        sk_model_set_recompute(r->m, o->recompute);   /* releases the host activations: unused now */
    }
#endif
    sk_st_free(&r->ck);
    memset(&r->ck, 0, sizeof r->ck);
    return 0;
}

/* The output directory: only now is anything written, and only by rank 0 (the directory, the
 * log, the checkpoints); a resumed run's log loses the steps that will be redone. */
static int open_output(train_run *r, const train_opts *o) {
    r->out = o->out;
    if (!r->out) {
        if (r->resume) {
            snprintf(r->outb, sizeof r->outb, "%s", r->ckpt_path);
            char *sl = strrchr(r->outb, '/');
            if (sl) *sl = 0; else snprintf(r->outb, sizeof r->outb, ".");
            r->out = r->outb;
        } else r->out = "out";
    }
    snprintf(r->ckp, sizeof r->ckp, "%s/ckpt.safetensors", r->out);
    snprintf(r->logp, sizeof r->logp, "%s/log.jsonl", r->out);
    if (!r->resume && file_exists(r->ckp) && !o->overwrite)
        return train_fail("%s already exists: continue it with --resume %s, or give another --out (or --overwrite)", r->ckp, r->out);
    if (r->r0p) {
        if (cli_mkdir_p(r->out)) return train_fail("cannot create the output directory %s: %s", r->out, strerror(errno));
        if (r->resume && trim_log(r->logp, sk_trainer_step_count(r->tr))) return cli_fail("train");
        r->log = fopen(r->logp, r->resume ? "a" : "w");
        if (!r->log) return train_fail("cannot write %s: %s", r->logp, strerror(errno));
    }
    /* the setup is done on every rank: from here on, errors are agreed (sk_dist_agree) */
    if (r->world > 1 && sk_dist_agree(SK_OK)) return 1;
    r->err = r->r0p ? stderr : fopen("/dev/null", "w");
    if (!r->err) return train_fail("cannot open /dev/null: %s", strerror(errno));
    return 0;
}

/* Everything before the first step, in order; nothing is written before open_output. */
static int setup(train_run *r, const train_opts *o) {
    return set_hparams(r, o) || check_hparams(r, o) || train_find_data(r, o) || train_load_vocab(r) || match_config(r) ||
           train_open_loaders(r) || build_trainer(r, o) || open_output(r, o);
}

/* ------------------------------------------------------------------ the training loop */

static void print_banner(const train_run *r) {
    const sk_train_cfg *tc = &r->tc;
    const int world = r->world;
    char desc[256];
    sk_config_describe(&r->cfg, desc, sizeof desc);
    fprintf(r->err, "skiplm train: %s, %.2fM parameters\n", desc, sk_model_num_params(r->m) / 1e6);
    if (!r->use_cuda) {
        const double P = 4.0 * (double)sk_model_num_params(r->m);
        fprintf(r->err, "skiplm train: allocated: weights %.0f bytes, gradients %.0f, AdamW m and v %.0f (16 bytes per parameter)%s, "
                "activations %.0f at B=%d, T=%d\n", P, P, 2 * P, sk_model_bf16(r->m) ? " + their bf16 copy" : "",
                (double)sk_model_activation_bytes(r->m, tc->B, tc->T, 1), tc->B, tc->T);
    }
#ifdef SKIPLM_CUDA
    if (r->use_cuda) fprintf(r->err, "skiplm train: device cuda: %s, %s%s\n", r->devdesc, sk_cuda_precision_name(r->prec),
                             world < 2 ? "" : sk_cuda_nccl_enabled() ? "; one GPU per rank, gradients averaged by NCCL"
                                                                     : "; one GPU per rank, gradients averaged through host memory (MPI)");
#endif
    if (!r->use_cuda && tc->bf16) {
        fprintf(r->err, "skiplm train: bf16 mixed precision%s: bf16 GEMMs with fp32 accumulation (%s, %s), bf16 attention "
                "products (%s), fp32 master weights, gradients and AdamW state\n",
                r->bf16_from_ckpt ? " (the checkpoint's; --fp32 goes on in fp32)" : "", sk_bf16_version(), sk_bf16_isa(),
                sk_attn_bf16_native() ? "avx512_bf16" : "fp32 fused multiply-adds");
        if (!sk_bf16_native())
            fprintf(r->err, "skiplm train: note: this CPU has no native bf16 instructions (avx512_bf16 or AMX; oneDNN sees %s): "
                    "--bf16 computes through a fallback here and will be slower than fp32\n", sk_bf16_isa());
    }
    fprintf(r->err, "skiplm train: %d steps of %d x %d x %d = %d tokens, lr %g -> %g (warmup %d, decay %d), wd %g, clip %g, seed %" PRIu64 "%s\n",
            tc->steps, tc->accum, tc->B, tc->T, tc->accum * tc->B * tc->T, tc->lr, tc->min_lr, tc->warmup,
            tc->lr_decay_steps, tc->weight_decay, tc->grad_clip, tc->seed, tc->shuffle ? "" : ", sequential data");
    if (world > 1)
        fprintf(r->err, "skiplm train: %d ranks, %d sequences per rank and micro-step (global batch %ld)%s\n", world, tc->B,
                r->gB * tc->accum, tc->zero ? ", ZeRO-1: AdamW state sharded" : "");
    if (r->resume) fprintf(r->err, "skiplm train: resumed %s at step %d\n", r->ckpt_path, sk_trainer_step_count(r->tr));
}

/* One line of log.jsonl. */
static void log_step(FILE *log, const step_result *sr) {
    const sk_step_info *info = &sr->info;
    const int s = info->step;
    fprintf(log, "{\"step\":%d,\"loss\":%.8g,\"lr\":%.8g,\"grad_norm\":%.8g,\"tokens\":%" PRIu64 ",\"ms\":%.2f",
            s, isfinite(info->loss) ? info->loss : -1.0, info->lr, isfinite(info->grad_norm) ? info->grad_norm : -1.0,
            (uint64_t)s * info->tokens, sr->ms);
    /* no masked-in target in the validation batches (loss masks): null, not a number */
    if (sr->do_eval && isfinite(sr->val)) fprintf(log, ",\"val_loss\":%.8g", sr->val);
    else if (sr->do_eval) fprintf(log, ",\"val_loss\":null");
    if (info->skipped) fprintf(log, ",\"skipped\":1");
    fprintf(log, "}\n");
    fflush(log);
}

/* The progress line: rewritten in place on a terminal, else printed every --print-every
 * steps, at an eval or a skipped step, and at the first and the last step. */
static void progress(const train_run *r, loop_state *ls, const step_result *sr) {
    const sk_step_info *info = &sr->info;
    const int s = info->step, steps = r->tc.steps;
    ls->ema_ms = ls->ema_ms == 0 ? sr->ms : 0.9 * ls->ema_ms + 0.1 * sr->ms;
    double elapsed = sk_now() - ls->t_start;
    double eta = elapsed / (s - ls->start_step) * (steps - s);
    char etab[32];
    fmt_time(eta, etab, sizeof etab);
    char line[256];
    int n = snprintf(line, sizeof line, "step %d/%d  loss %.4f  lr %.2e  norm %.3f  %.0f tok/s  ETA %s",
                     s, steps, info->loss, info->lr, info->grad_norm, info->tokens / (ls->ema_ms / 1e3), etab);
    if (sr->do_eval) n += snprintf(line + n, sizeof line - n, "  val %.4f", sr->val);
    if (info->skipped) n += snprintf(line + n, sizeof line - n, "  SKIPPED (%s; %d so far)",
                                     info->skipped == 2 ? "no masked-in target" : "non-finite", sk_trainer_skipped(r->tr));
    if (ls->tty) fprintf(r->err, "\r\033[K%s%s", line, sr->do_eval || info->skipped ? "\n" : "");
    else if (s % ls->print_every == 0 || sr->do_eval || info->skipped || s == steps || s == ls->start_step + 1)
        fprintf(r->err, "%s\n", line);
}

/* The summary; peak memory and time in collectives are the largest over the ranks (all of
 * them take part). */
static void print_summary(const train_run *r, const loop_state *ls) {
    const sk_train_cfg *tc = &r->tc;
    const int world = r->world;
    FILE *err = r->err;
    double mx[3] = {cli_peak_rss_mib(), sk_dist_comm_seconds(), 0};
#ifdef SKIPLM_CUDA
    size_t dused = 0, dtotal = 0;
    if (r->use_cuda && !sk_cuda_memory(&dused, &dtotal)) mx[2] = dused / 1048576.0;
#endif
    double rss[64];
    int cnt[64], dsp[64], nr = world < 64 ? world : 0;   /* per-rank list for up to 64 ranks */
    for (int i = 0; i < nr; i++) { cnt[i] = 1; dsp[i] = i; }
    if (nr) sk_dist_allgather_f64(&mx[0], rss, cnt, dsp);
    sk_dist_max_f64(mx, 3);
    double el = sk_now() - ls->t_start;
    int done_steps = tc->steps - ls->start_step;
    fprintf(err, "skiplm train: done: %d steps in %.1f s (%.0f tokens/s), final loss %.4f",
            done_steps, el, done_steps * (double)tc->accum * tc->B * tc->T * world / (el > 0 ? el : 1), ls->last_loss);
    if (!isnan(ls->last_val)) fprintf(err, ", val loss %.4f", ls->last_val);
    if (sk_trainer_skipped(r->tr)) fprintf(err, ", %d steps skipped (non-finite, or no masked-in target)", sk_trainer_skipped(r->tr));
    fprintf(err, "\nskiplm train: peak RSS %.1f MiB per rank (max over %d rank%s", mx[0], world, world > 1 ? "s" : "");
    if (world > 1 && nr) {
        fprintf(err, ":");
        for (int i = 0; i < nr; i++) fprintf(err, " %.1f", rss[i]);
    }
    fprintf(err, ")");
    if (world > 1) fprintf(err, ", time in MPI collectives %.2f s (max over ranks, %.1f%%)", mx[1], 100 * mx[1] / (el > 0 ? el : 1));
    if (r->use_cuda) fprintf(err, "\nskiplm train: GPU memory in use %.2f MiB (max over ranks)", mx[2]);
    fprintf(err, "\nskiplm train: checkpoint %s, log %s\n", r->ckp, r->logp);
}

/* Steps until --steps: each with its validation loss when due, its line of log.jsonl, the
 * progress line and a checkpoint when due; then the summary. An error in a step, an eval or
 * a save is agreed among the ranks (*agreed): rank 0 says it. */
static int train_loop(train_run *r, const train_opts *o, int *agreed) {
    const sk_train_cfg *tc = &r->tc;
    FILE *err = r->err;
    print_banner(r);
    /* absolute paths in the checkpoint, so that sample/resume work from any directory */
    char tok_abs[PATH_MAX];
    const char *tok_path = r->tok_path, *train_path = r->tr_rec, *val_path = r->val_path ? r->va_rec : NULL;
    if (tok_path && realpath(tok_path, tok_abs)) tok_path = tok_abs;
    const char *meta[] = {"tokenizer", tok_path, "tokenizer_kind", r->tok ? sk_tok_kind(r->tok) : NULL,
                          "train.data_train", train_path, "train.data_val", val_path, NULL, NULL};
    loop_state ls = {.tty = r->r0p && isatty(2), .print_every = o->print_every, .last_val = NAN, .last_loss = NAN};
    ls.t_start = sk_now();
    ls.start_step = ls.last_ckpt = sk_trainer_step_count(r->tr);
    while (sk_trainer_step_count(r->tr) < tc->steps) {
        step_result sr = {.val = NAN};
        double t0 = sk_now();
        if (sk_trainer_step(r->tr, &sr.info)) {
            *agreed = 1;
            if (ls.tty) fputc('\n', err);
            fprintf(err, "skiplm train: stopped: %s\n", sk_last_error());
            fprintf(err, "skiplm train: the last good checkpoint is %s (step %d)%s\n", r->ckp, ls.last_ckpt,
                    ls.last_ckpt == 0 && !r->resume ? " -- none was written yet" : "; continue with --resume, adding "
                    "--skip-nonfinite to skip such steps");
            return 1;
        }
        sr.ms = (sk_now() - t0) * 1e3;
        const int s = sr.info.step;
        ls.last_loss = sr.info.loss;
        sr.do_eval = r->Lval && tc->eval_batches > 0 && ((tc->eval_every > 0 && s % tc->eval_every == 0) || s == tc->steps);
        if (sr.do_eval && sk_trainer_eval(r->tr, &sr.val)) { *agreed = 1; fprintf(err, "skiplm train: %s\n", sk_last_error()); return 1; }
        if (sr.do_eval) ls.last_val = sr.val;
        if (r->log) log_step(r->log, &sr);
        progress(r, &ls, &sr);
        if ((tc->ckpt_every > 0 && s % tc->ckpt_every == 0) || s == tc->steps) {
            if (sk_trainer_save(r->tr, r->ckp, meta)) {
                *agreed = 1;
                if (ls.tty) fputc('\n', err);
                fprintf(err, "skiplm train: %s\nskiplm train: stopped at step %d; the previous checkpoint (step %d) is intact\n",
                        sk_last_error(), s, ls.last_ckpt);
                return 1;
            }
            ls.last_ckpt = s;
        }
    }
    if (ls.tty) fputc('\n', err);
    print_summary(r, &ls);
    return 0;
}

static void run_free(train_run *r) {
    if (r->log) fclose(r->log);
    if (r->err && r->err != stderr) fclose(r->err);
    sk_trainer_free(r->tr);
#ifdef SKIPLM_CUDA
    sk_cuda_model_free(r->cm);
#endif
    sk_loader_free(r->Ltr); sk_loader_free(r->Lval);
    cli_docs_free(&r->trs); cli_docs_free(&r->vas);
    sk_tok_free(r->tok);
    sk_model_free(r->m);
    sk_st_free(&r->ck);
}

static int train_main(int argc, char **argv, int *agreed) {
    train_run r;
    memset(&r, 0, sizeof r);
    r.rank = sk_dist_rank(); r.world = sk_dist_size(); r.r0p = r.rank == 0;
    train_opts o;
    int rc = open_start(&r, argc, argv);
    if (!rc) {
        rc = parse_opts(&o, argc, argv, &r.cfg);
        if (rc == 1) rc = 0;                              /* --help */
        else if (rc == 0) rc = setup(&r, &o) || train_loop(&r, &o, agreed);
    }
    run_free(&r);
    return rc;
}

/* Under mpirun (an MPI build) every rank runs this; errors inside the training loop are
 * agreed among the ranks (rank 0 prints them, all exit 1), any other error on a rank is
 * printed there and stops all ranks (MPI_Abort). */
int cmd_train(int argc, char **argv) {
    for (int i = 1; i < argc; i++)                 /* LoRA fine-tuning: its own loop (cli/train_lora.c) */
        if (!strcmp(argv[i], "--lora") || !strncmp(argv[i], "--lora=", 7)) return cmd_train_lora(argc, argv);
    if (sk_dist_init()) return cli_fail("train");
    int agreed = 0;
    int rc = train_main(argc, argv, &agreed);
    if (rc && sk_dist_size() > 1 && !agreed) sk_dist_abort(rc);
    sk_dist_finalize();
    return rc;
}
