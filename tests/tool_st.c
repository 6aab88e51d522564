/* Helper for tests/test_safetensors_torch.py: exercises the C safetensors reader/writer.
 *   tool_st dump FILE        one line per tensor / metadata entry (names and bytes in hex):
 *                              tensor NAMEHEX DTYPE SHAPE(d0,d1,.. or -) RAWHEX
 *                              f32 NAMEHEX F32HEX        (sk_st_get_f32 output, float dtypes)
 *                              meta KEYHEX VALHEX
 *   tool_st copy IN OUT      read IN and write it again with sk_st_writer (same order)
 *   tool_st write OUT        write a fixed file whose values the Python test recomputes
 *   tool_st check FILE       exit 0 if FILE is accepted; else print the error, exit 2 */
#include "skiplm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *DT[] = { "F32", "F16", "BF16", "F64", "I32", "I64", "U8", "BOOL", "I16", "U16", "I8" };

static void hex(const void *p, size_t n) {
    const unsigned char *b = p;
    if (!n) { printf("-"); return; }
    for (size_t i = 0; i < n; i++) printf("%02x", b[i]);
}

static int die(int rc) {
    fprintf(stderr, "error %d: %s\n", rc, sk_last_error());
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: tool_st dump|copy|write|check FILE [OUT]\n"); return 1; }
    const char *cmd = argv[1];
    sk_safetensors st;
    int rc;
    if (!strcmp(cmd, "dump") || !strcmp(cmd, "check")) {
        if ((rc = sk_st_read(argv[2], &st))) return die(rc);
        if (!strcmp(cmd, "check")) { printf("ok %d tensors\n", st.n_tensors); sk_st_free(&st); return 0; }
        for (int i = 0; i < st.n_tensors; i++) {
            const sk_st_tensor *t = &st.tensors[i];
            printf("tensor ");
            hex(t->name, strlen(t->name));
            printf(" %s ", DT[t->dtype]);
            if (!t->ndim) printf("-");
            for (int d = 0; d < t->ndim; d++) printf(d ? ",%lld" : "%lld", (long long)t->shape[d]);
            printf(" ");
            hex(st.data + t->offset, t->nbytes);
            printf("\n");
            if (t->dtype == SK_F32 || t->dtype == SK_F16 || t->dtype == SK_BF16 || t->dtype == SK_F64) {
                size_t n = 1;
                for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
                float *f = malloc(n * sizeof *f + 1);
                if ((rc = sk_st_get_f32(&st, t->name, f, n))) return die(rc);
                printf("f32 ");
                hex(t->name, strlen(t->name));
                printf(" ");
                hex(f, n * sizeof *f);
                printf("\n");
                free(f);
            }
        }
        for (int i = 0; i < st.n_meta; i++) {
            printf("meta ");
            hex(st.meta_keys[i], strlen(st.meta_keys[i]));
            printf(" ");
            hex(st.meta_vals[i], strlen(st.meta_vals[i]));
            printf("\n");
        }
        sk_st_free(&st);
        return 0;
    }
    if (!strcmp(cmd, "copy")) {
        if (argc < 4) return 1;
        if ((rc = sk_st_read(argv[2], &st))) return die(rc);
        sk_st_writer *w = sk_st_writer_new();
        for (int i = 0; i < st.n_meta && !rc; i++) rc = sk_st_add_meta(w, st.meta_keys[i], st.meta_vals[i]);
        for (int i = 0; i < st.n_tensors && !rc; i++) {
            const sk_st_tensor *t = &st.tensors[i];
            rc = sk_st_add(w, t->name, t->dtype, t->ndim, t->shape, st.data + t->offset);
        }
        if (!rc) rc = sk_st_write(w, argv[3]);
        sk_st_writer_free(w);
        sk_st_free(&st);
        return rc ? die(rc) : 0;
    }
    if (!strcmp(cmd, "write")) {
        /* f32 (4, 3): 0.25*i - 1;  f16 bits: i*997 mod 65536 skipping NaNs (exp 31);
         * bf16 (2, 3) bits: 0x3f80 + 7*i;  i64 (5): (i - 2) * 10^12;  u8 (3): 250 + i */
        float f32[12];
        for (int i = 0; i < 12; i++) f32[i] = 0.25f * (float)i - 1.0f;
        uint16_t f16[16];
        for (int i = 0, k = 0; k < 16; i++) {
            uint16_t b = (uint16_t)((i * 997) & 0xffff);
            if (((b >> 10) & 0x1f) == 0x1f && (b & 0x3ff)) continue;
            f16[k++] = b;
        }
        uint16_t bf16[6];
        for (int i = 0; i < 6; i++) bf16[i] = (uint16_t)(0x3f80 + 7 * i);
        int64_t i64[5];
        for (int i = 0; i < 5; i++) i64[i] = (int64_t)(i - 2) * 1000000000000LL;
        uint8_t u8[3] = { 250, 251, 252 };
        const int64_t s43[] = { 4, 3 }, s16[] = { 16 }, s23[] = { 2, 3 }, s5[] = { 5 }, s3[] = { 3 };
        sk_st_writer *w = sk_st_writer_new();
        rc = sk_st_add_meta(w, "format", "pt");
        if (!rc) rc = sk_st_add_meta(w, "config", "{\"n_layer\":2,\"note\":\"caf\xc3\xa9 \\\"q\\\"\\n\"}");
        if (!rc) rc = sk_st_add(w, "transformer.wte.weight", SK_F32, 2, s43, f32);
        if (!rc) rc = sk_st_add(w, "h.f16", SK_F16, 1, s16, f16);
        if (!rc) rc = sk_st_add(w, "h.bf16", SK_BF16, 2, s23, bf16);
        if (!rc) rc = sk_st_add(w, "steps", SK_I64, 1, s5, i64);
        if (!rc) rc = sk_st_add(w, "bytes", SK_U8, 1, s3, u8);
        if (!rc) rc = sk_st_write(w, argv[2]);
        sk_st_writer_free(w);
        return rc ? die(rc) : 0;
    }
    fprintf(stderr, "unknown command %s\n", cmd);
    return 1;
}
