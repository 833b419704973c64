/*
 * train.c — compile, fit, evaluate and predict: the training loop (batching,
 * shuffling, the loss and its fused gradients, the optimizer step, metrics),
 * the Keras progress bar, and History.
 */
#include "nn.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/math.h"

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
        (o->op == FL_OP_ACT || o->op == FL_OP_DENSE || o->op == FL_OP_CONV2D))
        return FL_LI_SIGMOID_FUSED;
    return FL_LI_PROBS;
}

/* ---------------------------------------------------------- data checks */

typedef struct batch_src {
    const fl_tensor *x;
    float *y;          /* host float copy of the targets: (N,) or (N, out...) */
    int64_t y_row;     /* floats per sample in y */
    const int64_t *idx;/* sample order (NULL = identity) */
    int64_t n;
} batch_src;

static fl_status check_x(const fl_model *m, const fl_tensor *x, const char *what) {
    char a[128], b[128];
    if (!x) return fl_error(FL_ERR_INVALID_ARG, "%s: x is NULL", what);
    if (x->dtype != FL_FLOAT32)
        return fl_error(FL_ERR_INVALID_ARG, "%s: x is %s, expected float32 (convert with fl_to_float(x, 1/255.f))", what,
                        fl_dtype_name(x->dtype));
    const fl_node *in = m->input;
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
    int64_t rows = fl_node_sample_size(m->output) / out_classes(m);
    int64_t tcap = m->g.batch_cap * fl_node_sample_size(m->output);
    if (tcap > m->target_cap) {
        const fl_backend *be = m->g.be;
        if (m->target) be->free(m->target);
        if (m->row_loss) be->free(m->row_loss);
        if (m->row_score) be->free(m->row_score);
        m->target = be->alloc((size_t)tcap * sizeof(float));
        m->row_loss = be->alloc((size_t)(m->g.batch_cap * rows) * sizeof(float));
        m->row_score = be->alloc((size_t)(m->g.batch_cap * rows) * sizeof(float));
        if (!m->target || !m->row_loss || !m->row_score) {
            m->target_cap = 0;
            return fl_last_status();
        }
        m->target_cap = tcap;
    }
    return FL_OK;
}

/* Copies samples [start, start+b) of src (in src->idx order) to the device. */
static void load_batch(fl_model *m, const batch_src *src, int64_t start, int64_t b, float *stage_x, float *stage_y) {
    const fl_backend *be = m->g.be;
    int64_t xrow = fl_node_sample_size(m->input);
    const float *xd = src->x->data;
    for (int64_t i = 0; i < b; i++) {
        int64_t k = src->idx ? src->idx[start + i] : start + i;
        memcpy(stage_x + i * xrow, xd + k * xrow, (size_t)xrow * sizeof(float));
        if (src->y) memcpy(stage_y + i * src->y_row, src->y + k * src->y_row, (size_t)src->y_row * sizeof(float));
    }
    fl_graph_set_batch(&m->g, b);
    be->upload(m->input->val, stage_x, (size_t)(b * xrow) * sizeof(float));
    if (src->y) be->upload(m->target, stage_y, (size_t)(b * src->y_row) * sizeof(float));
}

typedef struct step_stats { double loss, metric[FL_MAX_METRICS]; } step_stats;

/* Loss (+ gradient when training) and metrics for the batch in the graph. */
static void loss_and_metrics(fl_model *m, bool grad, step_stats *st) {
    const fl_backend *be = m->g.be;
    fl_node *o = m->output;
    int C = out_classes(m);
    int64_t rows = fl_node_size(o) / C;
    int code = m->loss.kind == FL_LOSS_CATEGORICAL_CROSSENTROPY ? FL_LC_CCE
             : m->loss.kind == FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY ? FL_LC_SCCE
             : m->loss.kind == FL_LOSS_BINARY_CROSSENTROPY ? FL_LC_BCE : FL_LC_MSE;
    fl_loss_desc d = {code, loss_input(m), rows, C, 1.0f / (float)rows};
    be->loss(&d, o->val, m->target, m->row_loss, grad ? o->grad : NULL);
    if (grad) {
        o->grad_ready = true;
        o->grad_is_preact = d.input == FL_LI_SOFTMAX_FUSED || d.input == FL_LI_SIGMOID_FUSED;
    }
    /* per-sample averages, so they weight by samples like Keras's trackers */
    int64_t b = m->g.batch;
    st->loss = be->sum(rows, m->row_loss) / (double)rows * (double)b;
    for (int i = 0; i < m->nmetrics; i++) {
        be->metric(m->metric_codes[i], rows, C, o->val, m->target, m->row_score);
        st->metric[i] = be->sum(rows, m->row_score) / (double)rows * (double)b;
    }
}

/* ------------------------------------------------------------ history */

#define FL_HIST_MAX_KEYS (2 * (FL_MAX_METRICS + 1))

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

/* keys/vals: the "- key: value" pairs, already in Keras order */
static void progbar_update(progbar *p, int64_t cur, int nkv, char keys[][48], const double *vals, bool final) {
    if (p->mode == FL_VERBOSE_SILENT) return;
    double t = now();
    if (p->mode == FL_VERBOSE_EPOCH && !final) return;
    if (p->mode == FL_VERBOSE_BAR && !final && t - p->last < 0.05) return;
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

/* --------------------------------------------------------- evaluation */

/* Runs inference over src and writes mean loss and metrics into out. */
static fl_status run_eval(fl_model *m, const batch_src *src, int64_t bs, double *out, progbar *pb) {
    int64_t xrow = fl_node_sample_size(m->input);
    FL_TRY(reserve(m, bs < src->n ? bs : src->n));
    float *sx = fl_malloc((size_t)(m->g.batch_cap * xrow) * sizeof(float), "batch staging");
    float *sy = fl_malloc((size_t)(m->g.batch_cap * src->y_row) * sizeof(float), "batch staging");
    if (!sx || !sy) { free(sx); free(sy); return fl_last_status(); }
    double tot[1 + FL_MAX_METRICS] = {0};
    int64_t steps = (src->n + bs - 1) / bs, seen = 0;
    for (int64_t s = 0; s < steps; s++) {
        int64_t b = src->n - s * bs < bs ? src->n - s * bs : bs;
        load_batch(m, src, s * bs, b, sx, sy);
        fl_graph_forward(&m->g, false);
        step_stats st;
        loss_and_metrics(m, false, &st);
        tot[0] += st.loss;
        for (int i = 0; i < m->nmetrics; i++) tot[1 + i] += st.metric[i];
        seen += b;
        if (pb) {
            char keys[1 + FL_MAX_METRICS][48];
            double vals[1 + FL_MAX_METRICS];
            snprintf(keys[0], 48, "loss");
            vals[0] = tot[0] / (double)seen;
            for (int i = 0; i < m->nmetrics; i++) {
                snprintf(keys[1 + i], 48, "%s", metric_key(m->metrics[i]));
                vals[1 + i] = tot[1 + i] / (double)seen;
            }
            sort_kv(1 + m->nmetrics, keys, vals);
            progbar_update(pb, s + 1, 1 + m->nmetrics, keys, vals, s + 1 == steps);
        }
    }
    for (int i = 0; i <= m->nmetrics; i++) out[i] = tot[i] / (double)seen;
    free(sx);
    free(sy);
    return FL_OK;
}

fl_status fl_evaluate_(fl_model *m, const fl_tensor *x, const fl_tensor *y, float *results, int n_results,
                       fl_eval_args a) {
    if (!m) return fl_error(FL_ERR_INVALID_ARG, "fl_evaluate: model is NULL");
    if (!m->compiled) return fl_error(FL_ERR_STATE, "fl_evaluate: model '%s' is not compiled (call fl_compile first)", m->name);
    FL_TRY(check_x(m, x, "fl_evaluate"));
    int64_t bs = a.batch_size > 0 ? a.batch_size : 32;
    if (a.batch_size < 0) return fl_error(FL_ERR_INVALID_ARG, "fl_evaluate: batch_size %d, expected > 0", a.batch_size);
    batch_src src = {x, NULL, 0, NULL, x->shape[0]};
    src.y = prepare_y(m, x, y, &src.y_row, "fl_evaluate");
    if (!src.y) return fl_last_status();
    FILE *f = a.out ? a.out : stdout;
    progbar pb = {f, resolve_verbose(a.verbose, f), (src.n + bs - 1) / bs, now(), 0, 0};
    double r[1 + FL_MAX_METRICS];
    fl_status s = run_eval(m, &src, bs, r, &pb);
    free(src.y);
    if (s != FL_OK) return s;
    for (int i = 0; i < n_results && i <= m->nmetrics; i++) results[i] = (float)r[i];
    return FL_OK;
}

fl_tensor *fl_predict_(fl_model *m, const fl_tensor *x, fl_eval_args a) {
    if (!m) return fl_error_null(FL_ERR_INVALID_ARG, "fl_predict: model is NULL");
    if (check_x(m, x, "fl_predict") != FL_OK) return NULL;
    if (a.batch_size < 0) return fl_error_null(FL_ERR_INVALID_ARG, "fl_predict: batch_size %d, expected > 0", a.batch_size);
    int64_t bs = a.batch_size > 0 ? a.batch_size : 32, n = x->shape[0];
    int64_t orow = fl_node_sample_size(m->output), xrow = fl_node_sample_size(m->input);
    int64_t shape[FL_MAX_DIMS];
    memcpy(shape, m->output->shape, sizeof shape);
    shape[0] = n;
    fl_tensor *out = fl_tensor_new(FL_FLOAT32, m->output->ndim, shape);
    if (!out) return NULL;
    if (reserve(m, bs < n ? bs : n) != FL_OK) { fl_tensor_free(out); return NULL; }
    float *sx = fl_malloc((size_t)(m->g.batch_cap * xrow) * sizeof(float), "batch staging");
    if (!sx) { fl_tensor_free(out); return NULL; }
    batch_src src = {x, NULL, 0, NULL, n};
    for (int64_t s = 0; s * bs < n; s++) {
        int64_t b = n - s * bs < bs ? n - s * bs : bs;
        load_batch(m, &src, s * bs, b, sx, NULL);
        fl_graph_forward(&m->g, false);
        m->g.be->download((float *)out->data + s * bs * orow, m->output->val, (size_t)(b * orow) * sizeof(float));
    }
    free(sx);
    return out;
}

/* ----------------------------------------------------------------- fit */

fl_history *fl_fit_(fl_model *m, const fl_tensor *x, const fl_tensor *y, fl_fit_args a) {
    if (!m) return fl_error_null(FL_ERR_INVALID_ARG, "fl_fit: model is NULL");
    if (!m->compiled)
        return fl_error_null(FL_ERR_STATE, "fl_fit: model '%s' is not compiled (call fl_compile first)", m->name);
    if (check_x(m, x, "fl_fit") != FL_OK) return NULL;
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
    int64_t n = x->shape[0];
    int64_t y_row = 0;
    float *yh = prepare_y(m, x, y, &y_row, "fl_fit");
    if (!yh) return NULL;

    /* Keras: the last fraction (before shuffling) is the validation set */
    int64_t n_train = n, n_val = 0;
    if (a.validation_split > 0) {
        n_train = (int64_t)ceil((double)n * (1.0 - a.validation_split));
        n_val = n - n_train;
        if (n_train <= 0 || n_val <= 0) {
            free(yh);
            return fl_error_null(FL_ERR_INVALID_ARG, "fl_fit: validation_split %g of %lld samples leaves %lld for training and %lld for validation",
                                 a.validation_split, (long long)n, (long long)n_train, (long long)n_val);
        }
    }
    batch_src val = {0};
    float *vyh = NULL;
    if (a.validation_x) {
        if (check_x(m, a.validation_x, "fl_fit (validation data)") != FL_OK) { free(yh); return NULL; }
        int64_t vr;
        vyh = prepare_y(m, a.validation_x, a.validation_y, &vr, "fl_fit (validation data)");
        if (!vyh) { free(yh); return NULL; }
        val = (batch_src){a.validation_x, vyh, vr, NULL, a.validation_x->shape[0]};
    } else if (n_val > 0) {
        /* a view of the tail of x: same data, shifted indices */
        val = (batch_src){x, yh, y_row, NULL, n_val};
    }
    int64_t *perm = fl_malloc((size_t)n * sizeof(int64_t), "shuffle order");
    int64_t *vidx = n_val > 0 ? fl_malloc((size_t)n_val * sizeof(int64_t), "validation order") : NULL;
    fl_history *h = fl_calloc(1, sizeof *h, "History");
    int64_t xrow = fl_node_sample_size(m->input);
    float *sx = NULL, *sy = NULL;
    if (!perm || (n_val > 0 && !vidx) || !h || reserve(m, bs < n_train ? bs : n_train) != FL_OK) goto fail;
    sx = fl_malloc((size_t)(m->g.batch_cap * xrow) * sizeof(float), "batch staging");
    sy = fl_malloc((size_t)(m->g.batch_cap * y_row) * sizeof(float), "batch staging");
    if (!sx || !sy) goto fail;
    if (vidx) {
        for (int64_t i = 0; i < n_val; i++) vidx[i] = n_train + i;
        val.idx = vidx;
    }
    bool has_val = val.n > 0;
    h->nkeys = 0;
    snprintf(h->keys[h->nkeys++], 48, "loss");
    for (int i = 0; i < m->nmetrics; i++) snprintf(h->keys[h->nkeys++], 48, "%s", metric_key(m->metrics[i]));
    if (has_val) {
        snprintf(h->keys[h->nkeys++], 48, "val_loss");
        for (int i = 0; i < m->nmetrics; i++) snprintf(h->keys[h->nkeys++], 48, "val_%s", metric_key(m->metrics[i]));
    }
    FILE *f = a.out ? a.out : stdout;
    int mode = resolve_verbose(a.verbose, f);
    int64_t steps = (n_train + bs - 1) / bs;
    batch_src tr = {x, yh, y_row, perm, n_train};
    double t_fit = now();
    for (int ep = a.initial_epoch; ep < epochs; ep++) {
        for (int64_t i = 0; i < n; i++) perm[i] = i;
        if (!a.no_shuffle) fl_rng_permutation(perm, n_train, m->seed, 0x5348554646ull << 24 | (uint64_t)ep);
        if (mode != FL_VERBOSE_SILENT && epochs > 1) { fprintf(f, "Epoch %d/%d\n", ep + 1, epochs); fflush(f); }
        progbar pb = {f, mode, steps, now(), 0, 0};
        double tot[1 + FL_MAX_METRICS] = {0};
        int64_t seen = 0;
        double t0 = now();
        char keys[FL_HIST_MAX_KEYS][48];
        double vals[FL_HIST_MAX_KEYS];
        int nkv = 0;
        for (int64_t s = 0; s < steps; s++) {
            int64_t b = n_train - s * bs < bs ? n_train - s * bs : bs;
            load_batch(m, &tr, s * bs, b, sx, sy);
            fl_graph_clear_grads(&m->g);
            fl_graph_forward(&m->g, true);
            step_stats st;
            loss_and_metrics(m, true, &st);
            fl_graph_backward(&m->g);
            fl_optimizer_step(m->opt);
            m->g.step++;
            tot[0] += st.loss;
            for (int i = 0; i < m->nmetrics; i++) tot[1 + i] += st.metric[i];
            seen += b;
            nkv = 1 + m->nmetrics;
            snprintf(keys[0], 48, "loss");
            vals[0] = tot[0] / (double)seen;
            for (int i = 0; i < m->nmetrics; i++) {
                snprintf(keys[1 + i], 48, "%s", metric_key(m->metrics[i]));
                vals[1 + i] = tot[1 + i] / (double)seen;
            }
            if (!isfinite(vals[0]) && s == 0) { /* keep going: Keras does; the user sees nan */ }
            if (s + 1 < steps) {
                double sv[FL_HIST_MAX_KEYS];
                char sk[FL_HIST_MAX_KEYS][48];
                memcpy(sv, vals, sizeof sv);
                memcpy(sk, keys, sizeof sk);
                sort_kv(nkv, sk, sv);
                progbar_update(&pb, s + 1, nkv, sk, sv, false);
            }
        }
        m->g.be->sync();
        h->train_seconds += now() - t0;
        h->train_samples += n_train;
        float hv[FL_HIST_MAX_KEYS];
        for (int k = 0; k < nkv; k++) hv[k] = (float)vals[k];
        if (has_val) {
            double r[1 + FL_MAX_METRICS];
            if (run_eval(m, &val, bs, r, NULL) != FL_OK) goto fail;
            snprintf(keys[nkv], 48, "val_loss");
            vals[nkv] = r[0];
            hv[nkv] = (float)r[0];
            for (int i = 0; i < m->nmetrics; i++) {
                snprintf(keys[nkv + 1 + i], 48, "val_%s", metric_key(m->metrics[i]));
                vals[nkv + 1 + i] = r[1 + i];
                hv[nkv + 1 + i] = (float)r[1 + i];
            }
            nkv += 1 + m->nmetrics;
        }
        sort_kv(nkv, keys, vals);
        progbar_update(&pb, steps, nkv, keys, vals, true);
        if (hist_push(h, hv) != FL_OK) goto fail;
        m->epochs_run++;
        if (a.on_epoch_end && !a.on_epoch_end(m, ep, h, a.user)) break;
    }
    h->seconds = now() - t_fit;
    free(sx); free(sy); free(perm); free(vidx); free(yh); free(vyh);
    return h;
fail:
    free(sx); free(sy); free(perm); free(vidx); free(yh); free(vyh);
    fl_history_free(h);
    return NULL;
}
