/* Jinja evaluation: str, dict and list methods, globals and macro calls, expressions,
 * statements, and the entry point sk_jinja_render. See jinja_internal.h. */
#include "text/jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static val eval(R *r, const node *x);
static void exec(R *r, const node *x);

/* ---------------------------------------------------------------- arguments */

static obj *eval_args(R *r, const node *x, args *a) {
    obj *h = jj_lnew(r, 0);
    for (int i = 0; i < x->n; i++) jj_lpush(r, h, eval(r, x->kv[i]));
    a->n = x->n; a->v = h->v; a->kw = x->kw; a->np = 0;
    while (a->np < a->n && !a->kw[a->np]) a->np++;
    return h;
}

/* ---------------------------------------------------------------- methods and globals */

static int starts_ends(R *r, val s, val *pre, int ends) {
    if (!pre) jj_die(r, "%s() takes at least 1 argument", ends ? "endswith" : "startswith");
    if (pre->t == T_LIST && pre->u.o->flag) {
        for (int i = 0; i < pre->u.o->n; i++) if (starts_ends(r, s, &pre->u.o->v[i], ends)) return 1;
        return 0;
    }
    if (pre->t != T_STR) jj_die(r, "%s first arg must be str or a tuple of str, not %s", ends ? "endswith" : "startswith", jj_tname(*pre));
    size_t n = s.u.o->len, k = pre->u.o->len;
    return k <= n && !memcmp(s.u.o->s + (ends ? n - k : 0), pre->u.o->s, k);
}
static val str_format(R *r, val s, args *a) {
    obj *o = jj_snew(r);
    const char *p = s.u.o->s;
    size_t n = s.u.o->len;
    int autoi = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '}' ) { if (i + 1 < n && p[i + 1] == '}') i++; else jj_die(r, "Single '}' encountered in format string"); jj_sputc(r, o, '}'); continue; }
        if (p[i] != '{') { jj_sputc(r, o, p[i]); continue; }
        if (i + 1 < n && p[i + 1] == '{') { jj_sputc(r, o, '{'); i++; continue; }
        size_t j = i + 1;
        while (j < n && p[j] != '}') j++;
        if (j >= n) jj_die(r, "Single '{' encountered in format string");
        const char *f = p + i + 1;
        size_t fl = j - i - 1;
        if (memchr(f, ':', fl) || memchr(f, '!', fl) || memchr(f, '.', fl) || memchr(f, '[', fl)) jj_die(r, "str.format specs and conversions are not supported");
        val *v = NULL;
        if (!fl) v = jj_argp(a, autoi++, NULL);
        else if (cp_digit((unsigned char)f[0])) v = jj_argp(a, atoi(f), NULL);
        else {
            char k[128];
            snprintf(k, sizeof k, "%.*s", (int)(fl < 127 ? fl : 127), f);
            v = jj_argp(a, -1, k);
        }
        if (!v) jj_die(r, "str.format: missing argument for field '%.*s'", (int)(fl < 64 ? fl : 64), f);
        val t = jj_to_str(r, *v);
        jj_sput(r, o, t.u.o->s, t.u.o->len);
        jj_unref(r, t);
        i = j;
    }
    return sval(o);
}
static const char *const UNSAFE[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update",
                                     "popitem", "setdefault", "add", "discard", NULL};
/* o.nm(args); 0 if o has no such method */
static int call_method(R *r, val o, const char *nm, args *a, val *out) {
    val *a0 = jj_argp(a, 0, NULL);
    if (o.t == T_STR) {
        const char *p = o.u.o->s;
        size_t n = o.u.o->len;
        if (!strcmp(nm, "strip")) *out = jj_str_strip(r, o, a0, 3);
        else if (!strcmp(nm, "lstrip")) *out = jj_str_strip(r, o, a0, 1);
        else if (!strcmp(nm, "rstrip")) *out = jj_str_strip(r, o, a0, 2);
        else if (!strcmp(nm, "split")) *out = jj_str_split(r, o, jj_argp(a, 0, "sep"), jj_arg_int(r, a, 1, "maxsplit", -1));
        else if (!strcmp(nm, "startswith")) *out = vbool(starts_ends(r, o, a0, 0));
        else if (!strcmp(nm, "endswith")) *out = vbool(starts_ends(r, o, a0, 1));
        else if (!strcmp(nm, "upper")) *out = jj_casemap(r, p, n, C_UPPER);
        else if (!strcmp(nm, "lower")) *out = jj_casemap(r, p, n, C_LOWER);
        else if (!strcmp(nm, "title")) *out = jj_casemap(r, p, n, C_TITLE);
        else if (!strcmp(nm, "capitalize")) *out = jj_casemap(r, p, n, C_CAPITALIZE);
        else if (!strcmp(nm, "swapcase")) *out = jj_casemap(r, p, n, C_SWAP);
        else if (!strcmp(nm, "replace")) {
            val *b = jj_argp(a, 1, NULL);
            if (!a0 || !b) jj_die(r, "replace() takes at least 2 arguments");
            *out = jj_str_replace(r, o, *a0, *b, jj_arg_int(r, a, 2, "count", -1));
        } else if (!strcmp(nm, "find") || !strcmp(nm, "rfind") || !strcmp(nm, "count") || !strcmp(nm, "index")) {
            if (!a0 || a0->t != T_STR) jj_die(r, "%s() needs a string argument", nm);
            const char *q = a0->u.o->s;
            size_t k = a0->u.o->len, at = (size_t)-1, c = 0;
            if (nm[0] == 'c') {
                if (!k) c = jj_cplen(p, n) + 1;
                else for (size_t i = 0; (i = jj_find_bytes(r, p, n, q, k, i)) != (size_t)-1; i += k) c++;
                *out = vint((int64_t)c);
            } else {
                if (nm[0] == 'r') { for (size_t i = 0; (i = jj_find_bytes(r, p, n, q, k, i)) != (size_t)-1; i++) { at = i; if (i >= n) break; } }
                else at = jj_find_bytes(r, p, n, q, k, 0);
                if (at == (size_t)-1 && nm[0] == 'i') jj_die(r, "substring not found");
                *out = vint(at == (size_t)-1 ? -1 : (int64_t)jj_cplen(p, at));
            }
        } else if (!strcmp(nm, "join")) {
            if (!a0) jj_die(r, "join() takes exactly one argument");
            obj *l = jj_to_list(r, *a0), *b = jj_snew(r);
            for (int i = 0; i < l->n; i++) {
                if (l->v[i].t != T_STR) jj_die(r, "sequence item %d: expected str instance, %s found", i, jj_tname(l->v[i]));
                if (i) jj_sput(r, b, p, n);
                jj_sput(r, b, l->v[i].u.o->s, l->v[i].u.o->len);
            }
            jj_unref(r, lval(l));
            *out = sval(b);
        } else if (!strcmp(nm, "format")) *out = str_format(r, o, a);
        else if (!strcmp(nm, "splitlines")) *out = jj_splitlines(r, p, n, jj_arg_bool(a, 0, "keepends", 0));
        else if (!strcmp(nm, "removeprefix") || !strcmp(nm, "removesuffix")) {
            int suf = nm[6] == 's';
            if (!a0 || a0->t != T_STR) jj_die(r, "%s() needs a string argument", nm);
            size_t k = a0->u.o->len;
            if (starts_ends(r, o, a0, suf)) *out = jj_vstrn(r, p + (suf ? 0 : k), n - k);
            else *out = ref(o);
        } else if (!strncmp(nm, "is", 2) && (!strcmp(nm + 2, "digit") || !strcmp(nm + 2, "alpha") || !strcmp(nm + 2, "alnum") ||
                                             !strcmp(nm + 2, "space") || !strcmp(nm + 2, "upper") || !strcmp(nm + 2, "lower") ||
                                             !strcmp(nm + 2, "numeric") || !strcmp(nm + 2, "decimal"))) {
            if (!strcmp(nm, "isupper") || !strcmp(nm, "islower")) { *out = vbool(jj_test(r, nm + 2, o, a)); return 1; }
            int ok = n > 0;
            for (size_t i = 0; i < n && ok;) {
                uint32_t c = u8dec(p, n, &i);
                switch (nm[2]) {
                case 'd': case 'n': ok = cp_digit(c); break;
                case 's': ok = jj_cp_space(c); break;
                default: ok = jj_cp_alpha(c) || (nm[4] == 'n' && cp_digit(c)); break;
                }
            }
            *out = vbool(ok);
        } else return 0;
        return 1;
    }
    if (o.t == T_DICT && !o.u.o->flag) {
        obj *d = o.u.o;
        if (!strcmp(nm, "items")) *out = lval(jj_dict_items(r, d));
        else if (!strcmp(nm, "keys") || !strcmp(nm, "values")) {
            obj *l = jj_lnew(r, 0);
            for (int i = 0; i < d->n; i++) jj_lpush(r, l, ref(nm[0] == 'k' ? d->k[i] : d->v[i]));
            *out = lval(l);
        } else if (!strcmp(nm, "get")) {
            if (!a0) jj_die(r, "get expected at least 1 argument");
            val *v = jj_dget(r, d, *a0), *dv = jj_argp(a, 1, NULL);
            *out = v ? ref(*v) : dv ? ref(*dv) : mk(T_NONE);
        } else if (jj_in_list(UNSAFE, nm)) jj_die(r, "access to attribute '%s' of 'dict' object is unsafe.", nm);
        else return 0;
        return 1;
    }
    if (o.t == T_LIST) {
        if (!strcmp(nm, "index") || !strcmp(nm, "count")) {
            if (!a0) jj_die(r, "%s() takes exactly one argument", nm);
            int64_t c = 0;
            for (int i = 0; i < o.u.o->n; i++)
                if (jj_eq(r, o.u.o->v[i], *a0, 0)) { if (nm[0] == 'i') { *out = vint(i); return 1; } c++; }
            if (nm[0] == 'i') jj_die(r, "value is not in list");
            *out = vint(c);
        } else if (jj_in_list(UNSAFE, nm)) jj_die(r, "access to attribute '%s' of '%s' object is unsafe.", nm, jj_tname(o));
        else return 0;
        return 1;
    }
    if (o.t == T_LOOP && !strcmp(nm, "cycle")) {
        if (!a->np) jj_die(r, "no items for cycling given");
        *out = ref(a->v[o.u.o->idx % a->np]);
        return 1;
    }
    return 0;
}

static const char *const GLOBALS[] = {"range", "namespace", "raise_exception", "strftime_now", "dict", NULL};
enum { G_RANGE, G_NAMESPACE, G_RAISE, G_STRFTIME, G_DICT };

static val call_macro(R *r, const node *m, args *a) {
    if (++r->mdepth > MAX_DEPTH) jj_die(r, "macro calls nested too deep (limit %d)", MAX_DEPTH);
    if (++r->iters > MAX_ITERS) jj_die(r, "loop iteration limit exceeded (10 million, macro calls included)");
    scope fr = {jj_dnew(r), r->root}, *save = r->sc;
    r->sc = &fr;
    for (int i = 0; i < m->n; i++) {
        val *v = jj_argp(a, i, m->kw[i]);
        val x = v ? ref(*v) : m->kv[i] ? eval(r, m->kv[i]) : jj_undef(r, "'%s' is undefined", m->kw[i]);
        jj_dset_s(r, fr.vars, m->kw[i], x);
    }
    obj *va = jj_lnew(r, 1), *kw = jj_dnew(r);
    for (int i = m->n; i < a->np; i++) jj_lpush(r, va, ref(a->v[i]));
    for (int i = a->np; i < a->n; i++) {
        int param = 0;
        for (int j = 0; j < m->n && !param; j++) param = !strcmp(m->kw[j], a->kw[i]);
        if (!param) jj_dset_s(r, kw, a->kw[i], ref(a->v[i]));
    }
    jj_dset_s(r, fr.vars, "varargs", lval(va));
    jj_dset_s(r, fr.vars, "kwargs", lval(kw));
    size_t mark = r->out->len;
    exec(r, m->d);
    val res = jj_vstrn(r, r->out->s + mark, r->out->len - mark);
    r->out->len = mark; r->out->s[mark] = 0;
    r->sc = save;
    jj_unref(r, lval(fr.vars));
    r->mdepth--;
    return res;
}
static NORETURN void raise_(R *r, args *a) {
    val m = a->n ? jj_to_str(r, a->v[0]) : jj_vstr(r, "");
    if (r->err && r->errlen) snprintf(r->err, r->errlen, "%s", m.u.o->s);
    longjmp(r->jb, 1);
}
static val call_value(R *r, val fn, args *a) {
    if (fn.t == T_MACRO) return call_macro(r, fn.u.m, a);
    if (fn.t == T_UNDEF) jj_undef_fail(r, fn);
    if (fn.t != T_FUNC) jj_die(r, "'%s' object is not callable", jj_tname(fn));
    switch (fn.u.i) {
    case G_RANGE: {
        int64_t st = 0, sp, step = 1;
        for (int i = 0; i < a->np; i++) if (!isint(a->v[i])) jj_die(r, "range() arguments must be integers, not %s", jj_tname(a->v[i]));
        if (a->np == 1) sp = a->v[0].u.i;
        else if (a->np == 2 || a->np == 3) { st = a->v[0].u.i; sp = a->v[1].u.i; if (a->np == 3) step = a->v[2].u.i; }
        else jj_die(r, "range expected 1 to 3 arguments, got %d", a->np);
        if (!step) jj_die(r, "range() arg 3 must not be zero");
        double cnt = step > 0 ? ((double)sp - (double)st) / (double)step : ((double)st - (double)sp) / (double)-step;
        if (ceil(cnt) > MAX_RANGE) jj_die(r, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MAX_RANGE);
        obj *l = jj_lnew(r, 0);
        for (int64_t i = st; step > 0 ? i < sp : i > sp; i += step) jj_lpush(r, l, vint(i));
        return lval(l);
    }
    case G_NAMESPACE: case G_DICT: {
        obj *d = jj_dnew(r);
        d->flag = fn.u.i == G_NAMESPACE;
        if (a->np > 1) jj_die(r, "expected at most 1 positional argument");
        if (a->np == 1) {
            val m = a->v[0];
            if (m.t == T_DICT) for (int i = 0; i < m.u.o->n; i++) jj_dset(r, d, ref(m.u.o->k[i]), ref(m.u.o->v[i]));
            else if (m.t == T_LIST) {
                for (int i = 0; i < m.u.o->n; i++) {
                    val p = m.u.o->v[i];
                    if (p.t != T_LIST || p.u.o->n != 2) jj_die(r, "dictionary update sequence element has the wrong length");
                    jj_dset(r, d, ref(p.u.o->v[0]), ref(p.u.o->v[1]));
                }
            } else jj_die(r, "'%s' object is not iterable", jj_tname(m));
        }
        for (int i = a->np; i < a->n; i++) jj_dset_s(r, d, a->kw[i], ref(a->v[i]));
        return lval(d);
    }
    case G_RAISE: raise_(r, a);
    case G_STRFTIME: {
        if (!a->n || a->v[0].t != T_STR) jj_die(r, "strftime_now needs a format string");
        struct tm tm;
        time_t now = r->now;
        if (!localtime_r(&now, &tm)) jj_die(r, "strftime_now: time out of range");
        if (!a->v[0].u.o->len || strlen(a->v[0].u.o->s) != a->v[0].u.o->len) return jj_vstr(r, "");
        obj *o = jj_snew(r);
        for (size_t cap = 64; cap <= 65536; cap *= 4) {
            jj_sgrow(r, o, cap);
            size_t k = strftime(o->s, cap, a->v[0].u.o->s, &tm);
            if (k) { o->len = k; break; }
        }
        return sval(o);
    }
    }
    jj_die(r, "bad builtin");
}

/* ---------------------------------------------------------------- evaluation */

static val lookup(R *r, const char *nm) {
    size_t n = strlen(nm);
    for (scope *s = r->sc; s; s = s->up) { val *v = jj_dfind(s->vars, nm, n); if (v) return ref(*v); }
    val *v = jj_dfind(r->ctx, nm, n);
    if (v) return ref(*v);
    for (int i = 0; GLOBALS[i]; i++) if (!strcmp(GLOBALS[i], nm)) { val f = mk(T_FUNC); f.u.i = i; return f; }
    return jj_undef(r, "'%s' is undefined", nm);
}
static val call(R *r, const node *x) {
    const node *f = x->a;
    args a;
    val fn, res;
    if (f->k == E_ATTR) {
        val recv = eval(r, f->a);
        obj *h = eval_args(r, x, &a);
        if (call_method(r, recv, f->s, &a, &res)) { jj_unref(r, recv); jj_unref(r, lval(h)); return res; }
        fn = jj_getattr(r, recv, f->s, f->sl);
        jj_unref(r, recv);
        res = call_value(r, fn, &a);
        jj_unref(r, fn); jj_unref(r, lval(h));
        return res;
    }
    fn = eval(r, f);
    obj *h = eval_args(r, x, &a);
    res = call_value(r, fn, &a);
    jj_unref(r, fn); jj_unref(r, lval(h));
    return res;
}
static int compare(R *r, int op, val a, val b) {
    switch (op) {
    case 'E': return jj_eq(r, a, b, 0);
    case 'N': return !jj_eq(r, a, b, 0);
    case '<': return jj_cmp(r, a, b, "<", 0) < 0;
    case 'L': return jj_cmp(r, a, b, "<=", 0) <= 0;
    case '>': return jj_cmp(r, a, b, ">", 0) > 0;
    case 'G': return jj_cmp(r, a, b, ">=", 0) >= 0;
    case 'I': return jj_contains(r, b, a);
    default: return !jj_contains(r, b, a);
    }
}
static val eval(R *r, const node *x) {
    if (++r->depth > MAX_EVAL_DEPTH) jj_die(r, "evaluation nested too deep (limit %d)", MAX_EVAL_DEPTH);
    int line = r->line;
    r->line = x->line;
    val v, a, b;
    switch (x->k) {
    case E_CONST: v = ref(x->v); break;
    case E_NAME: v = lookup(r, x->s); break;
    case E_ATTR: a = eval(r, x->a); v = jj_getattr(r, a, x->s, x->sl); jj_unref(r, a); break;
    case E_ITEM: a = eval(r, x->a); b = eval(r, x->b); v = jj_getitem(r, a, b); jj_unref(r, a); jj_unref(r, b); break;
    case E_SLICE: {
        obj *h = jj_lnew(r, 0);
        for (int i = 0; i < 3; i++) jj_lpush(r, h, (i == 0 ? x->b : i == 1 ? x->c : x->d) ? eval(r, i == 0 ? x->b : i == 1 ? x->c : x->d) : mk(T_NONE));
        a = eval(r, x->a);
        v = jj_slice(r, a, h->v);
        jj_unref(r, a); jj_unref(r, lval(h));
        break;
    }
    case E_CALL: v = call(r, x); break;
    case E_FILTER: case E_TEST: {
        args ar;
        a = eval(r, x->a);
        obj *h = eval_args(r, x, &ar);
        v = x->k == E_FILTER ? jj_filter(r, x->s, a, &ar) : vbool(jj_test(r, x->s, a, &ar) ^ x->op);
        jj_unref(r, a); jj_unref(r, lval(h));
        break;
    }
    case E_NEG: case E_POS:
        a = eval(r, x->a);
        if (a.t == T_UNDEF) jj_undef_fail(r, a);
        if (isint(a)) { if (x->k == E_NEG && a.u.i == INT64_MIN) jj_die(r, "integer overflow (ints are 64-bit here)"); v = vint(x->k == E_NEG ? -a.u.i : a.u.i); }
        else if (a.t == T_FLOAT) v = vflt(x->k == E_NEG ? -a.u.f : a.u.f);
        else jj_die(r, "bad operand type for unary %c: '%s'", x->k == E_NEG ? '-' : '+', jj_tname(a));
        break;
    case E_NOT: a = eval(r, x->a); v = vbool(!jj_truthy(a)); jj_unref(r, a); break;
    case E_BIN: a = eval(r, x->a); b = eval(r, x->b); v = jj_arith(r, x->op, a, b); jj_unref(r, a); jj_unref(r, b); break;
    case E_AND: case E_OR:
        v = eval(r, x->a);
        if (jj_truthy(v) == (x->k == E_AND)) { jj_unref(r, v); v = eval(r, x->b); }
        break;
    case E_CMP: {
        int ok = 1;
        a = eval(r, x->a);
        for (int i = 0; i < x->n && ok; i++) {
            b = eval(r, x->kv[i]);
            ok = compare(r, x->ops[i], a, b);
            jj_unref(r, a);
            a = b;
        }
        jj_unref(r, a);
        v = vbool(ok);
        break;
    }
    case E_COND:
        a = eval(r, x->a);
        if (jj_truthy(a)) v = eval(r, x->b);
        else if (x->c) v = eval(r, x->c);
        else v = jj_undef(r, "the inline if-expression on line %d evaluated to false and no else section was defined.", x->line);
        jj_unref(r, a);
        break;
    case E_LIST: case E_TUPLE: {
        obj *l = jj_lnew(r, x->k == E_TUPLE);
        for (int i = 0; i < x->n; i++) jj_lpush(r, l, eval(r, x->kv[i]));
        v = lval(l);
        break;
    }
    case E_DICT: {
        obj *d = jj_dnew(r);
        for (int i = 0; i + 1 < x->n; i += 2) {
            a = eval(r, x->kv[i]);
            if (a.t == T_LIST && !a.u.o->flag) jj_die(r, "unhashable type: 'list'");
            if (a.t == T_DICT) jj_die(r, "unhashable type: 'dict'");
            jj_dset(r, d, a, eval(r, x->kv[i + 1]));
        }
        v = lval(d);
        break;
    }
    case E_BLOCKVAL: v = ref(r->blockval); break;
    default: jj_die(r, "bad expression");
    }
    r->line = line;
    r->depth--;
    return v;
}

/* ---------------------------------------------------------------- statements */

static void assign(R *r, const node *tg, val v) {   /* takes ownership of v */
    if (tg->k == E_NAME) { jj_dset_s(r, r->sc->vars, tg->s, v); return; }
    if (tg->k == E_ATTR) {
        val ns = eval(r, tg->a);
        if (ns.t != T_DICT || !ns.u.o->flag) jj_die(r, "cannot assign attribute on non-namespace object");
        jj_dset_s(r, ns.u.o, tg->s, v);
        jj_unref(r, ns);
        return;
    }
    obj *l = jj_to_list(r, v);
    if (l->n != tg->n) {
        if (l->n > tg->n) jj_die(r, "too many values to unpack (expected %d)", tg->n);
        jj_die(r, "not enough values to unpack (expected %d, got %d)", tg->n, l->n);
    }
    for (int i = 0; i < tg->n; i++) assign(r, tg->kv[i], ref(l->v[i]));
    jj_unref(r, lval(l));
    jj_unref(r, v);
}
static void exec_for(R *r, const node *x) {
    val it = eval(r, x->b);
    obj *items = jj_to_list(r, it);
    jj_unref(r, it);
    if (x->c) {
        obj *f = jj_lnew(r, 0);
        for (int i = 0; i < items->n; i++) {
            if (++r->iters > MAX_ITERS) jj_die(r, "loop iteration limit exceeded (10 million)");
            scope fr = {jj_dnew(r), r->sc};
            r->sc = &fr;
            assign(r, x->a, ref(items->v[i]));
            val c = eval(r, x->c);
            r->sc = fr.up;
            jj_unref(r, lval(fr.vars));
            if (jj_truthy(c)) jj_lpush(r, f, ref(items->v[i]));
            jj_unref(r, c);
        }
        jj_unref(r, lval(items));
        items = f;
    }
    obj *L = jj_onew(r, T_LOOP);
    L->ref = items; L->n = items->n;
    /* one frame for the loop, emptied before each iteration (no allocation per iteration) */
    scope fr = {jj_dnew(r), r->sc};
    val lk = jj_vstr(r, "loop"), tk = x->a->k == E_NAME ? jj_vstr(r, x->a->s) : mk(T_NONE);
    for (int i = 0; i < items->n; i++) {
        if (++r->iters > MAX_ITERS) jj_die(r, "loop iteration limit exceeded (10 million)");
        L->idx = i;
        obj *d = fr.vars;
        while (d->n) { d->n--; val k = d->k[d->n], v = d->v[d->n]; jj_unref(r, k); jj_unref(r, v); }
        r->sc = &fr;
        if (tk.t == T_STR) jj_dset(r, d, ref(tk), ref(items->v[i]));
        else assign(r, x->a, ref(items->v[i]));
        jj_dset(r, d, ref(lk), ref(lval(L)));
        exec(r, x->d);
        r->sc = fr.up;
        if (r->brk) { int b = r->brk; r->brk = 0; if (b == 1) break; }
    }
    jj_unref(r, lval(fr.vars));
    jj_unref(r, lk);
    jj_unref(r, tk);
    if (!items->n && x->e) exec(r, x->e);
    jj_unref(r, lval(L));
}
/* renders body x->d, applies the filter chain x->b to it */
static val block_value(R *r, const node *x) {
    size_t mark = r->out->len;
    exec(r, x->d);
    val s = jj_vstrn(r, r->out->s + mark, r->out->len - mark);
    r->out->len = mark; r->out->s[mark] = 0;
    val save = r->blockval;
    r->blockval = s;
    val v = eval(r, x->b);
    r->blockval = save;
    jj_unref(r, s);
    return v;
}
static void exec(R *r, const node *x) {
    if (!x) return;
    if (++r->depth > MAX_EVAL_DEPTH) jj_die(r, "evaluation nested too deep (limit %d)", MAX_EVAL_DEPTH);
    r->line = x->line;
    val v;
    switch (x->k) {
    case S_LIST: for (int i = 0; i < x->n && !r->brk; i++) exec(r, x->kv[i]); break;
    case S_TEXT: jj_sput(r, r->out, x->s, x->sl); break;
    case S_OUT: v = eval(r, x->a); jj_write_val(r, r->out, v, 0, 0); jj_unref(r, v); break;
    case S_IF: {
        v = eval(r, x->a);
        int t = jj_truthy(v);
        jj_unref(r, v);
        exec(r, t ? x->b : x->c);
        break;
    }
    case S_FOR: exec_for(r, x); break;
    case S_SET: assign(r, x->a, eval(r, x->b)); break;
    case S_SETBLK: assign(r, x->a, block_value(r, x)); break;
    case S_FILTER: v = block_value(r, x); jj_write_val(r, r->out, v, 0, 0); jj_unref(r, v); break;
    case S_MACRO: v = mk(T_MACRO); v.u.m = x; jj_dset_s(r, r->sc->vars, x->s, v); break;
    case S_BREAK: r->brk = 1; break;
    case S_CONT: r->brk = 2; break;
    default: jj_die(r, "bad statement");
    }
    r->depth--;
}

static void render(R *r, const sk_jinja *t, const sk_json *ctx) {
    if (ctx && ctx->type != SK_JSON_OBJ && ctx->type != SK_JSON_NULL) jj_die(r, "the context must be a JSON object");
    r->ctx = jj_dnew(r);
    if (ctx && ctx->type == SK_JSON_OBJ)
        for (int i = 0; i < ctx->n; i++) jj_dset(r, r->ctx, jj_vstrn(r, ctx->keys[i], ctx->key_lens[i]), jj_from_json(r, &ctx->items[i]));
    r->out = jj_snew(r);
    scope root = {jj_dnew(r), NULL};
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
    while (r->all.next != &r->all) jj_ofree(r, r->all.next);
    free(r);
    if (failed) return 1;
    *out = res;
    if (out_len) *out_len = len;
    return 0;
}
