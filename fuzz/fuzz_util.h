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

#include "skiplm.h"

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

/* A forward pass of up to 4 tokens on a loaded model; returns the length T. Finite weights
 * can still overflow to inf/NaN activations: any loss is fine, undefined behaviour is not. */
static inline int fuzz_forward(sk_model *m) {
    const sk_config *c = sk_model_config(m);
    int T = c->block_size < 4 ? c->block_size : 4;
    int32_t x[4], y[4];
    for (int i = 0; i < T; i++) { x[i] = i % c->vocab_size; y[i] = (i + 1) % c->vocab_size; }
    float loss;
    sk_model_forward(m, x, y, 1, T, &loss, NULL);
    return T;
}
#endif
