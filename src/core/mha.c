/* Multi-head attention module (nn.MultiheadAttention semantics, batch_first), with
 * grouped-query attention:
 *   Q = q_in Wq^T + bq   (B, Lq, H*D)      K = kv_in Wk^T + bk   (B, Lk, Hkv*D)
 *   V = kv_in Wv^T + bv  (B, Lk, Hkv*D)    att = SDPA(Q, K, V)   (B, Lq, H*D)
 *   out = att Wo^T + bo  (B, Lq, E)
 * Q/K/V/att are stored token-major, and the attention kernels read the heads as strided
 * views of them (no transposes). The projections use cblas_sgemm when built with BLAS. */
#include "skiplm_base.h"
#include "skiplm_attention.h"
#include <stdlib.h>
#include <string.h>
#ifdef SK_HAVE_BLAS
#include <cblas.h>
#endif

/* Y (N x O) = X (N x E) W^T (W: O x E) + bias */
static void linear_fwd(float *Y, const float *X, const float *W, const float *bias, int N, int O, int E) {
#ifdef SK_HAVE_BLAS
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, O, E, 1.0f, X, E, W, E, 0.0f, Y, O);
#else
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            float s = 0.0f;
            for (int e = 0; e < E; e++) s += X[(size_t)n * E + e] * W[(size_t)o * E + e];
            Y[(size_t)n * O + o] = s;
        }
#endif
    if (bias)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < O; o++) Y[(size_t)n * O + o] += bias[o];
}

/* dW (O x E) += dY^T X;  db += colsum dY;  dX (N x E) += dY W  (each optional) */
static void linear_bwd(float *dX, float *dW, float *db, const float *dY, const float *X,
                       const float *W, int N, int O, int E) {
#ifdef SK_HAVE_BLAS
    if (dW) cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, O, E, N, 1.0f, dY, O, X, E, 1.0f, dW, E);
    if (dX) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, E, O, 1.0f, dY, O, W, E, 1.0f, dX, E);
#else
    if (dW) {
        #pragma omp parallel for schedule(static)
        for (int o = 0; o < O; o++)
            for (int n = 0; n < N; n++) {
                float g = dY[(size_t)n * O + o];
                for (int e = 0; e < E; e++) dW[(size_t)o * E + e] += g * X[(size_t)n * E + e];
            }
    }
    if (dX) {
        #pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < O; o++) {
                float g = dY[(size_t)n * O + o];
                for (int e = 0; e < E; e++) dX[(size_t)n * E + e] += g * W[(size_t)o * E + e];
            }
    }
#endif
    if (db)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < O; o++) db[o] += dY[(size_t)n * O + o];
}

static int mha_check(const sk_mha *m, int B, int Lq, int Lk) {
    if (!m) return sk_error(SK_EINVAL, "mha: module is NULL");
    if (m->embed_dim < 1 || m->n_head < 1 || m->n_kv_head < 1 || m->head_dim < 1)
        return sk_error(SK_EINVAL, "mha: embed_dim=%d n_head=%d n_kv_head=%d head_dim=%d must be positive",
                        m->embed_dim, m->n_head, m->n_kv_head, m->head_dim);
    if (m->n_head % m->n_kv_head != 0)
        return sk_error(SK_EINVAL, "mha: n_kv_head=%d must divide n_head=%d", m->n_kv_head, m->n_head);
    if (!m->wq || !m->wk || !m->wv || !m->wo)
        return sk_error(SK_EINVAL, "mha: wq, wk, wv and wo are required");
    if (B < 1 || Lq < 1 || Lk < 1)
        return sk_error(SK_EINVAL, "mha: B=%d Lq=%d Lk=%d must be positive", B, Lq, Lk);
    return SK_OK;
}

size_t sk_mha_cache_floats(const sk_mha *m, int B, int Lq, int Lk) {
    size_t qd = (size_t)m->n_head * m->head_dim, kd = (size_t)m->n_kv_head * m->head_dim;
    return 2 * (size_t)B * Lq * qd + 2 * (size_t)B * Lk * kd + (size_t)B * m->n_head * Lq;
}

/* Carve the cache and point the attention descriptor at it. */
static void mha_views(const sk_mha *m, sk_attn *a, int B, int Lq, int Lk, float *cache, sk_mha_cache *c) {
    const int H = m->n_head, Hkv = m->n_kv_head, D = m->head_dim;
    const long qd = (long)H * D, kd = (long)Hkv * D;
    c->q = cache;
    c->k = c->q + (size_t)B * Lq * qd;
    c->v = c->k + (size_t)B * Lk * kd;
    c->att = c->v + (size_t)B * Lk * kd;
    c->lse = c->att + (size_t)B * Lq * qd;
    a->B = B; a->H = H; a->Hkv = Hkv; a->Lq = Lq; a->Lk = Lk; a->D = D;
    a->q = c->q; a->q_sb = Lq * qd; a->q_sh = D; a->q_st = qd;
    a->k = c->k; a->k_sb = Lk * kd; a->k_sh = D; a->k_st = kd;
    a->v = c->v; a->v_sb = Lk * kd; a->v_sh = D; a->v_st = kd;
    a->out = c->att; a->o_sb = Lq * qd; a->o_sh = D; a->o_st = qd;
    a->lse = c->lse;
}

int sk_mha_forward(const sk_mha *m, sk_attn *attn, int B, int Lq, int Lk,
                   const float *q_in, const float *kv_in, float *out, float *cache) {
    int rc = mha_check(m, B, Lq, Lk);
    if (rc) return rc;
    if (!attn || !q_in || !kv_in || !out || !cache)
        return sk_error(SK_EINVAL, "mha forward: attn, q_in, kv_in, out and cache must not be NULL");
    const int E = m->embed_dim, qd = m->n_head * m->head_dim, kd = m->n_kv_head * m->head_dim;
    sk_mha_cache c;
    mha_views(m, attn, B, Lq, Lk, cache, &c);
    if ((rc = sk_attn_check(attn))) return rc;
    linear_fwd(c.q, q_in, m->wq, m->bq, B * Lq, qd, E);
    linear_fwd(c.k, kv_in, m->wk, m->bk, B * Lk, kd, E);
    linear_fwd(c.v, kv_in, m->wv, m->bv, B * Lk, kd, E);
    if ((rc = sk_attn_forward(attn))) return rc;
    linear_fwd(out, c.att, m->wo, m->bo, B * Lq, E, qd);
    return SK_OK;
}

int sk_mha_backward(const sk_mha *m, const sk_attn *attn, int B, int Lq, int Lk,
                    const float *q_in, const float *kv_in, const float *cache,
                    const float *dout, float *dq_in, float *dkv_in, sk_mha_grads *g) {
    int rc = mha_check(m, B, Lq, Lk);
    if (rc) return rc;
    if (!attn || !q_in || !kv_in || !cache || !dout || !g || !g->wq || !g->wk || !g->wv || !g->wo)
        return sk_error(SK_EINVAL, "mha backward: attn, inputs, cache, dout and weight grads must not be NULL");
    const int E = m->embed_dim, qd = m->n_head * m->head_dim, kd = m->n_kv_head * m->head_dim;
    sk_attn a = *attn;
    sk_mha_cache c;
    mha_views(m, &a, B, Lq, Lk, (float *)cache, &c);
    a.weights = NULL;
    const size_t nq = (size_t)B * Lq * qd, nk = (size_t)B * Lk * kd;
    float *datt = calloc(2 * nq + 2 * nk, sizeof(float));
    if (!datt) return sk_error(SK_ENOMEM, "mha backward: out of memory");
    float *dQ = datt + nq, *dK = dQ + nq, *dV = dK + nk;
    /* out = att Wo^T + bo */
    linear_bwd(datt, g->wo, m->bo ? g->bo : NULL, dout, c.att, m->wo, B * Lq, E, qd);
    if ((rc = sk_attn_backward(&a, datt, dQ, dK, dV))) { free(datt); return rc; }
    linear_bwd(dq_in, g->wq, m->bq ? g->bq : NULL, dQ, q_in, m->wq, B * Lq, qd, E);
    linear_bwd(dkv_in, g->wk, m->bk ? g->bk : NULL, dK, kv_in, m->wk, B * Lk, kd, E);
    linear_bwd(dkv_in, g->wv, m->bv ? g->bv : NULL, dV, kv_in, m->wv, B * Lk, kd, E);
    free(datt);
    return SK_OK;
}
