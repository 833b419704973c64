/*
 * ocl_norm.c — the OpenCL backend's entries for BatchNormalization (with the fused ReLU/LeakyReLU and the Add
 * it feeds), LayerNormalization, Normalization, Softmax(axis), PReLU (kernels/norm.cl). The sums over the
 * batch are reduce.cl's deterministic column sums: a summand kernel of norm.cl for the partial stage, then
 * k_colsum_final.
 */
#include "backend/opencl/opencl_internal.h"

#include <math.h>

#include "ops/math.h"

/* ---------------------------------------------------------------- scratch */

/* a device buffer of at least n floats, kept for the next call (as ocl_colsum_rows keeps its partial sums) */
typedef struct scratch { float *p; size_t n; } scratch;
static float *scratch_get(scratch *s, size_t n) {
    if (n > s->n) {
        ocl_free(s->p);
        s->p = ocl_alloc(n * sizeof(float));
        s->n = s->p ? n : 0;
    }
    return s->p;
}
static scratch g_partial, g_bn;

/* out[j] = sum_r f(r, j) over j < n: l is the summand kernel with its arguments up to (not with) partial */
static void colsum_run(ocl_launch *l, int n, int chunks, float *out) {
    float *p = scratch_get(&g_partial, (size_t)chunks * (size_t)n);
    if (!p) { l->bad = 1; return; }
    BUF(*l, p);
    ocl_run2(l, (size_t)(n + 31) / 32 * 32, (size_t)chunks * 8, 32, 8);
    ocl_launch f = ocl_args(OCL_k_colsum_final);
    ocl_arg_i32(&f, n); ocl_arg_i32(&f, chunks); BUF(f, p); BUF(f, out); ocl_arg_f32(&f, 0.0f);
    ocl_run1(&f, n, 256);
}
enum { CHUNKS = 64 }; /* FL_COLSUM_CHUNKS */

/* the fused ReLU: its cap (0: none) and negative slope, as the CPU's bn_relu */
static float relu_cap(int act) { return act == FL_ACT_LINEAR ? 0.0f : act == FL_ACT_RELU6 ? 6.0f : INFINITY; }

/* ------------------------------------------------------ BatchNormalization */

/* the statistics (save_mean, save_invstd, the moving ones), s and t into st (2c floats), and y where given */
static void bn_train(const fl_bn_desc *d, int act, const float *x, const float *gamma, const float *beta, float *y,
                     float *st, float *save_mean, float *save_invstd, float *mm, float *mv, float *dev2) {
    const int c = d->c;
    ocl_colsum_rows(d->m, c, x, c, save_mean); /* the sums: k_bn_stats divides */
    ocl_launch l = ocl_args(OCL_k_axpby);
    ocl_arg_i64(&l, c); ocl_arg_f32(&l, 1.0f / (float)d->m); BUF(l, save_mean); ocl_arg_f32(&l, 0.0f);
    BUF(l, save_mean);
    ocl_run1(&l, c, 256);
    l = ocl_args(OCL_k_colsum_bn_dev2);
    ocl_arg_i64(&l, d->m); ocl_arg_i32(&l, c); ocl_arg_i32(&l, CHUNKS); BUF(l, x); BUF(l, save_mean);
    colsum_run(&l, c, CHUNKS, dev2);
    l = ocl_args(OCL_k_bn_stats);
    ocl_arg_i32(&l, c); ocl_arg_i64(&l, d->m); ocl_arg_f32(&l, d->eps); ocl_arg_f32(&l, d->momentum); BUF(l, gamma);
    BUF(l, beta); BUF(l, save_mean); BUF(l, dev2); BUF(l, save_invstd); BUF(l, mm); BUF(l, mv); BUF(l, st);
    ocl_run1(&l, c, 256);
    if (!y) return; /* the Add or convolution after it applies s and t */
    l = ocl_args(OCL_k_bn_apply);
    ocl_arg_i64(&l, d->m * c); ocl_arg_i32(&l, c); BUF(l, x); BUF(l, st); ocl_arg_f32(&l, relu_cap(act));
    ocl_arg_f32(&l, act == FL_ACT_LINEAR ? 0.0f : d->slope); BUF(l, y);
    ocl_run1(&l, d->m * c, 256);
}

static void be_bn_fwd_train(const fl_bn_desc *d, const float *x, const float *gamma, const float *beta, float *y,
                            float *save_mean, float *save_invstd, float *mm, float *mv) {
    float *t = scratch_get(&g_bn, (size_t)d->c * 5);
    if (t) bn_train(d, FL_ACT_LINEAR, x, gamma, beta, y, t, save_mean, save_invstd, mm, mv, t + 2 * d->c);
}

static void be_bn_fwd_train_act(const fl_bn_desc *d, int act, const float *x, const float *gamma, const float *beta,
                                float *y, float *coef, float *save_mean, float *save_invstd, float *mm, float *mv) {
    float *t = scratch_get(&g_bn, (size_t)d->c * 5);
    if (t) bn_train(d, act, x, gamma, beta, y, coef, save_mean, save_invstd, mm, mv, t);
}

static void be_bn_fwd_infer(const fl_bn_desc *d, const float *x, const float *gamma, const float *beta,
                            const float *mm, const float *mv, float *y) {
    ocl_launch l = ocl_args(OCL_k_bn_infer);
    ocl_arg_i64(&l, d->m * d->c); ocl_arg_i32(&l, d->c); ocl_arg_f32(&l, d->eps); BUF(l, x); BUF(l, gamma);
    BUF(l, beta); BUF(l, mm); BUF(l, mv); BUF(l, y);
    ocl_run1(&l, d->m * d->c, 256);
}

/* the sums of g and g (x - mean), dgamma, dbeta, the s, t, u of dx into stu_out where given, and dx (beta: +)=
 * s g + t + u (x - mean) where dx is given; g is dy masked by the fused ReLU where coef is given */
static void bn_backward(const fl_bn_desc *d, int act, const float *coef, const float *x, const float *gamma,
                        const float *mean, const float *invstd, const float *dy, float *dx, float beta,
                        float *dgamma, float *dbeta, float *stu_out) {
    const int c = d->c;
    float *t = scratch_get(&g_bn, (size_t)c * 5), *sums = t, *stu = stu_out ? stu_out : t ? t + 2 * c : NULL;
    if (!t) return;
    const float hi = coef ? relu_cap(act) : 0.0f, slope = coef ? d->slope : 0.0f;
    for (int k = 0; k < 2; k++) {
        ocl_launch l = ocl_args(OCL_k_colsum_bn_g);
        ocl_arg_i64(&l, d->m); ocl_arg_i32(&l, c); ocl_arg_i32(&l, CHUNKS); BUF(l, x); BUF(l, dy); BUF(l, coef);
        ocl_arg_f32(&l, hi); ocl_arg_f32(&l, slope); BUF(l, k ? mean : NULL);
        colsum_run(&l, c, CHUNKS, sums + k * c);
    }
    ocl_launch l = ocl_args(OCL_k_bn_coef);
    ocl_arg_i32(&l, c); ocl_arg_i64(&l, d->m); BUF(l, gamma); BUF(l, invstd); BUF(l, sums); BUF(l, dgamma);
    BUF(l, dbeta); BUF(l, dx || stu_out ? stu : NULL);
    ocl_run1(&l, c, 256);
    if (!dx) return;
    l = ocl_args(OCL_k_bn_dx);
    ocl_arg_i64(&l, d->m * c); ocl_arg_i32(&l, c); BUF(l, x); BUF(l, dy); BUF(l, coef); ocl_arg_f32(&l, hi);
    ocl_arg_f32(&l, slope); BUF(l, mean); BUF(l, stu); BUF(l, dx); ocl_arg_f32(&l, beta);
    ocl_run1(&l, d->m * c, 256);
}

static void be_bn_bwd(const fl_bn_desc *d, const float *x, const float *gamma, const float *mean, const float *invstd,
                      const float *dy, float *dx, float beta, float *dgamma, float *dbeta) {
    bn_backward(d, FL_ACT_LINEAR, NULL, x, gamma, mean, invstd, dy, dx, beta, dgamma, dbeta, NULL);
}

static void be_bn_bwd_act(const fl_bn_desc *d, int act, const float *coef, const float *x, const float *gamma,
                          const float *mean, const float *invstd, const float *dy, float *dx, float beta,
                          float *dgamma, float *dbeta) {
    bn_backward(d, act, coef, x, gamma, mean, invstd, dy, dx, beta, dgamma, dbeta, NULL);
}

/* the sums, dgamma, dbeta and dx's s, t, u, for the convolution before it to form dx (conv2d_bn_bwd) */
static void be_bn_bwd_coef(const fl_bn_desc *d, int act, const float *coef, const float *x, const float *gamma,
                           const float *mean, const float *invstd, const float *dy, float *dgamma, float *dbeta,
                           float *stu) {
    bn_backward(d, act, coef, x, gamma, mean, invstd, dy, NULL, 0.0f, dgamma, dbeta, stu);
}

static void be_add_affine(int mode, int64_t rows, int c, const float *x, const float *st, const float *o, float *y) {
    ocl_launch l = ocl_args(OCL_k_add_affine);
    ocl_arg_i32(&l, mode); ocl_arg_i64(&l, rows * c); ocl_arg_i32(&l, c); BUF(l, x); BUF(l, st); BUF(l, o);
    BUF(l, y);
    ocl_run1(&l, rows * c, 256);
}

/* ------------------------------------------------------ LayerNormalization */

static void be_layernorm_fwd(int64_t rows, int c, float eps, int rms, const float *x, const float *gamma,
                             const float *beta, float *y, float *stats) {
    ocl_launch l = ocl_args(OCL_k_layernorm_fwd);
    ocl_arg_i64(&l, rows); ocl_arg_i32(&l, c); ocl_arg_f32(&l, eps); ocl_arg_i32(&l, rms); BUF(l, x);
    BUF(l, gamma); BUF(l, beta); BUF(l, y); BUF(l, stats);
    ocl_run_rows(&l, rows);
}

static void be_layernorm_bwd(int64_t rows, int c, int rms, const float *x, const float *gamma, const float *stats,
                             const float *dy, float *dx, float dx_beta, float *dgamma, float *dbeta) {
    if (dx) {
        ocl_launch l = ocl_args(OCL_k_layernorm_bwd);
        ocl_arg_i64(&l, rows); ocl_arg_i32(&l, c); ocl_arg_i32(&l, rms); BUF(l, x); BUF(l, gamma); BUF(l, stats);
        BUF(l, dy); BUF(l, dx); ocl_arg_f32(&l, dx_beta);
        ocl_run_rows(&l, rows);
    }
    if (dgamma) {
        ocl_launch l = ocl_args(OCL_k_colsum_ln_dgamma);
        ocl_arg_i64(&l, rows); ocl_arg_i32(&l, c); ocl_arg_i32(&l, CHUNKS); ocl_arg_i32(&l, rms); BUF(l, x);
        BUF(l, dy); BUF(l, stats);
        colsum_run(&l, c, CHUNKS, dgamma);
    }
    if (dbeta) ocl_colsum_rows(rows, c, dy, c, dbeta);
}

/* ----------------------------------------------------------- Softmax(axis) */

static void be_softmax_axis_fwd(int64_t outer, int c, int64_t inner, const float *x, float *y) {
    ocl_launch l = ocl_args(OCL_k_softmax_axis_fwd);
    ocl_arg_i64(&l, outer); ocl_arg_i32(&l, c); ocl_arg_i64(&l, inner); BUF(l, x); BUF(l, y);
    ocl_run1(&l, outer * inner, 256);
}

static void be_softmax_axis_bwd(int64_t outer, int c, int64_t inner, const float *y, const float *dy, float *dx,
                                float beta) {
    ocl_launch l = ocl_args(OCL_k_softmax_axis_bwd);
    ocl_arg_i64(&l, outer); ocl_arg_i32(&l, c); ocl_arg_i64(&l, inner); BUF(l, y); BUF(l, dy); BUF(l, dx);
    ocl_arg_f32(&l, beta);
    ocl_run1(&l, outer * inner, 256);
}

/* --------------------------------------------------- PReLU, Normalization */

static void be_prelu_fwd(const fl_bcast_desc *d, const float *x, const float *alpha, float *y) {
    ocl_launch l = ocl_args(OCL_k_prelu_fwd);
    ocl_arg_raw(&l, d, sizeof *d); BUF(l, x); BUF(l, alpha); BUF(l, y);
    ocl_run1(&l, d->n * d->size, 256);
}

static void be_prelu_bwd(const fl_bcast_desc *d, const float *x, const float *alpha, const float *dy, float *dx,
                         float dx_beta, float *dalpha) {
    if (dx) {
        ocl_launch l = ocl_args(OCL_k_prelu_bwd);
        ocl_arg_raw(&l, d, sizeof *d); BUF(l, x); BUF(l, alpha); BUF(l, dy); BUF(l, dx); ocl_arg_f32(&l, dx_beta);
        ocl_run1(&l, d->n * d->size, 256);
    }
    if (!dalpha) return;
    int64_t shared = 1;
    for (int k = 0; k < d->ndim; k++)
        if (!d->pstride[k]) shared *= d->dim[k];
    /* a chunk per 64 rows at least: alpha without shared axes (psize = size) sums only n rows, and needs no 64
     * partial sums of each element */
    const int64_t rows = d->n * shared;
    const int chunks = (int)(rows / 64 < 1 ? 1 : rows / 64 > CHUNKS ? CHUNKS : rows / 64);
    ocl_launch l = ocl_args(OCL_k_colsum_prelu_dalpha);
    ocl_arg_i64(&l, rows); ocl_arg_i32(&l, (int)d->psize); ocl_arg_i32(&l, chunks); ocl_arg_raw(&l, d, sizeof *d);
    ocl_arg_i64(&l, shared); BUF(l, x); BUF(l, dy);
    colsum_run(&l, (int)d->psize, chunks, dalpha);
}

static void be_normalize_fwd(const fl_bcast_desc *d, int invert, const float *x, const float *mean, const float *var,
                             float *y) {
    ocl_launch l = ocl_args(OCL_k_normalize_fwd);
    ocl_arg_raw(&l, d, sizeof *d); ocl_arg_i32(&l, invert); BUF(l, x); BUF(l, mean); BUF(l, var); BUF(l, y);
    ocl_run1(&l, d->n * d->size, 256);
}

static void be_normalize_bwd(const fl_bcast_desc *d, int invert, const float *var, const float *dy, float *dx,
                             float beta) {
    ocl_launch l = ocl_args(OCL_k_normalize_bwd);
    ocl_arg_raw(&l, d, sizeof *d); ocl_arg_i32(&l, invert); BUF(l, var); BUF(l, dy); BUF(l, dx);
    ocl_arg_f32(&l, beta);
    ocl_run1(&l, d->n * d->size, 256);
}

void ocl_fill_norm(fl_backend *b) {
    b->bn_fwd_train = be_bn_fwd_train;
    b->bn_fwd_infer = be_bn_fwd_infer;
    b->bn_bwd = be_bn_bwd;
    b->bn_fwd_train_act = be_bn_fwd_train_act;
    b->bn_bwd_act = be_bn_bwd_act;
    b->bn_bwd_coef = be_bn_bwd_coef;
    b->bn_act_slope = 1;
    b->add_affine = be_add_affine;
    b->layernorm_fwd = be_layernorm_fwd;
    b->layernorm_bwd = be_layernorm_bwd;
    b->softmax_axis_fwd = be_softmax_axis_fwd;
    b->softmax_axis_bwd = be_softmax_axis_bwd;
    b->prelu_fwd = be_prelu_fwd;
    b->prelu_bwd = be_prelu_bwd;
    b->normalize_fwd = be_normalize_fwd;
    b->normalize_bwd = be_normalize_bwd;
}
