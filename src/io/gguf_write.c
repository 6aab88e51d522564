/* GGUF writer (version 3, alignment 32; the layout is in gguf.c): metadata and tensor infos
 * serialised into one header buffer, then the tensors streamed from their buffers, each
 * padded to the alignment, through sk_write_atomic_chunks (temp file, fsync, rename). */
#include "base/fileio.h"
#include "io/io.h"

#include <stdlib.h>
#include <string.h>

#define ALIGN 32

typedef struct { char *name; int type, ndim; int64_t ne[4]; const void *data; int own; uint64_t nbytes; } wtensor;

struct sk_gguf_writer {
    uint8_t *kv; size_t kv_len, kv_cap;    /* serialised key/value pairs */
    size_t n_kv;
    char **keys;
    wtensor *t; size_t n_t, t_cap;
};

sk_gguf_writer *sk_gguf_writer_new(void) { return calloc(1, sizeof(sk_gguf_writer)); }

void sk_gguf_writer_free(sk_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    for (size_t i = 0; i < w->n_t; i++) { free(w->t[i].name); if (w->t[i].own) free((void *)w->t[i].data); }
    free(w->keys); free(w->kv); free(w->t); free(w);
}

static int put(sk_gguf_writer *w, const void *p, size_t n) {
    if (sk_grow((void **)&w->kv, &w->kv_cap, w->kv_len + n, 1)) return sk_error(SK_ENOMEM, "out of memory");
    memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
    return SK_OK;
}
static int put_u32(sk_gguf_writer *w, uint32_t v) { return put(w, &v, 4); }
static int put_u64(sk_gguf_writer *w, uint64_t v) { return put(w, &v, 8); }
static int put_str(sk_gguf_writer *w, const char *s, size_t n) { return put_u64(w, n) || put(w, s, n) ? SK_ENOMEM : SK_OK; }

/* the key, unique, then its type */
static int key(sk_gguf_writer *w, const char *k, uint32_t type) {
    for (size_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->keys[i], k)) return sk_error(SK_EINVAL, "GGUF metadata key '%s' given twice", k);
    char **nk = realloc(w->keys, (w->n_kv + 1) * sizeof *nk);
    if (!nk) return sk_error(SK_ENOMEM, "out of memory");
    w->keys = nk;
    if (!(w->keys[w->n_kv] = strdup(k))) return sk_error(SK_ENOMEM, "out of memory");
    w->n_kv++;
    return put_str(w, k, strlen(k)) || put_u32(w, type) ? SK_ENOMEM : SK_OK;
}

int sk_gguf_add_str(sk_gguf_writer *w, const char *k, const char *s, size_t len) {
    int rc = key(w, k, SK_GGUF_STR);
    return rc ? rc : put_str(w, s, len);
}
int sk_gguf_add_u32(sk_gguf_writer *w, const char *k, uint32_t v) { return key(w, k, SK_GGUF_U32) || put_u32(w, v); }
int sk_gguf_add_i32(sk_gguf_writer *w, const char *k, int32_t v) { return key(w, k, SK_GGUF_I32) || put(w, &v, 4); }
int sk_gguf_add_f32(sk_gguf_writer *w, const char *k, float v) { return key(w, k, SK_GGUF_F32) || put(w, &v, 4); }
int sk_gguf_add_bool(sk_gguf_writer *w, const char *k, int v) {
    uint8_t b = v != 0;
    return key(w, k, SK_GGUF_BOOL) || put(w, &b, 1);
}
int sk_gguf_add_str_arr(sk_gguf_writer *w, const char *k, const char *const *s, const size_t *lens, size_t n) {
    int rc = key(w, k, SK_GGUF_ARR) || put_u32(w, SK_GGUF_STR) || put_u64(w, n);
    for (size_t i = 0; !rc && i < n; i++) rc = put_str(w, s[i], lens[i]);
    return rc ? SK_ENOMEM : SK_OK;
}
int sk_gguf_add_f32_arr(sk_gguf_writer *w, const char *k, const float *v, size_t n) {
    return key(w, k, SK_GGUF_ARR) || put_u32(w, SK_GGUF_F32) || put_u64(w, n) || put(w, v, 4 * n) ? SK_ENOMEM : SK_OK;
}
int sk_gguf_add_i32_arr(sk_gguf_writer *w, const char *k, const int32_t *v, size_t n) {
    return key(w, k, SK_GGUF_ARR) || put_u32(w, SK_GGUF_I32) || put_u64(w, n) || put(w, v, 4 * n) ? SK_ENOMEM : SK_OK;
}

int sk_gguf_add_tensor(sk_gguf_writer *w, const char *name, int type, int ndim, const int64_t *ne, const void *data, int own) {
    if (ndim < 1 || ndim > 4) { if (own) free((void *)data); return sk_error(SK_EINVAL, "GGUF tensor '%s': %d dimensions", name, ndim); }
    uint64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (uint64_t)ne[d];
    uint64_t bytes = type == SK_GGML_F32 ? 4 * n : type == SK_GGML_F16 || type == SK_GGML_BF16 ? 2 * n
                   : type == SK_GGML_Q8_0 && ne[0] % 32 == 0 ? n / 32 * 34 : 0;
    if (!bytes) { if (own) free((void *)data); return sk_error(SK_EINVAL, "GGUF tensor '%s': type %s is not written", name, sk_ggml_type_name(type)); }
    for (size_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name)) { if (own) free((void *)data); return sk_error(SK_EINVAL, "GGUF tensor '%s' given twice", name); }
    if (sk_grow((void **)&w->t, &w->t_cap, w->n_t + 1, sizeof *w->t)) { if (own) free((void *)data); return sk_error(SK_ENOMEM, "out of memory"); }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) { if (own) free((void *)data); return sk_error(SK_ENOMEM, "out of memory"); }
    t->type = type; t->ndim = ndim; t->data = data; t->own = own; t->nbytes = bytes;
    for (int d = 0; d < ndim; d++) t->ne[d] = ne[d];
    w->n_t++;
    return SK_OK;
}

int sk_gguf_write(sk_gguf_writer *w, const char *path) {
    static const uint8_t zeros[ALIGN] = {0};
    sk_gguf_writer h = {0};                     /* the header: magic, counts, metadata, infos */
    int rc = put(&h, "GGUF", 4) || put_u32(&h, 3) || put_u64(&h, w->n_t) || put_u64(&h, w->n_kv) || put(&h, w->kv, w->kv_len);
    uint64_t off = 0;
    for (size_t i = 0; !rc && i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        rc = put_str(&h, t->name, strlen(t->name)) || put_u32(&h, (uint32_t)t->ndim);
        for (int d = 0; !rc && d < t->ndim; d++) rc = put_u64(&h, (uint64_t)t->ne[d]);
        rc = rc || put_u32(&h, (uint32_t)t->type) || put_u64(&h, off);
        off += (t->nbytes + ALIGN - 1) / ALIGN * ALIGN;
    }
    size_t pad = (ALIGN - h.kv_len % ALIGN) % ALIGN;
    if (!rc) rc = put(&h, zeros, pad);
    sk_chunk *ch = rc ? NULL : malloc((2 * w->n_t + 1) * sizeof *ch);
    if (!rc && !ch) rc = SK_ENOMEM;
    if (rc) { free(h.kv); return sk_error(SK_ENOMEM, "out of memory"); }
    size_t nc = 0;
    ch[nc++] = (sk_chunk){h.kv, h.kv_len};
    for (size_t i = 0; i < w->n_t; i++) {
        ch[nc++] = (sk_chunk){w->t[i].data, (size_t)w->t[i].nbytes};
        size_t p = (size_t)((ALIGN - w->t[i].nbytes % ALIGN) % ALIGN);
        if (p) ch[nc++] = (sk_chunk){zeros, p};
    }
    rc = sk_write_atomic_chunks(path, ch, nc);
    free(ch); free(h.kv);
    return rc;
}
