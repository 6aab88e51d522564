/* skiplm train: train a model from scratch (or from --init weights), with validation,
 * periodic checkpoints, exact resume, a live progress line and a JSON-lines log.
 * Everything is checked before anything is written: a bad option, a missing or empty
 * shard, a token outside the vocabulary or too little data leaves the output untouched. */
#include "cli.h"
#ifdef SKIPLM_CUDA
#include "skiplm_cuda.h"
#endif
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define UNSET_I INT_MIN
#define UNSET_U UINT64_MAX

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int file_exists(const char *p) { struct stat s; return stat(p, &s) == 0; }
static int is_dir(const char *p) { struct stat s; return stat(p, &s) == 0 && S_ISDIR(s.st_mode); }

static int mkdir_p(const char *dir) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') { *p = 0; if (mkdir(buf, 0777) && errno != EEXIST) return -1; *p = '/'; }
    if (mkdir(buf, 0777) && errno != EEXIST) return -1;
    return is_dir(buf) ? 0 : -1;
}

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

/* Test-only fault injection: SKIPLM_TEST_FAIL_AT=RANK:STEP makes that rank's gradient hook
 * fail at that step, to check that an error on one rank stops all of them. */
typedef struct { int rank, step; const sk_trainer *tr; } fail_at;
static int fail_hook(float *g, size_t n, float *loss, void *ctx) {
    const fail_at *f = ctx;
    if (sk_dist_rank() == f->rank && sk_trainer_step_count(f->tr) + 1 == f->step)
        return sk_error(SK_EINVAL, "step %d: injected failure (SKIPLM_TEST_FAIL_AT)", f->step);
    return SK_OK;
}

static int train_main(int argc, char **argv, int *agreed);

/* Under mpirun (an MPI build) every rank runs this; errors inside the training loop are
 * agreed among the ranks (rank 0 prints them, all exit 1), any other error on a rank is
 * printed there and stops all ranks (MPI_Abort). */
int cmd_train(int argc, char **argv) {
    if (sk_dist_init()) return cli_fail("train");
    int agreed = 0;
    int rc = train_main(argc, argv, &agreed);
    if (rc && sk_dist_size() > 1 && !agreed) sk_dist_abort(rc);
    sk_dist_finalize();
    return rc;
}

static int train_main(int argc, char **argv, int *agreed) {
    const int rank = sk_dist_rank(), world = sk_dist_size(), r0p = rank == 0;
    const char *data = NULL, *train_path = NULL, *val_path = NULL, *tok_path = NULL, *out = NULL;
    const char *resume = NULL, *init = NULL, *device = "cpu";
    int tf32 = 0, bf16 = 0;
    int steps = UNSET_I, B = UNSET_I, T = UNSET_I, tps = UNSET_I, accum = UNSET_I, warmup = UNSET_I,
        decay = UNSET_I, eval_every = UNSET_I, eval_batches = UNSET_I, ckpt_every = UNSET_I,
        shuffle = UNSET_I, skip_nonfinite = 0, print_every = 10, overwrite = 0, zero = 0, recompute = -1;
    float lr = NAN, min_lr = NAN, wd = NAN, b1 = NAN, b2 = NAN, eps = NAN, clip = NAN;
    uint64_t seed = UNSET_U;
    cli_opt opts[] = {
        {"data", 's', &data, "directory with train.bin, val.bin and the tokenizer (as skiplm prepare writes)"},
        {"train", 's', &train_path, "training shard (instead of --data)"},
        {"val", 's', &val_path, "validation shard (instead of --data; optional)"},
        {"tokenizer", 's', &tok_path, "tokenizer: char vocabulary JSON, tokenizer.json or GPT-2 folder (default: found in --data)"},
        {"out", 's', &out, "output directory: ckpt.safetensors, log.jsonl (out)"},
        {"resume", 's', &resume, "continue from a checkpoint (file or run directory)"},
        {"init", 's', &init, "start from these weights instead of a random init"},
        {"overwrite", 'b', &overwrite, "allow starting a fresh run over an existing checkpoint in --out"},
        {"steps", 'i', &steps, "optimizer steps (1000)"},
        {"batch", 'i', &B, "sequences per micro-batch (8)"},
        {"seq", 'i', &T, "sequence length (block_size)"},
        {"tokens-per-step", 'i', &tps, "tokens per optimizer step (all ranks), a multiple of batch*seq*ranks (batch*seq*ranks)"},
        {"grad-accum", 'i', &accum, "micro-steps per optimizer step (alternative to --tokens-per-step)"},
        {"lr", 'f', &lr, "peak learning rate (6e-4)"},
        {"min-lr", 'f', &min_lr, "final learning rate of the cosine decay (lr/10)"},
        {"warmup", 'i', &warmup, "linear warmup steps (0)"},
        {"lr-decay-steps", 'i', &decay, "cosine decay length in steps (steps)"},
        {"weight-decay", 'f', &wd, "AdamW decoupled weight decay on matrices and embeddings (0.1)"},
        {"beta1", 'f', &b1, "AdamW beta1 (0.9)"},
        {"beta2", 'f', &b2, "AdamW beta2 (0.95)"},
        {"eps", 'f', &eps, "AdamW epsilon (1e-8)"},
        {"grad-clip", 'f', &clip, "clip the global gradient norm to this (1.0; 0 = off)"},
        {"eval-every", 'i', &eval_every, "validation loss every N steps (100; 0 = only at the end)"},
        {"eval-batches", 'i', &eval_batches, "validation batches, the same ones each time (10)"},
        {"ckpt-every", 'i', &ckpt_every, "checkpoint every N steps (500; 0 = only at the end)"},
        {"seed", 'u', &seed, "seed of the init, dropout and data order (1337)"},
        {"shuffle", 'i', &shuffle, "1: seeded shuffled windows, 0: sequential windows (1)"},
        {"skip-nonfinite", 'b', &skip_nonfinite, "skip the update of a step whose loss or gradient is not finite"},
        {"print-every", 'i', &print_every, "progress line every N steps when stderr is not a terminal (10)"},
        {"recompute", 'i', &recompute, "activation recomputation per layer: 1 on (less memory, ~1/3 more compute), 0 off, -1 only if needed to fit (-1)"},
        {"zero", 'i', &zero, "under mpirun: 1 = shard the AdamW state over the ranks (ZeRO stage 1), 0 = replicate it (0)"},
        {"device", 's', &device, "cpu, or cuda in a CUDA build (make cuda: build-cuda/skiplm) (cpu)"},
        {"tf32", 'b', &tf32, "with --device cuda: TF32 tensor-core GEMMs (faster, ~1e-3 relative GEMM error)"},
        {"bf16", 'b', &bf16, "with --device cuda: bf16 mixed precision (bf16 GEMMs, fp32 master weights and AdamW state)"},
        {0},
    };
    const char *syn = "--data DIR | --train FILE [--val FILE]  [options]";
    /* The model config starts from the checkpoint / init weights when there are any, so
     * that model options given with them are checked against the file. */
    const char *r0 = prescan(argc, argv, "resume"), *i0 = prescan(argc, argv, "init");
    char ckpt_path[4096] = "";
    sk_safetensors ck = {0};
    sk_model *m = NULL;
    sk_config cfg;
    sk_config_default(&cfg);
    cfg.vocab_size = 0;
    if (r0 && i0) { fprintf(stderr, "skiplm train: --resume and --init exclude each other\n"); return 2; }
    if (r0) {
        snprintf(ckpt_path, sizeof ckpt_path, is_dir(r0) ? "%s/ckpt.safetensors" : "%s", r0);
        if (sk_st_read(ckpt_path, &ck) || sk_model_load_st(&m, &ck, ckpt_path, NULL)) {
            fprintf(stderr, "skiplm train: cannot resume: %s\n", sk_last_error());
            sk_st_free(&ck);
            return 1;
        }
        if (!sk_st_meta(&ck, "train.step")) {
            fprintf(stderr, "skiplm train: cannot resume: %s is a weights file, not a training checkpoint "
                    "(use --init to start from it)\n", ckpt_path);
            sk_st_free(&ck); sk_model_free(m);
            return 1;
        }
        cfg = *sk_model_config(m);
    } else if (i0) {
        const char *nh = prescan(argc, argv, "n_head");       /* for a file that does not say */
        if (cli_load_model(&m, i0, nh ? atoi(nh) : 0)) return cli_fail("train");
        cfg = *sk_model_config(m);
    }
    char *pos[4]; int np, cfg_given = 0;
    int rc = cli_parse(argc, argv, "train", syn, opts, pos, 0, &np, &cfg, &cfg_given);
    if (rc) { sk_st_free(&ck); sk_model_free(m); return rc == 1 ? 0 : rc; }
    int status = 1;
    sk_tokenizer *tok = NULL;
    sk_loader *Ltr = NULL, *Lval = NULL;
    sk_trainer *tr = NULL;
#ifdef SKIPLM_CUDA
    sk_cuda_model *cm = NULL;
#endif
    FILE *log = NULL, *err = NULL;
#define FAIL(...) do { fprintf(stderr, "skiplm train: " __VA_ARGS__); fputc('\n', stderr); goto done; } while (0)
#define FAIL_LIB() do { cli_fail("train"); goto done; } while (0)

    /* ---- hyperparameters: defaults < checkpoint < command line (which must agree with a checkpoint) */
    sk_train_cfg tc, ck_tc;
    sk_train_default(&tc);
    if (r0) { if (sk_train_cfg_from_st(&tc, &ck, ckpt_path)) FAIL_LIB(); ck_tc = tc; }
    int min_lr_given = !isnan(min_lr);
#define SETI(v, f) if (v != UNSET_I) tc.f = v
#define SETF(v, f) if (!isnan(v)) tc.f = v
    SETI(steps, steps); SETI(B, B); SETI(T, T); SETI(warmup, warmup); SETI(decay, lr_decay_steps);
    SETI(eval_every, eval_every); SETI(eval_batches, eval_batches); SETI(ckpt_every, ckpt_every);
    SETI(shuffle, shuffle);
    SETF(lr, lr); SETF(min_lr, min_lr); SETF(wd, weight_decay); SETF(b1, beta1); SETF(b2, beta2);
    SETF(eps, eps); SETF(clip, grad_clip);
    if (seed != UNSET_U) tc.seed = seed;
    if (skip_nonfinite) tc.skip_nonfinite = 1;
    if (zero != 0 && zero != 1) FAIL("--zero must be 0 or 1 (got %d)", zero);
    const int use_cuda = !strcmp(device, "cuda") || !strcmp(device, "gpu");
    if (!use_cuda && strcmp(device, "cpu")) FAIL("--device must be cpu or cuda (got '%s')", device);
#ifndef SKIPLM_CUDA
    if (use_cuda) FAIL("--device cuda: this skiplm was built without CUDA (build it with `make cuda`, then run build-cuda/skiplm)");
#endif
    if ((tf32 || bf16) && !use_cuda) FAIL("--%s needs --device cuda", tf32 ? "tf32" : "bf16");
    if (tf32 && bf16) FAIL("--tf32 and --bf16 exclude each other");
    if (recompute < -1 || recompute > 1) FAIL("--recompute must be -1, 0 or 1 (got %d)", recompute);
    tc.zero = zero;
    tc.world_size = world;
    /* resuming on another number of ranks: the same global batch, split over these ranks */
    if (r0 && B == UNSET_I && ck_tc.world_size != world) {
        long g = (long)ck_tc.B * ck_tc.world_size;
        if (g % world)
            FAIL("cannot resume: the checkpoint's global batch is %d x %d ranks x %d grad-accum; give --batch and "
                 "--grad-accum so that batch x grad-accum x %d ranks = %ld", ck_tc.B, ck_tc.world_size, ck_tc.accum,
                 world, g * ck_tc.accum);
        tc.B = (int)(g / world);
    }
    if (!r0 && !min_lr_given) tc.min_lr = tc.lr / 10;
    if (!r0 && tc.T == 0) tc.T = cfg.block_size;
    /* option ranges */
    if (tc.steps < 1) FAIL("--steps must be >= 1 (got %d)", tc.steps);
    if (tc.B < 1) FAIL("--batch must be >= 1 (got %d)", tc.B);
    if (tc.T < 1) FAIL("--seq must be >= 1 (got %d)", tc.T);
    if (tc.T > cfg.block_size) FAIL("--seq %d exceeds the model's block_size %d (give --block_size)", tc.T, cfg.block_size);
    if (tc.shuffle != 0 && tc.shuffle != 1) FAIL("--shuffle must be 0 or 1 (got %d)", tc.shuffle);
    if (!(tc.lr >= 0) || !isfinite(tc.lr)) FAIL("--lr must be a finite number >= 0");
    if (!(tc.min_lr >= 0) || tc.min_lr > tc.lr) FAIL("--min-lr must be in [0, lr]");
    if (tc.warmup < 0) FAIL("--warmup must be >= 0");
    if (tc.lr_decay_steps < 0) FAIL("--lr-decay-steps must be >= 0");
    if (!(tc.weight_decay >= 0)) FAIL("--weight-decay must be >= 0");
    if (!(tc.beta1 >= 0 && tc.beta1 < 1) || !(tc.beta2 >= 0 && tc.beta2 < 1)) FAIL("--beta1 and --beta2 must be in [0, 1)");
    if (!(tc.eps > 0)) FAIL("--eps must be > 0");
    if (!(tc.grad_clip >= 0)) FAIL("--grad-clip must be >= 0 (0 = off)");
    if (tc.eval_every < 0 || tc.eval_batches < 0 || tc.ckpt_every < 0) FAIL("--eval-every, --eval-batches and --ckpt-every must be >= 0");
    if (print_every < 1) FAIL("--print-every must be >= 1");
    {
        long bt = (long)tc.B * tc.T * world;
        if (tps != UNSET_I && accum != UNSET_I) FAIL("give --tokens-per-step or --grad-accum, not both");
        if (tps != UNSET_I) {
            if (tps < 1 || tps % bt) FAIL("--tokens-per-step %d must be a positive multiple of batch*seq*ranks = %ld", tps, bt);
            tc.accum = (int)(tps / bt);
        } else if (accum != UNSET_I) {
            if (accum < 1) FAIL("--grad-accum must be >= 1");
            tc.accum = accum;
        } else if (!r0) tc.accum = 1;
    }
    if (tc.lr_decay_steps == 0) tc.lr_decay_steps = tc.steps;

    /* ---- data and tokenizer */
    char trb[4096], vab[4096], tokb[4096];
    if (data) {
        if (train_path) FAIL("give --data DIR or --train FILE, not both");
        if (!is_dir(data)) FAIL("--data %s: no such directory", data);
        snprintf(trb, sizeof trb, "%s/train.bin", data); train_path = trb;
        snprintf(vab, sizeof vab, "%s/val.bin", data);
        if (!val_path) val_path = vab;
        if (!file_exists(train_path)) FAIL("%s is missing (run skiplm prepare first)", train_path);
        if (!file_exists(val_path)) FAIL("%s is missing (run skiplm prepare first)", val_path);
        if (!tok_path) {
            const char *cand[] = {"tokenizer.json", "vocab.json", "encoder.json"};
            for (int i = 0; i < 3 && !tok_path; i++) {
                snprintf(tokb, sizeof tokb, "%s/%s", data, cand[i]);
                if (file_exists(tokb)) {
                    if (i == 2) snprintf(tokb, sizeof tokb, "%s", data);   /* GPT-2: the directory */
                    tok_path = tokb;
                }
            }
        }
    } else if (!train_path && !r0) {
        FAIL("give --data DIR (train.bin, val.bin) or --train FILE");
    }
    if (!train_path && r0) {
        const char *d = sk_st_meta(&ck, "train.data_train");
        if (!d) FAIL("give the training data (--data or --train) to resume");
        snprintf(trb, sizeof trb, "%s", d); train_path = trb;
        const char *v = sk_st_meta(&ck, "train.data_val");
        if (v && !val_path) { snprintf(vab, sizeof vab, "%s", v); val_path = vab; }
        const char *t = sk_st_meta(&ck, "tokenizer");
        if (t && !tok_path) { snprintf(tokb, sizeof tokb, "%s", t); tok_path = tokb; }
    }
    if (tok_path && sk_tok_load(&tok, tok_path)) FAIL_LIB();
    /* vocabulary: the model's, else the tokenizer's, else the data's largest id + 1 */
    if (cfg.vocab_size <= 0) {
        if (tok) cfg.vocab_size = sk_tok_vocab_size(tok);
        else {
            sk_shard s;
            int maxid = -1;
            const char *ps[2] = {train_path, val_path};
            for (int i = 0; i < 2; i++) {
                if (!ps[i]) continue;
                if (sk_shard_open(&s, ps[i])) FAIL_LIB();
                for (size_t k = 0; k < s.n; k++) if (s.tokens[k] > maxid) maxid = s.tokens[k];
                sk_shard_close(&s);
            }
            cfg.vocab_size = maxid + 1;
            fprintf(stderr, "skiplm train: no tokenizer given: vocab_size %d from the data (largest token id + 1)\n", cfg.vocab_size);
        }
    } else if (tok && sk_tok_vocab_size(tok) > cfg.vocab_size) {
        FAIL("the tokenizer has %d tokens but the model's vocab_size is %d", sk_tok_vocab_size(tok), cfg.vocab_size);
    }
    if (sk_config_check(&cfg)) FAIL_LIB();
    if (m && !r0) {
        /* starting from weights may change what no weight depends on: the Skip-Layer routing
         * (SLA adds no parameters, so a baseline, e.g. GPT-2's own, can be fine-tuned with
         * SLA), dropout, and for RoPE the context and its frequencies (block_size, rope_theta,
         * rope_scaling: a longer context fine-tuned with position interpolation or a larger
         * base); the rest must match the file */
        sk_config w = *sk_model_config(m);
        w.n_skip_layer = cfg.n_skip_layer; w.n_skip_head = cfg.n_skip_head; w.dropout = cfg.dropout;
        memcpy(w.routing, cfg.routing, sizeof w.routing);
        if (w.family == SK_LLAMA && !w.sinusoidal && cfg.family == SK_LLAMA && !cfg.sinusoidal) {
            w.block_size = cfg.block_size; w.rope_theta = cfg.rope_theta; w.rope_scaling = cfg.rope_scaling;
            w.rope_factor = cfg.rope_factor; w.rope_low_freq_factor = cfg.rope_low_freq_factor;
            w.rope_high_freq_factor = cfg.rope_high_freq_factor; w.rope_original_ctx = cfg.rope_original_ctx;
        }
        if (sk_config_diff(&w, &cfg, "the --init weights", "the command line")) {
            fprintf(stderr, "skiplm train: %s; nothing was written\n", sk_last_error());
            goto done;
        }
        sk_model *m2;
        if (sk_model_new_empty(&m2, &cfg)) FAIL_LIB();
        if (sk_model_num_params(m2) != sk_model_num_params(m)) { sk_model_free(m2); FAIL("internal: the routing changed the parameter count"); }
        memcpy(sk_model_params(m2), sk_model_params(m), sk_model_num_params(m) * sizeof(float));
        sk_model_free(m);
        m = m2;
    }
    if (m && r0 && sk_config_diff(sk_model_config(m), &cfg, "the checkpoint", "the command line")) {
        fprintf(stderr, "skiplm train: %s; nothing was written\n", sk_last_error());
        goto done;
    }
    if (r0 && sk_train_cfg_diff(&ck_tc, &tc, "the checkpoint", "the command line")) {
        fprintf(stderr, "skiplm train: cannot resume: %s (resuming must not change the training run; "
                "nothing was written)\n", sk_last_error());
        goto done;
    }
    sk_loader_cfg lc = {.B = tc.B, .T = tc.T, .seed = tc.seed, .shuffle = tc.shuffle, .vocab_size = cfg.vocab_size,
                        .rank = rank, .world_size = world};
    const long gB = (long)tc.B * world;    /* sequences per micro-step over all ranks */
    if (sk_loader_open(&Ltr, &train_path, 1, &lc)) FAIL_LIB();
    if (sk_loader_n_windows(Ltr) < (uint64_t)gB)
        FAIL("%s holds %" PRIu64 " windows of %d tokens, fewer than one batch of %ld (lower --batch or --seq)",
             train_path, sk_loader_n_windows(Ltr), tc.T + 1, gB);
    if (val_path) {
        sk_loader_cfg vc = lc;
        vc.shuffle = 0;
        if (sk_loader_open(&Lval, &val_path, 1, &vc)) FAIL_LIB();
        uint64_t nw = sk_loader_n_windows(Lval);
        if (nw < (uint64_t)gB)
            FAIL("%s holds %" PRIu64 " windows of %d tokens, fewer than one batch of %ld (lower --batch or --seq)",
                 val_path, nw, tc.T + 1, gB);
        if (nw / gB < (uint64_t)tc.eval_batches && r0p)
            fprintf(stderr, "skiplm train: note: %s has %" PRIu64 " batches, fewer than --eval-batches %d: using them all\n",
                    val_path, nw / gB, tc.eval_batches);
    }

    /* ---- model, trainer, resume */
    if (!m && sk_model_new(&m, &cfg, tc.seed)) FAIL_LIB();
    sk_model_set_recompute(m, recompute);
    if (sk_trainer_new(&tr, m, &tc, Ltr, Lval)) FAIL_LIB();
    fail_at fault = {-1, -1, tr};
    const char *fa = getenv("SKIPLM_TEST_FAIL_AT");
    if (fa && sscanf(fa, "%d:%d", &fault.rank, &fault.step) == 2) sk_trainer_set_grad_hook(tr, fail_hook, &fault);
    if (r0 && sk_trainer_resume(tr, &ck, ckpt_path)) {
        fprintf(stderr, "skiplm train: cannot resume: %s; nothing was written\n", sk_last_error());
        goto done;
    }
#ifdef SKIPLM_CUDA
    char devdesc[256] = "cpu";
    const sk_cuda_precision prec = bf16 ? SK_CUDA_BF16 : tf32 ? SK_CUDA_TF32 : SK_CUDA_FP32;
    if (use_cuda) {
        /* the device holds parameters, gradients, AdamW state and activations from here on;
         * the host model keeps the config and receives the state for each checkpoint */
        sk_train_backend be;
        if (sk_cuda_select_device() || sk_cuda_device_info(devdesc, sizeof devdesc)) FAIL_LIB();
        if (sk_cuda_model_new(&cm, m, prec)) FAIL_LIB();
        if (sk_cuda_dist_init(cm)) FAIL_LIB();    /* collective: NCCL or the host buffer */
        sk_cuda_train_backend(cm, &be);
        if (sk_trainer_set_backend(tr, &be)) FAIL_LIB();
        sk_model_set_recompute(m, recompute);   /* releases the host activations: unused now */
    }
#endif
    sk_st_free(&ck);
    memset(&ck, 0, sizeof ck);

    /* ---- output directory: only now is anything written */
    char outb[4096], ckp[4200], logp[4200];
    if (!out) {
        if (r0) {
            snprintf(outb, sizeof outb, "%s", ckpt_path);
            char *sl = strrchr(outb, '/');
            if (sl) *sl = 0; else snprintf(outb, sizeof outb, ".");
            out = outb;
        } else out = "out";
    }
    snprintf(ckp, sizeof ckp, "%s/ckpt.safetensors", out);
    snprintf(logp, sizeof logp, "%s/log.jsonl", out);
    if (!r0 && file_exists(ckp) && !overwrite)
        FAIL("%s already exists: continue it with --resume %s, or give another --out (or --overwrite)", ckp, out);
    /* only rank 0 writes (the directory, the log, the checkpoints) and prints */
    if (r0p) {
        if (mkdir_p(out)) FAIL("cannot create the output directory %s: %s", out, strerror(errno));
        if (r0) { if (trim_log(logp, sk_trainer_step_count(tr))) FAIL_LIB(); }
        log = fopen(logp, r0 ? "a" : "w");
        if (!log) FAIL("cannot write %s: %s", logp, strerror(errno));
    }
    /* the setup is done on every rank: from here on, errors are agreed (sk_dist_agree) */
    if (world > 1 && sk_dist_agree(SK_OK)) goto done;
    err = r0p ? stderr : fopen("/dev/null", "w");
    if (!err) FAIL("cannot open /dev/null: %s", strerror(errno));

    char desc[256];
    sk_config_describe(&cfg, desc, sizeof desc);
    fprintf(err, "skiplm train: %s, %.2fM parameters\n", desc, sk_model_num_params(m) / 1e6);
#ifdef SKIPLM_CUDA
    if (use_cuda) fprintf(err, "skiplm train: device cuda: %s, %s%s\n", devdesc, sk_cuda_precision_name(prec),
                          world < 2 ? "" : sk_cuda_nccl_enabled() ? "; one GPU per rank, gradients averaged by NCCL"
                                                                  : "; one GPU per rank, gradients averaged through host memory (MPI)");
#endif
    fprintf(err, "skiplm train: %d steps of %d x %d x %d = %d tokens, lr %g -> %g (warmup %d, decay %d), wd %g, clip %g, seed %" PRIu64 "%s\n",
            tc.steps, tc.accum, tc.B, tc.T, tc.accum * tc.B * tc.T, tc.lr, tc.min_lr, tc.warmup,
            tc.lr_decay_steps, tc.weight_decay, tc.grad_clip, tc.seed, tc.shuffle ? "" : ", sequential data");
    if (world > 1)
        fprintf(err, "skiplm train: %d ranks, %d sequences per rank and micro-step (global batch %ld)%s\n", world, tc.B,
                gB * tc.accum, tc.zero ? ", ZeRO-1: AdamW state sharded" : "");
    if (r0) fprintf(err, "skiplm train: resumed %s at step %d\n", ckpt_path, sk_trainer_step_count(tr));

    /* absolute paths in the checkpoint, so that sample/resume work from any directory */
    char tok_abs[PATH_MAX], tr_abs[PATH_MAX], va_abs[PATH_MAX];
    if (tok_path && realpath(tok_path, tok_abs)) tok_path = tok_abs;
    if (realpath(train_path, tr_abs)) train_path = tr_abs;
    if (val_path && realpath(val_path, va_abs)) val_path = va_abs;
    const char *meta[] = {"tokenizer", tok_path, "tokenizer_kind", tok ? sk_tok_kind(tok) : NULL,
                          "train.data_train", train_path, "train.data_val", val_path, NULL, NULL};
    int tty = r0p && isatty(2);
    double t_start = now_s(), ema_ms = 0;
    int start_step = sk_trainer_step_count(tr), last_ckpt = start_step;
    float last_val = NAN, last_loss = NAN;
    while (sk_trainer_step_count(tr) < tc.steps) {
        double t0 = now_s();
        sk_step_info info;
        if (sk_trainer_step(tr, &info)) {
            *agreed = 1;
            if (tty) fputc('\n', err);
            fprintf(err, "skiplm train: stopped: %s\n", sk_last_error());
            fprintf(err, "skiplm train: the last good checkpoint is %s (step %d)%s\n", ckp, last_ckpt,
                    last_ckpt == 0 && !r0 ? " -- none was written yet" : "; continue with --resume, adding "
                    "--skip-nonfinite to skip such steps");
            goto done;
        }
        double ms = (now_s() - t0) * 1e3;
        int s = info.step;
        last_loss = info.loss;
        float val = NAN;
        int do_eval = Lval && tc.eval_batches > 0 && ((tc.eval_every > 0 && s % tc.eval_every == 0) || s == tc.steps);
        if (do_eval && sk_trainer_eval(tr, &val)) { *agreed = 1; fprintf(err, "skiplm train: %s\n", sk_last_error()); goto done; }
        if (do_eval) last_val = val;
        if (log) {
        fprintf(log, "{\"step\":%d,\"loss\":%.8g,\"lr\":%.8g,\"grad_norm\":%.8g,\"tokens\":%" PRIu64 ",\"ms\":%.2f",
                s, isfinite(info.loss) ? info.loss : -1.0, info.lr, isfinite(info.grad_norm) ? info.grad_norm : -1.0,
                (uint64_t)s * info.tokens, ms);
        if (do_eval) fprintf(log, ",\"val_loss\":%.8g", val);
        if (info.skipped) fprintf(log, ",\"skipped\":1");
        fprintf(log, "}\n");
        fflush(log);
        }
        /* progress */
        ema_ms = ema_ms == 0 ? ms : 0.9 * ema_ms + 0.1 * ms;
        double elapsed = now_s() - t_start;
        double eta = elapsed / (s - start_step) * (tc.steps - s);
        char etab[32];
        fmt_time(eta, etab, sizeof etab);
        char line[256];
        int n = snprintf(line, sizeof line, "step %d/%d  loss %.4f  lr %.2e  norm %.3f  %.0f tok/s  ETA %s",
                         s, tc.steps, info.loss, info.lr, info.grad_norm, info.tokens / (ema_ms / 1e3), etab);
        if (do_eval) n += snprintf(line + n, sizeof line - n, "  val %.4f", val);
        if (info.skipped) n += snprintf(line + n, sizeof line - n, "  SKIPPED (non-finite; %d so far)", sk_trainer_skipped(tr));
        if (tty) fprintf(err, "\r\033[K%s%s", line, do_eval || info.skipped ? "\n" : "");
        else if (s % print_every == 0 || do_eval || info.skipped || s == tc.steps || s == start_step + 1)
            fprintf(err, "%s\n", line);
        /* checkpoint */
        if ((tc.ckpt_every > 0 && s % tc.ckpt_every == 0) || s == tc.steps) {
            if (sk_trainer_save(tr, ckp, meta)) {
                *agreed = 1;
                if (tty) fputc('\n', err);
                fprintf(err, "skiplm train: %s\nskiplm train: stopped at step %d; the previous checkpoint (step %d) is intact\n",
                        sk_last_error(), s, last_ckpt);
                goto done;
            }
            last_ckpt = s;
        }
    }
    if (tty) fputc('\n', err);
    {
        /* peak memory and time in collectives: the largest over the ranks */
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double mx[3] = {ru.ru_maxrss / 1024.0, sk_dist_comm_seconds(), 0};
#ifdef SKIPLM_CUDA
        size_t dused = 0, dtotal = 0;
        if (use_cuda && !sk_cuda_memory(&dused, &dtotal)) mx[2] = dused / 1048576.0;
#endif
        double rss[64];
        int cnt[64], dsp[64], nr = world < 64 ? world : 0;   /* per-rank list for up to 64 ranks */
        for (int i = 0; i < nr; i++) { cnt[i] = 1; dsp[i] = i; }
        if (nr) sk_dist_allgather_f64(&mx[0], rss, cnt, dsp);
        sk_dist_max_f64(mx, 3);
        double el = now_s() - t_start;
        int done_steps = tc.steps - start_step;
        fprintf(err, "skiplm train: done: %d steps in %.1f s (%.0f tokens/s), final loss %.4f",
                done_steps, el, done_steps * (double)tc.accum * tc.B * tc.T * world / (el > 0 ? el : 1), last_loss);
        if (!isnan(last_val)) fprintf(err, ", val loss %.4f", last_val);
        if (sk_trainer_skipped(tr)) fprintf(err, ", %d steps skipped (non-finite)", sk_trainer_skipped(tr));
        fprintf(err, "\nskiplm train: peak RSS %.1f MiB per rank (max over %d rank%s", mx[0], world, world > 1 ? "s" : "");
        if (world > 1 && nr) {
            fprintf(err, ":");
            for (int i = 0; i < nr; i++) fprintf(err, " %.1f", rss[i]);
        }
        fprintf(err, ")");
        if (world > 1) fprintf(err, ", time in MPI collectives %.2f s (max over ranks, %.1f%%)", mx[1], 100 * mx[1] / (el > 0 ? el : 1));
        if (use_cuda) fprintf(err, "\nskiplm train: GPU memory in use %.2f MiB (max over ranks)", mx[2]);
        fprintf(err, "\nskiplm train: checkpoint %s, log %s\n", ckp, logp);
    }
    status = 0;
done:
    if (log) fclose(log);
    if (err && err != stderr) fclose(err);
    sk_trainer_free(tr);
#ifdef SKIPLM_CUDA
    sk_cuda_model_free(cm);
#endif
    sk_loader_free(Ltr); sk_loader_free(Lval);
    sk_tok_free(tok);
    sk_model_free(m);
    sk_st_free(&ck);
    return status;
#undef FAIL
#undef FAIL_LIB
}
