/* Error reporting: a thread-local message and a return code. */
#include "skiplm.h"
#include <stdarg.h>
#include <stdio.h>

static _Thread_local char sk_errmsg[1024];

const char *sk_last_error(void) { return sk_errmsg; }

int sk_error(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sk_errmsg, sizeof sk_errmsg, fmt, ap);
    va_end(ap);
    return code;
}
