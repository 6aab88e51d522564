/* Jinja tests and filters (jinja2's, with transformers' tojson), their arguments, and sorting.
 * See jinja_internal.h. */
#include "text/jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

/* ---------------------------------------------------------------- names */

const char *const jj_filters[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape",
    "first", "float", "forceescape", "indent", "int", "items", "join", "last", "length", "list", "lower",
    "map", "max", "min", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
    "selectattr", "sort", "string", "sum", "title", "tojson", "trim", "unique", "upper", "wordcount", NULL};
const char *const jj_tests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "escaped", "even", "false",
    "filter", "float", "ge", ">=", "gt", ">", "greaterthan", "in", "integer", "iterable", "le", "<=",
    "lower", "lt", "<", "lessthan", "mapping", "ne", "!=", "none", "number", "odd", "sameas", "sequence",
    "string", "test", "true", "undefined", "upper", NULL};
int jj_in_list(const char *const *l, const char *s) {
    for (; *l; l++) if (!strcmp(*l, s)) return 1;
    return 0;
}

/* ---------------------------------------------------------------- arguments */

val *jj_argp(args *a, int pos, const char *kw) {
    if (pos >= 0 && pos < a->np) return &a->v[pos];
    if (kw) for (int i = a->np; i < a->n; i++) if (!strcmp(a->kw[i], kw)) return &a->v[i];
    return NULL;
}
int64_t jj_arg_int(R *r, args *a, int pos, const char *kw, int64_t def) {
    val *v = jj_argp(a, pos, kw);
    if (!v || v->t == T_NONE) return def;
    if (!isint(*v)) jj_die(r, "argument '%s' must be an integer, not %s", kw, jj_tname(*v));
    return v->u.i;
}
int jj_arg_bool(args *a, int pos, const char *kw, int def) { val *v = jj_argp(a, pos, kw); return v ? jj_truthy(*v) : def; }
static val *arg_str(R *r, args *a, int pos, const char *kw) {
    val *v = jj_argp(a, pos, kw);
    if (v && v->t != T_STR && v->t != T_NONE) jj_die(r, "argument '%s' must be a string, not %s", kw, jj_tname(*v));
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
    if (isint(*attr)) return jj_getitem(r, item, *attr);
    if (attr->t != T_STR) jj_die(r, "attribute must be a string or an integer");
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
        val k = digits ? vint(iv) : jj_vstrn(r, s + i, j - i);
        val nx = jj_getitem(r, cur, k);
        jj_unref(r, k); jj_unref(r, cur);
        cur = nx;
        if (j >= n) return cur;
        i = j + 1;
    }
}

/* ---------------------------------------------------------------- tojson (json.dumps) */

typedef struct { const char *ind; size_t indn; int has_ind, ascii, sort; const char *isep, *ksep; size_t isepn, ksepn; } jopt;
static void json_str(R *r, obj *b, const char *s, size_t n, int ascii) {
    jj_sputc(r, b, '"');
    for (size_t i = 0; i < n;) {
        size_t i0 = i;
        uint32_t c = u8dec(s, n, &i);
        switch (c) {
        case '"': jj_sput(r, b, "\\\"", 2); break;
        case '\\': jj_sput(r, b, "\\\\", 2); break;
        case '\n': jj_sput(r, b, "\\n", 2); break;
        case '\r': jj_sput(r, b, "\\r", 2); break;
        case '\t': jj_sput(r, b, "\\t", 2); break;
        case '\b': jj_sput(r, b, "\\b", 2); break;
        case '\f': jj_sput(r, b, "\\f", 2); break;
        default:
            if (c < 0x20 || (ascii && c >= 0x7F)) {
                if (c >= 0x10000) {
                    uint32_t v = c - 0x10000;
                    jj_sprintf(r, b, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                } else jj_sprintf(r, b, "\\u%04x", c);
            } else jj_sput(r, b, s + i0, i - i0);
        }
    }
    jj_sputc(r, b, '"');
}
static void json_nl(R *r, obj *b, const jopt *o, int level) {
    if (!o->has_ind) return;
    jj_sputc(r, b, '\n');
    for (int i = 0; i < level; i++) jj_sput(r, b, o->ind, o->indn);
}
static void json_val(R *r, obj *b, val v, const jopt *o, int level) {
    char t[40];
    if (level > MAX_DEPTH) jj_die(r, "value nested too deep for tojson");
    switch (v.t) {
    case T_NONE: jj_sput(r, b, "null", 4); return;
    case T_BOOL: v.u.i ? jj_sput(r, b, "true", 4) : jj_sput(r, b, "false", 5); return;
    case T_INT: jj_sprintf(r, b, "%lld", (long long)v.u.i); return;
    case T_FLOAT:
        if (isnan(v.u.f)) jj_sput(r, b, "NaN", 3);
        else if (isinf(v.u.f)) v.u.f < 0 ? jj_sput(r, b, "-Infinity", 9) : jj_sput(r, b, "Infinity", 8);
        else { jj_pfloat(t, sizeof t, v.u.f); jj_sput(r, b, t, strlen(t)); }
        return;
    case T_STR: json_str(r, b, v.u.o->s, v.u.o->len, o->ascii); return;
    case T_LIST:
        if (!v.u.o->n) { jj_sput(r, b, "[]", 2); return; }
        jj_sputc(r, b, '[');
        for (int i = 0; i < v.u.o->n; i++) {
            if (i) jj_sput(r, b, o->isep, o->isepn);
            json_nl(r, b, o, level + 1);
            json_val(r, b, v.u.o->v[i], o, level + 1);
        }
        json_nl(r, b, o, level);
        jj_sputc(r, b, ']');
        return;
    case T_DICT: {
        obj *d = v.u.o;
        if (d->flag) break;
        if (!d->n) { jj_sput(r, b, "{}", 2); return; }
        obj *ih = jj_snew(r);
        jj_sgrow(r, ih, (size_t)d->n * sizeof(int));
        int *ix = (int *)(void *)ih->s;
        for (int i = 0; i < d->n; i++) ix[i] = i;
        if (o->sort) {   /* insertion sort of the (string) keys; stable */
            jj_scan(r, (size_t)d->n * (size_t)d->n);
            for (int i = 1; i < d->n; i++)
                for (int j = i; j > 0 && jj_cmp(r, d->k[ix[j - 1]], d->k[ix[j]], "<", 0) > 0; j--) { int q = ix[j]; ix[j] = ix[j - 1]; ix[j - 1] = q; }
        }
        jj_sputc(r, b, '{');
        for (int q = 0; q < d->n; q++) {
            int i = ix[q];
            val k = d->k[i];
            if (q) jj_sput(r, b, o->isep, o->isepn);
            json_nl(r, b, o, level + 1);
            if (k.t == T_STR) json_str(r, b, k.u.o->s, k.u.o->len, o->ascii);
            else if (k.t == T_NONE || k.t == T_BOOL || k.t == T_INT || k.t == T_FLOAT) {
                jj_sputc(r, b, '"'); json_val(r, b, k, o, level + 1); jj_sputc(r, b, '"');
            } else jj_die(r, "keys must be str, int, float, bool or None, not %s", jj_tname(k));
            jj_sput(r, b, o->ksep, o->ksepn);
            json_val(r, b, d->v[i], o, level + 1);
        }
        json_nl(r, b, o, level);
        jj_sputc(r, b, '}');
        jj_unref(r, sval(ih));
        return;
    }
    default: break;
    }
    jj_die(r, "Object of type %s is not JSON serializable", jj_tname(v));
}
static val tojson(R *r, val x, args *a) {
    jopt o;
    memset(&o, 0, sizeof o);
    val *ind = jj_argp(a, 0, "indent"), *sep = jj_argp(a, -1, "separators");
    char sp[64];
    if (ind && ind->t == T_STR) { o.has_ind = 1; o.ind = ind->u.o->s; o.indn = ind->u.o->len; }
    else if (ind && isint(*ind)) {
        int64_t n = ind->u.i < 0 ? 0 : ind->u.i > 63 ? 63 : ind->u.i;
        memset(sp, ' ', (size_t)n);
        o.has_ind = 1; o.ind = sp; o.indn = (size_t)n;
    } else if (ind && ind->t != T_NONE) jj_die(r, "tojson indent must be an integer or a string");
    o.ascii = jj_arg_bool(a, -1, "ensure_ascii", 0);
    o.sort = jj_arg_bool(a, -1, "sort_keys", 0);
    o.isep = o.has_ind ? "," : ", "; o.isepn = o.has_ind ? 1 : 2;
    o.ksep = ": "; o.ksepn = 2;
    if (sep && sep->t != T_NONE) {
        if (sep->t != T_LIST || sep->u.o->n != 2 || sep->u.o->v[0].t != T_STR || sep->u.o->v[1].t != T_STR)
            jj_die(r, "tojson separators must be a pair of strings");
        o.isep = sep->u.o->v[0].u.o->s; o.isepn = sep->u.o->v[0].u.o->len;
        o.ksep = sep->u.o->v[1].u.o->s; o.ksepn = sep->u.o->v[1].u.o->len;
    }
    obj *b = jj_snew(r);
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
        int c = jj_cmp(r, keys[ix[j]], keys[ix[i]], "<", 0);   /* take the right one only when strictly before */
        if (rev ? c > 0 : c < 0) tmp[k++] = ix[j++]; else tmp[k++] = ix[i++];
    }
    while (i < h) tmp[k++] = ix[i++];
    while (j < n) tmp[k++] = ix[j++];
    memcpy(ix, tmp, (size_t)n * sizeof *ix);
}
/* the sort key of item: its attribute (if any), lowercased when a string and !cs */
static val sort_key(R *r, val item, val *attr, int cs) {
    val k = attr ? attr_path(r, item, attr) : ref(item);
    if (!cs && k.t == T_STR) { val l = jj_casemap(r, k.u.o->s, k.u.o->len, C_LOWER); jj_unref(r, k); return l; }
    return k;
}
/* a new list: items of l ordered by keys (one per item, owned by the keys list) */
static obj *sorted(R *r, obj *l, obj *keys, int rev) {
    obj *h = jj_snew(r);
    jj_sgrow(r, h, (size_t)l->n * 2 * sizeof(int));
    int *ix = (int *)(void *)h->s;
    for (int i = 0; i < l->n; i++) ix[i] = i;
    msort(r, ix, ix + l->n, l->n, keys->v, rev);
    obj *o = jj_lnew(r, 0);
    for (int i = 0; i < l->n; i++) jj_lpush(r, o, ref(l->v[ix[i]]));
    jj_unref(r, sval(h));
    return o;
}
obj *jj_dict_items(R *r, obj *d) {
    obj *l = jj_lnew(r, 0);
    for (int i = 0; i < d->n; i++) {
        obj *t = jj_lnew(r, 1);
        jj_lpush(r, t, ref(d->k[i])); jj_lpush(r, t, ref(d->v[i]));
        jj_lpush(r, l, lval(t));
    }
    return l;
}

/* ---------------------------------------------------------------- tests */

int jj_test(R *r, const char *nm, val x, args *a) {
    val *y = jj_argp(a, 0, NULL);
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
        if (x.t != T_STR) jj_die(r, "'%s' object has no attribute 'is%s'", jj_tname(x), nm);
        int cased = 0;
        for (size_t i = 0; i < x.u.o->len;) {
            uint32_t c = u8dec(x.u.o->s, x.u.o->len, &i);
            if (nm[0] == 'l' ? jj_cp_isupper(c) : jj_cp_islower(c)) return 0;
            cased |= jj_cp_cased(c);
        }
        return cased;
    }
    if (!strcmp(nm, "filter")) return x.t == T_STR && jj_in_list(jj_filters, x.u.o->s);
    if (!strcmp(nm, "test")) return x.t == T_STR && jj_in_list(jj_tests, x.u.o->s);
    if (!strcmp(nm, "even") || !strcmp(nm, "odd")) {
        val m = jj_arith(r, '%', x, vint(2));
        int odd = jj_truthy(m);
        return nm[0] == 'o' ? odd : !odd;
    }
    if (!y) jj_die(r, "test '%s' needs an argument", nm);
    if (!strcmp(nm, "divisibleby")) { val m = jj_arith(r, '%', x, *y); int z = !jj_truthy(m); jj_unref(r, m); return z; }
    if (!strcmp(nm, "eq") || !strcmp(nm, "equalto") || !strcmp(nm, "==")) return jj_eq(r, x, *y, 0);
    if (!strcmp(nm, "ne") || !strcmp(nm, "!=")) return !jj_eq(r, x, *y, 0);
    if (!strcmp(nm, "lt") || !strcmp(nm, "<") || !strcmp(nm, "lessthan")) return jj_cmp(r, x, *y, "<", 0) < 0;
    if (!strcmp(nm, "le") || !strcmp(nm, "<=")) return jj_cmp(r, x, *y, "<=", 0) <= 0;
    if (!strcmp(nm, "gt") || !strcmp(nm, ">") || !strcmp(nm, "greaterthan")) return jj_cmp(r, x, *y, ">", 0) > 0;
    if (!strcmp(nm, "ge") || !strcmp(nm, ">=")) return jj_cmp(r, x, *y, ">=", 0) >= 0;
    if (!strcmp(nm, "in")) return jj_contains(r, *y, x);
    if (!strcmp(nm, "sameas")) {
        if (x.t != y->t) return 0;
        if (x.t == T_NONE || x.t == T_UNDEF) return x.t == T_NONE;
        if (x.t == T_BOOL || x.t == T_INT) return x.u.i == y->u.i;
        if (x.t == T_FLOAT) return 0;
        if (x.t == T_MACRO) return x.u.m == y->u.m;
        if (x.t == T_FUNC) return x.u.i == y->u.i;
        return x.u.o == y->u.o;
    }
    jj_die(r, "unknown test '%s'", nm);
}

/* ---------------------------------------------------------------- filters */

static int64_t length(R *r, val x) {
    switch (x.t) {
    case T_UNDEF: return 0;
    case T_STR: jj_scan(r, x.u.o->len); return (int64_t)jj_cplen(x.u.o->s, x.u.o->len);
    case T_LIST: case T_DICT: if (!x.u.o->flag || x.t == T_LIST) return x.u.o->n; break;
    default: break;
    }
    jj_die(r, "object of type '%s' has no len()", jj_tname(x));
}
/* Python float(str): surrounding whitespace, sign, digits with single underscores, inf/nan */
static int parse_float(const char *s, size_t n, double *out) {
    size_t a = 0, w;
    while (a < n && (w = jj_ws_at(s, n, a))) a += w;
    n = jj_rstrip_ws(s, a, n);
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
    while (a < n && (w = jj_ws_at(s, n, a))) a += w;
    n = jj_rstrip_ws(s, a, n);
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
    if (!isnum(x)) jj_die(r, "type %s doesn't define __round__ method", jj_tname(x));
    if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
        jj_die(r, "method must be common, ceil or floor");
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
    val *w = jj_argp(a, 0, "width");
    obj *ind = jj_snew(r);
    if (w && w->t == T_STR) jj_sput(r, ind, w->u.o->s, w->u.o->len);
    else { int64_t n = jj_arg_int(r, a, 0, "width", 4); for (int64_t i = 0; i < n && i < 1024; i++) jj_sputc(r, ind, ' '); }
    int first = jj_arg_bool(a, 1, "first", 0), blank = jj_arg_bool(a, 2, "blank", 0);
    obj *t = jj_snew(r);
    jj_sput(r, t, s.u.o->s, s.u.o->len);
    jj_sputc(r, t, '\n');
    val lines = jj_splitlines(r, t->s, t->len, 0);
    obj *o = jj_snew(r);
    if (first) jj_sput(r, o, ind->s, ind->len);
    obj *l = lines.u.o;
    for (int i = 0; i < l->n; i++) {
        obj *ln = l->v[i].u.o;
        if (i) { jj_sputc(r, o, '\n'); if (blank || ln->len) jj_sput(r, o, ind->s, ind->len); }
        jj_sput(r, o, ln->s, ln->len);
    }
    jj_unref(r, lines); jj_unref(r, sval(t)); jj_unref(r, sval(ind));
    return sval(o);
}
static val minmax(R *r, val x, args *a, int want_max) {
    obj *l = jj_to_list(r, x);
    int cs = jj_arg_bool(a, 0, "case_sensitive", 0);
    val *attr = jj_argp(a, 1, "attribute");
    if (!l->n) { jj_unref(r, lval(l)); return jj_undef(r, "No aggregated item, sequence was empty."); }
    int best = 0;
    val bk = sort_key(r, l->v[0], attr, cs);
    for (int i = 1; i < l->n; i++) {
        val k = sort_key(r, l->v[i], attr, cs);
        int c = jj_cmp(r, k, bk, want_max ? ">" : "<", 0);
        if (want_max ? c > 0 : c < 0) { jj_unref(r, bk); bk = k; best = i; } else jj_unref(r, k);
    }
    val res = ref(l->v[best]);
    jj_unref(r, bk); jj_unref(r, lval(l));
    return res;
}
static val select_(R *r, val x, args *a, int by_attr, int reject) {
    obj *l = jj_to_list(r, x), *o = jj_lnew(r, 0);
    val *attr = by_attr ? jj_argp(a, 0, NULL) : NULL;
    if (by_attr && !attr) jj_die(r, "selectattr/rejectattr need an attribute");
    val *tn = jj_argp(a, by_attr, NULL);
    if (tn && tn->t != T_STR) jj_die(r, "test name must be a string");
    if (tn && !jj_in_list(jj_tests, tn->u.o->s)) jj_die(r, "no test named '%s'", tn->u.o->s);
    args sub = shift(a, by_attr + 1);
    for (int i = 0; i < l->n; i++) {
        val v = attr ? attr_path(r, l->v[i], attr) : ref(l->v[i]);
        int ok = tn ? jj_test(r, tn->u.o->s, v, &sub) : jj_truthy(v);
        jj_unref(r, v);
        if (ok != reject) jj_lpush(r, o, ref(l->v[i]));
    }
    jj_unref(r, lval(l));
    return lval(o);
}
static val html_escape(R *r, val x) {
    val s = jj_to_str(r, x);
    obj *o = jj_snew(r);
    for (size_t i = 0; i < s.u.o->len; i++) {
        char c = s.u.o->s[i];
        switch (c) {
        case '&': jj_sput(r, o, "&amp;", 5); break;
        case '<': jj_sput(r, o, "&lt;", 4); break;
        case '>': jj_sput(r, o, "&gt;", 4); break;
        case '"': jj_sput(r, o, "&#34;", 5); break;
        case '\'': jj_sput(r, o, "&#39;", 5); break;
        default: jj_sputc(r, o, c);
        }
    }
    jj_unref(r, s);
    return sval(o);
}

val jj_filter(R *r, const char *nm, val x, args *a) {
    if (!strcmp(nm, "default") || !strcmp(nm, "d")) {
        val *dv = jj_argp(a, 0, "default_value");
        if (x.t == T_UNDEF || (jj_arg_bool(a, 1, "boolean", 0) && !jj_truthy(x))) return dv ? ref(*dv) : jj_vstr(r, "");
        return ref(x);
    }
    if (!strcmp(nm, "safe")) return ref(x);
    if (!strcmp(nm, "string")) return jj_to_str(r, x);
    if (!strcmp(nm, "tojson")) return tojson(r, x, a);
    if (!strcmp(nm, "length") || !strcmp(nm, "count")) return vint(length(r, x));
    if (!strcmp(nm, "list")) return lval(jj_to_list(r, x));
    if (!strcmp(nm, "e") || !strcmp(nm, "escape") || !strcmp(nm, "forceescape")) return html_escape(r, x);
    if (!strcmp(nm, "items")) {
        if (x.t == T_UNDEF) return lval(jj_lnew(r, 0));
        if (x.t != T_DICT || x.u.o->flag) jj_die(r, "Can only get item pairs from a mapping.");
        return lval(jj_dict_items(r, x.u.o));
    }
    if (!strcmp(nm, "first") || !strcmp(nm, "last")) {
        obj *l = jj_to_list(r, x);
        val v = l->n ? ref(l->v[nm[0] == 'f' ? 0 : l->n - 1]) : jj_undef(r, "No %s item, sequence was empty.", nm);
        jj_unref(r, lval(l));
        return v;
    }
    if (!strcmp(nm, "reverse")) {
        if (x.t == T_STR) {
            size_t n, *off;
            obj *h;
            off = jj_cpoffs(r, x.u.o->s, x.u.o->len, &n, &h);
            obj *o = jj_snew(r);
            for (size_t i = n; i-- > 0;) jj_sput(r, o, x.u.o->s + off[i], off[i + 1] - off[i]);
            jj_unref(r, sval(h));
            return sval(o);
        }
        obj *l = jj_to_list(r, x), *o = jj_lnew(r, 0);
        for (int i = l->n; i-- > 0;) jj_lpush(r, o, ref(l->v[i]));
        jj_unref(r, lval(l));
        return lval(o);
    }
    if (!strcmp(nm, "join")) {
        val *sep = arg_str(r, a, 0, "d"), *attr = jj_argp(a, 1, "attribute");
        obj *l = jj_to_list(r, x), *o = jj_snew(r);
        for (int i = 0; i < l->n; i++) {
            if (i && sep) jj_sput(r, o, sep->u.o->s, sep->u.o->len);
            val it = attr ? attr_path(r, l->v[i], attr) : ref(l->v[i]);
            val s = jj_to_str(r, it);
            jj_sput(r, o, s.u.o->s, s.u.o->len);
            jj_unref(r, s); jj_unref(r, it);
        }
        jj_unref(r, lval(l));
        return sval(o);
    }
    if (!strcmp(nm, "map")) {
        obj *l = jj_to_list(r, x), *o = jj_lnew(r, 0);
        val *attr = jj_argp(a, -1, "attribute");
        val *fn = attr ? NULL : jj_argp(a, 0, NULL);
        if (!attr && (!fn || fn->t != T_STR)) jj_die(r, "map needs a filter name or attribute=");
        if (fn && (!jj_in_list(jj_filters, fn->u.o->s) || !strcmp(fn->u.o->s, "map"))) jj_die(r, "no filter named '%s'", fn->u.o->s);
        args sub = shift(a, 1);
        val *dflt = jj_argp(a, -1, "default");
        for (int i = 0; i < l->n; i++) {
            val v;
            if (attr) {
                v = attr_path(r, l->v[i], attr);
                if (v.t == T_UNDEF && dflt) { jj_unref(r, v); v = ref(*dflt); }
            } else v = jj_filter(r, fn->u.o->s, l->v[i], &sub);
            jj_lpush(r, o, v);
        }
        jj_unref(r, lval(l));
        return lval(o);
    }
    if (!strcmp(nm, "select")) return select_(r, x, a, 0, 0);
    if (!strcmp(nm, "reject")) return select_(r, x, a, 0, 1);
    if (!strcmp(nm, "selectattr")) return select_(r, x, a, 1, 0);
    if (!strcmp(nm, "rejectattr")) return select_(r, x, a, 1, 1);
    if (!strcmp(nm, "sort") || !strcmp(nm, "dictsort")) {
        int d = nm[0] == 'd';
        int cs = jj_arg_bool(a, d ? 0 : 1, "case_sensitive", 0), rev = jj_arg_bool(a, d ? 2 : 0, "reverse", 0);
        val *attr = d ? NULL : jj_argp(a, 2, "attribute");
        int by_value = 0;
        if (d) {
            val *by = arg_str(r, a, 1, "by");
            if (by && !strcmp(by->u.o->s, "value")) by_value = 1;
            else if (by && strcmp(by->u.o->s, "key")) jj_die(r, "You can only sort by either \"key\" or \"value\"");
            if (x.t != T_DICT || x.u.o->flag) jj_die(r, "dictsort needs a mapping");
        }
        obj *l = d ? jj_dict_items(r, x.u.o) : jj_to_list(r, x), *keys = jj_lnew(r, 0);
        for (int i = 0; i < l->n; i++) {
            val it = d ? l->v[i].u.o->v[by_value] : l->v[i];
            jj_lpush(r, keys, sort_key(r, it, attr, cs));
        }
        obj *o = sorted(r, l, keys, rev);
        jj_unref(r, lval(keys)); jj_unref(r, lval(l));
        return lval(o);
    }
    if (!strcmp(nm, "unique")) {
        int cs = jj_arg_bool(a, 0, "case_sensitive", 0);
        val *attr = jj_argp(a, 1, "attribute");
        obj *l = jj_to_list(r, x), *o = jj_lnew(r, 0), *seen = jj_lnew(r, 0);
        for (int i = 0; i < l->n; i++) {
            val k = sort_key(r, l->v[i], attr, cs);
            int dup = 0;
            for (int j = 0; j < seen->n && !dup; j++) dup = jj_eq(r, seen->v[j], k, 0);
            if (dup) jj_unref(r, k);
            else { jj_lpush(r, seen, k); jj_lpush(r, o, ref(l->v[i])); }
        }
        jj_unref(r, lval(seen)); jj_unref(r, lval(l));
        return lval(o);
    }
    if (!strcmp(nm, "min") || !strcmp(nm, "max")) return minmax(r, x, a, nm[1] == 'a');
    if (!strcmp(nm, "sum")) {
        val *attr = jj_argp(a, 0, "attribute"), *start = jj_argp(a, 1, "start");
        obj *l = jj_to_list(r, x);
        val acc = start ? ref(*start) : vint(0);
        for (int i = 0; i < l->n; i++) {
            val it = attr ? attr_path(r, l->v[i], attr) : ref(l->v[i]);
            val nx = jj_arith(r, '+', acc, it);
            jj_unref(r, acc); jj_unref(r, it);
            acc = nx;
        }
        jj_unref(r, lval(l));
        return acc;
    }
    if (!strcmp(nm, "batch")) {
        int64_t n = jj_arg_int(r, a, 0, "linecount", 1);
        val *fill = jj_argp(a, 1, "fill_with");
        if (n <= 0) jj_die(r, "batch size must be positive");
        obj *l = jj_to_list(r, x), *o = jj_lnew(r, 0), *cur = NULL;
        for (int i = 0; i < l->n; i++) {
            if (!cur) cur = jj_lnew(r, 0);
            jj_lpush(r, cur, ref(l->v[i]));
            if (cur->n == n) { jj_lpush(r, o, lval(cur)); cur = NULL; }
        }
        if (cur) {
            while (fill && cur->n < n) jj_lpush(r, cur, ref(*fill));
            jj_lpush(r, o, lval(cur));
        }
        jj_unref(r, lval(l));
        return lval(o);
    }
    if (!strcmp(nm, "abs")) {
        if (x.t == T_UNDEF) jj_undef_fail(r, x);
        if (isint(x)) { if (x.u.i == INT64_MIN) jj_die(r, "integer overflow (ints are 64-bit here)"); return vint(x.u.i < 0 ? -x.u.i : x.u.i); }
        if (x.t == T_FLOAT) return vflt(fabs(x.u.f));
        jj_die(r, "bad operand type for abs(): '%s'", jj_tname(x));
    }
    if (!strcmp(nm, "attr")) {
        val *n = arg_str(r, a, 0, "name");
        if (!n) jj_die(r, "attr needs a name");
        return jj_getattr(r, x, n->u.o->s, n->u.o->len);
    }
    if (!strcmp(nm, "round")) {
        val *m = arg_str(r, a, 1, "method");
        return round_(r, x, jj_arg_int(r, a, 0, "precision", 0), m ? m->u.o->s : "common");
    }
    if (!strcmp(nm, "int")) {
        val *dv = jj_argp(a, 0, "default");
        int64_t base = jj_arg_int(r, a, 1, "base", 10), iv;
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
        val *dv = jj_argp(a, 0, "default");
        double f;
        if (isnum(x)) return vflt(num(x));
        if (x.t == T_STR && parse_float(x.u.o->s, x.u.o->len, &f)) return vflt(f);
        return dv ? ref(*dv) : vflt(0.0);
    }
    /* the rest work on str(x) */
    val s = jj_to_str(r, x), res;
    const char *p = s.u.o->s;
    size_t n = s.u.o->len;
    if (!strcmp(nm, "upper")) res = jj_casemap(r, p, n, C_UPPER);
    else if (!strcmp(nm, "lower")) res = jj_casemap(r, p, n, C_LOWER);
    else if (!strcmp(nm, "capitalize")) res = jj_casemap(r, p, n, C_CAPITALIZE);
    else if (!strcmp(nm, "title")) res = jj_casemap(r, p, n, C_JTITLE);
    else if (!strcmp(nm, "trim")) res = jj_str_strip(r, s, jj_argp(a, 0, "chars"), 3);
    else if (!strcmp(nm, "replace")) {
        val *o = jj_argp(a, 0, "old"), *w = jj_argp(a, 1, "new");
        if (!o || !w) jj_die(r, "replace needs two arguments");
        val os = jj_to_str(r, *o), ws = jj_to_str(r, *w);
        res = jj_str_replace(r, s, os, ws, jj_arg_int(r, a, 2, "count", -1));
        jj_unref(r, os); jj_unref(r, ws);
    } else if (!strcmp(nm, "indent")) res = indent_(r, s, a);
    else if (!strcmp(nm, "center")) {
        int64_t w = jj_arg_int(r, a, 0, "width", 80), len = (int64_t)jj_cplen(p, n);
        obj *o = jj_snew(r);
        if (w > len) {
            int64_t marg = w - len, left = marg / 2 + (marg & w & 1);
            if (marg > (int64_t)MAX_STR) jj_die(r, "string or output longer than 256 MiB");
            for (int64_t i = 0; i < left; i++) jj_sputc(r, o, ' ');
            jj_sput(r, o, p, n);
            for (int64_t i = 0; i < marg - left; i++) jj_sputc(r, o, ' ');
        } else jj_sput(r, o, p, n);
        res = sval(o);
    } else if (!strcmp(nm, "wordcount")) {
        int64_t k = 0;
        int inw = 0;
        for (size_t i = 0; i < n;) {
            uint32_t c = u8dec(p, n, &i);
            int w = jj_cp_alpha(c) || cp_digit(c) || c == '_';
            k += w && !inw;
            inw = w;
        }
        res = vint(k);
    } else jj_die(r, "unknown filter '%s'", nm);
    jj_unref(r, s);
    return res;
}

