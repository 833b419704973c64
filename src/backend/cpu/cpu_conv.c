/*
 * cpu_conv.c — CPU Conv2D and pooling, NHWC. A convolution is a GEMM per
 * chunk of samples: im2col turns the chunk into rows of kh*kw*c patch values
 * so that, with Keras's kernel layout (kh, kw, c, oc) read as a [K, oc]
 * matrix,
 *     forward          y[rows, oc]  = col[rows, K] @ w[K, oc]   (+ bias, act)
 *     backward filter  dw[K, oc]   += col^T @ dy
 *     backward data    dcol[rows,K] = dy @ w^T, then col2im adds into dx
 * Chunks run in parallel (one OpenMP thread each, OpenBLAS single-threaded
 * inside a parallel region), small enough that col stays in cache and the
 * bias/activation epilogue runs on data that is still hot.
 */
#include "cpu_internal.h"

#include <stdlib.h>
#include <string.h>

/* Output rows per chunk; FLYNN_CONV_ROWS overrides (for benchmarking). */
static int64_t chunk_samples(const fl_conv_desc *d) {
    static int64_t target = 0;
    if (target == 0) {
        const char *e = getenv("FLYNN_CONV_ROWS");
        int64_t t = e ? atoll(e) : 0;
        target = t > 0 ? t : 512;
    }
    int64_t per = (int64_t)d->oh * d->ow;
    int64_t cs = target / (per > 0 ? per : 1);
    if (cs < 1) cs = 1;
    /* keep at least 2 chunks per thread when the batch allows */
    int64_t nt = fl_cpu_threads();
    while (cs > 1 && (d->n + cs - 1) / cs < 2 * nt) cs /= 2;
    return cs;
}

static size_t thread_ws_floats(const fl_conv_desc *d, int64_t cs, int backward) {
    size_t K = (size_t)d->kh * d->kw * d->c;
    size_t rows = (size_t)cs * d->oh * d->ow;
    size_t f = rows * K;
    if (backward) f += K * (size_t)d->oc + (size_t)d->oc; /* private dw, db */
    return (f + 15) & ~(size_t)15;
}

size_t fl_cpu_conv_workspace(const fl_conv_desc *d, int backward) {
    int64_t cs = chunk_samples(d);
    return thread_ws_floats(d, cs, backward) * sizeof(float) * (size_t)fl_cpu_threads();
}

/* col[rows, K] for samples x[0..cn) (x points at the first sample). */
static void im2col(const fl_conv_desc *d, const float *x, int64_t cn, float *col) {
    const int H = d->h, W = d->w, C = d->c, KH = d->kh, KW = d->kw;
    const size_t K = (size_t)KH * KW * C, rowc = (size_t)KW * C;
    for (int64_t s = 0; s < cn; s++) {
        const float *xs = x + (size_t)s * H * W * C;
        for (int oh = 0; oh < d->oh; oh++) {
            for (int ow = 0; ow < d->ow; ow++) {
                float *row = col + ((size_t)(s * d->oh + oh) * d->ow + ow) * K;
                int iw0 = ow * d->sw - d->pl;
                for (int kh = 0; kh < KH; kh++) {
                    int ih = oh * d->sh - d->pt + kh;
                    float *dst = row + (size_t)kh * rowc;
                    if (ih < 0 || ih >= H) { memset(dst, 0, rowc * sizeof(float)); continue; }
                    const float *src = xs + ((size_t)ih * W) * C;
                    if (iw0 >= 0 && iw0 + KW <= W) {
                        memcpy(dst, src + (size_t)iw0 * C, rowc * sizeof(float));
                    } else {
                        for (int kw = 0; kw < KW; kw++) {
                            int iw = iw0 + kw;
                            if (iw < 0 || iw >= W) memset(dst + (size_t)kw * C, 0, (size_t)C * sizeof(float));
                            else memcpy(dst + (size_t)kw * C, src + (size_t)iw * C, (size_t)C * sizeof(float));
                        }
                    }
                }
            }
        }
    }
}

/* dx[0..cn) += col2im(dcol) */
static void col2im_add(const fl_conv_desc *d, const float *dcol, int64_t cn, float *dx) {
    const int H = d->h, W = d->w, C = d->c, KH = d->kh, KW = d->kw;
    const size_t K = (size_t)KH * KW * C;
    for (int64_t s = 0; s < cn; s++) {
        float *xs = dx + (size_t)s * H * W * C;
        for (int oh = 0; oh < d->oh; oh++) {
            for (int ow = 0; ow < d->ow; ow++) {
                const float *row = dcol + ((size_t)(s * d->oh + oh) * d->ow + ow) * K;
                for (int kh = 0; kh < KH; kh++) {
                    int ih = oh * d->sh - d->pt + kh;
                    if (ih < 0 || ih >= H) continue;
                    for (int kw = 0; kw < KW; kw++) {
                        int iw = ow * d->sw - d->pl + kw;
                        if (iw < 0 || iw >= W) continue;
                        float *dst = xs + ((size_t)ih * W + iw) * C;
                        const float *src = row + ((size_t)kh * KW + kw) * C;
                        for (int c = 0; c < C; c++) dst[c] += src[c];
                    }
                }
            }
        }
    }
}

void fl_cpu_conv2d_fwd(const fl_conv_desc *d, const float *x, const float *w, const float *b, float *y, void *ws) {
    const int64_t cs = chunk_samples(d);
    const int64_t nchunks = (d->n + cs - 1) / cs;
    const size_t K = (size_t)d->kh * d->kw * d->c;
    const size_t in_sz = (size_t)d->h * d->w * d->c, out_rows = (size_t)d->oh * d->ow;
    const size_t tws = thread_ws_floats(d, cs, 0);
    const int direct = d->kh == 1 && d->kw == 1 && d->sh == 1 && d->sw == 1 && d->pt == 0 && d->pl == 0;
#pragma omp parallel for schedule(static) num_threads(fl_cpu_threads())
    for (int64_t ci = 0; ci < nchunks; ci++) {
        float *col = (float *)ws + (size_t)fl_cpu_thread_id() * tws;
        int64_t n0 = ci * cs, cn = d->n - n0 < cs ? d->n - n0 : cs;
        const float *xc = x + (size_t)n0 * in_sz;
        float *yc = y + (size_t)n0 * out_rows * d->oc;
        int64_t rows = cn * (int64_t)out_rows;
        const float *a = xc;
        if (!direct) { im2col(d, xc, cn, col); a = col; }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, d->oc, (int)K, 1.0f, a, (int)K, w, d->oc,
                    0.0f, yc, d->oc);
        fl_cpu_bias_act_rows(rows, d->oc, d->has_bias ? b : NULL, d->act, yc);
    }
}

void fl_cpu_conv2d_bwd(const fl_conv_desc *d, const float *x, const float *w, const float *y, float *dy, float *dx,
                       float dx_beta, float *dw, float *db, void *ws) {
    const int64_t cs = chunk_samples(d);
    const int64_t nchunks = (d->n + cs - 1) / cs;
    const size_t K = (size_t)d->kh * d->kw * d->c;
    const size_t in_sz = (size_t)d->h * d->w * d->c, out_rows = (size_t)d->oh * d->ow;
    const size_t tws = thread_ws_floats(d, cs, 1);
    const size_t col_floats = (size_t)cs * out_rows * K;
    const int direct = d->kh == 1 && d->kw == 1 && d->sh == 1 && d->sw == 1 && d->pt == 0 && d->pl == 0;
    const int nt = fl_cpu_threads();
    for (int t = 0; t < nt; t++) {
        float *p = (float *)ws + (size_t)t * tws + col_floats;
        memset(p, 0, (K * (size_t)d->oc + (size_t)d->oc) * sizeof(float));
    }
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t ci = 0; ci < nchunks; ci++) {
        float *col = (float *)ws + (size_t)fl_cpu_thread_id() * tws;
        float *dw_t = col + col_floats, *db_t = dw_t + K * (size_t)d->oc;
        int64_t n0 = ci * cs, cn = d->n - n0 < cs ? d->n - n0 : cs;
        int64_t rows = cn * (int64_t)out_rows;
        const float *xc = x + (size_t)n0 * in_sz;
        float *dyc = dy + (size_t)n0 * out_rows * d->oc;
        const float *yc = y + (size_t)n0 * out_rows * d->oc;
        fl_cpu_act_grad_rows(rows, d->oc, d->act, yc, dyc, d->has_bias ? db_t : NULL);
        const float *a = xc;
        if (!direct) { im2col(d, xc, cn, col); a = col; }
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)K, d->oc, (int)rows, 1.0f, a, (int)K, dyc, d->oc,
                    1.0f, dw_t, d->oc);
        if (dx) {
            float *dxc = dx + (size_t)n0 * in_sz;
            if (direct) {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)K, d->oc, 1.0f, dyc, d->oc, w,
                            d->oc, dx_beta, dxc, (int)K);
            } else {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)K, d->oc, 1.0f, dyc, d->oc, w,
                            d->oc, 0.0f, col, (int)K);
                if (dx_beta == 0.0f) memset(dxc, 0, (size_t)cn * in_sz * sizeof(float));
                col2im_add(d, col, cn, dxc);
            }
        }
    }
    /* reduce the per-thread partial gradients */
    const size_t nw = K * (size_t)d->oc;
    float *p0 = (float *)ws + col_floats;
    for (int t = 1; t < nt; t++) {
        const float *p = (float *)ws + (size_t)t * tws + col_floats;
        for (size_t i = 0; i < nw + (size_t)d->oc; i++) p0[i] += p[i];
    }
    memcpy(dw, p0, nw * sizeof(float));
    if (d->has_bias && db) memcpy(db, p0 + nw, (size_t)d->oc * sizeof(float));
}

/* ------------------------------------------------------------- pooling */

void fl_cpu_maxpool_fwd(const fl_conv_desc *d, const float *x, float *y, int32_t *argmax) {
    const int H = d->h, W = d->w, C = d->c;
#pragma omp parallel for collapse(2) schedule(static) num_threads(fl_cpu_threads())
    for (int64_t n = 0; n < d->n; n++) {
        for (int oh = 0; oh < d->oh; oh++) {
            const float *xs = x + (size_t)n * H * W * C;
            for (int ow = 0; ow < d->ow; ow++) {
                size_t o = (((size_t)n * d->oh + oh) * d->ow + ow) * C;
                float *yo = y + o;
                int32_t *ao = argmax + o;
                for (int c = 0; c < C; c++) { yo[c] = -INFINITY; ao[c] = -1; }
                for (int kh = 0; kh < d->kh; kh++) {
                    int ih = oh * d->sh - d->pt + kh;
                    if (ih < 0 || ih >= H) continue;
                    for (int kw = 0; kw < d->kw; kw++) {
                        int iw = ow * d->sw - d->pl + kw;
                        if (iw < 0 || iw >= W) continue;
                        int32_t off = (int32_t)(((size_t)ih * W + iw) * C);
                        const float *xi = xs + off;
                        for (int c = 0; c < C; c++)
                            if (xi[c] > yo[c] || ao[c] < 0) { yo[c] = xi[c]; ao[c] = off + c; }
                    }
                }
            }
        }
    }
}

void fl_cpu_maxpool_bwd(const fl_conv_desc *d, const float *dy, const int32_t *argmax, float *dx, float dx_beta) {
    const size_t in_sz = (size_t)d->h * d->w * d->c, out_sz = (size_t)d->oh * d->ow * d->c;
#pragma omp parallel for schedule(static) num_threads(fl_cpu_threads())
    for (int64_t n = 0; n < d->n; n++) {
        float *dxs = dx + (size_t)n * in_sz;
        if (dx_beta == 0.0f) memset(dxs, 0, in_sz * sizeof(float));
        const float *dys = dy + (size_t)n * out_sz;
        const int32_t *as = argmax + (size_t)n * out_sz;
        for (size_t i = 0; i < out_sz; i++) dxs[as[i]] += dys[i];
    }
}

/* Window rows/cols clipped to the input, as Keras pads "same" pooling. */
void fl_cpu_avgpool_fwd(const fl_conv_desc *d, const float *x, float *y) {
    const int H = d->h, W = d->w, C = d->c;
#pragma omp parallel for collapse(2) schedule(static) num_threads(fl_cpu_threads())
    for (int64_t n = 0; n < d->n; n++) {
        for (int oh = 0; oh < d->oh; oh++) {
            const float *xs = x + (size_t)n * H * W * C;
            for (int ow = 0; ow < d->ow; ow++) {
                float *yo = y + (((size_t)n * d->oh + oh) * d->ow + ow) * C;
                for (int c = 0; c < C; c++) yo[c] = 0;
                int cnt = 0;
                for (int kh = 0; kh < d->kh; kh++) {
                    int ih = oh * d->sh - d->pt + kh;
                    if (ih < 0 || ih >= H) continue;
                    for (int kw = 0; kw < d->kw; kw++) {
                        int iw = ow * d->sw - d->pl + kw;
                        if (iw < 0 || iw >= W) continue;
                        const float *xi = xs + ((size_t)ih * W + iw) * C;
                        for (int c = 0; c < C; c++) yo[c] += xi[c];
                        cnt++;
                    }
                }
                float inv = cnt ? 1.0f / (float)cnt : 0.0f;
                for (int c = 0; c < C; c++) yo[c] *= inv;
            }
        }
    }
}

void fl_cpu_avgpool_bwd(const fl_conv_desc *d, const float *dy, float *dx, float dx_beta) {
    const int H = d->h, W = d->w, C = d->c;
    const size_t in_sz = (size_t)H * W * C;
#pragma omp parallel for schedule(static) num_threads(fl_cpu_threads())
    for (int64_t n = 0; n < d->n; n++) {
        float *dxs = dx + (size_t)n * in_sz;
        if (dx_beta == 0.0f) memset(dxs, 0, in_sz * sizeof(float));
        for (int oh = 0; oh < d->oh; oh++) {
            for (int ow = 0; ow < d->ow; ow++) {
                const float *g = dy + (((size_t)n * d->oh + oh) * d->ow + ow) * C;
                int ih0 = oh * d->sh - d->pt, iw0 = ow * d->sw - d->pl;
                int h0 = ih0 < 0 ? 0 : ih0, h1 = ih0 + d->kh > H ? H : ih0 + d->kh;
                int w0 = iw0 < 0 ? 0 : iw0, w1 = iw0 + d->kw > W ? W : iw0 + d->kw;
                int cnt = (h1 - h0) * (w1 - w0);
                if (cnt <= 0) continue;
                float inv = 1.0f / (float)cnt;
                for (int ih = h0; ih < h1; ih++)
                    for (int iw = w0; iw < w1; iw++) {
                        float *dst = dxs + ((size_t)ih * W + iw) * C;
                        for (int c = 0; c < C; c++) dst[c] += g[c] * inv;
                    }
            }
        }
    }
}

void fl_cpu_gap_fwd(int64_t n, int64_t hw, int c, const float *x, float *y) {
#pragma omp parallel for schedule(static) num_threads(fl_cpu_threads())
    for (int64_t i = 0; i < n; i++) {
        float *yo = y + (size_t)i * c;
        for (int k = 0; k < c; k++) yo[k] = 0;
        for (int64_t p = 0; p < hw; p++) {
            const float *xi = x + ((size_t)i * hw + p) * c;
            for (int k = 0; k < c; k++) yo[k] += xi[k];
        }
        for (int k = 0; k < c; k++) yo[k] /= (float)hw;
    }
}

void fl_cpu_gap_bwd(int64_t n, int64_t hw, int c, const float *dy, float *dx, float dx_beta) {
#pragma omp parallel for schedule(static) num_threads(fl_cpu_threads())
    for (int64_t i = 0; i < n; i++) {
        const float *g = dy + (size_t)i * c;
        for (int64_t p = 0; p < hw; p++) {
            float *d = dx + ((size_t)i * hw + p) * c;
            for (int k = 0; k < c; k++) d[k] = (dx_beta == 0.0f ? 0.0f : d[k]) + g[k] / (float)hw;
        }
    }
}
