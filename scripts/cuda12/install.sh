#!/usr/bin/env bash
# scripts/cuda12/install.sh — the CUDA 12 toolchain for flynn's second GPU
# plugin, libflynn_cuda12.so (drivers 525 to 575 run CUDA 12, not 13), from
# Debian and PyPI only: there is no CUDA 12 nvcc on either. Run by
# `scripts/setup.sh --cuda12` (or FLYNN_CUDA12=1 scripts/setup.sh); CMake
# then builds the plugin where it finds the result (docs/gpu.md, "Building
# the CUDA 12 plugin"). Idempotent.
#
#   compiler   Debian's clang-16: CUDA with --cuda-path, up to sm_90 (it
#              knows CUDA up to 11.8 and warns about 12.9; the headers work)
#   PTX->SASS  ptxas and libdevice from nvidia-cuda-nvcc-cu12 (no nvcc in it)
#   fatbin     clang runs a `fatbinary`, which no CUDA 12 wheel has:
#              scripts/cuda12/fatbinary.c does the same with NVIDIA's
#              nvFatbin library (nvidia-nvfatbin-cu12)
#   runtime    headers and libcudart_static.a: nvidia-cuda-runtime-cu12;
#              the crt/ headers: nvidia-cuda-nvcc-cu12; nv/target, which
#              cuda_fp16.h includes (through cublas_api.h): nvidia-cuda-cccl-cu12
#              (3 MB; a CUDA 13 install in /usr/local/include hid its absence
#              until the Dockerfile's clean build, tests/docker_build.sh)
#   libraries  cuBLAS (nvidia-cublas-cu12) and cuDNN 9 (nvidia-cudnn-cu12):
#              headers to compile, .so to link (about 2 GiB unpacked)
#
# The wheels go into a virtualenv, $FLYNN_CUDA12_PREFIX (default
# /opt/flynn-cuda12); $PREFIX/toolkit is assembled from them as clang's
# --cuda-path wants it (bin/ptxas, bin/fatbinary, include/, lib64/,
# nvvm/libdevice/) with links into the virtualenv.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
PREFIX=${FLYNN_CUDA12_PREFIX:-/opt/flynn-cuda12}
TK=$PREFIX/toolkit
# versions pinned so that every machine builds the same plugin
wheels=(nvidia-cuda-runtime-cu12==12.9.79 nvidia-cuda-nvcc-cu12==12.9.86 nvidia-nvfatbin-cu12==12.9.82
        nvidia-cuda-cccl-cu12==12.9.27 nvidia-cublas-cu12==12.9.3.13 nvidia-cudnn-cu12==9.28.0.42)

if [ -x "$TK/bin/fatbinary" ] && [ -f "$TK/include/cudnn.h" ] && [ -f "$TK/lib64/libcudart_static.a" ] &&
   [ -f "$TK/include/nv/target" ] &&
   command -v clang-16 >/dev/null; then
  echo "setup: the CUDA 12 toolchain is in $TK"
  exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
need=()
for p in clang-16 python3-venv; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
[ -x "$PREFIX/bin/python3" ] || $SUDO python3 -m venv "$PREFIX"
echo "setup: pip installing ${wheels[*]} into $PREFIX (about 1.3 GB to download)"
$SUDO "$PREFIX/bin/python3" -m pip install -q --disable-pip-version-check "${wheels[@]}"
nv=$("$PREFIX/bin/python3" -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0] + "/x"))')

$SUDO rm -rf "$TK"
$SUDO mkdir -p "$TK/bin" "$TK/include" "$TK/lib64" "$TK/nvvm"
$SUDO ln -s "$nv/cuda_nvcc/bin/ptxas" "$TK/bin/ptxas"
$SUDO ln -s "$nv/cuda_nvcc/nvvm/libdevice" "$TK/nvvm/libdevice"
for d in cuda_runtime cuda_nvcc cuda_cccl cublas cudnn nvfatbin; do
  for f in "$nv/$d/include/"*; do $SUDO ln -sf "$f" "$TK/include/"; done
done
for d in cuda_runtime cublas cudnn nvfatbin; do
  for f in "$nv/$d/lib/"*; do $SUDO ln -sf "$f" "$TK/lib64/"; done
done
# clang's CUDA wrapper force-includes curand_mtgp32_kernel.h to neutralise
# it; flynn uses no cuRAND, so an empty header stands in (the wheel with the
# real one, nvidia-curand-cu12, is 200 MB of libraries flynn does not use)
echo "/* empty: flynn uses no cuRAND (scripts/cuda12/install.sh) */" | $SUDO tee "$TK/include/curand_mtgp32_kernel.h" >/dev/null
$SUDO cc -O2 -Wall -Wextra -Werror -o "$TK/bin/fatbinary" "$here/fatbinary.c" -I"$nv/nvfatbin/include" \
  "$nv/nvfatbin/lib/libnvfatbin.so.12" -Wl,-rpath,"$nv/nvfatbin/lib"
echo "setup: the CUDA 12 toolchain is in $TK (clang-16 --cuda-path=$TK); reconfigure flynn's build to build libflynn_cuda12.so"
