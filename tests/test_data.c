/* Token shards and the data loader: round trips, headerless files, refusal of damaged
 * files with clear messages, vocabulary checks, loader order, resume and rank slicing. */
#include "skiplm.h"
#include "test.h"
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>


static void expect_open_fails(const char *what, const char *path, const char *needle) {
    sk_shard s;
    int rc = sk_shard_open(&s, path);
    const char *m = sk_last_error();
    CHECK(rc != 0 && strstr(m, path) && strstr(m, needle), "%s refused: %s", what, rc ? m : "(opened)");
    if (!rc) sk_shard_close(&s);
}

static void test_shards(void) {
    size_t n = 1000;
    int32_t *ids = malloc(n * sizeof *ids);
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 7919) % 65536);
    ids[3] = 65535; ids[4] = 0;
    const char *a = test_path("a.bin");
    int rc = sk_shard_write(a, ids, n);
    CHECK(rc == 0, "write shard %s", rc ? sk_last_error() : "");
    size_t sz = 0;
    char *raw = test_read(a, &sz);
    const int32_t *h = (const int32_t *)raw;
    CHECK(raw && sz == 1024 + 2 * n && h[0] == 20240520 && h[1] == 1 && h[2] == (int32_t)n && h[3] == 0 && h[255] == 0,
          "shard layout: 256 int32 header (magic, version 1, count) + uint16 tokens (%zu bytes)", sz);
    sk_shard s;
    rc = sk_shard_open(&s, a);
    int same = rc == 0 && s.n == n && !s.headerless;
    for (size_t i = 0; same && i < n; i++) same = s.tokens[i] == (uint16_t)ids[i];
    CHECK(same, "shard round trip (%zu tokens)", n);
    size_t pos = 0; int val = 0;
    CHECK(rc == 0 && sk_shard_check_vocab(&s, 65536, &pos, &val) == 0, "all tokens < 65536");
    rc = sk_shard_check_vocab(&s, 50257, &pos, &val);
    size_t first = 0;
    while (ids[first] < 50257) first++;
    CHECK(rc == SK_EFORMAT && pos == first && val == ids[first] && strstr(sk_last_error(), a) &&
          strstr(sk_last_error(), "outside the vocabulary"),
          "vocab check finds the first token >= 50257 at %zu (value %d): %s", pos, val, sk_last_error());
    sk_shard_close(&s);

    /* headerless nanoGPT file */
    uint16_t raw16[6] = {1, 2, 3, 50256, 0, 65535};
    test_write(test_path("raw.bin"), raw16, sizeof raw16);
    rc = sk_shard_open(&s, test_path("raw.bin"));
    CHECK(rc == 0 && s.headerless && s.n == 6 && s.tokens[3] == 50256 && s.tokens[5] == 65535,
          "headerless uint16 file read as 6 tokens");
    if (!rc) sk_shard_close(&s);

    /* empty shard is valid */
    rc = sk_shard_write(test_path("empty.bin"), ids, 0);
    CHECK(rc == 0 && sk_shard_open(&s, test_path("empty.bin")) == 0 && s.n == 0, "shard of 0 tokens");
    sk_shard_close(&s);

    /* damaged files */
    test_write(test_path("trunc.bin"), raw, sz - 10);
    expect_open_fails("truncated shard", test_path("trunc.bin"), "header says 1000 tokens but file holds 995");
    test_write(test_path("odd.bin"), raw, sz - 1);
    expect_open_fails("shard with half a token", test_path("odd.bin"), "header says 1000 tokens but file holds 999 and a half");
    char *big = malloc(sz + 4);
    memcpy(big, raw, sz); memset(big + sz, 0, 4);
    test_write(test_path("long.bin"), big, sz + 4);
    expect_open_fails("shard with trailing data", test_path("long.bin"), "header says 1000 tokens but file holds 1002");
    free(big);
    test_write(test_path("hdr.bin"), raw, 600);
    expect_open_fails("truncated header", test_path("hdr.bin"), "truncated header");
    int32_t *hw = (int32_t *)raw;
    hw[1] = 2;
    test_write(test_path("v2.bin"), raw, sz);
    expect_open_fails("version 2 (uint32) over a version 1 body", test_path("v2.bin"), "header says 1000 tokens but file holds 500");
    hw[1] = 1; hw[0] = 20240521;
    test_write(test_path("magic.bin"), raw, sz - 1);
    expect_open_fails("bad magic, odd size", test_path("magic.bin"), "no shard header");
    hw[0] = 20240520; hw[2] = -5;
    test_write(test_path("neg.bin"), raw, sz);
    expect_open_fails("negative count", test_path("neg.bin"), "header says -5 tokens");
    test_write(test_path("zero.bin"), raw, 0);
    expect_open_fails("empty file", test_path("zero.bin"), "empty file");
    expect_open_fails("missing file", test_path("missing.bin"), "cannot open");
    free(raw);

    /* write refuses ids that do not fit uint16, and leaves no file */
    ids[10] = 65536;
    rc = sk_shard_write(test_path("big.bin"), ids, n);
    CHECK(rc == SK_EINVAL && strstr(sk_last_error(), "65536") && strstr(sk_last_error(), "position 10") &&
          access(test_path("big.bin"), F_OK) != 0, "write refuses id 65536: %s", sk_last_error());
    ids[10] = -1;
    rc = sk_shard_write(test_path("big.bin"), ids, n);
    CHECK(rc == SK_EINVAL && strstr(sk_last_error(), "-1"), "write refuses id -1: %s", sk_last_error());
    free(ids);
}

/* shards of sequential tokens so a window's content tells where it came from */
static const char *shard_paths[3];
static void make_loader_shards(void) {
    size_t lens[3] = {1001, 517, 2050};
    uint16_t base = 0;
    for (int k = 0; k < 3; k++) {
        int32_t *ids = malloc(lens[k] * sizeof *ids);
        for (size_t i = 0; i < lens[k]; i++) ids[i] = (int32_t)((base + i) % 60000);
        char name[32]; snprintf(name, sizeof name, "l%d.bin", k);
        shard_paths[k] = strdup(test_path(name));
        sk_shard_write(shard_paths[k], ids, lens[k]);
        free(ids);
        base = (uint16_t)(base + 10000);
    }
}

static sk_loader *open_loader(int B, int T, int shuffle, uint64_t seed, int rank, int ws) {
    sk_loader_cfg cfg = {.B = B, .T = T, .seed = seed, .shuffle = shuffle, .rank = rank, .world_size = ws, .vocab_size = 50257};
    sk_loader *L = NULL;
    if (sk_loader_open(&L, shard_paths, 3, &cfg)) { printf("   open: %s\n", sk_last_error()); return NULL; }
    return L;
}

static void test_loader(void) {
    make_loader_shards();
    int T = 16, B = 4;
    sk_loader *L = open_loader(B, T, 0, 1, 0, 1);
    uint64_t N = L ? sk_loader_n_windows(L) : 0;
    CHECK(L && N == 1000 / 16 + 516 / 16 + 2049 / 16, "window count (n-1)/T per shard: %llu", (unsigned long long)N);
    if (!L) return;
    /* sequential: windows are consecutive, neighbours share one token, targets = inputs shifted */
    int32_t *b1 = malloc((size_t)B * (T + 1) * sizeof *b1), *x = malloc((size_t)B * T * 4), *y = malloc((size_t)B * T * 4);
    sk_loader_next(L, b1);
    int ok = 1;
    for (int r = 0; r < B; r++)
        for (int t = 0; t <= T; t++) ok &= b1[r * (T + 1) + t] == r * T + t;
    CHECK(ok, "sequential order: window k holds tokens [k*T, k*T+T]");
    sk_loader_next_xy(L, x, y);
    ok = 1;
    for (int r = 0; r < B; r++)
        for (int t = 0; t < T; t++) ok &= x[r * T + t] == (B + r) * T + t && y[r * T + t] == (B + r) * T + t + 1;
    CHECK(ok, "next_xy: targets are inputs shifted by one");
    sk_loader_free(L);

    /* shuffled: deterministic, each epoch a permutation of all windows, epochs differ */
    uint64_t steps = (2 * N + B - 1) / B;
    int32_t *first = malloc(steps * B * sizeof *first), *again = malloc(steps * B * sizeof *again);
    sk_loader *L1 = open_loader(B, T, 1, 1234, 0, 1), *L2 = open_loader(B, T, 1, 1234, 0, 1), *L3 = open_loader(B, T, 1, 99, 0, 1);
    int det = 1, diffseed = 0;
    for (uint64_t s = 0; s < steps; s++) {
        int32_t b2[4 * 17], b3[4 * 17];
        sk_loader_next(L1, b1); sk_loader_next(L2, b2); sk_loader_next(L3, b3);
        det &= !memcmp(b1, b2, sizeof b2);
        diffseed |= memcmp(b1, b3, sizeof b3) != 0;
        for (int r = 0; r < B; r++) first[s * B + r] = b1[r * (T + 1)];
    }
    CHECK(det && diffseed, "shuffled order is deterministic for a seed and differs for another seed");
    CHECK(sk_loader_epoch(L1) == (steps * B) / N, "epoch counter %llu", (unsigned long long)sk_loader_epoch(L1));
    /* every window exactly once per epoch: first tokens of an epoch are distinct and N of them */
    int perm_ok = 1;
    for (int e = 0; e < 2; e++) {
        uint8_t *seen = calloc(70000, 1);
        for (uint64_t i = 0; i < N; i++) {
            int32_t v = first[e * N + i];
            if (seen[v]) perm_ok = 0;
            seen[v] = 1;
        }
        free(seen);
    }
    int epochs_differ = memcmp(first, first + N, N * sizeof *first) != 0;
    int not_sorted = 0;
    for (uint64_t i = 1; i < N; i++) not_sorted |= first[i] < first[i - 1];
    CHECK(perm_ok && epochs_differ && not_sorted, "each epoch visits every window once, in a new shuffled order");

    /* save the position mid-way, restore into a fresh loader, continue identically */
    sk_loader *A = open_loader(B, T, 1, 7, 0, 1);
    for (int s = 0; s < 37; s++) sk_loader_next(A, b1);
    sk_loader_pos pos;
    sk_loader_get_pos(A, &pos);
    sk_loader *C = open_loader(B, T, 1, 7, 0, 1);
    int rc = sk_loader_set_pos(C, &pos);
    int cont = rc == 0;
    for (int s = 0; s < 60 && cont; s++) {
        int32_t b2[4 * 17];
        sk_loader_next(A, b1); sk_loader_next(C, b2);
        cont = !memcmp(b1, b2, sizeof b2);
    }
    CHECK(cont && pos.consumed == 37 * 4, "restored position continues identically (across an epoch boundary)");
    sk_loader *D = open_loader(B, 8, 1, 7, 0, 1);
    rc = sk_loader_set_pos(D, &pos);
    CHECK(rc == SK_EINVAL && strstr(sk_last_error(), "T=16"), "position from other data refused: %s", sk_last_error());
    sk_loader *E = open_loader(B, T, 1, 8, 0, 1);
    rc = sk_loader_set_pos(E, &pos);
    CHECK(rc == SK_EINVAL && strstr(sk_last_error(), "seed"), "position with another seed refused: %s", sk_last_error());
    sk_loader_free(A); sk_loader_free(C); sk_loader_free(D); sk_loader_free(E);

    /* 3 ranks with B=4 read disjoint windows whose union, step by step, is one process with B=12 */
    int W = 3;
    sk_loader *G = open_loader(B * W, T, 1, 5, 0, 1), *R[3];
    for (int r = 0; r < W; r++) R[r] = open_loader(B, T, 1, 5, r, W);
    int32_t *gb = malloc((size_t)B * W * (T + 1) * sizeof *gb);
    int union_ok = 1;
    for (int s = 0; s < 40 && union_ok; s++) {
        sk_loader_next(G, gb);
        for (int r = 0; r < W; r++) {
            sk_loader_next(R[r], b1);
            union_ok &= !memcmp(b1, gb + (size_t)r * B * (T + 1), (size_t)B * (T + 1) * sizeof *b1);
        }
    }
    CHECK(union_ok, "rank r of %d reads block r of the single-process batch of %d windows (40 steps)", W, B * W);
    sk_loader_get_pos(R[1], &pos);
    CHECK(pos.consumed == 40ULL * B * W, "ranks count consumed windows globally (%llu)", (unsigned long long)pos.consumed);
    sk_loader_free(G);
    for (int r = 0; r < W; r++) sk_loader_free(R[r]);

    /* over several shards, an epoch reads one shard after another (each shard's windows
     * permuted), the shard order seeded and different from epoch to epoch */
    {
        sk_loader *S = open_loader(1, T, 1, 11, 0, 1);
        uint64_t NS = sk_loader_n_windows(S);
        int32_t row[17];
        int runs_ok = 1, orders_differ = 0, prev_first = -1;
        for (int ep = 0; ep < 4; ep++) {
            int switches = 0, last = -1, first = -1;
            char *seen = calloc(NS, 1);
            for (uint64_t w = 0; w < NS; w++) {
                sk_loader_next(S, row);
                int k = row[0] / 10000;                   /* shard k holds 10000k + i */
                uint64_t idx = (uint64_t)(row[0] - 10000 * k) / T + (k > 0 ? 1000 / 16 : 0) + (k > 1 ? 516 / 16 : 0);
                if (idx < NS) seen[idx]++;
                if (last >= 0 && k != last) switches++;
                if (first < 0) first = k;
                last = k;
            }
            int once = 1;
            for (uint64_t w = 0; w < NS; w++) once &= seen[w] == 1;
            runs_ok &= switches == 2 && once;
            orders_differ |= prev_first >= 0 && first != prev_first;
            prev_first = first;
            free(seen);
        }
        CHECK(runs_ok, "shuffled over 3 shards: each epoch reads every window once, one shard after another (4 epochs)");
        CHECK(orders_differ, "the shard order changes from epoch to epoch");
        sk_loader_free(S);
    }

    /* errors */
    sk_loader_cfg cfg = {.B = 2, .T = 600, .seed = 1, .shuffle = 1};
    sk_loader *Z = NULL;
    rc = sk_loader_open(&Z, shard_paths, 3, &cfg);
    CHECK(rc == 0 && sk_loader_n_windows(Z) == 1 + 2049 / 600 && sk_loader_n_short(Z) == 1,
          "a shard shorter than one window gives none (%d short)", rc ? -1 : sk_loader_n_short(Z));
    sk_loader_free(Z);
    cfg.T = 3000;
    rc = sk_loader_open(&Z, shard_paths, 3, &cfg);
    CHECK(rc == SK_EINVAL && strstr(sk_last_error(), shard_paths[0]) && strstr(sk_last_error(), "3001"),
          "shards all shorter than one window refused: %s", sk_last_error());
    rc = sk_loader_open(&Z, shard_paths + 1, 1, &cfg);
    CHECK(rc == SK_EINVAL && strstr(sk_last_error(), shard_paths[1]) && strstr(sk_last_error(), "517 tokens"),
          "a single shard shorter than one window refused: %s", sk_last_error());
    cfg.T = 16; cfg.vocab_size = 15000;
    rc = sk_loader_open(&Z, shard_paths, 3, &cfg);
    CHECK(rc == SK_EFORMAT && strstr(sk_last_error(), shard_paths[2]) && strstr(sk_last_error(), "outside the vocabulary"),
          "loader checks tokens against vocab_size: %s", sk_last_error());
    cfg.vocab_size = 0; cfg.rank = 3; cfg.world_size = 3;
    rc = sk_loader_open(&Z, shard_paths, 3, &cfg);
    CHECK(rc == SK_EINVAL && strstr(sk_last_error(), "rank 3"), "rank outside world refused: %s", sk_last_error());
    free(b1); free(x); free(y); free(first); free(again); free(gb);
    sk_loader_free(L1); sk_loader_free(L2); sk_loader_free(L3);
}

/* version 2 (uint32): layout, ids past 65535, refusals, and a loader over a mix of v1 and v2
 * shards of the same tokens reads what the v1 loader reads, on every rank */
static void test_shards_u32(void) {
    size_t n = 300;
    int32_t *ids = malloc(n * sizeof *ids);
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)(i * 40503u % 200000u);
    const char *a = test_path("u32.bin");
    int rc = sk_shard_write_version(a, ids, n, SK_SHARD_VERSION_U32);
    size_t sz = 0;
    char *raw = test_read(a, &sz);
    const int32_t *h = (const int32_t *)raw;
    CHECK(rc == 0 && raw && sz == 1024 + 4 * n && h[0] == 20240520 && h[1] == 2 && h[2] == (int32_t)n,
          "version 2 layout: header (magic, version 2, count) + uint32 tokens (%zu bytes)", sz);
    sk_shard s;
    rc = sk_shard_open(&s, a);
    int same = rc == 0 && s.n == n && s.version == 2 && s.tokens32 && !s.tokens;
    for (size_t i = 0; same && i < n; i++) same = sk_shard_at(&s, i) == (uint32_t)ids[i];
    CHECK(same, "version 2 round trip, ids up to 199,999");
    size_t pos; int val;
    rc = sk_shard_check_vocab(&s, 70000, &pos, &val);
    CHECK(rc == SK_EFORMAT && ids[pos] == val && val >= 70000, "vocabulary check on uint32 tokens: %s", sk_last_error());
    if (s.n) sk_shard_close(&s);
    test_write(test_path("u32t.bin"), raw, sz - 2);
    expect_open_fails("version 2 with half a token", test_path("u32t.bin"), "header says 300 tokens but file holds 299");
    ids[7] = -1;
    rc = sk_shard_write_version(test_path("neg.bin"), ids, n, SK_SHARD_VERSION_U32);
    CHECK(rc == SK_EINVAL && strstr(sk_last_error(), "position 7"), "negative id refused: %s", sk_last_error());
    rc = sk_shard_write_version(test_path("v3.bin"), ids, n, 3);
    CHECK(rc == SK_EINVAL, "version 3 not written: %s", sk_last_error());
    free(raw); free(ids);

    /* shard 1 of the loader shards rewritten as version 2 */
    sk_shard s1;
    sk_shard_open(&s1, shard_paths[1]);
    int32_t *t = malloc(s1.n * sizeof *t);
    for (size_t i = 0; i < s1.n; i++) t[i] = sk_shard_at(&s1, i);
    const char *mixed[3] = {shard_paths[0], test_path("l1v2.bin"), shard_paths[2]};
    mixed[1] = strdup(mixed[1]);
    sk_shard_write_version(mixed[1], t, s1.n, SK_SHARD_VERSION_U32);
    sk_shard_close(&s1);
    free(t);
    int ok = 1, B = 3, T = 16, W = 2;
    int32_t *b1 = malloc((size_t)B * (T + 1) * 4), *b2 = malloc((size_t)B * (T + 1) * 4);
    for (int r = 0; r < W; r++) {
        sk_loader_cfg cfg = {.B = B, .T = T, .seed = 9, .shuffle = 1, .rank = r, .world_size = W, .vocab_size = 60000};
        sk_loader *A = NULL, *M = NULL;
        ok &= sk_loader_open(&A, shard_paths, 3, &cfg) == 0 && sk_loader_open(&M, mixed, 3, &cfg) == 0;
        for (int k = 0; ok && k < 100; k++) {
            sk_loader_next(A, b1); sk_loader_next(M, b2);
            ok &= !memcmp(b1, b2, (size_t)B * (T + 1) * 4);
        }
        sk_loader_free(A); sk_loader_free(M);
    }
    CHECK(ok, "a loader over v1 + v2 shards reads the v1 loader's batches on each of %d ranks (100 steps, 2 epochs)", W);
    free(b1); free(b2); free((void *)mixed[1]);
}

int main(void) {
    if (test_tmp_open("sk_test_data")) return 1;
    test_shards();
    test_loader();
    test_shards_u32();
    test_tmp_close();
    TEST_END();
}
