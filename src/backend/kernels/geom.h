/*
 * geom.h — the geometry the kernels of conv.cl (Conv2D's im2col/col2im, DepthwiseConv2D, the CUDA plugin's
 * layout copies), pool.cl (the poolings) and layout.cl (padding and cropping, resizing) take: fl_conv_desc's numbers without its pointers (pre, res), which an OpenCL
 * kernel cannot be passed, with the dilation and groups read as at least 1. Passed by value: the same layout
 * in C, CUDA and OpenCL C (one int64_t, then 16 ints: 72 bytes, no padding).
 */
#ifndef FL_KERNELS_GEOM_H
#define FL_KERNELS_GEOM_H

#if !defined(__OPENCL_VERSION__)
#include <stdint.h>
#endif

typedef struct fl_conv_geom {
    int64_t n;               /* samples (of this launch: a chunk's) */
    int h, w, c;             /* input */
    int oh, ow, oc;          /* output */
    int kh, kw, sh, sw;      /* window and strides */
    int pt, pl;              /* padding before (negative: cropping, pad2d); the rest falls after */
    int dh, dw, groups, act; /* dilation and groups (>= 1), the fused activation */
} fl_conv_geom;

#if !defined(__OPENCL_VERSION__)
/* the host's: from the backend's descriptor (backend/backend.h, included before), for n samples */
static inline fl_conv_geom fl_conv_geom_of(const fl_conv_desc *d, int64_t n) {
    fl_conv_geom g = {n,     d->h,  d->w,  d->c,  d->oh, d->ow, d->oc, d->kh,
                      d->kw, d->sh, d->sw, d->pt, d->pl, fl_conv_dil_h(d), fl_conv_dil_w(d), fl_conv_groups(d),
                      d->act};
    return g;
}
#endif

#endif
