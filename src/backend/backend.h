/*
 * backend.h — the backend interface: a table of function pointers for memory
 * (alloc, free, copies, sync) and one entry per kernel the ops need. The CPU
 * backend (backend/cpu) is always linked in; the CUDA backend fills the same
 * table from a plugin. Ops (src/ops) call only through this table, so
 * nothing above src/ops knows which device runs. All float buffers are
 * device pointers of the owning backend; shapes are NHWC / row-major.
 *
 * Gradient outputs take a `beta`: 0 overwrites the destination, 1 adds to it
 * (a node feeding several consumers accumulates its gradient).
 */
#ifndef FL_BACKEND_H
#define FL_BACKEND_H

#if !defined(__OPENCL_VERSION__) /* the descriptors below are also OpenCL C's (backend/kernels/) */
#include <stddef.h>
#include <stdint.h>
#endif

/* A Conv2D / pooling geometry for one batch. */
typedef struct fl_conv_desc {
    int64_t n;           /* batch */
    int h, w, c;         /* input */
    int oh, ow, oc;      /* output (oc: filters; pooling: = c) */
    int kh, kw, sh, sw;  /* window and strides */
    int pt, pl;          /* padding before (top, left); the rest falls after */
    int act;             /* fused activation (FL_ACT_*) */
    int has_bias;
    /* Conv2D's forward with act FL_ACT_RELU, where the backend's conv_slope
     * says it takes one: when > 0 (and < 1), max(slope x, x) (a LeakyReLU
     * after a folded BatchNormalization) instead of max(0, x) */
    float slope;
    /* Conv2D and depthwise only (0 reads as 1): dilation, tap (i, j) reads
     * x[oh*sh - pt + i*dil_h, ow*sw - pl + j*dil_w]; groups: input channels
     * [g*c/groups, (g+1)*c/groups) feed outputs [g*oc/groups, ...), kernel
     * w[kh, kw, c/groups, oc] (Keras's grouped layout) */
    int dil_h, dil_w, groups;
    /* Training's Conv2D, where the backend's conv_pre takes it: the input the
     * convolution reads (forward, and the filter gradient) is pre_act(x[., c]
     * * pre[c] + pre[c + C]), a BatchNormalization's affine rounded as its
     * own pass rounds it (a multiply, then an add) and the ReLU or ReLU6
     * after it (FL_ACT_RELU, _RELU6; FL_ACT_LINEAR: none), formed as x is
     * read; the padding stays zero. NULL: x itself. */
    const float *pre;
    int pre_act;
    /* Conv2D's forward in inference, where the backend's conv_res is set: a
     * residual added before the activation, y = act(conv + b + res), res
     * laid out as y and act FL_ACT_LINEAR, _RELU or _RELU6 (an Add of the
     * convolution's output and res, and the ReLU after it, rounded as those
     * passes round: the convolution's value, then the sum). NULL: none. */
    const float *res;
    /* Training's Conv2D backward, where the backend's conv_dx_gate is set:
     * x is a ReLU's value, and dx is stored (written, or added into with
     * dx_beta) already multiplied by (x > 0): the ReLU's mask applied to its
     * whole gradient by its last writer. Never with pre. */
    int dx_gate;
} fl_conv_desc;

static inline int fl_conv_dil_h(const fl_conv_desc *d) { return d->dil_h > 1 ? d->dil_h : 1; }
static inline int fl_conv_dil_w(const fl_conv_desc *d) { return d->dil_w > 1 ? d->dil_w : 1; }
static inline int fl_conv_groups(const fl_conv_desc *d) { return d->groups > 1 ? d->groups : 1; }

typedef struct fl_dense_desc {
    int64_t m;           /* rows: batch x all leading dims */
    int k, n;            /* in features, units */
    int act;
    int has_bias;
} fl_dense_desc;

typedef struct fl_bn_desc {
    int64_t m;           /* rows reduced over (N*H*W) */
    int c;               /* channels (last axis) */
    float eps, momentum;
    /* bn_fwd_train_act, bn_bwd_act and bn_bwd_coef with act FL_ACT_RELU,
     * where the backend's bn_act_slope says it takes one: when nonzero (in
     * (0, 1)), the ReLU is a LeakyReLU with this negative slope (Keras's
     * LeakyReLU, or ReLU(negative_slope=...)): v > 0 ? v : v < 0 ? slope * v
     * : 0, derivative 1, slope or 0 (fl_pact_forward, fl_pact_grad) */
    float slope;
} fl_bn_desc;

/* The data gradient of a training BatchNormalization, as the convolution
 * before it reads it (conv2d_bn_bwd): per element of [m, c],
 * dx = s * g' + t + u * (x - mean) per channel, with g' = g, or g masked by
 * the derivative of the fused ReLU (act: FL_ACT_RELU or FL_ACT_RELU6) where
 * coef is given: 0 < x * s' + t' < cap, with s' and t' the 2c floats of
 * coef, the forward's own (bn_fwd_train_act), so that the ReLU's input is
 * recomputed to the bit and its output never read. x is the
 * normalisation's input (the convolution's output). */
typedef struct fl_bn_grad {
    const float *g, *coef;
    int act;
    float slope;             /* the fused ReLU's negative slope, as fl_bn_desc's */
    const float *mean, *stu; /* c floats; s, t, u: 3c floats (bn_bwd_coef) */
} fl_bn_grad;

/* A parametrized element-wise activation (the layers ReLU, LeakyReLU, ELU,
 * Rescaling); the formulas are fl_pact_forward/fl_pact_grad in ops/math.h. */
enum fl_pact_code { FL_PACT_RELU = 1, FL_PACT_ELU, FL_PACT_AFFINE };
typedef struct fl_pact_desc {
    int code;            /* fl_pact_code */
    float a, b, c;       /* RELU: negative_slope, threshold, max_value (INFINITY: none);
                          * ELU: alpha; AFFINE: scale, offset */
} fl_pact_desc;

/* A per-sample parameter broadcast over some axes (PReLU's alpha with its
 * shared axes, Normalization's mean and variance): element j of a sample
 * (row-major over dim[0..ndim)) reads parameter element
 * sum_k ((j / inner_k) % dim[k]) * pstride[k], inner_k being the product
 * of the later dims; pstride[k] = 0 on broadcast (shared) axes, whose
 * neighbours are merged, so ndim is small. */
#define FL_BCAST_MAX_DIMS 8
typedef struct fl_bcast_desc {
    int64_t n;           /* batch */
    int64_t size;        /* elements of one sample */
    int64_t psize;       /* elements of the parameter */
    int ndim;
    int64_t dim[FL_BCAST_MAX_DIMS], sstride[FL_BCAST_MAX_DIMS], pstride[FL_BCAST_MAX_DIMS];
} fl_bcast_desc;

/* Scaled dot-product attention (MultiHeadAttention, Attention): q (n, tq,
 * heads*dk), k (n, tk, heads*dk), v (n, tk, heads*dv); the weights of one
 * batch are (n, heads, tq, tk). */
typedef struct fl_attn_desc {
    int64_t n;           /* batch */
    int heads, tq, tk, dk, dv;
    float scale;         /* multiplies q k^T */
    int causal;          /* query i sees keys j <= i only */
    int mask_mode;       /* 0, 2: MultiHeadAttention's masking (with, without dropout), 1: Attention's (attn_softmax_fwd) */
} fl_attn_desc;

/* A batch of row-major GEMMs C_i = alpha * op(A_i) op(B_i) + beta * C_i
 * (op: transposed when ta/tb), m x n, inner size k, i = o * ninner + j for
 * o < nouter, j < ninner, at X_i = X + o * sX[0] + j * sX[1] (floats):
 * the (batch, heads) blocks of the attention tensors. */
typedef struct fl_gemm_desc {
    int ta, tb;
    int m, n, k;
    float alpha, beta;
    int lda, ldb, ldc;
    int64_t sa[2], sb[2], sc[2];
    int64_t nouter;
    int ninner;
} fl_gemm_desc;

enum fl_loss_code { FL_LC_CCE = 1, FL_LC_SCCE, FL_LC_BCE, FL_LC_MSE };
/* How the prediction relates to the loss input (fused paths). */
enum fl_loss_input { FL_LI_PROBS = 0, FL_LI_LOGITS, FL_LI_SOFTMAX_FUSED, FL_LI_SIGMOID_FUSED };

typedef struct fl_loss_desc {
    int code;            /* fl_loss_code */
    int input;           /* fl_loss_input */
    int64_t rows;        /* samples x leading dims */
    int c;               /* classes / last axis */
    float scale;         /* gradient scale: 1/rows (sum_over_batch_size) */
} fl_loss_desc;

enum fl_opt_code { FL_OPT_SGD = 1, FL_OPT_ADAM, FL_OPT_ADAMW, FL_OPT_RMSPROP };

typedef struct fl_opt_desc {
    int code;
    float lr, momentum, beta1, beta2, eps, rho, weight_decay;
    int nesterov, centered;
    int64_t step;        /* 1-based iteration being applied */
    /* Keras's gradient clipping (base_optimizer._clip_gradients), applied to
     * the gradients before the update: FL_CLIP_NORM scales each tensor's
     * gradient g by clip / max(|g|_2, clip); FL_CLIP_GLOBAL_NORM all of them
     * by clip * min(1 / |all g|_2, 1 / clip); FL_CLIP_VALUE clamps each
     * element to [-clip, clip]. lr is the step's learning rate (a
     * schedule's value, computed by the caller). */
    int clip_mode;       /* enum fl_clip_mode */
    float clip;
} fl_opt_desc;

enum fl_clip_mode { FL_CLIP_NONE = 0, FL_CLIP_NORM, FL_CLIP_VALUE, FL_CLIP_GLOBAL_NORM };

/* One trainable tensor for the fused optimizer step. */
typedef struct fl_param_ref {
    float *w, *g;
    float *s0, *s1, *s2; /* optimizer slots (momentum / m, v / velocity, mg) */
    int64_t n;
} fl_param_ref;

/* A recurrent layer (SimpleRNN, LSTM, GRU) over a whole sequence, as Keras
 * 3's cells and backend.rnn (keras/src/layers/rnn/, backend/jax/rnn.py).
 * x[n, t, d]; kernel w[d, G*u], recurrent kernel r[u, G*u] with G gates in
 * Keras's order (SimpleRNN 1; LSTM 4: i, f, c, o; GRU 3: z, r, h); bias
 * b[G*u] (GRU reset_after: b[2, G*u], input row then recurrent row) or NULL.
 *   SimpleRNN: h = act(x W + b + h' R)
 *   LSTM:      i, f, o = ract(..), g = act(..), c = f c' + i g, h = o act(c)
 *   GRU:       z, r = ract(x Wz,r + bz,r + h' Rz,r (+ brz,r)),
 *              reset_after: hh = act(x Wh + bh + r (h' Rh + brh))
 *              else:        hh = act(x Wh + bh + (r h') Rh)
 *              h = z h' + (1 - z) hh
 * Step k reads input time k (go_backwards: t - 1 - k). mask[n, t] (1/0
 * floats, or NULL): where 0, the state is carried over unchanged and the
 * step's output is that carried state (Keras's zero_output_for_mask
 * False) or 0 (zero_masked: True, as Bidirectional sets it when returning
 * sequences). y: [n, t, u] outputs in step order (return_sequences; with
 * reverse_output in the reverse order, as Bidirectional flips its backward
 * layer's) or [n, u] the last. aux: fl_rnn_aux_floats(d) floats per sample, written by
 * forward (what backward needs) and used as scratch by backward. */
enum fl_rnn_cell { FL_RNN_SIMPLE = 1, FL_RNN_LSTM, FL_RNN_GRU };
/* The states at the sequence's two ends (Keras's initial_state and
 * return_state), each [n, u]; c0, cT, dcT, dc0 for LSTM only. The states
 * are the carried ones: with a mask, the last valid step's; with
 * go_backwards, after input time 0. Every pointer may be NULL (forward: h0/c0
 * zeros, hT/cT not wanted; backward: dhT/dcT zero, dh0/dc0 not wanted), and
 * so may the struct itself (no states at all). Forward writes hT, cT;
 * backward adds dhT, dcT to the final carried gradients and writes
 * (overwrites) dh0, dc0; it reads h0, c0 as forward did.
 * Dropout (training only; Keras 3's cells with recurrent_dropout > 0, which
 * switch to implementation 1, keras/src/layers/rnn/lstm.py, gru.py,
 * simple_rnn.py): hdrop [n, G*u] and xdrop [n, G*d], one mask per gate,
 * already scaled (0 or 1/(1-rate)) and the same at every step. Gate g's
 * recurrent projection reads h' * hdrop[:, g] (GRU reset_after False: its
 * candidate reads r * h' * hdrop[:, 2]), its input projection x * xdrop[:, g];
 * the state carried through z (GRU) and the LSTM carry are not masked.
 * NULL: no mask. Either needs fl_rnn_desc.drop_scratch (the aux's room for
 * the masked copies), and backward must get the masks forward got. */
typedef struct fl_rnn_states {
    const float *h0, *c0;
    float *hT, *cT;
    const float *dhT, *dcT;
    float *dh0, *dc0;
    const float *hdrop, *xdrop;
} fl_rnn_states;
typedef struct fl_rnn_desc {
    int cell;              /* fl_rnn_cell */
    int64_t n;             /* batch */
    int t, d, u;           /* timesteps, input features, units */
    int act, ract;         /* activation, recurrent_activation (FL_ACT_*; derivative from the output) */
    int has_bias, reset_after, go_backwards, return_sequences, reverse_output, zero_masked;
    int drop_scratch;      /* 1: fl_rnn_states may carry dropout masks; aux holds their scratch */
    int infer;             /* 1: no backward follows (inference): aux need not keep what backward reads */
} fl_rnn_desc;
static inline int fl_rnn_gates(const fl_rnn_desc *d) {
    return d->cell == FL_RNN_LSTM ? 4 : d->cell == FL_RNN_GRU ? 3 : 1;
}
/* per sample: gates, input and recurrent pre-activation gradients (t*G*u
 * each), states before each step, LSTM carries, GRU's recurrent candidate
 * part (t*u each), and one step's scratch (G*u + 3u); with drop_scratch
 * also a masked copy of the inputs or states (t*max(d, u)) and of one
 * step's state per gate (G*u) */
static inline int64_t fl_rnn_aux_floats(const fl_rnn_desc *d) {
    int64_t gu = (int64_t)fl_rnn_gates(d) * d->u;
    int64_t base = (int64_t)d->t * (3 * gu + 3 * (int64_t)d->u) + gu + 3 * (int64_t)d->u;
    return base + (d->drop_scratch ? (int64_t)d->t * (d->d > d->u ? d->d : d->u) + gu : 0);
}

#if !defined(__OPENCL_VERSION__) /* the table of host functions: not for kernels */
typedef struct fl_backend {
    const char *name;            /* "cpu", "cuda" */
    int host_memory;             /* buffers are host memory (host pointers usable as device pointers) */
    /* memory */
    void *(*alloc)(size_t bytes);                     /* NULL + fl_error on failure */
    void (*free)(void *p);
    void (*upload)(void *dst, const void *src, size_t bytes);   /* host -> device */
    void (*download)(void *dst, const void *src, size_t bytes); /* device -> host */
    void (*copy)(void *dst, const void *src, size_t bytes);     /* device -> device */
    void (*zero)(void *dst, size_t bytes);
    void (*sync)(void);
    /* Optional (NULL: inference runs whole batches): the bytes of batch
     * buffers an inference step should keep within, so that each layer's
     * output is still in cache when the next reads it. predict runs a larger
     * batch in steps of fewer samples (the samples are independent then). */
    size_t (*infer_budget)(void);
    /* the first error of an earlier asynchronous call (a failed kernel
     * launch, an illegal address), reported once via fl_error; FL_OK if none */
    int (*check)(void);
    /* matmul/conv precision for float32: 1 = TF32 tensor cores allowed
     * ("high"), 0 = full float32 ("highest"); NULL where it means nothing */
    void (*set_tf32)(int allow);
    /* free and total device memory in bytes */
    void (*mem_info)(size_t *free_bytes, size_t *total_bytes);
    /* dst[i, :] = src[idx[i], :] for i < n, rows of `row` floats; src and idx
     * are backend buffers (a data set resident on the device) */
    void (*gather_rows)(const float *src, const int64_t *idx, int64_t n, int64_t row, float *dst);

    /* Dense: y = act(x[m,k] @ w[k,n] + b[n]) */
    void (*dense_fwd)(const fl_dense_desc *d, const float *x, const float *w, const float *b, float *y);
    /* dy is overwritten with dy*act'(y). dx may be NULL. dw, db overwritten. */
    void (*dense_bwd)(const fl_dense_desc *d, const float *x, const float *w, const float *y, float *dy,
                      float *dx, float dx_beta, float *dw, float *db);

    /* Conv2D NHWC, w[kh,kw,c/groups,oc] (dilation and groups: fl_conv_desc);
     * ws: workspace of conv_workspace() bytes */
    size_t (*conv_workspace)(const fl_conv_desc *d, int backward);
    /* Optional (NULL: never): whether conv2d_fwd takes d->slope, a LeakyReLU
     * in its epilogue, for a convolution with these taps (dilation, groups) */
    int (*conv_slope)(const fl_conv_desc *d);
    void (*conv2d_fwd)(const fl_conv_desc *d, const float *x, const float *w, const float *b, float *y, void *ws);
    void (*conv2d_bwd)(const fl_conv_desc *d, const float *x, const float *w, const float *y, float *dy,
                       float *dx, float dx_beta, float *dw, float *db, void *ws);

    /* Depthwise Conv2D NHWC: d->c input channels, w[kh,kw,c,dm] with
     * dm = d->oc / d->c, b[oc] or NULL; y[n,oh,ow,c*dm+m] = act(b[c*dm+m] +
     * sum_{i,j} x[n, oh*sh-pt+i, ow*sw-pl+j, c] * w[i,j,c,m]) (outside x: 0).
     * Backward: dy is overwritten with dy*act'(y); dx (beta) may be NULL; dw
     * and db (either may be NULL) are overwritten. */
    void (*depthwise_fwd)(const fl_conv_desc *d, const float *x, const float *w, const float *b, float *y);
    void (*depthwise_bwd)(const fl_conv_desc *d, const float *x, const float *w, const float *y, float *dy,
                          float *dx, float dx_beta, float *dw, float *db);

    /* Conv2D followed by max pooling, where the convolution's only consumer
     * is the pooling (NULL: not fused; ops/ops.c then runs the two ops).
     * Forward writes the convolution's y and the pooling's outputs in one
     * pass (pooling rows while they are in cache). Backward runs the
     * convolution's whole backward from the pooling's gradient, without the
     * gradient of y ever being written in full: dy_scratch (y's gradient
     * buffer) may be used as scratch. dx_relu_mask: x is the output of a
     * ReLU whose only consumer is this convolution; dx is written already
     * multiplied by (x > 0), and dx_beta is 0. */
    void (*conv2d_maxpool_fwd)(const fl_conv_desc *conv, const fl_conv_desc *pool, const float *x, const float *w,
                               const float *b, float *y, float *pooled, int32_t *argmax, void *ws);
    void (*conv2d_maxpool_bwd)(const fl_conv_desc *conv, const fl_conv_desc *pool, const float *x, const float *w,
                               const float *y, const float *pooled, const float *dpooled, const int32_t *argmax,
                               float *dy_scratch, float *dx, float dx_beta, int dx_relu_mask, float *dw, float *db,
                               void *ws);

    /* pooling: argmax holds, per output, where the maximum was (in the
     * backend's own encoding: only its maxpool_bwd reads it) */
    void (*maxpool_fwd)(const fl_conv_desc *d, const float *x, float *y, int32_t *argmax);
    void (*maxpool_bwd)(const fl_conv_desc *d, const float *dy, const int32_t *argmax, float *dx, float dx_beta);
    void (*avgpool_fwd)(const fl_conv_desc *d, const float *x, float *y);
    void (*avgpool_bwd)(const fl_conv_desc *d, const float *dy, float *dx, float dx_beta);
    /* global average pooling: x[n, hw, c] -> y[n, c] */
    void (*gap_fwd)(int64_t n, int64_t hw, int c, const float *x, float *y);
    void (*gap_bwd)(int64_t n, int64_t hw, int c, const float *dy, float *dx, float dx_beta);

    /* activations over [rows, c]; softmax along c */
    void (*act_fwd)(int act, int64_t rows, int c, const float *x, float *y);
    void (*act_bwd)(int act, int64_t rows, int c, const float *x, const float *y, const float *dy, float *dx,
                    float dx_beta);

    /* dropout: mask[i] = keep; y = x*mask/(1-rate); mask[i] from Philox(seed,
     * stream, offset + i) (word (offset + i) % 4 of block (offset + i) / 4), so
     * that a buffer holding rows [lo, ..) of a batch (a rank's share under
     * MPI) draws what the whole batch draws for those rows: offset = lo *
     * (mask elements per row); 0 otherwise */
    void (*dropout_fwd)(int64_t n, float rate, uint64_t seed, uint64_t stream, int64_t offset, const float *x,
                        float *y, uint8_t *mask);
    void (*dropout_bwd)(int64_t n, float rate, const uint8_t *mask, const float *dy, float *dx, float dx_beta);

    /* batch normalization over [m, c]; training updates the moving stats and
     * saves mean/invstd for backward */
    void (*bn_fwd_train)(const fl_bn_desc *d, const float *x, const float *gamma, const float *beta, float *y,
                         float *save_mean, float *save_invstd, float *moving_mean, float *moving_var);
    void (*bn_fwd_infer)(const fl_bn_desc *d, const float *x, const float *gamma, const float *beta,
                         const float *moving_mean, const float *moving_var, float *y);
    void (*bn_bwd)(const fl_bn_desc *d, const float *x, const float *gamma, const float *save_mean,
                   const float *save_invstd, const float *dy, float *dx, float dx_beta, float *dgamma,
                   float *dbeta);
    /* Optional (NULL: the two layers run apart): training's normalisation
     * with the ReLU (act FL_ACT_RELU) or ReLU6 (FL_ACT_RELU6) that alone
     * reads it. The forward writes act(x * s + t) into y, the
     * normalisation's own output nowhere, and the per-channel s and t it
     * applied into coef (2c floats). The backward takes coef and dy, the
     * gradient of y, and reads dy masked by the ReLU's derivative
     * (0 < x * s + t < cap, the ReLU's input computed again as the forward
     * computed it, so the same mask to the bit without reading y), as
     * bn_bwd would read the ReLU backward's result. */
    void (*bn_fwd_train_act)(const fl_bn_desc *d, int act, const float *x, const float *gamma, const float *beta,
                             float *y, float *coef, float *save_mean, float *save_invstd, float *moving_mean,
                             float *moving_var);
    void (*bn_bwd_act)(const fl_bn_desc *d, int act, const float *coef, const float *x, const float *gamma,
                       const float *save_mean, const float *save_invstd, const float *dy, float *dx, float dx_beta,
                       float *dgamma, float *dbeta);
    /* Optional, both or neither (NULL: the normalisation writes its dx
     * itself): training's normalisation backward without its dx pass. It
     * takes the sums, writes dgamma and dbeta, and leaves in stu (3c floats)
     * the s, t and u of its dx (fl_bn_grad); act and coef are the fused
     * ReLU as in bn_bwd_act (FL_ACT_LINEAR and NULL: none). The Conv2D before it
     * (linear; the normalisation its only reader) then forms that dx a
     * sample at a time as its backward reads its dy (conv2d_bn_bwd), so the
     * dx never goes to memory and back; dy_scratch has room for the whole
     * dy where the backend forms it first. */
    void (*bn_bwd_coef)(const fl_bn_desc *d, int act, const float *coef, const float *x, const float *gamma,
                        const float *save_mean, const float *save_invstd, const float *dy, float *dgamma,
                        float *dbeta, float *stu);
    void (*conv2d_bn_bwd)(const fl_conv_desc *d, const fl_bn_grad *bg, const float *x, const float *w,
                          const float *y, float *dy_scratch, float *dx, float dx_beta, float *dw, float *db,
                          void *ws);

    /* elementwise: dst = a * b (dst may be a or b) */
    void (*mul)(int64_t n, const float *a, const float *b, float *dst);
    /* concatenation as [rows, cols] blocks: y[r, off .. off+cin) = x[r, 0 .. cin)
     * with y rows of cout columns; backward: dx (+)= that block of dy */
    void (*concat_fwd)(int64_t rows, int64_t cin, int64_t cout, int64_t off, const float *x, float *y);
    void (*concat_bwd)(int64_t rows, int64_t cin, int64_t cout, int64_t off, const float *dy, float *dx, float beta);
    /* zero padding / cropping of NHWC images: y[n, i, j, :] (beta: +)=
     * x[n, i - pt, j - pl, :] where that lies inside x (h x w), else 0; y
     * is oh x ow. pt/pl < 0 crop. The same call with the roles swapped
     * (pt, pl negated) is the backward. */
    void (*pad2d)(const fl_conv_desc *d, const float *x, float *y, float beta);
    /* elementwise (FL_BIN_*): y = a - b, max(a, b), min(a, b), a + b, or
     * a + b through a ReLU or ReLU6 (v = s > 0 ? s : 0, then v < 6 ? v : 6:
     * act_fwd's and pact_fwd's formula, NaN to 0); y may be a */
    void (*binary)(int mode, int64_t n, const float *a, const float *b, float *y);
    /* elementwise: y = alpha * x + (beta ? beta * y : 0) */
    void (*axpby)(int64_t n, float alpha, const float *x, float beta, float *y);
    /* the gradient of max(x, other) (is_max) or min(x, other) w.r.t. x, as
     * JAX takes it: dx (beta: +)= dy where x wins, dy / 2 where they tie */
    void (*minmax_grad)(int is_max, int64_t n, const float *x, const float *other, const float *dy, float *dx,
                        float beta);
    /* parametrized activations over n values: y = f(x); dx (beta: +)= dy * f'(x) */
    void (*pact_fwd)(const fl_pact_desc *d, int64_t n, const float *x, float *y);
    void (*pact_bwd)(const fl_pact_desc *d, int64_t n, const float *x, const float *y, const float *dy, float *dx,
                     float dx_beta);
    /* softmax along the middle axis of x[outer, c, inner] (the last axis is
     * act_fwd's FL_ACT_SOFTMAX); backward dx (beta: +)= y * (dy - sum_c(dy * y)) */
    void (*softmax_axis_fwd)(int64_t outer, int c, int64_t inner, const float *x, float *y);
    void (*softmax_axis_bwd)(int64_t outer, int c, int64_t inner, const float *y, const float *dy, float *dx,
                             float dx_beta);
    /* PReLU: y = x > 0 ? x : alpha[p(j)] * x over [d->n, d->size], p: d's
     * broadcast. Backward: dx (beta: +)= dy * (x > 0 ? 1 : alpha); dalpha
     * (overwritten, may be NULL) = sum over the batch and the shared axes of
     * dy * min(x, 0); dx may be NULL. */
    void (*prelu_fwd)(const fl_bcast_desc *d, const float *x, const float *alpha, float *y);
    void (*prelu_bwd)(const fl_bcast_desc *d, const float *x, const float *alpha, const float *dy, float *dx,
                      float dx_beta, float *dalpha);
    /* Normalization: y = (x - mean[p]) / max(sqrt(var[p]), 1e-7), or with
     * invert y = mean[p] + x * max(sqrt(var[p]), 1e-7); backward dx (beta:
     * +)= dy / that (invert: * that). mean, var: d's broadcast parameter. */
    void (*normalize_fwd)(const fl_bcast_desc *d, int invert, const float *x, const float *mean, const float *var,
                          float *y);
    void (*normalize_bwd)(const fl_bcast_desc *d, int invert, const float *var, const float *dy, float *dx,
                          float dx_beta);
    /* Add/Multiply with broadcasting (EfficientNet's squeeze-and-excitation:
     * x (h, w, c) * b (1, 1, c)): y[n, j] = x[n, j] + or * b[n, p(j)], b
     * holding d->psize values per sample (p: d's broadcast). Backward: dx
     * (beta_x: +)= dy (* b); db[n, q] (beta_b: +)= the sum over the
     * elements j with p(j) = q of dy (* x), in ascending j; dx or db may be
     * NULL. */
    void (*bmerge_fwd)(int mode, const fl_bcast_desc *d, const float *x, const float *b, float *y);
    void (*bmerge_bwd)(int mode, const fl_bcast_desc *d, const float *x, const float *b, const float *dy, float *dx,
                       float beta_x, float *db, float beta_b);
    /* Resizing of NHWC images h x w -> oh x ow (UpSampling2D: oh = h*sh),
     * as jax.image.resize with antialias off (Keras 3's UpSampling2D and
     * Resizing). Nearest: y[i, j] = x[floor((i + 0.5) h / oh), floor((j +
     * 0.5) w / ow)]. Bilinear: half-pixel centres, source row (i + 0.5) h /
     * oh - 0.5 between rows floor() and floor() + 1, both clamped to the
     * image (same for columns). Backward: dx (beta: +)= the transpose of
     * those weights applied to dy. */
    void (*upsample2d_fwd)(const fl_conv_desc *d, int bilinear, const float *x, float *y);
    void (*upsample2d_bwd)(const fl_conv_desc *d, int bilinear, const float *dy, float *dx, float dx_beta);
    /* Conv2DTranspose as the data gradient of the Conv2D that d describes
     * (input h x w x c, output oh x ow x oc, kernel kh x kw, strides, pt/pl):
     * the transposed convolution's input x is [n, oh, ow, oc], its output y
     * [n, h, w, c], its kernel w[kh, kw, c, oc] (Keras's (kh, kw, filters,
     * in)):  y[i*s + t - pad, :] += x[i, :] @ w[t]^T, then y = act(y + b[c]).
     * Backward: dy is overwritten with dy*act'(y); dx (beta: +)= Conv2D(dy, w)
     * (d's forward); dw, db overwritten. ws: conv_workspace(d, backward). */
    void (*conv2d_transpose_fwd)(const fl_conv_desc *d, const float *x, const float *w, const float *b, float *y,
                                 void *ws);
    void (*conv2d_transpose_bwd)(const fl_conv_desc *d, const float *x, const float *w, const float *y, float *dy,
                                 float *dx, float dx_beta, float *dw, float *db, void *ws);
    /* Transposition of a row-major tensor of ndim (<= 8) dims: y (beta: +)=
     * x with y's axis i being x's axis perm[i] (y.shape[i] = shape[perm[i]]). */
    void (*permute)(int ndim, const int64_t *shape, const int *perm, const float *x, float *y, float beta);
    /* y[0 .. n) = v */
    void (*fill)(int64_t n, float v, float *y);
    /* elementwise: dst = (beta ? dst : 0) + src */
    void (*accumulate)(int64_t n, const float *src, float *dst, float beta);

    /* loss: writes per-row losses (rows floats) and, if grad != NULL, the
     * gradient w.r.t. the loss input (the logits for fused/logit paths).
     * pred: [rows, c]; target: [rows] class indices (SCCE) or [rows, c]. */
    void (*loss)(const fl_loss_desc *d, const float *pred, const float *target, float *row_loss, float *grad);
    /* metric: per-row score (1 correct / 0 wrong; binary: fraction; MAE, MSE: the row's mean) */
    void (*metric)(int metric_code, int64_t rows, int c, const float *pred, const float *target, float *row_score);
    /* acc[0] += scale * sum(x[0..n)); acc is a backend buffer of doubles, so
     * running totals stay on the device until someone reads them */
    void (*sum_into)(int64_t n, const float *x, double scale, double *acc);

    /* one fused optimizer step for all parameters */
    void (*optimizer_step)(const fl_opt_desc *d, const fl_param_ref *params, int nparams);

    /* Graphs (NULL where the backend has none): the calls between
     * graph_begin and graph_end are recorded, not run, and graph_launch
     * replays them. A captured training step reads what changes between
     * steps from the device: the optimizer step (opt_step = iterations done
     * before the step) and the graph step that dropout streams mix in
     * (graph_step, see fl_dropout_stream). graph_begin gets the captured
     * step's; every graph_launch gets the replayed step's, which the backend
     * sets on the device first (eager steps in between move only the host's
     * counters). graph_end returns NULL (and clears the error) when capture
     * failed: the captured step did not run then and must be run again. */
    int (*graph_begin)(int64_t opt_step, int64_t graph_step);
    void *(*graph_end)(void);
    int (*graph_launch)(void *graph, int64_t opt_step, int64_t graph_step);
    void (*graph_free)(void *graph);

    /* LayerNormalization of rows of c values: stats[2r], stats[2r + 1] =
     * the row's mean and 1/sqrt(var + eps) (biased variance); y = (x - mean)
     * * invstd * gamma + beta, or with rms (Keras's rms_scaling) y = x *
     * invstd * gamma; gamma, beta may be NULL. Backward: dx (beta: +)= the
     * input gradient (may be NULL); dgamma, dbeta (overwritten, may be
     * NULL) = the sums over the rows of dy * xhat and of dy. */
    void (*layernorm_fwd)(int64_t rows, int c, float eps, int rms, const float *x, const float *gamma,
                          const float *beta, float *y, float *stats);
    void (*layernorm_bwd)(int64_t rows, int c, int rms, const float *x, const float *gamma, const float *stats,
                          const float *dy, float *dx, float dx_beta, float *dgamma, float *dbeta);
    /* the batched GEMMs of attention (fl_gemm_desc) */
    void (*gemm_batched)(const fl_gemm_desc *d, const float *a, const float *b, float *c);
    /* the attention weights, in place on s (n, heads, tq, tk): the softmax
     * over tk of s under the mask m = qmask[b, i] * vmask[b, j] * amask[b,
     * i, j] * (j <= i when causal), a NULL mask counting as ones. Keras's
     * two rules: d->mask_mode 0 (MultiHeadAttention's Softmax layer)
     * softmax over the unmasked j, masked weights 0 (a row with none: all
     * 0); mode 1 (the Attention layer) s - 1e9 (float32) where vmask *
     * causal is 0, softmax over all j, then rows with qmask 0 set to 0
     * (amask unused); mode 2 (MultiHeadAttention without dropout, which
     * Keras 3 on JAX runs as jax.nn.dot_product_attention) as mode 0 but a
     * row with no unmasked j gets the uniform 1/tk. Backward in place on dp
     * (the weights' gradient): dp = p * (dp - sum_j dp * p), 0 on mode 2's
     * uniform rows (their weights do not depend on the scores). */
    void (*attn_softmax_fwd)(const fl_attn_desc *d, const float *qmask, const float *vmask, const float *amask,
                             float *s);
    void (*attn_softmax_bwd)(const fl_attn_desc *d, const float *qmask, const float *vmask, const float *amask,
                             const float *p, float *dp);
    /* Optional (NULL: the op calls gemm_batched(sd, q, k, s),
     * attn_softmax_fwd(s), gemm_batched(pd, s, v, out)): the same three
     * steps with the same results, done one (batch, head) block at a time so
     * that a block's scores stay in cache (the CPU's). keep 0: no backward
     * follows, s is only scratch and its contents are undefined after. */
    void (*attn_fwd_blocked)(const fl_gemm_desc *sd, const fl_gemm_desc *pd, const fl_attn_desc *d,
                             const float *q, const float *k, const float *v, const float *qmask,
                             const float *vmask, const float *amask, float *s, float *out, int keep);
    /* Optional (NULL: the op calls gemm_batched for dV = W^T dO, G = dO V^T,
     * attn_softmax_bwd(p, G), gemm_batched for dQ = scale G K and dK = scale
     * G^T Q): the same steps with the same results, one (batch, head) block
     * at a time, for a backward without dropout on the weights; vd, gd, qd,
     * kd are those calls' descriptions, dv, dq, dk may be NULL (not wanted)
     * and may be one buffer (q, k, v one node). g: scratch the size of p,
     * its contents undefined after. */
    void (*attn_bwd_blocked)(const fl_gemm_desc *vd, const fl_gemm_desc *gd, const fl_gemm_desc *qd,
                             const fl_gemm_desc *kd, const fl_attn_desc *d, const float *q, const float *k,
                             const float *v, const float *p, const float *dout, const float *qmask,
                             const float *vmask, const float *amask, float *g, float *dq, float *dk, float *dv);
    /* Recurrent layers (fl_rnn_desc above). Backward: dx (beta: +)= and
     * dw, dr, db (overwritten) from dy, y's gradient; any may be NULL. */
    void (*rnn_fwd)(const fl_rnn_desc *d, const float *x, const float *w, const float *r, const float *b,
                    const float *mask, const fl_rnn_states *st, float *y, float *aux);
    void (*rnn_bwd)(const fl_rnn_desc *d, const float *x, const float *w, const float *r, const float *b,
                    const float *mask, const fl_rnn_states *st, const float *dy, float *aux, float *dx, float dx_beta,
                    float *dw, float *dr, float *db);
    /* Sequences (Embedding, masks, masked pooling and losses). An index is
     * idx(i) = x_int ? ((const int32_t *)x)[i] : (int32_t)x[i] (truncated, as
     * Keras casts floats). Embedding: y[i, :] = w[idx(i), :] for i < n, w
     * [v, d]; an index outside [0, v) gives a row of zeros (fit and predict
     * refuse such data before a kernel sees it). Backward: dw [v, d]
     * (overwritten) = the sum over i with idx(i) = r of dy[i, :], in
     * ascending i (deterministic). */
    void (*embedding_fwd)(int64_t n, int d, int64_t v, int x_int, const float *x, const float *w, float *y);
    void (*embedding_bwd)(int64_t n, int d, int64_t v, int x_int, const float *x, const float *dy, float *dw);
    /* m[r] = 1 if any x[r, j] (j < c) != value, else 0, for r < rows
     * (x_int: x holds int32 values, compared with (int32_t)value) */
    void (*seq_mask)(int64_t rows, int c, int x_int, const float *x, float value, float *m);
    /* GlobalAveragePooling1D with a mask m [n, t]: y[b, k] = sum_s (m[b, s]
     * ? x[b, s, k] : 0) / sum_s m[b, s]; backward dx[b, s, k] (beta: +)=
     * m[b, s] * dy[b, k] / sum_s m[b, s] */
    void (*masked_gap1d_fwd)(int64_t n, int64_t t, int c, const float *x, const float *m, float *y);
    void (*masked_gap1d_bwd)(int64_t n, int64_t t, int c, const float *m, const float *dy, float *dx, float beta);
    /* The output's mask applied to the loss, as Keras's apply_mask for
     * "sum_over_batch_size": w[r] = m[r] ? rows / sum(m) : 0 (0 when the
     * sum is 0); row_loss[r] *= w[r] and grad[r, 0..c) *= w[r] (grad may
     * be NULL); acc[0] += sum(m) (a double on the device: the count that
     * masked metrics divide by). */
    void (*loss_mask)(int64_t rows, int c, const float *m, float *row_loss, float *grad, double *acc);
    /* Sample weights applied to the loss (Keras's reduce_weighted_values for
     * "sum_over_batch_size": values * sample_weight, summed, / rows): for r <
     * rows, row_loss[r] *= w[r] and grad[r, 0..c) *= w[r] (grad may be NULL).
     * After loss_mask where the output has a mask: the two factors multiply,
     * as Keras's apply_mask merges the mask into the weights. */
    void (*loss_weight)(int64_t rows, int c, const float *w, float *row_loss, float *grad);
    /* The Attention layer's learned score weights (use_scale, score_mode
     * "concat"). A scalar weight s (one float in backend memory, read by the
     * kernel: a replayed graph sees its updates): forward y = s[0] x (y may
     * be x); backward ds[0] = sum_i dy[i] x[i] (overwritten; ds may be
     * NULL), then dx (beta: +)= s[0] dy (dx may be dy; NULL: none). */
    void (*scalar_mul_fwd)(int64_t n, const float *x, const float *s, float *y);
    void (*scalar_mul_bwd)(int64_t n, const float *x, const float *s, const float *dy, float *dx, float dx_beta,
                           float *ds);
    /* score_mode "concat" of one head (d->heads 1, q [n, tq, dk], k [n, tk,
     * dk]): s[b, i, j] = sum_e tanh(a (q[b, i, e] + k[b, j, e])), a = scale[0]
     * (use_scale) or 1 (scale NULL). Backward from ds (the gradient of s):
     * which 0: dst = dq, 1: dst = dk, (beta: +)=, or NULL; dscale[0] = the
     * scale's gradient (overwritten) when dscale is not NULL. */
    void (*attn_concat_fwd)(const fl_attn_desc *d, const float *q, const float *k, const float *scale, float *s);
    void (*attn_concat_bwd)(const fl_attn_desc *d, const float *q, const float *k, const float *scale,
                            const float *ds, int which, float *dst, float beta, float *dscale);
    /* The learning rate that a captured optimizer step (graph_begin ..
     * graph_end) reads from the device on its replays: train.c sets it
     * before every graph_launch, as the step counters, so that a schedule,
     * ReduceLROnPlateau or a user's change reaches a replayed step (an
     * eager step takes fl_opt_desc.lr). NULL where there are no graphs. */
    void (*graph_set_learning_rate)(float lr);
    /* Data-parallel training on a device (src/dist/): comm_stream_fork
     * makes the stream that the gradients' all-reduces run on wait for the
     * work queued so far and returns it (a cudaStream_t, for NCCL), so that
     * a reduction overlaps the rest of backward; comm_stream_join makes the
     * compute stream wait for what was queued on it. NULL on host-memory
     * backends. */
    void *(*comm_stream_fork)(void);
    void (*comm_stream_join)(void);
    /* Training's Add of two fed by a BatchNormalization that nothing else
     * reads: y = x * st[j] + st[c + j] + o per channel j of rows x c, then
     * through binary's mode (FL_BIN_ADD, _RELU, _RELU6), with the
     * normalisation's value rounded as its own pass rounds it (x * s + t,
     * no fused multiply-add) and added as binary adds: the same bits
     * without writing and reading that value. NULL: the two run apart. */
    void (*add_affine)(int mode, int64_t rows, int c, const float *x, const float *st, const float *o, float *y);
    /* Whether conv2d_fwd, conv2d_bwd, conv2d_bn_bwd and the conv2d_maxpool
     * pair (depthwise: depthwise_fwd and _bwd) take d->pre (a
     * normalisation's affine and ReLU formed as the convolution reads its
     * input, whose value is then never written) for a convolution of this
     * shape, in training. NULL: never. */
    int (*conv_pre)(const fl_conv_desc *d, int depthwise);
    /* Nonzero: bn_fwd_train_act, bn_bwd_act, bn_bwd_coef and conv2d_bn_bwd
     * take a LeakyReLU (fl_bn_desc's and fl_bn_grad's slope) as the fused
     * ReLU. 0: only ReLU and ReLU6, and a LeakyReLU runs as its own layer. */
    int bn_act_slope;
    /* Optional (NULL: the step follows infer_budget alone; see infer_budget): the bytes of
     * weights that stay in cache from one inference step to the next. Where
     * a model's weights are more, each step reads them all from memory, and
     * the step grows until its buffers are as large as the weights. */
    size_t (*infer_weight_cache)(void);
    /* Nonzero: conv2d_fwd takes d->res (in inference, the Add after a
     * convolution formed as it stores: fuse.res_add). 0: they run apart. */
    int conv_res;
    /* Nonzero: conv2d_bwd and conv2d_bn_bwd take d->dx_gate. 0: never set. */
    int conv_dx_gate;
    /* Optional (NULL: alloc, then zero): a zero-filled buffer, NULL + fl_error on failure; freed by free.
     * The CPU's large ones are pages the kernel fills on first touch, so that a buffer nothing writes (a
     * weight's gradient or an optimizer slot in a process that only predicts) takes neither memory nor the
     * time of clearing it. */
    void *(*alloc_zeroed)(size_t bytes);
} fl_backend;

/* be->alloc_zeroed where the backend has it, else be->alloc and be->zero */
static inline void *fl_backend_alloc_zeroed(const fl_backend *be, size_t bytes) {
    if (be->alloc_zeroed) return be->alloc_zeroed(bytes);
    void *p = be->alloc(bytes);
    if (p) be->zero(p, bytes);
    return p;
}
#endif

/* Modes of fl_backend.bmerge_*. */
enum { FL_BM_ADD = 1, FL_BM_MUL };

/* Modes of fl_backend.binary. */
enum { FL_BIN_SUB = 1, FL_BIN_MAX, FL_BIN_MIN, FL_BIN_ADD, FL_BIN_ADD_RELU, FL_BIN_ADD_RELU6 };

/* Metric codes for fl_backend.metric (match fl_metric's resolved values). */
enum { FL_MC_CATEGORICAL = 1, FL_MC_SPARSE_CATEGORICAL, FL_MC_BINARY, FL_MC_MAE, FL_MC_MSE };

#if !defined(__OPENCL_VERSION__)
const fl_backend *fl_backend_cpu(void);

/* The host's threads follow the CPUs other processes leave idle (flynn.h,
 * fl_num_threads_in_use): train.c calls this before each step, outside
 * parallel regions; it looks at most about once a second. */
void fl_threads_follow_load(void);
#endif

#endif
