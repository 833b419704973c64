/*
 * rnn.c — the recurrent op (SimpleRNN, LSTM, GRU over a whole sequence):
 * its shape rule and its forward and backward, dispatched to the backend's
 * rnn_fwd/rnn_bwd (the cells' formulas: fl_rnn_desc in backend/backend.h
 * and ops/rnn_math.h). Its row in the op table is in ops.c.
 */
#include "ops_internal.h"
#include "math.h"
#include "core/error.h"
#include "core/tensor.h"

static const char *cell_class(int cell) {
    return cell == FL_RNN_LSTM ? "LSTM" : cell == FL_RNN_GRU ? "GRU" : "SimpleRNN";
}

fl_node *fl_graph_rnn(fl_graph *g, const char *name, fl_node *x, fl_node *w, fl_node *r, fl_node *b, fl_node *mask,
                      fl_rnn_desc d) {
    const char *cls = cell_class(d.cell);
    char s[128], e[128];
    if (x->ndim != 3 || !x->batched)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (%s): input %s must be (batch, timesteps, features)", name, cls,
                             fl_shape_str(x->ndim, x->shape, s, sizeof s));
    if (x->shape[1] > INT32_MAX || x->shape[2] > INT32_MAX)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (%s): input %s is too large (timesteps and features must fit "
                             "in 32 bits)", name, cls, fl_shape_str(x->ndim, x->shape, s, sizeof s));
    d.t = (int)x->shape[1];
    d.d = (int)x->shape[2];
    const int64_t gu = (int64_t)fl_rnn_gates(&d) * d.u;
    const bool two_bias = d.cell == FL_RNN_GRU && d.reset_after;
    struct { fl_node *n; const char *what; int ndim; int64_t s0, s1; } want[3] = {
        {w, "kernel", 2, d.d, gu}, {r, "recurrent_kernel", 2, d.u, gu}, {b, "bias", two_bias ? 2 : 1, two_bias ? 2 : gu, gu}};
    for (int i = 0; i < 3; i++) {
        fl_node *p = want[i].n;
        if (!p) continue;
        int64_t sh[2] = {want[i].s0, want[i].s1};
        bool ok = p->ndim == want[i].ndim && p->shape[0] == sh[0] && (want[i].ndim == 1 || p->shape[1] == sh[1]);
        if (!ok)
            return fl_error_null(FL_ERR_SHAPE, "layer '%s' (%s): %s has shape %s, expected %s", name, cls, want[i].what,
                                 fl_shape_str(p->ndim, p->shape, s, sizeof s),
                                 fl_shape_str(want[i].ndim, want[i].ndim == 1 ? sh + 1 : sh, e, sizeof e));
    }
    if (mask && (mask->ndim != 2 || mask->shape[1] != x->shape[1]))
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (%s): mask %s does not match input %s: expected (batch, %lld)",
                             name, cls, fl_shape_str(mask->ndim, mask->shape, s, sizeof s),
                             fl_shape_str(x->ndim, x->shape, e, sizeof e), (long long)x->shape[1]);
    if (!fl_act_grad_from_output(d.act) || !fl_act_grad_from_output(d.ract))
        return fl_error_null(FL_ERR_UNSUPPORTED, "layer '%s' (%s): activation %d / recurrent_activation %d: only "
                             "activations whose derivative follows from their output are supported", name, cls,
                             d.act, d.ract);
    fl_node *n = fl_graph_new_node(g, FL_OP_RNN, name);
    if (!n) return NULL;
    n->nin = 5;
    n->in[0] = x; n->in[1] = w; n->in[2] = r; n->in[3] = b; n->in[4] = mask;
    d.has_bias = b != NULL;
    n->rnn = d;
    n->aux_per_sample = (size_t)fl_rnn_aux_floats(&d) * sizeof(float);
    if (d.return_sequences) {
        if (!fl_graph_set_shape(g, n, 2, (int64_t[]){d.t, d.u})) return NULL;
    } else if (!fl_graph_set_shape(g, n, 1, (int64_t[]){d.u})) {
        return NULL;
    }
    return n;
}

void fl_op_rnn_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    fl_rnn_desc d = n->rnn;
    d.n = g->batch;
    g->be->rnn_fwd(&d, n->in[0]->val, n->in[1]->val, n->in[2]->val, n->in[3] ? n->in[3]->val : NULL,
                   n->in[4] ? n->in[4]->val : NULL, NULL, n->val, n->aux);
}

void fl_op_rnn_backward(fl_graph *g, fl_node *n) {
    fl_rnn_desc d = n->rnn;
    d.n = g->batch;
    float beta = 0.0f;
    float *dx = fl_op_in_grad(n, 0, &beta);
    size_t off = 0;
    float *dw[3] = {fl_op_weight_grad(n, 1, &off), fl_op_weight_grad(n, 2, &off),
                    n->in[3] ? fl_op_weight_grad(n, 3, &off) : NULL};
    g->be->rnn_bwd(&d, n->in[0]->val, n->in[1]->val, n->in[2]->val, n->in[3] ? n->in[3]->val : NULL,
                   n->in[4] ? n->in[4]->val : NULL, NULL, n->grad, n->aux, dx, beta, dw[0], dw[1], dw[2]);
    fl_op_weight_grads_add(g->be, n, 1, 3, dw);
    for (int k = 0; k < 4; k++)
        if (n->in[k] && n->in[k]->needs_grad) n->in[k]->grad_ready = true;
}
