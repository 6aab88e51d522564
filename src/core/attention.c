/* Scaled dot-product attention (PyTorch's contract): descriptor helpers, validation, dropout hash,
 * and the plain materialising reference. The fused tiled kernels are in attention_flash.c.
 *
 *   out[b,h,i,:] = sum_j W[b,h,i,j] v[b,hk,j,:],   hk = h / (H / Hkv)
 *   W = dropout(softmax_j(scale * q[b,h,i,:].k[b,hk,j,:]  (masked: -inf)))
 *
 * A row whose keys are all masked has out = 0, W = 0, lse = +INFINITY (a sentinel that
 * makes exp(s - lse) = 0 everywhere, so the backward pass gives zero gradients there).
 */
#include "skiplm_base.h"
#include "skiplm_attention.h"
#include "core/attention_internal.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

void sk_attn_init_bhld(sk_attn *a, int B, int H, int Lq, int Lk, int D,
                       const float *q, const float *k, const float *v, float *out) {
    memset(a, 0, sizeof *a);
    a->B = B; a->H = H; a->Hkv = H; a->Lq = Lq; a->Lk = Lk; a->D = D;
    a->q = q; a->q_sb = (long)H * Lq * D; a->q_sh = (long)Lq * D; a->q_st = D;
    a->k = k; a->k_sb = (long)H * Lk * D; a->k_sh = (long)Lk * D; a->k_st = D;
    a->v = v; a->v_sb = (long)H * Lk * D; a->v_sh = (long)Lk * D; a->v_st = D;
    a->out = out; a->o_sb = (long)H * Lq * D; a->o_sh = (long)Lq * D; a->o_st = D;
}

int sk_attn_set_mask(sk_attn *a, const uint8_t *mask, int rank, const int *shape) {
    if (!mask) { a->mask = NULL; memset(a->mask_shape, 0, sizeof a->mask_shape); return SK_OK; }
    if (!shape) return sk_error(SK_EINVAL, "attn_mask: shape is NULL");
    int s[4];
    if (rank == 2) { s[0] = 1; s[1] = 1; s[2] = shape[0]; s[3] = shape[1]; }
    else if (rank == 3) { s[0] = shape[0]; s[1] = 1; s[2] = shape[1]; s[3] = shape[2]; }
    else if (rank == 4) { for (int i = 0; i < 4; i++) s[i] = shape[i]; }
    else return sk_error(SK_EINVAL, "attn_mask must have rank 2, 3 or 4, got rank %d", rank);
    for (int i = 0; i < 4; i++)
        if (s[i] < 1) return sk_error(SK_EINVAL, "attn_mask: dimension %d is %d, must be >= 1", i, s[i]);
    a->mask = mask;
    memcpy(a->mask_shape, s, sizeof s);
    return SK_OK;
}

int sk_attn_check(const sk_attn *a) {
    if (!a) return sk_error(SK_EINVAL, "attention: descriptor is NULL");
    if (a->B < 1 || a->H < 1 || a->Hkv < 1 || a->Lq < 1 || a->Lk < 1 || a->D < 1)
        return sk_error(SK_EINVAL, "attention: sizes must be positive, got B=%d H=%d Hkv=%d Lq=%d Lk=%d D=%d",
                        a->B, a->H, a->Hkv, a->Lq, a->Lk, a->D);
    if (a->H % a->Hkv != 0)
        return sk_error(SK_EINVAL, "attention: Hkv=%d (key/value heads) must divide H=%d (query heads)",
                        a->Hkv, a->H);
    if (a->k16 || a->v16) {
        if (!a->k16 || !a->v16 || a->k || a->v)
            return sk_error(SK_EINVAL, "attention: bf16 K/V need both k16 and v16, and k and v NULL");
        if (a->weights || a->training)
            return sk_error(SK_EINVAL, "attention: bf16 K/V (k16, v16) are for inference: no weights, no training");
    } else if (!a->k || !a->v) {
        return sk_error(SK_EINVAL, "attention: q, k, v and out must not be NULL");
    }
    if (!a->q || !a->out)
        return sk_error(SK_EINVAL, "attention: q, k, v and out must not be NULL");
    if (a->q_sb < 0 || a->q_sh < 0 || a->q_st < 0 || a->k_sb < 0 || a->k_sh < 0 || a->k_st < 0 ||
        a->v_sb < 0 || a->v_sh < 0 || a->v_st < 0 || a->o_sb < 0 || a->o_sh < 0 || a->o_st < 0)
        return sk_error(SK_EINVAL, "attention: strides must be non-negative");
    if (a->mask && a->is_causal)
        return sk_error(SK_EINVAL, "Explicit attn_mask should not be set when is_causal=True");
    if (a->mask) {
        const int *s = a->mask_shape;
        int want[4] = {a->B, a->H, a->Lq, a->Lk};
        for (int i = 0; i < 4; i++)
            if (s[i] != 1 && s[i] != want[i])
                return sk_error(SK_EINVAL,
                    "attn_mask shape (%d, %d, %d, %d) does not broadcast to (B, H, Lq, Lk) = (%d, %d, %d, %d)",
                    s[0], s[1], s[2], s[3], want[0], want[1], want[2], want[3]);
    }
    if (!(a->dropout_p >= 0.0f && a->dropout_p < 1.0f))
        return sk_error(SK_EINVAL, "attention: dropout_p must be in [0, 1), got %g", (double)a->dropout_p);
    if (!isfinite(a->scale))
        return sk_error(SK_EINVAL, "attention: scale must be finite, got %g", (double)a->scale);
    return SK_OK;
}

/* ---------------------------------------------------------------- reference */

int sk_attn_forward_ref(const sk_attn *a) {
    int rc = sk_attn_check(a);
    if (rc) return rc;
    if (a->k16) return sk_error(SK_EINVAL, "attention reference: bf16 K/V (k16, v16) are read by sk_attn_forward only");
    sk_attn_plan P;
    sk_attn_plan_init(&P, a);
    const int B = a->B, H = a->H, Lq = a->Lq, Lk = a->Lk, D = a->D;
    double *s = malloc(sizeof(double) * (size_t)Lq * Lk);
    double *acc = malloc(sizeof(double) * (size_t)D);
    if (!s || !acc) { free(s); free(acc); return sk_error(SK_ENOMEM, "attention: out of memory"); }
    if (a->weights) {
        size_t nw = (size_t)B * (a->weights_avg ? 1 : H) * Lq * Lk;
        memset(a->weights, 0, nw * sizeof(float));
    }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int hk = h / P.group;
            const float *qb = a->q + b * a->q_sb + h * a->q_sh;
            const float *kb = a->k + b * a->k_sb + hk * a->k_sh;
            const float *vb = a->v + b * a->v_sb + hk * a->v_sh;
            /* the whole Lq x Lk score matrix of this head */
            for (int i = 0; i < Lq; i++)
                for (int j = 0; j < Lk; j++) {
                    if (!sk_attn_allowed(&P, b, h, i, j)) { s[(size_t)i * Lk + j] = -INFINITY; continue; }
                    double d = 0;
                    for (int t = 0; t < D; t++) d += (double)qb[i * a->q_st + t] * kb[j * a->k_st + t];
                    s[(size_t)i * Lk + j] = d * P.scale;
                }
            for (int i = 0; i < Lq; i++) {
                double *si = s + (size_t)i * Lk, m = -INFINITY, l = 0;
                for (int j = 0; j < Lk; j++) if (si[j] > m) m = si[j];
                float *o = a->out + b * a->o_sb + h * a->o_sh + i * a->o_st;
                float *lse = a->lse ? a->lse + ((size_t)b * H + h) * Lq + i : NULL;
                if (m == -INFINITY) {   /* all keys masked */
                    for (int t = 0; t < D; t++) o[t] = 0;
                    if (lse) *lse = INFINITY;
                    continue;
                }
                for (int j = 0; j < Lk; j++) { si[j] = exp(si[j] - m); l += si[j]; }
                if (lse) *lse = (float)(m + log(l));
                uint64_t rk = sk_attn_rowkey(&P, b, h, i);
                for (int t = 0; t < D; t++) acc[t] = 0;
                for (int j = 0; j < Lk; j++) {
                    double w = si[j] / l;
                    if (P.dropout && !sk_attn_keep(&P, rk, j)) w = 0;
                    w *= P.dropout ? P.inv_keep : 1.0;
                    if (a->weights) {
                        if (a->weights_avg) a->weights[((size_t)b * Lq + i) * Lk + j] += (float)w;
                        else a->weights[(((size_t)b * H + h) * Lq + i) * Lk + j] = (float)w;
                    }
                    for (int t = 0; t < D; t++) acc[t] += w * vb[j * a->v_st + t];
                }
                for (int t = 0; t < D; t++) o[t] = (float)acc[t];
            }
        }
    if (a->weights && a->weights_avg)   /* PyTorch: sum over heads, then / H */
        for (size_t n = (size_t)B * Lq * Lk, t = 0; t < n; t++) a->weights[t] /= (float)H;
    free(s); free(acc);
    return SK_OK;
}

int sk_attn_backward_ref(const sk_attn *a, const float *dout, float *dq, float *dk, float *dv) {
    int rc = sk_attn_check(a);
    if (rc) return rc;
    if (a->k16) return sk_error(SK_EINVAL, "attention backward: bf16 K/V (k16, v16) are forward only");
    if (!dout) return sk_error(SK_EINVAL, "attention backward: dout is NULL");
    sk_attn_plan P;
    sk_attn_plan_init(&P, a);
    const int B = a->B, H = a->H, Hkv = a->Hkv, Lq = a->Lq, Lk = a->Lk, D = a->D;
    double *p = malloc(sizeof(double) * Lk), *dp = malloc(sizeof(double) * Lk);
    double *gq = malloc(sizeof(double) * D);
    double *gk = calloc((size_t)B * Hkv * Lk * D, sizeof(double));
    double *gv = calloc((size_t)B * Hkv * Lk * D, sizeof(double));
    if (!p || !dp || !gq || !gk || !gv) {
        free(p); free(dp); free(gq); free(gk); free(gv);
        return sk_error(SK_ENOMEM, "attention: out of memory");
    }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int hk = h / P.group;
            const float *qb = a->q + b * a->q_sb + h * a->q_sh;
            const float *kb = a->k + b * a->k_sb + hk * a->k_sh;
            const float *vb = a->v + b * a->v_sb + hk * a->v_sh;
            double *gkb = gk + ((size_t)b * Hkv + hk) * Lk * D, *gvb = gv + ((size_t)b * Hkv + hk) * Lk * D;
            for (int i = 0; i < Lq; i++) {
                const float *qi = qb + i * a->q_st;
                const float *go = dout + b * a->o_sb + h * a->o_sh + i * a->o_st;
                double m = -INFINITY, l = 0;
                for (int j = 0; j < Lk; j++) {
                    if (!sk_attn_allowed(&P, b, h, i, j)) { p[j] = -INFINITY; continue; }
                    double d = 0;
                    for (int t = 0; t < D; t++) d += (double)qi[t] * kb[j * a->k_st + t];
                    p[j] = d * P.scale;
                    if (p[j] > m) m = p[j];
                }
                if (m == -INFINITY) continue;     /* fully masked row: no gradient */
                for (int j = 0; j < Lk; j++) { p[j] = exp(p[j] - m); l += p[j]; }
                uint64_t rk = sk_attn_rowkey(&P, b, h, i);
                double sdp = 0;
                for (int j = 0; j < Lk; j++) {
                    p[j] /= l;
                    double z = P.dropout ? (sk_attn_keep(&P, rk, j) ? P.inv_keep : 0.0) : 1.0;
                    double dw = 0;                 /* d loss / d (dropped weight) */
                    for (int t = 0; t < D; t++) dw += (double)go[t] * vb[j * a->v_st + t];
                    for (int t = 0; t < D; t++) gvb[(size_t)j * D + t] += p[j] * z * go[t];
                    dp[j] = dw * z;                /* d loss / d softmax prob */
                    sdp += p[j] * dp[j];
                }
                for (int t = 0; t < D; t++) gq[t] = 0;
                for (int j = 0; j < Lk; j++) {
                    double ds = p[j] * (dp[j] - sdp) * P.scale;
                    for (int t = 0; t < D; t++) {
                        gq[t] += ds * kb[j * a->k_st + t];
                        gkb[(size_t)j * D + t] += ds * qi[t];
                    }
                }
                if (dq) {
                    float *g = dq + b * a->q_sb + h * a->q_sh + i * a->q_st;
                    for (int t = 0; t < D; t++) g[t] += (float)gq[t];
                }
            }
        }
    for (int b = 0; b < B; b++)
        for (int hk = 0; hk < Hkv; hk++)
            for (int j = 0; j < Lk; j++)
                for (int t = 0; t < D; t++) {
                    size_t s = (((size_t)b * Hkv + hk) * Lk + j) * D + t;
                    if (dk) dk[b * a->k_sb + hk * a->k_sh + j * a->k_st + t] += (float)gk[s];
                    if (dv) dv[b * a->v_sb + hk * a->v_sh + j * a->v_st + t] += (float)gv[s];
                }
    free(p); free(dp); free(gq); free(gk); free(gv);
    return SK_OK;
}
