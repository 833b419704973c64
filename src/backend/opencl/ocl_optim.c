/*
 * ocl_optim.c — the OpenCL backend's optimizer_step: every optimizer of fl_opt_desc (SGD with momentum and
 * Nesterov, Adam, AdamW, RMSprop centered or not, with momentum or not) and Keras's gradient clipping
 * (clipnorm, clipvalue, global_clipnorm) as cpu_optimizer_step and cpu_clip_gradients do it, from
 * kernels/optim.cl's bodies, which CUDA's one multi-tensor launch runs too. A device pointer is no address
 * an OpenCL kernel can use, so each tensor is its own launch. No graphs on OpenCL (graph_begin NULL): the
 * step's learning rate and Adam's corrected one are arguments.
 */
#include "backend/opencl/opencl_internal.h"

#include "ops/math.h"

/* clipnorm/global_clipnorm's scratch, kept between steps as ocl_colsum_rows keeps its own: the tensors' sums
 * of squares (and their total after them), the chunks' partial sums */
static float *g_ss;
static int g_ss_n;
static double *g_part;
static int64_t g_part_n;

static int64_t chunks_of(int64_t n) { return (n + FL_SUMSQ_CHUNK - 1) / FL_SUMSQ_CHUNK; }

/* ss[k] = the sum of squares of tensor k's gradient (kernels/optim.cl: chunks, then in order); with
 * global_clipnorm also ss[np] = their sum. 0 on success. */
static int sums_of_squares(const fl_param_ref *ps, int np, int global) {
    int64_t chunks = 0;
    for (int k = 0; k < np; k++) chunks += chunks_of(ps[k].n);
    if (g_ss_n < np + 1) {
        ocl_free(g_ss);
        g_ss = ocl_alloc((size_t)(np + 1) * sizeof(float));
        g_ss_n = g_ss ? np + 1 : 0;
        if (!g_ss) return 1;
    }
    if (g_part_n < chunks) {
        ocl_free(g_part);
        g_part = ocl_alloc((size_t)chunks * sizeof(double));
        g_part_n = g_part ? chunks : 0;
        if (!g_part) return 1;
    }
    int64_t c0 = 0;
    for (int k = 0; k < np; k++) {
        const int64_t nc = chunks_of(ps[k].n);
        double *part = g_part + c0;
        float *ss = g_ss + k;
        ocl_launch l = ocl_args(OCL_k_sumsq_partial);
        ocl_arg_i64(&l, ps[k].n); BUF(l, ps[k].g); BUF(l, part);
        ocl_run1(&l, nc * FL_SUMSQ_THREADS, FL_SUMSQ_THREADS);
        ocl_launch f = ocl_args(OCL_k_sumsq_final);
        ocl_arg_i64(&f, ps[k].n); BUF(f, part); BUF(f, ss);
        ocl_run1(&f, 1, 1);
        c0 += nc;
    }
    if (global) {
        ocl_launch t = ocl_args(OCL_k_sumsq_total);
        ocl_arg_i32(&t, np); BUF(t, g_ss);
        ocl_run1(&t, 1, 1);
    }
    return 0;
}

static void be_optimizer_step(const fl_opt_desc *d, const fl_param_ref *ps, int np) {
    if (np <= 0) return;
    if (d->clip_mode != FL_CLIP_NONE) {
        if (d->clip_mode != FL_CLIP_VALUE && sums_of_squares(ps, np, d->clip_mode == FL_CLIP_GLOBAL_NORM)) return;
        for (int k = 0; k < np; k++) {
            const float *sumsq = d->clip_mode == FL_CLIP_NORM ? g_ss + k
                                 : d->clip_mode == FL_CLIP_GLOBAL_NORM ? g_ss + np : NULL;
            ocl_launch l = ocl_args(OCL_k_clip_tensor);
            ocl_arg_i32(&l, d->clip_mode); ocl_arg_f32(&l, d->clip); BUF(l, sumsq); ocl_arg_i64(&l, ps[k].n);
            BUF(l, ps[k].g);
            ocl_run1(&l, ps[k].n, 256);
        }
    }
    const float lr_t = d->code == FL_OPT_ADAM || d->code == FL_OPT_ADAMW
                           ? fl_adam_lr_t(d->lr, d->beta1, d->beta2, d->step) : d->lr;
    for (int k = 0; k < np; k++) {
        ocl_launch l = ocl_args(OCL_k_opt_update);
        ocl_arg_raw(&l, d, sizeof *d); ocl_arg_f32(&l, lr_t); ocl_arg_i64(&l, ps[k].n);
        BUF(l, ps[k].w); BUF(l, ps[k].g); BUF(l, ps[k].s0); BUF(l, ps[k].s1); BUF(l, ps[k].s2);
        ocl_run1(&l, ps[k].n, 256);
    }
}

void ocl_fill_optim(fl_backend *b) { b->optimizer_step = be_optimizer_step; }
