/*
 * cpu_avx2.c — flynn's own kernels for CPUs with AVX2 and FMA but no
 * AVX-512 (AMD Zen 1-3, Intel's client cores since Haswell, and any CPU
 * under FLYNN_CPU_KERNELS=avx2): the micro-kernel of cpu_simd.h in ymm
 * registers (cpu_microkernel.h, as cpu_avx512.c builds it in zmm), the
 * direct convolutions' helpers, a GEMM for the Dense layers and the
 * convolutions' im2col products, and the rule that picks that GEMM over
 * OpenBLAS.
 *
 * The micro-kernel: 16 ymm registers hold at most 6 x 16 (12 accumulators,
 * 2 vectors of B, one broadcast of A) or 12 x 8; the taps form 12 x 8 (12
 * accumulators, 3 weight vectors, one broadcast); a wider tile (the direct
 * convolutions ask for up to 64 columns, as on AVX-512) runs as strips of 16
 * columns, each over the tile's rows. Tiles whose last vector is whole read
 * and write without masks (masked loads in the inner loop halved a GEMM's
 * speed on a Zen 2).
 *
 * The GEMM: OpenBLAS packs both operands and scales C by beta before every
 * call. On the skinny shapes that sequence models make (x @ W with 32 or 64
 * output columns, x^T @ dy reduced over 16,384 rows, the 128 x 128 x 16
 * blocks of attention) that overhead is as large as the arithmetic:
 * sgemm_beta, the two copy routines and the kernel were 8, 16 and 47% of
 * transformer_text's training time on a Zen 2 EPYC. Here A is read by
 * scalar broadcast with any strides (no packing), B as rows (packed only
 * when transposed), C written once, beta and bias folded into the
 * accumulators' start and ReLU into the store.
 *
 * Deterministic: every element of C is one sequence of FMAs in K order (a
 * GEMM's K split over threads sums its parts in thread order), the same
 * sequence the AVX-512 kernels run: the two give the same bits.
 */
#include "cpu_simd.h"
#include "cpu_internal.h"
#include "cpu_fastmath.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* (whether these kernels run, fl_cpu_avx2_kernels, is decided in cpu_env.c) */

/* Where the own kernel beats OpenBLAS 0.3.21 (Zen kernels), from
 * bench/gemm_skinny.c on a Zen 2 EPYC, 1 and 2 threads: C at most 64 columns
 * wide (x @ W of a small Dense, attention's blocks: 1.1-3.7x); small GEMMs
 * of any shape (under 2^22 multiply-adds: the LSTM's gates, 0.9-1.4x); and a
 * short K (a 1x1 convolution, 32 -> 96 over 73,728 rows: 1.4-2.2x; dy @ W^T
 * of a 3x3 one, 64 -> 576 over 32,768 rows: 1.2-1.3x). Not where A is
 * transposed with many rows and a long K or a wide C (x^T @ dy of a 784 x 512
 * Dense, a convolution's dW: 0.7-0.9x): OpenBLAS packs A^T, which this
 * kernel reads a cache line per k. Wide and deep GEMMs (a 784 x 512 Dense,
 * a convolution's im2col: 0.8-0.9x) stay with OpenBLAS too.
 *
 * On a Zen 1 EPYC (family 23 model 1, 2 cores) OpenBLAS 0.3.21 ran a
 * convolution chunk's products on one thread (inside flynn's parallel loop,
 * each in a fresh process) at 10-15 GFLOP/s: 396 x 128 x 640 (textcnn's
 * Conv1D), 4096 x 256 x 2304, x^T @ dy of 640 x 128 over 396 rows or 576 x 64
 * over 512; this kernel at 32-37 (bench/gemm_skinny.c's chunk shapes). So
 * C up to 256 columns wide, dy @ W^T over up to 128 filters, and x^T @ dy
 * reduced over up to 4096 rows run here as well; C 512 wide (a 784 x 512
 * Dense, 512 x 512 x 2304) stays with OpenBLAS (0.85-0.9x here). */
int fl_cpu_avx2_gemm_wins(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K) {
    if (trans_a && M > 256 && K > 4096) return 0; /* A^T: a cache line per k; OpenBLAS packs it */
    if (N <= 256) return 1;
    if (trans_b && K <= 128) return 1;
    if ((double)M * (double)N * (double)K < 4194304.0) return 1;
    return K <= 64;
}

#if FL_HAVE_AVX2_TARGET

/* ------------------------------------------------------- micro-kernel */

#define FL_VEC_BITS 256
#include "cpu_microkernel.h"

#define MK_BOTH(R, V) MK_DEFINE(R, V, 0) MK_DEFINE(R, V, 1)
MK_BOTH(1, 1) MK_BOTH(2, 1) MK_BOTH(3, 1) MK_BOTH(4, 1) MK_BOTH(5, 1) MK_BOTH(6, 1) MK_BOTH(7, 1) MK_BOTH(8, 1)
MK_BOTH(9, 1) MK_BOTH(10, 1) MK_BOTH(11, 1) MK_BOTH(12, 1)
MK_BOTH(1, 2) MK_BOTH(2, 2) MK_BOTH(3, 2) MK_BOTH(4, 2) MK_BOTH(5, 2) MK_BOTH(6, 2)
#define MKT_BOTH(R) MKT_DEFINE(R, 0) MKT_DEFINE(R, 1)
MKT_BOTH(1) MKT_BOTH(2) MKT_BOTH(3) MKT_BOTH(4) MKT_BOTH(5) MKT_BOTH(6) MKT_BOTH(7) MKT_BOTH(8) MKT_BOTH(9)
MKT_BOTH(10) MKT_BOTH(11) MKT_BOTH(12)
#define MKD_BOTH(CT) MKD_DEFINE(CT, 0) MKD_DEFINE(CT, 1)
MKD_BOTH(1) MKD_BOTH(2) MKD_BOTH(3) MKD_BOTH(4)

/* rows of a tile 1..8 and 9..16 columns wide; the taps form's; channels of one fl_simd_dw3 call */
#define MK1_ROWS 12
#define MK2_ROWS 6
#define MKT_ROWS 12
#define MKD_CT 4

typedef void (*mk_fn)(const fl_simd_tile *);
#define MK_PAIR(name) {name##_0_256, name##_1_256}
static const mk_fn mk_v1[MK1_ROWS + 1][2] = {
    {NULL, NULL},   MK_PAIR(mk_1_1), MK_PAIR(mk_2_1), MK_PAIR(mk_3_1),  MK_PAIR(mk_4_1),  MK_PAIR(mk_5_1),
    MK_PAIR(mk_6_1), MK_PAIR(mk_7_1), MK_PAIR(mk_8_1), MK_PAIR(mk_9_1), MK_PAIR(mk_10_1), MK_PAIR(mk_11_1),
    MK_PAIR(mk_12_1)};
static const mk_fn mk_v2[MK2_ROWS + 1][2] = {{NULL, NULL},    MK_PAIR(mk_1_2), MK_PAIR(mk_2_2), MK_PAIR(mk_3_2),
                                             MK_PAIR(mk_4_2), MK_PAIR(mk_5_2), MK_PAIR(mk_6_2)};
static const mk_fn mkt3[MKT_ROWS + 1][2] = {
    {NULL, NULL},     MK_PAIR(mkt3_1), MK_PAIR(mkt3_2), MK_PAIR(mkt3_3),  MK_PAIR(mkt3_4),  MK_PAIR(mkt3_5),
    MK_PAIR(mkt3_6), MK_PAIR(mkt3_7), MK_PAIR(mkt3_8), MK_PAIR(mkt3_9), MK_PAIR(mkt3_10), MK_PAIR(mkt3_11),
    MK_PAIR(mkt3_12)};
typedef void (*mkd_fn)(const float *, int64_t, int64_t, const float *, int64_t, int64_t, int, int, __m256i,
                       float *, int64_t, int64_t);
static const mkd_fn mkd3[MKD_CT + 1][2] = {{NULL, NULL},     MK_PAIR(mkd3_1), MK_PAIR(mkd3_2), MK_PAIR(mkd3_3),
                                           MK_PAIR(mkd3_4)};

int fl_avx2_max_rows(int cols) { return cols > 8 ? MK2_ROWS : MK1_ROWS; }
int fl_avx2_max_rows_taps(int cols) { (void)cols; return MKT_ROWS; }

/* A strip of a tile: columns [c0, c0 + cols) */
static fl_simd_tile strip(const fl_simd_tile *t, int c0, int cols) {
    fl_simd_tile s = *t;
    s.cols = cols;
    s.b = t->b + c0;
    s.c = t->c + c0;
    if (t->bias) s.bias = t->bias + c0;
    if (t->res) s.res = t->res + c0;
    if (t->gate) s.gate = t->gate + c0;
    return s;
}

static inline __attribute__((always_inline)) void run(const fl_simd_tile *t, int rows) {
    if (t->cols <= 8) { /* one vector */
        (t->taps > 1 ? mkt3 : mk_v1)[rows][t->cols == 8](t);
        return;
    }
    if (t->cols <= 16 && t->taps <= 1) {
        mk_v2[rows][t->cols == 16](t);
        return;
    }
    /* strips of 16 columns (taps: 8), the last one what is left */
    const int w = t->taps > 1 ? 8 : 16;
    for (int c0 = 0; c0 < t->cols; c0 += w) {
        const int n = t->cols - c0 < w ? t->cols - c0 : w;
        const fl_simd_tile s = strip(t, c0, n);
        if (t->taps > 1) mkt3[rows][n == 8](&s);
        else if (n > 8) mk_v2[rows][n == 16](&s);
        else mk_v1[rows][n == 8](&s);
    }
}
void fl_avx2_run(const fl_simd_tile *t, int rows) { run(t, rows); }

FL_AVX2_TARGET void fl_avx2_dw3(const float *x, int64_t xj, int64_t xseg, const float *gy, int64_t gyj,
                                int64_t gyseg, int nseg, int nj, int ct, int cols, float *dw, int64_t dw_kw,
                                int64_t ldc) {
    /* strips of 8 columns, each over chunks of at most MKD_CT channels: every element's sum is the same */
    for (int c0 = 0; c0 < cols; c0 += 8) {
        const int n = cols - c0 < 8 ? cols - c0 : 8;
        const __m256i tail = vm_first(n);
        const int nch = (ct + MKD_CT - 1) / MKD_CT;
        for (int k = 0; k < nch; k++) {
            const int a = ct * k / nch, b = ct * (k + 1) / nch;
            mkd3[b - a][n == 8](x + a, xj, xseg, gy + c0, gyj, gyseg, nseg, nj, tail, dw + (int64_t)a * ldc + c0,
                                dw_kw, ldc);
        }
    }
}

/* ----------------------------------------- the direct convolutions' passes
 *
 * cpu_avx512.c's fl_simd_relu_grad_colsum and fl_simd_unpool_grad as plain
 * loops compiled for AVX2: the same selections and the same sums in the same
 * order (a column's sum over the rows from zero, then added to db), so the
 * same bits. */

FL_AVX2_TARGET void fl_avx2_relu_grad_colsum(int64_t rows, int n, int relu, const float *y, const float *src,
                                             float *dy, float *db) {
    const int store = relu || src != dy;
    for (int j0 = 0; j0 < n; j0 += 64) {
        const int w = n - j0 < 64 ? n - j0 : 64;
        float s[64] = {0};
        for (int64_t r = 0; r < rows; r++) {
            const float *sr = src + r * n + j0, *yr = y + r * n + j0;
            float *g = dy + r * n + j0;
            if (relu && store)
                for (int j = 0; j < w; j++) {
                    const float v = yr[j] > 0.0f ? sr[j] : 0.0f;
                    g[j] = v;
                    s[j] += v;
                }
            else if (store)
                for (int j = 0; j < w; j++) {
                    g[j] = sr[j];
                    s[j] += sr[j];
                }
            else
                for (int j = 0; j < w; j++) s[j] += sr[j];
        }
        if (db)
            for (int j = 0; j < w; j++) db[j0 + j] += s[j];
    }
}

FL_AVX2_TARGET void fl_avx2_unpool_grad(int POH, int POW, int C, int KH, int KW, int SH, int SW, int act,
                                        const float *pooled, const float *dpooled, const int32_t *argmax, float *dst,
                                        int64_t dst_row, float *db) {
    for (int c0 = 0; c0 < C; c0 += 64) {
        const int w = C - c0 < 64 ? C - c0 : 64;
        float sum[64] = {0};
        for (int ph = 0; ph < POH; ph++)
            for (int pw = 0; pw < POW; pw++) {
                const size_t o = ((size_t)ph * POW + pw) * C + c0;
                float *d0 = dst + (size_t)ph * SH * dst_row + (size_t)pw * SW * C + c0;
                float g[64];
                for (int j = 0; j < w; j++) {
                    const float yv = pooled[o + j];
                    float v = dpooled[o + j];
                    if (act == FL_ACT_RELU) v = yv > 0.0f ? v : 0.0f;
                    else if (act != FL_ACT_LINEAR) v = v * fl_act_grad_y(act, yv);
                    g[j] = v;
                    sum[j] += v;
                }
                for (int kh = 0; kh < KH; kh++)
                    for (int kw = 0; kw < KW; kw++) {
                        float *restrict p = d0 + (size_t)kh * dst_row + (size_t)kw * C;
                        const int32_t pos = kh * KW + kw;
                        for (int j = 0; j < w; j++) p[j] = argmax[o + j] == pos ? g[j] : 0.0f;
                    }
            }
        if (db)
            for (int j = 0; j < w; j++) db[c0 + j] += sum[j];
    }
}

/* --------------------------------------------------------------- GEMM */

/* K is cut into blocks so that a 16-column strip of B (KC x 16 floats, 16
 * KiB) stays in L1 while the row tiles of a chunk pass over it, and the
 * chunk's rows of A (MC_BYTES) stay in L2 across the strips. */
#define KC 256
#define NC 64 /* columns per work item (and per packed block of B^T) */
#define MC_BYTES (192 * 1024)

/* Packs op(B)[k0:k0+kc, n0:n0+nc] = B^T (B stored N x K) into bp[kc][NC]. */
static void pack_bt(const float *B, int64_t ldb, int64_t k0, int kc, int64_t n0, int nc, float *bp) {
    for (int n = 0; n < nc; n++) {
        const float *src = B + (n0 + n) * ldb + k0;
        for (int k = 0; k < kc; k++) bp[k * NC + n] = src[k];
    }
}

/* C[m0:m1, n0:n0+nc] over K range [ka, kb): accumulate (C's contents) or
 * start from bias/zero; relu at the end of the range when asked. Strips of
 * 16 columns, each over the chunk's row tiles while its block of B (KC x 16
 * floats, 16 KiB) stays in L1. */
static void block(int trans_a, int trans_b, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                  int64_t ldc, int64_t m0, int64_t m1, int64_t n0, int nc, int64_t ka, int64_t kb, int accumulate,
                  const float *bias, int relu, float *bp) {
    for (int64_t k0 = ka; k0 < kb; k0 += KC) {
        const int kc = (int)(kb - k0 < KC ? kb - k0 : KC);
        if (trans_b) pack_bt(B, ldb, k0, kc, n0, nc, bp);
        for (int c0 = 0; c0 < nc; c0 += 16) {
            fl_simd_tile t = {0};
            t.cols = nc - c0 < 16 ? nc - c0 : 16;
            if (trans_b) { t.b = bp + c0; t.bj = NC; }
            else { t.b = B + k0 * ldb + n0 + c0; t.bj = ldb; }
            t.nseg = 1;
            t.nj = kc;
            t.ldc = ldc;
            t.accumulate = k0 > ka || accumulate;
            t.bias = bias && !t.accumulate ? bias + n0 + c0 : NULL;
            t.relu = relu && k0 + kc >= kb;
            const int rm = fl_avx2_max_rows(t.cols);
            const int64_t rows = m1 - m0;
            const int nt = fl_tiles(rows, rm);
            for (int k = 0; k < nt; k++) {
                const int64_t r0 = m0 + fl_tile_start(rows, nt, k), r1 = m0 + fl_tile_start(rows, nt, k + 1);
                if (trans_a) { t.a = A + k0 * lda + r0; t.as = 1; t.aj = lda; }
                else { t.a = A + r0 * lda + k0; t.as = lda; t.aj = 1; }
                t.c = C + r0 * ldc + n0 + c0;
                run(&t, (int)(r1 - r0));
            }
        }
    }
}

/* C partial sums of a K split: at most this many floats of C per thread */
#define KSPLIT_MAX_C 4096

void fl_avx2_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc, const float *bias, int relu,
                  int threads) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        fl_gemm_no_k(M, N, beta, C, ldc, bias, relu);
        return;
    }
    threads = fl_gemm_threads(M, N, K, 1e6, threads);
    const int64_t ncb = (N + NC - 1) / NC;
    int64_t mc = MC_BYTES / ((K < KC ? K : KC) * (int64_t)sizeof(float));
    mc = mc < 24 ? 24 : mc - mc % 6;
    /* (each item packs its own block of B^T when B is transposed: chunking
     * the rows anyway keeps A's chunk in L2 across the column blocks, where
     * one chunk of all rows streamed A from memory once per column block) */
    int64_t nrc = (M + mc - 1) / mc;
    if (threads > 1 && ncb * nrc < 2 * threads) {
        nrc = (2 * threads + ncb - 1) / ncb;
        const int64_t max_rc = (M + 23) / 24; /* chunks of >= 4 tiles */
        if (nrc > max_rc) nrc = max_rc > 0 ? max_rc : 1;
    }
    const int64_t items = ncb * nrc;
    /* A small C reduced over a long K (x^T @ dy of a Dense): too few items
     * for the threads, so the threads split K and add their parts in order. */
    if (threads > 1 && items < threads && M * N <= KSPLIT_MAX_C && K >= 256 * threads) {
        float part[threads > 8 ? 8 : threads][KSPLIT_MAX_C];
        const int nt = threads > 8 ? 8 : threads;
#pragma omp parallel num_threads(nt)
        {
            float bp[KC * NC] __attribute__((aligned(32)));
            const int t = omp_get_thread_num(), T = omp_get_num_threads();
            const int64_t ka = K * t / T, kb = K * (t + 1) / T;
            for (int64_t n0 = 0; n0 < N; n0 += NC)
                block(trans_a, trans_b, A, lda, B, ldb, part[t], N, 0, M, n0, (int)(N - n0 < NC ? N - n0 : NC), ka,
                      kb, 0, NULL, 0, bp);
#pragma omp barrier
#pragma omp for schedule(static)
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = 0; n < N; n++) {
                    float v = beta != 0.0f ? C[m * ldc + n] : (bias ? bias[n] : 0.0f);
                    for (int p = 0; p < T; p++) v += part[p][m * N + n];
                    C[m * ldc + n] = relu && v < 0 ? 0.0f : v;
                }
        }
        return;
    }
    if (items < threads) threads = (int)items;
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        float bp[KC * NC] __attribute__((aligned(32)));
#pragma omp for schedule(static)
        for (int64_t it = 0; it < items; it++) {
            const int64_t rc = it / ncb, n0 = (it % ncb) * NC;
            block(trans_a, trans_b, A, lda, B, ldb, C, ldc, M * rc / nrc, M * (rc + 1) / nrc, n0,
                  (int)(N - n0 < NC ? N - n0 : NC), 0, K, beta != 0.0f, bias, relu, bp);
        }
    }
}

#else /* no AVX2 target in this build: fl_cpu_avx2_kernels() is 0 and these are never called */

int fl_avx2_max_rows(int cols) { (void)cols; return 1; }
int fl_avx2_max_rows_taps(int cols) { (void)cols; return 1; }
void fl_avx2_run(const fl_simd_tile *t, int rows) { (void)t; (void)rows; }
void fl_avx2_dw3(const float *x, int64_t xj, int64_t xseg, const float *gy, int64_t gyj, int64_t gyseg, int nseg,
                 int nj, int ct, int cols, float *dw, int64_t dw_kw, int64_t ldc) {
    (void)x; (void)xj; (void)xseg; (void)gy; (void)gyj; (void)gyseg; (void)nseg; (void)nj; (void)ct; (void)cols;
    (void)dw; (void)dw_kw; (void)ldc;
}
void fl_avx2_relu_grad_colsum(int64_t rows, int n, int relu, const float *y, const float *src, float *dy, float *db) {
    (void)rows; (void)n; (void)relu; (void)y; (void)src; (void)dy; (void)db;
}
void fl_avx2_unpool_grad(int POH, int POW, int C, int KH, int KW, int SH, int SW, int act, const float *pooled,
                         const float *dpooled, const int32_t *argmax, float *dst, int64_t dst_row, float *db) {
    (void)POH; (void)POW; (void)C; (void)KH; (void)KW; (void)SH; (void)SW; (void)act; (void)pooled; (void)dpooled;
    (void)argmax; (void)dst; (void)dst_row; (void)db;
}
void fl_avx2_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc, const float *bias, int relu,
                  int threads) {
    (void)trans_a; (void)trans_b; (void)M; (void)N; (void)K; (void)A; (void)lda; (void)B; (void)ldb; (void)beta;
    (void)C; (void)ldc; (void)bias; (void)relu; (void)threads;
}

#endif

