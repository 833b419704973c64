#!/usr/bin/python3
"""text_compare.py — flynn's two text models against PyTorch 2 and Keras 3 on TensorFlow, side by side, in one run.

The built-in models of `flynn train --data fortunes-lang` (src/nn/zoo.c), on
the synthetic sequences `flynn bench` makes (src/cli/bench.c, synth_text):
128 tokens of a vocabulary of 512, sample i holds 16 + (37 i mod 113) tokens
pre-padded with zeros, token t = 1 + ((131 i + 17 t) mod 511), class i mod 5.
  * lstm_text:        Embedding(512, 32, mask_zero) -> LSTM(64) -> Dense(5, softmax)
  * transformer_text: Embedding(512, 32) -> Conv1D(32, 3, same, relu) ->
                      MultiHeadAttention(2 heads, key_dim 16) + residual -> LayerNorm ->
                      Dense(64, relu) -> Dense(32) + residual -> LayerNorm ->
                      GlobalAveragePooling1D -> Dropout(0.1) -> Dense(5, softmax)
Each side: Adam(1e-3, eps 1e-7), sparse categorical crossentropy, the same
batch size and thread count (flynn --threads, torch.set_num_threads, TF's
intra-op pool; OMP_NUM_THREADS for all), a few warm-up steps, then one
training epoch over the samples (shuffled) and one predict pass over them.
  * flynn:    `flynn bench --model M --data synthetic` (one process per point);
  * PyTorch:  the same layers in torch.nn (bench/setup_venv.sh makes the venv).
              The masked LSTM is an nn.LSTM over packed sequences
              (pack_padded_sequence on the tokens moved to the front): with a
              zero initial state, Keras's mask on pre-padded input (carry the
              state over the padding) gives the same final state, and packing
              is how a PyTorch user skips the padding;
  * torch-full (lstm_text only): nn.LSTM over all 128 steps, padding
              included and no mask: the work flynn does, the fastest PyTorch
              LSTM (oneDNN), but not Keras's result;
  * Keras-TF: the same Keras model in /opt/tfkvenv (TensorFlow 2.21), fit and
              predict.
The sides alternate (round-robin per batch size and round); each point keeps
its best round. Prints samples/s, the flynn/peer ratios, the machine's load
before and after, and which BLAS and kernels each side used.

usage: bench/text_compare.py [--models lstm_text,transformer_text] [--batch-sizes 32,64,128,256]
                             [--samples 4096] [--rounds 2] [--threads 2] [--flynn build/flynn]
                             [--torch-python /opt/torchvenv/bin/torch-python] [--tf-python /opt/tfkvenv/bin/python]
                             [--sides flynn,torch,keras-tf] [--json FILE]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

COMMON = r"""
import json, os, sys, time
import numpy as np
model_name, B, N, threads, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
T, V, C = 128, 512, 5
def synth(n):  # src/cli/bench.c synth_text
    x = np.zeros((n, T), np.int32)
    for i in range(n):
        L = min(16 + (37 * i) % 113, T)
        t = np.arange(L)
        x[i, T - L:] = 1 + (131 * i + 17 * t) % (V - 1)
    return x, (np.arange(n) % C).astype(np.int32)
x, y = synth(N)
"""

TORCH = COMMON + r"""
import torch, torch.nn as nn
torch.set_num_threads(threads)
torch.manual_seed(0)
class LSTMText(nn.Module):
    def __init__(s):
        super().__init__(); s.emb = nn.Embedding(V, 32); s.lstm = nn.LSTM(32, 64, batch_first=True); s.out = nn.Linear(64, C)
    def forward(s, xl):
        xs, lens = xl
        p = nn.utils.rnn.pack_padded_sequence(s.emb(xs), lens, batch_first=True, enforce_sorted=False)
        _, (h, _) = s.lstm(p)
        return s.out(h[0])
class LSTMTextFull(LSTMText):  # every step, padding included, no mask: the same work as flynn's, not Keras's semantics
    def forward(s, xl):
        _, (h, _) = s.lstm(s.emb(xl[0]))
        return s.out(h[0])
class TransformerText(nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = nn.Embedding(V, 32); s.conv = nn.Conv1d(32, 32, 3, padding=1)
        s.att = nn.MultiheadAttention(32, 2, batch_first=True)
        s.ln1 = nn.LayerNorm(32, eps=1e-6); s.ln2 = nn.LayerNorm(32, eps=1e-6)
        s.f1 = nn.Linear(32, 64); s.f2 = nn.Linear(64, 32); s.drop = nn.Dropout(0.1); s.out = nn.Linear(32, C)
    def forward(s, xs):
        c = torch.relu(s.conv(s.emb(xs).transpose(1, 2))).transpose(1, 2)
        a, _ = s.att(c, c, c, need_weights=False)
        h = s.ln1(c + a)
        h2 = s.ln2(h + s.f2(torch.relu(s.f1(h))))
        return s.out(s.drop(h2.mean(1)))
lstm = model_name == "lstm_text"
full = os.environ.get("TEXT_COMPARE_TORCH_LSTM") == "full"
m = (LSTMTextFull() if full else LSTMText()) if lstm else TransformerText()
opt = torch.optim.Adam(m.parameters(), lr=1e-3, eps=1e-7)
lossf = nn.CrossEntropyLoss()
if lstm and full:
    X, LENS = torch.from_numpy(x).long(), torch.zeros(N).long()
elif lstm:  # the valid tokens moved to the front, and their counts
    lens_all = (x != 0).sum(1)
    xf = np.zeros_like(x)
    for i in range(N):
        xf[i, :lens_all[i]] = x[i, T - lens_all[i]:]
    X, LENS = torch.from_numpy(xf).long(), torch.from_numpy(lens_all).long()
else:
    X = torch.from_numpy(x).long()
Y = torch.from_numpy(y).long()
def inp(idx):
    return (X[idx], LENS[idx]) if lstm else X[idx]
def epoch(nb, perm):
    m.train()
    for k in range(nb):
        idx = perm[k * B:(k + 1) * B]
        opt.zero_grad(set_to_none=True)
        lossf(m(inp(idx)), Y[idx]).backward()
        opt.step()
nbat = (N + B - 1) // B
epoch(min(warmup, nbat), torch.randperm(N))
t0 = time.perf_counter(); epoch(nbat, torch.randperm(N)); t1 = time.perf_counter()
m.eval()
with torch.no_grad():
    for k in range(min(warmup, nbat)): m(inp(torch.arange(k * B, min(N, (k + 1) * B))))
    t2 = time.perf_counter()
    for k in range(nbat): m(inp(torch.arange(k * B, min(N, (k + 1) * B))))
    t3 = time.perf_counter()
cfg = torch.__config__.show()
import re
blas = "; ".join(l.strip(" -") for l in cfg.splitlines() if re.search("Math Kernel|MKL-DNN|CPU capability", l))
print(json.dumps({"impl": "pytorch " + torch.__version__ + (" (LSTM over all 128 steps)" if lstm and full else ""), "train": N / (t1 - t0), "predict": N / (t3 - t2), "kernels": blas}))
"""

KERAS = COMMON + r"""
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(threads)
tf.config.threading.set_inter_op_parallelism_threads(1)
import keras
from keras import layers
keras.utils.set_random_seed(0)
if model_name == "lstm_text":
    m = keras.Sequential([keras.Input((T,), dtype="int32"), layers.Embedding(V, 32, mask_zero=True), layers.LSTM(64),
                          layers.Dense(C, activation="softmax")])
else:
    i = keras.Input((T,), dtype="int32")
    e = layers.Embedding(V, 32)(i)
    c = layers.Conv1D(32, 3, padding="same", activation="relu")(e)
    a = layers.MultiHeadAttention(2, 16)(c, c)
    h = layers.LayerNormalization(epsilon=1e-6)(layers.Add()([c, a]))
    f = layers.Dense(32)(layers.Dense(64, activation="relu")(h))
    h2 = layers.LayerNormalization(epsilon=1e-6)(layers.Add()([h, f]))
    o = layers.Dense(C, activation="softmax")(layers.Dropout(0.1)(layers.GlobalAveragePooling1D()(h2)))
    m = keras.Model(i, o)
m.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy")
nw = min(N, warmup * B)
m.fit(x[:nw], y[:nw], batch_size=B, epochs=1, verbose=0)
m.predict(x[:nw], batch_size=B, verbose=0)
t0 = time.perf_counter(); m.fit(x, y, batch_size=B, epochs=1, verbose=0, shuffle=True); t1 = time.perf_counter()
t2 = time.perf_counter(); m.predict(x, batch_size=B, verbose=0); t3 = time.perf_counter()
try:
    onednn = tf.sysconfig.get_build_info().get("is_onednn_enabled", "?")
except Exception:
    onednn = "?"
print(json.dumps({"impl": "keras %s + tensorflow %s" % (keras.__version__, tf.__version__), "train": N / (t1 - t0),
                  "predict": N / (t3 - t2), "kernels": "TF_ENABLE_ONEDNN_OPTS=%s" % os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on)")}))
"""


def run_json(cmd, env):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [l for l in p.stdout.splitlines() if l.strip().startswith("{")]
    if p.returncode != 0 or not lines:
        sys.stderr.write("failed: %s\n%s\n%s\n" % (" ".join(cmd[:3]), p.stdout[-2000:], p.stderr[-3000:]))
        return None, p.stderr
    return lines[-1] if cmd[0].endswith("flynn") else json.loads(lines[-1]), p.stderr


def run_flynn(a, model, B, env):
    cmd = [a.flynn, "bench", "--model", model, "--data", "synthetic", "--samples", str(a.samples), "--batch-sizes",
           str(B), "--mode", "both", "--devices", "cpu", "--threads", str(a.threads), "--warmup-steps",
           str(a.warmup), "--json", "-"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.stderr.write("flynn failed: %s\n%s\n" % (" ".join(cmd), p.stderr[-3000:]))
        return None
    j = json.loads(p.stdout)
    r = {x["mode"]: x["samples_per_s"] for x in j["results"]}
    info = [l for l in p.stderr.splitlines() if l.startswith("cpu:")]
    return {"impl": "flynn " + j["flynn_version"], "train": r["train"], "predict": r["predict"],
            "kernels": (info[0] if info else "") + "; blas core " + j["blas"]["core"]}


def loadavg():
    try:
        return open("/proc/loadavg").read().split()[0]
    except OSError:
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="lstm_text,transformer_text")
    ap.add_argument("--batch-sizes", default="32,64,128,256")
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--flynn", default=os.path.join(ROOT, "build", "flynn"))
    ap.add_argument("--torch-python", default="/opt/torchvenv/bin/torch-python")
    ap.add_argument("--tf-python", default="/opt/tfkvenv/bin/python")
    ap.add_argument("--sides", default="flynn,torch,torch-full,keras-tf",
                    help="torch-full: lstm_text's LSTM over all 128 steps without the mask (flynn's amount of work)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--omp-wait-policy", default=None,
                    help="OMP_WAIT_POLICY for every side (default: unset, each side's own default: flynn starts "
                         "passive, PyTorch's libgomp spins)")
    a = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND="tensorflow")
    env.pop("OMP_WAIT_POLICY", None)
    if a.omp_wait_policy:
        env["OMP_WAIT_POLICY"] = a.omp_wait_policy
    sides = a.sides.split(",")
    for s in sides:
        if s not in ("flynn", "torch", "torch-full", "keras-tf"):
            sys.exit("text_compare.py: unknown side %r (flynn, torch, torch-full, keras-tf)" % s)
    if ("torch" in sides or "torch-full" in sides) and not os.path.exists(a.torch_python):
        sys.exit("text_compare.py: no %s: run bench/setup_venv.sh first (or --sides flynn,keras-tf)" % a.torch_python)
    print("text_compare: %s threads, %d samples, %d rounds (best kept), OMP_WAIT_POLICY %s, load average %s at the start"
          % (a.threads, a.samples, a.rounds, a.omp_wait_policy or "unset", loadavg()), flush=True)
    results, kernels = [], {}
    for model in a.models.split(","):
        for B in [int(b) for b in a.batch_sizes.split(",")]:
            best = {}
            for rnd in range(a.rounds):
                order = sides[rnd % len(sides):] + sides[:rnd % len(sides)]
                for s in order:
                    if s == "flynn":
                        r = run_flynn(a, model, B, env)
                    elif s == "torch-full" and model != "lstm_text":
                        continue
                    else:
                        torch_side = s.startswith("torch")
                        py = a.torch_python if torch_side else a.tf_python
                        e = dict(env, TEXT_COMPARE_TORCH_LSTM="full" if s == "torch-full" else "packed")
                        r, _ = run_json([py, "-c", TORCH if torch_side else KERAS, model, str(B), str(a.samples),
                                         str(a.threads), str(a.warmup)], e)
                    if not r:
                        continue
                    kernels[s] = r["impl"] + ": " + r.get("kernels", "")
                    b = best.setdefault(s, {"train": 0, "predict": 0})
                    b["train"], b["predict"] = max(b["train"], r["train"]), max(b["predict"], r["predict"])
            row = {"model": model, "batch": B, **{s + "_" + k: v for s, d in best.items() for k, v in d.items()}}
            results.append(row)
            f = best.get("flynn")
            line = "%-17s %4d" % (model, B)
            for mode in ("train", "predict"):
                line += "  %s:" % mode
                for s in sides:
                    v = best.get(s, {}).get(mode)
                    line += " %s %7.0f" % (s, v) if v else " %s %7s" % (s, "-")
                for s in sides[1:]:
                    if f and best.get(s, {}).get(mode):
                        line += "  flynn/%s %.2fx" % (s, f[mode] / best[s][mode])
            print(line, flush=True)
    print("load average %s at the end" % loadavg())
    for s, k in kernels.items():
        print("%s: %s" % (s, k))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"threads": a.threads, "samples": a.samples, "rounds": a.rounds, "results": results,
                       "kernels": kernels}, fh, indent=1)


if __name__ == "__main__":
    main()
