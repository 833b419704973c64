#!/usr/bin/env python3
"""keras_check_flynn_files.py — the reverse direction: real Keras 3 loads the
model files flynn writes, and computes what flynn computed.

Run through the build (it needs Keras 3 with a CPU backend and h5py, e.g.
`pip install keras jax h5py`; it is not part of the plain test command):

    cmake --build build --target keras-roundtrip

or by hand:

    KERAS_BACKEND=jax python3 tools/keras_check_flynn_files.py \
        --flynn build/flynn --export build/keras_export \
        --fixtures tests/fixtures/keras --out build/keras-roundtrip

It checks two sets of files:
 1. models built and trained in flynn (tools/keras_export.c: Sequential and
    Functional models of every supported layer, each optimizer and loss),
    saved as .keras, .h5 and .json + .weights.h5;
 2. every fixture of tests/fixtures/keras (written by Keras) converted by
    `flynn convert` into each of those formats.
For each file Keras loads (keras.saving.load_model, or model_from_json +
load_weights) it compares the predictions with flynn's (or, for the
fixtures, Keras's own original ones): |got - want| <= 1e-6 + 1e-5 |want|.
For compiled models it checks the optimizer's iteration count and, when the
model has no Dropout, takes one train_on_batch step on the saved batch and
compares every weight with what flynn computed for that step (1e-6 + 1e-4
|want|): this needs Keras to have restored flynn's optimizer state exactly.
Keras 3.15 cannot train a model it loaded from a legacy .h5 file (its loader
builds the optimizer with no variables, also for files Keras wrote), so for
.h5 files the script does what that loader means to do: a fresh optimizer of
the file's training_config, built on the model's trainable variables, and
set_weights() with the file's optimizer_weights in order.
Prints one line per check and a summary; exits 1 on any mismatch.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import warnings

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

try:
    import numpy as np
    import keras
except ImportError as e:  # pragma: no cover
    sys.exit("keras_check_flynn_files.py needs Keras 3 with a CPU backend and h5py "
             "(pip install keras jax h5py): %s" % e)

try:
    import absl.logging

    absl.logging.set_verbosity(absl.logging.ERROR)
except ImportError:  # pragma: no cover
    pass

RTOL_PRED, ATOL_PRED = 1e-5, 1e-6
RTOL_STEP, ATOL_STEP = 1e-4, 1e-6

results = []  # (ok, line)


def report(ok, what, detail=""):
    line = "%-4s %s%s" % ("ok" if ok else "FAIL", what, (": " + detail) if detail else "")
    results.append((ok, line))
    print(line, flush=True)


def max_errs(got, want):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    if got.shape != want.shape:
        return None
    d = np.abs(got.astype(np.float64) - want)
    rel = d / np.maximum(np.abs(want), 1e-30)
    big = np.abs(want) > 1e-3
    return (float(d.max()) if d.size else 0.0,
            float(rel[big].max()) if big.any() else 0.0,
            bool(np.all(d <= ATOL_PRED + RTOL_PRED * np.abs(want))))


def close(got, want, rtol, atol):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    if got.shape != want.shape:
        return False, "shape %s, expected %s" % (got.shape, want.shape)
    d = np.abs(got.astype(np.float64) - want)
    ok = bool(np.all(d <= atol + rtol * np.abs(want)))
    return ok, "max abs err %.3g" % (float(d.max()) if d.size else 0.0)


def predict(model, xs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ys = model.predict(xs if len(xs) > 1 else xs[0], verbose=0)
    return list(ys) if isinstance(ys, (list, tuple)) else [ys]


def loaders(base):
    out = {}
    if os.path.exists(base + ".keras"):
        out[".keras"] = lambda: keras.saving.load_model(base + ".keras")
    if os.path.exists(base + ".h5"):
        out[".h5"] = lambda: keras.saving.load_model(base + ".h5")
    if os.path.exists(base + ".json") and os.path.exists(base + ".weights.h5"):
        def from_json():
            with open(base + ".json") as f:
                m = keras.models.model_from_json(f.read())
            m.load_weights(base + ".weights.h5")
            return m
        out[".json+.weights.h5"] = from_json
    return out


def load(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn()


def has_dropout(model):
    # Dropout layers, and the recurrent layers' dropout / recurrent_dropout
    # (also inside Bidirectional): random masks that no two programs share
    def drops(l):
        if isinstance(l, keras.layers.Dropout):
            return l.rate > 0
        if isinstance(l, keras.layers.Bidirectional):
            return drops(l.forward_layer) or drops(l.backward_layer)
        if isinstance(l, keras.layers.RNN):
            return getattr(l, "dropout", 0) > 0 or getattr(l, "recurrent_dropout", 0) > 0
        return False
    return any(drops(l) for l in model.layers)


def check_predictions(name, how, model, xs, ys):
    got = predict(model, xs)
    if len(got) != len(ys):
        report(False, "%s %s predictions" % (name, how), "%d outputs, expected %d" % (len(got), len(ys)))
        return
    worst = [0.0, 0.0]
    ok = True
    for g, w in zip(got, ys):
        e = max_errs(g, w)
        if e is None:
            report(False, "%s %s predictions" % (name, how), "shape %s, expected %s" % (np.shape(g), np.shape(w)))
            return
        worst[0], worst[1] = max(worst[0], e[0]), max(worst[1], e[1])
        ok &= e[2]
    report(ok, "%-28s %-18s predictions" % (name, how), "max abs err %.3g, max rel err %.3g" % tuple(worst))


def check_step(name, how, model, x, y, want_weights, want_iterations, h5path=None):
    it = int(np.asarray(model.optimizer.iterations))
    if want_iterations is not None and it != want_iterations:
        report(False, "%s %s optimizer" % (name, how), "iterations %d, expected %d" % (it, want_iterations))
        return
    if has_dropout(model):
        report(True, "%-28s %-18s optimizer" % (name, how), "iterations %d (Dropout: no step comparison)" % it)
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.train_on_batch(x, y)
    except ValueError as e:
        if not (h5path and "optimizer was built with 0 variables" in str(e)):
            raise
        # Keras 3.15's legacy .h5 loader builds the optimizer on
        # model._trainable_variables, which is empty for a Sequential or
        # Functional model, so it cannot train any model loaded from .h5 (not
        # even one it saved itself). Do what it means to do: compile a fresh
        # optimizer of the saved config, build it on the trainable variables
        # and set_weights() the file's optimizer_weights in order.
        import h5py
        with h5py.File(h5path, "r") as f:
            g = f["optimizer_weights"]
            names = [n.decode() if isinstance(n, bytes) else str(n) for n in g.attrs["weight_names"]]
            values = [np.asarray(g[n]) for n in names]
            tc = json.loads(f.attrs["training_config"])
        opt = keras.optimizers.deserialize(tc["optimizer_config"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.compile(optimizer=opt, loss=keras.losses.deserialize(tc["loss"]) if isinstance(tc["loss"], dict)
                          else tc["loss"])
            opt.build(model.trainable_variables)
            opt.set_weights(values)
            it = int(np.asarray(opt.iterations))
            if want_iterations is not None and it != want_iterations:
                report(False, "%s %s optimizer" % (name, how), "iterations %d, expected %d" % (it, want_iterations))
                return
            model.train_on_batch(x, y)
        how += " (set_weights)"
    ok, worst = True, 0.0
    for layer in model.layers:
        half = len(layer.weights) // 2
        for i, w in enumerate(layer.weights):
            # a sub-layer's weight by its path below the layer ("query/kernel"), as flynn names it
            at = w.path.find(layer.name + "/")
            sub = isinstance(layer, (keras.layers.MultiHeadAttention, keras.layers.TimeDistributed))
            wn = w.path[at + len(layer.name) + 1:] if sub and at >= 0 else w.name
            if isinstance(layer, keras.layers.Bidirectional):  # flynn's names of its two halves
                wn = ("forward_" if i < half else "backward_") + w.name
            fn = want_weights(layer.name, wn.replace("/", "_"))
            if fn is None or not os.path.exists(fn):
                report(False, "%s %s step" % (name, how), "no reference for %s/%s" % (layer.name, w.name))
                return
            want = np.load(fn)
            good, _ = close(np.asarray(w.numpy()), want, RTOL_STEP, ATOL_STEP)
            d = np.abs(np.asarray(w.numpy(), np.float64) - want)
            worst = max(worst, float(d.max()) if d.size else 0.0)
            if not good:
                ok = False
                print("     %s/%s differs (max abs err %.3g)" % (layer.name, w.name, float(d.max())))
    report(ok, "%-28s %-18s next step" % (name, how),
           "iterations %d -> %d, max abs weight err %.3g" % (it, int(np.asarray(model.optimizer.iterations)), worst))


def flynn_models(export, out):
    d = os.path.join(out, "flynn_models")
    os.makedirs(d, exist_ok=True)
    subprocess.run([export, d], check=True)
    with open(os.path.join(d, "models.txt")) as f:
        rows = [line.split() for line in f if line.strip()]
    for name, ni, no, trained, batch, steps in rows:
        ni, no, trained = int(ni), int(no), trained == "1"
        base = os.path.join(d, name)
        xs = [np.load("%s_x%d.npy" % (base, i)) for i in range(ni)]
        ys = [np.load("%s_y%d.npy" % (base, i)) for i in range(no)]
        for how, fn in loaders(base).items():
            try:
                model = load(fn)
            except Exception as e:  # noqa: BLE001
                report(False, "%s %s load" % (name, how), "%s: %s" % (type(e).__name__, str(e)[:300]))
                continue
            check_predictions(name, how, model, xs, ys)
            if trained and how != ".json+.weights.h5":
                if model.optimizer is None:
                    report(False, "%s %s compile" % (name, how), "Keras did not restore the compile config")
                    continue
                x = np.load(base + "_train_x.npy")
                y = np.load(base + "_train_y.npy")
                want = lambda ln, wn: "%s_next_%s_%s.npy" % (base, ln, wn)  # noqa: E731
                check_step(name, how, model, x, y, want, int(steps), base + ".h5" if how == ".h5" else None)


def converted_fixtures(flynn, fixtures, out):
    d = os.path.join(out, "converted")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(fixtures, "manifest.json")) as f:
        man = json.load(f)
    P = lambda fn: os.path.join(fixtures, fn)  # noqa: E731
    for fx in man["fixtures"]:
        name, files = fx["name"], fx["files"]
        src = files.get("keras") or files.get("h5")
        if not src:
            continue
        xs = [np.load(P(fn)) for fn in files["x"]]
        ys = [np.load(P(fn)) for fn in files["y"]]
        base = os.path.join(d, name)
        for ext in (".keras", ".h5", ".json"):
            r = subprocess.run([flynn, "convert", P(src), base + ext], capture_output=True, text=True)
            if r.returncode != 0:
                report(False, "flynn convert %s -> %s" % (src, ext), r.stderr.strip()[:300])
        for how, fn in loaders(base).items():
            try:
                model = load(fn)
            except Exception as e:  # noqa: BLE001
                if how == ".h5" and "score_mode" in str(e):
                    # Keras 3.15 reads an Attention layer's score_mode back from a
                    # legacy .h5 as the function keras.ops.dot: it cannot load its
                    # own .h5 of one either (the fixtures have none for that reason)
                    print("SKIP %s (converted) .h5: Keras 3.15 cannot read Attention from a legacy .h5" % name)
                    continue
                if how == ".h5" and "Unknown layer: 'NotEqual'" in str(e):
                    # nor a Functional model's mask operations (its own .h5 of one fails the same way)
                    print("SKIP %s (converted) .h5: Keras 3.15 cannot read mask operations from a legacy .h5" % name)
                    continue
                report(False, "%s (converted) %s load" % (name, how), "%s: %s" % (type(e).__name__, str(e)[:300]))
                continue
            check_predictions(name + " (flynn convert)", how, model, xs, ys)
            if "x_b" in files:  # a None axis: the second batch, of another length
                check_predictions(name + " (flynn convert, length 2)", how, model,
                                  [np.load(P(fn)) for fn in files["x_b"]], [np.load(P(fn)) for fn in files["y_b"]])
        tr = fx.get("training")
        if not tr or "after_keras" not in files:
            continue
        # Keras's M_after.keras (optimizer state after one step) through flynn, then
        # one more Keras step: must give Keras's own step 2
        after = os.path.join(d, name + "_after")
        for ext in (".keras", ".h5"):
            r = subprocess.run([flynn, "convert", P(files["after_keras"]), after + ext], capture_output=True, text=True)
            if r.returncode != 0:
                report(False, "flynn convert %s -> %s" % (files["after_keras"], ext), r.stderr.strip()[:300])
                continue
            try:
                model = load(lambda: keras.saving.load_model(after + ext))  # noqa: B023
            except Exception as e:  # noqa: BLE001
                if ext == ".h5" and "score_mode" in str(e):  # as above: Keras's own limit
                    print("SKIP %s (after, flynn convert) .h5: Keras 3.15 cannot read Attention from a legacy .h5" % name)
                    continue
                if ext == ".h5" and "Unknown layer: 'NotEqual'" in str(e):  # as above
                    print("SKIP %s (after, flynn convert) .h5: Keras 3.15 cannot read mask operations from a legacy "
                          ".h5" % name)
                    continue
                report(False, "%s (after, flynn convert) %s load" % (name, ext), "%s: %s" % (type(e).__name__, str(e)[:300]))
                continue
            steps = {}
            for it in tr["step2_weights"]:
                ln, wn, fn = (it["layer"], it["weight"], it["file"]) if isinstance(it, dict) else it
                steps[(ln, wn.replace("/", "_"))] = P(fn)  # as check_step asks: "query_kernel"
            x = np.load(P(tr.get("train_x") or files["train_x"]))
            y = np.load(P(tr.get("train_y") or files["train_y"]))
            check_step(name + " (after, flynn convert)", ext, model, x, y, lambda ln, wn: steps.get((ln, wn)), 1,
                       after + ext if ext == ".h5" else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flynn", required=True, help="the flynn command")
    ap.add_argument("--export", required=True, help="the keras_export program")
    ap.add_argument("--fixtures", required=True, help="tests/fixtures/keras")
    ap.add_argument("--out", required=True, help="a scratch folder (emptied)")
    args = ap.parse_args()
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    print("Keras %s, backend %s" % (keras.__version__, keras.backend.backend()), flush=True)
    flynn_models(os.path.abspath(args.export), args.out)
    converted_fixtures(os.path.abspath(args.flynn), args.fixtures, args.out)
    bad = [line for ok, line in results if not ok]
    print("\nkeras-roundtrip: %d checks, %d failed" % (len(results), len(bad)))
    for line in bad:
        print("  " + line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
