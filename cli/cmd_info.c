/* skiplm info: describe a model config (a preset and model options, or the config of a
 * weights file): the config line, the parameter count, the training memory at a batch and
 * sequence length, the KV cache's bytes at that length, and the skip-layer routing plan of
 * every layer (which layer each run of query heads takes its K/V from, which KV heads the
 * layer stores and their bytes per token, whether a later layer reads them). */
#include "cli.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void describe(const sk_config *c, int B, int T) {
    char buf[256];
    sk_config_describe(c, buf, sizeof buf);
    printf("config: %s\n", buf);
    sk_model *m;
    if (sk_model_new_empty(&m, c)) { printf("(cannot build: %s)\n", sk_last_error()); return; }
    int n;
    const sk_tensor *ts = sk_model_tensors(m, &n);
    size_t real = 0;
    for (int i = 0; i < n; i++) real += ts[i].numel;
    printf("parameters: %zu (%.2fM; buffer %zu floats with the padded vocabulary %d)\n", real, real / 1e6,
           sk_model_num_params(m), sk_model_config(m)->padded_vocab_size);
    size_t act = sk_model_activation_bytes(m, B, T, 1);
    printf("training memory at B=%d T=%d: activations %.1f MiB (%zu bytes per token), params+grads+adam %.1f MiB\n",
           B, T, act / 1048576.0, act / ((size_t)B * T), 4.0 * sk_model_num_params(m) * 4 / 1048576.0);
    /* the decoder's own count of the K/V it keeps: a one-position cache, times T */
    sk_kvcache *kv;
    sk_kvcache_params kp = sk_kvcache_default_params();
    kp.max_T = 1;
    if (sk_kvcache_new_params(&kv, m, &kp) == SK_OK) {
        printf("KV cache at T=%d: %zu bytes fp32 (%zu per position; %zu without skip-layer sharing)\n", T,
               sk_kvcache_bytes(kv) * T, sk_kvcache_bytes(kv), sk_kvcache_bytes_full(kv));
        printf("KV cache per position and sequence: %zu bytes fp32, %zu bf16 (--kv-bf16): what serve --kv-memory divides by\n",
               sk_kvcache_bytes_per_token(m, SK_KV_F32), sk_kvcache_bytes_per_token(m, SK_KV_BF16));
        sk_kvcache_free(kv);
    }
    /* the model's routing plan, as the devices read it */
    printf("skip-layer routing plan (per layer: query heads -> the layer whose K/V they read; the KV heads "
           "stored because some layer reads them, in fp32 bytes per token):\n");
    const sk_route_plan *plan = sk_route_plan_of(m);
    size_t n_line = 64 + 48 * ((size_t)c->n_head + c->n_kv_head);   /* every run and stored range */
    char *line = malloc(n_line);
    if (!line) printf("(out of memory for the routing plan's lines)\n");
    for (int l = 0; line && l < c->n_layer; l++) {
        sk_route_plan_describe(plan, l, line, n_line);
        printf("  layer %2d: %s\n", l, line);
    }
    free(line);
    sk_model_free(m);
}

int cmd_info(int argc, char **argv) {
    int B = 1, T = 0;
    cli_opt opts[] = {
        {"batch", 'i', &B, "batch size for the memory estimate (1)"},
        {"seq", 'i', &T, "sequence length for the memory estimate (block_size)"},
        {0},
    };
    sk_config cfg;
    sk_config_default(&cfg);
    char *pos[1]; int np, given;
    int rc = cli_parse(argc, argv, "info", "[WEIGHTS] [model options]", opts, pos, 1, &np, &cfg, &given);
    if (rc) return rc == 1 ? 0 : rc;
    if (np == 1) {
        sk_config fc;
        if (sk_config_from_file(&fc, pos[0])) return cli_fail("info");
        cfg = fc;
    }
    if (cfg.vocab_size == 0) cfg.vocab_size = 50257;
    if (sk_config_check(&cfg)) return cli_fail("info");
    describe(&cfg, B, T > 0 ? T : cfg.block_size);
    return 0;
}
