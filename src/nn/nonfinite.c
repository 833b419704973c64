/*
 * nonfinite.c — TerminateOnNaN (fit.h): the first NaN or infinity in x, a weight, the loss or a layer's
 * value or gradient, found and named (sample and feature, layer and index) in one sentence.
 */
#include "nn/fit.h"
#include "nn/step.h"
#include "core/error.h"
#include "core/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ops/ops.h"

/* Index of the first NaN or infinity in p[0..n), or -1. The usual case, all
 * finite, is one branch-free pass over the exponent bits that the compiler
 * vectorises (a non-finite float has all 8 exponent bits set). */
int64_t fl_first_nonfinite(const float *p, int64_t n) {
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, p + i, sizeof u);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    if (!bad) return -1;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(p[i])) return i;
    return -1;
}

const char *fl_nonfinite_name(float v) { return isnan(v) ? "NaN" : v > 0 ? "inf" : "-inf"; }

/* "(3, 7, 0)": flat index i of a sample of shape dims[0..nd) as an index tuple. */
const char *fl_index_str(int64_t i, int nd, const int64_t *dims, char *buf, size_t n) {
    int64_t ix[FL_MAX_DIMS];
    for (int k = nd - 1; k >= 0; k--) { ix[k] = dims[k] > 0 ? i % dims[k] : 0; i = dims[k] > 0 ? i / dims[k] : 0; }
    return fl_shape_str(nd, ix, buf, n);
}

/* The batch just gathered into the input node (host memory: still in
 * cache, so the check costs a fraction of the gather), or with idx == NULL
 * all of x before training (device backends, where the batch is gathered on
 * the device): the first sample holding a NaN or an infinity stops
 * training, named by its index in x and its feature. */
fl_status fl_check_x_finite(const fl_model *m, const fl_batches *d, int k, const float *rows, const int64_t *idx,
                                int64_t b, int ep, int epochs, int64_t step, int64_t steps) {
    const int64_t xrow = d->xrow[k];
    const fl_node *in = d->in[k];
    int64_t f = fl_first_nonfinite(rows, b * xrow);
    if (f < 0) return FL_OK;
    int64_t i = f / xrow, sample = idx ? idx[i] : i;
    f %= xrow;
    char when[96], a[128], c[128];
    if (idx)
        snprintf(when, sizeof when, "epoch %d/%d, step %lld/%lld", ep + 1, epochs, (long long)step + 1, (long long)steps);
    else
        snprintf(when, sizeof when, "before epoch %d", ep + 1);
    const float *row = rows + i * xrow;
    char which[96] = "x";
    if (d->nx > 1) snprintf(which, sizeof which, "input %d '%s'", k, in->name);
    return fl_error(FL_ERR_NONFINITE,
                    "fl_fit: %s: %s[%lld] holds %s at feature %lld (index %s of the sample shape %s); training "
                    "stopped (TerminateOnNaN) before this step, model '%s' is unchanged by it; fix the data, or set "
                    ".no_nan_check (flynn train --no-nan-check)", when, which, (long long)sample, fl_nonfinite_name(row[f]),
                    (long long)f, fl_index_str(f, in->ndim - 1, in->shape + 1, a, sizeof a),
                    fl_shape_str(in->ndim - 1, in->shape + 1, c, sizeof c), m->name);
}

/* First non-finite value of a backend buffer of n floats (host is scratch
 * of at least n floats for device backends), or -1. */
static int64_t buffer_nonfinite(const fl_backend *be, const float *buf, int64_t n, float *host, float *v) {
    const float *p = buf;
    if (!be->host_memory) {
        be->download(host, buf, (size_t)n * sizeof(float));
        p = host;
    }
    int64_t i = fl_first_nonfinite(p, n);
    if (i >= 0) *v = p[i];
    return i;
}

/* True (and a sentence in why) when a weight holds NaN or an infinity.
 * host: scratch of the largest node's size for device backends. */
bool fl_weights_nonfinite(fl_model *m, float *host, char *why, size_t len) {
    fl_graph *g = &m->g;
    char a[128];
    float v = 0;
    for (int i = 0; i < g->n; i++) { /* in the order the layers made them */
        fl_node *n = g->nodes[i];
        if (n->op != FL_OP_PARAM) continue;
        int64_t at = buffer_nonfinite(g->be, n->val, fl_node_size(n), host, &v);
        if (at < 0) continue;
        char b[128];
        snprintf(why, len, "layer '%s' has a weight of shape %s holding %s at index %s", n->name,
                 fl_shape_str(n->ndim, n->shape, a, sizeof a), fl_nonfinite_name(v), fl_index_str(at, n->ndim, n->shape, b, sizeof b));
        return true;
    }
    return false;
}

/* Scratch for reading any node of the graph back from a device (NULL on the host). */
float *fl_node_scratch(const fl_graph *g, bool *failed) {
    *failed = false;
    if (g->be->host_memory) return NULL;
    int64_t most = 1;
    for (int i = 0; i < g->n; i++)
        if (fl_node_size(g->nodes[i]) > most) most = fl_node_size(g->nodes[i]);
    float *h = malloc((size_t)most * sizeof(float));
    *failed = h == NULL;
    return h;
}

typedef struct grad_watch { const fl_backend *be; float *host; float v; } grad_watch;

static bool grad_nonfinite(void *ctx, const fl_node *n) {
    grad_watch *w = ctx;
    return n->grad && n->needs_grad && buffer_nonfinite(w->be, n->grad, fl_node_size(n), w->host, &w->v) >= 0;
}

/* The loss came out NaN or infinite: a diagnostic forward and backward pass
 * on the batch in the graph names the first layer whose weight, output or
 * gradient is not finite. Writes one sentence into why. */
static void diagnose_nonfinite(fl_model *m, char *why, size_t len) {
    fl_graph *g = &m->g;
    const fl_backend *be = g->be;
    bool nomem;
    float *host = fl_node_scratch(g, &nomem);
    if (nomem) { snprintf(why, len, "no memory to look for the layer"); return; }
    char a[128];
    float v = 0;
    int64_t at;
    if (fl_weights_nonfinite(m, host, why, len)) {
        snprintf(why + strlen(why), len - strlen(why), " (an earlier update overflowed: lower the learning rate?)");
        free(host);
        return;
    }
    fl_graph_clear_grads(g);
    fl_graph_forward(g, true);
    for (int i = 0; i < g->n; i++) { /* outputs, in topological order */
        fl_node *n = g->nodes[i];
        if (n->op == FL_OP_PARAM || n->op == FL_OP_INPUT || !n->val) continue;
        if ((at = buffer_nonfinite(be, n->val, fl_node_size(n), host, &v)) >= 0) {
            int64_t per = fl_node_sample_size(n);
            snprintf(why, len, "layer '%s' (op %s) is the first whose output is not finite: %s in sample %lld of "
                     "the batch at index %s (finite inputs and weights: the values overflowed float32 there; "
                     "lower the learning rate, or normalise the inputs?)", n->name, fl_op_name(n->op),
                     fl_nonfinite_name(v), (long long)(at / per), fl_index_str(at % per, n->ndim - 1, n->shape + 1, a, sizeof a));
            free(host);
            return;
        }
    }
    fl_loss_and_metrics(m, true);
    int64_t rows = fl_node_size(m->output) / fl_out_classes(m);
    if ((at = buffer_nonfinite(be, m->row_loss, rows, host, &v)) >= 0) {
        snprintf(why, len, "every layer's output is finite, but the %s loss of output row %lld is %s (a target "
                 "outside the loss's range, or too large for float32?)", fl_loss_name(m->loss.kind),
                 (long long)at, fl_nonfinite_name(v));
        free(host);
        return;
    }
    /* gradients, in the order backward makes them, each looked at when it is complete (the buffers of
     * gradients share memory: a later one may take its place) */
    grad_watch w = {be, host, 0.0f};
    int bad = fl_graph_backward_watch(g, grad_nonfinite, &w);
    if (bad >= 0) {
        const fl_node *n = g->nodes[bad];
        snprintf(why, len, "the outputs and the loss are finite on a second pass, and layer '%s' (op %s) is the "
                 "first whose gradient is not finite (%s)", n->name, fl_op_name(n->op), fl_nonfinite_name(w.v));
        free(host);
        return;
    }
    snprintf(why, len, "a second pass over the same batch is finite everywhere (a non-deterministic overflow?)");
    free(host);
}

/* The loss after step `step` (1-based; on device backends, seen at some
 * step in (from, step]) was `loss`: stop with the diagnosis. */
fl_status fl_nonfinite_loss(fl_model *m, double loss, int ep, int epochs, int64_t from, int64_t step,
                                int64_t steps) {
    char why[768], when[96];
    diagnose_nonfinite(m, why, sizeof why);
    if (from + 1 < step)
        snprintf(when, sizeof when, "between steps %lld and %lld/%lld", (long long)from + 1, (long long)step,
                 (long long)steps);
    else
        snprintf(when, sizeof when, "step %lld/%lld", (long long)step, (long long)steps);
    return fl_error(FL_ERR_NONFINITE,
                    "fl_fit: epoch %d/%d, %s: the %s loss is %s; %s; training stopped (TerminateOnNaN)%s; set "
                    ".no_nan_check (flynn train --no-nan-check) to train on anyway", ep + 1, epochs, when,
                    fl_loss_name(m->loss.kind), isnan(loss) ? "NaN" : loss > 0 ? "inf" : "-inf", why,
                    m->g.be->host_memory && !m->g.be->graph_begin
                        ? " before the update: the weights are those of the step before" : "");
}
