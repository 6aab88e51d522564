/* UTF-8 validation and U+FFFD replacement units. See utf8.h (the decoder and encoder are
 * inline there). */
#include "base/utf8.h"

int sk_utf8_valid(const void *s, size_t n, size_t *bad) {
    const unsigned char *p = (const unsigned char *)s;
    uint32_t cp;
    for (size_t i = 0; i < n;) {
        if (p[i] < 0x80) { i++; continue; }
        size_t k = sk_utf8_decode(p + i, n - i, &cp);
        if (!k) {
            if (bad) *bad = i;
            return 0;
        }
        i += k;
    }
    return 1;
}

/* The maximal subpart: the longest prefix of a well-formed sequence, by Table 3-7's ranges of
 * the second byte after E0, ED, F0 and F4; a byte that starts no sequence is one of its own. */
size_t sk_utf8_subpart(const void *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    unsigned c = p[0];
    size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!len) return 1;
    for (size_t i = 1; i < len; i++) {
        unsigned lo = 0x80, hi = 0xBF;
        if (i == 1) {
            if (c == 0xE0) lo = 0xA0;
            else if (c == 0xED) hi = 0x9F;
            else if (c == 0xF0) lo = 0x90;
            else if (c == 0xF4) hi = 0x8F;
        }
        if (i >= n || p[i] < lo || p[i] > hi) return i;
    }
    return len;
}
