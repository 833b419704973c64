/*
 * cpu_merge.c — the CPU kernels of the merge layers (Add, Multiply,
 * Concatenate): element-wise products and column-block copies.
 */
#include "cpu_internal.h"

#include <string.h>

void fl_cpu_mul(int64_t n, const float *a, const float *b, float *dst) {
#pragma omp parallel for schedule(static) num_threads(n < 32768 ? 1 : fl_cpu_threads())
    for (int64_t i = 0; i < n; i++) dst[i] = a[i] * b[i];
}

void fl_cpu_concat_fwd(int64_t rows, int64_t cin, int64_t cout, int64_t off, const float *x, float *y) {
#pragma omp parallel for schedule(static) num_threads(rows * cin < 32768 ? 1 : fl_cpu_threads())
    for (int64_t r = 0; r < rows; r++) memcpy(y + r * cout + off, x + r * cin, (size_t)cin * sizeof(float));
}

void fl_cpu_concat_bwd(int64_t rows, int64_t cin, int64_t cout, int64_t off, const float *dy, float *dx, float beta) {
#pragma omp parallel for schedule(static) num_threads(rows * cin < 32768 ? 1 : fl_cpu_threads())
    for (int64_t r = 0; r < rows; r++) {
        const float *g = dy + r * cout + off;
        float *d = dx + r * cin;
        if (beta == 0.0f) memcpy(d, g, (size_t)cin * sizeof(float));
        else
            for (int64_t j = 0; j < cin; j++) d[j] += g[j];
    }
}
