/*
 * bn.c — the CPU BatchNormalization kernels (training forward: statistics
 * and normalisation; backward: the two sums and dx) on MobileNetV2's shapes
 * at 96x96 and batch 32, alone and with the ReLU6 after them fused (as
 * MobileNetV2 runs them: bn_fwd_train_act, bn_bwd_act), with the bytes each
 * must move at least (forward: x read for the statistics and again to
 * normalise, y written; backward: x and dy read for the sums and again for
 * dx, dx written). The fastest of R runs is kept.
 *
 * build (after cmake --build build):
 *   cc -O2 -fopenmp -Iinclude -Isrc bench/bn.c build/libflynn.a \
 *      $(pkg-config --cflags --libs openblas libzip json-c zlib) -lm -o build/bench_bn
 * usage: OMP_NUM_THREADS=1 build/bench_bn [reps]
 */
#define _GNU_SOURCE
#include "backend/backend.h"
#include "ops/math.h" /* FL_ACT_RELU6 */
#include "flynn/flynn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 10;
    const fl_backend *be = fl_backend_cpu();
    static const struct { int64_t m; int c; } shapes[] = {
        {32 * 48 * 48, 32}, {32 * 48 * 48, 96}, {32 * 24 * 24, 144}, {32 * 12 * 12, 192},
        {32 * 6 * 6, 384}, {32 * 3 * 3, 960}, {32 * 3 * 3, 1280}};
    double tf[2] = {0, 0}, tb[2] = {0, 0};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        fl_bn_desc d = {shapes[s].m, shapes[s].c, 1e-3f, 0.99f};
        size_t n = (size_t)d.m * d.c;
        float *x = buf(n, 1), *y = buf(n, 2), *dy = buf(n, 3), *dx = buf(n, 4);
        float *g = buf((size_t)d.c, 5), *b = buf((size_t)d.c, 6), *mean = buf((size_t)d.c, 7), *inv = buf((size_t)d.c, 8);
        float *mm = buf((size_t)d.c, 9), *mv = buf((size_t)d.c, 10), *dg = buf((size_t)d.c, 11), *db = buf((size_t)d.c, 12);
        float *coef = buf(2 * (size_t)d.c, 13);
        for (int act = 0; act < 2; act++) {
            double bf = 1e30, bb = 1e30;
            for (int r = 0; r < reps; r++) {
                double t0 = now();
                if (act) be->bn_fwd_train_act(&d, FL_ACT_RELU6, x, g, b, y, coef, mean, inv, mm, mv);
                else be->bn_fwd_train(&d, x, g, b, y, mean, inv, mm, mv);
                double t1 = now();
                if (act) be->bn_bwd_act(&d, FL_ACT_RELU6, coef, x, g, mean, inv, dy, dx, 0.0f, dg, db);
                else be->bn_bwd(&d, x, g, mean, inv, dy, dx, 0.0f, dg, db);
                double t2 = now();
                if (t1 - t0 < bf) bf = t1 - t0;
                if (t2 - t1 < bb) bb = t2 - t1;
            }
            double bytes = (double)n * 4;
            printf("m %7lld c %5d %s fwd %7.3f ms (%5.1f GB/s)  bwd %7.3f ms (%5.1f GB/s)\n", (long long)d.m, d.c,
                   act ? "relu6" : "     ", 1e3 * bf, 3 * bytes / bf * 1e-9, 1e3 * bb, 5 * bytes / bb * 1e-9);
            tf[act] += bf;
            tb[act] += bb;
        }
        free(x); free(y); free(dy); free(dx); free(g); free(b); free(mean); free(inv); free(mm); free(mv); free(dg); free(db);
        free(coef);
    }
    printf("total: fwd %.3f ms, bwd %.3f ms; with ReLU6: fwd %.3f ms, bwd %.3f ms\n", 1e3 * tf[0], 1e3 * tb[0],
           1e3 * tf[1], 1e3 * tb[1]);
    return 0;
}
