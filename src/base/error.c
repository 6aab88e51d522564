/* Error reporting: a thread-local message and a return code. */
#include "skiplm_base.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char sk_errmsg[1024];

const char *sk_last_error(void) { return sk_errmsg; }

/* Formats into a scratch buffer first: callers prefix context to the previous message,
 * sk_error(rc, "%s: %s", path, sk_last_error()), and vsnprintf must not read the buffer
 * it is writing. */
int sk_error(int code, const char *fmt, ...) {
    char tmp[sizeof sk_errmsg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    memcpy(sk_errmsg, tmp, sizeof tmp);
    return code;
}
