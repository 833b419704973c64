#!/usr/bin/env python3
"""sift_check.py — reads what `flynn sift` and `flynn match` wrote, for tests/test_sift_cli.sh.

  sift_check.py npz NPZ PREFIX N W H DTYPE   the arrays of one image (keys PREFIX + keypoints, octave,
                                             descriptors; PREFIX '' for none): shapes (N, 5), (N,), (N, 128),
                                             dtypes, keypoints inside the W x H image, descriptors 0-255
  sift_check.py keys NPZ KEY...              the archive holds exactly these keys, in this order
  sift_check.py same NPZ1 PREFIX1 NPZ2 PREFIX2   the same features (descriptors compared by value, so
                                             float32 against uint8 works)
  sift_check.py json JSON NPZ                `flynn sift --json`'s one image equals the .npz's arrays
  sift_check.py matchjson JSON NA NB K I     `flynn match --json`: NA, NB keypoints, K matches, I inliers, a
                                             3 x 3 matrix with [2][2] = 1, indices in range
  sift_check.py svg SVG A B MIME K I OUT     the match SVG: well-formed, the two images embedded byte for
                                             byte as MIME data URIs, I inlier lines and K - I outlier lines
                                             (OUT: 1 when outliers are drawn), endpoints on their images
  sift_check.py shot SVG PNG                 a browser's screenshot of the SVG shows the images (not blank)
                                             and green pixels along the inlier lines
The .npz and PNG checks need NumPy (and Pillow for PNG); exits 1 with the reason on the first mismatch.
"""
import base64
import json
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"


def fail(msg):
    sys.exit("sift_check: " + msg)


def load_npz(path):
    import numpy as np
    z = np.load(path)
    return z, {k: z[k] for k in z.files}


def check_image(a, prefix, n, w, h, dtype, what):
    import numpy as np
    k, o, d = (a.get(prefix + s) for s in ("keypoints", "octave", "descriptors"))
    if k is None or o is None or d is None:
        fail("%s: keys %s, expected %skeypoints, %soctave, %sdescriptors" % (what, sorted(a), prefix, prefix, prefix))
    if k.dtype != np.float32 or k.shape != (n, 5):
        fail("%s: keypoints %s %s, expected float32 (%d, 5)" % (what, k.dtype, k.shape, n))
    if o.dtype != np.int32 or o.shape != (n,):
        fail("%s: octave %s %s, expected int32 (%d,)" % (what, o.dtype, o.shape, n))
    if d.dtype != np.dtype(dtype) or d.shape != (n, 128):
        fail("%s: descriptors %s %s, expected %s (%d, 128)" % (what, d.dtype, d.shape, dtype, n))
    if n == 0:
        return
    if not np.isfinite(k).all():
        fail("%s: keypoints not finite" % what)
    x, y, size, angle = k[:, 0], k[:, 1], k[:, 2], k[:, 3]
    if x.min() < -0.5 or y.min() < -0.5 or x.max() > w - 0.5 or y.max() > h - 0.5:
        fail("%s: keypoints outside the %dx%d image: x %g..%g, y %g..%g" % (what, w, h, x.min(), x.max(), y.min(), y.max()))
    if size.min() <= 0 or angle.min() < 0 or angle.max() >= 360:
        fail("%s: sizes %g.. or angles %g..%g out of range" % (what, size.min(), angle.min(), angle.max()))
    df = d.astype(np.float64)
    if df.min() < 0 or df.max() > 255 or (df != np.round(df)).any():
        fail("%s: descriptors not whole numbers 0-255" % what)
    if (df.sum(axis=1) == 0).any():
        fail("%s: an all-zero descriptor" % what)
    octave = o & 0xFF
    octave = np.where(octave >= 128, octave - 256, octave)
    if octave.min() < -1 or octave.max() > 12:
        fail("%s: octaves %d..%d" % (what, octave.min(), octave.max()))


def cmd_npz(path, prefix, n, w, h, dtype):
    _, a = load_npz(path)
    check_image(a, prefix, int(n), int(w), int(h), dtype, path)


def cmd_keys(path, *keys):
    z, _ = load_npz(path)
    if list(z.files) != list(keys):
        fail("%s: keys %s, expected %s" % (path, z.files, list(keys)))


def cmd_same(p1, k1, p2, k2):
    import numpy as np
    _, a = load_npz(p1)
    _, b = load_npz(p2)
    for s in ("keypoints", "octave", "descriptors"):
        x, y = a[k1 + s], b[k2 + s]
        if x.shape != y.shape or not (x.astype(np.float64) == y.astype(np.float64)).all():
            fail("%s:%s%s differs from %s:%s%s" % (p1, k1, s, p2, k2, s))


def cmd_json(jpath, npz):
    import numpy as np
    with open(jpath) as f:
        doc = json.load(f)
    imgs = doc["images"]
    if len(imgs) != 1:
        fail("%d images in the JSON, expected 1" % len(imgs))
    im = imgs[0]
    _, a = load_npz(npz)
    kp = np.array(im["keypoints"], dtype=np.float64).reshape(-1, 6)
    de = np.array(im["descriptors"], dtype=np.float64).reshape(-1, 128)
    if kp.shape[0] != a["keypoints"].shape[0]:
        fail("%d keypoints in the JSON, %d in the .npz" % (kp.shape[0], a["keypoints"].shape[0]))
    if not (kp[:, :5].astype(np.float32) == a["keypoints"]).all():
        fail("the JSON's keypoints differ from the .npz's")
    if not (kp[:, 5] == a["octave"]).all():
        fail("the JSON's octaves differ from the .npz's")
    if not (de == a["descriptors"]).all():
        fail("the JSON's descriptors differ from the .npz's")
    if "width" not in im or "height" not in im or "path" not in im:
        fail("the JSON image lacks path, width or height: %s" % sorted(im))


def cmd_matchjson(jpath, na, nb, k, i):
    with open(jpath) as f:
        doc = json.load(f)
    na, nb, k, i = int(na), int(nb), int(k), int(i)
    if doc["a"]["keypoints"] != na or doc["b"]["keypoints"] != nb:
        fail("keypoints %s, %s, expected %d, %d" % (doc["a"]["keypoints"], doc["b"]["keypoints"], na, nb))
    m = doc["matches"]
    if len(m) != k:
        fail("%d matches in the JSON, the summary said %d" % (len(m), k))
    if doc["inliers"] != i or sum(1 for x in m if x["inlier"]) != i:
        fail("inliers %s (%d flagged), the summary said %d" % (doc["inliers"], sum(1 for x in m if x["inlier"]), i))
    M = doc["matrix"]
    if len(M) != 3 or any(len(r) != 3 for r in M) or M[2][2] != 1:
        fail("matrix %s, expected 3 x 3 with [2][2] = 1" % M)
    last = -1
    for x in m:
        if not (0 <= x["query"] < na and 0 <= x["train"] < nb) or x["query"] <= last or x["distance"] < 0:
            fail("bad match %s" % x)
        last = x["query"]
        if x["inlier"]:  # an inlier is within 3 px of H x_a
            ax, ay = x["a"]
            w = M[2][0] * ax + M[2][1] * ay + M[2][2]
            u = (M[0][0] * ax + M[0][1] * ay + M[0][2]) / w
            v = (M[1][0] * ax + M[1][1] * ay + M[1][2]) / w
            if (u - x["b"][0]) ** 2 + (v - x["b"][1]) ** 2 >= 9:
                fail("inlier %s is %.2f px from H x_a" % (x, ((u - x["b"][0]) ** 2 + (v - x["b"][1]) ** 2) ** 0.5))


def svg_parts(path):
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        fail("%s is not well-formed XML: %s" % (path, e))
    if root.tag != NS + "svg":
        fail("%s: root %s, expected svg" % (path, root.tag))
    images = {el.get("class"): el for el in root.iter(NS + "image")}
    lines = [el for el in root.iter(NS + "line")]
    return root, images, lines


def cmd_svg(path, a, b, mime, k, i, outliers):
    root, images, lines = svg_parts(path)
    k, i, outliers = int(k), int(i), outliers == "1"
    rects = {}
    for cls, src in (("image-a", a), ("image-b", b)):
        el = images.get(cls)
        if el is None:
            fail("%s: no <image class=%s>" % (path, cls))
        href = el.get("href")
        pre = "data:%s;base64," % mime
        if not href or not href.startswith(pre):
            fail("%s: %s's href starts %r, expected %r" % (path, cls, (href or "")[:40], pre))
        with open(src, "rb") as f:
            if base64.b64decode(href[len(pre):]) != f.read():
                fail("%s: %s does not embed %s byte for byte" % (path, cls, src))
        rects[cls] = tuple(float(el.get(q)) for q in ("x", "y", "width", "height"))
    ins = [l for l in lines if l.get("class") == "inlier"]
    outs = [l for l in lines if l.get("class") == "outlier"]
    if len(ins) != i or len(outs) != (k - i if outliers else 0):
        fail("%s: %d inlier and %d outlier lines, expected %d and %d" % (path, len(ins), len(outs), i, k - i if outliers else 0))
    for l in ins + outs:
        for (xq, yq), cls in ((("x1", "y1"), "image-a"), (("x2", "y2"), "image-b")):
            x, y, (rx, ry, rw, rh) = float(l.get(xq)), float(l.get(yq)), rects[cls]
            if not (rx <= x <= rx + rw and ry <= y <= ry + rh):
                fail("%s: a line ends at (%g, %g), outside %s" % (path, x, y, cls))
    circles = [c for c in root.iter(NS + "circle") if c.get("class") == "keypoint"]
    if len(circles) != 2 * (len(ins) + len(outs)):
        fail("%s: %d keypoint circles for %d lines" % (path, len(circles), len(ins) + len(outs)))


def cmd_shot(path, png):
    import numpy as np
    from PIL import Image
    root, images, lines = svg_parts(path)
    shot = np.asarray(Image.open(png).convert("RGB")).astype(int)
    for cls in ("image-a", "image-b"):
        el = images[cls]
        x, y, w, h = (int(float(el.get(q))) for q in ("x", "y", "width", "height"))
        region = shot[y:y + h, x:x + w]
        if region.shape[:2] != (h, w):
            fail("the screenshot %s is %s, smaller than %s at %d,%d %dx%d" % (png, shot.shape, cls, x, y, w, h))
        white = (region.min(axis=2) > 245).mean()
        if white > 0.5 or region.std() < 20:
            fail("%s looks blank in the screenshot (%.0f%% white, std %.1f)" % (cls, 100 * white, region.std()))
    ins = [l for l in lines if l.get("class") == "inlier"]
    if not ins:
        fail("no inlier line to look for")
    hits = 0
    for l in ins:
        mx = (float(l.get("x1")) + float(l.get("x2"))) / 2
        my = (float(l.get("y1")) + float(l.get("y2"))) / 2
        px, py = int(mx), int(my)
        box = shot[max(py - 2, 0):py + 3, max(px - 2, 0):px + 3]
        g = (box[..., 1] > box[..., 0] + 40) & (box[..., 1] > box[..., 2] + 40)
        hits += bool(g.any())
    if hits < 0.9 * len(ins):
        fail("green near only %d of %d inlier lines' midpoints in the screenshot" % (hits, len(ins)))


CMDS = {"npz": cmd_npz, "keys": cmd_keys, "same": cmd_same, "json": cmd_json, "matchjson": cmd_matchjson,
        "svg": cmd_svg, "shot": cmd_shot}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in CMDS:
        fail("usage: see the docstring")
    CMDS[sys.argv[1]](*sys.argv[2:])
