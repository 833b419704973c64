/*
 * train.c — compile, fit, evaluate and predict: the training loop (batching,
 * shuffling, the loss and its fused gradients, the optimizer step, metrics),
 * the Keras progress bar, and History. The batches come from arrays in
 * memory (fl_fit) or from a stream read on background threads
 * (fl_fit_stream, src/io/stream.c): data_src below hides which, so both
 * run the same epoch loop.
 */
#include "core/clock.h"
#include "nn.h"
#include "core/error.h"
#include "core/plan.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "io/io.h"
#include "dist/data_parallel.h"
#include "dist/mpi.h"
#include "dist/nccl.h"
#include "nn/step.h"
#include "ops/math.h"
#include "ops/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *fl_loss_name(fl_loss_kind k) {
    switch (k) {
    case FL_LOSS_CATEGORICAL_CROSSENTROPY: return "categorical_crossentropy";
    case FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY: return "sparse_categorical_crossentropy";
    case FL_LOSS_BINARY_CROSSENTROPY: return "binary_crossentropy";
    case FL_LOSS_MEAN_SQUARED_ERROR: return "mean_squared_error";
    default: return "none";
    }
}

const char *fl_metric_key(fl_metric m) {
    switch (m) {
    case FL_ACCURACY: return "accuracy";
    case FL_CATEGORICAL_ACCURACY: return "categorical_accuracy";
    case FL_SPARSE_CATEGORICAL_ACCURACY: return "sparse_categorical_accuracy";
    case FL_BINARY_ACCURACY: return "binary_accuracy";
    case FL_MAE: return "mae";
    case FL_MSE: return "mse";
    case FL_METRIC_MEAN_ABSOLUTE_ERROR: return "mean_absolute_error";
    case FL_METRIC_MEAN_SQUARED_ERROR: return "mean_squared_error";
    default: return "?";
    }
}

static int out_classes(const fl_model *m) { return (int)m->output->shape[m->output->ndim - 1]; }


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
        case FL_MAE: case FL_METRIC_MEAN_ABSOLUTE_ERROR: codes[i] = FL_MC_MAE; break;
        case FL_MSE: case FL_METRIC_MEAN_SQUARED_ERROR: codes[i] = FL_MC_MSE; break;
        default:
            fl_optimizer_free(opt);
            return fl_error(FL_ERR_INVALID_ARG, "fl_compile: metric %d (position %d) is not an fl_metric", (int)mt, i);
        }
        if ((codes[i] == FL_MC_MAE || codes[i] == FL_MC_MSE) && loss.kind == FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY) {
            fl_optimizer_free(opt);
            return fl_error(FL_ERR_INVALID_ARG, "fl_compile: the metric %s needs targets of the output's shape, not the "
                            "class indices of sparse_categorical_crossentropy", fl_metric_key(mt));
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

/* Checks x against the model's input and binds the input's None axes to
 * x's lengths (the graph is planned for them: fl_model_bind). */
static fl_status check_x(fl_model *m, const fl_tensor *x, const char *what) {
    if (m->ninputs != 1 || m->noutputs != 1)
        return fl_error(FL_ERR_UNSUPPORTED,
                        "%s: model '%s' has %d inputs and %d outputs; fit, evaluate and predict take models with one "
                        "of each (use fl_predict_multi for predictions)", what, m->name, m->ninputs, m->noutputs);
    FL_TRY(check_x_for(m, m->input, x, what));
    return fl_model_bind(m, &x, 1, what);
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
    for (int i = 1; ok && i < in->ndim; i++) /* a None axis takes any length */
        ok = in->dyn & (1u << i) ? x->shape[i] > 0 : x->shape[i] == in->shape[i];
    if (!ok) {
        int64_t s[FL_MAX_DIMS];
        memcpy(s, in->shape, sizeof s);
        s[0] = -1;
        for (int i = 1; i < in->ndim; i++)
            if (in->dyn & (1u << i)) s[i] = -1;
        return fl_error(FL_ERR_SHAPE, "%s: x has shape %s, model '%s' expects %s", what,
                        fl_shape_str(x->ndim, x->shape, a, sizeof a), m->name, fl_shape_str(in->ndim, s, b, sizeof b));
    }
    return FL_OK;
}

/* The inputs of fit and evaluate: one array per model input, each checked
 * as check_x_for does (named by its position and the input's name when the
 * model has several), all with the same number of samples; one output. The
 * inputs' None axes are bound to the arrays' lengths (fl_model_bind). */
static fl_status check_xs(fl_model *m, const fl_tensor *const *xs, int nx, const char *what) {
    if (m->noutputs != 1)
        return fl_error(FL_ERR_UNSUPPORTED,
                        "%s: model '%s' has %d outputs; fit and evaluate take models with one output (use "
                        "fl_predict_multi for predictions)", what, m->name, m->noutputs);
    if (!xs) return fl_error(FL_ERR_INVALID_ARG, "%s: the input arrays are NULL", what);
    if (nx != m->ninputs) {
        char names[256] = "";
        for (int i = 0; i < m->ninputs; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'", i ? ", " : "", m->inputs[i]->name);
        return fl_error(FL_ERR_INVALID_ARG, "%s: model '%s' has %d input%s (%s), given %d array%s%s", what, m->name,
                        m->ninputs, m->ninputs == 1 ? "" : "s", names, nx, nx == 1 ? "" : "s",
                        m->ninputs > 1 && nx == 1 ? ": give one array per input (fl_fit_multi, fl_evaluate_multi)" : "");
    }
    for (int i = 0; i < nx; i++) {
        char w[192];
        if (nx > 1) snprintf(w, sizeof w, "%s, input %d '%s'", what, i, m->inputs[i]->name);
        else snprintf(w, sizeof w, "%s", what);
        FL_TRY(check_x_for(m, m->inputs[i], xs[i], w));
        if (xs[i]->shape[0] != xs[0]->shape[0])
            return fl_error(FL_ERR_SHAPE, "%s: input %d '%s' has %lld samples, input 0 '%s' has %lld: every input "
                            "needs the same number of samples", what, i, m->inputs[i]->name,
                            (long long)xs[i]->shape[0], m->inputs[0]->name, (long long)xs[0]->shape[0]);
    }
    return fl_model_bind(m, xs, nx, what);
}

static const char *index_str(int64_t i, int nd, const int64_t *dims, char *buf, size_t n);

/* The Embeddings that read input `in` refuse an index outside [0,
 * input_dim) here, once per call, before any batch runs: the kernels never
 * see one (and the forward pass stays a plain gather). */
static fl_status check_indices(const fl_model *m, const fl_node *in, const fl_tensor *x, const int32_t *v,
                               const float *f, int64_t n, const char *what) {
    const fl_graph *g = &m->g;
    /* x's own sample size: the graph may be bound to another length (a stream's batch: the input's) */
    int64_t per = x ? fl_tensor_size(x) / (n ? n : 1) : fl_node_sample_size(in);
    const int nd = x ? x->ndim - 1 : in->ndim - 1;
    const int64_t *dims = x ? x->shape + 1 : in->shape + 1;
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
                                index_str(i % per, nd, dims, a, sizeof a), e->name, (long long)dim);
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
        if (check_indices(m, in, x, NULL, xf, x->shape[0], what)) { free(*owned); *owned = NULL; return NULL; }
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
    if (check_indices(m, in, x, v, NULL, x->shape[0], what)) { free(*owned); *owned = NULL; return NULL; }
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

/* A stream's sample shapes against the model's input and the loss (as check_x and prepare_y check arrays);
 * *y_row: floats of y per sample. */
static fl_status check_stream(const fl_model *m, const fl_data_stream *s, const char *what, int64_t *y_row) {
    char a[128], b[128];
    if (!s) return fl_error(FL_ERR_INVALID_ARG, "%s: the stream is NULL", what);
    if (m->ninputs != 1 || m->noutputs != 1)
        return fl_error(FL_ERR_UNSUPPORTED, "%s: model '%s' has %d inputs and %d outputs; a stream feeds models with one "
                        "of each", what, m->name, m->ninputs, m->noutputs);
    const fl_node *in = m->input, *o = m->output;
    int64_t xs[FL_MAX_DIMS], ys[FL_MAX_DIMS];
    int nd = fl_data_stream_x_shape(s, xs);
    bool ok = nd == in->ndim - 1;
    for (int i = 0; ok && i < nd; i++) ok = xs[i] == in->shape[i + 1];
    if (!ok)
        return fl_error(FL_ERR_SHAPE, "%s: the stream's samples have shape %s, model '%s' expects %s", what,
                        fl_shape_str(nd, xs, a, sizeof a), m->name, fl_shape_str(in->ndim - 1, in->shape + 1, b, sizeof b));
    int ynd = fl_data_stream_y_shape(s, ys);
    if (ynd < 0) return fl_error(FL_ERR_INVALID_ARG, "%s: the stream has no labels (y), which training needs", what);
    int64_t per = 1, out_row = fl_node_sample_size(o);
    for (int i = 0; i < ynd; i++) per *= ys[i];
    if (m->loss.kind == FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY) {
        if (per != out_row / out_classes(m))
            return fl_error(FL_ERR_SHAPE, "%s: sparse_categorical_crossentropy wants %lld class index(es) per sample, the "
                            "stream's y has shape %s per sample", what, (long long)(out_row / out_classes(m)),
                            fl_shape_str(ynd, ys, a, sizeof a));
    } else if (per != out_row) {
        return fl_error(FL_ERR_SHAPE, "%s: the stream's y has shape %s per sample, the %s loss wants the output shape %s%s",
                        what, fl_shape_str(ynd, ys, a, sizeof a), fl_loss_name(m->loss.kind),
                        fl_shape_str(o->ndim - 1, o->shape + 1, b, sizeof b),
                        m->loss.kind == FL_LOSS_CATEGORICAL_CROSSENTROPY
                            ? " (one-hot targets: fl_data_stream_one_hot, or label_mode categorical)" : "");
    }
    *y_row = per;
    return FL_OK;
}

/* The classes a class_weight may name: the output's, or 0 and 1 for a single sigmoid unit. */
static int weight_classes(const fl_model *m) { return out_classes(m) > 1 ? out_classes(m) : 2; }

/* The loss rows' weights, rows_per_sample (the output's rows: 1, or its
 * steps) floats a sample, from sample_weight ((N,) or (N, 1): one weight a
 * sample, the same for each of its rows; (N, steps...): one a row), or from
 * class_weight by the class of each sample's y as Keras's
 * class_weight_to_sample_weights finds it (one-hot rows: argmax; one value:
 * rounded half to even; a class without a weight: 1). *out stays NULL when
 * neither is given. yh: y as prepare_y made it, yrow floats a sample. */
static fl_status prepare_weights(const fl_model *m, const fl_tensor *sw, const float *cw, int ncw, const float *yh,
                                 int64_t yrow, int64_t n, const char *what, float **out) {
    char a[128];
    *out = NULL;
    int64_t rows = fl_node_sample_size(m->output) / out_classes(m);
    if (ncw < 0) return fl_error(FL_ERR_INVALID_ARG, "%s: num_class_weights %d, expected >= 0", what, ncw);
    if (ncw > 0 && !cw) return fl_error(FL_ERR_INVALID_ARG, "%s: num_class_weights %d but class_weight is NULL", what, ncw);
    if (!sw && ncw == 0) return FL_OK;
    if (sw && ncw > 0)
        return fl_error(FL_ERR_INVALID_ARG, "%s: give sample_weight or class_weight, not both (as Keras: fold the "
                        "class weights into the sample weights)", what);
    float *w = fl_malloc((size_t)(n * rows > 0 ? n * rows : 1) * sizeof(float), "sample weights");
    if (!w) return fl_last_status();
    if (sw) {
        int64_t per = sw->ndim >= 1 && sw->shape[0] == n ? fl_tensor_size(sw) / n : -1;
        if (per != 1 && per != rows) {
            free(w);
            if (rows > 1)
                return fl_error(FL_ERR_SHAPE, "%s: sample_weight has shape %s, expected (%lld,) (one weight a sample) "
                                "or (%lld, %lld) (one a step of the output's %lld)", what,
                                fl_shape_str(sw->ndim, sw->shape, a, sizeof a), (long long)n, (long long)n,
                                (long long)rows, (long long)rows);
            return fl_error(FL_ERR_SHAPE, "%s: sample_weight has shape %s, expected (%lld,): one weight per sample of x",
                            what, fl_shape_str(sw->ndim, sw->shape, a, sizeof a), (long long)n);
        }
        for (int64_t i = 0; i < n * per; i++) {
            float v = get_as_float(sw, i);
            if (!(v >= 0) || !isfinite(v)) {
                free(w);
                a[0] = 0;
                if (per > 1) snprintf(a, sizeof a, "[%lld]", (long long)(i % per));
                return fl_error(FL_ERR_INVALID_ARG, "%s: sample_weight[%lld]%s is %g: a weight must be finite and >= 0",
                                what, (long long)(i / per), a, (double)v);
            }
            if (per == rows) w[i] = v;
            else for (int64_t r = 0; r < rows; r++) w[i * rows + r] = v;
        }
        *out = w;
        return FL_OK;
    }
    if (rows != 1) {
        free(w);
        return fl_error(FL_ERR_UNSUPPORTED, "%s: class_weight needs one class per sample, and model '%s''s output %s "
                        "has %lld rows a sample (Keras cannot weigh them by class either): give sample_weight of shape "
                        "(%lld, %lld) instead", what, m->name, fl_shape_str(m->output->ndim, m->output->shape, a, sizeof a),
                        (long long)rows, (long long)n, (long long)rows);
    }
    int classes = weight_classes(m);
    if (ncw > classes) {
        free(w);
        return fl_error(FL_ERR_INVALID_ARG, "%s: class_weight has weights for classes 0..%d, but model '%s''s output has "
                        "%d classes (0..%d)", what, ncw - 1, m->name, classes, classes - 1);
    }
    for (int k = 0; k < ncw; k++)
        if (!(cw[k] >= 0) || !isfinite(cw[k])) {
            free(w);
            return fl_error(FL_ERR_INVALID_ARG, "%s: class_weight[%d] is %g: a weight must be finite and >= 0", what, k,
                            (double)cw[k]);
        }
    for (int64_t i = 0; i < n; i++) {
        const float *t = yh + i * yrow;
        int64_t cls = 0;
        if (yrow == 1) {
            cls = (int64_t)rint((double)t[0]); /* numpy's round: half to even */
        } else {
            for (int64_t j = 1; j < yrow; j++) if (t[j] > t[cls]) cls = j; /* argmax: the first largest */
        }
        w[i] = cls >= 0 && cls < ncw ? cw[cls] : 1.0f;
    }
    *out = w;
    return FL_OK;
}

static bool inputs_rows(const fl_model *m, const fl_tensor *const *xs, int nx, const char *what, const float **rows,
                        float **xo);
static void free_rows(float **xo, int nx);

/* Makes the step buffers hold `batch` samples, for training or (infer) for
 * forward passes only. */
static fl_status reserve(fl_model *m, int64_t batch, bool infer) {
    fl_model_weights_ready(m); /* every step reads them */
    FL_TRY(infer ? fl_graph_reserve_infer(&m->g, batch) : fl_graph_reserve(&m->g, batch));
    const fl_backend *be = m->g.be;
    int64_t rows = fl_node_sample_size(m->output) / out_classes(m);
    int64_t tcap = m->g.batch_cap * fl_node_sample_size(m->output);
    if (!m->stats) {
        m->stats = be->alloc(FL_STATS * sizeof(double));
        if (!m->stats) return fl_last_status();
    }
    if (tcap > m->target_cap) {
        be->free(m->target); be->free(m->row_loss); be->free(m->row_score); be->free(m->idx_dev); be->free(m->weight);
        free(m->stage_x); free(m->stage_y); free(m->stage_w);
        m->target = m->row_loss = m->row_score = m->weight = NULL;
        m->idx_dev = NULL;
        m->stage_x = m->stage_y = m->stage_w = NULL;
        m->target_cap = 0;
        m->target = be->alloc((size_t)tcap * sizeof(float));
        m->row_loss = m->target ? be->alloc((size_t)(m->g.batch_cap * rows) * sizeof(float)) : NULL;
        m->row_score = m->row_loss ? be->alloc((size_t)(m->g.batch_cap * rows) * sizeof(float)) : NULL;
        m->weight = m->row_score ? be->alloc((size_t)(m->g.batch_cap * rows) * sizeof(float)) : NULL;
        if (!m->weight) return fl_last_status();
        if (!be->host_memory) {
            /* device backends: batch indices, and host staging for data that stays on the host */
            m->idx_dev = be->alloc((size_t)m->g.batch_cap * sizeof(int64_t));
            int64_t xmax = 0;
            for (int i = 0; i < m->ninputs; i++)
                if (fl_node_sample_size(m->inputs[i]) > xmax) xmax = fl_node_sample_size(m->inputs[i]);
            m->stage_x = fl_malloc((size_t)(m->g.batch_cap * xmax) * sizeof(float), "batch staging");
            m->stage_y = fl_malloc((size_t)tcap * sizeof(float), "batch staging");
            m->stage_w = fl_malloc((size_t)(m->g.batch_cap * rows) * sizeof(float), "batch staging");
            if (!m->idx_dev || !m->stage_x || !m->stage_y || !m->stage_w) return fl_last_status();
        }
        m->target_cap = tcap;
    }
    return FL_OK;
}

/* A data set as the training loop reads it: one array of rows per model
 * input, the targets y (as floats) and the sample weights (one per loss row)
 * on the host, and copies on the device when the backend's memory is not the
 * host's and they all fit, so that a batch is gathered on the device; else
 * every batch is staged through the host. A batch takes the same samples of
 * every array (shuffling permutes the inputs, y and the weights together). */
typedef struct data_src {
    int nx;                                  /* inputs */
    fl_node *in[FL_MODEL_MAX_IO];            /* the input nodes the rows go to */
    int64_t n, xrow[FL_MODEL_MAX_IO];        /* samples; floats per sample of each input */
    int64_t yrow, wrow;                      /* floats per sample of y and of the weights (0: none) */
    const float *hx[FL_MODEL_MAX_IO], *hy, *hw;
    float *dx[FL_MODEL_MAX_IO], *dy, *dw;    /* device copies (NULL: host memory, or not resident) */
    bool resident;
    /* a stream instead of hx/hy: batches come from the prefetcher in the order given to data_begin */
    fl_data_stream *stream;
    fl_prefetch *pf;
    fl_dtype xdt;            /* the stream's x: float32 or int32 */
    bool sparse, check_y;    /* y must hold class indices in [0, classes); y must be finite */
    const float *last_x;     /* the host rows of the last batch (for the NaN check on device backends) */
    double wait;             /* seconds load_batch waited for batches */
} data_src;

static void data_close(fl_model *m, data_src *d);

/* hx[i]: the rows of input ins[i] (i < nx); hy (yrow floats a sample) and hw
 * (wrow) may be NULL. */
static fl_status data_open(fl_model *m, int nx, fl_node *const *ins, const float *const *hx, const float *hy,
                           int64_t yrow, const float *hw, int64_t wrow, int64_t n, data_src *d) {
    const fl_backend *be = m->g.be;
    memset(d, 0, sizeof *d);
    d->nx = nx;
    d->n = n;
    size_t bytes = 0; /* x's rows: the graph is bound to x's length when its data opens */
    for (int i = 0; i < nx; i++) {
        d->in[i] = ins[i];
        d->xrow[i] = fl_node_sample_size(ins[i]);
        d->hx[i] = hx[i];
        bytes += (size_t)(n * d->xrow[i]) * sizeof(float);
    }
    d->yrow = hy ? yrow : 0;
    d->wrow = hw ? wrow : 0;
    d->hy = hy;
    d->hw = hw;
    if (be->host_memory) { d->resident = true; return FL_OK; }
    size_t yb = (size_t)(n * d->yrow) * sizeof(float), wb = (size_t)(n * d->wrow) * sizeof(float);
    size_t fr = 0, total = 0;
    be->mem_info(&fr, &total);
    if (bytes + yb + wb > fr / 2) return FL_OK; /* too big: batches are staged through the host */
    bool ok = true;
    for (int i = 0; i < nx && ok; i++) ok = (d->dx[i] = be->alloc((size_t)(n * d->xrow[i]) * sizeof(float))) != NULL;
    if (ok && yb) ok = (d->dy = be->alloc(yb)) != NULL;
    if (ok && wb) ok = (d->dw = be->alloc(wb)) != NULL;
    if (!ok) { /* staged after all */
        data_close(m, d);
        d->nx = nx;
        d->n = n;
        for (int i = 0; i < nx; i++) { d->in[i] = ins[i]; d->xrow[i] = fl_node_sample_size(ins[i]); d->hx[i] = hx[i]; }
        d->yrow = hy ? yrow : 0;
        d->wrow = hw ? wrow : 0;
        d->hy = hy;
        d->hw = hw;
        fl_clear_error();
        return FL_OK;
    }
    for (int i = 0; i < nx; i++) be->upload(d->dx[i], hx[i], (size_t)(n * d->xrow[i]) * sizeof(float));
    if (yb) be->upload(d->dy, hy, yb);
    if (wb) be->upload(d->dw, hw, wb);
    d->resident = true;
    return FL_OK;
}

/* A stream as the rows of input `in`: its sample shapes were checked (check_stream). */
static fl_status data_open_stream(fl_model *m, fl_node *in, fl_data_stream *s, int64_t yrow, int64_t bs,
                                  const fl_fit_args *a, bool check, data_src *d) {
    memset(d, 0, sizeof *d);
    d->nx = 1;
    d->in[0] = in;
    d->n = fl_data_stream_size(s);
    d->xrow[0] = fl_node_sample_size(in);
    d->yrow = yrow;
    d->stream = s;
    d->xdt = fl_data_stream_x_dtype(s);
    d->sparse = m->loss.kind == FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    d->check_y = check;
    if (a->prefetch < -1 || a->workers < 0)
        return fl_error(FL_ERR_INVALID_ARG, "fl_fit_stream: prefetch %d, workers %d, expected prefetch >= -1 (-1: none, 0: "
                        "the default 2) and workers >= 0 (0: 1)", a->prefetch, a->workers);
    int depth = a->prefetch == 0 ? 2 : a->prefetch < 0 ? 0 : a->prefetch;
    d->pf = fl_prefetch_open(s, bs, depth, a->workers > 0 ? a->workers : 1);
    return d->pf ? FL_OK : fl_last_status();
}

/* Starts a pass over the samples order[0..n) (a stream reads ahead from here; arrays need nothing). */
static fl_status data_begin(data_src *d, int epoch, const int64_t *order, int64_t n) {
    return d->pf ? fl_prefetch_begin(d->pf, epoch, order, n) : FL_OK;
}
static void data_end(data_src *d) { fl_prefetch_end(d->pf); }

static void data_close(fl_model *m, data_src *d) {
    fl_prefetch_close(d->pf);
    for (int i = 0; i < d->nx; i++)
        if (d->dx[i]) m->g.be->free(d->dx[i]);
    if (d->dy) m->g.be->free(d->dy);
    if (d->dw) m->g.be->free(d->dw);
    memset(d, 0, sizeof *d);
}

/* The stream's next batch (samples idx[0..b) of the pass) into the input node and the targets: x as the
 * input holds it (as x_rows converts arrays), y checked as prepare_y checks arrays. */
static fl_status load_stream_batch(fl_model *m, data_src *d, const int64_t *idx, int64_t b) {
    const fl_backend *be = m->g.be;
    void *xv;
    float *yv;
    int64_t got;
    double waited = 0;
    fl_status s = fl_prefetch_next(d->pf, &xv, &yv, &got, &waited);
    d->wait += waited;
    if (s != FL_OK) return s;
    if (got != b) return fl_error(FL_ERR_STATE, "fl_fit_stream: a batch of %lld samples came, %lld expected", (long long)got, (long long)b);
    const int64_t nx = b * d->xrow[0];
    if (!d->in[0]->int_val && d->xdt == FL_INT32) { /* x.astype("float32"), in place (same size) */
        int32_t *iv = xv;
        float *fv = xv;
        for (int64_t i = 0; i < nx; i++) fv[i] = (float)iv[i];
    } else if (d->in[0]->int_val && d->xdt == FL_FLOAT32) {
        float *fv = xv;
        int32_t *iv = xv;
        for (int64_t i = 0; i < nx; i++) {
            float f = fv[i];
            if (!(f == floorf(f) && f >= -2147483648.0f && f < 2147483648.0f))
                return fl_error(FL_ERR_INVALID_ARG, "sample %lld: x = %g is not an integer, and input '%s' of model '%s' "
                                "is int32", (long long)idx[i / d->xrow[0]], f, d->in[0]->name, m->name);
            iv[i] = (int32_t)f;
        }
    }
    if (check_indices(m, d->in[0], NULL, d->in[0]->int_val ? xv : NULL, d->in[0]->int_val ? NULL : xv, b, "fl_fit_stream") != FL_OK)
        return fl_last_status();
    if (d->yrow && (d->sparse || d->check_y)) {
        const int C = out_classes(m);
        for (int64_t i = 0; i < b * d->yrow; i++) {
            const float v = yv[i];
            if (d->sparse && (!(v >= 0 && v < (float)C) || v != floorf(v)))
                return fl_error(FL_ERR_INVALID_ARG, "sample %lld: y = %g is not a class index in [0, %d)",
                                (long long)idx[i / d->yrow], v, C);
            if (!isfinite(v))
                return fl_error(FL_ERR_NONFINITE, "sample %lld: y holds %s at target %lld; training stopped "
                                "(TerminateOnNaN); fix the targets, or set .no_nan_check (flynn train --no-nan-check)",
                                (long long)idx[i / d->yrow], isnan(v) ? "NaN" : v > 0 ? "inf" : "-inf",
                                (long long)(i % d->yrow));
        }
    }
    d->last_x = xv;
    be->upload(d->in[0]->val, xv, (size_t)nx * sizeof(float));
    if (d->yrow) be->upload(m->target, yv, (size_t)(b * d->yrow) * sizeof(float));
    return FL_OK;
}

/* d without its weights: the validation part of a validation_split whose
 * training weights came from class_weight (Keras weighs only the training
 * data by class). The copy shares d's buffers: never data_close it. */
static data_src data_unweighted(const data_src *d) {
    data_src v = *d;
    v.hw = NULL;
    v.dw = NULL;
    v.wrow = 0;
    return v;
}

/* Puts samples idx[0..b) of d into the input nodes (and targets, weights). */
static fl_status load_batch(fl_model *m, data_src *d, const int64_t *idx, int64_t b) {
    const fl_backend *be = m->g.be;
    fl_graph_set_batch(&m->g, b);
    m->batch_weighted = d->wrow > 0;
    if (d->stream) return load_stream_batch(m, d, idx, b);
    if (d->resident) {
        const int64_t *di = idx;
        if (!be->host_memory) {
            be->upload(m->idx_dev, idx, (size_t)b * sizeof(int64_t));
            di = m->idx_dev;
        }
        for (int k = 0; k < d->nx; k++) be->gather_rows(d->dx[k] ? d->dx[k] : d->hx[k], di, b, d->xrow[k], d->in[k]->val);
        if (d->yrow) be->gather_rows(d->dy ? d->dy : d->hy, di, b, d->yrow, m->target);
        if (d->wrow) be->gather_rows(d->dw ? d->dw : d->hw, di, b, d->wrow, m->weight);
        return FL_OK;
    }
    /* staged: each input in turn through the one staging buffer (an upload
     * from pageable memory has copied it out when it returns) */
    for (int k = 0; k < d->nx; k++) {
        for (int64_t i = 0; i < b; i++)
            memcpy(m->stage_x + i * d->xrow[k], d->hx[k] + idx[i] * d->xrow[k], (size_t)d->xrow[k] * sizeof(float));
        be->upload(d->in[k]->val, m->stage_x, (size_t)(b * d->xrow[k]) * sizeof(float));
    }
    for (int64_t i = 0; i < b; i++) {
        if (d->yrow) memcpy(m->stage_y + i * d->yrow, d->hy + idx[i] * d->yrow, (size_t)d->yrow * sizeof(float));
        if (d->wrow) memcpy(m->stage_w + i * d->wrow, d->hw + idx[i] * d->wrow, (size_t)d->wrow * sizeof(float));
    }
    if (d->yrow) be->upload(m->target, m->stage_y, (size_t)(b * d->yrow) * sizeof(float));
    if (d->wrow) be->upload(m->weight, m->stage_w, (size_t)(b * d->wrow) * sizeof(float));
    return FL_OK;
}

/* An asynchronous device error (a failed kernel) surfaces here. */
fl_status fl_device_status(fl_model *m, const char *what) {
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
void fl_loss_and_metrics(fl_model *m, bool grad) {
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
    /* sample weights (Keras's reduce_weighted_values): the weighted row losses are summed and divided by
     * the rows, weighted or not ("sum_over_batch_size"); the compiled metrics stay unweighted, as Keras's
     * `metrics` (its `weighted_metrics` would take the weights) */
    if (m->batch_weighted) be->loss_weight(rows, C, m->weight, m->row_loss, grad ? o->grad : NULL);
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
    double seconds, train_seconds, data_seconds;
    int64_t train_samples, train_steps;
    int64_t graph_captures, graph_failures, graph_replays; /* device graphs (train_step) */
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
double fl_history_data_seconds(const fl_history *h) {
    return h && h->train_steps > 0 ? h->data_seconds / (double)h->train_steps : 0;
}
double fl_history_step_seconds(const fl_history *h) {
    return h && h->train_steps > 0 ? h->train_seconds / (double)h->train_steps : 0;
}
int64_t fl_history_steps(const fl_history *h) { return h ? h->train_steps : 0; }
int64_t fl_history_graph_captures(const fl_history *h) { return h ? h->graph_captures : 0; }
int64_t fl_history_graph_capture_failures(const fl_history *h) { return h ? h->graph_failures : 0; }
int64_t fl_history_graph_replays(const fl_history *h) { return h ? h->graph_replays : 0; }
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
    const double *data_wait; /* a stream's running wait for batches: shown per step (NULL: not shown) */
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
    return p->mode == FL_VERBOSE_BAR && fl_clock_seconds() - p->last >= 0.05;
}

/* keys/vals: the "- key: value" pairs, already in Keras order */
static void progbar_update(progbar *p, int64_t cur, int nkv, char keys[][48], const double *vals, bool final) {
    double t = fl_clock_seconds();
    p->last = t;
    char line[1024], tmp[64];
    int len = 0;
    int digits = (int)log10((double)(p->target > 0 ? p->target : 1)) + 1;
    double elapsed = t - p->start, per = cur > 0 ? elapsed / (double)cur : 0;
    char tps[96];
    fmt_time_per_step(tps, sizeof tps, per);
    if (p->data_wait && cur > 0) { /* how long each step waited for its batch: is the input pipeline the bottleneck? */
        char dw[32];
        fmt_time_per_step(dw, sizeof dw, *p->data_wait / (double)cur);
        snprintf(tps + strlen(tps), sizeof tps - strlen(tps), ", data %s", dw);
    }
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
        snprintf(keys[1 + i], 48, "%s%s", prefix, fl_metric_key(m->metrics[i]));
        vals[1 + i] = v[1 + i];
    }
    return 1 + m->nmetrics;
}

/* --------------------------------------------------------- evaluation */

/* Predict's and evaluate's forward pass: no backward follows. `batch` is the batch the caller asked for
 * (at most the samples there are), whatever step of it runs: what inference's choices that weigh a batch's
 * size (folding a BatchNormalization into its convolution) weigh, so that every step, and the last,
 * shorter batch, compute as the whole batch would. */
static void forward_only(fl_graph *g, int64_t batch) {
    fl_threads_follow_load();
    g->no_backward = true;
    g->fold_batch = batch;
    fl_graph_forward(g, false);
    g->fold_batch = 0;
    g->no_backward = false;
}

/* Samples per forward step when predicting in batches of bs. In inference each sample is computed alone,
 * so where the backend gives a budget (infer_budget: the CPU's, twice its threads' L2), a batch whose
 * buffers would not fit runs in steps of fewer samples, each layer's output still in cache when the next
 * reads it. Each step pays a parallel region per layer, so steps go below 32 samples only for samples whose
 * buffers take more than a quarter of the budget, and then to 8 (and two per thread): unet_small's predict
 * at 512 (1.5 MB a sample) ran 1,587 samples/s in steps of 32 and 2,516 in steps of 8, transformer_text's at
 * 128 (344 KB) 33,000-34,700 in steps of 32 and 27,400 in steps of 8. With fewer than two samples per thread
 * a 3x3 convolution leaves Winograd for the direct kernels (mnist_cnn's predictions in steps of 2 differed
 * from whole batches in the last bit). The choices that weigh the batch's size weigh the whole batch
 * (forward_only), so in steps of 4 to 256, ResNet-20's, mnist_cnn's, MobileNetV2's and the U-Net's
 * predictions were the same to the bit as whole batches'. Not for a model with a recurrent layer: its
 * per-step matrix products want the whole batch (lstm_text's predict ran 35,300 samples/s at 16 and 40,600
 * at 512). Every step reads all the weights, so where they outgrow the cache they would stay in between steps
 * (infer_weight_cache: the CPU's L3), the step grows until its buffers are as large as the weights:
 * ResNet50 at 64x64 (94 MB of weights, 1.1 MB of buffers a sample) ran its predict at 128 in steps of 8 at
 * 365 samples/s and in steps of 96 at 495; DenseNet121 at 64x64 (28 MB, in the 32 MB L3) ran 660 in steps of
 * 32 and 517 in steps of 64. It grows within half of what the model memory limit leaves, so that a model that
 * predicted under the limit still does. $FLYNN_INFER_STEP sets it (for benchmarks and tests). */
#define INFER_STEP 32
static int64_t infer_step(const fl_model *m, int64_t bs) {
    const char *e = getenv("FLYNN_INFER_STEP");
    if (e && atoll(e) > 0) return atoll(e) < bs ? atoll(e) : bs;
    const fl_graph *g = &m->g;
    const int64_t least = 2 * fl_get_num_threads() > 8 ? 2 * fl_get_num_threads() : 8;
    if (bs <= least || !g->be->infer_budget) return bs;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i]->op == FL_OP_RNN) return bs;
    fl_plan p;
    if (fl_plan_make(g, NULL, 1, true, 1, false, &p) != FL_OK) {
        fl_clear_error(); /* out of memory planning: whole batches, as before */
        return bs;
    }
    const size_t per = p.bytes > 0 ? p.bytes : 1;
    fl_plan_free(&p);
    int64_t step = (int64_t)(g->be->infer_budget() / per);
    if (step >= INFER_STEP) step -= step % INFER_STEP; /* whole multiples of 32 */
    else step = step < 4 ? least : INFER_STEP;
    /* half of what the model memory limit leaves beside the weights (and their gradients and the optimizer's
     * slots, param_bytes): a model that predicted in small steps under the limit still does, whatever the
     * cache (a budget of 12 MiB, 2 MiB of L2 and 3 threads, took a whole batch of 512 past it: issue 42) */
    const int64_t room = (fl_model_bytes_limit() - g->param_bytes) / 2 / (int64_t)per;
    /* every step reads all the weights: where they outgrow the cache they would stay in between steps, each
     * step reads them from memory, and the step grows until its buffers are as large as they are */
    if (g->be->infer_weight_cache) {
        size_t w = 0;
        for (int i = 0; i < g->n; i++)
            if (g->nodes[i]->op == FL_OP_PARAM) w += (size_t)fl_node_size(g->nodes[i]) * sizeof(float);
        const int64_t need = (int64_t)((w + per - 1) / per); /* samples whose buffers match the weights */
        if (w > g->be->infer_weight_cache() && need > step) {
            int64_t ws = (need + INFER_STEP - 1) / INFER_STEP * INFER_STEP;
            if (ws > room) ws = room;
            if (ws > step) step = ws;
        }
    }
    if (room >= 1 && step > room) step = room >= INFER_STEP ? room - room % INFER_STEP : room;
    return step < bs ? step : bs;
}

/* Runs inference over samples idx[0..n) of d; writes mean loss and metrics. Each batch of bs runs in the
 * steps predict takes (infer_step), the progress bar counting batches; whole where a step would change what
 * is computed or read: a masked loss (Keras weighs a batch's valid rows by rows / valid), a batch spread over
 * MPI ranks, a stream's prefetched batches. */
static fl_status run_eval(fl_model *m, data_src *d, const int64_t *idx, int64_t n, int64_t bs, double *out,
                          progbar *pb) {
    const int64_t sub = d->stream || m->dist_batch || loss_mask_of(m) ? bs : infer_step(m, bs);
    FL_TRY(reserve(m, sub < n ? sub : n, true));
    FL_TRY(data_begin(d, -1, idx, n));
    zero_stats(m);
    int64_t steps = (n + bs - 1) / bs, seen = 0;
    for (int64_t s = 0; s < steps; s++) {
        int64_t b = n - s * bs < bs ? n - s * bs : bs;
        for (int64_t o = 0; o < b; o += sub) {
            const int64_t bb = b - o < sub ? b - o : sub;
            fl_status st = load_batch(m, d, idx + s * bs + o, bb);
            if (st != FL_OK) {
                data_end(d);
                fl_error_prefix("evaluating: ");
                return st;
            }
            forward_only(&m->g, bs < n ? bs : n);
            fl_loss_and_metrics(m, false);
        }
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
    data_end(d);
    read_stats(m, seen, out);
    return fl_device_status(m, "evaluating");
}

static int64_t *iota(int64_t n, int64_t start) {
    int64_t *p = fl_malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t), "sample order");
    if (p)
        for (int64_t i = 0; i < n; i++) p[i] = start + i;
    return p;
}

static fl_status evaluate(fl_model *m, const fl_tensor *const *xs, int nx, const fl_tensor *y, float *results,
                          int n_results, fl_eval_args a, const char *fn) {
    if (!m) return fl_error(FL_ERR_INVALID_ARG, "%s: model is NULL", fn);
    if (!m->compiled) return fl_error(FL_ERR_STATE, "%s: model '%s' is not compiled (call fl_compile first)", fn, m->name);
    FL_TRY(check_xs(m, xs, nx, fn));
    if (a.batch_size < 0) return fl_error(FL_ERR_INVALID_ARG, "%s: batch_size %d, expected > 0", fn, a.batch_size);
    int64_t bs = a.batch_size > 0 ? a.batch_size : 32, n = xs[0]->shape[0], yrow = 0;
    float *yh = prepare_y(m, xs[0], y, &yrow, fn), *wh = NULL;
    if (!yh) return fl_last_status();
    if (prepare_weights(m, a.sample_weight, NULL, 0, yh, yrow, n, fn, &wh) != FL_OK) { free(yh); return fl_last_status(); }
    float *xo[FL_MODEL_MAX_IO];
    const float *xr[FL_MODEL_MAX_IO] = {0};
    bool rows_ok = inputs_rows(m, xs, nx, fn, xr, xo);
    int64_t *idx = rows_ok ? iota(n, 0) : NULL;
    data_src d = {0};
    fl_status s = idx ? data_open(m, nx, m->inputs, xr, yh, yrow, wh, fl_node_sample_size(m->output) / out_classes(m),
                                  n, &d)
                      : fl_last_status();
    if (s == FL_OK) {
        FILE *f = a.out ? a.out : stdout;
        progbar pb = {f, resolve_verbose(a.verbose, f), (n + bs - 1) / bs, fl_clock_seconds(), 0, 0, NULL};
        double r[1 + FL_MAX_METRICS];
        s = run_eval(m, &d, idx, n, bs, r, &pb);
        if (s == FL_OK)
            for (int i = 0; i < n_results && i <= m->nmetrics; i++) results[i] = (float)r[i];
    }
    data_close(m, &d);
    free(idx);
    free(yh);
    free(wh);
    if (rows_ok) free_rows(xo, nx);
    return s;
}

fl_status fl_evaluate_(fl_model *m, const fl_tensor *x, const fl_tensor *y, float *results, int n_results,
                       fl_eval_args a) {
    return evaluate(m, &x, 1, y, results, n_results, a, "fl_evaluate");
}

fl_status fl_evaluate_multi_(fl_model *m, const fl_tensor *const *xs, int n_inputs, const fl_tensor *y, float *results,
                             int n_results, fl_eval_args a) {
    return evaluate(m, xs, n_inputs, y, results, n_results, a, "fl_evaluate_multi");
}

fl_tensor *fl_predict_(fl_model *m, const fl_tensor *x, fl_eval_args a) {
    if (!m) return fl_error_null(FL_ERR_INVALID_ARG, "fl_predict: model is NULL");
    if (check_x(m, x, "fl_predict") != FL_OK) return NULL;
    if (a.sample_weight) return fl_error_null(FL_ERR_INVALID_ARG, "fl_predict: sample_weight is for fl_evaluate");
    if (a.batch_size < 0) return fl_error_null(FL_ERR_INVALID_ARG, "fl_predict: batch_size %d, expected > 0", a.batch_size);
    int64_t bs = a.batch_size > 0 ? a.batch_size : 32, n = x->shape[0];
    const int64_t asked = bs;
    bs = infer_step(m, bs);
    int64_t orow = fl_node_sample_size(m->output);
    int64_t shape[FL_MAX_DIMS];
    memcpy(shape, m->output->shape, sizeof shape);
    shape[0] = n;
    float *xo;
    const float *xr = x_rows(m, m->input, x, "fl_predict", &xo);
    fl_tensor *out = xr ? fl_tensor_new(FL_FLOAT32, m->output->ndim, shape) : NULL;
    int64_t *idx = out ? iota(n, 0) : NULL;
    data_src d = {0};
    if (!idx || reserve(m, bs < n ? bs : n, true) != FL_OK || data_open(m, 1, &m->input, &xr, NULL, 0, NULL, 0, n, &d) != FL_OK) {
        free(idx);
        free(xo);
        fl_tensor_free(out);
        return NULL;
    }
    for (int64_t s = 0; s * bs < n; s++) {
        int64_t b = n - s * bs < bs ? n - s * bs : bs;
        (void)load_batch(m, &d, idx + s * bs, b); /* arrays: cannot fail */
        forward_only(&m->g, asked < n ? asked : n);
        m->g.be->download((float *)out->data + s * bs * orow, m->output->val, (size_t)(b * orow) * sizeof(float));
    }
    data_close(m, &d);
    free(idx);
    free(xo);
    if (fl_device_status(m, "predicting") != FL_OK) {
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
    FL_TRY(fl_model_bind(m, xs, nx, "fl_predict_multi"));
    int64_t bs = a.batch_size > 0 ? a.batch_size : 32, n = xs[0]->shape[0];
    const int64_t asked = bs;
    bs = infer_step(m, bs);
    fl_status st = FL_OK;
    for (int o = 0; o < nout && st == FL_OK; o++) {
        int64_t shape[FL_MAX_DIMS];
        memcpy(shape, m->outputs[o]->shape, sizeof shape);
        shape[0] = n;
        if (!(outs[o] = fl_tensor_new(FL_FLOAT32, m->outputs[o]->ndim, shape))) st = fl_last_status();
    }
    if (a.sample_weight && st == FL_OK) st = fl_error(FL_ERR_INVALID_ARG, "fl_predict_multi: sample_weight is for fl_evaluate");
    int64_t *idx = st == FL_OK ? iota(n, 0) : NULL;
    data_src d = {0};
    if (st == FL_OK && !idx) st = fl_last_status();
    if (st == FL_OK) st = reserve(m, bs < n ? bs : n, true);
    float *xo[FL_MODEL_MAX_IO] = {0};
    const float *xr[FL_MODEL_MAX_IO] = {0};
    bool rows_ok = st == FL_OK && inputs_rows(m, xs, nx, "fl_predict_multi", xr, xo);
    if (st == FL_OK && !rows_ok) st = fl_last_status();
    if (st == FL_OK) st = data_open(m, nx, m->inputs, xr, NULL, 0, NULL, 0, n, &d);
    for (int64_t s = 0; st == FL_OK && s * bs < n; s++) {
        int64_t b = n - s * bs < bs ? n - s * bs : bs;
        (void)load_batch(m, &d, idx + s * bs, b); /* arrays: cannot fail */
        forward_only(&m->g, asked < n ? asked : n);
        for (int o = 0; o < nout; o++) {
            int64_t orow = fl_node_sample_size(m->outputs[o]);
            m->g.be->download((float *)outs[o]->data + s * bs * orow, m->outputs[o]->val, (size_t)(b * orow) * sizeof(float));
        }
    }
    data_close(m, &d);
    free_rows(xo, nx);
    free(idx);
    if (st == FL_OK) st = fl_device_status(m, "predicting");
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
static fl_status check_x_finite(const fl_model *m, const data_src *d, int k, const float *rows, const int64_t *idx,
                                int64_t b, int ep, int epochs, int64_t step, int64_t steps) {
    const int64_t xrow = d->xrow[k];
    const fl_node *in = d->in[k];
    int64_t f = first_nonfinite(rows, b * xrow);
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
                    ".no_nan_check (flynn train --no-nan-check)", when, which, (long long)sample, nonfinite_name(row[f]),
                    (long long)f, index_str(f, in->ndim - 1, in->shape + 1, a, sizeof a),
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
    fl_loss_and_metrics(m, true);
    int64_t rows = fl_node_size(m->output) / out_classes(m);
    if ((at = buffer_nonfinite(be, m->row_loss, rows, host, &v)) >= 0) {
        snprintf(why, len, "every layer's output is finite, but the %s loss of output row %lld is %s (a target "
                 "outside the loss's range, or too large for float32?)", fl_loss_name(m->loss.kind),
                 (long long)at, nonfinite_name(v));
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
                 "first whose gradient is not finite (%s)", n->name, fl_op_name(n->op), nonfinite_name(w.v));
        free(host);
        return;
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

/* x's rows for every input (xo[i]: what x_rows made and the caller frees); false on error (freed). */
static bool inputs_rows(const fl_model *m, const fl_tensor *const *xs, int nx, const char *what, const float **rows,
                        float **xo) {
    for (int i = 0; i < nx; i++) xo[i] = NULL;
    for (int i = 0; i < nx; i++)
        if (!(rows[i] = x_rows(m, m->inputs[i], xs[i], what, &xo[i]))) {
            for (int k = 0; k < i; k++) { free(xo[k]); xo[k] = NULL; }
            return false;
        }
    return true;
}

static void free_rows(float **xo, int nx) {
    for (int i = 0; i < nx; i++) { free(xo[i]); xo[i] = NULL; }
}

/* fl_fit and fl_fit_multi (xs[0..nx), one array per model input) and fl_fit_stream (stream, xs NULL): one loop,
 * the batches loaded through data_src. */
static fl_history *fit(fl_model *m, const fl_tensor *const *xs, int nx, const fl_tensor *y, fl_data_stream *stream,
                       fl_fit_args a, const char *fn) {
    if (!m) return fl_error_null(FL_ERR_INVALID_ARG, "%s: model is NULL", fn);
    if (!m->compiled)
        return fl_error_null(FL_ERR_STATE, "%s: model '%s' is not compiled (call fl_compile first)", fn, m->name);
    fl_model_weights_ready(m);
    int64_t y_row = 0, vrow = 0;
    if (stream) {
        if (check_stream(m, stream, fn, &y_row) != FL_OK) return NULL;
        if (a.validation_x || a.validation_xs)
            return fl_error_null(FL_ERR_INVALID_ARG, "fl_fit_stream: validation data as a stream (.validation_stream), "
                                 "not arrays");
        if (a.sample_weight || a.class_weight || a.num_class_weights || a.validation_sample_weight)
            return fl_error_null(FL_ERR_UNSUPPORTED, "fl_fit_stream: sample_weight and class_weight weigh arrays "
                                 "(fl_fit, fl_fit_multi); a stream's samples are not weighted");
        if (a.validation_stream && check_stream(m, a.validation_stream, "fl_fit_stream (validation stream)", &vrow) != FL_OK)
            return NULL;
    } else {
        if (a.validation_stream)
            return fl_error_null(FL_ERR_INVALID_ARG, "%s: .validation_stream is for fl_fit_stream; give validation_x/y", fn);
        if (check_xs(m, xs, nx, fn) != FL_OK) return NULL;
    }
    if (m->opt->bound_gen != m->g.trainable_gen && fl_optimizer_bind(m->opt, &m->g) != FL_OK) {
        /* layers were frozen or unfrozen since compile: what Keras's recompile does */
        fl_error_prefix("%s: binding the optimizer to the weights now trainable: ", fn);
        return NULL;
    }
    if (a.batch_size < 0) return fl_error_null(FL_ERR_INVALID_ARG, "%s: batch_size %d, expected > 0", fn, a.batch_size);
    if (a.epochs < 0) return fl_error_null(FL_ERR_INVALID_ARG, "%s: epochs %d, expected > 0", fn, a.epochs);
    if (!(a.validation_split >= 0.0f && a.validation_split < 1.0f))
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: validation_split %g, expected 0 <= split < 1", fn,
                             a.validation_split);
    if (a.validation_x && a.validation_xs)
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: give validation_x (one input) or validation_xs, not both", fn);
    const fl_tensor *const *vxs = a.validation_xs ? a.validation_xs : a.validation_x ? &a.validation_x : NULL;
    if (a.validation_split > 0 && (vxs || a.validation_stream))
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: give validation_split or validation data, not both", fn);
    if ((vxs == NULL) != (a.validation_y == NULL))
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: validation_x%s and validation_y must be given together", fn,
                             a.validation_xs ? "s" : "");
    if (a.validation_sample_weight && !vxs)
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: validation_sample_weight without validation data (with "
                             "validation_split, sample_weight is split as x and y are)", fn);
    int64_t bs = a.batch_size > 0 ? a.batch_size : 32;
    int epochs = a.epochs > 0 ? a.epochs : 1;
    /* under mpirun: data-parallel, batch_size the global batch (src/dist/, docs/scale-out.md) */
    if (fl_dist_init() != FL_OK) { fl_error_prefix("%s: ", fn); return NULL; }
    bool dist = fl_dist_size() > 1;
    if (dist && (loss_mask_of(m) || stream))
        return fl_error_null(FL_ERR_UNSUPPORTED, "%s: under MPI (%d ranks), training runs from arrays and without a "
                             "masked loss; model '%s' %s", fn, fl_dist_size(), m->name,
                             stream ? "reads a stream (each rank would need its share of every batch read ahead)"
                             : "has an output mask that weighs the loss (its valid-row count would need a global "
                             "reduction)");
    /* on a device the gradients' sums are NCCL's: every rank opens it, or all stop with the reason */
    if (dist && !m->g.be->host_memory && fl_nccl_init() != FL_OK) {
        fl_error_prefix("%s: model '%s' on the %s over %d ranks: ", fn, m->name, m->g.be->name, fl_dist_size());
        return NULL;
    }
    int64_t n = stream ? fl_data_stream_size(stream) : xs[0]->shape[0];
    float *yh = stream ? NULL : prepare_y(m, xs[0], y, &y_row, fn);
    if (!stream && !yh) return NULL;
    bool check = !a.no_nan_check;
    int64_t bad = check && yh ? first_nonfinite(yh, n * y_row) : -1;
    if (bad >= 0) {
        fl_error(FL_ERR_NONFINITE, "%s: y[%lld] holds %s at target %lld; nothing was trained (TerminateOnNaN); "
                 "fix the targets, or set .no_nan_check (flynn train --no-nan-check)", fn, (long long)(bad / y_row),
                 nonfinite_name(yh[bad]), (long long)(bad % y_row));
        free(yh);
        return NULL;
    }
    float *wh = NULL, *vwh = NULL;
    if (!stream && prepare_weights(m, a.sample_weight, a.class_weight, a.num_class_weights, yh, y_row, n, fn, &wh) != FL_OK) {
        free(yh);
        return NULL;
    }
    int64_t wrow = fl_node_sample_size(m->output) / out_classes(m);

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
            free(yh); free(wh);
            return fl_error_null(FL_ERR_INVALID_ARG, "%s: validation_split %g of %lld samples leaves %lld for training and %lld for validation",
                                 fn, a.validation_split, (long long)n, (long long)n_train, (long long)n_val);
        }
    }
    float *vyh = NULL;
    data_src tr = {0}, vd = {0};
    fl_step_state gs = {0};
    float *xo[FL_MODEL_MAX_IO] = {0}, *vxo[FL_MODEL_MAX_IO] = {0};
    const float *xr[FL_MODEL_MAX_IO] = {0}, *vxr[FL_MODEL_MAX_IO] = {0};
    int64_t *perm = NULL, *vidx = NULL, nv = 0;
    fl_history *h = NULL;
    char vw[64];
    snprintf(vw, sizeof vw, "%s (validation data)", fn);
    if (vxs) { /* validation data of another length: the graph is bound to it while it runs */
        if (check_xs(m, vxs, nx, vw) != FL_OK || !(vyh = prepare_y(m, vxs[0], a.validation_y, &vrow, vw)) ||
            prepare_weights(m, a.validation_sample_weight, NULL, 0, vyh, vrow, vxs[0]->shape[0], vw, &vwh) != FL_OK)
            goto fail;
        nv = vxs[0]->shape[0];
        if (!inputs_rows(m, vxs, nx, vw, vxr, vxo) || !(vidx = iota(nv, 0)) ||
            data_open(m, nx, m->inputs, vxr, vyh, vrow, vwh, wrow, nv, &vd) != FL_OK)
            goto fail;
        if (fl_model_bind(m, xs, nx, fn) != FL_OK) goto fail;
    }
    if (!stream && !inputs_rows(m, xs, nx, fn, xr, xo)) goto fail;
    perm = fl_malloc((size_t)n * sizeof(int64_t), "shuffle order");
    h = fl_calloc(1, sizeof *h, "History");
    if (!perm || !h || reserve(m, bs < n_train ? bs : n_train, false) != FL_OK ||
        (stream ? data_open_stream(m, m->input, stream, y_row, bs, &a, check, &tr)
                : data_open(m, nx, m->inputs, xr, yh, y_row, wh, wrow, n, &tr)) != FL_OK)
        goto fail;
    if (a.validation_stream) {
        nv = fl_data_stream_size(a.validation_stream);
        if (!(vidx = iota(nv, 0)) || data_open_stream(m, m->input, a.validation_stream, vrow, bs, &a, check, &vd) != FL_OK)
            goto fail;
    } else if (!vxs && n_val > 0) {
        nv = n_val;
        if (!(vidx = iota(nv, n_train))) goto fail;
    }
    /* the split's validation part: sample_weight split with it, class_weight only for training (Keras) */
    data_src split_val = a.num_class_weights > 0 ? data_unweighted(&tr) : tr;
    data_src *val = vxs || a.validation_stream ? &vd : a.num_class_weights > 0 ? &split_val : &tr;
    bool has_val = nv > 0;
    h->nkeys = 0;
    snprintf(h->keys[h->nkeys++], 48, "loss");
    for (int i = 0; i < m->nmetrics; i++) snprintf(h->keys[h->nkeys++], 48, "%s", fl_metric_key(m->metrics[i]));
    if (has_val) {
        snprintf(h->keys[h->nkeys++], 48, "val_loss");
        for (int i = 0; i < m->nmetrics; i++) snprintf(h->keys[h->nkeys++], 48, "val_%s", fl_metric_key(m->metrics[i]));
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
    for (int k = 0; k < nx; k++) /* device: x once, the batches are gathered there */
        if (check && xr[k] && !m->g.be->host_memory && !m->inputs[k]->int_val &&
            check_x_finite(m, &tr, k, xr[k], NULL, n_train, a.initial_epoch, epochs, 0, steps) != FL_OK)
            goto fail;
    double t_fit = fl_clock_seconds();
    for (int ep = a.initial_epoch; ep < epochs; ep++) {
        for (int64_t i = 0; i < n; i++) perm[i] = i;
        if (!a.no_shuffle) fl_rng_permutation(perm, n_train, m->seed, 0x5348554646ull << 24 | (uint64_t)ep);
        if (mode != FL_VERBOSE_SILENT && epochs > 1) { fprintf(f, "Epoch %d/%d\n", ep + 1, epochs); fflush(f); }
        logs.n = 0;
        for (int c = 0; c < ncb; c++)
            if (cbs[c]->on_epoch_begin && cbs[c]->on_epoch_begin(m, ep, &logs, cbs[c]->user) != FL_OK) goto fail_cb;
        progbar pb = {f, mode, steps, fl_clock_seconds(), 0, 0, stream ? &tr.wait : NULL};
        char keys[FL_HIST_MAX_KEYS][48];
        double v[1 + FL_MAX_METRICS], vals[FL_HIST_MAX_KEYS];
        int64_t seen = 0;
        double t0 = fl_clock_seconds();
        if ((!stream && fl_model_bind(m, xs, nx, fn) != FL_OK) || reserve(m, bs < n_train ? bs : n_train, false) != FL_OK)
            goto fail;
        zero_stats(m);
        int64_t checked = 0; /* steps whose loss is known to be finite */
        int64_t steps_done = steps;
        tr.wait = 0;
        if (data_begin(&tr, ep, perm, n_train) != FL_OK) goto fail;
        for (int64_t s = 0; s < steps; s++) {
            int64_t b = n_train - s * bs < bs ? n_train - s * bs : bs, lo = 0, share = b;
            if (dist) { /* this rank's contiguous share of the global batch */
                fl_dp_share(b, &lo, &share);
                m->dist_batch = b;
                m->dist_share = share;
            }
            double tl = stream ? 0 : fl_clock_seconds();
            if (share > 0 && load_batch(m, &tr, perm + s * bs + lo, share) != FL_OK) {
                fl_error_prefix("%s: epoch %d/%d, step %lld/%lld: ", fn, ep + 1, epochs, (long long)s + 1, (long long)steps);
                goto fail;
            }
            if (!stream) tr.wait += fl_clock_seconds() - tl;
            for (int k = 0; k < nx; k++) { /* int32 indices: no NaN to find */
                const float *rows = m->g.be->host_memory ? m->inputs[k]->val : tr.last_x; /* a stream's on the host */
                if (check && rows && !m->inputs[k]->int_val &&
                    check_x_finite(m, &tr, k, rows, perm + s * bs + lo, share, ep, epochs, s, steps) != FL_OK)
                    goto fail;
            }
            bool finite;
            /* random masks draw for this share's rows what one process draws for them */
            m->g.row_offset = lo;
            fl_status st = fl_train_step(m, &gs, b == bs, check, &finite);
            m->g.row_offset = 0; /* validation, predict and callbacks: whole batches */
            if (st != FL_OK) goto fail;
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
                /* a callback that predicted on data of another length planned the graph for it */
                if ((!stream && fl_model_bind(m, xs, nx, fn) != FL_OK) ||
                    reserve(m, bs < n_train ? bs : n_train, false) != FL_OK)
                    goto fail;
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
        data_end(&tr); /* an early stop leaves readers mid-epoch: stop them */
        h->data_seconds += tr.wait;
        h->train_steps += steps_done;
        m->dist_batch = m->dist_share = 0; /* validation and callbacks: whole batches on every rank */
        if (dist && fl_dp_average_moving_stats(m) != FL_OK) goto fail;
        read_stats(m, seen, v); /* waits for the device: the epoch's time ends here */
        if (fl_device_status(m, "training") != FL_OK) goto fail;
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
        h->train_seconds += fl_clock_seconds() - t0;
        h->train_samples += seen;
        float hv[FL_HIST_MAX_KEYS];
        int nkv = stat_kv(m, v, "", keys, vals);
        for (int k = 0; k < nkv; k++) hv[k] = (float)vals[k];
        if (has_val) {
            double r[1 + FL_MAX_METRICS];
            if ((vxs && fl_model_bind(m, vxs, nx, vw) != FL_OK) ||
                run_eval(m, val, vidx, nv, bs, r, NULL) != FL_OK)
                goto fail;
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
    fl_dp_buckets_end(m);
    h->seconds = fl_clock_seconds() - t_fit;
    h->graph_captures = gs.captures, h->graph_failures = gs.failures, h->graph_replays = gs.replays;
    if (m->g.be->graph_begin && mode == FL_VERBOSE_EPOCH)
        printf("device graphs: %lld step%s captured, %lld replayed, %lld capture%s failed%s\n", (long long)gs.captures,
               gs.captures == 1 ? "" : "s", (long long)gs.replays, (long long)gs.failures, gs.failures == 1 ? "" : "s",
               gs.failures ? " (those steps ran eagerly; FLYNN_CUDA_GRAPHS=require makes a failure an error)" : "");
    fl_step_state_end(m, &gs);
    data_close(m, &tr); data_close(m, &vd);
    free(perm); free(vidx); free(yh); free(vyh); free(wh); free(vwh);
    free_rows(xo, nx); free_rows(vxo, nx);
    return h;
fail_cb:
    fl_error_prefix("%s: a callback failed: ", fn);
fail:
    m->dist_batch = m->dist_share = 0;
    fl_dp_buckets_free(m);
    fl_step_state_end(m, &gs);
    data_close(m, &tr); data_close(m, &vd);
    free(perm); free(vidx); free(yh); free(vyh); free(wh); free(vwh);
    free_rows(xo, nx); free_rows(vxo, nx);
    fl_history_free(h);
    return NULL;
}

fl_history *fl_fit_(fl_model *m, const fl_tensor *x, const fl_tensor *y, fl_fit_args a) {
    return fit(m, &x, 1, y, NULL, a, "fl_fit");
}

fl_history *fl_fit_multi_(fl_model *m, const fl_tensor *const *xs, int n_inputs, const fl_tensor *y, fl_fit_args a) {
    return fit(m, xs, n_inputs, y, NULL, a, "fl_fit_multi");
}

fl_history *fl_fit_stream_(fl_model *m, fl_data_stream *train, fl_fit_args a) {
    if (!train) return fl_error_null(FL_ERR_INVALID_ARG, "fl_fit_stream: the stream is NULL");
    return fit(m, NULL, 1, NULL, train, a, "fl_fit_stream");
}
