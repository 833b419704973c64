/*
 * cu_rnn.cuh — SimpleRNN, LSTM, GRU.
 * Part of the CUDA plugin's one translation unit: cuda_backend.cu includes it after the state and
 * helpers it uses (no separate object, so the CUDA 12 build by clang stays one compile).
 */
/* ------------------------------------------------------ recurrent layers */
/* SimpleRNN, LSTM, GRU: the CPU's orchestration (backend/cpu/cpu_rnn.c,
 * whose aux layout this shares) with cuBLAS for the projections and one
 * kernel per step for the gates (kernels/rnn.cl, shared with OpenCL:
 * ops/rnn_math.h, the CPU's formulas). */

/* row-major C[M, N] (beta: +)= op(A) op(B)  ==  column-major C^T = op(B)^T op(A)^T */
static void rnn_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                     int64_t ldb, float beta, float *C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    const float one = 1.0f;
    CUBLAS_OK(cublasSgemm(g_cublas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M,
                          (int)K, &one, B, (int)ldb, A, (int)lda, &beta, C, (int)ldc));
}

typedef fl_rnn_bufs rnn_bufs; /* the layout: ops/rnn_math.h */
#define rnn_split fl_rnn_split

static void cu_rnn_fwd(const fl_rnn_desc *d, const float *x, const float *w, const float *r, const float *bias,
                       const float *mask, const fl_rnn_states *st, float *y, float *aux) {
    const int64_t n = d->n, T = d->t, u = d->u, gu = (int64_t)fl_rnn_gates(d) * u;
    const int two_phase = d->cell == FL_RNN_GRU && !d->reset_after;
    float *hT = st ? st->hT : NULL, *cT = st ? st->cT : NULL;
    const float *bi = d->has_bias ? bias : NULL;
    const float *br = d->has_bias && d->cell == FL_RNN_GRU && d->reset_after ? bias + gu : NULL;
    rnn_bufs B = rnn_split(d, aux);
    const float *hd = st ? st->hdrop : NULL, *xd = st ? st->xdrop : NULL;
    const int G = fl_rnn_gates(d), ngr = two_phase ? 2 : G;
    if (xd) /* input dropout: (x xdrop_g) W_g per gate */
        for (int g = 0; g < G; g++) {
            k_rnn_mask_steps<<<blocks_for(n * T * d->d, 256), 256, 0, g_stream>>>(n * T, T, d->d, x, xd + g * d->d,
                                                                                  (int64_t)G * d->d, 0, 0.0f, B.XS);
            LAUNCHED();
            rnn_gemm(0, 0, n * T, u, d->d, B.XS, d->d, w + g * u, gu, 0.0f, B.A + g * u, gu);
        }
    else
        rnn_gemm(0, 0, n * T, gu, d->d, x, d->d, w, gu, 0.0f, B.A, gu);
    const int nb = blocks_for(n * u, 256);
    for (int64_t k = 0; k < T; k++) {
        const int64_t tin = d->go_backwards ? T - 1 - k : k, tnext = d->go_backwards ? tin - 1 : tin + 1;
        const int last = k == T - 1;
        if (k == 0) {
            k_rnn_init_rows<<<nb, 256, 0, g_stream>>>(n, (int)u, T * u, st ? st->h0 : NULL, B.HP + tin * u);
            k_rnn_init_rows<<<nb, 256, 0, g_stream>>>(n, (int)u, T * u, st ? st->c0 : NULL, B.CP + tin * u);
            LAUNCHED();
        }
        if (hd) { /* recurrent dropout: (h' hdrop_g) R_g per gate */
            k_rnn_mask_rows<<<blocks_for(n * ngr * u, 256), 256, 0, g_stream>>>(n, (int)u, (int)(ngr * u), B.HP + tin * u,
                                                                                T * u, hd, gu, B.HM, gu);
            LAUNCHED();
            for (int g = 0; g < ngr; g++) rnn_gemm(0, 0, n, u, u, B.HM + g * u, gu, r + g * u, gu, 0.0f, B.RG + g * u, gu);
        } else {
            rnn_gemm(0, 0, n, two_phase ? 2 * u : gu, u, B.HP + tin * u, T * u, r, gu, 0.0f, B.RG, gu);
        }
        if (two_phase) {
            k_rnn_fwd_step<<<nb, 256, 0, g_stream>>>(*d, FL_RNN_PHASE_ZR, tin, tnext, k, last, B.A, B.RG, B.HP, B.CP,
                                                     B.RH, bi, br, mask, y, hT, cT);
            LAUNCHED();
            if (hd) { /* the candidate reads r h' hdrop_h */
                k_rnn_scale_rows<<<nb, 256, 0, g_stream>>>(n, (int)u, B.RH + tin * u, T * u, hd + 2 * u, gu);
                LAUNCHED();
            }
            rnn_gemm(0, 0, n, u, u, B.RH + tin * u, T * u, r + 2 * u, gu, 0.0f, B.RG + 2 * u, gu);
        }
        k_rnn_fwd_step<<<nb, 256, 0, g_stream>>>(*d, two_phase ? FL_RNN_PHASE_H : FL_RNN_PHASE_ALL, tin, tnext, k,
                                                 last, B.A, B.RG, B.HP, B.CP, B.RH, bi, br, mask, y, hT, cT);
        LAUNCHED();
    }
}

static void cu_rnn_bwd(const fl_rnn_desc *d, const float *x, const float *w, const float *r, const float *bias,
                       const float *mask, const fl_rnn_states *st, const float *dy, float *aux, float *dx, float dx_beta, float *dw, float *dr,
                       float *db) {
    (void)bias;
    const int64_t n = d->n, T = d->t, u = d->u, gu = (int64_t)fl_rnn_gates(d) * u;
    const int want_dh0 = st && st->dh0;
    const int two_phase = d->cell == FL_RNN_GRU && !d->reset_after;
    const int split = d->cell == FL_RNN_GRU && d->reset_after;
    rnn_bufs B = rnn_split(d, aux);
    const float *hd = st ? st->hdrop : NULL, *xd = st ? st->xdrop : NULL;
    const int G = fl_rnn_gates(d), ngr = two_phase ? 2 : G;
    float *DR = split ? B.DR : B.DP, *dh = B.ST;
    const int nb = blocks_for(n * u, 256);
    k_rnn_bwd_init<<<nb, 256, 0, g_stream>>>(*d, mask, dy, st ? st->dhT : NULL, st ? st->dcT : NULL, dh, B.ST + n * u);
    LAUNCHED();
    for (int64_t k = T - 1; k >= 0; k--) {
        const int64_t tin = d->go_backwards ? T - 1 - k : k, tout = d->reverse_output ? T - 1 - k : k;
        k_rnn_bwd_step<<<nb, 256, 0, g_stream>>>(*d, two_phase ? FL_RNN_PHASE_ZR : FL_RNN_PHASE_ALL, tin, tout, B.A,
                                                 B.RH, B.HP, B.CP, dh, B.ST + n * u, B.RG, B.DP, DR, mask, dy);
        LAUNCHED();
        if (two_phase) {
            rnn_gemm(0, 1, n, u, u, B.DP + tin * gu + 2 * u, T * gu, r + 2 * u, gu, 0.0f, B.RG, u);
            if (hd) { /* d(r h' hdrop_h) */
                k_rnn_scale_rows<<<nb, 256, 0, g_stream>>>(n, (int)u, B.RG, u, hd + 2 * u, gu);
                LAUNCHED();
            }
            k_rnn_bwd_step<<<nb, 256, 0, g_stream>>>(*d, FL_RNN_PHASE_H, tin, tout, B.A, B.RH, B.HP, B.CP, dh,
                                                     B.ST + n * u, B.RG, B.DP, DR, mask, dy);
            LAUNCHED();
        }
        if ((k > 0 || want_dh0) && hd) { /* dh += sum over g of (dpre_g R_g^T) hdrop_g */
            for (int g = 0; g < ngr; g++)
                rnn_gemm(0, 1, n, u, u, DR + tin * gu + g * u, T * gu, r + g * u, gu, 0.0f, B.HM + g * u, gu);
            k_rnn_mask_sum<<<nb, 256, 0, g_stream>>>(n, (int)u, ngr, B.HM, gu, hd, gu, dh);
            LAUNCHED();
        } else if (k > 0 || want_dh0) {
            rnn_gemm(0, 1, n, u, two_phase ? 2 * u : gu, DR + tin * gu, T * gu, r, gu, 1.0f, dh, u);
        }
    }
    /* the gradients of the initial state */
    if (want_dh0) CUDA_OK(cudaMemcpyAsync(st->dh0, dh, (size_t)(n * u) * sizeof(float), cudaMemcpyDeviceToDevice, g_stream));
    if (st && st->dc0)
        CUDA_OK(cudaMemcpyAsync(st->dc0, B.ST + n * u, (size_t)(n * u) * sizeof(float), cudaMemcpyDeviceToDevice,
                                g_stream));
    if (xd) { /* input dropout: gate g saw x xdrop_g */
        const int64_t din = d->d, nbx = blocks_for(n * T * din, 256);
        for (int g = 0; g < G && dw; g++) {
            k_rnn_mask_steps<<<nbx, 256, 0, g_stream>>>(n * T, T, (int)din, x, xd + g * din, G * din, 0, 0.0f, B.XS);
            LAUNCHED();
            rnn_gemm(1, 0, din, u, n * T, B.XS, din, B.DP + g * u, gu, 0.0f, dw + g * u, gu);
        }
        for (int g = 0; g < G && dx; g++) {
            rnn_gemm(0, 1, n * T, din, u, B.DP + g * u, gu, w + g * u, gu, 0.0f, B.XS, din);
            k_rnn_mask_steps<<<nbx, 256, 0, g_stream>>>(n * T, T, (int)din, B.XS, xd + g * din, G * din, 1,
                                                        g ? 1.0f : dx_beta, dx);
            LAUNCHED();
        }
    } else {
        if (dw) rnn_gemm(1, 0, d->d, gu, n * T, x, d->d, B.DP, gu, 0.0f, dw, gu);
        if (dx) rnn_gemm(0, 1, n * T, d->d, gu, B.DP, gu, w, gu, dx_beta, dx, d->d);
    }
    if (dr && hd) { /* recurrent dropout: gate g saw h' hdrop_g */
        for (int g = 0; g < ngr; g++) {
            k_rnn_mask_steps<<<blocks_for(n * T * u, 256), 256, 0, g_stream>>>(n * T, T, (int)u, B.HP, hd + g * u, gu,
                                                                              0, 0.0f, B.XS);
            LAUNCHED();
            rnn_gemm(1, 0, u, u, n * T, B.XS, u, DR + g * u, gu, 0.0f, dr + g * u, gu);
        }
        if (two_phase) rnn_gemm(1, 0, u, u, n * T, B.RH, u, B.DP + 2 * u, gu, 0.0f, dr + 2 * u, gu);
    } else if (dr) {
        if (two_phase) {
            rnn_gemm(1, 0, u, 2 * u, n * T, B.HP, u, B.DP, gu, 0.0f, dr, gu);
            rnn_gemm(1, 0, u, u, n * T, B.RH, u, B.DP + 2 * u, gu, 0.0f, dr + 2 * u, gu);
        } else {
            rnn_gemm(1, 0, u, gu, n * T, B.HP, u, DR, gu, 0.0f, dr, gu);
        }
    }
    if (db && d->has_bias) {
        colsum_rows(n * T, (int)gu, B.DP, gu, db);
        if (split) colsum_rows(n * T, (int)gu, DR, gu, db + gu);
    }
}
