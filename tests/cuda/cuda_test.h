/* Helpers shared by the CUDA parity tests (test_cuda_parity.c, test_cuda_infer.c). */
#ifndef SK_CUDA_TEST_H
#define SK_CUDA_TEST_H
#include "skiplm.h"
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* A config from sk_config_default and "key=value key=value ..." (sk_config_set), checked;
 * 0, or -1 / an error code with sk_error's message. */
static inline int test_config(const char *fields, sk_config *cfg) {
    sk_config_default(cfg);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", fields);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        if (!eq) return -1;
        *eq = 0;
        if (sk_config_set(cfg, tok, eq + 1)) return -1;
    }
    return sk_config_check(cfg);
}

/* The LCG both tests draw tokens from: one step, then a token in [0, V). */
static inline uint64_t test_lcg(uint64_t *r) {
    *r = *r * 6364136223846793005ULL + 1442695040888963407ULL;
    return *r;
}
static inline uint64_t test_lcg_seed(uint64_t seed) { return seed * 2654435761ULL + 1; }
#define TEST_TOKEN(r, V) ((int32_t)((test_lcg(r) >> 33) % (uint64_t)(V)))
#endif
