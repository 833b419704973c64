/*
 * train.c — compile, fit, evaluate and predict. fit is begin / epoch / end over one fit_run (fit_args,
 * fit_begin, fit_epoch: fit_steps, fit_epoch_checks, fit_validate; fit_end); a step itself is step.c's
 * fl_train_step. The data they take (checked, as rows, as batches from arrays or a stream) is batches.c's,
 * History and the progress bar history.c's, the NaN checks nonfinite.c's (fit.h names them all).
 */
#include "core/clock.h"
#include "nn.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "dist/data_parallel.h"
#include "dist/mpi.h"
#include "nn/fit.h"
#include "nn/step.h"
#include "ops/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
            else if (loss.kind == FL_LOSS_BINARY_CROSSENTROPY || fl_out_classes(m) == 1) codes[i] = FL_MC_BINARY;
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
    if (loss.kind == FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY && fl_out_classes(m) < 2) {
        fl_optimizer_free(opt);
        return fl_error(FL_ERR_SHAPE, "fl_compile: sparse_categorical_crossentropy needs an output with >= 2 classes, "
                        "model '%s' outputs %d", m->name, fl_out_classes(m));
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







/* --------------------------------------------------------- evaluation */



/* Runs inference over samples idx[0..n) of d; writes mean loss and metrics. Each batch of bs runs in the
 * steps predict takes (infer_step), the progress bar counting batches; whole where a step would change what
 * is computed or read: a masked loss (Keras weighs a batch's valid rows by rows / valid), a batch spread over
 * MPI ranks, a stream's prefetched batches. */
static fl_status run_eval(fl_model *m, fl_batches *d, const int64_t *idx, int64_t n, int64_t bs, double *out,
                          fl_progbar *pb) {
    const int64_t sub = d->stream || m->dist_batch || fl_loss_mask_of(m) ? bs : fl_infer_step(m, bs);
    FL_TRY(fl_step_reserve(m, sub < n ? sub : n, true));
    FL_TRY(fl_batches_begin(d, -1, idx, n));
    fl_step_stats_zero(m);
    int64_t steps = (n + bs - 1) / bs, seen = 0;
    for (int64_t s = 0; s < steps; s++) {
        int64_t b = n - s * bs < bs ? n - s * bs : bs;
        for (int64_t o = 0; o < b; o += sub) {
            const int64_t bb = b - o < sub ? b - o : sub;
            fl_status st = fl_batches_load(m, d, idx + s * bs + o, bb);
            if (st != FL_OK) {
                fl_batches_end(d);
                fl_error_prefix("evaluating: ");
                return st;
            }
            fl_step_forward(&m->g, bs < n ? bs : n);
            fl_loss_and_metrics(m, false);
        }
        seen += b;
        if (pb && fl_progbar_due(pb, s + 1 == steps)) {
            char keys[1 + FL_MAX_METRICS][48];
            double v[1 + FL_MAX_METRICS], vals[1 + FL_MAX_METRICS];
            fl_step_stats_read(m, seen, v);
            int nkv = fl_stat_kv(m, v, "", keys, vals);
            fl_sort_kv(nkv, keys, vals);
            fl_progbar_update(pb, s + 1, nkv, keys, vals, s + 1 == steps);
        }
    }
    fl_batches_end(d);
    fl_step_stats_read(m, seen, out);
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
    FL_TRY(fl_check_xs(m, xs, nx, fn));
    if (a.batch_size < 0) return fl_error(FL_ERR_INVALID_ARG, "%s: batch_size %d, expected > 0", fn, a.batch_size);
    int64_t bs = a.batch_size > 0 ? a.batch_size : 32, n = xs[0]->shape[0], yrow = 0;
    float *yh = fl_prepare_y(m, xs[0], y, &yrow, fn), *wh = NULL;
    if (!yh) return fl_last_status();
    if (fl_prepare_weights(m, a.sample_weight, NULL, 0, yh, yrow, n, fn, &wh) != FL_OK) { free(yh); return fl_last_status(); }
    float *xo[FL_MODEL_MAX_IO];
    const float *xr[FL_MODEL_MAX_IO] = {0};
    bool rows_ok = fl_inputs_rows(m, xs, nx, fn, xr, xo);
    int64_t *idx = rows_ok ? iota(n, 0) : NULL;
    fl_batches d = {0};
    fl_status s = idx ? fl_batches_open(m, nx, m->inputs, xr, yh, yrow, wh, fl_node_sample_size(m->output) / fl_out_classes(m),
                                  n, &d)
                      : fl_last_status();
    if (s == FL_OK) {
        FILE *f = a.out ? a.out : stdout;
        fl_progbar pb = {f, fl_resolve_verbose(a.verbose, f), (n + bs - 1) / bs, fl_clock_seconds(), 0, 0, NULL};
        double r[1 + FL_MAX_METRICS];
        s = run_eval(m, &d, idx, n, bs, r, &pb);
        if (s == FL_OK)
            for (int i = 0; i < n_results && i <= m->nmetrics; i++) results[i] = (float)r[i];
    }
    fl_batches_close(m, &d);
    free(idx);
    free(yh);
    free(wh);
    if (rows_ok) fl_free_rows(xo, nx);
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
    if (fl_check_x(m, x, "fl_predict") != FL_OK) return NULL;
    if (a.sample_weight) return fl_error_null(FL_ERR_INVALID_ARG, "fl_predict: sample_weight is for fl_evaluate");
    if (a.batch_size < 0) return fl_error_null(FL_ERR_INVALID_ARG, "fl_predict: batch_size %d, expected > 0", a.batch_size);
    int64_t bs = a.batch_size > 0 ? a.batch_size : 32, n = x->shape[0];
    const int64_t asked = bs;
    bs = fl_infer_step(m, bs);
    int64_t orow = fl_node_sample_size(m->output);
    int64_t shape[FL_MAX_DIMS];
    memcpy(shape, m->output->shape, sizeof shape);
    shape[0] = n;
    float *xo;
    const float *xr = fl_x_rows(m, m->input, x, "fl_predict", &xo);
    fl_tensor *out = xr ? fl_tensor_new(FL_FLOAT32, m->output->ndim, shape) : NULL;
    int64_t *idx = out ? iota(n, 0) : NULL;
    fl_batches d = {0};
    if (!idx || fl_step_reserve(m, bs < n ? bs : n, true) != FL_OK || fl_batches_open(m, 1, &m->input, &xr, NULL, 0, NULL, 0, n, &d) != FL_OK) {
        free(idx);
        free(xo);
        fl_tensor_free(out);
        return NULL;
    }
    for (int64_t s = 0; s * bs < n; s++) {
        int64_t b = n - s * bs < bs ? n - s * bs : bs;
        (void)fl_batches_load(m, &d, idx + s * bs, b); /* arrays: cannot fail */
        fl_step_forward(&m->g, asked < n ? asked : n);
        fl_step_read(m, m->output, (float *)out->data + s * bs * orow, b);
    }
    fl_batches_close(m, &d);
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
        FL_TRY(fl_check_x_for(m, m->inputs[i], xs[i], what));
        if (xs[i]->shape[0] != xs[0]->shape[0])
            return fl_error(FL_ERR_SHAPE, "fl_predict_multi: input %d has %lld samples, input 0 has %lld", i,
                            (long long)xs[i]->shape[0], (long long)xs[0]->shape[0]);
    }
    FL_TRY(fl_model_bind(m, xs, nx, "fl_predict_multi"));
    int64_t bs = a.batch_size > 0 ? a.batch_size : 32, n = xs[0]->shape[0];
    const int64_t asked = bs;
    bs = fl_infer_step(m, bs);
    fl_status st = FL_OK;
    for (int o = 0; o < nout && st == FL_OK; o++) {
        int64_t shape[FL_MAX_DIMS];
        memcpy(shape, m->outputs[o]->shape, sizeof shape);
        shape[0] = n;
        if (!(outs[o] = fl_tensor_new(FL_FLOAT32, m->outputs[o]->ndim, shape))) st = fl_last_status();
    }
    if (a.sample_weight && st == FL_OK) st = fl_error(FL_ERR_INVALID_ARG, "fl_predict_multi: sample_weight is for fl_evaluate");
    int64_t *idx = st == FL_OK ? iota(n, 0) : NULL;
    fl_batches d = {0};
    if (st == FL_OK && !idx) st = fl_last_status();
    if (st == FL_OK) st = fl_step_reserve(m, bs < n ? bs : n, true);
    float *xo[FL_MODEL_MAX_IO] = {0};
    const float *xr[FL_MODEL_MAX_IO] = {0};
    bool rows_ok = st == FL_OK && fl_inputs_rows(m, xs, nx, "fl_predict_multi", xr, xo);
    if (st == FL_OK && !rows_ok) st = fl_last_status();
    if (st == FL_OK) st = fl_batches_open(m, nx, m->inputs, xr, NULL, 0, NULL, 0, n, &d);
    for (int64_t s = 0; st == FL_OK && s * bs < n; s++) {
        int64_t b = n - s * bs < bs ? n - s * bs : bs;
        (void)fl_batches_load(m, &d, idx + s * bs, b); /* arrays: cannot fail */
        fl_step_forward(&m->g, asked < n ? asked : n);
        for (int o = 0; o < nout; o++) {
            int64_t orow = fl_node_sample_size(m->outputs[o]);
            fl_step_read(m, m->outputs[o], (float *)outs[o]->data + s * bs * orow, b);
        }
    }
    fl_batches_close(m, &d);
    fl_free_rows(xo, nx);
    free(idx);
    if (st == FL_OK) st = fl_device_status(m, "predicting");
    if (st != FL_OK)
        for (int o = 0; o < nout; o++) { fl_tensor_free(outs[o]); outs[o] = NULL; }
    return st;
}

/* ----------------------------------------------------------------- fit */

/* One fit call: fit_args checks what it was given, fit_begin readies the data, the History and the
 * callbacks, fit_epoch trains one epoch (fit_steps, then fit_epoch_checks and fit_validate), fit_end
 * reports; fit_run_free frees what begin made, whichever phase stopped. */
typedef struct fit_run {
    fl_model *m;
    const fl_tensor *const *xs, *y;
    int nx;
    fl_data_stream *stream;
    fl_fit_args a;
    const char *fn;
    const fl_tensor *const *vxs; /* validation arrays (NULL: none, or a split or a stream) */
    char vw[64];                 /* "fl_fit (validation data)": how their errors start */
    int64_t bs, n, n_train, n_val, nv, y_row, vrow, wrow, steps;
    int epochs, mode, ncb;
    bool dist, check, has_val, batch_cb;
    float *yh, *wh, *vyh, *vwh;
    float *xo[FL_MODEL_MAX_IO], *vxo[FL_MODEL_MAX_IO];
    const float *xr[FL_MODEL_MAX_IO], *vxr[FL_MODEL_MAX_IO];
    int64_t *perm, *vidx;
    fl_batches tr, vd, split_val, *val;
    fl_step_state gs;
    fl_history *h;
    FILE *f;
    fl_callback *const *cbs;
    fl_logs logs;
    double t_fit;
} fit_run;

/* The arguments and the data as given, before anything is allocated (y_row and vrow: floats per sample of a
 * stream's y); false with the error set. */
static bool fit_args(fit_run *r) {
    fl_model *m = r->m;
    const fl_fit_args *a = &r->a;
    const char *fn = r->fn;
    if (!m) return fl_error(FL_ERR_INVALID_ARG, "%s: model is NULL", fn), false;
    if (!m->compiled)
        return fl_error(FL_ERR_STATE, "%s: model '%s' is not compiled (call fl_compile first)", fn, m->name), false;
    fl_model_weights_ready(m);
    if (r->stream) {
        if (fl_check_stream(m, r->stream, fn, &r->y_row) != FL_OK) return false;
        if (a->validation_x || a->validation_xs)
            return fl_error(FL_ERR_INVALID_ARG, "fl_fit_stream: validation data as a stream (.validation_stream), "
                            "not arrays"), false;
        if (a->sample_weight || a->class_weight || a->num_class_weights || a->validation_sample_weight)
            return fl_error(FL_ERR_UNSUPPORTED, "fl_fit_stream: sample_weight and class_weight weigh arrays "
                            "(fl_fit, fl_fit_multi); a stream's samples are not weighted"), false;
        if (a->validation_stream &&
            fl_check_stream(m, a->validation_stream, "fl_fit_stream (validation stream)", &r->vrow) != FL_OK)
            return false;
    } else {
        if (a->validation_stream)
            return fl_error(FL_ERR_INVALID_ARG, "%s: .validation_stream is for fl_fit_stream; give validation_x/y",
                            fn), false;
        if (fl_check_xs(m, r->xs, r->nx, fn) != FL_OK) return false;
    }
    if (m->opt->bound_gen != m->g.trainable_gen && fl_optimizer_bind(m->opt, &m->g) != FL_OK) {
        /* layers were frozen or unfrozen since compile: what Keras's recompile does */
        fl_error_prefix("%s: binding the optimizer to the weights now trainable: ", fn);
        return false;
    }
    if (a->batch_size < 0)
        return fl_error(FL_ERR_INVALID_ARG, "%s: batch_size %d, expected > 0", fn, a->batch_size), false;
    if (a->epochs < 0) return fl_error(FL_ERR_INVALID_ARG, "%s: epochs %d, expected > 0", fn, a->epochs), false;
    if (!(a->validation_split >= 0.0f && a->validation_split < 1.0f))
        return fl_error(FL_ERR_INVALID_ARG, "%s: validation_split %g, expected 0 <= split < 1", fn,
                        a->validation_split), false;
    if (a->validation_x && a->validation_xs)
        return fl_error(FL_ERR_INVALID_ARG, "%s: give validation_x (one input) or validation_xs, not both", fn), false;
    r->vxs = a->validation_xs ? a->validation_xs : a->validation_x ? &a->validation_x : NULL;
    if (a->validation_split > 0 && (r->vxs || a->validation_stream))
        return fl_error(FL_ERR_INVALID_ARG, "%s: give validation_split or validation data, not both", fn), false;
    if ((r->vxs == NULL) != (a->validation_y == NULL))
        return fl_error(FL_ERR_INVALID_ARG, "%s: validation_x%s and validation_y must be given together", fn,
                        a->validation_xs ? "s" : ""), false;
    if (a->validation_sample_weight && !r->vxs)
        return fl_error(FL_ERR_INVALID_ARG, "%s: validation_sample_weight without validation data (with "
                        "validation_split, sample_weight is split as x and y are)", fn), false;
    r->bs = a->batch_size > 0 ? a->batch_size : 32;
    r->epochs = a->epochs > 0 ? a->epochs : 1;
    return true;
}

/* Under mpirun: data-parallel, batch_size the global batch (src/dist/, docs/scale-out.md). */
static bool fit_dist(fit_run *r) {
    fl_model *m = r->m;
    if (fl_dist_init() != FL_OK) { fl_error_prefix("%s: ", r->fn); return false; }
    r->dist = fl_dist_size() > 1;
    if (r->dist && (fl_loss_mask_of(m) || r->stream))
        return fl_error(FL_ERR_UNSUPPORTED, "%s: under MPI (%d ranks), training runs from arrays and without a "
                        "masked loss; model '%s' %s", r->fn, fl_dist_size(), m->name,
                        r->stream ? "reads a stream (each rank would need its share of every batch read ahead)"
                        : "has an output mask that weighs the loss (its valid-row count would need a global "
                        "reduction)"), false;
    /* on a device the gradients' sums are NCCL's: every rank opens it, or all stop with the reason */
    if (r->dist && fl_dp_open_device(m) != FL_OK) {
        fl_error_prefix("%s: ", r->fn);
        return false;
    }
    return true;
}

/* y and the weights as the loss reads them, finite; the training and validation counts of a split. */
static bool fit_targets(fit_run *r) {
    fl_model *m = r->m;
    const fl_fit_args *a = &r->a;
    const char *fn = r->fn;
    r->n = r->stream ? fl_data_stream_size(r->stream) : r->xs[0]->shape[0];
    if (!r->stream && !(r->yh = fl_prepare_y(m, r->xs[0], r->y, &r->y_row, fn))) return false;
    int64_t bad = r->check && r->yh ? fl_first_nonfinite(r->yh, r->n * r->y_row) : -1;
    if (bad >= 0)
        return fl_error(FL_ERR_NONFINITE, "%s: y[%lld] holds %s at target %lld; nothing was trained (TerminateOnNaN); "
                        "fix the targets, or set .no_nan_check (flynn train --no-nan-check)", fn,
                        (long long)(bad / r->y_row), fl_nonfinite_name(r->yh[bad]), (long long)(bad % r->y_row)), false;
    if (!r->stream && fl_prepare_weights(m, a->sample_weight, a->class_weight, a->num_class_weights, r->yh, r->y_row,
                                         r->n, fn, &r->wh) != FL_OK)
        return false;
    r->wrow = fl_node_sample_size(m->output) / fl_out_classes(m);
    /* Keras: the last fraction (before shuffling) is the validation set */
    r->n_train = r->n;
    if (a->validation_split > 0) {
        /* Keras 3 (array_slicing.train_validation_split): int(floor(n * (1.0 - split))) in float64, the
         * float32 split first taken back to the decimal the user wrote (0.1f is 0.100000001: 10 * 0.9 would
         * give 8 training samples, Keras's 9) */
        char split_text[32];
        snprintf(split_text, sizeof split_text, "%.7g", (double)a->validation_split);
        r->n_train = (int64_t)floor((double)r->n * (1.0 - strtod(split_text, NULL)));
        r->n_val = r->n - r->n_train;
        if (r->n_train <= 0 || r->n_val <= 0)
            return fl_error(FL_ERR_INVALID_ARG, "%s: validation_split %g of %lld samples leaves %lld for training "
                            "and %lld for validation", fn, a->validation_split, (long long)r->n,
                            (long long)r->n_train, (long long)r->n_val), false;
    }
    return true;
}

/* The training and validation batch sources, and the shuffle order. */
static bool fit_data(fit_run *r) {
    fl_model *m = r->m;
    const fl_fit_args *a = &r->a;
    const char *fn = r->fn;
    const int nx = r->nx;
    snprintf(r->vw, sizeof r->vw, "%s (validation data)", fn);
    if (r->vxs) { /* validation data of another length: the graph is bound to it while it runs */
        if (fl_check_xs(m, r->vxs, nx, r->vw) != FL_OK ||
            !(r->vyh = fl_prepare_y(m, r->vxs[0], a->validation_y, &r->vrow, r->vw)) ||
            fl_prepare_weights(m, a->validation_sample_weight, NULL, 0, r->vyh, r->vrow, r->vxs[0]->shape[0], r->vw,
                               &r->vwh) != FL_OK)
            return false;
        r->nv = r->vxs[0]->shape[0];
        if (!fl_inputs_rows(m, r->vxs, nx, r->vw, r->vxr, r->vxo) || !(r->vidx = iota(r->nv, 0)) ||
            fl_batches_open(m, nx, m->inputs, r->vxr, r->vyh, r->vrow, r->vwh, r->wrow, r->nv, &r->vd) != FL_OK)
            return false;
        if (fl_model_bind(m, r->xs, nx, fn) != FL_OK) return false;
    }
    if (!r->stream && !fl_inputs_rows(m, r->xs, nx, fn, r->xr, r->xo)) return false;
    r->perm = fl_malloc((size_t)r->n * sizeof(int64_t), "shuffle order");
    r->h = fl_calloc(1, sizeof *r->h, "History");
    if (!r->perm || !r->h || fl_step_reserve(m, r->bs < r->n_train ? r->bs : r->n_train, false) != FL_OK ||
        (r->stream ? fl_batches_open_stream(m, m->input, r->stream, r->y_row, r->bs, a, r->check, &r->tr)
                   : fl_batches_open(m, nx, m->inputs, r->xr, r->yh, r->y_row, r->wh, r->wrow, r->n, &r->tr)) != FL_OK)
        return false;
    if (a->validation_stream) {
        r->nv = fl_data_stream_size(a->validation_stream);
        if (!(r->vidx = iota(r->nv, 0)) ||
            fl_batches_open_stream(m, m->input, a->validation_stream, r->vrow, r->bs, a, r->check, &r->vd) != FL_OK)
            return false;
    } else if (!r->vxs && r->n_val > 0) {
        r->nv = r->n_val;
        if (!(r->vidx = iota(r->nv, r->n_train))) return false;
    }
    /* the split's validation part: sample_weight split with it, class_weight only for training (Keras) */
    r->split_val = a->num_class_weights > 0 ? fl_batches_unweighted(&r->tr) : r->tr;
    r->val = r->vxs || a->validation_stream ? &r->vd : a->num_class_weights > 0 ? &r->split_val : &r->tr;
    r->has_val = r->nv > 0;
    return true;
}

static bool callback_failed(const fit_run *r) {
    fl_error_prefix("%s: a callback failed: ", r->fn);
    return false;
}

/* Everything the epochs need: the data, the History's keys, the callbacks' on_train_begin. */
static bool fit_begin(fit_run *r) {
    fl_model *m = r->m;
    r->check = !r->a.no_nan_check;
    const char *lacks = fl_backend_missing_training_kernel(m->g.be);
    if (lacks) {
        fl_error(FL_ERR_DEVICE, "%s: training on the %s backend needs its kernel %s, which it does not have yet: "
                 "train on the CPU (--device cpu, FL_DEVICE_CPU)", r->fn, m->g.be->name, lacks);
        return false;
    }
    if (!fit_dist(r) || !fit_targets(r) || !fit_data(r)) return false;
    fl_history *h = r->h;
    h->nkeys = 0;
    snprintf(h->keys[h->nkeys++], 48, "loss");
    for (int i = 0; i < m->nmetrics; i++) snprintf(h->keys[h->nkeys++], 48, "%s", fl_metric_key(m->metrics[i]));
    if (r->has_val) {
        snprintf(h->keys[h->nkeys++], 48, "val_loss");
        for (int i = 0; i < m->nmetrics; i++) snprintf(h->keys[h->nkeys++], 48, "val_%s", fl_metric_key(m->metrics[i]));
    }
    r->f = r->a.out ? r->a.out : stdout;
    r->mode = fl_dist_rank() > 0 ? FL_VERBOSE_SILENT : fl_resolve_verbose(r->a.verbose, r->f); /* rank 0 prints */
    r->steps = (r->n_train + r->bs - 1) / r->bs;
    /* the callback list (Keras's CallbackList, History last) */
    r->cbs = r->a.callbacks;
    for (r->ncb = 0; r->cbs && r->cbs[r->ncb]; r->ncb++)
        if (r->cbs[r->ncb]->on_batch_end) r->batch_cb = true;
    m->stop_training = false;
    for (int c = 0; c < r->ncb; c++)
        if (r->cbs[c]->on_train_begin && r->cbs[c]->on_train_begin(m, &r->logs, r->cbs[c]->user) != FL_OK)
            return callback_failed(r);
    for (int k = 0; k < r->nx; k++) /* device: x once, the batches are gathered there */
        if (r->check && r->xr[k] && fl_batches_gathered_on_device(m) && !m->inputs[k]->int_val &&
            fl_check_x_finite(m, &r->tr, k, r->xr[k], NULL, r->n_train, r->a.initial_epoch, r->epochs, 0, r->steps) !=
                FL_OK)
            return false;
    r->t_fit = fl_clock_seconds();
    return true;
}

/* The running loss and metrics after `done` steps of epoch ep ("" keys), checked finite (*checked: the steps
 * known finite so far); false with the error set where the loss is not. */
static bool fit_running_logs(fit_run *r, int ep, int64_t seen, int64_t done, int64_t *checked, char keys[][48],
                             double *vals, int *nkv) {
    double v[1 + FL_MAX_METRICS];
    fl_step_stats_read(r->m, seen, v);
    if (r->check && !isfinite(v[0])) {
        fl_nonfinite_loss(r->m, v[0], ep, r->epochs, *checked, done, r->steps);
        return false;
    }
    *checked = done;
    *nkv = fl_stat_kv(r->m, v, "", keys, vals);
    return true;
}

/* The training steps of epoch ep: *seen samples in *steps_done steps (fewer where a callback stopped
 * training), *checked of them known to have a finite loss. */
static bool fit_steps(fit_run *r, int ep, fl_progbar *pb, int64_t *seen, int64_t *steps_done, int64_t *checked) {
    fl_model *m = r->m;
    const int64_t bs = r->bs, n_train = r->n_train;
    char keys[FL_HIST_MAX_KEYS][48];
    double vals[FL_HIST_MAX_KEYS];
    *steps_done = r->steps;
    for (int64_t s = 0; s < r->steps; s++) {
        int64_t b = n_train - s * bs < bs ? n_train - s * bs : bs, lo = 0, share = b;
        if (r->dist) { /* this rank's contiguous share of the global batch */
            fl_dp_share(b, &lo, &share);
            m->dist_batch = b;
            m->dist_share = share;
        }
        const int64_t *idx = r->perm + s * bs + lo;
        double tl = r->stream ? 0 : fl_clock_seconds();
        if (share > 0 && fl_batches_load(m, &r->tr, idx, share) != FL_OK) {
            fl_error_prefix("%s: epoch %d/%d, step %lld/%lld: ", r->fn, ep + 1, r->epochs, (long long)s + 1,
                            (long long)r->steps);
            return false;
        }
        if (!r->stream) r->tr.wait += fl_clock_seconds() - tl;
        for (int k = 0; k < r->nx; k++) { /* int32 indices: no NaN to find */
            const float *rows = fl_batches_host_rows(m, &r->tr, k); /* a stream's on the host */
            if (r->check && rows && !m->inputs[k]->int_val &&
                fl_check_x_finite(m, &r->tr, k, rows, idx, share, ep, r->epochs, s, r->steps) != FL_OK)
                return false;
        }
        bool finite;
        /* random masks draw for this share's rows what one process draws for them */
        m->g.row_offset = lo;
        fl_status st = fl_train_step(m, &r->gs, b == bs, r->check, &finite);
        m->g.row_offset = 0; /* validation, predict and callbacks: whole batches */
        if (st != FL_OK) return false;
        if (!finite) {
            fl_nonfinite_loss(m, m->stats[0], ep, r->epochs, s, s + 1, r->steps);
            return false;
        }
        m->g.step++;
        *seen += b;
        int nkv;
        if (r->batch_cb) { /* the running logs of the epoch, as Keras's on_train_batch_end */
            if (!fit_running_logs(r, ep, *seen, s + 1, checked, keys, vals, &nkv)) return false;
            r->logs.n = 0;
            for (int k = 0; k < nkv; k++) fl_logs_set(&r->logs, keys[k], (double)(float)vals[k]);
            for (int c = 0; c < r->ncb; c++)
                if (r->cbs[c]->on_batch_end && r->cbs[c]->on_batch_end(m, s, &r->logs, r->cbs[c]->user) != FL_OK)
                    return callback_failed(r);
            if (m->stop_training) { *steps_done = s + 1; break; }
            /* a callback that predicted on data of another length planned the graph for it */
            if ((!r->stream && fl_model_bind(m, r->xs, r->nx, r->fn) != FL_OK) ||
                fl_step_reserve(m, bs < n_train ? bs : n_train, false) != FL_OK)
                return false;
        }
        if (s + 1 < r->steps && fl_progbar_due(pb, false)) {
            if (!fit_running_logs(r, ep, *seen, s + 1, checked, keys, vals, &nkv)) return false;
            fl_sort_kv(nkv, keys, vals);
            fl_progbar_update(pb, s + 1, nkv, keys, vals, false);
        }
    }
    return true;
}

/* The epoch's end: the loss in v (read from the device: the epoch's time ends here) finite, and no weight
 * NaN (a NaN weight behind a ReLU keeps the loss finite: looked for once an epoch). */
static bool fit_epoch_checks(fit_run *r, int ep, int64_t seen, int64_t steps_done, int64_t checked, double *v) {
    fl_model *m = r->m;
    fl_step_stats_read(m, seen, v);
    if (fl_device_status(m, "training") != FL_OK) return false;
    if (!r->check) return true;
    if (!isfinite(v[0])) {
        fl_nonfinite_loss(m, v[0], ep, r->epochs, checked, steps_done, r->steps);
        return false;
    }
    char why[512];
    bool nomem;
    float *host = fl_node_scratch(&m->g, &nomem);
    bool poisoned = !nomem && fl_weights_nonfinite(m, host, why, sizeof why);
    free(host);
    if (poisoned)
        return fl_error(FL_ERR_NONFINITE, "fl_fit: epoch %d/%d, at its end: %s, although the loss stayed finite "
                        "(a ReLU hides NaN); training stopped (TerminateOnNaN) before the epoch's callbacks; set "
                        ".no_nan_check (flynn train --no-nan-check) to train on anyway", ep + 1, r->epochs, why),
               false;
    return true;
}

/* The validation pass after an epoch: its "val_" keys and values appended at keys + *nkv, hv + *nkv. */
static bool fit_validate(fit_run *r, char keys[][48], double *vals, float *hv, int *nkv) {
    double res[1 + FL_MAX_METRICS];
    if ((r->vxs && fl_model_bind(r->m, r->vxs, r->nx, r->vw) != FL_OK) ||
        run_eval(r->m, r->val, r->vidx, r->nv, r->bs, res, NULL) != FL_OK)
        return false;
    int nv2 = fl_stat_kv(r->m, res, "val_", keys + *nkv, vals + *nkv);
    for (int k = 0; k < nv2; k++) hv[*nkv + k] = (float)vals[*nkv + k];
    *nkv += nv2;
    return true;
}

/* Epoch ep: the steps, the checks, validation, the callbacks' on_epoch_end, the History and the progress
 * bar's line; *stop where the user's on_epoch_end or a callback stopped training. */
static bool fit_epoch(fit_run *r, int ep, bool *stop) {
    fl_model *m = r->m;
    fl_history *h = r->h;
    for (int64_t i = 0; i < r->n; i++) r->perm[i] = i;
    if (!r->a.no_shuffle) fl_rng_permutation(r->perm, r->n_train, m->seed, 0x5348554646ull << 24 | (uint64_t)ep);
    if (r->mode != FL_VERBOSE_SILENT && r->epochs > 1) { fprintf(r->f, "Epoch %d/%d\n", ep + 1, r->epochs); fflush(r->f); }
    r->logs.n = 0;
    for (int c = 0; c < r->ncb; c++)
        if (r->cbs[c]->on_epoch_begin && r->cbs[c]->on_epoch_begin(m, ep, &r->logs, r->cbs[c]->user) != FL_OK)
            return callback_failed(r);
    fl_progbar pb = {r->f, r->mode, r->steps, fl_clock_seconds(), 0, 0, r->stream ? &r->tr.wait : NULL};
    const int64_t bs = r->bs < r->n_train ? r->bs : r->n_train;
    double t0 = fl_clock_seconds();
    if ((!r->stream && fl_model_bind(m, r->xs, r->nx, r->fn) != FL_OK) || fl_step_reserve(m, bs, false) != FL_OK) return false;
    fl_step_stats_zero(m);
    int64_t seen = 0, steps_done = 0, checked = 0; /* checked: steps whose loss is known to be finite */
    r->tr.wait = 0;
    if (fl_batches_begin(&r->tr, ep, r->perm, r->n_train) != FL_OK) return false;
    bool ok = fit_steps(r, ep, &pb, &seen, &steps_done, &checked);
    fl_batches_end(&r->tr); /* an early stop leaves readers mid-epoch: stop them */
    if (!ok) return false;
    h->data_seconds += r->tr.wait;
    h->train_steps += steps_done;
    m->dist_batch = m->dist_share = 0; /* validation and callbacks: whole batches on every rank */
    if (r->dist && fl_dp_average_moving_stats(m) != FL_OK) return false;
    double v[1 + FL_MAX_METRICS];
    if (!fit_epoch_checks(r, ep, seen, steps_done, checked, v)) return false;
    h->train_seconds += fl_clock_seconds() - t0;
    h->train_samples += seen;
    char keys[FL_HIST_MAX_KEYS][48];
    double vals[FL_HIST_MAX_KEYS];
    float hv[FL_HIST_MAX_KEYS];
    int nkv = fl_stat_kv(m, v, "", keys, vals);
    for (int k = 0; k < nkv; k++) hv[k] = (float)vals[k];
    if (r->has_val && !fit_validate(r, keys, vals, hv, &nkv)) return false;
    r->logs.n = 0;
    for (int k = 0; k < nkv; k++) fl_logs_set(&r->logs, keys[k], (double)hv[k]);
    for (int c = 0; c < r->ncb; c++)
        if (r->cbs[c]->on_epoch_end && r->cbs[c]->on_epoch_end(m, ep, &r->logs, r->cbs[c]->user) != FL_OK)
            return callback_failed(r);
    if (fl_history_push_logs(h, &r->logs) != FL_OK) return false;
    if (fl_progbar_due(&pb, true)) { /* after the callbacks, as Keras's ProgbarLogger: with their keys */
        nkv = r->logs.n < FL_HIST_MAX_KEYS ? r->logs.n : FL_HIST_MAX_KEYS;
        for (int k = 0; k < nkv; k++) {
            snprintf(keys[k], sizeof keys[k], "%s", r->logs.keys[k]);
            vals[k] = r->logs.values[k];
        }
        fl_sort_kv(nkv, keys, vals);
        fl_progbar_update(&pb, steps_done, nkv, keys, vals, true);
    }
    m->epochs_run++;
    *stop = (r->a.on_epoch_end && !r->a.on_epoch_end(m, ep, h, r->a.user)) || m->stop_training;
    return true;
}

/* After the last epoch: on_train_end, the ranks' weights compared, the History's times and graph counts. */
static bool fit_end(fit_run *r) {
    fl_model *m = r->m;
    for (int c = 0; c < r->ncb; c++)
        if (r->cbs[c]->on_train_end && r->cbs[c]->on_train_end(m, &r->logs, r->cbs[c]->user) != FL_OK)
            return callback_failed(r);
    if (r->dist && fl_dp_check_weights(m, "fl_fit: after training") != FL_OK) return false;
    fl_dp_buckets_end(m);
    fl_history *h = r->h;
    const fl_step_state *gs = &r->gs;
    h->seconds = fl_clock_seconds() - r->t_fit;
    fl_step_report(m, gs, r->mode, h);
    return true;
}

/* What fit_begin made; failed: a phase stopped (the data-parallel buckets and the History go too). */
static void fit_run_free(fit_run *r, bool failed) {
    fl_model *m = r->m;
    if (failed && m) {
        m->dist_batch = m->dist_share = 0;
        fl_dp_buckets_free(m);
    }
    if (m) {
        fl_step_state_end(m, &r->gs);
        fl_batches_close(m, &r->tr);
        fl_batches_close(m, &r->vd);
    }
    free(r->perm); free(r->vidx); free(r->yh); free(r->vyh); free(r->wh); free(r->vwh);
    fl_free_rows(r->xo, r->nx); fl_free_rows(r->vxo, r->nx);
    if (failed) { fl_history_free(r->h); r->h = NULL; }
}

/* fl_fit and fl_fit_multi (xs[0..nx), one array per model input) and fl_fit_stream (stream, xs NULL): one loop,
 * the batches loaded through fl_batches. */
static fl_history *fit(fl_model *m, const fl_tensor *const *xs, int nx, const fl_tensor *y, fl_data_stream *stream,
                       fl_fit_args a, const char *fn) {
    fit_run r = {.m = m, .xs = xs, .y = y, .nx = nx, .stream = stream, .a = a, .fn = fn};
    if (!fit_args(&r)) return NULL;
    bool ok = fit_begin(&r), stop = false;
    for (int ep = a.initial_epoch; ok && !stop && ep < r.epochs; ep++) ok = fit_epoch(&r, ep, &stop);
    ok = ok && fit_end(&r);
    fit_run_free(&r, !ok);
    return r.h;
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
