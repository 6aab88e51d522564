/* 8-bit weights (quant.h): fp16 scales and Q8_0 quantization of a model's matrices (the
 * decoding kernel that reads them with fp32 activations is gemm_rows.c). */
#include "core/quant.h"
#include "core/model.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
size_t sk_model_q8_bytes(const sk_model *m) { return m->q8 ? m->n_params + m->q8->n_scales * sizeof(uint16_t) : 0; }
