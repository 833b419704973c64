/*
 * cpu_attn_score.c — the CPU kernels of the Attention layer's learned score
 * weights: a scalar weight times a tensor (use_scale on dot-product scores,
 * concat_score_weight), and the additive ("concat") scores
 * sum_e tanh(a (q_ie + k_je)) with their gradients. The tanh values are
 * recomputed in backward rather than stored (tq * tk * dk floats a sample).
 */
#include "cpu_internal.h"

#include <math.h>


void fl_cpu_scalar_mul_fwd(int64_t n, const float *x, const float *s, float *y) {
    const float a = s[0];
#pragma omp parallel for schedule(static) PAR(n)
    for (int64_t i = 0; i < n; i++) y[i] = a * x[i];
}

void fl_cpu_scalar_mul_bwd(int64_t n, const float *x, const float *s, const float *dy, float *dx, float dx_beta,
                           float *ds) {
    const float a = s[0];
    if (ds) { /* in double: a sum over every score of the batch */
        double acc = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : acc) PAR(n)
        for (int64_t i = 0; i < n; i++) acc += (double)dy[i] * x[i];
        ds[0] = (float)acc;
    }
    if (dx) {
#pragma omp parallel for schedule(static) PAR(n)
        for (int64_t i = 0; i < n; i++) dx[i] = a * dy[i] + (dx_beta != 0.0f ? dx[i] : 0.0f);
    }
}

void fl_cpu_attn_concat_fwd(const fl_attn_desc *d, const float *q, const float *k, const float *scale, float *s) {
    const int tq = d->tq, tk = d->tk, dk = d->dk;
    const float a = scale ? scale[0] : 1.0f;
    const int64_t rows = d->n * tq;
#pragma omp parallel for schedule(static) PAR(rows * tk * dk)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t b = r / tq;
        const float *qi = q + r * dk;
        for (int j = 0; j < tk; j++) {
            const float *kj = k + (b * tk + j) * dk;
            float acc = 0.0f;
            for (int e = 0; e < dk; e++) acc += tanhf(a * (qi[e] + kj[e]));
            s[r * tk + j] = acc;
        }
    }
}

/* g = ds[i, j] a (1 - t^2) with t = tanh(a (q_ie + k_je)): dq_ie = sum_j g,
 * dk_je = sum_i g; dscale = sum ds (1 - t^2) (q_ie + k_je). */
void fl_cpu_attn_concat_bwd(const fl_attn_desc *d, const float *q, const float *k, const float *scale,
                            const float *ds, int which, float *dst, float beta, float *dscale) {
    const int tq = d->tq, tk = d->tk, dk = d->dk;
    const int64_t n = d->n;
    const float a = scale ? scale[0] : 1.0f;
    double sacc = 0.0;
    /* one sample per iteration: dq's rows (which 0) or dk's rows (which 1) of it */
#pragma omp parallel for schedule(static) reduction(+ : sacc) PAR(n * tq * tk * dk)
    for (int64_t b = 0; b < n; b++) {
        const int rows = which ? tk : tq, other = which ? tq : tk;
        const float *self = which ? k + b * tk * dk : q + b * tq * dk;
        const float *oth = which ? q + b * tq * dk : k + b * tk * dk;
        const float *dsb = ds + b * tq * tk;
        float *out = dst ? dst + b * (int64_t)rows * dk : NULL;
        for (int r = 0; r < rows; r++) {
            const float *xr = self + (int64_t)r * dk;
            for (int e = 0; e < dk; e++) {
                float acc = 0.0f;
                for (int o = 0; o < other; o++) {
                    const float gs = which ? dsb[(int64_t)o * tk + r] : dsb[(int64_t)r * tk + o];
                    const float z = xr[e] + oth[(int64_t)o * dk + e], t = tanhf(a * z), g = gs * (1.0f - t * t);
                    acc += g;
                    if (dscale) sacc += (double)g * z;
                }
                if (!dst) continue;
                float *dp = out + (int64_t)r * dk + e;
                *dp = a * acc + (beta != 0.0f ? *dp : 0.0f);
            }
        }
    }
    if (dscale) dscale[0] = (float)sacc;
}
