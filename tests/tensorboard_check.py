#!/usr/bin/env python3
"""flynn's TensorBoard logs, read by TensorBoard itself.

    tensorboard_check.py PATH/TO/test_tensorboard FIXTURES_DIR

Runs test_tensorboard with --keep (a short fit with fl_tensorboard, its
History beside the logs), then reads the logs three ways:
  - tensorboard's EventAccumulator: every tag, step and value equals flynn's
    History (and the batch logs), and the tags, steps, plugins, dtypes and
    shapes equal those of the logs Keras 3 on TensorFlow wrote for the same
    model (tests/fixtures/tensorboard, tools/tensorboard_fixtures.py);
  - TensorFlow's tf.compat.v1.train.summary_iterator (its record reader checks
    the CRCs), and Keras's model_from_json on the "keras" graph summary;
  - a running `tensorboard --logdir` server (its Rust data server by
    default): the scalars, histograms and graph its HTTP API serves.
Needs numpy and tensorboard from PyPI; TensorFlow and Keras add their reader
and model_from_json. ctest runs it with FLYNN_TF_PYTHON: /opt/tfkvenv's python
where that venv is (TensorFlow, Keras and tensorboard), else .venv-test's,
which `scripts/setup.sh --test` makes with tensorboard and numpy only; it
skips where neither is.
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import json
import urllib.request

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

try:
    import numpy as np
except ImportError:  # main() says what is missing and skips
    np = None

failures = []
checks = 0
HAVE_KERAS = False


def check(cond, msg):
    global checks
    checks += 1
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def read_history(path):
    hist, batches = {}, {}
    with open(path) as f:
        for line in f:
            p = line.split()
            if p[0] == "batch":
                batches[int(p[1])] = (np.float32(p[2]), np.float32(p[3]))
            else:
                hist.setdefault(p[0], []).append(np.float32(p[2]))
    return hist, batches


def load(path):
    from tensorboard.backend.event_processing import event_accumulator as ea
    acc = ea.EventAccumulator(path, size_guidance={ea.TENSORS: 0})
    acc.Reload()
    return acc


def values(acc, tag):
    from tensorboard.util import tensor_util
    return [(e.step, tensor_util.make_ndarray(e.tensor_proto)) for e in acc.Tensors(tag)]


def structure(acc):
    out = {}
    for tag in acc.Tags()["tensors"]:
        md = acc.SummaryMetadata(tag)
        evs = acc.Tensors(tag)
        out[tag] = (md.plugin_data.plugin_name, md.plugin_data.content, tuple(e.step for e in evs),
                    evs[0].tensor_proto.dtype, tuple(d.size for d in evs[0].tensor_proto.tensor_shape.dim))
    return out


def check_case(out, fixtures, case):
    hist, batches = read_history(os.path.join(out, case, "history.txt"))
    acc = {s: load(os.path.join(out, case, s)) for s in ("train", "validation")}
    ref = {s: load(os.path.join(fixtures, case, s)) for s in ("train", "validation")}
    n = len(hist["loss"])
    for key in ("loss", "accuracy"):
        got = values(acc["train"], "epoch_" + key)
        check([s for s, _ in got] == list(range(n)), f"{case} train epoch_{key}: steps {[s for s, _ in got]}")
        check(all(v.dtype == np.float32 and v == hist[key][s] for s, v in got),
              f"{case} train epoch_{key}: {[float(v) for _, v in got]} != History {hist[key]}")
        got = values(acc["validation"], "epoch_" + key)
        check([float(v) for _, v in got] == [float(v) for v in hist["val_" + key]],
              f"{case} validation epoch_{key}: {[float(v) for _, v in got]} != History val_{key} {hist['val_' + key]}")
        got = values(acc["validation"], f"evaluation_{key}_vs_iterations")
        check([s for s, _ in got] == [4 * (e + 1) for e in range(n)], f"{case} evaluation_{key}: steps {[s for s, _ in got]}")
        check([float(v) for _, v in got] == [float(v) for v in hist["val_" + key]], f"{case} evaluation_{key}: values")
    lr = values(acc["train"], "epoch_learning_rate")
    check([float(v) for _, v in lr] == [float(np.float32(1e-3))] * n, f"{case} epoch_learning_rate: {lr}")
    if batches:
        for key, i in (("loss", 0), ("accuracy", 1)):
            got = values(acc["train"], "batch_" + key)
            check([s for s, _ in got] == list(range(2, 13, 2)), f"{case} batch_{key}: steps {[s for s, _ in got]}")
            check(all(v == batches[s][i] for s, v in got), f"{case} batch_{key}: values differ from the batch logs")
    for tag in acc["train"].Tags()["tensors"]:
        if tag.endswith("/histogram"):
            for s, h in values(acc["train"], tag):
                check(h.shape == (30, 3) and h.dtype == np.float64 and (h[:, 0] <= h[:, 1]).all(), f"{case} {tag}: {h.shape}")
    for s in ("train", "validation"):
        a, b = structure(acc[s]), structure(ref[s])
        check(a == b, f"{case}/{s}: flynn's structure differs from Keras's:\n  flynn {sorted(a.items())}\n  Keras {sorted(b.items())}")
    # the conceptual graph: Keras reads the model back from it (where Keras is installed; else its JSON)
    (step, js), = values(acc["train"], "keras")
    if HAVE_KERAS:
        import keras
        m = keras.models.model_from_json(js.item().decode())
        got = (type(m).__name__, [l.name for l in m.layers])
    else:
        cfg = json.loads(js.item().decode())
        got = (cfg.get("class_name"), [l["config"]["name"] for l in cfg["config"]["layers"] if l["class_name"] != "InputLayer"])
    check(step == 0 and got == ("Sequential", ["dense", "dense_1"]), f"{case}: the 'keras' summary is not flynn's model: {got}")
    print(f"  {case}: EventAccumulator reads every value of History; structure equals Keras's; "
          + ("Keras reads the graph" if HAVE_KERAS else "the graph is flynn's model (no Keras here to read it)"))


def check_tf_reader(out):
    import tensorflow as tf
    for root, _, files in os.walk(out):
        for f in files:
            if f.startswith("events.out.tfevents."):
                evs = list(tf.compat.v1.train.summary_iterator(os.path.join(root, f)))
                check(evs[0].file_version == "brain.Event:2" and len(evs) > 1, f"{root}/{f}: TF's reader: {len(evs)} events")
    print("  TensorFlow's summary_iterator reads every file")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return r.read().decode()


def check_server(out):
    hist, _ = read_history(os.path.join(out, "epoch", "history.txt"))
    port = free_port()
    tb = os.path.join(os.path.dirname(sys.executable), "tensorboard")
    proc = subprocess.Popen([tb, "--logdir", out, "--port", str(port), "--host", "127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        runs, deadline = [], time.time() + 90
        while time.time() < deadline:
            try:
                runs = json.loads(get(port, "/data/runs"))
                if len(runs) == 4:
                    scal = json.loads(get(port, "/data/plugin/scalars/scalars?run=epoch/train&tag=epoch_loss"))
                    if len(scal) == len(hist["loss"]):
                        break
            except OSError:
                pass
            if proc.poll() is not None:
                break
            time.sleep(1)
        check(sorted(runs) == ["batch2/train", "batch2/validation", "epoch/train", "epoch/validation"],
              f"TensorBoard's runs: {runs}")
        if len(runs) != 4:
            return
        scal = json.loads(get(port, "/data/plugin/scalars/scalars?run=epoch/train&tag=epoch_loss"))
        check([s for _, s, _ in scal] == [0, 1, 2] and [np.float32(v) for _, _, v in scal] == hist["loss"],
              f"TensorBoard's epoch_loss: {scal}")
        val = json.loads(get(port, "/data/plugin/scalars/scalars?run=epoch/validation&tag=evaluation_loss_vs_iterations"))
        check([np.float32(v) for _, _, v in val] == hist["val_loss"], f"TensorBoard's evaluation_loss_vs_iterations: {val}")
        h = json.loads(get(port, "/data/plugin/histograms/histograms?run=epoch/train&tag=sequential/dense/kernel/histogram"))
        check(len(h) == 3 and all(sum(b[2] for b in e[2]) == 20 for e in h), "TensorBoard's histograms of dense/kernel")
        info = json.loads(get(port, "/data/plugin/graphs/info"))
        check(info.get("epoch/train", {}).get("tags", {}).get("keras", {}).get("conceptual_graph") is True,
              f"TensorBoard's graphs: {info}")
        g = get(port, "/data/plugin/graphs/graph?run=epoch/train&conceptual=true&tag=keras")
        check('name: "sequential/dense_1"' in g, "TensorBoard's conceptual graph lacks sequential/dense_1")
        print(f"  a running TensorBoard serves the scalars, histograms and the model graph (port {port})")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    import importlib.util
    missing = [m for m in ("numpy", "tensorboard") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"skipped: {sys.executable} lacks {', '.join(missing)} (pip install numpy tensorboard; "
              "scripts/setup.sh --test makes .venv-test with them)")
        return 77
    global HAVE_KERAS
    have_tf = importlib.util.find_spec("tensorflow") is not None
    HAVE_KERAS = importlib.util.find_spec("keras") is not None
    if not have_tf or not HAVE_KERAS:
        print(f"  note: {sys.executable} lacks {' and '.join(m for m, h in (('tensorflow', have_tf), ('keras', HAVE_KERAS)) if not h)}:"
              " EventAccumulator and the tensorboard server read the logs; "
              + ("TensorFlow's own reader is not run" if not have_tf else "") + ("; Keras does not load the graph" if not HAVE_KERAS else ""))
    test_bin, fixtures = sys.argv[1], sys.argv[2]
    out = tempfile.mkdtemp(prefix="flynn-tbcheck-")
    try:
        r = subprocess.run([test_bin, fixtures, "--keep", out], capture_output=True, text=True)
        check(r.returncode == 0, f"test_tensorboard failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
        for case in ("epoch", "batch2"):
            check_case(out, fixtures, case)
        if have_tf:
            check_tf_reader(out)
        check_server(out)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    print(f"tensorboard_check: {checks} checks, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
