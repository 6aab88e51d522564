/* File helpers: atomic whole-file writes and full reads.
 *
 * Atomic write protocol (sk_write_atomic, sk_write_atomic_chunks):
 *   1. create "<path>.tmp.<pid>" (O_EXCL: never clobber someone else's file),
 *   2. write everything (write(2) loops over partial writes and EINTR, in <= 1 GiB calls),
 *   3. fsync and close it (close can report a deferred write error on NFS),
 *   4. rename it over path (atomic on POSIX filesystems: readers see old or new file),
 *   5. fsync the directory so the rename itself survives a crash.
 * Any failure in 1-4 removes the temp file and leaves the old file at path untouched.
 * A failure in 5 is reported too, but the new file is already in place.
 * If path is a symbolic link, the link is replaced by a regular file.
 * Before step 1, temp files "<path>.tmp.<pid>" of dead processes (a writer killed mid-write)
 * are removed, so crashes do not pile up half-written checkpoints next to the real one. */
#include "base/fileio.h"
#include "skiplm_base.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SK_IO_CHUNK ((size_t)1 << 30)

static int write_all(int fd, const void *data, size_t n) {
    const char *p = data;
    while (n > 0) {
        size_t k = n < SK_IO_CHUNK ? n : SK_IO_CHUNK;
        ssize_t w = write(fd, p, k);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (w == 0) { errno = EIO; return -1; }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* fsync the directory containing path. Filesystems that cannot fsync a directory
 * (EINVAL/ENOTSUP) are not an error. */
static int fsync_parent(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir;
    if (!slash) dir = strdup(".");
    else if (slash == path) dir = strdup("/");
    else dir = strndup(path, (size_t)(slash - path));
    if (!dir) { errno = ENOMEM; return -1; }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc < 0 && (e == EINVAL || e == ENOTSUP)) return 0;
    errno = e;
    return rc;
}

/* Remove "<path>.tmp.<pid>" files left by writers that were killed mid-write: only names
 * that end in a decimal pid of a process that no longer exists (kill(pid, 0) fails with
 * ESRCH). A live writer's temp file (another process saving the same path) is left alone.
 * Best effort: errors are ignored. Returns the number of files removed. */
int sk_remove_stale_temps(const char *path) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    char *dir = slash ? (slash == path ? strdup("/") : strndup(path, (size_t)(slash - path))) : strdup(".");
    if (!dir) return 0;
    DIR *d = opendir(dir);
    int removed = 0;
    size_t blen = strlen(base);
    for (struct dirent *e; d && (e = readdir(d));) {
        const char *n = e->d_name;
        if (strncmp(n, base, blen) || strncmp(n + blen, ".tmp.", 5)) continue;
        const char *digits = n + blen + 5;
        char *end;
        errno = 0;
        long pid = strtol(digits, &end, 10);
        if (errno || end == digits || *end || *digits < '1' || *digits > '9' || pid <= 0 || pid > INT_MAX) continue;
        if (pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;     /* alive, or not ours to judge */
        size_t fl = strlen(dir) + strlen(n) + 2;
        char *full = malloc(fl);
        if (!full) break;
        snprintf(full, fl, "%s/%s", dir, n);
        struct stat sb;
        if (lstat(full, &sb) == 0 && S_ISREG(sb.st_mode) && unlink(full) == 0) removed++;
        free(full);
    }
    if (d) closedir(d);
    free(dir);
    return removed;
}

int sk_write_atomic_chunks(const char *path, const sk_chunk *chunks, size_t n_chunks) {
    if (!path || !*path) return sk_error(SK_EINVAL, "sk_write_atomic: empty path");
    sk_remove_stale_temps(path);
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    if (!tmp) return sk_error(SK_ENOMEM, "%s: out of memory", path);
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());

    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST) {
        /* A stale temp file of an earlier process with our pid (after a crash). */
        unlink(tmp);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    }
    if (fd < 0) {
        int rc = sk_error(SK_EIO, "%s: cannot create temporary file %s: %s", path, tmp, strerror(errno));
        free(tmp);
        return rc;
    }
    const char *what = "write";
    for (size_t i = 0; i < n_chunks; i++) {
        if (chunks[i].n && write_all(fd, chunks[i].data, chunks[i].n) < 0) goto fail;
    }
    what = "fsync";
    if (fsync(fd) < 0) goto fail;
    what = "close";
    {
        int rc = close(fd);
        fd = -1;
        if (rc < 0) goto fail;
    }
    what = "rename";
    if (rename(tmp, path) < 0) goto fail;
    free(tmp);
    if (fsync_parent(path) < 0)
        return sk_error(SK_EIO, "%s: written, but fsync of its directory failed: %s", path, strerror(errno));
    return SK_OK;

fail:;
    int e = errno;
    if (fd >= 0) close(fd);
    unlink(tmp);
    int rc = sk_error(SK_EIO, "%s: %s failed: %s (previous file left unchanged)", path, what, strerror(e));
    free(tmp);
    return rc;
}

int sk_write_atomic(const char *path, const void *data, size_t n) {
    sk_chunk c = { data, n };
    return sk_write_atomic_chunks(path, &c, 1);
}

int sk_read_full(int fd, const char *path, void *buf, size_t n, const char *what) {
    char *p = buf;
    size_t got = 0;
    while (got < n) {
        size_t k = n - got < SK_IO_CHUNK ? n - got : SK_IO_CHUNK;
        ssize_t r = read(fd, p + got, k);
        if (r < 0) {
            if (errno == EINTR) continue;
            return sk_error(SK_EIO, "%s: reading %s: %s", path, what, strerror(errno));
        }
        if (r == 0)
            return sk_error(SK_EIO, "%s: reading %s: unexpected end of file after %zu of %zu bytes",
                            path, what, got, n);
        got += (size_t)r;
    }
    return SK_OK;
}

int sk_read_file(const char *path, uint8_t **data, size_t *n) {
    *data = NULL;
    *n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sk_error(SK_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) < 0) {
        int rc = sk_error(SK_EIO, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return sk_error(SK_EIO, "%s: not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    uint8_t *buf = malloc(size + 1);
    if (!buf) {
        close(fd);
        return sk_error(SK_ENOMEM, "%s: cannot allocate %zu bytes", path, size + 1);
    }
    int rc = sk_read_full(fd, path, buf, size, "file");
    close(fd);
    if (rc) { free(buf); return rc; }
    buf[size] = 0;
    *data = buf;
    *n = size;
    return SK_OK;
}

/* A path as given: a weights file, or a folder holding model.safetensors (HF's layout). */
char *sk_weights_file(const char *path) {
    struct stat sb;
    int dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    size_t n = strlen(path) + 20;
    char *f = malloc(n);
    if (!f) { sk_error(SK_ENOMEM, "out of memory"); return NULL; }
    snprintf(f, n, dir ? "%s/model.safetensors" : "%s", path);
    return f;
}
