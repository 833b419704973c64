#!/usr/bin/env bash
# stream_memcg.sh [FLYNN] [N] [LIMIT_MB] — training on a folder of images
# that is larger than the page cache it may use, for real: the run goes into
# a memory cgroup (v1 or v2; needs root) whose limit, which the kernel charges
# with the process's memory and the page cache of the files it reads, is
# smaller than the folder's page-cache footprint (each JPEG takes at least one
# 4 KiB page). Epoch 2 must then read most images from the disk again. It
# trains mnist_cnn on N Fashion-MNIST JPEGs (28x28, bench/make_image_folder.py)
# for 2 epochs with --stream, prefetch 0 and prefetch 2, and prints the
# throughput, how long each step waited for its batch, the cgroup's peak
# memory and how much of the folder was cached at the end.
# Default N = 60000 (all of Fashion-MNIST's training images, ~240 MB of page
# cache) and LIMIT_MB = 128.
set -eu
FLYNN=$(realpath "${1:-build/flynn}")
N=${2:-60000}
LIMIT=${3:-128}
PY=${PYTHON:-/opt/tfkvenv/bin/python}
W=$(mktemp -d /var/tmp/flynn-memcg.XXXXXX)
CG=""
cleanup() {
  rm -rf "$W"
  [ -n "$CG" ] && rmdir "$CG" 2>/dev/null || true
}
trap cleanup EXIT
trap "exit 1" INT TERM
here=$(dirname "$0")
$PY "$here/make_image_folder.py" "$W/fm28" "$N" 28 >/dev/null
files=$(find "$W/fm28" -type f | wc -l)
bytes=$(du -sb "$W/fm28" | cut -f1)
pages=$(find "$W/fm28" -type f -printf '%s\n' | awk '{p += int(($1 + 4095) / 4096)} END {print p}')
echo "folder: $files JPEGs, $bytes bytes, $((pages * 4096 / 1048576)) MiB of page cache to hold it; cgroup limit ${LIMIT} MiB"
if [ -d /sys/fs/cgroup/memory ]; then
  CG=/sys/fs/cgroup/memory/flynn-memcg-$$
  mkdir "$CG"
  echo $((LIMIT * 1048576)) >"$CG/memory.limit_in_bytes"
  peakf=$CG/memory.max_usage_in_bytes
elif [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  CG=/sys/fs/cgroup/flynn-memcg-$$
  mkdir "$CG"
  echo $((LIMIT * 1048576)) >"$CG/memory.max"
  peakf=$CG/memory.peak
else
  echo "no memory cgroup here" >&2; exit 1
fi
evict() {
  sync
  find "$1" -type f -print0 | $PY -c '
import os, sys
for p in sys.stdin.buffer.read().split(b"\0"):
    if p:
        fd = os.open(p, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)'
}
cached() { find "$1" -type f -print0 | xargs -0 fincore -b -n -o RES 2>/dev/null | awk '{s += $1} END {printf "%d", s / 1048576}'; }
printf '%-20s %10s %16s %12s %12s %14s\n' mode samples/s "data wait/step" step "cgroup peak" "cached at end"
for extra in "--prefetch 0" "--prefetch 2"; do
  evict "$W/fm28"
  [ -f "$CG/memory.max_usage_in_bytes" ] && echo 0 >"$CG/memory.max_usage_in_bytes"
  out=$(sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' sh "$CG" "$FLYNN" train --model mnist_cnn \
        --data "$W/fm28" --image-size 28x28 --color-mode grayscale --epochs 2 --batch-size 128 --verbose 2 \
        --device cpu --stream $extra 2>&1) || { echo "$out" | tail -5; exit 1; }
  sps=$(sed -n 's/^training throughput: \([0-9]*\) samples.*/\1/p' <<<"$out")
  wait=$(sed -n 's/^input pipeline: each step waited \([0-9.]*\) ms.*/\1 ms/p' <<<"$out")
  step=$(sed -n 's/^input pipeline: .* of a \([0-9.]*\) ms step.*/\1 ms/p' <<<"$out")
  printf '%-20s %10s %16s %12s %9s MiB %10s MiB\n' "${extra#--}" "${sps:-?}" "${wait:--}" "${step:--}" \
    "$(($(cat "$peakf") / 1048576))" "$(cached "$W/fm28")"
done
