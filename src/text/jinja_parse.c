/* Jinja parser: tokens to the template's AST, with jinja2's grammar and precedence; the entry
 * points sk_jinja_parse and sk_jinja_free. See jinja_internal.h. */
#include "text/jinja_internal.h"

#include <stdio.h>
#include <stdlib.h>

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
    jj_perr(p, cur(p)->line, "expected %s, got %s", want, tokdesc(cur(p), b, sizeof b));
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
static node *nn(P *p, int k, int line) { node *x = jj_palloc(p, sizeof *x); x->k = k; x->line = line; return x; }
static void enter(P *p) { if (++p->depth > MAX_DEPTH) jj_perr(p, cur(p)->line, "template nested too deep (limit %d)", MAX_DEPTH); }

/* growable node lists, built in the arena */
typedef struct { node **v; const char **kw; int n, cap; } nlist;
static void npush(P *p, nlist *l, node *x, const char *kw) {
    if (l->n == l->cap) {
        int nc = l->cap ? l->cap * 2 : 4;
        node **v = jj_palloc(p, (size_t)nc * sizeof *v);
        const char **k = jj_palloc(p, (size_t)nc * sizeof *k);
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
        if (is_op(cur(p), "*") || is_op(cur(p), "**")) jj_perr(p, cur(p)->line, "*args and **kwargs in calls are not supported");
        if (cur(p)->k == K_NAME && is_op(peekt(p, 1), "=")) {
            const char *k = cur(p)->s;
            adv(p); adv(p);
            npush(p, l, p_cond(p), k);
            kw_seen = 1;
        } else {
            if (kw_seen) jj_perr(p, cur(p)->line, "positional argument follows keyword argument");
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
        char *d = jj_palloc(p, la + lb + 2);
        memcpy(d, nm, la); d[la] = '.'; memcpy(d + la + 1, b, lb);
        nm = d;
    }
    return nm;
}

static node *p_filter(P *p, node *x) {   /* at '|' */
    int line = cur(p)->line;
    adv(p);
    const char *nm = dotted_name(p);
    if (!jj_in_list(jj_filters, nm)) jj_perr(p, line, "no filter named '%s'", nm);
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
    if (!jj_in_list(jj_tests, nm)) jj_perr(p, line, "no test named '%s'", nm);
    node *t = nn(p, E_TEST, line);
    t->a = x; t->s = nm; t->op = neg;
    nlist l = {0};
    tok *c = cur(p);
    if (is_op(c, "(")) { adv(p); p_args(p, &l); }
    else if ((c->k == K_NAME || c->k == K_STR || c->k == K_INT || c->k == K_FLOAT || is_op(c, "(") || is_op(c, "[") || is_op(c, "{")) &&
             !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) jj_perr(p, line, "you cannot chain multiple tests with is");
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
            if (is_op(cur(p), ",")) jj_perr(p, t->line, "tuple subscripts are not supported");
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
    obj *o = jj_palloc(p, sizeof *o);
    o->rc = -1; o->t = T_STR;
    o->s = jj_palloc(p, n + 1);
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
        char *buf = jj_palloc(p, n + 1);
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
        if (n == MAX_ARGS) jj_perr(p, t->line, "comparison chain too long");
        adv(p);
        ops[n++] = op;
        npush(p, &l, p_add(p), NULL);
    }
    if (!n) return x;
    node *c = nn(p, E_CMP, line);
    c->a = x; nset(c, &l);
    c->ops = jj_palloc(p, (size_t)n * sizeof(int));
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
        if (is_name(cur(p), "recursive")) jj_perr(p, line, "recursive loops are not supported");
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
            if (tg->k != E_NAME) jj_perr(p, line, "a block set assigns to one name");
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
        if (!p->loops) jj_perr(p, line, "'%s' outside a loop", nm);
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
        jj_perr(p, line, "'%s' tags are not supported", nm);
    } else jj_perr(p, line, "unknown tag '%s'", nm);
    return x;
}

static node *p_body(P *p, const char *const *ends) {
    node *x = nn(p, S_LIST, cur(p)->line);
    nlist l = {0};
    enter(p);
    for (;;) {
        tok *t = cur(p);
        if (t->k == K_EOF) {
            if (ends) { int k = 0; while (ends[k + 1]) k++; jj_perr(p, t->line, "unexpected end of template: expected '%s'", ends[k]); }
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
            if (ends && jj_in_list(ends, nt->s)) { adv(p); break; }
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
    char *s = jj_palloc(p, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') { s[n++] = '\n'; if (i + 1 < len && src[i + 1] == '\n') i++; }
        else s[n++] = src[i];
    }
    if (n && s[n - 1] == '\n') n--;
    jj_lex(p, s, n);
    p->t->root = p_body(p, NULL);
    return 0;
}

int sk_jinja_parse(sk_jinja **out, const char *src, size_t len, char *err, size_t errlen) {
    *out = NULL;
    if (err && errlen) err[0] = 0;
    size_t bad;
    if (!sk_utf8_valid(src, len, &bad)) {
        if (err && errlen) snprintf(err, errlen, "line %d: template is not valid UTF-8", 1 + jj_lines_in(src, 0, bad));
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

