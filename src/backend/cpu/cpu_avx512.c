/*
 * cpu_avx512.c — the AVX-512 kernels of the CPU backend (see cpu_simd.h):
 * the register-blocked micro-kernel that every dense layer and convolution
 * runs, the GEMM driver for dense layers, and vector versions of the
 * memory-bound steps (ReLU gradient with bias gradient, max pooling, dropout
 * with Philox masks, Adam). Each function is compiled for AVX-512 with a
 * target attribute and called only after fl_cpu_simd() said yes, so the
 * library still runs on any x86-64 (and builds on other architectures,
 * where fl_cpu_simd() is 0 and these are stubs).
 *
 * Results are deterministic: every reduction has a fixed order for a given
 * thread count, and the element-wise formulas are those of ops/math.h
 * evaluated in the same order (Adam, dropout masks bit-identical to the
 * portable code).
 */
#include "cpu_simd.h"
#include "cpu_internal.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* -1: not decided yet; else the answer of fl_cpu_simd() */
static int g_simd = -1;

int fl_cpu_simd_available(void) {
#if FL_HAVE_AVX512
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
#else
    return 0;
#endif
}

void fl_cpu_simd_force(int on) {
    __atomic_store_n(&g_simd, on < 0 ? -1 : (on && fl_cpu_simd_available()), __ATOMIC_RELAXED);
}

int fl_cpu_simd(void) {
    int v = __atomic_load_n(&g_simd, __ATOMIC_RELAXED);
    if (v >= 0) return v;
    v = fl_cpu_simd_available() && fl_cpu_kernels_cap() >= 2;
    __atomic_store_n(&g_simd, v, __ATOMIC_RELAXED);
    return v;
}

#if FL_HAVE_AVX512

/* ------------------------------------------------------- micro-kernel
 *
 * acc[R][V] holds an R x 16V tile of C in zmm registers. Per step j it loads
 * V vectors of B (the last one masked to the tile's width) and broadcasts R
 * scalars of A, then issues R*V FMAs. With R*V <= 28 the accumulators, the V
 * B vectors and the broadcast stay in the 32 zmm registers. */

/* A tile's accumulator (row r, vector v) at the start: C itself, the bias
 * or zero; and its store: the ReLU (capped at hi; leaky with a slope: max(o,
 * slope o) + 0, which for 0 < slope < 1 is the LeakyReLU layer's o > 0 ? o :
 * o < 0 ? slope o : 0 to the bit) after the residual, the gate, the columns of mask mk. */
FL_AVX512 static inline __attribute__((always_inline)) __m512 mk_init(const fl_simd_tile *t, int r, int v,
                                                                      __mmask16 mk) {
    if (t->accumulate) return _mm512_maskz_loadu_ps(mk, t->c + r * t->ldc + 16 * v);
    if (t->bias) return _mm512_maskz_loadu_ps(mk, t->bias + 16 * v);
    return _mm512_setzero_ps();
}
FL_AVX512 static inline __attribute__((always_inline)) void mk_store(const fl_simd_tile *t, int r, int v, __m512 o,
                                                                     __mmask16 mk, __m512 hi) {
    const __m512 zero = _mm512_setzero_ps();
    if (t->res) o = _mm512_add_ps(o, _mm512_maskz_loadu_ps(mk, t->res + r * t->ldc + 16 * v));
    if (t->relu && t->slope > 0.0f) /* + 0: -0 to 0, as the LeakyReLU layer */
        o = _mm512_min_ps(_mm512_add_ps(_mm512_max_ps(o, _mm512_mul_ps(o, _mm512_set1_ps(t->slope))), zero), hi);
    else if (t->relu)
        o = _mm512_min_ps(_mm512_max_ps(o, zero), hi);
    if (t->gate)
        o = _mm512_maskz_mov_ps(
            _mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(mk, t->gate + r * t->ldc + 16 * v), zero, _CMP_GT_OQ), o);
    _mm512_mask_storeu_ps(t->c + r * t->ldc + 16 * v, mk, o);
}

#define MK_DEFINE(R, V)                                                                                        \
    FL_AVX512 static void mk_##R##_##V(const fl_simd_tile *t) {                                                \
        const __mmask16 tail = (__mmask16)(t->cols - 16 * (V - 1) >= 16 ? 0xFFFF                               \
                                                                        : (1u << (t->cols - 16 * (V - 1))) - 1); \
        __m512 acc[R][V];                                                                                      \
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                                                 \
            _Pragma("GCC unroll 4") for (int v = 0; v < V; v++) {                                              \
                acc[r][v] = mk_init(t, r, v, v == V - 1 ? tail : 0xFFFF);                                      \
            }                                                                                                  \
        }                                                                                                      \
        const int64_t as = t->as, aj = t->aj, bj = t->bj;                                                      \
        for (int s = 0; s < t->nseg; s++) {                                                                    \
            const float *pa = t->a + s * t->aseg, *pb = t->b + s * t->bseg;                                    \
            for (int j = 0; j < t->nj; j++) {                                                                  \
                __m512 bv[V];                                                                                  \
                _Pragma("GCC unroll 4") for (int v = 0; v < V - 1; v++) bv[v] = _mm512_loadu_ps(pb + 16 * v);  \
                bv[V - 1] = _mm512_maskz_loadu_ps(tail, pb + 16 * (V - 1));                                    \
                _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                                         \
                    __m512 av = _mm512_set1_ps(pa[r * as]);                                                    \
                    _Pragma("GCC unroll 4") for (int v = 0; v < V; v++)                                        \
                        acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);                                     \
                }                                                                                              \
                pa += aj;                                                                                      \
                pb += bj;                                                                                      \
            }                                                                                                  \
        }                                                                                                      \
        const __m512 hi = _mm512_set1_ps(t->relu_max > 0.0f ? t->relu_max : INFINITY);                       \
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                                                 \
            _Pragma("GCC unroll 4") for (int v = 0; v < V; v++)                                                \
                mk_store(t, r, v, acc[r][v], v == V - 1 ? tail : 0xFFFF, hi);                                  \
        }                                                                                                      \
    }

#define MK_ROWS14(V)                                                                                      \
    MK_DEFINE(1, V) MK_DEFINE(2, V) MK_DEFINE(3, V) MK_DEFINE(4, V) MK_DEFINE(5, V) MK_DEFINE(6, V)        \
    MK_DEFINE(7, V) MK_DEFINE(8, V) MK_DEFINE(9, V) MK_DEFINE(10, V) MK_DEFINE(11, V) MK_DEFINE(12, V)     \
    MK_DEFINE(13, V) MK_DEFINE(14, V)
MK_ROWS14(1)
MK_ROWS14(2)
MK_DEFINE(1, 3) MK_DEFINE(2, 3) MK_DEFINE(3, 3) MK_DEFINE(4, 3) MK_DEFINE(5, 3) MK_DEFINE(6, 3) MK_DEFINE(7, 3)
MK_DEFINE(8, 3)
MK_DEFINE(1, 4) MK_DEFINE(2, 4) MK_DEFINE(3, 4) MK_DEFINE(4, 4) MK_DEFINE(5, 4) MK_DEFINE(6, 4)

typedef void (*mk_fn)(const fl_simd_tile *);
#define MK_ROW_FNS(V) \
    {NULL, mk_1_##V, mk_2_##V, mk_3_##V, mk_4_##V, mk_5_##V, mk_6_##V, mk_7_##V, mk_8_##V, mk_9_##V, mk_10_##V, \
     mk_11_##V, mk_12_##V, mk_13_##V, mk_14_##V}
static const mk_fn mk_v1[15] = MK_ROW_FNS(1);
static const mk_fn mk_v2[15] = MK_ROW_FNS(2);
static const mk_fn mk_v3[9] = {NULL, mk_1_3, mk_2_3, mk_3_3, mk_4_3, mk_5_3, mk_6_3, mk_7_3, mk_8_3};
static const mk_fn mk_v4[7] = {NULL, mk_1_4, mk_2_4, mk_3_4, mk_4_4, mk_5_4, mk_6_4};

/* ------------------------------------------------ the taps micro-kernel
 *
 * A convolution whose output has one vector of channels (16 or fewer) runs
 * the kernel above with V = 1: one broadcast of x per FMA, which the load
 * ports bound well under the FMA rate (ResNet-20's 16-channel stage at 260
 * GFLOP/s on a Zen 5, against ~370 for its 32-channel one). With stride 1,
 * the x that output pixel r reads at kernel column k is the one pixel r + 1
 * reads at k - 1. So per step j, the three taps' weight vectors are loaded
 * once and each pixel's x broadcast once, for the up to three rows it
 * serves: (R + 2) broadcasts for 3R FMAs. R accumulators, three weight
 * vectors and the broadcast stay in 32 zmm registers. */
#define MKT_ROWS 24
#define MKT_DEFINE(R)                                                                                          \
    FL_AVX512 static void mkt3_##R(const fl_simd_tile *t) {                                                    \
        const __mmask16 tail = (__mmask16)(t->cols >= 16 ? 0xFFFF : (1u << t->cols) - 1);                      \
        __m512 acc[R];                                                                                         \
        _Pragma("GCC unroll 32") for (int r = 0; r < R; r++) acc[r] = mk_init(t, r, 0, tail);                  \
        const int64_t as = t->as, aj = t->aj, bj = t->bj, bt = t->btap;                                        \
        for (int s = 0; s < t->nseg; s++) {                                                                    \
            const float *pa = t->a + s * t->aseg, *pb = t->b + s * t->bseg;                                    \
            for (int j = 0; j < t->nj; j++) {                                                                  \
                const __m512 w0 = _mm512_maskz_loadu_ps(tail, pb);                                             \
                const __m512 w1 = _mm512_maskz_loadu_ps(tail, pb + bt);                                        \
                const __m512 w2 = _mm512_maskz_loadu_ps(tail, pb + 2 * bt);                                    \
                const float *q = pa;                                                                           \
                _Pragma("GCC unroll 32") for (int p = 0; p < R + 2; p++) {                                     \
                    const __m512 xv = _mm512_set1_ps(*q);                                                      \
                    if (p < R) acc[p] = _mm512_fmadd_ps(xv, w0, acc[p]);                                       \
                    if (p >= 1 && p <= R) acc[p - 1] = _mm512_fmadd_ps(xv, w1, acc[p - 1]);                    \
                    if (p >= 2) acc[p - 2] = _mm512_fmadd_ps(xv, w2, acc[p - 2]);                              \
                    q += as;                                                                                   \
                }                                                                                              \
                pa += aj;                                                                                      \
                pb += bj;                                                                                      \
            }                                                                                                  \
        }                                                                                                      \
        const __m512 hi = _mm512_set1_ps(t->relu_max > 0.0f ? t->relu_max : INFINITY);                       \
        _Pragma("GCC unroll 32") for (int r = 0; r < R; r++) mk_store(t, r, 0, acc[r], tail, hi);             \
    }
MKT_DEFINE(1) MKT_DEFINE(2) MKT_DEFINE(3) MKT_DEFINE(4) MKT_DEFINE(5) MKT_DEFINE(6) MKT_DEFINE(7) MKT_DEFINE(8)
MKT_DEFINE(9) MKT_DEFINE(10) MKT_DEFINE(11) MKT_DEFINE(12) MKT_DEFINE(13) MKT_DEFINE(14) MKT_DEFINE(15)
MKT_DEFINE(16) MKT_DEFINE(17) MKT_DEFINE(18) MKT_DEFINE(19) MKT_DEFINE(20) MKT_DEFINE(21) MKT_DEFINE(22)
MKT_DEFINE(23) MKT_DEFINE(24)
static const mk_fn mkt3[MKT_ROWS + 1] = {NULL,     mkt3_1,  mkt3_2,  mkt3_3,  mkt3_4,  mkt3_5,  mkt3_6,
                                         mkt3_7,   mkt3_8,  mkt3_9,  mkt3_10, mkt3_11, mkt3_12, mkt3_13,
                                         mkt3_14,  mkt3_15, mkt3_16, mkt3_17, mkt3_18, mkt3_19, mkt3_20,
                                         mkt3_21,  mkt3_22, mkt3_23, mkt3_24};

/* fl_simd_dw3 for CT channels: 3*CT accumulators, the last three gy
 * vectors (g0 = gy[q], g1 = gy[q-1], g2 = gy[q-2]) and one broadcast of
 * x[q] per channel, which serves kw = 0, 1, 2 (j = q, q-1, q-2). The first
 * two and last two q of a segment have fewer valid j. */
#define MKD_DEFINE(CT)                                                                                         \
    FL_AVX512 static void mkd3_##CT(const float *x, int64_t xj, int64_t xseg, const float *gy, int64_t gyj,    \
                                    int64_t gyseg, int nseg, int nj, __mmask16 tail, float *dw, int64_t dw_kw, \
                                    int64_t ldc) {                                                             \
        __m512 acc[3][CT];                                                                                     \
        _Pragma("GCC unroll 3") for (int k = 0; k < 3; k++)                                                    \
            _Pragma("GCC unroll 8") for (int c = 0; c < CT; c++)                                               \
                acc[k][c] = _mm512_maskz_loadu_ps(tail, dw + k * dw_kw + c * ldc);                             \
        for (int s = 0; s < nseg; s++) {                                                                       \
            const float *pa = x + s * xseg, *pb = gy + s * gyseg;                                              \
            __m512 g0 = _mm512_setzero_ps(), g1 = g0, g2 = g0;                                                 \
            for (int q = 0; q < nj + 2; q++, pa += xj) {                                                       \
                g2 = g1;                                                                                       \
                g1 = g0;                                                                                       \
                if (q < nj) g0 = _mm512_maskz_loadu_ps(tail, pb + q * gyj);                                    \
                if (q >= 2 && q < nj) {                                                                        \
                    _Pragma("GCC unroll 8") for (int c = 0; c < CT; c++) {                                     \
                        const __m512 xv = _mm512_set1_ps(pa[c]);                                               \
                        acc[0][c] = _mm512_fmadd_ps(xv, g0, acc[0][c]);                                        \
                        acc[1][c] = _mm512_fmadd_ps(xv, g1, acc[1][c]);                                        \
                        acc[2][c] = _mm512_fmadd_ps(xv, g2, acc[2][c]);                                        \
                    }                                                                                          \
                } else {                                                                                       \
                    _Pragma("GCC unroll 8") for (int c = 0; c < CT; c++) {                                     \
                        const __m512 xv = _mm512_set1_ps(pa[c]);                                               \
                        if (q < nj) acc[0][c] = _mm512_fmadd_ps(xv, g0, acc[0][c]);                            \
                        if (q >= 1 && q - 1 < nj) acc[1][c] = _mm512_fmadd_ps(xv, g1, acc[1][c]);              \
                        if (q >= 2 && q - 2 < nj) acc[2][c] = _mm512_fmadd_ps(xv, g2, acc[2][c]);              \
                    }                                                                                          \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
        _Pragma("GCC unroll 3") for (int k = 0; k < 3; k++)                                                    \
            _Pragma("GCC unroll 8") for (int c = 0; c < CT; c++)                                               \
                _mm512_mask_storeu_ps(dw + k * dw_kw + c * ldc, tail, acc[k][c]);                              \
    }
MKD_DEFINE(1) MKD_DEFINE(2) MKD_DEFINE(3) MKD_DEFINE(4) MKD_DEFINE(5) MKD_DEFINE(6) MKD_DEFINE(7) MKD_DEFINE(8)
typedef void (*mkd_fn)(const float *, int64_t, int64_t, const float *, int64_t, int64_t, int, int, __mmask16,
                       float *, int64_t, int64_t);
static const mkd_fn mkd3[FL_SIMD_DW3_CT + 1] = {NULL,     mkd3_1, mkd3_2, mkd3_3, mkd3_4,
                                                mkd3_5,   mkd3_6, mkd3_7, mkd3_8};

void fl_simd_dw3(const float *x, int64_t xj, int64_t xseg, const float *gy, int64_t gyj, int64_t gyseg, int nseg,
                 int nj, int ct, int cols, float *dw, int64_t dw_kw, int64_t ldc) {
    const __mmask16 tail = (__mmask16)(cols >= 16 ? 0xFFFF : (1u << cols) - 1);
    mkd3[ct](x, xj, xseg, gy, gyj, gyseg, nseg, nj, tail, dw, dw_kw, ldc);
}

int fl_simd_max_rows(int cols) { return cols > 48 ? 6 : cols > 32 ? 8 : 14; }
int fl_simd_max_rows_taps(void) { return MKT_ROWS; }
int fl_simd_taps_ok(int taps, int cols) { return taps == 3 && cols <= 16; }

void fl_simd_run(const fl_simd_tile *t, int rows) {
    if (t->taps > 1) {
        mkt3[rows](t);
        return;
    }
    if (t->cols > 48) mk_v4[rows](t);
    else if (t->cols > 32) mk_v3[rows](t);
    else if (t->cols > 16) mk_v2[rows](t);
    else mk_v1[rows](t);
}

/* ----------------------------------------------------------------- GEMM */

/* K is cut into blocks so that a block of B (KC x 64 floats) stays in L2 while
 * every row tile of A passes over it. */
#define GEMM_KC 384
#define GEMM_NC 64
#define GEMM_MC_BYTES (256 * 1024)

/* Packs op(B)[k0:k0+kc, n0:n0+nc] = B^T (B stored N x K) into bp[kc][64]. */
FL_AVX512 static void pack_bt(const float *B, int64_t ldb, int64_t k0, int kc, int64_t n0, int nc, float *bp) {
    for (int n = 0; n < nc; n++) {
        const float *src = B + (n0 + n) * ldb + k0;
        for (int k = 0; k < kc; k++) bp[k * GEMM_NC + n] = src[k];
    }
}

void fl_simd_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc, const float *bias, int relu,
                  int threads) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        fl_gemm_no_k(M, N, beta, C, ldc, bias, relu);
        return;
    }
    const int64_t ncb = (N + GEMM_NC - 1) / GEMM_NC; /* column blocks */
    const int rmax = 6;                               /* rows per tile for 64-wide tiles */
    /* work items: row chunks x column blocks. A chunk's rows of one K block
     * (GEMM_MC_BYTES) stay in L2 while the items of that chunk, consecutive
     * on one thread, pass their column blocks over them; and there are
     * enough items for the threads. */
    int64_t mc = GEMM_MC_BYTES / ((K < GEMM_KC ? K : GEMM_KC) * (int64_t)sizeof(float));
    mc = mc < 4 * rmax ? 4 * rmax : mc - mc % rmax;
    /* (with B transposed every item packs its block of B: no more items than needed) */
    int64_t nrc = trans_b ? 1 : (M + mc - 1) / mc;
    if (threads > 1 && ncb * nrc < 2 * threads) {
        nrc = (2 * threads + ncb - 1) / ncb;
        int64_t max_rc = (M + 4 * rmax - 1) / (4 * rmax); /* chunks of >= 4 tiles */
        if (nrc > max_rc) nrc = max_rc > 0 ? max_rc : 1;
    }
    const int64_t items = ncb * nrc;
    if (items < threads) threads = (int)items;
    threads = fl_gemm_threads(M, N, K, 2e6, threads);
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        /* packed B^T block; on the stack so that a step allocates nothing */
        float bp[GEMM_KC * GEMM_NC] __attribute__((aligned(64)));
#pragma omp for schedule(static)
        for (int64_t it = 0; it < items; it++) {
            int64_t rc = it / ncb, cb = it % ncb;
            int64_t n0 = cb * GEMM_NC;
            int nc = (int)(N - n0 < GEMM_NC ? N - n0 : GEMM_NC);
            int64_t m0 = M * rc / nrc, m1 = M * (rc + 1) / nrc;
            int rm = fl_simd_max_rows(nc);
            for (int64_t k0 = 0; k0 < K; k0 += GEMM_KC) {
                int kc = (int)(K - k0 < GEMM_KC ? K - k0 : GEMM_KC);
                fl_simd_tile t = {0};
                if (trans_b) {
                    pack_bt(B, ldb, k0, kc, n0, nc, bp);
                    t.b = bp;
                    t.bj = GEMM_NC;
                } else {
                    t.b = B + k0 * ldb + n0;
                    t.bj = ldb;
                }
                t.nseg = 1;
                t.nj = kc;
                t.ldc = ldc;
                t.cols = nc;
                t.accumulate = k0 > 0 || beta != 0.0f;
                t.bias = bias ? bias + n0 : NULL;
                t.relu = relu && k0 + kc >= K;
                int64_t rows = m1 - m0;
                int nt = fl_tiles(rows, rm);
                for (int k = 0; k < nt; k++) {
                    int64_t r0 = m0 + fl_tile_start(rows, nt, k), r1 = m0 + fl_tile_start(rows, nt, k + 1);
                    if (trans_a) { t.a = A + k0 * lda + r0; t.as = 1; t.aj = lda; }
                    else { t.a = A + r0 * lda + k0; t.as = lda; t.aj = 1; }
                    t.c = C + r0 * ldc + n0;
                    fl_simd_run(&t, (int)(r1 - r0));
                }
            }
        }
    }
}

/* ------------------------------------------------------ element-wise */

FL_AVX512 void fl_simd_relu_grad_colsum(int64_t rows, int n, int relu, const float *y, const float *src, float *dy,
                                        float *db) {
    const int store = relu || src != dy;
    const __m512 zero = _mm512_setzero_ps();
    for (int j0 = 0; j0 < n; j0 += 64) {
        int w = n - j0 < 64 ? n - j0 : 64, nv = (w + 15) / 16;
        __mmask16 mk[4];
        for (int v = 0; v < 4; v++) {
            int c = w - 16 * v;
            mk[v] = (__mmask16)(c >= 16 ? 0xFFFF : c > 0 ? (1u << c) - 1 : 0);
        }
        __m512 s[4] = {zero, zero, zero, zero};
        for (int64_t r = 0; r < rows; r++) {
            float *g = dy + r * n + j0;
            const float *yr = y + r * n + j0, *sr = src + r * n + j0;
            for (int v = 0; v < nv; v++) {
                __m512 gv = _mm512_maskz_loadu_ps(mk[v], sr + 16 * v);
                if (relu) {
                    __mmask16 pos = _mm512_mask_cmp_ps_mask(mk[v], _mm512_maskz_loadu_ps(mk[v], yr + 16 * v), zero,
                                                            _CMP_GT_OQ);
                    gv = _mm512_maskz_mov_ps(pos, gv);
                }
                if (store) _mm512_mask_storeu_ps(g + 16 * v, mk[v], gv);
                s[v] = _mm512_add_ps(s[v], gv);
            }
        }
        if (db)
            for (int v = 0; v < nv; v++)
                _mm512_mask_storeu_ps(db + j0 + 16 * v, mk[v],
                                      _mm512_add_ps(_mm512_maskz_loadu_ps(mk[v], db + j0 + 16 * v), s[v]));
    }
}

FL_AVX512 void fl_simd_maxpool_fwd_sample(int H, int W, int C, int OH, int OW, int KH, int KW, int SH, int SW, int PT,
                                          int PL, const float *x, float *y, int32_t *argmax) {
    for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++) {
            float *yo = y + ((size_t)oh * OW + ow) * C;
            int32_t *ao = argmax + ((size_t)oh * OW + ow) * C;
            int k0, k1, j0, j1; /* the window clipped to the input */
            fl_tap_range(oh * SH - PT, KH, 1, H, &k0, &k1);
            fl_tap_range(ow * SW - PL, KW, 1, W, &j0, &j1);
            if (k0 >= k1 || j0 >= j1) { /* no input in the window (padding only) */
                for (int c = 0; c < C; c++) { yo[c] = -INFINITY; ao[c] = -1; }
                continue;
            }
            /* (the window's corner may lie in the padding: offsets from it stay signed until clipped) */
            const ptrdiff_t o0 = (ptrdiff_t)(oh * SH - PT) * W + (ow * SW - PL);
            for (int c = 0; c < C; c += 16) {
                __mmask16 mk = (__mmask16)(C - c >= 16 ? 0xFFFF : (1u << (C - c)) - 1);
                __m512 best = _mm512_maskz_loadu_ps(mk, x + (o0 + (ptrdiff_t)k0 * W + j0) * C + c);
                __m512i bi = _mm512_set1_epi32(k0 * KW + j0);
                for (int kh = k0; kh < k1; kh++)
                    for (int kw = kh == k0 ? j0 + 1 : j0; kw < j1; kw++) {
                        __m512 v = _mm512_maskz_loadu_ps(mk, x + (o0 + (ptrdiff_t)kh * W + kw) * C + c);
                        /* strictly greater: the first maximum wins, as the portable loop */
                        __mmask16 gt = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ);
                        best = _mm512_mask_mov_ps(best, gt, v);
                        bi = _mm512_mask_mov_epi32(bi, gt, _mm512_set1_epi32(kh * KW + kw));
                    }
                _mm512_mask_storeu_ps(yo + c, mk, best);
                _mm512_mask_storeu_epi32(ao + c, mk, bi);
            }
        }
}

FL_AVX512 void fl_simd_maxpool_bwd_sample(int H, int W, int C, int OH, int OW, int KH, int KW, int SH, int SW, int PT,
                                          int PL, const float *dy, const int32_t *argmax, float *dx, int accumulate) {
    /* windows that tile the input exactly write every element; overlapping ones add into a zeroed dx */
    const int tiles = SH == KH && SW == KW && OH * SH == H && OW * SW == W && PT == 0 && PL == 0;
    const int add = accumulate || SH < KH || SW < KW;
    if (!accumulate && !tiles) memset(dx, 0, (size_t)H * W * C * sizeof(float)); /* elements no window covers */
    for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++) {
            const float *g = dy + ((size_t)oh * OW + ow) * C;
            const int32_t *a = argmax + ((size_t)oh * OW + ow) * C;
            int k0, k1, j0, j1;
            fl_tap_range(oh * SH - PT, KH, 1, H, &k0, &k1);
            fl_tap_range(ow * SW - PL, KW, 1, W, &j0, &j1);
            const ptrdiff_t o0 = (ptrdiff_t)(oh * SH - PT) * W + (ow * SW - PL);
            for (int c = 0; c < C; c += 16) {
                __mmask16 mk = (__mmask16)(C - c >= 16 ? 0xFFFF : (1u << (C - c)) - 1);
                __m512 gv = _mm512_maskz_loadu_ps(mk, g + c);
                __m512i av = _mm512_maskz_loadu_epi32(mk, a + c);
                for (int kh = k0; kh < k1; kh++)
                    for (int kw = j0; kw < j1; kw++) {
                        float *d = dx + (o0 + (ptrdiff_t)kh * W + kw) * C + c;
                        __mmask16 hit = _mm512_mask_cmpeq_epi32_mask(mk, av, _mm512_set1_epi32(kh * KW + kw));
                        if (add) {
                            if (hit) _mm512_mask_storeu_ps(d, hit, _mm512_add_ps(_mm512_maskz_loadu_ps(hit, d), gv));
                        } else {
                            _mm512_mask_storeu_ps(d, mk, _mm512_maskz_mov_ps(hit, gv));
                        }
                    }
            }
        }
}

FL_AVX512 void fl_simd_unpool_grad(int POH, int POW, int C, int KH, int KW, int SH, int SW, int act,
                                   const float *pooled, const float *dpooled, const int32_t *argmax, float *dst,
                                   int64_t dst_row, float *db) {
    const __m512 zero = _mm512_setzero_ps();
    /* up to 64 channels per sweep, so that each pixel's channels are written together */
    for (int c0 = 0; c0 < C; c0 += 64) {
        const int nv = (C - c0 < 64 ? C - c0 + 15 : 64) / 16;
        __mmask16 mk[4];
        for (int v = 0; v < 4; v++) {
            int left = C - c0 - 16 * v;
            mk[v] = (__mmask16)(left >= 16 ? 0xFFFF : left > 0 ? (1u << left) - 1 : 0);
        }
        __m512 sum[4] = {zero, zero, zero, zero};
        for (int ph = 0; ph < POH; ph++)
            for (int pw = 0; pw < POW; pw++) {
                const size_t o = ((size_t)ph * POW + pw) * C + c0;
                float *d0 = dst + (size_t)ph * SH * dst_row + (size_t)pw * SW * C + c0;
                for (int v = 0; v < nv; v++) {
                    __m512 g = _mm512_maskz_loadu_ps(mk[v], dpooled + o + 16 * v);
                    __m512 yv = _mm512_maskz_loadu_ps(mk[v], pooled + o + 16 * v);
                    if (act == FL_ACT_RELU) {
                        g = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(yv, zero, _CMP_GT_OQ), g);
                    } else if (act != FL_ACT_LINEAR) {
                        float yy[16], f[16];
                        _mm512_storeu_ps(yy, yv);
                        for (int k = 0; k < 16; k++) f[k] = fl_act_grad_y(act, yy[k]);
                        g = _mm512_mul_ps(g, _mm512_loadu_ps(f));
                    }
                    sum[v] = _mm512_add_ps(sum[v], g);
                    const __m512i av = _mm512_maskz_loadu_epi32(mk[v], argmax + o + 16 * v);
                    for (int kh = 0; kh < KH; kh++)
                        for (int kw = 0; kw < KW; kw++) {
                            __mmask16 hit = _mm512_mask_cmpeq_epi32_mask(mk[v], av, _mm512_set1_epi32(kh * KW + kw));
                            _mm512_mask_storeu_ps(d0 + (size_t)kh * dst_row + (size_t)kw * C + 16 * v, mk[v],
                                                  _mm512_maskz_mov_ps(hit, g));
                        }
                }
            }
        if (db)
            for (int v = 0; v < nv; v++)
                _mm512_mask_storeu_ps(db + c0 + 16 * v, mk[v],
                                      _mm512_add_ps(_mm512_maskz_loadu_ps(mk[v], db + c0 + 16 * v), sum[v]));
    }
}

/* Philox 4x32-10 for 16 consecutive block indices at once (the same
 * function as core/philox.h, lane by lane). */
FL_AVX512 static inline __m512i mulhi32(__m512i a, __m512i b) {
    __m512i even = _mm512_srli_epi64(_mm512_mul_epu32(a, b), 32);
    __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), _mm512_srli_epi64(b, 32));
    return _mm512_mask_blend_epi32((__mmask16)0xAAAA, even, odd);
}

FL_AVX512 static void philox16(__m512i c0, uint32_t c1s, uint32_t c2s, uint32_t c3s, uint32_t k0, uint32_t k1,
                               __m512i out[4]) {
    const __m512i m0 = _mm512_set1_epi32((int)0xD2511F53u), m1 = _mm512_set1_epi32((int)0xCD9E8D57u);
    __m512i c1 = _mm512_set1_epi32((int)c1s), c2 = _mm512_set1_epi32((int)c2s), c3 = _mm512_set1_epi32((int)c3s);
    for (int r = 0; r < 10; r++) {
        __m512i hi0 = mulhi32(m0, c0), lo0 = _mm512_mullo_epi32(m0, c0);
        __m512i hi1 = mulhi32(m1, c2), lo1 = _mm512_mullo_epi32(m1, c2);
        __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32((int)k0));
        __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32((int)k1));
        c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

FL_AVX512 void fl_simd_dropout_fwd(int64_t i0, int64_t i1, int64_t offset, float rate, uint64_t seed,
                                   uint64_t stream, const float *x, float *y, uint8_t *mask) {
    const float scale = 1.0f / (1.0f - rate);
    const __m512 vrate = _mm512_set1_ps(rate), vscale = _mm512_set1_ps(scale), unit = _mm512_set1_ps(1.0f / 16777216.0f);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    /* element i is Philox element e = offset + i, word e%4 of block e/4; from
     * the first whole block on, groups of 64 elements (16 blocks) run in
     * vectors, the rest as the portable code does */
    int64_t b = (offset + i0 + 3) / 4;
    int64_t head_end = b * 4 - offset < i1 ? b * 4 - offset : i1;
    for (int64_t i = i0; i < head_end; i++) {
        fl_philox4 r = fl_philox_block(seed, stream, (uint64_t)((offset + i) / 4));
        uint8_t keep = fl_u32_to_unit(r.v[(offset + i) % 4]) >= rate;
        mask[i] = keep;
        y[i] = keep ? x[i] * scale : 0.0f;
    }
    int64_t i = head_end;
    for (; i + 64 <= i1 && ((uint64_t)b & 0xFFFFFFFFull) <= 0xFFFFFFFFull - 16; i += 64, b += 16) {
        __m512i out[4];
        philox16(_mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)b), lane), (uint32_t)((uint64_t)b >> 32),
                 (uint32_t)stream, (uint32_t)(stream >> 32), (uint32_t)seed, (uint32_t)(seed >> 32), out);
        /* out[w] lane l = word w of block b+l, i.e. element 4l+w: interleave */
        __m512i t0 = _mm512_unpacklo_epi32(out[0], out[1]); /* b0w0 b0w1 b1w0 b1w1 | ... per 128-bit lane */
        __m512i t1 = _mm512_unpackhi_epi32(out[0], out[1]);
        __m512i t2 = _mm512_unpacklo_epi32(out[2], out[3]);
        __m512i t3 = _mm512_unpackhi_epi32(out[2], out[3]);
        __m512i e0 = _mm512_unpacklo_epi64(t0, t2); /* block 4q+0 words 0..3, per 128-bit lane q */
        __m512i e1 = _mm512_unpackhi_epi64(t0, t2); /* block 4q+1 */
        __m512i e2 = _mm512_unpacklo_epi64(t1, t3); /* block 4q+2 */
        __m512i e3 = _mm512_unpackhi_epi64(t1, t3); /* block 4q+3 */
        /* element order wanted: blocks 0..15 in sequence; e_k lane q holds block 4q+k */
        __m512i a01lo = _mm512_shuffle_i32x4(e0, e1, 0x44); /* e0.q0 e0.q1 e1.q0 e1.q1 */
        __m512i a01hi = _mm512_shuffle_i32x4(e0, e1, 0xEE); /* e0.q2 e0.q3 e1.q2 e1.q3 */
        __m512i a23lo = _mm512_shuffle_i32x4(e2, e3, 0x44);
        __m512i a23hi = _mm512_shuffle_i32x4(e2, e3, 0xEE);
        __m512i r[4];
        r[0] = _mm512_shuffle_i32x4(a01lo, a23lo, 0x88); /* e0.q0 e1.q0 e2.q0 e3.q0 = blocks 0,1,2,3 */
        r[1] = _mm512_shuffle_i32x4(a01lo, a23lo, 0xDD); /* blocks 4..7 */
        r[2] = _mm512_shuffle_i32x4(a01hi, a23hi, 0x88); /* blocks 8..11 */
        r[3] = _mm512_shuffle_i32x4(a01hi, a23hi, 0xDD); /* blocks 12..15 */
        for (int q = 0; q < 4; q++) {
            __m512 u = _mm512_mul_ps(_mm512_cvtepu32_ps(_mm512_srli_epi32(r[q], 8)), unit);
            __mmask16 keep = _mm512_cmp_ps_mask(u, vrate, _CMP_GE_OQ);
            __m512 xv = _mm512_loadu_ps(x + i + 16 * q);
            _mm512_storeu_ps(y + i + 16 * q, _mm512_maskz_mul_ps(keep, xv, vscale));
            _mm_storeu_si128((__m128i *)(mask + i + 16 * q), _mm_maskz_set1_epi8(keep, 1));
        }
    }
    for (; i < i1; i++) {
        fl_philox4 r = fl_philox_block(seed, stream, (uint64_t)((offset + i) / 4));
        uint8_t keep = fl_u32_to_unit(r.v[(offset + i) % 4]) >= rate;
        mask[i] = keep;
        y[i] = keep ? x[i] * scale : 0.0f;
    }
}

FL_AVX512 void fl_simd_dropout_bwd(int64_t i0, int64_t i1, float scale, const uint8_t *mask, const float *dy,
                                   float *dx, int accumulate) {
    const __m512 vs = _mm512_set1_ps(scale);
    int64_t i = i0;
    for (; i + 16 <= i1; i += 16) {
        __mmask16 keep = _mm_test_epi8_mask(_mm_loadu_si128((const __m128i *)(mask + i)), _mm_set1_epi8(-1));
        __m512 g = _mm512_maskz_mul_ps(keep, _mm512_loadu_ps(dy + i), vs);
        if (accumulate) g = _mm512_add_ps(_mm512_loadu_ps(dx + i), g);
        _mm512_storeu_ps(dx + i, g);
    }
    for (; i < i1; i++) {
        float g = mask[i] ? dy[i] * scale : 0.0f;
        dx[i] = accumulate ? dx[i] + g : g;
    }
}

FL_AVX512 void fl_simd_adam(int64_t i0, int64_t i1, float *w, float *m, float *v, const float *g, float lr_t,
                            float b1, float b2, float eps, float wd, float lr) {
    const __m512 one_b1 = _mm512_set1_ps(1.0f - b1), one_b2 = _mm512_set1_ps(1.0f - b2);
    const __m512 vlr = _mm512_set1_ps(lr_t), veps = _mm512_set1_ps(eps), vwd = _mm512_set1_ps(wd),
                 vlr0 = _mm512_set1_ps(lr);
    int64_t i = i0;
    for (; i + 16 <= i1; i += 16) {
        __m512 gv = _mm512_loadu_ps(g + i), mv = _mm512_loadu_ps(m + i), vv = _mm512_loadu_ps(v + i);
        __m512 wv = _mm512_loadu_ps(w + i);
        /* AdamW: w -= w * weight_decay * lr, before the Adam step */
        if (wd != 0.0f) wv = _mm512_sub_ps(wv, _mm512_mul_ps(_mm512_mul_ps(wv, vwd), vlr0));
        /* mm = m + (g - m) * (1 - b1); vv = v + (g*g - v) * (1 - b2) */
        __m512 mm = _mm512_add_ps(mv, _mm512_mul_ps(_mm512_sub_ps(gv, mv), one_b1));
        __m512 nv = _mm512_add_ps(vv, _mm512_mul_ps(_mm512_sub_ps(_mm512_mul_ps(gv, gv), vv), one_b2));
        /* w -= lr_t * mm / (sqrt(vv) + eps) */
        __m512 step = _mm512_div_ps(_mm512_mul_ps(vlr, mm), _mm512_add_ps(_mm512_sqrt_ps(nv), veps));
        _mm512_storeu_ps(m + i, mm);
        _mm512_storeu_ps(v + i, nv);
        _mm512_storeu_ps(w + i, _mm512_sub_ps(wv, step));
    }
    for (; i < i1; i++) {
        if (wd != 0.0f) w[i] -= w[i] * wd * lr;
        fl_adam_update(&w[i], &m[i], &v[i], g[i], lr_t, b1, b2, eps);
    }
}

#else /* no AVX-512 in this build: fl_cpu_simd() is 0 and these are never called */

int fl_simd_max_rows(int cols) { (void)cols; return 1; }
int fl_simd_max_rows_taps(void) { return 1; }
void fl_simd_dw3(const float *x, int64_t xj, int64_t xseg, const float *gy, int64_t gyj, int64_t gyseg, int nseg,
                 int nj, int ct, int cols, float *dw, int64_t dw_kw, int64_t ldc) {
    (void)x; (void)xj; (void)xseg; (void)gy; (void)gyj; (void)gyseg; (void)nseg; (void)nj; (void)ct; (void)cols;
    (void)dw; (void)dw_kw; (void)ldc;
}
int fl_simd_taps_ok(int taps, int cols) { (void)taps; (void)cols; return 0; }
void fl_simd_run(const fl_simd_tile *t, int rows) { (void)t; (void)rows; }
void fl_simd_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc, const float *bias, int relu,
                  int threads) {
    (void)trans_a; (void)trans_b; (void)M; (void)N; (void)K; (void)A; (void)lda; (void)B; (void)ldb; (void)beta;
    (void)C; (void)ldc; (void)bias; (void)relu; (void)threads;
}
void fl_simd_relu_grad_colsum(int64_t rows, int n, int relu, const float *y, const float *src, float *dy, float *db) {
    (void)rows; (void)n; (void)relu; (void)y; (void)src; (void)dy; (void)db;
}
void fl_simd_maxpool_fwd_sample(int H, int W, int C, int OH, int OW, int KH, int KW, int SH, int SW, int PT, int PL,
                                const float *x, float *y, int32_t *argmax) {
    (void)H; (void)W; (void)C; (void)OH; (void)OW; (void)KH; (void)KW; (void)SH; (void)SW; (void)PT; (void)PL; (void)x;
    (void)y; (void)argmax;
}
void fl_simd_maxpool_bwd_sample(int H, int W, int C, int OH, int OW, int KH, int KW, int SH, int SW, int PT, int PL,
                                const float *dy, const int32_t *argmax, float *dx, int accumulate) {
    (void)H; (void)W; (void)C; (void)OH; (void)OW; (void)KH; (void)KW; (void)SH; (void)SW; (void)PT; (void)PL; (void)dy;
    (void)argmax; (void)dx; (void)accumulate;
}
void fl_simd_unpool_grad(int POH, int POW, int C, int KH, int KW, int SH, int SW, int act, const float *pooled,
                         const float *dpooled, const int32_t *argmax, float *dst, int64_t dst_row, float *db) {
    (void)POH; (void)POW; (void)C; (void)KH; (void)KW; (void)SH; (void)SW; (void)act; (void)pooled; (void)dpooled;
    (void)argmax; (void)dst; (void)dst_row; (void)db;
}
void fl_simd_dropout_fwd(int64_t i0, int64_t i1, int64_t offset, float rate, uint64_t seed, uint64_t stream,
                         const float *x, float *y, uint8_t *mask) {
    (void)i0; (void)i1; (void)offset; (void)rate; (void)seed; (void)stream; (void)x; (void)y; (void)mask;
}
void fl_simd_dropout_bwd(int64_t i0, int64_t i1, float scale, const uint8_t *mask, const float *dy, float *dx,
                         int accumulate) {
    (void)i0; (void)i1; (void)scale; (void)mask; (void)dy; (void)dx; (void)accumulate;
}
void fl_simd_adam(int64_t i0, int64_t i1, float *w, float *m, float *v, const float *g, float lr_t, float b1,
                  float b2, float eps, float wd, float lr) {
    (void)i0; (void)i1; (void)w; (void)m; (void)v; (void)g; (void)lr_t; (void)b1; (void)b2; (void)eps; (void)wd;
    (void)lr;
}

#endif
