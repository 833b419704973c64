#!/usr/bin/env bash
# test_cli_callbacks.sh — end-to-end checks of `flynn train`'s callback,
# clipping and schedule flags: --early-stopping stops (and says so),
# --csv-log writes Keras CSVLogger's format, --lr-schedule and --clipnorm
# are saved in the model file's compile config (as Keras writes them),
# --tensorboard writes event files with Keras's tags, and bad values are
# refused with a message naming the flag.
# usage: test_cli_callbacks.sh PATH/TO/flynn
set -u
FLYNN=$1
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok, bad, expect
run=("$FLYNN" train --model mlp --samples 256 --test-samples 100 --batch-size 64 --verbose 2 --seed 1)

expect help 0 "--early-stopping P" -- "$FLYNN" train --help
expect help-schedule 0 "cosine:STEPS\[:warmup=N\]" -- "$FLYNN" train --help
expect bad-schedule 1 "--lr-schedule cosh:10: expected exp:, inverse:, cosine: or piecewise:" -- "${run[@]}" --lr-schedule cosh:10
expect bad-schedule-steps 1 "--lr-schedule exp:0.5:0: .*decay_steps 0" -- "${run[@]}" --lr-schedule exp:0.5:0
expect bad-clip 2 "--clipnorm wants a number > 0, got -1" -- "${run[@]}" --clipnorm -1
expect two-clips 1 "one of --clipnorm, --clipvalue and --global-clipnorm" -- "${run[@]}" --clipnorm 1 --clipvalue 1
expect rlr-and-schedule 1 "--reduce-lr-on-plateau cannot change a learning-rate schedule" -- \
  "${run[@]}" --reduce-lr-on-plateau --lr-schedule exp:0.5:10
expect bad-patience 2 "--early-stopping wants a patience" -- "${run[@]}" --early-stopping soon

# The learning rate drops to 0 after the first epoch's 3 steps: val_loss
# stays exactly the same, so EarlyStopping(patience=0) stops after epoch 2.
expect early-stopping 0 "Epoch 2: early stopping" -- "${run[@]}" --epochs 5 --validation-split 0.25 \
  --lr-schedule piecewise:2:0.001,0 --early-stopping 0 --csv-log "$tmp/log.csv" --save "$tmp/m.keras"
if [ -f "$tmp/log.csv" ]; then
  # header and two rows, "\r\n" line ends, epochs from 0 (Keras CSVLogger)
  printf 'epoch,accuracy,loss,val_accuracy,val_loss\r\n' | cmp -s - <(head -1 "$tmp/log.csv") && ok || bad "csv header: $(head -1 "$tmp/log.csv" | od -c | head -2)"
  [ "$(wc -l < "$tmp/log.csv")" = 3 ] && ok || bad "csv: $(wc -l < "$tmp/log.csv") lines, expected 3"
  grep -q $'^1,[0-9.e-]*,[0-9.e-]*,[0-9.e-]*,[0-9.e-]*\r$' "$tmp/log.csv" && ok || bad "csv row 1: $(sed -n 3p "$tmp/log.csv")"
else
  bad "no $tmp/log.csv"
fi
cfg=$(python3 -c 'import sys, zipfile; print(zipfile.ZipFile(sys.argv[1]).read("config.json").decode())' "$tmp/m.keras" 2>&1)
grep -q '"class_name": *"PiecewiseConstantDecay"' <<<"$cfg" && ok || bad "m.keras lacks the schedule: ${cfg:0:300}"

# clipping and a cosine schedule with warmup reach the saved compile config
expect clip-cosine 0 "optimizer: Adam, learning rate CosineDecay \\(0 at step 0\\), clipnorm 0.5" -- "${run[@]}" --epochs 1 --clipnorm 0.5 --lr-schedule cosine:100:warmup=10:alpha=0.1 \
  --save "$tmp/c.keras"
cfg=$(python3 -c 'import sys, zipfile; print(zipfile.ZipFile(sys.argv[1]).read("config.json").decode())' "$tmp/c.keras" 2>&1)
grep -qE '"clipnorm": *0.5' <<<"$cfg" && ok || bad "c.keras lacks clipnorm 0.5"
grep -qE '"warmup_steps": *10' <<<"$cfg" && grep -qE '"warmup_target": *0.001' <<<"$cfg" && ok || bad "c.keras lacks the warmup"
# and a run resumed from it keeps them
expect resume-keeps 0 "optimizer: Adam, learning rate CosineDecay \\([0-9.e-]+ at step 4\\), clipnorm 0.5" -- \
  "${run[@]}" --resume "$tmp/c.keras" --epochs 1

# ReduceLROnPlateau: a learning_rate column in the log (and, without validation
# data, val_ columns for every key, as Keras CSVLogger writes them)
expect reduce-lr 0 "epoch log written to" -- "${run[@]}" --epochs 2 --reduce-lr-on-plateau --csv-log "$tmp/r.csv"
head -1 "$tmp/r.csv" | grep -q $'^epoch,accuracy,learning_rate,loss,val_accuracy,val_learning_rate,val_loss\r$' && ok || bad "r.csv header: $(head -1 "$tmp/r.csv")"

# TensorBoard: train/ and validation/ event files with Keras's tags (the
# values and the format: test_tensorboard.c, tests/tensorboard_check.py)
expect help-tensorboard 0 "--tensorboard DIR" -- "$FLYNN" train --help
expect tensorboard 0 "TensorBoard logs written to $tmp/tb \\(view them: tensorboard --logdir $tmp/tb\\)" -- \
  "${run[@]}" --epochs 2 --validation-split 0.25 --tensorboard "$tmp/tb" --tensorboard-histograms 1 --tensorboard-update-freq 2
for d in train validation; do
  n=$(ls "$tmp/tb/$d" 2>/dev/null | grep -c '^events\.out\.tfevents\.[0-9]\{10\}\..*\.v2$')
  [ "$n" = 1 ] && ok || bad "$tmp/tb/$d: $n events files, expected 1"
done
tags() { cat "$tmp/tb/$1"/events.out.tfevents.* 2>/dev/null | grep -aoE "$2" | sort -u | tr '\n' ' '; }
[ "$(tags train 'brain\.Event:2|epoch_[a-z_]+|batch_(loss|accuracy)|keras|graph_keras_model|dense_1/kernel/histogram')" = \
  "batch_accuracy batch_loss brain.Event:2 dense_1/kernel/histogram epoch_accuracy epoch_learning_rate epoch_loss graph_keras_model keras " ] \
  && ok || bad "train tags: $(tags train 'brain\.Event:2|epoch_[a-z_]+|batch_(loss|accuracy)|keras|graph_keras_model|dense_1/kernel/histogram')"
[ "$(tags validation 'epoch_[a-z_]+|evaluation_[a-z_]+|batch_')" = \
  "epoch_accuracy epoch_loss evaluation_accuracy_vs_iterations evaluation_loss_vs_iterations " ] \
  && ok || bad "validation tags: $(tags validation 'epoch_[a-z_]+|evaluation_[a-z_]+|batch_')"
: > "$tmp/tb-file"
expect tensorboard-not-a-folder 1 "TensorBoard: cannot use $tmp/tb-file as a log folder: it exists and is not a folder" -- \
  "${run[@]}" --epochs 1 --tensorboard "$tmp/tb-file"
expect tensorboard-histograms-alone 1 "need --tensorboard DIR" -- "${run[@]}" --tensorboard-histograms 1
expect tensorboard-bad-freq 2 "--tensorboard-update-freq wants a number of steps" -- "${run[@]}" --tensorboard "$tmp/tb2" \
  --tensorboard-update-freq 0

echo "test_cli_callbacks: $pass passed, $fail failed"
[ "$fail" = 0 ]
