/* Jinja2 renderer for Hugging Face chat templates. See jinja.h.
 *
 * Implements the subset of jinja2 (3.1) that chat templates use, with Python semantics, as
 * transformers' apply_chat_template configures it (ImmutableSandboxedEnvironment, trim_blocks,
 * lstrip_blocks, loopcontrols, default Undefined):
 *  - lexing exactly as jinja2's lexer: {{ }}, {% %}, {# #}, the '-' and '+' whitespace controls,
 *    trim_blocks, lstrip_blocks (with jinja2's "line starting" rule), {% raw %}, newline
 *    normalisation (\r\n and \r become \n) and removal of one trailing newline;
 *  - statements: if/elif/else, for (tuple targets, `if` filter, else, loop.*, break, continue),
 *    set (name, tuple, namespace attribute, block set with filters), macro (defaults, keyword
 *    arguments; extra arguments land in varargs/kwargs), filter blocks, generation blocks;
 *  - expressions with jinja2's precedence (`is` and filters bind tighter than arithmetic,
 *    `**` is left-associative, chained comparisons), Python literals and escapes, slicing,
 *    Python-style printing (None, True, 1.0, ['a', 1], {'k': 'v'}), truthiness, int/float
 *    arithmetic (ints are 64-bit: overflow is an error, where Python would grow the int);
 *  - the filters, tests, str/dict/list methods and globals listed in FILTERS, TESTS, call_method
 *    and GLOBALS below; tojson is transformers' json.dumps(ensure_ascii=False) version.
 * Not implemented: template inheritance and includes, call blocks, recursive loops, `do`,
 * autoescaping and Markup (escape returns a plain string), the `%` string-format operator, str
 * format specs, Python's Unicode database: upper/lower/title know ASCII, Latin-1, Latin
 * Extended-A, Greek, Cyrillic and fullwidth Latin; str repr escapes the common non-printables.
 * Undefined follows jinja2's default Undefined: printing gives "", attribute access on it is an
 * error, a missing attribute/key of a defined value is undefined.
 *
 * Values are refcounted; every runtime object is also on a list owned by the render, so an
 * error (longjmp out of any depth) frees everything, reference cycles through namespaces too.
 * Limits (errors, never hangs or crashes): nesting 256 (parse, macro calls, printed values),
 * evaluation depth 1500, strings and output 256 MiB, live memory 1 GiB, total work (bytes
 * allocated or scanned) 1 GiB, 10 million loop iterations plus macro calls, range() 100000. */
#include "text/jinja.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 256
#define MAX_EVAL_DEPTH 1500
#define MAX_STR ((size_t)256 << 20)
#define MAX_MEM ((size_t)1 << 30)
#define MAX_WORK ((uint64_t)1 << 30)
#define MAX_ITERS 10000000L
#define MAX_RANGE 100000
#define MAX_ARGS 64

#if defined(__GNUC__)
#define PRINTF(a, b) __attribute__((format(printf, a, b)))
#define NORETURN __attribute__((noreturn))
#else
#define PRINTF(a, b)
#define NORETURN
#endif

/* ---------------------------------------------------------------- values */

enum { T_UNDEF, T_NONE, T_BOOL, T_INT, T_FLOAT, T_STR, T_LIST, T_DICT, T_LOOP, T_MACRO, T_FUNC };
typedef struct obj obj;
typedef struct node node;
typedef struct val { int t; union { int64_t i; double f; obj *o; const node *m; } u; } val;
/* One struct for every heap object: T_STR (s/len/cap), T_LIST (v/n; flag: tuple), T_DICT (k/v/n;
 * flag: namespace), T_LOOP (ref: the items list, idx: index0, n: length). rc < 0: immortal (a
 * template constant, in the template's arena). */
struct obj {
    obj *prev, *next;
    long rc;
    int t, flag, n, vcap;
    char *s; size_t len, cap;
    val *k, *v;
    obj *ref;
    int64_t idx;
};

static val mk(int t) { val v; memset(&v, 0, sizeof v); v.t = t; return v; }
static val vint(int64_t i) { val v = mk(T_INT); v.u.i = i; return v; }
static val vflt(double f) { val v = mk(T_FLOAT); v.u.f = f; return v; }
static val vbool(int b) { val v = mk(T_BOOL); v.u.i = b != 0; return v; }
static obj *vobj(val v) { return (v.t == T_UNDEF || (v.t >= T_STR && v.t <= T_LOOP)) ? v.u.o : NULL; }
static val ref(val v) { obj *o = vobj(v); if (o && o->rc >= 0) o->rc++; return v; }

/* ---------------------------------------------------------------- template (AST) */

enum {
    S_LIST, S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_SETBLK, S_MACRO, S_BREAK, S_CONT, S_FILTER,
    E_CONST, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_NEG, E_POS, E_NOT,
    E_BIN, E_AND, E_OR, E_CMP, E_COND, E_LIST, E_TUPLE, E_DICT, E_BLOCKVAL
};
struct node {
    int k, line, op, n;
    const char *s; size_t sl;        /* name / text */
    val v;                           /* E_CONST */
    node *a, *b, *c, *d, *e;
    node **kv; const char **kw;      /* arguments, items (dict: key, value pairs), statements */
    int *ops;                        /* E_CMP operators */
};

typedef struct ablk { struct ablk *next; } ablk;
typedef union { ablk h; max_align_t align; } ahead;
struct sk_jinja { ablk *arena; node *root; };

/* ---------------------------------------------------------------- UTF-8 helpers */

static size_t u8len(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }
/* decodes the (valid) UTF-8 sequence at s[*i], advancing *i */
static uint32_t u8dec(const char *s, size_t n, size_t *i) {
    const unsigned char *p = (const unsigned char *)s + *i;
    size_t k = u8len(p[0]);
    if (*i + k > n) k = n - *i;
    uint32_t c = k == 1 ? p[0] : k == 2 ? (p[0] & 0x1Fu) : k == 3 ? (p[0] & 0x0Fu) : (p[0] & 0x07u);
    for (size_t j = 1; j < k; j++) c = (c << 6) | (p[j] & 0x3Fu);
    *i += k ? k : 1;
    return c;
}
static int u8enc(uint32_t c, char *o) {
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xC0 | (c >> 6)); o[1] = (char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12)); o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F)); return 3;
    }
    o[0] = (char)(0xF0 | (c >> 18)); o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F)); o[3] = (char)(0x80 | (c & 0x3F)); return 4;
}
static int utf8_valid(const unsigned char *s, size_t n, size_t *bad) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : (c >= 0xC2 && c < 0xE0) ? 2 : (c >= 0xE0 && c < 0xF0) ? 3 : (c >= 0xF0 && c < 0xF5) ? 4 : 0;
        if (!k || i + k > n) { *bad = i; return 0; }
        for (size_t j = 1; j < k; j++) if ((s[i + j] & 0xC0) != 0x80) { *bad = i; return 0; }
        if (k == 3 && ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] >= 0xA0))) { *bad = i; return 0; }
        if (k == 4 && ((c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] >= 0x90))) { *bad = i; return 0; }
        i += k;
    }
    return 1;
}
/* Python's str.isspace() */
static int cp_space(uint32_t c) {
    return c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x1F) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}
/* byte length of the whitespace character at s[i], 0 if none */
static size_t ws_at(const char *s, size_t n, size_t i) {
    size_t j = i;
    uint32_t c = u8dec(s, n, &j);
    return cp_space(c) ? j - i : 0;
}
/* start of the trailing whitespace of s[0..n) */
static size_t rstrip_ws(const char *s, size_t lo, size_t n) {
    while (n > lo) {
        size_t j = n - 1;
        while (j > lo && ((unsigned char)s[j] & 0xC0) == 0x80) j--;
        if (!ws_at(s, n, j)) break;
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
static int cp_cased(uint32_t c) { return cp_upper(c) != c || cp_lower(c) != c || c == 0xDF; }
static int cp_isupper(uint32_t c) { return cp_lower(c) != c; }
static int cp_islower(uint32_t c) { return cp_upper(c) != c || c == 0xDF; }
static int cp_alpha(uint32_t c) {   /* approximation of str.isalpha: cased letters, or any non-ASCII non-space non-punctuation */
    if (c < 0x80) return (c | 32) >= 'a' && (c | 32) <= 'z';
    if (c < 0xC0) return c == 0xAA || c == 0xB5 || c == 0xBA;
    return c != 0xD7 && c != 0xF7 && !cp_space(c) && !(c >= 0x2000 && c <= 0x2BFF) && !(c >= 0x3000 && c <= 0x303F) &&
           !(c >= 0xFF00 && c <= 0xFF20);
}
static int cp_digit(uint32_t c) { return c >= '0' && c <= '9'; }

/* ---------------------------------------------------------------- lexer */

enum { K_EOF, K_TEXT, K_VBEG, K_VEND, K_BBEG, K_BEND, K_NAME, K_STR, K_INT, K_FLOAT, K_OP };
typedef struct { int k, line; const char *s; size_t n; int64_t i; double f; } tok;

typedef struct {
    sk_jinja *t;
    tok *tk; int nt, ct, pos;
    jmp_buf jb;
    char *err; size_t errlen;
    int depth, loops;
} P;

/* "line N: message" into err (parse and render errors alike) */
static void line_msg(char *err, size_t errlen, int line, const char *fmt, va_list ap) {
    if (!err || !errlen) return;
    int k = snprintf(err, errlen, "line %d: ", line);
    if (k >= 0 && (size_t)k < errlen) vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
}

static NORETURN PRINTF(3, 4) void perr(P *p, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    line_msg(p->err, p->errlen, line, fmt, ap);
    va_end(ap);
    longjmp(p->jb, 1);
}

static void *aalloc(sk_jinja *t, size_t n) {
    ahead *h = calloc(1, sizeof(ahead) + n);
    if (!h) return NULL;
    h->h.next = t->arena;
    t->arena = &h->h;
    return h + 1;
}
static void *palloc(P *p, size_t n) {
    void *m = aalloc(p->t, n);
    if (!m) perr(p, 0, "out of memory");
    return m;
}
static const char *pstrdup(P *p, const char *s, size_t n) {
    char *d = palloc(p, n + 1);
    memcpy(d, s, n);
    return d;
}

static tok *addtok(P *p, int k, int line, const char *s, size_t n) {
    if (p->nt == p->ct) {
        int nc = p->ct ? p->ct * 2 : 256;
        tok *t = realloc(p->tk, (size_t)nc * sizeof *t);
        if (!t) perr(p, line, "out of memory");
        p->tk = t; p->ct = nc;
    }
    tok *t = &p->tk[p->nt++];
    memset(t, 0, sizeof *t);
    t->k = k; t->line = line; t->s = s; t->n = n;
    return t;
}
static int lines_in(const char *s, size_t a, size_t b) {
    int k = 0;
    for (size_t i = a; i < b; i++) k += s[i] == '\n';
    return k;
}
/* text s[i..j) before a tag; strip: '-', '+' or 0; lstrip applies to block/comment tags */
static void add_text(P *p, const char *s, size_t i, size_t j, int line, int strip, int lstrip, int line_start) {
    if (strip == '-') j = rstrip_ws(s, i, j);
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
    if (ctl == '-') { size_t w; while (i < n && (w = ws_at(s, n, i))) i += w; }
    else if (ctl != '+' && trim && i < n && s[i] == '\n') i++;
    return i;
}
static int is_id(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (c >= '0' && c <= '9'); }

/* Python string literal body s[0..n) (unicode-escape semantics) -> arena string */
static void lex_string(P *p, tok *t, const char *s, size_t n, int line) {
    char *o = palloc(p, n + 1), *d = o;
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
                d += u8enc(cp, d);
                continue;
            }
            *d++ = '\\'; *d++ = c;   /* unknown escapes stay as written */
            continue;
        }
        cp = 0;
        for (int k = 0; k < digits; k++, i++) {
            char h = i < n ? s[i] : 0;
            int v = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
            if (v < 0) perr(p, line, "truncated \\%c escape in a string literal", c);
            cp = cp * 16 + (uint32_t)v;
        }
        if (cp > 0x10FFFF) perr(p, line, "illegal Unicode character in a string literal");
        if (cp >= 0xD800 && cp <= 0xDFFF) perr(p, line, "surrogate escape in a string literal (not encodable as UTF-8)");
        d += u8enc(cp, d);
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
        while (i < n && (w = ws_at(s, n, i))) { line += s[i] == '\n'; i += w; }
        if (i >= n) perr(p, open_line, "unexpected end of template: unclosed '%s'", kind == '%' ? "{%" : "{{");
        if (!depth) {
            if (kind == '%') {
                if ((s[i] == '-' || s[i] == '+') && i + 2 < n && s[i + 1] == '%' && s[i + 2] == '}') {
                    addtok(p, K_BEND, line, s + i, 3);
                    size_t e = after_end(s, n, i + 3, s[i], 1);
                    line += lines_in(s, i, e); i = e; break;
                }
                if (s[i] == '%' && i + 1 < n && s[i + 1] == '}') {
                    addtok(p, K_BEND, line, s + i, 2);
                    size_t e = after_end(s, n, i + 2, 0, 1);
                    line += lines_in(s, i, e); i = e; break;
                }
            } else {
                if (s[i] == '-' && i + 2 < n && s[i + 1] == '}' && s[i + 2] == '}') {
                    addtok(p, K_VEND, line, s + i, 3);
                    size_t e = after_end(s, n, i + 3, '-', 0);
                    line += lines_in(s, i, e); i = e; break;
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
            if (k >= sizeof buf - 3) perr(p, line, "number literal too long");
            tok *t = addtok(p, isf ? K_FLOAT : K_INT, line, s + i, j - i);
            if (isf) t->f = strtod(buf, NULL);
            else {
                uint64_t v = 0;
                for (size_t q = 0; q < k; q++) {
                    if (v > (uint64_t)INT64_MAX / 10 || v * 10 + (uint64_t)(buf[q] - '0') > (uint64_t)INT64_MAX)
                        perr(p, line, "integer literal too large (ints are 64-bit here)");
                    v = v * 10 + (uint64_t)(buf[q] - '0');
                }
                t->i = (int64_t)v;
            }
            i = j;
        } else if (c == '\'' || c == '"') {
            size_t j = i + 1;
            int l0 = line;
            while (j < n && s[j] != c) { if (s[j] == '\\' && j + 1 < n) { line += s[j + 1] == '\n'; j++; } line += s[j] == '\n'; j++; }
            if (j >= n) perr(p, l0, "unterminated string literal");
            tok *t = addtok(p, K_STR, l0, NULL, 0);
            lex_string(p, t, s + i + 1, j - i - 1, l0);
            i = j + 1;
        } else {
            size_t len = 0;
            for (int k = 0; OPS2[k]; k++) if (i + 1 < n && s[i] == OPS2[k][0] && s[i + 1] == OPS2[k][1]) len = 2;
            if (!len && strchr("+-*/%~[](){}<>=.:|,;", c) && c) len = 1;
            if (!len) {
                if ((unsigned char)c >= 0x80) perr(p, line, "unexpected character in a tag");
                perr(p, line, "unexpected character '%c' in a tag", c);
            }
            if (len == 1 && (c == '(' || c == '[' || c == '{')) {
                if (depth >= MAX_DEPTH) perr(p, line, "brackets nested too deep");
                stack[depth++] = c;
            } else if (len == 1 && (c == ')' || c == ']' || c == '}')) {
                char want = c == ')' ? '(' : c == ']' ? '[' : '{';
                if (!depth || stack[depth - 1] != want) perr(p, line, "unexpected '%c'", c);
                depth--;
            }
            addtok(p, K_OP, line, s + i, len);
            i += len;
        }
    }
    *pi = i; *pline = line;
}

static void lex(P *p, const char *s, size_t n) {
    size_t i = 0;
    int line = 1, line_start = 1;
    while (i < n) {
        size_t j = i;
        while (j + 1 < n && !(s[j] == '{' && (s[j + 1] == '{' || s[j + 1] == '%' || s[j + 1] == '#'))) j++;
        if (j + 1 >= n) { addtok(p, K_TEXT, line, s + i, n - i); break; }
        char kind = s[j + 1];
        int ctl = j + 2 < n && (s[j + 2] == '-' || s[j + 2] == '+') ? s[j + 2] : 0;
        int tline = line + lines_in(s, i, j);
        size_t b = j + 2 + (ctl != 0);
        if (kind == '#') {
            add_text(p, s, i, j, line, ctl, 1, line_start);
            size_t e = b;
            while (e + 1 < n && !(s[e] == '#' && s[e + 1] == '}')) e++;
            if (e + 1 >= n) perr(p, tline, "unclosed comment");
            int ectl = e > b && (s[e - 1] == '-' || s[e - 1] == '+') ? s[e - 1] : 0;
            size_t k = after_end(s, n, e + 2, ectl, 1);
            line = tline + lines_in(s, j, k);
            line_start = k > 0 && s[k - 1] == '\n';
            i = k;
            continue;
        }
        if (kind == '%') {   /* {% raw %} ... {% endraw %} */
            size_t q = b, w;
            while (q < n && (w = ws_at(s, n, q))) q += w;
            if (q + 3 <= n && !memcmp(s + q, "raw", 3) && (q + 3 == n || !is_id(s[q + 3]))) {
                q += 3;
                while (q < n && (w = ws_at(s, n, q))) q += w;
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
                        while (r < n && (w = ws_at(s, n, r))) r += w;
                        if (r + 6 > n || memcmp(s + r, "endraw", 6) || (r + 6 < n && is_id(s[r + 6]))) continue;
                        r += 6;
                        while (r < n && (w = ws_at(s, n, r))) r += w;
                        int cl = 0;
                        if (r < n && (s[r] == '-' || s[r] == '+')) cl = s[r++];
                        if (r + 1 >= n || s[r] != '%' || s[r + 1] != '}') continue;
                        add_text(p, s, c0, e, tline + lines_in(s, j, c0), ectl, 1, cstart);
                        size_t k = after_end(s, n, r + 2, cl, 1);
                        line = tline + lines_in(s, j, k);
                        line_start = k > 0 && s[k - 1] == '\n';
                        i = k;
                        goto next;
                    }
                    perr(p, tline, "missing {%% endraw %%} for {%% raw %%}");
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

/* ---------------------------------------------------------------- parser */

static const char *const FILTERS[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape",
    "first", "float", "forceescape", "indent", "int", "items", "join", "last", "length", "list", "lower",
    "map", "max", "min", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
    "selectattr", "sort", "string", "sum", "title", "tojson", "trim", "unique", "upper", "wordcount", NULL};
static const char *const TESTS[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "escaped", "even", "false",
    "filter", "float", "ge", ">=", "gt", ">", "greaterthan", "in", "integer", "iterable", "le", "<=",
    "lower", "lt", "<", "lessthan", "mapping", "ne", "!=", "none", "number", "odd", "sameas", "sequence",
    "string", "test", "true", "undefined", "upper", NULL};
static int in_list(const char *const *l, const char *s) {
    for (; *l; l++) if (!strcmp(*l, s)) return 1;
    return 0;
}

static tok *cur(P *p) { return &p->tk[p->pos]; }
static tok *peekt(P *p, int k) { int q = p->pos + k; return &p->tk[q < p->nt ? q : p->nt - 1]; }
static void adv(P *p) { if (p->pos < p->nt - 1) p->pos++; }
static int is_op(tok *t, const char *op) { return t->k == K_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n); }
static int is_name(tok *t, const char *nm) { return t->k == K_NAME && !strcmp(t->s, nm); }
static const char *tokdesc(tok *t, char *buf, size_t n) {
    switch (t->k) {
    case K_EOF: return "end of template";
    case K_TEXT: return "template data";
    case K_VBEG: return "'{{'";
    case K_VEND: return "end of print statement";
    case K_BBEG: return "'{%'";
    case K_BEND: return "end of statement block";
    case K_STR: return "string";
    case K_INT: return "integer";
    case K_FLOAT: return "float";
    default: snprintf(buf, n, "'%.*s'", (int)(t->n < 40 ? t->n : 40), t->s); return buf;
    }
}
static NORETURN void unexpected(P *p, const char *want) {
    char b[64];
    perr(p, cur(p)->line, "expected %s, got %s", want, tokdesc(cur(p), b, sizeof b));
}
static void expect_op(P *p, const char *op) {
    if (!is_op(cur(p), op)) { char w[16]; snprintf(w, sizeof w, "'%s'", op); unexpected(p, w); }
    adv(p);
}
static void expect_k(P *p, int k, const char *what) { if (cur(p)->k != k) unexpected(p, what); adv(p); }
static const char *expect_name(P *p) {
    if (cur(p)->k != K_NAME) unexpected(p, "a name");
    const char *s = cur(p)->s;
    adv(p);
    return s;
}
static node *nn(P *p, int k, int line) { node *x = palloc(p, sizeof *x); x->k = k; x->line = line; return x; }
static void enter(P *p) { if (++p->depth > MAX_DEPTH) perr(p, cur(p)->line, "template nested too deep (limit %d)", MAX_DEPTH); }

/* growable node lists, built in the arena */
typedef struct { node **v; const char **kw; int n, cap; } nlist;
static void npush(P *p, nlist *l, node *x, const char *kw) {
    if (l->n == l->cap) {
        int nc = l->cap ? l->cap * 2 : 4;
        node **v = palloc(p, (size_t)nc * sizeof *v);
        const char **k = palloc(p, (size_t)nc * sizeof *k);
        if (l->n) { memcpy(v, l->v, (size_t)l->n * sizeof *v); memcpy(k, l->kw, (size_t)l->n * sizeof *k); }
        l->v = v; l->kw = k; l->cap = nc;
    }
    l->kw[l->n] = kw;
    l->v[l->n++] = x;
}
static void nset(node *x, nlist *l) { x->kv = l->v; x->kw = l->kw; x->n = l->n; }

static node *p_cond(P *p);
static node *p_or(P *p);
static node *p_unary(P *p, int with_filter);
static node *p_primary(P *p);
static node *p_postfix(P *p, node *x);

/* parse_tuple: "a", "a, b", "a," (condexpr: allow `x if c else y` items) */
static node *p_tuple(P *p, int condexpr, int explicit_parens) {
    int line = cur(p)->line;
    nlist l = {0};
    int is_tuple = 0;
    for (;;) {
        if (l.n) {
            if (!is_op(cur(p), ",")) break;
            adv(p);
            is_tuple = 1;
        }
        tok *t = cur(p);
        if (t->k == K_VEND || t->k == K_BEND || is_op(t, ")") || (l.n && is_name(t, "in"))) break;
        npush(p, &l, condexpr ? p_cond(p) : p_or(p), NULL);
    }
    if (!l.n && !explicit_parens) unexpected(p, "an expression");
    if (!is_tuple && l.n == 1) return l.v[0];
    node *x = nn(p, E_TUPLE, line);
    nset(x, &l);
    return x;
}

static void p_args(P *p, nlist *l) {   /* after '(' up to and including ')' */
    int kw_seen = 0;
    while (!is_op(cur(p), ")")) {
        if (l->n) { expect_op(p, ","); if (is_op(cur(p), ")")) break; }
        if (is_op(cur(p), "*") || is_op(cur(p), "**")) perr(p, cur(p)->line, "*args and **kwargs in calls are not supported");
        if (cur(p)->k == K_NAME && is_op(peekt(p, 1), "=")) {
            const char *k = cur(p)->s;
            adv(p); adv(p);
            npush(p, l, p_cond(p), k);
            kw_seen = 1;
        } else {
            if (kw_seen) perr(p, cur(p)->line, "positional argument follows keyword argument");
            npush(p, l, p_cond(p), NULL);
        }
    }
    adv(p);
}

static const char *dotted_name(P *p) {
    const char *nm = expect_name(p);
    while (is_op(cur(p), ".") && peekt(p, 1)->k == K_NAME) {
        adv(p);
        const char *b = expect_name(p);
        size_t la = strlen(nm), lb = strlen(b);
        char *d = palloc(p, la + lb + 2);
        memcpy(d, nm, la); d[la] = '.'; memcpy(d + la + 1, b, lb);
        nm = d;
    }
    return nm;
}

static node *p_filter(P *p, node *x) {   /* at '|' */
    int line = cur(p)->line;
    adv(p);
    const char *nm = dotted_name(p);
    if (!in_list(FILTERS, nm)) perr(p, line, "no filter named '%s'", nm);
    node *f = nn(p, E_FILTER, line);
    f->a = x; f->s = nm;
    if (is_op(cur(p), "(")) { nlist l = {0}; adv(p); p_args(p, &l); nset(f, &l); }
    return f;
}

static node *p_test(P *p, node *x) {   /* at 'is' */
    int line = cur(p)->line;
    adv(p);
    int neg = 0;
    if (is_name(cur(p), "not")) { neg = 1; adv(p); }
    const char *nm = dotted_name(p);
    if (!in_list(TESTS, nm)) perr(p, line, "no test named '%s'", nm);
    node *t = nn(p, E_TEST, line);
    t->a = x; t->s = nm; t->op = neg;
    nlist l = {0};
    tok *c = cur(p);
    if (is_op(c, "(")) { adv(p); p_args(p, &l); }
    else if ((c->k == K_NAME || c->k == K_STR || c->k == K_INT || c->k == K_FLOAT || is_op(c, "(") || is_op(c, "[") || is_op(c, "{")) &&
             !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) perr(p, line, "you cannot chain multiple tests with is");
        npush(p, &l, p_postfix(p, p_primary(p)), NULL);
    }
    nset(t, &l);
    return t;
}

static node *p_filterexpr(P *p, node *x) {
    for (;;) {
        if (is_op(cur(p), "|")) x = p_filter(p, x);
        else if (is_name(cur(p), "is")) x = p_test(p, x);
        else if (is_op(cur(p), "(")) {
            node *c = nn(p, E_CALL, cur(p)->line);
            nlist l = {0};
            adv(p); p_args(p, &l);
            c->a = x; nset(c, &l);
            x = c;
        } else break;
    }
    return x;
}

static node *p_postfix(P *p, node *x) {
    for (;;) {
        tok *t = cur(p);
        if (is_op(t, ".")) {
            adv(p);
            if (cur(p)->k == K_NAME) {
                node *a = nn(p, E_ATTR, t->line);
                a->a = x; a->s = cur(p)->s; a->sl = strlen(a->s);
                adv(p); x = a;
            } else if (cur(p)->k == K_INT) {
                node *a = nn(p, E_ITEM, t->line), *k = nn(p, E_CONST, t->line);
                k->v = vint(cur(p)->i);
                a->a = x; a->b = k;
                adv(p); x = a;
            } else unexpected(p, "a name or number after '.'");
        } else if (is_op(t, "[")) {
            adv(p);
            node *idx[3] = {NULL, NULL, NULL};
            int slice = 0;
            if (!is_op(cur(p), ":")) idx[0] = p_cond(p);
            if (is_op(cur(p), ":")) {
                slice = 1; adv(p);
                if (!is_op(cur(p), "]") && !is_op(cur(p), ":")) idx[1] = p_cond(p);
                if (is_op(cur(p), ":")) { adv(p); if (!is_op(cur(p), "]")) idx[2] = p_cond(p); }
            }
            if (is_op(cur(p), ",")) perr(p, t->line, "tuple subscripts are not supported");
            expect_op(p, "]");
            node *a = nn(p, slice ? E_SLICE : E_ITEM, t->line);
            a->a = x; a->b = idx[0]; a->c = idx[1]; a->d = idx[2];
            x = a;
        } else if (is_op(t, "(")) {
            node *c = nn(p, E_CALL, t->line);
            nlist l = {0};
            adv(p); p_args(p, &l);
            c->a = x; nset(c, &l);
            x = c;
        } else break;
    }
    return x;
}

static obj *const_str(P *p, const char *s, size_t n) {
    obj *o = palloc(p, sizeof *o);
    o->rc = -1; o->t = T_STR;
    o->s = palloc(p, n + 1);
    memcpy(o->s, s, n);
    o->len = o->cap = n;
    return o;
}

static node *p_primary(P *p) {
    tok *t = cur(p);
    int line = t->line;
    node *x;
    enter(p);
    if (t->k == K_NAME) {
        x = nn(p, E_CONST, line);
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True")) x->v = vbool(1);
        else if (!strcmp(t->s, "false") || !strcmp(t->s, "False")) x->v = vbool(0);
        else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) x->v = mk(T_NONE);
        else { x->k = E_NAME; x->s = t->s; }
        adv(p);
    } else if (t->k == K_STR) {
        size_t n = 0;
        int q = p->pos;
        while (p->tk[q].k == K_STR) n += p->tk[q++].n;
        char *buf = palloc(p, n + 1);
        n = 0;
        while (cur(p)->k == K_STR) { memcpy(buf + n, cur(p)->s, cur(p)->n); n += cur(p)->n; adv(p); }
        x = nn(p, E_CONST, line);
        x->v = mk(T_STR); x->v.u.o = const_str(p, buf, n);
    } else if (t->k == K_INT || t->k == K_FLOAT) {
        x = nn(p, E_CONST, line);
        x->v = t->k == K_INT ? vint(t->i) : vflt(t->f);
        adv(p);
    } else if (is_op(t, "(")) {
        adv(p);
        x = p_tuple(p, 1, 1);
        expect_op(p, ")");
    } else if (is_op(t, "[") || is_op(t, "{")) {
        int dict = t->s[0] == '{';
        nlist l = {0};
        adv(p);
        while (!is_op(cur(p), dict ? "}" : "]")) {
            if (l.n) { expect_op(p, ","); if (is_op(cur(p), dict ? "}" : "]")) break; }
            npush(p, &l, p_cond(p), NULL);
            if (dict) { expect_op(p, ":"); npush(p, &l, p_cond(p), NULL); }
        }
        adv(p);
        x = nn(p, dict ? E_DICT : E_LIST, line);
        nset(x, &l);
    } else unexpected(p, "an expression");
    p->depth--;
    return x;
}

static node *p_unary(P *p, int with_filter) {
    tok *t = cur(p);
    node *x;
    enter(p);
    if (is_op(t, "-") || is_op(t, "+")) {
        adv(p);
        x = nn(p, t->s[0] == '-' ? E_NEG : E_POS, t->line);
        x->a = p_unary(p, 0);
    } else x = p_primary(p);
    x = p_postfix(p, x);
    if (with_filter) x = p_filterexpr(p, x);
    p->depth--;
    return x;
}
static node *bin(P *p, int op, node *a, node *b, int line) { node *x = nn(p, E_BIN, line); x->op = op; x->a = a; x->b = b; return x; }
static node *p_pow(P *p) {
    node *x = p_unary(p, 1);
    while (is_op(cur(p), "**")) { int l = cur(p)->line; adv(p); x = bin(p, 'P', x, p_unary(p, 1), l); }
    return x;
}
static node *p_mul(P *p) {
    node *x = p_pow(p);
    for (;;) {
        tok *t = cur(p);
        int op = is_op(t, "*") ? '*' : is_op(t, "/") ? '/' : is_op(t, "//") ? 'F' : is_op(t, "%") ? '%' : 0;
        if (!op) return x;
        adv(p);
        x = bin(p, op, x, p_pow(p), t->line);
    }
}
static node *p_concat(P *p) {
    node *x = p_mul(p);
    while (is_op(cur(p), "~")) { int l = cur(p)->line; adv(p); x = bin(p, '~', x, p_mul(p), l); }
    return x;
}
static node *p_add(P *p) {
    node *x = p_concat(p);
    for (;;) {
        tok *t = cur(p);
        int op = is_op(t, "+") ? '+' : is_op(t, "-") ? '-' : 0;
        if (!op) return x;
        adv(p);
        x = bin(p, op, x, p_concat(p), t->line);
    }
}
static node *p_cmp(P *p) {
    int line = cur(p)->line;
    node *x = p_add(p);
    nlist l = {0};
    int ops[MAX_ARGS], n = 0;
    for (;;) {
        tok *t = cur(p);
        int op = is_op(t, "==") ? 'E' : is_op(t, "!=") ? 'N' : is_op(t, "<") ? '<' : is_op(t, "<=") ? 'L' :
                 is_op(t, ">") ? '>' : is_op(t, ">=") ? 'G' : is_name(t, "in") ? 'I' : 0;
        if (!op && is_name(t, "not") && is_name(peekt(p, 1), "in")) { op = 'J'; adv(p); }
        if (!op) break;
        if (n == MAX_ARGS) perr(p, t->line, "comparison chain too long");
        adv(p);
        ops[n++] = op;
        npush(p, &l, p_add(p), NULL);
    }
    if (!n) return x;
    node *c = nn(p, E_CMP, line);
    c->a = x; nset(c, &l);
    c->ops = palloc(p, (size_t)n * sizeof(int));
    memcpy(c->ops, ops, (size_t)n * sizeof(int));
    return c;
}
static node *p_not(P *p) {
    if (is_name(cur(p), "not")) {
        node *x = nn(p, E_NOT, cur(p)->line);
        adv(p);
        enter(p);
        x->a = p_not(p);
        p->depth--;
        return x;
    }
    return p_cmp(p);
}
static node *p_and(P *p) {
    node *x = p_not(p);
    while (is_name(cur(p), "and")) { node *y = nn(p, E_AND, cur(p)->line); adv(p); y->a = x; y->b = p_not(p); x = y; }
    return x;
}
static node *p_or(P *p) {
    node *x = p_and(p);
    while (is_name(cur(p), "or")) { node *y = nn(p, E_OR, cur(p)->line); adv(p); y->a = x; y->b = p_and(p); x = y; }
    return x;
}
static node *p_cond(P *p) {
    enter(p);
    node *x = p_or(p);
    while (is_name(cur(p), "if")) {
        node *c = nn(p, E_COND, cur(p)->line);
        adv(p);
        c->a = p_or(p); c->b = x;
        if (is_name(cur(p), "else")) { adv(p); c->c = p_cond(p); }
        x = c;
    }
    p->depth--;
    return x;
}

/* assignment target: name, or names separated by commas, optionally parenthesised */
static node *p_target(P *p) {
    int line = cur(p)->line;
    if (is_op(cur(p), "(")) {
        adv(p);
        node *x = p_target(p);
        expect_op(p, ")");
        return x;
    }
    nlist l = {0};
    int tuple = 0;
    for (;;) {
        node *x = nn(p, E_NAME, cur(p)->line);
        x->s = expect_name(p);
        npush(p, &l, x, NULL);
        if (!is_op(cur(p), ",")) break;
        adv(p); tuple = 1;
        if (cur(p)->k != K_NAME || is_name(cur(p), "in")) break;
    }
    if (!tuple) return l.v[0];
    node *t = nn(p, E_TUPLE, line);
    nset(t, &l);
    return t;
}

static node *p_body(P *p, const char *const *ends);

static void end_tag(P *p, const char *name) {   /* at the end tag's name */
    if (!is_name(cur(p), name)) { char w[32]; snprintf(w, sizeof w, "'%s'", name); unexpected(p, w); }
    adv(p);
    expect_k(p, K_BEND, "end of statement block");
}

static node *p_stmt(P *p, tok *nt) {
    const char *nm = nt->s;
    int line = nt->line;
    node *x;
    if (!strcmp(nm, "if")) {
        static const char *const ends[] = {"elif", "else", "endif", NULL};
        x = nn(p, S_IF, line);
        x->a = p_tuple(p, 0, 0);
        expect_k(p, K_BEND, "end of statement block");
        x->b = p_body(p, ends);
        node *c = x;
        for (;;) {
            if (is_name(cur(p), "elif")) {
                node *e = nn(p, S_IF, cur(p)->line);
                adv(p);
                e->a = p_tuple(p, 0, 0);
                expect_k(p, K_BEND, "end of statement block");
                e->b = p_body(p, ends);
                c->c = e; c = e;
            } else if (is_name(cur(p), "else")) {
                static const char *const e2[] = {"endif", NULL};
                adv(p);
                expect_k(p, K_BEND, "end of statement block");
                c->c = p_body(p, e2);
            } else break;
        }
        end_tag(p, "endif");
    } else if (!strcmp(nm, "for")) {
        static const char *const ends[] = {"else", "endfor", NULL}, *const e2[] = {"endfor", NULL};
        x = nn(p, S_FOR, line);
        x->a = p_target(p);
        if (!is_name(cur(p), "in")) unexpected(p, "'in'");
        adv(p);
        x->b = p_tuple(p, 0, 0);
        if (is_name(cur(p), "if")) { adv(p); x->c = p_cond(p); }
        if (is_name(cur(p), "recursive")) perr(p, line, "recursive loops are not supported");
        expect_k(p, K_BEND, "end of statement block");
        p->loops++;
        x->d = p_body(p, ends);
        p->loops--;
        if (is_name(cur(p), "else")) { adv(p); expect_k(p, K_BEND, "end of statement block"); x->e = p_body(p, e2); }
        end_tag(p, "endfor");
    } else if (!strcmp(nm, "set")) {
        node *tg;
        if (cur(p)->k == K_NAME && is_op(peekt(p, 1), ".") && peekt(p, 2)->k == K_NAME) {
            tg = nn(p, E_ATTR, line);
            node *o = nn(p, E_NAME, line);
            o->s = cur(p)->s;
            adv(p); adv(p);
            tg->a = o; tg->s = cur(p)->s; tg->sl = strlen(tg->s);
            adv(p);
        } else tg = p_target(p);
        if (is_op(cur(p), "=")) {
            adv(p);
            x = nn(p, S_SET, line);
            x->a = tg;
            x->b = p_tuple(p, 1, 0);
            expect_k(p, K_BEND, "end of statement block");
        } else {
            static const char *const ends[] = {"endset", NULL};
            if (tg->k != E_NAME) perr(p, line, "a block set assigns to one name");
            x = nn(p, S_SETBLK, line);
            x->a = tg;
            node *f = nn(p, E_BLOCKVAL, line);
            while (is_op(cur(p), "|")) f = p_filter(p, f);
            x->b = f;
            expect_k(p, K_BEND, "end of statement block");
            x->d = p_body(p, ends);
            end_tag(p, "endset");
        }
    } else if (!strcmp(nm, "macro")) {
        static const char *const ends[] = {"endmacro", NULL};
        x = nn(p, S_MACRO, line);
        x->s = expect_name(p);
        expect_op(p, "(");
        nlist l = {0};
        while (!is_op(cur(p), ")")) {
            if (l.n) expect_op(p, ",");
            const char *a = expect_name(p);
            node *d = NULL;
            if (is_op(cur(p), "=")) { adv(p); d = p_cond(p); }
            npush(p, &l, d, a);
        }
        adv(p);
        nset(x, &l);
        expect_k(p, K_BEND, "end of statement block");
        int loops = p->loops;
        p->loops = 0;
        x->d = p_body(p, ends);
        p->loops = loops;
        adv(p);
        if (cur(p)->k == K_NAME) adv(p);
        expect_k(p, K_BEND, "end of statement block");
    } else if (!strcmp(nm, "break") || !strcmp(nm, "continue")) {
        if (!p->loops) perr(p, line, "'%s' outside a loop", nm);
        x = nn(p, nm[0] == 'b' ? S_BREAK : S_CONT, line);
        expect_k(p, K_BEND, "end of statement block");
    } else if (!strcmp(nm, "filter")) {
        static const char *const ends[] = {"endfilter", NULL};
        x = nn(p, S_FILTER, line);
        node *f = nn(p, E_BLOCKVAL, line);
        p->pos--;   /* p_filter expects to sit on the '|' (here: the tag name) */
        f = p_filter(p, f);
        while (is_op(cur(p), "|")) f = p_filter(p, f);
        x->b = f;
        expect_k(p, K_BEND, "end of statement block");
        x->d = p_body(p, ends);
        end_tag(p, "endfilter");
    } else if (!strcmp(nm, "generation")) {
        static const char *const ends[] = {"endgeneration", NULL};
        expect_k(p, K_BEND, "end of statement block");
        x = p_body(p, ends);
        end_tag(p, "endgeneration");
    } else if (!strcmp(nm, "call") || !strcmp(nm, "include") || !strcmp(nm, "extends") || !strcmp(nm, "import") ||
               !strcmp(nm, "from") || !strcmp(nm, "block") || !strcmp(nm, "do") || !strcmp(nm, "with") ||
               !strcmp(nm, "autoescape")) {
        perr(p, line, "'%s' tags are not supported", nm);
    } else perr(p, line, "unknown tag '%s'", nm);
    return x;
}

static node *p_body(P *p, const char *const *ends) {
    node *x = nn(p, S_LIST, cur(p)->line);
    nlist l = {0};
    enter(p);
    for (;;) {
        tok *t = cur(p);
        if (t->k == K_EOF) {
            if (ends) { int k = 0; while (ends[k + 1]) k++; perr(p, t->line, "unexpected end of template: expected '%s'", ends[k]); }
            break;
        }
        if (t->k == K_TEXT) {
            node *s = nn(p, S_TEXT, t->line);
            s->s = t->s; s->sl = t->n;
            npush(p, &l, s, NULL);
            adv(p);
        } else if (t->k == K_VBEG) {
            node *s = nn(p, S_OUT, t->line);
            adv(p);
            s->a = p_tuple(p, 1, 0);
            expect_k(p, K_VEND, "end of print statement");
            npush(p, &l, s, NULL);
        } else if (t->k == K_BBEG) {
            tok *nt = peekt(p, 1);
            if (nt->k != K_NAME) { adv(p); unexpected(p, "a statement name"); }
            if (ends && in_list(ends, nt->s)) { adv(p); break; }
            adv(p); adv(p);
            npush(p, &l, p_stmt(p, nt), NULL);
        } else unexpected(p, "template data or a tag");
    }
    p->depth--;
    nset(x, &l);
    return x;
}

void sk_jinja_free(sk_jinja *t) {
    if (!t) return;
    for (ablk *b = t->arena; b;) { ablk *nx = b->next; free(b); b = nx; }
    free(t);
}

static int parse_run(P *p, const char *src, size_t len) {
    if (setjmp(p->jb)) return 1;
    /* newlines normalised to \n, one trailing newline dropped (keep_trailing_newline=False) */
    char *s = palloc(p, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') { s[n++] = '\n'; if (i + 1 < len && src[i + 1] == '\n') i++; }
        else s[n++] = src[i];
    }
    if (n && s[n - 1] == '\n') n--;
    lex(p, s, n);
    p->t->root = p_body(p, NULL);
    return 0;
}

int sk_jinja_parse(sk_jinja **out, const char *src, size_t len, char *err, size_t errlen) {
    *out = NULL;
    if (err && errlen) err[0] = 0;
    size_t bad;
    if (!utf8_valid((const unsigned char *)src, len, &bad)) {
        if (err && errlen) snprintf(err, errlen, "line %d: template is not valid UTF-8", 1 + lines_in(src, 0, bad));
        return 1;
    }
    sk_jinja *t = calloc(1, sizeof *t);
    P *p = calloc(1, sizeof *p);
    if (!t || !p) { free(t); free(p); if (err && errlen) snprintf(err, errlen, "out of memory"); return 1; }
    p->t = t; p->err = err; p->errlen = errlen;
    int failed = parse_run(p, src, len);
    free(p->tk);
    free(p);
    if (failed) { sk_jinja_free(t); return 1; }
    *out = t;
    return 0;
}

/* ---------------------------------------------------------------- runtime state */

typedef struct scope { obj *vars; struct scope *up; } scope;
typedef struct {
    jmp_buf jb;
    char *err; size_t errlen;
    obj all;                 /* sentinel of the list of live objects */
    size_t mem; uint64_t work;
    long iters;
    int depth, mdepth, line, brk;
    obj *out, *ctx;
    scope *sc, *root;
    val blockval;
    time_t now;
} R;
typedef struct { int n, np; val *v; const char **kw; } args;

static NORETURN PRINTF(2, 3) void die(R *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    line_msg(r->err, r->errlen, r->line, fmt, ap);
    va_end(ap);
    longjmp(r->jb, 1);
}
static void charge(R *r, size_t n) {
    r->mem += n; r->work += n;
    if (r->mem > MAX_MEM) die(r, "memory limit exceeded (1 GiB)");
    if (r->work > MAX_WORK) die(r, "work limit exceeded (template does too much)");
}
static void scan(R *r, size_t n) { r->work += n; if (r->work > MAX_WORK) die(r, "work limit exceeded (template does too much)"); }
static obj *onew(R *r, int t) {
    obj *o = calloc(1, sizeof *o);
    if (!o) die(r, "out of memory");
    o->t = t; o->rc = 1;
    o->next = r->all.next; o->prev = &r->all;
    r->all.next->prev = o; r->all.next = o;
    charge(r, sizeof *o);
    return o;
}
static void ofree(R *r, obj *o) {
    o->prev->next = o->next; o->next->prev = o->prev;
    size_t b = sizeof *o + o->cap + (size_t)o->vcap * sizeof(val) * (o->k ? 2 : 1);
    r->mem = r->mem > b ? r->mem - b : 0;
    free(o->s); free(o->k); free(o->v); free(o);
}
/* drop a reference; frees iteratively (deeply nested values cannot overflow the stack) */
static void unref(R *r, val v) {
    obj *o = vobj(v);
    if (!o || o->rc < 0 || --o->rc > 0) return;
    obj *pend = o;
    o->prev->next = o->next; o->next->prev = o->prev;
    o->prev = NULL;
    while (pend) {
        obj *p = pend;
        pend = p->prev;
        int nk = p->t == T_DICT ? p->n : 0, nv = (p->t == T_DICT || p->t == T_LIST) ? p->n : 0;
        for (int i = 0; i < nk + nv + (p->ref != NULL); i++) {
            obj *c = i < nk ? vobj(p->k[i]) : i < nk + nv ? vobj(p->v[i - nk]) : p->ref;
            if (c && c->rc > 0 && --c->rc == 0) {
                c->prev->next = c->next; c->next->prev = c->prev;
                c->prev = pend; pend = c;
            }
        }
        p->prev = p->next = p;   /* already unlinked: make ofree's unlink a no-op */
        ofree(r, p);
    }
}

static void sgrow(R *r, obj *o, size_t need) {
    if (need > MAX_STR - o->len) die(r, "string or output longer than 256 MiB");
    size_t want = o->len + need + 1;
    if (want <= o->cap) return;
    size_t nc = o->cap ? o->cap : 16;
    while (nc < want) nc *= 2;
    if (nc > MAX_STR + 1) nc = MAX_STR + 1;
    char *s = realloc(o->s, nc);
    if (!s) die(r, "out of memory");
    size_t old = o->cap;
    o->s = s; o->cap = nc;
    charge(r, nc - old);
}
static void sput(R *r, obj *o, const char *s, size_t n) {
    sgrow(r, o, n);
    if (n) memcpy(o->s + o->len, s, n);
    o->len += n;
    o->s[o->len] = 0;
}
static void sputc(R *r, obj *o, char c) { sput(r, o, &c, 1); }
static PRINTF(3, 4) void sprintf_(R *r, obj *o, const char *fmt, ...) {
    char b[128];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    sput(r, o, b, k < 0 ? 0 : (size_t)k < sizeof b ? (size_t)k : sizeof b - 1);
}
static void sputcp(R *r, obj *o, uint32_t c) { char b[4]; sput(r, o, b, (size_t)u8enc(c, b)); }
static obj *snew(R *r) { obj *o = onew(r, T_STR); sgrow(r, o, 0); o->s[0] = 0; return o; }
static val sval(obj *o) { val v = mk(T_STR); v.u.o = o; return v; }
static val vstrn(R *r, const char *s, size_t n) { obj *o = snew(r); sput(r, o, s, n); return sval(o); }
static val vstr(R *r, const char *s) { return vstrn(r, s, strlen(s)); }
static PRINTF(2, 3) val undef(R *r, const char *fmt, ...) {
    char b[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    val v = mk(T_UNDEF);
    v.u.o = vstr(r, b).u.o;
    return v;
}
static NORETURN void undef_fail(R *r, val v) {
    if (v.u.o) die(r, "%s", v.u.o->s);
    die(r, "value is undefined");
}

static obj *lnew(R *r, int tuple) { obj *o = onew(r, T_LIST); o->flag = tuple; return o; }
static void vgrow(R *r, obj *o, int two) {
    if (o->n < o->vcap) return;
    if (o->n >= (1 << 24)) die(r, "list or dict longer than 16M items");
    int nc = o->vcap ? o->vcap * 2 : 4;
    val *v = realloc(o->v, (size_t)nc * sizeof *v);
    if (!v) die(r, "out of memory");
    o->v = v;
    if (two) { val *k = realloc(o->k, (size_t)nc * sizeof *k); if (!k) die(r, "out of memory"); o->k = k; }
    charge(r, (size_t)(nc - o->vcap) * sizeof(val) * (two ? 2 : 1));
    o->vcap = nc;
}
static void lpush(R *r, obj *l, val v) { vgrow(r, l, 0); l->v[l->n++] = v; }
static val lval(obj *o) { val v = mk(o->t); v.u.o = o; return v; }
static obj *dnew(R *r) { obj *o = onew(r, T_DICT); o->k = calloc(1, sizeof(val)); if (!o->k) die(r, "out of memory"); return o; }
static val *dfind(const obj *d, const char *k, size_t kn) {
    for (int i = 0; i < d->n; i++)
        if (d->k[i].t == T_STR && d->k[i].u.o->len == kn && !memcmp(d->k[i].u.o->s, k, kn)) return &d->v[i];
    return NULL;
}
static int eq(R *r, val a, val b, int depth);
static val *dget(R *r, const obj *d, val key) {
    if (key.t == T_STR) return dfind(d, key.u.o->s, key.u.o->len);
    for (int i = 0; i < d->n; i++) if (eq(r, d->k[i], key, 0)) return &d->v[i];
    return NULL;
}
/* takes ownership of key and v */
static void dset(R *r, obj *d, val key, val v) {
    val *old = dget(r, d, key);
    if (old) { val o = *old; *old = v; unref(r, o); unref(r, key); return; }
    vgrow(r, d, 1);
    d->k[d->n] = key; d->v[d->n++] = v;
}
static void dset_s(R *r, obj *d, const char *k, val v) {
    val *old = dfind(d, k, strlen(k));
    if (old) { val o = *old; *old = v; unref(r, o); return; }
    dset(r, d, vstr(r, k), v);
}

static val from_json(R *r, const sk_json *j) {
    val v;
    switch (j->type) {
    case SK_JSON_BOOL: return vbool(j->boolean);
    case SK_JSON_NUM:
        if (j->num == floor(j->num) && fabs(j->num) < 9.2e18) return vint((int64_t)j->num);
        return vflt(j->num);
    case SK_JSON_STR: return vstrn(r, j->str, j->str_len);
    case SK_JSON_ARR: {
        obj *l = lnew(r, 0);
        for (int i = 0; i < j->n; i++) lpush(r, l, from_json(r, &j->items[i]));
        return lval(l);
    }
    case SK_JSON_OBJ: {
        obj *d = dnew(r);
        for (int i = 0; i < j->n; i++) dset(r, d, vstrn(r, j->keys[i], j->key_lens[i]), from_json(r, &j->items[i]));
        return lval(d);
    }
    default: v = mk(T_NONE); return v;
    }
}

/* ---------------------------------------------------------------- printing */

static const char *tname(val v) {
    switch (v.t) {
    case T_UNDEF: return "Undefined";
    case T_NONE: return "NoneType";
    case T_BOOL: return "bool";
    case T_INT: return "int";
    case T_FLOAT: return "float";
    case T_STR: return "str";
    case T_LIST: return v.u.o->flag ? "tuple" : "list";
    case T_DICT: return v.u.o->flag ? "Namespace" : "dict";
    case T_LOOP: return "LoopContext";
    case T_MACRO: return "Macro";
    default: return "builtin_function_or_method";
    }
}
/* Python's repr(float) */
static void pfloat(char *out, size_t on, double d) {
    if (isnan(d)) { snprintf(out, on, "nan"); return; }
    if (isinf(d)) { snprintf(out, on, d < 0 ? "-inf" : "inf"); return; }
    char t[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(t, sizeof t, "%.*e", prec - 1, d);
        if (strtod(t, NULL) == d) break;
    }
    char dig[24];
    int nd = 0, neg = t[0] == '-';
    const char *q = t + neg;
    for (; *q && *q != 'e'; q++) if (*q >= '0' && *q <= '9') dig[nd++] = *q;
    int e = atoi(q + 1);
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    dig[nd] = 0;
    char *o = out;
    size_t left = on;
#define EMIT(...) do { int k_ = snprintf(o, left, __VA_ARGS__); if (k_ > 0 && (size_t)k_ < left) { o += k_; left -= (size_t)k_; } } while (0)
    if (neg) EMIT("-");
    if (e >= -5 + 1 && e < 16) {
        if (e >= 0) {
            for (int i = 0; i <= e; i++) EMIT("%c", i < nd ? dig[i] : '0');
            EMIT(".");
            if (nd > e + 1) EMIT("%s", dig + e + 1); else EMIT("0");
        } else {
            EMIT("0.");
            for (int i = 0; i < -e - 1; i++) EMIT("0");
            EMIT("%s", dig);
        }
    } else {
        EMIT("%c", dig[0]);
        if (nd > 1) EMIT(".%s", dig + 1);
        EMIT("e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
#undef EMIT
}
static int py_nonprint(uint32_t c) {
    return c < 0x20 || (c >= 0x7F && c < 0xA0) || c == 0xAD || (c >= 0x200B && c <= 0x200F) || (c >= 0x2028 && c <= 0x202E) ||
           (c >= 0x2060 && c <= 0x2064) || c == 0xFEFF || (c >= 0xE000 && c <= 0xF8FF) || (c >= 0xFFF9 && c <= 0xFFFB) ||
           c == 0xFFFE || c == 0xFFFF;
}
static void repr_str(R *r, obj *b, const char *s, size_t n) {
    int sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    sputc(r, b, q);
    for (size_t i = 0; i < n;) {
        size_t i0 = i;
        uint32_t c = u8dec(s, n, &i);
        if (c == (uint32_t)q || c == '\\') { sputc(r, b, '\\'); sputc(r, b, (char)c); }
        else if (c == '\n') sput(r, b, "\\n", 2);
        else if (c == '\r') sput(r, b, "\\r", 2);
        else if (c == '\t') sput(r, b, "\\t", 2);
        else if (py_nonprint(c)) {
            if (c < 0x100) sprintf_(r, b, "\\x%02x", c);
            else sprintf_(r, b, "\\u%04x", c);
        } else sput(r, b, s + i0, i - i0);
    }
    sputc(r, b, q);
}
/* str(v) (repr=0) or repr(v) into b */
static void write_val(R *r, obj *b, val v, int repr, int depth) {
    char t[40];
    if (depth > MAX_DEPTH) die(r, "value nested too deep to print");
    switch (v.t) {
    case T_UNDEF: if (repr) sput(r, b, "Undefined", 9); break;
    case T_NONE: sput(r, b, "None", 4); break;
    case T_BOOL: v.u.i ? sput(r, b, "True", 4) : sput(r, b, "False", 5); break;
    case T_INT: sprintf_(r, b, "%lld", (long long)v.u.i); break;
    case T_FLOAT: pfloat(t, sizeof t, v.u.f); sput(r, b, t, strlen(t)); break;
    case T_STR: if (repr) repr_str(r, b, v.u.o->s, v.u.o->len); else sput(r, b, v.u.o->s, v.u.o->len); break;
    case T_LIST: {
        obj *l = v.u.o;
        sputc(r, b, l->flag ? '(' : '[');
        for (int i = 0; i < l->n; i++) { if (i) sput(r, b, ", ", 2); write_val(r, b, l->v[i], 1, depth + 1); }
        if (l->flag && l->n == 1) sputc(r, b, ',');
        sputc(r, b, l->flag ? ')' : ']');
        break;
    }
    case T_DICT: {
        obj *d = v.u.o;
        if (d->flag) sput(r, b, "<Namespace ", 11);
        sputc(r, b, '{');
        for (int i = 0; i < d->n; i++) {
            if (i) sput(r, b, ", ", 2);
            write_val(r, b, d->k[i], 1, depth + 1);
            sput(r, b, ": ", 2);
            write_val(r, b, d->v[i], 1, depth + 1);
        }
        sputc(r, b, '}');
        if (d->flag) sputc(r, b, '>');
        break;
    }
    case T_LOOP: sput(r, b, "<LoopContext>", 13); break;
    case T_MACRO: sprintf_(r, b, "<Macro '%s'>", v.u.m->s); break;
    default: sput(r, b, "<built-in function>", 19); break;
    }
}
static val to_str(R *r, val v) {
    if (v.t == T_STR) return ref(v);
    obj *o = snew(r);
    write_val(r, o, v, 0, 0);
    return sval(o);
}

/* ---------------------------------------------------------------- comparisons and arithmetic */

static int isnum(val v) { return v.t == T_BOOL || v.t == T_INT || v.t == T_FLOAT; }
static int isint(val v) { return v.t == T_BOOL || v.t == T_INT; }
static double num(val v) { return v.t == T_FLOAT ? v.u.f : (double)v.u.i; }
static int truthy(val v) {
    switch (v.t) {
    case T_UNDEF: case T_NONE: return 0;
    case T_BOOL: case T_INT: return v.u.i != 0;
    case T_FLOAT: return v.u.f != 0;
    case T_STR: return v.u.o->len != 0;
    case T_LIST: case T_DICT: return v.u.o->n != 0;
    default: return 1;
    }
}
static int eq(R *r, val a, val b, int depth) {
    if (depth > MAX_DEPTH) die(r, "values nested too deep to compare");
    if (isnum(a) && isnum(b)) return isint(a) && isint(b) ? a.u.i == b.u.i : num(a) == num(b);
    if (a.t != b.t) return 0;
    switch (a.t) {
    case T_UNDEF: case T_NONE: return 1;
    case T_STR: scan(r, a.u.o->len); return a.u.o->len == b.u.o->len && !memcmp(a.u.o->s, b.u.o->s, a.u.o->len);
    case T_LIST:
        if (a.u.o->flag != b.u.o->flag || a.u.o->n != b.u.o->n) return 0;
        for (int i = 0; i < a.u.o->n; i++) if (!eq(r, a.u.o->v[i], b.u.o->v[i], depth + 1)) return 0;
        return 1;
    case T_DICT:
        if (a.u.o->flag || b.u.o->flag) return a.u.o == b.u.o;
        if (a.u.o->n != b.u.o->n) return 0;
        for (int i = 0; i < a.u.o->n; i++) {
            val *o = dget(r, b.u.o, a.u.o->k[i]);
            if (!o || !eq(r, a.u.o->v[i], *o, depth + 1)) return 0;
        }
        return 1;
    case T_MACRO: return a.u.m == b.u.m;
    case T_FUNC: return a.u.i == b.u.i;
    default: return a.u.o == b.u.o;
    }
}
/* Python's ordering: <0, 0, >0; a TypeError for unorderable types */
static int cmp(R *r, val a, val b, const char *op, int depth) {
    if (depth > MAX_DEPTH) die(r, "values nested too deep to compare");
    if (a.t == T_UNDEF) undef_fail(r, a);
    if (b.t == T_UNDEF) undef_fail(r, b);
    if (isnum(a) && isnum(b)) {
        if (isint(a) && isint(b)) return (a.u.i > b.u.i) - (a.u.i < b.u.i);
        double x = num(a), y = num(b);
        return (x > y) - (x < y);
    }
    if (a.t == T_STR && b.t == T_STR) {
        size_t n = a.u.o->len < b.u.o->len ? a.u.o->len : b.u.o->len;
        scan(r, n);
        int c = memcmp(a.u.o->s, b.u.o->s, n);
        return c ? c : (a.u.o->len > b.u.o->len) - (a.u.o->len < b.u.o->len);
    }
    if (a.t == T_LIST && b.t == T_LIST && a.u.o->flag == b.u.o->flag) {
        for (int i = 0; i < a.u.o->n && i < b.u.o->n; i++)
            if (!eq(r, a.u.o->v[i], b.u.o->v[i], depth + 1)) return cmp(r, a.u.o->v[i], b.u.o->v[i], op, depth + 1);
        return (a.u.o->n > b.u.o->n) - (a.u.o->n < b.u.o->n);
    }
    die(r, "'%s' not supported between instances of '%s' and '%s'", op, tname(a), tname(b));
}
static size_t find_bytes(R *r, const char *h, size_t hn, const char *nd, size_t nn, size_t from) {
    if (nn == 0) return from <= hn ? from : (size_t)-1;
    for (size_t i = from; i + nn <= hn; i++) {
        const char *q = memchr(h + i, nd[0], hn - nn + 1 - i);
        if (!q) break;
        i = (size_t)(q - h);
        scan(r, nn);
        if (!memcmp(h + i, nd, nn)) return i;
    }
    scan(r, hn);
    return (size_t)-1;
}
static int contains(R *r, val c, val x) {
    switch (c.t) {
    case T_STR:
        if (x.t != T_STR) die(r, "'in <string>' requires string as left operand, not %s", tname(x));
        return find_bytes(r, c.u.o->s, c.u.o->len, x.u.o->s, x.u.o->len, 0) != (size_t)-1;
    case T_LIST: for (int i = 0; i < c.u.o->n; i++) if (eq(r, c.u.o->v[i], x, 0)) return 1; return 0;
    case T_DICT: return dget(r, c.u.o, x) != NULL;
    case T_UNDEF: return 0;
    default: die(r, "argument of type '%s' is not iterable", tname(c));
    }
}
static int64_t iadd(R *r, int64_t a, int64_t b, int op) {
    int64_t z;
    int ov = op == '+' ? __builtin_add_overflow(a, b, &z) : op == '-' ? __builtin_sub_overflow(a, b, &z) : __builtin_mul_overflow(a, b, &z);
    if (ov) die(r, "integer overflow (ints are 64-bit here)");
    return z;
}
static val repeat(R *r, val s, int64_t n) {
    if (s.t == T_STR) {
        obj *o = snew(r);
        if (n > 0 && s.u.o->len) {
            if ((uint64_t)n > MAX_STR / s.u.o->len) die(r, "string or output longer than 256 MiB");
            sgrow(r, o, s.u.o->len * (size_t)n);
            for (int64_t i = 0; i < n; i++) sput(r, o, s.u.o->s, s.u.o->len);
        }
        return sval(o);
    }
    obj *l = lnew(r, s.u.o->flag);
    if (n > 0 && s.u.o->n && n > (1 << 24) / s.u.o->n) die(r, "list or dict longer than 16M items");
    for (int64_t i = 0; i < n; i++) for (int j = 0; j < s.u.o->n; j++) lpush(r, l, ref(s.u.o->v[j]));
    return lval(l);
}
static val arith(R *r, int op, val a, val b) {
    if (op == '~') {
        val x = to_str(r, a), y = to_str(r, b);
        obj *o = snew(r);
        sput(r, o, x.u.o->s, x.u.o->len); sput(r, o, y.u.o->s, y.u.o->len);
        unref(r, x); unref(r, y);
        return sval(o);
    }
    if (a.t == T_UNDEF) undef_fail(r, a);
    if (b.t == T_UNDEF) undef_fail(r, b);
    if (isnum(a) && isnum(b)) {
        int ints = isint(a) && isint(b);
        double x = num(a), y = num(b);
        switch (op) {
        case '+': case '-': case '*': return ints ? vint(iadd(r, a.u.i, b.u.i, op)) : vflt(op == '+' ? x + y : op == '-' ? x - y : x * y);
        case '/': if (y == 0) die(r, "division by zero"); return vflt(x / y);
        case 'F': case '%':
            if (y == 0) die(r, ints ? "integer division or modulo by zero" : "float division by zero");
            if (ints) {
                if (a.u.i == INT64_MIN && b.u.i == -1) die(r, "integer overflow (ints are 64-bit here)");
                int64_t q = a.u.i / b.u.i, m = a.u.i % b.u.i;
                if (m && ((m < 0) != (b.u.i < 0))) { q--; m += b.u.i; }
                return vint(op == 'F' ? q : m);
            } else {
                double m = fmod(x, y), d = (x - m) / y;
                if (m) { if ((y < 0) != (m < 0)) { m += y; d -= 1.0; } } else m = copysign(0.0, y);
                double f;
                if (d) { f = floor(d); if (d - f > 0.5) f += 1.0; } else f = copysign(0.0, x / y);
                return vflt(op == 'F' ? f : m);
            }
        case 'P':
            if (ints && b.u.i >= 0) {
                int64_t base = a.u.i, e = b.u.i, z = 1;
                while (e) {
                    if (e & 1) z = iadd(r, z, base, '*');
                    e >>= 1;
                    if (e) base = iadd(r, base, base, '*');
                }
                return vint(z);
            }
            if (x == 0 && y < 0) die(r, "zero to a negative power");
            if (x < 0 && y != floor(y)) die(r, "negative number to a fractional power (complex result)");
            return vflt(pow(x, y));
        }
    }
    if (op == '+' && a.t == T_STR && b.t == T_STR) {
        obj *o = snew(r);
        sput(r, o, a.u.o->s, a.u.o->len); sput(r, o, b.u.o->s, b.u.o->len);
        return sval(o);
    }
    if (op == '+' && a.t == T_LIST && b.t == T_LIST && a.u.o->flag == b.u.o->flag) {
        obj *l = lnew(r, a.u.o->flag);
        for (int i = 0; i < a.u.o->n; i++) lpush(r, l, ref(a.u.o->v[i]));
        for (int i = 0; i < b.u.o->n; i++) lpush(r, l, ref(b.u.o->v[i]));
        return lval(l);
    }
    if (op == '*' && (a.t == T_STR || a.t == T_LIST) && isint(b)) return repeat(r, a, b.u.i);
    if (op == '*' && (b.t == T_STR || b.t == T_LIST) && isint(a)) return repeat(r, b, a.u.i);
    if (op == '%' && a.t == T_STR) die(r, "the %% string formatting operator is not supported");
    static const char *const nm[] = {"+", "-", "*", "/", "//", "%", "**"};
    const char *o = nm[op == '+' ? 0 : op == '-' ? 1 : op == '*' ? 2 : op == '/' ? 3 : op == 'F' ? 4 : op == '%' ? 5 : 6];
    die(r, "unsupported operand type(s) for %s: '%s' and '%s'", o, tname(a), tname(b));
}

/* ---------------------------------------------------------------- strings */

static size_t cplen(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}
/* byte offsets of the code points of s, plus n at the end (in a tracked buffer) */
static size_t *cpoffs(R *r, const char *s, size_t n, size_t *count, obj **hold) {
    size_t k = cplen(s, n);
    obj *b = snew(r);
    sgrow(r, b, (k + 1) * sizeof(size_t));
    size_t *o = (size_t *)(void *)b->s, j = 0;
    for (size_t i = 0; i < n; i++) if (((unsigned char)s[i] & 0xC0) != 0x80) o[j++] = i;
    o[k] = n;
    *count = k; *hold = b;
    return o;
}
enum { C_UPPER, C_LOWER, C_CAPITALIZE, C_TITLE, C_JTITLE, C_SWAP };
static val casemap(R *r, const char *s, size_t n, int mode) {
    obj *o = snew(r);
    int first = 1, prev_cased = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c = u8dec(s, n, &i);
        int up;
        switch (mode) {
        case C_UPPER: up = 1; break;
        case C_LOWER: up = 0; break;
        case C_CAPITALIZE: up = first; break;
        case C_TITLE: up = !prev_cased; prev_cased = cp_cased(c); break;
        case C_JTITLE: {
            int sep = cp_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
            up = prev_cased == 0;
            prev_cased = !sep;
            if (sep) { sputcp(r, o, c); first = 0; continue; }
            break;
        }
        default: up = cp_islower(c); break;
        }
        first = 0;
        if (up && c == 0xDF) { sput(r, o, mode == C_UPPER || mode == C_SWAP ? "SS" : "Ss", 2); continue; }
        sputcp(r, o, up ? cp_upper(c) : cp_lower(c));
    }
    return sval(o);
}
static int in_chars(const char *cs, size_t cn, uint32_t c) {
    for (size_t q = 0; q < cn;) if (u8dec(cs, cn, &q) == c) return 1;
    return 0;
}
/* strip: which 1 = left, 2 = right, 3 = both; chars NULL = whitespace */
static val str_strip(R *r, val s, val *chars, int which) {
    const char *p = s.u.o->s;
    size_t a = 0, b = s.u.o->len;
    if (chars && chars->t != T_NONE && chars->t != T_UNDEF) {
        if (chars->t != T_STR) die(r, "strip arg must be None or str");
        const char *cs = chars->u.o->s;
        size_t cn = chars->u.o->len;
        while ((which & 1) && a < b) { size_t j = a; uint32_t c = u8dec(p, b, &j); scan(r, cn); if (!in_chars(cs, cn, c)) break; a = j; }
        while ((which & 2) && b > a) {
            size_t j = b - 1;
            while (j > a && ((unsigned char)p[j] & 0xC0) == 0x80) j--;
            size_t q = j; uint32_t c = u8dec(p, b, &q);
            scan(r, cn);
            if (!in_chars(cs, cn, c)) break;
            b = j;
        }
    } else {
        size_t w;
        if (which & 1) while (a < b && (w = ws_at(p, b, a))) a += w;
        if (which & 2) b = rstrip_ws(p, a, b);
    }
    if (a == 0 && b == s.u.o->len) return ref(s);
    return vstrn(r, p + a, b - a);
}
static val str_split(R *r, val s, val *sep, int64_t maxsplit) {
    const char *p = s.u.o->s;
    size_t n = s.u.o->len;
    obj *l = lnew(r, 0);
    if (!sep || sep->t == T_NONE) {
        size_t i = 0, w;
        for (;;) {
            while (i < n && (w = ws_at(p, n, i))) i += w;
            if (i >= n) break;
            if (maxsplit >= 0 && l->n >= maxsplit) { lpush(r, l, vstrn(r, p + i, rstrip_ws(p, i, n) - i)); break; }
            size_t j = i;
            while (j < n && !ws_at(p, n, j)) j += u8len((unsigned char)p[j]);
            lpush(r, l, vstrn(r, p + i, j - i));
            i = j;
        }
        return lval(l);
    }
    if (sep->t != T_STR) die(r, "must be str or None, not %s", tname(*sep));
    if (!sep->u.o->len) die(r, "empty separator");
    size_t i = 0;
    for (;;) {
        size_t j = (maxsplit < 0 || l->n < maxsplit) ? find_bytes(r, p, n, sep->u.o->s, sep->u.o->len, i) : (size_t)-1;
        if (j == (size_t)-1) { lpush(r, l, vstrn(r, p + i, n - i)); break; }
        lpush(r, l, vstrn(r, p + i, j - i));
        i = j + sep->u.o->len;
    }
    return lval(l);
}
static val str_replace(R *r, val s, val old, val nw, int64_t count) {
    if (old.t != T_STR || nw.t != T_STR) die(r, "replace() arguments must be str");
    const char *p = s.u.o->s;
    size_t n = s.u.o->len, on = old.u.o->len;
    obj *o = snew(r);
    int64_t done = 0;
    if (!on) {
        for (size_t i = 0; i <= n;) {
            if (count < 0 || done < count) { sput(r, o, nw.u.o->s, nw.u.o->len); done++; }
            if (i == n) break;
            size_t k = u8len((unsigned char)p[i]);
            sput(r, o, p + i, k);
            i += k;
        }
        return sval(o);
    }
    size_t i = 0;
    while (count < 0 || done < count) {
        size_t j = find_bytes(r, p, n, old.u.o->s, on, i);
        if (j == (size_t)-1) break;
        sput(r, o, p + i, j - i);
        sput(r, o, nw.u.o->s, nw.u.o->len);
        i = j + on; done++;
    }
    sput(r, o, p + i, n - i);
    return sval(o);
}
/* Python's str.splitlines() boundaries: \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, \u2028, \u2029 */
static size_t line_break(const char *s, size_t n, size_t i) {
    unsigned char c = (unsigned char)s[i];
    if (c == '\r') return i + 1 < n && s[i + 1] == '\n' ? 2 : 1;
    if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1C && c <= 0x1E)) return 1;
    if (c >= 0x80) { size_t j = i; uint32_t cp = u8dec(s, n, &j); if (cp == 0x85 || cp == 0x2028 || cp == 0x2029) return j - i; }
    return 0;
}
static val splitlines(R *r, const char *s, size_t n, int keepends) {
    obj *l = lnew(r, 0);
    size_t i = 0, st = 0;
    while (i < n) {
        size_t k = line_break(s, n, i);
        if (!k) { i++; continue; }
        lpush(r, l, vstrn(r, s + st, (keepends ? i + k : i) - st));
        i += k; st = i;
    }
    if (st < n) lpush(r, l, vstrn(r, s + st, n - st));
    return lval(l);
}

/* ---------------------------------------------------------------- attribute and item access */

static const char *objdesc(val v, char *b, size_t n) {
    if (v.t == T_NONE) return "None";
    snprintf(b, n, "%s object", tname(v));
    return b;
}
static val loop_attr(R *r, obj *L, const char *nm) {
    int64_t i = L->idx, n = L->n;
    obj *it = L->ref;
    if (!strcmp(nm, "index")) return vint(i + 1);
    if (!strcmp(nm, "index0")) return vint(i);
    if (!strcmp(nm, "revindex")) return vint(n - i);
    if (!strcmp(nm, "revindex0")) return vint(n - i - 1);
    if (!strcmp(nm, "first")) return vbool(i == 0);
    if (!strcmp(nm, "last")) return vbool(i == n - 1);
    if (!strcmp(nm, "length")) return vint(n);
    if (!strcmp(nm, "depth")) return vint(1);
    if (!strcmp(nm, "depth0")) return vint(0);
    if (!strcmp(nm, "previtem")) return i > 0 ? ref(it->v[i - 1]) : undef(r, "there is no previous item");
    if (!strcmp(nm, "nextitem")) return i + 1 < n ? ref(it->v[i + 1]) : undef(r, "there is no next item");
    return undef(r, "'LoopContext object' has no attribute '%s'", nm);
}
static val getattr_(R *r, val o, const char *nm, size_t nl) {
    char b[64];
    if (o.t == T_UNDEF) undef_fail(r, o);
    if (o.t == T_DICT) { val *v = dfind(o.u.o, nm, nl); if (v) return ref(*v); }
    if (o.t == T_LOOP) return loop_attr(r, o.u.o, nm);
    return undef(r, "'%s' has no attribute '%.100s'", objdesc(o, b, sizeof b), nm);
}
static val getitem_(R *r, val o, val k) {
    char b[64];
    if (o.t == T_UNDEF) undef_fail(r, o);
    if (o.t == T_DICT) { val *v = dget(r, o.u.o, k); if (v) return ref(*v); }
    else if ((o.t == T_LIST || o.t == T_STR) && isint(k)) {
        int64_t i = k.u.i;
        if (o.t == T_LIST) {
            if (i < 0) i += o.u.o->n;
            if (i >= 0 && i < o.u.o->n) return ref(o.u.o->v[i]);
        } else {
            int64_t n = (int64_t)cplen(o.u.o->s, o.u.o->len);
            scan(r, o.u.o->len);
            if (i < 0) i += n;
            if (i >= 0 && i < n) {
                size_t p = 0;
                for (int64_t c = 0; c < i; c++) p += u8len((unsigned char)o.u.o->s[p]);
                return vstrn(r, o.u.o->s + p, u8len((unsigned char)o.u.o->s[p]));
            }
        }
    } else if (o.t == T_LOOP && k.t == T_STR) return loop_attr(r, o.u.o, k.u.o->s);
    if (k.t == T_STR) return undef(r, "'%s' has no attribute '%.100s'", objdesc(o, b, sizeof b), k.u.o->s);
    obj *d = snew(r);
    write_val(r, d, k, 1, 0);
    val u = undef(r, "%s has no element %.100s", objdesc(o, b, sizeof b), d->s);
    unref(r, sval(d));
    return u;
}
static int64_t slice_ix(R *r, val *v, int present) {
    if (!present || v->t == T_NONE) return INT64_MIN;
    if (!isint(*v)) die(r, "slice indices must be integers or None");
    return v->u.i;
}
static val slice(R *r, val o, val *sv) {
    if (o.t == T_UNDEF) undef_fail(r, o);
    if (o.t != T_LIST && o.t != T_STR) return undef(r, "'%s' object is not subscriptable", tname(o));
    int64_t st = slice_ix(r, &sv[0], 1), sp = slice_ix(r, &sv[1], 1), step = slice_ix(r, &sv[2], 1);
    if (step == INT64_MIN) step = 1;
    if (step == 0) die(r, "slice step cannot be zero");
    obj *hold = NULL;
    size_t ncp = 0, *offs = NULL;
    int64_t len;
    if (o.t == T_STR) { offs = cpoffs(r, o.u.o->s, o.u.o->len, &ncp, &hold); len = (int64_t)ncp; }
    else len = o.u.o->n;
    if (st == INT64_MIN) st = step < 0 ? len - 1 : 0;
    else if (st < 0) { st += len; if (st < 0) st = step < 0 ? -1 : 0; }
    else if (st >= len) st = step < 0 ? len - 1 : len;
    if (sp == INT64_MIN) sp = step < 0 ? -1 : len;
    else if (sp < 0) { sp += len; if (sp < 0) sp = step < 0 ? -1 : 0; }
    else if (sp >= len) sp = step < 0 ? len - 1 : len;
    val res;
    if (o.t == T_STR) {
        obj *s = snew(r);
        if (step == 1 && st < sp) sput(r, s, o.u.o->s + offs[st], offs[sp] - offs[st]);
        else for (int64_t i = st; step > 0 ? i < sp : i > sp; i += step) sput(r, s, o.u.o->s + offs[i], offs[i + 1] - offs[i]);
        unref(r, sval(hold));
        res = sval(s);
    } else {
        obj *l = lnew(r, o.u.o->flag);
        for (int64_t i = st; step > 0 ? i < sp : i > sp; i += step) lpush(r, l, ref(o.u.o->v[i]));
        res = lval(l);
    }
    return res;
}
/* for-loop / list() conversion: a new list */
static obj *to_list(R *r, val v) {
    obj *l = lnew(r, 0);
    switch (v.t) {
    case T_UNDEF: break;
    case T_LIST: for (int i = 0; i < v.u.o->n; i++) lpush(r, l, ref(v.u.o->v[i])); break;
    case T_DICT: if (v.u.o->flag) goto bad; for (int i = 0; i < v.u.o->n; i++) lpush(r, l, ref(v.u.o->k[i])); break;
    case T_STR:
        for (size_t i = 0; i < v.u.o->len;) { size_t k = u8len((unsigned char)v.u.o->s[i]); lpush(r, l, vstrn(r, v.u.o->s + i, k)); i += k; }
        break;
    default: bad: die(r, "'%s' object is not iterable", tname(v));
    }
    return l;
}

/* ---------------------------------------------------------------- arguments */

static val eval(R *r, const node *x);
static void exec(R *r, const node *x);
static val filter(R *r, const char *nm, val x, args *a);

static obj *eval_args(R *r, const node *x, args *a) {
    obj *h = lnew(r, 0);
    for (int i = 0; i < x->n; i++) lpush(r, h, eval(r, x->kv[i]));
    a->n = x->n; a->v = h->v; a->kw = x->kw; a->np = 0;
    while (a->np < a->n && !a->kw[a->np]) a->np++;
    return h;
}
static val *argp(args *a, int pos, const char *kw) {
    if (pos >= 0 && pos < a->np) return &a->v[pos];
    if (kw) for (int i = a->np; i < a->n; i++) if (!strcmp(a->kw[i], kw)) return &a->v[i];
    return NULL;
}
static int64_t arg_int(R *r, args *a, int pos, const char *kw, int64_t def) {
    val *v = argp(a, pos, kw);
    if (!v || v->t == T_NONE) return def;
    if (!isint(*v)) die(r, "argument '%s' must be an integer, not %s", kw, tname(*v));
    return v->u.i;
}
static int arg_bool(args *a, int pos, const char *kw, int def) { val *v = argp(a, pos, kw); return v ? truthy(*v) : def; }
static val *arg_str(R *r, args *a, int pos, const char *kw) {
    val *v = argp(a, pos, kw);
    if (v && v->t != T_STR && v->t != T_NONE) die(r, "argument '%s' must be a string, not %s", kw, tname(*v));
    return v && v->t == T_STR ? v : NULL;
}
/* args shifted by k positional arguments (map('filter', ...), select('test', ...)) */
static args shift(args *a, int k) {
    args s = *a;
    if (k > s.np) k = s.np;
    s.v += k; s.kw += k; s.n -= k; s.np -= k;
    return s;
}

/* jinja2's make_attrgetter: "a.b.0" looks up each part as an item, digits as ints */
static val attr_path(R *r, val item, val *attr) {
    if (isint(*attr)) return getitem_(r, item, *attr);
    if (attr->t != T_STR) die(r, "attribute must be a string or an integer");
    val cur = ref(item);
    const char *s = attr->u.o->s;
    size_t n = attr->u.o->len, i = 0;
    for (;;) {
        size_t j = i;
        while (j < n && s[j] != '.') j++;
        int digits = j > i;
        int64_t iv = 0;
        for (size_t q = i; q < j; q++) {
            if (s[q] < '0' || s[q] > '9' || iv > INT64_MAX / 10 - 9) { digits = 0; break; }
            iv = iv * 10 + (s[q] - '0');
        }
        val k = digits ? vint(iv) : vstrn(r, s + i, j - i);
        val nx = getitem_(r, cur, k);
        unref(r, k); unref(r, cur);
        cur = nx;
        if (j >= n) return cur;
        i = j + 1;
    }
}

/* ---------------------------------------------------------------- tojson (json.dumps) */

typedef struct { const char *ind; size_t indn; int has_ind, ascii, sort; const char *isep, *ksep; size_t isepn, ksepn; } jopt;
static void json_str(R *r, obj *b, const char *s, size_t n, int ascii) {
    sputc(r, b, '"');
    for (size_t i = 0; i < n;) {
        size_t i0 = i;
        uint32_t c = u8dec(s, n, &i);
        switch (c) {
        case '"': sput(r, b, "\\\"", 2); break;
        case '\\': sput(r, b, "\\\\", 2); break;
        case '\n': sput(r, b, "\\n", 2); break;
        case '\r': sput(r, b, "\\r", 2); break;
        case '\t': sput(r, b, "\\t", 2); break;
        case '\b': sput(r, b, "\\b", 2); break;
        case '\f': sput(r, b, "\\f", 2); break;
        default:
            if (c < 0x20 || (ascii && c >= 0x7F)) {
                if (c >= 0x10000) {
                    uint32_t v = c - 0x10000;
                    sprintf_(r, b, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                } else sprintf_(r, b, "\\u%04x", c);
            } else sput(r, b, s + i0, i - i0);
        }
    }
    sputc(r, b, '"');
}
static void json_nl(R *r, obj *b, const jopt *o, int level) {
    if (!o->has_ind) return;
    sputc(r, b, '\n');
    for (int i = 0; i < level; i++) sput(r, b, o->ind, o->indn);
}
static void json_val(R *r, obj *b, val v, const jopt *o, int level) {
    char t[40];
    if (level > MAX_DEPTH) die(r, "value nested too deep for tojson");
    switch (v.t) {
    case T_NONE: sput(r, b, "null", 4); return;
    case T_BOOL: v.u.i ? sput(r, b, "true", 4) : sput(r, b, "false", 5); return;
    case T_INT: sprintf_(r, b, "%lld", (long long)v.u.i); return;
    case T_FLOAT:
        if (isnan(v.u.f)) sput(r, b, "NaN", 3);
        else if (isinf(v.u.f)) v.u.f < 0 ? sput(r, b, "-Infinity", 9) : sput(r, b, "Infinity", 8);
        else { pfloat(t, sizeof t, v.u.f); sput(r, b, t, strlen(t)); }
        return;
    case T_STR: json_str(r, b, v.u.o->s, v.u.o->len, o->ascii); return;
    case T_LIST:
        if (!v.u.o->n) { sput(r, b, "[]", 2); return; }
        sputc(r, b, '[');
        for (int i = 0; i < v.u.o->n; i++) {
            if (i) sput(r, b, o->isep, o->isepn);
            json_nl(r, b, o, level + 1);
            json_val(r, b, v.u.o->v[i], o, level + 1);
        }
        json_nl(r, b, o, level);
        sputc(r, b, ']');
        return;
    case T_DICT: {
        obj *d = v.u.o;
        if (d->flag) break;
        if (!d->n) { sput(r, b, "{}", 2); return; }
        obj *ih = snew(r);
        sgrow(r, ih, (size_t)d->n * sizeof(int));
        int *ix = (int *)(void *)ih->s;
        for (int i = 0; i < d->n; i++) ix[i] = i;
        if (o->sort) {   /* insertion sort of the (string) keys; stable */
            scan(r, (size_t)d->n * (size_t)d->n);
            for (int i = 1; i < d->n; i++)
                for (int j = i; j > 0 && cmp(r, d->k[ix[j - 1]], d->k[ix[j]], "<", 0) > 0; j--) { int q = ix[j]; ix[j] = ix[j - 1]; ix[j - 1] = q; }
        }
        sputc(r, b, '{');
        for (int q = 0; q < d->n; q++) {
            int i = ix[q];
            val k = d->k[i];
            if (q) sput(r, b, o->isep, o->isepn);
            json_nl(r, b, o, level + 1);
            if (k.t == T_STR) json_str(r, b, k.u.o->s, k.u.o->len, o->ascii);
            else if (k.t == T_NONE || k.t == T_BOOL || k.t == T_INT || k.t == T_FLOAT) {
                sputc(r, b, '"'); json_val(r, b, k, o, level + 1); sputc(r, b, '"');
            } else die(r, "keys must be str, int, float, bool or None, not %s", tname(k));
            sput(r, b, o->ksep, o->ksepn);
            json_val(r, b, d->v[i], o, level + 1);
        }
        json_nl(r, b, o, level);
        sputc(r, b, '}');
        unref(r, sval(ih));
        return;
    }
    default: break;
    }
    die(r, "Object of type %s is not JSON serializable", tname(v));
}
static val tojson(R *r, val x, args *a) {
    jopt o;
    memset(&o, 0, sizeof o);
    val *ind = argp(a, 0, "indent"), *sep = argp(a, -1, "separators");
    char sp[64];
    if (ind && ind->t == T_STR) { o.has_ind = 1; o.ind = ind->u.o->s; o.indn = ind->u.o->len; }
    else if (ind && isint(*ind)) {
        int64_t n = ind->u.i < 0 ? 0 : ind->u.i > 63 ? 63 : ind->u.i;
        memset(sp, ' ', (size_t)n);
        o.has_ind = 1; o.ind = sp; o.indn = (size_t)n;
    } else if (ind && ind->t != T_NONE) die(r, "tojson indent must be an integer or a string");
    o.ascii = arg_bool(a, -1, "ensure_ascii", 0);
    o.sort = arg_bool(a, -1, "sort_keys", 0);
    o.isep = o.has_ind ? "," : ", "; o.isepn = o.has_ind ? 1 : 2;
    o.ksep = ": "; o.ksepn = 2;
    if (sep && sep->t != T_NONE) {
        if (sep->t != T_LIST || sep->u.o->n != 2 || sep->u.o->v[0].t != T_STR || sep->u.o->v[1].t != T_STR)
            die(r, "tojson separators must be a pair of strings");
        o.isep = sep->u.o->v[0].u.o->s; o.isepn = sep->u.o->v[0].u.o->len;
        o.ksep = sep->u.o->v[1].u.o->s; o.ksepn = sep->u.o->v[1].u.o->len;
    }
    obj *b = snew(r);
    json_val(r, b, x, &o, 0);
    return sval(b);
}

/* ---------------------------------------------------------------- sorting */

static void msort(R *r, int *ix, int *tmp, int n, const val *keys, int rev) {
    if (n < 2) return;
    int h = n / 2;
    msort(r, ix, tmp, h, keys, rev);
    msort(r, ix + h, tmp, n - h, keys, rev);
    int i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int c = cmp(r, keys[ix[j]], keys[ix[i]], "<", 0);   /* take the right one only when strictly before */
        if (rev ? c > 0 : c < 0) tmp[k++] = ix[j++]; else tmp[k++] = ix[i++];
    }
    while (i < h) tmp[k++] = ix[i++];
    while (j < n) tmp[k++] = ix[j++];
    memcpy(ix, tmp, (size_t)n * sizeof *ix);
}
/* the sort key of item: its attribute (if any), lowercased when a string and !cs */
static val sort_key(R *r, val item, val *attr, int cs) {
    val k = attr ? attr_path(r, item, attr) : ref(item);
    if (!cs && k.t == T_STR) { val l = casemap(r, k.u.o->s, k.u.o->len, C_LOWER); unref(r, k); return l; }
    return k;
}
/* a new list: items of l ordered by keys (one per item, owned by the keys list) */
static obj *sorted(R *r, obj *l, obj *keys, int rev) {
    obj *h = snew(r);
    sgrow(r, h, (size_t)l->n * 2 * sizeof(int));
    int *ix = (int *)(void *)h->s;
    for (int i = 0; i < l->n; i++) ix[i] = i;
    msort(r, ix, ix + l->n, l->n, keys->v, rev);
    obj *o = lnew(r, 0);
    for (int i = 0; i < l->n; i++) lpush(r, o, ref(l->v[ix[i]]));
    unref(r, sval(h));
    return o;
}
static obj *dict_items(R *r, obj *d) {
    obj *l = lnew(r, 0);
    for (int i = 0; i < d->n; i++) {
        obj *t = lnew(r, 1);
        lpush(r, t, ref(d->k[i])); lpush(r, t, ref(d->v[i]));
        lpush(r, l, lval(t));
    }
    return l;
}

/* ---------------------------------------------------------------- tests */

static int test(R *r, const char *nm, val x, args *a) {
    val *y = argp(a, 0, NULL);
    if (!strcmp(nm, "defined")) return x.t != T_UNDEF;
    if (!strcmp(nm, "undefined")) return x.t == T_UNDEF;
    if (!strcmp(nm, "none")) return x.t == T_NONE;
    if (!strcmp(nm, "boolean")) return x.t == T_BOOL;
    if (!strcmp(nm, "true")) return x.t == T_BOOL && x.u.i;
    if (!strcmp(nm, "false")) return x.t == T_BOOL && !x.u.i;
    if (!strcmp(nm, "integer")) return x.t == T_INT;
    if (!strcmp(nm, "float")) return x.t == T_FLOAT;
    if (!strcmp(nm, "number")) return isnum(x);
    if (!strcmp(nm, "string")) return x.t == T_STR;
    if (!strcmp(nm, "mapping")) return x.t == T_DICT && !x.u.o->flag;
    if (!strcmp(nm, "iterable") || !strcmp(nm, "sequence"))
        return x.t == T_STR || x.t == T_LIST || (x.t == T_DICT && !x.u.o->flag) || x.t == T_UNDEF;
    if (!strcmp(nm, "callable")) return x.t == T_MACRO || x.t == T_FUNC;
    if (!strcmp(nm, "escaped")) return 0;
    if (!strcmp(nm, "lower") || !strcmp(nm, "upper")) {
        if (x.t != T_STR) die(r, "'%s' object has no attribute 'is%s'", tname(x), nm);
        int cased = 0;
        for (size_t i = 0; i < x.u.o->len;) {
            uint32_t c = u8dec(x.u.o->s, x.u.o->len, &i);
            if (nm[0] == 'l' ? cp_isupper(c) : cp_islower(c)) return 0;
            cased |= cp_cased(c);
        }
        return cased;
    }
    if (!strcmp(nm, "filter")) return x.t == T_STR && in_list(FILTERS, x.u.o->s);
    if (!strcmp(nm, "test")) return x.t == T_STR && in_list(TESTS, x.u.o->s);
    if (!strcmp(nm, "even") || !strcmp(nm, "odd")) {
        val m = arith(r, '%', x, vint(2));
        int odd = truthy(m);
        return nm[0] == 'o' ? odd : !odd;
    }
    if (!y) die(r, "test '%s' needs an argument", nm);
    if (!strcmp(nm, "divisibleby")) { val m = arith(r, '%', x, *y); int z = !truthy(m); unref(r, m); return z; }
    if (!strcmp(nm, "eq") || !strcmp(nm, "equalto") || !strcmp(nm, "==")) return eq(r, x, *y, 0);
    if (!strcmp(nm, "ne") || !strcmp(nm, "!=")) return !eq(r, x, *y, 0);
    if (!strcmp(nm, "lt") || !strcmp(nm, "<") || !strcmp(nm, "lessthan")) return cmp(r, x, *y, "<", 0) < 0;
    if (!strcmp(nm, "le") || !strcmp(nm, "<=")) return cmp(r, x, *y, "<=", 0) <= 0;
    if (!strcmp(nm, "gt") || !strcmp(nm, ">") || !strcmp(nm, "greaterthan")) return cmp(r, x, *y, ">", 0) > 0;
    if (!strcmp(nm, "ge") || !strcmp(nm, ">=")) return cmp(r, x, *y, ">=", 0) >= 0;
    if (!strcmp(nm, "in")) return contains(r, *y, x);
    if (!strcmp(nm, "sameas")) {
        if (x.t != y->t) return 0;
        if (x.t == T_NONE || x.t == T_UNDEF) return x.t == T_NONE;
        if (x.t == T_BOOL || x.t == T_INT) return x.u.i == y->u.i;
        if (x.t == T_FLOAT) return 0;
        if (x.t == T_MACRO) return x.u.m == y->u.m;
        if (x.t == T_FUNC) return x.u.i == y->u.i;
        return x.u.o == y->u.o;
    }
    die(r, "unknown test '%s'", nm);
}

/* ---------------------------------------------------------------- filters */

static int64_t length(R *r, val x) {
    switch (x.t) {
    case T_UNDEF: return 0;
    case T_STR: scan(r, x.u.o->len); return (int64_t)cplen(x.u.o->s, x.u.o->len);
    case T_LIST: case T_DICT: if (!x.u.o->flag || x.t == T_LIST) return x.u.o->n; break;
    default: break;
    }
    die(r, "object of type '%s' has no len()", tname(x));
}
/* Python float(str): surrounding whitespace, sign, digits with single underscores, inf/nan */
static int parse_float(const char *s, size_t n, double *out) {
    size_t a = 0, w;
    while (a < n && (w = ws_at(s, n, a))) a += w;
    n = rstrip_ws(s, a, n);
    char buf[512];
    size_t k = 0;
    if (n - a == 0 || n - a >= sizeof buf) return 0;
    for (size_t i = a; i < n; i++) {
        if (s[i] == '_') {
            if (i == a || i + 1 >= n || !cp_digit((unsigned char)s[i - 1]) || !cp_digit((unsigned char)s[i + 1])) return 0;
            continue;
        }
        if (!strchr("0123456789+-.eEinfatyINFATY", s[i]) || !s[i]) return 0;
        buf[k++] = s[i];
    }
    buf[k] = 0;
    const char *b = buf + (buf[0] == '+' || buf[0] == '-');
    if (strcasecmp(b, "inf") && strcasecmp(b, "infinity") && strcasecmp(b, "nan")) {
        int dig = 0;
        for (const char *q = b; *q; q++) if (cp_digit((unsigned char)*q)) dig = 1; else if (*q != '.' && *q != 'e' && *q != 'E' && *q != '+' && *q != '-') return 0;
        if (!dig || b[0] == 'e' || b[0] == 'E') return 0;
    }
    char *end;
    *out = strtod(buf, &end);
    return *end == 0;
}
static int parse_int(const char *s, size_t n, int base, int64_t *out) {
    size_t a = 0, w;
    while (a < n && (w = ws_at(s, n, a))) a += w;
    n = rstrip_ws(s, a, n);
    int neg = 0;
    if (a < n && (s[a] == '+' || s[a] == '-')) neg = s[a++] == '-';
    if (base == 16 && a + 1 < n && s[a] == '0' && (s[a + 1] | 32) == 'x') a += 2;
    else if (base == 8 && a + 1 < n && s[a] == '0' && (s[a + 1] | 32) == 'o') a += 2;
    else if (base == 2 && a + 1 < n && s[a] == '0' && (s[a + 1] | 32) == 'b') a += 2;
    if (a >= n) return 0;
    uint64_t v = 0;
    for (size_t i = a; i < n; i++) {
        if (s[i] == '_' && i > a && i + 1 < n && s[i + 1] != '_') continue;
        int d = cp_digit((unsigned char)s[i]) ? s[i] - '0' : ((s[i] | 32) >= 'a' && (s[i] | 32) <= 'z') ? (s[i] | 32) - 'a' + 10 : 99;
        if (d >= base) return 0;
        if (v > ((uint64_t)INT64_MAX - (uint64_t)d) / (uint64_t)base) return 0;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 1;
}
static val round_(R *r, val x, int64_t prec, const char *method) {
    if (!isnum(x)) die(r, "type %s doesn't define __round__ method", tname(x));
    if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
        die(r, "method must be common, ceil or floor");
    if (prec > 300) prec = 300;
    if (prec < -300) prec = -300;
    if (method[0] == 'c' && method[1] == 'o') {
        if (isint(x)) return vint(x.u.i);   /* round(int, n) keeps the int (n >= 0) */
        double d = x.u.f;
        if (!isfinite(d)) return vflt(d);
        if (prec >= 0) {
            char b[400];
            snprintf(b, sizeof b, "%.*f", (int)prec, d);
            return vflt(strtod(b, NULL));
        }
        double p = pow(10.0, (double)-prec);
        return vflt(nearbyint(d / p) * p);
    }
    double p = pow(10.0, (double)prec), v = num(x) * p;
    return vflt((method[0] == 'c' ? ceil(v) : floor(v)) / p);
}
static val indent_(R *r, val s, args *a) {
    val *w = argp(a, 0, "width");
    obj *ind = snew(r);
    if (w && w->t == T_STR) sput(r, ind, w->u.o->s, w->u.o->len);
    else { int64_t n = arg_int(r, a, 0, "width", 4); for (int64_t i = 0; i < n && i < 1024; i++) sputc(r, ind, ' '); }
    int first = arg_bool(a, 1, "first", 0), blank = arg_bool(a, 2, "blank", 0);
    obj *t = snew(r);
    sput(r, t, s.u.o->s, s.u.o->len);
    sputc(r, t, '\n');
    val lines = splitlines(r, t->s, t->len, 0);
    obj *o = snew(r);
    if (first) sput(r, o, ind->s, ind->len);
    obj *l = lines.u.o;
    for (int i = 0; i < l->n; i++) {
        obj *ln = l->v[i].u.o;
        if (i) { sputc(r, o, '\n'); if (blank || ln->len) sput(r, o, ind->s, ind->len); }
        sput(r, o, ln->s, ln->len);
    }
    unref(r, lines); unref(r, sval(t)); unref(r, sval(ind));
    return sval(o);
}
static val minmax(R *r, val x, args *a, int want_max) {
    obj *l = to_list(r, x);
    int cs = arg_bool(a, 0, "case_sensitive", 0);
    val *attr = argp(a, 1, "attribute");
    if (!l->n) { unref(r, lval(l)); return undef(r, "No aggregated item, sequence was empty."); }
    int best = 0;
    val bk = sort_key(r, l->v[0], attr, cs);
    for (int i = 1; i < l->n; i++) {
        val k = sort_key(r, l->v[i], attr, cs);
        int c = cmp(r, k, bk, want_max ? ">" : "<", 0);
        if (want_max ? c > 0 : c < 0) { unref(r, bk); bk = k; best = i; } else unref(r, k);
    }
    val res = ref(l->v[best]);
    unref(r, bk); unref(r, lval(l));
    return res;
}
static val select_(R *r, val x, args *a, int by_attr, int reject) {
    obj *l = to_list(r, x), *o = lnew(r, 0);
    val *attr = by_attr ? argp(a, 0, NULL) : NULL;
    if (by_attr && !attr) die(r, "selectattr/rejectattr need an attribute");
    val *tn = argp(a, by_attr, NULL);
    if (tn && tn->t != T_STR) die(r, "test name must be a string");
    if (tn && !in_list(TESTS, tn->u.o->s)) die(r, "no test named '%s'", tn->u.o->s);
    args sub = shift(a, by_attr + 1);
    for (int i = 0; i < l->n; i++) {
        val v = attr ? attr_path(r, l->v[i], attr) : ref(l->v[i]);
        int ok = tn ? test(r, tn->u.o->s, v, &sub) : truthy(v);
        unref(r, v);
        if (ok != reject) lpush(r, o, ref(l->v[i]));
    }
    unref(r, lval(l));
    return lval(o);
}
static val html_escape(R *r, val x) {
    val s = to_str(r, x);
    obj *o = snew(r);
    for (size_t i = 0; i < s.u.o->len; i++) {
        char c = s.u.o->s[i];
        switch (c) {
        case '&': sput(r, o, "&amp;", 5); break;
        case '<': sput(r, o, "&lt;", 4); break;
        case '>': sput(r, o, "&gt;", 4); break;
        case '"': sput(r, o, "&#34;", 5); break;
        case '\'': sput(r, o, "&#39;", 5); break;
        default: sputc(r, o, c);
        }
    }
    unref(r, s);
    return sval(o);
}

static val filter(R *r, const char *nm, val x, args *a) {
    if (!strcmp(nm, "default") || !strcmp(nm, "d")) {
        val *dv = argp(a, 0, "default_value");
        if (x.t == T_UNDEF || (arg_bool(a, 1, "boolean", 0) && !truthy(x))) return dv ? ref(*dv) : vstr(r, "");
        return ref(x);
    }
    if (!strcmp(nm, "safe")) return ref(x);
    if (!strcmp(nm, "string")) return to_str(r, x);
    if (!strcmp(nm, "tojson")) return tojson(r, x, a);
    if (!strcmp(nm, "length") || !strcmp(nm, "count")) return vint(length(r, x));
    if (!strcmp(nm, "list")) return lval(to_list(r, x));
    if (!strcmp(nm, "e") || !strcmp(nm, "escape") || !strcmp(nm, "forceescape")) return html_escape(r, x);
    if (!strcmp(nm, "items")) {
        if (x.t == T_UNDEF) return lval(lnew(r, 0));
        if (x.t != T_DICT || x.u.o->flag) die(r, "Can only get item pairs from a mapping.");
        return lval(dict_items(r, x.u.o));
    }
    if (!strcmp(nm, "first") || !strcmp(nm, "last")) {
        obj *l = to_list(r, x);
        val v = l->n ? ref(l->v[nm[0] == 'f' ? 0 : l->n - 1]) : undef(r, "No %s item, sequence was empty.", nm);
        unref(r, lval(l));
        return v;
    }
    if (!strcmp(nm, "reverse")) {
        if (x.t == T_STR) {
            size_t n, *off;
            obj *h;
            off = cpoffs(r, x.u.o->s, x.u.o->len, &n, &h);
            obj *o = snew(r);
            for (size_t i = n; i-- > 0;) sput(r, o, x.u.o->s + off[i], off[i + 1] - off[i]);
            unref(r, sval(h));
            return sval(o);
        }
        obj *l = to_list(r, x), *o = lnew(r, 0);
        for (int i = l->n; i-- > 0;) lpush(r, o, ref(l->v[i]));
        unref(r, lval(l));
        return lval(o);
    }
    if (!strcmp(nm, "join")) {
        val *sep = arg_str(r, a, 0, "d"), *attr = argp(a, 1, "attribute");
        obj *l = to_list(r, x), *o = snew(r);
        for (int i = 0; i < l->n; i++) {
            if (i && sep) sput(r, o, sep->u.o->s, sep->u.o->len);
            val it = attr ? attr_path(r, l->v[i], attr) : ref(l->v[i]);
            val s = to_str(r, it);
            sput(r, o, s.u.o->s, s.u.o->len);
            unref(r, s); unref(r, it);
        }
        unref(r, lval(l));
        return sval(o);
    }
    if (!strcmp(nm, "map")) {
        obj *l = to_list(r, x), *o = lnew(r, 0);
        val *attr = argp(a, -1, "attribute");
        val *fn = attr ? NULL : argp(a, 0, NULL);
        if (!attr && (!fn || fn->t != T_STR)) die(r, "map needs a filter name or attribute=");
        if (fn && (!in_list(FILTERS, fn->u.o->s) || !strcmp(fn->u.o->s, "map"))) die(r, "no filter named '%s'", fn->u.o->s);
        args sub = shift(a, 1);
        val *dflt = argp(a, -1, "default");
        for (int i = 0; i < l->n; i++) {
            val v;
            if (attr) {
                v = attr_path(r, l->v[i], attr);
                if (v.t == T_UNDEF && dflt) { unref(r, v); v = ref(*dflt); }
            } else v = filter(r, fn->u.o->s, l->v[i], &sub);
            lpush(r, o, v);
        }
        unref(r, lval(l));
        return lval(o);
    }
    if (!strcmp(nm, "select")) return select_(r, x, a, 0, 0);
    if (!strcmp(nm, "reject")) return select_(r, x, a, 0, 1);
    if (!strcmp(nm, "selectattr")) return select_(r, x, a, 1, 0);
    if (!strcmp(nm, "rejectattr")) return select_(r, x, a, 1, 1);
    if (!strcmp(nm, "sort") || !strcmp(nm, "dictsort")) {
        int d = nm[0] == 'd';
        int cs = arg_bool(a, d ? 0 : 1, "case_sensitive", 0), rev = arg_bool(a, d ? 2 : 0, "reverse", 0);
        val *attr = d ? NULL : argp(a, 2, "attribute");
        int by_value = 0;
        if (d) {
            val *by = arg_str(r, a, 1, "by");
            if (by && !strcmp(by->u.o->s, "value")) by_value = 1;
            else if (by && strcmp(by->u.o->s, "key")) die(r, "You can only sort by either \"key\" or \"value\"");
            if (x.t != T_DICT || x.u.o->flag) die(r, "dictsort needs a mapping");
        }
        obj *l = d ? dict_items(r, x.u.o) : to_list(r, x), *keys = lnew(r, 0);
        for (int i = 0; i < l->n; i++) {
            val it = d ? l->v[i].u.o->v[by_value] : l->v[i];
            lpush(r, keys, sort_key(r, it, attr, cs));
        }
        obj *o = sorted(r, l, keys, rev);
        unref(r, lval(keys)); unref(r, lval(l));
        return lval(o);
    }
    if (!strcmp(nm, "unique")) {
        int cs = arg_bool(a, 0, "case_sensitive", 0);
        val *attr = argp(a, 1, "attribute");
        obj *l = to_list(r, x), *o = lnew(r, 0), *seen = lnew(r, 0);
        for (int i = 0; i < l->n; i++) {
            val k = sort_key(r, l->v[i], attr, cs);
            int dup = 0;
            for (int j = 0; j < seen->n && !dup; j++) dup = eq(r, seen->v[j], k, 0);
            if (dup) unref(r, k);
            else { lpush(r, seen, k); lpush(r, o, ref(l->v[i])); }
        }
        unref(r, lval(seen)); unref(r, lval(l));
        return lval(o);
    }
    if (!strcmp(nm, "min") || !strcmp(nm, "max")) return minmax(r, x, a, nm[1] == 'a');
    if (!strcmp(nm, "sum")) {
        val *attr = argp(a, 0, "attribute"), *start = argp(a, 1, "start");
        obj *l = to_list(r, x);
        val acc = start ? ref(*start) : vint(0);
        for (int i = 0; i < l->n; i++) {
            val it = attr ? attr_path(r, l->v[i], attr) : ref(l->v[i]);
            val nx = arith(r, '+', acc, it);
            unref(r, acc); unref(r, it);
            acc = nx;
        }
        unref(r, lval(l));
        return acc;
    }
    if (!strcmp(nm, "batch")) {
        int64_t n = arg_int(r, a, 0, "linecount", 1);
        val *fill = argp(a, 1, "fill_with");
        if (n <= 0) die(r, "batch size must be positive");
        obj *l = to_list(r, x), *o = lnew(r, 0), *cur = NULL;
        for (int i = 0; i < l->n; i++) {
            if (!cur) cur = lnew(r, 0);
            lpush(r, cur, ref(l->v[i]));
            if (cur->n == n) { lpush(r, o, lval(cur)); cur = NULL; }
        }
        if (cur) {
            while (fill && cur->n < n) lpush(r, cur, ref(*fill));
            lpush(r, o, lval(cur));
        }
        unref(r, lval(l));
        return lval(o);
    }
    if (!strcmp(nm, "abs")) {
        if (x.t == T_UNDEF) undef_fail(r, x);
        if (isint(x)) { if (x.u.i == INT64_MIN) die(r, "integer overflow (ints are 64-bit here)"); return vint(x.u.i < 0 ? -x.u.i : x.u.i); }
        if (x.t == T_FLOAT) return vflt(fabs(x.u.f));
        die(r, "bad operand type for abs(): '%s'", tname(x));
    }
    if (!strcmp(nm, "attr")) {
        val *n = arg_str(r, a, 0, "name");
        if (!n) die(r, "attr needs a name");
        return getattr_(r, x, n->u.o->s, n->u.o->len);
    }
    if (!strcmp(nm, "round")) {
        val *m = arg_str(r, a, 1, "method");
        return round_(r, x, arg_int(r, a, 0, "precision", 0), m ? m->u.o->s : "common");
    }
    if (!strcmp(nm, "int")) {
        val *dv = argp(a, 0, "default");
        int64_t base = arg_int(r, a, 1, "base", 10), iv;
        double f;
        if (isint(x)) return vint(x.u.i);
        if (x.t == T_FLOAT && isfinite(x.u.f) && fabs(x.u.f) < 9.2e18) return vint((int64_t)x.u.f);
        if (x.t == T_STR) {
            if (base >= 2 && base <= 36 && parse_int(x.u.o->s, x.u.o->len, (int)base, &iv)) return vint(iv);
            if (parse_float(x.u.o->s, x.u.o->len, &f) && isfinite(f) && fabs(f) < 9.2e18) return vint((int64_t)f);
        }
        return dv ? ref(*dv) : vint(0);
    }
    if (!strcmp(nm, "float")) {
        val *dv = argp(a, 0, "default");
        double f;
        if (isnum(x)) return vflt(num(x));
        if (x.t == T_STR && parse_float(x.u.o->s, x.u.o->len, &f)) return vflt(f);
        return dv ? ref(*dv) : vflt(0.0);
    }
    /* the rest work on str(x) */
    val s = to_str(r, x), res;
    const char *p = s.u.o->s;
    size_t n = s.u.o->len;
    if (!strcmp(nm, "upper")) res = casemap(r, p, n, C_UPPER);
    else if (!strcmp(nm, "lower")) res = casemap(r, p, n, C_LOWER);
    else if (!strcmp(nm, "capitalize")) res = casemap(r, p, n, C_CAPITALIZE);
    else if (!strcmp(nm, "title")) res = casemap(r, p, n, C_JTITLE);
    else if (!strcmp(nm, "trim")) res = str_strip(r, s, argp(a, 0, "chars"), 3);
    else if (!strcmp(nm, "replace")) {
        val *o = argp(a, 0, "old"), *w = argp(a, 1, "new");
        if (!o || !w) die(r, "replace needs two arguments");
        val os = to_str(r, *o), ws = to_str(r, *w);
        res = str_replace(r, s, os, ws, arg_int(r, a, 2, "count", -1));
        unref(r, os); unref(r, ws);
    } else if (!strcmp(nm, "indent")) res = indent_(r, s, a);
    else if (!strcmp(nm, "center")) {
        int64_t w = arg_int(r, a, 0, "width", 80), len = (int64_t)cplen(p, n);
        obj *o = snew(r);
        if (w > len) {
            int64_t marg = w - len, left = marg / 2 + (marg & w & 1);
            if (marg > (int64_t)MAX_STR) die(r, "string or output longer than 256 MiB");
            for (int64_t i = 0; i < left; i++) sputc(r, o, ' ');
            sput(r, o, p, n);
            for (int64_t i = 0; i < marg - left; i++) sputc(r, o, ' ');
        } else sput(r, o, p, n);
        res = sval(o);
    } else if (!strcmp(nm, "wordcount")) {
        int64_t k = 0;
        int inw = 0;
        for (size_t i = 0; i < n;) {
            uint32_t c = u8dec(p, n, &i);
            int w = cp_alpha(c) || cp_digit(c) || c == '_';
            k += w && !inw;
            inw = w;
        }
        res = vint(k);
    } else die(r, "unknown filter '%s'", nm);
    unref(r, s);
    return res;
}

/* ---------------------------------------------------------------- methods and globals */

static int starts_ends(R *r, val s, val *pre, int ends) {
    if (!pre) die(r, "%s() takes at least 1 argument", ends ? "endswith" : "startswith");
    if (pre->t == T_LIST && pre->u.o->flag) {
        for (int i = 0; i < pre->u.o->n; i++) if (starts_ends(r, s, &pre->u.o->v[i], ends)) return 1;
        return 0;
    }
    if (pre->t != T_STR) die(r, "%s first arg must be str or a tuple of str, not %s", ends ? "endswith" : "startswith", tname(*pre));
    size_t n = s.u.o->len, k = pre->u.o->len;
    return k <= n && !memcmp(s.u.o->s + (ends ? n - k : 0), pre->u.o->s, k);
}
static val str_format(R *r, val s, args *a) {
    obj *o = snew(r);
    const char *p = s.u.o->s;
    size_t n = s.u.o->len;
    int autoi = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '}' ) { if (i + 1 < n && p[i + 1] == '}') i++; else die(r, "Single '}' encountered in format string"); sputc(r, o, '}'); continue; }
        if (p[i] != '{') { sputc(r, o, p[i]); continue; }
        if (i + 1 < n && p[i + 1] == '{') { sputc(r, o, '{'); i++; continue; }
        size_t j = i + 1;
        while (j < n && p[j] != '}') j++;
        if (j >= n) die(r, "Single '{' encountered in format string");
        const char *f = p + i + 1;
        size_t fl = j - i - 1;
        if (memchr(f, ':', fl) || memchr(f, '!', fl) || memchr(f, '.', fl) || memchr(f, '[', fl)) die(r, "str.format specs and conversions are not supported");
        val *v = NULL;
        if (!fl) v = argp(a, autoi++, NULL);
        else if (cp_digit((unsigned char)f[0])) v = argp(a, atoi(f), NULL);
        else {
            char k[128];
            snprintf(k, sizeof k, "%.*s", (int)(fl < 127 ? fl : 127), f);
            v = argp(a, -1, k);
        }
        if (!v) die(r, "str.format: missing argument for field '%.*s'", (int)(fl < 64 ? fl : 64), f);
        val t = to_str(r, *v);
        sput(r, o, t.u.o->s, t.u.o->len);
        unref(r, t);
        i = j;
    }
    return sval(o);
}
static const char *const UNSAFE[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update",
                                     "popitem", "setdefault", "add", "discard", NULL};
/* o.nm(args); 0 if o has no such method */
static int call_method(R *r, val o, const char *nm, args *a, val *out) {
    val *a0 = argp(a, 0, NULL);
    if (o.t == T_STR) {
        const char *p = o.u.o->s;
        size_t n = o.u.o->len;
        if (!strcmp(nm, "strip")) *out = str_strip(r, o, a0, 3);
        else if (!strcmp(nm, "lstrip")) *out = str_strip(r, o, a0, 1);
        else if (!strcmp(nm, "rstrip")) *out = str_strip(r, o, a0, 2);
        else if (!strcmp(nm, "split")) *out = str_split(r, o, argp(a, 0, "sep"), arg_int(r, a, 1, "maxsplit", -1));
        else if (!strcmp(nm, "startswith")) *out = vbool(starts_ends(r, o, a0, 0));
        else if (!strcmp(nm, "endswith")) *out = vbool(starts_ends(r, o, a0, 1));
        else if (!strcmp(nm, "upper")) *out = casemap(r, p, n, C_UPPER);
        else if (!strcmp(nm, "lower")) *out = casemap(r, p, n, C_LOWER);
        else if (!strcmp(nm, "title")) *out = casemap(r, p, n, C_TITLE);
        else if (!strcmp(nm, "capitalize")) *out = casemap(r, p, n, C_CAPITALIZE);
        else if (!strcmp(nm, "swapcase")) *out = casemap(r, p, n, C_SWAP);
        else if (!strcmp(nm, "replace")) {
            val *b = argp(a, 1, NULL);
            if (!a0 || !b) die(r, "replace() takes at least 2 arguments");
            *out = str_replace(r, o, *a0, *b, arg_int(r, a, 2, "count", -1));
        } else if (!strcmp(nm, "find") || !strcmp(nm, "rfind") || !strcmp(nm, "count") || !strcmp(nm, "index")) {
            if (!a0 || a0->t != T_STR) die(r, "%s() needs a string argument", nm);
            const char *q = a0->u.o->s;
            size_t k = a0->u.o->len, at = (size_t)-1, c = 0;
            if (nm[0] == 'c') {
                if (!k) c = cplen(p, n) + 1;
                else for (size_t i = 0; (i = find_bytes(r, p, n, q, k, i)) != (size_t)-1; i += k) c++;
                *out = vint((int64_t)c);
            } else {
                if (nm[0] == 'r') { for (size_t i = 0; (i = find_bytes(r, p, n, q, k, i)) != (size_t)-1; i++) { at = i; if (i >= n) break; } }
                else at = find_bytes(r, p, n, q, k, 0);
                if (at == (size_t)-1 && nm[0] == 'i') die(r, "substring not found");
                *out = vint(at == (size_t)-1 ? -1 : (int64_t)cplen(p, at));
            }
        } else if (!strcmp(nm, "join")) {
            if (!a0) die(r, "join() takes exactly one argument");
            obj *l = to_list(r, *a0), *b = snew(r);
            for (int i = 0; i < l->n; i++) {
                if (l->v[i].t != T_STR) die(r, "sequence item %d: expected str instance, %s found", i, tname(l->v[i]));
                if (i) sput(r, b, p, n);
                sput(r, b, l->v[i].u.o->s, l->v[i].u.o->len);
            }
            unref(r, lval(l));
            *out = sval(b);
        } else if (!strcmp(nm, "format")) *out = str_format(r, o, a);
        else if (!strcmp(nm, "splitlines")) *out = splitlines(r, p, n, arg_bool(a, 0, "keepends", 0));
        else if (!strcmp(nm, "removeprefix") || !strcmp(nm, "removesuffix")) {
            int suf = nm[6] == 's';
            if (!a0 || a0->t != T_STR) die(r, "%s() needs a string argument", nm);
            size_t k = a0->u.o->len;
            if (starts_ends(r, o, a0, suf)) *out = vstrn(r, p + (suf ? 0 : k), n - k);
            else *out = ref(o);
        } else if (!strncmp(nm, "is", 2) && (!strcmp(nm + 2, "digit") || !strcmp(nm + 2, "alpha") || !strcmp(nm + 2, "alnum") ||
                                             !strcmp(nm + 2, "space") || !strcmp(nm + 2, "upper") || !strcmp(nm + 2, "lower") ||
                                             !strcmp(nm + 2, "numeric") || !strcmp(nm + 2, "decimal"))) {
            if (!strcmp(nm, "isupper") || !strcmp(nm, "islower")) { *out = vbool(test(r, nm + 2, o, a)); return 1; }
            int ok = n > 0;
            for (size_t i = 0; i < n && ok;) {
                uint32_t c = u8dec(p, n, &i);
                switch (nm[2]) {
                case 'd': case 'n': ok = cp_digit(c); break;
                case 's': ok = cp_space(c); break;
                default: ok = cp_alpha(c) || (nm[4] == 'n' && cp_digit(c)); break;
                }
            }
            *out = vbool(ok);
        } else return 0;
        return 1;
    }
    if (o.t == T_DICT && !o.u.o->flag) {
        obj *d = o.u.o;
        if (!strcmp(nm, "items")) *out = lval(dict_items(r, d));
        else if (!strcmp(nm, "keys") || !strcmp(nm, "values")) {
            obj *l = lnew(r, 0);
            for (int i = 0; i < d->n; i++) lpush(r, l, ref(nm[0] == 'k' ? d->k[i] : d->v[i]));
            *out = lval(l);
        } else if (!strcmp(nm, "get")) {
            if (!a0) die(r, "get expected at least 1 argument");
            val *v = dget(r, d, *a0), *dv = argp(a, 1, NULL);
            *out = v ? ref(*v) : dv ? ref(*dv) : mk(T_NONE);
        } else if (in_list(UNSAFE, nm)) die(r, "access to attribute '%s' of 'dict' object is unsafe.", nm);
        else return 0;
        return 1;
    }
    if (o.t == T_LIST) {
        if (!strcmp(nm, "index") || !strcmp(nm, "count")) {
            if (!a0) die(r, "%s() takes exactly one argument", nm);
            int64_t c = 0;
            for (int i = 0; i < o.u.o->n; i++)
                if (eq(r, o.u.o->v[i], *a0, 0)) { if (nm[0] == 'i') { *out = vint(i); return 1; } c++; }
            if (nm[0] == 'i') die(r, "value is not in list");
            *out = vint(c);
        } else if (in_list(UNSAFE, nm)) die(r, "access to attribute '%s' of '%s' object is unsafe.", nm, tname(o));
        else return 0;
        return 1;
    }
    if (o.t == T_LOOP && !strcmp(nm, "cycle")) {
        if (!a->np) die(r, "no items for cycling given");
        *out = ref(a->v[o.u.o->idx % a->np]);
        return 1;
    }
    return 0;
}

static const char *const GLOBALS[] = {"range", "namespace", "raise_exception", "strftime_now", "dict", NULL};
enum { G_RANGE, G_NAMESPACE, G_RAISE, G_STRFTIME, G_DICT };

static val call_macro(R *r, const node *m, args *a) {
    if (++r->mdepth > MAX_DEPTH) die(r, "macro calls nested too deep (limit %d)", MAX_DEPTH);
    if (++r->iters > MAX_ITERS) die(r, "loop iteration limit exceeded (10 million, macro calls included)");
    scope fr = {dnew(r), r->root}, *save = r->sc;
    r->sc = &fr;
    for (int i = 0; i < m->n; i++) {
        val *v = argp(a, i, m->kw[i]);
        val x = v ? ref(*v) : m->kv[i] ? eval(r, m->kv[i]) : undef(r, "'%s' is undefined", m->kw[i]);
        dset_s(r, fr.vars, m->kw[i], x);
    }
    obj *va = lnew(r, 1), *kw = dnew(r);
    for (int i = m->n; i < a->np; i++) lpush(r, va, ref(a->v[i]));
    for (int i = a->np; i < a->n; i++) {
        int param = 0;
        for (int j = 0; j < m->n && !param; j++) param = !strcmp(m->kw[j], a->kw[i]);
        if (!param) dset_s(r, kw, a->kw[i], ref(a->v[i]));
    }
    dset_s(r, fr.vars, "varargs", lval(va));
    dset_s(r, fr.vars, "kwargs", lval(kw));
    size_t mark = r->out->len;
    exec(r, m->d);
    val res = vstrn(r, r->out->s + mark, r->out->len - mark);
    r->out->len = mark; r->out->s[mark] = 0;
    r->sc = save;
    unref(r, lval(fr.vars));
    r->mdepth--;
    return res;
}
static NORETURN void raise_(R *r, args *a) {
    val m = a->n ? to_str(r, a->v[0]) : vstr(r, "");
    if (r->err && r->errlen) snprintf(r->err, r->errlen, "%s", m.u.o->s);
    longjmp(r->jb, 1);
}
static val call_value(R *r, val fn, args *a) {
    if (fn.t == T_MACRO) return call_macro(r, fn.u.m, a);
    if (fn.t == T_UNDEF) undef_fail(r, fn);
    if (fn.t != T_FUNC) die(r, "'%s' object is not callable", tname(fn));
    switch (fn.u.i) {
    case G_RANGE: {
        int64_t st = 0, sp, step = 1;
        for (int i = 0; i < a->np; i++) if (!isint(a->v[i])) die(r, "range() arguments must be integers, not %s", tname(a->v[i]));
        if (a->np == 1) sp = a->v[0].u.i;
        else if (a->np == 2 || a->np == 3) { st = a->v[0].u.i; sp = a->v[1].u.i; if (a->np == 3) step = a->v[2].u.i; }
        else die(r, "range expected 1 to 3 arguments, got %d", a->np);
        if (!step) die(r, "range() arg 3 must not be zero");
        double cnt = step > 0 ? ((double)sp - (double)st) / (double)step : ((double)st - (double)sp) / (double)-step;
        if (ceil(cnt) > MAX_RANGE) die(r, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MAX_RANGE);
        obj *l = lnew(r, 0);
        for (int64_t i = st; step > 0 ? i < sp : i > sp; i += step) lpush(r, l, vint(i));
        return lval(l);
    }
    case G_NAMESPACE: case G_DICT: {
        obj *d = dnew(r);
        d->flag = fn.u.i == G_NAMESPACE;
        if (a->np > 1) die(r, "expected at most 1 positional argument");
        if (a->np == 1) {
            val m = a->v[0];
            if (m.t == T_DICT) for (int i = 0; i < m.u.o->n; i++) dset(r, d, ref(m.u.o->k[i]), ref(m.u.o->v[i]));
            else if (m.t == T_LIST) {
                for (int i = 0; i < m.u.o->n; i++) {
                    val p = m.u.o->v[i];
                    if (p.t != T_LIST || p.u.o->n != 2) die(r, "dictionary update sequence element has the wrong length");
                    dset(r, d, ref(p.u.o->v[0]), ref(p.u.o->v[1]));
                }
            } else die(r, "'%s' object is not iterable", tname(m));
        }
        for (int i = a->np; i < a->n; i++) dset_s(r, d, a->kw[i], ref(a->v[i]));
        return lval(d);
    }
    case G_RAISE: raise_(r, a);
    case G_STRFTIME: {
        if (!a->n || a->v[0].t != T_STR) die(r, "strftime_now needs a format string");
        struct tm tm;
        time_t now = r->now;
        if (!localtime_r(&now, &tm)) die(r, "strftime_now: time out of range");
        if (!a->v[0].u.o->len || strlen(a->v[0].u.o->s) != a->v[0].u.o->len) return vstr(r, "");
        obj *o = snew(r);
        for (size_t cap = 64; cap <= 65536; cap *= 4) {
            sgrow(r, o, cap);
            size_t k = strftime(o->s, cap, a->v[0].u.o->s, &tm);
            if (k) { o->len = k; break; }
        }
        return sval(o);
    }
    }
    die(r, "bad builtin");
}

/* ---------------------------------------------------------------- evaluation */

static val lookup(R *r, const char *nm) {
    size_t n = strlen(nm);
    for (scope *s = r->sc; s; s = s->up) { val *v = dfind(s->vars, nm, n); if (v) return ref(*v); }
    val *v = dfind(r->ctx, nm, n);
    if (v) return ref(*v);
    for (int i = 0; GLOBALS[i]; i++) if (!strcmp(GLOBALS[i], nm)) { val f = mk(T_FUNC); f.u.i = i; return f; }
    return undef(r, "'%s' is undefined", nm);
}
static val call(R *r, const node *x) {
    const node *f = x->a;
    args a;
    val fn, res;
    if (f->k == E_ATTR) {
        val recv = eval(r, f->a);
        obj *h = eval_args(r, x, &a);
        if (call_method(r, recv, f->s, &a, &res)) { unref(r, recv); unref(r, lval(h)); return res; }
        fn = getattr_(r, recv, f->s, f->sl);
        unref(r, recv);
        res = call_value(r, fn, &a);
        unref(r, fn); unref(r, lval(h));
        return res;
    }
    fn = eval(r, f);
    obj *h = eval_args(r, x, &a);
    res = call_value(r, fn, &a);
    unref(r, fn); unref(r, lval(h));
    return res;
}
static int compare(R *r, int op, val a, val b) {
    switch (op) {
    case 'E': return eq(r, a, b, 0);
    case 'N': return !eq(r, a, b, 0);
    case '<': return cmp(r, a, b, "<", 0) < 0;
    case 'L': return cmp(r, a, b, "<=", 0) <= 0;
    case '>': return cmp(r, a, b, ">", 0) > 0;
    case 'G': return cmp(r, a, b, ">=", 0) >= 0;
    case 'I': return contains(r, b, a);
    default: return !contains(r, b, a);
    }
}
static val eval(R *r, const node *x) {
    if (++r->depth > MAX_EVAL_DEPTH) die(r, "evaluation nested too deep (limit %d)", MAX_EVAL_DEPTH);
    int line = r->line;
    r->line = x->line;
    val v, a, b;
    switch (x->k) {
    case E_CONST: v = ref(x->v); break;
    case E_NAME: v = lookup(r, x->s); break;
    case E_ATTR: a = eval(r, x->a); v = getattr_(r, a, x->s, x->sl); unref(r, a); break;
    case E_ITEM: a = eval(r, x->a); b = eval(r, x->b); v = getitem_(r, a, b); unref(r, a); unref(r, b); break;
    case E_SLICE: {
        obj *h = lnew(r, 0);
        for (int i = 0; i < 3; i++) lpush(r, h, (i == 0 ? x->b : i == 1 ? x->c : x->d) ? eval(r, i == 0 ? x->b : i == 1 ? x->c : x->d) : mk(T_NONE));
        a = eval(r, x->a);
        v = slice(r, a, h->v);
        unref(r, a); unref(r, lval(h));
        break;
    }
    case E_CALL: v = call(r, x); break;
    case E_FILTER: case E_TEST: {
        args ar;
        a = eval(r, x->a);
        obj *h = eval_args(r, x, &ar);
        v = x->k == E_FILTER ? filter(r, x->s, a, &ar) : vbool(test(r, x->s, a, &ar) ^ x->op);
        unref(r, a); unref(r, lval(h));
        break;
    }
    case E_NEG: case E_POS:
        a = eval(r, x->a);
        if (a.t == T_UNDEF) undef_fail(r, a);
        if (isint(a)) { if (x->k == E_NEG && a.u.i == INT64_MIN) die(r, "integer overflow (ints are 64-bit here)"); v = vint(x->k == E_NEG ? -a.u.i : a.u.i); }
        else if (a.t == T_FLOAT) v = vflt(x->k == E_NEG ? -a.u.f : a.u.f);
        else die(r, "bad operand type for unary %c: '%s'", x->k == E_NEG ? '-' : '+', tname(a));
        break;
    case E_NOT: a = eval(r, x->a); v = vbool(!truthy(a)); unref(r, a); break;
    case E_BIN: a = eval(r, x->a); b = eval(r, x->b); v = arith(r, x->op, a, b); unref(r, a); unref(r, b); break;
    case E_AND: case E_OR:
        v = eval(r, x->a);
        if (truthy(v) == (x->k == E_AND)) { unref(r, v); v = eval(r, x->b); }
        break;
    case E_CMP: {
        int ok = 1;
        a = eval(r, x->a);
        for (int i = 0; i < x->n && ok; i++) {
            b = eval(r, x->kv[i]);
            ok = compare(r, x->ops[i], a, b);
            unref(r, a);
            a = b;
        }
        unref(r, a);
        v = vbool(ok);
        break;
    }
    case E_COND:
        a = eval(r, x->a);
        if (truthy(a)) v = eval(r, x->b);
        else if (x->c) v = eval(r, x->c);
        else v = undef(r, "the inline if-expression on line %d evaluated to false and no else section was defined.", x->line);
        unref(r, a);
        break;
    case E_LIST: case E_TUPLE: {
        obj *l = lnew(r, x->k == E_TUPLE);
        for (int i = 0; i < x->n; i++) lpush(r, l, eval(r, x->kv[i]));
        v = lval(l);
        break;
    }
    case E_DICT: {
        obj *d = dnew(r);
        for (int i = 0; i + 1 < x->n; i += 2) {
            a = eval(r, x->kv[i]);
            if (a.t == T_LIST && !a.u.o->flag) die(r, "unhashable type: 'list'");
            if (a.t == T_DICT) die(r, "unhashable type: 'dict'");
            dset(r, d, a, eval(r, x->kv[i + 1]));
        }
        v = lval(d);
        break;
    }
    case E_BLOCKVAL: v = ref(r->blockval); break;
    default: die(r, "bad expression");
    }
    r->line = line;
    r->depth--;
    return v;
}

/* ---------------------------------------------------------------- statements */

static void assign(R *r, const node *tg, val v) {   /* takes ownership of v */
    if (tg->k == E_NAME) { dset_s(r, r->sc->vars, tg->s, v); return; }
    if (tg->k == E_ATTR) {
        val ns = eval(r, tg->a);
        if (ns.t != T_DICT || !ns.u.o->flag) die(r, "cannot assign attribute on non-namespace object");
        dset_s(r, ns.u.o, tg->s, v);
        unref(r, ns);
        return;
    }
    obj *l = to_list(r, v);
    if (l->n != tg->n) {
        if (l->n > tg->n) die(r, "too many values to unpack (expected %d)", tg->n);
        die(r, "not enough values to unpack (expected %d, got %d)", tg->n, l->n);
    }
    for (int i = 0; i < tg->n; i++) assign(r, tg->kv[i], ref(l->v[i]));
    unref(r, lval(l));
    unref(r, v);
}
static void exec_for(R *r, const node *x) {
    val it = eval(r, x->b);
    obj *items = to_list(r, it);
    unref(r, it);
    if (x->c) {
        obj *f = lnew(r, 0);
        for (int i = 0; i < items->n; i++) {
            if (++r->iters > MAX_ITERS) die(r, "loop iteration limit exceeded (10 million)");
            scope fr = {dnew(r), r->sc};
            r->sc = &fr;
            assign(r, x->a, ref(items->v[i]));
            val c = eval(r, x->c);
            r->sc = fr.up;
            unref(r, lval(fr.vars));
            if (truthy(c)) lpush(r, f, ref(items->v[i]));
            unref(r, c);
        }
        unref(r, lval(items));
        items = f;
    }
    obj *L = onew(r, T_LOOP);
    L->ref = items; L->n = items->n;
    /* one frame for the loop, emptied before each iteration (no allocation per iteration) */
    scope fr = {dnew(r), r->sc};
    val lk = vstr(r, "loop"), tk = x->a->k == E_NAME ? vstr(r, x->a->s) : mk(T_NONE);
    for (int i = 0; i < items->n; i++) {
        if (++r->iters > MAX_ITERS) die(r, "loop iteration limit exceeded (10 million)");
        L->idx = i;
        obj *d = fr.vars;
        while (d->n) { d->n--; val k = d->k[d->n], v = d->v[d->n]; unref(r, k); unref(r, v); }
        r->sc = &fr;
        if (tk.t == T_STR) dset(r, d, ref(tk), ref(items->v[i]));
        else assign(r, x->a, ref(items->v[i]));
        dset(r, d, ref(lk), ref(lval(L)));
        exec(r, x->d);
        r->sc = fr.up;
        if (r->brk) { int b = r->brk; r->brk = 0; if (b == 1) break; }
    }
    unref(r, lval(fr.vars));
    unref(r, lk);
    unref(r, tk);
    if (!items->n && x->e) exec(r, x->e);
    unref(r, lval(L));
}
/* renders body x->d, applies the filter chain x->b to it */
static val block_value(R *r, const node *x) {
    size_t mark = r->out->len;
    exec(r, x->d);
    val s = vstrn(r, r->out->s + mark, r->out->len - mark);
    r->out->len = mark; r->out->s[mark] = 0;
    val save = r->blockval;
    r->blockval = s;
    val v = eval(r, x->b);
    r->blockval = save;
    unref(r, s);
    return v;
}
static void exec(R *r, const node *x) {
    if (!x) return;
    if (++r->depth > MAX_EVAL_DEPTH) die(r, "evaluation nested too deep (limit %d)", MAX_EVAL_DEPTH);
    r->line = x->line;
    val v;
    switch (x->k) {
    case S_LIST: for (int i = 0; i < x->n && !r->brk; i++) exec(r, x->kv[i]); break;
    case S_TEXT: sput(r, r->out, x->s, x->sl); break;
    case S_OUT: v = eval(r, x->a); write_val(r, r->out, v, 0, 0); unref(r, v); break;
    case S_IF: {
        v = eval(r, x->a);
        int t = truthy(v);
        unref(r, v);
        exec(r, t ? x->b : x->c);
        break;
    }
    case S_FOR: exec_for(r, x); break;
    case S_SET: assign(r, x->a, eval(r, x->b)); break;
    case S_SETBLK: assign(r, x->a, block_value(r, x)); break;
    case S_FILTER: v = block_value(r, x); write_val(r, r->out, v, 0, 0); unref(r, v); break;
    case S_MACRO: v = mk(T_MACRO); v.u.m = x; dset_s(r, r->sc->vars, x->s, v); break;
    case S_BREAK: r->brk = 1; break;
    case S_CONT: r->brk = 2; break;
    default: die(r, "bad statement");
    }
    r->depth--;
}

static void render(R *r, const sk_jinja *t, const sk_json *ctx) {
    if (ctx && ctx->type != SK_JSON_OBJ && ctx->type != SK_JSON_NULL) die(r, "the context must be a JSON object");
    r->ctx = dnew(r);
    if (ctx && ctx->type == SK_JSON_OBJ)
        for (int i = 0; i < ctx->n; i++) dset(r, r->ctx, vstrn(r, ctx->keys[i], ctx->key_lens[i]), from_json(r, &ctx->items[i]));
    r->out = snew(r);
    scope root = {dnew(r), NULL};
    r->sc = r->root = &root;
    exec(r, t->root);
    r->sc = r->root = NULL;
}

static int run(R *r, const sk_jinja *t, const sk_json *ctx) {
    if (setjmp(r->jb)) return 1;
    render(r, t, ctx);
    return 0;
}

int sk_jinja_render(const sk_jinja *t, const sk_json *ctx, time_t now, char **out, size_t *out_len, char *err, size_t errlen) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (err && errlen) err[0] = 0;
    R *r = calloc(1, sizeof *r);
    if (!r) { if (err && errlen) snprintf(err, errlen, "out of memory"); return 1; }
    r->all.next = r->all.prev = &r->all;
    r->err = err; r->errlen = errlen; r->now = now; r->line = 1;
    int failed = run(r, t, ctx);
    char *res = NULL;
    size_t len = 0;
    if (!failed) { res = r->out->s; len = r->out->len; r->out->s = NULL; }
    while (r->all.next != &r->all) ofree(r, r->all.next);
    free(r);
    if (failed) return 1;
    *out = res;
    if (out_len) *out_len = len;
    return 0;
}
