/* libFuzzer harness for the character vocabulary loader (sk_tok_load_char). An accepted
 * vocabulary must encode its own characters and decode back to the same bytes; any text
 * is either encoded and round-trips, or refused with a message. */
#include "fuzz_util.h"
#include "skiplm.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_file f;
    fuzz_file_open(&f, data, size);
    sk_tokenizer *t = NULL;
    if (sk_tok_load_char(&t, f.path)) {
        if (!strstr(sk_last_error(), f.path) || t) abort();
        fuzz_file_close(&f);
        return 0;
    }
    fuzz_file_close(&f);
    int V = sk_tok_vocab_size(t);
    if (V < 1 || sk_tok_eot(t) != -1) abort();
    /* every id decodes to one character that encodes back to the same id */
    for (int32_t id = 0; id < V; id++) {
        size_t len;
        const char *b = sk_tok_decode_one(t, id, &len);
        if (!b || len == 0 || len > 4) abort();
        int32_t *ids = NULL; size_t n = 0, cap = 0;
        if (sk_tok_encode(t, b, len, &ids, &n, &cap) || n != 1 || ids[0] != id) abort();
        free(ids);
    }
    if (sk_tok_decode_one(t, V, NULL) != NULL || sk_tok_decode_one(t, -1, NULL) != NULL) abort();
    /* the input itself as text */
    int32_t *ids = NULL; size_t n = 0, cap = 0;
    if (sk_tok_encode(t, (const char *)data, size, &ids, &n, &cap) == 0) {
        char *out; size_t len;
        if (sk_tok_decode(t, ids, n, &out, &len) || len != size || memcmp(out, data, size)) abort();
        free(out);
    }
    free(ids);
    sk_tok_free(t);
    return 0;
}
