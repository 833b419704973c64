/*
 * merge.cl — the merge layers and the element-wise helpers on the GPU, written once for CUDA and OpenCL
 * (dialect.h): Multiply, Concatenate, Subtract/Maximum/Minimum/Add (with the ReLU after it), Average's
 * scaling, the max/min gradients, Add/Multiply with broadcasting, and the fills, sums and row gathers the
 * graph needs. The CPU's twins are cpu_merge.c's; the formulas shared with it are ops/math.h's.
 */

FL_KERNEL k_gather(FL_BUF(const float, src), FL_BUF(const int64_t, idx), int64_t n, int64_t row, FL_BUF(float, dst)) {
    FL_BIND(const float, src);
    FL_BIND(const int64_t, idx);
    FL_BIND(float, dst);
    FL_FOR(e, n * row) {
        int64_t i = e / row, j = e - i * row;
        dst[e] = src[idx[i] * row + j];
    }
}

FL_KERNEL k_mul(int64_t n, FL_BUF(const float, a), FL_BUF(const float, b), FL_BUF(float, dst)) {
    FL_BIND(const float, a);
    FL_BIND(const float, b);
    FL_BIND(float, dst);
    FL_FOR(i, n) dst[i] = a[i] * b[i];
}

FL_KERNEL k_concat_fwd(int64_t rows, int64_t cin, int64_t cout, int64_t off, FL_BUF(const float, x),
                       FL_BUF(float, y)) {
    FL_BIND(const float, x);
    FL_BIND(float, y);
    FL_FOR(e, rows * cin) {
        int64_t r = e / cin, j = e - r * cin;
        y[r * cout + off + j] = x[e];
    }
}

FL_KERNEL k_concat_bwd(int64_t rows, int64_t cin, int64_t cout, int64_t off, FL_BUF(const float, dy),
                       FL_BUF(float, dx), float beta) {
    FL_BIND(const float, dy);
    FL_BIND(float, dx);
    FL_FOR(e, rows * cin) {
        int64_t r = e / cin, j = e - r * cin;
        float g = dy[r * cout + off + j];
        dx[e] = beta == 0.0f ? g : dx[e] + g;
    }
}

/* Subtract, Maximum, Minimum, Add (and Add with the ReLU or ReLU6 after it) */
FL_KERNEL k_binary(int mode, int64_t n, FL_BUF(const float, a), FL_BUF(const float, b), FL_BUF(float, y)) {
    FL_BIND(const float, a);
    FL_BIND(const float, b);
    FL_BIND(float, y);
    FL_FOR(i, n) {
        float v;
        if (mode == FL_BIN_SUB) v = a[i] - b[i];
        else if (mode == FL_BIN_MAX) v = fmaxf(a[i], b[i]);
        else if (mode == FL_BIN_MIN) v = fminf(a[i], b[i]);
        else {
            v = a[i] + b[i];
            if (mode != FL_BIN_ADD) { /* ReLU, ReLU6: NaN to 0, as k_act_fwd's ReLU */
                v = v > 0.0f ? v : 0.0f;
                if (mode == FL_BIN_ADD_RELU6) v = v < 6.0f ? v : 6.0f;
            }
        }
        y[i] = v;
    }
}

/* y = alpha x + beta y (beta 0: y is not read) */
FL_KERNEL k_axpby(int64_t n, float alpha, FL_BUF(const float, x), float beta, FL_BUF(float, y)) {
    FL_BIND(const float, x);
    FL_BIND(float, y);
    FL_FOR(i, n) y[i] = alpha * x[i] + (beta == 0.0f ? 0.0f : beta * y[i]);
}

FL_KERNEL k_minmax_grad(int is_max, int64_t n, FL_BUF(const float, x), FL_BUF(const float, other),
                        FL_BUF(const float, dy), FL_BUF(float, dx), float beta) {
    FL_BIND(const float, x);
    FL_BIND(const float, other);
    FL_BIND(const float, dy);
    FL_BIND(float, dx);
    FL_FOR(i, n) {
        float g = fl_minmax_grad(is_max, x[i], other[i], dy[i]);
        dx[i] = beta == 0.0f ? g : dx[i] + g;
    }
}

FL_KERNEL k_fill(int64_t n, float v, FL_BUF(float, y)) {
    FL_BIND(float, y);
    FL_FOR(i, n) y[i] = v;
}

/* dst = src (beta 0) or dst += src */
FL_KERNEL k_accumulate(int64_t n, FL_BUF(const float, src), FL_BUF(float, dst), float beta) {
    FL_BIND(const float, src);
    FL_BIND(float, dst);
    FL_FOR(i, n) dst[i] = beta == 0.0f ? src[i] : dst[i] + src[i];
}

/* Add/Multiply with broadcasting: forward one thread per output element; backward one thread per (sample,
 * parameter element), which writes its members' dx and sums their db in ascending order, as the CPU does
 * (no atomics: runs repeat exactly) */
FL_KERNEL k_bmerge_fwd(int mode, fl_bcast_desc d, FL_BUF(const float, x), FL_BUF(const float, b), FL_BUF(float, y)) {
    FL_BIND(const float, x);
    FL_BIND(const float, b);
    FL_BIND(float, y);
    FL_FOR(e, d.n * d.size) {
        int64_t n = e / d.size;
        float v = b[n * d.psize + fl_bcast_index(&d, e - n * d.size)];
        y[e] = mode == FL_BM_MUL ? x[e] * v : x[e] + v;
    }
}

FL_KERNEL k_bmerge_bwd(int mode, fl_bcast_desc d, FL_BUF(const float, x), FL_BUF(const float, b),
                       FL_BUF(const float, dy), FL_BUF(float, dx), float beta_x, FL_BUF(float, db), float beta_b) {
    FL_BIND(const float, x);
    FL_BIND(const float, b);
    FL_BIND(const float, dy);
    FL_BIND(float, dx);
    FL_BIND(float, db);
    const int64_t per = d.size / d.psize;
    FL_FOR(e, d.n * d.psize) {
        int64_t n = e / d.psize, q = e - n * d.psize, base = n * d.size;
        float bq = b[e], acc = 0.0f;
        for (int64_t t = 0; t < per; t++) {
            int64_t j = base + fl_bcast_member(&d, q, t);
            if (dx) {
                float v = mode == FL_BM_MUL ? dy[j] * bq : dy[j];
                dx[j] = beta_x == 0.0f ? v : dx[j] + v;
            }
            acc += mode == FL_BM_MUL ? dy[j] * x[j] : dy[j];
        }
        if (db) db[e] = beta_b == 0.0f ? acc : db[e] + acc;
    }
}
