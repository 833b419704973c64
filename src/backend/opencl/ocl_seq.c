/*
 * ocl_seq.c — the OpenCL backend's entries for Embedding, the sequence masks, the masked
 * GlobalAveragePooling1D, the loss masks and sample weights (kernels/seq.cl, which CUDA compiles too).
 */
#include "backend/opencl/opencl_internal.h"

static void be_embedding_fwd(int64_t n, int d, int64_t v, int x_int, const float *x, const float *w, float *y) {
    ocl_launch l = ocl_args(OCL_k_embedding_fwd);
    ocl_arg_i64(&l, n); ocl_arg_i32(&l, d); ocl_arg_i64(&l, v); ocl_arg_i32(&l, x_int); BUF(l, x); BUF(l, w);
    BUF(l, y);
    ocl_run1(&l, n * d, 256);
}

/* the kernel zeroes dw itself (each work item its own rows and column) before it adds */
static void be_embedding_bwd(int64_t n, int d, int64_t v, int x_int, const float *x, const float *dy, float *dw) {
    ocl_launch l = ocl_args(OCL_k_embedding_bwd);
    ocl_arg_i64(&l, n); ocl_arg_i32(&l, d); ocl_arg_i64(&l, v); ocl_arg_i32(&l, x_int); BUF(l, x); BUF(l, dy);
    BUF(l, dw);
    ocl_run1(&l, 64 * (int64_t)d, 128); /* FL_EMB_PARTS items per column */
}

static void be_seq_mask(int64_t rows, int c, int x_int, const float *x, float value, float *m) {
    ocl_launch l = ocl_args(OCL_k_seq_mask);
    ocl_arg_i64(&l, rows); ocl_arg_i32(&l, c); ocl_arg_i32(&l, x_int); BUF(l, x); ocl_arg_f32(&l, value); BUF(l, m);
    ocl_run1(&l, rows, 256);
}

static void be_masked_gap1d_fwd(int64_t n, int64_t t, int c, const float *x, const float *m, float *y) {
    ocl_launch l = ocl_args(OCL_k_masked_gap1d_fwd);
    ocl_arg_i64(&l, n); ocl_arg_i64(&l, t); ocl_arg_i32(&l, c); BUF(l, x); BUF(l, m); BUF(l, y);
    ocl_run1(&l, n * c, 256);
}

static void be_masked_gap1d_bwd(int64_t n, int64_t t, int c, const float *m, const float *dy, float *dx, float beta) {
    ocl_launch l = ocl_args(OCL_k_masked_gap1d_bwd);
    ocl_arg_i64(&l, n); ocl_arg_i64(&l, t); ocl_arg_i32(&l, c); BUF(l, m); BUF(l, dy); BUF(l, dx);
    ocl_arg_f32(&l, beta);
    ocl_run1(&l, n * t * c, 256);
}

/* work-groups of 256: the kernel's count of the valid rows is a tree over 256 items */
static void be_loss_mask(int64_t rows, int c, const float *m, float *row_loss, float *grad, double *acc) {
    ocl_launch l = ocl_args(OCL_k_loss_mask);
    ocl_arg_i64(&l, rows); ocl_arg_i32(&l, c); BUF(l, m); BUF(l, row_loss); BUF(l, grad); BUF(l, acc);
    ocl_run1(&l, grad ? rows * c : rows, 256);
}

static void be_loss_weight(int64_t rows, int c, const float *w, float *row_loss, float *grad) {
    ocl_launch l = ocl_args(OCL_k_loss_weight);
    ocl_arg_i64(&l, rows); ocl_arg_i32(&l, c); BUF(l, w); BUF(l, row_loss); BUF(l, grad);
    ocl_run1(&l, grad ? rows * c : rows, 256);
}

void ocl_fill_seq(fl_backend *b) {
    b->embedding_fwd = be_embedding_fwd;
    b->embedding_bwd = be_embedding_bwd;
    b->seq_mask = be_seq_mask;
    b->masked_gap1d_fwd = be_masked_gap1d_fwd;
    b->masked_gap1d_bwd = be_masked_gap1d_bwd;
    b->loss_mask = be_loss_mask;
    b->loss_weight = be_loss_weight;
}
