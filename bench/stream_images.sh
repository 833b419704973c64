#!/usr/bin/env bash
# stream_images.sh [FLYNN] [N] — the input pipeline side by side: mnist_cnn
# trained on a folder of N Fashion-MNIST JPEGs (bench/make_image_folder.py)
# held in memory, and streamed from disk with prefetch off, on (2 batches,
# 1 worker) and with 2 workers; once on the 28x28 grayscale originals, once
# on 160x160 RGB copies decoded and resized to 28x28 grayscale per batch.
# Prints samples/s and how long each step waited for its batch.
# COLD=1: every read from the disk, as for a folder larger than the page
# cache (bench/stream_memcg.sh makes one for real, in a memory cgroup):
# before each run the folder's pages are written back and evicted
# (posix_fadvise DONTNEED; `fincore` confirms 0 resident), and each run is
# one epoch, so no image is read twice from the cache.
set -eu
FLYNN=${1:-build/flynn}
N=${2:-6000}
PY=${PYTHON:-/opt/tfkvenv/bin/python}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
here=$(dirname "$0")
$PY "$here/make_image_folder.py" "$W/fm28" "$N" 28 >/dev/null
$PY "$here/make_image_folder.py" "$W/fm160" "$N" 160 >/dev/null
EPOCHS=2
[ "${COLD:-0}" = 1 ] && EPOCHS=1
evict() { # $1: folder; prints how much of it stays in the page cache
  sync
  find "$1" -type f -print0 | $PY -c '
import os, sys
for p in sys.stdin.buffer.read().split(b"\0"):
    if p:
        fd = os.open(p, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)'
  find "$1" -type f -print0 | xargs -0 fincore -b -n -o RES 2>/dev/null | awk '{s += $1} END {printf "%d", s}'
}
T="$FLYNN train --model mnist_cnn --image-size 28x28 --color-mode grayscale --epochs $EPOCHS --batch-size 128 --verbose 2 --device cpu"
printf '%-34s %-20s %12s %16s %12s\n' "data" "mode" "samples/s" "data wait/step" "step"
for set in fm28 fm160; do
  for mode in "in memory" "stream, prefetch 0" "stream, prefetch 2" "stream, 2 workers"; do
    case $mode in
      "in memory") extra="" ;;
      "stream, prefetch 0") extra="--stream --prefetch 0" ;;
      "stream, prefetch 2") extra="--stream --prefetch 2" ;;
      "stream, 2 workers") extra="--stream --prefetch 4 --workers 2" ;;
    esac
    res=""
    [ "${COLD:-0}" = 1 ] && res=", $(evict "$W/$set") bytes cached before the run"
    t0=$(date +%s.%N)
    out=$($T --data "$W/$set" $extra 2>&1)
    t1=$(date +%s.%N)
    sps=$(sed -n 's/^training throughput: \([0-9]*\) samples.*/\1/p' <<<"$out")
    wait=$(sed -n 's/^input pipeline: each step waited \([0-9.]*\) ms.* of a \([0-9.]*\) ms step.*/\1 ms/p' <<<"$out")
    step=$(sed -n 's/^input pipeline: .* of a \([0-9.]*\) ms step.*/\1 ms/p' <<<"$out")
    label="$N JPEG $([ $set = fm28 ] && echo 28x28 gray || echo '160x160 RGB -> 28x28 gray')"
    printf '%-34s %-20s %12s %16s %12s   (run %.0fs incl. loading%s)\n' "$label" "$mode" "${sps:-?}" "${wait:--}" "${step:--}" \
      "$(echo "$t1 - $t0" | bc)" "$res"
  done
done
