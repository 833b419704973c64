/*
 * act.cl — the activations on the GPU, written once for CUDA and OpenCL (dialect.h): the bias and fused
 * activation after a matrix product, the element-wise activations and their gradients, Softmax over the
 * last axis (a row group per row), the parametrized activations (ReLU's options, LeakyReLU, ELU,
 * Rescaling) and Dropout. The formulas are ops/math.h's, which the CPU's cpu_act.c and cpu_pact.c call too.
 */

/* y[r, j] = act(y[r, j] + b[j]) */
FL_KERNEL k_bias_act(int64_t total, int n, FL_BUF(const float, b), int act, FL_BUF(float, y)) {
    FL_BIND(const float, b);
    FL_BIND(float, y);
    FL_FOR(e, total) {
        float v = y[e] + (b ? b[e % n] : 0.0f);
        y[e] = fl_act_forward(act, v);
    }
}

/* dy *= act'(y), for the activations whose derivative follows from the output */
FL_KERNEL k_act_grad_y(int64_t total, int act, FL_BUF(const float, y), FL_BUF(float, dy)) {
    FL_BIND(const float, y);
    FL_BIND(float, dy);
    FL_FOR(e, total) dy[e] *= fl_act_grad_y(act, y[e]);
}

FL_KERNEL k_act_fwd(int64_t total, int act, FL_BUF(const float, x), FL_BUF(float, y)) {
    FL_BIND(const float, x);
    FL_BIND(float, y);
    FL_FOR(e, total) y[e] = fl_act_forward(act, x[e]);
}

FL_KERNEL k_act_bwd(int64_t total, int act, FL_BUF(const float, x), FL_BUF(const float, y), FL_BUF(const float, dy),
                    FL_BUF(float, dx), float beta) {
    FL_BIND(const float, x);
    FL_BIND(const float, y);
    FL_BIND(const float, dy);
    FL_BIND(float, dx);
    FL_FOR(e, total) {
        float g = dy[e] * fl_act_grad_x(act, x[e], y[e]);
        dx[e] = beta == 0.0f ? g : dx[e] + g;
    }
}

/* softmax along rows of c: y = exp(x - max) / sum, as the CPU's cpu_act_fwd */
FL_ROW_KERNEL k_softmax_fwd(int64_t rows, int c, FL_BUF(const float, x), FL_BUF(float, y)) {
    FL_BIND(const float, x);
    FL_BIND(float, y);
    FL_ROW_SCRATCH;
    FL_ROW_LOOP(r, rows) {
        const FL_G float *xr = x + r * c;
        FL_G float *yr = y + r * c;
        float mx = xr[0];
        FL_ROW_COLS(j, c) mx = xr[j] > mx ? xr[j] : mx;
        mx = FL_ROW_MAX(mx);
        float s = 0;
        FL_ROW_COLS(j, c) { float e = expf(xr[j] - mx); yr[j] = e; s += e; }
        float inv = 1.0f / FL_ROW_SUM(s);
        FL_ROW_COLS(j, c) yr[j] *= inv; /* the lane's own writes */
    }
}

/* dx (+)= y * (dy - sum(dy * y)) */
FL_ROW_KERNEL k_softmax_bwd(int64_t rows, int c, FL_BUF(const float, y), FL_BUF(const float, dy), FL_BUF(float, dx),
                            float beta) {
    FL_BIND(const float, y);
    FL_BIND(const float, dy);
    FL_BIND(float, dx);
    FL_ROW_SCRATCH;
    FL_ROW_LOOP(r, rows) {
        const FL_G float *yr = y + r * c, *g = dy + r * c;
        FL_G float *o = dx + r * c;
        float s = 0;
        FL_ROW_COLS(j, c) s += g[j] * yr[j];
        s = FL_ROW_SUM(s);
        FL_ROW_COLS(j, c) o[j] = (beta == 0.0f ? 0.0f : o[j]) + yr[j] * (g[j] - s);
    }
}

/* ReLU(max_value, negative_slope, threshold), LeakyReLU, ELU, Rescaling */
FL_KERNEL k_pact_fwd(fl_pact_desc p, int64_t n, FL_BUF(const float, x), FL_BUF(float, y)) {
    FL_BIND(const float, x);
    FL_BIND(float, y);
    FL_FOR(i, n) y[i] = fl_pact_forward(&p, x[i]);
}

FL_KERNEL k_pact_bwd(fl_pact_desc p, int64_t n, FL_BUF(const float, x), FL_BUF(const float, y),
                     FL_BUF(const float, dy), FL_BUF(float, dx), float beta) {
    FL_BIND(const float, x);
    FL_BIND(const float, y);
    FL_BIND(const float, dy);
    FL_BIND(float, dx);
    FL_FOR(i, n) {
        float g = dy[i] * fl_pact_grad(&p, x[i], y[i]);
        dx[i] = beta == 0.0f ? g : dx[i] + g;
    }
}

/* Dropout: the same Philox draws as the CPU; block b gives Philox elements 4b..4b+3, buffer elements
 * 4b - offset .. 4b + 3 - offset. gstep: NULL in eager mode; while a CUDA graph is captured, the stream given
 * is the layer's base stream and the step is read from the device. */
FL_KERNEL k_dropout_fwd(int64_t n, float rate, uint64_t seed, uint64_t stream, int64_t offset,
                        FL_BUF(const int64_t, gstep), FL_BUF(const float, x), FL_BUF(float, y), FL_BUF(uint8_t, mask)) {
    FL_BIND(const int64_t, gstep);
    FL_BIND(const float, x);
    FL_BIND(float, y);
    FL_BIND(uint8_t, mask);
    const float scale = 1.0f / (1.0f - rate);
    if (gstep) stream = fl_dropout_stream(stream, *gstep);
    const int64_t b0 = offset / 4, nb = (offset + n + 3) / 4 - b0;
    FL_FOR(k, nb) {
        fl_philox4 r = fl_philox_block(seed, stream, (uint64_t)(b0 + k));
        for (int j = 0; j < 4; j++) {
            int64_t i = (b0 + k) * 4 + j - offset;
            if (i < 0) continue;
            if (i >= n) break;
            uint8_t keep = fl_u32_to_unit(r.v[j]) >= rate;
            mask[i] = keep;
            y[i] = keep ? x[i] * scale : 0.0f;
        }
    }
}

FL_KERNEL k_dropout_bwd(int64_t n, float scale, FL_BUF(const uint8_t, mask), FL_BUF(const float, dy),
                        FL_BUF(float, dx), float beta) {
    FL_BIND(const uint8_t, mask);
    FL_BIND(const float, dy);
    FL_BIND(float, dx);
    FL_FOR(i, n) {
        float g = mask[i] ? dy[i] * scale : 0.0f;
        dx[i] = beta == 0.0f ? g : dx[i] + g;
    }
}
