/*
 * cpu_pact.c — the kernels of FL_OP_PACT and its kin (cpu_act.c has FL_OP_ACT's): the activation and preprocessing
 * layers whose formulas take parameters: ReLU/LeakyReLU/ELU/Rescaling
 * (fl_pact_desc), Softmax along an axis other than the last, PReLU (a
 * learned, broadcast alpha) and Normalization (broadcast mean and
 * variance). The per-element formulas are ops/math.h's, shared with any
 * other backend; OpenMP splits the elements as cpu_backend.c's act_fwd does.
 */
#include "cpu_internal.h"


/* ReLU with threshold 0 and no negative slope (Keras's ReLU() layer, ReLU6: max_value 6): branch-free loops
 * the compiler vectorises. The generic formula per element (fl_pact_forward) took 9% of ResNet-20's training
 * step each way (perf, 1 thread), the backward mostly in mispredicted branches on the activations' signs, for
 * work that is only memory traffic. */
static bool plain_relu(const fl_pact_desc *p) { return p->code == FL_PACT_RELU && p->a == 0.0f && p->b == 0.0f; }

void fl_cpu_pact_fwd(const fl_pact_desc *d, int64_t n, const float *x, float *y) {
    const fl_pact_desc p = *d;
    if (plain_relu(&p)) {
        const float hi = p.c;
#pragma omp parallel for simd PAR_EW(n)
        for (int64_t i = 0; i < n; i++) {
            float v = x[i] > 0.0f ? x[i] : 0.0f;
            y[i] = v < hi ? v : hi;
        }
        return;
    }
    if (p.code == FL_PACT_RELU || p.code == FL_PACT_ELU) { /* LeakyReLU, a threshold, ELU: on vectors (cpu_act.c) */
        const int64_t nblk = fl_ew_chunks(n);
#pragma omp parallel for schedule(dynamic) PAR(n)
        for (int64_t k = 0; k < nblk; k++) {
            const int64_t i0 = k * FL_EW_CHUNK, len = fl_ew_len(n, i0);
            if (p.code == FL_PACT_ELU) fl_cpu_elu_vec(len, p.a, x + i0, y + i0);
            else fl_cpu_relu_p_vec(len, p.a, p.b, p.c, x + i0, y + i0);
        }
        return;
    }
#pragma omp parallel for PAR_EW(n)
    for (int64_t i = 0; i < n; i++) y[i] = fl_pact_forward(&p, x[i]);
}

void fl_cpu_pact_bwd(const fl_pact_desc *d, int64_t n, const float *x, const float *y, const float *dy, float *dx,
                     float beta) {
    const fl_pact_desc p = *d;
    if (plain_relu(&p)) {
        const float hi = p.c;
        /* dy times a 0/1 mask, as the generic path multiplies by the derivative */
        if (beta == 0.0f) {
#pragma omp parallel for simd PAR_EW(n)
            for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * (float)((x[i] > 0.0f) & (x[i] < hi));
        } else {
#pragma omp parallel for simd PAR_EW(n)
            for (int64_t i = 0; i < n; i++) dx[i] += dy[i] * (float)((x[i] > 0.0f) & (x[i] < hi));
        }
        return;
    }
    if (p.code == FL_PACT_RELU || p.code == FL_PACT_ELU) { /* fl_pact_grad's formulas on vectors (cpu_act.c) */
        const int64_t nblk = fl_ew_chunks(n);
#pragma omp parallel for schedule(dynamic) PAR(n)
        for (int64_t k = 0; k < nblk; k++) {
            const int64_t i0 = k * FL_EW_CHUNK, len = fl_ew_len(n, i0);
            fl_cpu_pact_grad_vec(len, p.code == FL_PACT_ELU, p.a, p.b, p.c, x + i0, y + i0, dy + i0, dx + i0, beta);
        }
        return;
    }
#pragma omp parallel for PAR_EW(n)
    for (int64_t i = 0; i < n; i++) {
        float g = dy[i] * fl_pact_grad(&p, x[i], y[i]);
        dx[i] = beta == 0.0f ? g : dx[i] + g;
    }
}

/* x[outer, c, inner]: one softmax per (o, i) over c values inner apart. */
void fl_cpu_softmax_axis_fwd(int64_t outer, int c, int64_t inner, const float *x, float *y) {
    int64_t m = outer * inner;
#pragma omp parallel for schedule(static) PAR(m * c)
    for (int64_t r = 0; r < m; r++) {
        size_t base = (size_t)(r / inner) * (size_t)c * (size_t)inner + (size_t)(r % inner);
        const float *xr = x + base;
        float *yr = y + base;
        float mx = xr[0];
        for (int j = 1; j < c; j++) mx = xr[(size_t)j * inner] > mx ? xr[(size_t)j * inner] : mx;
        float s = 0;
        for (int j = 0; j < c; j++) { float e = expf(xr[(size_t)j * inner] - mx); yr[(size_t)j * inner] = e; s += e; }
        float inv = 1.0f / s;
        for (int j = 0; j < c; j++) yr[(size_t)j * inner] *= inv;
    }
}

void fl_cpu_softmax_axis_bwd(int64_t outer, int c, int64_t inner, const float *y, const float *dy, float *dx,
                             float beta) {
    int64_t m = outer * inner;
#pragma omp parallel for schedule(static) PAR(m * c)
    for (int64_t r = 0; r < m; r++) {
        size_t base = (size_t)(r / inner) * (size_t)c * (size_t)inner + (size_t)(r % inner);
        float s = 0;
        for (int j = 0; j < c; j++) s += dy[base + (size_t)j * inner] * y[base + (size_t)j * inner];
        for (int j = 0; j < c; j++) {
            size_t k = base + (size_t)j * inner;
            float g = y[k] * (dy[k] - s);
            dx[k] = beta == 0.0f ? g : dx[k] + g;
        }
    }
}

/* PReLU's forward and data gradient: rows along the last axis (fl_bcast_rows_of), alpha read ps apart. */
void fl_cpu_prelu_fwd(const fl_bcast_desc *d, const float *x, const float *alpha, float *y) {
    const fl_bcast_rows br = fl_bcast_rows_of(d);
#pragma omp parallel for schedule(dynamic, br.per) PAR(d->n * d->size)
    for (int64_t R = 0; R < d->n * br.rows; R++) {
        const int64_t j0 = (R % br.rows) * br.len, L = br.len, ps = br.ps;
        const float *restrict xr = x + (R / br.rows) * d->size + j0, *restrict ar = alpha + fl_bcast_index(d, j0);
        float *restrict yr = y + (R / br.rows) * d->size + j0;
#pragma omp simd
        for (int64_t i = 0; i < L; i++) {
            const float v = xr[i];
            yr[i] = v > 0 ? v : ar[i * ps] * v;
        }
    }
}

void fl_cpu_prelu_bwd(const fl_bcast_desc *d, const float *x, const float *alpha, const float *dy, float *dx,
                      float beta, float *dalpha) {
    const int64_t n = d->n * d->size;
    if (dx) {
        const fl_bcast_rows br = fl_bcast_rows_of(d);
#pragma omp parallel for schedule(dynamic, br.per) PAR(n)
        for (int64_t R = 0; R < d->n * br.rows; R++) {
            const int64_t j0 = (R % br.rows) * br.len, L = br.len, ps = br.ps, o0 = (R / br.rows) * d->size + j0;
            const float *restrict xr = x + o0, *restrict g = dy + o0, *restrict ar = alpha + fl_bcast_index(d, j0);
            float *restrict o = dx + o0;
#pragma omp simd
            for (int64_t i = 0; i < L; i++) {
                const float v = xr[i] > 0 ? g[i] : g[i] * ar[i * ps];
                o[i] = beta == 0.0f ? v : o[i] + v;
            }
        }
    }
    if (!dalpha) return;
    /* one alpha element per iteration: its kept coordinates give a base
     * offset in the sample; then every batch row and shared position */
    int64_t shared = 1;
    for (int k = 0; k < d->ndim; k++)
        if (!d->pstride[k]) shared *= d->dim[k];
#pragma omp parallel for schedule(static) PAR(n)
    for (int64_t a = 0; a < d->psize; a++) {
        int64_t base = 0;
        for (int k = 0; k < d->ndim; k++)
            if (d->pstride[k]) base += (a / d->pstride[k]) % d->dim[k] * d->sstride[k];
        double s = 0;
        for (int64_t b = 0; b < d->n; b++)
            for (int64_t t = 0; t < shared; t++) {
                int64_t off = b * d->size + base, r = t;
                for (int k = d->ndim - 1; k >= 0; k--)
                    if (!d->pstride[k]) { off += r % d->dim[k] * d->sstride[k]; r /= d->dim[k]; }
                if (x[off] < 0) s += (double)dy[off] * x[off];
            }
        dalpha[a] = (float)s;
    }
}

/* Normalization's (x - mean) / den and its inverse, and their gradients: rows along the last axis
 * (fl_bcast_rows_of), the parameter read ps apart along a row. */
void fl_cpu_normalize_fwd(const fl_bcast_desc *d, int invert, const float *x, const float *mean, const float *var,
                          float *y) {
    const fl_bcast_rows br = fl_bcast_rows_of(d);
#pragma omp parallel for schedule(dynamic, br.per) PAR(d->n * d->size)
    for (int64_t R = 0; R < d->n * br.rows; R++) {
        const int64_t j0 = (R % br.rows) * br.len, p0 = fl_bcast_index(d, j0), L = br.len, ps = br.ps;
        const float *restrict xr = x + (R / br.rows) * d->size + j0, *restrict mr = mean + p0,
                              *restrict vr = var + p0;
        float *restrict yr = y + (R / br.rows) * d->size + j0;
#pragma omp simd
        for (int64_t i = 0; i < L; i++) {
            const float den = fl_norm_den(vr[i * ps]);
            yr[i] = invert ? mr[i * ps] + xr[i] * den : (xr[i] - mr[i * ps]) / den;
        }
    }
}

void fl_cpu_normalize_bwd(const fl_bcast_desc *d, int invert, const float *var, const float *dy, float *dx,
                          float beta) {
    const fl_bcast_rows br = fl_bcast_rows_of(d);
#pragma omp parallel for schedule(dynamic, br.per) PAR(d->n * d->size)
    for (int64_t R = 0; R < d->n * br.rows; R++) {
        const int64_t j0 = (R % br.rows) * br.len, L = br.len, ps = br.ps;
        const float *restrict vr = var + fl_bcast_index(d, j0), *restrict g = dy + (R / br.rows) * d->size + j0;
        float *restrict o = dx + (R / br.rows) * d->size + j0;
#pragma omp simd
        for (int64_t i = 0; i < L; i++) {
            const float den = fl_norm_den(vr[i * ps]), v = invert ? g[i] * den : g[i] / den;
            o[i] = beta == 0.0f ? v : o[i] + v;
        }
    }
}
