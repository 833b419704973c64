#!/usr/bin/env bash
# test_opencl_train.sh — issue 46's proof that the OpenCL backend trains: the seed's CNN (mnist_cnn) on 2000
# Fashion-MNIST images with --device opencl reaches the CPU's test accuracy within 0.01 (on PoCL in CI:
# OpenCL on the CPU, slow but the same kernels a GPU runs), and the errors of --device opencl on a model it
# cannot run, and under MPI, are one line and a non-zero exit. Exits 77 (skipped) without an OpenCL device
# or without the dataset.
# usage: test_opencl_train.sh PATH/TO/flynn
set -u
unset OPENBLAS_CORETYPE
FLYNN=$1
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok, bad, expect
data=/usr/share/datasets/fashion-mnist
if [ ! -d "$data" ]; then echo "SKIP: no $data (apt-get install dataset-fashion-mnist)"; exit 77; fi
if ! "$FLYNN" devices 2>&1 | grep -q "^OpenCL device 0"; then echo "SKIP: no OpenCL device"; exit 77; fi

run() { # run DEVICE: the test accuracy of mnist_cnn trained on DEVICE
  "$FLYNN" train --device "$1" --model mnist_cnn --data fashion-mnist --samples 2000 --test-samples 2000 \
    --epochs 2 --verbose 2 >"$tmp/$1.txt" 2>&1 || { bad "train --device $1: exit $?"; tail -5 "$tmp/$1.txt" >&2; }
  sed -n 's/^test accuracy: \([0-9.]*\).*/\1/p' "$tmp/$1.txt"
}
cpu=$(run cpu)
ocl=$(run opencl)
grep -q "^device: OpenCL device 0: " "$tmp/opencl.txt" && ok || { bad "no OpenCL device line"; head -3 "$tmp/opencl.txt" >&2; }
grep -q "on the OpenCL device" "$tmp/opencl.txt" && ok || bad "the throughput line does not say OpenCL"
echo "test accuracy: CPU $cpu, OpenCL $ocl"
if [ -n "$cpu" ] && [ -n "$ocl" ] && awk -v a="$cpu" -v b="$ocl" 'BEGIN { d = a - b; exit !(d < 0.01 && d > -0.01) }'; then ok
else bad "OpenCL's test accuracy '$ocl' is not within 0.01 of the CPU's '$cpu'"; fi

# a device index no device has: one line, exit 1
expect no-such-device 1 "--device opencl:99: OpenCL cannot be used: .*no OpenCL device 99" -- \
  "$FLYNN" train --device opencl:99 --model mlp --data fashion-mnist --samples 256 --epochs 1
echo "test_opencl_train: $pass passed, $fail failed"
[ $fail -eq 0 ]
