#!/usr/bin/env python3
"""tf_keras_fixtures.py — legacy .h5 model files written by tf.keras 2 itself
(the tf-keras package from PyPI, on TensorFlow), for tests/test_keras_files.c.

    python3 -m venv /opt/tfkvenv && /opt/tfkvenv/bin/pip install tf-keras
    /opt/tfkvenv/bin/python tools/tf_keras_fixtures.py [--out DIR]

Writes DIR (default tests/fixtures/tf_keras): for each model M, M.h5
(tf_keras model.save("M.h5"): the tf.keras 2 HDF5 layout and model-config
dialect), M_x*.npy (inputs) and M_y*.npy (tf_keras's predictions), and
manifest.json in the layout of tools/keras_fixtures.py's (the same test
program reads both). Inputs, weights and BN statistics come from fixed
seeds, so the .npy files and the weights are the same on every run.
"""
import argparse
import json
import os
import shutil
import sys
import zlib

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import h5py  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402
from tf_keras import layers as L  # noqa: E402

F32 = np.float32
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "tests", "fixtures", "tf_keras")
TOL_PRED = {"rtol": 1e-5, "atol": 1e-6}
LAYER_KEYS = ("units", "activation", "use_bias", "filters", "kernel_size", "strides", "padding",
              "pool_size", "axis", "momentum", "epsilon", "center", "scale", "data_format")


def seed_of(name):
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def reset(name):
    keras.backend.clear_session()
    keras.utils.set_random_seed(seed_of(name) % (2**31 - 1))


def normal(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(F32)


def save_npy(out, fname, arr):
    np.save(os.path.join(out, fname), np.ascontiguousarray(arr))
    return fname


def layer_summary(layer):
    cfg = layer.get_config()
    d = {"name": layer.name, "class_name": layer.__class__.__name__}
    for k in LAYER_KEYS:
        if k in cfg:
            v = cfg[k]
            d[k] = list(v) if isinstance(v, tuple) else v
    d["weights"] = [[w.name, list(w.shape)] for w in layer.weights]
    return d


def set_seeded_weights(model, rng):
    """Seeded weights for every layer (not tf_keras's initializers, whose
    streams may change between versions); BN variances positive."""
    for layer in model.layers:
        ws = []
        for w in layer.weights:
            if "moving_variance" in w.name or "gamma" in w.name:
                ws.append(rng.uniform(0.5, 1.5, tuple(w.shape)).astype(F32))
            else:
                ws.append(normal(rng, *w.shape, scale=0.4))
        if ws:
            layer.set_weights(ws)


def fixture(out, manifest, name, kind, m, xs, input_names, notes):
    ys = m.predict(xs if len(xs) > 1 else xs[0], verbose=0)
    ys = [np.asarray(t, F32) for t in (ys if isinstance(ys, list) else [ys])]
    m.save(os.path.join(out, name + ".h5"), save_format="h5")
    xf = [save_npy(out, "%s_x%s.npy" % (name, i if len(xs) > 1 else ""), t) for i, t in enumerate(xs)]
    yf = [save_npy(out, "%s_y%s.npy" % (name, i if len(ys) > 1 else ""), t) for i, t in enumerate(ys)]
    manifest["fixtures"].append({
        "name": name, "kind": kind,
        "dialect": "tf.keras %s (tf_keras on TensorFlow %s)" % (keras.__version__, tf.__version__),
        "files": {"h5": name + ".h5", "x": xf, "y": yf},
        "inputs": [{"name": n, "shape": list(t.shape), "file": f} for n, t, f in zip(input_names, xs, xf)],
        "outputs": [{"name": o.name.split("/")[0], "shape": list(t.shape), "file": f}
                    for o, t, f in zip(m.outputs, ys, yf)],
        "layers": [layer_summary(la) for la in m.layers],
        "layer_classes": sorted({la.__class__.__name__ for la in m.layers} | {"InputLayer"}),
        "tolerance": {"predictions": TOL_PRED},
        "notes": notes,
    })
    print("wrote %-26s (tf_keras %s)" % (name, keras.__version__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    out = os.path.abspath(ap.parse_args().out)
    if os.path.isdir(out):
        if os.listdir(out) and not os.path.exists(os.path.join(out, "manifest.json")):
            sys.exit("%s exists and is not a fixture folder (no manifest.json)" % out)
        shutil.rmtree(out)
    os.makedirs(out)
    manifest = {
        "generator": "tools/tf_keras_fixtures.py",
        "keras_version": keras.__version__,
        "backend": "tensorflow " + tf.__version__,
        "h5py_version": h5py.__version__,
        "numpy_version": np.__version__,
        "tolerance_rule": "pass if |got - want| <= atol + rtol * |want| elementwise",
        "tolerance": {"predictions": TOL_PRED},
        "fixtures": [],
        "bad": [],
    }

    # Sequential CNN with BatchNormalization and pooling, compiled (the file
    # carries tf.keras 2's training_config and optimizer weights)
    name = "tf2_seq_cnn"
    reset(name)
    rng = np.random.default_rng(seed_of(name))
    m = keras.Sequential([
        keras.Input((6, 6, 2)),
        L.Conv2D(3, 3, padding="same", activation="relu"),
        L.BatchNormalization(),
        L.MaxPooling2D(2),
        L.Flatten(),
        L.Dense(3, activation="softmax"),
    ], name="sequential")
    set_seeded_weights(m, rng)
    m.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy",
              metrics=["accuracy"])
    fixture(out, manifest, name, "sequential", m, [normal(rng, 3, 6, 6, 2)], ["input_1"],
            "tf_keras model.save(..., save_format='h5') of a compiled Sequential")

    # Functional: two inputs, a shared layer, Add, Concatenate, two outputs
    name = "tf2_func_shared"
    reset(name)
    rng = np.random.default_rng(seed_of(name))
    a = keras.Input((5,), name="input_1")
    b = keras.Input((5,), name="input_2")
    shared = L.Dense(4, activation="tanh", name="shared")
    ha, hb = shared(a), shared(b)
    s = L.Add(name="add")([ha, hb])
    c = L.Concatenate(name="concatenate")([ha, hb])
    o1 = L.Dense(2, activation="softmax", name="out_a")(c)
    o2 = L.Dense(1, name="out_b")(s)
    m = keras.Model([a, b], [o1, o2], name="model")
    set_seeded_weights(m, rng)
    fixture(out, manifest, name, "functional", m, [normal(rng, 4, 5), normal(rng, 4, 5)],
            ["input_1", "input_2"], "tf_keras model.save(..., save_format='h5') of an uncompiled Functional "
            "model with a shared layer")

    manifest["files"] = {fn: os.path.getsize(os.path.join(out, fn)) for fn in sorted(os.listdir(out))}
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print("%d files in %s" % (len(os.listdir(out)), out))


if __name__ == "__main__":
    sys.exit(main())
