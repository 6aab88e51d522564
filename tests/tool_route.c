/* Test driver for tests/test_route_plan.py: the routing plan of configs, as JSON.
 *   tool_route < CONFIGS   one config a line, tab-separated key=value fields (sk_config_set's
 *                          names; vocab_size defaults to 64); one JSON object a line out:
 *                          {"error": MESSAGE} for a config sk_route_plan_new refuses, else the
 *                          plan: "src" (L x H), "runs" (per layer [h0, nh, src]), "stored"
 *                          (L x Hkv, sk_route_plan_kv_stored), "lends" (L), "kv_bytes" (L),
 *                          "lines" (sk_route_plan_describe), and from the internal struct
 *                          "slot" (L x Hkv), "n_store", "lend_index", "n_lenders" and "cols"
 *                          (per layer [start, width] pairs). A model built from the same config
 *                          must hold the same plan (checked here: "model_same"). */
#include "skiplm.h"
#include "core/route.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* a JSON string (the messages and lines are ASCII; quotes and backslashes escaped) */
static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') putchar('\\');
        putchar(*s);
    }
    putchar('"');
}

/* 1 if the two plans hold the same tables */
static int same_plan(const sk_route_plan *a, const sk_route_plan *b) {
    if (a->L != b->L || a->H != b->H || a->Hkv != b->Hkv || a->n_lenders != b->n_lenders) return 0;
    size_t LH = (size_t)a->L * a->H, LK = (size_t)a->L * a->Hkv, nc = (size_t)a->L * (1 + 2 * a->Hkv) * 2;
    return !memcmp(a->src, b->src, LH * sizeof(int)) && !memcmp(a->n_runs, b->n_runs, a->L * sizeof(int)) &&
           !memcmp(a->slot, b->slot, LK * sizeof(int)) && !memcmp(a->lend_index, b->lend_index, a->L * sizeof(int)) &&
           !memcmp(a->n_cols, b->n_cols, a->L * sizeof(int)) && !memcmp(a->cols, b->cols, nc * sizeof(int));
}

static void print_plan(const sk_route_plan *p, int same) {
    const int L = p->L, H = p->H, K = p->Hkv;
    printf("{\"src\": [");
    for (int l = 0; l < L; l++) {
        printf("%s[", l ? ", " : "");
        for (int h = 0; h < H; h++) printf("%s%d", h ? ", " : "", sk_route_plan_source(p, l, h));
        printf("]");
    }
    printf("], \"runs\": [");
    for (int l = 0; l < L; l++) {
        const sk_route *r;
        int n = sk_route_plan_runs(p, l, &r);
        printf("%s[", l ? ", " : "");
        for (int i = 0; i < n; i++) printf("%s[%d, %d, %d]", i ? ", " : "", r[i].h0, r[i].nh, r[i].src);
        printf("]");
    }
    printf("], \"stored\": [");
    for (int l = 0; l < L; l++) {
        printf("%s[", l ? ", " : "");
        for (int j = 0; j < K; j++) printf("%s%d", j ? ", " : "", sk_route_plan_kv_stored(p, l, j));
        printf("]");
    }
    printf("], \"slot\": [");
    for (int l = 0; l < L; l++) {
        printf("%s[", l ? ", " : "");
        for (int j = 0; j < K; j++) printf("%s%d", j ? ", " : "", p->slot[(size_t)l * K + j]);
        printf("]");
    }
    printf("], \"n_store\": [");
    for (int l = 0; l < L; l++) printf("%s%d", l ? ", " : "", p->n_store[l]);
    printf("], \"lends\": [");
    for (int l = 0; l < L; l++) printf("%s%d", l ? ", " : "", sk_route_plan_lends(p, l));
    printf("], \"lend_index\": [");
    for (int l = 0; l < L; l++) printf("%s%d", l ? ", " : "", p->lend_index[l]);
    printf("], \"n_lenders\": %d, \"kv_bytes\": [", p->n_lenders);
    for (int l = 0; l < L; l++) printf("%s%zu", l ? ", " : "", sk_route_plan_kv_bytes(p, l));
    printf("], \"cols\": [");
    for (int l = 0; l < L; l++) {
        int n;
        const int *c = sk_route_cols(p, l, &n);
        printf("%s[", l ? ", " : "");
        for (int i = 0; i < n; i++) printf("%s[%d, %d]", i ? ", " : "", c[2 * i], c[2 * i + 1]);
        printf("]");
    }
    printf("], \"lines\": [");
    size_t nb = 64 + 48 * ((size_t)H + K);
    char *line = malloc(nb);
    for (int l = 0; line && l < L; l++) {
        sk_route_plan_describe(p, l, line, nb);
        printf("%s", l ? ", " : "");
        json_str(line);
    }
    free(line);
    printf("], \"model_same\": %d}\n", same);
}

int main(void) {
    char buf[4096];
    while (fgets(buf, sizeof buf, stdin)) {
        buf[strcspn(buf, "\n")] = 0;
        sk_config c;
        sk_config_default(&c);
        c.vocab_size = 64;
        int rc = SK_OK;
        for (char *f = strtok(buf, "\t"); f && !rc; f = strtok(NULL, "\t")) {
            char *eq = strchr(f, '=');
            if (!eq) { rc = sk_error(SK_EINVAL, "tool_route: field '%s' has no '='", f); break; }
            *eq = 0;
            rc = sk_config_set(&c, f, eq + 1);
        }
        sk_route_plan *p = NULL;
        if (!rc) rc = sk_route_plan_new(&p, &c);
        if (rc) {
            printf("{\"error\": ");
            json_str(sk_last_error());
            printf("}\n");
            continue;
        }
        /* the model's own plan, built with it, must be the same */
        sk_model *m;
        int same = sk_model_new_empty(&m, &c) == SK_OK;
        if (same) { same = same_plan(p, sk_route_plan_of(m)); sk_model_free(m); }
        print_plan(p, same);
        sk_route_plan_free(p);
    }
    return 0;
}
