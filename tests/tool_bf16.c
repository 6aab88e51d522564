/* Test driver for tests/test_bf16_torch.py: the bf16 GEMMs and rounding of src/core.
 *   tool_bf16 info          "dnnl D native N isa ISA version V" (D = 1 when built with oneDNN)
 *   tool_bf16 round IN OUT  IN "x" (F32): OUT "vec" (BF16, sk_round_bf16) and "ref"
 *                           (BF16, sk_bf16_from_f32_n)
 *   tool_bf16 gemm IN OUT   for k = 0, 1, ... while IN has metadata "case.k" = "ta tb M N K lda
 *                           ldb ldc acc c16 bias": A "a.k" (BF16, as stored: M x lda, or K x lda
 *                           with ta), B "b.k" (BF16), the initial C "c.k" (F32, M x ldc; with c16
 *                           rounded to bf16 first) and with bias "bias.k" (F32, N): OUT "c.k" (F32;
 *                           with c16 the bf16 C widened). Prints each case's implementation.
 *   tool_bf16 attn IN OUT   the fused attention with bf16 set (sk_attn_forward / _backward):
 *                           metadata "params" = "B H Hkv Lq Lk D layout causal off scale p seed",
 *                           F32 "q" (B, H, Lq, D), "k" and "v" (B, Hkv, Lk, D), "dout" (as q), and
 *                           optionally U8 "mask" (rank 4, broadcast to (B, H, Lq, Lk)); layout 1
 *                           reads them as (B, L, heads, D) views (strided rows, as the model's
 *                           fused qkv buffer). OUT: F32 "out", "lse", and "dq", "dk", "dv" from
 *                           the fused backward path and "dq.2", "dk.2", "dv.2" from the two-pass
 *                           one, all in (B, heads, L, D) order, and "w" (B, H, Lq, Lk), the
 *                           weights (a->weights) of a second forward pass. Prints "kernel dp" (avx512_bf16)
 *                           or "kernel fma" (sk_attn_bf16_native). */
#include "skiplm.h"
#include "core/attention_internal.h"
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

/* (B, L, n, D) <-> (B, n, L, D): layout 1's storage of a (B, n, L, D) tensor */
static void relayout(float *dst, const float *src, int B, int n, int L, int D, int to_blnd) {
    for (int b = 0; b < B; b++)
        for (int h = 0; h < n; h++)
            for (int t = 0; t < L; t++) {
                size_t bhld = (((size_t)b * n + h) * L + t) * D, blnd = (((size_t)b * L + t) * n + h) * D;
                memcpy(dst + (to_blnd ? blnd : bhld), src + (to_blnd ? bhld : blnd), sizeof(float) * D);
            }
}

static int attn(const char *in, const char *out_path) {
    sk_safetensors st;
    if (sk_st_read(in, &st)) return die();
    const char *pm = sk_st_meta(&st, "params");
    int B, H, Hkv, Lq, Lk, D, layout, causal, off;
    float scale, p;
    unsigned long long seed;
    if (!pm || sscanf(pm, "%d %d %d %d %d %d %d %d %d %f %f %llu", &B, &H, &Hkv, &Lq, &Lk, &D, &layout, &causal, &off,
                      &scale, &p, &seed) != 12) {
        fprintf(stderr, "tool_bf16 attn: bad or missing params\n");
        return 1;
    }
    size_t nq = (size_t)B * H * Lq * D, nk = (size_t)B * Hkv * Lk * D, n;
    const float *q0 = get(&st, "q", SK_F32, &n), *k0 = get(&st, "k", SK_F32, &n), *v0 = get(&st, "v", SK_F32, &n);
    const float *g0 = get(&st, "dout", SK_F32, &n);
    if (!q0 || !k0 || !v0 || !g0) { fprintf(stderr, "tool_bf16 attn: missing q, k, v or dout\n"); return 1; }
    float *q = malloc(4 * nq), *k = malloc(4 * nk), *v = malloc(4 * nk), *g = malloc(4 * nq), *o = malloc(4 * nq);
    float *lse = malloc(4 * (size_t)B * H * Lq), *d[2][3];
    for (int i = 0; i < 2; i++) {
        d[i][0] = calloc(nq, 4); d[i][1] = calloc(nk, 4); d[i][2] = calloc(nk, 4);
    }
    if (layout) {
        relayout(q, q0, B, H, Lq, D, 1); relayout(g, g0, B, H, Lq, D, 1);
        relayout(k, k0, B, Hkv, Lk, D, 1); relayout(v, v0, B, Hkv, Lk, D, 1);
    } else {
        memcpy(q, q0, 4 * nq); memcpy(g, g0, 4 * nq); memcpy(k, k0, 4 * nk); memcpy(v, v0, 4 * nk);
    }
    sk_attn a;
    sk_attn_init_bhld(&a, B, H, Lq, Lk, D, q, k, v, o);
    a.Hkv = Hkv;
    a.k_sb = a.v_sb = (long)Hkv * Lk * D;
    if (layout) {
        a.q_sb = a.o_sb = (long)Lq * H * D; a.q_sh = a.o_sh = D; a.q_st = a.o_st = (long)H * D;
        a.k_sb = a.v_sb = (long)Lk * Hkv * D; a.k_sh = a.v_sh = D; a.k_st = a.v_st = (long)Hkv * D;
    }
    a.scale = scale; a.is_causal = causal; a.causal_offset = off;
    a.dropout_p = p; a.training = p > 0; a.seed = seed;
    a.lse = lse; a.bf16 = 1;
    const sk_st_tensor *mt = sk_st_find(&st, "mask");
    int shape[4];
    if (mt) {
        if (mt->dtype != SK_U8 || mt->ndim != 4) { fprintf(stderr, "tool_bf16 attn: mask must be U8, rank 4\n"); return 1; }
        for (int i = 0; i < 4; i++) shape[i] = (int)mt->shape[i];
        if (sk_attn_set_mask(&a, (const uint8_t *)(st.data + mt->offset), 4, shape)) return die();
    }
    /* the weights, from a forward that also writes them (the outputs are the same) */
    float *wts = malloc(4 * (size_t)B * H * Lq * Lk);
    a.weights = wts;
    if (sk_attn_forward(&a)) return die();
    a.weights = NULL;
    if (sk_attn_forward(&a)) return die();
    for (int path = 1; path <= 2; path++) {
        sk_attn_bwd_path = path;
        if (sk_attn_backward(&a, g, d[path - 1][0], d[path - 1][1], d[path - 1][2])) return die();
    }
    sk_attn_bwd_path = 0;
    printf("kernel %s\n", sk_attn_bf16_native() ? "dp" : "fma");
    sk_st_writer *w = sk_st_writer_new();
    float *outs[8];
    int no = 0;
    const char *names[8] = {"out", "dq.2", "dk.2", "dv.2", "dq", "dk", "dv", "lse"};
    const float *src[8] = {o, d[0][0], d[0][1], d[0][2], d[1][0], d[1][1], d[1][2], lse};
    for (int i = 0; i < 8; i++) {
        const int kv = i == 2 || i == 3 || i == 5 || i == 6, heads = kv ? Hkv : H, L = kv ? Lk : Lq;
        size_t cnt = i == 7 ? (size_t)B * H * Lq : (size_t)B * heads * L * D;
        float *x = outs[no++] = malloc(4 * cnt);
        if (i == 7 || !layout) memcpy(x, src[i], 4 * cnt);
        else relayout(x, src[i], B, heads, L, D, 0);
        int64_t sh[4] = {B, heads, L, D};
        if (i == 7) sh[2] = Lq;
        sk_st_add(w, names[i], SK_F32, i == 7 ? 3 : 4, sh, x);
    }
    int64_t shw[4] = {B, H, Lq, Lk};
    sk_st_add(w, "w", SK_F32, 4, shw, wts);
    if (sk_st_write(w, out_path)) return die();
    sk_st_writer_free(w);
    free(wts);
    for (int i = 0; i < no; i++) free(outs[i]);
    for (int i = 0; i < 2; i++) for (int j = 0; j < 3; j++) free(d[i][j]);
    free(q); free(k); free(v); free(g); free(o); free(lse);
    sk_st_free(&st);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "info")) {
        printf("dnnl %d native %d isa %s version %s\n", sk_bf16_available(), sk_bf16_native(), sk_bf16_isa(), sk_bf16_version());
        return 0;
    }
    if (argc == 4 && !strcmp(argv[1], "attn")) return attn(argv[2], argv[3]);
    if (argc != 4 || (strcmp(argv[1], "round") && strcmp(argv[1], "gemm"))) {
        fprintf(stderr, "usage: tool_bf16 info | round IN OUT | gemm IN OUT | attn IN OUT\n");
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
