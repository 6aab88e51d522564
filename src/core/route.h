/* The Skip-Layer routing plan (src/core/route.c): who reads whose K/V, decided once from a
 * config and then only read. The model keeps one (sk_model.plan); training, the KV caches,
 * the CUDA backend, the file exporters and `skiplm info` read it. The public side (the
 * opaque sk_route_plan, sk_route_plan_new, _runs, _describe, ...) is in skiplm_model.h. */
#ifndef SK_ROUTE_INTERNAL_H
#define SK_ROUTE_INTERNAL_H
#include "skiplm_model.h"

/* Every array is per layer l (L of them), in one allocation with the struct. */
struct sk_route_plan {
    int L, H, Hkv, group, hs;     /* layers, query heads, KV heads, H / Hkv, head size */
    int QKV;                      /* row width of the fused q/k/v projection, (H + 2 Hkv) hs */
    int *src;                     /* (L, H): the layer whose own K/V query head h of layer l reads */
    sk_route *runs;               /* (L, H): layer l's runs of consecutive heads with one source
                                     (its attention calls), n_runs[l] of them from runs + l H */
    int *n_runs;                  /* (L) */
    int *slot;                    /* (L, Hkv): KV head j of layer l's place among the KV heads the
                                     layer stores (those some layer reads), or -1: nobody reads it */
    int *n_store;                 /* (L) KV heads stored */
    int *lend_index;              /* (L) 0, 1, ... for the layers some other layer reads, else -1 */
    int n_lenders;
    int *cols;                    /* (L, 1 + 2 Hkv, 2): column ranges (start, width) of the fused
                                     q/k/v projection worth computing: all of q, then the K and V
                                     columns of the stored KV heads, adjacent ranges merged */
    int *n_cols;                  /* (L) */
};

/* Build the plan of a config whose shape fields (n_layer, n_head, n_kv_head, n_embd) are
 * already valid (sk_config_check builds it at its routing step): SK_EINVAL naming the rule
 * and offset of a bad routing table, SK_ENOMEM. */
int sk_route_plan_build(sk_route_plan **plan, const sk_config *cfg);

/* Run `part` of layer l */
static inline const sk_route *sk_route_run(const sk_route_plan *p, int l, int part) {
    return p->runs + (size_t)l * p->H + part;
}
/* Layer l's column ranges of the q/k/v projection: (start, width) pairs, *n of them */
static inline const int *sk_route_cols(const sk_route_plan *p, int l, int *n) {
    *n = p->n_cols[l];
    return p->cols + (size_t)l * (1 + 2 * p->Hkv) * 2;
}
/* 1 if some query head reads another layer's K/V (what files without Skip-Layer Attention
 * cannot hold), with the first such head's layer and source; else 0 */
static inline int sk_route_borrows(const sk_route_plan *p, int *layer, int *src) {
    for (int l = 0; l < p->L; l++)
        for (int h = 0; h < p->H; h++)
            if (p->src[(size_t)l * p->H + h] != l) { *layer = l; *src = p->src[(size_t)l * p->H + h]; return 1; }
    return 0;
}
#endif
