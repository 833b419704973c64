/*
 * opencl_internal.h — what the OpenCL plugin's files share: opencl_runtime.c (the devices, the memory and
 * its pointers, the program and its cache, kernel launches, errors) and opencl_backend.c (the backend
 * table's entries and the plugin's entry points).
 */
#ifndef FL_OPENCL_INTERNAL_H
#define FL_OPENCL_INTERNAL_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdint.h>

#include "backend/opencl/plugin.h"

/* flynn's status codes (flynn.h's values, which this plugin does not include) */
enum { OCL_ST_INVALID_ARG = 2, OCL_ST_NOMEM = 3, OCL_ST_DEVICE = 7 };

extern const fl_cuda_host *ocl_host;
extern cl_context ocl_ctx;
extern cl_command_queue ocl_queue;
extern cl_device_id ocl_dev;

/* errors: a failed call reported once (sticky, as an asynchronous CUDA error is); ocl_ok returns 1 when
 * e is CL_SUCCESS */
const char *ocl_err_name(cl_int e);
int ocl_ok(cl_int e, const char *call, const char *what);
int ocl_check(void);
int ocl_failed(void);

/* devices across platforms, in one order: the count (-1: no ICD or no platform, with why) and each one */
int ocl_device_count(char *why, size_t len);
int ocl_device_get(int index, cl_device_id *out, fl_opencl_device_info *info, char *why, size_t len);

/* memory: a device pointer is an address in a range of its own per allocation (never dereferenced on the
 * host); ocl_buf finds the buffer and the byte offset a pointer falls at */
void *ocl_alloc(size_t bytes);
void ocl_free(void *p);
cl_mem ocl_buf(const void *p, size_t *offset);

/* the program: built from the embedded source at first use, its binary cached on disk per device and
 * driver (a stale or unreadable cache is rebuilt, never used) */
int ocl_program_build(fl_opencl_report *rep);
cl_kernel ocl_kernel(int id);

/* one launch: ocl_args starts a kernel's arguments; then each in order; ocl_run1 over total work items in
 * groups of local (grid-stride kernels: at most `cap` groups), ocl_run_rows one group of FL_ROW_LANES per
 * row, ocl_run2 a two-dimensional grid */
typedef struct ocl_launch { cl_kernel k; cl_uint i; int bad; const char *name; } ocl_launch;
ocl_launch ocl_args(int id);
void ocl_arg_i32(ocl_launch *l, int v);
void ocl_arg_i64(ocl_launch *l, int64_t v);
void ocl_arg_u64(ocl_launch *l, uint64_t v);
void ocl_arg_f32(ocl_launch *l, float v);
void ocl_arg_f64(ocl_launch *l, double v);
void ocl_arg_raw(ocl_launch *l, const void *v, size_t size);
void ocl_arg_buf(ocl_launch *l, const void *p, size_t elem);
void ocl_run1(ocl_launch *l, int64_t total, int local);
void ocl_run_rows(ocl_launch *l, int64_t rows);
void ocl_run2(ocl_launch *l, size_t gx, size_t gy, size_t lx, size_t ly);

/* the kernels of the program, by id (their names in ocl_kernel_names, opencl_runtime.c): one list per family,
 * each beside the file of src/backend/kernels/ that defines them */
#define OCL_KERNELS_CORE(X)                                                                                         \
    X(k_gather) X(k_bias_act) X(k_act_grad_y) X(k_act_fwd) X(k_act_bwd) X(k_softmax_fwd) X(k_softmax_bwd)           \
    X(k_pact_fwd) X(k_pact_bwd) X(k_dropout_fwd) X(k_dropout_bwd) X(k_mul) X(k_concat_fwd) X(k_concat_bwd)          \
    X(k_binary) X(k_axpby) X(k_minmax_grad) X(k_fill) X(k_accumulate) X(k_bmerge_fwd) X(k_bmerge_bwd)               \
    X(k_colsum_rows) X(k_colsum_final) X(k_loss) X(k_metric) X(k_sum_into)

/* conv.cl: Conv2D (im2col + GEMM, direct), Conv2DTranspose, DepthwiseConv2D (ocl_conv.c) */
#define OCL_KERNELS_CONV(X) X(k_im2col) X(k_col2im) X(k_depthwise_fwd) X(k_depthwise_bwd_dx) X(k_colsum_depthwise_dw)

/* pool.cl: the poolings (ocl_pool.c) */
#define OCL_KERNELS_POOL(X)                                                                                         \
    X(k_maxpool_fwd) X(k_maxpool_bwd) X(k_avgpool_fwd) X(k_avgpool_bwd) X(k_gap_fwd) X(k_gap_bwd)

/* layout.cl: padding, UpSampling2D/Resizing, Permute (ocl_layout.c) */
#define OCL_KERNELS_LAYOUT(X) X(k_pad2d) X(k_upsample2d_fwd) X(k_upsample2d_bwd) X(k_permute)

/* norm.cl: BatchNormalization, LayerNormalization, Normalization; Softmax(axis), PReLU (ocl_norm.c) */
#define OCL_KERNELS_NORM(X)                                                                                         \
    X(k_colsum_bn_dev2) X(k_colsum_bn_g) X(k_bn_stats) X(k_bn_apply) X(k_bn_infer) X(k_bn_coef) X(k_bn_dx)          \
    X(k_add_affine) X(k_layernorm_fwd) X(k_layernorm_bwd) X(k_colsum_ln_dgamma) X(k_softmax_axis_fwd)               \
    X(k_softmax_axis_bwd) X(k_prelu_fwd) X(k_prelu_bwd) X(k_colsum_prelu_dalpha) X(k_normalize_fwd)                 \
    X(k_normalize_bwd)

/* seq.cl: Embedding, the sequence masks, masked pooling, loss masks and weights (ocl_seq.c) */
#define OCL_KERNELS_SEQ(X)                                                                                          \
    X(k_embedding_fwd) X(k_embedding_bwd) X(k_seq_mask) X(k_masked_gap1d_fwd) X(k_masked_gap1d_bwd) X(k_loss_mask)   \
    X(k_loss_weight)

/* attention.cl: the attention scores and their softmax (ocl_attention.c) */
#define OCL_KERNELS_ATTENTION(X)                                                                                    \
    X(k_scalar_mul_fwd) X(k_dot_sum) X(k_scalar_mul_dx) X(k_attn_concat_fwd) X(k_attn_concat_bwd)                   \
    X(k_attn_concat_dscale) X(k_attn_softmax_fwd) X(k_attn_softmax_bwd)

/* rnn.cl: SimpleRNN, LSTM, GRU (ocl_rnn.c) */
#define OCL_KERNELS_RNN(X)                                                                                          \
    X(k_rnn_init_rows) X(k_rnn_mask_rows) X(k_rnn_scale_rows) X(k_rnn_mask_sum) X(k_rnn_mask_steps)                 \
    X(k_rnn_fwd_step) X(k_rnn_bwd_init) X(k_rnn_bwd_step)

/* optim.cl: the optimizers and gradient clipping (ocl_optim.c) */
#define OCL_KERNELS_OPTIM(X) X(k_opt_update) X(k_sumsq_partial) X(k_sumsq_final) X(k_sumsq_total) X(k_clip_tensor)

#define OCL_KERNELS(X)                                                                                              \
    OCL_KERNELS_CORE(X) OCL_KERNELS_CONV(X) OCL_KERNELS_POOL(X) OCL_KERNELS_LAYOUT(X) OCL_KERNELS_NORM(X)          \
    OCL_KERNELS_SEQ(X) OCL_KERNELS_ATTENTION(X) OCL_KERNELS_RNN(X) OCL_KERNELS_OPTIM(X)
enum {
#define OCL_KERNEL_ID_(name) OCL_##name,
    OCL_KERNELS(OCL_KERNEL_ID_)
#undef OCL_KERNEL_ID_
    OCL_KERNEL_COUNT
};


/* what the families' files share (opencl_backend.c): a buffer argument; the row-major matrix product
 * C[m, n] = alpha op(A) op(B) + beta C through CLBlast (pointers anywhere in a buffer); out[j] = sum_r
 * x[r * ld + j] (kernels/reduce.cl, deterministic); y = act(y + b) over rows of n */
#define BUF(l, p) ocl_arg_buf(&(l), (p), sizeof *(p))
void ocl_gemm(int ta, int tb, size_t m, size_t n, size_t k, float alpha, const float *a, size_t lda, const float *b,
              size_t ldb, float beta, float *c, size_t ldc);
void ocl_colsum_rows(int64_t rows, int n, const float *x, int64_t ld, float *out);
void ocl_bias_act(int64_t rows, int n, const float *b, int act, float *y);

/* each family's file fills its entries of the table (NULL: not on OpenCL yet) */
void ocl_fill_conv(fl_backend *b);
void ocl_fill_pool(fl_backend *b);
void ocl_fill_layout(fl_backend *b);
void ocl_fill_norm(fl_backend *b);
void ocl_fill_seq(fl_backend *b);
void ocl_fill_attention(fl_backend *b);
void ocl_fill_rnn(fl_backend *b);
void ocl_fill_optim(fl_backend *b);

#endif
