#!/usr/bin/env bash
# tests/gpu/run.sh — run THERE (the GPU machine), in the repository root,
# after tests/gpu/prepare.sh packed .gpu/ here. Within about 8 minutes on one
# H200 it: reports what the machine has; walks flynn's GPU checks; runs the
# GPU-vs-CPU parity of every op, loss and optimizer and N training steps of
# mnist_cnn on both devices (tests/test_gpu_parity.c); trains the seed
# workload (mnist_cnn, 20,000 Fashion-MNIST images, batch 128) on the GPU and
# the CPU; and prints a short table last. Logs go to $OUT when it is set.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/flynn-gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
T0=$(date +%s)
step() { echo; echo "== $* ($(( $(date +%s) - T0 ))s)"; }

step "machine"
nvidia-smi -L 2>&1 | head -4
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | head -2
grep -h PRETTY_NAME /etc/os-release 2>/dev/null; ldd --version 2>&1 | head -1
command -v nvcc >/dev/null && nvcc --version | tail -1
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>&1 | tail -1
ls -d $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null | tr ' ' '\n' | sed 's|$|/nvidia/*/lib|') 2>/dev/null | head -12

step "binaries"
if [ -x .gpu/bin/flynn ]; then
  B=.gpu/bin
  [ -f .gpu/lib/libopenblas.so.0.gz ] && gunzip -f .gpu/lib/libopenblas.so.0.gz
  export LD_LIBRARY_PATH="$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "using the binaries carried in .gpu/ (built on the development machine)"
else
  echo "no .gpu/ bundle: building here"
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build-gpu -j 16 >/dev/null || { echo "build failed"; exit 1; }
  B=build-gpu
  cp build-gpu/tests/test_gpu_parity build-gpu/ 2>/dev/null
fi
export FLYNN_CUDA_PLUGIN="$PWD/$B/libflynn_cuda.so"
DATA=.gpu/data/fashion-mnist
[ -d "$DATA" ] || DATA=/usr/share/datasets/fashion-mnist
ldd "$B/flynn" | grep -E "not found" && echo "missing libraries above"

step "flynn doctor / devices / bandwidth"
timeout 60 "$B/flynn" doctor; doctor_rc=$?
timeout 60 "$B/flynn" devices; devices_rc=$?
timeout 60 "$B/flynn" devices --json > "$OUT/devices.json"
timeout 90 "$B/flynn" bandwidth --memory pinned --mode range; bw_rc=$?
timeout 60 "$B/flynn" bandwidth --json --mode quick > "$OUT/bandwidth.json"
bw_check=$(python3 - "$OUT/devices.json" "$OUT/bandwidth.json" <<'PY'
import json, sys
try:
    dev = json.load(open(sys.argv[1]))["devices"][0]
    bw = json.load(open(sys.argv[2]))["points"][0]
    peak, d2d = dev["peak_bandwidth_gbs"], bw["device_to_device"]
    ok = peak / 2 <= d2d <= peak * 2
    print(f"{'PASS' if ok else 'FAIL'}: device-to-device {d2d:.0f} GB/s vs peak {peak:.0f} GB/s "
          f"(host-to-device {bw['host_to_device']:.1f}, device-to-host {bw['device_to_host']:.1f} GB/s)")
except Exception as e:
    print(f"FAIL: {e}")
PY
)
echo "$bw_check"

step "GPU checks (flynn train --device gpu, 512 images)"
timeout 120 "$B/flynn" train --device gpu --data "fashion-mnist:$DATA" --samples 512 --test-samples 1000 --epochs 1 --verbose 2
gpu_ok=$?

step "parity: every op, loss, optimizer; mnist_cnn steps on both devices"
PAR=$B/test_gpu_parity; [ -x "$PAR" ] || PAR=$B/tests/test_gpu_parity
timeout 240 "$PAR" "$DATA" 2>&1 | tee "$OUT/parity.log" | grep -vE "^\s*$" | tail -40
parity_rc=${PIPESTATUS[0]}

step "seed workload: mnist_cnn, 20,000 images, batch 128"
timeout 150 "$B/flynn" train --device gpu --data "fashion-mnist:$DATA" --samples 20000 --epochs 3 --batch-size 128 --verbose 2 | tee "$OUT/gpu_train.log"
timeout 120 "$B/flynn" train --device cpu --data "fashion-mnist:$DATA" --samples 20000 --epochs 1 --batch-size 128 --verbose 2 | tee "$OUT/cpu_train.log"
if "$B/flynn" bench --help >/dev/null 2>&1; then
  step "flynn bench (GPU vs CPU by batch size)"
  timeout 150 "$B/flynn" bench --model mnist_cnn --data "fashion-mnist:$DATA" --samples 20000 --batch-sizes 32,64,128,256,512,1024 --devices cpu,gpu --json "$OUT/bench.json" --svg "$OUT/bench.svg"
fi

if [ -x bench/gpu/run.sh ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  step "flynn vs PyTorch eager on the GPU (mnist_cnn, 20k images)"
  timeout 420 bash bench/gpu/run.sh "$B/flynn" "$DATA" | tee "$OUT/vs_torch.txt"
fi

step "summary"
gpu_sps=$(grep -oE "training throughput: [0-9]+" "$OUT/gpu_train.log" | grep -oE "[0-9]+$")
cpu_sps=$(grep -oE "training throughput: [0-9]+" "$OUT/cpu_train.log" | grep -oE "[0-9]+$")
gpu_acc=$(grep -oE "test accuracy: [0-9.]+" "$OUT/gpu_train.log" | grep -oE "[0-9.]+$")
printf "%-40s %s\n" "flynn doctor" "$([ $doctor_rc -eq 0 ] && echo PASS || echo FAIL)"
printf "%-40s %s\n" "flynn devices" "$([ $devices_rc -eq 0 ] && echo PASS || echo FAIL)"
printf "%-40s %s\n" "flynn bandwidth" "$([ $bw_rc -eq 0 ] && echo PASS || echo FAIL); $bw_check"
printf "%-40s %s\n" "GPU checks (--device gpu)" "$([ $gpu_ok -eq 0 ] && echo PASS || echo FAIL)"
printf "%-40s %s\n" "parity (ops, losses, optimizers, steps)" "$([ $parity_rc -eq 0 ] && echo PASS || echo "FAIL ($parity_rc)") $(tail -1 "$OUT/parity.log")"
printf "%-40s %s samples/s (3 epochs incl. warm-up), test accuracy %s\n" "mnist_cnn 20k, batch 128, GPU" "${gpu_sps:-?}" "${gpu_acc:-?}"
printf "%-40s %s samples/s (1 epoch, %s threads)\n" "mnist_cnn 20k, batch 128, CPU" "${cpu_sps:-?}" "$(nproc)"
[ -n "${gpu_sps:-}" ] && [ -n "${cpu_sps:-}" ] && awk -v g="$gpu_sps" -v c="$cpu_sps" 'BEGIN { printf "%-40s %.1fx\n", "GPU / CPU", g / c }'
[ -f "$OUT/vs_torch.txt" ] && { echo; cat "$OUT/vs_torch.txt"; }
echo "total: $(( $(date +%s) - T0 ))s"
