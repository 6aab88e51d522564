/* Jinja2 renderer for Hugging Face chat templates (internal to its files). See jinja.h.
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
 *  - the filters, tests, str/dict/list methods and globals listed in jj_filters, jj_tests
 *    (jinja_filters.c), call_method and GLOBALS (jinja_render.c); tojson is transformers'
 *    json.dumps(ensure_ascii=False) version.
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
 * allocated or scanned) 1 GiB, 10 million loop iterations plus macro calls, range() 100000.
 *
 * Files: jinja_lex.c (template text to tokens; the template's arena, parse errors),
 * jinja_parse.c (tokens to the AST; sk_jinja_parse, sk_jinja_free), jinja_value.c (the
 * runtime's values: objects and limits, printing, comparisons and arithmetic, attribute and item
 * access), jinja_str.c (Python str semantics on UTF-8), jinja_filters.c (arguments, tests,
 * filters, tojson, sorting), jinja_render.c (methods and globals, evaluation, statements;
 * sk_jinja_render). Every string of a template or a render is valid UTF-8: the template is
 * checked, the context comes from the JSON reader, and nothing cuts a string inside a character. */
#ifndef SK_JINJA_INTERNAL_H
#define SK_JINJA_INTERNAL_H
#include "text/jinja.h"
#include "base/utf8.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

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

static inline val mk(int t) { val v; memset(&v, 0, sizeof v); v.t = t; return v; }
static inline val vint(int64_t i) { val v = mk(T_INT); v.u.i = i; return v; }
static inline val vflt(double f) { val v = mk(T_FLOAT); v.u.f = f; return v; }
static inline val vbool(int b) { val v = mk(T_BOOL); v.u.i = b != 0; return v; }
static inline obj *vobj(val v) { return (v.t == T_UNDEF || (v.t >= T_STR && v.t <= T_LOOP)) ? v.u.o : NULL; }
static inline val ref(val v) { obj *o = vobj(v); if (o && o->rc >= 0) o->rc++; return v; }
static inline val sval(obj *o) { val v = mk(T_STR); v.u.o = o; return v; }
static inline val lval(obj *o) { val v = mk(o->t); v.u.o = o; return v; }
static inline int isnum(val v) { return v.t == T_BOOL || v.t == T_INT || v.t == T_FLOAT; }
static inline int isint(val v) { return v.t == T_BOOL || v.t == T_INT; }
static inline double num(val v) { return v.t == T_FLOAT ? v.u.f : (double)v.u.i; }

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

/* ---------------------------------------------------------------- tokens and the parser's state */

enum { K_EOF, K_TEXT, K_VBEG, K_VEND, K_BBEG, K_BEND, K_NAME, K_STR, K_INT, K_FLOAT, K_OP };
typedef struct { int k, line; const char *s; size_t n; int64_t i; double f; } tok;

typedef struct {
    sk_jinja *t;
    tok *tk; int nt, ct, pos;
    jmp_buf jb;
    char *err; size_t errlen;
    int depth, loops;
} P;

/* ---------------------------------------------------------------- the render's state */

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
/* a call's arguments: v[0..np) positional, then v[np..n) named kw[i] */
typedef struct { int n, np; val *v; const char **kw; } args;

/* ---------------------------------------------------------------- UTF-8 */

/* the code point at s[*i] of the UTF-8 string s[0..n), *i moved past it */
static inline uint32_t u8dec(const char *s, size_t n, size_t *i) {
    uint32_t c;
    size_t k = sk_utf8_decode(s + *i, n - *i, &c);
    *i += k ? k : 1;
    return c;
}
/* the byte length of the code point at s[i] */
static inline size_t u8len_at(const char *s, size_t n, size_t i) { size_t j = i; u8dec(s, n, &j); return j - i; }
static inline int cp_digit(uint32_t c) { return c >= '0' && c <= '9'; }

/* ---------------------------------------------------------------- jinja_error.c */

/* "line N: message" into err (parse and render errors alike) */
void jj_line_msg(char *err, size_t errlen, int line, const char *fmt, va_list ap);
/* a parse error: the message into p->err, longjmp to p->jb */
NORETURN PRINTF(3, 4) void jj_perr(P *p, int line, const char *fmt, ...);
/* a render error: "line N: message" into r->err, longjmp to r->jb */
NORETURN PRINTF(2, 3) void jj_die(R *r, const char *fmt, ...);

/* ---------------------------------------------------------------- jinja_lex.c */

/* n zeroed bytes in the template's arena */
void *jj_palloc(P *p, size_t n);
/* the number of newlines in s[a..b) */
int jj_lines_in(const char *s, size_t a, size_t b);
/* the tokens of the template s[0..n) into p->tk, ending with K_EOF */
void jj_lex(P *p, const char *s, size_t n);

/* ---------------------------------------------------------------- jinja_value.c */

/* count n bytes scanned against the work limit */
void jj_scan(R *r, size_t n);
/* a new object of type t (refcount 1) on the render's list; jj_ofree unlinks and frees one */
obj *jj_onew(R *r, int t);
void jj_ofree(R *r, obj *o);
/* drop a reference, freeing what it held last */
void jj_unref(R *r, val v);
/* strings: room for need more bytes, append bytes / a char / printf / a code point */
void jj_sgrow(R *r, obj *o, size_t need);
void jj_sput(R *r, obj *o, const char *s, size_t n);
void jj_sputc(R *r, obj *o, char c);
PRINTF(3, 4) void jj_sprintf(R *r, obj *o, const char *fmt, ...);
void jj_sputcp(R *r, obj *o, uint32_t c);
/* a new empty string; a new string value of s[0..n) / of a C string */
obj *jj_snew(R *r);
val jj_vstrn(R *r, const char *s, size_t n);
val jj_vstr(R *r, const char *s);
/* the number of code points of s[0..n); their byte offsets plus n (in *hold, a string to unref) */
size_t jj_cplen(const char *s, size_t n);
size_t *jj_cpoffs(R *r, const char *s, size_t n, size_t *count, obj **hold);
/* an undefined value carrying the message printed when it is used */
PRINTF(2, 3) val jj_undef(R *r, const char *fmt, ...);
/* the error for using the undefined v */
NORETURN void jj_undef_fail(R *r, val v);
/* a new list (tuple: 1) and appending (takes ownership of v) */
obj *jj_lnew(R *r, int tuple);
void jj_lpush(R *r, obj *l, val v);
/* dicts: new, lookup by string key or any key, insert or replace (takes ownership of key, v) */
obj *jj_dnew(R *r);
val *jj_dfind(const obj *d, const char *k, size_t kn);
val *jj_dget(R *r, const obj *d, val key);
void jj_dset(R *r, obj *d, val key, val v);
void jj_dset_s(R *r, obj *d, const char *k, val v);
/* a context value from JSON */
val jj_from_json(R *r, const sk_json *j);
/* Python's type name of v; repr(float) into out */
const char *jj_tname(val v);
void jj_pfloat(char *out, size_t on, double d);
/* str(v) (repr 0) or repr(v) appended to b; str(v) as a new value */
void jj_write_val(R *r, obj *b, val v, int repr, int depth);
val jj_to_str(R *r, val v);
/* Python's truthiness, ==, ordering (<0, 0, >0; op names the operator in a TypeError), `in` */
int jj_truthy(val v);
int jj_eq(R *r, val a, val b, int depth);
int jj_cmp(R *r, val a, val b, const char *op, int depth);
int jj_contains(R *r, val c, val x);
/* the first byte offset >= from of nd[0..nn) in h[0..hn), or (size_t)-1 */
size_t jj_find_bytes(R *r, const char *h, size_t hn, const char *nd, size_t nn, size_t from);
/* a op b for the binary operators + - * / F(//) % P(**) ~ */
val jj_arith(R *r, int op, val a, val b);
/* o.nm, o[k], o[start:stop:step] (sv: 3 values, None where absent), list(v) as a new list */
val jj_getattr(R *r, val o, const char *nm, size_t nl);
val jj_getitem(R *r, val o, val k);
val jj_slice(R *r, val o, val *sv);
obj *jj_to_list(R *r, val v);

/* ---------------------------------------------------------------- jinja_str.c */

/* Python's str.isspace() and an approximation of str.isalpha() for one code point */
int jj_cp_space(uint32_t c);
int jj_cp_alpha(uint32_t c);
/* str.isupper()/islower() of one code point, and whether it is cased at all */
int jj_cp_isupper(uint32_t c);
int jj_cp_islower(uint32_t c);
int jj_cp_cased(uint32_t c);
/* byte length of the whitespace character at s[i], 0 if none; start of the trailing
 * whitespace of s[lo..n) */
size_t jj_ws_at(const char *s, size_t n, size_t i);
size_t jj_rstrip_ws(const char *s, size_t lo, size_t n);
/* upper, lower, capitalize, str.title, jinja2's title filter, swapcase */
enum { C_UPPER, C_LOWER, C_CAPITALIZE, C_TITLE, C_JTITLE, C_SWAP };
val jj_casemap(R *r, const char *s, size_t n, int mode);
/* str.strip (which: 1 left, 2 right, 3 both; chars NULL: whitespace), split, replace, splitlines */
val jj_str_strip(R *r, val s, val *chars, int which);
val jj_str_split(R *r, val s, val *sep, int64_t maxsplit);
val jj_str_replace(R *r, val s, val old, val nw, int64_t count);
val jj_splitlines(R *r, const char *s, size_t n, int keepends);

/* ---------------------------------------------------------------- jinja_filters.c */

/* the names of the filters and tests (NULL-terminated), and whether s is in such a list */
extern const char *const jj_filters[], *const jj_tests[];
int jj_in_list(const char *const *l, const char *s);
/* argument pos (positional) or kw (named), or NULL; as an int or a truth value with a default */
val *jj_argp(args *a, int pos, const char *kw);
int64_t jj_arg_int(R *r, args *a, int pos, const char *kw, int64_t def);
int jj_arg_bool(args *a, int pos, const char *kw, int def);
/* the (key, value) tuples of a dict, as a new list */
obj *jj_dict_items(R *r, obj *d);
/* x is nm(args), x|nm(args) */
int jj_test(R *r, const char *nm, val x, args *a);
val jj_filter(R *r, const char *nm, val x, args *a);
#endif
