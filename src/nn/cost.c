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
#include "ops/ops.h"

#include <stdlib.h>
#include <string.h>

/* Whether node i needs a gradient, by fl_graph_finalize's rule (fl_node_grad_rule), from the
 * weights' trainable flags as they are now (a layer frozen since the graph
 * was finalized counts as frozen). */
static bool *grad_flags(const fl_graph *g) {
    bool *need = fl_calloc((size_t)(g->n > 0 ? g->n : 1), sizeof(bool), "FLOP count");
    if (!need) return NULL;
    for (int i = 0; i < g->n; i++) need[i] = fl_node_grad_rule(g->nodes[i], need);
    return need;
}

fl_status fl_model_flops(const fl_model *m, double *forward, double *train) {
    if (!m) return fl_error(FL_ERR_INVALID_ARG, "fl_model_flops: model is NULL");
    bool *need = grad_flags(&m->g);
    if (!need) return fl_last_status();
    double f = 0, b = 0;
    for (int i = 0; i < m->g.n; i++) {
        double fn, bn;
        fl_op_macs(m->g.nodes[i], need, &fn, &bn); /* the op's row (ops.c) */
        f += fn;
        b += bn;
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
    /* the plan below reads the fusion records: a cache of the graph, made here where nothing ran yet */
    fl_fuse_current((fl_graph *)g);
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
