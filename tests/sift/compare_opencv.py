#!/usr/bin/python3
"""compare_opencv.py — flynn's SIFT measured against OpenCV's cv::SIFT (issue 47).

usage: tests/sift/compare_opencv.py IMAGEDIR [--flynn PATH] [--self-test [--perturb PX]]
           [--nfeatures 0,500] [--protocol-nfeatures 0] [--only NAME,...]
           [--json FILE] [--markdown FILE] [--matches-png FILE]
           [--count-tol 0.05] [--pos-p95 0.1] [--min-paired 0.9] [--rep-tol 0.01] [--ms-tol 0.01]

IMAGEDIR is what tests/sift/make_images.py wrote (manifest.json, the PNGs, the homographies). Run
it with Debian's /usr/bin/python3 (python3-opencv 4.6, numpy). For every image and every
nfeatures setting (0 is cv2.SIFT_create()'s default, all features; 500 keeps the 500 strongest)
it runs OpenCV's SIFT on the PNG read with cv2.IMREAD_GRAYSCALE and flynn's
(`FLYNN sift IMG --out F.npz`, plus `--nfeatures N` for N > 0; the npz holds "keypoints" float32
(n, 5) = x, y, size, angle, response, "octave" int32 (n,) packed as cv::KeyPoint::octave, and
"descriptors" (n, 128) float32 whole numbers 0..255), and reports:

  counts      flynn's and OpenCV's keypoint counts and their ratio;
  pairing     each OpenCV keypoint paired with flynn's nearest by position among those with the
              same octave (the low byte of the packed octave), |size ratio - 1| < 5% and an
              angle within 2 degrees, kept when the two are each other's nearest and within
              --pair-radius px: the share of OpenCV's keypoints paired, the position error (px)
              and the descriptor L2 distance (0..255 descriptors, norm about 512) of the pairs,
              as median, 95th percentile and maximum, and the share of identical descriptors;
  protocol    for each warped pair (reference, warped, H), repeatability and matching score
              under the Mikolajczyk-Schmid protocol (IJCV 2005; the Oxford benchmark's
              repeatability.m as VLBenchmarks reimplements it), for OpenCV and for flynn:
                - a keypoint's region is the circle of radius size/2 (the keypoint's sigma: VLFeat's
                  frame scale, which the Oxford/VLBenchmarks code turns into the region);
                - a region is mapped to the other image by the homography linearised at its
                  centre (an ellipse), and is kept only when its bounding box lies inside its own
                  image and its mapped ellipse's inside the other (regions in both images);
                - the overlap error of region a (reference) and region b mapped into the
                  reference is 1 - |a & b| / |a | b|, after both shapes are scaled by 30 / radius(a)
                  (the reference region normalised to radius 30 px; centres are not scaled, as in
                  the reference code), counted on the integer grid about a's centre (step 1 px, as
                  the reference's Matlab/mex code rasterises), for the candidate pairs whose centres
                  are closer than 4 radius(a) and whose areas are within a ratio of 0.6;
                - correspondences: pairs with overlap error < 40%, matched one to one greedily by
                  the smallest error; repeatability = correspondences / min(#regions a, #regions b);
                - matching score: descriptors matched one to one greedily by the smallest L2
                  distance (nearest neighbours), a match correct when its two regions' overlap
                  error is < 40%; score = correct matches / min(#regions a, #regions b);
              done for the nfeatures settings in --protocol-nfeatures (default: 0);
  summary     PASS/FAIL per check: counts within --count-tol (5%); the pairs' position error's
              95th percentile <= --pos-p95 px (0.1); at least --min-paired (90%) of OpenCV's keypoints
              paired (0 turns it off); flynn's repeatability >= OpenCV's - --rep-tol and matching
              score >= OpenCV's - --ms-tol (0.01 each, absolute) on each pair.

--json FILE writes every number; --markdown FILE the tables for docs/sift.md; --matches-png FILE
draws the stereo pair (motorcycle_left/right) matched with flynn's keypoints and descriptors:
OpenCV-style ratio-test matches (cv2.BFMatcher knnMatch k=2, ratio 0.75) and the inliers of
cv2.findFundamentalMat (FM_RANSAC, 1 px, confidence 0.999), side by side, downscaled to stay
under --matches-max-kb (300 KB).

--self-test: OpenCV's own SIFT stands in for flynn, written to and read back from the same npz
layout, so that counts match exactly and positions are 0 px off: everything must PASS.
--self-test --perturb 0.3: the stand-in's positions moved by 0.3 px (each in a seeded random
direction): the position check must FAIL (the proof that the checks can fail).

Exit status: 0 every check passed, 1 a check failed, 2 flynn could not be run or the input is wrong.
"""
import argparse
import datetime
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time

import cv2
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NORMALISED_RADIUS = 30.0
OVERLAP_ERROR = 0.4


def die(msg, code=2):
    print("compare_opencv: " + msg, file=sys.stderr)
    sys.exit(code)


# ------------------------------------------------------------------ features

def as_features(kps, desc):
    """cv2.KeyPoints and descriptors in the npz layout."""
    n = len(kps)
    kp = np.array([[k.pt[0], k.pt[1], k.size, k.angle, k.response] for k in kps], np.float32).reshape(n, 5)
    octave = np.array([k.octave for k in kps], np.int32).reshape(n)
    d = np.zeros((0, 128), np.float32) if desc is None else desc.astype(np.float32).reshape(n, 128)
    return {"keypoints": kp, "octave": octave, "descriptors": d}


def flynn_order(f):
    """f sorted as flynn writes it: x, y, then size descending, then angle."""
    kp = f["keypoints"]
    idx = np.lexsort((kp[:, 3], -kp[:, 2], kp[:, 1], kp[:, 0]))
    return {k: (v[idx] if isinstance(v, np.ndarray) else v) for k, v in f.items()}


def is_flynn_order(kp):
    if len(kp) < 2:
        return True
    a, b = kp[:-1].astype(np.float64), kp[1:].astype(np.float64)
    key_a = [a[:, 0], a[:, 1], -a[:, 2], a[:, 3]]
    key_b = [b[:, 0], b[:, 1], -b[:, 2], b[:, 3]]
    less = np.zeros(len(a), bool)
    equal = np.ones(len(a), bool)
    for ka, kb in zip(key_a, key_b):
        less |= equal & (ka < kb)
        equal &= ka == kb
    return bool(np.all(less | equal))


def load_npz(path):
    try:
        z = np.load(path)
    except Exception as e:  # noqa: BLE001 - any unreadable file is the same error to the user
        raise ValueError("cannot read %s: %s" % (path, e))
    prefix = ""
    if "keypoints" not in z.files:  # one image's arrays keyed "<file name>/keypoints", as for several images
        named = [k[:-len("keypoints")] for k in z.files if k.endswith("/keypoints")]
        if len(named) == 1:
            prefix = named[0]
    for k in ("keypoints", "octave", "descriptors"):
        if prefix + k not in z.files:
            raise ValueError("%s has no %r (keys: %s)" % (path, prefix + k, ", ".join(z.files)))
    kp, octave, desc = z[prefix + "keypoints"], z[prefix + "octave"], z[prefix + "descriptors"]
    n = kp.shape[0] if kp.ndim == 2 else -1
    if kp.ndim != 2 or kp.shape[1] != 5 or kp.dtype != np.float32:
        raise ValueError("%s: keypoints is %s %s; expected float32 (n, 5)" % (path, kp.dtype, kp.shape))
    if octave.shape != (n,) or octave.dtype.kind not in "iu":
        raise ValueError("%s: octave is %s %s; expected int32 (%d,)" % (path, octave.dtype, octave.shape, n))
    if desc.shape != (n, 128):
        raise ValueError("%s: descriptors is %s; expected (%d, 128)" % (path, desc.shape, n))
    return {"keypoints": kp, "octave": octave.astype(np.int32), "descriptors": desc.astype(np.float32),
            "descriptor_dtype": str(desc.dtype)}


class OpenCV:
    def __init__(self):
        self.sift = {}

    def run(self, img, nfeatures):
        if nfeatures not in self.sift:
            self.sift[nfeatures] = cv2.SIFT_create(nfeatures=nfeatures)
        t = time.perf_counter()
        kps, desc = self.sift[nfeatures].detectAndCompute(img, None)
        f = as_features(kps, desc)
        f["seconds"] = time.perf_counter() - t
        return f


class Flynn:
    """flynn's side: the binary, or (self-test) OpenCV written to and read from flynn's npz layout."""

    def __init__(self, a, tmpdir):
        self.a, self.tmp = a, tmpdir
        self.opencv = OpenCV()
        self.rng_seed = 47

    def describe(self):
        if self.a.self_test:
            how = []
            if self.a.perturb:
                how.append("positions moved by %g px" % self.a.perturb)
            if self.a.scale_sizes != 1.0:
                how.append("half the sizes times %g" % self.a.scale_sizes)
            if self.a.scramble_descriptors:
                how.append("%g%% of the descriptors permuted" % (100 * self.a.scramble_descriptors))
            return "OpenCV %s standing in for flynn (self-test%s)" % (cv2.__version__, "".join(", " + h for h in how))
        return " ".join(self.command("IMG", "F.npz", 0))

    def command(self, image, out, nfeatures):
        cmd = shlex.split(self.a.flynn_cmd.format(flynn=shlex.quote(self.a.flynn), image=shlex.quote(image),
                                                  out=shlex.quote(out)))
        if nfeatures:
            cmd += shlex.split(self.a.nfeatures_args.format(n=nfeatures))
        return cmd

    def run(self, path, img, nfeatures):
        out = os.path.join(self.tmp, "%s.n%d.npz" % (os.path.basename(path)[:-4], nfeatures))
        t = time.perf_counter()
        if self.a.self_test:
            f = flynn_order(self.opencv.run(img, nfeatures))
            del f["seconds"]
            if self.a.perturb:
                rng = np.random.default_rng(self.rng_seed + nfeatures)
                th = rng.uniform(0, 2 * math.pi, len(f["keypoints"]))
                f["keypoints"][:, 0] += np.float32(self.a.perturb) * np.cos(th).astype(np.float32)
                f["keypoints"][:, 1] += np.float32(self.a.perturb) * np.sin(th).astype(np.float32)
            n = len(f["keypoints"])
            rng = np.random.default_rng(self.rng_seed + 1000 + nfeatures)
            if self.a.scale_sizes != 1.0:  # a seeded random half of the regions made the wrong size
                half = rng.permutation(n)[: n // 2]
                f["keypoints"][half, 2] *= np.float32(self.a.scale_sizes)
            if self.a.scramble_descriptors:  # a seeded random share of the descriptors handed round
                some = rng.permutation(n)[: int(round(n * self.a.scramble_descriptors))]
                f["descriptors"][some] = f["descriptors"][rng.permutation(some)]
            np.savez(out, **f)
        else:
            cmd = self.command(path, out, nfeatures)
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:
                raise RuntimeError("%s: exit %d\n%s" % (" ".join(cmd), r.returncode, (r.stderr or r.stdout)[-2000:]))
        f = load_npz(out)
        f["seconds"] = time.perf_counter() - t
        return f


# ------------------------------------------------------------------ statistics

def dist(xs):
    xs = np.asarray(xs, np.float64)
    if xs.size == 0:
        return {"n": 0, "median": None, "p95": None, "max": None}
    return {"n": int(xs.size), "median": float(np.median(xs)), "p95": float(np.percentile(xs, 95)),
            "max": float(xs.max())}


def octave_index(packed):
    o = packed.astype(np.int64) & 255
    return np.where(o >= 128, o - 256, o)


def pair_keypoints(cv, fl, size_tol, angle_tol, radius):
    """(i_cv, j_fl): mutual nearest neighbours by position among compatible keypoints."""
    kc, kf = cv["keypoints"].astype(np.float64), fl["keypoints"].astype(np.float64)
    oc, of = octave_index(cv["octave"]), octave_index(fl["octave"])
    pairs_i, pairs_j = [], []
    for o in np.intersect1d(oc, of):
        ic, jf = np.nonzero(oc == o)[0], np.nonzero(of == o)[0]
        A, B = kc[ic], kf[jf]
        m = len(jf)
        row_best = np.empty(len(ic), np.int64)
        row_d = np.empty(len(ic))
        col_d = np.full(m, np.inf)
        col_best = np.full(m, -1, np.int64)
        for s in range(0, len(ic), 512):
            a = A[s:s + 512]
            d = np.hypot(a[:, None, 0] - B[None, :, 0], a[:, None, 1] - B[None, :, 1])
            ok = np.abs(B[None, :, 2] / a[:, None, 2] - 1) < size_tol
            da = np.abs(a[:, None, 3] - B[None, :, 3]) % 360.0
            ok &= np.minimum(da, 360.0 - da) < angle_tol
            d[~ok] = np.inf
            rb = d.argmin(axis=1)
            row_best[s:s + 512] = rb
            row_d[s:s + 512] = d[np.arange(len(a)), rb]
            cb = d.argmin(axis=0)
            cd = d[cb, np.arange(m)]
            better = cd < col_d
            col_d[better] = cd[better]
            col_best[better] = cb[better] + s
        mutual = np.isfinite(row_d) & (row_d <= radius) & (col_best[row_best] == np.arange(len(ic)))
        pairs_i.append(ic[mutual])
        pairs_j.append(jf[row_best[mutual]])
    if not pairs_i:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(pairs_i), np.concatenate(pairs_j)


def compare_image(cv, fl, a):
    n_cv, n_fl = len(cv["keypoints"]), len(fl["keypoints"])
    i, j = pair_keypoints(cv, fl, a.size_tol, a.angle_tol, a.pair_radius)
    pos = np.hypot(*(cv["keypoints"][i, :2].astype(np.float64) - fl["keypoints"][j, :2].astype(np.float64)).T)
    dd = np.linalg.norm(cv["descriptors"][i].astype(np.float64) - fl["descriptors"][j].astype(np.float64), axis=1)
    identical = np.all(cv["descriptors"][i] == fl["descriptors"][j], axis=1) if len(i) else np.zeros(0, bool)
    packed_same = cv["octave"][i] == fl["octave"][j]
    return {
        "opencv": n_cv, "flynn": n_fl, "ratio": (n_fl / n_cv) if n_cv else (1.0 if n_fl == 0 else math.inf),
        "paired": int(len(i)), "paired_fraction": (len(i) / n_cv) if n_cv else 1.0,
        "paired_fraction_flynn": (len(i) / n_fl) if n_fl else 1.0,
        "position_px": dist(pos), "descriptor_l2": dist(dd),
        "descriptors_identical": float(identical.mean()) if len(i) else None,
        "packed_octave_same": float(packed_same.mean()) if len(i) else None,
        "size_rel_err": dist(np.abs(fl["keypoints"][j, 2] / cv["keypoints"][i, 2] - 1)),
        "response_rel_err": dist(np.abs(fl["keypoints"][j, 4] / np.where(cv["keypoints"][i, 4] == 0, 1, cv["keypoints"][i, 4]) - 1)),
        "_pos": pos, "_desc": dd, "_identical": identical,
    }


# ------------------------------------------------------------------ the Mikolajczyk-Schmid protocol

def apply_h(H, p):
    q = np.c_[p, np.ones(len(p))] @ H.T
    return q[:, :2] / q[:, 2:3]


def jacobian_h(H, p):
    """(n, 2, 2): d(H p)/dp at each point."""
    w = p[:, 0] * H[2, 0] + p[:, 1] * H[2, 1] + H[2, 2]
    q = apply_h(H, p)
    J = np.empty((len(p), 2, 2))
    J[:, 0, 0] = (H[0, 0] - q[:, 0] * H[2, 0]) / w
    J[:, 0, 1] = (H[0, 1] - q[:, 0] * H[2, 1]) / w
    J[:, 1, 0] = (H[1, 0] - q[:, 1] * H[2, 0]) / w
    J[:, 1, 1] = (H[1, 1] - q[:, 1] * H[2, 1]) / w
    return J


def regions(f, H, size_own, size_other):
    """Centres, radii, the regions' ellipses mapped by H (centres, 2x2 'covariances' S with the ellipse
    x^T S^-1 x <= 1) and whether each region lies in both images."""
    kp = f["keypoints"].astype(np.float64)
    c, r = kp[:, :2], kp[:, 2] / 2.0
    cm = apply_h(H, c) if len(c) else np.zeros((0, 2))
    J = jacobian_h(H, c) if len(c) else np.zeros((0, 2, 2))
    S = (r ** 2)[:, None, None] * (J @ J.transpose(0, 2, 1))
    (w0, h0), (w1, h1) = size_own, size_other
    ex, ey = np.sqrt(S[:, 0, 0]), np.sqrt(S[:, 1, 1])
    inside_own = (c[:, 0] - r >= -0.5) & (c[:, 0] + r <= w0 - 0.5) & (c[:, 1] - r >= -0.5) & (c[:, 1] + r <= h0 - 0.5)
    inside_other = ((cm[:, 0] - ex >= -0.5) & (cm[:, 0] + ex <= w1 - 0.5) &
                    (cm[:, 1] - ey >= -0.5) & (cm[:, 1] + ey <= h1 - 0.5))
    return c, r, cm, S, inside_own & inside_other


def overlap_errors(ca, ra, cb, Sb, max_points=4_000_000):
    """Overlap errors of the candidate pairs: region a (circle ca, ra in the reference) against region b
    mapped into the reference (centre cb, ellipse Sb), both shapes scaled by 30 / ra, rasterised on the
    integer grid about ca. Returns (ia, ib, error) for the candidates."""
    na, nb = len(ca), len(cb)
    if na == 0 or nb == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    area_a = math.pi * ra ** 2
    area_b = math.pi * np.sqrt(np.maximum(np.linalg.det(Sb), 0))
    ia_l, ib_l = [], []
    for s in range(0, na, 1024):
        d = np.hypot(ca[s:s + 1024, None, 0] - cb[None, :, 0], ca[s:s + 1024, None, 1] - cb[None, :, 1])
        aa = area_a[s:s + 1024, None]
        ratio = np.minimum(aa, area_b[None, :]) / np.maximum(aa, area_b[None, :])
        ok = (d < 4 * ra[s:s + 1024, None]) & (ratio > 1 - OVERLAP_ERROR)
        i, j = np.nonzero(ok)
        ia_l.append(i + s)
        ib_l.append(j)
    ia, ib = np.concatenate(ia_l), np.concatenate(ib_l)
    if len(ia) == 0:
        return ia, ib, np.zeros(0)
    # normalised: region a a circle of radius 30 at ca, b's shape scaled alike, centres as they are
    k2 = (NORMALISED_RADIUS / ra[ia]) ** 2
    S = Sb[ib] * k2[:, None, None]
    off = cb[ib] - ca[ia]
    # b's semi-axes; no intersection at all when the centres are further apart than 30 + b's longest
    tr, det = S[:, 0, 0] + S[:, 1, 1], S[:, 0, 0] * S[:, 1, 1] - S[:, 0, 1] ** 2
    lmax = np.sqrt(np.maximum(tr / 2 + np.sqrt(np.maximum(tr ** 2 / 4 - det, 0)), 0))
    keep = np.hypot(off[:, 0], off[:, 1]) < NORMALISED_RADIUS + lmax
    ia, ib, S, off, det = ia[keep], ib[keep], S[keep], off[keep], det[keep]
    err = np.ones(len(ia))
    if len(ia) == 0:
        return ia, ib, err
    # the grid must cover both: half-width G about ca
    G = np.ceil(np.maximum(NORMALISED_RADIUS, np.maximum(np.abs(off[:, 0]) + np.sqrt(S[:, 0, 0]),
                                                         np.abs(off[:, 1]) + np.sqrt(S[:, 1, 1])))).astype(np.int64)
    Q = np.empty_like(S)  # S^-1
    Q[:, 0, 0], Q[:, 1, 1] = S[:, 1, 1] / det, S[:, 0, 0] / det
    Q[:, 0, 1] = Q[:, 1, 0] = -S[:, 0, 1] / det
    order = np.argsort(G, kind="stable")
    pos = 0
    while pos < len(order):
        g = int(G[order[pos]])
        # pairs of grid half-width up to 1.25 g share one grid
        end = int(np.searchsorted(G[order], int(g * 1.25) + 1, side="left"))
        gmax = int(G[order[end - 1]])
        side = 2 * gmax + 1
        per = max(1, max_points // (side * side))
        end = min(end, pos + per)
        sel = order[pos:end]
        ys, xs = np.mgrid[-gmax:gmax + 1, -gmax:gmax + 1]
        xs = xs.ravel().astype(np.float32)
        ys = ys.ravel().astype(np.float32)
        in_a = xs * xs + ys * ys <= NORMALISED_RADIUS ** 2
        n_a = int(in_a.sum())
        dx = xs[None, :] - off[sel, 0, None].astype(np.float32)
        dy = ys[None, :] - off[sel, 1, None].astype(np.float32)
        q = Q[sel].astype(np.float32)
        in_b = (q[:, 0, 0, None] * dx * dx + 2 * q[:, 0, 1, None] * dx * dy + q[:, 1, 1, None] * dy * dy) <= 1
        inter = (in_b & in_a[None, :]).sum(axis=1)
        union = n_a + in_b.sum(axis=1) - inter
        err[sel] = 1.0 - inter / np.maximum(union, 1)
        pos = end
    return ia, ib, err


def greedy_one_to_one(ia, ib, cost):
    """Pairs (ia, ib) taken in order of increasing cost, each index at most once."""
    order = np.argsort(cost, kind="stable")
    used_a, used_b = set(), set()
    out = []
    for k in order:
        a, b = int(ia[k]), int(ib[k])
        if a in used_a or b in used_b:
            continue
        used_a.add(a)
        used_b.add(b)
        out.append(k)
    return np.array(out, np.int64)


def greedy_descriptor_matches(da, db):
    """One-to-one nearest neighbours by L2 distance, the smallest distance first (greedy), found as
    rounds of mutual nearest neighbours among the descriptors not yet matched: (ia, ib)."""
    if len(da) == 0 or len(db) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    D = (da * da).sum(1)[:, None] + (db * db).sum(1)[None, :] - 2 * da @ db.T
    rows, cols = np.arange(len(da)), np.arange(len(db))
    out_a, out_b = [], []
    while len(rows) and len(cols):
        sub = D[np.ix_(rows, cols)]
        rb = sub.argmin(axis=1)
        cb = sub.argmin(axis=0)
        mutual = np.nonzero(cb[rb] == np.arange(len(rows)))[0]
        out_a.append(rows[mutual])
        out_b.append(cols[rb[mutual]])
        rows = np.delete(rows, mutual)
        cols = np.delete(cols, rb[mutual])
    return np.concatenate(out_a), np.concatenate(out_b)


def protocol(fa, fb, H, size_a, size_b):
    """Repeatability and matching score of features fa (reference) and fb (warped, x_b ~ H x_a)."""
    Hi = np.linalg.inv(H)
    ca, ra, _, _, va = regions(fa, H, size_a, size_b)
    cb_own, _, cb, Sb, vb = regions(fb, Hi, size_b, size_a)
    ia_v, ib_v = np.nonzero(va)[0], np.nonzero(vb)[0]
    n_a, n_b = len(ia_v), len(ib_v)
    ia, ib, err = overlap_errors(ca[ia_v], ra[ia_v], cb[ib_v], Sb[ib_v])
    good = err < OVERLAP_ERROR
    corr = greedy_one_to_one(ia[good], ib[good], err[good])
    denom = min(n_a, n_b)
    da = fa["descriptors"][ia_v].astype(np.float32)
    db = fb["descriptors"][ib_v].astype(np.float32)
    ma, mb = greedy_descriptor_matches(da, db)
    ok_pairs = set(zip(ia[good].tolist(), ib[good].tolist()))
    correct = sum((int(x), int(y)) in ok_pairs for x, y in zip(ma, mb))
    return {"regions_reference": n_a, "regions_warped": n_b, "correspondences": int(len(corr)),
            "repeatability": (len(corr) / denom) if denom else 0.0, "matches": int(len(ma)),
            "correct_matches": int(correct), "matching_score": (correct / denom) if denom else 0.0,
            "candidate_pairs": int(len(ia))}


# ------------------------------------------------------------------ the matches picture

def match_stereo(fl, fr, ratio=0.75):
    if len(fl["descriptors"]) < 2 or len(fr["descriptors"]) < 2:
        return np.zeros((0, 2)), np.zeros((0, 2)), np.zeros(0, bool)
    bf = cv2.BFMatcher(cv2.NORM_L2)
    knn = bf.knnMatch(fl["descriptors"].astype(np.float32), fr["descriptors"].astype(np.float32), k=2)
    good = [m[0] for m in knn if len(m) == 2 and m[0].distance < ratio * m[1].distance]
    p1 = np.float64([fl["keypoints"][m.queryIdx, :2] for m in good]).reshape(-1, 2)
    p2 = np.float64([fr["keypoints"][m.trainIdx, :2] for m in good]).reshape(-1, 2)
    inl = np.zeros(len(good), bool)
    if len(good) >= 8:
        F, mask = cv2.findFundamentalMat(p1, p2, cv2.FM_RANSAC, 1.0, 0.999)
        if F is not None and mask is not None:
            inl = mask.ravel().astype(bool)
    return p1, p2, inl


def draw_matches(img_l, img_r, p1, p2, inl, title, path, max_kb, width=1200, lines=120):
    scale = min(1.0, width / float(img_l.shape[1] + img_r.shape[1]))
    while True:
        l = cv2.resize(img_l, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        r = cv2.resize(img_r, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        hh = max(l.shape[0], r.shape[0])
        bar = 36
        canvas = np.full((hh + bar, l.shape[1] + r.shape[1], 3), 255, np.uint8)
        # the photos in 32 gray levels (lighter, and a PNG a third the size), the lines in colour over them
        lq, rq = [(128 + (x >> 3 << 3) // 2).astype(np.uint8) for x in (l, r)]
        canvas[bar:bar + l.shape[0], :l.shape[1]] = cv2.cvtColor(lq, cv2.COLOR_GRAY2BGR)
        canvas[bar:bar + r.shape[0], l.shape[1]:] = cv2.cvtColor(rq, cv2.COLOR_GRAY2BGR)
        shift = np.array([l.shape[1], 0.0])
        green, red = (40, 160, 40), (40, 40, 220)
        # the outliers (red) and an even sample of the inliers (green, at most `lines` of them, taken in
        # order of height so that they cover the picture), each a line between two circles
        ins = np.nonzero(inl)[0]
        ins = ins[np.argsort(p1[ins, 1], kind="stable")] if len(ins) else ins
        drawn = set(ins[np.linspace(0, len(ins) - 1, min(lines, len(ins))).astype(int)].tolist()) if len(ins) else set()
        for k in range(len(p1)):
            pa = tuple(int(round(v)) for v in p1[k] * scale + (0, bar))
            pb = tuple(int(round(v)) for v in p2[k] * scale + shift + (0, bar))
            color = green if inl[k] else red
            if not inl[k] or k in drawn:
                cv2.circle(canvas, pa, 2, color, 1, cv2.LINE_AA)
                cv2.circle(canvas, pb, 2, color, 1, cv2.LINE_AA)
                cv2.line(canvas, pa, pb, color, 1, cv2.LINE_AA)
        for row, text in enumerate(title.split("\n")):
            cv2.putText(canvas, text, (6, 14 + 16 * row), cv2.FONT_HERSHEY_SIMPLEX, 0.42, (0, 0, 0), 1, cv2.LINE_AA)
        ok, buf = cv2.imencode(".png", canvas, [cv2.IMWRITE_PNG_COMPRESSION, 9])
        if len(buf) <= max_kb * 1000 or scale < 0.2:
            break
        scale *= 0.85
    with open(path, "wb") as f:
        f.write(buf.tobytes())
    return {"path": path, "bytes": int(len(buf)), "scale": scale, "width": canvas.shape[1], "height": canvas.shape[0]}


# ------------------------------------------------------------------ reporting

def fmt(v, spec="%.3f"):
    return "-" if v is None else (spec % v)


def write_markdown(path, res):
    L = []
    L.append("SIFT against OpenCV %s (%s): %s, %s." % (res["opencv_version"], res["date"], res["flynn"],
                                                      "PASS" if res["pass"] else "FAIL"))
    L.append("")
    for nf in res["nfeatures"]:
        L.append("**nfeatures=%d%s**: keypoints, and the pairs both find (same octave, size within 5%%, angle "
                 "within 2 deg, mutual nearest within %g px)" % (nf, " (all)" if nf == 0 else "", res["options"]["pair_radius"]))
        L.append("")
        L.append("| image | OpenCV | flynn | ratio | paired | position px median / p95 / max | "
                 "descriptor L2 median / p95 / max | identical |")
        L.append("| --- | ---: | ---: | ---: | ---: | --- | --- | ---: |")
        for im in res["images"]:
            c = im["configs"][str(nf)]
            p, d = c["position_px"], c["descriptor_l2"]
            L.append("| %s | %d | %d | %.3f | %.1f%% | %s / %s / %s | %s / %s / %s | %s |" % (
                im["image"], c["opencv"], c["flynn"], c["ratio"], 100 * c["paired_fraction"],
                fmt(p["median"], "%.4f"), fmt(p["p95"], "%.4f"), fmt(p["max"], "%.4f"),
                fmt(d["median"], "%.2f"), fmt(d["p95"], "%.2f"), fmt(d["max"], "%.2f"),
                "-" if c["descriptors_identical"] is None else "%.1f%%" % (100 * c["descriptors_identical"])))
        pooled = res["pooled"][str(nf)]
        L.append("| all | %d | %d | %.3f | %.1f%% | %s / %s / %s | %s / %s / %s | %s |" % (
            pooled["opencv"], pooled["flynn"], pooled["ratio"], 100 * pooled["paired_fraction"],
            fmt(pooled["position_px"]["median"], "%.4f"), fmt(pooled["position_px"]["p95"], "%.4f"),
            fmt(pooled["position_px"]["max"], "%.4f"), fmt(pooled["descriptor_l2"]["median"], "%.2f"),
            fmt(pooled["descriptor_l2"]["p95"], "%.2f"), fmt(pooled["descriptor_l2"]["max"], "%.2f"),
            "-" if pooled["descriptors_identical"] is None else "%.1f%%" % (100 * pooled["descriptors_identical"])))
        L.append("")
    if res["pairs"]:
        L.append("Repeatability and matching score (Mikolajczyk-Schmid protocol: regions of radius size/2 "
                 "normalised to 30 px, overlap error < 40%, regions in both images)")
        L.append("")
        L.append("| pair | nfeatures | OpenCV rep. | flynn rep. | OpenCV match score | flynn match score | regions (OpenCV) | |")
        L.append("| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |")
        for pr in res["pairs"]:
            o, f = pr["opencv"], pr["flynn"]
            L.append("| %s | %d | %.3f | %.3f | %.3f | %.3f | %d / %d | %s |" % (
                pr["image"][:-4], pr["nfeatures"], o["repeatability"], f["repeatability"], o["matching_score"],
                f["matching_score"], o["regions_reference"], o["regions_warped"], "ok" if pr["pass"] else "**FAIL**"))
        L.append("")
    if res.get("stereo"):
        s = res["stereo"]
        L.append("Stereo pair %s / %s: flynn %d ratio-test matches, %d fundamental-matrix inliers; OpenCV %d, %d."
                 % (s["left"], s["right"], s["flynn"]["matches"], s["flynn"]["inliers"], s["opencv"]["matches"],
                    s["opencv"]["inliers"]))
        L.append("")
    L.append("Checks: " + ", ".join("%s %s" % (k, "PASS" if v["pass"] else "FAIL (%d)" % len(v["failures"]))
                                    for k, v in res["checks"].items()))
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("images", help="the directory tests/sift/make_images.py wrote")
    p.add_argument("--flynn", default=os.path.join(ROOT, "build", "flynn"), help="the flynn binary (default build/flynn)")
    p.add_argument("--flynn-cmd", default="{flynn} sift {image} --out {out}",
                   help="the command line for one image (default: %(default)s)")
    p.add_argument("--nfeatures-args", default="--nfeatures {n}", help="appended for nfeatures N > 0 (default: %(default)s)")
    p.add_argument("--self-test", action="store_true", help="OpenCV stands in for flynn (through the npz layout)")
    p.add_argument("--perturb", type=float, default=0.0, help="with --self-test: move the stand-in's positions by PX")
    p.add_argument("--scale-sizes", type=float, default=1.0,
                   help="with --self-test: multiply the sizes of a random half of the stand-in's keypoints by F")
    p.add_argument("--scramble-descriptors", type=float, default=0.0,
                   help="with --self-test: permute a random share F of the stand-in's descriptors among themselves")
    p.add_argument("--nfeatures", default="0,500", help="nfeatures settings to compare (default: %(default)s)")
    p.add_argument("--protocol-nfeatures", default="0", help="settings to run the protocol on (default: %(default)s)")
    p.add_argument("--only", default="", help="image names (without .png) to use; pairs when both are in")
    p.add_argument("--no-protocol", action="store_true", help="leave repeatability and matching score out")
    p.add_argument("--pair-radius", type=float, default=2.0, help="the farthest a pair may be apart, px (default 2)")
    p.add_argument("--size-tol", type=float, default=0.05)
    p.add_argument("--angle-tol", type=float, default=2.0)
    p.add_argument("--count-tol", type=float, default=0.05, help="|flynn / OpenCV count - 1| allowed (default 0.05)")
    p.add_argument("--pos-p95", type=float, default=0.1, help="the pairs' position error's 95th percentile allowed, px")
    p.add_argument("--min-paired", type=float, default=0.9, help="share of OpenCV's keypoints paired, at least (0: no check)")
    p.add_argument("--rep-tol", type=float, default=0.01, help="flynn's repeatability may be this much below OpenCV's")
    p.add_argument("--ms-tol", type=float, default=0.01, help="flynn's matching score may be this much below OpenCV's")
    p.add_argument("--json", help="write all the numbers to FILE")
    p.add_argument("--markdown", help="write the tables (for docs/sift.md) to FILE")
    p.add_argument("--matches-png", help="draw the stereo pair's matches (flynn's features) into FILE")
    p.add_argument("--matches-max-kb", type=int, default=300)
    p.add_argument("--quiet", action="store_true", help="only the summary")
    a = p.parse_args()
    if (a.perturb or a.scale_sizes != 1.0 or a.scramble_descriptors) and not a.self_test:
        die("--perturb, --scale-sizes and --scramble-descriptors go with --self-test")
    try:
        manifest = json.load(open(os.path.join(a.images, "manifest.json")))
    except (OSError, ValueError) as e:
        die("no manifest in %s (%s): make the images with tests/sift/make_images.py DIR first" % (a.images, e))
    if not a.self_test and not os.path.exists(a.flynn):
        die("%s not found (build flynn first, give --flynn PATH, or --self-test)" % a.flynn)
    nfs = [int(x) for x in a.nfeatures.split(",") if x != ""]
    pnfs = [] if a.no_protocol else [int(x) for x in a.protocol_nfeatures.split(",") if x != "" and int(x) in nfs]
    only = set(x for x in a.only.split(",") if x)
    files = [im["file"] for im in manifest["images"] if not only or im["file"][:-4] in only]
    pairs = [pr for pr in manifest["pairs"] if pr["reference"] in files and pr["image"] in files]
    stereo = [s for s in manifest.get("stereo", []) if s["left"] in files and s["right"] in files]

    tmp = tempfile.mkdtemp(prefix="flynn-sift-cmp-")
    ocv, fly = OpenCV(), Flynn(a, tmp)
    say = (lambda *x: None) if a.quiet else print
    say("flynn side: %s" % fly.describe())
    say("OpenCV %s cv2.SIFT_create(nfeatures=%s); %d images, %d warped pairs" % (
        cv2.__version__, "/".join(map(str, nfs)), len(files), len(pairs)))

    feats = {}  # (file, nf) -> (opencv, flynn)
    sizes = {}
    images = []
    t0 = time.perf_counter()
    for fn in files:
        path = os.path.join(a.images, fn)
        img = cv2.imread(path, cv2.IMREAD_GRAYSCALE)
        if img is None:
            die("cannot read %s" % path)
        sizes[fn] = (img.shape[1], img.shape[0])
        rec = {"image": fn, "width": img.shape[1], "height": img.shape[0], "configs": {}}
        for nf in nfs:
            o = ocv.run(img, nf)
            try:
                f = fly.run(path, img, nf)
            except (RuntimeError, ValueError) as e:
                die("flynn failed on %s (nfeatures %d): %s" % (fn, nf, e))
            feats[(fn, nf)] = (o, f)
            c = compare_image(o, f, a)
            c["flynn_sorted"] = is_flynn_order(f["keypoints"])
            c["opencv_seconds"], c["flynn_seconds"] = o["seconds"], f["seconds"]
            c["flynn_descriptor_dtype"] = f["descriptor_dtype"]
            rec["configs"][str(nf)] = c
        images.append(rec)
        c = rec["configs"][str(nfs[0])]
        say("  %-28s %4dx%-4d  OpenCV %5d  flynn %5d  ratio %.3f  paired %5.1f%%  pos p95 %s px  desc L2 median %s" % (
            fn, img.shape[1], img.shape[0], c["opencv"], c["flynn"], c["ratio"], 100 * c["paired_fraction"],
            fmt(c["position_px"]["p95"], "%.4f"), fmt(c["descriptor_l2"]["median"], "%.2f")))

    pooled = {}
    for nf in nfs:
        cs = [im["configs"][str(nf)] for im in images]
        n_cv, n_fl, n_pair = sum(c["opencv"] for c in cs), sum(c["flynn"] for c in cs), sum(c["paired"] for c in cs)
        ident = np.concatenate([c["_identical"] for c in cs]) if cs else np.zeros(0, bool)
        pooled[str(nf)] = {"opencv": n_cv, "flynn": n_fl, "ratio": n_fl / n_cv if n_cv else 1.0, "paired": n_pair,
                           "paired_fraction": n_pair / n_cv if n_cv else 1.0,
                           "position_px": dist(np.concatenate([c["_pos"] for c in cs]) if cs else []),
                           "descriptor_l2": dist(np.concatenate([c["_desc"] for c in cs]) if cs else []),
                           "descriptors_identical": float(ident.mean()) if ident.size else None}

    pair_res = []
    for pr in pairs:
        H = np.array(pr["H"], np.float64)
        for nf in pnfs:
            ref_o, ref_f = feats[(pr["reference"], nf)]
            war_o, war_f = feats[(pr["image"], nf)]
            ro = protocol(ref_o, war_o, H, sizes[pr["reference"]], sizes[pr["image"]])
            rf = protocol(ref_f, war_f, H, sizes[pr["reference"]], sizes[pr["image"]])
            ok = (rf["repeatability"] >= ro["repeatability"] - a.rep_tol and
                  rf["matching_score"] >= ro["matching_score"] - a.ms_tol)
            pair_res.append({"reference": pr["reference"], "image": pr["image"], "warp": pr["warp"], "kind": pr["kind"],
                             "nfeatures": nf, "opencv": ro, "flynn": rf, "pass": ok})
            say("  %-28s n%-4d repeatability OpenCV %.3f flynn %.3f   matching score OpenCV %.3f flynn %.3f  %s" % (
                pr["image"], nf, ro["repeatability"], rf["repeatability"], ro["matching_score"], rf["matching_score"],
                "ok" if ok else "FAIL"))

    stereo_res = None
    if stereo:
        s = stereo[0]
        nf = nfs[0]
        lo, lf = feats[(s["left"], nf)]
        ro_, rf_ = feats[(s["right"], nf)]
        p1, p2, inl = match_stereo(lf, rf_)
        q1, q2, qinl = match_stereo(lo, ro_)
        stereo_res = {"left": s["left"], "right": s["right"], "nfeatures": nf,
                      "flynn": {"matches": int(len(p1)), "inliers": int(inl.sum())},
                      "opencv": {"matches": int(len(q1)), "inliers": int(qinl.sum())}}
        if a.matches_png:
            il = cv2.imread(os.path.join(a.images, s["left"]), cv2.IMREAD_GRAYSCALE)
            ir = cv2.imread(os.path.join(a.images, s["right"]), cv2.IMREAD_GRAYSCALE)
            who = "OpenCV stand-in" if a.self_test else "flynn"
            title = ("%s SIFT, %s / %s: %d ratio-test matches (0.75)\n"
                     "%d fundamental-matrix RANSAC inliers (1 px; green, %d of them drawn), %d outliers (red)" % (
                         who, s["left"][:-4], s["right"][:-4], len(p1), int(inl.sum()), min(120, int(inl.sum())),
                         len(p1) - int(inl.sum())))
            stereo_res["picture"] = draw_matches(il, ir, p1, p2, inl, title, a.matches_png, a.matches_max_kb)
        say("  stereo %s/%s: flynn %d matches, %d inliers; OpenCV %d matches, %d inliers" % (
            s["left"], s["right"], len(p1), int(inl.sum()), len(q1), int(qinl.sum())))
    elif a.matches_png:
        die("--matches-png: no stereo pair among the images (make_images.py writes motorcycle_left/right)")

    # ---- the checks
    checks = {"counts": [], "positions": [], "paired": [], "repeatability": [], "matching_score": []}
    for im in images:
        for nf in nfs:
            c = im["configs"][str(nf)]
            tag = "%s n%d" % (im["image"], nf)
            if c["opencv"] or c["flynn"]:
                if not (c["opencv"] and abs(c["ratio"] - 1) <= a.count_tol):
                    checks["counts"].append("%s: flynn %d, OpenCV %d" % (tag, c["flynn"], c["opencv"]))
            if c["position_px"]["p95"] is not None and c["position_px"]["p95"] > a.pos_p95:
                checks["positions"].append("%s: p95 %.4f px" % (tag, c["position_px"]["p95"]))
            if a.min_paired > 0 and c["paired_fraction"] < a.min_paired:
                checks["paired"].append("%s: %.1f%% paired" % (tag, 100 * c["paired_fraction"]))
    for pr in pair_res:
        tag = "%s n%d" % (pr["image"], pr["nfeatures"])
        o, f = pr["opencv"], pr["flynn"]
        if f["repeatability"] < o["repeatability"] - a.rep_tol:
            checks["repeatability"].append("%s: flynn %.3f, OpenCV %.3f" % (tag, f["repeatability"], o["repeatability"]))
        if f["matching_score"] < o["matching_score"] - a.ms_tol:
            checks["matching_score"].append("%s: flynn %.3f, OpenCV %.3f" % (tag, f["matching_score"], o["matching_score"]))
    if a.min_paired <= 0:
        del checks["paired"]
    if a.no_protocol or not pnfs:
        del checks["repeatability"], checks["matching_score"]
    checks = {k: {"pass": not v, "failures": v} for k, v in checks.items()}
    all_pass = all(v["pass"] for v in checks.values())
    elapsed = time.perf_counter() - t0

    for im in images:
        for c in im["configs"].values():
            for k in ("_pos", "_desc", "_identical"):
                c.pop(k, None)
    res = {"date": datetime.date.today().isoformat(), "opencv_version": cv2.__version__, "numpy_version": np.__version__,
           "python": platform.python_version(), "flynn": fly.describe(), "self_test": a.self_test, "perturb": a.perturb,
           "nfeatures": nfs, "protocol_nfeatures": pnfs,
           "options": {k: getattr(a, k) for k in ("pair_radius", "size_tol", "angle_tol", "count_tol", "pos_p95",
                                                   "min_paired", "rep_tol", "ms_tol")},
           "protocol": {"region_radius": "size / 2", "normalised_radius": NORMALISED_RADIUS,
                        "overlap_error": OVERLAP_ERROR, "grid_step_px": 1, "candidates": "centre distance < 4 radius, area ratio > 0.6"},
           "images": images, "pooled": pooled, "pairs": pair_res, "stereo": stereo_res, "checks": checks,
           "pass": all_pass, "seconds": elapsed}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1, default=float)
    if a.markdown:
        write_markdown(a.markdown, res)

    print("summary (%s; %.1f s):" % (fly.describe(), elapsed))
    for nf in nfs:
        pl = pooled[str(nf)]
        print("  nfeatures=%d: keypoints OpenCV %d flynn %d (ratio %.4f), paired %.1f%%, position px median/p95/max "
              "%s/%s/%s, descriptor L2 median/p95/max %s/%s/%s, identical %s" % (
                  nf, pl["opencv"], pl["flynn"], pl["ratio"], 100 * pl["paired_fraction"],
                  fmt(pl["position_px"]["median"], "%.4f"), fmt(pl["position_px"]["p95"], "%.4f"),
                  fmt(pl["position_px"]["max"], "%.4f"), fmt(pl["descriptor_l2"]["median"], "%.2f"),
                  fmt(pl["descriptor_l2"]["p95"], "%.2f"), fmt(pl["descriptor_l2"]["max"], "%.2f"),
                  "-" if pl["descriptors_identical"] is None else "%.1f%%" % (100 * pl["descriptors_identical"])))
    limits = {"counts": "within %g%%" % (100 * a.count_tol), "positions": "p95 <= %g px" % a.pos_p95,
              "paired": ">= %g%% of OpenCV's paired" % (100 * a.min_paired),
              "repeatability": ">= OpenCV's - %g" % a.rep_tol, "matching_score": ">= OpenCV's - %g" % a.ms_tol}
    for k, v in checks.items():
        print("  %-15s %-28s %s" % (k, limits[k], "PASS" if v["pass"] else "FAIL: %d, e.g. %s" % (
            len(v["failures"]), "; ".join(v["failures"][:3]))))
    print("compare_opencv: %s" % ("PASS" if all_pass else "FAIL"))
    sys.exit(0 if all_pass else 1)


if __name__ == "__main__":
    main()
