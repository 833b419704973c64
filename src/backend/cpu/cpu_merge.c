/*
 * cpu_merge.c — the CPU kernels of the merge layers (Add, Multiply,
 * Subtract, Average, Maximum, Minimum, Concatenate): element-wise
 * arithmetic, the gradients of max/min, and column-block copies.
 */
#include "cpu_internal.h"

#include <stdlib.h>
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

/* The rows of all samples (fl_bcast_rows_of); y = x * b or x + b along each row. */
void fl_cpu_bmerge_fwd(int mode, const fl_bcast_desc *d, const float *x, const float *b, float *y) {
    const fl_bcast_rows br = fl_bcast_rows_of(d);
#pragma omp parallel for schedule(dynamic, br.per) PAR(d->n * d->size)
    for (int64_t R = 0; R < d->n * br.rows; R++) {
        const int64_t n = R / br.rows, j0 = (R % br.rows) * br.len;
        const float *restrict xr = x + n * d->size + j0;
        const float *restrict pr = b + n * d->psize + fl_bcast_index(d, j0);
        float *restrict yr = y + n * d->size + j0;
        const int64_t L = br.len, ps = br.ps;
        if (ps == 1 && mode == FL_BM_MUL) {
#pragma omp simd
            for (int64_t i = 0; i < L; i++) yr[i] = xr[i] * pr[i];
        } else if (ps == 1) {
#pragma omp simd
            for (int64_t i = 0; i < L; i++) yr[i] = xr[i] + pr[i];
        } else if (ps == 0) {
            const float v = pr[0];
            if (mode == FL_BM_MUL) {
#pragma omp simd
                for (int64_t i = 0; i < L; i++) yr[i] = xr[i] * v;
            } else {
#pragma omp simd
                for (int64_t i = 0; i < L; i++) yr[i] = xr[i] + v;
            }
        } else {
            for (int64_t i = 0; i < L; i++) yr[i] = mode == FL_BM_MUL ? xr[i] * pr[i * ps] : xr[i] + pr[i * ps];
        }
    }
}

/* dx = dy * b (Multiply) or dy, row by row as the forward; db[q] the sum over q's members, in ascending order
 * (a sample's rows in turn into a float per parameter element, then added to db). */
void fl_cpu_bmerge_bwd(int mode, const fl_bcast_desc *d, const float *x, const float *b, const float *dy, float *dx,
                       float beta_x, float *db, float beta_b) {
    const fl_bcast_rows br = fl_bcast_rows_of(d);
    const bool mul = mode == FL_BM_MUL;
    if (dx) {
#pragma omp parallel for schedule(dynamic, br.per) PAR(d->n * d->size)
        for (int64_t R = 0; R < d->n * br.rows; R++) {
            const int64_t n = R / br.rows, j0 = (R % br.rows) * br.len, L = br.len, ps = br.ps;
            const float *restrict g = dy + n * d->size + j0;
            const float *restrict pr = b + n * d->psize + fl_bcast_index(d, j0);
            float *restrict o = dx + n * d->size + j0;
            if (!mul && beta_x == 0.0f) {
                memcpy(o, g, (size_t)L * sizeof(float));
            } else if (!mul) {
#pragma omp simd
                for (int64_t i = 0; i < L; i++) o[i] += g[i];
            } else if (ps == 1 && beta_x == 0.0f) {
#pragma omp simd
                for (int64_t i = 0; i < L; i++) o[i] = g[i] * pr[i];
            } else if (ps == 1) {
#pragma omp simd
                for (int64_t i = 0; i < L; i++) o[i] += g[i] * pr[i];
            } else {
                for (int64_t i = 0; i < L; i++) {
                    const float v = g[i] * pr[i * ps];
                    o[i] = beta_x == 0.0f ? v : o[i] + v;
                }
            }
        }
    }
    if (!db) return;
    const int nt = d->n * d->size < 32768 ? 1 : fl_cpu_threads();
    float *acc = malloc((size_t)nt * (size_t)d->psize * sizeof(float));
    if (!acc) { /* the same sums, a parameter element at a time */
        const int64_t per = d->size / d->psize;
        for (int64_t n = 0; n < d->n; n++)
            for (int64_t q = 0; q < d->psize; q++) {
                float s = 0.0f;
                for (int64_t t = 0; t < per; t++) {
                    const int64_t j = n * d->size + fl_bcast_member(d, q, t);
                    s += mul ? dy[j] * x[j] : dy[j];
                }
                db[n * d->psize + q] = beta_b == 0.0f ? s : db[n * d->psize + q] + s;
            }
        return;
    }
#pragma omp parallel for schedule(dynamic) num_threads(nt)
    for (int64_t n = 0; n < d->n; n++) {
        float *restrict a = acc + (size_t)fl_cpu_thread_id() * (size_t)d->psize;
        memset(a, 0, (size_t)d->psize * sizeof(float));
        for (int64_t r = 0; r < br.rows; r++) {
            const int64_t j0 = r * br.len, L = br.len, ps = br.ps;
            const float *restrict g = dy + n * d->size + j0, *restrict xr = x + n * d->size + j0;
            float *restrict ar = a + fl_bcast_index(d, j0);
            if (ps == 1 && mul) {
#pragma omp simd
                for (int64_t i = 0; i < L; i++) ar[i] += g[i] * xr[i];
            } else if (ps == 1) {
#pragma omp simd
                for (int64_t i = 0; i < L; i++) ar[i] += g[i];
            } else {
                for (int64_t i = 0; i < L; i++) ar[i * ps] += mul ? g[i] * xr[i] : g[i];
            }
        }
        float *o = db + n * d->psize;
        for (int64_t q = 0; q < d->psize; q++) o[q] = beta_b == 0.0f ? a[q] : o[q] + a[q];
    }
    free(acc);
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
