/*
 * checkpoint.c — fl_model_checkpoint, keras.callbacks.ModelCheckpoint as an
 * fl_fit on_epoch_end callback: after each epoch it formats the file name
 * (Keras's "{epoch:02d}" / "{val_loss:.4f}" placeholders), decides whether
 * to save (save_best_only with mode min/max/auto as Keras 3.15 decides it),
 * and saves the model (fl_save_model) or its weights (fl_save_weights), each
 * save atomic. A failed save stops training and keeps its message. Also a
 * callback of fl_fit's list (fl_model_checkpoint_callback).
 */
#include "nn.h"
#include "core/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fl_checkpoint {
    char *filepath;
    char monitor[64];
    bool save_best_only, weights_only, verbose, maximize;
    FILE *out;
    double best;     /* NAN: none yet */
    int saves;
    fl_status status;
    char error[1024];
    char last[4096];
};

/* Keras's "auto": losses go down, accuracies go up; anything else is ambiguous. */
int fl_monitor_direction(const char *monitor) {
    const char *m = strncmp(monitor, "val_", 4) == 0 ? monitor + 4 : monitor;
    if (strcmp(m, "loss") == 0) return -1;
    if (strstr(m, "accuracy") || strcmp(m, "acc") == 0) return 1;
    /* Keras's error metrics have _direction "down" */
    if (!strcmp(m, "mae") || !strcmp(m, "mse") || !strcmp(m, "mean_absolute_error") || !strcmp(m, "mean_squared_error"))
        return -1;
    return 0;
}

/* Checks a "{key}" / "{key:spec}" template: spec is [0][width][.prec](d|f|e|g). */
static bool parse_spec(const char *spec, size_t n, char *fmt, size_t fmtn, char *type) {
    size_t i = 0;
    char buf[32];
    if (n >= sizeof buf - 2) return false;
    if (i < n && spec[i] == '0') i++;
    while (i < n && spec[i] >= '0' && spec[i] <= '9') i++;
    if (i < n && spec[i] == '.') {
        i++;
        if (i >= n || spec[i] < '0' || spec[i] > '9') return false;
        while (i < n && spec[i] >= '0' && spec[i] <= '9') i++;
    }
    if (i + 1 != n || !strchr("dfeg", spec[i])) return false;
    *type = spec[i];
    memcpy(buf, spec, n - 1);
    buf[n - 1] = 0;
    snprintf(fmt, fmtn, "%%%s%s", buf, *type == 'd' ? "lld" : (char[]){*type, 0});
    return true;
}

/* Formats the file name; false (message in err) on an unknown key or spec. */
static bool format_path(const char *tpl, int epoch, const fl_logs *h, char *out, size_t n, char *err, size_t errn) {
    size_t o = 0;
    for (const char *p = tpl; *p; p++) {
        if (*p == '{' && p[1] == '{') { if (o + 1 < n) out[o++] = '{'; p++; continue; }
        if (*p == '}' && p[1] == '}') { if (o + 1 < n) out[o++] = '}'; p++; continue; }
        if (*p != '{') { if (o + 1 < n) out[o++] = *p; continue; }
        const char *end = strchr(p, '}');
        if (!end) { snprintf(err, errn, "unclosed '{' in \"%s\"", tpl); return false; }
        char key[64];
        const char *colon = memchr(p + 1, ':', (size_t)(end - p - 1));
        size_t kl = (size_t)((colon ? colon : end) - (p + 1));
        if (kl == 0 || kl >= sizeof key) { snprintf(err, errn, "bad placeholder in \"%s\"", tpl); return false; }
        memcpy(key, p + 1, kl);
        key[kl] = 0;
        char fmt[40] = "", type = 0, piece[128];
        if (colon && !parse_spec(colon + 1, (size_t)(end - colon - 1), fmt, sizeof fmt, &type)) {
            snprintf(err, errn, "placeholder {%s...} in \"%s\": flynn takes the formats d, f, e and g", key, tpl);
            return false;
        }
        if (strcmp(key, "epoch") == 0) {
            if (type && type != 'd') { snprintf(err, errn, "{epoch} takes the d format"); return false; }
            snprintf(piece, sizeof piece, type ? fmt : "%lld", (long long)(epoch + 1));
        } else {
            if (!fl_logs_has(h, key)) { snprintf(err, errn, "placeholder {%s} in \"%s\": no such History key this epoch", key, tpl); return false; }
            double x = fl_logs_get(h, key);
            if (type == 'd') snprintf(piece, sizeof piece, fmt, (long long)x);
            else if (type) snprintf(piece, sizeof piece, fmt, x);
            else snprintf(piece, sizeof piece, "%.17g", x);
        }
        for (const char *q = piece; *q; q++)
            if (o + 1 < n) out[o++] = *q;
        p = end;
    }
    out[o] = 0;
    if (o + 1 >= n) { snprintf(err, errn, "the file name is too long"); return false; }
    return true;
}

fl_checkpoint *fl_model_checkpoint_(const char *filepath, fl_checkpoint_args a) {
    if (!filepath || !*filepath) return fl_error_null(FL_ERR_INVALID_ARG, "fl_model_checkpoint: filepath is NULL or empty");
    const char *monitor = a.monitor && *a.monitor ? a.monitor : "val_loss";
    if (strlen(monitor) >= 64) return fl_error_null(FL_ERR_INVALID_ARG, "fl_model_checkpoint: monitor name too long");
    if ((unsigned)a.mode > FL_CHECKPOINT_MAX)
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_model_checkpoint: mode %d is not an fl_checkpoint_mode", (int)a.mode);
    size_t len = strlen(filepath);
    bool wh5 = len >= 11 && strcmp(filepath + len - 11, ".weights.h5") == 0;
    bool model_name = !wh5 && ((len >= 6 && strcmp(filepath + len - 6, ".keras") == 0) ||
                               (len >= 3 && strcmp(filepath + len - 3, ".h5") == 0));
    if (a.save_weights_only && !wh5)
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_model_checkpoint: with save_weights_only the file name must end in "
                             ".weights.h5 (got %s)", filepath);
    if (!a.save_weights_only && !model_name)
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_model_checkpoint: the file name must end in .keras or .h5 (got %s; "
                             "use .save_weights_only = true for .weights.h5)", filepath);
    int dir = a.mode == FL_CHECKPOINT_MIN ? -1 : a.mode == FL_CHECKPOINT_MAX ? 1 : fl_monitor_direction(monitor);
    if (dir == 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_model_checkpoint: cannot tell whether '%s' should be minimized or "
                             "maximized; pass .mode = FL_CHECKPOINT_MIN or FL_CHECKPOINT_MAX", monitor);
    fl_checkpoint *c = fl_calloc(1, sizeof *c, "checkpoint");
    if (!c) return NULL;
    c->filepath = fl_malloc(len + 1, "checkpoint path");
    if (!c->filepath) { free(c); return NULL; }
    memcpy(c->filepath, filepath, len + 1);
    snprintf(c->monitor, sizeof c->monitor, "%s", monitor);
    c->save_best_only = a.save_best_only;
    c->weights_only = a.save_weights_only;
    c->verbose = a.verbose;
    c->out = a.out ? a.out : stdout;
    c->maximize = dir > 0;
    c->best = NAN;
    return c;
}

/* One epoch's end with its logs: false when a save failed (c->status). */
static bool checkpoint_epoch(fl_model *m, int epoch, const fl_logs *h, fl_checkpoint *c) {
    if (!c || c->status != FL_OK) return c != NULL && c->status == FL_OK;
    char path[4096], err[512];
    if (!format_path(c->filepath, epoch, h, path, sizeof path, err, sizeof err)) {
        c->status = FL_ERR_INVALID_ARG;
        snprintf(c->error, sizeof c->error, "fl_model_checkpoint: %s", err);
        fl_error(c->status, "%s", c->error);
        return false;
    }
    bool save = true;
    if (c->save_best_only) {
        if (!fl_logs_has(h, c->monitor)) {
            if (c->verbose) fprintf(c->out, "Epoch %d: can save the best model only with %s available; saving\n", epoch + 1, c->monitor);
        } else {
            double cur = fl_logs_get(h, c->monitor);
            char best[32];
            if (isnan(c->best)) snprintf(best, sizeof best, "None");
            else snprintf(best, sizeof best, "%.5f", c->best);
            bool better = isnan(c->best) || (c->maximize ? cur > c->best : cur < c->best);
            if (better) {
                if (c->verbose)
                    fprintf(c->out, "Epoch %d: %s improved from %s to %.5f, saving model to %s\n", epoch + 1, c->monitor,
                            best, cur, path);
                c->best = cur;
            } else {
                if (c->verbose) fprintf(c->out, "Epoch %d: %s did not improve from %s\n", epoch + 1, c->monitor, best);
                save = false;
            }
        }
    } else if (c->verbose) {
        fprintf(c->out, "Epoch %d: saving model to %s\n", epoch + 1, path);
    }
    if (c->verbose) fflush(c->out);
    if (!save) return true;
    fl_status s = c->weights_only ? fl_save_weights(m, path) : fl_save_model(m, path);
    if (s != FL_OK) {
        c->status = s;
        snprintf(c->error, sizeof c->error, "checkpoint after epoch %d: %s", epoch + 1, fl_last_error());
        return false;
    }
    c->saves++;
    snprintf(c->last, sizeof c->last, "%s", path);
    return true;
}

/* The History's last epoch as logs. */
bool fl_checkpoint_on_epoch_end(fl_model *m, int epoch, const fl_history *h, void *user) {
    fl_logs logs = {0};
    for (int k = 0; k < fl_history_num_keys(h) && fl_history_epochs(h) > 0; k++)
        fl_logs_set(&logs, fl_history_key(h, k), fl_history_get(h, fl_history_key(h, k))[fl_history_epochs(h) - 1]);
    return checkpoint_epoch(m, epoch, &logs, user);
}

/* ------------------------------------------- as a callback of the list */

static fl_status ck_epoch_end(fl_model *m, int epoch, fl_logs *logs, void *user) {
    fl_checkpoint *c = user;
    if (checkpoint_epoch(m, epoch, logs, c)) return FL_OK;
    return fl_error(c->status, "%s", c->error);
}
static void ck_destroy(void *user) { fl_checkpoint_free(user); }

fl_callback *fl_model_checkpoint_callback_(const char *filepath, fl_checkpoint_args a) {
    fl_checkpoint *c = fl_model_checkpoint_(filepath, a);
    if (!c) return NULL;
    fl_callback *cb = fl_calloc(1, sizeof *cb, "ModelCheckpoint callback");
    if (!cb) { fl_checkpoint_free(c); return NULL; }
    cb->user = c;
    cb->on_epoch_end = ck_epoch_end;
    cb->destroy = ck_destroy;
    return cb;
}

fl_checkpoint *fl_checkpoint_callback_get(fl_callback *cb) {
    return cb && cb->on_epoch_end == ck_epoch_end ? cb->user : NULL;
}

fl_status fl_checkpoint_status(const fl_checkpoint *c) { return c ? c->status : FL_ERR_INVALID_ARG; }
const char *fl_checkpoint_error(const fl_checkpoint *c) { return c ? c->error : ""; }
int fl_checkpoint_saves(const fl_checkpoint *c) { return c ? c->saves : 0; }
double fl_checkpoint_best(const fl_checkpoint *c) { return c ? c->best : NAN; }
const char *fl_checkpoint_last_path(const fl_checkpoint *c) { return c ? c->last : ""; }

void fl_checkpoint_free(fl_checkpoint *c) {
    if (!c) return;
    free(c->filepath);
    free(c);
}
