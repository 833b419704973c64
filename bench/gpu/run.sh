#!/usr/bin/env bash
# bench/gpu/run.sh — flynn against PyTorch eager on the GPU machine, in one
# run: mnist_cnn on 20,000 Fashion-MNIST images resident on the GPU, Adam,
# batch sizes 32 to 1024, one timed epoch after a warm-up on each side;
# prints the flynn/PyTorch throughput ratio per batch size. PyTorch runs
# with its defaults (matmul in float32, convolutions in TF32); flynn runs
# at --precision highest for the same matmul rule and at its default (TF32).
#
# It keeps to a deadline: PyTorch (one process, all batch sizes) gets 40% of
# it and stops itself before a batch size it cannot finish in time; flynn
# then runs each batch size PyTorch measured as its own `flynn bench`, and
# no new one starts when less time is left than the last one took. The
# table is printed a row at a time, so a short deadline gives a shorter
# table, not a broken one. The results go to $OUT/vs_torch.json (one file).
#
# Called by tests/gpu/run.sh (B = the binaries, DATA), or by hand:
# usage: bench/gpu/run.sh [FLYNN] [DATA_DIR] [DEADLINE_SECONDS]
#   DEADLINE_SECONDS: default $BENCH_DEADLINE, else 600
#   FLYNN_LIB_DIR: a folder put on LD_LIBRARY_PATH for flynn's commands only
#                  (the bundle's libraries; PyTorch must not load them)
set -u
FLYNN=${1:-/tmp/flynn-gpu/bin/flynn}
# the bundle as tests/gpu/run.sh unpacks it: its libraries go with it
[ -z "${1:-}" ] && [ -z "${FLYNN_LIB_DIR+set}" ] && FLYNN_LIB_DIR=/tmp/flynn-gpu/lib
DATA=${2:-.gpu/data/fashion-mnist}
DEADLINE=${3:-${BENCH_DEADLINE:-600}}
OUT=${OUT:-/tmp/flynn-gpu-out}
HERE=$(cd "$(dirname "$0")" && pwd)
BS="32 64 128 256 512 1024"
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
T0=$(date +%s)
T_END=$((T0 + DEADLINE))
FL=(env)
[ -n "${FLYNN_LIB_DIR:-}" ] && FL=(env "LD_LIBRARY_PATH=$FLYNN_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")

# PyTorch: 40% of the time, one JSON line per batch size it finished
torch_end=$((T0 + DEADLINE * 40 / 100))
timeout -k 5 $((torch_end - T0 + 10)) python3 "$HERE/torch_gpu.py" --data "$DATA" --samples 20000 \
  --batch-sizes "${BS// /,}" --deadline "$torch_end" > "$WORK/torch.jsonl" 2> "$WORK/torch.err"
torch_rc=$?
grep -v '^\s*$' "$WORK/torch.err" | tail -3
measured=$(python3 -c 'import json, sys
for l in open(sys.argv[1]):
    try: print(json.loads(l)["batch_size"])
    except Exception: pass' "$WORK/torch.jsonl" | tr '\n' ' ')
[ -n "$measured" ] || { echo "(PyTorch measured nothing, exit $torch_rc: flynn alone)"; measured=$BS; }

row() {
  python3 - "$WORK" "$@" <<'PY'
import json, os, sys
work, b = sys.argv[1], sys.argv[2]
def flynn(name):
    try:
        d = json.load(open(os.path.join(work, f"{name}_{b}.json")))
        return next(r["samples_per_s"] for r in d["results"] if r["device"] == "gpu" and r["mode"] == "train")
    except Exception:
        return None
t = None
for l in open(os.path.join(work, "torch.jsonl")):
    try:
        r = json.loads(l)
        if str(r["batch_size"]) == b: t = r["samples_per_s"]
    except Exception:
        pass
if b == "header":
    print(f"{'batch':>6} {'PyTorch eager':>14} {'flynn fp32':>11} {'ratio':>6} {'flynn TF32':>11} {'ratio':>6}")
else:
    a, c = flynn("highest"), flynn("high")
    f = lambda v: f"{v:.0f}" if v else "-"
    r = lambda v: f"{v / t:.2f}x" if v and t else "-"
    print(f"{b:>6} {f(t):>14} {f(a):>11} {r(a):>6} {f(c):>11} {r(c):>6}", flush=True)
PY
}

row header
last=0 prev="" stopped=""
for b in $measured; do
  left=$((T_END - $(date +%s)))
  if [ "$left" -lt $((last * 12 / 10 + 5)) ]; then
    stopped="stopped before batch $b: ${left}s left, batch $prev took ${last}s"
    break
  fi
  t=$(date +%s)
  for p in highest high; do
    left=$((T_END - $(date +%s)))
    [ "$left" -gt 5 ] || break
    timeout -k 5 "$left" "${FL[@]}" "$FLYNN" bench --model mnist_cnn --data "fashion-mnist:$DATA" --samples 20000 \
      --batch-sizes "$b" --devices gpu --precision "$p" --json "$WORK/${p}_$b.json" > "$WORK/flynn.log" 2>&1 ||
      echo "(flynn bench --batch-sizes $b --precision $p: exit $?: $(tail -1 "$WORK/flynn.log"))"
  done
  row "$b"
  last=$(($(date +%s) - t)) prev=$b
done
[ -n "$stopped" ] && echo "($stopped)"

python3 - "$WORK" "$OUT/vs_torch.json" "${stopped:-}" <<'PY'
import glob, json, os, sys
work, out, stopped = sys.argv[1], sys.argv[2], sys.argv[3]
res = {"torch": [], "flynn_highest": [], "flynn_high": [], "stopped": stopped or None}
for l in open(os.path.join(work, "torch.jsonl")):
    try: res["torch"].append(json.loads(l))
    except Exception: pass
for p in ("highest", "high"):
    for f in sorted(glob.glob(os.path.join(work, f"{p}_*.json")), key=lambda f: int(f.rsplit("_", 1)[1][:-5])):
        try: res[f"flynn_{p}"] += [r for r in json.load(open(f))["results"] if r["device"] == "gpu"]
        except Exception: pass
json.dump(res, open(out, "w"), indent=1)
PY
echo "(flynn vs PyTorch: $(($(date +%s) - T0))s of ${DEADLINE}s)"
