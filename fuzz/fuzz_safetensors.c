/* libFuzzer harness for the safetensors reader (sk_st_read_mem: same validation as
 * sk_st_read, on a buffer). Every accepted input must be internally consistent: tensors
 * inside the data section, and sk_st_get_f32 must not read out of bounds.
 *
 * Build and run (from the repository root):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc fuzz/fuzz_safetensors.c \
 *       src/io/safetensors.c src/base/json.c src/base/utf8.c src/base/fileio.c src/base/error.c -lm \
 *       -o fuzz_safetensors
 *   ./fuzz_safetensors -max_len=4096 fuzz/corpus/safetensors
 */
#include "base/fileio.h"
#include "skiplm.h"
#include "io/io.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sk_safetensors st;
    if (sk_st_read_mem(data, size, "fuzz", &st) != 0) {
        if (st.tensors || st.data || st.path || st.n_tensors) abort();   /* left empty on error */
        return 0;
    }
    size_t covered = 0;
    for (int i = 0; i < st.n_tensors; i++) {
        const sk_st_tensor *t = &st.tensors[i];
        if (t->offset > st.data_size || t->nbytes > st.data_size - t->offset) abort();
        if (t->ndim < 0 || t->ndim > 8 || !t->name[0]) abort();
        if (sk_st_find(&st, t->name) != t) abort();                       /* names unique */
        covered += t->nbytes;
        size_t n = 1;
        for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
        if (n <= (1u << 20)) {
            float *f = malloc(n * sizeof *f + 1);
            int rc = sk_st_get_f32(&st, t->name, f, n);
            int is_float = t->dtype == SK_F32 || t->dtype == SK_F16 || t->dtype == SK_BF16 || t->dtype == SK_F64;
            if ((rc == 0) != is_float) abort();
            if (n && sk_st_get_f32(&st, t->name, f, n - 1) == 0) abort();  /* wrong count refused */
            free(f);
        }
    }
    if (covered != st.data_size) abort();                                   /* exact tiling */
    for (int i = 0; i < st.n_meta; i++)
        if (sk_st_meta(&st, st.meta_keys[i]) == NULL) abort();
    sk_st_free(&st);
    return 0;
}
