/* Sampling a token from logits, as transformers' generate() composes its processors:
 * repetition penalty over the context, temperature, top-k, top-p, min-p; greedy at
 * temperature 0. Only the head of the vocabulary that can be drawn is selected and sorted. */
#include "skiplm_model.h"
#include "core/ops.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct { float p; int id; } prob_id;
static int by_prob_desc(const void *a, const void *b) {
    const prob_id *x = a, *y = b;
    return x->p < y->p ? 1 : x->p > y->p ? -1 : x->id - y->id;
}

/* Moves the k first entries of the by_prob_desc order to a[0..k) (in any order): quickselect
 * with a median-of-three pivot. by_prob_desc is a strict total order (ties go by id), so the
 * set is the one a full sort would put first. */
static void select_top(prob_id *a, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (by_prob_desc(&a[mid], &a[lo]) < 0) { prob_id t = a[mid]; a[mid] = a[lo]; a[lo] = t; }
        if (by_prob_desc(&a[hi], &a[lo]) < 0) { prob_id t = a[hi]; a[hi] = a[lo]; a[lo] = t; }
        if (by_prob_desc(&a[hi], &a[mid]) < 0) { prob_id t = a[hi]; a[hi] = a[mid]; a[mid] = t; }
        prob_id piv = a[mid];
        int i = lo, j = hi;
        while (i <= j) {
            while (by_prob_desc(&a[i], &piv) < 0) i++;
            while (by_prob_desc(&a[j], &piv) > 0) j--;
            if (i <= j) { prob_id t = a[i]; a[i] = a[j]; a[j] = t; i++; j--; }
        }
        /* now a[lo..j] precede a[i..hi], and anything between equals the pivot */
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else return;
    }
}

/* The kept tokens of a sampling step: pi[0..n) (probabilities relative to the most likely
 * token, which is 1), in descending order when anything was cut, and their sum. lg: the
 * logits after the repetition penalty. Returns n, or 0 when out of memory. */
static int sample_head(const float *lg, int V, const sk_sampling *sp, prob_id **out, double *mass) {
    int best = 0;
    for (int i = 1; i < V; i++) if (lg[i] > lg[best]) best = i;
    prob_id *pi = malloc(sizeof(prob_id) * V);
    if (!pi) return 0;
    double sum = 0;
    int nmin = 0;
    for (int i = 0; i < V; i++) {
        pi[i].id = i;
        pi[i].p = expf((lg[i] - lg[best]) / sp->temperature);
        sum += pi[i].p;
        nmin += pi[i].p >= sp->min_p;               /* min-p: at least min_p of the top's */
    }
    if (nmin < 1) nmin = 1;
    const int top_k = sp->top_k > 0 && sp->top_k < V ? sp->top_k : 0;
    const float top_p = sp->top_p;
    int n = V;
    if (top_k || top_p < 1.0f || nmin < V) {
        /* only the head of the descending order is needed: the top_k, the min-p set, or (top_p
         * alone) a head that reaches top_p of the mass, found by selecting 256, 1024, ...
         * entries and sorting those (a full sort of a 50k vocabulary took milliseconds) */
        if (top_k) n = top_k;
        int k = top_k ? n : top_p < 1.0f ? (256 < V ? 256 : V) : nmin;
        /* top-p's share is of the whole mass, summed in id order (a sum in descending order,
         * as a full sort gives, lets a long tail of tiny terms vanish against the head), or
         * of the top_k's */
        double kept = top_k ? 0 : sum;
        for (;;) {
            if (k < V) select_top(pi, V, k);
            qsort(pi, k, sizeof *pi, by_prob_desc);
            if (kept == 0)
                for (int i = 0; i < n; i++) kept += pi[i].p;
            if (top_p >= 1.0f) break;
            double acc = 0;
            int cut = 0;
            for (int i = 0; i < (k < n ? k : n); i++) {
                acc += pi[i].p;
                if (acc >= top_p * kept) { cut = i + 1; break; }
            }
            if (cut) { n = cut; break; }
            if (k >= n) break;                     /* rounding: the whole head is kept */
            k = k > V / 4 ? V : 4 * k;
        }
        if (nmin < n) n = nmin;                    /* min-p after top-k and top-p, as transformers */
        sum = 0;
        for (int i = 0; i < n; i++) sum += pi[i].p;
    }
    *out = pi;
    *mass = sum;
    return n;
}

/* logits with transformers' repetition penalty over ctx (each distinct id once), in a copy */
static float *penalised(const float *logits, int V, const sk_sampling *sp, const int32_t *ctx, size_t n_ctx) {
    float *lg = malloc(sizeof(float) * V);
    char *seen = calloc(V, 1);
    if (!lg || !seen) { free(lg); free(seen); return NULL; }
    memcpy(lg, logits, sizeof(float) * V);
    for (size_t i = 0; i < n_ctx; i++) {
        int32_t t = ctx[i];
        if (t < 0 || t >= V || seen[t]) continue;
        seen[t] = 1;
        lg[t] = lg[t] < 0.0f ? lg[t] * sp->repetition_penalty : lg[t] / sp->repetition_penalty;
    }
    free(seen);
    return lg;
}

static int argmax(const float *x, int V) {
    int best = 0;
    for (int i = 1; i < V; i++) if (x[i] > x[best]) best = i;
    return best;
}

int sk_sample(const float *logits, int V, const sk_sampling *sp, const int32_t *ctx, size_t n_ctx, uint64_t *rng) {
    const int pen = sp->repetition_penalty != 1.0f && sp->repetition_penalty > 0.0f && n_ctx > 0;
    float *own = pen ? penalised(logits, V, sp, ctx, n_ctx) : NULL;
    const float *lg = own ? own : logits;
    int pick = argmax(lg, V);
    prob_id *pi = NULL;
    double sum;
    int n = sp->temperature > 0.0f ? sample_head(lg, V, sp, &pi, &sum) : 0;
    if (n > 0) {
        sk_rng r = {*rng};
        double u = (sk_rng_u64(&r) >> 11) * (1.0 / 9007199254740992.0) * sum, acc = 0;
        *rng = r.s;
        pick = pi[n - 1].id;
        for (int i = 0; i < n; i++) {
            acc += pi[i].p;
            if (u < acc) { pick = pi[i].id; break; }
        }
    }
    free(pi);
    free(own);
    return pick;
}

int sk_sample_dist(const float *logits, int V, const sk_sampling *sp, const int32_t *ctx, size_t n_ctx, float *probs) {
    const int pen = sp->repetition_penalty != 1.0f && sp->repetition_penalty > 0.0f && n_ctx > 0;
    float *own = pen ? penalised(logits, V, sp, ctx, n_ctx) : NULL;
    if (pen && !own) return sk_error(SK_ENOMEM, "out of memory");
    const float *lg = own ? own : logits;
    memset(probs, 0, sizeof(float) * V);
    if (sp->temperature <= 0.0f) {
        probs[argmax(lg, V)] = 1.0f;
        free(own);
        return SK_OK;
    }
    prob_id *pi = NULL;
    double sum;
    int n = sample_head(lg, V, sp, &pi, &sum);
    free(own);
    if (n == 0) return sk_error(SK_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) probs[pi[i].id] = (float)(pi[i].p / sum);
    free(pi);
    return SK_OK;
}

int sk_sample_token(const float *logits, int V, float temperature, int top_k, float top_p, uint64_t *rng) {
    const sk_sampling sp = {temperature, top_k, top_p, 0.0f, 1.0f};
    return sk_sample(logits, V, &sp, NULL, 0, rng);
}
