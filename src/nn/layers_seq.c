/*
 * layers_seq.c — the sequence layers, each constructor and its build together: Embedding, Masking and the
 * mask operations; LayerNormalization, MultiHeadAttention, Attention, RepeatVector, TimeDistributed; the
 * recurrent layers (SimpleRNN, LSTM, GRU) and Bidirectional. Their rows are FL_LAYER_KINDS's (nn.h); the
 * build table and the other families are layers.c's (layers_internal.h).
 */
#include "nn/layers_internal.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/math.h"
#include "ops/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ constructors */

fl_layer *fl_embedding_(fl_embedding_args a) {
    if (a.input_dim <= 0 || a.output_dim <= 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "Embedding: input_dim %d and output_dim %d, expected both > 0",
                             a.input_dim, a.output_dim);
    fl_layer *l = fl_layer_new(FL_L_EMBEDDING, a.name);
    if (l) { l->a.emb = a; l->a.emb.name = NULL; }
    return l;
}

fl_layer *fl_masking_(fl_masking_args a) {
    if (!isfinite(a.mask_value))
        return fl_error_null(FL_ERR_INVALID_ARG, "Masking: mask_value %g, expected a finite number", a.mask_value);
    fl_layer *l = fl_layer_new(FL_L_MASKING, a.name);
    if (l) { l->a.masking = a; l->a.masking.name = NULL; }
    return l;
}

fl_layer *fl_mask_op_layer(fl_layer_kind k, float c, const char *name) {
    if (!fl_layer_kind_is_op(k)) return fl_error_null(FL_ERR_INVALID_ARG, "fl_mask_op_layer: not a mask operation");
    if (!isfinite(c)) return fl_error_null(FL_ERR_INVALID_ARG, "NotEqual: the constant %g is not finite", c);
    fl_layer *l = fl_layer_new(k, name);
    if (l) l->a.not_equal = c;
    return l;
}

fl_layer *fl_layer_normalization_(fl_layer_normalization_args a) {
    if (a.epsilon == 0.0f) a.epsilon = 1e-3f;
    if (!a.axis && !a.axes[0]) a.axis = -1;
    if (!(a.epsilon > 0.0f))
        return fl_error_null(FL_ERR_INVALID_ARG, "LayerNormalization: epsilon %g, expected > 0", a.epsilon);
    for (int i = 0; i < FL_MAX_DIMS && a.axes[i]; i++)
        if (a.axes[i] < -(FL_MAX_DIMS - 1) || a.axes[i] >= FL_MAX_DIMS)
            return fl_error_null(FL_ERR_INVALID_ARG, "LayerNormalization: axis %d is out of range", a.axes[i]);
    fl_layer *l = fl_layer_new(FL_L_LAYERNORM, a.name);
    if (l) { l->a.ln = a; l->a.ln.name = NULL; }
    return l;
}

fl_layer *fl_multi_head_attention_(fl_multi_head_attention_args a) {
    if (a.num_heads <= 0 || a.key_dim <= 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "MultiHeadAttention: num_heads %d and key_dim %d, expected > 0",
                             a.num_heads, a.key_dim);
    if (!a.value_dim) a.value_dim = a.key_dim;
    if (a.value_dim < 0 || a.output_shape < 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "MultiHeadAttention: value_dim %d and output_shape %d, expected > 0",
                             a.value_dim, a.output_shape);
    if (!(a.dropout >= 0.0f && a.dropout < 1.0f))
        return fl_error_null(FL_ERR_INVALID_ARG, "MultiHeadAttention: dropout %g, expected 0 <= dropout < 1", a.dropout);
    fl_layer *l = fl_layer_new(FL_L_MHA, a.name);
    if (l) { l->a.mha = a; l->a.mha.name = NULL; }
    return l;
}

fl_layer *fl_attention_layer_(fl_attention_args a) {
    if (!(a.dropout >= 0.0f && a.dropout < 1.0f))
        return fl_error_null(FL_ERR_INVALID_ARG, "Attention: dropout %g, expected 0 <= dropout < 1", a.dropout);
    if (a.score_mode && strcmp(a.score_mode, "dot") != 0 && strcmp(a.score_mode, "concat") != 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "Attention: score_mode \"%s\", expected \"dot\" or \"concat\"",
                             a.score_mode);
    a.score_concat = a.score_mode && strcmp(a.score_mode, "concat") == 0;
    a.score_mode = NULL;
    fl_layer *l = fl_layer_new(FL_L_ATTENTION, a.name);
    if (l) { l->a.att = a; l->a.att.name = NULL; }
    return l;
}

fl_layer *fl_repeat_vector_(int n, fl_name_args a) {
    if (n <= 0) return fl_error_null(FL_ERR_INVALID_ARG, "RepeatVector: n is %d, expected > 0", n);
    fl_layer *l = fl_layer_new(FL_L_REPEAT_VECTOR, a.name);
    if (l) l->a.repeat = n;
    return l;
}

fl_layer *fl_time_distributed_(fl_layer *inner, fl_name_args a) {
    if (!inner) return NULL; /* the inner constructor's message stands */
    if (fl_layer_kind_inputs(inner->kind) != FL_IN_ONE || inner->kind == FL_L_EMBEDDING) {
        fl_error(FL_ERR_UNSUPPORTED, "TimeDistributed(%s): flynn wraps layers of one float input (not %s)",
                 fl_layer_kind_class(inner->kind), fl_layer_kind_inputs(inner->kind) == FL_IN_ONE ? "Embedding, whose input holds "
                 "integers" : "merges, attention or inputs");
        fl_layer_free(inner);
        return NULL;
    }
    fl_layer *l = fl_layer_new(FL_L_TIME_DISTRIBUTED, a.name);
    if (!l) { fl_layer_free(inner); return NULL; }
    l->a.td.inner = inner;
    return l;
}

/* ------------------------------------------------------- recurrent layers */

static fl_layer *rnn_layer(fl_layer_kind k, fl_rnn_args a) {
    const char *cls = fl_layer_kind_class(k);
    if (a.units <= 0) return fl_error_null(FL_ERR_INVALID_ARG, "%s: units is %d, expected > 0", cls, a.units);
    if (a.activation_linear) a.activation = FL_LINEAR;
    else if (a.activation == FL_LINEAR) a.activation = FL_TANH;
    if (a.recurrent_linear) a.recurrent_activation = FL_LINEAR;
    else if (a.recurrent_activation == FL_LINEAR) a.recurrent_activation = FL_SIGMOID;
    if (fl_layer_check_act(cls, a.activation) || fl_layer_check_act(cls, a.recurrent_activation)) return NULL;
    if (!fl_act_grad_from_output((int)a.activation) || !fl_act_grad_from_output((int)a.recurrent_activation))
        return fl_error_null(FL_ERR_UNSUPPORTED,
                             "%s: activation '%s' / recurrent_activation '%s': flynn's recurrent cells take activations "
                             "whose derivative follows from their output (linear, relu, sigmoid, tanh, leaky_relu, elu, "
                             "relu6, hard_sigmoid, selu, softplus, softsign, exponential)",
                             cls, fl_activation_name(a.activation), fl_activation_name(a.recurrent_activation));
    if (!(a.dropout >= 0.0f && a.dropout < 1.0f))
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: dropout %g, expected 0 <= dropout < 1", cls, a.dropout);
    if (!(a.recurrent_dropout >= 0.0f && a.recurrent_dropout < 1.0f))
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: recurrent_dropout %g, expected 0 <= recurrent_dropout < 1", cls,
                             a.recurrent_dropout);
    if (a.stateful)
        return fl_error_null(FL_ERR_UNSUPPORTED, "%s: stateful=True is not supported (states are not kept between "
                             "batches)", cls);
    fl_layer *l = fl_layer_new(k, a.name);
    if (l) { l->a.rnn = a; l->a.rnn.name = NULL; }
    return l;
}
fl_layer *fl_simple_rnn_(fl_rnn_args a) { return rnn_layer(FL_L_SIMPLE_RNN, a); }
fl_layer *fl_lstm_(fl_rnn_args a) { return rnn_layer(FL_L_LSTM, a); }
fl_layer *fl_gru_(fl_rnn_args a) { return rnn_layer(FL_L_GRU, a); }


/* "prefix" + the layer's name (or its class's default base when unnamed)
 * without that prefix, as Keras names Bidirectional's layers */
static void prefixed_name(fl_layer *dst, const char *prefix, const fl_layer *src) {
    char base[sizeof dst->name];
    const char *n = src->user_named ? src->name : fl_layer_kind_base(src->kind);
    if (strncmp(n, prefix, strlen(prefix)) == 0) n += strlen(prefix);
    snprintf(base, sizeof base, "%s", n);
    snprintf(dst->name, sizeof dst->name, "%s%.*s", prefix, (int)(sizeof dst->name - 1 - strlen(prefix)), base);
    dst->user_named = true;
}

fl_layer *fl_bidirectional_(fl_layer *layer, fl_bidirectional_args a) {
    fl_layer *bwd = a.backward_layer;
    const char *why = NULL;
    char msg[512];
    if (!layer) {
        snprintf(msg, sizeof msg, "Bidirectional: the layer is NULL (%s)", fl_last_error());
        fl_layer_free(bwd);
        return fl_error_null(FL_ERR_INVALID_ARG, "%s", msg);
    }
    if (!fl_layer_is_rnn_kind(layer->kind) || (bwd && !fl_layer_is_rnn_kind(bwd->kind)))
        snprintf(msg, sizeof msg, "Bidirectional: %s is a %s; flynn wraps SimpleRNN, LSTM and GRU",
                 !fl_layer_is_rnn_kind(layer->kind) ? "the layer" : "backward_layer",
                 fl_layer_kind_class(!fl_layer_is_rnn_kind(layer->kind) ? layer->kind : bwd->kind)), why = msg;
    else if (bwd && bwd->a.rnn.return_sequences != layer->a.rnn.return_sequences)
        why = "Bidirectional: the forward and backward layers must agree on return_sequences";
    else if (bwd && bwd->a.rnn.go_backwards == layer->a.rnn.go_backwards)
        why = "Bidirectional: the forward and backward layers must have different go_backwards (Keras refuses "
              "them too)";
    else if (bwd && bwd->a.rnn.return_state != layer->a.rnn.return_state)
        why = "Bidirectional: the forward and backward layers must agree on return_state";
    else if ((unsigned)a.merge_mode > FL_MERGE_NONE)
        why = "Bidirectional: merge_mode is not an fl_merge_mode";
    if (why) {
        fl_error(FL_ERR_INVALID_ARG, "%s", why);
        fl_layer_free(layer);
        fl_layer_free(bwd);
        return NULL;
    }
    if (!bwd) {
        bwd = fl_layer_new(layer->kind, NULL);
        if (!bwd) { fl_layer_free(layer); return NULL; }
        bwd->a.rnn = layer->a.rnn;
        bwd->a.rnn.go_backwards = !layer->a.rnn.go_backwards; /* Keras: not layer.go_backwards */
        prefixed_name(bwd, "backward_", layer);
    } else if (!bwd->user_named) {
        snprintf(bwd->name, sizeof bwd->name, "%s", fl_layer_kind_base(bwd->kind));
        bwd->user_named = true;
    }
    fl_layer *l = fl_layer_new(FL_L_BIDIRECTIONAL, a.name);
    if (!l) { fl_layer_free(layer); fl_layer_free(bwd); return NULL; }
    prefixed_name(layer, "forward_", layer);
    l->a.bidi.fwd = layer;
    l->a.bidi.bwd = bwd;
    l->a.bidi.merge_mode = a.merge_mode;
    return l;
}

/* ------------------------------------------------------------------ builds */

/* LayerNormalization: Keras's axes (sorted, batch = 0) must be the trailing
 * ones; gamma and beta have their shape. */
fl_node *fl_build_layernorm(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_layer_normalization_args *a = &l->a.ln;
    fl_node *x = xs[0];
    char s[128];
    bool on[FL_MAX_DIMS] = {0};
    int naxes = 0;
    for (int i = 0; i < FL_MAX_DIMS && (i == 0 ? (a->axes[0] || a->axis) : a->axes[i]); i++) {
        int ax = a->axes[0] ? a->axes[i] : a->axis;
        int r = ax < 0 ? ax + x->ndim : ax;
        if (r < 1 || r >= x->ndim)
            return fl_error_null(FL_ERR_SHAPE, "layer '%s' (LayerNormalization): axis %d is not a non-batch axis of "
                                 "input %s", l->name, ax, fl_shape_str(x->ndim, x->shape, s, sizeof s));
        if (!on[r]) naxes++;
        on[r] = true;
        if (!a->axes[0]) break;
    }
    int64_t shape[FL_MAX_DIMS], c = 1;
    for (int i = 0; i < naxes; i++) {
        int r = x->ndim - naxes + i;
        if (!on[r])
            return fl_error_null(FL_ERR_UNSUPPORTED, "layer '%s' (LayerNormalization): flynn normalises the trailing "
                                 "axes only; the %d axes given are not the last %d of input %s", l->name, naxes, naxes,
                                 fl_shape_str(x->ndim, x->shape, s, sizeof s));
        shape[i] = x->shape[r];
        c *= shape[i];
    }
    fl_node *gm = NULL, *bt = NULL;
    if (!a->no_scale || a->rms_scaling) {
        gm = fl_layer_add_weight(l, g, "gamma", naxes, shape, true);
        if (!gm) return NULL;
    }
    if (!a->no_center && !a->rms_scaling) {
        bt = fl_layer_add_weight(l, g, "beta", naxes, shape, true);
        if (!bt) return NULL;
    }
    fl_node *y = fl_graph_layernorm(g, l->name, x, gm, bt, c, a->epsilon, a->rms_scaling);
    if (y) y->mask = x->mask;
    return y;
}

/* A weight of a Keras sub-layer: its sub-object in .keras files and index. */
static fl_node *sub_weight(fl_layer *l, fl_graph *g, const char *sub, int idx, const char *wname, int ndim,
                           const int64_t *shape) {
    fl_node *w = fl_layer_add_weight(l, g, wname, ndim, shape, true);
    if (w && l->ncalls == 0) { l->wsub[l->nw - 1] = sub; l->widx[l->nw - 1] = idx; }
    return w;
}

/* MultiHeadAttention on (query, value[, key[, attention_mask]]): Keras's
 * EinsumDense projections run as Dense ops on the kernels' bytes. */
fl_node *fl_build_mha(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    const fl_multi_head_attention_args *a = &l->a.mha;
    char s1[128], s2[128];
    if (nx > 4)
        return fl_error_null(FL_ERR_INVALID_ARG, "layer '%s' (MultiHeadAttention) takes query, value, key and "
                             "attention_mask, it was given %d inputs", l->name, nx);
    fl_node *query = xs[0], *value = xs[1], *key = nx > 2 ? xs[2] : xs[1], *amask = nx > 3 ? xs[3] : NULL;
    if (query->ndim != 3 || value->ndim != 3 || key->ndim != 3 || key->shape[1] != value->shape[1])
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (MultiHeadAttention): query %s and value %s must be (batch, "
                             "steps, features), key and value of the same steps (attention over other axes is not "
                             "supported)", l->name, fl_shape_str(query->ndim, query->shape, s1, sizeof s1),
                             fl_shape_str(value->ndim, value->shape, s2, sizeof s2));
    const int64_t H = a->num_heads, kd = a->key_dim, vd = a->value_dim;
    const int64_t out = a->output_shape ? a->output_shape : query->shape[2];
    fl_node *w[8] = {0};
    const bool bias = !a->no_bias;
    const char *names[8] = {"query/kernel", "query/bias", "key/kernel", "key/bias", "value/kernel", "value/bias",
                            "attention_output/kernel", "attention_output/bias"};
    const char *subs[4] = {"query_dense", "key_dense", "value_dense", "output_dense"};
    const int64_t kshape[4][3] = {{query->shape[2], H, kd}, {key->shape[2], H, kd}, {value->shape[2], H, vd},
                                  {H, vd, out}};
    for (int i = 0; i < 4; i++) {
        w[2 * i] = sub_weight(l, g, subs[i], 0, names[2 * i], 3, kshape[i]);
        if (!w[2 * i]) return NULL;
        if (bias) {
            w[2 * i + 1] = i < 3 ? sub_weight(l, g, subs[i], 1, names[2 * i + 1], 2, kshape[i] + 1)
                                 : sub_weight(l, g, subs[i], 1, names[2 * i + 1], 1, &out);
            if (!w[2 * i + 1]) return NULL;
        }
    }
    fl_node *q = fl_graph_dense(g, l->name, query, w[0], w[1], FL_ACT_LINEAR);
    fl_node *k = q ? fl_graph_dense(g, l->name, key, w[2], w[3], FL_ACT_LINEAR) : NULL;
    fl_node *v = k ? fl_graph_dense(g, l->name, value, w[4], w[5], FL_ACT_LINEAR) : NULL;
    if (!v) return NULL;
    /* Keras: the AND of the query, value and key masks, the attention mask and the causal mask */
    fl_node *vmask = value->mask;
    if (key != value && key->mask) {
        fl_node *two[2] = {value->mask, key->mask};
        vmask = vmask ? fl_graph_merge(g, l->name, FL_OP_MUL, two, 2, 0) : key->mask;
        if (!vmask) return NULL;
    }
    uint64_t stream = a->seed ? a->seed : (uint64_t)(l->index + 1) * 0x9E3779B97F4A7C15ull;
    fl_node *att = fl_graph_attention(g, l->name, q, k, v, query->mask, vmask, amask, (int)H,
                                      (float)(1.0 / sqrt((double)kd)), a->use_causal_mask, a->dropout, stream);
    /* Keras 3 (JAX) runs MultiHeadAttention without dropout as
     * jax.nn.dot_product_attention, whose fully masked rows are uniform;
     * with dropout, its Softmax layer, whose are 0 */
    if (att) att->attn.mask_mode = a->dropout > 0.0f ? 0 : 2;
    fl_node *y = att ? fl_graph_dense(g, l->name, att, w[6], w[7], FL_ACT_LINEAR) : NULL;
    if (y) y->mask = query->mask;
    return y;
}

/* Attention on (query, value[, key]): one head, the Attention layer's
 * masking; dot-product scores (scaled by a learned "scale" with use_scale)
 * or additive ones (score_mode "concat", weights "scale" with use_scale,
 * then "concat_score_weight", as Keras builds them). */
fl_node *fl_build_attention(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    const fl_attention_args *a = &l->a.att;
    if (nx > 3)
        return fl_error_null(FL_ERR_INVALID_ARG, "layer '%s' (Attention) takes [query, value] or [query, value, key], "
                             "it was given %d inputs", l->name, nx);
    fl_node *q = xs[0], *v = xs[1], *k = nx > 2 ? xs[2] : xs[1];
    uint64_t stream = a->seed ? a->seed : (uint64_t)(l->index + 1) * 0x9E3779B97F4A7C15ull;
    fl_node *sw = a->use_scale ? fl_layer_add_weight(l, g, "scale", 0, NULL, true) : NULL;
    fl_node *cw = a->score_concat ? fl_layer_add_weight(l, g, "concat_score_weight", 0, NULL, true) : NULL;
    if ((a->use_scale && !sw) || (a->score_concat && !cw)) return NULL;
    fl_node *y = fl_graph_attention(g, l->name, q, k, v, q->mask, v->mask, NULL, 1, 1.0f, a->use_causal_mask,
                                    a->dropout, stream);
    if (y && (sw || cw)) y = fl_graph_attention_scores(g, y, sw, cw);
    if (!y) return NULL;
    y->attn.mask_mode = 1;
    y->mask = q->mask;
    return y;
}

fl_node *fl_build_repeat_vector(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    return fl_graph_repeat(g, l->name, xs[0], l->a.repeat);
}

/* TimeDistributed: a layer that acts on the last axis (or element-wise)
 * runs once on the whole sequence; any other layer (Conv2D, pooling,
 * Flatten, a recurrent layer over an inner axis, BatchNormalization: Keras 3
 * takes its statistics per step and updates the moving ones step after
 * step) runs on each step in turn with shared weights, as Keras's per-step
 * loop does, the steps cut out
 * and stacked back with the cropping and concatenation ops. Its weights are
 * the outer layer's (the model's list holds the outer one), at "layer" in
 * .keras files and "inner_name/kernel" in legacy .h5 files. */

/* The wrapped layer on each step of x (batch, T, ...): step t is x viewed
 * as (batch, T, 1, S) cropped to row t; the outputs, viewed as (batch, 1, 1,
 * S'), are concatenated on that axis (16 at a time, then the groups). */
static fl_node *td_steps(fl_layer *l, fl_layer *in, fl_graph *g, fl_node *x) {
    const int64_t T = x->shape[1], S = fl_node_sample_size(x) / (T ? T : 1);
    char s[128];
    if (T < 1 || T > INT32_MAX / 2 || S > INT32_MAX)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (TimeDistributed): input %s has too many or no steps, or "
                             "steps over 2^31 values", l->name, fl_shape_str(x->ndim, x->shape, s, sizeof s));
    fl_node *x4 = fl_graph_reshape(g, l->name, x, 3, (int64_t[]){T, 1, S});
    fl_node **parts = x4 ? malloc((size_t)T * sizeof *parts) : NULL;
    if (!parts) return x4 ? fl_error_null(FL_ERR_NOMEM, "layer '%s' (TimeDistributed): out of memory", l->name) : NULL;
    const int ncalls = in->ncalls;
    int yd = 0;
    int64_t ys[FL_MAX_DIMS];
    fl_node *y = NULL;
    for (int64_t t = 0; t < T; t++) {
        fl_node *st = fl_graph_pad2d(g, l->name, x4, -(int)t, -(int)(T - 1 - t), 0, 0);
        st = st ? fl_graph_reshape(g, l->name, st, x->ndim - 2, x->shape + 2) : NULL;
        in->ncalls = ncalls > 0 || t > 0; /* the weights of the first step serve the others */
        fl_node *o = st ? fl_layer_kind_build(in->kind)(in, g, &st, 1) : NULL;
        if (!o) goto out;
        if (t == 0) {
            yd = o->ndim - 1;
            memcpy(ys, o->shape + 1, (size_t)yd * sizeof *ys);
        }
        if (fl_node_sample_size(o) > INT32_MAX) {
            fl_error(FL_ERR_SHAPE, "layer '%s' (TimeDistributed): a step's output %s is over 2^31 values", l->name,
                     fl_shape_str(o->ndim, o->shape, s, sizeof s));
            goto out;
        }
        parts[t] = fl_graph_reshape(g, l->name, o, 3, (int64_t[]){1, 1, fl_node_sample_size(o)});
        if (!parts[t]) goto out;
    }
    int64_t n = T;
    while (n > 1) { /* concatenations of up to 16 on the steps' axis */
        int64_t m = 0;
        for (int64_t i = 0; i < n; i += 16) {
            int k = (int)(n - i < 16 ? n - i : 16);
            parts[m] = k == 1 ? parts[i] : fl_graph_merge(g, l->name, FL_OP_CONCAT, parts + i, k, 1);
            if (!parts[m++]) goto out;
        }
        n = m;
    }
    int64_t shape[FL_MAX_DIMS];
    shape[0] = T;
    memcpy(shape + 1, ys, (size_t)yd * sizeof *ys);
    if (yd + 1 > FL_MAX_DIMS - 1) {
        fl_error(FL_ERR_SHAPE, "layer '%s' (TimeDistributed): the output would have over %d axes", l->name,
                 FL_MAX_DIMS - 1);
        goto out;
    }
    y = fl_graph_reshape(g, l->name, parts[0], yd + 1, shape);
out:
    in->ncalls = ncalls;
    free(parts);
    return y;
}

fl_node *fl_build_time_distributed(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    fl_layer *in = l->a.td.inner;
    char s[128];
    if (xs[0]->ndim < 3)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (TimeDistributed): input %s must be (batch, steps, ...)",
                             l->name, fl_shape_str(xs[0]->ndim, xs[0]->shape, s, sizeof s));
    if (in->kind == FL_L_LAYERNORM) { /* its axes count the per-step sample's: only negative ones carry over */
        bool pos = in->a.ln.axes[0] ? false : in->a.ln.axis > 0;
        for (int i = 0; i < FL_MAX_DIMS && in->a.ln.axes[i]; i++) pos |= in->a.ln.axes[i] > 0;
        if (pos)
            return fl_error_null(FL_ERR_UNSUPPORTED, "layer '%s' (TimeDistributed(LayerNormalization)): give the "
                                 "wrapped layer's axes from the end (-1), not from the start", l->name);
    }
    if (!in->name[0]) snprintf(in->name, sizeof in->name, "%s", fl_layer_kind_base(in->kind));
    in->index = l->index;
    in->ncalls = l->ncalls;
    bool whole = false;
    switch (in->kind) {
    case FL_L_DENSE: case FL_L_ACTIVATION: case FL_L_DROPOUT: case FL_L_RELU: case FL_L_LEAKY_RELU: case FL_L_ELU:
    case FL_L_LAYERNORM: case FL_L_RESCALING:
        whole = true;
        break;
    default:
        break;
    }
    fl_node *y = whole ? fl_layer_kind_build(in->kind)(in, g, xs, nx) : td_steps(l, in, g, xs[0]);
    if (!y) return NULL;
    if (l->ncalls == 0) {
        l->nw = in->nw;
        for (int i = 0; i < in->nw; i++) {
            l->w[i] = in->w[i];
            snprintf(l->a.td.wname[i], sizeof l->a.td.wname[i], "%s/%s", in->name, in->wname[i]);
            l->wname[i] = l->a.td.wname[i];
            l->wsub[i] = "layer";
            l->widx[i] = i;
        }
    }
    in->out = y;
    in->g = g;
    in->ncalls++;
    y->mask = xs[0]->mask;
    return y;
}

/* One recurrent layer's weights (added to owner: the layer itself, or the
 * Bidirectional that wraps it, which names them "forward/..." and
 * "backward/...") and its op on x. */
static fl_node *rnn_nodes(fl_layer *owner, const fl_layer *rl, int side, fl_graph *g, fl_node *x, fl_node *h0,
                          fl_node *c0, bool reverse_output) {
    static const char *wn[3][3] = {{"kernel", "recurrent_kernel", "bias"},
                                   {"forward/kernel", "forward/recurrent_kernel", "forward/bias"},
                                   {"backward/kernel", "backward/recurrent_kernel", "backward/bias"}};
    const fl_rnn_args *a = &rl->a.rnn;
    if (fl_layer_need_rank(owner, x, 3, "(batch, timesteps, features)")) return NULL;
    const int cell = rl->kind == FL_L_LSTM ? FL_RNN_LSTM : rl->kind == FL_L_GRU ? FL_RNN_GRU : FL_RNN_SIMPLE;
    const bool reset_after = cell == FL_RNN_GRU && !a->no_reset_after;
    const int64_t u = a->units, gu = (cell == FL_RNN_LSTM ? 4 : cell == FL_RNN_GRU ? 3 : 1) * u, in = x->shape[2];
    fl_node *k = fl_layer_add_weight(owner, g, wn[side][0], 2, (int64_t[]){in, gu}, true);
    fl_node *r = k ? fl_layer_add_weight(owner, g, wn[side][1], 2, (int64_t[]){u, gu}, true) : NULL;
    fl_node *b = r && !a->no_bias ? fl_layer_add_weight(owner, g, wn[side][2], reset_after ? 2 : 1,
                                               reset_after ? (int64_t[]){2, gu} : (int64_t[]){gu}, true)
                                  : NULL;
    if (!r || (!a->no_bias && !b)) return NULL;
    fl_node *mask = x->mask, *xin = x;
    const uint64_t stream = (a->seed ? a->seed : (uint64_t)(owner->index + 1) * 0x9E3779B97F4A7C15ull) ^ (uint64_t)side;
    /* Keras 3: with recurrent_dropout > 0 LSTM and GRU run implementation 1,
     * one input mask per gate (drawn by the op, with the recurrent ones);
     * otherwise (and SimpleRNN always) one input mask per sample, the same
     * at every step */
    const bool gate_masks = a->recurrent_dropout > 0.0f && cell != FL_RNN_SIMPLE;
    if (a->dropout > 0.0f && !gate_masks) {
        xin = fl_graph_dropout(g, owner->name, x, a->dropout, stream, (int64_t[]){1, in});
        if (!xin) return NULL;
    }
    fl_rnn_desc d = {.cell = cell, .u = (int)u, .act = (int)a->activation, .ract = (int)a->recurrent_activation,
                     .reset_after = reset_after, .go_backwards = a->go_backwards,
                     .return_sequences = a->return_sequences, .reverse_output = reverse_output,
                     .zero_masked = side ? a->return_sequences : a->zero_output_for_mask};
    fl_node *y = fl_graph_rnn_states(g, owner->name, xin, k, r, b, mask, h0, c0, a->return_state, d);
    if (y && a->recurrent_dropout > 0.0f &&
        fl_graph_rnn_dropout(y, gate_masks ? a->dropout : 0.0f, a->recurrent_dropout, stream ^ 0x2545F4914F6CDD1Dull) != FL_OK)
        return NULL;
    if (y && a->return_sequences) y->mask = mask;
    return y;
}

/* A recurrent layer's call: x, then its initial states (Keras's
 * initial_state: h, and c for LSTM); outputs y, then with return_state the
 * final states (h, c). */
fl_node *fl_build_rnn(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    fl_node *y = rnn_nodes(l, l, 0, g, xs[0], nx > 1 ? xs[1] : NULL, nx > 2 ? xs[2] : NULL, false);
    if (!y) return NULL;
    l->outs[l->nouts++] = y;
    for (int i = 0; l->a.rnn.return_state && i < fl_layer_rnn_states(l); i++) l->outs[l->nouts++] = y->rnn_state[i];
    return y;
}

/* Bidirectional: Keras flips the backward layer's output sequence back to
 * the input's order before merging. */
/* Its call: x, then the initial states, the forward layer's and then the
 * backward one's (Keras splits initial_state in halves); outputs as Keras
 * 3: the merged y (merge_mode None: y_f, y_b), then with return_state the
 * forward layer's final states and the backward one's. */
fl_node *fl_build_bidirectional(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    const fl_layer *lf = l->a.bidi.fwd, *lb = l->a.bidi.bwd;
    const int sf = fl_layer_rnn_states(lf);
    fl_node *const *s0 = nx > 1 ? xs + 1 : NULL;
    fl_node *f = rnn_nodes(l, lf, 1, g, xs[0], s0 ? s0[0] : NULL, s0 && sf > 1 ? s0[1] : NULL, false);
    fl_node *b = f ? rnn_nodes(l, lb, 2, g, xs[0], s0 ? s0[sf] : NULL, s0 && fl_layer_rnn_states(lb) > 1 ? s0[sf + 1] : NULL,
                               true) : NULL;
    if (!b) return NULL;
    fl_node *y;
    if (l->a.bidi.merge_mode == FL_MERGE_NONE) {
        y = f;
        l->outs[l->nouts++] = f;
        l->outs[l->nouts++] = b;
        if (lf->a.rnn.return_sequences) b->mask = xs[0]->mask;
    } else {
        static const fl_op ops[] = {[FL_MERGE_CONCAT] = FL_OP_CONCAT, [FL_MERGE_SUM] = FL_OP_ADD,
                                    [FL_MERGE_MUL] = FL_OP_MUL, [FL_MERGE_AVE] = FL_OP_AVG};
        y = fl_graph_merge(g, l->name, ops[l->a.bidi.merge_mode], (fl_node *const[]){f, b}, 2, -1);
        if (!y) return NULL;
        l->outs[l->nouts++] = y;
    }
    if (lf->a.rnn.return_sequences) y->mask = xs[0]->mask;
    for (int side = 0; lf->a.rnn.return_state && side < 2; side++) {
        const fl_node *r = side ? b : f;
        for (int i = 0; i < fl_layer_rnn_states(side ? lb : lf); i++) l->outs[l->nouts++] = r->rnn_state[i];
    }
    return y;
}

/* Embedding: a gather of the table's rows; with mask_zero the output
 * carries the mask of the nonzero indices. The indices must come straight
 * from a model input, whose data fit/predict check against input_dim. */
fl_node *fl_build_embedding(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    const fl_embedding_args *a = &l->a.emb;
    fl_node *x = xs[0];
    if (x->op != FL_OP_INPUT)
        return fl_error_null(FL_ERR_UNSUPPORTED, "layer '%s' (Embedding): its input comes from layer '%s' (op %s); "
                             "flynn's Embedding reads its indices straight from a model Input (whose data it checks "
                             "against input_dim %d as it comes in)", l->name, x->name, fl_op_name(x->op), a->input_dim);
    fl_node *w = fl_layer_add_weight(l, g, "embeddings", 2, (int64_t[]){a->input_dim, a->output_dim}, true);
    fl_node *y = w ? fl_graph_embedding(g, l->name, x, w) : NULL;
    if (y && a->mask_zero && !(y->mask = fl_graph_seq_mask(g, l->name, x, 0.0f))) return NULL;
    return y;
}

/* Masking: y = x where the step has a value != mask_value, else 0, as a
 * product with the mask (broadcast over the features); y carries the mask. */
fl_node *fl_build_masking(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    (void)nx;
    fl_node *x = xs[0];
    if (fl_layer_need_rank(l, x, 3, SEQUENCE)) return NULL;
    fl_node *m = fl_graph_seq_mask(g, l->name, x, l->a.masking.mask_value);
    fl_node *mv = fl_layer_view(l, g, m, 2, (int64_t[]){x->shape[1], 1});
    fl_node *y = mv ? fl_graph_merge(g, l->name, FL_OP_MUL, (fl_node *const[]){x, mv}, 2, 0) : NULL;
    if (y) y->mask = m;
    return y;
}

/* The mask operations: 1/0 floats, no gradient. NotEqual(x, c) elementwise
 * (a (batch, steps) tensor, int or float, or (batch, steps, features) seen
 * as one value a step); Any over the last axis of a (batch, steps,
 * features) one; LogicalOr/LogicalAnd of two as max/min. */
fl_node *fl_build_mask_op(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx) {
    fl_node *x = xs[0];
    char s[128];
    switch (l->kind) {
    case FL_L_NOT_EQUAL: {
        if (x->ndim == 2) return fl_graph_seq_mask(g, l->name, x, l->a.not_equal);
        if (x->ndim != 3) break;
        fl_node *v = fl_graph_reshape(g, l->name, x, 2, (int64_t[]){x->shape[1] * x->shape[2], 1});
        if (!v) return NULL;
        v->int_val = x->int_val;
        fl_node *m = fl_graph_seq_mask(g, l->name, v, l->a.not_equal);
        return m ? fl_graph_reshape(g, l->name, m, 2, x->shape + 1) : NULL;
    }
    case FL_L_ANY:
        if (x->ndim != 3) break;
        return fl_graph_seq_mask(g, l->name, x, 0.0f);
    case FL_L_CONVERT_TO_TENSOR: /* the identity */
        return fl_graph_reshape(g, l->name, x, x->ndim - 1, x->shape + 1);
    default:
        if (nx != 2)
            return fl_error_null(FL_ERR_INVALID_ARG, "layer '%s' (%s) takes 2 inputs, it was given %d", l->name,
                                 fl_layer_kind_class(l->kind), nx);
        return fl_graph_merge(g, l->name, l->kind == FL_L_LOGICAL_OR ? FL_OP_MAX : FL_OP_MIN, xs, 2, 0);
    }
    return fl_error_null(FL_ERR_UNSUPPORTED, "layer '%s' (%s): input %s; flynn computes masks of sequences, (batch, "
                         "steps) or (batch, steps, features)%s", l->name, fl_layer_kind_class(l->kind),
                         fl_shape_str(x->ndim, x->shape, s, sizeof s), l->kind == FL_L_ANY ? " (Any over the last axis)" : "");
}
