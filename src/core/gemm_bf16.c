/* bf16 GEMMs with fp32 accumulation: oneDNN's matmul primitive, cached per shape, or the
 * widening fallback (gemm_bf16.h). */
#include "core/gemm_bf16.h"
#include "core/ops.h"
#include "skiplm_base.h"
#include "skiplm_model.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef SK_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

#define FALLBACK_IMPL "fallback: fp32 sgemm on widened operands"
#define SK_PAR(work) ((size_t)(work) >= 32768)

/* ------------------------------------------------------------ the fallback */

/* rows x cols of a bf16 matrix with row stride ld, widened into a packed fp32 one */
static void widen(float *dst, const uint16_t *src, int rows, int cols, int ld) {
    #pragma omp parallel for schedule(static) if(SK_PAR((size_t)rows * cols))
    for (int r = 0; r < rows; r++) {
        const uint16_t *s = src + (size_t)r * ld;
        float *d = dst + (size_t)r * cols;
        for (int c = 0; c < cols; c++) d[c] = sk_bf16_to_f32(s[c]);
    }
}

/* Products of bf16 values are exact in fp32 (8 + 8 significant bits), so sk_gemm on the widened
 * operands computes what a bf16 GEMM with fp32 accumulation does, in its own summation order. */
static int gemm_fallback(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B,
                         int ldb, const float *bias, int acc, float *C, uint16_t *C16, int ldc) {
    const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    float *Af = malloc(sizeof(float) * ((size_t)ar * ac + (size_t)br * bc + (C16 ? (size_t)M * N : 0)));
    if (!Af) return sk_error(SK_ENOMEM, "bf16 GEMM fallback: out of memory for %d x %d x %d", M, N, K);
    float *Bf = Af + (size_t)ar * ac, *Cf = C16 ? Bf + (size_t)br * bc : C;
    const int ldcf = C16 ? N : ldc;
    widen(Af, A, ar, ac, lda);
    widen(Bf, B, br, bc, ldb);
    float beta = acc ? 1.0f : 0.0f;
    if (bias) {
        #pragma omp parallel for schedule(static) if(SK_PAR((size_t)M * N))
        for (int i = 0; i < M; i++) {
            float *c = Cf + (size_t)i * ldcf;
            for (int j = 0; j < N; j++) c[j] = acc ? c[j] + bias[j] : bias[j];
        }
        beta = 1.0f;
    }
    if (K > 0) sk_gemm(ta, tb, M, N, K, 1.0f, Af, ac, Bf, bc, beta, Cf, ldcf);
    else if (!bias && !acc)
        for (int i = 0; i < M; i++) memset(Cf + (size_t)i * ldcf, 0, sizeof(float) * N);
    if (C16)
        for (int i = 0; i < M; i++) sk_bf16_from_f32_n(C16 + (size_t)i * ldc, Cf + (size_t)i * N, (size_t)N);
    free(Af);
    return SK_OK;
}

/* --------------------------------------------------------------- oneDNN */

#ifdef SK_HAVE_DNNL
enum { K_TA, K_TB, K_M, K_N, K_K, K_LDA, K_LDB, K_BIAS, K_ACC, K_C16, K_LDC, K_N_KEY };

typedef struct {
    int key[K_N_KEY];
    dnnl_primitive_t prim;              /* NULL: oneDNN has none for this CPU; the fallback runs */
    dnnl_memory_desc_t a, b, bias, c, scratch;
    size_t scratch_bytes;
    char impl[64];
} entry;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t g_eng;
static int g_ok;
static entry **g_cache;                 /* entries never move: a pointer stays valid */
static int g_n, g_cap;

/* Each calling thread's stream and scratchpad, freed when the thread ends. */
typedef struct { dnnl_stream_t stream; void *scratch; size_t cap; } thread_state;
static pthread_key_t g_key;

static void thread_state_free(void *p) {
    thread_state *t = p;
    if (t->stream) dnnl_stream_destroy(t->stream);
    free(t->scratch);
    free(t);
}

static void engine_init(void) {
    g_ok = dnnl_engine_create(&g_eng, dnnl_cpu, 0) == dnnl_success &&
           pthread_key_create(&g_key, thread_state_free) == 0;
}

static void key_of(int *k, int ta, int tb, int M, int N, int K, int lda, int ldb, int bias, int acc, int c16, int ldc) {
    k[K_TA] = ta; k[K_TB] = tb; k[K_M] = M; k[K_N] = N; k[K_K] = K; k[K_LDA] = lda; k[K_LDB] = ldb;
    k[K_BIAS] = bias; k[K_ACC] = acc; k[K_C16] = c16; k[K_LDC] = ldc;
}

/* The primitive for a key: made once (under the lock; making one takes ~0.2-10 ms). */
static entry *lookup(const int *k) {
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_n; i++)
        if (!memcmp(g_cache[i]->key, k, sizeof g_cache[i]->key)) { entry *e = g_cache[i]; pthread_mutex_unlock(&g_mu); return e; }
    entry *e = calloc(1, sizeof *e);
    if (e && g_n == g_cap) {
        const int cap = g_cap ? 2 * g_cap : 64;
        entry **grown = realloc(g_cache, sizeof(entry *) * (size_t)cap);
        if (grown) { g_cache = grown; g_cap = cap; }
    }
    if (!e || g_n == g_cap) {
        pthread_mutex_unlock(&g_mu);
        free(e);
        return NULL;
    }
    memcpy(e->key, k, sizeof e->key);
    const int M = k[K_M], N = k[K_N], K = k[K_K];
    dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N}, biasd = {1, N};
    dnnl_dims_t as = {k[K_TA] ? 1 : k[K_LDA], k[K_TA] ? k[K_LDA] : 1};
    dnnl_dims_t bs = {k[K_TB] ? 1 : k[K_LDB], k[K_TB] ? k[K_LDB] : 1};
    dnnl_dims_t cs = {k[K_LDC], 1}, biass = {N, 1};
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_matmul_desc_t md;
    int ok = dnnl_memory_desc_init_by_strides(&e->a, 2, ad, dnnl_bf16, as) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&e->b, 2, bd, dnnl_bf16, bs) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&e->c, 2, cd, k[K_C16] ? dnnl_bf16 : dnnl_f32, cs) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&e->bias, 2, biasd, dnnl_f32, biass) == dnnl_success &&
             dnnl_matmul_desc_init(&md, &e->a, &e->b, k[K_BIAS] ? &e->bias : NULL, &e->c) == dnnl_success &&
             dnnl_primitive_attr_create(&attr) == dnnl_success &&
             dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
    if (ok && k[K_ACC])
        ok = dnnl_post_ops_create(&po) == dnnl_success && dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    /* no bf16 matmul for this CPU (oneDNN 2.6 below AVX-512): the fallback, decided once */
    if (ok && dnnl_primitive_desc_create(&pd, &md, attr, g_eng, NULL) == dnnl_success) {
        const char *impl = NULL;
        const dnnl_memory_desc_t *sm = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        if (sm) { e->scratch = *sm; e->scratch_bytes = dnnl_memory_desc_get_size(sm); }
        if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
            snprintf(e->impl, sizeof e->impl, "%s", impl);
        if (dnnl_primitive_create(&e->prim, pd) != dnnl_success) e->prim = NULL;
    }
    if (!e->prim) snprintf(e->impl, sizeof e->impl, FALLBACK_IMPL);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    g_cache[g_n++] = e;
    pthread_mutex_unlock(&g_mu);
    return e;
}

static int run_prim(const entry *e, const uint16_t *A, const uint16_t *B, const float *bias, void *C) {
    thread_state *t = pthread_getspecific(g_key);
    if (!t) {
        if (!(t = calloc(1, sizeof *t)) || pthread_setspecific(g_key, t)) {
            free(t);
            return sk_error(SK_ENOMEM, "bf16 GEMM: out of memory");
        }
        if (dnnl_stream_create(&t->stream, g_eng, dnnl_stream_default_flags) != dnnl_success) t->stream = NULL;
    }
    if (!t->stream) return sk_error(SK_ENOMEM, "bf16 GEMM: oneDNN could not make a stream");
    if (e->scratch_bytes > t->cap) {
        free(t->scratch);
        t->cap = 0;
        if (!(t->scratch = aligned_alloc(64, (e->scratch_bytes + 63) / 64 * 64)))
            return sk_error(SK_ENOMEM, "bf16 GEMM: out of memory for %zu bytes of oneDNN scratchpad", e->scratch_bytes);
        t->cap = e->scratch_bytes;
    }
    dnnl_memory_t mem[5] = {0};
    dnnl_exec_arg_t args[5];
    int n = 0, ok = 1;
#define ARG(kind, md, ptr) do { if (ok && dnnl_memory_create(&mem[n], &(md), g_eng, (void *)(ptr)) == dnnl_success) { \
        args[n].arg = (kind); args[n].memory = mem[n]; n++; } else ok = 0; } while (0)
    ARG(DNNL_ARG_SRC, e->a, A);
    ARG(DNNL_ARG_WEIGHTS, e->b, B);
    ARG(DNNL_ARG_DST, e->c, C);
    if (bias) ARG(DNNL_ARG_BIAS, e->bias, bias);
    if (e->scratch_bytes) ARG(DNNL_ARG_SCRATCHPAD, e->scratch, t->scratch);
#undef ARG
    if (ok) ok = dnnl_primitive_execute(e->prim, t->stream, n, args) == dnnl_success &&
                 dnnl_stream_wait(t->stream) == dnnl_success;
    for (int i = 0; i < n; i++) dnnl_memory_destroy(mem[i]);
    return ok ? SK_OK : sk_error(SK_EINVAL, "bf16 GEMM: oneDNN's matmul failed (%s)", e->impl);
}
#endif

/* ------------------------------------------------------------ entry points */

int sk_gemm_bf16(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                 const float *bias, int acc, float *C, uint16_t *C16, int ldc) {
    if (M <= 0 || N <= 0) return SK_OK;
    if ((!C) == (!C16) || (C16 && acc) || K < 0)
        return sk_error(SK_EINVAL, "bf16 GEMM: give an fp32 C (accumulating or not) or a bf16 C (not accumulating)");
#ifdef SK_HAVE_DNNL
    if (K > 0) {
        pthread_once(&g_once, engine_init);
        if (g_ok) {
            int k[K_N_KEY];
            key_of(k, ta, tb, M, N, K, lda, ldb, bias != NULL, acc, C16 != NULL, ldc);
            const entry *e = lookup(k);
            if (!e) return sk_error(SK_ENOMEM, "bf16 GEMM: out of memory for the primitive cache");
            if (e->prim) return run_prim(e, A, B, bias, C16 ? (void *)C16 : (void *)C);
        }
    }
#endif
    return gemm_fallback(ta, tb, M, N, K, A, lda, B, ldb, bias, acc, C, C16, ldc);
}

int sk_gemm_bf16_cached(void) {
#ifdef SK_HAVE_DNNL
    pthread_mutex_lock(&g_mu);
    int n = g_n;
    pthread_mutex_unlock(&g_mu);
    return n;
#else
    return 0;
#endif
}

const char *sk_gemm_bf16_impl(int ta, int tb, int M, int N, int K, int lda, int ldb, int has_bias, int acc, int c16, int ldc) {
#ifdef SK_HAVE_DNNL
    pthread_once(&g_once, engine_init);
    if (g_ok && K > 0 && M > 0 && N > 0) {
        int k[K_N_KEY];
        key_of(k, ta, tb, M, N, K, lda, ldb, has_bias, acc, c16, ldc);
        const entry *e = lookup(k);
        if (e) return e->impl;
    }
#else
    (void)ta; (void)tb; (void)M; (void)N; (void)K; (void)lda; (void)ldb; (void)has_bias; (void)acc; (void)c16; (void)ldc;
#endif
    return FALLBACK_IMPL;
}

/* ------------------------------------------------------------ the public queries */

int sk_bf16_available(void) {
#ifdef SK_HAVE_DNNL
    pthread_once(&g_once, engine_init);
    return g_ok;
#else
    return 0;
#endif
}

int sk_bf16_native(void) {
#ifdef SK_HAVE_DNNL
    if (!sk_bf16_available()) return 0;
    const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), bf16 = (unsigned)dnnl_cpu_isa_avx512_core_bf16;
    return (isa & bf16) == bf16;        /* avx512_core_bf16, or AMX (a superset) */
#else
    return 0;
#endif
}

const char *sk_bf16_isa(void) {
#ifdef SK_HAVE_DNNL
    if (!sk_bf16_available()) return "none";
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
    }
#else
    return "none (built without oneDNN)";
#endif
}

const char *sk_bf16_version(void) {
#ifdef SK_HAVE_DNNL
    static _Thread_local char buf[32];
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, sizeof buf, "oneDNN %d.%d.%d", v->major, v->minor, v->patch);
    return buf;
#else
    return "none";
#endif
}

double sk_bf16_gemm_rate(int M, int N, int K, char *impl, size_t n_impl) {
    if (impl && n_impl) snprintf(impl, n_impl, "%s", sk_gemm_bf16_impl(0, 1, M, N, K, K, K, 0, 0, 0, N));
    uint16_t *A = malloc(sizeof(uint16_t) * (size_t)M * K), *B = malloc(sizeof(uint16_t) * (size_t)N * K);
    float *C = malloc(sizeof(float) * (size_t)M * N);
    double best = 1e30;
    if (A && B && C) {
        for (size_t i = 0; i < (size_t)M * K; i++) A[i] = sk_bf16_from_f32((float)((i * 7) % 13) * 0.01f);
        for (size_t i = 0; i < (size_t)N * K; i++) B[i] = sk_bf16_from_f32((float)((i * 5) % 11) * 0.01f);
        for (int r = 0; r < 5; r++) {      /* the first makes the primitive and warms the caches */
            double t0 = sk_now();
            if (sk_gemm_bf16(0, 1, M, N, K, A, K, B, K, NULL, 0, C, NULL, N)) { best = 1e30; break; }
            double t = sk_now() - t0;
            if (r && t < best) best = t;
        }
    }
    free(A); free(B); free(C);
    return best < 1e30 ? 2.0 * M * N * K / best / 1e9 : 0.0;
}
