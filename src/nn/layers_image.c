/*
 * layers_image.c — the image layers (and their 1D forms on sequences), each constructor beside its build:
 * Conv2D and Conv2DTranspose, DepthwiseConv2D and SeparableConv2D, Conv1D; the poolings (2D, 1D, global);
 * the paddings and croppings; UpSampling and Resizing. A constructor fills Keras's defaults in and checks the
 * arguments; its build makes the weights and graph nodes. Their rows are FL_LAYER_KINDS's (nn.h); the build
 * table is layers.c's (layers_internal.h).
 */
#include "nn/layers_internal.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/math.h"
#include "ops/ops.h"

#include <stdio.h>
#include <string.h>

/* ----------------------------------------------- Conv2D, Conv2DTranspose */

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
    const char *cls = fl_layer_kind_class(k);
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

/* Grouped convolutions: the input's channels divide into the groups. */
static fl_status need_groups(const fl_layer *l, const fl_node *x, int groups) {
    int64_t c = x->shape[x->ndim - 1];
    if (groups >= 1 && c % groups == 0) return FL_OK;
    return fl_error(FL_ERR_SHAPE, "layer '%s' (%s): input has %lld channels, not divisible by groups %d", l->name,
                    fl_layer_kind_class(l->kind), (long long)c, groups);
}

fl_node *fl_build_conv2d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_conv2d_args *a = &l->a.conv;
    fl_node *x = xs[0];
    if (fl_layer_need_rank(l, x, 4, IMAGE) || need_groups(l, x, a->groups)) return NULL;
    fl_node *k = fl_layer_add_weight(l, g, "kernel", 4,
                            (int64_t[]){a->kernel_h, a->kernel_w, x->shape[3] / a->groups, a->filters}, true);
    fl_node *b = k && !a->no_bias ? fl_layer_add_weight(l, g, "bias", 1, (int64_t[]){a->filters}, true) : NULL;
    if (!k || (!a->no_bias && !b)) return NULL;
    int act = (int)a->activation;
    return fl_layer_then_act(g, l->name,
                    fl_graph_conv2d_dilated(g, l->name, x, k, b, a->stride_h, a->stride_w, a->dilation_h,
                                            a->dilation_w, a->groups, a->padding, fl_layer_fused_act(act)),
                    act);
}

/* Conv2DTranspose: kernel (kh, kw, filters, in) as Keras; glorot_uniform's
 * fans follow from that shape as Keras computes them (fan_in = kh*kw*filters). */
fl_node *fl_build_conv2d_transpose(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_conv2d_args *a = &l->a.conv;
    fl_node *x = xs[0];
    if (fl_layer_need_rank(l, x, 4, IMAGE)) return NULL;
    fl_node *k = fl_layer_add_weight(l, g, "kernel", 4, (int64_t[]){a->kernel_h, a->kernel_w, a->filters, x->shape[3]}, true);
    fl_node *b = k && !a->no_bias ? fl_layer_add_weight(l, g, "bias", 1, (int64_t[]){a->filters}, true) : NULL;
    if (!k || (!a->no_bias && !b)) return NULL;
    int act = (int)a->activation;
    return fl_layer_then_act(g, l->name,
                    fl_graph_conv2d_transpose(g, l->name, x, k, b, a->stride_h, a->stride_w, a->padding, fl_layer_fused_act(act)),
                    act);
}

/* -------------------------------------- DepthwiseConv2D, SeparableConv2D */

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

fl_node *fl_build_depthwise2d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_depthwise_conv2d_args *a = &l->a.dw;
    fl_node *x = xs[0];
    if (fl_layer_need_rank(l, x, 4, IMAGE)) return NULL;
    int64_t c = x->shape[3], dm = a->depth_multiplier;
    fl_node *k = fl_layer_add_weight(l, g, "kernel", 4, (int64_t[]){a->kernel_h, a->kernel_w, c, dm}, true);
    fl_node *b = k && !a->no_bias ? fl_layer_add_weight(l, g, "bias", 1, (int64_t[]){c * dm}, true) : NULL;
    if (!k || (!a->no_bias && !b)) return NULL;
    int act = (int)a->activation;
    return fl_layer_then_act(g, l->name,
                    fl_graph_depthwise_conv2d_dilated(g, l->name, x, k, b, a->stride_h, a->stride_w, a->dilation_h,
                                                      a->dilation_w, a->padding, fl_layer_fused_act(act)),
                    act);
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

/* Keras's SeparableConv2D: depthwise (strides, padding, no bias), then a
 * 1x1 convolution with the bias and the activation. */
fl_node *fl_build_separable2d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_separable_conv2d_args *a = &l->a.sep;
    fl_node *x = xs[0];
    if (fl_layer_need_rank(l, x, 4, IMAGE)) return NULL;
    int64_t c = x->shape[3], dm = a->depth_multiplier;
    fl_node *dk = fl_layer_add_weight(l, g, "depthwise_kernel", 4, (int64_t[]){a->kernel_h, a->kernel_w, c, dm}, true);
    fl_node *pk = dk ? fl_layer_add_weight(l, g, "pointwise_kernel", 4, (int64_t[]){1, 1, c * dm, a->filters}, true) : NULL;
    fl_node *b = pk && !a->no_bias ? fl_layer_add_weight(l, g, "bias", 1, (int64_t[]){a->filters}, true) : NULL;
    if (!dk || !pk || (!a->no_bias && !b)) return NULL;
    fl_node *d = fl_graph_depthwise_conv2d_dilated(g, l->name, x, dk, NULL, a->stride_h, a->stride_w, a->dilation_h,
                                                   a->dilation_w, a->padding, FL_ACT_LINEAR);
    if (!d) return NULL;
    int act = (int)a->activation;
    return fl_layer_then_act(g, l->name, fl_graph_conv2d(g, l->name, d, pk, b, 1, 1, FL_VALID, fl_layer_fused_act(act)), act);
}

/* ---------------------------------------------------------------- Conv1D */

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

/* Conv1D: the convolution takes the sequence as an image of one column, and
 * the kernel (k, in/groups, out) as (k, 1, in/groups, out), the same bytes;
 * "causal" pads dilation*(k - 1) steps before the sequence and convolves
 * "valid". */
fl_node *fl_build_conv1d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
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
                                         a->padding == FL_SAME ? FL_SAME : FL_VALID, fl_layer_fused_act(act));
    return fl_layer_then_act(g, l->name, y, act);
}

/* -------------------------------------------------------------- poolings */

static fl_layer *pool(fl_layer_kind k, fl_pool2d_args a) {
    if (!a.pool_size) a.pool_size = 2;
    if (!a.pool_h) a.pool_h = a.pool_size;
    if (!a.pool_w) a.pool_w = a.pool_size;
    if (!a.strides) a.strides = 0;
    if (!a.stride_h) a.stride_h = a.strides ? a.strides : a.pool_h;
    if (!a.stride_w) a.stride_w = a.strides ? a.strides : a.pool_w;
    if (a.pool_h <= 0 || a.pool_w <= 0 || a.stride_h <= 0 || a.stride_w <= 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: pool_size %dx%d and strides %dx%d must be > 0", fl_layer_kind_class(k),
                             a.pool_h, a.pool_w, a.stride_h, a.stride_w);
    if (a.padding != FL_VALID && a.padding != FL_SAME)
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: padding %d, expected FL_VALID or FL_SAME", fl_layer_kind_class(k),
                             (int)a.padding);
    fl_layer *l = fl_layer_new(k, a.name);
    if (l) { l->a.pool = a; l->a.pool.name = NULL; }
    return l;
}
fl_layer *fl_max_pooling2d_(fl_pool2d_args a) { return pool(FL_L_MAXPOOL, a); }
fl_layer *fl_average_pooling2d_(fl_pool2d_args a) { return pool(FL_L_AVGPOOL, a); }

fl_node *fl_build_pool(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_pool2d_args *a = &l->a.pool;
    return fl_graph_pool(g, l->name, l->kind == FL_L_MAXPOOL ? FL_OP_MAXPOOL : FL_OP_AVGPOOL, xs[0], a->pool_h,
                         a->pool_w, a->stride_h, a->stride_w, a->padding);
}
static fl_layer *global_pool(fl_layer_kind k, fl_global_pool_args a) {
    fl_layer *l = fl_layer_new(k, a.name);
    if (l) { l->a.gpool = a; l->a.gpool.name = NULL; }
    return l;
}
fl_layer *fl_global_average_pooling2d_(fl_global_pool_args a) { return global_pool(FL_L_GAP, a); }
fl_layer *fl_global_max_pooling2d_(fl_global_pool_args a) { return global_pool(FL_L_GMP, a); }
fl_layer *fl_global_average_pooling1d_(fl_global_pool_args a) { return global_pool(FL_L_GAP1D, a); }
fl_layer *fl_global_max_pooling1d_(fl_global_pool_args a) { return global_pool(FL_L_GMP1D, a); }

/* GlobalAveragePooling2D, GlobalMaxPooling2D and their 1D forms: a 1D
 * sequence is pooled as an image of one column; max pooling is a max pool
 * whose window is the whole image (its kernels are the pooling's). */
fl_node *fl_build_global_pool(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    fl_node *x = xs[0];
    bool one_d = l->kind == FL_L_GAP1D || l->kind == FL_L_GMP1D, max = l->kind == FL_L_GMP || l->kind == FL_L_GMP1D;
    if (one_d ? fl_layer_need_rank(l, x, 3, SEQUENCE) : fl_layer_need_rank(l, x, 4, IMAGE)) return NULL;
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

static fl_layer *pool1d(fl_layer_kind k, fl_pool1d_args a) {
    if (!a.pool_size) a.pool_size = 2;
    if (!a.strides) a.strides = a.pool_size;
    if (a.pool_size <= 0 || a.strides <= 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: pool_size %d and strides %d must be > 0", fl_layer_kind_class(k),
                             a.pool_size, a.strides);
    if (a.padding != FL_VALID && a.padding != FL_SAME)
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: padding %d, expected FL_VALID or FL_SAME", fl_layer_kind_class(k),
                             (int)a.padding);
    fl_layer *l = fl_layer_new(k, a.name);
    if (l) { l->a.pool1d = a; l->a.pool1d.name = NULL; }
    return l;
}
fl_layer *fl_max_pooling1d_(fl_pool1d_args a) { return pool1d(FL_L_MAXPOOL1D, a); }
fl_layer *fl_average_pooling1d_(fl_pool1d_args a) { return pool1d(FL_L_AVGPOOL1D, a); }

fl_node *fl_build_pool1d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_pool1d_args *a = &l->a.pool1d;
    fl_node *x = xs[0];
    if (fl_layer_need_rank(l, x, 3, SEQUENCE)) return NULL;
    return fl_graph_pool(g, l->name, l->kind == FL_L_MAXPOOL1D ? FL_OP_MAXPOOL : FL_OP_AVGPOOL, x, a->pool_size, 1,
                         a->strides, 1, a->padding);
}

/* --------------------------------------------------- paddings, croppings */

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
                             fl_layer_kind_class(k), a.top, a.bottom, a.left, a.right);
    fl_layer *l = fl_layer_new(k, a.name);
    if (l) { l->a.pad = a; l->a.pad.name = NULL; }
    return l;
}
fl_layer *fl_zero_padding2d_(fl_padding2d_args a) { return padding2d(FL_L_ZEROPAD2D, a, 1); }
fl_layer *fl_cropping2d_(fl_padding2d_args a) { return padding2d(FL_L_CROPPING2D, a, 0); }

fl_node *fl_build_padding2d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_padding2d_args *a = &l->a.pad;
    int s = l->kind == FL_L_CROPPING2D ? -1 : 1;
    if (fl_layer_need_rank(l, xs[0], 4, IMAGE)) return NULL;
    return fl_graph_pad2d(g, l->name, xs[0], s * a->top, s * a->bottom, s * a->left, s * a->right);
}

/* The 1D forms keep (left, right) in pad.top/bottom: the steps axis is the
 * image rows of the (steps, 1, features) view that their build crops. */
static fl_layer *padding1d(fl_layer_kind k, fl_padding1d_args a) {
    if (!a.size && !a.left && !a.right) a.size = 1;
    if (!a.left) a.left = a.size;
    if (!a.right) a.right = a.size;
    if (a.left < 0 || a.right < 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: (left %d, right %d), expected >= 0", fl_layer_kind_class(k), a.left,
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

/* ZeroPadding1D and Cropping1D through the 2D padding, which takes a sequence as an image of one column;
 * UpSampling1D on the (steps, 1, features) view of the sequence. */
fl_node *fl_build_seq1d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    fl_node *x = xs[0];
    if (fl_layer_need_rank(l, x, 3, STEPS_FEATURES)) return NULL;
    const int s = l->kind == FL_L_CROPPING1D ? -1 : 1;
    if (l->kind != FL_L_UPSAMPLE1D) return fl_graph_pad2d(g, l->name, x, s * l->a.pad.top, s * l->a.pad.bottom, 0, 0);
    fl_node *v = fl_graph_reshape(g, l->name, x, 3, (int64_t[]){x->shape[1], 1, x->shape[2]});
    fl_node *y = v ? fl_graph_upsample2d(g, l->name, v, l->a.up.size_h, 1, false) : NULL;
    return y ? fl_graph_reshape(g, l->name, y, 2, (int64_t[]){y->shape[1], y->shape[3]}) : NULL;
}

/* ------------------------------------------------ UpSampling2D, Resizing */

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

fl_node *fl_build_upsample2d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_up_sampling2d_args *a = &l->a.up;
    if (fl_layer_need_rank(l, xs[0], 4, IMAGE)) return NULL;
    return fl_graph_upsample2d(g, l->name, xs[0], a->size_h, a->size_w, a->interpolation == FL_BILINEAR);
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

/* Resizing: Keras 3's (keras/src/backend/jax/image.py resize): the centred
 * crop or the zero padding to the target's aspect ratio first (sizes as
 * Keras computes them, in doubles truncated to int), then the resize. */
fl_node *fl_build_resizing(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_resizing_args *a = &l->a.resize;
    fl_node *x = xs[0];
    if (fl_layer_need_rank(l, x, 4, IMAGE)) return NULL;
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
