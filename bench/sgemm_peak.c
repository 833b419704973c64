/*
 * sgemm_peak.c — the machine's sgemm ceiling as OpenBLAS reaches it: GFLOP/s
 * of cblas_sgemm at 2048^3 and at the skinny shapes that mnist_cnn's second
 * convolution becomes as im2col GEMMs (batch 128: M = 128*576 output pixels,
 * K = 3*3*32 = 288, N = 64 filters; and one 4-sample chunk, M = 2304, as a
 * chunked convolution runs it on one thread), single- and multi-threaded.
 * Each shape is timed repeatedly and the fastest run is kept.
 *
 * build: cc -O2 bench/sgemm_peak.c $(pkg-config --cflags --libs openblas) -o sgemm_peak
 * usage: sgemm_peak [--threads T] [--json]
 * OpenBLAS picks its kernels from the CPU unless OPENBLAS_CORETYPE says
 * otherwise; the core it runs is printed (compare_cpu.py runs this once as
 * the environment says and once with the AVX-512 kernels where the CPU has
 * them).
 */
#define _GNU_SOURCE
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

typedef struct shape {
    const char *name;
    char ta, tb;   /* 'N' or 'T' */
    int m, n, k;
} shape;

static const shape shapes[] = {
    {"square 2048^3", 'N', 'N', 2048, 2048, 2048},
    {"conv2 forward, batch 128 (col @ w)", 'N', 'N', 128 * 576, 64, 288},
    {"conv2 weight grad, batch 128 (col^T @ dy)", 'T', 'N', 288, 64, 128 * 576},
    {"conv2 data grad, batch 128 (dy @ w^T)", 'N', 'T', 128 * 576, 288, 64},
    {"conv2 forward, 4-sample chunk", 'N', 'N', 4 * 576, 64, 288},
    {"conv2 weight grad, 4-sample chunk", 'T', 'N', 288, 64, 4 * 576},
    {"conv2 data grad, 4-sample chunk", 'N', 'T', 4 * 576, 288, 64},
};

static float *filled(size_t n, float scale) {
    float *p = malloc(n * sizeof(float));
    if (!p) { fprintf(stderr, "sgemm_peak: out of memory\n"); exit(1); }
    for (size_t i = 0; i < n; i++) p[i] = scale * (float)((i * 7919u) % 97) / 97.0f;
    return p;
}

/* Fastest of repeated runs (at least 5, and at least 0.3 s in all). */
static double gflops(const shape *s) {
    float *a = filled((size_t)s->m * s->k, 1.0f), *b = filled((size_t)s->k * s->n, 0.5f);
    float *c = filled((size_t)s->m * s->n, 0.0f);
    int lda = s->ta == 'N' ? s->k : s->m, ldb = s->tb == 'N' ? s->n : s->k;
    double best = 1e30, total = 0;
    for (int r = 0; r < 5 || total < 0.3; r++) {
        double t = now();
        cblas_sgemm(CblasRowMajor, s->ta == 'N' ? CblasNoTrans : CblasTrans, s->tb == 'N' ? CblasNoTrans : CblasTrans,
                    s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0.0f, c, s->n);
        t = now() - t;
        total += t;
        if (t < best) best = t;
        if (r > 1000) break;
    }
    free(a); free(b); free(c);
    return 2.0 * s->m * s->n * (double)s->k / best / 1e9;
}

int main(int argc, char **argv) {
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--json") == 0) json = 1;
        else { fprintf(stderr, "usage: sgemm_peak [--threads T] [--json]\n"); return 2; }
    }
    if (threads < 1) threads = 1;
    const char *core = openblas_get_corename(), *config = openblas_get_config();
    int nshape = (int)(sizeof shapes / sizeof shapes[0]);
    int tlist[2] = {1, threads}, nt = threads > 1 ? 2 : 1;
    double r[2][sizeof shapes / sizeof shapes[0]];
    for (int t = 0; t < nt; t++) {
        openblas_set_num_threads(tlist[t]);
        for (int i = 0; i < nshape; i++) r[t][i] = gflops(&shapes[i]);
    }
    if (json) {
        printf("{\"blas_core\": \"%s\", \"blas_config\": \"%s\", \"threads\": %d, \"results\": [", core, config, threads);
        for (int t = 0; t < nt; t++)
            for (int i = 0; i < nshape; i++)
                printf("%s{\"shape\": \"%s\", \"trans\": \"%c%c\", \"m\": %d, \"n\": %d, \"k\": %d, \"threads\": %d, "
                       "\"gflops\": %.1f}",
                       t || i ? ", " : "", shapes[i].name, shapes[i].ta, shapes[i].tb, shapes[i].m, shapes[i].n,
                       shapes[i].k, tlist[t], r[t][i]);
        printf("]}\n");
        return 0;
    }
    printf("OpenBLAS sgemm, core %s (%s)\n", core, config);
    printf("%-44s %-22s", "shape", "M x N x K");
    for (int t = 0; t < nt; t++) printf("  %2d thread%s", tlist[t], tlist[t] == 1 ? " " : "s");
    printf("   (GFLOP/s)\n");
    for (int i = 0; i < nshape; i++) {
        char dims[64];
        snprintf(dims, sizeof dims, "%c%c %dx%dx%d", shapes[i].ta, shapes[i].tb, shapes[i].m, shapes[i].n, shapes[i].k);
        printf("%-44s %-22s", shapes[i].name, dims);
        for (int t = 0; t < nt; t++) printf("  %10.1f", r[t][i]);
        printf("\n");
    }
    return 0;
}
