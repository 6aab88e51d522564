/* Internal file helpers (fileio.c). Public: sk_write_atomic and sk_weights_file in
 * skiplm_base.h. */
#ifndef SK_FILEIO_H
#define SK_FILEIO_H
#include <stdlib.h>
#include <stddef.h>
#include <stdint.h>

#include "skiplm_base.h"

/* One piece of a file written by sk_write_atomic_chunks. */
typedef struct { const void *data; size_t n; } sk_chunk;

/* Write the concatenation of chunks to path atomically, without joining them in memory:
 * "<path>.tmp.<pid>", write, fsync, close, rename over path, fsync the directory.
 * On failure the temp file is removed, an existing file at path is left untouched, and
 * SK_EIO is returned with "<path>: <what>: <strerror>". A process that writes past
 * RLIMIT_FSIZE is killed by SIGXFSZ unless it ignores that signal (the CLI does); when
 * ignored, the write fails with EFBIG and is reported like any other error. */
int sk_write_atomic_chunks(const char *path, const sk_chunk *chunks, size_t n_chunks);

/* Remove "<path>.tmp.<pid>" files whose pid is not a running process (kill(pid, 0) gives
 * ESRCH): what a writer killed mid-write leaves. sk_write_atomic_chunks calls it first.
 * Returns the number of files removed; errors are ignored. */
int sk_remove_stale_temps(const char *path);

/* Read exactly n bytes at the current position of fd into buf; SK_EIO (message names
 * path and what) on a read error or early end of file. */
int sk_read_full(int fd, const char *path, void *buf, size_t n, const char *what);

/* Read a whole regular file into a fresh malloc'ed buffer (NUL-terminated, *n excludes
 * the NUL). SK_EIO on open/read errors, SK_ENOMEM if it cannot be allocated. */
int sk_read_file(const char *path, uint8_t **data, size_t *n);

/* Grow *p (an array of elem-byte items with *cap allocated) to hold at least need items,
 * doubling from 64. Returns 1 (leaving *p as it was) when out of memory. */
static inline int sk_grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return 1;
    *p = q; *cap = c;
    return 0;
}
#endif
