/*
 * cpu_rnn.c — the recurrent layers on the CPU (SimpleRNN, LSTM, GRU; see
 * fl_rnn_desc in backend/backend.h). Forward: one GEMM projects every
 * timestep's input at once (x W), then each step is one GEMM h' R and the
 * gate formulas (ops/rnn_math.h) over the batch. Backward through time:
 * per step the gate derivatives and one GEMM for the state's gradient
 * (dpre R^T); the weight gradients and dx are GEMMs over all steps at once
 * from the saved pre-activation gradients.
 *
 * aux (per call, batch-major, indexed by input time tin):
 *   A  [n, t, G*u]  gates (after forward)        DP [n, t, G*u] d/d input pre-activations
 *   DR [n, t, G*u]  d/d recurrent pre-activations (GRU reset_after; else DP)
 *   HP [n, t, u]    state before the step        CP [n, t, u]   LSTM carry before the step
 *   RH [n, t, u]    GRU: h' Rh + brh (reset_after) or r h'
 *   RG [n, G*u]     a step's h' R                ST [n, 3u]     dh, dc, drh
 */
#include "cpu_internal.h"
#include "cpu_simd.h"
#include "ops/rnn_math.h"

#include <omp.h>
#include <string.h>

/* C[M, N] (beta: +)= op(A) op(B), row-major with leading dimensions, on
 * `threads` threads (1 inside a parallel region). */
static void gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                 int64_t ldb, float beta, float *C, int64_t ldc, int threads) {
    if (M == 0 || N == 0) return;
    if (fl_cpu_simd()) {
        fl_simd_gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, NULL, 0, threads);
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
                1.0f, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

typedef fl_rnn_bufs rnn_bufs; /* the layout: ops/rnn_math.h */
#define bufs fl_rnn_split

/* The samples of a batch are independent through time: each thread runs
 * the whole recurrence on its own rows (one parallel region per call, no
 * barrier per step, which matters when other processes share the cores);
 * at least 8 rows a thread. */
static int batch_threads(const fl_rnn_desc *d) {
    int nt = fl_cpu_threads();
    return d->n >= 8 * nt ? nt : (int)(d->n / 8 > 1 ? d->n / 8 : 1);
}

/* forward of samples [b0, b1) through every step */
static void fwd_rows(const fl_rnn_desc *d, int64_t b0, int64_t b1, const float *r, const float *bi, const float *br,
                     const float *mask, const fl_rnn_states *st, float *y, rnn_bufs B) {
    const int64_t T = d->t, u = d->u, gu = (int64_t)fl_rnn_gates(d) * u, rows = b1 - b0;
    const int two_phase = d->cell == FL_RNN_GRU && !d->reset_after;
    for (int64_t k = 0; k < T; k++) {
        const int64_t tin = d->go_backwards ? T - 1 - k : k;
        const int64_t tnext = d->go_backwards ? tin - 1 : tin + 1;
        const int last = k == T - 1;
        float *hp = B.HP + tin * u, *cp = B.CP + tin * u; /* rows of stride T*u */
        if (k == 0) /* the initial state: given (initial_state) or zeros */
            for (int64_t b = b0; b < b1; b++) {
                if (st && st->h0) memcpy(hp + b * T * u, st->h0 + b * u, (size_t)u * sizeof(float));
                else memset(hp + b * T * u, 0, (size_t)u * sizeof(float));
                if (st && st->c0) memcpy(cp + b * T * u, st->c0 + b * u, (size_t)u * sizeof(float));
                else memset(cp + b * T * u, 0, (size_t)u * sizeof(float));
            }
        /* RG[rows, gu] = h' R (GRU reset_after False: the z and r columns) */
        gemm(0, 0, rows, two_phase ? 2 * u : gu, u, hp + b0 * T * u, T * u, r, gu, 0.0f, B.RG + b0 * gu, gu, 1);
        for (int phase = two_phase ? FL_RNN_PHASE_ZR : FL_RNN_PHASE_ALL; phase <= (two_phase ? FL_RNN_PHASE_H : 0);
             phase++) {
            if (phase == FL_RNN_PHASE_H) /* RG[:, 2u:] = (r h') Rh */
                gemm(0, 0, rows, u, u, B.RH + (b0 * T + tin) * u, T * u, r + 2 * u, gu, 0.0f, B.RG + b0 * gu + 2 * u,
                     gu, 1);
            for (int64_t b = b0; b < b1; b++) {
                float *a = B.A + (b * T + tin) * gu;
                const float *rg = B.RG + b * gu, *h0 = hp + b * T * u, *c0 = cp + b * T * u;
                float *rh = B.RH + (b * T + tin) * u;
                float m = mask ? mask[b * T + tin] : 1.0f;
                /* the state after the step: the next step's, or the final one (return_state) */
                float *hout = !last ? B.HP + (b * T + tnext) * u : st && st->hT ? st->hT + b * u : NULL;
                float *cout = !last ? B.CP + (b * T + tnext) * u : st && st->cT ? st->cT + b * u : NULL;
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

void fl_cpu_rnn_fwd(const fl_rnn_desc *d, const float *x, const float *w, const float *r, const float *bias,
                    const float *mask, const fl_rnn_states *st, float *y, float *aux) {
    const int64_t n = d->n, T = d->t, gu = (int64_t)fl_rnn_gates(d) * d->u;
    const float *bi = d->has_bias ? bias : NULL;
    const float *br = d->has_bias && d->cell == FL_RNN_GRU && d->reset_after ? bias + gu : NULL;
    rnn_bufs B = bufs(d, aux);
    /* every step's input projection at once: A[n*t, gu] = x[n*t, d] W */
    gemm(0, 0, n * T, gu, d->d, x, d->d, w, gu, 0.0f, B.A, gu, fl_cpu_threads());
#pragma omp parallel num_threads(batch_threads(d))
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        fwd_rows(d, n * t / nt, n * (t + 1) / nt, r, bi, br, mask, st, y, B);
    }
}

/* db[j] = sum over rows of g[rows, ld] column j, j < cols */
static void colsum(int64_t rows, int64_t cols, const float *g, int64_t ld, float *db) {
#pragma omp parallel for num_threads(fl_cpu_threads()) schedule(static)
    for (int64_t j = 0; j < cols; j++) {
        double s = 0;
        for (int64_t i = 0; i < rows; i++) s += g[i * ld + j];
        db[j] = (float)s;
    }
}

/* a masked step's output is the carried state, or 0 (zero_masked: no gradient) */
static int out_live(const fl_rnn_desc *d, const float *mask, int64_t row) {
    return !d->zero_masked || !mask || mask[row] > 0.5f;
}

/* backward through time of samples [b0, b1): the pre-activation gradients
 * DP (and DR) of every step */
static void bwd_rows(const fl_rnn_desc *d, int64_t b0, int64_t b1, const float *r, const float *mask, const float *dy,
                     const fl_rnn_states *st, rnn_bufs B) {
    const int64_t n = d->n, T = d->t, u = d->u, gu = (int64_t)fl_rnn_gates(d) * u, rows = b1 - b0;
    const int two_phase = d->cell == FL_RNN_GRU && !d->reset_after;
    const int split = d->cell == FL_RNN_GRU && d->reset_after; /* DR differs from DP */
    float *DR = split ? B.DR : B.DP;
    float *dh = B.ST, *dc = B.ST + n * u, *drh = B.RG;
    for (int64_t b = b0; b < b1; b++)
        for (int64_t j = 0; j < u; j++) {
            dh[b * u + j] = (!d->return_sequences && out_live(d, mask, b * T + (d->go_backwards ? 0 : T - 1))
                                ? dy[b * u + j] : 0.0f) + (st && st->dhT ? st->dhT[b * u + j] : 0.0f);
            dc[b * u + j] = st && st->dcT ? st->dcT[b * u + j] : 0.0f;
        }
    const int want_dh0 = st && st->dh0;
    for (int64_t k = T - 1; k >= 0; k--) {
        const int64_t tin = d->go_backwards ? T - 1 - k : k, tout = d->reverse_output ? T - 1 - k : k;
        if (d->return_sequences)
            for (int64_t b = b0; b < b1; b++)
                if (out_live(d, mask, b * T + tin))
                    for (int64_t j = 0; j < u; j++) dh[b * u + j] += dy[(b * T + tout) * u + j];
        for (int phase = two_phase ? FL_RNN_PHASE_ZR : FL_RNN_PHASE_ALL; phase <= (two_phase ? FL_RNN_PHASE_H : 0);
             phase++) {
            if (phase == FL_RNN_PHASE_H) /* drh[rows, u] = dpre_h Rh^T */
                gemm(0, 1, rows, u, u, B.DP + (b0 * T + tin) * gu + 2 * u, T * gu, r + 2 * u, gu, 0.0f,
                     drh + b0 * u, u, 1);
            for (int64_t b = b0; b < b1; b++) {
                const int64_t row = b * T + tin;
                const float *a = B.A + row * gu, *h0 = B.HP + row * u, *c0 = B.CP + row * u, *rh = B.RH + row * u;
                float m = mask ? mask[row] : 1.0f;
                for (int j = 0; j < u; j++)
                    fl_rnn_bwd_unit(d, phase, j, a, rh[j], h0[j], c0[j], m, dh + b * u + j, dc + b * u + j,
                                    B.DP + row * gu, DR + row * gu, phase == FL_RNN_PHASE_H ? drh[b * u + j] : 0.0f);
            }
        }
        /* dh += dpre_rec R^T (GRU reset_after False: the z and r columns; hh's went through drh);
         * after the first step only when the initial state's gradient is wanted */
        if (k > 0 || want_dh0)
            gemm(0, 1, rows, u, two_phase ? 2 * u : gu, DR + (b0 * T + tin) * gu, T * gu, r, gu, 1.0f, dh + b0 * u, u,
                 1);
    }
    /* the gradients of the initial state */
    for (int64_t b = b0; b < b1; b++) {
        if (want_dh0) memcpy(st->dh0 + b * u, dh + b * u, (size_t)u * sizeof(float));
        if (st && st->dc0) memcpy(st->dc0 + b * u, dc + b * u, (size_t)u * sizeof(float));
    }
}

void fl_cpu_rnn_bwd(const fl_rnn_desc *d, const float *x, const float *w, const float *r, const float *bias,
                    const float *mask, const fl_rnn_states *st, const float *dy, float *aux, float *dx, float dx_beta, float *dw, float *dr,
                    float *db) {
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
        bwd_rows(d, n * t / nt, n * (t + 1) / nt, r, mask, dy, st, B);
    }
    /* the weight gradients and dx over every step at once */
    if (dw) gemm(1, 0, d->d, gu, n * T, x, d->d, B.DP, gu, 0.0f, dw, gu, th);
    if (dx) gemm(0, 1, n * T, d->d, gu, B.DP, gu, w, gu, dx_beta, dx, d->d, th);
    if (dr) {
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
