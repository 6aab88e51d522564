/* Jinja's errors: "line N: message" into the caller's buffer, and the longjmp out of the
 * parse (jj_perr) or the render (jj_die) that failed. See jinja_internal.h. */
#include "text/jinja_internal.h"

#include <stdio.h>

void jj_line_msg(char *err, size_t errlen, int line, const char *fmt, va_list ap) {
    if (!err || !errlen) return;
    int k = snprintf(err, errlen, "line %d: ", line);
    if (k >= 0 && (size_t)k < errlen) vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
}

NORETURN PRINTF(3, 4) void jj_perr(P *p, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    jj_line_msg(p->err, p->errlen, line, fmt, ap);
    va_end(ap);
    longjmp(p->jb, 1);
}

NORETURN PRINTF(2, 3) void jj_die(R *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    jj_line_msg(r->err, r->errlen, r->line, fmt, ap);
    va_end(ap);
    longjmp(r->jb, 1);
}
