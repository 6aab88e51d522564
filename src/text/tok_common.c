/* What every tokenizer shares (text/tokenizer_internal.h): the pre-tokenizer's character
 * classes (JavaScript's, src/text/unicode_tables.h), the tokenizer object and its token pool,
 * and the helpers for reading JSON files and quoting tokens in errors. */
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

/* ------------------------------------------------- UTF-8 and character classes */


static int in_ranges(const uint32_t (*r)[2], int n, uint32_t cp) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid - 1;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

static int cp_class(uint32_t cp) {
    if (cp < 128) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CL_L;
        if (cp >= '0' && cp <= '9') return CL_N;
        if (cp == ' ' || (cp >= 9 && cp <= 13)) return CL_S;
        return CL_O;
    }
    if (cp == CP_INVALID) return CL_O;     /* an invalid byte behaves like punctuation */
    if (in_ranges(sk_uni_letter, SK_UNI_N_LETTER, cp)) return CL_L;
    if (in_ranges(sk_uni_number, SK_UNI_N_NUMBER, cp)) return CL_N;
    if (in_ranges(sk_uni_space, SK_UNI_N_SPACE, cp)) return CL_S;
    return CL_O;
}

/* Class of the character at s[i] (i < n); its end goes to *next. */
int tk_class_at(const uint8_t *s, size_t n, size_t i, size_t *next) {
    if (s[i] < 128) { *next = i + 1; return cp_class(s[i]); }
    uint32_t cp;
    *next = i + utf8_decode(s + i, n - i, &cp);
    return cp_class(cp);
}

/* For tests/tool_tok.c (text/tokenizer_internal.h) */
int sk_tok_unicode_class_(uint32_t cp) { return cp_class(cp); }
const char *sk_tok_unicode_version_(void) { return SK_UNICODE_VERSION; }

/* ------------------------------------------------------- the tokenizer object */

sk_tokenizer *tk_new(int kind, int vocab_size) {
    sk_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->kind = kind; t->vocab_size = vocab_size; t->eot = -1;
    t->off = calloc((size_t)vocab_size + 1, sizeof *t->off);
    t->len = calloc((size_t)vocab_size + 1, sizeof *t->len);
    if (!t->off || !t->len) { sk_tok_free(t); return NULL; }
    return t;
}

int tk_pool_set(sk_tokenizer *t, int id, const void *bytes, size_t n) {
    if (sk_grow((void **)&t->pool, &t->pool_cap, t->pool_len + n + 1, 1)) return 1;
    memcpy(t->pool + t->pool_len, bytes, n);
    t->pool[t->pool_len + n] = 0;
    t->off[id] = (uint32_t)t->pool_len; t->len[id] = (uint32_t)n;
    t->pool_len += n + 1;
    return 0;
}

void sk_tok_free(sk_tokenizer *t) {
    if (!t) return;
    free(t->pool); free(t->off); free(t->len); free(t->vocab_tab); free(t->pairs);
    free(t->cache); free(t->cache_bytes); free(t->cache_ids); free(t->cps); free(t->sorted);
    free(t->added); free(t->dpool); free(t->doff); free(t->dlen); free(t->special);
    free(t);
}

/* ------------------------------------------------------------- JSON, errors */

/* Print-safe copy of a token for error messages (control bytes as \xNN, cut at 40). */
const char *tk_show(const char *s, size_t n, char *buf, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (o > 40) { memcpy(buf + o, "...", 3); o += 3; break; }
        if (c < 0x20 || c == 0x7f) o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        else if (c == '"' || c == '\\') { buf[o++] = '\\'; buf[o++] = (char)c; }
        else buf[o++] = (char)c;
    }
    buf[o] = 0;
    return buf;
}
/* Read and parse a JSON file; errors name the file (and the byte offset). */
int tk_read_json(const char *path, sk_json *j) {
    uint8_t *text; size_t n;
    int rc = sk_read_file(path, &text, &n);
    if (rc) return rc;                     /* "<path>: cannot open: ..." */
    char err[256];
    rc = sk_json_parse((const char *)text, n, j, err, sizeof err);
    free(text);
    return rc ? sk_error(SK_EFORMAT, "%s: invalid JSON: %s", path, err) : SK_OK;
}
int tk_json_flag(const sk_json *obj, const char *key, int def) {
    const sk_json *v = sk_json_get(obj, key);
    return v && v->type == SK_JSON_BOOL ? v->boolean : def;
}
/* obj[key] is the string want */
int tk_json_str_is(const sk_json *obj, const char *key, const char *want) {
    const sk_json *v = obj && obj->type == SK_JSON_OBJ ? sk_json_get(obj, key) : NULL;
    return v && v->type == SK_JSON_STR && v->str_len == strlen(want) && memcmp(v->str, want, v->str_len) == 0;
}
int tk_json_is(const sk_json *v, const char *type) { return tk_json_str_is(v, "type", type); }
