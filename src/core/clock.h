/* clock.h — seconds on the monotonic clock, for timing steps, logs and benches,
 * and the process's CPU seconds. */
#ifndef FLYNN_CORE_CLOCK_H
#define FLYNN_CORE_CLOCK_H

#include <time.h>

static inline double fl_clock_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds of the whole process (all threads, user and system): over a
 * timed region, divided by its wall seconds, the cores the process used. */
static inline double fl_clock_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
