#!/usr/bin/env python3
"""data_fixtures.py OUT — the fixtures of tests/test_data_files.c: .npz
files written by NumPy itself (OUT/npz), and a small folder of images in
class subfolders with what keras.utils.image_dataset_from_directory (Keras 3
on TensorFlow) makes of it (OUT/images).

Run with TensorFlow + Keras (the image reference needs tf.data):
    /opt/tfkvenv/bin/python tools/data_fixtures.py tests/fixtures/data
Images: writes OUT/tree/<class>/... and OUT/tree_png (its PNG files only: Keras
refuses color_mode="rgba" for a JPEG) (PNG: gray, RGB, RGBA, palette with tRNS,
16-bit; JPEG: RGB and grayscale, in several sizes, one in a nested folder,
a hidden class folder that Keras skips, a .txt that it ignores) and
OUT/ref_<case>.npz with x (float32) and y, OUT/ref_<case>.paths.txt (the
file order, relative to the tree), for each case in
CASES (image_size, color_mode, shuffle/seed, validation_split/subset,
label_mode). The images are made with TensorFlow's own encoders and a
hand-written palette PNG (zlib), deterministic from a fixed NumPy seed."""
import os, struct, sys, zlib

import numpy as np
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
import tensorflow as tf
import keras

CASES = [
    # name, kwargs
    ("rgb_8x8", dict(image_size=(8, 8), color_mode="rgb", shuffle=False)),
    ("gray_5x7", dict(image_size=(5, 7), color_mode="grayscale", shuffle=False, label_mode="categorical")),
    ("png_rgba_12x10", dict(image_size=(12, 10), color_mode="rgba", shuffle=False)),  # tree_png: JPEG has no rgba
    ("shuffle_seed7_train", dict(image_size=(6, 6), shuffle=True, seed=7, validation_split=0.25, subset="training")),
    ("shuffle_seed7_val", dict(image_size=(6, 6), shuffle=True, seed=7, validation_split=0.25, subset="validation")),
]


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def palette_png(idx, palette, alpha):
    h, w = idx.shape
    raw = b"".join(b"\0" + bytes(row) for row in idx.astype(np.uint8))
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 3, 0, 0, 0)) +
            png_chunk(b"PLTE", bytes(palette.astype(np.uint8).ravel())) + png_chunk(b"tRNS", bytes(alpha)) +
            png_chunk(b"IDAT", zlib.compress(raw, 9)) + png_chunk(b"IEND", b""))


def make_tree(tree):
    rng = np.random.RandomState(1234)
    img = lambda h, w, c: rng.randint(0, 256, size=(h, w, c)).astype(np.uint8)
    files = {
        "cats/c01.png": tf.io.encode_png(img(9, 11, 3)).numpy(),
        "cats/c02.PNG": tf.io.encode_png(img(4, 4, 1)).numpy(),
        "cats/c03.jpg": tf.io.encode_jpeg(img(16, 12, 3), quality=90).numpy(),
        "cats/deep/c04.png": tf.io.encode_png(img(8, 8, 4)).numpy(),
        "cats/notes.txt": b"not an image: Keras skips it by its extension\n",
        "dogs/d01.jpeg": tf.io.encode_jpeg(img(10, 13, 1), quality=85).numpy(),
        "dogs/d02.png": palette_png(rng.randint(0, 4, size=(7, 5)), img(4, 1, 3).reshape(4, 3), [255, 128, 0, 255]),
        "dogs/d03.png": tf.io.encode_png(tf.constant(rng.randint(0, 65536, size=(6, 6, 3)).astype(np.uint16))).numpy(),
        "dogs/d04.png": tf.io.encode_png(img(3, 17, 2)).numpy(),
        "fish/f01.png": tf.io.encode_png(img(8, 8, 3)).numpy(),
        "fish/f02.jpg": tf.io.encode_jpeg(img(7, 9, 3), quality=95).numpy(),
        ".hidden/h01.png": tf.io.encode_png(img(5, 5, 3)).numpy(),
    }
    for name, data in files.items():
        for t in (tree, tree + "_png"):
            if t != tree and not name.lower().endswith(".png"):
                continue
            p = os.path.join(t, name)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(data)


def npz_files(out):
    """OUT/npz: the arrays are simple formulas that test_data_files.c recomputes."""
    os.makedirs(out, exist_ok=True)
    x = (np.arange(15, dtype=np.float32) * 0.5).reshape(5, 3)
    y = np.array([0, 1, 2, 1, 0], dtype=np.int64)
    np.savez(os.path.join(out, "xy_stored.npz"), x=x, y=y)
    np.savez_compressed(os.path.join(out, "xy_deflated.npz"), x=np.arange(16, dtype=np.uint8).reshape(4, 2, 2),
                        y=np.array([1.5, -2.0, 3.25, 0.0]))
    np.savez_compressed(os.path.join(out, "keras_layout.npz"), x_train=np.arange(12, dtype=np.uint8).reshape(3, 2, 2),
                        y_train=np.array([2, 0, 1], dtype=np.uint8), x_test=np.full((2, 2, 2), 7, dtype=np.uint8),
                        y_test=np.array([1, 1], dtype=np.uint8))
    np.savez(os.path.join(out, "positional.npz"), x, y)  # arr_0, arr_1
    np.savez(os.path.join(out, "lengths.npz"), x=x, y=y[:4])
    np.savez(os.path.join(out, "two_inputs.npz"), image=np.ones((3, 2, 2, 1), np.float32),
             meta=np.arange(6, dtype=np.float32).reshape(3, 2), y=np.array([0, 1, 0]))


def models(out):
    """OUT/models/categorical_8x8.keras: a small image classifier compiled as keras.io's
    mnist_convnet is (categorical_crossentropy), for `flynn train --data DIR` with class-index
    labels; mlp_csv.keras (regression) and categorical_csv.keras (3 classes) for a CSV table of
    3 features."""
    os.makedirs(out, exist_ok=True)
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Rescaling(1 / 255), keras.layers.Flatten(),
                          keras.layers.Dense(3, activation="softmax")])
    m.compile(optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"])
    m.save(os.path.join(out, "categorical_8x8.keras"))
    m = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)])
    m.compile(optimizer="adam", loss="mse")
    m.save(os.path.join(out, "mlp_csv.keras"))
    m = keras.Sequential([keras.Input((3,)), keras.layers.Dense(3, activation="softmax")])
    m.compile(optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"])
    m.save(os.path.join(out, "categorical_csv.keras"))


def main():
    top = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/data"
    npz_files(os.path.join(top, "npz"))
    models(os.path.join(top, "models"))
    out = os.path.join(top, "images")
    tree = os.path.join(out, "tree")
    make_tree(tree)
    for name, kw in CASES:
        if name.startswith("png_"):
            tree = os.path.join(out, "tree_png")
        else:
            tree = os.path.join(out, "tree")
        ds = keras.utils.image_dataset_from_directory(tree, batch_size=None, verbose=False, **kw)
        xs, ys = [], []
        for x, y in ds:
            xs.append(x.numpy())
            ys.append(y.numpy())
        rel = [os.path.relpath(p, tree) for p in ds.file_paths]
        # with shuffle, tf.data reorders the samples again (a shuffle buffer flynn does not
        # replicate); the file order (ds.file_paths) is Keras's index_directory order. Sort both
        # sides by path for the pixel comparison; keep the paths in Keras's order.
        if kw.get("shuffle"):
            xs, ys = reorder(tree, kw, xs, ys, rel)
        np.savez(os.path.join(out, "ref_" + name + ".npz"), x=np.stack(xs).astype(np.float32),
                 y=np.stack(ys).astype(np.float32))
        with open(os.path.join(out, "ref_" + name + ".paths.txt"), "w") as f:
            f.write("".join(p + "\n" for p in rel))
        print(name, np.stack(xs).shape, rel)
    decode_refs(out)


def decode_refs(out):
    """OUT/ref_decode.npz: every image of tree decoded at its own size by tf.io.decode_image
    with 1, 3 (and for PNG 4) channels, keyed "c<channels>:<path>"."""
    tree = os.path.join(out, "tree")
    refs = {}
    for root, _, files in sorted(os.walk(tree)):
        for f in sorted(files):
            rel = os.path.relpath(os.path.join(root, f), tree)
            if rel.startswith(".") or not f.lower().endswith((".png", ".jpg", ".jpeg")):
                continue
            data = open(os.path.join(root, f), "rb").read()
            for ch in (1, 3, 4):
                if ch == 4 and not f.lower().endswith(".png"):
                    continue
                img = tf.io.decode_image(data, channels=ch, expand_animations=False)
                refs["c%d:%s" % (ch, rel)] = img.numpy().astype(np.float32)
    np.savez(os.path.join(out, "ref_decode.npz"), **refs)
    print("decode", len(refs), "images")


def reorder(tree, kw, xs, ys, rel):
    """The samples of a shuffled data set, in the file order: each decoded again without
    shuffle (same kwargs), looked up by path."""
    kw2 = dict(kw, shuffle=False)
    kw2.pop("seed", None)
    kw2.pop("validation_split", None)
    kw2.pop("subset", None)
    ds = keras.utils.image_dataset_from_directory(tree, batch_size=None, verbose=False, **kw2)
    by = {os.path.relpath(p, tree): (x.numpy(), y.numpy()) for p, (x, y) in zip(ds.file_paths, ds)}
    return [by[p][0] for p in rel], [by[p][1] for p in rel]


if __name__ == "__main__":
    main()
