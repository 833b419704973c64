/*
 * train_callbacks.c — `flynn train`'s flags for Keras callbacks, gradient
 * clipping and learning-rate schedules (train_callbacks.h), kept out of
 * flynn.c's option parser so that each flag is one row here.
 */
#include "train_callbacks.h"
#include "core/error.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *flynn_cb_help(void) {
    return "  --early-stopping P     stop when val_loss (loss without --validation-split) has not\n"
           "                         improved for P epochs, then restore the best epoch's weights\n"
           "                         (Keras EarlyStopping(patience=P, restore_best_weights=True))\n"
           "  --reduce-lr-on-plateau divide the learning rate by 10 after 10 epochs without\n"
           "                         improvement (Keras ReduceLROnPlateau defaults)\n"
           "  --csv-log FILE         one line per epoch, as Keras CSVLogger (epoch, loss, metrics,\n"
           "                         val_..., learning_rate with --reduce-lr-on-plateau)\n"
           "  --plot OUT.svg         draw the loss and metric curves per epoch (train solid, val_*\n"
           "                         dashed) as an SVG when training ends, early stop included\n"
           "                         (as `flynn plot` draws a --csv-log file)\n"
           "  --tensorboard DIR      TensorBoard logs, as Keras TensorBoard(log_dir=DIR): DIR/train and\n"
           "                         DIR/validation get epoch_loss, epoch_<metric>, epoch_learning_rate,\n"
           "                         evaluation_<...>_vs_iterations and the model (graph tab); view them\n"
           "                         with `tensorboard --logdir DIR` (pip install tensorboard)\n"
           "  --tensorboard-histograms N  also a histogram of every weight every N epochs\n"
           "                         (Keras histogram_freq=N)\n"
           "  --tensorboard-update-freq N  also batch_loss, batch_<metric> every N steps (Keras\n"
           "                         update_freq=N; \"batch\" = 1, \"epoch\" = none, the default)\n"
           "  --clipnorm X           clip each weight's gradient to L2 norm X (Keras clipnorm);\n"
           "                         --clipvalue X clips each element to [-X, X], --global-clipnorm X\n"
           "                         all gradients together to norm X (one of the three)\n"
           "  --lr-schedule SPEC     a Keras learning-rate schedule per optimizer step (batch),\n"
           "                         starting from the optimizer's learning rate LR:\n"
           "                           exp:RATE:STEPS[:staircase]  LR * RATE^(step/STEPS)\n"
           "                           inverse:RATE:STEPS[:staircase]  LR / (1 + RATE*step/STEPS)\n"
           "                           cosine:STEPS[:warmup=N][:alpha=A]  cosine from LR to A*LR over\n"
           "                             STEPS, after N steps of linear warmup from 0 to LR\n"
           "                           piecewise:B1,B2,...:V0,V1,V2,...  V0 until step B1, V1 until B2, ...\n"
           "                         (ExponentialDecay, InverseTimeDecay, CosineDecay,\n"
           "                         PiecewiseConstantDecay; saved with the model)\n";
}

static bool num(const char *s, double *out) {
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return s && *s && !errno && end != s && *end == 0 && isfinite(*out);
}

static int bad(const char *flag, const char *val, const char *want) {
    fprintf(stderr, "flynn train: %s wants %s, got %s\n(see `flynn train --help`)\n", flag, want, val ? val : "nothing");
    return 2;
}

int flynn_cb_parse(int argc, char **argv, int *i, flynn_cb_opts *o) {
    const char *a = argv[*i];
    if (strcmp(a, "--reduce-lr-on-plateau") == 0) { o->reduce_lr = true; return 1; }
    static const char *const flags[] = {"--early-stopping", "--csv-log", "--clipnorm", "--clipvalue",
                                        "--global-clipnorm", "--lr-schedule", "--tensorboard",
                                        "--tensorboard-histograms", "--tensorboard-update-freq", "--plot"};
    size_t k = 0, n = sizeof flags / sizeof flags[0], fl = 0;
    for (; k < n; k++) {
        fl = strlen(flags[k]);
        if (strncmp(a, flags[k], fl) == 0 && (a[fl] == 0 || a[fl] == '=')) break;
    }
    if (k == n) return 0;
    const char *val = a[fl] == '=' ? a + fl + 1 : *i + 1 < argc ? argv[++*i] : NULL;
    if (!val) return bad(flags[k], NULL, "a value");
    double v = 0;
    switch (k) {
    case 0:
        if (!num(val, &v) || v < 0 || v > 1e6 || v != floor(v)) return bad(flags[k], val, "a patience in epochs (>= 0)");
        o->early_stopping = (int)v + 1;
        break;
    case 1: o->csv_log = val; break;
    case 5: o->lr_schedule = val; break;
    case 9:
        if (!*val) return bad(flags[k], val, "an SVG file name");
        o->plot = val;
        break;
    case 6:
        if (!*val) return bad(flags[k], val, "a folder");
        o->tensorboard = val;
        break;
    case 7:
        if (!num(val, &v) || v < 0 || v > 1e6 || v != floor(v)) return bad(flags[k], val, "a number of epochs (>= 0)");
        o->tb_histogram_freq = (int)v;
        break;
    case 8:
        if (strcmp(val, "epoch") == 0) v = 0;
        else if (strcmp(val, "batch") == 0) v = 1;
        else if (!num(val, &v) || v < 1 || v > 1e9 || v != floor(v))
            return bad(flags[k], val, "a number of steps (>= 1), batch or epoch");
        o->tb_update_freq = (int)v;
        break;
    default:
        if (!num(val, &v) || !(v > 0)) return bad(flags[k], val, "a number > 0");
        if (k == 2) o->clipnorm = (float)v;
        else if (k == 3) o->clipvalue = (float)v;
        else o->global_clipnorm = (float)v;
    }
    return 1;
}

/* splits spec at ':' into at most 8 parts (in buf) */
static int split(const char *spec, char *buf, size_t n, char **parts, char sep) {
    snprintf(buf, n, "%s", spec);
    int k = 0;
    for (char *p = buf; k < 8;) {
        parts[k++] = p;
        char *c = strchr(p, sep);
        if (!c) break;
        *c = 0;
        p = c + 1;
    }
    return k;
}

static fl_status spec_error(const char *spec, const char *why) {
    return fl_error(FL_ERR_INVALID_ARG, "--lr-schedule %s: %s (see `flynn train --help`)", spec, why);
}

fl_status flynn_parse_lr_schedule(const char *spec, double lr, fl_lr_schedule *out) {
    char buf[512], *p[8];
    memset(out, 0, sizeof *out);
    int n = split(spec, buf, sizeof buf, p, ':');
    double a = 0, b = 0;
    if (strcmp(p[0], "exp") == 0 || strcmp(p[0], "inverse") == 0) {
        bool inv = p[0][0] == 'i';
        if (n < 3 || n > 4 || !num(p[1], &a) || !num(p[2], &b) || (n == 4 && strcmp(p[3], "staircase") != 0))
            return spec_error(spec, inv ? "expected inverse:RATE:STEPS[:staircase]" : "expected exp:RATE:STEPS[:staircase]");
        *out = inv ? fl_inverse_time_decay(lr, b, a, .staircase = n == 4) : fl_exponential_decay(lr, b, a, .staircase = n == 4);
    } else if (strcmp(p[0], "cosine") == 0) {
        if (n < 2 || !num(p[1], &a)) return spec_error(spec, "expected cosine:STEPS[:warmup=N][:alpha=A]");
        *out = fl_cosine_decay(lr, a);
        for (int i = 2; i < n; i++) {
            if (strncmp(p[i], "warmup=", 7) == 0 && num(p[i] + 7, &b)) {
                out->warmup_steps = b;
                out->warmup_target = lr;
                out->initial_learning_rate = 0.0;
            } else if (strncmp(p[i], "alpha=", 6) == 0 && num(p[i] + 6, &b)) {
                out->alpha = b;
            } else {
                return spec_error(spec, "expected cosine:STEPS[:warmup=N][:alpha=A]");
            }
        }
    } else if (strcmp(p[0], "piecewise") == 0) {
        char bb[256], vb[256], *bs[8], *vs[8];
        if (n != 3) return spec_error(spec, "expected piecewise:B1,B2,...:V0,V1,V2,...");
        int nb = split(p[1], bb, sizeof bb, bs, ','), nv = split(p[2], vb, sizeof vb, vs, ',');
        double bd[8], vd[9];
        if (nv != nb + 1) return spec_error(spec, "expected one value more than boundaries");
        for (int i = 0; i < nb; i++) if (!num(bs[i], &bd[i])) return spec_error(spec, "a boundary is not a number");
        for (int i = 0; i < nv; i++) if (!num(vs[i], &vd[i])) return spec_error(spec, "a value is not a number");
        *out = fl_piecewise_constant_decay(nb, bd, vd);
    } else {
        return spec_error(spec, "expected exp:, inverse:, cosine: or piecewise:");
    }
    if (fl_lr_schedule_check(out) != FL_OK) {
        char why[256]; /* the message is rewritten below: a copy, not the buffer itself */
        snprintf(why, sizeof why, "%s", fl_last_error());
        return spec_error(spec, why);
    }
    return FL_OK;
}

fl_status flynn_cb_setup(fl_model *m, const flynn_cb_opts *o, bool has_val, bool verbose, flynn_cbs *out) {
    memset(out, 0, sizeof *out);
    if ((o->clipnorm > 0) + (o->clipvalue > 0) + (o->global_clipnorm > 0) > 1)
        return fl_error(FL_ERR_INVALID_ARG, "give one of --clipnorm, --clipvalue and --global-clipnorm (as Keras)");
    if ((o->clipnorm > 0 || o->clipvalue > 0 || o->global_clipnorm > 0) &&
        fl_model_set_optimizer_clipping(m, o->clipnorm, o->clipvalue, o->global_clipnorm) != FL_OK)
        return fl_last_status();
    if (o->lr_schedule) {
        fl_lr_schedule s;
        if (flynn_parse_lr_schedule(o->lr_schedule, fl_optimizer_current_learning_rate(fl_model_optimizer(m)), &s) != FL_OK ||
            fl_model_set_learning_rate_schedule(m, &s) != FL_OK)
            return fl_last_status();
    }
    const fl_optimizer *opt = fl_model_optimizer(m);
    const fl_lr_schedule *sched = fl_optimizer_schedule(opt);
    float cl[3];
    fl_optimizer_clipping(opt, &cl[0], &cl[1], &cl[2]);
    if (verbose && (sched || cl[0] > 0 || cl[1] > 0 || cl[2] > 0)) { /* also what a model file brought */
        static const char *const cn[3] = {"clipnorm", "clipvalue", "global_clipnorm"};
        printf("optimizer: %s, learning rate %s", fl_optimizer_name(opt), sched ? fl_lr_schedule_name(sched->kind) : "");
        if (sched) printf(" (%g at step %lld)", (double)fl_optimizer_current_learning_rate(opt),
                          (long long)fl_optimizer_iterations(opt));
        else printf("%g", (double)fl_optimizer_current_learning_rate(opt));
        for (int i = 0; i < 3; i++)
            if (cl[i] > 0) printf(", %s %g", cn[i], (double)cl[i]);
        printf("\n");
    }
    const char *mon = has_val ? "val_loss" : "loss";
    int n = 0;
    if (o->reduce_lr) {
        if (fl_optimizer_schedule(fl_model_optimizer(m)))
            return fl_error(FL_ERR_INVALID_ARG, "--reduce-lr-on-plateau cannot change a learning-rate schedule's rate "
                                "(as Keras); drop one of --reduce-lr-on-plateau and --lr-schedule (or the model file's schedule)");
        if (!(out->list[n++] = fl_reduce_lr_on_plateau(.monitor = mon, .verbose = verbose))) return fl_last_status();
    }
    if (o->early_stopping) {
        out->early = fl_early_stopping(.monitor = mon, .patience = o->early_stopping - 1, .restore_best_weights = true,
                                       .verbose = verbose);
        if (!(out->list[n++] = out->early)) return fl_last_status();
    }
    if (o->csv_log && !(out->list[n++] = fl_csv_logger(o->csv_log))) return fl_last_status();
    if ((o->tb_histogram_freq || o->tb_update_freq) && !o->tensorboard)
        return fl_error(FL_ERR_INVALID_ARG, "--tensorboard-histograms and --tensorboard-update-freq need --tensorboard DIR");
    if (o->tensorboard && !(out->list[n++] = fl_tensorboard(o->tensorboard, .histogram_freq = o->tb_histogram_freq,
                                                             .update_freq = o->tb_update_freq)))
        return fl_last_status();
    out->list[n] = NULL;
    return FL_OK;
}

void flynn_cb_report(const flynn_cbs *c, const flynn_cb_opts *o, bool verbose) {
    if (!verbose) return;
    if (o->csv_log) printf("epoch log written to %s\n", o->csv_log);
    if (o->tensorboard) printf("TensorBoard logs written to %s (view them: tensorboard --logdir %s)\n", o->tensorboard, o->tensorboard);
}

void flynn_cb_free(flynn_cbs *c) {
    for (int i = 0; i < FLYNN_CB_MAX && c->list[i]; i++) fl_callback_free(c->list[i]);
    memset(c, 0, sizeof *c);
}
