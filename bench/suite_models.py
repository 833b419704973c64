#!/usr/bin/env python3
"""suite_models.py — the models of flynn's CPU speed suite, made once by Keras
and saved as .keras files, with the data each trains on, so that every side of
bench/suite.py runs the same model on the same arrays:

  flynn      loads the .keras file (`flynn bench --model FILE --data X.npy,Y.npy`),
             as a user's model nobody tuned for;
  Keras-TF   loads the same file;
  PyTorch    builds the same layers in torch.nn (bench/suite.py, TORCH).

Models (compiled with Adam(1e-3), sparse categorical crossentropy, accuracy):
  mnist_cnn         flynn's built-in: 28x28x1, Conv(32,3) Conv(64,3) MaxPool Dropout Dense(128) Dropout Dense(10)
  mlp               flynn's built-in: 28x28x1, Flatten Dense(512) Dropout Dense(512) Dropout Dense(10)
  resnet20          CIFAR ResNet-20 (He et al. 2016, option B shortcuts): 32x32x3, Conv(16) BN ReLU, three stages
                    of three basic blocks (16, 32, 64 filters; stride 2 and a 1x1 Conv+BN shortcut where the shape
                    changes), GlobalAveragePooling, Dense(10); convolutions without bias (BN follows)
  mobilenetv2_96    keras.applications.MobileNetV2(input_shape=(96, 96, 3), alpha=1.0, weights=None, classes=10)
  lstm_text         Embedding(512, 32, mask_zero) LSTM(64) Dense(5), 128 tokens (bench/text_compare.py's)
  transformer_text  bench/text_compare.py's Transformer block classifier, 128 tokens

Data: image models get uniform [0, 1) float32 images and uniform class labels
(NumPy's default_rng(0)); the text models get the pre-padded synthetic token
sequences of src/cli/bench.c (synth_text), with their labels.

usage: KERAS_BACKEND=tensorflow python suite_models.py OUTDIR [--models a,b] [--samples N]
"""
import argparse
import os
import sys

import numpy as np


def build(name):
    import keras
    from keras import layers as L

    if name == "mnist_cnn":
        m = keras.Sequential([keras.Input((28, 28, 1)), L.Conv2D(32, 3, activation="relu"),
                              L.Conv2D(64, 3, activation="relu"), L.MaxPooling2D(2), L.Dropout(0.25), L.Flatten(),
                              L.Dense(128, activation="relu"), L.Dropout(0.5), L.Dense(10, activation="softmax")])
    elif name == "mlp":
        m = keras.Sequential([keras.Input((28, 28, 1)), L.Flatten(), L.Dense(512, activation="relu"), L.Dropout(0.2),
                              L.Dense(512, activation="relu"), L.Dropout(0.2), L.Dense(10, activation="softmax")])
    elif name == "resnet20":
        def block(x, filters, stride):
            y = L.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False)(x)
            y = L.ReLU()(L.BatchNormalization()(y))
            y = L.BatchNormalization()(L.Conv2D(filters, 3, padding="same", use_bias=False)(y))
            if stride != 1 or x.shape[-1] != filters:
                x = L.BatchNormalization()(L.Conv2D(filters, 1, strides=stride, use_bias=False)(x))
            return L.ReLU()(L.Add()([x, y]))

        i = keras.Input((32, 32, 3))
        x = L.ReLU()(L.BatchNormalization()(L.Conv2D(16, 3, padding="same", use_bias=False)(i)))
        for stage, filters in enumerate((16, 32, 64)):
            for b in range(3):
                x = block(x, filters, 2 if stage > 0 and b == 0 else 1)
        o = L.Dense(10, activation="softmax")(L.GlobalAveragePooling2D()(x))
        m = keras.Model(i, o, name="resnet20")
    elif name == "mobilenetv2_96":
        m = keras.applications.MobileNetV2(input_shape=(96, 96, 3), alpha=1.0, weights=None, classes=10)
    elif name == "lstm_text":
        m = keras.Sequential([keras.Input((128,), dtype="int32"), L.Embedding(512, 32, mask_zero=True), L.LSTM(64),
                              L.Dense(5, activation="softmax")])
    elif name == "transformer_text":
        i = keras.Input((128,), dtype="int32")
        e = L.Embedding(512, 32)(i)
        c = L.Conv1D(32, 3, padding="same", activation="relu")(e)
        a = L.MultiHeadAttention(2, 16)(c, c)
        h = L.LayerNormalization(epsilon=1e-6)(L.Add()([c, a]))
        f = L.Dense(32)(L.Dense(64, activation="relu")(h))
        h2 = L.LayerNormalization(epsilon=1e-6)(L.Add()([h, f]))
        o = L.Dense(5, activation="softmax")(L.Dropout(0.1)(L.GlobalAveragePooling1D()(h2)))
        m = keras.Model(i, o, name="transformer_text")
    else:
        sys.exit("suite_models.py: unknown model %r" % name)
    m.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return m


def data(name, n):
    if name in ("lstm_text", "transformer_text"):  # src/cli/bench.c synth_text
        T, V, C = 128, 512, 5
        x = np.zeros((n, T), np.int32)
        for i in range(n):
            L = min(16 + (37 * i) % 113, T)
            t = np.arange(L)
            x[i, T - L:] = 1 + (131 * i + 17 * t) % (V - 1)
        return x, (np.arange(n) % C).astype(np.int32)
    shape = {"mnist_cnn": (28, 28, 1), "mlp": (28, 28, 1), "resnet20": (32, 32, 3), "mobilenetv2_96": (96, 96, 3)}[name]
    rng = np.random.default_rng(0)
    return rng.random((n,) + shape, dtype=np.float32), rng.integers(0, 10, n).astype(np.int32)


ALL = ["mnist_cnn", "mlp", "resnet20", "mobilenetv2_96", "lstm_text", "transformer_text"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--models", default=",".join(ALL))
    ap.add_argument("--samples", type=int, default=4096)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    import keras
    keras.utils.set_random_seed(0)
    for name in a.models.split(","):
        m = build(name)
        m.save(os.path.join(a.out, name + ".keras"))
        x, y = data(name, a.samples)
        np.save(os.path.join(a.out, name + "_x.npy"), x)
        np.save(os.path.join(a.out, name + "_y.npy"), y)
        print("%s: %d parameters, x %s, y %s" % (name, m.count_params(), x.shape, y.shape), flush=True)


if __name__ == "__main__":
    main()
