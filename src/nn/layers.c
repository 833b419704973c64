/*
 * layers.c — what every Keras layer shares: the kind tables (FL_LAYER_KINDS's columns and the build
 * table), the activation names, a layer's creation and Input, the weights (made, shared, adopted on a
 * rebind) and the Keras initializers (glorot_uniform kernels, orthogonal recurrent kernels, zero biases,
 * BatchNormalization's ones/zeros), fl_layer_build with Keras's mask rules, and the per-layer accessors.
 * The layers themselves, each constructor beside its build, are layers_core.c's (Dense and the
 * element-wise layers), layers_image.c's (convolutions, poolings, paddings, resampling) and layers_seq.c's
 * (sequence and recurrent layers), through layers_internal.h.
 */
#include "nn/layers_internal.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/math.h"
#include "ops/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *kind_class[FL_L_COUNT] = {
#define KIND_CLASS_(k, cls, base, in, flags, refusal) cls,
    FL_LAYER_KINDS(KIND_CLASS_)
#undef KIND_CLASS_
};
static const char *kind_base[FL_L_COUNT] = {
#define KIND_BASE_(k, cls, base, in, flags, refusal) base,
    FL_LAYER_KINDS(KIND_BASE_)
#undef KIND_BASE_
};
static const int kind_inputs[FL_L_COUNT] = {
#define KIND_IN_(k, cls, base, in, flags, refusal) in,
    FL_LAYER_KINDS(KIND_IN_)
#undef KIND_IN_
};
static const int kind_flags[FL_L_COUNT] = {
#define KIND_FLAGS_(k, cls, base, in, flags, refusal) flags,
    FL_LAYER_KINDS(KIND_FLAGS_)
#undef KIND_FLAGS_
};
static const char *kind_mask_refusal[FL_L_COUNT] = {
#define KIND_REFUSAL_(k, cls, base, in, flags, refusal) refusal,
    FL_LAYER_KINDS(KIND_REFUSAL_)
#undef KIND_REFUSAL_
};

int fl_layer_kind_flags(fl_layer_kind k) { return (unsigned)k < FL_L_COUNT ? kind_flags[k] : 0; }

static _Thread_local int64_t g_layer_order; /* creation order of layers on this thread */

const char *fl_layer_kind_class(fl_layer_kind k) { return k < FL_L_COUNT ? kind_class[k] : "?"; }
const char *fl_layer_kind_base(fl_layer_kind k) { return k < FL_L_COUNT ? kind_base[k] : "?"; }
bool fl_layer_kind_merges(fl_layer_kind k) { return k < FL_L_COUNT && kind_inputs[k] == FL_IN_MANY; }

/* the states of one recurrent layer: h, and LSTM's carry c */
bool fl_layer_is_rnn_kind(fl_layer_kind k) { return k == FL_L_SIMPLE_RNN || k == FL_L_LSTM || k == FL_L_GRU; }
int fl_layer_rnn_states(const fl_layer *l) { return l->kind == FL_L_LSTM ? 2 : 1; }

int fl_layer_num_states(const fl_layer *l) {
    if (l->kind == FL_L_SIMPLE_RNN || l->kind == FL_L_LSTM || l->kind == FL_L_GRU) return fl_layer_rnn_states(l);
    if (l->kind == FL_L_BIDIRECTIONAL) return fl_layer_rnn_states(l->a.bidi.fwd) + fl_layer_rnn_states(l->a.bidi.bwd);
    return 0;
}

int fl_layer_num_outputs(const fl_layer *l) {
    if (l->kind == FL_L_SIMPLE_RNN || l->kind == FL_L_LSTM || l->kind == FL_L_GRU)
        return 1 + (l->a.rnn.return_state ? fl_layer_rnn_states(l) : 0);
    if (l->kind == FL_L_BIDIRECTIONAL)
        return (l->a.bidi.merge_mode == FL_MERGE_NONE ? 2 : 1) +
               (l->a.bidi.fwd->a.rnn.return_state ? fl_layer_num_states(l) : 0);
    return 1;
}

static const char *act_names[FL_ACTIVATION_COUNT] = {
#define ACT_NAME_(e, name) name,
    FL_ACTIVATION_LIST(ACT_NAME_)
#undef ACT_NAME_
};
/* the public enum and the kernels' codes come from one list; make sure */
#define ACT_SAME_(e, name) _Static_assert((int)FL_##e == (int)FL_ACT_##e, "activation codes disagree: " #e);
FL_ACTIVATION_LIST(ACT_SAME_)
#undef ACT_SAME_
_Static_assert((int)FL_ACTIVATION_COUNT == (int)FL_ACT_COUNT, "activation counts disagree");

const char *fl_activation_name(fl_activation a) {
    return (unsigned)a < FL_ACTIVATION_COUNT ? act_names[a] : "unknown";
}

/* "linear, relu, ..." for messages */
const char *fl_activation_list(void) {
    static const char list[] =
#define ACT_LIST_(e, name) name ", "
        FL_ACTIVATION_LIST(ACT_LIST_) "and the aliases"
#undef ACT_LIST_
#define ACT_ALIAS_(alias, e) " " alias
        FL_ACTIVATION_ALIASES(ACT_ALIAS_);
#undef ACT_ALIAS_
    return list;
}

fl_status fl_activation_from_name(const char *name, fl_activation *out) {
    if (!name) return fl_error(FL_ERR_INVALID_ARG, "activation name is NULL");
    for (int i = 0; i < FL_ACTIVATION_COUNT; i++)
        if (strcmp(name, act_names[i]) == 0) { *out = (fl_activation)i; return FL_OK; }
#define ACT_ALIAS_(alias, e) if (strcmp(name, alias) == 0) { *out = FL_##e; return FL_OK; }
    FL_ACTIVATION_ALIASES(ACT_ALIAS_)
#undef ACT_ALIAS_
    return fl_error(FL_ERR_INVALID_ARG, "unknown activation '%s' (expected one of %s)", name, fl_activation_list());
}

fl_layer *fl_layer_new(fl_layer_kind k, const char *name) {
    fl_layer *l = fl_calloc(1, sizeof *l, "layer");
    if (!l) return NULL;
    l->kind = k;
    l->order = ++g_layer_order;
    if (name && *name) {
        if (strlen(name) >= sizeof l->name) {
            free(l);
            return fl_error_null(FL_ERR_INVALID_ARG, "%s: name '%.40s...' is longer than %zu characters",
                                 kind_class[k], name, sizeof l->name - 1);
        }
        strcpy(l->name, name);
        l->user_named = true;
    }
    return l;
}

fl_status fl_layer_check_act(const char *cls, fl_activation a) {
    if ((unsigned)a >= FL_ACTIVATION_COUNT)
        return fl_error(FL_ERR_INVALID_ARG, "%s: activation %d is not an fl_activation", cls, (int)a);
    return FL_OK;
}

fl_layer *fl_input_(int ndim, const int64_t *shape) {
    if (ndim < 1 || ndim > FL_MAX_DIMS - 1)
        return fl_error_null(FL_ERR_SHAPE, "Input: %d dimensions, expected 1 to %d (without the batch)", ndim,
                             FL_MAX_DIMS - 1);
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0 && shape[i] != FL_DYNAMIC)
            return fl_error_null(FL_ERR_SHAPE, "Input: dimension %d is %lld, expected > 0 or FL_DYNAMIC (None: any "
                                 "length)", i, (long long)shape[i]);
    fl_layer *l = fl_layer_new(FL_L_INPUT, NULL);
    if (!l) return NULL;
    l->a.shape.ndim = ndim;
    memcpy(l->a.shape.shape, shape, (size_t)ndim * sizeof(int64_t));
    for (int i = 0; i < ndim; i++) l->a.shape.bound[i] = shape[i] == FL_DYNAMIC ? FL_PROBE_LENGTH_A : shape[i];
    return l;
}

fl_layer *fl_input_dtype_(fl_dtype dtype, int ndim, const int64_t *shape) {
    if (dtype != FL_FLOAT32 && dtype != FL_INT32)
        return fl_error_null(FL_ERR_UNSUPPORTED, "Input: dtype %s, expected float32 or int32 (int64 data is taken as "
                             "int32)", fl_dtype_name(dtype));
    fl_layer *l = fl_input_(ndim, shape);
    if (l) l->a.shape.dtype = dtype;
    return l;
}

void fl_layer_free(fl_layer *l) {
    if (!l) return;
    for (int i = 0; i < l->nw; i++) fl_tensor_free(l->wview[i]);
    if (l->kind == FL_L_NORMALIZATION) { free(l->a.norm.mean); free(l->a.norm.variance); }
    if (l->kind == FL_L_TIME_DISTRIBUTED) fl_layer_free(l->a.td.inner);
    if (l->kind == FL_L_BIDIRECTIONAL) { fl_layer_free(l->a.bidi.fwd); fl_layer_free(l->a.bidi.bwd); }
    free(l);
}

/* ------------------------------------------------------------- build
 *
 * The image and element-wise layers' builds (their constructors above, the families in the same order):
 * each layer's weights and graph nodes. */

/* A build for another length of a None axis (fl_model_bind): the layer's
 * weight of that name, made by its first build, joins the scratch graph.
 * A weight whose shape would follow the length is Keras's error when it
 * builds the layer on a None dimension (the dimensions that differ from
 * the first build are the None ones). */
static fl_node *adopt_weight(fl_layer *l, fl_graph *g, const char *wname, int ndim, const int64_t *shape) {
    for (int i = 0; i < l->nw; i++) {
        if (strcmp(l->wname[i], wname) != 0) continue;
        fl_node *w = l->w[i];
        bool same = w->ndim == ndim;
        for (int d = 0; same && d < ndim; d++) same = w->shape[d] == shape[d];
        if (!same) {
            char a[160];
            size_t o = 0;
            o += (size_t)snprintf(a + o, sizeof a - o, "(");
            for (int d = 0; d < ndim && o < sizeof a; d++) {
                bool none = d >= w->ndim || w->shape[d] != shape[d];
                if (none) o += (size_t)snprintf(a + o, sizeof a - o, "%sNone", d ? ", " : "");
                else o += (size_t)snprintf(a + o, sizeof a - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
            }
            if (o < sizeof a) snprintf(a + o, sizeof a - o, "%s)", ndim == 1 ? "," : "");
            return fl_error_null(FL_ERR_SHAPE,
                                 "layer '%s' (%s): Shapes used to initialize variables must be fully-defined (no "
                                 "`None` dimensions). Received: shape=%s for variable path='%s/%s' (the weight's "
                                 "shape follows the length of a None input axis; give the Input a fixed length, or "
                                 "pool over that axis before this layer)", l->name, kind_class[l->kind], a, l->name,
                                 wname);
        }
        return fl_graph_adopt(g, w) == FL_OK ? w : NULL;
    }
    return fl_error_null(FL_ERR_STATE, "layer '%s' (%s): no weight '%s' from its first build", l->name,
                         kind_class[l->kind], wname);
}

fl_node *fl_layer_add_weight(fl_layer *l, fl_graph *g, const char *wname, int ndim, const int64_t *shape,
                             bool trainable) {
    if (l->ncalls > 0) { /* a shared layer: its weights exist; the shape must match */
        for (int i = 0; i < l->nw; i++)
            if (strcmp(l->wname[i], wname) == 0) {
                fl_node *w = l->w[i];
                bool same = w->ndim == ndim;
                for (int d = 0; same && d < ndim; d++) same = w->shape[d] == shape[d];
                if (same) return w;
                char a[128], b[128];
                return fl_error_null(FL_ERR_SHAPE,
                                     "layer '%s' (%s) is called again on an input that needs a %s of shape %s, but "
                                     "its %s has shape %s (a shared layer needs inputs of the same shape)",
                                     l->name, kind_class[l->kind], wname, fl_shape_str(ndim, shape, a, sizeof a),
                                     wname, fl_shape_str(w->ndim, w->shape, b, sizeof b));
            }
        return fl_error_null(FL_ERR_STATE, "layer '%s': no weight '%s' from its first call", l->name, wname);
    }
    if (g->adopting) return adopt_weight(l, g, wname, ndim, shape);
    fl_node *w = fl_graph_param(g, l->name, ndim, shape, trainable && !l->frozen);
    if (!w) return NULL;
    l->wtrainable[l->nw] = trainable;
    l->w[l->nw] = w;
    l->wname[l->nw] = wname;
    l->wview[l->nw] = NULL;
    l->nw++;
    return w;
}

/* Keras GlorotUniform: U(-limit, limit), limit = sqrt(6 / (fan_in + fan_out)). */
static void glorot_uniform(float *w, int64_t n, double fan_in, double fan_out, uint64_t seed, uint64_t stream) {
    float limit = (float)sqrt(6.0 / (fan_in + fan_out));
    fl_rng_uniform(w, n, -limit, limit, seed, stream);
}

/* Keras Orthogonal (gain 1): a (max, min) matrix of normal draws, its QR
 * factor Q with the signs of R's diagonal folded in (Gram-Schmidt gives R a
 * positive diagonal, the same Q), transposed when rows < cols. */
static void orthogonal(float *w, int64_t rows, int64_t cols, uint64_t seed, uint64_t stream) {
    const int64_t R = rows > cols ? rows : cols, C = rows > cols ? cols : rows, n = R * C;
    double *a = malloc((size_t)n * sizeof(double));
    float *u = malloc((size_t)(n + 1) * 2 * sizeof(float));
    if (!a || !u) { free(a); free(u); memset(w, 0, (size_t)n * sizeof(float)); return; }
    fl_rng_uniform(u, (n + 1) / 2 * 2, 0.0f, 1.0f, seed, stream);
    for (int64_t i = 0; i + 1 < n + 1; i += 2) { /* Box-Muller */
        double r = sqrt(-2.0 * log(1.0 - (double)u[i])), t = 2.0 * 3.14159265358979323846 * (double)u[i + 1];
        a[i] = r * cos(t);
        if (i + 1 < n) a[i + 1] = r * sin(t);
    }
    for (int64_t j = 0; j < C; j++) { /* a[r * C + j]: column j, modified Gram-Schmidt */
        for (int64_t i = 0; i < j; i++) {
            double dot = 0;
            for (int64_t r = 0; r < R; r++) dot += a[r * C + i] * a[r * C + j];
            for (int64_t r = 0; r < R; r++) a[r * C + j] -= dot * a[r * C + i];
        }
        double nrm = 0;
        for (int64_t r = 0; r < R; r++) nrm += a[r * C + j] * a[r * C + j];
        nrm = nrm > 0 ? 1.0 / sqrt(nrm) : 0.0;
        for (int64_t r = 0; r < R; r++) a[r * C + j] *= nrm;
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) w[r * cols + c] = (float)(rows >= cols ? a[r * C + c] : a[c * C + r]);
    free(a);
    free(u);
}

/* The recurrent layer a weight belongs to (Bidirectional: its forward or
 * backward layer), or NULL. */
static const fl_layer *rnn_of_weight(const fl_layer *l, int i) {
    if (l->kind == FL_L_BIDIRECTIONAL) return i < l->nw / 2 ? l->a.bidi.fwd : l->a.bidi.bwd;
    return fl_layer_is_rnn_kind(l->kind) ? l : NULL;
}

void fl_layer_init_weights(fl_layer *l, const fl_backend *be, uint64_t seed) {
    for (int i = 0; i < l->nw; i++) {
        fl_node *w = l->w[i];
        int64_t n = fl_node_size(w);
        float *host = malloc((size_t)n * sizeof(float));
        if (!host) continue; /* weights stay zero; tiny allocation */
        uint64_t stream = ((uint64_t)(l->index + 1) << 8) | (uint64_t)i;
        const char *wn = l->wname[i];
        const fl_layer *rl = rnn_of_weight(l, i);
        /* a sub-layer's weight by its own name: "query/kernel" (MultiHeadAttention), "dense/kernel"
         * (TimeDistributed), "forward/kernel" (Bidirectional) */
        if (strrchr(wn, '/')) wn = strrchr(wn, '/') + 1;
        if (rl && strcmp(wn, "recurrent_kernel") == 0) {
            orthogonal(host, w->shape[0], w->shape[1], seed, stream);
        } else if (rl && strcmp(wn, "bias") == 0) {
            /* zeros; LSTM's unit_forget_bias: ones for the forget gate */
            const int64_t u = rl->a.rnn.units;
            for (int64_t k = 0; k < n; k++)
                host[k] = rl->kind == FL_L_LSTM && !rl->a.rnn.no_unit_forget_bias && k >= u && k < 2 * u ? 1.0f : 0.0f;
        } else if (strcmp(wn, "kernel") == 0 || strcmp(wn, "depthwise_kernel") == 0 || strcmp(wn, "pointwise_kernel") == 0) {
            /* Keras's compute_fans: a 4-D kernel (kh, kw, a, b), DepthwiseConv2D's
             * (kh, kw, in, depth_multiplier) included, has fan_in kh*kw*a and
             * fan_out kh*kw*b */
            double fan_in, fan_out;
            if (w->ndim == 4) { /* (kh, kw, in, out) */
                double rf = (double)w->shape[0] * (double)w->shape[1];
                fan_in = rf * (double)w->shape[2];
                fan_out = rf * (double)w->shape[3];
            } else if (w->ndim == 3) { /* Conv1D (k, in, out) */
                fan_in = (double)w->shape[0] * (double)w->shape[1];
                fan_out = (double)w->shape[0] * (double)w->shape[2];
            } else {
                fan_in = (double)w->shape[0];
                fan_out = (double)w->shape[1];
            }
            glorot_uniform(host, n, fan_in, fan_out, seed, stream);
        } else if (strcmp(wn, "embeddings") == 0) { /* Keras Embedding: RandomUniform(-0.05, 0.05) */
            fl_rng_uniform(host, n, -0.05f, 0.05f, seed, stream);
        } else {
            float v = (strcmp(wn, "gamma") == 0 || strcmp(wn, "moving_variance") == 0 || strcmp(wn, "variance") == 0 ||
                       strcmp(wn, "scale") == 0 || strcmp(wn, "concat_score_weight") == 0)
                          ? 1.0f : 0.0f; /* else zeros: bias, beta, moving_mean, PReLU alpha, mean, count */
            for (int64_t k = 0; k < n; k++) host[k] = v;
        }
        be->upload(w->val, host, (size_t)n * sizeof(float));
        free(host);
    }
}

/* Each kind's build: its weights (add_weight) and graph nodes on inputs
 * xs[nx] (the count is checked by fl_layer_build), one function per kind,
 * in the table below. */

static fl_node *build_input(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)xs; (void)nx;
    fl_node *n = fl_graph_input(g, l->name, l->a.shape.ndim, l->a.shape.bound); /* None axes: the bound length */
    if (n) n->int_val = l->a.shape.dtype == FL_INT32;
    return n;
}

/* Dense/Conv2D run their activation fused when its derivative follows from
 * the output, else as a node of its own. */
fl_node *fl_layer_then_act(fl_graph *g, const char *name, fl_node *out, int act) {
    return out && !fl_act_grad_from_output(act) ? fl_graph_act(g, name, out, act) : out;
}
int fl_layer_fused_act(int act) { return fl_act_grad_from_output(act) ? act : FL_ACT_LINEAR; }

/* A view of x with the per-sample shape s (ndim dims). */
fl_node *fl_layer_view(fl_layer *l, fl_graph *g, fl_node *x, int ndim, const int64_t *s) {
    return x ? fl_graph_reshape(g, l->name, x, ndim, s) : NULL;
}

fl_status fl_layer_need_rank(const fl_layer *l, const fl_node *x, int ndim, const char *what) {
    if (x->ndim == ndim) return FL_OK;
    char s[128];
    return fl_error(FL_ERR_SHAPE, "layer '%s' (%s): input %s must be %s", l->name, kind_class[l->kind],
                    fl_shape_str(x->ndim, x->shape, s, sizeof s), what);
}

static const fl_layer_build_fn kind_build[FL_L_COUNT] = {
    [FL_L_INPUT] = build_input,         [FL_L_DENSE] = fl_build_dense,         [FL_L_CONV2D] = fl_build_conv2d,
    [FL_L_MAXPOOL] = fl_build_pool,        [FL_L_AVGPOOL] = fl_build_pool,        [FL_L_GAP] = fl_build_global_pool,
    [FL_L_FLATTEN] = fl_build_flatten,     [FL_L_RESHAPE] = fl_build_reshape,     [FL_L_DROPOUT] = fl_build_dropout,
    [FL_L_BATCHNORM] = fl_build_batchnorm, [FL_L_ACTIVATION] = fl_build_activation, [FL_L_ADD] = fl_build_add,
    [FL_L_MULTIPLY] = fl_build_multiply,   [FL_L_CONCATENATE] = fl_build_concatenate,
    [FL_L_ZEROPAD2D] = fl_build_padding2d, [FL_L_CROPPING2D] = fl_build_padding2d,
    [FL_L_GMP] = fl_build_global_pool,     [FL_L_GAP1D] = fl_build_global_pool,   [FL_L_GMP1D] = fl_build_global_pool,
    [FL_L_MAXPOOL1D] = fl_build_pool1d,    [FL_L_AVGPOOL1D] = fl_build_pool1d,    [FL_L_CONV1D] = fl_build_conv1d,
    [FL_L_SUBTRACT] = fl_build_arith,      [FL_L_AVERAGE] = fl_build_arith,       [FL_L_MAXIMUM] = fl_build_arith,
    [FL_L_MINIMUM] = fl_build_arith,       [FL_L_SPATIAL_DROPOUT2D] = fl_build_dropout,
    [FL_L_RELU] = fl_build_pact,           [FL_L_LEAKY_RELU] = fl_build_pact,     [FL_L_ELU] = fl_build_pact,
    [FL_L_PRELU] = fl_build_prelu,         [FL_L_SOFTMAX] = fl_build_softmax,     [FL_L_RESCALING] = fl_build_pact,
    [FL_L_NORMALIZATION] = fl_build_normalization,
    [FL_L_DEPTHWISE2D] = fl_build_depthwise2d, [FL_L_SEPARABLE2D] = fl_build_separable2d,
    [FL_L_UPSAMPLE2D] = fl_build_upsample2d, [FL_L_CONV2D_TRANSPOSE] = fl_build_conv2d_transpose,
    [FL_L_ZEROPAD1D] = fl_build_seq1d,       [FL_L_CROPPING1D] = fl_build_seq1d,
    [FL_L_UPSAMPLE1D] = fl_build_seq1d,      [FL_L_SPATIAL_DROPOUT1D] = fl_build_dropout,
    [FL_L_NOT_EQUAL] = fl_build_mask_op,     [FL_L_ANY] = fl_build_mask_op,
    [FL_L_LOGICAL_OR] = fl_build_mask_op,    [FL_L_LOGICAL_AND] = fl_build_mask_op,
    [FL_L_CONVERT_TO_TENSOR] = fl_build_mask_op,
    [FL_L_PERMUTE] = fl_build_permute,     [FL_L_RESIZING] = fl_build_resizing,
    [FL_L_LAYERNORM] = fl_build_layernorm, [FL_L_MHA] = fl_build_mha,         [FL_L_ATTENTION] = fl_build_attention,
    [FL_L_REPEAT_VECTOR] = fl_build_repeat_vector, [FL_L_TIME_DISTRIBUTED] = fl_build_time_distributed,
    [FL_L_SIMPLE_RNN] = fl_build_rnn,      [FL_L_LSTM] = fl_build_rnn,            [FL_L_GRU] = fl_build_rnn,
    [FL_L_BIDIRECTIONAL] = fl_build_bidirectional,
    [FL_L_EMBEDDING] = fl_build_embedding, [FL_L_MASKING] = fl_build_masking,
};

bool fl_layer_kind_builds(fl_layer_kind k) { return k < FL_L_COUNT && kind_build[k] != NULL; }
fl_layer_build_fn fl_layer_kind_build(fl_layer_kind k) { return k < FL_L_COUNT ? kind_build[k] : NULL; }
int fl_layer_kind_inputs(fl_layer_kind k) { return k < FL_L_COUNT ? kind_inputs[k] : FL_IN_NONE; }

/* Keras's mask rules (Layer.compute_mask) for the kinds of this file: a
 * layer with supports_masking passes its input's mask on; merges combine
 * the masks of their inputs (an OR, when every input has one); every other
 * layer drops it (Keras 3 warns and drops it too). A layer whose Keras call
 * would use the mask in a way flynn does not compute is refused. The
 * layers that make or use masks themselves (Embedding, Masking,
 * GlobalAveragePooling1D) set out->mask in their build. The rules are columns of FL_LAYER_KINDS
 * (src/nn/nn.h): FL_K_MASK, and the refusal's reason. */
static fl_status mask_refused(const fl_layer *l, const char *why) {
    return fl_error(FL_ERR_UNSUPPORTED, "layer '%s' (%s) receives a masked sequence (from Embedding mask_zero or "
                    "Masking); Keras's %s %s, which flynn does not compute, so it refuses the model rather than give "
                    "a different answer", l->name, kind_class[l->kind], kind_class[l->kind], why);
}

/* Checks the masks coming in before the layer is built. */
static fl_status masks_in(const fl_layer *l, fl_node *const *xs, int nx) {
    bool any = false;
    for (int i = 0; i < nx; i++) any |= xs[i]->mask != NULL;
    return any && kind_mask_refusal[l->kind] ? mask_refused(l, kind_mask_refusal[l->kind]) : FL_OK;
}

/* Sets the output's mask by the rules above. */
static fl_status masks_out(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx, fl_node *out) {
    if (out->mask) return FL_OK;
    if (kind_flags[l->kind] & FL_K_MASK) { out->mask = xs[0]->mask; return FL_OK; }
    if (!fl_layer_kind_merges(l->kind)) return FL_OK;
    fl_node *ms[FL_NODE_MAX_IN];
    bool same = true;
    for (int i = 0; i < nx; i++) {
        if (!(ms[i] = xs[i]->mask)) return FL_OK; /* Keras: no mask when any input has none */
        same &= ms[i] == ms[0];
    }
    out->mask = same ? ms[0] : fl_graph_merge(g, l->name, FL_OP_MAX, ms, nx, 0); /* 1/0 masks: max is OR */
    return out->mask ? FL_OK : fl_last_status();
}

fl_node *fl_layer_build(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx, uint64_t seed) {
    if ((unsigned)l->kind >= FL_L_COUNT || !kind_build[l->kind])
        return fl_error_null(FL_ERR_UNSUPPORTED, "layer '%s': unknown kind %d", l->name, (int)l->kind);
    int in = kind_inputs[l->kind], ns = fl_layer_num_states(l);
    if (ns > 0 && nx != 1 && nx != 1 + ns)
        return fl_error_null(FL_ERR_INVALID_ARG, "layer '%s' (%s) takes one input, or one input and its %d initial "
                             "states (initial_state: %s), it was given %d", l->name, kind_class[l->kind], ns,
                             l->kind == FL_L_BIDIRECTIONAL ? "the forward layer's, then the backward layer's"
                             : ns == 2 ? "h, c" : "h", nx);
    if (ns == 0 && (in == FL_IN_NONE ? nx != 0 : in == FL_IN_MANY ? nx < 2 : nx != 1))
        return fl_error_null(FL_ERR_INVALID_ARG, "layer '%s' (%s) takes %s, it was given %d", l->name,
                             kind_class[l->kind],
                             in == FL_IN_NONE ? "no input" : in == FL_IN_MANY ? "2 or more inputs" : "one input", nx);
    for (int i = 0; i < nx; i++)
        if (xs[i]->int_val && l->kind != FL_L_EMBEDDING && l->kind != FL_L_NOT_EQUAL)
            return fl_error_null(FL_ERR_UNSUPPORTED, "layer '%s' (%s) receives the int32 input '%s'; in flynn only "
                                 "Embedding (and a mask's NotEqual) reads integer inputs (give this layer a float32 "
                                 "Input)", l->name,
                                 kind_class[l->kind], xs[i]->name);
    if (masks_in(l, xs, nx)) return NULL;
    l->nouts = 0;
    fl_node *out = kind_build[l->kind](l, g, xs, nx);
    if (!out || masks_out(l, g, xs, nx, out)) return NULL;
    if (l->nouts == 0) l->outs[l->nouts++] = out;
    l->out = out;
    l->g = g;
    if (l->ncalls++ == 0 && !g->adopting && !l->weights_to_come) {
        l->init_pending = true; /* initialized when first read or written (fl_layer_weights_ready) */
        l->init_seed = seed;
    }
    return out;
}

static void clear_pending(fl_layer *l) {
    if (!l) return;
    l->init_pending = false;
    if (l->kind == FL_L_BIDIRECTIONAL) { clear_pending(l->a.bidi.fwd); clear_pending(l->a.bidi.bwd); }
    if (l->kind == FL_L_TIME_DISTRIBUTED) clear_pending(l->a.td.inner);
}

void fl_layer_weights_ready(fl_layer *l) {
    if (!l || !l->init_pending || !l->g) return;
    clear_pending(l); /* a wrapper's weights hold its sub-layers' */
    fl_layer_init_weights(l, l->g->be, l->init_seed);
}

/* ---------------------------------------------------------- accessors */

bool fl_layer_trainable(const fl_layer *l) { return l && !l->frozen; }

fl_status fl_layer_set_trainable(fl_layer *l, bool trainable) {
    if (!l) return fl_error(FL_ERR_INVALID_ARG, "fl_layer_set_trainable: layer is NULL");
    if (l->frozen == !trainable) return FL_OK;
    if (l->g && l->ncalls > 0) { /* built: its weights and BatchNormalization nodes change in place */
        for (int i = 0; i < l->nw; i++)
            if (l->wtrainable[i] && fl_graph_set_trainable(l->g, l->w[i], trainable) != FL_OK) {
                for (int k = 0; k < i; k++) /* as it was: freezing cannot fail */
                    if (l->wtrainable[k]) fl_graph_set_trainable(l->g, l->w[k], !trainable);
                fl_error_prefix("fl_layer_set_trainable: ");
                return fl_last_status();
            }
        for (int i = 0; i < l->g->n; i++) { /* every call of a BatchNormalization layer */
            fl_node *n = l->g->nodes[i];
            if (n->op == FL_OP_BATCHNORM && l->kind == FL_L_BATCHNORM && n->nin > 3 && l->nw > 0 &&
                n->in[3] == l->w[l->nw - 2])
                fl_graph_batchnorm_freeze(n, !trainable);
        }
        l->frozen = !trainable;
        fl_graph_refinalize(l->g);
        return FL_OK;
    }
    l->frozen = !trainable;
    return FL_OK;
}

const char *fl_layer_name(const fl_layer *l) { return l ? l->name : NULL; }
const char *fl_layer_class(const fl_layer *l) { return l ? kind_class[l->kind] : NULL; }
int fl_layer_num_weights(const fl_layer *l) { return l ? l->nw : 0; }
const char *fl_layer_weight_name(const fl_layer *l, int i) {
    return l && i >= 0 && i < l->nw ? l->wname[i] : NULL;
}

fl_tensor *fl_layer_weight(fl_layer *l, int i) {
    if (!l || i < 0 || i >= l->nw)
        return fl_error_null(FL_ERR_INVALID_ARG, "layer '%s': no weight %d (it has %d)", l ? l->name : "?", i,
                             l ? l->nw : 0);
    fl_layer_weights_ready(l);
    fl_node *w = l->w[i];
    const fl_backend *be = l->g->be;
    if (be->host_memory) {
        /* a view: writes change the model */
        if (!l->wview[i] || l->wview[i]->owns || l->wview[i]->data != w->val) {
            fl_tensor_free(l->wview[i]);
            l->wview[i] = fl_tensor_view(FL_FLOAT32, w->ndim, w->shape, w->val);
        }
        return l->wview[i];
    }
    /* device memory: a host snapshot, refreshed on every call */
    if (!l->wview[i] || !l->wview[i]->owns) {
        fl_tensor_free(l->wview[i]);
        l->wview[i] = fl_tensor_new(FL_FLOAT32, w->ndim, w->shape);
        if (!l->wview[i]) return NULL;
    }
    be->download(l->wview[i]->data, w->val, (size_t)fl_node_size(w) * sizeof(float));
    return l->wview[i];
}

fl_status fl_layer_set_weight(fl_layer *l, int i, const fl_tensor *t) {
    char a[128], b[128];
    if (!l || !t) return fl_error(FL_ERR_INVALID_ARG, "fl_layer_set_weight: NULL argument");
    if (i < 0 || i >= l->nw)
        return fl_error(FL_ERR_INVALID_ARG, "layer '%s': no weight %d (it has %d)", l->name, i, l->nw);
    fl_node *w = l->w[i];
    bool same = t->dtype == FL_FLOAT32 && t->ndim == w->ndim;
    for (int d = 0; same && d < w->ndim; d++) same = t->shape[d] == w->shape[d];
    if (!same)
        return fl_error(FL_ERR_SHAPE, "layer '%s' weight '%s': got a %s tensor of shape %s, expected float32 %s",
                        l->name, l->wname[i], fl_dtype_name(t->dtype), fl_shape_str(t->ndim, t->shape, a, sizeof a),
                        fl_shape_str(w->ndim, w->shape, b, sizeof b));
    fl_layer_weights_ready(l); /* the layer's other weights */
    l->g->be->upload(w->val, t->data, (size_t)fl_node_size(w) * sizeof(float));
    return FL_OK;
}
