/*
 * batches.c — the data fit, evaluate and predict take (fit.h): x checked against the model's inputs (and
 * the Embeddings' index ranges), x's rows as the inputs hold them, y and the sample and class weights as the
 * loss reads them, and the batch sources behind fl_batches: arrays on the host, copied to the device where
 * they fit (a batch gathered there), else staged through the host; or a stream read ahead on background
 * threads (src/io/stream.c).
 */
#include "nn/fit.h"
#include "nn/step.h"
#include "core/error.h"
#include "core/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


/* Checks x against the model's input and binds the input's None axes to
 * x's lengths (the graph is planned for them: fl_model_bind). */
fl_status fl_check_x(fl_model *m, const fl_tensor *x, const char *what) {
    if (m->ninputs != 1 || m->noutputs != 1)
        return fl_error(FL_ERR_UNSUPPORTED,
                        "%s: model '%s' has %d inputs and %d outputs; fit, evaluate and predict take models with one "
                        "of each (use fl_predict_multi for predictions)", what, m->name, m->ninputs, m->noutputs);
    FL_TRY(fl_check_x_for(m, m->input, x, what));
    return fl_model_bind(m, &x, 1, what);
}

fl_status fl_check_x_for(const fl_model *m, const fl_node *in, const fl_tensor *x, const char *what) {
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
 * as fl_check_x_for does (named by its position and the input's name when the
 * model has several), all with the same number of samples; one output. The
 * inputs' None axes are bound to the arrays' lengths (fl_model_bind). */
fl_status fl_check_xs(fl_model *m, const fl_tensor *const *xs, int nx, const char *what) {
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
        FL_TRY(fl_check_x_for(m, m->inputs[i], xs[i], w));
        if (xs[i]->shape[0] != xs[0]->shape[0])
            return fl_error(FL_ERR_SHAPE, "%s: input %d '%s' has %lld samples, input 0 '%s' has %lld: every input "
                            "needs the same number of samples", what, i, m->inputs[i]->name,
                            (long long)xs[i]->shape[0], m->inputs[0]->name, (long long)xs[0]->shape[0]);
    }
    return fl_model_bind(m, xs, nx, what);
}


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
                                fl_index_str(i % per, nd, dims, a, sizeof a), e->name, (long long)dim);
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
const float *fl_x_rows(const fl_model *m, const fl_node *in, const fl_tensor *x, const char *what, float **owned) {
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
float *fl_prepare_y(const fl_model *m, const fl_tensor *x, const fl_tensor *y, int64_t *y_row, const char *what) {
    char a[128], b[128];
    if (!y) return fl_error_null(FL_ERR_INVALID_ARG, "%s: y is NULL", what);
    if (y->ndim < 1 || y->shape[0] != x->shape[0])
        return fl_error_null(FL_ERR_SHAPE, "%s: x has %lld samples but y has shape %s", what, (long long)x->shape[0],
                             fl_shape_str(y->ndim, y->shape, a, sizeof a));
    const fl_node *o = m->output;
    int64_t out_row = fl_node_sample_size(o);
    int C = fl_out_classes(m);
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

/* A stream's sample shapes against the model's input and the loss (as fl_check_x and fl_prepare_y check arrays);
 * *y_row: floats of y per sample. */
fl_status fl_check_stream(const fl_model *m, const fl_data_stream *s, const char *what, int64_t *y_row) {
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
        if (per != out_row / fl_out_classes(m))
            return fl_error(FL_ERR_SHAPE, "%s: sparse_categorical_crossentropy wants %lld class index(es) per sample, the "
                            "stream's y has shape %s per sample", what, (long long)(out_row / fl_out_classes(m)),
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
static int weight_classes(const fl_model *m) { return fl_out_classes(m) > 1 ? fl_out_classes(m) : 2; }

/* The loss rows' weights, rows_per_sample (the output's rows: 1, or its
 * steps) floats a sample, from sample_weight ((N,) or (N, 1): one weight a
 * sample, the same for each of its rows; (N, steps...): one a row), or from
 * class_weight by the class of each sample's y as Keras's
 * class_weight_to_sample_weights finds it (one-hot rows: argmax; one value:
 * rounded half to even; a class without a weight: 1). *out stays NULL when
 * neither is given. yh: y as fl_prepare_y made it, yrow floats a sample. */
fl_status fl_prepare_weights(const fl_model *m, const fl_tensor *sw, const float *cw, int ncw, const float *yh,
                                 int64_t yrow, int64_t n, const char *what, float **out) {
    char a[128];
    *out = NULL;
    int64_t rows = fl_node_sample_size(m->output) / fl_out_classes(m);
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




/* hx[i]: the rows of input ins[i] (i < nx); hy (yrow floats a sample) and hw
 * (wrow) may be NULL. */
fl_status fl_batches_open(fl_model *m, int nx, fl_node *const *ins, const float *const *hx, const float *hy,
                           int64_t yrow, const float *hw, int64_t wrow, int64_t n, fl_batches *d) {
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
        fl_batches_close(m, d);
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

/* A stream as the rows of input `in`: its sample shapes were checked (fl_check_stream). */
fl_status fl_batches_open_stream(fl_model *m, fl_node *in, fl_data_stream *s, int64_t yrow, int64_t bs,
                                  const fl_fit_args *a, bool check, fl_batches *d) {
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
fl_status fl_batches_begin(fl_batches *d, int epoch, const int64_t *order, int64_t n) {
    return d->pf ? fl_prefetch_begin(d->pf, epoch, order, n) : FL_OK;
}
void fl_batches_end(fl_batches *d) { fl_prefetch_end(d->pf); }

void fl_batches_close(fl_model *m, fl_batches *d) {
    fl_prefetch_close(d->pf);
    for (int i = 0; i < d->nx; i++)
        if (d->dx[i]) m->g.be->free(d->dx[i]);
    if (d->dy) m->g.be->free(d->dy);
    if (d->dw) m->g.be->free(d->dw);
    memset(d, 0, sizeof *d);
}

/* The stream's next batch (samples idx[0..b) of the pass) into the input node and the targets: x as the
 * input holds it (as fl_x_rows converts arrays), y checked as fl_prepare_y checks arrays. */
static fl_status load_stream_batch(fl_model *m, fl_batches *d, const int64_t *idx, int64_t b) {
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
        const int C = fl_out_classes(m);
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
 * data by class). The copy shares d's buffers: never fl_batches_close it. */
fl_batches fl_batches_unweighted(const fl_batches *d) {
    fl_batches v = *d;
    v.hw = NULL;
    v.dw = NULL;
    v.wrow = 0;
    return v;
}

/* Puts samples idx[0..b) of d into the input nodes (and targets, weights). */
fl_status fl_batches_load(fl_model *m, fl_batches *d, const int64_t *idx, int64_t b) {
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

/* x's rows for every input (xo[i]: what fl_x_rows made and the caller frees); false on error (freed). */
bool fl_inputs_rows(const fl_model *m, const fl_tensor *const *xs, int nx, const char *what, const float **rows,
                        float **xo) {
    for (int i = 0; i < nx; i++) xo[i] = NULL;
    for (int i = 0; i < nx; i++)
        if (!(rows[i] = fl_x_rows(m, m->inputs[i], xs[i], what, &xo[i]))) {
            for (int k = 0; k < i; k++) { free(xo[k]); xo[k] = NULL; }
            return false;
        }
    return true;
}

void fl_free_rows(float **xo, int nx) {
    for (int i = 0; i < nx; i++) { free(xo[i]); xo[i] = NULL; }
}

bool fl_batches_gathered_on_device(const fl_model *m) { return !m->g.be->host_memory; }

/* The last batch's rows of input k on the host: in the input node itself where the backend's memory is the
 * host's, else a stream's host copy (arrays on a device: NULL, all of x was checked before training). */
const float *fl_batches_host_rows(const fl_model *m, const fl_batches *d, int k) {
    return m->g.be->host_memory ? m->inputs[k]->val : d->last_x;
}
