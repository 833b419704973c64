/*
 * bn.c — the CPU BatchNormalization kernels (training forward: statistics
 * and normalisation; backward: the two sums and dx) on MobileNetV2's shapes
 * at 96x96 and batch 32, with the bytes each must move at least (forward:
 * x read twice for the two-pass statistics, once more to normalise, y
 * written; backward: x and dy read for the sums and again for dx, dx
 * written). The fastest of R runs is kept.
 *
 * build (after cmake --build build):
 *   cc -O2 -fopenmp -Iinclude -Isrc bench/bn.c build/libflynn.a \
 *      $(pkg-config --cflags --libs openblas libzip json-c zlib) -lm -o build/bench_bn
 * usage: OMP_NUM_THREADS=1 build/bench_bn [reps]
 */
#define _GNU_SOURCE
#include "backend/backend.h"
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
    double tf = 0, tb = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        fl_bn_desc d = {shapes[s].m, shapes[s].c, 1e-3f, 0.99f};
        size_t n = (size_t)d.m * d.c;
        float *x = buf(n, 1), *y = buf(n, 2), *dy = buf(n, 3), *dx = buf(n, 4);
        float *g = buf((size_t)d.c, 5), *b = buf((size_t)d.c, 6), *mean = buf((size_t)d.c, 7), *inv = buf((size_t)d.c, 8);
        float *mm = buf((size_t)d.c, 9), *mv = buf((size_t)d.c, 10), *dg = buf((size_t)d.c, 11), *db = buf((size_t)d.c, 12);
        double bf = 1e30, bb = 1e30;
        for (int r = 0; r < reps; r++) {
            double t0 = now();
            be->bn_fwd_train(&d, x, g, b, y, mean, inv, mm, mv);
            double t1 = now();
            be->bn_bwd(&d, x, g, mean, inv, dy, dx, 0.0f, dg, db);
            double t2 = now();
            if (t1 - t0 < bf) bf = t1 - t0;
            if (t2 - t1 < bb) bb = t2 - t1;
        }
        double bytes = (double)n * 4;
        printf("m %7lld c %5d  fwd %7.3f ms (%5.1f GB/s)  bwd %7.3f ms (%5.1f GB/s)\n", (long long)d.m, d.c, 1e3 * bf,
               4 * bytes / bf * 1e-9, 1e3 * bb, 5 * bytes / bb * 1e-9);
        tf += bf;
        tb += bb;
        free(x); free(y); free(dy); free(dx); free(g); free(b); free(mean); free(inv); free(mm); free(mv); free(dg); free(db);
    }
    printf("total: fwd %.3f ms, bwd %.3f ms\n", 1e3 * tf, 1e3 * tb);
    return 0;
}
