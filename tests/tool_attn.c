/* Driver for tests/test_attention_torch.py: reads a case from DIR (params.txt and raw
 * little-endian float32 / uint8 files), runs skiplm's attention, writes the results back
 * as raw float32 files. On a library error it writes DIR/error.txt and exits 3.
 *
 *   sdpa: params  B H Hkv Lq Lk D layout causal off scale p training seed weights avg
 *                 mask_rank s0 s1 s2 s3 ref
 *         in      q k v [mask] dout      (layout 0: (B,H,L,D); 1: (B,L,H,D))
 *         out     out lse [w] dq dk dv   (ref=1: the reference path instead of the fused one)
 *   mha:  params  B Lq Lk E H Hkv D bias self causal weights avg mask_rank s0 s1 s2 s3
 *         in      xq [xkv] wq wk wv wo [bq bk bv bo] [mask] dout
 *         out     out [w] dxq [dxkv] gwq gwk gwv gwo [gbq gbk gbv gbo]
 */
#include "skiplm.h"
#include "core/attention_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *dir;
static void *owned[64];          /* every allocation, freed at exit (clean under LeakSanitizer) */
static int n_owned;
static void *own(void *p) { if (n_owned < 64) owned[n_owned++] = p; return p; }
static void *zalloc(size_t n) { return own(calloc(n ? n : 1, 1)); }

static void *rd(const char *name, size_t n, size_t esz) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s.bin", dir, name);
    FILE *f = fopen(p, "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", p); exit(2); }
    void *buf = zalloc(n * esz);
    if (fread(buf, esz, n, f) != n) { fprintf(stderr, "short read %s\n", p); exit(2); }
    fclose(f);
    return buf;
}
static void wr(const char *name, const float *x, size_t n) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s.bin", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(x, sizeof(float), n, f) != n) { fprintf(stderr, "cannot write %s\n", p); exit(2); }
    fclose(f);
}
static void fail(void) {
    char p[4096];
    snprintf(p, sizeof p, "%s/error.txt", dir);
    FILE *f = fopen(p, "w");
    if (f) { fputs(sk_last_error(), f); fclose(f); }
    for (int i = 0; i < n_owned; i++) free(owned[i]);
    exit(3);
}

static int sdpa(FILE *pf) {
    int B, H, Hkv, Lq, Lk, D, layout, causal, off, training, weights, avg, rank, s[4], ref;
    float scale, p;
    unsigned long long seed;
    if (fscanf(pf, "%d %d %d %d %d %d %d %d %d %f %f %d %llu %d %d %d %d %d %d %d %d",
               &B, &H, &Hkv, &Lq, &Lk, &D, &layout, &causal, &off, &scale, &p, &training, &seed,
               &weights, &avg, &rank, &s[0], &s[1], &s[2], &s[3], &ref) != 21) return 2;
    size_t nq = (size_t)B * H * Lq * D, nk = (size_t)B * Hkv * Lk * D;
    float *q = rd("q", nq, 4), *k = rd("k", nk, 4), *v = rd("v", nk, 4), *dout = rd("dout", nq, 4);
    float *out = zalloc((nq) * 4), *lse = zalloc(((size_t)B * H * Lq) * 4);
    float *dq = zalloc((nq) * 4), *dk = zalloc((nk) * 4), *dv = zalloc((nk) * 4);
    size_t nw = (size_t)B * (avg ? 1 : H) * Lq * Lk;
    float *w = weights ? zalloc((nw) * 4) : NULL;
    uint8_t *mask = NULL;
    sk_attn a;
    sk_attn_init_bhld(&a, B, H, Lq, Lk, D, q, k, v, out);
    a.Hkv = Hkv;
    a.k_sb = a.v_sb = (long)Hkv * Lk * D;
    if (layout == 1) {
        a.q_sb = a.o_sb = (long)Lq * H * D; a.q_sh = a.o_sh = D; a.q_st = a.o_st = (long)H * D;
        a.k_sb = a.v_sb = (long)Lk * Hkv * D; a.k_sh = a.v_sh = D; a.k_st = a.v_st = (long)Hkv * D;
    }
    a.scale = scale; a.is_causal = causal; a.causal_offset = off;
    a.dropout_p = p; a.training = training; a.seed = seed;
    a.lse = lse; a.weights = w; a.weights_avg = avg;
    if (rank) {
        size_t n = 1;
        for (int i = 0; i < rank; i++) n *= s[i];
        mask = rd("mask", n, 1);
        if (sk_attn_set_mask(&a, mask, rank, s)) fail();
    }
    if ((ref ? sk_attn_forward_ref(&a) : sk_attn_forward(&a))) fail();
    if ((ref ? sk_attn_backward_ref(&a, dout, dq, dk, dv) : sk_attn_backward(&a, dout, dq, dk, dv))) fail();
    wr("out", out, nq); wr("lse", lse, (size_t)B * H * Lq);
    if (w) wr("w", w, nw);
    wr("dq", dq, nq); wr("dk", dk, nk); wr("dv", dv, nk);
    return 0;
}

static int mha(FILE *pf) {
    int B, Lq, Lk, E, H, Hkv, D, bias, self, causal, weights, avg, rank, s[4];
    if (fscanf(pf, "%d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d",
               &B, &Lq, &Lk, &E, &H, &Hkv, &D, &bias, &self, &causal, &weights, &avg,
               &rank, &s[0], &s[1], &s[2], &s[3]) != 17) return 2;
    const size_t qd = (size_t)H * D, kd = (size_t)Hkv * D;
    float *xq = rd("xq", (size_t)B * Lq * E, 4);
    float *xkv = self ? xq : rd("xkv", (size_t)B * Lk * E, 4);
    sk_mha m = {E, H, Hkv, D, rd("wq", qd * E, 4), rd("wk", kd * E, 4), rd("wv", kd * E, 4),
                rd("wo", E * qd, 4), NULL, NULL, NULL, NULL};
    if (bias) { m.bq = rd("bq", qd, 4); m.bk = rd("bk", kd, 4); m.bv = rd("bv", kd, 4); m.bo = rd("bo", E, 4); }
    float *dout = rd("dout", (size_t)B * Lq * E, 4);
    sk_attn a;
    memset(&a, 0, sizeof a);
    a.is_causal = causal;
    size_t nw = (size_t)B * (avg ? 1 : H) * Lq * Lk;
    float *w = weights ? zalloc((nw) * 4) : NULL;
    a.weights = w; a.weights_avg = avg;
    if (rank) {
        size_t n = 1;
        for (int i = 0; i < rank; i++) n *= s[i];
        if (sk_attn_set_mask(&a, rd("mask", n, 1), rank, s)) fail();
    }
    float *cache = zalloc(sk_mha_cache_floats(&m, B, Lq, Lk) * sizeof(float));
    float *out = zalloc(((size_t)B * Lq * E) * 4);
    if (sk_mha_forward(&m, &a, B, Lq, Lk, xq, xkv, out, cache)) fail();
    float *dxq = zalloc(((size_t)B * Lq * E) * 4), *dxkv = self ? dxq : zalloc(((size_t)B * Lk * E) * 4);
    sk_mha_grads g = {zalloc((qd * E) * 4), zalloc((kd * E) * 4), zalloc((kd * E) * 4), zalloc((E * qd) * 4),
                      zalloc((qd) * 4), zalloc((kd) * 4), zalloc((kd) * 4), zalloc((E) * 4)};
    if (sk_mha_backward(&m, &a, B, Lq, Lk, xq, xkv, cache, dout, dxq, dxkv, &g)) fail();
    wr("out", out, (size_t)B * Lq * E);
    if (w) wr("w", w, nw);
    wr("dxq", dxq, (size_t)B * Lq * E);
    if (!self) wr("dxkv", dxkv, (size_t)B * Lk * E);
    wr("gwq", g.wq, qd * E); wr("gwk", g.wk, kd * E); wr("gwv", g.wv, kd * E); wr("gwo", g.wo, E * qd);
    if (bias) { wr("gbq", g.bq, qd); wr("gbk", g.bk, kd); wr("gbv", g.bv, kd); wr("gbo", g.bo, E); }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: tool_attn DIR\n"); return 2; }
    dir = argv[1];
    char p[4096], mode[16];
    snprintf(p, sizeof p, "%s/params.txt", dir);
    FILE *pf = fopen(p, "r");
    if (!pf || fscanf(pf, "%15s", mode) != 1) { fprintf(stderr, "cannot read %s\n", p); return 2; }
    int rc = strcmp(mode, "mha") == 0 ? mha(pf) : sdpa(pf);
    fclose(pf);
    if (rc) fprintf(stderr, "bad params.txt\n");
    for (int i = 0; i < n_owned; i++) free(owned[i]);
    return rc;
}
