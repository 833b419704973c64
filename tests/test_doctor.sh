#!/usr/bin/env bash
# test_doctor.sh — `flynn doctor`, `flynn devices` and `flynn bandwidth` on a
# machine without a GPU: each situation is arranged (no driver, a stub
# libcuda reporting an old or a current driver, missing cuBLAS/cuDNN, a
# missing plugin, a device-less driver) and the test asserts which check
# fails, what the remedy says, that the later checks are SKIP, the exit
# codes, and that --json parses.
# Where cuBLAS/cuDNN are not installed, stub libraries of the same names
# (tests/stub_cudalibs.c) stand in, so the cuDNN and plugin cases always run;
# a case that cannot run prints SKIP and the reason.
# The CUDA 12 plugin, where it is built, gets the same device-less case with
# the toolchain's real cuBLAS 12 and cuDNN for CUDA 12 (the pip wheels).
# usage: test_doctor.sh FLYNN STUB_LIBCUDA_DIR PLUGIN|none STUB_CUDALIBS_DIR [PLUGIN12 CUDA12_LIB_DIR]
set -u
FLYNN=$1 STUB=$2 PLUGIN=$3 STUBLIBS=${4:-} PLUGIN12=${5:-none} LIBS12=${6:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
echo "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.00  (test stub)" > "$tmp/version"
FAKE=(FLYNN_NVIDIA_PROC="$tmp/version" FLYNN_LIBCUDA="$STUB/libcuda.so.1")

# doctor_case NAME FAILED_CHECK REMEDY_PATTERN ENV... : text and JSON agree
doctor_case() {
  local name=$1 check=$2 pat=$3; shift 3
  local out rc json
  out=$(env "$@" "$FLYNN" doctor 2>&1); rc=$?
  [ $rc -eq 1 ] && ok || bad "$name: doctor exit $rc, expected 1"
  grep -qE "^ *[0-9]+\. $check +FAIL " <<<"$out" && ok || { bad "$name: '$check' is not the failing check"; echo "$out" >&2; }
  grep -qE "^Next step: .*$pat" <<<"$out" && ok || { bad "$name: next step lacks /$pat/"; echo "$out" | tail -3 >&2; }
  grep -q "^Result = FAIL$" <<<"$out" && ok || bad "$name: no Result = FAIL"
  # every check after the failing one is SKIP
  after=$(sed -n "/ $check  *FAIL /,\$p" <<<"$out" | grep -E "^ *[0-9]+\. " | tail -n +2)
  if [ -n "$after" ] && grep -qvE " SKIP " <<<"$after"; then bad "$name: a check after '$check' is not SKIP"; echo "$after" >&2; else ok; fi
  json=$(env "$@" "$FLYNN" doctor --json 2>/dev/null)
  python3 - "$check" "$json" <<'PY' && ok || bad "$name: doctor --json"
import json, sys
want, d = sys.argv[1], json.loads(sys.argv[2])
assert d["tool"] == "flynn doctor" and d["result"] == "FAIL", d
fails = [c for c in d["checks"] if c["status"] == "FAIL"]
assert fails and fails[0]["name"] == want, fails
assert d["next_step"], d
assert {"name", "status", "detail", "remedy"} <= set(d["checks"][0]), d["checks"][0]
PY
}

doctor_case no-driver driver "if this machine has an NVIDIA GPU, install its driver, version 580 or newer" FLYNN_NVIDIA_PROC="$tmp/none"
doctor_case disabled enabled "unset FLYNN_DISABLE_GPU" FLYNN_DISABLE_GPU=1
doctor_case no-libcuda libcuda "reinstall the NVIDIA driver" FLYNN_NVIDIA_PROC="$tmp/version" FLYNN_LIBCUDA="$tmp/none.so"
doctor_case old-driver driver_version "update the NVIDIA driver to version 580 or newer .*the GPU is fine, only the driver is too old" "${FAKE[@]}" STUB_CUDA_VERSION=11040
doctor_case no-cublas cublas "install cuBLAS for CUDA 13" "${FAKE[@]}" FLYNN_CUDA_LIB_PATH="$tmp/empty"
# cuBLAS and cuDNN: the stubs (tests/stub_cudalibs.c) for the cases that
# need them found, so that these run on every machine; FLYNN_CUDA_LIB_PATH
# replaces the whole search, so installed ones are not seen
if [ -n "$STUBLIBS" ] && [ -f "$STUBLIBS/libcublas.so.13" ] && [ -f "$STUBLIBS/libcudnn.so.9" ]; then
  mkdir -p "$tmp/cublas_only"
  ln -s "$STUBLIBS/libcublasLt.so.13" "$tmp/cublas_only/libcublasLt.so.13"
  ln -s "$STUBLIBS/libcublas.so.13" "$tmp/cublas_only/libcublas.so.13"
  doctor_case no-cudnn cudnn "install cuDNN 9 for CUDA 13" "${FAKE[@]}" FLYNN_CUDA_LIB_PATH="$tmp/cublas_only"
  doctor_case no-plugin plugin "built without its CUDA plugin" "${FAKE[@]}" FLYNN_CUDA_LIB_PATH="$STUBLIBS" \
    FLYNN_CUDA_PLUGIN="$tmp/none_plugin.so"
  out=$(env "${FAKE[@]}" FLYNN_CUDA_LIB_PATH="$STUBLIBS" FLYNN_CUDA_PLUGIN="$tmp/none_plugin.so" "$FLYNN" doctor 2>&1)
  for c in "cublas +PASS .*$STUBLIBS/libcublas.so.13" "cudnn +PASS .*$STUBLIBS/libcudnn.so.9"; do
    grep -qE "^ *[0-9]+\. $c" <<<"$out" && ok || { bad "no-plugin: lacks /$c/"; echo "$out" >&2; }
  done
else
  bad "the stub cuBLAS/cuDNN libraries are missing (${STUBLIBS:-no folder given}): the cuDNN and plugin cases cannot run"
fi
# a device-less driver behind the real plugin: needs the plugin and the real
# cuBLAS/cuDNN it links (the stubs hold no kernels)
cublas=$(ldconfig -p | grep -oE '/[^ ]*/libcublasLt\.so\.13$' | head -1)
[ -z "$cublas" ] && cublas=$(ls /usr/local/cuda/lib64/libcublasLt.so.13 2>/dev/null)
if [ "$PLUGIN" = none ] || [ ! -f "$PLUGIN" ]; then
  echo "SKIP no-device: the CUDA plugin is not built here (FLYNN_CUDA=OFF or no CUDA toolkit)"
elif [ -z "$cublas" ]; then
  echo "SKIP no-device: the plugin needs the real cuBLAS and cuDNN, which are not installed"
else
  {
    doctor_case no-device device "the driver sees no CUDA device" "${FAKE[@]}" FLYNN_CUDA_PLUGIN="$PLUGIN"
    # the checks before the device passed, and say what they found
    out=$(env "${FAKE[@]}" FLYNN_CUDA_PLUGIN="$PLUGIN" "$FLYNN" doctor 2>&1)
    for c in "driver +PASS .*580.00" "libcuda +PASS .*libcuda.so.1" "driver_version +PASS .*CUDA 13.0" \
             "cublas +PASS .*libcublas.so.13" "cudnn +PASS .*libcudnn.so.9" "plugin +PASS .*libflynn_cuda.so" \
             "cudart +PASS .*CUDA runtime 13"; do
      grep -qE "^ *[0-9]+\. $c" <<<"$out" && ok || { bad "no-device: lacks /$c/"; echo "$out" >&2; }
    done
  }
fi

# the CUDA 12 plugin, real, on a stub 570 driver (CUDA 12.8): everything up
# to the device, its static CUDA runtime 12.x included
if [ "$PLUGIN12" = none ] || [ ! -f "$PLUGIN12" ]; then
  echo "SKIP no-device-cuda12: the CUDA 12 plugin is not built here (scripts/setup.sh --cuda12)"
elif [ ! -e "$LIBS12/libcublas.so.12" ]; then
  echo "SKIP no-device-cuda12: no cuBLAS 12 in $LIBS12"
else
  F12=(FLYNN_NVIDIA_PROC="$tmp/version" FLYNN_LIBCUDA="$STUB/libcuda.so.1" STUB_CUDA_VERSION=12080
       FLYNN_CUDA_PLUGIN="$PLUGIN12" FLYNN_CUDA_LIB_PATH="$LIBS12")
  doctor_case no-device-cuda12 device "the driver sees no CUDA device" "${F12[@]}"
  out=$(env "${F12[@]}" "$FLYNN" doctor 2>&1)
  for c in "driver_version +PASS .*CUDA 12.8: taking the CUDA 12 plugin" "cublas +PASS +cuBLAS 12\..* for CUDA 12: .*libcublas.so.12" \
           "cudnn +PASS +cuDNN 9\..* for CUDA 12\." "plugin +PASS .*libflynn_cuda12.so \(CUDA 12\)" "cudart +PASS .*CUDA runtime 12\."; do
    grep -qE "^ *[0-9]+\. $c" <<<"$out" && ok || { bad "no-device-cuda12: lacks /$c/"; echo "$out" >&2; }
  done
fi

# devices and bandwidth as they are on this machine: without a GPU the
# reason, Result = FAIL, exit 1; with a usable one Result = PASS, exit 0;
# valid JSON either way (the driver check runs on a GPU machine as on CI:
# FLYNN_NVIDIA_PROC pointed at a missing file)
"$FLYNN" devices >/dev/null 2>&1 && gpu=1 || gpu=0
[ $gpu = 1 ] && echo "test_doctor: this machine has a usable GPU: devices/bandwidth must pass; the no-driver case is arranged"
for cmd in devices bandwidth; do
  out=$("$FLYNN" $cmd 2>&1); rc=$?
  if [ $gpu = 1 ]; then
    [ $rc -eq 0 ] && grep -q "^Result = PASS$" <<<"$out" && ok || { bad "$cmd with a GPU: exit $rc"; echo "$out" | tail -5 >&2; }
    "$FLYNN" $cmd --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["result"]=="PASS"' && ok || bad "$cmd --json"
  fi
  out=$(env FLYNN_NVIDIA_PROC="$tmp/none" "$FLYNN" $cmd 2>&1); rc=$?
  [ $rc -eq 1 ] && grep -q "^Result = FAIL$" <<<"$out" && grep -q "no NVIDIA driver is loaded" <<<"$out" && ok || { bad "$cmd without GPU"; echo "$out" >&2; }
  env FLYNN_NVIDIA_PROC="$tmp/none" "$FLYNN" $cmd --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["result"]=="FAIL" and d["reason"]' && ok || bad "$cmd --json"
  "$FLYNN" $cmd --help | grep -q "Result = PASS or Result = FAIL" && ok || bad "$cmd --help"
done
"$FLYNN" bandwidth --mode fast >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "bandwidth --mode fast: expected exit 2"
"$FLYNN" bandwidth --memory device >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "bandwidth --memory device: expected exit 2"
"$FLYNN" doctor --verbose >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "doctor --verbose: expected exit 2"

echo "test_doctor: $pass passed, $fail failed"
[ $fail -eq 0 ]
