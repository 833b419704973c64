#!/usr/bin/env bash
# test_cli.sh — end-to-end checks of the `flynn` command: help texts, the
# summary, a short training run with saved weights, evaluate on those
# weights, device selection (on a machine with a usable GPU: that --device gpu
# and auto use it; without one: the refusal), errors on bad input and
# $OMP_NUM_THREADS.
# usage: test_cli.sh PATH/TO/flynn
set -u
# OPENBLAS_CORETYPE (some images set it) adds a note to the device line and
# keeps flynn from replacing a fallback core; these tests expect neither.
unset OPENBLAS_CORETYPE
FLYNN=$1
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok, bad, expect

expect help 0 "train +train a built-in model" -- "$FLYNN" --help
expect train-help 0 "--device D +auto" -- "$FLYNN" train --help
expect eval-help 0 "--weights DIR" -- "$FLYNN" evaluate --help
expect summary-help 0 "summary table" -- "$FLYNN" summary --help
expect no-command 2 "usage: flynn <command>" -- "$FLYNN"
expect unknown-command 2 "unknown command 'fly'" -- "$FLYNN" fly
expect summary 0 "Total params: 1,199,882 \(4.58 MB\)" -- "$FLYNN" summary
expect summary-mlp 0 "Total params: 669,706" -- "$FLYNN" summary --model mlp
expect unknown-model 1 "unknown model 'resnet'" -- "$FLYNN" summary --model resnet
expect unknown-option 2 "unknown option --epoch" -- "$FLYNN" train --epoch 3
expect bad-int 2 "expected an integer, got x" -- "$FLYNN" train --epochs x
expect bad-device 2 "--device wants auto, cpu, gpu, opencl or opencl:N" -- "$FLYNN" train --device tpu
expect bad-opencl-index 2 "--device wants auto, cpu, gpu, opencl or opencl:N, got opencl:x" -- "$FLYNN" train --device opencl:x
expect bad-data 2 "--data wants" -- "$FLYNN" train --data imagenet
expect missing-data 1 "$tmp/nothing.*dataset-fashion-mnist" -- "$FLYNN" train --data "fashion-mnist:$tmp/nothing"
# a usable GPU or not (`flynn devices` exits 0 with one, 1 without): the
# suite runs on both kinds of machine and checks what each should do
"$FLYNN" devices >"$tmp/devices.txt" 2>&1; dev_rc=$?
case $dev_rc in
  0) gpu=$(grep -q "CUDA capable device" "$tmp/devices.txt" && echo 1 || echo 0) # PASS may be an OpenCL GPU's
     echo "test_cli: a usable GPU: checking --device gpu and auto on it" ;;
  1) gpu=0; echo "test_cli: no usable GPU ($(grep -m1 "^No usable CUDA device" "$tmp/devices.txt" | cut -c1-100)...): checking the refusal" ;;
  *) gpu=0; bad "devices: exit $dev_rc, expected 0 (a GPU) or 1 (none)"; tail -5 "$tmp/devices.txt" >&2 ;;
esac
if [ $gpu = 1 ]; then
  expect gpu-used 0 "^device: GPU " -- "$FLYNN" train --device gpu --samples 256 --test-samples 100 --epochs 1
else
  expect gpu-refused 1 "--device gpu: the GPU cannot be used: .*(driver|plugin)" -- "$FLYNN" train --device gpu --samples 100
  grep -qE "^Result = FAIL$" "$tmp/devices.txt" && ok || { bad "devices without a GPU lacks 'Result = FAIL'"; tail -3 "$tmp/devices.txt" >&2; }
fi
expect gpu-disabled 1 "FLYNN_DISABLE_GPU" -- env FLYNN_DISABLE_GPU=1 "$FLYNN" train --device gpu --samples 100

# a short run: device line, Keras one-line-per-epoch output when not a terminal, results
out=$("$FLYNN" train --samples 600 --epochs 2 --batch-size 64 --seed 3 --save-weights "$tmp/w" 2>&1); rc=$?
if [ $rc -ne 0 ]; then bad "train: exit $rc"; echo "$out" >&2; else ok; fi
dev_pat="^device: CPU \([0-9]+ threads\); GPU not used: "
[ $gpu = 1 ] && dev_pat="^device: GPU "
for pat in "$dev_pat" "^Epoch 1/2$" "^10/10 - [0-9]+s - [0-9]+(ms|s|us)/step - accuracy: 0\.[0-9]{4} - loss: [0-9.]+$" \
           "^test accuracy: 0\.[0-9]{4} - test loss: [0-9.]+ \(10000 test images\)$" "^training throughput: [0-9]+ samples/s" \
           "^weights saved to $tmp/w$"; do
  grep -qE -- "$pat" <<<"$out" && ok || { bad "train output lacks /$pat/"; echo "$out" | tail -8 >&2; }
done
[ -f "$tmp/w/conv2d_1.kernel.npy" ] && [ -f "$tmp/w/dense_1.bias.npy" ] && ok || bad "weights files missing"
train_acc=$(grep -oE "^test accuracy: [0-9.]+" <<<"$out")

# evaluate the saved weights: the same test accuracy
out=$("$FLYNN" evaluate --weights "$tmp/w" --verbose 0 2>&1); rc=$?
[ $rc -eq 0 ] && ok || { bad "evaluate: exit $rc"; echo "$out" >&2; }
[ "$(grep -oE "^test accuracy: [0-9.]+" <<<"$out")" = "$train_acc" ] && ok || bad "evaluate accuracy '$out' differs from training's '$train_acc'"
expect eval-wrong-model 1 "mlp|dense" -- "$FLYNN" evaluate --weights "$tmp/w" --model mlp
expect eval-missing 1 "$tmp/none/conv2d.kernel.npy" -- "$FLYNN" evaluate --weights "$tmp/none"
expect eval-no-weights 2 "--weights DIR \(or --model FILE\) is required" -- "$FLYNN" evaluate

# $OMP_NUM_THREADS is the default thread count; --threads wins over it
out=$(OMP_NUM_THREADS=1 "$FLYNN" train --samples 128 --epochs 1 --test-samples 100 --verbose 0 2>&1)
grep -qE "on the CPU, 1 threads," <<<"$out" && ok || { bad "OMP_NUM_THREADS=1 not honoured"; echo "$out" | tail -3 >&2; }
out=$(OMP_NUM_THREADS=1 "$FLYNN" train --threads 2 --samples 128 --epochs 1 --test-samples 100 --verbose 0 2>&1)
grep -qE "on the CPU, 2 threads," <<<"$out" && ok || { bad "--threads 2 did not win over OMP_NUM_THREADS=1"; echo "$out" | tail -3 >&2; }

# same seed twice: the same results, to the last digit (on the CPU; a GPU's
# convolution algorithms need not be bit-reproducible)
a=$("$FLYNN" train --device cpu --samples 300 --epochs 1 --seed 5 --verbose 0 2>&1 | head -1)
b=$("$FLYNN" train --device cpu --samples 300 --epochs 1 --seed 5 --verbose 0 2>&1 | head -1)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "same seed, different results: '$a' vs '$b'"

echo "test_cli: $pass passed, $fail failed"
[ $fail -eq 0 ]
