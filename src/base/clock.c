/* The library's clock: monotonic seconds, for timings and progress lines. */
#include "skiplm_base.h"
#include <time.h>

double sk_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
