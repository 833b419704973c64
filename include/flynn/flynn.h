/*
 * flynn.h — the whole public C API of flynn: Keras-style deep learning in C.
 *
 * Everything a user touches is declared here: tensors, layers, models,
 * optimizers, losses, metrics, fit/evaluate/predict, data loaders, devices
 * and errors. Names follow Keras so that a Keras user can guess them:
 *
 *     fl_model *m = fl_sequential(
 *         fl_input(28, 28, 1),
 *         fl_conv2d(32, 3, .activation = FL_RELU),
 *         fl_max_pooling2d(2),
 *         fl_flatten(),
 *         fl_dense(10, .activation = FL_SOFTMAX));
 *     fl_compile(m, fl_adam(.learning_rate = 1e-3),
 *                FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY);
 *     fl_history *h = fl_fit(m, x, y, .batch_size = 128, .epochs = 2);
 *
 * Keyword arguments are C99 designated initializers. A field left out takes
 * the Keras default; since C can only default a field to zero, an option
 * whose Keras default is true is spelled negated here (Keras
 * `use_bias=False` is `.no_bias = true`, `shuffle=False` is
 * `.no_shuffle = true`), and 0 means "the Keras default" for numbers
 * (`.strides = 0` is 1, `.batch_size = 0` is 32).
 *
 * Errors: every call returns a status (FL_OK == 0) or NULL on failure and
 * leaves a message, naming the file/layer/dimension and what was expected,
 * for fl_last_error(). The library never exits or aborts.
 */
#ifndef FLYNN_H
#define FLYNN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "flynn/activations.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FLYNN_VERSION_MAJOR 0
#define FLYNN_VERSION_MINOR 1
#define FLYNN_VERSION_PATCH 0
const char *fl_version(void);

/* ------------------------------------------------------------------ errors */

typedef enum fl_status {
    FL_OK = 0,
    FL_ERR_INVALID_ARG,  /* a bad argument: wrong range, NULL, unknown name */
    FL_ERR_SHAPE,        /* shapes that do not fit together */
    FL_ERR_IO,           /* a file could not be opened, read or written */
    FL_ERR_FORMAT,       /* a file's content is not what was expected */
    FL_ERR_NOMEM,        /* host or device memory exhausted */
    FL_ERR_DEVICE,       /* a device (GPU) is not usable */
    FL_ERR_UNSUPPORTED,  /* a valid request this build cannot do */
    FL_ERR_STATE,        /* called in the wrong order (fit before compile) */
    FL_ERR_NONFINITE,    /* a NaN or infinity in the training data or the loss (fl_fit stopped) */
} fl_status;

/* The message of the last failed call on this thread ("" if none). */
const char *fl_last_error(void);
/* The status of the last failed call on this thread (FL_OK if none). */
fl_status fl_last_status(void);
const char *fl_status_name(fl_status s);
void fl_clear_error(void);

/* ----------------------------------------------------------------- tensors */

#define FL_MAX_DIMS 8

typedef enum fl_dtype { FL_FLOAT32 = 0, FL_INT32, FL_UINT8 } fl_dtype;

/* A dense, row-major (C order) n-d array in host memory. */
typedef struct fl_tensor fl_tensor;

fl_tensor *fl_tensor_new(fl_dtype dtype, int ndim, const int64_t *shape);
/* fl_tensor_zeros(FL_FLOAT32, 2000, 28, 28, 1) */
#define fl_tensor_zeros(dtype, ...) \
    fl_tensor_new((dtype), (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})
void fl_tensor_free(fl_tensor *t);
fl_tensor *fl_tensor_clone(const fl_tensor *t);
/* A new tensor holding rows [start, start+count) of dimension 0. */
fl_tensor *fl_tensor_slice(const fl_tensor *t, int64_t start, int64_t count);
fl_status fl_tensor_reshape(fl_tensor *t, int ndim, const int64_t *shape);

fl_dtype fl_tensor_dtype(const fl_tensor *t);
int fl_tensor_ndim(const fl_tensor *t);
int64_t fl_tensor_dim(const fl_tensor *t, int axis); /* axis < 0 counts from the end */
int64_t fl_tensor_size(const fl_tensor *t);          /* number of elements */
void *fl_tensor_data(fl_tensor *t);
const void *fl_tensor_cdata(const fl_tensor *t);
/* Shape as "(2000, 28, 28, 1)" into buf. */
const char *fl_tensor_shape_str(const fl_tensor *t, char *buf, size_t n);

/* --------------------------------------------------------- random numbers */

/* Philox 4x32-10: counter-based, so the same (seed, stream, index) gives the
 * same number on any device and in any order. */
uint32_t fl_philox_u32(uint64_t seed, uint64_t stream, uint64_t index);
float fl_philox_uniform(uint64_t seed, uint64_t stream, uint64_t index); /* [0, 1) */

/* ------------------------------------------------------------- activations */

/* The list and each one's Keras name: flynn/activations.h. */
typedef enum fl_activation {
#define FL_ACTIVATION_ENUM_(e, name) FL_##e,
    FL_ACTIVATION_LIST(FL_ACTIVATION_ENUM_)
#undef FL_ACTIVATION_ENUM_
    FL_ACTIVATION_COUNT
} fl_activation;

const char *fl_activation_name(fl_activation a); /* Keras name: "relu" */
/* FL_ERR_INVALID_ARG for an unknown name; *out untouched then. */
fl_status fl_activation_from_name(const char *name, fl_activation *out);

/* ------------------------------------------------------------------ layers */

typedef struct fl_layer fl_layer;

typedef enum fl_padding {
    FL_VALID = 0,
    FL_SAME,
    FL_CAUSAL /* Conv1D only: all the padding before the sequence (Keras "causal") */
} fl_padding;

/* A None axis of an Input (Keras Input(shape=(None, 16))): any length.
 * The model is planned for the length of the data each fit, evaluate or
 * predict brings (and planned again, weights kept, when a later call brings
 * another); layers whose output follows the length (Conv1D, pooling, RNNs
 * with return_sequences, Embedding, MultiHeadAttention, Dense on a rank-3
 * input, masks, ...) work at any length, and a layer whose weights would
 * follow it (Flatten then Dense) is refused with Keras's error when the
 * model is built. Shapes read back through fl_model_input_shape and
 * fl_model_output_shape hold FL_DYNAMIC there; the summary shows None. */
#define FL_DYNAMIC ((int64_t)-1)

/* Input(shape): the shape of one sample, without the batch dimension (an
 * axis may be FL_DYNAMIC). */
fl_layer *fl_input_(int ndim, const int64_t *shape);
#define fl_input(...) \
    fl_input_((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

typedef struct fl_dense_args {
    int _reserved; /* keeps the macros warning-free; leave it out */
    int units;
    fl_activation activation; /* default linear */
    bool no_bias;             /* Keras use_bias=False */
    const char *name;         /* default "dense", "dense_1", ... */
} fl_dense_args;
fl_layer *fl_dense_(fl_dense_args a);
#define fl_dense(...) fl_dense_((fl_dense_args){._reserved = 0, __VA_ARGS__}) /* fl_dense(128, .activation = FL_RELU) */

typedef struct fl_conv2d_args {
    int _reserved; /* keeps the macros warning-free; leave it out */
    int filters;
    int kernel_size;            /* square kernel; kernel_h/kernel_w override */
    int kernel_h, kernel_w;
    int strides;                /* 0 = 1; stride_h/stride_w override */
    int stride_h, stride_w;
    fl_padding padding;         /* default FL_VALID ("same" pads for the dilated kernel) */
    int dilation_rate;          /* 0 = 1; dilation_h/dilation_w override (not with strides > 1, as Keras) */
    int dilation_h, dilation_w;
    fl_activation activation;
    bool no_bias;
    const char *name;
    int groups;                 /* 0 = 1; in channels and filters divisible by it; kernel (kh, kw, in/groups, filters) */
} fl_conv2d_args;
fl_layer *fl_conv2d_(fl_conv2d_args a);
#define fl_conv2d(...) fl_conv2d_((fl_conv2d_args){._reserved = 0, __VA_ARGS__}) /* fl_conv2d(32, 3, ...) */

/* DepthwiseConv2D(kernel_size, ...): each input channel c convolved with
 * its own depth_multiplier filters; output channel c*depth_multiplier + m.
 * Weights as Keras 3: kernel (kh, kw, in, depth_multiplier), bias
 * (in*depth_multiplier,). */
typedef struct fl_depthwise_conv2d_args {
    int _reserved;              /* keeps the macros warning-free; leave it out */
    int kernel_size;            /* square kernel; kernel_h/kernel_w override */
    int kernel_h, kernel_w;
    int strides;                /* 0 = 1; stride_h/stride_w override */
    int stride_h, stride_w;
    fl_padding padding;         /* default FL_VALID */
    int depth_multiplier;       /* 0 = 1 */
    int dilation_rate;          /* 0 = 1; dilation_h/dilation_w override (not with strides > 1, as Keras) */
    fl_activation activation;
    bool no_bias;
    const char *name;
    int dilation_h, dilation_w;
} fl_depthwise_conv2d_args;
fl_layer *fl_depthwise_conv2d_(fl_depthwise_conv2d_args a);
#define fl_depthwise_conv2d(...) \
    fl_depthwise_conv2d_((fl_depthwise_conv2d_args){._reserved = 0, __VA_ARGS__}) /* fl_depthwise_conv2d(3, ...) */

/* SeparableConv2D(filters, kernel_size, ...): a depthwise convolution
 * (strides and padding apply here, no bias) followed by a 1x1 convolution
 * to `filters` channels with the bias and the activation. Weights as Keras
 * 3: depthwise_kernel (kh, kw, in, depth_multiplier), pointwise_kernel
 * (1, 1, in*depth_multiplier, filters), bias (filters,). */
typedef struct fl_separable_conv2d_args {
    int _reserved;              /* keeps the macros warning-free; leave it out */
    int filters;
    int kernel_size;            /* square kernel; kernel_h/kernel_w override */
    int kernel_h, kernel_w;
    int strides;                /* 0 = 1; stride_h/stride_w override */
    int stride_h, stride_w;
    fl_padding padding;         /* default FL_VALID */
    int depth_multiplier;       /* 0 = 1 */
    int dilation_rate;          /* 0 = 1; dilation_h/dilation_w override (not with strides > 1, as Keras) */
    fl_activation activation;
    bool no_bias;
    const char *name;
    int dilation_h, dilation_w; /* the depthwise step's */
} fl_separable_conv2d_args;
fl_layer *fl_separable_conv2d_(fl_separable_conv2d_args a);
#define fl_separable_conv2d(...) \
    fl_separable_conv2d_((fl_separable_conv2d_args){._reserved = 0, __VA_ARGS__}) /* fl_separable_conv2d(64, 3, ...) */

typedef struct fl_pool2d_args {
    int _reserved;    /* keeps the macros warning-free; leave it out */
    int pool_size;    /* 0 = 2 */    /* square window; pool_h/pool_w override */
    int pool_h, pool_w;
    int strides;      /* 0 = pool_size, as Keras strides=None */
    int stride_h, stride_w;
    fl_padding padding;
    const char *name;
} fl_pool2d_args;
fl_layer *fl_max_pooling2d_(fl_pool2d_args a);
fl_layer *fl_average_pooling2d_(fl_pool2d_args a);
#define fl_max_pooling2d(...) fl_max_pooling2d_((fl_pool2d_args){._reserved = 0, __VA_ARGS__})
#define fl_average_pooling2d(...) fl_average_pooling2d_((fl_pool2d_args){._reserved = 0, __VA_ARGS__})
/* fl_max_pooling2d(2) works: the first positional field is pool_size. */

typedef struct fl_name_args { int _reserved; const char *name; } fl_name_args;
fl_layer *fl_flatten_(fl_name_args a);
#define fl_flatten(...) fl_flatten_((fl_name_args){._reserved = 0, __VA_ARGS__})

/* Global pooling over all positions: of an image (2D: (h, w, c) -> (c)) or
 * a sequence (1D: (steps, c) -> (c)); keepdims keeps the pooled axes as 1s. */
typedef struct fl_global_pool_args { int _reserved; bool keepdims; const char *name; } fl_global_pool_args;
fl_layer *fl_global_average_pooling2d_(fl_global_pool_args a);
fl_layer *fl_global_max_pooling2d_(fl_global_pool_args a);
fl_layer *fl_global_average_pooling1d_(fl_global_pool_args a);
fl_layer *fl_global_max_pooling1d_(fl_global_pool_args a);
#define fl_global_average_pooling2d(...) fl_global_average_pooling2d_((fl_global_pool_args){._reserved = 0, __VA_ARGS__})
#define fl_global_max_pooling2d(...) fl_global_max_pooling2d_((fl_global_pool_args){._reserved = 0, __VA_ARGS__})
#define fl_global_average_pooling1d(...) fl_global_average_pooling1d_((fl_global_pool_args){._reserved = 0, __VA_ARGS__})
#define fl_global_max_pooling1d(...) fl_global_max_pooling1d_((fl_global_pool_args){._reserved = 0, __VA_ARGS__})

/* MaxPooling1D / AveragePooling1D over (steps, channels). */
typedef struct fl_pool1d_args {
    int _reserved;   /* keeps the macros warning-free; leave it out */
    int pool_size;   /* 0 = 2 */
    int strides;     /* 0 = pool_size, as Keras strides=None */
    fl_padding padding;
    const char *name;
} fl_pool1d_args;
fl_layer *fl_max_pooling1d_(fl_pool1d_args a);
fl_layer *fl_average_pooling1d_(fl_pool1d_args a);
#define fl_max_pooling1d(...) fl_max_pooling1d_((fl_pool1d_args){._reserved = 0, __VA_ARGS__})
#define fl_average_pooling1d(...) fl_average_pooling1d_((fl_pool1d_args){._reserved = 0, __VA_ARGS__})

/* Conv1D over (steps, channels): kernel (kernel_size, in, filters).
 * padding FL_VALID, FL_SAME or FL_CAUSAL (output t sees inputs <= t). */
typedef struct fl_conv1d_args {
    int _reserved; /* keeps the macros warning-free; leave it out */
    int filters;
    int kernel_size;
    int strides;       /* 0 = 1 */
    fl_padding padding;
    int dilation_rate; /* 0 = 1; not with strides > 1 (as Keras); "causal" pads dilation_rate*(kernel_size-1) */
    fl_activation activation;
    bool no_bias;
    const char *name;
    int groups;        /* 0 = 1; in channels and filters divisible by it; kernel (k, in/groups, filters) */
} fl_conv1d_args;
fl_layer *fl_conv1d_(fl_conv1d_args a);
#define fl_conv1d(...) fl_conv1d_((fl_conv1d_args){._reserved = 0, __VA_ARGS__}) /* fl_conv1d(64, 3, ...) */

/* Reshape(target_shape): per-sample shape; one dimension may be -1. */
fl_layer *fl_reshape_(int ndim, const int64_t *shape);
#define fl_reshape(...) \
    fl_reshape_((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

typedef struct fl_dropout_args {
    int _reserved; /* keeps the macros warning-free; leave it out */
    float rate;
    uint64_t seed; /* 0: derived from the model's seed and the layer index */
    /* Keras noise_shape without the batch: 1 on the axes that share one
     * keep/drop decision, 0 (Keras None) for the input's size; all 0: every
     * element its own. EfficientNet's (None, 1, 1, 1) is {1, 1, 1}. */
    int64_t noise_shape[FL_MAX_DIMS - 1];
    const char *name;
} fl_dropout_args;
fl_layer *fl_dropout_(fl_dropout_args a);
#define fl_dropout(...) fl_dropout_((fl_dropout_args){._reserved = 0, __VA_ARGS__}) /* fl_dropout(0.25) */
/* SpatialDropout2D: whole channels of an image dropped (noise (1, 1, c)). */
fl_layer *fl_spatial_dropout2d_(fl_dropout_args a);
#define fl_spatial_dropout2d(...) fl_spatial_dropout2d_((fl_dropout_args){._reserved = 0, __VA_ARGS__})

typedef struct fl_batch_norm_args {
    int _reserved;
    float momentum; /* 0 = 0.99 */
    float epsilon;  /* 0 = 1e-3 */
    bool no_center; /* Keras center=False: no beta */
    bool no_scale;  /* Keras scale=False: no gamma */
    const char *name;
} fl_batch_norm_args;
fl_layer *fl_batch_normalization_(fl_batch_norm_args a);
#define fl_batch_normalization(...) fl_batch_normalization_((fl_batch_norm_args){._reserved = 0, __VA_ARGS__})

typedef struct fl_activation_args { int _reserved; fl_activation activation; const char *name; } fl_activation_args;
fl_layer *fl_activation_layer_(fl_activation_args a);
#define fl_activation_layer(...) fl_activation_layer_((fl_activation_args){._reserved = 0, __VA_ARGS__})

/* ZeroPadding2D / Cropping2D: rows added to (ZeroPadding2D) or removed from
 * (Cropping2D) the top and bottom of each image, columns on the left and
 * right. `size` applies to every side, `pad_h`/`pad_w` to both sides of one
 * axis, `top`/`bottom`/`left`/`right` to one side; a narrower field
 * overrides a broader one when it is not 0. Keras's
 * padding=((1, 2), (3, 4)) is {.top = 1, .bottom = 2, .left = 3, .right = 4}.
 * All fields 0: Keras's default (ZeroPadding2D 1 on every side,
 * Cropping2D nothing). */
typedef struct fl_padding2d_args {
    int _reserved; /* keeps the macros warning-free; leave it out */
    int size;
    int pad_h, pad_w;
    int top, bottom, left, right;
    const char *name;
} fl_padding2d_args;
fl_layer *fl_zero_padding2d_(fl_padding2d_args a);
fl_layer *fl_cropping2d_(fl_padding2d_args a);
#define fl_zero_padding2d(...) fl_zero_padding2d_((fl_padding2d_args){._reserved = 0, __VA_ARGS__}) /* (1) */
#define fl_cropping2d(...) fl_cropping2d_((fl_padding2d_args){._reserved = 0, __VA_ARGS__})

/* The sequence forms (batch, steps, features): ZeroPadding1D / Cropping1D
 * add zero steps to or remove steps from the start (`left`) and the end
 * (`right`) of each sequence, `size` both; all 0: Keras's default (1 and
 * 1 for both). UpSampling1D repeats each step `size` times (0 = 2).
 * SpatialDropout1D drops whole feature channels (noise (1, features)). */
typedef struct fl_padding1d_args {
    int _reserved; /* keeps the macros warning-free; leave it out */
    int size;
    int left, right;
    const char *name;
} fl_padding1d_args;
fl_layer *fl_zero_padding1d_(fl_padding1d_args a);
fl_layer *fl_cropping1d_(fl_padding1d_args a);
#define fl_zero_padding1d(...) fl_zero_padding1d_((fl_padding1d_args){._reserved = 0, __VA_ARGS__})
#define fl_cropping1d(...) fl_cropping1d_((fl_padding1d_args){._reserved = 0, __VA_ARGS__})
typedef struct fl_up_sampling1d_args { int _reserved; int size; const char *name; } fl_up_sampling1d_args;
fl_layer *fl_up_sampling1d_(fl_up_sampling1d_args a);
#define fl_up_sampling1d(...) fl_up_sampling1d_((fl_up_sampling1d_args){._reserved = 0, __VA_ARGS__})
fl_layer *fl_spatial_dropout1d_(fl_dropout_args a);
#define fl_spatial_dropout1d(...) fl_spatial_dropout1d_((fl_dropout_args){._reserved = 0, __VA_ARGS__})

/* Activation layers with parameters (keras.layers.ReLU, LeakyReLU, ELU,
 * PReLU, Softmax); the names carry _layer where the bare one is an
 * fl_activation (FL_RELU, FL_ELU, FL_SOFTMAX).
 *
 * ReLU: y = min(x, max_value) where x > threshold, negative_slope * (x -
 * threshold) where x < threshold, 0 at threshold. max_value 0 means none
 * (Keras None; INFINITY too); fl_relu_layer(6.0) is MobileNet's ReLU(6.0). */
typedef struct fl_relu_args {
    int _reserved; /* keeps the macros warning-free; leave it out */
    float max_value;      /* 0 = none */
    float negative_slope; /* >= 0 */
    float threshold;      /* >= 0 */
    const char *name;
} fl_relu_args;
fl_layer *fl_relu_layer_(fl_relu_args a);
#define fl_relu_layer(...) fl_relu_layer_((fl_relu_args){._reserved = 0, __VA_ARGS__})

/* LeakyReLU: x > 0 ? x : negative_slope * x; 0 = 0.3, the layer's Keras
 * default (the activation "leaky_relu" uses 0.2). For slope 0 use
 * fl_relu_layer(). */
typedef struct fl_leaky_relu_args { int _reserved; float negative_slope; const char *name; } fl_leaky_relu_args;
fl_layer *fl_leaky_relu_(fl_leaky_relu_args a);
#define fl_leaky_relu(...) fl_leaky_relu_((fl_leaky_relu_args){._reserved = 0, __VA_ARGS__})

/* ELU: x > 0 ? x : alpha * (exp(x) - 1); alpha 0 = 1.0. */
typedef struct fl_elu_args { int _reserved; float alpha; const char *name; } fl_elu_args;
fl_layer *fl_elu_layer_(fl_elu_args a);
#define fl_elu_layer(...) fl_elu_layer_((fl_elu_args){._reserved = 0, __VA_ARGS__})

/* PReLU: x > 0 ? x : alpha * x with a learned weight 'alpha' (zeros at
 * first, as Keras) of the input's per-sample shape, of size 1 on the shared
 * axes: .shared_axes = {1, 2} shares it over an image's rows and columns
 * (one alpha per channel). Axes count the batch as 0; the list ends at the
 * first 0. */
typedef struct fl_prelu_args { int _reserved; int shared_axes[FL_MAX_DIMS]; const char *name; } fl_prelu_args;
fl_layer *fl_prelu_(fl_prelu_args a);
#define fl_prelu(...) fl_prelu_((fl_prelu_args){._reserved = 0, __VA_ARGS__})

/* Softmax along `axis` (0 = -1, the last; counts the batch as 0). */
typedef struct fl_softmax_args { int _reserved; int axis; const char *name; } fl_softmax_args;
fl_layer *fl_softmax_layer_(fl_softmax_args a);
#define fl_softmax_layer(...) fl_softmax_layer_((fl_softmax_args){._reserved = 0, __VA_ARGS__})

/* Preprocessing layers.
 *
 * Rescaling: y = x * scale + offset (scalars): fl_rescaling(1.0 / 255). */
typedef struct fl_rescaling_args { int _reserved; float scale; float offset; const char *name; } fl_rescaling_args;
fl_layer *fl_rescaling_(fl_rescaling_args a);
#define fl_rescaling(...) fl_rescaling_((fl_rescaling_args){._reserved = 0, __VA_ARGS__})

/* Normalization: y = (x - mean) / max(sqrt(variance), 1e-7), per index of
 * `axis` (0 = -1, the last; counts the batch as 0), or with one mean and
 * variance for all values when axis_none (Keras axis=None); invert: y =
 * mean + x * max(sqrt(variance), 1e-7). Given .mean and .variance (`size`
 * values each: 1, broadcast, or the axis's length; copied) they are
 * constants of the layer (Keras's mean=..., variance=...). Without them the
 * layer has Keras's adapted state as non-trainable weights 'mean' (zeros),
 * 'variance' (ones) and 'count', to be set with fl_layer_set_weight or
 * loaded from a Keras file. Gradients flow to x only. */
typedef struct fl_normalization_args {
    int _reserved;
    int axis;
    bool axis_none;
    const float *mean, *variance;
    int size;
    bool invert;
    const char *name;
} fl_normalization_args;
fl_layer *fl_normalization_(fl_normalization_args a);
#define fl_normalization(...) fl_normalization_((fl_normalization_args){._reserved = 0, __VA_ARGS__})


/* UpSampling2D: each image made size_h x size_w times larger. `size`
 * applies to both axes (0 = 2), size_h/size_w override it. interpolation
 * FL_NEAREST (default: each pixel repeated) or FL_BILINEAR (Keras 3's, as
 * jax.image.resize: half-pixel centres, edges clamped). */
typedef enum fl_interpolation { FL_NEAREST = 0, FL_BILINEAR } fl_interpolation;
typedef struct fl_up_sampling2d_args {
    int _reserved; /* keeps the macros warning-free; leave it out */
    int size;
    int size_h, size_w;
    fl_interpolation interpolation;
    const char *name;
} fl_up_sampling2d_args;
fl_layer *fl_up_sampling2d_(fl_up_sampling2d_args a);
#define fl_up_sampling2d(...) fl_up_sampling2d_((fl_up_sampling2d_args){._reserved = 0, __VA_ARGS__}) /* (2) */

/* Conv2DTranspose (a "deconvolution"), with Conv2D's arguments: kernel
 * (kh, kw, filters, in channels) as Keras; output size per axis in*s +
 * max(k - s, 0) ("valid") or in*s ("same"), Keras's output_padding=None
 * (no other output_padding is supported); dilation_rate and groups 1 only. */
fl_layer *fl_conv2d_transpose_(fl_conv2d_args a);
#define fl_conv2d_transpose(...) fl_conv2d_transpose_((fl_conv2d_args){._reserved = 0, __VA_ARGS__}) /* (64, 3, ...) */

/* Resizing(height, width): images resized to height x width, as Keras 3's
 * Resizing (jax.image.resize, antialias off): bilinear by default, or
 * nearest; crop_to_aspect_ratio crops the largest centred window of the
 * target's aspect ratio first, pad_to_aspect_ratio pads with zeros to it
 * (not both). No weights; gradients pass through. */
typedef struct fl_resizing_args {
    int _reserved;             /* keeps the macros warning-free; leave it out */
    int height, width;
    bool nearest;              /* interpolation="nearest" (default "bilinear", as Keras) */
    bool crop_to_aspect_ratio;
    bool pad_to_aspect_ratio;
    const char *name;
} fl_resizing_args;
fl_layer *fl_resizing_(fl_resizing_args a);
#define fl_resizing(...) fl_resizing_((fl_resizing_args){._reserved = 0, __VA_ARGS__}) /* fl_resizing(64, 64) */

/* Permute(dims): reorders the non-batch axes; dims are 1-based as Keras's,
 * fl_permute(2, 1) swaps the two axes of a (steps, features) input. */
fl_layer *fl_permute_(int ndim, const int *dims);
#define fl_permute(...) fl_permute_((int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), (int[]){__VA_ARGS__})

/* Sequences: integer inputs, Embedding, Masking (Keras's text models).
 *
 * Input(shape, dtype="int32"): an input of integer values (token indices),
 * carried as int32 and never rounded through float. fit/evaluate/predict
 * take an FL_INT32 (or FL_UINT8) x for it; a float32 x is converted when
 * every value is an integer in int32's range and refused otherwise (Keras
 * would truncate 1.5 to 1 silently). FL_FLOAT32 is the ordinary Input. */
fl_layer *fl_input_dtype_(fl_dtype dtype, int ndim, const int64_t *shape);
#define fl_input_dtype(dtype, ...) \
    fl_input_dtype_((dtype), (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})
/* The dtype of model input i: FL_FLOAT32 or FL_INT32 (-1: no such input). */
typedef struct fl_model fl_model;
int fl_model_input_dtype(const fl_model *m, int i);
/* keras.Input(shape, dtype=...) for functional models. */
typedef struct fl_sym fl_sym;
fl_sym *fl_keras_input_dtype_(fl_dtype dtype, int ndim, const int64_t *shape, const char *name);
#define fl_keras_input_dtype(dtype, ...) \
    fl_keras_input_dtype_((dtype), (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}, NULL)

/* Embedding(input_dim, output_dim): row x of the weight 'embeddings'
 * (input_dim, output_dim), initialised uniform(-0.05, 0.05) as Keras, for
 * each index x of the input; output shape = input shape + (output_dim,).
 * The indices come straight from a model input (int32, or floats truncated
 * as Keras casts them); an index outside [0, input_dim) is refused when
 * the data comes in, naming the layer, the sample and the index (Keras on
 * JAX would clip it silently). mask_zero: index 0 is padding, and the
 * output carries the mask (batch, steps) of the other indices, as Keras's. */
typedef struct fl_embedding_args {
    int _reserved; /* keeps the macros warning-free; leave it out */
    int input_dim;
    int output_dim;
    bool mask_zero;
    const char *name;
} fl_embedding_args;
fl_layer *fl_embedding_(fl_embedding_args a);
#define fl_embedding(...) fl_embedding_((fl_embedding_args){._reserved = 0, __VA_ARGS__}) /* fl_embedding(1000, 64) */

/* Masking(mask_value): a step of a (batch, steps, features) sequence whose
 * features all equal mask_value (default 0) is masked: its output is 0 and
 * the layers after it skip it where Keras's do (the mask passes through
 * Dense, Dropout, activations, Rescaling, Normalization; merges combine
 * masks; GlobalAveragePooling1D averages the valid steps only; the loss
 * weighs the valid steps of a (batch, steps, ...) output, the metrics
 * count every step, as Keras 3.15's). */
typedef struct fl_masking_args { int _reserved; float mask_value; const char *name; } fl_masking_args;
fl_layer *fl_masking_(fl_masking_args a);
#define fl_masking(...) fl_masking_((fl_masking_args){._reserved = 0, __VA_ARGS__})

/* Frees a layer that was never put into a model (a model owns its layers). */
void fl_layer_free(fl_layer *l);

/* Merge layers for functional models (keras.layers.Add, Multiply,
 * Concatenate): 2 or more inputs of one shape (Concatenate: equal except on
 * `axis`, default -1, the last; the batch is not an axis here, as in Keras). */
typedef struct fl_concat_args { int _reserved; int axis; const char *name; } fl_concat_args;
fl_layer *fl_add_(fl_name_args a);
fl_layer *fl_multiply_(fl_name_args a);
fl_layer *fl_concatenate_(fl_concat_args a);
#define fl_add(...) fl_add_((fl_name_args){._reserved = 0, __VA_ARGS__})
#define fl_multiply(...) fl_multiply_((fl_name_args){._reserved = 0, __VA_ARGS__})
/* Subtract (exactly two inputs: a - b), Average, Maximum, Minimum. */
fl_layer *fl_subtract_(fl_name_args a);
fl_layer *fl_average_(fl_name_args a);
fl_layer *fl_maximum_(fl_name_args a);
fl_layer *fl_minimum_(fl_name_args a);
#define fl_subtract(...) fl_subtract_((fl_name_args){._reserved = 0, __VA_ARGS__})
#define fl_average(...) fl_average_((fl_name_args){._reserved = 0, __VA_ARGS__})
#define fl_maximum(...) fl_maximum_((fl_name_args){._reserved = 0, __VA_ARGS__})
#define fl_minimum(...) fl_minimum_((fl_name_args){._reserved = 0, __VA_ARGS__})
#define fl_concatenate(...) fl_concatenate_((fl_concat_args){._reserved = 0, __VA_ARGS__})

/* ------------------------------------------- sequences: normalisation and attention */

/* LayerNormalization over `axis` (0 = -1, the last; the batch is axis 0) or
 * over the several axes listed in `axes` (0-terminated); flynn normalises
 * trailing axes only ([-2, -1], [1, 2] of a rank-3 input). gamma and beta
 * have the normalised axes' shape. epsilon 0 = Keras's 1e-3. rms_scaling:
 * Keras's (deprecated) y = x / sqrt(var + eps) * gamma, without beta. */
typedef struct fl_layer_normalization_args {
    int _reserved;
    int axis;
    int axes[FL_MAX_DIMS];
    float epsilon;
    bool no_center, no_scale, rms_scaling;
    const char *name;
} fl_layer_normalization_args;
fl_layer *fl_layer_normalization_(fl_layer_normalization_args a);
#define fl_layer_normalization(...) fl_layer_normalization_((fl_layer_normalization_args){._reserved = 0, __VA_ARGS__})

/* MultiHeadAttention, called as fl_call_n(mha, query, value[, key[,
 * attention_mask]]) (key defaults to value; the mask is (batch, Tq, Tk),
 * 1 = attend): the query, key and value projections (EinsumDense kernels
 * (d, num_heads, key_dim) and biases (num_heads, key_dim); value_dim 0 =
 * key_dim), softmax(q k^T / sqrt(key_dim)) with the masks of Keras (query
 * and value masks of the inputs, the attention mask, use_causal_mask),
 * dropout on the weights, and the output projection to output_shape (0 =
 * the query's features). Attention over the sequence axis only (Keras's
 * attention_axes None). */
typedef struct fl_multi_head_attention_args {
    int num_heads, key_dim;
    int value_dim;
    float dropout;
    bool no_bias;
    int output_shape;
    bool use_causal_mask;
    uint64_t seed;
    const char *name;
} fl_multi_head_attention_args;
fl_layer *fl_multi_head_attention_(fl_multi_head_attention_args a);
#define fl_multi_head_attention(heads_, key_dim_, ...) \
    fl_multi_head_attention_((fl_multi_head_attention_args){.num_heads = (heads_), .key_dim = (key_dim_), __VA_ARGS__})

/* Attention (Keras's Attention layer), called as fl_call_n(att, query,
 * value[, key]): softmax(scores) value, with the query and value masks and
 * use_causal_mask as Keras; dropout on the weights. Scores: score_mode
 * "dot" (default, Luong): query key^T, times a learned scalar "scale" with
 * use_scale; "concat" (Bahdanau): concat_score_weight * sum over features of
 * tanh(scale * (query_i + key_j)), scale 1 without use_scale (query and key
 * of equal features). The learned scalars start at 1, as Keras's. */
typedef struct fl_attention_args {
    int _reserved;
    float dropout;
    bool use_causal_mask;
    uint64_t seed;
    const char *name;
    bool use_scale;
    const char *score_mode;   /* NULL or "dot", or "concat" */
    bool score_concat;        /* (resolved from score_mode) */
} fl_attention_args;
fl_layer *fl_attention_layer_(fl_attention_args a);
#define fl_attention_layer(...) fl_attention_layer_((fl_attention_args){._reserved = 0, __VA_ARGS__})

/* RepeatVector: (batch, features) -> (batch, n, features). */
fl_layer *fl_repeat_vector_(int n, fl_name_args a);
#define fl_repeat_vector(n, ...) fl_repeat_vector_((n), (fl_name_args){._reserved = 0, __VA_ARGS__})

/* TimeDistributed: applies `layer` to every timestep of a (batch, steps,
 * ...) input, with one set of weights: any layer of one float input (Conv2D,
 * pooling, Flatten, BatchNormalization with per-step statistics as Keras 3,
 * a recurrent layer over an inner axis, ...). Layers that act on the last
 * axis or element-wise run once on the whole sequence, the others step by
 * step. It takes ownership of `layer`, also on failure. */
fl_layer *fl_time_distributed_(fl_layer *layer, fl_name_args a);
#define fl_time_distributed(layer, ...) fl_time_distributed_((layer), (fl_name_args){._reserved = 0, __VA_ARGS__})

/* ------------------------------------------------------------------ models */

typedef struct fl_model fl_model;

/* Takes ownership of the layers, also on failure. The first layer must be
 * fl_input(...). */
fl_model *fl_sequential_(fl_layer *const *layers, int n, const char *name);
#define fl_sequential(...) \
    fl_sequential_((fl_layer *const[]){__VA_ARGS__}, \
                   (int)(sizeof((fl_layer *const[]){__VA_ARGS__}) / sizeof(fl_layer *)), NULL)
void fl_model_free(fl_model *m);

/* Functional models, as keras.Input / layer(x) / keras.Model(inputs, outputs):
 *
 *     fl_sym *a = fl_keras_input(16), *b = fl_keras_input(16);
 *     fl_layer *shared = fl_dense(8, .activation = FL_RELU);
 *     fl_sym *x = fl_call_n(fl_concatenate(), fl_call(shared, a), fl_call(shared, b));
 *     fl_sym *y = fl_call(fl_dense(1, .activation = FL_SIGMOID), x);
 *     fl_model *m = fl_model_new(fl_syms(a, b), fl_syms(y), "siamese");
 *
 * A layer called twice shares its weights. fl_model_new takes ownership of
 * every layer and symbolic tensor reachable from its inputs and outputs,
 * also when it fails (it frees them then). A call on a NULL layer or input
 * returns NULL, frees the layer if nothing uses it yet, and keeps the first
 * error's message, so that errors surface at fl_model_new. */
typedef struct fl_sym fl_sym;
fl_sym *fl_keras_input_(int ndim, const int64_t *shape, const char *name);
#define fl_keras_input(...) \
    fl_keras_input_((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}, NULL)
#define fl_keras_input_named(name, ...) \
    fl_keras_input_((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}, (name))
fl_sym *fl_call_n_(fl_layer *layer, fl_sym *const *inputs, int n);
#define fl_call(layer, x) fl_call_n_((layer), (fl_sym *const[]){(x)}, 1)
#define fl_call_n(layer, ...) \
    fl_call_n_((layer), (fl_sym *const[]){__VA_ARGS__}, (int)(sizeof((fl_sym *const[]){__VA_ARGS__}) / sizeof(fl_sym *)))
#define fl_syms(...) (fl_sym *const[]){__VA_ARGS__}, (int)(sizeof((fl_sym *const[]){__VA_ARGS__}) / sizeof(fl_sym *))
fl_model *fl_model_new(fl_sym *const *inputs, int n_inputs, fl_sym *const *outputs, int n_outputs, const char *name);

int fl_model_num_inputs(const fl_model *m);
int fl_model_num_outputs(const fl_model *m);
/* The per-sample shape of input/output i into shape[FL_MAX_DIMS]; returns ndim (-1 if i is out of range).
 * An axis that follows a None input axis is FL_DYNAMIC. */
int fl_model_input_shape(const fl_model *m, int i, int64_t *shape);
int fl_model_output_shape(const fl_model *m, int i, int64_t *shape);

/* Seed for weight initialisation, dropout masks and shuffling. Default 0
 * (deterministic); call before compile to change initial weights. */
fl_status fl_model_set_seed(fl_model *m, uint64_t seed);

/* The Keras summary() table. Writes to stdout when out is NULL. */
fl_status fl_model_summary(const fl_model *m, void *out /* FILE* */);
int64_t fl_model_count_params(const fl_model *m);
int64_t fl_model_count_trainable_params(const fl_model *m);
/* The arithmetic of one sample, as keras-flops and fvcore count it: 2 FLOPs
 * per multiply-add of Dense, the convolutions, the recurrent cells and
 * attention (element-wise work and Embedding lookups not counted). train:
 * the forward plus the backward products a training step runs (a weight's
 * gradient when it is trainable, an input's when something below it is).
 * Either pointer may be NULL. */
fl_status fl_model_flops(const fl_model *m, double *forward, double *train);
/* A model's memory: weights, their gradients (trainable ones), the
 * optimizer's slots (once compiled), and per sample of the batch the values,
 * gradients and saved state of every layer that a training step keeps (the
 * buffers grow with the batch size: bytes_per_sample * batch; gradients
 * share memory once read), and what predict and evaluate keep (values only,
 * each layer's freed for another's once its readers ran), plus the
 * convolution workspace of the batch size reserved so far. */
typedef struct fl_memory_info {
    int64_t weight_bytes, gradient_bytes, optimizer_bytes;
    int64_t bytes_per_sample;           /* training's batch buffers (values, gradients, aux) per sample */
    int64_t fixed_bytes;     /* per-layer state that does not grow with the batch */
    int64_t workspace_bytes; /* 0 until a batch size is reserved (fit, predict) */
    int64_t inference_bytes_per_sample; /* predict's and evaluate's (values only, reused by lifetime) */
} fl_memory_info;
fl_status fl_model_memory(const fl_model *m, fl_memory_info *out);

int fl_model_num_layers(const fl_model *m);
fl_layer *fl_model_layer(const fl_model *m, int index);
fl_layer *fl_model_get_layer(const fl_model *m, const char *name);
const char *fl_layer_name(const fl_layer *l);
const char *fl_layer_class(const fl_layer *l); /* "Conv2D" */
/* The layer's weights in Keras order (Dense: kernel (in, out), bias; Conv2D:
 * kernel (kh, kw, in, out), bias; BatchNormalization: gamma, beta,
 * moving_mean, moving_variance). Borrowed, valid until the next call for
 * the same weight or until the model moves to another device. On the CPU it
 * is a view (writes change the model); on a GPU it is a host copy taken at
 * the call. fl_layer_set_weight works on both. */
int fl_layer_num_weights(const fl_layer *l);
fl_tensor *fl_layer_weight(fl_layer *l, int index);
/* Copies t (float32, the weight's shape) into the weight. */
fl_status fl_layer_set_weight(fl_layer *l, int index, const fl_tensor *t);
const char *fl_layer_weight_name(const fl_layer *l, int index); /* "kernel" */

/* Freezing, as Keras's layer.trainable = False (transfer learning): a frozen
 * layer's weights are not updated and count as non-trainable, and a frozen
 * BatchNormalization runs in inference mode also in training (it normalises
 * with its moving statistics and leaves them as they are). Gradients still
 * flow through a frozen layer to the layers before it. fl_model_set_trainable
 * sets every layer, as model.trainable does. Keras needs compile() again after
 * a change; flynn rebinds the optimizer at the next fl_fit by itself, which,
 * as a Keras recompile, starts its state (momenta, moments) afresh. Frozen
 * layers are saved as "trainable": false in .keras, .h5 and JSON files and
 * read back frozen. */
fl_status fl_layer_set_trainable(fl_layer *l, bool trainable);
bool fl_layer_trainable(const fl_layer *l);
fl_status fl_model_set_trainable(fl_model *m, bool trainable);

/* --------------------------------------------------------------- optimizers */

typedef struct fl_optimizer fl_optimizer;

typedef struct fl_sgd_args {
    int _reserved;
    float learning_rate; /* 0 = 0.01 */
    float momentum;      /* 0.0 */
    bool nesterov;
    /* at most one of the three clips, as Keras: each weight's gradient to
     * this L2 norm, every element to [-clipvalue, clipvalue], or all
     * gradients together to this global L2 norm. 0 = none. */
    float clipnorm, clipvalue, global_clipnorm;
    /* a schedule (kind != FL_SCHEDULE_NONE) replaces learning_rate */
    const struct fl_lr_schedule *learning_rate_schedule; /* copied; NULL = none */
} fl_sgd_args;
typedef struct fl_adam_args {
    int _reserved;
    float learning_rate; /* 0 = 0.001 */
    float beta_1;        /* 0 = 0.9 */
    float beta_2;        /* 0 = 0.999 */
    float epsilon;       /* 0 = 1e-7 */
    float weight_decay;  /* AdamW only: 0 = 0.004; use a negative value for none */
    /* at most one of the three clips, as Keras: each weight's gradient to
     * this L2 norm, every element to [-clipvalue, clipvalue], or all
     * gradients together to this global L2 norm. 0 = none. */
    float clipnorm, clipvalue, global_clipnorm;
    /* a schedule (kind != FL_SCHEDULE_NONE) replaces learning_rate */
    const struct fl_lr_schedule *learning_rate_schedule; /* copied; NULL = none */
} fl_adam_args;
typedef struct fl_rmsprop_args {
    int _reserved;
    float learning_rate; /* 0 = 0.001 */
    float rho;           /* 0 = 0.9 */
    float momentum;      /* 0.0 */
    float epsilon;       /* 0 = 1e-7 */
    bool centered;
    /* at most one of the three clips, as Keras: each weight's gradient to
     * this L2 norm, every element to [-clipvalue, clipvalue], or all
     * gradients together to this global L2 norm. 0 = none. */
    float clipnorm, clipvalue, global_clipnorm;
    /* a schedule (kind != FL_SCHEDULE_NONE) replaces learning_rate */
    const struct fl_lr_schedule *learning_rate_schedule; /* copied; NULL = none */
} fl_rmsprop_args;

fl_optimizer *fl_sgd_(fl_sgd_args a);
fl_optimizer *fl_adam_(fl_adam_args a);
fl_optimizer *fl_adamw_(fl_adam_args a);
fl_optimizer *fl_rmsprop_(fl_rmsprop_args a);
#define fl_sgd(...) fl_sgd_((fl_sgd_args){._reserved = 0, __VA_ARGS__})
#define fl_adam(...) fl_adam_((fl_adam_args){._reserved = 0, __VA_ARGS__})
#define fl_adamw(...) fl_adamw_((fl_adam_args){._reserved = 0, __VA_ARGS__})
#define fl_rmsprop(...) fl_rmsprop_((fl_rmsprop_args){._reserved = 0, __VA_ARGS__})
/* Frees an optimizer that was not given to fl_compile (which takes it). */
void fl_optimizer_free(fl_optimizer *o);
const char *fl_optimizer_name(const fl_optimizer *o);
int64_t fl_optimizer_iterations(const fl_optimizer *o);

/* ------------------------------------------------------- losses and metrics */

typedef enum fl_loss_kind {
    FL_LOSS_NONE = 0,
    FL_LOSS_CATEGORICAL_CROSSENTROPY,
    FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
    FL_LOSS_BINARY_CROSSENTROPY,
    FL_LOSS_MEAN_SQUARED_ERROR,
} fl_loss_kind;

typedef struct fl_loss {
    fl_loss_kind kind;
    bool from_logits; /* crossentropies: the output is logits, not probabilities */
} fl_loss;

#define FL_CATEGORICAL_CROSSENTROPY ((fl_loss){.kind = FL_LOSS_CATEGORICAL_CROSSENTROPY})
#define FL_SPARSE_CATEGORICAL_CROSSENTROPY ((fl_loss){.kind = FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY})
#define FL_BINARY_CROSSENTROPY ((fl_loss){.kind = FL_LOSS_BINARY_CROSSENTROPY})
#define FL_MEAN_SQUARED_ERROR ((fl_loss){.kind = FL_LOSS_MEAN_SQUARED_ERROR})
#define fl_categorical_crossentropy(...) ((fl_loss){.kind = FL_LOSS_CATEGORICAL_CROSSENTROPY, __VA_ARGS__})
#define fl_sparse_categorical_crossentropy(...) ((fl_loss){.kind = FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, __VA_ARGS__})
#define fl_binary_crossentropy(...) ((fl_loss){.kind = FL_LOSS_BINARY_CROSSENTROPY, __VA_ARGS__})
const char *fl_loss_name(fl_loss_kind k);

typedef enum fl_metric {
    FL_METRIC_NONE = 0,
    FL_ACCURACY,                      /* resolved from the loss, as Keras "accuracy" */
    FL_CATEGORICAL_ACCURACY,
    FL_SPARSE_CATEGORICAL_ACCURACY,
    FL_BINARY_ACCURACY,
    FL_MAE,                           /* mean absolute error, key "mae" (Keras metrics=["mae"]) */
    FL_MSE,                           /* mean squared error, key "mse" */
    FL_METRIC_MEAN_ABSOLUTE_ERROR,    /* the same, key "mean_absolute_error" (MeanAbsoluteError()) */
    FL_METRIC_MEAN_SQUARED_ERROR,     /* key "mean_squared_error" */
} fl_metric;
#define FL_MAX_METRICS 4

/* fl_compile(model, optimizer, loss, metrics...). Takes the optimizer. */
fl_status fl_compile_(fl_model *m, fl_optimizer *opt, fl_loss loss, const fl_metric *metrics, int n);
#define fl_compile(m, opt, loss, ...) \
    fl_compile_((m), (opt), (loss), (fl_metric[]){FL_METRIC_NONE, __VA_ARGS__} + 1, \
                (int)(sizeof((fl_metric[]){FL_METRIC_NONE, __VA_ARGS__}) / sizeof(fl_metric)) - 1)

/* The built-in models of the `flynn` command, by name: "mnist_cnn" (the
 * Keras mnist_cnn example: 2 conv, max-pool, dropout, dense 128, softmax) and
 * "mlp" (Keras mnist_mlp: 512-512 relu with dropout 0.2). Input (h, w, c),
 * `classes` outputs, not compiled. */
fl_model *fl_builtin_model(const char *name, int64_t h, int64_t w, int64_t c, int classes);
/* The built-in text models, on int32 token sequences (steps,) with tokens
 * in [0, vocab), 0 = padding: "lstm_text" (Embedding(vocab, 32,
 * mask_zero=True), LSTM(64), Dense(classes, softmax): the keras.io LSTM
 * classifier) and "transformer_text" (Embedding(vocab, 32), Conv1D(32, 3,
 * same, relu), one Transformer block: MultiHeadAttention(2 heads, key_dim
 * 16) + residual + LayerNormalization, Dense 64 relu / 32 + residual +
 * LayerNormalization, then GlobalAveragePooling1D, Dropout(0.1),
 * Dense(classes, softmax): keras.io's Transformer classifier with a
 * convolution in place of its position embedding). Not compiled. */
fl_model *fl_builtin_text_model(const char *name, int64_t steps, int64_t vocab, int classes);
/* Whether a built-in model name is a text model (fl_builtin_text_model). */
bool fl_builtin_model_is_text(const char *name);
/* Names of the built-in models (image and text), NULL-terminated. */
const char *const *fl_builtin_model_names(void);

/* ------------------------------------------------------------------ devices */

typedef enum fl_device_kind { FL_DEVICE_AUTO = 0, FL_DEVICE_CPU, FL_DEVICE_GPU, FL_DEVICE_OPENCL } fl_device_kind;

/* Chooses where the model runs. GPU is NVIDIA's through CUDA; OPENCL is an
 * OpenCL device of any vendor ($FLYNN_OPENCL_DEVICE: its number or part of
 * its name; a GPU is preferred, else the first device, PoCL's CPU device
 * included). AUTO takes CUDA when usable, else an OpenCL GPU, else the CPU
 * (never a CPU OpenCL device). GPU and OPENCL fail (FL_ERR_DEVICE) with the
 * reason when the device is not usable or lacks a kernel the model needs.
 * `why` (may be NULL) receives one line: the device chosen and why. */
fl_status fl_model_set_device(fl_model *m, fl_device_kind kind, char *why, size_t why_len);
/* The device the model runs on now (FL_DEVICE_CPU, FL_DEVICE_GPU or FL_DEVICE_OPENCL). */
fl_device_kind fl_model_device(const fl_model *m);
/* Why the GPU cannot be used ("" if it can): the one-line diagnosis. */
fl_status fl_gpu_probe(char *why, size_t why_len);
/* float32 matrix products and convolutions on the GPU: "high" (the default,
 * as TensorFlow's) lets cuBLAS/cuDNN use TF32 tensor cores (about 3 decimal
 * digits per product, much faster); "highest" keeps full float32. The CPU
 * always computes in full float32. $FLYNN_MATMUL_PRECISION sets the
 * default. FL_ERR_INVALID_ARG for another name. */
fl_status fl_set_matmul_precision(const char *precision);
const char *fl_get_matmul_precision(void);
/* The memory one model may take: its weights (with their gradients) and its
 * batch buffers. A model file, a layer or a batch size that would need more
 * is refused, naming the layer and the size, before anything is allocated
 * (docs/reliability.md, "Limits and faults"). Default: half of the physical
 * memory (or of the container's limit); $FLYNN_MAX_MODEL_BYTES ("16G",
 * "512M", bytes) overrides the default, and this call both. 0 restores the
 * default. */
fl_status fl_set_max_model_bytes(int64_t bytes);
int64_t fl_get_max_model_bytes(void);
/* Threads the CPU backend (and OpenBLAS) use. The default (and n = 0):
 * $OMP_NUM_THREADS when it is a positive integer, else the CPUs this process
 * may run on: its affinity mask (taskset, docker --cpuset-cpus) and its
 * cgroup CPU quota (docker --cpus, Kubernetes limits), rounded up; n > 0
 * wins over it. */
void fl_set_num_threads(int n);
int fl_get_num_threads(void);
/* The threads in use now: fl_get_num_threads(), or fewer while other
 * processes keep this process's CPUs busy. Between training and inference
 * steps, 0.1 s after the first and then about once a second, flynn compares the CPU time its CPUs spent
 * busy (/proc/stat, over the affinity mask) with its own: where the CPUs
 * that others leave idle hold fewer threads than it has, it runs that many
 * (at least one), and all of them again once the others stop. Beside one
 * CPU-bound process on two cores, two threads kept one core between them
 * and lost 5-20% to waiting for each other (docs/performance.md, "What a
 * busy machine leaves"). Off under a cgroup CPU quota (a container's
 * /proc/stat counts the whole host) and with FLYNN_FOLLOW_LOAD=0. */
int fl_num_threads_in_use(void);
/* The default thread count, and in why (may be NULL) where it comes from
 * ("OMP_NUM_THREADS", "cgroup CPU quota 1.50 of 4 CPUs", "2 CPUs available"). */
int fl_default_num_threads(char *why, size_t why_len);

/* The BLAS behind the CPU path: OpenBLAS's kernel set (its core name, ""
 * for another BLAS), the best kernel set this CPU runs (SkylakeX with
 * AVX-512, Haswell or Zen with AVX2), and `weaker` when OpenBLAS runs older
 * kernels than that: an OpenBLAS older than the CPU falls back to its SSE3
 * "Prescott" kernels, several times slower. OPENBLAS_CORETYPE, read when
 * OpenBLAS loads, is the remedy: the flynn command sets it and restarts
 * itself; a program linking libflynn sets it before it starts. `note`: one
 * line saying which, for a device line. */
typedef struct fl_blas_info {
    char core[64], best_core[64];
    char config[256];
    bool weaker;
    char note[320];
} fl_blas_info;
void fl_blas_info_get(fl_blas_info *out);

/* ------------------------------------------------------------- training */

typedef enum fl_verbose {
    FL_VERBOSE_AUTO = 0, /* Keras "auto": the bar on a terminal, one line per epoch otherwise */
    FL_VERBOSE_SILENT,   /* Keras verbose=0 */
    FL_VERBOSE_BAR,      /* Keras verbose=1 */
    FL_VERBOSE_EPOCH,    /* Keras verbose=2 */
} fl_verbose;

typedef struct fl_history fl_history;

typedef struct fl_callback fl_callback; /* below, with the built-in callbacks */

/* Called after every epoch; return false to stop training. */
typedef bool (*fl_epoch_callback)(fl_model *m, int epoch, const fl_history *h, void *user);

typedef struct fl_data_stream fl_data_stream; /* samples read in batches from disk (data section) */
typedef struct fl_fit_args {
    int _reserved;
    int batch_size;           /* 0 = 32 */
    int epochs;               /* 0 = 1 */
    fl_verbose verbose;
    float validation_split;   /* the last fraction of x/y, taken before shuffling */
    const fl_tensor *validation_x, *validation_y; /* Keras validation_data */
    bool no_shuffle;          /* Keras shuffle=False */
    int initial_epoch;
    fl_epoch_callback on_epoch_end;
    void *user;
    void *out;                /* FILE* for progress output; NULL = stdout */
    /* Keras TerminateOnNaN, on by default: each batch's x is checked for NaN
     * and infinities as it is loaded (y once), and the loss after each step
     * (on a GPU: whenever the running loss is read, at least every epoch);
     * a non-finite value stops fl_fit with FL_ERR_NONFINITE and a message
     * naming the epoch, the step, the sample and feature, or the first layer
     * whose weight, output or gradient is not finite. true turns it off. */
    bool no_nan_check;
    fl_callback *const *callbacks; /* NULL-terminated list (see fl_callback below) */
    /* fl_fit_stream only: validation samples from a stream (Keras
     * validation_data), read without augmentation; how many batches a
     * background thread reads ahead of the step (0 = 2; -1 = none: each
     * batch is read when the step asks for it); and how many threads read
     * them (0 = 1). */
    fl_data_stream *validation_stream;
    int prefetch, workers;
    /* Keras fit(sample_weight=...): a weight per sample, (N,) or (N, 1), or
     * for an output of steps (N, steps, classes) also one per step, (N,
     * steps). Each loss row is multiplied by its weight and the sum divided
     * by the rows of the batch, weighted or not (Keras "sum_over_batch_size":
     * a weight of 2 counts a sample twice; weights of 0 lower the loss, they
     * do not average over fewer samples); with an output mask the two
     * multiply, as Keras merges them. The compiled metrics stay unweighted,
     * as Keras's `metrics`. Weights must be finite and >= 0. With
     * validation_split the weights are split as x and y are. */
    const fl_tensor *sample_weight;
    /* Keras fit(class_weight={k: w}): class_weight[k] weighs the samples
     * whose y is class k (y's argmax for one-hot y, y rounded half to even
     * for one value a sample), for k < num_class_weights; classes beyond
     * weigh 1, as a class missing from Keras's dict. Not with sample_weight;
     * for training only (the validation data stay unweighted, as in Keras);
     * an output with one class per sample only; num_class_weights at most
     * the output's classes (2 for one sigmoid unit). */
    const float *class_weight;
    int num_class_weights;
    const fl_tensor *validation_sample_weight;     /* with validation_x/xs and validation_y */
    const fl_tensor *const *validation_xs;         /* fl_fit_multi: one array per input (instead of validation_x) */
} fl_fit_args;

/* x: (N, ...input shape), float32 (int32 converted as x.astype("float32"));
 * for an int32 Input (fl_input_dtype) int32, uint8, or float32 holding
 * integers. y: (N,) class indices (float32 or int32/uint8) for sparse
 * losses ((N, steps) for a (steps, classes) output), or (N, ...output
 * shape) targets. Returns NULL on error. */
fl_history *fl_fit_(fl_model *m, const fl_tensor *x, const fl_tensor *y, fl_fit_args a);
#define fl_fit(m, x, y, ...) fl_fit_((m), (x), (y), (fl_fit_args){._reserved = 0, __VA_ARGS__})
/* fl_fit on a stream (a data set read from disk batch by batch, see
 * fl_data_stream below): the same epochs, shuffling (the order of each epoch
 * is the one fl_fit draws for the same seed, so the same samples give the
 * same weights bit for bit), callbacks, progress bar and History. The
 * batches are read by .workers threads, .prefetch batches ahead of the
 * step; the progress line adds the time each step waited for its batch
 * ("data 0us/step": the input pipeline keeps up), and
 * fl_history_data_seconds says the same afterwards. validation_split takes
 * the stream's last samples as fl_fit does; a read error (an unreadable
 * image) stops training with the stream's message, naming the file. */
fl_history *fl_fit_stream_(fl_model *m, fl_data_stream *train, fl_fit_args a);
#define fl_fit_stream(m, s, ...) fl_fit_stream_((m), (s), (fl_fit_args){._reserved = 0, __VA_ARGS__})
/* Keras fit(x=[a, b], y) for a model with several inputs (and one output):
 * xs[i] for input i (fl_model_input_name), each checked as fl_fit's x, all
 * with the same N; shuffling and validation_split take the same samples of
 * every input. Validation data: .validation_xs (n_inputs arrays) with
 * .validation_y. */
fl_history *fl_fit_multi_(fl_model *m, const fl_tensor *const *xs, int n_inputs, const fl_tensor *y, fl_fit_args a);
#define fl_fit_multi(m, xs, nx, y, ...) fl_fit_multi_((m), (xs), (nx), (y), (fl_fit_args){._reserved = 0, __VA_ARGS__})

typedef struct fl_eval_args {
    int _reserved;
    int batch_size; /* 0 = 32 */
    fl_verbose verbose;
    void *out;
    const fl_tensor *sample_weight; /* fl_evaluate: as fl_fit_args.sample_weight (not for predict) */
} fl_eval_args;
/* Fills results[0] = loss, results[1..] = the compiled metrics (as Keras
 * evaluate returns them). n_results: size of results. */
fl_status fl_evaluate_(fl_model *m, const fl_tensor *x, const fl_tensor *y, float *results, int n_results, fl_eval_args a);
#define fl_evaluate(m, x, y, results, n, ...) fl_evaluate_((m), (x), (y), (results), (n), (fl_eval_args){._reserved = 0, __VA_ARGS__})
/* fl_evaluate of a model with several inputs: xs[i] for input i. */
fl_status fl_evaluate_multi_(fl_model *m, const fl_tensor *const *xs, int n_inputs, const fl_tensor *y, float *results,
                             int n_results, fl_eval_args a);
#define fl_evaluate_multi(m, xs, nx, y, results, n, ...) \
    fl_evaluate_multi_((m), (xs), (nx), (y), (results), (n), (fl_eval_args){._reserved = 0, __VA_ARGS__})
/* The model's outputs for x, (N, ...output shape). On the CPU a batch whose
 * buffers would not fit twice the L2 of the threads runs in steps of fewer
 * samples (32, or 8 where a sample's buffers take more than a quarter of
 * that; not for models with a recurrent layer), each layer's output still
 * in cache for the next: the same predictions as whole batches of
 * batch_size, and less memory ($FLYNN_INFER_STEP sets the step). fl_evaluate and fit's
 * validation take the same steps, except with a masked loss, over MPI or
 * from a stream. */
fl_tensor *fl_predict_(fl_model *m, const fl_tensor *x, fl_eval_args a);
#define fl_predict(m, x, ...) fl_predict_((m), (x), (fl_eval_args){._reserved = 0, __VA_ARGS__})

/* Outputs of a model with several inputs and outputs: xs[n_inputs] in,
 * outs[n_outputs] receive new tensors (NULL-filled on error). */
fl_status fl_predict_multi_(fl_model *m, const fl_tensor *const *xs, int n_inputs, fl_tensor **outs, int n_outputs,
                            fl_eval_args a);
#define fl_predict_multi(m, xs, nx, outs, nout, ...) \
    fl_predict_multi_((m), (xs), (nx), (outs), (nout), (fl_eval_args){._reserved = 0, __VA_ARGS__})

/* History: per-epoch values by Keras key ("loss", "accuracy", "val_loss"). */
int fl_history_epochs(const fl_history *h);
int fl_history_num_keys(const fl_history *h);
const char *fl_history_key(const fl_history *h, int i);
/* NULL if the key is unknown; else an array of fl_history_epochs() values. */
const float *fl_history_get(const fl_history *h, const char *key);
double fl_history_seconds(const fl_history *h);  /* wall time of all epochs */
double fl_history_samples_per_second(const fl_history *h); /* training samples/s */
/* Mean seconds a training step waited for its batch (the gather from
 * memory, or for a stream the wait on the prefetch thread), mean seconds
 * of a whole training step (its wait included), and the steps run. */
double fl_history_data_seconds(const fl_history *h);
double fl_history_step_seconds(const fl_history *h);
int64_t fl_history_steps(const fl_history *h);
/* On a device with graphs (CUDA): training steps captured as a graph, the
 * captures that failed (the step then ran eagerly; FLYNN_CUDA_GRAPHS=require
 * makes one an error), and the steps run by replaying a graph. 0 on the CPU. */
int64_t fl_history_graph_captures(const fl_history *h);
int64_t fl_history_graph_capture_failures(const fl_history *h);
int64_t fl_history_graph_replays(const fl_history *h);
void fl_history_free(fl_history *h);

/* ------------------------------------------------------------ model files */

/* Keras model files, both ways (docs/keras-files.md):
 *   .keras        Keras 3 (zip of config.json, metadata.json, model.weights.h5)
 *   .h5 / .hdf5   the legacy full-model HDF5 file (Keras 3 and tf.keras 2)
 *   .weights.h5   weights only (Keras 3 save_weights / load_weights)
 *   .json         model.to_json(): the architecture and compile config
 * Sequential and Functional models of the layers above, with Keras's layer
 * names, weight layouts and optimizer state.
 *
 * Loading returns a new model or NULL; a file flynn cannot represent exactly
 * (an unknown or custom layer, Lambda, channels_first, a dilated Conv2DTranspose,
 * regularizers/constraints, a frozen layer, a wrong weight shape, missing
 * weights, a damaged zip or HDF5 file, invalid JSON, a zip entry declaring
 * more than 64 MiB of config or 4 GiB of weights, sizes that overflow or
 * exceed fl_get_max_model_bytes()) is refused with a message
 * naming the file, the layer and the reason, and nothing is half-loaded.
 * When the file has a compile config the model comes back compiled (same
 * optimizer and hyper-parameters, loss, metrics), with the optimizer state
 * (iterations and slots) when the file holds it, so that fl_fit continues
 * exactly where Keras (or flynn) stopped. .no_compile = true (Keras
 * compile=False) skips the compile config. A .json model has fresh weights.
 *
 * Saving writes what Keras 3.15 loads, atomically: a temporary file in the
 * same folder, fsync, rename; on failure the old file is untouched and the
 * message names the file and the system's reason; temporary files left by
 * killed processes are removed by the next save (docs/reliability.md). */
typedef struct fl_load_args {
    int _reserved;
    bool no_compile; /* Keras compile=False: ignore the file's compile config */
} fl_load_args;
fl_model *fl_load_model_(const char *path, fl_load_args a);
#define fl_load_model(path, ...) fl_load_model_((path), (fl_load_args){._reserved = 0, __VA_ARGS__})
/* By the name's ending: .keras, .h5 (legacy HDF5) or .json (architecture only). */
fl_status fl_save_model(fl_model *m, const char *path);
/* Weights (and, when they match the compiled optimizer, its state, as Keras's
 * load_weights) from a .weights.h5, legacy .h5 or .keras file; the layers are
 * matched as Keras matches them. Nothing changes unless every weight fits. */
fl_status fl_load_weights(fl_model *m, const char *path);
/* Keras 3 weights file; the name must end in .weights.h5. */
fl_status fl_save_weights(fl_model *m, const char *path);
/* model.to_json(): a new string the caller frees with free(). */
char *fl_model_to_json(const fl_model *m);
/* keras.models.model_from_json (compiled when the JSON has a compile config). */
fl_model *fl_model_from_json_(const char *json, fl_load_args a);
#define fl_model_from_json(json, ...) fl_model_from_json_((json), (fl_load_args){._reserved = 0, __VA_ARGS__})

/* What a model was compiled with (a loaded model: what its file restored):
 * the optimizer (NULL when not compiled), the loss (FL_LOSS_NONE), and the
 * name of compiled metric i (0-based; as Keras's evaluate and history name
 * it, "accuracy", "mae" ...; NULL past the last), which is results[1 + i] of
 * fl_evaluate. */
const fl_optimizer *fl_model_optimizer(const fl_model *m);
fl_loss fl_model_loss(const fl_model *m);
const char *fl_model_metric_name(const fl_model *m, int i);
float fl_optimizer_learning_rate(const fl_optimizer *o);

/* keras.callbacks.ModelCheckpoint, for fl_fit's on_epoch_end:
 *
 *     fl_checkpoint *ck = fl_model_checkpoint("best.keras", .save_best_only = true);
 *     fl_fit(m, x, y, .validation_split = 0.1f, .on_epoch_end = fl_checkpoint_on_epoch_end, .user = ck);
 *     fl_checkpoint_free(ck);
 *
 * filepath may hold Keras's placeholders, "{epoch:02d}" (1-based) and
 * "{val_loss:.4f}" (any History key), with d/f/e/g formats. Each save is
 * atomic. A failed save stops training; fl_checkpoint_status says why. */
typedef enum fl_checkpoint_mode { FL_CHECKPOINT_AUTO = 0, FL_CHECKPOINT_MIN, FL_CHECKPOINT_MAX } fl_checkpoint_mode;
typedef struct fl_checkpoint fl_checkpoint;
typedef struct fl_checkpoint_args {
    int _reserved;
    const char *monitor;      /* NULL = "val_loss" */
    bool save_best_only;
    fl_checkpoint_mode mode;  /* AUTO: min for losses, max for accuracies, as Keras */
    bool save_weights_only;   /* fl_save_weights (a .weights.h5 name) instead of fl_save_model */
    bool verbose;             /* Keras verbose=1: a line per epoch ("Epoch 3: val_loss improved from ...") */
    void *out;                /* FILE* for those lines; NULL = stdout */
} fl_checkpoint_args;
fl_checkpoint *fl_model_checkpoint_(const char *filepath, fl_checkpoint_args a);
#define fl_model_checkpoint(path, ...) fl_model_checkpoint_((path), (fl_checkpoint_args){._reserved = 0, __VA_ARGS__})
/* The fl_epoch_callback; `checkpoint` is the fl_checkpoint (fl_fit's .user). */
bool fl_checkpoint_on_epoch_end(fl_model *m, int epoch, const fl_history *h, void *checkpoint);
/* FL_OK, or the status of the save that failed (its message in fl_checkpoint_error). */
fl_status fl_checkpoint_status(const fl_checkpoint *c);
const char *fl_checkpoint_error(const fl_checkpoint *c);
int fl_checkpoint_saves(const fl_checkpoint *c);      /* files written so far */
double fl_checkpoint_best(const fl_checkpoint *c);    /* best monitored value (NAN before the first) */
const char *fl_checkpoint_last_path(const fl_checkpoint *c); /* the last file written ("" if none) */
void fl_checkpoint_free(fl_checkpoint *c);

/* ------------------------------------------- callbacks and lr schedules
 *
 * keras.callbacks for fl_fit's .callbacks (a NULL-terminated list, called
 * in its order; the old .on_epoch_end runs after them):
 *
 *     fl_callback *es = fl_early_stopping(.patience = 3, .restore_best_weights = true);
 *     fl_callback *csv = fl_csv_logger("log.csv");
 *     fl_fit(m, x, y, .epochs = 50, .validation_split = 0.1f, .callbacks = (fl_callback *[]){es, csv, NULL});
 *     fl_callback_free(es); fl_callback_free(csv);
 *
 * A callback written in C fills the functions it needs (the others NULL).
 * `logs` holds the History keys ("loss", "accuracy", "val_loss", ...) of
 * the epoch (on_epoch_end) or of the epoch so far (on_batch_end, batch =
 * 0-based step; a callback with on_batch_end makes a GPU wait for every
 * step's loss); a callback may add keys (ReduceLROnPlateau adds
 * "learning_rate"), and History records what the logs hold after all
 * callbacks ran, as Keras's History, the last callback. A callback stops
 * training with fl_model_stop_training (Keras's model.stop_training = True);
 * a status other than FL_OK ends fl_fit with that error (its message set
 * with the library's error, as Keras raises). */
#define FL_LOGS_MAX_KEYS 24
typedef struct fl_logs {
    int n;
    char keys[FL_LOGS_MAX_KEYS][48];
    double values[FL_LOGS_MAX_KEYS];
} fl_logs;
double fl_logs_get(const fl_logs *l, const char *key); /* NAN when the key is absent */
bool fl_logs_has(const fl_logs *l, const char *key);
fl_status fl_logs_set(fl_logs *l, const char *key, double v);

struct fl_callback {
    void *user;
    fl_status (*on_train_begin)(fl_model *m, fl_logs *logs, void *user);
    fl_status (*on_train_end)(fl_model *m, fl_logs *logs, void *user);
    fl_status (*on_epoch_begin)(fl_model *m, int epoch, fl_logs *logs, void *user);
    fl_status (*on_epoch_end)(fl_model *m, int epoch, fl_logs *logs, void *user);
    fl_status (*on_batch_end)(fl_model *m, int64_t batch, fl_logs *logs, void *user);
    void (*destroy)(void *user); /* fl_callback_free calls it (built-ins: frees their state) */
};
/* Frees a built-in callback (or one made with malloc whose destroy frees user). */
void fl_callback_free(fl_callback *cb);
/* Keras model.stop_training = True: fl_fit ends after the current epoch
 * (at the current step when called from on_batch_end). */
void fl_model_stop_training(fl_model *m);
bool fl_model_stopping(const fl_model *m);

/* keras.callbacks.EarlyStopping: stops when `monitor` has not improved by
 * more than min_delta for `patience` epochs (counted from start_from_epoch);
 * baseline (has_baseline): an improvement must also beat it to reset the
 * wait; restore_best_weights: the weights of the best epoch come back at
 * the end of training (whether it stopped early or not, as Keras 3). */
typedef struct fl_early_stopping_args {
    int _reserved;
    const char *monitor;      /* NULL = "val_loss" */
    double min_delta;         /* compared as |min_delta| */
    int patience;             /* 0 */
    fl_checkpoint_mode mode;  /* AUTO: min for losses, max for accuracies */
    double baseline;          /* with has_baseline */
    bool has_baseline;
    bool restore_best_weights;
    int start_from_epoch;
    bool verbose;             /* "Epoch 5: early stopping" at the end */
    void *out;                /* FILE*; NULL = stdout */
} fl_early_stopping_args;
fl_callback *fl_early_stopping_(fl_early_stopping_args a);
#define fl_early_stopping(...) fl_early_stopping_((fl_early_stopping_args){._reserved = 0, __VA_ARGS__})
int fl_early_stopping_stopped_epoch(const fl_callback *cb); /* 0-based epoch it stopped at, 0 if it did not */
int fl_early_stopping_best_epoch(const fl_callback *cb);    /* 0-based epoch of the best value */

/* keras.callbacks.ReduceLROnPlateau: lr = max(lr * factor, min_lr) after
 * `patience` epochs without an improvement of min_delta, then `cooldown`
 * epochs of rest; adds "learning_rate" to the logs (and History). Not with
 * a learning-rate schedule (Keras: not settable): fl_fit fails then. */
typedef struct fl_reduce_lr_args {
    int _reserved;
    const char *monitor;      /* NULL = "val_loss" */
    double factor;            /* 0 = 0.1; must be < 1 */
    int patience;             /* 0 = 10; negative for 0 */
    fl_checkpoint_mode mode;
    double min_delta;         /* 0 = 1e-4; negative for 0 */
    int cooldown;
    double min_lr;
    bool verbose;             /* "Epoch 3: ReduceLROnPlateau reducing learning rate to ..." */
    void *out;
} fl_reduce_lr_args;
fl_callback *fl_reduce_lr_on_plateau_(fl_reduce_lr_args a);
#define fl_reduce_lr_on_plateau(...) fl_reduce_lr_on_plateau_((fl_reduce_lr_args){._reserved = 0, __VA_ARGS__})

/* keras.callbacks.LearningRateScheduler: before each epoch lr = schedule(epoch,
 * current lr); adds "learning_rate" to the logs. */
typedef double (*fl_epoch_schedule)(int epoch, double lr, void *user);
fl_callback *fl_learning_rate_scheduler(fl_epoch_schedule schedule, void *user);

/* keras.callbacks.CSVLogger: one row per epoch, Keras's exact bytes ("epoch"
 * then the sorted keys, val_ keys added when the first epoch has none, "\r\n"
 * line ends, Python's float repr); append keeps an existing file and writes
 * the header only when it is empty. */
typedef struct fl_csv_logger_args {
    int _reserved;
    char separator;           /* 0 = ',' */
    bool append;
} fl_csv_logger_args;
fl_callback *fl_csv_logger_(const char *filename, fl_csv_logger_args a);
#define fl_csv_logger(file, ...) fl_csv_logger_((file), (fl_csv_logger_args){._reserved = 0, __VA_ARGS__})

/* keras.callbacks.TerminateOnNaN: stops training (no error) at the first
 * batch whose loss is NaN or infinite, printing "Batch 3: Invalid loss,
 * terminating training". fl_fit's own check (on unless .no_nan_check) stops
 * earlier and with a diagnosis; this is the Keras behaviour for a run with
 * .no_nan_check. */
fl_callback *fl_terminate_on_nan(void *out);

/* keras.callbacks.TensorBoard: event files that TensorBoard reads
 * (`tensorboard --logdir log_dir`), as Keras 3 on TensorFlow writes them:
 * log_dir/train gets epoch_loss, epoch_<metric> and epoch_learning_rate
 * (step: the 0-based epoch), the model's JSON (tag "keras", TensorBoard's
 * graph tab) and, every histogram_freq epochs, a histogram of every weight
 * ("sequential/dense/kernel/histogram"); log_dir/validation gets the val_
 * values as epoch_loss, ... and evaluation_loss_vs_iterations, ... (step:
 * the optimizer's iterations). update_freq = N adds batch_loss, ... (the
 * epoch's running values) every N steps, counted from the start of the fit.
 * Each fl_fit starts new files (events.out.tfevents.<time>.<host>.<pid>.<n>.v2),
 * flushed after every epoch; a folder that cannot be made or written fails
 * fl_fit at train begin, naming it (docs/callbacks.md). */
typedef struct fl_tensorboard_args {
    int _reserved;
    int histogram_freq;       /* weight histograms every N epochs (epoch % N == 0); 0 = none */
    int update_freq;          /* 0 = Keras "epoch"; N: batch_ scalars every N steps (1 = Keras "batch") */
    bool no_write_graph;      /* Keras write_graph=False: no model JSON */
    bool write_steps_per_second; /* epoch_steps_per_second, and batch_steps_per_second with update_freq */
} fl_tensorboard_args;
fl_callback *fl_tensorboard_(const char *log_dir, fl_tensorboard_args a); /* log_dir NULL = "logs" */
#define fl_tensorboard(dir, ...) fl_tensorboard_((dir), (fl_tensorboard_args){._reserved = 0, __VA_ARGS__})

/* ModelCheckpoint as a list callback (it owns the checkpoint; query it with
 * fl_checkpoint_callback_get). A failed save ends fl_fit with its error. */
fl_callback *fl_model_checkpoint_callback_(const char *filepath, fl_checkpoint_args a);
#define fl_model_checkpoint_callback(path, ...) \
    fl_model_checkpoint_callback_((path), (fl_checkpoint_args){._reserved = 0, __VA_ARGS__})
fl_checkpoint *fl_checkpoint_callback_get(fl_callback *cb);

/* keras.optimizers.schedules: the learning rate of each step as a function
 * of the optimizer's iterations before it, computed as Keras does (in
 * float32), saved and loaded with the compile config of .keras/.h5/.json:
 *   ExponentialDecay        lr0 * rate ^ (step / decay_steps) (staircase: floor)
 *   InverseTimeDecay        lr0 / (1 + rate * step / decay_steps) (staircase: floor)
 *   CosineDecay             linear warmup from lr0 to warmup_target over
 *                           warmup_steps (when warmup_target != 0), then
 *                           cosine from there to alpha * it over decay_steps
 *   PiecewiseConstantDecay  values[i] while boundaries[i-1] < step <= boundaries[i] */
typedef enum fl_lr_schedule_kind {
    FL_SCHEDULE_NONE = 0,
    FL_SCHEDULE_EXPONENTIAL_DECAY,
    FL_SCHEDULE_COSINE_DECAY,
    FL_SCHEDULE_PIECEWISE_CONSTANT_DECAY,
    FL_SCHEDULE_INVERSE_TIME_DECAY,
} fl_lr_schedule_kind;
#define FL_SCHEDULE_MAX_BOUNDARIES 16
typedef struct fl_lr_schedule {
    fl_lr_schedule_kind kind;
    double initial_learning_rate, decay_steps, decay_rate;
    bool staircase;
    double alpha, warmup_target, warmup_steps; /* CosineDecay; warmup_target 0 = None */
    int n_boundaries;
    double boundaries[FL_SCHEDULE_MAX_BOUNDARIES], values[FL_SCHEDULE_MAX_BOUNDARIES + 1];
} fl_lr_schedule;
typedef struct fl_schedule_args {
    int _reserved;
    bool staircase;
    double alpha, warmup_target, warmup_steps;
} fl_schedule_args;
fl_lr_schedule fl_exponential_decay_(double initial_learning_rate, double decay_steps, double decay_rate, fl_schedule_args a);
fl_lr_schedule fl_inverse_time_decay_(double initial_learning_rate, double decay_steps, double decay_rate, fl_schedule_args a);
fl_lr_schedule fl_cosine_decay_(double initial_learning_rate, double decay_steps, fl_schedule_args a);
#define fl_exponential_decay(lr, steps, rate, ...) fl_exponential_decay_((lr), (steps), (rate), (fl_schedule_args){._reserved = 0, __VA_ARGS__})
#define fl_inverse_time_decay(lr, steps, rate, ...) fl_inverse_time_decay_((lr), (steps), (rate), (fl_schedule_args){._reserved = 0, __VA_ARGS__})
#define fl_cosine_decay(lr, steps, ...) fl_cosine_decay_((lr), (steps), (fl_schedule_args){._reserved = 0, __VA_ARGS__})
/* n boundaries, n + 1 values (n <= FL_SCHEDULE_MAX_BOUNDARIES) */
fl_lr_schedule fl_piecewise_constant_decay(int n, const double *boundaries, const double *values);
/* The schedule's learning rate at `step`; FL_ERR_INVALID_ARG (in check) when
 * a parameter is out of range, naming it. */
float fl_lr_schedule_value(const fl_lr_schedule *s, int64_t step);
fl_status fl_lr_schedule_check(const fl_lr_schedule *s);
const char *fl_lr_schedule_name(fl_lr_schedule_kind k); /* "ExponentialDecay", ... */

/* The learning rate of the next step (a schedule's value at the current
 * iterations), as Keras's optimizer.learning_rate; set: the base learning
 * rate (FL_ERR_STATE with a schedule). */
float fl_optimizer_current_learning_rate(const fl_optimizer *o);
fl_status fl_optimizer_set_learning_rate(fl_optimizer *o, float lr);
const fl_lr_schedule *fl_optimizer_schedule(const fl_optimizer *o); /* NULL without one */
/* clipnorm, clipvalue, global_clipnorm (0 = unset) */
void fl_optimizer_clipping(const fl_optimizer *o, float *clipnorm, float *clipvalue, float *global_clipnorm);
/* Changes a compiled model's optimizer (one loaded from a file too): its
 * clipping (as the constructors' arguments; at most one non-zero), and its
 * learning-rate schedule (NULL or kind FL_SCHEDULE_NONE: a constant
 * learning rate again, the one it has now). FL_ERR_STATE when not compiled. */
fl_status fl_model_set_optimizer_clipping(fl_model *m, float clipnorm, float clipvalue, float global_clipnorm);
fl_status fl_model_set_learning_rate_schedule(fl_model *m, const fl_lr_schedule *s);

/* ------------------------------------------------------------------- data */

/* IDX files (MNIST, Fashion-MNIST), raw or gzip-compressed (detected from the
 * content): a tensor of the stored shape. Type codes 0x08 -> FL_UINT8;
 * 0x09, 0x0B, 0x0C -> FL_INT32; 0x0D, 0x0E -> FL_FLOAT32. Data after what
 * the header describes is an error. */
fl_tensor *fl_load_idx(const char *path);

typedef struct fl_dataset {
    fl_tensor *x_train, *y_train, *x_test, *y_test;
} fl_dataset;
/* MNIST or Fashion-MNIST from a folder with the four standard files
 * (train-images-idx3-ubyte[.gz], ...): x as float32 (N, 28, 28, 1) scaled to
 * [0, 1], y as float32 class indices (N,). max_train/max_test: keep the first
 * N (0, or more than the file holds, = all).
 * For both dataset loaders: *out is overwritten without freeing what it held,
 * and is left empty (all NULL) on error. */
fl_status fl_load_mnist(const char *dir, int64_t max_train, int64_t max_test, fl_dataset *out);
/* CIFAR-10 binary version (data_batch_1.bin ... test_batch.bin, in dir or in
 * dir/cifar-10-batches-bin): x float32 (N, 32, 32, 3) in [0, 1], y float32
 * (N,). Only the batches needed for max_train are read. */
fl_status fl_load_cifar10(const char *dir, int64_t max_train, int64_t max_test, fl_dataset *out);
/* Arrays the user made, as Keras's fit(x, y): x from x_path and y from y_path
 * (.npy files). x keeps its values: float32 (float64 narrowed), or int32 for
 * integer dtypes (int64 and uint32/uint64 range-checked; never through
 * float), which an int32 Input takes as they are and a float32 Input as
 * x.astype("float32") would; y holds class indices (any
 * integer or float dtype, shape (N,) or (N, 1)) or targets of any shape with
 * the same N. The arrays must agree on N; all goes into x_train/y_train
 * (x_test and y_test stay NULL: use a validation split). */
/* Text: which language a fortune cookie is in (English, German, Spanish,
 * Italian, Polish), from Debian's packages fortunes, fortunes-de, -es, -it
 * and -pl (dir NULL: /usr/share/games/fortunes). x int32 (N, maxlen) of
 * character tokens in [0, FL_FORTUNES_VOCAB) (0 = padding, in front), y
 * float32 class indices (N,); classes balanced, a fixed fifth for test.
 * src/io/fortunes.c says how the text is cleaned and encoded. */
#define FL_FORTUNES_VOCAB 512
#define FL_FORTUNES_CLASSES 5
fl_status fl_load_fortunes_lang(const char *dir, int maxlen, int64_t max_train, int64_t max_test, fl_dataset *out);
const char *fl_fortunes_lang_name(int label); /* "en", "de", "es", "it", "pl" */
fl_status fl_load_npy_xy(const char *x_path, const char *y_path, fl_dataset *out);
void fl_dataset_free(fl_dataset *d);

/* NumPy .npy (version 1-3, C order, little-endian): f4 -> FL_FLOAT32, f8 ->
 * FL_FLOAT32; u1, b1 -> FL_UINT8; i1, i2, u2, i4 -> FL_INT32; i8, u4, u8 ->
 * FL_INT32 with an overflow check. fl_save_npy writes what np.save writes
 * (v1.0, '<f4', '<i4' or '|u1'), atomically (temporary file, fsync, rename). */
fl_tensor *fl_load_npy(const char *path);
fl_status fl_save_npy(const fl_tensor *t, const char *path);

/* uint8/int32/float32 tensor -> float32 tensor scaled by `scale`. */
fl_tensor *fl_to_float(const fl_tensor *t, float scale);
/* Class indices (N,) -> one-hot (N, num_classes) float32. */
fl_tensor *fl_one_hot(const fl_tensor *labels, int num_classes);

/* ---------------------------------------------------------------------------
 * Your own data files (docs/data.md): NPZ archives, CSV tables and folders
 * of images in class subfolders. Each loader fills an fl_dataset (x_test and
 * y_test only where the file holds a test set) and, when .info is given, an
 * fl_data_info that says what it found. Bad data is refused with a message
 * naming the file, the row or image and what was expected.
 */
typedef struct fl_data_info {
    int num_classes;        /* the label's classes (CSV text labels, image subfolders); 0 for numeric labels */
    char **class_names;     /* num_classes names: class i is label i */
    int64_t num_paths;      /* images: the files of x_train, then of x_test, in the order of the samples */
    char **file_paths;
    char description[1024]; /* one line: what was read (columns, encodings, classes) */
} fl_data_info;
void fl_data_info_free(fl_data_info *info);

/* The arrays of an .npz file (np.savez, or np.savez_compressed: stored or
 * deflated entries), each named as its key (the entry without ".npy"), in
 * archive order; each array as fl_load_npy reads it. */
typedef struct fl_arrays {
    int count;
    char **names;
    fl_tensor **arrays;
} fl_arrays;
fl_status fl_load_npz(const char *path, fl_arrays *out);
fl_tensor *fl_arrays_get(const fl_arrays *a, const char *name); /* NULL when absent (no error set) */
void fl_arrays_free(fl_arrays *a);
/* Writes a's arrays (uint8, int32 or float32; at least one, distinct
 * non-empty names, which may hold '/': "left.png/keypoints") as np.savez
 * writes them: a zip of stored "<name>.npy" entries in a's order, which
 * np.load and fl_load_npz read back. Atomic as fl_save_npy (the temporary
 * file, fsync, rename); on failure path is untouched and the message names
 * it. The arrays are streamed into the file, not copied. */
fl_status fl_save_npz(const fl_arrays *a, const char *path);
/* x and y from an .npz: keys "x" and "y" (np.savez(f, x=x, y=y)), or the
 * keras.datasets layout "x_train", "y_train" (and "x_test", "y_test" into
 * x_test/y_test when present). The arrays are checked and converted as
 * fl_load_npy_xy does (same N; uint8 x widened to int32). */
fl_status fl_load_npz_xy(const char *path, fl_dataset *out, fl_data_info *info);

/* A CSV table with a header row, RFC 4180 quoting ("a, b" and "" inside
 * quotes), as pandas.read_csv reads it. The label column (by name) becomes
 * y: float32 values when every value is a number, else class indices of
 * its distinct values in sorted order. Every other column is a feature of
 * x (float32 (N, features)): a number as it is; a column holding any
 * non-number is categorical: one-hot (one column per distinct value, in
 * sorted order, named col=value) or, with categorical_as_int, the value's
 * index in that order. Refused: an empty field or NA/NaN/null (a missing
 * value: the message names the line and the column), a row with another
 * number of fields than the header (the line and the counts), a label
 * column that is not in the header. */
typedef struct fl_csv_args {
    int _reserved;
    const char *label;          /* the label column's name; NULL: no y, every column a feature */
    bool categorical_as_int;    /* categorical features as integer codes instead of one-hot */
    char delimiter;             /* 0: ',' */
    fl_data_info *info;         /* optional: what was read */
} fl_csv_args;
fl_status fl_load_csv_(const char *path, fl_dataset *out, fl_csv_args a);
#define fl_load_csv(path, out, ...) fl_load_csv_((path), (out), (fl_csv_args){._reserved = 0, __VA_ARGS__})

/* keras.utils.image_dataset_from_directory, whole into memory: dir holds
 * one subfolder per class (class i = the i-th subfolder in sorted order,
 * hidden ones skipped), each holding images at any depth (.jpg, .jpeg,
 * .png; .bmp and .gif are listed as Keras does and refused when read).
 * Every image is decoded (libjpeg-turbo, libpng) to color_mode's channels
 * and resized bilinearly (TensorFlow's half-pixel bilinear, no antialias)
 * to image_size: x float32 (N, height, width, channels) of values 0..255.
 * The file order is Keras's: sorted, then (shuffle) permuted by NumPy's
 * RandomState(seed).shuffle; validation_split and subset take the last
 * int(split * N) files as Keras does ("both": training into x_train/y_train,
 * validation into x_test/y_test). y: int -> float32 class indices (N,),
 * categorical -> one-hot (N, classes), binary -> float32 (N, 1) (exactly
 * two classes). Without image support built in (libjpeg/libpng were not
 * found), it fails saying so. */
typedef enum fl_color_mode { FL_COLOR_RGB = 0, FL_COLOR_GRAYSCALE, FL_COLOR_RGBA } fl_color_mode;
typedef enum fl_label_mode { FL_LABEL_INT = 0, FL_LABEL_CATEGORICAL, FL_LABEL_BINARY } fl_label_mode;
typedef struct fl_image_dataset_args {
    int _reserved;
    int image_size[2];          /* (height, width); 0: Keras's (256, 256) */
    fl_color_mode color_mode;
    fl_label_mode label_mode;
    bool no_shuffle;            /* Keras shuffle=False: the sorted order */
    uint64_t seed;              /* Keras seed (Keras draws one when None; flynn's default is 0) */
    float validation_split;     /* with subset */
    const char *subset;         /* "training", "validation" or "both" (NULL: all files) */
    bool no_labels;             /* Keras labels=None: every image under dir (any depth, no class folders), y NULL */
    fl_data_info *info;         /* optional: class names and file paths */
} fl_image_dataset_args;
fl_status fl_image_dataset_from_directory_(const char *dir, fl_dataset *out, fl_image_dataset_args a);
#define fl_image_dataset_from_directory(dir, out, ...) \
    fl_image_dataset_from_directory_((dir), (out), (fl_image_dataset_args){._reserved = 0, __VA_ARGS__})
/* One image file decoded as above (no resize when height or width is 0):
 * float32 (height, width, channels). */
fl_tensor *fl_load_image(const char *path, fl_color_mode mode, int height, int width);
/* Whether this build reads images (libjpeg-turbo and libpng were found). */
bool fl_image_support(void);
/* An image file's height, width and channels from its header, without
 * decoding it (PNG: gray 1, gray + alpha 2, RGB or palette 3, RGBA 4;
 * JPEG: 1 or 3). Any build, with or without image support. */
fl_status fl_image_info(const char *path, int *height, int *width, int *channels);
/* The size and colour mode of the images under dir, listed as
 * fl_image_dataset_from_directory lists them, from their headers: the
 * commonest, with *agree true where every image has it (grayscale for 1
 * or 2 channels, rgba for 4, else rgb). found (optional): the sizes seen,
 * commonest first ("180 28x28 grayscale, 20 32x32 rgb"). */
fl_status fl_image_directory_shape(const char *dir, int *height, int *width, fl_color_mode *mode, bool *agree,
                                   char *found, size_t found_len);

/* ---------------------------------------------------------------------------
 * Streams: a data set read from disk batch by batch instead of whole into
 * memory (docs/data.md), for fl_fit_stream. A stream has a number of
 * samples, the shape of one sample of x (float32, or int32 for integer
 * .npy data) and of y (float32; none for a stream without labels), and
 * reads any samples into caller buffers. Reads may run on several threads
 * at once. Errors name the file and the sample.
 *
 * fl_image_stream_from_directory takes fl_image_dataset_from_directory's
 * arguments and lists, shuffles and splits the files exactly as it does
 * (subset "training" or "validation": one stream each; "both" is refused),
 * but decodes an image only when its batch is read: sample i is the same
 * x and y as row i of the in-memory loader's x_train and y_train.
 * fl_npy_stream reads rows of x_path (a .npy file of any size, by pread at
 * the row's offset; x as fl_load_npy_xy gives it: float32, or int32 for
 * integer dtypes) and keeps y_path (NULL: no y) in memory. */
fl_data_stream *fl_image_stream_from_directory_(const char *dir, fl_image_dataset_args a);
#define fl_image_stream_from_directory(dir, ...) \
    fl_image_stream_from_directory_((dir), (fl_image_dataset_args){._reserved = 0, __VA_ARGS__})
fl_data_stream *fl_npy_stream(const char *x_path, const char *y_path);

/* A stream of your own: read(user, epoch, idx, b, x, y) writes samples
 * idx[0..b) into x (b rows of x's sample shape, x_dtype: float32 or int32)
 * and y (b rows of y's shape, float32; NULL when y_ndim is -1), returns
 * FL_OK or an error set with the message (it may run on several threads at
 * once; epoch is -1 when evaluating). free_user(user) runs at the end. */
typedef fl_status (*fl_stream_read_fn)(void *user, int epoch, const int64_t *idx, int64_t b, void *x, float *y);
fl_data_stream *fl_data_stream_new(int64_t n, int x_ndim, const int64_t *x_shape, fl_dtype x_dtype, int y_ndim,
                                   const int64_t *y_shape, fl_stream_read_fn read, void (*free_user)(void *),
                                   void *user);

/* Augmentation while training, on the reading threads: for an image
 * stream (samples (H, W, C)), as keras.layers.RandomFlip("horizontal") and
 * RandomTranslation(height, width) (fill_mode "reflect", bilinear) would
 * transform each sample in a tf.data map: flip left-right with probability
 * 1/2; shift by dy = u * H and dx = v * W pixels, u uniform in [-height,
 * height] and v in [-width, width], reading each output pixel (y, x) at
 * (y - dy, x - dx) bilinearly, mirrored at the edges (d c b a | a b c d).
 * The draws come from Philox with (seed, epoch, sample index): the same
 * seed gives the same images, whatever the threads; evaluation (epoch -1)
 * reads samples unchanged. Takes s over (it is freed with the result);
 * NULL on error (s then still the caller's). */
typedef struct fl_augment_args {
    int _reserved;
    bool flip_horizontal;
    float translate_height, translate_width; /* fractions of H and W, in [0, 1) */
    uint64_t seed;
} fl_augment_args;
fl_data_stream *fl_data_stream_augment_(fl_data_stream *s, fl_augment_args a);
#define fl_data_stream_augment(s, ...) fl_data_stream_augment_((s), (fl_augment_args){._reserved = 0, __VA_ARGS__})
/* y class indices (N,) or (N, 1) as one-hot rows of `classes`, for a
 * categorical_crossentropy model (a label outside [0, classes) is an error
 * naming the sample). Takes s over, as fl_data_stream_augment. */
fl_data_stream *fl_data_stream_one_hot(fl_data_stream *s, int classes);
/* Each sample of x as `shape` (the same number of values: (28, 28) as (28,
 * 28, 1), or (784) as (28, 28, 1), as a reshape of x would). Takes s over. */
fl_data_stream *fl_data_stream_reshape(fl_data_stream *s, int ndim, const int64_t *shape);
/* Samples [start, start + count) of s, as a stream of their own (s stays
 * the caller's to free: the view keeps what it reads alive). */
fl_data_stream *fl_data_stream_take(fl_data_stream *s, int64_t start, int64_t count);

int64_t fl_data_stream_size(const fl_data_stream *s);
/* The sample shape of x (without N) into shape; returns its rank. */
int fl_data_stream_x_shape(const fl_data_stream *s, int64_t *shape);
fl_dtype fl_data_stream_x_dtype(const fl_data_stream *s);
/* The sample shape of y; returns its rank, or -1 when the stream has no y. */
int fl_data_stream_y_shape(const fl_data_stream *s, int64_t *shape);
/* Image folders: the classes (and their names); .npy with (N,) integer
 * labels: max + 1; else 0. */
int fl_data_stream_num_classes(const fl_data_stream *s);
const char *fl_data_stream_class_name(const fl_data_stream *s, int i);
/* One line: what the stream reads. */
const char *fl_data_stream_description(const fl_data_stream *s);
/* Reads samples idx[0..b) into x and y (y may be NULL). */
fl_status fl_data_stream_read(fl_data_stream *s, int epoch, const int64_t *idx, int64_t b, void *x, float *y);
void fl_data_stream_free(fl_data_stream *s);
/* The name of model input i (its InputLayer's: the key a multi-input .npz
 * uses for it); NULL when i is out of range. */
const char *fl_model_input_name(const fl_model *m, int i);

/* ---------------------------------------------------------------------------
 * Recurrent layers: SimpleRNN, LSTM, GRU (Keras 3's, weights named and
 * shaped as Keras's: kernel (features, G*units), recurrent_kernel (units,
 * G*units), bias (G*units), or for GRU with reset_after (2, 3*units); G =
 * 1, 4 (i, f, c, o), 3 (z, r, h)) and Bidirectional. Input (batch,
 * timesteps, features); output (batch, units), or (batch, timesteps, units)
 * with return_sequences. Initial weights as Keras: glorot_uniform kernel,
 * orthogonal recurrent_kernel, zero bias (LSTM: ones for the forget gate
 * unless no_unit_forget_bias). A sequence's mask (Embedding mask_zero,
 * Masking) makes the layer skip the masked steps as Keras does.
 */
typedef struct fl_rnn_args {
    int _reserved; /* keeps the macros warning-free; leave it out */
    int units;
    fl_activation activation;           /* 0: Keras's default tanh (for linear set activation_linear) */
    fl_activation recurrent_activation; /* 0: sigmoid (LSTM, GRU; for linear set recurrent_linear) */
    bool activation_linear, recurrent_linear;
    bool no_bias;               /* Keras use_bias=False */
    bool no_unit_forget_bias;   /* LSTM: Keras unit_forget_bias=False */
    bool no_reset_after;        /* GRU: Keras reset_after=False (the Keras 2 / CuDNN-less form) */
    float dropout;              /* on the inputs in training: one mask per sample, the same at every step, as
                                 * Keras (with recurrent_dropout > 0, LSTM and GRU draw one mask per gate, as
                                 * Keras's implementation 1); 0 <= dropout < 1 */
    float recurrent_dropout;    /* on the recurrent state h' in training: one mask per sample and gate (LSTM 4,
                                 * GRU 3), the same at every step, scaled by 1/(1-rate), as Keras 3; none in
                                 * inference; 0 <= recurrent_dropout < 1 */
    bool return_sequences, go_backwards;
    bool zero_output_for_mask;  /* masked steps output 0 instead of the carried state (Bidirectional sets it
                                 * to return_sequences for both its layers, as Keras) */
    bool return_state;          /* the call's outputs are y, then the final states h (and LSTM c): fl_output */
    bool stateful;              /* refused */
    bool unroll;                /* accepted; the same maths either way */
    uint64_t seed;              /* dropout stream; 0: from the model's seed and the layer index */
    const char *name;
} fl_rnn_args;
fl_layer *fl_simple_rnn_(fl_rnn_args a);
fl_layer *fl_lstm_(fl_rnn_args a);
fl_layer *fl_gru_(fl_rnn_args a);
#define fl_simple_rnn(...) fl_simple_rnn_((fl_rnn_args){._reserved = 0, __VA_ARGS__}) /* fl_simple_rnn(32) */
#define fl_lstm(...) fl_lstm_((fl_rnn_args){._reserved = 0, __VA_ARGS__})             /* fl_lstm(64, .return_sequences = true) */
#define fl_gru(...) fl_gru_((fl_rnn_args){._reserved = 0, __VA_ARGS__})

/* Bidirectional(layer): the layer on the sequence and a copy of it (or
 * backward_layer) on the reversed sequence, their outputs merged. The
 * wrapper owns both layers; its weights are the forward layer's, then the
 * backward one's (Keras's forward_<name> and backward_<name>). */
typedef enum fl_merge_mode { FL_MERGE_CONCAT = 0, FL_MERGE_SUM, FL_MERGE_MUL, FL_MERGE_AVE, FL_MERGE_NONE } fl_merge_mode;
typedef struct fl_bidirectional_args {
    int _reserved;
    fl_merge_mode merge_mode;   /* default concat; FL_MERGE_NONE: two outputs, forward then backward (fl_output) */
    fl_layer *backward_layer;   /* NULL: a copy of the layer with go_backwards=True (then named backward_<name>) */
    const char *name;
} fl_bidirectional_args;
fl_layer *fl_bidirectional_(fl_layer *layer, fl_bidirectional_args a);
#define fl_bidirectional(layer, ...) \
    fl_bidirectional_((layer), (fl_bidirectional_args){._reserved = 0, __VA_ARGS__}) /* (fl_lstm(32)) */

/* Layer calls with several outputs, and the recurrent layers' states
 * (Keras's return_state and initial_state), in functional models.
 *
 * fl_output(call, i) is output i of a layer call (0: the call itself), as
 * Keras's `y, h, c = lstm(x)`: a recurrent layer with return_state has the
 * outputs y, h (and c for LSTM); Bidirectional the merged y (merge_mode
 * FL_MERGE_NONE: y_forward, y_backward), then with return_state the
 * forward layer's final states and then the backward one's. The same call
 * and index give the same tensor. NULL and a message for an index the
 * layer does not have.
 *
 * Initial states are inputs after the sequence: fl_call_n(lstm, x, h, c)
 * is Keras's lstm(x, initial_state=[h, c]) (SimpleRNN and GRU: h only;
 * Bidirectional: the forward layer's states, then the backward layer's).
 * Their gradients flow back to whatever made them. keras.io's
 * lstm_seq2seq:
 *
 *     fl_sym *enc_in = fl_keras_input(T, n_in), *dec_in = fl_keras_input(T2, n_out);
 *     fl_sym *enc = fl_call(fl_lstm(256, .return_state = true), enc_in);
 *     fl_sym *dec = fl_call_n(fl_lstm(256, .return_sequences = true, .return_state = true), dec_in,
 *                             fl_output(enc, 1), fl_output(enc, 2));
 *     fl_sym *y = fl_call(fl_dense(n_out, .activation = FL_SOFTMAX), dec);
 *     fl_model *m = fl_model_new(fl_syms(enc_in, dec_in), fl_syms(y), "seq2seq");
 */
fl_sym *fl_output(fl_sym *call, int index);

/* SIFT keypoints, descriptors and matching: */
#include "flynn/sift.h"

#ifdef __cplusplus
}
#endif
#endif /* FLYNN_H */
