/* Tokenizers (docs/data.md): the common API over the three kinds, GPT-2's byte-level BPE
 * (tok_gpt2.c), Hugging Face's tokenizer.json (tok_hf.c, with tok_sp.c for sentencepiece-style
 * files) and the character tokenizer (tok_char.c): loading by path, encoding by kind, decoding,
 * and what a tokenizer is. Their shared parts: tok_common.c (the object, character classes,
 * JSON helpers), tok_bpe.c (byte-level BPE); text/tokenizer_internal.h. */
#include "skiplm_text.h"
#include "base/fileio.h"
#include "base/json.h"
#include "base/utf8.h"
#include "text/nfc.h"
#include "text/tok_impl.h"
#include "text/tokenizer_internal.h"
#include "text/unicode_tables.h"

#include <limits.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---------------------------------------------------------------- common API */

int sk_tok_load(sk_tokenizer **tok, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return sk_error(SK_EIO, "%s: no such tokenizer file or directory", path);
    if (S_ISDIR(st.st_mode)) {
        /* GPT-2's own files first, then a Hugging Face folder's tokenizer.json, then its
         * vocab.json + merges.txt */
        size_t n = strlen(path) + 32;
        char *p = malloc(n);
        if (!p) return sk_error(SK_ENOMEM, "out of memory");
        snprintf(p, n, "%s/encoder.json", path);
        int gpt2 = stat(p, &st) == 0;
        snprintf(p, n, "%s/tokenizer.json", path);
        int rc = !gpt2 && stat(p, &st) == 0 ? sk_tok_load_hf(tok, p) : sk_tok_load_gpt2_dir(tok, path);
        free(p);
        return rc;
    }
    sk_json j;                                  /* a file: tokenizer.json or a char vocabulary */
    int rc = tk_read_json(path, &j);
    if (rc) return rc;
    int hf = j.type == SK_JSON_OBJ && sk_json_get(&j, "model");
    rc = hf ? tk_load_hf(tok, &j, path) : tk_load_char_json(tok, &j, path);
    sk_json_free(&j);
    return rc;
}

int sk_tok_vocab_size(const sk_tokenizer *t) { return t->vocab_size; }
int sk_tok_eot(const sk_tokenizer *t) { return t->eot; }
int sk_tok_is_special(const sk_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->vocab_size) return 0;
    if (t->kind == KIND_GPT2) return id == t->eot;     /* GPT-2's one special token, <|endoftext|> */
    return t->special && t->special[id];
}
const char *sk_tok_kind(const sk_tokenizer *t) { return t->kind == KIND_GPT2 ? "gpt2" : t->kind == KIND_HF ? "hf" : "char"; }

int sk_tok_encode(sk_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n, size_t *cap) {
    if (!t || (!text && len)) return sk_error(SK_EINVAL, "sk_tok_encode: null argument");
    if (t->kind == KIND_GPT2) return tk_gpt2_encode(t, (const uint8_t *)text, len, ids, n, cap);
    if (t->kind == KIND_HF) return tk_hf_encode(t, (const uint8_t *)text, len, ids, n, cap);
    return tk_char_encode(t, (const uint8_t *)text, len, ids, n, cap);
}

const char *sk_tok_decode_one(const sk_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->vocab_size) {
        sk_error(SK_EINVAL, "token id %d out of range [0, %d)", (int)id, t->vocab_size);
        if (len) *len = 0;
        return NULL;
    }
    if (t->dpool) { if (len) *len = t->dlen[id]; return t->dpool + t->doff[id]; }
    if (len) *len = t->len[id];
    return t->pool + t->off[id];
}

int sk_tok_decode(const sk_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *len) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size)
            return sk_error(SK_EINVAL, "token id %d at position %zu out of range [0, %d)", (int)ids[i], i, t->vocab_size);
        total += t->dpool ? t->dlen[ids[i]] : t->len[ids[i]];
    }
    char *o = malloc(total + 1);
    if (!o) return sk_error(SK_ENOMEM, "decode: out of memory");
    size_t p = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l;
        const char *s = sk_tok_decode_one(t, ids[i], &l);
        memcpy(o + p, s, l); p += l;
    }
    o[p] = 0;
    *out = o;
    if (len) *len = p;
    return SK_OK;
}
