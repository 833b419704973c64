/*
 * layout.cl — ZeroPadding2D/Cropping2D, UpSampling2D/Resizing, Permute on the GPU, written once for CUDA and OpenCL (dialect.h).
 * cpu_layout.c's twins; the resize taps and weights are ops/math.h's (fl_resize_*), which the CPU calls too.
 * Every backward is a gather, one thread per element of dx (no atomics: runs repeat exactly).
 *
 * The host code of both plugins includes this file too, for fl_perm_desc and fl_perm_desc_of alone (the
 * kernels below compile only under dialect.h).
 */
#ifndef FL_KERNELS_LAYOUT_CL
#define FL_KERNELS_LAYOUT_CL

#include "backend/kernels/geom.h" /* fl_conv_geom */

/* Permute's descriptor: y's shape and, per axis of y, the stride of x along it. Numbers only, without
 * padding: the same layout under C, CUDA and OpenCL C. */
#define FL_PERM_MAX_DIMS 8 /* backend.h's permute: at most 8 dimensions */
typedef struct fl_perm_desc {
    int ndim, unused_;
    int64_t yshape[FL_PERM_MAX_DIMS], ystep[FL_PERM_MAX_DIMS];
} fl_perm_desc;

#if !defined(__OPENCL_VERSION__)
/* the host's: the descriptor of y = x with y's axis a being x's axis perm[a] (x row-major of shape[ndim]);
 * returns the elements of y, 0 when there is nothing to do (none, or ndim outside [1, 8]) */
static inline int64_t fl_perm_desc_of(int ndim, const int64_t *shape, const int *perm, fl_perm_desc *p) {
    int64_t xstride[FL_PERM_MAX_DIMS] = {0}, total = 1;
    memset(p, 0, sizeof *p);
    if (ndim < 1 || ndim > FL_PERM_MAX_DIMS) return 0;
    p->ndim = ndim;
    for (int a = ndim - 1; a >= 0; a--) {
        xstride[a] = total;
        total *= shape[a];
    }
    for (int a = 0; a < ndim; a++) {
        p->yshape[a] = shape[perm[a]];
        p->ystep[a] = xstride[perm[a]];
    }
    return total;
}
#endif

#if defined(FL_KERNELS_DIALECT_H)

/* zero padding / cropping (fl_cpu_pad2d's twin): one thread per output element, y (beta: +)= x at
 * (i - pt, j - pl) inside x, else 0. The backward is the same call with the roles swapped (ops.c). */
FL_KERNEL k_pad2d(fl_conv_geom d, FL_BUF(const float, x), FL_BUF(float, y), float beta) {
    FL_BIND(const float, x);
    FL_BIND(float, y);
    FL_FOR(e, d.n * d.oh * d.ow * (int64_t)d.c) {
        int64_t c = e % d.c, r = e / d.c;
        int j = (int)(r % d.ow);
        r /= d.ow;
        int i = (int)(r % d.oh);
        int64_t n = r / d.oh;
        int si = i - d.pt, sj = j - d.pl;
        float v = si >= 0 && si < d.h && sj >= 0 && sj < d.w ? x[((n * d.h + si) * d.w + sj) * d.c + c] : 0.0f;
        y[e] = beta == 0.0f ? v : y[e] + v;
    }
}

/* UpSampling2D and Resizing (any h x w -> oh x ow), forward: one thread per output element, channels fastest;
 * the bilinear blend's products each rounded on their own and summed in the CPU's order */
FL_KERNEL k_upsample2d_fwd(fl_conv_geom d, int bilinear, FL_BUF(const float, x), FL_BUF(float, y)) {
    FL_BIND(const float, x);
    FL_BIND(float, y);
    const int C = d.c;
    FL_FOR(e, d.n * (int64_t)d.oh * d.ow * C) {
        int64_t t = e;
        const int c = (int)(t % C); t /= C;
        const int j = (int)(t % d.ow); t /= d.ow;
        const int i = (int)(t % d.oh);
        const int64_t n = t / d.oh;
        const FL_G float *xs = x + n * d.h * d.w * C + c;
        if (!bilinear) {
            y[e] = xs[((int64_t)fl_resize_nearest(i, d.h, d.oh) * d.w + fl_resize_nearest(j, d.w, d.ow)) * C];
            continue;
        }
        int i0, i1, j0, j1;
        float fh, fw;
        fl_resize_taps(i, d.h, d.oh, &i0, &i1, &fh);
        fl_resize_taps(j, d.w, d.ow, &j0, &j1, &fw);
        const float w00 = (1 - fh) * (1 - fw), w01 = (1 - fh) * fw, w10 = fh * (1 - fw), w11 = fh * fw;
        const FL_G float *x0 = xs + (int64_t)i0 * d.w * C, *x1 = xs + (int64_t)i1 * d.w * C;
        y[e] = fl_pool_mul_rn(w00, x0[(int64_t)j0 * C]) + fl_pool_mul_rn(w01, x0[(int64_t)j1 * C]) +
               fl_pool_mul_rn(w10, x1[(int64_t)j0 * C]) + fl_pool_mul_rn(w11, x1[(int64_t)j1 * C]);
    }
}

/* Backward: one thread per input element, over the outputs within reach (fl_resize_reach) in the CPU's order
 * (rows, then columns), each adding its gradient times the weight with which it read the element */
FL_KERNEL k_upsample2d_bwd(fl_conv_geom d, int bilinear, FL_BUF(const float, dy), FL_BUF(float, dx), float beta) {
    FL_BIND(const float, dy);
    FL_BIND(float, dx);
    const int C = d.c;
    const int64_t orow = (int64_t)d.ow * C;
    FL_FOR(e, d.n * (int64_t)d.h * d.w * C) {
        int64_t t = e;
        const int c = (int)(t % C); t /= C;
        const int j = (int)(t % d.w); t /= d.w;
        const int i = (int)(t % d.h);
        const int64_t n = t / d.h;
        const FL_G float *dys = dy + n * d.oh * orow + c;
        float g = beta == 0.0f ? 0.0f : dx[e];
        int o0, o1, q0, q1;
        fl_resize_reach(i, d.h, d.oh, &o0, &o1);
        fl_resize_reach(j, d.w, d.ow, &q0, &q1);
        for (int oi = o0; oi < o1; oi++) {
            const float wh = fl_resize_weight(bilinear, oi, i, d.h, d.oh);
            if (wh == 0.0f) continue;
            const FL_G float *gr = dys + (int64_t)oi * orow;
            for (int q = q0; q < q1; q++) {
                const float ww = fl_resize_weight(bilinear, q, j, d.w, d.ow);
                if (ww == 0.0f) continue;
                g += fl_pool_mul_rn(wh * ww, gr[(int64_t)q * C]);
            }
        }
        dx[e] = g;
    }
}

/* Permute (fl_cpu_permute's twin): one thread per element of y, whose index is split over y's shape and
 * dotted with x's strides of the axes it takes (ystep); y (beta: +)= x there */
FL_KERNEL k_permute(int64_t total, fl_perm_desc p, FL_BUF(const float, x), FL_BUF(float, y), float beta) {
    FL_BIND(const float, x);
    FL_BIND(float, y);
    FL_FOR(e, total) {
        int64_t off = 0, rem = e;
        for (int a = p.ndim - 1; a >= 0; a--) {
            off += (rem % p.yshape[a]) * p.ystep[a];
            rem /= p.yshape[a];
        }
        y[e] = beta == 0.0f ? x[off] : y[e] + x[off];
    }
}

#endif /* FL_KERNELS_DIALECT_H */
#endif
