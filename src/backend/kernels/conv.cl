/*
 * conv.cl — the convolutions' kernels on the GPU, written once for CUDA and OpenCL (dialect.h), over NHWC data
 * and Keras's kernel layout w[kh, kw, c/groups, oc]; the geometry is geom.h's fl_conv_geom.
 *
 *   k_im2col, k_col2im    Conv2D and Conv2DTranspose as matrix products (the OpenCL plugin; CUDA has cuDNN):
 *                         col[rows, K] with rows = (n, p, q) the output pixels and K = (i, j, ci) the taps of
 *                         one group's cg channels, as the CPU's im2col (cpu_conv.c); col2im is its transpose
 *                         as a gather (one thread per input element over the taps that read it: no atomics)
 *   k_depthwise_*         DepthwiseConv2D, cpu_depthwise.c's twins (both plugins)
 *   k_hwio_to_ohwi, ...   the CUDA plugin's copies into and out of cuDNN's layouts
 */
#include "backend/kernels/geom.h"

/* ------------------------------------------------------------ im2col / col2im */

/* col[r, k] for the g.n samples of x (x: the first of them), channels [c0, c0 + cg): K = kh*kw*cg, tap (i, j)
 * reads x[p*sh - pt + i*dh, q*sw - pl + j*dw] (outside the image: 0) */
FL_KERNEL k_im2col(fl_conv_geom g, int c0, int cg, FL_BUF(const float, x), FL_BUF(float, col)) {
    FL_BIND(const float, x);
    FL_BIND(float, col);
    const int64_t K = (int64_t)g.kh * g.kw * cg;
    const int64_t total = g.n * g.oh * g.ow * K;
    FL_FOR(e, total) {
        const int64_t r = e / K;
        const int k = (int)(e - r * K);
        const int ci = k % cg, tap = k / cg, i = tap / g.kw, j = tap - i * g.kw;
        const int q = (int)(r % g.ow);
        const int64_t t = r / g.ow;
        const int p = (int)(t % g.oh);
        const int64_t n = t / g.oh;
        const int ih = p * g.sh - g.pt + i * g.dh, iw = q * g.sw - g.pl + j * g.dw;
        col[e] = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w ? x[((n * g.h + ih) * g.w + iw) * g.c + c0 + ci] : 0.0f;
    }
}

/* dx[n, ih, iw, c0 + ci] (beta: +)= the sum of col's entries that im2col took from that element: over the taps
 * (i, j), in order, whose output pixel (p, q) it feeds (p*sh - pt + i*dh = ih, q*sw - pl + j*dw = iw) */
FL_KERNEL k_col2im(fl_conv_geom g, int c0, int cg, FL_BUF(const float, col), FL_BUF(float, dx), float beta) {
    FL_BIND(const float, col);
    FL_BIND(float, dx);
    const int64_t K = (int64_t)g.kh * g.kw * cg;
    const int64_t total = g.n * g.h * g.w * cg;
    FL_FOR(e, total) {
        int64_t t = e;
        const int ci = (int)(t % cg); t /= cg;
        const int iw = (int)(t % g.w); t /= g.w;
        const int ih = (int)(t % g.h);
        const int64_t n = t / g.h;
        float s = 0.0f;
        for (int i = 0; i < g.kh; i++) {
            const int th = ih + g.pt - i * g.dh; /* = p * sh */
            if (th < 0) break;
            const int p = th / g.sh;
            if (th != p * g.sh || p >= g.oh) continue;
            for (int j = 0; j < g.kw; j++) {
                const int tw = iw + g.pl - j * g.dw; /* = q * sw */
                if (tw < 0) break;
                const int q = tw / g.sw;
                if (tw != q * g.sw || q >= g.ow) continue;
                s += col[((n * g.oh + p) * g.ow + q) * K + (int64_t)(i * g.kw + j) * cg + ci];
            }
        }
        const int64_t o = ((n * g.h + ih) * g.w + iw) * g.c + c0 + ci;
        dx[o] = beta == 0.0f ? s : dx[o] + s;
    }
}

/* ------------------------------------------------------------------ depthwise
 *
 * cpu_depthwise.c's twins over NHWC data (CUDA: no cuDNN, whose grouped convolutions want the kernel
 * transposed and offer no deterministic backward-filter algorithm for every shape). x [n, h, w, c], w [kh, kw,
 * c, dm], b [c*dm], y [n, oh, ow, oc], oc = c*dm,
 *
 *     y[n, p, q, c*dm+m] = act(b[c*dm+m] + sum_{i,j} x[n, p*sh-pt+i*dh, q*sw-pl+j*dw, c] * w[i, j, c, m])
 *
 * Forward: one thread per output element, the output channel fastest, so that neighbouring threads read
 * neighbouring channels of x and w; the window clamped to the image and summed from the bias in the CPU's order
 * (rows, then columns). Backward: dy *= act'(y) and the bias gradient as Dense's (the host's); dx as a gather,
 * one thread per input element over the taps whose output pixel it feeds (the CPU's bwd_row_body); dw as column
 * sums over the output pixels (reduce.cl's FL_COLSUM_BODY). No atomics: deterministic. */

/* The taps [*t0, *t1) of a k-tap window starting at o0, taps dil apart, that land inside [0, n)
 * (cpu_depthwise.c's tap_range). */
FL_DEV void fl_dw_tap_range(int o0, int k, int dil, int n, int *t0, int *t1) {
    *t0 = o0 < 0 ? (-o0 + dil - 1) / dil : 0;
    *t1 = o0 > n - 1 ? 0 : min(k, (n - 1 - o0) / dil + 1);
    if (*t1 < *t0) *t1 = *t0;
}

FL_KERNEL k_depthwise_fwd(fl_conv_geom g, FL_BUF(const float, x), FL_BUF(const float, w), FL_BUF(const float, b),
                          FL_BUF(float, y)) {
    FL_BIND(const float, x);
    FL_BIND(const float, w);
    FL_BIND(const float, b);
    FL_BIND(float, y);
    const int OC = g.oc, dm = g.oc / g.c;
    const int64_t total = g.n * g.oh * g.ow * OC;
    FL_FOR(e, total) {
        int64_t t = e;
        const int o = (int)(t % OC); t /= OC;
        const int q = (int)(t % g.ow); t /= g.ow;
        const int p = (int)(t % g.oh);
        const int64_t n = t / g.oh;
        const int c = o / dm;
        const int ih0 = p * g.sh - g.pt, iw0 = q * g.sw - g.pl;
        int i0, i1, j0, j1;
        fl_dw_tap_range(ih0, g.kh, g.dh, g.h, &i0, &i1);
        fl_dw_tap_range(iw0, g.kw, g.dw, g.w, &j0, &j1);
        const FL_G float *xn = x + n * g.h * g.w * g.c;
        float acc = b ? b[o] : 0.0f;
        for (int i = i0; i < i1; i++)
            for (int j = j0; j < j1; j++)
                acc += xn[((int64_t)(ih0 + i * g.dh) * g.w + (iw0 + j * g.dw)) * g.c + c] *
                       w[(int64_t)(i * g.kw + j) * OC + o];
        y[e] = fl_act_forward(g.act, acc);
    }
}

/* dx[n, row, col, c] (beta: +)= sum over the taps (i, j) whose output pixel (p, q) it feeds (p*sh - pt + i*dh =
 * row, q*sw - pl + j*dw = col) of sum_m dy[n, p, q, c*dm+m] * w[i, j, c, m]; taps in the CPU's order. */
FL_KERNEL k_depthwise_bwd_dx(fl_conv_geom g, FL_BUF(const float, w), FL_BUF(const float, dy), FL_BUF(float, dx),
                             float beta) {
    FL_BIND(const float, w);
    FL_BIND(const float, dy);
    FL_BIND(float, dx);
    const int C = g.c, OC = g.oc, dm = g.oc / g.c;
    const int64_t total = g.n * g.h * g.w * C;
    FL_FOR(e, total) {
        int64_t t = e;
        const int c = (int)(t % C); t /= C;
        const int col = (int)(t % g.w); t /= g.w;
        const int row = (int)(t % g.h);
        const int64_t n = t / g.h;
        const FL_G float *dyn = dy + n * g.oh * g.ow * OC;
        float s = beta == 0.0f ? 0.0f : dx[e];
        for (int i = 0; i < g.kh; i++) {
            const int th = row + g.pt - i * g.dh; /* = p * sh */
            if (th < 0) break;
            const int p = th / g.sh;
            if (th != p * g.sh || p >= g.oh) continue;
            for (int j = 0; j < g.kw; j++) {
                const int tw = col + g.pl - j * g.dw; /* = q * sw */
                if (tw < 0) break;
                const int q = tw / g.sw;
                if (tw != q * g.sw || q >= g.ow) continue;
                const FL_G float *gp = dyn + ((int64_t)p * g.ow + q) * OC + (int64_t)c * dm;
                const FL_G float *wp = w + (int64_t)(i * g.kw + j) * OC + (int64_t)c * dm;
                if (dm == 1) {
                    s += gp[0] * wp[0];
                } else {
                    float u = 0.0f;
                    for (int m = 0; m < dm; m++) u += gp[m] * wp[m];
                    s += u;
                }
            }
        }
        dx[e] = s;
    }
}

/* dw[i, j, o] = sum over the output pixels r = (n, p, q) whose tap (i, j) lies inside x of dy[r, o] * x[n,
 * p*sh-pt+i*dh, q*sw-pl+j*dw, o/dm]: column tap*oc + o of a [n*oh*ow, kh*kw*oc] matrix (neighbouring threads:
 * neighbouring channels) */
FL_DEV float fl_depthwise_dw_term(const fl_conv_geom *g, const FL_G float *x, const FL_G float *dy, int64_t r,
                                  int col) {
    const int OC = g->oc;
    const int o = col % OC, tap = col / OC, i = tap / g->kw, j = tap - i * g->kw;
    int64_t t = r;
    const int q = (int)(t % g->ow); t /= g->ow;
    const int p = (int)(t % g->oh);
    const int64_t n = t / g->oh;
    const int ih = p * g->sh - g->pt + i * g->dh, iw = q * g->sw - g->pl + j * g->dw;
    if (ih < 0 || ih >= g->h || iw < 0 || iw >= g->w) return 0.0f;
    return dy[r * OC + o] * x[((n * g->h + ih) * g->w + iw) * g->c + o / (OC / g->c)];
}

/* the partial stage of those column sums (rows = n*oh*ow, n = kh*kw*oc columns); k_colsum_final adds the chunks */
FL_KERNEL k_colsum_depthwise_dw(int64_t rows, int n, int chunks, fl_conv_geom g, FL_BUF(const float, x),
                                FL_BUF(const float, dy), FL_BUF(float, partial)) {
    FL_BIND(const float, x);
    FL_BIND(const float, dy);
    FL_BIND(float, partial);
    FL_COLSUM_BODY(fl_depthwise_dw_term(&g, x, dy, r, j))
}

/* ------------------------------------------------------ CUDA's cuDNN layouts */

/* (kh, kw, c, oc) <-> (oc, kh, kw, c) */
FL_KERNEL k_hwio_to_ohwi(int64_t total, int khkwc, int oc, FL_BUF(const float, src), FL_BUF(float, dst)) {
    FL_BIND(const float, src);
    FL_BIND(float, dst);
    FL_FOR(e, total) {
        const int64_t o = e / khkwc, r = e - o * khkwc; /* dst index e = o*khkwc + r */
        dst[e] = src[r * oc + o];
    }
}
FL_KERNEL k_ohwi_to_hwio(int64_t total, int khkwc, int oc, FL_BUF(const float, src), FL_BUF(float, dst)) {
    FL_BIND(const float, src);
    FL_BIND(float, dst);
    FL_FOR(e, total) {
        const int64_t r = e / oc, o = e - r * oc; /* dst index e = r*oc + o */
        dst[e] = src[o * khkwc + r];
    }
}

/* x (n, h, w, c) -> xp (n, h+eh, w+ew, c): an extra zero row/column after, for the asymmetric "same" padding
 * cuDNN does not do itself */
FL_KERNEL k_pad_after(int64_t total, int h, int w, int c, int eh, int ew, FL_BUF(const float, x), FL_BUF(float, xp)) {
    FL_BIND(const float, x);
    FL_BIND(float, xp);
    const int hp = h + eh, wp = w + ew;
    FL_FOR(e, total) {
        int64_t t = e;
        const int ch = (int)(t % c); t /= c;
        const int iw = (int)(t % wp); t /= wp;
        const int ih = (int)(t % hp);
        const int64_t n = t / hp;
        xp[e] = (ih < h && iw < w) ? x[((n * h + ih) * w + iw) * c + ch] : 0.0f;
    }
}
/* dx (n, h, w, c) (+)= the top-left part of dxp (n, h+eh, w+ew, c) */
FL_KERNEL k_crop_add(int64_t total, int h, int w, int c, int eh, int ew, FL_BUF(const float, dxp), FL_BUF(float, dx),
                     float beta) {
    FL_BIND(const float, dxp);
    FL_BIND(float, dx);
    FL_FOR(e, total) {
        int64_t t = e;
        const int ch = (int)(t % c); t /= c;
        const int iw = (int)(t % w); t /= w;
        const int ih = (int)(t % h);
        const int64_t n = t / h;
        const float v = dxp[((n * (h + eh) + ih) * (w + ew) + iw) * c + ch];
        dx[e] = beta == 0.0f ? v : dx[e] + v;
    }
}
