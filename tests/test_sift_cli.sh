#!/usr/bin/env bash
# test_sift_cli.sh — `flynn sift` and `flynn match` end to end:
# (1) usage errors (exit 2, the option named), a missing file, a non-image file, an empty folder (exit 1,
# the file named); (2) `flynn sift` on skimage's camera.png: the summary line, the .npz's keys, shapes and
# dtypes (read by NumPy, tests/sift_check.py), --uint8 holding the same values, --nfeatures, --json equal
# to the .npz, a JPEG, a folder streamed into --out-dir files and into one --out archive keyed
# "<name>/keypoints" with the same features; (3) `flynn match` on skimage's motorcycle_left.png and
# motorcycle_right.png: more than 100 homography inliers, --json consistent with the summary (every
# inlier within 3 px of H x_A), the SVG well-formed with both images embedded byte for byte and one line
# per match, and, where Chromium is installed, its screenshot showing the images and the green lines.
# Parts 2 and 3 need python3-skimage's images and NumPy in /usr/bin/python3 (scripts/setup.sh --test
# installs them): without them they are skipped and the test exits 77 (skipped) after part 1 passes;
# they are skipped too, with a message, while `flynn sift` says SIFT is not implemented.
# usage: test_sift_cli.sh PATH/TO/flynn
set -u
FLYNN=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/cli_lib.sh"
PY=/usr/bin/python3
check() { "$PY" "$here/sift_check.py" "$@"; }
SK=/usr/lib/python3/dist-packages/skimage/data

# (1) usage and failures
expect sift-help 0 "usage: flynn sift IMAGE\|DIR\.\.\." -- "$FLYNN" sift --help
expect match-help 0 "usage: flynn match A B" -- "$FLYNN" match --help
expect main-help 0 "sift +SIFT keypoints and descriptors" -- "$FLYNN" --help
expect sift-no-input 2 "flynn sift: missing IMAGE or DIR" -- "$FLYNN" sift
expect sift-unknown 2 "unknown option --bogus" -- "$FLYNN" sift --bogus a.png
expect sift-nfeatures 2 "--nfeatures wants a whole number >= 0, got -3" -- "$FLYNN" sift --nfeatures -3 a.png
expect sift-layers 2 "--layers wants a whole number >= 1, got 0" -- "$FLYNN" sift --layers=0 a.png
expect sift-sigma 2 "--sigma wants a number > 0, got abc" -- "$FLYNN" sift --sigma abc a.png
expect sift-contrast 2 "--contrast-threshold wants a number > 0, got -1" -- "$FLYNN" sift a.png --contrast-threshold -1
expect sift-no-value 2 "missing value for --out" -- "$FLYNN" sift a.png --out
expect sift-exclusive 2 "--out, --out-dir and --json exclude each other" -- "$FLYNN" sift a.png --out a.npz --json
expect sift-device 2 "--device wants auto, cpu, gpu or opencl, got tpu" -- "$FLYNN" sift a.png --device tpu
expect sift-usage-hint 2 "see \`flynn sift --help\`" -- "$FLYNN" sift --edge-threshold 0 a.png
expect match-none 2 "missing A and B, the two images" -- "$FLYNN" match
expect match-one 2 "missing B, the second image" -- "$FLYNN" match a.png
expect match-three 2 "two images, A and B; also got c.png" -- "$FLYNN" match a.png b.png c.png
expect match-geometry 2 "--geometry wants homography, fundamental or none, got affine" -- "$FLYNN" match a.png b.png --geometry affine
expect match-ratio 2 "--ratio wants a number > 0, got 0" -- "$FLYNN" match a.png b.png --ratio 0
expect match-outliers 2 "--outliers draws into the SVG: give --svg OUT.svg too" -- "$FLYNN" match a.png b.png --outliers
expect match-threshold 2 "--threshold needs a model" -- "$FLYNN" match a.png b.png --geometry none --threshold 2
expect match-svg-input 2 "the SVG would replace an input image: b.png" -- "$FLYNN" match a.png b.png --svg b.png
expect sift-missing 1 "flynn sift: cannot read $tmp/nope.png: No such file or directory" -- "$FLYNN" sift "$tmp/nope.png"
printf 'these are not pixels\n' > "$tmp/notes.png"
expect sift-not-image 1 "flynn sift: $tmp/notes.png: not an image" -- "$FLYNN" sift "$tmp/notes.png"
mkdir "$tmp/empty" && printf 'x' > "$tmp/empty/readme.txt"
expect sift-empty-dir 1 "the folder $tmp/empty holds no .png, .jpg or .jpeg image" -- "$FLYNN" sift "$tmp/empty"
expect match-missing 1 "cannot read $tmp/nope.png|$tmp/nope.png" -- "$FLYNN" match "$tmp/nope.png" "$tmp/notes.png"
expect match-not-image 1 "$tmp/notes.png: not an image" -- "$FLYNN" match "$tmp/notes.png" "$tmp/notes.png"

skip=""
if [ ! -f "$SK/camera.png" ] || [ ! -f "$SK/motorcycle_left.png" ] || [ ! -f "$SK/motorcycle_right.png" ]; then
  skip="skimage's images are missing ($SK; Debian's python3-skimage)"
elif ! "$PY" -c 'import numpy, PIL' 2>/dev/null; then
  skip="$PY has no NumPy or Pillow"
fi
if [ -n "$skip" ]; then
  echo "test_sift_cli: $skip: the SIFT and match checks are skipped"
  echo "test_sift_cli: $pass passed, $fail failed"
  [ "$fail" = 0 ] && exit 77
  exit 1
fi

# (2) flynn sift
cam=$SK/camera.png
expect sift-summary 0 "^$cam: [0-9]+ keypoints, 512x512, [0-9.]+ ms$" -- "$FLYNN" sift "$cam"
n=$("$FLYNN" sift "$cam" | sed -n 's/.*: \([0-9]*\) keypoints.*/\1/p')
[ "${n:-0}" -gt 300 ] && ok || bad "camera.png: ${n:-no} keypoints, expected hundreds"
expect sift-out 0 "1 image, $n keypoints written to $tmp/cam.npz" -- "$FLYNN" sift "$cam" --out "$tmp/cam.npz"
out=$(check keys "$tmp/cam.npz" keypoints octave descriptors 2>&1) && ok || bad "cam.npz keys: $out"
out=$(check npz "$tmp/cam.npz" "" "$n" 512 512 float32 2>&1) && ok || bad "cam.npz: $out"
expect sift-uint8 0 "$n keypoints" -- "$FLYNN" sift "$cam" --uint8 --out "$tmp/cam8.npz"
out=$(check npz "$tmp/cam8.npz" "" "$n" 512 512 uint8 2>&1) && ok || bad "cam8.npz: $out"
out=$(check same "$tmp/cam.npz" "" "$tmp/cam8.npz" "" 2>&1) && ok || bad "--uint8 against float32: $out"
m=$("$FLYNN" sift "$cam" --nfeatures 200 | sed -n 's/.*: \([0-9]*\) keypoints.*/\1/p')
[ "${m:-0}" -ge 200 ] && [ "${m:-0}" -le 210 ] && ok || bad "--nfeatures 200 kept ${m:-no} keypoints"
"$FLYNN" sift "$cam" --json > "$tmp/cam.json" 2> "$tmp/err" && ok || bad "--json: $(cat "$tmp/err")"
out=$(check json "$tmp/cam.json" "$tmp/cam.npz" 2>&1) && ok || bad "--json against the .npz: $out"
# a folder: a PNG, a JPEG (camera.png re-encoded by Pillow) and a file that is no image, streamed
mkdir "$tmp/imgs"
cp "$cam" "$tmp/imgs/b_camera.png"
cp "$SK/motorcycle_left.png" "$tmp/imgs/a_moto.PNG"
"$PY" -c 'import sys; from PIL import Image; Image.open(sys.argv[1]).save(sys.argv[2], quality=95)' "$cam" "$tmp/imgs/c_camera.jpg"
printf 'x' > "$tmp/imgs/notes.txt"
out=$("$FLYNN" sift "$tmp/imgs" --out-dir "$tmp/feat" 2>&1) && ok || bad "--out-dir: $out"
grep -qE "^$tmp/imgs/a_moto.PNG: [0-9]+ keypoints, 741x500, .* -> $tmp/feat/a_moto.npz$" <<<"$out" && ok || bad "--out-dir lines: $out"
[ "$(grep -c ' keypoints, ' <<<"$out")" = 3 ] && [ "$(grep -n ' keypoints, ' <<<"$out" | head -1 | grep -c a_moto)" = 1 ] \
  && ok || bad "--out-dir: expected 3 images in sorted order: $out"
[ "$(ls "$tmp/feat")" = "$(printf 'a_moto.npz\nb_camera.npz\nc_camera.npz')" ] && ok || bad "--out-dir files: $(ls "$tmp/feat")"
out=$(check same "$tmp/feat/b_camera.npz" "" "$tmp/cam.npz" "" 2>&1) && ok || bad "the folder's camera: $out"
nj=$("$FLYNN" sift "$tmp/imgs/c_camera.jpg" | sed -n 's/.*: \([0-9]*\) keypoints.*/\1/p')
out=$(check npz "$tmp/feat/c_camera.npz" "" "${nj:-0}" 512 512 float32 2>&1) && ok || bad "the JPEG's features: $out"
expect sift-archive 0 "3 images, [0-9]+ keypoints written to $tmp/all.npz" -- "$FLYNN" sift "$tmp/imgs" --out "$tmp/all.npz"
out=$(check keys "$tmp/all.npz" a_moto.PNG/keypoints a_moto.PNG/octave a_moto.PNG/descriptors b_camera.png/keypoints \
  b_camera.png/octave b_camera.png/descriptors c_camera.jpg/keypoints c_camera.jpg/octave c_camera.jpg/descriptors 2>&1) \
  && ok || bad "the archive's keys: $out"
out=$(check same "$tmp/all.npz" b_camera.png/ "$tmp/cam.npz" "" 2>&1) && ok || bad "the archive's camera: $out"
out=$(check same "$tmp/all.npz" a_moto.PNG/ "$tmp/feat/a_moto.npz" "" 2>&1) && ok || bad "the archive's moto: $out"
cp "$cam" "$tmp/empty/b_camera.png"
expect sift-collision 2 "two images would be written as b_camera.png in the archive" -- \
  "$FLYNN" sift "$tmp/imgs" "$tmp/empty" --out "$tmp/x.npz"
expect sift-unwritable 1 "$tmp/no/such/out.npz" -- "$FLYNN" sift "$cam" --out "$tmp/no/such/out.npz"
[ ! -e "$tmp/x.npz" ] && ok || bad "a refused --out left $tmp/x.npz"

# (3) flynn match
L=$SK/motorcycle_left.png R=$SK/motorcycle_right.png
out=$("$FLYNN" match "$L" "$R" --svg "$tmp/m.svg" 2>&1); rc=$?
[ $rc = 0 ] && ok || bad "match: exit $rc: $out"
re="^$L: ([0-9]+) keypoints, $R: ([0-9]+) keypoints, ([0-9]+) matches after the ratio test, ([0-9]+) inliers \(homography\)$"
line=$(grep -E "$re" <<<"$out")
if [[ $line =~ $re ]]; then
  na=${BASH_REMATCH[1]} nb=${BASH_REMATCH[2]} k=${BASH_REMATCH[3]} i=${BASH_REMATCH[4]}
  ok
  [ "$i" -gt 100 ] && [ "$i" -le "$k" ] && ok || bad "match: $i inliers of $k matches, expected more than 100"
else
  na=0 nb=0 k=0 i=0
  bad "match: no summary line: $out"
fi
grep -q "^drawn to $tmp/m.svg$" <<<"$out" && ok || bad "match: $out"
out=$(check svg "$tmp/m.svg" "$L" "$R" image/png "$k" "$i" 0 2>&1) && ok || bad "the SVG: $out"
"$FLYNN" match "$L" "$R" --json > "$tmp/m.json" 2> "$tmp/err" && ok || bad "match --json: $(cat "$tmp/err")"
out=$(check matchjson "$tmp/m.json" "$na" "$nb" "$k" "$i" 2>&1) && ok || bad "match --json: $out"
out=$("$FLYNN" match "$L" "$R" --svg "$tmp/mo.svg" --outliers --cross-check 2>&1) && ok || bad "--outliers: $out"
read -r k2 i2 < <(sed -n 's/.* \([0-9]*\) matches after the ratio test and the cross check, \([0-9]*\) inliers.*/\1 \2/p' <<<"$out")
out=$(check svg "$tmp/mo.svg" "$L" "$R" image/png "${k2:-0}" "${i2:-0}" 1 2>&1) && ok || bad "the SVG with outliers: $out"
expect match-fundamental 0 "[0-9]+ matches after the ratio test, [0-9]{3,} inliers \(fundamental\)" -- \
  "$FLYNN" match "$L" "$R" --geometry fundamental
expect match-none 0 "[0-9]+ matches after the ratio test$" -- "$FLYNN" match "$L" "$R" --geometry none --nfeatures 500
expect match-jpeg 0 "inliers \(homography\)" -- "$FLYNN" match "$tmp/imgs/c_camera.jpg" "$cam" --svg "$tmp/j.svg"
jl=$(grep -o 'href="data:[a-z/]*;' "$tmp/j.svg" | tr '\n' ' ')
[ "$jl" = 'href="data:image/jpeg; href="data:image/png; ' ] && ok || bad "the JPEG's data URI: $jl"
# too few matches for a model: an image against a featureless one
"$PY" -c 'import sys; from PIL import Image; Image.new("L", (64, 64), 128).save(sys.argv[1])' "$tmp/flat.png"
expect match-no-model 1 "flynn match: fl_find_geometry: 0 matches, a homography needs at least 4" -- \
  "$FLYNN" match "$cam" "$tmp/flat.png"
expect match-no-model-line 1 "$tmp/flat.png: 0 keypoints, 0 matches after the ratio test, no homography$" -- \
  "$FLYNN" match "$cam" "$tmp/flat.png"
expect match-unwritable 1 "$tmp/no/m.svg" -- "$FLYNN" match "$L" "$R" --svg "$tmp/no/m.svg" --nfeatures 300

# a real browser draws the SVG: the images are there and the inlier lines green
if command -v chromium >/dev/null; then
  read -r w h < <(sed -n 's/^<svg [^>]*width="\([0-9]*\)" height="\([0-9]*\)".*/\1 \2/p' "$tmp/m.svg")
  cout=$(timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars \
         --force-device-scale-factor=1 --user-data-dir="$tmp/chromium" --screenshot="$tmp/m.png" \
         --window-size="$w,$h" "file://$tmp/m.svg" 2>&1); crc=$?
  if [ $crc -ne 0 ] || [ ! -s "$tmp/m.png" ]; then
    bad "chromium exit $crc, no screenshot of m.svg: $(tail -3 <<<"$cout")"
  else
    out=$(check shot "$tmp/m.svg" "$tmp/m.png" 2>&1) && ok || bad "the screenshot: $out"
  fi
else
  echo "test_sift_cli: chromium is not installed (scripts/setup.sh installs it): the browser check is skipped"
fi

echo "test_sift_cli: $pass passed, $fail failed"
[ "$fail" = 0 ]
