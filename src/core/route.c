/* Skip-Layer routing: the one place that decides which layer's K/V each query head reads,
 * built once from the config into a plan (src/core/route.h) that everything else reads.
 *
 * Paper SLA (Chen et al., the listing): layer l >= n_skip_layer sends its last n_skip_head
 * query heads to the OWN K/V of layer l - n_skip_layer (borrowing never chains).
 *
 * General table (config field `routing`, beyond the paper): rules "LAYERS:HEADS=SRC"
 * separated by ';', later rules overriding earlier ones:
 *   LAYERS  '*' or a comma list of layers and ranges ("9-11", "1,3,5")
 *   HEADS   '*' or a query head or range ("6-11")
 *   SRC     "-k": layer l-k (k >= 1), or "@j": layer j < l
 * Paper SLA 9/6 on 12 layers is "9-11:6-11=-9"; cross-layer attention (odd layers reuse the
 * K/V below) is "1,3,5,7,9,11:*=-1"; a multi-source skip is "6-11:6-8=-3;9-11:9-11=-9".
 * With '*' layers a relative source below layer 0 leaves that layer alone; an explicit
 * layer must have a valid source. Heads of one KV group must share their source.
 *
 * From the source table the plan derives what each consumer needs: the runs of heads that
 * share a source (one attention call each), which KV heads of a layer some layer reads (the
 * KV cache stores only those; the q/k/v projection computes only their columns), and which
 * layers lend K/V to a later layer (training keeps their q/k/v activations). */
#include "core/route.h"
#include "core/config.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_uint(const char **p, int *out) {
    if (**p < '0' || **p > '9') return -1;
    long v = 0;
    while (**p >= '0' && **p <= '9') { v = v * 10 + (**p - '0'); if (v > 1000000) return -1; (*p)++; }
    *out = (int)v;
    return 0;
}

/* One rule of the table at *pp: marks its layers in lay (L bytes, zeroed by the caller) and
 * writes src for them; advances *pp past the rule and its ';'. */
static int parse_rule(const sk_config *c, const char **pp, unsigned char *lay, int *src) {
    const int L = c->n_layer, H = c->n_head;
    const char *p = *pp, *rule = p, *rt = c->routing;
#define BAD(...) return sk_error(SK_EINVAL, "config: routing '%s' at offset %d: " __VA_ARGS__)
    int star = 0;
    if (*p == '*') { star = 1; memset(lay, 1, L); p++; }
    else for (;;) {
        int a, b;
        if (parse_uint(&p, &a)) BAD("expected a layer number", rt, (int)(p - rt));
        b = a;
        if (*p == '-') { p++; if (parse_uint(&p, &b)) BAD("expected a layer number", rt, (int)(p - rt)); }
        if (a > b || b >= L) BAD("layers %d-%d outside [0, %d)", rt, (int)(rule - rt), a, b, L);
        for (int l = a; l <= b; l++) lay[l] = 1;
        if (*p != ',') break;
        p++;
    }
    if (*p != ':') BAD("expected ':'", rt, (int)(p - rt));
    p++;
    int h0 = 0, h1 = H - 1;
    if (*p == '*') p++;
    else {
        if (parse_uint(&p, &h0)) BAD("expected a head number", rt, (int)(p - rt));
        h1 = h0;
        if (*p == '-') { p++; if (parse_uint(&p, &h1)) BAD("expected a head number", rt, (int)(p - rt)); }
        if (h0 > h1 || h1 >= H) BAD("heads %d-%d outside [0, %d)", rt, (int)(rule - rt), h0, h1, H);
    }
    if (*p != '=') BAD("expected '='", rt, (int)(p - rt));
    p++;
    int rel = *p == '-', k;
    if (*p != '-' && *p != '@') BAD("source must be -k (k layers below) or @j (layer j)", rt, (int)(p - rt));
    p++;
    if (parse_uint(&p, &k) || (rel && k < 1)) BAD("bad source", rt, (int)(p - rt));
    for (int l = 0; l < L; l++) {
        if (!lay[l]) continue;
        int s = rel ? l - k : k;
        if (s < 0 || s > l) {
            if (star && rel) continue;
            BAD("layer %d cannot read layer %d (sources must be at or below the layer)", rt, (int)(rule - rt), l, s);
        }
        for (int h = h0; h <= h1; h++) src[l * H + h] = s;
    }
    if (*p == ';') p++;
    else if (*p) BAD("expected ';' or the end", rt, (int)(p - rt));
#undef BAD
    *pp = p;
    return SK_OK;
}

/* src[l * H + h] for every layer and head, from the paper's rule or the table */
static int source_table(const sk_config *c, int *src) {
    const int L = c->n_layer, H = c->n_head;
    if (c->routing[0] && (c->n_skip_layer || c->n_skip_head))
        return sk_error(SK_EINVAL, "config: give either routing or n_skip_layer/n_skip_head, not both");
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++) src[l * H + h] = l;
    if (!c->routing[0]) {
        if (c->n_skip_layer > 0 && c->n_skip_head > 0 && c->n_skip_layer < L)
            for (int l = c->n_skip_layer; l < L; l++)
                for (int h = H - c->n_skip_head; h < H; h++) src[l * H + h] = l - c->n_skip_layer;
        return SK_OK;
    }
    unsigned char *lay = malloc((size_t)L);
    if (!lay) return sk_error(SK_ENOMEM, "out of memory for the routing table");
    int rc = SK_OK;
    for (const char *p = c->routing; *p && !rc;) {
        memset(lay, 0, (size_t)L);
        rc = parse_rule(c, &p, lay, src);
    }
    free(lay);
    if (rc) return rc;
    const int group = H / c->n_kv_head;
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++)
            if (src[l * H + h] != src[l * H + h / group * group])
                return sk_error(SK_EINVAL, "config: routing: layer %d heads %d and %d share a KV head but read different layers",
                                l, h / group * group, h);
    return SK_OK;
}

int sk_route_plan_build(sk_route_plan **out, const sk_config *c) {
    *out = NULL;
    const int L = c->n_layer, H = c->n_head, Hkv = c->n_kv_head;
    const size_t LH = (size_t)L * H, LK = (size_t)L * Hkv, ncol = (size_t)L * (1 + 2 * Hkv) * 2;
    /* the struct, then the int arrays (sk_route is three ints) */
    const size_t ints = LH + 3 * LH + L + LK + L + L + ncol + L;
    sk_route_plan *p = calloc(1, sizeof *p + ints * sizeof(int));
    if (!p) return sk_error(SK_ENOMEM, "out of memory for the routing plan (%d layers, %d heads)", L, H);
    int *w = (int *)(p + 1);
    p->src = w;                   w += LH;
    p->runs = (sk_route *)w;      w += 3 * LH;
    p->n_runs = w;                w += L;
    p->slot = w;                  w += LK;
    p->n_store = w;               w += L;
    p->lend_index = w;            w += L;
    p->cols = w;                  w += ncol;
    p->n_cols = w;
    p->L = L; p->H = H; p->Hkv = Hkv; p->group = H / Hkv; p->hs = c->n_embd / H;
    p->QKV = (H + 2 * Hkv) * p->hs;
    int rc = source_table(c, p->src);
    if (rc) { free(p); return rc; }
    /* who reads what: slot = 1 marks a KV head some layer reads (itself included), and
     * lend_index = 1 a layer that another layer reads (sources are at or below the reader) */
    for (int u = 0; u < L; u++)
        for (int h = 0; h < H; h++) {
            int s = p->src[(size_t)u * H + h];
            p->slot[(size_t)s * Hkv + h / p->group] = 1;
            if (s != u) p->lend_index[s] = 1;
        }
    for (int l = 0; l < L; l++) {
        p->lend_index[l] = p->lend_index[l] ? p->n_lenders++ : -1;
        int *slot = p->slot + (size_t)l * Hkv;
        for (int j = 0; j < Hkv; j++) slot[j] = slot[j] ? p->n_store[l]++ : -1;
        /* runs: consecutive heads with one source */
        sk_route *r = p->runs + (size_t)l * H;
        int n = 0;
        for (int h = 0; h < H; h++) {
            int s = p->src[(size_t)l * H + h];
            if (n && r[n - 1].src == s) r[n - 1].nh++;
            else r[n++] = (sk_route){h, 1, s};
        }
        p->n_runs[l] = n;
        /* q/k/v columns: all of q, then K and V of the stored KV heads */
        int *cr = p->cols + (size_t)l * (1 + 2 * Hkv) * 2, nc = 1, hs = p->hs;
        cr[0] = 0; cr[1] = H * hs;
        for (int kv = 0; kv < 2; kv++)
            for (int j = 0; j < Hkv;) {
                if (slot[j] < 0) { j++; continue; }
                int e = j + 1;
                while (e < Hkv && slot[e] >= 0) e++;
                int c0 = (H + kv * Hkv + j) * hs, cw = (e - j) * hs;
                if (cr[2 * (nc - 1)] + cr[2 * (nc - 1) + 1] == c0) cr[2 * (nc - 1) + 1] += cw;   /* adjacent: merged */
                else { cr[2 * nc] = c0; cr[2 * nc + 1] = cw; nc++; }
                j = e;
            }
        p->n_cols[l] = nc;
    }
    *out = p;
    return SK_OK;
}

/* ------------------------------------------------------------- public readers */

void sk_route_plan_free(sk_route_plan *plan) { free(plan); }

int sk_route_plan_runs(const sk_route_plan *p, int layer, const sk_route **runs) {
    if (layer < 0 || layer >= p->L) { *runs = NULL; return 0; }
    *runs = sk_route_run(p, layer, 0);
    return p->n_runs[layer];
}

int sk_route_plan_source(const sk_route_plan *p, int layer, int head) {
    if (layer < 0 || layer >= p->L || head < 0 || head >= p->H) return -1;
    return p->src[(size_t)layer * p->H + head];
}

int sk_route_plan_kv_stored(const sk_route_plan *p, int layer, int kv_head) {
    if (layer < 0 || layer >= p->L || kv_head < 0 || kv_head >= p->Hkv) return 0;
    return p->slot[(size_t)layer * p->Hkv + kv_head] >= 0;
}

int sk_route_plan_lends(const sk_route_plan *p, int layer) {
    return layer >= 0 && layer < p->L && p->lend_index[layer] >= 0;
}

size_t sk_route_plan_kv_bytes(const sk_route_plan *p, int layer) {
    if (layer < 0 || layer >= p->L) return 0;
    return 2 * (size_t)p->n_store[layer] * p->hs * sizeof(float);
}

/* printf onto the end of the string in buf (n bytes) */
static void append(char *buf, size_t n, const char *fmt, ...) {
    size_t l = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + l, n > l ? n - l : 0, fmt, ap);
    va_end(ap);
}
/* ",a-b" or ",a" (no comma first) */
static void append_range(char *buf, size_t n, int first, int a, int b) {
    append(buf, n, "%s%d", first ? "" : ",", a);
    if (b > a) append(buf, n, "-%d", b);
}

void sk_route_plan_describe(const sk_route_plan *p, int layer, char *buf, size_t n) {
    if (!n) return;
    buf[0] = 0;
    if (layer < 0 || layer >= p->L) return;
    const sk_route *r = sk_route_run(p, layer, 0);
    for (int i = 0; i < p->n_runs[layer]; i++) {
        append(buf, n, "%sheads ", i ? ", " : "");
        append_range(buf, n, 1, r[i].h0, r[i].h0 + r[i].nh - 1);
        append(buf, n, " -> layer %d", r[i].src);
    }
    const int *slot = p->slot + (size_t)layer * p->Hkv;
    append(buf, n, "; stores %s", p->n_store[layer] ? "K/V heads " : "no K/V");
    for (int j = 0, first = 1; j < p->Hkv;) {
        if (slot[j] < 0) { j++; continue; }
        int e = j;
        while (e + 1 < p->Hkv && slot[e + 1] >= 0) e++;
        append_range(buf, n, first, j, e);
        first = 0;
        j = e + 1;
    }
    append(buf, n, " (%zu bytes per token)", sk_route_plan_kv_bytes(p, layer));
    if (p->lend_index[layer] >= 0) append(buf, n, "; lends K/V");
}
