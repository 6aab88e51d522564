/* Test models shared by the decoding tests (test_infer.c, test_q8.c). */
#ifndef SK_TEST_MODELS_H
#define SK_TEST_MODELS_H
#include "skiplm.h"
#include "test.h"

/* A model with larger random weights than the init, so that the logits are not flat and the
 * greedy path is not trivial: every 2-D tensor uniform from seed s, times 0.3. */
static inline sk_model *test_model(const char *name, const sk_config *cfg, unsigned long long s) {
    sk_model *m;
    if (sk_model_new(&m, cfg, 42)) { CHECK(0, "%s: model: %s", name, sk_last_error()); return NULL; }
    float *p = sk_model_params(m);
    int nt; const sk_tensor *ts = sk_model_tensors(m, &nt);
    for (int i = 0; i < nt; i++) if (ts[i].ndim == 2) { fill_uniform(p + ts[i].offset, ts[i].numel, &s);
        for (size_t k = 0; k < ts[i].numel; k++) p[ts[i].offset + k] *= 0.3f; }
    return m;
}

/* sk_kvcache_new_params for max_T positions of n_seq sequences, weights w, K/V stored as t */
static inline int test_kv(sk_kvcache **kv, const sk_model *m, int max_T, int n_seq, sk_weights w, sk_kv_type t) {
    sk_kvcache_params p = sk_kvcache_default_params();
    p.max_T = max_T; p.n_seq = n_seq; p.weights = w; p.kv_type = t;
    return sk_kvcache_new_params(kv, m, &p);
}
#endif
