/*
 * history.c — what fit reports (fit.h): History, one value per epoch for every key of the logs, and the
 * Keras progress bar (verbose 1: the bar of steps, rewritten in place; 2: one line an epoch).
 */
#include "nn/fit.h"
#include "nn/step.h"
#include "core/error.h"
#include "core/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/clock.h"



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
fl_status fl_history_push_logs(fl_history *h, const fl_logs *logs) {
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


int fl_resolve_verbose(fl_verbose v, FILE *f) {
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
bool fl_progbar_due(const fl_progbar *p, bool final) {
    if (p->mode == FL_VERBOSE_SILENT) return false;
    if (final) return true;
    return p->mode == FL_VERBOSE_BAR && fl_clock_seconds() - p->last >= 0.05;
}

/* keys/vals: the "- key: value" pairs, already in Keras order */
void fl_progbar_update(fl_progbar *p, int64_t cur, int nkv, char keys[][48], const double *vals, bool final) {
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
void fl_sort_kv(int n, char keys[][48], double *vals) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(keys[j - 1], keys[j]) > 0; j--) {
            char t[48];
            memcpy(t, keys[j], 48); memcpy(keys[j], keys[j - 1], 48); memcpy(keys[j - 1], t, 48);
            double v = vals[j]; vals[j] = vals[j - 1]; vals[j - 1] = v;
        }
}

/* The loss and metric keys with their current values, sorted as Keras shows them. */
int fl_stat_kv(const fl_model *m, const double *v, const char *prefix, char keys[][48], double *vals) {
    snprintf(keys[0], 48, "%sloss", prefix);
    vals[0] = v[0];
    for (int i = 0; i < m->nmetrics; i++) {
        snprintf(keys[1 + i], 48, "%s%s", prefix, fl_metric_key(m->metrics[i]));
        vals[1 + i] = v[1 + i];
    }
    return 1 + m->nmetrics;
}
