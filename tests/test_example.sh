#!/usr/bin/env bash
# test_example.sh — runs examples/mnist_cnn.c (the C API as a user writes
# it) and checks its exit status and that it learned: the test accuracy must
# reach MIN_ACCURACY. ctest's PASS_REGULAR_EXPRESSION ignored the exit status
# and accepted any accuracy (0.10, chance, included).
# usage: test_example.sh PATH/TO/mnist_cnn_example MIN_ACCURACY ARGS...
set -u
prog=$1 min=$2; shift 2
out=$("$prog" "$@" 2>&1); rc=$?
echo "$out" | tail -3
[ $rc -eq 0 ] || { echo "FAIL: $prog exited $rc, expected 0" >&2; exit 1; }
acc=$(grep -oE "test accuracy: [0-9.]+" <<<"$out" | grep -oE "[0-9.]+$")
[ -n "$acc" ] || { echo "FAIL: no 'test accuracy: X' line in the output" >&2; exit 1; }
if awk -v a="$acc" -v m="$min" 'BEGIN { exit !(a >= m) }'; then
  echo "test_example: test accuracy $acc >= $min"
else
  echo "FAIL: test accuracy $acc < $min: the example did not learn what it learns with a working trainer" >&2
  exit 1
fi
