/*
 * rnn.cl — SimpleRNN, LSTM, GRU on the GPU, written once for CUDA and OpenCL (dialect.h): the CPU's
 * orchestration (backend/cpu/cpu_rnn.c, whose aux layout ops/rnn_math.h gives) with the host's GEMMs for
 * the projections (cuBLAS, CLBlast) and one kernel per step for the gates, unit (b, j) per thread, calling
 * ops/rnn_math.h's formulas, the CPU's. The host glue: cu_rnn.cuh, ocl_rnn.c. Each buffer of the aux is
 * its own argument (OpenCL takes no pointers inside a struct).
 */
#include "ops/rnn_math.h"

/* rows b < n of u floats at p + b * stride set to src[b, :] (n, u), or 0 when src is NULL (the initial state) */
FL_KERNEL k_rnn_init_rows(int64_t n, int u, int64_t stride, FL_BUF(const float, src), FL_BUF(float, p)) {
    FL_BIND(const float, src);
    FL_BIND(float, p);
    FL_FOR(e, n * u) p[(e / u) * stride + e % u] = src ? src[e] : 0.0f;
}

/* Dropout (fl_rnn_states.hdrop, xdrop; cpu_rnn.c's rec_proj_masked,
 * rec_grad_masked and mask_steps). out[b, c] = src[b*ss + c mod k] * m[b,
 * c] for c < cols: one step's state (or its gradient's rows) per gate. */
FL_KERNEL k_rnn_mask_rows(int64_t n, int k, int cols, FL_BUF(const float, src), int64_t ss, FL_BUF(const float, m),
                          int64_t ldm, FL_BUF(float, out), int64_t ldo) {
    FL_BIND(const float, src);
    FL_BIND(const float, m);
    FL_BIND(float, out);
    FL_FOR(e, n * cols) {
        const int64_t b = e / cols;
        const int c = (int)(e % cols);
        out[b * ldo + c] = src[b * ss + c % k] * m[b * ldm + c];
    }
}

/* p[b*ps + j] *= m[b*ldm + j], j < u */
FL_KERNEL k_rnn_scale_rows(int64_t n, int u, FL_BUF(float, p), int64_t ps, FL_BUF(const float, m), int64_t ldm) {
    FL_BIND(float, p);
    FL_BIND(const float, m);
    FL_FOR(e, n * u) p[(e / u) * ps + e % u] *= m[(e / u) * ldm + e % u];
}

/* dh[b, j] += sum over g < ng of p[b, g*u + j] * m[b, g*u + j] (rows ldp, ldm apart) */
FL_KERNEL k_rnn_mask_sum(int64_t n, int u, int ng, FL_BUF(const float, p), int64_t ldp, FL_BUF(const float, m),
                         int64_t ldm, FL_BUF(float, dh)) {
    FL_BIND(const float, p);
    FL_BIND(const float, m);
    FL_BIND(float, dh);
    FL_FOR(e, n * u) {
        const int64_t b = e / u;
        const int j = (int)(e % u);
        float s = dh[e];
        for (int g = 0; g < ng; g++) s += p[b * ldp + g * u + j] * m[b * ldm + g * u + j];
        dh[e] = s;
    }
}

/* every step's rows (sample i / T): xs[i, j] = src[i, j] * m[i / T, j], or
 * with acc: xs[i, j] = beta xs[i, j] (beta 0: nothing) + src[i, j] * m[i / T, j] */
FL_KERNEL k_rnn_mask_steps(int64_t rows, int64_t T, int k, FL_BUF(const float, src), FL_BUF(const float, m),
                           int64_t ldm, int acc, float beta, FL_BUF(float, xs)) {
    FL_BIND(const float, src);
    FL_BIND(const float, m);
    FL_BIND(float, xs);
    FL_FOR(e, rows * k) {
        const float v = src[e] * m[(e / k / T) * ldm + e % k];
        xs[e] = acc && beta != 0.0f ? beta * xs[e] + v : v;
    }
}

/* One step's gates, unit (b, j) per thread (cpu_rnn.c's row loop): A, RG, HP, CP, RH the aux's buffers
 * (fl_rnn_bufs); the state after the step to the next step's HP/CP, or after the last to hT/cT (NULL: not
 * wanted); the output to y (return_sequences: every step's, else the last). */
FL_KERNEL k_rnn_fwd_step(fl_rnn_desc d, int phase, int64_t tin, int64_t tnext, int64_t k, int last, FL_BUF(float, A),
                         FL_BUF(const float, RG), FL_BUF(float, HP), FL_BUF(float, CP), FL_BUF(float, RH),
                         FL_BUF(const float, bi), FL_BUF(const float, br), FL_BUF(const float, mask), FL_BUF(float, y),
                         FL_BUF(float, hT), FL_BUF(float, cT)) {
    FL_BIND(float, A);
    FL_BIND(const float, RG);
    FL_BIND(float, HP);
    FL_BIND(float, CP);
    FL_BIND(float, RH);
    FL_BIND(const float, bi);
    FL_BIND(const float, br);
    FL_BIND(const float, mask);
    FL_BIND(float, y);
    FL_BIND(float, hT);
    FL_BIND(float, cT);
    const int64_t T = d.t, u = d.u, gu = (int64_t)(d.cell == FL_RNN_LSTM ? 4 : d.cell == FL_RNN_GRU ? 3 : 1) * u;
    FL_FOR(e, d.n * u) {
        const int64_t b = e / u;
        const int j = (int)(e % u);
        const int64_t row = b * T + tin;
        float m = mask ? mask[row] : 1.0f, hv, cv;
        fl_rnn_fwd_unit(&d, phase, j, A + row * gu, RG + b * gu, bi, br, HP[row * u + j], CP[row * u + j], m,
                        RH + row * u + j, &hv, &cv);
        if (phase == FL_RNN_PHASE_ZR) continue;
        if (!last) {
            HP[(b * T + tnext) * u + j] = hv;
            CP[(b * T + tnext) * u + j] = cv;
        } else { /* the final state (return_state) */
            if (hT) hT[e] = hv;
            if (cT) cT[e] = cv;
        }
        FL_G float *yo = d.return_sequences ? y + (b * T + (d.reverse_output ? T - 1 - k : k)) * u
                         : last ? y + b * u : 0;
        if (yo) yo[j] = d.zero_masked && !(m > 0.5f) ? 0.0f : hv;
    }
}

/* dh (n, u) = the gradient of the last output (zero_masked: 0 where it
 * was masked) + the final state's dhT; dc = dcT (NULL: zeros) */
FL_KERNEL k_rnn_bwd_init(fl_rnn_desc d, FL_BUF(const float, mask), FL_BUF(const float, dy), FL_BUF(const float, dhT),
                         FL_BUF(const float, dcT), FL_BUF(float, dh), FL_BUF(float, dc)) {
    FL_BIND(const float, mask);
    FL_BIND(const float, dy);
    FL_BIND(const float, dhT);
    FL_BIND(const float, dcT);
    FL_BIND(float, dh);
    FL_BIND(float, dc);
    const int64_t T = d.t, u = d.u;
    FL_FOR(e, d.n * u) {
        const int64_t b = e / u, row = b * T + (d.go_backwards ? 0 : T - 1);
        const int live = !d.zero_masked || !mask || mask[row] > 0.5f;
        dh[e] = (!d.return_sequences && live ? dy[e] : 0.0f) + (dhT ? dhT[e] : 0.0f);
        dc[e] = dcT ? dcT[e] : 0.0f;
    }
}

/* One step back, unit (b, j) per thread: dy's part (phase 0/1), then the gates' derivatives into DP (and
 * DR, which is DP itself but for GRU reset_after); dh, dc the carried gradients (the aux's ST), drh GRU
 * reset_after False's d(r h') (the aux's RG) */
FL_KERNEL k_rnn_bwd_step(fl_rnn_desc d, int phase, int64_t tin, int64_t tout, FL_BUF(const float, A),
                         FL_BUF(const float, RH), FL_BUF(const float, HP), FL_BUF(const float, CP), FL_BUF(float, dh),
                         FL_BUF(float, dc), FL_BUF(const float, drh), FL_BUF(float, DP), FL_BUF(float, DR),
                         FL_BUF(const float, mask), FL_BUF(const float, dy)) {
    FL_BIND(const float, A);
    FL_BIND(const float, RH);
    FL_BIND(const float, HP);
    FL_BIND(const float, CP);
    FL_BIND(float, dh);
    FL_BIND(float, dc);
    FL_BIND(const float, drh);
    FL_BIND(float, DP);
    FL_BIND(float, DR);
    FL_BIND(const float, mask);
    FL_BIND(const float, dy);
    const int64_t T = d.t, u = d.u, gu = (int64_t)(d.cell == FL_RNN_LSTM ? 4 : d.cell == FL_RNN_GRU ? 3 : 1) * u;
    FL_FOR(e, d.n * u) {
        const int64_t b = e / u, row = b * T + tin;
        const int j = (int)(e % u);
        float m = mask ? mask[row] : 1.0f;
        if (phase != FL_RNN_PHASE_H && d.return_sequences && (!d.zero_masked || m > 0.5f))
            dh[e] += dy[(b * T + tout) * u + j];
        fl_rnn_bwd_unit(&d, phase, j, A + row * gu, RH[row * u + j], HP[row * u + j], CP[row * u + j], m, dh + e,
                        dc + e, DP + row * gu, DR + row * gu, phase == FL_RNN_PHASE_H ? drh[e] : 0.0f);
    }
}
