/* skiplm train's parts (cmd_train.c): the command line and the run they share, and the data
 * (train_data.c: the shards, the vocabulary and the loaders). */
#ifndef SK_CLI_TRAIN_H
#define SK_CLI_TRAIN_H
#include "cli.h"
#ifdef SKIPLM_CUDA
#include "skiplm_cuda.h"
#endif
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

#define UNSET_I INT_MIN
#define UNSET_U UINT64_MAX

/* The command line: UNSET_I, NAN or UNSET_U where an option was not given. */
typedef struct {
    const char *data, *train, *val, *tokenizer, *out, *resume, *init, *device;
    int tf32, bf16, fp32, overwrite, skip_nonfinite, print_every, zero, recompute;
    int lora;                /* listed in --help only: train --lora runs cmd_train_lora (cli/train_lora.c) */
    int steps, B, T, tps, accum, warmup, decay, eval_every, eval_batches, ckpt_every, shuffle;
    float lr, min_lr, wd, b1, b2, eps, clip;
    uint64_t seed;
} train_opts;

/* Test-only fault injection: SKIPLM_TEST_FAIL_AT=RANK:STEP makes that rank's gradient hook
 * fail at that step, to check that an error on one rank stops all of them. */
typedef struct { int rank, step; const sk_trainer *tr; } fail_at;
/* A run: what it starts from, its data, model, trainer and output (run_free frees them). */
typedef struct {
    int rank, world, r0p;                /* r0p: rank 0, the one that writes and prints */
    const char *resume;                  /* the checkpoint given to --resume, or NULL */
    char ckpt_path[4096];                /* its file */
    sk_safetensors ck;                   /* its contents, until the trainer has resumed */
    sk_model *m;                         /* the host model (from the checkpoint or --init, else new) */
    sk_config cfg;
    sk_train_cfg tc, ck_tc;              /* the run's hyperparameters; the checkpoint's */
    int use_cuda;
    int bf16_from_ckpt;                  /* bf16 because the resumed checkpoint was (no --bf16/--fp32) */
    const char *train_path, *val_path, *tok_path;   /* as given: a file, a glob or a folder */
    char trb[4096], vab[4096], tokb[4096];
    cli_docs trs, vas;                   /* the shards they name */
    char tr_rec[4200], va_rec[4200];     /* ... as the checkpoint records them */
    sk_tokenizer *tok;
    sk_loader *Ltr, *Lval;
    long gB;                             /* sequences per micro-step over all ranks */
    sk_trainer *tr;
    fail_at fault;
#ifdef SKIPLM_CUDA
    sk_cuda_model *cm;
    sk_cuda_precision prec;
    char devdesc[256];
#endif
    const char *out;
    char outb[4096], ckp[4200], logp[4200];
    FILE *log, *err;                     /* log.jsonl (rank 0); the messages (stderr on rank 0) */
} train_run;

/* "skiplm train: MESSAGE" on stderr; 1 */
__attribute__((format(printf, 1, 2))) int train_fail(const char *fmt, ...);
static inline int file_exists(const char *p) { struct stat s; return stat(p, &s) == 0; }
static inline int is_dir(const char *p) { struct stat s; return stat(p, &s) == 0 && S_ISDIR(s.st_mode); }

/* train_data.c, each 0 or the exit status (said): the shards the options (or the checkpoint)
 * name and the tokenizer; the tokenizer and the vocabulary (the model's, else the tokenizer's,
 * else the data's largest id + 1), the config checked; the training and validation loaders. */
int train_find_data(train_run *r, const train_opts *o);
int train_load_vocab(train_run *r);
int train_open_loaders(train_run *r);
#endif
