/*
 * test_ops.c — every op of the graph on the CPU backend: the forward pass
 * against a naive reference written here (plain loops, double precision), and
 * a finite-difference check of the backward pass for the input and every
 * parameter. The loss used for gradients is L = sum(out * R) for a fixed
 * random R, so dL/d(out) = R.
 */
#include "check.h"
#include "backend/cpu/cpu_simd.h"

#include "core/graph.h"
#include "core/rng.h"
#include "ops/math.h"
#include "ops/ops.h"
#include "core/plan.h"

#include <stdlib.h>
#include <string.h>

static uint64_t g_stream = 1;

static void fill(float *p, int64_t n, float lo, float hi) { fl_rng_uniform(p, n, lo, hi, 42, g_stream++); }

typedef struct harness {
    fl_graph g;
    fl_node *x;
    fl_node *params[16];
    int np;
    fl_node *out;
    float *R;
    int64_t batch;
} harness;

static void h_init(harness *h, int64_t batch, int ndim, const int64_t *sample) {
    memset(h, 0, sizeof *h);
    fl_graph_init(&h->g, fl_backend_cpu());
    h->g.seed = 7;
    h->batch = batch;
    h->x = fl_graph_input(&h->g, "x", ndim, sample);
    h->x->force_grad = true;
}

static fl_node *h_param(harness *h, int ndim, const int64_t *shape, float lo, float hi) {
    fl_node *p = fl_graph_param(&h->g, "w", ndim, shape, true);
    fill(p->val, fl_node_size(p), lo, hi);
    h->params[h->np++] = p;
    return p;
}

static void h_ready(harness *h, fl_node *out, float xlo, float xhi) {
    h->out = out;
    fl_graph_finalize(&h->g);
    CHECK(fl_graph_reserve(&h->g, h->batch) == FL_OK);
    fl_graph_set_batch(&h->g, h->batch);
    fill(h->x->val, fl_node_size(h->x), xlo, xhi);
    h->R = malloc((size_t)fl_node_size(out) * sizeof(float));
    fill(h->R, fl_node_size(out), -1, 1);
}

/* h_ready for a second harness built as `like` was (NULL: the first): like's parameters, input and R copied */
static void h_ready_like(harness *h, fl_node *out, const harness *like) {
    for (int p = 0; like && p < h->np; p++)
        memcpy(h->params[p]->val, like->params[p]->val, (size_t)fl_node_size(h->params[p]) * sizeof(float));
    h_ready(h, out, -2, 3);
    if (like) {
        memcpy(h->x->val, like->x->val, (size_t)fl_node_size(h->x) * sizeof(float));
        memcpy(h->R, like->R, (size_t)fl_node_size(out) * sizeof(float));
    }
}

static void h_free(harness *h) {
    free(h->R);
    fl_graph_free(&h->g);
}

static double h_loss(harness *h, bool training) {
    fl_graph_forward(&h->g, training);
    double L = 0;
    for (int64_t i = 0; i < fl_node_size(h->out); i++) L += (double)h->out->val[i] * h->R[i];
    return L;
}

/* A training step: the forward, then the backward from dL/dout = R */
static void h_step(harness *h) {
    h_loss(h, true);
    fl_graph_clear_grads(&h->g);
    memcpy(h->out->grad, h->R, (size_t)fl_node_size(h->out) * sizeof(float));
    h->out->grad_ready = true;
    fl_graph_backward(&h->g);
}

/* The elements a gradient check tries (all of them in a tensor of at most
 * 40): along every dimension the first and last index and the tile
 * remainders, the indices from the largest multiple of 16 (AVX-512) and of 8
 * (AVX2) on, which vector kernels handle apart; combined over the
 * dimensions in rotating phases, with the two corners; plus 23 elements at
 * random (a fixed stream). Sorted, without repeats. */
#define GC_MAX 96
static int gc_cmp(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}
static int gc_sample(const fl_node *v, int64_t *idx) {
    const int64_t n = fl_node_size(v);
    int ns = 0;
    if (n <= 40) {
        for (int64_t i = 0; i < n; i++) idx[ns++] = i;
        return ns;
    }
    int64_t cand[FL_MAX_DIMS][8];
    int nc[FL_MAX_DIMS], most = 0;
    for (int d = 0; d < v->ndim; d++) {
        const int64_t dim = v->shape[d];
        int64_t c[8] = {0, dim - 1, dim / 16 * 16, dim / 16 * 16 + 1, dim / 8 * 8, dim - 2, dim / 2, dim / 16 * 16 - 1};
        nc[d] = 0;
        for (int k = 0; k < 8; k++) {
            if (c[k] < 0 || c[k] >= dim) continue;
            bool seen = false;
            for (int j = 0; j < nc[d]; j++) seen |= cand[d][j] == c[k];
            if (!seen) cand[d][nc[d]++] = c[k];
        }
        if (nc[d] > most) most = nc[d];
    }
    for (int k = 0; k < most; k++) /* phase k: dimension d takes its candidate (k + d) mod count */
        for (int rot = 0; rot < 2; rot++) {
            int64_t flat = 0;
            for (int d = 0; d < v->ndim; d++)
                flat = flat * v->shape[d] + cand[d][(k + (rot ? v->ndim - 1 - d : d)) % nc[d]];
            idx[ns++] = flat;
        }
    idx[ns++] = 0;
    idx[ns++] = n - 1;
    uint64_t r = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int k = 0; k < 23 && ns < GC_MAX; k++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        idx[ns++] = (int64_t)((r >> 17) % (uint64_t)n);
    }
    qsort(idx, (size_t)ns, sizeof idx[0], gc_cmp);
    int u = 0;
    for (int k = 0; k < ns; k++)
        if (u == 0 || idx[k] != idx[u - 1]) idx[u++] = idx[k];
    return u;
}

/* Analytic gradients (one backward pass), then central differences for the
 * elements gc_sample picks of x and of every parameter. */
static void h_gradcheck(harness *h, const char *what, double eps, double rtol, bool training) {
    h_loss(h, training);
    fl_graph_clear_grads(&h->g);
    memcpy(h->out->grad, h->R, (size_t)fl_node_size(h->out) * sizeof(float));
    h->out->grad_ready = true;
    fl_graph_backward(&h->g);
    fl_node *targets[12];
    int nt = 0;
    if (h->x->needs_grad) targets[nt++] = h->x; /* not an int input (Embedding's indices) */
    for (int i = 0; i < h->np; i++) targets[nt++] = h->params[i];
    for (int t = 0; t < nt; t++) {
        fl_node *v = targets[t];
        int64_t n = fl_node_size(v);
        float *ana = malloc((size_t)n * sizeof(float));
        memcpy(ana, v->grad, (size_t)n * sizeof(float));
        int64_t idx[GC_MAX];
        const int ns = gc_sample(v, idx);
        int bad = 0;
        for (int si = 0; si < ns; si++) {
            const int64_t i = idx[si];
            float keep = v->val[i];
            v->val[i] = keep + (float)eps;
            double lp = h_loss(h, training);
            v->val[i] = keep - (float)eps;
            double lm = h_loss(h, training);
            v->val[i] = keep;
            double num = (lp - lm) / (2 * eps);
            if (fabs(num - ana[i]) > 2e-3 + rtol * fabs(num)) {
                if (bad++ < 3)
                    fprintf(stderr, "  %s: d/d%s[%lld]: analytic %.6g, numeric %.6g\n", what,
                            v == h->x ? "x" : "param", (long long)i, ana[i], num);
            }
        }
        CHECK_MSG(bad == 0, "%s: %d gradient mismatches in %s", what, bad, v == h->x ? "x" : "a parameter");
        free(ana);
    }
    h_loss(h, training); /* leave forward values consistent */
}

static double max_abs_diff(const float *a, const double *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static double act_ref(int act, double x) {
    switch (act) {
    case FL_ACT_RELU: return x > 0 ? x : 0;
    case FL_ACT_SIGMOID: return 1 / (1 + exp(-x));
    case FL_ACT_TANH: return tanh(x);
    case FL_ACT_LEAKY_RELU: return x > 0 ? x : 0.2 * x;
    case FL_ACT_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case FL_ACT_ELU: return x > 0 ? x : expm1(x);
    case FL_ACT_SILU: return x / (1 + exp(-x));
    case FL_ACT_RELU6: return fmin(fmax(x, 0), 6);
    case FL_ACT_HARD_SIGMOID: return fmin(fmax(x + 3, 0), 6) / 6;
    case FL_ACT_HARD_SILU: return x * fmin(fmax(x + 3, 0), 6) / 6;
    case FL_ACT_SELU: return x > 0 ? 1.0507009873554805 * x : 1.0507009873554805 * 1.6732632423543772 * expm1(x);
    case FL_ACT_SOFTPLUS: return log1p(exp(x));
    case FL_ACT_SOFTSIGN: return x / (fabs(x) + 1);
    case FL_ACT_EXPONENTIAL: return exp(x);
    default: return x;
    }
}

/* ------------------------------------------------------------ dense */

static void test_dense(int act, bool bias) {
    harness h;
    const int64_t B = 5, K = 7, N = 4;
    h_init(&h, B, 1, &K);
    fl_node *w = h_param(&h, 2, (int64_t[]){K, N}, -0.5f, 0.5f);
    fl_node *b = bias ? h_param(&h, 1, &N, -0.5f, 0.5f) : NULL;
    h_ready(&h, fl_graph_dense(&h.g, "dense", h.x, w, b, act), -1, 1);
    h_loss(&h, true);
    double ref[5 * 4];
    for (int64_t i = 0; i < B; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = bias ? b->val[j] : 0;
            for (int64_t k = 0; k < K; k++) s += (double)h.x->val[i * K + k] * w->val[k * N + j];
            ref[i * N + j] = act_ref(act, s);
        }
    char what[64];
    snprintf(what, sizeof what, "dense act=%d bias=%d", act, bias);
    CHECK_MSG(max_abs_diff(h.out->val, ref, B * N) < 1e-5, "%s forward", what);
    h_gradcheck(&h, what, 1e-3, 1e-2, true);
    h_free(&h);
}

/* ----------------------------------------------------------- conv2d */

static void conv_ref(const float *x, const float *w, const float *b, int64_t B, const fl_conv_desc *d, int act,
                     double *y) {
    for (int64_t n = 0; n < B; n++)
        for (int oh = 0; oh < d->oh; oh++)
            for (int ow = 0; ow < d->ow; ow++)
                for (int oc = 0; oc < d->oc; oc++) {
                    double s = b ? b[oc] : 0;
                    for (int kh = 0; kh < d->kh; kh++)
                        for (int kw = 0; kw < d->kw; kw++) {
                            int ih = oh * d->sh - d->pt + kh, iw = ow * d->sw - d->pl + kw;
                            if (ih < 0 || ih >= d->h || iw < 0 || iw >= d->w) continue;
                            for (int c = 0; c < d->c; c++)
                                s += (double)x[((n * d->h + ih) * d->w + iw) * d->c + c] *
                                     w[((kh * d->kw + kw) * d->c + c) * d->oc + oc];
                        }
                    y[((n * d->oh + oh) * d->ow + ow) * d->oc + oc] = act_ref(act, s);
                }
}

static void test_conv(int H, int W, int C, int OC, int KH, int KW, int S, fl_padding pad, int act, bool bias,
                      int eoh, int eow) {
    harness h;
    const int64_t B = 3;
    h_init(&h, B, 3, (int64_t[]){H, W, C});
    fl_node *w = h_param(&h, 4, (int64_t[]){KH, KW, C, OC}, -0.4f, 0.4f);
    int64_t oc = OC;
    fl_node *b = bias ? h_param(&h, 1, &oc, -0.3f, 0.3f) : NULL;
    fl_node *y = fl_graph_conv2d(&h.g, "conv", h.x, w, b, S, S, pad, act);
    CHECK(y != NULL);
    if (!y) { h_free(&h); return; }
    CHECK_MSG(y->shape[1] == eoh && y->shape[2] == eow, "conv output %lldx%lld, expected %dx%d",
              (long long)y->shape[1], (long long)y->shape[2], eoh, eow);
    h_ready(&h, y, -1, 1);
    h_loss(&h, true);
    int64_t n = fl_node_size(y);
    double *ref = malloc((size_t)n * sizeof(double));
    conv_ref(h.x->val, w->val, b ? b->val : NULL, B, &y->conv, act, ref);
    char what[96];
    snprintf(what, sizeof what, "conv %dx%dx%d->%d k%dx%d s%d pad=%d act=%d bias=%d", H, W, C, OC, KH, KW, S, pad, act,
             bias);
    CHECK_MSG(max_abs_diff(y->val, ref, n) < 1e-4, "%s forward", what);
    free(ref);
    h_gradcheck(&h, what, 1e-3, 1e-2, true);
    h_free(&h);
}

/* A batch large enough to span several chunks and both threads. */
static void test_conv_big_batch(void) {
    harness h;
    const int64_t B = 37;
    h_init(&h, B, 3, (int64_t[]){9, 9, 4});
    fl_node *w = h_param(&h, 4, (int64_t[]){3, 3, 4, 8}, -0.3f, 0.3f);
    int64_t oc = 8;
    fl_node *b = h_param(&h, 1, &oc, -0.3f, 0.3f);
    fl_node *y = fl_graph_conv2d(&h.g, "conv", h.x, w, b, 1, 1, FL_VALID, FL_ACT_LINEAR);
    h_ready(&h, y, -1, 1);
    h_loss(&h, true);
    int64_t n = fl_node_size(y);
    double *ref = malloc((size_t)n * sizeof(double));
    conv_ref(h.x->val, w->val, b->val, B, &y->conv, FL_ACT_LINEAR, ref);
    CHECK_MSG(max_abs_diff(y->val, ref, n) < 1e-4, "conv big batch forward");
    free(ref);
    h_gradcheck(&h, "conv big batch", 1e-3, 1e-2, true);
    h_free(&h);
}

/* ---------------------------------------------------------- pooling */

static void test_pool(fl_op op, int H, int W, int C, int K, int S, fl_padding pad, int eoh, int eow) {
    harness h;
    const int64_t B = 2;
    h_init(&h, B, 3, (int64_t[]){H, W, C});
    fl_node *y = fl_graph_pool(&h.g, "pool", op, h.x, K, K, S, S, pad);
    CHECK(y != NULL);
    if (!y) { h_free(&h); return; }
    CHECK_MSG(y->shape[1] == eoh && y->shape[2] == eow, "pool output %lldx%lld, expected %dx%d",
              (long long)y->shape[1], (long long)y->shape[2], eoh, eow);
    h_ready(&h, y, -2, 2);
    h_loss(&h, true);
    const fl_conv_desc *d = &y->conv;
    int64_t n = fl_node_size(y);
    double *ref = malloc((size_t)n * sizeof(double));
    for (int64_t b = 0; b < B; b++)
        for (int oh = 0; oh < d->oh; oh++)
            for (int ow = 0; ow < d->ow; ow++)
                for (int c = 0; c < C; c++) {
                    double m = -INFINITY, s = 0;
                    int cnt = 0;
                    for (int kh = 0; kh < K; kh++)
                        for (int kw = 0; kw < K; kw++) {
                            int ih = oh * S - d->pt + kh, iw = ow * S - d->pl + kw;
                            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                            double v = h.x->val[((b * H + ih) * W + iw) * C + c];
                            m = fmax(m, v);
                            s += v;
                            cnt++;
                        }
                    ref[((b * d->oh + oh) * d->ow + ow) * C + c] = op == FL_OP_MAXPOOL ? m : s / cnt;
                }
    char what[96];
    snprintf(what, sizeof what, "%s %dx%dx%d k%d s%d pad=%d", op == FL_OP_MAXPOOL ? "maxpool" : "avgpool", H, W, C, K,
             S, pad);
    CHECK_MSG(max_abs_diff(y->val, ref, n) < 1e-6, "%s forward", what);
    free(ref);
    h_gradcheck(&h, what, 1e-3, 1e-2, true);
    h_free(&h);
}

static void test_gap(void) {
    harness h;
    h_init(&h, 3, 3, (int64_t[]){4, 5, 6});
    fl_node *y = fl_graph_gap(&h.g, "gap", h.x);
    h_ready(&h, y, -1, 1);
    h_loss(&h, true);
    double ref[3 * 6];
    for (int b = 0; b < 3; b++)
        for (int c = 0; c < 6; c++) {
            double s = 0;
            for (int p = 0; p < 20; p++) s += h.x->val[(b * 20 + p) * 6 + c];
            ref[b * 6 + c] = s / 20;
        }
    CHECK(y->ndim == 2 && y->shape[1] == 6);
    CHECK_MSG(max_abs_diff(y->val, ref, 18) < 1e-6, "gap forward");
    h_gradcheck(&h, "gap", 1e-3, 1e-2, true);
    h_free(&h);
}

/* Embedding: a gather of table rows by int32 indices (repeated ones
 * included, so that the backward's scatter-add sums), against a naive
 * reference; the table's gradient by finite differences; the mask of the
 * nonzero indices; a float input's indices truncated as Keras casts them. */
static void test_embedding(void) {
    const int B = 3, T = 7, V = 11, D = 5;
    harness h;
    h_init(&h, B, 1, (int64_t[]){T});
    h.x->force_grad = false;
    h.x->int_val = true;
    fl_node *w = h_param(&h, 2, (int64_t[]){V, D}, -1, 1);
    fl_node *y = fl_graph_embedding(&h.g, "embedding", h.x, w);
    fl_node *m = fl_graph_seq_mask(&h.g, "embedding", h.x, 0.0f);
    CHECK(y && m && y->ndim == 3 && y->shape[1] == T && y->shape[2] == D && m->ndim == 2 && m->shape[1] == T);
    h_ready(&h, y, 0, 1);
    int32_t idx[3 * 7] = {0, 3, 3, 10, 1, 0, 0, 5, 5, 5, 5, 2, 9, 0, 10, 0, 4, 4, 7, 8, 3};
    memcpy(h.x->val, idx, sizeof idx);
    h_loss(&h, true);
    int bad = 0, badm = 0;
    for (int i = 0; i < B * T; i++) {
        for (int k = 0; k < D; k++) bad += y->val[i * D + k] != w->val[idx[i] * D + k];
        badm += m->val[i] != (idx[i] != 0 ? 1.0f : 0.0f);
    }
    CHECK_MSG(bad == 0, "embedding forward: %d values differ from the table rows", bad);
    CHECK_MSG(badm == 0, "embedding mask_zero: %d mask values wrong", badm);
    h_gradcheck(&h, "embedding table", 1e-3, 1e-2, true);
    /* the scatter-add: row 5 appears 4 times, row 6 never */
    double ref = 0;
    for (int i = 0; i < B * T; i++)
        if (idx[i] == 5) ref += h.R[i * D + 2];
    CHECK_MSG(fabs(w->grad[5 * D + 2] - ref) < 1e-6 && w->grad[6 * D + 1] == 0.0f, "embedding backward: %g vs %g",
              w->grad[5 * D + 2], ref);
    h_free(&h);
    /* float indices, truncated toward zero */
    h_init(&h, 1, 1, (int64_t[]){3});
    h.x->force_grad = false;
    w = h_param(&h, 2, (int64_t[]){4, 2}, -1, 1);
    y = fl_graph_embedding(&h.g, "embedding", h.x, w);
    h_ready(&h, y, 0, 1);
    h.x->val[0] = 2.9f; h.x->val[1] = 0.2f; h.x->val[2] = 3.0f;
    h_loss(&h, false);
    CHECK_MSG(y->val[0] == w->val[4] && y->val[2] == w->val[0] && y->val[5] == w->val[7],
              "embedding of float indices: truncation");
    h_free(&h);
}

/* GlobalAveragePooling1D with a mask: the mean over the valid steps, its
 * gradient to x by finite differences (none to the masked steps). */
static void test_masked_gap1d(void) {
    const int B = 3, T = 6, C = 4;
    harness h;
    h_init(&h, B, 2, (int64_t[]){T, C});
    fl_node *mk = fl_graph_input(&h.g, "mask", 1, (int64_t[]){T});
    fl_node *y = fl_graph_masked_gap1d(&h.g, "gap1d", h.x, mk);
    CHECK(y && y->ndim == 2 && y->shape[1] == C);
    h_ready(&h, y, -1, 1);
    const float mv[3 * 6] = {1, 1, 1, 0, 0, 0, 0, 1, 0, 1, 0, 1, 1, 1, 1, 1, 1, 1};
    memcpy(mk->val, mv, sizeof mv);
    h_loss(&h, true);
    double ref[3 * 4];
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            double s = 0, n = 0;
            for (int t = 0; t < T; t++)
                if (mv[b * T + t] != 0) { s += h.x->val[(b * T + t) * C + c]; n++; }
            ref[b * C + c] = s / n;
        }
    CHECK_MSG(max_abs_diff(y->val, ref, B * C) < 1e-6, "masked gap1d forward");
    h_gradcheck(&h, "masked gap1d", 1e-3, 1e-2, true);
    CHECK_MSG(h.x->grad[(0 * T + 4) * C + 1] == 0.0f, "masked gap1d: a masked step got a gradient");
    h_free(&h);
}

/* Masking's mask: a step is valid when any feature differs from the value. */
static void test_seq_mask(void) {
    harness h;
    h_init(&h, 2, 2, (int64_t[]){3, 2});
    fl_node *m = fl_graph_seq_mask(&h.g, "masking", h.x, 0.5f);
    h_ready(&h, m, 0, 1);
    const float xv[12] = {0.5f, 0.5f, 0.5f, 1, 0, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 2, 2};
    memcpy(h.x->val, xv, sizeof xv);
    h_loss(&h, false);
    const float want[6] = {0, 1, 1, 0, 0, 1};
    CHECK_MSG(memcmp(m->val, want, sizeof want) == 0, "seq_mask: %g %g %g %g %g %g", m->val[0], m->val[1], m->val[2],
              m->val[3], m->val[4], m->val[5]);
    CHECK(m->needs_grad == false);
    h_free(&h);
}

/* Reshape is a view; a dense after it checks the gradient flows through. */
static void test_reshape(void) {
    harness h;
    h_init(&h, 2, 3, (int64_t[]){3, 4, 2});
    fl_node *r = fl_graph_reshape(&h.g, "reshape", h.x, 2, (int64_t[]){-1, 6});
    CHECK(r && r->shape[1] == 4 && r->shape[2] == 6);
    fl_node *w = h_param(&h, 2, (int64_t[]){6, 3}, -0.5f, 0.5f);
    fl_node *y = fl_graph_dense(&h.g, "dense", r, w, NULL, FL_ACT_LINEAR);
    CHECK(y && y->ndim == 3 && y->shape[1] == 4 && y->shape[2] == 3);
    h_ready(&h, y, -1, 1);
    CHECK(r->val == h.x->val); /* a view: no copy */
    h_gradcheck(&h, "reshape+dense (3-d dense)", 1e-3, 1e-2, true);
    /* bad reshapes name the layer and the sizes */
    CHECK(fl_graph_reshape(&h.g, "bad_reshape", h.x, 1, (int64_t[]){5}) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "bad_reshape");
    CHECK_STR_CONTAINS(fl_last_error(), "24 values");
    h_free(&h);
}

static void test_dropout(void) {
    harness h;
    const int64_t B = 64, N = 500;
    h_init(&h, B, 1, &N);
    fl_node *y = fl_graph_dropout(&h.g, "dropout", h.x, 0.3f, 99, NULL);
    h_ready(&h, y, 0.5f, 1.5f);
    h_loss(&h, true);
    int64_t zeros = 0, n = B * N;
    int scaled_ok = 1;
    for (int64_t i = 0; i < n; i++) {
        if (y->val[i] == 0) zeros++;
        else if (fabsf(y->val[i] - h.x->val[i] / 0.7f) > 1e-5f) scaled_ok = 0;
    }
    double frac = (double)zeros / (double)n;
    CHECK_MSG(fabs(frac - 0.3) < 0.01, "dropout rate 0.3 dropped %.4f", frac);
    CHECK_MSG(scaled_ok, "kept values are scaled by 1/(1-rate)");
    /* the same (seed, step) gives the same mask; the next step another */
    float *first = malloc((size_t)n * sizeof(float));
    memcpy(first, y->val, (size_t)n * sizeof(float));
    h_loss(&h, true);
    CHECK(memcmp(first, y->val, (size_t)n * sizeof(float)) == 0);
    h.g.step++;
    h_loss(&h, true);
    CHECK(memcmp(first, y->val, (size_t)n * sizeof(float)) != 0);
    h.g.step--;
    /* inference: identity */
    h_loss(&h, false);
    CHECK(memcmp(h.x->val, y->val, (size_t)n * sizeof(float)) == 0);
    free(first);
    h_gradcheck(&h, "dropout", 1e-3, 1e-2, true);
    h_free(&h);
}

static void test_batchnorm(void) {
    harness h;
    const int64_t B = 6, C = 5;
    h_init(&h, B, 3, (int64_t[]){2, 3, C});
    fl_node *gamma = h_param(&h, 1, &C, 0.5f, 1.5f);
    fl_node *beta = h_param(&h, 1, &C, -0.5f, 0.5f);
    fl_node *mm = fl_graph_param(&h.g, "moving_mean", 1, &C, false);
    fl_node *mv = fl_graph_param(&h.g, "moving_variance", 1, &C, false);
    for (int c = 0; c < C; c++) { mm->val[c] = 0; mv->val[c] = 1; }
    fl_node *y = fl_graph_batchnorm(&h.g, "bn", h.x, gamma, beta, mm, mv, 1e-3f, 0.99f);
    h_ready(&h, y, -2, 3);
    h_loss(&h, true);
    int64_t M = B * 6;
    double mean[5] = {0}, var[5] = {0};
    for (int64_t r = 0; r < M; r++)
        for (int c = 0; c < C; c++) mean[c] += h.x->val[r * C + c] / (double)M;
    for (int64_t r = 0; r < M; r++)
        for (int c = 0; c < C; c++) var[c] += pow(h.x->val[r * C + c] - mean[c], 2) / (double)M;
    double *ref = malloc((size_t)(M * C) * sizeof(double));
    for (int64_t r = 0; r < M; r++)
        for (int c = 0; c < C; c++)
            ref[r * C + c] = (h.x->val[r * C + c] - mean[c]) / sqrt(var[c] + 1e-3) * gamma->val[c] + beta->val[c];
    CHECK_MSG(max_abs_diff(y->val, ref, M * C) < 1e-5, "batchnorm training forward");
    /* Keras: moving = moving * momentum + batch * (1 - momentum), biased variance */
    CHECK_CLOSE(mm->val[0], 0.01 * mean[0], 1e-5, 1e-7);
    CHECK_CLOSE(mv->val[0], 0.99 + 0.01 * var[0], 1e-5, 1e-7);
    /* inference uses the moving statistics */
    h_loss(&h, false);
    for (int64_t r = 0; r < M; r++)
        for (int c = 0; c < C; c++)
            ref[r * C + c] = (h.x->val[r * C + c] - mm->val[c]) / sqrt(mv->val[c] + 1e-3) * gamma->val[c] + beta->val[c];
    CHECK_MSG(max_abs_diff(y->val, ref, M * C) < 1e-5, "batchnorm inference forward");
    free(ref);
    h_gradcheck(&h, "batchnorm", 1e-3, 2e-2, true);
    h_free(&h);
}

/* A frozen BatchNormalization (Keras: trainable false) normalises with its
 * moving statistics in training too, leaves them as they are, and passes
 * dx = dy gamma / sqrt(moving_var + eps) back; x also feeds an Add, so that
 * its gradient is added to (the other branch of the frozen backward). */
static void test_batchnorm_frozen(void) {
    harness h;
    const int64_t B = 5, C = 19;
    h_init(&h, B, 3, (int64_t[]){2, 3, C});
    fl_node *w[4];
    const char *names[4] = {"gamma", "beta", "moving_mean", "moving_variance"};
    const float lo[4] = {0.5f, -0.5f, -0.3f, 0.5f}, hi[4] = {1.5f, 0.5f, 0.3f, 2.0f};
    for (int i = 0; i < 4; i++) {
        w[i] = fl_graph_param(&h.g, names[i], 1, &C, false);
        fill(w[i]->val, C, lo[i], hi[i]);
    }
    fl_node *bn = fl_graph_batchnorm(&h.g, "bn", h.x, w[0], w[1], w[2], w[3], 1e-3f, 0.99f);
    fl_graph_batchnorm_freeze(bn, true);
    fl_node *y = fl_graph_merge(&h.g, "add", FL_OP_ADD, (fl_node *[]){bn, h.x}, 2, 0);
    h_ready(&h, y, -2, 3);
    float mm0 = w[2]->val[3], mv0 = w[3]->val[3];
    h_loss(&h, true);
    int64_t M = B * 6;
    double err = 0;
    for (int64_t r = 0; r < M; r++)
        for (int c = 0; c < C; c++) {
            double xv = h.x->val[r * C + c];
            double ref = (xv - w[2]->val[c]) / sqrt(w[3]->val[c] + 1e-3) * w[0]->val[c] + w[1]->val[c];
            err = fmax(err, fabs(bn->val[r * C + c] - ref));
        }
    CHECK_MSG(err < 1e-5, "frozen batchnorm: training forward uses the moving statistics (error %g)", err);
    CHECK_MSG(w[2]->val[3] == mm0 && w[3]->val[3] == mv0, "frozen batchnorm: moving statistics unchanged");
    h_gradcheck(&h, "batchnorm frozen", 1e-3, 1e-2, true);
    h_free(&h);
}

/* Training's BatchNormalization with the ReLU or ReLU6 that alone reads it (an Activation, kind 0, or a
 * ReLU layer, kind 1), or a LeakyReLU with slope 0.3 (kind 2), fused (bn_fwd_train_act, bn_bwd_act): the same output, moving statistics and
 * gradients, bit for bit, as the two layers run apart (a backend without the fused entries), whose
 * gradients test_batchnorm and test_act check by differences (here a step in gamma moves a whole channel
 * across the ReLU's kink). The inputs put values at, above and below the cap. With at_mean, every channel's
 * values are its mean and the mean +- 1/4 in turn, and beta is 0 or 6: at the mean the ReLU's input
 * x * s + t lands on the kink or the cap only because the forward rounds the product and the sum apart,
 * so a backward whose mask computes it again in another way (an FMA) fails. */
static fl_node *bn_relu_chain(harness *h, const fl_backend *be, int relu6, int kind, const harness *like) {
    const int64_t B = 7, C = 19;
    memset(h, 0, sizeof *h);
    fl_graph_init(&h->g, be);
    h->g.seed = 7;
    h->batch = B;
    h->x = fl_graph_input(&h->g, "x", 3, (int64_t[]){3, 5, C});
    h->x->force_grad = true;
    fl_node *gamma = h_param(h, 1, &C, 0.5f, 4.0f), *beta = h_param(h, 1, &C, -1.0f, 3.0f);
    fl_node *mm = fl_graph_param(&h->g, "moving_mean", 1, &C, false);
    fl_node *mv = fl_graph_param(&h->g, "moving_variance", 1, &C, false);
    for (int c = 0; c < C; c++) { mm->val[c] = 0; mv->val[c] = 1; }
    if (like) {
        memcpy(gamma->val, like->params[0]->val, (size_t)C * sizeof(float));
        memcpy(beta->val, like->params[1]->val, (size_t)C * sizeof(float));
    }
    fl_node *bn = fl_graph_batchnorm(&h->g, "bn", h->x, gamma, beta, mm, mv, 1e-3f, 0.99f);
    fl_node *y = kind == 0 ? fl_graph_act(&h->g, "relu", bn, relu6 ? FL_ACT_RELU6 : FL_ACT_RELU)
               : kind == 2 ? fl_graph_pact(&h->g, "leaky", bn, (fl_pact_desc){FL_PACT_RELU, 0.3f, 0.0f, INFINITY})
                           : fl_graph_pact(&h->g, "relu", bn, (fl_pact_desc){FL_PACT_RELU, 0.0f, 0.0f,
                                                                              relu6 ? 6.0f : INFINITY});
    h_ready(h, y, -2, 3);
    if (like) {
        memcpy(h->x->val, like->x->val, (size_t)fl_node_size(h->x) * sizeof(float));
        memcpy(h->R, like->R, (size_t)fl_node_size(y) * sizeof(float));
    }
    return bn;
}

static void test_bn_relu_fused(int relu6, int kind, int at_mean) {
    static fl_backend apart;
    apart = *fl_backend_cpu();
    apart.bn_fwd_train_act = NULL;
    apart.bn_bwd_act = NULL;
    harness h, u;
    fl_node *bh = bn_relu_chain(&h, fl_backend_cpu(), relu6, kind, NULL);
    if (at_mean) {
        const int64_t C = bh->in[1]->shape[0], rows = fl_node_size(h.x) / C; /* rows: a multiple of 3 */
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < C; c++) /* the mean 1.25 + c/64, its neighbours exact in float */
                h.x->val[r * C + c] = 1.25f + (float)c / 64.0f + 0.25f * (float)(r % 3 - 1);
        for (int64_t c = 0; c < C; c++) bh->in[2]->val[c] = relu6 && (c & 1) ? 6.0f : 0.0f;
    }
    fl_node *bu = bn_relu_chain(&u, &apart, relu6, kind, &h);
    char what[96];
    snprintf(what, sizeof what, "batchnorm -> %s%s (training%s)",
             kind == 2 ? "LeakyReLU" : kind ? "ReLU layer" : "Activation",
             relu6 ? " (6)" : "", at_mean ? ", values at the mean" : "");
    harness *hs[2] = {&h, &u};
    for (int k = 0; k < 2; k++) h_step(hs[k]);
    CHECK_MSG(bh->relu_folded && !bu->relu_folded, "%s: fused %d and %d, expected 1 and 0", what, bh->relu_folded,
              bu->relu_folded);
    /* no buffers for the normalisation's own value and gradient, which nothing writes (plan.c) */
    CHECK_MSG(bh->val == NULL && bh->grad == NULL && bu->val != NULL && bu->grad != NULL &&
                  u.g.arena_bytes >= h.g.arena_bytes + bu->vbytes,
              "%s: the fused normalisation has buffers (value %p, gradient %p; arena %zu bytes, apart %zu)", what,
              (void *)bh->val, (void *)bh->grad, h.g.arena_bytes, u.g.arena_bytes);
    int capped = 0;
    for (int64_t i = 0; i < fl_node_size(h.out); i++) capped += relu6 && h.out->val[i] == 6.0f;
    CHECK_MSG(!relu6 || capped > 0, "%s: no value reached the cap; the test does not try it", what);
    const fl_node *a[6] = {h.out, h.x, h.params[0], h.params[1], bh->in[3], bh->in[4]};
    const fl_node *b[6] = {u.out, u.x, u.params[0], u.params[1], bu->in[3], bu->in[4]};
    const char *names[6] = {"output", "dx", "dgamma", "dbeta", "moving mean", "moving variance"};
    for (int t = 0; t < 6; t++) {
        const float *p = t == 0 || t >= 4 ? a[t]->val : a[t]->grad, *q = t == 0 || t >= 4 ? b[t]->val : b[t]->grad;
        CHECK_MSG(memcmp(p, q, (size_t)fl_node_size(a[t]) * sizeof(float)) == 0, "%s: %s differs from the layers apart",
                  what, names[t]);
    }
    h_free(&h);
    h_free(&u);
}

/* Training's BatchNormalization whose value only an Add of two reads: the Add applies its affine as it adds
 * (fuse.add, add_affine), and its value is never written. The same output, gradients and moving
 * statistics, bit for bit, as a backend without add_affine. kind 0: ReLU(bn(x) + z); 1: ReLU6(z + bn(x));
 * 2: bn(x) + z, no ReLU; 3: ReLU(bn(x) + bn2(z)), a projection shortcut's normalisation beside the block's,
 * only the first deferred. */
static fl_node *bn_add_chain(harness *h, const fl_backend *be, int kind, const harness *like, fl_node **bn2) {
    const int64_t B = 7, C = 19, sample[3] = {3, 5, C};
    memset(h, 0, sizeof *h);
    fl_graph_init(&h->g, be);
    h->g.seed = 7;
    h->batch = B;
    h->x = fl_graph_input(&h->g, "x", 3, sample);
    h->x->force_grad = true;
    fl_node *z = fl_graph_input(&h->g, "z", 3, sample);
    z->force_grad = true;
    fl_node *bns[2] = {NULL, NULL}, *src[2] = {h->x, z};
    for (int b = 0; b < (kind == 3 ? 2 : 1); b++) {
        fl_node *gamma = h_param(h, 1, &C, 0.5f, 4.0f), *beta = h_param(h, 1, &C, -1.0f, 3.0f);
        fl_node *mm = fl_graph_param(&h->g, "moving_mean", 1, &C, false);
        fl_node *mv = fl_graph_param(&h->g, "moving_variance", 1, &C, false);
        for (int c = 0; c < C; c++) { mm->val[c] = 0; mv->val[c] = 1; }
        if (like) {
            memcpy(gamma->val, like->params[2 * b]->val, (size_t)C * sizeof(float));
            memcpy(beta->val, like->params[2 * b + 1]->val, (size_t)C * sizeof(float));
        }
        bns[b] = fl_graph_batchnorm(&h->g, b ? "bn2" : "bn", src[b], gamma, beta, mm, mv, 1e-3f, 0.99f);
    }
    fl_node *other = kind == 3 ? bns[1] : z;
    fl_node *xs[2] = {bns[0], other};
    if (kind == 1) { xs[0] = other; xs[1] = bns[0]; }
    fl_node *add = fl_graph_merge(&h->g, "add", FL_OP_ADD, xs, 2, 0);
    fl_node *out = kind == 2 ? add
                 : kind == 1 ? fl_graph_pact(&h->g, "relu", add, (fl_pact_desc){FL_PACT_RELU, 0.0f, 0.0f, 6.0f})
                             : fl_graph_act(&h->g, "relu", add, FL_ACT_RELU);
    h_ready(h, out, -2, 3);
    if (like) {
        memcpy(h->x->val, like->x->val, (size_t)fl_node_size(h->x) * sizeof(float));
        memcpy(h->R, like->R, (size_t)fl_node_size(out) * sizeof(float));
    }
    const fl_node *lz = like ? like->g.nodes[z->id] : NULL;
    if (lz) memcpy(z->val, lz->val, (size_t)fl_node_size(z) * sizeof(float));
    else fill(z->val, fl_node_size(z), -2, 2);
    *bn2 = bns[1];
    return bns[0];
}

static void test_bn_add_train(int kind) {
    static fl_backend apart;
    apart = *fl_backend_cpu();
    apart.add_affine = NULL;
    harness h, u;
    fl_node *hb2, *ub2;
    fl_node *hb = bn_add_chain(&h, fl_backend_cpu(), kind, NULL, &hb2);
    fl_node *ub = bn_add_chain(&u, &apart, kind, &h, &ub2);
    h_step(&h);
    h_step(&u);
    char what[64];
    snprintf(what, sizeof what, "batchnorm -> add, training, kind %d", kind);
    CHECK_MSG(hb->affine_deferred && !ub->affine_deferred && (!hb2 || !hb2->affine_deferred),
              "%s: deferred %d (%d), apart %d", what, hb->affine_deferred, hb2 ? hb2->affine_deferred : -1,
              ub->affine_deferred);
    /* no buffer for the value nothing writes (plan.c) */
    CHECK_MSG(hb->val == NULL && ub->val != NULL && u.g.arena_bytes >= h.g.arena_bytes + ub->vbytes,
              "%s: the deferred value has a buffer (arena %zu bytes, apart %zu, the value %zu)", what,
              h.g.arena_bytes, u.g.arena_bytes, ub->vbytes);
    const int64_t zid = u.x->id + 1; /* z, the second input */
    const fl_node *a[8] = {h.out, h.x, h.g.nodes[zid], hb->in[1], hb->in[2], hb->in[3], hb->in[4], NULL};
    const fl_node *b[8] = {u.out, u.x, u.g.nodes[zid], ub->in[1], ub->in[2], ub->in[3], ub->in[4], NULL};
    const char *names[7] = {"output", "dx", "dz", "dgamma", "dbeta", "moving mean", "moving variance"};
    int capped = 0;
    for (int64_t i = 0; i < fl_node_size(h.out); i++) capped += h.out->val[i] == 6.0f;
    CHECK_MSG(kind != 1 || capped > 0, "%s: no value reached the cap; the test does not try it", what);
    for (int t = 0; t < 7; t++) {
        const bool val = t == 0 || t >= 5;
        const float *p = val ? a[t]->val : a[t]->grad, *q = val ? b[t]->val : b[t]->grad;
        CHECK_MSG(memcmp(p, q, (size_t)fl_node_size(a[t]) * sizeof(float)) == 0, "%s: %s differs from the layers apart",
                  what, names[t]);
    }
    h_free(&h);
    h_free(&u);
}

/* Training's Add with the ReLU or ReLU6 that alone reads it, fused: the Add's forward writes the ReLU's value,
 * and its backward gives each input the ReLU's gradient masked by that value (formed in the first input's
 * gradient, copied or added from there). Checked bit for bit against the arithmetic of the layers apart:
 * kind 0, Activation(relu)(x + z); 1, ReLU(max_value=6)(z + x); 2, ReLU()(x + z + x + z), each gradient added
 * to itself; 3, ReLU(6)(x + z) + z and 4, ReLU(6)(z + x) + z, whose z already holds a gradient when the fused
 * Add adds its own (last, then first). */
static void test_add_relu_train(int kind) {
    harness h;
    const int64_t B = 7, sample[3] = {3, 5, 19};
    h_init(&h, B, 3, sample);
    fl_node *z = fl_graph_input(&h.g, "z", 3, sample);
    z->force_grad = true;
    fl_node *x = h.x, *xs[4] = {x, z, x, z};
    if (kind == 1 || kind == 4) { xs[0] = z; xs[1] = x; }
    fl_node *add = fl_graph_merge(&h.g, "add", FL_OP_ADD, xs, kind == 2 ? 4 : 2, 0);
    const float hi = kind == 0 || kind == 2 ? INFINITY : 6.0f;
    fl_node *relu = kind == 0 ? fl_graph_act(&h.g, "relu", add, FL_ACT_RELU)
                              : fl_graph_pact(&h.g, "relu", add, (fl_pact_desc){FL_PACT_RELU, 0.0f, 0.0f, hi});
    fl_node *out = kind >= 3 ? fl_graph_merge(&h.g, "out", FL_OP_ADD, (fl_node *[]){relu, z}, 2, 0) : relu;
    h_ready(&h, out, -3, 8);
    fill(z->val, fl_node_size(z), -2, 2);
    h_step(&h);
    char what[64];
    snprintf(what, sizeof what, "add -> relu, training, kind %d", kind);
    CHECK_MSG(add->relu_folded, "%s: the Add did not apply its ReLU", what);
    /* an Add of two: no buffers for its own value and gradient, which nothing writes (plan.c); of more, its
     * value holds the sum so far */
    CHECK_MSG(add->grad == NULL && (kind == 2 ? add->val != NULL : add->val == NULL),
              "%s: the Add's value %p, gradient %p", what, (void *)add->val, (void *)add->grad);
    const int64_t n = fl_node_size(out);
    int bad = 0, capped = 0;
    for (int64_t i = 0; i < n; i++) {
        const float xv = x->val[i], zv = z->val[i], R = h.R[i];
        const float s = kind == 1 || kind == 4 ? zv + xv : kind == 2 ? ((xv + zv) + xv) + zv : xv + zv;
        float y = s > 0.0f ? s : 0.0f;
        y = y < hi ? y : hi;
        capped += y == 6.0f;
        const float gr = R * (float)((y > 0.0f) & (y < hi));
        const float want[3] = {kind >= 3 ? y + zv : y, kind == 2 ? gr + gr : gr,
                               kind >= 3 ? R + gr : kind == 2 ? gr + gr : gr};
        const float got[3] = {out->val[i], x->grad[i], z->grad[i]};
        for (int t = 0; t < 3; t++)
            if (memcmp(&want[t], &got[t], sizeof(float)) && bad++ < 5)
                CHECK_MSG(0, "%s: %s[%lld] = %g, expected %g", what, t == 0 ? "output" : t == 1 ? "dx" : "dz",
                          (long long)i, got[t], want[t]);
    }
    CHECK_MSG(bad == 0, "%s: %d values differ", what, bad);
    CHECK_MSG(hi == INFINITY || capped > 0, "%s: no value reached the cap; the test does not try it", what);
    h_free(&h);
}

/* Training's Conv2D -> BatchNormalization (-> ReLU), the normalisation's data gradient formed by the
 * convolution's backward as it reads its dy (bn_bwd_coef, conv2d_bn_bwd): the same output, gradients and
 * moving statistics, bit for bit, as a backend without those entries. v: 0, 3x3 "same" 16 -> 16, no bias,
 * ReLU; 1, 3x3 stride 2 "same" 3 -> 20, bias, no ReLU; 2, 1x1 8 -> 16, ReLU6, the input without a gradient
 * (the convolution forms its dy in place); 3, 3x3 "valid" 5 -> 7 dilated 2 (rows of 3 pixels: not the
 * direct kernels, the whole dx formed first); 4, as 0 with a LeakyReLU (slope 0.3); 5, 3x3 "same" 5 -> 7
 * dilated 2, ReLU (the direct kernels' dilated backward). */
static fl_node *conv_bn_chain(harness *h, const fl_backend *be, int v, const harness *like) {
    const int64_t B = 6;
    const int C = v == 0 || v == 4 ? 16 : v == 1 ? 3 : v == 2 ? 8 : 5;
    const int OC = v == 0 || v == 4 ? 16 : v == 1 ? 20 : v == 2 ? 16 : 7;
    const int K = v == 2 ? 1 : 3, S = v == 1 ? 2 : 1;
    memset(h, 0, sizeof *h);
    fl_graph_init(&h->g, be);
    h->g.seed = 7;
    h->batch = B;
    h->x = fl_graph_input(&h->g, "x", 3, (int64_t[]){9, 7, C});
    h->x->force_grad = v != 2;
    fl_node *w = h_param(h, 4, (int64_t[]){K, K, C, OC}, -0.5f, 0.5f);
    fl_node *b = v == 1 ? h_param(h, 1, (int64_t[]){OC}, -0.5f, 0.5f) : NULL;
    const int64_t oc = OC;
    fl_node *gamma = h_param(h, 1, &oc, 0.5f, 2.0f), *beta = h_param(h, 1, &oc, -1.0f, 1.0f);
    fl_node *mm = fl_graph_param(&h->g, "moving_mean", 1, &oc, false);
    fl_node *mv = fl_graph_param(&h->g, "moving_variance", 1, &oc, false);
    for (int c = 0; c < OC; c++) { mm->val[c] = 0; mv->val[c] = 1; }
    fl_node *conv = v == 3 || v == 5 ? fl_graph_conv2d_dilated(&h->g, "conv", h->x, w, b, 1, 1, 2, 2, 1,
                                                               v == 3 ? FL_VALID : FL_SAME, FL_ACT_LINEAR)
                                     : fl_graph_conv2d(&h->g, "conv", h->x, w, b, S, S, FL_SAME, FL_ACT_LINEAR);
    fl_node *bn = fl_graph_batchnorm(&h->g, "bn", conv, gamma, beta, mm, mv, 1e-3f, 0.99f);
    fl_node *y = v == 0 || v == 5 ? fl_graph_act(&h->g, "relu", bn, FL_ACT_RELU)
               : v == 2 ? fl_graph_pact(&h->g, "relu", bn, (fl_pact_desc){FL_PACT_RELU, 0.0f, 0.0f, 6.0f})
               : v == 4 ? fl_graph_pact(&h->g, "leaky", bn, (fl_pact_desc){FL_PACT_RELU, 0.3f, 0.0f, INFINITY})
                        : bn;
    h_ready_like(h, y, like);
    return conv;
}

static void test_conv_bn_fused(int v) {
    static fl_backend apart;
    apart = *fl_backend_cpu();
    apart.bn_bwd_coef = NULL;
    apart.conv2d_bn_bwd = NULL;
    harness h, u;
    fl_node *ch = conv_bn_chain(&h, fl_backend_cpu(), v, NULL);
    fl_node *cu = conv_bn_chain(&u, &apart, v, &h);
    char what[64];
    snprintf(what, sizeof what, "conv -> batchnorm (training), variant %d", v);
    CHECK_MSG(ch->fuse.conv_bn && !cu->fuse.conv_bn,
              "%s: fused %d and %d, expected 1 and 0", what, ch->fuse.conv_bn != NULL,
              cu->fuse.conv_bn != NULL);
    harness *hs[2] = {&h, &u};
    for (int k = 0; k < 2; k++) h_step(hs[k]);
    for (int t = -2; t < h.np; t++) {
        const fl_node *a = t == -2 ? h.out : t == -1 ? h.x : h.params[t], *b = t == -2 ? u.out : t == -1 ? u.x : u.params[t];
        if (t == -1 && v == 2) continue; /* no dx */
        const float *p = t == -2 ? a->val : a->grad, *q = t == -2 ? b->val : b->grad;
        const int64_t n = fl_node_size(a);
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < n; i++)
            if (memcmp(p + i, q + i, sizeof(float))) { bad++; if (first < 0) first = i; }
        CHECK_MSG(bad == 0, "%s: %s differs from the layers apart at %lld of %lld elements (first %lld: %g, %g)",
                  what, t == -2 ? "output" : t == -1 ? "dx" : h.params[t]->name, (long long)bad, (long long)n,
                  (long long)first, first >= 0 ? p[first] : 0.0, first >= 0 ? q[first] : 0.0);
    }
    h_free(&h);
    h_free(&u);
}

/* Training's BatchNormalization (-> ReLU) -> Conv2D, the normalisation's affine and ReLU formed as the
 * convolution reads its input (fuse.conv, conv_pre), its value never written: the same output,
 * gradients and moving statistics, bit for bit, as a backend without conv_pre. x -> conv 3x3 "same" -> bn ->
 * then v: 0, ReLU -> conv 3x3 "same" 16 -> 16 (the direct kernels' taps); 1, ReLU6 -> conv 3x3 32 -> 32 with a
 * bias (Winograd, batch 16); 2, no ReLU -> conv 3x3 16 -> 8 -> bn -> ReLU (the convolution forms the second
 * normalisation's dx, conv2d_bn_bwd); 3, ReLU -> conv 3x3 16 -> 16 -> max pooling 2x2 (fused); 4, ReLU -> conv
 * 3x3 stride 2 (not deferred: rows of 4 output pixels, fewer than the direct backward takes); 9, the same over
 * a 13-wide input (deferred: 7 pixels a row, the data gradient in phases); 5, ReLU -> conv 1x1 (no padding:
 * the sample copied only to apply it); 6, ReLU6 -> depthwise 3x3 "same" over 20 channels (a block of 16 and the
 * rest), with a bias; 7, no ReLU -> depthwise 3x3 stride 2 "valid", depth multiplier 2; 8, a LeakyReLU -> conv
 * 3x3 (not deferred: d->pre takes ReLU and ReLU6 only; the LeakyReLU is fused into the normalisation); 10,
 * ReLU -> conv 3x3 "same" dilated 2, 32 -> 32, batch 16 (Winograd's dilated forward, the direct kernels'
 * dilated backward). */
static fl_node *bn_conv_chain(harness *h, const fl_backend *be, int v, const harness *like, fl_node **bn,
                              fl_node **val) {
    const int64_t B = v == 1 || v == 10 ? 16 : 6;
    const int C = 5, C1 = v == 1 || v == 10 ? 32 : v == 6 ? 20 : 16;
    const int C2 = v == 1 || v == 10 ? 32 : v == 2 ? 8 : v == 6 ? 1 : v == 7 ? 2 : 16;
    const int K2 = v == 5 ? 1 : 3;
    memset(h, 0, sizeof *h);
    fl_graph_init(&h->g, be);
    h->g.seed = 7;
    h->batch = B;
    h->x = fl_graph_input(&h->g, "x", 3, (int64_t[]){9, v == 9 ? 13 : 7, C});
    h->x->force_grad = true;
    fl_node *bns[2] = {NULL, NULL};
    fl_node *y = h->x;
    for (int b = 0; b < (v == 2 ? 2 : 1); b++) {
        const int64_t ci = b ? C1 : C, co = b ? C2 : C1;
        fl_node *w = h_param(h, 4, (int64_t[]){3, 3, ci, co}, -0.5f, 0.5f);
        /* a ReLU6's input reaches its cap whatever the random stream (beta up to 4) */
        const float bhi = b == 0 && (v == 1 || v == 6) ? 4.0f : 1.0f;
        fl_node *gamma = h_param(h, 1, &co, 0.5f, 2.0f), *beta = h_param(h, 1, &co, -1.0f, bhi);
        fl_node *mm = fl_graph_param(&h->g, "moving_mean", 1, &co, false);
        fl_node *mv = fl_graph_param(&h->g, "moving_variance", 1, &co, false);
        for (int c = 0; c < co; c++) { mm->val[c] = 0; mv->val[c] = 1; }
        fl_node *conv = fl_graph_conv2d(&h->g, b ? "conv_b" : "conv_a", y, w, NULL, 1, 1, FL_SAME, FL_ACT_LINEAR);
        bns[b] = fl_graph_batchnorm(&h->g, b ? "bn2" : "bn", conv, gamma, beta, mm, mv, 1e-3f, 0.99f);
        y = bns[b];
        if (b == 0 && v != 2 && v != 7)
            y = v == 1 || v == 6 ? fl_graph_pact(&h->g, "relu", y, (fl_pact_desc){FL_PACT_RELU, 0.0f, 0.0f, 6.0f})
              : v == 8 ? fl_graph_pact(&h->g, "leaky", y, (fl_pact_desc){FL_PACT_RELU, 0.3f, 0.0f, INFINITY})
                       : fl_graph_act(&h->g, "relu", y, FL_ACT_RELU);
        if (b == 0) *val = y;
    }
    if (v == 2) {
        y = fl_graph_act(&h->g, "relu2", y, FL_ACT_RELU);
    } else {
        const int64_t c1 = C1, c2 = C2;
        fl_node *w = h_param(h, 4, (int64_t[]){K2, K2, c1, c2}, -0.5f, 0.5f);
        const bool depthwise = v >= 6 && v <= 8;
        const int64_t nb = depthwise ? c1 * c2 : c2;
        fl_node *b = v == 1 || v == 6 ? h_param(h, 1, &nb, -0.5f, 0.5f) : NULL;
        const int s = v == 4 || v == 7 || v == 9 ? 2 : 1;
        const fl_padding pad = v == 5 || v == 7 ? FL_VALID : FL_SAME;
        y = depthwise ? fl_graph_depthwise_conv2d(&h->g, "dw", y, w, b, s, s, pad, FL_ACT_LINEAR)
          : v == 10   ? fl_graph_conv2d_dilated(&h->g, "conv_b", y, w, b, 1, 1, 2, 2, 1, pad, FL_ACT_LINEAR)
                      : fl_graph_conv2d(&h->g, "conv_b", y, w, b, s, s, pad, FL_ACT_LINEAR);
        if (v == 3) y = fl_graph_pool(&h->g, "pool", FL_OP_MAXPOOL, y, 2, 2, 2, 2, FL_VALID);
    }
    h_ready_like(h, y, like);
    *bn = bns[0];
    return y;
}

static void test_bn_into_conv(int v) {
    static fl_backend apart;
    apart = *fl_backend_cpu();
    apart.conv_pre = NULL;
    harness h, u;
    fl_node *hb, *ub, *hv, *uv;
    bn_conv_chain(&h, fl_backend_cpu(), v, NULL, &hb, &hv);
    bn_conv_chain(&u, &apart, v, &h, &ub, &uv);
    char what[64];
    snprintf(what, sizeof what, "batchnorm -> conv (training), variant %d", v);
    /* the direct kernels: AVX-512 or AVX2; depthwise: any; a LeakyReLU is fused into the normalisation, not deferred */
    const bool want = v != 4 && v != 8 && ((v >= 6 && v <= 7) || fl_cpu_direct());
    const bool got = hb->fuse.conv != NULL;
    CHECK_MSG(got == want && !ub->fuse.conv, "%s: deferred %d, expected %d", what, got,
              want);
    /* the value nothing writes has no buffer (plan.c) */
    CHECK_MSG(want ? hv->val == NULL && uv->val != NULL : hv->val != NULL, "%s: the value's buffer %p (apart %p)",
              what, (void *)hv->val, (void *)uv->val);
    harness *hs[2] = {&h, &u};
    for (int k = 0; k < 2; k++) h_step(hs[k]);
    CHECK_MSG(hb->affine_deferred == want, "%s: the forward deferred %d", what, hb->affine_deferred);
    for (int t = -4; t < h.np; t++) {
        const fl_node *a = t == -4 ? hb->in[3] : t == -3 ? hb->in[4] : t == -2 ? h.out : t == -1 ? h.x : h.params[t];
        const fl_node *b = t == -4 ? ub->in[3] : t == -3 ? ub->in[4] : t == -2 ? u.out : t == -1 ? u.x : u.params[t];
        const float *p = t < -1 ? a->val : a->grad, *q = t < -1 ? b->val : b->grad;
        const int64_t n = fl_node_size(a);
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < n; i++)
            if (memcmp(p + i, q + i, sizeof(float))) { bad++; if (first < 0) first = i; }
        const char *name = t == -4 ? "moving mean" : t == -3 ? "moving variance" : t == -2 ? "output"
                         : t == -1 ? "dx" : h.params[t]->name;
        CHECK_MSG(bad == 0, "%s: %s (%d) differs from the layers apart at %lld of %lld elements (first %lld: %g, %g)",
                  what, name, t, (long long)bad, (long long)n, (long long)first, first >= 0 ? p[first] : 0.0,
                  first >= 0 ? q[first] : 0.0);
    }
    int capped = 0;
    const bool six = v == 1 || v == 6;
    for (int64_t i = 0; six && i < fl_node_size(uv); i++) capped += uv->val[i] == 6.0f;
    CHECK_MSG(!six || capped > 0, "%s: no value reached the cap; the test does not try it", what);
    h_free(&h);
    h_free(&u);
}

static void test_act(int act) {
    harness h;
    const int64_t B = 4, N = 6;
    h_init(&h, B, 1, &N);
    fl_node *y = fl_graph_act(&h.g, "act", h.x, act);
    h_ready(&h, y, -3, 3);
    h_loss(&h, true);
    double ref[4 * 6];
    for (int64_t i = 0; i < B; i++) {
        if (act == FL_ACT_SOFTMAX) {
            double mx = -INFINITY, s = 0;
            for (int j = 0; j < N; j++) mx = fmax(mx, h.x->val[i * N + j]);
            for (int j = 0; j < N; j++) s += exp(h.x->val[i * N + j] - mx);
            for (int j = 0; j < N; j++) ref[i * N + j] = exp(h.x->val[i * N + j] - mx) / s;
        } else {
            for (int j = 0; j < N; j++) ref[i * N + j] = act_ref(act, h.x->val[i * N + j]);
        }
    }
    char what[32];
    snprintf(what, sizeof what, "activation %d", act);
    CHECK_MSG(max_abs_diff(y->val, ref, B * N) < 1e-6, "%s forward", what);
    h_gradcheck(&h, what, 1e-3, 1e-2, true);
    h_free(&h);
}

/* Known values of the Keras activations. */
static void test_act_values(void) {
    CHECK_CLOSE(fl_act_forward(FL_ACT_GELU, 1.0f), 0.8413447, 1e-6, 0);
    CHECK_CLOSE(fl_act_forward(FL_ACT_GELU, -0.5f), -0.15426877, 1e-5, 0);
    CHECK_CLOSE(fl_act_forward(FL_ACT_ELU, -1.0f), -0.63212056, 1e-6, 0);
    CHECK_CLOSE(fl_act_forward(FL_ACT_LEAKY_RELU, -1.0f), -0.2, 1e-6, 0);
    CHECK_CLOSE(fl_act_forward(FL_ACT_SIGMOID, -100.0f), 0.0, 0, 1e-30);
    CHECK_CLOSE(fl_act_forward(FL_ACT_SIGMOID, 100.0f), 1.0, 0, 1e-7);
    /* values printed by keras.activations (Keras 3.15, JAX) */
    CHECK_CLOSE(fl_act_forward(FL_ACT_SILU, 1.0f), 0.7310586, 1e-6, 0);
    CHECK_CLOSE(fl_act_forward(FL_ACT_RELU6, 7.0f), 6.0, 0, 0);
    CHECK_CLOSE(fl_act_forward(FL_ACT_HARD_SIGMOID, 1.0f), 0.6666667, 1e-6, 0);
    CHECK_CLOSE(fl_act_forward(FL_ACT_HARD_SIGMOID, -3.5f), 0.0, 0, 0);
    CHECK_CLOSE(fl_act_forward(FL_ACT_HARD_SILU, -1.0f), -0.33333334, 1e-6, 0);
    CHECK_CLOSE(fl_act_forward(FL_ACT_SELU, -1.0f), -1.1113307, 1e-6, 0);
    CHECK_CLOSE(fl_act_forward(FL_ACT_SOFTPLUS, 1.0f), 1.3132616, 1e-6, 0);
    CHECK_CLOSE(fl_act_forward(FL_ACT_SOFTPLUS, 100.0f), 100.0, 1e-7, 0);
    CHECK_CLOSE(fl_act_forward(FL_ACT_SOFTSIGN, -3.0f), -0.75, 1e-7, 0);
    CHECK_CLOSE(fl_act_forward(FL_ACT_EXPONENTIAL, 1.0f), 2.7182817, 1e-6, 0);
    /* every name maps back to its code, aliases too */
    for (int a = 0; a < FL_ACTIVATION_COUNT; a++) {
        fl_activation back = FL_LINEAR;
        CHECK(fl_activation_from_name(fl_activation_name((fl_activation)a), &back) == FL_OK && (int)back == a);
    }
    fl_activation al = FL_LINEAR;
    CHECK(fl_activation_from_name("swish", &al) == FL_OK && al == FL_SILU);
    CHECK(fl_activation_from_name("hard_swish", &al) == FL_OK && al == FL_HARD_SILU);
    CHECK(fl_activation_from_name("mish", &al) == FL_ERR_INVALID_ARG);
    CHECK_STR_CONTAINS(fl_last_error(), "softsign");
    /* derivatives from the output match those from the input */
    for (float x = -2.5f; x < 2.5f; x += 0.37f)
        for (int a = FL_ACT_LINEAR; a < FL_ACT_COUNT; a++)
            if (fl_act_grad_from_output(a)) {
                float y = fl_act_forward(a, x);
                CHECK_CLOSE(fl_act_grad_y(a, y), fl_act_grad_x(a, x, y), 1e-5, 1e-6);
            }
}

/* Philox 4x32-10 known-answer vectors (Random123 kat_vectors). */
static void test_philox(void) {
    fl_philox4 r = fl_philox4x32_10(0, 0, 0, 0, 0, 0);
    CHECK(r.v[0] == 0x6627e8d5u && r.v[1] == 0xe169c58du && r.v[2] == 0xbc57ac4cu && r.v[3] == 0x9b00dbd8u);
    r = fl_philox4x32_10(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu);
    CHECK(r.v[0] == 0x408f276du && r.v[1] == 0x41c83b0eu && r.v[2] == 0xa20bc7c6u && r.v[3] == 0x6d5451fdu);
    r = fl_philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u);
    CHECK(r.v[0] == 0xd16cfe09u && r.v[1] == 0x94fdccebu && r.v[2] == 0x5001e420u && r.v[3] == 0x24126ea1u);
    /* the public accessors are consistent with the block function */
    CHECK(fl_philox_u32(5, 6, 9) == fl_philox_block(5, 6, 2).v[1]);
    float u = fl_philox_uniform(1, 2, 3);
    CHECK(u >= 0.0f && u < 1.0f);
}

/* Add, Multiply, Concatenate: merged branches of x (two Dense and x itself),
 * so that the gradient check reaches x and both kernels. */
static void test_merge(fl_op op, int axis) {
    harness h;
    const int64_t B = 4, N = 5;
    h_init(&h, B, 2, (int64_t[]){3, N});
    fl_node *w1 = h_param(&h, 2, (int64_t[]){N, N}, -0.6f, 0.6f);
    fl_node *w2 = h_param(&h, 2, (int64_t[]){N, N}, -0.6f, 0.6f);
    fl_node *a = fl_graph_dense(&h.g, "a", h.x, w1, NULL, FL_ACT_TANH);
    fl_node *b = fl_graph_dense(&h.g, "b", h.x, w2, NULL, FL_ACT_LINEAR);
    fl_node *xs[3] = {a, b, h.x};
    fl_node *y = fl_graph_merge(&h.g, "merge", op, xs, 3, axis);
    CHECK(y != NULL);
    if (!y) { h_free(&h); return; }
    h_ready(&h, y, -1, 1);
    h_loss(&h, true);
    int64_t na = fl_node_size(a);
    double *ref = malloc((size_t)fl_node_size(y) * sizeof(double));
    if (op == FL_OP_CONCAT) {
        int ax = axis < 0 ? axis + 3 : axis;
        int64_t rows = ax == 1 ? B : B * 3, cin = na / rows, cout = cin * 3;
        for (int64_t r = 0; r < rows; r++)
            for (int k = 0; k < 3; k++)
                for (int64_t j = 0; j < cin; j++) ref[r * cout + k * cin + j] = xs[k]->val[r * cin + j];
    } else {
        for (int64_t i = 0; i < na; i++)
            ref[i] = op == FL_OP_ADD ? (double)a->val[i] + b->val[i] + h.x->val[i]
                                     : (double)a->val[i] * b->val[i] * h.x->val[i];
    }
    char what[48];
    snprintf(what, sizeof what, "merge op %d axis %d", op, axis);
    CHECK_MSG(max_abs_diff(y->val, ref, fl_node_size(y)) < 1e-6, "%s forward", what);
    free(ref);
    h_gradcheck(&h, what, 1e-3, 1e-2, true);
    /* shapes that do not fit are refused with the layer's name */
    fl_node *bad[2] = {a, fl_graph_dense(&h.g, "c", h.x, fl_graph_param(&h.g, "w", 2, (int64_t[]){N, 2}, true), NULL, 0)};
    if (op != FL_OP_CONCAT) { /* (3, 5) and (3, 2) concatenate on the last axis, but do not add */
        CHECK(fl_graph_merge(&h.g, "bad_merge", op, bad, 2, -1) == NULL);
        CHECK_STR_CONTAINS(fl_last_error(), "bad_merge");
    } else {
        CHECK(fl_graph_merge(&h.g, "bad_merge", op, bad, 2, 1) == NULL); /* but not on axis 1 */
        CHECK_STR_CONTAINS(fl_last_error(), "only on the concatenation axis");
    }
    h_free(&h);
}

/* One kernel used by two calls (a shared layer): its gradient is the sum of
 * both calls' contributions. */
static void test_shared_weights(bool conv) {
    harness h;
    const int64_t B = 3;
    if (conv) h_init(&h, B, 3, (int64_t[]){5, 5, 2});
    else h_init(&h, B, 1, (int64_t[]){4});
    fl_node *w = conv ? h_param(&h, 4, (int64_t[]){3, 3, 2, 2}, -0.5f, 0.5f) : h_param(&h, 2, (int64_t[]){4, 4}, -0.5f, 0.5f);
    int64_t nb = conv ? 2 : 4;
    fl_node *b = h_param(&h, 1, &nb, -0.5f, 0.5f);
    fl_node *a1, *a2;
    if (conv) {
        a1 = fl_graph_conv2d(&h.g, "c1", h.x, w, b, 1, 1, FL_SAME, FL_ACT_TANH);
        a2 = fl_graph_conv2d(&h.g, "c2", a1, w, b, 1, 1, FL_SAME, FL_ACT_LINEAR);
    } else {
        a1 = fl_graph_dense(&h.g, "d1", h.x, w, b, FL_ACT_TANH);
        a2 = fl_graph_dense(&h.g, "d2", a1, w, b, FL_ACT_LINEAR);
    }
    fl_node *xs[2] = {a1, a2};
    fl_node *y = fl_graph_merge(&h.g, "sum", FL_OP_ADD, xs, 2, 0);
    h_ready(&h, y, -1, 1);
    CHECK(w->nconsumers == 2);
    h_gradcheck(&h, conv ? "shared conv2d kernel" : "shared dense kernel", 1e-3, 1e-2, true);
    h_free(&h);
}

/* The same, each call followed by a max pooling: the CPU backend runs
 * each Conv2D with its pooling fused, and the shared kernel's gradient must
 * still be the sum of both calls'. */
static void test_shared_weights_pooled(void) {
    harness h;
    const int64_t B = 2;
    h_init(&h, B, 3, (int64_t[]){8, 8, 2});
    fl_node *w = h_param(&h, 4, (int64_t[]){3, 3, 2, 2}, -0.5f, 0.5f);
    int64_t nb = 2;
    fl_node *b = h_param(&h, 1, &nb, -0.5f, 0.5f);
    fl_node *c1 = fl_graph_conv2d(&h.g, "c1", h.x, w, b, 1, 1, FL_SAME, FL_ACT_RELU);
    fl_node *p1 = fl_graph_pool(&h.g, "p1", FL_OP_MAXPOOL, c1, 2, 2, 2, 2, FL_VALID);
    fl_node *c2 = fl_graph_conv2d(&h.g, "c2", p1, w, b, 1, 1, FL_SAME, FL_ACT_TANH);
    fl_node *p2 = fl_graph_pool(&h.g, "p2", FL_OP_MAXPOOL, c2, 2, 2, 2, 2, FL_VALID);
    h_ready(&h, p2, -1, 1);
    CHECK(w->nconsumers == 2 && c1->nconsumers == 1 && c2->nconsumers == 1);
    h_gradcheck(&h, "shared conv2d kernel, each call pooled", 1e-3, 1e-2, true);
    h_free(&h);
}

/* mnist_cnn's training path: Conv2D(ReLU) -> Conv2D(ReLU) -> MaxPooling2D,
 * whose backward the backend runs fused (conv2d_maxpool_bwd, with the first
 * convolution's ReLU mask folded into the data gradient), asserted by the
 * graph's counters. Checked two ways: against the same graph on a copy of
 * the CPU backend without the fused entries (the ops run apart; 1e-5), and
 * against finite differences. A parameter of the first convolution moves
 * many ReLU and max-pool decisions at once, so some elements have a kink
 * within the step: there the one-sided differences disagree, and the element
 * is skipped (counted; at most a quarter of them). */
static fl_node *fused_chain(harness *h, const fl_backend *be, int H, int W, int C, int F1, int F2, int pool,
                            const harness *like) {
    memset(h, 0, sizeof *h);
    fl_graph_init(&h->g, be);
    h->g.seed = 7;
    h->batch = 2;
    h->x = fl_graph_input(&h->g, "x", 3, (int64_t[]){H, W, C});
    h->x->force_grad = true;
    int64_t shapes[4][4] = {{3, 3, C, F1}, {F1}, {3, 3, F1, F2}, {F2}};
    for (int i = 0; i < 4; i++) {
        h->params[h->np++] = fl_graph_param(&h->g, "w", i % 2 ? 1 : 4, shapes[i], true);
        if (like) memcpy(h->params[i]->val, like->params[i]->val, (size_t)fl_node_size(h->params[i]) * sizeof(float));
        else fill(h->params[i]->val, fl_node_size(h->params[i]), i % 2 ? 0.05f : -0.5f, i % 2 ? 0.3f : 0.5f);
    }
    fl_node *c1 = fl_graph_conv2d(&h->g, "conv2d", h->x, h->params[0], h->params[1], 1, 1, FL_VALID, FL_ACT_RELU);
    fl_node *c2 = fl_graph_conv2d(&h->g, "conv2d_1", c1, h->params[2], h->params[3], 1, 1, FL_VALID, FL_ACT_RELU);
    fl_node *p = fl_graph_pool(&h->g, "max_pooling2d", FL_OP_MAXPOOL, c2, pool, pool, pool, pool, FL_VALID);
    h_ready(h, p, -1, 1);
    if (like) {
        memcpy(h->x->val, like->x->val, (size_t)fl_node_size(h->x) * sizeof(float));
        memcpy(h->R, like->R, (size_t)fl_node_size(p) * sizeof(float));
    }
    return p;
}

static void test_fused_conv_relu_conv_pool(int H, int W, int C, int F1, int F2, int pool) {
    static fl_backend apart;
    apart = *fl_backend_cpu();
    apart.conv2d_maxpool_fwd = NULL;
    apart.conv2d_maxpool_bwd = NULL;
    harness h, u;
    fused_chain(&h, fl_backend_cpu(), H, W, C, F1, F2, pool, NULL);
    fused_chain(&u, &apart, H, W, C, F1, F2, pool, &h);
    char what[96];
    snprintf(what, sizeof what, "conv(relu) -> conv(relu) -> maxpool %d, %dx%dx%d, %d and %d filters", pool, H, W, C,
             F1, F2);
    harness *hs[2] = {&h, &u};
    for (int k = 0; k < 2; k++) h_step(hs[k]);
    CHECK_MSG(h.g.fused_conv_pool_bwd == 1 && h.g.fused_relu_mask_bwd == 1,
              "%s: the fused backward ran %lld times (%lld with the ReLU mask), expected once with it", what,
              (long long)h.g.fused_conv_pool_bwd, (long long)h.g.fused_relu_mask_bwd);
    CHECK_MSG(u.g.fused_conv_pool_bwd == 0, "%s: the backend without the fused entries fused", what);
    fl_node *th[5] = {h.x, h.params[0], h.params[1], h.params[2], h.params[3]};
    fl_node *tu[5] = {u.x, u.params[0], u.params[1], u.params[2], u.params[3]};
    int skipped = 0, tried = 0;
    for (int t = 0; t < 5; t++) {
        fl_node *v = th[t];
        const int64_t n = fl_node_size(v);
        double worst = 0, scale = 1e-3;
        for (int64_t i = 0; i < n; i++) {
            worst = fmax(worst, fabs((double)v->grad[i] - tu[t]->grad[i]));
            scale = fmax(scale, fabs((double)tu[t]->grad[i]));
        }
        CHECK_MSG(worst <= 1e-5 * scale, "%s: %s: fused gradient differs from the ops run apart by %g (of %g)", what,
                  t ? "a parameter" : "x", worst, scale);
        float *ana = malloc((size_t)n * sizeof(float));
        memcpy(ana, v->grad, (size_t)n * sizeof(float));
        int64_t idx[GC_MAX];
        const int ns = gc_sample(v, idx);
        const double eps = 1e-3;
        int bad = 0;
        for (int si = 0; si < ns; si++) {
            const int64_t i = idx[si];
            const float keep = v->val[i];
            const double l0 = h_loss(&h, true);
            v->val[i] = keep + (float)eps;
            const double lp = h_loss(&h, true);
            v->val[i] = keep - (float)eps;
            const double lm = h_loss(&h, true);
            v->val[i] = keep;
            const double fwd = (lp - l0) / eps, bwd = (l0 - lm) / eps, num = (lp - lm) / (2 * eps);
            tried++;
            if (fabs(fwd - bwd) > 1e-2 + 1e-2 * fabs(num)) { skipped++; continue; } /* a kink within the step */
            if (fabs(num - ana[i]) > 2e-3 + 1e-2 * fabs(num) && bad++ < 3)
                fprintf(stderr, "  %s: d/d%s[%lld]: analytic %.6g, numeric %.6g\n", what, t ? "param" : "x",
                        (long long)i, ana[i], num);
        }
        CHECK_MSG(bad == 0, "%s: %d gradient mismatches in %s", what, bad, t ? "a parameter" : "x");
        free(ana);
    }
    printf("%s: fused; %d elements checked by differences, %d skipped (a kink within the step)\n", what,
           tried - skipped, skipped);
    CHECK_MSG(skipped * 4 <= tried, "%s: %d of %d elements skipped: the difference check tested too little", what,
              skipped, tried);
    h_free(&h);
    h_free(&u);
}

static void test_shape_errors(void) {
    fl_graph g;
    fl_graph_init(&g, fl_backend_cpu());
    fl_node *x = fl_graph_input(&g, "x", 3, (int64_t[]){5, 5, 3});
    fl_node *w = fl_graph_param(&g, "k", 4, (int64_t[]){3, 3, 4, 8}, true);
    CHECK(fl_graph_conv2d(&g, "conv_bad", x, w, NULL, 1, 1, FL_VALID, 0) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "conv_bad");
    CHECK_STR_CONTAINS(fl_last_error(), "3 channels");
    fl_node *w2 = fl_graph_param(&g, "k2", 4, (int64_t[]){7, 7, 3, 8}, true);
    CHECK(fl_graph_conv2d(&g, "conv_big", x, w2, NULL, 1, 1, FL_VALID, 0) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "does not fit");
    fl_node *w3 = fl_graph_param(&g, "k3", 2, (int64_t[]){4, 2}, true);
    CHECK(fl_graph_dense(&g, "dense_bad", x, w3, NULL, 0) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "dense_bad");
    CHECK(fl_graph_dropout(&g, "drop_bad", x, 1.0f, 1, NULL) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "rate");
    fl_graph_free(&g);
}

/* ZeroPadding2D (counts >= 0) and Cropping2D (counts < 0). */
static void test_pad2d(int top, int bottom, int left, int right) {
    harness h;
    const int64_t B = 2, H = 5, W = 4, C = 3;
    h_init(&h, B, 3, (int64_t[]){H, W, C});
    fl_node *y = fl_graph_pad2d(&h.g, "pad", h.x, top, bottom, left, right);
    CHECK(y != NULL);
    if (!y) { h_free(&h); return; }
    const int64_t OH = H + top + bottom, OW = W + left + right;
    CHECK(y->shape[1] == OH && y->shape[2] == OW && y->shape[3] == C);
    h_ready(&h, y, -1, 1);
    h_loss(&h, true);
    double *ref = malloc((size_t)(B * OH * OW * C) * sizeof(double));
    for (int64_t n = 0; n < B; n++)
        for (int64_t i = 0; i < OH; i++)
            for (int64_t j = 0; j < OW; j++)
                for (int64_t c = 0; c < C; c++) {
                    int64_t si = i - top, sj = j - left;
                    ref[((n * OH + i) * OW + j) * C + c] =
                        si >= 0 && si < H && sj >= 0 && sj < W ? h.x->val[((n * H + si) * W + sj) * C + c] : 0.0;
                }
    char what[64];
    snprintf(what, sizeof what, "pad2d ((%d, %d), (%d, %d))", top, bottom, left, right);
    CHECK_MSG(max_abs_diff(y->val, ref, B * OH * OW * C) == 0, "%s forward", what);
    free(ref);
    h_gradcheck(&h, what, 1e-3, 1e-3, true);
    h_free(&h);
}

/* ZeroPadding2D before a convolution that takes its padding (fuse.pad_conv), against the same graph with
 * the padding kept apart (the padding marked an output, which rules the fold out), params and data copied:
 *  0: pad ((0, 1), (0, 1)) -> DepthwiseConv2D 3x3 stride 2 (MobileNetV2's correct_pad);
 *  1: Conv2D 1x1 -> BN -> ReLU6 -> that padding -> depthwise -> BN -> ReLU (a stride-2 block: the normalisation
 *     is then formed by the depthwise as it reads, through the padding);
 *  2: pad 1 -> Conv2D 3x3 stride 1 with a ReLU (Winograd or the direct kernels);
 *  3: pad 3 -> Conv2D 7x7 stride 2 -> MaxPooling2D 2x2 (ResNet50's stem; the pooling fused into the convolution);
 *  4: ReLU -> pad ((0, 1), (0, 1)) -> Conv2D 3x3 stride 2, added to a 1x1 stride-2 Conv2D of the same ReLU (the
 *     gradient of the padding's input comes from two readers);
 *  5: pad ((1, 0), (2, 1)) -> Conv2D 3x3: one padded on both sides would give another size, not folded. */
static fl_node *pad_conv_chain(harness *h, int v, const harness *like, fl_node **pad, fl_node **bn) {
    const int64_t B = 4, C = v == 0 ? 6 : v == 1 || v == 3 ? 3 : 5;
    const int64_t H = v == 3 ? 16 : v == 2 || v == 5 ? 9 : 10, W = v == 3 ? 16 : v == 2 || v == 5 ? 7 : 10;
    h_init(h, B, 3, (int64_t[]){H, W, C});
    fl_node *y = h->x;
    *bn = NULL;
    fl_node *bn_param[4];
    for (int k = 0; v == 1 && k < 2; k++) { /* the normalisations' parameters, made up front */
        const int64_t c = 12;
        bn_param[2 * k] = h_param(h, 1, &c, 0.5f, 2.0f);
        bn_param[2 * k + 1] = h_param(h, 1, &c, -1.0f, 1.0f);
    }
    fl_node *mm[2], *mv[2];
    for (int k = 0; k < 2; k++) {
        const int64_t c = 12;
        mm[k] = fl_graph_param(&h->g, "moving_mean", 1, &c, false);
        mv[k] = fl_graph_param(&h->g, "moving_variance", 1, &c, false);
        for (int j = 0; j < c; j++) { mm[k]->val[j] = 0; mv[k]->val[j] = 1; }
    }
    if (v == 1) {
        fl_node *w = h_param(h, 4, (int64_t[]){1, 1, C, 12}, -0.5f, 0.5f);
        y = fl_graph_conv2d(&h->g, "expand", y, w, NULL, 1, 1, FL_SAME, FL_ACT_LINEAR);
        *bn = y = fl_graph_batchnorm(&h->g, "expand_bn", y, bn_param[0], bn_param[1], mm[0], mv[0], 1e-3f, 0.99f);
        y = fl_graph_pact(&h->g, "expand_relu", y, (fl_pact_desc){FL_PACT_RELU, 0.0f, 0.0f, 6.0f});
    }
    fl_node *relu = NULL;
    if (v == 4) relu = y = fl_graph_act(&h->g, "relu", y, FL_ACT_RELU);
    const int t = v == 2 ? 1 : v == 3 ? 3 : v == 5 ? 1 : 0, b = v == 2 ? 1 : v == 3 ? 3 : v == 5 ? 0 : 1;
    const int l = v == 2 ? 1 : v == 3 ? 3 : v == 5 ? 2 : 0, r = v == 2 || v == 5 ? 1 : v == 3 ? 3 : 1;
    *pad = y = fl_graph_pad2d(&h->g, "pad", y, t, b, l, r);
    const int64_t ci = y->shape[3], co = v == 2 ? 16 : v == 3 ? 8 : 7, nb = v <= 1 ? ci : co;
    const int k = v == 3 ? 7 : 3, s = v == 0 || v == 1 || v == 3 || v == 4 ? 2 : 1;
    fl_node *w = h_param(h, 4, (int64_t[]){k, k, ci, v <= 1 ? 1 : co}, -0.5f, 0.5f);
    fl_node *bias = v == 1 ? NULL : h_param(h, 1, &nb, -0.5f, 0.5f);
    if (v <= 1) y = fl_graph_depthwise_conv2d(&h->g, "dw", y, w, bias, s, s, FL_VALID, FL_ACT_LINEAR);
    else y = fl_graph_conv2d(&h->g, "conv", y, w, bias, s, s, FL_VALID, v == 2 || v == 3 ? FL_ACT_RELU : FL_ACT_LINEAR);
    if (v == 1) {
        y = fl_graph_batchnorm(&h->g, "dw_bn", y, bn_param[2], bn_param[3], mm[1], mv[1], 1e-3f, 0.99f);
        y = fl_graph_act(&h->g, "dw_relu", y, FL_ACT_RELU);
    }
    if (v == 3) y = fl_graph_pool(&h->g, "pool", FL_OP_MAXPOOL, y, 2, 2, 2, 2, FL_VALID);
    if (v == 4) {
        fl_node *w1 = h_param(h, 4, (int64_t[]){1, 1, C, co}, -0.5f, 0.5f);
        fl_node *side = fl_graph_conv2d(&h->g, "side", relu, w1, NULL, 2, 2, FL_SAME, FL_ACT_LINEAR);
        y = fl_graph_merge(&h->g, "add", FL_OP_ADD, (fl_node *[]){y, side}, 2, -1);
    }
    if (like) (*pad)->is_output = true; /* kept apart */
    h_ready_like(h, y, like);
    return y;
}

static void test_pad_into_conv(int v) {
    harness h, u;
    fl_node *hp, *up, *hb, *ub;
    pad_conv_chain(&h, v, NULL, &hp, &hb);
    pad_conv_chain(&u, v, &h, &up, &ub);
    char what[64];
    snprintf(what, sizeof what, "zero padding -> convolution, variant %d", v);
    const bool want = v != 5;
    CHECK_MSG((hp->fuse.pad_conv != NULL) == want && !up->fuse.pad_conv,
              "%s: folded %d, expected %d", what, hp->fuse.pad_conv != NULL, want);
    /* neither its value nor its gradient has a buffer (plan.c) */
    CHECK_MSG(want ? hp->val == NULL && hp->grad == NULL : hp->val != NULL, "%s: the padding's buffers %p, %p", what,
              (void *)hp->val, (void *)hp->grad);
    if (v == 1) { /* the expansion's normalisation is formed by the depthwise, through the padding */
        CHECK_MSG(hb->fuse.conv != NULL && !ub->fuse.conv,
                  "%s: the normalisation is not deferred through the padding", what);
    }
    for (int step = 0; step < 2; step++) { /* two steps: the second from the updated moving statistics */
        harness *hs[2] = {&h, &u};
        for (int k = 0; k < 2; k++) h_step(hs[k]);
        for (int tt = -4; tt < h.np; tt++) {
            if (tt < -2 && !hb) continue;
            const fl_node *a = tt == -4 ? hb->in[3] : tt == -3 ? hb->in[4] : tt == -2 ? h.out : tt == -1 ? h.x
                             : h.params[tt];
            const fl_node *b = tt == -4 ? ub->in[3] : tt == -3 ? ub->in[4] : tt == -2 ? u.out : tt == -1 ? u.x
                             : u.params[tt];
            const float *p = tt < -1 ? a->val : a->grad, *q = tt < -1 ? b->val : b->grad;
            double worst = 0, scale = 1e-30;
            for (int64_t i = 0; i < fl_node_size(a); i++) {
                worst = fmax(worst, fabs((double)p[i] - q[i]));
                scale = fmax(scale, fabs((double)q[i]));
            }
            const char *name = tt == -4 ? "moving mean" : tt == -3 ? "moving variance" : tt == -2 ? "output"
                             : tt == -1 ? "dx" : "a parameter's gradient";
            CHECK_MSG(worst <= 1e-5 * scale, "%s, step %d: %s (%d) differs from the padding apart by %g (of %g)",
                      what, step, name, tt, worst, scale);
        }
    }
    /* inference: predict's plan, without the padding's value too */
    CHECK(fl_graph_reserve_infer(&h.g, h.batch) == FL_OK && fl_graph_reserve_infer(&u.g, u.batch) == FL_OK);
    fl_graph_set_batch(&h.g, h.batch);
    fl_graph_set_batch(&u.g, u.batch);
    fill(h.x->val, fl_node_size(h.x), -2, 3); /* the input's buffer is predict's own */
    memcpy(u.x->val, h.x->val, (size_t)fl_node_size(h.x) * sizeof(float));
    h_loss(&h, false);
    h_loss(&u, false);
    double worst = 0, scale = 1e-30;
    for (int64_t i = 0; i < fl_node_size(h.out); i++) {
        worst = fmax(worst, fabs((double)h.out->val[i] - u.out->val[i]));
        scale = fmax(scale, fabs((double)u.out->val[i]));
    }
    CHECK_MSG(worst <= 1e-5 * scale, "%s: inference differs by %g (of %g)", what, worst, scale);
    CHECK_MSG(!want || hp->val == NULL, "%s: inference gave the padding a value", what);
    h_free(&h);
    h_free(&u);
}

/* Conv1D's form of Conv2D: a one-column image and a (k, in, out) kernel,
 * after a causal pad of k - 1 rows. */
static void test_conv1d_form(void) {
    harness h;
    const int64_t B = 3, T = 7, C = 2, K = 3, F = 4;
    h_init(&h, B, 3, (int64_t[]){T, 1, C});
    fl_node *w = h_param(&h, 3, (int64_t[]){K, C, F}, -0.5f, 0.5f);
    fl_node *b = h_param(&h, 1, &F, -0.5f, 0.5f);
    fl_node *p = fl_graph_pad2d(&h.g, "causal", h.x, (int)K - 1, 0, 0, 0);
    fl_node *y = fl_graph_conv2d(&h.g, "conv1d", p, w, b, 1, 1, FL_VALID, FL_ACT_TANH);
    CHECK(y && y->shape[1] == T && y->shape[2] == 1 && y->shape[3] == F);
    if (!y) { h_free(&h); return; }
    h_ready(&h, y, -1, 1);
    h_loss(&h, true);
    double ref[3 * 7 * 4];
    for (int64_t n = 0; n < B; n++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t f = 0; f < F; f++) {
                double s = b->val[f];
                for (int64_t k = 0; k < K; k++) {
                    int64_t st = t - (K - 1) + k; /* output t sees inputs t-K+1 .. t */
                    if (st < 0) continue;
                    for (int64_t c = 0; c < C; c++) s += (double)h.x->val[(n * T + st) * C + c] * w->val[(k * C + c) * F + f];
                }
                ref[(n * T + t) * F + f] = tanh(s);
            }
    CHECK_MSG(max_abs_diff(y->val, ref, B * T * F) < 1e-5, "conv1d causal forward");
    h_gradcheck(&h, "conv1d causal", 1e-3, 1e-2, true);
    h_free(&h);
}

/* Subtract (two inputs), Average, Maximum, Minimum (three). */
static void test_arith(fl_op op) {
    harness h;
    const int64_t B = 4, N = 5;
    h_init(&h, B, 1, &N);
    fl_node *w1 = h_param(&h, 2, (int64_t[]){N, N}, -0.6f, 0.6f);
    fl_node *w2 = h_param(&h, 2, (int64_t[]){N, N}, -0.6f, 0.6f);
    fl_node *a = fl_graph_dense(&h.g, "a", h.x, w1, NULL, FL_ACT_TANH);
    fl_node *b = fl_graph_dense(&h.g, "b", h.x, w2, NULL, FL_ACT_LINEAR);
    fl_node *xs[3] = {a, b, h.x};
    int nin = op == FL_OP_SUB ? 2 : 3;
    fl_node *y = fl_graph_merge(&h.g, "arith", op, xs, nin, 0);
    CHECK(y != NULL);
    if (!y) { h_free(&h); return; }
    h_ready(&h, y, -1, 1);
    h_loss(&h, true);
    double ref[4 * 5];
    for (int64_t i = 0; i < B * N; i++) {
        double u = a->val[i], v = b->val[i], w = h.x->val[i];
        ref[i] = op == FL_OP_SUB ? u - v : op == FL_OP_AVG ? (u + v + w) / 3
               : op == FL_OP_MAX ? fmax(fmax(u, v), w) : fmin(fmin(u, v), w);
    }
    char what[32];
    snprintf(what, sizeof what, "merge op %d", op);
    CHECK_MSG(max_abs_diff(y->val, ref, B * N) < 1e-6, "%s forward", what);
    h_gradcheck(&h, what, 1e-3, 1e-2, true);
    h_free(&h);
    /* JAX's rule at a tie: half the gradient to each side */
    CHECK(fl_minmax_grad(1, 2.0f, 2.0f, 1.0f) == 0.5f && fl_minmax_grad(1, 3.0f, 2.0f, 1.0f) == 1.0f &&
          fl_minmax_grad(0, 3.0f, 2.0f, 1.0f) == 0.0f);
}

/* ------------------------------------------------- depthwise conv */

/* y[n, p, q, c*dm+m] = act(b + sum_{i,j} x[n, p*sh-pt+i, q*sw-pl+j, c] * w[i, j, c, m]) */
static void depthwise_ref(const float *x, const float *w, const float *b, int64_t B, const fl_conv_desc *d, int act,
                          double *y) {
    const int dm = d->oc / d->c;
    for (int64_t n = 0; n < B; n++)
        for (int p = 0; p < d->oh; p++)
            for (int q = 0; q < d->ow; q++)
                for (int c = 0; c < d->c; c++)
                    for (int m = 0; m < dm; m++) {
                        double s = b ? b[c * dm + m] : 0.0;
                        for (int i = 0; i < d->kh; i++)
                            for (int j = 0; j < d->kw; j++) {
                                int ih = p * d->sh - d->pt + i, iw = q * d->sw - d->pl + j;
                                if (ih < 0 || ih >= d->h || iw < 0 || iw >= d->w) continue;
                                s += (double)x[((n * d->h + ih) * d->w + iw) * d->c + c] *
                                     w[((i * d->kw + j) * d->c + c) * dm + m];
                            }
                        y[((n * d->oh + p) * d->ow + q) * d->oc + c * dm + m] = act_ref(act, s);
                    }
}

static void test_depthwise(int64_t B, int H, int W, int C, int DM, int KH, int KW, int SH, int SW, fl_padding pad,
                           int act, bool bias, int eoh, int eow) {
    harness h;
    h_init(&h, B, 3, (int64_t[]){H, W, C});
    fl_node *w = h_param(&h, 4, (int64_t[]){KH, KW, C, DM}, -0.5f, 0.5f);
    int64_t oc = (int64_t)C * DM;
    fl_node *b = bias ? h_param(&h, 1, &oc, -0.3f, 0.3f) : NULL;
    fl_node *y = fl_graph_depthwise_conv2d(&h.g, "dw", h.x, w, b, SH, SW, pad, act);
    CHECK(y != NULL);
    if (!y) { h_free(&h); return; }
    char what[128];
    snprintf(what, sizeof what, "depthwise %dx%dx%d dm%d k%dx%d s%dx%d pad=%d act=%d bias=%d B=%lld", H, W, C, DM, KH,
             KW, SH, SW, pad, act, bias, (long long)B);
    CHECK_MSG(y->shape[1] == eoh && y->shape[2] == eow && y->shape[3] == oc, "%s: output %lldx%lldx%lld", what,
              (long long)y->shape[1], (long long)y->shape[2], (long long)y->shape[3]);
    h_ready(&h, y, -1, 1);
    h_loss(&h, true);
    int64_t n = fl_node_size(y);
    double *ref = malloc((size_t)n * sizeof(double));
    depthwise_ref(h.x->val, w->val, b ? b->val : NULL, B, &y->conv, act, ref);
    CHECK_MSG(max_abs_diff(y->val, ref, n) < 1e-5, "%s forward", what);
    free(ref);
    h_gradcheck(&h, what, 1e-3, 1e-2, true);
    h_free(&h);
}

/* ------------------------------------------------------ UpSampling2D */

/* One axis of the reference bilinear resize, written as jax.image.resize
 * does it: a triangle kernel at the half-pixel source coordinate over the
 * inputs that exist, normalized by its total weight there. */
static double resize_weight(int o, int i, int s, int n) {
    double src = (o + 0.5) / s - 0.5, tot = 0;
    for (int k = 0; k < n; k++) tot += fmax(0.0, 1.0 - fabs(src - k));
    return fmax(0.0, 1.0 - fabs(src - i)) / tot;
}

static void test_upsample2d(int H, int W, int C, int SH, int SW, bool bilinear) {
    harness h;
    const int64_t B = 2;
    h_init(&h, B, 3, (int64_t[]){H, W, C});
    fl_node *y = fl_graph_upsample2d(&h.g, "up", h.x, SH, SW, bilinear);
    CHECK(y && y->shape[1] == H * SH && y->shape[2] == W * SW && y->shape[3] == C);
    if (!y) { h_free(&h); return; }
    h_ready(&h, y, -1, 1);
    h_loss(&h, true);
    const int OH = H * SH, OW = W * SW;
    double *ref = calloc((size_t)(B * OH * OW * C), sizeof(double));
    for (int64_t n = 0; n < B; n++)
        for (int i = 0; i < OH; i++)
            for (int j = 0; j < OW; j++)
                for (int c = 0; c < C; c++) {
                    double v = 0;
                    for (int a = 0; a < H; a++)
                        for (int b = 0; b < W; b++) {
                            double wt = bilinear ? resize_weight(i, a, SH, H) * resize_weight(j, b, SW, W)
                                                 : (a == i / SH && b == j / SW);
                            v += wt * h.x->val[((n * H + a) * W + b) * C + c];
                        }
                    ref[((n * OH + i) * OW + j) * C + c] = v;
                }
    char what[80];
    snprintf(what, sizeof what, "upsample2d %dx%dx%d size (%d, %d) %s", H, W, C, SH, SW,
             bilinear ? "bilinear" : "nearest");
    CHECK_MSG(max_abs_diff(y->val, ref, B * OH * OW * C) < 1e-5, "%s forward", what);
    free(ref);
    h_gradcheck(&h, what, 1e-3, 1e-3, true);
    h_free(&h);
}

/* --------------------------------------------------- Conv2DTranspose */

/* Where Keras (JAX backend) puts the padding of a transposed convolution:
 * keras/src/backend/common/backend_utils.py, for output_padding None; the
 * output o of input i and kernel tap t is i*s + t - (k - 1 - left_pad). */
static int keras_deconv_left_pad(int k, int s, fl_padding pad) {
    if (pad == FL_VALID) return k - 1;
    int len = s + k - 2, left = len / 2 + len % 2;
    return left < k - 1 ? left : k - 1;
}

static void test_conv_transpose(int64_t B, int H, int W, int C, int F, int KH, int KW, int SH, int SW, fl_padding pad,
                                int act, bool bias, int eoh, int eow) {
    harness h;
    h_init(&h, B, 3, (int64_t[]){H, W, C});
    fl_node *w = h_param(&h, 4, (int64_t[]){KH, KW, F, C}, -0.4f, 0.4f);
    int64_t f = F;
    fl_node *b = bias ? h_param(&h, 1, &f, -0.3f, 0.3f) : NULL;
    fl_node *y = fl_graph_conv2d_transpose(&h.g, "deconv", h.x, w, b, SH, SW, pad, act);
    CHECK(y != NULL);
    if (!y) { h_free(&h); return; }
    char what[112];
    snprintf(what, sizeof what, "conv2d_transpose B%lld %dx%dx%d->%d k%dx%d s%dx%d pad=%d act=%d bias=%d",
             (long long)B, H, W, C, F, KH, KW, SH, SW, pad, act, bias);
    CHECK_MSG(y->shape[1] == eoh && y->shape[2] == eow && y->shape[3] == F, "%s: output %lldx%lld, expected %dx%d",
              what, (long long)y->shape[1], (long long)y->shape[2], eoh, eow);
    h_ready(&h, y, -1, 1);
    h_loss(&h, true);
    const int OH = (int)y->shape[1], OW = (int)y->shape[2];
    const int ph = KH - 1 - keras_deconv_left_pad(KH, SH, pad), pw = KW - 1 - keras_deconv_left_pad(KW, SW, pad);
    int64_t n = fl_node_size(y);
    double *ref = calloc((size_t)n, sizeof(double));
    for (int64_t s = 0; s < B; s++)
        for (int i = 0; i < H; i++)
            for (int j = 0; j < W; j++)
                for (int th = 0; th < KH; th++)
                    for (int tw = 0; tw < KW; tw++) {
                        int o = i * SH + th - ph, q = j * SW + tw - pw;
                        if (o < 0 || o >= OH || q < 0 || q >= OW) continue;
                        for (int fo = 0; fo < F; fo++) {
                            double acc = 0;
                            for (int c = 0; c < C; c++)
                                acc += (double)h.x->val[((s * H + i) * W + j) * C + c] *
                                       w->val[((th * KW + tw) * F + fo) * C + c];
                            ref[((s * OH + o) * OW + q) * F + fo] += acc;
                        }
                    }
    for (int64_t i = 0; i < n; i++) ref[i] = act_ref(act, ref[i] + (b ? b->val[i % F] : 0.0));
    CHECK_MSG(max_abs_diff(y->val, ref, n) < 1e-4, "%s forward", what);
    free(ref);
    h_gradcheck(&h, what, 1e-3, 1e-2, true);
    h_free(&h);
}

/* SeparableConv2D's two nodes (depthwise, then a 1x1 convolution), and a
 * depthwise node shared by two inputs (its weight gradients add up). */
static void test_depthwise_chain(void) {
    harness h;
    h_init(&h, 2, 3, (int64_t[]){6, 5, 3});
    fl_node *dk = h_param(&h, 4, (int64_t[]){3, 2, 3, 2}, -0.5f, 0.5f);
    fl_node *pk = h_param(&h, 4, (int64_t[]){1, 1, 6, 4}, -0.5f, 0.5f);
    int64_t f = 4;
    fl_node *b = h_param(&h, 1, &f, -0.3f, 0.3f);
    fl_node *d = fl_graph_depthwise_conv2d(&h.g, "sep", h.x, dk, NULL, 2, 1, FL_SAME, FL_ACT_LINEAR);
    fl_node *y = d ? fl_graph_conv2d(&h.g, "sep", d, pk, b, 1, 1, FL_VALID, FL_ACT_TANH) : NULL;
    CHECK(y != NULL && y->shape[1] == 3 && y->shape[2] == 5 && y->shape[3] == 4);
    if (!y) { h_free(&h); return; }
    h_ready(&h, y, -1, 1);
    h_gradcheck(&h, "separable (depthwise + pointwise)", 1e-3, 1e-2, true);
    h_free(&h);

    /* shared: the same kernel and bias on x and on tanh(x), added */
    h_init(&h, 2, 3, (int64_t[]){5, 5, 4});
    fl_node *k = h_param(&h, 4, (int64_t[]){3, 3, 4, 1}, -0.5f, 0.5f);
    int64_t c = 4;
    fl_node *bb = h_param(&h, 1, &c, -0.3f, 0.3f);
    fl_node *t = fl_graph_act(&h.g, "t", h.x, FL_ACT_TANH);
    fl_node *a1 = fl_graph_depthwise_conv2d(&h.g, "dw", h.x, k, bb, 1, 1, FL_SAME, FL_ACT_SIGMOID);
    fl_node *a2 = fl_graph_depthwise_conv2d(&h.g, "dw", t, k, bb, 1, 1, FL_SAME, FL_ACT_SIGMOID);
    fl_node *s = fl_graph_merge(&h.g, "add", FL_OP_ADD, (fl_node *[]){a1, a2}, 2, 0);
    CHECK(s != NULL);
    if (!s) { h_free(&h); return; }
    h_ready(&h, s, -1, 1);
    h_gradcheck(&h, "depthwise shared", 1e-3, 1e-2, true);
    h_free(&h);

    /* shape errors name the layer and the dimension */
    fl_graph g;
    fl_graph_init(&g, fl_backend_cpu());
    fl_node *x = fl_graph_input(&g, "in", 3, (int64_t[]){4, 4, 3});
    fl_node *w5 = fl_graph_param(&g, "w", 4, (int64_t[]){3, 3, 5, 1}, true);
    CHECK(fl_graph_depthwise_conv2d(&g, "my_dw", x, w5, NULL, 1, 1, FL_VALID, FL_ACT_LINEAR) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "'my_dw'");
    CHECK_STR_CONTAINS(fl_last_error(), "3 channels");
    fl_node *w7 = fl_graph_param(&g, "w", 4, (int64_t[]){5, 5, 3, 1}, true);
    CHECK(fl_graph_depthwise_conv2d(&g, "my_dw", x, w7, NULL, 1, 1, FL_VALID, FL_ACT_LINEAR) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "does not fit");
    fl_graph_free(&g);
}

/* Multiply/Add with broadcasting, as EfficientNet's squeeze-and-excitation:
 * x (3, 4, 5) with its per-channel mean as (1, 1, 5), and (3, 1, 5); with
 * spatial, a map over the pixels as (3, 4, 1) (a spatial attention's,
 * from a 1x1 convolution to one channel), broadcast over the channels. */
static void test_bmerge_as(fl_op op, bool swap, bool rows, bool spatial) {
    harness h;
    const int64_t B = 3, H = 3, W = 4, C = 5;
    h_init(&h, B, 3, (int64_t[]){H, W, C});
    fl_node *b;
    if (spatial) {
        fl_node *w = h_param(&h, 4, (int64_t[]){1, 1, C, 1}, -0.5f, 0.5f);
        b = fl_graph_conv2d(&h.g, "map", h.x, w, NULL, 1, 1, FL_VALID, FL_ACT_LINEAR);
    } else if (rows) { /* (H, 1, C): the mean over the columns, via a pool */
        b = fl_graph_pool(&h.g, "pool", FL_OP_AVGPOOL, h.x, 1, (int)W, 1, (int)W, FL_VALID);
    } else {
        b = fl_graph_gap(&h.g, "gap", h.x);
        b = fl_graph_reshape(&h.g, "r", b, 3, (int64_t[]){1, 1, C});
    }
    fl_node *t = fl_graph_act(&h.g, "t", b, FL_ACT_TANH);
    fl_node *xs[2] = {swap ? t : h.x, swap ? h.x : t};
    fl_node *y = fl_graph_merge(&h.g, "se", op, xs, 2, 0);
    CHECK(y != NULL && y->op == FL_OP_BMERGE);
    if (!y) { h_free(&h); return; }
    h_ready(&h, y, -1, 1);
    h_loss(&h, true);
    double *ref = malloc((size_t)(B * H * W * C) * sizeof(double));
    for (int64_t n = 0; n < B; n++)
        for (int64_t i = 0; i < H; i++)
            for (int64_t j = 0; j < W; j++)
                for (int64_t c = 0; c < C; c++) {
                    double xv = h.x->val[((n * H + i) * W + j) * C + c];
                    double bv = t->val[spatial ? (n * H + i) * W + j : rows ? (n * H + i) * C + c : n * C + c];
                    ref[((n * H + i) * W + j) * C + c] = op == FL_OP_MUL ? xv * bv : xv + bv;
                }
    char what[48];
    snprintf(what, sizeof what, "broadcast merge op %d swap %d rows %d spatial %d", op, swap, rows, spatial);
    CHECK_MSG(max_abs_diff(y->val, ref, B * H * W * C) < 1e-6, "%s forward", what);
    free(ref);
    h_gradcheck(&h, what, 1e-3, 1e-2, true);
    /* shapes that do not broadcast are refused */
    fl_node *bad[2] = {h.x, fl_graph_reshape(&h.g, "r2", fl_graph_gap(&h.g, "g2", h.x), 3, (int64_t[]){1, C, 1})};
    CHECK(fl_graph_merge(&h.g, "bad_se", op, bad, 2, 0) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "bad_se");
    h_free(&h);
}
static void test_bmerge(fl_op op, bool swap, bool rows) { test_bmerge_as(op, swap, rows, false); }


/* ------------------------------------------------------------ Permute */

static void test_permute(int nd, const int64_t *shape, const int *dims) {
    harness h;
    const int64_t B = 3;
    h_init(&h, B, nd, shape);
    fl_node *y = fl_graph_permute(&h.g, "perm", h.x, dims);
    CHECK(y != NULL);
    if (!y) { h_free(&h); return; }
    for (int i = 0; i < nd; i++) CHECK(y->shape[i + 1] == shape[dims[i]]);
    h_ready(&h, y, -1, 1);
    h_loss(&h, true);
    /* walk x in order; its element (b, i...) lands at (b, i[dims[0]], ...) */
    int64_t per = fl_node_sample_size(h.x), idx[FL_MAX_DIMS];
    int bad = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t e = 0; e < per; e++) {
            int64_t rem = e;
            for (int a = nd - 1; a >= 0; a--) { idx[a] = rem % shape[a]; rem /= shape[a]; }
            int64_t o = 0;
            for (int a = 0; a < nd; a++) o = o * shape[dims[a]] + idx[dims[a]];
            bad += y->val[b * per + o] != h.x->val[b * per + e];
        }
    char what[64];
    snprintf(what, sizeof what, "permute %d axes, dims[0] = %d", nd, dims[0]);
    CHECK_MSG(bad == 0, "%s forward: %d elements misplaced", what, bad);
    h_gradcheck(&h, what, 1e-3, 1e-3, true);
    h_free(&h);
}

/* Permute's backward adds into a gradient another consumer already wrote. */
static void test_permute_shared_input(void) {
    harness h;
    h_init(&h, 2, 2, (int64_t[]){3, 4});
    fl_node *a = fl_graph_permute(&h.g, "pa", h.x, (int[]){1, 0});
    fl_node *b = fl_graph_permute(&h.g, "pb", h.x, (int[]){1, 0});
    fl_node *xs[2] = {a, b};
    fl_node *y = fl_graph_merge(&h.g, "sum", FL_OP_ADD, xs, 2, 0);
    h_ready(&h, y, -1, 1);
    h_gradcheck(&h, "permute twice, summed", 1e-3, 1e-3, true);
    h_free(&h);
}

static void test_new_layout_shape_errors(void) {
    fl_graph g;
    fl_graph_init(&g, fl_backend_cpu());
    fl_node *x = fl_graph_input(&g, "x", 3, (int64_t[]){5, 5, 3});
    fl_node *w = fl_graph_param(&g, "k", 4, (int64_t[]){3, 3, 8, 4}, true);
    CHECK(fl_graph_conv2d_transpose(&g, "deconv_bad", x, w, NULL, 2, 2, FL_SAME, 0) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "deconv_bad");
    CHECK_STR_CONTAINS(fl_last_error(), "3 channels");
    CHECK(fl_graph_permute(&g, "perm_bad", x, (int[]){0, 0, 1}) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "perm_bad");
    CHECK(fl_graph_upsample2d(&g, "up_bad", x, 0, 2, false) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "up_bad");
    fl_graph_free(&g);
}

/* Dropout with a noise shape: EfficientNet's (1, 1, 1) drops whole
 * samples, SpatialDropout2D's (1, 1, c) whole channels. */
static void test_dropout_noise(const int64_t *noise, const char *what) {
    harness h;
    const int64_t B = 40, H = 3, W = 4, C = 5;
    h_init(&h, B, 3, (int64_t[]){H, W, C});
    fl_node *y = fl_graph_dropout(&h.g, "dropout", h.x, 0.4f, 5, noise);
    CHECK(y != NULL);
    if (!y) { h_free(&h); return; }
    h_ready(&h, y, 0.5f, 1.5f);
    h_loss(&h, true);
    int64_t groups = 0, dropped = 0;
    int ok = 1;
    for (int64_t n = 0; n < B; n++)
        for (int64_t c = 0; c < (noise[2] == 1 ? 1 : C); c++) {
            /* one decision for every element that shares this noise entry */
            int64_t i0 = (n * H * W) * C + c;
            bool keep = y->val[i0] != 0;
            for (int64_t p = 0; p < H * W; p++)
                for (int64_t cc = (noise[2] == 1 ? 0 : c); cc < (noise[2] == 1 ? C : c + 1); cc++) {
                    int64_t i = (n * H * W + p) * C + cc;
                    float want = keep ? h.x->val[i] / 0.6f : 0.0f;
                    if (fabsf(y->val[i] - want) > 1e-5f) ok = 0;
                }
            groups++;
            dropped += !keep;
        }
    CHECK_MSG(ok, "%s: one keep/drop decision per noise entry, kept values scaled", what);
    CHECK_MSG(dropped > 0 && dropped < groups, "%s: %lld of %lld dropped", what, (long long)dropped, (long long)groups);
    h_gradcheck(&h, what, 1e-3, 1e-2, true);
    h_loss(&h, false); /* inference: identity */
    CHECK(memcmp(h.x->val, y->val, (size_t)fl_node_size(y) * sizeof(float)) == 0);
    h_free(&h);
}

/* The capability query: a backend without a kernel that an op needs is
 * refused with the layer, op and kernel named; every op has a table row. */
static void test_capability(void) {
    fl_graph g;
    fl_graph_init(&g, fl_backend_cpu());
    int64_t s[3] = {5, 5, 2};
    fl_node *x = fl_graph_input(&g, "in", 3, s);
    fl_node *w = fl_graph_param(&g, "w", 4, (int64_t[]){3, 3, 2, 4}, true);
    fl_node *c = fl_graph_conv2d(&g, "my_conv", x, w, NULL, 1, 1, FL_SAME, FL_ACT_RELU);
    fl_graph_act(&g, "act", c, FL_ACT_TANH);
    char why[256] = "";
    CHECK(fl_graph_runs_on(&g, fl_backend_cpu(), why, sizeof why));
    fl_backend lacking = *fl_backend_cpu();
    lacking.name = "test";
    lacking.conv2d_bwd = NULL;
    CHECK(!fl_graph_runs_on(&g, &lacking, why, sizeof why));
    CHECK_STR_CONTAINS(why, "'my_conv'");
    CHECK_STR_CONTAINS(why, "conv2d_bwd");
    CHECK_STR_CONTAINS(why, "test backend");
    for (int op = 0; op < FL_OP_COUNT; op++) {
        CHECK(strcmp(fl_op_name((fl_op)op), "?") != 0);
        CHECK(fl_op_missing_kernel(fl_backend_cpu(), (fl_op)op) == NULL);
    }
    fl_graph_free(&g);
}

/* Every fusion has its row (a name, its backend entries: the CPU has them all), and the records follow the
 * graph: written by the pass, stale after finalize and a migration, refused stale by the planner, and a
 * backend without a fusion's entries gets no such record. */
static void test_fusion_table(void) {
    CHECK(fl_fusion_count() > 0);
    for (int i = 0; i < fl_fusion_count(); i++) {
        CHECK_MSG(fl_fusion_name(i) != NULL, "fusion %d has no row in fuse.c's table", i);
        const char *miss = fl_fusion_missing(fl_backend_cpu(), i);
        CHECK_MSG(miss == NULL, "fusion %s: the CPU backend lacks %s", fl_fusion_name(i), miss ? miss : "");
    }
    CHECK(fl_fusion_name(fl_fusion_count()) == NULL);
    fl_graph g;
    fl_graph_init(&g, fl_backend_cpu());
    int64_t s[3] = {8, 8, 2};
    fl_node *x = fl_graph_input(&g, "in", 3, s);
    fl_node *w = fl_graph_param(&g, "w", 4, (int64_t[]){3, 3, 2, 4}, true);
    fl_node *c = fl_graph_conv2d(&g, "conv", x, w, NULL, 1, 1, FL_SAME, FL_ACT_RELU);
    fl_node *p = fl_graph_pool(&g, "pool", FL_OP_MAXPOOL, c, 2, 2, 2, 2, FL_VALID);
    fl_graph_finalize(&g);
    CHECK(!g.fused);
    fl_plan plan;
    CHECK(fl_plan_make(&g, NULL, 2, false, 64, true, &plan) == FL_ERR_STATE); /* stale: refused */
    CHECK_STR_CONTAINS(fl_last_error(), "fusion records");
    fl_clear_error();
    CHECK(fl_graph_reserve(&g, 2) == FL_OK); /* the reservation makes them current */
    CHECK(g.fused && c->fuse.pool == p && c->fuse.desc.kh == 3 && !p->fuse.pool);
    CHECK(strcmp(c->op_name, "conv2d") == 0);
    fl_backend apart = *fl_backend_cpu();
    apart.conv2d_maxpool_bwd = NULL; /* the fusion's row needs both entries */
    g.be = &apart;
    fl_graph_refinalize(&g);
    CHECK(!g.fused);
    CHECK(fl_graph_reserve(&g, 2) == FL_OK);
    CHECK(g.fused && c->fuse.pool == NULL);
    g.be = fl_backend_cpu();
    fl_graph_free(&g);
}

/* ------------------------------------------ parametrized activation layers */

/* Moves x values within `margin` of a kink k away from it (finite
 * differences across a kink are meaningless). */
static void away_from(float *x, int64_t n, float k, float margin) {
    for (int64_t i = 0; i < n; i++)
        if (fabsf(x[i] - k) < margin) x[i] = x[i] < k ? k - margin : k + margin;
}

static double pact_ref(const fl_pact_desc *p, double x) {
    switch (p->code) {
    case FL_PACT_RELU: return x > p->b ? fmin(x, (double)p->c) : x < p->b ? (double)p->a * (x - p->b) : 0.0;
    case FL_PACT_ELU: return x > 0 ? x : (double)p->a * expm1(x);
    case FL_PACT_AFFINE: return x * p->a + p->b;
    default: return x;
    }
}

/* ReLU (max_value, negative_slope, threshold), LeakyReLU, ELU, Rescaling. */
static void test_pact(fl_pact_desc p, const char *what) {
    harness h;
    const int64_t B = 3, H = 4, C = 5;
    h_init(&h, B, 2, (int64_t[]){H, C});
    fl_node *y = fl_graph_pact(&h.g, "pact", h.x, p);
    h_ready(&h, y, -4, 8);
    int64_t n = fl_node_size(y);
    if (p.code == FL_PACT_RELU) {
        away_from(h.x->val, n, p.b, 0.05f);
        if (isfinite(p.c)) away_from(h.x->val, n, p.c, 0.05f);
    }
    if (p.code == FL_PACT_ELU) away_from(h.x->val, n, 0, 0.05f);
    h_loss(&h, true);
    double *ref = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) ref[i] = pact_ref(&p, h.x->val[i]);
    CHECK_MSG(max_abs_diff(y->val, ref, n) < 1e-5, "%s forward", what);
    free(ref);
    h_gradcheck(&h, what, 1e-3, 1e-2, true);
    h_free(&h);
}

/* The backend's branch-free ReLU loops (no slope, threshold 0) against the generic formula, element by
 * element, on a size that runs threaded, in both gradient modes (write, accumulate), at the kinks, beyond
 * max_value and on NaN. */
static void test_pact_fast_relu(void) {
    const fl_backend *be = fl_backend_cpu();
    const int64_t n = 40000;
    float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
    float *dy = malloc((size_t)n * sizeof(float)), *dx = malloc((size_t)n * sizeof(float));
    const float cases[] = {-2.0f, -0.0f, 0.0f, 1e-30f, 0.5f, 6.0f, 6.5f, NAN};
    for (int k = 0; k < 2; k++) {
        fl_pact_desc p = {FL_PACT_RELU, 0, 0, k ? 6.0f : INFINITY};
        for (int64_t i = 0; i < n; i++) {
            x[i] = i < 8 ? cases[i] : (float)((i * 7919) % 2001 - 1000) / 100.0f;
            dy[i] = (float)(i % 13) - 6.0f;
            dx[i] = 1.0f;
        }
        be->pact_fwd(&p, n, x, y);
        int bad = 0;
        for (int64_t i = 0; i < n; i++) {
            float want = fl_pact_forward(&p, x[i]);
            if (!(y[i] == want)) bad++;
        }
        CHECK_MSG(bad == 0, "ReLU fast forward (max_value %g): %d of %lld differ", p.c, bad, (long long)n);
        /* the activation op's ReLU and ReLU6 (Activation("relu"), an unfused activation) */
        int act = k ? FL_ACT_RELU6 : FL_ACT_RELU;
        be->act_fwd(act, n / 8, 8, x, y);
        bad = 0;
        for (int64_t i = 0; i < n; i++)
            if (!(y[i] == fl_act_forward(act, x[i]))) bad++;
        CHECK_MSG(bad == 0, "activation %d fast forward: %d differ", act, bad);
        for (int beta = 0; beta < 2; beta++) {
            be->act_bwd(act, n / 8, 8, x, y, dy, dx, (float)beta);
            bad = 0;
            for (int64_t i = 0; i < n; i++) {
                float want = (beta ? 1.0f : 0.0f) + dy[i] * fl_act_grad_x(act, x[i], y[i]);
                if (!(dx[i] == want)) bad++;
                dx[i] = 1.0f;
            }
            CHECK_MSG(bad == 0, "activation %d fast backward (beta %d): %d differ", act, beta, bad);
        }
        be->pact_fwd(&p, n, x, y);
        for (int beta = 0; beta < 2; beta++) {
            be->pact_bwd(&p, n, x, y, dy, dx, (float)beta);
            bad = 0;
            for (int64_t i = 0; i < n; i++) {
                float want = (beta ? 1.0f : 0.0f) + dy[i] * fl_pact_grad(&p, x[i], y[i]);
                if (!(dx[i] == want)) bad++;
                dx[i] = 1.0f;
            }
            CHECK_MSG(bad == 0, "ReLU fast backward (max_value %g, beta %d): %d differ", p.c, beta, bad);
        }
    }
    free(x); free(y); free(dy); free(dx);
}

/* BatchNormalization's statistics sum fixed blocks of rows in parallel: the same bits on 1, 2 and 3 threads,
 * and the mean and variance of a double-precision reference. */
static void test_bn_threads(void) {
    const fl_backend *be = fl_backend_cpu();
    const int64_t m = 3000;
    const int c = 24;
    const size_t n = (size_t)m * c;
    float *x = malloc(n * sizeof(float)), *dy = malloc(n * sizeof(float)), *out[3][2];
    float gamma[24], beta[24], stats[3][4][24];
    for (size_t i = 0; i < n; i++) {
        x[i] = 3.0f + (float)((i * 7919) % 1001) / 97.0f;
        dy[i] = (float)((i * 104729) % 997) / 500.0f - 1.0f;
    }
    for (int j = 0; j < c; j++) { gamma[j] = 0.5f + 0.1f * j; beta[j] = 0.01f * j; }
    fl_bn_desc d = {m, c, 1e-3f, 0.99f, 0.0f};
    for (int t = 0; t < 3; t++) {
        fl_set_num_threads(t + 1);
        out[t][0] = malloc(n * sizeof(float));
        out[t][1] = malloc(n * sizeof(float));
        for (int j = 0; j < c; j++) { stats[t][2][j] = 0; stats[t][3][j] = 1; }
        be->bn_fwd_train(&d, x, gamma, beta, out[t][0], stats[t][0], stats[t][1], stats[t][2], stats[t][3]);
        float dg[24], db[24];
        be->bn_bwd(&d, x, gamma, stats[t][0], stats[t][1], dy, out[t][1], 0.0f, dg, db);
        memcpy(stats[t][2], dg, sizeof dg);
        memcpy(stats[t][3], db, sizeof db);
    }
    fl_set_num_threads(0);
    for (int t = 1; t < 3; t++) {
        CHECK_MSG(memcmp(out[0][0], out[t][0], n * sizeof(float)) == 0, "BN forward on %d threads differs", t + 1);
        CHECK_MSG(memcmp(out[0][1], out[t][1], n * sizeof(float)) == 0, "BN backward on %d threads differs", t + 1);
        CHECK_MSG(memcmp(stats[0], stats[t], sizeof stats[0]) == 0, "BN statistics on %d threads differ", t + 1);
    }
    double worst = 0;
    for (int j = 0; j < c; j++) {
        double s = 0, v = 0;
        for (int64_t r = 0; r < m; r++) s += x[r * c + j];
        s /= (double)m;
        for (int64_t r = 0; r < m; r++) v += (x[r * c + j] - s) * (x[r * c + j] - s);
        v /= (double)m;
        double e1 = fabs(stats[0][0][j] - s) / fabs(s), e2 = fabs(1.0 / ((double)stats[0][1][j] * stats[0][1][j]) - 1e-3 - v) / v;
        worst = fmax(worst, fmax(e1, e2));
    }
    CHECK_MSG(worst < 1e-5, "BN mean/variance against double: relative %.2e", worst);
    /* dx against the formula in double */
    double dworst = 0, dmax = 0;
    for (int j = 0; j < c; j++) {
        double mu = stats[0][0][j], iv = stats[0][1][j], sdy = 0, sdyx = 0;
        for (int64_t r = 0; r < m; r++) {
            sdy += dy[r * c + j];
            sdyx += dy[r * c + j] * (x[r * c + j] - mu) * iv;
        }
        for (int64_t r = 0; r < m; r++) {
            double xh = (x[r * c + j] - mu) * iv;
            double want = gamma[j] * iv * (dy[r * c + j] - sdy / (double)m - xh * sdyx / (double)m);
            dworst = fmax(dworst, fabs(out[0][1][r * c + j] - want));
            dmax = fmax(dmax, fabs(want));
        }
    }
    CHECK_MSG(dworst <= 1e-5 * dmax, "BN dx against double: %.2e of %.2e", dworst, dmax);
    /* a mean far from zero (x = 1000 + deviations of ~1): the one-pass variance is shifted, it must not cancel */
    for (size_t i = 0; i < n; i++) x[i] += 1000.0f;
    be->bn_fwd_train(&d, x, gamma, beta, out[0][0], stats[0][0], stats[0][1], stats[0][2], stats[0][3]);
    worst = 0;
    for (int j = 0; j < c; j++) {
        double s = 0, v = 0;
        for (int64_t r = 0; r < m; r++) s += x[r * c + j];
        s /= (double)m;
        for (int64_t r = 0; r < m; r++) v += (x[r * c + j] - s) * (x[r * c + j] - s);
        v /= (double)m;
        double e2 = fabs(1.0 / ((double)stats[0][1][j] * stats[0][1][j]) - 1e-3 - v) / v;
        worst = fmax(worst, e2);
    }
    CHECK_MSG(worst < 1e-5, "BN variance of x near 1000 against double: relative %.2e", worst);
    for (int t = 0; t < 3; t++) { free(out[t][0]); free(out[t][1]); }
    free(x); free(dy);
}

/* keras.activations.relu's documented values, boundaries included. */
static void test_pact_values(void) {
    const float xs[5] = {-10, -5, 0, 5, 10};
    const float slope[5] = {-5, -2.5f, 0, 5, 10}, cap[5] = {0, 0, 0, 5, 5}, thr[5] = {0, 0, 0, 0, 10};
    fl_pact_desc ps = {FL_PACT_RELU, 0.5f, 0, INFINITY}, pc = {FL_PACT_RELU, 0, 0, 5}, pt = {FL_PACT_RELU, 0, 5, INFINITY};
    for (int i = 0; i < 5; i++) {
        CHECK_CLOSE(fl_pact_forward(&ps, xs[i]), slope[i], 0, 0);
        CHECK_CLOSE(fl_pact_forward(&pc, xs[i]), cap[i], 0, 0);
        CHECK_CLOSE(fl_pact_forward(&pt, xs[i]), thr[i], 0, 0);
    }
    /* ReLU(max_value=6, negative_slope=0.1, threshold=1) at 0 and 7 (Keras 3.15: -0.1, 6) */
    fl_pact_desc pm = {FL_PACT_RELU, 0.1f, 1, 6};
    CHECK_CLOSE(fl_pact_forward(&pm, 0.0f), -0.1, 1e-7, 0);
    CHECK_CLOSE(fl_pact_forward(&pm, 7.0f), 6.0, 0, 0);
}

/* Softmax along a middle axis of (B, 3, 4, 5). */
static void test_softmax_axis(int axis) {
    harness h;
    const int64_t B = 2, S[3] = {3, 4, 5};
    h_init(&h, B, 3, S);
    fl_node *y = fl_graph_softmax(&h.g, "softmax", h.x, axis);
    CHECK(y != NULL);
    if (!y) { h_free(&h); return; }
    int a = axis < 0 ? axis + 4 : axis;
    CHECK(y->op == (a == 3 ? FL_OP_ACT : FL_OP_SOFTMAX));
    h_ready(&h, y, -3, 3);
    h_loss(&h, true);
    int64_t outer = B, inner = 1, c = S[a - 1], n = fl_node_size(y);
    for (int i = 1; i < a; i++) outer *= S[i - 1];
    for (int i = a + 1; i < 4; i++) inner *= S[i - 1];
    double *ref = malloc((size_t)n * sizeof(double));
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < c; j++) mx = fmax(mx, h.x->val[(o * c + j) * inner + i]);
            for (int64_t j = 0; j < c; j++) sum += exp(h.x->val[(o * c + j) * inner + i] - mx);
            for (int64_t j = 0; j < c; j++) ref[(o * c + j) * inner + i] = exp(h.x->val[(o * c + j) * inner + i] - mx) / sum;
        }
    char what[48];
    snprintf(what, sizeof what, "softmax axis %d", axis);
    CHECK_MSG(max_abs_diff(y->val, ref, n) < 1e-6, "%s forward", what);
    free(ref);
    h_gradcheck(&h, what, 1e-3, 1e-2, true);
    h_free(&h);
}

/* PReLU on (B, 3, 4, 2) with alpha shared over the axes in `shared` (batch = 0). */
static void test_prelu(int s1, int s2) {
    harness h;
    const int64_t B = 3, S[3] = {3, 4, 2};
    h_init(&h, B, 3, S);
    int64_t p[3] = {S[0], S[1], S[2]};
    if (s1) p[s1 - 1] = 1;
    if (s2) p[s2 - 1] = 1;
    fl_node *alpha = h_param(&h, 3, p, -0.5f, 0.9f);
    fl_node *y = fl_graph_prelu(&h.g, "prelu", h.x, alpha);
    CHECK(y != NULL);
    if (!y) { h_free(&h); return; }
    h_ready(&h, y, -2, 2);
    int64_t n = fl_node_size(y);
    away_from(h.x->val, n, 0, 0.05f);
    h_loss(&h, true);
    double *ref = malloc((size_t)n * sizeof(double));
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < S[0]; i++)
            for (int64_t j = 0; j < S[1]; j++)
                for (int64_t k = 0; k < S[2]; k++) {
                    int64_t e = ((b * S[0] + i) * S[1] + j) * S[2] + k;
                    int64_t ai = ((p[0] == 1 ? 0 : i) * p[1] + (p[1] == 1 ? 0 : j)) * p[2] + (p[2] == 1 ? 0 : k);
                    double x = h.x->val[e];
                    ref[e] = x > 0 ? x : alpha->val[ai] * x;
                }
    char what[48];
    snprintf(what, sizeof what, "prelu shared (%d, %d)", s1, s2);
    CHECK_MSG(max_abs_diff(y->val, ref, n) < 1e-6, "%s forward", what);
    free(ref);
    h_gradcheck(&h, what, 1e-3, 1e-2, true);
    h_free(&h);
}

/* Normalization on (B, 3, 4) along per-sample axis `axis` (-1: axis=None). */
static void test_normalize(int axis, bool invert) {
    harness h;
    const int64_t B = 3, S[2] = {3, 4};
    h_init(&h, B, 2, S);
    int64_t len = axis < 0 ? 1 : S[axis];
    fl_node *mean = fl_graph_param(&h.g, "mean", 1, &len, false);
    fl_node *var = fl_graph_param(&h.g, "var", 1, &len, false);
    fill(mean->val, len, -1, 1);
    fill(var->val, len, 0.2f, 3);
    if (len > 1) var->val[1] = 1e-16f; /* below epsilon^2: the divisor is 1e-7 */
    fl_node *y = fl_graph_normalize(&h.g, "norm", h.x, mean, var, axis, invert);
    CHECK(y != NULL);
    if (!y) { h_free(&h); return; }
    h_ready(&h, y, -2, 2);
    if (len > 1 && !invert) /* x - mean ~ 1e-7 there: keeps y (and its gradient) of order 1 */
        for (int64_t e = 0; e < fl_node_size(y); e++)
            if ((axis == 0 ? e / S[1] % S[0] : e % S[1]) == 1) h.x->val[e] = mean->val[1] + 1e-7f * (float)(e % 3);
    h_loss(&h, true);
    int64_t n = fl_node_size(y);
    double *ref = malloc((size_t)n * sizeof(double)), err = 0;
    for (int64_t e = 0; e < n; e++) {
        int64_t p = axis < 0 ? 0 : axis == 0 ? e / S[1] % S[0] : e % S[1];
        double den = fmax(sqrt((double)var->val[p]), 1e-7);
        ref[e] = invert ? mean->val[p] + h.x->val[e] * den : (h.x->val[e] - mean->val[p]) / den;
        err = fmax(err, fabs(y->val[e] - ref[e]) / (1e-6 + fabs(ref[e])));
    }
    char what[48];
    snprintf(what, sizeof what, "normalize axis %d%s", axis, invert ? " invert" : "");
    CHECK_MSG(err < 1e-5, "%s forward: relative error %g", what, err);
    free(ref);
    /* the gradient near the tiny variance is 1e7: check the others */
    if (len > 1 && !invert) var->val[1] = 0.5f;
    h_gradcheck(&h, what, 1e-3, 1e-2, true);
    h_free(&h);
}

/* A PReLU called twice (a shared layer): alpha's gradient sums both calls. */
static void test_prelu_shared(void) {
    harness h;
    const int64_t B = 2, S[2] = {3, 4};
    h_init(&h, B, 2, S);
    fl_node *alpha = h_param(&h, 2, (int64_t[]){1, 4}, -0.5f, 0.9f);
    fl_node *y1 = fl_graph_prelu(&h.g, "prelu", h.x, alpha);
    fl_node *t = fl_graph_pact(&h.g, "shift", y1, (fl_pact_desc){FL_PACT_AFFINE, 1.5f, -0.7f, 0});
    fl_node *y2 = fl_graph_prelu(&h.g, "prelu", t, alpha);
    CHECK(y2 != NULL);
    if (!y2) { h_free(&h); return; }
    h_ready(&h, y2, -2, 2);
    int64_t n = fl_node_size(y2);
    away_from(h.x->val, n, 0, 0.05f);
    away_from(h.x->val, n, 0.7f / 1.5f, 0.05f); /* t's kink at 0 */
    h_gradcheck(&h, "prelu shared by two calls", 1e-3, 1e-2, true);
    h_free(&h);
}

/* ------------------------------------- dilated and grouped convolutions */

/* Conv2D with dilation and groups, the naive way: output channel o of group
 * g = o / (oc/groups) sums input channels g*cg .. g*cg+cg-1, taps dil apart. */
static void conv_dg_ref(const float *x, const float *w, const float *b, int64_t B, const fl_conv_desc *d, int dh,
                        int dw, int groups, int act, double *y) {
    const int cg = d->c / groups, ocg = d->oc / groups;
    for (int64_t n = 0; n < B; n++)
        for (int oh = 0; oh < d->oh; oh++)
            for (int ow = 0; ow < d->ow; ow++)
                for (int oc = 0; oc < d->oc; oc++) {
                    double s = b ? b[oc] : 0;
                    const int g = oc / ocg;
                    for (int kh = 0; kh < d->kh; kh++)
                        for (int kw = 0; kw < d->kw; kw++) {
                            int ih = oh * d->sh - d->pt + kh * dh, iw = ow * d->sw - d->pl + kw * dw;
                            if (ih < 0 || ih >= d->h || iw < 0 || iw >= d->w) continue;
                            for (int c = 0; c < cg; c++)
                                s += (double)x[((n * d->h + ih) * d->w + iw) * d->c + g * cg + c] *
                                     w[((kh * d->kw + kw) * cg + c) * d->oc + oc];
                        }
                    y[((n * d->oh + oh) * d->ow + ow) * d->oc + oc] = act_ref(act, s);
                }
}

/* eop: the op expected (groups == channels runs as the depthwise op). */
static void test_conv_dg(int64_t B, int H, int W, int C, int OC, int KH, int KW, int S, int DH, int DW, int G,
                         fl_padding pad, int act, bool bias, int eoh, int eow) {
    harness h;
    h_init(&h, B, 3, (int64_t[]){H, W, C});
    fl_node *w = h_param(&h, 4, (int64_t[]){KH, KW, C / G, OC}, -0.4f, 0.4f);
    int64_t oc = OC;
    fl_node *b = bias ? h_param(&h, 1, &oc, -0.3f, 0.3f) : NULL;
    fl_node *y = fl_graph_conv2d_dilated(&h.g, "conv", h.x, w, b, S, S, DH, DW, G, pad, act);
    char what[128];
    snprintf(what, sizeof what, "conv %dx%dx%d->%d k%dx%d s%d dil%dx%d groups %d pad=%d act=%d bias=%d B=%lld", H, W,
             C, OC, KH, KW, S, DH, DW, G, pad, act, bias, (long long)B);
    CHECK_MSG(y != NULL, "%s: %s", what, fl_last_error());
    if (!y) { h_free(&h); return; }
    CHECK_MSG(y->shape[1] == eoh && y->shape[2] == eow, "%s: output %lldx%lld, expected %dx%d", what,
              (long long)y->shape[1], (long long)y->shape[2], eoh, eow);
    CHECK_MSG(y->op == (G == C ? FL_OP_DEPTHWISE_CONV2D : FL_OP_CONV2D), "%s: op %d", what, (int)y->op);
    h_ready(&h, y, -1, 1);
    h_loss(&h, true);
    int64_t n = fl_node_size(y);
    double *ref = malloc((size_t)n * sizeof(double));
    conv_dg_ref(h.x->val, w->val, b ? b->val : NULL, B, &y->conv, DH, DW, G, act, ref);
    CHECK_MSG(max_abs_diff(y->val, ref, n) < 1e-4, "%s forward", what);
    free(ref);
    h_gradcheck(&h, what, 1e-3, 1e-2, true);
    h_free(&h);
}

/* DepthwiseConv2D with dilation against the grouped reference: a depthwise
 * kernel (kh, kw, c, dm) is the grouped (kh, kw, 1, c*dm) with groups c. */
static void test_depthwise_dil(int64_t B, int H, int W, int C, int DM, int K, int S, int DH, int DW, fl_padding pad,
                               int act, int eoh, int eow) {
    harness h;
    h_init(&h, B, 3, (int64_t[]){H, W, C});
    fl_node *w = h_param(&h, 4, (int64_t[]){K, K, C, DM}, -0.5f, 0.5f);
    int64_t oc = (int64_t)C * DM;
    fl_node *b = h_param(&h, 1, &oc, -0.3f, 0.3f);
    fl_node *y = fl_graph_depthwise_conv2d_dilated(&h.g, "dw", h.x, w, b, S, S, DH, DW, pad, act);
    char what[128];
    snprintf(what, sizeof what, "depthwise %dx%dx%d dm%d k%d s%d dil%dx%d pad=%d act=%d B=%lld", H, W, C, DM, K, S, DH,
             DW, pad, act, (long long)B);
    CHECK_MSG(y != NULL, "%s: %s", what, fl_last_error());
    if (!y) { h_free(&h); return; }
    CHECK_MSG(y->shape[1] == eoh && y->shape[2] == eow, "%s: output %lldx%lld, expected %dx%d", what,
              (long long)y->shape[1], (long long)y->shape[2], eoh, eow);
    h_ready(&h, y, -1, 1);
    h_loss(&h, true);
    int64_t n = fl_node_size(y);
    double *ref = malloc((size_t)n * sizeof(double));
    conv_dg_ref(h.x->val, w->val, b->val, B, &y->conv, DH, DW, C, act, ref);
    CHECK_MSG(max_abs_diff(y->val, ref, n) < 1e-5, "%s forward", what);
    free(ref);
    h_gradcheck(&h, what, 1e-3, 1e-2, true);
    h_free(&h);
}

/* Conv1D's form with dilation and groups: "causal" pads dilation*(k-1). */
static void test_conv1d_dilated(int T, int C, int F, int K, int D, int G) {
    harness h;
    const int64_t B = 3;
    h_init(&h, B, 3, (int64_t[]){T, 1, C});
    fl_node *w = h_param(&h, 3, (int64_t[]){K, C / G, F}, -0.5f, 0.5f);
    int64_t f = F;
    fl_node *b = h_param(&h, 1, &f, -0.5f, 0.5f);
    fl_node *p = fl_graph_pad2d(&h.g, "causal", h.x, D * (K - 1), 0, 0, 0);
    fl_node *y = fl_graph_conv2d_dilated(&h.g, "conv1d", p, w, b, 1, 1, D, 1, G, FL_VALID, FL_ACT_TANH);
    char what[96];
    snprintf(what, sizeof what, "conv1d causal T%d %d->%d k%d dil%d groups %d", T, C, F, K, D, G);
    CHECK_MSG(y && y->shape[1] == T && y->shape[2] == 1 && y->shape[3] == F, "%s: shape", what);
    if (!y) { h_free(&h); return; }
    h_ready(&h, y, -1, 1);
    h_loss(&h, true);
    const int cg = C / G, fg = F / G;
    double *ref = malloc((size_t)(B * T * F) * sizeof(double));
    for (int64_t n = 0; n < B; n++)
        for (int t = 0; t < T; t++)
            for (int o = 0; o < F; o++) {
                double s = b->val[o];
                for (int k = 0; k < K; k++) {
                    int st = t - D * (K - 1 - k); /* output t sees inputs t, t-D, ..., t-D(K-1) */
                    if (st < 0) continue;
                    for (int c = 0; c < cg; c++)
                        s += (double)h.x->val[(n * T + st) * C + (o / fg) * cg + c] * w->val[(k * cg + c) * F + o];
                }
                ref[(n * T + t) * F + o] = tanh(s);
            }
    CHECK_MSG(max_abs_diff(y->val, ref, B * T * F) < 1e-5, "%s forward", what);
    free(ref);
    h_gradcheck(&h, what, 1e-3, 1e-2, true);
    h_free(&h);
}

/* ------------------------------------------------------------ Resizing */

/* One axis of jax.image.resize (antialias off): bilinear as resize_weight
 * above with the scale out/n; nearest reads floor((o + 0.5) * n / out). */
static double resize_weight_any(bool bilinear, int o, int i, int n, int out) {
    if (!bilinear) return (int)floor((o + 0.5) * n / out) == i;
    double src = (o + 0.5) * n / out - 0.5, tot = 0;
    for (int k = 0; k < n; k++) tot += fmax(0.0, 1.0 - fabs(src - k));
    return fmax(0.0, 1.0 - fabs(src - i)) / tot;
}

static void test_resize2d(int H, int W, int C, int OH, int OW, bool bilinear) {
    harness h;
    const int64_t B = 2;
    h_init(&h, B, 3, (int64_t[]){H, W, C});
    fl_node *y = fl_graph_resize2d(&h.g, "resize", h.x, OH, OW, bilinear);
    CHECK(y && y->shape[1] == OH && y->shape[2] == OW && y->shape[3] == C);
    if (!y) { h_free(&h); return; }
    h_ready(&h, y, -1, 1);
    h_loss(&h, true);
    double *ref = calloc((size_t)(B * OH * OW * C), sizeof(double));
    for (int64_t n = 0; n < B; n++)
        for (int i = 0; i < OH; i++)
            for (int j = 0; j < OW; j++)
                for (int c = 0; c < C; c++) {
                    double v = 0;
                    for (int a = 0; a < H; a++)
                        for (int b = 0; b < W; b++)
                            v += resize_weight_any(bilinear, i, a, H, OH) * resize_weight_any(bilinear, j, b, W, OW) *
                                 h.x->val[((n * H + a) * W + b) * C + c];
                    ref[((n * OH + i) * OW + j) * C + c] = v;
                }
    char what[80];
    snprintf(what, sizeof what, "resize %dx%dx%d -> %dx%d %s", H, W, C, OH, OW, bilinear ? "bilinear" : "nearest");
    CHECK_MSG(max_abs_diff(y->val, ref, B * OH * OW * C) < 1e-5, "%s forward", what);
    free(ref);
    h_gradcheck(&h, what, 1e-3, 1e-3, true);
    h_free(&h);
}

static void test_dg_shape_errors(void) {
    fl_graph g;
    fl_graph_init(&g, fl_backend_cpu());
    fl_node *x = fl_graph_input(&g, "x", 3, (int64_t[]){6, 6, 6});
    fl_node *w = fl_graph_param(&g, "w", 4, (int64_t[]){3, 3, 2, 4}, true);
    CHECK(fl_graph_conv2d_dilated(&g, "my_conv", x, w, NULL, 1, 1, 1, 1, 4, FL_VALID, FL_ACT_LINEAR) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "not divisible by groups 4");
    CHECK(fl_graph_conv2d_dilated(&g, "my_conv", x, w, NULL, 1, 1, 1, 1, 2, FL_VALID, FL_ACT_LINEAR) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "kernel expects 2");
    CHECK(fl_graph_conv2d_dilated(&g, "my_conv", x, w, NULL, 1, 1, 1, 1, 3, FL_VALID, FL_ACT_LINEAR) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "4 filters, not divisible by groups 3");
    fl_node *w6 = fl_graph_param(&g, "w6", 4, (int64_t[]){3, 3, 2, 6}, true);
    CHECK(fl_graph_conv2d_dilated(&g, "my_conv", x, w6, NULL, 1, 1, 3, 3, 3, FL_VALID, FL_ACT_LINEAR) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "dilated 3x3 (extent 7x7)");
    CHECK(fl_graph_conv2d_dilated(&g, "my_conv", x, w6, NULL, 1, 1, 2, 2, 3, FL_VALID, FL_ACT_LINEAR) != NULL);
    CHECK(fl_graph_resize2d(&g, "my_resize", x, 0, 3, true) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "my_resize");
    fl_graph_free(&g);
}

/* ------------------------------------------ LayerNormalization, attention */

/* LayerNormalization over the last nax axes of x (B, 3, 4, 5): forward
 * against double precision (Keras's formula), gradients of x, gamma, beta. */
static void test_layernorm(int nax, bool rms, bool scale, bool center) {
    harness h;
    const int64_t B = 3, shape[3] = {3, 4, 5};
    int64_t c = 1;
    for (int i = 3 - nax; i < 3; i++) c *= shape[i];
    h_init(&h, B, 3, shape);
    fl_node *gm = scale ? h_param(&h, 1, &c, 0.5f, 1.5f) : NULL;
    fl_node *bt = center ? h_param(&h, 1, &c, -0.5f, 0.5f) : NULL;
    fl_node *y = fl_graph_layernorm(&h.g, "ln", h.x, gm, bt, c, 1e-3f, rms);
    CHECK(y != NULL);
    if (!y) { h_free(&h); return; }
    h_ready(&h, y, -2, 3);
    h_loss(&h, true);
    const int64_t rows = B * 60 / c;
    double *ref = malloc((size_t)(B * 60) * sizeof(double));
    for (int64_t r = 0; r < rows; r++) {
        const float *x = h.x->val + r * c;
        double m = 0, v = 0;
        for (int64_t j = 0; j < c; j++) m += x[j] / (double)c;
        for (int64_t j = 0; j < c; j++) v += (x[j] - m) * (x[j] - m) / (double)c;
        for (int64_t j = 0; j < c; j++) {
            double t = (x[j] - (rms ? 0 : m)) / sqrt(v + 1e-3);
            if (gm) t *= gm->val[j];
            if (bt) t += bt->val[j];
            ref[r * c + j] = t;
        }
    }
    char what[96];
    snprintf(what, sizeof what, "layernorm over %d axes%s%s%s", nax, rms ? " rms" : "", scale ? " scale" : "",
             center ? " center" : "");
    CHECK_MSG(max_abs_diff(y->val, ref, B * 60) < 1e-5, "%s forward", what);
    free(ref);
    h_gradcheck(&h, what, 1e-3, 1e-2, true);
    h_free(&h);
}

/* The attention of one (batch, head) block in double precision, with
 * Keras's masking (mode 0: MultiHeadAttention, 1: Attention). */
static void attn_ref(const fl_attn_desc *d, int64_t b, int hd, const float *q, const float *k, const float *v,
                     const float *qm, const float *vm, const float *am, double *out /* (tq, H*dv) of sample b */,
                     const float *sc, const float *cw /* the Attention layer's learned scores, or NULL */) {
    const int H = d->heads, tq = d->tq, tk = d->tk, dk = d->dk, dv = d->dv;
    double *s = malloc((size_t)tk * sizeof(double));
    for (int i = 0; i < tq; i++) {
        bool any = false;
        double mx = -INFINITY;
        for (int j = 0; j < tk; j++) {
            double t = 0;
            for (int e = 0; e < dk; e++) {
                double qe = q[((b * tq + i) * H + hd) * dk + e], ke = k[((b * tk + j) * H + hd) * dk + e];
                t += cw ? tanh((sc ? *sc : 1.0) * (qe + ke)) : qe * ke;
            }
            t *= cw ? *cw : d->scale * (sc ? *sc : 1.0);
            bool on = !(d->causal && j > i) && (!vm || vm[b * tk + j] > 0.5f);
            if (d->mask_mode != 1) on = on && (!qm || qm[b * tq + i] > 0.5f) && (!am || am[(b * tq + i) * tk + j] > 0.5f);
            if (d->mask_mode != 1 && !on) t = -INFINITY;
            if (d->mask_mode == 1 && !on) t -= 1e9;
            any |= on;
            s[j] = t;
            mx = t > mx ? t : mx;
        }
        bool zero = d->mask_mode == 0 ? !any : d->mask_mode == 1 && qm && qm[b * tq + i] <= 0.5f;
        bool uniform = d->mask_mode == 2 && !any;
        double sum = 0;
        for (int j = 0; j < tk; j++) { s[j] = zero ? 0 : uniform ? 1 : exp(s[j] - mx); sum += s[j]; }
        for (int e = 0; e < dv; e++) {
            double o = 0;
            for (int j = 0; j < tk; j++) o += (zero ? 0 : s[j] / sum) * v[((b * tk + j) * H + hd) * dv + e];
            out[(i * H + hd) * dv + e] = o;
        }
    }
    free(s);
}

static void fill_mask(fl_node *m, int64_t n, int every) {
    for (int64_t i = 0; i < n; i++) m->val[i] = (i % every == every - 1) ? 0.0f : 1.0f;
}

/* The attention op on its own: q, k, v inputs (q is the harness's x; k and v
 * inputs whose gradients are checked as parameters), masks, causal. */
static void test_attention_op_(int64_t B, int tq, int tk, int H, int dk, int dv, bool causal, int masks, int mode,
                               int learn /* 1: a learned scale, 2: concat scores, 3: both */) {
    harness h;
    h_init(&h, B, 2, (int64_t[]){tq, H * dk});
    fl_node *k = fl_graph_input(&h.g, "k", 2, (int64_t[]){tk, H * dk});
    fl_node *v = fl_graph_input(&h.g, "v", 2, (int64_t[]){tk, H * dv});
    k->force_grad = v->force_grad = true;
    fl_node *qm = masks & 1 ? fl_graph_input(&h.g, "qm", 1, (int64_t[]){tq}) : NULL;
    fl_node *vm = masks & 2 ? fl_graph_input(&h.g, "vm", 1, (int64_t[]){tk}) : NULL;
    fl_node *am = masks & 4 ? fl_graph_input(&h.g, "am", 2, (int64_t[]){tq, tk}) : NULL;
    const float scale = 1.0f / sqrtf((float)dk);
    fl_node *y = fl_graph_attention(&h.g, "att", h.x, k, v, qm, vm, am, H, learn ? 1.0f : scale, causal, 0.0f, 1);
    fl_node *sc = learn & 1 ? h_param(&h, 0, NULL, 0.4f, 1.3f) : NULL, *cw = learn & 2 ? h_param(&h, 0, NULL, 0.5f, 1.5f) : NULL;
    if (y && learn) y = fl_graph_attention_scores(&h.g, y, sc, cw);
    CHECK(y != NULL);
    if (!y) { h_free(&h); return; }
    y->attn.mask_mode = mode;
    h_ready(&h, y, -1.5f, 1.5f);
    fill(k->val, fl_node_size(k), -1.5f, 1.5f);
    fill(v->val, fl_node_size(v), -1, 1);
    if (qm) fill_mask(qm, B * tq, 3);
    if (vm) fill_mask(vm, B * tk, 4);
    if (am) fill_mask(am, B * tq * tk, 5);
    h.params[h.np++] = k;
    h.params[h.np++] = v;
    h_loss(&h, true);
    double *ref = malloc((size_t)fl_node_size(y) * sizeof(double));
    fl_attn_desc d = y->attn;
    for (int64_t b = 0; b < B; b++)
        for (int hd = 0; hd < H; hd++)
            attn_ref(&d, b, hd, h.x->val, k->val, v->val, qm ? qm->val : NULL, vm ? vm->val : NULL,
                     am ? am->val : NULL, ref + b * tq * H * dv, sc ? sc->val : NULL, cw ? cw->val : NULL);
    char what[128];
    snprintf(what, sizeof what, "attention B%lld tq%d tk%d H%d dk%d dv%d%s masks%d mode%d learn%d", (long long)B, tq,
             tk, H, dk, dv, causal ? " causal" : "", masks, mode, learn);
    CHECK_MSG(max_abs_diff(y->val, ref, fl_node_size(y)) < 1e-5, "%s forward", what);
    free(ref);
    h_gradcheck(&h, what, 1e-3, 1e-2, true);
    h_free(&h);
}

static void test_attention_op(int64_t B, int tq, int tk, int H, int dk, int dv, bool causal, int masks, int mode) {
    test_attention_op_(B, tq, tk, H, dk, dv, causal, masks, mode, 0);
}

/* MultiHeadAttention as its layer builds it: Dense projections with Keras's
 * (d, heads, key_dim) kernels and (heads, key_dim) biases, the attention,
 * the output projection (heads, value_dim, d); gradients of x and of all
 * eight weights. */
static void test_mha(int T, int D, int H, int dk, int dv, bool causal, bool qmask) {
    harness h;
    const int64_t B = 2;
    h_init(&h, B, 2, (int64_t[]){T, D});
    fl_node *w[8];
    const int64_t kq[3] = {D, H, dk}, kv[3] = {D, H, dv}, ko[3] = {H, dv, D}, bq[2] = {H, dk}, bv[2] = {H, dv};
    w[0] = h_param(&h, 3, kq, -0.5f, 0.5f); w[1] = h_param(&h, 2, bq, -0.2f, 0.2f);
    w[2] = h_param(&h, 3, kq, -0.5f, 0.5f); w[3] = h_param(&h, 2, bq, -0.2f, 0.2f);
    w[4] = h_param(&h, 3, kv, -0.5f, 0.5f); w[5] = h_param(&h, 2, bv, -0.2f, 0.2f);
    w[6] = h_param(&h, 3, ko, -0.5f, 0.5f); w[7] = h_param(&h, 1, (int64_t[]){D}, -0.2f, 0.2f);
    fl_node *m = qmask ? fl_graph_input(&h.g, "mask", 1, (int64_t[]){T}) : NULL;
    fl_node *q = fl_graph_dense(&h.g, "q", h.x, w[0], w[1], FL_ACT_LINEAR);
    fl_node *k = fl_graph_dense(&h.g, "k", h.x, w[2], w[3], FL_ACT_LINEAR);
    fl_node *v = fl_graph_dense(&h.g, "v", h.x, w[4], w[5], FL_ACT_LINEAR);
    fl_node *a = fl_graph_attention(&h.g, "mha", q, k, v, m, m, NULL, H, 1.0f / sqrtf((float)dk), causal, 0.0f, 1);
    fl_node *y = a ? fl_graph_dense(&h.g, "o", a, w[6], w[7], FL_ACT_LINEAR) : NULL;
    CHECK(q && k && v && a && y);
    if (!y) { h_free(&h); return; }
    CHECK(y->ndim == 3 && y->shape[1] == T && y->shape[2] == D);
    h_ready(&h, y, -1, 1);
    if (m) fill_mask(m, B * T, 3);
    h_loss(&h, true);
    /* reference: the projections in double, then attn_ref on them */
    const int64_t nq = B * T * H * dk, nv = B * T * H * dv;
    float *Q = malloc((size_t)nq * sizeof(float)), *K = malloc((size_t)nq * sizeof(float)),
          *V = malloc((size_t)nv * sizeof(float));
    for (int64_t r = 0; r < B * T; r++) {
        for (int j = 0; j < H * dk; j++) {
            double sq = w[1]->val[j], sk = w[3]->val[j];
            for (int i = 0; i < D; i++) {
                sq += (double)h.x->val[r * D + i] * w[0]->val[i * H * dk + j];
                sk += (double)h.x->val[r * D + i] * w[2]->val[i * H * dk + j];
            }
            Q[r * H * dk + j] = (float)sq; K[r * H * dk + j] = (float)sk;
        }
        for (int j = 0; j < H * dv; j++) {
            double sv = w[5]->val[j];
            for (int i = 0; i < D; i++) sv += (double)h.x->val[r * D + i] * w[4]->val[i * H * dv + j];
            V[r * H * dv + j] = (float)sv;
        }
    }
    double *A = malloc((size_t)nv * sizeof(double)), *ref = malloc((size_t)(B * T * D) * sizeof(double));
    fl_attn_desc d = a->attn;
    for (int64_t b = 0; b < B; b++)
        for (int hd = 0; hd < H; hd++)
            attn_ref(&d, b, hd, Q, K, V, m ? m->val : NULL, m ? m->val : NULL, NULL, A + b * T * H * dv, NULL, NULL);
    for (int64_t r = 0; r < B * T; r++)
        for (int o = 0; o < D; o++) {
            double s = w[7]->val[o];
            for (int j = 0; j < H * dv; j++) s += A[r * H * dv + j] * w[6]->val[j * D + o];
            ref[r * D + o] = s;
        }
    char what[96];
    snprintf(what, sizeof what, "mha T%d D%d H%d dk%d dv%d%s%s", T, D, H, dk, dv, causal ? " causal" : "",
             qmask ? " masked" : "");
    CHECK_MSG(max_abs_diff(y->val, ref, B * T * D) < 1e-4, "%s forward", what);
    free(Q); free(K); free(V); free(A); free(ref);
    h_gradcheck(&h, what, 1e-3, 1e-2, true);
    h_free(&h);
}

/* The attention's backward one (batch, head) block at a time (the CPU's attn_bwd_blocked): the same output and
 * gradients, bit for bit, as the whole-batch calls (a backend without the entry), where the inputs' gradients
 * are one buffer. kind 0: self-attention with q, k, v one node; 1: k and v one node, q another, with a value
 * mask; 2: self-attention, causal, Keras-on-JAX masking (mode 2) with a query mask that empties rows. The
 * gradient checks of test_attention_op and test_mha run the blocked path too. */
static fl_node *attn_chain(harness *h, const fl_backend *be, int kind, const harness *like) {
    const int64_t B = 3, T = 6, S = 5, D = 4;
    memset(h, 0, sizeof *h);
    fl_graph_init(&h->g, be);
    h->g.seed = 7;
    h->batch = B;
    h->x = fl_graph_input(&h->g, "x", 2, (int64_t[]){T, D});
    h->x->force_grad = true;
    fl_node *z = kind == 1 ? fl_graph_input(&h->g, "z", 2, (int64_t[]){S, D}) : h->x;
    z->force_grad = true;
    fl_node *m = kind ? fl_graph_input(&h->g, "m", 1, (int64_t[]){kind == 1 ? S : T}) : NULL;
    fl_node *y = fl_graph_attention(&h->g, "att", h->x, z, z, kind == 2 ? m : NULL, kind == 1 ? m : NULL, NULL, 2,
                                    0.7f, kind == 2, 0.0f, 1);
    CHECK(y != NULL);
    if (!y) return NULL;
    if (kind == 2) y->attn.mask_mode = 2;
    h_ready(h, y, -2, 2);
    if (like) {
        memcpy(h->x->val, like->x->val, (size_t)fl_node_size(h->x) * sizeof(float));
        memcpy(h->R, like->R, (size_t)fl_node_size(y) * sizeof(float));
    } else {
        if (z != h->x) fill(z->val, fl_node_size(z), -2, 2);
        if (m) fill_mask(m, B * (kind == 1 ? S : T), 2);
    }
    return y;
}

static void test_attention_blocked(int kind) {
    static fl_backend apart;
    apart = *fl_backend_cpu();
    apart.attn_bwd_blocked = NULL;
    harness h, u;
    fl_node *yh = attn_chain(&h, fl_backend_cpu(), kind, NULL), *yu = attn_chain(&u, &apart, kind, &h);
    if (!yh || !yu) { h_free(&h); h_free(&u); return; }
    for (int i = 0; i < h.g.n; i++) /* z and m of the first harness into the second */
        if (h.g.nodes[i]->op == FL_OP_INPUT && h.g.nodes[i] != h.x)
            memcpy(u.g.nodes[i]->val, h.g.nodes[i]->val, (size_t)fl_node_size(h.g.nodes[i]) * sizeof(float));
    h_step(&h);
    h_step(&u);
    char what[64];
    snprintf(what, sizeof what, "attention backward by blocks, kind %d", kind);
    CHECK_MSG(memcmp(yh->val, yu->val, (size_t)fl_node_size(yh) * sizeof(float)) == 0, "%s: output differs", what);
    for (int i = 0; i < h.g.n; i++) {
        const fl_node *a = h.g.nodes[i], *b = u.g.nodes[i];
        if (a->op != FL_OP_INPUT || !a->needs_grad) continue;
        CHECK_MSG(memcmp(a->grad, b->grad, (size_t)fl_node_size(a) * sizeof(float)) == 0,
                  "%s: the gradient of input '%s' differs from the whole-batch calls'", what, a->name);
    }
    h_free(&h);
    h_free(&u);
}

static void test_repeat(void) {
    harness h;
    const int64_t B = 3, D = 4, T = 5;
    h_init(&h, B, 1, &D);
    fl_node *y = fl_graph_repeat(&h.g, "rep", h.x, T);
    CHECK(y && y->ndim == 3 && y->shape[1] == T && y->shape[2] == D);
    h_ready(&h, y, -1, 1);
    h_loss(&h, true);
    bool ok = true;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < D; j++) ok &= y->val[(b * T + t) * D + j] == h.x->val[b * D + j];
    CHECK_MSG(ok, "repeat forward");
    h_gradcheck(&h, "repeat", 1e-3, 1e-3, true);
    h_free(&h);
    /* refusals name the layer */
    fl_graph g;
    fl_graph_init(&g, fl_backend_cpu());
    fl_node *x3 = fl_graph_input(&g, "x", 2, (int64_t[]){3, 4});
    CHECK(fl_graph_repeat(&g, "rv", x3, 2) == NULL && strstr(fl_last_error(), "'rv' (RepeatVector)"));
    CHECK(fl_graph_layernorm(&g, "ln", x3, NULL, NULL, 5, 1e-3f, false) == NULL &&
          strstr(fl_last_error(), "'ln' (LayerNormalization)"));
    fl_node *k = fl_graph_input(&g, "k", 2, (int64_t[]){6, 4});
    fl_node *v = fl_graph_input(&g, "v", 2, (int64_t[]){5, 4});
    CHECK(fl_graph_attention(&g, "att", x3, k, v, NULL, NULL, NULL, 2, 1, false, 0, 1) == NULL &&
          strstr(fl_last_error(), "'att' (attention)"));
    CHECK(fl_graph_attention(&g, "att", x3, k, k, NULL, NULL, NULL, 3, 1, false, 0, 1) == NULL);
    fl_graph_free(&g);
}

/* -------------------------------------------------------- recurrent */

/* SimpleRNN, LSTM, GRU in double precision, step by step as Keras's cells
 * and backend.rnn (masked steps carry the state; the output is the state). */
/* With the states at the ends: h0, c0 (B, u) or NULL (zeros); the final
 * carried states into hT, cT (B, u) unless NULL. */
static void rnn_ref_st(const fl_rnn_desc *d, int64_t B, const float *x, const float *W, const float *U, const float *b,
                       const float *mask, const float *h0, const float *c0, double *y, double *hT, double *cT) {
    const int T = d->t, D = d->d, u = d->u, G = fl_rnn_gates(d), gu = G * u;
    const bool ra = d->cell == FL_RNN_GRU && d->reset_after;
    double h[64], c[64], xw[256], rec[256], nh[64], nc[64] = {0};
    for (int64_t s = 0; s < B; s++) {
        for (int j = 0; j < u; j++) {
            h[j] = h0 ? h0[s * u + j] : 0;
            c[j] = c0 ? c0[s * u + j] : 0;
        }
        for (int k = 0; k < T; k++) {
            int tin = d->go_backwards ? T - 1 - k : k;
            for (int q = 0; q < gu; q++) {
                double a = b ? b[q] : 0, r = ra && b ? b[gu + q] : 0;
                for (int i = 0; i < D; i++) a += (double)x[(s * T + tin) * D + i] * W[i * gu + q];
                for (int i = 0; i < u; i++) r += h[i] * U[i * gu + q];
                xw[q] = a;
                rec[q] = r;
            }
            for (int j = 0; j < u; j++) {
                if (d->cell == FL_RNN_SIMPLE) {
                    nh[j] = act_ref(d->act, xw[j] + rec[j]);
                } else if (d->cell == FL_RNN_LSTM) {
                    double i = act_ref(d->ract, xw[j] + rec[j]), f = act_ref(d->ract, xw[u + j] + rec[u + j]);
                    double g = act_ref(d->act, xw[2 * u + j] + rec[2 * u + j]);
                    double o = act_ref(d->ract, xw[3 * u + j] + rec[3 * u + j]);
                    nc[j] = f * c[j] + i * g;
                    nh[j] = o * act_ref(d->act, nc[j]);
                }
            }
            if (d->cell == FL_RNN_GRU) {
                double z[64], r[64];
                for (int j = 0; j < u; j++) {
                    z[j] = act_ref(d->ract, xw[j] + rec[j]);
                    r[j] = act_ref(d->ract, xw[u + j] + rec[u + j]);
                }
                for (int j = 0; j < u; j++) {
                    double hr;
                    if (ra) hr = r[j] * rec[2 * u + j];
                    else {
                        hr = 0;
                        for (int i = 0; i < u; i++) hr += r[i] * h[i] * U[i * gu + 2 * u + j];
                    }
                    double hh = act_ref(d->act, xw[2 * u + j] + hr);
                    nh[j] = z[j] * h[j] + (1 - z[j]) * hh;
                }
            }
            bool keep = !mask || mask[s * T + tin] > 0.5f;
            for (int j = 0; j < u; j++)
                if (keep) { h[j] = nh[j]; c[j] = nc[j]; }
            int ko = d->reverse_output ? T - 1 - k : k;
            if (d->return_sequences)
                for (int j = 0; j < u; j++) y[(s * T + ko) * u + j] = keep || !d->zero_masked ? h[j] : 0;
            if (!d->return_sequences && k == T - 1)
                for (int j = 0; j < u; j++) y[s * u + j] = keep || !d->zero_masked ? h[j] : 0;
        }
        for (int j = 0; j < u; j++) {
            if (hT) hT[s * u + j] = h[j];
            if (cT) cT[s * u + j] = c[j];
        }
    }
}

static void rnn_ref(const fl_rnn_desc *d, int64_t B, const float *x, const float *W, const float *U, const float *b,
                    const float *mask, double *y) {
    rnn_ref_st(d, B, x, W, U, b, mask, NULL, NULL, y, NULL, NULL);
}

static void test_rnn_b(int64_t B, int cell, bool reset_after, bool seq, bool backwards, bool masked, bool bias, int act,
                       int ract, bool zero_masked, bool reverse_output) {
    harness h;
    const int64_t T = 5, D = 4, u = 3;
    fl_rnn_desc d = {.cell = cell, .u = (int)u, .act = act, .ract = ract, .reset_after = reset_after,
                     .go_backwards = backwards, .return_sequences = seq, .zero_masked = zero_masked,
                     .reverse_output = reverse_output};
    const int64_t gu = fl_rnn_gates(&d) * u;
    h_init(&h, B, 2, (int64_t[]){T, D});
    fl_node *mask = masked ? fl_graph_input(&h.g, "mask", 1, &T) : NULL;
    fl_node *w = h_param(&h, 2, (int64_t[]){D, gu}, -0.6f, 0.6f);
    fl_node *r = h_param(&h, 2, (int64_t[]){u, gu}, -0.6f, 0.6f);
    bool two = cell == FL_RNN_GRU && reset_after;
    fl_node *b = bias ? h_param(&h, two ? 2 : 1, two ? (int64_t[]){2, gu} : (int64_t[]){gu}, -0.5f, 0.5f) : NULL;
    fl_node *y = fl_graph_rnn(&h.g, "rnn", h.x, w, r, b, mask, d);
    CHECK(y != NULL);
    if (!y) { fprintf(stderr, "  %s\n", fl_last_error()); h_free(&h); return; }
    h_ready(&h, y, -1, 1);
    if (mask) /* sample 0: all valid; 1: the first two masked and the last; 2: all masked but step 2 */
        for (int64_t s = 0; s < B; s++)
            for (int64_t t = 0; t < T; t++)
                mask->val[s * T + t] = s % 3 == 0 ? 1.0f : s % 3 == 1 ? (t >= 2 && t < T - 1) : t == 2;
    h_loss(&h, true);
    double *ref = malloc((size_t)fl_node_size(h.out) * sizeof(double));
    rnn_ref(&y->rnn, B, h.x->val, w->val, r->val, b ? b->val : NULL, mask ? mask->val : NULL, ref);
    char what[128];
    snprintf(what, sizeof what, "rnn batch %lld cell=%d reset_after=%d seq=%d backwards=%d mask=%d bias=%d act=%d/%d "
             "zero=%d rev=%d", (long long)B, cell, reset_after, seq, backwards, masked, bias, act, ract, zero_masked,
             reverse_output);
    CHECK_MSG(max_abs_diff(h.out->val, ref, fl_node_size(h.out)) < 1e-5, "%s forward: %g vs %g, %g vs %g", what, h.out->val[0], ref[0], h.out->val[fl_node_size(h.out) - 1], ref[fl_node_size(h.out) - 1]);
    h_gradcheck(&h, what, 1e-3, 1e-2, true);
    /* inference (the CPU's own path: the valid steps only) gives the same y;
     * a backward after it (which reruns the training forward) the same
     * gradients as after a training forward */
    float *g0[4] = {0};
    for (int pass = 0; pass < 2; pass++) {
        h_loss(&h, pass == 1 ? false : true);
        if (pass == 1)
            CHECK_MSG(max_abs_diff(h.out->val, ref, fl_node_size(h.out)) < 1e-5, "%s inference forward: %g vs %g",
                      what, h.out->val[0], ref[0]);
        fl_graph_clear_grads(&h.g);
        memcpy(h.out->grad, h.R, (size_t)fl_node_size(h.out) * sizeof(float));
        h.out->grad_ready = true;
        fl_graph_backward(&h.g);
        for (int i = 0; i < h.np && i < 4; i++) {
            size_t bytes = (size_t)fl_node_size(h.params[i]) * sizeof(float);
            if (pass == 0) { g0[i] = malloc(bytes); memcpy(g0[i], h.params[i]->grad, bytes); }
            else CHECK_MSG(memcmp(g0[i], h.params[i]->grad, bytes) == 0, "%s: backward after inference differs "
                           "(weight %d)", what, i);
        }
    }
    for (int i = 0; i < 4; i++) free(g0[i]);
    free(ref);
    h_free(&h);
}

static void test_rnn_ex(int cell, bool reset_after, bool seq, bool backwards, bool masked, bool bias, int act, int ract,
                        bool zero_masked, bool reverse_output) {
    test_rnn_b(3, cell, reset_after, seq, backwards, masked, bias, act, ract, zero_masked, reverse_output);
}

static void test_rnn(int cell, bool reset_after, bool seq, bool backwards, bool masked, bool bias, int act, int ract) {
    test_rnn_ex(cell, reset_after, seq, backwards, masked, bias, act, ract, false, false);
}

static void test_rnn_errors(void) {
    fl_graph g;
    fl_graph_init(&g, fl_backend_cpu());
    fl_node *x = fl_graph_input(&g, "x", 2, (int64_t[]){5, 4});
    fl_rnn_desc d = {.cell = FL_RNN_LSTM, .u = 3, .act = FL_ACT_TANH, .ract = FL_ACT_SIGMOID};
    fl_node *w = fl_graph_param(&g, "w", 2, (int64_t[]){4, 12}, true);
    fl_node *r = fl_graph_param(&g, "r", 2, (int64_t[]){3, 9}, true);
    CHECK(fl_graph_rnn(&g, "lstm_bad", x, w, r, NULL, NULL, d) == NULL);
    CHECK_MSG(strstr(fl_last_error(), "'lstm_bad' (LSTM): recurrent_kernel has shape (3, 9), expected (3, 12)") != NULL,
              "got: %s", fl_last_error());
    fl_node *m = fl_graph_input(&g, "m", 1, (int64_t[]){6});
    r = fl_graph_param(&g, "r", 2, (int64_t[]){3, 12}, true);
    CHECK(fl_graph_rnn(&g, "lstm_mask", x, w, r, NULL, m, d) == NULL);
    CHECK_MSG(strstr(fl_last_error(), "mask") && strstr(fl_last_error(), "(batch, 5)"), "got: %s", fl_last_error());
    d.act = FL_ACT_GELU;
    CHECK(fl_graph_rnn(&g, "lstm_gelu", x, w, r, NULL, NULL, d) == NULL);
    CHECK_MSG(strstr(fl_last_error(), "activation") != NULL, "got: %s", fl_last_error());
    fl_graph_free(&g);
}

/* The states at the sequence's ends (initial_state, return_state), against
 * rnn_ref_st and by finite differences for x, every weight and h0/c0. The
 * harness has one output, so the op's outputs are concatenated into one
 * (batch, ...) row: y (flattened; left out with `drop_y`, as an encoder
 * whose only consumers are its states), hT, cT, and h0 itself with
 * `h0_twice` (h0 then has two consumers: the RNN adds its dh0 to the
 * concatenation's). Sample rows of the mask as test_rnn_b. */
enum { ST_H0 = 1, ST_C0 = 2, ST_RET = 4, ST_DROP_Y = 8, ST_H0_TWICE = 16, ST_ZERO = 32, ST_C0_IS_H0 = 64 };
static void test_rnn_st(int64_t B, int64_t u, int cell, bool reset_after, bool seq, bool backwards, bool masked,
                        int flags) {
    harness h;
    const int64_t T = 5, D = 4;
    const bool lstm = cell == FL_RNN_LSTM, ret = flags & ST_RET;
    fl_rnn_desc d = {.cell = cell, .u = (int)u, .act = FL_ACT_TANH, .ract = FL_ACT_SIGMOID, .reset_after = reset_after,
                     .go_backwards = backwards, .return_sequences = seq, .zero_masked = (flags & ST_ZERO) != 0,
                     .reverse_output = (flags & ST_ZERO) != 0};
    const int64_t gu = fl_rnn_gates(&d) * u;
    h_init(&h, B, 2, (int64_t[]){T, D});
    fl_node *mask = masked ? fl_graph_input(&h.g, "mask", 1, &T) : NULL;
    fl_node *w = h_param(&h, 2, (int64_t[]){D, gu}, -0.6f, 0.6f);
    fl_node *r = h_param(&h, 2, (int64_t[]){u, gu}, -0.6f, 0.6f);
    bool two = cell == FL_RNN_GRU && reset_after;
    fl_node *b = h_param(&h, two ? 2 : 1, two ? (int64_t[]){2, gu} : (int64_t[]){gu}, -0.5f, 0.5f);
    fl_node *s0[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++)
        if (flags & (i ? ST_C0 : ST_H0)) {
            s0[i] = fl_graph_input(&h.g, i ? "c0" : "h0", 1, &u);
            s0[i]->force_grad = true;
            h.params[h.np++] = s0[i];
        }
    if (flags & ST_C0_IS_H0) s0[1] = s0[0]; /* one tensor as both initial states */
    fl_node *y = fl_graph_rnn_states(&h.g, "rnn", h.x, w, r, b, mask, s0[0], s0[1], ret, d);
    CHECK(y != NULL);
    if (!y) { fprintf(stderr, "  %s\n", fl_last_error()); h_free(&h); return; }
    CHECK(!ret || (y->rnn_state[0] && (y->rnn_state[1] != NULL) == lstm));
    fl_node *parts[4];
    int np = 0;
    if (!(flags & ST_DROP_Y)) parts[np++] = seq ? fl_graph_reshape(&h.g, "flat", y, 1, (int64_t[]){T * u}) : y;
    for (int i = 0; ret && i < 2; i++)
        if (y->rnn_state[i]) parts[np++] = y->rnn_state[i];
    if (flags & ST_H0_TWICE) parts[np++] = s0[0];
    fl_node *out = np == 1 ? parts[0] : fl_graph_merge(&h.g, "cat", FL_OP_CONCAT, parts, np, 1);
    CHECK(out != NULL);
    h_ready(&h, out, -1, 1);
    for (int i = 0; i < 2; i++)
        if (s0[i]) fill(s0[i]->val, B * u, -0.8f, 0.8f);
    if (mask)
        for (int64_t s = 0; s < B; s++)
            for (int64_t t = 0; t < T; t++)
                mask->val[s * T + t] = s % 3 == 0 ? 1.0f : s % 3 == 1 ? (t >= 2 && t < T - 1) : t == 2;
    h_loss(&h, true);
    const int64_t ny = fl_node_size(y);
    double *ry = malloc((size_t)ny * sizeof(double)), *rh = malloc((size_t)(B * u) * sizeof(double)),
           *rc = malloc((size_t)(B * u) * sizeof(double));
    rnn_ref_st(&y->rnn, B, h.x->val, w->val, r->val, b->val, mask ? mask->val : NULL, s0[0] ? s0[0]->val : NULL,
               s0[1] ? s0[1]->val : NULL, ry, rh, rc);
    char what[160];
    snprintf(what, sizeof what, "rnn states batch %lld units %lld cell=%d reset_after=%d seq=%d backwards=%d mask=%d "
             "flags=%d", (long long)B, (long long)u, cell, reset_after, seq, backwards, masked, flags);
    CHECK_MSG(max_abs_diff(y->val, ry, ny) < 1e-5, "%s forward y", what);
    if (ret) {
        CHECK_MSG(max_abs_diff(y->rnn_state[0]->val, rh, B * u) < 1e-5, "%s forward hT", what);
        if (lstm) CHECK_MSG(max_abs_diff(y->rnn_state[1]->val, rc, B * u) < 1e-5, "%s forward cT", what);
    }
    h_gradcheck(&h, what, 1e-3, 1e-2, true);
    free(ry); free(rh); free(rc);
    h_free(&h);
}

static void test_rnn_st_errors(void) {
    fl_graph g;
    fl_graph_init(&g, fl_backend_cpu());
    fl_node *x = fl_graph_input(&g, "x", 2, (int64_t[]){5, 4});
    fl_rnn_desc d = {.cell = FL_RNN_GRU, .u = 3, .act = FL_ACT_TANH, .ract = FL_ACT_SIGMOID};
    fl_node *w = fl_graph_param(&g, "w", 2, (int64_t[]){4, 9}, true);
    fl_node *r = fl_graph_param(&g, "r", 2, (int64_t[]){3, 9}, true);
    fl_node *h4 = fl_graph_input(&g, "h", 1, (int64_t[]){4}), *h3 = fl_graph_input(&g, "h", 1, (int64_t[]){3});
    CHECK(fl_graph_rnn_states(&g, "gru_h", x, w, r, NULL, NULL, h4, NULL, true, d) == NULL);
    CHECK_MSG(strstr(fl_last_error(), "'gru_h' (GRU): initial state h has shape (None, 4), expected (batch, 3)") != NULL,
              "got: %s", fl_last_error());
    CHECK(fl_graph_rnn_states(&g, "gru_c", x, w, r, NULL, NULL, h3, h3, true, d) == NULL);
    CHECK_MSG(strstr(fl_last_error(), "'gru_c' (GRU): an initial carry state c is given, but only LSTM has one") != NULL,
              "got: %s", fl_last_error());
    fl_graph_free(&g);
}

/* A normalisation that alone feeds a two-input Add takes the gradient buffer of the Add's other input (plan.c
 * grad_shared), against the same graph with the normalisation marked an output (which rules it out), params and
 * data copied, two training steps compared bit for bit:
 *  0: x -> ReLU (o) -> Conv2D 3x3 -> BN -> ReLU -> Conv2D 3x3 -> BN (s); ReLU(o + s): a residual block (shared);
 *  1: BN(Conv2D 1x1 (x)) + BN(Conv2D 3x3 (x)), then a ReLU: a projection shortcut, two normalisations (shared);
 *  2: as 0, with a third reader of o, a Conv2D made after s, added to the block's output: its backward adds into
 *     o's gradient before s's gradient is read (not shared);
 *  3: as 2, the Conv2D made after the Add: its backward writes o's gradient first (not shared);
 *  4: two residual blocks as 0, the second's first Conv2D reading the first's ReLU(o + s): all the blocks' Add
 *     gradients in one buffer (their ReLUs', their inputs', their normalisations'), the second block's first
 *     convolution storing the first ReLU's gradient masked (ops.c gated_relu). Its twin keeps every one of
 *     those apart (outputs) and masks in the Add (a backend without conv_dx_gate). */
static fl_node *shared_grad_chain(harness *h, int v, const harness *like, fl_node **s, fl_node **o) {
    static fl_backend apart;
    apart = *fl_backend_cpu();
    apart.conv_dx_gate = 0;
    const int64_t B = 4, C = 8;
    h_init(h, B, 3, (int64_t[]){6, 5, C});
    if (v == 4 && like) h->g.be = &apart;
    fl_node *bn_p[8];
    for (int k = 0; k < 4; k++) {
        bn_p[2 * k] = h_param(h, 1, &C, 0.5f, 2.0f);
        bn_p[2 * k + 1] = h_param(h, 1, &C, -1.0f, 1.0f);
    }
    fl_node *w[4];
    for (int k = 0; k < 4; k++) w[k] = h_param(h, 4, (int64_t[]){v == 1 && k == 0 ? 1 : 3, v == 1 && k == 0 ? 1 : 3, C, C},
                                               -0.4f, 0.4f);
    int nbn = 0;
    fl_node *mm[4], *mv[4];
    for (int k = 0; k < 4; k++) {
        mm[k] = fl_graph_param(&h->g, "moving_mean", 1, &C, false);
        mv[k] = fl_graph_param(&h->g, "moving_variance", 1, &C, false);
        for (int j = 0; j < C; j++) { mm[k]->val[j] = 0; mv[k]->val[j] = 1; }
    }
#define BN(y) (nbn++, fl_graph_batchnorm(&h->g, "bn", y, bn_p[2 * (nbn - 1)], bn_p[2 * (nbn - 1) + 1], mm[nbn - 1], \
                                         mv[nbn - 1], 1e-3f, 0.99f))
    fl_node *out;
    if (v == 1) {
        *o = BN(fl_graph_conv2d(&h->g, "short", h->x, w[0], NULL, 1, 1, FL_SAME, FL_ACT_LINEAR));
        *s = BN(fl_graph_conv2d(&h->g, "main", h->x, w[1], NULL, 1, 1, FL_SAME, FL_ACT_LINEAR));
        out = fl_graph_act(&h->g, "relu", fl_graph_merge(&h->g, "add", FL_OP_ADD, (fl_node *[]){*o, *s}, 2, -1),
                           FL_ACT_RELU);
    } else {
        *o = fl_graph_act(&h->g, "relu0", h->x, FL_ACT_RELU);
        fl_node *y = BN(fl_graph_conv2d(&h->g, "c1", *o, w[0], NULL, 1, 1, FL_SAME, FL_ACT_LINEAR));
        y = fl_graph_act(&h->g, "relu1", y, FL_ACT_RELU);
        *s = BN(fl_graph_conv2d(&h->g, "c2", y, w[1], NULL, 1, 1, FL_SAME, FL_ACT_LINEAR));
        fl_node *j = v == 2 ? fl_graph_conv2d(&h->g, "c3", *o, w[2], NULL, 1, 1, FL_SAME, FL_ACT_LINEAR) : NULL;
        out = fl_graph_act(&h->g, "relu2", fl_graph_merge(&h->g, "add", FL_OP_ADD, (fl_node *[]){*o, *s}, 2, -1),
                           FL_ACT_RELU);
        if (v == 3) j = fl_graph_conv2d(&h->g, "c3", *o, w[2], NULL, 1, 1, FL_SAME, FL_ACT_LINEAR);
        if (j) out = fl_graph_merge(&h->g, "add2", FL_OP_ADD, (fl_node *[]){out, j}, 2, -1);
        if (v == 4) { /* the second block, on the first's ReLU */
            fl_node *r1 = out;
            y = BN(fl_graph_conv2d(&h->g, "c3", r1, w[2], NULL, 1, 1, FL_SAME, FL_ACT_LINEAR));
            y = fl_graph_act(&h->g, "relu3", y, FL_ACT_RELU);
            fl_node *s2 = BN(fl_graph_conv2d(&h->g, "c4", y, w[3], NULL, 1, 1, FL_SAME, FL_ACT_LINEAR));
            out = fl_graph_act(&h->g, "relu4", fl_graph_merge(&h->g, "add3", FL_OP_ADD, (fl_node *[]){r1, s2}, 2, -1),
                               FL_ACT_RELU);
            out = fl_graph_act(&h->g, "out", out, FL_ACT_LINEAR); /* the loss's own buffer after the block */
            if (like) (*o)->is_output = r1->is_output = s2->is_output = out->in[0]->is_output = true;
        }
    }
#undef BN
    if (like) (*s)->is_output = true; /* its gradient apart */
    h_ready_like(h, out, like);
    return out;
}

static void test_shared_grad(int v) {
    harness h, u;
    fl_node *hs, *ho, *us, *uo;
    shared_grad_chain(&h, v, NULL, &hs, &ho);
    shared_grad_chain(&u, v, &h, &us, &uo);
    char what[64];
    snprintf(what, sizeof what, "BN gradient shared with the Add's other input, variant %d", v);
    const bool want = v < 2 || v == 4;
    CHECK_MSG((hs->grad == ho->grad) == want && us->grad != uo->grad, "%s: shared %d, expected %d (apart: %d)", what,
              hs->grad == ho->grad, want, us->grad == uo->grad);
    CHECK_MSG(!want || h.g.arena_bytes < u.g.arena_bytes, "%s: the arena did not shrink (%zu bytes, apart %zu)", what,
              h.g.arena_bytes, u.g.arena_bytes);
    fl_node *hr[2] = {NULL, NULL}, *ur[2] = {NULL, NULL}; /* v 4: the two Adds' ReLUs */
    for (int i = 0, k = 0; v == 4 && i < h.g.n; i++)
        if (h.g.nodes[i]->op == FL_OP_ADD && k < 2) {
            hr[k] = h.g.nodes[i + 1], ur[k++] = u.g.nodes[i + 1];
            const fl_node *a = h.g.nodes[i];
            CHECK_MSG(a->in[0]->grad == hr[k - 1]->grad && a->in[1]->grad == hr[k - 1]->grad &&
                          u.g.nodes[i]->in[0]->grad != ur[k - 1]->grad,
                      "%s: Add %d's inputs do not share its ReLU's gradient", what, k);
        }
    CHECK_MSG(v != 4 || (hr[1] && hr[0]->grad == hr[1]->grad), "%s: the two blocks' gradients apart", what);
    for (int step = 0; step < 2; step++) {
        h_step(&h);
        h_step(&u);
        CHECK_MSG(v != 4 || (hr[0]->grad_is_preact && !hr[1]->grad_is_preact && !ur[0]->grad_is_preact),
                  "%s: the first ReLU's gradient masked by the convolution %d (apart %d), the second's %d", what,
                  hr[0]->grad_is_preact, ur[0]->grad_is_preact, hr[1]->grad_is_preact);
        for (int t = -2; t < h.np; t++) {
            const fl_node *a = t == -2 ? h.out : t == -1 ? h.x : h.params[t];
            const fl_node *b = t == -2 ? u.out : t == -1 ? u.x : u.params[t];
            const float *p = t == -2 ? a->val : a->grad, *q = t == -2 ? b->val : b->grad;
            int differ = 0; /* equal values: a mask stored by the convolution gives +0 where the Add's gave -0 */
            for (int64_t e = 0; e < fl_node_size(a); e++) differ += !(p[e] == q[e]);
            CHECK_MSG(differ == 0,
                      "%s, step %d: %s (%d) differs from the gradients apart", what, step,
                      t == -2 ? "output" : t == -1 ? "dx" : "a parameter's gradient", t);
        }
    }
    h_free(&h);
    h_free(&u);
}

int main(void) {
    test_capability();
    test_fusion_table();
    test_philox();
    test_act_values();
    int acts[] = {FL_ACT_LINEAR, FL_ACT_RELU, FL_ACT_SIGMOID, FL_ACT_TANH, FL_ACT_LEAKY_RELU, FL_ACT_ELU};
    for (int i = 0; i < 6; i++) test_dense(acts[i], true);
    test_dense(FL_ACT_RELU, false);
    test_conv(6, 7, 3, 4, 3, 3, 1, FL_VALID, FL_ACT_LINEAR, true, 4, 5);
    test_conv(6, 7, 3, 4, 3, 3, 1, FL_VALID, FL_ACT_RELU, true, 4, 5);
    test_conv(6, 7, 2, 3, 3, 3, 1, FL_SAME, FL_ACT_TANH, true, 6, 7);
    test_conv(7, 8, 2, 3, 3, 2, 2, FL_SAME, FL_ACT_LINEAR, false, 4, 4);
    test_conv(7, 8, 2, 3, 3, 3, 2, FL_VALID, FL_ACT_SIGMOID, true, 3, 3);
    test_conv(5, 5, 4, 6, 1, 1, 1, FL_VALID, FL_ACT_LINEAR, true, 5, 5); /* 1x1: direct GEMM path */
    test_conv(8, 8, 1, 2, 4, 4, 1, FL_SAME, FL_ACT_ELU, true, 8, 8);     /* even kernel: asymmetric padding */
    test_conv_big_batch();
    test_pool(FL_OP_MAXPOOL, 6, 6, 3, 2, 2, FL_VALID, 3, 3);
    test_pool(FL_OP_MAXPOOL, 7, 5, 2, 3, 2, FL_VALID, 3, 2);
    test_pool(FL_OP_MAXPOOL, 7, 5, 2, 2, 2, FL_SAME, 4, 3);
    test_pool(FL_OP_AVGPOOL, 6, 6, 3, 2, 2, FL_VALID, 3, 3);
    test_pool(FL_OP_AVGPOOL, 7, 5, 2, 3, 1, FL_SAME, 7, 5);
    test_gap();
    test_reshape();
    test_dropout();
    test_batchnorm();
    for (int a = FL_ACT_LINEAR; a <= FL_ACT_ELU; a++) test_act(a);
    test_merge(FL_OP_ADD, 0);
    test_merge(FL_OP_MUL, 0);
    test_merge(FL_OP_CONCAT, -1);
    test_merge(FL_OP_CONCAT, 1);
    test_shared_weights(false);
    test_shared_weights(true);
    test_shared_weights_pooled();
    test_shape_errors();
    test_pad2d(1, 1, 1, 1);
    test_pad2d(0, 2, 3, 1);   /* asymmetric, as MobileNetV2's correct_pad */
    test_pad2d(-1, -2, 0, -1); /* cropping */
    test_pad2d(2, -1, -1, 3);  /* both at once */
    test_conv1d_form();
    test_arith(FL_OP_SUB);
    test_arith(FL_OP_AVG);
    test_arith(FL_OP_MAX);
    test_arith(FL_OP_MIN);
    /* the later activations fused into Dense (last, so that the random
     * data of the tests above stay as they were) */
    for (int a = FL_ACT_ELU + 1; a < FL_ACT_COUNT; a++) {
        test_act(a);
        if (fl_act_grad_from_output(a)) test_dense(a, true);
    }
    /* the activation and preprocessing layers with parameters */
    test_pact_values();
    test_pact((fl_pact_desc){FL_PACT_RELU, 0, 0, 6}, "ReLU(6.0)");
    test_pact((fl_pact_desc){FL_PACT_RELU, 0, 0, INFINITY}, "ReLU()");
    test_pact_fast_relu();
    test_bn_threads();
    test_pact((fl_pact_desc){FL_PACT_RELU, 0.1f, 0.5f, 5}, "ReLU(5.0, negative_slope=0.1, threshold=0.5)");
    test_pact((fl_pact_desc){FL_PACT_RELU, 0.3f, 0, INFINITY}, "LeakyReLU()");
    test_pact((fl_pact_desc){FL_PACT_ELU, 0.7f, 0, 0}, "ELU(0.7)");
    test_pact((fl_pact_desc){FL_PACT_AFFINE, 1.0f / 255, -1, 0}, "Rescaling(1/255, -1)");
    test_softmax_axis(1);
    test_softmax_axis(2);
    test_softmax_axis(-1);
    test_prelu(0, 0);
    test_prelu(1, 2);
    test_prelu(2, 0);
    test_prelu(1, 3);
    test_normalize(1, false);
    test_normalize(0, false);
    test_normalize(-1, false);
    test_normalize(1, true);
    test_prelu_shared();
    /* DepthwiseConv2D (last, so that the random data above stay as they were) */
    test_depthwise(2, 6, 7, 3, 1, 3, 3, 1, 1, FL_VALID, FL_ACT_LINEAR, true, 4, 5);
    test_depthwise(2, 6, 7, 3, 2, 3, 3, 1, 1, FL_VALID, FL_ACT_TANH, true, 4, 5);
    test_depthwise(2, 6, 7, 4, 1, 3, 3, 1, 1, FL_SAME, FL_ACT_SIGMOID, true, 6, 7);
    test_depthwise(2, 7, 8, 3, 2, 3, 3, 2, 2, FL_SAME, FL_ACT_LINEAR, false, 4, 4);
    test_depthwise(2, 7, 8, 2, 1, 3, 3, 2, 2, FL_VALID, FL_ACT_ELU, true, 3, 3);
    test_depthwise(2, 8, 8, 3, 1, 4, 4, 1, 1, FL_SAME, FL_ACT_LINEAR, true, 8, 8); /* even: asymmetric padding */
    test_depthwise(2, 8, 9, 2, 3, 2, 3, 2, 1, FL_SAME, FL_ACT_SOFTSIGN, true, 4, 9); /* non-square, dm 3 */
    test_depthwise(1, 9, 6, 5, 2, 2, 4, 1, 2, FL_VALID, FL_ACT_LINEAR, true, 8, 2);
    test_depthwise(2, 5, 5, 3, 1, 5, 3, 2, 2, FL_SAME, FL_ACT_LINEAR, true, 3, 3); /* window wider than padding */
    test_depthwise(2, 3, 3, 2, 2, 5, 5, 1, 1, FL_SAME, FL_ACT_TANH, true, 3, 3);   /* kernel larger than the image */
    test_depthwise(37, 9, 9, 16, 1, 3, 3, 1, 1, FL_SAME, FL_ACT_LINEAR, true, 9, 9); /* both threads */
    test_depthwise(33, 9, 8, 8, 2, 3, 3, 2, 2, FL_SAME, FL_ACT_SIGMOID, true, 5, 4);
    test_depthwise_chain();
    test_depthwise(3, 6, 6, 20, 1, 3, 3, 1, 1, FL_SAME, FL_ACT_LINEAR, true, 6, 6);  /* 16 in registers + 4 */
    test_depthwise(3, 7, 6, 35, 1, 3, 2, 2, 2, FL_VALID, FL_ACT_SIGMOID, false, 3, 3);
    test_bmerge(FL_OP_MUL, false, false);
    test_bmerge(FL_OP_MUL, true, true);
    test_bmerge(FL_OP_ADD, false, true);
    test_bmerge(FL_OP_ADD, true, false);
    /* UpSampling2D, Conv2DTranspose, Permute (appended: the streams above stay) */
    test_upsample2d(3, 4, 2, 2, 2, false);
    test_upsample2d(3, 4, 2, 2, 3, false);
    test_upsample2d(3, 4, 2, 2, 2, true);
    test_upsample2d(4, 3, 3, 3, 2, true);
    test_upsample2d(1, 5, 2, 4, 1, true);
    /* expected sizes: Keras 3.15's Conv2DTranspose.compute_output_shape */
    test_conv_transpose(3, 4, 5, 3, 2, 3, 3, 1, 1, FL_VALID, FL_ACT_LINEAR, true, 6, 7);
    test_conv_transpose(3, 4, 5, 3, 2, 3, 3, 2, 2, FL_SAME, FL_ACT_LINEAR, true, 8, 10);
    /* ReLU at stride 1: at stride 2 some outputs get one tap only, and so many
     * lie within the difference step of the kink that the check fails */
    test_conv_transpose(3, 4, 5, 3, 2, 3, 3, 1, 1, FL_SAME, FL_ACT_RELU, true, 4, 5);
    test_conv_transpose(3, 4, 5, 3, 2, 3, 3, 2, 2, FL_VALID, FL_ACT_TANH, false, 9, 11);
    test_conv_transpose(2, 4, 5, 2, 3, 2, 2, 3, 3, FL_VALID, FL_ACT_LINEAR, true, 12, 15); /* k < s: gaps */
    test_conv_transpose(2, 4, 5, 2, 3, 5, 5, 3, 3, FL_SAME, FL_ACT_SIGMOID, true, 12, 15);
    test_conv_transpose(2, 4, 5, 2, 3, 4, 4, 2, 2, FL_SAME, FL_ACT_LINEAR, true, 8, 10);  /* even kernel */
    test_conv_transpose(2, 4, 5, 3, 4, 3, 2, 2, 1, FL_VALID, FL_ACT_ELU, true, 9, 6);     /* non-square */
    test_conv_transpose(2, 4, 5, 3, 4, 3, 2, 1, 3, FL_SAME, FL_ACT_LINEAR, true, 4, 15);
    test_conv_transpose(2, 4, 5, 4, 3, 1, 1, 1, 1, FL_VALID, FL_ACT_LINEAR, true, 4, 5);  /* 1x1: one GEMM */
    test_conv_transpose(37, 5, 4, 3, 4, 3, 3, 2, 2, FL_SAME, FL_ACT_LINEAR, true, 10, 8); /* chunks, threads */
    test_permute(3, (int64_t[]){2, 3, 4}, (int[]){2, 0, 1});
    test_permute(3, (int64_t[]){2, 3, 4}, (int[]){1, 0, 2});
    test_permute(3, (int64_t[]){2, 3, 4}, (int[]){0, 2, 1});
    test_permute(2, (int64_t[]){3, 5}, (int[]){1, 0});
    test_permute(4, (int64_t[]){2, 3, 2, 3}, (int[]){3, 1, 0, 2});
    test_permute_shared_input();
    test_new_layout_shape_errors();
    test_dropout_noise((int64_t[]){1, 1, 1}, "dropout noise (1, 1, 1)");
    test_dropout_noise((int64_t[]){1, 1, 5}, "dropout noise (1, 1, c)");
    /* both threads, an activation and no bias: the activation pass has no
     * bias sums, and must not add dy's column sums into the kernel's */
    test_depthwise(33, 9, 8, 8, 2, 3, 3, 2, 2, FL_SAME, FL_ACT_SIGMOID, false, 5, 4);
    /* dilation and groups (appended: the streams above stay). Expected sizes:
     * "same" ceil(in / s); "valid" in - (k - 1) * dil, then / s */
    test_conv_dg(3, 9, 8, 3, 4, 3, 3, 1, 2, 2, 1, FL_VALID, FL_ACT_LINEAR, true, 5, 4);
    test_conv_dg(3, 9, 8, 3, 4, 3, 3, 1, 2, 2, 1, FL_SAME, FL_ACT_TANH, true, 9, 8);
    test_conv_dg(2, 10, 9, 2, 3, 2, 3, 1, 3, 2, 1, FL_SAME, FL_ACT_LINEAR, false, 10, 9); /* even kernel, asymmetric */
    test_conv_dg(2, 11, 7, 3, 5, 3, 2, 1, 1, 3, 1, FL_VALID, FL_ACT_SIGMOID, true, 9, 4); /* dilation on one axis */
    test_conv_dg(3, 7, 6, 4, 6, 3, 3, 1, 1, 1, 2, FL_VALID, FL_ACT_LINEAR, true, 5, 4);   /* groups, no dilation */
    test_conv_dg(3, 7, 6, 6, 9, 3, 2, 2, 1, 1, 3, FL_SAME, FL_ACT_RELU, true, 4, 3);      /* groups, strides */
    test_conv_dg(2, 9, 9, 6, 4, 3, 3, 1, 2, 2, 2, FL_SAME, FL_ACT_LINEAR, false, 9, 9);   /* both */
    test_conv_dg(2, 8, 7, 6, 6, 3, 3, 2, 2, 2, 2, FL_SAME, FL_ACT_LINEAR, true, 4, 4);    /* strides with dilation (op) */
    test_conv_dg(2, 6, 5, 4, 4, 1, 1, 1, 1, 1, 2, FL_VALID, FL_ACT_LINEAR, true, 6, 5);   /* 1x1 grouped */
    test_conv_dg(2, 7, 6, 4, 8, 3, 3, 1, 2, 1, 4, FL_SAME, FL_ACT_TANH, true, 7, 6);      /* groups = c: depthwise */
    test_conv_dg(37, 9, 8, 4, 6, 3, 3, 1, 2, 2, 2, FL_SAME, FL_ACT_LINEAR, true, 9, 8);   /* chunks, threads */
    test_depthwise_dil(2, 9, 8, 3, 1, 3, 1, 2, 2, FL_VALID, FL_ACT_LINEAR, 5, 4);
    test_depthwise_dil(2, 9, 8, 3, 2, 3, 1, 2, 3, FL_SAME, FL_ACT_TANH, 9, 8);
    test_depthwise_dil(2, 8, 8, 20, 1, 2, 1, 3, 3, FL_SAME, FL_ACT_LINEAR, 8, 8);  /* 16 in registers + 4, even */
    test_depthwise_dil(2, 9, 9, 3, 1, 3, 2, 2, 2, FL_SAME, FL_ACT_SIGMOID, 5, 5);  /* strides with dilation (op) */
    test_depthwise_dil(37, 9, 9, 16, 1, 3, 1, 2, 2, FL_SAME, FL_ACT_LINEAR, 9, 9); /* both threads */
    test_conv1d_dilated(11, 2, 4, 3, 2, 1);
    test_conv1d_dilated(12, 4, 6, 2, 3, 2);
    test_conv1d_dilated(9, 3, 3, 3, 2, 3); /* groups = channels: depthwise */
    test_resize2d(4, 6, 2, 7, 4, true);   /* up on one axis, down on the other */
    test_resize2d(6, 8, 3, 3, 3, true);   /* down by 2 and 8/3 */
    test_resize2d(3, 5, 2, 9, 10, true);  /* integer factors: as UpSampling2D */
    test_resize2d(5, 7, 2, 3, 11, false);
    test_resize2d(6, 4, 2, 4, 6, false);
    test_resize2d(2, 3, 1, 1, 1, true);
    test_dg_shape_errors();
    /* the fused Conv(ReLU) -> Conv -> MaxPool backward (mnist_cnn's): its
     * shapes, odd sizes with a row and column no window covers, and more
     * than 16 filters (a vector and a remainder) */
    test_fused_conv_relu_conv_pool(10, 10, 1, 4, 8, 2);
    for (int k = 0; k < 4; k++) test_bn_relu_fused(k & 1, k >> 1, 0);
    test_bn_relu_fused(0, 2, 0); /* a LeakyReLU */
    test_fused_conv_relu_conv_pool(9, 11, 2, 5, 19, 2);
    test_fused_conv_relu_conv_pool(10, 10, 3, 8, 6, 3);
    /* recurrent layers (appended: the streams above stay) */
    for (int cell = FL_RNN_SIMPLE; cell <= FL_RNN_GRU; cell++)
        for (int v = 0; v < 6; v++) /* seq, backwards, mask, no bias in turn */
            test_rnn(cell, v != 4, v & 1, v == 2 || v == 5, v >= 3, v != 4, FL_ACT_TANH, FL_ACT_SIGMOID);
    test_rnn(FL_RNN_GRU, false, true, true, true, true, FL_ACT_TANH, FL_ACT_SIGMOID);
    test_rnn(FL_RNN_GRU, false, false, false, false, true, FL_ACT_TANH, FL_ACT_HARD_SIGMOID);
    test_rnn(FL_RNN_LSTM, false, true, false, true, true, FL_ACT_RELU, FL_ACT_HARD_SIGMOID);
    test_rnn(FL_RNN_SIMPLE, false, true, true, false, true, FL_ACT_LINEAR, FL_ACT_SIGMOID);
    test_rnn_errors();
    /* Bidirectional's forms: zero outputs at masked steps, the output sequence reversed */
    test_rnn_ex(FL_RNN_LSTM, false, true, true, true, true, FL_ACT_TANH, FL_ACT_SIGMOID, true, true);
    test_rnn_ex(FL_RNN_GRU, true, true, false, true, true, FL_ACT_TANH, FL_ACT_SIGMOID, true, false);
    test_rnn_ex(FL_RNN_GRU, true, false, true, true, true, FL_ACT_TANH, FL_ACT_SIGMOID, true, false);
    test_rnn_ex(FL_RNN_SIMPLE, false, false, false, true, true, FL_ACT_TANH, FL_ACT_SIGMOID, true, false);
    /* 37 samples: the recurrence split over the threads by rows (8 or more each) */
    test_rnn_b(37, FL_RNN_LSTM, false, true, true, true, true, FL_ACT_TANH, FL_ACT_SIGMOID, false, false);
    test_rnn_b(37, FL_RNN_GRU, false, false, false, true, true, FL_ACT_TANH, FL_ACT_SIGMOID, false, false);
    test_rnn_b(37, FL_RNN_GRU, true, true, false, true, true, FL_ACT_TANH, FL_ACT_SIGMOID, true, true);
    /* sequences: Embedding, masks, masked pooling */
    test_embedding();
    test_masked_gap1d();
    test_seq_mask();
    /* LayerNormalization, attention, RepeatVector (appended: the streams above stay) */
    test_layernorm(1, false, true, true);
    test_layernorm(2, false, true, true);
    test_layernorm(3, false, false, true);
    test_layernorm(1, false, true, false);
    test_layernorm(1, true, true, false); /* rms_scaling */
    test_attention_op(2, 4, 5, 2, 3, 2, false, 0, 0);
    test_attention_op(2, 5, 5, 1, 4, 4, true, 0, 0);
    test_attention_op(2, 5, 6, 2, 2, 3, false, 7, 0);
    test_attention_op(2, 6, 6, 3, 2, 2, true, 3, 0);
    test_attention_op(2, 4, 5, 1, 3, 3, false, 3, 1); /* the Attention layer's masking */
    test_attention_op(2, 5, 5, 1, 3, 3, true, 2, 1);
    test_mha(5, 6, 2, 3, 3, false, false);
    test_mha(5, 6, 2, 3, 2, true, false);
    test_mha(6, 4, 3, 2, 4, false, true);
    test_mha(6, 4, 1, 4, 4, true, true);
    test_repeat();
    /* MultiHeadAttention without dropout (Keras on JAX): fully masked rows uniform, no gradient through them */
    test_attention_op(2, 6, 6, 2, 3, 2, false, 7, 2);
    test_attention_op(2, 6, 5, 1, 2, 3, true, 1, 2);
    test_batchnorm_frozen();
    /* the Attention layer's learned scores: use_scale, score_mode "concat", both */
    test_attention_op_(2, 4, 5, 1, 3, 3, false, 0, 1, 1);
    test_attention_op_(2, 5, 5, 1, 3, 2, true, 3, 1, 1);
    test_attention_op_(2, 4, 5, 1, 3, 3, false, 2, 1, 2);
    test_attention_op_(2, 5, 4, 1, 6, 2, false, 3, 1, 3);
    test_attention_op_(3, 5, 5, 1, 2, 4, true, 2, 1, 3);
    /* the unmasked softmax's vector path (cpu_attention.c): rows longer than a vector, with a remainder */
    test_attention_op(3, 9, 37, 2, 4, 3, false, 0, 0);
    test_attention_op(2, 7, 19, 1, 3, 2, false, 0, 1);
    /* the states at the sequence's ends (initial_state, return_state): every
     * cell and GRU form, each path, with and without masks and go_backwards;
     * units and batches off the vector widths */
    const int cells[4][2] = {{FL_RNN_SIMPLE, 0}, {FL_RNN_LSTM, 0}, {FL_RNN_GRU, 1}, {FL_RNN_GRU, 0}};
    for (int c = 0; c < 4; c++) {
        const int cell = cells[c][0], ra = cells[c][1], c0 = cell == FL_RNN_LSTM ? ST_C0 : 0;
        test_rnn_st(3, 3, cell, ra, false, false, false, ST_H0 | c0 | ST_RET);
        test_rnn_st(3, 3, cell, ra, true, true, true, ST_H0 | c0 | ST_RET);
        test_rnn_st(3, 3, cell, ra, false, true, true, ST_RET | ST_DROP_Y);
        test_rnn_st(3, 3, cell, ra, true, false, true, ST_H0 | c0 | ST_RET | ST_H0_TWICE);
        test_rnn_st(3, 3, cell, ra, true, true, true, ST_H0 | ST_RET | ST_ZERO);
        test_rnn_st(3, 3, cell, ra, true, false, true, ST_H0 | c0);
        test_rnn_st(3, 3, cell, ra, false, false, true, ST_H0 | c0 | ST_RET | ST_DROP_Y);
        test_rnn_st(37, 19, cell, ra, true, c & 1, true, ST_H0 | c0 | ST_RET);
    }
    test_rnn_st(5, 3, FL_RNN_LSTM, false, false, true, true, ST_C0 | ST_RET | ST_DROP_Y); /* c0 alone */
    test_rnn_st(5, 3, FL_RNN_LSTM, false, true, false, true, ST_H0 | ST_C0_IS_H0 | ST_RET);
    test_rnn_st(5, 3, FL_RNN_LSTM, false, true, false, true, ST_H0 | ST_C0_IS_H0 | ST_RET | ST_H0_TWICE);
    test_rnn_st_errors();
    /* training fusions, checked bit for bit against the layers apart (appended: the streams above stay) */
    for (int k = 0; k < 5; k++) test_add_relu_train(k);
    for (int v = 0; v < 6; v++) test_conv_bn_fused(v);
    for (int k = 0; k < 4; k++) test_bn_relu_fused(k & 1, k >> 1, 1);
    test_bn_relu_fused(0, 2, 1);
    for (int k = 0; k < 3; k++) test_attention_blocked(k);
    /* a normalisation's affine left to the Add after it (appended: the streams above stay) */
    for (int k = 0; k < 4; k++) test_bn_add_train(k);
    /* a normalisation's affine and ReLU formed by the convolution after it (appended: the streams above stay) */
    for (int v = 0; v < 9; v++) test_bn_into_conv(v);
    for (int v = 0; v < 6; v++) test_pad_into_conv(v);
    /* a broadcast along the channels (appended: the streams above stay) */
    test_bmerge_as(FL_OP_MUL, false, false, true);
    test_bmerge_as(FL_OP_ADD, true, false, true);
    /* a normalisation's gradient in the buffer of the Add's other input (appended: the streams above stay) */
    for (int v = 0; v < 5; v++) test_shared_grad(v);
    /* a normalisation formed by a strided convolution, whose data gradient runs in phases (appended) */
    test_bn_into_conv(9);
    test_bn_into_conv(10);
    return check_report("test_ops");
}
