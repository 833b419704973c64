#!/usr/bin/env bash
# test_cli_data.sh — `flynn train`, `evaluate` and `predict` on the user's own
# data: a folder of images, a CSV table, an .npz archive; one-hot labels for
# a categorical_crossentropy model; and bad data refused with the file, the
# row or image and what was expected.
# usage: test_cli_data.sh PATH/TO/flynn tests/fixtures/data
set -u
FLYNN=$1
FX=$2
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok, bad, expect
T="$FLYNN train --verbose 2 --epochs 1 --device cpu"
IMG=$FX/images/tree

expect help 0 "DIR +images \(.jpg, .png\) in one subfolder per class" -- $T --help
if $T --data "$IMG" --image-size 4x4 2>&1 | grep -q "built without image support"; then
  echo "test_cli_data: SKIPPED the image cases: this flynn was built without libjpeg/libpng (checked that it says so)"
  images=0
else
  images=1
fi
if [ $images = 1 ]; then
# images: a built-in model at the size asked, a Keras validation split
expect img-builtin 0 "data: $IMG: 10 images in 3 classes \(0=cats, 1=dogs, 2=fish\), 8x8 rgb: 10 samples" -- \
  $T --data "$IMG" --image-size 8x8 --batch-size 4
expect img-split 0 "val_accuracy: " -- $T --data "$IMG" --image-size 8x8 --validation-split 0.2 --seed 7
expect img-gray 0 "5x7 grayscale" -- $T --data "$IMG" --image-size 5x7 --color-mode grayscale --model mlp
# a model compiled with categorical_crossentropy (keras.io mnist_convnet's loss) on class indices
expect img-categorical 0 "^labels: class indices one-hot encoded to \(10, 3\) for categorical_crossentropy$" -- \
  $T --model "$FX/models/categorical_8x8.keras" --data "$IMG" --save "$tmp/cat.keras"
expect img-model-size 0 "8x8 rgb \(the model's input size" -- $T --model "$FX/models/categorical_8x8.keras" --data "$IMG"
expect img-evaluate 0 "^loss: [0-9.]+ - accuracy: 0\.[0-9]{4} \(10 samples\)$" -- \
  "$FLYNN" evaluate --model "$tmp/cat.keras" --data "$IMG" --verbose 0
expect img-predict 0 "predictions \(11, 3\) written to $tmp/p.npy" -- \
  "$FLYNN" predict "$tmp/cat.keras" --input "$IMG" --output "$tmp/p.npy"
mkdir -p "$tmp/flat"
cp "$IMG/cats/c01.png" "$IMG/dogs/d01.jpeg" "$tmp/flat/"
expect img-predict-flat 0 "input $tmp/flat: 2 images at 8x8 .*first $tmp/flat/c01.png, last $tmp/flat/d01.jpeg" -- \
  "$FLYNN" predict "$tmp/cat.keras" --input "$tmp/flat" --output "$tmp/p.npy"
expect img-rgba-jpeg 1 "c03.jpg: a JPEG image has no alpha channel" -- $T --data "$IMG" --image-size 4x4 --color-mode rgba
expect img-bad-size 2 "--image-size wants HEIGHTxWIDTH" -- $T --data "$IMG" --image-size 8
mkdir -p "$tmp/imgs/a" "$tmp/imgs/b"
cp "$IMG/cats/c01.png" "$tmp/imgs/a/"
head -c 100 "$IMG/cats/c01.png" >"$tmp/imgs/b/broken.png"
expect img-corrupt 1 "imgs/b/broken.png: not a readable PNG image" -- $T --data "$tmp/imgs" --image-size 4x4
printf 'not an image' >"$tmp/imgs/b/broken.png"
expect img-not-image 1 "broken.png: not an image: unknown content; expected a JPEG .* or PNG" -- $T --data "$tmp/imgs" --image-size 4x4
mkdir -p "$tmp/noclass"
expect img-no-classes 1 "no class subfolders" -- $T --data "$tmp/noclass"
# a built-in model on a folder of 28x28 grayscale PNGs takes their size and colour mode, and says so (issue 43:
# Keras's 256x256 rgb built a 130-million-parameter mnist_cnn); images that differ keep Keras's default, and
# the line names the sizes found
python3 - "$tmp/gray28" <<'PY'
import os, struct, sys, zlib
def png(path, h, w, seed):
    raw = b"".join(b"\0" + bytes((seed * 31 + r * 7 + c * 3) % 256 for c in range(w)) for r in range(h))
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
for k, cls in enumerate(("a", "b")):
    os.makedirs(os.path.join(sys.argv[1], cls), exist_ok=True)
    for i in range(20):
        png(os.path.join(sys.argv[1], cls, "%02d.png" % i), 28, 28, 40 * k + i)
PY
expect img-own-size 0 "data: $tmp/gray28: 40 images in 2 classes \(0=a, 1=b\), 28x28 grayscale \(the images' own size and colour mode" -- \
  $T --data "$tmp/gray28" --batch-size 8
expect img-own-size-params 0 "Total params: 1,198,850 " -- $T --data "$tmp/gray28" --batch-size 8
expect img-mixed-size 0 "256x256 rgb \(Keras's default size: the images differ, 1 9x11 rgb, 1 4x4 grayscale, .*; --image-size HxW" -- \
  $T --data "$IMG" --model mlp --batch-size 4
# --samples cuts an image folder (and any own data) to its first N, and says so; --test-samples without a test
# set is refused (issue 43: --samples was ignored)
expect img-samples 0 "40 images .*; --samples: the first 12 of 40: 12 samples" -- $T --data "$tmp/gray28" --samples 12
expect img-samples-stream 0 "--samples: the first 12 of 40: 12 samples, no test set" -- \
  $T --data "$tmp/gray28" --samples 12 --stream
expect img-test-samples 2 "--test-samples cuts the test set of the data; this --data has none" -- \
  $T --data "$tmp/gray28" --test-samples 5
fi

# a built-in model's classes from the labels, said; a class index under the largest that no label has, warned;
# --classes N to set them, and a label outside them refused (issue 43: a mistyped 12 among 10 classes trained a
# 13-class model without a word)
python3 - "$tmp" <<'PY'
import struct, sys
def npy(path, descr, shape, data):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, repr(tuple(shape)))
    h += " " * (15 - (len(h) + 10) % 16) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + data)
n = 20
npy(sys.argv[1] + "/cx.npy", "<f4", (n, 8, 8), struct.pack("<%df" % (n * 64), *[((i * 7) % 13) / 13.0 for i in range(n * 64)]))
y = [i % 10 for i in range(n)]
y[5] = 12
npy(sys.argv[1] + "/cy_typo.npy", "<i8", (n,), struct.pack("<%dq" % n, *y))
npy(sys.argv[1] + "/cy.npy", "<i8", (n,), struct.pack("<%dq" % n, *[i % 10 for i in range(n)]))
PY
expect classes-from-labels 0 "^classes: 13 \(the largest label, 12, \+ 1; --classes N to set\)$" -- \
  $T --data "$tmp/cx.npy,$tmp/cy_typo.npy" --model mlp
expect classes-missing 0 "^warning: 2 of the 13 classes have no sample in $tmp/cy_typo.npy \(classes 10, 11\): a mistyped label\?" -- \
  $T --data "$tmp/cx.npy,$tmp/cy_typo.npy" --model mlp
expect classes-refused 1 "label y\[5\] is 12, expected an integer in \[0, 10\) \(--classes 10\)" -- \
  $T --data "$tmp/cx.npy,$tmp/cy_typo.npy" --model mlp --classes 10
expect classes-set 0 "^classes: 12 \(--classes\)$" -- $T --data "$tmp/cx.npy,$tmp/cy.npy" --model mlp --classes 12
expect classes-set-model 0 "dense_2 \(Dense\) .*\(None, 12\)" -- $T --data "$tmp/cx.npy,$tmp/cy.npy" --model mlp --classes 12
expect classes-all-seen 0 "^classes: 10 \(the largest label, 9" -- $T --data "$tmp/cx.npy,$tmp/cy.npy" --model mlp
out=$($T --data "$tmp/cx.npy,$tmp/cy.npy" --model mlp 2>&1)
grep -q "^warning: .* no sample" <<<"$out" && bad "classes-all-seen: warned with every class present" || ok
expect samples-npy 0 "; --samples: the first 8 of 20: 8 samples" -- $T --data "$tmp/cx.npy,$tmp/cy.npy" --model mlp --samples 8

# CSV: the label by name, text columns one-hot, a regression model and a categorical one
printf 'a,color,c,t\n1,red,3,0.5\n3,blue,5,1.5\n5,red,7,2\n' >"$tmp/reg.csv"
printf 'a,b,c,t\n1,2,3,0.5\n3,4,5,1.5\n5,6,7,2\n' >"$tmp/num.csv"
expect csv-needs-label 2 "--data FILE.csv needs --label COLUMN" -- $T --data "$tmp/num.csv"
expect csv-regression 0 "3 numeric and 0 categorical columns -> x \(3, 3\); label 't': numbers" -- \
  $T --model "$FX/models/mlp_csv.keras" --data "$tmp/num.csv" --label t
expect csv-int 0 "as integer codes" -- $T --model "$FX/models/mlp_csv.keras" --data "$tmp/reg.csv" --label t --categorical int
expect csv-onehot-shape 1 "the model takes samples of shape \(3\), the data set's are 4\)" -- \
  $T --model "$FX/models/mlp_csv.keras" --data "$tmp/reg.csv" --label t
printf 'a,b,c,kind\n1,2,3,0\n3,4,5,1\n5,6,7,2\n' >"$tmp/cls.csv"
expect csv-categorical 0 "one-hot encoded to \(3, 3\)" -- $T --model "$FX/models/categorical_csv.keras" --data "$tmp/cls.csv" --label kind
printf 'a,b,c,kind\n1,2,3,0\n3,4,5,7\n5,6,7,2\n' >"$tmp/range.csv"
expect csv-label-range 1 "range.csv: .*label 1 is 7, expected an integer in \[0, 3\)" -- \
  $T --model "$FX/models/categorical_csv.keras" --data "$tmp/range.csv" --label kind
printf 'a,b,kind\n1,2,x\n3,y\n' >"$tmp/ragged.csv"
expect csv-ragged 1 "ragged.csv: line 3 has 2 fields, expected 3 \(the header's count\)" -- $T --data "$tmp/ragged.csv" --label kind --model mlp
printf 'a,b,kind\n1,2,x\n3,,y\n' >"$tmp/missing.csv"
expect csv-missing 1 "missing.csv: line 3, column 'b' \(field 2\): a missing value" -- $T --data "$tmp/missing.csv" --label kind --model mlp
expect csv-no-column 1 "no column 'species' for the label" -- $T --data "$tmp/num.csv" --label species --model mlp
printf 'a,b,kind\n1,2,x\n3,4,y\n' >"$tmp/two.csv"
expect csv-builtin-mlp 0 "label 'kind': 2 classes \(0=x, 1=y\)" -- $T --data "$tmp/two.csv" --label kind --model mlp
expect csv-predict 0 "predictions \(3, 1\) written" -- "$FLYNN" predict "$FX/models/mlp_csv.keras" --input "$tmp/num.csv" --label t --output "$tmp/p2.npy"
expect label-not-csv 2 "--label is for --data FILE.csv" -- $T --data "$IMG" --label kind

# NPZ: the keras.datasets layout has a test set; x and y of different lengths
expect npz-test-set 0 "test accuracy: 0\.[0-9]{4} - test loss: [0-9.]+ \(2 test images\)" -- $T --data "$FX/npz/keras_layout.npz" --model mlp
expect npz-lengths 1 "lengths.npz: 'x' has shape \(5, 3\) \(5 samples\), .*'y' has shape \(4,\) \(4\)" -- $T --data "$FX/npz/lengths.npz" --model mlp
expect npz-positional 1 "expected arrays 'x' and 'y' .*the file holds 'arr_0', 'arr_1'" -- $T --data "$FX/npz/positional.npz"
head -c 300 "$FX/npz/xy_deflated.npz" >"$tmp/cut.npz"
expect npz-truncated 1 "cut.npz: .*not a .npz zip archive" -- $T --data "$tmp/cut.npz"
expect npz-predict 0 "predictions \(5, 1\)" -- "$FLYNN" predict "$FX/models/mlp_csv.keras" --input "$FX/npz/xy_stored.npz" --output "$tmp/p3.npy"

echo "test_cli_data: $pass passed, $fail failed"
[ $fail -eq 0 ]
