#!/usr/bin/env bash
# test_gpu_fallback.sh — every way the GPU can be unusable, arranged on a
# machine without one: the command must train on the CPU with a one-line
# reason under --device auto, and fail with that reason under --device gpu,
# never with a loader error or a crash.
# usage: test_gpu_fallback.sh FLYNN STUB_LIBCUDA_DIR PLUGIN|none
set -u
# The device line's CPU part carries a note when OPENBLAS_CORETYPE overrides
# the core (some images set it); these tests read the GPU part only.
unset OPENBLAS_CORETYPE
FLYNN=$1 STUB=$2 PLUGIN=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

echo "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.00  (test stub)" > "$tmp/version"
FAKE_DRIVER=(FLYNN_NVIDIA_PROC="$tmp/version" FLYNN_LIBCUDA="$STUB/libcuda.so.1")

# check NAME PATTERN ENV... : --device gpu fails with PATTERN; --device auto
# trains on the CPU and prints "GPU not used: " with the same reason
check() {
  local name=$1 pat=$2; shift 2
  local out rc
  out=$(env "$@" "$FLYNN" train --device gpu --samples 64 --epochs 1 --verbose 0 2>&1); rc=$?
  if [ $rc -eq 0 ]; then bad "$name: --device gpu succeeded"; return; fi
  if [ $rc -gt 2 ]; then bad "$name: --device gpu exit code $rc (a crash?)"; echo "$out" >&2; return; fi
  grep -qE -- "--device gpu: the GPU cannot be used: .*$pat" <<<"$out" && ok || { bad "$name: gpu message lacks /$pat/"; echo "$out" >&2; }
  out=$(env "$@" "$FLYNN" train --device auto --samples 64 --epochs 1 --test-samples 100 2>&1); rc=$?
  [ $rc -eq 0 ] && ok || { bad "$name: --device auto failed (exit $rc)"; echo "$out" | tail -3 >&2; return; }
  grep -qE -- "^device: CPU \([0-9]+ threads\); GPU not used: .*$pat" <<<"$out" && ok || { bad "$name: auto line lacks /$pat/"; echo "$out" | head -2 >&2; }
  grep -qE "^test accuracy: " <<<"$out" && ok || bad "$name: auto did not train on the CPU"
}

check no-driver "no NVIDIA driver is loaded .*: if this machine has an NVIDIA GPU, install its driver, version 580 or newer" FLYNN_NVIDIA_PROC="$tmp/none"
check disabled "FLYNN_DISABLE_GPU is set" FLYNN_DISABLE_GPU=1
check no-libcuda "libcuda.so.1 cannot be loaded|$tmp/none.so cannot be loaded" FLYNN_NVIDIA_PROC="$tmp/version" FLYNN_LIBCUDA="$tmp/none.so"
# a 470 driver (CUDA 11.4) is too old for every plugin (the choice between
# the CUDA 13 and 12 plugins: test_gpu_choice.sh)
check old-driver "supports CUDA 11.4; flynn's GPU plugins? needs? CUDA 13 \(driver 580 or newer\).*: update the NVIDIA driver to version 580 or newer" "${FAKE_DRIVER[@]}" STUB_CUDA_VERSION=11040
check no-cublas "libcublasLt.so.13 \(cuBLAS for CUDA 13\) not found \(searched $tmp/empty\)" "${FAKE_DRIVER[@]}" FLYNN_CUDA_LIB_PATH="$tmp/empty"

# cuBLAS present, cuDNN missing: a folder with links to the real cuBLAS only
cublas=$(ldconfig -p | grep -oE '/[^ ]*/libcublasLt\.so\.13$' | head -1)
[ -z "$cublas" ] && cublas=$(ls /usr/local/cuda/lib64/libcublasLt.so.13 2>/dev/null)
if [ -n "$cublas" ]; then
  mkdir -p "$tmp/cublas_only"
  ln -s "$cublas" "$tmp/cublas_only/libcublasLt.so.13"
  ln -s "$(dirname "$cublas")/libcublas.so.13" "$tmp/cublas_only/libcublas.so.13"
  check no-cudnn "libcudnn.so.9 \(cuDNN 9 for CUDA 13\) not found .*install cuDNN 9" "${FAKE_DRIVER[@]}" FLYNN_CUDA_LIB_PATH="$tmp/cublas_only"
  check no-plugin "the flynn CUDA plugin cannot be loaded .*$tmp/none_plugin.so" "${FAKE_DRIVER[@]}" FLYNN_CUDA_PLUGIN="$tmp/none_plugin.so"
  if [ "$PLUGIN" != none ] && [ -f "$PLUGIN" ]; then
    # everything loads; the stub driver has no device: the plugin itself says so
    check no-device "the driver sees no CUDA device" "${FAKE_DRIVER[@]}" FLYNN_CUDA_PLUGIN="$PLUGIN"
  else
    echo "SKIP no-device: the CUDA plugin is not built here"
  fi
else
  echo "SKIP no-cudnn, no-plugin, no-device: no cuBLAS on this machine to arrange them with"
fi

echo "test_gpu_fallback: $pass passed, $fail failed"
[ $fail -eq 0 ]
