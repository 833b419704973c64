#!/usr/bin/env bash
# test_sift_opencv.sh — issue 47's measure of flynn's SIFT against OpenCV 4.x's cv::SIFT (Debian 12's
# python3-opencv 4.6): tests/sift/make_images.py writes skimage's photos (the longer side shrunk to 512 px)
# and 30 known warps of two of them (rotation, scale, perspective, blur, JPEG, illumination) with their
# homographies; tests/sift/compare_opencv.py then
#   (1) with OpenCV standing in for flynn (--self-test, through flynn's npz layout) must PASS every check;
#   (2) the stand-in with its positions moved by 0.3 px must FAIL the position check, and with half its
#       sizes times 1.4 must FAIL repeatability and matching score: the checks can fail;
#   (3) `flynn sift IMG --out F.npz` against OpenCV must PASS: counts within 5%, the pairs' positions
#       within 0.1 px (95th percentile), 90% of OpenCV's keypoints paired, repeatability and matching score
#       on every warped pair at least OpenCV's - 0.01.
# Exits 77 (skipped) when /usr/bin/python3 lacks cv2 or skimage (scripts/setup.sh --test installs
# python3-opencv and python3-skimage), and after (1) and (2) while `flynn sift` is not built yet.
# FLYNN_SIFT_STANDIN=1 runs (3) with the stand-in too (the test's time with a flynn as fast as OpenCV).
# FLYNN_SIFT_KEEP=DIR keeps the reports (JSON, markdown, the stereo pair's matches PNG) in DIR.
# usage: test_sift_opencv.sh PATH/TO/flynn
set -u
FLYNN=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/cli_lib.sh" # $tmp, ok, bad, expect
PY=${FLYNN_SIFT_PYTHON:-/usr/bin/python3}
if [ ! -x "$PY" ]; then echo "SKIP: no $PY (Debian's python3, with python3-opencv and python3-skimage)"; exit 77; fi
if ! "$PY" -c 'import cv2, numpy' 2>/dev/null; then
  echo "SKIP: $PY has no cv2 (apt-get install python3-opencv, or scripts/setup.sh --test)"; exit 77
fi
if ! "$PY" -c 'import skimage' 2>/dev/null; then
  echo "SKIP: $PY has no skimage, whose photos are the test images (apt-get install python3-skimage, or scripts/setup.sh --test)"
  exit 77
fi
cmp=("$PY" "$here/sift/compare_opencv.py" "$tmp/img")
out=${FLYNN_SIFT_KEEP:-$tmp}
mkdir -p "$out"
start=$(date +%s)

"$PY" "$here/sift/make_images.py" "$tmp/img" --max-side 512 --warp-bases camera,coffee >"$tmp/make.txt" 2>&1 \
  && ok || { bad "make_images.py: exit $?"; tail -5 "$tmp/make.txt" >&2; }
[ -f "$tmp/img/manifest.json" ] || { echo "test_sift_opencv: no images, nothing to compare"; exit 1; }

# (1) OpenCV against itself through the npz: everything passes, with the reports written
expect self-test 0 "compare_opencv: PASS" -- "${cmp[@]}" --self-test --quiet \
  --json "$out/self.json" --markdown "$out/self.md" --matches-png "$out/self_matches.png"
"$PY" - "$out/self.json" "$out/self_matches.png" <<'PY' && ok || bad "self-test report: see above"
import json, sys
r = json.load(open(sys.argv[1]))
png = open(sys.argv[2], "rb").read()
assert r["pass"] and r["self_test"], "self-test JSON does not say pass"
for nf, p in r["pooled"].items():
    assert p["ratio"] == 1.0 and p["paired_fraction"] == 1.0 and p["position_px"]["max"] == 0.0, (nf, p)
    assert p["descriptors_identical"] == 1.0, (nf, p)
assert len(r["pairs"]) == 30 and all(x["opencv"] == x["flynn"] for x in r["pairs"]), "pairs differ"
assert all(0.3 < x["opencv"]["repeatability"] <= 1 for x in r["pairs"]), "implausible repeatability"
assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) < 300000, "matches PNG: %d bytes" % len(png)
assert r["stereo"]["flynn"]["inliers"] > 100, r["stereo"]
PY

# (2) the checks can fail
sub=(--only camera,camera__rot15,camera__scale0.5,camera__persp --quiet)
expect perturbed 1 "positions +p95 <= 0.1 px +FAIL" -- "${cmp[@]}" --self-test --perturb 0.3 "${sub[@]}"
expect perturbed-counts-pass 1 "counts +within 5% +PASS" -- "${cmp[@]}" --self-test --perturb 0.3 "${sub[@]}"
expect wrong-sizes 1 "repeatability +>= OpenCV's - 0.01 +FAIL" -- "${cmp[@]}" --self-test --scale-sizes 1.4 "${sub[@]}"
expect scrambled 1 "matching_score +>= OpenCV's - 0.01 +FAIL" -- "${cmp[@]}" --self-test --scramble-descriptors 0.2 "${sub[@]}"

# (3) flynn against OpenCV
if [ "${FLYNN_SIFT_STANDIN:-0}" = 1 ]; then
  side=(--self-test); echo "test_sift_opencv: FLYNN_SIFT_STANDIN=1: OpenCV stands in for flynn in (3)"
else
  side=(--flynn "$FLYNN")
  if [ ! -x "$FLYNN" ]; then bad "no flynn binary at $FLYNN"; echo "test_sift_opencv: $pass passed, $fail failed"; exit 1; fi
fi
"${cmp[@]}" "${side[@]}" --json "$out/flynn.json" --markdown "$out/flynn.md" \
  --matches-png "$out/flynn_matches.png" >"$tmp/flynn.txt" 2>&1
rc=$?
sed -n '/^summary/,$p' "$tmp/flynn.txt"
if [ $rc = 0 ]; then ok; else bad "flynn against OpenCV: exit $rc"; grep -E "FAIL|failed|compare_opencv:" "$tmp/flynn.txt" | head -40 >&2; fi
echo "test_sift_opencv: $pass passed, $fail failed ($(( $(date +%s) - start )) s)"
[ $fail -eq 0 ]
