/*
 * cpu_internal.h — what the CPU backend's files share: thread control, the
 * CBLAS header, and the row-wise epilogues (bias + activation, activation
 * gradient + bias gradient) that the Dense and Conv2D kernels fuse in.
 */
#ifndef FL_CPU_INTERNAL_H
#define FL_CPU_INTERNAL_H

#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "ops/math.h"

/* the threads in use now (fl_num_threads_in_use: fewer than configured while other processes keep the CPUs
 * busy), for how a loop splits its work; and the configured count (fl_get_num_threads), for choices that
 * change what is computed (which kernel, how large a step), which must not follow the load */
int fl_cpu_threads(void);
int fl_cpu_threads_configured(void);
/* cpu_env.c: the inference step's budget (backend.h infer_budget): twice the L2 of the threads in use */
size_t fl_cpu_infer_budget(void);
/* cpu_env.c: the cache an inference step's weights stay in between steps (backend.h infer_weight_cache) */
size_t fl_cpu_infer_weight_cache(void);
/* cpu_env.c: the default thread count and its reason; the cgroup CPU quota in CPUs (0: none) */
int fl_cpu_default_threads(char *why, size_t n);
double fl_cpu_quota(void);
/* an OpenMP loop's threads: one for under 32768 elements of work, else all */
#define PAR(n) num_threads((n) < 32768 ? 1 : fl_cpu_threads())
/* An element-wise loop over n elements: fixed chunks of FL_EW_CHUNK handed
 * to whichever thread is free, so that a thread whose core another process
 * shares takes fewer (halves split up front wait for it at the barrier).
 * Only for loops whose elements are independent: the result does not
 * depend on who took which chunk. */
#define FL_EW_CHUNK 8192
#define PAR_EW(n) schedule(dynamic, FL_EW_CHUNK) PAR(n)
/* A broadcast (fl_bcast_desc) walked as rows along its last axis, so that the loops over a row run on
 * vectors: row r of a sample (elements r*len .. r*len+len-1) reads the parameter from fl_bcast_index(d,
 * r*len) on, ps apart (1: a per-channel parameter, as a squeeze-and-excitation's Multiply; 0: one value for
 * the row). per: the rows a thread takes at a time (about FL_EW_CHUNK elements). */
typedef struct fl_bcast_rows { int64_t len, ps, rows, per; } fl_bcast_rows;
static inline fl_bcast_rows fl_bcast_rows_of(const fl_bcast_desc *d) {
    fl_bcast_rows r;
    r.len = d->ndim > 0 ? d->dim[d->ndim - 1] : 1;
    r.ps = d->ndim > 0 ? d->pstride[d->ndim - 1] : 0;
    if (r.len < 1) r.len = 1;
    r.rows = d->size / r.len;
    r.per = r.len >= FL_EW_CHUNK ? 1 : FL_EW_CHUNK / r.len;
    return r;
}
/* The same chunks for a loop that hands each whole chunk to a vector
 * kernel: their count, and chunk k's start and length. */
static inline int64_t fl_ew_chunks(int64_t n) { return (n + FL_EW_CHUNK - 1) / FL_EW_CHUNK; }
static inline int64_t fl_ew_len(int64_t n, int64_t i0) { return n - i0 < FL_EW_CHUNK ? n - i0 : FL_EW_CHUNK; }
int fl_cpu_thread_id(void);

/* y[r, :] = act(y[r, :] + b) for rows r; single-threaded (callers split). */
void fl_cpu_bias_act_rows(int64_t rows, int n, const float *b, int act, float *y);
void fl_cpu_bias_act_rows_par(int64_t rows, int n, const float *b, int act, float *y);
/* dy *= act'(y); db (if not NULL) += column sums of the result. */
void fl_cpu_act_grad_rows(int64_t rows, int n, int act, const float *y, float *dy, float *db);

size_t fl_cpu_conv_workspace(const fl_conv_desc *d, int backward);
int fl_cpu_conv_slope(const fl_conv_desc *d);
int fl_cpu_conv_pre(const fl_conv_desc *d, int depthwise);
void fl_cpu_conv2d_fwd(const fl_conv_desc *d, const float *x, const float *w, const float *b, float *y, void *ws);
void fl_cpu_conv2d_bwd(const fl_conv_desc *d, const float *x, const float *w, const float *y, float *dy, float *dx,
                       float dx_beta, float *dw, float *db, void *ws);
void fl_cpu_conv2d_maxpool_fwd(const fl_conv_desc *d, const fl_conv_desc *p, const float *x, const float *w,
                               const float *b, float *y, float *pooled, int32_t *argmax, void *ws);
void fl_cpu_conv2d_maxpool_bwd(const fl_conv_desc *d, const fl_conv_desc *p, const float *x, const float *w,
                               const float *y, const float *pooled, const float *dpooled, const int32_t *argmax,
                               float *dy_scratch, float *dx, float dx_beta, int dx_relu_mask, float *dw, float *db,
                               void *ws);
/* Conv2D's backward whose dy is the training BatchNormalization's dx (backend.h conv2d_bn_bwd) */
void fl_cpu_conv2d_bn_bwd(const fl_conv_desc *d, const fl_bn_grad *bg, const float *x, const float *w,
                          const float *y, float *dy_scratch, float *dx, float dx_beta, float *dw, float *db, void *ws);
/* cpu_backend.c: the normalisation's dx from bn_bwd_coef's coefficients, over rows [0, rows) with g, x and
 * dx at those rows (one thread), or over all of bg's m rows in parallel */
void fl_cpu_bn_dx_rows(int64_t rows, int c, const fl_bn_grad *bg, const float *g, const float *x, float *dx);
/* The normalisation's forward over rows [0, rows) (one thread): y = act(x * st[j] + st[c + j]), act
 * FL_ACT_LINEAR, _RELU or _RELU6, its own pass's arithmetic (a convolution applying it as it copies its input:
 * backend.h d->pre) */
void fl_cpu_bn_apply_rows(int64_t rows, int c, const float *st, int act, const float *x, float *y);
/* The taps [*t0, *t1) of a k-tap window starting at o0 (negative: in the padding), taps dil apart, that land
 * inside [0, n); *t0 == *t1 where none does. The depthwise kernels' and the poolings' windows. */
static inline void fl_tap_range(int o0, int k, int dil, int n, int *t0, int *t1) {
    *t0 = o0 < 0 ? (-o0 + dil - 1) / dil : 0;
    *t1 = o0 > n - 1 ? 0 : (n - 1 - o0) / dil + 1 < k ? (n - 1 - o0) / dil + 1 : k;
    if (*t1 < *t0) *t1 = *t0;
}
/* The cap of a ReLU (FL_ACT_RELU: none) or ReLU6 fused into a normalisation */
static inline float fl_cpu_relu_cap(int act) { return act == FL_ACT_RELU6 ? 6.0f : INFINITY; }
void fl_cpu_bn_dx(int64_t m, int c, const fl_bn_grad *bg, const float *x, float *dx);
/* cpu_winograd.c: 3x3 stride-1 convolutions by Winograd F(2x2, 3x3) on the
 * AVX-512 micro-kernel. fl_wino_ok: whether d (forward, or a data gradient's
 * convolution over padded dy) takes it (FLYNN_CONV_WINOGRAD=0 turns it off;
 * fl_wino_force(0/1, -1 = back to the environment) for tests). u: the kernel
 * transformed by fl_wino_weights, fl_wino_u_floats(c, oc) floats; scratch:
 * fl_wino_scratch_floats per thread. fl_wino_rows computes output rows
 * [oh0, oh1) of one sample xs (unpadded; d's padding is read as zeros):
 * act(conv + b), or y + conv when accumulate (no bias, no activation but
 * the ReLU), then zero where gate <= 0 (gate laid out as y, NULL: none);
 * xs read through d->pre where given (backend.h). */
int fl_wino_ok(const fl_conv_desc *d);
void fl_wino_force(int on);
size_t fl_wino_u_floats(int c, int oc);
size_t fl_wino_scratch_floats(int c, int oc);
void fl_wino_weights(int c, int oc, const float *w, float *u);
void fl_wino_rows(const fl_conv_desc *d, const float *xs, const float *u, const float *b, float *ys, int oh0, int oh1,
                  int accumulate, const float *gate, float *scratch);
/* fl_wino_samples: act(conv + b + res) of ns whole samples from x (res laid out as y, NULL: none), their tiles
 * sharing blocks; or (accumulate) y += conv, then zero where gate (laid out as y; NULL: none) <= 0, as
 * fl_wino_rows; fl_wino_group: the samples whose tiles fill one block (1 where a sample's do) */
int fl_wino_group(const fl_conv_desc *d);
void fl_wino_samples(const fl_conv_desc *d, const float *x, const float *u, const float *b, float *y,
                     const float *res, int ns, int accumulate, const float *gate, float *scratch);
void fl_cpu_maxpool_fwd(const fl_conv_desc *d, const float *x, float *y, int32_t *argmax);
void fl_cpu_maxpool_bwd(const fl_conv_desc *d, const float *dy, const int32_t *argmax, float *dx, float dx_beta);
void fl_cpu_avgpool_fwd(const fl_conv_desc *d, const float *x, float *y);
void fl_cpu_avgpool_bwd(const fl_conv_desc *d, const float *dy, float *dx, float dx_beta);
void fl_cpu_gap_fwd(int64_t n, int64_t hw, int c, const float *x, float *y);
void fl_cpu_gap_bwd(int64_t n, int64_t hw, int c, const float *dy, float *dx, float dx_beta);

void fl_cpu_pact_fwd(const fl_pact_desc *d, int64_t n, const float *x, float *y);
void fl_cpu_pact_bwd(const fl_pact_desc *d, int64_t n, const float *x, const float *y, const float *dy, float *dx,
                     float beta);
void fl_cpu_softmax_axis_fwd(int64_t outer, int c, int64_t inner, const float *x, float *y);
void fl_cpu_softmax_axis_bwd(int64_t outer, int c, int64_t inner, const float *y, const float *dy, float *dx,
                             float beta);
void fl_cpu_prelu_fwd(const fl_bcast_desc *d, const float *x, const float *alpha, float *y);
void fl_cpu_prelu_bwd(const fl_bcast_desc *d, const float *x, const float *alpha, const float *dy, float *dx,
                      float beta, float *dalpha);
void fl_cpu_normalize_fwd(const fl_bcast_desc *d, int invert, const float *x, const float *mean, const float *var,
                          float *y);
void fl_cpu_normalize_bwd(const fl_bcast_desc *d, int invert, const float *var, const float *dy, float *dx,
                          float beta);

void fl_cpu_mul(int64_t n, const float *a, const float *b, float *dst);
void fl_cpu_binary(int mode, int64_t n, const float *a, const float *b, float *y);
void fl_cpu_add_affine(int mode, int64_t rows, int c, const float *x, const float *st, const float *o, float *y);
void fl_cpu_fill(int64_t n, float v, float *y);
void fl_cpu_bmerge_fwd(int mode, const fl_bcast_desc *d, const float *x, const float *b, float *y);
void fl_cpu_bmerge_bwd(int mode, const fl_bcast_desc *d, const float *x, const float *b, const float *dy, float *dx,
                       float beta_x, float *db, float beta_b);
void fl_cpu_axpby(int64_t n, float alpha, const float *x, float beta, float *y);
void fl_cpu_minmax_grad(int is_max, int64_t n, const float *x, const float *other, const float *dy, float *dx,
                        float beta);
void fl_cpu_concat_fwd(int64_t rows, int64_t cin, int64_t cout, int64_t off, const float *x, float *y);
void fl_cpu_concat_bwd(int64_t rows, int64_t cin, int64_t cout, int64_t off, const float *dy, float *dx, float beta);
void fl_cpu_pad2d(const fl_conv_desc *d, const float *x, float *y, float beta);
/* Tests: the depthwise row functions this CPU can run, bit k for level k
 * (0 portable, 1 AVX2+FMA, 2 AVX-512); force one level (-1: the default,
 * the best one; a level the CPU lacks also means the default). */
int fl_cpu_depthwise_levels(void);
void fl_cpu_depthwise_force(int level);
void fl_cpu_depthwise_fwd(const fl_conv_desc *d, const float *x, const float *w, const float *b, float *y);
void fl_cpu_depthwise_bwd(const fl_conv_desc *d, const float *x, const float *w, const float *y, float *dy,
                          float *dx, float dx_beta, float *dw, float *db);

void fl_cpu_upsample2d_fwd(const fl_conv_desc *d, int bilinear, const float *x, float *y);
void fl_cpu_upsample2d_bwd(const fl_conv_desc *d, int bilinear, const float *dy, float *dx, float dx_beta);
void fl_cpu_permute(int ndim, const int64_t *shape, const int *perm, const float *x, float *y, float beta);
void fl_cpu_conv2d_transpose_fwd(const fl_conv_desc *d, const float *x, const float *w, const float *b, float *y,
                                 void *ws);
void fl_cpu_conv2d_transpose_bwd(const fl_conv_desc *d, const float *x, const float *w, const float *y, float *dy,
                                 float *dx, float dx_beta, float *dw, float *db, void *ws);

/* cpu_act.c: the element-wise activations on vectors (single-threaded;
 * 0: the activation has no vector form there, nothing was done). x may be
 * y, dy may be dx. act: y = act(x); grad_y: g *= act'(x) from y = act(x);
 * grad_x: dx (beta: +)= dy * act'(x) from x and y; elu: ELU with alpha. */
int fl_cpu_act_vec(int act, int64_t n, const float *x, float *y);
int fl_cpu_act_grad_y_vec(int act, int64_t n, const float *y, float *g);
int fl_cpu_act_grad_x_vec(int act, int64_t n, const float *x, const float *y, const float *dy, float *dx,
                          float beta);
void fl_cpu_elu_vec(int64_t n, float alpha, const float *x, float *y);
/* ReLU(max_value hi, negative_slope lo, threshold th) as fl_pact_forward; its
 * derivative, or ELU's (elu, alpha lo), as fl_pact_grad times dy */
void fl_cpu_relu_p_vec(int64_t n, float lo, float th, float hi, const float *x, float *y);
void fl_cpu_pact_grad_vec(int64_t n, int elu, float lo, float th, float hi, const float *x, const float *y,
                          const float *dy, float *dx, float beta);
/* tests: run the level given (0 portable, 1 AVX2), -1: the CPU's best */
void fl_cpu_act_force_level(int level);

/* cpu_attention.c: LayerNormalization and attention */
void fl_cpu_layernorm_fwd(int64_t rows, int c, float eps, int rms, const float *x, const float *gamma,
                          const float *beta, float *y, float *stats);
void fl_cpu_layernorm_bwd(int64_t rows, int c, int rms, const float *x, const float *gamma, const float *stats,
                          const float *dy, float *dx, float dx_beta, float *dgamma, float *dbeta);
void fl_cpu_gemm_batched(const fl_gemm_desc *d, const float *a, const float *b, float *c);
void fl_cpu_attn_fwd_blocked(const fl_gemm_desc *sd, const fl_gemm_desc *pd, const fl_attn_desc *d,
                             const float *q, const float *k, const float *v, const float *qmask,
                             const float *vmask, const float *amask, float *s, float *out, int keep);
void fl_cpu_attn_softmax_fwd(const fl_attn_desc *d, const float *qmask, const float *vmask, const float *amask,
                             float *s);
void fl_cpu_attn_softmax_bwd(const fl_attn_desc *d, const float *qmask, const float *vmask, const float *amask,
                             const float *p, float *dp);
void fl_cpu_attn_bwd_blocked(const fl_gemm_desc *vd, const fl_gemm_desc *gd, const fl_gemm_desc *qd,
                             const fl_gemm_desc *kd, const fl_attn_desc *d, const float *q, const float *k,
                             const float *v, const float *p, const float *dout, const float *qmask,
                             const float *vmask, const float *amask, float *g, float *dq, float *dk, float *dv);
/* recurrent layers (cpu_rnn.c) */
void fl_cpu_rnn_fwd(const fl_rnn_desc *d, const float *x, const float *w, const float *r, const float *b,
                    const float *mask, const fl_rnn_states *st, float *y, float *aux);
void fl_cpu_rnn_bwd(const fl_rnn_desc *d, const float *x, const float *w, const float *r, const float *b,
                    const float *mask, const fl_rnn_states *st, const float *dy, float *aux, float *dx, float dx_beta, float *dw, float *dr,
                    float *db);
/* sequences: cpu_seq.c */
void fl_cpu_embedding_fwd(int64_t n, int d, int64_t v, int x_int, const float *x, const float *w, float *y);
void fl_cpu_embedding_bwd(int64_t n, int d, int64_t v, int x_int, const float *x, const float *dy, float *dw);
void fl_cpu_seq_mask(int64_t rows, int c, int x_int, const float *x, float value, float *m);
void fl_cpu_masked_gap1d_fwd(int64_t n, int64_t t, int c, const float *x, const float *m, float *y);
void fl_cpu_masked_gap1d_bwd(int64_t n, int64_t t, int c, const float *m, const float *dy, float *dx, float beta);
void fl_cpu_loss_mask(int64_t rows, int c, const float *m, float *row_loss, float *grad, double *acc);
void fl_cpu_loss_weight(int64_t rows, int c, const float *w, float *row_loss, float *grad);

/* the Attention layer's learned scores (cpu_attn_score.c) */
void fl_cpu_scalar_mul_fwd(int64_t n, const float *x, const float *s, float *y);
void fl_cpu_scalar_mul_bwd(int64_t n, const float *x, const float *s, const float *dy, float *dx, float dx_beta,
                           float *ds);
void fl_cpu_attn_concat_fwd(const fl_attn_desc *d, const float *q, const float *k, const float *scale, float *s);
void fl_cpu_attn_concat_bwd(const fl_attn_desc *d, const float *q, const float *k, const float *scale,
                            const float *ds, int which, float *dst, float beta, float *dscale);
#endif
