#!/usr/bin/env bash
# tests/gpu/prove-bundle.sh — proves HERE, without a GPU, that the bundle
# tests/gpu/prepare.sh packed (.gpu/flynn-gpu.tar.gz) starts on a machine
# that has nothing of flynn's dependencies: a bare root holding only this
# machine's glibc (Debian package libc6), libstdc++6 and libgcc-s1 (no
# zlib, no shell, no ldd, no CUDA), entered with chroot. In it, the bundle
# is unpacked as run.sh does (bundle_unpack from tests/gpu/bundle.sh) and:
#   - "ldd" (the loader's --list, as ldd itself runs it) of every bundled
#     file must find every library but the CUDA ones flynn loads itself;
#   - flynn --help; flynn doctor and flynn devices (must run and say there
#     is no NVIDIA driver); test_gpu_parity (must start and skip with the
#     reason); flynn train --device cpu on the bundled Fashion-MNIST;
#   - flynn doctor again with a stub driver (tests/stub_libcuda.c) and this
#     machine's cuBLAS/cuDNN mounted read-only in the root, standing in for
#     the target's pip wheels: it must load libflynn_cuda.so from next to
#     libflynn.so.0 and stop only at "no CUDA device" (skipped when
#     build-gpu has no stub driver or /usr/local/cuda has no cuDNN);
#   - run.sh itself, end to end, in a bare Debian 12 (debootstrap's minbase:
#     bash, tar and gzip, no xz, no python3, no compiler; the root that
#     ../shared/tools/fresh-debian.sh caches in /var/tmp/fresh-root.tar, or
#     $FLYNN_MINBASE_TAR): it must unpack the bundle, find no GPU, and reach
#     the CPU seed workload with its numbers.
# It prints the newest symbol versions the bundle needs from the target:
# glibc 2.34 (GLIBC_2.34; Debian 12 builds), libstdc++ CXXABI_1.3 only (the
# plugin), libgcc_s GCC_4.3.0 — so a target with glibc >= 2.34 will do.
# Exit status: 0 when everything passed, 1 otherwise.
# usage (as root): tests/gpu/prove-bundle.sh [ROOT_DIR]   (default /var/tmp/flynn-bare-root)
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/gpu/bundle.sh
R=${1:-/var/tmp/flynn-bare-root}
TARBALL=${FLYNN_BUNDLE:-.gpu/flynn-gpu.tar.gz}   # FLYNN_BUNDLE: another bundle to prove
D=/tmp/flynn-gpu            # where run.sh unpacks it, here inside the root
DATA=/data/fashion-mnist
[ "$(id -u)" = 0 ] || { echo "prove-bundle: needs root (chroot, mount)"; exit 1; }
[ -f "$TARBALL" ] || { echo "prove-bundle: no $TARBALL: run tests/gpu/prepare.sh first"; exit 1; }
pass=0 fail=0
result() { if [ "$1" = 0 ]; then pass=$((pass + 1)); echo "PASS: $2"; else fail=$((fail + 1)); echo "FAIL: $2"; fi; }

echo "== the bare root: $R"
mounts=()
cleanup() { local m; for m in "${mounts[@]}"; do umount -l "$m" 2>/dev/null; done; }
trap cleanup EXIT
rm -rf "$R" && mkdir -p "$R/usr/lib" "$R/usr/lib64" "$R/usr/bin" "$R/usr/sbin" || exit 1
for d in lib lib64 bin sbin; do ln -s "usr/$d" "$R/$d"; done   # merged /usr, as Debian 12
for pkg in libc6 libstdc++6 libgcc-s1; do
  dpkg -L "$pkg:amd64" 2>/dev/null || dpkg -L "$pkg"
done | while read -r p; do
  if [ -L "$p" ] || [ -f "$p" ]; then mkdir -p "$(dirname "$R$p")" && cp -a "$p" "$R$p" || echo "cannot copy $p"; fi
done | grep . && { echo "prove-bundle: the root could not be built"; exit 1; }
echo "packages: $(for p in libc6 libstdc++6 libgcc-s1; do dpkg-query -W -f='${Package} ${Version}, ' "$p"; done | sed 's/, $//')"
echo "libraries in it: $(find "$R/usr/lib/x86_64-linux-gnu" "$R/usr/lib64" -maxdepth 1 -name '*.so*' -printf '%f\n' | sort -u | tr '\n' ' ')(and glibc's gconv modules)"
for x in sh bash ldd tar libz.so.1 libhdf5_serial.so.103 libopenblas.so.0; do
  [ -z "$(find "$R" -name "$x" -print -quit)" ] || { echo "prove-bundle: the root unexpectedly has $x"; exit 1; }
done
echo "(no sh, bash, ldd, tar, zlib, HDF5 or OpenBLAS in it)"
mkdir -p "$R/tmp" "$R/proc" "$R/dev" "$R/data"
mount -t proc proc "$R/proc" && mounts+=("$R/proc")
mount --bind /dev "$R/dev" && mounts+=("$R/dev")

echo
echo "== unpack, as run.sh does: bundle_unpack $TARBALL $D"
bundle_unpack "$TARBALL" "$R$D"; result $? "bundle_unpack"
cp -r .gpu/data/fashion-mnist "$R/data/"
echo "bundle: $(ls "$R$D/lib" | wc -l) libraries + $(ls "$R$D/bin" | tr '\n' ' ')($(du -sh "$R$D" | cut -f1) unpacked, $(du -h "$TARBALL" | cut -f1) packed)"
needs=$(bundle_needs "$R$D")
echo "needs from the target: $needs"
root_glibc=$(bundle_exec "$R" -- "$BUNDLE_LOADER" --version | head -1)
echo "the root's loader: $root_glibc"

echo
echo "== ldd of every bundled file, in the root (LD_LIBRARY_PATH=$D/lib)"
BUNDLE_LDD_ALL=1 bundle_ldd "$D" "$R"; result $? "ldd: every library found in the root (CUDA aside)"

# in_root NAME RC PATTERN [VAR=VALUE...] -- CMD... : runs CMD in the root with the
# bundle's environment; passes when it exits RC, prints PATTERN, and no loader error
in_root() {
  local name=$1 want=$2 pat=$3; shift 3
  local envs=(PATH="$D/bin" HOME=/tmp LD_LIBRARY_PATH="$D/lib")
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  echo
  echo "== in the root: $* ${envs[*]:3}"
  local out rc
  out=$(BUNDLE_TIMEOUT=300 bundle_exec "$R" "${envs[@]}" -- "$@" 2>&1); rc=$?
  sed 's/^/  | /' <<<"$out" | tail -n "${TAIL:-8}"
  local ok=0
  [ "$rc" = "$want" ] || { echo "  exit $rc, expected $want"; ok=1; }
  grep -qE -- "$pat" <<<"$out" || { echo "  output lacks /$pat/"; ok=1; }
  ! grep -qE "error while loading shared libraries|cannot open shared object|symbol lookup error|GLIBC_[0-9.]+' not found" <<<"$out" ||
    { echo "  a loader error"; ok=1; }
  result $ok "$name (exit $rc)"
}

TAIL=3 in_root "flynn --help" 0 "^usage: flynn" -- "$D/bin/flynn" --help
TAIL=4 in_root "flynn doctor: runs, no GPU/driver" 1 "driver +FAIL +no NVIDIA driver is loaded" -- "$D/bin/flynn" doctor
in_root "flynn devices: runs, no GPU" 1 "No usable CUDA device: no NVIDIA driver" -- "$D/bin/flynn" devices
TAIL=3 in_root "test_gpu_parity: starts and skips" 77 "^SKIP: no usable GPU: no NVIDIA driver" \
  FLYNN_CUDA_PLUGIN="$D/lib/libflynn_cuda.so" -- "$D/bin/test_gpu_parity" "$DATA"
TAIL=6 in_root "flynn train --device cpu (512 Fashion-MNIST images, 1 epoch)" 0 "^test accuracy: 0\.[0-9]+" \
  -- "$D/bin/flynn" train --device cpu --data "fashion-mnist:$DATA" --samples 512 --test-samples 1000 --epochs 1

# the GPU path as far as it goes without a GPU: a stub driver, real cuBLAS/cuDNN
stub=build-gpu/tests/stub_driver/libcuda.so.1
cudalib=$(readlink -f /usr/local/cuda/lib64)
if [ -f "$stub" ] && [ -f "$cudalib/libcudnn.so.9" ]; then
  mkdir -p "$R/stub" "$R/opt/cuda-libs"
  cp "$stub" "$R/stub/libcuda.so.1"
  echo "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.00  (prove-bundle stub)" > "$R/stub/version"
  mount --bind -o ro "$cudalib" "$R/opt/cuda-libs" && mounts+=("$R/opt/cuda-libs")
  TAIL=14 in_root "flynn doctor with a stub driver: loads cuBLAS, cuDNN and the plugin next to libflynn" 1 \
    "plugin +PASS +$D/lib/libflynn_cuda.so" FLYNN_NVIDIA_PROC=/stub/version FLYNN_LIBCUDA=/stub/libcuda.so.1 \
    FLYNN_CUDA_LIB_PATH=/opt/cuda-libs -- "$D/bin/flynn" doctor
else
  echo
  echo "SKIP: flynn doctor with a stub driver ($stub or $cudalib/libcudnn.so.9 missing)"
fi

# run.sh end to end in a minbase root
MB=${FLYNN_MINBASE_TAR:-/var/tmp/fresh-root.tar}
MR=/var/tmp/flynn-minbase-root
echo
if [ -f "$MB" ]; then
  echo "== run.sh end to end in a bare Debian 12 (minbase, from $MB): bash tests/gpu/run.sh"
  rm -rf "$MR" && mkdir -p "$MR" && tar -C "$MR" -xf "$MB"
  for x in xz python3 cc; do
    [ -z "$(find "$MR/usr/bin" -name "$x" -print -quit)" ] || echo "  (note: the minbase root has $x)"
  done
  mkdir -p "$MR/root/flynn/tests/gpu" "$MR/root/flynn/bench/gpu"
  cp tests/gpu/run.sh tests/gpu/bundle.sh "$MR/root/flynn/tests/gpu/"
  cp bench/gpu/run.sh "$MR/root/flynn/bench/gpu/" 2>/dev/null
  cp -r .gpu "$MR/root/flynn/"
  mount -t proc proc "$MR/proc" && mounts+=("$MR/proc")
  mount --bind /dev "$MR/dev" && mounts+=("$MR/dev")
  out=$(timeout -k 5 400 chroot "$MR" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
        /bin/bash -c 'cd /root/flynn && OUT=/tmp/flynn-gpu-out FLYNN_GPU_DEADLINE=300 bash tests/gpu/run.sh' 2>&1); rc=$?
  grep -E "^(bundle: unpack|flynn doctor|parity|mnist_cnn|total|exit status)" <<<"$out" | sed 's/^/  | /'
  cpu_line=$(grep -E "^mnist_cnn 1k, batch 128, CPU +PASS; [0-9]+ samples/s" <<<"$out")
  [ $rc = 0 ] && grep -qE "^bundle: unpack, ldd +PASS" <<<"$out" && [ -n "$cpu_line" ]
  result $? "run.sh in a minbase root: unpacked, no GPU, the CPU seed workload ran (exit $rc)"
else
  echo "SKIP: run.sh in a minbase root: no $MB (run ../shared/tools/fresh-debian.sh once, or set FLYNN_MINBASE_TAR)"
fi

echo
echo "prove-bundle: $pass passed, $fail failed; the bundle needs $needs (glibc, libstdc++, libgcc_s) on the target"
[ $fail -eq 0 ]
