/*
 * cpu_rnn.c — the recurrent layers on the CPU (SimpleRNN, LSTM, GRU; see
 * fl_rnn_desc in backend/backend.h). Forward: one GEMM projects every
 * timestep's input at once (x W), then each step is one GEMM h' R and the
 * gate formulas over the batch. Backward through time: per step the gate
 * derivatives and one GEMM for the state's gradient (dpre R^T); the weight
 * gradients and dx are GEMMs over all steps at once from the saved
 * pre-activation gradients.
 *
 * The gate formulas: Keras's default activations (tanh, with sigmoid for
 * the gates) of LSTM, GRU (reset_after) and SimpleRNN run as vector loops
 * over a row's units with flynn's own exp (fl_fast_exp, cpu_fastmath.h: a degree-6
 * polynomial, ~2 ulp; tanh and sigmoid from it, absolute error < 2e-7),
 * compiled for AVX2+FMA where the CPU has it; libm's scalar tanhf and expf
 * were 25% of lstm_text's training time. Every other combination (other
 * activations, GRU with reset_after False) runs the shared per-unit formulas
 * of ops/rnn_math.h, as the CUDA kernels do.
 *
 * Threads: the samples of a batch are independent through time, so each
 * thread runs the whole recurrence on its own rows (one parallel region per
 * call, no barrier per step, which matters when other processes share the
 * cores); the all-steps GEMMs use every thread.
 *
 * States (fl_rnn_states): h0/c0 start the recurrence (else zeros); hT/cT
 * get the carried state after the last step; backward adds dhT/dcT to the
 * final carried gradients and writes dh0/dc0, the carried gradients after
 * the first step (so the recurrent GEMM runs for step 0 too when dh0 is
 * wanted).
 *
 * aux (per call, batch-major, indexed by input time tin; ops/rnn_math.h,
 * the same on every backend):
 *   A  [n, t, G*u]  gates (after forward)        DP [n, t, G*u] d/d input pre-activations
 *   DR [n, t, G*u]  d/d recurrent pre-activations (GRU reset_after; else DP)
 *   HP [n, t, u]    state before the step        CP [n, t, u]   LSTM carry before the step
 *   RH [n, t, u]    GRU: h' Rh + brh (reset_after) or r h'
 *   RG [n, G*u]     a step's h' R                ST [n, 3u]     dh, dc, drh
 */
#include "cpu_internal.h"
#include "cpu_simd.h"
#include "ops/rnn_math.h"
#include "cpu_fastmath.h"

#include <omp.h>
#include <stdint.h>
#include <string.h>

/* C[M, N] (beta: +)= op(A) op(B), row-major with leading dimensions, on
 * `threads` threads (1 inside a parallel region). */
static void gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                 int64_t ldb, float beta, float *C, int64_t ldc, int threads) {
    if (M == 0 || N == 0) return;
    if (K == 0) {
        for (int64_t i = 0; i < M && beta == 0.0f; i++) memset(C + i * ldc, 0, (size_t)N * sizeof(float));
        return;
    }
    if (fl_cpu_own_gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, NULL, 0, threads)) return;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
                1.0f, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

typedef fl_rnn_bufs rnn_bufs; /* the layout: ops/rnn_math.h */
#define bufs fl_rnn_split

/* ------------------------------------------------------ vector gate math */

static inline __attribute__((always_inline)) float fast_sigmoid(float x) { return 1.0f / (1.0f + fl_fast_exp(-x)); }
/* tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|) */
static inline __attribute__((always_inline)) float fast_tanh(float x) {
    float ax = x < 0 ? -x : x, e = fl_fast_exp(-2.0f * ax), t = (1.0f - e) / (1.0f + e);
    return x < 0 ? -t : t;
}

/* One step of one sample, forward, for the vector cells: pre-activations
 * a (G*u: x W, overwritten with the gates), rg = h' R, bi/br the biases
 * (NULL: none), h0/c0 the state before the step, keep = !masked; writes the
 * state after the step to hout/cout (hout may alias nothing else; cout NULL
 * for cells without a carry), the output to yo (NULL: none; zero: write 0
 * as zero_masked asks for a masked step), GRU's saved part to rh. */
#define FWD_ROW_BODY                                                                                                   \
    if (bi) {                                                                                                          \
        _Pragma("omp simd") for (int j = 0; j < gu; j++) a[j] += bi[j];                                                \
    }                                                                                                                  \
    if (cell == FL_RNN_LSTM) {                                                                                         \
        _Pragma("omp simd") for (int j = 0; j < gu; j++) a[j] += rg[j];                                                \
        _Pragma("omp simd") for (int j = 0; j < u; j++) {                                                              \
            float i = fast_sigmoid(a[j]), f = fast_sigmoid(a[u + j]), g = fast_tanh(a[2 * u + j]);                     \
            float o = fast_sigmoid(a[3 * u + j]);                                                                      \
            float c = f * c0[j] + i * g;                                                                               \
            a[j] = i; a[u + j] = f; a[2 * u + j] = g; a[3 * u + j] = o;                                                \
            hout[j] = o * fast_tanh(c);                                                                                \
            cout[j] = c;                                                                                               \
        }                                                                                                              \
    } else if (cell == FL_RNN_GRU) { /* reset_after */                                                                 \
        _Pragma("omp simd") for (int j = 0; j < 2 * u; j++) a[j] += rg[j];                                             \
        if (br) {                                                                                                      \
            _Pragma("omp simd") for (int j = 0; j < 2 * u; j++) a[j] += br[j];                                         \
        }                                                                                                              \
        _Pragma("omp simd") for (int j = 0; j < u; j++) rh[j] = rg[2 * u + j];                                         \
        if (br) {                                                                                                      \
            _Pragma("omp simd") for (int j = 0; j < u; j++) rh[j] += br[2 * u + j];                                    \
        }                                                                                                              \
        _Pragma("omp simd") for (int j = 0; j < u; j++) {                                                              \
            float z = fast_sigmoid(a[j]), r = fast_sigmoid(a[u + j]);                                                  \
            float hh = fast_tanh(a[2 * u + j] + r * rh[j]);                                                            \
            a[j] = z; a[u + j] = r; a[2 * u + j] = hh;                                                                 \
            hout[j] = z * h0[j] + (1.0f - z) * hh;                                                                     \
        }                                                                                                              \
    } else {                                                                                                           \
        _Pragma("omp simd") for (int j = 0; j < u; j++) {                                                              \
            float h = fast_tanh(a[j] + rg[j]);                                                                         \
            a[j] = h;                                                                                                  \
            hout[j] = h;                                                                                               \
        }                                                                                                              \
    }                                                                                                                  \
    if (!keep) { /* a masked step carries the state over */                                                            \
        memcpy(hout, h0, (size_t)u * sizeof(float));                                                                   \
        if (cell == FL_RNN_LSTM) memcpy(cout, c0, (size_t)u * sizeof(float));                                          \
    }                                                                                                                  \
    if (yo) {                                                                                                          \
        if (zero) memset(yo, 0, (size_t)u * sizeof(float));                                                           \
        else memcpy(yo, hout, (size_t)u * sizeof(float));                                                             \
    }

/* Backward of one step of one sample for the vector cells (the formulas of
 * fl_rnn_bwd_unit): dh, dc in: the gradient of the state after the step;
 * out: of the state before it, less the part through h' R. */
#define BWD_ROW_BODY                                                                                                   \
    const float kf = keep ? 1.0f : 0.0f, nk = 1.0f - kf; /* selects by multiplying: exact, and they vectorise */      \
    if (cell == FL_RNN_LSTM) {                                                                                         \
        _Pragma("omp simd") for (int j = 0; j < u; j++) {                                                              \
            float i = a[j], f = a[u + j], g = a[2 * u + j], o = a[3 * u + j];                                          \
            float tc = fast_tanh(f * c0[j] + i * g);                                                                   \
            float dhp = dh[j], dcp = dc[j], dhn = dhp * kf;                                                            \
            float dcn = dcp * kf + dhn * o * (1.0f - tc * tc);                                                         \
            dp[j] = dcn * g * (i * (1.0f - i));                                                                        \
            dp[u + j] = dcn * c0[j] * (f * (1.0f - f));                                                                \
            dp[2 * u + j] = dcn * i * (1.0f - g * g);                                                                  \
            dp[3 * u + j] = dhn * tc * (o * (1.0f - o));                                                               \
            dc[j] = dcn * f + dcp * nk;                                                                                \
            dh[j] = dhp * nk;                                                                                          \
        }                                                                                                              \
    } else if (cell == FL_RNN_GRU) { /* reset_after */                                                                 \
        _Pragma("omp simd") for (int j = 0; j < u; j++) {                                                              \
            float z = a[j], r = a[u + j], hh = a[2 * u + j], dhp = dh[j];                                              \
            float dhn = dhp * kf, carry = dhp * nk;                                                                 \
            float dz = dhn * (h0[j] - hh), dph = dhn * (1.0f - z) * (1.0f - hh * hh);                                  \
            dp[j] = dz * (z * (1.0f - z));                                                                             \
            dp[2 * u + j] = dph;                                                                                       \
            dp[u + j] = dph * rh[j] * (r * (1.0f - r));                                                                \
            dr[j] = dp[j];                                                                                             \
            dr[u + j] = dp[u + j];                                                                                     \
            dr[2 * u + j] = dph * r;                                                                                   \
            dh[j] = carry + dhn * z;                                                                                   \
        }                                                                                                              \
    } else {                                                                                                           \
        _Pragma("omp simd") for (int j = 0; j < u; j++) {                                                              \
            float hy = a[j], dhp = dh[j], dhn = dhp * kf;                                                              \
            dp[j] = dhn * (1.0f - hy * hy);                                                                            \
            dh[j] = dhp * nk;                                                                                        \
        }                                                                                                              \
    }

#define FWD_ROW_ARGS                                                                                                   \
    int cell, int u, int gu, float *restrict a, const float *restrict rg, const float *restrict bi,                    \
        const float *restrict br, const float *restrict h0, const float *restrict c0, int keep, float *restrict hout,  \
        float *restrict cout, float *restrict yo, int zero, float *restrict rh
#define BWD_ROW_ARGS                                                                                                   \
    int cell, int u, const float *restrict a, const float *restrict h0, const float *restrict c0,                     \
        const float *restrict rh, int keep, float *restrict dh, float *restrict dc, float *restrict dp,                \
        float *restrict dr

static void fwd_row_generic(FWD_ROW_ARGS) { FWD_ROW_BODY }
static void bwd_row_generic(BWD_ROW_ARGS) { BWD_ROW_BODY }
#define RNN_HAVE_AVX2 FL_HAVE_AVX2_TARGET
#if RNN_HAVE_AVX2
FL_AVX2_TARGET static void fwd_row_avx2(FWD_ROW_ARGS) { FWD_ROW_BODY }
FL_AVX2_TARGET static void bwd_row_avx2(BWD_ROW_ARGS) { BWD_ROW_BODY }
#endif

static int use_avx2(void) { return fl_cpu_avx2(); }

/* Whether a layer's gates run the vector rows above: Keras's default
 * activations, and GRU only with reset_after (one GEMM per step). */
static int vector_cell(const fl_rnn_desc *d) {
    if (d->act != FL_ACT_TANH) return 0;
    if (d->cell == FL_RNN_SIMPLE) return 1;
    if (d->ract != FL_ACT_SIGMOID) return 0;
    return d->cell == FL_RNN_LSTM || (d->cell == FL_RNN_GRU && d->reset_after);
}

/* ----------------------------------------------------------- dropout */

/* Recurrent dropout (fl_rnn_states.hdrop): RG[b, g*u:(g+1)*u] = (h'[b] *
 * hdrop[b, g]) R[:, g*u:(g+1)*u] for the gates g < ng of samples [b0, b1),
 * one GEMM per gate on the masked copies in HM; h'[b] at hp + b*T*u. */
static void rec_proj_masked(const fl_rnn_desc *d, int64_t b0, int64_t b1, int ng, const float *hp, const float *hd,
                            const float *r, rnn_bufs B) {
    const int64_t T = d->t, u = d->u, gu = (int64_t)fl_rnn_gates(d) * u;
    for (int64_t b = b0; b < b1; b++)
        for (int g = 0; g < ng; g++) {
            const float *h = hp + b * T * u, *m = hd + b * gu + g * u;
            float *o = B.HM + b * gu + g * u;
#pragma omp simd
            for (int64_t j = 0; j < u; j++) o[j] = h[j] * m[j];
        }
    for (int g = 0; g < ng; g++)
        gemm(0, 0, b1 - b0, u, u, B.HM + b0 * gu + g * u, gu, r + g * u, gu, 0.0f, B.RG + b0 * gu + g * u, gu, 1);
}

/* Its backward: dh[b] += sum over g < ng of (dpre_g[b] R_g^T) * hdrop[b, g],
 * dpre_g[b] at dre + b*T*gu + g*u; the products go through HM. */
static void rec_grad_masked(const fl_rnn_desc *d, int64_t b0, int64_t b1, int ng, const float *dre, const float *hd,
                            const float *r, float *dh, rnn_bufs B) {
    const int64_t T = d->t, u = d->u, gu = (int64_t)fl_rnn_gates(d) * u;
    for (int g = 0; g < ng; g++)
        gemm(0, 1, b1 - b0, u, u, dre + b0 * T * gu + g * u, T * gu, r + g * u, gu, 0.0f, B.HM + b0 * gu + g * u, gu,
             1);
    for (int64_t b = b0; b < b1; b++)
        for (int g = 0; g < ng; g++) {
            const float *p = B.HM + b * gu + g * u, *m = hd + b * gu + g * u;
            float *o = dh + b * u;
#pragma omp simd
            for (int64_t j = 0; j < u; j++) o[j] += p[j] * m[j];
        }
}

/* XS[b, t, :] = src[b, t, :] * m[b, :] over every sample and step (k
 * values a step; m's rows have stride ldm), on every thread */
static void mask_steps(int64_t n, int64_t T, int64_t k, const float *src, const float *m, int64_t ldm, float *xs) {
#pragma omp parallel for num_threads(n * T * k < 32768 ? 1 : fl_cpu_threads())
    for (int64_t i = 0; i < n * T; i++) {
        const float *s = src + i * k, *mb = m + (i / T) * ldm;
        float *o = xs + i * k;
#pragma omp simd
        for (int64_t j = 0; j < k; j++) o[j] = s[j] * mb[j];
    }
}

/* ----------------------------------------------------------- forward */

/* The samples of a batch are independent through time: each thread runs
 * the whole recurrence on its own rows; at least 8 rows a thread. */
static int batch_threads(const fl_rnn_desc *d) {
    int nt = fl_cpu_threads();
    return d->n >= 8 * nt ? nt : (int)(d->n / 8 > 1 ? d->n / 8 : 1);
}

/* forward of samples [b0, b1) through every step */
static void fwd_rows(const fl_rnn_desc *d, int64_t b0, int64_t b1, const float *r, const float *bi, const float *br,
                     const float *mask, const fl_rnn_states *st, float *y, rnn_bufs B) {
    const int64_t T = d->t, u = d->u, gu = (int64_t)fl_rnn_gates(d) * u, rows = b1 - b0;
    const int two_phase = d->cell == FL_RNN_GRU && !d->reset_after;
    const int vec = vector_cell(d), avx2 = vec && use_avx2();
    const float *h0s = st ? st->h0 : NULL, *c0s = st && d->cell == FL_RNN_LSTM ? st->c0 : NULL;
    float *hTs = st ? st->hT : NULL, *cTs = st && d->cell == FL_RNN_LSTM ? st->cT : NULL;
    const float *hd = st ? st->hdrop : NULL;
    /* the state before step 0: h0 and c0, or zeros */
    const int64_t t0 = d->go_backwards ? T - 1 : 0;
    for (int64_t b = b0; b < b1; b++) {
        float *hp = B.HP + (b * T + t0) * u, *cp = B.CP + (b * T + t0) * u;
        if (h0s) memcpy(hp, h0s + b * u, (size_t)u * sizeof(float));
        else memset(hp, 0, (size_t)u * sizeof(float));
        if (c0s) memcpy(cp, c0s + b * u, (size_t)u * sizeof(float));
        else memset(cp, 0, (size_t)u * sizeof(float));
    }
    for (int64_t k = 0; k < T; k++) {
        const int64_t tin = d->go_backwards ? T - 1 - k : k;
        const int64_t tnext = d->go_backwards ? tin - 1 : tin + 1;
        const int last = k == T - 1;
        float *hp = B.HP + tin * u, *cp = B.CP + tin * u; /* rows of stride T*u */
        /* RG[rows, gu] = h' R (GRU reset_after False: the z and r columns) */
        if (hd) rec_proj_masked(d, b0, b1, two_phase ? 2 : fl_rnn_gates(d), hp, hd, r, B);
        else gemm(0, 0, rows, two_phase ? 2 * u : gu, u, hp + b0 * T * u, T * u, r, gu, 0.0f, B.RG + b0 * gu, gu, 1);
        if (vec) {
            for (int64_t b = b0; b < b1; b++) {
                float *a = B.A + (b * T + tin) * gu;
                const float *rg = B.RG + b * gu, *h0 = hp + b * T * u, *c0 = cp + b * T * u;
                const int keep = !mask || mask[b * T + tin] > 0.5f;
                /* the state after the step: the next step's HP/CP, or hT/cT (or scratch in ST) */
                float *hout = last ? (hTs ? hTs + b * u : B.ST + b * 3 * u) : B.HP + (b * T + tnext) * u;
                float *cout = last ? (cTs ? cTs + b * u : B.ST + b * 3 * u + u) : B.CP + (b * T + tnext) * u;
                float *yo = d->return_sequences ? y + (b * T + (d->reverse_output ? T - 1 - k : k)) * u
                            : last ? y + b * u : NULL;
                const int zero = d->zero_masked && !keep;
                float *rh = B.RH + (b * T + tin) * u;
#if RNN_HAVE_AVX2
                if (avx2) fwd_row_avx2(d->cell, (int)u, (int)gu, a, rg, bi, br, h0, c0, keep, hout, cout, yo, zero, rh);
                else
#endif
                    fwd_row_generic(d->cell, (int)u, (int)gu, a, rg, bi, br, h0, c0, keep, hout, cout, yo, zero, rh);
            }
            continue;
        }
        for (int phase = two_phase ? FL_RNN_PHASE_ZR : FL_RNN_PHASE_ALL; phase <= (two_phase ? FL_RNN_PHASE_H : 0);
             phase++) {
            if (phase == FL_RNN_PHASE_H && hd) /* the candidate's recurrent dropout: RH = r h' hdrop_h */
                for (int64_t b = b0; b < b1; b++) {
                    float *rh = B.RH + (b * T + tin) * u;
                    const float *m = hd + b * gu + 2 * u;
                    for (int64_t j = 0; j < u; j++) rh[j] *= m[j];
                }
            if (phase == FL_RNN_PHASE_H) /* RG[:, 2u:] = (r h') Rh */
                gemm(0, 0, rows, u, u, B.RH + (b0 * T + tin) * u, T * u, r + 2 * u, gu, 0.0f, B.RG + b0 * gu + 2 * u,
                     gu, 1);
            for (int64_t b = b0; b < b1; b++) {
                float *a = B.A + (b * T + tin) * gu;
                const float *rg = B.RG + b * gu, *h0 = hp + b * T * u, *c0 = cp + b * T * u;
                float *rh = B.RH + (b * T + tin) * u;
                float m = mask ? mask[b * T + tin] : 1.0f;
                float *hout = last ? (hTs ? hTs + b * u : NULL) : B.HP + (b * T + tnext) * u;
                float *cout = last ? (cTs ? cTs + b * u : NULL) : B.CP + (b * T + tnext) * u;
                float *yo = d->return_sequences ? y + (b * T + (d->reverse_output ? T - 1 - k : k)) * u
                            : last ? y + b * u : NULL;
                for (int j = 0; j < u; j++) {
                    float hv, cv;
                    fl_rnn_fwd_unit(d, phase, j, a, rg, bi, br, h0[j], c0[j], m, rh + j, &hv, &cv);
                    if (phase == FL_RNN_PHASE_ZR) continue;
                    if (hout) hout[j] = hv;
                    if (cout) cout[j] = cv;
                    if (yo) yo[j] = d->zero_masked && !(m > 0.5f) ? 0.0f : hv;
                }
            }
        }
    }
}

/* ------------------------------------------------- inference forward */

/* Inference (fl_rnn_desc.infer) keeps only the running state: per step, the
 * samples whose step is valid (mask 1) are gathered, their input and
 * recurrent projections are two GEMMs over those rows only, and the others
 * carry their state without any work, so padding (pre- or post-) costs
 * nothing, as PyTorch's packed sequences. The gate formulas are the
 * training forward's (FWD_ROW_BODY), so the numbers are the same up to the
 * GEMMs' summation order. Per sample floats of scratch (carved from aux,
 * which no backward reads): x and h gathered (d + u), c gathered (u), the
 * projections (2 G*u), the state h, c (2u), GRU's rh (u), a row index (1). */
/* The step's projections for inference: C[M, N] = X[M, K1] W[K1, N] +
 * H[M, K2] R[K2, N] (W and R rows ldb apart, C's ldc), in one pass that
 * writes C once: a tile of up to 6 rows x 16 columns in 12 AVX2
 * accumulators, B read straight from the weights (rows of 16 contiguous
 * floats, no packing: a step's rows are few, so packing per call would cost
 * as much as it saves). The columns past the last multiple of 16 go through
 * plain loops. K2 = 0 or K1 = 0 gives one product alone. */
#if RNN_HAVE_AVX2
#include <immintrin.h>
#define STEP_TILE(RR)                                                                                                  \
    FL_AVX2_TARGET static void step_tile_##RR(const float *X, int64_t ldx, int64_t K1, const float *W,                \
                                              const float *H, int64_t ldh, int64_t K2, const float *R, int64_t ldb,    \
                                              float *C, int64_t ldc) {                                                 \
        __m256 acc[RR][2];                                                                                             \
        _Pragma("GCC unroll 6") for (int r = 0; r < RR; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();            \
        for (int64_t k = 0; k < K1; k++) {                                                                             \
            const __m256 b0 = _mm256_loadu_ps(W + k * ldb), b1 = _mm256_loadu_ps(W + k * ldb + 8);                     \
            _Pragma("GCC unroll 6") for (int r = 0; r < RR; r++) {                                                     \
                const __m256 a = _mm256_broadcast_ss(X + r * ldx + k);                                                 \
                acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);                                                         \
                acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);                                                         \
            }                                                                                                          \
        }                                                                                                              \
        for (int64_t k = 0; k < K2; k++) {                                                                             \
            const __m256 b0 = _mm256_loadu_ps(R + k * ldb), b1 = _mm256_loadu_ps(R + k * ldb + 8);                     \
            _Pragma("GCC unroll 6") for (int r = 0; r < RR; r++) {                                                     \
                const __m256 a = _mm256_broadcast_ss(H + r * ldh + k);                                                 \
                acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);                                                         \
                acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);                                                         \
            }                                                                                                          \
        }                                                                                                              \
        _Pragma("GCC unroll 6") for (int r = 0; r < RR; r++) {                                                         \
            _mm256_storeu_ps(C + r * ldc, acc[r][0]);                                                                  \
            _mm256_storeu_ps(C + r * ldc + 8, acc[r][1]);                                                              \
        }                                                                                                              \
    }
STEP_TILE(1) STEP_TILE(2) STEP_TILE(3) STEP_TILE(4) STEP_TILE(5) STEP_TILE(6)
#undef STEP_TILE

FL_AVX2_TARGET static void step_gemm_avx2(int64_t M, int64_t N, const float *X, int64_t ldx, int64_t K1,
                                          const float *W, const float *H, int64_t ldh, int64_t K2, const float *R,
                                          int64_t ldb, float *C, int64_t ldc) {
    typedef void (*tile_fn)(const float *, int64_t, int64_t, const float *, const float *, int64_t, int64_t,
                            const float *, int64_t, float *, int64_t);
    static const tile_fn tile[7] = {NULL, step_tile_1, step_tile_2, step_tile_3, step_tile_4, step_tile_5, step_tile_6};
    const int64_t N16 = N / 16 * 16;
    for (int64_t c = 0; c < N16; c += 16) /* a column block of the weights stays in L1 across the rows */
        for (int64_t i = 0; i < M; i += 6) {
            const int rr = M - i < 6 ? (int)(M - i) : 6;
            tile[rr](X + i * ldx, ldx, K1, W + c, H + i * ldh, ldh, K2, R + c, ldb, C + i * ldc + c, ldc);
        }
    for (int64_t i = 0; i < M && N16 < N; i++) {
        float *o = C + i * ldc;
        for (int64_t j = N16; j < N; j++) o[j] = 0.0f;
        for (int64_t k = 0; k < K1; k++) {
            const float a = X[i * ldx + k], *b = W + k * ldb;
            for (int64_t j = N16; j < N; j++) o[j] += a * b[j];
        }
        for (int64_t k = 0; k < K2; k++) {
            const float a = H[i * ldh + k], *b = R + k * ldb;
            for (int64_t j = N16; j < N; j++) o[j] += a * b[j];
        }
    }
}
#endif

/* the same on any CPU: two GEMMs */
static void step_gemm(int avx2, int64_t M, int64_t N, const float *X, int64_t ldx, int64_t K1, const float *W,
                      const float *H, int64_t ldh, int64_t K2, const float *R, int64_t ldb, float *C, int64_t ldc) {
    if (M == 0) return;
#if RNN_HAVE_AVX2
    if (avx2) {
        step_gemm_avx2(M, N, X, ldx, K1, W, H, ldh, K2, R, ldb, C, ldc);
        return;
    }
#endif
    (void)avx2;
    gemm(0, 0, M, N, K1, X, ldx, W, ldb, 0.0f, C, ldc, 1);
    if (K2 > 0) gemm(0, 0, M, N, K2, H, ldh, R, ldb, K1 > 0 ? 1.0f : 0.0f, C, ldc, 1);
}

static int64_t infer_floats(const fl_rnn_desc *d) {
    return (int64_t)d->d + 2 * (int64_t)fl_rnn_gates(d) * d->u + 5 * (int64_t)d->u + 1;
}

static void infer_rows(const fl_rnn_desc *d, int64_t b0, int64_t b1, const float *x, const float *w, const float *r,
                       const float *bi, const float *br, const float *mask, const fl_rnn_states *st, float *y,
                       float *aux) {
    const int64_t T = d->t, u = d->u, din = d->d, gu = (int64_t)fl_rnn_gates(d) * u, rows = b1 - b0;
    const int lstm = d->cell == FL_RNN_LSTM, avx2 = use_avx2();
    float *X = aux + b0 * infer_floats(d), *Hc = X + rows * din, *Cc = Hc + rows * u, *AX = Cc + rows * u;
    float *RG = AX + rows * gu, *H = RG + rows * gu, *C = H + rows * u, *RH = C + rows * u;
    int32_t *idx = (int32_t *)(RH + rows * u);
    if (d->cell != FL_RNN_GRU) memset(RG, 0, (size_t)gu * sizeof(float)); /* h' R is in AX: adds 0 */
    const float *h0s = st ? st->h0 : NULL, *c0s = st && lstm ? st->c0 : NULL;
    float *hTs = st ? st->hT : NULL, *cTs = st && lstm ? st->cT : NULL;
    for (int64_t i = 0; i < rows; i++) {
        if (h0s) memcpy(H + i * u, h0s + (b0 + i) * u, (size_t)u * sizeof(float));
        else memset(H + i * u, 0, (size_t)u * sizeof(float));
        if (c0s) memcpy(C + i * u, c0s + (b0 + i) * u, (size_t)u * sizeof(float));
        else memset(C + i * u, 0, (size_t)u * sizeof(float));
    }
    for (int64_t k = 0; k < T; k++) {
        const int64_t tin = d->go_backwards ? T - 1 - k : k, tout = d->reverse_output ? T - 1 - k : k;
        int64_t na = 0;
        for (int64_t i = 0; i < rows; i++)
            if (!mask || mask[(b0 + i) * T + tin] > 0.5f) {
                memcpy(X + na * din, x + ((b0 + i) * T + tin) * din, (size_t)din * sizeof(float));
                memcpy(Hc + na * u, H + i * u, (size_t)u * sizeof(float));
                if (lstm) memcpy(Cc + na * u, C + i * u, (size_t)u * sizeof(float));
                idx[na++] = (int32_t)i;
            }
        /* x W + h' R at once, except for GRU (reset_after keeps h' Rh apart: RG) */
        if (d->cell == FL_RNN_GRU) {
            step_gemm(avx2, na, gu, X, din, din, w, NULL, 0, 0, NULL, gu, AX, gu);
            step_gemm(avx2, na, gu, NULL, 0, 0, NULL, Hc, u, u, r, gu, RG, gu);
        } else {
            step_gemm(avx2, na, gu, X, din, din, w, Hc, u, u, r, gu, AX, gu);
        }
        for (int64_t a = 0; a < na; a++) {
            const int64_t i = idx[a];
#if RNN_HAVE_AVX2
            if (avx2)
                fwd_row_avx2(d->cell, (int)u, (int)gu, AX + a * gu, RG + (d->cell == FL_RNN_GRU ? a * gu : 0), bi, br,
                             Hc + a * u, Cc + a * u, 1, H + i * u, C + i * u, NULL, 0, RH + i * u);
            else
#endif
                fwd_row_generic(d->cell, (int)u, (int)gu, AX + a * gu, RG + (d->cell == FL_RNN_GRU ? a * gu : 0), bi,
                                br, Hc + a * u, Cc + a * u, 1, H + i * u, C + i * u, NULL, 0, RH + i * u);
        }
        /* the outputs: the state, carried over a masked step, or 0 there (zero_masked) */
        if (d->return_sequences || k == T - 1)
            for (int64_t i = 0; i < rows; i++) {
                float *yo = d->return_sequences ? y + ((b0 + i) * T + tout) * u : y + (b0 + i) * u;
                if (d->zero_masked && mask && !(mask[(b0 + i) * T + tin] > 0.5f))
                    memset(yo, 0, (size_t)u * sizeof(float));
                else
                    memcpy(yo, H + i * u, (size_t)u * sizeof(float));
            }
    }
    if (hTs) memcpy(hTs + b0 * u, H, (size_t)(rows * u) * sizeof(float));
    if (cTs) memcpy(cTs + b0 * u, C, (size_t)(rows * u) * sizeof(float));
}

void fl_cpu_rnn_fwd(const fl_rnn_desc *d, const float *x, const float *w, const float *r, const float *bias,
                    const float *mask, const fl_rnn_states *st, float *y, float *aux) {
    const int64_t n = d->n, T = d->t, gu = (int64_t)fl_rnn_gates(d) * d->u;
    const float *bi = d->has_bias ? bias : NULL;
    const float *br = d->has_bias && d->cell == FL_RNN_GRU && d->reset_after ? bias + gu : NULL;
    rnn_bufs B = bufs(d, aux);
    if (n == 0 || T == 0) return;
    if (d->infer && vector_cell(d) && infer_floats(d) <= fl_rnn_aux_floats(d) && !(st && (st->xdrop || st->hdrop))) {
        /* blocks of 8-32 samples, about four per thread, taken as threads
         * come free: a thread that the OS parks (other processes on the
         * cores) holds up one block, not half the batch */
        const int nt = batch_threads(d);
        int64_t blk = n / (4 * (int64_t)nt);
        blk = blk < 8 ? 8 : blk > 32 ? 32 : blk;
        const int64_t nblk = (n + blk - 1) / blk;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
        for (int64_t k = 0; k < nblk; k++)
            infer_rows(d, k * blk, (k + 1) * blk < n ? (k + 1) * blk : n, x, w, r, bi, br, mask, st, y, aux);
        return;
    }
    /* every step's input projection at once: A[n*t, gu] = x[n*t, d] W;
     * with input dropout one GEMM per gate, (x xdrop_g) W_g */
    if (st && st->xdrop)
        for (int g = 0; g < fl_rnn_gates(d); g++) {
            mask_steps(n, T, d->d, x, st->xdrop + g * d->d, (int64_t)fl_rnn_gates(d) * d->d, B.XS);
            gemm(0, 0, n * T, d->u, d->d, B.XS, d->d, w + g * d->u, gu, 0.0f, B.A + g * d->u, gu, fl_cpu_threads());
        }
    else
        gemm(0, 0, n * T, gu, d->d, x, d->d, w, gu, 0.0f, B.A, gu, fl_cpu_threads());
#pragma omp parallel num_threads(batch_threads(d))
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        fwd_rows(d, n * t / nt, n * (t + 1) / nt, r, bi, br, mask, st, y, B);
    }
}

/* ---------------------------------------------------------- backward */

/* db[j] = sum over rows of g[rows, ld] column j, j < cols: each thread sums
 * a block of columns row after row (contiguous reads), in a fixed order. */
static void colsum(int64_t rows, int64_t cols, const float *g, int64_t ld, float *db) {
    const int nt = rows * cols < 65536 ? 1 : fl_cpu_threads();
#pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num(), T = omp_get_num_threads();
        const int64_t j0 = cols * t / T, j1 = cols * (t + 1) / T;
        enum { CB = 256 };
        for (int64_t c0 = j0; c0 < j1; c0 += CB) {
            const int64_t w = j1 - c0 < CB ? j1 - c0 : CB;
            double s[CB];
            memset(s, 0, sizeof s);
            for (int64_t i = 0; i < rows; i++) {
                const float *gr = g + i * ld + c0;
#pragma omp simd
                for (int64_t j = 0; j < w; j++) s[j] += gr[j];
            }
            for (int64_t j = 0; j < w; j++) db[c0 + j] = (float)s[j];
        }
    }
}

/* a masked step's output is the carried state, or 0 (zero_masked: no gradient) */
static int out_live(const fl_rnn_desc *d, const float *mask, int64_t row) {
    return !d->zero_masked || !mask || mask[row] > 0.5f;
}

/* backward through time of samples [b0, b1): the pre-activation gradients
 * DP (and DR) of every step, and dh0/dc0 */
static void bwd_rows(const fl_rnn_desc *d, int64_t b0, int64_t b1, const float *r, const float *mask,
                     const fl_rnn_states *st, const float *dy, rnn_bufs B) {
    const int64_t n = d->n, T = d->t, u = d->u, gu = (int64_t)fl_rnn_gates(d) * u, rows = b1 - b0;
    const int two_phase = d->cell == FL_RNN_GRU && !d->reset_after;
    const int split = d->cell == FL_RNN_GRU && d->reset_after; /* DR differs from DP */
    const int vec = vector_cell(d), avx2 = vec && use_avx2();
    const int lstm = d->cell == FL_RNN_LSTM;
    const float *dhT = st ? st->dhT : NULL, *dcT = st && lstm ? st->dcT : NULL;
    float *dh0 = st ? st->dh0 : NULL, *dc0 = st && lstm ? st->dc0 : NULL;
    const float *hd = st ? st->hdrop : NULL;
    float *DR = split ? B.DR : B.DP;
    float *dh = B.ST, *dc = B.ST + n * u, *drh = B.RG;
    for (int64_t b = b0; b < b1; b++)
        for (int64_t j = 0; j < u; j++) {
            float g = !d->return_sequences && out_live(d, mask, b * T + (d->go_backwards ? 0 : T - 1))
                          ? dy[b * u + j] : 0.0f;
            dh[b * u + j] = dhT ? g + dhT[b * u + j] : g;
            dc[b * u + j] = dcT ? dcT[b * u + j] : 0.0f;
        }
    for (int64_t k = T - 1; k >= 0; k--) {
        const int64_t tin = d->go_backwards ? T - 1 - k : k, tout = d->reverse_output ? T - 1 - k : k;
        if (d->return_sequences)
            for (int64_t b = b0; b < b1; b++)
                if (out_live(d, mask, b * T + tin)) {
                    const float *g = dy + (b * T + tout) * u;
                    float *h = dh + b * u;
#pragma omp simd
                    for (int64_t j = 0; j < u; j++) h[j] += g[j];
                }
        if (vec) {
            for (int64_t b = b0; b < b1; b++) {
                const int64_t row = b * T + tin;
                const int keep = !mask || mask[row] > 0.5f;
#if RNN_HAVE_AVX2
                if (avx2)
                    bwd_row_avx2(d->cell, (int)u, B.A + row * gu, B.HP + row * u, B.CP + row * u, B.RH + row * u, keep,
                                 dh + b * u, dc + b * u, B.DP + row * gu, DR + row * gu);
                else
#endif
                    bwd_row_generic(d->cell, (int)u, B.A + row * gu, B.HP + row * u, B.CP + row * u, B.RH + row * u,
                                    keep, dh + b * u, dc + b * u, B.DP + row * gu, DR + row * gu);
            }
        } else {
            for (int phase = two_phase ? FL_RNN_PHASE_ZR : FL_RNN_PHASE_ALL;
                 phase <= (two_phase ? FL_RNN_PHASE_H : 0); phase++) {
                if (phase == FL_RNN_PHASE_H) /* drh[rows, u] = dpre_h Rh^T */
                    gemm(0, 1, rows, u, u, B.DP + (b0 * T + tin) * gu + 2 * u, T * gu, r + 2 * u, gu, 0.0f,
                         drh + b0 * u, u, 1);
                if (phase == FL_RNN_PHASE_H && hd) /* d(r h' hdrop_h): r's part reads h' hdrop_h, h''s r hdrop_h */
                    for (int64_t b = b0; b < b1; b++)
                        for (int64_t j = 0; j < u; j++) drh[b * u + j] *= hd[b * gu + 2 * u + j];
                for (int64_t b = b0; b < b1; b++) {
                    const int64_t row = b * T + tin;
                    const float *a = B.A + row * gu, *h0 = B.HP + row * u, *c0 = B.CP + row * u, *rh = B.RH + row * u;
                    float m = mask ? mask[row] : 1.0f;
                    for (int j = 0; j < u; j++)
                        fl_rnn_bwd_unit(d, phase, j, a, rh[j], h0[j], c0[j], m, dh + b * u + j, dc + b * u + j,
                                        B.DP + row * gu, DR + row * gu,
                                        phase == FL_RNN_PHASE_H ? drh[b * u + j] : 0.0f);
                }
            }
        }
        /* dh += dpre_rec R^T (GRU reset_after False: the z and r columns; hh's went through drh) */
        if ((k > 0 || dh0) && hd)
            rec_grad_masked(d, b0, b1, two_phase ? 2 : fl_rnn_gates(d), DR + tin * gu, hd, r, dh, B);
        else if (k > 0 || dh0)
            gemm(0, 1, rows, u, two_phase ? 2 * u : gu, DR + (b0 * T + tin) * gu, T * gu, r, gu, 1.0f, dh + b0 * u, u,
                 1);
    }
    if (dh0) memcpy(dh0 + b0 * u, dh + b0 * u, (size_t)(rows * u) * sizeof(float));
    if (dc0) memcpy(dc0 + b0 * u, dc + b0 * u, (size_t)(rows * u) * sizeof(float));
}

void fl_cpu_rnn_bwd(const fl_rnn_desc *d, const float *x, const float *w, const float *r, const float *bias,
                    const float *mask, const fl_rnn_states *st, const float *dy, float *aux, float *dx, float dx_beta,
                    float *dw, float *dr, float *db) {
    (void)bias;
    const int64_t n = d->n, T = d->t, u = d->u, gu = (int64_t)fl_rnn_gates(d) * u;
    const int two_phase = d->cell == FL_RNN_GRU && !d->reset_after;
    const int split = d->cell == FL_RNN_GRU && d->reset_after;
    const int th = fl_cpu_threads();
    rnn_bufs B = bufs(d, aux);
    float *DR = split ? B.DR : B.DP;
#pragma omp parallel num_threads(batch_threads(d))
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        bwd_rows(d, n * t / nt, n * (t + 1) / nt, r, mask, st, dy, B);
    }
    /* the weight gradients and dx over every step at once */
    const float *xd = st ? st->xdrop : NULL, *hd = st ? st->hdrop : NULL;
    const int G = fl_rnn_gates(d);
    if (xd) { /* input dropout: gate g saw x xdrop_g */
        const int64_t din = d->d;
        for (int g = 0; g < G && dw; g++) {
            mask_steps(n, T, din, x, xd + g * din, G * din, B.XS);
            gemm(1, 0, din, u, n * T, B.XS, din, B.DP + g * u, gu, 0.0f, dw + g * u, gu, th);
        }
        for (int g = 0; g < G && dx; g++) { /* dx (beta: +)= sum over g of (dpre_g W_g^T) xdrop_g */
            gemm(0, 1, n * T, din, u, B.DP + g * u, gu, w + g * u, gu, 0.0f, B.XS, din, th);
            const float beta = g ? 1.0f : dx_beta;
#pragma omp parallel for num_threads(n * T * din < 32768 ? 1 : th)
            for (int64_t i = 0; i < n * T; i++) {
                const float *p = B.XS + i * din, *m = xd + (i / T) * G * din + g * din;
                float *o = dx + i * din;
                if (beta == 0.0f)
                    for (int64_t j = 0; j < din; j++) o[j] = p[j] * m[j];
                else
                    for (int64_t j = 0; j < din; j++) o[j] = beta * o[j] + p[j] * m[j];
            }
        }
    } else {
        if (dw) gemm(1, 0, d->d, gu, n * T, x, d->d, B.DP, gu, 0.0f, dw, gu, th);
        if (dx) gemm(0, 1, n * T, d->d, gu, B.DP, gu, w, gu, dx_beta, dx, d->d, th);
    }
    if (dr && hd) { /* recurrent dropout: gate g saw h' hdrop_g (GRU reset_after False's candidate: RH, masked) */
        for (int g = 0; g < (two_phase ? 2 : G); g++) {
            mask_steps(n, T, u, B.HP, hd + g * u, gu, B.XS);
            gemm(1, 0, u, u, n * T, B.XS, u, DR + g * u, gu, 0.0f, dr + g * u, gu, th);
        }
        if (two_phase) gemm(1, 0, u, u, n * T, B.RH, u, B.DP + 2 * u, gu, 0.0f, dr + 2 * u, gu, th);
    } else if (dr) {
        if (two_phase) {
            gemm(1, 0, u, 2 * u, n * T, B.HP, u, B.DP, gu, 0.0f, dr, gu, th);
            gemm(1, 0, u, u, n * T, B.RH, u, B.DP + 2 * u, gu, 0.0f, dr + 2 * u, gu, th);
        } else {
            gemm(1, 0, u, gu, n * T, B.HP, u, DR, gu, 0.0f, dr, gu, th);
        }
    }
    if (db && d->has_bias) {
        colsum(n * T, gu, B.DP, gu, db);
        if (split) colsum(n * T, gu, DR, gu, db + gu);
    }
}
