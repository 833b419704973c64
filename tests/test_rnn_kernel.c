/*
 * test_rnn_kernel.c — the CPU recurrent kernel (src/backend/cpu/cpu_rnn.c:
 * vector gate loops with its own exp, AVX2 or portable, the batch split
 * between threads) against the scalar kernel it replaced (rnn_ref_kernel.h),
 * on random inputs: every cell and GRU form, default and other activations,
 * masks, go_backwards, return_sequences, reverse_output, zero_masked, with
 * and without bias, odd sizes (units not a multiple of 8, batches that split
 * unevenly), 1 and 2 threads, dx accumulated (beta 1) or written. Then the
 * states at the sequence's ends (fl_rnn_states): h0/c0 = 0 is no state at
 * all, hT/cT are the carried states, and dh0/dc0 (with dhT/dcT and dy in the
 * loss) match central finite differences.
 */
#include "check.h"

#include "flynn/flynn.h"
#include "rnn_ref_kernel.h"

#include <stdlib.h>

static uint64_t rng = 88172645463325252ull;
static float urand(float lo, float hi) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return lo + (hi - lo) * (float)((rng >> 40) / 16777216.0);
}
static float *rbuf(int64_t n, float lo, float hi) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = urand(lo, hi);
    return p;
}
static float *zbuf(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

/* max |a - b| / (atol + rtol |b|) over n: <= 1 passes */
static double worst(const float *a, const float *b, int64_t n, double rtol, double atol) {
    double w = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / (atol + rtol * fabs((double)b[i]));
        if (!(e <= w)) w = e; /* NaN too */
    }
    return w;
}

typedef struct rnn_case {
    fl_rnn_desc d;
    float *x, *w, *r, *b, *mask, *dy;
    int64_t ny, nb;
} rnn_case;

static rnn_case make_case(int cell, int reset_after, int act, int ract, int64_t n, int t, int din, int u, int flags) {
    rnn_case c;
    memset(&c, 0, sizeof c);
    c.d = (fl_rnn_desc){.cell = cell, .n = n, .t = t, .d = din, .u = u, .act = act, .ract = ract,
                        .has_bias = !!(flags & 1), .reset_after = reset_after, .go_backwards = !!(flags & 2),
                        .return_sequences = !!(flags & 4), .reverse_output = !!(flags & 8),
                        .zero_masked = !!(flags & 16)};
    const int64_t gu = (int64_t)fl_rnn_gates(&c.d) * u;
    c.x = rbuf(n * t * din, -1, 1);
    c.w = rbuf(din * gu, -0.6f, 0.6f);
    c.r = rbuf(u * gu, -0.6f, 0.6f);
    c.nb = (cell == FL_RNN_GRU && reset_after ? 2 : 1) * gu;
    c.b = c.d.has_bias ? rbuf(c.nb, -0.5f, 0.5f) : NULL;
    if (flags & 32) { /* a mask: pre-padding, a gap, a fully masked row */
        c.mask = zbuf(n * t);
        for (int64_t i = 0; i < n; i++)
            for (int s = 0; s < t; s++) c.mask[i * t + s] = i % 5 == 4 ? 0.0f : urand(0, 1) < 0.75f ? 1.0f : 0.0f;
    }
    c.ny = c.d.return_sequences ? n * t * u : n * u;
    c.dy = rbuf(c.ny, -1, 1);
    return c;
}
static void free_case(rnn_case *c) {
    free(c->x); free(c->w); free(c->r); free(c->b); free(c->mask); free(c->dy);
}

/* Forward and backward of both kernels on one case; every output compared. */
static void compare(rnn_case *c, int threads, const char *what) {
    const fl_rnn_desc *d = &c->d;
    const int64_t gu = (int64_t)fl_rnn_gates(d) * d->u, na = d->n * fl_rnn_aux_floats(d);
    const int64_t nx = d->n * d->t * d->d;
    fl_set_num_threads(threads);
    float *y0 = zbuf(c->ny), *y1 = zbuf(c->ny), *a0 = zbuf(na), *a1 = zbuf(na);
    ref_rnn_fwd(d, c->x, c->w, c->r, c->b, c->mask, NULL, y0, a0);
    fl_cpu_rnn_fwd(d, c->x, c->w, c->r, c->b, c->mask, NULL, y1, a1);
    double e = worst(y1, y0, c->ny, 1e-4, 2e-6);
    CHECK_MSG(e <= 1, "%s, %d threads: y off by %.3g of the tolerance", what, threads, e);
    { /* inference (d->infer: the valid steps only, no aux for backward) gives the same y */
        fl_rnn_desc di = *d;
        di.infer = 1;
        float *y2 = zbuf(c->ny), *a2 = zbuf(na);
        fl_cpu_rnn_fwd(&di, c->x, c->w, c->r, c->b, c->mask, NULL, y2, a2);
        e = worst(y2, y1, c->ny, 1e-5, 1e-6);
        CHECK_MSG(e <= 1, "%s, %d threads: inference y off by %.3g of the tolerance", what, threads, e);
        free(y2); free(a2);
    }
    const float beta = (d->n + d->u) % 2 ? 1.0f : 0.0f;
    float *dx0 = rbuf(nx, -1, 1), *dx1 = malloc((size_t)nx * sizeof(float));
    memcpy(dx1, dx0, (size_t)nx * sizeof(float));
    float *dw0 = zbuf(d->d * gu), *dw1 = zbuf(d->d * gu), *dr0 = zbuf(d->u * gu), *dr1 = zbuf(d->u * gu);
    float *db0 = zbuf(c->nb), *db1 = zbuf(c->nb);
    ref_rnn_bwd(d, c->x, c->w, c->r, c->b, c->mask, NULL, c->dy, a0, dx0, beta, dw0, dr0, c->b ? db0 : NULL);
    fl_cpu_rnn_bwd(d, c->x, c->w, c->r, c->b, c->mask, NULL, c->dy, a1, dx1, beta, dw1, dr1, c->b ? db1 : NULL);
    const struct { const char *n; float *f, *s; int64_t k; } outs[] = {
        {"dx", dx1, dx0, nx}, {"dw", dw1, dw0, d->d * gu}, {"dr", dr1, dr0, d->u * gu}, {"db", db1, db0, c->nb}};
    for (int i = 0; i < 4; i++) {
        double scale = 0; /* gradients summed over many terms: tolerance by their size */
        for (int64_t j = 0; j < outs[i].k; j++) scale = fmax(scale, fabs(outs[i].s[j]));
        e = worst(outs[i].f, outs[i].s, outs[i].k, 1e-4, 1e-5 * (1 + scale));
        CHECK_MSG(e <= 1, "%s, %d threads: %s off by %.3g of the tolerance", what, threads, outs[i].n, e);
    }
    free(y0); free(y1); free(a0); free(a1); free(dx0); free(dx1); free(dw0); free(dw1); free(dr0); free(dr1);
    free(db0); free(db1);
}

static const char *cell_name(int cell, int ra) {
    return cell == FL_RNN_LSTM ? "lstm" : cell == FL_RNN_SIMPLE ? "simple_rnn" : ra ? "gru(reset_after)" : "gru";
}

static void test_against_reference(void) {
    static const int64_t ns[] = {1, 3, 17, 37};
    static const int us[] = {1, 5, 13, 24};
    const struct { int cell, ra, act, ract; } cells[] = {
        {FL_RNN_LSTM, 0, FL_ACT_TANH, FL_ACT_SIGMOID},   {FL_RNN_GRU, 1, FL_ACT_TANH, FL_ACT_SIGMOID},
        {FL_RNN_GRU, 0, FL_ACT_TANH, FL_ACT_SIGMOID},    {FL_RNN_SIMPLE, 0, FL_ACT_TANH, FL_ACT_SIGMOID},
        {FL_RNN_LSTM, 0, FL_ACT_RELU, FL_ACT_HARD_SIGMOID}, {FL_RNN_GRU, 1, FL_ACT_TANH, FL_ACT_HARD_SIGMOID},
        {FL_RNN_SIMPLE, 0, FL_ACT_RELU, FL_ACT_SIGMOID},
    };
    int k = 0;
    for (size_t ci = 0; ci < sizeof cells / sizeof cells[0]; ci++)
        for (int v = 0; v < 8; v++, k++) {
            int flags = (v * 37 + (int)ci * 11) % 64 | (v & 1); /* every flag both ways across the cases */
            if (v == 0) flags = 1 | 4 | 32;                      /* bias, sequences, mask */
            if (v == 1) flags = 1 | 2 | 4 | 8 | 16 | 32;         /* everything: Bidirectional's backward layer */
            int64_t n = ns[(v + ci) % 4];
            int u = us[(v / 2 + ci) % 4], t = 1 + (v * 3 + (int)ci) % 6, din = 1 + (v + 2 * (int)ci) % 7;
            rnn_case c = make_case(cells[ci].cell, cells[ci].ra, cells[ci].act, cells[ci].ract, n, t, din, u, flags);
            char what[256];
            snprintf(what, sizeof what, "%s act %d/%d n=%lld t=%d d=%d u=%d bias=%d back=%d seq=%d rev=%d zero=%d "
                     "mask=%d", cell_name(cells[ci].cell, cells[ci].ra), cells[ci].act, cells[ci].ract, (long long)n,
                     t, din, u, flags & 1, !!(flags & 2), !!(flags & 4), !!(flags & 8), !!(flags & 16), !!(flags & 32));
            compare(&c, 1, what);
            compare(&c, 2, what);
            free_case(&c);
        }
    /* the batch split at the sizes of the text models (64 units: whole vectors) */
    rnn_case c = make_case(FL_RNN_LSTM, 0, FL_ACT_TANH, FL_ACT_SIGMOID, 40, 9, 32, 64, 1 | 32);
    compare(&c, 2, "lstm_text's shapes, n=40 t=9 d=32 u=64, mask");
    free_case(&c);
}

/* ----------------------------------------------------------- the states */

/* L = sum(y gy) + sum(hT ghT) + sum(cT gcT) for initial states h0, c0 */
static double loss(const rnn_case *c, const float *h0, const float *c0, const float *ghT, const float *gcT) {
    const fl_rnn_desc *d = &c->d;
    const int64_t n = d->n, u = d->u;
    float *y = zbuf(c->ny), *aux = zbuf(n * fl_rnn_aux_floats(d)), *hT = zbuf(n * u), *cT = zbuf(n * u);
    fl_rnn_states st = {.h0 = h0, .c0 = c0, .hT = hT, .cT = d->cell == FL_RNN_LSTM ? cT : NULL};
    fl_cpu_rnn_fwd(d, c->x, c->w, c->r, c->b, c->mask, &st, y, aux);
    double s = 0;
    for (int64_t i = 0; i < c->ny; i++) s += (double)y[i] * c->dy[i];
    for (int64_t i = 0; i < n * u; i++) s += (double)hT[i] * ghT[i] + (d->cell == FL_RNN_LSTM ? (double)cT[i] * gcT[i] : 0);
    free(y); free(aux); free(hT); free(cT);
    return s;
}

static void test_states(int cell, int ra, int flags, int threads) {
    rnn_case c = make_case(cell, ra, FL_ACT_TANH, FL_ACT_SIGMOID, 5, 4, 3, 7, flags);
    const fl_rnn_desc *d = &c.d;
    const int64_t n = d->n, u = d->u, na = n * fl_rnn_aux_floats(d);
    const int lstm = cell == FL_RNN_LSTM;
    fl_set_num_threads(threads);
    char what[160];
    snprintf(what, sizeof what, "%s states, flags %d, %d threads", cell_name(cell, ra), flags, threads);
    /* zero h0/c0 is no state; hT is the last output where nothing is masked to 0 */
    float *z = zbuf(n * u), *y0 = zbuf(c.ny), *y1 = zbuf(c.ny), *a = zbuf(na), *hT = zbuf(n * u), *cT = zbuf(n * u);
    fl_cpu_rnn_fwd(d, c.x, c.w, c.r, c.b, c.mask, NULL, y0, a);
    fl_rnn_states zs = {.h0 = z, .c0 = lstm ? z : NULL, .hT = hT, .cT = lstm ? cT : NULL};
    fl_cpu_rnn_fwd(d, c.x, c.w, c.r, c.b, c.mask, &zs, y1, a);
    CHECK_MSG(memcmp(y0, y1, (size_t)c.ny * sizeof(float)) == 0, "%s: zero initial states change y", what);
    if (!d->return_sequences && !d->zero_masked)
        CHECK_MSG(memcmp(y0, hT, (size_t)(n * u) * sizeof(float)) == 0, "%s: hT is not the last output", what);
    { /* inference with initial states: the same y, hT and cT */
        float *h0i = rbuf(n * u, -0.8f, 0.8f), *c0i = rbuf(n * u, -0.8f, 0.8f), *hTi = zbuf(n * u), *cTi = zbuf(n * u);
        float *y2 = zbuf(c.ny);
        fl_rnn_desc di = *d;
        di.infer = 1;
        fl_rnn_states s1 = {.h0 = h0i, .c0 = lstm ? c0i : NULL, .hT = hT, .cT = lstm ? cT : NULL};
        fl_rnn_states s2 = {.h0 = h0i, .c0 = lstm ? c0i : NULL, .hT = hTi, .cT = lstm ? cTi : NULL};
        fl_cpu_rnn_fwd(d, c.x, c.w, c.r, c.b, c.mask, &s1, y1, a);
        fl_cpu_rnn_fwd(&di, c.x, c.w, c.r, c.b, c.mask, &s2, y2, a);
        CHECK_MSG(worst(y2, y1, c.ny, 1e-5, 1e-6) <= 1, "%s: inference y differs", what);
        CHECK_MSG(worst(hTi, hT, n * u, 1e-5, 1e-6) <= 1, "%s: inference hT differs", what);
        if (lstm) CHECK_MSG(worst(cTi, cT, n * u, 1e-5, 1e-6) <= 1, "%s: inference cT differs", what);
        free(h0i); free(c0i); free(hTi); free(cTi); free(y2);
    }
    /* the gradients of the initial states by central differences */
    float *h0 = rbuf(n * u, -0.8f, 0.8f), *c0 = rbuf(n * u, -0.8f, 0.8f);
    float *ghT = rbuf(n * u, -1, 1), *gcT = rbuf(n * u, -1, 1), *dh0 = zbuf(n * u), *dc0 = zbuf(n * u);
    float *dx = zbuf(n * d->t * d->d);
    fl_rnn_states st = {.h0 = h0, .c0 = lstm ? c0 : NULL, .hT = hT, .cT = lstm ? cT : NULL,
                        .dhT = ghT, .dcT = lstm ? gcT : NULL, .dh0 = dh0, .dc0 = lstm ? dc0 : NULL};
    fl_cpu_rnn_fwd(d, c.x, c.w, c.r, c.b, c.mask, &st, y1, a);
    fl_cpu_rnn_bwd(d, c.x, c.w, c.r, c.b, c.mask, &st, c.dy, a, dx, 0.0f, NULL, NULL, NULL);
    const float eps = 1e-2f;
    for (int which = 0; which < (lstm ? 2 : 1); which++) {
        float *s = which ? c0 : h0, *g = which ? dc0 : dh0;
        for (int64_t i = 0; i < n * u; i++) {
            float keep = s[i];
            s[i] = keep + eps;
            double lp = loss(&c, h0, c0, ghT, gcT);
            s[i] = keep - eps;
            double lm = loss(&c, h0, c0, ghT, gcT);
            s[i] = keep;
            double fd = (lp - lm) / (2.0 * eps);
            CHECK_MSG(fabs(fd - g[i]) <= 2e-3 + 2e-2 * fabs(fd), "%s: d%s0[%lld] = %.6g, finite differences %.6g",
                      what, which ? "c" : "h", (long long)i, g[i], fd);
        }
    }
    free(z); free(y0); free(y1); free(a); free(hT); free(cT); free(h0); free(c0); free(ghT); free(gcT);
    free(dh0); free(dc0); free(dx);
    free_case(&c);
}

int main(void) {
    test_against_reference();
    const struct { int cell, ra; } cells[] = {{FL_RNN_LSTM, 0}, {FL_RNN_GRU, 1}, {FL_RNN_GRU, 0}, {FL_RNN_SIMPLE, 0}};
    for (int ci = 0; ci < 4; ci++) {
        test_states(cells[ci].cell, cells[ci].ra, 1, 1);               /* bias, last output */
        test_states(cells[ci].cell, cells[ci].ra, 1 | 4 | 32, 2);      /* sequences, mask */
        test_states(cells[ci].cell, cells[ci].ra, 2 | 4 | 8 | 16 | 32, 1); /* backwards, reversed, zero_masked */
        test_states(cells[ci].cell, cells[ci].ra, 1 | 2 | 32, 2);      /* backwards, last output, mask */
    }
    fl_set_num_threads(0);
    return check_report("test_rnn_kernel");
}
