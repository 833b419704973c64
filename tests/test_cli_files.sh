#!/usr/bin/env bash
# test_cli_files.sh — end-to-end checks of the model-file side of the `flynn`
# command: help texts; `flynn summary FILE`; `flynn predict` on one- and
# two-input fixtures (the same predictions from every format); `flynn
# convert` between .keras, .h5 and .json (+ .weights.h5), byte-identical
# when repeated; `flynn train --model FILE`, `--save`, `--checkpoint` and
# `--resume` (an interrupted and resumed run ends exactly where an
# uninterrupted one does); and the refusals (bad files, wrong shapes, usage).
# Also `--data X.npy,Y.npy`: one step on a Keras fixture's batch equals
# Keras's train_on_batch (compared with NPY_CLOSE, tests/npy_close.c).
# usage: test_cli_files.sh PATH/TO/flynn FIXTURE_DIR PATH/TO/npy_close
set -u
FLYNN=$1
FX=$2
NPY_CLOSE=$3
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok, bad, expect
# Two runs here must give the same bits, which flynn promises at a fixed thread count (docs/performance.md): a
# test beside this one (ctest -j) is load that the threads would follow.
export FLYNN_FOLLOW_LOAD=0
same() { # same NAME FILE1 FILE2: byte-identical
  if cmp -s "$2" "$3"; then ok; else bad "$1: $2 and $3 differ"; fi
}

# help texts
expect predict-help 0 "--input X.npy" -- "$FLYNN" predict --help
expect convert-help 0 "\.keras +Keras 3" -- "$FLYNN" convert --help
expect summary-help 0 "flynn summary FILE" -- "$FLYNN" summary --help
expect train-help 0 "--resume FILE" -- "$FLYNN" train --help
expect main-help 0 "convert +convert a model file" -- "$FLYNN" --help

# summary of a file: the Keras table and what it was compiled with
expect summary-file 0 "Model: \"train_mlp_adam\"" -- "$FLYNN" summary "$FX/train_mlp_adam_after.keras"
expect summary-compiled 0 "Compiled: Adam \(learning_rate 0.01\), loss sparse_categorical_crossentropy; 1 optimizer step taken" \
  -- "$FLYNN" summary "$FX/train_mlp_adam_after.keras"
expect summary-functional 0 "Connected to" -- "$FLYNN" summary "$FX/func_shared.h5"
expect summary-model-opt 0 "Total params" -- "$FLYNN" summary --model "$FX/conv_basic.keras"
expect summary-builtin 0 "Total params: 1,199,882" -- "$FLYNN" summary

# predict: one input; the same bytes from the .keras and from flynn's .h5 and .json + weights
expect predict 0 "predictions \(3, 2, 2, 2\) written to $tmp/y1.npy" -- \
  "$FLYNN" predict "$FX/conv_basic.keras" --input "$FX/conv_basic_x.npy" --output "$tmp/y1.npy"
expect convert-h5 0 "-> $tmp/c.h5" -- "$FLYNN" convert "$FX/conv_basic.keras" "$tmp/c.h5"
expect convert-json 0 "$tmp/c.weights.h5 \(weights\)" -- "$FLYNN" convert "$FX/conv_basic.keras" "$tmp/c.json"
expect convert-keras 0 "-> $tmp/c2.keras" -- "$FLYNN" convert "$tmp/c.json" "$tmp/c2.keras" --weights "$tmp/c.weights.h5"
expect predict-h5 0 "written" -- "$FLYNN" predict "$tmp/c.h5" --input "$FX/conv_basic_x.npy" --output "$tmp/y2.npy"
expect predict-json 0 "written" -- "$FLYNN" predict "$tmp/c.json" --weights "$tmp/c.weights.h5" \
  --input "$FX/conv_basic_x.npy" --output "$tmp/y3.npy"
expect predict-keras2 0 "written" -- "$FLYNN" predict "$tmp/c2.keras" --input "$FX/conv_basic_x.npy" --output "$tmp/y4.npy" --device cpu --batch-size 2
same predict-h5-same "$tmp/y1.npy" "$tmp/y2.npy"
same predict-json-same "$tmp/y1.npy" "$tmp/y3.npy"
same predict-keras-same "$tmp/y1.npy" "$tmp/y4.npy"
expect predict-json-fresh 0 "holds no weights" -- "$FLYNN" predict "$tmp/c.json" --input "$FX/conv_basic_x.npy" --output "$tmp/y5.npy"
# the same conversion twice: the same bytes (no timestamps in the HDF5 files)
"$FLYNN" convert "$FX/conv_basic.keras" "$tmp/d.h5" >/dev/null 2>&1
same convert-deterministic "$tmp/c.h5" "$tmp/d.h5"

# two inputs, two outputs (Y_0.npy, Y_1.npy from one name)
expect predict-multi 0 "written to $tmp/m_1.npy" -- "$FLYNN" predict "$FX/func_multi_io.keras" \
  --input "$FX/func_multi_io_x0.npy" --input "$FX/func_multi_io_x1.npy" --output "$tmp/m.npy"
[ -f "$tmp/m_0.npy" ] && [ -f "$tmp/m_1.npy" ] && ok || bad "predict-multi: outputs missing"
expect predict-multi-missing 2 "2 inputs, 1 --input given" -- "$FLYNN" predict "$FX/func_multi_io.keras" \
  --input "$FX/func_multi_io_x0.npy" --output "$tmp/m.npy"

# refusals, with the file and the reason
expect predict-wrong-shape 1 "x has shape \(4, 5\), model 'conv_basic' expects \(-1, 7, 7, 2\)|expects" -- \
  "$FLYNN" predict "$FX/conv_basic.keras" --input "$FX/dense_activations_x.npy" --output "$tmp/z.npy"
expect summary-bad-layer 1 "UnitNormalization.*not supported" -- "$FLYNN" summary "$FX/bad_unsupported_layer.keras"
expect summary-truncated 1 "bad_truncated.keras.*zip" -- "$FLYNN" summary "$FX/bad_truncated.keras"
expect convert-bomb 1 "declares .* bytes uncompressed" -- "$FLYNN" convert "$FX/bad_zip_bomb.keras" "$tmp/x.keras"
[ ! -e "$tmp/x.keras" ] && ok || bad "convert-bomb: wrote an output"
expect convert-missing 1 "cannot open $tmp/none.keras" -- "$FLYNN" convert "$tmp/none.keras" "$tmp/x.keras"
expect convert-bad-name 1 "must end in .keras" -- "$FLYNN" convert "$FX/conv_basic.keras" "$tmp/x.bin"
expect convert-usage 2 "IN and OUT are required" -- "$FLYNN" convert "$FX/conv_basic.keras"
expect predict-usage 2 "--input X.npy is required" -- "$FLYNN" predict "$FX/conv_basic.keras" --output "$tmp/z.npy"
expect predict-bad-option 2 "unknown option --inputs" -- "$FLYNN" predict "$FX/conv_basic.keras" --inputs x

# a compile config flynn cannot honour: summary and convert go on without it and say so
cat >"$tmp/mae.json" <<'JSON'
{"class_name": "Sequential", "config": {"name": "mae_model", "layers": [
 {"class_name": "InputLayer", "config": {"batch_shape": [null, 3], "name": "in"}},
 {"class_name": "Dense", "config": {"name": "d", "units": 2}}]},
 "compile_config": {"optimizer": "adam", "loss": "mae"}}
JSON
expect summary-lenient 0 "compile config is left out: .*loss 'mae' is not supported" -- "$FLYNN" summary "$tmp/mae.json"
expect convert-lenient 0 "-> $tmp/mae.keras" -- "$FLYNN" convert "$tmp/mae.json" "$tmp/mae.keras"
# a summary, a conversion of a JSON without weights and a refusal need shapes, not weights (issue 43: a 2.6 KB
# JSON declaring a 300-million-parameter Dense took 11 s and 2.9 GB to summarise): each stays under 200 MB
# resident, where the weights alone are 1.2 GB
python3 - "$tmp" <<'PY'
import json, sys
def model(extra):
    layers = [{"class_name": "InputLayer", "config": {"batch_shape": [None, 20000], "dtype": "float32", "name": "in"}},
              {"class_name": "Dense", "config": {"name": "d", "units": 15000, "activation": "relu", "dtype": "float32"}},
              {"class_name": "Dense", "config": {"name": "o", "units": 10, "dtype": "float32"}}] + extra
    return json.dumps({"class_name": "Sequential", "config": {"name": "big", "layers": layers},
                       "keras_version": "3.15.0", "backend": "tensorflow"})
open(sys.argv[1] + "/big.json", "w").write(model([]))
open(sys.argv[1] + "/big_bad.json", "w").write(model([{"class_name": "Conv2D", "config": {  # refused when built
    "name": "c", "filters": 4, "kernel_size": [3, 3], "dtype": "float32"}}]))
PY
peak() { # peak resident MB of a command (its exit code kept in $tmp/rc, its output in $tmp/out)
  python3 -c '
import resource, subprocess, sys
p = subprocess.run(sys.argv[2:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
open(sys.argv[1] + "/out", "wb").write(p.stdout); open(sys.argv[1] + "/rc", "w").write(str(p.returncode))
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)' "$tmp" "$@"
}
mb=$(peak "$FLYNN" summary "$tmp/big.json")
[ "$(cat "$tmp/rc")" = 0 ] && grep -q "Total params: 300,165,010" "$tmp/out" && [ "$mb" -lt 200 ] && ok \
  || bad "summary of a 300M-parameter JSON: exit $(cat "$tmp/rc"), $mb MB resident"
mb=$(peak "$FLYNN" convert "$tmp/big.json" "$tmp/big2.json")
[ "$(cat "$tmp/rc")" = 0 ] && grep -q "holds no weights, so none are written" "$tmp/out" && [ ! -e "$tmp/big2.weights.h5" ] \
  && [ "$mb" -lt 200 ] && ok || bad "convert of a 300M-parameter JSON: exit $(cat "$tmp/rc"), $mb MB resident"
mb=$(peak "$FLYNN" summary "$tmp/big_bad.json")
[ "$(cat "$tmp/rc")" = 1 ] && grep -q "layer 'c'" "$tmp/out" && [ "$mb" -lt 200 ] && ok \
  || bad "refusal of a 300M-parameter JSON: exit $(cat "$tmp/rc"), $mb MB resident"
expect train-mae 1 "loss 'mae' is not supported" -- "$FLYNN" train --model "$tmp/mae.json" --samples 100

# train a model file; save; checkpoint the best val_loss; resume exactly
common=(--samples 600 --test-samples 500 --batch-size 100 --seed 3 --verbose 2)
expect train-save 0 "model saved to $tmp/mlp.keras" -- "$FLYNN" train --model mlp "${common[@]}" --epochs 1 --save "$tmp/mlp.keras"
expect train-file 0 "test accuracy: 0\.[0-9]{4}" -- "$FLYNN" train --model "$tmp/mlp.keras" "${common[@]}" --epochs 1
expect train-file-compiled 0 "Compiled: Adam .*6 optimizer steps taken" -- "$FLYNN" train --model "$tmp/mlp.keras" "${common[@]}" --epochs 1
out=$("$FLYNN" train --model mlp "${common[@]}" --epochs 3 --validation-split 0.2 --checkpoint "$tmp/best.keras" 2>&1); rc=$?
[ $rc -eq 0 ] && ok || { bad "checkpoint: exit $rc"; echo "$out" | tail -5 >&2; }
grep -qE "^Epoch 1: val_loss improved from None to [0-9.]+, saving model to $tmp/best.keras" <<<"$out" && ok || { bad "checkpoint: no save line"; echo "$out" | tail -8 >&2; }
grep -qE "^best model \(val_loss [0-9.]+\) saved to $tmp/best.keras" <<<"$out" && ok || bad "checkpoint: no summary line"
expect checkpoint-loads 0 "Total params: 669,706" -- "$FLYNN" summary "$tmp/best.keras"
# interrupted after 1 epoch, resumed for 2 more == 3 epochs in one go
full=$("$FLYNN" train --model mlp "${common[@]}" --epochs 3 --save "$tmp/full.keras" 2>&1 | grep "^test accuracy")
"$FLYNN" train --model mlp "${common[@]}" --epochs 1 --save "$tmp/part.keras" >/dev/null 2>&1
out=$("$FLYNN" train --resume "$tmp/part.keras" "${common[@]}" --epochs 2 --save "$tmp/resumed.keras" 2>&1); rc=$?
[ $rc -eq 0 ] && ok || { bad "resume: exit $rc"; echo "$out" | tail -5 >&2; }
grep -q "^resuming $tmp/part.keras after 6 optimizer steps (epoch 1)" <<<"$out" && ok || { bad "resume: no resume line"; echo "$out" | head -20 >&2; }
grep -q "^Epoch 2/3" <<<"$out" && ok || bad "resume: epochs not numbered on"
resumed=$(grep "^test accuracy" <<<"$out")
[ -n "$full" ] && [ "$full" = "$resumed" ] && ok || bad "resume: '$resumed' differs from the uninterrupted run's '$full'"
"$FLYNN" convert "$tmp/full.keras" "$tmp/full.json" >/dev/null && "$FLYNN" convert "$tmp/resumed.keras" "$tmp/resumed.json" >/dev/null
same resume-weights "$tmp/full.weights.h5" "$tmp/resumed.weights.h5"
# a .h5 resume works the same way
"$FLYNN" convert "$tmp/part.keras" "$tmp/part.h5" >/dev/null
out=$("$FLYNN" train --resume "$tmp/part.h5" "${common[@]}" --epochs 2 2>&1 | grep "^test accuracy")
[ "$out" = "$full" ] && ok || bad "resume from .h5: '$out' vs '$full'"
# refusals
"$FLYNN" convert "$FX/conv_basic.keras" "$tmp/uncompiled.keras" >/dev/null
expect resume-uncompiled 1 "no training configuration" -- "$FLYNN" train --resume "$tmp/uncompiled.keras" "${common[@]}"
expect train-wrong-input 1 "model takes samples of shape \(7, 7, 2\)" -- "$FLYNN" train --model "$tmp/uncompiled.keras" "${common[@]}"
expect checkpoint-bad-name 1 "must end in .keras or .h5" -- "$FLYNN" train --model mlp "${common[@]}" --epochs 1 --checkpoint "$tmp/x.txt"

# the user's own arrays: one AdamW step on Keras's fixture batch (8 samples,
# --batch-size 8: one step, so shuffling only reorders a sum) is Keras's step
xy="$FX/train_adamw_train_x.npy,$FX/train_adamw_train_y.npy"
expect train-npy 0 "data: x .*train_adamw_train_x.npy \(8, 6\), y .*\(8, 1\): 8 samples, no test set" -- \
  "$FLYNN" train --model "$FX/train_adamw.keras" --data "$xy" --epochs 1 --batch-size 8 --device cpu --verbose 2 \
  --save-weights "$tmp/adamw"
for w in dense.kernel dense.bias dense_1.kernel dense_1.bias; do
  if out=$("$NPY_CLOSE" "$tmp/adamw/$w.npy" "$FX/train_adamw_step1_${w/./_}.npy" 1e-4 1e-6 2>&1); then ok
  else bad "train-npy: $w after one step: $out"; fi
done
expect train-npy-final 0 "final epoch: loss: [0-9.]+" -- \
  "$FLYNN" train --model "$FX/train_adamw.keras" --data "$xy" --epochs 1 --batch-size 8 --device cpu --verbose 0
pc="$FX/train_pad_crop_adam_train"
expect train-npy-builtin-val 0 "val_loss" -- "$FLYNN" train --model mnist_cnn --data "${pc}_x.npy,${pc}_y.npy" \
  --epochs 1 --verbose 2 --validation-split 0.25 --device cpu
expect train-npy-lengths 1 "x and y must hold the same number of samples .*conv_basic_x.npy has shape \(3, .*pad_crop_adam_train_y.npy has shape \(8,\)" -- \
  "$FLYNN" train --model mlp --data "$FX/conv_basic_x.npy,${pc}_y.npy" --epochs 1
expect train-npy-not-classes 1 "y\[0\] = .* is not a class index" -- \
  "$FLYNN" train --model mlp --data "${pc}_x.npy,$FX/train_bn_rmsprop_train_y.npy" --epochs 1
expect train-npy-not-images 1 "built-in models take images .*, and --model mlp a table \(N, features\); .*train_adamw_train_x.npy has shape \(8, 6\)" -- \
  "$FLYNN" train --model mnist_cnn --data "$xy" --epochs 1
expect train-npy-table-mlp 0 "final epoch: loss: " -- "$FLYNN" train --model mlp --data "$xy" --epochs 1 --verbose 2 --device cpu
expect train-npy-missing 1 "nothere.npy" -- "$FLYNN" train --model mlp --data "$tmp/nothere.npy,$tmp/y.npy" --epochs 1

# integer inputs: int32 and int64 .npy token indices go in as int32 (never
# through float), for predict and for train --data X.npy,Y.npy
expect predict-int32 0 "predictions \(5, 3\) written" -- \
  "$FLYNN" predict "$FX/embedding_fasttext.keras" --input "$FX/embedding_fasttext_x.npy" --output "$tmp/e1.npy"
if out=$("$NPY_CLOSE" "$tmp/e1.npy" "$FX/embedding_fasttext_y.npy" 1e-5 1e-6 2>&1); then ok; else bad "predict-int32: $out"; fi
expect predict-int64 0 "predictions \(4, 2\) written" -- "$FLYNN" predict "$FX/embedding_masking.keras" \
  --input "$FX/embedding_masking_x.npy" --output "$tmp/e2.npy"
if out=$("$NPY_CLOSE" "$tmp/e2.npy" "$FX/embedding_masking_y.npy" 1e-5 1e-6 2>&1); then ok; else bad "predict-int64: $out"; fi
expect predict-int-help 0 "int32 or int64 model input" -- "$FLYNN" predict --help

# a None (variable-length) axis, keras.Input(shape=(None,), dtype="int32"):
# the summary shows None; predict takes .npy inputs of two lengths (7 and
# 11) and gives Keras's predictions; train --data takes a third (9) and its
# one step is Keras's
v="$FX/train_varlen_lstm_sgd"
expect predict-help-none 0 "X.npy of any length there" -- "$FLYNN" predict --help
expect summary-none 0 "embedding \(Embedding\) +│ \(None, None, 8\)" -- "$FLYNN" summary "$v.keras"
expect predict-varlen-7 0 "predictions \(4, 3\) written" -- "$FLYNN" predict "$v.keras" --input "${v}_x.npy" --output "$tmp/v7.npy"
if out=$("$NPY_CLOSE" "$tmp/v7.npy" "${v}_y.npy" 1e-5 1e-6 2>&1); then ok; else bad "predict-varlen-7: $out"; fi
expect predict-varlen-11 0 "predictions \(4, 3\) written" -- "$FLYNN" predict "$v.keras" --input "${v}_x_b.npy" --output "$tmp/v11.npy"
if out=$("$NPY_CLOSE" "$tmp/v11.npy" "${v}_y_b.npy" 1e-5 1e-6 2>&1); then ok; else bad "predict-varlen-11: $out"; fi
expect train-varlen 0 "\(8, 9\)" -- "$FLYNN" train --model "$v.keras" --data "${v}_train_x.npy,${v}_train_y.npy" \
  --epochs 1 --batch-size 8 --device cpu --verbose 2 --save-weights "$tmp/varlen"
for w in lstm.kernel lstm.recurrent_kernel embedding.embeddings dense.kernel; do
  if out=$("$NPY_CLOSE" "$tmp/varlen/$w.npy" "${v}_step1_${w/./_}.npy" 1e-4 1e-6 2>&1); then ok
  else bad "train-varlen: $w after one step: $out"; fi
done
# --save-weights with MultiHeadAttention, whose weights are named "query/kernel": the '/' becomes a '.' in the
# file name (it named a folder that did not exist, and the save failed). One step
# gives Keras's step-1 weights.
t="$FX/train_transformer_sgd"
expect train-mha-save-weights 0 "weights saved to" -- "$FLYNN" train --model "$t.keras" \
  --data "${t}_train_x.npy,${t}_train_y.npy" --epochs 1 --batch-size 8 --device cpu --verbose 2 --save-weights "$tmp/mha"
for w in multi_head_attention.query.kernel multi_head_attention.attention_output.bias layer_normalization.gamma; do
  if out=$("$NPY_CLOSE" "$tmp/mha/$w.npy" "${t}_step1_${w//./_}.npy" 1e-4 1e-6 2>&1); then ok
  else bad "train-mha-save-weights: $w after one step: $out"; fi
done
expect predict-float-for-int 1 "x\[0\] = .* is not an integer, and input .* is int32" -- "$FLYNN" predict "$FX/embedding_masking.keras" \
  --input "$FX/train_adamw_train_x.npy" --output "$tmp/e3.npy"
eb="$FX/train_embedding_bce_sgd"
expect train-npy-int 0 "data: x .*train_embedding_bce_sgd_train_x.npy \(8, 12\)" -- \
  "$FLYNN" train --model "$eb.keras" --data "${eb}_train_x.npy,${eb}_train_y.npy" --epochs 1 --batch-size 8 \
  --device cpu --verbose 2 --save-weights "$tmp/emb"
for w in embedding.embeddings dense.kernel dense_1.bias; do
  if out=$("$NPY_CLOSE" "$tmp/emb/$w.npy" "${eb}_step1_${w/./_}.npy" 1e-4 1e-6 2>&1); then ok
  else bad "train-npy-int: $w after one step: $out"; fi
done
# text: fortunes-lang on a small fortune tree (the layout of Debian's packages)
fort="$tmp/fort"
mkdir -p "$fort/de" "$fort/es" "$fort/it" "$fort/pl"
for f in fortunes de/zitate es/vida.fortunes it/adams pl/humor; do
  for k in $(seq 1 12); do printf 'cookie %s number %d written in some language here\n%%\n' "$f" "$k"; done > "$fort/$f"
done
expect train-fortunes 0 "^test accuracy: 0\.[0-9]{4} - test loss: [0-9.]+ \(12 test samples\)" -- \
  "$FLYNN" train --data "fortunes-lang:$fort" --epochs 1 --batch-size 8 --device cpu --verbose 2
expect train-fortunes-summary 0 "embedding \(Embedding\) +│ \(None, 128, 32\)" -- \
  "$FLYNN" train --data "fortunes-lang:$fort" --epochs 1 --batch-size 8 --device cpu --verbose 2
expect train-fortunes-transformer 0 "^test accuracy: 0\.[0-9]{4} - test loss: [0-9.]+ \(12 test samples\)" -- \
  "$FLYNN" train --model transformer_text --data "fortunes-lang:$fort" --epochs 1 --batch-size 8 --device cpu --verbose 2
expect train-fortunes-image-model 1 "model 'mnist_cnn' is an image model" -- \
  "$FLYNN" train --model mnist_cnn --data "fortunes-lang:$fort" --epochs 1
expect train-text-model-images 1 "model 'lstm_text' is a text model" -- \
  "$FLYNN" train --model lstm_text --data "fashion-mnist:$tmp" --epochs 1
expect train-fortunes-missing 1 "none of the English fortune files \(install the Debian package fortunes\)" -- \
  "$FLYNN" train --data "fortunes-lang:$tmp/nothere" --epochs 1

echo "test_cli_files: $pass passed, $fail failed"
[ $fail -eq 0 ]
