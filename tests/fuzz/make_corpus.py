#!/usr/bin/env python3
"""make_corpus.py OUT FIXTURES [HARNESS...] — the seed corpora of the fuzz
harnesses (tests/fuzz), one folder per harness under OUT, made from the
fixtures (tests/fixtures/keras) rather than committed twice, plus small
generated files where no fixture exists (IDX, CIFAR-10, odd .npy dtypes, CSV),
and tests/fixtures/data (.npz files, images) for npz and image.
Standard library only. Run by the build (target fuzz-corpus); idempotent:
each OUT/<harness> is rebuilt from scratch."""
import gzip, hashlib, io, os, shutil, struct, sys, zipfile


def idx(code, dims, payload):
    return bytes([0, 0, code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + payload


def idx_seeds(fx):
    out = {}
    out["u8_images"] = idx(0x08, [2, 3, 3], bytes(range(18)))
    out["u8_labels"] = idx(0x08, [4], bytes([7, 2, 1, 0]))
    out["i8"] = idx(0x09, [3], struct.pack(">3b", -1, 0, 1))
    out["i16"] = idx(0x0B, [2, 2], struct.pack(">4h", -2, -1, 1, 2))
    out["i32"] = idx(0x0C, [3], struct.pack(">3i", -7, 0, 2**31 - 1))
    out["f32"] = idx(0x0D, [2, 2], struct.pack(">4f", 0.5, -1.0, 3.25, 1e-3))
    out["f64"] = idx(0x0E, [2], struct.pack(">2d", 1.5, -2.0))
    out["u8_images.gz"] = gzip.compress(out["u8_images"], mtime=0)
    out["u8_labels.gz"] = gzip.compress(out["u8_labels"], mtime=0)
    return out


def npy(descr, shape, payload, version=(1, 0), fortran=False):
    shp = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    hdr = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shp)
    lenfmt = "<H" if version[0] == 1 else "<I"
    pre = 10 if version[0] == 1 else 12
    pad = (64 - (pre + len(hdr) + 1) % 64) % 64
    hdr = hdr + " " * pad + "\n"
    return b"\x93NUMPY" + bytes(version) + struct.pack(lenfmt, len(hdr)) + hdr.encode("latin1") + payload


def npy_seeds(fx):
    out = {}
    files = sorted(f for f in os.listdir(fx) if f.endswith(".npy"))
    for f in sorted(files, key=lambda f: os.path.getsize(os.path.join(fx, f)))[:12]:
        out[f] = open(os.path.join(fx, f), "rb").read()
    for d, fmt, vals in [("<f4", "<3f", (1.0, -2.5, 0.0)), ("<f8", "<3d", (1.0, -2.5, 1e300)), ("|u1", "3B", (0, 1, 255)),
                         ("|b1", "3B", (0, 1, 1)), ("|i1", "3b", (-1, 0, 1)), ("<i2", "<3h", (-300, 0, 300)),
                         ("<u2", "<3H", (0, 1, 65535)), ("<i4", "<3i", (-1, 0, 1)), ("<i8", "<3q", (-1, 0, 2**31 - 1)),
                         ("<u4", "<3I", (0, 1, 2**31 - 1)), ("<u8", "<3Q", (0, 1, 2))]:
        out["gen_" + d.strip("<|")] = npy(d, (3,), struct.pack(fmt, *vals))
    out["gen_f4_2d_v2"] = npy("<f4", (2, 2), struct.pack("<4f", 1, 2, 3, 4), version=(2, 0))
    out["gen_f4_v3"] = npy("<f4", (1,), struct.pack("<f", 1), version=(3, 0))
    out["gen_scalar"] = npy("<f4", (), struct.pack("<f", 7))
    out["gen_empty"] = npy("<f4", (0, 3), b"")
    out["gen_fortran"] = npy("<f4", (2, 2), struct.pack("<4f", 1, 2, 3, 4), fortran=True)
    out["gen_big_endian"] = npy(">f4", (2,), struct.pack(">2f", 1, 2))
    return out


def cifar_seeds(fx):
    rec = lambda label, v: bytes([label]) + bytes((v + i) % 256 for i in range(3072))
    out = {}
    for ctl in (0x00, 0x05, 0x0A, 0x11, 0x1F):
        out[f"ctl{ctl:02x}_1rec"] = bytes([ctl]) + rec(3, 0)
    out["ctl01_2rec"] = bytes([0x01]) + rec(9, 1) + rec(0, 2)
    out["ctl00_badlabel"] = bytes([0x00]) + rec(10, 0)
    return out


def zip_member(path, name):
    try:
        with zipfile.ZipFile(path) as z:
            return z.read(name)
    except Exception:
        return None


def json_seeds(fx):
    out = {}
    for f in sorted(os.listdir(fx)):
        p = os.path.join(fx, f)
        if f.endswith(".json") and f != "manifest.json":
            out[f] = open(p, "rb").read()
        elif f.endswith(".keras"):
            c = zip_member(p, "config.json")
            if c:
                out[f[:-6] + ".config.json"] = c
    return out


def files_ending(fx, ending, exclude=()):
    return {f: open(os.path.join(fx, f), "rb").read() for f in sorted(os.listdir(fx))
            if f.endswith(ending) and not any(f.endswith(e) for e in exclude)}


def weights_seeds(fx):
    out = files_ending(fx, ".weights.h5")
    for f in ("train_mlp_adam.keras", "train_mlp_adam_after.keras"):
        w = zip_member(os.path.join(fx, f), "model.weights.h5")
        if w:
            out[f[:-6] + ".model.weights.h5"] = w
    out["train_mlp_adam.h5"] = open(os.path.join(fx, "train_mlp_adam.h5"), "rb").read()
    return out


def data_dir(fx):
    """tests/fixtures/data, next to the Keras fixtures (tools/data_fixtures.py)."""
    return os.path.join(os.path.dirname(os.path.abspath(fx)), "data")


def npz_seeds(fx):
    d = os.path.join(data_dir(fx), "npz")
    return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d)) if f.endswith(".npz")}


def csv_seeds(fx):
    # the first byte is the harness's options (bit 0: label "b", bit 1: integer codes, bit 2: ';')
    t = [(1, b"a,b,c\n1,x,2\n3,y,4\n"), (0, b"a,b\n1.5,2\n-3e2,4\n"), (3, b'a,b,c\n"q,""1""",x,red\n"z\nz",y,blue\n'),
         (5, b"a;b\r\n1;0\r\n\r\n2;1\r\n"), (1, b"a,b\n1,2\n3\n"), (1, b"a,b\n1,NA\n"), (2, b"\xef\xbb\xbfa,b\nu,v\n")]
    return {"seed%d" % i: bytes([o]) + body for i, (o, body) in enumerate(t)}


def image_seeds(fx):
    out = {}
    tree = os.path.join(data_dir(fx), "images", "tree")
    for root, _, files in sorted(os.walk(tree)):
        for f in sorted(files):
            if f.lower().endswith((".png", ".jpg", ".jpeg")):
                data = open(os.path.join(root, f), "rb").read()
                for mode in (0, 1, 2, 4 | 1):  # rgb, grayscale, rgba; gray resized
                    out["%s.m%d" % (f, mode)] = bytes([mode]) + data
    return out


HARNESSES = {
    "npz": npz_seeds,
    "csv": csv_seeds,
    "image": image_seeds,
    "idx": idx_seeds,
    "npy": npy_seeds,
    "cifar": cifar_seeds,
    "json": json_seeds,
    "keras": lambda fx: files_ending(fx, ".keras"),
    "h5": lambda fx: files_ending(fx, ".h5", exclude=(".weights.h5",)),
    "weights_h5": weights_seeds,
    # flynn's HDF5 reader alone (src/keras/h5.c): every HDF5 image the others use
    "h5_reader": lambda fx: {**files_ending(fx, ".h5", exclude=(".weights.h5",)), **weights_seeds(fx)},
}


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, fx = sys.argv[1], sys.argv[2]
    names = sys.argv[3:] or list(HARNESSES)
    for h in names:
        if h not in HARNESSES:
            sys.exit(f"make_corpus.py: no seed recipe for harness '{h}' (add one to HARNESSES)")
        seeds = HARNESSES[h](fx)
        if not seeds:
            sys.exit(f"make_corpus.py: harness '{h}' got no seeds from {fx}")
        d = os.path.join(out, h)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        seen = set()
        for name, data in seeds.items():
            digest = hashlib.sha1(data).hexdigest()
            if digest in seen:
                continue
            seen.add(digest)
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        print(f"make_corpus.py: {d}: {len(seen)} seeds")


if __name__ == "__main__":
    main()
