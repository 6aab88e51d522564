/* Token shards (llm.c layout, raw nanoGPT uint16 files) and the training data loader.
 * Formats and guarantees: docs/data.md. */
#include "skiplm_train.h"
#include "base/fileio.h"

#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "skiplm shards are little-endian and mapped directly; big-endian hosts are not supported"
#endif

/* ------------------------------------------------------------------ shards */

int sk_shard_write_version(const char *path, const int32_t *ids, size_t n, int version) {
    if (version != SK_SHARD_VERSION && version != SK_SHARD_VERSION_U32)
        return sk_error(SK_EINVAL, "%s: shard version %d: skiplm writes 1 (uint16) or 2 (uint32)", path, version);
    if (n > (size_t)INT32_MAX)
        return sk_error(SK_EINVAL, "%s: %zu tokens do not fit one shard (the header count is an int32)", path, n);
    const int32_t hi = version == SK_SHARD_VERSION ? 65535 : INT32_MAX;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] > hi)
            return sk_error(SK_EINVAL, "%s: token id %d at position %zu does not fit in %s", path, (int)ids[i], i,
                            version == SK_SHARD_VERSION ? "uint16 (version 1 shards hold ids 0..65535; version 2 holds uint32)"
                                                        : "a shard (ids must be >= 0)");
    int32_t header[SK_SHARD_HEADER_INTS] = {0};
    header[0] = SK_SHARD_MAGIC; header[1] = version; header[2] = (int32_t)n;
    if (version == SK_SHARD_VERSION_U32) {     /* int32 ids >= 0 are their uint32 bits */
        sk_chunk chunks[2] = { { header, sizeof header }, { ids, n * sizeof *ids } };
        return sk_write_atomic_chunks(path, chunks, 2);
    }
    uint16_t *tok = malloc(n ? n * sizeof *tok : 1);
    if (!tok) return sk_error(SK_ENOMEM, "%s: out of memory for %zu tokens", path, n);
    for (size_t i = 0; i < n; i++) tok[i] = (uint16_t)ids[i];
    sk_chunk chunks[2] = { { header, sizeof header }, { tok, n * sizeof *tok } };
    int rc = sk_write_atomic_chunks(path, chunks, 2);
    free(tok);
    return rc;
}

int sk_shard_write(const char *path, const int32_t *ids, size_t n) {
    return sk_shard_write_version(path, ids, n, SK_SHARD_VERSION);
}

void sk_shard_close(sk_shard *s) {
    if (!s) return;
    if (s->map_) munmap(s->map_, s->map_len_);
    free(s->path);
    memset(s, 0, sizeof *s);
}

int sk_shard_open(sk_shard *s, const char *path) {
    memset(s, 0, sizeof *s);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return sk_error(SK_EIO, "%s: cannot open token shard: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) { int e = errno; close(fd); return sk_error(SK_EIO, "%s: %s", path, strerror(e)); }
    if (!S_ISREG(st.st_mode)) { close(fd); return sk_error(SK_EIO, "%s: not a regular file", path); }
    size_t size = (size_t)st.st_size;
    if (size == 0) { close(fd); return sk_error(SK_EFORMAT, "%s: empty file, not a token shard", path); }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return sk_error(SK_EIO, "%s: cannot map: %s", path, strerror(e));
    const int32_t *h = map;
    int rc = SK_OK;
    if (size >= 4 && h[0] == SK_SHARD_MAGIC) {
        if (size < sizeof(int32_t) * SK_SHARD_HEADER_INTS)
            rc = sk_error(SK_EFORMAT, "%s: truncated header (%zu bytes, the header alone is %zu)", path, size,
                          sizeof(int32_t) * SK_SHARD_HEADER_INTS);
        else if (h[1] == SK_SHARD_VERSION_MASK)
            rc = sk_error(SK_EFORMAT, "%s: a loss mask (version %d), not a token shard", path, SK_SHARD_VERSION_MASK);
        else if (h[1] != SK_SHARD_VERSION && h[1] != SK_SHARD_VERSION_U32)
            rc = sk_error(SK_EFORMAT, "%s: unsupported shard version %d (skiplm reads version 1, uint16 tokens, and 2, "
                          "uint32 tokens)", path, (int)h[1]);
        else {
            size_t body = size - sizeof(int32_t) * SK_SHARD_HEADER_INTS, w = h[1] == SK_SHARD_VERSION ? 2 : 4;
            if (h[2] < 0 || body % w != 0 || (size_t)h[2] != body / w)
                rc = sk_error(SK_EFORMAT, "%s: header says %d tokens but file holds %zu%s (version %d: %zu bytes a token)",
                              path, (int)h[2], body / w, body % w ? (w == 2 ? " and a half" : " and a part") : "", (int)h[1], w);
            else if (w == 2) { s->tokens = (const uint16_t *)(h + SK_SHARD_HEADER_INTS); s->n = body / 2; }
            else { s->tokens32 = (const uint32_t *)(h + SK_SHARD_HEADER_INTS); s->n = body / 4; }
            s->version = h[1];
        }
    } else if (size % 2 != 0) {
        rc = sk_error(SK_EFORMAT, "%s: no shard header (magic %d) and odd size %zu: not a uint16 token file",
                      path, SK_SHARD_MAGIC, size);
    } else if (size >= sizeof(int32_t) * SK_SHARD_HEADER_INTS &&
               ((h[1] == SK_SHARD_VERSION && h[2] >= 0 && (size_t)h[2] * 2 + sizeof(int32_t) * SK_SHARD_HEADER_INTS == size) ||
                (h[1] == SK_SHARD_VERSION_U32 && h[2] >= 0 && (size_t)h[2] * 4 + sizeof(int32_t) * SK_SHARD_HEADER_INTS == size))) {
        /* version and count fit an llm.c header exactly: a shard whose magic was damaged,
         * not raw tokens; reading its header as 512 tokens would be silent garbage */
        rc = sk_error(SK_EFORMAT, "%s: damaged shard header: magic %d instead of %d (version and token count look "
                      "like a header)", path, (int)h[0], SK_SHARD_MAGIC);
    } else {
        s->tokens = map; s->n = size / 2; s->headerless = 1;
    }
    if (rc) { munmap(map, size); memset(s, 0, sizeof *s); return rc; }
    s->map_ = map; s->map_len_ = size;
    s->path = strdup(path);
    if (!s->path) { sk_shard_close(s); return sk_error(SK_ENOMEM, "out of memory"); }
    return SK_OK;
}

/* ------------------------------------------------------------- loss masks */

int sk_mask_write(const char *path, const uint8_t *mask, size_t n) {
    if (n > (size_t)INT32_MAX)
        return sk_error(SK_EINVAL, "%s: %zu mask entries do not fit one file (the header count is an int32)", path, n);
    for (size_t i = 0; i < n; i++)
        if (mask[i] > 1) return sk_error(SK_EINVAL, "%s: mask entry %zu is %d (0 or 1)", path, i, mask[i]);
    int32_t header[SK_SHARD_HEADER_INTS] = {0};
    header[0] = SK_SHARD_MAGIC; header[1] = SK_SHARD_VERSION_MASK; header[2] = (int32_t)n;
    sk_chunk chunks[2] = { { header, sizeof header }, { mask, n } };
    return sk_write_atomic_chunks(path, chunks, 2);
}

int sk_mask_open(sk_shard *s, const char *path) {
    memset(s, 0, sizeof *s);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return sk_error(SK_EIO, "%s: cannot open loss mask: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { close(fd); return sk_error(SK_EIO, "%s: not a regular file", path); }
    size_t size = (size_t)st.st_size, hb = sizeof(int32_t) * SK_SHARD_HEADER_INTS;
    if (size < hb) { close(fd); return sk_error(SK_EFORMAT, "%s: %zu bytes, shorter than a mask header", path, size); }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return sk_error(SK_EIO, "%s: cannot map: %s", path, strerror(e));
    const int32_t *h = map;
    const uint8_t *m = (const uint8_t *)map + hb;
    int rc = SK_OK;
    if (h[0] != SK_SHARD_MAGIC || h[1] != SK_SHARD_VERSION_MASK)
        rc = sk_error(SK_EFORMAT, "%s: not a loss mask (magic %d, version %d; a mask has %d, %d)", path, (int)h[0],
                      (int)h[1], SK_SHARD_MAGIC, SK_SHARD_VERSION_MASK);
    else if (h[2] < 0 || (size_t)h[2] != size - hb)
        rc = sk_error(SK_EFORMAT, "%s: header says %d mask entries but file holds %zu", path, (int)h[2], size - hb);
    for (size_t i = 0; !rc && i < size - hb; i++)
        if (m[i] > 1) rc = sk_error(SK_EFORMAT, "%s: mask entry %zu is %d (0 or 1)", path, i, m[i]);
    if (rc) { munmap(map, size); return rc; }
    s->mask = m; s->n = size - hb; s->version = SK_SHARD_VERSION_MASK;
    s->map_ = map; s->map_len_ = size;
    s->path = strdup(path);
    if (!s->path) { sk_shard_close(s); return sk_error(SK_ENOMEM, "out of memory"); }
    return SK_OK;
}

int sk_mask_path(const char *shard, char *out, size_t n) {
    size_t len = strlen(shard);
    int w = len > 4 && !strcmp(shard + len - 4, ".bin") ? snprintf(out, n, "%.*s.mask.bin", (int)(len - 4), shard)
                                                         : snprintf(out, n, "%s.mask", shard);
    return w < 0 || (size_t)w >= n ? sk_error(SK_EINVAL, "%s: path too long for its mask's name", shard) : SK_OK;
}

int sk_shard_check_vocab(const sk_shard *s, int vocab_size, size_t *pos, int *value) {
    for (size_t i = 0; i < s->n; i++) {
        uint32_t t = sk_shard_at(s, i);
        if (t >= (uint32_t)vocab_size) {
            if (pos) *pos = i;
            if (value) *value = t > INT32_MAX ? -1 : (int)t;
            return sk_error(SK_EFORMAT, "%s: token %u at position %zu is outside the vocabulary (size %d)",
                            s->path, (unsigned)t, i, vocab_size);
        }
    }
    return SK_OK;
}

/* ------------------------------------------------------------------ loader */

struct sk_loader {
    sk_loader_cfg cfg;
    int n_shards;
    sk_shard *shards;
    sk_shard *masks;       /* masks[i].mask: shard i's loss mask, or NULL */
    int has_mask;
    int n_short;           /* shards shorter than one window (they give none) */
    uint64_t *first;       /* first[i]: index of shard i's first window; first[n_shards] = N */
    uint64_t N;
    uint64_t consumed;
    /* shuffled order over several shards, for one epoch (order_epoch): the shards in the
     * order ord[0..), and where each starts in that epoch's list (ostart, n_shards + 1) */
    uint64_t order_epoch;
    int *ord;
    uint64_t *ostart;
};

static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* A seeded bijection of [0, N): a 4-round Feistel network on the smallest even number of
 * bits covering N, with cycle walking (values >= N are permuted again). O(1) memory, so
 * any position of any epoch is computed directly. */
static uint64_t permute(uint64_t i, uint64_t N, uint64_t seed, uint64_t epoch) {
    if (N <= 1) return i;
    int bits = 2;
    while (bits < 64 && (1ULL << bits) < N) bits += 2;
    int half = bits / 2;
    uint64_t mask = (1ULL << half) - 1;
    uint64_t key = mix64(seed ^ mix64(epoch + 0x5bd1e995ULL));
    uint64_t x = i;
    do {
        uint64_t L = x >> half, R = x & mask;
        for (uint64_t r = 0; r < 4; r++) {
            uint64_t F = mix64(key ^ (r << 56) ^ R) & mask;
            uint64_t nl = R;
            R = L ^ F;
            L = nl;
        }
        x = (L << half) | R;
    } while (x >= N);
    return x;
}

void sk_loader_free(sk_loader *L) {
    if (!L) return;
    for (int i = 0; i < L->n_shards; i++) { sk_shard_close(&L->shards[i]); sk_shard_close(&L->masks[i]); }
    free(L->shards); free(L->masks); free(L->first); free(L->ord); free(L->ostart); free(L);
}

/* shard i's loss mask, where there is one beside it; its length must be the shard's */
static int open_mask(sk_loader *L, int i) {
    char mp[4200];
    struct stat st;
    if (sk_mask_path(L->shards[i].path, mp, sizeof mp) || stat(mp, &st) != 0) return SK_OK;
    int rc = sk_mask_open(&L->masks[i], mp);
    if (!rc && L->masks[i].n != L->shards[i].n)
        rc = sk_error(SK_EFORMAT, "%s: %zu mask entries but its shard %s holds %zu tokens", mp, L->masks[i].n,
                      L->shards[i].path, L->shards[i].n);
    if (!rc) L->has_mask = 1;
    return rc;
}

int sk_loader_open(sk_loader **out, const char *const *paths, int n_paths, const sk_loader_cfg *cfg) {
    if (n_paths <= 0) return sk_error(SK_EINVAL, "data loader: no shards given");
    if (cfg->B <= 0 || cfg->T <= 0) return sk_error(SK_EINVAL, "data loader: B=%d and T=%d must be positive", cfg->B, cfg->T);
    int ws = cfg->world_size > 0 ? cfg->world_size : 1;
    if (cfg->rank < 0 || cfg->rank >= ws)
        return sk_error(SK_EINVAL, "data loader: rank %d outside [0, world_size=%d)", cfg->rank, ws);
    sk_loader *L = calloc(1, sizeof *L);
    if (!L || !(L->shards = calloc((size_t)n_paths, sizeof *L->shards)) ||
        !(L->masks = calloc((size_t)n_paths, sizeof *L->masks)) || !(L->ord = calloc((size_t)n_paths, sizeof *L->ord)) ||
        !(L->ostart = calloc((size_t)n_paths + 1, sizeof *L->ostart)) ||
        !(L->first = calloc((size_t)n_paths + 1, sizeof *L->first))) {
        sk_loader_free(L);
        return sk_error(SK_ENOMEM, "data loader: out of memory");
    }
    L->cfg = *cfg;
    L->cfg.world_size = ws;
    int rc = SK_OK;
    for (int i = 0; i < n_paths && !rc; i++) {
        rc = sk_shard_open(&L->shards[i], paths[i]);
        if (rc) break;
        L->n_shards = i + 1;
        sk_shard *s = &L->shards[i];
        if (cfg->vocab_size > 0 && (rc = sk_shard_check_vocab(s, cfg->vocab_size, NULL, NULL))) break;
        if (cfg->vocab_size <= 0 && s->tokens32 && (rc = sk_shard_check_vocab(s, INT32_MAX, NULL, NULL))) break;
        if ((rc = open_mask(L, i))) break;
        /* a shard shorter than one window gives none (the last of a sharded stream may be) */
        L->first[i + 1] = L->first[i] + (s->n > (size_t)cfg->T ? (s->n - 1) / (size_t)cfg->T : 0);
        if (s->n <= (size_t)cfg->T) L->n_short++;
    }
    if (!rc && L->first[n_paths] == 0) {
        const sk_shard *s = &L->shards[0];
        rc = n_paths == 1 ? sk_error(SK_EINVAL, "%s: %zu tokens, shorter than one window of T+1 = %d tokens", paths[0], s->n, cfg->T + 1)
                          : sk_error(SK_EINVAL, "%s and the %d other shards are each shorter than one window of T+1 = %d tokens",
                                     paths[0], n_paths - 1, cfg->T + 1);
    }
    if (rc) { sk_loader_free(L); return rc; }
    L->N = L->first[n_paths];
    L->order_epoch = UINT64_MAX;
    *out = L;
    return SK_OK;
}

/* The shard holding window w (global index): the last with first <= w. */
static int shard_of(const sk_loader *L, uint64_t w) {
    int lo = 0, hi = L->n_shards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (L->first[mid] <= w) lo = mid; else hi = mid - 1;
    }
    return lo;
}

/* Window w (global index) as inputs x and targets y (T each); y is -1 where the target's
 * loss mask is 0. */
static void copy_window(const sk_loader *L, uint64_t w, int32_t *x, int32_t *y) {
    const int k = shard_of(L, w), T = L->cfg.T;
    const sk_shard *s = &L->shards[k];
    const uint64_t at = (w - L->first[k]) * (uint64_t)T;
    for (int t = 0; t <= T; t++) {
        int32_t v = s->tokens32 ? (int32_t)s->tokens32[at + t] : s->tokens[at + t];
        if (t < T) x[t] = v;
        if (t > 0) y[t - 1] = v;
    }
    const uint8_t *m = L->masks[k].mask;
    if (m) for (int t = 0; t < T; t++) if (!m[at + t + 1]) y[t] = -1;
}

/* The shard order of an epoch over several shards (shuffle = 1), cached for that epoch. */
static void shard_order(sk_loader *L, uint64_t epoch) {
    if (L->order_epoch == epoch) return;
    const uint64_t salt = 0x5348415244ULL;       /* "SHARD": not the windows' own permutation */
    for (int j = 0; j < L->n_shards; j++) {
        int k = (int)permute((uint64_t)j, (uint64_t)L->n_shards, L->cfg.seed ^ salt, epoch);
        L->ord[j] = k;
        L->ostart[j + 1] = L->ostart[j] + (L->first[k + 1] - L->first[k]);
    }
    L->order_epoch = epoch;
}

/* Position g of the stream -> global window index. shuffle = 0: list order. shuffle = 1,
 * one shard: a permutation of its windows (seed, epoch); several: the shards in a permuted
 * order, each shard's windows permuted with its own seed (shard 0's is the seed itself, so
 * one shard reads as before). */
static uint64_t window_at(sk_loader *L, uint64_t g) {
    uint64_t epoch = g / L->N, i = g % L->N;
    if (!L->cfg.shuffle) return i;
    if (L->n_shards == 1) return permute(i, L->N, L->cfg.seed, epoch);
    shard_order(L, epoch);
    int lo = 0, hi = L->n_shards - 1;              /* the last j with ostart[j] <= i */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (L->ostart[mid] <= i) lo = mid; else hi = mid - 1;
    }
    const int k = L->ord[lo];
    const uint64_t nk = L->first[k + 1] - L->first[k], seed_k = L->cfg.seed ^ ((uint64_t)k * 0x9e3779b97f4a7c15ULL);
    return L->first[k] + permute(i - L->ostart[lo], nk, seed_k, epoch);
}

int sk_loader_next(sk_loader *L, int32_t *batch) {
    int B = L->cfg.B, T = L->cfg.T;
    uint64_t base = L->consumed + (uint64_t)L->cfg.rank * (uint64_t)B;
    for (int b = 0; b < B; b++) {
        uint64_t w = window_at(L, base + (uint64_t)b);
        const int k = shard_of(L, w);
        const sk_shard *s = &L->shards[k];
        const uint64_t at = (w - L->first[k]) * (uint64_t)T;
        int32_t *dst = batch + (size_t)b * (size_t)(T + 1);
        for (int t = 0; t <= T; t++) dst[t] = s->tokens32 ? (int32_t)s->tokens32[at + t] : s->tokens[at + t];
    }
    L->consumed += (uint64_t)B * (uint64_t)L->cfg.world_size;
    return SK_OK;
}

int sk_loader_next_xy(sk_loader *L, int32_t *x, int32_t *y) {
    int B = L->cfg.B, T = L->cfg.T;
    uint64_t base = L->consumed + (uint64_t)L->cfg.rank * (uint64_t)B;
    for (int b = 0; b < B; b++) copy_window(L, window_at(L, base + (uint64_t)b), x + (size_t)b * T, y + (size_t)b * T);
    L->consumed += (uint64_t)B * (uint64_t)L->cfg.world_size;
    return SK_OK;
}

int sk_loader_has_mask(const sk_loader *L) { return L->has_mask; }
int sk_loader_n_short(const sk_loader *L) { return L->n_short; }
uint64_t sk_loader_n_windows(const sk_loader *L) { return L->N; }
uint64_t sk_loader_epoch(const sk_loader *L) { return L->consumed / L->N; }

void sk_loader_get_pos(const sk_loader *L, sk_loader_pos *pos) {
    pos->consumed = L->consumed;
    pos->seed = L->cfg.seed;
    pos->n_windows = L->N;
    pos->T = L->cfg.T;
}

int sk_loader_set_pos(sk_loader *L, const sk_loader_pos *pos) {
    if (pos->n_windows != L->N || pos->T != L->cfg.T)
        return sk_error(SK_EINVAL, "data loader: the saved position is for %llu windows of T=%lld, "
                        "but this data has %llu windows of T=%d (different shards or block size)",
                        (unsigned long long)pos->n_windows, (long long)pos->T, (unsigned long long)L->N, L->cfg.T);
    if (pos->seed != L->cfg.seed && L->cfg.shuffle)
        return sk_error(SK_EINVAL, "data loader: the saved position was taken with seed %llu, this loader uses %llu",
                        (unsigned long long)pos->seed, (unsigned long long)L->cfg.seed);
    L->consumed = pos->consumed;
    return SK_OK;
}
