/* Test driver for tests/test_bf16_torch.py: the bf16 GEMMs and rounding of src/core.
 *   tool_bf16 info          "dnnl D native N isa ISA version V" (D = 1 when built with oneDNN)
 *   tool_bf16 round IN OUT  IN "x" (F32): OUT "vec" (BF16, sk_round_bf16) and "ref"
 *                           (BF16, sk_bf16_from_f32_n)
 *   tool_bf16 gemm IN OUT   for k = 0, 1, ... while IN has metadata "case.k" = "ta tb M N K lda
 *                           ldb ldc acc c16 bias": A "a.k" (BF16, as stored: M x lda, or K x lda
 *                           with ta), B "b.k" (BF16), the initial C "c.k" (F32, M x ldc; with c16
 *                           rounded to bf16 first) and with bias "bias.k" (F32, N): OUT "c.k" (F32;
 *                           with c16 the bf16 C widened). Prints each case's implementation. */
#include "skiplm.h"
#include "core/gemm_bf16.h"
#include "core/ops.h"
#include "core/ops_bf16.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int die(void) { fprintf(stderr, "tool_bf16: %s\n", sk_last_error()); return 1; }

static const void *get(const sk_safetensors *st, const char *name, sk_dtype dt, size_t *n) {
    const sk_st_tensor *t = sk_st_find(st, name);
    if (!t || t->dtype != dt) return NULL;
    *n = t->nbytes / (dt == SK_F32 ? 4 : 2);
    return st->data + t->offset;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "info")) {
        printf("dnnl %d native %d isa %s version %s\n", sk_bf16_available(), sk_bf16_native(), sk_bf16_isa(), sk_bf16_version());
        return 0;
    }
    if (argc != 4 || (strcmp(argv[1], "round") && strcmp(argv[1], "gemm"))) {
        fprintf(stderr, "usage: tool_bf16 info | round IN OUT | gemm IN OUT\n");
        return 2;
    }
    sk_safetensors st;
    if (sk_st_read(argv[2], &st)) return die();
    sk_st_writer *w = sk_st_writer_new();
    void *bufs[256];
    char names[256][32];
    int nb = 0;
    if (!strcmp(argv[1], "round")) {
        size_t n;
        const float *x = get(&st, "x", SK_F32, &n);
        if (!x) { fprintf(stderr, "tool_bf16: no F32 x\n"); return 1; }
        uint16_t *a = malloc(2 * n), *b = malloc(2 * n);
        sk_round_bf16(a, x, n);
        sk_bf16_from_f32_n(b, x, n);
        int64_t sh[1] = {(int64_t)n};
        sk_st_add(w, "vec", SK_BF16, 1, sh, a);
        sk_st_add(w, "ref", SK_BF16, 1, sh, b);
        bufs[nb++] = a; bufs[nb++] = b;
    } else {
        for (int k = 0; k < 128; k++) {
            char key[32], an[32], bn[32], cn[32], biasn[32];
            snprintf(key, sizeof key, "case.%d", k);
            const char *c = sk_st_meta(&st, key);
            if (!c) break;
            int ta, tb, M, N, K, lda, ldb, ldc, acc, c16, bias;
            if (sscanf(c, "%d %d %d %d %d %d %d %d %d %d %d", &ta, &tb, &M, &N, &K, &lda, &ldb, &ldc, &acc, &c16, &bias) != 11) {
                fprintf(stderr, "tool_bf16: bad %s\n", key);
                return 1;
            }
            snprintf(an, sizeof an, "a.%d", k); snprintf(bn, sizeof bn, "b.%d", k);
            snprintf(cn, sizeof cn, "c.%d", k); snprintf(biasn, sizeof biasn, "bias.%d", k);
            size_t na, nbb, nc, nbias = 0;
            const uint16_t *A = get(&st, an, SK_BF16, &na), *B = get(&st, bn, SK_BF16, &nbb);
            const float *C0 = get(&st, cn, SK_F32, &nc), *bi = bias ? get(&st, biasn, SK_F32, &nbias) : NULL;
            if (!A || !B || !C0 || (bias && !bi)) { fprintf(stderr, "tool_bf16: case %d: missing tensors\n", k); return 1; }
            float *C = malloc(sizeof(float) * nc);
            uint16_t *C16 = malloc(sizeof(uint16_t) * nc);
            memcpy(C, C0, sizeof(float) * nc);
            sk_bf16_from_f32_n(C16, C0, nc);
            if (sk_gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, bi, acc, c16 ? NULL : C, c16 ? C16 : NULL, ldc)) return die();
            if (c16) sk_bf16_to_f32_n(C, C16, nc);
            printf("case %d (%s): %s\n", k, c, sk_gemm_bf16_impl(ta, tb, M, N, K, lda, ldb, bias, acc, c16, ldc));
            int64_t sh[1] = {(int64_t)nc};
            snprintf(names[nb], sizeof names[nb], "c.%d", k);
            sk_st_add(w, names[nb], SK_F32, 1, sh, C);
            bufs[nb++] = C;
            free(C16);
        }
    }
    if (sk_st_write(w, argv[3])) return die();
    sk_st_writer_free(w);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    sk_st_free(&st);
    return 0;
}
