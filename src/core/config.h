/* Internal queries on a config's Skip-Layer routing and RoPE (src/core/config.c), used by
 * the model, the KV cache, the CUDA backend and the tests. The public part (sk_route_runs,
 * sk_sla_lends) is in skiplm_model.h. */
#ifndef SK_CONFIG_INTERNAL_H
#define SK_CONFIG_INTERNAL_H
#include "skiplm_model.h"

/* Validate the routing (part of sk_config_check). */
int sk_route_check(const sk_config *cfg);
/* The layer whose own K/V query head h of layer l reads. */
int sk_sla_source(const sk_config *cfg, int layer, int head);
/* 1 if KV head kv_head of layer l is read by some layer (by_others_only: other than l). */
int sk_kv_read(const sk_config *cfg, int layer, int kv_head, int by_others_only);
/* RoPE's inverse frequencies freq[j], j < hs/2: theta^(-2j/hs), rescaled as rope_scaling says
 * (Hugging Face's definitions; computed in double). */
void sk_rope_freqs(const sk_config *cfg, int hs, double *freq);
#endif
