/*
 * cpu_avx2_gemm.c — flynn's own GEMM for CPUs with AVX2 and FMA but no
 * AVX-512 (AMD Zen, older Intel), and the rule that picks it over OpenBLAS.
 *
 * OpenBLAS packs both operands and scales C by beta before every call. On
 * the skinny shapes that sequence models make (x @ W with 32 or 64 output
 * columns, x^T @ dy reduced over 16,384 rows, the 128 x 128 x 16 blocks of
 * attention) that overhead is as large as the arithmetic: sgemm_beta, the
 * two copy routines and the kernel were 8, 16 and 47% of transformer_text's
 * training time on a Zen 2 EPYC. The micro-kernel here is the AVX-512 one of
 * cpu_avx512.c in 8-wide registers: an R x 8V tile of C in R*V ymm
 * accumulators (6 x 16 at most: 12 accumulators, 2 vectors of B, one
 * broadcast of A), A read by scalar broadcast with any strides (no packing),
 * B read as rows (packed only when transposed). C is written once, beta and
 * bias folded into the accumulators' start and ReLU into the store.
 *
 * Deterministic: for a given thread count every element of C is one
 * sequence of FMAs in K order (a K split over threads sums its parts in
 * thread order).
 */
#include "cpu_simd.h"
#include "cpu_internal.h"
#include "cpu_fastmath.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

static int g_avx2_gemm = -1; /* -1: not decided yet */

int fl_cpu_avx2_gemm(void) {
    int v = __atomic_load_n(&g_avx2_gemm, __ATOMIC_RELAXED);
    if (v >= 0) return v;
    /* (from what the CPU has, not from fl_cpu_simd(): a test forcing the AVX-512 kernels off wants the portable
     * code, not these) */
    v = fl_cpu_avx2() && (fl_cpu_kernels_cap() == 1 || (fl_cpu_kernels_cap() == 2 && !fl_cpu_simd_available()));
    __atomic_store_n(&g_avx2_gemm, v, __ATOMIC_RELAXED);
    return v;
}

void fl_cpu_avx2_gemm_force(int on) {
    __atomic_store_n(&g_avx2_gemm, on < 0 ? -1 : (on && fl_cpu_avx2()), __ATOMIC_RELAXED);
}

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
#include <immintrin.h>

/* Lanes [0, n) of a mask vector for maskload/maskstore (1 <= n <= 8). */
FL_AVX2_TARGET static inline __m256i lane_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* R x 8V tile; FULL: the tile is 8V columns wide, else C and the bias are
 * read and written masked (B's rows are always read 8V wide: a strip
 * narrower than that is packed with zero padding, as masked loads in the
 * inner loop halved the speed on Zen 2). */
#define MK2_DEFINE(R, V, FULL)                                                                                 \
    FL_AVX2_TARGET static void mk2_##R##_##V##_##FULL(const fl_simd_tile *t) {                                 \
        const __m256i tail = lane_mask(FULL ? 8 : t->cols - 8 * (V - 1));                                      \
        __m256 acc[R][V];                                                                                      \
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {                                                  \
            _Pragma("GCC unroll 2") for (int v = 0; v < V; v++) {                                              \
                const int part = !FULL && v == V - 1;                                                          \
                if (t->accumulate)                                                                             \
                    acc[r][v] = part ? _mm256_maskload_ps(t->c + r * t->ldc + 8 * v, tail)                     \
                                     : _mm256_loadu_ps(t->c + r * t->ldc + 8 * v);                             \
                else if (t->bias)                                                                              \
                    acc[r][v] = part ? _mm256_maskload_ps(t->bias + 8 * v, tail) : _mm256_loadu_ps(t->bias + 8 * v); \
                else acc[r][v] = _mm256_setzero_ps();                                                          \
            }                                                                                                  \
        }                                                                                                      \
        const int64_t as = t->as, aj = t->aj, bj = t->bj;                                                      \
        const float *pa = t->a, *pb = t->b;                                                                    \
        for (int j = 0; j < t->nj; j++) {                                                                      \
            __m256 bv[V]; /* B rows are readable 8V wide (packed with zeros where narrower) */            \
            _Pragma("GCC unroll 2") for (int v = 0; v < V; v++) bv[v] = _mm256_loadu_ps(pb + 8 * v);           \
            _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {                                              \
                const __m256 av = _mm256_broadcast_ss(pa + r * as);                                            \
                _Pragma("GCC unroll 2") for (int v = 0; v < V; v++) acc[r][v] =                                \
                    _mm256_fmadd_ps(av, bv[v], acc[r][v]);                                                     \
            }                                                                                                  \
            pa += aj;                                                                                          \
            pb += bj;                                                                                          \
        }                                                                                                      \
        const __m256 zero = _mm256_setzero_ps();                                                               \
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {                                                  \
            _Pragma("GCC unroll 2") for (int v = 0; v < V; v++) {                                              \
                const __m256 o = t->relu ? _mm256_max_ps(acc[r][v], zero) : acc[r][v];                         \
                if (!FULL && v == V - 1) _mm256_maskstore_ps(t->c + r * t->ldc + 8 * v, tail, o);              \
                else _mm256_storeu_ps(t->c + r * t->ldc + 8 * v, o);                                           \
            }                                                                                                  \
        }                                                                                                      \
    }

#define MK2_BOTH(R, V) MK2_DEFINE(R, V, 0) MK2_DEFINE(R, V, 1)
MK2_BOTH(1, 1) MK2_BOTH(2, 1) MK2_BOTH(3, 1) MK2_BOTH(4, 1) MK2_BOTH(5, 1) MK2_BOTH(6, 1) MK2_BOTH(7, 1)
MK2_BOTH(8, 1)
MK2_BOTH(1, 2) MK2_BOTH(2, 2) MK2_BOTH(3, 2) MK2_BOTH(4, 2) MK2_BOTH(5, 2) MK2_BOTH(6, 2)

typedef void (*mk2_fn)(const fl_simd_tile *);
#define MK2_ROW(R, V) {mk2_##R##_##V##_0, mk2_##R##_##V##_1}
static const mk2_fn mk2_v1[9][2] = {{NULL, NULL}, MK2_ROW(1, 1), MK2_ROW(2, 1), MK2_ROW(3, 1), MK2_ROW(4, 1),
                                    MK2_ROW(5, 1), MK2_ROW(6, 1), MK2_ROW(7, 1), MK2_ROW(8, 1)};
static const mk2_fn mk2_v2[7][2] = {{NULL, NULL}, MK2_ROW(1, 2), MK2_ROW(2, 2), MK2_ROW(3, 2),
                                    MK2_ROW(4, 2), MK2_ROW(5, 2), MK2_ROW(6, 2)};

/* rows of a tile `cols` (1..16) wide */
static int mk2_rows(int cols) { return cols > 8 ? 6 : 8; }

static void mk2_run(const fl_simd_tile *t, int rows) {
    if (t->cols > 8) mk2_v2[rows][t->cols == 16](t);
    else mk2_v1[rows][t->cols == 8](t);
}

/* K is cut into blocks so that a 16-column strip of B (KC x 16 floats, 16
 * KiB) stays in L1 while the row tiles of a chunk pass over it, and the
 * chunk's rows of A (MC_BYTES) stay in L2 across the strips. */
#define KC 256
#define NC 64 /* columns per work item (and per packed block of B^T) */
#define MC_BYTES (192 * 1024)

/* Packs op(B)[k0:k0+kc, n0:n0+nc] = B^T (B stored N x K) into bp[kc][NC],
 * columns nc up to the next multiple of 8 zeroed. */
static void pack_bt(const float *B, int64_t ldb, int64_t k0, int kc, int64_t n0, int nc, float *bp) {
    for (int n = 0; n < nc; n++) {
        const float *src = B + (n0 + n) * ldb + k0;
        for (int k = 0; k < kc; k++) bp[k * NC + n] = src[k];
    }
    for (int n = nc; n % 8; n++)
        for (int k = 0; k < kc; k++) bp[k * NC + n] = 0.0f;
}

/* Copies B[k0:k0+kc, c0:c0+w] (w < 16, not a multiple of 8) into bp[kc][16]
 * with zeros up to the next multiple of 8. */
static void pack_strip(const float *B, int64_t ldb, int64_t k0, int kc, int64_t c0, int w, float *bp) {
    const int wp = (w + 7) & ~7;
    for (int k = 0; k < kc; k++) {
        const float *src = B + (k0 + k) * ldb + c0;
        for (int n = 0; n < wp; n++) bp[k * 16 + n] = n < w ? src[n] : 0.0f;
    }
}

/* C[m0:m1, n0:n0+nc] over K range [ka, kb): accumulate (C's contents) or
 * start from bias/zero; relu at the end of the range when asked. */
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
            else if (t.cols % 8) {
                pack_strip(B, ldb, k0, kc, n0 + c0, t.cols, bp);
                t.b = bp;
                t.bj = 16;
            } else { t.b = B + k0 * ldb + n0 + c0; t.bj = ldb; }
            t.nseg = 1;
            t.nj = kc;
            t.ldc = ldc;
            t.accumulate = k0 > ka || accumulate;
            t.bias = bias && !t.accumulate ? bias + n0 + c0 : NULL;
            t.relu = relu && k0 + kc >= kb;
            const int rm = mk2_rows(t.cols);
            const int64_t rows = m1 - m0;
            const int nt = fl_tiles(rows, rm);
            for (int k = 0; k < nt; k++) {
                const int64_t r0 = m0 + fl_tile_start(rows, nt, k), r1 = m0 + fl_tile_start(rows, nt, k + 1);
                if (trans_a) { t.a = A + k0 * lda + r0; t.as = 1; t.aj = lda; }
                else { t.a = A + r0 * lda + k0; t.as = lda; t.aj = 1; }
                t.c = C + r0 * ldc + n0 + c0;
                mk2_run(&t, (int)(r1 - r0));
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

#else

void fl_avx2_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc, const float *bias, int relu,
                  int threads) {
    (void)trans_a; (void)trans_b; (void)M; (void)N; (void)K; (void)A; (void)lda; (void)B; (void)ldb; (void)beta;
    (void)C; (void)ldc; (void)bias; (void)relu; (void)threads;
}

#endif

int fl_cpu_own_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                    const float *B, int64_t ldb, float beta, float *C, int64_t ldc, const float *bias, int relu,
                    int threads) {
    if (fl_cpu_simd()) {
        fl_simd_gemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, bias, relu, threads);
        return 1;
    }
    if (fl_cpu_avx2_gemm() && fl_cpu_avx2_gemm_wins(trans_a, trans_b, M, N, K)) {
        fl_avx2_gemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, bias, relu, threads);
        return 1;
    }
    return 0;
}
