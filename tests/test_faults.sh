#!/usr/bin/env bash
# test_faults.sh — what the `flynn` command leaves behind when saving fails
# or the process dies: a full disk and a read-only folder (faked with the
# LD_PRELOAD shim tests/fault_shim.c, so no root, mount or /dev/full is
# needed, and read-only works as root too), and kill -9 at random moments
# of `flynn train --save X --checkpoint Y` (every target absent or whole,
# temporary files never accumulating); TensorBoard logs on a full disk and in
# a read-only folder.
# usage: test_faults.sh PATH/TO/flynn PATH/TO/libfault_shim.so FIXTURES_DIR [TRIALS]
set -u
FLYNN=$1 SHIM=$2 FIX=$3 TRIALS=${4:-100}
DATA=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
skip() { echo "SKIP: $*"; }
# an ASan build wants its runtime first; the shim only wraps libc calls
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"

temps() { find "$1" -name '*.tmp.*' 2>/dev/null | wc -l; }
# shim NAME MODE [OP] [BYTES] -- command...: runs with the fault in $tmp/$NAME
shim() {
  local dir=$1 mode=$2 op=$3 bytes=$4; shift 5
  FAULT_DIR="$dir" FAULT_MODE=$mode FAULT_OP=$op FAULT_BYTES=$bytes LD_PRELOAD="$SHIM" "$@"
}
# expect_fail NAME PATTERN -- command...: exit 1 and stderr matching PATTERN, no ".tmp." named
expect_fail() {
  local name=$1 pat=$2; shift 3
  local out rc
  out=$("$@" 2>&1 >/dev/null); rc=$?
  if [ "$rc" != 1 ]; then bad "$name: exit $rc, expected 1"; echo "$out" | tail -3 >&2; return; fi
  if ! grep -qE -- "$pat" <<<"$out"; then bad "$name: stderr lacks /$pat/"; echo "$out" | tail -3 >&2; return; fi
  if grep -q '\.tmp\.' <<<"$out"; then bad "$name: the message names a temporary file: $out"; return; fi
  ok
}

MODEL=$FIX/conv_basic.keras
# the probe: with the shim in place, touching a file in a "read-only" folder fails
SHIM_OK=0
FAULT_DIR="$tmp" FAULT_MODE=erofs LD_PRELOAD="$SHIM" touch "$tmp/probe" 2>/dev/null || SHIM_OK=1
rm -f "$tmp/probe"
if [ "$SHIM_OK" != 1 ]; then
  skip "the fault shim $SHIM cannot be preloaded here: full-disk and read-only cases not run"
else
  # ------------------------------------------------ full disk (ENOSPC)
  full=$tmp/full
  mkdir -p "$full"
  "$FLYNN" convert "$MODEL" "$full/old.keras" >/dev/null || bad "setup: convert"
  cp "$full/old.keras" "$tmp/old.copy"
  for op in write fsync close; do
    expect_fail "enospc-$op" "cannot write $full/old.keras: .*No space left on device" -- \
      shim "$full" enospc $op 1000 -- "$FLYNN" convert "$MODEL" "$full/old.keras"
    cmp -s "$full/old.keras" "$tmp/old.copy" && ok || bad "enospc-$op: the old file changed"
    [ "$(temps "$full")" = 0 ] && ok || bad "enospc-$op: temporary files left: $(ls "$full")"
    expect_fail "enospc-new-$op" "cannot write $full/new.h5: .*No space left on device" -- \
      shim "$full" enospc $op 100 -- "$FLYNN" convert "$MODEL" "$full/new.h5"
    [ ! -e "$full/new.h5" ] && ok || bad "enospc-new-$op: a half-written new.h5 is left"
  done
  [ "$(ls "$full")" = old.keras ] && ok || bad "enospc: the folder holds $(ls "$full")"

  # ------------------------------------------------ read-only folder (EROFS, EACCES)
  ro=$tmp/ro
  mkdir -p "$ro"
  cp "$tmp/old.copy" "$ro/old.keras"
  for mode in erofs eacces; do
    reason=$([ $mode = erofs ] && echo "Read-only file system" || echo "Permission denied")
    expect_fail "$mode-replace" "cannot write $ro/old.keras: .*$reason" -- \
      shim "$ro" $mode write 0 -- "$FLYNN" convert "$MODEL" "$ro/old.keras"
    cmp -s "$ro/old.keras" "$tmp/old.copy" && ok || bad "$mode: the old file changed"
    expect_fail "$mode-new" "cannot write $ro/m.json: .*$reason" -- \
      shim "$ro" $mode write 0 -- "$FLYNN" convert "$MODEL" "$ro/m.json"
  done
  [ "$(ls "$ro")" = old.keras ] && ok || bad "read-only: the folder holds $(ls "$ro")"

  # ------------------------------------------------ --save-weights
  if [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
    train=("$FLYNN" train --model mlp --samples 128 --test-samples 32 --epochs 1 --batch-size 64 --verbose 0 --threads 1)
    # a new folder on a full disk: the message names the weight file, and no (empty) folder is left
    expect_fail "save-weights-enospc" "saving weights: fl_save_npy: cannot write $full/w/dense.kernel.npy: .*No space left" -- \
      shim "$full" enospc write 200000 -- "${train[@]}" --save-weights "$full/w"
    [ ! -e "$full/w" ] && ok || bad "save-weights-enospc: left $(ls -R "$full/w")"
    # an existing folder: each old file stays whole
    "${train[@]}" --save-weights "$tmp/w" >/dev/null 2>&1 || bad "setup: --save-weights"
    cp -r "$tmp/w" "$tmp/w.copy"
    mv "$tmp/w" "$full/w"
    expect_fail "save-weights-enospc-existing" "cannot write $full/w/dense.kernel.npy: .*No space left" -- \
      shim "$full" enospc write 1000 -- "${train[@]}" --seed 7 --save-weights "$full/w"
    diff -r "$full/w" "$tmp/w.copy" >/dev/null && ok || bad "save-weights-enospc-existing: old files changed"
    expect_fail "save-weights-erofs" "cannot create the folder $ro/w: Read-only file system" -- \
      shim "$ro" erofs write 0 -- "${train[@]}" --save-weights "$ro/w"
    [ ! -e "$ro/w" ] && ok || bad "save-weights-erofs: a folder was made"
  else
    skip "no Fashion-MNIST at $DATA: --save-weights and kill -9 cases not run"
  fi
fi

# ------------------------------------------------ kill -9 at random moments
if [ ! -f "$DATA/train-images-idx3-ubyte.gz" ]; then
  skip "no Fashion-MNIST at $DATA: kill -9 trials not run"
elif [ "$SHIM_OK" != 1 ]; then
  skip "the fault shim cannot be preloaded: kill -9 trials not run (half of them need it)"
else
  k=$tmp/kill
  mkdir -p "$k"
  cat >"$k/tiny.json" <<'EOF'
{"class_name": "Sequential", "config": {"name": "tiny", "layers": [
 {"class_name": "InputLayer", "config": {"batch_shape": [null, 28, 28, 1], "name": "in"}},
 {"class_name": "Flatten", "config": {"name": "flatten"}},
 {"class_name": "Dense", "config": {"name": "out", "units": 10, "activation": "softmax"}}]}}
EOF
  run=("$FLYNN" train --model "$k/tiny.json" --samples 256 --test-samples 32 --epochs 4 --batch-size 64
       --verbose 0 --threads 1 --save "$k/final.keras" --checkpoint "$k/best.keras")
  # how long one run takes, to spread the kills over it
  t0=$(date +%s%N); "${run[@]}" >/dev/null 2>&1 || bad "kill: a plain run failed"; t1=$(date +%s%N)
  span=$(( (t1 - t0) / 1000 + 1 )) # microseconds
  rm -f "$k"/*.keras
  killed=0 leftover_max=0 loaded=0 absent=0 shimmed=0
  for ((i = 0; i < TRIALS; i++)); do
    # every other trial without unnamed files (O_TMPFILE), as on file systems
    # that lack them: named temporary files are written, and must be cleaned
    if ((i % 2)); then
      FAULT_DIR="$k" FAULT_MODE=notmpfile LD_PRELOAD="$SHIM" "${run[@]}" >/dev/null 2>&1 &
      shimmed=$((shimmed + 1))
    else
      "${run[@]}" >/dev/null 2>&1 &
    fi
    pid=$!
    us=$(( (RANDOM * 32768 + RANDOM) % span ))
    sleep "$(printf '0.%06d' "$us")"
    kill -9 "$pid" 2>/dev/null && killed=$((killed + 1))
    wait "$pid" 2>/dev/null
    for f in final best; do
      if [ -e "$k/$f.keras" ]; then
        if "$FLYNN" summary "$k/$f.keras" >/dev/null 2>&1; then loaded=$((loaded + 1))
        else bad "kill trial $i: $f.keras is not loadable"; cp "$k/$f.keras" "/tmp/flynn-broken-$f.keras"; fi
      else
        absent=$((absent + 1))
      fi
    done
    n=$(temps "$k")
    ((n > leftover_max)) && leftover_max=$n
    # each killed run writes one file at a time: at most its own is left,
    # those of earlier runs are gone after the next save in the folder
    ((n <= 1)) || bad "kill trial $i: $n temporary files: $(ls "$k")"
  done
  # a run that completes (without O_TMPFILE) leaves none at all
  FAULT_DIR="$k" FAULT_MODE=notmpfile LD_PRELOAD="$SHIM" "${run[@]}" >/dev/null 2>&1 || bad "kill: the final run failed"
  [ "$(temps "$k")" = 0 ] && ok || bad "kill: temporary files after a complete run: $(ls "$k")"
  "$FLYNN" summary "$k/final.keras" >/dev/null 2>&1 && ok || bad "kill: final.keras not loadable"
  echo "kill -9: $TRIALS trials ($shimmed without O_TMPFILE) over ${span}us runs, $killed killed while running;" \
       "targets loadable $loaded times, absent $absent times; at most $leftover_max temporary file(s) at once"
fi

# ------------------------------------------------ bad data and a diverging loss
b=$tmp/bad
mkdir -p "$b/mnist"
byte() { printf "\\x$(printf %02x "$1")"; }
idx_images() { { printf '\x00\x00\x08\x03\x00\x00\x00'; byte "$2"; printf '\x00\x00\x00\x1c\x00\x00\x00\x1c'; head -c $(($2 * 784)) /dev/zero; } >"$1"; }
idx_labels() { local f=$1; shift; { printf '\x00\x00\x08\x01\x00\x00\x00'; byte $#; for v; do byte "$v"; done; } >"$f"; }
idx_images "$b/mnist/train-images-idx3-ubyte" 4
idx_labels "$b/mnist/train-labels-idx1-ubyte" 1 2 12 3
idx_images "$b/mnist/t10k-images-idx3-ubyte" 2
idx_labels "$b/mnist/t10k-labels-idx1-ubyte" 1 2
expect_fail "bad-label" "train-labels-idx1-ubyte: label 2 is 12, expected 0..9" -- \
  "$FLYNN" train --data "mnist:$b/mnist" --verbose 0 --epochs 1
idx_labels "$b/mnist/train-labels-idx1-ubyte" 1 2 3
expect_fail "count-mismatch" "train-images-idx3-ubyte has 4 images but .*train-labels-idx1-ubyte has 3 labels" -- \
  "$FLYNN" train --data "mnist:$b/mnist" --verbose 0 --epochs 1
# an .npy of the wrong shape for predict names the file (header padded to 128 bytes)
hdr="{'descr': '<f4', 'fortran_order': False, 'shape': (2, 7), }"
{ printf '\x93NUMPY\x01\x00\x76\x00%s' "$hdr"; printf '%*s\n' $((0x76 - ${#hdr} - 1)) ''; head -c 56 /dev/zero; } >"$b/x.npy"
expect_fail "predict-shape" "--input $b/x.npy: .*x has shape \(2, 7\), model 'dense_activations' expects \(None, 5\)" -- \
  "$FLYNN" predict "$FIX/dense_activations.keras" --input "$b/x.npy" --output "$b/y.npy"
[ ! -e "$b/y.npy" ] && ok || bad "predict-shape: wrote y.npy"

if [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
  # SGD with a learning rate of 1e30: the second step's loss is NaN; training
  # stops naming the layer, and nothing is saved
  cat >"$b/div.json" <<'EOF'
{"class_name": "Sequential", "config": {"name": "div", "layers": [
 {"class_name": "InputLayer", "config": {"batch_shape": [null, 28, 28, 1], "name": "in"}},
 {"class_name": "Flatten", "config": {"name": "flatten"}},
 {"class_name": "Dense", "config": {"name": "hidden", "units": 16, "activation": "relu"}},
 {"class_name": "Dense", "config": {"name": "out", "units": 10, "activation": "softmax"}}]},
 "compile_config": {"optimizer": {"class_name": "SGD", "config": {"learning_rate": 1e30}},
                    "loss": "sparse_categorical_crossentropy", "metrics": ["accuracy"]}}
EOF
  div=("$FLYNN" train --model "$b/div.json" --samples 256 --test-samples 32 --epochs 2 --batch-size 64 --verbose 0
       --threads 1 --save "$b/div.keras")
  expect_fail "nan-loss" "epoch 1/2, step 2/4: the sparse_categorical_crossentropy loss is NaN; layer '(hidden|out)' .*TerminateOnNaN" -- "${div[@]}"
  [ ! -e "$b/div.keras" ] && ok || bad "nan-loss: the broken model was saved"
  out=$("${div[@]}" --no-nan-check 2>&1); rc=$?
  [ $rc = 0 ] && [ -e "$b/div.keras" ] && ok || { bad "nan-loss --no-nan-check: exit $rc"; echo "$out" | tail -3 >&2; }
else
  skip "no Fashion-MNIST at $DATA: the diverging-loss case not run"
fi

# TensorBoard logs (fl_tensorboard): a read-only folder fails the fit at train
# begin, a full disk when the events file is written, each naming the path
if [ "$SHIM_OK" = 1 ] && [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
  tb=$tmp/tb
  mkdir -p "$tb"
  tbrun=("$FLYNN" train --model mlp --samples 256 --test-samples 32 --epochs 2 --batch-size 64 --verbose 0 --threads 1)
  expect_fail "tensorboard-erofs" "TensorBoard: cannot create the log folder $tb/logs: Read-only file system" -- \
    shim "$tb" erofs write 0 -- "${tbrun[@]}" --tensorboard "$tb/logs"
  [ ! -e "$tb/logs" ] && ok || bad "tensorboard-erofs: $tb/logs was made"
  # the whole file's size, then a disk that is full 10 bytes before its end (at the last epoch)
  "${tbrun[@]}" --tensorboard "$tb/whole" >/dev/null || bad "tensorboard: the run without faults failed"
  size=$(cat "$tb"/whole/train/events.out.tfevents.* | wc -c)
  expect_fail "tensorboard-enospc" "TensorBoard: cannot write $tb/full/train/events\\.out\\.tfevents\\.[^ ]*\\.v2: No space left on device" -- \
    shim "$tb" enospc write $((size - 10)) -- "${tbrun[@]}" --tensorboard "$tb/full"
  expect_fail "tensorboard-enospc-begin" "TensorBoard: cannot write $tb/begin/train/.*: No space left on device" -- \
    shim "$tb" enospc write 100 -- "${tbrun[@]}" --tensorboard "$tb/begin"
fi

echo "test_faults: $pass passed, $fail failed"
[ "$fail" = 0 ]
