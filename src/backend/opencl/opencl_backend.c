/*
 * opencl_backend.c — the OpenCL backend (libflynn_opencl.so): the backend table (backend/backend.h) on one
 * in-order queue of one device, for any vendor's OpenCL 1.2 driver, and PoCL's CPU device in CI. The
 * kernels are the ones CUDA compiles too (src/backend/kernels/, in the dialect of dialect.h), built by the
 * driver at first use (opencl_runtime.c); CLBlast does the matrix products.
 *
 * This file has the memory entries, Dense, the activations, Dropout, the merges, the losses, metrics and sums,
 * and the plugin's entry points; each other family's entries are in ocl_<family>.c (ocl_fill_*). Every entry
 * a model needs is filled; the CUDA graphs (graph_begin) and the fused blocked attention stay NULL, and the
 * core runs without them. Proven on PoCL (OpenCL on the CPU) only: no GPU has run it yet.
 */
#include "backend/opencl/opencl_internal.h"

#include <clblast_c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/math.h"

#define OCL_EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------------ memory */

static void be_upload(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    size_t off;
    cl_mem m = ocl_buf(dst, &off);
    if (m) ocl_ok(clEnqueueWriteBuffer(ocl_queue, m, CL_TRUE, off, bytes, src, 0, NULL, NULL), "clEnqueueWriteBuffer",
                  NULL);
}

static void be_download(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    size_t off;
    cl_mem m = ocl_buf(src, &off);
    if (m) ocl_ok(clEnqueueReadBuffer(ocl_queue, m, CL_TRUE, off, bytes, dst, 0, NULL, NULL), "clEnqueueReadBuffer",
                  NULL);
    else memset(dst, 0, bytes);
}

static void be_copy(void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return;
    size_t so, dof;
    cl_mem s = ocl_buf(src, &so), d = ocl_buf(dst, &dof);
    if (s && d) ocl_ok(clEnqueueCopyBuffer(ocl_queue, s, d, so, dof, bytes, 0, NULL, NULL), "clEnqueueCopyBuffer", NULL);
}

static void be_zero(void *dst, size_t bytes) {
    if (!bytes) return;
    size_t off;
    cl_mem m = ocl_buf(dst, &off);
    const cl_uchar zero = 0;
    if (m) ocl_ok(clEnqueueFillBuffer(ocl_queue, m, &zero, 1, off, bytes, 0, NULL, NULL), "clEnqueueFillBuffer", NULL);
}

static void be_sync(void) { ocl_ok(clFinish(ocl_queue), "clFinish", NULL); }

static fl_opencl_report g_rep;

/* OpenCL 1.2 says nothing of free memory: the whole as free, less what this process holds is not known */
static void be_mem_info(size_t *fr, size_t *tot) {
    *tot = g_rep.dev.global_mem;
    *fr = g_rep.dev.global_mem;
}

/* ------------------------------------------------------------ small kernels */

static void be_gather_rows(const float *src, const int64_t *idx, int64_t n, int64_t row, float *dst) {
    ocl_launch l = ocl_args(OCL_k_gather);
    BUF(l, src); BUF(l, idx); ocl_arg_i64(&l, n); ocl_arg_i64(&l, row); BUF(l, dst);
    ocl_run1(&l, n * row, 256);
}

static void be_fill(int64_t n, float v, float *y) {
    ocl_launch l = ocl_args(OCL_k_fill);
    ocl_arg_i64(&l, n); ocl_arg_f32(&l, v); BUF(l, y);
    ocl_run1(&l, n, 256);
}

static void be_accumulate(int64_t n, const float *src, float *dst, float beta) {
    ocl_launch l = ocl_args(OCL_k_accumulate);
    ocl_arg_i64(&l, n); BUF(l, src); BUF(l, dst); ocl_arg_f32(&l, beta);
    ocl_run1(&l, n, 256);
}

static void be_axpby(int64_t n, float alpha, const float *x, float beta, float *y) {
    ocl_launch l = ocl_args(OCL_k_axpby);
    ocl_arg_i64(&l, n); ocl_arg_f32(&l, alpha); BUF(l, x); ocl_arg_f32(&l, beta); BUF(l, y);
    ocl_run1(&l, n, 256);
}

/* out[j] = sum_r x[r * ld + j], overwritten (kernels/reduce.cl) */
static float *g_partial;
static size_t g_partial_n;
void ocl_colsum_rows(int64_t rows, int n, const float *x, int64_t ld, float *out) {
    const int chunks = 64;
    size_t need = (size_t)chunks * (size_t)n;
    if (need > g_partial_n) {
        ocl_free(g_partial);
        g_partial = ocl_alloc(need * sizeof(float));
        g_partial_n = g_partial ? need : 0;
        if (!g_partial) return;
    }
    ocl_launch l = ocl_args(OCL_k_colsum_rows);
    ocl_arg_i64(&l, rows); ocl_arg_i32(&l, n); ocl_arg_i32(&l, chunks); BUF(l, x); ocl_arg_i64(&l, ld);
    BUF(l, g_partial);
    ocl_run2(&l, (size_t)(n + 31) / 32 * 32, (size_t)chunks * 8, 32, 8);
    ocl_launch f = ocl_args(OCL_k_colsum_final);
    ocl_arg_i32(&f, n); ocl_arg_i32(&f, chunks); BUF(f, g_partial); BUF(f, out); ocl_arg_f32(&f, 0.0f);
    ocl_run1(&f, n, 256);
}

/* ------------------------------------------------------------------- dense */

static const char *clblast_name(CLBlastStatusCode s) {
    switch (s) {
    case CLBlastSuccess: return "success";
    case CLBlastOpenCLCompilerNotAvailable: return "no OpenCL compiler";
    case CLBlastTempBufferAllocFailure: return "temporary buffer allocation failed";
    case CLBlastOpenCLOutOfResources: return "out of resources";
    case CLBlastOpenCLOutOfHostMemory: return "out of host memory";
    case CLBlastOpenCLBuildProgramFailure: return "its kernels failed to build";
    case CLBlastInvalidLocalMemUsage: return "local memory over the device's";
    case CLBlastNoHalfPrecision: return "no half precision";
    case CLBlastNoDoublePrecision: return "no double precision";
    default: return "an error";
    }
}

/* row-major C[m, n] = alpha op(A) op(B) + beta C */
void ocl_gemm(int ta, int tb, size_t m, size_t n, size_t k, float alpha, const float *a, size_t lda,
                  const float *b, size_t ldb, float beta, float *c, size_t ldc) {
    if (!m || !n || ocl_failed()) return;
    size_t ao, bo, co;
    cl_mem A = ocl_buf(a, &ao), B = ocl_buf(b, &bo), C = ocl_buf(c, &co);
    if (!A || !B || !C) return;
    CLBlastStatusCode s = CLBlastSgemm(CLBlastLayoutRowMajor, ta ? CLBlastTransposeYes : CLBlastTransposeNo,
                                       tb ? CLBlastTransposeYes : CLBlastTransposeNo, m, n, k, alpha, A, ao / 4, lda, B,
                                       bo / 4, ldb, beta, C, co / 4, ldc, &ocl_queue, NULL);
    if (s != CLBlastSuccess && !ocl_failed()) {
        char what[128];
        snprintf(what, sizeof what, "(%zux%zux%zu): %s", m, n, k, clblast_name(s));
        ocl_ok((cl_int)(s < 0 && s > -100 ? s : CL_OUT_OF_RESOURCES), "CLBlastSgemm", what);
    }
}

void ocl_bias_act(int64_t rows, int n, const float *b, int act, float *y) {
    if (!b && act == FL_ACT_LINEAR) return;
    ocl_launch l = ocl_args(OCL_k_bias_act);
    ocl_arg_i64(&l, rows * n); ocl_arg_i32(&l, n); BUF(l, b); ocl_arg_i32(&l, act); BUF(l, y);
    ocl_run1(&l, rows * n, 256);
}

static void be_dense_fwd(const fl_dense_desc *d, const float *x, const float *w, const float *b, float *y) {
    ocl_gemm(0, 0, (size_t)d->m, (size_t)d->n, (size_t)d->k, 1.0f, x, (size_t)d->k, w, (size_t)d->n, 0.0f, y,
         (size_t)d->n);
    ocl_bias_act(d->m, d->n, d->has_bias ? b : NULL, d->act, y);
}

static void be_dense_bwd(const fl_dense_desc *d, const float *x, const float *w, const float *y, float *dy, float *dx,
                         float dx_beta, float *dw, float *db) {
    if (d->act != FL_ACT_LINEAR) {
        ocl_launch l = ocl_args(OCL_k_act_grad_y);
        ocl_arg_i64(&l, d->m * d->n); ocl_arg_i32(&l, d->act); BUF(l, y); BUF(l, dy);
        ocl_run1(&l, d->m * d->n, 256);
    }
    if (d->has_bias && db) ocl_colsum_rows(d->m, d->n, dy, d->n, db);
    ocl_gemm(1, 0, (size_t)d->k, (size_t)d->n, (size_t)d->m, 1.0f, x, (size_t)d->k, dy, (size_t)d->n, 0.0f, dw,
         (size_t)d->n);
    if (dx)
        ocl_gemm(0, 1, (size_t)d->m, (size_t)d->k, (size_t)d->n, 1.0f, dy, (size_t)d->n, w, (size_t)d->n, dx_beta, dx,
             (size_t)d->k);
}

/* ------------------------------------------------------------- activations */

static void be_act_fwd(int act, int64_t rows, int c, const float *x, float *y) {
    ocl_launch l = ocl_args(act == FL_ACT_SOFTMAX ? OCL_k_softmax_fwd : OCL_k_act_fwd);
    if (act == FL_ACT_SOFTMAX) {
        ocl_arg_i64(&l, rows); ocl_arg_i32(&l, c); BUF(l, x); BUF(l, y);
        ocl_run_rows(&l, rows);
    } else {
        ocl_arg_i64(&l, rows * c); ocl_arg_i32(&l, act); BUF(l, x); BUF(l, y);
        ocl_run1(&l, rows * c, 256);
    }
}

static void be_act_bwd(int act, int64_t rows, int c, const float *x, const float *y, const float *dy, float *dx,
                       float beta) {
    ocl_launch l = ocl_args(act == FL_ACT_SOFTMAX ? OCL_k_softmax_bwd : OCL_k_act_bwd);
    if (act == FL_ACT_SOFTMAX) {
        ocl_arg_i64(&l, rows); ocl_arg_i32(&l, c); BUF(l, y); BUF(l, dy); BUF(l, dx); ocl_arg_f32(&l, beta);
        ocl_run_rows(&l, rows);
    } else {
        ocl_arg_i64(&l, rows * c); ocl_arg_i32(&l, act); BUF(l, x); BUF(l, y); BUF(l, dy); BUF(l, dx);
        ocl_arg_f32(&l, beta);
        ocl_run1(&l, rows * c, 256);
    }
}

static void be_pact_fwd(const fl_pact_desc *d, int64_t n, const float *x, float *y) {
    ocl_launch l = ocl_args(OCL_k_pact_fwd);
    ocl_arg_raw(&l, d, sizeof *d); ocl_arg_i64(&l, n); BUF(l, x); BUF(l, y);
    ocl_run1(&l, n, 256);
}

static void be_pact_bwd(const fl_pact_desc *d, int64_t n, const float *x, const float *y, const float *dy, float *dx,
                        float beta) {
    ocl_launch l = ocl_args(OCL_k_pact_bwd);
    ocl_arg_raw(&l, d, sizeof *d); ocl_arg_i64(&l, n); BUF(l, x); BUF(l, y); BUF(l, dy); BUF(l, dx);
    ocl_arg_f32(&l, beta);
    ocl_run1(&l, n, 256);
}

static void be_dropout_fwd(int64_t n, float rate, uint64_t seed, uint64_t stream, int64_t offset, const float *x,
                           float *y, uint8_t *mask) {
    const int64_t blocks = (offset + n + 3) / 4 - offset / 4;
    ocl_launch l = ocl_args(OCL_k_dropout_fwd);
    ocl_arg_i64(&l, n); ocl_arg_f32(&l, rate); ocl_arg_u64(&l, seed); ocl_arg_u64(&l, stream);
    ocl_arg_i64(&l, offset); ocl_arg_buf(&l, NULL, sizeof(int64_t)); BUF(l, x); BUF(l, y); BUF(l, mask);
    ocl_run1(&l, blocks, 256);
}

static void be_dropout_bwd(int64_t n, float rate, const uint8_t *mask, const float *dy, float *dx, float beta) {
    ocl_launch l = ocl_args(OCL_k_dropout_bwd);
    ocl_arg_i64(&l, n); ocl_arg_f32(&l, 1.0f / (1.0f - rate)); BUF(l, mask); BUF(l, dy); BUF(l, dx);
    ocl_arg_f32(&l, beta);
    ocl_run1(&l, n, 256);
}

/* ------------------------------------------------------------------ merges */

static void be_mul(int64_t n, const float *a, const float *b, float *dst) {
    ocl_launch l = ocl_args(OCL_k_mul);
    ocl_arg_i64(&l, n); BUF(l, a); BUF(l, b); BUF(l, dst);
    ocl_run1(&l, n, 256);
}

static void be_concat_fwd(int64_t rows, int64_t cin, int64_t cout, int64_t off, const float *x, float *y) {
    ocl_launch l = ocl_args(OCL_k_concat_fwd);
    ocl_arg_i64(&l, rows); ocl_arg_i64(&l, cin); ocl_arg_i64(&l, cout); ocl_arg_i64(&l, off); BUF(l, x); BUF(l, y);
    ocl_run1(&l, rows * cin, 256);
}

static void be_concat_bwd(int64_t rows, int64_t cin, int64_t cout, int64_t off, const float *dy, float *dx,
                          float beta) {
    ocl_launch l = ocl_args(OCL_k_concat_bwd);
    ocl_arg_i64(&l, rows); ocl_arg_i64(&l, cin); ocl_arg_i64(&l, cout); ocl_arg_i64(&l, off); BUF(l, dy);
    BUF(l, dx); ocl_arg_f32(&l, beta);
    ocl_run1(&l, rows * cin, 256);
}

static void be_binary(int mode, int64_t n, const float *a, const float *b, float *y) {
    ocl_launch l = ocl_args(OCL_k_binary);
    ocl_arg_i32(&l, mode); ocl_arg_i64(&l, n); BUF(l, a); BUF(l, b); BUF(l, y);
    ocl_run1(&l, n, 256);
}

static void be_minmax_grad(int is_max, int64_t n, const float *x, const float *other, const float *dy, float *dx,
                           float beta) {
    ocl_launch l = ocl_args(OCL_k_minmax_grad);
    ocl_arg_i32(&l, is_max); ocl_arg_i64(&l, n); BUF(l, x); BUF(l, other); BUF(l, dy); BUF(l, dx);
    ocl_arg_f32(&l, beta);
    ocl_run1(&l, n, 256);
}

static void be_bmerge_fwd(int mode, const fl_bcast_desc *d, const float *x, const float *b, float *y) {
    ocl_launch l = ocl_args(OCL_k_bmerge_fwd);
    ocl_arg_i32(&l, mode); ocl_arg_raw(&l, d, sizeof *d); BUF(l, x); BUF(l, b); BUF(l, y);
    ocl_run1(&l, d->n * d->size, 256);
}

static void be_bmerge_bwd(int mode, const fl_bcast_desc *d, const float *x, const float *b, const float *dy,
                          float *dx, float beta_x, float *db, float beta_b) {
    ocl_launch l = ocl_args(OCL_k_bmerge_bwd);
    ocl_arg_i32(&l, mode); ocl_arg_raw(&l, d, sizeof *d); BUF(l, x); BUF(l, b); BUF(l, dy); BUF(l, dx);
    ocl_arg_f32(&l, beta_x); BUF(l, db); ocl_arg_f32(&l, beta_b);
    ocl_run1(&l, d->n * d->psize, 128);
}

/* ------------------------------------------------------- losses and metrics */

static void be_loss(const fl_loss_desc *d, const float *pred, const float *target, float *row_loss, float *grad) {
    ocl_launch l = ocl_args(OCL_k_loss);
    ocl_arg_raw(&l, d, sizeof *d); BUF(l, pred); BUF(l, target); BUF(l, row_loss); BUF(l, grad);
    ocl_run_rows(&l, d->rows);
}

static void be_metric(int code, int64_t rows, int c, const float *pred, const float *target, float *score) {
    ocl_launch l = ocl_args(OCL_k_metric);
    ocl_arg_i32(&l, code); ocl_arg_i64(&l, rows); ocl_arg_i32(&l, c); BUF(l, pred); BUF(l, target); BUF(l, score);
    ocl_run_rows(&l, rows);
}

static void be_sum_into(int64_t n, const float *x, double scale, double *acc) {
    ocl_launch l = ocl_args(OCL_k_sum_into);
    ocl_arg_i64(&l, n); BUF(l, x); ocl_arg_f64(&l, scale); BUF(l, acc);
    size_t g = 256;
    if (!l.bad) ocl_ok(clEnqueueNDRangeKernel(ocl_queue, l.k, 1, NULL, &g, &g, 0, NULL, NULL), "clEnqueueNDRangeKernel",
                       l.name);
}

/* ------------------------------------------------------------------- table */

static fl_backend g_backend;

static void fill_table(void) {
    fl_backend *b = &g_backend;
    memset(b, 0, sizeof *b);
    b->name = "opencl";
    b->host_memory = 0;
    b->alloc = ocl_alloc;
    b->free = ocl_free;
    b->upload = be_upload;
    b->download = be_download;
    b->copy = be_copy;
    b->zero = be_zero;
    b->sync = be_sync;
    b->check = ocl_check;
    b->mem_info = be_mem_info;
    b->gather_rows = be_gather_rows;
    b->dense_fwd = be_dense_fwd;
    b->dense_bwd = be_dense_bwd;
    b->act_fwd = be_act_fwd;
    b->act_bwd = be_act_bwd;
    b->pact_fwd = be_pact_fwd;
    b->pact_bwd = be_pact_bwd;
    b->dropout_fwd = be_dropout_fwd;
    b->dropout_bwd = be_dropout_bwd;
    b->mul = be_mul;
    b->concat_fwd = be_concat_fwd;
    b->concat_bwd = be_concat_bwd;
    b->binary = be_binary;
    b->axpby = be_axpby;
    b->minmax_grad = be_minmax_grad;
    b->bmerge_fwd = be_bmerge_fwd;
    b->bmerge_bwd = be_bmerge_bwd;
    b->fill = be_fill;
    b->accumulate = be_accumulate;
    b->loss = be_loss;
    b->metric = be_metric;
    b->sum_into = be_sum_into;
    ocl_fill_conv(b);
    ocl_fill_pool(b);
    ocl_fill_layout(b);
    ocl_fill_norm(b);
    ocl_fill_seq(b);
    ocl_fill_attention(b);
    ocl_fill_rnn(b);
    ocl_fill_optim(b);
}

/* ------------------------------------------------------------ entry points */

/* $FLYNN_OPENCL_DEVICE: a number, or part of a device's name (the first match) */
static int device_from_env(char *why, size_t len) {
    const char *e = getenv("FLYNN_OPENCL_DEVICE");
    if (!e || !*e) return -1;
    char *end;
    long v = strtol(e, &end, 10);
    if (*end == 0) return (int)v;
    int n = ocl_device_count(why, len);
    for (int i = 0; i < n; i++) {
        fl_opencl_device_info info;
        if (ocl_device_get(i, NULL, &info, why, len) == 0 && strstr(info.name, e)) return i;
    }
    snprintf(why, len, "FLYNN_OPENCL_DEVICE=%s: no OpenCL device's name contains it", e);
    return -2;
}

static int choose_device(int mode, int index, fl_opencl_report *rep) {
    char why[256] = "";
    int n = ocl_device_count(why, sizeof why);
    if (n <= 0) {
        snprintf(rep->reason, sizeof rep->reason, "%s", why);
        snprintf(rep->failed_check, sizeof rep->failed_check, n < 0 ? "platform" : "device");
        return -1;
    }
    if (index < 0) index = device_from_env(why, sizeof why);
    if (index == -2) {
        snprintf(rep->reason, sizeof rep->reason, "%s", why);
        snprintf(rep->failed_check, sizeof rep->failed_check, "device");
        return -1;
    }
    if (index >= 0) {
        if (ocl_device_get(index, &ocl_dev, &rep->dev, why, sizeof why) == 0) return index;
        snprintf(rep->reason, sizeof rep->reason, "%s", why);
        snprintf(rep->failed_check, sizeof rep->failed_check, "device");
        return -1;
    }
    for (int i = 0; i < n; i++) /* a GPU (or accelerator) first */
        if (ocl_device_get(i, &ocl_dev, &rep->dev, why, sizeof why) == 0 && rep->dev.is_gpu) return i;
    if (mode == FL_OPENCL_ANY && ocl_device_get(0, &ocl_dev, &rep->dev, why, sizeof why) == 0) return 0;
    snprintf(rep->reason, sizeof rep->reason, "no OpenCL GPU: the %d OpenCL device(s) found are CPUs (%s), which "
             "--device auto never takes; ask for one with --device opencl", n, rep->dev.name);
    snprintf(rep->failed_check, sizeof rep->failed_check, "device");
    return -1;
}

static int open_context(fl_opencl_report *rep) {
    cl_int e;
    ocl_ctx = clCreateContext(NULL, 1, &ocl_dev, NULL, NULL, &e);
    if (e == CL_SUCCESS) ocl_queue = clCreateCommandQueue(ocl_ctx, ocl_dev, 0, &e);
    if (e != CL_SUCCESS) {
        snprintf(rep->reason, sizeof rep->reason, "OpenCL device %d (%s): no context or queue: %s (%d)", rep->dev.index,
                 rep->dev.name, ocl_err_name(e), e);
        snprintf(rep->failed_check, sizeof rep->failed_check, "device");
        return -1;
    }
    if (!rep->dev.fp64) { /* the loss's running sums are doubles (k_sum_into) */
        snprintf(rep->reason, sizeof rep->reason, "OpenCL device %d (%s) lacks cl_khr_fp64, which flynn's kernels need",
                 rep->dev.index, rep->dev.name);
        snprintf(rep->failed_check, sizeof rep->failed_check, "extension");
        return -1;
    }
    return 0;
}

/* a small kernel run and read back: the device computes what the CPU does */
static int hello(fl_opencl_report *rep) {
    float *d = ocl_alloc(64 * sizeof(float));
    float h[64];
    if (!d) { snprintf(rep->reason, sizeof rep->reason, "OpenCL: cannot allocate 256 bytes"); return -1; }
    be_fill(64, 1.5f, d);
    be_axpby(64, 2.0f, d, 0.0f, d);
    be_download(h, d, sizeof h);
    ocl_free(d);
    int ok = !ocl_failed();
    for (int i = 0; ok && i < 64; i++) ok = h[i] == 3.0f;
    if (!ok) {
        snprintf(rep->reason, sizeof rep->reason, "OpenCL device %d (%s) ran a test kernel and returned wrong values",
                 rep->dev.index, rep->dev.name);
        snprintf(rep->failed_check, sizeof rep->failed_check, "hello");
        return -1;
    }
    return 0;
}

OCL_EXPORT const fl_backend *fl_opencl_plugin_open(const fl_cuda_host *host, int mode, int index,
                                                   fl_opencl_report *rep) {
    memset(rep, 0, sizeof *rep);
    if (!host || host->abi != FL_CUDA_PLUGIN_ABI || strcmp(host->backend_abi, FL_BACKEND_ABI) != 0) {
        snprintf(rep->reason, sizeof rep->reason, "libflynn_opencl.so was built with another libflynn (backend "
                 "table %s, libflynn's %s): reinstall flynn", FL_BACKEND_ABI, host ? host->backend_abi : "?");
        snprintf(rep->failed_check, sizeof rep->failed_check, "plugin");
        return NULL;
    }
    ocl_host = host;
    snprintf(rep->clblast, sizeof rep->clblast, "CLBlast");
    if (choose_device(mode, index, rep) < 0 || open_context(rep) < 0 || ocl_program_build(rep) < 0 || hello(rep) < 0)
        return NULL;
    g_rep = *rep;
    fill_table();
    return &g_backend;
}

/* ------------------------------------------------------------------ tools */

static int tool_count(void) { return ocl_device_count(NULL, 0); }

static int tool_info(int index, fl_opencl_device_info *out, char *why, size_t len) {
    return ocl_device_get(index, NULL, out, why, len);
}

static int tool_bandwidth(const size_t *sizes, int nsizes, int reps, fl_opencl_bw_point *out, char *why, size_t len) {
    if (!ocl_queue) { snprintf(why, len, "no OpenCL device is open"); return -1; }
    for (int s = 0; s < nsizes; s++) {
        void *h = malloc(sizes[s]), *d1 = ocl_alloc(sizes[s]), *d2 = ocl_alloc(sizes[s]);
        if (!h || !d1 || !d2) {
            free(h); ocl_free(d1); ocl_free(d2);
            snprintf(why, len, "cannot allocate %zu bytes", sizes[s]);
            return -1;
        }
        memset(h, 1, sizes[s]);
        double t[3];
        for (int kind = 0; kind < 3; kind++) {
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            for (int r = 0; r < reps; r++) {
                if (kind == 0) be_upload(d1, h, sizes[s]);
                else if (kind == 1) be_download(h, d1, sizes[s]);
                else be_copy(d2, d1, sizes[s]);
            }
            be_sync();
            clock_gettime(CLOCK_MONOTONIC, &b);
            t[kind] = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
        }
        out[s].bytes = sizes[s];
        out[s].h2d = (double)sizes[s] * reps / t[0] / 1e9;
        out[s].d2h = (double)sizes[s] * reps / t[1] / 1e9;
        out[s].d2d = 2.0 * (double)sizes[s] * reps / t[2] / 1e9; /* bytes read and written, as bandwidthTest */
        free(h); ocl_free(d1); ocl_free(d2);
    }
    return ocl_failed() ? (snprintf(why, len, "%s", "an OpenCL copy failed"), -1) : 0;
}

static const fl_opencl_tools g_tools = {tool_count, tool_info, tool_bandwidth};

OCL_EXPORT const fl_opencl_tools *fl_opencl_plugin_tools(void) { return &g_tools; }
