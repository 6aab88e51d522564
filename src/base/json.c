/* Small strict JSON reader (RFC 8259) and string writer. See json.h.
 *
 * Choices, all strict so that a file we accept is one every other reader accepts:
 *  - the input must be UTF-8: invalid, overlong or surrogate-encoding byte sequences in
 *    strings are rejected, and so is a byte-order mark;
 *  - \uXXXX escapes are decoded to UTF-8; a surrogate pair becomes one 4-byte sequence and a
 *    lone (unpaired) surrogate is rejected, since it has no UTF-8 encoding;
 *  - raw control characters (< 0x20) inside strings are rejected, as RFC 8259 requires;
 *  - numbers follow the RFC grammar exactly (no leading zeros, no "+1", ".5", "1.", NaN or
 *    Infinity); a number whose magnitude overflows a double is rejected;
 *  - nesting deeper than SK_JSON_MAX_DEPTH (64) arrays/objects is rejected;
 *  - duplicate object keys are kept (sk_json_get returns the first); callers that care,
 *    like the safetensors reader, check for them.
 * Parsing is one pass, O(n): arrays and objects grow their item arrays by doubling.
 * Error messages look like "offset 123: expected ':' after object key". */
#include "base/json.h"
#include "base/utf8.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SK_JSON_MAX_DEPTH 64

typedef struct {
    const unsigned char *s;
    size_t len, pos;
    char *err;
    size_t errlen;
    int failed;
} parser;

static int fail(parser *p, size_t at, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int fail(parser *p, size_t at, const char *fmt, ...) {
    if (!p->failed && p->err && p->errlen) {
        int k = snprintf(p->err, p->errlen, "offset %zu: ", at);
        if (k >= 0 && (size_t)k < p->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(p->err + k, p->errlen - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    p->failed = 1;
    return 1;
}

static void skip_ws(parser *p) {
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') p->pos++;
        else break;
    }
}

/* Printable description of the byte at pos for error messages. */
static const char *describe(parser *p, char buf[16]) {
    if (p->pos >= p->len) return "end of input";
    unsigned char c = p->s[p->pos];
    if (c >= 0x20 && c < 0x7f) snprintf(buf, 16, "'%c'", c);
    else snprintf(buf, 16, "byte 0x%02x", c);
    return buf;
}

static int hex4(parser *p, size_t at, uint32_t *out) {
    if (p->len - at < 4) return fail(p, at, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p->s[at + (size_t)i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return fail(p, at + (size_t)i, "invalid hex digit in \\u escape");
    }
    *out = v;
    return 0;
}

/* p->pos is at the opening quote. Decodes into a fresh NUL-terminated buffer. */
static int parse_string(parser *p, char **out, size_t *out_len) {
    size_t start = ++p->pos;
    /* First pass: find the closing quote; the raw length bounds the decoded length
     * (every escape decodes to no more bytes than it occupies). */
    size_t i = start;
    while (i < p->len && p->s[i] != '"') {
        if (p->s[i] == '\\') i++;
        i++;
    }
    if (i >= p->len) return fail(p, start - 1, "unterminated string");
    char *buf = malloc(i - start + 1);
    if (!buf) return fail(p, start, "out of memory");
    size_t o = 0;
    i = start;
    for (;;) {
        unsigned char c = p->s[i];
        if (c == '"') break;
        if (c < 0x20) { free(buf); return fail(p, i, "control character 0x%02x in string (must be escaped)", c); }
        if (c == '\\') {
            unsigned char e = p->s[i + 1];   /* in range: the first pass saw a closing quote after it */
            switch (e) {
            case '"': buf[o++] = '"'; i += 2; break;
            case '\\': buf[o++] = '\\'; i += 2; break;
            case '/': buf[o++] = '/'; i += 2; break;
            case 'b': buf[o++] = '\b'; i += 2; break;
            case 'f': buf[o++] = '\f'; i += 2; break;
            case 'n': buf[o++] = '\n'; i += 2; break;
            case 'r': buf[o++] = '\r'; i += 2; break;
            case 't': buf[o++] = '\t'; i += 2; break;
            case 'u': {
                uint32_t cp;
                if (hex4(p, i + 2, &cp)) { free(buf); return 1; }
                if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    free(buf); return fail(p, i, "lone low surrogate \\u%04X", (unsigned)cp);
                }
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    uint32_t lo;
                    if (p->len - (i + 6) < 6 || p->s[i + 6] != '\\' || p->s[i + 7] != 'u') {
                        free(buf); return fail(p, i, "high surrogate \\u%04X not followed by a low surrogate", (unsigned)cp);
                    }
                    if (hex4(p, i + 8, &lo)) { free(buf); return 1; }
                    if (lo < 0xDC00 || lo > 0xDFFF) {
                        free(buf); return fail(p, i, "high surrogate \\u%04X not followed by a low surrogate", (unsigned)cp);
                    }
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    i += 12;
                } else {
                    i += 6;
                }
                o += sk_utf8_encode(cp, buf + o);
                break;
            }
            default:
                free(buf);
                if (e >= 0x20 && e < 0x7f) return fail(p, i, "invalid escape '\\%c'", e);
                return fail(p, i, "invalid escape (byte 0x%02x after backslash)", e);
            }
            continue;
        }
        uint32_t cp;
        size_t n = sk_utf8_decode(p->s + i, p->len - i, &cp);
        if (!n) { free(buf); return fail(p, i, "invalid UTF-8 in string"); }
        memcpy(buf + o, p->s + i, n);
        o += n; i += n;
    }
    buf[o] = 0;
    p->pos = i + 1;
    *out = buf;
    *out_len = o;
    return 0;
}

static int parse_number(parser *p, double *out) {
    size_t start = p->pos, i = p->pos;
    const unsigned char *s = p->s;
    size_t n = p->len;
    if (i < n && s[i] == '-') i++;
    if (i >= n || !(s[i] >= '0' && s[i] <= '9')) return fail(p, i, "invalid number: expected a digit");
    if (s[i] == '0') {
        i++;
        if (i < n && s[i] >= '0' && s[i] <= '9') return fail(p, start, "invalid number: leading zero");
    } else {
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i < n && s[i] == '.') {
        i++;
        if (i >= n || !(s[i] >= '0' && s[i] <= '9')) return fail(p, i, "invalid number: expected a digit after '.'");
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= n || !(s[i] >= '0' && s[i] <= '9')) return fail(p, i, "invalid number: expected a digit in exponent");
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    /* The text is not NUL-terminated: copy the token for strtod. */
    size_t tl = i - start;
    char small[64], *tok = small;
    if (tl >= sizeof small) {
        tok = malloc(tl + 1);
        if (!tok) return fail(p, start, "out of memory");
    }
    memcpy(tok, s + start, tl);
    tok[tl] = 0;
    errno = 0;
    double v = strtod(tok, NULL);
    int range = errno == ERANGE && isinf(v);
    if (tok != small) free(tok);
    if (range) return fail(p, start, "number out of range of a double");
    *out = v;
    p->pos = i;
    return 0;
}

static int parse_value(parser *p, sk_json *v, int depth);

static int grow(parser *p, sk_json *v, int *cap, int is_obj) {
    if (v->n < *cap) return 0;
    if (*cap > (1 << 28)) return fail(p, p->pos, "too many items");
    int nc = *cap ? *cap * 2 : 4;
    sk_json *it = realloc(v->items, (size_t)nc * sizeof *it);
    if (!it) return fail(p, p->pos, "out of memory");
    v->items = it;
    if (is_obj) {
        char **k = realloc(v->keys, (size_t)nc * sizeof *k);
        if (!k) return fail(p, p->pos, "out of memory");
        v->keys = k;
        size_t *kl = realloc(v->key_lens, (size_t)nc * sizeof *kl);
        if (!kl) return fail(p, p->pos, "out of memory");
        v->key_lens = kl;
    }
    *cap = nc;
    return 0;
}

static int parse_array(parser *p, sk_json *v, int depth) {
    v->type = SK_JSON_ARR;
    p->pos++;
    int cap = 0;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ']') { p->pos++; return 0; }
    for (;;) {
        if (grow(p, v, &cap, 0)) return 1;
        memset(&v->items[v->n], 0, sizeof v->items[0]);
        v->n++;
        if (parse_value(p, &v->items[v->n - 1], depth + 1)) return 1;
        skip_ws(p);
        char d[16];
        if (p->pos < p->len && p->s[p->pos] == ',') { p->pos++; continue; }
        if (p->pos < p->len && p->s[p->pos] == ']') { p->pos++; return 0; }
        return fail(p, p->pos, "expected ',' or ']' in array, found %s", describe(p, d));
    }
}

static int parse_object(parser *p, sk_json *v, int depth) {
    v->type = SK_JSON_OBJ;
    p->pos++;
    int cap = 0;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == '}') { p->pos++; return 0; }
    for (;;) {
        char d[16];
        skip_ws(p);
        if (p->pos >= p->len || p->s[p->pos] != '"')
            return fail(p, p->pos, "expected a string key in object, found %s", describe(p, d));
        if (grow(p, v, &cap, 1)) return 1;
        char *key; size_t klen;
        if (parse_string(p, &key, &klen)) return 1;
        int k = v->n++;
        v->keys[k] = key;
        v->key_lens[k] = klen;
        memset(&v->items[k], 0, sizeof v->items[0]);
        skip_ws(p);
        if (p->pos >= p->len || p->s[p->pos] != ':')
            return fail(p, p->pos, "expected ':' after object key, found %s", describe(p, d));
        p->pos++;
        if (parse_value(p, &v->items[k], depth + 1)) return 1;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') { p->pos++; continue; }
        if (p->pos < p->len && p->s[p->pos] == '}') { p->pos++; return 0; }
        return fail(p, p->pos, "expected ',' or '}' in object, found %s", describe(p, d));
    }
}

static int literal(parser *p, const char *word) {
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return fail(p, p->pos, "invalid literal (expected '%s')", word);
    p->pos += n;
    return 0;
}

static int parse_value(parser *p, sk_json *v, int depth) {
    char d[16];
    skip_ws(p);
    if (p->pos >= p->len) return fail(p, p->pos, "unexpected end of input, expected a value");
    unsigned char c = p->s[p->pos];
    switch (c) {
    case '{':
    case '[':
        if (depth >= SK_JSON_MAX_DEPTH)
            return fail(p, p->pos, "nesting deeper than %d", SK_JSON_MAX_DEPTH);
        return c == '{' ? parse_object(p, v, depth) : parse_array(p, v, depth);
    case '"':
        v->type = SK_JSON_STR;
        return parse_string(p, &v->str, &v->str_len);
    case 't': v->type = SK_JSON_BOOL; v->boolean = 1; return literal(p, "true");
    case 'f': v->type = SK_JSON_BOOL; v->boolean = 0; return literal(p, "false");
    case 'n': v->type = SK_JSON_NULL; return literal(p, "null");
    default:
        if (c == '-' || (c >= '0' && c <= '9')) { v->type = SK_JSON_NUM; return parse_number(p, &v->num); }
        return fail(p, p->pos, "unexpected %s, expected a value", describe(p, d));
    }
}

int sk_json_parse(const char *text, size_t len, sk_json *out, char *err, size_t errlen) {
    parser p = { (const unsigned char *)text, len, 0, err, errlen, 0 };
    memset(out, 0, sizeof *out);
    if (err && errlen) err[0] = 0;
    if (!text) return fail(&p, 0, "no input");
    if (len >= 3 && p.s[0] == 0xEF && p.s[1] == 0xBB && p.s[2] == 0xBF)
        return fail(&p, 0, "byte-order mark is not allowed");
    if (parse_value(&p, out, 0) == 0) {
        skip_ws(&p);
        if (p.pos == p.len) return 0;
        char d[16];
        fail(&p, p.pos, "trailing %s after the JSON value", describe(&p, d));
    }
    sk_json_free(out);
    return 1;
}

void sk_json_free(sk_json *j) {
    if (!j) return;
    if (j->type == SK_JSON_ARR || j->type == SK_JSON_OBJ) {
        for (int i = 0; i < j->n; i++) {
            sk_json_free(&j->items[i]);
            if (j->keys) free(j->keys[i]);
        }
    }
    free(j->str);
    free(j->items);
    free(j->keys);
    free(j->key_lens);
    memset(j, 0, sizeof *j);
}

const char *sk_json_type_name(sk_json_type t) {
    static const char *const n[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
    return t >= SK_JSON_NULL && t <= SK_JSON_OBJ ? n[t] : "a value";
}

const sk_json *sk_json_get(const sk_json *obj, const char *key) {
    if (!obj || obj->type != SK_JSON_OBJ || !key) return NULL;
    size_t kl = strlen(key);
    for (int i = 0; i < obj->n; i++)
        if (obj->key_lens[i] == kl && memcmp(obj->keys[i], key, kl) == 0) return &obj->items[i];
    return NULL;
}

/* Make room for `more` bytes plus a NUL. */
static int reserve(char **buf, size_t *len, size_t *cap, size_t more) {
    if (more > SIZE_MAX / 2 - *len) return 1;
    size_t need = *len + more + 1;
    if (need <= *cap && *buf) return 0;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    char *b = realloc(*buf, nc);
    if (!b) return 1;
    *buf = b;
    *cap = nc;
    return 0;
}

/* Appends "s" as a JSON string literal. The buffer stays NUL-terminated. Quotes,
 * backslashes and control characters < 0x20 (and DEL) are escaped; other bytes pass
 * through, so s must be UTF-8: invalid UTF-8 returns 2 (nothing appended), since no
 * strict reader (ours included) would accept it back. Out of memory returns 1. */
int sk_json_write_str(char **buf, size_t *len, size_t *cap, const char *s, size_t slen) {
    const unsigned char *u = (const unsigned char *)s;
    size_t need = 2;
    for (size_t i = 0; i < slen;) {
        unsigned char c = u[i];
        if (c < 0x20 || c == 0x7f) { need += 6; i++; continue; }
        if (c == '"' || c == '\\') { need += 2; i++; continue; }
        uint32_t cp;
        size_t n = sk_utf8_decode(u + i, slen - i, &cp);
        if (!n) return 2;
        need += n; i += n;
    }
    if (reserve(buf, len, cap, need)) return 1;
    char *o = *buf + *len;
    *o++ = '"';
    for (size_t i = 0; i < slen; i++) {
        unsigned char c = u[i];
        switch (c) {
        case '"': *o++ = '\\'; *o++ = '"'; break;
        case '\\': *o++ = '\\'; *o++ = '\\'; break;
        case '\n': *o++ = '\\'; *o++ = 'n'; break;
        case '\r': *o++ = '\\'; *o++ = 'r'; break;
        case '\t': *o++ = '\\'; *o++ = 't'; break;
        case '\b': *o++ = '\\'; *o++ = 'b'; break;
        case '\f': *o++ = '\\'; *o++ = 'f'; break;
        default:
            if (c < 0x20 || c == 0x7f) {
                static const char hx[] = "0123456789abcdef";
                *o++ = '\\'; *o++ = 'u'; *o++ = '0'; *o++ = '0';
                *o++ = hx[c >> 4]; *o++ = hx[c & 15];
            } else {
                *o++ = (char)c;
            }
        }
    }
    *o++ = '"';
    *len = (size_t)(o - *buf);
    *o = 0;
    return 0;
}

int sk_json_write_raw(char **buf, size_t *len, size_t *cap, const char *s, size_t slen) {
    if (reserve(buf, len, cap, slen)) return 1;
    memcpy(*buf + *len, s, slen);
    *len += slen;
    (*buf)[*len] = 0;
    return 0;
}
