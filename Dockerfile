# flynn with its CUDA 12 plugin (drivers 525 and newer, 580+ included) and
# NVIDIA's pip wheels of cuBLAS and cuDNN; no CUDA toolkit. docs/gpu.md,
# "A container without the CUDA toolkit"; tests/docker_build.sh builds it.
#   docker build -t flynn-gpu .
#   docker run --rm --gpus all flynn-gpu                  # flynn doctor
#   docker run --rm --gpus all flynn-gpu flynn train --epochs 1

# The builder: flynn's build dependencies and the CUDA 12 toolchain from
# Debian and PyPI (scripts/setup.sh --cuda12: clang-16 and the wheels).
FROM debian:12 AS build
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/*
COPY . /src
WORKDIR /src
RUN scripts/setup.sh --cuda12 \
 && cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLYNN_BUILD_TESTS=OFF -DCMAKE_INSTALL_PREFIX=/opt/flynn \
 && cmake --build /build && cmake --install /build \
 && test -f /opt/flynn/lib/libflynn_cuda12.so

# The image: plain Debian, the libraries flynn links, Fashion-MNIST (flynn
# train's default data) and a virtualenv of NVIDIA's wheels in /opt/nvidia,
# which flynn finds without activating it (it searches /opt/*).
FROM debian:12
RUN apt-get update && apt-get install -y --no-install-recommends \
      libopenblas0-openmp libgomp1 libzip4 libjson-c5 zlib1g libjpeg62-turbo libpng16-16 python3 python3-venv \
      dataset-fashion-mnist \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/nvidia \
 && /opt/nvidia/bin/pip install --no-cache-dir nvidia-cublas-cu12==12.9.3.13 nvidia-cudnn-cu12==9.28.0.42
COPY --from=build /opt/flynn /opt/flynn
ENV PATH=/opt/flynn/bin:$PATH
CMD ["flynn", "doctor"]
