/* tool_jinja TEMPLATE_FILE CONTEXT_JSON_FILE [NOW_UNIX]: renders a Jinja chat template with
 * src/text/jinja_*.c and prints the result to stdout; on error prints it to stderr and exits 1.
 * tool_jinja --batch CASES_FILE OUT_FILE: CASES_FILE holds records of
 * <u32 template length><template><u32 context length><context JSON><i64 now>; OUT_FILE gets per
 * record <u8 status: 0 ok, 1 error><u32 length><rendering or error message> (tests/test_jinja.py). */
#include "text/jinja.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *b = malloc(cap);
    for (size_t k; b && (k = fread(b + len, 1, cap - len, f)) > 0;) {
        len += k;
        if (len == cap) { char *nb = realloc(b, cap *= 2); if (!nb) { free(b); b = NULL; } else b = nb; }
    }
    fclose(f);
    if (b) { b[len] = 0; *n = len; }
    return b;
}

/* renders; 0 with *out, or 1 with the message in err */
static int render(const char *tpl, size_t tn, const char *cj, size_t cn, long long now, char **out, size_t *on, char *err, size_t errlen) {
    sk_json ctx;
    if (sk_json_parse(cj, cn, &ctx, err, errlen) != 0) return 1;
    sk_jinja *t;
    int rc = sk_jinja_parse(&t, tpl, tn, err, errlen);
    if (!rc) {
        rc = sk_jinja_render(t, &ctx, (time_t)now, out, on, err, errlen);
        sk_jinja_free(t);
    }
    sk_json_free(&ctx);
    return rc;
}

static int get(const char *b, size_t n, size_t *pos, void *dst, size_t k) {
    if (n - *pos < k) return 0;
    memcpy(dst, b + *pos, k);
    *pos += k;
    return 1;
}

int main(int argc, char **argv) {
    char err[1024];
    if (argc == 4 && !strcmp(argv[1], "--batch")) {
        size_t n, pos = 0;
        char *b = slurp(argv[2], &n);
        FILE *o = fopen(argv[3], "wb");
        if (!b || !o) { fprintf(stderr, "cannot open %s or %s\n", argv[2], argv[3]); return 2; }
        while (pos < n) {
            uint32_t tn, cn;
            int64_t now;
            if (!get(b, n, &pos, &tn, 4) || n - pos < tn) return 2;
            const char *tpl = b + pos;
            pos += tn;
            if (!get(b, n, &pos, &cn, 4) || n - pos < cn) return 2;
            const char *cj = b + pos;
            pos += cn;
            if (!get(b, n, &pos, &now, 8)) return 2;
            char *out = NULL;
            size_t on = 0;
            int rc = render(tpl, tn, cj, cn, (long long)now, &out, &on, err, sizeof err);
            uint8_t st = (uint8_t)(rc != 0);
            const char *res = rc ? err : out;
            uint32_t rl = (uint32_t)(rc ? strlen(err) : on);
            fwrite(&st, 1, 1, o);
            fwrite(&rl, 4, 1, o);
            fwrite(res, 1, rl, o);
            free(out);
        }
        free(b);
        fclose(o);
        return 0;
    }
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: tool_jinja TEMPLATE_FILE CONTEXT_JSON_FILE [NOW_UNIX]\n       tool_jinja --batch CASES OUT\n");
        return 2;
    }
    size_t tn, cn;
    char *tpl = slurp(argv[1], &tn), *cj = slurp(argv[2], &cn);
    if (!tpl || !cj) { fprintf(stderr, "cannot read %s\n", tpl ? argv[2] : argv[1]); free(tpl); free(cj); return 1; }
    long long now = argc == 4 ? atoll(argv[3]) : (long long)time(NULL);
    char *out = NULL;
    size_t on = 0;
    int rc = render(tpl, tn, cj, cn, now, &out, &on, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    else fwrite(out, 1, on, stdout);
    free(out);
    free(tpl);
    free(cj);
    return rc ? 1 : 0;
}
