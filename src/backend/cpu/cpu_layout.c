/*
 * cpu_layout.c — the CPU kernels that move image data without arithmetic
 * beyond accumulation: zero padding and cropping (ZeroPadding2D,
 * Cropping2D) forward and backward.
 */
#include "cpu_internal.h"

#include <string.h>

/* y[n, i, j, :] (beta: +)= x[n, i - pt, j - pl, :] inside x, else 0. One
 * output row at a time: zeros, one contiguous copy, zeros. */
void fl_cpu_pad2d(const fl_conv_desc *d, const float *x, float *y, float beta) {
    const int64_t rows = d->n * d->oh;
    const size_t c = (size_t)d->c;
    /* the columns of an output row that come from x: [j0, j1) */
    int j0 = d->pl > 0 ? d->pl : 0, j1 = d->w + d->pl < d->ow ? d->w + d->pl : d->ow;
    if (j1 < j0) j1 = j0;
#pragma omp parallel for schedule(static) num_threads(rows * d->ow * d->c < 32768 ? 1 : fl_cpu_threads())
    for (int64_t r = 0; r < rows; r++) {
        int64_t n = r / d->oh;
        int i = (int)(r % d->oh), si = i - d->pt;
        float *yr = y + (size_t)r * d->ow * c;
        bool inside = si >= 0 && si < d->h;
        if (beta == 0.0f) {
            if (!inside) { memset(yr, 0, (size_t)d->ow * c * sizeof(float)); continue; }
            memset(yr, 0, (size_t)j0 * c * sizeof(float));
            memcpy(yr + (size_t)j0 * c, x + (((size_t)n * d->h + si) * d->w + (j0 - d->pl)) * c,
                   (size_t)(j1 - j0) * c * sizeof(float));
            memset(yr + (size_t)j1 * c, 0, (size_t)(d->ow - j1) * c * sizeof(float));
        } else if (inside) {
            const float *xr = x + (((size_t)n * d->h + si) * d->w + (j0 - d->pl)) * c;
            float *o = yr + (size_t)j0 * c;
            for (size_t k = 0; k < (size_t)(j1 - j0) * c; k++) o[k] += xr[k];
        }
    }
}
