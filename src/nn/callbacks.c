/*
 * callbacks.c — keras.callbacks for fl_fit's callback list: the logs
 * (History keys and values), stop_training, and the built-ins
 * EarlyStopping, ReduceLROnPlateau, LearningRateScheduler, CSVLogger and
 * TerminateOnNaN with Keras 3.15's semantics (keras/src/callbacks/):
 * the same comparisons (monitor_op(current - min_delta, best) in double,
 * as Python floats), the same counters and the same file bytes.
 * ModelCheckpoint's callback is in checkpoint.c; fl_fit calls them all.
 */
#include "nn.h"
#include "core/error.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ logs */

static int logs_find(const fl_logs *l, const char *key) {
    for (int i = 0; l && key && i < l->n; i++)
        if (strcmp(l->keys[i], key) == 0) return i;
    return -1;
}
bool fl_logs_has(const fl_logs *l, const char *key) { return logs_find(l, key) >= 0; }
double fl_logs_get(const fl_logs *l, const char *key) {
    int i = logs_find(l, key);
    return i >= 0 ? l->values[i] : NAN;
}
fl_status fl_logs_set(fl_logs *l, const char *key, double v) {
    if (!l || !key || !*key) return fl_error(FL_ERR_INVALID_ARG, "fl_logs_set: logs or key is NULL or empty");
    int i = logs_find(l, key);
    if (i < 0) {
        if (l->n >= FL_LOGS_MAX_KEYS)
            return fl_error(FL_ERR_INVALID_ARG, "fl_logs_set: no room for key '%s' (the logs hold %d keys at most)", key,
                            FL_LOGS_MAX_KEYS);
        if (strlen(key) >= sizeof l->keys[0])
            return fl_error(FL_ERR_INVALID_ARG, "fl_logs_set: key '%.60s...' is longer than %d characters", key,
                            (int)sizeof l->keys[0] - 1);
        i = l->n++;
        snprintf(l->keys[i], sizeof l->keys[i], "%s", key);
    }
    l->values[i] = v;
    return FL_OK;
}

void fl_model_stop_training(fl_model *m) { if (m) m->stop_training = true; }
bool fl_model_stopping(const fl_model *m) { return m && m->stop_training; }

void fl_callback_free(fl_callback *cb) {
    if (!cb) return;
    if (cb->destroy) cb->destroy(cb->user);
    free(cb);
}

static fl_callback *new_callback(void *state) {
    if (!state) return NULL;
    fl_callback *cb = fl_calloc(1, sizeof *cb, "callback");
    if (!cb) { free(state); return NULL; }
    cb->user = state;
    return cb;
}

/* MonitorCallback._set_monitor_op: -1 (min), 1 (max); FL_ERR_INVALID_ARG
 * when mode is auto and the name says neither, as Keras's ValueError. */
static fl_status monitor_dir(const char *who, const char *monitor, fl_checkpoint_mode mode, int *dir) {
    *dir = mode == FL_CHECKPOINT_MIN ? -1 : mode == FL_CHECKPOINT_MAX ? 1 : fl_monitor_direction(monitor);
    if (*dir == 0)
        return fl_error(FL_ERR_INVALID_ARG, "%s: monitor='%s', but flynn cannot tell whether it should be minimized or "
                        "maximized; pass .mode = FL_CHECKPOINT_MIN or FL_CHECKPOINT_MAX", who, monitor);
    return FL_OK;
}

/* monitor_op(current - min_delta, reference), min_delta negated for min */
static bool improved(int dir, double min_delta, double current, bool has_ref, double ref) {
    if (!has_ref) return true;
    return dir < 0 ? current + min_delta < ref : current - min_delta > ref;
}

static void warn_missing(FILE *out, const char *who, const char *monitor, const fl_logs *logs) {
    fprintf(out, "%s conditioned on metric `%s` which is not available. Available metrics are: ", who, monitor);
    for (int i = 0; i < logs->n; i++) fprintf(out, "%s%s", i ? "," : "", logs->keys[i]);
    fprintf(out, "\n");
    fflush(out);
}

/* ------------------------------------------------------- EarlyStopping */

typedef struct early_stopping {
    char monitor[48];
    double min_delta, baseline;
    bool has_baseline, restore, verbose;
    int patience, start_from_epoch, dir;
    fl_checkpoint_mode mode;
    FILE *out;
    int wait, stopped_epoch, best_epoch;
    bool has_best, warned;
    double best;
    float **best_weights; /* one host copy per weight, all the model's (Keras get_weights) */
    int nweights;
} early_stopping;

static void es_drop_weights(early_stopping *e) {
    for (int i = 0; i < e->nweights; i++) free(e->best_weights[i]);
    free(e->best_weights);
    e->best_weights = NULL;
    e->nweights = 0;
}

static int model_nweights(const fl_model *m) {
    int n = 0;
    for (int i = 0; i < m->nlayers; i++) n += m->layers[i]->nw;
    return n;
}

/* model.get_weights() into e->best_weights (reusing its buffers) */
static fl_status es_save_weights(early_stopping *e, fl_model *m) {
    int n = model_nweights(m);
    if (e->best_weights && e->nweights != n) es_drop_weights(e);
    if (!e->best_weights) {
        e->best_weights = fl_calloc((size_t)n + 1, sizeof *e->best_weights, "EarlyStopping best weights");
        if (!e->best_weights) return fl_last_status();
        e->nweights = n;
    }
    int v = 0;
    for (int i = 0; i < m->nlayers; i++)
        for (int k = 0; k < m->layers[i]->nw; k++, v++) {
            const fl_node *w = m->layers[i]->w[k];
            size_t bytes = (size_t)fl_node_size(w) * sizeof(float);
            if (!e->best_weights[v] && !(e->best_weights[v] = fl_malloc(bytes ? bytes : 1, "EarlyStopping best weights")))
                return fl_last_status();
            m->g.be->download(e->best_weights[v], w->val, bytes);
        }
    return FL_OK;
}

static fl_status es_train_begin(fl_model *m, fl_logs *logs, void *user) {
    (void)m; (void)logs;
    early_stopping *e = user;
    e->wait = 0;
    e->stopped_epoch = 0;
    e->has_best = false;
    e->best_epoch = 0;
    es_drop_weights(e);
    return monitor_dir("EarlyStopping", e->monitor, e->mode, &e->dir);
}

static fl_status es_epoch_end(fl_model *m, int epoch, fl_logs *logs, void *user) {
    early_stopping *e = user;
    if (!fl_logs_has(logs, e->monitor)) {
        if (!e->warned) warn_missing(e->out, "Early stopping", e->monitor, logs);
        e->warned = true;
        return FL_OK;
    }
    double current = fl_logs_get(logs, e->monitor);
    if (epoch < e->start_from_epoch) return FL_OK;
    if (e->restore && !e->best_weights) {
        if (es_save_weights(e, m) != FL_OK) return fl_last_status();
        e->best_epoch = epoch;
    }
    e->wait++;
    if (improved(e->dir, e->min_delta, current, e->has_best, e->best)) {
        e->best = current;
        e->has_best = true;
        e->best_epoch = epoch;
        if (e->restore && es_save_weights(e, m) != FL_OK) return fl_last_status();
        if (!e->has_baseline || improved(e->dir, e->min_delta, current, true, e->baseline)) e->wait = 0;
        return FL_OK;
    }
    if (e->wait >= e->patience && epoch > 0) {
        e->stopped_epoch = epoch;
        fl_model_stop_training(m);
    }
    return FL_OK;
}

static fl_status es_train_end(fl_model *m, fl_logs *logs, void *user) {
    (void)logs;
    early_stopping *e = user;
    if (e->stopped_epoch > 0 && e->verbose) fprintf(e->out, "Epoch %d: early stopping\n", e->stopped_epoch + 1);
    if (e->restore && e->best_weights) {
        if (e->verbose) fprintf(e->out, "Restoring model weights from the end of the best epoch: %d.\n", e->best_epoch + 1);
        if (e->nweights != model_nweights(m))
            return fl_error(FL_ERR_STATE, "EarlyStopping: the model has %d weights now, %d when the best were kept",
                            model_nweights(m), e->nweights);
        int v = 0;
        for (int i = 0; i < m->nlayers; i++)
            for (int k = 0; k < m->layers[i]->nw; k++, v++) {
                fl_node *w = m->layers[i]->w[k];
                m->g.be->upload(w->val, e->best_weights[v], (size_t)fl_node_size(w) * sizeof(float));
            }
    }
    if (e->verbose) fflush(e->out);
    return FL_OK;
}

static void es_destroy(void *user) {
    es_drop_weights(user);
    free(user);
}

static fl_status copy_monitor(const char *who, char *dst, size_t n, const char *monitor) {
    const char *mon = monitor && *monitor ? monitor : "val_loss";
    if (strlen(mon) >= n) return fl_error(FL_ERR_INVALID_ARG, "%s: monitor name '%.60s' is too long", who, mon);
    snprintf(dst, n, "%s", mon);
    return FL_OK;
}

fl_callback *fl_early_stopping_(fl_early_stopping_args a) {
    if ((unsigned)a.mode > FL_CHECKPOINT_MAX)
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_early_stopping: mode %d is not an fl_checkpoint_mode", (int)a.mode);
    if (a.patience < 0 || a.start_from_epoch < 0 || !isfinite(a.min_delta))
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_early_stopping: patience %d and start_from_epoch %d must be >= 0, "
                             "min_delta (%g) finite", a.patience, a.start_from_epoch, a.min_delta);
    early_stopping *e = fl_calloc(1, sizeof *e, "EarlyStopping");
    if (!e) return NULL;
    if (copy_monitor("fl_early_stopping", e->monitor, sizeof e->monitor, a.monitor) != FL_OK) { free(e); return NULL; }
    e->min_delta = fabs(a.min_delta);
    e->patience = a.patience;
    e->mode = a.mode;
    e->baseline = a.baseline;
    e->has_baseline = a.has_baseline;
    e->restore = a.restore_best_weights;
    e->start_from_epoch = a.start_from_epoch;
    e->verbose = a.verbose;
    e->out = a.out ? a.out : stdout;
    /* the mode is checked now for a clear error at construction, and again at train begin */
    int dir;
    if (monitor_dir("fl_early_stopping", e->monitor, e->mode, &dir) != FL_OK) { free(e); return NULL; }
    fl_callback *cb = new_callback(e);
    if (!cb) return NULL;
    cb->on_train_begin = es_train_begin;
    cb->on_epoch_end = es_epoch_end;
    cb->on_train_end = es_train_end;
    cb->destroy = es_destroy;
    return cb;
}

int fl_early_stopping_stopped_epoch(const fl_callback *cb) {
    return cb && cb->on_epoch_end == es_epoch_end ? ((const early_stopping *)cb->user)->stopped_epoch : 0;
}
int fl_early_stopping_best_epoch(const fl_callback *cb) {
    return cb && cb->on_epoch_end == es_epoch_end ? ((const early_stopping *)cb->user)->best_epoch : 0;
}

/* --------------------------------------------------- ReduceLROnPlateau */

typedef struct reduce_lr {
    char monitor[48];
    double factor, min_delta, min_lr;
    int patience, cooldown, dir;
    fl_checkpoint_mode mode;
    bool verbose, warned;
    FILE *out;
    int wait, cooldown_counter;
    bool has_best;
    double best;
} reduce_lr;

static fl_status rl_train_begin(fl_model *m, fl_logs *logs, void *user) {
    (void)m; (void)logs;
    reduce_lr *r = user;
    r->has_best = false;
    r->cooldown_counter = 0;
    r->wait = 0;
    return monitor_dir("ReduceLROnPlateau", r->monitor, r->mode, &r->dir);
}

static fl_status rl_epoch_end(fl_model *m, int epoch, fl_logs *logs, void *user) {
    reduce_lr *r = user;
    fl_optimizer *o = m->opt;
    if (fl_logs_set(logs, "learning_rate", (double)fl_optimizer_current_learning_rate(o)) != FL_OK)
        return fl_last_status();
    if (!fl_logs_has(logs, r->monitor)) {
        if (!r->warned) warn_missing(r->out, "Learning rate reduction is", r->monitor, logs);
        r->warned = true;
        return FL_OK;
    }
    double current = fl_logs_get(logs, r->monitor);
    if (r->cooldown_counter > 0) {
        r->cooldown_counter--;
        r->wait = 0;
    }
    if (improved(r->dir, r->min_delta, current, r->has_best, r->best)) {
        r->best = current;
        r->has_best = true;
        r->wait = 0;
    } else if (r->cooldown_counter <= 0) {
        r->wait++;
        if (r->wait >= r->patience) {
            double old_lr = (double)fl_optimizer_current_learning_rate(o);
            if (old_lr > (double)(float)r->min_lr) {
                double new_lr = old_lr * r->factor;
                if (new_lr < r->min_lr) new_lr = r->min_lr;
                if (fl_optimizer_set_learning_rate(o, (float)new_lr) != FL_OK) {
                    fl_error_prefix("ReduceLROnPlateau: ");
                    return fl_last_status();
                }
                if (r->verbose) {
                    char v[40];
                    fl_py_float_repr(new_lr, v, sizeof v); /* Keras prints the Python float */
                    fprintf(r->out, "\nEpoch %d: ReduceLROnPlateau reducing learning rate to %s.\n", epoch + 1, v);
                    fflush(r->out);
                }
                r->cooldown_counter = r->cooldown;
                r->wait = 0;
            }
        }
    }
    return FL_OK;
}

fl_callback *fl_reduce_lr_on_plateau_(fl_reduce_lr_args a) {
    double factor = a.factor == 0.0 ? 0.1 : a.factor;
    if (!(factor < 1.0) || !(factor > 0.0))
        return fl_error_null(FL_ERR_INVALID_ARG, "ReduceLROnPlateau does not support a factor >= 1.0 (or <= 0). "
                             "Received factor=%g", factor);
    if ((unsigned)a.mode > FL_CHECKPOINT_MAX || a.cooldown < 0 || !(a.min_lr >= 0) || !isfinite(a.min_delta))
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_reduce_lr_on_plateau: mode %d, cooldown %d (>= 0), min_lr %g "
                             "(>= 0), min_delta %g out of range", (int)a.mode, a.cooldown, a.min_lr, a.min_delta);
    reduce_lr *r = fl_calloc(1, sizeof *r, "ReduceLROnPlateau");
    if (!r) return NULL;
    if (copy_monitor("fl_reduce_lr_on_plateau", r->monitor, sizeof r->monitor, a.monitor) != FL_OK) { free(r); return NULL; }
    r->factor = factor;
    r->patience = a.patience == 0 ? 10 : a.patience < 0 ? 0 : a.patience;
    r->min_delta = a.min_delta == 0.0 ? 1e-4 : a.min_delta < 0 ? 0.0 : a.min_delta;
    r->mode = a.mode;
    r->cooldown = a.cooldown;
    r->min_lr = a.min_lr;
    r->verbose = a.verbose;
    r->out = a.out ? a.out : stdout;
    int dir;
    if (monitor_dir("fl_reduce_lr_on_plateau", r->monitor, r->mode, &dir) != FL_OK) { free(r); return NULL; }
    fl_callback *cb = new_callback(r);
    if (!cb) return NULL;
    cb->on_train_begin = rl_train_begin;
    cb->on_epoch_end = rl_epoch_end;
    cb->destroy = free;
    return cb;
}

/* ----------------------------------------------- LearningRateScheduler */

typedef struct lr_scheduler {
    fl_epoch_schedule fn;
    void *user;
} lr_scheduler;

static fl_status ls_epoch_begin(fl_model *m, int epoch, fl_logs *logs, void *user) {
    (void)logs;
    lr_scheduler *s = user;
    double lr = s->fn(epoch, (double)fl_optimizer_current_learning_rate(m->opt), s->user);
    if (fl_optimizer_set_learning_rate(m->opt, (float)lr) != FL_OK) {
        fl_error_prefix("LearningRateScheduler (epoch %d): ", epoch);
        return fl_last_status();
    }
    return FL_OK;
}

static fl_status ls_epoch_end(fl_model *m, int epoch, fl_logs *logs, void *user) {
    (void)epoch; (void)user;
    return fl_logs_set(logs, "learning_rate", (double)fl_optimizer_current_learning_rate(m->opt));
}

fl_callback *fl_learning_rate_scheduler(fl_epoch_schedule schedule, void *user) {
    if (!schedule) return fl_error_null(FL_ERR_INVALID_ARG, "fl_learning_rate_scheduler: schedule is NULL");
    lr_scheduler *s = fl_calloc(1, sizeof *s, "LearningRateScheduler");
    if (!s) return NULL;
    s->fn = schedule;
    s->user = user;
    fl_callback *cb = new_callback(s);
    if (!cb) return NULL;
    cb->on_epoch_begin = ls_epoch_begin;
    cb->on_epoch_end = ls_epoch_end;
    cb->destroy = free;
    return cb;
}

/* ------------------------------------------------------------ CSVLogger */

/* Python's repr(float): the shortest digits that read back the same,
 * fixed notation for exponents -4..15 (with ".0" when integral), else
 * d.ddde+XX. */
void fl_py_float_repr(double v, char *buf, size_t n) {
    if (isnan(v)) { snprintf(buf, n, "nan"); return; }
    if (isinf(v)) { snprintf(buf, n, v > 0 ? "inf" : "-inf"); return; }
    char tmp[40];
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, v);
        if (strtod(tmp, NULL) == v) break;
    }
    snprintf(tmp, sizeof tmp, "%.*e", prec - 1, v);
    char digits[24];
    int nd = 0;
    const char *p = tmp;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--; /* %.*e may pad */
    digits[nd] = 0;
    char out[64];
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp >= 0) {
            for (int i = 0; i <= exp; i++) out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > exp + 1) for (int i = exp + 1; i < nd; i++) out[o++] = digits[i];
            else out[o++] = '0';
        } else {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -exp - 1; i++) out[o++] = '0';
            for (int i = 0; i < nd; i++) out[o++] = digits[i];
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++) out[o++] = digits[i];
        }
        out[o] = 0;
        snprintf(out + o, sizeof out - o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    snprintf(buf, n, "%s", out);
}

typedef struct csv_logger {
    char *filename;
    char sep;
    bool append, append_header, wrote_header;
    FILE *f;
    int nkeys;
    char keys[2 * FL_LOGS_MAX_KEYS][48];
} csv_logger;

/* csv.excel's QUOTE_MINIMAL: quoted when it holds the separator, a quote or a line break */
static void csv_field(FILE *f, const char *s, char sep) {
    if (!strchr(s, sep) && !strchr(s, '"') && !strchr(s, '\n') && !strchr(s, '\r')) { fputs(s, f); return; }
    fputc('"', f);
    for (const char *p = s; *p; p++) {
        if (*p == '"') fputc('"', f);
        fputc(*p, f);
    }
    fputc('"', f);
}

static fl_status csv_io_error(csv_logger *c, const char *what) {
    return fl_error(FL_ERR_IO, "CSVLogger: %s %s: %s", what, c->filename, strerror(errno));
}

static fl_status csv_train_begin(fl_model *m, fl_logs *logs, void *user) {
    (void)m; (void)logs;
    csv_logger *c = user;
    c->append_header = true;
    if (c->append) {
        FILE *r = fopen(c->filename, "rb");
        if (r) {
            int ch = fgetc(r);
            c->append_header = ch == EOF; /* Keras: not bool(len(f.readline())) */
            fclose(r);
        }
    }
    if (c->f) fclose(c->f);
    c->f = fopen(c->filename, c->append ? "ab" : "wb");
    if (!c->f) return csv_io_error(c, "cannot open");
    c->nkeys = -1;
    return FL_OK;
}

static int cmp_key(const void *a, const void *b) { return strcmp(a, b); }

static fl_status csv_epoch_end(fl_model *m, int epoch, fl_logs *logs, void *user) {
    (void)m;
    csv_logger *c = user;
    if (!c->f) return fl_error(FL_ERR_STATE, "CSVLogger %s: epoch end before train begin", c->filename);
    if (c->nkeys < 0) {
        c->nkeys = logs->n;
        for (int i = 0; i < logs->n; i++) snprintf(c->keys[i], sizeof c->keys[i], "%s", logs->keys[i]);
        qsort(c->keys, (size_t)c->nkeys, sizeof c->keys[0], cmp_key);
        bool val = false;
        for (int i = 0; i < c->nkeys; i++) val = val || strncmp(c->keys[i], "val_", 4) == 0;
        if (!val && c->nkeys > 0) {
            int n = c->nkeys;
            for (int i = 0; i < n; i++) snprintf(c->keys[c->nkeys++], sizeof c->keys[0], "val_%.43s", c->keys[i]);
        }
        if (c->append_header) {
            csv_field(c->f, "epoch", c->sep);
            for (int i = 0; i < c->nkeys; i++) {
                fputc(c->sep, c->f);
                csv_field(c->f, c->keys[i], c->sep);
            }
            fputs("\r\n", c->f);
        }
    }
    fprintf(c->f, "%d", epoch);
    for (int i = 0; i < c->nkeys; i++) {
        char v[64];
        if (fl_logs_has(logs, c->keys[i])) fl_py_float_repr(fl_logs_get(logs, c->keys[i]), v, sizeof v);
        else snprintf(v, sizeof v, "NA");
        fputc(c->sep, c->f);
        csv_field(c->f, v, c->sep);
    }
    fputs("\r\n", c->f);
    if (fflush(c->f) != 0 || ferror(c->f)) return csv_io_error(c, "cannot write");
    return FL_OK;
}

static fl_status csv_train_end(fl_model *m, fl_logs *logs, void *user) {
    (void)m; (void)logs;
    csv_logger *c = user;
    if (c->f) {
        int r = fclose(c->f);
        c->f = NULL;
        if (r != 0) return csv_io_error(c, "cannot close");
    }
    return FL_OK;
}

static void csv_destroy(void *user) {
    csv_logger *c = user;
    if (c->f) fclose(c->f);
    free(c->filename);
    free(c);
}

fl_callback *fl_csv_logger_(const char *filename, fl_csv_logger_args a) {
    if (!filename || !*filename) return fl_error_null(FL_ERR_INVALID_ARG, "fl_csv_logger: filename is NULL or empty");
    char sep = a.separator ? a.separator : ',';
    if (sep == '"' || sep == '\n' || sep == '\r')
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_csv_logger: separator 0x%02x cannot separate CSV fields", sep);
    csv_logger *c = fl_calloc(1, sizeof *c, "CSVLogger");
    if (!c) return NULL;
    size_t n = strlen(filename) + 1;
    if (!(c->filename = fl_malloc(n, "CSVLogger file name"))) { free(c); return NULL; }
    memcpy(c->filename, filename, n);
    c->sep = sep;
    c->append = a.append;
    c->nkeys = -1;
    fl_callback *cb = fl_calloc(1, sizeof *cb, "callback");
    if (!cb) { csv_destroy(c); return NULL; }
    cb->user = c;
    cb->on_train_begin = csv_train_begin;
    cb->on_epoch_end = csv_epoch_end;
    cb->on_train_end = csv_train_end;
    cb->destroy = csv_destroy;
    return cb;
}

/* ------------------------------------------------------- TerminateOnNaN */

static fl_status tn_batch_end(fl_model *m, int64_t batch, fl_logs *logs, void *user) {
    double loss = fl_logs_get(logs, "loss");
    if (fl_logs_has(logs, "loss") && !isfinite(loss)) {
        fprintf(user, "Batch %lld: Invalid loss, terminating training\n", (long long)batch);
        fflush(user);
        fl_model_stop_training(m);
    }
    return FL_OK;
}

static void tn_destroy(void *user) { (void)user; }

fl_callback *fl_terminate_on_nan(void *out) {
    fl_callback *cb = fl_calloc(1, sizeof *cb, "TerminateOnNaN");
    if (!cb) return NULL;
    cb->user = out ? out : stdout;
    cb->on_batch_end = tn_batch_end;
    cb->destroy = tn_destroy;
    return cb;
}
