#!/usr/bin/python3
"""lstm_compare.py — flynn's LSTM against Keras on TensorFlow, side by side, in one run.

The model of issue 12's measurement: Input(80, 64) -> LSTM(128) ->
Dense(10, softmax), batch 64, sparse categorical crossentropy, SGD, on the
CPU with the same thread count. For each side, alternating and repeated:
  * flynn:    build/bench_lstm (bench/lstm.c: fit over `steps` batches after
              a warm-up epoch, then predict over the same samples);
  * Keras-TF: the same model in /opt/tfkvenv (TensorFlow 2.21), timed with
              train_on_batch and predict_on_batch after a warm-up (TF's
              LSTM runs its fused CPU kernel when the activations are tanh
              and sigmoid, as here).
Prints ms per batch of 64 for the forward pass (predict) and the training
step, the fastest of the repeats, and the flynn/TF speed ratio. PyTorch is
not installed on these machines (no torch in any venv), hence TF.

usage: bench/lstm_compare.py [--steps 10] [--repeat 3] [--threads 2] [--bench build/bench_lstm]
The machine should be otherwise idle; alternating the sides spreads the noise.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

TF_SCRIPT = r"""
import json, os, sys, time
import numpy as np
import tensorflow as tf
threads = int(sys.argv[2])
tf.config.threading.set_intra_op_parallelism_threads(threads)
tf.config.threading.set_inter_op_parallelism_threads(1)
import keras
steps, reps = int(sys.argv[1]), int(sys.argv[3])
B, T, D, U = 64, 80, 64, 128
rng = np.random.default_rng(1)
x = rng.uniform(-0.5, 0.5, (steps * B, T, D)).astype("float32")
y = (np.arange(steps * B) % 10).astype("int32")
m = keras.Sequential([keras.Input((T, D)), keras.layers.LSTM(U), keras.layers.Dense(10, activation="softmax")])
m.compile(optimizer=keras.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy")
for i in range(2):
    m.train_on_batch(x[:B], y[:B]); m.predict_on_batch(x[:B])
train = pred = 1e30
for r in range(reps):
    t0 = time.perf_counter()
    for i in range(steps):
        m.train_on_batch(x[i * B:(i + 1) * B], y[i * B:(i + 1) * B])
    t1 = time.perf_counter()
    for i in range(steps):
        m.predict_on_batch(x[i * B:(i + 1) * B])
    t2 = time.perf_counter()
    train, pred = min(train, t1 - t0), min(pred, t2 - t1)
print(json.dumps({"impl": "keras-tf " + tf.__version__, "threads": threads,
                  "train_ms_per_batch": 1e3 * train / steps, "predict_ms_per_batch": 1e3 * pred / steps}))
"""


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--bench", default=os.path.join(ROOT, "build", "bench_lstm"))
    p.add_argument("--python", default="/opt/tfkvenv/bin/python")
    a = p.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND="tensorflow",
               CUDA_VISIBLE_DEVICES="")
    best = {}
    for r in range(a.repeat):
        for name, cmd in (("flynn", [a.bench, str(a.steps), "1"]),
                          ("keras-tf", [a.python, "-c", TF_SCRIPT, str(a.steps), str(a.threads), "1"])):
            out = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit("%s failed:\n%s" % (name, out.stderr[-2000:]))
            res = json.loads(out.stdout.strip().splitlines()[-1])
            b = best.setdefault(name, res)
            for k in ("train_ms_per_batch", "predict_ms_per_batch"):
                b[k] = min(b[k], res[k])
            b["impl"] = res["impl"]
    f, t = best["flynn"], best["keras-tf"]
    print("LSTM(128), batch 64, 80 steps, 64 features, %d threads, best of %d x %d batches" %
          (a.threads, a.repeat, a.steps))
    print("%-22s %14s %14s" % ("", "forward ms", "train step ms"))
    for b in (f, t):
        print("%-22s %14.1f %14.1f" % (b["impl"], b["predict_ms_per_batch"], b["train_ms_per_batch"]))
    print("%-22s %13.2fx %13.2fx" % ("flynn speed / TF", t["predict_ms_per_batch"] / f["predict_ms_per_batch"],
                                      t["train_ms_per_batch"] / f["train_ms_per_batch"]))


if __name__ == "__main__":
    main()
