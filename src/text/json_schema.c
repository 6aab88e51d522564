/* JSON Schema to a grammar (json_grammar.h): each schema object becomes a node; $ref
 * (#/$defs/..., #/definitions/..., any JSON pointer into the schema) is an edge to the node
 * of its target, compiled once, so recursion is a cycle. Supported: type (one or a list),
 * properties/required/additionalProperties, items/prefixItems/minItems/maxItems,
 * minLength/maxLength, minimum/maximum/exclusiveMinimum/exclusiveMaximum, enum, const, anyOf,
 * allOf of one schema, $ref. Annotations are ignored; any other keyword is refused by name.
 * Then each node's shortest value is found (a fixed point, for the cycles), and a schema
 * whose root has none is refused. */
#include "skiplm_base.h"
#include "skiplm_text.h"
#include "text/json_grammar.h"
#include "base/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NODES 20000
#define MAX_COUNT 1000000              /* minLength, minItems, ... beyond this are refused (max: unbounded) */

typedef struct {
    sk_jg *g;
    const sk_json *doc;
    char **ref_ptr;                    /* $ref targets compiled so far, and their nodes */
    int32_t *ref_node;
    int n_ref, cap_ref;
} cctx;

static const char *const ANNOTATIONS[] = {"title", "description", "examples", "default", "$schema", "$id", "$comment",
                                          "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "$anchor", NULL};
static const char *const KEYWORDS[] = {"type", "properties", "required", "additionalProperties", "items", "prefixItems",
                                       "minItems", "maxItems", "minLength", "maxLength", "minimum", "maximum",
                                       "exclusiveMinimum", "exclusiveMaximum", "enum", "const", "anyOf", "allOf", "$ref",
                                       "uniqueItems", NULL};

static int in_list(const char *k, const char *const *l) {
    for (; *l; l++) if (!strcmp(k, *l)) return 1;
    return 0;
}

static int32_t new_node(cctx *c, int kind) {
    sk_jg *g = c->g;
    if (g->n >= MAX_NODES) return -1;
    if (g->n == g->cap) {
        int nc = g->cap ? 2 * g->cap : 32;
        jg_node *t = realloc(g->nodes, sizeof *t * nc);
        if (!t) return -1;
        g->nodes = t; g->cap = nc;
    }
    jg_node *n = &g->nodes[g->n];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->value = n->items = -1;
    n->max_items = n->max_len = UINT32_MAX;
    n->minlen = JG_INF;
    return g->n++;
}
#define NODE(c, i) (&(c)->g->nodes[i])

static int oom(void) { return sk_error(SK_ENOMEM, "out of memory compiling the schema"); }

static int alt_add(jg_node *n, int32_t a) {
    int32_t *t = realloc(n->alt, sizeof *t * (n->n_alt + 1));
    if (!t) return oom();
    n->alt = t;
    n->alt[n->n_alt++] = a;
    return 0;
}

/* ------------------------------------------------------------ canonical JSON text */

typedef struct { char *s; size_t len, cap; int bad; } tbuf;
static void traw(tbuf *b, const char *s, size_t n) { if (!b->bad && sk_json_write_raw(&b->s, &b->len, &b->cap, s, n)) b->bad = 1; }
static void tstr(tbuf *b, const char *s, size_t n) { if (!b->bad && sk_json_write_str(&b->s, &b->len, &b->cap, s, n)) b->bad = 1; }
static void tnum(tbuf *b, double v) {
    char t[40];
    if (v == floor(v) && fabs(v) < 9007199254740992.0) snprintf(t, sizeof t, "%.0f", v);
    else {
        for (int p = 15; p <= 17; p++) {
            snprintf(t, sizeof t, "%.*g", p, v);
            if (strtod(t, NULL) == v) break;
        }
    }
    traw(b, t, strlen(t));
}
/* v as compact JSON: the exact bytes an enum's value must be written as */
static void tjson(tbuf *b, const sk_json *v) {
    switch (v->type) {
    case SK_JSON_NULL: traw(b, "null", 4); break;
    case SK_JSON_BOOL: v->boolean ? traw(b, "true", 4) : traw(b, "false", 5); break;
    case SK_JSON_NUM: tnum(b, v->num); break;
    case SK_JSON_STR: tstr(b, v->str, v->str_len); break;
    case SK_JSON_ARR:
        traw(b, "[", 1);
        for (int i = 0; i < v->n; i++) { if (i) traw(b, ",", 1); tjson(b, &v->items[i]); }
        traw(b, "]", 1);
        break;
    case SK_JSON_OBJ:
        traw(b, "{", 1);
        for (int i = 0; i < v->n; i++) {
            if (i) traw(b, ",", 1);
            tstr(b, v->keys[i], v->key_lens[i]);
            traw(b, ":", 1);
            tjson(b, &v->items[i]);
        }
        traw(b, "}", 1);
        break;
    }
}

static int bytes_cmp(const char *a, uint32_t na, const char *b, uint32_t nb) {
    int r = memcmp(a, b, na < nb ? na : nb);
    return r ? r : na < nb ? -1 : na > nb;
}

/* ------------------------------------------------------------ enums */

typedef struct { char *s; uint32_t n; } cand;
static int by_bytes(const void *x, const void *y) {
    const cand *a = x, *b = y;
    return bytes_cmp(a->s, a->n, b->s, b->n);
}

/* an enum node of the values (those of a type in types when given) */
static int enum_node(cctx *c, const sk_json *vals, int nv, const unsigned *types, int32_t *out, const char *path) {
    cand *cs = calloc(nv ? nv : 1, sizeof *cs);
    if (!cs) return oom();
    int n = 0;
    for (int i = 0; i < nv; i++) {
        if (types && !(*types & (1u << vals[i].type))) continue;
        if (types && vals[i].type == SK_JSON_NUM && !(*types & (1u << 8)) && vals[i].num != floor(vals[i].num)) continue;
        tbuf b = {0};
        tjson(&b, &vals[i]);
        if (b.bad || b.len > 65536) { free(b.s); for (int k = 0; k < n; k++) free(cs[k].s); free(cs); return b.bad ? oom() : sk_error(SK_EINVAL, "an enum value at %s is too long", path); }
        cs[n].s = b.s; cs[n++].n = (uint32_t)b.len;
    }
    if (!n) { free(cs); return sk_error(SK_EINVAL, "the enum at %s has no value of its type", path); }
    qsort(cs, n, sizeof *cs, by_bytes);
    int w = 0;                                          /* duplicates once */
    for (int i = 0; i < n; i++) {
        if (w && !bytes_cmp(cs[w - 1].s, cs[w - 1].n, cs[i].s, cs[i].n)) { free(cs[i].s); continue; }
        cs[w++] = cs[i];
    }
    int32_t id = new_node(c, JG_ENUM);
    jg_node *nd = id >= 0 ? NODE(c, id) : NULL;
    if (nd) { nd->cand = malloc(sizeof(char *) * w); nd->cand_len = malloc(sizeof(uint32_t) * w); }
    if (!nd || !nd->cand || !nd->cand_len) {
        for (int i = 0; i < w; i++) free(cs[i].s);
        free(cs);
        return id < 0 ? sk_error(SK_EINVAL, "the schema is too large (more than %d nodes)", MAX_NODES) : oom();
    }
    for (int i = 0; i < w; i++) { nd->cand[i] = cs[i].s; nd->cand_len[i] = cs[i].n; }
    nd->n_cand = w;
    free(cs);
    *out = id;
    return 0;
}

/* ------------------------------------------------------------ one schema */

static int compile(cctx *c, const sk_json *v, const char *path, int32_t *out);

static int count_kw(const sk_json *o, const char *k, uint32_t *out, int is_max, const char *path) {
    const sk_json *v = sk_json_get(o, k);
    if (!v) return 0;
    if (v->type != SK_JSON_NUM || v->num < 0 || v->num != floor(v->num))
        return sk_error(SK_EINVAL, "'%s' at %s must be a non-negative integer", k, path);
    if (v->num > MAX_COUNT) {
        if (is_max) return 0;
        return sk_error(SK_EINVAL, "'%s' at %s is too large (at most %d)", k, path, MAX_COUNT);
    }
    *out = (uint32_t)v->num;
    return 0;
}

static int num_kw(const sk_json *o, const char *k, double *out, int *have, const char *path) {
    const sk_json *v = sk_json_get(o, k);
    if (!v) return 0;
    if (v->type != SK_JSON_NUM) return sk_error(SK_EINVAL, "'%s' at %s must be a number", k, path);
    *out = v->num;
    *have = 1;
    return 0;
}

static int64_t pow10i(int e) { int64_t r = 1; while (e-- > 0) r *= 10; return r; }

/* x * 10^frac rounded up (up) or down, where a float error of a few ulps is no fraction */
static int64_t scaled(double x, int frac, int up, int64_t cap) {
    double s = x * (double)pow10i(frac);
    if (s >= (double)cap) return cap;
    if (s <= -(double)cap) return -cap;
    double r = nearbyint(s);
    if (fabs(s - r) <= 1e-9 * (fabs(s) > 1 ? fabs(s) : 1)) return (int64_t)r;
    return (int64_t)(up ? ceil(s) : floor(s));
}

static int number_node(cctx *c, const sk_json *o, int integer, int32_t *out, const char *path) {
    double mn = 0, mx = 0, emn = 0, emx = 0;
    int hmn = 0, hmx = 0, hemn = 0, hemx = 0;
    if (num_kw(o, "minimum", &mn, &hmn, path) || num_kw(o, "maximum", &mx, &hmx, path)) return 1;
    const sk_json *e;
    if ((e = sk_json_get(o, "exclusiveMinimum")) && e->type == SK_JSON_BOOL) { if (e->boolean && hmn) { emn = mn; hemn = 1; hmn = 0; } }
    else if (num_kw(o, "exclusiveMinimum", &emn, &hemn, path)) return 1;
    if ((e = sk_json_get(o, "exclusiveMaximum")) && e->type == SK_JSON_BOOL) { if (e->boolean && hmx) { emx = mx; hemx = 1; hmx = 0; } }
    else if (num_kw(o, "exclusiveMaximum", &emx, &hemx, path)) return 1;
    int32_t id = new_node(c, JG_NUM);
    if (id < 0) return oom();
    jg_node *nd = NODE(c, id);
    nd->bounded = hmn || hmx || hemn || hemx;
    nd->frac = integer ? 0 : nd->bounded ? 6 : 15;
    nd->int_cap = integer ? 15 : nd->bounded ? 12 : 15;
    *out = id;
    if (!nd->bounded) return 0;
    const int64_t cap = pow10i(nd->int_cap + nd->frac) - 1;      /* at most 10^18 - 1 */
    nd->lo = -cap; nd->hi = cap;
    if (hmn) { int64_t l = scaled(mn, nd->frac, 1, cap); if (l > nd->lo) nd->lo = l; }
    if (hemn) { int64_t l = scaled(emn, nd->frac, 0, cap) + 1; if (l > nd->lo) nd->lo = l; }
    if (hmx) { int64_t h = scaled(mx, nd->frac, 0, cap); if (h < nd->hi) nd->hi = h; }
    if (hemx) { int64_t h = scaled(emx, nd->frac, 1, cap) - 1; if (h < nd->hi) nd->hi = h; }
    if (nd->lo > nd->hi)
        return sk_error(SK_EINVAL, "no %s at %s lies in its range", integer ? "integer" : "number (of at most 6 decimals)", path);
    *out = id;
    return 0;
}

static int string_node(cctx *c, const sk_json *o, int32_t *out, const char *path) {
    uint32_t mn = 0, mx = UINT32_MAX;
    if (count_kw(o, "minLength", &mn, 0, path) || count_kw(o, "maxLength", &mx, 1, path)) return 1;
    if (mn > mx) return sk_error(SK_EINVAL, "minLength exceeds maxLength at %s", path);
    int32_t id = new_node(c, JG_STR);
    if (id < 0) return oom();
    NODE(c, id)->min_len = mn; NODE(c, id)->max_len = mx;
    *out = id;
    return 0;
}

static int object_node(cctx *c, const sk_json *o, int32_t *out, const char *path) {
    const sk_json *props = sk_json_get(o, "properties"), *req = sk_json_get(o, "required"), *add = sk_json_get(o, "additionalProperties");
    if (props && props->type != SK_JSON_OBJ) return sk_error(SK_EINVAL, "'properties' at %s must be an object", path);
    if (req && req->type != SK_JSON_ARR) return sk_error(SK_EINVAL, "'required' at %s must be a list of names", path);
    if (add && add->type != SK_JSON_BOOL && add->type != SK_JSON_OBJ)
        return sk_error(SK_EINVAL, "'additionalProperties' at %s must be a boolean or a schema", path);
    const int np = props ? props->n : 0;
    char sub[512];
    if (!np) {
        /* no declared properties: {} only, or a map of any keys to additionalProperties' values */
        if (req && req->n) return sk_error(SK_EINVAL, "'required' at %s names '%s', which is not in 'properties'", path,
                                           req->items[0].type == SK_JSON_STR ? req->items[0].str : "?");
        if (add && add->type == SK_JSON_BOOL && !add->boolean) {
            int32_t id = new_node(c, JG_OBJ);
            if (id < 0) return oom();
            *out = id;
            return 0;
        }
        int32_t val = JG_N_ANY;
        snprintf(sub, sizeof sub, "%s/additionalProperties", path);
        if (add && add->type == SK_JSON_OBJ && compile(c, add, sub, &val)) return 1;
        int32_t id = new_node(c, JG_MAP);
        if (id < 0) return oom();
        NODE(c, id)->value = val;
        *out = id;
        return 0;
    }
    /* declared properties: only those are written (which every additionalProperties allows) */
    if (np > JG_MAX_PROPS) return sk_error(SK_EINVAL, "the object at %s has %d properties (at most %d are supported)", path, np, JG_MAX_PROPS);
    int32_t id = new_node(c, JG_OBJ);
    if (id < 0) return oom();
    jg_prop *ps = calloc(np, sizeof *ps);
    if (!ps) return oom();
    NODE(c, id)->props = ps;
    NODE(c, id)->n_props = np;
    for (int i = 0; i < np; i++) {
        tbuf b = {0};
        tstr(&b, props->keys[i], props->key_lens[i]);
        if (b.bad) { free(b.s); return oom(); }
        ps[i].key = b.s; ps[i].len = (uint32_t)b.len;
        for (int k = 0; k < i; k++)
            if (ps[k].len == b.len && !memcmp(ps[k].key, b.s, b.len))
                return sk_error(SK_EINVAL, "the property '%s' at %s is declared twice", props->keys[i], path);
        snprintf(sub, sizeof sub, "%s/properties/%.200s", path, props->keys[i]);
        int32_t child;
        if (compile(c, &props->items[i], sub, &child)) return 1;
        ps = NODE(c, id)->props;                        /* (nodes may have moved; props did not) */
        ps[i].node = child;
    }
    for (int r = 0; req && r < req->n; r++) {
        const sk_json *k = &req->items[r];
        if (k->type != SK_JSON_STR) return sk_error(SK_EINVAL, "'required' at %s must be a list of names", path);
        int found = 0;
        for (int i = 0; i < np; i++)
            if (props->key_lens[i] == k->str_len && !memcmp(props->keys[i], k->str, k->str_len)) { ps[i].required = 1; found = 1; }
        if (!found) return sk_error(SK_EINVAL, "'required' at %s names '%.100s', which is not in 'properties'", path, k->str);
    }
    /* sorted by their JSON text: the keys that share a prefix are neighbours */
    for (int i = 1; i < np; i++)
        for (int k = i; k > 0 && bytes_cmp(ps[k].key, ps[k].len, ps[k - 1].key, ps[k - 1].len) < 0; k--) {
            jg_prop t = ps[k]; ps[k] = ps[k - 1]; ps[k - 1] = t;
        }
    uint64_t rq = 0;
    for (int i = 0; i < np; i++) if (ps[i].required) rq |= (uint64_t)1 << i;
    NODE(c, id)->req = rq;
    *out = id;
    return 0;
}

static int array_node(cctx *c, const sk_json *o, int32_t *out, const char *path) {
    const sk_json *items = sk_json_get(o, "items"), *pre = sk_json_get(o, "prefixItems"), *uq = sk_json_get(o, "uniqueItems");
    if (uq && !(uq->type == SK_JSON_BOOL && !uq->boolean)) return sk_error(SK_EINVAL, "'uniqueItems' at %s is not supported", path);
    if (items && items->type == SK_JSON_ARR) return sk_error(SK_EINVAL, "'items' as a list at %s is not supported (use 'prefixItems')", path);
    if (items && items->type != SK_JSON_OBJ && items->type != SK_JSON_BOOL) return sk_error(SK_EINVAL, "'items' at %s must be a schema", path);
    if (pre && pre->type != SK_JSON_ARR) return sk_error(SK_EINVAL, "'prefixItems' at %s must be a list of schemas", path);
    uint32_t mn = 0, mx = UINT32_MAX;
    if (count_kw(o, "minItems", &mn, 0, path) || count_kw(o, "maxItems", &mx, 1, path)) return 1;
    if (mn > mx) return sk_error(SK_EINVAL, "minItems exceeds maxItems at %s", path);
    int32_t id = new_node(c, JG_ARR);
    if (id < 0) return oom();
    char sub[512];
    int32_t it = JG_N_ANY;
    if (items && items->type == SK_JSON_BOOL) it = items->boolean ? JG_N_ANY : -1;
    else if (items) {
        snprintf(sub, sizeof sub, "%s/items", path);
        if (compile(c, items, sub, &it)) return 1;
    }
    const int npre = pre ? pre->n : 0;
    int32_t *pf = npre ? calloc(npre, sizeof *pf) : NULL;
    if (npre && !pf) return oom();
    NODE(c, id)->prefix = pf;
    NODE(c, id)->n_prefix = npre;
    for (int i = 0; i < npre; i++) {
        snprintf(sub, sizeof sub, "%s/prefixItems/%d", path, i);
        int32_t ch;
        if (compile(c, &pre->items[i], sub, &ch)) return 1;
        NODE(c, id)->prefix[i] = ch;
    }
    jg_node *nd = NODE(c, id);
    nd->items = it;
    if (it < 0 && mx > (uint32_t)npre) mx = (uint32_t)npre;
    if (mn > mx) return sk_error(SK_EINVAL, "the array at %s cannot have minItems %u items", path, mn);
    nd->min_items = mn; nd->max_items = mx;
    *out = id;
    return 0;
}

/* the node of a JSON pointer into the schema ("#", "#/$defs/Name", ...), compiled once */
static int resolve(cctx *c, const char *ref, int32_t *out, const char *path) {
    for (int i = 0; i < c->n_ref; i++) if (!strcmp(c->ref_ptr[i], ref)) { *out = c->ref_node[i]; return 0; }
    if (ref[0] != '#') return sk_error(SK_EINVAL, "the $ref '%.200s' at %s is not within the schema (only '#...' refs are supported)", ref, path);
    const sk_json *v = c->doc;
    const char *p = ref + 1;
    while (*p) {
        if (*p != '/') return sk_error(SK_EINVAL, "the $ref '%.200s' at %s is not a JSON pointer", ref, path);
        p++;
        char tok[256];
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~') { p++; if (*p == '0') ch = '~'; else if (*p == '1') ch = '/'; else return sk_error(SK_EINVAL, "the $ref '%.200s' at %s is not a JSON pointer", ref, path); }
            if (n + 1 >= sizeof tok) return sk_error(SK_EINVAL, "the $ref '%.200s' at %s is too long", ref, path);
            tok[n++] = ch;
        }
        tok[n] = 0;
        const sk_json *next = NULL;
        if (v->type == SK_JSON_OBJ) {
            for (int i = 0; i < v->n; i++) if (v->key_lens[i] == n && !memcmp(v->keys[i], tok, n)) { next = &v->items[i]; break; }
        } else if (v->type == SK_JSON_ARR) {
            char *end;
            long k = strtol(tok, &end, 10);
            if (n && !*end && k >= 0 && k < v->n) next = &v->items[k];
        }
        if (!next) return sk_error(SK_EINVAL, "the $ref '%.200s' at %s points at nothing", ref, path);
        v = next;
    }
    if (c->n_ref == c->cap_ref) {
        int nc = c->cap_ref ? 2 * c->cap_ref : 8;
        char **a = realloc(c->ref_ptr, sizeof *a * nc);
        if (!a) return oom();
        c->ref_ptr = a;
        int32_t *b = realloc(c->ref_node, sizeof *b * nc);
        if (!b) return oom();
        c->ref_node = b;
        c->cap_ref = nc;
    }
    /* the target's node is an alternative of one, made before the target is compiled: a ref
     * back to it (recursion) finds it */
    int32_t id = new_node(c, JG_ALT);
    if (id < 0) return sk_error(SK_EINVAL, "the schema is too large (more than %d nodes)", MAX_NODES);
    if (!(c->ref_ptr[c->n_ref] = strdup(ref))) return oom();
    c->ref_node[c->n_ref++] = id;
    int32_t t;
    if (compile(c, v, ref, &t)) return 1;
    if (alt_add(NODE(c, id), t)) return 1;
    *out = id;
    return 0;
}

static const char *const TYPES[] = {"null", "boolean", "object", "array", "number", "string", "integer", NULL};

/* one type's node for schema o */
static int typed(cctx *c, const sk_json *o, const char *type, int32_t *out, const char *path) {
    if (!strcmp(type, "object")) return object_node(c, o, out, path);
    if (!strcmp(type, "array")) return array_node(c, o, out, path);
    if (!strcmp(type, "string")) return string_node(c, o, out, path);
    if (!strcmp(type, "number")) return number_node(c, o, 0, out, path);
    if (!strcmp(type, "integer")) return number_node(c, o, 1, out, path);
    static const sk_json fls = {.type = SK_JSON_BOOL, .boolean = 0}, tru = {.type = SK_JSON_BOOL, .boolean = 1}, nul = {.type = SK_JSON_NULL};
    sk_json vals[2];
    if (!strcmp(type, "boolean")) { vals[0] = fls; vals[1] = tru; return enum_node(c, vals, 2, NULL, out, path); }
    vals[0] = nul;
    return enum_node(c, vals, 1, NULL, out, path);
}

static int compile(cctx *c, const sk_json *v, const char *path, int32_t *out) {
    if (v->type == SK_JSON_BOOL) {
        if (!v->boolean) return sk_error(SK_EINVAL, "the schema at %s is false: no value is allowed", path);
        *out = JG_N_ANY;
        return 0;
    }
    if (v->type != SK_JSON_OBJ) return sk_error(SK_EINVAL, "the schema at %s must be an object or a boolean, not %s", path, sk_json_type_name(v->type));
    int n_valid = 0;                                   /* keywords that constrain */
    for (int i = 0; i < v->n; i++) {
        if (in_list(v->keys[i], ANNOTATIONS)) continue;
        if (!in_list(v->keys[i], KEYWORDS)) return sk_error(SK_EINVAL, "'%.100s' at %s is not supported", v->keys[i], path);
        n_valid++;
    }
    const sk_json *ref = sk_json_get(v, "$ref"), *any = sk_json_get(v, "anyOf"), *all = sk_json_get(v, "allOf");
    const sk_json *en = sk_json_get(v, "enum"), *cn = sk_json_get(v, "const"), *ty = sk_json_get(v, "type");
    char sub[512];
    if (ref || all || any) {
        const char *kw = ref ? "$ref" : all ? "allOf" : "anyOf";
        if (n_valid > 1) return sk_error(SK_EINVAL, "'%s' beside other keywords at %s is not supported", kw, path);
        if (ref) {
            if (ref->type != SK_JSON_STR) return sk_error(SK_EINVAL, "'$ref' at %s must be a string", path);
            return resolve(c, ref->str, out, path);
        }
        const sk_json *l = all ? all : any;
        if (l->type != SK_JSON_ARR || !l->n) return sk_error(SK_EINVAL, "'%s' at %s must be a non-empty list of schemas", kw, path);
        if (all && l->n != 1) return sk_error(SK_EINVAL, "'allOf' at %s with more than one schema is not supported", path);
        int32_t id = new_node(c, JG_ALT);
        if (id < 0) return sk_error(SK_EINVAL, "the schema is too large (more than %d nodes)", MAX_NODES);
        for (int i = 0; i < l->n; i++) {
            snprintf(sub, sizeof sub, "%s/%s/%d", path, kw, i);
            int32_t a;
            if (compile(c, &l->items[i], sub, &a) || alt_add(NODE(c, id), a)) return 1;
        }
        *out = id;
        return 0;
    }
    /* the types: named, or implied by the keywords */
    const char *types[8];
    int nt = 0;
    if (ty) {
        const sk_json *tl = ty->type == SK_JSON_ARR ? ty->items : ty;
        const int n = ty->type == SK_JSON_ARR ? ty->n : 1;
        if (!n) return sk_error(SK_EINVAL, "'type' at %s is an empty list", path);
        for (int i = 0; i < n; i++) {
            if (tl[i].type != SK_JSON_STR || !in_list(tl[i].str, TYPES))
                return sk_error(SK_EINVAL, "'type' at %s must be one of null, boolean, object, array, number, string, integer (or a list of them)", path);
            if (nt < 7) types[nt++] = tl[i].str;
        }
    }
    if (en || cn) {
        if (en && (en->type != SK_JSON_ARR || !en->n)) return sk_error(SK_EINVAL, "'enum' at %s must be a non-empty list", path);
        unsigned mask = 0;
        for (int i = 0; i < nt; i++) {
            const char *t = types[i];
            mask |= !strcmp(t, "null") ? 1u << SK_JSON_NULL : !strcmp(t, "boolean") ? 1u << SK_JSON_BOOL : !strcmp(t, "object") ? 1u << SK_JSON_OBJ
                  : !strcmp(t, "array") ? 1u << SK_JSON_ARR : !strcmp(t, "string") ? 1u << SK_JSON_STR
                  : !strcmp(t, "number") ? (1u << SK_JSON_NUM) | (1u << 8) : 1u << SK_JSON_NUM;
        }
        if (cn && en) return sk_error(SK_EINVAL, "'enum' beside 'const' at %s is not supported", path);
        return enum_node(c, en ? en->items : cn, en ? en->n : 1, nt ? &mask : NULL, out, path);
    }
    if (!nt) {
        static const char *const implied[][2] = {{"properties", "object"}, {"required", "object"}, {"additionalProperties", "object"},
                                                 {"items", "array"}, {"prefixItems", "array"}, {"minItems", "array"}, {"maxItems", "array"},
                                                 {"minLength", "string"}, {"maxLength", "string"}, {"minimum", "number"}, {"maximum", "number"},
                                                 {"exclusiveMinimum", "number"}, {"exclusiveMaximum", "number"}};
        for (size_t i = 0; i < sizeof implied / sizeof *implied && !nt; i++)
            if (sk_json_get(v, implied[i][0])) types[nt++] = implied[i][1];
        if (!nt) { *out = JG_N_ANY; return 0; }
    }
    if (nt == 1) return typed(c, v, types[0], out, path);
    int32_t id = new_node(c, JG_ALT);
    if (id < 0) return sk_error(SK_EINVAL, "the schema is too large (more than %d nodes)", MAX_NODES);
    for (int i = 0; i < nt; i++) {
        int32_t a;
        if (typed(c, v, types[i], &a, path) || alt_add(NODE(c, id), a)) return 1;
    }
    *out = id;
    return 0;
}

/* ------------------------------------------------------------ the graph */

static int builtins(cctx *c) {
    for (int k = 0; k < JG_N_BUILTIN; k++) if (new_node(c, JG_ALT) != k) return oom();
    jg_node *n = c->g->nodes;
    n[JG_N_STR].kind = JG_STR;
    n[JG_N_NUM].kind = JG_NUM; n[JG_N_NUM].int_cap = 15; n[JG_N_NUM].frac = 15;
    n[JG_N_OBJ].kind = JG_MAP; n[JG_N_OBJ].value = JG_N_ANY;
    n[JG_N_ARR].kind = JG_ARR; n[JG_N_ARR].items = JG_N_ANY;
    static const char *const lits[] = {"false", "null", "true"};
    n[JG_N_LIT].kind = JG_ENUM;
    n[JG_N_LIT].cand = malloc(sizeof(char *) * 3);
    n[JG_N_LIT].cand_len = malloc(sizeof(uint32_t) * 3);
    if (!n[JG_N_LIT].cand || !n[JG_N_LIT].cand_len) return oom();
    for (int i = 0; i < 3; i++) {
        if (!(n[JG_N_LIT].cand[i] = strdup(lits[i]))) return oom();
        n[JG_N_LIT].cand_len[i] = (uint32_t)strlen(lits[i]);
        n[JG_N_LIT].n_cand = i + 1;
    }
    const int32_t any[] = {JG_N_OBJ, JG_N_ARR, JG_N_STR, JG_N_NUM, JG_N_LIT};
    for (int i = 0; i < 5; i++) if (alt_add(&n[JG_N_ANY], any[i])) return 1;
    return 0;
}

/* each alternative node's leaves: the nodes that are not alternatives, reached through them */
static int flatten(sk_jg *g) {
    char *seen = malloc(g->n);
    int32_t *todo = malloc(sizeof(int32_t) * g->n), *leaf = malloc(sizeof(int32_t) * g->n);
    if (!seen || !todo || !leaf) { free(seen); free(todo); free(leaf); return oom(); }
    int rc = 0;
    for (int i = 0; i < g->n && !rc; i++) {
        if (g->nodes[i].kind != JG_ALT) continue;
        memset(seen, 0, g->n);
        int nt = 0, nl = 0;
        todo[nt++] = i; seen[i] = 1;
        while (nt) {
            const jg_node *a = &g->nodes[todo[--nt]];
            for (int k = 0; k < a->n_alt; k++) {
                int32_t x = a->alt[k];
                if (seen[x]) continue;
                seen[x] = 1;
                if (g->nodes[x].kind == JG_ALT) todo[nt++] = x;
                else leaf[nl++] = x;
            }
        }
        int32_t *t = realloc(g->nodes[i].alt, sizeof(int32_t) * (nl ? nl : 1));
        if (!t) { rc = oom(); break; }
        memcpy(t, leaf, sizeof(int32_t) * nl);
        g->nodes[i].alt = t; g->nodes[i].n_alt = nl;
    }
    free(seen); free(todo); free(leaf);
    return rc;
}

static uint64_t add(uint64_t a, uint64_t b) { return a + b >= JG_INF ? JG_INF : a + b; }

static uint64_t node_minlen(const sk_jg *g, const jg_node *n) {
    uint64_t m = JG_INF;
    switch (n->kind) {
    case JG_ALT:
        for (int k = 0; k < n->n_alt; k++) if (g->nodes[n->alt[k]].minlen < m) m = g->nodes[n->alt[k]].minlen;
        return m;
    case JG_OBJ: {
        m = 2;
        int r = 0;
        for (int i = 0; i < n->n_props; i++)
            if (n->props[i].required) { m = add(m, add(n->props[i].len + 1, g->nodes[n->props[i].node].minlen)); r++; }
        return r ? add(m, r - 1) : m;
    }
    case JG_MAP: return 2;
    case JG_ARR:
        m = 2;
        for (uint32_t i = 0; i < n->min_items && m < JG_INF; i++) {
            int32_t e = (int)i < n->n_prefix ? n->prefix[i] : n->items;
            m = add(m, add(i ? 1 : 0, e < 0 ? JG_INF : g->nodes[e].minlen));
        }
        return m;
    case JG_STR: return 2 + (uint64_t)n->min_len;
    case JG_NUM: return jg_num_rest(n, JG_NUM_START, 0, 0, 0, 0, 0);
    case JG_ENUM:
        for (int i = 0; i < n->n_cand; i++) if (n->cand_len[i] < m) m = n->cand_len[i];
        return m;
    }
    return JG_INF;
}

void sk_jg_free(sk_jg *g) {
    if (!g) return;
    for (int i = 0; i < g->n; i++) {
        jg_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_props; k++) free(n->props[k].key);
        for (int k = 0; k < n->n_cand; k++) free(n->cand[k]);
        free(n->props); free(n->prefix); free(n->cand); free(n->cand_len); free(n->alt);
    }
    free(g->nodes);
    free(g->pre); free(g->suf);
    free(g);
}

int sk_jg_wrap(sk_jg *g, const char *prefix, const char *suffix) {
    char *p = strdup(prefix ? prefix : ""), *s = strdup(suffix ? suffix : "");
    if (!p || !s) { free(p); free(s); return oom(); }
    free(g->pre); free(g->suf);
    g->pre = p; g->suf = s;
    g->pre_len = (uint32_t)strlen(p); g->suf_len = (uint32_t)strlen(s);
    return 0;
}

int sk_jg_compile(sk_jg **out, const char *schema_json, size_t len) {
    *out = NULL;
    sk_jg *g = calloc(1, sizeof *g);
    if (!g) return oom();
    cctx c = {.g = g};
    sk_json doc = {0};
    int rc = builtins(&c);
    if (!rc && schema_json) {
        char err[200];
        if (sk_json_parse(schema_json, len, &doc, err, sizeof err)) rc = sk_error(SK_EINVAL, "the schema is not valid JSON: %s", err);
        else {
            c.doc = &doc;
            rc = compile(&c, &doc, "#", &g->root);
        }
    } else if (!rc) {
        g->root = JG_N_OBJ;
    }
    if (!rc) rc = flatten(g);
    if (!rc) {
        /* shortest values: a fixed point (a node's length depends on its children's, cycles included) */
        for (int changed = 1; changed;) {
            changed = 0;
            for (int i = 0; i < g->n; i++) {
                uint64_t m = node_minlen(g, &g->nodes[i]);
                if (m < g->nodes[i].minlen) { g->nodes[i].minlen = m; changed = 1; }
            }
        }
        if (g->nodes[g->root].minlen >= JG_INF) rc = sk_error(SK_EINVAL, "the schema allows no value of finite length");
    }
    for (int i = 0; i < c.n_ref; i++) free(c.ref_ptr[i]);
    free(c.ref_ptr); free(c.ref_node);
    sk_json_free(&doc);
    if (rc) { sk_jg_free(g); return rc; }
    *out = g;
    return 0;
}
