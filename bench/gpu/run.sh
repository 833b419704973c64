#!/usr/bin/env bash
# bench/gpu/run.sh — flynn against PyTorch eager on the GPU machine, in one
# run: mnist_cnn on 20,000 Fashion-MNIST images resident on the GPU, Adam,
# batch sizes 32 to 1024, one timed epoch after a warm-up on each side;
# prints the flynn/PyTorch throughput ratio per batch size. PyTorch runs
# with its defaults (matmul in float32, convolutions in TF32); flynn runs
# at --precision highest for the same matmul rule and at its default (TF32).
# Runs inside tests/gpu/run.sh's environment (B = the binaries, DATA).
# usage: bench/gpu/run.sh [FLYNN] [DATA_DIR]
set -u
FLYNN=${1:-.gpu/bin/flynn}
DATA=${2:-.gpu/data/fashion-mnist}
OUT=${OUT:-/tmp/flynn-gpu-out}
mkdir -p "$OUT"
HERE=$(dirname "$0")
BS=32,64,128,256,512,1024
timeout 200 "$FLYNN" bench --model mnist_cnn --data "fashion-mnist:$DATA" --samples 20000 --batch-sizes $BS \
  --devices gpu --precision highest --json "$OUT/flynn_gpu_highest.json" >/dev/null 2>&1
timeout 200 "$FLYNN" bench --model mnist_cnn --data "fashion-mnist:$DATA" --samples 20000 --batch-sizes $BS \
  --devices gpu --json "$OUT/flynn_gpu_high.json" >/dev/null 2>&1
timeout 200 python3 "$HERE/torch_gpu.py" --data "$DATA" --samples 20000 --batch-sizes $BS > "$OUT/torch_gpu.jsonl"
python3 - "$OUT/flynn_gpu_highest.json" "$OUT/flynn_gpu_high.json" "$OUT/torch_gpu.jsonl" <<'PY'
import json, sys
def flynn(path):
    try:
        d = json.load(open(path))
        return {r["batch_size"]: r["samples_per_s"] for r in d["results"] if r["device"] == "gpu" and r["mode"] == "train"}
    except Exception as e:
        print(f"(no flynn results in {path}: {e})")
        return {}
fh, ft = flynn(sys.argv[1]), flynn(sys.argv[2])
torch = {}
for line in open(sys.argv[3]):
    try:
        r = json.loads(line); torch[r["batch_size"]] = r["samples_per_s"]; dev = r["device"]
    except Exception:
        pass
print(f"{'batch':>6} {'PyTorch eager':>14} {'flynn fp32':>11} {'ratio':>6} {'flynn TF32':>11} {'ratio':>6}")
for b in sorted(set(torch) | set(fh) | set(ft)):
    t, a, c = torch.get(b), fh.get(b), ft.get(b)
    f = lambda v: f"{v:.0f}" if v else "-"
    r = lambda v: f"{v / t:.2f}x" if v and t else "-"
    print(f"{b:>6} {f(t):>14} {f(a):>11} {r(a):>6} {f(c):>11} {r(c):>6}")
PY
