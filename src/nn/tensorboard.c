/*
 * tensorboard.c — keras.callbacks.TensorBoard for fl_fit's callback list:
 * the event files Keras 3.15 on TensorFlow writes (keras/src/callbacks/
 * tensorboard.py), in the same folders, with the same tags and steps:
 *
 *   log_dir/train       "keras" (the model's JSON, plugin graph_keras_model,
 *                       step 0), epoch_<key> of the training keys and
 *                       epoch_learning_rate (step: the epoch), batch_<key>
 *                       every update_freq steps (step: the step counted from
 *                       the start of fl_fit, 1-based), epoch_steps_per_second
 *                       and batch_steps_per_second with write_steps_per_second,
 *                       <weight.path>/histogram
 *                       every histogram_freq epochs (step: the epoch)
 *   log_dir/validation  evaluation_<key>_vs_iterations (step: the
 *                       optimizer's iterations) and epoch_<key> of the val_
 *                       keys without "val_" (step: the epoch)
 *
 * The files themselves (TFRecord framing, Event protobufs) are nn/tfevents.c.
 * One difference from Keras, on purpose: with update_freq = N Keras on
 * TensorFlow drops the epoch summaries of every epoch whose last step is not
 * a multiple of N (its record_if condition stays on; tensorflow/tensorboard
 * issue 4975); flynn writes them every epoch, as Keras documents.
 */
#include "core/clock.h"
#include "nn.h"
#include "core/error.h"
#include "keras/keras.h"
#include "nn/tfevents.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct tensorboard {
    char *log_dir, *train_dir, *val_dir;
    int histogram_freq, update_freq;
    bool write_graph, steps_per_second;
    fl_tfevents *train, *val;
    int64_t global_batch;
    double epoch_t0, batch_t0;  /* write_steps_per_second: when the epoch and the step began */
    int64_t epoch_it0;          /* the optimizer's iterations when the epoch began */
} tensorboard;

static fl_status tb_close(tensorboard *t) {
    fl_status a = fl_tfevents_close(t->train);
    t->train = NULL;
    fl_status b = fl_tfevents_close(t->val); /* its error, if any, is the one set last */
    t->val = NULL;
    return a != FL_OK ? a : b;
}

/* Keras's keras_model_summary("keras", model, step=0) */
static fl_status tb_write_graph(tensorboard *t, fl_model *m) {
    char *json = fl_model_to_json(m);
    if (!json) { /* Keras: "Model failed to serialize as JSON. Ignoring..." */
        fprintf(stderr, "flynn: TensorBoard: the model failed to serialize as JSON (%s); no graph in %s\n",
                fl_last_error(), t->train_dir);
        fl_clear_error();
        return FL_OK;
    }
    fl_status st = fl_tfevents_string(t->train, "keras", 0, json, "graph_keras_model", "1");
    free(json);
    return st;
}

static fl_status tb_train_begin(fl_model *m, fl_logs *logs, void *user) {
    (void)logs;
    tensorboard *t = user;
    tb_close(t); /* a fit that failed before its train end: its files stay as they are */
    fl_clear_error();
    t->global_batch = 0;
    if (!(t->train = fl_tfevents_open(t->train_dir))) return fl_last_status();
    if (t->write_graph) FL_TRY(tb_write_graph(t, m));
    return fl_tfevents_flush(t->train);
}

static fl_status tb_epoch_begin(fl_model *m, int epoch, fl_logs *logs, void *user) {
    (void)epoch; (void)logs;
    tensorboard *t = user;
    t->epoch_it0 = m->opt ? fl_optimizer_iterations(m->opt) : 0;
    t->epoch_t0 = t->batch_t0 = fl_clock_seconds();
    return FL_OK;
}

static fl_status tb_batch_end(fl_model *m, int64_t batch, fl_logs *logs, void *user) {
    (void)m; (void)batch;
    tensorboard *t = user;
    t->global_batch++;
    double now = t->steps_per_second ? fl_clock_seconds() : 0.0, dt = now - t->batch_t0;
    t->batch_t0 = now;
    if (!t->train || t->global_batch % t->update_freq != 0) return FL_OK;
    /* Keras times on_train_batch_begin to _end; flynn has no batch-begin hook: from the previous step's end */
    if (t->steps_per_second)
        FL_TRY(fl_tfevents_scalar(t->train, "batch_steps_per_second", t->global_batch, (float)(dt > 0 ? 1.0 / dt : 0.0)));
    char tag[64];
    for (int i = 0; i < logs->n; i++) {
        snprintf(tag, sizeof tag, "batch_%s", logs->keys[i]);
        FL_TRY(fl_tfevents_scalar(t->train, tag, t->global_batch, (float)logs->values[i]));
    }
    return fl_tfevents_flush(t->train);
}

/* _log_weights: every weight of every layer (trainable or not), host copies */
static fl_status tb_histograms(tensorboard *t, fl_model *m, int epoch) {
    float *buf = NULL;
    size_t cap = 0;
    fl_status st = FL_OK;
    for (int i = 0; i < m->nlayers && st == FL_OK; i++) {
        const fl_layer *l = m->layers[i];
        for (int k = 0; k < l->nw && st == FL_OK; k++) {
            const fl_node *w = l->w[k];
            size_t n = (size_t)fl_node_size(w);
            if (n > cap) {
                float *p = realloc(buf, n * sizeof *buf);
                if (!p) { st = fl_error(FL_ERR_NOMEM, "TensorBoard: no memory for a copy of %s's weights", l->name); break; }
                buf = p;
                cap = n;
            }
            if (n) m->g.be->download(buf, w->val, n * sizeof *buf);
            char path[256], tag[300];
            fl_keras_weight_path(m, i, k, path, sizeof path);
            for (char *c = path; *c; c++) if (*c == ':') *c = '_';
            snprintf(tag, sizeof tag, "%s/histogram", path);
            st = fl_tfevents_histogram(t->train, tag, epoch, buf, n);
        }
    }
    free(buf);
    return st;
}

static fl_status tb_epoch_end(fl_model *m, int epoch, fl_logs *logs, void *user) {
    tensorboard *t = user;
    if (!t->train) return fl_error(FL_ERR_STATE, "TensorBoard %s: epoch end before train begin", t->log_dir);
    char tag[96];
    bool has_val = false;
    for (int i = 0; i < logs->n; i++) has_val = has_val || strncmp(logs->keys[i], "val_", 4) == 0;
    if (has_val) {
        if (!t->val && !(t->val = fl_tfevents_open(t->val_dir))) return fl_last_status();
        /* on_test_end: the evaluation's logs against the optimizer's iterations */
        int64_t it = m->opt ? fl_optimizer_iterations(m->opt) : 0;
        for (int i = 0; i < logs->n; i++) {
            if (strncmp(logs->keys[i], "val_", 4) != 0) continue;
            snprintf(tag, sizeof tag, "evaluation_%s_vs_iterations", logs->keys[i] + 4);
            FL_TRY(fl_tfevents_scalar(t->val, tag, it, (float)logs->values[i]));
        }
    }
    /* _log_epoch_metrics: the training keys with the optimizer's learning rate */
    bool lr_done = !m->opt;
    double lr = m->opt ? (double)fl_optimizer_current_learning_rate(m->opt) : 0.0;
    for (int i = 0; i < logs->n; i++) {
        if (strncmp(logs->keys[i], "val_", 4) == 0) continue;
        bool is_lr = strcmp(logs->keys[i], "learning_rate") == 0 && m->opt;
        snprintf(tag, sizeof tag, "epoch_%s", logs->keys[i]);
        FL_TRY(fl_tfevents_scalar(t->train, tag, epoch, (float)(is_lr ? lr : logs->values[i])));
        lr_done = lr_done || is_lr;
    }
    if (!lr_done) FL_TRY(fl_tfevents_scalar(t->train, "epoch_learning_rate", epoch, (float)lr));
    if (t->steps_per_second) { /* _compute_steps_per_second: the epoch's steps over its time so far */
        double dt = fl_clock_seconds() - t->epoch_t0;
        int64_t it = m->opt ? fl_optimizer_iterations(m->opt) : 0;
        FL_TRY(fl_tfevents_scalar(t->train, "epoch_steps_per_second", epoch, (float)(dt > 0 ? (double)(it - t->epoch_it0) / dt : 0.0)));
    }
    for (int i = 0; has_val && i < logs->n; i++) {
        if (strncmp(logs->keys[i], "val_", 4) != 0) continue;
        snprintf(tag, sizeof tag, "epoch_%s", logs->keys[i] + 4);
        FL_TRY(fl_tfevents_scalar(t->val, tag, epoch, (float)logs->values[i]));
    }
    if (t->histogram_freq > 0 && epoch % t->histogram_freq == 0) FL_TRY(tb_histograms(t, m, epoch));
    FL_TRY(fl_tfevents_flush(t->train));
    return t->val ? fl_tfevents_flush(t->val) : FL_OK;
}

static fl_status tb_train_end(fl_model *m, fl_logs *logs, void *user) {
    (void)m; (void)logs;
    return tb_close(user);
}

static void tb_destroy(void *user) {
    tensorboard *t = user;
    tb_close(t);
    free(t->log_dir);
    free(t->train_dir);
    free(t->val_dir);
    free(t);
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = fl_malloc(n, "TensorBoard folder name");
    if (p) snprintf(p, n, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", name);
    return p;
}

fl_callback *fl_tensorboard_(const char *log_dir, fl_tensorboard_args a) {
    const char *dir = log_dir ? log_dir : "logs";
    if (!*dir) return fl_error_null(FL_ERR_INVALID_ARG, "fl_tensorboard: log_dir is empty");
    if (a.histogram_freq < 0 || a.update_freq < 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_tensorboard: histogram_freq (%d) and update_freq (%d) must be >= 0 "
                             "(update_freq 0 is Keras's \"epoch\", 1 its \"batch\")", a.histogram_freq, a.update_freq);
    tensorboard *t = fl_calloc(1, sizeof *t, "TensorBoard");
    if (!t) return NULL;
    size_t n = strlen(dir) + 1;
    t->log_dir = fl_malloc(n, "TensorBoard folder name");
    if (t->log_dir) memcpy(t->log_dir, dir, n);
    t->train_dir = join(dir, "train");
    t->val_dir = join(dir, "validation");
    t->histogram_freq = a.histogram_freq;
    t->update_freq = a.update_freq;
    t->write_graph = !a.no_write_graph;
    t->steps_per_second = a.write_steps_per_second;
    fl_callback *cb = t->log_dir && t->train_dir && t->val_dir ? fl_calloc(1, sizeof *cb, "callback") : NULL;
    if (!cb) { tb_destroy(t); return NULL; }
    cb->user = t;
    cb->on_train_begin = tb_train_begin;
    if (a.write_steps_per_second) cb->on_epoch_begin = tb_epoch_begin;
    if (a.update_freq > 0) cb->on_batch_end = tb_batch_end; /* else a GPU need not wait for each step's loss */
    cb->on_epoch_end = tb_epoch_end;
    cb->on_train_end = tb_train_end;
    cb->destroy = tb_destroy;
    return cb;
}
