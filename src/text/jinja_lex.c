/* Jinja lexer: template text to tokens, as jinja2's lexer splits it (whitespace control,
 * trim_blocks, lstrip_blocks, {% raw %}); the template's arena. See jinja_internal.h. */
#include "text/jinja_internal.h"

#include <stdio.h>
#include <stdlib.h>

static void *aalloc(sk_jinja *t, size_t n) {
    ahead *h = calloc(1, sizeof(ahead) + n);
    if (!h) return NULL;
    h->h.next = t->arena;
    t->arena = &h->h;
    return h + 1;
}
void *jj_palloc(P *p, size_t n) {
    void *m = aalloc(p->t, n);
    if (!m) jj_perr(p, 0, "out of memory");
    return m;
}
static const char *pstrdup(P *p, const char *s, size_t n) {
    char *d = jj_palloc(p, n + 1);
    memcpy(d, s, n);
    return d;
}

static tok *addtok(P *p, int k, int line, const char *s, size_t n) {
    if (p->nt == p->ct) {
        int nc = p->ct ? p->ct * 2 : 256;
        tok *t = realloc(p->tk, (size_t)nc * sizeof *t);
        if (!t) jj_perr(p, line, "out of memory");
        p->tk = t; p->ct = nc;
    }
    tok *t = &p->tk[p->nt++];
    memset(t, 0, sizeof *t);
    t->k = k; t->line = line; t->s = s; t->n = n;
    return t;
}
int jj_lines_in(const char *s, size_t a, size_t b) {
    int k = 0;
    for (size_t i = a; i < b; i++) k += s[i] == '\n';
    return k;
}
/* text s[i..j) before a tag; strip: '-', '+' or 0; lstrip applies to block/comment tags */
static void add_text(P *p, const char *s, size_t i, size_t j, int line, int strip, int lstrip, int line_start) {
    if (strip == '-') j = jj_rstrip_ws(s, i, j);
    else if (strip != '+' && lstrip) {
        size_t l = j;
        while (l > i && s[l - 1] != '\n') l--;
        if (l > i || line_start) {
            size_t q = l;
            while (q < j && (s[q] == ' ' || s[q] == '\t')) q++;
            if (q == j) j = l;
        }
    }
    if (j > i) addtok(p, K_TEXT, line, s + i, j - i);
}
/* after a tag's end: '-' strips all following whitespace, else trim_blocks drops one newline */
static size_t after_end(const char *s, size_t n, size_t i, int ctl, int trim) {
    if (ctl == '-') { size_t w; while (i < n && (w = jj_ws_at(s, n, i))) i += w; }
    else if (ctl != '+' && trim && i < n && s[i] == '\n') i++;
    return i;
}
static int is_id(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (c >= '0' && c <= '9'); }

/* Python string literal body s[0..n) (unicode-escape semantics) -> arena string */
static void lex_string(P *p, tok *t, const char *s, size_t n, int line) {
    char *o = jj_palloc(p, n + 1), *d = o;
    for (size_t i = 0; i < n;) {
        if (s[i] != '\\' || i + 1 >= n) { *d++ = s[i++]; continue; }
        char c = s[i + 1];
        i += 2;
        uint32_t cp; int digits = 0;
        switch (c) {
        case 'n': *d++ = '\n'; continue;
        case 't': *d++ = '\t'; continue;
        case 'r': *d++ = '\r'; continue;
        case '\\': *d++ = '\\'; continue;
        case '\'': *d++ = '\''; continue;
        case '"': *d++ = '"'; continue;
        case 'a': *d++ = '\a'; continue;
        case 'b': *d++ = '\b'; continue;
        case 'f': *d++ = '\f'; continue;
        case 'v': *d++ = '\v'; continue;
        case '\n': continue;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default:
            if (c >= '0' && c <= '7') {
                cp = (uint32_t)(c - '0');
                for (int k = 0; k < 2 && i < n && s[i] >= '0' && s[i] <= '7'; k++) cp = cp * 8 + (uint32_t)(s[i++] - '0');
                d += sk_utf8_encode(cp, d);
                continue;
            }
            *d++ = '\\'; *d++ = c;   /* unknown escapes stay as written */
            continue;
        }
        cp = 0;
        for (int k = 0; k < digits; k++, i++) {
            char h = i < n ? s[i] : 0;
            int v = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
            if (v < 0) jj_perr(p, line, "truncated \\%c escape in a string literal", c);
            cp = cp * 16 + (uint32_t)v;
        }
        if (cp > 0x10FFFF) jj_perr(p, line, "illegal Unicode character in a string literal");
        if (cp >= 0xD800 && cp <= 0xDFFF) jj_perr(p, line, "surrogate escape in a string literal (not encodable as UTF-8)");
        d += sk_utf8_encode(cp, d);
    }
    t->s = o; t->n = (size_t)(d - o);
}

static const char *const OPS2[] = {"//", "**", "==", "!=", ">=", "<=", NULL};

/* the tokens of one {{ }} or {% %} tag from s[*pi]; ends at its end marker */
static void lex_tag(P *p, const char *s, size_t n, size_t *pi, int *pline, char kind, int open_line) {
    size_t i = *pi;
    int line = *pline, depth = 0;
    char stack[MAX_DEPTH];
    for (;;) {
        size_t w;
        while (i < n && (w = jj_ws_at(s, n, i))) { line += s[i] == '\n'; i += w; }
        if (i >= n) jj_perr(p, open_line, "unexpected end of template: unclosed '%s'", kind == '%' ? "{%" : "{{");
        if (!depth) {
            if (kind == '%') {
                if ((s[i] == '-' || s[i] == '+') && i + 2 < n && s[i + 1] == '%' && s[i + 2] == '}') {
                    addtok(p, K_BEND, line, s + i, 3);
                    size_t e = after_end(s, n, i + 3, s[i], 1);
                    line += jj_lines_in(s, i, e); i = e; break;
                }
                if (s[i] == '%' && i + 1 < n && s[i + 1] == '}') {
                    addtok(p, K_BEND, line, s + i, 2);
                    size_t e = after_end(s, n, i + 2, 0, 1);
                    line += jj_lines_in(s, i, e); i = e; break;
                }
            } else {
                if (s[i] == '-' && i + 2 < n && s[i + 1] == '}' && s[i + 2] == '}') {
                    addtok(p, K_VEND, line, s + i, 3);
                    size_t e = after_end(s, n, i + 3, '-', 0);
                    line += jj_lines_in(s, i, e); i = e; break;
                }
                if (s[i] == '}' && i + 1 < n && s[i + 1] == '}') { addtok(p, K_VEND, line, s + i, 2); i += 2; break; }
            }
        }
        char c = s[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            size_t j = i;
            while (j < n && is_id(s[j])) j++;
            addtok(p, K_NAME, line, pstrdup(p, s + i, j - i), j - i);
            i = j;
        } else if (c >= '0' && c <= '9') {
            int after_dot = p->nt && p->tk[p->nt - 1].k == K_OP && p->tk[p->nt - 1].n == 1 && p->tk[p->nt - 1].s[0] == '.';
            size_t j = i, k = 0;
            char buf[128];
            int isf = 0;
            for (;;) {   /* digits with single underscores between them */
                while (j < n && ((s[j] >= '0' && s[j] <= '9') || (s[j] == '_' && j + 1 < n && s[j + 1] >= '0' && s[j + 1] <= '9' && j > i))) {
                    if (s[j] != '_' && k < sizeof buf - 1) buf[k++] = s[j];
                    j++;
                }
                if (after_dot) break;
                if (!isf && j + 1 < n && s[j] == '.' && s[j + 1] >= '0' && s[j + 1] <= '9') {
                    isf = 1; if (k < sizeof buf - 1) buf[k++] = '.'; j++;
                    continue;
                }
                if (isf != 2 && j < n && (s[j] == 'e' || s[j] == 'E')) {
                    size_t q = j + 1;
                    if (q < n && (s[q] == '+' || s[q] == '-')) q++;
                    if (q < n && s[q] >= '0' && s[q] <= '9') {
                        if (k < sizeof buf - 3) { buf[k++] = 'e'; if (s[j + 1] == '-' || s[j + 1] == '+') buf[k++] = s[j + 1]; }
                        j = q; isf = 2;
                        continue;
                    }
                }
                break;
            }
            buf[k] = 0;
            if (k >= sizeof buf - 3) jj_perr(p, line, "number literal too long");
            tok *t = addtok(p, isf ? K_FLOAT : K_INT, line, s + i, j - i);
            if (isf) t->f = strtod(buf, NULL);
            else {
                uint64_t v = 0;
                for (size_t q = 0; q < k; q++) {
                    if (v > (uint64_t)INT64_MAX / 10 || v * 10 + (uint64_t)(buf[q] - '0') > (uint64_t)INT64_MAX)
                        jj_perr(p, line, "integer literal too large (ints are 64-bit here)");
                    v = v * 10 + (uint64_t)(buf[q] - '0');
                }
                t->i = (int64_t)v;
            }
            i = j;
        } else if (c == '\'' || c == '"') {
            size_t j = i + 1;
            int l0 = line;
            while (j < n && s[j] != c) { if (s[j] == '\\' && j + 1 < n) { line += s[j + 1] == '\n'; j++; } line += s[j] == '\n'; j++; }
            if (j >= n) jj_perr(p, l0, "unterminated string literal");
            tok *t = addtok(p, K_STR, l0, NULL, 0);
            lex_string(p, t, s + i + 1, j - i - 1, l0);
            i = j + 1;
        } else {
            size_t len = 0;
            for (int k = 0; OPS2[k]; k++) if (i + 1 < n && s[i] == OPS2[k][0] && s[i + 1] == OPS2[k][1]) len = 2;
            if (!len && strchr("+-*/%~[](){}<>=.:|,;", c) && c) len = 1;
            if (!len) {
                if ((unsigned char)c >= 0x80) jj_perr(p, line, "unexpected character in a tag");
                jj_perr(p, line, "unexpected character '%c' in a tag", c);
            }
            if (len == 1 && (c == '(' || c == '[' || c == '{')) {
                if (depth >= MAX_DEPTH) jj_perr(p, line, "brackets nested too deep");
                stack[depth++] = c;
            } else if (len == 1 && (c == ')' || c == ']' || c == '}')) {
                char want = c == ')' ? '(' : c == ']' ? '[' : '{';
                if (!depth || stack[depth - 1] != want) jj_perr(p, line, "unexpected '%c'", c);
                depth--;
            }
            addtok(p, K_OP, line, s + i, len);
            i += len;
        }
    }
    *pi = i; *pline = line;
}

void jj_lex(P *p, const char *s, size_t n) {
    size_t i = 0;
    int line = 1, line_start = 1;
    while (i < n) {
        size_t j = i;
        while (j + 1 < n && !(s[j] == '{' && (s[j + 1] == '{' || s[j + 1] == '%' || s[j + 1] == '#'))) j++;
        if (j + 1 >= n) { addtok(p, K_TEXT, line, s + i, n - i); break; }
        char kind = s[j + 1];
        int ctl = j + 2 < n && (s[j + 2] == '-' || s[j + 2] == '+') ? s[j + 2] : 0;
        int tline = line + jj_lines_in(s, i, j);
        size_t b = j + 2 + (ctl != 0);
        if (kind == '#') {
            add_text(p, s, i, j, line, ctl, 1, line_start);
            size_t e = b;
            while (e + 1 < n && !(s[e] == '#' && s[e + 1] == '}')) e++;
            if (e + 1 >= n) jj_perr(p, tline, "unclosed comment");
            int ectl = e > b && (s[e - 1] == '-' || s[e - 1] == '+') ? s[e - 1] : 0;
            size_t k = after_end(s, n, e + 2, ectl, 1);
            line = tline + jj_lines_in(s, j, k);
            line_start = k > 0 && s[k - 1] == '\n';
            i = k;
            continue;
        }
        if (kind == '%') {   /* {% raw %} ... {% endraw %} */
            size_t q = b, w;
            while (q < n && (w = jj_ws_at(s, n, q))) q += w;
            if (q + 3 <= n && !memcmp(s + q, "raw", 3) && (q + 3 == n || !is_id(s[q + 3]))) {
                q += 3;
                while (q < n && (w = jj_ws_at(s, n, q))) q += w;
                int rctl = 0;
                if (q < n && s[q] == '-') { rctl = '-'; q++; }
                if (q + 1 < n && s[q] == '%' && s[q + 1] == '}') {
                    add_text(p, s, i, j, line, ctl, 1, line_start);
                    size_t c0 = after_end(s, n, q + 2, rctl, 0);   /* no trim_blocks after {% raw %} */
                    int cstart = c0 > 0 && s[c0 - 1] == '\n';
                    for (size_t e = c0; e + 1 < n; e++) {
                        if (s[e] != '{' || s[e + 1] != '%') continue;
                        size_t r = e + 2;
                        int ectl = r < n && (s[r] == '-' || s[r] == '+') ? s[r] : 0;
                        if (ectl) r++;
                        while (r < n && (w = jj_ws_at(s, n, r))) r += w;
                        if (r + 6 > n || memcmp(s + r, "endraw", 6) || (r + 6 < n && is_id(s[r + 6]))) continue;
                        r += 6;
                        while (r < n && (w = jj_ws_at(s, n, r))) r += w;
                        int cl = 0;
                        if (r < n && (s[r] == '-' || s[r] == '+')) cl = s[r++];
                        if (r + 1 >= n || s[r] != '%' || s[r + 1] != '}') continue;
                        add_text(p, s, c0, e, tline + jj_lines_in(s, j, c0), ectl, 1, cstart);
                        size_t k = after_end(s, n, r + 2, cl, 1);
                        line = tline + jj_lines_in(s, j, k);
                        line_start = k > 0 && s[k - 1] == '\n';
                        i = k;
                        goto next;
                    }
                    jj_perr(p, tline, "missing {%% endraw %%} for {%% raw %%}");
                }
            }
        }
        add_text(p, s, i, j, line, ctl, kind == '%', line_start);
        addtok(p, kind == '%' ? K_BBEG : K_VBEG, tline, s + j, b - j);
        i = b; line = tline;
        lex_tag(p, s, n, &i, &line, kind, tline);
        line_start = i > 0 && s[i - 1] == '\n';
    next:;
    }
    addtok(p, K_EOF, line, s + n, 0);
}

