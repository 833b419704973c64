#!/usr/bin/env bash
# test_cli_weights.sh — `flynn train` and `evaluate` on a model with several
# inputs (one .npz array per input, named as the inputs) and with sample and
# class weights (--sample-weight, --class-weight K=W,...|balanced), against
# Keras's own evaluate of the same file (tools/weights_fixtures.py wrote
# tests/fixtures/data/weights and its ref.txt).
# usage: test_cli_weights.sh PATH/TO/flynn tests/fixtures/data/weights
set -u
FLYNN=$1
FX=$2
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok, bad, expect
M=$FX/two_inputs.keras
T="$FLYNN train --model $M --verbose 2 --epochs 1 --device cpu"
E="$FLYNN evaluate --model $M --verbose 0 --device cpu"

expect help-train 0 "balanced: n_samples / \(n_classes \* count\) of each class in y" -- $FLYNN train --help
expect help-evaluate 0 "--sample-weight W.npy" -- $FLYNN evaluate --help

# evaluate: several inputs, with and without the test set's sample weights, as Keras evaluated them
ref() { sed -n "s/^$1 //p" "$FX/ref.txt"; }
close() { # close NAME GOT WANT: |got - want| <= 1e-4 (flynn prints 4 decimals)
  if awk -v g="$2" -v w="$3" 'BEGIN { d = g - w; if (d < 0) d = -d; exit !(d <= 1e-4 + 1e-6) }'; then ok
  else bad "$1: flynn $2, Keras $3"; fi
}
out=$($E --data "$FX/two.npz" 2>&1)
close evaluate-two-inputs "$(sed -n 's/^loss: \([0-9.]*\) .*/\1/p' <<<"$out")" "$(ref loss)"
out=$($E --data "$FX/two.npz" --sample-weight "$FX/sw_test.npy" 2>&1)
close evaluate-sample-weight "$(sed -n 's/^loss: \([0-9.]*\) .*/\1/p' <<<"$out")" "$(ref weighted_loss)"
expect evaluate-sw-length 1 "sample_weight has shape \(60,\), expected \(20,\): one weight per sample of x" -- \
  $E --data "$FX/two.npz" --sample-weight "$FX/sw.npy"

# train: the arrays by input name, a test set from <input>_test, the weights in one line
expect train-two-inputs 0 "test accuracy: [0-9.]+ - test loss: [0-9.]+ \(20 test samples\)" -- $T --data "$FX/two.npz"
expect train-sw-line 0 "^sample_weight: $FX/sw.npy, shape \(60,\) \(min [0-9.e-]+, mean [0-9.e-]+, max [0-9.e-]+\)$" -- \
  $T --data "$FX/two.npz" --sample-weight "$FX/sw.npy" --validation-split 0.25
# balanced: 60 samples, classes 24/30/6 -> 60 / (3 * count)
expect train-balanced 0 "^class_weight: \{0: 0.833333, 1: 0.666667, 2: 3.33333\} \(balanced: n_samples / \(n_classes \* count\) over 60 samples of 3 classes\)$" -- \
  $T --data "$FX/two.npz" --class-weight balanced
expect train-class-weight 0 "^class_weight: \{0: 1, 1: 1, 2: 5\} \(classes not named: 1\)$" -- \
  $T --data "$FX/two.npz" --class-weight 2=5
expect class-outside 1 "class_weight has weights for classes 0..4, but model 'two_inputs''s output has 3 classes \(0..2\)" -- \
  $T --data "$FX/two.npz" --class-weight 0=1,4=2
expect class-weight-syntax 2 "--class-weight wants CLASS=WEIGHT" -- $T --data "$FX/two.npz" --class-weight 0:1
expect class-and-sample 2 "give --class-weight or --sample-weight, not both" -- \
  $T --data "$FX/two.npz" --class-weight 0=1 --sample-weight "$FX/sw.npy"
expect class-negative 1 "class_weight\[1\] is -2: a weight must be finite and >= 0" -- \
  $T --data "$FX/two.npz" --class-weight 1=-2
expect evaluate-no-class-weight 2 "unknown option --class-weight" -- $E --data "$FX/two.npz" --class-weight 0=1

# bad data: a missing input array named, a negative sample weight named by its index
expect missing-input 1 "missing_extra.npz: no array for model input 1 'extra': a model with 2 inputs takes one array per input, named as the inputs \('features', 'extra'\), and 'y'; the file holds 'features', 'y'" -- \
  $T --data "$FX/missing_extra.npz"
expect npy-pair-two-inputs 1 "has 2 inputs: give --data FILE.npz with one array per input" -- $T --data "$FX/sw.npy,$FX/sw.npy"
expect sw-negative 1 "fl_fit_multi: sample_weight\[7\] is -0.5: a weight must be finite and >= 0" -- \
  $T --data "$FX/two.npz" --sample-weight "$FX/sw_negative.npy"
echo "test_cli_weights: $pass passed, $fail failed"
[ "$fail" = 0 ]
