#!/usr/bin/env python3
"""suite.py — flynn's CPU speed suite against the peers users install, side by side, in one run.

Models (bench/suite_models.py makes each once with Keras, as a .keras file and
the arrays it trains on): mnist_cnn, mlp, resnet20, mobilenetv2_96,
lstm_text, transformer_text. Sides:
  flynn     `flynn bench --model M.keras --data M_x.npy,M_y.npy` (the file
            loaded as a user's model; nothing tuned for it);
  torch     PyTorch 2 from PyPI (bench/setup_venv.sh): the same layers in
            torch.nn (TORCH below), Adam(1e-3, eps 1e-7), cross-entropy; the
            masked LSTM over packed sequences, as a PyTorch user skips padding;
  keras-tf  Keras 3 on TensorFlow 2.21 CPU (/opt/tfkvenv) loading the same
            .keras file, fit and predict as a Keras user calls them.
Every point (model, batch size, mode, side) is its own process, so that its
peak resident memory (wait4's ru_maxrss) is its own: training is one epoch
over the samples after a few warm-up steps, predict one pass; batch 1 is
timed in predict only (a C program embedding a model calls that). The sides
alternate (rotated each round) and each point keeps its best round. The
table gives samples/s per side, flynn's ratio to the best peer, flynn's
GFLOP/s and its share of the sgemm ceiling (bench/sgemm_peak.c), peak
memory per side, and the cores each side kept busy over the timed part (its
process's CPU seconds over the wall seconds); the header says which BLAS and
kernels each side used.

usage: bench/suite.py [--models LIST] [--batch-sizes 1,32,128,512] [--rounds 2] [--threads 2]
                      [--samples N] [--work DIR] [--flynn build/flynn] [--sides flynn,torch,keras-tf]
                      [--json FILE] [--svg FILE] [--busy] [--isa avx2]
       bench/suite.py --from-json FILE --svg OUT.svg   (the chart of an earlier run)
--busy runs one CPU-bound process (a spinning loop) beside every measurement:
the issue's "behave on a busy machine" case. Compare each side's cores there
with its quiet ones: beside one such process a side whose threads sleep while
they wait gets about one core on a 2-core machine, whatever its thread count
(docs/performance.md, "What a busy machine leaves").
--isa avx2 holds every side to AVX2 and FMA on a CPU with AVX-512: what AMD
before Zen 4 and Intel's client cores run, compared on one machine (flynn
FLYNN_CPU_KERNELS=avx2; oneDNN, under PyTorch and TensorFlow,
ONEDNN_MAX_CPU_ISA=AVX2; PyTorch ATEN_CPU_CAPABILITY=avx2 and
MKL_ENABLE_INSTRUCTIONS=AVX2; OpenBLAS, the ceiling's too, Haswell).
Models users write, which nobody tuned flynn for (bench/user_models.py:
cifar_vgg, tab_bn, bigru_text, sepconv64, har_cnn1d, unet_small, conv_ae,
lstm_reg, fasttext, gelu_mlp, and keras.applications at 64x64: resnet50_64,
effb0_64, densenet121_64, mobilenet_64), run the same way with --sides
flynn,keras-tf.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = ["mnist_cnn", "mlp", "resnet20", "mobilenetv2_96", "lstm_text", "transformer_text"]
# samples per timed point (training epoch and predict pass); batch 1 uses a quarter
SAMPLES = {"mnist_cnn": 4096, "mlp": 4096, "resnet20": 2048, "mobilenetv2_96": 1024, "lstm_text": 4096,
           "transformer_text": 4096}

PEER = r"""
import json, os, sys, time
import numpy as np
side, name, mode, B, N, threads, warmup, work = sys.argv[1:9]
B, N, threads, warmup = int(B), int(N), int(threads), int(warmup)
x = np.load(os.path.join(work, name + "_x.npy"))[:N]
y = np.load(os.path.join(work, name + "_y.npy"))[:N]
N = len(x)
nw = min(N, max(warmup, 1) * B)
"""

KERAS = PEER + r"""
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(threads)
tf.config.threading.set_inter_op_parallelism_threads(1)
import keras
keras.utils.set_random_seed(0)
m = keras.models.load_model(os.path.join(work, name + ".keras"))
if mode == "train":
    m.fit(x[:nw], y[:nw], batch_size=B, epochs=1, verbose=0)
    c0, t0 = time.process_time(), time.perf_counter()
    m.fit(x, y, batch_size=B, epochs=1, verbose=0, shuffle=True)
else:
    m.predict(x[:nw], batch_size=B, verbose=0)
    c0, t0 = time.process_time(), time.perf_counter()
    m.predict(x, batch_size=B, verbose=0)
t, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"impl": "keras %s + tensorflow %s" % (keras.__version__, tf.__version__), "sps": N / t,
                  "cores": cpu / t,
                  "kernels": "oneDNN %s%s" % (os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on)"),
                                             ", ONEDNN_MAX_CPU_ISA=" + os.environ["ONEDNN_MAX_CPU_ISA"]
                                             if "ONEDNN_MAX_CPU_ISA" in os.environ else "")}))
"""

TORCH = PEER + r"""
import torch, torch.nn as nn, torch.nn.functional as F
torch.set_num_threads(threads)
torch.manual_seed(0)

def same_pad(k, s, size):  # Keras "same": the odd pixel after
    o = -(-size // s); total = max((o - 1) * s + k - size, 0)
    return (total // 2, total - total // 2)

class ConvBN(nn.Sequential):
    def __init__(s, cin, cout, k, stride, size, groups=1, act=None):
        pt = same_pad(k, stride, size)
        layers = [nn.ZeroPad2d((pt[0], pt[1], pt[0], pt[1])), nn.Conv2d(cin, cout, k, stride, 0, groups=groups, bias=False),
                  nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01)]
        if act: layers.append(act())
        super().__init__(*layers)

class Block(nn.Module):  # ResNet basic block, option B shortcut
    def __init__(s, cin, cout, stride, size):
        super().__init__()
        s.a = ConvBN(cin, cout, 3, stride, size, act=nn.ReLU)
        s.b = ConvBN(cout, cout, 3, 1, -(-size // stride))
        s.short = ConvBN(cin, cout, 1, stride, size) if stride != 1 or cin != cout else nn.Identity()
    def forward(s, x):
        return F.relu(s.short(x) + s.b(s.a(x)))

class ResNet20(nn.Module):
    def __init__(s):
        super().__init__()
        s.stem = ConvBN(3, 16, 3, 1, 32, act=nn.ReLU)
        blocks, cin, size = [], 16, 32
        for stage, c in enumerate((16, 32, 64)):
            for b in range(3):
                st = 2 if stage > 0 and b == 0 else 1
                blocks.append(Block(cin, c, st, size)); cin = c; size = -(-size // st)
        s.blocks = nn.Sequential(*blocks); s.fc = nn.Linear(64, 10)
    def forward(s, x):
        return s.fc(s.blocks(s.stem(x)).mean((2, 3)))

class Inverted(nn.Module):  # MobileNetV2 inverted residual, as keras.applications builds it
    def __init__(s, cin, cout, stride, expand, size):
        super().__init__()
        mid = cin * expand
        s.expand = ConvBN(cin, mid, 1, 1, size, act=nn.ReLU6) if expand != 1 else nn.Identity()
        s.dw = ConvBN(mid, mid, 3, stride, size, groups=mid, act=nn.ReLU6)
        s.proj = ConvBN(mid, cout, 1, 1, -(-size // stride))
        s.res = stride == 1 and cin == cout
    def forward(s, x):
        y = s.proj(s.dw(s.expand(x)))
        return x + y if s.res else y

class MobileNetV2(nn.Module):
    def __init__(s, size=96):
        super().__init__()
        s.stem = ConvBN(3, 32, 3, 2, size, act=nn.ReLU6); size = -(-size // 2)
        layers, cin = [], 32
        for t, c, n, st in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                            (6, 320, 1, 1)]:
            for i in range(n):
                stride = st if i == 0 else 1
                layers.append(Inverted(cin, c, stride, t, size)); cin = c; size = -(-size // stride)
        s.blocks = nn.Sequential(*layers)
        s.head = ConvBN(320, 1280, 1, 1, size, act=nn.ReLU6); s.fc = nn.Linear(1280, 10)
    def forward(s, x):
        return s.fc(s.head(s.blocks(s.stem(x))).mean((2, 3)))

class LSTMText(nn.Module):
    def __init__(s):
        super().__init__(); s.emb = nn.Embedding(512, 32); s.lstm = nn.LSTM(32, 64, batch_first=True); s.out = nn.Linear(64, 5)
    def forward(s, xl):
        xs, lens = xl
        p = nn.utils.rnn.pack_padded_sequence(s.emb(xs), lens, batch_first=True, enforce_sorted=False)
        _, (h, _) = s.lstm(p)
        return s.out(h[0])

class TransformerText(nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = nn.Embedding(512, 32); s.conv = nn.Conv1d(32, 32, 3, padding=1)
        s.att = nn.MultiheadAttention(32, 2, batch_first=True)
        s.ln1 = nn.LayerNorm(32, eps=1e-6); s.ln2 = nn.LayerNorm(32, eps=1e-6)
        s.f1 = nn.Linear(32, 64); s.f2 = nn.Linear(64, 32); s.drop = nn.Dropout(0.1); s.out = nn.Linear(32, 5)
    def forward(s, xs):
        c = torch.relu(s.conv(s.emb(xs).transpose(1, 2))).transpose(1, 2)
        a, _ = s.att(c, c, c, need_weights=False)
        h = s.ln1(c + a)
        h2 = s.ln2(h + s.f2(torch.relu(s.f1(h))))
        return s.out(s.drop(h2.mean(1)))

if name == "mnist_cnn":
    m = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.25),
                      nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10))
elif name == "mlp":
    m = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Dropout(0.2), nn.Linear(512, 512), nn.ReLU(),
                      nn.Dropout(0.2), nn.Linear(512, 10))
elif name == "resnet20":
    m = ResNet20()
elif name == "mobilenetv2_96":
    m = MobileNetV2(96)
elif name == "lstm_text":
    m = LSTMText()
else:
    m = TransformerText()
text = name.endswith("_text")
if text:
    X = torch.from_numpy(x).long()
    if name == "lstm_text":  # the valid tokens moved to the front, and their counts
        lens = (x != 0).sum(1)
        xf = np.zeros_like(x)
        for i in range(N):
            xf[i, :lens[i]] = x[i, x.shape[1] - lens[i]:]
        X, LENS = torch.from_numpy(xf).long(), torch.from_numpy(lens).long()
else:
    X = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))  # NCHW, PyTorch's layout
Y = torch.from_numpy(y.astype(np.int64))
def inp(idx):
    return (X[idx], LENS[idx]) if name == "lstm_text" else X[idx]
opt = torch.optim.Adam(m.parameters(), lr=1e-3, eps=1e-7)
lossf = nn.CrossEntropyLoss()
def epoch(nb, perm):
    m.train()
    for k in range(nb):
        idx = perm[k * B:(k + 1) * B]
        opt.zero_grad(set_to_none=True)
        lossf(m(inp(idx)), Y[idx]).backward()
        opt.step()
nbat = (N + B - 1) // B
if mode == "train":
    epoch(min(max(warmup, 1), nbat), torch.randperm(N))
    c0, t0 = time.process_time(), time.perf_counter()
    epoch(nbat, torch.randperm(N))
else:
    m.eval()
    with torch.inference_mode():
        for k in range(min(max(warmup, 1), nbat)): m(inp(torch.arange(k * B, min(N, (k + 1) * B))))
        c0, t0 = time.process_time(), time.perf_counter()
        for k in range(nbat): m(inp(torch.arange(k * B, min(N, (k + 1) * B))))
t, cpu = time.perf_counter() - t0, time.process_time() - c0
import re
cfg = torch.__config__.show()
kern = "; ".join(l.strip(" -") for l in cfg.splitlines() if re.search("Math Kernel|MKL-DNN|CPU capability", l))
print(json.dumps({"impl": "pytorch " + torch.__version__, "sps": N / t, "cores": cpu / t, "kernels": kern}))
"""


def measured(cmd, env):
    """cmd run under this script's own wait4, for the child's own peak resident memory."""
    pid = os.fork()
    if pid == 0:
        try:
            os.environ.clear()
            os.environ.update(env)
            fd = os.open(os.devnull, os.O_RDONLY)
            os.dup2(fd, 0)
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    _, status, ru = os.wait4(pid, 0)
    return os.waitstatus_to_exitcode(status), ru.ru_maxrss / 1024.0


def point(a, side, model, mode, B, n, env):
    outf = os.path.join(a.work, ".out.txt")
    errf = os.path.join(a.work, ".err.txt")
    if side == "flynn":
        inner = [a.flynn, "bench", "--model", os.path.join(a.work, model + ".keras"), "--data",
                 "%s,%s" % (os.path.join(a.work, model + "_x.npy"), os.path.join(a.work, model + "_y.npy")),
                 "--samples", str(n), "--batch-sizes", str(B), "--mode", mode, "--devices", "cpu", "--threads",
                 str(a.threads), "--warmup-steps", str(a.warmup), "--json", "-"]
    else:
        py = a.torch_python if side == "torch" else a.tf_python
        inner = [py, "-c", TORCH if side == "torch" else KERAS, side, model, mode, str(B), str(n), str(a.threads),
                 str(a.warmup), a.work]
    cmd = ["/bin/sh", "-c", 'exec "$@" >"%s" 2>"%s"' % (outf, errf), "sh"] + inner
    rc, rss = measured(cmd, env)
    out, err = open(outf).read(), open(errf).read()
    if rc != 0:
        sys.stderr.write("%s %s %s batch %d failed (exit %d):\n%s\n" % (side, model, mode, B, rc, err[-3000:]))
        return None
    if side == "flynn":
        j = json.loads(out)
        r = j["results"][0]
        info = [l for l in err.splitlines() if l.startswith("cpu:")]
        return {"sps": r["samples_per_s"], "gflops": r["gflops"], "rss": rss, "impl": "flynn " + j["flynn_version"],
                "cores": r.get("cpu_cores"), "threads_in_use": r.get("threads_in_use"),
                "kernels": (info[0] if info else "") + "; blas core " + j["blas"]["core"],
                "flops": j["flops_per_sample"][mode],
                # training's buffers, or predict's (values only, reused by lifetime)
                "buffer_bytes_per_sample": j["memory"]["buffer_bytes_per_sample" if mode == "train"
                                                       else "predict_buffer_bytes_per_sample"]}
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if not lines:
        sys.stderr.write("%s %s: no result:\n%s\n" % (side, model, err[-2000:]))
        return None
    r = json.loads(lines[-1])
    r["rss"] = rss
    return r


def flynn_blas_core(a, env):
    """The OpenBLAS kernels the flynn command runs under env: where OpenBLAS alone falls back to older ones
    than the CPU runs (an OpenBLAS that does not know the CPU picks Prescott's SSE3) and env sets no
    OPENBLAS_CORETYPE, the command sets it to the CPU's best before it starts (src/cli/omp_setup.c). Asked of
    the command itself (`flynn bench --json`, one small step), so the ceiling cannot drift from what flynn
    does. None where it cannot say."""
    try:
        p = subprocess.run([a.flynn, "bench", "--samples", "32", "--batch-sizes", "32", "--devices", "cpu",
                            "--warmup-steps", "0", "--json", "-"], capture_output=True, text=True, env=env,
                           check=True, timeout=300)
        return json.loads(p.stdout)["blas"]["core"] or None
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired, ValueError, KeyError) as e:
        sys.stderr.write("flynn's OpenBLAS kernels not known (%s): the ceiling runs as the environment says\n" % e)
    return None


def sgemm_ceiling(a, env):
    """GFLOP/s of OpenBLAS's sgemm at 2048^3 on all the threads (bench/sgemm_peak.c), with the kernels the
    flynn command runs (flynn_blas_core): the ceiling that flynn's GFLOP/s are a share of. (It ran as the
    environment configured OpenBLAS, and on a Xeon whose OpenBLAS fell back to Prescott it read 63 GFLOP/s
    against the 311 flynn itself reached at SkylakeX's, shares of 172-484%: issue 43.)"""
    exe = os.path.join(a.work, "sgemm_peak")
    core = a.flynn_core = flynn_blas_core(a, env)  # (kept for --ceiling-only's line)
    if core and not env.get("OPENBLAS_CORETYPE"):
        env = dict(env, OPENBLAS_CORETYPE=core)
    try:
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "openblas"], capture_output=True, text=True,
                               check=True).stdout.split()
        subprocess.run(["cc", "-O2", os.path.join(HERE, "sgemm_peak.c"), "-o", exe] + flags, check=True,
                       capture_output=True)
        p = subprocess.run([exe, "--threads", str(a.threads), "--json"], capture_output=True, text=True, env=env,
                           check=True)
        j = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])
        sq = [r["gflops"] for r in j["results"] if r["m"] == 2048 and r["threads"] == a.threads]
        return (max(sq) if sq else None), j.get("blas_core", "?")
    except (OSError, subprocess.CalledProcessError, ValueError, IndexError) as e:
        sys.stderr.write("sgemm ceiling not measured: %s\n" % e)
    return None, "?"


def write_svg(path, d):
    """The suite as a chart: flynn's samples/s over the best peer's, one bar per model and batch size, a
    panel for training and one for predict, with the 1x and the issue's 1.5x lines."""
    rows = d["results"]
    models = []
    for r in rows:
        if r["model"] not in models:
            models.append(r["model"])
    allb = sorted({r["batch"] for r in rows})
    colors = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1"]
    W, X0, PH, top = 900, 70, 300, 70
    modes = [m for m in ("train", "predict") if any(r["mode"] == m for r in rows)]
    H = top + len(modes) * (PH + 90) + 40
    esc = lambda t: str(t).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
           'font-family="DejaVu Sans, sans-serif">' % (W, H, W, H), '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="28" text-anchor="middle" font-size="18" font-weight="bold">flynn against the best peer '
           '(PyTorch 2 or Keras 3 + TensorFlow), samples/s ratio</text>' % (W // 2),
           '<text x="%d" y="48" text-anchor="middle" font-size="12" fill="#555">%s threads, best of %s rounds, %s%s'
           '</text>' % (W // 2, d.get("threads"), d.get("rounds"), esc(d.get("date", "")),
                        ", one CPU-bound process beside" if d.get("busy") else "")]
    for k, mode in enumerate(modes):
        y0 = top + k * (PH + 90)
        vals = [r.get("ratio_best_peer") for r in rows if r["mode"] == mode and r.get("ratio_best_peer")]
        vmax = max([2.0] + vals) * 1.1
        y = lambda v: y0 + 20 + PH * (1 - v / vmax)
        out.append('<text x="%d" y="%d" text-anchor="middle" font-size="15" font-weight="bold">%s</text>'
                   % (W // 2, y0 + 10, "training" if mode == "train" else "predict"))
        step = 0.5 if vmax <= 6 else 1.0 if vmax <= 12 else 2.0
        v = 0.0
        while v <= vmax:
            out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (X0, W - 20, y(v), y(v)))
            out.append('<text x="%d" y="%.1f" text-anchor="end" font-size="11" fill="#444">%.1fx</text>'
                       % (X0 - 6, y(v) + 4, v))
            v += step
        for ref, col, label in ((1.0, "#999", "1x"), (1.5, "#c33", "1.5x")):
            out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="6 4"/>'
                       % (X0, W - 20, y(ref), y(ref), col))
        batches = sorted({r["batch"] for r in rows if r["mode"] == mode})
        gw = (W - 20 - X0) / max(1, len(models))
        bw = gw * 0.8 / max(1, len(batches))
        for mi, m in enumerate(models):
            gx = X0 + mi * gw + gw * 0.1
            out.append('<text x="%.1f" y="%d" text-anchor="middle" font-size="12">%s</text>'
                       % (X0 + mi * gw + gw / 2, y0 + PH + 58, esc(m)))
            for bi, b in enumerate(batches):
                r = next((r for r in rows if r["model"] == m and r["batch"] == b and r["mode"] == mode), None)
                x = gx + bi * bw
                if not r:
                    continue
                if not r.get("ratio_best_peer"):  # flynn (or every peer) gave no result: say so
                    out.append('<text x="%.1f" y="%.1f" text-anchor="middle" font-size="9" fill="#c33" '
                               'transform="rotate(-90 %.1f %.1f)">%s</text>' % (x + bw / 2, y(0) - 6, x + bw / 2,
                               y(0) - 6, "flynn failed" if "flynn" not in r else "no peer"))
                    out.append('<text x="%.1f" y="%.1f" text-anchor="middle" font-size="9" fill="#555">%d</text>'
                               % (x + bw / 2 - 1, y(0) + 12, b))
                    continue
                v = r["ratio_best_peer"]
                out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>'
                           % (x, y(v), bw - 2, y(0) - y(v), colors[allb.index(b) % len(colors)]))
                out.append('<text x="%.1f" y="%.1f" text-anchor="middle" font-size="9">%.1f</text>'
                           % (x + bw / 2 - 1, y(v) - 3, v))
                out.append('<text x="%.1f" y="%.1f" text-anchor="middle" font-size="9" fill="#555">%d</text>'
                           % (x + bw / 2 - 1, y(0) + 12, b))
        out.append('<text x="%d" y="%d" text-anchor="middle" font-size="11" fill="#555">batch size under each bar; '
                   'dashed: 1x and 1.5x</text>' % (W // 2, y0 + PH + 76))
    out.append("</svg>")
    with open(path, "w") as fh:
        fh.write("\n".join(out) + "\n")


def loadavg():
    try:
        return open("/proc/loadavg").read().split()[0]
    except OSError:
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batch-sizes", default="1,32,128,512")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--samples", type=int, default=0, help="samples per point (default: per model, see SAMPLES)")
    ap.add_argument("--work", default="/tmp/flynn-suite", help="where the models and arrays are made (kept)")
    ap.add_argument("--flynn", default=os.path.join(ROOT, "build", "flynn"))
    ap.add_argument("--torch-python", default="/opt/torchvenv/bin/torch-python")
    ap.add_argument("--tf-python", default="/opt/tfkvenv/bin/python")
    ap.add_argument("--sides", default="flynn,torch,keras-tf")
    ap.add_argument("--json", default=None)
    ap.add_argument("--busy", action="store_true", help="one CPU-bound process runs beside every measurement")
    ap.add_argument("--isa", choices=("auto", "avx2"), default="auto",
                    help="avx2: hold every side to AVX2 on a CPU with AVX-512 (flynn's FLYNN_CPU_KERNELS, oneDNN's "
                         "ONEDNN_MAX_CPU_ISA, PyTorch's ATEN_CPU_CAPABILITY and MKL_ENABLE_INSTRUCTIONS, "
                         "OPENBLAS_CORETYPE=Haswell), what a CPU without AVX-512 runs")
    ap.add_argument("--svg", default=None, help="also draw flynn's ratio to the best peer per point as an SVG chart")
    ap.add_argument("--from-json", default=None, help="only draw --svg from an earlier run's --json FILE")
    ap.add_argument("--ceiling-only", action="store_true",
                    help="only measure the sgemm ceiling and say which OpenBLAS kernels it ran (and flynn runs)")
    a = ap.parse_args()
    if a.from_json:
        if not a.svg:
            sys.exit("suite.py: --from-json draws a chart: give --svg FILE")
        with open(a.from_json) as fh:
            write_svg(a.svg, json.load(fh))
        return
    sides = a.sides.split(",")
    models = a.models.split(",")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND="tensorflow",
               CUDA_VISIBLE_DEVICES="")
    env.pop("OMP_WAIT_POLICY", None)
    if a.isa == "avx2":
        env.update(FLYNN_CPU_KERNELS="avx2", ONEDNN_MAX_CPU_ISA="AVX2", DNNL_MAX_CPU_ISA="AVX2",
                   ATEN_CPU_CAPABILITY="avx2", MKL_ENABLE_INSTRUCTIONS="AVX2", OPENBLAS_CORETYPE="Haswell")
    os.makedirs(a.work, exist_ok=True)
    if a.ceiling_only:
        ceiling, core = sgemm_ceiling(a, env)
        print("sgemm ceiling %s GFLOP/s on %d threads (OpenBLAS core %s; the flynn command runs %s)"
              % ("%.0f" % ceiling if ceiling else "?", a.threads, core, a.flynn_core or "?"))
        sys.exit(0 if ceiling else 1)
    missing = [m for m in models if not os.path.exists(os.path.join(a.work, m + ".keras"))]
    suite = [m for m in missing if m in MODELS]
    user = [m for m in missing if m not in MODELS]  # bench/user_models.py's (flynn and Keras-TF only)
    for script, names in (("suite_models.py", suite), ("user_models.py", user)):
        if names:
            print("making %s with Keras (bench/%s)" % (",".join(names), script), flush=True)
            subprocess.run([a.tf_python, os.path.join(HERE, script), a.work, "--models", ",".join(names)],
                           check=True, env=env, stdout=subprocess.DEVNULL)
    if "torch" in sides and any(m not in MODELS for m in models):
        sys.exit("suite.py: PyTorch has no port of %s (bench/user_models.py): use --sides flynn,keras-tf"
                 % ",".join(m for m in models if m not in MODELS))
    ceiling, core = sgemm_ceiling(a, env)
    busy = None
    if a.busy:
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    print("suite: %d threads, %d rounds (best kept), warm-up %d steps, sgemm ceiling %s GFLOP/s (OpenBLAS core %s), "
          "load %s%s%s" % (a.threads, a.rounds, a.warmup, "%.0f" % ceiling if ceiling else "?", core, loadavg(),
             ", with one CPU-bound process beside" if busy else "",
             ", every side held to AVX2 (--isa avx2)" if a.isa == "avx2" else ""), flush=True)
    results, kernels = [], {}
    try:
        for model in models:
            for B in [int(b) for b in a.batch_sizes.split(",")]:
                for mode in (("predict",) if B == 1 else ("train", "predict")):
                    n = a.samples or SAMPLES.get(model, 2048)
                    if B == 1:
                        n = max(64, n // 16)
                    best = {}
                    for rnd in range(a.rounds):
                        order = sides[rnd % len(sides):] + sides[:rnd % len(sides)]
                        for s in order:
                            r = point(a, s, model, mode, B, n, env)
                            if not r:
                                continue
                            kernels[s] = r["impl"] + ": " + r.get("kernels", "")
                            b = best.get(s)
                            if not b or r["sps"] > b["sps"]:
                                best[s] = r
                    row = {"model": model, "batch": B, "mode": mode, "samples": n,
                           **{s: {k: v for k, v in r.items() if k not in ("impl", "kernels")} for s, r in best.items()}}
                    f = best.get("flynn")
                    peers = [best[s]["sps"] for s in sides if s != "flynn" and s in best]
                    line = "%-16s %5d %-7s" % (model, B, mode)
                    for s in sides:
                        line += " %s %8.1f" % (s, best[s]["sps"]) if s in best else " %s %8s" % (s, "-")
                    if f and peers:
                        row["ratio_best_peer"] = f["sps"] / max(peers)
                        line += "  flynn/best %.2fx" % row["ratio_best_peer"]
                    if f:
                        line += "  %.1f GFLOP/s" % f["gflops"]
                        if ceiling:
                            row["ceiling_share"] = f["gflops"] / ceiling
                            line += " (%.0f%%)" % (100 * f["gflops"] / ceiling)
                    line += "  peak MB:" + "".join(" %s %.0f" % (s, best[s]["rss"]) for s in sides if s in best)
                    line += "  cores:" + "".join(" %s %.2f" % (s, best[s]["cores"]) for s in sides
                                                 if s in best and best[s].get("cores") is not None)
                    if f:
                        line += "  flynn buffers %.1f KB/sample (%s)" % (f["buffer_bytes_per_sample"] / 1e3, mode)
                    print(line, flush=True)
                    results.append(row)
    finally:
        if busy:
            busy.kill()
    print("load %s at the end" % loadavg())
    for s, k in kernels.items():
        print("%s: %s" % (s, k))
    d = {"threads": a.threads, "rounds": a.rounds, "ceiling_gflops": ceiling, "busy": a.busy, "isa": a.isa,
         "results": results, "kernels": kernels, "date": time.strftime("%Y-%m-%d %H:%M")}
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(d, fh, indent=1)
    if a.svg:
        write_svg(a.svg, d)


if __name__ == "__main__":
    main()
