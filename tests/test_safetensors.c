/* Tests for src/io/safetensors.c and src/base/fileio.c: round trips, strict validation of
 * corrupt files, and the atomic-write guarantee. */
#include "base/fileio.h"
#include "skiplm.h"
#include "io/io.h"
#include "test.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];

static char *path_in(const char *name) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static int write_raw(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 1;
    size_t w = n ? fwrite(b, 1, n, f) : 0;
    return fclose(f) != 0 || w != n;
}

static uint8_t *read_raw(const char *path, size_t *n) {
    uint8_t *b;
    if (sk_read_file(path, &b, n)) return NULL;
    return b;
}

/* A safetensors image from a header string and a data section. */
static uint8_t *mk(const char *hdr, const void *data, size_t dlen, size_t *n) {
    size_t hl = strlen(hdr);
    *n = 8 + hl + dlen;
    uint8_t *b = malloc(*n + 1);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, hdr, hl);
    if (dlen) memcpy(b + 8 + hl, data, dlen);
    return b;
}

/* Parse a header + data from memory; returns the code and leaves the message in err. */
static int try_hdr(const char *hdr, const void *data, size_t dlen) {
    size_t n;
    uint8_t *b = mk(hdr, data, dlen, &n);
    sk_safetensors st;
    int rc = sk_st_read_mem(b, n, "mem.safetensors", &st);
    sk_st_free(&st);
    free(b);
    return rc;
}

static int count_temp_files(void) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) if (strstr(e->d_name, ".tmp.")) n++;
    closedir(d);
    return n;
}

static int has(const char *s) { return strstr(sk_last_error(), s) != NULL; }

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/sk_test_st_XXXXXX");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }

    /* ------------------------------------------------ round trip of every dtype */
    float f32[6] = { 1.5f, -2.25f, 3e-8f, 1e30f, -0.0f, 42.0f };
    uint16_t f16[5] = { 0x3c00, 0xc000, 0x7bff, 0x0001, 0x8000 };   /* 1, -2, 65504, 2^-24, -0 */
    uint16_t bf16[3] = { 0x3f80, 0xc0a0, 0x0001 };                  /* 1, -5, tiny subnormal */
    double f64[2] = { 3.141592653589793, -1e-300 };
    int32_t i32[4] = { -1, 2, -2147483647 - 1, 2147483647 };
    int64_t i64[2] = { -5, (int64_t)1 << 40 };
    uint8_t u8[3] = { 0, 128, 255 };
    uint8_t bl[2] = { 1, 0 };
    int16_t i16[2] = { -32768, 32767 };
    uint16_t u16[2] = { 0, 65535 };
    int8_t i8[3] = { -128, 0, 127 };
    float scalar = 7.0f;
    const int64_t s23[] = { 2, 3 }, s5[] = { 5 }, s3[] = { 3 }, s2[] = { 2 }, s4[] = { 4 }, s221[] = { 2, 2, 1 },
                  s03[] = { 0, 3 }, s8[] = { 1, 1, 1, 1, 1, 1, 1, 2 };
    struct { const char *name; sk_dtype dt; int ndim; const int64_t *shape; const void *data; size_t nbytes; } T[] = {
        { "f32", SK_F32, 2, s23, f32, 24 },      { "f16", SK_F16, 1, s5, f16, 10 },
        { "bf16", SK_BF16, 1, s3, bf16, 6 },     { "f64", SK_F64, 1, s2, f64, 16 },
        { "i32", SK_I32, 3, s221, i32, 16 },     { "i64", SK_I64, 1, s2, i64, 16 },
        { "u8", SK_U8, 1, s3, u8, 3 },           { "bool", SK_BOOL, 1, s2, bl, 2 },
        { "i16", SK_I16, 1, s2, i16, 4 },        { "u16", SK_U16, 1, s2, u16, 4 },
        { "i8", SK_I8, 1, s3, i8, 3 },           { "scalar", SK_F32, 0, NULL, &scalar, 4 },
        { "empty", SK_F32, 2, s03, NULL, 0 },    { "rank8", SK_I8, 8, s8, i8, 2 },
        { "i32b", SK_I32, 1, s4, i32, 16 },
    };
    int nT = (int)(sizeof T / sizeof T[0]);
    sk_st_writer *w = sk_st_writer_new();
    int rc = 0;
    for (int i = 0; i < nT; i++) rc |= sk_st_add(w, T[i].name, T[i].dt, T[i].ndim, T[i].shape, T[i].data);
    rc |= sk_st_add_meta(w, "format", "pt");
    rc |= sk_st_add_meta(w, "config", "{\"n_layer\": 2, \"name\": \"caf\xc3\xa9\\n\\\"q\\\"\"}");
    rc |= sk_st_add_meta(w, "tab\tkey", "line1\nline2\x01");
    CHECK(rc == 0, "writer accepts all dtypes and metadata (%s)", sk_last_error());
    const char *rt = path_in("rt.safetensors");
    rc = sk_st_write(w, rt);
    CHECK(rc == 0, "writer writes %s (%s)", rt, sk_last_error());
    sk_st_writer_free(w);

    size_t flen = 0;
    uint8_t *file = read_raw(rt, &flen);
    {
        uint64_t hl = 0;
        for (int i = 7; i >= 0; i--) hl = (hl << 8) | file[i];
        CHECK(hl % 8 == 0 && (file[8 + hl - 1] == ' ' || file[8 + hl - 1] == '}'),
              "header length %llu is a multiple of 8, padded with spaces", (unsigned long long)hl);
        CHECK(memcmp(file + 8, "{\"__metadata__\":{\"format\":\"pt\"", 30) == 0, "metadata written first");
    }

    sk_safetensors st;
    rc = sk_st_read(rt, &st);
    CHECK(rc == 0, "reader reads back (%s)", sk_last_error());
    if (rc == 0) {
        int ok = st.n_tensors == nT;
        for (int i = 0; i < nT && ok; i++) {
            const sk_st_tensor *t = sk_st_find(&st, T[i].name);
            int good = t && t == &st.tensors[i] && t->dtype == T[i].dt && t->ndim == T[i].ndim &&
                       t->nbytes == T[i].nbytes && (T[i].nbytes == 0 || memcmp(st.data + t->offset, T[i].data, T[i].nbytes) == 0);
            for (int d = 0; good && d < T[i].ndim; d++) good = t->shape[d] == T[i].shape[d];
            CHECK(good, "round trip tensor '%s' (dtype, shape, bytes, insertion order)", T[i].name);
        }
        CHECK(ok, "round trip tensor count %d", st.n_tensors);
        CHECK(st.n_meta == 3 && strcmp(sk_st_meta(&st, "format"), "pt") == 0 &&
              strcmp(sk_st_meta(&st, "config"), "{\"n_layer\": 2, \"name\": \"caf\xc3\xa9\\n\\\"q\\\"\"}") == 0 &&
              strcmp(sk_st_meta(&st, "tab\tkey"), "line1\nline2\x01") == 0 && sk_st_meta(&st, "nope") == NULL,
              "round trip metadata with escapes");
        CHECK(sk_st_find(&st, "nope") == NULL, "find of a missing tensor is NULL");

        /* ---------------------------------------------- sk_st_get_f32 conversions */
        float out[8];
        CHECK(sk_st_get_f32(&st, "f32", out, 6) == 0 && memcmp(out, f32, sizeof f32) == 0, "get_f32 F32 exact");
        const float want16[5] = { 1.0f, -2.0f, 65504.0f, 5.9604644775390625e-8f, -0.0f };
        rc = sk_st_get_f32(&st, "f16", out, 5);
        CHECK(rc == 0 && memcmp(out, want16, sizeof want16) == 0, "get_f32 F16 (normal, max, subnormal, -0)");
        const float wantbf[3] = { 1.0f, -5.0f, 9.18354961579912e-41f };
        rc = sk_st_get_f32(&st, "bf16", out, 3);
        CHECK(rc == 0 && out[0] == wantbf[0] && out[1] == wantbf[1] && out[2] == wantbf[2], "get_f32 BF16");
        rc = sk_st_get_f32(&st, "f64", out, 2);
        CHECK(rc == 0 && out[0] == (float)f64[0] && out[1] == (float)f64[1], "get_f32 F64 rounds to float");
        CHECK(sk_st_get_f32(&st, "scalar", out, 1) == 0 && out[0] == 7.0f, "get_f32 scalar (ndim 0)");
        CHECK(sk_st_get_f32(&st, "empty", out, 0) == 0, "get_f32 zero-element tensor");
        rc = sk_st_get_f32(&st, "i64", out, 2);
        CHECK(rc == SK_EFORMAT && has("i64") && has("I64") && has(rt), "get_f32 refuses I64: %s", sk_last_error());
        rc = sk_st_get_f32(&st, "f32", out, 5);
        CHECK(rc == SK_EFORMAT && has("'f32'") && has("[2, 3]") && has("6 elements") && has("expected 5"),
              "get_f32 wrong element count: %s", sk_last_error());
        rc = sk_st_get_f32(&st, "missing.weight", out, 1);
        CHECK(rc == SK_EFORMAT && has("missing.weight") && has(rt), "get_f32 missing tensor: %s", sk_last_error());
        sk_st_free(&st);
        CHECK(st.n_tensors == 0 && st.data == NULL, "free clears the struct");
    }

    /* in-memory reader agrees with the file reader */
    rc = sk_st_read_mem(file, flen, "x", &st);
    CHECK(rc == 0 && st.n_tensors == nT, "read_mem of the same image");
    sk_st_free(&st);

    /* ------------------------------------------------ every truncation is refused */
    {
        int accepted = 0, wrong_code = 0, no_name = 0;
        const char *tp = path_in("trunc.safetensors");
        for (size_t l = 0; l < flen; l++) {
            write_raw(tp, file, l);
            rc = sk_st_read(tp, &st);
            if (rc == 0) { accepted++; sk_st_free(&st); }
            else if (rc != SK_EFORMAT && rc != SK_EIO) wrong_code++;
            else if (!has(tp)) no_name++;
            if (st.n_tensors || st.data || st.path) wrong_code++;
        }
        CHECK(accepted == 0 && wrong_code == 0 && no_name == 0,
              "all %zu truncations refused (accepted %d, wrong code %d, unnamed %d)", flen, accepted, wrong_code, no_name);
        /* one extra byte at the end is refused too */
        uint8_t *ext = malloc(flen + 1);
        memcpy(ext, file, flen);
        ext[flen] = 0;
        rc = sk_st_read_mem(ext, flen + 1, "ext", &st);
        CHECK(rc == SK_EFORMAT && has("belong to no tensor"), "trailing byte refused: %s", sk_last_error());
        free(ext);
    }

    /* ------------------------------------------------ bit flips of the header length */
    {
        int accepted = 0;
        uint8_t *c = malloc(flen);
        for (int bit = 0; bit < 64; bit++) {
            memcpy(c, file, flen);
            c[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            if (sk_st_read_mem(c, flen, "flip", &st) == 0) { accepted++; sk_st_free(&st); }
        }
        CHECK(accepted == 0, "all 64 header-length bit flips refused (%d accepted)", accepted);
        memcpy(c, file, flen);
        c[7] = 0x80;
        rc = sk_st_read_mem(c, flen, "flip", &st);
        CHECK(rc == SK_EFORMAT && has("100 MB"), "huge header length message: %s", sk_last_error());
        memcpy(c, file, flen);
        c[3] = 0x01;   /* 16 MB + N: below 100 MB but beyond the file */
        rc = sk_st_read_mem(c, flen, "flip", &st);
        CHECK(rc == SK_EFORMAT && has("exceeds the file size"), "header length beyond the file: %s", sk_last_error());
        free(c);
    }
    free(file);

    /* ------------------------------------------------ malformed headers */
    uint8_t d12[12] = { 0 };
    struct { const char *hdr; size_t dlen; const char *msg; const char *what; } bad[] = {
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4, "invalid JSON", "unterminated JSON" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}x", 4, "trailing", "trailing garbage in header" },
        { "[]", 0, "not a JSON object", "header is an array" },
        { "{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, "unsupported dtype \"F8_E4M3\"", "unknown dtype" },
        { "{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unsupported dtype", "lowercase dtype" },
        { "{\"a\":{\"dtype\":3,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype", "numeric dtype" },
        { "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype", "missing dtype" },
        { "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "shape", "missing shape" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "data_offsets", "missing data_offsets" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "needs 8 bytes", "shape/nbytes mismatch" },
        { "{\"a\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[0,12]}}", 12, "needs 12 bytes", "F16 nbytes ok control" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "non-negative", "negative dim" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "non-negative integer", "fractional dim" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4, "integer", "string dim" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "9 dimensions", "ndim 9" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", 4, "beyond the data section", "end out of range" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 4, "begin > end", "begin > end" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4, "[begin, end]", "3 offsets" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4, "[begin, end]", "negative offset" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1e300]}}", 4, "[begin, end]", "offset beyond 2^53" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
          12, "overlap", "overlapping tensors" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
          12, "hole before tensor 'b'", "hole between tensors" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "hole before tensor 'a'", "hole at start" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 12, "last 8 bytes", "trailing data" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
          8, "duplicate tensor name 'a'", "duplicate tensor" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1}}", 4, "unexpected field", "unknown field" },
        { "{\"a\":[1]}", 4, "not a JSON object", "entry is an array" },
        { "{\"__metadata__\":{\"k\":1},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "not a string", "numeric metadata value" },
        { "{\"__metadata__\":[],\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "__metadata__", "metadata not object" },
        { "{\"__metadata__\":{\"k\":\"a\\u0000b\"},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "NUL", "NUL in metadata" },
        { "{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "empty name", "empty tensor name" },
        { "{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,4]}}", 4, "too large", "shape overflow" },
        { "{}", 4, "last 4 bytes", "no tensors but data" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc = try_hdr(bad[i].hdr, d12, bad[i].dlen);
        if (strcmp(bad[i].what, "F16 nbytes ok control") == 0)
            CHECK(rc == 0, "valid control case accepted (%s)", sk_last_error());
        else
            CHECK(rc == SK_EFORMAT && has(bad[i].msg) && has("mem.safetensors"),
                  "refuses %s: %s", bad[i].what, sk_last_error());
    }
    /* accepted edge cases */
    CHECK(try_hdr("{}", NULL, 0) == 0, "empty file header {} accepted");
    CHECK(try_hdr("  {\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}   ", NULL, 0) == 0,
          "whitespace around header and zero-size tensor accepted");
    CHECK(try_hdr("{\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                  d12, 4) == 0, "zero-size tensor at the end accepted");
    CHECK(try_hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[0, 4294967296,4294967296,4294967296],\"data_offsets\":[0,0]}}", NULL, 0) == 0,
          "zero dimension cancels a huge product");
    {
        /* an unaligned F32 tensor after a 3-byte U8 tensor converts correctly */
        uint8_t dd[7] = { 1, 2, 3 };
        float v = -3.5f;
        memcpy(dd + 3, &v, 4);
        size_t n;
        uint8_t *b = mk("{\"u\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},\"f\":{\"dtype\":\"F32\",\"shape\":[1,1],\"data_offsets\":[3,7]}}",
                        dd, 7, &n);
        float out = 0;
        rc = sk_st_read_mem(b, n, "u", &st);
        CHECK(rc == 0 && sk_st_get_f32(&st, "f", &out, 1) == 0 && out == -3.5f, "unaligned F32 read");
        sk_st_free(&st);
        free(b);
    }
    /* file-level errors */
    rc = sk_st_read(path_in("does-not-exist.safetensors"), &st);
    CHECK(rc == SK_EIO && has("does-not-exist") && has("No such file"), "missing file: %s", sk_last_error());
    rc = sk_st_read(dir, &st);
    CHECK(rc == SK_EIO && has("not a regular file"), "directory refused: %s", sk_last_error());
    write_raw(path_in("short"), "\x02\0\0\0", 4);
    rc = sk_st_read(path_in("short"), &st);
    CHECK(rc == SK_EFORMAT && has("too short") && has("short"), "4-byte file: %s", sk_last_error());

    /* ------------------------------------------------ writer refusals */
    w = sk_st_writer_new();
    float one = 1;
    const int64_t neg[] = { -1 }, s1[] = { 1 };
    CHECK(sk_st_add(w, "x", SK_F32, 1, s1, &one) == 0, "writer add x");
    CHECK(sk_st_add(w, "x", SK_F32, 1, s1, &one) == SK_EINVAL && has("duplicate"), "writer refuses duplicate name");
    CHECK(sk_st_add(w, "", SK_F32, 1, s1, &one) == SK_EINVAL, "writer refuses empty name");
    CHECK(sk_st_add(w, "__metadata__", SK_F32, 1, s1, &one) == SK_EINVAL, "writer refuses __metadata__ as a name");
    CHECK(sk_st_add(w, "bad\xff", SK_F32, 1, s1, &one) == SK_EINVAL && has("UTF-8"), "writer refuses invalid UTF-8 name");
    CHECK(sk_st_add(w, "y", (sk_dtype)99, 1, s1, &one) == SK_EINVAL, "writer refuses unknown dtype");
    CHECK(sk_st_add(w, "y", SK_F32, 9, s8, &one) == SK_EINVAL, "writer refuses ndim 9");
    CHECK(sk_st_add(w, "y", SK_F32, 1, neg, &one) == SK_EINVAL, "writer refuses negative dim");
    CHECK(sk_st_add(w, "y", SK_F32, 1, s1, NULL) == SK_EINVAL, "writer refuses NULL data");
    CHECK(sk_st_add_meta(w, "k", "v") == 0 && sk_st_add_meta(w, "k", "w") == SK_EINVAL, "writer refuses duplicate meta key");
    CHECK(sk_st_add_meta(w, "k2", "\xc3") == SK_EINVAL, "writer refuses invalid UTF-8 metadata");
    rc = sk_st_write(w, path_in("no/such/dir/x.safetensors"));
    CHECK(rc == SK_EIO && has("no/such/dir") && count_temp_files() == 0, "write into a missing directory: %s", sk_last_error());
    sk_st_writer_free(w);

    /* an empty writer produces a valid file */
    w = sk_st_writer_new();
    rc = sk_st_write(w, path_in("empty.safetensors"));
    sk_st_writer_free(w);
    CHECK(rc == 0 && sk_st_read(path_in("empty.safetensors"), &st) == 0 && st.n_tensors == 0 && st.data_size == 0,
          "empty writer round trip");
    sk_st_free(&st);

    /* ------------------------------------------------ atomic writes */
    const char *ap = path_in("atomic.bin");
    CHECK(sk_write_atomic(ap, "old contents", 12) == 0, "write_atomic creates a file");
    CHECK(sk_write_atomic(ap, "new!", 4) == 0, "write_atomic replaces a file");
    {
        size_t n;
        uint8_t *b = read_raw(ap, &n);
        CHECK(b && n == 4 && memcmp(b, "new!", 4) == 0 && count_temp_files() == 0, "replaced contents, no temp file");
        free(b);
    }
    /* a large write hits RLIMIT_FSIZE in a child: EFBIG, old file intact, temp removed */
    {
        size_t big = 1 << 20;
        float *data = calloc(big / 4, sizeof(float));
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            signal(SIGXFSZ, SIG_IGN);
            struct rlimit rl = { 65536, 65536 };
            setrlimit(RLIMIT_FSIZE, &rl);
            sk_st_writer *cw = sk_st_writer_new();
            const int64_t sh[] = { (int64_t)(big / 4) };
            sk_st_add(cw, "w", SK_F32, 1, sh, data);
            int crc = sk_st_write(cw, ap);
            int ok = crc == SK_EIO && has("File too large") && has(ap) && has("unchanged");
            if (!ok) printf("  child: rc %d: %s\n", crc, sk_last_error());
            fflush(stdout);
            _exit(ok ? 0 : 1);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "write past ulimit -f fails with EFBIG and a message");
        size_t n;
        uint8_t *b = read_raw(ap, &n);
        CHECK(b && n == 4 && memcmp(b, "new!", 4) == 0, "old file intact after a failed write");
        CHECK(count_temp_files() == 0, "no temp file left after a failed write");
        free(b);
        free(data);
    }
    /* rename onto a directory fails: temp removed, directory untouched */
    {
        const char *dp = path_in("adir");
        mkdir(dp, 0755);
        rc = sk_write_atomic(dp, "x", 1);
        struct stat sb;
        CHECK(rc == SK_EIO && has("rename") && stat(dp, &sb) == 0 && S_ISDIR(sb.st_mode) && count_temp_files() == 0,
              "rename failure cleans up: %s", sk_last_error());
        rmdir(dp);
    }
    /* read-only directory (meaningless as root, which ignores permissions) */
    if (geteuid() != 0) {
        const char *rd = path_in("ro");
        mkdir(rd, 0755);
        char fp[300];
        snprintf(fp, sizeof fp, "%s/ro/f", dir);
        sk_write_atomic(fp, "old", 3);
        chmod(rd, 0555);
        rc = sk_write_atomic(fp, "new", 3);
        chmod(rd, 0755);
        size_t n;
        uint8_t *b = read_raw(fp, &n);
        CHECK(rc == SK_EIO && has("Permission denied") && b && n == 3 && memcmp(b, "old", 3) == 0,
              "read-only directory: error and old file intact: %s", sk_last_error());
        free(b);
        unlink(fp);
        rmdir(rd);
    }

    /* cleanup */
    DIR *d = opendir(dir);
    struct dirent *e;
    while ((e = readdir(d))) if (e->d_name[0] != '.') unlink(path_in(e->d_name));
    closedir(d);
    rmdir(dir);
    TEST_END();
}
