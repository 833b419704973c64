#!/usr/bin/env python3
"""augment_fixture.py OUT_DIR — the reference of flynn's stream augmentation
(src/io/stream.c, fl_data_stream_augment) from Keras 3 on TensorFlow: the
transform keras.layers.RandomTranslation applies once it has drawn a shift
(keras.ops.image.affine_transform with its translation matrix [1 0 -dx 0 1 -dy
0 0], bilinear, fill_mode "reflect" — the layer's defaults), and
RandomFlip("horizontal")'s flip, on random images for fixed (flip, dy, dx).
Writes OUT_DIR/translate.npz: x (n, h, w, c) float32, flip (n,) int32, dy and
dx (n,) float32 in pixels, out (n, h, w, c) float32 (flip first, then the
translation, as RandomFlip followed by RandomTranslation).

    KERAS_BACKEND=tensorflow /opt/tfkvenv/bin/python tools/augment_fixture.py tests/fixtures/data/augment
"""
import os, sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
import numpy as np
import keras

out_dir = sys.argv[1]
os.makedirs(out_dir, exist_ok=True)
rng = np.random.RandomState(3)
h, w, c = 7, 6, 3
shifts = [(0.0, 0.0), (1.0, -2.0), (-0.3, 0.6), (2.75, 1.25), (-5.9, 4.4), (6.5, -6.2), (-13.2, 9.7), (0.5, 0.5)]
n = len(shifts)
x = rng.uniform(0, 255, size=(n, h, w, c)).astype(np.float32)
flip = np.array([i % 3 == 1 for i in range(n)], np.int32)
dy = np.array([s[0] for s in shifts], np.float32)
dx = np.array([s[1] for s in shifts], np.float32)
flipped = np.where(flip[:, None, None, None] == 1, x[:, :, ::-1, :], x)
mats = np.stack([[1, 0, -dx[i], 0, 1, -dy[i], 0, 0] for i in range(n)]).astype(np.float32)
out = keras.ops.convert_to_numpy(keras.ops.image.affine_transform(
    flipped, mats, interpolation="bilinear", fill_mode="reflect", fill_value=0.0))
np.savez(os.path.join(out_dir, "translate.npz"), x=x, flip=flip, dy=dy, dx=dx, out=out.astype(np.float32))
print(f"{out_dir}/translate.npz: {n} images {h}x{w}x{c}, keras {keras.__version__} on {keras.backend.backend()}")
