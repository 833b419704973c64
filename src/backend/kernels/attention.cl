/*
 * attention.cl — the attention kernels on the GPU, written once for CUDA and OpenCL (dialect.h): the
 * Attention layer's learned scores (a scalar weight times a tensor, the additive "concat" scores and their
 * gradients; cpu_attn_score.c's twins) and the masked softmax of the attention weights with its backward, a
 * row group per row (cpu_attention.c's twins). The batched GEMMs around them are the host's (cuBLAS, CLBlast).
 * The scalar weights are read from device memory by the kernels (a captured graph replays their updates);
 * the sums over the whole batch (a scalar's gradient) run in one block of 256, in doubles, in a fixed order.
 */

/* the fixed-order sum of a block of 256 doubles, left in sh[0] (every thread of the block calls it) */
#define FL_ATTN_BLOCK_SUM(sh, v)                                                                                    \
    sh[FL_TID] = (v);                                                                                               \
    FL_SYNC();                                                                                                      \
    for (int w_ = 128; w_ > 0; w_ >>= 1) {                                                                          \
        if (FL_TID < w_) sh[FL_TID] += sh[FL_TID + w_];                                                             \
        FL_SYNC();                                                                                                  \
    }

/* y = s[0] x (y may be x) */
FL_KERNEL k_scalar_mul_fwd(int64_t n, FL_BUF(const float, x), FL_BUF(const float, s), FL_BUF(float, y)) {
    FL_BIND(const float, x);
    FL_BIND(const float, s);
    FL_BIND(float, y);
    const float a = s[0];
    FL_FOR(e, n) y[e] = a * x[e];
}

/* out[0] = sum x[e] y[e], in double; one block of 256 */
FL_KERNEL k_dot_sum(int64_t n, FL_BUF(const float, x), FL_BUF(const float, y), FL_BUF(float, out)) {
    FL_BIND(const float, x);
    FL_BIND(const float, y);
    FL_BIND(float, out);
    FL_SHARED double sh[256];
    double acc = 0.0;
    for (int64_t e = FL_TID; e < n; e += FL_BDIM) acc += (double)x[e] * y[e];
    FL_ATTN_BLOCK_SUM(sh, acc)
    if (FL_TID == 0) out[0] = (float)sh[0];
}

/* dx (beta: +)= s[0] dy (dx may be dy) */
FL_KERNEL k_scalar_mul_dx(int64_t n, FL_BUF(const float, s), FL_BUF(const float, dy), FL_BUF(float, dx), float beta) {
    FL_BIND(const float, s);
    FL_BIND(const float, dy);
    FL_BIND(float, dx);
    const float a = s[0];
    FL_FOR(e, n) dx[e] = a * dy[e] + (beta != 0.0f ? dx[e] : 0.0f);
}

/* s[b, i, j] = sum_c tanh(a (q[b, i, c] + k[b, j, c])), a = scale[0] or 1 (scale NULL): one item per score */
FL_KERNEL k_attn_concat_fwd(fl_attn_desc d, FL_BUF(const float, q), FL_BUF(const float, k), FL_BUF(const float, scale),
                            FL_BUF(float, s)) {
    FL_BIND(const float, q);
    FL_BIND(const float, k);
    FL_BIND(const float, scale);
    FL_BIND(float, s);
    const float a = scale ? scale[0] : 1.0f;
    FL_FOR(e, d.n * d.tq * (int64_t)d.tk) {
        const int64_t j = e % d.tk, r = e / d.tk, b = r / d.tq;
        const FL_G float *qi = q + r * d.dk, *kj = k + (b * d.tk + j) * d.dk;
        float acc = 0.0f;
        for (int c = 0; c < d.dk; c++) acc += tanhf(a * (qi[c] + kj[c]));
        s[e] = acc;
    }
}

/* one item per element of dq (which 0) or dk (which 1): a times the sum over the other side's steps of
 * ds (1 - t^2), t = tanh(a (q + k)); dst (beta: +)= it */
FL_KERNEL k_attn_concat_bwd(fl_attn_desc d, FL_BUF(const float, q), FL_BUF(const float, k), FL_BUF(const float, scale),
                            FL_BUF(const float, ds), int which, FL_BUF(float, dst), float beta) {
    FL_BIND(const float, q);
    FL_BIND(const float, k);
    FL_BIND(const float, scale);
    FL_BIND(const float, ds);
    FL_BIND(float, dst);
    const float a = scale ? scale[0] : 1.0f;
    const int rows = which ? d.tk : d.tq, other = which ? d.tq : d.tk;
    FL_FOR(e, d.n * rows * (int64_t)d.dk) {
        const int64_t c = e % d.dk, r = (e / d.dk) % rows, b = e / d.dk / rows;
        const float xv = (which ? k : q)[e];
        const FL_G float *oth = (which ? q + b * d.tq * (int64_t)d.dk : k + b * d.tk * (int64_t)d.dk) + c;
        const FL_G float *dsb = ds + b * d.tq * (int64_t)d.tk;
        float acc = 0.0f;
        for (int o = 0; o < other; o++) {
            const float gs = which ? dsb[(int64_t)o * d.tk + r] : dsb[r * d.tk + o];
            const float t = tanhf(a * (xv + oth[(int64_t)o * d.dk]));
            acc += gs * (1.0f - t * t);
        }
        dst[e] = a * acc + (beta != 0.0f ? dst[e] : 0.0f);
    }
}

/* the scale's gradient: sum over (b, i, j, c) of ds (1 - t^2) (q + k), in double; one block of 256 */
FL_KERNEL k_attn_concat_dscale(fl_attn_desc d, FL_BUF(const float, q), FL_BUF(const float, k),
                               FL_BUF(const float, scale), FL_BUF(const float, ds), FL_BUF(float, dscale)) {
    FL_BIND(const float, q);
    FL_BIND(const float, k);
    FL_BIND(const float, scale);
    FL_BIND(const float, ds);
    FL_BIND(float, dscale);
    FL_SHARED double sh[256];
    const float a = scale[0];
    const int64_t total = d.n * d.tq * (int64_t)d.tk;
    double acc = 0.0;
    for (int64_t e = FL_TID; e < total; e += FL_BDIM) {
        const int64_t j = e % d.tk, r = e / d.tk, b = r / d.tq;
        const FL_G float *qi = q + r * d.dk, *kj = k + (b * d.tk + j) * d.dk;
        float part = 0.0f;
        for (int c = 0; c < d.dk; c++) {
            const float z = qi[c] + kj[c], t = tanhf(a * z);
            part += (1.0f - t * t) * z;
        }
        acc += (double)ds[e] * part;
    }
    FL_ATTN_BLOCK_SUM(sh, acc)
    if (FL_TID == 0) dscale[0] = (float)sh[0];
}

/* The masked softmax of the weights in place, a row group per row (b, head, i) of tk scores (backend.h's
 * attn_softmax_fwd has the masking modes; cpu_attention.c's softmax_row_masked computes the same). Every lane
 * reaches every row reduction unconditionally (PoCL 3.1 miscompiled the reductions inside the branches of a
 * row's masking: the second row's weights came out wrong); the branches only pick values. Mode 1 (Attention's
 * masking) adds -1e9 to the masked keys' scores, in place as the CPU; a masked query's row is zeros. Modes 0, 2:
 * the masked keys get 0; a row with no unmasked key zeros (mode 0, Keras's where(mask, p, 0)) or 1 / tk (mode 2,
 * JAX's). */
FL_ROW_KERNEL k_attn_softmax_fwd(fl_attn_desc d, FL_BUF(const float, qmask), FL_BUF(const float, vmask),
                                 FL_BUF(const float, amask), FL_BUF(float, s)) {
    FL_BIND(const float, qmask);
    FL_BIND(const float, vmask);
    FL_BIND(const float, amask);
    FL_BIND(float, s);
    FL_ROW_SCRATCH;
    const int64_t rows = d.n * d.heads * d.tq;
    const int tq = d.tq, tk = d.tk, mode1 = d.mask_mode == 1;
    FL_ROW_LOOP(r, rows) {
        const int64_t b = r / ((int64_t)d.heads * tq);
        const int i = (int)(r % tq);
        FL_G float *sr = s + r * tk;
        const FL_G float *vm = vmask ? vmask + b * tk : 0;
        const FL_G float *am = amask && !mode1 ? amask + (b * tq + i) * tk : 0;
        const int jmax = d.causal && i + 1 < tk ? i + 1 : tk;
        const int qoff = qmask && qmask[b * tq + i] <= 0.5f;
        float mx = -INFINITY;
        FL_ROW_COLS(j, tk) {
            const int key = j < jmax && (!vm || vm[j] > 0.5f); /* not masked by causality or the value mask */
            if (mode1 && !qoff && !key) sr[j] = sr[j] - 1.0e9f;
            const int on = !qoff && (mode1 || (key && (!am || am[j] > 0.5f)));
            if (on) mx = sr[j] > mx ? sr[j] : mx;
        }
        mx = FL_ROW_MAX(mx);
        const int none = mx == -INFINITY; /* no unmasked key (mode 1: a masked query) */
        float sum = 0;
        FL_ROW_COLS(j, tk) {
            const int key = j < jmax && (!vm || vm[j] > 0.5f);
            const int on = !none && !qoff && (mode1 || (key && (!am || am[j] > 0.5f)));
            const float e = on ? expf(sr[j] - mx) : 0.0f;
            sr[j] = e;
            sum += e;
        }
        sum = FL_ROW_SUM(sum);
        const float inv = 1.0f / sum, fill = d.mask_mode == 2 ? 1.0f / (float)tk : 0.0f;
        FL_ROW_COLS(j, tk) sr[j] = none ? fill : sr[j] * inv; /* the lane's own writes */
    }
}

/* Backward in place on dp: dp = p (dp - sum_j dp p), 0 on mode 2's uniform rows (no unmasked key: their
 * weights do not depend on the scores); the row reductions unconditional, as in the forward */
FL_ROW_KERNEL k_attn_softmax_bwd(fl_attn_desc d, FL_BUF(const float, qmask), FL_BUF(const float, vmask),
                                 FL_BUF(const float, amask), FL_BUF(const float, p), FL_BUF(float, dp)) {
    FL_BIND(const float, qmask);
    FL_BIND(const float, vmask);
    FL_BIND(const float, amask);
    FL_BIND(const float, p);
    FL_BIND(float, dp);
    FL_ROW_SCRATCH;
    const int64_t rows = d.n * d.heads * d.tq;
    const int tq = d.tq, tk = d.tk, mode2 = d.mask_mode == 2;
    FL_ROW_LOOP(r, rows) {
        const FL_G float *pr = p + r * tk;
        FL_G float *gr = dp + r * tk;
        const int64_t b = r / ((int64_t)d.heads * tq);
        const int i = (int)(r % tq), jmax = d.causal && i + 1 < tk ? i + 1 : tk;
        int any = 0;
        if (mode2 && (!qmask || qmask[b * tq + i] > 0.5f))
            FL_ROW_COLS(j, jmax)
                any |= (!vmask || vmask[b * tk + j] > 0.5f) && (!amask || amask[(b * tq + i) * tk + j] > 0.5f);
        const int nany = FL_ROW_SUMI(any), live = !mode2 || nany > 0;
        float sum = 0;
        FL_ROW_COLS(j, tk) sum += gr[j] * pr[j];
        sum = FL_ROW_SUM(sum);
        FL_ROW_COLS(j, tk) gr[j] = live ? pr[j] * (gr[j] - sum) : 0.0f;
    }
}
