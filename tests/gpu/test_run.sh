#!/usr/bin/env bash
# tests/gpu/test_run.sh — tests/gpu/run.sh's control flow, here, without a
# GPU: a fake bundle (tests/gpu/fake_tool.c as flynn and test_gpu_parity)
# and, where a case needs one, a fake nvidia-smi. Checks the exit status of
# each situation, that the report files are written to $OUT whatever
# happens, and that a step that hangs is cut at the deadline.
# usage: test_run.sh SOURCE_DIR FAKE_TOOL
set -u
SRC=$1 FAKE=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

# a repository copy with the two scripts, and the fake bundle in .gpu/
mkdir -p "$tmp/repo/tests/gpu" "$tmp/stage/bin" "$tmp/stage/lib" "$tmp/repo/.gpu" "$tmp/smi"
cp "$SRC/tests/gpu/run.sh" "$SRC/tests/gpu/bundle.sh" "$tmp/repo/tests/gpu/"
cp "$FAKE" "$tmp/stage/bin/flynn"
cp "$FAKE" "$tmp/stage/bin/test_gpu_parity"
echo "fake bundle (tests/gpu/test_run.sh)" > "$tmp/stage/MANIFEST.txt"
(. "$SRC/tests/gpu/bundle.sh" && bundle_pack "$tmp/stage" "$tmp/repo/.gpu/flynn-gpu.tar.gz")
printf '#!/bin/sh\necho "GPU 0: Fake H200 (UUID: GPU-0)"\n' > "$tmp/smi/nvidia-smi"
chmod +x "$tmp/smi/nvidia-smi"
# the same on a GPU machine: its nvidia-smi and PyTorch are hidden (a
# nvidia-smi that lists nothing, a torch module that does not import)
mkdir -p "$tmp/nosmi" "$tmp/notorch"
printf '#!/bin/sh\necho "No devices were found"\nexit 6\n' > "$tmp/nosmi/nvidia-smi"
chmod +x "$tmp/nosmi/nvidia-smi"
echo 'raise ImportError("hidden by tests/gpu/test_run.sh")' > "$tmp/notorch/torch.py"
export PATH="$tmp/nosmi:$PATH" PYTHONPATH="$tmp/notorch${PYTHONPATH:+:$PYTHONPATH}"

# case NAME EXPECTED_RC DEADLINE PATTERN ENV... : run.sh exits EXPECTED_RC,
# within the deadline (+15 s), with run.log and parity.log in $OUT, run.log
# matching PATTERN
case_() {
  local name=$1 want=$2 deadline=$3 pat=$4; shift 4
  local out=$tmp/out-$name t0 rc took
  t0=$(date +%s)
  env "$@" OUT="$out" FLYNN_GPU_DIR="$tmp/bundle-$name" FLYNN_GPU_DEADLINE="$deadline" \
    bash "$tmp/repo/tests/gpu/run.sh" >"$tmp/$name.txt" 2>&1; rc=$?
  took=$(( $(date +%s) - t0 ))
  [ "$rc" = "$want" ] && ok || { bad "$name: exit $rc, expected $want"; tail -15 "$tmp/$name.txt" >&2; }
  [ "$took" -le $((deadline + 15)) ] && ok || bad "$name: took ${took}s, deadline ${deadline}s"
  [ -s "$out/run.log" ] && ok || bad "$name: no run.log in \$OUT"
  [ -f "$out/parity.log" ] && ok || bad "$name: no parity.log in \$OUT"
  grep -qE -- "$pat" "$out/run.log" && ok || { bad "$name: run.log lacks /$pat/"; tail -15 "$out/run.log" >&2; }
  echo "test_run: $name: exit $rc in ${took}s"
}

case_ all-pass 0 120 "^parity .* PASS" PATH="$PATH"
case_ parity-fails 1 120 "exit 1: parity FAIL \(1\)" FAKE_PARITY_RC=1
case_ parity-no-gpu-with-gpu 1 120 "exit 1: parity FAIL \(77\)" FAKE_PARITY_RC=77
case_ no-gpu 0 120 "SKIP bandwidth" FAKE_DOCTOR_RC=1 FAKE_PARITY_RC=77
case_ gpu-unusable 1 120 "exit 1: nvidia-smi lists 1 GPU" FAKE_DOCTOR_RC=1 FAKE_PARITY_RC=77 PATH="$tmp/smi:$PATH"
case_ bandwidth-low 1 120 "exit 1: bandwidth check FAIL" FAKE_D2D=100
case_ parity-hangs 1 50 "TIMEOUT parity: killed after" FAKE_PARITY_SLEEP=300

# the steps in their order: the parity right after the doctor (before devices, bandwidth and training load
# cuBLAS and cuDNN), NCCL last; the default deadline 360 s
order=$(grep -oE '^== (flynn doctor|parity|flynn devices|seed workload|data parallel over NCCL)' "$tmp/out-all-pass/run.log" | cut -c4- | cut -d' ' -f1-2 | paste -sd,)
[ "$order" = "flynn doctor,parity,flynn devices,seed workload,data parallel" ] && ok || bad "step order: $order"
grep -q "^== machine (0s of 360s)" <(env OUT="$tmp/out-default" FLYNN_GPU_DIR="$tmp/bundle-default" FAKE_PARITY_RC=0 \
  bash "$tmp/repo/tests/gpu/run.sh" 2>&1) && ok || bad "the default deadline is not 360 s"
# no bundle: stop at once, compile nothing
mv "$tmp/repo/.gpu/flynn-gpu.tar.gz" "$tmp/bundle.tar.gz"
t0=$(date +%s)
out=$(env OUT="$tmp/out-nobundle" FLYNN_GPU_DIR="$tmp/bundle-none" bash "$tmp/repo/tests/gpu/run.sh" 2>&1); rc=$?
[ $rc = 1 ] && grep -q "no .gpu/flynn-gpu.tar.gz: run tests/gpu/prepare.sh first" <<<"$out" && [ $(( $(date +%s) - t0 )) -lt 60 ] \
  && [ ! -d "$tmp/repo/build-gpu" ] && ok || { bad "no bundle: exit $rc"; echo "$out" | tail -5 >&2; }
mv "$tmp/bundle.tar.gz" "$tmp/repo/.gpu/flynn-gpu.tar.gz"

echo "test_run: $pass passed, $fail failed"
[ $fail -eq 0 ]
