/* Sentencepiece-style BPE in a tokenizer.json (Llama 2's, Mistral's): its normalizer,
 * Metaspace pre-tokenizer and decoder, its tokens, and the encoding of a stretch of text. */
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

/* ------------------------------------------- sentencepiece-style BPE (Llama 2's)
 *
 * Llama 2, TinyLlama, Mistral and llama2.c's files: no byte-level alphabet. A stretch of text
 * between added tokens has its spaces replaced by U+2581 ("▁") and gets a ▁ in front, either
 * by the normalizer Sequence[Prepend("▁"), Replace(" ", "▁")] (older conversions, every
 * non-empty stretch) or by the Metaspace pre-tokenizer (split: false; prepend_scheme "always":
 * every stretch not starting with ▁; "first": only the stretch at the start of the input;
 * "never"). The whole stretch is then one BPE word whose first symbols are its Unicode
 * characters; a character outside the vocabulary becomes the <0xXX> tokens of its UTF-8
 * bytes (byte_fallback) or the unk token (runs of them one unk with fuse_unk). Decoding: ▁ is
 * a space and <0xXX> its byte (the ByteFallback decoder). */

#define META "\xe2\x96\x81"                     /* U+2581, sentencepiece's space */

/* Replace whose pattern is the String `from` and whose content is `to` */
static int sp_replace_is(const sk_json *r, const char *from, const char *to) {
    const sk_json *pat = sk_json_get(r, "pattern");
    return tk_json_is(r, "Replace") && pat && pat->type == SK_JSON_OBJ && pat->n == 1 && tk_json_str_is(pat, "String", from) &&
           tk_json_str_is(r, "content", to);
}

static int sp_refuse(const char *path, const char *what, const sk_json *v, const char *want) {
    const sk_json *ty = v && v->type == SK_JSON_OBJ ? sk_json_get(v, "type") : NULL;
    return sk_error(SK_EFORMAT, "%s: %s%s%s is not supported (skiplm reads sentencepiece-style BPE as Llama 2's: %s)", path,
                    what, ty && ty->type == SK_JSON_STR ? " of type " : "", ty && ty->type == SK_JSON_STR ? ty->str : "", want);
}

/* The normalizer of a sentencepiece-style file: null, Prepend("▁"), Replace(" " -> "▁") or a
 * Sequence of these two (each at most once; either order gives the same text). */
int tk_sp_normalizer(const sk_json *norm, const char *path, int *prepend, int *replace) {
    static const char want[] = "a normalizer Prepend(\"\\u2581\") and/or Replace(\" \" -> \"\\u2581\"), alone or in a Sequence";
    *prepend = *replace = 0;
    if (!norm || norm->type == SK_JSON_NULL) return SK_OK;
    const sk_json *one = norm, *seq = NULL;
    int n = 1;
    if (tk_json_is(norm, "Sequence")) {
        seq = sk_json_get(norm, "normalizers");
        if (!seq || seq->type != SK_JSON_ARR) return sp_refuse(path, "the normalizer Sequence without \"normalizers\"", NULL, want);
        n = seq->n;
    }
    for (int i = 0; i < n; i++) {
        const sk_json *x = seq ? &seq->items[i] : one;
        if (tk_json_is(x, "Prepend") && tk_json_str_is(x, "prepend", META) && !*prepend) *prepend = 1;
        else if (sp_replace_is(x, " ", META) && !*replace) *replace = 1;
        else return sp_refuse(path, seq ? "the normalizer in the Sequence" : "the normalizer", x, want);
    }
    return SK_OK;
}

/* Metaspace pre-tokenizer: replacement "▁", split false (transformers.js never splits; the Rust
 * library splits before every ▁ with true, its default), a prepend_scheme. 0 or an error. */
int tk_sp_metaspace(const sk_json *pre, const char *path, int *scheme) {
    static const char want[] = "Metaspace with replacement \"\\u2581\", split false and prepend_scheme first, always or never";
    const sk_json *split = sk_json_get(pre, "split"), *str_rep = sk_json_get(pre, "str_rep");
    if (!tk_json_str_is(pre, "replacement", META) || (str_rep && !tk_json_str_is(pre, "str_rep", META)))
        return sp_refuse(path, "the pre-tokenizer Metaspace with another replacement", NULL, want);
    if (!split || split->type != SK_JSON_BOOL || split->boolean)
        return sp_refuse(path, "the pre-tokenizer Metaspace with split true (or no \"split\")", NULL, want);
    *scheme = tk_json_str_is(pre, "prepend_scheme", "always") ? SP_ALWAYS : tk_json_str_is(pre, "prepend_scheme", "first") ? SP_FIRST
            : tk_json_str_is(pre, "prepend_scheme", "never") ? SP_NEVER : 0;
    if (!*scheme) return sp_refuse(path, "the pre-tokenizer Metaspace without a prepend_scheme of first, always or never", NULL, want);
    return SK_OK;
}

/* Decoder: Sequence[Replace("▁" -> " "), ByteFallback, Fuse, optional Strip(" ", start <= 1,
 * stop 0)] (sets *bytes: <0xXX> decodes to its byte), or Metaspace("▁") (<0xXX> stays text). */
int tk_sp_decoder(const sk_json *dec, const char *path, int *bytes) {
    static const char want[] = "a decoder Sequence[Replace(\"\\u2581\" -> \" \"), ByteFallback, Fuse, Strip(\" \", 1, 0)] or Metaspace";
    *bytes = 0;
    if (tk_json_is(dec, "Metaspace")) {
        if (!tk_json_str_is(dec, "replacement", META)) return sp_refuse(path, "the decoder Metaspace with another replacement", NULL, want);
        return SK_OK;
    }
    const sk_json *seq = tk_json_is(dec, "Sequence") ? sk_json_get(dec, "decoders") : NULL;
    if (!seq || seq->type != SK_JSON_ARR) return sp_refuse(path, "the decoder", dec, want);
    for (int i = 0; i < seq->n; i++) {
        const sk_json *x = &seq->items[i], *start = sk_json_get(x, "start"), *stop = sk_json_get(x, "stop");
        int ok = i == 0 ? sp_replace_is(x, META, " ") : i == 1 ? tk_json_is(x, "ByteFallback") : i == 2 ? tk_json_is(x, "Fuse")
               : i == 3 && tk_json_is(x, "Strip") && tk_json_str_is(x, "content", " ") && start && start->type == SK_JSON_NUM &&
                 (start->num == 0 || start->num == 1) && stop && stop->type == SK_JSON_NUM && stop->num == 0;
        if (!ok) return sp_refuse(path, "the decoder in the Sequence", x, want);
    }
    if (seq->n < 3) return sp_refuse(path, "a decoder Sequence this short", NULL, want);
    *bytes = 1;
    return SK_OK;
}

static int dpool_set(sk_tokenizer *t, int id, const char *s, size_t n) {
    if (sk_grow((void **)&t->dpool, &t->dpool_cap, t->dpool_len + n + 1, 1)) return 1;
    char *o = t->dpool + t->dpool_len;
    memcpy(o, s, n);
    o[n] = 0;
    t->doff[id] = (uint32_t)t->dpool_len; t->dlen[id] = (uint32_t)n;
    t->dpool_len += n + 1;
    return 0;
}

static int hex_digit(int c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; }

/* A sentencepiece-style file once its vocabulary and added tokens are in: the byte tokens
 * <0x00>..<0xFF> (byte_fallback), the unk token, and every token's decoded text (▁ as a
 * space; <0xXX> as its byte when the decoder has ByteFallback, which like the Rust library
 * reads any "<0x" + two hex digits + ">"). */
int tk_sp_tokens(sk_tokenizer *t, const sk_json *model, const char *path, int dec_bytes) {
    const sk_json *unk = sk_json_get(model, "unk_token");
    t->byte_fallback = tk_json_flag(model, "byte_fallback", 0);
    t->fuse_unk = tk_json_flag(model, "fuse_unk", 0);
    t->unk = unk && unk->type == SK_JSON_STR ? tk_vocab_find(t, (const uint8_t *)unk->str, unk->str_len) : -1;
    for (int b = 0; b < 256 && t->byte_fallback; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        if ((t->byte_id[b] = tk_vocab_find(t, (const uint8_t *)name, 6)) < 0)
            return sk_error(SK_EFORMAT, "%s: model.byte_fallback without the token \"%s\" is not supported (it needs all 256, "
                            "<0x00> to <0xFF>)", path, name);
    }
    if (!t->byte_fallback && t->unk < 0)
        return sk_error(SK_EFORMAT, "%s: model.unk_token %s: without byte_fallback a character outside the vocabulary needs it "
                        "(not supported)", path, unk && unk->type == SK_JSON_STR ? "is not in model.vocab" : "is missing");
    t->doff = malloc((size_t)t->vocab_size * sizeof *t->doff);
    t->dlen = malloc((size_t)t->vocab_size * sizeof *t->dlen);
    char *tmp = malloc(t->pool_len + 1);
    int rc = !t->doff || !t->dlen || !tmp;
    for (int id = 0; id < t->vocab_size && !rc; id++) {
        const char *s = t->pool + t->off[id];
        size_t n = t->len[id], o = 0;
        if (dec_bytes && n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && hex_digit(s[3]) >= 0 && hex_digit(s[4]) >= 0)
            tmp[o++] = (char)(hex_digit(s[3]) * 16 + hex_digit(s[4]));
        else
            for (size_t i = 0; i < n;) {
                if (n - i >= 3 && !memcmp(s + i, META, 3)) { tmp[o++] = ' '; i += 3; }
                else tmp[o++] = s[i++];
            }
        rc = dpool_set(t, id, tmp, o);
    }
    free(tmp);
    return rc ? sk_error(SK_ENOMEM, "%s: out of memory", path) : SK_OK;
}

/* The ids of a sentencepiece-style word w[0..len) (a whole normalized stretch), appended:
 * its characters (an invalid UTF-8 byte is a character of its own) looked up in the
 * vocabulary, bpe_merge_hf over them, then each character left outside the vocabulary as the
 * <0xXX> ids of its bytes, or as unk (one unk for a run of them with fuse_unk, as
 * transformers.js fuses the unks of a word's output). Words up to CACHE_MAX_WORD bytes go
 * through the cache; longer ones (a document without added tokens is one word) use
 * 3 ints, 3 int64 and an offset per character. */
static int sp_word(sk_tokenizer *t, const uint8_t *w, size_t len, int32_t **ids, size_t *cnt, size_t *cap) {
    size_t ins = 0, hit;
    uint64_t h = 0;
    int cached = len <= CACHE_MAX_WORD;
    if (cached) {
        if (tk_cache_ready(t)) return 1;
        h = hash_bytes(w, len) | 1;
        if ((hit = tk_cache_find(t, w, len, h, &ins)) != (size_t)-1)
            return tk_out_push(ids, cnt, cap, t->cache_ids + t->cache[hit].i_off, t->cache[hit].i_n);
    }
    int32_t s_syms[CACHE_MAX_WORD], s_link[2 * CACHE_MAX_WORD]; uint32_t s_at[CACHE_MAX_WORD + 1];
    uint64_t s_heap[3 * CACHE_MAX_WORD];
    int32_t *syms = s_syms, *link = s_link; uint32_t *at = s_at; uint64_t *heap = s_heap;
    if (!cached) {
        syms = malloc(3 * len * sizeof *syms); at = malloc((len + 1) * sizeof *at); heap = malloc(3 * len * sizeof *heap);
        link = syms + len;
        if (!syms || !at || !heap) { free(syms); free(at); free(heap); return 1; }
    }
    size_t nc = 0, start = *cnt;
    for (size_t i = 0; i < len; nc++) {                /* characters: at[k] = byte offset of the k-th */
        uint32_t cp;
        size_t l = utf8_decode(w + i, len - i, &cp);
        at[nc] = (uint32_t)i;
        syms[nc] = tk_vocab_find(t, w + i, l);           /* -1: not in the vocabulary */
        i += l;
    }
    at[nc] = (uint32_t)len;
    tk_bpe_merge_hf(t, syms, nc, link, heap);
    const int32_t *next = link + nc;
    int rc = 0;
    for (int32_t k = 0; k >= 0 && !rc; k = next[k]) {
        if (syms[k] >= 0) { rc = tk_out_push(ids, cnt, cap, &syms[k], 1); continue; }
        if (t->byte_fallback) {
            for (uint32_t b = at[k]; b < at[k + 1] && !rc; b++) rc = tk_out_push(ids, cnt, cap, &t->byte_id[w[b]], 1);
            continue;
        }
        if (!(t->fuse_unk && *cnt > start && (*ids)[*cnt - 1] == t->unk)) rc = tk_out_push(ids, cnt, cap, &t->unk, 1);
    }
    if (!rc && cached) rc = tk_cache_add(t, ins, w, len, h, *ids + start, *cnt - start);
    if (!cached) { free(syms); free(at); free(heap); }
    return rc;
}
/* A sentencepiece-style stretch (non-empty): the normalizer (spaces to ▁, a ▁ in front), the
 * Metaspace pre-tokenizer (spaces to ▁, a ▁ in front unless there is one: always, or, for
 * "first", only on the stretch at the start of the input), then one word. */
int tk_sp_stretch(sk_tokenizer *t, const uint8_t *s, size_t n, int first, int32_t **ids, size_t *cnt, size_t *cap) {
    uint8_t *o = malloc(3 * n + 6);
    if (!o) return 1;
    size_t on = 0;
    if (t->sp_prepend) { memcpy(o, META, 3); on = 3; }
    int spaces = t->sp_replace || t->sp_meta;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ' && spaces) { memcpy(o + on, META, 3); on += 3; }
        else o[on++] = s[i];
    }
    if ((t->sp_meta == SP_ALWAYS || (t->sp_meta == SP_FIRST && first)) && !(on >= 3 && !memcmp(o, META, 3))) {
        memmove(o + 3, o, on);
        memcpy(o, META, 3);
        on += 3;
    }
    int rc = sp_word(t, o, on, ids, cnt, cap);
    free(o);
    return rc;
}
