/*
 * ops.h — what the rest of flynn needs from the ops: the node constructor
 * the fl_graph_* shape rules use (ops.c), one forward and one backward per
 * op kind and whether a backend runs an op (the op table at the end of
 * ops.c), the fusions decided once per graph and backend (fuse.c), and the
 * graph's execution (run.c: forward, backward, runs_on, and the reservation
 * of its buffers, which core/graph.h declares with the rest of the graph's
 * interface).
 */
#ifndef FL_OPS_H
#define FL_OPS_H

#include "core/graph.h"

fl_node *fl_graph_new_node(fl_graph *g, fl_op op, const char *name);
void fl_op_forward(fl_graph *g, fl_node *n, bool training);
void fl_op_backward(fl_graph *g, fl_node *n);
const char *fl_op_name(fl_op op);
/* The capability query: NULL when backend `be` has every kernel op needs,
 * else the name of the first one it lacks ("conv2d_fwd"). */
const char *fl_op_missing_kernel(const fl_backend *be, fl_op op);
/* The first entry training needs (loss, metrics, optimizer) that be lacks, or NULL. */
const char *fl_backend_missing_training_kernel(const fl_backend *be);
/* Whether op's backward takes the gradient of its fused activation's input (the loss's p - y). */
bool fl_op_preact_grad(fl_op op);
/* Node n's multiply-adds per sample, forward and backward, from its op's row; need[id]: whether each node
 * needs a gradient (fl_node_grad_rule). */
void fl_op_macs(const fl_node *n, const bool *need, double *forward, double *backward);

/* fuse.c: writes every node's fusion record (fl_node.fuse) for g on its
 * backend; fl_fuse_current does so where the graph changed since (g->fused
 * false: fl_graph_finalize, a migration, a rebind). The reservations and the
 * passes of run.c call it; a caller of fl_plan_make calls it first. */
void fl_fuse(fl_graph *g);
void fl_fuse_current(fl_graph *g);
/* The fusion table's rows (fuse.c): fl_fusion_count of them, each with its
 * name and the first backend entry it needs that `be` lacks (NULL: none). */
int fl_fusion_count(void);
const char *fl_fusion_name(int i);
const char *fl_fusion_missing(const fl_backend *be, int i);

#endif
