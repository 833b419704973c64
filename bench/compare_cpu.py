#!/usr/bin/python3
"""compare_cpu.py — flynn against PyTorch on the CPU, side by side, in one run.

For each model (mnist_cnn, mlp) and batch size it runs, alternating and
repeated, the same measurement in both:
  * flynn:   `flynn bench --devices cpu --mode both --json -` (one epoch of
             training after a warm-up, then one predict pass, over the same
             samples); the script reads its JSON, never its human output;
  * PyTorch: bench/torch_train.py (training, then --predict), same model,
             data (the first N Fashion-MNIST images), Adam (Keras defaults),
             batch size and thread count (OMP_NUM_THREADS and
             torch.set_num_threads alike).
It keeps the fastest of the repeats of each point (and shows the median), and
prints the flynn/PyTorch throughput ratio per batch size for training and for
predict, with the GFLOP/s each reaches against the machine's sgemm ceiling
(measured by bench/sgemm_peak.c, built and run first), and which BLAS (and
OpenBLAS kernels) each side loaded.

usage: bench/compare_cpu.py [--flynn build/flynn] [--models mnist_cnn,mlp]
         [--batch-sizes 32,64,128,256,512,1024] [--samples 20000] [--threads T]
         [--repeat 3] [--data DIR] [--json FILE] [--no-sgemm] [--openblas-core env|auto|NAME]
Run it with Debian's python3 (/usr/bin/python3), which has python3-torch
(scripts/setup.sh --bench installs it). The machine should be otherwise idle;
alternating the two sides spreads whatever noise remains over both.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--flynn", default=os.path.join(ROOT, "build", "flynn"), help="the flynn command (default build/flynn)")
    p.add_argument("--models", default="mnist_cnn,mlp")
    p.add_argument("--batch-sizes", default="32,64,128,256,512,1024")
    p.add_argument("--samples", type=int, default=20000)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--repeat", type=int, default=3, help="runs per point and side; the fastest counts")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--json", help="write every measurement to this file")
    p.add_argument("--no-sgemm", action="store_true", help="skip measuring the sgemm ceiling")
    p.add_argument("--openblas-core", default="env",
                   help="OpenBLAS kernels for both sides: env (as the environment says, default), auto (unset "
                        "OPENBLAS_CORETYPE: OpenBLAS picks by the CPU) or a core name such as SkylakeX")
    return p.parse_args()


def run(cmd, env, what):
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("compare_cpu: %s failed (exit %d): %s\n%s" % (what, r.returncode, " ".join(cmd), r.stderr[-2000:]))
    return r.stdout


def last_json(text):
    """The JSON document at the end of text (torch_train prints one line)."""
    start = text.find("{")
    return json.loads(text[start:])


def cpu_info():
    model, flags = "unknown", ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and model == "unknown":
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = line.split(":", 1)[1]
    except OSError:
        pass
    return model, os.cpu_count(), " avx512f " in " " + flags + " "


def sgemm_ceiling(env, threads, has_avx512):
    """Runs bench/sgemm_peak.c as the environment configures OpenBLAS and, on
    an AVX-512 CPU whose OpenBLAS runs lesser kernels (OPENBLAS_CORETYPE, or
    an OpenBLAS older than the CPU), once more with its AVX-512 kernels."""
    tmp = tempfile.mkdtemp(prefix="flynn-sgemm-")
    exe = os.path.join(tmp, "sgemm_peak")
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "openblas"], stdout=subprocess.PIPE, text=True).stdout.split()
    run(["cc", "-O2", os.path.join(HERE, "sgemm_peak.c"), "-o", exe] + flags, env, "building sgemm_peak")
    runs = [last_json(run([exe, "--threads", str(threads), "--json"], env, "sgemm_peak"))]
    runs[0]["environment"] = env.get("OPENBLAS_CORETYPE", "")
    avx512_cores = ("skylakex", "cooperlake", "sapphirerapids")
    if has_avx512 and runs[0]["blas_core"].lower() not in avx512_cores:
        e = dict(env, OPENBLAS_CORETYPE="SkylakeX")
        runs.append(last_json(run([exe, "--threads", str(threads), "--json"], e, "sgemm_peak (SkylakeX kernels)")))
    return runs


def median(xs):
    return statistics.median(xs) if xs else 0.0


def main():
    a = parse_args()
    models = a.models.split(",")
    batches = [int(b) for b in a.batch_sizes.split(",")]
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    if a.openblas_core == "auto":
        env.pop("OPENBLAS_CORETYPE", None)
    elif a.openblas_core != "env":
        env["OPENBLAS_CORETYPE"] = a.openblas_core
    if not os.path.exists(a.flynn):
        sys.exit("compare_cpu: %s not found (build flynn first, or give --flynn PATH)" % a.flynn)
    model_name, ncpu, has_avx512 = cpu_info()
    print("machine: %s, %d CPUs; %d threads for both sides; %d samples; fastest of %d runs per point"
          % (model_name, ncpu, a.threads, a.samples, a.repeat))
    if env.get("OPENBLAS_CORETYPE"):
        print("note: OPENBLAS_CORETYPE=%s for both sides (OpenBLAS uses those kernels, not the CPU's best)"
              % env["OPENBLAS_CORETYPE"])

    ceiling = None
    sg = []
    if not a.no_sgemm:
        sg = sgemm_ceiling(env, a.threads, has_avx512)
        print("\nsgemm ceiling (bench/sgemm_peak.c, OpenBLAS, GFLOP/s):")
        for r in sg:
            sq = {x["threads"]: x["gflops"] for x in r["results"] if x["shape"].startswith("square")}
            conv = [x for x in r["results"] if x["threads"] == max(sq) and "batch 128" in x["shape"]]
            chunk = [x for x in r["results"] if x["threads"] == 1 and "chunk" in x["shape"]]
            print("  core %-10s 2048^3: %6.1f on 1 thread, %6.1f on %d; conv2 im2col GEMMs at batch 128: %s; "
                  "4-sample chunks on 1 thread: %s"
                  % (r["blas_core"], sq.get(1, 0), sq.get(max(sq), 0), max(sq),
                     "/".join("%.0f" % x["gflops"] for x in conv), "/".join("%.0f" % x["gflops"] for x in chunk)))
        ceiling = max(max(x["gflops"] for x in r["results"] if x["shape"].startswith("square")) for r in sg)
        print("  ceiling used below: %.1f GFLOP/s (the best 2048^3 result)" % ceiling)

    results = {}
    libs = {}
    for model in models:
        for b in batches:
            for rep in range(a.repeat):
                # alternate which side goes first
                order = ["flynn", "torch"] if rep % 2 == 0 else ["torch", "flynn"]
                for side in order:
                    if side == "flynn":
                        out = run([a.flynn, "bench", "--model", model, "--data", "fashion-mnist:" + a.data,
                                   "--samples", str(a.samples), "--batch-sizes", str(b), "--devices", "cpu",
                                   "--mode", "both", "--threads", str(a.threads), "--json", "-"], env, "flynn bench")
                        j = json.loads(out)
                        libs["flynn"] = "%s (core %s)" % (j["blas"]["library"], j["blas"]["core"])
                        for r in j["results"]:
                            results.setdefault((model, b, "flynn", r["mode"]), []).append(r["samples_per_s"])
                        results[(model, "flops")] = j["flops_per_sample"]
                    else:
                        for mode in ("train", "predict"):
                            cmd = ["/usr/bin/python3", os.path.join(HERE, "torch_train.py"), "--model", model,
                                   "--data", a.data, "--samples", str(a.samples), "--batch-size", str(b),
                                   "--threads", str(a.threads)] + (["--predict"] if mode == "predict" else [])
                            j = last_json(run(cmd, env, "torch_train.py"))
                            libs["torch"] = "%s (core %s)%s" % (j["blas"], j.get("blas_core", "?"),
                                                                 "; oneDNN %s for convolutions" % j["onednn"]
                                                                 if j.get("onednn") else "")
                            results.setdefault((model, b, "torch", mode), []).append(j["samples_per_s"])
                sys.stdout.write(".")
                sys.stdout.flush()
    print()
    print("\nflynn loads:   " + libs.get("flynn", "?"))
    print("PyTorch loads: " + libs.get("torch", "?"))

    summary = []
    for model in models:
        fl = results[(model, "flops")]
        print("\n%s (%.2f MFLOP per sample training, %.2f predict): samples/s, fastest of %d (median)"
              % (model, fl["train"] / 1e6, fl["predict"] / 1e6, a.repeat))
        hdr = "%6s | %9s %9s %7s %8s | %9s %9s %7s %8s | %s" % (
            "batch", "flynn", "pytorch", "ratio", "(median)", "flynn", "pytorch", "ratio", "(median)",
            "training GFLOP/s flynn / pytorch" + (" (% of ceiling)" if ceiling else ""))
        print("%6s | %-45s | %-45s |" % ("", "training", "predict"))
        print(hdr)
        for b in batches:
            row = {"model": model, "batch_size": b}
            cells = []
            for mode in ("train", "predict"):
                f, t = results[(model, b, "flynn", mode)], results[(model, b, "torch", mode)]
                ratio, mratio = max(f) / max(t), median(f) / median(t)
                row[mode] = {"flynn": max(f), "pytorch": max(t), "ratio": ratio, "median_ratio": mratio,
                             "flynn_runs": f, "pytorch_runs": t}
                cells.append("%9.0f %9.0f %6.2fx %7.2fx" % (max(f), max(t), ratio, mratio))
            gf = row["train"]["flynn"] * fl["train"] / 1e9
            gt = row["train"]["pytorch"] * fl["train"] / 1e9
            row["train"]["flynn_gflops"], row["train"]["pytorch_gflops"] = gf, gt
            g = "%6.1f / %6.1f" % (gf, gt)
            if ceiling:
                g += " (%3.0f%% / %3.0f%%)" % (100 * gf / ceiling, 100 * gt / ceiling)
            print("%6d | %s | %s | %s" % (b, cells[0], cells[1], g))
            summary.append(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": model_name, "cpus": ncpu, "threads": a.threads, "samples": a.samples,
                       "repeat": a.repeat, "sgemm": sg, "ceiling_gflops": ceiling, "libraries": libs,
                       "points": summary}, f, indent=1)
        print("\nwritten: " + a.json)


if __name__ == "__main__":
    main()
