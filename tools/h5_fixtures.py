#!/usr/bin/env python3
"""h5_fixtures.py — writes the small HDF5 files of tests/fixtures/h5/ with
h5py (libhdf5), the structures flynn's reader (src/keras/h5.c) must read or
refuse. test_h5.c knows the values by the same formulas:

    ints:   v[i] = (i * 7) % 23 - 11   (unsigned types: (i * 7) % 23)
    floats: v[i] = i * 0.5 - 3.25

    /opt/kvenv/bin/python tools/h5_fixtures.py tests/fixtures/h5
"""
import os
import sys

import h5py
import numpy as np


def ints(n, signed=True):
    v = (np.arange(n) * 7) % 23
    return v - 11 if signed else v


def floats(n):
    return np.arange(n) * 0.5 - 3.25


def types(path):
    """Every datatype and byte order, contiguous; string attributes."""
    with h5py.File(path, "w", libver="earliest") as f:
        for order in "<>":
            for k in (1, 2, 4, 8):
                f.create_dataset(f"i{k}{'le' if order == '<' else 'be'}", data=ints(12).astype(f"{order}i{k}").reshape(3, 4))
                f.create_dataset(f"u{k}{'le' if order == '<' else 'be'}", data=ints(12, False).astype(f"{order}u{k}").reshape(3, 4))
            for k in (4, 8):
                f.create_dataset(f"f{k}{'le' if order == '<' else 'be'}", data=floats(12).astype(f"{order}f{k}").reshape(3, 4))
        f.create_dataset("scalar_i8", data=np.int64(-5))
        f.create_dataset("scalar_f4", data=np.float32(0.25))
        f.create_dataset("empty", data=np.zeros((0, 3), "f4"))
        f.attrs["vlen"] = "hello"                         # vlen UTF-8 scalar (str)
        f.attrs["vlen_list"] = ["a", "bc", "", "def"]     # vlen 1-D
        f.attrs["fixed"] = np.bytes_(b"fixed str")        # fixed-length scalar
        f.attrs["fixed_list"] = np.array([b"x", b"yz", b"w  "], dtype="S4")  # fixed 1-D, space-padded last
        f.attrs["empty_list"] = []                        # h5py: an empty float64 array
        f.attrs["number"] = 3.5
        g = f.create_group("g")
        g.attrs["name"] = "group g"


def compact_ds(path):
    with h5py.File(path, "w", libver="earliest") as f:
        sid = h5py.h5s.create_simple((6,))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        d = h5py.h5d.create(f.id, b"compact", h5py.h5t.IEEE_F32LE, sid, dcpl=dcpl)
        d.write(h5py.h5s.ALL, h5py.h5s.ALL, floats(6).astype("f4"))


def chunked(path):
    """Chunked datasets: edges, deflate, shuffle, a deep chunk B-tree."""
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("plain", data=floats(35).astype("f4").reshape(7, 5), chunks=(3, 2))
        f.create_dataset("deflate", data=floats(35).astype("f4").reshape(7, 5), chunks=(3, 2), compression="gzip")
        f.create_dataset("shuffle_deflate", data=floats(35).astype(">f8").reshape(7, 5), chunks=(4, 4),
                         compression="gzip", shuffle=True)
        f.create_dataset("shuffle_i2", data=ints(60).astype("<i2").reshape(3, 4, 5), chunks=(2, 3, 2), shuffle=True)
        f.create_dataset("many", data=floats(300).astype("f4"), chunks=(1,))  # a multi-level chunk B-tree
        f.create_dataset("sparse", shape=(10,), dtype="f4", chunks=(2,))       # chunks never written: zeros
        f["sparse"][4:6] = [1.0, 2.0]
        f.create_dataset("lzf", data=floats(8).astype("f4"), chunks=(4,), compression="lzf")
        f.create_dataset("fletcher", data=floats(8).astype("f4"), chunks=(4,), fletcher32=True)


def groups(path):
    """Symbol-table groups with many links (several SNODs, a two-level B-tree)."""
    with h5py.File(path, "w", libver="earliest") as f:
        g = f.create_group("many")
        g["d000"] = np.float32(0)
        for i in range(1, 300):
            g[f"d{i:03d}"] = g["d000"]  # hard links to one dataset: many links, a small file
        f.create_group("a/b/c/d").attrs["deep"] = "yes"
        f["soft"] = h5py.SoftLink("/many")


def latest(path):
    """libver latest: superblock v3, v2 object headers with checksums, dense
    links and attributes (fractal heap + v2 B-tree), layout v4."""
    with h5py.File(path, "w", libver="latest") as f:
        g = f.create_group("dense")
        g["d00"] = np.float32(0)
        for i in range(1, 40):
            g[f"d{i:02d}"] = g["d00"]
        c = f.create_group("compact")
        for i in range(3):
            c.create_dataset(f"d{i}", data=np.int32(i))
        for i in range(30):
            f.attrs[f"attr{i:02d}"] = f"value {i}"
        f.create_dataset("single", data=floats(12).astype("f4").reshape(3, 4), chunks=(3, 4), compression="gzip")
        f.create_dataset("farray", data=floats(12).astype("f4").reshape(3, 4), chunks=(2, 2))
        f.create_dataset("contig", data=floats(12).astype("f4").reshape(3, 4))
        o = f.create_group("ordered", track_order=True)
        for i in range(20):
            o[f"z{i:02d}"] = f["contig"]
        f.attrs["long"] = "x" * 1000  # vlen: the text is in the global heap
        f.attrs["huge"] = np.bytes_(b"y" * 66000)  # fixed-length, above the heap's 64 KiB: a huge object


def v2(path):
    """Superblock v2 (libver v108), track_order groups."""
    with h5py.File(path, "w", libver=("v108", "v108")) as f:
        f.create_dataset("w", data=floats(6).astype("f4"))
        g = f.create_group("t", track_order=True)
        for i in range(12):
            g.attrs[f"a{i:02d}"] = i
            g.create_dataset(f"x{i:02d}", data=np.float64(i))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/h5"
    os.makedirs(out, exist_ok=True)
    for fn in (types, compact_ds, chunked, groups, latest, v2):
        p = os.path.join(out, fn.__name__ + ".h5")
        fn(p)
        print(p, os.path.getsize(p), "bytes")


if __name__ == "__main__":
    main()
