/*
 * layers_core.c — Dense and the element-wise layers, each constructor beside its build: Dense; Flatten,
 * Reshape, Permute; Dropout and the spatial dropouts; BatchNormalization and Normalization; Activation and
 * the activation layers (ReLU, LeakyReLU, ELU, Rescaling, PReLU, Softmax); the merges (Add, Subtract,
 * Multiply, Average, Maximum, Minimum, Concatenate). Their rows are FL_LAYER_KINDS's (nn.h); the build table
 * is layers.c's (layers_internal.h).
 */
#include "nn/layers_internal.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------- Dense */

fl_layer *fl_dense_(fl_dense_args a) {
    if (a.units <= 0) return fl_error_null(FL_ERR_INVALID_ARG, "Dense: units is %d, expected > 0", a.units);
    if (fl_layer_check_act("Dense", a.activation)) return NULL;
    fl_layer *l = fl_layer_new(FL_L_DENSE, a.name);
    if (l) { l->a.dense = a; l->a.dense.name = NULL; }
    return l;
}

fl_node *fl_build_dense(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_dense_args *a = &l->a.dense;
    fl_node *x = xs[0];
    int64_t in = x->shape[x->ndim - 1];
    fl_node *k = fl_layer_add_weight(l, g, "kernel", 2, (int64_t[]){in, a->units}, true);
    fl_node *b = k && !a->no_bias ? fl_layer_add_weight(l, g, "bias", 1, (int64_t[]){a->units}, true) : NULL;
    if (!k || (!a->no_bias && !b)) return NULL;
    int act = (int)a->activation;
    return fl_layer_then_act(g, l->name, fl_graph_dense(g, l->name, x, k, b, fl_layer_fused_act(act)), act);
}

/* --------------------------------------------- Flatten, Reshape, Permute */

fl_layer *fl_flatten_(fl_name_args a) { return fl_layer_new(FL_L_FLATTEN, a.name); }

fl_node *fl_build_flatten(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    int64_t n = fl_node_sample_size(xs[0]);
    return fl_graph_reshape(g, l->name, xs[0], 1, &n);
}

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

fl_node *fl_build_reshape(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    return fl_graph_reshape(g, l->name, xs[0], l->a.shape.ndim, l->a.shape.shape);
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

fl_node *fl_build_permute(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
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

/* -------------------------------------------------------------- dropouts */

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

fl_layer *fl_spatial_dropout1d_(fl_dropout_args a) {
    if (!(a.rate >= 0.0f && a.rate < 1.0f))
        return fl_error_null(FL_ERR_INVALID_ARG, "SpatialDropout1D: rate is %g, expected 0 <= rate < 1", a.rate);
    fl_layer *l = fl_layer_new(FL_L_SPATIAL_DROPOUT1D, a.name);
    if (l) { l->a.dropout = a; l->a.dropout.name = NULL; }
    return l;
}

fl_node *fl_build_dropout(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    fl_node *x = xs[0];
    uint64_t stream = l->a.dropout.seed ? l->a.dropout.seed : (uint64_t)(l->index + 1) * 0x9E3779B97F4A7C15ull;
    /* the noise shape per sample: 0 takes the input's size; SpatialDropout2D drops whole channels */
    int64_t noise[FL_MAX_DIMS];
    bool shared = false;
    const bool spatial = l->kind == FL_L_SPATIAL_DROPOUT2D || l->kind == FL_L_SPATIAL_DROPOUT1D;
    if (l->kind == FL_L_SPATIAL_DROPOUT2D && fl_layer_need_rank(l, x, 4, IMAGE)) return NULL;
    if (l->kind == FL_L_SPATIAL_DROPOUT1D && fl_layer_need_rank(l, x, 3, STEPS_FEATURES)) return NULL;
    for (int i = 1; i < x->ndim; i++) {
        int64_t v = spatial ? (i < x->ndim - 1 ? 1 : 0) : l->a.dropout.noise_shape[i - 1];
        noise[i - 1] = v ? v : x->shape[i];
        shared |= noise[i - 1] != x->shape[i];
    }
    return fl_graph_dropout(g, l->name, x, l->a.dropout.rate, stream, shared ? noise : NULL);
}

/* -------------------------------------------------------- normalizations */

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

fl_node *fl_build_batchnorm(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
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

fl_node *fl_build_normalization(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
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

/* ----------------------------------------------------------- activations */

fl_layer *fl_activation_layer_(fl_activation_args a) {
    if (fl_layer_check_act("Activation", a.activation)) return NULL;
    fl_layer *l = fl_layer_new(FL_L_ACTIVATION, a.name);
    if (l) { l->a.act = a; l->a.act.name = NULL; }
    return l;
}

fl_node *fl_build_activation(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    return fl_graph_act(g, l->name, xs[0], (int)l->a.act.activation);
}

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

fl_node *fl_build_pact(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    return fl_graph_pact(g, l->name, xs[0], l->a.pact);
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

fl_node *fl_build_prelu(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
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

fl_layer *fl_softmax_layer_(fl_softmax_args a) {
    if (!a.axis) a.axis = -1;
    if (a.axis < -(FL_MAX_DIMS - 1) || a.axis >= FL_MAX_DIMS)
        return fl_error_null(FL_ERR_INVALID_ARG, "Softmax: axis %d is out of range", a.axis);
    fl_layer *l = fl_layer_new(FL_L_SOFTMAX, a.name);
    if (l) { l->a.softmax = a; l->a.softmax.name = NULL; }
    return l;
}

fl_node *fl_build_softmax(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    return fl_graph_softmax(g, l->name, xs[0], l->a.softmax.axis);
}

/* ---------------------------------------------------------------- merges */

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

fl_node *fl_build_add(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    return fl_graph_merge(g, l->name, FL_OP_ADD, xs, nx, 0);
}

/* Subtract, Average, Maximum, Minimum */
fl_node *fl_build_arith(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    if (l->kind == FL_L_SUBTRACT && nx != 2)
        return fl_error_null(FL_ERR_INVALID_ARG, "layer '%s' (Subtract) takes exactly 2 inputs, it was given %d",
                             l->name, nx);
    fl_op op = l->kind == FL_L_SUBTRACT ? FL_OP_SUB : l->kind == FL_L_AVERAGE ? FL_OP_AVG
             : l->kind == FL_L_MAXIMUM ? FL_OP_MAX : FL_OP_MIN;
    return fl_graph_merge(g, l->name, op, xs, nx, 0);
}

fl_node *fl_build_multiply(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    return fl_graph_merge(g, l->name, FL_OP_MUL, xs, nx, 0);
}

fl_node *fl_build_concatenate(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    /* Keras counts axes of the full shape, batch included: -1 is the last */
    return fl_graph_merge(g, l->name, FL_OP_CONCAT, xs, nx, l->a.concat.axis);
}
