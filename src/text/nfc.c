/* Unicode normalization form C (UAX #15), for tokenizer.json's NFC normalizer (Qwen2's):
 * full canonical decomposition, canonical ordering of combining marks, then canonical
 * composition. Tables: src/text/nfc_tables.h (scripts/gen_nfc.py); Hangul syllables are
 * computed. Bytes that are not UTF-8 pass through unchanged: each is a starter that composes
 * with nothing. */
#include "text/nfc.h"
#include "text/nfc_tables.h"
#include "base/utf8.h"
#include "skiplm_base.h"
#include <stdlib.h>
#include <string.h>

#define RAW 0x80000000u                   /* a unit that is a raw byte, not a code point */
enum { S0 = 0xAC00, L0 = 0x1100, V0 = 0x1161, T0 = 0x11A7, NL = 19, NV = 21, NT = 28, NS = NL * NV * NT };

static int ccc(uint32_t cp) {
    if (cp < 0x300 || (cp & RAW)) return 0;
    int lo = 0, hi = (int)(sizeof sk_nfc_ccc / sizeof sk_nfc_ccc[0]) - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < sk_nfc_ccc[mid][0]) hi = mid - 1;
        else if (cp > sk_nfc_ccc[mid][1]) lo = mid + 1;
        else return (int)sk_nfc_ccc[mid][2];
    }
    return 0;
}

/* the full canonical decomposition of cp into d (at most SK_NFC_MAX_DECOMP); its length */
static int decompose(uint32_t cp, uint32_t *d) {
    if (cp >= S0 && cp < S0 + NS) {
        uint32_t s = cp - S0, t = s % NT;
        d[0] = L0 + s / (NV * NT); d[1] = V0 + s % (NV * NT) / NT;
        if (!t) return 2;
        d[2] = T0 + t;
        return 3;
    }
    if (cp >= 0xC0 && !(cp & RAW)) {
        int lo = 0, hi = (int)(sizeof sk_nfc_decomp / sizeof sk_nfc_decomp[0]) - 1;
        while (lo <= hi) {
            int mid = (lo + hi) / 2;
            if (cp < sk_nfc_decomp[mid][0]) hi = mid - 1;
            else if (cp > sk_nfc_decomp[mid][0]) lo = mid + 1;
            else {
                memcpy(d, sk_nfc_pool + sk_nfc_decomp[mid][1], sizeof(uint32_t) * sk_nfc_decomp[mid][2]);
                return (int)sk_nfc_decomp[mid][2];
            }
        }
    }
    d[0] = cp;
    return 1;
}

/* the primary composite of the pair (a, b), or 0 */
static uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= L0 && a < L0 + NL && b >= V0 && b < V0 + NV) return S0 + ((a - L0) * NV + (b - V0)) * NT;
    if (a >= S0 && a < S0 + NS && (a - S0) % NT == 0 && b > T0 && b < T0 + NT) return a + (b - T0);
    if ((a | b) & RAW) return 0;
    int lo = 0, hi = (int)(sizeof sk_nfc_comp / sizeof sk_nfc_comp[0]) - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const uint32_t *c = sk_nfc_comp[mid];
        if (a < c[0] || (a == c[0] && b < c[1])) hi = mid - 1;
        else if (a > c[0] || b > c[1]) lo = mid + 1;
        else return c[2];
    }
    return 0;
}

/* one unit from s[i..n): a code point of a well-formed UTF-8 sequence, or the byte | RAW */
static uint32_t next_unit(const uint8_t *s, size_t n, size_t *i) {
    uint32_t cp;
    size_t len = sk_utf8_decode(s + *i, n - *i, &cp);
    if (!len) return s[(*i)++] | RAW;
    *i += len;
    return cp;
}

static size_t put_unit(uint32_t u, uint8_t *o) {
    if (u & RAW) { o[0] = (uint8_t)u; return 1; }
    return sk_utf8_encode(u, o);
}

int sk_nfc(const uint8_t *s, size_t n, uint8_t **out, size_t *out_n) {
    *out = NULL; *out_n = 0;
    size_t ascii = 0;
    while (ascii < n && s[ascii] < 0x80) ascii++;
    if (ascii == n) {                                    /* ASCII is its own NFC */
        if (!(*out = malloc(n ? n : 1))) return sk_error(SK_ENOMEM, "out of memory for NFC");
        memcpy(*out, s, n);
        *out_n = n;
        return SK_OK;
    }
    /* 1. full canonical decomposition: no character decomposes into more code points than
     * 1.5 per byte of its UTF-8 (U+01D5, 2 bytes, into 3), a raw byte is one unit: 2n bounds it */
    size_t bytes = (2 * n + 1) * (2 * sizeof(uint32_t) + 1);
    if (sk_mem_check(bytes, "normalizing a text to NFC")) return SK_ENOMEM;
    uint32_t *u = malloc(sizeof(uint32_t) * (2 * n + 1)), *tmp = malloc(sizeof(uint32_t) * (2 * n + 1));
    uint8_t *cc = malloc(2 * n + 1);
    if (!u || !tmp || !cc) { free(u); free(tmp); free(cc); return sk_error(SK_ENOMEM, "out of memory for NFC"); }
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        uint32_t d[SK_NFC_MAX_DECOMP];
        int k = decompose(next_unit(s, n, &i), d);
        for (int j = 0; j < k; j++) { u[m] = d[j]; cc[m++] = (uint8_t)ccc(d[j]); }
    }
    /* 2. canonical ordering: each run of non-starters stably sorted by combining class (a
     * counting sort for long runs: linear however many marks a character carries) */
    for (size_t i = 0; i < m;) {
        if (!cc[i]) { i++; continue; }
        size_t e = i;
        while (e < m && cc[e]) e++;
        if (e - i <= 16) {
            for (size_t a = i + 1; a < e; a++)
                for (size_t b = a; b > i && cc[b - 1] > cc[b]; b--) {
                    uint32_t x = u[b]; u[b] = u[b - 1]; u[b - 1] = x;
                    uint8_t y = cc[b]; cc[b] = cc[b - 1]; cc[b - 1] = y;
                }
        } else {
            size_t at[257] = {0};
            for (size_t a = i; a < e; a++) at[cc[a] + 1]++;
            for (int k = 1; k < 257; k++) at[k] += at[k - 1];
            for (size_t a = i; a < e; a++) tmp[at[cc[a]]++] = u[a];
            memcpy(u + i, tmp, sizeof(uint32_t) * (e - i));
            for (size_t a = i; a < e; a++) cc[a] = (uint8_t)ccc(u[a]);
        }
        i = e;
    }
    /* 3. canonical composition: a character joins the last starter unless blocked (something
     * between them with class 0 or a class >= its own); sorted marks make the last one the test */
    size_t w = 0, starter = (size_t)-1;
    int prev = 0;                                        /* class of the last character kept */
    for (size_t i = 0; i < m; i++) {
        const uint32_t x = u[i];
        const int c = cc[i];
        if (starter != (size_t)-1 && (w - 1 == starter || (prev != 0 && prev < c))) {
            uint32_t y = compose(u[starter], x);
            if (y) { u[starter] = y; continue; }
        }
        if (c == 0) starter = w;
        prev = c;
        u[w++] = x;
    }
    free(tmp); free(cc);
    uint8_t *o = malloc(4 * w + 1);
    if (!o) { free(u); return sk_error(SK_ENOMEM, "out of memory for NFC"); }
    size_t k = 0;
    for (size_t i = 0; i < w; i++) k += put_unit(u[i], o + k);
    free(u);
    *out = o; *out_n = k;
    return SK_OK;
}
