/* 8-bit weights (quant.h): fp16 scales, Q8_0 quantization of a model's matrices, and the
 * decoding kernel that reads them with fp32 activations. */
#include "core/quant.h"
#include "core/model.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#define SK_PAR(work) ((size_t)(work) >= 32768)

/* ------------------------------------------------------------------ fp16 */

uint16_t sk_f16_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);          /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);         /* rounds past 65504: inf */
    if (a < 0x38800000u) {                                           /* below 2^-14: subnormal */
        /* value = a's float; subnormal half unit 2^-24: round a * 2^24 to an integer, nearest even */
        float v;
        memcpy(&v, &a, 4);
        float s = v * 16777216.0f;                                   /* exact (power of two) */
        float r = nearbyintf(s);                                     /* nearest even in the default mode */
        return (uint16_t)(sign | (uint16_t)r);
    }
    uint32_t e = (a >> 23) - 112, mant = a & 0x7fffffu;              /* rebias 127 -> 15 */
    uint32_t h = (e << 10) | (mant >> 13), rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;        /* a carry into the exponent is right */
    return (uint16_t)(sign | h);
}

float sk_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, mant = h & 0x3ffu, u;
    if (e == 0) {                                                    /* zero, subnormal: mant * 2^-24 */
        float v = (float)mant * (1.0f / 16777216.0f);
        memcpy(&u, &v, 4);
        u |= sign;
    } else if (e == 31) {
        u = sign | 0x7f800000u | (mant << 13);
    } else {
        u = sign | ((e + 112) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---------------------------------------------------------- quantization */

void sk_q8_quantize(int8_t *q, uint16_t *d, const float *w, size_t n) {
    size_t nb = n / SK_Q8_BLOCK;
    #pragma omp parallel for schedule(static) if(SK_PAR(n))
    for (size_t b = 0; b < nb; b++) {
        const float *x = w + b * SK_Q8_BLOCK;
        int8_t *o = q + b * SK_Q8_BLOCK;
        float amax = 0.0f;
        for (int k = 0; k < SK_Q8_BLOCK; k++) {      /* (fmaxf stays a call: NaN rules) */
            float a = fabsf(x[k]);
            amax = a > amax ? a : amax;
        }
        /* the scale rounded up to fp16, so that no weight is clipped: each is within half a
         * step of its 8-bit value (rounding to nearest could put max|w| / d above 127, and in
         * fp16's subnormal range, below 2^-14, by a lot) */
        const float want = amax / 127.0f;
        uint16_t h = sk_f16_from_f32(want);
        if (sk_f16_to_f32(h) < want) h++;                            /* the next half up (positive) */
        if ((h & 0x7c00u) == 0x7c00u) h = 0x7bffu;                   /* past fp16's range: the largest scale */
        float dr = sk_f16_to_f32(h);
        d[b] = h;
        /* rounded with the stored scale, so q * d is the nearest representable weight */
        for (int k = 0; k < SK_Q8_BLOCK; k++) {
            float v = dr > 0.0f ? nearbyintf(x[k] / dr) : 0.0f;
            o[k] = (int8_t)(v > 127.0f ? 127 : v < -127.0f ? -127 : (int)v);
        }
    }
}

void sk_q8_dequantize(float *w, const int8_t *q, const uint16_t *d, size_t n) {
    size_t nb = n / SK_Q8_BLOCK;
    #pragma omp parallel for schedule(static) if(SK_PAR(n))
    for (size_t b = 0; b < nb; b++) {
        float s = sk_f16_to_f32(d[b]);
        for (int k = 0; k < SK_Q8_BLOCK; k++) w[b * SK_Q8_BLOCK + k] = (float)q[b * SK_Q8_BLOCK + k] * s;
    }
}

/* ---------------------------------------------------------------- kernel */

#if defined(__F16C__)
#define F16(h) _cvtsh_ss(h)
#else
#define F16(h) sk_f16_to_f32(h)
#endif

/* res[r] = x_r . (q * d) over n (a multiple of 32) for R rows x_r = x + r ldx (R a constant
 * at each call, at most Q8_ROWS): each block's weights widened to fp32 once for the R rows;
 * per row each block's 32 products summed, times its scale, into two accumulators (even and
 * odd blocks). One fixed order per row, whatever R and the thread count: a row gives the same
 * bits alone or in a batch. */
#define SK_INLINE static inline __attribute__((always_inline))
#if defined(__AVX512F__)
#define Q8_ROWS 4
SK_INLINE void dot_q8_rows(float *res, const float *x, size_t ldx, const int8_t *q, const uint16_t *d, int n, int R) {
    const int nb = n / SK_Q8_BLOCK;
    __m512 a0[Q8_ROWS], a1[Q8_ROWS];
    for (int r = 0; r < R; r++) a0[r] = a1[r] = _mm512_setzero_ps();
#define W16(b, k) _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + 32 * (b) + 16 * (k)))))
#define BLK(acc, b) do { \
        const __m512 w0 = W16(b, 0), w1 = W16(b, 1), s = _mm512_set1_ps(F16(d[b])); \
        for (int r = 0; r < R; r++) { \
            const float *xr = x + r * ldx + 32 * (b); \
            acc[r] = _mm512_fmadd_ps(_mm512_fmadd_ps(w1, _mm512_loadu_ps(xr + 16), _mm512_mul_ps(w0, _mm512_loadu_ps(xr))), s, acc[r]); \
        } } while (0)
    int b = 0;
    for (; b + 2 <= nb; b += 2) { BLK(a0, b); BLK(a1, b + 1); }
    if (b < nb) BLK(a0, b);
    for (int r = 0; r < R; r++) res[r] = _mm512_reduce_add_ps(_mm512_add_ps(a0[r], a1[r]));
#undef BLK
#undef W16
}
#elif defined(__AVX2__) && defined(__FMA__)
#define Q8_ROWS 2
SK_INLINE void dot_q8_rows(float *res, const float *x, size_t ldx, const int8_t *q, const uint16_t *d, int n, int R) {
    const int nb = n / SK_Q8_BLOCK;
    __m256 a0[Q8_ROWS], a1[Q8_ROWS];
    for (int r = 0; r < R; r++) a0[r] = a1[r] = _mm256_setzero_ps();
#define W8(b, k) _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + 32 * (b) + 8 * (k)))))
#define BLK(acc, b) do { \
        const __m256 w0 = W8(b, 0), w1 = W8(b, 1), w2 = W8(b, 2), w3 = W8(b, 3), s = _mm256_set1_ps(F16(d[b])); \
        for (int r = 0; r < R; r++) { \
            const float *xr = x + r * ldx + 32 * (b); \
            __m256 p = _mm256_mul_ps(w0, _mm256_loadu_ps(xr)); \
            p = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xr + 8), p); \
            p = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xr + 16), p); \
            p = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xr + 24), p); \
            acc[r] = _mm256_fmadd_ps(p, s, acc[r]); \
        } } while (0)
    int b = 0;
    for (; b + 2 <= nb; b += 2) { BLK(a0, b); BLK(a1, b + 1); }
    if (b < nb) BLK(a0, b);
    for (int r = 0; r < R; r++) {
        __m256 a = _mm256_add_ps(a0[r], a1[r]);
        __m128 t = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        t = _mm_add_ps(t, _mm_movehl_ps(t, t));
        t = _mm_add_ss(t, _mm_movehdup_ps(t));
        res[r] = _mm_cvtss_f32(t);
    }
#undef BLK
#undef W8
}
#else
#define Q8_ROWS 1
SK_INLINE void dot_q8_rows(float *res, const float *x, size_t ldx, const int8_t *q, const uint16_t *d, int n, int R) {
    (void)ldx; (void)R;
    float acc = 0.0f;
    for (int b = 0; b < n / SK_Q8_BLOCK; b++) {
        float s[8] = {0};
        for (int k = 0; k < SK_Q8_BLOCK; k++) s[k % 8] += x[32 * b + k] * (float)q[32 * b + k];
        acc += (((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))) * F16(d[b]);
    }
    res[0] = acc;
}
#endif

void sk_linear_forward_q8(float *out, const float *inp, const int8_t *q, const uint16_t *d, const float *b,
                          int N, int IC, int OC) {
    const int nb = IC / SK_Q8_BLOCK;
    #pragma omp parallel for schedule(static) if(SK_PAR((N) * (size_t)OC * IC))
    for (int o = 0; o < OC; o++) {
        const int8_t *row = q + (size_t)o * IC;
        const uint16_t *dr = d + (size_t)o * nb;
        float bias = b ? b[o] : 0.0f, res[Q8_ROWS];
        for (int n = 0; n < N; n += Q8_ROWS) {
            const float *x = inp + (size_t)n * IC;
            const int R = N - n < Q8_ROWS ? N - n : Q8_ROWS;
            /* R as a constant in each call, so the rows' accumulators stay in registers */
            switch (R) {
            case 1: dot_q8_rows(res, x, (size_t)IC, row, dr, IC, 1); break;
#if Q8_ROWS >= 2
            case 2: dot_q8_rows(res, x, (size_t)IC, row, dr, IC, 2); break;
#endif
#if Q8_ROWS >= 4
            case 3: dot_q8_rows(res, x, (size_t)IC, row, dr, IC, 3); break;
            case 4: dot_q8_rows(res, x, (size_t)IC, row, dr, IC, 4); break;
#endif
            }
            for (int r = 0; r < R; r++) out[(size_t)(n + r) * OC + o] = bias + res[r];
        }
    }
}

/* ----------------------------------------------------------- the model */

const uint16_t *sk_q8_scales(const sk_q8 *z, size_t off) {
    for (int i = 0; i < z->n_reg; i++)
        if (off >= z->reg[i].off && off < z->reg[i].off + z->reg[i].n)
            return z->d + z->reg[i].d_off + (off - z->reg[i].off) / SK_Q8_BLOCK;
    return NULL;
}

void sk_q8_free(sk_q8 *z) {
    if (!z) return;
    free(z->q); free(z->d); free(z);
}

int sk_q8_alloc(const sk_model *m, sk_q8 **out) {
    *out = NULL;
    const sk_params *p = &m->p;
    const int Ffc = m->gated ? 2 * m->F : m->F;
    if (m->C % SK_Q8_BLOCK || m->F % SK_Q8_BLOCK)
        return sk_error(SK_EINVAL, "8-bit weights need n_embd and the MLP width to be multiples of %d (n_embd %d, MLP %d)",
                        SK_Q8_BLOCK, m->C, m->F);
    sk_q8 *z = calloc(1, sizeof *z);
    if (!z) return sk_error(SK_ENOMEM, "out of memory");
    const float *base[] = {p->wte, p->wpe, p->qkvw, p->attprojw, p->fcw, p->fcprojw, p->lmhead != p->wte ? p->lmhead : NULL};
    const size_t len[] = {(size_t)m->Vp * m->C, (size_t)m->cfg.block_size * m->C, (size_t)m->L * m->QKV * m->C,
                          (size_t)m->L * m->C * m->C, (size_t)m->L * Ffc * m->C, (size_t)m->L * m->C * m->F,
                          (size_t)m->Vp * m->C};
    for (int i = 0; i < 7; i++) {
        if (!base[i]) continue;
        z->reg[z->n_reg].off = (size_t)(base[i] - m->params);
        z->reg[z->n_reg].n = len[i];
        z->reg[z->n_reg].d_off = z->n_scales;
        z->n_scales += len[i] / SK_Q8_BLOCK;
        z->n_reg++;
    }
    int rc = sk_mem_check(m->n_params + z->n_scales * 2, "the 8-bit weights");
    if (rc) { free(z); return rc; }
    z->q = calloc(m->n_params, 1);
    z->d = calloc(z->n_scales, sizeof *z->d);
    if (!z->q || !z->d) { sk_q8_free(z); return sk_error(SK_ENOMEM, "out of memory for the 8-bit weights (%zu bytes)", m->n_params); }
    *out = z;
    return SK_OK;
}

int sk_model_quantize_q8(sk_model *m) {
    if (m->q8) return SK_OK;
    sk_q8 *z;
    int rc = sk_q8_alloc(m, &z);
    if (rc) return rc;
    for (int i = 0; i < z->n_reg; i++) {
        size_t off = z->reg[i].off, n = z->reg[i].n;
        sk_q8_quantize(z->q + off, z->d + z->reg[i].d_off, m->params + off, n);
        sk_q8_dequantize(m->params + off, z->q + off, z->d + z->reg[i].d_off, n);
    }
    m->q8 = z;
    return SK_OK;
}

int sk_model_q8(const sk_model *m) { return m->q8 != NULL; }
