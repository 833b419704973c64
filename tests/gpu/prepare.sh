#!/usr/bin/env bash
# tests/gpu/prepare.sh — run HERE (the development machine) before a GPU
# session: builds flynn with its CUDA plugin and packs what the GPU machine
# needs into .gpu/ (ignored by git, carried by the device tool): the
# binaries, the shared libraries the GPU image may lack (OpenBLAS and its
# Fortran runtime), and Fashion-MNIST (20,000 training images, the full test
# set), because that machine has no network and no Debian packages.
# Then: device run with carry [".gpu"] and command `bash tests/gpu/run.sh`.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup.sh
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLYNN_SANITIZE=OFF >/dev/null
cmake --build build-gpu -j "$(nproc)"
test -f build-gpu/libflynn_cuda.so || { echo "prepare: the CUDA plugin was not built (no nvcc/cuDNN?)" >&2; exit 1; }

rm -rf .gpu
mkdir -p .gpu/bin .gpu/lib .gpu/data/fashion-mnist
cp -L build-gpu/flynn build-gpu/libflynn_cuda.so build-gpu/tests/test_gpu_parity .gpu/bin/
cp -L build-gpu/libflynn.so.0 .gpu/lib/
# the non-system libraries flynn links (OpenBLAS, libgfortran, libquadmath, libgomp)
for lib in $(ldd build-gpu/flynn | awk '/=> \// {print $3}' | grep -E 'openblas|gfortran|quadmath|gomp'); do
  cp -L "$lib" ".gpu/lib/$(basename "$lib")"
done
gzip -9 .gpu/lib/libopenblas.so.0   # unpacked by run.sh; keeps the carried tree small

# Fashion-MNIST: the first 20,000 training images as a valid IDX file, and the test set
src=/usr/share/datasets/fashion-mnist
python3 - "$src" .gpu/data/fashion-mnist <<'PY'
import gzip, struct, sys, shutil, os
src, dst = sys.argv[1], sys.argv[2]
def subset(name, header, row, n):
    with gzip.open(os.path.join(src, name)) as f:
        head = f.read(header)
        data = f.read(row * n)
    head = head[:4] + struct.pack(">I", n) + head[8:]
    with gzip.open(os.path.join(dst, name), "wb", compresslevel=6) as f:
        f.write(head + data)
subset("train-images-idx3-ubyte.gz", 16, 784, 20000)
subset("train-labels-idx1-ubyte.gz", 8, 1, 20000)
for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
    shutil.copy(os.path.join(src, name), os.path.join(dst, name))
PY
# the PyTorch side of the GPU benchmark, if present
[ -d bench/gpu ] && cp -r bench/gpu .gpu/bench || true
du -sh .gpu
total=$(du -sk .gpu | cut -f1)
[ "$total" -lt 60000 ] || { echo "prepare: .gpu is ${total} KiB, over the device tool's 64 MiB" >&2; exit 1; }
echo "prepare: ready; run: device run, carry [\".gpu\"], command: bash tests/gpu/run.sh"
