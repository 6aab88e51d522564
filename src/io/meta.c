/* The config's fields as safetensors metadata keys (and Hugging Face config.json's values, hf.c):
 * their names, which are floats, and where they lie in sk_config. Shared by weights.c (writing
 * and reading skiplm's metadata) and hf.c (config.json's numbers). See io.h. */
#include "io/io.h"
#include <stddef.h>
#include <string.h>

#define MF(f, isf) { #f, isf, offsetof(sk_config, f) }
const sk_meta_field sk_meta_fields[] = {
    MF(n_layer, 0), MF(n_head, 0), MF(n_kv_head, 0), MF(n_embd, 0), MF(block_size, 0),
    MF(vocab_size, 0), MF(padded_vocab_size, 0), MF(bias, 0), MF(n_skip_layer, 0),
    MF(n_skip_head, 0), MF(ffn_hidden, 0), MF(sinusoidal, 0), MF(relu, 0), MF(untied_head, 0), MF(qkv_bias, 0), MF(dropout, 1), MF(norm_eps, 1), MF(rope_theta, 1),
    MF(rope_factor, 1), MF(rope_low_freq_factor, 1), MF(rope_high_freq_factor, 1), MF(rope_original_ctx, 0),
};
#undef MF
const size_t sk_n_meta_fields = sizeof sk_meta_fields / sizeof sk_meta_fields[0];

int sk_meta_is_float(const char *field) {
    for (size_t i = 0; i < sk_n_meta_fields; i++)
        if (!strcmp(field, sk_meta_fields[i].key)) return sk_meta_fields[i].is_float;
    return 0;
}
