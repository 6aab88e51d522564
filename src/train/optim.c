/* Optimizer: AdamW (torch.optim.AdamW of PyTorch 1.13), nanoGPT's learning-rate schedule,
 * global-norm gradient clipping (torch.nn.utils.clip_grad_norm_).
 *
 * Everything walks the parameter buffer as spans (pieces of named tensors of at most
 * SK_SPAN_FLOATS floats, see skiplm_train.h). The span list is fixed by the model layout,
 * so the gradient norm, summed as one double per span in span order, does not depend on
 * the number of OpenMP threads. */
#include "skiplm_train.h"
#include "core/ops_bf16.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int sk_spans_build(const sk_tensor *ts, int n_tensors, sk_span **out, int *n_out) {
    *out = NULL; *n_out = 0;
    size_t count = 0;
    for (int i = 0; i < n_tensors; i++) count += (ts[i].numel + SK_SPAN_FLOATS - 1) / SK_SPAN_FLOATS;
    if (n_tensors < 0) return sk_error(SK_EINVAL, "negative tensor count");
    sk_span *s = malloc((count ? count : 1) * sizeof *s);
    if (!s) return sk_error(SK_ENOMEM, "out of memory for the optimizer spans");
    /* buffer order, so that a pass streams through memory once */
    int *order = malloc(((size_t)n_tensors + 1) * sizeof *order);
    if (!order) { free(s); return sk_error(SK_ENOMEM, "out of memory"); }
    for (int i = 0; i < n_tensors; i++) order[i] = i;
    for (int i = 1; i < n_tensors; i++) {           /* insertion sort by offset (already sorted in practice) */
        int x = order[i], j = i - 1;
        while (j >= 0 && ts[order[j]].offset > ts[x].offset) { order[j + 1] = order[j]; j--; }
        order[j + 1] = x;
    }
    size_t k = 0;
    for (int oi = 0; oi < n_tensors; oi++) {
        const sk_tensor *t = &ts[order[oi]];
        for (size_t o = 0; o < t->numel; o += SK_SPAN_FLOATS) {
            s[k].offset = t->offset + o;
            s[k].n = t->numel - o < SK_SPAN_FLOATS ? t->numel - o : SK_SPAN_FLOATS;
            s[k].decay = t->decay;
            k++;
        }
    }
    free(order);
    if (k > (size_t)INT32_MAX) { free(s); return sk_error(SK_EINVAL, "too many parameter spans"); }
    *out = s; *n_out = (int)k;
    return SK_OK;
}

void sk_adamw_default(sk_adamw_cfg *c) {
    c->lr = 6e-4f; c->beta1 = 0.9f; c->beta2 = 0.95f; c->eps = 1e-8f; c->weight_decay = 0.1f;
}

/* The float operations follow PyTorch's single-tensor AdamW op by op: each Python scalar
 * (computed in double) is rounded to float, then applied elementwise in float. */
/* The AdamW update of the spans; with p16, each updated weight also rounded into p16 (the model's
 * bf16 copy, same offsets) in the same pass. The fp32 arithmetic is the same either way. */
#define ADAMW_SPANS(STORE16)                                                                       \
    _Pragma("omp parallel for schedule(static)")                                                   \
    for (int s = 0; s < n_spans; s++) {                                                            \
        const size_t o = spans[s].offset, n = spans[s].n;                                          \
        float *ps = p + o, *ms = m + o, *vs = v + o;                                               \
        const float *gs = g + o;                                                                   \
        const int dec = wd && spans[s].decay;                                                      \
        for (size_t i = 0; i < n; i++) {                                                           \
            float pi = ps[i], gi = gs[i];                                                          \
            if (dec) pi = pi * decay;                                                              \
            float mi = ms[i] * fb1;                                                                \
            mi = mi + a1 * gi;                                                                     \
            float vi = vs[i] * fb2;                                                                \
            vi = vi + a2 * gi * gi;                                                                \
            float denom = sqrtf(vi) / bc2_sqrt + eps;                                              \
            pi = pi + (-step_size) * (mi / denom);                                                 \
            ps[i] = pi; ms[i] = mi; vs[i] = vi;                                                    \
            STORE16;                                                                               \
        }                                                                                          \
    }

static void adamw(float *p, const float *g, float *m, float *v, const sk_span *spans, int n_spans,
                  const sk_adamw_cfg *c, double lr, long t, uint16_t *p16) {
    double b1 = c->beta1, b2 = c->beta2;
    const float decay = (float)(1.0 - lr * (double)c->weight_decay);
    const float fb1 = (float)b1, fb2 = (float)b2, a1 = (float)(1.0 - b1), a2 = (float)(1.0 - b2);
    const float step_size = (float)(lr / (1.0 - pow(b1, (double)t)));
    const float bc2_sqrt = (float)sqrt(1.0 - pow(b2, (double)t));
    const float eps = c->eps;
    const int wd = c->weight_decay != 0.0f;
    if (p16) { ADAMW_SPANS(p16[o + i] = sk_rne_bf16(pi)) }
    else { ADAMW_SPANS((void)0) }
}

void sk_adamw_step(float *p, const float *g, float *m, float *v,
                   const sk_span *spans, int n_spans, const sk_adamw_cfg *c, double lr, long t) {
    adamw(p, g, m, v, spans, n_spans, c, lr, t, NULL);
}

void sk_adamw_step_bf16(float *p, const float *g, float *m, float *v, const sk_span *spans, int n_spans,
                        const sk_adamw_cfg *c, double lr, long t, uint16_t *p16) {
    adamw(p, g, m, v, spans, n_spans, c, lr, t, p16);
}

double sk_grad_norm(const float *g, const sk_span *spans, int n_spans) {
    double stack[256];
    double *part = n_spans <= 256 ? stack : malloc((size_t)n_spans * sizeof *part);
    if (!part) {   /* out of memory: the sequential sum is just as deterministic */
        double sum = 0;
        for (int s = 0; s < n_spans; s++)
            for (size_t i = 0; i < spans[s].n; i++) sum += (double)g[spans[s].offset + i] * g[spans[s].offset + i];
        return sqrt(sum);
    }
#pragma omp parallel for schedule(static)
    for (int s = 0; s < n_spans; s++) {
        const float *gs = g + spans[s].offset;
        double acc = 0;
        for (size_t i = 0; i < spans[s].n; i++) acc += (double)gs[i] * (double)gs[i];
        part[s] = acc;
    }
    double sum = 0;
    for (int s = 0; s < n_spans; s++) sum += part[s];
    if (part != stack) free(part);
    return sqrt(sum);
}

float sk_clip_coef(double norm, float max_norm) {
    /* PyTorch: clip_coef = max_norm / (total_norm + 1e-6) in float32, clamped to 1 */
    float coef = max_norm / ((float)norm + 1e-6f);
    return coef < 1.0f ? coef : 1.0f;
}

float sk_clip_grads(float *g, const sk_span *spans, int n_spans, double norm, float max_norm) {
    float coef = sk_clip_coef(norm, max_norm);
    if (!(coef < 1.0f)) return 1.0f;
#pragma omp parallel for schedule(static)
    for (int s = 0; s < n_spans; s++) {
        float *gs = g + spans[s].offset;
        for (size_t i = 0; i < spans[s].n; i++) gs[i] *= coef;
    }
    return coef;
}

double sk_lr_at(const sk_lr_sched *s, long it) {
    if (it < s->warmup) return s->lr * (double)(it + 1) / (double)(s->warmup + 1);
    if (it > s->decay_iters || s->decay_iters <= s->warmup) return s->min_lr;
    double ratio = (double)(it - s->warmup) / (double)(s->decay_iters - s->warmup);
    double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
    return s->min_lr + coeff * (s->lr - s->min_lr);
}
