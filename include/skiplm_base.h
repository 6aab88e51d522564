/* skiplm base: what every part of the library shares. Library functions return 0 on
 * success and a non-zero code on failure, with the message in sk_last_error(); a monotonic
 * clock; the memory limit that large allocations are checked against up front; atomic
 * file writes. Included by skiplm.h. */
#ifndef SKIPLM_BASE_H
#define SKIPLM_BASE_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ errors */

enum {
    SK_OK = 0,
    SK_EINVAL = 1,   /* bad argument, shape or config */
    SK_EIO = 2,      /* file could not be read or written */
    SK_EFORMAT = 3,  /* file exists but its contents are wrong */
    SK_ENOMEM = 4,   /* allocation failed or request exceeds the memory limit */
    SK_ENUM = 5,     /* NaN or infinity where a number was needed */
};

/* Message of the last error on this thread ("" if none). */
const char *sk_last_error(void);
/* Set the message (printf-style) and return code; used by the library and the CLI. */
int sk_error(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Monotonic clock in seconds (for timings). */
double sk_now(void);

/* ------------------------------------------------------------ memory limit */

/* Memory limit for up-front refusals: sk_set_memory_limit(bytes) (0 = unset), else the
 * environment variable SKIPLM_MEM_LIMIT ("512M", "8G", plain bytes), else physical memory.
 * Parameters (sk_model_new), activations (sk_model_reserve; with_grads also counts the
 * gradients and AdamW's m and v that training holds), the KV cache (sk_kvcache_new_params) and the
 * CLI's large buffers are checked against it. */
void sk_set_memory_limit(size_t bytes);
size_t sk_memory_limit(void);
/* A size as SKIPLM_MEM_LIMIT takes it: a number of at least 1 byte with an optional K, M, G or T
 * (powers of 1024) and an optional B ("512M", "2G", "1.5G", "1000000"); SK_EINVAL otherwise. */
int sk_parse_bytes(const char *s, size_t *bytes);
/* SK_ENOMEM "<what> needs N bytes (x GiB) but the memory limit is M bytes" if bytes > limit. */
int sk_mem_check(size_t bytes, const char *what);

/* ----------------------------------------------------------------- files */

/* Write a whole buffer to path atomically: "<path>.tmp.<pid>", fsync, rename, fsync dir.
 * On failure (SK_EIO, with strerror) the temp file is removed and the old file at path is
 * left intact. Writing past `ulimit -f` raises SIGXFSZ, which kills the process unless
 * ignored: set signal(SIGXFSZ, SIG_IGN) to get an EFBIG error instead (the CLI does). */
int sk_write_atomic(const char *path, const void *data, size_t n);
/* The weights file a path names: path itself, or path/model.safetensors for a folder (as
 * Hugging Face lays one out); malloc'd, NULL when out of memory. */
char *sk_weights_file(const char *path);

/* ---------------------------------------------------------------- devices */

/* SK_OK when this build of the library computes on device: "cpu" (or NULL) always, "cuda"
 * only in a build with the CUDA backend (make cuda); otherwise SK_EINVAL saying why. */
int sk_device_check(const char *device);
#ifdef __cplusplus
}
#endif
#endif
