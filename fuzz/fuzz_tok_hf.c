/* libFuzzer harness for the tokenizer.json loader (sk_tok_load_hf): the input is the JSON, a
 * NUL byte, then a text. A refused file must name itself and leave no tokenizer; an accepted
 * one must encode any byte string (the text) to ids in range that decode, and give the text
 * back when nothing in the file can change it (no `true` anywhere: no prefix space, no
 * lstrip/rstrip; no NFC normalizer; not sentencepiece-style, whose ▁ in front, unk and
 * Metaspace decoder change the text). */
#include "fuzz_util.h"
#include "skiplm.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t n_json = nul ? (size_t)(nul - data) : size;
    fuzz_file js;
    fuzz_file_open(&js, data, n_json);
    sk_tokenizer *t = NULL;
    int rc = sk_tok_load_hf(&t, js.path);
    fuzz_file_close(&js);
    if (rc) {
        if (t || !strstr(sk_last_error(), js.path)) abort();
        return 0;
    }
    /* sentencepiece-style (Llama 2's): a Metaspace, Prepend or Replace somewhere in the file */
    int sp = memmem(data, n_json, "Metaspace", 9) || memmem(data, n_json, "Prepend", 7) || memmem(data, n_json, "Replace", 7);
    int V = sk_tok_vocab_size(t), eot = sk_tok_eot(t);
    if ((V < 256 && !sp) || eot < -1 || eot >= V || strcmp(sk_tok_kind(t), "hf")) abort();
    const uint8_t *text = nul ? nul + 1 : data;
    size_t tn = nul ? size - n_json - 1 : size;
    int exact = !memmem(data, n_json, "true", 4) && !memmem(data, n_json, "NFC", 3) && !sp;   /* NFC changes the text */
    for (int pass = 0; pass < 2; pass++) {          /* the second pass hits the BPE cache */
        int32_t *ids = NULL; size_t n = 0, cap = 0;
        if (sk_tok_encode(t, (const char *)text, tn, &ids, &n, &cap)) abort();   /* never refuses */
        for (size_t i = 0; i < n; i++) if (ids[i] < 0 || ids[i] >= V) abort();
        char *out; size_t len;
        if (sk_tok_decode(t, ids, n, &out, &len)) abort();
        if (exact && (len != tn || memcmp(out, text, tn))) abort();
        free(out); free(ids);
    }
    sk_tok_free(t);
    return 0;
}
