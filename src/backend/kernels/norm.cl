/*
 * norm.cl — BatchNormalization, LayerNormalization, Normalization, Softmax(axis) and PReLU on the GPU, written
 * once for CUDA and OpenCL (dialect.h). The sums over the batch (BatchNormalization's statistics and
 * gradients, LayerNormalization's gamma gradient, PReLU's alpha gradient) are reduce.cl's deterministic column
 * sums: each summand a partial-sum kernel of its own (FL_COLSUM_BODY), then k_colsum_final. The formulas are
 * the CPU's (cpu_backend.c, cpu_attention.c, cpu_pact.c, cpu_merge.c), with ops/math.h's shared ones.
 */

/* ---------------------------------------------------------------------------------------- BatchNormalization
 *
 * Keras semantics (biased batch variance; moving = moving * momentum + batch * (1 - momentum)), which
 * cuDNN's batch norm does not follow. Training: the mean, then the squared deviations about it, as column
 * sums; per channel s = invstd * gamma, t = beta - mean * s (the 2c floats "st", the fused forward's coef);
 * y = fl_bn_pre(x, s, t), through the fused ReLU where asked. The backward's g is dy, masked by the fused
 * ReLU's derivative where coef is given (hi: its cap, INFINITY for a ReLU; slope: a LeakyReLU's). */

/* g of element (r, j) of [rows, n]: dy, or dy masked by the fused ReLU's derivative at its recomputed input */
FL_DEV float fl_bn_g(int64_t e, int j, int n, FL_G const float *x, FL_G const float *dy, FL_G const float *coef,
                     float hi, float slope) {
    return coef ? dy[e] * fl_relu_mask(fl_bn_pre(x[e], coef[j], coef[n + j]), hi, slope) : dy[e];
}

/* sum_r (x - mean)^2 */
FL_KERNEL k_colsum_bn_dev2(int64_t rows, int n, int chunks, FL_BUF(const float, x), FL_BUF(const float, mean),
                           FL_BUF(float, partial)) {
    FL_BIND(const float, x);
    FL_BIND(const float, mean);
    FL_BIND(float, partial);
    FL_COLSUM_BODY((x[r * n + j] - mean[j]) * (x[r * n + j] - mean[j]))
}

/* sum_r g, and (with mean) sum_r g * (x - mean) */
FL_KERNEL k_colsum_bn_g(int64_t rows, int n, int chunks, FL_BUF(const float, x), FL_BUF(const float, dy),
                        FL_BUF(const float, coef), float hi, float slope, FL_BUF(const float, mean),
                        FL_BUF(float, partial)) {
    FL_BIND(const float, x);
    FL_BIND(const float, dy);
    FL_BIND(const float, coef);
    FL_BIND(const float, mean);
    FL_BIND(float, partial);
    FL_COLSUM_BODY(mean ? fl_bn_g(r * n + j, j, n, x, dy, coef, hi, slope) * (x[r * n + j] - mean[j])
                        : fl_bn_g(r * n + j, j, n, x, dy, coef, hi, slope))
}

/* per channel: mean = sum / m (in place), invstd, the moving statistics, s and t (st: 2c floats) */
FL_KERNEL k_bn_stats(int c, int64_t m, float eps, float momentum, FL_BUF(const float, gamma), FL_BUF(const float, beta),
                     FL_BUF(float, mean), FL_BUF(const float, sdev2), FL_BUF(float, invstd), FL_BUF(float, mm),
                     FL_BUF(float, mv), FL_BUF(float, st)) {
    FL_BIND(const float, gamma);
    FL_BIND(const float, beta);
    FL_BIND(float, mean);
    FL_BIND(const float, sdev2);
    FL_BIND(float, invstd);
    FL_BIND(float, mm);
    FL_BIND(float, mv);
    FL_BIND(float, st);
    FL_FOR(j, c) {
        const float mu = mean[j], var = sdev2[j] / (float)m, inv = 1.0f / sqrtf(var + eps);
        invstd[j] = inv;
        mm[j] = mm[j] * momentum + mu * (1.0f - momentum);
        mv[j] = mv[j] * momentum + var * (1.0f - momentum);
        const float s = gamma ? inv * gamma[j] : inv;
        st[j] = s;
        st[c + j] = -mu * s + (beta ? beta[j] : 0.0f);
    }
}

/* y = x * s + t, then a LeakyReLU where slope is nonzero, else a ReLU capped at hi where hi > 0 */
FL_KERNEL k_bn_apply(int64_t total, int c, FL_BUF(const float, x), FL_BUF(const float, st), float hi, float slope,
                     FL_BUF(float, y)) {
    FL_BIND(const float, x);
    FL_BIND(const float, st);
    FL_BIND(float, y);
    FL_FOR(e, total) {
        const int j = (int)(e % c);
        float v = fl_bn_pre(x[e], st[j], st[c + j]);
        if (slope != 0.0f) {
            const float p = v > 0.0f ? v : 0.0f, q = v < 0.0f ? v : 0.0f;
            v = p + slope * q;
        } else if (hi > 0.0f) {
            v = v > 0.0f ? v : 0.0f;
            v = v < hi ? v : hi;
        }
        y[e] = v;
    }
}

/* Inference: Keras's formula, as the CPU's: inv = 1 / sqrt(var + eps) * gamma, y = x * inv + (beta - mean * inv) */
FL_KERNEL k_bn_infer(int64_t total, int c, float eps, FL_BUF(const float, x), FL_BUF(const float, gamma),
                     FL_BUF(const float, beta), FL_BUF(const float, mm), FL_BUF(const float, mv), FL_BUF(float, y)) {
    FL_BIND(const float, x);
    FL_BIND(const float, gamma);
    FL_BIND(const float, beta);
    FL_BIND(const float, mm);
    FL_BIND(const float, mv);
    FL_BIND(float, y);
    FL_FOR(e, total) {
        const int j = (int)(e % c);
        float inv = 1.0f / sqrtf(mv[j] + eps);
        if (gamma) inv *= gamma[j];
        float res = -mm[j] * inv;
        if (beta) res += beta[j];
        y[e] = x[e] * inv + res;
    }
}

/* Backward, per channel from the sums (sums: sum g, then sum g * (x - mean)): dgamma = sum g (x - mean) * invstd,
 * dbeta = sum g, and dx = s g + t + u (x - mean) with s = gamma invstd, t = -s mean(g), u = -s invstd^2
 * mean(g (x - mean)) (stu: 3c floats), in double as the CPU's */
FL_KERNEL k_bn_coef(int c, int64_t m, FL_BUF(const float, gamma), FL_BUF(const float, invstd),
                    FL_BUF(const float, sums), FL_BUF(float, dgamma), FL_BUF(float, dbeta), FL_BUF(float, stu)) {
    FL_BIND(const float, gamma);
    FL_BIND(const float, invstd);
    FL_BIND(const float, sums);
    FL_BIND(float, dgamma);
    FL_BIND(float, dbeta);
    FL_BIND(float, stu);
    FL_FOR(j, c) {
        const double sdy = sums[j], sdyd = sums[c + j], iv = invstd[j];
        if (dgamma) dgamma[j] = (float)(sdyd * iv);
        if (dbeta) dbeta[j] = (float)sdy;
        if (stu) {
            const double sj = (double)(gamma ? gamma[j] : 1.0f) * iv;
            stu[j] = (float)sj;
            stu[c + j] = (float)(-sj * sdy / (double)m);
            stu[2 * c + j] = (float)(-sj * iv * iv * sdyd / (double)m);
        }
    }
}

/* dx (beta: +)= s g + t + u (x - mean) */
FL_KERNEL k_bn_dx(int64_t total, int c, FL_BUF(const float, x), FL_BUF(const float, dy), FL_BUF(const float, coef),
                  float hi, float slope, FL_BUF(const float, mean), FL_BUF(const float, stu), FL_BUF(float, dx),
                  float beta) {
    FL_BIND(const float, x);
    FL_BIND(const float, dy);
    FL_BIND(const float, coef);
    FL_BIND(const float, mean);
    FL_BIND(const float, stu);
    FL_BIND(float, dx);
    FL_FOR(e, total) {
        const int j = (int)(e % c);
        const float v = fl_bn_g(e, j, c, x, dy, coef, hi, slope) * stu[j] + stu[c + j] +
                        stu[2 * c + j] * (x[e] - mean[j]);
        dx[e] = beta == 0.0f ? v : dx[e] + v;
    }
}

/* Training's Add fed by a normalisation that nothing else reads (add_affine): y = binary's mode of
 * (x * s + t, o), rounded as the normalisation's own pass and binary round */
FL_KERNEL k_add_affine(int mode, int64_t total, int c, FL_BUF(const float, x), FL_BUF(const float, st),
                       FL_BUF(const float, o), FL_BUF(float, y)) {
    FL_BIND(const float, x);
    FL_BIND(const float, st);
    FL_BIND(const float, o);
    FL_BIND(float, y);
    const float hi = mode == FL_BIN_ADD_RELU6 ? 6.0f : INFINITY;
    FL_FOR(e, total) {
        const int j = (int)(e % c);
        const float z = fl_bn_pre(x[e], st[j], st[c + j]), v0 = z + o[e];
        if (mode == FL_BIN_ADD) { y[e] = v0; continue; }
        const float v = v0 > 0.0f ? v0 : 0.0f;
        y[e] = v < hi ? v : hi;
    }
}

/* ---------------------------------------------------------------------------------------- LayerNormalization
 *
 * cpu_attention.c's twins: a row group per row (the mean, then the variance about it, then the output); stats
 * holds each row's mean and 1/sqrt(var + eps); gamma's gradient is a column sum, beta's colsum_rows of dy. */

FL_ROW_KERNEL k_layernorm_fwd(int64_t rows, int c, float eps, int rms, FL_BUF(const float, x),
                              FL_BUF(const float, gamma), FL_BUF(const float, beta), FL_BUF(float, y),
                              FL_BUF(float, stats)) {
    FL_BIND(const float, x);
    FL_BIND(const float, gamma);
    FL_BIND(const float, beta);
    FL_BIND(float, y);
    FL_BIND(float, stats);
    FL_ROW_SCRATCH;
    const int lane = FL_LANE;
    FL_ROW_LOOP(r, rows) {
        const FL_G float *xr = x + r * c;
        FL_G float *yr = y + r * c;
        float s = 0;
        FL_ROW_COLS(j, c) s += xr[j];
        const float mean = FL_ROW_SUM(s) / (float)c;
        float v = 0;
        FL_ROW_COLS(j, c) { float d = xr[j] - mean; v += d * d; }
        const float inv = 1.0f / sqrtf(FL_ROW_SUM(v) / (float)c + eps);
        if (lane == 0) { stats[2 * r] = mean; stats[2 * r + 1] = inv; }
        const float sub = rms ? 0.0f : mean;
        FL_ROW_COLS(j, c) {
            float t = (xr[j] - sub) * inv;
            if (gamma) t *= gamma[j];
            if (beta) t += beta[j];
            yr[j] = t;
        }
    }
}

/* g = dy * gamma: dx (beta: +)= inv (g - mean(g) - xhat mean(g xhat)), or with rms
 * inv g - inv^3 (x - mean) mean(g x) */
FL_ROW_KERNEL k_layernorm_bwd(int64_t rows, int c, int rms, FL_BUF(const float, x), FL_BUF(const float, gamma),
                              FL_BUF(const float, stats), FL_BUF(const float, dy), FL_BUF(float, dx), float beta) {
    FL_BIND(const float, x);
    FL_BIND(const float, gamma);
    FL_BIND(const float, stats);
    FL_BIND(const float, dy);
    FL_BIND(float, dx);
    FL_ROW_SCRATCH;
    FL_ROW_LOOP(r, rows) {
        const FL_G float *xr = x + r * c, *gr = dy + r * c;
        FL_G float *dr = dx + r * c;
        const float mean = stats[2 * r], inv = stats[2 * r + 1];
        float sg = 0, sgx = 0;
        FL_ROW_COLS(j, c) {
            float g = gamma ? gr[j] * gamma[j] : gr[j];
            sg += g;
            sgx += g * (rms ? xr[j] : (xr[j] - mean) * inv);
        }
        const float mg = FL_ROW_SUM(sg) / (float)c, mgx = FL_ROW_SUM(sgx) / (float)c;
        FL_ROW_COLS(j, c) {
            float g = gamma ? gr[j] * gamma[j] : gr[j], d;
            if (rms) d = inv * g - inv * inv * inv * (xr[j] - mean) * mgx;
            else d = inv * (g - mg - (xr[j] - mean) * inv * mgx);
            dr[j] = beta == 0.0f ? d : dr[j] + d; /* the lane's own element */
        }
    }
}

/* dgamma: sum_r dy * xhat (rms: dy * x * inv) */
FL_KERNEL k_colsum_ln_dgamma(int64_t rows, int n, int chunks, int rms, FL_BUF(const float, x), FL_BUF(const float, dy),
                             FL_BUF(const float, stats), FL_BUF(float, partial)) {
    FL_BIND(const float, x);
    FL_BIND(const float, dy);
    FL_BIND(const float, stats);
    FL_BIND(float, partial);
    FL_COLSUM_BODY(dy[r * n + j] * (x[r * n + j] - (rms ? 0.0f : stats[2 * r])) * stats[2 * r + 1])
}

/* ------------------------------------------------------------------------------------------- Softmax(axis)
 *
 * Softmax along the middle axis of x[outer, c, inner]: one thread per (o, i), walking its c values inner apart
 * in the CPU's order; neighbouring threads take neighbouring i, so each step of the walk reads contiguous
 * memory. (The last axis, inner = 1, is act.cl's row-group softmax.) */
FL_KERNEL k_softmax_axis_fwd(int64_t outer, int c, int64_t inner, FL_BUF(const float, x), FL_BUF(float, y)) {
    FL_BIND(const float, x);
    FL_BIND(float, y);
    FL_FOR(r, outer * inner) {
        const int64_t base = r / inner * c * inner + r % inner;
        const FL_G float *xr = x + base;
        FL_G float *yr = y + base;
        float mx = xr[0];
        for (int j = 1; j < c; j++) mx = xr[j * inner] > mx ? xr[j * inner] : mx;
        float s = 0;
        for (int j = 0; j < c; j++) { float e = expf(xr[j * inner] - mx); yr[j * inner] = e; s += e; }
        const float inv = 1.0f / s;
        for (int j = 0; j < c; j++) yr[j * inner] *= inv;
    }
}

/* dx (beta: +)= y * (dy - sum_c(dy * y)) */
FL_KERNEL k_softmax_axis_bwd(int64_t outer, int c, int64_t inner, FL_BUF(const float, y), FL_BUF(const float, dy),
                             FL_BUF(float, dx), float beta) {
    FL_BIND(const float, y);
    FL_BIND(const float, dy);
    FL_BIND(float, dx);
    FL_FOR(r, outer * inner) {
        const int64_t base = r / inner * c * inner + r % inner;
        float s = 0;
        for (int j = 0; j < c; j++) s += dy[base + j * inner] * y[base + j * inner];
        for (int j = 0; j < c; j++) {
            const int64_t k = base + j * inner;
            const float g = y[k] * (dy[k] - s);
            dx[k] = beta == 0.0f ? g : dx[k] + g;
        }
    }
}

/* ------------------------------------------------------------------------------------ PReLU, Normalization
 *
 * The parameter of sample element j is element fl_bcast_index(&d, j) (d: backend.h's fl_bcast_desc, numbers
 * only, passed by value). */

/* PReLU: y = x > 0 ? x : alpha[p(j)] * x */
FL_KERNEL k_prelu_fwd(fl_bcast_desc d, FL_BUF(const float, x), FL_BUF(const float, alpha), FL_BUF(float, y)) {
    FL_BIND(const float, x);
    FL_BIND(const float, alpha);
    FL_BIND(float, y);
    FL_FOR(i, d.n * d.size) {
        const float v = x[i];
        y[i] = v > 0 ? v : alpha[fl_bcast_index(&d, i % d.size)] * v;
    }
}

/* dx (beta: +)= dy * (x > 0 ? 1 : alpha) */
FL_KERNEL k_prelu_bwd(fl_bcast_desc d, FL_BUF(const float, x), FL_BUF(const float, alpha), FL_BUF(const float, dy),
                      FL_BUF(float, dx), float beta) {
    FL_BIND(const float, x);
    FL_BIND(const float, alpha);
    FL_BIND(const float, dy);
    FL_BIND(float, dx);
    FL_FOR(i, d.n * d.size) {
        const float g = x[i] > 0 ? dy[i] : dy[i] * alpha[fl_bcast_index(&d, i % d.size)];
        dx[i] = beta == 0.0f ? g : dx[i] + g;
    }
}

/* The element of row r = (batch b, shared position t) and alpha element a, in the CPU's order
 * (fl_cpu_prelu_bwd): a's kept coordinates, then t's shared ones */
FL_DEV int64_t fl_prelu_at(const fl_bcast_desc *d, int64_t shared, int64_t r, int a) {
    const int64_t b = r / shared;
    int64_t t = r - b * shared, off = b * d->size;
    for (int k = 0; k < d->ndim; k++)
        if (d->pstride[k]) off += a / d->pstride[k] % d->dim[k] * d->sstride[k];
    for (int k = d->ndim - 1; k >= 0; k--)
        if (!d->pstride[k]) { off += t % d->dim[k] * d->sstride[k]; t /= d->dim[k]; }
    return off;
}
FL_DEV float fl_prelu_dalpha(FL_G const float *x, FL_G const float *dy, int64_t off) {
    const float v = x[off];
    return v < 0 ? dy[off] * v : 0.0f;
}

/* dalpha[a] = sum over the batch and the shared positions of dy * min(x, 0): the column sums of a
 * [n * shared, psize] matrix */
FL_KERNEL k_colsum_prelu_dalpha(int64_t rows, int n, int chunks, fl_bcast_desc d, int64_t shared,
                                FL_BUF(const float, x), FL_BUF(const float, dy), FL_BUF(float, partial)) {
    FL_BIND(const float, x);
    FL_BIND(const float, dy);
    FL_BIND(float, partial);
    FL_COLSUM_BODY(fl_prelu_dalpha(x, dy, fl_prelu_at(&d, shared, r, j)))
}

/* Normalization: y = (x - mean[p]) / den, or with invert mean[p] + x * den; den = fl_norm_den(var[p]) */
FL_KERNEL k_normalize_fwd(fl_bcast_desc d, int invert, FL_BUF(const float, x), FL_BUF(const float, mean),
                          FL_BUF(const float, var), FL_BUF(float, y)) {
    FL_BIND(const float, x);
    FL_BIND(const float, mean);
    FL_BIND(const float, var);
    FL_BIND(float, y);
    FL_FOR(i, d.n * d.size) {
        const int64_t p = fl_bcast_index(&d, i % d.size);
        const float den = fl_norm_den(var[p]);
        y[i] = invert ? mean[p] + x[i] * den : (x[i] - mean[p]) / den;
    }
}

/* dx (beta: +)= dy / den (invert: dy * den) */
FL_KERNEL k_normalize_bwd(fl_bcast_desc d, int invert, FL_BUF(const float, var), FL_BUF(const float, dy),
                          FL_BUF(float, dx), float beta) {
    FL_BIND(const float, var);
    FL_BIND(const float, dy);
    FL_BIND(float, dx);
    FL_FOR(i, d.n * d.size) {
        const float den = fl_norm_den(var[fl_bcast_index(&d, i % d.size)]);
        const float g = invert ? dy[i] * den : dy[i] / den;
        dx[i] = beta == 0.0f ? g : dx[i] + g;
    }
}
