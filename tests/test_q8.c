/* 8-bit weights (q8_0, src/core/quant.c): fp16 scales; quantization error within half a step;
 * the decoding kernel against a double-precision sum over the same quantized weights, and the
 * same bits on 1 and 2 threads; 8-bit decoding bit-equal to fp32 decoding of the dequantized
 * model (the kernel sums x . (q d) in the fp32 kernel's order, src/core/gemm_rows.c) for both families, SLA and routing tables, prefill and batches; quantize -> save -> load
 * equal; the loaders that cannot use a quantized model refuse it; bad quantized files are
 * refused with the file and the tensor named. */
#include "test.h"
#include "test_models.h"
#include "skiplm.h"
#include "core/quant.h"
#include "io/io.h"
#include <omp.h>
#if defined(__F16C__)
#include <immintrin.h>
#endif

static void f16_cases(void) {
    int rt = 1, f16c = 1;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = sk_f16_to_f32((uint16_t)h);
        if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) continue;     /* NaN payloads */
        rt &= sk_f16_from_f32(f) == h;
#if defined(__F16C__)
        float g = _cvtsh_ss((uint16_t)h);
        f16c &= memcmp(&f, &g, 4) == 0;
#endif
    }
    CHECK(rt, "fp16: every non-NaN half converts to float and back unchanged");
#if defined(__F16C__)
    CHECK(f16c, "fp16: the scalar half -> float equals F16C's, bit for bit (the kernels use F16C)");
#else
    (void)f16c;                                /* no F16C in this build: the kernels use the scalar one */
#endif
    CHECK(sk_f16_from_f32(1.0f) == 0x3c00 && sk_f16_from_f32(65504.0f) == 0x7bff && sk_f16_from_f32(65520.0f) == 0x7c00 &&
          sk_f16_from_f32(5.9604645e-8f) == 0x0001 && sk_f16_from_f32(2.9802322e-8f) == 0 &&
          sk_f16_from_f32(1.0f + 1.0f / 2048) == 0x3c00 && sk_f16_from_f32(1.0f + 3.0f / 2048) == 0x3c02,
          "fp16: 1, 65504, overflow to inf, the smallest subnormal, ties to even");
}

static void quantize_cases(void) {
    enum { N = 32 * 64 };
    float *w = malloc(N * sizeof(float)), *r = malloc(N * sizeof(float));
    int8_t q[N]; uint16_t d[N / 32];
    unsigned long long s = 3;
    fill_uniform(w, N, &s);
    for (int b = 0; b < N / 32; b++)            /* blocks of very different scales */
        for (int k = 0; k < 32; k++) w[b * 32 + k] *= (float)pow(10.0, (b % 9) - 6);
    for (int k = 0; k < 32; k++) { w[k] = 0.0f; w[32 + k] = 1e-9f * (k - 16); }   /* zero, below fp16's scales */
    sk_q8_quantize(q, d, w, N);
    sk_q8_dequantize(r, q, d, N);
    int ok = 1, full = 1;
    double worst = 0;
    for (int b = 0; b < N / 32; b++) {
        float ds = sk_f16_to_f32(d[b]);
        int amax = 0;
        for (int k = 0; k < 32; k++) {
            double e = fabs((double)w[b * 32 + k] - (double)r[b * 32 + k]);
            ok &= q[b * 32 + k] >= -127 && r[b * 32 + k] == (float)q[b * 32 + k] * ds;
            ok &= e <= 0.5 * ds * (1 + 1e-6) || (ds == 0 && w[b * 32 + k] == 0);
            if (ds > 0 && e / ds > worst) worst = e / ds;
            amax = abs(q[b * 32 + k]) > amax ? abs(q[b * 32 + k]) : amax;
        }
        if (ds >= 6.103515625e-05f) full &= amax >= 126;      /* a normal fp16 scale: within 2^-10 of max|w| / 127 */
    }
    CHECK(ok && d[0] == 0 && d[1] == 1, "quantize: |w - q d| <= d/2 in every block (worst %.3f d), also in blocks of fp16-subnormal scales; "
          "a zero block has d = 0, a block of 1e-8 the smallest half", worst);
    CHECK(full, "quantize: with a normal fp16 scale, each block's largest weight maps to |q| 126..127 (the range is used)");
    free(w); free(r);
}

/* out = x . (q d) + b against a double sum of the same products */
static void kernel_cases(void) {
    static const int shapes[][2] = {{1, 32}, {7, 64}, {33, 96}, {64, 288}, {50, 1376}, {130, 768}};
    static const int rows[] = {1, 2, 5, 12};
    double worst = 0;
    int ok = 1;
    unsigned long long s = 11;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (size_t j = 0; j < sizeof rows / sizeof rows[0]; j++) {
            int OC = shapes[i][0], IC = shapes[i][1], N = rows[j];
            float *w = malloc(sizeof(float) * OC * IC), *x = malloc(sizeof(float) * N * IC), *b = malloc(sizeof(float) * OC);
            float *out = malloc(sizeof(float) * N * OC);
            int8_t *q = malloc((size_t)OC * IC);
            uint16_t *d = malloc(sizeof(uint16_t) * OC * IC / 32);
            fill_uniform(w, (size_t)OC * IC, &s); fill_uniform(x, (size_t)N * IC, &s); fill_uniform(b, OC, &s);
            sk_q8_quantize(q, d, w, (size_t)OC * IC);
            sk_linear_forward_q8(out, x, q, d, j & 1 ? b : NULL, N, IC, OC);
            for (int n = 0; n < N; n++)
                for (int o = 0; o < OC; o++) {
                    double ref = j & 1 ? b[o] : 0.0, mag = fabs(ref);
                    for (int k = 0; k < IC; k++) {
                        double t = (double)x[n * IC + k] * q[(size_t)o * IC + k] * sk_f16_to_f32(d[((size_t)o * IC + k) / 32]);
                        ref += t; mag += fabs(t);
                    }
                    double e = fabs(out[n * OC + o] - ref) / (mag > 1e-30 ? mag : 1);
                    worst = e > worst ? e : worst;
                    ok &= e <= 4e-7 * sqrt((double)IC / 32 + 1) + 1e-7;
                }
            free(w); free(x); free(b); free(out); free(q); free(d);
        }
    CHECK(ok, "kernel: x . (q d) + b equals the double-precision sum over 24 shapes and 1-12 rows (worst |diff| / sum|terms| %.2e)", worst);

    /* a row gives the same bits alone as in a batch of 1-12 rows (the weights are widened once
     * for several rows, each row summed in the one order) */
    {
        const int OC = 40, IC = 160, NMAX = 12;
        float *w = malloc(sizeof(float) * OC * IC), *x = malloc(sizeof(float) * NMAX * IC);
        float *ob = malloc(sizeof(float) * NMAX * OC), *o1 = malloc(sizeof(float) * OC);
        int8_t *q = malloc((size_t)OC * IC);
        uint16_t *d = malloc(sizeof(uint16_t) * OC * IC / 32);
        fill_uniform(w, (size_t)OC * IC, &s); fill_uniform(x, (size_t)NMAX * IC, &s);
        sk_q8_quantize(q, d, w, (size_t)OC * IC);
        int same = 1;
        for (int N = 1; N <= NMAX; N++) {
            sk_linear_forward_q8(ob, x, q, d, NULL, N, IC, OC);
            for (int n = 0; n < N; n++) {
                sk_linear_forward_q8(o1, x + (size_t)n * IC, q, d, NULL, 1, IC, OC);
                same &= !memcmp(o1, ob + (size_t)n * OC, sizeof(float) * OC);
            }
        }
        CHECK(same, "kernel: each row of a batch of 1-12 rows has the bits it has alone");
        free(w); free(x); free(ob); free(o1); free(q); free(d);
    }

    /* the same bits on 1 and 2 threads, with enough work to fork */
    const int OC = 512, IC = 768, N = 3;
    float *w = malloc(sizeof(float) * OC * IC), *x = malloc(sizeof(float) * N * IC);
    float *o1 = malloc(sizeof(float) * N * OC), *o2 = malloc(sizeof(float) * N * OC);
    int8_t *q = malloc((size_t)OC * IC);
    uint16_t *d = malloc(sizeof(uint16_t) * OC * IC / 32);
    fill_uniform(w, (size_t)OC * IC, &s); fill_uniform(x, (size_t)N * IC, &s);
    int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    sk_q8_quantize(q, d, w, (size_t)OC * IC);
    sk_linear_forward_q8(o1, x, q, d, NULL, N, IC, OC);
    omp_set_num_threads(2);
    int8_t *q2 = malloc((size_t)OC * IC);
    uint16_t *d2 = malloc(sizeof(uint16_t) * OC * IC / 32);
    sk_q8_quantize(q2, d2, w, (size_t)OC * IC);
    sk_linear_forward_q8(o2, x, q, d, NULL, N, IC, OC);
    omp_set_num_threads(nt);
    CHECK(!memcmp(o1, o2, sizeof(float) * N * OC) && !memcmp(q, q2, (size_t)OC * IC) && !memcmp(d, d2, sizeof(uint16_t) * OC * IC / 32),
          "kernel and quantization: the same bits on 1 and 2 threads");
    free(w); free(x); free(o1); free(o2); free(q); free(d); free(q2); free(d2);
}


/* Decode seq: a prompt of P tokens in one call, then one token a call; logits of each call. */
static int decode_all(sk_model *m, sk_kvcache *kv, const int32_t *seq, int T, int P, float *lg, int V) {
    sk_kvcache_reset(kv);
    if (sk_model_decode(m, kv, seq, P, lg)) return -1;
    int r = 1;
    for (int i = P; i < T; i++, r++)
        if (sk_model_decode(m, kv, seq + i, 1, lg + (size_t)r * V)) return -1;
    return r;
}

/* 8-bit decoding of m equals fp32 decoding of its dequantized copy (up to summation order) and
 * differs from fp32 decoding of m by rounding only; the cache's own copy and a quantized
 * model's give the same bits; batches of sequences equal each alone. */
static void decode_case(const char *name, sk_config cfg, int P) {
    sk_model *m = test_model(name, &cfg, 5), *mq = test_model(name, &cfg, 5);
    if (!m || !mq) { sk_model_free(m); sk_model_free(mq); return; }
    const int V = cfg.vocab_size, T = P + 12, R = T - P + 1;
    int32_t seq[256];
    for (int i = 0; i < T; i++) seq[i] = (i * 7 + 3) % V;
    float *l8 = malloc(sizeof(float) * R * V), *lq = malloc(sizeof(float) * R * V), *l32 = malloc(sizeof(float) * R * V),
          *lm = malloc(sizeof(float) * R * V);
    sk_kvcache *k8 = NULL, *kq = NULL, *k32 = NULL, *km = NULL;
    int ok = sk_model_quantize_q8(mq) == 0 && sk_model_q8(mq) && !sk_model_q8(m) &&
             test_kv(&k8, m, T, 1, SK_WEIGHTS_Q8, SK_KV_F32) == 0 && sk_kvcache_get_params(k8).weights == SK_WEIGHTS_Q8 &&
             test_kv(&kq, mq, T, 1, SK_WEIGHTS_F32, SK_KV_F32) == 0 && test_kv(&k32, m, T, 1, SK_WEIGHTS_F32, SK_KV_F32) == 0 &&
             test_kv(&km, mq, T, 1, SK_WEIGHTS_Q8, SK_KV_F32) == 0;
    CHECK(ok, "%s: caches made (%s)", name, ok ? "" : sk_last_error());
    if (ok) {
        /* prompt chunks of more than 12 tokens through the widened GEMM (fp32 activations), as
         * on a CPU without AVX512-VNNI; the int8 prompt kernel is checked below */
        sk_q8_prompt_set_emulate(1);
        int r1 = decode_all(m, k8, seq, T, P, l8, V), r2 = decode_all(mq, kq, seq, T, P, lq, V);
        int r3 = decode_all(m, k32, seq, T, P, l32, V), r4 = decode_all(mq, km, seq, T, P, lm, V);
        double scale = max_abs(lq, (size_t)R * V), dq = max_abs_diff(l8, lq, (size_t)R * V), d32 = max_abs_diff(l8, l32, (size_t)R * V);
        CHECK(r1 == R && r2 == R && r3 == R && r4 == R && !memcmp(l8, lq, sizeof(float) * R * V),
              "%s: 8-bit decoding (prompt %d, then 12 tokens) gives the bits of fp32 decoding of the dequantized model (max diff %.2e, |logits| %.2f)",
              name, P, dq, scale);
        CHECK(d32 > 0 && d32 < 0.1 * scale, "%s: and differs from the fp32 weights' logits by rounding only (%.2e)", name, d32);
        CHECK(!memcmp(l8, lm, sizeof(float) * R * V), "%s: the cache's own 8-bit copy and the quantized model's give the same bits", name);
        sk_q8_prompt_set_emulate(0);
        if (P > 12 && sk_q8_prompt_native()) {
            /* the prompt through vpdpbusd on activations quantized per block: decoding after it
             * moves by the activations' quantization only, the same bits from either copy */
            float *lp = malloc(sizeof(float) * R * V), *lp2 = malloc(sizeof(float) * R * V);
            int a = decode_all(m, k8, seq, T, P, lp, V), c = decode_all(mq, km, seq, T, P, lp2, V);
            double dp = max_abs_diff(lp, lq, (size_t)R * V);
            CHECK(a == R && c == R && !memcmp(lp, lp2, sizeof(float) * R * V) && dp > 0 && dp < 0.1 * scale,
                  "%s: with the prompt through int8 dot products (%s): %.2e from fp32 activations, the same bits from either "
                  "8-bit copy", name, sk_q8_prompt_kernel(), dp);
            free(lp); free(lp2);
        }
        /* a batch: 3 sequences, each a token at its own position, equal each decoded alone */
        sk_kvcache *kb = NULL;
        int seqs[3] = {0, 1, 2};
        int32_t tok[3] = {1, 2, 3};
        float *lb = malloc(sizeof(float) * 3 * V), *la = malloc(sizeof(float) * V);
        int bok = test_kv(&kb, m, T, 3, SK_WEIGHTS_Q8, SK_KV_F32) == 0;
        for (int s = 0; bok && s < 3; s++) bok = sk_model_decode_seq(m, kb, s, seq, 2 + s, la) == 0;
        bok = bok && sk_model_decode_batch(m, kb, seqs, tok, 3, lb) == 0;
        double db = 0;
        for (int s = 0; bok && s < 3; s++) {
            sk_kvcache_reset(k8);
            bok = sk_model_decode(m, k8, seq, 2 + s, la) == 0 && sk_model_decode(m, k8, tok + s, 1, la) == 0;
            double e = max_abs_diff(la, lb + (size_t)s * V, V);
            db = e > db ? e : db;
        }
        CHECK(bok && db == 0, "%s: a batch of 3 sequences gives each the bits it has decoded alone (%.2e)", name, db);
        sk_kvcache_free(kb); free(lb); free(la);
    }
    sk_kvcache_free(k8); sk_kvcache_free(kq); sk_kvcache_free(k32); sk_kvcache_free(km);
    free(l8); free(lq); free(l32); free(lm);
    sk_model_free(m); sk_model_free(mq);
}

/* Decoding one token a call on 1 and 2 threads gives the same logits bit for bit. */
static void threads_case(void) {
    sk_config c;
    sk_config_default(&c);
    c.family = SK_LLAMA; c.n_layer = 2; c.n_head = 4; c.n_kv_head = 2; c.n_embd = 256; c.vocab_size = 300;
    c.block_size = 32; c.bias = 0; c.n_skip_layer = 1; c.n_skip_head = 2;
    sk_model *m = test_model("threads", &c, 9);
    if (!m) return;
    const int V = c.vocab_size, T = 10;
    float *a = malloc(sizeof(float) * T * V), *b = malloc(sizeof(float) * T * V);
    int32_t seq[T];
    for (int i = 0; i < T; i++) seq[i] = (i * 13) % V;
    int nt = omp_get_max_threads(), ra, rb;
    sk_kvcache *kv = NULL;
    omp_set_num_threads(1);
    ra = test_kv(&kv, m, T, 1, SK_WEIGHTS_Q8, SK_KV_F32) == 0 ? decode_all(m, kv, seq, T, 1, a, V) : -1;
    sk_kvcache_free(kv); kv = NULL;
    omp_set_num_threads(2);
    rb = test_kv(&kv, m, T, 1, SK_WEIGHTS_Q8, SK_KV_F32) == 0 ? decode_all(m, kv, seq, T, 1, b, V) : -1;
    omp_set_num_threads(nt);
    CHECK(ra == T && rb == T && !memcmp(a, b, sizeof(float) * T * V), "threads: 8-bit decoding gives the same bits on 1 and 2 threads");
    sk_kvcache_free(kv); free(a); free(b); sk_model_free(m);
}

static int has(const char *s) { return strstr(sk_last_error(), s) != NULL; }

/* quantize -> save -> load: the same 8-bit weights, fp32 values and logits, bit for bit; a
 * second save gives the same bytes; training and export refuse the model. */
static void roundtrip_case(const char *name, sk_config cfg) {
    sk_model *m = test_model(name, &cfg, 21), *l = NULL;
    if (!m) return;
    const char *p1 = test_path("q8a.safetensors"), *p2 = test_path("q8b.safetensors");
    int ok = sk_model_quantize_q8(m) == 0 && sk_model_save(m, p1) == 0 && sk_model_load(&l, p1, NULL) == 0;
    CHECK(ok && sk_model_q8(l), "%s: quantize, save, load (%s)", name, ok ? "" : sk_last_error());
    if (!ok) { sk_model_free(m); sk_model_free(l); return; }
    size_t np = sk_model_num_params(m);
    CHECK(np == sk_model_num_params(l) && !memcmp(sk_model_params(m), sk_model_params(l), np * sizeof(float)),
          "%s: the loaded model's dequantized weights equal the saved ones, bit for bit", name);
    const int V = cfg.vocab_size, T = 8;
    int32_t seq[T];
    for (int i = 0; i < T; i++) seq[i] = (i * 5 + 1) % V;
    float *a = malloc(sizeof(float) * T * V), *b = malloc(sizeof(float) * T * V);
    sk_kvcache *ka = NULL, *kb = NULL;
    int ra = test_kv(&ka, m, T, 1, SK_WEIGHTS_Q8, SK_KV_F32) == 0 ? decode_all(m, ka, seq, T, 2, a, V) : -1;
    int rb = test_kv(&kb, l, T, 1, SK_WEIGHTS_Q8, SK_KV_F32) == 0 ? decode_all(l, kb, seq, T, 2, b, V) : -1;
    CHECK(ra > 0 && ra == rb && !memcmp(a, b, sizeof(float) * ra * V), "%s: and its 8-bit decoding gives the same logits", name);
    size_t n1 = 0, n2 = 0;
    void *f1 = NULL, *f2 = NULL;
    if (sk_model_save(l, p2) == 0) { f1 = test_read(p1, &n1); f2 = test_read(p2, &n2); }
    CHECK(f1 && f2 && n1 == n2 && !memcmp(f1, f2, n1), "%s: saving the loaded model again writes the same %zu bytes", name, n1);
    sk_safetensors st;
    int rs = sk_st_read(p1, &st);
    const sk_st_tensor *t = rs ? NULL : sk_st_find(&st, cfg.family == SK_GPT2 ? "transformer.wte.weight" : "model.embed_tokens.weight");
    const char *qm = rs ? NULL : sk_st_meta(&st, "quantization");
    CHECK(t && t->dtype == SK_I8 && qm && !strcmp(qm, "q8_0") && n1 < np * 2,
          "%s: the file holds int8 matrices, says quantization q8_0, %zu bytes for %zu parameters", name, n1, np);
    if (!rs) sk_st_free(&st);
    sk_trainer *tr = NULL;
    sk_train_cfg tc;
    sk_train_default(&tc);
    CHECK(sk_trainer_new(&tr, l, &tc, NULL, NULL) != 0 && has("8-bit") && !tr, "%s: training refuses it: %s", name, sk_last_error());
    CHECK(sk_model_save_hf(l, test_tmpdir) != 0 && has("8-bit"), "%s: a Hugging Face export refuses it: %s", name, sk_last_error());
    free(a); free(b); free(f1); free(f2);
    sk_kvcache_free(ka); sk_kvcache_free(kb);
    sk_model_free(m); sk_model_free(l);
}

/* The good file rewritten with one change: drop a tensor, replace one's dtype/shape/data, or
 * change a metadata value. */
typedef struct { const char *drop, *retype; sk_dtype dtype; int64_t shape0; const void *data; const char *key, *val; } edit;
static int rewrite(const sk_safetensors *st, const char *out, const edit *e) {
    sk_st_writer *w = sk_st_writer_new();
    int rc = 0;
    for (int i = 0; !rc && i < st->n_meta; i++)
        rc = sk_st_add_meta(w, st->meta_keys[i], e->key && !strcmp(e->key, st->meta_keys[i]) ? e->val : st->meta_vals[i]);
    for (int i = 0; !rc && i < st->n_tensors; i++) {
        const sk_st_tensor *t = &st->tensors[i];
        if (e->drop && !strcmp(t->name, e->drop)) continue;
        if (e->retype && !strcmp(t->name, e->retype)) {
            int64_t shape[8];
            memcpy(shape, t->shape, sizeof shape);
            if (e->shape0) shape[0] = e->shape0;
            rc = sk_st_add(w, t->name, e->dtype, t->ndim, shape, e->data);
        } else {
            rc = sk_st_add(w, t->name, t->dtype, t->ndim, t->shape, st->data + t->offset);
        }
    }
    if (!rc) rc = sk_st_write(w, out);
    sk_st_writer_free(w);
    return rc;
}

static void bad_files(void) {
    sk_config c;
    sk_config_default(&c);
    c.family = SK_LLAMA; c.n_layer = 2; c.n_head = 2; c.n_embd = 64; c.vocab_size = 40; c.block_size = 16; c.bias = 0;
    sk_model *m = test_model("bad files", &c, 4), *l = NULL;
    const char *good = test_path("good.safetensors"), *bad = test_path("bad.safetensors");
    sk_safetensors st;
    if (!m || sk_model_quantize_q8(m) || sk_model_save(m, good) || sk_st_read(good, &st)) {
        CHECK(0, "bad files: the good file: %s", sk_last_error());
        sk_model_free(m);
        return;
    }
    const char *wq = "model.layers.1.mlp.down_proj.weight", *ws = "model.layers.1.mlp.down_proj.weight_scale";
    const sk_st_tensor *ts = sk_st_find(&st, ws), *tq = sk_st_find(&st, wq);
    size_t nd = ts->nbytes / 2;
    uint16_t *sc = malloc(ts->nbytes);
    float *f = calloc(tq->nbytes, sizeof(float));
    memcpy(sc, st.data + ts->offset, ts->nbytes);
    struct { const char *what; edit e; const char *want; } cases[] = {
        {"another quantization", {.key = "quantization", .val = "q4_0"}, "quantization 'q4_0'"},
        {"a missing scale tensor", {.drop = ws}, "is missing"},
        {"a float32 matrix", {.retype = wq, .dtype = SK_F32, .data = f}, "is not int8"},
        {"float32 scales", {.retype = ws, .dtype = SK_F32, .data = f}, "must be float16"},
        {"scales of the wrong shape", {.retype = ws, .dtype = SK_F16, .shape0 = 1, .data = sc}, "must be float16 of shape"},
        {"a NaN scale", {.retype = ws, .dtype = SK_F16, .data = sc}, "non-finite scale"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (i + 1 == sizeof cases / sizeof cases[0]) sc[nd - 1] = 0x7e00;
        int wrote = rewrite(&st, bad, &cases[i].e) == 0;
        int rc = wrote ? sk_model_load(&l, bad, NULL) : 0;
        CHECK(wrote && rc != 0 && !l && has(cases[i].want) && has(bad), "bad files: %s is refused: %s", cases[i].what, sk_last_error());
        sk_model_free(l); l = NULL;
    }
    size_t n;
    char *img = test_read(good, &n);
    int bad_trunc = 1;
    for (size_t cut = n / 3; img && cut < n; cut += n / 3) {
        test_write(bad, img, cut);
        bad_trunc &= sk_model_load(&l, bad, NULL) != 0 && !l && has(bad);
        sk_model_free(l); l = NULL;
    }
    CHECK(img && bad_trunc, "bad files: truncated quantized files are refused: %s", sk_last_error());
    /* n_embd not a multiple of 32: no 8-bit weights */
    c.n_embd = 48; c.n_head = 2;
    sk_model *o = test_model("n_embd 48", &c, 4);
    sk_kvcache *kv = NULL;
    CHECK(o && sk_model_quantize_q8(o) != 0 && has("multiples of 32") && !sk_model_q8(o) &&
          test_kv(&kv, o, 8, 1, SK_WEIGHTS_Q8, SK_KV_F32) != 0 && !kv,
          "n_embd 48: quantization and an 8-bit cache are refused: %s", sk_last_error());
    sk_model_free(o);
    free(img); free(sc); free(f);
    sk_st_free(&st);
    sk_model_free(m);
}

int main(void) {
    if (test_tmp_open("skiplm_q8")) { CHECK(0, "temp folder"); return 1; }
    f16_cases();
    quantize_cases();
    kernel_cases();
    threads_case();
    sk_config c;
    sk_config_default(&c);
    c.n_layer = 4; c.n_head = 4; c.n_embd = 64; c.vocab_size = 70; c.block_size = 160;
    decode_case("gpt2 baseline", c, 5);
    c.n_skip_layer = 2; c.n_skip_head = 2;
    decode_case("gpt2 sla 2/2, prompt of 70 (prefill widens the rows)", c, 70);
    c.n_skip_layer = 0; c.n_skip_head = 0; c.n_layer = 6;
    sk_config_set(&c, "routing", "3-5:1=-3;4-5:3=-1;5:0=@1");
    decode_case("gpt2 multi-source routing", c, 20);
    roundtrip_case("gpt2 routing", c);
    sk_config_default(&c);
    c.family = SK_LLAMA; c.n_layer = 4; c.n_head = 4; c.n_kv_head = 2; c.n_embd = 64; c.vocab_size = 70;
    c.block_size = 64; c.bias = 0; c.norm_eps = 1e-6f; c.n_skip_layer = 3; c.n_skip_head = 2;
    decode_case("llama gqa sla 3/2", c, 9);
    c.untied_head = 1; c.qkv_bias = 1;
    decode_case("llama untied head, qkv bias", c, 30);
    roundtrip_case("llama untied head, qkv bias", c);
    c.untied_head = 0; c.qkv_bias = 0; c.sinusoidal = 1; c.relu = 1;
    decode_case("llama sinusoidal relu sla", c, 6);
    bad_files();
    test_tmp_close();
    TEST_END();
}
