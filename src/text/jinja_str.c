/* Jinja strings: Python str semantics on UTF-8 (character classes and case mapping, strip,
 * split, replace, splitlines). See jinja_internal.h. */
#include "text/jinja_internal.h"

/* ---------------------------------------------------------------- characters */

/* Python's str.isspace() */
int jj_cp_space(uint32_t c) {
    return c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x1F) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}
/* byte length of the whitespace character at s[i], 0 if none */
size_t jj_ws_at(const char *s, size_t n, size_t i) {
    size_t j = i;
    uint32_t c = u8dec(s, n, &j);
    return jj_cp_space(c) ? j - i : 0;
}
/* start of the trailing whitespace of s[0..n) */
size_t jj_rstrip_ws(const char *s, size_t lo, size_t n) {
    while (n > lo) {
        size_t j = n - 1;
        while (j > lo && ((unsigned char)s[j] & 0xC0) == 0x80) j--;
        if (!jj_ws_at(s, n, j)) break;
        n = j;
    }
    return n;
}
static uint32_t cp_upper(uint32_t c) {
    if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
    if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
    if (c == 0xFF) return 0x178;
    if (c == 0xB5) return 0x39C;
    if (c >= 0x100 && c <= 0x17F) {
        if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return c & ~1u;
        if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c : c - 1;
        if (c == 0x17F) return 'S';
        return c;
    }
    if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
    if (c == 0x3C2) return 0x3A3;
    if (c == 0x3AC) return 0x386;
    if (c >= 0x3AD && c <= 0x3AF) return c - 37;
    if (c == 0x3CC) return 0x38C;
    if (c == 0x3CD || c == 0x3CE) return c - 63;
    if (c >= 0x430 && c <= 0x44F) return c - 32;
    if (c >= 0x450 && c <= 0x45F) return c - 80;
    if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF)) return c & ~1u;
    if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
    return c;
}
static uint32_t cp_lower(uint32_t c) {
    if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
    if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
    if (c == 0x178) return 0xFF;
    if (c >= 0x100 && c <= 0x17F) {
        if ((c >= 0x100 && c <= 0x137 && c != 0x130) || (c >= 0x14A && c <= 0x177)) return c | 1u;
        if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c + 1 : c;
        return c;
    }
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
    if (c == 0x386) return 0x3AC;
    if (c >= 0x388 && c <= 0x38A) return c + 37;
    if (c == 0x38C) return 0x3CC;
    if (c == 0x38E || c == 0x38F) return c + 63;
    if (c >= 0x410 && c <= 0x42F) return c + 32;
    if (c >= 0x400 && c <= 0x40F) return c + 80;
    if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF)) return c | 1u;
    if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
    return c;
}
int jj_cp_cased(uint32_t c) { return cp_upper(c) != c || cp_lower(c) != c || c == 0xDF; }
int jj_cp_isupper(uint32_t c) { return cp_lower(c) != c; }
int jj_cp_islower(uint32_t c) { return cp_upper(c) != c || c == 0xDF; }
int jj_cp_alpha(uint32_t c) {   /* approximation of str.isalpha: cased letters, or any non-ASCII non-space non-punctuation */
    if (c < 0x80) return (c | 32) >= 'a' && (c | 32) <= 'z';
    if (c < 0xC0) return c == 0xAA || c == 0xB5 || c == 0xBA;
    return c != 0xD7 && c != 0xF7 && !jj_cp_space(c) && !(c >= 0x2000 && c <= 0x2BFF) && !(c >= 0x3000 && c <= 0x303F) &&
           !(c >= 0xFF00 && c <= 0xFF20);
}

/* ---------------------------------------------------------------- strings */

val jj_casemap(R *r, const char *s, size_t n, int mode) {
    obj *o = jj_snew(r);
    int first = 1, prev_cased = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c = u8dec(s, n, &i);
        int up;
        switch (mode) {
        case C_UPPER: up = 1; break;
        case C_LOWER: up = 0; break;
        case C_CAPITALIZE: up = first; break;
        case C_TITLE: up = !prev_cased; prev_cased = jj_cp_cased(c); break;
        case C_JTITLE: {
            int sep = jj_cp_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
            up = prev_cased == 0;
            prev_cased = !sep;
            if (sep) { jj_sputcp(r, o, c); first = 0; continue; }
            break;
        }
        default: up = jj_cp_islower(c); break;
        }
        first = 0;
        if (up && c == 0xDF) { jj_sput(r, o, mode == C_UPPER || mode == C_SWAP ? "SS" : "Ss", 2); continue; }
        jj_sputcp(r, o, up ? cp_upper(c) : cp_lower(c));
    }
    return sval(o);
}
static int in_chars(const char *cs, size_t cn, uint32_t c) {
    for (size_t q = 0; q < cn;) if (u8dec(cs, cn, &q) == c) return 1;
    return 0;
}
/* strip: which 1 = left, 2 = right, 3 = both; chars NULL = whitespace */
val jj_str_strip(R *r, val s, val *chars, int which) {
    const char *p = s.u.o->s;
    size_t a = 0, b = s.u.o->len;
    if (chars && chars->t != T_NONE && chars->t != T_UNDEF) {
        if (chars->t != T_STR) jj_die(r, "strip arg must be None or str");
        const char *cs = chars->u.o->s;
        size_t cn = chars->u.o->len;
        while ((which & 1) && a < b) { size_t j = a; uint32_t c = u8dec(p, b, &j); jj_scan(r, cn); if (!in_chars(cs, cn, c)) break; a = j; }
        while ((which & 2) && b > a) {
            size_t j = b - 1;
            while (j > a && ((unsigned char)p[j] & 0xC0) == 0x80) j--;
            size_t q = j; uint32_t c = u8dec(p, b, &q);
            jj_scan(r, cn);
            if (!in_chars(cs, cn, c)) break;
            b = j;
        }
    } else {
        size_t w;
        if (which & 1) while (a < b && (w = jj_ws_at(p, b, a))) a += w;
        if (which & 2) b = jj_rstrip_ws(p, a, b);
    }
    if (a == 0 && b == s.u.o->len) return ref(s);
    return jj_vstrn(r, p + a, b - a);
}
val jj_str_split(R *r, val s, val *sep, int64_t maxsplit) {
    const char *p = s.u.o->s;
    size_t n = s.u.o->len;
    obj *l = jj_lnew(r, 0);
    if (!sep || sep->t == T_NONE) {
        size_t i = 0, w;
        for (;;) {
            while (i < n && (w = jj_ws_at(p, n, i))) i += w;
            if (i >= n) break;
            if (maxsplit >= 0 && l->n >= maxsplit) { jj_lpush(r, l, jj_vstrn(r, p + i, jj_rstrip_ws(p, i, n) - i)); break; }
            size_t j = i;
            while (j < n && !jj_ws_at(p, n, j)) j += u8len_at(p, n, j);
            jj_lpush(r, l, jj_vstrn(r, p + i, j - i));
            i = j;
        }
        return lval(l);
    }
    if (sep->t != T_STR) jj_die(r, "must be str or None, not %s", jj_tname(*sep));
    if (!sep->u.o->len) jj_die(r, "empty separator");
    size_t i = 0;
    for (;;) {
        size_t j = (maxsplit < 0 || l->n < maxsplit) ? jj_find_bytes(r, p, n, sep->u.o->s, sep->u.o->len, i) : (size_t)-1;
        if (j == (size_t)-1) { jj_lpush(r, l, jj_vstrn(r, p + i, n - i)); break; }
        jj_lpush(r, l, jj_vstrn(r, p + i, j - i));
        i = j + sep->u.o->len;
    }
    return lval(l);
}
val jj_str_replace(R *r, val s, val old, val nw, int64_t count) {
    if (old.t != T_STR || nw.t != T_STR) jj_die(r, "replace() arguments must be str");
    const char *p = s.u.o->s;
    size_t n = s.u.o->len, on = old.u.o->len;
    obj *o = jj_snew(r);
    int64_t done = 0;
    if (!on) {
        for (size_t i = 0; i <= n;) {
            if (count < 0 || done < count) { jj_sput(r, o, nw.u.o->s, nw.u.o->len); done++; }
            if (i == n) break;
            size_t k = u8len_at(p, n, i);
            jj_sput(r, o, p + i, k);
            i += k;
        }
        return sval(o);
    }
    size_t i = 0;
    while (count < 0 || done < count) {
        size_t j = jj_find_bytes(r, p, n, old.u.o->s, on, i);
        if (j == (size_t)-1) break;
        jj_sput(r, o, p + i, j - i);
        jj_sput(r, o, nw.u.o->s, nw.u.o->len);
        i = j + on; done++;
    }
    jj_sput(r, o, p + i, n - i);
    return sval(o);
}
/* Python's str.splitlines() boundaries: \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, \u2028, \u2029;
 * the length of the one at s[i], the start of a character, or 0 */
static size_t line_break(const char *s, size_t n, size_t i) {
    unsigned char c = (unsigned char)s[i];
    if (c == '\r') return i + 1 < n && s[i + 1] == '\n' ? 2 : 1;
    if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1C && c <= 0x1E)) return 1;
    if (c >= 0x80) { size_t j = i; uint32_t cp = u8dec(s, n, &j); if (cp == 0x85 || cp == 0x2028 || cp == 0x2029) return j - i; }
    return 0;
}
val jj_splitlines(R *r, const char *s, size_t n, int keepends) {
    obj *l = jj_lnew(r, 0);
    size_t i = 0, st = 0;
    while (i < n) {
        size_t k = line_break(s, n, i);
        if (!k) { i += u8len_at(s, n, i); continue; }
        jj_lpush(r, l, jj_vstrn(r, s + st, (keepends ? i + k : i) - st));
        i += k; st = i;
    }
    if (st < n) jj_lpush(r, l, jj_vstrn(r, s + st, n - st));
    return lval(l);
}

