/* clock.h — seconds on the monotonic clock, for timing steps, logs and benches. */
#ifndef FLYNN_CORE_CLOCK_H
#define FLYNN_CORE_CLOCK_H

#include <time.h>

static inline double fl_clock_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
