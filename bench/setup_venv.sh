#!/bin/sh
# setup_venv.sh — the peers users install, from PyPI, each in its own
# virtualenv, for bench/suite.py, bench/text_compare.py and the stream
# benches: PyTorch 2 (CPU only) in TORCH_DIR, and Keras 3 on TensorFlow 2.21
# CPU (with Pillow, h5py and tensorboard, which the fixture tools use too) in
# TF_DIR. Never used by the test suite.
#
# PyPI's Linux torch wheel is the CUDA build: `pip install torch` pulls ~3 GB
# of NVIDIA wheels that a CPU run never calls. Here torch goes in with
# --no-deps, plus its pure-Python dependencies. Its libtorch_cuda.so must
# still load at `import torch`; where a CUDA 13 toolkit is installed
# (/usr/local/cuda: cudart, cuBLAS, cuFFT, cuSPARSE, cuSOLVER, cuDNN) only
# the four libraries it lacks come from PyPI (cuFile, NVSHMEM, cuSPARSELt,
# and NCCL, whose version torch pins; ~0.9 GB in all), and
# $DIR/bin/torch-python runs Python with them on LD_LIBRARY_PATH. Without a
# toolkit the script falls back to the full `pip install torch`.
#
# Measured 2026-11-30: torch 2.15.0+cu132 (MKL 2024.2, oneDNN 3.13.3, CPU
# capability AVX2 on the AMD EPYC test machine).
#
# usage: bench/setup_venv.sh [TORCH_DIR [TF_DIR]]
#        (defaults /opt/torchvenv and /opt/tfkvenv; SKIP_TORCH=1 or SKIP_TF=1
#        leaves one out)
set -eu
dir=${1:-/opt/torchvenv}
tfdir=${2:-/opt/tfkvenv}
cuda=${CUDA_HOME:-/usr/local/cuda}

if [ "${SKIP_TF:-0}" != 1 ]; then
  # Keras 3.15 on TensorFlow 2.21: the versions the fixtures and the
  # documented figures were made with. TensorFlow's Linux wheel runs on the
  # CPU without its optional NVIDIA extras ([and-cuda]).
  python3 -m venv "$tfdir"
  "$tfdir/bin/pip" install --quiet --upgrade pip
  "$tfdir/bin/pip" install --quiet "tensorflow==2.21.*" "keras==3.15.*" pillow h5py tensorboard numpy
  "$tfdir/bin/python" - <<'PY'
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf, keras, numpy as np
m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
m.compile("sgd", "mse")
m.fit(np.zeros((4, 8)), np.zeros((4, 4)), verbose=0)
print("tensorflow", tf.__version__, "keras", keras.__version__, "ok on the CPU")
PY
  echo "$tfdir/bin/python"
fi
[ "${SKIP_TORCH:-0}" = 1 ] && exit 0

python3 -m venv "$dir"
"$dir/bin/pip" install --quiet --upgrade pip
if [ -e "$cuda/lib64/libcudart.so.13" ]; then
  "$dir/bin/pip" install --quiet --no-deps torch
  "$dir/bin/pip" install --quiet filelock typing-extensions sympy networkx jinja2 fsspec numpy
  tv=$("$dir/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))')
  # the versions torch pins for the four (from its own metadata)
  pins=$("$dir/bin/python" - <<'PY'
import importlib.metadata as m, re
want = ("nvidia-cufile", "nvidia-nvshmem", "nvidia-cusparselt", "nvidia-nccl")
for r in m.requires("torch") or []:
    name = re.split(r"[ ;=<>\[]", r, 1)[0]
    if name.startswith(want):
        print(r.split(";")[0].replace(" ", ""))
PY
)
  # cuFile comes through cuda-toolkit[cufile], which is not pinned itself
  case "$pins" in *nvidia-cufile*) ;; *) pins="$pins nvidia-cufile" ;; esac
  echo "torch $tv: adding" $pins
  # shellcheck disable=SC2086
  "$dir/bin/pip" install --quiet --no-deps $pins
  nv="$dir/lib/$(ls "$dir/lib")/site-packages/nvidia"
  libs=""
  for d in "$nv"/*/lib; do libs="$libs${libs:+:}$d"; done
  libs="$libs:$cuda/lib64:$cuda/lib"
else
  "$dir/bin/pip" install --quiet torch numpy
  libs=""
fi
cat > "$dir/bin/torch-python" <<SH
#!/bin/sh
LD_LIBRARY_PATH="$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$dir/bin/python" "\$@"
SH
chmod +x "$dir/bin/torch-python"
# it imports, and an LSTM trains a step on the CPU
"$dir/bin/torch-python" - <<'PY'
import torch
m = torch.nn.LSTM(16, 32, batch_first=True)
y, _ = m(torch.randn(4, 8, 16))
y.sum().backward()
print("torch", torch.__version__, "ok on the CPU:", tuple(y.shape), "threads", torch.get_num_threads())
PY
echo "$dir/bin/torch-python"
