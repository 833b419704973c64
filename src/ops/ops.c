/*
 * ops.c — every op once: its shape rule (the fl_graph_* constructors, which
 * refuse bad shapes with a message naming the layer), its forward and its
 * backward side by side, each dispatched to the graph's backend, and the op
 * table at the end that ties them together (name, forward, backward, the
 * backend kernels the op needs). Shapes are NHWC; the batch is dimension 0
 * of every batched node.
 */
#include "ops_internal.h"
#include "math.h"
#include "core/error.h"
#include "core/tensor.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(FL_MAX_DIMS <= 8, "the permute kernels take at most 8 dimensions (backend.h)");

/* Sets a node's shape, refusing (with the layer's name) a dimension outside
 * 1..FL_MAX_DIM, a per-sample size whose element or byte count overflows
 * 64 bits, and a model whose weights plus per-sample buffers already exceed
 * the memory budget (fl_model_bytes_limit). Every node's shape passes here,
 * so sizes computed later from a node's own dimensions (sample size, rows,
 * a sub-product) fit in int64 and the (int) casts of one dimension are exact;
 * products with the batch size are checked in fl_graph_reserve. */
static bool set_shape(fl_graph *g, fl_node *n, bool batched, int ndim, const int64_t *sample) {
    n->batched = batched;
    n->ndim = ndim + (batched ? 1 : 0);
    int o = 0;
    if (batched) n->shape[o++] = -1;
    for (int i = 0; i < ndim; i++) n->shape[o++] = sample[i];
    char a[160], b[48], c[48];
    const char *what = batched ? "output" : "weight";
    for (int i = 0; i < ndim; i++)
        if (sample[i] < 1 || sample[i] > FL_MAX_DIM) {
            fl_error(FL_ERR_SHAPE, "layer '%s' (op %s): %s dimension %d is %lld, expected 1 to %lld", n->name,
                     fl_op_name(n->op), what, i + (batched ? 1 : 0), (long long)sample[i], (long long)FL_MAX_DIM);
            return false;
        }
    int64_t numel, bytes, total;
    if (!fl_shape_numel_checked(ndim, sample, &numel) || !fl_bytes_checked(numel, sizeof(float), &bytes)) {
        fl_error(FL_ERR_SHAPE, "layer '%s' (op %s): %s shape %s needs more bytes than a 64-bit size can count", n->name,
                 fl_op_name(n->op), what, fl_shape_str(n->ndim, n->shape, a, sizeof a));
        return false;
    }
    if (!batched || n->op == FL_OP_RESHAPE) return true; /* weights: fl_graph_param; a view takes no memory */
    int64_t limit = g->bytes_limit ? g->bytes_limit : fl_model_bytes_limit(); /* a rebind's build: read once */
    if (!fl_add_checked(g->sample_bytes, bytes, &g->sample_bytes) ||
        !fl_add_checked(g->param_bytes, g->sample_bytes, &total) || total > limit) {
        fl_error(FL_ERR_NOMEM,
                 "layer '%s' (op %s): output shape %s takes %s per sample; the model would need more than flynn's "
                 "model memory limit of %s for one sample (raise it with $FLYNN_MAX_MODEL_BYTES or "
                 "fl_set_max_model_bytes)", n->name, fl_op_name(n->op), fl_shape_str(n->ndim, n->shape, a, sizeof a),
                 fl_bytes_str(bytes, b, sizeof b), fl_bytes_str(limit, c, sizeof c));
        return false;
    }
    return true;
}

static const char *sample_str(const fl_node *x, char *buf, size_t len) {
    return fl_shape_str(x->ndim, x->shape, buf, len);
}

/* A node of op on x with x's shape (element-wise ops, dropout, batch norm...). */
static fl_node *like(fl_graph *g, fl_op op, const char *name, fl_node *x) {
    fl_node *n = fl_graph_new_node(g, op, name);
    if (!n) return NULL;
    n->nin = 1;
    n->in[0] = x;
    if (!set_shape(g, n, true, x->ndim - 1, x->shape + 1)) return NULL;
    return n;
}

/* An image op's input: (batch, height, width, channels), or a sequence (batch, steps, channels) taken as an image
 * of one column (Conv1D, the 1D poolings, ZeroPadding1D), whose output is then a sequence too: no reshape stands
 * between a Conv1D and the normalisation, Add or pooling after it, so the fusions that look at a convolution's
 * first reader see them as they see a Conv2D's. */
static bool image_dims(const fl_node *x, int *h, int *w, int *c) {
    if (x->ndim != 4 && x->ndim != 3) return false;
    *h = (int)x->shape[1];
    *w = x->ndim == 4 ? (int)x->shape[2] : 1;
    *c = (int)x->shape[x->ndim - 1];
    return true;
}

/* n's shape: (oh, ow, c) per sample, or (oh, c) where x is a sequence (ow is then 1: the callers check) */
static bool set_image_shape(fl_graph *g, fl_node *n, const fl_node *x, int64_t oh, int64_t ow, int64_t c) {
    if (x->ndim == 3) return set_shape(g, n, true, 2, (int64_t[]){oh, c});
    return set_shape(g, n, true, 3, (int64_t[]){oh, ow, c});
}

#define IMAGE_OR_SEQUENCE "(batch, height, width, channels) or (batch, steps, channels)"

/* The node of a convolution-like op (Conv2D, its depthwise and transposed
 * forms): inputs x, kernel w, bias b or NULL; output (oh, ow, oc) per
 * sample: the descriptor's (d.oh, d.ow, d.oc), except for the transposed form,
 * whose descriptor is the forward convolution it reverses. */
static fl_node *conv_node_shaped(fl_graph *g, fl_op op, const char *name, fl_node *x, fl_node *w, fl_node *b,
                                 fl_conv_desc d, int act, int64_t oh, int64_t ow, int64_t oc) {
    d.act = act;
    d.has_bias = b != NULL;
    fl_node *n = fl_graph_new_node(g, op, name);
    if (!n) return NULL;
    n->nin = b ? 3 : 2;
    n->in[0] = x; n->in[1] = w; n->in[2] = b;
    n->conv = d;
    n->act = act;
    if (!set_image_shape(g, n, x, oh, ow, oc)) return NULL;
    return n;
}

static fl_node *conv_node(fl_graph *g, fl_op op, const char *name, fl_node *x, fl_node *w, fl_node *b,
                          fl_conv_desc d, int act) {
    return conv_node_shaped(g, op, name, x, w, b, d, act, d.oh, d.ow, d.oc);
}

/* ---------------------------------------------------------- builders */

fl_node *fl_graph_input(fl_graph *g, const char *name, int ndim, const int64_t *sample_shape) {
    if (ndim < 1 || ndim > FL_MAX_DIMS - 1)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s': input has %d dimensions, expected 1 to %d", name, ndim,
                             FL_MAX_DIMS - 1);
    for (int i = 0; i < ndim; i++)
        if (sample_shape[i] <= 0)
            return fl_error_null(FL_ERR_SHAPE, "layer '%s': input dimension %d is %lld, expected > 0", name, i + 1,
                                 (long long)sample_shape[i]);
    fl_node *n = fl_graph_new_node(g, FL_OP_INPUT, name);
    if (n && !set_shape(g, n, true, ndim, sample_shape)) return NULL;
    return n;
}

fl_node *fl_graph_param(fl_graph *g, const char *name, int ndim, const int64_t *shape, bool trainable) {
    fl_node *n = fl_graph_new_node(g, FL_OP_PARAM, name);
    if (!n) return NULL;
    if (!set_shape(g, n, false, ndim, shape)) return NULL;
    n->trainable = trainable;
    size_t bytes = (size_t)fl_node_size(n) * sizeof(float); /* fits: set_shape checked it */
    int64_t need = (int64_t)bytes * (trainable ? 2 : 1), total, limit = fl_model_bytes_limit();
    if (!fl_add_checked(g->param_bytes, need, &g->param_bytes) ||
        !fl_add_checked(g->param_bytes, g->sample_bytes, &total) || total > limit) {
        char a[160], b[48], c[48];
        return fl_error_null(FL_ERR_NOMEM,
                             "layer '%s': a weight of shape %s takes %s%s; the model would need more than flynn's model "
                             "memory limit of %s (raise it with $FLYNN_MAX_MODEL_BYTES or fl_set_max_model_bytes)",
                             name, fl_shape_str(ndim, shape, a, sizeof a), fl_bytes_str(need, b, sizeof b),
                             trainable ? " with its gradient" : "", fl_bytes_str(limit, c, sizeof c));
    }
    n->val = fl_backend_alloc_zeroed(g->be, bytes);
    if (!n->val) return NULL;
    if (trainable) { /* (untouched pages where the backend can: a model that only predicts never writes it) */
        n->grad = fl_backend_alloc_zeroed(g->be, bytes);
        if (!n->grad) return NULL;
    }
    return n;
}

fl_node *fl_graph_dense(fl_graph *g, const char *name, fl_node *x, fl_node *w, fl_node *b, int act) {
    /* a kernel of more than 2 dims (MultiHeadAttention's (d, heads, key_dim)
     * and (heads, value_dim, d)) is the (k, n) matrix of the same bytes, k
     * the product of its first axes that equals x's features */
    int64_t k = x->shape[x->ndim - 1], kin = 1, units = 1;
    int split = 0;
    while (split < w->ndim - 1 && kin < k) kin *= w->shape[split++];
    for (int i = split; i < w->ndim; i++) units *= w->shape[i];
    if (w->ndim < 2 || kin != k) {
        char s[128];
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (Dense): input %s has %lld features on its last axis, kernel expects %lld",
                             name, sample_str(x, s, sizeof s), (long long)k, (long long)w->shape[0]);
    }
    if (b && fl_node_size(b) != units)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (Dense): bias has %lld values, expected %lld", name,
                             (long long)fl_node_size(b), (long long)units);
    fl_node *n = fl_graph_new_node(g, FL_OP_DENSE, name);
    if (!n) return NULL;
    n->nin = b ? 3 : 2;
    n->in[0] = x; n->in[1] = w; n->in[2] = b;
    int64_t s[FL_MAX_DIMS];
    for (int i = 1; i < x->ndim; i++) s[i - 1] = x->shape[i];
    s[x->ndim - 2] = units;
    if (!set_shape(g, n, true, x->ndim - 1, s)) return NULL;
    n->act = act;
    return n;
}

/* Output size along one axis; k is the kernel's extent, (taps - 1) *
 * dilation + 1 for a dilated kernel, as Keras sizes "same" padding. */
static int out_dim(int in, int k, int s, fl_padding pad, int *pad_before) {
    /* in 64 bits: in + s - 1 and (o - 1) * s + k overflow int for sizes near 2^31 */
    *pad_before = 0;
    if (s <= 0 || k <= 0) return 0;
    if (pad == FL_SAME) {
        int64_t o = ((int64_t)in + s - 1) / s;
        int64_t total = (o - 1) * s + k - in;
        if (total < 0) total = 0;
        *pad_before = (int)(total / 2); /* the extra row/col goes after, as TensorFlow/Keras */
        return (int)o;
    }
    return in < k ? 0 : (in - k) / s + 1;
}

/* Strides, dilation and the output size of a Conv2D-like op into d (whose
 * input and kernel sizes are set); a message naming the layer if they do
 * not fit. */
static fl_status conv_geometry(fl_conv_desc *d, const char *name, const char *what, int sh, int sw, int dh, int dw,
                               fl_padding pad) {
    if (sh <= 0 || sw <= 0 || dh <= 0 || dw <= 0)
        return fl_error(FL_ERR_INVALID_ARG, "layer '%s' (%s): strides %dx%d and dilation_rate %dx%d, expected > 0",
                        name, what, sh, sw, dh, dw);
    d->sh = sh; d->sw = sw;
    d->dil_h = dh; d->dil_w = dw;
    const int64_t eh = (int64_t)(d->kh - 1) * dh + 1, ew = (int64_t)(d->kw - 1) * dw + 1; /* dilated extent */
    if (eh > INT32_MAX || ew > INT32_MAX)
        return fl_error(FL_ERR_SHAPE, "layer '%s' (%s): the dilated kernel is %lldx%lld, too large", name, what,
                        (long long)eh, (long long)ew);
    d->oh = out_dim(d->h, (int)eh, sh, pad, &d->pt);
    d->ow = out_dim(d->w, (int)ew, sw, pad, &d->pl);
    if (d->oh <= 0 || d->ow <= 0) {
        if (dh == 1 && dw == 1)
            return fl_error(FL_ERR_SHAPE, "layer '%s' (%s): a %dx%d kernel does not fit the %dx%d input with padding "
                            "\"valid\"", name, what, d->kh, d->kw, d->h, d->w);
        return fl_error(FL_ERR_SHAPE, "layer '%s' (%s): a %dx%d kernel dilated %dx%d (extent %lldx%lld) does not fit "
                        "the %dx%d input with padding \"valid\"", name, what, d->kh, d->kw, dh, dw, (long long)eh,
                        (long long)ew, d->h, d->w);
    }
    return FL_OK;
}

fl_node *fl_graph_conv2d(fl_graph *g, const char *name, fl_node *x, fl_node *w, fl_node *b, int sh, int sw,
                         fl_padding pad, int act) {
    return fl_graph_conv2d_dilated(g, name, x, w, b, sh, sw, 1, 1, 1, pad, act);
}

fl_node *fl_graph_conv2d_dilated(fl_graph *g, const char *name, fl_node *x, fl_node *w, fl_node *b, int sh, int sw,
                                 int dh, int dw, int groups, fl_padding pad, int act) {
    char s[128];
    fl_conv_desc d = {0};
    const char *cls = x->ndim == 3 ? "Conv1D" : "Conv2D";
    if (!image_dims(x, &d.h, &d.w, &d.c))
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (Conv2D): input %s must be " IMAGE_OR_SEQUENCE, name,
                             sample_str(x, s, sizeof s));
    if (groups <= 0 || d.c % groups)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (%s): input has %d channels, not divisible by groups %d", name,
                             cls, d.c, groups);
    /* the kernel is (kh, kw, in/groups, out), or (kh, in/groups, out) for a
     * one-column image (Conv1D's kernel: the same bytes as (kh, 1, in, out)) */
    const int64_t cg = d.c / groups;
    if ((w->ndim != 4 && w->ndim != 3) || (x->ndim == 3 && w->ndim != 3))
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (%s): kernel %s, expected (kernel_size, in, out) for a "
                             "sequence, (kh, kw, in, out) for an image", name, cls,
                             fl_shape_str(w->ndim, w->shape, s, sizeof s));
    if (w->shape[w->ndim - 2] != cg)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (%s): input has %d channels (%lld per group of %d), "
                             "kernel expects %lld", name, cls, d.c, (long long)cg, groups,
                             (long long)w->shape[w->ndim - 2]);
    if (w->shape[w->ndim - 1] % groups)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (%s): %lld filters, not divisible by groups %d", name, cls,
                             (long long)w->shape[w->ndim - 1], groups);
    d.kh = (int)w->shape[0]; d.kw = w->ndim == 4 ? (int)w->shape[1] : 1; d.oc = (int)w->shape[w->ndim - 1];
    d.groups = groups;
    if (conv_geometry(&d, name, cls, sh, sw, dh, dw, pad)) return NULL;
    if (x->ndim == 3 && d.ow != 1)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (Conv1D): stride %d and dilation %d across the one column of "
                             "a sequence, expected 1", name, sw, dw);
    /* one input channel per group: a depthwise convolution (kernel (kh, kw,
     * 1, c*m) is the same bytes as the depthwise (kh, kw, c, m)) */
    if (groups > 1 && groups == d.c) {
        d.groups = 1;
        return conv_node(g, FL_OP_DEPTHWISE_CONV2D, name, x, w, b, d, act);
    }
    return conv_node(g, FL_OP_CONV2D, name, x, w, b, d, act);
}

fl_node *fl_graph_depthwise_conv2d(fl_graph *g, const char *name, fl_node *x, fl_node *w, fl_node *b, int sh, int sw,
                                   fl_padding pad, int act) {
    return fl_graph_depthwise_conv2d_dilated(g, name, x, w, b, sh, sw, 1, 1, pad, act);
}

fl_node *fl_graph_depthwise_conv2d_dilated(fl_graph *g, const char *name, fl_node *x, fl_node *w, fl_node *b, int sh,
                                           int sw, int dh, int dw, fl_padding pad, int act) {
    char s[128];
    if (x->ndim != 4)
        return fl_error_null(FL_ERR_SHAPE,
                             "layer '%s' (depthwise convolution): input %s must be (batch, height, width, channels)",
                             name, sample_str(x, s, sizeof s));
    if (w->ndim != 4 || w->shape[2] != x->shape[3])
        return fl_error_null(FL_ERR_SHAPE,
                             "layer '%s' (depthwise convolution): input has %lld channels, kernel expects %lld", name,
                             (long long)x->shape[3], (long long)(w->ndim == 4 ? w->shape[2] : -1));
    int64_t oc = w->shape[2] * w->shape[3]; /* each <= FL_MAX_DIM: no overflow */
    if (oc > FL_MAX_DIM)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (depthwise convolution): %lld channels x depth multiplier %lld "
                             "= %lld output channels, expected at most %lld", name, (long long)w->shape[2],
                             (long long)w->shape[3], (long long)oc, (long long)FL_MAX_DIM);
    if (b && (b->ndim != 1 || b->shape[0] != oc))
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (depthwise convolution): bias has %lld values, expected %lld",
                             name, (long long)b->shape[0], (long long)oc);
    fl_conv_desc d = {0};
    d.h = (int)x->shape[1]; d.w = (int)x->shape[2]; d.c = (int)x->shape[3];
    d.kh = (int)w->shape[0]; d.kw = (int)w->shape[1]; d.oc = (int)oc;
    if (conv_geometry(&d, name, "depthwise convolution", sh, sw, dh, dw, pad)) return NULL;
    return conv_node(g, FL_OP_DEPTHWISE_CONV2D, name, x, w, b, d, act);
}

fl_node *fl_graph_pool(fl_graph *g, const char *name, fl_op op, fl_node *x, int kh, int kw, int sh, int sw,
                       fl_padding pad) {
    char s[128];
    const char *cls = op == FL_OP_MAXPOOL ? (x->ndim == 3 ? "MaxPooling1D" : "MaxPooling2D")
                                          : (x->ndim == 3 ? "AveragePooling1D" : "AveragePooling2D");
    fl_conv_desc d = {0};
    if (!image_dims(x, &d.h, &d.w, &d.c) || (x->ndim == 3 && (kw != 1 || sw != 1)))
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (%s): input %s must be (batch, height, width, channels), or "
                             "(batch, steps, channels) with a window of one column", name, cls,
                             sample_str(x, s, sizeof s));
    d.oc = d.c;
    d.kh = kh; d.kw = kw; d.sh = sh; d.sw = sw;
    d.oh = out_dim(d.h, kh, sh, pad, &d.pt);
    d.ow = out_dim(d.w, kw, sw, pad, &d.pl);
    if (d.oh <= 0 || d.ow <= 0)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (%s): a %dx%d window does not fit the %dx%d input", name, cls,
                             kh, kw, d.h, d.w);
    fl_node *n = fl_graph_new_node(g, op, name);
    if (!n) return NULL;
    n->nin = 1;
    n->in[0] = x;
    n->conv = d;
    if (!set_image_shape(g, n, x, d.oh, d.ow, d.c)) return NULL;
    if (op == FL_OP_MAXPOOL) n->aux_per_sample = (size_t)d.oh * d.ow * d.c * sizeof(int32_t);
    return n;
}

fl_node *fl_graph_gap(fl_graph *g, const char *name, fl_node *x) {
    char s[128];
    if (x->ndim != 4)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (GlobalAveragePooling2D): input %s must be (batch, height, width, channels)",
                             name, sample_str(x, s, sizeof s));
    fl_node *n = fl_graph_new_node(g, FL_OP_GAP, name);
    if (!n) return NULL;
    n->nin = 1;
    n->in[0] = x;
    if (!set_shape(g, n, true, 1, &x->shape[3])) return NULL;
    return n;
}

fl_node *fl_graph_reshape(fl_graph *g, const char *name, fl_node *x, int ndim, const int64_t *sample_shape) {
    int64_t have = fl_node_sample_size(x), known = 1;
    int infer = -1;
    int64_t s[FL_MAX_DIMS];
    char a[128], b[128];
    if (ndim < 1 || ndim > FL_MAX_DIMS - 1)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (Reshape): target has %d dimensions, expected 1 to %d", name,
                             ndim, FL_MAX_DIMS - 1);
    for (int i = 0; i < ndim; i++) {
        s[i] = sample_shape[i];
        if (s[i] == -1) {
            if (infer >= 0)
                return fl_error_null(FL_ERR_SHAPE, "layer '%s' (Reshape): more than one -1 in the target shape", name);
            infer = i;
        } else if (s[i] <= 0) {
            return fl_error_null(FL_ERR_SHAPE, "layer '%s' (Reshape): target dimension %d is %lld", name, i,
                                 (long long)s[i]);
        } else if (!fl_mul_checked(known, s[i], &known)) {
            known = -1; /* overflows: more than any input holds */
        }
    }
    /* checked: [2^61 + 1, 8] must not wrap around to 8 values */
    int64_t total = -1;
    if (infer >= 0 && known > 0 && have % known == 0) s[infer] = have / known;
    if (infer >= 0 && s[infer] == -1) total = -1;
    else if (!fl_shape_numel_checked(ndim, s, &total)) total = -1;
    if (total != have || (infer >= 0 && s[infer] <= 0))
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (Reshape): cannot reshape input %s (%lld values per sample) into %s",
                             name, sample_str(x, a, sizeof a), (long long)have, fl_shape_str(ndim, sample_shape, b, sizeof b));
    fl_node *n = fl_graph_new_node(g, FL_OP_RESHAPE, name);
    if (!n) return NULL;
    n->nin = 1;
    n->in[0] = x;
    if (!set_shape(g, n, true, ndim, s)) return NULL;
    return n;
}

static bool make_bcast(const fl_node *x, const int64_t *p, fl_bcast_desc *d);

fl_node *fl_graph_dropout(fl_graph *g, const char *name, fl_node *x, float rate, uint64_t stream,
                          const int64_t *noise) {
    if (!(rate >= 0.0f && rate < 1.0f))
        return fl_error_null(FL_ERR_INVALID_ARG, "layer '%s' (Dropout): rate %g, expected 0 <= rate < 1", name, rate);
    fl_bcast_desc d;
    char a[128], b[128];
    if (noise && !make_bcast(x, noise, &d))
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (Dropout): noise_shape %s does not fit input %s (each entry "
                             "must be 1 or the input's size)", name, fl_shape_str(x->ndim - 1, noise, a, sizeof a),
                             sample_str(x, b, sizeof b));
    fl_node *n = like(g, FL_OP_DROPOUT, name, x);
    if (!n) return NULL;
    n->rate = rate;
    n->stream = stream;
    n->aux_per_sample = (size_t)fl_node_sample_size(x);
    if (noise) { /* per sample: ones, the scaled keep mask (floats), the mask bytes */
        n->mode = 1;
        n->bcast = d;
        n->aux_per_sample = (size_t)d.psize * (2 * sizeof(float) + 1);
    }
    return n;
}

fl_node *fl_graph_batchnorm(fl_graph *g, const char *name, fl_node *x, fl_node *gamma, fl_node *beta,
                            fl_node *mean, fl_node *var, float eps, float momentum) {
    fl_node *n = fl_graph_new_node(g, FL_OP_BATCHNORM, name);
    if (!n) return NULL;
    n->nin = 5;
    n->in[0] = x; n->in[1] = gamma; n->in[2] = beta; n->in[3] = mean; n->in[4] = var;
    if (!set_shape(g, n, true, x->ndim - 1, x->shape + 1)) return NULL;
    n->eps = eps;
    n->momentum = momentum;
    /* the batch's mean and 1/std; then the s, t, u of its dx when the convolution before it forms the dx
     * (fuse.conv_bn, src/ops/fuse.c); then the s, t the forward applied when it applies a ReLU too
     * (fuse.relu: the backward's mask) */
    n->aux_fixed = 7 * (size_t)x->shape[x->ndim - 1] * sizeof(float);
    return n;
}

void fl_graph_batchnorm_freeze(fl_node *n, bool frozen) {
    n->mode = frozen;
    /* frozen backward: aux_fixed's first c floats hold the zero mean it passes
     * the inference kernel, aux_per_sample a gradient that must be added */
    n->aux_per_sample = frozen ? (size_t)fl_node_sample_size(n) * sizeof(float) : 0;
}

fl_node *fl_graph_act(fl_graph *g, const char *name, fl_node *x, int act) {
    fl_node *n = like(g, FL_OP_ACT, name, x);
    if (!n) return NULL;
    n->act = act;
    return n;
}


/* Add or Multiply of two inputs whose shapes differ where one of them has
 * 1s (Keras broadcasts): x is the full one, b the broadcast one. */
static fl_node *bmerge(fl_graph *g, const char *name, fl_op op, fl_node *x, fl_node *b) {
    fl_bcast_desc d;
    if (x->ndim != b->ndim || !make_bcast(x, b->shape + 1, &d)) {
        if (x->ndim == b->ndim && make_bcast(b, x->shape + 1, &d)) return bmerge(g, name, op, b, x);
        return NULL;
    }
    fl_node *o = fl_graph_new_node(g, FL_OP_BMERGE, name);
    if (!o) return NULL;
    o->nin = 2;
    o->in[0] = x;
    o->in[1] = b;
    o->bcast = d;
    o->mode = op == FL_OP_MUL ? FL_BM_MUL : FL_BM_ADD;
    if (!set_shape(g, o, true, x->ndim - 1, x->shape + 1)) return NULL;
    return o;
}

fl_node *fl_graph_merge(fl_graph *g, const char *name, fl_op op, fl_node *const *xs, int n, int axis) {
    const char *cls = op == FL_OP_ADD ? "Add" : op == FL_OP_MUL ? "Multiply" : op == FL_OP_SUB ? "Subtract"
                    : op == FL_OP_AVG ? "Average" : op == FL_OP_MAX ? "Maximum" : op == FL_OP_MIN ? "Minimum"
                    : "Concatenate";
    char a[128], b[128];
    if (n < 2 || n > FL_NODE_MAX_IN)
        return fl_error_null(FL_ERR_INVALID_ARG, "layer '%s' (%s): %d inputs, expected 2 to %d", name, cls, n,
                             FL_NODE_MAX_IN);
    int nd = xs[0]->ndim;
    if (op == FL_OP_CONCAT) {
        if (axis < 0) axis += nd;
        if (axis < 1 || axis >= nd)
            return fl_error_null(FL_ERR_INVALID_ARG, "layer '%s' (Concatenate): axis %d is not a non-batch axis of %s",
                                 name, axis, sample_str(xs[0], a, sizeof a));
    }
    int64_t s[FL_MAX_DIMS];
    for (int i = 1; i < nd; i++) s[i - 1] = xs[0]->shape[i];
    for (int k = 1; k < n; k++) {
        bool ok = xs[k]->ndim == nd;
        for (int i = 1; ok && i < nd; i++) ok = xs[k]->shape[i] == xs[0]->shape[i] || (op == FL_OP_CONCAT && i == axis);
        if (!ok && n == 2 && (op == FL_OP_ADD || op == FL_OP_MUL)) {
            fl_node *o = bmerge(g, name, op, xs[0], xs[1]);
            if (o || fl_last_status() == FL_ERR_NOMEM) return o;
        }
        if (!ok)
            return fl_error_null(FL_ERR_SHAPE, "layer '%s' (%s): input %d has shape %s, input 0 has %s%s", name, cls, k,
                                 sample_str(xs[k], a, sizeof a), sample_str(xs[0], b, sizeof b),
                                 op == FL_OP_CONCAT ? " (they may differ only on the concatenation axis)" : "");
        if (op == FL_OP_CONCAT) s[axis - 1] += xs[k]->shape[axis];
    }
    fl_node *o = fl_graph_new_node(g, op, name);
    if (!o) return NULL;
    o->nin = n;
    for (int k = 0; k < n; k++) o->in[k] = xs[k];
    o->axis = axis;
    if (!set_shape(g, o, true, nd - 1, s)) return NULL;
    /* scratch: the product of the other inputs (Multiply), the max/min of the others (Maximum, Minimum) */
    if (op == FL_OP_MUL || ((op == FL_OP_MAX || op == FL_OP_MIN) && n > 2))
        o->aux_per_sample = (size_t)fl_node_sample_size(o) * sizeof(float);
    return o;
}

fl_node *fl_graph_pad2d(fl_graph *g, const char *name, fl_node *x, int top, int bottom, int left, int right) {
    char s[128];
    fl_conv_desc d = {0};
    if (!image_dims(x, &d.h, &d.w, &d.c) || (x->ndim == 3 && (left || right)))
        return fl_error_null(FL_ERR_SHAPE, "layer '%s': input %s must be (batch, height, width, channels), or "
                             "(batch, steps, channels) padded along its steps", name, sample_str(x, s, sizeof s));
    int64_t oh = (int64_t)d.h + top + bottom, ow = (int64_t)d.w + left + right;
    if (oh <= 0 || ow <= 0 || oh > INT32_MAX || ow > INT32_MAX)
        return fl_error_null(FL_ERR_SHAPE,
                             "layer '%s': padding ((%d, %d), (%d, %d)) turns the %dx%d input into %lldx%lld, "
                             "expected at least 1x1 (cropping more than the image?)",
                             name, top, bottom, left, right, d.h, d.w, (long long)oh, (long long)ow);
    fl_node *n = fl_graph_new_node(g, FL_OP_PAD2D, name);
    if (!n) return NULL;
    n->nin = 1;
    n->in[0] = x;
    d.oc = d.c;
    d.oh = (int)oh; d.ow = (int)ow;
    d.pt = top; d.pl = left;
    n->conv = d;
    if (!set_image_shape(g, n, x, oh, ow, d.c)) return NULL;
    return n;
}

fl_node *fl_graph_pact(fl_graph *g, const char *name, fl_node *x, fl_pact_desc p) {
    fl_node *n = like(g, FL_OP_PACT, name, x);
    if (!n) return NULL;
    n->pact = p;
    return n;
}

fl_node *fl_graph_softmax(fl_graph *g, const char *name, fl_node *x, int axis) {
    char s[128];
    int a = axis < 0 ? axis + x->ndim : axis;
    if (a < 1 || a >= x->ndim)
        return fl_error_null(FL_ERR_INVALID_ARG, "layer '%s' (Softmax): axis %d is not a non-batch axis of input %s",
                             name, axis, sample_str(x, s, sizeof s));
    if (a == x->ndim - 1) return fl_graph_act(g, name, x, FL_ACT_SOFTMAX);
    if (x->shape[a] > INT32_MAX)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (Softmax): axis %d has %lld values", name, axis,
                             (long long)x->shape[a]);
    fl_node *n = like(g, FL_OP_SOFTMAX, name, x);
    if (!n) return NULL;
    n->axis = a;
    return n;
}

/* The broadcast of a parameter of per-sample shape p (x's rank, 1 where it
 * is shared) over x's samples; dims of size 1 dropped, runs of kept or of
 * shared axes merged. False when p does not fit x. */
static bool make_bcast(const fl_node *x, const int64_t *p, fl_bcast_desc *d) {
    memset(d, 0, sizeof *d);
    int nd = x->ndim - 1;
    const int64_t *s = x->shape + 1;
    d->size = 1;
    d->psize = 1;
    for (int i = 0; i < nd; i++) {
        if (p[i] != s[i] && p[i] != 1) return false;
        d->size *= s[i];
        d->psize *= p[i];
    }
    /* from the last axis: sample stride, and parameter stride when kept */
    int64_t ss = 1, ps = 1;
    int k = 0;
    int64_t dim[FL_MAX_DIMS], sst[FL_MAX_DIMS], pst[FL_MAX_DIMS];
    for (int i = nd - 1; i >= 0; i--) {
        if (s[i] == 1) continue;
        bool kept = p[i] != 1;
        if (k > 0 && (pst[k - 1] != 0) == kept) {
            dim[k - 1] *= s[i]; /* extends the run: strides stay those of its innermost axis */
        } else {
            dim[k] = s[i]; sst[k] = ss; pst[k] = kept ? ps : 0;
            k++;
        }
        ss *= s[i];
        if (kept) ps *= p[i];
    }
    if (k == 0) { dim[0] = 1; sst[0] = 1; pst[0] = 0; k = 1; }
    d->ndim = k;
    for (int i = 0; i < k; i++) { /* outermost first */
        d->dim[i] = dim[k - 1 - i]; d->sstride[i] = sst[k - 1 - i]; d->pstride[i] = pst[k - 1 - i];
    }
    return true;
}

fl_node *fl_graph_prelu(fl_graph *g, const char *name, fl_node *x, fl_node *alpha) {
    char a[128], b[128];
    fl_bcast_desc d;
    if (alpha->ndim != x->ndim - 1 || !make_bcast(x, alpha->shape, &d))
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (PReLU): alpha of shape %s does not fit input %s", name,
                             fl_shape_str(alpha->ndim, alpha->shape, a, sizeof a), sample_str(x, b, sizeof b));
    fl_node *n = fl_graph_new_node(g, FL_OP_PRELU, name);
    if (!n) return NULL;
    n->nin = 2;
    n->in[0] = x; n->in[1] = alpha;
    if (!set_shape(g, n, true, x->ndim - 1, x->shape + 1)) return NULL;
    n->bcast = d;
    return n;
}

fl_node *fl_graph_normalize(fl_graph *g, const char *name, fl_node *x, fl_node *mean, fl_node *var, int axis,
                            bool invert) {
    char a[128];
    int nd = x->ndim - 1;
    if (axis < -1 || axis >= nd)
        return fl_error_null(FL_ERR_INVALID_ARG, "layer '%s' (Normalization): axis %d is not an axis of input %s",
                             name, axis + 1, sample_str(x, a, sizeof a));
    int64_t want = axis < 0 ? 1 : x->shape[axis + 1];
    if (fl_node_size(mean) != want || fl_node_size(var) != want)
        return fl_error_null(FL_ERR_SHAPE,
                             "layer '%s' (Normalization): mean and variance have %lld and %lld values, expected %lld "
                             "(input %s)", name, (long long)fl_node_size(mean), (long long)fl_node_size(var),
                             (long long)want, sample_str(x, a, sizeof a));
    int64_t p[FL_MAX_DIMS];
    for (int i = 0; i < nd; i++) p[i] = i == axis ? x->shape[i + 1] : 1;
    fl_node *n = fl_graph_new_node(g, FL_OP_NORMALIZE, name);
    if (!n) return NULL;
    n->nin = 3;
    n->in[0] = x; n->in[1] = mean; n->in[2] = var;
    if (!set_shape(g, n, true, nd, x->shape + 1)) return NULL;
    make_bcast(x, p, &n->bcast);
    n->invert = invert;
    return n;
}

/* The node of an NHWC image resized to oh x ow (UpSampling2D, Resizing). */
static fl_node *resize_node(fl_graph *g, const char *name, fl_node *x, int64_t oh, int64_t ow, bool bilinear) {
    fl_node *n = fl_graph_new_node(g, FL_OP_UPSAMPLE2D, name);
    if (!n) return NULL;
    n->nin = 1;
    n->in[0] = x;
    fl_conv_desc d = {0};
    d.h = (int)x->shape[1]; d.w = (int)x->shape[2]; d.c = (int)x->shape[3]; d.oc = d.c;
    d.oh = (int)oh; d.ow = (int)ow;
    n->conv = d;
    n->bilinear = bilinear;
    if (!set_shape(g, n, true, 3, (int64_t[]){oh, ow, d.c})) return NULL;
    return n;
}

fl_node *fl_graph_upsample2d(fl_graph *g, const char *name, fl_node *x, int sh, int sw, bool bilinear) {
    char s[128];
    if (x->ndim != 4)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (UpSampling2D): input %s must be (batch, height, width, channels)",
                             name, sample_str(x, s, sizeof s));
    int64_t oh = x->shape[1] * sh, ow = x->shape[2] * sw;
    if (sh <= 0 || sw <= 0 || oh > INT32_MAX || ow > INT32_MAX)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (UpSampling2D): size (%d, %d) on the %lldx%lld input, expected "
                             "factors > 0 and an output below 2^31 rows and columns", name, sh, sw,
                             (long long)x->shape[1], (long long)x->shape[2]);
    fl_node *n = resize_node(g, name, x, oh, ow, bilinear);
    if (n) { n->conv.sh = sh; n->conv.sw = sw; }
    return n;
}

fl_node *fl_graph_resize2d(fl_graph *g, const char *name, fl_node *x, int oh, int ow, bool bilinear) {
    char s[128];
    if (x->ndim != 4)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (Resizing): input %s must be (batch, height, width, channels)",
                             name, sample_str(x, s, sizeof s));
    if (oh <= 0 || ow <= 0)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (Resizing): output size %dx%d, expected > 0", name, oh, ow);
    return resize_node(g, name, x, oh, ow, bilinear);
}

/* Keras's deconv_output_length with output_padding None. */
static int64_t deconv_dim(int64_t in, int k, int s, fl_padding pad) {
    return pad == FL_SAME ? in * s : in * s + (k > s ? k - s : 0);
}

fl_node *fl_graph_conv2d_transpose(fl_graph *g, const char *name, fl_node *x, fl_node *w, fl_node *b, int sh, int sw,
                                   fl_padding pad, int act) {
    char s[128];
    if (x->ndim != 4)
        return fl_error_null(FL_ERR_SHAPE,
                             "layer '%s' (Conv2DTranspose): input %s must be (batch, height, width, channels)", name,
                             sample_str(x, s, sizeof s));
    if (w->ndim != 4 || w->shape[3] != x->shape[3])
        return fl_error_null(FL_ERR_SHAPE,
                             "layer '%s' (Conv2DTranspose): input has %lld channels, kernel (kh, kw, filters, in) "
                             "expects %lld", name, (long long)x->shape[3], (long long)w->shape[w->ndim - 1]);
    if (sh <= 0 || sw <= 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "layer '%s' (Conv2DTranspose): strides %dx%d", name, sh, sw);
    int64_t oh = deconv_dim(x->shape[1], (int)w->shape[0], sh, pad);
    int64_t ow = deconv_dim(x->shape[2], (int)w->shape[1], sw, pad);
    if (oh > INT32_MAX || ow > INT32_MAX)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (Conv2DTranspose): output %lldx%lld is too large", name,
                             (long long)oh, (long long)ow);
    /* the Conv2D whose data gradient this is: from the output back to the input */
    fl_conv_desc d = {0};
    d.h = (int)oh; d.w = (int)ow; d.c = (int)w->shape[2];
    d.kh = (int)w->shape[0]; d.kw = (int)w->shape[1]; d.oc = (int)x->shape[3];
    d.sh = sh; d.sw = sw;
    int ch = out_dim(d.h, d.kh, sh, pad, &d.pt), cw = out_dim(d.w, d.kw, sw, pad, &d.pl);
    d.oh = (int)x->shape[1]; d.ow = (int)x->shape[2];
    if (ch != d.oh || cw != d.ow) /* cannot happen with the lengths above; kept as a guard */
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (Conv2DTranspose): output %dx%d does not map back to %dx%d",
                             name, d.h, d.w, d.oh, d.ow);
    return conv_node_shaped(g, FL_OP_CONV2D_TRANSPOSE, name, x, w, b, d, act, oh, ow, d.c);
}

fl_node *fl_graph_permute(fl_graph *g, const char *name, fl_node *x, const int *dims) {
    char s[128];
    int nd = x->ndim - 1;
    bool seen[FL_MAX_DIMS] = {0}, ok = nd >= 1;
    for (int i = 0; ok && i < nd; i++) {
        ok = dims[i] >= 0 && dims[i] < nd && !seen[dims[i]];
        if (ok) seen[dims[i]] = true;
    }
    if (!ok)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (Permute): dims are not a permutation of the %d axes of input %s",
                             name, nd, sample_str(x, s, sizeof s));
    fl_node *n = fl_graph_new_node(g, FL_OP_PERMUTE, name);
    if (!n) return NULL;
    n->nin = 1;
    n->in[0] = x;
    int64_t shape[FL_MAX_DIMS];
    n->perm[0] = 0;
    for (int i = 0; i < nd; i++) {
        n->perm[i + 1] = dims[i] + 1;
        shape[i] = x->shape[dims[i] + 1];
    }
    if (!set_shape(g, n, true, nd, shape)) return NULL;
    return n;
}

/* Concatenation as 2-d blocks: rows = product of dims before axis. */
static void concat_geom(const fl_node *x, int axis, int64_t *rows, int64_t *cols) {
    *rows = 1;
    for (int i = 0; i < axis; i++) *rows *= x->shape[i];
    *cols = fl_node_size(x) / *rows;
}

/* ------------------------------------------------------ shared helpers */

static int64_t rows_of(const fl_node *n) { return fl_node_size(n) / n->shape[n->ndim - 1]; }








/* The node whose value convolution n reads: its input, or the input of the padding it takes */
static const fl_node *conv_src(const fl_graph *g, const fl_node *n) {
    const fl_node *p = n->fuse.pad;
    return p ? p->in[0] : n->in[0];
}

/* ---------------------------------------------------- gradient helpers */

/* The gradient buffer of input k, or NULL if it needs none; *beta says
 * whether to add (another consumer already wrote it). */
static float *in_grad(fl_node *n, int k, float *beta) {
    fl_node *x = n->in[k];
    if (!x || !x->needs_grad) return NULL;
    *beta = x->grad_ready ? 1.0f : 0.0f;
    return x->grad;
}

static void mark(fl_node *n, int k) {
    if (n->in[k] && n->in[k]->needs_grad) n->in[k]->grad_ready = true;
}

/* The node whose input's gradient convolution n's backward writes: n, or the padding n takes (which is left
 * unmarked, so that its own backward is skipped) */
static fl_node *dx_node(const fl_graph *g, fl_node *n) {
    fl_node *p = n->fuse.pad;
    return p ? p : n;
}

/* Where the gradient of weight input k goes: the weight's own buffer, or,
 * when another call of a shared layer already wrote it, scratch space
 * (*off floats into n->gscratch) that weight_grads_add then adds in. */
static float *weight_grad(fl_node *n, int k, size_t *off) {
    fl_node *w = n->in[k];
    if (!w || !w->needs_grad) return NULL;
    if (!w->grad_ready) return w->grad;
    float *p = n->gscratch + *off;
    *off += (size_t)fl_node_size(w);
    return p;
}

static void weight_grads_add(const fl_backend *be, fl_node *n, int k0, int k1, float *const *dst) {
    for (int k = k0; k <= k1; k++)
        if (n->in[k] && dst[k - k0] && dst[k - k0] != n->in[k]->grad)
            be->accumulate(fl_node_size(n->in[k]), dst[k - k0], n->in[k]->grad, 1.0f);
}


/* --------------------------------------------- forward and backward
 *
 * One pair per op, side by side. Forward writes n->val from the inputs'
 * val; backward reads n->grad and writes (beta = 0) or adds (beta = 1) the
 * gradient of every input that needs one, then marks it ready. */

#define BATCH_DESC(d, src) fl_conv_desc d = (src); d.n = g->batch

static void dense_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    fl_node *x = n->in[0];
    fl_dense_desc d = {rows_of(x), (int)x->shape[x->ndim - 1], (int)n->shape[n->ndim - 1], n->act, n->nin > 2 && n->in[2]};
    g->be->dense_fwd(&d, x->val, n->in[1]->val, d.has_bias ? n->in[2]->val : NULL, n->val);
}

static void dense_backward(fl_graph *g, fl_node *n) {
    fl_node *x = n->in[0];
    float beta = 0.0f;
    fl_dense_desc d = {rows_of(x), (int)x->shape[x->ndim - 1], (int)n->shape[n->ndim - 1],
                       n->grad_is_preact ? FL_ACT_LINEAR : n->act, n->nin > 2 && n->in[2]};
    float *dx = in_grad(n, 0, &beta);
    size_t off = 0;
    float *dw[2] = {weight_grad(n, 1, &off), d.has_bias ? weight_grad(n, 2, &off) : NULL};
    g->be->dense_bwd(&d, x->val, n->in[1]->val, n->val, n->grad, dx, beta, dw[0], dw[1]);
    weight_grads_add(g->be, n, 1, 2, dw);
    mark(n, 0); mark(n, 1); mark(n, 2);
}

/* Multiply-adds per sample (cost.c: FLOPs are two per multiply-add): x (rows, k) times the kernel (k, units). */
static double dense_macs(const fl_node *n) {
    const fl_node *x = n->in[0];
    double k = (double)x->shape[x->ndim - 1];
    return (double)fl_node_sample_size(x) / k * k * (double)n->shape[n->ndim - 1];
}







/* The weights, bias and output of convolution n's forward: its own, or in
 * inference, where fuse.fold_bn allows and the batch pays for it, the
 * folded ones (in g->fold: the kernel, the bias, then zeros) and the
 * normalisation's output (d->has_bias set). */
static float *fold_bn(fl_graph *g, fl_node *n, bool training, fl_conv_desc *d, const float **w, const float **b) {
    *w = n->in[1]->val;
    *b = d->has_bias ? n->in[2]->val : NULL;
    n->bn_folded = 0;
    fl_node *bn = training || !g->fold ? NULL : n->fuse.fold_bn;
    if (!bn || g->fold_bytes < (size_t)n->fuse.fold_floats * sizeof(float) ||
        (g->fold_batch > 0 ? g->fold_batch : g->batch) * fl_node_sample_size(n) < 2 * fl_node_size(n->in[1]))
        return n->val;
    const int64_t oc = n->shape[n->ndim - 1], nw = fl_node_size(n->in[1]);
    float *fw = g->fold, *fb = fw + nw, *zero = fb + oc, *braw = zero + oc;
    const float *gamma = bn->in[1] ? bn->in[1]->val : NULL, *beta = bn->in[2] ? bn->in[2]->val : NULL;
    g->be->fill(oc, 0.0f, zero);
    fl_bn_desc kd = {nw / oc, (int)oc, bn->eps, bn->momentum, 0.0f}, bd = {1, (int)oc, bn->eps, bn->momentum, 0.0f};
    g->be->bn_fwd_infer(&kd, *w, gamma, NULL, zero, bn->in[4]->val, fw);
    if (*b) g->be->copy(braw, *b, (size_t)oc * sizeof(float));
    else g->be->fill(oc, 0.0f, braw);
    g->be->bn_fwd_infer(&bd, braw, gamma, beta, bn->in[3]->val, bn->in[4]->val, fb);
    *w = fw;
    *b = fb;
    d->has_bias = 1;
    n->bn_folded = 1;
    fl_node *an = n->fuse.fold_act; /* and the ReLU after it, in the epilogue */
    if (!an) return bn->val;
    d->act = n->fuse.fold_act_code;
    d->slope = n->fuse.fold_slope;
    n->bn_folded = 2;
    return an->val;
}


/* Inference: where fuse.res_add gives an Add and conv n writes its own value or the normalisation's it
 * folded in this step (d->act linear), the Add's sum and ReLU instead, with d->res and d->act set (the Add's
 * forward then does nothing); else y. */
static float *fold_res(fl_graph *g, fl_node *n, bool training, fl_conv_desc *d, float *y) {
    fl_node *add = n->fuse.res_add, *o = n->fuse.res_other, *out = n->fuse.res_out;
    if (!add) return y;
    const bool bn = add->in[add->in[0] == o ? 1 : 0] != n; /* the Add reads the normalisation n folds */
    add->res_fused = !training && d->act == FL_ACT_LINEAR && (bn ? n->bn_folded == 1 : n->bn_folded == 0);
    if (!add->res_fused) return y;
    d->res = o->val;
    d->act = n->fuse.res_act;
    return out->val;
}


/* What convolution n reads: its input's value, or where the normalisation before it left its affine and ReLU
 * to it in this step's forward (fuse.conv), that normalisation's input, with d->pre (its s and t) and
 * d->pre_act set. */
static const float *conv_input(const fl_graph *g, const fl_node *n, fl_conv_desc *d) {
    const fl_node *x = conv_src(g, n), *bn = x;
    if (x->op != FL_OP_BATCHNORM && x->nin == 1 && x->in[0]) bn = x->in[0];
    if (bn->op != FL_OP_BATCHNORM || !bn->affine_deferred) return x->val;
    if (bn->fuse.conv != n) return x->val; /* an Add's (fuse.add) */
    d->pre = (const float *)bn->aux + 5 * bn->shape[bn->ndim - 1];
    d->pre_act = bn->fuse.conv_act;
    return bn->in[0]->val;
}

static void conv2d_forward(fl_graph *g, fl_node *n, bool training) {
    BATCH_DESC(d, n->fuse.desc);
    fl_node *pool = n->fuse.pool;
    const float *xv = conv_input(g, n, &d);
    if (pool) { /* the pooling's output too, in one pass */
        BATCH_DESC(pd, pool->conv);
        g->be->conv2d_maxpool_fwd(&d, &pd, xv, n->in[1]->val, d.has_bias ? n->in[2]->val : NULL, n->val, pool->val,
                                  pool->aux, g->ws);
        return;
    }
    const float *w, *b;
    float *y = fold_res(g, n, training, &d, fold_bn(g, n, training, &d, &w, &b));
    g->be->conv2d_fwd(&d, xv, w, b, y, g->ws);
}

/* The ReLU (mask x > 0) fused after an Add (its fuse.relu) that convolution n reads and, being its first
 * reader, writes the gradient of last: n's backward may store that gradient masked (the backend's conv_dx_gate),
 * and the Add's backward then finds it masked (grad_is_preact) instead of masking it in a pass of its own. */
static fl_node *gated_relu(const fl_graph *g, const fl_node *n, const fl_conv_desc *d) {
    (void)g;
    return d->pre ? NULL : n->fuse.gate;
}

static void conv2d_backward(fl_graph *g, fl_node *n) {
    float beta = 0.0f;
    BATCH_DESC(d, n->fuse.desc);
    const float *xv = conv_input(g, n, &d);
    if (n->grad_is_preact) d.act = FL_ACT_LINEAR;
    fl_node *in = dx_node(g, n); /* n, or the padding it takes: the gradient goes to its input */
    float *dx = in_grad(in, 0, &beta);
    fl_node *gated = dx ? gated_relu(g, n, &d) : NULL;
    d.dx_gate = gated != NULL;
    size_t off = 0;
    float *dw[2] = {weight_grad(n, 1, &off), d.has_bias ? weight_grad(n, 2, &off) : NULL};
    fl_node *bn = n->fuse.conv_bn;
    if (bn) { /* dy is the normalisation's dx, formed here from its gradient (n->grad: scratch) */
        fl_node *relu = bn->relu_folded ? bn->fuse.relu : NULL;
        const int64_t c = n->shape[n->ndim - 1];
        fl_bn_grad bg = {.g = relu ? relu->grad : bn->grad,
                         .coef = relu ? (const float *)bn->aux + 5 * c : NULL,
                         .act = relu ? bn->fuse.relu_act : FL_ACT_LINEAR,
                         .slope = relu ? bn->fuse.relu_slope : 0.0f,
                         .mean = (const float *)bn->aux,
                         .stu = (const float *)bn->aux + 2 * c};
        g->be->conv2d_bn_bwd(&d, &bg, xv, n->in[1]->val, n->val, n->grad, dx, beta, dw[0], dw[1], g->ws);
    } else {
        g->be->conv2d_bwd(&d, xv, n->in[1]->val, n->val, n->grad, dx, beta, dw[0], dw[1], g->ws);
    }
    if (gated) gated->grad_is_preact = true;
    weight_grads_add(g->be, n, 1, 2, dw);
    mark(in, 0); mark(n, 1); mark(n, 2);
}

/* Per sample; a transposed convolution's desc is the Conv2D it is the data gradient of, so the same count. */
static double conv2d_macs(const fl_node *n) {
    const fl_conv_desc *d = &n->conv;
    int groups = d->groups > 1 ? d->groups : 1;
    return (double)d->oh * d->ow * d->oc * d->kh * d->kw * (double)(d->c / groups);
}

static void depthwise_forward(fl_graph *g, fl_node *n, bool training) {
    BATCH_DESC(d, n->fuse.desc);
    const float *xv = conv_input(g, n, &d);
    const float *w, *b;
    float *y = fold_bn(g, n, training, &d, &w, &b);
    g->be->depthwise_fwd(&d, xv, w, b, y);
}

static void depthwise_backward(fl_graph *g, fl_node *n) {
    float beta = 0.0f;
    BATCH_DESC(d, n->fuse.desc);
    if (n->grad_is_preact) d.act = FL_ACT_LINEAR;
    fl_node *in = dx_node(g, n);
    float *dx = in_grad(in, 0, &beta);
    size_t off = 0;
    float *dw[2] = {weight_grad(n, 1, &off), d.has_bias ? weight_grad(n, 2, &off) : NULL};
    g->be->depthwise_bwd(&d, conv_input(g, n, &d), n->in[1]->val, n->val, n->grad, dx, beta, dw[0], dw[1]);
    weight_grads_add(g->be, n, 1, 2, dw);
    mark(in, 0); mark(n, 1); mark(n, 2);
}

static double depthwise_macs(const fl_node *n) {
    const fl_conv_desc *d = &n->conv;
    return (double)d->oh * d->ow * d->oc * d->kh * d->kw;
}

static void maxpool_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    fl_node *x = n->in[0];
    if (x->op == FL_OP_CONV2D && x->fuse.pool == n) return; /* done with the convolution */
    BATCH_DESC(d, n->conv);
    g->be->maxpool_fwd(&d, x->val, n->val, n->aux);
}

static void maxpool_backward(fl_graph *g, fl_node *n) {
    fl_node *x = n->in[0];
    float beta = 0.0f;
    float *dx = in_grad(n, 0, &beta);
    if (!dx) return;
    BATCH_DESC(d, n->conv);
    if (x->op == FL_OP_CONV2D && x->fuse.pool == n && !x->grad_ready) {
        /* the convolution's backward, from this gradient: the
         * convolution's own dy is never written in full, and its
         * node is left unmarked so that backward skips it */
        BATCH_DESC(cd, x->fuse.desc);
        if (x->grad_is_preact) cd.act = FL_ACT_LINEAR;
        fl_node *xin = dx_node(g, x), *xi = xin->in[0];
        float cbeta = 0.0f;
        float *cdx = in_grad(xin, 0, &cbeta);
        /* x's input is a ReLU output that only x reads: mask its gradient here */
        int relu_mask = cdx && cbeta == 0.0f && xi->nconsumers == 1 && xi->act == FL_ACT_RELU &&
                        (xi->op == FL_OP_CONV2D || xi->op == FL_OP_DENSE);
        size_t off = 0;
        float *dw[2] = {weight_grad(x, 1, &off), cd.has_bias ? weight_grad(x, 2, &off) : NULL};
        g->be->conv2d_maxpool_bwd(&cd, &d, conv_input(g, x, &cd), x->in[1]->val, x->val, n->val, n->grad, n->aux,
                                  x->grad, cdx, cbeta, relu_mask, dw[0], dw[1], g->ws);
        weight_grads_add(g->be, x, 1, 2, dw);
        mark(xin, 0); mark(x, 1); mark(x, 2);
        if (relu_mask) xi->grad_is_preact = true;
        g->fused_conv_pool_bwd++;
        g->fused_relu_mask_bwd += relu_mask;
        return;
    }
    g->be->maxpool_bwd(&d, n->grad, n->aux, dx, beta);
    mark(n, 0);
}

static void avgpool_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    BATCH_DESC(d, n->conv);
    g->be->avgpool_fwd(&d, n->in[0]->val, n->val);
}

static void avgpool_backward(fl_graph *g, fl_node *n) {
    float beta = 0.0f;
    float *dx = in_grad(n, 0, &beta);
    if (!dx) return;
    BATCH_DESC(d, n->conv);
    g->be->avgpool_bwd(&d, n->grad, dx, beta);
    mark(n, 0);
}

static void gap_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    fl_node *x = n->in[0];
    g->be->gap_fwd(g->batch, x->shape[1] * x->shape[2], (int)x->shape[3], x->val, n->val);
}

static void gap_backward(fl_graph *g, fl_node *n) {
    fl_node *x = n->in[0];
    float beta = 0.0f;
    float *dx = in_grad(n, 0, &beta);
    if (!dx) return;
    g->be->gap_bwd(g->batch, x->shape[1] * x->shape[2], (int)x->shape[3], n->grad, dx, beta);
    mark(n, 0);
}

static void reshape_forward(fl_graph *g, fl_node *n, bool training) {
    (void)g; (void)n; (void)training; /* a view of its input */
}

static void reshape_backward(fl_graph *g, fl_node *n) {
    float beta = 0.0f;
    float *dx = in_grad(n, 0, &beta);
    if (!dx) return;
    if (!n->grad_view) g->be->accumulate(fl_node_size(n), n->grad, dx, beta);
    mark(n, 0);
}

/* Dropout with a noise shape (EfficientNet's (None, 1, 1, 1),
 * SpatialDropout2D): a keep mask of the noise shape, made by the ordinary
 * dropout kernel from ones, multiplies x with broadcasting. */
static float *noise_ones(fl_graph *g, fl_node *n) { (void)g; return (float *)n->aux; }
static float *noise_scaled(fl_graph *g, fl_node *n) { return (float *)n->aux + g->batch * n->bcast.psize; }
static uint8_t *noise_mask(fl_graph *g, fl_node *n) {
    return (uint8_t *)((float *)n->aux + 2 * g->batch * n->bcast.psize);
}

static void dropout_forward(fl_graph *g, fl_node *n, bool training) {
    fl_node *x = n->in[0];
    if (training && n->rate > 0.0f && n->mode) {
        fl_bcast_desc d = n->bcast;
        d.n = g->batch;
        int64_t k = g->batch * d.psize;
        g->be->fill(k, 1.0f, noise_ones(g, n));
        g->be->dropout_fwd(k, n->rate, g->seed, fl_dropout_stream(n->stream, g->step),
                           fl_graph_mask_offset(g, d.psize), noise_ones(g, n), noise_scaled(g, n), noise_mask(g, n));
        g->be->bmerge_fwd(FL_BM_MUL, &d, x->val, noise_scaled(g, n), n->val);
        return;
    }
    if (training && n->rate > 0.0f)
        g->be->dropout_fwd(fl_node_size(n), n->rate, g->seed, fl_dropout_stream(n->stream, g->step),
                           fl_graph_mask_offset(g, n->batched ? fl_node_sample_size(n) : 0), x->val, n->val, n->aux);
    else
        g->be->copy(n->val, x->val, (size_t)fl_node_size(n) * sizeof(float));
}

static void dropout_backward(fl_graph *g, fl_node *n) {
    float beta = 0.0f;
    float *dx = in_grad(n, 0, &beta);
    if (!dx) return;
    if (n->rate > 0.0f && n->mode) {
        fl_bcast_desc d = n->bcast;
        d.n = g->batch;
        g->be->bmerge_bwd(FL_BM_MUL, &d, n->in[0]->val, noise_scaled(g, n), n->grad, dx, beta, NULL, 0.0f);
    } else if (n->rate > 0.0f) g->be->dropout_bwd(fl_node_size(n), n->rate, n->aux, n->grad, dx, beta);
    else g->be->accumulate(fl_node_size(n), n->grad, dx, beta);
    mark(n, 0);
}





static void batchnorm_forward(fl_graph *g, fl_node *n, bool training) {
    fl_node *x = n->in[0];
    n->relu_folded = false;
    n->affine_deferred = false;
    if (!training && x->bn_folded) return; /* the convolution wrote it (fold_bn) */
    int c = (int)x->shape[x->ndim - 1];
    fl_bn_desc d = {rows_of(x), c, n->eps, n->momentum, 0.0f};
    const float *gamma = n->in[1] ? n->in[1]->val : NULL, *beta = n->in[2] ? n->in[2]->val : NULL;
    if (training && !n->mode) {
        float *save = n->aux; /* mean, then 1/std, of this batch */
        fl_node *relu = n->fuse.relu;
        /* the convolution after it reads x through s and t (and the ReLU): no value written */
        const bool into_conv = n->fuse.conv != NULL;
        if (relu) { /* the ReLU's value, and not this node's */
            d.slope = n->fuse.relu_slope;
            g->be->bn_fwd_train_act(&d, n->fuse.relu_act, x->val, gamma, beta, into_conv ? NULL : relu->val, save + 5 * c, save,
                                    save + c, n->in[3]->val, n->in[4]->val);
            n->relu_folded = true;
            n->affine_deferred = into_conv;
            return;
        }
        if (into_conv || n->fuse.add) { /* the statistics, and s, t where the reader reads them */
            g->be->bn_fwd_train_act(&d, FL_ACT_LINEAR, x->val, gamma, beta, NULL, save + 5 * c, save, save + c,
                                    n->in[3]->val, n->in[4]->val);
            n->affine_deferred = true;
            return;
        }
        g->be->bn_fwd_train(&d, x->val, gamma, beta, n->val, save, save + c, n->in[3]->val, n->in[4]->val);
    } else {
        g->be->bn_fwd_infer(&d, x->val, gamma, beta, n->in[3]->val, n->in[4]->val, n->val);
    }
}

static void batchnorm_backward(fl_graph *g, fl_node *n) {
    fl_node *x = n->in[0];
    int c = (int)x->shape[x->ndim - 1];
    fl_bn_desc d = {rows_of(x), c, n->eps, n->momentum, 0.0f};
    float beta = 0.0f;
    float *dx = in_grad(n, 0, &beta);
    if (n->mode) {
        /* frozen: y = gamma (x - moving_mean) / sqrt(moving_var + eps) + beta with
         * constant statistics, so dx = dy gamma / sqrt(moving_var + eps): the
         * inference kernel applied to dy with a zero mean and no beta. aux
         * holds c zeros, then room for dx when it must be added. */
        if (dx) {
            float *zero = n->aux, *tmp = beta != 0.0f ? zero + 2 * c : dx;
            g->be->fill(c, 0.0f, zero);
            g->be->bn_fwd_infer(&d, n->grad, n->in[1] ? n->in[1]->val : NULL, NULL, zero, n->in[4]->val, tmp);
            if (tmp != dx) g->be->accumulate(fl_node_size(n), tmp, dx, 1.0f);
        }
        mark(n, 0);
        return;
    }
    const float *save = n->aux;
    size_t off = 0;
    float *dgb[2] = {weight_grad(n, 1, &off), weight_grad(n, 2, &off)};
    fl_node *relu = n->relu_folded ? n->fuse.relu : NULL;
    const int act = relu ? n->fuse.relu_act : FL_ACT_LINEAR;
    d.slope = relu ? n->fuse.relu_slope : 0.0f;
    if (dx && x->fuse.conv_bn == n) {
        /* the sums, dgamma and dbeta; the convolution before forms dx from the coefficients (conv2d_bn_bwd) */
        g->be->bn_bwd_coef(&d, act, relu ? save + 5 * c : NULL, x->val, n->in[1] ? n->in[1]->val : NULL, save,
                           save + c, relu ? relu->grad : n->grad, dgb[0], dgb[1], (float *)n->aux + 2 * c);
    } else if (relu) /* the ReLU's backward left its gradient to be masked here */
        g->be->bn_bwd_act(&d, act, save + 5 * c, x->val, n->in[1] ? n->in[1]->val : NULL, save, save + c, relu->grad,
                          dx, beta, dgb[0], dgb[1]);
    else
        g->be->bn_bwd(&d, x->val, n->in[1] ? n->in[1]->val : NULL, save, save + c, n->grad, dx, beta, dgb[0],
                      dgb[1]);
    weight_grads_add(g->be, n, 1, 2, dgb);
    mark(n, 0); mark(n, 1); mark(n, 2);
}

/* The activation that, in inference, a convolution's epilogue applied after the normalisation it folded; or
 * the Add before it applied as it added, or in training the normalisation before it (relu_folded) */
static bool folded_act(const fl_node *n, bool training) {
    const fl_node *x = n->in[0];
    return (!training && x->op == FL_OP_BATCHNORM && x->in[0]->bn_folded == 2) || x->relu_folded;
}

static void act_forward(fl_graph *g, fl_node *n, bool training) {
    if (folded_act(n, training)) return;
    g->be->act_fwd(n->act, rows_of(n), (int)n->shape[n->ndim - 1], n->in[0]->val, n->val);
}

static void act_backward(fl_graph *g, fl_node *n) {
    if (n->in[0]->relu_folded) { mark(n, 0); return; } /* the normalisation's or the Add's backward masks n->grad */
    float beta = 0.0f;
    float *dx = in_grad(n, 0, &beta);
    if (!dx) return;
    if (n->grad_is_preact) g->be->accumulate(fl_node_size(n), n->grad, dx, beta);
    else g->be->act_bwd(n->act, rows_of(n), (int)n->shape[n->ndim - 1], n->in[0]->val, n->val, n->grad, dx, beta);
    mark(n, 0);
}



/* The first two inputs in one pass; the last one added with the ReLU that alone reads the sum
 * (fuse.relu), writing the ReLU's value. */
static void add_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    int64_t sz = fl_node_size(n);
    fl_node *relu = n->fuse.relu;
    int act = relu ? n->fuse.relu_act : FL_ACT_LINEAR;
    n->relu_folded = relu != NULL;
    if (n->res_fused && !training) return; /* the convolution before it added (its fuse.res_add) */
    if (n->nin < 2) {
        g->be->copy(n->val, n->in[0]->val, (size_t)sz * sizeof(float));
        return;
    }
    const int last = n->nin - 1;
    const float *a = n->in[0]->val;
    for (int k = 1; k < last; k++) { /* three or more: the sum so far in n->val */
        g->be->binary(FL_BIN_ADD, sz, a, n->in[k]->val, n->val);
        a = n->val;
    }
    int mode = !relu ? FL_BIN_ADD : act == FL_ACT_RELU6 ? FL_BIN_ADD_RELU6 : FL_BIN_ADD_RELU;
    for (int k = 0; k < 2 && n->nin == 2; k++) {
        const fl_node *bn = n->in[k];
        if (bn->op == FL_OP_BATCHNORM && bn->affine_deferred) { /* its value, formed here (fuse.add) */
            const int64_t c = bn->shape[bn->ndim - 1];
            g->be->add_affine(mode, sz / c, (int)c, bn->in[0]->val, (const float *)bn->aux + 5 * c,
                              n->in[1 - k]->val, relu ? relu->val : n->val);
            return;
        }
    }
    g->be->binary(mode, sz, a, n->in[last]->val, relu ? relu->val : n->val);
}

/* Each input's gradient is the Add's; with the ReLU fused, the ReLU's gradient masked by its value (y > 0, and
 * y < 6 for ReLU6, the same mask as the sum's), formed once in the first input's gradient written whole and
 * copied (or added) from there into the others. An input whose gradient the plan put in the buffer of another
 * input's (a normalisation's, plan.c grad_shared) finds it written. */
static void add_backward(fl_graph *g, fl_node *n) {
    fl_node *relu = n->relu_folded ? n->fuse.relu : NULL;
    int act = relu ? n->fuse.relu_act : FL_ACT_LINEAR;
    const int64_t sz = fl_node_size(n);
    /* the Add's gradient where it needs no mask: its own, or its ReLU's, masked by the convolution that wrote it
     * last (gated_relu) */
    const float *ready = !relu ? n->grad : relu->grad_is_preact ? relu->grad : NULL;
    const float *first = NULL; /* an input gradient that holds the masked gradient alone */
    const float *whole = NULL; /* the gradient written whole (not added into), and whose */
    const fl_node *whole_of = NULL;
    float beta = 0.0f;
    for (int k = 0; k < n->nin; k++) {
        float *d = in_grad(n, k, &beta);
        mark(n, k);
        if (!d) continue;
        if (d == whole && n->in[k] != whole_of) continue; /* shared, and written (Add(x, x) adds twice) */
        if (beta == 0.0f) whole = d, whole_of = n->in[k];
        if (ready) {
            /* the buffer the plan gave this input may be the Add's (or its ReLU's) own (plan.c) */
            if (d != ready || beta != 0.0f) g->be->accumulate(sz, ready, d, beta);
        } else if (first && d != first) {
            g->be->accumulate(sz, first, d, beta);
        } else {
            g->be->act_bwd(act, rows_of(n), (int)n->shape[n->ndim - 1], relu->val, relu->val, relu->grad, d, beta);
            first = beta == 0.0f ? d : NULL;
        }
    }
}

static void mul_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    int64_t sz = fl_node_size(n);
    g->be->mul(sz, n->in[0]->val, n->in[1]->val, n->val);
    for (int k = 2; k < n->nin; k++) g->be->mul(sz, n->val, n->in[k]->val, n->val);
}

static void mul_backward(fl_graph *g, fl_node *n) {
    /* d/dx_k = dy * prod_{j != k} x_j, formed in the scratch buffer */
    int64_t sz = fl_node_size(n);
    float *tmp = n->aux, beta = 0.0f;
    for (int k = 0; k < n->nin; k++) {
        float *d = in_grad(n, k, &beta);
        if (!d) continue;
        g->be->copy(tmp, n->grad, (size_t)sz * sizeof(float));
        for (int j = 0; j < n->nin; j++)
            if (j != k) g->be->mul(sz, tmp, n->in[j]->val, tmp);
        g->be->accumulate(sz, tmp, d, beta);
        mark(n, k);
    }
}

static void concat_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    int64_t rows, cout, cin, off = 0;
    concat_geom(n, n->axis, &rows, &cout);
    for (int k = 0; k < n->nin; k++) {
        concat_geom(n->in[k], n->axis, &rows, &cin);
        g->be->concat_fwd(rows, cin, cout, off, n->in[k]->val, n->val);
        off += cin;
    }
}

static void concat_backward(fl_graph *g, fl_node *n) {
    int64_t rows, cout, cin, off = 0;
    float beta = 0.0f;
    concat_geom(n, n->axis, &rows, &cout);
    for (int k = 0; k < n->nin; k++) {
        concat_geom(n->in[k], n->axis, &rows, &cin);
        float *d = in_grad(n, k, &beta);
        if (d) g->be->concat_bwd(rows, cin, cout, off, n->grad, d, beta);
        mark(n, k);
        off += cin;
    }
}

static void sub_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    g->be->binary(FL_BIN_SUB, fl_node_size(n), n->in[0]->val, n->in[1]->val, n->val);
}

static void sub_backward(fl_graph *g, fl_node *n) {
    float beta = 0.0f;
    float *d = in_grad(n, 0, &beta);
    if (d) g->be->accumulate(fl_node_size(n), n->grad, d, beta);
    mark(n, 0);
    d = in_grad(n, 1, &beta);
    if (d) g->be->axpby(fl_node_size(n), -1.0f, n->grad, beta, d);
    mark(n, 1);
}

static void avg_forward(fl_graph *g, fl_node *n, bool training) {
    add_forward(g, n, training);
    g->be->axpby(fl_node_size(n), 1.0f / (float)n->nin, n->val, 0.0f, n->val);
}

static void avg_backward(fl_graph *g, fl_node *n) {
    float beta = 0.0f;
    for (int k = 0; k < n->nin; k++) {
        float *d = in_grad(n, k, &beta);
        if (d) g->be->axpby(fl_node_size(n), 1.0f / (float)n->nin, n->grad, beta, d);
        mark(n, k);
    }
}

/* Maximum, Minimum: folded over the inputs in order, as Keras does. */
static void minmax_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    int mode = n->op == FL_OP_MAX ? FL_BIN_MAX : FL_BIN_MIN;
    int64_t sz = fl_node_size(n);
    g->be->binary(mode, sz, n->in[0]->val, n->in[1]->val, n->val);
    for (int k = 2; k < n->nin; k++) g->be->binary(mode, sz, n->val, n->in[k]->val, n->val);
}

/* Input k against the max (min) of the others: exact for two inputs
 * (JAX's rule, ties split the gradient), and for more wherever the winner
 * is unique. */
static void minmax_backward(fl_graph *g, fl_node *n) {
    int mode = n->op == FL_OP_MAX ? FL_BIN_MAX : FL_BIN_MIN;
    int64_t sz = fl_node_size(n);
    float beta = 0.0f;
    for (int k = 0; k < n->nin; k++) {
        float *d = in_grad(n, k, &beta);
        if (!d) continue;
        const float *other = n->in[1 - (k > 0 ? 1 : 0)]->val; /* two inputs: the other one */
        if (n->nin > 2) {
            float *tmp = n->aux;
            int first = k == 0 ? 1 : 0;
            g->be->copy(tmp, n->in[first]->val, (size_t)sz * sizeof(float));
            for (int j = first + 1; j < n->nin; j++)
                if (j != k) g->be->binary(mode, sz, tmp, n->in[j]->val, tmp);
            other = tmp;
        }
        g->be->minmax_grad(mode == FL_BIN_MAX, sz, n->in[k]->val, other, n->grad, d, beta);
        mark(n, k);
    }
}

static void bmerge_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    fl_bcast_desc d = n->bcast;
    d.n = g->batch;
    g->be->bmerge_fwd(n->mode, &d, n->in[0]->val, n->in[1]->val, n->val);
}

static void bmerge_backward(fl_graph *g, fl_node *n) {
    fl_bcast_desc d = n->bcast;
    d.n = g->batch;
    float bx = 0.0f, bb = 0.0f;
    float *dx = in_grad(n, 0, &bx), *db = in_grad(n, 1, &bb);
    if (dx || db) g->be->bmerge_bwd(n->mode, &d, n->in[0]->val, n->in[1]->val, n->grad, dx, bx, db, bb);
    mark(n, 0);
    mark(n, 1);
}

static void pad2d_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    if (n->fuse.pad_conv) return; /* the convolution after it pads as it reads */
    BATCH_DESC(d, n->conv);
    g->be->pad2d(&d, n->in[0]->val, n->val, 0.0f);
}

static void pad2d_backward(fl_graph *g, fl_node *n) {
    float beta = 0.0f;
    float *dx = in_grad(n, 0, &beta);
    if (!dx) return;
    /* dx = the window of dy that the input occupies: the same copy with
     * input and output swapped and the offsets negated */
    BATCH_DESC(f, n->conv);
    fl_conv_desc d = f;
    d.h = f.oh; d.w = f.ow; d.oh = f.h; d.ow = f.w;
    d.pt = -f.pt; d.pl = -f.pl;
    g->be->pad2d(&d, n->grad, dx, beta);
    mark(n, 0);
}

static void pact_forward(fl_graph *g, fl_node *n, bool training) {
    if (folded_act(n, training)) return;
    g->be->pact_fwd(&n->pact, fl_node_size(n), n->in[0]->val, n->val);
}

static void pact_backward(fl_graph *g, fl_node *n) {
    if (n->in[0]->relu_folded) { mark(n, 0); return; } /* the normalisation's or the Add's backward masks n->grad */
    float beta = 0.0f;
    float *dx = in_grad(n, 0, &beta);
    if (!dx) return;
    g->be->pact_bwd(&n->pact, fl_node_size(n), n->in[0]->val, n->val, n->grad, dx, beta);
    mark(n, 0);
}

/* x as [outer, c, inner] around the softmax axis */
static void softmax_geom(const fl_node *n, int64_t *outer, int *c, int64_t *inner) {
    *outer = 1; *inner = 1;
    for (int i = 0; i < n->axis; i++) *outer *= n->shape[i];
    for (int i = n->axis + 1; i < n->ndim; i++) *inner *= n->shape[i];
    *c = (int)n->shape[n->axis];
}

static void softmax_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    int64_t outer, inner;
    int c;
    softmax_geom(n, &outer, &c, &inner);
    g->be->softmax_axis_fwd(outer, c, inner, n->in[0]->val, n->val);
}

static void softmax_backward(fl_graph *g, fl_node *n) {
    float beta = 0.0f;
    float *dx = in_grad(n, 0, &beta);
    if (!dx) return;
    int64_t outer, inner;
    int c;
    softmax_geom(n, &outer, &c, &inner);
    g->be->softmax_axis_bwd(outer, c, inner, n->val, n->grad, dx, beta);
    mark(n, 0);
}

static void prelu_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    fl_bcast_desc d = n->bcast;
    d.n = g->batch;
    g->be->prelu_fwd(&d, n->in[0]->val, n->in[1]->val, n->val);
}

static void prelu_backward(fl_graph *g, fl_node *n) {
    float beta = 0.0f;
    fl_bcast_desc d = n->bcast;
    d.n = g->batch;
    float *dx = in_grad(n, 0, &beta);
    size_t off = 0;
    float *da[1] = {weight_grad(n, 1, &off)};
    if (dx || da[0]) g->be->prelu_bwd(&d, n->in[0]->val, n->in[1]->val, n->grad, dx, beta, da[0]);
    weight_grads_add(g->be, n, 1, 1, da);
    mark(n, 0); mark(n, 1);
}

static void normalize_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    fl_bcast_desc d = n->bcast;
    d.n = g->batch;
    g->be->normalize_fwd(&d, n->invert, n->in[0]->val, n->in[1]->val, n->in[2]->val, n->val);
}

static void normalize_backward(fl_graph *g, fl_node *n) {
    /* mean and variance are constants (Keras: non-trainable, no gradient) */
    float beta = 0.0f;
    float *dx = in_grad(n, 0, &beta);
    if (!dx) return;
    fl_bcast_desc d = n->bcast;
    d.n = g->batch;
    g->be->normalize_bwd(&d, n->invert, n->in[2]->val, n->grad, dx, beta);
    mark(n, 0);
}

static void upsample2d_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    BATCH_DESC(d, n->conv);
    g->be->upsample2d_fwd(&d, n->bilinear, n->in[0]->val, n->val);
}

static void upsample2d_backward(fl_graph *g, fl_node *n) {
    float beta = 0.0f;
    float *dx = in_grad(n, 0, &beta);
    if (!dx) return;
    BATCH_DESC(d, n->conv);
    g->be->upsample2d_bwd(&d, n->bilinear, n->grad, dx, beta);
    mark(n, 0);
}

/* n->conv is the Conv2D whose data gradient the transposed convolution is:
 * its input is this node's output, its output this node's input. */
static void conv2d_transpose_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    BATCH_DESC(d, n->conv);
    g->be->conv2d_transpose_fwd(&d, n->in[0]->val, n->in[1]->val, d.has_bias ? n->in[2]->val : NULL, n->val, g->ws);
}

static void conv2d_transpose_backward(fl_graph *g, fl_node *n) {
    float beta = 0.0f;
    BATCH_DESC(d, n->conv);
    if (n->grad_is_preact) d.act = FL_ACT_LINEAR;
    float *dx = in_grad(n, 0, &beta);
    size_t off = 0;
    float *dw[2] = {weight_grad(n, 1, &off), d.has_bias ? weight_grad(n, 2, &off) : NULL};
    g->be->conv2d_transpose_bwd(&d, n->in[0]->val, n->in[1]->val, n->val, n->grad, dx, beta, dw[0], dw[1], g->ws);
    weight_grads_add(g->be, n, 1, 2, dw);
    mark(n, 0); mark(n, 1); mark(n, 2);
}

static void permute_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    fl_node *x = n->in[0];
    g->be->permute(x->ndim, x->shape, n->perm, x->val, n->val, 0.0f);
}

static void permute_backward(fl_graph *g, fl_node *n) {
    float beta = 0.0f;
    float *dx = in_grad(n, 0, &beta);
    if (!dx) return;
    /* the inverse permutation, from the output's shape back to the input's */
    int inv[FL_MAX_DIMS];
    for (int i = 0; i < n->ndim; i++) inv[n->perm[i]] = i;
    g->be->permute(n->ndim, n->shape, inv, n->grad, dx, beta);
    mark(n, 0);
}

/* ------------------------------------------------------- the op table
 *
 * One row per op: its name, forward, backward, and the backend kernels it
 * calls (a backend that lacks one cannot run the op: fl_op_missing_kernel).
 * INPUT and PARAM hold data and run nothing. */

#define KERNEL(f) {#f, offsetof(fl_backend, f)}
typedef struct op_kernel { const char *name; size_t off; } op_kernel;
#define MAX_KERNELS 8

typedef struct fl_op_def {
    const char *name;
    void (*forward)(fl_graph *g, fl_node *n, bool training);
    void (*backward)(fl_graph *g, fl_node *n);
    op_kernel kernels[MAX_KERNELS];
    /* inputs 1..weights are weights: a shared layer's later calls write their gradients to scratch first
     * (fl_graph_finalize reads it as node->weight_inputs) */
    int weights;
    /* its backward takes the gradient of its fused activation's input (grad_is_preact): the loss may hand it
     * p - y for a sigmoid or softmax output (train.c's loss_input) */
    bool preact_grad;
    /* multiply-adds per sample of its forward (cost.c; NULL: none counted), and of its backward given which
     * nodes need a gradient (NULL: the weight's gradient if in[1] needs one, the input's if in[0] does) */
    double (*macs)(const fl_node *n);
    double (*backward_macs)(const fl_node *n, const bool *need, double macs);
} fl_op_def;

static const fl_op_def op_table[FL_OP_COUNT] = {
    [FL_OP_INPUT] = {"input", NULL, NULL, {{0}}},
    [FL_OP_PARAM] = {"param", NULL, NULL, {{0}}},
    [FL_OP_DENSE] = {"dense", dense_forward, dense_backward, {KERNEL(dense_fwd), KERNEL(dense_bwd)}, .weights = 2,
                     .preact_grad = true, .macs = dense_macs},
    [FL_OP_CONV2D] = {"conv2d", conv2d_forward, conv2d_backward,
                      {KERNEL(conv_workspace), KERNEL(conv2d_fwd), KERNEL(conv2d_bwd)}, .weights = 2, .preact_grad = true,
                      .macs = conv2d_macs},
    [FL_OP_MAXPOOL] = {"max_pool2d", maxpool_forward, maxpool_backward, {KERNEL(maxpool_fwd), KERNEL(maxpool_bwd)}},
    [FL_OP_AVGPOOL] = {"avg_pool2d", avgpool_forward, avgpool_backward, {KERNEL(avgpool_fwd), KERNEL(avgpool_bwd)}},
    [FL_OP_GAP] = {"global_avg_pool2d", gap_forward, gap_backward, {KERNEL(gap_fwd), KERNEL(gap_bwd)}},
    [FL_OP_RESHAPE] = {"reshape", reshape_forward, reshape_backward, {KERNEL(accumulate)}},
    [FL_OP_DROPOUT] = {"dropout", dropout_forward, dropout_backward,
                       {KERNEL(dropout_fwd), KERNEL(dropout_bwd), KERNEL(copy), KERNEL(accumulate), KERNEL(fill),
                        KERNEL(bmerge_fwd), KERNEL(bmerge_bwd)}},
    [FL_OP_BATCHNORM] = {"batch_norm", batchnorm_forward, batchnorm_backward,
                         {KERNEL(bn_fwd_train), KERNEL(bn_fwd_infer), KERNEL(bn_bwd), KERNEL(fill), KERNEL(accumulate)},
                         .weights = 2},
    [FL_OP_ACT] = {"activation", act_forward, act_backward, {KERNEL(act_fwd), KERNEL(act_bwd), KERNEL(accumulate)},
                   .preact_grad = true},
    [FL_OP_ADD] = {"add", add_forward, add_backward, {KERNEL(copy), KERNEL(binary), KERNEL(accumulate)}},
    [FL_OP_MUL] = {"multiply", mul_forward, mul_backward, {KERNEL(mul), KERNEL(copy), KERNEL(accumulate)}},
    [FL_OP_CONCAT] = {"concatenate", concat_forward, concat_backward, {KERNEL(concat_fwd), KERNEL(concat_bwd)}},
    [FL_OP_PAD2D] = {"pad2d", pad2d_forward, pad2d_backward, {KERNEL(pad2d)}},
    [FL_OP_BMERGE] = {"broadcast_merge", bmerge_forward, bmerge_backward, {KERNEL(bmerge_fwd), KERNEL(bmerge_bwd)}},
    [FL_OP_SUB] = {"subtract", sub_forward, sub_backward, {KERNEL(binary), KERNEL(axpby), KERNEL(accumulate)}},
    [FL_OP_AVG] = {"average", avg_forward, avg_backward, {KERNEL(copy), KERNEL(accumulate), KERNEL(axpby)}},
    [FL_OP_MAX] = {"maximum", minmax_forward, minmax_backward, {KERNEL(binary), KERNEL(minmax_grad), KERNEL(copy)}},
    [FL_OP_MIN] = {"minimum", minmax_forward, minmax_backward, {KERNEL(binary), KERNEL(minmax_grad), KERNEL(copy)}},
    [FL_OP_PACT] = {"param_activation", pact_forward, pact_backward, {KERNEL(pact_fwd), KERNEL(pact_bwd)}},
    [FL_OP_SOFTMAX] = {"softmax_axis", softmax_forward, softmax_backward,
                       {KERNEL(softmax_axis_fwd), KERNEL(softmax_axis_bwd)}},
    [FL_OP_PRELU] = {"prelu", prelu_forward, prelu_backward, {KERNEL(prelu_fwd), KERNEL(prelu_bwd), KERNEL(accumulate)},
                     .weights = 2},
    [FL_OP_NORMALIZE] = {"normalize", normalize_forward, normalize_backward,
                         {KERNEL(normalize_fwd), KERNEL(normalize_bwd)}},
    [FL_OP_DEPTHWISE_CONV2D] = {"depthwise_conv2d", depthwise_forward, depthwise_backward,
                                {KERNEL(depthwise_fwd), KERNEL(depthwise_bwd)}, .weights = 2, .macs = depthwise_macs},
    [FL_OP_UPSAMPLE2D] = {"upsample2d", upsample2d_forward, upsample2d_backward,
                          {KERNEL(upsample2d_fwd), KERNEL(upsample2d_bwd)}},
    [FL_OP_CONV2D_TRANSPOSE] = {"conv2d_transpose", conv2d_transpose_forward, conv2d_transpose_backward,
                                {KERNEL(conv_workspace), KERNEL(conv2d_transpose_fwd), KERNEL(conv2d_transpose_bwd)},
                                .weights = 2, .preact_grad = true, .macs = conv2d_macs},
    [FL_OP_PERMUTE] = {"permute", permute_forward, permute_backward, {KERNEL(permute)}},
    [FL_OP_LAYERNORM] = {"layer_norm", fl_layernorm_forward, fl_layernorm_backward,
                         {KERNEL(layernorm_fwd), KERNEL(layernorm_bwd)}},
    [FL_OP_ATTENTION] = {"attention", fl_attention_forward, fl_attention_backward,
                         {KERNEL(gemm_batched), KERNEL(attn_softmax_fwd), KERNEL(attn_softmax_bwd),
                          KERNEL(dropout_fwd), KERNEL(dropout_bwd), KERNEL(scalar_mul_fwd), KERNEL(scalar_mul_bwd),
                          KERNEL(attn_concat_fwd)},
                         .macs = fl_attention_macs, .backward_macs = fl_attention_backward_macs},
    [FL_OP_REPEAT] = {"repeat", fl_repeat_forward, fl_repeat_backward, {KERNEL(concat_fwd), KERNEL(concat_bwd)}},
    [FL_OP_RNN] = {"rnn", fl_op_rnn_forward, fl_op_rnn_backward, {KERNEL(rnn_fwd), KERNEL(rnn_bwd), KERNEL(accumulate), KERNEL(fill), KERNEL(dropout_fwd)},
                   .weights = 3, .macs = fl_op_rnn_macs, .backward_macs = fl_op_rnn_backward_macs},
    [FL_OP_EMBEDDING] = {"embedding", fl_op_embedding_forward, fl_op_embedding_backward,
                         {KERNEL(embedding_fwd), KERNEL(embedding_bwd)}, .weights = 2},
    [FL_OP_SEQ_MASK] = {"sequence_mask", fl_op_seq_mask_forward, NULL, {KERNEL(seq_mask)}},
    [FL_OP_MASKED_GAP1D] = {"masked_global_avg_pool1d", fl_op_masked_gap1d_forward, fl_op_masked_gap1d_backward,
                            {KERNEL(masked_gap1d_fwd), KERNEL(masked_gap1d_bwd)}},
    [FL_OP_RNN_STATE] = {"rnn_state", fl_op_rnn_state_forward, fl_op_rnn_state_backward, {KERNEL(zero)}},
};

/* the helpers above, for the ops in other files (ops_internal.h) */
bool fl_op_set_shape(fl_graph *g, fl_node *n, bool batched, int ndim, const int64_t *sample) {
    return set_shape(g, n, batched, ndim, sample);
}
bool fl_graph_set_shape(fl_graph *g, fl_node *n, int ndim, const int64_t *sample) {
    return set_shape(g, n, true, ndim, sample);
}
float *fl_op_in_grad(fl_node *n, int k, float *beta) { return in_grad(n, k, beta); }
void fl_op_mark(fl_node *n, int k) { mark(n, k); }
float *fl_op_weight_grad(fl_node *n, int k, size_t *off) { return weight_grad(n, k, off); }
void fl_op_weight_grads_add(const fl_backend *be, fl_node *n, int k0, int k1, float *const *dst) {
    weight_grads_add(be, n, k0, k1, dst);
}

const char *fl_op_name(fl_op op) { return (unsigned)op < FL_OP_COUNT && op_table[op].name ? op_table[op].name : "?"; }

bool fl_op_preact_grad(fl_op op) { return (unsigned)op < FL_OP_COUNT && op_table[op].preact_grad; }

#define NEEDS(node) ((node) && need[(node)->id])

void fl_op_macs(const fl_node *n, const bool *need, double *forward, double *backward) {
    const fl_op_def *row = (unsigned)n->op < FL_OP_COUNT ? &op_table[n->op] : NULL;
    const double f = row && row->macs ? row->macs(n) : 0;
    *forward = f;
    if (f == 0) *backward = 0;
    else if (row->backward_macs) *backward = row->backward_macs(n, need, f);
    else *backward = (NEEDS(n->in[1]) ? f : 0) + (NEEDS(n->in[0]) ? f : 0); /* the weight's, the input's gradient */
}

/* Every op constructor makes its node here: appended to g in topological order. */
fl_node *fl_graph_new_node(fl_graph *g, fl_op op, const char *name) {
    fl_node *n = fl_calloc(1, sizeof *n, "graph node");
    if (!n) return NULL;
    n->op = op;
    n->id = g->n;
    n->name = name;
    n->op_name = fl_op_name(op);
    n->weight_inputs = (unsigned)op < FL_OP_COUNT ? op_table[op].weights : 0;
    if (fl_graph_append(g, n) != FL_OK) {
        free(n);
        return NULL;
    }
    return n;
}

void fl_op_forward(fl_graph *g, fl_node *n, bool training) {
    if (op_table[n->op].forward) op_table[n->op].forward(g, n, training);
}

void fl_op_backward(fl_graph *g, fl_node *n) {
    if (op_table[n->op].backward) op_table[n->op].backward(g, n);
}

/* the entries training needs beyond its ops' own: the loss, the metrics and their sums, the optimizer */
const char *fl_backend_missing_training_kernel(const fl_backend *be) {
    static const op_kernel need[] = {KERNEL(loss), KERNEL(metric), KERNEL(sum_into), KERNEL(optimizer_step)};
    for (size_t k = 0; k < sizeof need / sizeof need[0]; k++)
        if (!*(void *const *)((const char *)be + need[k].off)) return need[k].name;
    return NULL;
}

const char *fl_op_missing_kernel(const fl_backend *be, fl_op op) {
    if ((unsigned)op >= FL_OP_COUNT) return "?";
    if (op != FL_OP_INPUT && op != FL_OP_PARAM && !op_table[op].forward) return "(no forward)";
    for (int k = 0; k < MAX_KERNELS && op_table[op].kernels[k].name; k++) {
        void *const *entry = (void *const *)((const char *)be + op_table[op].kernels[k].off);
        if (!*entry) return op_table[op].kernels[k].name;
    }
    return NULL;
}

