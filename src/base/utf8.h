/* UTF-8 (internal): the one decoder, encoder and validator of the library, for the JSON
 * reader and writer, the tokenizers, NFC, the chat renderer, the Jinja interpreter and the
 * safetensors writer. Well-formed means Unicode's Table 3-7: no overlong forms, no surrogates
 * (U+D800..U+DFFF), nothing above U+10FFFF, no truncated sequence. Callers decide what an
 * ill-formed sequence becomes (an error, one raw byte, U+FFFD over its maximal subpart). */
#ifndef SK_UTF8_H
#define SK_UTF8_H
#include <stddef.h>
#include <stdint.h>

#define SK_UTF8_INVALID 0xFFFFFFFFu    /* what sk_utf8_decode stores for an ill-formed sequence */

/* Decode the code point at s[0..n) (n >= 1). Returns the byte length (1-4) of the well-formed
 * sequence there with its code point in *cp; 0 when it is ill-formed or truncated, with *cp
 * SK_UTF8_INVALID. Reads no byte at or past s[n]. */
static inline size_t sk_utf8_decode(const void *s, size_t n, uint32_t *cp) {
    const unsigned char *p = (const unsigned char *)s;
    unsigned c = p[0];
    if (c < 0x80) { *cp = c; return 1; }
    size_t len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; min = 0x10000; }
    else goto bad;
    if (n < len) goto bad;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) goto bad;
        v = (v << 6) | (p[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) goto bad;
    *cp = v;
    return len;
bad:
    *cp = SK_UTF8_INVALID;
    return 0;
}

/* Encode cp (<= 0x10FFFF, not a surrogate) into out[0..4); returns its byte length. */
static inline size_t sk_utf8_encode(uint32_t cp, void *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { o[0] = (unsigned char)(0xC0 | (cp >> 6)); o[1] = (unsigned char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12)); o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F)); return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18)); o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Is all of s[0..n) well-formed? If not, 0 with the offset of the first ill-formed sequence in
 * *bad (when bad is not NULL). */
int sk_utf8_valid(const void *s, size_t n, size_t *bad);

/* For an ill-formed sequence at s[0..n) (n >= 1, sk_utf8_decode gave 0): the length (1-3) of its
 * maximal subpart, the bytes that one U+FFFD replaces in Unicode's "best practice" (Python's
 * errors="replace", Rust's from_utf8_lossy, the WHATWG decoder). */
size_t sk_utf8_subpart(const void *s, size_t n);
#endif
