/* The trainer: one optimizer step (gradient accumulation, hook for the data-parallel
 * all-reduce, NaN guard, clipping, scheduled AdamW), validation on fixed batches, and
 * checkpoints (one safetensors file: model + AdamW moments + metadata) with exact resume.
 *
 * Exact resume: everything a step depends on is either in the checkpoint (parameters,
 * m, v, step, Adam step count, loader position) or a pure function of (seed, step)
 * (dropout masks, the data order, the learning rate). Nothing else carries state, so a
 * resumed run performs the same float operations as an uninterrupted one. */
#include "skiplm_train.h"
#include "io/io.h"
#include "train/dist.h"
#include "train/trainer.h"
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sk_trainer {
    sk_model *m;
    sk_train_cfg cfg;
    sk_loader *train, *val;
    sk_span *spans; int n_spans;
    size_t n_params;
    float *mom, *vel;          /* AdamW first and second moments, (n_params) */
    int32_t *x, *y;            /* one micro-batch (B, T); with loss masks all accum of a step */
    int step;                  /* optimizer steps done (including skipped ones) */
    long adam_t;               /* updates applied: AdamW's step count */
    int skipped;
    int no_targets;            /* this step's batches had no masked-in target (loss masks) */
    sk_grad_hook hook; void *hook_ctx;
    sk_train_backend be; int has_be;   /* a device backend (sk_trainer_set_backend), or none */
    /* data parallelism (cfg.world_size > 1); with ZeRO-1 this rank owns spans
     * [s_lo, s_hi), the buffer range [starts[rank], starts[rank+1]), and mom/vel hold only
     * that range. Without ZeRO starts is NULL and mom/vel are whole. */
    int rank, world;
    size_t *starts;            /* (world+1) shard boundaries in the parameter buffer */
    int s_lo, s_hi;
    sk_span *lspans;           /* spans [s_lo, s_hi) with offsets relative to starts[rank] */
    double *span_sq, *my_sq;   /* squared norm per span: all of them / this rank's */
    int *sq_counts, *sq_displs;
};

/* ------------------------------------------------------------ config */

void sk_train_default(sk_train_cfg *c) {
    memset(c, 0, sizeof *c);
    c->steps = 1000; c->B = 8; c->T = 0; c->accum = 1;
    c->lr = 6e-4f; c->min_lr = 6e-5f; c->warmup = 0; c->lr_decay_steps = 0;
    c->beta1 = 0.9f; c->beta2 = 0.95f; c->eps = 1e-8f; c->weight_decay = 0.1f;
    c->grad_clip = 1.0f; c->seed = 1337; c->shuffle = 1;
    c->eval_every = 100; c->eval_batches = 10; c->ckpt_every = 500;
    c->world_size = 1; c->zero = 0;
}

/* Every hyperparameter, for metadata and comparisons. trajectory = 1: changes the
 * numbers a run computes, so a resume must not change it; 2: B and accum, which may change
 * as long as the global batch B * accum * world_size does not (the same windows are read
 * per step, and the gradient is the same mean up to float rounding). */
typedef struct { const char *key; char type; size_t off; int trajectory; } tfield;
#define TF(f, t, traj) { #f, t, offsetof(sk_train_cfg, f), traj }
static const tfield TFIELDS[] = {
    TF(steps, 'i', 1), TF(B, 'i', 2), TF(T, 'i', 1), TF(accum, 'i', 2),
    TF(lr, 'f', 1), TF(min_lr, 'f', 1), TF(warmup, 'i', 1), TF(lr_decay_steps, 'i', 1),
    TF(beta1, 'f', 1), TF(beta2, 'f', 1), TF(eps, 'f', 1), TF(weight_decay, 'f', 1),
    TF(grad_clip, 'f', 1), TF(seed, 'u', 1), TF(shuffle, 'i', 1), TF(skip_nonfinite, 'i', 0),
    TF(eval_every, 'i', 0), TF(eval_batches, 'i', 0), TF(ckpt_every, 'i', 0),
    TF(world_size, 'i', 0), TF(zero, 'i', 0), TF(bf16, 'i', 0),
};
#undef TF
#define N_TFIELDS (int)(sizeof TFIELDS / sizeof TFIELDS[0])

static void tfield_str(const sk_train_cfg *c, const tfield *f, char *buf, size_t n) {
    const char *p = (const char *)c + f->off;
    if (f->type == 'i') snprintf(buf, n, "%d", *(const int *)p);
    else if (f->type == 'u') snprintf(buf, n, "%" PRIu64, *(const uint64_t *)p);
    else snprintf(buf, n, "%.9g", (double)*(const float *)p);   /* round-trips a float */
}

static int tfield_parse(sk_train_cfg *c, const tfield *f, const char *v) {
    char *end;
    char *p = (char *)c + f->off;
    if (f->type == 'i') { long x = strtol(v, &end, 10); if (*end || end == v) return -1; *(int *)p = (int)x; }
    else if (f->type == 'u') { unsigned long long x = strtoull(v, &end, 10); if (*end || end == v) return -1; *(uint64_t *)p = x; }
    else { float x = strtof(v, &end); if (*end || end == v) return -1; *(float *)p = x; }
    return 0;
}

int sk_train_cfg_from_st(sk_train_cfg *c, const sk_safetensors *st, const char *path) {
    char key[64];
    for (int i = 0; i < N_TFIELDS; i++) {
        snprintf(key, sizeof key, "train.%s", TFIELDS[i].key);
        const char *v = sk_st_meta(st, key);
        if (v && tfield_parse(c, &TFIELDS[i], v))
            return sk_error(SK_EFORMAT, "%s: metadata %s = '%s' is not a valid number", path, key, v);
    }
    return SK_OK;
}

int sk_train_cfg_diff(const sk_train_cfg *a, const sk_train_cfg *b, const char *an, const char *bn) {
    char va[64], vb[64];
    long ga = (long)a->B * a->accum * (a->world_size > 1 ? a->world_size : 1);
    long gb = (long)b->B * b->accum * (b->world_size > 1 ? b->world_size : 1);
    if (ga != gb)
        return sk_error(SK_EINVAL, "the global batch (batch x grad-accum x ranks) is %ld = %d x %d x %d in %s "
                        "but %ld = %d x %d x %d in %s", ga, a->B, a->accum, a->world_size > 1 ? a->world_size : 1, an,
                        gb, b->B, b->accum, b->world_size > 1 ? b->world_size : 1, bn);
    for (int i = 0; i < N_TFIELDS; i++) {
        if (TFIELDS[i].trajectory != 1) continue;
        tfield_str(a, &TFIELDS[i], va, sizeof va);
        tfield_str(b, &TFIELDS[i], vb, sizeof vb);
        if (strcmp(va, vb))
            return sk_error(SK_EINVAL, "training hyperparameter '%s' is %s in %s but %s in %s",
                            TFIELDS[i].key, va, an, vb, bn);
    }
    return SK_OK;
}

int sk_config_diff(const sk_config *a, const sk_config *b, const char *an, const char *bn) {
#define CI(f) if (a->f != b->f) return sk_error(SK_EINVAL, "model config field '%s' is %d in %s but %d in %s", #f, (int)a->f, an, (int)b->f, bn)
#define CF(f) if (a->f != b->f) return sk_error(SK_EINVAL, "model config field '%s' is %.9g in %s but %.9g in %s", #f, (double)a->f, an, (double)b->f, bn)
    if (a->family != b->family)
        return sk_error(SK_EINVAL, "model config field 'family' is %s in %s but %s in %s",
                        a->family == SK_GPT2 ? "gpt2" : "llama", an, b->family == SK_GPT2 ? "gpt2" : "llama", bn);
    CI(n_layer); CI(n_head); CI(n_kv_head); CI(n_embd); CI(block_size); CI(vocab_size);
    CI(padded_vocab_size); CI(bias); CF(dropout); CI(untied_head);
    if (a->gelu != b->gelu)
        return sk_error(SK_EINVAL, "model config field 'gelu' is %s in %s but %s in %s",
                        a->gelu == SK_GELU_TANH ? "tanh" : "erf", an, b->gelu == SK_GELU_TANH ? "tanh" : "erf", bn);
    CI(n_skip_layer); CI(n_skip_head); CF(norm_eps);
    if (strcmp(a->routing, b->routing))
        return sk_error(SK_EINVAL, "model config field 'routing' is \"%s\" in %s but \"%s\" in %s", a->routing, an, b->routing, bn);
    if (a->family == SK_LLAMA) {
        CF(rope_theta); CI(ffn_hidden); CI(rope_scaling); CI(qkv_bias);
        if (a->rope_scaling != SK_ROPE_NONE) CF(rope_factor);
        if (a->rope_scaling == SK_ROPE_LLAMA3) { CF(rope_low_freq_factor); CF(rope_high_freq_factor); CI(rope_original_ctx); }
    }
#undef CI
#undef CF
    return SK_OK;
}

/* sk_error with the current message as an argument: copy it first (same buffer). */
static int rethrow(int rc, const char *prefix) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", sk_last_error());
    return sk_error(rc, "%s%s", prefix, msg);
}

uint64_t sk_dropout_seed(uint64_t seed, long step, int micro) {
    uint64_t x = seed ^ ((uint64_t)step * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)(micro + 1) << 48);
    x += 0x632be59bd9b4e019ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* ------------------------------------------------------------ trainer */

void sk_trainer_free(sk_trainer *tr) {
    if (!tr) return;
    free(tr->spans); free(tr->mom); free(tr->vel); free(tr->x); free(tr->y);
    free(tr->starts); free(tr->lspans); free(tr->span_sq); free(tr->my_sq);
    free(tr->sq_counts); free(tr->sq_displs);
    free(tr);
}

/* ZeRO-1 shards: spans in buffer order cut into world runs of about equal float counts.
 * Rank r's buffer range runs from its first span to the next rank's first span (rank 0
 * from 0, the last to n_params), so the ranges tile the buffer, padding gaps included. */
static int zero_setup(sk_trainer *tr) {
    const int W = tr->world, S = tr->n_spans;
    tr->starts = malloc((size_t)(W + 1) * sizeof *tr->starts);
    int *lo = malloc((size_t)(W + 1) * sizeof *lo);
    tr->span_sq = malloc((size_t)(S ? S : 1) * sizeof *tr->span_sq);
    tr->sq_counts = malloc((size_t)W * sizeof(int));
    tr->sq_displs = malloc((size_t)W * sizeof(int));
    if (!tr->starts || !lo || !tr->span_sq || !tr->sq_counts || !tr->sq_displs) { free(lo); return sk_error(SK_ENOMEM, "out of memory"); }
    size_t total = 0;
    for (int s = 0; s < S; s++) total += tr->spans[s].n;
    size_t cum = 0;
    int s = 0;
    lo[0] = 0;
    for (int r = 1; r < W; r++) {
        size_t target = (size_t)((double)total * r / W);
        while (s < S && cum < target) cum += tr->spans[s++].n;
        lo[r] = s;
    }
    lo[W] = S;
    for (int r = 0; r <= W; r++)
        tr->starts[r] = r == 0 ? 0 : r == W || lo[r] >= S ? tr->n_params : tr->spans[lo[r]].offset;
    for (int r = 0; r < W; r++) { tr->sq_counts[r] = lo[r + 1] - lo[r]; tr->sq_displs[r] = lo[r]; }
    tr->s_lo = lo[tr->rank]; tr->s_hi = lo[tr->rank + 1];
    free(lo);
    int nl = tr->s_hi - tr->s_lo;
    size_t base = tr->starts[tr->rank];
    tr->lspans = malloc((size_t)(nl ? nl : 1) * sizeof *tr->lspans);
    tr->my_sq = malloc((size_t)(nl ? nl : 1) * sizeof *tr->my_sq);
    if (!tr->lspans || !tr->my_sq) return sk_error(SK_ENOMEM, "out of memory");
    for (int k = 0; k < nl; k++) {
        tr->lspans[k] = tr->spans[tr->s_lo + k];
        tr->lspans[k].offset -= base;
    }
    return SK_OK;
}

int sk_trainer_new(sk_trainer **out, sk_model *m, const sk_train_cfg *cfg, sk_loader *train, sk_loader *val) {
    *out = NULL;
    const sk_train_cfg *c = cfg;
    if (sk_model_q8(m))
        return sk_error(SK_EINVAL, "the model's weights are 8-bit (a quantized file, skiplm quantize): training needs the fp32 weights it was quantized from");
    if (c->steps < 1) return sk_error(SK_EINVAL, "steps = %d must be >= 1", c->steps);
    if (c->B < 1 || c->T < 1) return sk_error(SK_EINVAL, "batch %d and sequence length %d must be >= 1", c->B, c->T);
    if (c->accum < 1) return sk_error(SK_EINVAL, "gradient accumulation %d must be >= 1", c->accum);
    if (!(c->lr >= 0) || !(c->min_lr >= 0)) return sk_error(SK_EINVAL, "lr %g and min_lr %g must be >= 0", c->lr, c->min_lr);
    if (c->warmup < 0 || c->lr_decay_steps < 0) return sk_error(SK_EINVAL, "warmup and lr_decay_steps must be >= 0");
    if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1))
        return sk_error(SK_EINVAL, "betas (%g, %g) must be in [0, 1)", c->beta1, c->beta2);
    if (!(c->eps > 0)) return sk_error(SK_EINVAL, "eps %g must be > 0", c->eps);
    if (!(c->weight_decay >= 0)) return sk_error(SK_EINVAL, "weight decay %g must be >= 0", c->weight_decay);
    if (!(c->grad_clip >= 0)) return sk_error(SK_EINVAL, "grad clip %g must be >= 0 (0 = off)", c->grad_clip);
    if (c->eval_every < 0 || c->eval_batches < 0 || c->ckpt_every < 0)
        return sk_error(SK_EINVAL, "eval_every, eval_batches and ckpt_every must be >= 0");
    if (!train) return sk_error(SK_EINVAL, "no training data");
    const int world = c->world_size > 0 ? c->world_size : sk_dist_size();
    if (world != sk_dist_size())
        return sk_error(SK_EINVAL, "world_size %d but %d ranks are running", world, sk_dist_size());
    if (c->zero != 0 && c->zero != 1) return sk_error(SK_EINVAL, "zero = %d: only stage 1 (or 0 = off) exists", c->zero);
    if (sk_loader_n_windows(train) < (uint64_t)c->B * world)
        return sk_error(SK_EINVAL, "the training data holds %" PRIu64 " windows of %d tokens, fewer than one global batch of %d",
                        sk_loader_n_windows(train), c->T + 1, c->B * world);
    int rc = sk_model_reserve(m, c->B, c->T, 1);
    if (rc) return rc;
    sk_trainer *tr = calloc(1, sizeof *tr);
    if (!tr) return sk_error(SK_ENOMEM, "out of memory");
    tr->m = m; tr->cfg = *c; tr->train = train; tr->val = val;
    if (!tr->cfg.lr_decay_steps) tr->cfg.lr_decay_steps = tr->cfg.steps;
    tr->n_params = sk_model_num_params(m);
    int nt;
    const sk_tensor *ts = sk_model_tensors(m, &nt);
    size_t BT = (size_t)c->B * c->T;
    if ((rc = sk_spans_build(ts, nt, &tr->spans, &tr->n_spans))) { sk_trainer_free(tr); return rc; }
    tr->cfg.world_size = tr->world = world;
    tr->rank = sk_dist_rank();
    size_t n_state = tr->n_params;
    if (tr->cfg.zero && world > 1) {
        if ((rc = zero_setup(tr))) { sk_trainer_free(tr); return rc; }
        n_state = tr->starts[tr->rank + 1] - tr->starts[tr->rank];
    }
    tr->mom = calloc(n_state ? n_state : 1, sizeof(float));
    tr->vel = calloc(n_state ? n_state : 1, sizeof(float));
    /* with loss masks a step first reads all its micro-batches, to count their targets */
    const size_t nbt = BT * (size_t)(sk_loader_has_mask(train) ? c->accum : 1);
    tr->x = malloc(nbt * sizeof(int32_t));
    tr->y = malloc(nbt * sizeof(int32_t));
    if (!tr->mom || !tr->vel || !tr->x || !tr->y) {
        sk_trainer_free(tr);
        return sk_error(SK_ENOMEM, "out of memory for the optimizer state (%zu parameters)", sk_model_num_params(m));
    }
    *out = tr;
    return SK_OK;
}

void sk_trainer_set_grad_hook(sk_trainer *tr, sk_grad_hook fn, void *ctx) { tr->hook = fn; tr->hook_ctx = ctx; }

int sk_trainer_set_backend(sk_trainer *tr, const sk_train_backend *be) {
    if (tr->world > 1 && !be->grads_mean)
        return sk_error(SK_EINVAL, "this device backend has no gradient all-reduce: train on one process, not %d",
                        tr->world);
    if (tr->world > 1 && tr->starts && !be->shard)
        return sk_error(SK_EINVAL, "ZeRO (zero = 1): this device backend cannot shard the AdamW state (use zero = 0)");
    if (tr->world > 1 && tr->starts) {
        int rc = be->shard(be->ctx, tr->starts, tr->sq_counts, tr->sq_displs);
        if ((rc = sk_dist_agree(rc))) return rc;
    }
    tr->be = *be;
    tr->has_be = 1;
    return be->push(be->ctx, sk_model_params(tr->m), tr->mom, tr->vel);
}

/* forward + backward of micro-step k on x, y with gradient scale `scale`; its mean loss in *l */
static int micro_step(sk_trainer *tr, int k, const int32_t *x, const int32_t *y, float scale, float *l) {
    const sk_train_cfg *c = &tr->cfg;
    const uint64_t ds = sk_dropout_seed(c->seed, tr->step, tr->world > 1 ? k * tr->world + tr->rank : k);
    int rc = tr->has_be ? tr->be.forward_backward(tr->be.ctx, x, y, c->B, c->T, scale, ds, l)
                        : sk_model_forward_backward(tr->m, x, y, c->B, c->T, scale, ds, l);
    if (rc) {
        char pre[32];
        snprintf(pre, sizeof pre, "step %d: ", tr->step + 1);
        rc = rethrow(rc, pre);
    }
    return rc;
}

/* Step part 1, shared by the CPU and device paths: forward + backward over the micro-steps.
 * The step's loss is sum / den over all ranks (the callers add the ranks' sums); *loss is
 * this rank's sum / (its share of den), *den_local that share.
 *   Without loss masks every micro-step's mean counts 1/accum: the gradients of loss/accum
 *   add up, sum = the micro-steps' losses, den = accum * world.
 *   With loss masks (y = -1 where the mask is 0) the step's loss is the mean over all its
 *   masked-in targets, on all ranks and micro-steps, as one PyTorch cross-entropy with
 *   ignore_index over the whole step: all micro-batches are read first, their targets
 *   counted (n_k, total N over the ranks), micro-step k runs with gradient scale
 *   n_k * world / N (the model divides by n_k; the ranks' mean divides by world), one with
 *   no target is skipped, sum = sum_k loss_k * n_k, den = N. N = 0: no update (the step is
 *   counted as skipped, sk_step_info.skipped = 2). */
static int micro_steps(sk_trainer *tr, float *loss, double *sum, double *den_local) {
    const sk_train_cfg *c = &tr->cfg;
    double loss_sum = 0;
    int rc = SK_OK;
    tr->no_targets = 0;
    if (!sk_loader_has_mask(tr->train)) {
        const float scale = 1.0f / (float)c->accum;
        for (int k = 0; k < c->accum && !rc; k++) {
            float l = 0;
            rc = sk_loader_next_xy(tr->train, tr->x, tr->y);
            if (!rc) rc = micro_step(tr, k, tr->x, tr->y, scale, &l);
            loss_sum += l;
        }
        *loss = (float)(loss_sum / c->accum);
        *sum = loss_sum;
        *den_local = c->accum;
        return rc;
    }
    const size_t BT = (size_t)c->B * c->T;
    double n_all = 0;
    for (int k = 0; k < c->accum && !rc; k++) {
        rc = sk_loader_next_xy(tr->train, tr->x + k * BT, tr->y + k * BT);
        for (size_t i = 0; i < BT; i++) n_all += tr->y[k * BT + i] >= 0;
    }
    if (tr->world > 1 && !rc) rc = sk_dist_sum_f64(&n_all, 1);
    for (int k = 0; k < c->accum && !rc && n_all > 0; k++) {
        size_t nk = 0;
        for (size_t i = 0; i < BT; i++) nk += tr->y[k * BT + i] >= 0;
        if (!nk) continue;
        float l = 0;
        rc = micro_step(tr, k, tr->x + k * BT, tr->y + k * BT, (float)((double)nk * tr->world / n_all), &l);
        loss_sum += (double)l * (double)nk;
    }
    *sum = loss_sum;
    *den_local = n_all > 0 ? n_all : NAN;
    *loss = n_all > 0 ? (float)(loss_sum / n_all) : NAN;
    tr->no_targets = n_all == 0;
    return rc;
}

/* Fill info for this step (W ranks) and apply the NaN guard: a non-finite loss or norm is an
 * error, or with skip_nonfinite a skipped step (info->skipped = 1). *lr: the scheduled rate. */
static int step_info(sk_trainer *tr, sk_step_info *info, float loss, double norm, int W, double *lr) {
    const sk_train_cfg *c = &tr->cfg;
    sk_lr_sched sch = {c->lr, c->min_lr, c->warmup, c->lr_decay_steps};
    *lr = sk_lr_at(&sch, tr->step);
    info->step = tr->step + 1;
    info->loss = loss; info->lr = *lr; info->grad_norm = norm;
    info->tokens = (uint64_t)c->accum * c->B * c->T * W;
    if (tr->no_targets) {              /* nothing to learn from: no update (the same on every rank) */
        tr->skipped++; tr->step++;
        info->skipped = 2;
        return SK_OK;
    }
    if (isfinite(loss) && isfinite(norm)) return SK_OK;
    const char *what = !isfinite(loss) && !isfinite(norm) ? "loss and gradient norm" : !isfinite(loss) ? "loss" : "gradient norm";
    if (!c->skip_nonfinite)
        return sk_error(SK_ENUM, "step %d: non-finite %s (loss %g, gradient norm %g); the parameters "
                        "were not updated", tr->step + 1, what, (double)loss, norm);
    tr->skipped++; tr->step++;
    info->skipped = 1;
    return SK_OK;
}

/* sk_trainer_step with a device backend: the same sequence as the CPU path below (micro-steps,
 * hook, mean over the ranks, norm, NaN guard, clipping, scheduled AdamW), run by the backend;
 * with ZeRO-1 the backend's grads_mean / grad_norm / update do the sharded versions. */
static int step_device(sk_trainer *tr, sk_step_info *info) {
    const sk_train_cfg *c = &tr->cfg;
    const sk_train_backend *be = &tr->be;
    const int W = tr->world;
    int rc = be->zero_grad(be->ctx);
    float loss = 0;
    double loss_sum = 0, den = 1;
    if (!rc) rc = micro_steps(tr, &loss, &loss_sum, &den);
    if (!rc && tr->hook) rc = tr->hook(NULL, 0, &loss, tr->hook_ctx);
    if (W > 1) rc = sk_dist_agree(rc);    /* one rank failed: all stop, with its message */
    if (rc) return rc;
    if (W > 1) {
        if (tr->hook) loss_sum = (double)loss * den;   /* the hook may have changed it */
        if ((rc = sk_dist_sum_f64(&loss_sum, 1)) || (rc = be->grads_mean(be->ctx))) return rc;
        loss = (float)(loss_sum / (sk_loader_has_mask(tr->train) ? den : den * W));
    }
    double norm = 0;
    if ((rc = be->grad_norm(be->ctx, &norm))) return rc;
    double lr;
    if ((rc = step_info(tr, info, loss, norm, W, &lr)) || info->skipped) return rc;
    float coef = c->grad_clip > 0 ? sk_clip_coef(norm, c->grad_clip) : 1.0f;
    sk_adamw_cfg ac = {c->lr, c->beta1, c->beta2, c->eps, c->weight_decay};
    if ((rc = be->update(be->ctx, &ac, lr, tr->adam_t + 1, coef))) return rc;
    tr->adam_t++;
    tr->step++;
    return SK_OK;
}
int sk_trainer_step_count(const sk_trainer *tr) { return tr->step; }
int sk_trainer_skipped(const sk_trainer *tr) { return tr->skipped; }

int sk_trainer_step(sk_trainer *tr, sk_step_info *info) {
    const sk_train_cfg *c = &tr->cfg;
    sk_model *m = tr->m;
    memset(info, 0, sizeof *info);
    if (tr->step >= c->steps) return sk_error(SK_EINVAL, "all %d steps are done", c->steps);
    if (tr->has_be) return step_device(tr, info);
    /* 1. forward + backward over the micro-steps; gradients of loss/accum add up */
    sk_model_zero_grad(m);
    float loss = 0;
    double loss_sum = 0, den = 1;
    int rc = micro_steps(tr, &loss, &loss_sum, &den);
    float *g = sk_model_grads(m);
    /* 2. hook point (this rank's gradients) */
    if (!rc && tr->hook) rc = tr->hook(g, tr->n_params, &loss, tr->hook_ctx);
    const int W = tr->world;
    if (W > 1) rc = sk_dist_agree(rc);    /* one rank failed: all stop, with its message */
    if (rc) return rc;
    /* 3. data parallelism: mean over the ranks of the loss and the gradients */
    const int zero = tr->starts != NULL;
    float *pg = g;                     /* the gradients this rank updates with */
    const sk_span *us = tr->spans;     /* ... over these spans */
    int nus = tr->n_spans;
    double norm;
    if (W > 1) {
        if (tr->hook) loss_sum = (double)loss * den;   /* the hook may have changed it */
        if ((rc = sk_dist_sum_f64(&loss_sum, 1))) return rc;
        loss = (float)(loss_sum / (sk_loader_has_mask(tr->train) ? den : den * W));
    }
    if (W > 1 && zero) {
        /* in place: only this rank's range of g holds the mean afterwards */
        if ((rc = sk_dist_reduce_scatter_mean(g, tr->starts))) return rc;
        pg = g + tr->starts[tr->rank]; us = tr->lspans; nus = tr->s_hi - tr->s_lo;
        /* the norm as sk_grad_norm computes it: one double per span, added in span order */
        for (int k = 0; k < nus; k++) {
            const float *gs = pg + us[k].offset;
            double acc = 0;
            for (size_t i = 0; i < us[k].n; i++) acc += (double)gs[i] * (double)gs[i];
            tr->my_sq[k] = acc;
        }
        if ((rc = sk_dist_allgather_f64(tr->my_sq, tr->span_sq, tr->sq_counts, tr->sq_displs))) return rc;
        double sum = 0;
        for (int s = 0; s < tr->n_spans; s++) sum += tr->span_sq[s];
        norm = sqrt(sum);
    } else {
        if (W > 1 && (rc = sk_dist_mean_f32(g, tr->n_params))) return rc;
        norm = sk_grad_norm(g, tr->spans, tr->n_spans);
    }
    /* 4. NaN guard, clipping, update (the same decision on every rank: loss and norm are) */
    double lr;
    if ((rc = step_info(tr, info, loss, norm, W, &lr)) || info->skipped) return rc;
    if (c->grad_clip > 0) sk_clip_grads(pg, us, nus, norm, c->grad_clip);
    sk_adamw_cfg ac = {c->lr, c->beta1, c->beta2, c->eps, c->weight_decay};
    tr->adam_t++;
    /* in bf16 mode the update also rounds the weights into the model's bf16 copy (not under
     * ZeRO: the all-gathered weights are rounded by the next pass) */
    uint16_t *p16 = W > 1 && zero ? NULL : sk_model_params_bf16(m);
    float *p = sk_model_params(m);
    if (W > 1 && zero) {
        sk_adamw_step(p + tr->starts[tr->rank], pg, tr->mom, tr->vel, us, nus, &ac, lr, tr->adam_t);
        if ((rc = sk_dist_allgather_f32(p, tr->starts))) return rc;
    } else if (p16) {
        sk_adamw_step_bf16(p, g, tr->mom, tr->vel, tr->spans, tr->n_spans, &ac, lr, tr->adam_t, p16);
        sk_model_params_bf16_synced(m);
    } else {
        sk_adamw_step(p, g, tr->mom, tr->vel, tr->spans, tr->n_spans, &ac, lr, tr->adam_t);
    }
    tr->step++;
    return SK_OK;
}

int sk_trainer_eval(sk_trainer *tr, float *val_loss) {
    *val_loss = NAN;
    const sk_train_cfg *c = &tr->cfg;
    if (!tr->val) return sk_error(SK_EINVAL, "no validation data");
    /* with world_size > 1 the val loader hands this rank its block of each global batch */
    uint64_t nb = sk_loader_n_windows(tr->val) / ((uint64_t)c->B * tr->world);
    if (nb > (uint64_t)c->eval_batches) nb = (uint64_t)c->eval_batches;
    if (nb == 0) return sk_error(SK_EINVAL, "the validation data holds fewer windows than one batch of %d", c->B * tr->world);
    sk_loader_pos pos;
    sk_loader_get_pos(tr->val, &pos);
    pos.consumed = 0;                      /* the same fixed batches every time */
    int rc = sk_loader_set_pos(tr->val, &pos);
    /* with loss masks: the mean over the masked-in targets of all the batches */
    const int masked = sk_loader_has_mask(tr->val);
    double acc[2] = {0, 0};                /* loss sum; targets (masked) */
    for (uint64_t i = 0; !rc && i < nb; i++) {
        float l = 0.0f;
        size_t n = (size_t)c->B * c->T;
        rc = sk_loader_next_xy(tr->val, tr->x, tr->y);
        if (masked) { n = 0; for (size_t k = 0; k < (size_t)c->B * c->T; k++) n += tr->y[k] >= 0; }
        if (!rc && n) rc = tr->has_be ? tr->be.forward(tr->be.ctx, tr->x, tr->y, c->B, c->T, &l)
                                      : sk_model_forward(tr->m, tr->x, tr->y, c->B, c->T, &l, NULL);
        if (masked) { acc[0] += n ? (double)l * n : 0; acc[1] += (double)n; }
        else acc[0] += l;
    }
    if (tr->world > 1) {
        if ((rc = sk_dist_agree(rc))) return rc;
        if ((rc = sk_dist_sum_f64(acc, 2))) return rc;
    }
    if (rc) return rc;
    *val_loss = masked ? (acc[1] > 0 ? (float)(acc[0] / acc[1]) : NAN) : (float)(acc[0] / ((double)nb * tr->world));
    return SK_OK;
}

/* ------------------------------------------------------------ checkpoints */

/* 64-bit hash of a float buffer (word-wise, FNV-like with a final mix): a checksum of the
 * state, stored in the metadata, so a checkpoint whose data bytes changed is refused. */
static uint64_t hash_floats(uint64_t h, const float *x, size_t n) {
    const uint32_t *w = (const uint32_t *)(const void *)x;
    for (size_t i = 0; i < n; i++) h = (h ^ w[i]) * 0x100000001b3ULL;
    return h;
}

static uint64_t state_checksum(const float *p, const float *m, const float *v, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    h = hash_floats(h, p, n);
    h = hash_floats(h, m, n);
    h = hash_floats(h, v, n);
    return h;
}

static int save_local(const sk_trainer *tr, const char *path, const char *const *extra_meta,
                      const float *mom, const float *vel);

/* Collective with world_size > 1: the replicas are checked to hold the same parameters
 * (a hash of each rank's against rank 0's), ZeRO's m and v are gathered to rank 0, rank 0
 * writes, and its result is every rank's. */
int sk_trainer_save(const sk_trainer *tr, const char *path, const char *const *extra_meta) {
    if (tr->has_be) {                  /* the device holds the state: bring it home first */
        int rc = tr->be.pull(tr->be.ctx, sk_model_params(tr->m), tr->mom, tr->vel);
        if (rc) return rethrow(rc, "checkpoint not written: ");
    }
    if (tr->world <= 1) return save_local(tr, path, extra_meta, tr->mom, tr->vel);
    const float *p = sk_model_params(tr->m);
    uint64_t h = hash_floats(0xcbf29ce484222325ULL, p, tr->n_params), h0 = h;
    int rc = sk_dist_bcast(&h0, sizeof h0, 0);
    if (!rc && h != h0)
        rc = sk_error(SK_EINVAL, "the replicas diverged: the parameters of rank %d differ from rank 0's "
                      "(checkpoint not written)", tr->rank);
    if ((rc = sk_dist_agree(rc))) return rc;
    float *fm = NULL, *fv = NULL;
    const float *mo = tr->mom, *ve = tr->vel;
    if (tr->starts) {                  /* ZeRO: gather the shards of m and v on rank 0 */
        if (tr->rank == 0) {
            fm = calloc(tr->n_params, sizeof *fm);
            fv = calloc(tr->n_params, sizeof *fv);
            if (!fm || !fv) rc = sk_error(SK_ENOMEM, "out of memory gathering the optimizer state (checkpoint not written)");
        }
        if ((rc = sk_dist_agree(rc))) { free(fm); free(fv); return rc; }
        if (!(rc = sk_dist_gather_f32(tr->mom, fm, tr->starts, 0))) rc = sk_dist_gather_f32(tr->vel, fv, tr->starts, 0);
        mo = fm; ve = fv;
    }
    if (!rc && tr->rank == 0) rc = save_local(tr, path, extra_meta, mo, ve);
    free(fm); free(fv);
    return sk_dist_agree(rc);
}

static int save_local(const sk_trainer *tr, const char *path, const char *const *extra_meta,
                      const float *mom, const float *vel) {
    sk_st_writer *w = sk_st_writer_new();
    if (!w) return sk_error(SK_ENOMEM, "out of memory");
    int64_t shape[1] = {(int64_t)tr->n_params};
    int rc = sk_st_add(w, "optim.m", SK_F32, 1, shape, mom);
    if (!rc) rc = sk_st_add(w, "optim.v", SK_F32, 1, shape, vel);
    char key[64], val[64];
    for (int i = 0; !rc && i < N_TFIELDS; i++) {
        snprintf(key, sizeof key, "train.%s", TFIELDS[i].key);
        tfield_str(&tr->cfg, &TFIELDS[i], val, sizeof val);
        rc = sk_st_add_meta(w, key, val);
    }
    sk_loader_pos pos;
    sk_loader_get_pos(tr->train, &pos);
    struct { const char *k; uint64_t v; } st[] = {
        {"train.step", (uint64_t)tr->step}, {"train.adam_t", (uint64_t)tr->adam_t},
        {"train.skipped", (uint64_t)tr->skipped},
        {"train.loader.consumed", pos.consumed}, {"train.loader.seed", pos.seed},
        {"train.loader.n_windows", pos.n_windows}, {"train.loader.T", (uint64_t)pos.T},
        {"train.checksum", state_checksum(sk_model_params(tr->m), mom, vel, tr->n_params)},
    };
    for (size_t i = 0; !rc && i < sizeof st / sizeof st[0]; i++) {
        snprintf(val, sizeof val, "%" PRIu64, st[i].v);
        rc = sk_st_add_meta(w, st[i].k, val);
    }
    for (int i = 0; !rc && extra_meta && extra_meta[i]; i += 2)
        if (extra_meta[i + 1]) rc = sk_st_add_meta(w, extra_meta[i], extra_meta[i + 1]);
    if (!rc) rc = sk_model_save_with(tr->m, path, w);
    sk_st_writer_free(w);
    if (rc) return rethrow(rc, "checkpoint not written: ");
    return SK_OK;
}

static int meta_u64(const sk_safetensors *st, const char *path, const char *key, uint64_t *out) {
    const char *v = sk_st_meta(st, key);
    if (!v) return sk_error(SK_EFORMAT, "%s: not a training checkpoint (metadata '%s' is missing)", path, key);
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    if (end == v || *end) return sk_error(SK_EFORMAT, "%s: metadata %s = '%s' is not an integer", path, key, v);
    *out = x;
    return SK_OK;
}

int sk_trainer_resume(sk_trainer *tr, const sk_safetensors *ckpt, const char *path) {
    uint64_t step = 0, adam_t = 0, skipped = 0, sum = 0, T = 0;
    sk_loader_pos pos = {0};
    int rc;
    if ((rc = meta_u64(ckpt, path, "train.step", &step)) || (rc = meta_u64(ckpt, path, "train.adam_t", &adam_t)) ||
        (rc = meta_u64(ckpt, path, "train.skipped", &skipped)) ||
        (rc = meta_u64(ckpt, path, "train.loader.consumed", &pos.consumed)) ||
        (rc = meta_u64(ckpt, path, "train.loader.seed", &pos.seed)) ||
        (rc = meta_u64(ckpt, path, "train.loader.n_windows", &pos.n_windows)) ||
        (rc = meta_u64(ckpt, path, "train.loader.T", &T)) ||
        (rc = meta_u64(ckpt, path, "train.checksum", &sum)))
        return rc;
    pos.T = (int64_t)T;
    /* the same model and the same trajectory */
    sk_model *cm;
    if ((rc = sk_model_load_st(&cm, ckpt, path, NULL))) return rc;
    char name[512];
    snprintf(name, sizeof name, "the checkpoint %s", path);
    if ((rc = sk_config_diff(sk_model_config(cm), sk_model_config(tr->m), name, "this run"))) goto done;
    sk_train_cfg fc = tr->cfg;
    fc.world_size = 1;                 /* checkpoints from before data parallelism */
    if ((rc = sk_train_cfg_from_st(&fc, ckpt, path))) goto done;
    if ((rc = sk_train_cfg_diff(&fc, &tr->cfg, name, "this run"))) goto done;
    if (step > (uint64_t)tr->cfg.steps || adam_t > step || skipped > step) {
        rc = sk_error(SK_EFORMAT, "%s: inconsistent counters (step %" PRIu64 ", adam_t %" PRIu64 ", skipped %" PRIu64 ")",
                      path, step, adam_t, skipped);
        goto done;
    }
    size_t n = tr->n_params;
    if (sk_model_num_params(cm) != n) { rc = sk_error(SK_EFORMAT, "%s: parameter count differs", path); goto done; }
    float *mo = malloc(n * sizeof(float)), *ve = malloc(n * sizeof(float));
    if (!mo || !ve) { free(mo); free(ve); rc = sk_error(SK_ENOMEM, "out of memory"); goto done; }
    if ((rc = sk_st_get_f32(ckpt, "optim.m", mo, n)) || (rc = sk_st_get_f32(ckpt, "optim.v", ve, n))) {
        free(mo); free(ve);
        goto done;
    }
    if (state_checksum(sk_model_params(cm), mo, ve, n) != sum) {
        free(mo); free(ve);
        rc = sk_error(SK_EFORMAT, "%s: checksum mismatch: the parameters or optimizer state were altered "
                      "after the checkpoint was written", path);
        goto done;
    }
    sk_loader_pos old;
    sk_loader_get_pos(tr->train, &old);
    if ((rc = sk_loader_set_pos(tr->train, &pos))) {
        free(mo); free(ve);
        char pre[600];
        snprintf(pre, sizeof pre, "%s: ", path);
        rc = rethrow(rc, pre);
        goto done;
    }
    /* commit */
    memcpy(sk_model_params(tr->m), sk_model_params(cm), n * sizeof(float));
    if (tr->starts) {                  /* ZeRO: this rank's shard of m and v */
        size_t a = tr->starts[tr->rank], b = tr->starts[tr->rank + 1];
        memcpy(tr->mom, mo + a, (b - a) * sizeof(float));
        memcpy(tr->vel, ve + a, (b - a) * sizeof(float));
    } else {
        memcpy(tr->mom, mo, n * sizeof(float));
        memcpy(tr->vel, ve, n * sizeof(float));
    }
    free(mo); free(ve);
    tr->step = (int)step; tr->adam_t = (long)adam_t; tr->skipped = (int)skipped;
    if (tr->has_be) rc = tr->be.push(tr->be.ctx, sk_model_params(tr->m), tr->mom, tr->vel);
done:
    sk_model_free(cm);
    return rc;
}
