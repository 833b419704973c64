/*
 * pool.cl — the poolings (max, average, global average) on the GPU, written once for CUDA and OpenCL (dialect.h).
 * The CPU's twins are cpu_conv.c's fl_cpu_maxpool_*, fl_cpu_avgpool_* and fl_cpu_gap_*. Every backward is a
 * gather, one thread per input element over the outputs that read it (no atomics: runs repeat exactly).
 * The kernels take geom.h's fl_conv_geom.
 */
#ifndef FL_KERNELS_POOL_CL
#define FL_KERNELS_POOL_CL

#include "backend/kernels/geom.h" /* fl_conv_geom */

#if defined(FL_KERNELS_DIALECT_H)

/* a product rounded on its own, as the CPU rounds it (no fused multiply-add with the sum it goes into): nvcc
 * fuses a * b + c across statements unless told (__fmul_rn); OpenCL C contracts only inside one expression,
 * and a function's product is an expression of its own */
#if defined(__OPENCL_VERSION__)
FL_DEV float fl_pool_mul_rn(float a, float b) { return a * b; }
#else
FL_DEV float fl_pool_mul_rn(float a, float b) { return __fmul_rn(a, b); }
#endif

/* argmax: per output element, the offset (ih * w + iw) * c + c of its maximum within the sample (the first
 * one on ties, as on the CPU), or -1 when the window holds no input (y = -inf) */
FL_KERNEL k_maxpool_fwd(fl_conv_geom d, FL_BUF(const float, x), FL_BUF(float, y), FL_BUF(int32_t, argmax)) {
    FL_BIND(const float, x);
    FL_BIND(float, y);
    FL_BIND(int32_t, argmax);
    FL_FOR(e, d.n * (int64_t)d.oh * d.ow * d.c) {
        int64_t t = e;
        int c = (int)(t % d.c); t /= d.c;
        int ow = (int)(t % d.ow); t /= d.ow;
        int oh = (int)(t % d.oh);
        int64_t n = t / d.oh;
        const FL_G float *xs = x + n * (int64_t)d.h * d.w * d.c;
        float best = -INFINITY;
        int32_t arg = -1;
        for (int kh = 0; kh < d.kh; kh++) {
            int ih = oh * d.sh - d.pt + kh;
            if (ih < 0 || ih >= d.h) continue;
            for (int kw = 0; kw < d.kw; kw++) {
                int iw = ow * d.sw - d.pl + kw;
                if (iw < 0 || iw >= d.w) continue;
                int32_t off = (int32_t)((ih * d.w + iw) * d.c + c);
                float v = xs[off];
                if (v > best || arg < 0) { best = v; arg = off; } /* the first maximum wins */
            }
        }
        y[e] = best;
        argmax[e] = arg;
    }
}

/* The outputs o0..o1 (inclusive; none when o0 > o1) of a pooling axis whose window [o*s - pad, o*s - pad + k)
 * covers input position i: o*s <= i + pad and o*s > i + pad - k. */
FL_DEV void fl_pool_cover(int i, int pad, int k, int s, int on, int *o0, int *o1) {
    int a = i + pad - k + 1; /* the first o has o*s >= a */
    *o0 = a <= 0 ? 0 : (a + s - 1) / s;
    int b = (i + pad) / s; /* i + pad >= 0 */
    *o1 = b < on - 1 ? b : on - 1;
}

/* dx (beta: +)= the gradients of the windows whose maximum the element was, added in the CPU's order (output
 * rows, then columns, onto 0 or the old dx) */
FL_KERNEL k_maxpool_bwd(fl_conv_geom d, FL_BUF(const float, dy), FL_BUF(const int32_t, argmax), FL_BUF(float, dx),
                        float beta) {
    FL_BIND(const float, dy);
    FL_BIND(const int32_t, argmax);
    FL_BIND(float, dx);
    FL_FOR(e, d.n * (int64_t)d.h * d.w * d.c) {
        int64_t t = e;
        int c = (int)(t % d.c); t /= d.c;
        int iw = (int)(t % d.w); t /= d.w;
        int ih = (int)(t % d.h);
        int64_t n = t / d.h;
        int32_t off = (int32_t)((ih * d.w + iw) * d.c + c);
        float g = beta == 0.0f ? 0.0f : dx[e];
        int oh0, oh1, ow0, ow1;
        fl_pool_cover(ih, d.pt, d.kh, d.sh, d.oh, &oh0, &oh1);
        fl_pool_cover(iw, d.pl, d.kw, d.sw, d.ow, &ow0, &ow1);
        for (int oh = oh0; oh <= oh1; oh++)
            for (int ow = ow0; ow <= ow1; ow++) {
                int64_t o = ((n * d.oh + oh) * d.ow + ow) * d.c + c;
                if (argmax[o] == off) g += dy[o];
            }
        dx[e] = g;
    }
}

/* Windows clipped to the input, as Keras pads "same" pooling: the mean of the elements inside (the sum times
 * 1/count) */
FL_KERNEL k_avgpool_fwd(fl_conv_geom d, FL_BUF(const float, x), FL_BUF(float, y)) {
    FL_BIND(const float, x);
    FL_BIND(float, y);
    FL_FOR(e, d.n * (int64_t)d.oh * d.ow * d.c) {
        int64_t t = e;
        int c = (int)(t % d.c); t /= d.c;
        int ow = (int)(t % d.ow); t /= d.ow;
        int oh = (int)(t % d.oh);
        int64_t n = t / d.oh;
        const FL_G float *xs = x + n * (int64_t)d.h * d.w * d.c;
        float s = 0;
        int cnt = 0;
        for (int kh = 0; kh < d.kh; kh++) {
            int ih = oh * d.sh - d.pt + kh;
            if (ih < 0 || ih >= d.h) continue;
            for (int kw = 0; kw < d.kw; kw++) {
                int iw = ow * d.sw - d.pl + kw;
                if (iw < 0 || iw >= d.w) continue;
                s += xs[(ih * d.w + iw) * d.c + c];
                cnt++;
            }
        }
        y[e] = s * (cnt ? 1.0f / (float)cnt : 0.0f);
    }
}

/* dx (beta: +)= the gradient of each window that covers the element (fl_pool_cover) times 1/count of the
 * window's elements inside the input: the CPU's sum in its order (output rows, then columns, onto 0 or the
 * old dx), each product rounded on its own */
FL_KERNEL k_avgpool_bwd(fl_conv_geom d, FL_BUF(const float, dy), FL_BUF(float, dx), float beta) {
    FL_BIND(const float, dy);
    FL_BIND(float, dx);
    FL_FOR(e, d.n * (int64_t)d.h * d.w * d.c) {
        int64_t t = e;
        int c = (int)(t % d.c); t /= d.c;
        int iw = (int)(t % d.w); t /= d.w;
        int ih = (int)(t % d.h);
        int64_t n = t / d.h;
        int oh0, oh1, ow0, ow1;
        fl_pool_cover(ih, d.pt, d.kh, d.sh, d.oh, &oh0, &oh1);
        fl_pool_cover(iw, d.pl, d.kw, d.sw, d.ow, &ow0, &ow1);
        float g = beta == 0.0f ? 0.0f : dx[e];
        for (int oh = oh0; oh <= oh1; oh++) {
            int h0 = oh * d.sh - d.pt;
            int rows = (h0 + d.kh > d.h ? d.h : h0 + d.kh) - (h0 < 0 ? 0 : h0);
            for (int ow = ow0; ow <= ow1; ow++) {
                int w0 = ow * d.sw - d.pl;
                int cols = (w0 + d.kw > d.w ? d.w : w0 + d.kw) - (w0 < 0 ? 0 : w0);
                float inv = 1.0f / (float)(rows * cols); /* >= 1 element: the window covers (ih, iw) */
                g += fl_pool_mul_rn(dy[((n * d.oh + oh) * d.ow + ow) * d.c + c], inv);
            }
        }
        dx[e] = g;
    }
}

/* GlobalAveragePooling2D over x[n, hw, c]: y[n, c] = the sum in order / hw; backward dx (beta: +)= dy / hw */
FL_KERNEL k_gap_fwd(int64_t n, int64_t hw, int c, FL_BUF(const float, x), FL_BUF(float, y)) {
    FL_BIND(const float, x);
    FL_BIND(float, y);
    FL_FOR(e, n * c) {
        int64_t i = e / c;
        int k = (int)(e % c);
        float s = 0;
        for (int64_t p = 0; p < hw; p++) s += x[(i * hw + p) * c + k];
        y[e] = s / (float)hw;
    }
}

FL_KERNEL k_gap_bwd(int64_t n, int64_t hw, int c, FL_BUF(const float, dy), FL_BUF(float, dx), float beta) {
    FL_BIND(const float, dy);
    FL_BIND(float, dx);
    FL_FOR(e, n * hw * c) {
        int64_t i = e / (hw * c);
        int k = (int)(e % c);
        float g = dy[i * c + k] / (float)hw;
        dx[e] = beta == 0.0f ? g : dx[e] + g;
    }
}

#endif /* FL_KERNELS_DIALECT_H */
#endif
