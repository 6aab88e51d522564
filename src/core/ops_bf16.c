/* The elementwise ops of bf16 mixed precision (ops_bf16.h). Each loop is the fp32 op's
 * (core/ops.c), reading or writing bf16 where the op's operand is stored in bf16. */
#include "core/ops_bf16.h"
#include "core/ops.h"
#include "core/vmath.h"
#include <math.h>
#include <string.h>

#define SK_PAR(work) ((size_t)(work) >= 32768)
#define SK_SQRT_2_OVER_PI 0.7978845608028654f
#define SK_INV_SQRT2 0.7071067811865476f
#define SK_INV_SQRT_2PI 0.3989422804014327f

#define rne sk_rne_bf16
static inline float wid(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void sk_round_bf16(uint16_t *out, const float *x, size_t n) {
    #pragma omp parallel for simd schedule(static) if(SK_PAR(n))
    for (size_t i = 0; i < n; i++) out[i] = rne(x[i]);
}

void sk_round_bf16_2d(uint16_t *out, int ldo, const float *x, int ldx, int rows, int cols) {
    #pragma omp parallel for schedule(static) if(SK_PAR((size_t)rows * cols))
    for (int r = 0; r < rows; r++) {
        uint16_t *o = out + (size_t)r * ldo;
        const float *s = x + (size_t)r * ldx;
        #pragma omp simd
        for (int c = 0; c < cols; c++) o[c] = rne(s[c]);
    }
}

/* ------------------------------------------------------------------ norms */

void sk_layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const float *inp,
                               const float *w, const float *b, int N, int C, float eps) {
    #pragma omp parallel for schedule(static) if(SK_PAR((N) * (size_t)C))
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        uint16_t *o = out + (size_t)n * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        float v = 0.0f;
        for (int c = 0; c < C; c++) { float d = x[c] - m; v += d * d; }
        v /= C;
        float s = 1.0f / sqrtf(v + eps);
        for (int c = 0; c < C; c++) o[c] = rne((x[c] - m) * s * w[c] + (b ? b[c] : 0.0f));
        mean[n] = m; rstd[n] = s;
    }
}

void sk_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const float *inp, const float *w,
                             int N, int C, float eps) {
    #pragma omp parallel for schedule(static) if(SK_PAR((N) * (size_t)C))
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        uint16_t *o = out + (size_t)n * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float s = 1.0f / sqrtf(ss / C + eps);
        for (int c = 0; c < C; c++) o[c] = rne(w[c] * (x[c] * s));
        rstd[n] = s;
    }
}

/* ------------------------------------------------------------ activations */

void sk_gelu_forward_bf16(uint16_t *out, const uint16_t *inp, size_t n, int tanh_approx) {
    if (tanh_approx) {
        #pragma omp parallel for simd schedule(static) if(SK_PAR(n))
        for (size_t i = 0; i < n; i++) {
            float x = wid(inp[i]);
            out[i] = rne(0.5f * x * (1.0f + sk_ftanh(SK_SQRT_2_OVER_PI * (x + 0.044715f * x * x * x))));
        }
    } else {
        #pragma omp parallel for simd schedule(static) if(SK_PAR(n))
        for (size_t i = 0; i < n; i++) {
            float x = wid(inp[i]);
            out[i] = rne(0.5f * x * (1.0f + sk_ferf(x * SK_INV_SQRT2)));
        }
    }
}

void sk_gelu_backward_bf16(uint16_t *dinp, const uint16_t *inp, const float *dout, size_t n, int tanh_approx) {
    if (tanh_approx) {
        #pragma omp parallel for simd schedule(static) if(SK_PAR(n))
        for (size_t i = 0; i < n; i++) {
            float x = wid(inp[i]);
            float u = SK_SQRT_2_OVER_PI * (x + 0.044715f * x * x * x);
            float t = sk_ftanh(u);
            float du = SK_SQRT_2_OVER_PI * (1.0f + 3.0f * 0.044715f * x * x);
            float g = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
            dinp[i] = rne(g * dout[i]);
        }
    } else {
        #pragma omp parallel for simd schedule(static) if(SK_PAR(n))
        for (size_t i = 0; i < n; i++) {
            float x = wid(inp[i]);
            float g = 0.5f * (1.0f + sk_ferf(x * SK_INV_SQRT2)) + x * SK_INV_SQRT_2PI * sk_fexp(-0.5f * x * x);
            dinp[i] = rne(g * dout[i]);
        }
    }
}

void sk_relu_forward_bf16(uint16_t *out, const uint16_t *inp, size_t n) {
    #pragma omp parallel for simd schedule(static) if(SK_PAR(n))
    for (size_t i = 0; i < n; i++) { float x = wid(inp[i]); out[i] = x > 0.0f ? inp[i] : 0; }
}

void sk_relu_backward_bf16(uint16_t *dinp, const uint16_t *inp, const float *dout, size_t n) {
    #pragma omp parallel for simd schedule(static) if(SK_PAR(n))
    for (size_t i = 0; i < n; i++) dinp[i] = wid(inp[i]) > 0.0f ? rne(dout[i]) : 0;
}

void sk_swiglu_forward_bf16(uint16_t *out, const uint16_t *h, int N, int F) {
    #pragma omp parallel for schedule(static) if(SK_PAR((N) * (size_t)F))
    for (int n = 0; n < N; n++) {
        const uint16_t *a = h + (size_t)n * 2 * F, *b = a + F;
        uint16_t *o = out + (size_t)n * F;
        #pragma omp simd
        for (int f = 0; f < F; f++) {
            float af = wid(a[f]);
            o[f] = rne(af / (1.0f + sk_fexp(-af)) * wid(b[f]));
        }
    }
}

void sk_swiglu_backward_bf16(uint16_t *dh, const uint16_t *h, const float *dout, int N, int F) {
    #pragma omp parallel for schedule(static) if(SK_PAR((N) * (size_t)F))
    for (int n = 0; n < N; n++) {
        const uint16_t *a = h + (size_t)n * 2 * F, *b = a + F;
        const float *dy = dout + (size_t)n * F;
        uint16_t *da = dh + (size_t)n * 2 * F, *db = da + F;
        #pragma omp simd
        for (int f = 0; f < F; f++) {
            float af = wid(a[f]), bf = wid(b[f]);
            float sg = 1.0f / (1.0f + sk_fexp(-af));
            float silu = af * sg;
            da[f] = rne(dy[f] * bf * sg * (1.0f + af * (1.0f - sg)));
            db[f] = rne(dy[f] * silu);
        }
    }
}

/* ------------------------------------------------------------- reductions */

void sk_colsum_add_bf16(float *out, const uint16_t *x, int N, int C) {
    int nblk = (C + 15) / 16;
    #pragma omp parallel for schedule(static) if(SK_PAR((nblk) * (size_t)N * 16))
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * 16, c1 = c0 + 16 < C ? c0 + 16 : C;
        float acc[16] = {0};
        for (int n = 0; n < N; n++) {
            const uint16_t *row = x + (size_t)n * C;
            for (int c = c0; c < c1; c++) acc[c - c0] += wid(row[c]);
        }
        for (int c = c0; c < c1; c++) out[c] += acc[c - c0];
    }
}
