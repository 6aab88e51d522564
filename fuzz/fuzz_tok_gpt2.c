/* libFuzzer harness for the GPT-2 tokenizer loader (sk_tok_load_gpt2): the input is
 * encoder.json, a NUL byte, then vocab.bpe. An accepted pair must encode any byte string
 * (here: the input) to ids in range that decode back to the same bytes. */
#include "fuzz_util.h"
#include "skiplm.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t n_enc = nul ? (size_t)(nul - data) : size;
    fuzz_file enc, bpe;
    fuzz_file_open(&enc, data, n_enc);
    fuzz_file_open(&bpe, nul ? nul + 1 : data, nul ? size - n_enc - 1 : 0);
    sk_tokenizer *t = NULL;
    int rc = sk_tok_load_gpt2(&t, enc.path, bpe.path);
    fuzz_file_close(&enc); fuzz_file_close(&bpe);
    if (rc) {
        if (t || (!strstr(sk_last_error(), enc.path) && !strstr(sk_last_error(), bpe.path))) abort();
        return 0;
    }
    int V = sk_tok_vocab_size(t), eot = sk_tok_eot(t);
    if (V < 256 || eot < -1 || eot >= V) abort();
    const uint8_t *text = nul ? nul + 1 : data;
    size_t tn = nul ? size - n_enc - 1 : size;
    for (int pass = 0; pass < 2; pass++) {          /* the second pass hits the BPE cache */
        int32_t *ids = NULL; size_t n = 0, cap = 0;
        if (sk_tok_encode(t, (const char *)text, tn, &ids, &n, &cap)) abort();   /* byte-level: never refuses */
        for (size_t i = 0; i < n; i++) if (ids[i] < 0 || ids[i] >= V) abort();
        char *out; size_t len;
        if (sk_tok_decode(t, ids, n, &out, &len) || len != tn || memcmp(out, text, tn)) abort();
        free(out); free(ids);
    }
    sk_tok_free(t);
    return 0;
}
