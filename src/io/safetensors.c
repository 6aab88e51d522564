/* safetensors reader and writer.
 *
 * Layout: 8-byte little-endian u64 N | N bytes of UTF-8 JSON header | data section.
 * Header: {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [d0, ...],
 *          "data_offsets": [begin, end]}, ...}; offsets are relative to the data section.
 *
 * The reader trusts nothing: it reads the 8 bytes and the header first, validates every
 * entry against the real file size, and only then allocates and reads the data section.
 * Accepted subset (the official library's, strictly):
 *   - N <= 100 MB and N <= file size - 8; the header is one strict JSON object (json.c);
 *   - dtypes F32 F16 BF16 F64 I32 I64 U8 BOOL I16 U16 I8;
 *   - shape: at most 8 non-negative integers ([] is a scalar of one element);
 *   - data_offsets: two integers, begin <= end <= data size, end - begin equal to
 *     product(shape) * dtype size (computed with overflow checks);
 *   - the tensors tile the data section exactly: no overlap, no hole, no trailing bytes;
 *   - names non-empty, unique, without NUL; no fields other than dtype/shape/data_offsets;
 *   - __metadata__ (optional) is an object whose values are all strings.
 * The writer writes tensors in insertion order, the header padded with spaces to a multiple
 * of 8 bytes (as the official writer does), and streams the caller's buffers through
 * sk_write_atomic_chunks: a 3 GB model is never copied. */
#include "base/fileio.h"
#include "base/json.h"
#include "base/utf8.h"
#include "core/quant.h"
#include "io/io.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host (the format is little-endian)"
#endif

#define SK_ST_MAX_HEADER ((uint64_t)100 << 20)
#define SK_ST_MAX_DIMS 8

static const struct { const char *name; size_t size; } DTYPES[] = {
    [SK_F32] = { "F32", 4 }, [SK_F16] = { "F16", 2 }, [SK_BF16] = { "BF16", 2 },
    [SK_F64] = { "F64", 8 }, [SK_I32] = { "I32", 4 }, [SK_I64] = { "I64", 8 },
    [SK_U8] = { "U8", 1 },   [SK_BOOL] = { "BOOL", 1 }, [SK_I16] = { "I16", 2 },
    [SK_U16] = { "U16", 2 }, [SK_I8] = { "I8", 1 },
};
#define N_DTYPES ((int)(sizeof DTYPES / sizeof DTYPES[0]))

/* ------------------------------------------------------------------ reader */

void sk_st_free(sk_safetensors *st) {
    if (!st) return;
    for (int i = 0; i < st->n_tensors; i++) free(st->tensors[i].name);
    for (int i = 0; i < st->n_meta; i++) { free(st->meta_keys[i]); free(st->meta_vals[i]); }
    free(st->tensors);
    free(st->meta_keys);
    free(st->meta_vals);
    free(st->data);
    free(st->path);
    memset(st, 0, sizeof *st);
}

/* A JSON number that is an exact non-negative integer <= 2^53 (exactly representable). */
static int json_uint(const sk_json *v, uint64_t *out) {
    if (!v || v->type != SK_JSON_NUM) return 0;
    double d = v->num;
    if (!(d >= 0) || d > 9007199254740992.0 || d != floor(d)) return 0;
    *out = (uint64_t)d;
    return 1;
}

static void shape_str(const sk_st_tensor *t, char *buf, size_t len) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, len - k, "[");
    for (int d = 0; d < t->ndim && k < len; d++)
        k += (size_t)snprintf(buf + k, len - k, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    if (k < len) snprintf(buf + k, len - k, "]");
}

static _Thread_local const sk_safetensors *g_sort_st;   /* qsort has no context argument in C11 */
static int cmp_by_name(const void *a, const void *b) {
    return strcmp(g_sort_st->tensors[*(const int *)a].name, g_sort_st->tensors[*(const int *)b].name);
}
static int cmp_by_offset(const void *a, const void *b) {
    const sk_st_tensor *x = &g_sort_st->tensors[*(const int *)a], *y = &g_sort_st->tensors[*(const int *)b];
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    size_t xe = x->offset + x->nbytes, ye = y->offset + y->nbytes;
    if (xe != ye) return xe < ye ? -1 : 1;
    return 0;
}

static int parse_metadata(const char *path, const sk_json *m, sk_safetensors *st) {
    if (m->type != SK_JSON_OBJ)
        return sk_error(SK_EFORMAT, "%s: __metadata__ must be an object of strings", path);
    if (m->n == 0) return SK_OK;
    st->meta_keys = calloc((size_t)m->n, sizeof(char *));
    st->meta_vals = calloc((size_t)m->n, sizeof(char *));
    if (!st->meta_keys || !st->meta_vals) return sk_error(SK_ENOMEM, "%s: out of memory", path);
    for (int i = 0; i < m->n; i++) {
        const sk_json *v = &m->items[i];
        if (v->type != SK_JSON_STR)
            return sk_error(SK_EFORMAT, "%s: __metadata__ value of key '%s' is not a string", path, m->keys[i]);
        if (strlen(m->keys[i]) != m->key_lens[i] || strlen(v->str) != v->str_len)
            return sk_error(SK_EFORMAT, "%s: __metadata__ key or value '%s' contains a NUL character", path, m->keys[i]);
        for (int j = 0; j < i; j++)
            if (strcmp(m->keys[j], m->keys[i]) == 0)
                return sk_error(SK_EFORMAT, "%s: __metadata__ has duplicate key '%s'", path, m->keys[i]);
        st->meta_keys[i] = strdup(m->keys[i]);
        st->meta_vals[i] = strdup(v->str);
        st->n_meta = i + 1;
        if (!st->meta_keys[i] || !st->meta_vals[i]) return sk_error(SK_ENOMEM, "%s: out of memory", path);
    }
    return SK_OK;
}

static int parse_entry(const char *path, const char *name, const sk_json *e, size_t data_size, sk_st_tensor *t) {
    if (e->type != SK_JSON_OBJ)
        return sk_error(SK_EFORMAT, "%s: tensor '%s': entry is not a JSON object", path, name);
    for (int i = 0; i < e->n; i++) {
        const char *k = e->keys[i];
        if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets"))
            return sk_error(SK_EFORMAT, "%s: tensor '%s': unexpected field \"%s\"", path, name, k);
        for (int j = 0; j < i; j++)
            if (strcmp(e->keys[j], k) == 0)
                return sk_error(SK_EFORMAT, "%s: tensor '%s': duplicate field \"%s\"", path, name, k);
    }
    const sk_json *dt = sk_json_get(e, "dtype"), *sh = sk_json_get(e, "shape"),
                  *off = sk_json_get(e, "data_offsets");
    if (!dt || dt->type != SK_JSON_STR)
        return sk_error(SK_EFORMAT, "%s: tensor '%s': missing or non-string \"dtype\"", path, name);
    int d = -1;
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(dt->str, DTYPES[i].name) == 0 && strlen(dt->str) == dt->str_len) d = i;
    if (d < 0)
        return sk_error(SK_EFORMAT, "%s: tensor '%s': unsupported dtype \"%s\" (known: F32 F16 BF16 F64 I32 I64 U8 BOOL I16 U16 I8)",
                        path, name, dt->str);
    t->dtype = (sk_dtype)d;
    if (!sh || sh->type != SK_JSON_ARR)
        return sk_error(SK_EFORMAT, "%s: tensor '%s': missing \"shape\" array", path, name);
    if (sh->n > SK_ST_MAX_DIMS)
        return sk_error(SK_EFORMAT, "%s: tensor '%s': shape has %d dimensions, at most %d supported",
                        path, name, sh->n, SK_ST_MAX_DIMS);
    t->ndim = sh->n;
    size_t numel = 1;
    int overflow = 0;
    for (int i = 0; i < sh->n; i++) {
        uint64_t v;
        if (!json_uint(&sh->items[i], &v))
            return sk_error(SK_EFORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer", path, name, i);
        t->shape[i] = (int64_t)v;
        if (v && numel > SIZE_MAX / v) overflow = 1;
        else numel *= (size_t)v;
    }
    if (!overflow && numel > SIZE_MAX / DTYPES[d].size) overflow = 1;
    /* an overflowing product is only valid if another dimension is 0 */
    for (int i = 0; i < sh->n; i++) if (t->shape[i] == 0) { overflow = 0; numel = 0; }
    if (overflow)
        return sk_error(SK_EFORMAT, "%s: tensor '%s': shape is too large (byte size overflows)", path, name);
    size_t nbytes = numel * DTYPES[d].size;
    uint64_t b, en;
    if (!off || off->type != SK_JSON_ARR || off->n != 2 || !json_uint(&off->items[0], &b) ||
        !json_uint(&off->items[1], &en))
        return sk_error(SK_EFORMAT, "%s: tensor '%s': \"data_offsets\" must be [begin, end] with non-negative integers",
                        path, name);
    if (b > en)
        return sk_error(SK_EFORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] has begin > end", path, name,
                        (unsigned long long)b, (unsigned long long)en);
    if (en > data_size)
        return sk_error(SK_EFORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] end beyond the data section (%zu bytes; truncated file?)",
                        path, name, (unsigned long long)b, (unsigned long long)en, data_size);
    t->offset = (size_t)b;
    t->nbytes = (size_t)(en - b);
    if (t->nbytes != nbytes) {
        char s[256];
        shape_str(t, s, sizeof s);
        return sk_error(SK_EFORMAT, "%s: tensor '%s': shape %s of %s needs %zu bytes but data_offsets [%llu, %llu] hold %zu",
                        path, name, s, DTYPES[d].name, nbytes, (unsigned long long)b, (unsigned long long)en, t->nbytes);
    }
    return SK_OK;
}

/* Parse and validate the header against a data section of data_size bytes. Fills
 * tensors and metadata of st (not data). */
static int parse_header(const char *path, const char *hdr, size_t hlen, size_t data_size, sk_safetensors *st) {
    sk_json root;
    char err[256];
    if (sk_json_parse(hdr, hlen, &root, err, sizeof err))
        return sk_error(SK_EFORMAT, "%s: invalid JSON header (%zu bytes from file byte 8; offsets below are within it): %s", path, hlen, err);
    int rc = SK_OK;
    int *idx = NULL;
    if (root.type != SK_JSON_OBJ) {
        rc = sk_error(SK_EFORMAT, "%s: header is not a JSON object", path);
        goto done;
    }
    st->tensors = calloc((size_t)root.n + 1, sizeof *st->tensors);
    idx = malloc(((size_t)root.n + 1) * sizeof *idx);
    if (!st->tensors || !idx) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
    int have_meta = 0;
    for (int i = 0; i < root.n; i++) {
        const char *name = root.keys[i];
        if (strcmp(name, "__metadata__") == 0) {
            if (have_meta++) { rc = sk_error(SK_EFORMAT, "%s: duplicate __metadata__", path); goto done; }
            if ((rc = parse_metadata(path, &root.items[i], st))) goto done;
            continue;
        }
        if (root.key_lens[i] == 0) { rc = sk_error(SK_EFORMAT, "%s: tensor with an empty name", path); goto done; }
        if (strlen(name) != root.key_lens[i]) {
            rc = sk_error(SK_EFORMAT, "%s: tensor name '%s...' contains a NUL character", path, name);
            goto done;
        }
        sk_st_tensor *t = &st->tensors[st->n_tensors];
        t->name = strdup(name);
        if (!t->name) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
        st->n_tensors++;
        if ((rc = parse_entry(path, name, &root.items[i], data_size, t))) goto done;
    }
    int n = st->n_tensors;
    g_sort_st = st;
    for (int i = 0; i < n; i++) idx[i] = i;
    qsort(idx, (size_t)n, sizeof *idx, cmp_by_name);
    for (int i = 1; i < n; i++)
        if (strcmp(st->tensors[idx[i - 1]].name, st->tensors[idx[i]].name) == 0) {
            rc = sk_error(SK_EFORMAT, "%s: duplicate tensor name '%s'", path, st->tensors[idx[i]].name);
            goto done;
        }
    for (int i = 0; i < n; i++) idx[i] = i;
    qsort(idx, (size_t)n, sizeof *idx, cmp_by_offset);
    size_t pos = 0;
    const char *prev = NULL;
    for (int i = 0; i < n; i++) {
        const sk_st_tensor *t = &st->tensors[idx[i]];
        if (t->offset < pos) {
            rc = sk_error(SK_EFORMAT, "%s: tensors '%s' and '%s' overlap (bytes %zu..%zu of the data section)",
                          path, prev, t->name, t->offset, pos);
            goto done;
        }
        if (t->offset > pos) {
            rc = sk_error(SK_EFORMAT, "%s: bytes %zu..%zu of the data section belong to no tensor (hole before tensor '%s')",
                          path, pos, t->offset, t->name);
            goto done;
        }
        pos = t->offset + t->nbytes;
        prev = t->name;
    }
    if (pos != data_size)
        rc = sk_error(SK_EFORMAT, "%s: the last %zu bytes of the data section belong to no tensor (data section %zu bytes, tensors end at %zu)",
                      path, data_size - pos, data_size, pos);
done:
    g_sort_st = NULL;
    free(idx);
    sk_json_free(&root);
    return rc;
}

static uint64_t le64(const uint8_t *b) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | b[i];
    return v;
}

/* Checks on the header length common to file and memory readers. */
static int check_header_len(const char *path, uint64_t n, uint64_t size) {
    if (size < 8)
        return sk_error(SK_EFORMAT, "%s: file is %llu bytes, too short for the 8-byte header length of a safetensors file",
                        path, (unsigned long long)size);
    if (n > SK_ST_MAX_HEADER)
        return sk_error(SK_EFORMAT, "%s: header length %llu exceeds the 100 MB limit (not a safetensors file, or corrupt)",
                        path, (unsigned long long)n);
    if (n > size - 8)
        return sk_error(SK_EFORMAT, "%s: header length %llu exceeds the file size %llu - 8 (truncated or corrupt file)",
                        path, (unsigned long long)n, (unsigned long long)size);
    if (n < 2)
        return sk_error(SK_EFORMAT, "%s: header length %llu is too short for a JSON object", path, (unsigned long long)n);
    return SK_OK;
}

int sk_st_read_mem(const void *buf, size_t size, const char *name, sk_safetensors *st) {
    memset(st, 0, sizeof *st);
    st->path = strdup(name ? name : "(memory)");
    if (!st->path) return sk_error(SK_ENOMEM, "out of memory");
    const uint8_t *b = buf;
    uint64_t n = size >= 8 ? le64(b) : 0;
    int rc = check_header_len(st->path, n, size);
    if (!rc) rc = parse_header(st->path, (const char *)b + 8, (size_t)n, size - 8 - (size_t)n, st);
    if (!rc) {
        st->data_size = size - 8 - (size_t)n;
        st->data = malloc(st->data_size ? st->data_size : 1);
        if (!st->data) rc = sk_error(SK_ENOMEM, "%s: cannot allocate %zu bytes of tensor data", st->path, st->data_size);
        else if (st->data_size) memcpy(st->data, b + 8 + n, st->data_size);
    }
    if (rc) sk_st_free(st);
    return rc;
}

int sk_st_read(const char *path, sk_safetensors *st) {
    memset(st, 0, sizeof *st);
    if (!path) return sk_error(SK_EINVAL, "sk_st_read: NULL path");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sk_error(SK_EIO, "%s: cannot open: %s", path, strerror(errno));
    int rc = SK_OK;
    char *hdr = NULL;
    struct stat sb;
    if (fstat(fd, &sb) < 0) { rc = sk_error(SK_EIO, "%s: cannot stat: %s", path, strerror(errno)); goto done; }
    if (!S_ISREG(sb.st_mode)) { rc = sk_error(SK_EIO, "%s: not a regular file", path); goto done; }
    st->path = strdup(path);
    if (!st->path) { rc = sk_error(SK_ENOMEM, "%s: out of memory", path); goto done; }
    uint64_t size = (uint64_t)sb.st_size;
    uint8_t lenbuf[8];
    if (size >= 8 && (rc = sk_read_full(fd, path, lenbuf, 8, "header length"))) goto done;
    uint64_t n = size >= 8 ? le64(lenbuf) : 0;
    if ((rc = check_header_len(path, n, size))) goto done;
    hdr = malloc((size_t)n);
    if (!hdr) { rc = sk_error(SK_ENOMEM, "%s: cannot allocate %llu bytes for the header", path, (unsigned long long)n); goto done; }
    if ((rc = sk_read_full(fd, path, hdr, (size_t)n, "header"))) goto done;
    size_t data_size = (size_t)(size - 8 - n);
    if ((rc = parse_header(path, hdr, (size_t)n, data_size, st))) goto done;
    st->data = malloc(data_size ? data_size : 1);
    if (!st->data) { rc = sk_error(SK_ENOMEM, "%s: cannot allocate %zu bytes of tensor data", path, data_size); goto done; }
    st->data_size = data_size;
    if ((rc = sk_read_full(fd, path, st->data, data_size, "tensor data"))) goto done;
done:
    free(hdr);
    close(fd);
    if (rc) sk_st_free(st);
    return rc;
}

const sk_st_tensor *sk_st_find(const sk_safetensors *st, const char *name) {
    if (!st || !name) return NULL;
    for (int i = 0; i < st->n_tensors; i++)
        if (strcmp(st->tensors[i].name, name) == 0) return &st->tensors[i];
    return NULL;
}

const char *sk_st_meta(const sk_safetensors *st, const char *key) {
    if (!st || !key) return NULL;
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta_keys[i], key) == 0) return st->meta_vals[i];
    return NULL;
}

/* IEEE half -> float, exact (every half is a float), including subnormals, inf, NaN. */

int sk_st_get_f32(const sk_safetensors *st, const char *name, float *dst, size_t n) {
    const char *path = st && st->path ? st->path : "(safetensors)";
    if (!st || !name) return sk_error(SK_EINVAL, "sk_st_get_f32: NULL argument");
    const sk_st_tensor *t = sk_st_find(st, name);
    if (!t) return sk_error(SK_EFORMAT, "%s: no tensor named '%s'", path, name);
    size_t es = DTYPES[t->dtype].size, numel = t->nbytes / es;
    char s[256];
    shape_str(t, s, sizeof s);
    if (numel != n)
        return sk_error(SK_EFORMAT, "%s: tensor '%s' has shape %s (%zu elements), expected %zu elements",
                        path, name, s, numel, n);
    if (n && !dst) return sk_error(SK_EINVAL, "sk_st_get_f32: NULL destination");
    const uint8_t *src = st->data + t->offset;
    switch (t->dtype) {
    case SK_F32:
        if (n) memcpy(dst, src, n * 4);
        break;
    case SK_F16:
        for (size_t i = 0; i < n; i++) dst[i] = sk_f16_to_f32((uint16_t)(src[2 * i] | (src[2 * i + 1] << 8)));
        break;
    case SK_BF16:
        for (size_t i = 0; i < n; i++) {
            uint32_t bits = (uint32_t)(src[2 * i] | (src[2 * i + 1] << 8)) << 16;
            memcpy(&dst[i], &bits, 4);
        }
        break;
    case SK_F64:
        for (size_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, src + 8 * i, 8);
            dst[i] = (float)d;
        }
        break;
    default:
        return sk_error(SK_EFORMAT, "%s: tensor '%s' has dtype %s, expected a floating-point dtype (F32, F16, BF16, F64)",
                        path, name, DTYPES[t->dtype].name);
    }
    return SK_OK;
}

/* ------------------------------------------------------------------ writer */

typedef struct {
    char *name;
    sk_dtype dtype;
    int ndim;
    int64_t shape[SK_ST_MAX_DIMS];
    const void *data;
    size_t nbytes;
} wtensor;

struct sk_st_writer {
    wtensor *t; int n, cap;
    char **mk, **mv; int nm, mcap;
};

sk_st_writer *sk_st_writer_new(void) {
    sk_st_writer *w = calloc(1, sizeof *w);
    if (!w) sk_error(SK_ENOMEM, "sk_st_writer_new: out of memory");
    return w;
}

void sk_st_writer_free(sk_st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) free(w->t[i].name);
    for (int i = 0; i < w->nm; i++) { free(w->mk[i]); free(w->mv[i]); }
    free(w->t); free(w->mk); free(w->mv);
    free(w);
}

/* Would s survive a trip through the JSON writer? (well-formed UTF-8) */
static int valid_utf8(const char *s) { return sk_utf8_valid(s, strlen(s), NULL); }

int sk_st_add(sk_st_writer *w, const char *name, sk_dtype dtype, int ndim, const int64_t *shape, const void *data) {
    if (!w || !name) return sk_error(SK_EINVAL, "sk_st_add: NULL writer or name");
    if (!*name || strcmp(name, "__metadata__") == 0)
        return sk_error(SK_EINVAL, "sk_st_add: invalid tensor name '%s'", name);
    if (!valid_utf8(name)) return sk_error(SK_EINVAL, "sk_st_add: tensor name '%s' is not valid UTF-8", name);
    if ((int)dtype < 0 || (int)dtype >= N_DTYPES)
        return sk_error(SK_EINVAL, "sk_st_add: tensor '%s': unknown dtype %d", name, (int)dtype);
    if (ndim < 0 || ndim > SK_ST_MAX_DIMS || (ndim > 0 && !shape))
        return sk_error(SK_EINVAL, "sk_st_add: tensor '%s': ndim %d not in [0, %d]", name, ndim, SK_ST_MAX_DIMS);
    size_t numel = 1;
    int zero = 0, overflow = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (uint64_t)shape[i] > ((uint64_t)1 << 53))
            return sk_error(SK_EINVAL, "sk_st_add: tensor '%s': invalid dimension %lld", name, (long long)shape[i]);
        if (shape[i] == 0) zero = 1;
        else if (numel > SIZE_MAX / (size_t)shape[i]) overflow = 1;
        else numel *= (size_t)shape[i];
    }
    if (zero) numel = 0;
    if ((!zero && overflow) || numel > SIZE_MAX / DTYPES[dtype].size / 2)
        return sk_error(SK_EINVAL, "sk_st_add: tensor '%s': shape too large", name);
    size_t nbytes = numel * DTYPES[dtype].size;
    if (nbytes && !data) return sk_error(SK_EINVAL, "sk_st_add: tensor '%s': NULL data", name);
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return sk_error(SK_EINVAL, "sk_st_add: duplicate tensor name '%s'", name);
    if (w->n == w->cap) {
        int nc = w->cap ? w->cap * 2 : 16;
        wtensor *t = realloc(w->t, (size_t)nc * sizeof *t);
        if (!t) return sk_error(SK_ENOMEM, "sk_st_add: out of memory");
        w->t = t;
        w->cap = nc;
    }
    wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) return sk_error(SK_ENOMEM, "sk_st_add: out of memory");
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->data = data;
    t->nbytes = nbytes;
    w->n++;
    return SK_OK;
}

int sk_st_add_meta(sk_st_writer *w, const char *key, const char *value) {
    if (!w || !key || !value) return sk_error(SK_EINVAL, "sk_st_add_meta: NULL argument");
    if (!valid_utf8(key) || !valid_utf8(value))
        return sk_error(SK_EINVAL, "sk_st_add_meta: key or value of '%s' is not valid UTF-8", key);
    for (int i = 0; i < w->nm; i++)
        if (strcmp(w->mk[i], key) == 0) return sk_error(SK_EINVAL, "sk_st_add_meta: duplicate key '%s'", key);
    if (w->nm == w->mcap) {
        int nc = w->mcap ? w->mcap * 2 : 8;
        char **k = realloc(w->mk, (size_t)nc * sizeof *k);
        if (!k) return sk_error(SK_ENOMEM, "sk_st_add_meta: out of memory");
        w->mk = k;
        char **v = realloc(w->mv, (size_t)nc * sizeof *v);
        if (!v) return sk_error(SK_ENOMEM, "sk_st_add_meta: out of memory");
        w->mv = v;
        w->mcap = nc;
    }
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) { free(k); free(v); return sk_error(SK_ENOMEM, "sk_st_add_meta: out of memory"); }
    w->mk[w->nm] = k;
    w->mv[w->nm] = v;
    w->nm++;
    return SK_OK;
}

static int append(char **b, size_t *len, size_t *cap, const char *s) {
    size_t n = strlen(s);
    if (*len + n + 1 > *cap) {
        size_t nc = *cap ? *cap : 256;
        while (nc < *len + n + 1) nc *= 2;
        char *nb = realloc(*b, nc);
        if (!nb) return 1;
        *b = nb;
        *cap = nc;
    }
    memcpy(*b + *len, s, n + 1);
    *len += n;
    return 0;
}

int sk_st_write(sk_st_writer *w, const char *path) {
    if (!w || !path) return sk_error(SK_EINVAL, "sk_st_write: NULL writer or path");
    char *h = NULL;
    size_t len = 0, cap = 0;
    int bad = append(&h, &len, &cap, "{");
    if (w->nm) {
        bad |= append(&h, &len, &cap, "\"__metadata__\":{");
        for (int i = 0; i < w->nm && !bad; i++) {
            if (i) bad |= append(&h, &len, &cap, ",");
            bad |= sk_json_write_str(&h, &len, &cap, w->mk[i], strlen(w->mk[i])) != 0;
            bad |= append(&h, &len, &cap, ":");
            bad |= sk_json_write_str(&h, &len, &cap, w->mv[i], strlen(w->mv[i])) != 0;
        }
        bad |= append(&h, &len, &cap, "}");
    }
    size_t off = 0;
    for (int i = 0; i < w->n && !bad; i++) {
        const wtensor *t = &w->t[i];
        char num[64];
        if (i || w->nm) bad |= append(&h, &len, &cap, ",");
        bad |= sk_json_write_str(&h, &len, &cap, t->name, strlen(t->name)) != 0;
        bad |= append(&h, &len, &cap, ":{\"dtype\":\"");
        bad |= append(&h, &len, &cap, DTYPES[t->dtype].name);
        bad |= append(&h, &len, &cap, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            snprintf(num, sizeof num, d ? ",%lld" : "%lld", (long long)t->shape[d]);
            bad |= append(&h, &len, &cap, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%zu,%zu]}", off, off + t->nbytes);
        bad |= append(&h, &len, &cap, num);
        off += t->nbytes;
    }
    bad |= append(&h, &len, &cap, "}");
    while (!bad && len % 8) bad |= append(&h, &len, &cap, " ");
    if (bad) { free(h); return sk_error(SK_ENOMEM, "%s: out of memory building the header", path); }
    if ((uint64_t)len > SK_ST_MAX_HEADER) {
        free(h);
        return sk_error(SK_EINVAL, "%s: header of %zu bytes exceeds the 100 MB limit readers accept", path, len);
    }
    uint8_t lenbuf[8];
    for (int i = 0; i < 8; i++) lenbuf[i] = (uint8_t)((uint64_t)len >> (8 * i));
    sk_chunk *ch = malloc(((size_t)w->n + 2) * sizeof *ch);
    if (!ch) { free(h); return sk_error(SK_ENOMEM, "%s: out of memory", path); }
    ch[0] = (sk_chunk){ lenbuf, 8 };
    ch[1] = (sk_chunk){ h, len };
    for (int i = 0; i < w->n; i++) ch[2 + i] = (sk_chunk){ w->t[i].data, w->t[i].nbytes };
    int rc = sk_write_atomic_chunks(path, ch, (size_t)w->n + 2);
    free(ch);
    free(h);
    return rc;
}
