#!/usr/bin/env bash
# tests/gpu/run.sh — run THERE (the GPU machine), in the repository root,
# after tests/gpu/prepare.sh packed .gpu/ here (nothing is compiled there: a
# missing bundle stops at once). It: reports what the machine has; unpacks
# the bundle into /tmp/flynn-gpu and checks that the loader finds every
# library; runs flynn doctor, then at once the GPU-vs-CPU parity of every
# op, loss and optimizer and N training steps of mnist_cnn on both devices
# (tests/test_gpu_parity.c; first, while nothing else has loaded cuBLAS and
# cuDNN's ~0.9 GB); then devices and bandwidth; trains the seed workload
# (mnist_cnn, 20,000 Fashion-MNIST images, batch 128) on the GPU and the
# CPU; does the doctor, the parity and the seed workload again with the
# CUDA 12 plugin (libflynn_cuda12.so) where the bundle has it and this
# machine has cuBLAS 12 and cuDNN for CUDA 12; times `flynn bench --devices
# cpu,gpu`; then, if time is left, flynn against PyTorch (bench/gpu/run.sh);
# data-parallel over NCCL last, capped at 30 s; and prints a table.
#
# It finishes within a deadline, whatever hangs: $FLYNN_GPU_DEADLINE seconds
# (or the first argument; default 360, so that a device call of 420 s keeps
# a minute for the start and the transfers) from its start. Each step
# runs under `timeout -k 5 T`, T = its own cap or the time left (less 20 s
# kept for the table; a tenth of the deadline under 200 s), whichever is smaller; a step that would get less
# than its minimum is SKIPPED with a line saying so. Without a usable GPU
# (flynn doctor fails) the GPU-only steps are skipped.
#
# flynn's commands get LD_LIBRARY_PATH=/tmp/flynn-gpu/lib; nothing else
# does, so Python and PyTorch never see the bundle's libraries. cuBLAS and
# cuDNN come from the pip wheels PyTorch installed: FLYNN_CUDA_LIB_PATH is
# set to the site-packages nvidia/*/lib folders (a colon-separated list;
# it replaces flynn's own search), when there are any.
#
# Logs go to $OUT (default /tmp/flynn-gpu-out), 8 files: run.log (all of
# it), devices.json, bandwidth.json, parity.log, parity12.log, bench.json,
# bench.svg, vs_torch.json. Exit status 1 when a step failed or timed out, the parity
# did not run for lack of time, the bandwidth check failed, or nvidia-smi
# sees a GPU flynn cannot use (tests/gpu/test_run.sh checks this here, with
# a fake bundle).
# usage: bash tests/gpu/run.sh [DEADLINE_SECONDS]
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/gpu/bundle.sh
OUT=${OUT:-/tmp/flynn-gpu-out}
DEADLINE=${FLYNN_GPU_DEADLINE:-${1:-360}}
BDIR=${FLYNN_GPU_DIR:-/tmp/flynn-gpu}       # the bundle, unpacked
WORK=$BDIR-work                             # scratch logs, not brought back
RESERVE=$(( DEADLINE >= 200 ? 20 : DEADLINE / 10 ))   # seconds kept for the summary
mkdir -p "$OUT"
rm -rf "$WORK" && mkdir -p "$WORK"
exec > >(tee "$OUT/run.log") 2>&1
TEE=$!
T0=$(date +%s)
T_END=$((T0 + DEADLINE))
step() { echo; echo "== $* ($(( $(date +%s) - T0 ))s of ${DEADLINE}s)"; }

# run_step KEY CAP MIN CMD... : CMD under timeout -k 5 T, T = min(CAP, time
# left - RESERVE - 5); skipped when T < MIN. ST[KEY] gets PASS, FAIL (rc),
# TIMEOUT or SKIP. LOG=FILE tees the output to FILE (TAIL=N shows only its
# last N lines); TO=FILE sends stdout to FILE.
declare -A ST
run_step() {
  local key=$1 cap=$2 min=$3; shift 3
  local avail=$(( T_END - $(date +%s) - RESERVE - 5 ))
  local t=$(( cap < avail ? cap : avail )) rc
  if [ "$t" -lt "$min" ]; then
    echo "SKIP $key: ${avail}s left before the deadline, the step needs at least ${min}s"
    ST[$key]="SKIP: out of time"
    return 125
  fi
  if [ -n "${TO:-}" ]; then
    timeout -k 5 "$t" "$@" > "$TO"; rc=$?
  elif [ -n "${LOG:-}" ] && [ -n "${TAIL:-}" ]; then
    timeout -k 5 "$t" "$@" 2>&1 | tee "$LOG" | grep -vE '^[[:space:]]*$' | tail -n "$TAIL"; rc=${PIPESTATUS[0]}
  elif [ -n "${LOG:-}" ]; then
    timeout -k 5 "$t" "$@" 2>&1 | tee "$LOG"; rc=${PIPESTATUS[0]}
  else
    timeout -k 5 "$t" "$@"; rc=$?
  fi
  case $rc in
    0) ST[$key]=PASS ;;
    124|137) ST[$key]="TIMEOUT after ${t}s"; echo "TIMEOUT $key: killed after ${t}s" ;;
    *) ST[$key]="FAIL ($rc)" ;;
  esac
  return "$rc"
}
# capped CAP CMD... : a small command (machine info) under the same deadline
capped() {
  local cap=$1; shift
  local t=$(( T_END - $(date +%s) - RESERVE - 5 ))
  [ "$t" -gt "$cap" ] && t=$cap
  [ "$t" -ge 2 ] || { echo "(not run, out of time: $1)"; return 125; }
  timeout -k 2 "$t" "$@"
}
# skip KEY REASON... : a step not run
skip() { local key=$1; shift; echo "SKIP $key: $*"; ST[$key]="SKIP: $*"; }

step "machine"
smi_gpus=$(capped 15 nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
echo "nvidia-smi lists ${smi_gpus:-0} GPU(s)"
capped 15 nvidia-smi -L 2>&1 | head -4
capped 15 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | head -2
grep -h PRETTY_NAME /etc/os-release 2>/dev/null; echo "glibc: $(getconf GNU_LIBC_VERSION 2>&1)"; nproc
command -v nvcc >/dev/null && nvcc --version | tail -1
torch_line=$(capped 40 python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "device:", torch.cuda.is_available() and torch.cuda.get_device_name(0))' 2>&1 | tail -1)
echo "$torch_line"
torch_ok=0
grep -qE "^torch .* device: [^F]" <<<"$torch_line" && torch_ok=1
# cuBLAS/cuDNN as PyTorch's pip wheels install them: site-packages/nvidia/*/lib
NVLIBS=$(capped 20 python3 -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))' 2>/dev/null |
  while read -r d; do for l in "$d"/nvidia/cu1[3-9]/lib "$d"/nvidia/*/lib; do [ -d "$l" ] && echo "$l"; done; done | awk '!seen[$0]++')
if [ -n "$NVLIBS" ]; then
  # the variable replaces flynn's whole search: keep the system's CUDA folders after the wheels
  export FLYNN_CUDA_LIB_PATH
  FLYNN_CUDA_LIB_PATH=$( { echo "$NVLIBS"; tr ':' '\n' <<<"${LD_LIBRARY_PATH:-}"; ls -d /usr/local/cuda/lib64 /usr/local/cuda/lib 2>/dev/null; } |
    awk 'NF && !seen[$0]++' | paste -sd: -)
  echo "FLYNN_CUDA_LIB_PATH=$FLYNN_CUDA_LIB_PATH"
  echo "in them: $(while read -r d; do find "$d" -maxdepth 1 -name 'lib*.so.*' -printf '%f\n'; done <<<"$NVLIBS" |
    grep -E '^lib(cublas|cublasLt|cudnn|cudart|nvrtc)\.so\.[0-9]+$' | sort -u | tr '\n' ' ')"
else
  echo "no site-packages/nvidia/*/lib: FLYNN_CUDA_LIB_PATH not set, flynn searches its default places"
fi

step "binaries"
usable=1 why=""
DATA=.gpu/data/fashion-mnist
[ -d "$DATA" ] || DATA=/usr/share/datasets/fashion-mnist
if [ -f .gpu/flynn-gpu.tar.gz ]; then
  LOG=$WORK/unpack.log run_step unpack 60 5 bash -c '. tests/gpu/bundle.sh && bundle_unpack "$1" "$2"' _ .gpu/flynn-gpu.tar.gz "$BDIR"
  B=$BDIR/bin LIB=$BDIR/lib
  sed -n '1,4p' "$BDIR/MANIFEST.txt" 2>/dev/null
  if [ "${ST[unpack]}" != PASS ]; then
    usable=0 why="the bundle could not be unpacked (${ST[unpack]})"
  else
    echo "ldd of the bundle (LD_LIBRARY_PATH=$LIB):"
    if bundle_ldd "$BDIR"; then ST[ldd]=PASS
    else ST[ldd]=FAIL; usable=0 why="the loader cannot find some of the bundle's libraries (NOT FOUND above)"; fi
  fi
else
  # never compile here: the GPU machine's minutes are for the GPU
  echo "no .gpu/flynn-gpu.tar.gz: run tests/gpu/prepare.sh first (on the development machine), and carry .gpu"
  echo "exit status: 1"
  : > "$OUT/parity.log"
  exec >&- 2>&-
  wait "$TEE" 2>/dev/null
  exit 1
fi
# flynn's commands, and only they, see the bundle's libraries
FL=(env "LD_LIBRARY_PATH=$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "FLYNN_CUDA_PLUGIN=$LIB/libflynn_cuda.so")
[ $usable = 1 ] || echo "SKIP every flynn step: $why"

gpu=0 gpu_why="flynn did not run"
step "flynn doctor"
if [ $usable = 1 ]; then
  LOG=$WORK/doctor.log run_step doctor 30 5 "${FL[@]}" "$B/flynn" doctor && gpu=1
  [ $gpu = 1 ] || gpu_why="no usable GPU ($(sed -nE 's/^ *[0-9]+\. +([a-z_]+) +FAIL +/\1: /p' "$WORK/doctor.log" | head -1 | sed -E 's/ \(.*//'))"
else
  skip doctor "$why"
fi

step "parity: every op, loss, optimizer; mnist_cnn steps on both devices"
PAR=$B/test_gpu_parity; [ -x "$PAR" ] || PAR=$B/tests/test_gpu_parity
if [ $usable = 1 ]; then
  LOG=$OUT/parity.log TAIL=40 run_step parity 150 30 "${FL[@]}" "$PAR" "$DATA"
  # 77 = "no usable GPU": the news itself without one; a failure where doctor found one
  [ "${ST[parity]}" = "FAIL (77)" ] && [ $gpu = 0 ] && ST[parity]="SKIP: $(grep -m1 '^SKIP' "$OUT/parity.log" | cut -c7-)"
else
  skip parity "$why"
fi

step "flynn devices / bandwidth"
if [ $usable = 1 ]; then
  run_step devices 30 5 "${FL[@]}" "$B/flynn" devices
  TO=$OUT/devices.json run_step devices_json 30 5 "${FL[@]}" "$B/flynn" devices --json
else
  skip devices "$why"
fi
bw_check="not measured"
if [ $gpu = 1 ]; then
  run_step bandwidth 60 10 "${FL[@]}" "$B/flynn" bandwidth --memory pinned --mode range
  TO=$OUT/bandwidth.json run_step bandwidth_json 30 10 "${FL[@]}" "$B/flynn" bandwidth --json --mode quick
  bw_check=$(capped 20 python3 - "$OUT/devices.json" "$OUT/bandwidth.json" <<'PY'
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
else
  skip bandwidth "${why:-$gpu_why}"
fi

step "GPU checks (flynn train --device gpu, 512 images)"
if [ $gpu = 1 ]; then
  run_step gpu_check 60 10 "${FL[@]}" "$B/flynn" train --device gpu --data "fashion-mnist:$DATA" --samples 512 --test-samples 1000 --epochs 1 --verbose 2
else
  skip gpu_check "${why:-$gpu_why}"
fi

step "seed workload: mnist_cnn, 20,000 images, batch 128"
if [ $gpu = 1 ]; then
  LOG=$WORK/gpu_train.log run_step gpu_train 90 20 "${FL[@]}" "$B/flynn" train --device gpu --data "fashion-mnist:$DATA" --samples 20000 --epochs 3 --batch-size 128 --verbose 2
else
  skip gpu_train "${why:-$gpu_why}"
fi
# the CPU side of the ratio; without a GPU there is no ratio: a 1,024-image smoke run
cpu_samples=20000
[ $gpu = 1 ] || cpu_samples=1024
if [ $usable = 1 ]; then
  LOG=$WORK/cpu_train.log run_step cpu_train 90 20 "${FL[@]}" "$B/flynn" train --device cpu --data "fashion-mnist:$DATA" --samples $cpu_samples --epochs 1 --batch-size 128 --verbose 2
else
  skip cpu_train "$why"
fi

step "OpenCL on the same GPU (NVIDIA's OpenCL driver): parity, seed workload, kernel families"
# The OpenCL plugin runs the kernels CUDA compiles too (src/backend/kernels/); elsewhere they have run on
# PoCL only. NVIDIA's driver ships its OpenCL library (libnvidia-opencl.so.1); a container may lack the ICD
# file naming it, so one is made here (OCL_ICD_VENDORS: ocl-icd's folder of .icd files). OpenCL failing
# to start here is reported, not an error of the run; a parity or training failure once it runs is.
OCL=(env "OCL_ICD_VENDORS=$WORK/icd" "FLYNN_OPENCL_PLUGIN=$LIB/libflynn_opencl.so" "FLYNN_OPENCL_CACHE=$WORK/ocl-cache")
ocl=0 ocl_why=""
if [ $gpu != 1 ]; then ocl_why="${why:-$gpu_why}"
elif [ ! -f "$LIB/libflynn_opencl.so" ]; then ocl_why="the bundle has no libflynn_opencl.so (built without OpenCL/CLBlast)"
else
  mkdir -p "$WORK/icd"
  cp /etc/OpenCL/vendors/*.icd "$WORK/icd/" 2>/dev/null || true
  nvocl=$(ldconfig -p 2>/dev/null | grep -oE '/[^ ]*/libnvidia-opencl\.so\.1$' | head -1)
  [ -n "$nvocl" ] && ! grep -qs nvidia "$WORK"/icd/*.icd && echo "$nvocl" > "$WORK/icd/nvidia-flynn.icd"
  echo "ICD files: $(ls "$WORK/icd" 2>/dev/null | tr '\n' ' ')(libnvidia-opencl: ${nvocl:-not found})"
  TO=$WORK/ocl_devices.txt run_step ocl_devices 30 5 "${FL[@]}" "${OCL[@]}" "$B/flynn" devices
  sed -n '/^---- OpenCL/,$p' "$WORK/ocl_devices.txt" | head -14
  if grep -qE '^  Vendor, type: .*GPU$' "$WORK/ocl_devices.txt"; then ocl=1
  else ocl_why="no OpenCL GPU is listed (NVIDIA's OpenCL library: ${nvocl:-not found})"; fi
fi
if [ $ocl = 1 ]; then
  LOG=$OUT/parity_opencl.log TAIL=12 run_step parity_opencl 120 30 "${FL[@]}" "${OCL[@]}" FLYNN_PARITY_BACKEND=opencl \
    "$PAR" "$DATA"
  LOG=$WORK/ocl_train.log run_step ocl_train 90 20 "${FL[@]}" "${OCL[@]}" "$B/flynn" train --device opencl \
    --data "fashion-mnist:$DATA" --samples 20000 --epochs 3 --batch-size 128 --verbose 2
  if [ -x "$B/bench_kernel_families" ]; then
    TO=$OUT/kernel_families.json run_step kernel_families 60 15 "${FL[@]}" "${OCL[@]}" "$B/bench_kernel_families" --json --deadline 45
  else skip kernel_families "the bundle has no bench_kernel_families"; fi
else
  for k in parity_opencl ocl_train kernel_families; do skip $k "$ocl_why"; done
fi

step "the CUDA 12 plugin (libflynn_cuda12.so) on the same GPU: doctor, parity, seed workload"
# The driver of this machine supports both plugins, so both are checked:
# FLYNN_CUDA_PLUGIN forces the CUDA 12 one; it needs cuBLAS 12 and cuDNN for
# CUDA 12 here (pip wheels nvidia/cublas/lib, nvidia/cudnn/lib); without
# them its steps are skipped, with the doctor's reason.
P12=${LIB:-}/libflynn_cuda12.so
FL12=(env "LD_LIBRARY_PATH=${LIB:-}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "FLYNN_CUDA_PLUGIN=$P12")
gpu12=0
# gated on the device being there (nvidia-smi lists it, or the CUDA 13 plugin found it), not on the CUDA 13
# plugin working: a machine whose driver or libraries suit only CUDA 12 is what this plugin is for
if [ $usable != 1 ]; then
  skip doctor12 "$why"
elif [ $gpu != 1 ] && [ "${smi_gpus:-0}" -eq 0 ]; then
  skip doctor12 "$gpu_why; nvidia-smi lists no GPU either"
elif [ ! -f "$P12" ]; then
  skip doctor12 "libflynn_cuda12.so is not in the bundle (build it here with scripts/setup.sh --cuda12 before prepare.sh)"
else
  # which plugin the loader takes by itself, with both next to libflynn
  capped 30 env "LD_LIBRARY_PATH=$LIB" "$B/flynn" doctor --json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin); p = d.get("plugin", {})
print("automatic choice:", p.get("file"), "-", p.get("why"))' 2>&1 | tail -1
  LOG=$WORK/doctor12.log run_step doctor12 30 5 "${FL12[@]}" "$B/flynn" doctor && gpu12=1
  if [ $gpu12 != 1 ]; then
    f12=$(sed -nE 's/^ *[0-9]+\. +([a-z_]+) +FAIL +(.*)/\1: \2/p' "$WORK/doctor12.log" | head -1)
    # no CUDA 12 libraries on this machine is not the plugin's failure
    case $f12 in cublas:*|cudnn:*) ST[doctor12]="SKIP: ${f12:0:140}" ;; esac
  fi
fi
if [ $gpu12 = 1 ]; then
  LOG=$OUT/parity12.log TAIL=20 run_step parity12 120 30 "${FL12[@]}" "$PAR" "$DATA"
  LOG=$WORK/gpu_train12.log run_step gpu_train12 90 20 "${FL12[@]}" "$B/flynn" train --device gpu --data "fashion-mnist:$DATA" --samples 20000 --epochs 3 --batch-size 128 --verbose 2
else
  skip parity12 "${ST[doctor12]:-the CUDA 12 plugin is not usable}"
  skip gpu_train12 "${ST[doctor12]:-the CUDA 12 plugin is not usable}"
fi

step "flynn bench (GPU vs CPU by batch size)"
if [ $gpu = 1 ]; then
  run_step bench 120 30 "${FL[@]}" "$B/flynn" bench --model mnist_cnn --data "fashion-mnist:$DATA" --samples 20000 --batch-sizes 32,64,128,256,512,1024 --devices cpu,gpu --json "$OUT/bench.json" --svg "$OUT/bench.svg"
else
  skip bench "${why:-$gpu_why}: nothing to compare the CPU with"
fi

step "flynn vs PyTorch eager on the GPU (mnist_cnn, 20k images)"
if [ $gpu != 1 ]; then
  skip vs_torch "${why:-$gpu_why}"
elif [ $torch_ok != 1 ]; then
  skip vs_torch "PyTorch with CUDA is not importable here"
else
  # bench/gpu/run.sh stops starting batch sizes 10 s before the timeout it runs under
  left=$(( T_END - $(date +%s) - RESERVE - 5 ))
  [ $left -gt 240 ] && left=240
  LOG=$WORK/vs_torch.txt run_step vs_torch 240 60 \
    env "FLYNN_LIB_DIR=$LIB" bash bench/gpu/run.sh "$B/flynn" "$DATA" $((left - 10))
fi

step "data parallel over NCCL: mpirun -np 2 flynn train --device gpu (one GPU here)"
# src/dist/nccl.c has only run against a stand-in library (tests/test_mpi.sh). Here the real NCCL (the
# PyTorch wheel's nvidia/nccl, through FLYNN_CUDA_LIB_PATH) meets one GPU and two ranks: NCCL refuses two
# ranks on one device ("Duplicate GPU"), and flynn must say so on both ranks and exit, not hang. A run
# that trains instead (a future NCCL that allows it) passes too.
if [ $gpu != 1 ]; then
  skip nccl "${why:-$gpu_why}"
elif ! command -v mpirun >/dev/null 2>&1; then
  skip nccl "no mpirun on this machine (Open MPI)"
else
  capped 20 "$B/flynn" doctor 2>/dev/null | grep "^NCCL" | cut -c1-200
  # the bundle's libraries for the ranks only (mpirun itself keeps the system's); last and capped at 30 s:
  # a hang here costs the least
  LOG=$WORK/nccl.log TAIL=12 run_step nccl 30 15 mpirun --allow-run-as-root --oversubscribe -np 2 "${FL[@]}" \
    "$B/flynn" train --device gpu --data "fashion-mnist:$DATA" --samples 4096 --epochs 1 --batch-size 128 --verbose 2
  if [ "${ST[nccl]:0:4}" = FAIL ] && grep -q "NCCL" "$WORK/nccl.log"; then
    ST[nccl]="PASS (refused, with NCCL's reason: $(grep -m1 -o 'NCCL[^;]*' "$WORK/nccl.log" | cut -c1-100))"
  fi
fi

step "summary"
gpu_sps=$(grep -oE "training throughput: [0-9]+" "$WORK/gpu_train.log" 2>/dev/null | grep -oE "[0-9]+$")
cpu_sps=$(grep -oE "training throughput: [0-9]+" "$WORK/cpu_train.log" 2>/dev/null | grep -oE "[0-9]+$")
gpu_acc=$(grep -oE "test accuracy: [0-9.]+" "$WORK/gpu_train.log" 2>/dev/null | grep -oE "[0-9.]+$")
row() { printf "%-40s %s\n" "$1" "$(cut -c1-150 <<<"$2")"; }
row "bundle: unpack, ldd" "${ST[ldd]:-${ST[unpack]:-${ST[build]:-?}}}"
row "flynn doctor" "${ST[doctor]:-?}"
row "flynn devices" "${ST[devices]:-?}"
row "flynn bandwidth" "${ST[bandwidth]:-?}; $bw_check"
row "GPU checks (--device gpu)" "${ST[gpu_check]:-?}"
row "parity (ops, losses, optimizers, steps)" "${ST[parity]:-?} $([ -f "$OUT/parity.log" ] && tail -1 "$OUT/parity.log" | cut -c1-120)"
row "mnist_cnn 20k, batch 128, GPU" "${ST[gpu_train]:-?}; ${gpu_sps:-?} samples/s (3 epochs incl. warm-up), test accuracy ${gpu_acc:-?}"
row "mnist_cnn $((cpu_samples / 1000))k, batch 128, CPU" "${ST[cpu_train]:-?}; ${cpu_sps:-?} samples/s (1 epoch, $(nproc) threads)"
[ -n "${gpu_sps:-}" ] && [ -n "${cpu_sps:-}" ] && awk -v g="$gpu_sps" -v c="$cpu_sps" 'BEGIN { printf "%-40s %.1fx\n", "GPU / CPU", g / c }'
gpu12_sps=$(grep -oE "training throughput: [0-9]+" "$WORK/gpu_train12.log" 2>/dev/null | grep -oE "[0-9]+$")
gpu12_acc=$(grep -oE "test accuracy: [0-9.]+" "$WORK/gpu_train12.log" 2>/dev/null | grep -oE "[0-9.]+$")
row "CUDA 12 plugin: flynn doctor" "${ST[doctor12]:-?}"
row "CUDA 12 plugin: parity" "${ST[parity12]:-?} $([ -f "$OUT/parity12.log" ] && tail -1 "$OUT/parity12.log" | cut -c1-120)"
row "CUDA 12 plugin: mnist_cnn 20k, GPU" "${ST[gpu_train12]:-?}; ${gpu12_sps:-?} samples/s (3 epochs incl. warm-up), test accuracy ${gpu12_acc:-?}"
[ -n "${gpu_sps:-}" ] && [ -n "${gpu12_sps:-}" ] && awk -v a="$gpu12_sps" -v b="$gpu_sps" 'BEGIN { printf "%-40s %.2fx\n", "CUDA 12 plugin / CUDA 13 plugin speed", a / b }'
ocl_sps=$(grep -oE "training throughput: [0-9]+" "$WORK/ocl_train.log" 2>/dev/null | grep -oE "[0-9]+$")
ocl_acc=$(grep -oE "test accuracy: [0-9.]+" "$WORK/ocl_train.log" 2>/dev/null | grep -oE "[0-9.]+$")
row "OpenCL: parity on the GPU" "${ST[parity_opencl]:-?} $([ -f "$OUT/parity_opencl.log" ] && tail -1 "$OUT/parity_opencl.log" | cut -c1-120)"
row "OpenCL: mnist_cnn 20k, batch 128" "${ST[ocl_train]:-?}; ${ocl_sps:-?} samples/s (3 epochs incl. warm-up), test accuracy ${ocl_acc:-?}"
[ -n "${gpu_sps:-}" ] && [ -n "${ocl_sps:-}" ] && awk -v a="$ocl_sps" -v b="$gpu_sps" 'BEGIN { printf "%-40s %.2fx (the goal: 0.5x or more)\n", "OpenCL / CUDA speed", a / b }'
row "OpenCL: kernel families" "${ST[kernel_families]:-?}"
row "NCCL: mpirun -np 2 --device gpu" "${ST[nccl]:-?}"
row "flynn bench --devices cpu,gpu" "${ST[bench]:-?}"
row "flynn vs PyTorch" "${ST[vs_torch]:-?}"
[ -s "$WORK/vs_torch.txt" ] && { echo; cat "$WORK/vs_torch.txt"; }
echo "total: $(( $(date +%s) - T0 ))s (deadline ${DEADLINE}s)"
# exit 1 when a step failed or timed out, when the parity (the point of the
# run) did not run for lack of time, when the bandwidth check failed, or when
# nvidia-smi sees a GPU that flynn cannot use; doctor and devices failing is
# the news itself on a machine without a GPU
rc=0
for k in "${!ST[@]}"; do
  [ $gpu = 0 ] && { [ "$k" = doctor ] || [ "$k" = devices ] || [ "$k" = devices_json ]; } && continue
  case ${ST[$k]} in FAIL*|TIMEOUT*) rc=1; echo "exit 1: $k ${ST[$k]}" ;; esac
done
case ${ST[parity]:-} in "SKIP: out of time") rc=1; echo "exit 1: the parity step did not run (out of time)" ;; esac
case $bw_check in FAIL*) rc=1; echo "exit 1: bandwidth check $bw_check" ;; esac
if [ $gpu = 0 ] && [ "${smi_gpus:-0}" -gt 0 ]; then
  rc=1; echo "exit 1: nvidia-smi lists ${smi_gpus} GPU(s), but flynn cannot use one: $gpu_why${why:+ / $why}"
fi
echo "exit status: $rc"
exec >&- 2>&-
wait "$TEE" 2>/dev/null   # run.log complete before $OUT is collected
exit $rc
