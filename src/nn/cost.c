/*
 * cost.c — what a model costs per sample, read off its graph: the
 * arithmetic (what `flynn bench` divides by the time to print GFLOP/s, and
 * what a user asks when sizing a model; keras-flops, fvcore and
 * torch.utils.flop_counter count the same way) and the memory (weights,
 * optimizer slots, and the buffers that grow with the batch).
 *
 * Two FLOPs per multiply-add of the matrix products: Dense (on any rank),
 * the convolutions (grouped, dilated, depthwise, transposed), the recurrent
 * cells (x W and h R at every step) and attention (q k^T and p v per head).
 * Element-wise work (activations, normalisation, pooling, the optimizer) is
 * not counted; neither is the Embedding, a gather.
 *
 * Training counts the products the step runs: the forward, then for each
 * product the weight gradient when the weight is trainable and the input
 * gradient when the input needs one (not for the model's inputs, nor below
 * frozen layers). A recurrent layer's h R gradient is counted whenever any of
 * its inputs or weights is trained: its backward runs through time.
 */
#include "core/error.h"
#include "core/plan.h"
#include "nn/nn.h"

#include <stdlib.h>
#include <string.h>

/* Multiply-adds of node n per sample (0 for the ops that have none). */
static double node_macs(const fl_node *n) {
    switch (n->op) {
    case FL_OP_DENSE: {
        const fl_node *x = n->in[0];
        double k = (double)x->shape[x->ndim - 1];
        double rows = (double)fl_node_sample_size(x) / k;
        double units = (double)n->shape[n->ndim - 1];
        return rows * k * units;
    }
    case FL_OP_CONV2D:
    case FL_OP_CONV2D_TRANSPOSE: { /* a transposed conv's desc is the Conv2D it is the data gradient of */
        const fl_conv_desc *d = &n->conv;
        int groups = d->groups > 1 ? d->groups : 1;
        return (double)d->oh * d->ow * d->oc * d->kh * d->kw * (double)(d->c / groups);
    }
    case FL_OP_DEPTHWISE_CONV2D: {
        const fl_conv_desc *d = &n->conv;
        return (double)d->oh * d->ow * d->oc * d->kh * d->kw;
    }
    case FL_OP_ATTENTION: {
        const fl_attn_desc *a = &n->attn;
        return (double)a->heads * a->tq * a->tk * (double)(a->dk + a->dv);
    }
    case FL_OP_RNN: {
        const fl_rnn_desc *r = &n->rnn;
        return (double)r->t * (double)(r->d + r->u) * fl_rnn_gates(r) * (double)r->u;
    }
    default:
        return 0;
    }
}

/* Whether node i needs a gradient, by the rule of fl_graph_finalize, from the
 * weights' trainable flags as they are now (a layer frozen since the graph
 * was finalized counts as frozen). */
static bool *grad_flags(const fl_graph *g) {
    bool *need = fl_calloc((size_t)(g->n > 0 ? g->n : 1), sizeof(bool), "FLOP count");
    if (!need) return NULL;
    for (int i = 0; i < g->n; i++) {
        const fl_node *n = g->nodes[i];
        if (n->op == FL_OP_PARAM) need[i] = n->trainable;
        else if (n->op == FL_OP_INPUT) need[i] = n->force_grad;
        else if (n->op != FL_OP_SEQ_MASK)
            for (int k = 0; k < n->nin; k++)
                if (n->in[k] && need[n->in[k]->id]) need[i] = true;
    }
    return need;
}

#define NEEDS(node) ((node) && need[(node)->id])

/* Multiply-adds of n's backward per sample. */
static double node_backward_macs(const fl_node *n, const bool *need) {
    double f = node_macs(n);
    if (f == 0) return 0;
    const fl_node *x = n->in[0];
    switch (n->op) {
    case FL_OP_ATTENTION: { /* d(q k^T) -> dq, dk; d(p v) -> dp, dv: two products per forward product */
        bool any = false;
        for (int i = 0; i < 3 && i < n->nin; i++)
            if (NEEDS(n->in[i])) any = true;
        return any ? 2 * f : 0;
    }
    case FL_OP_RNN: {
        const fl_rnn_desc *r = &n->rnn;
        double xpart = (double)r->t * r->d * fl_rnn_gates(r) * (double)r->u;
        double hpart = f - xpart;
        if (!NEEDS(n)) return 0;
        double b = 0;
        if (NEEDS(n->in[1])) b += xpart;         /* dW = x^T dz */
        if (NEEDS(x)) b += xpart;                /* dx = dz W^T */
        b += hpart;                                   /* dh = dz R^T, through time */
        if (NEEDS(n->in[2])) b += hpart;         /* dR = h^T dz */
        return b;
    }
    default: {
        double b = 0;
        if (NEEDS(n->in[1])) b += f; /* the weight gradient */
        if (NEEDS(x)) b += f;                    /* the input gradient */
        return b;
    }
    }
}

fl_status fl_model_flops(const fl_model *m, double *forward, double *train) {
    if (!m) return fl_error(FL_ERR_INVALID_ARG, "fl_model_flops: model is NULL");
    bool *need = grad_flags(&m->g);
    if (!need) return fl_last_status();
    double f = 0, b = 0;
    for (int i = 0; i < m->g.n; i++) {
        const fl_node *n = m->g.nodes[i];
        f += node_macs(n);
        b += node_backward_macs(n, need);
    }
    free(need);
    if (forward) *forward = 2 * f;
    if (train) *train = 2 * (f + b);
    return FL_OK;
}

fl_status fl_model_memory(const fl_model *m, fl_memory_info *out) {
    if (!m || !out) return fl_error(FL_ERR_INVALID_ARG, "fl_model_memory: model or out is NULL");
    memset(out, 0, sizeof *out);
    const fl_graph *g = &m->g;
    bool *need = grad_flags(g);
    if (!need) return fl_last_status();
    for (int i = 0; i < g->n; i++) {
        const fl_node *n = g->nodes[i];
        if (n->op == FL_OP_PARAM) {
            out->weight_bytes += fl_node_size(n) * (int64_t)sizeof(float);
            if (n->trainable) out->gradient_bytes += fl_node_size(n) * (int64_t)sizeof(float);
            continue;
        }
        if (!n->batched) continue;
        out->fixed_bytes += (int64_t)n->aux_fixed + (int64_t)n->gscratch_bytes;
    }
    /* the batch buffers as fl_graph_reserve places them (plan.h), for one sample: the placement scales
     * with the batch (less 256-byte alignment) */
    fl_plan p;
    fl_status st = fl_plan_make(g, need, 1, false, 1, false, &p);
    if (st == FL_OK) {
        out->bytes_per_sample = (int64_t)p.bytes;
        fl_plan_free(&p);
        if ((st = fl_plan_make(g, need, 1, true, 1, false, &p)) == FL_OK) {
            out->inference_bytes_per_sample = (int64_t)p.bytes;
            fl_plan_free(&p);
        }
    }
    free(need);
    out->optimizer_bytes = g->opt_bytes;
    out->workspace_bytes = (int64_t)g->ws_bytes;
    return st;
}
