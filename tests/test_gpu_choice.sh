#!/usr/bin/env bash
# test_gpu_choice.sh — which CUDA plugin and which cuBLAS/cuDNN the loader
# takes, on machines arranged in fake root folders ($FLYNN_TEST_ROOT, a
# test-only hook that prefixes every fixed path the checks read) with a
# stub libcuda.so.1 reporting each driver's CUDA version:
#   drivers 470 (CUDA 11.4), 535 (12.2), 570 (12.8), 580 (13.0), 590 (13.1),
#   with both plugins installed and with only the CUDA 13 one;
#   cuBLAS/cuDNN for CUDA 12 in a virtualenv that is not activated (~/.venv)
#   and for CUDA 13 in /usr/local/cuda-13.0; a cuDNN built for the wrong
#   CUDA; the CUDA 13 libraries missing on a 590 driver;
#   WSL2 (/dev/dxg, /usr/lib/wsl/lib/libcuda.so.1), WSL without /dev/dxg;
#   docker without the GPU passed through, with it, and with /dev/nvidia*
#   but no libcuda; a kubernetes pod without a GPU.
# Each case checks doctor's failing (or passing) check, the detail, the
# remedy, the exit code, and for train --device auto/gpu the device line.
# The plugins are stand-ins (tests/stub_cuda_plugin.c), linked to their
# major's stub cuBLAS without a RUNPATH: one loads only if the loader
# preloaded the right cuBLAS by absolute path.
# usage: test_gpu_choice.sh FLYNN STUB_LIBCUDA_DIR STUB_PLUGIN_DIR STUB_LIBS13 STUB_LIBS12
set -u
# The device line's CPU part carries a note when OPENBLAS_CORETYPE overrides
# the core (some images set it); these tests read the GPU part only.
unset OPENBLAS_CORETYPE
FLYNN=$1 STUB=$2 PLUGINS=$3 LIBS13=$4 LIBS12=$5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
for f in "$STUB/libcuda.so.1" "$PLUGINS/libflynn_cuda.so" "$PLUGINS/libflynn_cuda12.so" "$LIBS13/libcublas.so.13" \
         "$LIBS12/libcublas.so.12"; do
  [ -f "$f" ] || { echo "test_gpu_choice: $f is missing (build the test tree first)" >&2; exit 1; }
done

# both plugins, and only the CUDA 13 one
mkdir -p "$tmp/plugins-both" "$tmp/plugins-13"
cp "$PLUGINS/libflynn_cuda.so" "$PLUGINS/libflynn_cuda12.so" "$tmp/plugins-both/"
cp "$PLUGINS/libflynn_cuda.so" "$tmp/plugins-13/"

# libs ROOT: CUDA 12 wheels in $ROOT/home/.venv (as pip lays them out), the
# CUDA 13 toolkit's in $ROOT/usr/local/cuda-13.0/lib64
libs() {
  local r=$1 sp=$1/home/.venv/lib/python3.11/site-packages/nvidia
  mkdir -p "$sp/cublas/lib" "$sp/cudnn/lib" "$r/usr/local/cuda-13.0/lib64"
  for f in "$LIBS12"/libcublas*.so.12; do ln -sf "$f" "$sp/cublas/lib/"; done
  for f in "$LIBS12"/libcudnn*.so.9; do ln -sf "$f" "$sp/cudnn/lib/"; done
  for f in "$LIBS13"/lib*.so.13 "$LIBS13"/libcudnn*.so.9; do ln -sf "$f" "$r/usr/local/cuda-13.0/lib64/"; done
}
# native ROOT MODULE_VERSION: a Linux kernel driver and its libcuda
native() {
  mkdir -p "$1/proc/driver/nvidia" "$1/dev" "$1/usr/lib/x86_64-linux-gnu"
  echo "NVRM version: NVIDIA UNIX x86_64 Kernel Module  $2  (test stub)" > "$1/proc/driver/nvidia/version"
  : > "$1/dev/nvidiactl"; : > "$1/dev/nvidia0"
  ln -sf "$STUB/libcuda.so.1" "$1/usr/lib/x86_64-linux-gnu/libcuda.so.1"
}
# a python3 first on PATH whose prefix has no wheels, so that the machine's
# own Python environments stay out of the search
mkdir -p "$tmp/nopy/bin"
printf '#!/bin/sh\nexit 0\n' > "$tmp/nopy/bin/python3"; chmod +x "$tmp/nopy/bin/python3"

# run ROOT PLUGIN_DIR CUDA_VERSION CMD... : flynn under that root
run() {
  local root=$1 pdir=$2 ver=$3; shift 3
  env -u VIRTUAL_ENV -u CONDA_PREFIX -u FLYNN_CUDA_LIB_PATH -u FLYNN_CUDA_PLUGIN -u FLYNN_LIBCUDA -u FLYNN_NVIDIA_PROC \
    -u FLYNN_DISABLE_GPU -u LD_LIBRARY_PATH FLYNN_TEST_ROOT="$root" HOME="$root/home" FLYNN_CUDA_PLUGIN_DIR="$pdir" \
    STUB_CUDA_VERSION="$ver" PATH="$tmp/nopy/bin:$PATH" ${EXTRA:+$EXTRA} "$FLYNN" "$@" 2>&1
}
# expect_doctor NAME ROOT PLUGIN_DIR CUDA_VERSION RC CHECK STATUS PATTERN [NEXT_STEP_PATTERN]
expect_doctor() {
  local name=$1 root=$2 pdir=$3 ver=$4 want_rc=$5 check=$6 status=$7 pat=$8 next=${9:-}
  local out rc
  out=$(run "$root" "$pdir" "$ver" doctor); rc=$?
  [ $rc -eq "$want_rc" ] && ok || { bad "$name: doctor exit $rc, expected $want_rc"; echo "$out" >&2; return; }
  grep -qE "^ *[0-9]+\. $check +$status  .*$pat" <<<"$out" && ok || { bad "$name: no '$check $status' /$pat/"; echo "$out" >&2; }
  if [ -n "$next" ]; then
    grep -qE "^Next step: .*$next" <<<"$out" && ok || { bad "$name: next step lacks /$next/"; echo "$out" | tail -2 >&2; }
  fi
  # the JSON says the same
  run "$root" "$pdir" "$ver" doctor --json | python3 -c '
import json, sys
d = json.load(sys.stdin); want, st = sys.argv[1], sys.argv[2]
assert any(c["name"] == want and c["status"] == st for c in d["checks"]), [(c["name"], c["status"]) for c in d["checks"]]
assert d["result"] == ("PASS" if sys.argv[3] == "0" else "FAIL"), d["result"]' "$check" "$status" "$want_rc" && ok || bad "$name: doctor --json"
}
# expect_train NAME ROOT PLUGIN_DIR CUDA_VERSION PATTERN: --device gpu fails
# (exit 1) with PATTERN, --device auto trains on the CPU saying it
expect_train() {
  local name=$1 root=$2 pdir=$3 ver=$4 pat=$5 out rc
  out=$(run "$root" "$pdir" "$ver" train --device gpu --samples 64 --epochs 1 --verbose 0); rc=$?
  [ $rc -eq 1 ] && grep -qE -- "the GPU cannot be used: .*$pat" <<<"$out" && ok || { bad "$name: --device gpu (exit $rc)"; echo "$out" >&2; }
  out=$(run "$root" "$pdir" "$ver" train --device auto --samples 64 --epochs 1 --test-samples 100); rc=$?
  [ $rc -eq 0 ] && grep -qE -- "^device: CPU \([0-9]+ threads\); GPU not used: .*$pat" <<<"$out" && ok || { bad "$name: --device auto (exit $rc)"; echo "$out" | head -3 >&2; }
}

# ---- drivers
R=$tmp/d470; native "$R" 470.256.02; libs "$R"
expect_doctor d470 "$R" "$tmp/plugins-both" 11040 1 driver_version FAIL \
  "supports CUDA 11.4; flynn's GPU plugins need CUDA 13 \(driver 580 or newer\) or CUDA 12 \(driver 525 or newer\)" \
  "update the NVIDIA driver to version 580 or newer \(CUDA 13, flynn's newest plugin\); the GPU is fine, only the driver is too old"
expect_train d470 "$R" "$tmp/plugins-both" 11040 "supports CUDA 11.4.*update the NVIDIA driver to version 580 or newer"

R=$tmp/d535; native "$R" 535.104.05; libs "$R"
expect_doctor d535 "$R" "$tmp/plugins-both" 12020 1 driver_version PASS \
  "supports CUDA 12.2: taking the CUDA 12 plugin; the CUDA 13 plugin needs driver 580 or newer"
expect_doctor d535-cublas "$R" "$tmp/plugins-both" 12020 1 cublas PASS \
  "cuBLAS 12.9.3 for CUDA 12: $R/home/.venv/lib/python3.11/site-packages/nvidia/cublas/lib/libcublas.so.12"
expect_doctor d535-cudnn "$R" "$tmp/plugins-both" 12020 1 cudnn PASS \
  "cuDNN 9.10.0 for CUDA 12.9: $R/home/.venv/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9"
expect_doctor d535-plugin "$R" "$tmp/plugins-both" 12020 1 plugin PASS "plugins-both/libflynn_cuda12.so \(CUDA 12\)"
expect_doctor d535-device "$R" "$tmp/plugins-both" 12020 1 device FAIL "stub CUDA 12 plugin"
expect_train d535 "$R" "$tmp/plugins-both" 12020 "stub CUDA 12 plugin"
expect_doctor d535-only13 "$R" "$tmp/plugins-13" 12020 1 driver_version FAIL \
  "supports CUDA 12.2; flynn's GPU plugin needs CUDA 13 \(driver 580 or newer\); its CUDA 12 plugin \(driver 525 or newer\) would fit, but it is not installed" \
  "update the NVIDIA driver to version 580 or newer, or use a flynn built with its CUDA 12 plugin \(scripts/setup.sh --cuda12"

R=$tmp/d570; native "$R" 570.133.20; libs "$R"
expect_doctor d570 "$R" "$tmp/plugins-both" 12080 1 driver_version PASS "supports CUDA 12.8: taking the CUDA 12 plugin"
expect_doctor d570-plugin "$R" "$tmp/plugins-both" 12080 1 plugin PASS "libflynn_cuda12.so \(CUDA 12\)"

R=$tmp/d580; native "$R" 580.65.06; libs "$R"
expect_doctor d580 "$R" "$tmp/plugins-both" 13000 1 driver_version PASS "supports CUDA 13.0: taking the CUDA 13 plugin$"
expect_doctor d580-cublas "$R" "$tmp/plugins-both" 13000 1 cublas PASS "for CUDA 13: $R/usr/local/cuda-13.0/lib64/libcublas.so.13"
expect_doctor d580-cudnn "$R" "$tmp/plugins-both" 13000 1 cudnn PASS "for CUDA 13.0: $R/usr/local/cuda-13.0/lib64/libcudnn.so.9"
expect_doctor d580-device "$R" "$tmp/plugins-both" 13000 1 device FAIL "stub CUDA 13 plugin"
expect_doctor d580-driver "$R" "$tmp/plugins-both" 13000 1 libcuda PASS "usr/lib/x86_64-linux-gnu/libcuda.so.1 \(driver 580.65.06\)"

R=$tmp/d590; native "$R" 590.44.01; libs "$R"
expect_doctor d590 "$R" "$tmp/plugins-both" 13010 1 driver_version PASS "supports CUDA 13.1: taking the CUDA 13 plugin$"
expect_doctor d590-plugin "$R" "$tmp/plugins-both" 13010 1 plugin PASS "plugins-both/libflynn_cuda.so \(CUDA 13\)"
# the CUDA 13 libraries missing: the CUDA 12 plugin, and why
rm -rf "$R/usr/local/cuda-13.0"
expect_doctor d590-no13libs "$R" "$tmp/plugins-both" 13010 1 driver_version PASS \
  "supports CUDA 13.1: taking the CUDA 12 plugin; the CUDA 13 plugin's cuBLAS is missing"
# ... and with only the CUDA 13 plugin: cuBLAS 13 is what to install
expect_doctor d590-only13 "$R" "$tmp/plugins-13" 13010 1 cublas FAIL "libcublasLt.so.13 \(cuBLAS for CUDA 13\) not found" \
  "install cuBLAS for CUDA 13 \(pip install nvidia-cublas"

# a Pascal card (6.1) on a 590 driver: the CUDA 13 plugin has no code for
# it, so the CUDA 12 one is taken, and the reason says so; with only the
# CUDA 13 plugin there is no other choice (the plugin itself says it then)
R=$tmp/d590cc; native "$R" 590.44.01; libs "$R"
EXTRA=STUB_CUDA_CC=61 expect_doctor pascal "$R" "$tmp/plugins-both" 13010 1 driver_version PASS \
  "supports CUDA 13.1: taking the CUDA 12 plugin; the CUDA 13 plugin has no code for compute capability 6.1 \(it starts at 7.5\)"
EXTRA=STUB_CUDA_CC=61 expect_doctor pascal-only13 "$R" "$tmp/plugins-13" 13010 1 plugin PASS "libflynn_cuda.so \(CUDA 13\)"
EXTRA=STUB_CUDA_CC=90 expect_doctor hopper "$R" "$tmp/plugins-both" 13010 1 driver_version PASS "taking the CUDA 13 plugin$"

# a working "GPU" (the stub plugin running flynn's CPU kernels): doctor
# passes (exit 0) and train names the plugin, its CUDA and why, and cuBLAS
R=$tmp/d570
EXTRA=STUB_PLUGIN_CPU=1 expect_doctor d570-works "$R" "$tmp/plugins-both" 12080 0 hello PASS "match the CPU" "nothing"
EXTRA=STUB_PLUGIN_CPU=1 expect_doctor cudnn-same "$R" "$tmp/plugins-both" 12080 0 cudnn_version PASS \
  "cuDNN 9\.19\.0 \(built with 9\.19\.0\)$"
# a cuDNN older than the build's headers (9.10 against 9.19): it runs, with a warning and the fix (issue 44)
EXTRA="STUB_PLUGIN_CPU=1 STUB_CUDNN_RUNTIME=91000" expect_doctor cudnn-older "$R" "$tmp/plugins-both" 12080 0 cudnn_version \
  PASS "cuDNN 9\.10\.0 \(built with 9\.19\.0\); warning: older than the build: .*install cuDNN 9\.19 or newer \(pip install -U nvidia-cudnn-cu12\)"
out=$(EXTRA=STUB_PLUGIN_CPU=1 run "$R" "$tmp/plugins-both" 12080 train --device gpu --samples 64 --epochs 1 --test-samples 100); rc=$?
[ $rc -eq 0 ] && grep -qE "^device: GPU Stub GPU \(CUDA 12 plugin, CPU kernels\) .*driver CUDA 12.8, runtime 12.9 \(libflynn_cuda12.so: the driver is older than CUDA 13\), cuBLAS 12.9.3" <<<"$out" \
  && ok || { bad "d570-works: device line"; echo "$out" | head -3 >&2; }

# flynn devices names the plugin, why, and the files (text and JSON)
out=$(EXTRA=STUB_PLUGIN_CPU=1 run "$R" "$tmp/plugins-both" 12080 devices); rc=$?
[ $rc -eq 0 ] && grep -qE "^Plugin: .*plugins-both/libflynn_cuda12.so \(CUDA 12; the driver supports CUDA 12.8: taking the CUDA 12 plugin" <<<"$out" \
  && grep -qE "^cuBLAS: $R/home/.venv/.*/libcublas.so.12$" <<<"$out" && grep -qE "^cuDNN: +$R/home/.venv/.*/libcudnn.so.9$" <<<"$out" \
  && ok || { bad "d570-works: flynn devices (exit $rc)"; echo "$out" >&2; }
EXTRA=STUB_PLUGIN_CPU=1 run "$R" "$tmp/plugins-both" 12080 devices --json | python3 -c '
import json, sys
d = json.load(sys.stdin); p = d["plugin"]
assert d["result"] == "PASS" and p["cuda_major"] == 12 and p["file"].endswith("/libflynn_cuda12.so"), d
assert p["cublas"].endswith("/libcublas.so.12") and "taking the CUDA 12 plugin" in p["why"], p
assert d["environment"]["driver"] == "native" and d["environment"]["driver_module"] == "570.133.20", d["environment"]' \
  && ok || bad "d570-works: flynn devices --json"

# a cuDNN built for CUDA 13 where the CUDA 12 plugin needs one for CUDA 12
R=$tmp/mismatch; native "$R" 535.104.05; libs "$R"
rm -f "$R"/home/.venv/lib/python3.11/site-packages/nvidia/cudnn/lib/*; rm -rf "$R/usr/local/cuda-13.0"
for f in "$LIBS13"/libcudnn*.so.9; do ln -sf "$f" "$R/home/.venv/lib/python3.11/site-packages/nvidia/cudnn/lib/"; done
expect_doctor cudnn-mismatch "$R" "$tmp/plugins-both" 12020 1 cudnn FAIL \
  "libcudnn.so.9 \(cuDNN 9 for CUDA 12\) not found .*nvidia/cudnn/lib/libcudnn.so.9 is cuDNN 9.10 for CUDA 13.0, not 12" \
  "install cuDNN 9 for CUDA 12 \(pip install nvidia-cudnn-cu12"

# ---- WSL2: no /proc/driver/nvidia, no /dev/nvidia*; /dev/dxg and the
# Windows driver's libcuda in /usr/lib/wsl/lib
R=$tmp/wsl; libs "$R"; mkdir -p "$R/dev" "$R/usr/lib/wsl/lib" "$R/proc"
: > "$R/dev/dxg"; ln -s "$STUB/libcuda.so.1" "$R/usr/lib/wsl/lib/libcuda.so.1"
echo "Linux version 5.15.167.4-microsoft-standard-WSL2 (root@host) #1 SMP" > "$R/proc/version"
expect_doctor wsl2 "$R" "$tmp/plugins-both" 12080 1 driver PASS "WSL2: the Windows NVIDIA driver, through /dev/dxg"
expect_doctor wsl2-libcuda "$R" "$tmp/plugins-both" 12080 1 libcuda PASS "$R/usr/lib/wsl/lib/libcuda.so.1"
expect_doctor wsl2-choice "$R" "$tmp/plugins-both" 12080 1 driver_version PASS "taking the CUDA 12 plugin"
rm "$R/usr/lib/wsl/lib/libcuda.so.1"
expect_doctor wsl2-nolibcuda "$R" "$tmp/plugins-both" 12080 1 libcuda FAIL "cannot be loaded" \
  "WSL2 takes libcuda.so.1 from the Windows NVIDIA driver"
rm "$R/dev/dxg"
expect_doctor wsl-nogpu "$R" "$tmp/plugins-both" 12080 1 driver FAIL "WSL without a GPU: /dev/dxg is missing" \
  "the NVIDIA driver installed on Windows"

# ---- containers
R=$tmp/ctr-nogpu; mkdir -p "$R/proc/self"; : > "$R/.dockerenv"
echo "611 540 0:52 / / rw,relatime master:305 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/A:/var/lib/docker/overlay2/l/B,upperdir=/var/lib/docker/overlay2/C/diff" > "$R/proc/self/mountinfo"
expect_doctor docker-nogpu "$R" "$tmp/plugins-both" 13000 1 driver FAIL "no NVIDIA GPU is visible in this container \(docker" \
  "docker run --gpus all"
expect_train docker-nogpu "$R" "$tmp/plugins-both" 13000 "no NVIDIA GPU is visible in this container.*--gpus all"
R=$tmp/k8s; mkdir -p "$R/proc/1"; echo "0::/kubepods/burstable/pod1234/abcd" > "$R/proc/1/cgroup"
expect_doctor k8s-nogpu "$R" "$tmp/plugins-both" 13000 1 driver FAIL "in this container \(kubernetes" "--gpus all"
# with the NVIDIA container toolkit: /dev/nvidia* and the driver's libcuda,
# no toolkit; pip wheels for the libraries
R=$tmp/ctr-gpu; native "$R" 580.65.06; libs "$R"; : > "$R/.dockerenv"; rm -f "$R/proc/driver/nvidia/version"
expect_doctor docker-gpu "$R" "$tmp/plugins-both" 13000 1 driver PASS "/dev/nvidia\* present\), in a docker container"
expect_doctor docker-gpu-plugin "$R" "$tmp/plugins-both" 13000 1 plugin PASS "libflynn_cuda.so \(CUDA 13\)"
# the device files passed with --device, but not the driver's libraries
rm "$R/usr/lib/x86_64-linux-gnu/libcuda.so.1"
expect_doctor docker-nolibcuda "$R" "$tmp/plugins-both" 13000 1 libcuda FAIL "libcuda.so.1 cannot be loaded" \
  "the container has the GPU's device files but not the driver's libcuda.so.1: start the container .*--gpus all"

# a virtual machine booted from a disk image made from a docker image: /.dockerenv, but the root on a block
# device; the plain no-driver message, nothing of containers or docker (issue 43)
R=$tmp/vm-image; mkdir -p "$R/proc/self"; : > "$R/.dockerenv"; echo "Linux version 6.1.0-28-amd64" > "$R/proc/version"
echo "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard" > "$R/proc/self/mountinfo"
expect_doctor vm-dockerenv "$R" "$tmp/plugins-both" 13000 1 driver FAIL "no NVIDIA driver is loaded" \
  "install its driver, version 580 or newer"
out=$(run "$R" "$tmp/plugins-both" 13000 doctor)
grep -qiE "container|docker" <<<"$out" && { bad "vm-dockerenv: the doctor speaks of a container"; echo "$out" >&2; } || ok
expect_train vm-dockerenv "$R" "$tmp/plugins-both" 13000 "no NVIDIA driver is loaded"
# docker's device-mapper storage: a /dev/mapper/docker-... root is a container's
R=$tmp/ctr-dm; mkdir -p "$R/proc/self"; : > "$R/.dockerenv"
echo "611 540 253:3 / / rw,relatime - xfs /dev/mapper/docker-253:0-1234-abcd rw" > "$R/proc/self/mountinfo"
expect_doctor docker-dm "$R" "$tmp/plugins-both" 13000 1 driver FAIL "in this container \(docker" "--gpus all"
# podman's own evidence, whatever the root
R=$tmp/podman; mkdir -p "$R/run" "$R/proc/self"; : > "$R/run/.containerenv"
echo "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw" > "$R/proc/self/mountinfo"
expect_doctor podman-nogpu "$R" "$tmp/plugins-both" 13000 1 driver FAIL "in this container \(podman" "--gpus all"

# ---- no driver at all, outside containers and WSL
R=$tmp/bare; mkdir -p "$R/proc"; echo "Linux version 6.1.0-28-amd64" > "$R/proc/version"
expect_doctor bare "$R" "$tmp/plugins-both" 13000 1 driver FAIL "no NVIDIA driver is loaded" \
  "install its driver, version 580 or newer \(525 or newer is enough for flynn's CUDA 12 plugin"

echo "test_gpu_choice: $pass passed, $fail failed"
[ $fail -eq 0 ]
