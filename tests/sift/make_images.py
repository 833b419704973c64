#!/usr/bin/python3
"""make_images.py — the images flynn's SIFT is measured on against OpenCV (issue 47).

usage: tests/sift/make_images.py OUTDIR [--max-side N] [--images a,b,...]
                                 [--warp-bases camera,astronaut,coffee] [--warps rot15,scale0.5,...]

Writes into OUTDIR, deterministically (the same files byte for byte on every run with the same
OpenCV and libjpeg):
  * NAME.png: 8-bit grayscale PNGs of skimage's data images (camera, astronaut, coffee, ...), colour
    made gray by cv2.cvtColor(COLOR_RGB2GRAY) (0.299 R + 0.587 G + 0.114 B); with --max-side, shrunk
    by cv2.resize INTER_AREA so that the longer side is at most N (the motorcycle stereo pair by the
    same factor, so it stays a rectified pair);
  * BASE__WARP.png for each warp base and warp, made from BASE.png, with BASE__WARP.json: the 3x3
    ground-truth homography H (x_warped ~ H x_base, pixel centres at integers, as cv2.warpPerspective
    and cv2.KeyPoint count them), both sizes, and what was done; and BASE__WARP.mask.png, 255 where
    the warped pixel is made from base pixels only (H^-1 of it lies inside the base image), 0 on the
    constant-0 border the warp leaves;
  * manifest.json: the list of images, the pairs (reference, warped, H) and the stereo pair
    (motorcycle_left, motorcycle_right) — what tests/sift/compare_opencv.py reads.

The warps (cv2.warpPerspective, INTER_LINEAR, BORDER_CONSTANT 0):
  rot15, rot45, rot90   rotation about the image centre, counter-clockwise as displayed; the canvas
                        grows to the rotated image's bounding box, so the whole image stays in frame
  scale0.5 ... scale2   H = diag(s, s, 1); the canvas is floor(s (w - 1)) + 1 wide (all of it valid)
  persp                 the corners moved to a viewpoint-like quadrilateral (cv2.getPerspectiveTransform)
  blur1, blur2          cv2.GaussianBlur with sigma 1, 2 (H = identity)
  jpeg30, jpeg70        JPEG at quality 30, 70 (cv2.imencode), decoded again (H = identity)
  gain0.6, gamma1.5, offset40
                        I * 0.6, 255 (I / 255)^1.5, I + 40, rounded and clipped to 0..255 (H = identity)
"""
import argparse
import json
import math
import os
import sys

import cv2
import numpy as np


def skimage_data_dir():
    """skimage's data folder (Debian's python3-skimage: /usr/lib/python3/dist-packages/skimage/data)."""
    try:
        import skimage  # only for where its files are
        return os.path.join(os.path.dirname(skimage.__file__), "data")
    except ImportError:
        return "/usr/lib/python3/dist-packages/skimage/data"


SKIMAGE_DATA = skimage_data_dir()
# natural photos, textures, text and a few-feature image (moon); the stereo pair last
IMAGES = ["camera", "astronaut", "coffee", "chelsea", "brick", "grass", "gravel", "coins", "moon", "page",
          "text", "rocket", "hubble_deep_field", "ihc", "motorcycle_left", "motorcycle_right"]
STEREO = ("motorcycle_left", "motorcycle_right")
WARP_BASES = ["camera", "astronaut", "coffee"]
WARPS = ["rot15", "rot45", "rot90", "scale0.5", "scale0.7", "scale1.5", "scale2", "persp",
         "blur1", "blur2", "jpeg30", "jpeg70", "gain0.6", "gamma1.5", "offset40"]


def quiet_imread(path):
    """cv2.imread with libpng's iCCP warnings (coffee.png, ihc.png) kept off stderr."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        img = cv2.imread(path, cv2.IMREAD_UNCHANGED)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    return img


def load_gray(name):
    for ext in (".png", ".jpg"):
        path = os.path.join(SKIMAGE_DATA, name + ext)
        if os.path.exists(path):
            break
    else:
        sys.exit("make_images: no %s.png or .jpg in %s (Debian: apt-get install python3-skimage)" % (name, SKIMAGE_DATA))
    img = quiet_imread(path)
    if img is None:
        sys.exit("make_images: OpenCV cannot read %s" % path)
    if img.dtype != np.uint8:
        img = (img >> 8).astype(np.uint8) if img.dtype == np.uint16 else np.clip(img, 0, 255).astype(np.uint8)
    if img.ndim == 3:
        rgb = img[:, :, 2::-1] if img.shape[2] >= 3 else img[:, :, :1].repeat(3, axis=2)  # OpenCV reads BGR(A)
        img = cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2GRAY)
    return img


def shrink(img, max_side, factor=None):
    """img shrunk so that its longer side is at most max_side (or by factor); the factor used."""
    h, w = img.shape
    if factor is None:
        factor = min(1.0, max_side / max(h, w)) if max_side else 1.0
    if factor >= 1.0:
        return img, 1.0
    size = (max(1, int(round(w * factor))), max(1, int(round(h * factor))))
    return cv2.resize(img, size, interpolation=cv2.INTER_AREA), factor


def rotation(w, h, deg):
    """H rotating a w x h image by deg about its centre onto the canvas of its bounding box."""
    if deg % 90 == 0:  # exact, so that rot90 is a pure transposition of pixels
        c, s = [(1, 0), (0, 1), (-1, 0), (0, -1)][(deg // 90) % 4]
    else:
        c, s = math.cos(math.radians(deg)), math.sin(math.radians(deg))
    # counter-clockwise as displayed (y down): x' = c x + s y, y' = -s x + c y about the centre
    R = np.array([[c, s, 0], [-s, c, 0], [0, 0, 1]], float)
    cx, cy = (w - 1) / 2.0, (h - 1) / 2.0
    corners = np.array([[0, 0], [w - 1, 0], [0, h - 1], [w - 1, h - 1]], float) - (cx, cy)
    rc = corners @ R[:2, :2].T
    span = rc.max(axis=0) - rc.min(axis=0)
    W, Hh = int(math.floor(span[0] + 1e-9)) + 1, int(math.floor(span[1] + 1e-9)) + 1
    T0 = np.array([[1, 0, -cx], [0, 1, -cy], [0, 0, 1]], float)
    T1 = np.array([[1, 0, (W - 1) / 2.0], [0, 1, (Hh - 1) / 2.0], [0, 0, 1]], float)
    return T1 @ R @ T0, W, Hh


def perspective(w, h):
    """A viewpoint change: the image seen from the right and a little above (about 30 degrees)."""
    src = np.float32([[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]])
    dst = np.float32([[0.10 * w, 0.14 * h], [0.92 * w, 0.02 * h], [0.98 * w, 0.97 * h], [0.04 * w, 0.86 * h]])
    return cv2.getPerspectiveTransform(src, dst).astype(float), w, h


def valid_mask(H, w, h, W, Hh):
    """255 where H^-1 of the warped pixel lies inside the w x h base (pixel centres 0..w-1, 0..h-1)."""
    Hi = np.linalg.inv(H)
    ys, xs = np.mgrid[0:Hh, 0:W].astype(float)
    den = Hi[2, 0] * xs + Hi[2, 1] * ys + Hi[2, 2]
    u = (Hi[0, 0] * xs + Hi[0, 1] * ys + Hi[0, 2]) / den
    v = (Hi[1, 0] * xs + Hi[1, 1] * ys + Hi[1, 2]) / den
    eps = 1e-6
    ok = (u >= -eps) & (u <= w - 1 + eps) & (v >= -eps) & (v <= h - 1 + eps)
    return np.where(ok, 255, 0).astype(np.uint8)


def warp(img, name):
    """(warped image, H, description) for the warp called name."""
    h, w = img.shape
    I = np.eye(3)
    if name.startswith("rot"):
        deg = int(name[3:])
        H, W, Hh = rotation(w, h, deg)
        what = "rotation by %d degrees about the centre, canvas %dx%d" % (deg, W, Hh)
    elif name.startswith("scale"):
        s = float(name[5:])
        H = np.diag([s, s, 1.0])
        W, Hh = int(math.floor(s * (w - 1) + 1e-9)) + 1, int(math.floor(s * (h - 1) + 1e-9)) + 1
        what = "scale %g" % s
    elif name == "persp":
        H, W, Hh = perspective(w, h)
        what = "perspective (corners to a viewpoint-like quadrilateral)"
    else:
        if name.startswith("blur"):
            sigma = float(name[4:])
            out = cv2.GaussianBlur(img, (0, 0), sigmaX=sigma, sigmaY=sigma, borderType=cv2.BORDER_REFLECT_101)
            what = "Gaussian blur sigma %g" % sigma
        elif name.startswith("jpeg"):
            q = int(name[4:])
            ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, q])
            assert ok
            out = cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE)
            what = "JPEG quality %d, decoded again" % q
        elif name.startswith("gain"):
            g = float(name[4:])
            out = np.clip(np.rint(img.astype(float) * g), 0, 255).astype(np.uint8)
            what = "gain %g" % g
        elif name.startswith("gamma"):
            g = float(name[5:])
            out = np.clip(np.rint(255.0 * (img.astype(float) / 255.0) ** g), 0, 255).astype(np.uint8)
            what = "gamma %g" % g
        elif name.startswith("offset"):
            o = float(name[6:])
            out = np.clip(img.astype(float) + o, 0, 255).astype(np.uint8)
            what = "offset %+g, clipped" % o
        else:
            sys.exit("make_images: unknown warp %r (known: %s)" % (name, ", ".join(WARPS)))
        return out, I, what
    out = cv2.warpPerspective(img, H, (W, Hh), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
    return out, H, what


def kind_of(name):
    for prefix, kind in (("rot", "rotation"), ("scale", "scale"), ("persp", "perspective"), ("blur", "blur"),
                         ("jpeg", "jpeg"), ("gain", "illumination"), ("gamma", "illumination"),
                         ("offset", "illumination")):
        if name.startswith(prefix):
            return kind
    return "other"


def write_png(path, img):
    if not cv2.imwrite(path, img, [cv2.IMWRITE_PNG_COMPRESSION, 9]):
        sys.exit("make_images: cannot write %s" % path)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("outdir")
    p.add_argument("--max-side", type=int, default=0, help="shrink each image so its longer side is at most N (0: as is)")
    p.add_argument("--images", default=",".join(IMAGES), help="skimage data images to write (default: %(default)s)")
    p.add_argument("--warp-bases", default=",".join(WARP_BASES), help="images to warp (default: %(default)s)")
    p.add_argument("--warps", default=",".join(WARPS), help="warps to make (default: all: %(default)s)")
    a = p.parse_args()
    names = [n for n in a.images.split(",") if n]
    bases = [n for n in a.warp_bases.split(",") if n]
    warps = [n for n in a.warps.split(",") if n]
    for b in bases:
        if b not in names:
            names.append(b)
    os.makedirs(a.outdir, exist_ok=True)

    manifest = {"made_by": "tests/sift/make_images.py", "opencv": cv2.__version__, "max_side": a.max_side,
                "images": [], "pairs": [], "stereo": []}
    gray = {}
    stereo_factor = None
    for n in names:
        img = load_gray(n)
        if n in STEREO:  # both halves of the pair shrink by the left image's factor
            if stereo_factor is None:
                img, stereo_factor = shrink(img, a.max_side)
            else:
                img, _ = shrink(img, a.max_side, stereo_factor)
        else:
            img, _ = shrink(img, a.max_side)
        gray[n] = img
        write_png(os.path.join(a.outdir, n + ".png"), img)
        manifest["images"].append({"file": n + ".png", "width": img.shape[1], "height": img.shape[0]})
    if all(s in gray for s in STEREO):
        manifest["stereo"].append({"left": STEREO[0] + ".png", "right": STEREO[1] + ".png"})

    for b in bases:
        base = gray[b]
        for wname in warps:
            out, H, what = warp(base, wname)
            stem = "%s__%s" % (b, wname)
            write_png(os.path.join(a.outdir, stem + ".png"), out)
            mask = valid_mask(H, base.shape[1], base.shape[0], out.shape[1], out.shape[0])
            write_png(os.path.join(a.outdir, stem + ".mask.png"), mask)
            rec = {"reference": b + ".png", "image": stem + ".png", "mask": stem + ".mask.png",
                   "warp": wname, "kind": kind_of(wname), "what": what,
                   "H": [[float(v) for v in row] for row in H],
                   "reference_size": [base.shape[1], base.shape[0]], "image_size": [out.shape[1], out.shape[0]],
                   "valid_fraction": float((mask > 0).mean())}
            with open(os.path.join(a.outdir, stem + ".json"), "w") as f:
                json.dump(rec, f, indent=1)
            manifest["images"].append({"file": stem + ".png", "width": out.shape[1], "height": out.shape[0]})
            manifest["pairs"].append(rec)
    with open(os.path.join(a.outdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print("make_images: %d images (%d warped pairs) in %s" % (len(manifest["images"]), len(manifest["pairs"]), a.outdir))


if __name__ == "__main__":
    main()
