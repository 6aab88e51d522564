/* libFuzzer harness for the command-line option parser and the model config (cli_parse
 * with an option table of every type, sk_config_set through --FIELD VALUE, sk_config_check
 * with the `routing` grammar), and the size parser of serve --kv-memory (sk_parse_bytes, on
 * every argument). The input is argv: arguments separated by NUL bytes.
 * An accepted config must give every layer a routing whose runs cover its heads in order
 * with sources at or below the layer, and whose KV groups share their source. */
#include "cli.h"
#include "core/config.h"

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
    if (rc == 0 && sk_config_check(&cfg) == 0) {
        if (!memchr(cfg.routing, 0, sizeof cfg.routing)) abort();
        int L = cfg.n_layer < 64 ? cfg.n_layer : 64, H = cfg.n_head;
        int group = H / cfg.n_kv_head;
        sk_route *runs = malloc(sizeof *runs * (size_t)H);
        for (int l = 0; l < L; l++) {
            int n = sk_route_runs(&cfg, l, runs), h = 0;
            if (n < 1 || n > H) abort();
            for (int i = 0; i < n; i++) {
                if (runs[i].h0 != h || runs[i].nh < 1 || runs[i].src < 0 || runs[i].src > l) abort();
                if (runs[i].h0 % group || runs[i].nh % group) abort();
                h += runs[i].nh;
            }
            if (h != H) abort();
            if (H <= 64 && cfg.n_layer <= 16) {
                sk_sla_lends(&cfg, l);
                if (sk_sla_source(&cfg, l, H - 1) != runs[n - 1].src) abort();
            }
        }
        free(runs);
        char desc[512];
        sk_config_describe(&cfg, desc, sizeof desc);
    }
    free(buf);
    return 0;
}
