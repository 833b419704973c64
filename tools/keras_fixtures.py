#!/usr/bin/env python3
"""keras_fixtures.py — owns tests/fixtures/keras/: small model files written by
REAL Keras 3 (JAX backend) for flynn's Keras-file conformance tests.

Regenerate with (Keras 3 and h5py installed; TensorFlow is not needed):

    KERAS_BACKEND=jax python3 tools/keras_fixtures.py [--out tests/fixtures/keras]

The script is deterministic: every model is built after
keras.backend.clear_session() + keras.utils.set_random_seed(seed) with a seed
derived from the fixture's name, and every input batch comes from
numpy.random.default_rng(seed). The .npy, .h5, .weights.h5, .json and
manifest.json files are byte-identical on every run; the .keras zips are not
(Keras stamps metadata.json with the save date, the model.weights.h5 entry
with the current time, and config.json's "shared_object_id" values are
Python object ids), but what they hold is.

For each model M it writes
    M.keras          model.save("M.keras")        (Keras 3 zip format)
    M_x.npy          a fixed input batch (M_x0.npy, M_x1.npy, ... for several inputs)
    M_y.npy          model.predict(M_x)           (M_y0.npy, M_y1.npy, ... for several outputs)
and, for the models whose formats include them (see ALL/KERAS below),
    M.h5             model.save("M.h5")           (legacy HDF5 full model)
    M.weights.h5     model.save_weights(...)      (Keras 3 weights-only HDF5)
    M.json           model.to_json()
and, for the training fixtures (compiled; M.keras is saved BEFORE the step),
    M_train_x.npy, M_train_y.npy          the fixed training batch
    M_step1.weights.h5                    save_weights after one train_on_batch
    M_step1_<layer>_<weight>.npy          each weight after that step, Keras order
    M_after.keras                         model.save after the step (holds the optimizer state)
    M_step2_<layer>_<weight>.npy          each weight after a second train_on_batch on
                                          the same batch (checks that a reader restored the
                                          optimizer state of M_after.keras exactly)
plus bad_* files that a reader must refuse and manifest.json describing all
of it. Legacy .h5 files written by tf.keras 2 itself are in
tests/fixtures/tf_keras (tools/tf_keras_fixtures.py, on TensorFlow).

After writing, the script re-runs itself with --check in a fresh Python
process (no custom classes registered) which reloads every file with Keras
and compares the predictions and weights with the saved .npy files. See
docs/keras-format.md for the file layouts.
"""
import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
import zlib

if os.environ.get("KERAS_BACKEND", "jax") != "jax":
    sys.exit("run with KERAS_BACKEND=jax (see the comment at the top)")
os.environ["KERAS_BACKEND"] = "jax"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import warnings  # noqa: E402

import numpy as np  # noqa: E402
import h5py  # noqa: E402

try:  # Keras logs a warning through absl for every legacy .h5 save
    import absl.logging  # noqa: E402

    absl.logging.set_verbosity(absl.logging.ERROR)
except ImportError:  # pragma: no cover
    pass

import keras  # noqa: E402
from keras import layers as L  # noqa: E402

F32 = np.float32
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "tests", "fixtures", "keras")

# Tolerances the C tests use: |got - want| <= atol + rtol * |want|.
TOL_PRED = {"rtol": 1e-5, "atol": 1e-6}
TOL_STEP = {"rtol": 1e-4, "atol": 1e-6}

# Config keys copied into the manifest's per-layer summary.
LAYER_KEYS = (
    "units", "activation", "use_bias", "filters", "kernel_size", "strides",
    "padding", "pool_size", "target_shape", "rate", "axis", "momentum",
    "epsilon", "center", "scale", "data_format", "dilation_rate",
    "size", "interpolation", "output_padding", "dims",
)


def seed_of(name):
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def reset(name):
    keras.backend.clear_session()
    keras.utils.set_random_seed(seed_of(name) % (2**31 - 1))


def normal(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(F32)


# --------------------------------------------------------------- the models
#
# Each builder returns (model, [input arrays]). Batch sizes are 3-5. Names are
# Keras's automatic ones (clear_session() restarts the counters) except where
# a name documents something (functional inputs/outputs).


def m_dense_activations(rng):
    # Every activation on a Dense layer, plus use_bias=False.
    m = keras.Sequential([
        keras.Input((5,)),
        L.Dense(6, activation=None),          # serialized as "linear"
        L.Dense(6, activation="leaky_relu"),
        L.Dense(6, activation="elu", use_bias=False),
        L.Dense(6, activation="gelu"),
        L.Dense(6, activation="tanh"),
        L.Dense(5, activation="relu"),
        L.Dense(5, activation="sigmoid"),
        L.Dense(3, activation="softmax"),
    ], name="dense_activations")
    return m, [normal(rng, 4, 5, scale=2.0)]


def m_activation_layers(rng):
    # The Activation layer with every activation name.
    m = keras.Sequential([
        keras.Input((6,)),
        L.Dense(6),
        L.Activation("linear"),
        L.Activation("leaky_relu"),
        L.Activation("elu"),
        L.Activation("gelu"),
        L.Activation("tanh"),
        L.Activation("relu"),
        L.Activation("sigmoid"),
        L.Activation("softmax"),
    ], name="activation_layers")
    return m, [normal(rng, 4, 6, scale=2.0)]


def m_conv_basic(rng):
    # valid / same, kernels 3x3, 2x3 (non-square) and 1x1, use_bias=False,
    # stride 2 with valid padding, several activations.
    m = keras.Sequential([
        keras.Input((7, 7, 2)),
        L.Conv2D(3, 3, padding="valid", activation="relu"),              # 5x5x3
        L.Conv2D(4, (2, 3), padding="same", use_bias=False,
                 activation="tanh"),                                      # 5x5x4
        L.Conv2D(3, 1, activation="elu"),                                 # 5x5x3
        L.Conv2D(2, 3, strides=2, padding="valid", activation="sigmoid"),  # 2x2x2
    ], name="conv_basic")
    return m, [normal(rng, 3, 7, 7, 2)]


def m_conv_strides(rng):
    # stride 2 with same padding on even and odd sizes (Keras/TF pad the
    # extra row/column at the bottom/right), non-square strides, non-square
    # kernels with strides, softmax over channels.
    m = keras.Sequential([
        keras.Input((8, 7, 2)),
        L.Conv2D(3, 3, strides=2, padding="same", activation="gelu"),      # 4x4x3
        L.Conv2D(2, (3, 2), strides=(2, 1), padding="same",
                 activation="leaky_relu"),                                 # 2x4x2
        L.Conv2D(3, (2, 3), strides=(1, 2), padding="valid",
                 activation="softmax"),                                    # 1x1x3
    ], name="conv_strides")
    return m, [normal(rng, 3, 8, 7, 2)]


def m_pool_max(rng):
    m = keras.Sequential([
        keras.Input((11, 11, 2)),
        L.MaxPooling2D(3, strides=1, padding="same"),      # 11x11
        L.MaxPooling2D(3, strides=2, padding="valid"),     # 5x5
        L.MaxPooling2D(2, padding="same"),                 # 3x3 (strides default = pool)
        L.MaxPooling2D((2, 3), strides=(1, 2), padding="same"),  # 3x2
        L.MaxPooling2D(2),                                 # 1x1 (valid, default strides)
    ], name="pool_max")
    return m, [normal(rng, 3, 11, 11, 2)]


def m_pool_avg(rng):
    # Keras's average pooling with padding="same" divides by the number of
    # real (unpadded) elements in each window.
    m = keras.Sequential([
        keras.Input((11, 11, 2)),
        L.AveragePooling2D(3, strides=1, padding="same"),      # 11x11
        L.AveragePooling2D(3, strides=2, padding="valid"),     # 5x5
        L.AveragePooling2D(2, padding="same"),                 # 3x3
        L.AveragePooling2D((2, 3), strides=(1, 2), padding="same"),  # 3x2
        L.AveragePooling2D(2),                                 # 1x1
    ], name="pool_avg")
    return m, [normal(rng, 3, 11, 11, 2)]


def m_reshape_pool_flatten(rng):
    # Reshape with -1 (first and middle position), Flatten, Dropout (the
    # identity at inference), GlobalAveragePooling2D.
    m = keras.Sequential([
        keras.Input((12,)),
        L.Reshape((2, -1, 3)),                       # (2, 2, 3)
        L.Conv2D(4, 2, padding="same", activation="relu"),
        L.Flatten(),                                 # 16
        L.Dropout(0.5),
        L.Dense(12),
        L.Reshape((-1, 3, 2)),                       # (2, 3, 2)
        L.GlobalAveragePooling2D(),                  # 2
    ], name="reshape_pool_flatten")
    return m, [normal(rng, 4, 12)]


def m_batchnorm(rng):
    # BatchNormalization after Conv2D (4-D, axis -1 = channels) and after
    # Dense (2-D). The weights are set to random values and then the model
    # is trained one step (SGD, MSE), so that gamma/beta/moving statistics
    # are none of the initial ones (see prepare_batchnorm).
    m = keras.Sequential([
        keras.Input((4, 4, 3)),
        L.Conv2D(4, 3, padding="same"),
        L.BatchNormalization(),                                   # defaults
        L.BatchNormalization(center=False),
        L.BatchNormalization(scale=False, momentum=0.9, epsilon=1e-2),
        L.GlobalAveragePooling2D(),
        L.Dense(3),
        L.BatchNormalization(center=False, scale=False, momentum=0.5,
                             epsilon=1e-4),
    ], name="batchnorm")
    return m, [normal(rng, 4, 4, 4, 3)]


def prepare_batchnorm(m, rng):
    for layer in m.layers:
        if isinstance(layer, L.BatchNormalization):
            vals = []
            for v in layer.weights:
                n = v.shape[0]
                if v.name == "gamma":
                    vals.append(rng.uniform(0.5, 1.5, n).astype(F32))
                elif v.name == "beta":
                    vals.append(normal(rng, n, scale=0.3))
                elif v.name == "moving_mean":
                    vals.append(normal(rng, n, scale=0.5))
                else:  # moving_variance
                    vals.append(rng.uniform(0.5, 2.0, n).astype(F32))
            layer.set_weights(vals)
    m.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    x = normal(rng, 6, 4, 4, 3)
    y = normal(rng, 6, 3)
    m.train_on_batch(x, y)
    # A fresh, uncompiled copy with the same config and weights: the saved
    # files describe a model for inference only.
    fresh = keras.Sequential.from_config(m.get_config())
    fresh.set_weights(m.get_weights())
    return fresh


def m_func_residual(rng):
    # The most common Functional shape: one input, one output, a skip
    # connection (Add of the input and a Dense branch).
    x = keras.Input((6,), name="features")
    h = L.Dense(6, activation="relu")(x)
    r = L.Add()([x, h])
    y = L.Dense(3, activation="softmax", name="probs")(r)
    m = keras.Model(x, y, name="func_residual")
    return m, [normal(rng, 4, 6)]


def m_func_multi_io(rng):
    # Two inputs of different ranks, two outputs; Concatenate(axis=-1) of
    # 4-D tensors (the channels of NHWC) and of 2-D tensors.
    v = keras.Input((6,), name="vec")
    img = keras.Input((4, 4, 1), name="img")
    a = L.Conv2D(2, 3, padding="same", activation="relu")(img)
    c4 = L.Concatenate(axis=-1)([a, img])           # (4, 4, 3)
    f = L.Flatten()(c4)                             # 48
    h = L.Dense(5, activation="relu")(v)
    c = L.Concatenate()([h, f])
    h2 = L.Dense(5, activation="tanh")(c)
    out_class = L.Dense(3, activation="softmax", name="out_class")(h2)
    out_reg = L.Dense(1, name="out_reg")(h2)
    m = keras.Model([v, img], [out_class, out_reg], name="func_multi_io")
    return m, [normal(rng, 4, 6), normal(rng, 4, 4, 4, 1)]


def m_func_shared(rng):
    # The same Dense layer called on two inputs: two nodes of one layer, one
    # set of weights. Its second call is keras_history [name, 1, 0]. Add,
    # Multiply and a three-way Concatenate of 2-D tensors.
    a = keras.Input((5,), name="left")
    b = keras.Input((5,), name="right")
    shared = L.Dense(4, activation="relu", name="shared")
    ha = shared(a)
    hb = shared(b)
    total = L.Add()([ha, hb])
    prod = L.Multiply()([ha, hb])
    c = L.Concatenate()([total, prod, hb])
    y = L.Dense(2, name="y")(c)
    m = keras.Model([a, b], y, name="func_shared")
    return m, [normal(rng, 4, 5), normal(rng, 4, 5)]


def m_padding_cropping(rng):
    # ZeroPadding2D in its three config forms (int, per-axis, per-side, the
    # asymmetric ((0, 1), (0, 1)) of keras.applications' correct_pad) and
    # Cropping2D, between convolutions so that the zeros meet weights.
    m = keras.Sequential([
        keras.Input((7, 6, 2)),
        L.ZeroPadding2D(1),                          # 9x8
        L.Conv2D(3, 3, strides=2, activation="relu"),  # 4x3
        L.ZeroPadding2D((2, 1)),                     # 8x5
        L.ZeroPadding2D(((0, 1), (0, 1))),           # 9x6
        L.Conv2D(2, 2, activation="tanh"),            # 8x5
        L.Cropping2D(((1, 2), (0, 1))),              # 5x4
        L.Cropping2D(1),                              # 3x2
    ], name="padding_cropping")
    return m, [normal(rng, 3, 7, 6, 2)]


def m_activations_more(rng):
    # The activations added with the activation list: as Activation layers
    # and fused into Dense ("swish" is Keras's other name for silu).
    m = keras.Sequential([
        keras.Input((6,)),
        L.Dense(6, activation="swish"),
        L.Activation("relu6"),
        L.Dense(6, activation="hard_sigmoid"),
        L.Activation("hard_silu"),
        L.Dense(6, activation="selu"),
        L.Activation("softplus"),
        L.Dense(6, activation="softsign"),
        L.Activation("exponential"),
        L.Dense(6, activation="silu"),
        L.Activation("hard_swish"),
    ], name="activations_more")
    return m, [normal(rng, 4, 6, scale=3.0)]


def m_sequence_1d(rng):
    # Conv1D (causal, same with stride 2, valid with an even kernel), the 1D
    # poolings and the global ones, keepdims both ways.
    x = keras.Input((11, 3), name="seq")
    h = L.Conv1D(4, 3, padding="causal", activation="relu")(x)     # 11x4
    h = L.Conv1D(5, 2, strides=2, padding="same", use_bias=False)(h)  # 6x5
    a = L.MaxPooling1D(2)(h)                                         # 3x5
    b = L.AveragePooling1D(3, strides=2, padding="same")(h)          # 3x5
    h = L.Concatenate()([a, b])                                      # 3x10
    h = L.Conv1D(6, 2, activation="tanh")(h)                         # 2x6
    g1 = L.GlobalMaxPooling1D()(h)
    g2 = L.GlobalAveragePooling1D(keepdims=True)(h)                  # 1x6
    g2 = L.Flatten()(g2)
    y = L.Concatenate()([g1, g2])
    m = keras.Model(x, y, name="sequence_1d")
    return m, [normal(rng, 3, 11, 3)]


def m_global_pools_2d(rng):
    x = keras.Input((5, 4, 3), name="img")
    h = L.Conv2D(4, 3, padding="same", activation="relu")(x)
    a = L.GlobalMaxPooling2D()(h)
    b = L.GlobalMaxPooling2D(keepdims=True)(h)                       # 1x1x4
    c = L.GlobalAveragePooling2D(keepdims=True)(h)                   # 1x1x4
    d = L.Flatten()(L.Add()([b, c]))
    y = L.Concatenate()([a, d])
    m = keras.Model(x, y, name="global_pools_2d")
    return m, [normal(rng, 3, 5, 4, 3)]


def m_merges_more(rng):
    # Subtract, Average (three inputs), Maximum, Minimum.
    a = keras.Input((5,), name="a")
    b = keras.Input((5,), name="b")
    ha = L.Dense(5, activation="tanh")(a)
    hb = L.Dense(5)(b)
    s = L.Subtract()([ha, hb])
    v = L.Average()([ha, hb, s])
    mx = L.Maximum()([ha, hb, v])
    mn = L.Minimum()([ha, s])
    y = L.Concatenate()([s, v, mx, mn])
    m = keras.Model([a, b], y, name="merges_more")
    return m, [normal(rng, 4, 5), normal(rng, 4, 5)]
def m_param_layers(rng):
    # The activation and preprocessing layers with parameters: Rescaling,
    # Normalization adapted (axis -1: weights mean/variance/count) and given
    # (a list on axis 1, a scalar with axis=None), ReLU with all three
    # options (max_value low enough to clip), PReLU shared and per element
    # (random alphas: zeros would make it a ReLU), LeakyReLU's 0.3, ELU,
    # Softmax on a middle axis and the last; all four formats.
    adapted = L.Normalization()
    adapted.adapt(normal(rng, 20, 5, 4, 3, scale=2.0) + 0.5)
    m = keras.Sequential([
        keras.Input((5, 4, 3)),
        L.Rescaling(2.0, offset=-0.5),
        adapted,
        L.Normalization(axis=1, mean=[0.1, -0.2, 0.3, 0.0, 0.5], variance=[1.0, 2.0, 0.5, 4.0, 1.5]),
        L.Conv2D(4, 2, padding="same"),
        L.ReLU(max_value=1.5, negative_slope=0.1, threshold=0.2),
        L.PReLU(shared_axes=[1, 2]),
        L.LeakyReLU(),
        L.Conv2D(4, 2),
        L.ELU(alpha=0.7),
        L.PReLU(),
        L.Softmax(axis=1),
        L.Flatten(),
        L.Dense(6),
        L.ReLU(6.0),
        L.Normalization(axis=None, mean=0.5, variance=2.0),
        L.Softmax(),
    ], name="param_layers")
    for layer in m.layers:
        if isinstance(layer, L.PReLU):
            layer.alpha.assign(rng.uniform(-0.5, 0.9, layer.alpha.shape).astype(F32))
    return m, [normal(rng, 3, 5, 4, 3, scale=2.0)]
def m_depthwise_separable(rng):
    # DepthwiseConv2D and SeparableConv2D in their config forms: square and
    # non-square kernels, strides 1 and 2, "valid" and "same" (with an even
    # kernel: asymmetric padding), depth_multiplier 1, 2 and 3, with and
    # without bias, activations fused (relu6, tanh) and not (silu, gelu).
    m = keras.Sequential([
        keras.Input((9, 8, 3)),
        L.DepthwiseConv2D(3),                                          # 7x6x3
        L.DepthwiseConv2D((2, 3), strides=2, padding="same",
                          depth_multiplier=2, activation="relu6"),     # 4x3x6
        L.SeparableConv2D(4, 3, padding="same", activation="tanh"),    # 4x3x4
        L.SeparableConv2D(5, (3, 2), strides=(2, 1), padding="same",
                          depth_multiplier=2, use_bias=False,
                          activation="silu"),                          # 2x3x5
        L.DepthwiseConv2D(2, padding="same", depth_multiplier=3,
                          use_bias=False, activation="gelu"),          # 2x3x15
    ], name="depthwise_separable")
    return m, [normal(rng, 3, 9, 8, 3)]


def m_mobilenet_block(rng):
    # keras.applications.MobileNetV2's inverted residual block: expand
    # (1x1), correct_pad + strided "valid" DepthwiseConv2D without bias,
    # BatchNormalization, ReLU6, project; then a stride-1 "same" block with
    # the residual Add, and a SeparableConv2D head.
    x = keras.Input((10, 10, 4), name="image")
    h = L.Conv2D(12, 1, use_bias=False)(x)
    h = L.BatchNormalization()(h)
    h = L.Activation("relu6")(h)
    h = L.ZeroPadding2D(((0, 1), (0, 1)))(h)
    h = L.DepthwiseConv2D(3, strides=2, use_bias=False)(h)       # 5x5x12
    h = L.BatchNormalization()(h)
    h = L.Activation("relu6")(h)
    p = L.Conv2D(6, 1, use_bias=False)(h)
    e = L.Conv2D(18, 1, activation="relu6")(p)
    e = L.DepthwiseConv2D(3, padding="same", activation="relu6")(e)
    e = L.Conv2D(6, 1)(e)
    h = L.Add()([p, e])
    h = L.SeparableConv2D(8, 3, activation="relu")(h)            # 3x3x8
    y = L.GlobalAveragePooling2D()(h)
    m = keras.Model(x, y, name="mobilenet_block")
    # BatchNormalization with moving statistics that are not 0 and 1
    for layer in m.layers:
        if isinstance(layer, L.BatchNormalization):
            c = layer.moving_mean.shape[0]
            layer.moving_mean.assign(rng.normal(0, 0.3, c).astype(F32))
            layer.moving_variance.assign(rng.uniform(0.5, 1.5, c).astype(F32))
    return m, [normal(rng, 2, 10, 10, 4)]



def m_upsample_deconv_permute(rng):
    # UpSampling2D (nearest, and bilinear with unequal factors),
    # Conv2DTranspose ("same" with an odd and an even kernel, "valid" with a
    # stride larger than the kernel: rows only the bias reaches) and Permute
    # (a swap of two axes, and channels first).
    x = keras.Input((3, 4, 2), name="img")
    a = L.Conv2DTranspose(4, 3, strides=2, padding="same", activation="relu")(x)  # 6x8x4
    b = L.UpSampling2D(2)(x)                                                     # 6x8x2
    h = L.Concatenate()([a, b])                                                  # 6x8x6
    h = L.Conv2DTranspose(3, (2, 3), strides=(3, 1), use_bias=False)(h)          # 18x10x3
    h = L.Conv2D(4, 3, strides=2, padding="same")(h)                             # 9x5x4
    h = L.UpSampling2D((2, 3), interpolation="bilinear")(h)                      # 18x15x4
    h = L.Permute((2, 1, 3))(h)                                                  # 15x18x4
    h = L.Conv2DTranspose(2, 4, strides=2, padding="same", activation="tanh")(h)  # 30x36x2
    y = L.Permute((3, 1, 2))(h)                                                  # 2x30x36
    m = keras.Model(x, y, name="upsample_deconv_permute")
    return m, [normal(rng, 3, 3, 4, 2)]


def m_dilated_grouped(rng):
    # Conv2D with dilation ("same" and "valid", per-axis rates, an even
    # kernel) and groups (with strides, 1x1, and groups == channels, which
    # flynn runs as a depthwise convolution, with a multiplier of 2 too);
    # DepthwiseConv2D and SeparableConv2D dilated.
    m = keras.Sequential([
        keras.Input((10, 9, 4)),
        L.Conv2D(6, 3, dilation_rate=2, padding="same", activation="relu"),       # 10x9x6
        L.Conv2D(4, (3, 2), dilation_rate=(2, 3), groups=2),                       # 6x6x4
        L.Conv2D(8, 3, strides=2, padding="same", groups=4, use_bias=False,
                 activation="tanh"),                                               # 3x3x8
        L.Conv2D(8, 1, groups=2),                                                  # 3x3x8
        L.Conv2D(16, 2, padding="same", groups=8, dilation_rate=2),                # 3x3x16
        L.DepthwiseConv2D(3, dilation_rate=2, padding="same", depth_multiplier=2,
                          activation="relu6"),                                     # 3x3x32
        L.SeparableConv2D(5, 2, dilation_rate=(1, 2), padding="same",
                          activation="silu"),                                      # 3x3x5
        L.DepthwiseConv2D((2, 3), dilation_rate=(1, 2), padding="same"),           # 3x3x5
        L.Flatten(),
    ], name="dilated_grouped")
    return m, [normal(rng, 3, 10, 9, 4)]


def m_conv1d_dilated(rng):
    # Conv1D dilated: "causal" (pads dilation*(k-1)), "same" with groups,
    # "valid" with groups == channels.
    x = keras.Input((13, 4), name="seq")
    h = L.Conv1D(6, 3, dilation_rate=2, padding="causal", activation="relu")(x)  # 13x6
    h = L.Conv1D(4, 2, dilation_rate=3, padding="same", groups=2)(h)             # 13x4
    h = L.Conv1D(8, 3, dilation_rate=2, groups=4, activation="tanh")(h)          # 9x8
    h = L.Conv1D(4, 3, padding="causal", groups=2, use_bias=False)(h)            # 9x4
    y = L.Flatten()(h)
    return keras.Model(x, y, name="conv1d_dilated"), [normal(rng, 3, 13, 4)]


def m_resizing(rng):
    # Resizing: bilinear up on one axis and down on the other, nearest,
    # crop_to_aspect_ratio, pad_to_aspect_ratio (Keras pads the same count on
    # both sides: 5x5 to aspect 1:2 is 5x9), a large bilinear downscale.
    m = keras.Sequential([
        keras.Input((6, 8, 3)),
        L.Resizing(9, 5),                                         # 9x5x3
        L.Conv2D(4, 2, padding="same"),
        L.Resizing(4, 7, interpolation="nearest"),                # 4x7x4
        L.Resizing(5, 5, crop_to_aspect_ratio=True),              # 4x4 -> 5x5
        L.Resizing(3, 6, pad_to_aspect_ratio=True),               # 5x9 -> 3x6
        L.Resizing(11, 13, interpolation="nearest"),              # 11x13
        L.Resizing(2, 3),                                         # 2x3
        L.Flatten(),
    ], name="resizing")
    return m, [normal(rng, 3, 6, 8, 3)]


def m_dropout_call(rng):
    # keras.applications.MobileNet calls its Dropout with training=False; in
    # Keras 3 the model's training flag overrides it, so it is an ordinary
    # Dropout that must be read and written back with its call kwargs.
    x = keras.Input((6,), name="x")
    h = L.Dense(5, activation="relu")(x)
    h = L.Dropout(0.5)(h, training=False)
    y = L.Dense(3, activation="softmax")(h)
    return keras.Model(x, y, name="dropout_call"), [normal(rng, 4, 6)]


def m_dropout_noise(rng):
    # Dropout with EfficientNet's noise_shape and SpatialDropout2D: identity
    # in inference, read and written with their shapes.
    m = keras.Sequential([
        keras.Input((4, 4, 3)),
        L.Conv2D(4, 3, padding="same", activation="relu"),
        L.Dropout(0.2, noise_shape=(None, 1, 1, 1)),
        L.SpatialDropout2D(0.3),
        L.Dropout(0.1, noise_shape=(None, 4, 1, 4)),
        L.GlobalAveragePooling2D(),
        L.Dense(2),
    ], name="dropout_noise")
    return m, [normal(rng, 3, 4, 4, 3)]

def m_rnn_lstm(rng):
    # A stacked LSTM classifier: return_sequences into a last-step LSTM;
    # unit_forget_bias off and hard_sigmoid gates on the second.
    m = keras.Sequential([
        keras.Input((7, 5)),
        L.LSTM(6, return_sequences=True),
        L.LSTM(4, recurrent_activation="hard_sigmoid", unit_forget_bias=False),
        L.Dense(3, activation="softmax"),
    ], name="rnn_lstm")
    return m, [normal(rng, 3, 7, 5)]


def m_rnn_gru_simple(rng):
    # GRU with reset_after True (Keras 3's default, bias (2, 3u)) and False,
    # go_backwards, no bias; SimpleRNN with relu and go_backwards.
    x = keras.Input((6, 4), name="seq")
    h = L.GRU(5, return_sequences=True)(x)
    a = L.GRU(3, reset_after=False, go_backwards=True)(h)
    b = L.SimpleRNN(4, activation="relu", return_sequences=True, go_backwards=True)(x)
    b = L.SimpleRNN(3, use_bias=False)(b)
    c = L.GRU(2, use_bias=False, return_sequences=True)(x)
    c = L.Flatten()(c)
    y = L.Concatenate()([a, b, c])
    m = keras.Model(x, y, name="rnn_gru_simple")
    return m, [normal(rng, 3, 6, 4)]


def m_rnn_bidirectional(rng):
    # Bidirectional LSTM (concat, sequences: the backward output flipped
    # back), GRU (sum), SimpleRNN (mul, ave) and an explicit backward_layer.
    x = keras.Input((5, 3), name="seq")
    h = L.Bidirectional(L.LSTM(4, return_sequences=True))(x)                 # 5x8
    a = L.Bidirectional(L.GRU(3), merge_mode="sum")(h)                       # 3
    b = L.Bidirectional(L.SimpleRNN(2, return_sequences=True), merge_mode="mul")(h)
    b = L.Bidirectional(L.SimpleRNN(2), merge_mode="ave")(b)                 # 2
    c = L.Bidirectional(L.LSTM(2), backward_layer=L.GRU(3, go_backwards=True))(x)  # 5
    y = L.Concatenate()([a, b, c])
    m = keras.Model(x, y, name="rnn_bidirectional")
    return m, [normal(rng, 3, 5, 3)]


def m_rnn_recurrent_dropout(rng):
    # recurrent_dropout (Keras then runs implementation 1 with one mask per
    # gate, in training only) in LSTM with dropout, GRU both reset_after
    # ways, SimpleRNN and a Bidirectional LSTM: inference is the plain cells.
    x = keras.Input((6, 4), name="seq")
    h = L.LSTM(5, dropout=0.2, recurrent_dropout=0.3, return_sequences=True)(x)
    a = L.GRU(3, recurrent_dropout=0.25)(h)
    b = L.GRU(3, dropout=0.1, recurrent_dropout=0.4, reset_after=False, go_backwards=True)(h)
    c = L.SimpleRNN(2, dropout=0.2, recurrent_dropout=0.5)(x)
    d = L.Bidirectional(L.LSTM(2, recurrent_dropout=0.2))(x)
    y = L.Concatenate()([a, b, c, d])
    m = keras.Model(x, y, name="rnn_recurrent_dropout")
    return m, [normal(rng, 3, 6, 4)]


def m_rnn_recurrent_dropout_masked(rng):
    # the same over an Embedding(mask_zero) mask (pre-padded tokens)
    m = keras.Sequential([
        keras.Input((6,), dtype="int32"),
        L.Embedding(9, 4, mask_zero=True),
        L.LSTM(5, dropout=0.2, recurrent_dropout=0.3, return_sequences=True),
        L.GRU(3, recurrent_dropout=0.25),
        L.Dense(2, activation="softmax"),
    ], name="rnn_recurrent_dropout_masked")
    t = rng.integers(1, 9, size=(4, 6)).astype("int32")
    t[1, :2] = 0
    t[3, :5] = 0
    return m, [t]


def m_rnn_seq2seq(rng):
    # keras.io's lstm_seq2seq (fixed lengths): the encoder LSTM's final
    # states (return_state) start the decoder LSTM (initial_state), which
    # also returns its states; the decoder's h is a second model output.
    enc_in = keras.Input((7, 5), name="encoder_inputs")
    _, h, c = L.LSTM(4, return_state=True)(enc_in)
    dec_in = keras.Input((6, 3), name="decoder_inputs")
    y, dh, _ = L.LSTM(4, return_sequences=True, return_state=True)(dec_in, initial_state=[h, c])
    y = L.Dense(3, activation="softmax")(y)
    m = keras.Model([enc_in, dec_in], [y, dh], name="rnn_seq2seq")
    return m, [normal(rng, 3, 7, 5), normal(rng, 3, 6, 3)]


def m_rnn_states(rng):
    # Bidirectional with merge_mode None and return_state ([y_f, y_b, h_f,
    # h_b]); a Bidirectional LSTM started from them (initial_state: the
    # forward layer's h, c, then the backward one's) returning its states;
    # a GRU (reset_after False, backwards) and a SimpleRNN started from one.
    x = keras.Input((5, 3), name="seq")
    yf, yb, hf, hb = L.Bidirectional(L.GRU(3, return_sequences=True, return_state=True), merge_mode=None)(x)
    s = L.Add()([yf, yb])
    o, h1, c1, h2, c2 = L.Bidirectional(L.LSTM(3, return_state=True))(s, initial_state=[hf, hb, hb, hf])
    g, gh = L.GRU(3, reset_after=False, go_backwards=True, return_state=True)(s, initial_state=[c1])
    z, zh = L.SimpleRNN(3, return_state=True)(x, initial_state=[h2])
    y = L.Concatenate()([o, c2, g, gh, z, zh])
    m = keras.Model(x, y, name="rnn_states")
    return m, [normal(rng, 3, 5, 3)]


# Which files a fixture gets. Keras's HDF5 files cost ~2.5 KB per layer
# whatever the layer holds (two HDF5 groups per layer) plus ~6 KB per file,
# so writing all four formats for every model would make the folder ~2 MB.
# Every model gets M.keras (the layer and option coverage). The legacy .h5,
# the .weights.h5 and the .json (the same JSON as the .keras's config.json)
# are written for a subset that covers what differs between the formats: a
# compiled Sequential with training_config and optimizer weights in all four
# formats (train_mlp_adam), the legacy .h5 of a Functional model with a
# shared layer and two inputs (func_shared); tests/fixtures/tf_keras adds
# tf.keras 2's own legacy .h5 with BatchNormalization (non-trainable weights),
def tokens(rng, n, t, vocab, dtype=np.int32):
    """n sequences of t token indices in [1, vocab), each padded with a
    random number of trailing zeros (at least one token stays)."""
    x = rng.integers(1, vocab, (n, t))
    for i in range(n):
        x[i, rng.integers(1, t + 1):] = 0
    return x.astype(dtype)


def m_embedding_fasttext(rng):
    # fasttext-style: int32 tokens, Embedding(mask_zero) -> the masked mean
    # over the valid steps -> a softmax head.
    m = keras.Sequential([
        keras.Input((10,), dtype="int32"),
        L.Embedding(50, 8, mask_zero=True),
        L.GlobalAveragePooling1D(),
        L.Dense(3, activation="softmax"),
    ], name="embedding_fasttext")
    return m, [tokens(rng, 5, 10, 50)]


def m_embedding_masking(rng):
    # int64 tokens: the mask of Embedding(mask_zero) passes through Dense,
    # Dropout and an Activation into the masked mean; Sequential, since a
    # Functional model with a mask-consuming layer is written by Keras 3 with
    # the mask as explicit ops (NotEqual, Any, LogicalOr) and mask= calls,
    # which flynn refuses for now.
    m = keras.Sequential([
        keras.Input((6,), dtype="int64"),
        L.Embedding(30, 3, mask_zero=True),
        L.Dense(4, activation="relu"),
        L.Dropout(0.3),
        L.Activation("tanh"),
        L.GlobalAveragePooling1D(),
        L.Dense(2, activation="softmax"),
    ], name="embedding_masking")
    t = tokens(rng, 4, 6, 30, np.int64)
    t[3, :] = 0
    t[3, 2] = 29  # a valid step in the middle of padding
    return m, [t]


def m_masking_layer(rng):
    # Masking: steps equal to mask_value are zeroed and skipped by the mean.
    m = keras.Sequential([
        keras.Input((6, 3)),
        L.Masking(mask_value=0.5),
        L.Dense(4, activation="relu"),
        L.GlobalAveragePooling1D(keepdims=True),
        L.Flatten(),
        L.Dense(2),
    ], name="masking_layer")
    f = normal(rng, 4, 6, 3)
    f[0, 4:] = 0.5
    f[1, 1] = 0.5
    f[2, :3] = 0.5
    f[3, 2, 0] = 0.5  # one feature only: not masked
    return m, [f]


# Conv2D/pooling configs and a two-output Functional model. The .weights.h5 layout is also covered
# by the four M_step1.weights.h5 files.
ALL = ("keras", "h5", "weights_h5", "json")
KERAS_H5 = ("keras", "h5")
KERAS = ("keras",)

def m_transformer_block(rng):
    # A small Transformer encoder block on a float sequence (T=6, d=8):
    # self-attention MultiHeadAttention(x, x), residual Add, LayerNormalization,
    # a feed-forward Dense pair on the rank-3 sequence (Keras applies Dense to
    # the last axis), a second residual and LayerNormalization, pooled.
    x = keras.Input((6, 8), name="seq")
    a = L.MultiHeadAttention(num_heads=2, key_dim=4)(x, x)
    h = L.LayerNormalization(epsilon=1e-6)(L.Add()([x, a]))
    f = L.Dense(16, activation="relu")(h)
    f = L.Dense(8)(f)
    h = L.LayerNormalization()(L.Add()([h, f]))
    h = L.GlobalAveragePooling1D()(h)
    y = L.Dense(3, activation="softmax")(h)
    m = keras.Model(x, y, name="transformer_block")
    return m, [normal(rng, 4, 6, 8)]


def m_attention_layers(rng):
    # Cross-attention with a key of its own, a causal mask, output_shape, no
    # biases (value_dim != key_dim fails in Keras 3.15 on JAX itself: its
    # dot_product_attention wants equal sizes; flynn's op tests cover it); Keras's dot-product Attention (with
    # and without a causal mask, key given); LayerNormalization over two
    # axes, without centring, and with rms_scaling.
    q = keras.Input((5, 6), name="q")
    v = keras.Input((7, 4), name="v")
    k = keras.Input((7, 3), name="k")
    a = L.MultiHeadAttention(num_heads=3, key_dim=2, output_shape=7,
                             use_bias=False)(q, v, key=k)                          # 5x7
    b = L.MultiHeadAttention(num_heads=2, key_dim=3)(a, a, use_causal_mask=True)   # 5x7
    c = L.Attention()([b, a])                                                      # 5x7
    d = L.Attention()([c, b, a], use_causal_mask=True)                             # 5x7
    h = L.LayerNormalization(axis=[-2, -1])(L.Concatenate()([c, d]))
    h = L.LayerNormalization(center=False)(h)
    h = L.LayerNormalization(rms_scaling=True)(h)
    m = keras.Model([q, v, k], h, name="attention_layers")
    return m, [normal(rng, 3, 5, 6), normal(rng, 3, 7, 4), normal(rng, 3, 7, 3)]


def m_attention_scores(rng):
    # Keras's Attention with learned scores: use_scale (dot), score_mode
    # "concat" (Bahdanau), both, a key of its own and a causal mask; the
    # learned scalars moved off their initial 1 so that they matter.
    q = keras.Input((5, 4), name="q")
    v = keras.Input((6, 4), name="v")
    att_a = L.Attention(use_scale=True)
    att_b = L.Attention(score_mode="concat")
    att_c = L.Attention(use_scale=True, score_mode="concat")
    a = att_a([q, v])                                        # 5x4
    b = att_b([q, v])                                        # 5x4
    c = att_c([a, v, L.Dense(4)(v)], use_causal_mask=True)   # 5x4
    h = L.Dense(3)(L.Concatenate()([a, b, c]))
    m = keras.Model([q, v], h, name="attention_scores")
    att_a.scale.assign(0.7)
    att_b.concat_score_weight.assign(1.3)
    att_c.scale.assign(0.6)
    att_c.concat_score_weight.assign(0.8)
    return m, [normal(rng, 3, 5, 4), normal(rng, 3, 6, 4)]


def m_time_repeat(rng):
    # RepeatVector, TimeDistributed(Dense), Dense on a rank-3 input and
    # Flatten of a rank-3 sequence.
    m = keras.Sequential([
        keras.Input((6,)),
        L.Dense(5, activation="tanh"),
        L.RepeatVector(4),                                   # 4x5
        L.TimeDistributed(L.Dense(3, activation="relu")),    # 4x3
        L.Dense(2),                                          # 4x2
        L.Flatten(),                                         # 8
        L.Dense(3),
    ], name="time_repeat")
    return m, [normal(rng, 3, 6)]


def m_time_distributed_cnn(rng):
    # A CNN on every frame, then an LSTM over the frames (keras.io's video
    # classifiers): TimeDistributed around Conv2D, MaxPooling2D,
    # BatchNormalization (statistics over every frame at once) and Flatten.
    m = keras.Sequential([
        keras.Input((4, 6, 6, 2)),
        L.TimeDistributed(L.Conv2D(3, 3, activation="relu")),       # 4x4x4x3
        L.TimeDistributed(L.MaxPooling2D(2)),                       # 4x2x2x3
        L.TimeDistributed(L.BatchNormalization()),
        L.TimeDistributed(L.Flatten()),                             # 4x12
        L.LSTM(5),
        L.Dense(3),
    ], name="time_distributed_cnn")
    for layer in m.layers:
        if isinstance(layer, L.TimeDistributed) and isinstance(layer.layer, L.BatchNormalization):
            bn = layer.layer
            bn.moving_mean.assign(rng.normal(0, 0.3, 3).astype(F32))
            bn.moving_variance.assign(rng.uniform(0.5, 1.5, 3).astype(F32))
    return m, [normal(rng, 3, 4, 6, 6, 2)]


def m_seq1d_layers(rng):
    # The sequence forms of padding, cropping and upsampling around a Conv1D
    # text CNN, and SpatialDropout1D (inactive in inference; its Functional
    # call is written with training=False). No mask: Keras writes a mask
    # consumed in a Functional model as NotEqual ops it cannot read back
    # from its own legacy .h5.
    x = keras.Input((7,), dtype="int32", name="tokens")
    e = L.Embedding(20, 4)(x)
    h = L.SpatialDropout1D(0.3)(e)
    p = L.GlobalAveragePooling1D()(h)
    c = L.ZeroPadding1D((1, 2))(e)                           # 10x4
    c = L.Conv1D(3, 3, activation="relu")(c)                 # 8x3
    c = L.Cropping1D((2, 1))(c)                              # 5x3
    c = L.UpSampling1D(3)(c)                                 # 15x3
    c = L.ZeroPadding1D(2)(c)                                # 19x3
    c = L.Cropping1D()(c)                                    # 17x3
    c = L.GlobalMaxPooling1D()(c)
    y = L.Dense(2)(L.Concatenate()([p, c]))
    return keras.Model(x, y, name="seq1d_layers"), [tokens(rng, 3, 7, 20)]


def m_func_mask_ops(rng):
    # A Functional model's masks as Keras 3 writes them: NotEqual, Any,
    # LogicalOr and ConvertToTensor operations and mask= call arguments
    # (Embedding mask_zero + Masking through Add into masked pooling; an
    # LSTM and an Attention layer fed by an Embedding's mask). Keras 3.15
    # cannot read these operations back from its own legacy .h5: .keras only.
    tok = keras.Input((6,), dtype="int32", name="tokens")
    feats = keras.Input((6, 3), name="feats")
    e = L.Embedding(20, 3, mask_zero=True)(tok)
    h = L.Add()([e, L.Masking()(feats)])
    h = L.Dropout(0.2)(L.Dense(4, activation="tanh")(h))
    p = L.GlobalAveragePooling1D()(h)                       # mask: LogicalOr(NotEqual, Any(NotEqual))
    r = L.LSTM(3)(e)                                        # mask: NotEqual
    a = L.Attention()([e, e])
    q = L.GlobalAveragePooling1D()(a)                       # mask: ConvertToTensor(NotEqual)
    y = L.Dense(2)(L.Concatenate()([p, r, q]))
    m = keras.Model([tok, feats], y, name="func_mask_ops")
    t = tokens(rng, 3, 6, 20)
    f = normal(rng, 3, 6, 3)
    f[0, 4:] = 0.0  # masked steps (Masking's zeros)
    f[2, 1] = 0.0
    return m, [t, f]


MODELS = [
    ("dense_activations", "sequential", m_dense_activations, KERAS),
    ("activation_layers", "sequential", m_activation_layers, KERAS),
    ("conv_basic", "sequential", m_conv_basic, KERAS),
    ("conv_strides", "sequential", m_conv_strides, KERAS),
    ("pool_max", "sequential", m_pool_max, KERAS),
    ("pool_avg", "sequential", m_pool_avg, KERAS),
    ("reshape_pool_flatten", "sequential", m_reshape_pool_flatten, KERAS),
    ("batchnorm", "sequential", m_batchnorm, KERAS),
    ("func_residual", "functional", m_func_residual, KERAS),
    ("func_multi_io", "functional", m_func_multi_io, KERAS),
    ("func_shared", "functional", m_func_shared, KERAS_H5),
    ("padding_cropping", "sequential", m_padding_cropping, ALL),
    ("activations_more", "sequential", m_activations_more, KERAS),
    ("sequence_1d", "functional", m_sequence_1d, ALL),
    ("global_pools_2d", "functional", m_global_pools_2d, KERAS),
    ("merges_more", "functional", m_merges_more, KERAS_H5),
    ("dropout_noise", "sequential", m_dropout_noise, KERAS_H5),
    ("dropout_call", "functional", m_dropout_call, KERAS),
    ("param_layers", "sequential", m_param_layers, ALL),
    ("depthwise_separable", "sequential", m_depthwise_separable, ALL),
    ("mobilenet_block", "functional", m_mobilenet_block, KERAS),
    ("upsample_deconv_permute", "functional", m_upsample_deconv_permute, ALL),
    ("dilated_grouped", "sequential", m_dilated_grouped, ALL),
    ("conv1d_dilated", "functional", m_conv1d_dilated, KERAS_H5),
    ("resizing", "sequential", m_resizing, ALL),
    ("transformer_block", "functional", m_transformer_block, ALL),
    # KERAS only: Keras 3.15 cannot read its own legacy .h5 of an Attention
    # layer (it deserializes score_mode "dot" as the function keras.ops.dot)
    ("attention_layers", "functional", m_attention_layers, KERAS),
    ("attention_scores", "functional", m_attention_scores, KERAS),
    ("time_repeat", "sequential", m_time_repeat, ALL),
    ("seq1d_layers", "functional", m_seq1d_layers, ALL),
    ("func_mask_ops", "functional", m_func_mask_ops, KERAS),
    ("time_distributed_cnn", "sequential", m_time_distributed_cnn, ALL),
    ("rnn_lstm", "sequential", m_rnn_lstm, ALL),
    ("rnn_gru_simple", "functional", m_rnn_gru_simple, ALL),
    ("rnn_bidirectional", "functional", m_rnn_bidirectional, ALL),
    ("rnn_recurrent_dropout", "functional", m_rnn_recurrent_dropout, ALL),
    ("rnn_recurrent_dropout_masked", "sequential", m_rnn_recurrent_dropout_masked, ALL),
    ("rnn_seq2seq", "functional", m_rnn_seq2seq, ALL),
    ("rnn_states", "functional", m_rnn_states, ALL),
    ("embedding_fasttext", "sequential", m_embedding_fasttext, ALL),
    ("embedding_masking", "sequential", m_embedding_masking, ALL),
    ("masking_layer", "sequential", m_masking_layer, ALL),
]


# ------------------------------------------------------ the training models
#
# (name, builder, optimizer factory, loss, metrics, batch maker)
# No Dropout in these models; train_on_batch has no shuffling.


def t_mlp_adam():
    return keras.Sequential([
        keras.Input((6,)),
        L.Dense(8, activation="relu"),
        L.Dense(4, activation="softmax"),
    ], name="train_mlp_adam")


def t_mlp_named(name):
    """train_mlp_adam's model under another name (the schedule and clipping fixtures)."""
    def build():
        return keras.Sequential([
            keras.Input((6,)),
            L.Dense(8, activation="relu"),
            L.Dense(4, activation="softmax"),
        ], name=name)
    return build


def t_cnn_sgd():
    return keras.Sequential([
        keras.Input((6, 6, 1)),
        L.Conv2D(3, 3, activation="relu"),
        L.MaxPooling2D(2),
        L.Flatten(),
        L.Dense(3, activation="softmax"),
    ], name="train_cnn_sgd")


def t_mnist_cnn_adam():
    """mnist_cnn's shape, small: Conv2D(ReLU) -> Conv2D(ReLU) -> MaxPooling2D
    (the backward flynn runs fused, with the first ReLU's mask folded in) ->
    Flatten -> Dense(ReLU) -> Dense(softmax); without mnist_cnn's Dropout,
    whose masks come from a different generator in Keras."""
    return keras.Sequential([
        keras.Input((8, 8, 1)),
        L.Conv2D(4, 3, activation="relu"),
        L.Conv2D(6, 3, activation="relu"),
        L.MaxPooling2D(2),
        L.Flatten(),
        L.Dense(8, activation="relu"),
        L.Dense(3, activation="softmax"),
    ], name="train_mnist_cnn_adam")


def t_bn_rmsprop():
    return keras.Sequential([
        keras.Input((5,)),
        # No bias before BatchNormalization: its gradient is 0 up to
        # rounding (BN subtracts the batch mean), and RMSprop's first step
        # would amplify that rounding noise to ~1e-4.
        L.Dense(6, use_bias=False),
        L.BatchNormalization(),
        L.Activation("relu"),
        L.Dense(2),
    ], name="train_bn_rmsprop")


def t_frozen_sgd():
    # Transfer learning as keras.io teaches it: a frozen convolution and a
    # frozen BatchNormalization (inference mode in training too, moving
    # statistics kept), then a trainable BatchNormalization and head.
    m = keras.Sequential([
        keras.Input((6, 6, 2)),
        L.Conv2D(4, 3, name="frozen_conv"),
        L.BatchNormalization(name="frozen_bn"),
        L.Activation("relu"),
        L.Conv2D(3, 3),
        L.BatchNormalization(),
        L.Flatten(),
        L.Dense(3, activation="softmax"),
    ], name="train_frozen_sgd")
    rng = np.random.default_rng(5)
    bn = m.get_layer("frozen_bn")
    bn.set_weights([rng.uniform(0.5, 1.5, 4).astype(F32), rng.uniform(-0.5, 0.5, 4).astype(F32),
                    rng.uniform(-0.3, 0.3, 4).astype(F32), rng.uniform(0.5, 2.0, 4).astype(F32)])
    m.get_layer("frozen_conv").trainable = False
    bn.trainable = False
    return m


def t_adamw():
    return keras.Sequential([
        keras.Input((6,)),
        L.Dense(5, activation="tanh"),
        L.Dense(1),                      # logits
    ], name="train_adamw")


def t_pad_crop_adam():
    x = keras.Input((6, 6, 1), name="image")
    h = L.ZeroPadding2D(((1, 0), (2, 1)))(x)        # 7x9
    h = L.Conv2D(3, 3, activation="softplus")(h)    # 5x7
    h = L.Cropping2D(((0, 1), (1, 1)))(h)           # 4x5
    h = L.Flatten()(h)
    y = L.Dense(3, activation="softmax")(h)
    return keras.Model(x, y, name="train_pad_crop_adam")


def t_pad_fold_adam():
    # Keras's applications pad before a strided convolution (MobileNetV2's
    # stride-2 blocks with correct_pad, ResNet50's stem): flynn takes the
    # ZeroPadding2D into the convolution after it, and forms the
    # normalisation before the padding as the depthwise reads it.
    x = keras.Input((8, 8, 3), name="image")
    h = L.Conv2D(6, 1, use_bias=False)(x)
    h = L.BatchNormalization()(h)
    h = L.ReLU(6.0)(h)
    h = L.ZeroPadding2D(((0, 1), (0, 1)))(h)                   # 9x9
    h = L.DepthwiseConv2D(3, strides=2, use_bias=False)(h)     # 4x4
    h = L.BatchNormalization()(h)
    h = L.ReLU()(h)
    h = L.ZeroPadding2D(1)(h)                                  # 6x6
    h = L.Conv2D(4, 3, activation="relu")(h)                   # 4x4
    h = L.GlobalAveragePooling2D()(h)
    y = L.Dense(3, activation="softmax")(h)
    return keras.Model(x, y, name="train_pad_fold_adam")


def t_bn_leaky_sgd():
    # Conv2D -> BatchNormalization -> LeakyReLU, Darknet's block: flynn's
    # training fuses the LeakyReLU into the normalisation (its value written
    # by the normalisation, its gradient masked by the slope there).
    x = keras.Input((6, 6, 2), name="image")
    h = L.Conv2D(5, 3, padding="same", use_bias=False)(x)
    h = L.BatchNormalization()(h)
    h = L.LeakyReLU(negative_slope=0.1)(h)
    h = L.Conv2D(4, 3, strides=2, padding="same", use_bias=False)(h)
    h = L.BatchNormalization()(h)
    h = L.LeakyReLU()(h)                                       # Keras's 0.3
    h = L.GlobalAveragePooling2D()(h)
    y = L.Dense(3, activation="softmax")(h)
    return keras.Model(x, y, name="train_bn_leaky_sgd")


def t_conv1d_adam():
    return keras.Sequential([
        keras.Input((9, 2)),
        L.Conv1D(4, 3, padding="causal", activation="tanh"),
        L.MaxPooling1D(2),
        L.Conv1D(3, 2, padding="same", activation="relu"),
        L.GlobalMaxPooling1D(),
        L.Dense(2, activation="softmax"),
    ], name="train_conv1d_adam")


def t_merges_sgd():
    x = keras.Input((6,), name="x")
    p = L.Dense(4, activation="tanh")(x)
    q = L.Dense(4)(x)
    h = L.Concatenate()([L.Subtract()([p, q]), L.Maximum()([p, q]), L.Average()([p, q])])
    y = L.Dense(1)(h)
    return keras.Model(x, y, name="train_merges_sgd")
def t_prelu_relu_adam():
    # PReLU's trainable alpha (shared over the image, and per element) and
    # ReLU(max_value) whose cap some units reach.
    return keras.Sequential([
        keras.Input((5, 5, 2)),
        L.Conv2D(3, 2),
        L.PReLU(shared_axes=[1, 2]),
        L.Flatten(),
        L.Dense(8),
        L.PReLU(),
        L.Dense(6),
        L.ReLU(max_value=0.6, negative_slope=0.05),
        L.Dense(3, activation="softmax"),
    ], name="train_prelu_relu_adam")
def t_depthwise_adam():
    return keras.Sequential([
        keras.Input((7, 7, 2)),
        L.DepthwiseConv2D(3, depth_multiplier=2, activation="tanh"),   # 5x5x4
        L.SeparableConv2D(4, 3, strides=2, padding="same",
                          activation="relu"),                          # 3x3x4
        L.Flatten(),
        L.Dense(3, activation="softmax"),
    ], name="train_depthwise_adam")



def t_deconv_adam():
    # An encoder-decoder step: a strided Conv2D down, a strided
    # Conv2DTranspose and a bilinear UpSampling2D up, a Permute between.
    return keras.Sequential([
        keras.Input((8, 8, 2)),
        L.Conv2D(4, 3, strides=2, padding="same", activation="relu"),            # 4x4x4
        L.Conv2DTranspose(3, 3, strides=2, padding="same", activation="tanh"),   # 8x8x3
        L.UpSampling2D(2, interpolation="bilinear"),                             # 16x16x3
        L.Permute((2, 1, 3)),
        L.Conv2D(2, 3, strides=2, activation="tanh"),                            # 7x7x2
        L.Flatten(),
        L.Dense(3, activation="softmax"),
    ], name="train_deconv_adam")


def t_dilated_grouped_sgd():
    # Dilated and grouped convolutions (Conv2D, the depthwise form of groups,
    # DepthwiseConv2D), a bilinear Resizing between them, a dilated causal
    # grouped Conv1D after a Reshape: the gradients of all of them.
    return keras.Sequential([
        keras.Input((8, 8, 4)),
        L.Conv2D(6, 3, dilation_rate=2, padding="same", groups=2,
                 activation="tanh"),                                       # 8x8x6
        L.DepthwiseConv2D(3, dilation_rate=2, activation="tanh"),          # 4x4x6
        L.Resizing(6, 5),                                                  # 6x5x6
        L.Conv2D(6, 3, strides=2, groups=3, activation="tanh"),            # 2x2x6
        L.Conv2D(12, 2, padding="same", groups=6),                         # 2x2x12
        L.Reshape((4, 12)),
        L.Conv1D(6, 2, dilation_rate=2, padding="causal", groups=2,
                 activation="relu"),                                       # 4x6
        L.Flatten(),
        L.Dense(3, activation="softmax"),
    ], name="train_dilated_grouped_sgd")


def t_transformer_sgd():
    # One causal Transformer block with an Attention layer after it: every
    # weight of MultiHeadAttention, LayerNormalization's gamma and beta.
    x = keras.Input((5, 6), name="seq")
    a = L.MultiHeadAttention(num_heads=2, key_dim=3)(x, x, use_causal_mask=True)
    h = L.LayerNormalization()(L.Add()([x, a]))
    f = L.Dense(6, activation="relu")(L.Dense(12, activation="relu")(h))
    h = L.LayerNormalization(center=False)(L.Add()([h, f]))
    h = L.Attention()([h, x])
    y = L.Dense(3, activation="softmax")(L.Flatten()(h))
    return keras.Model(x, y, name="train_transformer_sgd")


def t_attention_scores_sgd():
    # The Attention layer's learned scalars train: use_scale on dot-product
    # scores, and concat scores with their scale and concat_score_weight.
    x = keras.Input((5, 4), name="seq")
    h = L.Dense(4, activation="tanh")(x)
    h = L.Attention(use_scale=True, score_mode="concat")([h, x])
    h = L.Attention(use_scale=True)([h, x], use_causal_mask=True)
    y = L.Dense(3, activation="softmax")(L.Flatten()(h))
    return keras.Model(x, y, name="train_attention_scores_sgd")


def t_time_distributed_cnn_sgd():
    # Gradients through the per-frame steps: shared Conv2D weights summed
    # over the frames, BatchNormalization over all of them in training.
    return keras.Sequential([
        keras.Input((3, 5, 5, 1)),
        L.TimeDistributed(L.Conv2D(2, 3, activation="tanh")),     # 3x3x3x2
        L.TimeDistributed(L.BatchNormalization()),
        L.TimeDistributed(L.GlobalAveragePooling2D()),            # 3x2
        L.SimpleRNN(4),
        L.Dense(3, activation="softmax"),
    ], name="train_time_distributed_cnn_sgd")


def t_seq1d_sgd():
    # Gradients through the 1D padding, cropping and upsampling.
    return keras.Sequential([
        keras.Input((6, 3)),
        L.ZeroPadding1D((2, 1)),                             # 9x3
        L.Conv1D(4, 3, activation="tanh"),                   # 7x4
        L.UpSampling1D(2),                                   # 14x4
        L.Cropping1D((3, 2)),                                # 9x4
        L.Conv1D(2, 2, strides=2),                           # 4x2
        L.Flatten(),
        L.Dense(3, activation="softmax"),
    ], name="train_seq1d_sgd")


def t_func_mask_lstm_sgd():
    # A Functional text classifier with a masked LSTM and masked pooling:
    # the NotEqual masks Keras writes carry the gradients' masks too.
    x = keras.Input((7,), dtype="int32", name="tokens")
    e = L.Embedding(15, 4, mask_zero=True)(x)
    r = L.LSTM(3, return_sequences=True)(e)
    p = L.GlobalAveragePooling1D()(L.Dense(3, activation="tanh")(r))
    y = L.Dense(3, activation="softmax")(p)
    return keras.Model(x, y, name="train_func_mask_lstm_sgd")


def t_time_repeat_sgd():
    return keras.Sequential([
        keras.Input((4,)),
        L.Dense(6, activation="tanh"),
        L.RepeatVector(3),
        L.TimeDistributed(L.Dense(5, activation="tanh")),
        L.LayerNormalization(),
        L.Flatten(),
        L.Dense(2),
    ], name="train_time_repeat_sgd")


def t_lstm_adam():
    # An LSTM classifier's step (the training fixture of the recurrent op).
    return keras.Sequential([
        keras.Input((6, 3)),
        L.LSTM(5),
        L.Dense(3, activation="softmax"),
    ], name="train_lstm_adam")


def t_rnn_sgd():
    # Bidirectional GRU sequences into a GRU (reset_after False, backwards)
    # and a SimpleRNN: every recurrent backward.
    x = keras.Input((5, 3), name="seq")
    h = L.Bidirectional(L.GRU(4, return_sequences=True))(x)
    a = L.GRU(3, reset_after=False, go_backwards=True)(h)
    b = L.SimpleRNN(3)(h)
    y = L.Dense(2)(L.Concatenate()([a, b]))
    return keras.Model(x, y, name="train_rnn_sgd")


def t_rnn_states_sgd():
    # The states' gradients: an encoder LSTM whose only path to the loss is
    # its final states (return_state), which start a decoder LSTM
    # (initial_state) over the same sequence; a GRU started from the
    # decoder's final h; per-step softmax (flynn's fit takes one input, so
    # the decoder reads the encoder's sequence).
    x = keras.Input((5, 3), name="seq")
    _, h, c = L.LSTM(4, return_state=True)(x)
    y, dh, _ = L.LSTM(4, return_sequences=True, return_state=True, go_backwards=True)(x, initial_state=[h, c])
    g = L.GRU(4, return_sequences=True)(y, initial_state=[dh])
    y = L.Dense(3, activation="softmax")(g)
    return keras.Model(x, y, name="train_rnn_states_sgd")


# Variable-length inputs, keras.Input(shape=(None, ...)): predicted at
# lengths 7 and 11, one training step on a batch of length 9.


def t_varlen_lstm_sgd():
    # The keras.io text classifier: int32 tokens of any length,
    # Embedding(mask_zero) into an LSTM.
    return keras.Sequential([
        keras.Input((None,), dtype="int32"),
        L.Embedding(30, 8, mask_zero=True),
        L.LSTM(6),
        L.Dense(3, activation="softmax"),
    ], name="train_varlen_lstm_sgd")


def t_varlen_textcnn_sgd():
    # A Conv1D text CNN: Embedding, Conv1D, MaxPooling1D, Conv1D "same",
    # GlobalMaxPooling1D.
    return keras.Sequential([
        keras.Input((None,), dtype="int32"),
        L.Embedding(30, 8),
        L.Conv1D(8, 3, activation="relu"),
        L.MaxPooling1D(2),
        L.Conv1D(6, 3, padding="same", activation="relu"),
        L.GlobalMaxPooling1D(),
        L.Dense(2, activation="softmax"),
    ], name="train_varlen_textcnn_sgd")


def t_varlen_transformer_sgd():
    # A Transformer encoder block on a float sequence of any length:
    # MultiHeadAttention, LayerNormalization, Dense on the rank-3 sequence.
    x = keras.Input((None, 8), name="seq")
    a = L.MultiHeadAttention(num_heads=2, key_dim=4)(x, x)
    h = L.LayerNormalization()(L.Add()([x, a]))
    f = L.Dense(8)(L.Dense(16, activation="relu")(h))
    h = L.LayerNormalization()(L.Add()([h, f]))
    y = L.Dense(3, activation="softmax")(L.GlobalAveragePooling1D()(h))
    return keras.Model(x, y, name="train_varlen_transformer_sgd")


def t_varlen_bigru_td_sgd():
    # A per-step tagger: Bidirectional GRU sequences, TimeDistributed(Dense).
    return keras.Sequential([
        keras.Input((None, 5)),
        L.Bidirectional(L.GRU(4, return_sequences=True)),
        L.TimeDistributed(L.Dense(3, activation="softmax")),
    ], name="train_varlen_bigru_td_sgd")


def b_seq_sparse(t, c, classes):
    def make(rng):
        return normal(rng, 8, t, c), rng.integers(0, classes, (8, t)).astype(np.int32)
    return make


def t_embedding_bce_sgd():
    # IMDB-style: tokens -> Embedding(mask_zero) -> masked mean -> a sigmoid
    # head, binary_crossentropy with BinaryAccuracy.
    return keras.Sequential([
        keras.Input((12,), dtype="int32"),
        L.Embedding(40, 8, mask_zero=True),
        L.GlobalAveragePooling1D(),
        L.Dense(8, activation="relu"),
        L.Dense(1, activation="sigmoid"),
    ], name="train_embedding_bce_sgd")


def t_seq_scce_masked():
    # a per-step softmax over (batch, steps, classes) with (batch, steps)
    # labels; the mask of the padding reaches the output, and Keras weighs
    # the loss and the accuracy by it.
    return keras.Sequential([
        keras.Input((6,), dtype="int32"),
        L.Embedding(20, 5, mask_zero=True),
        L.Dense(8, activation="tanh"),
        L.Dense(7, activation="softmax"),
    ], name="train_seq_scce_masked")


def t_masking_mse_sgd():
    return keras.Sequential([
        keras.Input((5, 3)),
        L.Masking(mask_value=0.0),
        L.Dense(4, activation="tanh"),
        L.GlobalAveragePooling1D(),
        L.Dense(1),
    ], name="train_masking_mse_sgd")


def b_tokens_binary(t, vocab):
    def make(rng):
        return tokens(rng, 8, t, vocab), rng.integers(0, 2, (8, 1)).astype(F32)
    return make


def b_sparse_tokens(classes, t, vocab):
    def make(rng):
        return tokens(rng, 8, t, vocab), rng.integers(0, classes, 8).astype(np.int32)
    return make


def b_tokens_per_step(t, vocab, classes):
    def make(rng):
        return tokens(rng, 8, t, vocab), rng.integers(0, classes, (8, t)).astype(np.int32)
    return make


def b_masked_regression(t, c):
    def make(rng):
        x = normal(rng, 8, t, c)
        for i in range(8):
            x[i, rng.integers(1, t + 1):] = 0.0
        return x, normal(rng, 8, 1)
    return make


def b_sparse(classes, *shape):
    def make(rng):
        x = normal(rng, 8, *shape)
        y = rng.integers(0, classes, 8).astype(np.int32)
        return x, y
    return make


def b_onehot(classes, *shape):
    def make(rng):
        x = normal(rng, 8, *shape)
        y = np.eye(classes, dtype=F32)[rng.integers(0, classes, 8)]
        return x, y
    return make


def b_regression(outs, *shape):
    def make(rng):
        return normal(rng, 8, *shape), normal(rng, 8, outs)
    return make


def b_binary(*shape):
    def make(rng):
        x = normal(rng, 8, *shape)
        y = rng.integers(0, 2, (8, 1)).astype(F32)
        return x, y
    return make


TRAINING = [
    ("train_mlp_adam", t_mlp_adam,
     lambda: keras.optimizers.Adam(learning_rate=0.01),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse(4, 6), ALL),
    ("train_mnist_cnn_adam", t_mnist_cnn_adam,
     lambda: keras.optimizers.Adam(learning_rate=1e-3),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse(3, 8, 8, 1), KERAS),
    ("train_cnn_sgd", t_cnn_sgd,
     lambda: keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
     "categorical_crossentropy", ["accuracy"], b_onehot(3, 6, 6, 1), KERAS),
    # momentum and centered make every kind of RMSprop state appear.
    ("train_bn_rmsprop", t_bn_rmsprop,
     lambda: keras.optimizers.RMSprop(learning_rate=0.01, momentum=0.5,
                                      centered=True),
     "mean_squared_error", None, b_regression(2, 5), KERAS),
    # A loss object (not a string) in the compile config, from_logits=True.
    ("train_adamw", t_adamw,
     lambda: keras.optimizers.AdamW(learning_rate=0.01),
     lambda: keras.losses.BinaryCrossentropy(from_logits=True), None,
     b_binary(6), KERAS),
    ("train_pad_crop_adam", t_pad_crop_adam,
     lambda: keras.optimizers.Adam(learning_rate=0.01),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse(3, 6, 6, 1), KERAS),
    ("train_pad_fold_adam", t_pad_fold_adam,
     lambda: keras.optimizers.Adam(learning_rate=0.01),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse(3, 8, 8, 3), KERAS),
    ("train_bn_leaky_sgd", t_bn_leaky_sgd,
     lambda: keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse(3, 6, 6, 2), KERAS),
    ("train_conv1d_adam", t_conv1d_adam,
     lambda: keras.optimizers.Adam(learning_rate=0.01),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse(2, 9, 2), KERAS),
    ("train_merges_sgd", t_merges_sgd,
     lambda: keras.optimizers.SGD(learning_rate=0.05, momentum=0.9),
     "mean_squared_error", None, b_regression(1, 6), KERAS),
    ("train_prelu_relu_adam", t_prelu_relu_adam,
     lambda: keras.optimizers.Adam(learning_rate=0.01),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse(3, 5, 5, 2), KERAS),
    ("train_depthwise_adam", t_depthwise_adam,
     lambda: keras.optimizers.Adam(learning_rate=0.01),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse(3, 7, 7, 2), KERAS),
    ("train_deconv_adam", t_deconv_adam,
     lambda: keras.optimizers.Adam(learning_rate=0.01),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse(3, 8, 8, 2), KERAS),
    # SGD: a step proportional to the gradient, so that the tiny gradient
    # elements of this deep stack are no trouble (see gradient_check).
    ("train_frozen_sgd", t_frozen_sgd,
     lambda: keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse(3, 6, 6, 2), ("keras", "h5")),
    ("train_dilated_grouped_sgd", t_dilated_grouped_sgd,
     lambda: keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse(3, 8, 8, 4), KERAS),
    # SGD: the key projection's bias gets a gradient that is zero in exact
    # arithmetic (softmax ignores a constant per query) and ~1e-12 in float,
    # whose sign Adam's first step would follow.
    ("train_transformer_sgd", t_transformer_sgd,
     lambda: keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse(3, 5, 6), KERAS),
    ("train_attention_scores_sgd", t_attention_scores_sgd,
     lambda: keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse(3, 5, 4), KERAS),
    ("train_time_distributed_cnn_sgd", t_time_distributed_cnn_sgd,
     lambda: keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse(3, 3, 5, 5, 1), KERAS_H5),
    ("train_seq1d_sgd", t_seq1d_sgd,
     lambda: keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse(3, 6, 3), KERAS_H5),
    ("train_func_mask_lstm_sgd", t_func_mask_lstm_sgd,
     lambda: keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse_tokens(3, 7, 15), KERAS),
    ("train_time_repeat_sgd", t_time_repeat_sgd,
     lambda: keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
     "mean_squared_error", None, b_regression(2, 4), KERAS_H5),
    ("train_lstm_adam", t_lstm_adam,
     lambda: keras.optimizers.Adam(learning_rate=0.01),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse(3, 6, 3), KERAS_H5),
    ("train_rnn_sgd", t_rnn_sgd,
     lambda: keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
     "mean_squared_error", None, b_regression(2, 5, 3), KERAS_H5),
    ("train_rnn_states_sgd", t_rnn_states_sgd,
     lambda: keras.optimizers.SGD(learning_rate=0.5, momentum=0.9),
     "sparse_categorical_crossentropy", ["accuracy"], b_seq_sparse(5, 3, 3), KERAS_H5),
    # SGD for the text models: Adam's first step is ~lr*sign(g), and the
    # embedding rows a token touches once get near-cancelling gradients
    ("train_embedding_bce_sgd", t_embedding_bce_sgd,
     lambda: keras.optimizers.SGD(learning_rate=0.5, momentum=0.9),
     "binary_crossentropy", ["accuracy"], b_tokens_binary(12, 40), KERAS_H5),
    ("train_seq_scce_masked", t_seq_scce_masked,
     lambda: keras.optimizers.SGD(learning_rate=0.5, momentum=0.9),
     "sparse_categorical_crossentropy", ["accuracy"], b_tokens_per_step(6, 20, 7), KERAS),
    ("train_masking_mse_sgd", t_masking_mse_sgd,
     lambda: keras.optimizers.SGD(learning_rate=0.1),
     "mean_squared_error", None, b_masked_regression(5, 3), KERAS),
    ("train_varlen_lstm_sgd", t_varlen_lstm_sgd,
     lambda: keras.optimizers.SGD(learning_rate=0.5, momentum=0.9),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse_tokens(3, 9, 30), ALL),
    ("train_varlen_textcnn_sgd", t_varlen_textcnn_sgd,
     lambda: keras.optimizers.SGD(learning_rate=0.5, momentum=0.9),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse_tokens(2, 9, 30), ALL),
    ("train_varlen_transformer_sgd", t_varlen_transformer_sgd,
     lambda: keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse(3, 9, 8), ALL),
    ("train_varlen_bigru_td_sgd", t_varlen_bigru_td_sgd,
     lambda: keras.optimizers.SGD(learning_rate=0.5, momentum=0.9),
     "sparse_categorical_crossentropy", ["accuracy"], b_seq_sparse(9, 5, 3), ALL),
    # learning-rate schedules and gradient clipping: the schedule's config is
    # the optimizer's learning_rate, its value per step follows the restored
    # iterations (step 2 runs at the second step's rate), and with a schedule
    # the optimizer has no learning_rate variable (the slots follow iterations)
    ("train_mlp_expdecay_clipnorm", t_mlp_named("train_mlp_expdecay_clipnorm"),
     lambda: keras.optimizers.Adam(
         learning_rate=keras.optimizers.schedules.ExponentialDecay(0.01, 1, 0.5, staircase=True),
         clipnorm=0.05),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse(4, 6), ALL),
    ("train_mlp_cosine_gclip", t_mlp_named("train_mlp_cosine_gclip"),
     lambda: keras.optimizers.SGD(
         learning_rate=keras.optimizers.schedules.CosineDecay(0.05, 10, alpha=0.1, warmup_target=0.2,
                                                              warmup_steps=2),
         momentum=0.9, global_clipnorm=0.3),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse(4, 6), KERAS_H5),
    ("train_mlp_piecewise_clipvalue", t_mlp_named("train_mlp_piecewise_clipvalue"),
     lambda: keras.optimizers.RMSprop(
         learning_rate=keras.optimizers.schedules.PiecewiseConstantDecay([0, 5], [0.01, 0.003, 0.001]),
         clipvalue=0.02),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse(4, 6), KERAS_H5),
    ("train_mlp_inversetime_clipnorm", t_mlp_named("train_mlp_inversetime_clipnorm"),
     lambda: keras.optimizers.AdamW(
         learning_rate=keras.optimizers.schedules.InverseTimeDecay(0.01, 1, 1.0), clipnorm=0.05),
     "sparse_categorical_crossentropy", ["accuracy"], b_sparse(4, 6), KERAS),
]


# ------------------------------------------- several inputs, sample and class weights
#
# (name, builder, optimizer factory, loss, metrics, batch maker). The batch
# maker returns (xs, y, kw): kw holds train_on_batch's sample_weight or
# class_weight. Each fixture records the model before the step (M.keras),
# the batch, Keras's evaluate of the batch before the step (with the
# sample_weight, when there is one) and the weights after one
# train_on_batch(xs, y, **kw): checked by test_keras_files' weighted_fixtures.


def w_two_inputs(name):
    def build():
        a = keras.Input((4,), name="features")
        b = keras.Input((3,), name="extra")
        h = L.Concatenate()([L.Dense(5, activation="relu")(a), b])
        y = L.Dense(3, activation="softmax")(L.Dense(6, activation="tanh")(h))
        return keras.Model([a, b], y, name=name)
    return build


def w_mlp(name, outs, act):
    def build():
        return keras.Sequential([
            keras.Input((6,)),
            L.Dense(8, activation="tanh"),
            L.Dense(outs, activation=act),
        ], name=name)
    return build


def w_seq(name):
    def build():  # train_seq_scce_masked's shape: a mask from the padding reaches the output
        return keras.Sequential([
            keras.Input((6,), dtype="int32"),
            L.Embedding(20, 5, mask_zero=True),
            L.Dense(8, activation="tanh"),
            L.Dense(7, activation="softmax"),
        ], name=name)
    return build


def wb_two_inputs(weighted):
    def make(rng):
        xs = [normal(rng, 8, 4), normal(rng, 8, 3)]
        y = rng.integers(0, 3, 8).astype(np.int32)
        kw = {}
        if weighted:
            sw = rng.uniform(0, 2, 8).astype(F32)
            sw[3] = 0.0
            kw["sample_weight"] = sw
        return xs, y, kw
    return make


def wb_sparse_sw(rng):
    sw = rng.uniform(0, 3, 8).astype(F32)
    sw[1] = 0.0
    return [normal(rng, 8, 6)], rng.integers(0, 4, 8).astype(np.int32), {"sample_weight": sw}


def wb_onehot_cw(rng):
    y = np.eye(3, dtype=F32)[rng.integers(0, 3, 8)]
    return [normal(rng, 8, 6)], y, {"class_weight": {0: 1.0, 1: 3.0, 2: 0.5}}


def wb_sparse_cw(rng):  # class 3 has no weight: 1, as a class missing from the dict
    return [normal(rng, 8, 6)], rng.integers(0, 4, 8).astype(np.int32), {"class_weight": {0: 0.25, 1: 2.0, 2: 4.0}}


def wb_binary_cw(rng):
    return [normal(rng, 8, 6)], rng.integers(0, 2, (8, 1)).astype(F32), {"class_weight": {0: 0.3, 1: 2.5}}


def wb_seq(shape):
    def make(rng):
        x = tokens(rng, 8, 6, 20)
        y = rng.integers(0, 7, (8, 6)).astype(np.int32)
        sw = rng.uniform(0, 2, shape).astype(F32)
        return [x], y, {"sample_weight": sw}
    return make


WEIGHTED = [
    ("train_two_inputs_adam", w_two_inputs("train_two_inputs_adam"),
     lambda: keras.optimizers.Adam(learning_rate=0.01),
     "sparse_categorical_crossentropy", ["accuracy"], wb_two_inputs(False)),
    ("train_two_inputs_sw_sgd", w_two_inputs("train_two_inputs_sw_sgd"),
     lambda: keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
     "sparse_categorical_crossentropy", ["accuracy"], wb_two_inputs(True)),
    ("train_sw_scce_sgd", w_mlp("train_sw_scce_sgd", 4, "softmax"),
     lambda: keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
     "sparse_categorical_crossentropy", ["accuracy"], wb_sparse_sw),
    ("train_cw_cce_sgd", w_mlp("train_cw_cce_sgd", 3, "softmax"),
     lambda: keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
     "categorical_crossentropy", ["accuracy"], wb_onehot_cw),
    ("train_cw_scce_adam", w_mlp("train_cw_scce_adam", 4, "softmax"),
     lambda: keras.optimizers.Adam(learning_rate=0.01),
     "sparse_categorical_crossentropy", ["accuracy"], wb_sparse_cw),
    ("train_cw_bce_sgd", w_mlp("train_cw_bce_sgd", 1, "sigmoid"),
     lambda: keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
     "binary_crossentropy", ["accuracy"], wb_binary_cw),
    ("train_sw_seq_steps_sgd", w_seq("train_sw_seq_steps_sgd"),
     lambda: keras.optimizers.SGD(learning_rate=0.5, momentum=0.9),
     "sparse_categorical_crossentropy", ["accuracy"], wb_seq((8, 6))),
    # (N, 1): one weight a sample on a sequence output (Keras 3.15 refuses
    # (N,) there, a broadcasting error; flynn takes (N,) as this)
    ("train_sw_seq_sample_sgd", w_seq("train_sw_seq_sample_sgd"),
     lambda: keras.optimizers.SGD(learning_rate=0.5, momentum=0.9),
     "sparse_categorical_crossentropy", ["accuracy"], wb_seq((8, 1))),
]


def write_weighted(out, manifest):
    for name, build, make_opt, loss, metrics, make_batch in WEIGHTED:
        reset(name)
        rng = np.random.default_rng(seed_of(name))
        model = build()
        model.compile(optimizer=make_opt(), loss=loss, metrics=metrics)
        model.save(os.path.join(out, name + ".keras"))
        xs, y, kw = make_batch(rng)
        files = {"keras": name + ".keras",
                 "x": [save_npy(out, "%s_x%d.npy" % (name, i), x) for i, x in enumerate(xs)],
                 "y": save_npy(out, name + "_y.npy", y)}
        if "sample_weight" in kw:
            files["sample_weight"] = save_npy(out, name + "_sw.npy", kw["sample_weight"])
        inputs = xs if len(xs) > 1 else xs[0]
        ev = model.evaluate(inputs, y, sample_weight=kw.get("sample_weight"), batch_size=8, verbose=0,
                            return_dict=True)
        ev_plain = model.evaluate(inputs, y, batch_size=8, verbose=0, return_dict=True)
        before = model.train_on_batch(inputs, y, return_dict=True, **kw)
        step1 = weight_files(out, model, name + "_step1")
        manifest["weighted"].append({
            "name": name,
            "files": files,
            "loss": loss, "metrics": metrics,
            "class_weight": {str(k): v for k, v in kw.get("class_weight", {}).items()} or None,
            "evaluate": {"loss": float(ev["loss"]), "accuracy": float(ev["accuracy"])},
            "evaluate_unweighted": {"loss": float(ev_plain["loss"]), "accuracy": float(ev_plain["accuracy"])},
            "loss_value_step1": float(before["loss"]),
            # Keras 3.15 on JAX: evaluate's accuracy counts only the output mask's valid
            # steps, train_on_batch's every step (flynn's, both ways): not compared here
            "evaluate_accuracy_masked": "seq" in name,
            "step1_weights": step1,
            "tolerance": {"step_weights": TOL_STEP, "evaluate": {"rtol": 1e-5, "atol": 1e-6}},
            "howto": ("load M.keras, evaluate(M_x*, M_y[, sample_weight=M_sw]) -> evaluate; "
                      "train_on_batch(M_x*, M_y, sample_weight=M_sw or class_weight=...) -> M_step1_*"),
        })
        print("wrote %-26s loss %.6f (evaluate %.6f)" % (name, before["loss"], ev["loss"]))


# ----------------------------------------------------------------- helpers


def layer_summary(layer):
    cfg = layer.get_config()
    d = {"name": layer.name, "class_name": layer.__class__.__name__}
    for k in LAYER_KEYS:
        if k in cfg:
            v = cfg[k]
            d[k] = list(v) if isinstance(v, tuple) else v
    # [name, shape] in Keras order; only BatchNormalization's moving_mean
    # and moving_variance are non-trainable.
    d["weights"] = [[w.name, list(w.shape)] for w in layer.weights]
    return d


def compact_json(o, ind=0):
    """JSON with one line per object or list that fits in ~100 columns."""
    flat = json.dumps(o)
    if len(flat) <= 110 or not isinstance(o, (dict, list)) or not o:
        return flat
    pad = " " * (ind + 1)
    if isinstance(o, dict):
        items = ["%s%s: %s" % (pad, json.dumps(k), compact_json(v, ind + 1))
                 for k, v in o.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * ind + "}"
    items = [pad + compact_json(v, ind + 1) for v in o]
    return "[\n" + ",\n".join(items) + "\n" + " " * ind + "]"


def save_npy(out, fname, arr):
    # np.asarray(order="C"), not np.ascontiguousarray: that makes a scalar
    # (Attention's scale, shape ()) a (1,) array
    np.save(os.path.join(out, fname), np.asarray(arr, order="C"))
    return fname


def write_model_files(out, name, kind, model, xs, formats, xs_b=None):
    """Writes M.keras [M.h5, M.weights.h5, M.json], M_x*.npy, M_y*.npy, and
    for a model with a None (variable-length) axis M_x_b*.npy, M_y_b*.npy:
    a second batch of another length and its predictions."""
    p = lambda suffix: os.path.join(out, name + suffix)  # noqa: E731
    model.save(p(".keras"))
    files = {"keras": name + ".keras"}
    if "h5" in formats:
        write_legacy_h5(model, p(".h5"))
        files["h5"] = name + ".h5"
    if "weights_h5" in formats:
        model.save_weights(p(".weights.h5"))
        files["weights_h5"] = name + ".weights.h5"
    if "json" in formats:
        with open(p(".json"), "w") as f:
            f.write(model.to_json())
        files["json"] = name + ".json"


    ys = model.predict(xs if len(xs) > 1 else xs[0], verbose=0)
    if not isinstance(ys, (list, tuple)):
        ys = [ys]
    ys = [np.asarray(y, F32) for y in ys]
    if len(xs) == 1:
        xf = [save_npy(out, name + "_x.npy", xs[0])]
    else:
        xf = [save_npy(out, "%s_x%d.npy" % (name, i), x) for i, x in enumerate(xs)]
    if len(ys) == 1:
        yf = [save_npy(out, name + "_y.npy", ys[0])]
    else:
        yf = [save_npy(out, "%s_y%d.npy" % (name, i), y) for i, y in enumerate(ys)]

    if xs_b is not None:
        ys_b = model.predict(xs_b if len(xs_b) > 1 else xs_b[0], verbose=0)
        ys_b = [np.asarray(y, F32) for y in (ys_b if isinstance(ys_b, (list, tuple)) else [ys_b])]
        files["x_b"] = [save_npy(out, "%s_x_b%s.npy" % (name, i if len(xs_b) > 1 else ""), x)
                        for i, x in enumerate(xs_b)]
        files["y_b"] = [save_npy(out, "%s_y_b%s.npy" % (name, i if len(ys_b) > 1 else ""), y)
                        for i, y in enumerate(ys_b)]
    entry = {
        "name": name,
        "kind": kind,
        "files": dict(files, x=xf, y=yf),
        "inputs": [{"name": t._keras_history[0].name, "shape": list(x.shape),
                    "file": f} for t, x, f in zip(model.inputs, xs, xf)],
        "outputs": [{"name": t._keras_history[0].name, "shape": list(y.shape),
                     "file": f} for t, y, f in zip(model.outputs, ys, yf)],
        "layers": [layer_summary(layer) for layer in model.layers],
        "layer_classes": sorted({layer.__class__.__name__ for layer in model.layers}
                                | {"InputLayer"}),
        "tolerance": {"predictions": TOL_PRED},
    }
    return entry


def write_legacy_h5(model, path):
    """model.save("M.h5"): the legacy HDF5 format (Keras warns that it is
    legacy). Keras 3.15's legacy writer pops "optimizer" from the model's
    compile config in place (legacy/saving/saving_utils.py model_metadata),
    so a later .keras save of the same model would lose its optimizer: keep
    a copy and restore it."""
    cc = getattr(model, "_compile_config", None)
    saved_cc = dict(cc.config) if cc is not None else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save(path)
    if cc is not None:
        cc.config.clear()
        cc.config.update(saved_cc)


def weight_names(layer):
    """flynn's names of a layer's weights, in Keras order: a sub-layer's weight
    by its path below the layer ("query/kernel" of MultiHeadAttention,
    "dense/kernel" of TimeDistributed), Bidirectional's halves as
    "forward/kernel" and "backward/kernel", else the weight's own name."""
    ws = layer.weights
    if isinstance(layer, L.Bidirectional):  # two "kernel"s
        half = len(ws) // 2
        return [("forward/" if i < half else "backward/") + w.name for i, w in enumerate(ws)]
    if isinstance(layer, (L.MultiHeadAttention, L.TimeDistributed)):
        names = []
        for w in ws:
            at = w.path.find(layer.name + "/")
            names.append(w.path[at + len(layer.name) + 1:] if at >= 0 else w.name)
        return names
    return [w.name for w in ws]


def weight_of(model, lname, wname):
    layer = model.get_layer(lname)
    named = dict(zip(weight_names(layer), layer.weights))
    if wname in named:
        return named[wname]
    # a reloaded TimeDistributed names its inner layer afresh (dense_1 for
    # dense): the one weight with the same last name
    last = [w for n, w in named.items() if n.split("/")[-1] == wname.split("/")[-1]]
    if len(last) != 1:
        raise KeyError("%s: no weight %s (has %s)" % (lname, wname, sorted(named)))
    return last[0]


def weight_files(out, model, prefix):
    """Saves each weight as <prefix>_<layer>_<weight>.npy, Keras order."""
    items = []
    for layer in model.layers:
        for w, wn in zip(layer.weights, weight_names(layer)):
            fname = "%s_%s_%s.npy" % (prefix, layer.name, wn.replace("/", "_"))
            save_npy(out, fname, np.asarray(w.numpy(), F32))
            items.append([layer.name, wn, fname])
    return items


def gradient_check(model, loss_obj, x, y):
    """Adam/AdamW/RMSprop's first step is ~lr*sign(g): an element whose
    gradient is tiny but not zero (a near-cancellation) would make the C
    comparison flaky. Returns the smallest non-zero |g| (must be >= 1e-5)."""
    import jax
    import jax.numpy as jnp

    tv = [v.value for v in model.trainable_variables]
    ntv = [v.value for v in model.non_trainable_variables]

    def f(tv):
        yp, _ = model.stateless_call(tv, ntv, x, training=True)
        return jnp.mean(loss_obj(y, yp))

    grads = jax.grad(f)(tv)
    small = np.inf
    for g in grads:
        a = np.abs(np.asarray(g))
        nz = a[a > 0]
        if nz.size:
            small = min(small, float(nz.min()))
    return small


def optimizer_state_layout(model):
    """The optimizer variables in the order Keras saves them."""
    return [[i, v.path, list(v.shape), str(v.dtype)]
            for i, v in enumerate(model.optimizer.variables)]


def loss_repr(loss):
    if isinstance(loss, str):
        return loss
    return keras.saving.serialize_keras_object(loss)


# ----------------------------------------------------------------- writing


def write_inference(out, manifest):
    for name, kind, build, formats in MODELS:
        reset(name)
        rng = np.random.default_rng(seed_of(name))
        model, xs = build(rng)
        notes = None
        if name == "batchnorm":
            model = prepare_batchnorm(model, rng)
            notes = ("gamma/beta/moving stats were set to random values, then "
                     "one SGD(0.1)+MSE train_on_batch step was taken before "
                     "saving; the saved model is not compiled")
        entry = write_model_files(out, name, kind, model, xs, formats)
        if notes:
            entry["notes"] = notes
        manifest["fixtures"].append(entry)
        print("wrote %-26s %s" % (name, ", ".join(
            "%s%s" % (i["name"], tuple(i["shape"])) for i in entry["inputs"])))


def write_training(out, manifest):
    for name, build, make_opt, loss, metrics, make_batch, formats in TRAINING:
        reset(name)
        rng = np.random.default_rng(seed_of(name))
        model = build()
        loss_v = loss() if callable(loss) else loss
        opt = make_opt()
        model.compile(optimizer=opt, loss=loss_v, metrics=metrics)
        # a None (variable-length) axis: predictions at lengths 7 and 11 (the
        # training batch has a third, its batch maker's)
        shape = tuple(model.inputs[0].shape[1:])
        lengths = (7, 11) if None in shape else (None,)
        xs_by_len = []
        for t in lengths:
            sh = tuple(t if d is None else d for d in shape)
            if "int" in str(model.inputs[0].dtype):  # token indices for the Embedding
                emb = next(la for la in model.layers if isinstance(la, L.Embedding))
                xs_by_len.append([tokens(rng, 4, sh[0], emb.input_dim)])
            else:
                xs_by_len.append([normal(rng, 4, *sh)])
        xs = xs_by_len[0]
        # The model BEFORE the step: M.keras etc. (compiled; the optimizer is
        # not built yet, so it only holds iteration and learning_rate).
        entry = write_model_files(out, name, "sequential", model, xs, formats,
                                  xs_by_len[1] if len(xs_by_len) > 1 else None)
        x, y = make_batch(rng)
        tx = save_npy(out, name + "_train_x.npy", x)
        ty = save_npy(out, name + "_train_y.npy", y)
        loss_obj = keras.losses.get(loss_v) if isinstance(loss_v, str) else loss_v
        smallest = gradient_check(model, loss_obj, x, y)
        if not isinstance(opt, keras.optimizers.SGD):  # SGD's step is lr*g: tiny g, tiny step
            assert smallest >= 1e-5, (name, smallest)

        before = model.train_on_batch(x, y, return_dict=True)
        model.save_weights(os.path.join(out, name + "_step1.weights.h5"))
        step1 = weight_files(out, model, name + "_step1")
        model.save(os.path.join(out, name + "_after.keras"))
        opt_layout = optimizer_state_layout(model)
        model.train_on_batch(x, y)
        step2 = weight_files(out, model, name + "_step2")

        entry["files"].update({
            "train_x": tx, "train_y": ty,
            "step1_weights_h5": name + "_step1.weights.h5",
            "after_keras": name + "_after.keras",
        })
        entry["training"] = {
            "loss": loss_repr(loss_v),
            "optimizer": {"class_name": opt.__class__.__name__,
                          "config": json.loads(json.dumps(
                              opt.get_config(), default=float))},
            "metrics": metrics,
            "train_x": tx, "train_y": ty,
            "train_y_dtype": str(y.dtype),
            "batch_size": int(x.shape[0]),
            "loss_value_step1": float(before["loss"]),
            "logs_step1": {k: float(v) for k, v in before.items() if k != "loss"},
            "smallest_nonzero_abs_gradient": smallest,
            "step1_weights": step1,
            "step2_weights": step2,
            "optimizer_state_in_after_keras": {
                "h5_group": "optimizer/vars",
                "variables": opt_layout,
                "columns": ["dataset name under optimizer/vars", "Keras variable path",
                            "shape", "dtype"],
            },
            "step_weights_columns": ["layer", "weight", "file"],
            "howto": ("load M.keras (compiled), train_on_batch(M_train_x, "
                      "M_train_y) once -> M_step1_*; load M_after.keras, one "
                      "more step on the same batch -> M_step2_*"),
        }
        entry["tolerance"]["step_weights"] = TOL_STEP
        manifest["fixtures"].append(entry)
        print("wrote %-26s loss %.6f, %d optimizer variables" % (
            name, before["loss"], len(opt_layout)))


# ------------------------------------------------------------- bad fixtures


def rezip(src, dst, replace):
    """Copies the zip src to dst, replacing the named entries' contents
    (keeping each entry's name, order and compression)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = replace.get(info.filename, zin.read(info.filename))
            zi = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            zi.compress_type = info.compress_type
            zi.external_attr = info.external_attr
            zout.writestr(zi, data)


def h5_bytes_with(h5_bytes, edit):
    """Applies edit(h5py.File) to an in-memory copy of an HDF5 file."""
    bio = io.BytesIO(h5_bytes)
    with h5py.File(bio, "r+") as f:
        edit(f)
    return bio.getvalue()


def transpose_dataset(group, name):
    data = np.asarray(group[name])
    del group[name]
    group.create_dataset(name, data=np.ascontiguousarray(data.T))


def write_bad(out, manifest):
    bad = manifest["bad"]
    tiny = lambda: keras.Sequential([keras.Input((5,)), L.Dense(6), L.Dense(6)],  # noqa: E731
                                    name="tiny")

    def add(fname, reason, keras_refuses, detail):
        bad.append({"file": fname, "reason": reason,
                    "keras_refuses": keras_refuses, "detail": detail,
                    "size": os.path.getsize(os.path.join(out, fname))})
        print("wrote %-26s %s" % (fname, reason))

    # A registered custom layer class. It is defined here, not at module
    # level, so that the --check process (which runs this file as __main__
    # too) does not know it.
    @keras.saving.register_keras_serializable(package="flynn_fixtures")
    class ScaleByTwo(L.Layer):
        def call(self, x):
            return x * 2.0

    reset("bad_custom_layer")
    m = keras.Sequential([keras.Input((5,)), L.Dense(3), ScaleByTwo()],
                         name="custom")
    m.save(os.path.join(out, "bad_custom_layer.keras"))
    add("bad_custom_layer.keras", "custom_layer", True,
        "a layer of class 'ScaleByTwo', \"module\": null, \"registered_name\": "
        "'flynn_fixtures>ScaleByTwo' (a registered custom class); Keras "
        "without that class registered refuses it")

    # A Lambda layer (Python bytecode in the config).
    reset("bad_lambda")
    m = keras.Sequential([keras.Input((5,)), L.Dense(3),
                          L.Lambda(lambda t: t * 2.0)], name="lambda")
    m.save(os.path.join(out, "bad_lambda.keras"))
    add("bad_lambda.keras", "lambda_layer", True,
        "a keras.layers.Lambda whose function is marshalled Python bytecode; "
        "Keras refuses it in safe_mode (the default)")

    # A real Keras layer that flynn does not have.
    reset("bad_unsupported_layer")
    m = keras.Sequential([keras.Input((5,)), L.Dense(4),
                          L.UnitNormalization()], name="unsupported")
    m.save(os.path.join(out, "bad_unsupported_layer.keras"))
    add("bad_unsupported_layer.keras", "unsupported_layer", False,
        "a UnitNormalization layer (valid Keras, not a flynn layer): Keras "
        "loads it, flynn must refuse it naming the layer and its class")

    # Several layers flynn does not have, of several classes: the refusal
    # must list them all at once, each with its class.
    reset("bad_many_unsupported")
    m = keras.Sequential([keras.Input((8, 8, 3)),
                          L.Conv2DTranspose(3, 3, padding="same", dilation_rate=2),
                          L.Resizing(8, 8, interpolation="bicubic"),
                          L.Conv2DTranspose(3, 3, padding="same", dilation_rate=2),
                          L.UpSampling2D(2, interpolation="bicubic"),
                          L.GlobalAveragePooling2D(),
                          L.UnitNormalization()], name="many_unsupported")
    m.save(os.path.join(out, "bad_many_unsupported.keras"))
    add("bad_many_unsupported.keras", "many_unsupported", False,
        "two dilated Conv2DTranspose, a bicubic Resizing, a bicubic UpSampling2D and a "
        "UnitNormalization: Keras loads it, flynn must refuse it listing "
        "every one of them with its class in one message")

    # A valid tiny model to damage.
    reset("bad_base")
    m = tiny()
    good = os.path.join(out, "_good.keras")
    m.save(good)
    with open(good, "rb") as f:
        raw = f.read()

    with open(os.path.join(out, "bad_truncated.keras"), "wb") as f:
        f.write(raw[: len(raw) // 2])
    add("bad_truncated.keras", "truncated_zip", True,
        "the first %d of the %d bytes of a valid .keras (no central directory)"
        % (len(raw) // 2, len(raw)))

    with open(os.path.join(out, "bad_not_zip.keras"), "wb") as f:
        f.write(b"this is not a zip archive, only text\n")
    add("bad_not_zip.keras", "not_a_zip", True, "a text file named .keras")

    with zipfile.ZipFile(good) as z:
        cfg = z.read("config.json")
        wts = z.read("model.weights.h5")
    broken = cfg[: len(cfg) // 2] + b"}}]"
    rezip(good, os.path.join(out, "bad_config_json.keras"),
          {"config.json": broken})
    add("bad_config_json.keras", "invalid_json", True,
        "config.json cut in the middle of an object and closed with '}}]' "
        "(not valid JSON); the zip itself is valid")

    def tr_keras(f):
        transpose_dataset(f["layers/dense/vars"], "0")
    rezip(good, os.path.join(out, "bad_wrong_shape.keras"),
          {"model.weights.h5": h5_bytes_with(wts, tr_keras)})
    add("bad_wrong_shape.keras", "wrong_shape", True,
        "layers/dense/vars/0 (Dense 'dense' kernel, expected (5, 6)) stored "
        "transposed as (6, 5): the element count is right, the shape is not")

    def drop_layer(f):
        del f["layers/dense_1"]
    rezip(good, os.path.join(out, "bad_missing_weights.keras"),
          {"model.weights.h5": h5_bytes_with(wts, drop_layer)})
    add("bad_missing_weights.keras", "missing_weights", True,
        "model.weights.h5 lacks the group layers/dense_1 (Dense 'dense_1' "
        "kernel and bias): nothing may be half-loaded")

    h5p = os.path.join(out, "bad_wrong_shape.h5")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.save(h5p)
    with h5py.File(h5p, "r+") as f:
        g = f["model_weights/dense"]
        names = [n.decode() if isinstance(n, bytes) else str(n)
                 for n in g.attrs["weight_names"]]
        kname = [n for n in names if n.endswith("kernel")][0]
        parent, leaf = kname.rsplit("/", 1)
        transpose_dataset(g[parent], leaf)
    add("bad_wrong_shape.h5", "wrong_shape", True,
        "legacy .h5: model_weights/dense/%s (expected (5, 6)) stored as "
        "(6, 5)" % kname)

    # Zip bomb: config.json is the valid config followed by BOMB_MB MiB of
    # spaces (still valid JSON), deflated at level 9 (~1030:1). Only a size
    # limit stops a reader from inflating all of it.
    bomb_mb = 100
    data = cfg + b" " * (bomb_mb * 2**20)
    dst = os.path.join(out, "bad_zip_bomb.keras")
    with zipfile.ZipFile(good) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            zi = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            if info.filename == "config.json":
                zi.compress_type = zipfile.ZIP_DEFLATED
                zout.writestr(zi, data, compresslevel=9)
            else:
                zi.compress_type = info.compress_type
                zout.writestr(zi, zin.read(info.filename))
    del data
    with zipfile.ZipFile(dst) as z:
        zi = z.getinfo("config.json")
        declared, packed = zi.file_size, zi.compress_size
    add("bad_zip_bomb.keras", "zip_bomb", False,
        "config.json declares (truthfully) %d bytes uncompressed (%d MiB: "
        "the real config plus spaces, valid JSON), %d bytes deflated. Keras "
        "reads it all and loads the model; flynn must refuse it from the "
        "declared size before inflating (Keras 3.15 loads it in ~1 s)"
        % (declared, bomb_mb, packed))
    bad[-1]["declared_uncompressed_size"] = declared
    bad[-1]["compressed_size"] = packed
    os.remove(good)


# ------------------------------------------------------------------ checking


def snake_case(name):
    """keras.src.utils.naming.to_snake_case."""
    import re
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def check_group_names(path):
    """docs/keras-format.md section 3: the model.weights.h5 group of the
    i-th layer is layers/<snake_case(class)>[_k], in the order of config.json's
    "layers" (Sequential: without the InputLayer). Returns the mismatches."""
    with zipfile.ZipFile(path) as z:
        cfg = json.loads(z.read("config.json"))
        h5 = h5py.File(io.BytesIO(z.read("model.weights.h5")), "r")
    layers = cfg["config"]["layers"]
    if cfg["class_name"] == "Sequential":
        layers = [la for la in layers if la["class_name"] != "InputLayer"]
    # operations (a Functional model's mask ops: NotEqual, ...) are no layers: no group
    layers = [la for la in layers if not str(la.get("module", "")).startswith("keras.src.ops")]
    used, bad = {}, []
    for la in layers:
        base = snake_case(la["class_name"])
        group = base if base not in used else "%s_%d" % (base, used[base] + 1)
        used[base] = used.get(base, -1) + 1
        name = la["config"]["name"]
        vars_path = "layers/%s/vars" % group
        if vars_path not in h5 or h5[vars_path].attrs.get("name") != name:
            bad.append("%s: layer %s expected at %s" % (path, name, vars_path))
    if len(h5["layers"]) != len(layers):
        bad.append("%s: %d layer groups for %d layers" % (path, len(h5["layers"]), len(layers)))
    return bad


def check(out):
    """Reloads every fixture with Keras (in a process where no custom class
    is registered) and compares with the saved arrays."""
    with open(os.path.join(out, "manifest.json")) as f:
        man = json.load(f)
    P = lambda fn: os.path.join(out, fn)  # noqa: E731
    problems = []

    def close(a, b, what, rtol=1e-6, atol=1e-7):
        a, b = np.asarray(a, F32), np.asarray(b, F32)
        if a.shape != b.shape or not np.allclose(a, b, rtol=rtol, atol=atol):
            err = float(np.max(np.abs(a - b))) if a.shape == b.shape else "shape"
            problems.append("%s: mismatch (max abs err %s)" % (what, err))
            return False
        return True

    def predict(model, xs):
        ys = model.predict(xs if len(xs) > 1 else xs[0], verbose=0)
        return ys if isinstance(ys, (list, tuple)) else [ys]

    n_checks = 0
    for fx in man["fixtures"]:
        name, files = fx["name"], fx["files"]
        xs = [np.load(P(fn)) for fn in files["x"]]
        want = [np.load(P(fn)) for fn in files["y"]]
        loaders = {}
        if "keras" in files:
            loaders["keras"] = lambda: keras.saving.load_model(P(files["keras"]))
        if "h5" in files:
            loaders["h5"] = lambda: keras.saving.load_model(P(files["h5"]))
        if "json" in files:
            def from_json():
                with open(P(files["json"])) as f:
                    m = keras.models.model_from_json(f.read())
                m.load_weights(P(files["weights_h5"]))
                return m
            loaders["json+weights_h5"] = from_json
        for how, load in loaders.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = load()
            got = predict(model, xs)
            ok = all(close(g, w, "%s via %s, output %d" % (name, how, i))
                     for i, (g, w) in enumerate(zip(got, want)))
            n_checks += 1
            print("check %-26s %-16s %s" % (name, how, "ok" if ok else "MISMATCH"))

        for key in ("keras", "after_keras"):
            if key in files:
                problems.extend(check_group_names(P(files[key])))

        tr = fx.get("training")
        if tr:
            # Loading M.keras warns that its saved optimizer (2 variables,
            # never built) does not match the built one: expected.
            warnings.filterwarnings("ignore", message="Skipping variable loading")
            x, y = np.load(P(tr["train_x"])), np.load(P(tr["train_y"]))
            # Reproduce the step from the saved pre-step model.
            model = keras.saving.load_model(P(files["keras"]))
            model.train_on_batch(x, y)
            ok = True
            for lname, wname, wfile in tr["step1_weights"]:
                v = weight_of(model, lname, wname)
                ok &= close(v.numpy(), np.load(P(wfile)),
                            "%s step1 %s/%s" % (name, lname, wname),
                            rtol=1e-5, atol=1e-7)
            # step1.weights.h5 == the npy files.
            m2 = keras.saving.load_model(P(files["keras"]))
            m2.load_weights(P(files["step1_weights_h5"]))
            for lname, wname, wfile in tr["step1_weights"]:
                v = weight_of(m2, lname, wname)
                ok &= close(v.numpy(), np.load(P(wfile)),
                            "%s step1.weights.h5 %s" % (name, wfile), 0, 0)
            # The after-step file restores weights and optimizer state: one
            # more step gives step2.
            m3 = keras.saving.load_model(P(files["after_keras"]))
            ok &= int(m3.optimizer.iterations.numpy()) == 1
            m3.train_on_batch(x, y)
            for lname, wname, wfile in tr["step2_weights"]:
                v = weight_of(m3, lname, wname)
                ok &= close(v.numpy(), np.load(P(wfile)),
                            "%s step2 %s/%s" % (name, lname, wname),
                            rtol=1e-5, atol=1e-7)
            n_checks += 1
            print("check %-26s %-16s %s" % (name, "train steps", "ok" if ok else "MISMATCH"))

    for b in man["bad"]:
        fn = b["file"]
        if fn == "bad_zip_bomb.keras":
            with zipfile.ZipFile(P(fn)) as z:
                zi = z.getinfo("config.json")
                ok = zi.file_size == b["declared_uncompressed_size"]
            # Keras would load it (valid JSON); not worth inflating 150 MiB here.
            print("check %-26s %-16s %s" % (fn, "declared size", "ok" if ok else "BAD"))
            if not ok:
                problems.append(fn + ": declared size")
            continue
        err = None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                keras.saving.load_model(P(fn))
        except Exception as e:  # noqa: BLE001
            err = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:150])
        refused = err is not None
        if refused != b["keras_refuses"]:
            problems.append("%s: Keras %s it" % (fn, "refused" if refused else "loaded"))
        print("check %-26s %-16s %s" % (fn, "keras refuses" if refused else "keras loads",
                                         err or ""))
        n_checks += 1

    if problems:
        print("\n".join(["PROBLEMS:"] + problems))
        return 1
    print("all %d checks passed" % n_checks)
    return 0


# --------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--check-only", action="store_true",
                    help="only reload the existing fixtures and compare")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    if args.check_only:
        return check(out)

    if os.path.isdir(out):
        if os.listdir(out) and not os.path.exists(os.path.join(out, "manifest.json")):
            sys.exit("%s exists and is not a fixture folder (no manifest.json)" % out)
        shutil.rmtree(out)
    os.makedirs(out)

    manifest = {
        "generator": "tools/keras_fixtures.py",
        "keras_version": keras.__version__,
        "backend": keras.backend.backend(),
        "h5py_version": h5py.__version__,
        "numpy_version": np.__version__,
        "tolerance_rule": "pass if |got - want| <= atol + rtol * |want| elementwise",
        "tolerance": {"predictions": TOL_PRED, "step_weights": TOL_STEP},
        "fixtures": [],
        "weighted": [],
        "bad": [],
    }
    only = os.environ.get("FLYNN_FIXTURES_ONLY")  # "a,b": just those (quick local runs; never commit them)
    if only:
        keep = set(only.split(","))
        MODELS[:] = [m for m in MODELS if m[0] in keep]
        TRAINING[:] = [t for t in TRAINING if t[0] in keep]
        WEIGHTED[:] = [t for t in WEIGHTED if t[0] in keep]
    write_inference(out, manifest)
    write_training(out, manifest)
    write_weighted(out, manifest)
    write_bad(out, manifest)
    manifest["files"] = {fn: os.path.getsize(os.path.join(out, fn))
                         for fn in sorted(os.listdir(out))}
    with open(os.path.join(out, "manifest.json"), "w") as f:
        f.write(compact_json(manifest) + "\n")
    total = sum(os.path.getsize(os.path.join(out, fn)) for fn in os.listdir(out))
    print("%d files, %d bytes in %s" % (len(os.listdir(out)), total, out))

    # Check in a fresh process: no custom class registered there.
    env = dict(os.environ, KERAS_BACKEND="jax")
    return subprocess.call([sys.executable, os.path.abspath(__file__),
                            "--check-only", "--out", out], env=env)


if __name__ == "__main__":
    sys.exit(main())
