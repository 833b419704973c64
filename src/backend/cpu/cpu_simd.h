/*
 * cpu_simd.h — flynn's own vector kernels: AVX-512 (cpu_avx512.c) and
 * AVX2+FMA (cpu_avx2.c), used by the CPU backend where the CPU has them and
 * FLYNN_CPU_KERNELS does not say otherwise (fl_cpu_kernels_cap). Everything
 * else (other CPUs, unusual shapes) goes through the portable code and
 * OpenBLAS.
 *
 * The core is one register-blocked micro-kernel family that computes an
 * R x cols tile of
 *     C[r, n] (+)= sum_seg sum_j A[r*as + j*aj + seg*aseg] * B[j*bj + seg*bseg + n]
 * with A read by scalar broadcast (any strides, so no packing) and B read as
 * vectors (16 floats in zmm, 8 in ymm). Dense layers (x @ W, x^T @ dy,
 * dy @ W^T), direct convolutions (forward, data gradient, weight gradient)
 * and Winograd's products are all this loop with different strides; see
 * fl_simd_tile. It is written once (cpu_microkernel.h) and built for both
 * widths, which give the same bits: the direct convolutions run on either
 * (fl_cpu_direct), through the fl_simd_run family below.
 */
#ifndef FL_CPU_SIMD_H
#define FL_CPU_SIMD_H

#include <stddef.h>
#include <stdint.h>

/* FL_AVX512 marks a function compiled for AVX-512, called only after
 * fl_cpu_simd() said yes. Where the compiler has no x86-64 AVX-512 target,
 * FL_HAVE_AVX512 is 0: each kernel file then defines its entry points as
 * stubs that do no work, so that the library links, and fl_cpu_simd()
 * returns 0, so that they are never called. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FL_HAVE_AVX512 1
#include <immintrin.h>
#define FL_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,fma")))
#else
#define FL_HAVE_AVX512 0
#endif

/* The instruction sets FLYNN_CPU_KERNELS leaves flynn's own kernels (cpu_env.c): 0 "generic" (the portable
 * loops), 1 "avx2" (no AVX-512), 2 anything else (the best the CPU has). */
int fl_cpu_kernels_cap(void);

/* 1 when the AVX-512 kernels are used (the CPU has AVX-512F/BW/DQ/VL and
 * FLYNN_CPU_KERNELS is neither "generic" nor "avx2"), else 0. */
int fl_cpu_simd(void);
/* Whether this CPU could run them at all. */
int fl_cpu_simd_available(void);
/* Tests: 1 uses the AVX-512 kernels (where available), 0 the portable code,
 * -1 goes back to the default. Not for use while another thread runs ops. */
void fl_cpu_simd_force(int on);

/* One tile job for the micro-kernel. */
typedef struct fl_simd_tile {
    const float *a;     /* A at r = 0, j = 0, seg = 0 */
    int64_t as, aj, aseg;
    const float *b;     /* B at j = 0, seg = 0, column 0 of the tile */
    int64_t bj, bseg;
    int nseg, nj;
    float *c;           /* C at row 0, column 0 of the tile */
    int64_t ldc;
    const float *bias;  /* start from bias[n] (NULL: from zero) unless accumulate */
    int accumulate;     /* start from C itself */
    int relu;           /* max(0, .) before the store */
    float relu_max;     /* with relu, when > 0: min(relu_max, .) too (ReLU6: 6) */
    float slope;        /* with relu, when > 0 (and < 1): max(slope * ., .) instead of max(0, .) (LeakyReLU) */
    const float *gate;  /* NULL, or zero the output where gate <= 0 (gate laid out as C, ldc apart) */
    const float *res;   /* NULL, or added before the ReLU (laid out as C, ldc apart): a residual */
    int cols;           /* columns of the tile: 1 .. 64 */
    /* taps > 1 (3 only, with cols <= 16): the rows overlap as a stride-1
     * convolution's output pixels do. nj counts one tap's steps, and tap k
     * (0 .. taps-1) of step j reads A[(r + k)*as + j*aj + seg*aseg] and
     * B[k*btap + j*bj + seg*bseg], so the kernel loads each A value once for
     * up to `taps` rows. It sums a row's products per segment in the order
     * (j, k), not (k, j) as the same product written with taps = 0 would. */
    int taps;
    int64_t btap;
} fl_simd_tile;

/* The direct convolutions' kernels in use: 2 the AVX-512 ones, 1 the AVX2 ones (fl_cpu_avx2_kernels), 0 none
 * (convolutions are im2col + a GEMM). */
int fl_cpu_avx2_kernels(void);
static inline int fl_cpu_direct(void) { return fl_cpu_simd() ? 2 : fl_cpu_avx2_kernels() ? 1 : 0; }

/* Each width's micro-kernel: the largest R it takes for a tile `cols` wide (with taps: fl_*_max_rows_taps), an
 * R x cols tile (1 <= R <= that), and fl_simd_dw3 below. */
int fl_avx512_max_rows(int cols);
int fl_avx512_max_rows_taps(int cols);
void fl_avx512_run(const fl_simd_tile *t, int rows);
void fl_avx512_dw3(const float *x, int64_t xj, int64_t xseg, const float *gy, int64_t gyj, int64_t gyseg, int nseg,
                   int nj, int ct, int cols, float *dw, int64_t dw_kw, int64_t ldc);
int fl_avx2_max_rows(int cols);
int fl_avx2_max_rows_taps(int cols);
void fl_avx2_run(const fl_simd_tile *t, int rows);
void fl_avx2_dw3(const float *x, int64_t xj, int64_t xseg, const float *gy, int64_t gyj, int64_t gyseg, int nseg,
                 int nj, int ct, int cols, float *dw, int64_t dw_kw, int64_t ldc);

/* The micro-kernel of the width in use (fl_cpu_direct() > 0): the largest R for a tile `cols` wide (with taps:
 * fl_simd_max_rows_taps), and an R x cols tile, 1 <= R <= that. */
static inline int fl_simd_max_rows(int cols) {
    return fl_cpu_simd() ? fl_avx512_max_rows(cols) : fl_avx2_max_rows(cols);
}
static inline int fl_simd_max_rows_taps(int cols) {
    return fl_cpu_simd() ? fl_avx512_max_rows_taps(cols) : fl_avx2_max_rows_taps(cols);
}
static inline void fl_simd_run(const fl_simd_tile *t, int rows) {
    if (fl_cpu_simd()) fl_avx512_run(t, rows);
    else fl_avx2_run(t, rows);
}
/* Whether a tile of `cols` columns may use taps = `taps` (both widths: the same tiles, the same bits). */
static inline int fl_simd_taps_ok(int taps, int cols) { return taps == 3 && cols <= 16; }

/* The filter gradient of a stride-1 convolution with 3 kernel columns and
 * one vector of output channels (cols <= 16), for ct <= FL_SIMD_DW3_CT input
 * channels of one kernel row:
 *     dw[kw*dw_kw + ci*ldc + n] += sum_seg sum_j x[seg*xseg + (j + kw)*xj + ci] * gy[seg*gyseg + j*gyj + n]
 * for kw = 0..2, j = 0..nj-1. Each x is loaded once for the three kw it
 * serves. The same sums, in the same order, as fl_simd_run with rows
 * (kw, ci): bit for bit. */
#define FL_SIMD_DW3_CT 8
static inline void fl_simd_dw3(const float *x, int64_t xj, int64_t xseg, const float *gy, int64_t gyj, int64_t gyseg,
                               int nseg, int nj, int ct, int cols, float *dw, int64_t dw_kw, int64_t ldc) {
    if (fl_cpu_simd()) fl_avx512_dw3(x, xj, xseg, gy, gyj, gyseg, nseg, nj, ct, cols, dw, dw_kw, ldc);
    else fl_avx2_dw3(x, xj, xseg, gy, gyj, gyseg, nseg, nj, ct, cols, dw, dw_kw, ldc);
}

/* Splits n rows into tiles of at most rmax, as even as possible: tile k
 * starts at fl_tile_start(n, nt, k) for nt = ceil(n / rmax) tiles. */
static inline int fl_tiles(int64_t n, int rmax) { return (int)((n + rmax - 1) / rmax); }
static inline int64_t fl_tile_start(int64_t n, int nt, int k) { return n * k / nt; }

/* The own GEMMs' result when K is 0 (no products): C = beta C (beta 0 or
 * 1) or the bias, then the ReLU. */
static inline void fl_gemm_no_k(int64_t M, int64_t N, float beta, float *C, int64_t ldc, const float *bias, int relu) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            float v = beta != 0.0f ? C[m * ldc + n] : (bias ? bias[n] : 0.0f);
            C[m * ldc + n] = relu && v < 0 ? 0.0f : v;
        }
}

/* The threads a GEMM of M x N x K runs on: one where it has fewer than
 * small_flops multiply-adds, unless B holds FL_GEMM_SPLIT_B floats or more.
 * With few rows (a Dense layer at batch 1) a product is bound by reading B,
 * and each thread's column blocks read their own part of it: mnist_cnn's
 * 9216 x 128 Dense at batch 1 reads 4.7 MB of weights a sample. */
#define FL_GEMM_SPLIT_B (64 * 1024)
static inline int fl_gemm_threads(int64_t M, int64_t N, int64_t K, double small_flops, int threads) {
    if ((double)M * (double)N * (double)K < small_flops && (double)N * (double)K < FL_GEMM_SPLIT_B) return 1;
    return threads;
}

/* C[M, N] = op(A)[M, K] @ op(B)[K, N] (+ bias, relu), row-major, with
 * op(A) = A (lda: row stride) or A^T, op(B) likewise. beta 0 overwrites C, 1
 * adds to it; bias (N floats, may be NULL) and relu apply only with beta 0.
 * Runs on `threads` OpenMP threads (1 inside a parallel region). */
void fl_simd_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc, const float *bias, int relu,
                  int threads);

/* cpu_avx2.c: the same GEMM for CPUs with AVX2 + FMA and no AVX-512,
 * 8-wide (used where fl_cpu_avx2_gemm_wins says it beats OpenBLAS). */
void fl_avx2_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc, const float *bias, int relu,
                  int threads);
/* fl_cpu_avx2_kernels() (above) is 1 when cpu_avx2.c's kernels are used: AVX2 + FMA, and no AVX-512 or
 * FLYNN_CPU_KERNELS=avx2. fl_cpu_avx2_kernels_force as fl_cpu_simd_force (tests: 1 makes fl_cpu_direct() 1
 * where fl_cpu_simd() is forced 0). */
void fl_cpu_avx2_kernels_force(int on);
/* Whether the AVX2 GEMM beats OpenBLAS on this shape. */
int fl_cpu_avx2_gemm_wins(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K);
/* fl_simd_gemm where fl_cpu_simd(), else fl_avx2_gemm where it is used and
 * wins, and returns 1; returns 0 (nothing done) where OpenBLAS should run. */
int fl_cpu_own_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                    const float *B, int64_t ldb, float beta, float *C, int64_t ldc, const float *bias, int relu,
                    int threads);
/* flynn's own GEMM at either width where fl_cpu_avx2_gemm_wins says it beats OpenBLAS; 0: not taken */
int fl_cpu_own_gemm_if_wins(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                            const float *B, int64_t ldb, float beta, float *C, int64_t ldc, int threads);

/* dy = src * relu'(y) (relu != 0; else src) and db[j] += column sums of
 * the result, over rows x n; src may be dy, db may be NULL. One pass over
 * src, so a copy and its mask cost one. Single-threaded; n % 16 == 0 not
 * required. fl_avx2_relu_grad_colsum: the same bits on AVX2. */
void fl_simd_relu_grad_colsum(int64_t rows, int n, int relu, const float *y, const float *src, float *dy, float *db);
void fl_avx2_relu_grad_colsum(int64_t rows, int n, int relu, const float *y, const float *src, float *dy, float *db);

/* Max pooling of one sample, padded by PT rows above and PL columns left
 * (windows clipped to the input): y and the window-relative argmax kh*KW + kw
 * of the first maximum per output; -inf and -1 where a window holds no input. */
void fl_simd_maxpool_fwd_sample(int H, int W, int C, int OH, int OW, int KH, int KW, int SH, int SW, int PT, int PL,
                                const float *x, float *y, int32_t *argmax);
/* Its gradient: dx = dy at each argmax, summed where windows overlap, 0 where
 * no window takes an element; or dx += that when accumulate. */
void fl_simd_maxpool_bwd_sample(int H, int W, int C, int OH, int OW, int KH, int KW, int SH, int SW, int PT, int PL,
                                const float *dy, const int32_t *argmax, float *dx, int accumulate);

/* The gradient of a convolution output from that of its max pooling
 * (windows inside the input and not overlapping): within each window, dst =
 * dpooled * act'(pooled) at the argmax and 0 elsewhere (act' from the output,
 * fl_act_grad_y); db[c] (may be NULL) += its sums. dst rows are dst_row
 * floats apart; elements no window covers are left alone.
 * fl_avx2_unpool_grad: the same bits on AVX2. */
void fl_simd_unpool_grad(int POH, int POW, int C, int KH, int KW, int SH, int SW, int act, const float *pooled,
                         const float *dpooled, const int32_t *argmax, float *dst, int64_t dst_row, float *db);
void fl_avx2_unpool_grad(int POH, int POW, int C, int KH, int KW, int SH, int SW, int act, const float *pooled,
                         const float *dpooled, const int32_t *argmax, float *dst, int64_t dst_row, float *db);

/* Dropout forward over buffer elements [i0, i1), element i drawn as Philox
 * element offset + i: the masks the portable code draws. */
void fl_simd_dropout_fwd(int64_t i0, int64_t i1, int64_t offset, float rate, uint64_t seed, uint64_t stream,
                         const float *x, float *y, uint8_t *mask);
void fl_simd_dropout_bwd(int64_t i0, int64_t i1, float scale, const uint8_t *mask, const float *dy, float *dx,
                         int accumulate);

/* Adam over [i0, i1) of one parameter, the formula of fl_adam_update; with
 * wd != 0 first the AdamW decay w -= w * wd * lr. */
void fl_simd_adam(int64_t i0, int64_t i1, float *w, float *m, float *v, const float *g, float lr_t, float b1,
                  float b2, float eps, float wd, float lr);

#endif
