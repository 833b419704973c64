"""Prints the Keras 3 references of tests/test_callbacks.c (paste them into
tests/keras_callbacks_reference.h): learning-rate schedule values per step,
EarlyStopping's stop on a scripted val_loss sequence, ReduceLROnPlateau's
learning rates and CSVLogger's bytes.

    KERAS_BACKEND=jax JAX_PLATFORMS=cpu /opt/kvenv/bin/python tools/keras_callbacks_reference.py
"""
import os
import tempfile

import keras
import numpy as np

S = keras.optimizers.schedules
STEPS = [0, 1, 2, 4, 5, 6, 9, 10, 11, 15, 16, 25, 99, 100, 109, 110, 111, 200]
SCHEDULES = [
    ("exp", S.ExponentialDecay(0.1, 10, 0.5)),
    ("exp_stair", S.ExponentialDecay(0.1, 10, 0.5, staircase=True)),
    ("inv", S.InverseTimeDecay(0.1, 5, 0.5)),
    ("inv_stair", S.InverseTimeDecay(0.1, 5, 0.5, staircase=True)),
    ("cos", S.CosineDecay(0.01, 100, alpha=0.1)),
    ("cos_warm", S.CosineDecay(0.01, 100, alpha=0.1, warmup_target=0.1, warmup_steps=10)),
    ("pw", S.PiecewiseConstantDecay([5, 15], [0.1, 0.05, 0.01])),
]
# scripted val_loss (and loss) per epoch
VAL = [1.0, 0.9, 0.905, 0.85, 0.86, 0.87, 0.84, 0.845, 0.846, 0.9, 0.91, 0.92]
LOSS = [2.0, 1.5, 1.25, 1.125, 1.0, 0.9375, 0.875, 0.8125, 0.75, 0.6875, 0.625, 0.5625]


class Scripted(keras.callbacks.Callback):
    def __init__(self, with_val=True):
        super().__init__()
        self.with_val = with_val

    def on_epoch_end(self, epoch, logs=None):
        logs["loss"] = LOSS[epoch]
        if self.with_val:
            logs["val_loss"] = VAL[epoch]


def fit(cbs, epochs=12, with_val=True, lr=0.001):
    keras.utils.set_random_seed(1)
    m = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    m.compile(keras.optimizers.SGD(lr), "mse")
    x = np.ones((8, 2), "float32")
    y = np.ones((8, 1), "float32")
    h = m.fit(x, y, batch_size=8, epochs=epochs, verbose=0, callbacks=[Scripted(with_val)] + cbs)
    return h


def c_bytes(b):
    return '"' + b.decode().replace("\r", "\\r").replace("\n", "\\n\"\n    \"") + '"'


print("/* made by tools/keras_callbacks_reference.py (Keras %s) */" % keras.__version__)
print("static const int64_t ref_steps[%d] = {%s};" % (len(STEPS), ", ".join(map(str, STEPS))))
for name, s in SCHEDULES:
    print("static const float ref_%s[%d] = {%s};" % (name, len(STEPS), ", ".join("%.9g" % float(s(t)) for t in STEPS)))

ES = [
    ("es_patience2", dict(patience=2, min_delta=0.01)),
    ("es_patience0", dict(patience=0)),
    ("es_baseline", dict(patience=2, baseline=0.8)),
    ("es_start3", dict(patience=1, start_from_epoch=3)),
    ("es_restore", dict(patience=3, restore_best_weights=True)),
]
for name, kw in ES:
    es = keras.callbacks.EarlyStopping(**kw)
    h = fit([es])
    print("static const int ref_%s[3] = {%d, %d, %d}; /* stopped_epoch, epochs run, best_epoch */"
          % (name, es.stopped_epoch, len(h.history["loss"]), es.best_epoch))

rl = keras.callbacks.ReduceLROnPlateau(factor=0.5, patience=2, cooldown=1, min_lr=0.0002, min_delta=0.01)
h = fit([rl])
print("static const double ref_rlr_lr[12] = {%s};" % ", ".join(repr(v) for v in h.history["learning_rate"]))

d = tempfile.mkdtemp()
p = os.path.join(d, "log.csv")
fit([keras.callbacks.ReduceLROnPlateau(factor=0.5, patience=2), keras.callbacks.CSVLogger(p)], epochs=5)
print("static const char ref_csv_val[] =\n    %s;" % c_bytes(open(p, "rb").read()))
p2 = os.path.join(d, "log2.csv")
fit([keras.callbacks.CSVLogger(p2, separator=";")], epochs=2, with_val=False)
fit([keras.callbacks.CSVLogger(p2, separator=";", append=True)], epochs=3, with_val=False)
print("static const char ref_csv_append[] =\n    %s;" % c_bytes(open(p2, "rb").read()))

# optimizers with clipping and schedules: Dense(3 -> 2) with these weights,
# MSE, 3 steps on one batch of 4; the kernel and bias after them
W0 = (np.arange(6, dtype="float32").reshape(3, 2) * 0.1 - 0.2)
B0 = np.array([0.05, -0.05], "float32")
X = np.linspace(-1, 2, 12, dtype="float32").reshape(4, 3)
Y = np.array([[1, 0], [0, 1], [2, -1], [-1, 3]], "float32")
O = keras.optimizers
OPTS = [
    ("sgd_clipnorm", lambda: O.SGD(0.1, clipnorm=0.5)),
    ("adam_clipvalue", lambda: O.Adam(0.01, clipvalue=0.1)),
    ("rms_gclip", lambda: O.RMSprop(0.01, global_clipnorm=0.5)),
    ("sgdm_gclip", lambda: O.SGD(0.1, momentum=0.9, global_clipnorm=0.5)),
    ("adamw_clipnorm", lambda: O.AdamW(0.01, clipnorm=0.5)),
    ("adam_exp", lambda: O.Adam(S.ExponentialDecay(0.1, 1, 0.5))),
    ("sgd_cos_warm", lambda: O.SGD(S.CosineDecay(0.01, 4, warmup_target=0.1, warmup_steps=2))),
    ("sgd_pw_clipvalue", lambda: O.SGD(S.PiecewiseConstantDecay([1], [0.1, 0.01]), clipvalue=0.2)),
]
print("#define REF_OPT_STEPS 3")
for name, mk in OPTS:
    m = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    m.compile(mk(), "mse")
    m.layers[0].set_weights([W0, B0])
    for _ in range(3):
        m.train_on_batch(X, Y)
    k, b = m.layers[0].get_weights()
    print("static const float ref_%s[8] = {%s};" % (name, ", ".join("%.9g" % v for v in list(k.ravel()) + list(b))))
