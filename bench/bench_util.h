/*
 * bench_util.h — what the C benchmarks in bench/ share: a monotonic clock
 * and seeded random buffers. Header-only (each benchmark is one file built
 * by hand, as its comment says).
 */
#ifndef FL_BENCH_UTIL_H
#define FL_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "../src/core/clock.h" /* by path: sgemm_peak is built without -Isrc */

static inline double now(void) { return fl_clock_seconds(); }

/* n floats uniform in [-0.5, 0.5), the same for the same seed; exits when
 * out of memory */
static inline float *buf(size_t n, unsigned seed) {
    float *p = malloc(n * sizeof(float));
    if (!p) { fprintf(stderr, "out of memory (%zu floats)\n", n); exit(1); }
    srand(seed);
    for (size_t i = 0; i < n; i++) p[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    return p;
}

#endif
