/*
 * train_callbacks.h — `flynn train`'s callback, clipping and schedule flags
 * (--early-stopping, --reduce-lr-on-plateau, --csv-log, --clipnorm,
 * --clipvalue, --global-clipnorm, --lr-schedule, --tensorboard, --plot...): parsing, help text, and
 * turning them into fl_callback lists and optimizer settings.
 */
#ifndef FLYNN_CLI_TRAIN_CALLBACKS_H
#define FLYNN_CLI_TRAIN_CALLBACKS_H

#include <flynn/flynn.h>

typedef struct flynn_cb_opts {
    int early_stopping;       /* patience + 1 (0: off) */
    bool reduce_lr;
    const char *csv_log, *lr_schedule;
    float clipnorm, clipvalue, global_clipnorm;
    const char *tensorboard;  /* log folder (NULL: off) */
    const char *plot;         /* --plot OUT.svg: the History's curves (plot.c) */
    int tb_histogram_freq, tb_update_freq;
} flynn_cb_opts;

#define FLYNN_CB_MAX 6
typedef struct flynn_cbs {
    fl_callback *list[FLYNN_CB_MAX + 1]; /* NULL-terminated */
    fl_callback *early;
} flynn_cbs;

/* argv[*i] is one of these flags: 1 (consumed, *i moved past its value),
 * 2 (bad value: the message printed), 0 (not one of them). */
int flynn_cb_parse(int argc, char **argv, int *i, flynn_cb_opts *o);
/* The options' lines for `flynn train --help`. */
const char *flynn_cb_help(void);
/* Applies clipping and the schedule to the compiled model and makes the
 * callbacks; FL_OK or the error (its message set). */
fl_status flynn_cb_setup(fl_model *m, const flynn_cb_opts *o, bool has_val, bool verbose, flynn_cbs *out);
void flynn_cb_report(const flynn_cbs *c, const flynn_cb_opts *o, bool verbose);
void flynn_cb_free(flynn_cbs *c);
/* Parses a --lr-schedule SPEC for an optimizer whose learning rate is lr. */
fl_status flynn_parse_lr_schedule(const char *spec, double lr, fl_lr_schedule *out);

#endif
