/*
 * graph.h — the computation graph: nodes (a value, its gradient, the op that
 * made it) in topological order, and reverse-mode automatic differentiation
 * over them. A model builds its graph once with a symbolic batch dimension;
 * buffers are allocated for the largest batch and reused, so a training step
 * allocates nothing. This header is the graph's whole interface; graph.c and
 * plan.c (core) keep the nodes and their buffers, and the ops define the
 * rest: the fl_graph_* node constructors (src/ops/ops.c and its neighbours),
 * the fusion records (src/ops/fuse.c), and running a graph: fl_graph_forward,
 * fl_graph_backward, fl_graph_runs_on, fl_graph_reserve (src/ops/run.c).
 */
#ifndef FL_GRAPH_H
#define FL_GRAPH_H

#include "flynn/flynn.h"
#include "backend/backend.h"

typedef enum fl_op {
    FL_OP_INPUT = 0, /* a batch placeholder filled by fit/predict */
    FL_OP_PARAM,     /* a weight (trainable or not) */
    FL_OP_DENSE,     /* in: x, kernel[, bias]; fused activation */
    FL_OP_CONV2D,    /* in: x, kernel[, bias]; fused activation */
    FL_OP_MAXPOOL,
    FL_OP_AVGPOOL,
    FL_OP_GAP,       /* global average pooling 2D */
    FL_OP_RESHAPE,   /* a view: same buffer, new per-sample shape */
    FL_OP_DROPOUT,
    FL_OP_BATCHNORM, /* in: x, gamma|NULL, beta|NULL, moving_mean, moving_var */
    FL_OP_ACT,       /* element-wise activation or softmax over the last axis */
    FL_OP_ADD,       /* element-wise sum of 2+ inputs of one shape */
    FL_OP_MUL,       /* element-wise product of 2+ inputs */
    FL_OP_CONCAT,    /* concatenation along `axis` */
    FL_OP_PAD2D,     /* zero padding (or cropping: negative) of an image's rows and columns */
    FL_OP_SUB,       /* in[0] - in[1] */
    FL_OP_AVG,       /* mean of 2+ inputs of one shape */
    FL_OP_MAX,       /* element-wise maximum of 2+ inputs */
    FL_OP_MIN,       /* element-wise minimum of 2+ inputs */
    FL_OP_PACT,      /* element-wise activation with parameters: ReLU, LeakyReLU, ELU, Rescaling */
    FL_OP_SOFTMAX,   /* softmax along an axis other than the last (the last: FL_OP_ACT) */
    FL_OP_PRELU,     /* in: x, alpha (broadcast over the shared axes) */
    FL_OP_NORMALIZE, /* in: x, mean, variance (broadcast); no gradient to them */
    FL_OP_BMERGE,    /* Add/Multiply of x and a batched b broadcast over some axes (mode: FL_BM_*) */
    FL_OP_DEPTHWISE_CONV2D, /* in: x, kernel (kh, kw, c, dm)[, bias (c*dm)]; fused activation */
    FL_OP_UPSAMPLE2D, /* nearest or bilinear resizing (UpSampling2D, Resizing) */
    FL_OP_CONV2D_TRANSPOSE, /* in: x, kernel (kh, kw, filters, in)[, bias]; fused activation */
    FL_OP_PERMUTE,   /* transposition of the non-batch axes */
    FL_OP_LAYERNORM, /* in: x, gamma|NULL, beta|NULL; over the last `axis` values of each row (src/ops/attention.c) */
    FL_OP_ATTENTION, /* in: q, k, v[, query mask, value mask, attention mask]: softmax(q k^T * scale + mask) v per head */
    FL_OP_REPEAT,    /* RepeatVector: x (batch, d) -> (batch, n, d) */
    FL_OP_RNN,       /* in: x, kernel, recurrent_kernel, bias|NULL, mask|NULL[, h0|NULL, c0|NULL]: SimpleRNN, LSTM, GRU (fl_rnn_desc); final states: rnn_state */
    FL_OP_EMBEDDING, /* in: indices x (batch, ...), table w (input_dim, output_dim) -> (batch, ..., output_dim) */
    FL_OP_SEQ_MASK,  /* in: x (batch, T[, C]) -> (batch, T) 1/0: any value of step t != mask_value; no gradient */
    FL_OP_MASKED_GAP1D, /* in: x (batch, T, C), mask (batch, T) -> (batch, C): the mean over the valid steps */
    FL_OP_RNN_STATE, /* in: an RNN node -> (batch, u): its final h (axis 0) or LSTM c (axis 1), written by the RNN's forward */
    FL_OP_COUNT
} fl_op;

#define FL_NODE_MAX_IN 16

/* What a node's kernels do with its neighbours on the graph's backend: one pass (fl_fuse, src/ops/fuse.c)
 * writes it on every node once the graph stands (after fl_graph_finalize, a migration or a rebind: fl_graph's
 * fused), and the planner (plan.c), the buffers (graph.c) and the ops (ops.c) only read it. A pointer is NULL,
 * an act FL_ACT_LINEAR, where there is no such fusion. */
typedef struct fl_node fl_node;
typedef struct fl_fusion {
    fl_conv_desc desc;     /* Conv2D, DepthwiseConv2D, Conv2DTranspose: the descriptor its kernels run (conv,
                            * with the padding it takes; the batch is set per call) */
    fl_node *pad;          /* Conv2D, DepthwiseConv2D: the ZeroPadding2D that alone feeds it, whose padding it
                            * takes as its own (the padding's value and gradient are never written; Keras's
                            * applications pad before a strided convolution) */
    fl_node *pad_conv;     /* ZeroPadding2D: the convolution that takes its padding */
    fl_node *pool;         /* Conv2D: the MaxPooling2D it runs fused (its forward writes the pooling's value
                            * and aux; the pooling's backward runs the convolution's) */
    /* inference */
    fl_node *fold_bn;      /* Conv2D, DepthwiseConv2D: the BatchNormalization it may fold into its weights
                            * (where the batch pays for it: ops.c fold_bn), writing the normalisation's value */
    int64_t fold_floats;   /* the floats the folded weights take (g->fold) */
    fl_node *fold_act;     /* the ReLU (or, where conv_slope says, LeakyReLU) it then applies in its epilogue,
                            * writing its value */
    int fold_act_code;     /* FL_ACT_* of fold_act */
    float fold_slope;      /* its negative slope (a LeakyReLU's) */
    fl_node *res_add;      /* Conv2D, where conv_res: the two-input Add it forms as it stores (its value, or the
                            * normalisation's it folds with nothing after it, read alone by the Add) */
    fl_node *res_other;    /* the Add's other input (computed before the convolution) */
    fl_node *res_out;      /* the node whose value it then writes: the Add's ReLU, else the Add */
    int res_act;           /* that ReLU's FL_ACT_* */
    /* both modes (an Add), training (a BatchNormalization) */
    fl_node *relu;         /* the ReLU or ReLU6 (a normalisation's: or a LeakyReLU, where bn_act_slope) that its
                            * forward applies, writing the ReLU's value and not its own; its backward then reads
                            * the ReLU's gradient, masked, and the ReLU's backward writes nothing */
    int relu_act;          /* FL_ACT_RELU or FL_ACT_RELU6 */
    float relu_slope;      /* a LeakyReLU's negative slope, else 0 */
    /* training */
    fl_node *conv_bn;      /* Conv2D: the BatchNormalization whose data gradient its backward forms (the
                            * normalisation's backward leaves the coefficients in its aux) */
    fl_node *add;          /* BatchNormalization: the two-input Add that alone reads it and applies its affine
                            * as it adds (its value is never written) */
    fl_node *conv;         /* BatchNormalization: the convolution that forms its value, or that of its fused
                            * ReLU, as it reads its input (d->pre; neither value is written) */
    fl_node *conv_v;       /* the node whose value that is (the normalisation, or its ReLU) */
    int conv_act;          /* that ReLU's FL_ACT_* */
    fl_node *gate;         /* Conv2D: the ReLU fused into the Add before it whose mask its backward applies as it
                            * stores the data gradient (conv_dx_gate) */
} fl_fusion;

struct fl_node {
    fl_op op;
    int id;
    const char *name;          /* the owning layer's name, for messages */
    const char *op_name;       /* the op's name ("conv2d"), for messages: set by fl_graph_new_node */
    int weight_inputs;         /* inputs 1..weight_inputs are weights (the op's row: a shared layer's later calls
                                * write their gradients to scratch) */
    int nin;
    fl_node *in[FL_NODE_MAX_IN];
    int ndim;                  /* including the batch dimension when batched */
    int64_t shape[FL_MAX_DIMS];
    bool batched;              /* shape[0] is the batch */
    bool int_val;              /* INPUT: val holds int32 values (bit patterns in the float buffer), not floats */
    bool trainable;            /* PARAM: updated by the optimizer */
    bool needs_grad;           /* a gradient must be computed for this node */
    bool force_grad;           /* INPUT: compute d/d(input) anyway (gradient checks) */
    bool is_output;            /* read after the forward (a model output, or its loss mask): its value is kept */
    bool val_view, grad_view;  /* buffers borrowed from in[0] (RESHAPE) */
    bool grad_is_preact;       /* the loss wrote d/d(pre-activation) (fused softmax/sigmoid) */
    bool grad_ready;           /* written during this backward pass */
    int bn_folded;             /* CONV2D, DEPTHWISE_CONV2D: its last (inference) forward wrote the output of the
                                * BatchNormalization after it, with the statistics folded into the weights (1),
                                * or of the ReLU after that (2, fuse.fold_act) */
    bool relu_folded;          /* its last forward wrote the output of the ReLU after it instead of its own: an
                                * ADD or, in training, a BATCHNORM (fuse.relu); in training its backward then masks the ReLU's
                                * gradient */
    bool res_fused;            /* an ADD whose sum (and ReLU) the Conv2D before it wrote in this inference step
                                * (fuse.res_add): its own forward does nothing */
    bool affine_deferred;      /* a BATCHNORM whose last forward (training) left its affine to the Add that alone
                                * reads it (fuse.add): its value was not written */
    int nconsumers;
    float *val, *grad;         /* backend buffers */
    void *aux;                 /* saved for backward: argmax, dropout mask, BN batch stats */
    size_t aux_per_sample, aux_fixed; /* bytes */
    float *gscratch;           /* a shared layer's later calls: weight gradients before they are added */
    size_t gscratch_bytes;
    /* op parameters */
    int act;
    fl_conv_desc conv;         /* CONV2D / pools: geometry (n set per batch) */
    float rate;                /* DROPOUT, ATTENTION; RNN: recurrent_dropout */
    float rate_in;             /* RNN: dropout of the input, one mask per gate (with recurrent_dropout) */
    uint64_t stream;           /* DROPOUT, ATTENTION, RNN: Philox stream */
    float eps, momentum;       /* BATCHNORM */
    int axis;                  /* CONCAT, SOFTMAX: axis of the full shape (batch = 0) */
    fl_pact_desc pact;         /* PACT: formula and parameters */
    fl_bcast_desc bcast;       /* PRELU, NORMALIZE, BMERGE: how the parameter broadcasts (n set per batch) */
    int mode;                  /* BMERGE: FL_BM_ADD or FL_BM_MUL; DROPOUT: 1 with a noise shape (bcast);
                                * BATCHNORM: 1 frozen (moving statistics in training too);
                                * RNN: bit 0 the last forward kept what backward reads (training), bit 1 it drew
                                * dropout masks */
    bool invert;               /* NORMALIZE: the inverse transformation */
    float mask_value;          /* SEQ_MASK: the value of a padded step (Embedding mask_zero: 0) */
    int bilinear;              /* UPSAMPLE2D: 1 bilinear, 0 nearest */
    int perm[FL_MAX_DIMS];     /* PERMUTE: output axis i is input axis perm[i] (batch: perm[0] = 0) */
    fl_attn_desc attn;         /* ATTENTION: heads, sizes, scale, causal (batch set per call) */
    fl_rnn_desc rnn;           /* RNN: cell and options (n set per batch) */
    fl_node *mask;            /* (batch, T) float 1/0: the valid timesteps of this rank-3 sequence (Keras's _keras_mask), or NULL */
    fl_node *rnn_state[2];    /* RNN with return_state: its final h and (LSTM) c nodes (FL_OP_RNN_STATE), else NULL */
    unsigned dyn;             /* bit d: shape[d] follows a None (variable-length) input axis (Keras shows None) */
    size_t vbytes, abytes;    /* bytes of val (and grad) and of aux as allocated (a rebind keeps buffers that fit) */
    fl_fusion fuse;           /* what its kernels fuse (fl_fusion above) */
};

/* The batch buffers of the reservation not in use (fl_graph.kept): what reserve gave each node and the graph. */
typedef struct fl_node_bufs {
    float *val, *grad;
    void *aux;
    float *gscratch;
    size_t vbytes, abytes;
    bool val_view, grad_view;
} fl_node_bufs;
typedef struct fl_graph_bufs {
    fl_node_bufs *node;        /* one per node; NULL: none kept */
    void *arena, *ws;
    float *fold;
    size_t arena_bytes, ws_bytes, fold_bytes;
    int64_t batch_cap;
    bool infer, omits;
} fl_graph_bufs;

typedef struct fl_graph {
    const fl_backend *be;
    int n, cap;
    fl_node **nodes;           /* topological order */
    bool fused;                /* every node's fusion record is that of this graph on this backend (fl_fuse) */
    int64_t batch_cap;         /* batch the buffers hold */
    bool infer;                /* the buffers are inference's: no gradients, values shared by lifetime (plan.h) */
    bool omits;                /* training's buffers, with no value for some node (fused: plan.h), so that an
                                * inference forward cannot run in them */
    fl_graph_bufs kept;        /* the other mode's buffers (training's while inference runs in its own, or the
                                * other way), kept so that switching back allocates nothing */
    void *arena;               /* every batch buffer (values, gradients, aux): slices placed by plan.c */
    size_t arena_bytes;
    int64_t batch;             /* current batch */
    void *ws;                  /* conv workspace */
    size_t ws_bytes;
    float *fold;               /* inference: a convolution's weights and bias with its BatchNormalization folded in */
    size_t fold_bytes;
    int64_t fold_batch;        /* the batch whether to fold weighs (predict's, whatever step runs; 0: batch) */
    uint64_t seed;
    int64_t step;              /* training steps run (dropout streams) */
    /* the batch's first row in the whole batch (under MPI: the rank's share
     * starts there; 0 otherwise): random masks draw Philox element row_offset
     * * (mask elements per row) + i for their element i, as the whole batch
     * would (fl_graph_mask_offset) */
    int64_t row_offset;
    int64_t generation;        /* changes whenever buffers move or shapes change: invalidates captured steps */
    int64_t trainable_gen;     /* changes whenever a weight is frozen or unfrozen */
    int64_t param_bytes;       /* weights and their gradients (checked against fl_model_bytes_limit) */
    int64_t sample_bytes;      /* batched values per sample (ditto, at build time) */
    int64_t opt_bytes;         /* the optimizer's slots, included in param_bytes */
    /* backward passes that ran Conv2D -> MaxPooling2D fused (the backend's
     * conv2d_maxpool_bwd), and of those, with the ReLU mask of the
     * convolution's input folded in: so that tests can assert the path */
    int64_t fused_conv_pool_bwd, fused_relu_mask_bwd;
    /* set around predict's and evaluate's forward passes: no backward
     * follows, so an op may use what only its backward reads (attention's
     * weights) as scratch */
    bool no_backward;
    /* called by fl_graph_backward as it passes each weight (node index i),
     * when every op that reads the weight has added its gradient: data
     * parallel training starts that gradient's all-reduce there */
    void (*on_param_grad)(void *ctx, int i);
    void *on_param_ctx;
    bool adopting;             /* a rebind's build: layers take their existing weights (fl_graph_adopt) */
    int64_t rebinds;           /* times the shapes were bound anew (fl_graph_rebind), for tests */
    bool ws_recheck;           /* a rebind kept the buffers: the next reserve checks the convolutions' workspace */
    int64_t bytes_limit;       /* a rebind's build: fl_model_bytes_limit() read once (it asks the system); 0: ask */
} fl_graph;

void fl_graph_init(fl_graph *g, const fl_backend *be);
void fl_graph_free(fl_graph *g);

/* Node constructors: check shapes and fail with a message naming `name`. */
fl_node *fl_graph_input(fl_graph *g, const char *name, int ndim, const int64_t *sample_shape);
fl_node *fl_graph_param(fl_graph *g, const char *name, int ndim, const int64_t *shape, bool trainable);
fl_node *fl_graph_dense(fl_graph *g, const char *name, fl_node *x, fl_node *w, fl_node *b, int act);
fl_node *fl_graph_conv2d(fl_graph *g, const char *name, fl_node *x, fl_node *w, fl_node *b, int sh, int sw,
                         fl_padding pad, int act);
/* Conv2D with dilation dh x dw (taps that far apart; "same" pads for the
 * dilated extent (k - 1) * d + 1) and groups (w (kh, kw, in/groups, out),
 * in and out divisible by groups; groups == in runs as the depthwise op). */
fl_node *fl_graph_conv2d_dilated(fl_graph *g, const char *name, fl_node *x, fl_node *w, fl_node *b, int sh, int sw,
                                 int dh, int dw, int groups, fl_padding pad, int act);
fl_node *fl_graph_pool(fl_graph *g, const char *name, fl_op op, fl_node *x, int kh, int kw, int sh, int sw,
                       fl_padding pad);
fl_node *fl_graph_gap(fl_graph *g, const char *name, fl_node *x);
fl_node *fl_graph_reshape(fl_graph *g, const char *name, fl_node *x, int ndim, const int64_t *sample_shape);
/* noise: the per-sample shape of the keep/drop decisions (Keras
 * noise_shape, each entry 1 or x's size), or NULL for one per element. */
fl_node *fl_graph_dropout(fl_graph *g, const char *name, fl_node *x, float rate, uint64_t stream,
                          const int64_t *noise);
fl_node *fl_graph_batchnorm(fl_graph *g, const char *name, fl_node *x, fl_node *gamma, fl_node *beta,
                            fl_node *mean, fl_node *var, float eps, float momentum);
/* Freezes a BatchNormalization node (Keras: the layer's trainable is false):
 * it then normalises with the moving statistics in training too, and leaves
 * them as they are. Re-reserve the graph's buffers afterwards. */
void fl_graph_batchnorm_freeze(fl_node *n, bool frozen);
fl_node *fl_graph_act(fl_graph *g, const char *name, fl_node *x, int act);
/* Adds zero rows/columns to each side of an NHWC image (ZeroPadding2D), or
 * removes them where a count is negative (Cropping2D). */
fl_node *fl_graph_pad2d(fl_graph *g, const char *name, fl_node *x, int top, int bottom, int left, int right);
/* Depthwise 2D convolution (DepthwiseConv2D, the first half of
 * SeparableConv2D): w (kh, kw, c, dm), b (c*dm) or NULL; output channel
 * c*dm + m = sum over the window of x[.., c] * w[i, j, c, m]. */
fl_node *fl_graph_depthwise_conv2d(fl_graph *g, const char *name, fl_node *x, fl_node *w, fl_node *b, int sh, int sw,
                                   fl_padding pad, int act);
fl_node *fl_graph_depthwise_conv2d_dilated(fl_graph *g, const char *name, fl_node *x, fl_node *w, fl_node *b, int sh,
                                           int sw, int dh, int dw, fl_padding pad, int act);
/* y = f(x) element-wise with parameters (fl_pact_desc). */
fl_node *fl_graph_pact(fl_graph *g, const char *name, fl_node *x, fl_pact_desc p);
/* Softmax along `axis` of the full shape (batch = 0; negative from the end). */
fl_node *fl_graph_softmax(fl_graph *g, const char *name, fl_node *x, int axis);
/* PReLU: alpha has x's per-sample shape with 1 on the shared axes. */
fl_node *fl_graph_prelu(fl_graph *g, const char *name, fl_node *x, fl_node *alpha);
/* Normalization: mean and variance hold one value per index of per-sample
 * axis `axis` (0-based, the batch not counted), or one value in all when
 * axis is -1 (Keras axis=None). */
fl_node *fl_graph_normalize(fl_graph *g, const char *name, fl_node *x, fl_node *mean, fl_node *var, int axis,
                            bool invert);
/* UpSampling2D: an NHWC image made sh x sw times larger, nearest or bilinear. */
fl_node *fl_graph_upsample2d(fl_graph *g, const char *name, fl_node *x, int sh, int sw, bool bilinear);
/* Resizing: an NHWC image resized to oh x ow, nearest or bilinear as
 * jax.image.resize without antialiasing (the UpSampling2D op and kernels). */
fl_node *fl_graph_resize2d(fl_graph *g, const char *name, fl_node *x, int oh, int ow, bool bilinear);
/* Conv2DTranspose: kernel w (kh, kw, filters, in channels) as Keras; the
 * output is Keras's deconv_output_length (output_padding None): valid
 * in*s + max(k - s, 0), same in*s, per axis. */
fl_node *fl_graph_conv2d_transpose(fl_graph *g, const char *name, fl_node *x, fl_node *w, fl_node *b, int sh, int sw,
                                   fl_padding pad, int act);
/* Permute: output sample axis i is input sample axis dims[i] (0-based, a
 * permutation of the ndim - 1 non-batch axes). */
fl_node *fl_graph_permute(fl_graph *g, const char *name, fl_node *x, const int *dims);
/* Add, Multiply, Subtract (2), Average, Maximum, Minimum (same shapes) and
 * Concatenate (shapes equal but on axis; axis counts the batch as 0,
 * negative from the end) over n inputs. */
/* A recurrent layer over x (batch, T, d): w (d, G*u), r (u, G*u), b (G*u;
 * GRU reset_after (2, G*u)) or NULL, mask (batch, T) or NULL (fl_rnn_desc
 * in backend.h: cells, gate orders, masks). Output (batch, T, u) with
 * d.return_sequences, else (batch, u). */
fl_node *fl_graph_rnn(fl_graph *g, const char *name, fl_node *x, fl_node *w, fl_node *r, fl_node *b, fl_node *mask,
                      fl_rnn_desc d);
/* The same with the states at the sequence's ends (Keras's initial_state
 * and return_state): h0, c0 (batch, u) or NULL (zeros; c0 LSTM only) are
 * inputs with gradients; with return_state the final carried h (and LSTM
 * c) become nodes of their own, made right after the RNN node and found in
 * its rnn_state[0] and [1], whose gradients flow back through the RNN. */
fl_node *fl_graph_rnn_states(fl_graph *g, const char *name, fl_node *x, fl_node *w, fl_node *r, fl_node *b,
                             fl_node *mask, fl_node *h0, fl_node *c0, bool return_state, fl_rnn_desc d);
/* Dropout inside a recurrent op n (Keras 3's cells with recurrent_dropout >
 * 0, implementation 1): in training, masks drawn once per batch from
 * Philox(seed, stream mixed with the step), the same at every timestep:
 * recurrent_dropout on h' for each of the G gates, and (when dropout > 0)
 * dropout on x for each gate (fl_rnn_states.hdrop, xdrop). Inference uses
 * none. Both rates in [0, 1); call before the graph is finalized. */
fl_status fl_graph_rnn_dropout(fl_node *n, float dropout, float recurrent_dropout, uint64_t stream);
/* The masks the last training forward of n drew: hdrop [batch, G*u] and
 * xdrop [batch, G*d] (scaled: 0 or 1/(1-rate)), NULL where there is none;
 * backend memory. */
void fl_graph_rnn_masks(const fl_graph *g, const fl_node *n, float **hdrop, float **xdrop);
fl_node *fl_graph_merge(fl_graph *g, const char *name, fl_op op, fl_node *const *xs, int n, int axis);

/* Makes weight `w` trainable (a gradient buffer is allocated if it has none)
 * or frozen, after the graph was built; then call fl_graph_refinalize. */
fl_status fl_graph_set_trainable(fl_graph *g, fl_node *w, bool trainable);
/* After trainability changed: needs_grad recomputed, the batch buffers
 * dropped (the next reserve makes them again), trainable_gen advanced so
 * that an optimizer bound before rebinds. */
void fl_graph_refinalize(fl_graph *g);
/* LayerNormalization over the last `c` values of each row (the trailing
 * axes Keras normalises; gamma and beta hold c values or are NULL); rms:
 * Keras's rms_scaling, y = x * rsqrt(var + eps) * gamma, no centring. */
fl_node *fl_graph_layernorm(fl_graph *g, const char *name, fl_node *x, fl_node *gamma, fl_node *beta, int64_t c,
                            float eps, bool rms);
/* Scaled dot-product attention over `heads` heads: q (batch, Tq, heads*dk),
 * k (batch, Tk, heads*dk), v (batch, Tk, heads*dv) -> (batch, Tq, heads*dv);
 * per head softmax(scale * q k^T + mask) v, masked scores getting -1e9 added
 * as Keras's Softmax does; the mask is the AND of qmask (batch, Tq), vmask
 * (batch, Tk), amask (batch, Tq, Tk) (any may be NULL) and, with causal,
 * j <= i. Dropout `rate` on the attention weights in training. */
fl_node *fl_graph_attention(fl_graph *g, const char *name, fl_node *q, fl_node *k, fl_node *v, fl_node *qmask,
                            fl_node *vmask, fl_node *amask, int heads, float scale, bool causal, float rate,
                            uint64_t stream);
/* The Attention layer's learned scores on an attention node `att` made by
 * fl_graph_attention (one head, scale 1): with concat_w (score_mode
 * "concat", a () weight) the scores are concat_w * sum_e tanh(a (q_ie +
 * k_je)), else scale * q k^T; a = scale (use_scale, a () weight) or 1; scale
 * may be NULL. Returns att, or NULL (fl_error) for shapes that do not fit. */
fl_node *fl_graph_attention_scores(fl_graph *g, fl_node *att, fl_node *scale, fl_node *concat_w);
/* RepeatVector: x (batch, d) -> (batch, n, d). */
fl_node *fl_graph_repeat(fl_graph *g, const char *name, fl_node *x, int64_t n);
/* Sequences (src/ops/seq.c). Embedding: x holds indices (an int input's
 * int32 values, or floats truncated toward zero as Keras casts them), w
 * the table (input_dim, output_dim); the output is x's shape + output_dim. */
fl_node *fl_graph_embedding(fl_graph *g, const char *name, fl_node *x, fl_node *w);
/* The mask of a sequence: x (batch, T) or (batch, T, C) -> (batch, T), 1
 * where any of the step's values differs from `value`, else 0 (Keras's
 * Embedding mask_zero with value 0, Masking's compute_mask). No gradient. */
fl_node *fl_graph_seq_mask(fl_graph *g, const char *name, fl_node *x, float value);
/* GlobalAveragePooling1D with a mask (batch, T): the sum of the valid
 * steps over their count (NaN for a sequence with none, as Keras). */
fl_node *fl_graph_masked_gap1d(fl_graph *g, const char *name, fl_node *x, fl_node *mask);

/* Marks which nodes need gradients (those downstream of a trainable param)
 * and counts consumers; call once after building. */
void fl_graph_finalize(fl_graph *g);
/* The gradient rule finalize applies: whether node n needs a gradient, given for each node before it whether it
 * does (need[id]; NULL: their needs_grad): a weight when trainable, an input when forced (gradient checks), a
 * sequence mask never, any other node when one of its inputs does. */
bool fl_node_grad_rule(const fl_node *n, const bool *need);
/* The capability query for a whole graph: true when backend `be` has every
 * kernel the graph's ops need; else false, with a line naming the first
 * layer, op and kernel that it lacks in why[len]. */
bool fl_graph_runs_on(const fl_graph *g, const fl_backend *be, char *why, size_t len);
/* Moves the parameters to another backend (batch buffers are re-made on
 * the next reserve). On failure nothing changes. */
fl_status fl_graph_migrate(fl_graph *g, const fl_backend *to);
/* Makes the buffers hold `batch` samples for training (grows only): values
 * and aux for the whole step, gradients sharing memory by lifetime. */
fl_status fl_graph_reserve(fl_graph *g, int64_t batch);
/* The same for forward passes only (predict, evaluate): when the buffers
 * already hold `batch` samples (inference's, or training's where they hold
 * every value) they stay; else inference's are made, values sharing memory
 * by lifetime and no gradients. Training's are kept meanwhile (fl_graph.kept),
 * and the next fl_graph_reserve that they hold switches back to them, as
 * this call does to inference's kept ones. Values other than the outputs'
 * (is_output, or read by nothing) are overwritten during the forward. */
fl_status fl_graph_reserve_infer(fl_graph *g, int64_t batch);
/* What both call (graph.c) once the fusion records are current (src/ops/run.c calls fl_fuse_current first):
 * training's buffers, or (infer) inference's. */
fl_status fl_graph_reserve_buffers(fl_graph *g, int64_t batch, bool infer);
/* Sets the current batch (<= reserved). */
void fl_graph_set_batch(fl_graph *g, int64_t batch);
void fl_graph_forward(fl_graph *g, bool training);
/* Runs backward from nodes whose grad_ready is set (the loss sets the output's). */
void fl_graph_backward(fl_graph *g);
/* The same, calling stop(ctx, n) as each node's gradient is complete (a
 * weight's when every reader added to it; another's before its own backward
 * reads it, since gradient buffers share memory once read: plan.h), and
 * returning the index of the first for which it returns true (backward
 * stops there), or -1. */
int fl_graph_backward_watch(fl_graph *g, bool (*stop)(void *ctx, const fl_node *n), void *ctx);
/* Clears grad_ready flags before a backward pass. */
void fl_graph_clear_grads(fl_graph *g);

/* Variable-length inputs (a None axis). A model is built for one length;
 * for another, it is built again into a scratch graph `s` (fl_graph_init,
 * then s->adopting: each layer's existing weight nodes are appended with
 * fl_graph_adopt, not made anew) and fl_graph_rebind moves the scratch
 * nodes' shapes and op descriptors onto g's nodes, which keep their
 * identity (pointers held by the model, layers and data stay valid) and
 * their buffers where those hold the new sizes for the reserved batch
 * (else the next fl_graph_reserve makes them anew). The two graphs must
 * have the same nodes in the same order; else nothing changes and the
 * error names the first layer that differs. The dimensions that change are
 * marked in node->dyn (they follow a None axis). s is freed in every case. */
fl_status fl_graph_adopt(fl_graph *s, fl_node *w);
/* Appends node n to g's list (grown as needed); n keeps its id (fl_graph_new_node sets it first). */
fl_status fl_graph_append(fl_graph *g, fl_node *n);
fl_status fl_graph_rebind(fl_graph *g, fl_graph *s);
/* Frees a scratch graph of a rebind that failed before fl_graph_rebind. */
void fl_graph_scratch_free(fl_graph *g, fl_graph *s);

/* Elements of one sample of a batched node (or of the whole node). */
int64_t fl_node_sample_size(const fl_node *n);
int64_t fl_node_size(const fl_node *n);
/* the Philox element offset of a random mask of `per_row` elements per batch
 * row: g->row_offset * per_row */
static inline int64_t fl_graph_mask_offset(const fl_graph *g, int64_t per_row) { return g->row_offset * per_row; }

#endif
