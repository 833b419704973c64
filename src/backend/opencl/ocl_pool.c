/*
 * ocl_pool.c — the OpenCL backend's entries for the poolings (max, average, global average) (kernels/pool.cl).
 * The fused conv2d_maxpool_fwd/bwd (ops/fuse.c) stay NULL: they belong to the convolutions (conv.cl); without
 * them a Conv2D and its MaxPooling2D run as two ops.
 */
#include "backend/opencl/opencl_internal.h"

#include "backend/kernels/geom.h" /* fl_conv_geom */


static void be_maxpool_fwd(const fl_conv_desc *d, const float *x, float *y, int32_t *argmax) {
    const fl_conv_geom g = fl_conv_geom_of(d, d->n);
    ocl_launch l = ocl_args(OCL_k_maxpool_fwd);
    ocl_arg_raw(&l, &g, sizeof g); BUF(l, x); BUF(l, y); BUF(l, argmax);
    ocl_run1(&l, g.n * g.oh * g.ow * g.c, 256);
}

static void be_maxpool_bwd(const fl_conv_desc *d, const float *dy, const int32_t *argmax, float *dx, float beta) {
    const fl_conv_geom g = fl_conv_geom_of(d, d->n);
    ocl_launch l = ocl_args(OCL_k_maxpool_bwd);
    ocl_arg_raw(&l, &g, sizeof g); BUF(l, dy); BUF(l, argmax); BUF(l, dx); ocl_arg_f32(&l, beta);
    ocl_run1(&l, g.n * g.h * g.w * g.c, 256);
}

static void be_avgpool_fwd(const fl_conv_desc *d, const float *x, float *y) {
    const fl_conv_geom g = fl_conv_geom_of(d, d->n);
    ocl_launch l = ocl_args(OCL_k_avgpool_fwd);
    ocl_arg_raw(&l, &g, sizeof g); BUF(l, x); BUF(l, y);
    ocl_run1(&l, g.n * g.oh * g.ow * g.c, 256);
}

static void be_avgpool_bwd(const fl_conv_desc *d, const float *dy, float *dx, float beta) {
    const fl_conv_geom g = fl_conv_geom_of(d, d->n);
    ocl_launch l = ocl_args(OCL_k_avgpool_bwd);
    ocl_arg_raw(&l, &g, sizeof g); BUF(l, dy); BUF(l, dx); ocl_arg_f32(&l, beta);
    ocl_run1(&l, g.n * g.h * g.w * g.c, 256);
}

static void be_gap_fwd(int64_t n, int64_t hw, int c, const float *x, float *y) {
    ocl_launch l = ocl_args(OCL_k_gap_fwd);
    ocl_arg_i64(&l, n); ocl_arg_i64(&l, hw); ocl_arg_i32(&l, c); BUF(l, x); BUF(l, y);
    ocl_run1(&l, n * c, 256);
}

static void be_gap_bwd(int64_t n, int64_t hw, int c, const float *dy, float *dx, float beta) {
    ocl_launch l = ocl_args(OCL_k_gap_bwd);
    ocl_arg_i64(&l, n); ocl_arg_i64(&l, hw); ocl_arg_i32(&l, c); BUF(l, dy); BUF(l, dx); ocl_arg_f32(&l, beta);
    ocl_run1(&l, n * hw * c, 256);
}

void ocl_fill_pool(fl_backend *b) {
    b->maxpool_fwd = be_maxpool_fwd;
    b->maxpool_bwd = be_maxpool_bwd;
    b->avgpool_fwd = be_avgpool_fwd;
    b->avgpool_bwd = be_avgpool_bwd;
    b->gap_fwd = be_gap_fwd;
    b->gap_bwd = be_gap_bwd;
}
