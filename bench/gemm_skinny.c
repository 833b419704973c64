/*
 * gemm_skinny.c — flynn's AVX2 GEMM (src/backend/cpu/cpu_avx2_gemm.c)
 * against OpenBLAS's cblas_sgemm on the shapes flynn's layers make, one
 * thread and all threads: the Dense layers and attention blocks of
 * transformer_text, the LSTM's gate GEMMs, the MLP and mnist_cnn's Dense,
 * and wide ones that should stay with OpenBLAS. Prints GFLOP/s of each, the
 * ratio, what fl_cpu_avx2_gemm_wins picks, and checks that the two agree.
 * The fastest of R runs (each enough calls for ~20 ms) is kept, the two
 * sides alternating.
 *
 * build (after cmake --build build):
 *   cc -O2 -fopenmp -Iinclude -Isrc bench/gemm_skinny.c build/libflynn.a \
 *      $(pkg-config --cflags --libs openblas libzip json-c zlib) -lm -o build/bench_gemm_skinny
 * usage: build/bench_gemm_skinny [threads] [reps]
 */
#define _GNU_SOURCE
#include "backend/cpu/cpu_simd.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

typedef struct { const char *what; int ta, tb; int64_t m, n, k; } shape;

static double run(int own, const shape *s, const float *A, const float *B, float *C, int threads, int calls) {
    int64_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    double t0 = now();
    for (int i = 0; i < calls; i++) {
        if (own) fl_avx2_gemm(s->ta, s->tb, s->m, s->n, s->k, A, lda, B, ldb, 0.0f, C, s->n, NULL, 0, threads);
        else
            cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans,
                        (int)s->m, (int)s->n, (int)s->k, 1.0f, A, (int)lda, B, (int)ldb, 0.0f, C, (int)s->n);
    }
    return (now() - t0) / calls;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1, reps = argc > 2 ? atoi(argv[2]) : 5;
    if (!fl_cpu_avx2_kernels()) { printf("this CPU does not use the AVX2 GEMM (AVX-512 or no AVX2)\n"); }
    openblas_set_num_threads(threads);
    omp_set_num_threads(threads);
    static const shape shapes[] = {
        {"transformer Dense 32->32 fwd (B128 x T128)", 0, 0, 16384, 32, 32},
        {"transformer Dense 32->64 fwd", 0, 0, 16384, 64, 32},
        {"transformer Dense 64->32 fwd", 0, 0, 16384, 32, 64},
        {"transformer Dense dw x^T dy 32x32", 1, 0, 32, 32, 16384},
        {"transformer Dense dw x^T dy 64x32", 1, 0, 64, 32, 16384},
        {"transformer Dense dx dy W^T 32<-64", 0, 1, 16384, 32, 64},
        {"transformer Dense dx dy W^T 64<-32", 0, 1, 16384, 64, 32},
        {"attention Q K^T 128x128x16", 0, 1, 128, 128, 16},
        {"attention P V 128x16x128", 0, 0, 128, 16, 128},
        {"attention dV P^T dO 128x16x128", 1, 0, 128, 16, 128},
        {"attention dP dO V^T 128x128x16", 0, 1, 128, 128, 16},
        {"conv1d im2col 96->32 fwd", 0, 0, 16384, 32, 96},
        {"LSTM x W 32->256 (B128)", 0, 0, 128, 256, 32},
        {"LSTM h U 64->256 (B128)", 0, 0, 128, 256, 64},
        {"LSTM dh dG U^T 256->64 (B128)", 0, 1, 128, 64, 256},
        {"MLP 784->512 fwd (B128)", 0, 0, 128, 512, 784},
        {"MLP 512->10 fwd (B128)", 0, 0, 128, 10, 512},
        {"MLP dw 512x10 (B128)", 1, 0, 512, 10, 128},
        {"MLP dx 512<-10 (B128)", 0, 1, 128, 512, 10},
        {"MLP dx 784<-512 (B32)", 0, 1, 32, 784, 512},
        {"MLP dw 784x512 (B32)", 1, 0, 784, 512, 32},
        {"mnist_cnn Dense 1600->128 fwd (B128)", 0, 0, 128, 128, 1600},
        {"mnist_cnn Dense dw 1600x128 (B128)", 1, 0, 1600, 128, 128},
        {"wide 512x512x512", 0, 0, 512, 512, 512},
        {"conv im2col 3x3x64->64 (32x32, B32)", 0, 0, 32768, 64, 576},
        {"conv dW col^T dy 576x64 (32x32, B32)", 1, 0, 576, 64, 32768},
        {"conv dcol dy W^T 576<-64 (32x32, B32)", 0, 1, 32768, 576, 64},
        {"conv 3x3x16->16 fwd (ResNet-20 stage 1)", 0, 0, 32768, 16, 144},
        {"conv dW 144x16 (ResNet-20 stage 1)", 1, 0, 144, 16, 32768},
        {"conv dcol 144<-16 (ResNet-20 stage 1)", 0, 1, 32768, 144, 16},
        {"1x1 conv 32->96 (MobileNetV2 48x48, B32)", 0, 0, 73728, 96, 32},
        {"1x1 conv 144->24 (MobileNetV2 24x24, B32)", 0, 0, 18432, 24, 144},
        {"1x1 conv 960->160 (MobileNetV2 3x3, B32)", 0, 0, 288, 160, 960},
        {"1x1 conv dW 32x96 (MobileNetV2 48x48)", 1, 0, 32, 96, 73728},
        /* a conv's chunk (~512 rows) as the GEMM path runs it, one per thread */
        {"conv1d chunk 5x128->128 (textcnn)", 0, 0, 396, 128, 640},
        {"conv1d chunk 5x128->128 dx (textcnn)", 0, 1, 396, 640, 128},
        {"conv1d chunk 5x128->128 dW (textcnn)", 1, 0, 640, 128, 396},
        {"conv1d chunk 8x64->128 (resnet1d)", 0, 0, 512, 128, 512},
        {"conv1d chunk 3x128->128 (resnet1d)", 0, 0, 512, 128, 384},
        {"conv1d chunk 5x64->64 (resnet1d)", 0, 0, 512, 64, 320},
        {"conv chunk 3x3x32->64 (cifar 16x16)", 0, 0, 512, 64, 288},
        {"conv chunk 3x3x64->128 (VGG 16x16)", 0, 0, 512, 128, 576},
        {"conv chunk 3x3x128->256 (VGG 8x8)", 0, 0, 512, 256, 1152},
        {"conv chunk 3x3x256->256 (VGG 8x8)", 0, 0, 512, 256, 2304},
    };
    printf("%-42s %4s %9s %9s %6s %5s %9s\n", "shape (threads)", "thr", "own GF/s", "blas GF/s", "ratio", "pick",
           "max diff");
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape *s = &shapes[si];
        float *A = buf((size_t)s->m * s->k, 1), *B = buf((size_t)s->k * s->n, 2);
        float *C0 = malloc((size_t)s->m * s->n * sizeof(float)), *C1 = malloc((size_t)s->m * s->n * sizeof(float));
        double flop = 2.0 * s->m * s->n * s->k;
        int calls = (int)(4e7 / flop) + 1;
        double best[2] = {1e30, 1e30};
        for (int r = 0; r < reps; r++)
            for (int own = 0; own < 2; own++) {
                double t = run(own, s, A, B, own ? C1 : C0, threads, calls);
                if (t < best[own]) best[own] = t;
            }
        double md = 0, mx = 0;
        for (int64_t i = 0; i < s->m * s->n; i++) {
            md = fmax(md, fabs(C0[i] - C1[i]));
            mx = fmax(mx, fabs(C0[i]));
        }
        printf("%-42s %4d %9.1f %9.1f %6.2f %5s %9.2g%s\n", s->what, threads, flop / best[1] / 1e9,
               flop / best[0] / 1e9, best[0] / best[1], fl_cpu_avx2_gemm_wins(s->ta, s->tb, s->m, s->n, s->k) ? "own" : "blas",
               md / (mx > 0 ? mx : 1), md / (mx > 0 ? mx : 1) > 1e-5 ? "  DIFFERS" : "");
        free(A); free(B); free(C0); free(C1);
    }
    return 0;
}
