#!/usr/bin/env bash
# test_cli_stream.sh — `flynn train --stream` (and --prefetch, --workers,
# --augment, --memory-budget): a folder of images or X.npy,Y.npy read from
# disk batch by batch trains to the same weights as the data in memory, the
# progress line shows the wait for data, a damaged image mid-epoch stops the
# run naming it, and the options are refused where they do not apply.
# usage: test_cli_stream.sh PATH/TO/flynn tests/fixtures/data
set -u
FLYNN=$1
FX=$2
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok, bad, expect
# Two runs here must give the same bits, which flynn promises at a fixed thread count (docs/performance.md): a
# test beside this one (ctest -j) is load that the threads would follow.
export FLYNN_FOLLOW_LOAD=0
T="$FLYNN train --verbose 2 --epochs 1 --device cpu"
IMG=$FX/images/tree

expect help 0 "--stream +DIR, X.npy,Y.npy: read the data from disk" -- $T --help
expect not-own 2 "--stream, --prefetch, --workers and --augment read your own data" -- $T --stream
expect bad-augment 2 "--augment wants flip and/or translate=F" -- $T --data "$IMG" --augment rotate
expect bad-prefetch 2 "value out of range for --prefetch" -- $T --data "$IMG" --prefetch -1
expect evaluate-no-stream 2 "unknown option" -- "$FLYNN" evaluate --data "$IMG" --prefetch 2 --weights x

# X.npy,Y.npy (Python's standard library writes them: uint8 x (40, 6, 6), int32 y (40,))
python3 - "$tmp" <<'PY'
import struct, sys
def npy(path, descr, shape, data):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    d += " " * (64 - (10 + len(d) + 1) % 64) + "\n"
    open(path, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode() + data)
npy(sys.argv[1] + "/x.npy", "|u1", "(40, 6, 6)", bytes((i * 37 + i // 36 * 11) % 256 for i in range(40 * 36)))
npy(sys.argv[1] + "/y.npy", "<i4", "(40,)", b"".join(struct.pack("<i", (i * 7) % 3) for i in range(40)))
PY
NPY="$tmp/x.npy,$tmp/y.npy"
expect npy-stream 0 "x $tmp/x.npy \(40, 6, 6\) \(\|u1, 0.0 MiB, read by rows from disk\), y $tmp/y.npy: 40 samples" -- \
  $T --model mlp --data "$NPY" --stream

# the same weights as in memory, bit for bit: images (with a validation split, 2 workers), and .npy
same() { # same NAME ARGS...: train in memory and streamed, compare the final epoch and the weights
  local name=$1; shift
  rm -rf "$tmp/w_mem" "$tmp/w_str"
  local a b
  a=$($T "$@" --save-weights "$tmp/w_mem" 2>&1 | grep '^final epoch')
  b=$($T "$@" --save-weights "$tmp/w_str" --stream --workers 2 --prefetch 3 2>&1 | grep '^final epoch')
  if [ -z "$a" ] || [ "$a" != "$b" ]; then bad "$name: in memory '$a', streamed '$b'"; return; fi
  for f in "$tmp/w_mem"/*.npy; do
    if ! cmp -s "$f" "$tmp/w_str/$(basename "$f")"; then bad "$name: $(basename "$f") differs"; return; fi
  done
  ok
}
same npy-same --model mlp --data "$NPY" --epochs 2 --batch-size 8 --seed 4
if $T --data "$IMG" --image-size 4x4 2>&1 | grep -q "built without image support"; then
  echo "test_cli_stream: SKIPPED the image cases (no libjpeg/libpng in this build)"
else
  same img-same --data "$IMG" --image-size 8x8 --epochs 2 --batch-size 3 --seed 7 --validation-split 0.2
  expect img-stream 0 "10 images in 3 classes \(0=cats, 1=dogs, 2=fish\), 8x8 rgb, read from disk per batch" -- \
    $T --data "$IMG" --image-size 8x8 --stream
  expect img-data-wait 0 "^10/10 - [0-9]+s - [0-9]+[mu]?s/step, data [0-9]+[mu]?s/step - accuracy" -- \
    $T --data "$IMG" --image-size 8x8 --stream --batch-size 1
  expect img-pipeline 0 "^input pipeline: each step waited [0-9.]+ ms for its batch \([0-9]+% of a [0-9.]+ ms step; prefetch 0, 1 worker\)" -- \
    $T --data "$IMG" --image-size 8x8 --prefetch 0
  expect img-budget 0 "^data: 10 samples would take 0.0 GiB decoded, more than the memory budget of 0.0 GiB \(--memory-budget\): streaming" -- \
    $T --data "$IMG" --image-size 128x128 --memory-budget 1 --model mlp
  expect img-augment 0 "^augment: while training, on the reading threads: random horizontal flip \(RandomFlip\(\"horizontal\"\)\) random translation \(RandomTranslation\) \(seed 0\)" -- \
    $T --data "$IMG" --image-size 8x8 --augment flip,translate=0.1x0.2
  expect img-categorical 0 "^labels: class indices one-hot encoded to \(10, 3\) for categorical_crossentropy \(as each batch is read\)$" -- \
    $T --model "$FX/models/categorical_8x8.keras" --data "$IMG" --stream
  # a damaged image in the middle of the folder: found when its batch is read, named with the epoch and step
  mkdir -p "$tmp/imgs/a" "$tmp/imgs/b"
  for i in 1 2 3 4; do cp "$IMG/cats/c01.png" "$tmp/imgs/a/a$i.png"; cp "$IMG/dogs/d02.png" "$tmp/imgs/b/b$i.png"; done
  head -c 100 "$IMG/cats/c01.png" >"$tmp/imgs/b/b3.png"
  expect img-broken-mid-epoch 1 "epoch 1/1, step [0-9]+/4: image [0-9]+ of 8: $tmp/imgs/b/b3.png: not a readable PNG image" -- \
    $T --data "$tmp/imgs" --image-size 8x8 --batch-size 2 --stream
fi
echo "test_cli_stream: $pass passed, $fail failed"
[ "$fail" = 0 ]
