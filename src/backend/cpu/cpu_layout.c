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

/* One axis of a resize from n to out values (UpSampling2D: out = n*s),
 * as jax.image.resize with antialias off (Keras 3's UpSampling2D and
 * Resizing). Bilinear: output o reads inputs *i0 (weight 1 - *f) and *i1
 * (weight *f), clamped to [0, n), around the half-pixel source coordinate
 * (o + 0.5) * n / out - 0.5. Nearest: input floor((o + 0.5) * n / out),
 * computed exactly in integers (JAX's float32 formula gives the same). */
static void bilinear_taps(int o, int n, int out, int *i0, int *i1, float *f) {
    double src = ((double)o + 0.5) * n / out - 0.5, fl = floor(src);
    int a = (int)fl, b = a + 1;
    *f = (float)(src - fl);
    *i0 = a < 0 ? 0 : a >= n ? n - 1 : a;
    *i1 = b < 0 ? 0 : b >= n ? n - 1 : b;
}
static int nearest_tap(int o, int n, int out) { return (int)(((2 * (int64_t)o + 1) * n) / (2 * (int64_t)out)); }

/* The weight with which output o reads input i along one axis. */
static float resize_weight(int bilinear, int o, int i, int n, int out) {
    if (!bilinear) return nearest_tap(o, n, out) == i ? 1.0f : 0.0f;
    int i0, i1;
    float f;
    bilinear_taps(o, n, out, &i0, &i1, &f);
    return (i0 == i ? 1.0f - f : 0.0f) + (i1 == i ? f : 0.0f);
}

/* Outputs [*o0, *o1) that may read input i (a superset): a bilinear
 * source coordinate within 1 of i, a nearest one within [i, i + 1). */
static void resize_reach(int i, int n, int out, int *o0, int *o1) {
    int64_t a = (int64_t)(i - 1) * out / n - 1, b = ((int64_t)(i + 2) * out + n - 1) / n + 1;
    *o0 = a < 0 ? 0 : (int)a;
    *o1 = b > out ? out : (int)b;
}

/* y[n, i, j, :] = x[n, nearest(i), nearest(j), :], or the bilinear blend of
 * the four source pixels around the half-pixel source coordinates (the
 * taps above); h x w -> oh x ow, any sizes. */
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
            const float *xr = xs + (size_t)nearest_tap(i, d->h, d->oh) * d->w * C;
            for (int j = 0; j < d->ow; j++)
                memcpy(yr + (size_t)j * C, xr + (size_t)nearest_tap(j, d->w, d->ow) * C, C * sizeof(float));
            continue;
        }
        int i0, i1;
        float fh;
        bilinear_taps(i, d->h, d->oh, &i0, &i1, &fh);
        const float *x0 = xs + (size_t)i0 * d->w * C, *x1 = xs + (size_t)i1 * d->w * C;
        for (int j = 0; j < d->ow; j++) {
            int j0, j1;
            float fw;
            bilinear_taps(j, d->w, d->ow, &j0, &j1, &fw);
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
        resize_reach(i, d->h, d->oh, &o0, &o1);
        for (int oi = o0; oi < o1; oi++) {
            float wh = resize_weight(bilinear, oi, i, d->h, d->oh);
            if (wh == 0.0f) continue;
            const float *g = dys + (size_t)oi * orow;
            for (int j = 0; j < d->w; j++) {
                int q0, q1;
                resize_reach(j, d->w, d->ow, &q0, &q1);
                float *o = dxr + (size_t)j * C;
                for (int q = q0; q < q1; q++) {
                    float ww = resize_weight(bilinear, q, j, d->w, d->ow);
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
