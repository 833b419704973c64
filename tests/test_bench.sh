#!/usr/bin/env bash
# test_bench.sh — `flynn bench` end to end on a tiny size: the table, the JSON
# fields (docs/performance.md), the SVG chart, the GPU's refusal with its
# reason, and bad usage. Benchmarks are not tests: nothing here checks a time
# or a speed, only that the numbers are there.
# usage: test_bench.sh PATH/TO/flynn
set -u
# OPENBLAS_CORETYPE (some images set it) adds a note to the device line and
# keeps flynn from replacing a fallback core; these tests expect neither.
unset OPENBLAS_CORETYPE
FLYNN=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

# a small run of both modes on every device asked for; the GPU is usable or not
out=$("$FLYNN" bench --samples 512 --batch-sizes 64,128 --mode both --warmup-steps 1 \
      --json "$tmp/b.json" --svg "$tmp/b.svg" 2>&1); rc=$?
[ $rc -eq 0 ] && ok || { bad "bench: exit $rc"; echo "$out" >&2; }
for pat in "^flynn bench: mnist_cnn on 512 fashion-mnist images" "^FLOPs per sample: 71\.57 M training, 23\.98 M predict" \
           "^cpu: .*[0-9]+ threads \(default: [^)]*\); BLAS " "^gpu: " "^ +batch +mode +cpu samples/s +cpu GFLOP/s" \
           "^ +64 +train +[0-9]+ +[0-9.]+" "^ +128 +predict +[0-9]+ +[0-9.]+"; do
  grep -qE -- "$pat" <<<"$out" && ok || { bad "bench output lacks /$pat/"; echo "$out" | head -12 >&2; }
done

# the JSON, field by field
if [ -s "$tmp/b.json" ]; then
  python3 - "$tmp/b.json" <<'PY' && ok || bad "JSON fields"
import json, os, sys
j = json.load(open(sys.argv[1]))
def need(c, what):
    if not c:
        sys.exit("test_bench: JSON: " + what)
need(j["model"] == "mnist_cnn" and j["data"] == "fashion-mnist" and j["samples"] == 512, "model/data/samples")
need(j["input_shape"] == [28, 28, 1] and j["classes"] == 10 and j["threads"] >= 1, "shape/classes/threads")
need(j["flops_per_sample"] == {"train": 71565312, "predict": 23984896}, "flops_per_sample")
need(j["blas"]["library"] and "core" in j["blas"] and "config" in j["blas"], "blas")
need(j["warmup_steps"] == 1 and j["repeat"] == 1 and isinstance(j["flynn_version"], str), "run settings")
dev = {d["device"]: d for d in j["devices"]}
need(dev["cpu"]["usable"] is True and dev["cpu"]["detail"], "cpu device")
g = dev["gpu"]
need(g["usable"] or g["reason"], "gpu: usable, or the reason why not")
cpu = [r for r in j["results"] if r["device"] == "cpu"]
need(sorted((r["batch_size"], r["mode"]) for r in cpu) ==
     [(64, "predict"), (64, "train"), (128, "predict"), (128, "train")], "cpu results")
for r in j["results"]:
    need(r["samples"] == 512 and r["seconds"] > 0 and r["samples_per_s"] > 0 and r["gflops"] > 0, "a result")
    # the cores the process kept busy: more than none, never more than the CPUs there are
    need(0 < r["cpu_cores"] <= (os.cpu_count() or 1) + 0.25, "cpu_cores %s" % r["cpu_cores"])
    need(1 <= r["threads_in_use"] <= j["threads"], "threads_in_use %s of %s" % (r["threads_in_use"], j["threads"]))
    # device graphs: none on the CPU; on a GPU, the timed training epoch replays them (issue 44)
    need(all(isinstance(r[k], int) for k in ("graph_captures", "graph_capture_failures", "graph_replays")), "graph counts")
    need(r["device"] != "cpu" or r["graph_replays"] == r["graph_captures"] == 0, "graphs on the CPU")
    need(r["device"] != "gpu" or r["mode"] != "train" or r["graph_replays"] > 0, "no replayed graph on the GPU")
need(len(j["speedup"]) == 4, "speedup rows")
for s in j["speedup"]:
    need((s["gpu_over_cpu"] is None) == (not g["usable"]), "speedup is null exactly without a GPU")
PY
else
  bad "no JSON written"
fi

# the chart: an SVG with both panels, rendered if rsvg-convert is installed
if grep -q "^<svg" "$tmp/b.svg" 2>/dev/null && grep -q "training throughput" "$tmp/b.svg" && grep -q "predict throughput" "$tmp/b.svg"; then ok; else bad "SVG chart"; fi
if command -v rsvg-convert >/dev/null; then
  rsvg-convert -o "$tmp/b.png" "$tmp/b.svg" && [ -s "$tmp/b.png" ] && ok || bad "rsvg-convert cannot render the chart"
fi

# the GPU switched off: the CPU is still measured, the GPU's line says why
out=$(FLYNN_DISABLE_GPU=1 "$FLYNN" bench --samples 256 --batch-sizes 128 --warmup-steps 0 --json - 2>"$tmp/err"); rc=$?
[ $rc -eq 0 ] && ok || bad "bench with FLYNN_DISABLE_GPU: exit $rc"
grep -qE "^gpu: not usable: .*FLYNN_DISABLE_GPU" "$tmp/err" && ok || { bad "no reason for the GPU on stderr"; cat "$tmp/err" >&2; }
python3 -c 'import json,sys; j=json.loads(sys.stdin.read()); g=[d for d in j["devices"] if d["device"]=="gpu"][0]; sys.exit(0 if not g["usable"] and "FLYNN_DISABLE_GPU" in g["reason"] and j["results"] else 1)' <<<"$out" \
  && ok || bad "JSON on stdout: gpu reason / cpu results"
out=$(FLYNN_DISABLE_GPU=1 "$FLYNN" bench --samples 256 --batch-sizes 128 --devices gpu 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "gpu not usable: .*FLYNN_DISABLE_GPU" <<<"$out" && ok || { bad "gpu only, disabled: exit $rc"; echo "$out" >&2; }

# the text models: synthetic sequences (and fortunes-lang when installed), train and predict, JSON
for model in lstm_text transformer_text; do
  "$FLYNN" bench --model $model --samples 96 --batch-sizes 32 --warmup-steps 1 --mode both --devices cpu \
    --json "$tmp/t.json" >"$tmp/err" 2>&1; rc=$?
  [ $rc -eq 0 ] && ok || { bad "bench --model $model: exit $rc"; cat "$tmp/err" >&2; }
  python3 - "$model" "$tmp/t.json" <<'PY' && ok || bad "bench --model $model: JSON"
import json, os, sys
j = json.load(open(sys.argv[2]))
assert j["model"] == sys.argv[1] and j["data"] == "synthetic" and j["input_shape"] == [128], j
assert j["vocab"] == 512 and j["classes"] == 5 and j["flops_per_sample"]["train"] > j["flops_per_sample"]["predict"] > 0
got = sorted((r["mode"], r["batch_size"]) for r in j["results"])
assert got == [("predict", 32), ("train", 32)], got
assert all(r["samples"] == 96 and r["samples_per_s"] > 0 for r in j["results"])
PY
done
if [ -f /usr/share/games/fortunes/fortunes ] && [ -d /usr/share/games/fortunes/pl ]; then
  "$FLYNN" bench --model lstm_text --data fortunes-lang --samples 64 --batch-sizes 32 --warmup-steps 0 --devices cpu 2>&1 \
    | grep -q "lstm_text on 64 fortunes-lang sequences" && ok || bad "bench --data fortunes-lang"
else
  echo "test_bench: skipping --data fortunes-lang: Debian's fortunes packages are not installed"
fi
for args in "--model lstm_text --data mnist:/tmp" "--model mlp --data synthetic"; do
  err=$("$FLYNN" bench $args 2>&1 >/dev/null); rc=$?
  [ $rc -eq 2 ] && grep -q "synthetic" <<<"$err" && ok || bad "bench $args: exit $rc ($err)"
done

# unless the user says otherwise, the OpenMP threads spin briefly before they sleep wherever the threads
# follow the load (fewer run beside busy CPUs, so nobody is left spinning there); where they do not
# (FLYNN_FOLLOW_LOAD=0, a cgroup CPU quota) they spin where the CPUs are idle at the start and wait passively
# where other processes keep them busy (src/cli/omp_setup.c); the bench says which and why. A CPU-bound
# process at the start used to make a whole run wait passively: EfficientNetB0's predict at batch 1 ran at
# a fifth of its speed after a pipeline's Python started beside it.
policy() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["omp_wait_policy"])' "$tmp/w.json"; }
mkdir -p "$tmp/nocg" # a cgroup without a CPU quota
follow='spin 1,000 rounds, then sleep (the threads follow the load: where other processes keep CPUs busy, fewer run)'
for pol in "" busy busy-fixed active; do
  case $pol in
    active) set -- env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=active ;;
    busy) set -- env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY -u FLYNN_FOLLOW_LOAD FLYNN_TEST_CGROUP_DIR="$tmp/nocg" ;;
    busy-fixed) set -- env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY FLYNN_FOLLOW_LOAD=0 ;;
    *) set -- env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY ;;
  esac
  spinners=""
  if [ "${pol%-fixed}" = busy ]; then # a CPU-bound process on every CPU this test may use
    for _ in $(seq "$(nproc)"); do sh -c 'while :; do :; done' & spinners="$spinners $!"; done
    sleep 0.3
  fi
  "$@" "$FLYNN" bench --samples 64 --batch-sizes 32 --warmup-steps 0 --devices cpu --json "$tmp/w.json" >/dev/null 2>&1
  [ -n "$spinners" ] && kill $spinners && wait $spinners 2>/dev/null
  p=$(policy)
  case $pol in
    "") [ "$p" = "$follow" ] || [[ $p =~ ^(passive|spin\ 1,000\ rounds,\ then\ sleep)\ \(other\ processes\ kept\ [0-9.]+\ of\ [0-9]+\ CPUs ]] ;;
    busy) [ "$p" = "$follow" ] ;;
    busy-fixed) [[ $p =~ ^passive\ \(other\ processes\ kept\ [0-9.]+\ of\ [0-9]+\ CPUs ]] ;;
    active) [ "$p" = active ] ;;
  esac && ok || bad "OpenMP wait policy (${pol:-unset}): $p"
done

# a model file: a user's model, loaded for every point, on synthetic inputs or the user's arrays; FLOPs and
# buffer sizes read off its graph
fx=$(cd "$(dirname "$0")" && pwd)/fixtures/keras
out=$("$FLYNN" bench --model "$fx/mobilenet_block.keras" --samples 64 --batch-sizes 16 --mode both --devices cpu \
      --warmup-steps 1 --json - 2>"$tmp/err"); rc=$?
[ $rc -eq 0 ] && ok || { bad "bench a model file: exit $rc"; cat "$tmp/err" >&2; }
grep -qE "^flynn bench: .*mobilenet_block.keras on 64 synthetic samples" "$tmp/err" && ok || { bad "file header"; cat "$tmp/err" >&2; }
grep -qE "^FLOPs per sample: [0-9.]+ M training, [0-9.]+ M predict; weights [0-9.]+ MB, buffers per sample [0-9.]+ KB training, [0-9.]+ KB predict" \
  "$tmp/err" && ok || { bad "file FLOPs line"; cat "$tmp/err" >&2; }
python3 -c '
import json, os, sys
j = json.loads(sys.stdin.read())
assert j["flops_per_sample"]["train"] > 2 * j["flops_per_sample"]["predict"] > 0, j["flops_per_sample"]
assert j["memory"]["weight_bytes"] > 0 and j["memory"]["buffer_bytes_per_sample"] > 0, j["memory"]
# predict keeps values only, reused by lifetime: under training'"'"'s values, gradients and aux
assert 0 < j["memory"]["predict_buffer_bytes_per_sample"] < j["memory"]["buffer_bytes_per_sample"], j["memory"]
assert {(r["mode"], r["batch_size"]) for r in j["results"]} == {("train", 16), ("predict", 16)}, j["results"]
' <<<"$out" && ok || bad "file JSON"
# the user's arrays (an int32 token input: synthetic data refuses it, by name)
tx=train_func_mask_lstm_sgd
"$FLYNN" bench --model "$fx/$tx.keras" --devices cpu --batch-sizes 8 --samples 16 --warmup-steps 0 >/dev/null 2>"$tmp/err" \
  && bad "synthetic data for an int32 input" || grep -q "int32 (token indices).*give --data X.npy,Y.npy" "$tmp/err" && ok \
  || { bad "int32 refusal message"; cat "$tmp/err" >&2; }
"$FLYNN" bench --model "$fx/$tx.keras" --data "$fx/${tx}_train_x.npy,$fx/${tx}_train_y.npy" --devices cpu --batch-sizes 2 \
  --warmup-steps 0 >"$tmp/out" 2>&1 && grep -qE "^ +2 +train +[0-9]+" "$tmp/out" && ok \
  || { bad "bench on .npy arrays"; cat "$tmp/out" >&2; }
"$FLYNN" bench --model "$fx/mobilenet_block.keras" --data nothing.txt --devices cpu 2>"$tmp/err" \
  && bad "bad --data for a file" || grep -q "X.npy,Y.npy, FILE.npz or synthetic" "$tmp/err" && ok || bad "bad --data message"

# OpenBLAS's kernels against the CPU's: an OpenBLAS that fell back to SSE3 (FLYNN_TEST_BLAS_CORE pretends it
# chose Prescott) gets OPENBLAS_CORETYPE from the flynn command, which says so; a user's own OPENBLAS_CORETYPE
# is kept and named
best=$(python3 -c '
import re
f = open("/proc/cpuinfo").read()
fl = set(re.search(r"^flags\s*:(.*)$", f, re.M).group(1).split())
amd = "AuthenticAMD" in f
print("SkylakeX" if {"avx512f", "avx512vl", "avx512bw", "avx512dq"} <= fl else ("Zen" if amd else "Haswell") if {"avx2", "fma"} <= fl else "Sandybridge" if "avx" in fl else "")')
if [ -n "$best" ]; then
  out=$(FLYNN_TEST_BLAS_CORE=Prescott "$FLYNN" bench --samples 64 --batch-sizes 32 --devices cpu --warmup-steps 0 2>&1)
  grep -q "core $best); OPENBLAS_CORETYPE=$best set by flynn (OpenBLAS alone chose Prescott, older than this CPU)" <<<"$out" \
    && ok || { bad "BLAS fallback not replaced"; echo "$out" | grep cpu: >&2; }
  # bench/suite.py's sgemm ceiling runs the kernels the flynn command runs, not OpenBLAS's fallback (issue 43: 63
  # GFLOP/s at Prescott's on a Xeon that flynn ran at SkylakeX's, shares of 172-484%)
  out=$(FLYNN_TEST_BLAS_CORE=Prescott python3 "$(dirname "$0")/../bench/suite.py" --ceiling-only --threads 1 \
    --flynn "$FLYNN" --work "$tmp/suite" 2>&1)
  grep -qE "^sgemm ceiling [0-9]+ GFLOP/s on 1 threads \(OpenBLAS core $best; the flynn command runs $best\)$" <<<"$out" \
    && ok || { bad "suite.py's ceiling runs other kernels than flynn"; echo "$out" >&2; }
  out=$(OPENBLAS_CORETYPE=Prescott "$FLYNN" bench --samples 64 --batch-sizes 32 --devices cpu --warmup-steps 0 2>&1)
  grep -q "core Prescott); OpenBLAS runs its Prescott kernels (SSE) as OPENBLAS_CORETYPE=Prescott says; this CPU runs $best" \
    <<<"$out" && ok || { bad "user's OPENBLAS_CORETYPE"; echo "$out" | grep cpu: >&2; }
  out=$(OPENBLAS_CORETYPE=Prescott "$FLYNN" train --model mlp --samples 64 --epochs 1 --device cpu 2>&1 | head -1)
  grep -q "^device: CPU ([0-9]* threads; OpenBLAS runs its Prescott kernels.*set OPENBLAS_CORETYPE=$best), as requested" \
    <<<"$out" && ok || bad "device line on older kernels: $out"
else
  echo "test_bench: no AVX on this CPU, the OpenBLAS kernel checks are skipped"
fi

# threads follow the CPUs the process may use: a cgroup quota (FLYNN_TEST_CGROUP_DIR stands for the process's
# cgroup), OMP_NUM_THREADS first
cg=$tmp/cgroup; mkdir -p "$cg"
ncpu=$(nproc)
echo "100000 100000" >"$cg/cpu.max"
out=$(FLYNN_TEST_CGROUP_DIR=$cg "$FLYNN" bench --samples 64 --batch-sizes 32 --devices cpu --warmup-steps 0 2>&1)
if [ "$ncpu" -gt 1 ]; then
  grep -q ", 1 threads (default: cgroup CPU quota 1.00 of $ncpu CPUs)" <<<"$out" && ok || { bad "cgroup v2 quota"; echo "$out" | grep cpu: >&2; }
fi
echo "max 100000" >"$cg/cpu.max"
out=$(FLYNN_TEST_CGROUP_DIR=$cg "$FLYNN" bench --samples 64 --batch-sizes 32 --devices cpu --warmup-steps 0 2>&1)
grep -q ", $ncpu threads (default: $ncpu CPUs available)" <<<"$out" && ok || { bad "no quota"; echo "$out" | grep cpu: >&2; }
rm "$cg/cpu.max"; echo 150000 >"$cg/cpu.cfs_quota_us"; echo 100000 >"$cg/cpu.cfs_period_us"
if [ "$ncpu" -gt 2 ]; then
  out=$(FLYNN_TEST_CGROUP_DIR=$cg "$FLYNN" bench --samples 64 --batch-sizes 32 --devices cpu --warmup-steps 0 2>&1)
  grep -q ", 2 threads (default: cgroup CPU quota 1.50 of $ncpu CPUs)" <<<"$out" && ok || { bad "cgroup v1 quota"; echo "$out" | grep cpu: >&2; }
fi
out=$(OMP_NUM_THREADS=1 FLYNN_TEST_CGROUP_DIR=$cg "$FLYNN" bench --samples 64 --batch-sizes 32 --devices cpu --warmup-steps 0 2>&1)
grep -q ", 1 threads (default: OMP_NUM_THREADS)" <<<"$out" && ok || { bad "OMP_NUM_THREADS first"; echo "$out" | grep cpu: >&2; }

# usage errors
for args in "--batch-sizes 64,x" "--devices tpu" "--mode fast" "--samples 0" "--frobnicate 1"; do
  "$FLYNN" bench $args >/dev/null 2>&1; rc=$?
  [ $rc -eq 2 ] && ok || bad "bench $args: exit $rc, expected 2"
done
"$FLYNN" bench --help | grep -q -- "--batch-sizes LIST" && ok || bad "bench --help"

echo "test_bench: $pass passed, $fail failed"
[ $fail -eq 0 ]
