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
/* The MaxPooling2D that runs fused into Conv2D node conv on g's backend
 * (conv's forward writes its value and aux; its backward writes conv's
 * input gradient), or NULL. */
fl_node *fl_op_fused_pool(const fl_graph *g, const fl_node *conv);
/* The Conv2D or DepthwiseConv2D that alone reads ZeroPadding2D node p and
 * takes p's padding as its own (pt, pl and the zeros after), in training
 * and inference: p's value and gradient are never written, and the
 * convolution's backward writes the gradient of p's input (Keras's
 * applications pad before a strided convolution: MobileNetV2's stride-2
 * blocks, ResNet50's stem). Padding only, no cropping, and where the
 * padding before, taken on both sides with any rest after, gives the same
 * output size (cuDNN pads symmetrically; the CUDA backend adds the rest
 * after), as Keras's "same" and its applications' paddings do; else NULL. */
fl_node *fl_op_pad_into_conv(const fl_graph *g, const fl_node *p);
/* Convolution node n's descriptor as its kernels run it: n->conv, or with
 * the padding it takes (fl_op_pad_into_conv) and that padding's input's
 * height and width; the batch is left to the caller. */
fl_conv_desc fl_op_conv_desc(const fl_graph *g, const fl_node *n);
/* The ZeroPadding2D whose padding convolution n takes (fl_op_pad_into_conv), or NULL */
fl_node *fl_op_conv_pad(const fl_graph *g, const fl_node *n);
/* The BatchNormalization that an inference forward of Conv2D or
 * DepthwiseConv2D node conv may fold into its weights (conv linear, the
 * normalisation its only reader), or NULL; conv's forward then writes the
 * normalisation's value (batch-size permitting: conv_folds_bn in ops.c), and
 * g->fold holds the folded weights (fl_op_fold_floats of them). */
fl_node *fl_op_fused_bn(const fl_graph *g, const fl_node *conv);
int64_t fl_op_fold_floats(const fl_node *conv);
/* The ReLU or ReLU6 (an Activation or a ReLU layer) that alone reads node
 * x (its FL_ACT_* in *act), or NULL. In inference, a folding convolution
 * applies the one after its BatchNormalization in its epilogue and writes
 * its value; an Add (fl_op_fused_add_relu) the one after it. */
fl_node *fl_op_fused_relu(const fl_graph *g, const fl_node *x, int *act);
/* What convolution conv, folding normalisation bn in inference, applies in
 * its epilogue and writes the value of: fl_op_fused_relu's ReLU, or where
 * the backend takes a slope (conv_slope), a LeakyReLU (*slope > 0); NULL. */
fl_node *fl_op_fused_conv_act(const fl_graph *g, const fl_node *conv, const fl_node *bn, int *act, float *slope);
/* The ReLU or ReLU6 that a forward of Add node add applies as it adds,
 * writing the ReLU's value and not its own (a residual block's add and
 * activation in one pass), or NULL. In training the Add's backward then
 * reads the ReLU's gradient, masked by the ReLU's value, and the ReLU's
 * backward writes nothing. */
fl_node *fl_op_fused_add_relu(const fl_graph *g, const fl_node *add, int *act);
/* Inference, where the backend's conv_res is set: the two-input Add that Conv2D node conv forms as it
 * stores (a residual block's last convolution and its Add, and the ReLU after them, in one pass). The Add reads
 * conv's value, or that of the BatchNormalization conv folds with nothing fused after it, alone, and its other
 * input (*other) is computed before conv. *out: the node whose value conv then writes (the Add's ReLU, else
 * the Add), *act that ReLU's FL_ACT_* (FL_ACT_LINEAR: none). conv takes it in a step where it folds that
 * normalisation, or has none. NULL if none. */
fl_node *fl_op_fused_res(const fl_graph *g, const fl_node *conv, fl_node **other, fl_node **out, int *act);
/* The ReLU or ReLU6 (or, where the backend's bn_act_slope says, the
 * LeakyReLU) that a training forward of BatchNormalization node bn
 * applies itself (the backend's bn_fwd_train_act), writing the ReLU's value
 * and not its own; its backward then reads the ReLU's gradient, masked by
 * the ReLU's value (bn_bwd_act), and the ReLU's backward writes nothing.
 * NULL where the backend lacks those entries or bn is frozen. */
fl_node *fl_op_fused_bn_relu_train(const fl_graph *g, const fl_node *bn, int *act);
/* The negative slope of a fused ReLU node: a LeakyReLU's (which
 * fl_op_fused_bn_relu_train fuses, as act FL_ACT_RELU, where the backend's
 * bn_act_slope says it takes one), else 0. */
float fl_op_relu_slope(const fl_node *relu);
/* Training: the Add of two that alone reads normalisation bn and applies its affine as it adds (the backend's
 * add_affine), leaving bn's value unwritten; or NULL. */
fl_node *fl_op_bn_into_add(const fl_graph *g, const fl_node *bn);
/* Training: the Conv2D or DepthwiseConv2D that alone reads normalisation bn's value, or that of the ReLU or
 * ReLU6 fused after it (fl_op_fused_bn_relu_train), and forms that value as it reads its input (the backend's
 * conv_pre: d->pre),
 * leaving it unwritten (a residual block's first normalisation; any Conv -> BN -> ReLU -> Conv); or NULL. *v:
 * the node whose value it is (bn, or the ReLU); *act: the ReLU's FL_ACT_*, or FL_ACT_LINEAR. */
fl_node *fl_op_bn_into_conv(const fl_graph *g, const fl_node *bn, fl_node **v, int *act);
/* The training BatchNormalization whose data gradient the backward of
 * Conv2D node conv forms itself (conv linear, the normalisation its only
 * reader, not frozen; the backend's bn_bwd_coef and conv2d_bn_bwd), or
 * NULL. The normalisation's backward then writes no dx: it leaves the
 * coefficients in its aux, and the convolution reads its gradient (or its
 * fused ReLU's) in its own backward. */
fl_node *fl_op_fused_conv_bn_train(const fl_graph *g, const fl_node *conv);
/* The ReLU whose gradient a training backward of node x reads in the ReLU's
 * place: fl_op_fused_bn_relu_train's or fl_op_fused_add_relu's, or NULL. */
fl_node *fl_op_fused_relu_train(const fl_graph *g, const fl_node *x, int *act);
/* The capability query: NULL when backend `be` has every kernel op needs,
 * else the name of the first one it lacks ("conv2d_fwd"). */
const char *fl_op_missing_kernel(const fl_backend *be, fl_op op);

#endif
