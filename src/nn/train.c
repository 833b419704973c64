/*
 * train.c — compile, fit, evaluate and predict: the training loop (batching,
 * shuffling, the loss and its fused gradients, the optimizer step, metrics),
 * the Keras progress bar, and History.
 */
#include "nn.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "dist/data_parallel.h"
#include "dist/mpi.h"
#include "ops/math.h"
#include "ops/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *fl_loss_name(fl_loss_kind k) {
    switch (k) {
    case FL_LOSS_CATEGORICAL_CROSSENTROPY: return "categorical_crossentropy";
    case FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY: return "sparse_categorical_crossentropy";
    case FL_LOSS_BINARY_CROSSENTROPY: return "binary_crossentropy";
    case FL_LOSS_MEAN_SQUARED_ERROR: return "mean_squared_error";
    default: return "none";
    }
}

static const char *metric_key(fl_metric m) {
    switch (m) {
    case FL_ACCURACY: return "accuracy";
    case FL_CATEGORICAL_ACCURACY: return "categorical_accuracy";
    case FL_SPARSE_CATEGORICAL_ACCURACY: return "sparse_categorical_accuracy";
    case FL_BINARY_ACCURACY: return "binary_accuracy";
    default: return "?";
    }
}

static int out_classes(const fl_model *m) { return (int)m->output->shape[m->output->ndim - 1]; }

/* m->stats: the running loss, the metrics, and the count of valid rows of a masked output (kept by
 * loss_mask; Keras's metrics do not use it) */
#define FL_STAT_VALID (1 + FL_MAX_METRICS)
#define FL_STATS (2 + FL_MAX_METRICS)

/* The output's mask when the loss applies it: a rank-3 (or more) output
 * whose mask has one value per row of the loss (Keras: the _keras_mask of
 * y_pred weighs the loss). */
static const fl_node *loss_mask_of(const fl_model *m) {
    const fl_node *o = m->output, *k = o->mask;
    return k && fl_node_sample_size(k) * out_classes(m) == fl_node_sample_size(o) ? k : NULL;
}


/* ------------------------------------------------------------ compile */

fl_status fl_compile_(fl_model *m, fl_optimizer *opt, fl_loss loss, const fl_metric *metrics, int n) {
    if (!m) { fl_optimizer_free(opt); return fl_error(FL_ERR_INVALID_ARG, "fl_compile: model is NULL"); }
    if (!opt) {
        if (fl_last_status() != FL_OK) {
            fl_error_prefix("fl_compile: the optimizer could not be created: ");
            return fl_last_status();
        }
        return fl_error(FL_ERR_INVALID_ARG, "fl_compile: optimizer is NULL");
    }
    if (loss.kind < FL_LOSS_CATEGORICAL_CROSSENTROPY || loss.kind > FL_LOSS_MEAN_SQUARED_ERROR) {
        fl_optimizer_free(opt);
        return fl_error(FL_ERR_INVALID_ARG, "fl_compile: loss kind %d is not an fl_loss_kind", (int)loss.kind);
    }
    if (n > FL_MAX_METRICS) {
        fl_optimizer_free(opt);
        return fl_error(FL_ERR_INVALID_ARG, "fl_compile: %d metrics, at most %d", n, FL_MAX_METRICS);
    }
    int codes[FL_MAX_METRICS];
    for (int i = 0; i < n; i++) {
        fl_metric mt = metrics[i];
        switch (mt) {
        case FL_ACCURACY:
            /* Keras: resolved from the loss, else from the shapes */
            if (loss.kind == FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY) codes[i] = FL_MC_SPARSE_CATEGORICAL;
            else if (loss.kind == FL_LOSS_CATEGORICAL_CROSSENTROPY) codes[i] = FL_MC_CATEGORICAL;
            else if (loss.kind == FL_LOSS_BINARY_CROSSENTROPY || out_classes(m) == 1) codes[i] = FL_MC_BINARY;
            else codes[i] = FL_MC_CATEGORICAL;
            break;
        case FL_CATEGORICAL_ACCURACY: codes[i] = FL_MC_CATEGORICAL; break;
        case FL_SPARSE_CATEGORICAL_ACCURACY: codes[i] = FL_MC_SPARSE_CATEGORICAL; break;
        case FL_BINARY_ACCURACY: codes[i] = FL_MC_BINARY; break;
        default:
            fl_optimizer_free(opt);
            return fl_error(FL_ERR_INVALID_ARG, "fl_compile: metric %d (position %d) is not an fl_metric", (int)mt, i);
        }
        if (codes[i] == FL_MC_SPARSE_CATEGORICAL && loss.kind != FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY) {
            fl_optimizer_free(opt);
            return fl_error(FL_ERR_INVALID_ARG,
                            "fl_compile: sparse_categorical_accuracy needs class-index targets, i.e. the loss "
                            "sparse_categorical_crossentropy (the loss is %s)", fl_loss_name(loss.kind));
        }
    }
    if (loss.kind == FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY && out_classes(m) < 2) {
        fl_optimizer_free(opt);
        return fl_error(FL_ERR_SHAPE, "fl_compile: sparse_categorical_crossentropy needs an output with >= 2 classes, "
                        "model '%s' outputs %d", m->name, out_classes(m));
    }
    fl_status s = fl_optimizer_bind(opt, &m->g);
    if (s != FL_OK) { fl_optimizer_free(opt); return s; }
    fl_optimizer_free(m->opt);
    m->opt = opt;
    m->loss = loss;
    m->nmetrics = n;
    for (int i = 0; i < n; i++) { m->metrics[i] = metrics[i]; m->metric_codes[i] = codes[i]; }
    m->compiled = true;
    return FL_OK;
}

/* How the loss sees the output (see fl_loss_input). */
static int loss_input(const fl_model *m) {
    const fl_node *o = m->output;
    if (m->loss.from_logits) return FL_LI_LOGITS;
    bool ce = m->loss.kind == FL_LOSS_CATEGORICAL_CROSSENTROPY ||
              m->loss.kind == FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    if (ce && o->op == FL_OP_ACT && o->act == FL_ACT_SOFTMAX) return FL_LI_SOFTMAX_FUSED;
    if (m->loss.kind == FL_LOSS_BINARY_CROSSENTROPY && o->act == FL_ACT_SIGMOID &&
        (o->op == FL_OP_ACT || o->op == FL_OP_DENSE || o->op == FL_OP_CONV2D ||
         o->op == FL_OP_CONV2D_TRANSPOSE))
        return FL_LI_SIGMOID_FUSED;
    return FL_LI_PROBS;
}

/* ---------------------------------------------------------- data checks */

static fl_status check_x_for(const fl_model *m, const fl_node *in, const fl_tensor *x, const char *what);

static fl_status check_x(const fl_model *m, const fl_tensor *x, const char *what) {
    if (m->ninputs != 1 || m->noutputs != 1)
        return fl_error(FL_ERR_UNSUPPORTED,
                        "%s: model '%s' has %d inputs and %d outputs; fit, evaluate and predict take models with one "
                        "of each (use fl_predict_multi for predictions)", what, m->name, m->ninputs, m->noutputs);
    return check_x_for(m, m->input, x, what);
}

static fl_status check_x_for(const fl_model *m, const fl_node *in, const fl_tensor *x, const char *what) {
    char a[128], b[128];
    if (!x) return fl_error(FL_ERR_INVALID_ARG, "%s: x is NULL", what);
    if (in->int_val && x->dtype != FL_FLOAT32 && x->dtype != FL_INT32 && x->dtype != FL_UINT8)
        return fl_error(FL_ERR_INVALID_ARG, "%s: x is %s, model '%s' input '%s' takes int32 values", what,
                        fl_dtype_name(x->dtype), m->name, in->name);
    if (!in->int_val && x->dtype != FL_FLOAT32 && x->dtype != FL_INT32)
        return fl_error(FL_ERR_INVALID_ARG, "%s: x is %s, expected float32 (convert with fl_to_float(x, 1/255.f))", what,
                        fl_dtype_name(x->dtype));
    bool ok = x->ndim == in->ndim && x->shape[0] > 0;
    for (int i = 1; ok && i < in->ndim; i++) ok = x->shape[i] == in->shape[i];
    if (!ok) {
        int64_t s[FL_MAX_DIMS];
        memcpy(s, in->shape, sizeof s);
        s[0] = -1;
        return fl_error(FL_ERR_SHAPE, "%s: x has shape %s, model '%s' expects %s", what,
                        fl_shape_str(x->ndim, x->shape, a, sizeof a), m->name, fl_shape_str(in->ndim, s, b, sizeof b));
    }
    return FL_OK;
}

static const char *index_str(int64_t i, int nd, const int64_t *dims, char *buf, size_t n);

/* The Embeddings that read input `in` refuse an index outside [0,
 * input_dim) here, once per call, before any batch runs: the kernels never
 * see one (and the forward pass stays a plain gather). */
static fl_status check_indices(const fl_model *m, const fl_node *in, const int32_t *v, const float *f, int64_t n,
                               const char *what) {
    const fl_graph *g = &m->g;
    int64_t per = fl_node_sample_size(in);
    for (int k = 0; k < g->n; k++) {
        const fl_node *e = g->nodes[k];
        if (e->op != FL_OP_EMBEDDING || e->in[0] != in) continue;
        int64_t dim = e->in[1]->shape[0];
        for (int64_t i = 0; i < n * per; i++) {
            /* a float input's value is truncated toward zero, as Keras casts it */
            double ix = v ? (double)v[i] : isfinite(f[i]) ? trunc((double)f[i]) : -1.0;
            if (ix < 0 || ix >= (double)dim) {
                char a[128];
                return fl_error(FL_ERR_INVALID_ARG,
                                "%s: x[%lld] holds the index %.10g at position %s, which layer '%s' (Embedding) cannot "
                                "look up: expected 0 <= index < input_dim %lld (Keras on JAX would clip it silently; "
                                "flynn refuses it)", what, (long long)(i / per), v ? (double)v[i] : (double)f[i],
                                index_str(i % per, in->ndim - 1, in->shape + 1, a, sizeof a), e->name, (long long)dim);
            }
        }
    }
    return FL_OK;
}

/* x's values as the input node holds them: floats (an int32 x converted),
 * or for an int input
 * int32 values in a float-sized buffer (x itself when it is int32, else a
 * copy the caller frees through *owned: uint8 widened, float32 converted
 * when every value is an integer in int32's range; Keras would truncate a
 * fraction silently, flynn refuses it). NULL on error. */
static const float *x_rows(const fl_model *m, const fl_node *in, const fl_tensor *x, const char *what, float **owned) {
    *owned = NULL;
    int64_t n = fl_tensor_size(x);
    if (!in->int_val && x->dtype == FL_INT32) { /* a float input: x.astype("float32"), as Keras converts it */
        float *f = fl_malloc((size_t)(n ? n : 1) * sizeof(float), "float32 input");
        if (!f) return NULL;
        for (int64_t i = 0; i < n; i++) f[i] = (float)((const int32_t *)x->data)[i];
        *owned = f;
    }
    if (!in->int_val) {
        const float *xf = *owned ? *owned : x->data;
        if (check_indices(m, in, NULL, xf, x->shape[0], what)) { free(*owned); *owned = NULL; return NULL; }
        return xf;
    }
    const int32_t *v = x->data;
    if (x->dtype != FL_INT32) {
        int32_t *c = fl_malloc((size_t)(n ? n : 1) * sizeof(int32_t), "int32 input");
        if (!c) return NULL;
        for (int64_t i = 0; i < n; i++) {
            if (x->dtype == FL_UINT8) { c[i] = ((const uint8_t *)x->data)[i]; continue; }
            float f = ((const float *)x->data)[i];
            if (!(f == floorf(f) && f >= -2147483648.0f && f < 2147483648.0f)) {
                free(c);
                return fl_error_null(FL_ERR_INVALID_ARG,
                                     "%s: x[%lld] = %g is not an integer, and input '%s' of model '%s' is int32 "
                                     "(give int32 data; flynn converts float32 x only when every value is an integer)",
                                     what, (long long)(i / (fl_tensor_size(x) / x->shape[0])), f, in->name, m->name);
            }
            c[i] = (int32_t)f;
        }
        *owned = (float *)c;
        v = c;
    }
    if (check_indices(m, in, v, NULL, x->shape[0], what)) { free(*owned); *owned = NULL; return NULL; }
    return (const float *)v;
}

static float get_as_float(const fl_tensor *t, int64_t i) {
    switch (t->dtype) {
    case FL_FLOAT32: return ((const float *)t->data)[i];
    case FL_INT32: return (float)((const int32_t *)t->data)[i];
    case FL_UINT8: return (float)((const uint8_t *)t->data)[i];
    }
    return 0;
}

/* Validates y against the model and loss; returns a float host copy. */
static float *prepare_y(const fl_model *m, const fl_tensor *x, const fl_tensor *y, int64_t *y_row, const char *what) {
    char a[128], b[128];
    if (!y) return fl_error_null(FL_ERR_INVALID_ARG, "%s: y is NULL", what);
    if (y->ndim < 1 || y->shape[0] != x->shape[0])
        return fl_error_null(FL_ERR_SHAPE, "%s: x has %lld samples but y has shape %s", what, (long long)x->shape[0],
                             fl_shape_str(y->ndim, y->shape, a, sizeof a));
    const fl_node *o = m->output;
    int64_t out_row = fl_node_sample_size(o);
    int C = out_classes(m);
    int64_t n = y->shape[0];
    if (m->loss.kind == FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY) {
        /* class indices: (N,) or (N, ..., 1) with one index per output row */
        int64_t per = fl_tensor_size(y) / n, rows = out_row / C;
        if (per != rows)
            return fl_error_null(FL_ERR_SHAPE,
                                 "%s: sparse_categorical_crossentropy wants %lld class index(es) per sample, y has shape %s",
                                 what, (long long)rows, fl_shape_str(y->ndim, y->shape, a, sizeof a));
        float *h = fl_malloc((size_t)(n * per) * sizeof(float), "targets");
        if (!h) return NULL;
        for (int64_t i = 0; i < n * per; i++) {
            float v = get_as_float(y, i);
            if (!(v >= 0 && v < (float)C) || v != floorf(v)) {
                free(h);
                return fl_error_null(FL_ERR_INVALID_ARG, "%s: y[%lld] = %g is not a class index in [0, %d)", what,
                                     (long long)(i / per), v, C);
            }
            h[i] = v;
        }
        *y_row = per;
        return h;
    }
    bool ok = fl_tensor_size(y) / n == out_row;
    if (!ok) {
        int64_t s[FL_MAX_DIMS];
        memcpy(s, o->shape, sizeof s);
        s[0] = -1;
        return fl_error_null(FL_ERR_SHAPE, "%s: y has shape %s, the %s loss wants the output shape %s%s", what,
                             fl_shape_str(y->ndim, y->shape, a, sizeof a), fl_loss_name(m->loss.kind),
                             fl_shape_str(o->ndim, s, b, sizeof b),
                             m->loss.kind == FL_LOSS_CATEGORICAL_CROSSENTROPY
                                 ? " (one-hot targets; use fl_one_hot or sparse_categorical_crossentropy)" : "");
    }
    float *h = fl_malloc((size_t)fl_tensor_size(y) * sizeof(float), "targets");
    if (!h) return NULL;
    for (int64_t i = 0; i < fl_tensor_size(y); i++) h[i] = get_as_float(y, i);
    *y_row = out_row;
    return h;
}

/* Makes the step buffers hold `batch` samples. */
static fl_status reserve(fl_model *m, int64_t batch) {
    FL_TRY(fl_graph_reserve(&m->g, batch));
    const fl_backend *be = m->g.be;
    int64_t rows = fl_node_sample_size(m->output) / out_classes(m);
    int64_t tcap = m->g.batch_cap * fl_node_sample_size(m->output);
    if (!m->stats) {
        m->stats = be->alloc(FL_STATS * sizeof(double));
        if (!m->stats) return fl_last_status();
    }
    if (tcap > m->target_cap) {
        be->free(m->target); be->free(m->row_loss); be->free(m->row_score); be->free(m->idx_dev);
        free(m->stage_x); free(m->stage_y);
        m->target = m->row_loss = m->row_score = NULL;
        m->idx_dev = NULL;
        m->stage_x = m->stage_y = NULL;
        m->target_cap = 0;
        m->target = be->alloc((size_t)tcap * sizeof(float));
        m->row_loss = m->target ? be->alloc((size_t)(m->g.batch_cap * rows) * sizeof(float)) : NULL;
        m->row_score = m->row_loss ? be->alloc((size_t)(m->g.batch_cap * rows) * sizeof(float)) : NULL;
        if (!m->row_score) return fl_last_status();
        if (!be->host_memory) {
            /* device backends: batch indices, and host staging for data that stays on the host */
            m->idx_dev = be->alloc((size_t)m->g.batch_cap * sizeof(int64_t));
            int64_t xmax = 0;
            for (int i = 0; i < m->ninputs; i++)
                if (fl_node_sample_size(m->inputs[i]) > xmax) xmax = fl_node_sample_size(m->inputs[i]);
            m->stage_x = fl_malloc((size_t)(m->g.batch_cap * xmax) * sizeof(float), "batch staging");
            m->stage_y = fl_malloc((size_t)tcap * sizeof(float), "batch staging");
            if (!m->idx_dev || !m->stage_x || !m->stage_y) return fl_last_status();
        }
        m->target_cap = tcap;
    }
    return FL_OK;
}

/* A data set as the training loop reads it: x (and targets y, as floats) on
 * the host, and a copy on the device when the backend's memory is not the
 * host's and the copy fits, so that a batch is gathered on the device. */
typedef struct data_src {
    fl_node *in;             /* the input node the rows go to */
    int64_t n, xrow, yrow;   /* samples; floats per sample of x and of y (0: no targets) */
    const float *hx, *hy;
    float *dx, *dy;          /* device copies (NULL: host memory, or not resident) */
    bool resident;
} data_src;

static fl_status data_open(fl_model *m, fl_node *in, const float *hx, const float *hy, int64_t n, int64_t yrow,
                           data_src *d) {
    const fl_backend *be = m->g.be;
    memset(d, 0, sizeof *d);
    d->in = in;
    d->n = n;
    d->xrow = fl_node_sample_size(in);
    d->yrow = hy ? yrow : 0;
    d->hx = hx;
    d->hy = hy;
    if (be->host_memory) { d->resident = true; return FL_OK; }
    size_t xb = (size_t)(n * d->xrow) * sizeof(float), yb = (size_t)(n * d->yrow) * sizeof(float);
    size_t fr = 0, total = 0;
    be->mem_info(&fr, &total);
    if (xb + yb > fr / 2) return FL_OK; /* too big: batches are staged through the host */
    d->dx = be->alloc(xb);
    d->dy = d->dx && yb ? be->alloc(yb) : NULL;
    if (!d->dx || (yb && !d->dy)) {
        be->free(d->dx);
        d->dx = NULL;
        fl_clear_error();
        return FL_OK;
    }
    be->upload(d->dx, hx, xb);
    if (yb) be->upload(d->dy, hy, yb);
    d->resident = true;
    return FL_OK;
}

static void data_close(fl_model *m, data_src *d) {
    if (d->dx) m->g.be->free(d->dx);
    if (d->dy) m->g.be->free(d->dy);
    memset(d, 0, sizeof *d);
}

/* Puts samples idx[0..b) of d into the input node (and targets). */
static void load_batch(fl_model *m, const data_src *d, const int64_t *idx, int64_t b) {
    const fl_backend *be = m->g.be;
    fl_graph_set_batch(&m->g, b);
    if (d->resident) {
        const int64_t *di = idx;
        if (!be->host_memory) {
            be->upload(m->idx_dev, idx, (size_t)b * sizeof(int64_t));
            di = m->idx_dev;
        }
        be->gather_rows(d->dx ? d->dx : d->hx, di, b, d->xrow, d->in->val);
        if (d->yrow) be->gather_rows(d->dy ? d->dy : d->hy, di, b, d->yrow, m->target);
        return;
    }
    for (int64_t i = 0; i < b; i++) {
        memcpy(m->stage_x + i * d->xrow, d->hx + idx[i] * d->xrow, (size_t)d->xrow * sizeof(float));
        if (d->yrow) memcpy(m->stage_y + i * d->yrow, d->hy + idx[i] * d->yrow, (size_t)d->yrow * sizeof(float));
    }
    be->upload(d->in->val, m->stage_x, (size_t)(b * d->xrow) * sizeof(float));
    if (d->yrow) be->upload(m->target, m->stage_y, (size_t)(b * d->yrow) * sizeof(float));
}

/* An asynchronous device error (a failed kernel) surfaces here. */
static fl_status device_status(fl_model *m, const char *what) {
    const fl_backend *be = m->g.be;
    if (be->check && be->check() != 0) {
        fl_error_prefix("%s on the %s: ", what, be->name);
        return fl_last_status() != FL_OK ? fl_last_status() : FL_ERR_DEVICE;
    }
    return FL_OK;
}

/* Running totals of loss and metrics live in m->stats (on the device):
 * per-sample averages times the batch size, so that they weight by samples
 * like Keras's trackers. They are read only when something is shown. */
static void zero_stats(fl_model *m) { m->g.be->zero(m->stats, FL_STATS * sizeof(double)); }

static void read_stats(fl_model *m, int64_t seen, double *out) {
    double raw[FL_STATS];
    m->g.be->download(raw, m->stats, FL_STATS * sizeof(double));
    for (int i = 0; i <= m->nmetrics; i++) out[i] = raw[i] / (double)(seen > 0 ? seen : 1);
}

/* Loss (+ gradient when training) and metrics for the batch in the graph. */
static void loss_and_metrics(fl_model *m, bool grad) {
    const fl_backend *be = m->g.be;
    fl_node *o = m->output;
    int C = out_classes(m);
    int64_t rows = fl_node_size(o) / C;
    int code = m->loss.kind == FL_LOSS_CATEGORICAL_CROSSENTROPY ? FL_LC_CCE
             : m->loss.kind == FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY ? FL_LC_SCCE
             : m->loss.kind == FL_LOSS_BINARY_CROSSENTROPY ? FL_LC_BCE : FL_LC_MSE;
    /* under MPI the mean is over the global batch's rows: the ranks' gradients sum to one process's */
    int64_t grows = m->dist_batch ? rows / m->g.batch * m->dist_batch : rows;
    fl_loss_desc d = {code, loss_input(m), rows, C, 1.0f / (float)grows};
    be->loss(&d, o->val, m->target, m->row_loss, grad ? o->grad : NULL);
    if (grad) {
        o->grad_ready = true;
        o->grad_is_preact = d.input == FL_LI_SOFTMAX_FUSED || d.input == FL_LI_SIGMOID_FUSED;
    }
    const fl_node *mask = loss_mask_of(m);
    /* Keras's apply_mask: the valid rows weigh rows / valid, the others 0 */
    if (mask) be->loss_mask(rows, C, mask->val, m->row_loss, grad ? o->grad : NULL, m->stats + FL_STAT_VALID);
    double scale = (double)m->g.batch / (double)rows;
    be->sum_into(rows, m->row_loss, scale, m->stats);
    /* the metrics are not masked: Keras 3.15's compiled metrics do not see y_pred's mask (its
     * train_on_batch reports the accuracy over every step, padding included: train_seq_scce_masked) */
    for (int i = 0; i < m->nmetrics; i++) {
        be->metric(m->metric_codes[i], rows, C, o->val, m->target, m->row_score);
        be->sum_into(rows, m->row_score, scale, m->stats + 1 + i);
    }
}

/* ------------------------------------------------------------ history */

#define FL_HIST_MAX_KEYS FL_LOGS_MAX_KEYS

struct fl_history {
    int nkeys, epochs, cap;
    char keys[FL_HIST_MAX_KEYS][48];
    float *vals[FL_HIST_MAX_KEYS];
    double seconds, train_seconds;
    int64_t train_samples;
};

static fl_status hist_push(fl_history *h, const float *v) {
    if (h->epochs == h->cap) {
        int cap = h->cap ? h->cap * 2 : 16;
        for (int k = 0; k < h->nkeys; k++) {
            float *p = realloc(h->vals[k], (size_t)cap * sizeof(float));
            if (!p) return fl_error(FL_ERR_NOMEM, "out of memory growing History");
            h->vals[k] = p;
        }
        h->cap = cap;
    }
    for (int k = 0; k < h->nkeys; k++) h->vals[k][h->epochs] = v[k];
    h->epochs++;
    return FL_OK;
}

/* History.on_epoch_end: every key of the logs (a key seen first now, as
 * "learning_rate" from a callback, has NaN for the epochs before; a key
 * missing now gets NaN). */
static fl_status hist_push_logs(fl_history *h, const fl_logs *logs) {
    float v[FL_HIST_MAX_KEYS];
    for (int k = 0; k < FL_HIST_MAX_KEYS; k++) v[k] = NAN;
    for (int i = 0; i < logs->n; i++) {
        int k = 0;
        while (k < h->nkeys && strcmp(h->keys[k], logs->keys[i]) != 0) k++;
        if (k == h->nkeys) {
            if (h->nkeys >= FL_HIST_MAX_KEYS)
                return fl_error(FL_ERR_INVALID_ARG, "History: no room for key '%s' (%d keys at most)", logs->keys[i],
                                FL_HIST_MAX_KEYS);
            float *p = NULL; /* before the first epoch hist_push allocates it */
            if (h->cap && !(p = malloc((size_t)h->cap * sizeof(float))))
                return fl_error(FL_ERR_NOMEM, "out of memory growing History");
            for (int e = 0; e < h->epochs; e++) p[e] = NAN;
            h->vals[k] = p;
            snprintf(h->keys[k], sizeof h->keys[k], "%s", logs->keys[i]);
            h->nkeys++;
        }
        v[k] = (float)logs->values[i];
    }
    return hist_push(h, v);
}

int fl_history_epochs(const fl_history *h) { return h ? h->epochs : 0; }
int fl_history_num_keys(const fl_history *h) { return h ? h->nkeys : 0; }
const char *fl_history_key(const fl_history *h, int i) { return h && i >= 0 && i < h->nkeys ? h->keys[i] : NULL; }
const float *fl_history_get(const fl_history *h, const char *key) {
    if (!h || !key) return NULL;
    for (int k = 0; k < h->nkeys; k++)
        if (strcmp(h->keys[k], key) == 0) return h->vals[k];
    return NULL;
}
double fl_history_seconds(const fl_history *h) { return h ? h->seconds : 0; }
double fl_history_samples_per_second(const fl_history *h) {
    return h && h->train_seconds > 0 ? (double)h->train_samples / h->train_seconds : 0;
}
void fl_history_free(fl_history *h) {
    if (!h) return;
    for (int k = 0; k < h->nkeys; k++) free(h->vals[k]);
    free(h);
}

/* ------------------------------------------------------- progress bar */

typedef struct progbar {
    FILE *f;
    int mode;            /* FL_VERBOSE_BAR / FL_VERBOSE_EPOCH / SILENT */
    int64_t target;
    double start, last;
    int prev_len;
} progbar;

static int resolve_verbose(fl_verbose v, FILE *f) {
    if (v == FL_VERBOSE_AUTO) return isatty(fileno(f)) ? FL_VERBOSE_BAR : FL_VERBOSE_EPOCH;
    return (int)v;
}

static void fmt_value(char *buf, size_t n, double v) {
    if (fabs(v) > 1e-3) snprintf(buf, n, "%.4f", v);
    else snprintf(buf, n, "%.4e", v);
}

static void fmt_time_per_step(char *buf, size_t n, double t) {
    if (t >= 1) snprintf(buf, n, "%.0fs/step", t);
    else if (t >= 1e-3) snprintf(buf, n, "%.0fms/step", t * 1e3);
    else snprintf(buf, n, "%.0fus/step", t * 1e6);
}

static void fmt_eta(char *buf, size_t n, double eta) {
    long e = (long)eta;
    if (eta > 3600) snprintf(buf, n, "%ld:%02ld:%02ld", e / 3600, (e % 3600) / 60, e % 60);
    else if (eta > 60) snprintf(buf, n, "%ld:%02ld", e / 60, e % 60);
    else snprintf(buf, n, "%lds", e);
}

/* Whether the bar shows something now (Keras refreshes at most every 50 ms). */
static bool progbar_due(const progbar *p, bool final) {
    if (p->mode == FL_VERBOSE_SILENT) return false;
    if (final) return true;
    return p->mode == FL_VERBOSE_BAR && now() - p->last >= 0.05;
}

/* keys/vals: the "- key: value" pairs, already in Keras order */
static void progbar_update(progbar *p, int64_t cur, int nkv, char keys[][48], const double *vals, bool final) {
    double t = now();
    p->last = t;
    char line[1024], tmp[64];
    int len = 0;
    int digits = (int)log10((double)(p->target > 0 ? p->target : 1)) + 1;
    double elapsed = t - p->start, per = cur > 0 ? elapsed / (double)cur : 0;
    char tps[32];
    fmt_time_per_step(tps, sizeof tps, per);
    if (p->mode == FL_VERBOSE_BAR) {
        len += snprintf(line + len, sizeof line - (size_t)len, "%*lld/%lld ", digits, (long long)cur,
                        (long long)p->target);
        int w = (int)(20.0 * (double)cur / (double)p->target);
        if (w > 20) w = 20;
        len += snprintf(line + len, sizeof line - (size_t)len, "\x1b[32m");
        for (int i = 0; i < w; i++) len += snprintf(line + len, sizeof line - (size_t)len, "━");
        len += snprintf(line + len, sizeof line - (size_t)len, "\x1b[0m\x1b[37m");
        for (int i = w; i < 20; i++) len += snprintf(line + len, sizeof line - (size_t)len, "━");
        len += snprintf(line + len, sizeof line - (size_t)len, "\x1b[0m ");
        if (final) snprintf(tmp, sizeof tmp, "%lds", (long)elapsed);
        else fmt_eta(tmp, sizeof tmp, per * (double)(p->target - cur));
        len += snprintf(line + len, sizeof line - (size_t)len, "%s %s", tmp, tps);
    } else {
        len += snprintf(line + len, sizeof line - (size_t)len, "%lld/%lld - %lds - %s", (long long)cur,
                        (long long)p->target, (long)elapsed, tps);
    }
    for (int k = 0; k < nkv && len < (int)sizeof line - 64; k++) {
        fmt_value(tmp, sizeof tmp, vals[k]);
        len += snprintf(line + len, sizeof line - (size_t)len, " - %s: %s", keys[k], tmp);
    }
    if (p->mode == FL_VERBOSE_BAR) {
        fputc('\r', p->f);
        fputs(line, p->f);
        for (int i = len; i < p->prev_len; i++) fputc(' ', p->f);
        p->prev_len = len;
        if (final) fputc('\n', p->f);
    } else {
        fputs(line, p->f);
        fputc('\n', p->f);
    }
    fflush(p->f);
}

/* Sorts the key/value pairs by key, as Keras's progress bar shows them. */
static void sort_kv(int n, char keys[][48], double *vals) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(keys[j - 1], keys[j]) > 0; j--) {
            char t[48];
            memcpy(t, keys[j], 48); memcpy(keys[j], keys[j - 1], 48); memcpy(keys[j - 1], t, 48);
            double v = vals[j]; vals[j] = vals[j - 1]; vals[j - 1] = v;
        }
}

/* The loss and metric keys with their current values, sorted as Keras shows them. */
static int stat_kv(const fl_model *m, const double *v, const char *prefix, char keys[][48], double *vals) {
    snprintf(keys[0], 48, "%sloss", prefix);
    vals[0] = v[0];
    for (int i = 0; i < m->nmetrics; i++) {
        snprintf(keys[1 + i], 48, "%s%s", prefix, metric_key(m->metrics[i]));
        vals[1 + i] = v[1 + i];
    }
    return 1 + m->nmetrics;
}

/* --------------------------------------------------------- evaluation */

/* Runs inference over samples idx[0..n) of d; writes mean loss and metrics. */
static fl_status run_eval(fl_model *m, const data_src *d, const int64_t *idx, int64_t n, int64_t bs, double *out,
                          progbar *pb) {
    FL_TRY(reserve(m, bs < n ? bs : n));
    zero_stats(m);
    int64_t steps = (n + bs - 1) / bs, seen = 0;
    for (int64_t s = 0; s < steps; s++) {
        int64_t b = n - s * bs < bs ? n - s * bs : bs;
        load_batch(m, d, idx + s * bs, b);
        fl_graph_forward(&m->g, false);
        loss_and_metrics(m, false);
        seen += b;
        if (pb && progbar_due(pb, s + 1 == steps)) {
            char keys[1 + FL_MAX_METRICS][48];
            double v[1 + FL_MAX_METRICS], vals[1 + FL_MAX_METRICS];
            read_stats(m, seen, v);
            int nkv = stat_kv(m, v, "", keys, vals);
            sort_kv(nkv, keys, vals);
            progbar_update(pb, s + 1, nkv, keys, vals, s + 1 == steps);
        }
    }
    read_stats(m, seen, out);
    return device_status(m, "evaluating");
}

static int64_t *iota(int64_t n, int64_t start) {
    int64_t *p = fl_malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t), "sample order");
    if (p)
        for (int64_t i = 0; i < n; i++) p[i] = start + i;
    return p;
}

fl_status fl_evaluate_(fl_model *m, const fl_tensor *x, const fl_tensor *y, float *results, int n_results,
                       fl_eval_args a) {
    if (!m) return fl_error(FL_ERR_INVALID_ARG, "fl_evaluate: model is NULL");
    if (!m->compiled) return fl_error(FL_ERR_STATE, "fl_evaluate: model '%s' is not compiled (call fl_compile first)", m->name);
    FL_TRY(check_x(m, x, "fl_evaluate"));
    if (a.batch_size < 0) return fl_error(FL_ERR_INVALID_ARG, "fl_evaluate: batch_size %d, expected > 0", a.batch_size);
    int64_t bs = a.batch_size > 0 ? a.batch_size : 32, n = x->shape[0], yrow = 0;
    float *yh = prepare_y(m, x, y, &yrow, "fl_evaluate");
    if (!yh) return fl_last_status();
    float *xo;
    const float *xr = x_rows(m, m->input, x, "fl_evaluate", &xo);
    int64_t *idx = xr ? iota(n, 0) : NULL;
    data_src d = {0};
    fl_status s = idx ? data_open(m, m->input, xr, yh, n, yrow, &d) : fl_last_status();
    if (s == FL_OK) {
        FILE *f = a.out ? a.out : stdout;
        progbar pb = {f, resolve_verbose(a.verbose, f), (n + bs - 1) / bs, now(), 0, 0};
        double r[1 + FL_MAX_METRICS];
        s = run_eval(m, &d, idx, n, bs, r, &pb);
        if (s == FL_OK)
            for (int i = 0; i < n_results && i <= m->nmetrics; i++) results[i] = (float)r[i];
    }
    data_close(m, &d);
    free(idx);
    free(yh);
    free(xo);
    return s;
}

fl_tensor *fl_predict_(fl_model *m, const fl_tensor *x, fl_eval_args a) {
    if (!m) return fl_error_null(FL_ERR_INVALID_ARG, "fl_predict: model is NULL");
    if (check_x(m, x, "fl_predict") != FL_OK) return NULL;
    if (a.batch_size < 0) return fl_error_null(FL_ERR_INVALID_ARG, "fl_predict: batch_size %d, expected > 0", a.batch_size);
    int64_t bs = a.batch_size > 0 ? a.batch_size : 32, n = x->shape[0];
    int64_t orow = fl_node_sample_size(m->output);
    int64_t shape[FL_MAX_DIMS];
    memcpy(shape, m->output->shape, sizeof shape);
    shape[0] = n;
    float *xo;
    const float *xr = x_rows(m, m->input, x, "fl_predict", &xo);
    fl_tensor *out = xr ? fl_tensor_new(FL_FLOAT32, m->output->ndim, shape) : NULL;
    int64_t *idx = out ? iota(n, 0) : NULL;
    data_src d = {0};
    if (!idx || reserve(m, bs < n ? bs : n) != FL_OK || data_open(m, m->input, xr, NULL, n, 0, &d) != FL_OK) {
        free(idx);
        free(xo);
        fl_tensor_free(out);
        return NULL;
    }
    for (int64_t s = 0; s * bs < n; s++) {
        int64_t b = n - s * bs < bs ? n - s * bs : bs;
        load_batch(m, &d, idx + s * bs, b);
        fl_graph_forward(&m->g, false);
        m->g.be->download((float *)out->data + s * bs * orow, m->output->val, (size_t)(b * orow) * sizeof(float));
    }
    data_close(m, &d);
    free(idx);
    free(xo);
    if (device_status(m, "predicting") != FL_OK) {
        fl_tensor_free(out);
        return NULL;
    }
    return out;
}

fl_status fl_predict_multi_(fl_model *m, const fl_tensor *const *xs, int nx, fl_tensor **outs, int nout,
                            fl_eval_args a) {
    if (!m || !xs || !outs) return fl_error(FL_ERR_INVALID_ARG, "fl_predict_multi: NULL argument");
    for (int i = 0; i < nout; i++) outs[i] = NULL;
    if (nx != m->ninputs || nout != m->noutputs)
        return fl_error(FL_ERR_INVALID_ARG, "fl_predict_multi: model '%s' has %d inputs and %d outputs, given %d and %d",
                        m->name, m->ninputs, m->noutputs, nx, nout);
    if (a.batch_size < 0) return fl_error(FL_ERR_INVALID_ARG, "fl_predict_multi: batch_size %d, expected > 0", a.batch_size);
    char what[64];
    for (int i = 0; i < nx; i++) {
        snprintf(what, sizeof what, "fl_predict_multi (input %d)", i);
        FL_TRY(check_x_for(m, m->inputs[i], xs[i], what));
        if (xs[i]->shape[0] != xs[0]->shape[0])
            return fl_error(FL_ERR_SHAPE, "fl_predict_multi: input %d has %lld samples, input 0 has %lld", i,
                            (long long)xs[i]->shape[0], (long long)xs[0]->shape[0]);
    }
    int64_t bs = a.batch_size > 0 ? a.batch_size : 32, n = xs[0]->shape[0];
    fl_status st = FL_OK;
    for (int o = 0; o < nout && st == FL_OK; o++) {
        int64_t shape[FL_MAX_DIMS];
        memcpy(shape, m->outputs[o]->shape, sizeof shape);
        shape[0] = n;
        if (!(outs[o] = fl_tensor_new(FL_FLOAT32, m->outputs[o]->ndim, shape))) st = fl_last_status();
    }
    int64_t *idx = st == FL_OK ? iota(n, 0) : NULL;
    data_src d[FL_MODEL_MAX_IO];
    memset(d, 0, sizeof d);
    if (st == FL_OK && !idx) st = fl_last_status();
    if (st == FL_OK) st = reserve(m, bs < n ? bs : n);
    float *xo[FL_MODEL_MAX_IO] = {0};
    for (int i = 0; i < nx && st == FL_OK; i++) {
        const float *xr = x_rows(m, m->inputs[i], xs[i], "fl_predict_multi", &xo[i]);
        st = xr ? data_open(m, m->inputs[i], xr, NULL, n, 0, &d[i]) : fl_last_status();
    }
    for (int64_t s = 0; st == FL_OK && s * bs < n; s++) {
        int64_t b = n - s * bs < bs ? n - s * bs : bs;
        for (int i = 0; i < nx; i++) load_batch(m, &d[i], idx + s * bs, b);
        fl_graph_forward(&m->g, false);
        for (int o = 0; o < nout; o++) {
            int64_t orow = fl_node_sample_size(m->outputs[o]);
            m->g.be->download((float *)outs[o]->data + s * bs * orow, m->outputs[o]->val, (size_t)(b * orow) * sizeof(float));
        }
    }
    for (int i = 0; i < nx; i++) { data_close(m, &d[i]); free(xo[i]); }
    free(idx);
    if (st == FL_OK) st = device_status(m, "predicting");
    if (st != FL_OK)
        for (int o = 0; o < nout; o++) { fl_tensor_free(outs[o]); outs[o] = NULL; }
    return st;
}

/* ------------------------------------------- non-finite checks (TerminateOnNaN) */

/* Index of the first NaN or infinity in p[0..n), or -1. The usual case, all
 * finite, is one branch-free pass over the exponent bits that the compiler
 * vectorises (a non-finite float has all 8 exponent bits set). */
static int64_t first_nonfinite(const float *p, int64_t n) {
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

static const char *nonfinite_name(float v) { return isnan(v) ? "NaN" : v > 0 ? "inf" : "-inf"; }

/* "(3, 7, 0)": flat index i of a sample of shape dims[0..nd) as an index tuple. */
static const char *index_str(int64_t i, int nd, const int64_t *dims, char *buf, size_t n) {
    int64_t ix[FL_MAX_DIMS];
    for (int k = nd - 1; k >= 0; k--) { ix[k] = dims[k] > 0 ? i % dims[k] : 0; i = dims[k] > 0 ? i / dims[k] : 0; }
    return fl_shape_str(nd, ix, buf, n);
}

/* The batch just gathered into the input node (host memory: still in
 * cache, so the check costs a fraction of the gather), or with idx == NULL
 * all of x before training (device backends, where the batch is gathered on
 * the device): the first sample holding a NaN or an infinity stops
 * training, named by its index in x and its feature. */
static fl_status check_x_finite(const fl_model *m, const data_src *d, const float *rows, const int64_t *idx, int64_t b,
                                int ep, int epochs, int64_t step, int64_t steps) {
    int64_t f = first_nonfinite(rows, b * d->xrow);
    if (f < 0) return FL_OK;
    int64_t i = f / d->xrow, sample = idx ? idx[i] : i;
    f %= d->xrow;
    char when[96], a[128], c[128];
    if (idx)
        snprintf(when, sizeof when, "epoch %d/%d, step %lld/%lld", ep + 1, epochs, (long long)step + 1, (long long)steps);
    else
        snprintf(when, sizeof when, "before epoch %d", ep + 1);
    const float *row = rows + i * d->xrow;
    return fl_error(FL_ERR_NONFINITE,
                    "fl_fit: %s: x[%lld] holds %s at feature %lld (index %s of the sample shape %s); training "
                    "stopped (TerminateOnNaN) before this step, model '%s' is unchanged by it; fix the data, or set "
                    ".no_nan_check (flynn train --no-nan-check)", when, (long long)sample, nonfinite_name(row[f]),
                    (long long)f, index_str(f, d->in->ndim - 1, d->in->shape + 1, a, sizeof a),
                    fl_shape_str(d->in->ndim - 1, d->in->shape + 1, c, sizeof c), m->name);
}

/* First non-finite value of a backend buffer of n floats (host is scratch
 * of at least n floats for device backends), or -1. */
static int64_t buffer_nonfinite(const fl_backend *be, const float *buf, int64_t n, float *host, float *v) {
    const float *p = buf;
    if (!be->host_memory) {
        be->download(host, buf, (size_t)n * sizeof(float));
        p = host;
    }
    int64_t i = first_nonfinite(p, n);
    if (i >= 0) *v = p[i];
    return i;
}

/* True (and a sentence in why) when a weight holds NaN or an infinity.
 * host: scratch of the largest node's size for device backends. */
static bool weights_nonfinite(fl_model *m, float *host, char *why, size_t len) {
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
                 fl_shape_str(n->ndim, n->shape, a, sizeof a), nonfinite_name(v), index_str(at, n->ndim, n->shape, b, sizeof b));
        return true;
    }
    return false;
}

/* Scratch for reading any node of the graph back from a device (NULL on the host). */
static float *node_scratch(const fl_graph *g, bool *failed) {
    *failed = false;
    if (g->be->host_memory) return NULL;
    int64_t most = 1;
    for (int i = 0; i < g->n; i++)
        if (fl_node_size(g->nodes[i]) > most) most = fl_node_size(g->nodes[i]);
    float *h = malloc((size_t)most * sizeof(float));
    *failed = h == NULL;
    return h;
}

/* The loss came out NaN or infinite: a diagnostic forward and backward pass
 * on the batch in the graph names the first layer whose weight, output or
 * gradient is not finite. Writes one sentence into why. */
static void diagnose_nonfinite(fl_model *m, char *why, size_t len) {
    fl_graph *g = &m->g;
    const fl_backend *be = g->be;
    bool nomem;
    float *host = node_scratch(g, &nomem);
    if (nomem) { snprintf(why, len, "no memory to look for the layer"); return; }
    char a[128];
    float v = 0;
    int64_t at;
    if (weights_nonfinite(m, host, why, len)) {
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
                     nonfinite_name(v), (long long)(at / per), index_str(at % per, n->ndim - 1, n->shape + 1, a, sizeof a));
            free(host);
            return;
        }
    }
    loss_and_metrics(m, true);
    int64_t rows = fl_node_size(m->output) / out_classes(m);
    if ((at = buffer_nonfinite(be, m->row_loss, rows, host, &v)) >= 0) {
        snprintf(why, len, "every layer's output is finite, but the %s loss of output row %lld is %s (a target "
                 "outside the loss's range, or too large for float32?)", fl_loss_name(m->loss.kind),
                 (long long)at, nonfinite_name(v));
        free(host);
        return;
    }
    fl_graph_backward(g);
    for (int i = g->n - 1; i >= 0; i--) { /* gradients, in the order backward makes them */
        fl_node *n = g->nodes[i];
        if (!n->grad || !n->needs_grad || (n->op != FL_OP_PARAM && !n->grad_ready)) continue;
        if ((at = buffer_nonfinite(be, n->grad, fl_node_size(n), host, &v)) >= 0) {
            snprintf(why, len, "the outputs and the loss are finite on a second pass, and layer '%s' (op %s) is the "
                     "first whose gradient is not finite (%s)", n->name, fl_op_name(n->op), nonfinite_name(v));
            free(host);
            return;
        }
    }
    snprintf(why, len, "a second pass over the same batch is finite everywhere (a non-deterministic overflow?)");
    free(host);
}

/* The loss after step `step` (1-based; on device backends, seen at some
 * step in (from, step]) was `loss`: stop with the diagnosis. */
static fl_status nonfinite_loss(fl_model *m, double loss, int ep, int epochs, int64_t from, int64_t step,
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

/* ----------------------------------------------------------------- fit */

/* A training step of the full batch size is captured as a device graph
 * (where the backend has graphs) after two ordinary steps, so that the
 * first-call work (algorithm searches, allocations) is done, and replayed
 * from then on; any change of buffers (the generation) captures anew. If
 * capture fails, the step runs as usual and capture is not tried again.
 * What differs from step to step inside a replayed step, the optimizer's
 * step (Adam's t) and the dropout streams' step, is handed to every launch
 * from the host's counters: steps run eagerly between replays (the partial
 * last batch of each epoch) advance those, and the replay must see it. */
typedef struct graph_state {
    void *graph;
    int64_t generation;
    int eager_full_steps;
    bool failed;
} graph_state;

/* One step; with `check` (host-memory backends without step capture only:
 * it reads the running loss), false without an update when the loss came
 * out non-finite. */
static bool run_step(fl_model *m, bool check) {
    fl_graph_clear_grads(&m->g);
    bool have = !m->dist_batch || m->dist_share > 0; /* under MPI a rank can have no share of a last batch */
    double before[FL_STATS];
    if (m->dist_batch) memcpy(before, m->stats, sizeof before);
    if (have) {
        fl_graph_forward(&m->g, true);
        loss_and_metrics(m, true);
    }
    /* under MPI: the global batch's totals on every rank, so that every rank takes the same decisions */
    if (m->dist_batch && fl_dp_reduce_stats(before, m->stats, FL_STATS) != FL_OK) return false;
    if (check && !isfinite(m->stats[0])) return false;
    if (have) fl_graph_backward(&m->g);
    if (m->dist_batch && fl_dp_reduce_grads(m, have) != FL_OK) return false;
    fl_optimizer_step(m->opt);
    return true;
}

static fl_status train_step(fl_model *m, graph_state *gs, bool full, bool check, bool *finite) {
    const fl_backend *be = m->g.be;
    *finite = true;
    if (m->dist_batch || (check && be->host_memory && !be->graph_begin)) { /* the CPU: the loss is read after each step */
        fl_clear_error();
        *finite = run_step(m, check);
        return *finite || fl_last_status() == FL_OK ? FL_OK : fl_last_status(); /* an MPI error */
    }
    if (gs->graph && full && gs->generation == m->g.generation) {
        if (be->graph_set_learning_rate) be->graph_set_learning_rate(fl_optimizer_lr_at(m->opt, m->opt->iterations));
        if (be->graph_launch(gs->graph, m->opt->iterations, m->g.step) != 0)
            return device_status(m, "replaying a training step");
        fl_optimizer_count_step(m->opt);
        return FL_OK;
    }
    if (gs->graph && gs->generation != m->g.generation) {
        be->graph_free(gs->graph);
        gs->graph = NULL;
        gs->eager_full_steps = 0;
    }
    bool capture = be->graph_begin && !gs->graph && !gs->failed && full && gs->eager_full_steps >= 2;
    int64_t it0 = m->opt->iterations;
    if (capture && be->graph_begin(it0, m->g.step) != 0) {
        capture = false;
        gs->failed = true;
        fl_clear_error(); /* no graph is no error: the step runs as usual */
    }
    run_step(m, false);
    if (full) gs->eager_full_steps++;
    if (!capture) return FL_OK;
    void *g = be->graph_end();
    if (!g) { /* the step was recorded but not run: run it now */
        gs->failed = true;
        m->opt->iterations = it0;
        fl_clear_error(); /* whatever failed while recording was about the capture */
        run_step(m, false);
        return FL_OK;
    }
    gs->graph = g;
    gs->generation = m->g.generation;
    if (be->graph_set_learning_rate) be->graph_set_learning_rate(fl_optimizer_lr_at(m->opt, it0));
    if (be->graph_launch(g, it0, m->g.step) != 0) return device_status(m, "running a captured training step");
    return FL_OK;
}


fl_history *fl_fit_(fl_model *m, const fl_tensor *x, const fl_tensor *y, fl_fit_args a) {
    if (!m) return fl_error_null(FL_ERR_INVALID_ARG, "fl_fit: model is NULL");
    if (!m->compiled)
        return fl_error_null(FL_ERR_STATE, "fl_fit: model '%s' is not compiled (call fl_compile first)", m->name);
    if (check_x(m, x, "fl_fit") != FL_OK) return NULL;
    if (m->opt->bound_gen != m->g.trainable_gen && fl_optimizer_bind(m->opt, &m->g) != FL_OK) {
        /* layers were frozen or unfrozen since compile: what Keras's recompile does */
        fl_error_prefix("fl_fit: binding the optimizer to the weights now trainable: ");
        return NULL;
    }
    if (a.batch_size < 0) return fl_error_null(FL_ERR_INVALID_ARG, "fl_fit: batch_size %d, expected > 0", a.batch_size);
    if (a.epochs < 0) return fl_error_null(FL_ERR_INVALID_ARG, "fl_fit: epochs %d, expected > 0", a.epochs);
    if (!(a.validation_split >= 0.0f && a.validation_split < 1.0f))
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_fit: validation_split %g, expected 0 <= split < 1",
                             a.validation_split);
    if (a.validation_split > 0 && a.validation_x)
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_fit: give validation_split or validation_x/y, not both");
    if ((a.validation_x == NULL) != (a.validation_y == NULL))
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_fit: validation_x and validation_y must be given together");
    int64_t bs = a.batch_size > 0 ? a.batch_size : 32;
    int epochs = a.epochs > 0 ? a.epochs : 1;
    /* under mpirun: data-parallel, batch_size the global batch (src/dist/, docs/scale-out.md) */
    if (fl_dist_init() != FL_OK) { fl_error_prefix("fl_fit: "); return NULL; }
    bool dist = fl_dist_size() > 1;
    if (dist && (!m->g.be->host_memory || loss_mask_of(m)))
        return fl_error_null(FL_ERR_UNSUPPORTED, "fl_fit: under MPI (%d ranks), training runs on the CPU backend and "
                             "without a masked loss; model '%s' %s", fl_dist_size(), m->name,
                             m->g.be->host_memory ? "has an output mask that weighs the loss (its valid-row count "
                             "would need a global reduction)" : "is on a device (NCCL is not built yet)");
    int64_t n = x->shape[0];
    int64_t y_row = 0;
    float *yh = prepare_y(m, x, y, &y_row, "fl_fit");
    if (!yh) return NULL;
    bool check = !a.no_nan_check;
    int64_t bad = check ? first_nonfinite(yh, n * y_row) : -1;
    if (bad >= 0) {
        fl_error(FL_ERR_NONFINITE, "fl_fit: y[%lld] holds %s at target %lld; nothing was trained (TerminateOnNaN); "
                 "fix the targets, or set .no_nan_check (flynn train --no-nan-check)", (long long)(bad / y_row),
                 nonfinite_name(yh[bad]), (long long)(bad % y_row));
        free(yh);
        return NULL;
    }

    /* Keras: the last fraction (before shuffling) is the validation set */
    int64_t n_train = n, n_val = 0;
    if (a.validation_split > 0) {
        /* Keras 3 (array_slicing.train_validation_split): int(floor(n * (1.0 - split))) in float64, the
         * float32 split first taken back to the decimal the user wrote (0.1f is 0.100000001: 10 * 0.9 would
         * give 8 training samples, Keras's 9) */
        char split_text[32];
        snprintf(split_text, sizeof split_text, "%.7g", (double)a.validation_split);
        n_train = (int64_t)floor((double)n * (1.0 - strtod(split_text, NULL)));
        n_val = n - n_train;
        if (n_train <= 0 || n_val <= 0) {
            free(yh);
            return fl_error_null(FL_ERR_INVALID_ARG, "fl_fit: validation_split %g of %lld samples leaves %lld for training and %lld for validation",
                                 a.validation_split, (long long)n, (long long)n_train, (long long)n_val);
        }
    }
    float *vyh = NULL;
    int64_t vrow = 0;
    if (a.validation_x) {
        if (check_x(m, a.validation_x, "fl_fit (validation data)") != FL_OK) { free(yh); return NULL; }
        vyh = prepare_y(m, a.validation_x, a.validation_y, &vrow, "fl_fit (validation data)");
        if (!vyh) { free(yh); return NULL; }
    }
    data_src tr = {0}, vd = {0};
    graph_state gs = {0};
    float *xo = NULL, *vxo = NULL;
    const float *xr = x_rows(m, m->input, x, "fl_fit", &xo);
    const float *vxr = xr && a.validation_x ? x_rows(m, m->input, a.validation_x, "fl_fit (validation data)", &vxo) : NULL;
    if (!xr || (a.validation_x && !vxr)) { free(xo); free(yh); free(vyh); return NULL; }
    int64_t *perm = fl_malloc((size_t)n * sizeof(int64_t), "shuffle order");
    int64_t *vidx = NULL, nv = 0;
    fl_history *h = fl_calloc(1, sizeof *h, "History");
    if (!perm || !h || reserve(m, bs < n_train ? bs : n_train) != FL_OK ||
        data_open(m, m->input, xr, yh, n, y_row, &tr) != FL_OK)
        goto fail;
    if (a.validation_x) {
        nv = a.validation_x->shape[0];
        if (!(vidx = iota(nv, 0)) || data_open(m, m->input, vxr, vyh, nv, vrow, &vd) != FL_OK) goto fail;
    } else if (n_val > 0) {
        nv = n_val;
        if (!(vidx = iota(nv, n_train))) goto fail;
    }
    const data_src *val = a.validation_x ? &vd : &tr;
    bool has_val = nv > 0;
    h->nkeys = 0;
    snprintf(h->keys[h->nkeys++], 48, "loss");
    for (int i = 0; i < m->nmetrics; i++) snprintf(h->keys[h->nkeys++], 48, "%s", metric_key(m->metrics[i]));
    if (has_val) {
        snprintf(h->keys[h->nkeys++], 48, "val_loss");
        for (int i = 0; i < m->nmetrics; i++) snprintf(h->keys[h->nkeys++], 48, "val_%s", metric_key(m->metrics[i]));
    }
    FILE *f = a.out ? a.out : stdout;
    int mode = fl_dist_rank() > 0 ? FL_VERBOSE_SILENT : resolve_verbose(a.verbose, f); /* rank 0 prints */
    int64_t steps = (n_train + bs - 1) / bs;
    /* the callback list (Keras's CallbackList, History last) */
    int ncb = 0;
    bool batch_cb = false;
    for (; a.callbacks && a.callbacks[ncb]; ncb++)
        if (a.callbacks[ncb]->on_batch_end) batch_cb = true;
    fl_callback *const *cbs = a.callbacks;
    fl_logs logs = {0};
    m->stop_training = false;
    for (int c = 0; c < ncb; c++)
        if (cbs[c]->on_train_begin && cbs[c]->on_train_begin(m, &logs, cbs[c]->user) != FL_OK) goto fail_cb;
    if (check && !m->g.be->host_memory && !m->input->int_val && /* device: x once, the batches are gathered there */
        check_x_finite(m, &tr, xr, NULL, n_train, a.initial_epoch, epochs, 0, steps) != FL_OK)
        goto fail;
    double t_fit = now();
    for (int ep = a.initial_epoch; ep < epochs; ep++) {
        for (int64_t i = 0; i < n; i++) perm[i] = i;
        if (!a.no_shuffle) fl_rng_permutation(perm, n_train, m->seed, 0x5348554646ull << 24 | (uint64_t)ep);
        if (mode != FL_VERBOSE_SILENT && epochs > 1) { fprintf(f, "Epoch %d/%d\n", ep + 1, epochs); fflush(f); }
        logs.n = 0;
        for (int c = 0; c < ncb; c++)
            if (cbs[c]->on_epoch_begin && cbs[c]->on_epoch_begin(m, ep, &logs, cbs[c]->user) != FL_OK) goto fail_cb;
        progbar pb = {f, mode, steps, now(), 0, 0};
        char keys[FL_HIST_MAX_KEYS][48];
        double v[1 + FL_MAX_METRICS], vals[FL_HIST_MAX_KEYS];
        int64_t seen = 0;
        double t0 = now();
        if (reserve(m, bs < n_train ? bs : n_train) != FL_OK) goto fail;
        zero_stats(m);
        int64_t checked = 0; /* steps whose loss is known to be finite */
        int64_t steps_done = steps;
        for (int64_t s = 0; s < steps; s++) {
            int64_t b = n_train - s * bs < bs ? n_train - s * bs : bs, lo = 0, share = b;
            if (dist) { /* this rank's contiguous share of the global batch */
                fl_dp_share(b, &lo, &share);
                m->dist_batch = b;
                m->dist_share = share;
            }
            if (share > 0) load_batch(m, &tr, perm + s * bs + lo, share);
            if (check && m->g.be->host_memory && !m->input->int_val && /* int32 indices: no NaN to find */
                check_x_finite(m, &tr, m->input->val, perm + s * bs + lo, share, ep, epochs, s, steps) != FL_OK)
                goto fail;
            bool finite;
            if (train_step(m, &gs, b == bs, check, &finite) != FL_OK) goto fail;
            if (!finite) {
                nonfinite_loss(m, m->stats[0], ep, epochs, s, s + 1, steps);
                goto fail;
            }
            m->g.step++;
            seen += b;
            if (batch_cb) { /* the running logs of the epoch, as Keras's on_train_batch_end */
                read_stats(m, seen, v);
                if (check && !isfinite(v[0])) {
                    nonfinite_loss(m, v[0], ep, epochs, checked, s + 1, steps);
                    goto fail;
                }
                checked = s + 1;
                int nkv = stat_kv(m, v, "", keys, vals);
                logs.n = 0;
                for (int k = 0; k < nkv; k++) fl_logs_set(&logs, keys[k], (double)(float)vals[k]);
                for (int c = 0; c < ncb; c++)
                    if (cbs[c]->on_batch_end && cbs[c]->on_batch_end(m, s, &logs, cbs[c]->user) != FL_OK) goto fail_cb;
                if (m->stop_training) { steps_done = s + 1; break; }
            }
            if (s + 1 < steps && progbar_due(&pb, false)) {
                read_stats(m, seen, v);
                if (check && !isfinite(v[0])) {
                    nonfinite_loss(m, v[0], ep, epochs, checked, s + 1, steps);
                    goto fail;
                }
                checked = s + 1;
                int nkv = stat_kv(m, v, "", keys, vals);
                sort_kv(nkv, keys, vals);
                progbar_update(&pb, s + 1, nkv, keys, vals, false);
            }
        }
        m->dist_batch = m->dist_share = 0; /* validation and callbacks: whole batches on every rank */
        if (dist && fl_dp_average_moving_stats(m) != FL_OK) goto fail;
        read_stats(m, seen, v); /* waits for the device: the epoch's time ends here */
        if (device_status(m, "training") != FL_OK) goto fail;
        if (check && !isfinite(v[0])) {
            nonfinite_loss(m, v[0], ep, epochs, checked, steps_done, steps);
            goto fail;
        }
        if (check) { /* a NaN weight behind a ReLU keeps the loss finite: look once an epoch */
            char why[512];
            bool nomem;
            float *host = node_scratch(&m->g, &nomem);
            bool poisoned = !nomem && weights_nonfinite(m, host, why, sizeof why);
            free(host);
            if (poisoned) {
                fl_error(FL_ERR_NONFINITE, "fl_fit: epoch %d/%d, at its end: %s, although the loss stayed finite "
                         "(a ReLU hides NaN); training stopped (TerminateOnNaN) before the epoch's callbacks; set "
                         ".no_nan_check (flynn train --no-nan-check) to train on anyway", ep + 1, epochs, why);
                goto fail;
            }
        }
        h->train_seconds += now() - t0;
        h->train_samples += seen;
        float hv[FL_HIST_MAX_KEYS];
        int nkv = stat_kv(m, v, "", keys, vals);
        for (int k = 0; k < nkv; k++) hv[k] = (float)vals[k];
        if (has_val) {
            double r[1 + FL_MAX_METRICS];
            if (run_eval(m, val, vidx, nv, bs, r, NULL) != FL_OK) goto fail;
            int nv2 = stat_kv(m, r, "val_", keys + nkv, vals + nkv);
            for (int k = 0; k < nv2; k++) hv[nkv + k] = (float)vals[nkv + k];
            nkv += nv2;
        }
        logs.n = 0;
        for (int k = 0; k < nkv; k++) fl_logs_set(&logs, keys[k], (double)hv[k]);
        for (int c = 0; c < ncb; c++)
            if (cbs[c]->on_epoch_end && cbs[c]->on_epoch_end(m, ep, &logs, cbs[c]->user) != FL_OK) goto fail_cb;
        if (hist_push_logs(h, &logs) != FL_OK) goto fail;
        if (progbar_due(&pb, true)) { /* after the callbacks, as Keras's ProgbarLogger: with their keys */
            nkv = logs.n < FL_HIST_MAX_KEYS ? logs.n : FL_HIST_MAX_KEYS;
            for (int k = 0; k < nkv; k++) { snprintf(keys[k], sizeof keys[k], "%s", logs.keys[k]); vals[k] = logs.values[k]; }
            sort_kv(nkv, keys, vals);
            progbar_update(&pb, steps_done, nkv, keys, vals, true);
        }
        m->epochs_run++;
        if (a.on_epoch_end && !a.on_epoch_end(m, ep, h, a.user)) break;
        if (m->stop_training) break;
    }
    for (int c = 0; c < ncb; c++)
        if (cbs[c]->on_train_end && cbs[c]->on_train_end(m, &logs, cbs[c]->user) != FL_OK) goto fail_cb;
    if (dist && fl_dp_check_weights(m, "fl_fit: after training") != FL_OK) goto fail;
    h->seconds = now() - t_fit;
    if (gs.graph) m->g.be->graph_free(gs.graph);
    data_close(m, &tr); data_close(m, &vd);
    free(perm); free(vidx); free(yh); free(vyh); free(xo); free(vxo);
    return h;
fail_cb:
    fl_error_prefix("fl_fit: a callback failed: ");
fail:
    m->dist_batch = m->dist_share = 0;
    if (gs.graph) m->g.be->graph_free(gs.graph);
    data_close(m, &tr); data_close(m, &vd);
    free(perm); free(vidx); free(yh); free(vyh); free(xo); free(vxo);
    fl_history_free(h);
    return NULL;
}
