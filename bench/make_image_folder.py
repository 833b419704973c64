#!/usr/bin/env python3
"""make_image_folder.py OUT N [SIZE] — a folder of JPEG images in class
subfolders for `flynn train --data OUT` (bench/stream_images.sh): the first N
Fashion-MNIST training images (Debian's dataset-fashion-mnist), written as
OUT/<class>/<i>.jpg (quality 90), upscaled to SIZE x SIZE RGB (default 28:
the 28x28 grayscale originals), so that decoding costs what a user's photos
would. Needs Pillow (in /opt/tfkvenv) and NumPy."""
import gzip, os, sys

import numpy as np
from PIL import Image

out, n = sys.argv[1], int(sys.argv[2])
size = int(sys.argv[3]) if len(sys.argv) > 3 else 28
src = os.environ.get("FASHION_MNIST", "/usr/share/datasets/fashion-mnist")
with gzip.open(os.path.join(src, "train-images-idx3-ubyte.gz")) as f:
    x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)[:n]
with gzip.open(os.path.join(src, "train-labels-idx1-ubyte.gz")) as f:
    y = np.frombuffer(f.read(), np.uint8, offset=8)[:n]
names = ["tshirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot"]
for c in names:
    os.makedirs(os.path.join(out, c), exist_ok=True)
for i in range(len(x)):
    im = Image.fromarray(x[i], "L")
    if size != 28:
        im = im.resize((size, size), Image.BILINEAR).convert("RGB")
    im.save(os.path.join(out, names[y[i]], "%05d.jpg" % i), quality=90)
print(f"{out}: {len(x)} JPEG images {size}x{size} {'gray' if size == 28 else 'RGB'} in {len(names)} classes")
