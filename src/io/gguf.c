/* GGUF reader (llama.cpp's file format, versions 2 and 3), bounds-checked everywhere.
 *
 * Layout (little-endian): "GGUF" | u32 version | u64 n_tensors | u64 n_kv | n_kv key/value
 * pairs | n_tensors tensor infos | padding to the alignment | the data section.
 *   string: u64 length + bytes (no NUL);  key/value: string key, u32 type, the value;
 *   value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string,
 *                9 array (u32 element type, u64 count, elements), 10 u64, 11 i64, 12 f64;
 *   tensor info: string name, u32 n_dims (1..4), u64 ne[n_dims] (ne[0] the contiguous
 *                dimension), u32 ggml type, u64 offset (from the data section's start, a
 *                multiple of the alignment);
 *   alignment: the metadata's general.alignment (u32, a power of two), else 32.
 *
 * Nothing is trusted: every length, count and offset is checked against the bytes that are
 * left before it is used (a count cannot make the reader allocate more than the file could
 * describe), keys and tensor names must be unique, non-empty and free of NUL, each tensor's
 * byte size is computed from its type's block size with overflow checks and must lie inside
 * the data section without overlapping another. A file is mapped read-only (mmap), not
 * copied: a tensor is paged in only when converted. */
#include "base/fileio.h"
#include "io/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c assumes a little-endian host (the format is little-endian)"
#endif

#define GGUF_MAX_NAME 256
#define GGUF_MAX_DEPTH 4            /* arrays of arrays: skipped, at most this deep */

/* ggml's tensor types: name, elements per block, bytes per block (0: unknown type) */
static const struct { const char *name; int blck; int bytes; } GTYPES[] = {
    [SK_GGML_F32] = {"F32", 1, 4},    [SK_GGML_F16] = {"F16", 1, 2},     [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},           [6] = {"Q5_0", 32, 22},            [7] = {"Q5_1", 32, 24},
    [SK_GGML_Q8_0] = {"Q8_0", 32, 34}, [9] = {"Q8_1", 32, 36},           [10] = {"Q2_K", 256, 84},
    [11] = {"Q3_K", 256, 110},        [12] = {"Q4_K", 256, 144},         [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},        [15] = {"Q8_K", 256, 292},         [16] = {"IQ2_XXS", 256, 66},
    [17] = {"IQ2_XS", 256, 74},       [18] = {"IQ3_XXS", 256, 98},       [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},        [21] = {"IQ3_S", 256, 110},        [22] = {"IQ2_S", 256, 82},
    [23] = {"IQ4_XS", 256, 136},      [24] = {"I8", 1, 1},               [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},             [27] = {"I64", 1, 8},              [28] = {"F64", 1, 8},
    [29] = {"IQ1_M", 256, 56},        [SK_GGML_BF16] = {"BF16", 1, 2},   [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},        [39] = {"MXFP4", 32, 17},
};
#define N_GTYPES ((int)(sizeof GTYPES / sizeof GTYPES[0]))

const char *sk_ggml_type_name(int type) {
    return type >= 0 && type < N_GTYPES && GTYPES[type].name ? GTYPES[type].name : "unknown";
}

/* bytes of each scalar value type (0 for string, array) */
static const int VSIZE[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
static const char *const VNAME[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};

const char *sk_gguf_type_name(int type) { return type >= 0 && type <= SK_GGUF_F64 ? VNAME[type] : "unknown"; }

/* ----------------------------------------------------------- the cursor */

typedef struct {
    const uint8_t *p;
    size_t size, pos;
    const char *path;
} cur;

static int need(cur *c, uint64_t n, const char *what) {
    if (n > c->size - c->pos)
        return sk_error(SK_EFORMAT, "%s: truncated: %s needs %llu bytes at offset %zu but the file has %zu", c->path, what,
                        (unsigned long long)n, c->pos, c->size);
    return SK_OK;
}
static int rd_u32(cur *c, uint32_t *v, const char *what) {
    if (need(c, 4, what)) return SK_EFORMAT;
    memcpy(v, c->p + c->pos, 4);
    c->pos += 4;
    return SK_OK;
}
static int rd_u64(cur *c, uint64_t *v, const char *what) {
    if (need(c, 8, what)) return SK_EFORMAT;
    memcpy(v, c->p + c->pos, 8);
    c->pos += 8;
    return SK_OK;
}
/* a string: *s points into the image (not NUL-terminated), *n its length */
static int rd_str(cur *c, const uint8_t **s, uint64_t *n, const char *what) {
    if (rd_u64(c, n, what) || need(c, *n, what)) return SK_EFORMAT;
    *s = c->p + c->pos;
    c->pos += (size_t)*n;
    return SK_OK;
}
/* a key or tensor name: non-empty, at most GGUF_MAX_NAME bytes, no NUL; malloc'd copy */
static int rd_name(cur *c, char **out, const char *what) {
    const uint8_t *s; uint64_t n;
    size_t at = c->pos;
    if (rd_str(c, &s, &n, what)) return SK_EFORMAT;
    if (n == 0 || n > GGUF_MAX_NAME || memchr(s, 0, (size_t)n))
        return sk_error(SK_EFORMAT, "%s: %s at offset %zu: %s", c->path, what, at,
                        n == 0 ? "empty" : n > GGUF_MAX_NAME ? "longer than 256 bytes" : "holds a NUL byte");
    if (!(*out = malloc((size_t)n + 1))) return sk_error(SK_ENOMEM, "out of memory");
    memcpy(*out, s, (size_t)n);
    (*out)[n] = 0;
    return SK_OK;
}

/* skip (depth > 0) or record a value of type t */
static int rd_value(cur *c, sk_gguf_kv *kv, uint32_t t, int depth, const char *key) {
    if (t > SK_GGUF_F64) return sk_error(SK_EFORMAT, "%s: metadata '%s': unknown value type %u", c->path, key, t);
    if (t == SK_GGUF_STR) {
        const uint8_t *s; uint64_t n;
        if (rd_str(c, &s, &n, "a string value")) return SK_EFORMAT;
        if (kv) { kv->data = s; kv->n = n; }
        return SK_OK;
    }
    if (t != SK_GGUF_ARR) {
        if (need(c, (uint64_t)VSIZE[t], "a value")) return SK_EFORMAT;
        if (kv) { kv->data = c->p + c->pos; kv->n = 1; }
        c->pos += (size_t)VSIZE[t];
        return SK_OK;
    }
    uint32_t et; uint64_t n;
    if (rd_u32(c, &et, "an array's type") || rd_u64(c, &n, "an array's length")) return SK_EFORMAT;
    if (et > SK_GGUF_F64) return sk_error(SK_EFORMAT, "%s: metadata '%s': array of unknown type %u", c->path, key, et);
    if (et == SK_GGUF_ARR && depth >= GGUF_MAX_DEPTH)
        return sk_error(SK_EFORMAT, "%s: metadata '%s': arrays nested deeper than %d", c->path, key, GGUF_MAX_DEPTH);
    /* each element takes at least one byte (a string 8): the count cannot exceed what is left */
    const uint64_t min = et == SK_GGUF_STR || et == SK_GGUF_ARR ? (et == SK_GGUF_STR ? 8 : 12) : (uint64_t)VSIZE[et];
    if (n > (c->size - c->pos) / min)
        return sk_error(SK_EFORMAT, "%s: metadata '%s': array of %llu %s values does not fit in the file", c->path, key,
                        (unsigned long long)n, VNAME[et]);
    if (kv) { kv->elem = (int)et; kv->n = n; kv->data = c->p + c->pos; }
    if (et != SK_GGUF_STR && et != SK_GGUF_ARR) { c->pos += (size_t)(n * min); return SK_OK; }
    if (et == SK_GGUF_STR && kv) {
        kv->strs = malloc((size_t)(n ? n : 1) * sizeof *kv->strs);
        kv->lens = malloc((size_t)(n ? n : 1) * sizeof *kv->lens);
        if (!kv->strs || !kv->lens) return sk_error(SK_ENOMEM, "out of memory");
    }
    for (uint64_t i = 0; i < n; i++) {
        if (et == SK_GGUF_STR) {
            const uint8_t *s; uint64_t len;
            if (rd_str(c, &s, &len, "a string in an array")) return SK_EFORMAT;
            if (kv) { kv->strs[i] = (const char *)s; kv->lens[i] = (size_t)len; }
        } else {
            if (rd_value(c, NULL, SK_GGUF_ARR, depth + 1, key)) return SK_EFORMAT;   /* its type, count, elements */
        }
    }
    return SK_OK;
}

void sk_gguf_free(sk_gguf *g) {
    if (!g) return;
    for (int i = 0; i < g->n_kv; i++) { free(g->kv[i].key); free(g->kv[i].strs); free(g->kv[i].lens); }
    for (int i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->kv); free(g->tensors); free(g->path); free(g->owned);
    if (g->map) munmap(g->map, g->map_size);
    memset(g, 0, sizeof *g);
}

static int cmp_off(const void *a, const void *b) {
    const sk_gguf_tensor *x = *(sk_gguf_tensor *const *)a, *y = *(sk_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Parse g->base[0..g->size) (set by the caller) */
static int parse(sk_gguf *g) {
    cur c = {g->base, g->size, 0, g->path};
    uint32_t magic, version;
    uint64_t nt, nkv;
    if (rd_u32(&c, &magic, "the magic")) return SK_EFORMAT;
    if (memcmp(&magic, "GGUF", 4)) return sk_error(SK_EFORMAT, "%s: not a GGUF file (it does not start with \"GGUF\")", g->path);
    if (rd_u32(&c, &version, "the version")) return SK_EFORMAT;
    if (version != 2 && version != 3)
        return sk_error(SK_EFORMAT, "%s: GGUF version %u: skiplm reads versions 2 and 3%s", g->path, version,
                        version == 1 ? " (version 1 is llama.cpp's first, 32-bit layout: convert the model again)" : "");
    g->version = version;
    if (rd_u64(&c, &nt, "the tensor count") || rd_u64(&c, &nkv, "the metadata count")) return SK_EFORMAT;
    /* a key/value takes at least 13 bytes, a tensor info at least 29 */
    if (nkv > (c.size - c.pos) / 13 || nt > (c.size - c.pos) / 29)
        return sk_error(SK_EFORMAT, "%s: truncated or corrupt: %llu tensors and %llu metadata entries do not fit in a file of %zu bytes", g->path,
                        (unsigned long long)nt, (unsigned long long)nkv, c.size);
    g->kv = calloc((size_t)(nkv ? nkv : 1), sizeof *g->kv);
    g->tensors = calloc((size_t)(nt ? nt : 1), sizeof *g->tensors);
    if (!g->kv || !g->tensors) return sk_error(SK_ENOMEM, "out of memory");
    g->alignment = 32;
    for (uint64_t i = 0; i < nkv; i++) {
        sk_gguf_kv *kv = &g->kv[g->n_kv];
        uint32_t t;
        if (rd_name(&c, &kv->key, "a metadata key")) return SK_EFORMAT;
        g->n_kv++;
        for (int k = 0; k < g->n_kv - 1; k++)
            if (!strcmp(g->kv[k].key, kv->key)) return sk_error(SK_EFORMAT, "%s: metadata key '%s' appears twice", g->path, kv->key);
        if (rd_u32(&c, &t, "a metadata type")) return SK_EFORMAT;
        kv->type = (int)t;
        kv->elem = -1;
        if (rd_value(&c, kv, t, 0, kv->key)) return SK_EFORMAT;
        if (!strcmp(kv->key, "general.alignment")) {
            if (t != SK_GGUF_U32) return sk_error(SK_EFORMAT, "%s: general.alignment must be a u32 (it is %s)", g->path, sk_gguf_type_name((int)t));
            uint32_t a;
            memcpy(&a, kv->data, 4);
            if (a == 0 || (a & (a - 1)) || a > (1u << 24))
                return sk_error(SK_EFORMAT, "%s: general.alignment %u is not a power of two up to 2^24", g->path, a);
            g->alignment = a;
        }
    }
    for (uint64_t i = 0; i < nt; i++) {
        sk_gguf_tensor *t = &g->tensors[g->n_tensors];
        uint32_t nd, type;
        if (rd_name(&c, &t->name, "a tensor name")) return SK_EFORMAT;
        g->n_tensors++;
        if (rd_u32(&c, &nd, "a tensor's dimension count")) return SK_EFORMAT;
        if (nd < 1 || nd > 4) return sk_error(SK_EFORMAT, "%s: tensor '%s': %u dimensions (1 to 4 allowed)", g->path, t->name, nd);
        t->ndim = (int)nd;
        uint64_t numel = 1;
        for (uint32_t d = 0; d < nd; d++) {
            uint64_t ne;
            if (rd_u64(&c, &ne, "a tensor's dimension")) return SK_EFORMAT;
            if (ne == 0 || ne > ((uint64_t)1 << 40) || numel > ((uint64_t)1 << 50) / ne)
                return sk_error(SK_EFORMAT, "%s: tensor '%s': dimension %u is %llu (1 to 2^40, 2^50 elements in all)", g->path,
                                t->name, d, (unsigned long long)ne);
            t->ne[d] = (int64_t)ne;
            numel *= ne;
        }
        for (int d = (int)nd; d < 4; d++) t->ne[d] = 1;
        t->numel = numel;
        if (rd_u32(&c, &type, "a tensor's type") || rd_u64(&c, &t->offset, "a tensor's offset")) return SK_EFORMAT;
        t->type = (int)type;
        if ((int)type >= N_GTYPES || type >= (uint32_t)N_GTYPES || !GTYPES[type].blck)
            return sk_error(SK_EFORMAT, "%s: tensor '%s': unknown ggml type %u", g->path, t->name, type);
        if (t->ne[0] % GTYPES[type].blck)
            return sk_error(SK_EFORMAT, "%s: tensor '%s': %s needs rows of a multiple of %d elements (ne[0] is %lld)", g->path,
                            t->name, GTYPES[type].name, GTYPES[type].blck, (long long)t->ne[0]);
        t->nbytes = numel / (uint64_t)GTYPES[type].blck * (uint64_t)GTYPES[type].bytes;   /* < 2^59 */
        if (t->offset % g->alignment)
            return sk_error(SK_EFORMAT, "%s: tensor '%s': offset %llu is not a multiple of the alignment %llu", g->path, t->name,
                            (unsigned long long)t->offset, (unsigned long long)g->alignment);
        for (int k = 0; k < g->n_tensors - 1; k++)
            if (!strcmp(g->tensors[k].name, t->name)) return sk_error(SK_EFORMAT, "%s: tensor '%s' appears twice", g->path, t->name);
    }
    /* the data section starts at the next multiple of the alignment */
    uint64_t start = (c.pos + g->alignment - 1) / g->alignment * g->alignment;
    if (nt && start > c.size) return sk_error(SK_EFORMAT, "%s: truncated: no data section after the tensor infos", g->path);
    g->data_offset = start > c.size ? c.size : start;
    const uint64_t dsize = c.size - g->data_offset;
    for (int i = 0; i < g->n_tensors; i++) {
        sk_gguf_tensor *t = &g->tensors[i];
        if (t->offset > dsize || t->nbytes > dsize - t->offset)
            return sk_error(SK_EFORMAT, "%s: tensor '%s': bytes [%llu, %llu) of the data section lie past its end (%llu bytes; "
                            "the file is truncated or the tensor's shape or type is wrong)", g->path, t->name,
                            (unsigned long long)t->offset, (unsigned long long)(t->offset + t->nbytes), (unsigned long long)dsize);
        t->data = g->base + g->data_offset + t->offset;
    }
    /* no two tensors share bytes */
    if (g->n_tensors > 1) {
        sk_gguf_tensor **s = malloc((size_t)g->n_tensors * sizeof *s);
        if (!s) return sk_error(SK_ENOMEM, "out of memory");
        for (int i = 0; i < g->n_tensors; i++) s[i] = &g->tensors[i];
        qsort(s, (size_t)g->n_tensors, sizeof *s, cmp_off);
        int rc = SK_OK;
        for (int i = 1; i < g->n_tensors && !rc; i++)
            if (s[i]->offset < s[i - 1]->offset + s[i - 1]->nbytes)
                rc = sk_error(SK_EFORMAT, "%s: tensors '%s' and '%s' overlap in the data section", g->path, s[i - 1]->name, s[i]->name);
        free(s);
        if (rc) return rc;
    }
    return SK_OK;
}

static int finish(sk_gguf *g, int rc) {
    if (rc) sk_gguf_free(g);
    return rc;
}

int sk_gguf_read_mem(const void *buf, size_t n, const char *name, sk_gguf *g) {
    memset(g, 0, sizeof *g);
    g->owned = malloc(n ? n : 1);
    g->path = strdup(name ? name : "(memory)");
    if (!g->owned || !g->path) return finish(g, sk_error(SK_ENOMEM, "out of memory"));
    if (n) memcpy(g->owned, buf, n);
    g->base = g->owned;
    g->size = n;
    return finish(g, parse(g));
}

int sk_gguf_read(const char *path, sk_gguf *g) {
    memset(g, 0, sizeof *g);
    if (!(g->path = strdup(path))) return sk_error(SK_ENOMEM, "out of memory");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return finish(g, sk_error(SK_EIO, "%s: %s", path, strerror(errno)));
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        return finish(g, sk_error(SK_EIO, "%s: not a regular file", path));
    }
    g->size = (size_t)sb.st_size;
    if (g->size) {
        void *m = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) { close(fd); return finish(g, sk_error(SK_EIO, "%s: mmap: %s", path, strerror(errno))); }
        g->map = m; g->map_size = g->size;
        g->base = m;
    } else {
        g->base = (const uint8_t *)"";
    }
    close(fd);
    return finish(g, parse(g));
}

int sk_is_gguf(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char m[4];
    int ok = read(fd, m, 4) == 4 && !memcmp(m, "GGUF", 4);
    close(fd);
    return ok;
}

/* -------------------------------------------------------------- accessors */

const sk_gguf_kv *sk_gguf_find(const sk_gguf *g, const char *key) {
    for (int i = 0; i < g->n_kv; i++)
        if (!strcmp(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

const sk_gguf_tensor *sk_gguf_tensor_find(const sk_gguf *g, const char *name) {
    for (int i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

/* element i of an integer-typed value (scalar: i = 0) as int64; 0 if the type is not an integer */
static int int_at(int type, const uint8_t *p, uint64_t i, int64_t *v) {
    switch (type) {
    case SK_GGUF_U8: *v = p[i]; return 1;
    case SK_GGUF_I8: *v = (int8_t)p[i]; return 1;
    case SK_GGUF_BOOL: *v = p[i] != 0; return 1;
    case SK_GGUF_U16: { uint16_t x; memcpy(&x, p + 2 * i, 2); *v = x; return 1; }
    case SK_GGUF_I16: { int16_t x; memcpy(&x, p + 2 * i, 2); *v = x; return 1; }
    case SK_GGUF_U32: { uint32_t x; memcpy(&x, p + 4 * i, 4); *v = x; return 1; }
    case SK_GGUF_I32: { int32_t x; memcpy(&x, p + 4 * i, 4); *v = x; return 1; }
    case SK_GGUF_U64: { uint64_t x; memcpy(&x, p + 8 * i, 8); if (x > INT64_MAX) return 0; *v = (int64_t)x; return 1; }
    case SK_GGUF_I64: { int64_t x; memcpy(&x, p + 8 * i, 8); *v = x; return 1; }
    }
    return 0;
}

int sk_gguf_get_int(const sk_gguf *g, const char *key, int64_t *v) {
    const sk_gguf_kv *kv = sk_gguf_find(g, key);
    if (!kv) return 1;
    if (!int_at(kv->type, kv->data, 0, v))
        return sk_error(SK_EFORMAT, "%s: metadata '%s' must be an integer (it is %s)", g->path, key, sk_gguf_type_name(kv->type)), -1;
    return 0;
}

int sk_gguf_get_float(const sk_gguf *g, const char *key, double *v) {
    const sk_gguf_kv *kv = sk_gguf_find(g, key);
    if (!kv) return 1;
    if (kv->type == SK_GGUF_F32) { float f; memcpy(&f, kv->data, 4); *v = f; return 0; }
    if (kv->type == SK_GGUF_F64) { memcpy(v, kv->data, 8); return 0; }
    int64_t i;
    if (int_at(kv->type, kv->data, 0, &i)) { *v = (double)i; return 0; }
    return sk_error(SK_EFORMAT, "%s: metadata '%s' must be a number (it is %s)", g->path, key, sk_gguf_type_name(kv->type)), -1;
}

const char *sk_gguf_get_str(const sk_gguf *g, const char *key, size_t *len) {
    const sk_gguf_kv *kv = sk_gguf_find(g, key);
    if (!kv || kv->type != SK_GGUF_STR) return NULL;
    if (len) *len = (size_t)kv->n;
    return (const char *)kv->data;
}

int sk_gguf_arr_int(const sk_gguf_kv *kv, uint64_t i, int64_t *v) {
    if (kv->type != SK_GGUF_ARR || i >= kv->n) return 1;
    return !int_at(kv->elem, kv->data, i, v);
}

int sk_gguf_arr_float(const sk_gguf_kv *kv, uint64_t i, float *v) {
    if (kv->type != SK_GGUF_ARR || i >= kv->n) return 1;
    if (kv->elem == SK_GGUF_F32) { memcpy(v, kv->data + 4 * i, 4); return 0; }
    if (kv->elem == SK_GGUF_F64) { double d; memcpy(&d, kv->data + 8 * i, 8); *v = (float)d; return 0; }
    return 1;
}
