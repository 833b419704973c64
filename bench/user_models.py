#!/usr/bin/env python3
"""user_models.py — models as users write them, which nobody tuned flynn for,
made by Keras and saved as .keras files with random data of their shapes, for
bench/suite.py's flynn and Keras-TF sides (PyTorch has no port of them):

  env -u OPENBLAS_CORETYPE bench/suite.py --work /tmp/flynn-user --sides flynn,keras-tf \\
      --models cifar_vgg,tab_bn,bigru_text,sepconv64,har_cnn1d,unet_small,conv_ae,lstm_reg,fasttext,gelu_mlp \\
      --samples 2048 --rounds 1

(bench/suite.py makes them here on first use when --work holds none: it runs
this script for the names suite_models.py does not know.)

Models (Adam(1e-3); the loss and metrics each names):
  cifar_vgg   32x32x3: Conv(32,3,same) Conv(32,3) MaxPool Dropout Conv(64,3,same) Conv(64,3) MaxPool Dropout
              Flatten Dense(512) Dropout Dense(10); sparse CCE, accuracy
  tab_bn      100 features: 3 x [Dense(256|256|128) BatchNormalization Activation(relu) Dropout(0.3)] Dense(4)
  bigru_text  80 tokens: Embedding(5000, 64) Bidirectional(GRU(48)) Dense(3)
  sepconv64   64x64x3: Conv(24,3,s2) 3 x [SeparableConv2D(48|96|192) BatchNormalization MaxPool]
              GlobalMaxPooling Dense(6)
  har_cnn1d   256 steps x 9 sensors: Conv1D(64,7,elu) AvgPool1D Conv1D(64,5,elu) AvgPool1D Conv1D(128,3,elu)
              GlobalAveragePooling1D Dense(64,elu) Dense(6)
  unet_small  64x64x1 -> a 64x64 mask: Conv+BatchNormalization+LeakyReLU(0.1) blocks (16, 32, 64), MaxPool,
              UpSampling2D, Concatenate skips, Conv(1,1,sigmoid); binary crossentropy, accuracy
  conv_ae     28x28x1 autoencoder: Conv(32,s2) Conv(64,s2) Conv2DTranspose(32,s2) Conv2DTranspose(1,s2,sigmoid); mse
  lstm_reg    50 steps x 8: LSTM(64, return_sequences) LSTM(32) Dense(1); mse, mae
  fasttext    200 tokens: Embedding(20000, 64) GlobalAveragePooling1D Dense(64,relu) Dense(2)
  gelu_mlp    64 features: Dense(256,gelu) LayerNormalization Dense(256,gelu) LayerNormalization Dense(8)
  catsdogs150 150x150x3: 4 x [Conv(32|64|128|128, 3, valid) MaxPool] Flatten Dropout Dense(512) Dense(1, sigmoid)
              (Deep Learning with Python's cats-vs-dogs CNN); binary crossentropy
  lenet5      32x32x1: Conv(6,5,tanh) AvgPool Conv(16,5,tanh) AvgPool Dense(120,tanh) Dense(84,tanh) Dense(10)
  wavenet1d   512 steps x 1: Conv1D(32,1), 6 x [causal Conv1D(32,2,relu) dilated 1..32, Conv1D(32,1), Add]
              GlobalAveragePooling1D Dense(5)
  xception_mini 96x96x3: Keras's "image classification from scratch" (Rescaling, strided Conv+BN, SeparableConv2D
              + BN blocks of 128/256/512 with MaxPool(3, 2, same) and strided 1x1 residual Adds, 728, GAP)
  mixed2d     64x64x3: Conv(64) AvgPool(3, 1, same) Conv(64, 3, dilation 2) AvgPool Conv(64, 5, selu)
              UpSampling2D Cropping2D Conv(32, 3, swish) GlobalMaxPooling Dense(10)
  mixed1d     128 steps x 32: Conv1D(64,5) MaxPooling1D(3, 2, same) GRU(64, sequences) SimpleRNN(32) Dense(4)
  textcnn     400 tokens: Embedding(20000, 128) Conv1D(128,5) MaxPooling1D(5) Conv1D(128,5) GlobalMaxPooling1D
              Dense(128) Dropout Dense(2)
  fcn1d       500 steps x 1: Keras's "timeseries classification from scratch" (FordA): 3 x [Conv1D(64,3,same)
              BatchNormalization ReLU] GlobalAveragePooling1D Dense(2)
  resnet1d    128 steps x 3: the time-series ResNet (Wang et al. 2017, dl-4-tsc): 3 blocks of
              [Conv1D(k 8,5,3, same) BatchNormalization ReLU] (64, 128, 128 filters), the shortcut a 1x1 Conv1D
              + BatchNormalization (the third: BatchNormalization alone), Add, ReLU; GlobalAveragePooling1D Dense(6)
  resnet50_64, effb0_64, densenet121_64, mobilenet_64, vgg16_64
              keras.applications ResNet50, EfficientNetB0, DenseNet121, MobileNet (v1) and VGG16 with weights=None,
              input_shape (64, 64, 3), classes=10: the applications' own ZeroPadding2D, Rescaling and
              Normalization, squeeze-and-excitation, concatenations and depthwise blocks

usage: KERAS_BACKEND=tensorflow python user_models.py OUTDIR [--models a,b]
"""
import argparse
import os

import numpy as np

MODELS = ["cifar_vgg", "tab_bn", "bigru_text", "sepconv64", "har_cnn1d", "unet_small", "conv_ae", "lstm_reg",
          "fasttext", "gelu_mlp", "resnet50_64", "effb0_64", "densenet121_64", "mobilenet_64", "catsdogs150",
          "lenet5", "wavenet1d", "xception_mini", "mixed2d", "mixed1d",
          "textcnn", "vgg16_64", "fcn1d", "resnet1d"]


def build(name, rng):
    """(model, x, y, loss, metrics) for one model."""
    import keras
    from keras import layers as L

    scce, acc = "sparse_categorical_crossentropy", ["accuracy"]
    if name == "cifar_vgg":
        i = keras.Input((32, 32, 3))
        h = L.Conv2D(32, 3, padding="same", activation="relu")(i)
        h = L.Conv2D(32, 3, activation="relu")(h)
        h = L.Dropout(0.25)(L.MaxPooling2D()(h))
        h = L.Conv2D(64, 3, padding="same", activation="relu")(h)
        h = L.Conv2D(64, 3, activation="relu")(h)
        h = L.Flatten()(L.Dropout(0.25)(L.MaxPooling2D()(h)))
        h = L.Dropout(0.5)(L.Dense(512, activation="relu")(h))
        o = L.Dense(10, activation="softmax")(h)
        n = 4096
        return keras.Model(i, o), rng.random((n, 32, 32, 3), dtype=np.float32), rng.integers(0, 10, n), scce, acc
    if name == "tab_bn":
        i = keras.Input((100,))
        h = i
        for u in (256, 256, 128):
            h = L.Dropout(0.3)(L.Activation("relu")(L.BatchNormalization()(L.Dense(u)(h))))
        o = L.Dense(4, activation="softmax")(h)
        n = 16384
        return keras.Model(i, o), rng.standard_normal((n, 100), dtype=np.float32), rng.integers(0, 4, n), scce, acc
    if name == "bigru_text":
        i = keras.Input((80,), dtype="int32")
        h = L.Bidirectional(L.GRU(48))(L.Embedding(5000, 64)(i))
        o = L.Dense(3, activation="softmax")(h)
        n = 4096
        return keras.Model(i, o), rng.integers(1, 5000, (n, 80)), rng.integers(0, 3, n), scce, acc
    if name == "sepconv64":
        i = keras.Input((64, 64, 3))
        h = L.Conv2D(24, 3, strides=2, padding="same", activation="relu")(i)
        for f in (48, 96, 192):
            h = L.SeparableConv2D(f, 3, padding="same", activation="relu")(h)
            h = L.MaxPooling2D()(L.BatchNormalization()(h))
        o = L.Dense(6, activation="softmax")(L.GlobalMaxPooling2D()(h))
        n = 2048
        return keras.Model(i, o), rng.random((n, 64, 64, 3), dtype=np.float32), rng.integers(0, 6, n), scce, acc
    if name == "har_cnn1d":
        i = keras.Input((256, 9))
        h = L.AveragePooling1D(2)(L.Conv1D(64, 7, padding="same", activation="elu")(i))
        h = L.AveragePooling1D(2)(L.Conv1D(64, 5, padding="same", activation="elu")(h))
        h = L.GlobalAveragePooling1D()(L.Conv1D(128, 3, padding="same", activation="elu")(h))
        o = L.Dense(6, activation="softmax")(L.Dense(64, activation="elu")(h))
        n = 4096
        return keras.Model(i, o), rng.standard_normal((n, 256, 9), dtype=np.float32), rng.integers(0, 6, n), scce, acc
    if name == "unet_small":
        i = keras.Input((64, 64, 1))

        def block(h, f):
            return L.LeakyReLU(0.1)(L.BatchNormalization()(L.Conv2D(f, 3, padding="same")(h)))
        c1 = block(i, 16)
        c2 = block(L.MaxPooling2D()(c1), 32)
        c3 = block(L.MaxPooling2D()(c2), 64)
        d2 = block(L.Concatenate()([L.UpSampling2D()(c3), c2]), 32)
        d1 = block(L.Concatenate()([L.UpSampling2D()(d2), c1]), 16)
        o = L.Conv2D(1, 1, activation="sigmoid")(d1)
        n = 2048
        return (keras.Model(i, o), rng.random((n, 64, 64, 1), dtype=np.float32),
                (rng.random((n, 64, 64, 1)) > 0.5).astype(np.float32), "binary_crossentropy", acc)
    if name == "conv_ae":
        i = keras.Input((28, 28, 1))
        h = L.Conv2D(32, 3, strides=2, padding="same", activation="relu")(i)
        h = L.Conv2D(64, 3, strides=2, padding="same", activation="relu")(h)
        h = L.Conv2DTranspose(32, 3, strides=2, padding="same", activation="relu")(h)
        o = L.Conv2DTranspose(1, 3, strides=2, padding="same", activation="sigmoid")(h)
        x = rng.random((4096, 28, 28, 1), dtype=np.float32)
        return keras.Model(i, o), x, x, "mse", []
    if name == "lstm_reg":
        i = keras.Input((50, 8))
        o = L.Dense(1)(L.LSTM(32)(L.LSTM(64, return_sequences=True)(i)))
        n = 4096
        return (keras.Model(i, o), rng.standard_normal((n, 50, 8), dtype=np.float32),
                rng.standard_normal((n, 1), dtype=np.float32), "mse", ["mae"])
    if name == "fasttext":
        i = keras.Input((200,), dtype="int32")
        h = L.Dense(64, activation="relu")(L.GlobalAveragePooling1D()(L.Embedding(20000, 64)(i)))
        o = L.Dense(2, activation="softmax")(h)
        n = 8192
        return keras.Model(i, o), rng.integers(1, 20000, (n, 200)), rng.integers(0, 2, n), scce, acc
    if name == "gelu_mlp":
        i = keras.Input((64,))
        h = L.LayerNormalization()(L.Dense(256, activation="gelu")(i))
        h = L.LayerNormalization()(L.Dense(256, activation="gelu")(h))
        o = L.Dense(8, activation="softmax")(h)
        n = 16384
        return keras.Model(i, o), rng.standard_normal((n, 64), dtype=np.float32), rng.integers(0, 8, n), scce, acc
    if name == "catsdogs150":  # the classic "cats vs dogs" CNN of Deep Learning with Python
        i = keras.Input((150, 150, 3))
        h = i
        for f in (32, 64, 128, 128):
            h = L.MaxPooling2D()(L.Conv2D(f, 3, activation="relu")(h))
        h = L.Dense(512, activation="relu")(L.Dropout(0.5)(L.Flatten()(h)))
        o = L.Dense(1, activation="sigmoid")(h)
        n = 512
        return (keras.Model(i, o), rng.random((n, 150, 150, 3), dtype=np.float32),
                rng.integers(0, 2, (n, 1)).astype(np.float32), "binary_crossentropy", acc)
    if name == "lenet5":
        i = keras.Input((32, 32, 1))
        h = L.AveragePooling2D(2)(L.Conv2D(6, 5, activation="tanh")(i))
        h = L.AveragePooling2D(2)(L.Conv2D(16, 5, activation="tanh")(h))
        h = L.Dense(84, activation="tanh")(L.Dense(120, activation="tanh")(L.Flatten()(h)))
        o = L.Dense(10, activation="softmax")(h)
        n = 8192
        return keras.Model(i, o), rng.random((n, 32, 32, 1), dtype=np.float32), rng.integers(0, 10, n), scce, acc
    if name == "wavenet1d":
        i = keras.Input((512, 1))
        h = L.Conv1D(32, 1)(i)
        for d in (1, 2, 4, 8, 16, 32):
            r = L.Conv1D(32, 2, padding="causal", dilation_rate=d, activation="relu")(h)
            h = L.Add()([h, L.Conv1D(32, 1)(r)])
        o = L.Dense(5, activation="softmax")(L.GlobalAveragePooling1D()(h))
        n = 2048
        return keras.Model(i, o), rng.standard_normal((n, 512, 1), dtype=np.float32), rng.integers(0, 5, n), scce, acc
    if name == "xception_mini":  # Keras's "image classification from scratch" example, at 96x96
        i = keras.Input((96, 96, 3))
        h = L.Activation("relu")(L.BatchNormalization()(L.Conv2D(64, 3, strides=2, padding="same")(L.Rescaling(1 / 255)(i))))
        prev = h
        for f in (128, 256, 512):
            h = L.Activation("relu")(h)
            h = L.BatchNormalization()(L.SeparableConv2D(f, 3, padding="same")(h))
            h = L.Activation("relu")(h)
            h = L.BatchNormalization()(L.SeparableConv2D(f, 3, padding="same")(h))
            h = L.MaxPooling2D(3, strides=2, padding="same")(h)
            h = L.Add()([h, L.Conv2D(f, 1, strides=2, padding="same")(prev)])
            prev = h
        h = L.Activation("relu")(L.BatchNormalization()(L.SeparableConv2D(728, 3, padding="same")(h)))
        o = L.Dense(2, activation="softmax")(L.Dropout(0.25)(L.GlobalAveragePooling2D()(h)))
        n = 512
        return keras.Model(i, o), rng.random((n, 96, 96, 3), dtype=np.float32) * 255, rng.integers(0, 2, n), scce, acc
    if name == "mixed2d":  # layers the other models leave out, each at a size where it costs
        i = keras.Input((64, 64, 3))
        h = L.Conv2D(64, 3, padding="same", activation="relu")(i)
        h = L.AveragePooling2D(3, strides=1, padding="same")(h)
        h = L.Conv2D(64, 3, padding="same", dilation_rate=2, activation="relu")(h)
        h = L.AveragePooling2D(2)(h)
        h = L.Conv2D(64, 5, padding="same", activation="selu")(h)
        h = L.Cropping2D(2)(L.UpSampling2D()(h))
        h = L.GlobalMaxPooling2D()(L.Conv2D(32, 3, activation="swish")(h))
        o = L.Dense(10, activation="softmax")(h)
        n = 1024
        return keras.Model(i, o), rng.random((n, 64, 64, 3), dtype=np.float32), rng.integers(0, 10, n), scce, acc
    if name == "mixed1d":
        i = keras.Input((128, 32))
        h = L.MaxPooling1D(3, strides=2, padding="same")(L.Conv1D(64, 5, padding="same", activation="relu")(i))
        o = L.Dense(4, activation="softmax")(L.SimpleRNN(32)(L.GRU(64, return_sequences=True)(h)))
        n = 2048
        return keras.Model(i, o), rng.standard_normal((n, 128, 32), dtype=np.float32), rng.integers(0, 4, n), scce, acc
    if name == "textcnn":  # Keras's classic 1D convnet over word embeddings
        i = keras.Input((400,), dtype="int32")
        h = L.MaxPooling1D(5)(L.Conv1D(128, 5, activation="relu")(L.Embedding(20000, 128)(i)))
        h = L.GlobalMaxPooling1D()(L.Conv1D(128, 5, activation="relu")(h))
        o = L.Dense(2, activation="softmax")(L.Dropout(0.5)(L.Dense(128, activation="relu")(h)))
        n = 2048
        return keras.Model(i, o), rng.integers(1, 20000, (n, 400)), rng.integers(0, 2, n), scce, acc
    if name == "fcn1d":  # Keras's "timeseries classification from scratch" (FordA)
        i = keras.Input((500, 1))
        h = i
        for _ in range(3):
            h = L.ReLU()(L.BatchNormalization()(L.Conv1D(64, 3, padding="same")(h)))
        o = L.Dense(2, activation="softmax")(L.GlobalAveragePooling1D()(h))
        n = 2048
        return keras.Model(i, o), rng.standard_normal((n, 500, 1), dtype=np.float32), rng.integers(0, 2, n), scce, acc
    if name == "resnet1d":  # the time-series ResNet of Wang et al. (2017), as dl-4-tsc writes it in Keras
        i = keras.Input((128, 3))
        h = i
        for b, f in enumerate((64, 128, 128)):
            r = h
            for k in (8, 5, 3):
                h = L.BatchNormalization()(L.Conv1D(f, k, padding="same")(h))
                if k != 3:
                    h = L.Activation("relu")(h)
            s = L.BatchNormalization()(L.Conv1D(f, 1, padding="same")(r) if b < 2 else r)
            h = L.Activation("relu")(L.Add()([s, h]))
        o = L.Dense(6, activation="softmax")(L.GlobalAveragePooling1D()(h))
        n = 2048
        return keras.Model(i, o), rng.standard_normal((n, 128, 3), dtype=np.float32), rng.integers(0, 6, n), scce, acc
    apps = {"resnet50_64": "ResNet50", "effb0_64": "EfficientNetB0", "densenet121_64": "DenseNet121",
            "mobilenet_64": "MobileNet", "vgg16_64": "VGG16"}
    if name in apps:  # keras.applications as a user takes them: no weights, 64x64x3, 10 classes
        m = getattr(keras.applications, apps[name])(weights=None, input_shape=(64, 64, 3), classes=10)
        n = 1024
        return m, rng.random((n, 64, 64, 3), dtype=np.float32), rng.integers(0, 10, n), scce, acc
    raise SystemExit("user_models.py: unknown model %r (have %s)" % (name, ", ".join(MODELS)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--models", default=",".join(MODELS))
    a = ap.parse_args()
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras
    os.makedirs(a.outdir, exist_ok=True)
    for k, name in enumerate(a.models.split(",")):
        keras.utils.set_random_seed(k)
        m, x, y, loss, metrics = build(name, np.random.default_rng(k))
        m.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss, metrics=metrics)
        m.save(os.path.join(a.outdir, name + ".keras"))
        np.save(os.path.join(a.outdir, name + "_x.npy"), x.astype(np.int32) if x.dtype.kind == "i" else x)
        np.save(os.path.join(a.outdir, name + "_y.npy"), y.astype(np.int32) if y.dtype.kind == "i" else y)
        print("made %s" % name)


if __name__ == "__main__":
    main()
