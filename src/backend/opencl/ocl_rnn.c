/*
 * ocl_rnn.c — the OpenCL backend's entries for SimpleRNN, LSTM, GRU (rnn_fwd, rnn_bwd): the CPU's
 * orchestration (backend/cpu/cpu_rnn.c, the aux layout of ops/rnn_math.h) as CUDA's cu_rnn.cuh runs it,
 * with CLBlast for the projections (ocl_gemm) and kernels/rnn.cl's per-step kernels for the gates
 * (ops/rnn_math.h's formulas, the CPU's): every cell, both GRU forms, masks, initial and final states,
 * return_sequences, go_backwards, reverse_output, zero_masked, recurrent and input dropout.
 */
#include "backend/opencl/opencl_internal.h"

#include <stddef.h>

#include "ops/rnn_math.h"

/* row-major C[M, N] (beta: +)= op(A) op(B) */
static void gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                 int64_t ldb, float beta, float *C, int64_t ldc) {
    ocl_gemm(ta, tb, (size_t)M, (size_t)N, (size_t)K, 1.0f, A, (size_t)lda, B, (size_t)ldb, beta, C, (size_t)ldc);
}

/* the shared kernels' launches (kernels/rnn.cl says what each computes) */
static void init_rows(int64_t n, int64_t u, int64_t stride, const float *src, float *p) {
    ocl_launch l = ocl_args(OCL_k_rnn_init_rows);
    ocl_arg_i64(&l, n); ocl_arg_i32(&l, (int)u); ocl_arg_i64(&l, stride); BUF(l, src); BUF(l, p);
    ocl_run1(&l, n * u, 256);
}

static void mask_rows(int64_t n, int64_t k, int64_t cols, const float *src, int64_t ss, const float *m, int64_t ldm,
                      float *out, int64_t ldo) {
    ocl_launch l = ocl_args(OCL_k_rnn_mask_rows);
    ocl_arg_i64(&l, n); ocl_arg_i32(&l, (int)k); ocl_arg_i32(&l, (int)cols); BUF(l, src); ocl_arg_i64(&l, ss);
    BUF(l, m); ocl_arg_i64(&l, ldm); BUF(l, out); ocl_arg_i64(&l, ldo);
    ocl_run1(&l, n * cols, 256);
}

static void scale_rows(int64_t n, int64_t u, float *p, int64_t ps, const float *m, int64_t ldm) {
    ocl_launch l = ocl_args(OCL_k_rnn_scale_rows);
    ocl_arg_i64(&l, n); ocl_arg_i32(&l, (int)u); BUF(l, p); ocl_arg_i64(&l, ps); BUF(l, m); ocl_arg_i64(&l, ldm);
    ocl_run1(&l, n * u, 256);
}

static void mask_sum(int64_t n, int64_t u, int ng, const float *p, int64_t ldp, const float *m, int64_t ldm,
                     float *dh) {
    ocl_launch l = ocl_args(OCL_k_rnn_mask_sum);
    ocl_arg_i64(&l, n); ocl_arg_i32(&l, (int)u); ocl_arg_i32(&l, ng); BUF(l, p); ocl_arg_i64(&l, ldp); BUF(l, m);
    ocl_arg_i64(&l, ldm); BUF(l, dh);
    ocl_run1(&l, n * u, 256);
}

static void mask_steps(int64_t rows, int64_t T, int64_t k, const float *src, const float *m, int64_t ldm, int acc,
                       float beta, float *xs) {
    ocl_launch l = ocl_args(OCL_k_rnn_mask_steps);
    ocl_arg_i64(&l, rows); ocl_arg_i64(&l, T); ocl_arg_i32(&l, (int)k); BUF(l, src); BUF(l, m); ocl_arg_i64(&l, ldm);
    ocl_arg_i32(&l, acc); ocl_arg_f32(&l, beta); BUF(l, xs);
    ocl_run1(&l, rows * k, 256);
}

static void fwd_step(const fl_rnn_desc *d, int phase, int64_t tin, int64_t tnext, int64_t k, int last,
                     const fl_rnn_bufs *B, const float *bi, const float *br, const float *mask, float *y, float *hT,
                     float *cT) {
    ocl_launch l = ocl_args(OCL_k_rnn_fwd_step);
    ocl_arg_raw(&l, d, sizeof *d); ocl_arg_i32(&l, phase); ocl_arg_i64(&l, tin); ocl_arg_i64(&l, tnext);
    ocl_arg_i64(&l, k); ocl_arg_i32(&l, last);
    BUF(l, B->A); BUF(l, B->RG); BUF(l, B->HP); BUF(l, B->CP); BUF(l, B->RH);
    BUF(l, bi); BUF(l, br); BUF(l, mask); BUF(l, y); BUF(l, hT); BUF(l, cT);
    ocl_run1(&l, d->n * d->u, 256);
}

static void bwd_step(const fl_rnn_desc *d, int phase, int64_t tin, int64_t tout, const fl_rnn_bufs *B, float *DR,
                     const float *mask, const float *dy) {
    ocl_launch l = ocl_args(OCL_k_rnn_bwd_step);
    ocl_arg_raw(&l, d, sizeof *d); ocl_arg_i32(&l, phase); ocl_arg_i64(&l, tin); ocl_arg_i64(&l, tout);
    BUF(l, B->A); BUF(l, B->RH); BUF(l, B->HP); BUF(l, B->CP);
    float *dh = B->ST, *dc = B->ST + d->n * d->u;
    BUF(l, dh); BUF(l, dc); BUF(l, B->RG); BUF(l, B->DP); BUF(l, DR); BUF(l, mask); BUF(l, dy);
    ocl_run1(&l, d->n * d->u, 256);
}

static void be_rnn_fwd(const fl_rnn_desc *d, const float *x, const float *w, const float *r, const float *bias,
                       const float *mask, const fl_rnn_states *st, float *y, float *aux) {
    const int64_t n = d->n, T = d->t, u = d->u, gu = (int64_t)fl_rnn_gates(d) * u;
    if (n == 0 || T == 0) return;
    const int two_phase = d->cell == FL_RNN_GRU && !d->reset_after;
    float *hT = st ? st->hT : NULL, *cT = st ? st->cT : NULL;
    const float *bi = d->has_bias ? bias : NULL;
    const float *br = d->has_bias && d->cell == FL_RNN_GRU && d->reset_after ? bias + gu : NULL;
    const fl_rnn_bufs B = fl_rnn_split(d, aux);
    const float *hd = st ? st->hdrop : NULL, *xd = st ? st->xdrop : NULL;
    const float *h0 = st ? st->h0 : NULL, *c0 = st ? st->c0 : NULL;
    const int G = fl_rnn_gates(d), ngr = two_phase ? 2 : G;
    if (xd) /* input dropout: (x xdrop_g) W_g per gate */
        for (int g = 0; g < G; g++) {
            mask_steps(n * T, T, d->d, x, xd + g * d->d, (int64_t)G * d->d, 0, 0.0f, B.XS);
            gemm(0, 0, n * T, u, d->d, B.XS, d->d, w + g * u, gu, 0.0f, B.A + g * u, gu);
        }
    else
        gemm(0, 0, n * T, gu, d->d, x, d->d, w, gu, 0.0f, B.A, gu);
    for (int64_t k = 0; k < T; k++) {
        const int64_t tin = d->go_backwards ? T - 1 - k : k, tnext = d->go_backwards ? tin - 1 : tin + 1;
        const int last = k == T - 1;
        if (k == 0) { /* the state before the first step: h0, c0 or zeros */
            init_rows(n, u, T * u, h0, B.HP + tin * u);
            init_rows(n, u, T * u, c0, B.CP + tin * u);
        }
        if (hd) { /* recurrent dropout: (h' hdrop_g) R_g per gate */
            mask_rows(n, u, ngr * u, B.HP + tin * u, T * u, hd, gu, B.HM, gu);
            for (int g = 0; g < ngr; g++) gemm(0, 0, n, u, u, B.HM + g * u, gu, r + g * u, gu, 0.0f, B.RG + g * u, gu);
        } else {
            gemm(0, 0, n, two_phase ? 2 * u : gu, u, B.HP + tin * u, T * u, r, gu, 0.0f, B.RG, gu);
        }
        if (two_phase) {
            fwd_step(d, FL_RNN_PHASE_ZR, tin, tnext, k, last, &B, bi, br, mask, y, hT, cT);
            if (hd) scale_rows(n, u, B.RH + tin * u, T * u, hd + 2 * u, gu); /* the candidate reads r h' hdrop_h */
            gemm(0, 0, n, u, u, B.RH + tin * u, T * u, r + 2 * u, gu, 0.0f, B.RG + 2 * u, gu);
        }
        fwd_step(d, two_phase ? FL_RNN_PHASE_H : FL_RNN_PHASE_ALL, tin, tnext, k, last, &B, bi, br, mask, y, hT, cT);
    }
}

static void be_rnn_bwd(const fl_rnn_desc *d, const float *x, const float *w, const float *r, const float *bias,
                       const float *mask, const fl_rnn_states *st, const float *dy, float *aux, float *dx,
                       float dx_beta, float *dw, float *dr, float *db) {
    (void)bias;
    const int64_t n = d->n, T = d->t, u = d->u, gu = (int64_t)fl_rnn_gates(d) * u;
    const int want_dh0 = st && st->dh0;
    const int two_phase = d->cell == FL_RNN_GRU && !d->reset_after;
    const int split = d->cell == FL_RNN_GRU && d->reset_after;
    const fl_rnn_bufs B = fl_rnn_split(d, aux);
    const float *hd = st ? st->hdrop : NULL, *xd = st ? st->xdrop : NULL;
    const float *dhT = st ? st->dhT : NULL, *dcT = st ? st->dcT : NULL;
    const int G = fl_rnn_gates(d), ngr = two_phase ? 2 : G;
    float *DR = split ? B.DR : B.DP, *dh = B.ST, *dc = B.ST + n * u;
    ocl_launch l = ocl_args(OCL_k_rnn_bwd_init);
    ocl_arg_raw(&l, d, sizeof *d); BUF(l, mask); BUF(l, dy); BUF(l, dhT); BUF(l, dcT); BUF(l, dh); BUF(l, dc);
    ocl_run1(&l, n * u, 256);
    for (int64_t k = T - 1; k >= 0; k--) {
        const int64_t tin = d->go_backwards ? T - 1 - k : k, tout = d->reverse_output ? T - 1 - k : k;
        bwd_step(d, two_phase ? FL_RNN_PHASE_ZR : FL_RNN_PHASE_ALL, tin, tout, &B, DR, mask, dy);
        if (two_phase) { /* drh = dpre_h Rh^T (times hdrop_h: d(r h' hdrop_h)), then r's part */
            gemm(0, 1, n, u, u, B.DP + tin * gu + 2 * u, T * gu, r + 2 * u, gu, 0.0f, B.RG, u);
            if (hd) scale_rows(n, u, B.RG, u, hd + 2 * u, gu);
            bwd_step(d, FL_RNN_PHASE_H, tin, tout, &B, DR, mask, dy);
        }
        if ((k > 0 || want_dh0) && hd) { /* dh += sum over g of (dpre_g R_g^T) hdrop_g */
            for (int g = 0; g < ngr; g++)
                gemm(0, 1, n, u, u, DR + tin * gu + g * u, T * gu, r + g * u, gu, 0.0f, B.HM + g * u, gu);
            mask_sum(n, u, ngr, B.HM, gu, hd, gu, dh);
        } else if (k > 0 || want_dh0) {
            gemm(0, 1, n, u, two_phase ? 2 * u : gu, DR + tin * gu, T * gu, r, gu, 1.0f, dh, u);
        }
    }
    /* the gradients of the initial state: copies of the carried ones (rows of u, u apart) */
    if (want_dh0) init_rows(n, u, u, dh, st->dh0);
    if (st && st->dc0) init_rows(n, u, u, dc, st->dc0);
    if (xd) { /* input dropout: gate g saw x xdrop_g */
        const int64_t din = d->d;
        for (int g = 0; g < G && dw; g++) {
            mask_steps(n * T, T, din, x, xd + g * din, G * din, 0, 0.0f, B.XS);
            gemm(1, 0, din, u, n * T, B.XS, din, B.DP + g * u, gu, 0.0f, dw + g * u, gu);
        }
        for (int g = 0; g < G && dx; g++) { /* dx (beta: +)= sum over g of (dpre_g W_g^T) xdrop_g */
            gemm(0, 1, n * T, din, u, B.DP + g * u, gu, w + g * u, gu, 0.0f, B.XS, din);
            mask_steps(n * T, T, din, B.XS, xd + g * din, G * din, 1, g ? 1.0f : dx_beta, dx);
        }
    } else {
        if (dw) gemm(1, 0, d->d, gu, n * T, x, d->d, B.DP, gu, 0.0f, dw, gu);
        if (dx) gemm(0, 1, n * T, d->d, gu, B.DP, gu, w, gu, dx_beta, dx, d->d);
    }
    if (dr && hd) { /* recurrent dropout: gate g saw h' hdrop_g (GRU reset_after False's candidate: RH, masked) */
        for (int g = 0; g < ngr; g++) {
            mask_steps(n * T, T, u, B.HP, hd + g * u, gu, 0, 0.0f, B.XS);
            gemm(1, 0, u, u, n * T, B.XS, u, DR + g * u, gu, 0.0f, dr + g * u, gu);
        }
        if (two_phase) gemm(1, 0, u, u, n * T, B.RH, u, B.DP + 2 * u, gu, 0.0f, dr + 2 * u, gu);
    } else if (dr) {
        if (two_phase) {
            gemm(1, 0, u, 2 * u, n * T, B.HP, u, B.DP, gu, 0.0f, dr, gu);
            gemm(1, 0, u, u, n * T, B.RH, u, B.DP + 2 * u, gu, 0.0f, dr + 2 * u, gu);
        } else {
            gemm(1, 0, u, gu, n * T, B.HP, u, DR, gu, 0.0f, dr, gu);
        }
    }
    if (db && d->has_bias) {
        ocl_colsum_rows(n * T, (int)gu, B.DP, gu, db);
        if (split) ocl_colsum_rows(n * T, (int)gu, DR, gu, db + gu);
    }
}

void ocl_fill_rnn(fl_backend *b) {
    b->rnn_fwd = be_rnn_fwd;
    b->rnn_bwd = be_rnn_bwd;
}
