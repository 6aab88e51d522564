/* Kernel lab for decoding with 8-bit weights: one token's matrix-vector products at
 * llama2.c's stories110M shapes (12 layers of q, k, v, o 768x768, w1, w3 2048x768, w2 768x2048,
 * then the 32000x768 classifier: 110M weights), timed for
 *   bf16   sk_linear_forward_bf16 (what --bf16 decodes with)
 *   q8     sk_linear_forward_q8: int8 weights, fp32 activations (what --q8 decodes with)
 *   q8xq8  the activations quantized too, per block of 32 (int8, fp32 scale), and the int8 dot
 *          products summed in int32 by AVX-512 VNNI (vpdpbusd), llama.cpp's Q8_0 x Q8_0 idea:
 *          the activations offset by 128 to unsigned bytes, the offset taken back through each
 *          block's precomputed weight sum. Quantizing the activations is timed with it.
 * Each is checked against a double-precision sum first (q8xq8 against its own quantized
 * activations: it is a different function of x), then timed; GB/s counts the weight bytes.
 * Build and run: make build/bench/q8_lab && OMP_NUM_THREADS=2 build/bench/q8_lab [passes] */
#include "skiplm.h"
#include "core/ops.h"
#include "core/quant.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#include <immintrin.h>
#define HAVE_VNNI 1
#endif

typedef struct { int OC, IC; float *w; uint16_t *w16; int8_t *q; uint16_t *d; int32_t *bsum; } mat;

static unsigned long long rng = 1;
static float urand(void) { rng = rng * 6364136223846793005ULL + 1442695040888963407ULL; return (float)((double)(rng >> 40) / (1 << 24) * 2 - 1); }

static void mat_new(mat *m, int OC, int IC) {
    size_t n = (size_t)OC * IC;
    m->OC = OC; m->IC = IC;
    m->w = malloc(n * 4); m->w16 = malloc(n * 2); m->q = malloc(n); m->d = malloc(n / 16); m->bsum = malloc(n / 8);
    for (size_t i = 0; i < n; i++) m->w[i] = 0.02f * urand();
    sk_bf16_from_f32_n(m->w16, m->w, n);
    sk_q8_quantize(m->q, m->d, m->w, n);
    for (size_t b = 0; b < n / 32; b++) {
        int s = 0;
        for (int k = 0; k < 32; k++) s += m->q[b * 32 + k];
        m->bsum[b] = s;
    }
}

/* x (IC) -> xu (IC) unsigned bytes (int8 + 128) and xd (IC / 32) fp32 scales */
static void quantize_act(uint8_t *xu, float *xd, const float *x, int IC) {
    for (int b = 0; b < IC / 32; b++) {
        float amax = 0;
        for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(x[b * 32 + k]));
        float d = amax / 127, id = d > 0 ? 1 / d : 0;
        xd[b] = d;
        for (int k = 0; k < 32; k++) xu[b * 32 + k] = (uint8_t)((int)nearbyintf(x[b * 32 + k] * id) + 128);
    }
}

/* out (OC) = sum over blocks of dw * dx * (sum q * xq), xq = xu - 128 */
static void gemv_q8q8(float *out, const uint8_t *xu, const float *xd, const mat *m) {
    const int nb = m->IC / 32;
    #pragma omp parallel for schedule(static)
    for (int o = 0; o < m->OC; o++) {
        const int8_t *q = m->q + (size_t)o * m->IC;
        const uint16_t *d = m->d + (size_t)o * nb;
        const int32_t *bs = m->bsum + (size_t)o * nb;
        float acc = 0;
        int b = 0;
#ifdef HAVE_VNNI
        __m512 a = _mm512_setzero_ps();
        for (; b + 2 <= nb; b += 2) {
            __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(xu + 32 * b), _mm512_loadu_si512(q + 32 * b));
            /* lanes 0-7: block b, 8-15: block b + 1; the offset: 128 * the block's weight sum, over 8 lanes */
            __m512i off = _mm512_inserti32x8(_mm512_set1_epi32(bs[b] * 16), _mm256_set1_epi32(bs[b + 1] * 16), 1);
            __m512 s = _mm512_insertf32x8(_mm512_set1_ps(_cvtsh_ss(d[b]) * xd[b]), _mm256_set1_ps(_cvtsh_ss(d[b + 1]) * xd[b + 1]), 1);
            a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(p, off)), s, a);
        }
        acc = _mm512_reduce_add_ps(a);
#endif
        for (; b < nb; b++) {
            int s = 0;
            for (int k = 0; k < 32; k++) s += q[32 * b + k] * (xu[32 * b + k] - 128);
            acc += s * sk_f16_to_f32(d[b]) * xd[b];
        }
        out[o] = acc;
    }
}

enum { K_BF16, K_Q8, K_Q8Q8, NK };
static const char *const KNAME[NK] = {"bf16 (fp32 activations)", "q8 (fp32 activations)", "q8 x q8 (VNNI)"};

static void pass_one(int k, mat *ms, int nm, const float *x, float *out, uint8_t *xu, float *xd) {
    for (int i = 0; i < nm; i++) {
        const mat *m = &ms[i];
        if (k == K_BF16) sk_linear_forward_bf16(out, x, m->w16, NULL, 1, m->IC, m->OC);
        else if (k == K_Q8) sk_linear_forward_q8(out, x, m->q, m->d, NULL, 1, m->IC, m->OC);
        else { quantize_act(xu, xd, x, m->IC); gemv_q8q8(out, xu, xd, m); }
    }
}

int main(int argc, char **argv) {
    int passes = argc > 1 ? atoi(argv[1]) : 20;
    enum { L = 12 };
    mat ms[7 * L + 1];
    int nm = 0;
    for (int l = 0; l < L; l++) {
        for (int j = 0; j < 4; j++) mat_new(&ms[nm++], 768, 768);
        mat_new(&ms[nm++], 2048, 768); mat_new(&ms[nm++], 2048, 768); mat_new(&ms[nm++], 768, 2048);
    }
    mat_new(&ms[nm++], 32000, 768);
    size_t nw = 0;
    for (int i = 0; i < nm; i++) nw += (size_t)ms[i].OC * ms[i].IC;
    float *x = malloc(2048 * 4), *out = malloc(32000 * 4), *xd = malloc(64 * 4);
    uint8_t *xu = malloc(2048);
    for (int i = 0; i < 2048; i++) x[i] = urand();
    /* check each kernel on the classifier against a double sum */
    mat *c = &ms[nm - 1];
    quantize_act(xu, xd, x, c->IC);
    for (int k = 0; k < NK; k++) {
        pass_one(k, c, 1, x, out, xu, xd);
        double worst = 0;
        for (int o = 0; o < c->OC; o++) {
            double r = 0, mag = 0;
            for (int j = 0; j < c->IC; j++) {
                size_t at = (size_t)o * c->IC + j;
                double w = k == K_BF16 ? sk_bf16_to_f32(c->w16[at]) : c->q[at] * (double)sk_f16_to_f32(c->d[at / 32]);
                double xv = k == K_Q8Q8 ? (xu[j] - 128) * (double)xd[j / 32] : x[j];
                r += w * xv; mag += fabs(w * xv);
            }
            double e = fabs(out[o] - r) / mag;
            worst = e > worst ? e : worst;
        }
        printf("%-26s check: worst |diff| / sum|terms| %.1e%s\n", KNAME[k], worst, worst < 1e-5 ? "" : "  WRONG");
    }
    printf("%d passes of %zu weights (stories110M's matrices), %d threads\n", passes, nw, omp_get_max_threads());
    double best[NK] = {0};
    for (int r = 0; r < 3; r++)                      /* kernels alternated, best of 3 rounds */
        for (int k = 0; k < NK; k++) {
            pass_one(k, ms, nm, x, out, xu, xd);
            double t0 = sk_now();
            for (int p = 0; p < passes; p++) pass_one(k, ms, nm, x, out, xu, xd);
            double dt = (sk_now() - t0) / passes;
            if (!best[k] || dt < best[k]) best[k] = dt;
        }
    const double bytes[NK] = {2.0, 34.0 / 32, 34.0 / 32};
    for (int k = 0; k < NK; k++)
        printf("%-26s %7.2f ms a token  %6.1f tokens/s  %6.1f GB/s of weights  %.2fx bf16\n", KNAME[k], best[k] * 1e3,
               1 / best[k], bytes[k] * nw / best[k] / 1e9, best[K_BF16] / best[k]);
    return 0;
}
