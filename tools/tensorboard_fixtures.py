#!/usr/bin/env python3
"""TensorBoard event files written by Keras 3 on TensorFlow, for
tests/test_tensorboard.c (which compares their structure with flynn's files
and reads them with its own event-file reader).

    /opt/tfkvenv/bin/python tools/tensorboard_fixtures.py --out tests/fixtures/tensorboard

Each case fits the same small model that test_tensorboard.c builds:

    Sequential: Input(4), Dense(5, relu), Dense(3, softmax)
    Adam(1e-3), sparse_categorical_crossentropy, metrics ["accuracy"]
    40 samples, batch_size 8, epochs 3, validation_split 0.25
    (30 training samples: 4 steps an epoch; 10 validation samples: 2 steps)

with keras.callbacks.TensorBoard(CASE, ...) as below, and writes
CASE/train/events.out.tfevents.* and CASE/validation/..., plus the final
weights (CASE/weights/<i>.npy, in model.weights order), from which the last
epoch's histograms were computed. Needs TensorFlow and the tensorboard
package (pip install tensorboard): Keras's callback writes through
tf.summary.
"""
import argparse
import os
import shutil

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

# name -> TensorBoard arguments and fit arguments (test_tensorboard.c: CASES)
CASES = {
    "epoch": dict(tb=dict(histogram_freq=1), fit=dict(validation_split=0.25)),
    "batch2": dict(tb=dict(histogram_freq=2, update_freq=2), fit=dict(validation_split=0.25)),
    "noval": dict(tb=dict(write_graph=False), fit=dict()),
    "sps": dict(tb=dict(write_graph=False, write_steps_per_second=True, update_freq=2), fit=dict(validation_split=0.25)),
}


def make_model(keras):
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5, activation="relu"),
                          keras.layers.Dense(3, activation="softmax")])
    m.compile(keras.optimizers.Adam(1e-3), "sparse_categorical_crossentropy", metrics=["accuracy"])
    return m


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="tests/fixtures/tensorboard")
    args = ap.parse_args()
    import keras

    if keras.backend.backend() != "tensorflow":
        raise SystemExit("tensorboard_fixtures.py: needs KERAS_BACKEND=tensorflow (Keras's TensorBoard writes with tf.summary)")
    rng = np.random.default_rng(7)
    x = rng.normal(size=(40, 4)).astype("float32")
    y = rng.integers(0, 3, size=(40,)).astype("int32")
    for name, case in CASES.items():
        d = os.path.join(args.out, name)
        shutil.rmtree(d, ignore_errors=True)
        keras.backend.clear_session()  # layer names from "dense" again, as flynn names them
        keras.utils.set_random_seed(1)
        m = make_model(keras)
        tb = keras.callbacks.TensorBoard(d, **case["tb"])
        h = m.fit(x, y, batch_size=8, epochs=3, verbose=0, shuffle=False, callbacks=[tb], **case["fit"])
        os.makedirs(os.path.join(d, "weights"))
        for i, w in enumerate(m.weights):
            np.save(os.path.join(d, "weights", f"{i}.npy"), np.asarray(w.numpy(), dtype="float32"))
        print(name, {k: [round(v, 4) for v in vs] for k, vs in h.history.items()})
    print("keras", keras.__version__)


if __name__ == "__main__":
    main()
