/* Minimal test harness: each check prints "PASS name" or "FAIL name: why";
 * tests/run_tests.sh counts those lines over the whole suite. A test program exits
 * non-zero if any check failed. */
#ifndef SK_TEST_H
#define SK_TEST_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int sk_test_failed = 0;

#define CHECK(cond, ...) do { \
    if (cond) { printf("PASS "); printf(__VA_ARGS__); printf("\n"); } \
    else { sk_test_failed++; printf("FAIL "); printf(__VA_ARGS__); \
           printf("  [%s:%d: %s]\n", __FILE__, __LINE__, #cond); } \
    fflush(stdout); } while (0)

/* max |a-b| over n floats */
static inline double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d != d) return INFINITY;
        if (d > m) m = d;
    }
    return m;
}
static inline double max_abs(const float *a, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) if (fabs(a[i]) > m) m = fabs(a[i]);
    return m;
}
/* all |a-b| <= atol + rtol*|b| */
static inline int allclose(const float *a, const float *b, size_t n, double rtol, double atol) {
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= atol + rtol * fabs((double)b[i]))) return 0;
    }
    return 1;
}
/* deterministic uniform floats in [-1, 1) */
static inline void fill_uniform(float *x, size_t n, unsigned long long *s) {
    for (size_t i = 0; i < n; i++) {
        *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((double)(*s >> 40) / (double)(1ULL << 24) * 2.0 - 1.0);
    }
}
/* A private temp folder for the test's files: test_tmp_open() makes it, test_path() names a
 * file in it (eight rotating buffers), test_tmp_close() removes it with its contents. */
static char test_tmpdir[256];
static inline int test_tmp_open(const char *prefix) {
    snprintf(test_tmpdir, sizeof test_tmpdir, "/tmp/%s_XXXXXX", prefix);
    return mkdtemp(test_tmpdir) ? 0 : -1;
}
static inline void test_tmp_close(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", test_tmpdir);
    if (system(cmd)) {}
}
static inline char *test_path(const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ & 7];
    snprintf(p, 512, "%s/%s", test_tmpdir, name);
    return p;
}
/* Whole-file helpers: write n bytes; read a file (NUL-terminated, *n bytes) or NULL. */
static inline void test_write(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}
static inline void *test_read(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END); long sz = ftell(f); fseek(f, 0, SEEK_SET);
    char *b = sz >= 0 ? malloc((size_t)sz + 1) : NULL;
    if (!b || fread(b, 1, (size_t)sz, f) != (size_t)sz) { free(b); fclose(f); return NULL; }
    fclose(f);
    b[sz] = 0;
    *n = (size_t)sz;
    return b;
}

#define TEST_END() do { printf("%s: %s\n", __FILE__, sk_test_failed ? "FAILED" : "ok"); \
    return sk_test_failed ? 1 : 0; } while (0)
#endif
