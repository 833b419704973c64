/*
 * run.c — running a graph: the forward and backward passes over its nodes in topological order (each node's
 * op from ops.c's op table), whether a backend has every kernel a graph needs, and the reservation of its
 * buffers, each making the fusion records current first (fl_fuse_current: src/ops/fuse.c), so that the
 * planner and the buffers in src/core read them and ask the ops nothing.
 */
#include "ops.h"

#include <stdio.h>

fl_status fl_graph_reserve(fl_graph *g, int64_t batch) {
    fl_fuse_current(g);
    return fl_graph_reserve_buffers(g, batch, false);
}

fl_status fl_graph_reserve_infer(fl_graph *g, int64_t batch) {
    fl_fuse_current(g);
    return fl_graph_reserve_buffers(g, batch, true);
}

void fl_graph_forward(fl_graph *g, bool training) {
    fl_fuse_current(g);
    for (int i = 0; i < g->n; i++) {
        fl_node *n = g->nodes[i];
        if (n->op == FL_OP_INPUT || n->op == FL_OP_PARAM) continue;
        fl_op_forward(g, n, training);
    }
}

int fl_graph_backward_watch(fl_graph *g, bool (*stop)(void *ctx, const fl_node *n), void *ctx) {
    fl_fuse_current(g);
    for (int i = g->n - 1; i >= 0; i--) {
        fl_node *n = g->nodes[i];
        if (n->op == FL_OP_PARAM && g->on_param_grad) g->on_param_grad(g->on_param_ctx, i);
        if (stop && (n->grad_ready || n->op == FL_OP_PARAM) && stop(ctx, n)) return i;
        if (!n->grad_ready || n->op == FL_OP_INPUT || n->op == FL_OP_PARAM) continue;
        fl_op_backward(g, n);
    }
    return -1;
}

void fl_graph_backward(fl_graph *g) { (void)fl_graph_backward_watch(g, NULL, NULL); }

bool fl_graph_runs_on(const fl_graph *g, const fl_backend *be, char *why, size_t len) {
    for (int i = 0; i < g->n; i++) {
        const fl_node *n = g->nodes[i];
        const char *k = fl_op_missing_kernel(be, n->op);
        if (k) {
            if (why) snprintf(why, len, "layer '%s' (op %s) needs the kernel %s, which the %s backend does not have",
                              n->name ? n->name : "?", fl_op_name(n->op), k, be->name);
            return false;
        }
    }
    return true;
}
