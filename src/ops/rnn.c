/*
 * rnn.c — the recurrent op (SimpleRNN, LSTM, GRU over a whole sequence):
 * its shape rule and its forward and backward, dispatched to the backend's
 * rnn_fwd/rnn_bwd (the cells' formulas: fl_rnn_desc in backend/backend.h
 * and ops/rnn_math.h); and the states at the sequence's ends: initial
 * states as inputs 5 and 6 (h0, c0), final states as RNN_STATE nodes that
 * the RNN's forward writes and whose gradients its backward reads
 * (fl_rnn_states). Its rows in the op table are in ops.c.
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
    return fl_graph_rnn_states(g, name, x, w, r, b, mask, NULL, NULL, false, d);
}

fl_node *fl_graph_rnn_states(fl_graph *g, const char *name, fl_node *x, fl_node *w, fl_node *r, fl_node *b,
                             fl_node *mask, fl_node *h0, fl_node *c0, bool return_state, fl_rnn_desc d) {
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
    const char *sname[2] = {"h", "c"};
    fl_node *s0[2] = {h0, c0};
    if (c0 && d.cell != FL_RNN_LSTM)
        return fl_error_null(FL_ERR_INVALID_ARG, "layer '%s' (%s): an initial carry state c is given, but only LSTM "
                             "has one (expected 1 initial state, h)", name, cls);
    for (int i = 0; i < 2; i++)
        if (s0[i] && (!s0[i]->batched || s0[i]->ndim != 2 || s0[i]->shape[1] != d.u))
            return fl_error_null(FL_ERR_SHAPE, "layer '%s' (%s): initial state %s has shape %s, expected (batch, %d)",
                                 name, cls, sname[i], fl_shape_str(s0[i]->ndim, s0[i]->shape, s, sizeof s), d.u);
    if (!fl_act_grad_from_output(d.act) || !fl_act_grad_from_output(d.ract))
        return fl_error_null(FL_ERR_UNSUPPORTED, "layer '%s' (%s): activation %d / recurrent_activation %d: only "
                             "activations whose derivative follows from their output are supported", name, cls,
                             d.act, d.ract);
    fl_node *n = fl_graph_new_node(g, FL_OP_RNN, name);
    if (!n) return NULL;
    n->nin = h0 || c0 ? 7 : 5;
    n->in[0] = x; n->in[1] = w; n->in[2] = r; n->in[3] = b; n->in[4] = mask;
    n->in[5] = h0; n->in[6] = c0;
    d.has_bias = b != NULL;
    n->rnn = d;
    /* the kernel's aux, then room for dh0 and dc0 when another consumer of
     * h0 or c0 already wrote its gradient (the kernel overwrites them) */
    n->aux_per_sample = ((size_t)fl_rnn_aux_floats(&d) + (h0 || c0 ? 2 * (size_t)d.u : 0)) * sizeof(float);
    if (d.return_sequences) {
        if (!fl_graph_set_shape(g, n, 2, (int64_t[]){d.t, d.u})) return NULL;
    } else if (!fl_graph_set_shape(g, n, 1, (int64_t[]){d.u})) {
        return NULL;
    }
    for (int i = 0; return_state && i < (d.cell == FL_RNN_LSTM ? 2 : 1); i++) {
        fl_node *st = fl_graph_new_node(g, FL_OP_RNN_STATE, name);
        if (!st) return NULL;
        st->nin = 1;
        st->in[0] = n;
        st->axis = i;
        if (!fl_graph_set_shape(g, st, 1, (int64_t[]){d.u})) return NULL;
        n->rnn_state[i] = st;
    }
    return n;
}

/* the states for the kernels: forward's (h0, c0 in; hT, cT out) */
static fl_rnn_states fwd_states(const fl_node *n) {
    fl_rnn_states st = {0};
    if (n->in[5]) st.h0 = n->in[5]->val;
    if (n->in[6]) st.c0 = n->in[6]->val;
    if (n->rnn_state[0]) st.hT = n->rnn_state[0]->val;
    if (n->rnn_state[1]) st.cT = n->rnn_state[1]->val;
    return st;
}

void fl_op_rnn_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    fl_rnn_desc d = n->rnn;
    d.n = g->batch;
    fl_rnn_states st = fwd_states(n);
    g->be->rnn_fwd(&d, n->in[0]->val, n->in[1]->val, n->in[2]->val, n->in[3] ? n->in[3]->val : NULL,
                   n->in[4] ? n->in[4]->val : NULL, &st, n->val, n->aux);
}

void fl_op_rnn_backward(fl_graph *g, fl_node *n) {
    fl_rnn_desc d = n->rnn;
    d.n = g->batch;
    float beta = 0.0f;
    float *dx = fl_op_in_grad(n, 0, &beta);
    size_t off = 0;
    float *dw[3] = {fl_op_weight_grad(n, 1, &off), fl_op_weight_grad(n, 2, &off),
                    n->in[3] ? fl_op_weight_grad(n, 3, &off) : NULL};
    /* the final states' gradients (where a consumer wrote one), and the
     * initial states': written in place, or to the scratch after the
     * kernel's aux and then added when another consumer came first */
    fl_rnn_states st = fwd_states(n);
    for (int i = 0; i < 2; i++) {
        const fl_node *s = n->rnn_state[i];
        if (s && s->grad_ready) *(i ? &st.dcT : &st.dhT) = s->grad;
    }
    float *scratch = (float *)n->aux + d.n * fl_rnn_aux_floats(&d), *add[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        float b0 = 0.0f, *g0 = fl_op_in_grad(n, 5 + i, &b0);
        if (i == 1 && n->in[6] == n->in[5]) b0 = 1.0f; /* one tensor as both h0 and c0: dc0 adds to dh0 */
        if (g0 && b0 != 0.0f) { add[i] = g0; g0 = scratch + i * d.n * d.u; }
        *(i ? &st.dc0 : &st.dh0) = g0;
    }
    g->be->rnn_bwd(&d, n->in[0]->val, n->in[1]->val, n->in[2]->val, n->in[3] ? n->in[3]->val : NULL,
                   n->in[4] ? n->in[4]->val : NULL, &st, n->grad, n->aux, dx, beta, dw[0], dw[1], dw[2]);
    fl_op_weight_grads_add(g->be, n, 1, 3, dw);
    for (int i = 0; i < 2; i++)
        if (add[i]) g->be->accumulate(d.n * d.u, i ? st.dc0 : st.dh0, add[i], 1.0f);
    for (int k = 0; k < n->nin; k++)
        if (k != 4 && n->in[k] && n->in[k]->needs_grad) n->in[k]->grad_ready = true;
}

/* A final state's value: the RNN's forward wrote it (fl_rnn_states.hT, cT). */
void fl_op_rnn_state_forward(fl_graph *g, fl_node *n, bool training) {
    (void)g; (void)n; (void)training;
}

/* A final state's gradient reaches the RNN through its backward (it reads
 * it as dhT/dcT); when nothing consumed the RNN's own output, that output's
 * gradient is zeros, so that the RNN's backward runs. */
void fl_op_rnn_state_backward(fl_graph *g, fl_node *n) {
    fl_node *rnn = n->in[0];
    if (!rnn->needs_grad || rnn->grad_ready) return;
    g->be->zero(rnn->grad, (size_t)fl_node_size(rnn) * sizeof(float));
    rnn->grad_ready = true;
}
