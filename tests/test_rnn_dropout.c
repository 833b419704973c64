/*
 * test_rnn_dropout.c — recurrent_dropout (and dropout with it) in SimpleRNN,
 * LSTM and GRU, Keras 3's implementation 1 (keras/src/layers/rnn/lstm.py,
 * gru.py, simple_rnn.py, dropout_rnn_cell.py): per-gate masks on h' and on x,
 * drawn once per batch and shared by every step, inverted (1/(1-rate)),
 * none in inference.
 *   1. The CPU kernel with fixed masks (fl_rnn_states.hdrop, xdrop) against
 *      a reference written here from Keras's cell formulas, in double, for
 *      every cell (GRU reset_after both ways), with and without bias, masks
 *      on the sequence, go_backwards and return_sequences, 1 and 2 threads.
 *   2. Its backward (dx, dW, dR, db) against central differences of that
 *      forward, masks fixed.
 *   3. The op's masks (fl_graph_rnn_dropout): the fraction dropped, the
 *      1/(1-rate) scale, different across samples, gates and training steps,
 *      the same on a replayed step (seed, stream, step), and that training
 *      forward and backward use them (the kernel with those masks gives the
 *      same output) while inference uses none.
 *   4. The layers: fl_lstm/fl_gru/fl_simple_rnn (and Bidirectional) with
 *      recurrent_dropout build, train a step and predict as without it.
 */
#include "check.h"

#include "flynn/flynn.h"
#include "backend/cpu/cpu_internal.h"
#include "core/graph.h"
#include "ops/math.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
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
static double *dbuf(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }
/* a scaled keep mask: 0 with probability rate, else 1/(1-rate) */
static float *mbuf(int64_t n, float rate) {
    float *p = zbuf(n);
    for (int64_t i = 0; i < n; i++) p[i] = urand(0, 1) < rate ? 0.0f : 1.0f / (1.0f - rate);
    return p;
}

static double sig(double v) { return 1.0 / (1.0 + exp(-v)); }

/* ------------------------------------------------------------ reference */

/* Keras's implementation-1 cells over the sequence, in double: gate g's
 * input projection reads x * xm[b, g] and its recurrent one h' * hm[b, g]
 * (GRU reset_after False: the candidate's r * h' * hm[b, 2]); masked steps
 * carry the state. y as fl_rnn_desc (return_sequences, zero_masked). */
static void ref_fwd(const fl_rnn_desc *d, const float *x, const float *W, const float *R, const float *b,
                    const float *mask, const float *hm, const float *xm, double *y) {
    const int T = d->t, D = d->d, u = d->u, G = fl_rnn_gates(d), gu = G * u;
    const int gru = d->cell == FL_RNN_GRU, lstm = d->cell == FL_RNN_LSTM;
    double *h = calloc((size_t)u, sizeof(double)), *c = calloc((size_t)u, sizeof(double));
    double *hn = calloc((size_t)u, sizeof(double)), *cn = calloc((size_t)u, sizeof(double));
    double *xp = calloc((size_t)gu, sizeof(double)), *rp = calloc((size_t)gu, sizeof(double));
    for (int64_t s = 0; s < d->n; s++) {
        memset(h, 0, (size_t)u * sizeof(double));
        memset(c, 0, (size_t)u * sizeof(double));
        for (int k = 0; k < T; k++) {
            const int tin = d->go_backwards ? T - 1 - k : k, tout = d->reverse_output ? T - 1 - k : k;
            const float *xt = x + (s * T + tin) * D;
            for (int g = 0; g < G; g++)
                for (int j = 0; j < u; j++) {
                    double a = d->has_bias ? b[g * u + j] : 0.0, q = gru && d->reset_after && d->has_bias ? b[gu + g * u + j] : 0.0;
                    for (int i = 0; i < D; i++)
                        a += (double)xt[i] * (xm ? xm[s * G * D + g * D + i] : 1.0f) * W[i * gu + g * u + j];
                    if (!(gru && !d->reset_after && g == 2))
                        for (int i = 0; i < u; i++) q += h[i] * (hm ? hm[s * gu + g * u + i] : 1.0f) * R[i * gu + g * u + j];
                    xp[g * u + j] = a;
                    rp[g * u + j] = q;
                }
            if (lstm) {
                for (int j = 0; j < u; j++) {
                    double ii = sig(xp[j] + rp[j]), f = sig(xp[u + j] + rp[u + j]);
                    double cc = tanh(xp[2 * u + j] + rp[2 * u + j]), o = sig(xp[3 * u + j] + rp[3 * u + j]);
                    cn[j] = f * c[j] + ii * cc;
                    hn[j] = o * tanh(cn[j]);
                }
            } else if (gru) {
                for (int j = 0; j < u; j++) {
                    double z = sig(xp[j] + rp[j]), r = sig(xp[u + j] + rp[u + j]), rec;
                    if (d->reset_after) {
                        rec = r * rp[2 * u + j];
                    } else {
                        rec = 0;
                        for (int i = 0; i < u; i++) {
                            double ri = sig(xp[u + i] + rp[u + i]); /* r of unit i */
                            rec += ri * h[i] * (hm ? hm[s * gu + 2 * u + i] : 1.0f) * R[i * gu + 2 * u + j];
                        }
                    }
                    double hh = tanh(xp[2 * u + j] + rec);
                    hn[j] = z * h[j] + (1 - z) * hh;
                }
            } else {
                for (int j = 0; j < u; j++) hn[j] = tanh(xp[j] + rp[j]);
            }
            const int keep = !mask || mask[s * T + tin] > 0.5f;
            if (keep) {
                memcpy(h, hn, (size_t)u * sizeof(double));
                if (lstm) memcpy(c, cn, (size_t)u * sizeof(double));
            }
            if (d->return_sequences)
                for (int j = 0; j < u; j++) y[(s * T + tout) * u + j] = d->zero_masked && !keep ? 0.0 : h[j];
            else if (k == T - 1)
                for (int j = 0; j < u; j++) y[s * u + j] = d->zero_masked && !keep ? 0.0 : h[j];
        }
    }
    free(h); free(c); free(hn); free(cn); free(xp); free(rp);
}

/* ------------------------------------------------------ kernel vs Keras */

typedef struct dcase {
    fl_rnn_desc d;
    float *x, *w, *r, *b, *mask, *hm, *xm, *dy;
    int64_t ny, nb;
} dcase;

static dcase make(int cell, int ra, int64_t n, int t, int din, int u, int bias, int back, int seq, int masked,
                  float rate, float rate_in) {
    dcase c;
    memset(&c, 0, sizeof c);
    c.d = (fl_rnn_desc){.cell = cell, .n = n, .t = t, .d = din, .u = u, .act = FL_ACT_TANH, .ract = FL_ACT_SIGMOID,
                        .has_bias = bias, .reset_after = ra, .go_backwards = back, .return_sequences = seq,
                        .drop_scratch = 1};
    const int64_t G = fl_rnn_gates(&c.d), gu = G * u;
    c.x = rbuf(n * t * din, -1, 1);
    c.w = rbuf(din * gu, -0.6f, 0.6f);
    c.r = rbuf(u * gu, -0.6f, 0.6f);
    c.nb = (cell == FL_RNN_GRU && ra ? 2 : 1) * gu;
    c.b = bias ? rbuf(c.nb, -0.5f, 0.5f) : NULL;
    if (masked) { /* pre-padding of varying length */
        c.mask = zbuf(n * t);
        for (int64_t i = 0; i < n; i++)
            for (int s = 0; s < t; s++) c.mask[i * t + s] = s >= (int)(i % 3) ? 1.0f : 0.0f;
    }
    c.hm = rate > 0 ? mbuf(n * gu, rate) : NULL;
    c.xm = rate_in > 0 ? mbuf(n * G * din, rate_in) : NULL;
    c.ny = seq ? n * t * u : n * u;
    c.dy = rbuf(c.ny, -1, 1);
    return c;
}
static void unmake(dcase *c) {
    free(c->x); free(c->w); free(c->r); free(c->b); free(c->mask); free(c->hm); free(c->xm); free(c->dy);
}

static double loss(const dcase *c, float *y, float *aux) {
    fl_rnn_states st = {.hdrop = c->hm, .xdrop = c->xm};
    fl_cpu_rnn_fwd(&c->d, c->x, c->w, c->r, c->b, c->mask, &st, y, aux);
    double s = 0;
    for (int64_t i = 0; i < c->ny; i++) s += (double)y[i] * c->dy[i];
    return s;
}

static const char *cname(int cell, int ra) {
    return cell == FL_RNN_LSTM ? "LSTM" : cell == FL_RNN_SIMPLE ? "SimpleRNN" : ra ? "GRU(reset_after)" : "GRU";
}

static void test_kernel(int cell, int ra, int bias, int back, int seq, int masked, float rate, float rate_in,
                        int threads) {
    dcase c = make(cell, ra, 4, 5, 3, 6, bias, back, seq, masked, rate, rate_in);
    const fl_rnn_desc *d = &c.d;
    const int64_t gu = (int64_t)fl_rnn_gates(d) * d->u, na = d->n * fl_rnn_aux_floats(d), nx = d->n * d->t * d->d;
    char what[200];
    snprintf(what, sizeof what, "%s bias=%d back=%d seq=%d mask=%d rate=%g dropout=%g, %d threads", cname(cell, ra),
             bias, back, seq, masked, rate, rate_in, threads);
    fl_set_num_threads(threads);
    float *y = zbuf(c.ny), *aux = zbuf(na);
    double *ref = dbuf(c.ny);
    loss(&c, y, aux);
    ref_fwd(d, c.x, c.w, c.r, c.b, c.mask, c.hm, c.xm, ref);
    double e = 0;
    for (int64_t i = 0; i < c.ny; i++) e = fmax(e, fabs(y[i] - ref[i]));
    CHECK_MSG(e < 2e-5, "%s: forward off the reference by %.3g", what, e);
    /* without masks the reference is the plain cell: the masks did change y */
    double *plain = dbuf(c.ny), diff = 0;
    ref_fwd(d, c.x, c.w, c.r, c.b, c.mask, NULL, NULL, plain);
    for (int64_t i = 0; i < c.ny; i++) diff = fmax(diff, fabs(plain[i] - ref[i]));
    CHECK_MSG(diff > 1e-3, "%s: the masks change nothing (%.3g)", what, diff);
    /* backward against central differences, masks fixed */
    float *dx = zbuf(nx), *dw = zbuf(d->d * gu), *dr = zbuf(d->u * gu), *db = zbuf(c.nb);
    fl_rnn_states st = {.hdrop = c.hm, .xdrop = c.xm};
    loss(&c, y, aux);
    fl_cpu_rnn_bwd(d, c.x, c.w, c.r, c.b, c.mask, &st, c.dy, aux, dx, 0.0f, dw, dr, bias ? db : NULL);
    struct { const char *n; float *p, *g; int64_t k; } v[] = {
        {"dx", c.x, dx, nx}, {"dW", c.w, dw, d->d * gu}, {"dR", c.r, dr, d->u * gu}, {"db", c.b, db, bias ? c.nb : 0}};
    const float eps = 1e-2f;
    for (int q = 0; q < 4; q++)
        for (int64_t i = 0; i < v[q].k; i++) {
            float keep = v[q].p[i];
            v[q].p[i] = keep + eps;
            double lp = loss(&c, y, aux);
            v[q].p[i] = keep - eps;
            double lm = loss(&c, y, aux);
            v[q].p[i] = keep;
            double fd = (lp - lm) / (2.0 * eps);
            CHECK_MSG(fabs(fd - v[q].g[i]) <= 2e-3 + 2e-2 * fabs(fd), "%s: %s[%lld] = %.6g, finite differences %.6g",
                      what, v[q].n, (long long)i, v[q].g[i], fd);
        }
    /* dx accumulates with beta 1 */
    float *dx2 = rbuf(nx, -1, 1), *dx2b = malloc((size_t)nx * sizeof(float));
    memcpy(dx2b, dx2, (size_t)nx * sizeof(float));
    loss(&c, y, aux);
    fl_cpu_rnn_bwd(d, c.x, c.w, c.r, c.b, c.mask, &st, c.dy, aux, dx2, 1.0f, NULL, NULL, NULL);
    double ea = 0;
    for (int64_t i = 0; i < nx; i++) ea = fmax(ea, fabs(dx2[i] - (dx2b[i] + dx[i])));
    CHECK_MSG(ea < 1e-5, "%s: dx with beta 1 off by %.3g", what, ea);
    free(dx2); free(dx2b);
    free(y); free(aux); free(ref); free(plain); free(dx); free(dw); free(dr); free(db);
    unmake(&c);
}

/* ------------------------------------------------------- the op's masks */

static void test_op_masks(int cell, float rate, float rate_in) {
    fl_graph g;
    fl_graph_init(&g, fl_backend_cpu());
    const int64_t B = 64, T = 4, D = 5, u = 16;
    fl_rnn_desc d = {.cell = cell, .u = (int)u, .act = FL_ACT_TANH, .ract = FL_ACT_SIGMOID, .reset_after = 1};
    const int64_t G = fl_rnn_gates(&d), gu = G * u;
    fl_node *x = fl_graph_input(&g, "x", 2, (int64_t[]){T, D});
    fl_node *w = fl_graph_param(&g, "w", 2, (int64_t[]){D, gu}, true);
    fl_node *r = fl_graph_param(&g, "r", 2, (int64_t[]){u, gu}, true);
    fl_node *y = fl_graph_rnn(&g, "rnn", x, w, r, NULL, NULL, d);
    CHECK(y != NULL && fl_graph_rnn_dropout(y, rate_in, rate, 1234) == FL_OK);
    CHECK(fl_graph_rnn_dropout(y, 0.0f, 1.0f, 1) != FL_OK);
    CHECK_MSG(strstr(fl_last_error(), "recurrent_dropout 1") != NULL, "got: %s", fl_last_error());
    CHECK(fl_graph_rnn_dropout(y, rate_in, rate, 1234) == FL_OK);
    fl_graph_finalize(&g);
    CHECK(fl_graph_reserve(&g, B) == FL_OK);
    fl_graph_set_batch(&g, B);
    float *hx = rbuf(B * T * D, -1, 1), *hw = rbuf(D * gu, -0.5f, 0.5f), *hr = rbuf(u * gu, -0.5f, 0.5f);
    memcpy(x->val, hx, (size_t)(B * T * D) * sizeof(float));
    memcpy(w->val, hw, (size_t)(D * gu) * sizeof(float));
    memcpy(r->val, hr, (size_t)(u * gu) * sizeof(float));
    char what[96];
    snprintf(what, sizeof what, "%s op, recurrent_dropout %g, dropout %g", cname(cell, 1), rate, rate_in);
    /* inference: no masks, the plain cell */
    float *yinf = zbuf(B * u), *aux = zbuf(B * fl_rnn_aux_floats(&y->rnn));
    fl_graph_forward(&g, false);
    memcpy(yinf, y->val, (size_t)(B * u) * sizeof(float));
    fl_rnn_desc dk = y->rnn;
    dk.n = B;
    float *yk = zbuf(B * u);
    fl_cpu_rnn_fwd(&dk, hx, hw, hr, NULL, NULL, NULL, yk, aux);
    double e = 0;
    for (int64_t i = 0; i < B * u; i++) e = fmax(e, fabs(yk[i] - yinf[i]));
    CHECK_MSG(e < 1e-6, "%s: inference differs from the plain cell by %.3g", what, e);
    /* training: masks as promised, and the output is the kernel's with them */
    float *prev[2] = {NULL, NULL};
    for (int step = 0; step < 2; step++) {
        g.step = step;
        fl_graph_forward(&g, true);
        float *hm, *xm;
        fl_graph_rnn_masks(&g, y, &hm, &xm);
        CHECK_MSG((hm != NULL) == (rate > 0) && (xm != NULL) == (rate_in > 0), "%s: masks %p %p", what, (void *)hm,
                  (void *)xm);
        const struct { float *m; float rate; int64_t k, row; } ms[2] = {{hm, rate, B * gu, gu}, {xm, rate_in, B * G * D, G * D}};
        for (int q = 0; q < 2; q++) {
            if (!ms[q].m) continue;
            int64_t zeros = 0, bad = 0, same_rows = 0;
            const float s = 1.0f / (1.0f - ms[q].rate);
            for (int64_t i = 0; i < ms[q].k; i++) {
                zeros += ms[q].m[i] == 0.0f;
                bad += ms[q].m[i] != 0.0f && ms[q].m[i] != s;
            }
            for (int64_t b = 1; b < B; b++)
                same_rows += memcmp(ms[q].m, ms[q].m + b * ms[q].row, (size_t)ms[q].row * sizeof(float)) == 0;
            const double frac = (double)zeros / (double)ms[q].k, sd = sqrt(ms[q].rate * (1 - ms[q].rate) / ms[q].k);
            CHECK_MSG(fabs(frac - ms[q].rate) < 5 * sd, "%s: %s mask drops %.4f, expected %.2f (+-%.4f)", what,
                      q ? "input" : "recurrent", frac, ms[q].rate, 5 * sd);
            CHECK_MSG(bad == 0, "%s: %lld mask values neither 0 nor 1/(1-rate) = %g", what, (long long)bad, s);
            /* samples draw their own masks: a row equals the first by chance with p = (r^2 + (1-r)^2)^len */
            const double ps = pow(ms[q].rate * ms[q].rate + (1 - ms[q].rate) * (1 - ms[q].rate), (double)ms[q].row);
            const double expect = (B - 1) * ps, bound = expect + 5 * sqrt(expect * (1 - ps)) + 1;
            CHECK_MSG(same_rows <= bound, "%s: %lld samples share the first sample's mask (chance: %.1f)", what,
                      (long long)same_rows, expect);
            if (G > 1) /* the gates' masks differ */
                CHECK_MSG(memcmp(ms[q].m, ms[q].m + ms[q].row / G, (size_t)(ms[q].row / G) * sizeof(float)) != 0,
                          "%s: gates 0 and 1 share a mask", what);
            if (step == 0) {
                prev[q] = malloc((size_t)ms[q].k * sizeof(float));
                memcpy(prev[q], ms[q].m, (size_t)ms[q].k * sizeof(float));
            } else {
                CHECK_MSG(memcmp(prev[q], ms[q].m, (size_t)ms[q].k * sizeof(float)) != 0,
                          "%s: the next training step drew the same %s mask", what, q ? "input" : "recurrent");
            }
        }
        /* the step's output is the kernel's with those masks (the same at every step) */
        fl_rnn_states st = {.hdrop = hm, .xdrop = xm};
        fl_cpu_rnn_fwd(&dk, hx, hw, hr, NULL, NULL, &st, yk, aux);
        e = 0;
        double moved = 0;
        for (int64_t i = 0; i < B * u; i++) {
            e = fmax(e, fabs(yk[i] - y->val[i]));
            moved = fmax(moved, fabs(yinf[i] - y->val[i]));
        }
        CHECK_MSG(e == 0, "%s: training output differs from the kernel's with the drawn masks by %.3g", what, e);
        CHECK_MSG(moved > 1e-3, "%s: training output equals inference's", what);
        /* the same step again draws the same masks (a replayed step) */
        if (step == 1) {
            float *again = malloc((size_t)(B * u) * sizeof(float));
            memcpy(again, y->val, (size_t)(B * u) * sizeof(float));
            fl_graph_forward(&g, true);
            CHECK_MSG(memcmp(again, y->val, (size_t)(B * u) * sizeof(float)) == 0, "%s: step %d not reproducible",
                      what, step);
            free(again);
        }
    }
    /* inference after training: the plain cell again */
    fl_graph_forward(&g, false);
    CHECK_MSG(memcmp(yinf, y->val, (size_t)(B * u) * sizeof(float)) == 0, "%s: inference after training changed", what);
    free(prev[0]); free(prev[1]);
    free(hx); free(hw); free(hr); free(yinf); free(aux); free(yk);
    fl_graph_free(&g);
}

/* ------------------------------------------------------------ the layers */

static void test_layers(void) {
    const int64_t n = 64, T = 6, D = 4;
    fl_tensor *x = fl_tensor_new(FL_FLOAT32, 3, (int64_t[]){n, T, D}), *yt = fl_tensor_new(FL_FLOAT32, 1, &n);
    float *xd = fl_tensor_data(x), *yd = fl_tensor_data(yt);
    for (int64_t i = 0; i < n * T * D; i++) xd[i] = urand(-1, 1);
    for (int64_t i = 0; i < n; i++) yd[i] = (float)(i % 3);
    for (int kind = 0; kind < 4; kind++) {
        fl_layer *rl = kind == 0   ? fl_lstm(8, .dropout = 0.2f, .recurrent_dropout = 0.3f)
                       : kind == 1 ? fl_gru(8, .recurrent_dropout = 0.3f)
                       : kind == 2 ? fl_simple_rnn(8, .dropout = 0.1f, .recurrent_dropout = 0.5f)
                                   : fl_bidirectional(fl_gru(8, .dropout = 0.2f, .recurrent_dropout = 0.25f,
                                                             .no_reset_after = true));
        CHECK_MSG(rl != NULL, "layer %d: %s", kind, fl_last_error());
        if (!rl) continue;
        fl_model *m = fl_sequential(fl_input(T, D), rl, fl_dense(3, .activation = FL_SOFTMAX));
        CHECK_MSG(m != NULL, "model %d: %s", kind, fl_last_error());
        if (!m) continue;
        CHECK(fl_compile(m, fl_sgd(.learning_rate = 0.1f), FL_SPARSE_CATEGORICAL_CROSSENTROPY) == FL_OK);
        fl_tensor *p0 = fl_predict(m, x, .batch_size = 16, .verbose = FL_VERBOSE_SILENT);
        fl_tensor *p1 = fl_predict(m, x, .batch_size = 64, .verbose = FL_VERBOSE_SILENT);
        CHECK(p0 && p1);
        if (p0 && p1) { /* inference: no masks, so the batch size does not matter */
            double e = 0;
            for (int64_t i = 0; i < fl_tensor_size(p0); i++)
                e = fmax(e, fabs(((float *)fl_tensor_data(p0))[i] - ((float *)fl_tensor_data(p1))[i]));
            CHECK_MSG(e < 1e-6, "layer %d: predict depends on the batch by %.3g", kind, e);
        }
        fl_history *h = fl_fit(m, x, yt, .batch_size = 16, .epochs = 2, .verbose = FL_VERBOSE_SILENT);
        CHECK_MSG(h != NULL, "layer %d: fit: %s", kind, fl_last_error());
        fl_history_free(h);
        /* the rates survive a Keras file both ways: written, read back, written again alike */
        for (int f = 0; f < 2; f++) {
            char path[96], path2[96];
            snprintf(path, sizeof path, "/tmp/test_rnn_dropout_%d_%d.%s", (int)getpid(), kind, f ? "keras" : "h5");
            snprintf(path2, sizeof path2, "/tmp/test_rnn_dropout_%d_%d_again.json", (int)getpid(), kind);
            CHECK_MSG(fl_save_model(m, path) == FL_OK, "layer %d: save %s: %s", kind, path, fl_last_error());
            fl_model *m2 = fl_load_model(path);
            CHECK_MSG(m2 != NULL, "layer %d: load %s: %s", kind, path, fl_last_error());
            if (m2 && fl_save_model(m2, path2) == FL_OK) {
                FILE *fp = fopen(path2, "r");
                char buf[16384] = {0};
                size_t got = fp ? fread(buf, 1, sizeof buf - 1, fp) : 0;
                if (fp) fclose(fp);
                const char *want = kind <= 1 ? "\"recurrent_dropout\": 0.3" : kind == 2 ? "\"recurrent_dropout\": 0.5"
                                                                                  : "\"recurrent_dropout\": 0.25";
                const char *want2 = kind <= 1 ? "\"recurrent_dropout\":0.3" : kind == 2 ? "\"recurrent_dropout\":0.5"
                                                                                    : "\"recurrent_dropout\":0.25";
                CHECK_MSG(got > 0 && (strstr(buf, want) || strstr(buf, want2)), "layer %d: %s after %s lacks %s", kind,
                          path2, path, want);
                fl_tensor *q0 = fl_predict(m, x, .verbose = FL_VERBOSE_SILENT), *q1 = fl_predict(m2, x, .verbose = FL_VERBOSE_SILENT);
                CHECK(q0 && q1 && memcmp(fl_tensor_data(q0), fl_tensor_data(q1),
                                         (size_t)fl_tensor_size(q0) * sizeof(float)) == 0);
                fl_tensor_free(q0);
                fl_tensor_free(q1);
            }
            fl_model_free(m2);
            remove(path);
            remove(path2);
        }
        fl_tensor_free(p0);
        fl_tensor_free(p1);
        fl_model_free(m);
    }
    CHECK(fl_lstm(4, .recurrent_dropout = 1.0f) == NULL);
    CHECK_MSG(strstr(fl_last_error(), "LSTM: recurrent_dropout 1, expected 0 <= recurrent_dropout < 1"),
              "got: %s", fl_last_error());
    CHECK(fl_gru(4, .recurrent_dropout = -0.5f) == NULL);
    fl_tensor_free(x);
    fl_tensor_free(yt);
}

int main(void) {
    const struct { int cell, ra; } cells[] = {{FL_RNN_LSTM, 0}, {FL_RNN_GRU, 1}, {FL_RNN_GRU, 0}, {FL_RNN_SIMPLE, 0}};
    for (int ci = 0; ci < 4; ci++) {
        const int cell = cells[ci].cell, ra = cells[ci].ra;
        test_kernel(cell, ra, 1, 0, 0, 0, 0.4f, 0.0f, 1);  /* recurrent_dropout only */
        test_kernel(cell, ra, 1, 0, 1, 1, 0.4f, 0.3f, 2);  /* both, sequences, masked steps */
        test_kernel(cell, ra, 0, 1, 0, 1, 0.3f, 0.5f, 1);  /* no bias, go_backwards */
        test_kernel(cell, ra, 1, 1, 1, 0, 0.5f, 0.2f, 2);  /* go_backwards, sequences */
        test_op_masks(cell == FL_RNN_GRU && !ra ? FL_RNN_LSTM : cell, 0.3f, ci % 2 ? 0.2f : 0.0f);
    }
    test_layers();
    fl_set_num_threads(0);
    return check_report("test_rnn_dropout");
}
