/*
 * conv_dilated_grouped.c — the CPU cost of a dilated and of a grouped Conv2D
 * against the plain Conv2D of the same FLOPs, forward and backward, side by
 * side in one run: batch 32, 28x28, 3x3, "same", bias, no activation:
 *     plain    64 -> 64
 *     dilated  64 -> 64, dilation_rate 2 (the im2col + GEMM path, the
 *              dilation in the gather)
 *     grouped  128 -> 128, groups 4 (per group: 32 -> 32; one im2col and
 *              GEMM per group; the same FLOPs as the plain 64 -> 64)
 *     depthwise-form 64 -> 64, groups 64 (FLOPs / 64: the depthwise kernels)
 * Each is run several times and the fastest run is kept; GFLOP/s counts
 * 2*kh*kw*(c/groups) multiply-adds per output forward, twice that backward
 * (data and filter gradients).
 *
 * build (after cmake --build build):
 *   cc -O2 -fopenmp -Iinclude -Isrc bench/conv_dilated_grouped.c build/libflynn.a \
 *      $(pkg-config --cflags --libs openblas libzip json-c zlib) -lm -o build/bench_conv_dg
 * usage: build/bench_conv_dg [batch] [reps]
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

/* groups == c: the depthwise kernels, as fl_graph_conv2d_dilated routes it */
static void run(const char *what, fl_conv_desc d, int reps) {
    const fl_backend *be = fl_backend_cpu();
    const int G = d.groups > 1 ? d.groups : 1, depthwise = G > 1 && G == d.c;
    size_t nx = (size_t)d.n * d.h * d.w * d.c, ny = (size_t)d.n * d.oh * d.ow * d.oc;
    size_t nw = (size_t)d.kh * d.kw * (d.c / G) * d.oc;
    float *x = buf(nx, 1), *w = buf(nw, 2), *b = buf((size_t)d.oc, 3), *y = buf(ny, 4), *dy = buf(ny, 5);
    float *dx = buf(nx, 6), *dw = buf(nw, 7), *db = buf((size_t)d.oc, 8), *dy0 = buf(ny, 5);
    if (depthwise) d.groups = 1;
    size_t bytes = depthwise ? 0 : be->conv_workspace(&d, 1);
    void *ws = bytes ? malloc(bytes) : NULL;
    double fwd = 1e30, bwd = 1e30;
    for (int i = 0; i < reps; i++) {
        double t0 = now();
        if (depthwise) be->depthwise_fwd(&d, x, w, b, y);
        else be->conv2d_fwd(&d, x, w, b, y, ws);
        double t1 = now();
        memcpy(dy, dy0, ny * sizeof(float));
        double t2 = now();
        if (depthwise) be->depthwise_bwd(&d, x, w, y, dy, dx, 0.0f, dw, db);
        else be->conv2d_bwd(&d, x, w, y, dy, dx, 0.0f, dw, db, ws);
        double t3 = now();
        if (t1 - t0 < fwd) fwd = t1 - t0;
        if (t3 - t2 < bwd) bwd = t3 - t2;
    }
    const double flops = 2.0 * (double)ny * d.kh * d.kw * (d.c / G);
    printf("%-40s fwd %8.2f ms (%6.1f GFLOP/s)   bwd %8.2f ms (%6.1f GFLOP/s)   fwd+bwd %8.2f ms\n", what,
           1e3 * fwd, flops / fwd * 1e-9, 1e3 * bwd, 2 * flops / bwd * 1e-9, 1e3 * (fwd + bwd));
    free(x); free(w); free(b); free(y); free(dy); free(dx); free(dw); free(db); free(dy0); free(ws);
}

int main(int argc, char **argv) {
    int64_t n = argc > 1 ? atoll(argv[1]) : 32;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    const int H = 28, W = 28;
    printf("batch %lld, %dx%d, 3x3 \"same\", %d threads, %d runs each (fastest kept)\n", (long long)n, H, W,
           fl_get_num_threads(), reps);
    fl_conv_desc d = {.n = n, .h = H, .w = W, .c = 64, .oh = H, .ow = W, .oc = 64, .kh = 3, .kw = 3, .sh = 1,
                      .sw = 1, .pt = 1, .pl = 1, .act = FL_ACT_LINEAR, .has_bias = 1};
    run("Conv2D 3x3 64->64 (plain)", d, reps);
    fl_conv_desc dil = d;
    dil.dil_h = dil.dil_w = 2; dil.pt = dil.pl = 2; /* "same" for the extent 5 */
    run("Conv2D 3x3 64->64 dilation 2", dil, reps);
    fl_conv_desc grp = d;
    grp.c = grp.oc = 128; grp.groups = 4;
    run("Conv2D 3x3 128->128 groups 4 (same FLOPs)", grp, reps);
    fl_conv_desc dw = d;
    dw.groups = 64;
    run("Conv2D 3x3 64->64 groups 64 (depthwise)", dw, reps);
    return 0;
}
