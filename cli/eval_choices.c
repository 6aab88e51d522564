/* skiplm eval --choices FILE.jsonl: multiple-choice evaluation (HellaSwag-style; docs/evaluation.md).
 * Each line is an item: a context, two or more endings and the index of the right one
 * (sk_jsonl_choices). Each ending is scored by the log-likelihood the model gives its tokens
 * after the context's: summed (acc: the highest sum is the answer) and divided by the ending's
 * token count (acc_norm, llm.c's HellaSwag normalisation). The context and each ending are
 * encoded separately (the ending with the delimiter, " " by default, in front: llm.c's and
 * lm-evaluation-harness's rendering), and an item's endings go through the model as one batch
 * (padded on the right, which a causal model never sees). */
#include "cli.h"
#include "generate.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int n;                          /* endings */
    int label, pred, pred_norm;
    double *ll;                     /* summed log-likelihood of each ending */
    int *ntok;                      /* its tokens */
} mc_result;

/* One item: its endings' log-likelihoods into r. 0, or an error (message set). */
static int score_item(sk_model *m, sk_tokenizer *tok, const sk_mc_item *it, const char *delim, mc_result *r) {
    const int Tmax = sk_model_config(m)->block_size, K = it->n_endings;
    int32_t *ctx = NULL, **end = calloc((size_t)K, sizeof *end);
    size_t nc = 0, cc = 0, *ne = calloc((size_t)K, sizeof *ne), cap;
    int32_t *inp = NULL, *tgt = NULL;
    char *buf = NULL;
    int rc = end && ne ? sk_tok_encode(tok, it->context, it->context_len, &ctx, &nc, &cc) : sk_error(SK_ENOMEM, "out of memory");
    if (!rc && nc == 0) rc = sk_error(SK_EINVAL, "the context encodes to no tokens (an ending needs one before it)");
    int T = 0;
    const size_t dl = strlen(delim);
    for (int k = 0; !rc && k < K; k++) {
        free(buf);
        if (!(buf = malloc(dl + it->ending_lens[k] + 1))) { rc = sk_error(SK_ENOMEM, "out of memory"); break; }
        memcpy(buf, delim, dl);
        memcpy(buf + dl, it->endings[k], it->ending_lens[k]);
        cap = 0;
        if ((rc = sk_tok_encode(tok, buf, dl + it->ending_lens[k], &end[k], &ne[k], &cap))) break;
        if (ne[k] == 0) rc = sk_error(SK_EINVAL, "ending %d encodes to no tokens", k);
        else if (ne[k] >= (size_t)Tmax)
            rc = sk_error(SK_EINVAL, "ending %d has %zu tokens: with one token of context that is more than the model's %d", k, ne[k], Tmax);
        /* the context cut from the left where context + ending exceed the model's context */
        size_t keep = nc + ne[k] > (size_t)Tmax ? (size_t)Tmax - ne[k] : nc;
        if (!rc && (int)(keep + ne[k]) > T) T = (int)(keep + ne[k]);
    }
    if (!rc && (!(inp = calloc((size_t)K * T, sizeof *inp)) || !(tgt = malloc((size_t)K * T * sizeof *tgt))))
        rc = sk_error(SK_ENOMEM, "out of memory");
    for (int k = 0; !rc && k < K; k++) {
        const size_t keep = nc + ne[k] > (size_t)Tmax ? (size_t)Tmax - ne[k] : nc, L = keep + ne[k];
        int32_t *x = inp + (size_t)k * T, *y = tgt + (size_t)k * T;
        memcpy(x, ctx + (nc - keep), keep * sizeof *x);
        memcpy(x + keep, end[k], ne[k] * sizeof *x);
        for (int p = 0; p < T; p++) y[p] = -1;
        for (size_t p = keep - 1; p + 1 < L; p++) y[p] = x[p + 1];     /* the ending's tokens, each from what precedes it */
    }
    float loss;
    if (!rc) rc = sk_model_forward(m, inp, tgt, K, T, &loss, NULL);
    const float *l = rc ? NULL : sk_model_losses(m);
    if (!rc && !l) rc = sk_error(SK_EINVAL, "no per-token losses");
    for (int k = 0; !rc && k < K; k++) {
        double s = 0;
        for (int p = 0; p < T; p++) s += tgt[(size_t)k * T + p] >= 0 ? (double)l[(size_t)k * T + p] : 0.0;
        r->ll[k] = -s;
        r->ntok[k] = (int)ne[k];
    }
    if (!rc) {
        r->pred = r->pred_norm = 0;
        for (int k = 1; k < K; k++) {
            if (r->ll[k] > r->ll[r->pred]) r->pred = k;
            if (r->ll[k] / r->ntok[k] > r->ll[r->pred_norm] / r->ntok[r->pred_norm]) r->pred_norm = k;
        }
    }
    for (int k = 0; end && k < K; k++) free(end[k]);
    free(end); free(ne); free(ctx); free(inp); free(tgt); free(buf);
    return rc;
}

/* The per-item results as JSON or (a name ending in .csv) CSV, one row an ending. */
static int write_results(const char *path, const mc_result *res, int n, int acc, int acc_norm) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return sk_error(SK_ENOMEM, "out of memory");
    const size_t pl = strlen(path);
    const int csv = pl >= 4 && !strcmp(path + pl - 4, ".csv");
    if (csv) fputs("item,ending,label,loglik,tokens,loglik_per_token,pred,pred_norm\n", f);
    else fprintf(f, "{\"items\": %d, \"acc\": %.6f, \"acc_norm\": %.6f, \"correct\": %d, \"correct_norm\": %d, \"per_item\": [",
                 n, (double)acc / n, (double)acc_norm / n, acc, acc_norm);
    for (int i = 0; i < n; i++) {
        const mc_result *r = &res[i];
        if (!csv) fprintf(f, "%s\n  {\"item\": %d, \"label\": %d, \"pred\": %d, \"pred_norm\": %d, \"loglik\": [", i ? "," : "", i,
                          r->label, r->pred, r->pred_norm);
        for (int k = 0; k < r->n; k++) {
            if (csv) fprintf(f, "%d,%d,%d,%.9g,%d,%.9g,%d,%d\n", i, k, r->label, r->ll[k], r->ntok[k], r->ll[k] / r->ntok[k], r->pred, r->pred_norm);
            else fprintf(f, "%s%.9g", k ? ", " : "", r->ll[k]);
        }
        if (!csv) {
            fputs("], \"tokens\": [", f);
            for (int k = 0; k < r->n; k++) fprintf(f, "%s%d", k ? ", " : "", r->ntok[k]);
            fputs("]}", f);
        }
    }
    if (!csv) fputs("\n]}\n", f);
    fclose(f);
    int rc = sk_write_atomic(path, buf, len);
    free(buf);
    return rc;
}

int cli_eval_choices(const char *weights, const char *file, const cli_model_opts *mo, const char *tok_path, const char *out,
                     const char *delim, int q8) {
    sk_model *m = NULL;
    sk_tokenizer *tok = NULL;
    char *text = NULL;
    size_t len;
    mc_result *res = NULL;
    int n = 0, cap = 0, acc = 0, acc_norm = 0, rc = 1, line = 0;
    if (gen_load(&m, &tok, weights, mo, tok_path) || (q8 && sk_model_quantize_q8(m)) || cli_read_file(file, &text, &len)) {
        cli_fail("eval");
        goto done;
    }
    const int tty = isatty(2);
    for (char *p = text, *end = text + len; p < end; line++) {
        char *nl = memchr(p, '\n', (size_t)(end - p)), *e = nl ? nl : end;
        const size_t l = (size_t)(e - p);
        char *q = p;
        p = nl ? nl + 1 : end;
        if (strspn(q, " \t\r") >= l) continue;                    /* a blank line */
        sk_mc_item it;
        if (sk_jsonl_choices(q, l, &it)) {
            fprintf(stderr, "skiplm eval: %s:%d: %s\n", file, line + 1, sk_last_error());
            goto done;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            mc_result *nr = realloc(res, (size_t)cap * sizeof *nr);
            if (!nr) { sk_mc_item_free(&it); sk_error(SK_ENOMEM, "out of memory"); cli_fail("eval"); goto done; }
            res = nr;
        }
        mc_result *r = &res[n];
        memset(r, 0, sizeof *r);
        r->n = it.n_endings; r->label = it.label;
        r->ll = malloc((size_t)r->n * sizeof *r->ll);
        r->ntok = malloc((size_t)r->n * sizeof *r->ntok);
        n++;
        int src = r->ll && r->ntok ? score_item(m, tok, &it, delim, r) : sk_error(SK_ENOMEM, "out of memory");
        sk_mc_item_free(&it);
        if (src) { fprintf(stderr, "skiplm eval: %s:%d: %s\n", file, line + 1, sk_last_error()); goto done; }
        acc += r->pred == r->label;
        acc_norm += r->pred_norm == r->label;
        if (tty) fprintf(stderr, "\rchoices: %d items, acc %.4f, acc_norm %.4f", n, (double)acc / n, (double)acc_norm / n);
    }
    if (tty && n) fputc('\n', stderr);
    if (n == 0) { fprintf(stderr, "skiplm eval: %s holds no items\n", file); goto done; }
    printf("choices: %d items, acc %.6f (%d), acc_norm %.6f (%d)\n", n, (double)acc / n, acc, (double)acc_norm / n, acc_norm);
    if (out && write_results(out, res, n, acc, acc_norm)) { cli_fail("eval"); goto done; }
    rc = 0;
done:
    for (int i = 0; i < n; i++) { free(res[i].ll); free(res[i].ntok); }
    free(res); free(text);
    sk_tok_free(tok);
    sk_model_free(m);
    return rc;
}
