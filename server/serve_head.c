/* skiplm serve: a request head's Content-Length headers, read before libmicrohttpd reads the
 * request (serve_http.c's gate peeks at a connection's first head and answers a bad length
 * itself: the library's 0.9.75 writes its own answer's status line twice). */
#include "serve.h"
#include <string.h>
#include <strings.h>

/* a Content-Length value as libmicrohttpd reads it (spaces around it trimmed) */
static int length_kind(const char *v, size_t n) {
    while (n && (*v == ' ' || *v == '\t')) { v++; n--; }
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t' || v[n - 1] == '\r')) n--;
    if (!n) return SRV_LEN_BAD;
    for (size_t i = 0; i < n; i++)              /* v is not NUL-terminated: no strspn */
        if (v[i] < '0' || v[i] > '9') return SRV_LEN_BAD;
    while (n > 1 && *v == '0') { v++; n--; }
    return n > 20 || (n == 20 && strncmp(v, "18446744073709551615", 20) > 0) ? SRV_LEN_HUGE : SRV_LEN_OK;
}

int srv_head_length(const char *h, size_t len, const char **v, size_t *n) {
    for (const char *p = h, *end = h + len; p < end;) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) eol = end;
        const size_t ll = (size_t)(eol - p);
        int k;
        if (ll >= 15 && !strncasecmp(p, "Content-Length:", 15) && (k = length_kind(p + 15, ll - 15))) {
            const char *a = p + 15;
            size_t m = ll - 15;
            while (m && (*a == ' ' || *a == '\t')) { a++; m--; }
            while (m && (a[m - 1] == ' ' || a[m - 1] == '\t' || a[m - 1] == '\r')) m--;
            *v = a; *n = m;
            return k;
        }
        if (eol == end) break;
        p = eol + 1;
    }
    return SRV_LEN_OK;
}
