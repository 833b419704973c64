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

/* (which level runs, fl_cpu_simd and fl_cpu_avx2_kernels, is decided in cpu_env.c) */

#if FL_HAVE_AVX512

/* ------------------------------------------------------- micro-kernel
 *
 * cpu_microkernel.h in zmm registers: acc[R][V] holds an R x 16V tile of C.
 * With R*V <= 28 the accumulators, the V B vectors and the broadcast stay in
 * the 32 registers. The taps form: a convolution whose output has one vector
 * of channels (16 or fewer) ran the plain kernel with V = 1, one broadcast of
 * x per FMA, which the load ports bound well under the FMA rate (ResNet-20's
 * 16-channel stage at 260 GFLOP/s on a Zen 5, against ~370 for its 32-channel
 * one); with taps, R + 2 broadcasts serve 3R FMAs, R up to 24. */
#define FL_VEC_BITS 512
#include "cpu_microkernel.h"

#define MK_ROWS14(V)                                                                                          \
    MK_DEFINE(1, V, 0) MK_DEFINE(2, V, 0) MK_DEFINE(3, V, 0) MK_DEFINE(4, V, 0) MK_DEFINE(5, V, 0)             \
    MK_DEFINE(6, V, 0) MK_DEFINE(7, V, 0) MK_DEFINE(8, V, 0) MK_DEFINE(9, V, 0) MK_DEFINE(10, V, 0)            \
    MK_DEFINE(11, V, 0) MK_DEFINE(12, V, 0) MK_DEFINE(13, V, 0) MK_DEFINE(14, V, 0)
MK_ROWS14(1)
MK_ROWS14(2)
MK_DEFINE(1, 3, 0) MK_DEFINE(2, 3, 0) MK_DEFINE(3, 3, 0) MK_DEFINE(4, 3, 0) MK_DEFINE(5, 3, 0) MK_DEFINE(6, 3, 0)
MK_DEFINE(7, 3, 0) MK_DEFINE(8, 3, 0)
MK_DEFINE(1, 4, 0) MK_DEFINE(2, 4, 0) MK_DEFINE(3, 4, 0) MK_DEFINE(4, 4, 0) MK_DEFINE(5, 4, 0) MK_DEFINE(6, 4, 0)

typedef void (*mk_fn)(const fl_simd_tile *);
#define MK_ROW_FNS(V)                                                                                          \
    {NULL,           mk_1_##V##_0_512,  mk_2_##V##_0_512,  mk_3_##V##_0_512,  mk_4_##V##_0_512,                 \
     mk_5_##V##_0_512,  mk_6_##V##_0_512,  mk_7_##V##_0_512,  mk_8_##V##_0_512,  mk_9_##V##_0_512,              \
     mk_10_##V##_0_512, mk_11_##V##_0_512, mk_12_##V##_0_512, mk_13_##V##_0_512, mk_14_##V##_0_512}
static const mk_fn mk_v1[15] = MK_ROW_FNS(1);
static const mk_fn mk_v2[15] = MK_ROW_FNS(2);
static const mk_fn mk_v3[9] = {NULL,         mk_1_3_0_512, mk_2_3_0_512, mk_3_3_0_512, mk_4_3_0_512,
                               mk_5_3_0_512, mk_6_3_0_512, mk_7_3_0_512, mk_8_3_0_512};
static const mk_fn mk_v4[7] = {NULL, mk_1_4_0_512, mk_2_4_0_512, mk_3_4_0_512, mk_4_4_0_512, mk_5_4_0_512,
                               mk_6_4_0_512};

#define MKT_ROWS 24
MKT_DEFINE(1, 0) MKT_DEFINE(2, 0) MKT_DEFINE(3, 0) MKT_DEFINE(4, 0) MKT_DEFINE(5, 0) MKT_DEFINE(6, 0)
MKT_DEFINE(7, 0) MKT_DEFINE(8, 0) MKT_DEFINE(9, 0) MKT_DEFINE(10, 0) MKT_DEFINE(11, 0) MKT_DEFINE(12, 0)
MKT_DEFINE(13, 0) MKT_DEFINE(14, 0) MKT_DEFINE(15, 0) MKT_DEFINE(16, 0) MKT_DEFINE(17, 0) MKT_DEFINE(18, 0)
MKT_DEFINE(19, 0) MKT_DEFINE(20, 0) MKT_DEFINE(21, 0) MKT_DEFINE(22, 0) MKT_DEFINE(23, 0) MKT_DEFINE(24, 0)
static const mk_fn mkt3[MKT_ROWS + 1] = {
    NULL,          mkt3_1_0_512,  mkt3_2_0_512,  mkt3_3_0_512,  mkt3_4_0_512,  mkt3_5_0_512,  mkt3_6_0_512,
    mkt3_7_0_512,  mkt3_8_0_512,  mkt3_9_0_512,  mkt3_10_0_512, mkt3_11_0_512, mkt3_12_0_512, mkt3_13_0_512,
    mkt3_14_0_512, mkt3_15_0_512, mkt3_16_0_512, mkt3_17_0_512, mkt3_18_0_512, mkt3_19_0_512, mkt3_20_0_512,
    mkt3_21_0_512, mkt3_22_0_512, mkt3_23_0_512, mkt3_24_0_512};

MKD_DEFINE(1, 0) MKD_DEFINE(2, 0) MKD_DEFINE(3, 0) MKD_DEFINE(4, 0) MKD_DEFINE(5, 0) MKD_DEFINE(6, 0)
MKD_DEFINE(7, 0) MKD_DEFINE(8, 0)
typedef void (*mkd_fn)(const float *, int64_t, int64_t, const float *, int64_t, int64_t, int, int, __mmask16,
                       float *, int64_t, int64_t);
static const mkd_fn mkd3[FL_SIMD_DW3_CT + 1] = {NULL,         mkd3_1_0_512, mkd3_2_0_512, mkd3_3_0_512,
                                                mkd3_4_0_512, mkd3_5_0_512, mkd3_6_0_512, mkd3_7_0_512,
                                                mkd3_8_0_512};

void fl_avx512_dw3(const float *x, int64_t xj, int64_t xseg, const float *gy, int64_t gyj, int64_t gyseg, int nseg,
                   int nj, int ct, int cols, float *dw, int64_t dw_kw, int64_t ldc) {
    mkd3[ct](x, xj, xseg, gy, gyj, gyseg, nseg, nj, vm_first(cols), dw, dw_kw, ldc);
}

int fl_avx512_max_rows(int cols) { return cols > 48 ? 6 : cols > 32 ? 8 : 14; }
int fl_avx512_max_rows_taps(int cols) { (void)cols; return MKT_ROWS; }

void fl_avx512_run(const fl_simd_tile *t, int rows) {
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
            int rm = fl_avx512_max_rows(nc);
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
                    fl_avx512_run(&t, (int)(r1 - r0));
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

int fl_avx512_max_rows(int cols) { (void)cols; return 1; }
int fl_avx512_max_rows_taps(int cols) { (void)cols; return 1; }
void fl_avx512_dw3(const float *x, int64_t xj, int64_t xseg, const float *gy, int64_t gyj, int64_t gyseg, int nseg,
                   int nj, int ct, int cols, float *dw, int64_t dw_kw, int64_t ldc) {
    (void)x; (void)xj; (void)xseg; (void)gy; (void)gyj; (void)gyseg; (void)nseg; (void)nj; (void)ct; (void)cols;
    (void)dw; (void)dw_kw; (void)ldc;
}
void fl_avx512_run(const fl_simd_tile *t, int rows) { (void)t; (void)rows; }
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
