/*
 * loss.cl — the losses, metrics and the loss's sum on the GPU, written once for CUDA and OpenCL
 * (dialect.h): a row group per row computes fl_loss_row's terms (ops/math.h, the CPU's), each summed per
 * lane and then across lanes, so only the order of those sums differs from the CPU's; the metrics likewise.
 */

/* fl_loss_row (ops/math.h) with a row group per row (dialect.h): the same per-element terms
 * and the same row sums (the maximum, the sum of exponentials, the loss,
 * the targets' sum, the gradient's shared term), each summed per lane and
 * then across lanes; only the order of those sums differs from the CPU's.
 * Keep the two in step. Returns the row's loss in every lane. */
FL_DEV float loss_row_group(int lane, int code, int input, int c, float s, const FL_G float *p,
                            const FL_G float *t, int cls, FL_G float *g FL_ROW_PARAMS) {
#define TJ(j) (t ? t[(j)] : ((j) == cls ? 1.0f : 0.0f))
    float L = 0;
    /* if/else, not a switch: PoCL's barrier handling (the row sums are barriers in OpenCL) miscompiles a
     * switch around them */
    if (code == FL_LC_CCE || code == FL_LC_SCCE) {
        if (input == FL_LI_LOGITS) {
            /* log-softmax, stable */
            float mx = p[0];
            FL_ROW_COLS(j, c) mx = p[j] > mx ? p[j] : mx;
            mx = FL_ROW_MAX(mx);
            float se = 0;
            FL_ROW_COLS(j, c) se += expf(p[j] - mx);
            float lse = mx + logf(FL_ROW_SUM(se));
            float tsum = 0;
            FL_ROW_COLS(j, c) {
                float tj = TJ(j);
                L -= tj * (p[j] - lse);
                tsum += tj;
            }
            L = FL_ROW_SUM(L);
            tsum = FL_ROW_SUM(tsum);
            if (g)
                FL_ROW_COLS(j, c) g[j] = s * (expf(p[j] - lse) * tsum - TJ(j));
        } else {
            /* probabilities, as Keras: p / sum(p), clipped to [eps, 1-eps] */
            float ps = 0;
            FL_ROW_COLS(j, c) ps += p[j];
            ps = FL_ROW_SUM(ps);
            float tsum = 0;
            FL_ROW_COLS(j, c) {
                float tj = TJ(j);
                if (tj != 0.0f) L -= tj * logf(fl_clipf(p[j] / ps, FL_LOSS_EPS, 1.0f - FL_LOSS_EPS));
                tsum += tj;
            }
            L = FL_ROW_SUM(L);
            tsum = FL_ROW_SUM(tsum);
            if (g) {
                if (input == FL_LI_SOFTMAX_FUSED) {
                    /* gradient w.r.t. the softmax's logits */
                    FL_ROW_COLS(j, c) g[j] = s * (p[j] * tsum - TJ(j));
                } else {
                    /* d/dp_j of -sum_i t_i log(clip(p_i / S)) */
                    float acc = 0;
                    FL_ROW_COLS(i, c) {
                        float ti = TJ(i), q = p[i] / ps;
                        if (ti != 0.0f && q > FL_LOSS_EPS && q < 1.0f - FL_LOSS_EPS) acc += ti / ps;
                    }
                    acc = FL_ROW_SUM(acc);
                    FL_ROW_COLS(j, c) {
                        float tj = TJ(j), q = p[j] / ps;
                        float direct = (tj != 0.0f && q > FL_LOSS_EPS && q < 1.0f - FL_LOSS_EPS) ? -tj / p[j] : 0.0f;
                        g[j] = s * (direct + acc);
                    }
                }
            }
        }
    } else if (code == FL_LC_BCE) {
        FL_ROW_COLS(j, c) {
            float y = t[j];
            if (input == FL_LI_LOGITS) {
                float z = p[j];
                L += fmaxf(z, 0.0f) - z * y + log1pf(expf(-fabsf(z)));
                if (g) g[j] = s / (float)c * (fl_sigmoidf(z) - y);
            } else {
                float q = fl_clipf(p[j], FL_LOSS_EPS, 1.0f - FL_LOSS_EPS);
                L -= y * logf(q) + (1.0f - y) * logf(1.0f - q);
                if (g) {
                    if (input == FL_LI_SIGMOID_FUSED) g[j] = s / (float)c * (p[j] - y);
                    else {
                        int inside = p[j] > FL_LOSS_EPS && p[j] < 1.0f - FL_LOSS_EPS;
                        g[j] = inside ? s / (float)c * (-y / q + (1.0f - y) / (1.0f - q)) : 0.0f;
                    }
                }
            }
        }
        L = FL_ROW_SUM(L) / (float)c;
    } else { /* FL_LC_MSE */
        FL_ROW_COLS(j, c) {
            float e = p[j] - t[j];
            L += e * e;
            if (g) g[j] = s * 2.0f * e / (float)c;
        }
        L = FL_ROW_SUM(L) / (float)c;
    }
    return L;
#undef TJ
}

FL_ROW_KERNEL k_loss(fl_loss_desc d, FL_BUF(const float, pred), FL_BUF(const float, target), FL_BUF(float, row_loss),
                 FL_BUF(float, grad)) {
    FL_ROW_SCRATCH;
    FL_BIND(const float, pred);
    FL_BIND(const float, target);
    FL_BIND(float, row_loss);
    FL_BIND(float, grad);
    const int lane = FL_LANE;
    FL_ROW_LOOP(r, d.rows) {
        const FL_G float *t = d.code == FL_LC_SCCE ? 0 : target + r * d.c;
        int cls = d.code == FL_LC_SCCE ? (int)target[r] : -1;
        float L = loss_row_group(lane, d.code, d.input, d.c, d.scale, pred + r * d.c, t, cls,
                                grad ? grad + r * d.c : 0 FL_ROW_ARGS);
        if (lane == 0) row_loss[r] = L;
    }
}

/* The first maximum of r[0..c) seen by this lane (columns lane, lane + FL_ROW_LANES, ...), then the row's */
FL_DEV int row_argmax(const FL_G float *r, int c, int lane FL_ROW_PARAMS) {
    float v = -INFINITY;
    int i = INT_MAX;
    FL_ROW_COLS(j, c)
        if (i == INT_MAX || r[j] > v) { v = r[j]; i = j; }
    return FL_ROW_ARGMAX(v, i);
}

/* fl_metric_row with a row group per row: the first maximum (argmax) of the prediction and of a one-hot
 * target; the count of matching outputs. */
FL_ROW_KERNEL k_metric(int code, int64_t rows, int c, FL_BUF(const float, pred), FL_BUF(const float, target),
                       FL_BUF(float, score)) {
    FL_BIND(const float, pred);
    FL_BIND(const float, target);
    FL_BIND(float, score);
    FL_ROW_SCRATCH;
    const int lane = FL_LANE;
    FL_ROW_LOOP(r, rows) {
        const FL_G float *p = pred + r * c;
        float v;
        if (code == FL_MC_MAE || code == FL_MC_MSE) {
            const FL_G float *t = target + r * c;
            float s = 0.0f;
            FL_ROW_COLS(j, c) {
                float d = p[j] - t[j];
                s += code == FL_MC_MAE ? fabsf(d) : d * d;
            }
            v = FL_ROW_SUM(s) / (float)c;
        } else if (code == FL_MC_BINARY) {
            const FL_G float *t = target + r * c;
            int ok = 0;
            FL_ROW_COLS(j, c) ok += ((p[j] > 0.5f) ? 1.0f : 0.0f) == t[j];
            v = (float)FL_ROW_SUMI(ok) / (float)c;
        } else {
            int am = row_argmax(p, c, lane FL_ROW_ARGS);
            int cls = code == FL_MC_SPARSE_CATEGORICAL ? (int)target[r] : row_argmax(target + r * c, c, lane FL_ROW_ARGS);
            v = am == cls ? 1.0f : 0.0f;
        }
        if (lane == 0) score[r] = v;
    }
}

/* acc += scale * sum(x): one block of 256 threads, a fixed order (deterministic) */
FL_KERNEL k_sum_into(int64_t n, FL_BUF(const float, x), double scale, FL_BUF(double, acc)) {
    FL_BIND(const float, x);
    FL_BIND(double, acc);
    FL_SHARED double sh[256];
    double s = 0;
    for (int64_t i = FL_TID; i < n; i += FL_BDIM) s += x[i];
    sh[FL_TID] = s;
    FL_SYNC();
    for (int k = 128; k > 0; k >>= 1) {
        if (FL_TID < k) sh[FL_TID] += sh[FL_TID + k];
        FL_SYNC();
    }
    if (FL_TID == 0) acc[0] += scale * sh[0];
}
