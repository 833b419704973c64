/*
 * layers.c — the Keras layers: the kind tables (FL_LAYER_KINDS's columns and
 * the build table), the image and element-wise layers (Dense, the
 * convolutions and poolings, the paddings, the merges, the activations and
 * preprocessing: their constructors, argument checks and Keras defaults,
 * then their builds), the Keras initializers (glorot_uniform kernels, zero
 * biases, BatchNormalization's ones/zeros), fl_layer_build with Keras's mask
 * rules, and the per-layer accessors. The sequence and recurrent layers,
 * constructor and build together, are layers_seq.c's (layers_internal.h).
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

fl_layer *fl_dense_(fl_dense_args a) {
    if (a.units <= 0) return fl_error_null(FL_ERR_INVALID_ARG, "Dense: units is %d, expected > 0", a.units);
    if (fl_layer_check_act("Dense", a.activation)) return NULL;
    fl_layer *l = fl_layer_new(FL_L_DENSE, a.name);
    if (l) { l->a.dense = a; l->a.dense.name = NULL; }
    return l;
}

/* dilation_rate (square) and its per-axis overrides, Keras defaults filled
 * in; Keras refuses strides > 1 with dilation > 1, and so does flynn. */
static fl_status dilation(const char *cls, int rate, int *dh, int *dw, int sh, int sw) {
    if (!rate) rate = 1;
    if (!*dh) *dh = rate;
    if (!*dw) *dw = rate;
    if (*dh <= 0 || *dw <= 0)
        return fl_error(FL_ERR_INVALID_ARG, "%s: dilation_rate (%d, %d), expected > 0", cls, *dh, *dw);
    if ((*dh > 1 || *dw > 1) && (sh > 1 || sw > 1))
        return fl_error(FL_ERR_INVALID_ARG,
                        "%s: strides (%d, %d) with dilation_rate (%d, %d): strides > 1 and dilation_rate > 1 do not "
                        "go together (Keras refuses them too)", cls, sh, sw, *dh, *dw);
    return FL_OK;
}

/* Conv2D and Conv2DTranspose: the same arguments and checks. */
static fl_layer *conv2d_kind(fl_layer_kind k, fl_conv2d_args a) {
    const char *cls = kind_class[k];
    if (a.filters <= 0) return fl_error_null(FL_ERR_INVALID_ARG, "%s: filters is %d, expected > 0", cls, a.filters);
    if (!a.kernel_h) a.kernel_h = a.kernel_size;
    if (!a.kernel_w) a.kernel_w = a.kernel_size;
    if (a.kernel_h <= 0 || a.kernel_w <= 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: kernel_size is %dx%d, expected > 0", cls, a.kernel_h, a.kernel_w);
    if (!a.strides) a.strides = 1;
    if (!a.stride_h) a.stride_h = a.strides;
    if (!a.stride_w) a.stride_w = a.strides;
    if (a.stride_h <= 0 || a.stride_w <= 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: strides %dx%d, expected > 0", cls, a.stride_h, a.stride_w);
    if (dilation(cls, a.dilation_rate, &a.dilation_h, &a.dilation_w, a.stride_h, a.stride_w)) return NULL;
    if (!a.groups) a.groups = 1;
    if (a.groups < 0 || a.filters % a.groups)
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: groups %d, expected > 0 and dividing filters %d", cls, a.groups,
                             a.filters);
    if (k == FL_L_CONV2D_TRANSPOSE && (a.dilation_h != 1 || a.dilation_w != 1 || a.groups != 1))
        return fl_error_null(FL_ERR_UNSUPPORTED, "%s: dilation_rate (%d, %d) and groups %d are not supported (only 1)",
                             cls, a.dilation_h, a.dilation_w, a.groups);
    if (a.padding != FL_VALID && a.padding != FL_SAME)
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: padding %d, expected FL_VALID or FL_SAME", cls, (int)a.padding);
    if (fl_layer_check_act(cls, a.activation)) return NULL;
    fl_layer *l = fl_layer_new(k, a.name);
    if (l) { l->a.conv = a; l->a.conv.name = NULL; }
    return l;
}
fl_layer *fl_conv2d_(fl_conv2d_args a) { return conv2d_kind(FL_L_CONV2D, a); }
fl_layer *fl_conv2d_transpose_(fl_conv2d_args a) { return conv2d_kind(FL_L_CONV2D_TRANSPOSE, a); }

fl_layer *fl_up_sampling2d_(fl_up_sampling2d_args a) {
    if (!a.size) a.size = 2;
    if (!a.size_h) a.size_h = a.size;
    if (!a.size_w) a.size_w = a.size;
    if (a.size_h <= 0 || a.size_w <= 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "UpSampling2D: size (%d, %d), expected factors > 0", a.size_h,
                             a.size_w);
    if (a.interpolation != FL_NEAREST && a.interpolation != FL_BILINEAR)
        return fl_error_null(FL_ERR_UNSUPPORTED,
                             "UpSampling2D: interpolation %d is not supported (FL_NEAREST or FL_BILINEAR)",
                             (int)a.interpolation);
    fl_layer *l = fl_layer_new(FL_L_UPSAMPLE2D, a.name);
    if (l) { l->a.up = a; l->a.up.name = NULL; }
    return l;
}

fl_layer *fl_resizing_(fl_resizing_args a) {
    if (a.height <= 0 || a.width <= 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "Resizing: height %d and width %d, expected > 0", a.height, a.width);
    if (a.crop_to_aspect_ratio && a.pad_to_aspect_ratio)
        return fl_error_null(FL_ERR_INVALID_ARG,
                             "Resizing: crop_to_aspect_ratio and pad_to_aspect_ratio, expected at most one of them");
    fl_layer *l = fl_layer_new(FL_L_RESIZING, a.name);
    if (l) { l->a.resize = a; l->a.resize.name = NULL; }
    return l;
}

fl_layer *fl_permute_(int ndim, const int *dims) {
    if (ndim < 1 || ndim > FL_MAX_DIMS - 1)
        return fl_error_null(FL_ERR_INVALID_ARG, "Permute: %d dims, expected 1 to %d", ndim, FL_MAX_DIMS - 1);
    bool seen[FL_MAX_DIMS] = {0};
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 1 || dims[i] > ndim || seen[dims[i]])
            return fl_error_null(FL_ERR_INVALID_ARG,
                                 "Permute: dims must be a permutation of 1..%d (1-based, the batch excluded); entry "
                                 "%d is %d", ndim, i, dims[i]);
        seen[dims[i]] = true;
    }
    fl_layer *l = fl_layer_new(FL_L_PERMUTE, NULL);
    if (!l) return NULL;
    l->a.perm.ndim = ndim;
    memcpy(l->a.perm.dims, dims, (size_t)ndim * sizeof(int));
    return l;
}

/* kernel_size/strides/dilation/padding of the depthwise and separable
 * convolutions: Keras defaults filled in, then checked. */
static fl_status conv_window(const char *cls, int ks, int *kh, int *kw, int s, int *sh, int *sw, int *dm,
                             int rate, int *dh, int *dw, fl_padding pad) {
    if (!*kh) *kh = ks;
    if (!*kw) *kw = ks;
    if (*kh <= 0 || *kw <= 0)
        return fl_error(FL_ERR_INVALID_ARG, "%s: kernel_size is %dx%d, expected > 0", cls, *kh, *kw);
    if (!s) s = 1;
    if (!*sh) *sh = s;
    if (!*sw) *sw = s;
    if (*sh <= 0 || *sw <= 0) return fl_error(FL_ERR_INVALID_ARG, "%s: strides %dx%d, expected > 0", cls, *sh, *sw);
    if (!*dm) *dm = 1;
    if (*dm <= 0) return fl_error(FL_ERR_INVALID_ARG, "%s: depth_multiplier is %d, expected > 0", cls, *dm);
    fl_status st = dilation(cls, rate, dh, dw, *sh, *sw);
    if (st) return st;
    if (pad != FL_VALID && pad != FL_SAME)
        return fl_error(FL_ERR_INVALID_ARG, "%s: padding %d, expected FL_VALID or FL_SAME", cls, (int)pad);
    return FL_OK;
}

fl_layer *fl_depthwise_conv2d_(fl_depthwise_conv2d_args a) {
    if (conv_window("DepthwiseConv2D", a.kernel_size, &a.kernel_h, &a.kernel_w, a.strides, &a.stride_h,
                    &a.stride_w, &a.depth_multiplier, a.dilation_rate, &a.dilation_h, &a.dilation_w, a.padding) ||
        fl_layer_check_act("DepthwiseConv2D", a.activation))
        return NULL;
    fl_layer *l = fl_layer_new(FL_L_DEPTHWISE2D, a.name);
    if (l) { l->a.dw = a; l->a.dw.name = NULL; }
    return l;
}

fl_layer *fl_separable_conv2d_(fl_separable_conv2d_args a) {
    if (a.filters <= 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "SeparableConv2D: filters is %d, expected > 0", a.filters);
    if (conv_window("SeparableConv2D", a.kernel_size, &a.kernel_h, &a.kernel_w, a.strides, &a.stride_h,
                    &a.stride_w, &a.depth_multiplier, a.dilation_rate, &a.dilation_h, &a.dilation_w, a.padding) ||
        fl_layer_check_act("SeparableConv2D", a.activation))
        return NULL;
    fl_layer *l = fl_layer_new(FL_L_SEPARABLE2D, a.name);
    if (l) { l->a.sep = a; l->a.sep.name = NULL; }
    return l;
}

static fl_layer *pool(fl_layer_kind k, fl_pool2d_args a) {
    if (!a.pool_size) a.pool_size = 2;
    if (!a.pool_h) a.pool_h = a.pool_size;
    if (!a.pool_w) a.pool_w = a.pool_size;
    if (!a.strides) a.strides = 0;
    if (!a.stride_h) a.stride_h = a.strides ? a.strides : a.pool_h;
    if (!a.stride_w) a.stride_w = a.strides ? a.strides : a.pool_w;
    if (a.pool_h <= 0 || a.pool_w <= 0 || a.stride_h <= 0 || a.stride_w <= 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: pool_size %dx%d and strides %dx%d must be > 0", kind_class[k],
                             a.pool_h, a.pool_w, a.stride_h, a.stride_w);
    if (a.padding != FL_VALID && a.padding != FL_SAME)
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: padding %d, expected FL_VALID or FL_SAME", kind_class[k],
                             (int)a.padding);
    fl_layer *l = fl_layer_new(k, a.name);
    if (l) { l->a.pool = a; l->a.pool.name = NULL; }
    return l;
}
fl_layer *fl_max_pooling2d_(fl_pool2d_args a) { return pool(FL_L_MAXPOOL, a); }
fl_layer *fl_average_pooling2d_(fl_pool2d_args a) { return pool(FL_L_AVGPOOL, a); }
static fl_layer *global_pool(fl_layer_kind k, fl_global_pool_args a) {
    fl_layer *l = fl_layer_new(k, a.name);
    if (l) { l->a.gpool = a; l->a.gpool.name = NULL; }
    return l;
}
fl_layer *fl_global_average_pooling2d_(fl_global_pool_args a) { return global_pool(FL_L_GAP, a); }
fl_layer *fl_global_max_pooling2d_(fl_global_pool_args a) { return global_pool(FL_L_GMP, a); }
fl_layer *fl_global_average_pooling1d_(fl_global_pool_args a) { return global_pool(FL_L_GAP1D, a); }
fl_layer *fl_global_max_pooling1d_(fl_global_pool_args a) { return global_pool(FL_L_GMP1D, a); }

static fl_layer *pool1d(fl_layer_kind k, fl_pool1d_args a) {
    if (!a.pool_size) a.pool_size = 2;
    if (!a.strides) a.strides = a.pool_size;
    if (a.pool_size <= 0 || a.strides <= 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: pool_size %d and strides %d must be > 0", kind_class[k],
                             a.pool_size, a.strides);
    if (a.padding != FL_VALID && a.padding != FL_SAME)
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: padding %d, expected FL_VALID or FL_SAME", kind_class[k],
                             (int)a.padding);
    fl_layer *l = fl_layer_new(k, a.name);
    if (l) { l->a.pool1d = a; l->a.pool1d.name = NULL; }
    return l;
}
fl_layer *fl_max_pooling1d_(fl_pool1d_args a) { return pool1d(FL_L_MAXPOOL1D, a); }
fl_layer *fl_average_pooling1d_(fl_pool1d_args a) { return pool1d(FL_L_AVGPOOL1D, a); }

fl_layer *fl_conv1d_(fl_conv1d_args a) {
    if (a.filters <= 0) return fl_error_null(FL_ERR_INVALID_ARG, "Conv1D: filters is %d, expected > 0", a.filters);
    if (a.kernel_size <= 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "Conv1D: kernel_size is %d, expected > 0", a.kernel_size);
    if (!a.strides) a.strides = 1;
    if (a.strides <= 0) return fl_error_null(FL_ERR_INVALID_ARG, "Conv1D: strides %d, expected > 0", a.strides);
    if (!a.dilation_rate) a.dilation_rate = 1;
    if (a.dilation_rate < 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "Conv1D: dilation_rate %d, expected > 0", a.dilation_rate);
    if (a.dilation_rate > 1 && a.strides > 1)
        return fl_error_null(FL_ERR_INVALID_ARG,
                             "Conv1D: strides %d with dilation_rate %d: strides > 1 and dilation_rate > 1 do not go "
                             "together (Keras refuses them too)", a.strides, a.dilation_rate);
    if (!a.groups) a.groups = 1;
    if (a.groups < 0 || a.filters % a.groups)
        return fl_error_null(FL_ERR_INVALID_ARG, "Conv1D: groups %d, expected > 0 and dividing filters %d", a.groups,
                             a.filters);
    if (a.padding != FL_VALID && a.padding != FL_SAME && a.padding != FL_CAUSAL)
        return fl_error_null(FL_ERR_INVALID_ARG, "Conv1D: padding %d, expected FL_VALID, FL_SAME or FL_CAUSAL",
                             (int)a.padding);
    if (fl_layer_check_act("Conv1D", a.activation)) return NULL;
    fl_layer *l = fl_layer_new(FL_L_CONV1D, a.name);
    if (l) { l->a.conv1d = a; l->a.conv1d.name = NULL; }
    return l;
}
fl_layer *fl_flatten_(fl_name_args a) { return fl_layer_new(FL_L_FLATTEN, a.name); }

fl_layer *fl_reshape_(int ndim, const int64_t *shape) {
    if (ndim < 1 || ndim > FL_MAX_DIMS - 1)
        return fl_error_null(FL_ERR_SHAPE, "Reshape: %d target dimensions, expected 1 to %d", ndim, FL_MAX_DIMS - 1);
    int neg = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == -1) neg++;
        else if (shape[i] <= 0)
            return fl_error_null(FL_ERR_SHAPE, "Reshape: target dimension %d is %lld, expected > 0 or -1", i,
                                 (long long)shape[i]);
    }
    if (neg > 1) return fl_error_null(FL_ERR_SHAPE, "Reshape: at most one target dimension may be -1");
    fl_layer *l = fl_layer_new(FL_L_RESHAPE, NULL);
    if (!l) return NULL;
    l->a.shape.ndim = ndim;
    memcpy(l->a.shape.shape, shape, (size_t)ndim * sizeof(int64_t));
    return l;
}

fl_layer *fl_dropout_(fl_dropout_args a) {
    if (!(a.rate >= 0.0f && a.rate < 1.0f))
        return fl_error_null(FL_ERR_INVALID_ARG, "Dropout: rate is %g, expected 0 <= rate < 1", a.rate);
    fl_layer *l = fl_layer_new(FL_L_DROPOUT, a.name);
    if (l) { l->a.dropout = a; l->a.dropout.name = NULL; }
    return l;
}

fl_layer *fl_spatial_dropout2d_(fl_dropout_args a) {
    if (!(a.rate >= 0.0f && a.rate < 1.0f))
        return fl_error_null(FL_ERR_INVALID_ARG, "SpatialDropout2D: rate is %g, expected 0 <= rate < 1", a.rate);
    fl_layer *l = fl_layer_new(FL_L_SPATIAL_DROPOUT2D, a.name);
    if (l) { l->a.dropout = a; l->a.dropout.name = NULL; }
    return l;
}

fl_layer *fl_batch_normalization_(fl_batch_norm_args a) {
    if (a.momentum == 0.0f) a.momentum = 0.99f;
    if (a.epsilon == 0.0f) a.epsilon = 1e-3f;
    if (!(a.momentum >= 0.0f && a.momentum < 1.0f) || !(a.epsilon > 0.0f))
        return fl_error_null(FL_ERR_INVALID_ARG, "BatchNormalization: momentum %g must be in [0, 1), epsilon %g > 0",
                             a.momentum, a.epsilon);
    fl_layer *l = fl_layer_new(FL_L_BATCHNORM, a.name);
    if (l) { l->a.bn = a; l->a.bn.name = NULL; }
    return l;
}

fl_layer *fl_activation_layer_(fl_activation_args a) {
    if (fl_layer_check_act("Activation", a.activation)) return NULL;
    fl_layer *l = fl_layer_new(FL_L_ACTIVATION, a.name);
    if (l) { l->a.act = a; l->a.act.name = NULL; }
    return l;
}

fl_layer *fl_add_(fl_name_args a) { return fl_layer_new(FL_L_ADD, a.name); }
fl_layer *fl_multiply_(fl_name_args a) { return fl_layer_new(FL_L_MULTIPLY, a.name); }
fl_layer *fl_subtract_(fl_name_args a) { return fl_layer_new(FL_L_SUBTRACT, a.name); }
fl_layer *fl_average_(fl_name_args a) { return fl_layer_new(FL_L_AVERAGE, a.name); }
fl_layer *fl_maximum_(fl_name_args a) { return fl_layer_new(FL_L_MAXIMUM, a.name); }
fl_layer *fl_minimum_(fl_name_args a) { return fl_layer_new(FL_L_MINIMUM, a.name); }
fl_layer *fl_concatenate_(fl_concat_args a) {
    fl_layer *l = fl_layer_new(FL_L_CONCATENATE, a.name);
    if (l) { l->a.concat = a; l->a.concat.name = NULL; if (!l->a.concat.axis) l->a.concat.axis = -1; }
    return l;
}

/* Resolves size < pad_h/pad_w < top/bottom/left/right (see flynn.h). */
static fl_layer *padding2d(fl_layer_kind k, fl_padding2d_args a, int dflt) {
    if (!a.size && !a.pad_h && !a.pad_w && !a.top && !a.bottom && !a.left && !a.right) a.size = dflt;
    int ph = a.pad_h ? a.pad_h : a.size, pw = a.pad_w ? a.pad_w : a.size;
    if (!a.top) a.top = ph;
    if (!a.bottom) a.bottom = ph;
    if (!a.left) a.left = pw;
    if (!a.right) a.right = pw;
    if (a.top < 0 || a.bottom < 0 || a.left < 0 || a.right < 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: ((top %d, bottom %d), (left %d, right %d)), expected >= 0",
                             kind_class[k], a.top, a.bottom, a.left, a.right);
    fl_layer *l = fl_layer_new(k, a.name);
    if (l) { l->a.pad = a; l->a.pad.name = NULL; }
    return l;
}
fl_layer *fl_zero_padding2d_(fl_padding2d_args a) { return padding2d(FL_L_ZEROPAD2D, a, 1); }
fl_layer *fl_cropping2d_(fl_padding2d_args a) { return padding2d(FL_L_CROPPING2D, a, 0); }

/* The 1D forms keep (left, right) in pad.top/bottom: the steps axis is the
 * image rows of the (steps, 1, features) view that their build crops. */
static fl_layer *padding1d(fl_layer_kind k, fl_padding1d_args a) {
    if (!a.size && !a.left && !a.right) a.size = 1;
    if (!a.left) a.left = a.size;
    if (!a.right) a.right = a.size;
    if (a.left < 0 || a.right < 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: (left %d, right %d), expected >= 0", kind_class[k], a.left,
                             a.right);
    fl_layer *l = fl_layer_new(k, a.name);
    if (l) l->a.pad = (fl_padding2d_args){.top = a.left, .bottom = a.right};
    return l;
}
fl_layer *fl_zero_padding1d_(fl_padding1d_args a) { return padding1d(FL_L_ZEROPAD1D, a); }
fl_layer *fl_cropping1d_(fl_padding1d_args a) { return padding1d(FL_L_CROPPING1D, a); }

fl_layer *fl_up_sampling1d_(fl_up_sampling1d_args a) {
    if (a.size == 0) a.size = 2;
    if (a.size < 1) return fl_error_null(FL_ERR_INVALID_ARG, "UpSampling1D: size is %d, expected >= 1", a.size);
    fl_layer *l = fl_layer_new(FL_L_UPSAMPLE1D, a.name);
    if (l) l->a.up = (fl_up_sampling2d_args){.size_h = a.size, .size_w = 1, .interpolation = FL_NEAREST};
    return l;
}

fl_layer *fl_spatial_dropout1d_(fl_dropout_args a) {
    if (!(a.rate >= 0.0f && a.rate < 1.0f))
        return fl_error_null(FL_ERR_INVALID_ARG, "SpatialDropout1D: rate is %g, expected 0 <= rate < 1", a.rate);
    fl_layer *l = fl_layer_new(FL_L_SPATIAL_DROPOUT1D, a.name);
    if (l) { l->a.dropout = a; l->a.dropout.name = NULL; }
    return l;
}

/* ------------------------------------------ activation / preprocessing layers */

static fl_layer *pact_layer(fl_layer_kind k, const char *name, fl_pact_desc p) {
    fl_layer *l = fl_layer_new(k, name);
    if (l) l->a.pact = p;
    return l;
}

fl_layer *fl_relu_layer_(fl_relu_args a) {
    if (!(a.max_value >= 0) || !(a.negative_slope >= 0) || !(a.threshold >= 0))
        return fl_error_null(FL_ERR_INVALID_ARG,
                             "ReLU: max_value %g, negative_slope %g, threshold %g: expected each >= 0", a.max_value,
                             a.negative_slope, a.threshold);
    return pact_layer(FL_L_RELU, a.name,
                      (fl_pact_desc){FL_PACT_RELU, a.negative_slope, a.threshold,
                                     a.max_value == 0.0f ? INFINITY : a.max_value});
}

fl_layer *fl_leaky_relu_(fl_leaky_relu_args a) {
    if (a.negative_slope == 0.0f) a.negative_slope = 0.3f;
    if (!(a.negative_slope >= 0))
        return fl_error_null(FL_ERR_INVALID_ARG, "LeakyReLU: negative_slope %g, expected >= 0", a.negative_slope);
    return pact_layer(FL_L_LEAKY_RELU, a.name, (fl_pact_desc){FL_PACT_RELU, a.negative_slope, 0.0f, INFINITY});
}

fl_layer *fl_elu_layer_(fl_elu_args a) {
    if (a.alpha == 0.0f) a.alpha = 1.0f;
    if (!isfinite(a.alpha)) return fl_error_null(FL_ERR_INVALID_ARG, "ELU: alpha %g, expected a finite number", a.alpha);
    return pact_layer(FL_L_ELU, a.name, (fl_pact_desc){FL_PACT_ELU, a.alpha, 0.0f, 0.0f});
}

fl_layer *fl_rescaling_(fl_rescaling_args a) {
    if (!isfinite(a.scale) || !isfinite(a.offset))
        return fl_error_null(FL_ERR_INVALID_ARG, "Rescaling: scale %g and offset %g must be finite", a.scale, a.offset);
    return pact_layer(FL_L_RESCALING, a.name, (fl_pact_desc){FL_PACT_AFFINE, a.scale, a.offset, 0.0f});
}

fl_layer *fl_prelu_(fl_prelu_args a) {
    for (int i = 0; i < FL_MAX_DIMS && a.shared_axes[i]; i++)
        if (a.shared_axes[i] < 1 || a.shared_axes[i] >= FL_MAX_DIMS)
            return fl_error_null(FL_ERR_INVALID_ARG, "PReLU: shared axis %d, expected 1 to %d (the batch is axis 0)",
                                 a.shared_axes[i], FL_MAX_DIMS - 1);
    fl_layer *l = fl_layer_new(FL_L_PRELU, a.name);
    if (l) { l->a.prelu = a; l->a.prelu.name = NULL; }
    return l;
}

fl_layer *fl_softmax_layer_(fl_softmax_args a) {
    if (!a.axis) a.axis = -1;
    if (a.axis < -(FL_MAX_DIMS - 1) || a.axis >= FL_MAX_DIMS)
        return fl_error_null(FL_ERR_INVALID_ARG, "Softmax: axis %d is out of range", a.axis);
    fl_layer *l = fl_layer_new(FL_L_SOFTMAX, a.name);
    if (l) { l->a.softmax = a; l->a.softmax.name = NULL; }
    return l;
}

fl_layer *fl_normalization_(fl_normalization_args a) {
    if (!a.axis) a.axis = -1;
    if (!a.axis_none && (a.axis < -(FL_MAX_DIMS - 1) || a.axis >= FL_MAX_DIMS))
        return fl_error_null(FL_ERR_INVALID_ARG, "Normalization: axis %d is out of range", a.axis);
    if ((a.mean == NULL) != (a.variance == NULL))
        return fl_error_null(FL_ERR_INVALID_ARG, "Normalization: give both mean and variance, or neither (adapted)");
    if (a.mean && a.size <= 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "Normalization: size %d with mean and variance, expected >= 1", a.size);
    fl_layer *l = fl_layer_new(FL_L_NORMALIZATION, a.name);
    if (!l) return NULL;
    l->a.norm.axis = a.axis;
    l->a.norm.axis_none = a.axis_none;
    l->a.norm.invert = a.invert;
    if (a.mean) {
        l->a.norm.mean = fl_malloc((size_t)a.size * sizeof(float), "Normalization mean");
        l->a.norm.variance = fl_malloc((size_t)a.size * sizeof(float), "Normalization variance");
        if (!l->a.norm.mean || !l->a.norm.variance) { fl_layer_free(l); return NULL; }
        memcpy(l->a.norm.mean, a.mean, (size_t)a.size * sizeof(float));
        memcpy(l->a.norm.variance, a.variance, (size_t)a.size * sizeof(float));
        l->a.norm.size = a.size;
    }
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
static fl_node *then_act(fl_graph *g, const char *name, fl_node *out, int act) {
    return out && !fl_act_grad_from_output(act) ? fl_graph_act(g, name, out, act) : out;
}
static int fused_act(int act) { return fl_act_grad_from_output(act) ? act : FL_ACT_LINEAR; }

static fl_node *build_dense(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_dense_args *a = &l->a.dense;
    fl_node *x = xs[0];
    int64_t in = x->shape[x->ndim - 1];
    fl_node *k = fl_layer_add_weight(l, g, "kernel", 2, (int64_t[]){in, a->units}, true);
    fl_node *b = k && !a->no_bias ? fl_layer_add_weight(l, g, "bias", 1, (int64_t[]){a->units}, true) : NULL;
    if (!k || (!a->no_bias && !b)) return NULL;
    int act = (int)a->activation;
    return then_act(g, l->name, fl_graph_dense(g, l->name, x, k, b, fused_act(act)), act);
}

static fl_status need_image(const fl_layer *l, const fl_node *x) {
    if (x->ndim == 4) return FL_OK;
    char s[128];
    return fl_error(FL_ERR_SHAPE, "layer '%s' (%s): input %s must be (batch, height, width, channels)", l->name,
                    kind_class[l->kind], fl_shape_str(x->ndim, x->shape, s, sizeof s));
}

static fl_status need_sequence(const fl_layer *l, const fl_node *x) {
    if (x->ndim == 3) return FL_OK;
    char s[128];
    return fl_error(FL_ERR_SHAPE, "layer '%s' (%s): input %s must be (batch, steps, features)", l->name,
                    kind_class[l->kind], fl_shape_str(x->ndim, x->shape, s, sizeof s));
}

/* ZeroPadding1D and Cropping1D through the 2D padding, which takes a sequence as an image of one column;
 * UpSampling1D on the (steps, 1, features) view of the sequence. */
static fl_node *build_seq1d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    fl_node *x = xs[0];
    if (need_sequence(l, x)) return NULL;
    const int s = l->kind == FL_L_CROPPING1D ? -1 : 1;
    if (l->kind != FL_L_UPSAMPLE1D) return fl_graph_pad2d(g, l->name, x, s * l->a.pad.top, s * l->a.pad.bottom, 0, 0);
    fl_node *v = fl_graph_reshape(g, l->name, x, 3, (int64_t[]){x->shape[1], 1, x->shape[2]});
    fl_node *y = v ? fl_graph_upsample2d(g, l->name, v, l->a.up.size_h, 1, false) : NULL;
    return y ? fl_graph_reshape(g, l->name, y, 2, (int64_t[]){y->shape[1], y->shape[3]}) : NULL;
}

/* Grouped convolutions: the input's channels divide into the groups. */
static fl_status need_groups(const fl_layer *l, const fl_node *x, int groups) {
    int64_t c = x->shape[x->ndim - 1];
    if (groups >= 1 && c % groups == 0) return FL_OK;
    return fl_error(FL_ERR_SHAPE, "layer '%s' (%s): input has %lld channels, not divisible by groups %d", l->name,
                    kind_class[l->kind], (long long)c, groups);
}

static fl_node *build_conv2d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_conv2d_args *a = &l->a.conv;
    fl_node *x = xs[0];
    if (need_image(l, x) || need_groups(l, x, a->groups)) return NULL;
    fl_node *k = fl_layer_add_weight(l, g, "kernel", 4,
                            (int64_t[]){a->kernel_h, a->kernel_w, x->shape[3] / a->groups, a->filters}, true);
    fl_node *b = k && !a->no_bias ? fl_layer_add_weight(l, g, "bias", 1, (int64_t[]){a->filters}, true) : NULL;
    if (!k || (!a->no_bias && !b)) return NULL;
    int act = (int)a->activation;
    return then_act(g, l->name,
                    fl_graph_conv2d_dilated(g, l->name, x, k, b, a->stride_h, a->stride_w, a->dilation_h,
                                            a->dilation_w, a->groups, a->padding, fused_act(act)),
                    act);
}

static fl_node *build_pool(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_pool2d_args *a = &l->a.pool;
    return fl_graph_pool(g, l->name, l->kind == FL_L_MAXPOOL ? FL_OP_MAXPOOL : FL_OP_AVGPOOL, xs[0], a->pool_h,
                         a->pool_w, a->stride_h, a->stride_w, a->padding);
}

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

/* GlobalAveragePooling2D, GlobalMaxPooling2D and their 1D forms: a 1D
 * sequence is pooled as an image of one column; max pooling is a max pool
 * whose window is the whole image (its kernels are the pooling's). */
static fl_node *build_global_pool(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    fl_node *x = xs[0];
    bool one_d = l->kind == FL_L_GAP1D || l->kind == FL_L_GMP1D, max = l->kind == FL_L_GMP || l->kind == FL_L_GMP1D;
    if (one_d ? fl_layer_need_rank(l, x, 3, SEQUENCE) : need_image(l, x)) return NULL;
    int64_t c = x->shape[x->ndim - 1];
    if (l->kind == FL_L_GAP1D && x->mask) { /* Keras: the mean of the valid steps */
        fl_node *y = fl_graph_masked_gap1d(g, l->name, x, x->mask);
        return y && l->a.gpool.keepdims ? fl_layer_view(l, g, y, 2, (int64_t[]){1, c}) : y;
    }
    /* GlobalMaxPooling1D: Keras 3's does not support masking and drops the
     * mask, pooling every step; so does flynn */
    if (one_d) x = fl_layer_view(l, g, x, 3, (int64_t[]){x->shape[1], 1, c});
    if (!x) return NULL;
    fl_node *y = max ? fl_graph_pool(g, l->name, FL_OP_MAXPOOL, x, (int)x->shape[1], (int)x->shape[2],
                                     (int)x->shape[1], (int)x->shape[2], FL_VALID)
                     : fl_graph_gap(g, l->name, x);
    if (!y) return NULL;
    if (l->a.gpool.keepdims) return fl_layer_view(l, g, y, one_d ? 2 : 3, one_d ? (int64_t[]){1, c} : (int64_t[]){1, 1, c});
    return max ? fl_layer_view(l, g, y, 1, &c) : y;
}

static fl_node *build_pool1d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_pool1d_args *a = &l->a.pool1d;
    fl_node *x = xs[0];
    if (fl_layer_need_rank(l, x, 3, SEQUENCE)) return NULL;
    return fl_graph_pool(g, l->name, l->kind == FL_L_MAXPOOL1D ? FL_OP_MAXPOOL : FL_OP_AVGPOOL, x, a->pool_size, 1,
                         a->strides, 1, a->padding);
}

/* Conv1D: the convolution takes the sequence as an image of one column, and
 * the kernel (k, in/groups, out) as (k, 1, in/groups, out), the same bytes;
 * "causal" pads dilation*(k - 1) steps before the sequence and convolves
 * "valid". */
static fl_node *build_conv1d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_conv1d_args *a = &l->a.conv1d;
    fl_node *x = xs[0];
    if (fl_layer_need_rank(l, x, 3, SEQUENCE) || need_groups(l, x, a->groups)) return NULL;
    fl_node *k = fl_layer_add_weight(l, g, "kernel", 3, (int64_t[]){a->kernel_size, x->shape[2] / a->groups, a->filters}, true);
    fl_node *b = k && !a->no_bias ? fl_layer_add_weight(l, g, "bias", 1, (int64_t[]){a->filters}, true) : NULL;
    if (!k || (!a->no_bias && !b)) return NULL;
    if (a->padding == FL_CAUSAL && a->kernel_size > 1)
        x = fl_graph_pad2d(g, l->name, x, a->dilation_rate * (a->kernel_size - 1), 0, 0, 0);
    if (!x) return NULL;
    int act = (int)a->activation;
    fl_node *y = fl_graph_conv2d_dilated(g, l->name, x, k, b, a->strides, 1, a->dilation_rate, 1, a->groups,
                                         a->padding == FL_SAME ? FL_SAME : FL_VALID, fused_act(act));
    return then_act(g, l->name, y, act);
}

static fl_node *build_flatten(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    int64_t n = fl_node_sample_size(xs[0]);
    return fl_graph_reshape(g, l->name, xs[0], 1, &n);
}

static fl_node *build_reshape(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    return fl_graph_reshape(g, l->name, xs[0], l->a.shape.ndim, l->a.shape.shape);
}

static fl_node *build_dropout(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    fl_node *x = xs[0];
    uint64_t stream = l->a.dropout.seed ? l->a.dropout.seed : (uint64_t)(l->index + 1) * 0x9E3779B97F4A7C15ull;
    /* the noise shape per sample: 0 takes the input's size; SpatialDropout2D drops whole channels */
    int64_t noise[FL_MAX_DIMS];
    bool shared = false;
    const bool spatial = l->kind == FL_L_SPATIAL_DROPOUT2D || l->kind == FL_L_SPATIAL_DROPOUT1D;
    if (l->kind == FL_L_SPATIAL_DROPOUT2D && need_image(l, x)) return NULL;
    if (l->kind == FL_L_SPATIAL_DROPOUT1D && need_sequence(l, x)) return NULL;
    for (int i = 1; i < x->ndim; i++) {
        int64_t v = spatial ? (i < x->ndim - 1 ? 1 : 0) : l->a.dropout.noise_shape[i - 1];
        noise[i - 1] = v ? v : x->shape[i];
        shared |= noise[i - 1] != x->shape[i];
    }
    return fl_graph_dropout(g, l->name, x, l->a.dropout.rate, stream, shared ? noise : NULL);
}

static fl_node *build_batchnorm(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_batch_norm_args *a = &l->a.bn;
    fl_node *x = xs[0];
    int64_t c = x->shape[x->ndim - 1];
    fl_node *gm = a->no_scale ? NULL : fl_layer_add_weight(l, g, "gamma", 1, &c, true);
    fl_node *bt = a->no_center ? NULL : fl_layer_add_weight(l, g, "beta", 1, &c, true);
    fl_node *mm = fl_layer_add_weight(l, g, "moving_mean", 1, &c, false);
    fl_node *mv = fl_layer_add_weight(l, g, "moving_variance", 1, &c, false);
    if ((!a->no_scale && !gm) || (!a->no_center && !bt) || !mm || !mv) return NULL;
    fl_node *n = fl_graph_batchnorm(g, l->name, x, gm, bt, mm, mv, a->epsilon, a->momentum);
    if (n && l->frozen) fl_graph_batchnorm_freeze(n, true);
    return n;
}

static fl_node *build_activation(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    return fl_graph_act(g, l->name, xs[0], (int)l->a.act.activation);
}

static fl_node *build_add(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    return fl_graph_merge(g, l->name, FL_OP_ADD, xs, nx, 0);
}

/* Subtract, Average, Maximum, Minimum */
static fl_node *build_arith(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    if (l->kind == FL_L_SUBTRACT && nx != 2)
        return fl_error_null(FL_ERR_INVALID_ARG, "layer '%s' (Subtract) takes exactly 2 inputs, it was given %d",
                             l->name, nx);
    fl_op op = l->kind == FL_L_SUBTRACT ? FL_OP_SUB : l->kind == FL_L_AVERAGE ? FL_OP_AVG
             : l->kind == FL_L_MAXIMUM ? FL_OP_MAX : FL_OP_MIN;
    return fl_graph_merge(g, l->name, op, xs, nx, 0);
}

static fl_node *build_multiply(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    return fl_graph_merge(g, l->name, FL_OP_MUL, xs, nx, 0);
}

static fl_node *build_concatenate(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    /* Keras counts axes of the full shape, batch included: -1 is the last */
    return fl_graph_merge(g, l->name, FL_OP_CONCAT, xs, nx, l->a.concat.axis);
}

static fl_node *build_padding2d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_padding2d_args *a = &l->a.pad;
    int s = l->kind == FL_L_CROPPING2D ? -1 : 1;
    if (need_image(l, xs[0])) return NULL;
    return fl_graph_pad2d(g, l->name, xs[0], s * a->top, s * a->bottom, s * a->left, s * a->right);
}

static fl_node *build_pact(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    return fl_graph_pact(g, l->name, xs[0], l->a.pact);
}

static fl_node *build_prelu(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    fl_node *x = xs[0];
    int64_t p[FL_MAX_DIMS];
    for (int i = 1; i < x->ndim; i++) p[i - 1] = x->shape[i];
    for (int i = 0; i < FL_MAX_DIMS && l->a.prelu.shared_axes[i]; i++) {
        int ax = l->a.prelu.shared_axes[i];
        if (ax >= x->ndim) {
            char s[128];
            return fl_error_null(FL_ERR_SHAPE, "layer '%s' (PReLU): shared axis %d is not an axis of input %s",
                                 l->name, ax, fl_shape_str(x->ndim, x->shape, s, sizeof s));
        }
        p[ax - 1] = 1;
    }
    fl_node *alpha = fl_layer_add_weight(l, g, "alpha", x->ndim - 1, p, true);
    return alpha ? fl_graph_prelu(g, l->name, x, alpha) : NULL;
}

static fl_node *build_softmax(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    return fl_graph_softmax(g, l->name, xs[0], l->a.softmax.axis);
}

static fl_node *build_normalization(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    fl_node *x = xs[0];
    char s[128];
    int axis = -1; /* per-sample axis, -1: none */
    int64_t len = 1;
    if (!l->a.norm.axis_none) {
        int a = l->a.norm.axis < 0 ? l->a.norm.axis + x->ndim : l->a.norm.axis;
        if (a < 1 || a >= x->ndim)
            return fl_error_null(FL_ERR_SHAPE, "layer '%s' (Normalization): axis %d is not a non-batch axis of input %s",
                                 l->name, l->a.norm.axis, fl_shape_str(x->ndim, x->shape, s, sizeof s));
        axis = a - 1;
        len = x->shape[a];
    }
    fl_node *mean, *var;
    if (l->a.norm.size) { /* given: constants of this graph, not weights (Keras has none then) */
        int n = l->a.norm.size;
        if (n != 1 && n != len)
            return fl_error_null(FL_ERR_SHAPE,
                                 "layer '%s' (Normalization): %d mean/variance values for an axis of %lld (input %s)",
                                 l->name, n, (long long)len, fl_shape_str(x->ndim, x->shape, s, sizeof s));
        mean = fl_graph_param(g, l->name, 1, &len, false);
        var = mean ? fl_graph_param(g, l->name, 1, &len, false) : NULL;
        if (!var) return NULL;
        for (int64_t i = 0; i < len; i++) {
            float m = l->a.norm.mean[n == 1 ? 0 : i], v = l->a.norm.variance[n == 1 ? 0 : i];
            g->be->upload(mean->val + i, &m, sizeof m);
            g->be->upload(var->val + i, &v, sizeof v);
        }
    } else { /* Keras's adapted state: mean, variance, count (unused here) */
        int nd = axis < 0 ? 0 : 1;
        mean = fl_layer_add_weight(l, g, "mean", nd, &len, false);
        var = mean ? fl_layer_add_weight(l, g, "variance", nd, &len, false) : NULL;
        if (!var || !fl_layer_add_weight(l, g, "count", 0, NULL, false)) return NULL;
    }
    return fl_graph_normalize(g, l->name, x, mean, var, axis, l->a.norm.invert);
}

static fl_node *build_depthwise2d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_depthwise_conv2d_args *a = &l->a.dw;
    fl_node *x = xs[0];
    if (need_image(l, x)) return NULL;
    int64_t c = x->shape[3], dm = a->depth_multiplier;
    fl_node *k = fl_layer_add_weight(l, g, "kernel", 4, (int64_t[]){a->kernel_h, a->kernel_w, c, dm}, true);
    fl_node *b = k && !a->no_bias ? fl_layer_add_weight(l, g, "bias", 1, (int64_t[]){c * dm}, true) : NULL;
    if (!k || (!a->no_bias && !b)) return NULL;
    int act = (int)a->activation;
    return then_act(g, l->name,
                    fl_graph_depthwise_conv2d_dilated(g, l->name, x, k, b, a->stride_h, a->stride_w, a->dilation_h,
                                                      a->dilation_w, a->padding, fused_act(act)),
                    act);
}

/* Keras's SeparableConv2D: depthwise (strides, padding, no bias), then a
 * 1x1 convolution with the bias and the activation. */
static fl_node *build_separable2d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_separable_conv2d_args *a = &l->a.sep;
    fl_node *x = xs[0];
    if (need_image(l, x)) return NULL;
    int64_t c = x->shape[3], dm = a->depth_multiplier;
    fl_node *dk = fl_layer_add_weight(l, g, "depthwise_kernel", 4, (int64_t[]){a->kernel_h, a->kernel_w, c, dm}, true);
    fl_node *pk = dk ? fl_layer_add_weight(l, g, "pointwise_kernel", 4, (int64_t[]){1, 1, c * dm, a->filters}, true) : NULL;
    fl_node *b = pk && !a->no_bias ? fl_layer_add_weight(l, g, "bias", 1, (int64_t[]){a->filters}, true) : NULL;
    if (!dk || !pk || (!a->no_bias && !b)) return NULL;
    fl_node *d = fl_graph_depthwise_conv2d_dilated(g, l->name, x, dk, NULL, a->stride_h, a->stride_w, a->dilation_h,
                                                   a->dilation_w, a->padding, FL_ACT_LINEAR);
    if (!d) return NULL;
    int act = (int)a->activation;
    return then_act(g, l->name, fl_graph_conv2d(g, l->name, d, pk, b, 1, 1, FL_VALID, fused_act(act)), act);
}

static fl_node *build_upsample2d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_up_sampling2d_args *a = &l->a.up;
    if (need_image(l, xs[0])) return NULL;
    return fl_graph_upsample2d(g, l->name, xs[0], a->size_h, a->size_w, a->interpolation == FL_BILINEAR);
}

/* Resizing: Keras 3's (keras/src/backend/jax/image.py resize): the centred
 * crop or the zero padding to the target's aspect ratio first (sizes as
 * Keras computes them, in doubles truncated to int), then the resize. */
static fl_node *build_resizing(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_resizing_args *a = &l->a.resize;
    fl_node *x = xs[0];
    if (need_image(l, x)) return NULL;
    const int64_t h = x->shape[1], w = x->shape[2], th = a->height, tw = a->width;
    if (a->crop_to_aspect_ratio) {
        int64_t ch = (int64_t)((double)(w * th) / (double)tw), cw = (int64_t)((double)(h * tw) / (double)th);
        ch = ch > h ? h : ch < 1 ? 1 : ch;
        cw = cw > w ? w : cw < 1 ? 1 : cw;
        int64_t hs = (h - ch) / 2, ws = (w - cw) / 2;
        if (ch != h || cw != w)
            x = fl_graph_pad2d(g, l->name, x, (int)-hs, (int)-(h - ch - hs), (int)-ws, (int)-(w - cw - ws));
    } else if (a->pad_to_aspect_ratio) {
        int64_t ph = (int64_t)((double)(w * th) / (double)tw), pw = (int64_t)((double)(h * tw) / (double)th);
        ph = ph < h ? h : ph;
        pw = pw < w ? w : pw;
        int64_t hs = (ph - h) / 2, ws = (pw - w) / 2; /* Keras pads one axis, by the same count on both sides */
        if (hs > 0) x = fl_graph_pad2d(g, l->name, x, (int)hs, (int)hs, 0, 0);
        else if (ws > 0) x = fl_graph_pad2d(g, l->name, x, 0, 0, (int)ws, (int)ws);
    }
    return x ? fl_graph_resize2d(g, l->name, x, a->height, a->width, !a->nearest) : NULL;
}

/* Conv2DTranspose: kernel (kh, kw, filters, in) as Keras; glorot_uniform's
 * fans follow from that shape as Keras computes them (fan_in = kh*kw*filters). */
static fl_node *build_conv2d_transpose(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_conv2d_args *a = &l->a.conv;
    fl_node *x = xs[0];
    if (need_image(l, x)) return NULL;
    fl_node *k = fl_layer_add_weight(l, g, "kernel", 4, (int64_t[]){a->kernel_h, a->kernel_w, a->filters, x->shape[3]}, true);
    fl_node *b = k && !a->no_bias ? fl_layer_add_weight(l, g, "bias", 1, (int64_t[]){a->filters}, true) : NULL;
    if (!k || (!a->no_bias && !b)) return NULL;
    int act = (int)a->activation;
    return then_act(g, l->name,
                    fl_graph_conv2d_transpose(g, l->name, x, k, b, a->stride_h, a->stride_w, a->padding, fused_act(act)),
                    act);
}

static fl_node *build_permute(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    fl_node *x = xs[0];
    if (x->ndim - 1 != l->a.perm.ndim) {
        char s[128];
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (Permute): dims has %d entries, input %s has %d axes besides "
                             "the batch", l->name, l->a.perm.ndim, fl_shape_str(x->ndim, x->shape, s, sizeof s),
                             x->ndim - 1);
    }
    int dims[FL_MAX_DIMS];
    for (int i = 0; i < l->a.perm.ndim; i++) dims[i] = l->a.perm.dims[i] - 1;
    return fl_graph_permute(g, l->name, x, dims);
}

static const fl_layer_build_fn kind_build[FL_L_COUNT] = {
    [FL_L_INPUT] = build_input,         [FL_L_DENSE] = build_dense,         [FL_L_CONV2D] = build_conv2d,
    [FL_L_MAXPOOL] = build_pool,        [FL_L_AVGPOOL] = build_pool,        [FL_L_GAP] = build_global_pool,
    [FL_L_FLATTEN] = build_flatten,     [FL_L_RESHAPE] = build_reshape,     [FL_L_DROPOUT] = build_dropout,
    [FL_L_BATCHNORM] = build_batchnorm, [FL_L_ACTIVATION] = build_activation, [FL_L_ADD] = build_add,
    [FL_L_MULTIPLY] = build_multiply,   [FL_L_CONCATENATE] = build_concatenate,
    [FL_L_ZEROPAD2D] = build_padding2d, [FL_L_CROPPING2D] = build_padding2d,
    [FL_L_GMP] = build_global_pool,     [FL_L_GAP1D] = build_global_pool,   [FL_L_GMP1D] = build_global_pool,
    [FL_L_MAXPOOL1D] = build_pool1d,    [FL_L_AVGPOOL1D] = build_pool1d,    [FL_L_CONV1D] = build_conv1d,
    [FL_L_SUBTRACT] = build_arith,      [FL_L_AVERAGE] = build_arith,       [FL_L_MAXIMUM] = build_arith,
    [FL_L_MINIMUM] = build_arith,       [FL_L_SPATIAL_DROPOUT2D] = build_dropout,
    [FL_L_RELU] = build_pact,           [FL_L_LEAKY_RELU] = build_pact,     [FL_L_ELU] = build_pact,
    [FL_L_PRELU] = build_prelu,         [FL_L_SOFTMAX] = build_softmax,     [FL_L_RESCALING] = build_pact,
    [FL_L_NORMALIZATION] = build_normalization,
    [FL_L_DEPTHWISE2D] = build_depthwise2d, [FL_L_SEPARABLE2D] = build_separable2d,
    [FL_L_UPSAMPLE2D] = build_upsample2d, [FL_L_CONV2D_TRANSPOSE] = build_conv2d_transpose,
    [FL_L_ZEROPAD1D] = build_seq1d,       [FL_L_CROPPING1D] = build_seq1d,
    [FL_L_UPSAMPLE1D] = build_seq1d,      [FL_L_SPATIAL_DROPOUT1D] = build_dropout,
    [FL_L_NOT_EQUAL] = fl_build_mask_op,     [FL_L_ANY] = fl_build_mask_op,
    [FL_L_LOGICAL_OR] = fl_build_mask_op,    [FL_L_LOGICAL_AND] = fl_build_mask_op,
    [FL_L_CONVERT_TO_TENSOR] = fl_build_mask_op,
    [FL_L_PERMUTE] = build_permute,     [FL_L_RESIZING] = build_resizing,
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
