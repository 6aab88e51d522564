/* The mean loss (nats per token) of a model on a text, with the shared library
 * (docs/library.md): each token after the first predicted from those before it.
 *   cc score.c -Iinclude -Lbuild -lskiplm -o score
 *   ./score WEIGHTS TOKENIZER "text"      prints: loss L tokens N
 * The text must fit the model's context: 2 to block_size + 1 tokens. */
#include <skiplm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: score WEIGHTS TOKENIZER TEXT\n"); return 2; }
    sk_model *m = NULL; sk_tokenizer *tok = NULL;
    int32_t *ids = NULL; size_t n = 0, cap = 0;
    int rc = 1;
    float loss;
    if (sk_model_load(&m, argv[1], NULL) || sk_tok_load(&tok, argv[2]) ||
        sk_tok_encode(tok, argv[3], strlen(argv[3]), &ids, &n, &cap)) goto out;
    const int T = (int)n - 1, block = sk_model_config(m)->block_size;
    if (T < 1 || T > block) { sk_error(SK_EINVAL, "the text has %zu tokens: it needs 2 to %d", n, block + 1); goto out; }
    /* inputs ids[0..T), targets ids[1..T]: one batch row */
    if (sk_model_forward(m, ids, ids + 1, 1, T, &loss, NULL)) goto out;
    printf("loss %.6f tokens %d\n", loss, T);
    rc = 0;
out:
    if (rc) fprintf(stderr, "score: %s\n", sk_last_error());
    free(ids);
    sk_tok_free(tok); sk_model_free(m);
    return rc;
}
