/* prepare's output (prepare.h): the train and val token streams into shards, each with its
 * loss mask beside it for conversations. Memory: at most one shard of each stream. */
#include "prepare.h"
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int32_t *ids; uint8_t *mask;
    size_t n, cap;
    int files;
    uint64_t tokens, masked;
} stream;

struct prep_writer {
    char dir[4096];          /* the output folder */
    char tmp[4200];          /* the files are written here, and moved into dir when all are done */
    size_t shard_size, auto_max;
    int version, with_mask, sharded;
    stream s[2];             /* train, val */
};

static const char *const NAMES[2] = {"train", "val"};

int prep_writer_open(prep_writer **out, const char *dir, size_t shard_size, size_t auto_max, int version, int with_mask) {
    prep_writer *w = calloc(1, sizeof *w);
    if (!w) return sk_error(SK_ENOMEM, "out of memory");
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    snprintf(w->tmp, sizeof w->tmp, "%s/.prepare.%d", dir, (int)getpid());
    w->shard_size = shard_size; w->auto_max = auto_max;
    w->version = version; w->with_mask = with_mask;
    w->sharded = shard_size > 0;
    *out = w;
    if (cli_mkdir_p(w->tmp)) return sk_error(SK_EIO, "%s: %s", w->tmp, strerror(errno));
    return SK_OK;
}

/* n tokens of stream v into its next file (sharded) or its single file */
static int write_file(prep_writer *w, int v, size_t n) {
    stream *s = &w->s[v];
    char path[4300], mpath[4400];
    if (w->sharded) snprintf(path, sizeof path, "%s/%s_%06d.bin", w->tmp, NAMES[v], s->files);
    else snprintf(path, sizeof path, "%s/%s.bin", w->tmp, NAMES[v]);
    int rc = sk_shard_write_version(path, s->ids, n, w->version);
    if (!rc && w->with_mask && !(rc = sk_mask_path(path, mpath, sizeof mpath))) rc = sk_mask_write(mpath, s->mask, n);
    if (rc) return rc;
    s->files++;
    memmove(s->ids, s->ids + n, (s->n - n) * sizeof *s->ids);
    if (w->with_mask) memmove(s->mask, s->mask + n, s->n - n);
    s->n -= n;
    return SK_OK;
}

int prep_writer_add(prep_writer *w, int val, const int32_t *ids, const uint8_t *mask, size_t n) {
    stream *s = &w->s[val ? 1 : 0];
    size_t limit = w->sharded ? w->shard_size : w->auto_max;
    while (n > 0) {
        size_t room = limit - s->n, k = n < room ? n : room;
        if (s->n + k > s->cap) {
            size_t nc = s->cap ? s->cap : 1 << 16;
            while (nc < s->n + k) nc *= 2;
            if (nc > limit) nc = limit;
            int32_t *ni = realloc(s->ids, nc * sizeof *ni);
            if (ni) s->ids = ni;
            uint8_t *nm = w->with_mask ? realloc(s->mask, nc) : NULL;
            if (nm) s->mask = nm;
            if (!ni || (w->with_mask && !nm)) return sk_error(SK_ENOMEM, "out of memory for a shard of %zu tokens", nc);
            s->cap = nc;
        }
        memcpy(s->ids + s->n, ids, k * sizeof *ids);
        if (w->with_mask) {
            memcpy(s->mask + s->n, mask, k);
            for (size_t i = 0; i < k; i++) s->masked += mask[i];
        }
        s->n += k; s->tokens += k;
        ids += k; if (mask) mask += k; n -= k;
        if (s->n == limit) {
            /* a stream outgrew the single-file layout: from here on, shards of auto_max */
            if (!w->sharded) { w->sharded = 1; w->shard_size = w->auto_max; }
            int rc = write_file(w, val ? 1 : 0, s->n);
            if (rc) return rc;
        }
    }
    return SK_OK;
}

/* 1 if path is a file this run wrote (or the mask of one, with masks) */
static int written(const prep_writer *w, const char *path) {
    char p[4300], m[4400];
    for (int v = 0; v < 2; v++)
        for (int i = 0; i < w->s[v].files; i++) {
            if (w->sharded) snprintf(p, sizeof p, "%s/%s_%06d.bin", w->dir, NAMES[v], i);
            else snprintf(p, sizeof p, "%s/%s.bin", w->dir, NAMES[v]);
            if (!strcmp(p, path)) return 1;
            if (w->with_mask && !sk_mask_path(p, m, sizeof m) && !strcmp(m, path)) return 1;
        }
    return 0;
}

/* Remove the token files (and masks) of an earlier prepare in the folder that this one did not
 * write: another layout, more shards, masks without conversations. train --data reads every
 * shard there, so none may be left over. */
static int remove_stale(const prep_writer *w) {
    static const char *const pats[] = {"%s/train.bin", "%s/val.bin", "%s/train.mask.bin", "%s/val.mask.bin",
                                       "%s/train_[0-9]*.bin", "%s/val_[0-9]*.bin"};
    char pat[4200];
    for (size_t k = 0; k < sizeof pats / sizeof pats[0]; k++) {
        snprintf(pat, sizeof pat, pats[k], w->dir);
        glob_t g;
        if (glob(pat, 0, NULL, &g) != 0) continue;
        for (size_t i = 0; i < g.gl_pathc; i++)
            if (!written(w, g.gl_pathv[i]) && unlink(g.gl_pathv[i]) && errno != ENOENT) {
                int rc = sk_error(SK_EIO, "%s: cannot remove the old shard: %s", g.gl_pathv[i], strerror(errno));
                globfree(&g);
                return rc;
            }
        globfree(&g);
    }
    return SK_OK;
}

/* Each file written, from the temp folder into dir (move 1) or removed (move 0). */
static int move_all(prep_writer *w, int move) {
    char a[4400], b[4400], ma[4500], mb[4500];
    int rc = SK_OK;
    for (int v = 0; v < 2; v++)
        for (int i = 0; i < w->s[v].files; i++) {
            const char *base = w->sharded ? "%s/%s_%06d.bin" : "%s/%s.bin";
            snprintf(a, sizeof a, base, w->tmp, NAMES[v], i);
            snprintf(b, sizeof b, base, w->dir, NAMES[v], i);
            int m = w->with_mask && !sk_mask_path(a, ma, sizeof ma) && !sk_mask_path(b, mb, sizeof mb);
            if (!move) { unlink(a); if (m) unlink(ma); continue; }
            if (!rc && (rename(a, b) || (m && rename(ma, mb))))
                rc = sk_error(SK_EIO, "cannot move %s into %s: %s", a, w->dir, strerror(errno));
        }
    if (!rc) rmdir(w->tmp);
    return rc;
}

void prep_writer_abort(prep_writer *w) {
    if (w) { move_all(w, 0); rmdir(w->tmp); }
}

int prep_writer_finish(prep_writer *w, prep_written *out) {
    for (int v = 0; v < 2; v++)
        if (w->s[v].n > 0 || (!w->sharded && w->s[v].files == 0)) {
            int rc = write_file(w, v, w->s[v].n);
            if (rc) return rc;
        }
    int rc = move_all(w, 1);
    if (!rc) rc = remove_stale(w);
    if (rc) return rc;
    for (int v = 0; v < 2; v++) {
        out->tokens[v] = w->s[v].tokens; out->masked[v] = w->s[v].masked; out->files[v] = w->s[v].files;
    }
    out->sharded = w->sharded;
    return SK_OK;
}

void prep_writer_free(prep_writer *w) {
    if (!w) return;
    for (int v = 0; v < 2; v++) { free(w->s[v].ids); free(w->s[v].mask); }
    free(w);
}
