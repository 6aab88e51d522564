/* Finding token shards (cli.h): a file, a glob, or a folder's train / val shards. */
#include "cli.h"
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* every match of pattern but loss masks, sorted (glob sorts); 0 matches is not an error here */
static int glob_shards(const char *pattern, cli_docs *out) {
    glob_t g;
    int r = glob(pattern, 0, NULL, &g);
    if (r != 0 && r != GLOB_NOMATCH) return sk_error(SK_EIO, "%s: cannot list the shards", pattern);
    for (size_t i = 0; r == 0 && i < g.gl_pathc; i++) {
        const char *p = g.gl_pathv[i];
        if (ends_with(p, ".mask.bin") || ends_with(p, ".mask")) continue;
        if (out->n == out->cap) {
            out->cap = out->cap ? 2 * out->cap : 64;
            out->v = realloc(out->v, sizeof(char *) * out->cap);
        }
        out->v[out->n++] = strdup(p);
    }
    if (r == 0) globfree(&g);
    return SK_OK;
}

int cli_find_shards(const char *spec, const char *stream, cli_docs *out, char *record, size_t n) {
    memset(out, 0, sizeof *out);
    struct stat st;
    char pat[PATH_MAX + 64], abs[PATH_MAX];
    if (stat(spec, &st) == 0 && S_ISDIR(st.st_mode)) {
        /* DIR/train.bin, or DIR's train_000000.bin ... (also FineWeb's fineweb_train_000001.bin) */
        snprintf(pat, sizeof pat, "%s/%s.bin", spec, stream);
        int single = stat(pat, &st) == 0;
        snprintf(pat, sizeof pat, "%s/*%s_[0-9]*.bin", spec, stream);
        if (glob_shards(pat, out)) return SK_EIO;
        if (single && out->n)
            return sk_error(SK_EINVAL, "%s holds both %s.bin and %s shards (%s): give --%s FILE or a glob", spec, stream,
                            stream, out->v[0], stream);
        if (single) {
            snprintf(pat, sizeof pat, "%s/%s.bin", spec, stream);
            return cli_find_shards(pat, stream, out, record, n);
        }
        if (!out->n) return sk_error(SK_EINVAL, "%s has no %s.bin and no %s_000000.bin ... shards (run skiplm prepare first)",
                                     spec, stream, stream);
        snprintf(record, n, "%s/*%s_[0-9]*.bin", realpath(spec, abs) ? abs : spec, stream);
        return SK_OK;
    }
    if (strpbrk(spec, "*?[")) {
        if (glob_shards(spec, out)) return SK_EIO;
        if (!out->n) return sk_error(SK_EINVAL, "%s matches no shard", spec);
        if (spec[0] == '/' || !getcwd(abs, sizeof abs)) snprintf(record, n, "%s", spec);
        else snprintf(record, n, "%s/%s", abs, spec);
        return SK_OK;
    }
    if (stat(spec, &st) != 0) return sk_error(SK_EIO, "%s: %s", spec, strerror(errno));
    out->v = malloc(sizeof(char *));
    out->v[0] = strdup(spec); out->n = out->cap = 1;
    snprintf(record, n, "%s", realpath(spec, abs) ? abs : spec);
    return SK_OK;
}
