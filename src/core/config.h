/* Internal parts of the config (src/core/config.c): the check that also hands over the
 * routing plan it builds, and RoPE's frequencies. Used by the model, the CUDA backend and
 * the tests. */
#ifndef SK_CONFIG_INTERNAL_H
#define SK_CONFIG_INTERNAL_H
#include "skiplm_model.h"

/* sk_config_check, keeping the routing plan it builds in *plan (NULL: not kept; set only
 * on success, freed by the caller with sk_route_plan_free). */
int sk_config_check_plan(sk_config *cfg, sk_route_plan **plan);
/* RoPE's inverse frequencies freq[j], j < hs/2: theta^(-2j/hs), rescaled as rope_scaling says
 * (Hugging Face's definitions; computed in double). */
void sk_rope_freqs(const sk_config *cfg, int hs, double *freq);
#endif
