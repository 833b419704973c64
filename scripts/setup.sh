#!/usr/bin/env bash
# scripts/setup.sh — installs what flynn needs to build, test and run its main
# job on a fresh Debian 12 machine. Idempotent: installs only what is missing.
# Usage: scripts/setup.sh [--bench] [--cuda12] [--mpi] [--test]
#   --bench   also installs PyTorch for bench/, and rsvg-convert to look at
#             flynn bench's charts
#   --cuda12  (or FLYNN_CUDA12=1) also installs the toolchain of the CUDA 12
#             plugin, libflynn_cuda12.so, for drivers 525 to 575: clang-16
#             and NVIDIA's CUDA 12 pip wheels (about 1.3 GB), see
#             scripts/cuda12/install.sh; CMake builds the plugin where it is
#             installed
#   --mpi     also installs Open MPI, for `mpirun -np N flynn train`
#             (docs/scale-out.md) and ctest's test_mpi
set -euo pipefail

# python3: test_doctor.sh and test_bench.sh read flynn's JSON with it;
# libgfortran-12-dev: a static link against OpenBLAS needs -lgfortran
# (`pkg-config --static --libs openblas`), libzip -lbz2 -lssl -lcrypto, which
# test_install.sh's static consumer links; clang, libclang-rt-dev (libFuzzer
# and the sanitizer runtimes) and libomp-dev (OpenMP for clang): the fuzz
# build of tests/fuzz, whose smoke tests scripts/test.sh runs; libjpeg62-turbo-dev
# and libpng-dev: images (--data DIR, fl_image_dataset_from_directory);
# ocl-icd-opencl-dev, opencl-headers and libclblast-dev: the OpenCL plugin,
# libflynn_opencl.so (any vendor's OpenCL driver; docs/gpu.md).
# --test (scripts/test.sh) adds what only the tests need: Open MPI (test_mpi's
# mpirun runs, as --mpi), and chromium and fonts-dejavu-core: test_plot.sh
# renders `flynn plot`'s SVG in a real headless browser and checks the
# screenshot (about 120 MB to download, 414 MB installed, 49 s with
# --no-install-recommends on a Debian 12 machine), so scripts/train.sh does
# not fetch a browser. pocl-opencl-icd (PoCL: OpenCL on the CPU, with
# clang-15 and LLVM 15, about 90 MB to download) and clinfo: test_opencl_parity
# runs the OpenCL plugin's kernels on it, in every CI run. python3-opencv and python3-skimage (Debian's
# OpenCV 4.6 and scikit-image, for /usr/bin/python3): test_sift_opencv measures flynn's SIFT against
# OpenCV's cv::SIFT on skimage's photos (tests/sift/). It also makes .venv-test, a virtualenv with tensorboard
# and numpy from PyPI (about 180 MB, 30 s), for test_tensorboard_reader:
# TensorBoard's own EventAccumulator and server read flynn's logs. Where
# PyPI cannot be reached that test is skipped (ctest says so), not failed.
pkgs=(build-essential cmake ninja-build pkg-config python3
      libopenblas-openmp-dev libgfortran-12-dev zlib1g-dev libzip-dev libbz2-dev libssl-dev libhdf5-dev libjson-c-dev
      libjpeg62-turbo-dev libpng-dev
      ocl-icd-opencl-dev opencl-headers libclblast-dev
      clang libclang-rt-dev libomp-dev
      dataset-fashion-mnist)
bench=0 test=0 cuda12=${FLYNN_CUDA12:-0}
for a in "$@"; do
  case $a in
    --bench) bench=1 ;;
    --cuda12) cuda12=1 ;;
    --mpi) pkgs+=(openmpi-bin libopenmpi-dev) ;;
    --test) test=1; pkgs+=(openmpi-bin libopenmpi-dev chromium fonts-dejavu-core python3-venv pocl-opencl-icd clinfo
                           python3-opencv python3-skimage) ;;
    *) echo "setup: unknown option $a (expected --bench, --cuda12, --mpi or --test)" >&2; exit 2 ;;
  esac
done
if [ $bench = 1 ]; then
  pkgs+=(python3-torch libopenblas0-openmp python3-numpy librsvg2-bin)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: all packages present"
fi

if [ "$cuda12" = 1 ]; then
  "$(dirname "$0")/cuda12/install.sh"
fi

if [ "$test" = 1 ]; then
  venv="$(cd "$(dirname "$0")/.." && pwd)/.venv-test"
  if "$venv/bin/python" -c 'import tensorboard, numpy' 2>/dev/null; then
    echo "setup: $venv has tensorboard"
  else
    echo "setup: making $venv with tensorboard and numpy from PyPI (test_tensorboard_reader)"
    if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q --disable-pip-version-check tensorboard numpy; }; then
      echo "setup: could not install tensorboard from PyPI into $venv: test_tensorboard_reader will be skipped" >&2
    fi
  fi
fi
