/* Shared helpers of the libFuzzer harnesses: readers that take a path get the fuzzer's
 * bytes through an anonymous in-memory file (memfd), named "/proc/self/fd/N" — no disk
 * I/O, and the reader sees a regular file exactly as on disk. */
#ifndef SK_FUZZ_UTIL_H
#define SK_FUZZ_UTIL_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct { int fd; char path[64]; } fuzz_file;

/* Holds bytes [0, n) in a fresh memfd; aborts if the kernel cannot give one. */
static inline void fuzz_file_open(fuzz_file *f, const void *data, size_t n) {
    f->fd = memfd_create("skiplm-fuzz", MFD_CLOEXEC);
    if (f->fd < 0) abort();
    const char *p = data;
    for (size_t done = 0; done < n;) {
        ssize_t w = write(f->fd, p + done, n - done);
        if (w <= 0) abort();
        done += (size_t)w;
    }
    snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
}
static inline void fuzz_file_close(fuzz_file *f) { close(f->fd); f->fd = -1; }
#endif
