/* Jinja runtime values: refcounted objects on the render's list and its limits, strings (and
 * their code point counts), lists and dicts, the context from JSON, printing (str and repr),
 * comparisons and arithmetic, attribute and item access. See jinja_internal.h. */
#include "text/jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ---------------------------------------------------------------- runtime state */

static void charge(R *r, size_t n) {
    r->mem += n; r->work += n;
    if (r->mem > MAX_MEM) jj_die(r, "memory limit exceeded (1 GiB)");
    if (r->work > MAX_WORK) jj_die(r, "work limit exceeded (template does too much)");
}
void jj_scan(R *r, size_t n) { r->work += n; if (r->work > MAX_WORK) jj_die(r, "work limit exceeded (template does too much)"); }
obj *jj_onew(R *r, int t) {
    obj *o = calloc(1, sizeof *o);
    if (!o) jj_die(r, "out of memory");
    o->t = t; o->rc = 1;
    o->next = r->all.next; o->prev = &r->all;
    r->all.next->prev = o; r->all.next = o;
    charge(r, sizeof *o);
    return o;
}
void jj_ofree(R *r, obj *o) {
    o->prev->next = o->next; o->next->prev = o->prev;
    size_t b = sizeof *o + o->cap + (size_t)o->vcap * sizeof(val) * (o->k ? 2 : 1);
    r->mem = r->mem > b ? r->mem - b : 0;
    free(o->s); free(o->k); free(o->v); free(o);
}
/* drop a reference; frees iteratively (deeply nested values cannot overflow the stack) */
void jj_unref(R *r, val v) {
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
        jj_ofree(r, p);
    }
}

void jj_sgrow(R *r, obj *o, size_t need) {
    if (need > MAX_STR - o->len) jj_die(r, "string or output longer than 256 MiB");
    size_t want = o->len + need + 1;
    if (want <= o->cap) return;
    size_t nc = o->cap ? o->cap : 16;
    while (nc < want) nc *= 2;
    if (nc > MAX_STR + 1) nc = MAX_STR + 1;
    char *s = realloc(o->s, nc);
    if (!s) jj_die(r, "out of memory");
    size_t old = o->cap;
    o->s = s; o->cap = nc;
    charge(r, nc - old);
}
void jj_sput(R *r, obj *o, const char *s, size_t n) {
    jj_sgrow(r, o, n);
    if (n) memcpy(o->s + o->len, s, n);
    o->len += n;
    o->s[o->len] = 0;
}
void jj_sputc(R *r, obj *o, char c) { jj_sput(r, o, &c, 1); }
PRINTF(3, 4) void jj_sprintf(R *r, obj *o, const char *fmt, ...) {
    char b[128];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    jj_sput(r, o, b, k < 0 ? 0 : (size_t)k < sizeof b ? (size_t)k : sizeof b - 1);
}
void jj_sputcp(R *r, obj *o, uint32_t c) { char b[4]; jj_sput(r, o, b, sk_utf8_encode(c, b)); }
obj *jj_snew(R *r) { obj *o = jj_onew(r, T_STR); jj_sgrow(r, o, 0); o->s[0] = 0; return o; }
val jj_vstrn(R *r, const char *s, size_t n) { obj *o = jj_snew(r); jj_sput(r, o, s, n); return sval(o); }
val jj_vstr(R *r, const char *s) { return jj_vstrn(r, s, strlen(s)); }
size_t jj_cplen(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}
/* byte offsets of the code points of s, plus n at the end (in a tracked buffer) */
size_t *jj_cpoffs(R *r, const char *s, size_t n, size_t *count, obj **hold) {
    size_t k = jj_cplen(s, n);
    obj *b = jj_snew(r);
    jj_sgrow(r, b, (k + 1) * sizeof(size_t));
    size_t *o = (size_t *)(void *)b->s, j = 0;
    for (size_t i = 0; i < n; i++) if (((unsigned char)s[i] & 0xC0) != 0x80) o[j++] = i;
    o[k] = n;
    *count = k; *hold = b;
    return o;
}
PRINTF(2, 3) val jj_undef(R *r, const char *fmt, ...) {
    char b[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    val v = mk(T_UNDEF);
    v.u.o = jj_vstr(r, b).u.o;
    return v;
}
NORETURN void jj_undef_fail(R *r, val v) {
    if (v.u.o) jj_die(r, "%s", v.u.o->s);
    jj_die(r, "value is undefined");
}

obj *jj_lnew(R *r, int tuple) { obj *o = jj_onew(r, T_LIST); o->flag = tuple; return o; }
static void vgrow(R *r, obj *o, int two) {
    if (o->n < o->vcap) return;
    if (o->n >= (1 << 24)) jj_die(r, "list or dict longer than 16M items");
    int nc = o->vcap ? o->vcap * 2 : 4;
    val *v = realloc(o->v, (size_t)nc * sizeof *v);
    if (!v) jj_die(r, "out of memory");
    o->v = v;
    if (two) { val *k = realloc(o->k, (size_t)nc * sizeof *k); if (!k) jj_die(r, "out of memory"); o->k = k; }
    charge(r, (size_t)(nc - o->vcap) * sizeof(val) * (two ? 2 : 1));
    o->vcap = nc;
}
void jj_lpush(R *r, obj *l, val v) { vgrow(r, l, 0); l->v[l->n++] = v; }
obj *jj_dnew(R *r) { obj *o = jj_onew(r, T_DICT); o->k = calloc(1, sizeof(val)); if (!o->k) jj_die(r, "out of memory"); return o; }
val *jj_dfind(const obj *d, const char *k, size_t kn) {
    for (int i = 0; i < d->n; i++)
        if (d->k[i].t == T_STR && d->k[i].u.o->len == kn && !memcmp(d->k[i].u.o->s, k, kn)) return &d->v[i];
    return NULL;
}
val *jj_dget(R *r, const obj *d, val key) {
    if (key.t == T_STR) return jj_dfind(d, key.u.o->s, key.u.o->len);
    for (int i = 0; i < d->n; i++) if (jj_eq(r, d->k[i], key, 0)) return &d->v[i];
    return NULL;
}
/* takes ownership of key and v */
void jj_dset(R *r, obj *d, val key, val v) {
    val *old = jj_dget(r, d, key);
    if (old) { val o = *old; *old = v; jj_unref(r, o); jj_unref(r, key); return; }
    vgrow(r, d, 1);
    d->k[d->n] = key; d->v[d->n++] = v;
}
void jj_dset_s(R *r, obj *d, const char *k, val v) {
    val *old = jj_dfind(d, k, strlen(k));
    if (old) { val o = *old; *old = v; jj_unref(r, o); return; }
    jj_dset(r, d, jj_vstr(r, k), v);
}

val jj_from_json(R *r, const sk_json *j) {
    val v;
    switch (j->type) {
    case SK_JSON_BOOL: return vbool(j->boolean);
    case SK_JSON_NUM:
        if (j->num == floor(j->num) && fabs(j->num) < 9.2e18) return vint((int64_t)j->num);
        return vflt(j->num);
    case SK_JSON_STR: return jj_vstrn(r, j->str, j->str_len);
    case SK_JSON_ARR: {
        obj *l = jj_lnew(r, 0);
        for (int i = 0; i < j->n; i++) jj_lpush(r, l, jj_from_json(r, &j->items[i]));
        return lval(l);
    }
    case SK_JSON_OBJ: {
        obj *d = jj_dnew(r);
        for (int i = 0; i < j->n; i++) jj_dset(r, d, jj_vstrn(r, j->keys[i], j->key_lens[i]), jj_from_json(r, &j->items[i]));
        return lval(d);
    }
    default: v = mk(T_NONE); return v;
    }
}

/* ---------------------------------------------------------------- printing */

const char *jj_tname(val v) {
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
void jj_pfloat(char *out, size_t on, double d) {
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
    jj_sputc(r, b, q);
    for (size_t i = 0; i < n;) {
        size_t i0 = i;
        uint32_t c = u8dec(s, n, &i);
        if (c == (uint32_t)q || c == '\\') { jj_sputc(r, b, '\\'); jj_sputc(r, b, (char)c); }
        else if (c == '\n') jj_sput(r, b, "\\n", 2);
        else if (c == '\r') jj_sput(r, b, "\\r", 2);
        else if (c == '\t') jj_sput(r, b, "\\t", 2);
        else if (py_nonprint(c)) {
            if (c < 0x100) jj_sprintf(r, b, "\\x%02x", c);
            else jj_sprintf(r, b, "\\u%04x", c);
        } else jj_sput(r, b, s + i0, i - i0);
    }
    jj_sputc(r, b, q);
}
/* str(v) (repr=0) or repr(v) into b */
void jj_write_val(R *r, obj *b, val v, int repr, int depth) {
    char t[40];
    if (depth > MAX_DEPTH) jj_die(r, "value nested too deep to print");
    switch (v.t) {
    case T_UNDEF: if (repr) jj_sput(r, b, "Undefined", 9); break;
    case T_NONE: jj_sput(r, b, "None", 4); break;
    case T_BOOL: v.u.i ? jj_sput(r, b, "True", 4) : jj_sput(r, b, "False", 5); break;
    case T_INT: jj_sprintf(r, b, "%lld", (long long)v.u.i); break;
    case T_FLOAT: jj_pfloat(t, sizeof t, v.u.f); jj_sput(r, b, t, strlen(t)); break;
    case T_STR: if (repr) repr_str(r, b, v.u.o->s, v.u.o->len); else jj_sput(r, b, v.u.o->s, v.u.o->len); break;
    case T_LIST: {
        obj *l = v.u.o;
        jj_sputc(r, b, l->flag ? '(' : '[');
        for (int i = 0; i < l->n; i++) { if (i) jj_sput(r, b, ", ", 2); jj_write_val(r, b, l->v[i], 1, depth + 1); }
        if (l->flag && l->n == 1) jj_sputc(r, b, ',');
        jj_sputc(r, b, l->flag ? ')' : ']');
        break;
    }
    case T_DICT: {
        obj *d = v.u.o;
        if (d->flag) jj_sput(r, b, "<Namespace ", 11);
        jj_sputc(r, b, '{');
        for (int i = 0; i < d->n; i++) {
            if (i) jj_sput(r, b, ", ", 2);
            jj_write_val(r, b, d->k[i], 1, depth + 1);
            jj_sput(r, b, ": ", 2);
            jj_write_val(r, b, d->v[i], 1, depth + 1);
        }
        jj_sputc(r, b, '}');
        if (d->flag) jj_sputc(r, b, '>');
        break;
    }
    case T_LOOP: jj_sput(r, b, "<LoopContext>", 13); break;
    case T_MACRO: jj_sprintf(r, b, "<Macro '%s'>", v.u.m->s); break;
    default: jj_sput(r, b, "<built-in function>", 19); break;
    }
}
val jj_to_str(R *r, val v) {
    if (v.t == T_STR) return ref(v);
    obj *o = jj_snew(r);
    jj_write_val(r, o, v, 0, 0);
    return sval(o);
}

/* ---------------------------------------------------------------- comparisons and arithmetic */

int jj_truthy(val v) {
    switch (v.t) {
    case T_UNDEF: case T_NONE: return 0;
    case T_BOOL: case T_INT: return v.u.i != 0;
    case T_FLOAT: return v.u.f != 0;
    case T_STR: return v.u.o->len != 0;
    case T_LIST: case T_DICT: return v.u.o->n != 0;
    default: return 1;
    }
}
int jj_eq(R *r, val a, val b, int depth) {
    if (depth > MAX_DEPTH) jj_die(r, "values nested too deep to compare");
    if (isnum(a) && isnum(b)) return isint(a) && isint(b) ? a.u.i == b.u.i : num(a) == num(b);
    if (a.t != b.t) return 0;
    switch (a.t) {
    case T_UNDEF: case T_NONE: return 1;
    case T_STR: jj_scan(r, a.u.o->len); return a.u.o->len == b.u.o->len && !memcmp(a.u.o->s, b.u.o->s, a.u.o->len);
    case T_LIST:
        if (a.u.o->flag != b.u.o->flag || a.u.o->n != b.u.o->n) return 0;
        for (int i = 0; i < a.u.o->n; i++) if (!jj_eq(r, a.u.o->v[i], b.u.o->v[i], depth + 1)) return 0;
        return 1;
    case T_DICT:
        if (a.u.o->flag || b.u.o->flag) return a.u.o == b.u.o;
        if (a.u.o->n != b.u.o->n) return 0;
        for (int i = 0; i < a.u.o->n; i++) {
            val *o = jj_dget(r, b.u.o, a.u.o->k[i]);
            if (!o || !jj_eq(r, a.u.o->v[i], *o, depth + 1)) return 0;
        }
        return 1;
    case T_MACRO: return a.u.m == b.u.m;
    case T_FUNC: return a.u.i == b.u.i;
    default: return a.u.o == b.u.o;
    }
}
/* Python's ordering: <0, 0, >0; a TypeError for unorderable types */
int jj_cmp(R *r, val a, val b, const char *op, int depth) {
    if (depth > MAX_DEPTH) jj_die(r, "values nested too deep to compare");
    if (a.t == T_UNDEF) jj_undef_fail(r, a);
    if (b.t == T_UNDEF) jj_undef_fail(r, b);
    if (isnum(a) && isnum(b)) {
        if (isint(a) && isint(b)) return (a.u.i > b.u.i) - (a.u.i < b.u.i);
        double x = num(a), y = num(b);
        return (x > y) - (x < y);
    }
    if (a.t == T_STR && b.t == T_STR) {
        size_t n = a.u.o->len < b.u.o->len ? a.u.o->len : b.u.o->len;
        jj_scan(r, n);
        int c = memcmp(a.u.o->s, b.u.o->s, n);
        return c ? c : (a.u.o->len > b.u.o->len) - (a.u.o->len < b.u.o->len);
    }
    if (a.t == T_LIST && b.t == T_LIST && a.u.o->flag == b.u.o->flag) {
        for (int i = 0; i < a.u.o->n && i < b.u.o->n; i++)
            if (!jj_eq(r, a.u.o->v[i], b.u.o->v[i], depth + 1)) return jj_cmp(r, a.u.o->v[i], b.u.o->v[i], op, depth + 1);
        return (a.u.o->n > b.u.o->n) - (a.u.o->n < b.u.o->n);
    }
    jj_die(r, "'%s' not supported between instances of '%s' and '%s'", op, jj_tname(a), jj_tname(b));
}
size_t jj_find_bytes(R *r, const char *h, size_t hn, const char *nd, size_t nn, size_t from) {
    if (nn == 0) return from <= hn ? from : (size_t)-1;
    for (size_t i = from; i + nn <= hn; i++) {
        const char *q = memchr(h + i, nd[0], hn - nn + 1 - i);
        if (!q) break;
        i = (size_t)(q - h);
        jj_scan(r, nn);
        if (!memcmp(h + i, nd, nn)) return i;
    }
    jj_scan(r, hn);
    return (size_t)-1;
}
int jj_contains(R *r, val c, val x) {
    switch (c.t) {
    case T_STR:
        if (x.t != T_STR) jj_die(r, "'in <string>' requires string as left operand, not %s", jj_tname(x));
        return jj_find_bytes(r, c.u.o->s, c.u.o->len, x.u.o->s, x.u.o->len, 0) != (size_t)-1;
    case T_LIST: for (int i = 0; i < c.u.o->n; i++) if (jj_eq(r, c.u.o->v[i], x, 0)) return 1; return 0;
    case T_DICT: return jj_dget(r, c.u.o, x) != NULL;
    case T_UNDEF: return 0;
    default: jj_die(r, "argument of type '%s' is not iterable", jj_tname(c));
    }
}
static int64_t iadd(R *r, int64_t a, int64_t b, int op) {
    int64_t z;
    int ov = op == '+' ? __builtin_add_overflow(a, b, &z) : op == '-' ? __builtin_sub_overflow(a, b, &z) : __builtin_mul_overflow(a, b, &z);
    if (ov) jj_die(r, "integer overflow (ints are 64-bit here)");
    return z;
}
static val repeat(R *r, val s, int64_t n) {
    if (s.t == T_STR) {
        obj *o = jj_snew(r);
        if (n > 0 && s.u.o->len) {
            if ((uint64_t)n > MAX_STR / s.u.o->len) jj_die(r, "string or output longer than 256 MiB");
            jj_sgrow(r, o, s.u.o->len * (size_t)n);
            for (int64_t i = 0; i < n; i++) jj_sput(r, o, s.u.o->s, s.u.o->len);
        }
        return sval(o);
    }
    obj *l = jj_lnew(r, s.u.o->flag);
    if (n > 0 && s.u.o->n && n > (1 << 24) / s.u.o->n) jj_die(r, "list or dict longer than 16M items");
    for (int64_t i = 0; i < n; i++) for (int j = 0; j < s.u.o->n; j++) jj_lpush(r, l, ref(s.u.o->v[j]));
    return lval(l);
}
val jj_arith(R *r, int op, val a, val b) {
    if (op == '~') {
        val x = jj_to_str(r, a), y = jj_to_str(r, b);
        obj *o = jj_snew(r);
        jj_sput(r, o, x.u.o->s, x.u.o->len); jj_sput(r, o, y.u.o->s, y.u.o->len);
        jj_unref(r, x); jj_unref(r, y);
        return sval(o);
    }
    if (a.t == T_UNDEF) jj_undef_fail(r, a);
    if (b.t == T_UNDEF) jj_undef_fail(r, b);
    if (isnum(a) && isnum(b)) {
        int ints = isint(a) && isint(b);
        double x = num(a), y = num(b);
        switch (op) {
        case '+': case '-': case '*': return ints ? vint(iadd(r, a.u.i, b.u.i, op)) : vflt(op == '+' ? x + y : op == '-' ? x - y : x * y);
        case '/': if (y == 0) jj_die(r, "division by zero"); return vflt(x / y);
        case 'F': case '%':
            if (y == 0) jj_die(r, ints ? "integer division or modulo by zero" : "float division by zero");
            if (ints) {
                if (a.u.i == INT64_MIN && b.u.i == -1) jj_die(r, "integer overflow (ints are 64-bit here)");
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
            if (x == 0 && y < 0) jj_die(r, "zero to a negative power");
            if (x < 0 && y != floor(y)) jj_die(r, "negative number to a fractional power (complex result)");
            return vflt(pow(x, y));
        }
    }
    if (op == '+' && a.t == T_STR && b.t == T_STR) {
        obj *o = jj_snew(r);
        jj_sput(r, o, a.u.o->s, a.u.o->len); jj_sput(r, o, b.u.o->s, b.u.o->len);
        return sval(o);
    }
    if (op == '+' && a.t == T_LIST && b.t == T_LIST && a.u.o->flag == b.u.o->flag) {
        obj *l = jj_lnew(r, a.u.o->flag);
        for (int i = 0; i < a.u.o->n; i++) jj_lpush(r, l, ref(a.u.o->v[i]));
        for (int i = 0; i < b.u.o->n; i++) jj_lpush(r, l, ref(b.u.o->v[i]));
        return lval(l);
    }
    if (op == '*' && (a.t == T_STR || a.t == T_LIST) && isint(b)) return repeat(r, a, b.u.i);
    if (op == '*' && (b.t == T_STR || b.t == T_LIST) && isint(a)) return repeat(r, b, a.u.i);
    if (op == '%' && a.t == T_STR) jj_die(r, "the %% string formatting operator is not supported");
    static const char *const nm[] = {"+", "-", "*", "/", "//", "%", "**"};
    const char *o = nm[op == '+' ? 0 : op == '-' ? 1 : op == '*' ? 2 : op == '/' ? 3 : op == 'F' ? 4 : op == '%' ? 5 : 6];
    jj_die(r, "unsupported operand type(s) for %s: '%s' and '%s'", o, jj_tname(a), jj_tname(b));
}


/* ---------------------------------------------------------------- attribute and item access */

static const char *objdesc(val v, char *b, size_t n) {
    if (v.t == T_NONE) return "None";
    snprintf(b, n, "%s object", jj_tname(v));
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
    if (!strcmp(nm, "previtem")) return i > 0 ? ref(it->v[i - 1]) : jj_undef(r, "there is no previous item");
    if (!strcmp(nm, "nextitem")) return i + 1 < n ? ref(it->v[i + 1]) : jj_undef(r, "there is no next item");
    return jj_undef(r, "'LoopContext object' has no attribute '%s'", nm);
}
val jj_getattr(R *r, val o, const char *nm, size_t nl) {
    char b[64];
    if (o.t == T_UNDEF) jj_undef_fail(r, o);
    if (o.t == T_DICT) { val *v = jj_dfind(o.u.o, nm, nl); if (v) return ref(*v); }
    if (o.t == T_LOOP) return loop_attr(r, o.u.o, nm);
    return jj_undef(r, "'%s' has no attribute '%.100s'", objdesc(o, b, sizeof b), nm);
}
val jj_getitem(R *r, val o, val k) {
    char b[64];
    if (o.t == T_UNDEF) jj_undef_fail(r, o);
    if (o.t == T_DICT) { val *v = jj_dget(r, o.u.o, k); if (v) return ref(*v); }
    else if ((o.t == T_LIST || o.t == T_STR) && isint(k)) {
        int64_t i = k.u.i;
        if (o.t == T_LIST) {
            if (i < 0) i += o.u.o->n;
            if (i >= 0 && i < o.u.o->n) return ref(o.u.o->v[i]);
        } else {
            int64_t n = (int64_t)jj_cplen(o.u.o->s, o.u.o->len);
            jj_scan(r, o.u.o->len);
            if (i < 0) i += n;
            if (i >= 0 && i < n) {
                size_t p = 0;
                for (int64_t c = 0; c < i; c++) p += u8len_at(o.u.o->s, o.u.o->len, p);
                return jj_vstrn(r, o.u.o->s + p, u8len_at(o.u.o->s, o.u.o->len, p));
            }
        }
    } else if (o.t == T_LOOP && k.t == T_STR) return loop_attr(r, o.u.o, k.u.o->s);
    if (k.t == T_STR) return jj_undef(r, "'%s' has no attribute '%.100s'", objdesc(o, b, sizeof b), k.u.o->s);
    obj *d = jj_snew(r);
    jj_write_val(r, d, k, 1, 0);
    val u = jj_undef(r, "%s has no element %.100s", objdesc(o, b, sizeof b), d->s);
    jj_unref(r, sval(d));
    return u;
}
static int64_t slice_ix(R *r, val *v, int present) {
    if (!present || v->t == T_NONE) return INT64_MIN;
    if (!isint(*v)) jj_die(r, "slice indices must be integers or None");
    return v->u.i;
}
val jj_slice(R *r, val o, val *sv) {
    if (o.t == T_UNDEF) jj_undef_fail(r, o);
    if (o.t != T_LIST && o.t != T_STR) return jj_undef(r, "'%s' object is not subscriptable", jj_tname(o));
    int64_t st = slice_ix(r, &sv[0], 1), sp = slice_ix(r, &sv[1], 1), step = slice_ix(r, &sv[2], 1);
    if (step == INT64_MIN) step = 1;
    if (step == 0) jj_die(r, "slice step cannot be zero");
    obj *hold = NULL;
    size_t ncp = 0, *offs = NULL;
    int64_t len;
    if (o.t == T_STR) { offs = jj_cpoffs(r, o.u.o->s, o.u.o->len, &ncp, &hold); len = (int64_t)ncp; }
    else len = o.u.o->n;
    if (st == INT64_MIN) st = step < 0 ? len - 1 : 0;
    else if (st < 0) { st += len; if (st < 0) st = step < 0 ? -1 : 0; }
    else if (st >= len) st = step < 0 ? len - 1 : len;
    if (sp == INT64_MIN) sp = step < 0 ? -1 : len;
    else if (sp < 0) { sp += len; if (sp < 0) sp = step < 0 ? -1 : 0; }
    else if (sp >= len) sp = step < 0 ? len - 1 : len;
    val res;
    if (o.t == T_STR) {
        obj *s = jj_snew(r);
        if (step == 1 && st < sp) jj_sput(r, s, o.u.o->s + offs[st], offs[sp] - offs[st]);
        else for (int64_t i = st; step > 0 ? i < sp : i > sp; i += step) jj_sput(r, s, o.u.o->s + offs[i], offs[i + 1] - offs[i]);
        jj_unref(r, sval(hold));
        res = sval(s);
    } else {
        obj *l = jj_lnew(r, o.u.o->flag);
        for (int64_t i = st; step > 0 ? i < sp : i > sp; i += step) jj_lpush(r, l, ref(o.u.o->v[i]));
        res = lval(l);
    }
    return res;
}
/* for-loop / list() conversion: a new list */
obj *jj_to_list(R *r, val v) {
    obj *l = jj_lnew(r, 0);
    switch (v.t) {
    case T_UNDEF: break;
    case T_LIST: for (int i = 0; i < v.u.o->n; i++) jj_lpush(r, l, ref(v.u.o->v[i])); break;
    case T_DICT: if (v.u.o->flag) goto bad; for (int i = 0; i < v.u.o->n; i++) jj_lpush(r, l, ref(v.u.o->k[i])); break;
    case T_STR:
        for (size_t i = 0; i < v.u.o->len;) { size_t k = u8len_at(v.u.o->s, v.u.o->len, i); jj_lpush(r, l, jj_vstrn(r, v.u.o->s + i, k)); i += k; }
        break;
    default: bad: jj_die(r, "'%s' object is not iterable", jj_tname(v));
    }
    return l;
}

