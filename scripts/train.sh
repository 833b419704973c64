#!/usr/bin/env bash
# scripts/train.sh — the main job, from a fresh machine: installs what is
# missing, builds flynn, and trains the Keras mnist_cnn on the first 20,000
# Fashion-MNIST images, printing the progress bar, test accuracy on the
# 10,000 test images and samples/s. Extra arguments go to `flynn train`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target flynn_cli >/dev/null
exec build/flynn train --model mnist_cnn --data fashion-mnist --samples 20000 --epochs 2 --batch-size 128 --device auto "$@"
