/* libFuzzer harness for the command-line option parser and the model config (cli_parse
 * with an option table of every type, sk_config_set through --FIELD VALUE, sk_config_check
 * with the `routing` grammar), and the size parser of serve --kv-memory (sk_parse_bytes, on
 * every argument). The input is argv: arguments separated by NUL bytes.
 * An accepted config's routing plan (sk_route_plan_new) must give every layer runs that
 * cover its heads in order with sources at or below the layer, whose KV groups share their
 * source, and whose source layers store the KV heads they read (and lend, when another
 * layer reads them); sk_config_check must accept the same config. */
#include "cli.h"

#include <stdlib.h>

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    char *buf = malloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = 0;
    char *argv[65]; int argc = 0;
    argv[argc++] = "train";
    for (char *p = buf; p <= buf + size && argc < 64; p += strlen(p) + 1) argv[argc++] = p;
    argv[argc] = NULL;
    for (int i = 1; i < argc; i++) {            /* a size is at least a byte, or refused */
        size_t bytes = 0;
        if (sk_parse_bytes(argv[i], &bytes) == 0 && bytes < 1) abort();
    }

    int steps = 0, b = 0; float lr = 0; uint64_t seed = 0; const char *out = NULL;
    cli_opt opts[] = {
        {"steps", 'i', &steps, "optimizer steps"}, {"lr", 'f', &lr, "learning rate"},
        {"seed", 'u', &seed, "seed"}, {"out", 's', &out, "output"}, {"sla-off", 'b', &b, "a flag"},
        {0},
    };
    char *pos[4]; int np = 0, given = 0;
    sk_config cfg;
    sk_config_default(&cfg);
    int rc = cli_parse(argc, argv, "fuzz", "[options]", opts, pos, 4, &np, &cfg, &given);
    if (rc == 0 && np > 4) abort();
    sk_route_plan *plan;
    if (rc == 0 && sk_route_plan_new(&plan, &cfg) == 0) {
        if (sk_config_check(&cfg)) abort();                /* the plan's check is the config's */
        if (!memchr(cfg.routing, 0, sizeof cfg.routing)) abort();
        int L = cfg.n_layer < 64 ? cfg.n_layer : 64, H = cfg.n_head;
        int group = H / cfg.n_kv_head;
        for (int l = 0; l < L; l++) {
            const sk_route *runs;
            int n = sk_route_plan_runs(plan, l, &runs), h = 0;
            if (n < 1 || n > H) abort();
            for (int i = 0; i < n; i++) {
                if (runs[i].h0 != h || runs[i].nh < 1 || runs[i].src < 0 || runs[i].src > l) abort();
                if (runs[i].h0 % group || runs[i].nh % group) abort();
                /* the source layer stores the KV heads the run reads */
                for (int j = runs[i].h0 / group; j < (runs[i].h0 + runs[i].nh) / group; j++)
                    if (!sk_route_plan_kv_stored(plan, runs[i].src, j)) abort();
                if (runs[i].src != l && !sk_route_plan_lends(plan, runs[i].src)) abort();
                h += runs[i].nh;
            }
            if (h != H) abort();
            if (sk_route_plan_source(plan, l, H - 1) != runs[n - 1].src) abort();
        }
        if (H <= 64 && cfg.n_layer <= 16) {
            char line[4096];
            for (int l = 0; l < cfg.n_layer; l++) sk_route_plan_describe(plan, l, line, sizeof line);
        }
        sk_route_plan_free(plan);
        char desc[512];
        sk_config_describe(&cfg, desc, sizeof desc);
    }
    free(buf);
    return 0;
}
