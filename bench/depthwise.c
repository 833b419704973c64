/*
 * depthwise.c — the CPU depthwise convolution on a MobileNetV2 shape (batch
 * 32, 56x56x144, 3x3, stride 1, "same", depth multiplier 1, bias, ReLU6
 * fused), forward and backward, side by side with what flynn's Conv2D costs
 * on the same tensors: the 1x1 Conv2D 144 -> 144 (the pointwise half of a
 * separable block: same bytes moved, 16x the FLOPs) and the full 3x3 Conv2D
 * 144 -> 144 that a depthwise one replaces (144x the FLOPs). Each is run
 * several times and the fastest run is kept; GB/s counts the bytes each
 * kernel must move at least (forward: x read, y written; backward: y, dy,
 * x read, dy written back where the activation needs it, dx written).
 *
 * build (after cmake --build build):
 *   cc -O2 -fopenmp -Iinclude -Isrc bench/depthwise.c build/libflynn.a \
 *      $(pkg-config --cflags --libs openblas libzip json-c zlib) -lm -o build/bench_depthwise
 * usage: build/bench_depthwise [batch] [reps]
 */
#define _GNU_SOURCE
#include "backend/backend.h"
#include "ops/math.h"
#include "flynn/flynn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

typedef struct result { double fwd, bwd; } result;

static result run(const char *what, int depthwise, fl_conv_desc d, int reps, double fwd_bytes, double bwd_bytes,
                  double flops) {
    const fl_backend *be = fl_backend_cpu();
    size_t nx = (size_t)d.n * d.h * d.w * d.c, ny = (size_t)d.n * d.oh * d.ow * d.oc;
    size_t nw = depthwise ? (size_t)d.kh * d.kw * d.oc : (size_t)d.kh * d.kw * d.c * d.oc;
    float *x = buf(nx, 1), *w = buf(nw, 2), *b = buf((size_t)d.oc, 3), *y = buf(ny, 4), *dy = buf(ny, 5);
    float *dx = buf(nx, 6), *dw = buf(nw, 7), *db = buf((size_t)d.oc, 8), *dy0 = buf(ny, 5);
    void *ws = NULL;
    if (!depthwise) {
        size_t bytes = be->conv_workspace(&d, 1);
        ws = bytes ? malloc(bytes) : NULL;
    }
    result r = {1e30, 1e30};
    for (int i = 0; i < reps; i++) {
        double t0 = now();
        if (depthwise) be->depthwise_fwd(&d, x, w, b, y);
        else be->conv2d_fwd(&d, x, w, b, y, ws);
        double t1 = now();
        memcpy(dy, dy0, ny * sizeof(float)); /* backward overwrites dy with dy*act'(y) */
        double t2 = now();
        if (depthwise) be->depthwise_bwd(&d, x, w, y, dy, dx, 0.0f, dw, db);
        else be->conv2d_bwd(&d, x, w, y, dy, dx, 0.0f, dw, db, ws);
        double t3 = now();
        if (t1 - t0 < r.fwd) r.fwd = t1 - t0;
        if (t3 - t2 < r.bwd) r.bwd = t3 - t2;
    }
    printf("%-34s fwd %8.2f ms (%5.1f GB/s, %6.1f GFLOP/s)   bwd %8.2f ms (%5.1f GB/s, %6.1f GFLOP/s)   "
           "fwd+bwd %8.2f ms\n",
           what, 1e3 * r.fwd, fwd_bytes / r.fwd * 1e-9, flops / r.fwd * 1e-9, 1e3 * r.bwd, bwd_bytes / r.bwd * 1e-9,
           2 * flops / r.bwd * 1e-9, 1e3 * (r.fwd + r.bwd));
    free(x); free(w); free(b); free(y); free(dy); free(dx); free(dw); free(db); free(dy0); free(ws);
    return r;
}

int main(int argc, char **argv) {
    int64_t n = argc > 1 ? atoll(argv[1]) : 32;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    const int H = 56, W = 56, C = 144;
    printf("batch %lld, %dx%dx%d, %d threads, %d runs each (fastest kept)\n", (long long)n, H, W, C,
           fl_get_num_threads(), reps);
    const double t = (double)n * H * W * C * sizeof(float); /* bytes of one tensor */
    fl_conv_desc d = {.n = n, .h = H, .w = W, .c = C, .oh = H, .ow = W, .oc = C, .kh = 3, .kw = 3, .sh = 1, .sw = 1,
                      .pt = 1, .pl = 1, .act = FL_ACT_RELU6, .has_bias = 1};
    const double px = (double)n * H * W;
    run("DepthwiseConv2D 3x3 (relu6)", 1, d, reps, 2 * t, 5 * t, px * C * 9 * 2);
    d.act = FL_ACT_LINEAR;
    run("DepthwiseConv2D 3x3 (linear)", 1, d, reps, 2 * t, 3 * t, px * C * 9 * 2);
    fl_conv_desc p = d;
    p.kh = p.kw = 1; p.pt = p.pl = 0;
    run("Conv2D 1x1 144->144 (linear)", 0, p, reps, 2 * t, 3 * t, px * C * C * 2);
    run("Conv2D 3x3 144->144 (linear)", 0, d, reps > 2 ? 2 : reps, 2 * t, 3 * t, px * C * C * 9 * 2);
    return 0;
}
