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

/* The node's aux, per sample (floats): the kernel's (fl_rnn_aux_floats),
 * room for dh0 and dc0 when there are initial states (2u), then with
 * dropout the masks hdrop (G*u) and xdrop (G*d), as many ones to draw them
 * from, and as many keep bytes (dropout_fwd's), rounded up to floats. */
static int64_t drop_floats(const fl_node *n) {
    const fl_rnn_desc *d = &n->rnn;
    return d->drop_scratch ? (int64_t)fl_rnn_gates(d) * (d->u + d->d) : 0;
}
static size_t aux_per_sample(const fl_node *n) {
    const fl_rnn_desc *d = &n->rnn;
    const int64_t m = drop_floats(n);
    return ((size_t)fl_rnn_aux_floats(d) + (n->in[5] || n->in[6] ? 2 * (size_t)d->u : 0) + 2 * (size_t)m +
            (size_t)(m + 3) / 4) * sizeof(float);
}
static float *masks_base(const fl_node *n, int64_t batch) {
    fl_rnn_desc d = n->rnn;
    d.n = batch;
    return (float *)n->aux + batch * (fl_rnn_aux_floats(&d) + (n->in[5] || n->in[6] ? 2 * (int64_t)d.u : 0));
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
    n->aux_per_sample = aux_per_sample(n);
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

fl_status fl_graph_rnn_dropout(fl_node *n, float dropout, float recurrent_dropout, uint64_t stream) {
    if (!n || n->op != FL_OP_RNN) return fl_error(FL_ERR_INVALID_ARG, "fl_graph_rnn_dropout: not a recurrent op");
    const char *cls = cell_class(n->rnn.cell);
    if (!(dropout >= 0.0f && dropout < 1.0f))
        return fl_error(FL_ERR_INVALID_ARG, "layer '%s' (%s): dropout %g, expected 0 <= dropout < 1", n->name, cls,
                        dropout);
    if (!(recurrent_dropout >= 0.0f && recurrent_dropout < 1.0f))
        return fl_error(FL_ERR_INVALID_ARG, "layer '%s' (%s): recurrent_dropout %g, expected 0 <= recurrent_dropout < 1",
                        n->name, cls, recurrent_dropout);
    n->rate = recurrent_dropout;
    n->rate_in = dropout;
    n->stream = stream;
    n->rnn.drop_scratch = dropout > 0.0f || recurrent_dropout > 0.0f;
    n->aux_per_sample = aux_per_sample(n);
    return FL_OK;
}

void fl_graph_rnn_masks(const fl_graph *g, const fl_node *n, float **hdrop, float **xdrop) {
    float *m = masks_base(n, g->batch);
    const int64_t G = fl_rnn_gates(&n->rnn);
    *hdrop = n->rnn.drop_scratch && n->rate > 0.0f ? m : NULL;
    *xdrop = n->rnn.drop_scratch && n->rate_in > 0.0f ? m + g->batch * G * n->rnn.u : NULL;
}

/* the states for the kernels: forward's (h0, c0 in; hT, cT out), and the
 * dropout masks of a training pass */
static fl_rnn_states fwd_states(const fl_graph *g, const fl_node *n) {
    fl_rnn_states st = {0};
    if (n->in[5]) st.h0 = n->in[5]->val;
    if (n->in[6]) st.c0 = n->in[6]->val;
    if (n->rnn_state[0]) st.hT = n->rnn_state[0]->val;
    if (n->rnn_state[1]) st.cT = n->rnn_state[1]->val;
    if (n->mode & 2) { /* the last forward was a training one and drew masks */
        float *hd, *xd;
        fl_graph_rnn_masks(g, n, &hd, &xd);
        st.hdrop = hd;
        st.xdrop = xd;
    }
    return st;
}

/* a training pass's masks: scaled keep masks (0 or 1/(1-rate)) drawn from
 * ones, Philox(seed, stream mixed with the step) as Dropout draws them;
 * the input's from their own stream */
static void draw_masks(fl_graph *g, fl_node *n) {
    float *hd, *xd;
    fl_graph_rnn_masks(g, n, &hd, &xd);
    const int64_t m = drop_floats(n), G = fl_rnn_gates(&n->rnn);
    float *ones = masks_base(n, g->batch) + g->batch * m;
    uint8_t *keep = (uint8_t *)(ones + g->batch * m);
    /* [batch, G, u] and [batch, G, d]: row-major by sample */
    const struct { float *dst; float rate; int64_t per_row; uint64_t stream; } draw[2] = {
        {hd, n->rate, G * n->rnn.u, n->stream},
        {xd, n->rate_in, G * n->rnn.d, n->stream ^ 0xD1B54A32D192ED03ull}};
    for (int i = 0; i < 2; i++) {
        if (!draw[i].dst) continue;
        const int64_t k = g->batch * draw[i].per_row;
        g->be->fill(k, 1.0f, ones);
        g->be->dropout_fwd(k, draw[i].rate, g->seed, fl_dropout_stream(draw[i].stream, g->step),
                           fl_graph_mask_offset(g, draw[i].per_row), ones, draw[i].dst, keep);
    }
}

void fl_op_rnn_forward(fl_graph *g, fl_node *n, bool training) {
    fl_rnn_desc d = n->rnn;
    d.n = g->batch;
    /* inference needs no aux for backward (the CPU then runs only the valid
     * steps of each sample); backward after one reruns the training form */
    d.infer = !training;
    n->mode = training ? 1 | (n->rnn.drop_scratch ? 2 : 0) : 0; /* 1: aux holds what backward reads; 2: masks */
    if (n->mode & 2) draw_masks(g, n);
    fl_rnn_states st = fwd_states(g, n);
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
    fl_rnn_states st = fwd_states(g, n);
    if (!(n->mode & 1)) { /* after an inference forward: the same forward, keeping what backward reads */
        g->be->rnn_fwd(&d, n->in[0]->val, n->in[1]->val, n->in[2]->val, n->in[3] ? n->in[3]->val : NULL,
                       n->in[4] ? n->in[4]->val : NULL, &st, n->val, n->aux);
        n->mode |= 1;
    }
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

/* Multiply-adds per sample: x W and h R at every step (cost.c). */
double fl_op_rnn_macs(const fl_node *n) {
    const fl_rnn_desc *r = &n->rnn;
    return (double)r->t * (double)(r->d + r->u) * fl_rnn_gates(r) * (double)r->u;
}

/* dW = x^T dz and dx = dz W^T where they are needed; dh = dz R^T through time whenever the layer trains, and
 * dR = h^T dz. */
double fl_op_rnn_backward_macs(const fl_node *n, const bool *need, double macs) {
    const fl_rnn_desc *r = &n->rnn;
    const double xpart = (double)r->t * r->d * fl_rnn_gates(r) * (double)r->u, hpart = macs - xpart;
#define NEEDS(node) ((node) && need[(node)->id])
    if (!NEEDS(n)) return 0;
    double b = hpart;
    if (NEEDS(n->in[1])) b += xpart;
    if (NEEDS(n->in[0])) b += xpart;
    if (NEEDS(n->in[2])) b += hpart;
#undef NEEDS
    return b;
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
