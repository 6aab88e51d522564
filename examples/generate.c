/* Greedy continuation of a prompt with the shared library (docs/library.md):
 *   cc generate.c -Iinclude -Lbuild -lskiplm -o generate
 *   ./generate WEIGHTS TOKENIZER "prompt" N
 * prints the N new tokens' text, what `skiplm sample WEIGHTS --tokenizer TOKENIZER --prompt
 * "prompt" --tokens N --greedy --quiet` prints while prompt and text fit in the context. */
#include <skiplm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: generate WEIGHTS TOKENIZER PROMPT N\n"); return 2; }
    sk_model *m = NULL; sk_tokenizer *tok = NULL; sk_kvcache *kv = NULL;
    int32_t *ids = NULL; size_t n = 0, cap = 0;
    float *logits = NULL;
    int rc = 1, n_new = atoi(argv[4]);
    if (sk_model_load(&m, argv[1], NULL) || sk_tok_load(&tok, argv[2]) ||
        sk_tok_encode(tok, argv[3], strlen(argv[3]), &ids, &n, &cap)) goto out;
    const sk_config *c = sk_model_config(m);
    if (n == 0 || n_new < 1 || (int)n + n_new > c->block_size) { sk_error(SK_EINVAL, "need 1 <= N and prompt + N <= block_size %d", c->block_size); goto out; }
    if (!(logits = malloc(sizeof(float) * c->vocab_size))) { sk_error(SK_ENOMEM, "out of memory"); goto out; }
    sk_kvcache_params kp = sk_kvcache_default_params();   /* fp32 weights and K/V, one sequence */
    kp.max_T = (int)n + n_new;
    if (sk_kvcache_new_params(&kv, m, &kp) || sk_model_decode(m, kv, ids, (int)n, logits)) goto out;   /* the prompt */
    uint64_t rng = 0;
    for (int i = 0; i < n_new; i++) {
        int32_t next = sk_sample_token(logits, c->vocab_size, 0.0f, 0, 1.0f, &rng);   /* temperature 0: argmax */
        size_t len;
        const char *text = sk_tok_decode_one(tok, next, &len);
        if (!text) goto out;
        fwrite(text, 1, len, stdout);
        if (i + 1 < n_new && sk_model_decode(m, kv, &next, 1, logits)) goto out;      /* one token on */
    }
    printf("\n");
    rc = 0;
out:
    if (rc) fprintf(stderr, "generate: %s\n", sk_last_error());
    free(logits); free(ids);
    sk_kvcache_free(kv); sk_tok_free(tok); sk_model_free(m);
    return rc;
}
