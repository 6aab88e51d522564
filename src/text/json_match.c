/* Matching bytes against a compiled JSON Schema (json_grammar.h), and the tokens that may come
 * next. A reading of the bytes so far is a stack of frames, one per value being written (the
 * root at the bottom, the innermost value on top); a byte changes the top frame, ends it (its
 * parent goes on), or starts a child value. An anyOf starts one reading per alternative: the
 * state is a set of readings, and those a byte cannot continue are dropped.
 *
 * Every state has a cost: the fewest bytes that complete the value (JG_INF: none can). The
 * allowed tokens are found by walking a trie of the vocabulary's byte strings from the
 * current state, so tokens sharing a prefix share its work, and a token is allowed when the
 * state after it can still complete within the budget. */
#include "skiplm_base.h"
#include "skiplm_text.h"
#include "text/json_grammar.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ frames and states */

enum { K_ROOT, K_OBJ, K_MAP, K_ARR, K_STR, K_NUM, K_ENUM };
enum { R_WS, R_VAL, R_END, R_PRE, R_SUF };                             /* the root (n: bytes of the prefix or suffix matched) */
enum { O_START, O_OPEN, O_KEY, O_COLON, O_VALWS, O_VAL, O_AFTER, O_COMMA };   /* objects and maps */
enum { A_START, A_OPEN, A_VAL, A_AFTER, A_COMMA };                      /* arrays */
enum { S_START, S_IN, S_ESC, S_U, S_UTF8 };                             /* strings */
enum { TAKE, DONE, PASS, PUSH, NO };                                    /* what a byte does to a frame */

/* One value being written. Fields by kind:
 *   object: n key bytes matched, [a, b) the keys they may begin (a: the key, once whole),
 *           bits the properties written;
 *   array:  n items begun;
 *   string: n code points, a bytes still due (\u digits seen, or UTF-8 continuation bytes
 *           left), b the next continuation byte's range (lo | hi << 8), bits a \u's value;
 *   number: bits the integer part, n its digits, x the fraction, a its digits, b 1 if negative;
 *   enum:   n bytes matched, [a, b) the candidates they begin.
 * No padding: readings are compared with memcmp. */
typedef struct {
    int32_t node;
    uint8_t kind, phase;
    uint16_t ws;               /* whitespace bytes in the current gap */
    uint32_t n, a, b, spare;
    uint64_t bits;
    int64_t x;
} jg_frame;

typedef struct {
    int ns, nf;                /* readings; their frames, one after another */
    uint8_t depth[JG_MAX_STACKS];
    jg_frame f[JG_MAX_FRAMES];
} jg_state;

static size_t state_size(const jg_state *s) { return offsetof(jg_state, f) + sizeof(jg_frame) * s->nf; }

static int is_ws(int c) { return c == ' ' || c == '\n' || c == '\t'; }
static uint64_t add(uint64_t a, uint64_t b) { return a + b >= JG_INF ? JG_INF : a + b; }
static uint64_t min64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static int64_t P10(int e) { int64_t r = 1; while (e-- > 0) r *= 10; return r; }
static uint64_t ML(const sk_jg *g, int32_t node) { return node < 0 ? JG_INF : g->nodes[node].minlen; }

static void frame_init(jg_frame *t, int32_t node, int kind) {
    memset(t, 0, sizeof *t);
    t->node = node;
    t->kind = kind == JG_OBJ ? K_OBJ : kind == JG_MAP ? K_MAP : kind == JG_ARR ? K_ARR : kind == JG_STR ? K_STR
            : kind == JG_NUM ? K_NUM : K_ENUM;
}

/* ------------------------------------------------------------ numbers */

static int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

/* some multiple of step among the magnitudes [L, H] (negated when neg) lies in [lo, hi] */
static int has_mult(const jg_node *nd, int neg, int64_t L, int64_t H, int64_t step) {
    int64_t A = neg ? -H : L, B = neg ? -L : H;
    if (A < nd->lo) A = nd->lo;
    if (B > nd->hi) B = nd->hi;
    return A <= B && ceil_div(A, step) * step <= B;
}

uint64_t jg_num_rest(const jg_node *nd, int phase, int neg, uint64_t p, uint32_t n_int, int64_t f, uint32_t k) {
    const int F = nd->frac;
    if (!nd->bounded) return phase == JG_NUM_INT || phase == JG_NUM_FRAC ? 0 : 1;
    uint64_t best = JG_INF;
    switch (phase) {
    case JG_NUM_START:
        best = add(1, jg_num_rest(nd, JG_NUM_MINUS, 1, 0, 0, 0, 0));
        for (int d = 0; d < 10; d++) best = min64(best, add(1, jg_num_rest(nd, JG_NUM_INT, 0, d, 1, 0, 0)));
        return best;
    case JG_NUM_MINUS:
        for (int d = F == 0; d < 10; d++) best = min64(best, add(1, jg_num_rest(nd, JG_NUM_INT, 1, d, 1, 0, 0)));
        return best;
    case JG_NUM_INT: {
        const int jmax = p == 0 && n_int == 1 ? 0 : nd->int_cap - (int)n_int;
        for (int j = 0; j <= jmax; j++) {
            const int64_t lo_int = (int64_t)p * P10(j), hi_int = lo_int + P10(j) - 1;
            for (int kk = 0; kk <= F; kk++) {
                const uint64_t cost = (uint64_t)j + (kk ? kk + 1 : 0);
                if (cost >= best) break;
                const int64_t step = P10(F - kk);
                if (has_mult(nd, neg, lo_int * P10(F), hi_int * P10(F) + (kk ? P10(F) - step : 0), step)) best = cost;
            }
        }
        return best;
    }
    case JG_NUM_DOT:
        for (int kk = 1; kk <= F; kk++) {
            const int64_t step = P10(F - kk), L = (int64_t)p * P10(F);
            if (has_mult(nd, neg, L, L + P10(F) - step, step)) return (uint64_t)kk;
        }
        return JG_INF;
    case JG_NUM_FRAC: {
        const int64_t m0 = (int64_t)p * P10(F) + f * P10(F - (int)k);
        if (has_mult(nd, neg, m0, m0, 1)) return 0;
        for (int kk = (int)k + 1; kk <= F; kk++) {
            const int64_t step = P10(F - kk);
            if (has_mult(nd, neg, m0, m0 + P10(F - (int)k) - step, step)) return (uint64_t)(kk - (int)k);
        }
        return JG_INF;
    }
    }
    return JG_INF;
}

static uint64_t num_rest(const jg_node *nd, const jg_frame *t) {
    return jg_num_rest(nd, t->phase, (int)t->b, t->bits, t->n, t->x, t->a);
}

static int feed_num(const jg_node *nd, jg_frame *t, int c) {
    const int digit = c >= '0' && c <= '9';
    switch (t->phase) {
    case JG_NUM_START:
        if (c == '-') { t->phase = JG_NUM_MINUS; t->b = 1; break; }
        if (!digit) return NO;
        t->phase = JG_NUM_INT; t->bits = (uint64_t)(c - '0'); t->n = 1;
        break;
    case JG_NUM_MINUS:
        if (!digit || (c == '0' && nd->frac == 0)) return NO;          /* no -0 for an integer */
        t->phase = JG_NUM_INT; t->bits = (uint64_t)(c - '0'); t->n = 1;
        break;
    case JG_NUM_INT:
        if (digit) {
            if ((t->bits == 0 && t->n == 1) || (int)t->n >= nd->int_cap) return NO;
            t->bits = t->bits * 10 + (uint64_t)(c - '0'); t->n++;
        } else if (c == '.' && nd->frac > 0) {
            t->phase = JG_NUM_DOT;
        } else {
            return num_rest(nd, t) == 0 ? PASS : NO;
        }
        break;
    case JG_NUM_DOT:
        if (!digit) return NO;
        t->phase = JG_NUM_FRAC; t->x = c - '0'; t->a = 1;
        break;
    case JG_NUM_FRAC:
        if (!digit) return num_rest(nd, t) == 0 ? PASS : NO;
        if ((int)t->a >= nd->frac) return NO;
        t->x = t->x * 10 + (c - '0'); t->a++;
        break;
    }
    return num_rest(nd, t) < JG_INF ? TAKE : NO;
}

/* ------------------------------------------------------------ strings, enums, objects, arrays */

static int feed_str(const jg_node *nd, jg_frame *t, int c) {
    switch (t->phase) {
    case S_START:
        if (c != '"') return NO;
        t->phase = S_IN;
        return TAKE;
    case S_IN:
        if (c == '"') return t->n >= nd->min_len ? DONE : NO;
        if (c < 0x20 || t->n >= nd->max_len) return NO;
        if (c == '\\') { t->n++; t->phase = S_ESC; return TAKE; }
        if (c < 0x80) { t->n++; return TAKE; }
        /* the first byte of a multi-byte character: how many follow, and the next one's range
         * (no overlong forms, no surrogates, nothing past U+10FFFF) */
        if (c >= 0xC2 && c <= 0xDF) { t->a = 1; t->b = 0x80 | 0xBF << 8; }
        else if (c == 0xE0) { t->a = 2; t->b = 0xA0 | 0xBF << 8; }
        else if (c == 0xED) { t->a = 2; t->b = 0x80 | 0x9F << 8; }
        else if (c >= 0xE1 && c <= 0xEF) { t->a = 2; t->b = 0x80 | 0xBF << 8; }
        else if (c == 0xF0) { t->a = 3; t->b = 0x90 | 0xBF << 8; }
        else if (c >= 0xF1 && c <= 0xF3) { t->a = 3; t->b = 0x80 | 0xBF << 8; }
        else if (c == 0xF4) { t->a = 3; t->b = 0x80 | 0x8F << 8; }
        else return NO;
        t->n++;
        t->phase = S_UTF8;
        return TAKE;
    case S_ESC:
        if (c == 'u') { t->phase = S_U; t->a = 0; t->bits = 0; return TAKE; }
        if (!strchr("\"\\/bfnrt", c) || !c) return NO;
        t->phase = S_IN;
        return TAKE;
    case S_U: {
        int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (h < 0) return NO;
        t->bits = t->bits * 16 + (uint64_t)h;
        if (++t->a == 4) {
            if (t->bits >= 0xD800 && t->bits <= 0xDFFF) return NO;   /* a code point, not half of one */
            t->phase = S_IN;
        }
        return TAKE;
    }
    case S_UTF8:
        if (c < (int)(t->b & 0xFF) || c > (int)(t->b >> 8)) return NO;
        t->b = 0x80 | 0xBF << 8;
        if (--t->a == 0) t->phase = S_IN;
        return TAKE;
    }
    return NO;
}

static int feed_enum(const jg_node *nd, jg_frame *t, int c) {
    uint32_t lo = t->b, hi = t->a;
    for (uint32_t i = t->a; i < t->b; i++)
        if (nd->cand_len[i] > t->n && (unsigned char)nd->cand[i][t->n] == c) { if (lo == t->b) lo = i; hi = i + 1; }
    if (lo == t->b) return nd->cand_len[t->a] == t->n ? PASS : NO;    /* shortest first: a whole value ends here */
    t->a = lo; t->b = hi; t->n++;
    return hi - lo == 1 && nd->cand_len[lo] == t->n ? DONE : TAKE;
}

static int ws_gap(jg_frame *t) { return ++t->ws <= JG_MAX_WS ? TAKE : NO; }

/* the properties of an object node not yet written */
static uint64_t unseen(const jg_node *nd, const jg_frame *t) {
    uint64_t all = nd->n_props >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << nd->n_props) - 1;
    return all & ~t->bits;
}

static int feed_obj(const jg_node *nd, jg_frame *t, int c, int32_t *push) {
    switch (t->phase) {
    case O_START:
        if (c != '{') return NO;
        t->phase = O_OPEN;
        return TAKE;
    case O_OPEN: case O_COMMA:
        if (is_ws(c)) return ws_gap(t);
        if (c == '}' && t->phase == O_OPEN) return (t->bits & nd->req) == nd->req ? DONE : NO;
        if (c != '"' || !unseen(nd, t)) return NO;
        t->phase = O_KEY; t->ws = 0; t->n = 0; t->a = 0; t->b = (uint32_t)nd->n_props;
        __attribute__((fallthrough));          /* the quote is the key's first byte */
    case O_KEY: {
        uint32_t lo = t->b, hi = t->a;
        for (uint32_t i = t->a; i < t->b; i++) {
            const jg_prop *pr = &nd->props[i];
            if (pr->len > t->n && (unsigned char)pr->key[t->n] == c && !(t->bits >> i & 1)) { if (lo == t->b) lo = i; hi = i + 1; }
        }
        if (lo == t->b) return NO;
        t->a = lo; t->b = hi; t->n++;
        if (nd->props[lo].len == t->n) {                /* keys are quoted: one that ends here is the only one */
            t->bits |= (uint64_t)1 << lo;
            t->phase = O_COLON;
        }
        return TAKE;
    }
    case O_COLON:
        if (is_ws(c)) return ws_gap(t);
        if (c != ':') return NO;
        t->phase = O_VALWS; t->ws = 0;
        return TAKE;
    case O_VALWS:
        if (is_ws(c)) return ws_gap(t);
        t->phase = O_VAL;
        *push = nd->props[t->a].node;
        return PUSH;
    case O_AFTER:
        if (is_ws(c)) return ws_gap(t);
        if (c == '}') return (t->bits & nd->req) == nd->req ? DONE : NO;
        if (c != ',' || !unseen(nd, t)) return NO;
        t->phase = O_COMMA; t->ws = 0;
        return TAKE;
    }
    return NO;
}

static int feed_map(const jg_node *nd, jg_frame *t, int c, int32_t *push) {
    switch (t->phase) {
    case O_START:
        if (c != '{') return NO;
        t->phase = O_OPEN;
        return TAKE;
    case O_OPEN: case O_COMMA:
        if (is_ws(c)) return ws_gap(t);
        if (c == '}' && t->phase == O_OPEN) return DONE;
        if (c != '"') return NO;
        t->phase = O_KEY; t->ws = 0;
        *push = JG_N_STR;
        return PUSH;
    case O_COLON:
        if (is_ws(c)) return ws_gap(t);
        if (c != ':') return NO;
        t->phase = O_VALWS; t->ws = 0;
        return TAKE;
    case O_VALWS:
        if (is_ws(c)) return ws_gap(t);
        t->phase = O_VAL;
        *push = nd->value;
        return PUSH;
    case O_AFTER:
        if (is_ws(c)) return ws_gap(t);
        if (c == '}') return DONE;
        if (c != ',') return NO;
        t->phase = O_COMMA; t->ws = 0;
        return TAKE;
    }
    return NO;
}

static int32_t elem(const jg_node *nd, uint32_t i) { return (int)i < nd->n_prefix ? nd->prefix[i] : nd->items; }

static int feed_arr(const jg_node *nd, jg_frame *t, int c, int32_t *push) {
    switch (t->phase) {
    case A_START:
        if (c != '[') return NO;
        t->phase = A_OPEN;
        return TAKE;
    case A_OPEN: case A_COMMA:
        if (is_ws(c)) return ws_gap(t);
        if (c == ']' && t->phase == A_OPEN) return nd->min_items == 0 ? DONE : NO;
        if (t->n >= nd->max_items || elem(nd, t->n) < 0) return NO;
        *push = elem(nd, t->n);
        t->n++; t->phase = A_VAL; t->ws = 0;
        return PUSH;
    case A_AFTER:
        if (is_ws(c)) return ws_gap(t);
        if (c == ']') return t->n >= nd->min_items ? DONE : NO;
        if (c != ',' || t->n >= nd->max_items || elem(nd, t->n) < 0) return NO;
        t->phase = A_COMMA; t->ws = 0;
        return TAKE;
    }
    return NO;
}

static int feed_frame(const sk_jg *g, jg_frame *t, int c, int32_t *push) {
    const jg_node *nd = &g->nodes[t->node];
    switch (t->kind) {
    case K_ROOT:
        if (t->phase == R_PRE || t->phase == R_SUF) {
            const char *w = t->phase == R_PRE ? g->pre : g->suf;
            const uint32_t wl = t->phase == R_PRE ? g->pre_len : g->suf_len;
            if ((unsigned char)w[t->n] != c) return NO;
            if (++t->n == wl) { t->phase = t->phase == R_PRE ? R_WS : R_END; t->n = 0; }
            return TAKE;
        }
        if (t->phase != R_WS) return NO;
        if (is_ws(c)) return ws_gap(t);
        t->phase = R_VAL;
        *push = t->node;
        return PUSH;
    case K_OBJ: return feed_obj(nd, t, c, push);
    case K_MAP: return feed_map(nd, t, c, push);
    case K_ARR: return feed_arr(nd, t, c, push);
    case K_STR: return feed_str(nd, t, c);
    case K_NUM: return feed_num(nd, t, c);
    case K_ENUM: return feed_enum(nd, t, c);
    }
    return NO;
}

/* the frame's child value ended */
static void child_done(const sk_jg *g, jg_frame *t) {
    t->ws = 0;
    if (t->kind == K_ROOT) { t->phase = g->suf_len ? R_SUF : R_END; t->n = 0; }
    else if (t->kind == K_ARR) t->phase = A_AFTER;
    else if (t->kind == K_MAP && t->phase == O_KEY) t->phase = O_COLON;
    else t->phase = O_AFTER;
}

/* ------------------------------------------------------------ costs */

/* an object's required properties not yet written: how many, and the bytes of each ("key":value) */
static void required_left(const sk_jg *g, const jg_node *nd, uint64_t seen, uint64_t *r, uint64_t *sum) {
    *r = 0; *sum = 0;
    for (int i = 0; i < nd->n_props; i++)
        if ((nd->req >> i & 1) && !(seen >> i & 1)) { (*r)++; *sum = add(*sum, add(nd->props[i].len + 1, ML(g, nd->props[i].node))); }
}
/* after a value of the object: its remaining required properties, with commas, and the brace */
static uint64_t obj_after(uint64_t r, uint64_t sum) { return r ? add(sum, r + 1) : 1; }

static uint64_t arr_need(const sk_jg *g, const jg_node *nd, uint32_t from, uint32_t to) {
    uint64_t s = 0;
    uint32_t i = from;
    for (; i < to && (int)i < nd->n_prefix; i++) s = add(s, ML(g, nd->prefix[i]));
    if (i < to) s = add(s, ML(g, nd->items) >= JG_INF ? JG_INF : (uint64_t)(to - i) * ML(g, nd->items));
    return s;
}

/* the fewest bytes that end frame t, once the child above it (if any) has ended */
static uint64_t frame_cost(const sk_jg *g, const jg_frame *t) {
    const jg_node *nd = &g->nodes[t->node];
    switch (t->kind) {
    case K_ROOT:
        switch (t->phase) {
        case R_PRE: return add(g->pre_len - t->n, add(nd->minlen, g->suf_len));
        case R_WS: return add(nd->minlen, g->suf_len);
        case R_VAL: return g->suf_len;
        case R_SUF: return g->suf_len - t->n;
        }
        return 0;
    case K_OBJ: {
        uint64_t r, sum;
        required_left(g, nd, t->bits, &r, &sum);
        switch (t->phase) {
        case O_OPEN: return r ? add(sum, r) : 1;
        case O_KEY: {
            uint64_t best = JG_INF;
            for (uint32_t i = t->a; i < t->b; i++) {
                if (t->bits >> i & 1) continue;
                const jg_prop *pr = &nd->props[i];
                const int rq = (int)(nd->req >> i & 1);
                const uint64_t tail = obj_after(r - rq, rq ? sum - add(pr->len + 1, ML(g, pr->node)) : sum);
                best = min64(best, add(pr->len - t->n + 1, add(ML(g, pr->node), tail)));
            }
            return best;
        }
        case O_COLON: return add(1, add(ML(g, nd->props[t->a].node), obj_after(r, sum)));
        case O_VALWS: return add(ML(g, nd->props[t->a].node), obj_after(r, sum));
        case O_VAL: case O_AFTER: return obj_after(r, sum);
        case O_COMMA: {
            if (r) return add(sum, r);
            uint64_t best = JG_INF;
            for (int i = 0; i < nd->n_props; i++)
                if (!(t->bits >> i & 1)) best = min64(best, add(nd->props[i].len + 1, ML(g, nd->props[i].node)));
            return add(best, 1);
        }
        }
        return nd->minlen;
    }
    case K_MAP: {
        const uint64_t mv = ML(g, nd->value);
        switch (t->phase) {
        case O_OPEN: case O_VAL: case O_AFTER: return 1;
        case O_KEY: case O_COLON: return add(mv, 2);
        case O_VALWS: return add(mv, 1);
        case O_COMMA: return add(mv, 4);
        }
        return nd->minlen;
    }
    case K_ARR:
        switch (t->phase) {
        case A_OPEN: return nd->min_items ? add(arr_need(g, nd, 0, nd->min_items), nd->min_items) : 1;
        case A_VAL: case A_AFTER:
            return t->n >= nd->min_items ? 1 : add(arr_need(g, nd, t->n, nd->min_items), nd->min_items - t->n + 1);
        case A_COMMA: {
            const uint32_t m = nd->min_items > t->n + 1 ? nd->min_items : t->n + 1;
            return add(arr_need(g, nd, t->n, m), m - t->n);
        }
        }
        return nd->minlen;
    case K_STR: {
        const uint64_t rest = (nd->min_len > t->n ? nd->min_len - t->n : 0) + 1;
        switch (t->phase) {
        case S_IN: return rest;
        case S_ESC: return rest + 1;
        case S_U: return rest + 4 - t->a;
        case S_UTF8: return rest + t->a;
        }
        return nd->minlen;
    }
    case K_NUM: return num_rest(nd, t);
    case K_ENUM: {
        uint64_t best = JG_INF;
        for (uint32_t i = t->a; i < t->b; i++) best = min64(best, nd->cand_len[i] - t->n);
        return best;
    }
    }
    return JG_INF;
}

static uint64_t stack_cost(const sk_jg *g, const jg_frame *st, int d) {
    uint64_t s = 0;
    for (int i = 0; i < d && s < JG_INF; i++) s = add(s, frame_cost(g, &st[i]));
    return s;
}

static uint64_t state_cost(const sk_jg *g, const jg_state *s) {
    uint64_t best = JG_INF;
    for (int i = 0, off = 0; i < s->ns; off += s->depth[i++]) best = min64(best, stack_cost(g, &s->f[off], s->depth[i]));
    return best;
}

/* ------------------------------------------------------------ feeding a byte */

/* a reading joins the state, unless it is there already or there is no room (a reading
 * dropped leaves fewer choices, never a wrong one) */
static void emit(jg_state *out, const jg_frame *st, int d) {
    if (out->ns >= JG_MAX_STACKS || out->nf + d > JG_MAX_FRAMES) return;
    for (int i = 0, off = 0; i < out->ns; off += out->depth[i++])
        if (out->depth[i] == d && !memcmp(&out->f[off], st, sizeof(jg_frame) * d)) return;
    memcpy(&out->f[out->nf], st, sizeof(jg_frame) * d);
    out->nf += d;
    out->depth[out->ns++] = (uint8_t)d;
}

static void stack_feed(const sk_jg *g, jg_frame *st, int d, int c, jg_state *out);

/* a value of node begins with byte c above st[0..d): one reading per alternative */
static void push_feed(const sk_jg *g, jg_frame *st, int d, int32_t node, int c, jg_state *out) {
    const jg_node *nd = &g->nodes[node];
    if (d >= JG_MAX_DEPTH || nd->minlen >= JG_INF) return;
    if (nd->kind == JG_ALT) {
        jg_frame tmp[JG_MAX_DEPTH];
        for (int k = 0; k < nd->n_alt; k++) {               /* leaves only: no deeper recursion */
            memcpy(tmp, st, sizeof(jg_frame) * d);
            push_feed(g, tmp, d, nd->alt[k], c, out);
        }
        return;
    }
    frame_init(&st[d], node, nd->kind);
    if (nd->kind == JG_ENUM) st[d].b = (uint32_t)nd->n_cand;
    stack_feed(g, st, d + 1, c, out);
}

/* byte c fed to the reading st[0..d) (changed in place); what it becomes joins out */
static void stack_feed(const sk_jg *g, jg_frame *st, int d, int c, jg_state *out) {
    for (;;) {
        int32_t push = -1;
        const int r = feed_frame(g, &st[d - 1], c, &push);
        if (r == TAKE) { emit(out, st, d); return; }
        if (r == NO) return;
        if (r == PUSH) { push_feed(g, st, d, push, c, out); return; }
        d--;                                            /* the value ended: with c (DONE), or before it (PASS) */
        child_done(g, &st[d - 1]);
        if (r == DONE) { emit(out, st, d); return; }
    }
}

static void state_feed(const sk_jg *g, const jg_state *src, int c, jg_state *dst) {
    jg_frame tmp[JG_MAX_DEPTH];
    dst->ns = dst->nf = 0;
    for (int i = 0, off = 0; i < src->ns; off += src->depth[i++]) {
        memcpy(tmp, &src->f[off], sizeof(jg_frame) * src->depth[i]);
        stack_feed(g, tmp, src->depth[i], c, dst);
    }
}

/* readings that can no longer complete leave */
static void state_prune(const sk_jg *g, jg_state *s) {
    int w = 0, wf = 0;
    for (int i = 0, off = 0; i < s->ns; off += s->depth[i++]) {
        const int d = s->depth[i];
        if (stack_cost(g, &s->f[off], d) >= JG_INF) continue;
        memmove(&s->f[wf], &s->f[off], sizeof(jg_frame) * d);
        s->depth[w++] = (uint8_t)d;
        wf += d;
    }
    s->ns = w; s->nf = wf;
}

/* ------------------------------------------------------------ the vocabulary */

/* a trie of byte strings: node 0 is the root; a node's children are a list (child, then sib);
 * head: the first token ending at a node, next: the token after it there */
typedef struct {
    int n_nodes, cap;
    uint8_t *lab;
    int32_t *child, *sib, *head, *next;
    int32_t root_of[256];              /* the root's child for each byte */
} jg_trie;

struct sk_jg_vocab {
    int n, max_len;
    char *blob;                        /* every token's bytes */
    size_t *off;
    uint32_t *len;
    jg_trie all;                       /* every usable token */
    jg_trie other;                     /* those that are not plain */
    /* plain tokens: bytes that go into a JSON string as they are (no quote, backslash or
     * control byte; whole UTF-8 characters): their code points. Inside a string they are
     * checked by counting, without a walk. */
    uint32_t *chars;
    int32_t *plain;
    int n_plain;
};

static int trie_node(jg_trie *t, int parent, uint8_t byte) {
    if (t->n_nodes == t->cap) {
        int nc = t->cap ? 2 * t->cap : 1024;
        uint8_t *l = realloc(t->lab, nc);
        if (l) t->lab = l;
        int32_t *c = realloc(t->child, sizeof(int32_t) * nc);
        if (c) t->child = c;
        int32_t *s = realloc(t->sib, sizeof(int32_t) * nc);
        if (s) t->sib = s;
        int32_t *h = realloc(t->head, sizeof(int32_t) * nc);
        if (h) t->head = h;
        if (!l || !c || !s || !h) return -1;
        t->cap = nc;
    }
    const int k = t->n_nodes++;
    t->lab[k] = byte; t->child[k] = -1; t->head[k] = -1;
    t->sib[k] = parent >= 0 ? t->child[parent] : -1;
    if (parent >= 0) t->child[parent] = k;
    return k;
}

static int trie_init(jg_trie *t, int n) {
    t->next = malloc(sizeof(int32_t) * (n ? n : 1));
    for (int b = 0; b < 256; b++) t->root_of[b] = -1;
    return !t->next || trie_node(t, -1, 0) != 0;
}

static int trie_add(jg_trie *t, const char *bytes, size_t len, int id) {
    int node = 0;
    for (size_t k = 0; k < len; k++) {
        const uint8_t b = (uint8_t)bytes[k];
        int ch = -1;
        if (node == 0) ch = t->root_of[b];
        else for (int c = t->child[node]; c >= 0; c = t->sib[c]) if (t->lab[c] == b) { ch = c; break; }
        if (ch < 0) {
            if ((ch = trie_node(t, node, b)) < 0) return 1;
            if (node == 0) t->root_of[b] = ch;
        }
        node = ch;
    }
    t->next[id] = t->head[node];
    t->head[node] = id;
    return 0;
}

static void trie_free(jg_trie *t) { free(t->lab); free(t->child); free(t->sib); free(t->head); free(t->next); }

/* the code points of a plain token, 0 when it is not plain */
static uint32_t plain_chars(const unsigned char *b, size_t n) {
    uint32_t c = 0;
    for (size_t i = 0; i < n; c++) {
        if (b[i] < 0x20 || b[i] == '"' || b[i] == '\\') return 0;
        if (b[i] < 0x80) { i++; continue; }
        const size_t need = b[i] >= 0xC2 && b[i] <= 0xDF ? 1 : b[i] >= 0xE0 && b[i] <= 0xEF ? 2 : b[i] >= 0xF0 && b[i] <= 0xF4 ? 3 : 0;
        if (!need || i + need >= n) return 0;
        /* the ranges feed_str accepts: no overlong forms, surrogates or code points past U+10FFFF */
        unsigned lo = 0x80, hi = 0xBF;
        if (b[i] == 0xE0) lo = 0xA0; else if (b[i] == 0xED) hi = 0x9F; else if (b[i] == 0xF0) lo = 0x90; else if (b[i] == 0xF4) hi = 0x8F;
        if (b[i + 1] < lo || b[i + 1] > hi) return 0;
        for (size_t k = 2; k <= need; k++) if (b[i + k] < 0x80 || b[i + k] > 0xBF) return 0;
        i += need + 1;
    }
    return c;
}

void sk_jg_vocab_free(sk_jg_vocab *v) {
    if (!v) return;
    free(v->blob); free(v->off); free(v->len); free(v->chars); free(v->plain);
    trie_free(&v->all); trie_free(&v->other);
    free(v);
}

int sk_jg_vocab_size(const sk_jg_vocab *v) { return v->n; }

int sk_jg_vocab_new(sk_jg_vocab **out, int n, const char *const *bytes, const size_t *lens, const unsigned char *usable) {
    *out = NULL;
    sk_jg_vocab *v = calloc(1, sizeof *v);
    if (!v) return sk_error(SK_ENOMEM, "out of memory");
    size_t total = 0;
    for (int i = 0; i < n; i++) total += bytes[i] ? lens[i] : 0;
    v->n = n;
    v->blob = malloc(total ? total : 1);
    v->off = malloc(sizeof(size_t) * (n ? n : 1));
    v->len = malloc(sizeof(uint32_t) * (n ? n : 1));
    v->chars = calloc(n ? n : 1, sizeof(uint32_t));
    v->plain = malloc(sizeof(int32_t) * (n ? n : 1));
    if (!v->blob || !v->off || !v->len || !v->chars || !v->plain || trie_init(&v->all, n) || trie_init(&v->other, n)) {
        sk_jg_vocab_free(v);
        return sk_error(SK_ENOMEM, "out of memory");
    }
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        const int use = bytes[i] && lens[i] && (!usable || usable[i]);
        v->off[i] = o;
        v->len[i] = use ? (uint32_t)lens[i] : 0;
        v->all.next[i] = v->other.next[i] = -1;
        if (!use) continue;
        memcpy(v->blob + o, bytes[i], lens[i]);
        o += lens[i];
        if ((int)lens[i] > v->max_len) v->max_len = (int)lens[i];
        v->chars[i] = plain_chars((const unsigned char *)bytes[i], lens[i]);
        if (v->chars[i]) v->plain[v->n_plain++] = i;
        if (trie_add(&v->all, bytes[i], lens[i], i) || (!v->chars[i] && trie_add(&v->other, bytes[i], lens[i], i))) {
            sk_jg_vocab_free(v);
            return sk_error(SK_ENOMEM, "out of memory");
        }
    }
    *out = v;
    return 0;
}

int sk_jg_vocab_from_tok(sk_jg_vocab **out, const sk_tokenizer *tok, int n) {
    const int nt = sk_tok_vocab_size(tok) < n ? sk_tok_vocab_size(tok) : n;
    const char **bytes = calloc(n ? n : 1, sizeof *bytes);
    size_t *lens = calloc(n ? n : 1, sizeof *lens);
    if (!bytes || !lens) { free(bytes); free(lens); return sk_error(SK_ENOMEM, "out of memory"); }
    for (int i = 0; i < nt; i++) {
        if (sk_tok_is_special(tok, i)) continue;
        bytes[i] = sk_tok_decode_one(tok, i, &lens[i]);
    }
    int rc = sk_jg_vocab_new(out, n, bytes, lens, NULL);
    free(bytes); free(lens);
    return rc;
}

/* ------------------------------------------------------------ the matcher */

struct sk_jg_match {
    const sk_jg *g;
    const sk_jg_vocab *v;
    jg_state *cur, *tmp[2];
    jg_state **lv;                     /* the walk's state at each trie depth (made when first reached) */
    uint64_t *tcost;                   /* each token's cost in a walk */
};

void sk_jg_match_free(sk_jg_match *m) {
    if (!m) return;
    for (int i = 0; m->lv && i <= m->v->max_len; i++) free(m->lv[i]);
    free(m->lv); free(m->cur); free(m->tmp[0]); free(m->tmp[1]); free(m->tcost);
    free(m);
}

sk_jg_match *sk_jg_match_new(const sk_jg *g, const sk_jg_vocab *v) {
    sk_jg_match *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->g = g; m->v = v;
    m->cur = malloc(sizeof(jg_state));
    m->tmp[0] = malloc(sizeof(jg_state));
    m->tmp[1] = malloc(sizeof(jg_state));
    m->lv = calloc((size_t)v->max_len + 1, sizeof *m->lv);
    m->tcost = malloc(sizeof(uint64_t) * (v->n ? v->n : 1));
    if (!m->cur || !m->tmp[0] || !m->tmp[1] || !m->lv || !m->tcost) { sk_jg_match_free(m); return NULL; }
    m->cur->ns = 1; m->cur->nf = 1; m->cur->depth[0] = 1;
    memset(&m->cur->f[0], 0, sizeof(jg_frame));
    m->cur->f[0].node = g->root;
    m->cur->f[0].kind = K_ROOT;
    m->cur->f[0].phase = g->pre_len ? R_PRE : R_WS;
    return m;
}

int sk_jg_match_feed(sk_jg_match *m, const char *bytes, size_t n) {
    const jg_state *s = m->cur;
    for (size_t i = 0; i < n; i++) {
        jg_state *t = m->tmp[i & 1];
        state_feed(m->g, s, (unsigned char)bytes[i], t);
        if (!t->ns) return 1;
        s = t;
    }
    if (!n) return 0;
    jg_state *t = (jg_state *)s;
    state_prune(m->g, t);
    if (!t->ns) return 1;
    memcpy(m->cur, t, state_size(t));
    return 0;
}

int sk_jg_match_feed_token(sk_jg_match *m, int32_t id) {
    if (id < 0 || id >= m->v->n || !m->v->len[id]) return 1;
    return sk_jg_match_feed(m, m->v->blob + m->v->off[id], m->v->len[id]);
}

size_t sk_jg_match_cost(const sk_jg_match *m) { return (size_t)state_cost(m->g, m->cur); }
int sk_jg_match_complete(const sk_jg_match *m) { return state_cost(m->g, m->cur) == 0; }
int sk_jg_match_done(const sk_jg_match *m) {
    const jg_state *s = m->cur;
    return s->ns == 1 && s->depth[0] == 1 && s->f[0].phase == R_END;
}

static int walk(sk_jg_match *m, const jg_trie *tr, int node, int d) {
    const jg_state *s = d ? m->lv[d] : m->cur;
    if (!m->lv[d + 1] && !(m->lv[d + 1] = malloc(sizeof(jg_state)))) return 1;
    jg_state *t = m->lv[d + 1];
    for (int ch = tr->child[node]; ch >= 0; ch = tr->sib[ch]) {
        state_feed(m->g, s, tr->lab[ch], t);
        if (!t->ns) continue;
        if (tr->head[ch] >= 0) {
            const uint64_t c = state_cost(m->g, t);
            for (int tok = tr->head[ch]; tok >= 0; tok = tr->next[tok]) m->tcost[tok] = c;
        }
        if (tr->child[ch] >= 0 && walk(m, tr, ch, d + 1)) return 1;
    }
    return 0;
}

/* inside a string (one reading, no character half written): each plain token's cost by
 * counting its code points; 1 when this does not apply */
static int plain_costs(sk_jg_match *m) {
    const jg_state *s = m->cur;
    const jg_frame *t = &s->f[s->nf - 1];
    if (s->ns != 1 || t->kind != K_STR || t->phase != S_IN) return 1;
    const jg_node *nd = &m->g->nodes[t->node];
    const uint64_t below = stack_cost(m->g, s->f, s->nf - 1);
    const sk_jg_vocab *v = m->v;
    for (int i = 0; i < v->n_plain; i++) {
        const int tok = v->plain[i];
        const uint64_t n = (uint64_t)t->n + v->chars[tok];
        if (n > nd->max_len) continue;
        m->tcost[tok] = add(below, (nd->min_len > n ? nd->min_len - n : 0) + 1);
    }
    return 0;
}

int sk_jg_match_mask(sk_jg_match *m, unsigned char *allow, long budget) {
    const int n = m->v->n;
    memset(allow, 0, (size_t)n);
    if (budget == 0) return 0;
    for (int i = 0; i < n; i++) m->tcost[i] = JG_INF;
    if (plain_costs(m) ? walk(m, &m->v->all, 0, 0) : walk(m, &m->v->other, 0, 0)) return -1;
    const uint64_t limit = budget < 0 ? JG_INF - 1 : (uint64_t)(budget - 1);
    uint64_t best = JG_INF;
    int count = 0;
    for (int i = 0; i < n; i++) {
        if (m->tcost[i] < best) best = m->tcost[i];
        if (m->tcost[i] <= limit) { allow[i] = 1; count++; }
    }
    if (!count && best < JG_INF)                        /* nothing completes in time: what comes closest */
        for (int i = 0; i < n; i++) if (m->tcost[i] == best) { allow[i] = 1; count++; }
    return count;
}
