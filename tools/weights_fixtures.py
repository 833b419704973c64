#!/usr/bin/env python3
"""weights_fixtures.py OUT — the fixtures of tests/test_cli_weights.sh (`flynn
train` / `evaluate` with several inputs, --sample-weight and --class-weight),
written by Keras 3 itself into OUT (tests/fixtures/data/weights):

    two_inputs.keras   a compiled Functional model with inputs 'features' (4,)
                       and 'extra' (3,), 3 softmax classes (Adam,
                       sparse_categorical_crossentropy, accuracy)
    two.npz            features, extra, y (60 samples; classes 24/30/6) and
                       features_test, extra_test, y_test (20)
    sw.npy             one weight per training sample, (60,)
    sw_test.npy        one weight per test sample, (20,)
    sw_negative.npy    sw.npy with sample 7's weight -0.5 (refused)
    missing_extra.npz  features and y only (no array for input 'extra': refused)
    ref.txt            Keras's evaluate of the test set: "loss L" and
                       "weighted_loss L" (sample_weight=sw_test), one per line

Run: KERAS_BACKEND=jax JAX_PLATFORMS=cpu /opt/kvenv/bin/python tools/weights_fixtures.py tests/fixtures/data/weights
"""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import numpy as np  # noqa: E402
import keras  # noqa: E402
from keras import layers as L  # noqa: E402


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    keras.utils.set_random_seed(13)
    rng = np.random.default_rng(13)
    a = keras.Input((4,), name="features")
    b = keras.Input((3,), name="extra")
    h = L.Concatenate()([L.Dense(5, activation="relu")(a), b])
    m = keras.Model([a, b], L.Dense(3, activation="softmax")(h), name="two_inputs")
    m.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    m.save(os.path.join(out, "two_inputs.keras"))
    y = np.array([0] * 24 + [1] * 30 + [2] * 6, np.int32)
    rng.shuffle(y)
    f = rng.standard_normal((60, 4)).astype(np.float32)
    e = rng.standard_normal((60, 3)).astype(np.float32)
    ft = rng.standard_normal((20, 4)).astype(np.float32)
    et = rng.standard_normal((20, 3)).astype(np.float32)
    yt = rng.integers(0, 3, 20).astype(np.int32)
    np.savez(os.path.join(out, "two.npz"), features=f, extra=e, y=y, features_test=ft, extra_test=et, y_test=yt)
    sw = rng.uniform(0, 2, 60).astype(np.float32)
    swt = rng.uniform(0, 3, 20).astype(np.float32)
    np.save(os.path.join(out, "sw.npy"), sw)
    np.save(os.path.join(out, "sw_test.npy"), swt)
    neg = sw.copy()
    neg[7] = -0.5
    np.save(os.path.join(out, "sw_negative.npy"), neg)
    np.savez(os.path.join(out, "missing_extra.npz"), features=f, y=y)
    plain = m.evaluate([ft, et], yt, batch_size=256, verbose=0)
    weighted = m.evaluate([ft, et], yt, sample_weight=swt, batch_size=256, verbose=0)
    with open(os.path.join(out, "ref.txt"), "w") as fo:
        fo.write("loss %.6f\nweighted_loss %.6f\n" % (plain[0], weighted[0]))
    print(open(os.path.join(out, "ref.txt")).read(), end="")


if __name__ == "__main__":
    main()
