/* libFuzzer harness for the weights and checkpoint loader: sk_model_load_st on a fuzzed
 * safetensors image (sk_st_read_mem: the same checks as a file), seeded with small valid
 * model files and a checkpoint. Models are capped at 16 MB by sk_set_memory_limit, so a
 * config asking for more must be refused up front. An accepted model runs a forward pass
 * and sk_train_cfg_from_st / sk_trainer_resume see the same image as a checkpoint; an 8-bit
 * (quantized) one also decodes two tokens with its 8-bit weights. */
#include "base/fileio.h"
#include "fuzz_util.h"
#include "skiplm.h"
#include "io/io.h"

#include <math.h>
#include <string.h>

static char shard_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    sk_set_memory_limit((size_t)16 << 20);
    /* a shard of 4096 tokens 0..7, enough windows for one batch of any small T */
    static int32_t ids[4096];
    for (int i = 0; i < 4096; i++) ids[i] = (i * 5) % 8;
    int32_t header[SK_SHARD_HEADER_INTS] = { SK_SHARD_MAGIC, SK_SHARD_VERSION, 4096 };
    static uint16_t tok[4096];
    for (int i = 0; i < 4096; i++) tok[i] = (uint16_t)ids[i];
    static fuzz_file f;
    uint8_t *img = malloc(sizeof header + sizeof tok);
    memcpy(img, header, sizeof header); memcpy(img + sizeof header, tok, sizeof tok);
    fuzz_file_open(&f, img, sizeof header + sizeof tok);
    free(img);
    snprintf(shard_path, sizeof shard_path, "%s", f.path);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sk_safetensors st;
    if (sk_st_read_mem(data, size, "fuzz.safetensors", &st)) return 0;
    sk_model *m = NULL;
    if (sk_model_load_st(&m, &st, "fuzz.safetensors", NULL)) {
        if (m || !strstr(sk_last_error(), "fuzz.safetensors")) abort();
        sk_st_free(&st);
        return 0;
    }
    const sk_config *c = sk_model_config(m);
    int T = fuzz_forward(m);
    /* an 8-bit file: its int8 values and scales through the decoding kernel */
    if (sk_model_q8(m)) {
        sk_kvcache *kv;
        float *lg = malloc(sizeof(float) * c->vocab_size);
        int32_t tok[2] = {0, 1 % c->vocab_size};
        if (lg && sk_kvcache_new_params(&kv, m, &(sk_kvcache_params){.max_T = 2 < c->block_size ? 2 : c->block_size, .n_seq = 1, .weights = SK_WEIGHTS_Q8}) == 0) {
            sk_model_decode(m, kv, tok, 2 < c->block_size ? 2 : c->block_size, lg);
            sk_kvcache_free(kv);
        }
        free(lg);
    }
    /* the same image as a checkpoint */
    sk_train_cfg tc;
    sk_train_default(&tc);
    tc.T = T; tc.B = 1; tc.steps = 1 << 20;
    if (sk_train_cfg_from_st(&tc, &st, "fuzz.safetensors") == 0 && c->vocab_size >= 8) {
        tc.T = T; tc.B = 1;
        sk_loader_cfg lc = { .B = 1, .T = T, .seed = tc.seed, .shuffle = tc.shuffle };
        const char *paths[1] = { shard_path };
        sk_loader *L;
        sk_trainer *tr;
        if (sk_loader_open(&L, paths, 1, &lc) == 0) {
            if (sk_trainer_new(&tr, m, &tc, L, NULL) == 0) {
                sk_trainer_resume(tr, &st, "fuzz.safetensors");
                sk_trainer_free(tr);
            }
            sk_loader_free(L);
        }
    }
    sk_model_free(m);
    sk_st_free(&st);
    return 0;
}
