/* libFuzzer harness for the token shard reader (sk_shard_open: llm.c header or raw uint16)
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
        if (s.tokens || s.n || s.path) abort();                             /* left empty */
        fuzz_file_close(&f);
        return 0;
    }
    size_t body = s.headerless ? size : size - 4 * SK_SHARD_HEADER_INTS;
    if (s.n * 2 != body || body > size) abort();                            /* no silent truncation */
    unsigned mx = 0;
    for (size_t i = 0; i < s.n; i++) if (s.tokens[i] > mx) mx = s.tokens[i];
    int V = s.n ? (int)(s.tokens[0] % 300) + 1 : 1;
    size_t pos; int val;
    int bad = sk_shard_check_vocab(&s, V, &pos, &val);
    if ((bad != 0) != (s.n && mx >= (unsigned)V)) abort();
    if (bad && (pos >= s.n || s.tokens[pos] != val || val < V)) abort();
    if (sk_shard_check_vocab(&s, (int)mx + 1, NULL, NULL) != 0) abort();
    sk_shard_close(&s);

    /* the loader: B and T from the first bytes, shuffled or not */
    sk_loader_cfg lc = { .B = size > 1 ? data[1] % 4 + 1 : 1, .T = size > 2 ? data[2] % 16 + 1 : 1,
                         .seed = size, .shuffle = size > 3 ? data[3] & 1 : 0 };
    const char *paths[2] = { f.path, f.path };
    sk_loader *L;
    if (sk_loader_open(&L, paths, 2, &lc) == 0) {
        int32_t *x = malloc(sizeof(int32_t) * lc.B * lc.T), *y = malloc(sizeof(int32_t) * lc.B * lc.T);
        for (int k = 0; k < 3; k++) {
            if (sk_loader_next_xy(L, x, y)) abort();
            for (int i = 0; i < lc.B * lc.T; i++) if (x[i] < 0 || (unsigned)x[i] > mx || (unsigned)y[i] > mx) abort();
        }
        free(x); free(y);
        sk_loader_free(L);
    }
    fuzz_file_close(&f);
    return 0;
}
