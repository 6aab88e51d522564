/* libFuzzer harness for the token shard reader (sk_shard_open: llm.c header version 1
 * (uint16) or 2 (uint32), or raw uint16)
 * and the loader over it. An accepted shard must be consistent with the file size; every
 * token is read (ASan/SEGV on an overrun), the vocabulary check agrees with a plain scan,
 * and a loader over the shard serves windows whose tokens all come from the shard.
 *
 * Build and run: make fuzz (scripts/fuzz.sh), or by hand as in fuzz_safetensors.c. */
#include "fuzz_util.h"
#include "skiplm.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_file f;
    fuzz_file_open(&f, data, size);
    sk_shard s;
    int rc = sk_shard_open(&s, f.path);
    if (rc) {
        if (!strstr(sk_last_error(), f.path)) abort();                    /* message names the file */
        if (s.tokens || s.tokens32 || s.n || s.path) abort();               /* left empty */
        fuzz_file_close(&f);
        return 0;
    }
    size_t body = s.headerless ? size : size - 4 * SK_SHARD_HEADER_INTS;
    const size_t w = s.version == SK_SHARD_VERSION_U32 ? 4 : 2;
    if (s.n * w != body || body > size) abort();                            /* no silent truncation */
    if ((w == 4) != (s.tokens32 != NULL) || (w == 2) != (s.tokens != NULL)) abort();   /* one width */
    uint32_t mx = 0;
    for (size_t i = 0; i < s.n; i++) if (sk_shard_at(&s, i) > mx) mx = sk_shard_at(&s, i);
    int V = s.n ? (int)(sk_shard_at(&s, 0) % 300) + 1 : 1;
    size_t pos; int val;
    int bad = sk_shard_check_vocab(&s, V, &pos, &val);
    if ((bad != 0) != (s.n && mx >= (unsigned)V)) abort();
    if (bad && (pos >= s.n || (val >= 0 && sk_shard_at(&s, pos) != (uint32_t)val) || (val >= 0 && val < V))) abort();
    const int fits = mx < INT32_MAX;                 /* a vocabulary can hold every id */
    if (fits && sk_shard_check_vocab(&s, (int)mx + 1, NULL, NULL) != 0) abort();
    sk_shard_close(&s);

    /* the loader: B and T from the first bytes, shuffled or not */
    sk_loader_cfg lc = { .B = size > 1 ? data[1] % 4 + 1 : 1, .T = size > 2 ? data[2] % 16 + 1 : 1,
                         .seed = size, .shuffle = size > 3 ? data[3] & 1 : 0 };
    const char *paths[2] = { f.path, f.path };
    sk_loader *L;
    if (sk_loader_open(&L, paths, 2, &lc) == 0) {
        if (!fits) abort();                          /* ids past int32 are refused at open */
        int32_t *x = malloc(sizeof(int32_t) * lc.B * lc.T), *y = malloc(sizeof(int32_t) * lc.B * lc.T);
        for (int k = 0; k < 3; k++) {
            if (sk_loader_next_xy(L, x, y)) abort();
            for (int i = 0; i < lc.B * lc.T; i++) if (x[i] < 0 || y[i] < 0 || (uint32_t)x[i] > mx || (uint32_t)y[i] > mx) abort();
        }
        free(x); free(y);
        sk_loader_free(L);
    }
    fuzz_file_close(&f);
    return 0;
}
