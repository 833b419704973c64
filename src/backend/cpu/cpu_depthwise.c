/*
 * cpu_depthwise.c — the CPU kernels of the depthwise 2D convolution
 * (DepthwiseConv2D, and the first half of SeparableConv2D), forward and
 * backward, as direct loops over NHWC data.
 *
 * Shapes (fl_conv_desc): x [n, h, w, c], w [kh, kw, c, dm], b [c*dm],
 * y [n, oh, ow, oc] with oc = c*dm and output channel c*dm + m:
 *
 *     y[n, p, q, c*dm+m] = act(b[c*dm+m] + sum_{i,j} x[n, p*sh-pt+i, q*sw-pl+j, c] * w[i, j, c, m])
 *
 * (taps outside x count 0). The channel axis is innermost and contiguous in
 * x, w and y, so every inner loop runs over channels with no branch: the
 * window's rows and columns are clamped to the image once per output pixel
 * (forward), or the taps that reach an input pixel are found once per tap
 * (backward). Each pass is memory-bound: one read of x and one write of y
 * forward; backward one pass over dy for act' and db, one over x, dy and dx
 * for dx and dw. OpenMP splits batch*rows; dw and db are summed per thread
 * and then added in thread order (deterministic for a thread count).
 */
#include "cpu_internal.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

static inline int imax(int a, int b) { return a > b ? a : b; }
static inline int imin(int a, int b) { return a < b ? a : b; }

/* y[k] += x[k] * w[k] (depth multiplier 1) */
static inline void madd1(int n, const float *restrict x, const float *restrict w, float *restrict y) {
    for (int k = 0; k < n; k++) y[k] += x[k] * w[k];
}

/* y[c*dm+m] += x[c] * w[c*dm+m] */
static inline void maddm(int c, int dm, const float *restrict x, const float *restrict w, float *restrict y) {
    for (int k = 0; k < c; k++) {
        const float xv = x[k];
        for (int m = 0; m < dm; m++) y[k * dm + m] += xv * w[k * dm + m];
    }
}

/* Forward: one output row (n, p) per iteration; each output pixel starts
 * from the bias and adds its clamped window, tap by tap, over all channels;
 * the activation runs over the finished row while it is in cache. */
void fl_cpu_depthwise_fwd(const fl_conv_desc *d, const float *x, const float *w, const float *b, float *y) {
    const int C = d->c, OC = d->oc, dm = OC / C;
    const int64_t rows = d->n * d->oh;
    const int nt = rows * d->ow * OC * d->kh * d->kw < 65536 ? 1 : fl_cpu_threads();
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t n = r / d->oh;
        const int p = (int)(r % d->oh), ih0 = p * d->sh - d->pt;
        const int i0 = imax(0, -ih0), i1 = imin(d->kh, d->h - ih0);
        const float *xn = x + (size_t)n * d->h * d->w * C;
        float *yr = y + (size_t)r * d->ow * OC;
        for (int q = 0; q < d->ow; q++) {
            const int iw0 = q * d->sw - d->pl;
            const int j0 = imax(0, -iw0), j1 = imin(d->kw, d->w - iw0);
            float *yp = yr + (size_t)q * OC;
            if (b) memcpy(yp, b, (size_t)OC * sizeof(float));
            else memset(yp, 0, (size_t)OC * sizeof(float));
            for (int i = i0; i < i1; i++) {
                const float *xrow = xn + (size_t)(ih0 + i) * d->w * C;
                const float *wrow = w + (size_t)i * d->kw * OC;
                for (int j = j0; j < j1; j++) {
                    const float *xp = xrow + (size_t)(iw0 + j) * C, *wp = wrow + (size_t)j * OC;
                    if (dm == 1) madd1(C, xp, wp, yp);
                    else maddm(C, dm, xp, wp, yp);
                }
            }
        }
        fl_cpu_bias_act_rows(d->ow, OC, NULL, d->act, yr);
    }
}

/* Backward, depth multiplier 1, both gradients:
 * dx[k] += dy[k] * w[k], dw[k] += dy[k] * x[k] in one pass over dy. */
static inline void bwd1(int n, const float *restrict dy, const float *restrict w, const float *restrict x,
                        float *restrict dx, float *restrict dw) {
    for (int k = 0; k < n; k++) {
        const float g = dy[k];
        dx[k] += g * w[k];
        dw[k] += g * x[k];
    }
}

/* dx[c] += sum_m dy[c*dm+m] * w[c*dm+m] */
static inline void dxm(int c, int dm, const float *restrict dy, const float *restrict w, float *restrict dx) {
    for (int k = 0; k < c; k++) {
        float s = 0.0f;
        for (int m = 0; m < dm; m++) s += dy[k * dm + m] * w[k * dm + m];
        dx[k] += s;
    }
}

#define DW_STACK 8192 /* floats of per-thread dw/db sums kept on the stack */

/* Backward. Pass 1 (output rows): dy *= act'(y), db sums. Pass 2 (input
 * rows, after a barrier, since it reads the dy rows of its neighbours):
 * each input pixel gathers from the taps (i, j) whose output pixel (p, q)
 * it feeds, p*sh - pt + i = row, q*sw - pl + j = column, and adds
 * dy * w into its dx and dy * x into that tap's dw. Each (output pixel,
 * tap) inside x is visited once, so dw is complete. */
void fl_cpu_depthwise_bwd(const fl_conv_desc *d, const float *x, const float *w, const float *y, float *dy,
                          float *dx, float dx_beta, float *dw, float *db) {
    const int C = d->c, OC = d->oc, dm = OC / C, KK = d->kh * d->kw;
    const int64_t orows = d->n * d->oh, irows = d->n * d->h;
    int nt = orows * d->ow * OC * KK < 65536 ? 1 : fl_cpu_threads();
    const size_t ndw = dw ? (size_t)KK * OC : 0, ndb = db ? (size_t)OC : 0, per = ndw + ndb;
    float stack_part[DW_STACK];
    float *part = NULL; /* nt blocks of per floats: dw sums, then db sums */
    if (nt > 1 && per) {
        part = (size_t)nt * per <= DW_STACK ? stack_part : malloc((size_t)nt * per * sizeof(float));
        if (!part) nt = 1; /* no memory for the sums: one thread, into dw/db directly */
    }
    const bool act_pass = d->act != FL_ACT_LINEAR || db;
#pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num(), T = omp_get_num_threads();
        float *tdw = part ? part + (size_t)t * per : dw;
        float *tdb = part ? part + (size_t)t * per + ndw : db;
        if (tdw) memset(tdw, 0, ndw * sizeof(float));
        if (tdb) memset(tdb, 0, ndb * sizeof(float));
        if (act_pass) {
            const int64_t r0 = orows * t / T, r1 = orows * (t + 1) / T;
            const size_t off = (size_t)r0 * d->ow * OC;
            fl_cpu_act_grad_rows((r1 - r0) * d->ow, OC, d->act, y + off, dy + off, tdb);
        }
#pragma omp barrier
        const int64_t q0 = irows * t / T, q1 = irows * (t + 1) / T;
        for (int64_t r = q0; r < q1 && (dx || dw); r++) {
            const int64_t n = r / d->h;
            const int row = (int)(r % d->h);
            const float *dyn = dy + (size_t)n * d->oh * d->ow * OC;
            for (int col = 0; col < d->w; col++) {
                const size_t pix = (size_t)r * d->w + col;
                const float *xp = x + pix * C;
                float *dxp = dx ? dx + pix * C : NULL;
                if (dxp && dx_beta == 0.0f) memset(dxp, 0, (size_t)C * sizeof(float));
                for (int i = 0; i < d->kh; i++) {
                    const int th = row + d->pt - i; /* = p * sh */
                    if (th < 0) break;
                    const int p = th / d->sh;
                    if (th != p * d->sh || p >= d->oh) continue;
                    for (int j = 0; j < d->kw; j++) {
                        const int tw = col + d->pl - j; /* = q * sw */
                        if (tw < 0) break;
                        const int q = tw / d->sw;
                        if (tw != q * d->sw || q >= d->ow) continue;
                        const float *g = dyn + ((size_t)p * d->ow + q) * OC;
                        const size_t tap = (size_t)(i * d->kw + j) * OC;
                        if (dm == 1) {
                            if (dxp && tdw) bwd1(C, g, w + tap, xp, dxp, tdw + tap);
                            else if (dxp) madd1(C, g, w + tap, dxp);
                            else madd1(C, g, xp, tdw + tap);
                        } else {
                            if (dxp) dxm(C, dm, g, w + tap, dxp);
                            if (tdw) maddm(C, dm, xp, g, tdw + tap);
                        }
                    }
                }
            }
        }
    }
    if (part) { /* the threads' sums, in thread order */
        if (dw) memcpy(dw, part, ndw * sizeof(float));
        if (db) memcpy(db, part + ndw, ndb * sizeof(float));
        for (int t = 1; t < nt; t++) {
            const float *pt = part + (size_t)t * per;
            for (size_t k = 0; k < ndw; k++) dw[k] += pt[k];
            for (size_t k = 0; k < ndb; k++) db[k] += pt[ndw + k];
        }
        if (part != stack_part) free(part);
    }
}
