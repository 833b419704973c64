/*
 * seq.cl — the sequence kernels on the GPU, written once for CUDA and OpenCL (dialect.h): Embedding's
 * gather and its deterministic scatter-add, the mask of a padded sequence, the masked
 * GlobalAveragePooling1D, the mask and the sample weights applied to a loss. cpu_seq.c has their CPU twins
 * (backend.h each one's formula and shapes).
 */

/* The i-th index of an Embedding input: an int input's int32 values (read through an int view of the
 * same buffer), or a float truncated toward zero (Keras casts a float input to int32). */
FL_DEV int64_t seq_index(int x_int, const FL_G float *x, int64_t i) {
    return x_int ? (int64_t)((const FL_G int32_t *)x)[i] : (int64_t)x[i];
}

/* y[i, j] = w[idx(i), j]; zeros for an index outside [0, v) */
FL_KERNEL k_embedding_fwd(int64_t n, int d, int64_t v, int x_int, FL_BUF(const float, x), FL_BUF(const float, w),
                          FL_BUF(float, y)) {
    FL_BIND(const float, x);
    FL_BIND(const float, w);
    FL_BIND(float, y);
    FL_FOR(e, n * d) {
        const int64_t r = seq_index(x_int, x, e / d);
        y[e] = r >= 0 && r < v ? w[r * d + e % d] : 0.0f;
    }
}

/* dw[r, j] = sum of dy[i, j] over the i with idx(i) = r, in ascending i as the CPU sums (deterministic, no
 * atomics): work item (p, j) owns column j of the rows r with r % FL_EMB_PARTS == p, which it zeroes first
 * and then adds to, walking every i. */
#define FL_EMB_PARTS 64
FL_KERNEL k_embedding_bwd(int64_t n, int d, int64_t v, int x_int, FL_BUF(const float, x), FL_BUF(const float, dy),
                          FL_BUF(float, dw)) {
    FL_BIND(const float, x);
    FL_BIND(const float, dy);
    FL_BIND(float, dw);
    FL_FOR(e, (int64_t)FL_EMB_PARTS * d) {
        const int p = (int)(e / d), j = (int)(e % d);
        for (int64_t r = p; r < v; r += FL_EMB_PARTS) dw[r * d + j] = 0.0f;
        for (int64_t i = 0; i < n; i++) {
            const int64_t r = seq_index(x_int, x, i);
            if (r >= 0 && r < v && r % FL_EMB_PARTS == p) dw[r * d + j] += dy[i * d + j];
        }
    }
}

/* m[r] = 1 if any x[r, j] != value (int input: its int32 values against (int32_t)value), else 0 */
FL_KERNEL k_seq_mask(int64_t rows, int c, int x_int, FL_BUF(const float, x), float value, FL_BUF(float, m)) {
    FL_BIND(const float, x);
    FL_BIND(float, m);
    const FL_G int32_t *xi = (const FL_G int32_t *)x;
    const int32_t iv = (int32_t)value;
    FL_FOR(r, rows) {
        int any = 0;
        for (int j = 0; j < c && !any; j++) any = x_int ? xi[r * c + j] != iv : x[r * c + j] != value;
        m[r] = any ? 1.0f : 0.0f;
    }
}

/* y[b, k] = the mean of x[b, s, k] over the steps s with m[b, s] != 0 (0 / 0: NaN, as Keras and the CPU) */
FL_KERNEL k_masked_gap1d_fwd(int64_t n, int64_t t, int c, FL_BUF(const float, x), FL_BUF(const float, m),
                             FL_BUF(float, y)) {
    FL_BIND(const float, x);
    FL_BIND(const float, m);
    FL_BIND(float, y);
    FL_FOR(e, n * c) {
        const int64_t b = e / c;
        const int k = (int)(e % c);
        float s = 0.0f, cnt = 0.0f;
        for (int64_t p = 0; p < t; p++)
            if (m[b * t + p] != 0.0f) { s += x[(b * t + p) * c + k]; cnt += 1.0f; }
        y[e] = s / cnt;
    }
}

/* dx[b, s, k] (beta: +)= m[b, s] != 0 ? dy[b, k] / count(b) : 0 */
FL_KERNEL k_masked_gap1d_bwd(int64_t n, int64_t t, int c, FL_BUF(const float, m), FL_BUF(const float, dy),
                             FL_BUF(float, dx), float beta) {
    FL_BIND(const float, m);
    FL_BIND(const float, dy);
    FL_BIND(float, dx);
    FL_FOR(e, n * t * c) {
        const int64_t b = e / (t * c), s = (e / c) % t;
        float cnt = 0.0f;
        for (int64_t p = 0; p < t; p++) cnt += m[b * t + p] != 0.0f ? 1.0f : 0.0f;
        const float g = m[b * t + s] != 0.0f ? dy[b * c + e % c] / cnt : 0.0f;
        dx[e] = beta == 0.0f ? g : dx[e] + g;
    }
}

/* The output's mask on the loss: every block (work-group) of 256 counts the valid rows itself (rows is batch x
 * steps: small), in a fixed order, then scales its share of the rows; block 0 adds the count to acc. grad may
 * be NULL (then one item per row). */
FL_KERNEL k_loss_mask(int64_t rows, int c, FL_BUF(const float, m), FL_BUF(float, row_loss), FL_BUF(float, grad),
                      FL_BUF(double, acc)) {
    FL_BIND(const float, m);
    FL_BIND(float, row_loss);
    FL_BIND(float, grad);
    FL_BIND(double, acc);
    FL_SHARED float sh[256];
    float s = 0.0f;
    for (int64_t r = FL_TID; r < rows; r += FL_BDIM) s += m[r] != 0.0f ? 1.0f : 0.0f;
    sh[FL_TID] = s;
    FL_SYNC();
    for (int k = 128; k > 0; k >>= 1) {
        if (FL_TID < k) sh[FL_TID] += sh[FL_TID + k];
        FL_SYNC();
    }
    const float valid = sh[0], w = valid > 0.0f ? (float)rows / valid : 0.0f;
    const int64_t total = grad ? rows * c : rows;
    FL_FOR(e, total) {
        const int64_t r = grad ? e / c : e;
        const float wr = m[r] != 0.0f ? w : 0.0f;
        if (grad) grad[e] *= wr;
        if (!grad || e % c == 0) row_loss[r] *= wr;
    }
    if (FL_BID == 0 && FL_TID == 0) acc[0] += (double)valid;
}

/* Sample weights: one item per gradient element (per row without grad) */
FL_KERNEL k_loss_weight(int64_t rows, int c, FL_BUF(const float, w), FL_BUF(float, row_loss), FL_BUF(float, grad)) {
    FL_BIND(const float, w);
    FL_BIND(float, row_loss);
    FL_BIND(float, grad);
    const int64_t total = grad ? rows * c : rows;
    FL_FOR(e, total) {
        const int64_t r = grad ? e / c : e;
        if (grad) grad[e] *= w[r];
        if (!grad || e % c == 0) row_loss[r] *= w[r];
    }
}
