/*
 * ops.h — what the graph needs from the ops: one forward and one backward
 * per op kind, and whether a backend can run an op (the shape rules are the
 * fl_graph_* constructors in ops.c; the op table is at the end of ops.c).
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

/* What the op files besides ops.c (seq.c) share with it: the shape setter
 * (limits and the memory budget), the gradient buffer of input k and its
 * beta (in_grad), marking it ready, and a weight's gradient destination
 * (shared layers: scratch, added by fl_op_weight_grads_add). */
bool fl_op_set_shape(fl_graph *g, fl_node *n, bool batched, int ndim, const int64_t *sample);
float *fl_op_in_grad(fl_node *n, int k, float *beta);
void fl_op_mark(fl_node *n, int k);
float *fl_op_weight_grad(fl_node *n, int k, size_t *off);
void fl_op_weight_grads_add(const fl_backend *be, fl_node *n, int k0, int k1, float *const *dst);

/* The sequence ops (seq.c), for the op table. */
void fl_op_embedding_forward(fl_graph *g, fl_node *n, bool training);
void fl_op_embedding_backward(fl_graph *g, fl_node *n);
void fl_op_seq_mask_forward(fl_graph *g, fl_node *n, bool training);
void fl_op_masked_gap1d_forward(fl_graph *g, fl_node *n, bool training);
void fl_op_masked_gap1d_backward(fl_graph *g, fl_node *n);

#endif
