#!/usr/bin/env python3
"""torch_gpu.py — the PyTorch side of flynn's GPU benchmark: mnist_cnn (or
mlp) trained in eager mode on one GPU with the same data (Fashion-MNIST,
first N images, resident on the GPU), optimizer (Adam, Keras defaults:
eps 1e-7), batch sizes and loss as `flynn bench --devices gpu`. One warm-up
epoch, then one timed epoch per batch size (torch.cuda.synchronize around
it). Prints one JSON line per batch size. With --deadline (a time.time()
value) it starts no batch size it cannot finish by then, judging by how
long the previous one took (a larger batch size takes no longer).

usage: torch_gpu.py --data DIR [--model mnist_cnn] [--samples 20000] [--batch-sizes 32,...,1024]
                    [--tf32 0|1] (matmul TF32; PyTorch's default is 0, convolutions use TF32 by default)
                    [--deadline UNIX_TIME]
"""
import argparse, gzip, json, os, sys, time

import numpy as np
import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--model", default="mnist_cnn")
p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
p.add_argument("--samples", type=int, default=20000)
p.add_argument("--batch-sizes", default="32,64,128,256,512,1024")
p.add_argument("--tf32", type=int, default=0)
p.add_argument("--deadline", type=float, default=0)
a = p.parse_args()
torch.backends.cuda.matmul.allow_tf32 = bool(a.tf32)
dev = torch.device("cuda")
torch.manual_seed(0)

def idx(name, off):
    with gzip.open(os.path.join(a.data, name)) as f:
        return np.frombuffer(f.read(), np.uint8, offset=off)

x = idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)[: a.samples]
y = idx("train-labels-idx1-ubyte.gz", 8)[: a.samples]
x = torch.from_numpy(x.astype(np.float32) / 255.0).to(dev)
y = torch.from_numpy(y.astype(np.int64)).to(dev)

def make():
    if a.model == "mnist_cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5),
                             nn.Linear(128, 10)).to(dev)
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Dropout(0.2), nn.Linear(512, 512), nn.ReLU(),
                         nn.Dropout(0.2), nn.Linear(512, 10)).to(dev)

loss_fn = nn.CrossEntropyLoss()
last = 0.0
for B in [int(b) for b in a.batch_sizes.split(",")]:
    if a.deadline and time.time() + 1.2 * last > a.deadline:
        print(f"torch_gpu.py: stopped before batch {B}: {a.deadline - time.time():.0f}s left, the last batch size "
              f"took {last:.0f}s", file=sys.stderr)
        break
    t_start = time.perf_counter()
    model = make()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    def epoch():
        perm = torch.randperm(len(x), device=dev)
        for s in range(0, len(x), B):
            i = perm[s:s + B]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[i]), y[i])
            loss.backward()
            opt.step()
    epoch()  # warm-up: cuDNN, allocator
    torch.cuda.synchronize()
    t = time.perf_counter()
    epoch()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    print(json.dumps({"framework": "pytorch " + torch.__version__, "device": torch.cuda.get_device_name(0),
                      "model": a.model, "batch_size": B, "samples": len(x), "seconds": dt,
                      "samples_per_s": len(x) / dt, "matmul_tf32": bool(a.tf32),
                      "cudnn": torch.backends.cudnn.version()}), flush=True)
    last = time.perf_counter() - t_start
