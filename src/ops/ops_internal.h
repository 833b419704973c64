/*
 * ops_internal.h — what the op files share with ops.c: the shape setter
 * that checks sizes and the memory budget, and the gradient helpers
 * (which input needs a gradient, whether to add to it, the weight gradients
 * of shared layers); and the forward/backward pairs that live outside ops.c
 * (src/ops/attention.c, rnn.c, seq.c), for ops.c's op table.
 */
#ifndef FL_OPS_INTERNAL_H
#define FL_OPS_INTERNAL_H

#include "ops.h"

bool fl_op_set_shape(fl_graph *g, fl_node *n, bool batched, int ndim, const int64_t *sample);
bool fl_graph_set_shape(fl_graph *g, fl_node *n, int ndim, const int64_t *sample); /* batched */
float *fl_op_in_grad(fl_node *n, int k, float *beta);
void fl_op_mark(fl_node *n, int k);
float *fl_op_weight_grad(fl_node *n, int k, size_t *off);
void fl_op_weight_grads_add(const fl_backend *be, fl_node *n, int k0, int k1, float *const *dst);
/* The first node after x that reads it, and in *k the input it reads x as (fuse.c); NULL if none. */
fl_node *fl_first_reader(const fl_graph *g, const fl_node *x, int *k);

/* src/ops/attention.c */
void fl_layernorm_forward(fl_graph *g, fl_node *n, bool training);
void fl_layernorm_backward(fl_graph *g, fl_node *n);
void fl_attention_forward(fl_graph *g, fl_node *n, bool training);
void fl_attention_backward(fl_graph *g, fl_node *n);
void fl_repeat_forward(fl_graph *g, fl_node *n, bool training);
void fl_repeat_backward(fl_graph *g, fl_node *n);
double fl_attention_macs(const fl_node *n);
double fl_attention_backward_macs(const fl_node *n, const bool *need, double macs);

/* src/ops/seq.c */
void fl_op_embedding_forward(fl_graph *g, fl_node *n, bool training);
void fl_op_embedding_backward(fl_graph *g, fl_node *n);
void fl_op_seq_mask_forward(fl_graph *g, fl_node *n, bool training);
void fl_op_masked_gap1d_forward(fl_graph *g, fl_node *n, bool training);
void fl_op_masked_gap1d_backward(fl_graph *g, fl_node *n);

/* src/ops/rnn.c */
void fl_op_rnn_forward(fl_graph *g, fl_node *n, bool training);
void fl_op_rnn_backward(fl_graph *g, fl_node *n);
void fl_op_rnn_state_forward(fl_graph *g, fl_node *n, bool training);
void fl_op_rnn_state_backward(fl_graph *g, fl_node *n);
double fl_op_rnn_macs(const fl_node *n);
double fl_op_rnn_backward_macs(const fl_node *n, const bool *need, double macs);

#endif
