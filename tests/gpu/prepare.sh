#!/usr/bin/env bash
# tests/gpu/prepare.sh — run HERE (the development machine) before a GPU
# session: builds flynn with its CUDA plugin in build-gpu/ and packs what
# the GPU machine needs into .gpu/ (ignored by git, carried by the device
# tool), because that machine has no network and no Debian packages:
#   .gpu/flynn-gpu.tar.gz   flynn, test_gpu_parity, libflynn.so.0,
#                           libflynn_cuda.so and their whole ldd closure
#                           except glibc, libstdc++, libgcc_s and CUDA
#                           (OpenBLAS, libzip, json-c, zlib and what they
#                           need; see tests/gpu/bundle.sh)
#   .gpu/data/fashion-mnist the first 20,000 training images, the test set
# tests/gpu/prove-bundle.sh then shows the bundle starts in a bare root.
# Then: device run with carry [".gpu"] and command `bash tests/gpu/run.sh`.
# usage: tests/gpu/prepare.sh [--no-build]   (--no-build: pack build-gpu/ as it is)
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/gpu/bundle.sh
if [ "${1:-}" != --no-build ]; then
  # FLYNN_GPU_CUDA12=1: the CUDA 12 plugin too (scripts/setup.sh --cuda12, 1.3 GB of toolchain and wheels),
  # for a GPU machine that has cuBLAS 12 and cuDNN for CUDA 12. Not by default: the GPU image this project is
  # lent has only CUDA 13 wheels, where its steps could only skip (issue 44)
  if [ "${FLYNN_GPU_CUDA12:-0}" = 1 ]; then scripts/setup.sh --cuda12; else scripts/setup.sh; fi
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLYNN_SANITIZE=OFF >/dev/null
  cmake --build build-gpu -j "$(nproc)"
  # the kernel-family benchmark (bench/ programs are built by hand, not by CMake), linked to the shared
  # libflynn so that the bundle's lib/ serves it
  cc -O2 -fopenmp -Iinclude -Isrc bench/kernel_families.c -Lbuild-gpu -lflynn -Wl,-rpath,'$ORIGIN/../lib' -lm \
    -o build-gpu/bench_kernel_families
fi
test -f build-gpu/libflynn_cuda.so || { echo "prepare: the CUDA plugin was not built (no nvcc/cuDNN?)" >&2; exit 1; }
# the plugin must carry the CUDA runtime itself: the target has no libcudart to match
if readelf -d build-gpu/libflynn_cuda.so | grep -q 'NEEDED.*libcudart'; then
  echo "prepare: libflynn_cuda.so links libcudart dynamically; the bundle expects it static" >&2; exit 1
fi

rm -rf .gpu
mkdir -p .gpu/data/fashion-mnist
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
files=(build-gpu/flynn build-gpu/libflynn.so.0 build-gpu/libflynn_cuda.so build-gpu/tests/test_gpu_parity)
cp -L build-gpu/flynn build-gpu/tests/test_gpu_parity "$stage/bin/"
cp -L build-gpu/libflynn.so.0 build-gpu/libflynn_cuda.so "$stage/lib/"
if [ -f build-gpu/libflynn_cuda12.so ]; then
  files+=(build-gpu/libflynn_cuda12.so)
  cp -L build-gpu/libflynn_cuda12.so "$stage/lib/"
else
  echo "prepare: no CUDA 12 plugin (FLYNN_GPU_CUDA12=1 builds it): run.sh will skip its steps" >&2
fi
# the OpenCL plugin (with its ICD loader and CLBlast in the closure; the target's driver gives the OpenCL
# library itself) and the kernel-family benchmark, where they were built
for f in build-gpu/libflynn_opencl.so; do [ -f "$f" ] && files+=("$f") && cp -L "$f" "$stage/lib/"; done
for f in build-gpu/bench_kernel_families; do [ -f "$f" ] && files+=("$f") && cp -L "$f" "$stage/bin/"; done
closure=$(bundle_closure "${files[@]}")
if ldd "${files[@]}" | grep "not found" | grep -vE "^[[:space:]]*(${BUNDLE_CUDA_RE#^})"; then
  echo "prepare: the libraries above are missing here" >&2; exit 1
fi
while read -r soname path; do
  [ -f "$stage/lib/$soname" ] || cp -L "$path" "$stage/lib/$soname"
done <<<"$closure"

{
  echo "flynn GPU bundle, packed by tests/gpu/prepare.sh on $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "source: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD -- src include CMakeLists.txt 2>/dev/null || echo ' + uncommitted changes')$([ "${1:-}" = --no-build ] && echo ' (--no-build: build-gpu as it was)')"
  echo "built on: $(grep -h PRETTY_NAME /etc/os-release | cut -d= -f2 | tr -d '"'), $(ldd --version | head -1)"
  echo "needs from the target: $(bundle_needs "$stage") (glibc, libstdc++, libgcc_s), a driver for CUDA 13, cuBLAS 13 and cuDNN 9"
  echo "libflynn_cuda.so: CUDA runtime linked statically; loads libcublas.so.13 and libcudnn.so.9 from the CUDA search"
  [ -f build-gpu/libflynn_cuda12.so ] && echo "libflynn_cuda12.so: CUDA 12 runtime linked statically; loads libcublas.so.12 and cuDNN 9 for CUDA 12"
  echo
  echo "lib/ (from):"
  for f in "$stage"/lib/*; do
    n=$(basename "$f")
    src=$(awk -v n="$n" '$1 == n {print $2}' <<<"$closure")
    pkg=""
    [ -n "$src" ] && pkg=$( { dpkg -S "$src" || dpkg -S "/usr$src" || dpkg -S "${src#/usr}"; } 2>/dev/null | head -1 | cut -d: -f1 || true)
    printf '  %-28s %6s KiB  %s\n' "$n" "$(( $(stat -c %s "$f") / 1024 ))" "${src:-build-gpu}${pkg:+ ($pkg)}"
  done
} > "$stage/MANIFEST.txt"
bundle_pack "$stage" .gpu/flynn-gpu.tar.gz
cp "$stage/MANIFEST.txt" .gpu/MANIFEST.txt
head -4 .gpu/MANIFEST.txt

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
echo "bundle: $(ls "$stage/lib" | wc -l) libraries, $(du -sh "$stage" | cut -f1) unpacked, $(du -h .gpu/flynn-gpu.tar.gz | cut -f1) packed"
du -sh .gpu
total=$(du -sk .gpu | cut -f1)
[ "$total" -lt 60000 ] || { echo "prepare: .gpu is ${total} KiB, over the device tool's 64 MiB" >&2; exit 1; }
echo "prepare: ready; check it: tests/gpu/prove-bundle.sh; run: device run, carry [\".gpu\"], command: bash tests/gpu/run.sh"
