/*
 * conv3x3.c — 3x3 stride-1 Conv2D on the CPU, Winograd F(2x2, 3x3)
 * (cpu_winograd.c) against the direct kernels, side by side in one run, on
 * the shapes of mnist_cnn's conv2 and of ResNet-20's three stages: forward,
 * and backward (data and filter gradients). The two alternate and each
 * keeps its fastest run; GFLOP/s counts the direct convolution's
 * 2*9*c multiply-adds per output (so Winograd's figure is "effective").
 *
 * build (after cmake --build build):
 *   cc -O2 -fopenmp -Iinclude -Isrc bench/conv3x3.c build/libflynn.a \
 *      $(pkg-config --cflags --libs openblas libzip json-c zlib) -lm -o build/bench_conv3x3
 * usage: build/bench_conv3x3 [batch] [reps]
 */
#define _GNU_SOURCE
#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h" /* fl_wino_force */
#include "ops/math.h"
#include "flynn/flynn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

typedef struct { double fwd, bwd; } times;

static times run_once(fl_conv_desc d, int reps, const float *x, const float *w, const float *b, float *y, float *dy,
                      const float *dy0, float *dx, float *dw, float *db, void *ws) {
    const fl_backend *be = fl_backend_cpu();
    size_t ny = (size_t)d.n * d.oh * d.ow * d.oc;
    times t = {1e30, 1e30};
    for (int i = 0; i < reps; i++) {
        double t0 = now();
        be->conv2d_fwd(&d, x, w, b, y, ws);
        double t1 = now();
        memcpy(dy, dy0, ny * sizeof(float));
        double t2 = now();
        be->conv2d_bwd(&d, x, w, y, dy, dx, 0.0f, dw, db, ws);
        double t3 = now();
        if (t1 - t0 < t.fwd) t.fwd = t1 - t0;
        if (t3 - t2 < t.bwd) t.bwd = t3 - t2;
    }
    return t;
}

static void run(const char *what, fl_conv_desc d, int reps) {
    const fl_backend *be = fl_backend_cpu();
    size_t nx = (size_t)d.n * d.h * d.w * d.c, ny = (size_t)d.n * d.oh * d.ow * d.oc;
    size_t nw = (size_t)9 * d.c * d.oc;
    float *x = buf(nx, 1), *w = buf(nw, 2), *b = buf((size_t)d.oc, 3), *y = buf(ny, 4), *dy = buf(ny, 5);
    float *dx = buf(nx, 6), *dw = buf(nw, 7), *db = buf((size_t)d.oc, 8), *dy0 = buf(ny, 5);
    fl_wino_force(1);
    size_t bytes = be->conv_workspace(&d, 1);
    fl_wino_force(0);
    size_t b0 = be->conv_workspace(&d, 1);
    void *ws = malloc(bytes > b0 ? bytes : b0);
    times best[2] = {{1e30, 1e30}, {1e30, 1e30}};
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < 2; k++) {
            fl_wino_force(k);
            times t = run_once(d, reps, x, w, b, y, dy, dy0, dx, dw, db, ws);
            if (t.fwd < best[k].fwd) best[k].fwd = t.fwd;
            if (t.bwd < best[k].bwd) best[k].bwd = t.bwd;
        }
    fl_wino_force(-1);
    const double flops = 2.0 * (double)ny * 9 * d.c;
    printf("%-34s fwd %7.2f / %7.2f ms (%5.1f / %5.1f GFLOP/s, %.2fx)   bwd %7.2f / %7.2f ms (%.2fx)\n", what,
           1e3 * best[0].fwd, 1e3 * best[1].fwd, flops / best[0].fwd * 1e-9, flops / best[1].fwd * 1e-9,
           best[0].fwd / best[1].fwd, 1e3 * best[0].bwd, 1e3 * best[1].bwd, best[0].bwd / best[1].bwd);
    free(x); free(w); free(b); free(y); free(dy); free(dx); free(dw); free(db); free(dy0); free(ws);
}

static fl_conv_desc shape(int64_t n, int hw, int c, int oc, int same) {
    fl_conv_desc d = {.n = n, .h = hw, .w = hw, .c = c, .oc = oc, .kh = 3, .kw = 3, .sh = 1, .sw = 1,
                      .act = FL_ACT_RELU, .has_bias = 1};
    d.oh = d.ow = same ? hw : hw - 2;
    d.pt = d.pl = same ? 1 : 0;
    return d;
}

int main(int argc, char **argv) {
    int64_t n = argc > 1 ? atoll(argv[1]) : 128;
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    printf("batch %lld, %d threads, fastest of %d x 3 alternating runs; direct / Winograd\n", (long long)n,
           fl_get_num_threads(), reps);
    run("mnist_cnn conv2 26x26 32->64 valid", shape(n, 26, 32, 64, 0), reps);
    run("ResNet-20 stage 1 32x32 16->16", shape(n, 32, 16, 16, 1), reps);
    run("ResNet-20 stage 2 16x16 32->32", shape(n, 16, 32, 32, 1), reps);
    run("ResNet-20 stage 3 8x8 64->64", shape(n, 8, 64, 64, 1), reps);
    run("VGG-like 28x28 64->64", shape(n, 28, 64, 64, 1), reps);
    run("VGG-like 14x14 128->128", shape(n, 14, 128, 128, 1), reps);
    return 0;
}
