/* Hardening: every reader refuses damaged input with a message naming the file and the
 * problem (truncated, bit-flipped and wrong-dtype weights, shards, tokenizer files, config
 * values), memory requests over the limit are refused up front with their byte count,
 * stale temp files of dead writers are removed, and regressions of fuzzer findings. */
#include "base/fileio.h"
#include "skiplm.h"
#include "test.h"

#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int has(const char *needle1, const char *needle2) {
    const char *m = sk_last_error();
    return strstr(m, needle1) && (!needle2 || strstr(m, needle2));
}

static sk_config tiny_cfg(void) {
    sk_config c;
    sk_config_default(&c);
    c.n_layer = 1; c.n_head = 2; c.n_embd = 8; c.block_size = 8; c.vocab_size = 16;
    return c;
}

/* ------------------------------------------------------------ weights */
static void test_weights(void) {
    sk_config c = tiny_cfg();
    sk_model *m;
    sk_model_new(&m, &c, 1);
    const char *good = test_path("good.safetensors");
    CHECK(sk_model_save(m, good) == 0, "save a tiny model");
    size_t n;
    uint8_t *img = test_read(good, &n);

    /* truncated at many points: every one refused, naming the file */
    int all = 1;
    for (size_t cut = 0; cut < n; cut += 97) {
        test_write(test_path("trunc.safetensors"), img, cut);
        sk_model *x;
        int rc = sk_model_load(&x, test_path("trunc.safetensors"), NULL);
        if (rc == 0 || !has(test_path("trunc.safetensors"), NULL)) { all = 0; printf("  cut %zu: rc %d: %s\n", cut, rc, sk_last_error()); }
        if (rc == 0) sk_model_free(x);
    }
    CHECK(all, "weights truncated at every 97th byte: refused with the file name");
    test_write(test_path("trunc.safetensors"), img, n - 4);
    sk_model *x;
    sk_model_load(&x, test_path("trunc.safetensors"), NULL);
    printf("  e.g. %s\n", sk_last_error());

    /* bit flips in the header: refused or (if the flip lands in a harmless place such as
     * a padding space turned into another space-like byte) loaded; never a crash */
    uint64_t hl; memcpy(&hl, img, 8);
    int refused = 0, tried = 0;
    for (size_t i = 0; i < 8 + hl; i += 7) {
        uint8_t *cp = malloc(n); memcpy(cp, img, n);
        cp[i] ^= (uint8_t)(1u << (i % 8));
        test_write(test_path("flip.safetensors"), cp, n);
        free(cp);
        tried++;
        if (sk_model_load(&x, test_path("flip.safetensors"), NULL)) refused += has(test_path("flip.safetensors"), NULL);
        else sk_model_free(x);
    }
    CHECK(refused > tried * 3 / 4, "header bit flips: %d of %d refused with the file name", refused, tried);
    /* a flip in the data section that makes a NaN: refused naming the tensor */
    {
        uint8_t *cp = malloc(n); memcpy(cp, img, n);
        memset(cp + 8 + hl, 0xff, 4);   /* first float of the first tensor: 0xffffffff = NaN */
        test_write(test_path("nan.safetensors"), cp, n);
        free(cp);
        int rc = sk_model_load(&x, test_path("nan.safetensors"), NULL);
        CHECK(rc == SK_ENUM && has("nan.safetensors", "non-finite"), "NaN in the weights refused: %s", sk_last_error());
    }

    /* wrong dtypes: F16/BF16/F64 are converted to F32; integer dtypes are refused */
    int nt;
    const sk_tensor *ts = sk_model_tensors(m, &nt);
    const float *p = sk_model_params(m);
    for (int variant = 0; variant < 3; variant++) {
        sk_st_writer *w = sk_st_writer_new();
        char nv[32];
        snprintf(nv, sizeof nv, "%d", c.n_layer); sk_st_add_meta(w, "n_layer", nv);
        snprintf(nv, sizeof nv, "%d", c.n_head); sk_st_add_meta(w, "n_head", nv);
        snprintf(nv, sizeof nv, "%d", c.n_embd); sk_st_add_meta(w, "n_embd", nv);
        snprintf(nv, sizeof nv, "%d", c.block_size); sk_st_add_meta(w, "block_size", nv);
        snprintf(nv, sizeof nv, "%d", c.vocab_size); sk_st_add_meta(w, "vocab_size", nv);
        void **bufs = calloc(nt, sizeof *bufs);
        for (int i = 0; i < nt; i++) {
            const float *src = p + ts[i].offset;
            if (variant == 0) {            /* all F64 */
                double *d = malloc(ts[i].numel * 8);
                for (size_t k = 0; k < ts[i].numel; k++) d[k] = src[k];
                bufs[i] = d;
                sk_st_add(w, ts[i].name, SK_F64, ts[i].ndim, ts[i].shape, d);
            } else if (variant == 1) {     /* all BF16 (truncated mantissa) */
                uint16_t *d = malloc(ts[i].numel * 2);
                for (size_t k = 0; k < ts[i].numel; k++) { uint32_t b; memcpy(&b, &src[k], 4); d[k] = (uint16_t)(b >> 16); }
                bufs[i] = d;
                sk_st_add(w, ts[i].name, SK_BF16, ts[i].ndim, ts[i].shape, d);
            } else {                       /* one tensor I32 */
                int32_t *d = malloc(ts[i].numel * 4);
                for (size_t k = 0; k < ts[i].numel; k++) d[k] = (int32_t)(src[k] * 1000);
                bufs[i] = d;
                sk_st_add(w, ts[i].name, i == 1 ? SK_I32 : SK_F32, ts[i].ndim, ts[i].shape, i == 1 ? (void *)d : (void *)src);
            }
        }
        const char *path = test_path("dtype.safetensors");
        sk_st_write(w, path);
        sk_st_writer_free(w);
        for (int i = 0; i < nt; i++) free(bufs[i]);
        free(bufs);
        int rc = sk_model_load(&x, path, NULL);
        if (variant == 0) {
            CHECK(rc == 0 && max_abs_diff(sk_model_params(x), p, sk_model_num_params(m)) == 0,
                  "F64 weights are converted to F32 exactly (%s)", rc ? sk_last_error() : "ok");
        } else if (variant == 1) {
            double d = rc ? 1 : max_abs_diff(sk_model_params(x), p, sk_model_num_params(m));
            CHECK(rc == 0 && d < 0.01, "BF16 weights are converted to F32 (max diff %.2e)", d);
        } else {
            CHECK(rc == SK_EFORMAT && has(path, "dtype I32") && has(ts[1].name, "expected a floating-point dtype"),
                  "I32 weights refused: %s", sk_last_error());
        }
        if (rc == 0) sk_model_free(x);
    }
    free(img);
    sk_model_free(m);
}

/* ------------------------------------------------------------- shards */
static void test_shards(void) {
    int32_t ids[100];
    for (int i = 0; i < 100; i++) ids[i] = i * 3;
    const char *good = test_path("good.bin");
    sk_shard_write(good, ids, 100);
    size_t n;
    uint8_t *img = test_read(good, &n);
    sk_shard s;
    struct { const char *what; size_t cut; int byte; uint8_t xor_; const char *needle; } cases[] = {
        {"truncated body", 1024 + 150, -1, 0, "header says 100 tokens but file holds 75"},
        {"odd truncation", 1024 + 151, -1, 0, "and a half"},
        {"truncated header", 600, -1, 0, "truncated header"},
        {"flipped version", 0, 4, 0x02, "unsupported shard version 3"},
        {"flipped count", 0, 8, 0x01, "header says 101 tokens but file holds 100"},
        {"flipped magic", 0, 0, 0x10, "damaged shard header"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t *cp = malloc(n); memcpy(cp, img, n);
        size_t len = cases[i].cut ? cases[i].cut : n;
        if (cases[i].byte >= 0) cp[cases[i].byte] ^= cases[i].xor_;
        test_write(test_path("bad.bin"), cp, len);
        free(cp);
        int rc = sk_shard_open(&s, test_path("bad.bin"));
        CHECK(rc == SK_EFORMAT && has(test_path("bad.bin"), cases[i].needle), "shard %s refused: %s", cases[i].what, sk_last_error());
        if (!rc) sk_shard_close(&s);
    }
    /* a flipped token byte is in range of uint16: the vocabulary check names it */
    img[1024 + 2 * 7 + 1] ^= 0x80;
    test_write(test_path("tok.bin"), img, n);
    sk_shard_open(&s, test_path("tok.bin"));
    size_t pos; int val;
    int rc = sk_shard_check_vocab(&s, 300, &pos, &val);
    CHECK(rc && pos == 7 && has(test_path("tok.bin"), "position 7 is outside the vocabulary"), "flipped token: %s", sk_last_error());
    sk_shard_close(&s);
    /* headerless: even raw uint16 is read, an odd size refused */
    test_write(test_path("raw.bin"), img + 1024, 21);
    CHECK(sk_shard_open(&s, test_path("raw.bin")) && has(test_path("raw.bin"), "odd size 21"), "odd headerless file: %s", sk_last_error());
    test_write(test_path("raw.bin"), img + 1024, 20);
    CHECK(sk_shard_open(&s, test_path("raw.bin")) == 0 && s.n == 10 && s.headerless, "even headerless file: 10 tokens");
    sk_shard_close(&s);
    free(img);
}

/* ---------------------------------------------------------- tokenizers */
static void test_tokenizers(void) {
    sk_tokenizer *t;
    struct { const char *text, *needle; } bad[] = {
        {"{\"type\": \"char\", \"vocab\": [\"a\", \"b\"", "invalid JSON"},
        {"{\"type\": \"char\", \"vocab\": []}", "non-empty array"},
        {"{\"type\": \"char\", \"vocab\": [\"ab\"]}", "vocab entry 0 is not a string of exactly one character"},
        {"{\"type\": \"char\", \"vocab\": [\"a\", 5]}", "vocab entry 1"},
        {"{\"type\": \"bpe\", \"vocab\": [\"a\"]}", "not a char vocabulary"},
        {"", "invalid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        test_write(test_path("vocab.json"), bad[i].text, strlen(bad[i].text));
        int rc = sk_tok_load_char(&t, test_path("vocab.json"));
        CHECK(rc && has(test_path("vocab.json"), bad[i].needle), "char vocabulary %zu refused: %s", i, sk_last_error());
        if (!rc) sk_tok_free(t);
    }
    /* a GPT-2 encoder without all 256 bytes, and merges naming unknown tokens */
    test_write(test_path("encoder.json"), "{\"a\": 0, \"b\": 1}", 16);
    test_write(test_path("vocab.bpe"), "#version: 0.2\na b\n", 18);
    CHECK(sk_tok_load_gpt2(&t, test_path("encoder.json"), test_path("vocab.bpe")) && has(test_path("encoder.json"), "no token for byte 0x00"),
          "GPT-2 encoder without all bytes refused: %s", sk_last_error());
    test_write(test_path("encoder.json"), "{\"a\": 0, \"b\": 3}", 16);
    CHECK(sk_tok_load_gpt2(&t, test_path("encoder.json"), test_path("vocab.bpe")) && has(test_path("encoder.json"), "out of range"),
          "GPT-2 encoder with an id out of range refused: %s", sk_last_error());
    test_write(test_path("encoder.json"), "{\"a\": 0, \"b\"", 12);
    CHECK(sk_tok_load_gpt2(&t, test_path("encoder.json"), test_path("vocab.bpe")) && has(test_path("encoder.json"), "invalid JSON"),
          "truncated GPT-2 encoder refused: %s", sk_last_error());
    CHECK(sk_tok_load(&t, test_path("missing")) && has(test_path("missing"), "no such tokenizer"), "missing tokenizer: %s", sk_last_error());
}

/* -------------------------------------------------------------- config */
static void test_config_values(void) {
    sk_config c;
    sk_config_default(&c);
    struct { const char *k, *v, *needle; } bad[] = {
        {"n_layer", "abc", "not an integer"}, {"n_layer", "99999999999", "not an integer"},
        {"n_layer", "4x", "not an integer"}, {"dropout", "nan", "not a finite number"},
        {"rope_theta", "inf", "not a finite number"}, {"norm_eps", "1e999", "not a finite number"},
        {"gelu", "relu", "allowed: erf, tanh"}, {"family", "gpt3", "allowed: gpt2, llama"},
        {"nope", "1", "unknown field 'nope'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(sk_config_set(&c, bad[i].k, bad[i].v) == SK_EINVAL && has(bad[i].needle, NULL),
              "config %s = '%s' refused: %s", bad[i].k, bad[i].v, sk_last_error());
    struct { const char *field; int value; const char *needle; } range[] = {
        {"n_layer", -1, "n_layer = -1 is out of range"}, {"n_embd", 0, "n_embd = 0 is out of range"},
        {"block_size", 1 << 30, "block_size = 1073741824 is out of range"},
    };
    for (size_t i = 0; i < sizeof range / sizeof range[0]; i++) {
        sk_config d = tiny_cfg();
        char v[32]; snprintf(v, sizeof v, "%d", range[i].value);
        sk_config_set(&d, range[i].field, v);
        CHECK(sk_config_check(&d) == SK_EINVAL && has(range[i].needle, NULL), "config check: %s", sk_last_error());
    }
    const char *routes[][2] = {
        {"9-11:6-11=-9", "layers 9-11 outside [0, 1)"}, {"0:0=@1", "layer 0 cannot read layer 1"},
        {"0:*=-", "bad source"}, {"0:5=-1", "heads 5-5 outside [0, 2)"}, {"x", "expected a layer number"},
        {"0:0=-1;", "cannot read layer -1"},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        sk_config d = tiny_cfg();
        sk_config_set(&d, "routing", routes[i][0]);
        CHECK(sk_config_check(&d) == SK_EINVAL && has(routes[i][1], NULL), "routing '%s' refused: %s", routes[i][0], sk_last_error());
    }
}

/* -------------------------------------------------------------- limits */
static void test_limits(void) {
    sk_config c = tiny_cfg();
    c.block_size = 1024;
    sk_model *m;
    sk_model_new(&m, &c, 1);
    size_t P4 = sk_model_num_params(m) * 4;
    size_t act = sk_model_activation_bytes(m, 64, 1024, 1);
    sk_set_memory_limit(P4 * 4 + act - 1);
    char need[64];
    snprintf(need, sizeof need, "needs %zu bytes", P4 * 4 + act);
    int rc = sk_model_reserve(m, 64, 1024, 1);
    CHECK(rc == SK_ENOMEM && has(need, "AdamW m and v"), "training over the limit refused: %s", sk_last_error());
    sk_set_memory_limit(P4 * 4 + act);
    CHECK(sk_model_reserve(m, 64, 1024, 1) == 0, "training at exactly the limit accepted");
    sk_set_memory_limit(0);
    rc = sk_model_reserve(m, INT32_MAX, 1024, 1);
    CHECK(rc == SK_ENOMEM && has("needs", "bytes"), "B = 2^31-1 refused: %s", sk_last_error());

    sk_set_memory_limit(P4 + 1000);
    sk_kvcache *kv;
    sk_kvcache_params kp = sk_kvcache_default_params();
    kp.max_T = 1024;
    rc = sk_kvcache_new_params(&kv, m, &kp);
    CHECK(rc == SK_ENOMEM && has("the KV cache for 1024 positions", "needs"), "KV cache over the limit refused: %s", sk_last_error());
    sk_set_memory_limit(0);
    CHECK(sk_kvcache_new_params(&kv, m, &kp) == 0, "KV cache under the limit");
    sk_kvcache_free(kv);

    /* a preset whose parameters alone exceed the limit */
    sk_config big;
    sk_config_preset(&big, "gpt2-large");
    sk_set_memory_limit((size_t)1 << 30);
    sk_model *bm;
    rc = sk_model_new(&bm, &big, 1);
    CHECK(rc == SK_ENOMEM && has("parameters) needs", "memory limit is 1073741824 bytes"), "gpt2-large under 1 GiB: %s", sk_last_error());
    /* a position table bigger than the limit (sinusoidal, huge block_size) */
    sk_config pt = tiny_cfg();
    pt.sinusoidal = 1; pt.block_size = 1 << 24; pt.n_embd = 4096; pt.n_head = 1;
    rc = sk_model_new(&bm, &pt, 1);
    CHECK(rc == SK_ENOMEM && has("position table", "needs"), "huge position table refused: %s", sk_last_error());
    sk_set_memory_limit(0);

    /* the environment variable */
    setenv("SKIPLM_MEM_LIMIT", "3M", 1);
    CHECK(sk_memory_limit() == 3u << 20, "SKIPLM_MEM_LIMIT=3M -> %zu", sk_memory_limit());
    setenv("SKIPLM_MEM_LIMIT", "2G", 1);
    CHECK(sk_memory_limit() == (size_t)2 << 30, "SKIPLM_MEM_LIMIT=2G");
    setenv("SKIPLM_MEM_LIMIT", "junk", 1);
    CHECK(sk_memory_limit() > (size_t)1 << 20, "malformed SKIPLM_MEM_LIMIT ignored");
    unsetenv("SKIPLM_MEM_LIMIT");
    sk_model_free(m);
}

/* --------------------------------------------------- stale temp files */
static void test_stale_temps(void) {
    const char *path = test_path("ckpt.safetensors");
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0);               /* a pid that just died (reuse is unlikely this soon) */
    char dead[600], live[600], other[600];
    snprintf(dead, sizeof dead, "%s.tmp.%d", path, (int)child);
    snprintf(live, sizeof live, "%s.tmp.%d", path, (int)getppid());
    snprintf(other, sizeof other, "%s.tmp.notapid", path);
    test_write(dead, "half", 4);
    test_write(live, "busy", 4);
    test_write(other, "keep", 4);
    CHECK(sk_write_atomic(path, "new", 3) == 0, "atomic write next to temp files");
    struct stat sb;
    CHECK(stat(dead, &sb) != 0, "temp file of a dead writer (pid %d) removed", (int)child);
    CHECK(stat(live, &sb) == 0, "temp file of a live process kept");
    CHECK(stat(other, &sb) == 0, "a name that is not <path>.tmp.<pid> kept");
    unlink(live); unlink(other);
}

/* ---------------------------------------------- regressions (fuzzing) */
static void test_regressions(void) {
    /* sk_error prefixing its own message (was vsnprintf reading the buffer it wrote) */
    sk_error(SK_EIO, "inner message");
    sk_error(SK_EIO, "%s: %s", "outer.file", sk_last_error());
    CHECK(!strcmp(sk_last_error(), "outer.file: inner message"), "error message prefixed with itself: '%s'", sk_last_error());

    /* finite weights that overflow to inf/NaN scores: attention's exp must not convert NaN
     * to int (UBSan finding of fuzz_model); the loss is simply not finite */
    sk_config c = tiny_cfg();
    sk_model *m;
    sk_model_new(&m, &c, 1);
    float *p = sk_model_params(m);
    for (size_t i = 0; i < sk_model_num_params(m); i++) p[i] = 3e38f;
    int32_t x[4] = {1, 2, 3, 4}, y[4] = {2, 3, 4, 5};
    float loss = 0;
    int rc = sk_model_forward(m, x, y, 1, 4, &loss, NULL);
    CHECK(rc == 0 && !isfinite(loss), "overflowing weights: forward runs, loss %g (not finite)", loss);
    sk_model_free(m);
}

int main(void) {
    if (test_tmp_open("sk_hardening")) return 1;
    test_weights();
    test_shards();
    test_tokenizers();
    test_config_values();
    test_limits();
    test_stale_temps();
    test_regressions();
    test_tmp_close();
    TEST_END();
}
