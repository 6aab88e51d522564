/* Byte-level BPE training (docs/tokenizer.md): texts -> encoder.json + vocab.bpe.
 *
 * Sections: distinct pre-tokens ("words") | pairs and their word lists | the max-heap |
 * learning the merges | writing GPT-2's files | the entry point.
 *
 * The texts are split with the GPT-2 encoder's own pre-tokenizer (src/text/tok_bpe.c), so a
 * merge never crosses a pre-token. Training works on the distinct pre-tokens with their
 * frequencies. The count of a pair is the number of adjacent positions holding it, summed over
 * the words times their frequency (what a full recount gives; tests/ref/bpe_ref.py is that
 * recount). A step takes the pair with the highest count, ties to the lowest (first id, second
 * id), and rewrites every word that holds it, left to right without overlap ("a a a" -> "aa a").
 *
 * Incremental: a pair keeps the list of words that held it when it was created; a merge visits
 * only those words (skipping ones that no longer hold it), takes their pairs out of the counts,
 * rewrites them and puts their pairs back. Every new adjacency contains the new token, so the
 * count of an existing pair can only go down; the heap is therefore lazy: an entry whose count
 * is stale is pushed again with the current count when it reaches the top, and the first entry
 * whose count is current is the true maximum. Pairs with the new token are pushed once per step,
 * with their final counts. */
#include "skiplm_text.h"
#include "base/fileio.h"
#include "base/json.h"
#include "base/utf8.h"
#include "text/tokenizer_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EOT_STR "<|endoftext|>"

static uint64_t hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;               /* FNV-1a, then a finalizer */
    for (size_t i = 0; i < n; i++) { h ^= s[i]; h *= 1099511628211ULL; }
    h ^= h >> 33; h *= 0xff51afd7ed558ccdULL; h ^= h >> 33;
    return h;
}
static uint64_t hash_pair(int32_t a, int32_t b) {
    uint64_t x = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
    return x;
}

/* ------------------------------------------------------------ distinct words */

typedef struct {
    uint8_t *bytes; size_t bytes_len, bytes_cap;      /* word w is bytes[off[w] .. off[w]+len[w]) */
    size_t *off; int32_t *len; int64_t *freq; uint64_t *hash;
    size_t n, cap;
    uint32_t *tab; size_t mask;                       /* open addressing over word ids, UINT32_MAX empty */
} words;

static int words_rehash(words *W, size_t slots) {
    uint32_t *t = malloc(slots * sizeof *t);
    if (!t) return 1;
    memset(t, 0xff, slots * sizeof *t);
    for (size_t w = 0; w < W->n; w++) {
        size_t i = (size_t)W->hash[w] & (slots - 1);
        while (t[i] != UINT32_MAX) i = (i + 1) & (slots - 1);
        t[i] = (uint32_t)w;
    }
    free(W->tab);
    W->tab = t; W->mask = slots - 1;
    return 0;
}

static int words_add(words *W, const uint8_t *s, size_t n) {
    if ((W->n + 1) * 2 > W->mask + 1 && words_rehash(W, (W->mask + 1) * 2)) return 1;
    uint64_t h = hash_bytes(s, n);
    size_t i = (size_t)h & W->mask;
    for (;;) {
        uint32_t w = W->tab[i];
        if (w == UINT32_MAX) break;
        if (W->hash[w] == h && (size_t)W->len[w] == n && memcmp(W->bytes + W->off[w], s, n) == 0) {
            W->freq[w]++;
            return 0;
        }
        i = (i + 1) & W->mask;
    }
    if (W->n >= UINT32_MAX - 1 || n > INT32_MAX) return 1;
    if (W->n == W->cap) {
        size_t c = W->cap ? 2 * W->cap : 1024;
        size_t *o = realloc(W->off, c * sizeof *o); if (!o) return 1; W->off = o;
        int32_t *l = realloc(W->len, c * sizeof *l); if (!l) return 1; W->len = l;
        int64_t *f = realloc(W->freq, c * sizeof *f); if (!f) return 1; W->freq = f;
        uint64_t *hh = realloc(W->hash, c * sizeof *hh); if (!hh) return 1; W->hash = hh;
        W->cap = c;
    }
    if (sk_grow((void **)&W->bytes, &W->bytes_cap, W->bytes_len + n, 1)) return 1;
    memcpy(W->bytes + W->bytes_len, s, n);
    size_t w = W->n++;
    W->off[w] = W->bytes_len; W->len[w] = (int32_t)n; W->freq[w] = 1; W->hash[w] = h;
    W->bytes_len += n;
    W->tab[i] = (uint32_t)w;
    return 0;
}

static void words_free(words *W) {
    free(W->bytes); free(W->off); free(W->len); free(W->freq); free(W->hash); free(W->tab);
}

/* ------------------------------------------------- pairs and their word lists */

typedef struct {
    int32_t a, b;
    int64_t count;
    int32_t *w; int32_t nw, cw;   /* words that held the pair when it was (re)created; may be stale */
    int32_t pushed;               /* last step that queued it */
} pair;

typedef struct {
    pair *p; size_t n, cap;
    int32_t *tab; size_t mask;    /* open addressing over pair indices, -1 empty */
} pairs;

static int pairs_rehash(pairs *P, size_t slots) {
    int32_t *t = malloc(slots * sizeof *t);
    if (!t) return 1;
    memset(t, 0xff, slots * sizeof *t);
    for (size_t k = 0; k < P->n; k++) {
        size_t i = (size_t)hash_pair(P->p[k].a, P->p[k].b) & (slots - 1);
        while (t[i] >= 0) i = (i + 1) & (slots - 1);
        t[i] = (int32_t)k;
    }
    free(P->tab);
    P->tab = t; P->mask = slots - 1;
    return 0;
}

/* Index of pair (a, b), created with count 0 if new; -1 when out of memory. */
static int32_t pair_get(pairs *P, int32_t a, int32_t b) {
    size_t i = (size_t)hash_pair(a, b) & P->mask;
    for (;;) {
        int32_t k = P->tab[i];
        if (k < 0) break;
        if (P->p[k].a == a && P->p[k].b == b) return k;
        i = (i + 1) & P->mask;
    }
    if (P->n >= INT32_MAX - 1) return -1;
    if (sk_grow((void **)&P->p, &P->cap, P->n + 1, sizeof *P->p)) return -1;
    int32_t k = (int32_t)P->n++;
    P->p[k] = (pair){.a = a, .b = b, .pushed = -1};
    P->tab[i] = k;
    if (P->n * 2 > P->mask + 1 && pairs_rehash(P, (P->mask + 1) * 2)) return -1;
    return k;
}

static void pairs_free(pairs *P) {
    for (size_t k = 0; k < P->n; k++) free(P->p[k].w);
    free(P->p); free(P->tab);
}

/* ------------------------------------------------------------------- the heap */

typedef struct { int64_t count; int32_t a, b, k; } entry;

/* x comes out before y: higher count, then lower first id, then lower second id. */
static int before(const entry *x, const entry *y) {
    if (x->count != y->count) return x->count > y->count;
    if (x->a != y->a) return x->a < y->a;
    return x->b < y->b;
}

typedef struct { entry *e; size_t n, cap; } heap;

static void sift_down(heap *H, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < H->n && before(&H->e[l], &H->e[m])) m = l;
        if (r < H->n && before(&H->e[r], &H->e[m])) m = r;
        if (m == i) return;
        entry t = H->e[i]; H->e[i] = H->e[m]; H->e[m] = t;
        i = m;
    }
}
static int heap_push(heap *H, entry x) {
    if (sk_grow((void **)&H->e, &H->cap, H->n + 1, sizeof *H->e)) return 1;
    size_t i = H->n++;
    while (i > 0 && before(&x, &H->e[(i - 1) / 2])) { H->e[i] = H->e[(i - 1) / 2]; i = (i - 1) / 2; }
    H->e[i] = x;
    return 0;
}
static entry heap_pop(heap *H) {
    entry top = H->e[0];
    H->e[0] = H->e[--H->n];
    if (H->n) sift_down(H, 0);
    return top;
}

/* ---------------------------------------------------------- learning the merges */

typedef struct {
    words W;
    int32_t *sym;                 /* word w's symbols: sym[off[w] ..), nsym[w] of them */
    int32_t *nsym;
    pairs P;
    heap H;
    int32_t *touched; size_t n_touched, touched_cap;
} trainer;

/* Adds sign * freq(w) to the count of every adjacent pair of word w. When adding, w joins the
 * word list of each pair that holds token x (every pair when x < 0), and each such pair is
 * noted for queueing in this step. Returns 1 when out of memory. */
static int word_pairs(trainer *T, int32_t w, int sign, int32_t x, int32_t step) {
    const int32_t *s = T->sym + T->W.off[w];
    int32_t n = T->nsym[w];
    int64_t f = sign * T->W.freq[w];
    for (int32_t i = 0; i + 1 < n; i++) {
        int32_t k = pair_get(&T->P, s[i], s[i + 1]);
        if (k < 0) return 1;
        pair *p = &T->P.p[k];
        p->count += f;
        if (sign < 0 || (x >= 0 && s[i] != x && s[i + 1] != x)) continue;
        if (p->nw == 0 || p->w[p->nw - 1] != w) {
            if (p->nw == p->cw) {
                int32_t c = p->cw ? 2 * p->cw : 4;
                int32_t *q = realloc(p->w, (size_t)c * sizeof *q);
                if (!q) return 1;
                p->w = q; p->cw = c;
            }
            p->w[p->nw++] = w;
        }
        if (p->pushed != step) {
            p->pushed = step;
            if (sk_grow((void **)&T->touched, &T->touched_cap, T->n_touched + 1, sizeof *T->touched)) return 1;
            T->touched[T->n_touched++] = k;
        }
    }
    return 0;
}

/* Learns up to n_merges merges into merges[2*i], merges[2*i+1]; the count goes to *done.
 * Returns 1 when out of memory. */
static int learn(trainer *T, int n_merges, int32_t *merges, int *done) {
    *done = 0;
    for (size_t w = 0; w < T->W.n; w++)
        if (word_pairs(T, (int32_t)w, +1, -1, -1)) return 1;
    T->n_touched = 0;
    for (size_t k = 0; k < T->P.n; k++) {
        pair *p = &T->P.p[k];
        if (p->count > 0 && heap_push(&T->H, (entry){p->count, p->a, p->b, (int32_t)k})) return 1;
    }
    for (int m = 0; m < n_merges; m++) {
        entry top;
        int found = 0;
        while (T->H.n) {
            top = heap_pop(&T->H);
            int64_t cur = T->P.p[top.k].count;
            if (cur == top.count) { found = 1; break; }
            top.count = cur;
            if (cur > 0 && heap_push(&T->H, top)) return 1;
        }
        if (!found) break;                               /* no pair left anywhere */
        int32_t a = top.a, b = top.b, x = 256 + m;
        merges[2 * m] = a; merges[2 * m + 1] = b;
        pair *p = &T->P.p[top.k];
        int32_t *list = p->w, nl = p->nw;
        p->w = NULL; p->nw = p->cw = 0;                  /* (a, b) never reappears */
        T->n_touched = 0;
        for (int32_t j = 0; j < nl; j++) {
            int32_t w = list[j];
            int32_t *s = T->sym + T->W.off[w], n = T->nsym[w], i = 0;
            while (i + 1 < n && !(s[i] == a && s[i + 1] == b)) i++;
            if (i + 1 >= n) continue;                    /* stale: an earlier merge took it */
            if (word_pairs(T, w, -1, x, m)) { free(list); return 1; }
            int32_t o = i;
            while (i < n) {
                if (i + 1 < n && s[i] == a && s[i + 1] == b) { s[o++] = x; i += 2; }
                else s[o++] = s[i++];
            }
            T->nsym[w] = o;
            if (word_pairs(T, w, +1, x, m)) { free(list); return 1; }
        }
        free(list);
        for (size_t t = 0; t < T->n_touched; t++) {
            pair *q = &T->P.p[T->touched[t]];
            if (q->count > 0 && heap_push(&T->H, (entry){q->count, q->a, q->b, T->touched[t]})) return 1;
        }
        *done = m + 1;
    }
    return 0;
}

/* ---------------------------------------------------------- writing GPT-2's files */

typedef struct { char *s; size_t len, cap; } buf;

static int put(buf *B, const void *p, size_t n) {
    if (sk_grow((void **)&B->s, &B->cap, B->len + n + 1, 1)) return 1;
    memcpy(B->s + B->len, p, n);
    B->len += n;
    return 0;
}

/* GPT-2's display form of bytes: each byte as its printable stand-in, UTF-8 encoded. */
static int put_display(buf *B, const uint32_t enc[256], const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint8_t u[4];                                    /* enc[] < 324: 1 or 2 bytes */
        if (put(B, u, sk_utf8_encode(enc[s[i]], u))) return 1;
    }
    return 0;
}

static int join_path(char *out, size_t cap, const char *dir, const char *name) {
    return snprintf(out, cap, "%s/%s", dir, name) >= (int)cap;
}

/* ------------------------------------------------------------------ entry point */

int sk_bpe_train(const char *const *texts, const size_t *lens, int n_texts, int vocab_size,
                 const char *const *specials, int n_specials, const char *out_dir, sk_bpe_stats *stats) {
    if (n_texts < 0 || (n_texts && (!texts || !lens)) || n_specials < 0 || (n_specials && !specials) || !out_dir)
        return sk_error(SK_EINVAL, "bpe train: null or negative argument");
    double t0 = sk_now();
    size_t total = 0;
    for (int i = 0; i < n_texts; i++) total += lens[i];
    if (total == 0) return sk_error(SK_EINVAL, "bpe train: the training text is empty");

    /* specials: the user's, in order, then <|endoftext|> as the last id */
    int n_sp = 0;
    const char **sp = malloc(((size_t)n_specials + 1) * sizeof *sp);
    if (!sp) return sk_error(SK_ENOMEM, "bpe train: out of memory");
    for (int i = 0; i < n_specials; i++) {
        const char *s = specials[i];
        if (!s || !*s) { free(sp); return sk_error(SK_EINVAL, "bpe train: special token %d is empty", i + 1); }
        if (!strcmp(s, EOT_STR)) continue;               /* always there */
        if (strlen(s) == 1) { free(sp); return sk_error(SK_EINVAL, "bpe train: special token \"%s\" is a single byte, which is already a token", s); }
        for (int j = 0; j < n_sp; j++)
            if (!strcmp(sp[j], s)) { free(sp); return sk_error(SK_EINVAL, "bpe train: special token \"%s\" given twice", s); }
        sp[n_sp++] = s;
    }
    sp[n_sp++] = EOT_STR;
    if (vocab_size < 256 + n_sp + 1) {
        free(sp);
        return sk_error(SK_EINVAL, "bpe train: vocabulary size %d is too small: 256 byte tokens + %d special token%s "
                        "+ at least 1 merge need %d", vocab_size, n_sp, n_sp > 1 ? "s" : "", 256 + n_sp + 1);
    }
    int n_merges = vocab_size - 256 - n_sp;

    /* ids of the bytes: GPT-2's order is the order of their display code points */
    uint32_t enc[256];
    sk_tok_byte_alphabet_(enc);
    int32_t id_of[256], byte_of[256];
    for (int b = 0; b < 256; b++) {
        int r = 0;
        for (int c = 0; c < 256; c++) r += enc[c] < enc[b];
        id_of[b] = r; byte_of[r] = b;
    }

    trainer T = {0};
    int32_t *merges = NULL;
    size_t *tok_off = NULL, *tok_len = NULL;
    uint8_t *pool = NULL; size_t pool_len = 0, pool_cap = 0;
    buf E = {0}, M = {0};
    int rc = SK_OK, done = 0;
    size_t pretokens = 0;

    if (words_rehash(&T.W, 1u << 14) || pairs_rehash(&T.P, 1u << 14)) goto oom;
    for (int d = 0; d < n_texts; d++) {
        const uint8_t *s = (const uint8_t *)texts[d];
        for (size_t i = 0; i < lens[d];) {
            size_t e = sk_tok_pretok_next_(s, lens[d], i);
            if (words_add(&T.W, s + i, e - i)) goto oom;
            pretokens++;
            i = e;
        }
    }
    T.sym = malloc((T.W.bytes_len ? T.W.bytes_len : 1) * sizeof *T.sym);
    T.nsym = malloc(T.W.n * sizeof *T.nsym);
    if (!T.sym || !T.nsym) goto oom;
    for (size_t w = 0; w < T.W.n; w++) {
        T.nsym[w] = T.W.len[w];
        for (int32_t i = 0; i < T.W.len[w]; i++) T.sym[T.W.off[w] + i] = id_of[T.W.bytes[T.W.off[w] + i]];
    }
    free(T.W.tab); T.W.tab = NULL;                        /* the lookup is no longer needed */
    double t1 = sk_now();

    merges = malloc(2 * (size_t)n_merges * sizeof *merges);
    if (!merges || learn(&T, n_merges, merges, &done)) goto oom;
    double t2 = sk_now();
    if (done == 0) {
        rc = sk_error(SK_EINVAL, "bpe train: nothing to merge: no pre-token of the text is longer than one byte");
        goto out;
    }

    /* token bytes */
    int V = 256 + done + n_sp;
    tok_off = malloc((size_t)V * sizeof *tok_off);
    tok_len = malloc((size_t)V * sizeof *tok_len);
    if (!tok_off || !tok_len) goto oom;
    for (int id = 0; id < V; id++) {
        uint8_t one;
        const uint8_t *src; size_t n;
        uint8_t *tmp = NULL;
        if (id < 256) { one = (uint8_t)byte_of[id]; src = &one; n = 1; }
        else if (id < 256 + done) {
            int32_t a = merges[2 * (id - 256)], b = merges[2 * (id - 256) + 1];
            n = tok_len[a] + tok_len[b];
            if (!(tmp = malloc(n))) goto oom;
            memcpy(tmp, pool + tok_off[a], tok_len[a]);
            memcpy(tmp + tok_len[a], pool + tok_off[b], tok_len[b]);
            src = tmp;
        } else { src = (const uint8_t *)sp[id - 256 - done]; n = strlen(sp[id - 256 - done]); }
        if (sk_grow((void **)&pool, &pool_cap, pool_len + n, 1)) { free(tmp); goto oom; }
        memcpy(pool + pool_len, src, n);
        free(tmp);
        tok_off[id] = pool_len; tok_len[id] = n; pool_len += n;
    }
    /* a special must not be an ordinary token too (encoder.json would hold it twice) */
    for (int k = 0; k < n_sp; k++) {
        int id = 256 + done + k;
        for (int j = 0; j < 256 + done; j++)
            if (tok_len[j] == tok_len[id] && !memcmp(pool + tok_off[j], pool + tok_off[id], tok_len[id])) {
                rc = sk_error(SK_EINVAL, "bpe train: special token \"%s\" is also a learned token (id %d); pick a string "
                              "the corpus cannot produce, e.g. one with <| |>", sp[k], j);
                goto out;
            }
    }

    /* encoder.json: {"display": id, ...} in id order; vocab.bpe: "#version: 0.2", then merges */
    if (put(&E, "{", 1)) goto oom;
    buf D = {0};
    for (int id = 0; id < V; id++) {
        D.len = 0;
        char num[32];
        int nl = snprintf(num, sizeof num, ": %d", id);
        if (put_display(&D, enc, pool + tok_off[id], tok_len[id]) ||
            (id && put(&E, id % 8 ? ", " : ",\n", 2)) ||
            sk_json_write_str(&E.s, &E.len, &E.cap, D.s, D.len) || put(&E, num, (size_t)nl)) { free(D.s); goto oom; }
    }
    if (put(&E, "}\n", 2)) { free(D.s); goto oom; }
    const char *head = "#version: 0.2\n";
    if (put(&M, head, strlen(head))) { free(D.s); goto oom; }
    for (int m = 0; m < done; m++) {
        int32_t a = merges[2 * m], b = merges[2 * m + 1];
        if (put_display(&M, enc, pool + tok_off[a], tok_len[a]) || put(&M, " ", 1) ||
            put_display(&M, enc, pool + tok_off[b], tok_len[b]) || put(&M, "\n", 1)) { free(D.s); goto oom; }
    }
    free(D.s);
    size_t plen = strlen(out_dir) + 32;
    char *path = malloc(plen);
    if (!path) goto oom;
    join_path(path, plen, out_dir, "vocab.bpe");
    rc = sk_write_atomic(path, M.s, M.len);
    if (!rc) { join_path(path, plen, out_dir, "encoder.json"); rc = sk_write_atomic(path, E.s, E.len); }
    free(path);
    if (rc) goto out;

    if (stats) {
        stats->bytes = total; stats->pretokens = pretokens; stats->unique_words = T.W.n;
        stats->n_merges = done; stats->vocab_size = V; stats->eot = V - 1;
        stats->seconds_count = t1 - t0; stats->seconds_merge = t2 - t1;
    }
    goto out;
oom:
    rc = sk_error(SK_ENOMEM, "bpe train: out of memory");
out:
    free(sp); free(merges); free(tok_off); free(tok_len); free(pool); free(E.s); free(M.s);
    words_free(&T.W); pairs_free(&T.P); free(T.H.e); free(T.sym); free(T.nsym); free(T.touched);
    return rc;
}
