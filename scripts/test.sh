#!/usr/bin/env bash
# scripts/test.sh — the whole test suite, from a fresh machine: installs what is
# missing (scripts/setup.sh --test: also Open MPI for test_mpi's mpirun runs and
# Chromium for test_plot's screenshot), builds flynn twice (with ASan+UBSan, and the
# release build with -Wall -Wextra -Werror), runs the sanitizer suite, the
# fuzz smoke (a third build, with clang and libFuzzer: each harness of
# tests/fuzz fuzzed for 20 s, tests/fuzz/README.md), then the release suite.
# The last line is ctest's summary of the release suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
jobs=$(nproc)

echo "== sanitizer build (ASan + UBSan)"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLYNN_SANITIZE=ON -DFLYNN_CUDA=OFF -DCMAKE_C_FLAGS=-Werror >/dev/null
cmake --build build-asan -j "$jobs"
# OpenBLAS and libgomp are not instrumented; leaks inside them are not ours
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ctest --output-on-failure -j 1)

echo "== fuzz smoke (clang + libFuzzer, tests/fuzz)"
cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLYNN_FUZZ=ON \
  -DFLYNN_CUDA=OFF -DFLYNN_BUILD_TESTS=OFF >/dev/null
cmake --build build-fuzz -j "$jobs"
(cd build-fuzz && ctest --output-on-failure -j 1 -L '^fuzz$')

echo "== release build"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-Werror >/dev/null
cmake --build build -j "$jobs"
cd build && ctest --output-on-failure -j 1
