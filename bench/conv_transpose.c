/*
 * conv_transpose.c — CPU speed of Conv2DTranspose against Conv2D, side by
 * side in one run, on a decoder-sized shape: batch 16, 3x3 kernels, 64 -> 64
 * channels, stride 2, padding "same":
 *     Conv2D           32x32x64 -> 16x16x64   (the downsampling layer)
 *     Conv2DTranspose  32x32x64 -> 64x64x64   (the upsampling layer: 4x the work)
 *     Conv2D           64x64x64 -> 32x32x64   (the convolution whose data gradient
 *                                              the transpose is: the same work)
 * Each op runs forward (inference) and forward + backward (a training step's
 * share: data and weight gradients) through the graph, as a model runs it;
 * the fastest of several repetitions is kept, and GFLOP/s count 2*MACs
 * (backward: twice the forward's).
 *
 * build (after the Release build in build/):
 *   cc -O2 -fopenmp -Iinclude -Isrc bench/conv_transpose.c build/libflynn.a \
 *      $(pkg-config --cflags --libs openblas json-c libzip zlib) -lm -ldl -lpthread -o conv_transpose
 * usage: conv_transpose [repetitions]
 */
#include "core/graph.h"
#include "core/rng.h"
#include "ops/math.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

typedef struct result { double fwd_ms, step_ms, gflop; } result;

/* One layer (conv or transpose) on an H x W x 64 batch of 16. */
static result run(bool transpose, int H, int W, int reps) {
    const int64_t B = 16, C = 64, F = 64;
    fl_graph g;
    fl_graph_init(&g, fl_backend_cpu());
    fl_node *x = fl_graph_input(&g, "x", 3, (int64_t[]){H, W, C});
    fl_node *w = fl_graph_param(&g, "kernel", 4, (int64_t[]){3, 3, transpose ? F : C, transpose ? C : F}, true);
    fl_node *b = fl_graph_param(&g, "bias", 1, &F, true);
    fl_rng_uniform(w->val, fl_node_size(w), -0.1f, 0.1f, 1, 1);
    fl_node *y = transpose ? fl_graph_conv2d_transpose(&g, "deconv", x, w, b, 2, 2, FL_SAME, FL_ACT_RELU)
                           : fl_graph_conv2d(&g, "conv", x, w, b, 2, 2, FL_SAME, FL_ACT_RELU);
    x->force_grad = true; /* a layer inside a model computes its input's gradient */
    fl_graph_finalize(&g);
    if (fl_graph_reserve(&g, B) != FL_OK) { fprintf(stderr, "%s\n", fl_last_error()); exit(1); }
    fl_rng_uniform(x->val, fl_node_size(x), -1, 1, 1, 2);
    /* MACs: every input pixel (transpose) or output pixel (conv) meets 3*3*C*F weights */
    double pixels = transpose ? (double)B * H * W : (double)B * y->shape[1] * y->shape[2];
    result r = {1e30, 1e30, 2.0 * pixels * 9 * C * F * 1e-9};
    for (int i = 0; i < reps + 1; i++) { /* the first run warms up */
        double t0 = now();
        fl_graph_forward(&g, true);
        double t1 = now();
        fl_graph_clear_grads(&g);
        for (int64_t k = 0; k < fl_node_size(y); k++) y->grad[k] = 1e-3f * (float)(k % 7);
        y->grad_ready = true;
        fl_graph_backward(&g);
        double t2 = now();
        if (i == 0) continue;
        if ((t1 - t0) * 1e3 < r.fwd_ms) r.fwd_ms = (t1 - t0) * 1e3;
        if ((t2 - t0) * 1e3 < r.step_ms) r.step_ms = (t2 - t0) * 1e3;
    }
    fl_graph_free(&g);
    return r;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 10;
    printf("batch 16, 3x3, 64 -> 64 channels, stride 2, same, ReLU; fastest of %d; %d threads\n", reps,
           fl_get_num_threads());
    printf("%-48s %10s %9s %14s %9s\n", "", "forward", "GFLOP/s", "fwd+backward", "GFLOP/s");
    struct { const char *name; bool transpose; int h, w; } cases[] = {
        {"Conv2D          32x32x64 -> 16x16x64", false, 32, 32},
        {"Conv2DTranspose 32x32x64 -> 64x64x64", true, 32, 32},
        {"Conv2D          64x64x64 -> 32x32x64 (adjoint)", false, 64, 64},
    };
    for (int i = 0; i < 3; i++) {
        result r = run(cases[i].transpose, cases[i].h, cases[i].w, reps);
        printf("%-48s %8.2fms %9.1f %12.2fms %9.1f\n", cases[i].name, r.fwd_ms, r.gflop / (r.fwd_ms * 1e-3),
               r.step_ms, 3 * r.gflop / (r.step_ms * 1e-3));
    }
    return 0;
}
