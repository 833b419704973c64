/*
 * cpu_layout.c — the CPU kernels that move image data with little or no
 * arithmetic: zero padding and cropping (ZeroPadding2D, Cropping2D),
 * resizing, nearest or bilinear (UpSampling2D, Resizing), and the
 * transposition of a tensor's axes (Permute), each forward and backward.
 * Images are NHWC: the loops run over rows in parallel and over channels
 * innermost, contiguous.
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

/* ------------------------------------------------------------ upsampling */

/* The taps and weights of each axis: ops/math.h (fl_resize_*), which the GPU kernels share. */

/* y[n, i, j, :] = x[n, nearest(i), nearest(j), :], or the bilinear blend of
 * the four source pixels around the half-pixel source coordinates (the
 * taps of fl_resize_taps); h x w -> oh x ow, any sizes. */
void fl_cpu_upsample2d_fwd(const fl_conv_desc *d, int bilinear, const float *x, float *y) {
    const int64_t rows = d->n * d->oh;
    const size_t C = (size_t)d->c;
#pragma omp parallel for schedule(static) num_threads(rows * d->ow * d->c < 32768 ? 1 : fl_cpu_threads())
    for (int64_t r = 0; r < rows; r++) {
        int64_t n = r / d->oh;
        int i = (int)(r % d->oh);
        float *yr = y + (size_t)r * d->ow * C;
        const float *xs = x + (size_t)n * d->h * d->w * C;
        if (!bilinear) {
            const float *xr = xs + (size_t)fl_resize_nearest(i, d->h, d->oh) * d->w * C;
            for (int j = 0; j < d->ow; j++)
                memcpy(yr + (size_t)j * C, xr + (size_t)fl_resize_nearest(j, d->w, d->ow) * C, C * sizeof(float));
            continue;
        }
        int i0, i1;
        float fh;
        fl_resize_taps(i, d->h, d->oh, &i0, &i1, &fh);
        const float *x0 = xs + (size_t)i0 * d->w * C, *x1 = xs + (size_t)i1 * d->w * C;
        for (int j = 0; j < d->ow; j++) {
            int j0, j1;
            float fw;
            fl_resize_taps(j, d->w, d->ow, &j0, &j1, &fw);
            const float w00 = (1 - fh) * (1 - fw), w01 = (1 - fh) * fw, w10 = fh * (1 - fw), w11 = fh * fw;
            const float *a = x0 + (size_t)j0 * C, *b = x0 + (size_t)j1 * C, *c = x1 + (size_t)j0 * C,
                        *e = x1 + (size_t)j1 * C;
            float *o = yr + (size_t)j * C;
            for (size_t k = 0; k < C; k++) o[k] = w00 * a[k] + w01 * b[k] + w10 * c[k] + w11 * e[k];
        }
    }
}

/* dx (beta: +)= the transpose of the forward's weights applied to dy,
 * gathered per input row (no two threads write one element): each input
 * pixel sums the outputs within reach, each times its weight for it. */
void fl_cpu_upsample2d_bwd(const fl_conv_desc *d, int bilinear, const float *dy, float *dx, float dx_beta) {
    const int64_t rows = d->n * d->h;
    const size_t C = (size_t)d->c, orow = (size_t)d->ow * C;
#pragma omp parallel for schedule(static) num_threads(d->n * d->oh * d->ow * d->c < 32768 ? 1 : fl_cpu_threads())
    for (int64_t r = 0; r < rows; r++) {
        int64_t n = r / d->h;
        int i = (int)(r % d->h);
        float *dxr = dx + (size_t)r * d->w * C;
        const float *dys = dy + (size_t)n * d->oh * orow;
        if (dx_beta == 0.0f) memset(dxr, 0, (size_t)d->w * C * sizeof(float));
        int o0, o1;
        fl_resize_reach(i, d->h, d->oh, &o0, &o1);
        for (int oi = o0; oi < o1; oi++) {
            float wh = fl_resize_weight(bilinear, oi, i, d->h, d->oh);
            if (wh == 0.0f) continue;
            const float *g = dys + (size_t)oi * orow;
            for (int j = 0; j < d->w; j++) {
                int q0, q1;
                fl_resize_reach(j, d->w, d->ow, &q0, &q1);
                float *o = dxr + (size_t)j * C;
                for (int q = q0; q < q1; q++) {
                    float ww = fl_resize_weight(bilinear, q, j, d->w, d->ow);
                    if (ww == 0.0f) continue;
                    const float a = wh * ww, *gq = g + (size_t)q * C;
                    for (size_t k = 0; k < C; k++) o[k] += a * gq[k];
                }
            }
        }
    }
}

/* ----------------------------------------------------------- transposition */

/* y[idx] (beta: +)= x[idx permuted]: y's axis a is x's axis perm[a]. Rows
 * of y's last axis in parallel; along a row x is read with that axis's
 * stride (contiguous when the last axis stays last). */
void fl_cpu_permute(int ndim, const int64_t *shape, const int *perm, const float *x, float *y, float beta) {
    int64_t xstride[8] = {0}, ystep[8] = {0}, yshape[8] = {0}, total = 1; /* ndim <= 8: backend.h */
    if (ndim < 1 || ndim > 8) return;
    for (int a = ndim - 1; a >= 0; a--) {
        xstride[a] = total;
        total *= shape[a];
    }
    for (int a = 0; a < ndim; a++) {
        yshape[a] = shape[perm[a]];
        ystep[a] = xstride[perm[a]];
    }
    const int64_t inner = yshape[ndim - 1], step = ystep[ndim - 1], rows = inner ? total / inner : 0;
#pragma omp parallel for schedule(static) num_threads(total < 32768 ? 1 : fl_cpu_threads())
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = 0, rem = r;
        for (int a = ndim - 2; a >= 0; a--) {
            off += (rem % yshape[a]) * ystep[a];
            rem /= yshape[a];
        }
        const float *xr = x + off;
        float *yr = y + r * inner;
        if (beta == 0.0f) {
            if (step == 1) memcpy(yr, xr, (size_t)inner * sizeof(float));
            else for (int64_t k = 0; k < inner; k++) yr[k] = xr[k * step];
        } else {
            for (int64_t k = 0; k < inner; k++) yr[k] += xr[k * step];
        }
    }
}
