#!/usr/bin/python3
"""torch_train.py — the PyTorch side of flynn's CPU benchmark: the same model
(Keras mnist_cnn or mlp), data (Fashion-MNIST, first N images), optimizer
(Adam, Keras defaults: eps 1e-7), batch size and thread count as
`flynn train`, timed over one epoch after a warm-up. Prints one JSON line.

usage: torch_train.py --model mnist_cnn --samples 20000 --batch-size 128 --threads 2 [--epochs 1]
Runs with Debian's python3-torch (/usr/bin/python3).
"""
import argparse, gzip, json, os, time

import numpy as np
import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--model", default="mnist_cnn")
p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
p.add_argument("--samples", type=int, default=20000)
p.add_argument("--batch-size", type=int, default=128)
p.add_argument("--threads", type=int, default=os.cpu_count())
p.add_argument("--epochs", type=int, default=1)
p.add_argument("--predict", action="store_true", help="time inference instead of training")
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)

def idx(path, off):
    with gzip.open(path) as f:
        return np.frombuffer(f.read(), np.uint8, offset=off)

x = idx(os.path.join(a.data, "train-images-idx3-ubyte.gz"), 16).reshape(-1, 1, 28, 28)[: a.samples]
y = idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz"), 8)[: a.samples]
x = torch.from_numpy(x.astype(np.float32) / 255.0)
y = torch.from_numpy(y.astype(np.int64))

if a.model == "mnist_cnn":
    model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5),
                          nn.Linear(128, 10))
    flops = 2 * (26 * 26 * 32 * 9 + 24 * 24 * 64 * 288 + 9216 * 128 + 128 * 10)
    # backward: weight gradients for all layers, input gradients for all but conv1
    train_flops = 3 * flops - 2 * 26 * 26 * 32 * 9
elif a.model == "mlp":
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Dropout(0.2), nn.Linear(512, 512),
                          nn.ReLU(), nn.Dropout(0.2), nn.Linear(512, 10))
    flops = 2 * (784 * 512 + 512 * 512 + 512 * 10)
    train_flops = 3 * flops - 2 * 784 * 512
else:
    raise SystemExit("unknown model " + a.model)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
loss_fn = nn.CrossEntropyLoss()
B = a.batch_size

def epoch(train):
    perm = torch.randperm(len(x))
    for s in range(0, len(x), B):
        i = perm[s:s + B]
        if train:
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[i]), y[i])
            loss.backward()
            opt.step()
        else:
            with torch.no_grad():
                model(x[s:s + B])

model.train(not a.predict)
warm = min(len(x), 8 * B)
xs, ys = x, y
x, y = xs[:warm], ys[:warm]
epoch(not a.predict)  # warm-up: allocator, oneDNN primitives
x, y = xs, ys
t = time.perf_counter()
for _ in range(a.epochs):
    epoch(not a.predict)
dt = time.perf_counter() - t
n = len(x) * a.epochs
# which libraries this process runs on: the BLAS (dense layers) and oneDNN
# (PyTorch's convolutions on the CPU), and the kernels OpenBLAS picked
libs = []
try:
    for l in open("/proc/self/maps").read().splitlines():
        path = l.split()[-1] if len(l.split()) >= 6 else ""
        if any(k in path for k in ("blas", "lapack", "libmkl", "dnnl")) and path not in libs:
            libs.append(path)
except OSError:
    pass
blas = next((l for l in libs if "openblas" in os.path.basename(l)), next((l for l in libs if "blas" in l), "unknown"))
blas_core = ""
try:
    import ctypes
    ob = ctypes.CDLL("libopenblas.so.0")
    ob.openblas_get_corename.restype = ctypes.c_char_p
    blas_core = ob.openblas_get_corename().decode()
except (OSError, AttributeError):
    pass
onednn = next((l for l in libs if "dnnl" in l), "") if torch.backends.mkldnn.is_available() else ""
print(json.dumps({"framework": "pytorch " + torch.__version__, "model": a.model, "batch_size": B,
                  "threads": torch.get_num_threads(), "samples": n, "seconds": dt,
                  "samples_per_s": n / dt, "gflops": (flops if a.predict else train_flops) * n / dt / 1e9,
                  "mode": "predict" if a.predict else "train", "blas": blas, "blas_core": blas_core,
                  "onednn": onednn}))
