#!/usr/bin/python3
"""sift_bench.py — flynn's SIFT against OpenCV's cv::SIFT, time per image, side by side (issue 47).

For each image size (640x480, 1280x720, 1920x1080: skimage's motorcycle_left.png, or --image, cropped
to the aspect and resized, in gray) and thread count (1 and all the CPUs), it times
  * OpenCV: cv2.SIFT_create() (defaults) detectAndCompute on the gray image, in this process, with
            cv2.setNumThreads(n);
  * flynn:  `flynn sift` on the same image saved as PNG, with OMP_NUM_THREADS=n and --device cpu;
            inside the process when flynn has `--repeat K` (its "sift_ms: X" lines; the first
            run is the warm-up and is dropped), else the process's wall time minus that of a no-op
            run (the same command on a 16x16 image: start-up, device probe, threads), and the
            table says which (the "printed" column then shows the time flynn prints per image,
            for what it is worth);
one warm-up run and then the median of --repeat runs (at least 5) for each. It prints a table
(size, threads, OpenCV ms, flynn ms, flynn / OpenCV) and with --json FILE writes every run.

usage: bench/sift_bench.py [--flynn build/flynn] [--sizes 640x480,1280x720,1920x1080]
         [--threads 1,N] [--repeat 7] [--image PATH] [--device cpu] [--json FILE]
Run it with Debian's python3 (/usr/bin/python3), which has python3-opencv (scripts/setup.sh --test
installs it; no virtualenv). The machine should be otherwise idle.
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import cv2
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_IMAGE = "/usr/lib/python3/dist-packages/skimage/data/motorcycle_left.png"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--flynn", default=os.path.join(ROOT, "build", "flynn"), help="the flynn command (default build/flynn)")
    p.add_argument("--sizes", default="640x480,1280x720,1920x1080")
    p.add_argument("--threads", default="1,%d" % os.cpu_count(), help="thread counts (default 1 and all: %(default)s)")
    p.add_argument("--repeat", type=int, default=7, help="timed runs per point and side, after one warm-up (>= 5)")
    p.add_argument("--image", default=DEFAULT_IMAGE, help="the photo resized to each size (default skimage's motorcycle_left)")
    p.add_argument("--device", default="cpu", help="flynn's --device (default cpu: both sides on the CPU)")
    p.add_argument("--json", help="write every measurement to this file")
    a = p.parse_args()
    if a.repeat < 5:
        p.error("--repeat must be at least 5")
    return a


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def make_image(src, w, h):
    """src cropped about its centre to w:h and resized to w x h (INTER_AREA down, INTER_CUBIC up)."""
    H, W = src.shape
    if W * h > H * w:
        cw, ch = int(round(H * w / h)), H
    else:
        cw, ch = W, int(round(W * h / w))
    x0, y0 = (W - cw) // 2, (H - ch) // 2
    crop = src[y0:y0 + ch, x0:x0 + cw]
    interp = cv2.INTER_AREA if cw >= w else cv2.INTER_CUBIC
    return cv2.resize(crop, (w, h), interpolation=interp)


def time_opencv(img, threads, repeat):
    cv2.setNumThreads(threads)
    sift = cv2.SIFT_create()
    kps, _ = sift.detectAndCompute(img, None)  # warm-up
    ms = []
    for _ in range(repeat):
        t = time.perf_counter()
        kps, _ = sift.detectAndCompute(img, None)
        ms.append(1e3 * (time.perf_counter() - t))
    return ms, len(kps)


def run(cmd, env):
    t = time.perf_counter()
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = 1e3 * (time.perf_counter() - t)
    if r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), r.returncode, (r.stderr or r.stdout).strip()[-500:]))
    return wall, r.stdout + r.stderr


def flynn_status(flynn):
    """(usable, has --repeat, why not)"""
    if not os.path.exists(flynn):
        return False, False, "%s not found (build flynn first, or give --flynn PATH)" % flynn
    r = subprocess.run([flynn, "sift", "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    text = r.stdout + r.stderr
    if r.returncode != 0 or "not built yet" in text or "unknown command" in text:
        return False, False, "`flynn sift` does not run: %s" % text.strip().splitlines()[0] if text.strip() else "exit %d" % r.returncode
    return True, "--repeat" in text, ""


PRINTED = re.compile(r"keypoints?, \d+x\d+, ([0-9.]+) ms")
KEYPOINTS = re.compile(r": (\d+) keypoints?")


def time_flynn(a, path, noop, threads, repeat, has_repeat):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    base = [a.flynn, "sift", "--device", a.device]
    if has_repeat:
        _, out = run(base + ["--repeat", str(repeat + 1), path], env)
        ms = [float(x) for x in re.findall(r"sift_ms:\s*([0-9.eE+-]+)", out)]
        if len(ms) < repeat:
            raise RuntimeError("flynn sift --repeat %d printed %d sift_ms lines" % (repeat + 1, len(ms)))
        ms = ms[-repeat:]  # the first is the warm-up
        kp = KEYPOINTS.search(out)
        return {"method": "in-process (--repeat)", "ms": ms, "keypoints": int(kp.group(1)) if kp else None}
    walls, printed, kp = [], [], None
    for i in range(repeat + 1):
        w, out = run(base + [path], env)
        m = PRINTED.search(out)
        k = KEYPOINTS.search(out)
        if i:  # the first is the warm-up
            walls.append(w)
            if m:
                printed.append(float(m.group(1)))
        kp = int(k.group(1)) if k else kp
    noops = [run(base + [noop], env)[0] for _ in range(repeat + 1)][1:]
    start = statistics.median(noops)
    return {"method": "wall time - no-op run", "ms": [w - start for w in walls], "wall_ms": walls,
            "noop_ms": noops, "printed_ms": printed, "keypoints": kp}


def main():
    a = parse_args()
    sizes = [tuple(int(v) for v in s.split("x")) for s in a.sizes.split(",") if s]
    threads = sorted(set(int(t) for t in a.threads.split(",") if t))
    src = cv2.imread(a.image, cv2.IMREAD_GRAYSCALE)
    if src is None:
        sys.exit("sift_bench: cannot read %s (Debian: apt-get install python3-skimage, or give --image)" % a.image)
    usable, has_repeat, why = flynn_status(a.flynn)
    tmp = tempfile.mkdtemp(prefix="flynn-sift-bench-")
    noop = os.path.join(tmp, "noop16.png")
    cv2.imwrite(noop, np.full((16, 16), 128, np.uint8))
    print("machine: %s, %d CPUs; OpenCV %s; image %s; median of %d runs after a warm-up" % (
        cpu_model(), os.cpu_count(), cv2.__version__, os.path.basename(a.image), a.repeat))
    if not usable:
        print("flynn: %s; OpenCV's times only" % why)
    elif has_repeat:
        print("flynn: %s sift --device %s --repeat K: the times it measures inside the process" % (a.flynn, a.device))
    else:
        print("flynn: %s sift --device %s has no --repeat: its time is the process's wall time minus a no-op run's "
              "(the same command on a 16x16 image), so it includes reading the PNG" % (a.flynn, a.device))
    print()
    print("%-10s %7s %11s %11s %11s %8s %7s %7s" % ("size", "threads", "OpenCV ms", "flynn ms", "printed ms",
                                                 "flynn/CV", "kp CV", "kp fl"))
    points = []
    for (w, h) in sizes:
        img = make_image(src, w, h)
        path = os.path.join(tmp, "%dx%d.png" % (w, h))
        cv2.imwrite(path, img)
        for n in threads:
            cv_ms, cv_kp = time_opencv(img, n, a.repeat)
            pt = {"width": w, "height": h, "threads": n, "opencv_ms": cv_ms, "opencv_median_ms": statistics.median(cv_ms),
                  "opencv_keypoints": cv_kp}
            fl = None
            if usable:
                try:
                    fl = time_flynn(a, path, noop, n, a.repeat, has_repeat)
                except RuntimeError as e:
                    print("flynn failed: %s" % e)
            if fl:
                pt["flynn"] = fl
                pt["flynn_median_ms"] = statistics.median(fl["ms"])
                pt["ratio"] = pt["flynn_median_ms"] / pt["opencv_median_ms"]
            points.append(pt)
            printed = fl.get("printed_ms") if fl else None
            print("%-10s %7d %11.1f %11s %11s %8s %7d %7s" % (
                "%dx%d" % (w, h), n, pt["opencv_median_ms"],
                "%.1f" % pt["flynn_median_ms"] if fl else "-",
                "%.1f" % statistics.median(printed) if printed else "-",
                "%.2f" % pt["ratio"] if fl else "-", cv_kp,
                str(fl["keypoints"]) if fl and fl.get("keypoints") is not None else "-"))
            sys.stdout.flush()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"date": datetime.date.today().isoformat(), "machine": cpu_model(), "cpus": os.cpu_count(),
                       "opencv": cv2.__version__, "image": a.image, "repeat": a.repeat, "flynn": a.flynn,
                       "flynn_device": a.device, "flynn_usable": usable, "flynn_why_not": why,
                       "flynn_method": ("in-process (--repeat)" if has_repeat else "wall time - no-op run") if usable else None,
                       "points": points}, f, indent=1)
        print("\nwritten: " + a.json)


if __name__ == "__main__":
    main()
