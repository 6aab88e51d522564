/* Token shards (llm.c layout, raw nanoGPT uint16 files) and the training data loader.
 * Formats and guarantees: docs/data.md. */
#include "skiplm_train.h"
#include "base/fileio.h"

#include <errno.h>
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
    uint64_t *first;       /* first[i]: index of shard i's first window; first[n_shards] = N */
    uint64_t N;
    uint64_t consumed;
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
    for (int i = 0; i < L->n_shards; i++) sk_shard_close(&L->shards[i]);
    free(L->shards); free(L->first); free(L);
}

int sk_loader_open(sk_loader **out, const char *const *paths, int n_paths, const sk_loader_cfg *cfg) {
    if (n_paths <= 0) return sk_error(SK_EINVAL, "data loader: no shards given");
    if (cfg->B <= 0 || cfg->T <= 0) return sk_error(SK_EINVAL, "data loader: B=%d and T=%d must be positive", cfg->B, cfg->T);
    int ws = cfg->world_size > 0 ? cfg->world_size : 1;
    if (cfg->rank < 0 || cfg->rank >= ws)
        return sk_error(SK_EINVAL, "data loader: rank %d outside [0, world_size=%d)", cfg->rank, ws);
    sk_loader *L = calloc(1, sizeof *L);
    if (!L || !(L->shards = calloc((size_t)n_paths, sizeof *L->shards)) ||
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
        if (s->n < (size_t)cfg->T + 1) {
            rc = sk_error(SK_EINVAL, "%s: %zu tokens, shorter than one window of T+1 = %d tokens", paths[i], s->n,
                          cfg->T + 1);
            break;
        }
        L->first[i + 1] = L->first[i] + (s->n - 1) / (size_t)cfg->T;
    }
    if (rc) { sk_loader_free(L); return rc; }
    L->N = L->first[n_paths];
    *out = L;
    return SK_OK;
}

/* Copy window w (global index) to dst (T+1 tokens). */
static void copy_window(const sk_loader *L, uint64_t w, int32_t *dst) {
    int lo = 0, hi = L->n_shards - 1;            /* last shard with first <= w */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (L->first[mid] <= w) lo = mid; else hi = mid - 1;
    }
    const sk_shard *s = &L->shards[lo];
    const uint64_t at = (w - L->first[lo]) * (uint64_t)L->cfg.T;
    if (s->tokens32) for (int t = 0; t <= L->cfg.T; t++) dst[t] = (int32_t)s->tokens32[at + t];
    else for (int t = 0; t <= L->cfg.T; t++) dst[t] = s->tokens[at + t];
}

static uint64_t window_at(const sk_loader *L, uint64_t g) {
    uint64_t epoch = g / L->N, i = g % L->N;
    return L->cfg.shuffle ? permute(i, L->N, L->cfg.seed, epoch) : i;
}

int sk_loader_next(sk_loader *L, int32_t *batch) {
    int B = L->cfg.B, T = L->cfg.T;
    uint64_t base = L->consumed + (uint64_t)L->cfg.rank * (uint64_t)B;
    for (int b = 0; b < B; b++) copy_window(L, window_at(L, base + (uint64_t)b), batch + (size_t)b * (size_t)(T + 1));
    L->consumed += (uint64_t)B * (uint64_t)L->cfg.world_size;
    return SK_OK;
}

int sk_loader_next_xy(sk_loader *L, int32_t *x, int32_t *y) {
    int B = L->cfg.B, T = L->cfg.T;
    int32_t *row = malloc((size_t)(T + 1) * sizeof *row);
    if (!row) return sk_error(SK_ENOMEM, "data loader: out of memory");
    uint64_t base = L->consumed + (uint64_t)L->cfg.rank * (uint64_t)B;
    for (int b = 0; b < B; b++) {
        copy_window(L, window_at(L, base + (uint64_t)b), row);
        memcpy(x + (size_t)b * T, row, (size_t)T * sizeof *row);
        memcpy(y + (size_t)b * T, row + 1, (size_t)T * sizeof *row);
    }
    free(row);
    L->consumed += (uint64_t)B * (uint64_t)L->cfg.world_size;
    return SK_OK;
}

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
