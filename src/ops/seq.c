/*
 * seq.c — the ops of sequence models, each once as in ops.c (shape rule,
 * forward and backward side by side; their rows are in ops.c's op table):
 * Embedding (a gather of table rows, scattered back into the table's
 * gradient), the mask of a padded sequence (Keras's _keras_mask, made by
 * Embedding mask_zero and Masking), and GlobalAveragePooling1D over the
 * valid steps of a masked sequence.
 */
#include "ops_internal.h"
#include "core/error.h"
#include "core/tensor.h"

#include <string.h>

/* ---------------------------------------------------------- Embedding */

fl_node *fl_graph_embedding(fl_graph *g, const char *name, fl_node *x, fl_node *w) {
    char s[128];
    if (w->ndim != 2)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (Embedding): the table has %d dimensions, expected 2 "
                             "(input_dim, output_dim)", name, w->ndim);
    if (x->ndim + 1 > FL_MAX_DIMS)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (Embedding): input %s has too many dimensions for an output "
                             "of one more (at most %d)", name, fl_shape_str(x->ndim, x->shape, s, sizeof s),
                             FL_MAX_DIMS);
    if (w->shape[0] > INT32_MAX || w->shape[1] > INT32_MAX)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (Embedding): input_dim %lld and output_dim %lld, expected at "
                             "most %d each", name, (long long)w->shape[0], (long long)w->shape[1], INT32_MAX);
    fl_node *n = fl_graph_new_node(g, FL_OP_EMBEDDING, name);
    if (!n) return NULL;
    n->nin = 2;
    n->in[0] = x;
    n->in[1] = w;
    int64_t out[FL_MAX_DIMS];
    for (int i = 1; i < x->ndim; i++) out[i - 1] = x->shape[i];
    out[x->ndim - 1] = w->shape[1];
    if (!fl_op_set_shape(g, n, true, x->ndim, out)) return NULL;
    return n;
}

/* y[i, :] = w[x[i], :] over every index of the batch */
void fl_op_embedding_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    fl_node *x = n->in[0], *w = n->in[1];
    g->be->embedding_fwd(fl_node_size(x), (int)w->shape[1], w->shape[0], x->int_val, x->val, w->val, n->val);
}

/* dw[r, :] = sum of dy[i, :] over the i with x[i] = r; the indices get no
 * gradient (Keras's take has none either) */
void fl_op_embedding_backward(fl_graph *g, fl_node *n) {
    fl_node *x = n->in[0], *w = n->in[1];
    size_t off = 0;
    float *dw[1] = {fl_op_weight_grad(n, 1, &off)};
    if (!dw[0]) return;
    g->be->embedding_bwd(fl_node_size(x), (int)w->shape[1], w->shape[0], x->int_val, x->val, n->grad, dw[0]);
    fl_op_weight_grads_add(g->be, n, 1, 1, dw);
    fl_op_mark(n, 1);
}

/* ----------------------------------------------------- sequence masks */

fl_node *fl_graph_seq_mask(fl_graph *g, const char *name, fl_node *x, float value) {
    char s[128];
    if (x->ndim != 2 && x->ndim != 3)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s': a sequence mask needs an input (batch, steps) or (batch, "
                             "steps, features), not %s", name, fl_shape_str(x->ndim, x->shape, s, sizeof s));
    fl_node *n = fl_graph_new_node(g, FL_OP_SEQ_MASK, name);
    if (!n) return NULL;
    n->nin = 1;
    n->in[0] = x;
    n->mask_value = value;
    if (!fl_op_set_shape(g, n, true, 1, &x->shape[1])) return NULL;
    return n;
}

/* m[b, t] = any over the step's features of x != mask_value */
void fl_op_seq_mask_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    fl_node *x = n->in[0];
    int c = x->ndim == 3 ? (int)x->shape[2] : 1;
    g->be->seq_mask(g->batch * x->shape[1], c, x->int_val, x->val, n->mask_value, n->val);
}

/* ------------------------------------ GlobalAveragePooling1D with a mask */

fl_node *fl_graph_masked_gap1d(fl_graph *g, const char *name, fl_node *x, fl_node *mask) {
    char s[128], t[128];
    if (x->ndim != 3 || mask->ndim != 2 || mask->shape[1] != x->shape[1])
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (GlobalAveragePooling1D): input %s with mask %s, expected "
                             "(batch, steps, channels) and (batch, steps)", name,
                             fl_shape_str(x->ndim, x->shape, s, sizeof s), fl_shape_str(mask->ndim, mask->shape, t, sizeof t));
    fl_node *n = fl_graph_new_node(g, FL_OP_MASKED_GAP1D, name);
    if (!n) return NULL;
    n->nin = 2;
    n->in[0] = x;
    n->in[1] = mask;
    if (!fl_op_set_shape(g, n, true, 1, &x->shape[2])) return NULL;
    return n;
}

/* y[b, :] = sum over the valid steps of x[b, t, :] / their count */
void fl_op_masked_gap1d_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    fl_node *x = n->in[0];
    g->be->masked_gap1d_fwd(g->batch, x->shape[1], (int)x->shape[2], x->val, n->in[1]->val, n->val);
}

/* dx[b, t, :] = m[b, t] dy[b, :] / count; the mask gets no gradient */
void fl_op_masked_gap1d_backward(fl_graph *g, fl_node *n) {
    fl_node *x = n->in[0];
    float beta = 0.0f;
    float *dx = fl_op_in_grad(n, 0, &beta);
    if (!dx) return;
    g->be->masked_gap1d_bwd(g->batch, x->shape[1], (int)x->shape[2], n->in[1]->val, n->grad, dx, beta);
    fl_op_mark(n, 0);
}
