#!/bin/sh
# scale_mpi.sh — issue 16's scaling on one machine: one rank of NP threads against NP ranks of one
# thread (mpirun), the ranks' gradients summed in buckets during backward (the default) and after
# it (FLYNN_DP_OVERLAP=0), alternating, ROUNDS times. Prints flynn train's training throughput
# (samples/s, rank 0) and, for the ranks, the wait for the gradients' sums after backward per step
# (FLYNN_DP_STATS). Needs Open MPI (scripts/setup.sh --mpi) and Fashion-MNIST
# (dataset-fashion-mnist). Run it on a quiet machine: the numbers are wall-clock.
#
# usage: [FLYNN=build/flynn] [MODEL=mnist_cnn] [NP=2] [SAMPLES=8192] [EPOCHS=2] [BATCH=128]
#        [ROUNDS=3] bench/scale_mpi.sh
set -u
FLYNN=${FLYNN:-build/flynn} MODEL=${MODEL:-mnist_cnn} NP=${NP:-2} SAMPLES=${SAMPLES:-8192}
EPOCHS=${EPOCHS:-2} BATCH=${BATCH:-128} ROUNDS=${ROUNDS:-3}
command -v mpirun >/dev/null 2>&1 || { echo "scale_mpi.sh: no mpirun (scripts/setup.sh --mpi)" >&2; exit 2; }
args="train --model $MODEL --samples $SAMPLES --epochs $EPOCHS --batch-size $BATCH"
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
tput() { sed -n 's/^training throughput: \([0-9]*\) samples.*/\1/p' "$1"; }
wait_ms() { sed -n 's/.*steps waited \([0-9.]*\) ms each.*/\1/p' "$1"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "scale_mpi: $MODEL, $SAMPLES samples x $EPOCHS epochs, global batch $BATCH, $NP ranks; load average $(cut -d' ' -f1 /proc/loadavg) at the start"
for r in $(seq "$ROUNDS"); do
  "$FLYNN" $args --threads "$NP" > "$tmp/one.txt" 2>&1
  FLYNN_DP_STATS=1 $MPIRUN -x FLYNN_DP_STATS -np "$NP" "$FLYNN" $args --threads 1 > "$tmp/ovl.txt" 2>&1
  FLYNN_DP_STATS=1 FLYNN_DP_OVERLAP=0 $MPIRUN -x FLYNN_DP_STATS -x FLYNN_DP_OVERLAP -np "$NP" "$FLYNN" $args \
    --threads 1 > "$tmp/seq.txt" 2>&1
  printf 'round %d: 1 rank x %d threads %s samples/s | %d ranks x 1 thread, buckets during backward %s samples/s (waited %s ms/step after backward) | after backward %s samples/s (waited %s ms/step)\n' \
    "$r" "$NP" "$(tput "$tmp/one.txt")" "$NP" "$(tput "$tmp/ovl.txt")" "$(wait_ms "$tmp/ovl.txt")" \
    "$(tput "$tmp/seq.txt")" "$(wait_ms "$tmp/seq.txt")"
done
echo "load average $(cut -d' ' -f1 /proc/loadavg) at the end"
