/*
 * layers_internal.h — what the layer files share: layers.c (the kind tables, Input, the weights and their
 * initializers, fl_layer_build with the mask rules, the accessors) and the families, each constructor beside
 * its build: layers_core.c (Dense and the element-wise layers), layers_image.c (convolutions, poolings,
 * paddings, resampling) and layers_seq.c (the sequence and recurrent layers). It declares the builds the kind
 * table holds and the helpers the families use.
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
/* Dense and the convolutions run their activation fused when its derivative follows from the output
 * (fl_layer_fused_act gives the fused code), else as a node of its own (fl_layer_then_act adds it) */
fl_node *fl_layer_then_act(fl_graph *g, const char *name, fl_node *out, int act);
int fl_layer_fused_act(int act);
bool fl_layer_is_rnn_kind(fl_layer_kind k);
#define SEQUENCE "(batch, steps, channels)"
#define STEPS_FEATURES "(batch, steps, features)"
#define IMAGE "(batch, height, width, channels)"

/* layers_core.c's builds */
fl_node *fl_build_dense(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_flatten(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_reshape(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_permute(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_dropout(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_batchnorm(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_normalization(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_activation(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_pact(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_prelu(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_softmax(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_add(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_arith(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_multiply(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_concatenate(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);

/* layers_image.c's builds */
fl_node *fl_build_conv2d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_conv2d_transpose(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_depthwise2d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_separable2d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_conv1d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_pool(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_global_pool(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_pool1d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_padding2d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_seq1d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_upsample2d(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);
fl_node *fl_build_resizing(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx);

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
