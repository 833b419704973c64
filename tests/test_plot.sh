#!/usr/bin/env bash
# test_plot.sh — `flynn plot HISTORY.csv` and `flynn train --plot OUT.svg`:
# (1) the SVG's curves are where the CSV's numbers say (read back against the
# chart's own tick labels by tests/plot_check.py), val_* dashed in the train
# key's colour, legend, gaps and notes for NaN/inf/NA, one epoch, 1200 epochs,
# unknown columns, the errors with their exit codes and messages, and the
# History of a tiny training run (early stop included) drawn as its CSV log is;
# (2) Chromium headless renders the chart and the screenshot has the curves'
# colours at the markers' pixels. Without chromium (scripts/setup.sh --test installs
# it) part 2 is skipped with a message; chromium failing is a failure.
# usage: test_plot.sh PATH/TO/flynn
set -u
FLYNN=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/cli_lib.sh"
check() { python3 "$here/plot_check.py" "$@"; }

expect help 0 "usage: flynn plot HISTORY.csv" -- "$FLYNN" plot --help
expect main-help 0 "plot +draw a training log" -- "$FLYNN" --help
expect train-help 0 "--plot OUT.svg" -- "$FLYNN" train --help

# (1) known values: CSVLogger's format (\r\n, epochs from 0, keys sorted), a
# NaN, an inf, an NA, a lone finite val epoch between gaps
printf 'epoch,accuracy,learning_rate,loss,val_accuracy,val_loss\r\n' > "$tmp/h.csv"
printf '%s\r\n' 0,0.5,0.001,2.0,0.55,1.8 1,0.7,0.001,1.0,0.72,1.1 2,0.8,0.0005,0.5,0.78,nan \
  3,0.85,0.0005,0.25,0.8,0.95 4,0.9,0.00025,0.125,0.81,inf 5,0.91,0.00025,0.1,NA,0.7 >> "$tmp/h.csv"
expect plot 0 "6 epochs, 5 columns plotted to $tmp/h.svg" -- "$FLYNN" plot "$tmp/h.csv"
out=$(check points "$tmp/h.svg" "$tmp/h.csv" 2>&1) && ok || bad "points: $out"
grep -q "^title=$tmp/h.csv panels=loss,accuracy,learning_rate points=" <<<"$out" && ok || bad "panels/title: $out"
info=$(check info "$tmp/h.svg" 2>&1)
for pat in "panel=loss key=val_loss segments=1 points=2 dashed=True" "panel=loss key=loss segments=1 points=6 dashed=False" \
           "panel=loss key=val_loss markers=4" "note=val_loss: NaN at epoch 3; inf at epoch 5 \(not drawn" \
           "note=val_accuracy: no value \(NA\) at epoch 6"; do
  grep -qE -- "$pat" <<<"$info" && ok || bad "info lacks /$pat/: $info"
done
# -o, --title, a tab-separated log with an unknown column and no val keys
printf 'epoch\tloss\tmy_metric\n0\t1.5\t3\n1\t1.25\t7\n2\t1\t5\n' > "$tmp/t.tsv"
expect tsv 0 "3 epochs, 2 columns plotted to $tmp/t-out.svg" -- "$FLYNN" plot "$tmp/t.tsv" --separator tab -o "$tmp/t-out.svg" --title "my run"
printf 'epoch,loss,my_metric\n0,1.5,3\n1,1.25,7\n2,1,5\n' > "$tmp/t.csv"
out=$(check points "$tmp/t-out.svg" "$tmp/t.csv" 2>&1) && ok || bad "tsv points: $out"
grep -q "^title=my run panels=loss,my_metric points=6" <<<"$out" && ok || bad "tsv: $out"
# no validation data: CSVLogger's val_ columns of NA are left out, not drawn as empty
printf 'epoch,loss,val_loss\r\n0,0.9,NA\r\n1,0.8,NA\r\n' > "$tmp/noval.csv"
expect no-val 0 "2 epochs" -- "$FLYNN" plot "$tmp/noval.csv"
! grep -q "val_loss" "$tmp/noval.svg" && grep -q 'data-key="loss"' "$tmp/noval.svg" && ok || bad "noval: $(check info "$tmp/noval.svg" 2>&1)"
# one epoch: a marker, no line
printf 'epoch,loss,val_loss\r\n0,0.69,0.7\r\n' > "$tmp/one.csv"
expect one-epoch 0 "1 epoch, 2 columns plotted" -- "$FLYNN" plot "$tmp/one.csv"
info=$(check info "$tmp/one.svg" 2>&1)
grep -q "key=loss markers=1" <<<"$info" && ! grep -q "segments=" <<<"$info" && ok || bad "one epoch: $info"
out=$(check points "$tmp/one.svg" "$tmp/one.csv" 2>&1) && ok || bad "one epoch points: $out"
# 1200 epochs: one line each, no markers, a readable number of epoch ticks
python3 -c '
import math
print("epoch,loss,val_loss")
for e in range(1200): print("%d,%r,%r" % (e, 2 * math.exp(-e / 300), 2.1 * math.exp(-e / 280) + 0.01 * (e % 7)))' > "$tmp/long.csv"
expect long 0 "1200 epochs" -- "$FLYNN" plot "$tmp/long.csv"
info=$(check info "$tmp/long.svg" 2>&1)
grep -q "key=loss segments=1 points=1200" <<<"$info" && ! grep -q markers <<<"$info" && ok || bad "long: $info"
nx=$(grep -c 'class="xtick"' "$tmp/long.svg"); [ "$nx" -ge 4 ] && [ "$nx" -le 14 ] && ok || bad "long: $nx epoch labels"
out=$(check points "$tmp/long.svg" "$tmp/long.csv" 2>&1) && ok || bad "long points: $out"

# errors: each names the file, line and column
expect no-file 1 "flynn plot: cannot read $tmp/none.csv: No such file" -- "$FLYNN" plot "$tmp/none.csv"
printf 'epoch,loss\r\n0,1\r\n1\r\n' > "$tmp/ragged.csv"
expect ragged 1 "$tmp/ragged.csv line 3: 1 field, expected 2 as in the header \(line 1\)" -- "$FLYNN" plot "$tmp/ragged.csv"
printf 'epoch,loss,accuracy\n0,1,0.5\n1,0.5,high\n' > "$tmp/word.csv"
expect non-numeric 1 "$tmp/word.csv line 3, column 3 \(accuracy\): \"high\" is not a number" -- "$FLYNN" plot "$tmp/word.csv"
printf 'step,loss\n0,1\n' > "$tmp/noepoch.csv"
expect no-epoch 1 "$tmp/noepoch.csv line 1: no 'epoch' column in the header \"step,loss\"" -- "$FLYNN" plot "$tmp/noepoch.csv"
printf 'epoch,loss\n0.5,1\n' > "$tmp/badepoch.csv"
expect bad-epoch 1 "line 2, column 1 \(epoch\): \"0.5\" is not an epoch number" -- "$FLYNN" plot "$tmp/badepoch.csv"
printf 'epoch,loss\n0,"1\n' > "$tmp/quote.csv"
expect open-quote 1 "$tmp/quote.csv line 2, column 2: a quote opened here is never closed" -- "$FLYNN" plot "$tmp/quote.csv"
: > "$tmp/empty.csv"
expect empty 1 "$tmp/empty.csv: empty" -- "$FLYNN" plot "$tmp/empty.csv"
printf 'epoch,loss\r\n' > "$tmp/head.csv"
expect header-only 1 "$tmp/head.csv: a header \(line 1\) but no epochs" -- "$FLYNN" plot "$tmp/head.csv"
expect unwritable 1 "cannot write $tmp/no/dir.svg" -- "$FLYNN" plot "$tmp/h.csv" -o "$tmp/no/dir.svg"
[ ! -e "$tmp/ragged.svg" ] && [ ! -e "$tmp/word.svg" ] && ok || bad "a failed plot left an SVG"
expect usage-none 2 "missing HISTORY.csv" -- "$FLYNN" plot
expect usage-two 2 "one HISTORY.csv at a time" -- "$FLYNN" plot "$tmp/h.csv" "$tmp/t.csv"
expect usage-opt 2 "unknown option --colour" -- "$FLYNN" plot "$tmp/h.csv" --colour red
expect usage-sep 2 "--separator wants one character" -- "$FLYNN" plot "$tmp/h.csv" --separator ab
expect usage-self 2 "the output would replace the input" -- "$FLYNN" plot "$tmp/h.csv" -o "$tmp/h.csv"

# flynn train --plot: the History drawn, the same points as its --csv-log
run=("$FLYNN" train --model mlp --samples 256 --test-samples 100 --batch-size 64 --verbose 2 --seed 1)
expect train-plot 0 "training curves drawn to $tmp/run.svg" -- "${run[@]}" --epochs 3 --validation-split 0.25 \
  --csv-log "$tmp/run.csv" --plot "$tmp/run.svg"
info=$(check info "$tmp/run.svg" 2>&1)
for pat in "^title=flynn train: mlp on fashion-mnist$" "panel=loss key=loss segments=1 points=3 dashed=False" \
           "panel=loss key=val_loss segments=1 points=3 dashed=True" "panel=accuracy key=val_accuracy segments=1 points=3"; do
  grep -qE -- "$pat" <<<"$info" && ok || bad "train --plot lacks /$pat/: $info"
done
out=$(check points "$tmp/run.svg" "$tmp/run.csv" 2>&1) && ok || bad "train --plot vs its CSV: $out"
"$FLYNN" plot "$tmp/run.csv" -o "$tmp/run-csv.svg" >/dev/null && out=$(check same "$tmp/run.svg" "$tmp/run-csv.svg" 2>&1) \
  && ok || bad "flynn plot of the CSV draws other points than train --plot: $out"
# after an early stop (the learning rate drops to 0 after 3 steps: patience 0 stops after epoch 2)
expect train-plot-early 0 "Epoch 2: early stopping" -- "${run[@]}" --epochs 5 --validation-split 0.25 \
  --lr-schedule piecewise:2:0.001,0 --early-stopping 0 --plot "$tmp/early.svg"
grep -q "panel=loss key=loss segments=1 points=2 " <<<"$(check info "$tmp/early.svg" 2>&1)" && ok || bad "early stop: $(check info "$tmp/early.svg" 2>&1)"
expect train-plot-empty 2 "--plot wants an SVG file name" -- "${run[@]}" --plot ""
expect train-plot-unwritable 1 "cannot write $tmp/no/run.svg" -- "${run[@]}" --epochs 1 --plot "$tmp/no/run.svg"

# (2) a real browser: Chromium headless draws the SVG; the screenshot has the
# curves' colours at their markers and along their lines
if command -v chromium >/dev/null; then
  # h2: h with one loss moved (1.0 -> 1.6), the same size: its screenshot must fail h.svg's check
  sed 's/^1,0.7,0.001,1.0,/1,0.7,0.001,1.6,/' "$tmp/h.csv" > "$tmp/h2.csv" && "$FLYNN" plot "$tmp/h2.csv" >/dev/null
  for svg in h run h2; do
    rm -f "$tmp/$svg.png"
    read -r w h < <(python3 -c 'import re,sys; s=open(sys.argv[1]).read(); m=re.search(r"width=\"(\d+)\" height=\"(\d+)\"", s); print(m[1], m[2])' "$tmp/$svg.svg")
    cout=$(timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars \
           --force-device-scale-factor=1 --user-data-dir="$tmp/chromium" --screenshot="$tmp/$svg.png" \
           --window-size="$w,$h" "file://$tmp/$svg.svg" 2>&1); crc=$?
    if [ $crc -ne 0 ] || [ ! -s "$tmp/$svg.png" ]; then
      bad "chromium exit $crc, no screenshot of $svg.svg: $(tail -3 <<<"$cout")"
      continue
    fi
    out=$(check png "$tmp/$svg.svg" "$tmp/$svg.png" 2>&1) && ok || bad "screenshot of $svg.svg: $out"
  done
  if [ -s "$tmp/h2.png" ]; then
    out=$(check png "$tmp/h.svg" "$tmp/h2.png" 2>&1) && bad "the check passed the wrong screenshot" \
      || { grep -q "loss: no #1f77b4 pixel near the marker" <<<"$out" && ok || bad "wrong screenshot: $out"; }
  fi
else
  echo "test_plot: chromium is not installed (scripts/setup.sh installs it): the browser check is skipped"
fi

echo "test_plot: $pass passed, $fail failed"
[ "$fail" = 0 ]
