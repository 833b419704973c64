#!/usr/bin/env python3
"""plot_check.py — reads what `flynn plot` drew, for tests/test_plot.sh.

  plot_check.py points SVG CSV     the curves are where the CSV's numbers say
  plot_check.py same SVG1 SVG2     the two charts draw the same points
  plot_check.py png SVG PNG        a browser's screenshot of SVG shows its curves
  plot_check.py info SVG           panels, series and counts, one per line

Positions are checked against the chart's own tick labels: for each panel the
value -> pixel maps are fitted from the y labels (beside their grid lines) and
the x labels, so a curve drawn off its numbers, or labels that lie about the
curve, fail. Exits 1 with the reason on the first mismatch.
"""
import csv
import math
import re
import struct
import sys
import xml.etree.ElementTree as ET
import zlib

NS = "{http://www.w3.org/2000/svg}"


def fail(msg):
    sys.exit("plot_check: " + msg)


def load(svg):
    root = ET.parse(svg).getroot()
    panels = []
    for g in root.iter(NS + "g"):
        if g.get("class") != "panel":
            continue
        p = {"family": g.get("data-family"), "series": {}, "markers": {}, "notes": [], "legend": []}
        ygrid = [float(e.get("y1")) for e in g if e.tag == NS + "line" and e.get("class") == "ygrid"]
        yt, xt = [], []
        for e in g:
            cls = e.get("class")
            if e.tag == NS + "text" and cls == "ytick":
                y = min(ygrid, key=lambda v: abs(v - float(e.get("y"))))
                if abs(y - float(e.get("y"))) > 6:
                    fail("%s: y label %s is not beside a grid line" % (p["family"], e.text))
                yt.append((float(e.text), y))
            elif e.tag == NS + "text" and cls == "xtick":
                xt.append((float(e.text), float(e.get("x"))))
            elif e.tag == NS + "polyline" and cls == "series":
                pts = [tuple(map(float, q.split(","))) for q in e.get("points").split()]
                p["series"].setdefault(e.get("data-key"), []).append(
                    {"points": pts, "stroke": e.get("stroke"), "dashed": e.get("stroke-dasharray") is not None})
            elif e.tag == NS + "circle" and cls == "marker":
                p["markers"].setdefault(e.get("data-key"), []).append(
                    (float(e.get("cx")), float(e.get("cy")), e.get("stroke"), e.get("fill")))
            elif e.tag == NS + "text" and cls == "note":
                p["notes"].append(e.text)
            elif e.tag == NS + "text" and cls == "legend":
                p["legend"].append(e.text)
        p["ymap"], p["xmap"] = fit(yt, p["family"], "y"), fit(xt, p["family"], "x")
        panels.append(p)
    title = next((e.text for e in root.iter(NS + "text") if e.get("class") == "title"), None)
    return root, title, panels


def fit(ticks, fam, axis):
    """value -> pixel from two distinct tick labels, checked on all others."""
    if len(ticks) < 1:
        fail("%s: no %s tick labels" % (fam, axis))
    if len(ticks) == 1:
        return None
    (v0, p0), (v1, p1) = ticks[0], ticks[-1]
    a = (p1 - p0) / (v1 - v0)
    for v, px in ticks:
        # labels are rounded for reading: allow the rounding of the label
        if abs(p0 + a * (v - v0) - px) > 0.6 + abs(a) * abs(v) * 1e-3:
            fail("%s: %s label %g at %.2f is off the scale of the others" % (fam, axis, v, px))
    return lambda v: p0 + a * (v - v0)


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    head, rows = rows[0], [r for r in rows[1:] if r]
    ei = head.index("epoch")
    data = {}
    for k, key in enumerate(head):
        if k == ei:
            continue
        data[key] = [(int(r[ei]) + 1, float("nan") if r[k] in ("NA", "") else float(r[k])) for r in rows]
    return data


def segments(vals):
    segs, cur = [], []
    for e, v in vals:
        if math.isfinite(v):
            cur.append((e, v))
        elif cur:
            segs.append(cur)
            cur = []
    if cur:
        segs.append(cur)
    return segs


def check_points(svg, csvpath):
    _, title, panels = load(svg)
    data = read_csv(csvpath)
    where = {}
    for p in panels:
        for key in list(p["series"]) + list(p["markers"]):
            where[key] = p
    n = 0
    for key, vals in data.items():
        if key not in where:
            if any(math.isfinite(v) for _, v in vals):
                fail("%s: not drawn" % key)
            continue
        p = where[key]
        base = key[4:] if key.startswith("val_") else key
        if p["family"] != base:
            fail("%s drawn in panel %s" % (key, p["family"]))
        want = segments(vals)
        lines = p["series"].get(key, [])
        multi = [s for s in want if len(s) > 1]
        if len(lines) != len(multi):
            fail("%s: %d line segments, expected %d" % (key, len(lines), len(multi)))
        for line, seg in zip(lines, multi):
            if line["dashed"] != key.startswith("val_"):
                fail("%s: dashed=%s" % (key, line["dashed"]))
            if len(line["points"]) != len(seg):
                fail("%s: %d points, expected %d" % (key, len(line["points"]), len(seg)))
            for (x, y), (e, v) in zip(line["points"], seg):
                if p["xmap"] and abs(p["xmap"](e) - x) > 0.6:
                    fail("%s epoch %d: x %.2f, expected %.2f" % (key, e, x, p["xmap"](e)))
                if p["ymap"] and abs(p["ymap"](v) - y) > 0.6:
                    fail("%s epoch %d value %g: y %.2f, expected %.2f" % (key, e, v, y, p["ymap"](v)))
                n += 1
        lone = [s[0] for s in want if len(s) == 1]
        marks = p["markers"].get(key, [])
        for e, v in lone:
            if not any(p["ymap"] is None or abs(p["ymap"](v) - cy) < 0.6 for _, cy, _, _ in marks):
                fail("%s: the lone epoch %d (%g) has no marker" % (key, e, v))
            n += 1
        if key.startswith("val_") and base in data:
            strokes = {l["stroke"] for l in p["series"].get(base, []) + lines}
            if len(strokes) > 1:
                fail("%s and %s differ in colour: %s" % (base, key, strokes))
        if key not in p["legend"]:
            fail("%s: not in the legend of panel %s (%s)" % (key, p["family"], p["legend"]))
        bad = [e for e, v in vals if not math.isfinite(v)]
        if bad and not any(n_.startswith(key + ":") and str(bad[0]) in n_ for n_ in p["notes"]):
            fail("%s: no note for epochs %s (notes: %s)" % (key, bad, p["notes"]))
    print("title=%s panels=%s points=%d" % (title, ",".join(p["family"] for p in panels), n))


def check_same(a, b):
    _, _, pa = load(a)
    _, _, pb = load(b)
    if [p["family"] for p in pa] != [p["family"] for p in pb]:
        fail("panels differ: %s vs %s" % ([p["family"] for p in pa], [p["family"] for p in pb]))
    for p, q in zip(pa, pb):
        if sorted(p["series"]) != sorted(q["series"]):
            fail("%s: series differ" % p["family"])
        for k in p["series"]:
            for s, t in zip(p["series"][k], q["series"][k]):
                for (x0, y0), (x1, y1) in zip(s["points"], t["points"]):
                    if abs(x0 - x1) > 0.02 or abs(y0 - y1) > 0.02:
                        fail("%s: (%.2f, %.2f) vs (%.2f, %.2f)" % (k, x0, y0, x1, y1))
    print("same")


def read_png(path):
    b = open(path, "rb").read()
    if b[:8] != b"\x89PNG\r\n\x1a\n":
        fail("%s is no PNG" % path)
    pos, idat = 8, b""
    while pos < len(b):
        n, typ = struct.unpack(">I4s", b[pos:pos + 8])
        body = b[pos + 8:pos + 8 + n]
        if typ == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif typ == b"IDAT":
            idat += body
        pos += 12 + n
    if depth != 8 or ctype not in (2, 6) or interlace:
        fail("PNG %s: depth %d colour type %d interlace %d not handled" % (path, depth, ctype, interlace))
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(idat), w * bpp
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(h):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            up, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + up) & 255
            elif f == 3:
                line[x] = (line[x] + (a + up) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(up - c), abs(a - c), abs(a + up - 2 * c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else up if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, lambda x, y: tuple(rows[y][x * bpp:x * bpp + 3])


def hexrgb(s):
    return tuple(int(s[i:i + 2], 16) for i in (1, 3, 5))


def near(c, want, tol=48):
    return all(abs(a - b) <= tol for a, b in zip(c, want))


def check_png(svg, png):
    root, _, panels = load(svg)
    w, h, px = read_png(png)
    sw, sh = int(float(root.get("width"))), int(float(root.get("height")))
    if (w, h) != (sw, sh):
        fail("screenshot is %dx%d, the SVG %dx%d" % (w, h, sw, sh))
    nonwhite = sum(1 for y in range(0, h, 2) for x in range(0, w, 2) if not near(px(x, y), (255, 255, 255), 10))
    if nonwhite < w * h / 4 * 0.01:
        fail("the screenshot is blank (%d non-white pixels of %d sampled)" % (nonwhite, w * h // 4))

    def found(cx, cy, want, r=2):
        return any(near(px(x, y), want) for y in range(int(cy) - r, int(cy) + r + 1)
                   for x in range(int(cx) - r, int(cx) + r + 1) if 0 <= x < w and 0 <= y < h)

    checked = 0
    for p in panels:
        for key, marks in p["markers"].items():
            for cx, cy, stroke, fill in marks:
                want = hexrgb(stroke)
                if not found(cx, cy, want):
                    fail("%s: no %s pixel near the marker at (%.0f, %.0f): %s" % (key, stroke, cx, cy, px(int(cx), int(cy))))
                checked += 1
        for key, lines in p["series"].items():
            for line in lines:
                if line["dashed"]:
                    continue
                (x0, y0), (x1, y1) = line["points"][0], line["points"][1]
                if not found((x0 + x1) / 2, (y0 + y1) / 2, hexrgb(line["stroke"])):
                    fail("%s: no line between its first two points" % key)
                checked += 1
        # the colour is where the curves are, not everywhere: a blank or
        # wrongly filled panel fails
        for key, lines in p["series"].items():
            pts = [q for line in lines for q in line["points"]]
            x0, x1 = min(x for x, _ in pts), max(x for x, _ in pts)
            y0, y1 = min(y for _, y in pts), max(y for _, y in pts)
            want = hexrgb(lines[0]["stroke"])
            area = [(x, y) for x in range(int(x0), int(x1) + 1, 3) for y in range(int(y0) - 20, int(y1) + 21, 3)
                    if 0 <= x < w and 0 <= y < h]
            share = sum(1 for x, y in area if near(px(x, y), want)) / max(1, len(area))
            if share > 0.3:
                fail("%s: %.0f%% of its area is its colour" % (key, 100 * share))
    print("png ok: %dx%d, %d curve points and segments found in the right colour" % (w, h, checked))


def info(svg):
    _, title, panels = load(svg)
    print("title=%s" % title)
    for p in panels:
        for key, lines in p["series"].items():
            print("panel=%s key=%s segments=%d points=%d dashed=%s" % (
                p["family"], key, len(lines), sum(len(l["points"]) for l in lines), lines[0]["dashed"]))
        for key, m in p["markers"].items():
            print("panel=%s key=%s markers=%d" % (p["family"], key, len(m)))
        print("panel=%s xticks=%s" % (p["family"], "ok" if p["xmap"] else "one"))
        for n in p["notes"]:
            print("panel=%s note=%s" % (p["family"], n))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "points":
        check_points(sys.argv[2], sys.argv[3])
    elif cmd == "same":
        check_same(sys.argv[2], sys.argv[3])
    elif cmd == "png":
        check_png(sys.argv[2], sys.argv[3])
    elif cmd == "info":
        info(sys.argv[2])
    else:
        fail("unknown command " + cmd)
