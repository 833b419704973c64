#!/bin/sh
# test_mpi.sh MPI_FIT FLYNN — data-parallel training over MPI on this machine (loopback):
# `mpirun -np 2` and `-np 4` (oversubscribed) train the same weights as one process with the
# same global batch (tests/mpi_fit.c; the batch's gradient is summed in another order, so
# within 1e-6 relative, not bit-identical: docs/scale-out.md), with Dropout and the other random
# masks drawn as one process draws them, including a last batch smaller
# than the rank count; `flynn train` under mpirun prints once and saves from rank 0 only;
# and a rank that fails stops the others. Skipped (77) without Open MPI's mpirun.
MPI_FIT=$1
FLYNN=$2
STUB_NCCL=$3 # tests/stub_nccl.c: NCCL's entry points summing over MPI (optional)
command -v mpirun >/dev/null 2>&1 || { echo "skipped: no mpirun (Debian: apt-get install openmpi-bin libopenmpi-dev)"; exit 77; }
mpirun --version 2>&1 | grep -q "Open MPI" || { echo "skipped: mpirun is not Open MPI's (flynn speaks Open MPI's ABI only)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 FLYNN_NUM_THREADS=1
# under the ASan tree: Open MPI keeps allocations until exit that LeakSanitizer would report as flynn's
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
MPIRUN="mpirun --allow-run-as-root --oversubscribe"
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

# 258 samples at batch 64, 2 epochs: 10 steps, each epoch's last batch of 2 samples leaves
# ranks 2 and 3 of 4 without a share; mlpsw and mlpcw weigh the loss (sample_weight, class_weight);
# mlpdrop, cnndrop, rnndrop and attndrop draw random masks (Dropout, SpatialDropout2D, LSTM/GRU
# dropout and recurrent_dropout, MultiHeadAttention dropout), each rank those of its rows
for cfg in "mlp sgd" "mlp adam" "mlpsw sgd" "mlpcw adam" "cnn sgd" "cnn adam" "mlpdrop sgd" "mlpdrop adam" \
           "cnndrop sgd" "cnndrop adam" "rnndrop sgd" "rnndrop adam" "attndrop sgd" "attndrop adam"; do
    set -- $cfg
    "$MPI_FIT" train "$1" "$2" 258 64 2 "$tmp/one.bin" > "$tmp/one.txt" || { bad "$1 $2: one process"; continue; }
    for np in 2 4; do
        if ! $MPIRUN -np $np "$MPI_FIT" train "$1" "$2" 258 64 2 "$tmp/np$np.bin" > "$tmp/np$np.txt" 2>&1; then
            cat "$tmp/np$np.txt"; bad "$1 $2: mpirun -np $np"; continue
        fi
        printf '%s %s, %d ranks against 1: ' "$1" "$2" $np
        "$MPI_FIT" compare "$tmp/one.bin" "$tmp/np$np.bin" 1e-6 || bad "$1 $2: -np $np differs from one process"
        # the epoch's loss, reduced over the ranks, is the one process's (printed to 9 digits)
        l1=$(sed 's/.*loss //' "$tmp/one.txt"); ln=$(grep "ranks, loss" "$tmp/np$np.txt" | sed 's/.*loss //')
        [ "$l1" = "$ln" ] || bad "$1 $2: -np $np: loss $ln, one process $l1"
    done
done

# the gradients' sums start during backward, a bucket of weights at a time (src/dist/data_parallel.c):
# with 2 ranks (a + b either way) the same bits as one all-reduce per weight after backward
# (FLYNN_DP_OVERLAP=0), with the default 1 MiB buckets and with 1 KiB ones (a bucket per weight or
# two); with 4 ranks Open MPI may pick another algorithm per message size, so within 1e-6
for cfg in "cnn adam" "rnndrop sgd" "attndrop adam"; do
    set -- $cfg
    for np in 2 4; do
        FLYNN_DP_OVERLAP=0 $MPIRUN -x FLYNN_DP_OVERLAP -np $np "$MPI_FIT" train "$1" "$2" 258 64 2 "$tmp/seq.bin" \
            > "$tmp/seq.txt" 2>&1 || { cat "$tmp/seq.txt"; bad "$1 $2: -np $np without overlap"; continue; }
        tol=0; [ $np = 4 ] && tol=1e-6
        for kb in 1024 1; do
            FLYNN_DP_BUCKET_KB=$kb $MPIRUN -x FLYNN_DP_BUCKET_KB -np $np "$MPI_FIT" train "$1" "$2" 258 64 2 \
                "$tmp/ovl.bin" > "$tmp/ovl.txt" 2>&1 || { cat "$tmp/ovl.txt"; bad "$1 $2: -np $np buckets $kb KiB"; continue; }
            printf '%s %s, %d ranks, %s KiB buckets against one all-reduce per weight: ' "$1" "$2" $np $kb
            "$MPI_FIT" compare "$tmp/seq.bin" "$tmp/ovl.bin" $tol || bad "$1 $2: -np $np, $kb KiB buckets differ"
        done
    done
done

# and the buckets do start during backward (rank 0 counts them with FLYNN_DP_STATS)
FLYNN_DP_STATS=1 FLYNN_DP_BUCKET_KB=1 $MPIRUN -x FLYNN_DP_STATS -x FLYNN_DP_BUCKET_KB -np 2 "$MPI_FIT" train cnn sgd 258 64 2 \
    "$tmp/ovl.bin" > "$tmp/ovl.txt" 2>&1 || { cat "$tmp/ovl.txt"; bad "cnn sgd: FLYNN_DP_STATS"; }
grep -Eq "10 steps waited .* ms each .*; 80 of 80 buckets started during backward" "$tmp/ovl.txt" ||
    { cat "$tmp/ovl.txt"; bad "cnn sgd: the 8 buckets of 10 steps were not all started during backward"; }

# BatchNormalization: each rank's moving statistics come from its share; they are averaged at
# each epoch's end, so the ranks end with the same weights (fl_fit checks it and fails otherwise)
$MPIRUN -np 2 "$MPI_FIT" train bn adam 258 64 2 "$tmp/bn.bin" > "$tmp/bn.txt" 2>&1 ||
    { cat "$tmp/bn.txt"; bad "BatchNormalization under mpirun -np 2"; }

# a rank killed mid-training: mpirun ends the job (the other rank would wait in its next
# all-reduce forever) within the timeout, non-zero, naming the signal
$MPIRUN -np 2 "$MPI_FIT" train cnn sgd 20000 64 50 "$tmp/kill.bin" > "$tmp/kill.txt" 2>&1 &
job=$!
victim=""
for i in $(seq 100); do
    victim=$(pgrep -P $job -f mpi_fit | tail -1)
    [ -n "$victim" ] && break
    sleep 0.1
done
sleep 2
if [ -z "$victim" ]; then
    bad "kill a rank: no rank process found under mpirun ($job)"; kill $job
else
    kill -9 "$victim"
    t=0
    while kill -0 $job 2>/dev/null && [ $t -lt 60 ]; do sleep 1; t=$((t + 1)); done
    if kill -0 $job 2>/dev/null; then
        kill $job; bad "kill a rank: mpirun still running 60 s after a rank died"
    else
        wait $job && bad "kill a rank: mpirun exited 0"
        grep -qi "signal 9\|killed" "$tmp/kill.txt" || { cat "$tmp/kill.txt"; bad "kill a rank: no message naming the dead rank"; }
        echo "a rank killed: the job ended after ${t}s: $(grep -i 'signal 9' "$tmp/kill.txt" | head -1)"
    fi
fi

# --resume with another rank count: a model saved by 2 ranks trains on under 4, from its optimizer state
if $MPIRUN -np 2 "$FLYNN" train --model mlp --samples 256 --test-samples 64 --epochs 1 --batch-size 64 --verbose 0 \
       --save "$tmp/r2.keras" > "$tmp/r2.txt" 2>&1; then
    $MPIRUN -np 4 "$FLYNN" train --resume "$tmp/r2.keras" --samples 256 --test-samples 64 --epochs 1 \
        --batch-size 64 --verbose 2 --save "$tmp/r4.keras" > "$tmp/r4.txt" 2>&1 || { cat "$tmp/r4.txt"; bad "--resume under -np 4"; }
    grep -q "resuming .* after 4 optimizer steps (epoch 1)" "$tmp/r4.txt" || { cat "$tmp/r4.txt"; bad "--resume under -np 4: not from step 4"; }
    grep -q "^Epoch 2/2" "$tmp/r4.txt" || bad "--resume under -np 4: not epoch 2"
fi

# flynn train under mpirun: one progress bar, one "model saved", the file from rank 0
if "$FLYNN" train --model mlp --samples 256 --test-samples 64 --epochs 1 --batch-size 64 --verbose 2 \
       --save "$tmp/one.keras" > "$tmp/cli1.txt" 2>&1; then
    if ! $MPIRUN -np 2 "$FLYNN" train --model mlp --samples 256 --test-samples 64 --epochs 1 --batch-size 64 \
         --verbose 2 --save "$tmp/two.keras" > "$tmp/cli2.txt" 2>&1; then
        cat "$tmp/cli2.txt"; bad "flynn train under mpirun -np 2"
    else
        [ "$(grep -c '^4/4' "$tmp/cli2.txt")" = 1 ] || { cat "$tmp/cli2.txt"; bad "flynn train -np 2: not one progress line"; }
        [ "$(grep -c 'model saved to' "$tmp/cli2.txt")" = 1 ] || bad "flynn train -np 2: not one 'model saved'"
        [ -s "$tmp/two.keras" ] || bad "flynn train -np 2: no model file"
        # said once, on rank 0: the ranks, the launcher, the global batch and each rank's share; the
        # throughput is the global figure (issue 43)
        [ "$(grep -c '^data-parallel: 2 ranks started by Open MPI.s mpirun (2 on this host), training one model: global batch 64, 32 samples a rank per step; the gradients are summed over MPI' "$tmp/cli2.txt")" = 1 ] \
            || { cat "$tmp/cli2.txt"; bad "flynn train -np 2: the data-parallel line, once"; }
        grep -q "^training throughput: [0-9]* samples/s (mlp on the CPU, 1 threads a rank, 2 ranks together, global batch 64" "$tmp/cli2.txt" \
            || bad "flynn train -np 2: the throughput line names no ranks"
        grep -q "^data-parallel" "$tmp/cli1.txt" && bad "one process: a data-parallel line"
        echo "flynn train under mpirun -np 2: $(grep '^4/4' "$tmp/cli2.txt")"
        # the built-in mlp has Dropout: its masks are one process's, so are the printed loss and metrics
        for what in '^4/4' '^test accuracy'; do
            r1=$(grep "$what" "$tmp/cli1.txt" | sed 's/.*step - //'); r2=$(grep "$what" "$tmp/cli2.txt" | sed 's/.*step - //')
            [ -n "$r1" ] && [ "$r1" = "$r2" ] || bad "flynn train -np 2: '$r2', one process '$r1'"
        done
    fi
    # a rank that fails (here rank 0 cannot write its model) ends the job with its message
    if $MPIRUN -np 2 "$FLYNN" train --model mlp --samples 256 --test-samples 64 --epochs 1 --batch-size 64 \
         --verbose 0 --save "$tmp/no/such/dir/m.keras" > "$tmp/cli3.txt" 2>&1; then
        bad "a failing rank 0: mpirun exited 0"
    else
        grep -q "flynn: error" "$tmp/cli3.txt" || { cat "$tmp/cli3.txt"; bad "a failing rank: no flynn error message"; }
    fi
else
    echo "skipped the flynn train part: no Fashion-MNIST here ($(tail -1 "$tmp/cli1.txt"))"
fi
# NCCL's path (a device backend: gradients summed by NCCL on the backend's communication stream, the
# small reductions through MPI on host copies), without a GPU: mpi_fit's fake device (the CPU's kernels
# behind a table that says its memory is not the host's) and a stand-in libnccl that sums over MPI.
# With 2 ranks (a + b either way) the same bits as the CPU's MPI path, in buckets and with one
# grouped all-reduce per weight (FLYNN_DP_OVERLAP=0); with 4 ranks within 1e-6 of one process
if [ -n "$STUB_NCCL" ]; then
    for cfg in "mlp adam" "cnndrop sgd" "bn sgd"; do
        set -- $cfg
        $MPIRUN -np 2 "$MPI_FIT" train "$1" "$2" 258 64 2 "$tmp/cpu2.bin" > "$tmp/cpu2.txt" 2>&1 || { cat "$tmp/cpu2.txt"; bad "nccl $1 $2: the CPU run"; continue; }
        for overlap in 1 0; do
            rm -f "$tmp"/nccl.log.*
            if ! $MPIRUN -np 2 -x MPI_FIT_FAKE_DEVICE=1 -x FLYNN_NCCL_LIB="$STUB_NCCL" -x STUB_NCCL_LOG="$tmp/nccl.log" \
                 -x FLYNN_DP_OVERLAP=$overlap "$MPI_FIT" train "$1" "$2" 258 64 2 "$tmp/dev2.bin" > "$tmp/dev2.txt" 2>&1; then
                cat "$tmp/dev2.txt"; bad "nccl $1 $2 (overlap $overlap): mpirun -np 2 on the fake device"; continue
            fi
            printf 'nccl %s %s (overlap %s), 2 ranks on the fake device against the CPU: ' "$1" "$2" $overlap
            "$MPI_FIT" compare "$tmp/cpu2.bin" "$tmp/dev2.bin" 0 || bad "nccl $1 $2 (overlap $overlap): differs from the CPU's MPI"
            grep -q "fake device: [1-9][0-9]* forks and [1-9][0-9]* joins" "$tmp/dev2.txt" || { cat "$tmp/dev2.txt"; bad "nccl $1 $2: no communication stream used"; }
            for r in 0 1; do
                log=$(cat "$tmp/nccl.log.$r" 2>/dev/null)
                echo "$log" | grep -q "of 2: destroyed, [1-9][0-9]* all-reduces of [0-9]* floats, [0-9]* groups, 0 bad calls, 0 open groups" ||
                    bad "nccl $1 $2 (overlap $overlap): rank $r's NCCL log: '$log'"
                [ $overlap = 0 ] && ! echo "$log" | grep -q ", 0 groups" || [ $overlap = 1 ] || bad "nccl $1 $2: no grouped all-reduce"
            done
        done
    done
    $MPIRUN -np 4 -x MPI_FIT_FAKE_DEVICE=1 -x FLYNN_NCCL_LIB="$STUB_NCCL" "$MPI_FIT" train mlpdrop adam 258 64 2 "$tmp/dev4.bin" > "$tmp/dev4.txt" 2>&1 || { cat "$tmp/dev4.txt"; bad "nccl: mpirun -np 4"; }
    "$MPI_FIT" train mlpdrop adam 258 64 2 "$tmp/one.bin" > /dev/null &&
        { printf 'nccl mlpdrop adam, 4 ranks on the fake device against 1 process: '; "$MPI_FIT" compare "$tmp/one.bin" "$tmp/dev4.bin" 1e-6; } ||
        bad "nccl: -np 4 differs from one process"
    # without NCCL, every rank stops with the reason and the remedy (none waits for the others)
    if timeout 120 $MPIRUN -np 2 -x MPI_FIT_FAKE_DEVICE=1 -x FLYNN_NCCL_LIB=/nonexistent/libnccl.so.2 "$MPI_FIT" train mlp sgd 258 64 1 "$tmp/x.bin" > "$tmp/nonccl.txt" 2>&1; then
        bad "nccl missing: mpirun exited 0"
    else
        [ "$(grep -c "NCCL, needed to train on GPUs over 2 processes: FLYNN_NCCL_LIB=/nonexistent/libnccl.so.2 cannot be opened.*pip install nvidia-nccl-cu12" "$tmp/nonccl.txt")" -ge 1 ] ||
            { cat "$tmp/nonccl.txt"; bad "nccl missing: no message naming NCCL, the file and the remedy"; }
    fi
fi
# flynn doctor's last lines name Open MPI and NCCL (found or not, and what to do)
"$FLYNN" doctor > "$tmp/doctor.txt" 2>&1
grep -q "^MPI (optional): Open MPI v[0-9]" "$tmp/doctor.txt" || { tail -2 "$tmp/doctor.txt"; bad "doctor: no 'MPI (optional): Open MPI v...' line"; }
grep -q "^NCCL (optional): " "$tmp/doctor.txt" || { tail -2 "$tmp/doctor.txt"; bad "doctor: no 'NCCL (optional): ...' line"; }
[ -n "$STUB_NCCL" ] && { FLYNN_NCCL_LIB="$STUB_NCCL" "$FLYNN" doctor | grep -q "^NCCL (optional): NCCL 2.18.5 (.*stub_nccl" ||
    bad "doctor: the NCCL line does not name FLYNN_NCCL_LIB's library and its version"; }
[ $fails = 0 ] && echo "test_mpi: all passed" && exit 0
echo "test_mpi: $fails failed"
exit 1
