/*
 * layers_internal.h — what the layer files share: layers.c (the kind tables, the input, the image and
 * element-wise families, the weights, fl_layer_build and the mask rules) and layers_seq.c (the sequence and
 * recurrent family): the build functions the kind table holds, and the helpers both use.
 */
#ifndef FLYNN_NN_LAYERS_INTERNAL_H
#define FLYNN_NN_LAYERS_INTERNAL_H

#include "nn.h"

/* A kind's build: its weights and graph nodes for inputs xs[0..nx) */
typedef fl_node *(*fl_layer_build_fn)(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_layer_build_fn fl_layer_kind_build(fl_layer_kind k);
int fl_layer_kind_inputs(fl_layer_kind k);

/* layers.c's helpers: a new layer of kind k (named, or by its base and a number), an activation checked for
 * class cls, a weight made (or, rebinding, adopted) for layer l, x viewed as (ndim, s) per sample, x of rank
 * ndim or an error naming `what` it should be ("(batch, steps, channels)"), the states of a recurrent layer
 * (LSTM: 2) and whether a kind is one */
fl_layer *fl_layer_new(fl_layer_kind k, const char *name);
fl_status fl_layer_check_act(const char *cls, fl_activation a);
fl_node *fl_layer_add_weight(fl_layer *l, fl_graph *g, const char *wname, int ndim, const int64_t *shape,
                             bool trainable);
fl_node *fl_layer_view(fl_layer *l, fl_graph *g, fl_node *x, int ndim, const int64_t *s);
fl_status fl_layer_need_rank(const fl_layer *l, const fl_node *x, int ndim, const char *what);
int fl_layer_rnn_states(const fl_layer *l);
bool fl_layer_is_rnn_kind(fl_layer_kind k);
#define SEQUENCE "(batch, steps, channels)"

/* layers_seq.c's builds */
fl_node *fl_build_layernorm(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_mha(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_attention(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_repeat_vector(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_time_distributed(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_rnn(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_bidirectional(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_embedding(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_masking(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_mask_op(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);

#endif
