/* Helper for tests/test_sampling_torch.py: the distribution skiplm samples from.
 *   tool_sample V N_CTX TEMPERATURE TOP_K TOP_P MIN_P PENALTY LOGITS.bin CTX.bin OUT.bin
 * reads V float32 logits and N_CTX int32 context ids, writes the V float32 probabilities of
 * sk_sample_dist; then draws tokens with sk_sample (seed 1; 200, fewer for a large V) and exits
 * 3 if one falls outside that distribution's support. */
#include "skiplm.h"

#include <stdio.h>
#include <stdlib.h>

static int read_all(const char *path, void *buf, size_t bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) return 1;
    size_t got = fread(buf, 1, bytes, f);
    fclose(f);
    return got != bytes;
}

int main(int argc, char **argv) {
    if (argc != 11) { fprintf(stderr, "usage: tool_sample V N_CTX T TOP_K TOP_P MIN_P PENALTY LOGITS CTX OUT\n"); return 1; }
    int V = atoi(argv[1]);
    size_t n_ctx = (size_t)atol(argv[2]);
    sk_sampling sp = {(float)atof(argv[3]), atoi(argv[4]), (float)atof(argv[5]), (float)atof(argv[6]), (float)atof(argv[7])};
    float *logits = malloc(sizeof(float) * V), *probs = malloc(sizeof(float) * V);
    int32_t *ctx = malloc(sizeof(int32_t) * (n_ctx + 1));
    if (!logits || !probs || !ctx || read_all(argv[8], logits, sizeof(float) * V) ||
        read_all(argv[9], ctx, sizeof(int32_t) * n_ctx)) { fprintf(stderr, "cannot read the inputs\n"); return 1; }
    if (sk_sample_dist(logits, V, &sp, ctx, n_ctx, probs)) { fprintf(stderr, "%s\n", sk_last_error()); return 2; }
    FILE *f = fopen(argv[10], "wb");
    if (!f || fwrite(probs, sizeof(float), V, f) != (size_t)V || fclose(f)) { fprintf(stderr, "cannot write\n"); return 1; }
    uint64_t rng = 1;
    for (int i = 0, draws = V > 10000 ? 20 : 200; i < draws; i++) {
        int t = sk_sample(logits, V, &sp, ctx, n_ctx, &rng);
        if (t < 0 || t >= V || probs[t] == 0.0f) { fprintf(stderr, "drew %d outside the distribution\n", t); return 3; }
    }
    free(logits); free(probs); free(ctx);
    return 0;
}
