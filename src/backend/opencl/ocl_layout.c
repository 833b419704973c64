/*
 * ocl_layout.c — the OpenCL backend's entries for ZeroPadding2D/Cropping2D, UpSampling2D/Resizing, Permute (kernels/layout.cl).
 */
#include "backend/opencl/opencl_internal.h"

#include <string.h>

#include "backend/kernels/layout.cl" /* fl_conv_geom (pool.cl), fl_perm_desc */

_Static_assert(sizeof(fl_perm_desc) == 8 + 16 * 8, "fl_perm_desc: two ints, then int64_t arrays (OpenCL C's layout)");

static void be_pad2d(const fl_conv_desc *d, const float *x, float *y, float beta) {
    const fl_conv_geom g = fl_conv_geom_of(d, d->n);
    ocl_launch l = ocl_args(OCL_k_pad2d);
    ocl_arg_raw(&l, &g, sizeof g); BUF(l, x); BUF(l, y); ocl_arg_f32(&l, beta);
    ocl_run1(&l, g.n * g.oh * g.ow * g.c, 256);
}

static void be_upsample2d_fwd(const fl_conv_desc *d, int bilinear, const float *x, float *y) {
    const fl_conv_geom g = fl_conv_geom_of(d, d->n);
    ocl_launch l = ocl_args(OCL_k_upsample2d_fwd);
    ocl_arg_raw(&l, &g, sizeof g); ocl_arg_i32(&l, bilinear); BUF(l, x); BUF(l, y);
    ocl_run1(&l, g.n * g.oh * g.ow * g.c, 256);
}

static void be_upsample2d_bwd(const fl_conv_desc *d, int bilinear, const float *dy, float *dx, float beta) {
    const fl_conv_geom g = fl_conv_geom_of(d, d->n);
    ocl_launch l = ocl_args(OCL_k_upsample2d_bwd);
    ocl_arg_raw(&l, &g, sizeof g); ocl_arg_i32(&l, bilinear); BUF(l, dy); BUF(l, dx); ocl_arg_f32(&l, beta);
    ocl_run1(&l, g.n * g.h * g.w * g.c, 256);
}

static void be_permute(int ndim, const int64_t *shape, const int *perm, const float *x, float *y, float beta) {
    fl_perm_desc p;
    const int64_t total = fl_perm_desc_of(ndim, shape, perm, &p);
    if (total <= 0) return;
    ocl_launch l = ocl_args(OCL_k_permute);
    ocl_arg_i64(&l, total); ocl_arg_raw(&l, &p, sizeof p); BUF(l, x); BUF(l, y); ocl_arg_f32(&l, beta);
    ocl_run1(&l, total, 256);
}

void ocl_fill_layout(fl_backend *b) {
    b->pad2d = be_pad2d;
    b->upsample2d_fwd = be_upsample2d_fwd;
    b->upsample2d_bwd = be_upsample2d_bwd;
    b->permute = be_permute;
}
