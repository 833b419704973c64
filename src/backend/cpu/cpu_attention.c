/*
 * cpu_attention.c — the CPU kernels of the sequence layers' normalisation and
 * attention: LayerNormalization (one fused pass per row forward, one per row
 * backward, the gamma/beta sums by column blocks), the batched GEMMs of
 * attention (one single-threaded OpenBLAS sgemm per (batch, head) block,
 * the blocks split between the OpenMP threads) and the masked softmax of the
 * attention weights with its backward. A softmax row with no mask and no
 * causal limit (the text models' case) is one vector pass for the maximum,
 * one for exp (fl_fast_exp, cpu_fastmath.h; AVX2 where the CPU has it) and
 * the sum, one for the scale; libm's scalar expf was 9% of
 * transformer_text's training time.
 */
#include "cpu_internal.h"
#include "cpu_fastmath.h"
#include "cpu_simd.h"

#include <string.h>


/* ---------------------------------------------------- LayerNormalization */

void fl_cpu_layernorm_fwd(int64_t rows, int c, float eps, int rms, const float *x, const float *gamma,
                          const float *beta, float *y, float *stats) {
#pragma omp parallel for schedule(static) PAR(rows * c)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * c;
        float *yr = y + (size_t)r * c;
        /* mean, then the biased variance about it (two passes over a row in cache) */
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int j = 0; j < c; j++) s += xr[j];
        const float mean = s / (float)c;
        float v = 0.0f;
#pragma omp simd reduction(+ : v)
        for (int j = 0; j < c; j++) { float d = xr[j] - mean; v += d * d; }
        const float inv = 1.0f / sqrtf(v / (float)c + eps);
        stats[2 * r] = mean;
        stats[2 * r + 1] = inv;
        const float sub = rms ? 0.0f : mean;
        for (int j = 0; j < c; j++) {
            float t = (xr[j] - sub) * inv;
            if (gamma) t *= gamma[j];
            if (beta) t += beta[j];
            yr[j] = t;
        }
    }
}

/* xhat = (x - mean) * inv, g = dy * gamma:
 *   layer norm: dx = inv * (g - mean(g) - xhat * mean(g * xhat))
 *   rms (y = x * inv * gamma): dx = inv * g - inv^3 * (x - mean) * mean(g * x)
 * dgamma = sum_rows dy * (rms ? x * inv : xhat), dbeta = sum_rows dy. */
void fl_cpu_layernorm_bwd(int64_t rows, int c, int rms, const float *x, const float *gamma, const float *stats,
                          const float *dy, float *dx, float dx_beta, float *dgamma, float *dbeta) {
    if (dx) {
#pragma omp parallel for schedule(static) PAR(rows * c)
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + (size_t)r * c, *gr = dy + (size_t)r * c;
            float *dr = dx + (size_t)r * c;
            const float mean = stats[2 * r], inv = stats[2 * r + 1];
            float sg = 0.0f, sgx = 0.0f;
            for (int j = 0; j < c; j++) {
                float g = gamma ? gr[j] * gamma[j] : gr[j];
                sg += g;
                sgx += g * (rms ? xr[j] : (xr[j] - mean) * inv);
            }
            const float mg = sg / (float)c, mgx = sgx / (float)c;
            for (int j = 0; j < c; j++) {
                float g = gamma ? gr[j] * gamma[j] : gr[j], d;
                if (rms) d = inv * g - inv * inv * inv * (xr[j] - mean) * mgx;
                else d = inv * (g - mg - (xr[j] - mean) * inv * mgx);
                dr[j] = dx_beta == 0.0f ? d : dr[j] + d;
            }
        }
    }
    if (!dgamma && !dbeta) return;
    /* column blocks in parallel, rows in order within each: deterministic */
    enum { CB = 64 };
    const int nblk = (c + CB - 1) / CB;
#pragma omp parallel for schedule(static) num_threads(rows * c < 32768 || nblk < 2 ? 1 : fl_cpu_threads())
    for (int b = 0; b < nblk; b++) {
        const int j0 = b * CB, j1 = j0 + CB < c ? j0 + CB : c;
        float sgam[CB], sbet[CB];
        memset(sgam, 0, sizeof sgam);
        memset(sbet, 0, sizeof sbet);
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + (size_t)r * c, *gr = dy + (size_t)r * c;
            const float mean = rms ? 0.0f : stats[2 * r], inv = stats[2 * r + 1];
            for (int j = j0; j < j1; j++) {
                sgam[j - j0] += gr[j] * (xr[j] - mean) * inv;
                sbet[j - j0] += gr[j];
            }
        }
        if (dgamma) memcpy(dgamma + j0, sgam, (size_t)(j1 - j0) * sizeof(float));
        if (dbeta) memcpy(dbeta + j0, sbet, (size_t)(j1 - j0) * sizeof(float));
    }
}

/* ------------------------------------------------------------ attention */

/* Block i (outer i / ninner, inner i % ninner) of a batched GEMM, on this
 * thread: flynn's own kernel where it wins (no packing, no beta pass:
 * OpenBLAS's overhead on a 128 x 128 x 16 block is as large as its
 * arithmetic); it computes C (+)= A B, so alpha is applied to C after, when C
 * started from zero. Else one single-threaded OpenBLAS call. */
/* Block i's A, B or C: the operand's base plus its outer and inner strides. */
static const float *blk_at(const float *p, const int64_t *st, const fl_gemm_desc *d, int64_t i) {
    return p + (i / d->ninner) * st[0] + (i % d->ninner) * st[1];
}
/* One block's GEMM, its operands already located. */
static void gemm_one(const fl_gemm_desc *d, const float *ai, const float *bi, float *ci) {
    const int own = d->beta == 0.0f || (d->beta == 1.0f && d->alpha == 1.0f);
    if (own && fl_cpu_own_gemm(d->ta, d->tb, d->m, d->n, d->k, ai, d->lda, bi, d->ldb, d->beta, ci, d->ldc, NULL, 0,
                               1)) {
        if (d->alpha != 1.0f)
            for (int r = 0; r < d->m; r++)
                for (int col = 0; col < d->n; col++) ci[(size_t)r * d->ldc + col] *= d->alpha;
        return;
    }
    cblas_sgemm(CblasRowMajor, d->ta ? CblasTrans : CblasNoTrans, d->tb ? CblasTrans : CblasNoTrans, d->m, d->n, d->k,
                d->alpha, ai, d->lda, bi, d->ldb, d->beta, ci, d->ldc);
}
static void gemm_block(const fl_gemm_desc *d, int64_t i, const float *a, const float *b, float *c) {
    gemm_one(d, blk_at(a, d->sa, d, i), blk_at(b, d->sb, d, i), (float *)blk_at(c, d->sc, d, i));
}

void fl_cpu_gemm_batched(const fl_gemm_desc *d, const float *a, const float *b, float *c) {
    const int64_t total = d->nouter * d->ninner;
    const double flops = 2.0 * d->m * d->n * d->k * (double)total;
#pragma omp parallel for schedule(static) num_threads(flops < 1e6 || total < 2 ? 1 : fl_cpu_threads())
    for (int64_t i = 0; i < total; i++) gemm_block(d, i, a, b, c);
}

/* The softmax of one unmasked row of n scores, in place. */
#define SOFTMAX_ROW_BODY                                                                                               \
    float mx = -INFINITY, sum = 0.0f;                                                                                  \
    _Pragma("omp simd reduction(max : mx)") for (int j = 0; j < n; j++) mx = s[j] > mx ? s[j] : mx;                    \
    _Pragma("omp simd reduction(+ : sum)") for (int j = 0; j < n; j++) {                                               \
        float e = fl_fast_exp(s[j] - mx);                                                                              \
        s[j] = e;                                                                                                      \
        sum += e;                                                                                                      \
    }                                                                                                                  \
    const float inv = 1.0f / sum;                                                                                      \
    _Pragma("omp simd") for (int j = 0; j < n; j++) s[j] *= inv;
static void softmax_row_plain(float *restrict s, int n) { SOFTMAX_ROW_BODY }
#if FL_HAVE_AVX2_TARGET
#include <immintrin.h>
/* fl_fast_exp's formula on 8 lanes with FMAs. The row's exp was 18-22% of
 * transformer_text's predict: built from the C formula, without FMA
 * contraction (-std=c11) and one vector per iteration, its dependency chain
 * of ~20 multiplies and adds ran at ~3 ns per element; this runs about twice
 * as fast. Differs from fl_fast_exp by rounding (an ulp or two); clamps |x|
 * at 87.3 (a NaN becomes -87.3). */
FL_AVX2_TARGET static inline __m256 exp8_fma(__m256 x) {
    const __m256 lim = _mm256_set1_ps(87.3f), big = _mm256_set1_ps(12582912.0f);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_sub_ps(_mm256_setzero_ps(), lim)), lim);
    const __m256 r = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), big);
    const __m256 n = _mm256_sub_ps(r, big);
    __m256 f = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    f = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), f);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, f), f, f), _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_castps_si256(r), _mm256_set1_epi32(0x4B400000)), 23);
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
}
FL_AVX2_TARGET static float hsum8(__m256 v) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}
FL_AVX2_TARGET static void softmax_row_avx2(float *restrict s, int n) {
    const int n8 = n & ~7;
    __m256 vm = _mm256_set1_ps(-INFINITY);
    for (int j = 0; j < n8; j += 8) vm = _mm256_max_ps(_mm256_loadu_ps(s + j), vm); /* a NaN score is skipped */
    float t[8], mx = -INFINITY;
    _mm256_storeu_ps(t, vm);
    for (int i = 0; i < 8; i++) mx = t[i] > mx ? t[i] : mx;
    for (int j = n8; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    const __m256 m = _mm256_set1_ps(mx);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int j = 0;
    for (; j + 16 <= n8; j += 16) { /* two independent chains per iteration */
        const __m256 e0 = exp8_fma(_mm256_sub_ps(_mm256_loadu_ps(s + j), m));
        const __m256 e1 = exp8_fma(_mm256_sub_ps(_mm256_loadu_ps(s + j + 8), m));
        _mm256_storeu_ps(s + j, e0);
        _mm256_storeu_ps(s + j + 8, e1);
        a0 = _mm256_add_ps(a0, e0);
        a1 = _mm256_add_ps(a1, e1);
    }
    for (; j < n8; j += 8) {
        const __m256 e0 = exp8_fma(_mm256_sub_ps(_mm256_loadu_ps(s + j), m));
        _mm256_storeu_ps(s + j, e0);
        a0 = _mm256_add_ps(a0, e0);
    }
    float sum = hsum8(_mm256_add_ps(a0, a1));
    for (; j < n; j++) {
        const float e = fl_fast_exp(s[j] - mx);
        s[j] = e;
        sum += e;
    }
    const float inv = 1.0f / sum;
    const __m256 vi = _mm256_set1_ps(inv);
    for (j = 0; j < n8; j += 8) _mm256_storeu_ps(s + j, _mm256_mul_ps(_mm256_loadu_ps(s + j), vi));
    for (j = n8; j < n; j++) s[j] *= inv;
}
/* The same on 16 lanes where the AVX-512 kernels run (fl_cpu_simd): the
 * power of two by vscalefps instead of adding to the exponent bits, and the
 * rounding by vrndscaleps: 13 instructions per 16 lanes instead of 17 per
 * 8 (perf, transformer_text's predict at batch 32 on a Zen 4: the softmax
 * went from 15% of the time to 11%). Same polynomial and clamping as
 * exp8_fma, so results match it but for the last bit or two. */
__attribute__((target("avx512f,avx512vl,avx512dq,fma"))) static inline __m512 exp16(__m512 x) {
    const __m512 lim = _mm512_set1_ps(87.3f);
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_sub_ps(_mm512_setzero_ps(), lim)), lim);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    f = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), f);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, f), f, f), _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}
__attribute__((target("avx512f,avx512vl,avx512dq,fma"))) static void softmax_row_avx512(float *restrict s, int n) {
    const __mmask16 tail = (__mmask16)((1u << (n & 15)) - 1);
    const int n16 = n & ~15;
    __m512 vm = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < n16; j += 16) vm = _mm512_max_ps(_mm512_loadu_ps(s + j), vm); /* a NaN score is skipped */
    if (tail) vm = _mm512_mask_max_ps(vm, tail, _mm512_maskz_loadu_ps(tail, s + n16), vm);
    const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(vm));
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int j = 0;
    for (; j + 32 <= n16; j += 32) { /* two independent chains per iteration */
        const __m512 e0 = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), m));
        const __m512 e1 = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j + 16), m));
        _mm512_storeu_ps(s + j, e0);
        _mm512_storeu_ps(s + j + 16, e1);
        a0 = _mm512_add_ps(a0, e0);
        a1 = _mm512_add_ps(a1, e1);
    }
    for (; j < n16; j += 16) {
        const __m512 e0 = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), m));
        _mm512_storeu_ps(s + j, e0);
        a0 = _mm512_add_ps(a0, e0);
    }
    if (tail) {
        const __m512 e0 = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, s + n16), m));
        _mm512_mask_storeu_ps(s + n16, tail, e0);
        a1 = _mm512_mask_add_ps(a1, tail, a1, e0);
    }
    const __m512 vi = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)));
    for (j = 0; j < n16; j += 16) _mm512_storeu_ps(s + j, _mm512_mul_ps(_mm512_loadu_ps(s + j), vi));
    if (tail) _mm512_mask_storeu_ps(s + n16, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, s + n16), vi));
}
#endif
/* level: 2 AVX-512, 1 AVX2, 0 the portable loop */
static void softmax_row(float *s, int n, int level) {
#if FL_HAVE_AVX2_TARGET
    if (level == 2) { softmax_row_avx512(s, n); return; }
    if (level == 1) { softmax_row_avx2(s, n); return; }
#endif
    (void)level;
    softmax_row_plain(s, n);
}
static int softmax_level(void) { return fl_cpu_simd() ? 2 : fl_cpu_avx2() ? 1 : 0; }

/* Whether row r (batch b, query i) has no unmasked key under modes 0 and 2. */
static bool row_all_masked(const fl_attn_desc *d, const float *qmask, const float *vmask, const float *amask,
                           int64_t b, int i) {
    const int tq = d->tq, tk = d->tk, jmax = d->causal && i + 1 < tk ? i + 1 : tk;
    if (qmask && qmask[(size_t)b * tq + i] <= 0.5f) return true;
    for (int j = 0; j < jmax; j++)
        if ((!vmask || vmask[(size_t)b * tk + j] > 0.5f) && (!amask || amask[((size_t)b * tq + i) * tk + j] > 0.5f))
            return false;
    return true;
}

/* Row r (batch b, head, query i) of the attention weights, in place. */
static void softmax_row_masked(const fl_attn_desc *d, const float *qmask, const float *vmask, const float *amask,
                               float *sr, int64_t r, int level) {
    const int tq = d->tq, tk = d->tk;
    if (!qmask && !vmask && !(amask && d->mask_mode != 1) && !d->causal) { softmax_row(sr, tk, level); return; }
    const int64_t b = r / ((int64_t)d->heads * tq);
    const int i = (int)(r % tq);
    const float *vm = vmask ? vmask + (size_t)b * tk : NULL;
    const float *am = amask && d->mask_mode != 1 ? amask + ((size_t)b * tq + i) * tk : NULL;
    const int jmax = d->causal && i + 1 < tk ? i + 1 : tk; /* j < jmax may be unmasked */
    const bool qoff = qmask && qmask[(size_t)b * tq + i] <= 0.5f;
    if (d->mask_mode != 1) {
        float mx = -INFINITY;
        for (int j = 0; j < jmax; j++)
            if (!qoff && (!vm || vm[j] > 0.5f) && (!am || am[j] > 0.5f)) mx = sr[j] > mx ? sr[j] : mx;
        if (mx == -INFINITY) { /* all masked: Keras's where(mask, p, 0) leaves zeros; JAX's softmax is uniform */
            for (int j = 0; j < tk; j++) sr[j] = d->mask_mode == 2 ? 1.0f / (float)tk : 0.0f;
            return;
        }
        float sum = 0.0f;
        for (int j = 0; j < tk; j++) {
            bool on = j < jmax && !qoff && (!vm || vm[j] > 0.5f) && (!am || am[j] > 0.5f);
            float e = on ? expf(sr[j] - mx) : 0.0f;
            sr[j] = e;
            sum += e;
        }
        const float inv = 1.0f / sum;
        for (int j = 0; j < tk; j++) sr[j] *= inv;
    } else {
        if (qoff) { memset(sr, 0, (size_t)tk * sizeof(float)); return; }
        float mx = -INFINITY;
        for (int j = 0; j < tk; j++) {
            if (j >= jmax || (vm && vm[j] <= 0.5f)) sr[j] = sr[j] - 1.0e9f;
            mx = sr[j] > mx ? sr[j] : mx;
        }
        float sum = 0.0f;
        for (int j = 0; j < tk; j++) { float e = expf(sr[j] - mx); sr[j] = e; sum += e; }
        const float inv = 1.0f / sum;
        for (int j = 0; j < tk; j++) sr[j] *= inv;
    }
}

void fl_cpu_attn_softmax_fwd(const fl_attn_desc *d, const float *qmask, const float *vmask, const float *amask,
                             float *s) {
    const int64_t rows = d->n * d->heads * d->tq;
    const int level = softmax_level();
#pragma omp parallel for schedule(static) PAR(rows * d->tk)
    for (int64_t r = 0; r < rows; r++) softmax_row_masked(d, qmask, vmask, amask, s + (size_t)r * d->tk, r, level);
}

/* The three steps one (batch, head) block at a time: the block's tq x tk
 * scores (64 KiB for 128 x 128) stay in L2 from their GEMM through the
 * softmax to the GEMM with v, instead of the whole batch's scores (16 MiB
 * for transformer_text at batch 128) going to memory and back twice. The
 * same kernels in the same order per element as gemm_batched,
 * attn_softmax_fwd, gemm_batched: the same numbers. keep 0 (predict and
 * evaluate, no backward reads the weights): s is only scratch, and each
 * thread reuses one block of it, so the scores never leave the cache (+10-17%
 * samples/s for transformer_text's predict at batch 128 and 512 on a Zen 4
 * EPYC); s's contents are then undefined. */
void fl_cpu_attn_fwd_blocked(const fl_gemm_desc *sd, const fl_gemm_desc *pd, const fl_attn_desc *d,
                             const float *q, const float *k, const float *v, const float *qmask,
                             const float *vmask, const float *amask, float *s, float *out, int keep) {
    const int64_t total = sd->nouter * sd->ninner, blk = (int64_t)d->tq * d->tk;
    const double flops = 2.0 * (double)d->tq * d->tk * (d->dk + d->dv) * (double)total;
    const int level = softmax_level(), nt = flops < 1e6 || total < 2 ? 1 : fl_cpu_threads();
    const bool reuse = !keep && total >= nt; /* a block per thread fits in s */
#pragma omp parallel num_threads(nt)
    {
        float *mine = reuse ? s + (size_t)fl_cpu_thread_id() * blk : NULL;
#pragma omp for schedule(static)
        for (int64_t i = 0; i < total; i++) {
            float *si = reuse ? mine : (float *)blk_at(s, sd->sc, sd, i);
            gemm_one(sd, blk_at(q, sd->sa, sd, i), blk_at(k, sd->sb, sd, i), si);
            for (int64_t r = 0; r < d->tq; r++)
                softmax_row_masked(d, qmask, vmask, amask, si + (size_t)r * d->tk, i * d->tq + r, level);
            gemm_one(pd, si, blk_at(v, pd->sb, pd, i), (float *)blk_at(out, pd->sc, pd, i));
        }
    }
}

/* Row r of the softmax's backward, in place on gr (the weights' gradient). */
static void softmax_bwd_row(const fl_attn_desc *d, const float *qmask, const float *vmask, const float *amask,
                            const float *pr, float *gr, int64_t r) {
    const int tk = d->tk;
    if (d->mask_mode == 2 &&
        row_all_masked(d, qmask, vmask, amask, r / ((int64_t)d->heads * d->tq), (int)(r % d->tq))) {
        memset(gr, 0, (size_t)tk * sizeof(float));
        return;
    }
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int j = 0; j < tk; j++) s += gr[j] * pr[j];
#pragma omp simd
    for (int j = 0; j < tk; j++) gr[j] = pr[j] * (gr[j] - s);
}

void fl_cpu_attn_softmax_bwd(const fl_attn_desc *d, const float *qmask, const float *vmask, const float *amask,
                             const float *p, float *dp) {
    const int64_t rows = d->n * d->heads * d->tq;
    const int tk = d->tk;
#pragma omp parallel for schedule(static) PAR(rows * tk)
    for (int64_t r = 0; r < rows; r++)
        softmax_bwd_row(d, qmask, vmask, amask, p + (size_t)r * tk, dp + (size_t)r * tk, r);
}

/* The backward's five steps one (batch, head) block at a time, for a
 * backward without dropout on the weights: dV = W^T dO (vd), G = dO V^T (gd),
 * G = softmax'(G), dQ = scale G K (qd), dK = scale G^T Q (kd). The block's
 * weights p (64 KiB for 128 x 128) are read from memory once and its G stays
 * in L2, instead of the whole batch's G (64 MiB for transformer_text at
 * batch 512) being written and read four times. Each block runs the same
 * kernels in the same order per element as the five whole-batch calls, and
 * each block's dq, dk, dv are its own rows and columns: the same numbers
 * (where dq, dk and dv are one buffer, q, k and v being one node, each
 * element still gets dv, then dq, then dk added in that order). A NULL dv,
 * dq or dk is skipped. g: scratch, a block per thread when there are at
 * least as many blocks as threads (its contents are then undefined), else
 * the whole batch's. */
void fl_cpu_attn_bwd_blocked(const fl_gemm_desc *vd, const fl_gemm_desc *gd, const fl_gemm_desc *qd,
                             const fl_gemm_desc *kd, const fl_attn_desc *d, const float *q, const float *k,
                             const float *v, const float *p, const float *dout, const float *qmask,
                             const float *vmask, const float *amask, float *g, float *dq, float *dk, float *dv) {
    const int64_t total = gd->nouter * gd->ninner, blk = (int64_t)d->tq * d->tk;
    const double flops = 2.0 * (double)d->tq * d->tk * (2 * d->dv + 2 * d->dk) * (double)total;
    const int nt = flops < 1e6 || total < 2 ? 1 : fl_cpu_threads();
    const bool reuse = total >= nt;
#pragma omp parallel num_threads(nt)
    {
        float *mine = reuse ? g + (size_t)fl_cpu_thread_id() * blk : NULL;
#pragma omp for schedule(static)
        for (int64_t i = 0; i < total; i++) {
            float *gi = reuse ? mine : (float *)blk_at(g, gd->sc, gd, i);
            const float *pi = blk_at(p, gd->sc, gd, i);
            if (dv) gemm_one(vd, pi, blk_at(dout, vd->sb, vd, i), (float *)blk_at(dv, vd->sc, vd, i));
            if (!dq && !dk) continue;
            gemm_one(gd, blk_at(dout, gd->sa, gd, i), blk_at(v, gd->sb, gd, i), gi);
            for (int64_t r = 0; r < d->tq; r++)
                softmax_bwd_row(d, qmask, vmask, amask, pi + (size_t)r * d->tk, gi + (size_t)r * d->tk, i * d->tq + r);
            if (dq) gemm_one(qd, gi, blk_at(k, qd->sb, qd, i), (float *)blk_at(dq, qd->sc, qd, i));
            if (dk) gemm_one(kd, gi, blk_at(q, kd->sb, kd, i), (float *)blk_at(dk, kd->sc, kd, i));
        }
    }
}
