/* The memory limit: set by sk_set_memory_limit, else the environment variable
 * SKIPLM_MEM_LIMIT (bytes, with an optional K/M/G/T suffix, powers of 1024), else the
 * machine's physical memory. Every large allocation (parameters, activations, the KV
 * cache, the CLI's buffers, NFC output) is checked against it up front, so a request that
 * cannot fit is refused with its byte count instead of meeting the OOM killer. */
#include "skiplm_base.h"
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static size_t g_mem_limit = 0;
void sk_set_memory_limit(size_t bytes) { g_mem_limit = bytes; }

/* a positive size: a number, then an optional K/M/G/T (powers of 1024) and an optional B */
static size_t parse_bytes(const char *e) {
    if (!e || !*e) return 0;
    char *end;
    errno = 0;
    double v = strtod(e, &end);
    double mult = 1;
    switch (*end) {
    case 'k': case 'K': mult = 1024.0; end++; break;
    case 'm': case 'M': mult = 1048576.0; end++; break;
    case 'g': case 'G': mult = 1073741824.0; end++; break;
    case 't': case 'T': mult = 1099511627776.0; end++; break;
    }
    if (*end == 'B' || *end == 'b') end++;
    if (errno || end == e || *end || !(v * mult >= 1) || v * mult >= 1.8e19) return 0;
    return (size_t)(v * mult);
}

int sk_parse_bytes(const char *s, size_t *bytes) {
    size_t b = parse_bytes(s);
    if (!b) return sk_error(SK_EINVAL, "'%.40s' is not a size: give bytes, or a number with K, M, G or T (powers of 1024), e.g. 512M or 2G", s ? s : "");
    *bytes = b;
    return SK_OK;
}

static size_t env_mem_limit(void) { return parse_bytes(getenv("SKIPLM_MEM_LIMIT")); }   /* ignored if malformed */

size_t sk_memory_limit(void) {
    if (g_mem_limit) return g_mem_limit;
    size_t env = env_mem_limit();
    if (env) return env;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    return pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : (size_t)1 << 40;
}

int sk_mem_check(size_t bytes, const char *what) {
    size_t lim = sk_memory_limit();
    if (bytes > lim)
        return sk_error(SK_ENOMEM, "%s needs %zu bytes (%.2f GiB) but the memory limit is %zu bytes (%.2f GiB)",
                        what, bytes, bytes / 1073741824.0, lim, lim / 1073741824.0);
    return SK_OK;
}
