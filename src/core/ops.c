/* Layer ops: linear (BLAS), LayerNorm, GELU, embeddings, dropout, reductions.
 * Reductions over rows run column-parallel with rows in a fixed order, so every result
 * is independent of the thread count. */
#include "core/ops.h"
#include "core/vmath.h"
#include <math.h>
#include <string.h>

/* Fork a thread team only for enough work: tiny regions (decoding one token) cost more
 * in wake-ups than they save. */
#define SK_PAR(work) ((size_t)(work) >= 32768)
#ifdef SK_HAVE_BLAS
#include <cblas.h>
#endif

/* ------------------------------------------------------------------ GEMM */

void sk_gemm(int transA, int transB, int M, int N, int K, float alpha,
             const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
#ifdef SK_HAVE_BLAS
    if (M == 1 && !transA) {
        /* one row (decoding a token): a matrix-vector product streams B once */
        if (transB) cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, alpha, B, ldb, A, 1, beta, C, 1);
        else cblas_sgemv(CblasRowMajor, CblasTrans, K, N, alpha, B, ldb, A, 1, beta, C, 1);
        return;
    }
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
    /* Portable fallback: row-parallel, k-outer so the inner loop is contiguous in B and C. */
    #pragma omp parallel for schedule(static) if(SK_PAR((M) * (size_t)N * K))
    for (int i = 0; i < M; i++) {
        float *c = C + (size_t)i * ldc;
        if (beta == 0.0f) memset(c, 0, sizeof(float) * N);
        else if (beta != 1.0f) for (int j = 0; j < N; j++) c[j] *= beta;
        for (int k = 0; k < K; k++) {
            float a = alpha * (transA ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);
            if (a == 0.0f) continue;
            if (!transB) {
                const float *b = B + (size_t)k * ldb;
                for (int j = 0; j < N; j++) c[j] += a * b[j];
            } else {
                for (int j = 0; j < N; j++) c[j] += a * B[(size_t)j * ldb + k];
            }
        }
    }
#endif
}

void sk_linear_forward(float *out, const float *inp, const float *w, const float *b,
                       int N, int IC, int OC) {
    if (b) {
        #pragma omp parallel for schedule(static) if(SK_PAR((N) * (size_t)OC))
        for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OC, b, sizeof(float) * OC);
    }
    sk_gemm(0, 1, N, OC, IC, 1.0f, inp, IC, w, IC, b ? 1.0f : 0.0f, out, OC);
}

/* ------------------------------------------------------------ bf16 weights */

/* fp32 -> bf16, round to nearest even (what PyTorch's .bfloat16() does); NaN stays a
 * (quiet) NaN, infinities and overflow to infinity as in IEEE. */
uint16_t sk_bf16_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

void sk_bf16_from_f32_n(uint16_t *out, const float *x, size_t n) {
    #pragma omp parallel for schedule(static) if(SK_PAR(n))
    for (size_t i = 0; i < n; i++) out[i] = sk_bf16_from_f32(x[i]);
}

void sk_bf16_to_f32_n(float *out, const uint16_t *x, size_t n) {
    #pragma omp parallel for schedule(static) if(SK_PAR(n))
    for (size_t i = 0; i < n; i++) out[i] = sk_bf16_to_f32(x[i]);
}


void sk_linear_backward(float *dinp, float *dw, float *db, const float *dout,
                        const float *inp, const float *w, int N, int IC, int OC) {
    if (dinp) sk_gemm(0, 0, N, IC, OC, 1.0f, dout, OC, w, IC, 0.0f, dinp, IC);
    if (dw) sk_gemm(1, 0, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
    if (db) sk_colsum_add(db, dout, N, OC);
}

/* Column blocks of 16 floats: each thread owns whole columns and walks rows in order. */
void sk_colsum_add(float *out, const float *x, int N, int C) {
    int nblk = (C + 15) / 16;
    #pragma omp parallel for schedule(static) if(SK_PAR((nblk) * (size_t)N * 16))
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * 16, c1 = c0 + 16 < C ? c0 + 16 : C;
        float acc[16] = {0};
        for (int n = 0; n < N; n++) {
            const float *row = x + (size_t)n * C;
            for (int c = c0; c < c1; c++) acc[c - c0] += row[c];
        }
        for (int c = c0; c < c1; c++) out[c] += acc[c - c0];
    }
}

void sk_add_inplace(float *y, const float *x, size_t n) {
    #pragma omp parallel for schedule(static) if(SK_PAR((n) * 1))
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

/* ------------------------------------------------------------- LayerNorm */

void sk_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C, float eps) {
    #pragma omp parallel for schedule(static) if(SK_PAR((N) * (size_t)C))
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        float v = 0.0f;
        for (int c = 0; c < C; c++) { float d = x[c] - m; v += d * d; }
        v /= C;
        float s = 1.0f / sqrtf(v + eps);
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + (b ? b[c] : 0.0f);
        mean[n] = m; rstd[n] = s;
    }
}

void sk_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                           const float *inp, const float *w, const float *mean,
                           const float *rstd, int N, int C) {
    #pragma omp parallel for schedule(static) if(SK_PAR((N) * (size_t)C))
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        float dmean = 0.0f, dnx = 0.0f;
        for (int c = 0; c < C; c++) {
            float dn = w[c] * dy[c];
            dmean += dn;
            dnx += dn * (x[c] - m) * s;
        }
        dmean /= C; dnx /= C;
        for (int c = 0; c < C; c++) {
            float nx = (x[c] - m) * s;
            dx[c] += s * (w[c] * dy[c] - dmean - nx * dnx);
        }
    }
    if (!dw) return;
    int nblk = (C + 15) / 16;
    #pragma omp parallel for schedule(static) if(SK_PAR((nblk) * (size_t)N * 16))
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * 16, c1 = c0 + 16 < C ? c0 + 16 : C;
        float aw[16] = {0}, ab[16] = {0};
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            for (int c = c0; c < c1; c++) {
                aw[c - c0] += dy[c] * (x[c] - m) * s;
                ab[c - c0] += dy[c];
            }
        }
        for (int c = c0; c < c1; c++) {
            dw[c] += aw[c - c0];
            if (db) db[c] += ab[c - c0];
        }
    }
}

/* ------------------------------------------------------------------ GELU */

#define SK_SQRT_2_OVER_PI 0.7978845608028654f
#define SK_INV_SQRT2 0.7071067811865476f
#define SK_INV_SQRT_2PI 0.3989422804014327f

void sk_gelu_forward(float *out, const float *inp, size_t n, int tanh_approx) {
    if (tanh_approx) {
        #pragma omp parallel for simd schedule(static) if(SK_PAR((n) * 1))
        for (size_t i = 0; i < n; i++) {
            float x = inp[i];
            out[i] = 0.5f * x * (1.0f + sk_ftanh(SK_SQRT_2_OVER_PI * (x + 0.044715f * x * x * x)));
        }
    } else {
        #pragma omp parallel for simd schedule(static) if(SK_PAR((n) * 1))
        for (size_t i = 0; i < n; i++) {
            float x = inp[i];
            out[i] = 0.5f * x * (1.0f + sk_ferf(x * SK_INV_SQRT2));
        }
    }
}

void sk_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n, int tanh_approx) {
    if (tanh_approx) {
        #pragma omp parallel for simd schedule(static) if(SK_PAR((n) * 1))
        for (size_t i = 0; i < n; i++) {
            float x = inp[i];
            float u = SK_SQRT_2_OVER_PI * (x + 0.044715f * x * x * x);
            float t = sk_ftanh(u);
            float du = SK_SQRT_2_OVER_PI * (1.0f + 3.0f * 0.044715f * x * x);
            float g = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
            dinp[i] = g * dout[i];
        }
    } else {
        #pragma omp parallel for simd schedule(static) if(SK_PAR((n) * 1))
        for (size_t i = 0; i < n; i++) {
            float x = inp[i];
            float g = 0.5f * (1.0f + sk_ferf(x * SK_INV_SQRT2)) + x * SK_INV_SQRT_2PI * sk_fexp(-0.5f * x * x);
            dinp[i] = g * dout[i];
        }
    }
}

void sk_relu_forward(float *out, const float *inp, size_t n) {
    #pragma omp parallel for simd schedule(static) if(SK_PAR((n) * 1))
    for (size_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}
void sk_relu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    #pragma omp parallel for simd schedule(static) if(SK_PAR((n) * 1))
    for (size_t i = 0; i < n; i++) dinp[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
}

/* ------------------------------------------------------------ embeddings */

void sk_sinusoidal_table(float *pe, int max_pos, int C) {
    for (int p = 0; p < max_pos; p++)
        for (int i = 0; i < C / 2; i++) {
            double ang = p / pow(10000.0, (double)(2 * i) / C);
            pe[(size_t)p * C + 2 * i] = (float)sin(ang);
            pe[(size_t)p * C + 2 * i + 1] = (float)cos(ang);
        }
}

void sk_embed_forward(float *out, const int32_t *tok, const float *wte, const float *wpe,
                      int B, int T, int C) {
    #pragma omp parallel for schedule(static) if(SK_PAR((B * T) * (size_t)C))
    for (int bt = 0; bt < B * T; bt++) {
        const float *e = wte + (size_t)tok[bt] * C;
        const float *p = wpe ? wpe + (size_t)(bt % T) * C : NULL;
        float *o = out + (size_t)bt * C;
        if (p) for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
        else memcpy(o, e, sizeof(float) * C);
    }
}

void sk_embed_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                       int B, int T, int C) {
    /* Column-parallel: a token may repeat, so rows of dwte are shared; columns are not. */
    int nblk = (C + 15) / 16;
    #pragma omp parallel for schedule(static) if(SK_PAR((nblk) * (size_t)B * T * 16))
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * 16, c1 = c0 + 16 < C ? c0 + 16 : C;
        for (int bt = 0; bt < B * T; bt++) {
            float *d = dwte + (size_t)tok[bt] * C;
            const float *g = dout + (size_t)bt * C;
            for (int c = c0; c < c1; c++) d[c] += g[c];
        }
    }
    if (dwpe) {
        #pragma omp parallel for schedule(static) if(SK_PAR((T) * (size_t)B * C))
        for (int t = 0; t < T; t++) {
            float *d = dwpe + (size_t)t * C;
            for (int b = 0; b < B; b++) {
                const float *g = dout + ((size_t)b * T + t) * C;
                for (int c = 0; c < C; c++) d[c] += g[c];
            }
        }
    }
}

/* --------------------------------------------------------------- dropout */

void sk_dropout(float *x, size_t n, float p, uint64_t seed, uint64_t stream) {
    if (p <= 0.0f) return;
    uint32_t thr = (uint32_t)fmin((double)p * 4294967296.0, 4294967295.0);
    float scale = 1.0f / (1.0f - p);
    #pragma omp parallel for schedule(static) if(SK_PAR((n) * 1))
    for (size_t i = 0; i < n; i++)
        x[i] = sk_hash32(seed, stream, i) >= thr ? x[i] * scale : 0.0f;
}

/* ------------------------------------------------------------------- RNG */

uint64_t sk_rng_u64(sk_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
float sk_rng_uniform(sk_rng *r) { return (float)((sk_rng_u64(r) >> 40) * (1.0 / 16777216.0)); }
float sk_rng_normal(sk_rng *r) {
    double u1 = ((sk_rng_u64(r) >> 11) + 1) * (1.0 / 9007199254740993.0);   /* (0, 1] */
    double u2 = (sk_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* --------------------------------------------------------------- RMSNorm */

void sk_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w,
                        int N, int C, float eps) {
    #pragma omp parallel for schedule(static) if(SK_PAR((N) * (size_t)C))
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float s = 1.0f / sqrtf(ss / C + eps);
        for (int c = 0; c < C; c++) o[c] = w[c] * (x[c] * s);
        rstd[n] = s;
    }
}

void sk_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                         const float *w, const float *rstd, int N, int C) {
    #pragma omp parallel for schedule(static) if(SK_PAR((N) * (size_t)C))
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float s = rstd[n], dot = 0.0f;
        for (int c = 0; c < C; c++) dot += w[c] * dy[c] * x[c];
        dot *= s * s / C;
        for (int c = 0; c < C; c++) dx[c] += s * (w[c] * dy[c] - x[c] * dot);
    }
    if (!dw) return;
    int nblk = (C + 15) / 16;
    #pragma omp parallel for schedule(static) if(SK_PAR((nblk) * (size_t)N * 16))
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * 16, c1 = c0 + 16 < C ? c0 + 16 : C;
        float aw[16] = {0};
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
            for (int c = c0; c < c1; c++) aw[c - c0] += dy[c] * x[c] * rstd[n];
        }
        for (int c = c0; c < c1; c++) dw[c] += aw[c - c0];
    }
}

/* ------------------------------------------------------------------ RoPE */

void sk_rope_table(float *table, int max_pos, int hs, const double *freq) {
    for (int p = 0; p < max_pos; p++)
        for (int j = 0; j < hs / 2; j++) {
            /* the frequency rounded once from double: matches torch.polar on float32 freqs to ~1 ulp */
            float ang = (float)p * (float)freq[j];
            table[((size_t)p * (hs / 2) + j) * 2 + 0] = cosf(ang);
            table[((size_t)p * (hs / 2) + j) * 2 + 1] = sinf(ang);
        }
}

void sk_rope(float *x, const float *table, int B, int T, int row, int col0, int n_heads,
             int hs, int pos0, int inverse) {
    float sgn = inverse ? -1.0f : 1.0f;
    #pragma omp parallel for schedule(static) if(SK_PAR((B * T) * (size_t)row))
    for (int bt = 0; bt < B * T; bt++) {
        const float *tab = table + (size_t)(pos0 + bt % T) * hs;
        float *r = x + (size_t)bt * row + col0;
        for (int h = 0; h < n_heads; h++) {
            float *v = r + (size_t)h * hs;
            for (int j = 0; j < hs / 2; j++) {
                float c = tab[2 * j], s = sgn * tab[2 * j + 1];
                float a = v[2 * j], b = v[2 * j + 1];
                v[2 * j] = a * c - b * s;
                v[2 * j + 1] = a * s + b * c;
            }
        }
    }
}

/* ---------------------------------------------------------------- SwiGLU */

void sk_swiglu_forward(float *out, const float *h, int N, int F) {
    #pragma omp parallel for schedule(static) if(SK_PAR((N) * (size_t)F))
    for (int n = 0; n < N; n++) {
        const float *a = h + (size_t)n * 2 * F, *b = a + F;
        float *o = out + (size_t)n * F;
        for (int f = 0; f < F; f++) o[f] = a[f] / (1.0f + sk_fexp(-a[f])) * b[f];
    }
}

void sk_swiglu_backward(float *dh, const float *h, const float *dout, int N, int F) {
    #pragma omp parallel for schedule(static) if(SK_PAR((N) * (size_t)F))
    for (int n = 0; n < N; n++) {
        const float *a = h + (size_t)n * 2 * F, *b = a + F, *dy = dout + (size_t)n * F;
        float *da = dh + (size_t)n * 2 * F, *db = da + F;
        for (int f = 0; f < F; f++) {
            float sg = 1.0f / (1.0f + sk_fexp(-a[f]));
            float silu = a[f] * sg;
            da[f] = dy[f] * b[f] * sg * (1.0f + a[f] * (1.0f - sg));
            db[f] = dy[f] * silu;
        }
    }
}
