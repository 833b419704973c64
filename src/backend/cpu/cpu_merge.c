/*
 * cpu_merge.c — the CPU kernels of the merge layers (Add, Multiply,
 * Subtract, Average, Maximum, Minimum, Concatenate): element-wise
 * arithmetic, the gradients of max/min, and column-block copies.
 */
#include "cpu_internal.h"

#include <string.h>

void fl_cpu_mul(int64_t n, const float *a, const float *b, float *dst) {
#pragma omp parallel for PAR_EW(n)
    for (int64_t i = 0; i < n; i++) dst[i] = a[i] * b[i];
}

/* Add (two inputs) in one pass, where a copy and an accumulation took two; in inference with the ReLU that
 * alone reads it (a residual block's), in one pass instead of three (ops.c's add_forward). */
static void add_relu(int64_t n, const float *a, const float *b, float *y, float hi) {
#pragma omp parallel for simd PAR_EW(n)
    for (int64_t i = 0; i < n; i++) {
        float s = a[i] + b[i], v = s > 0.0f ? s : 0.0f;
        y[i] = v < hi ? v : hi;
    }
}

void fl_cpu_add_affine(int mode, int64_t rows, int c, const float *x, const float *st, const float *o, float *y) {
    const float *s = st, *t = st + c;
    const float hi = mode == FL_BIN_ADD_RELU6 ? 6.0f : INFINITY;
    const bool relu = mode != FL_BIN_ADD;
    const int64_t rb = c >= FL_EW_CHUNK ? 1 : FL_EW_CHUNK / c, nblk = (rows + rb - 1) / rb;
#pragma omp parallel for schedule(dynamic) PAR(rows * c)
    for (int64_t k = 0; k < nblk; k++) {
        const int64_t r1 = (k + 1) * rb < rows ? (k + 1) * rb : rows;
        for (int64_t r = k * rb; r < r1; r++) {
            const float *restrict xr = x + (size_t)r * c, *restrict orow = o + (size_t)r * c;
            float *restrict yr = y + (size_t)r * c;
            if (relu) {
#pragma omp simd
                for (int j = 0; j < c; j++) {
                    const float z = xr[j] * s[j] + t[j], v0 = z + orow[j], v = v0 > 0.0f ? v0 : 0.0f;
                    yr[j] = v < hi ? v : hi;
                }
            } else {
#pragma omp simd
                for (int j = 0; j < c; j++) {
                    const float z = xr[j] * s[j] + t[j];
                    yr[j] = z + orow[j];
                }
            }
        }
    }
}

void fl_cpu_binary(int mode, int64_t n, const float *a, const float *b, float *y) {
    if (mode == FL_BIN_ADD_RELU || mode == FL_BIN_ADD_RELU6) {
        add_relu(n, a, b, y, mode == FL_BIN_ADD_RELU ? INFINITY : 6.0f);
        return;
    }
    if (mode == FL_BIN_ADD) {
#pragma omp parallel for simd PAR_EW(n)
        for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
        return;
    }
#pragma omp parallel for PAR_EW(n)
    for (int64_t i = 0; i < n; i++)
        y[i] = mode == FL_BIN_SUB ? a[i] - b[i] : mode == FL_BIN_MAX ? fmaxf(a[i], b[i]) : fminf(a[i], b[i]);
}

void fl_cpu_axpby(int64_t n, float alpha, const float *x, float beta, float *y) {
#pragma omp parallel for PAR_EW(n)
    for (int64_t i = 0; i < n; i++) y[i] = alpha * x[i] + (beta == 0.0f ? 0.0f : beta * y[i]);
}

void fl_cpu_minmax_grad(int is_max, int64_t n, const float *x, const float *other, const float *dy, float *dx,
                        float beta) {
#pragma omp parallel for PAR_EW(n)
    for (int64_t i = 0; i < n; i++) {
        float g = fl_minmax_grad(is_max, x[i], other[i], dy[i]);
        dx[i] = beta == 0.0f ? g : dx[i] + g;
    }
}

void fl_cpu_bmerge_fwd(int mode, const fl_bcast_desc *d, const float *x, const float *b, float *y) {
#pragma omp parallel for schedule(static) num_threads(d->n * d->size < 32768 ? 1 : fl_cpu_threads())
    for (int64_t n = 0; n < d->n; n++) {
        const float *xs = x + n * d->size, *bs = b + n * d->psize;
        float *ys = y + n * d->size;
        /* per parameter element: its members, so that b is read once */
        const int64_t per = d->size / d->psize;
        for (int64_t q = 0; q < d->psize; q++) {
            const float v = bs[q];
            for (int64_t t = 0; t < per; t++) {
                int64_t j = fl_bcast_member(d, q, t);
                ys[j] = mode == FL_BM_MUL ? xs[j] * v : xs[j] + v;
            }
        }
    }
}

void fl_cpu_bmerge_bwd(int mode, const fl_bcast_desc *d, const float *x, const float *b, const float *dy, float *dx,
                       float beta_x, float *db, float beta_b) {
    const int64_t per = d->size / d->psize;
#pragma omp parallel for schedule(static) num_threads(d->n * d->size < 32768 ? 1 : fl_cpu_threads())
    for (int64_t n = 0; n < d->n; n++) {
        const float *xs = x + n * d->size, *bs = b + n * d->psize, *g = dy + n * d->size;
        for (int64_t q = 0; q < d->psize; q++) {
            float acc = 0.0f;
            for (int64_t t = 0; t < per; t++) {
                int64_t j = fl_bcast_member(d, q, t);
                if (dx) {
                    float v = mode == FL_BM_MUL ? g[j] * bs[q] : g[j];
                    dx[n * d->size + j] = beta_x == 0.0f ? v : dx[n * d->size + j] + v;
                }
                acc += mode == FL_BM_MUL ? g[j] * xs[j] : g[j];
            }
            if (db) db[n * d->psize + q] = beta_b == 0.0f ? acc : db[n * d->psize + q] + acc;
        }
    }
}

void fl_cpu_fill(int64_t n, float v, float *y) {
#pragma omp parallel for PAR_EW(n)
    for (int64_t i = 0; i < n; i++) y[i] = v;
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
