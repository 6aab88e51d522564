/* The character-level tokenizer: a vocabulary of code points (vocab.json), built from a text,
 * saved, loaded, and encoding. */
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

/* ------------------------------------------------------- character tokenizer */

static int cmp_u32pair(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;          /* by code point, then id */
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* Build the lookup structures from t->cps (vocab_size entries). Fails on duplicates. */
static int char_index(sk_tokenizer *t, const char *what) {
    int V = t->vocab_size;
    t->sorted = malloc((size_t)V * sizeof *t->sorted);
    if (!t->sorted) return sk_error(SK_ENOMEM, "%s: out of memory", what);
    for (int i = 0; i < 128; i++) t->ascii_id[i] = -1;
    for (int i = 0; i < V; i++) {
        uint8_t b[4];
        size_t bl = sk_utf8_encode(t->cps[i], b);
        if (tk_pool_set(t, i, b, bl)) return sk_error(SK_ENOMEM, "%s: out of memory", what);
        t->sorted[i][0] = t->cps[i]; t->sorted[i][1] = (uint32_t)i;
        if (t->cps[i] < 128) t->ascii_id[t->cps[i]] = i;
    }
    qsort(t->sorted, (size_t)V, sizeof *t->sorted, cmp_u32pair);
    for (int i = 1; i < V; i++)
        if (t->sorted[i][0] == t->sorted[i - 1][0])
            return sk_error(SK_EFORMAT, "%s: character U+%04X appears twice (ids %u and %u)", what,
                            t->sorted[i][0], t->sorted[i - 1][1], t->sorted[i][1]);
    return SK_OK;
}

int sk_tok_build_char(sk_tokenizer **out, const char *text, size_t len) {
    uint8_t *seen = calloc(0x110000 / 8, 1);
    if (!seen) return sk_error(SK_ENOMEM, "char tokenizer: out of memory");
    const uint8_t *s = (const uint8_t *)text;
    int V = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t k = utf8_decode(s + i, len - i, &cp);
        if (cp == CP_INVALID) {
            free(seen);
            return sk_error(SK_EFORMAT, "char tokenizer: invalid UTF-8 at byte offset %zu (byte 0x%02x)", i, s[i]);
        }
        if (!(seen[cp >> 3] & (1u << (cp & 7)))) { seen[cp >> 3] |= (uint8_t)(1u << (cp & 7)); V++; }
        i += k;
    }
    if (V == 0) { free(seen); return sk_error(SK_EINVAL, "char tokenizer: empty training text"); }
    sk_tokenizer *t = tk_new(KIND_CHAR, V);
    if (!t || !(t->cps = malloc((size_t)V * sizeof *t->cps))) {
        free(seen); sk_tok_free(t);
        return sk_error(SK_ENOMEM, "char tokenizer: out of memory");
    }
    int k = 0;
    for (uint32_t cp = 0; cp < 0x110000; cp++)
        if (seen[cp >> 3] & (1u << (cp & 7))) t->cps[k++] = cp;
    free(seen);
    int rc = char_index(t, "char tokenizer");
    if (rc) { sk_tok_free(t); return rc; }
    *out = t;
    return SK_OK;
}

int sk_tok_save_char(const sk_tokenizer *t, const char *path) {
    if (!t || t->kind != KIND_CHAR) return sk_error(SK_EINVAL, "%s: only a char tokenizer can be saved", path);
    char *buf = NULL; size_t len = 0, cap = 0;
    const char *head = "{\"type\": \"char\", \"vocab\": [";
    int bad = sk_grow((void **)&buf, &cap, strlen(head) + 1, 1);
    if (!bad) { memcpy(buf, head, strlen(head)); len = strlen(head); }
    for (int i = 0; i < t->vocab_size && !bad; i++) {
        if (i && !(bad = sk_grow((void **)&buf, &cap, len + 2, 1))) { buf[len++] = ','; buf[len++] = i % 16 ? ' ' : '\n'; }
        if (!bad) bad = sk_json_write_str(&buf, &len, &cap, t->pool + t->off[i], t->len[i]);
    }
    if (!bad) bad = sk_grow((void **)&buf, &cap, len + 3, 1);
    if (bad) { free(buf); return sk_error(SK_ENOMEM, "%s: out of memory", path); }
    memcpy(buf + len, "]}\n", 3); len += 3;
    int rc = sk_write_atomic(path, buf, len);
    free(buf);
    return rc;
}

int tk_load_char_json(sk_tokenizer **out, const sk_json *j, const char *path) {
    const sk_json *type = j->type == SK_JSON_OBJ ? sk_json_get(j, "type") : NULL;
    const sk_json *vocab = j->type == SK_JSON_OBJ ? sk_json_get(j, "vocab") : NULL;
    sk_tokenizer *t = NULL;
    int rc;
    if (!type || type->type != SK_JSON_STR || strcmp(type->str, "char") != 0) {
        rc = sk_error(SK_EFORMAT, "%s: not a char vocabulary (expected {\"type\": \"char\", \"vocab\": [...]}) "
                      "nor a tokenizer.json (no \"model\")", path);
        goto done;
    }
    if (!vocab || vocab->type != SK_JSON_ARR || vocab->n == 0) {
        rc = sk_error(SK_EFORMAT, "%s: \"vocab\" must be a non-empty array of one-character strings", path);
        goto done;
    }
    t = tk_new(KIND_CHAR, vocab->n);
    if (!t || !(t->cps = malloc((size_t)vocab->n * sizeof *t->cps))) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
    for (int i = 0; i < vocab->n; i++) {
        const sk_json *e = &vocab->items[i];
        uint32_t cp = CP_INVALID;
        if (e->type == SK_JSON_STR && e->str_len > 0 &&
            utf8_decode((const uint8_t *)e->str, e->str_len, &cp) != e->str_len) cp = CP_INVALID;
        if (cp == CP_INVALID) {
            rc = sk_error(SK_EFORMAT, "%s: vocab entry %d is not a string of exactly one character", path, i);
            goto done;
        }
        t->cps[i] = cp;
    }
    rc = char_index(t, path);
done:
    if (rc) { sk_tok_free(t); return rc; }
    *out = t;
    return SK_OK;
}

int sk_tok_load_char(sk_tokenizer **out, const char *path) {
    sk_json j;
    int rc = tk_read_json(path, &j);
    if (rc) return rc;
    rc = tk_load_char_json(out, &j, path);
    sk_json_free(&j);
    return rc;
}

static int32_t char_lookup(const sk_tokenizer *t, uint32_t cp) {
    if (cp < 128) return t->ascii_id[cp];
    int lo = 0, hi = t->vocab_size - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < t->sorted[mid][0]) hi = mid - 1;
        else if (cp > t->sorted[mid][0]) lo = mid + 1;
        else return (int32_t)t->sorted[mid][1];
    }
    return -1;
}

int tk_char_encode(const sk_tokenizer *t, const uint8_t *s, size_t n, int32_t **ids, size_t *cnt, size_t *cap) {
    if (sk_grow((void **)ids, cap, *cnt + n, sizeof **ids)) return sk_error(SK_ENOMEM, "tokenizer: out of memory");
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = utf8_decode(s + i, n - i, &cp);
        if (cp == CP_INVALID)
            return sk_error(SK_EINVAL, "char tokenizer: invalid UTF-8 at byte offset %zu (byte 0x%02x)", i, s[i]);
        int32_t id = char_lookup(t, cp);
        if (id < 0) {
            char sh[8] = {0};
            if (cp >= 0x20 && cp != 0x7f) memcpy(sh, s + i, k);
            return sk_error(SK_EINVAL, "char tokenizer: character U+%04X '%s' at byte offset %zu is not in the vocabulary",
                            cp, sh, i);
        }
        (*ids)[(*cnt)++] = id;
        i += k;
    }
    return SK_OK;
}
