/*
 * sift_pyramid.c — SIFT's scale space on the CPU: the base image (doubled as OpenCV's default, blurred
 * from the assumed 0.5 to sigma), the Gaussian octaves (each layer blurred from the one before by the
 * sigma that takes it one step of 2^(1/layers) further; an octave starts from the layer with twice the
 * first's scale, every other pixel). The DoG layers are never stored: sift.c makes their rows from
 * these as it scans them. The arithmetic is cv::GaussianBlur's and
 * cv::resize's on float images (kernel from doubles rounded to float, BORDER_REFLECT_101, half-pixel
 * linear doubling), so the images match OpenCV's to float rounding; the order of the sums differs.
 *
 * Speed: the blur is one pass per output row (the vertical taps into a row buffer, then the horizontal
 * taps from it, both over the row's pixels so that the compiler vectorises them; target_clones builds
 * them for AVX-512, AVX2 and baseline x86-64 and picks one at load), rows spread over OpenMP threads.
 * Without FMA contraction (-ffp-contract=off) every ISA gives the same bits.
 */
#include "sift_internal.h"

#include "core/error.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* BORDER_REFLECT_101 (gfedcb|abcdefgh|gfedcba) for any i, repeated as OpenCV's borderInterpolate does for
 * a kernel wider than the image */
static inline int reflect101(int i, int n) {
    if (n == 1) return 0;
    while (i < 0 || i >= n) i = i < 0 ? -i : 2 * n - 2 - i;
    return i;
}

/* cv::getGaussianKernel(ksize, sigma, CV_32F) for ksize = cvRound(8 sigma + 1) | 1: the half from the
 * centre, k[0..r] (malloc'd; NULL without memory) */
static float *gauss_kernel(double sigma, int *radius) {
    const int n = ((int)lrint(sigma * 8 + 1)) | 1, r = n / 2;
    double *c = malloc((size_t)n * sizeof(double)), sum = 0, s2 = -0.5 / (sigma * sigma);
    float *k = malloc(((size_t)r + 1) * sizeof(float));
    if (!c || !k) {
        free(c), free(k);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        const double x = i - (n - 1) * 0.5;
        c[i] = exp(s2 * x * x);
        sum += c[i];
    }
    sum = 1. / sum;
    for (int t = 0; t <= r; t++) k[t] = (float)(c[r + t] * sum);
    free(c);
    *radius = r;
    return k;
}

/* one output row: vertical taps of src's rows around y into buf[r .. r + w), its reflected margins, then
 * the horizontal taps into dst */
SIFT_CLONES static void blur_row(const float *src, float *dst, int w, int h, int y, const float *k, int r, float *buf) {
    float *v = buf + r;
    const float *c0 = src + (int64_t)y * w;
    for (int x = 0; x < w; x++) v[x] = c0[x] * k[0];
    for (int t = 1; t <= r; t++) {
        const float *a = src + (int64_t)reflect101(y - t, h) * w, *b = src + (int64_t)reflect101(y + t, h) * w;
        const float kt = k[t];
        for (int x = 0; x < w; x++) v[x] += (a[x] + b[x]) * kt;
    }
    for (int t = 1; t <= r; t++) {
        v[-t] = v[reflect101(-t, w)];
        v[w - 1 + t] = v[reflect101(w - 1 + t, w)];
    }
    for (int x = 0; x < w; x++) dst[x] = v[x] * k[0];
    for (int t = 1; t <= r; t++) {
        const float kt = k[t];
        for (int x = 0; x < w; x++) dst[x] += (v[x - t] + v[x + t]) * kt;
    }
}

fl_status fl_sift_blur(const float *src, float *dst, int w, int h, double sigma) {
    int r, failed = 0;
    float *k = gauss_kernel(sigma, &r);
    if (!k) return fl_error(FL_ERR_NOMEM, "sift: no memory for a blur of sigma %g", sigma);
#pragma omp parallel reduction(| : failed)
    {
        float *buf = malloc(((size_t)w + 2 * (size_t)r) * sizeof(float));
        failed |= !buf;
#pragma omp for schedule(static)
        for (int y = 0; y < h; y++)
            if (buf) blur_row(src, dst + (int64_t)y * w, w, h, y, k, r, buf);
        free(buf);
    }
    free(k);
    return failed ? fl_error(FL_ERR_NOMEM, "sift: no memory for a blur's row buffers (%d pixels wide)", w) : FL_OK;
}

/* cv::resize(src, dst, 2x, INTER_LINEAR) on floats: pixel centres map by x' = x / 2 - 1/4, so the new
 * pixels are 3:1 and 1:3 blends of their neighbours, the outermost copies of the edge (OpenCV clamps) */
SIFT_CLONES static void double_row(const float *s, float *d, int w) {
    d[0] = s[0];
    for (int i = 1; i < w; i++) {
        d[2 * i - 1] = s[i - 1] * 0.75f + s[i] * 0.25f;
        d[2 * i] = s[i - 1] * 0.25f + s[i] * 0.75f;
    }
    d[2 * w - 1] = s[w - 1];
}

SIFT_CLONES static void blend_rows(const float *a, const float *b, float *d, int n, float wa, float wb) {
    for (int x = 0; x < n; x++) d[x] = a[x] * wa + b[x] * wb;
}

static bool double_image(const float *src, int w, int h, float *dst) {
    const int W = 2 * w;
    int failed = 0;
#pragma omp parallel reduction(| : failed)
    {
        float *r0 = malloc(2 * (size_t)W * sizeof(float)), *r1 = r0 ? r0 + W : NULL;
        failed |= !r0;
#pragma omp for schedule(static)
        for (int y = 0; y < 2 * h; y++) {
            if (!r0) continue;
            float *d = dst + (int64_t)y * W;
            /* source rows and weights as the columns' */
            int ya, yb;
            float wa, wb;
            if (y == 0 || y == 2 * h - 1) {
                double_row(src + (int64_t)(y == 0 ? 0 : h - 1) * w, d, w);
                continue;
            }
            if (y % 2) ya = (y - 1) / 2, yb = ya + 1, wa = 0.75f, wb = 0.25f;
            else yb = y / 2, ya = yb - 1, wa = 0.25f, wb = 0.75f;
            double_row(src + (int64_t)ya * w, r0, w);
            double_row(src + (int64_t)yb * w, r1, w);
            blend_rows(r0, r1, d, W, wa, wb);
        }
        free(r0);
    }
    return !failed;
}

fl_status fl_sift_base_image(const float *gray, int w, int h, const sift_params *p, float **base, int *bw, int *bh) {
    const int W = p->upscale ? 2 * w : w, H = p->upscale ? 2 * h : h;
    float *b = malloc((size_t)W * (size_t)H * sizeof(float));
    float *tmp = p->upscale ? malloc((size_t)W * (size_t)H * sizeof(float)) : NULL;
    if (!b || (p->upscale && !tmp)) {
        free(b), free(tmp);
        return fl_error(FL_ERR_NOMEM, "sift: no memory for the %dx%d base image", W, H);
    }
    const float init = SIFT_INIT_SIGMA * (p->upscale ? 2.f : 1.f);
    const float sig_diff = sqrtf(fmaxf(p->sigma * p->sigma - init * init, 0.01f));
    fl_status st;
    if (p->upscale) {
        st = double_image(gray, w, h, tmp) ? fl_sift_blur(tmp, b, W, H, sig_diff)
                                           : fl_error(FL_ERR_NOMEM, "sift: no memory for the doubled image's rows");
        free(tmp);
    } else {
        st = fl_sift_blur(gray, b, W, H, sig_diff);
    }
    if (st != FL_OK) {
        free(b);
        return st;
    }
    *base = b, *bw = W, *bh = H;
    return FL_OK;
}

void fl_sift_pyramid_free(sift_pyramid *pyr) {
    if (!pyr->oct) return;
    for (int o = 0; o < pyr->n_octaves; o++) {
        if (pyr->oct[o].gauss)
            for (int i = 0; i < pyr->layers + 3; i++) free(pyr->oct[o].gauss[i]);
        free(pyr->oct[o].gauss);
    }
    free(pyr->oct);
    pyr->oct = NULL;
}

/* the octaves: as many as halve the shorter side down to about 4 pixels (OpenCV's
 * cvRound(log2(min side) - 2) - first octave) */
fl_status fl_sift_build_pyramid(float *base, int bw, int bh, const sift_params *p, sift_pyramid *pyr) {
    const int L = p->layers, first = p->upscale ? -1 : 0;
    int n = (int)lrint(log((double)(bw < bh ? bw : bh)) / log(2.) - 2) - first;
    if (n < 0) n = 0;
    *pyr = (sift_pyramid){.n_octaves = n, .layers = L, .first_octave = first};
    if (n == 0) {
        free(base);
        return FL_OK;
    }
    pyr->oct = calloc((size_t)n, sizeof(sift_octave));
    if (!pyr->oct) {
        free(base);
        return fl_error(FL_ERR_NOMEM, "sift: no memory for %d octaves", n);
    }
    double sig[FL_SIFT_MAX_LAYERS + 3];
    sig[0] = p->sigma;
    const double k = pow(2., 1. / L);
    for (int i = 1; i < L + 3; i++) {
        const double prev = pow(k, (double)(i - 1)) * p->sigma, total = prev * k;
        sig[i] = sqrt(total * total - prev * prev);
    }
    for (int o = 0; o < n; o++) {
        sift_octave *oc = &pyr->oct[o];
        oc->w = o == 0 ? bw : pyr->oct[o - 1].w / 2;
        oc->h = o == 0 ? bh : pyr->oct[o - 1].h / 2;
        const int64_t px = (int64_t)oc->w * oc->h;
        if (!(oc->gauss = calloc((size_t)L + 3, sizeof(float *)))) goto nomem;
        for (int i = 0; i < L + 3; i++) {
            if (o == 0 && i == 0) {
                oc->gauss[0] = base;
                base = NULL;
                continue;
            }
            if (!(oc->gauss[i] = malloc((size_t)(px ? px : 1) * sizeof(float)))) goto nomem;
            if (i == 0) { /* every other pixel of the previous octave's layer L (twice sigma) */
                const sift_octave *pv = &pyr->oct[o - 1];
                const float *s = pv->gauss[L];
#pragma omp parallel for schedule(static)
                for (int y = 0; y < oc->h; y++)
                    for (int x = 0; x < oc->w; x++) oc->gauss[0][(int64_t)y * oc->w + x] = s[(int64_t)2 * y * pv->w + 2 * x];
            } else if (fl_sift_blur(oc->gauss[i - 1], oc->gauss[i], oc->w, oc->h, sig[i]) != FL_OK) {
                fl_sift_pyramid_free(pyr);
                return fl_last_status();
            }
        }
    }
    return FL_OK;
nomem:
    free(base);
    fl_sift_pyramid_free(pyr);
    return fl_error(FL_ERR_NOMEM, "sift: no memory for the Gaussian pyramid");
}
