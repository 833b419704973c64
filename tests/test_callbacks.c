/*
 * test_callbacks.c — fl_fit's callback list and the Keras callbacks,
 * schedules and gradient clipping against Keras 3 (the numbers in
 * keras_callbacks_reference.h, printed by tools/keras_callbacks_reference.py):
 * EarlyStopping stops at Keras's epoch on a scripted val_loss and restores
 * the best weights, ReduceLROnPlateau's learning rates, CSVLogger's bytes,
 * the schedules' values per step, and three training steps of each
 * optimizer with clipnorm / clipvalue / global_clipnorm and schedules.
 */
#include "check.h"
#include "nn/nn.h"
#include "keras_callbacks_reference.h"

#include <flynn/flynn.h>
#include <stdlib.h>
#include <unistd.h>

static const double VAL[12] = {1.0, 0.9, 0.905, 0.85, 0.86, 0.87, 0.84, 0.845, 0.846, 0.9, 0.91, 0.92};
static const double LOSS[12] = {2.0, 1.5, 1.25, 1.125, 1.0, 0.9375, 0.875, 0.8125, 0.75, 0.6875, 0.625, 0.5625};

/* A user callback: overwrites the epoch's logs with the scripted values
 * (tools/keras_callbacks_reference.py's Scripted), first in the list. */
static fl_status scripted(fl_model *m, int epoch, fl_logs *logs, void *with_val) {
    (void)m;
    fl_logs_set(logs, "loss", LOSS[epoch]);
    if (with_val) fl_logs_set(logs, "val_loss", VAL[epoch]);
    return FL_OK;
}

/* the kernel of the Dense layer after every epoch (restore_best_weights) */
typedef struct snap { float k[12][2]; int n; } snap;
static fl_status snapshot(fl_model *m, int epoch, fl_logs *logs, void *user) {
    (void)logs;
    snap *s = user;
    fl_layer *l = fl_model_layer(m, fl_model_num_layers(m) - 1);
    const float *k = fl_tensor_data(fl_layer_weight(l, 0));
    s->k[epoch][0] = k[0];
    s->k[epoch][1] = k[1];
    s->n = epoch + 1;
    return FL_OK;
}

static fl_model *tiny(float lr) {
    fl_model *m = fl_sequential(fl_input(2), fl_dense(1));
    fl_compile(m, fl_sgd(.learning_rate = lr), FL_MEAN_SQUARED_ERROR);
    return m;
}

/* fits the tiny model for `epochs` with [scripted, cb, cb2] */
static fl_history *fit(fl_model *m, int epochs, bool with_val, fl_callback *cb, fl_callback *cb2) {
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, 8, 2), *y = fl_tensor_zeros(FL_FLOAT32, 8, 1);
    float *xp = fl_tensor_data(x), *yp = fl_tensor_data(y);
    for (int i = 0; i < 16; i++) xp[i] = 1.0f;
    for (int i = 0; i < 8; i++) yp[i] = 1.0f;
    fl_callback sc = {.user = with_val ? (void *)1 : NULL, .on_epoch_end = scripted};
    fl_history *h = fl_fit(m, x, y, .batch_size = 8, .epochs = epochs, .verbose = FL_VERBOSE_SILENT,
                           .callbacks = (fl_callback *[]){&sc, cb, cb2, NULL});
    fl_tensor_free(x);
    fl_tensor_free(y);
    return h;
}

static void test_schedules(void) {
    struct { const char *name; fl_lr_schedule s; const float *ref; } cases[] = {
        {"exp", fl_exponential_decay(0.1, 10, 0.5), ref_exp},
        {"exp_stair", fl_exponential_decay(0.1, 10, 0.5, .staircase = true), ref_exp_stair},
        {"inv", fl_inverse_time_decay(0.1, 5, 0.5), ref_inv},
        {"inv_stair", fl_inverse_time_decay(0.1, 5, 0.5, .staircase = true), ref_inv_stair},
        {"cos", fl_cosine_decay(0.01, 100, .alpha = 0.1), ref_cos},
        {"cos_warm", fl_cosine_decay(0.01, 100, .alpha = 0.1, .warmup_target = 0.1, .warmup_steps = 10), ref_cos_warm},
        {"pw", fl_piecewise_constant_decay(2, (double[]){5, 15}, (double[]){0.1, 0.05, 0.01}), ref_pw},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        CHECK_MSG(fl_lr_schedule_check(&cases[c].s) == FL_OK, "%s: %s", cases[c].name, fl_last_error());
        for (int i = 0; i < 18; i++) {
            float v = fl_lr_schedule_value(&cases[c].s, ref_steps[i]);
            CHECK_MSG(fabsf(v - cases[c].ref[i]) <= 2e-7f * fabsf(cases[c].ref[i]) + 1e-12f,
                      "%s at step %lld: %.9g, Keras %.9g", cases[c].name, (long long)ref_steps[i], v, cases[c].ref[i]);
        }
    }
    /* bad parameters are named */
    fl_lr_schedule bad = fl_exponential_decay(0.1, 0, 0.5);
    CHECK(fl_lr_schedule_check(&bad) == FL_ERR_INVALID_ARG);
    CHECK_STR_CONTAINS(fl_last_error(), "decay_steps");
    bad = fl_piecewise_constant_decay(2, (double[]){15, 5}, (double[]){0.1, 0.05, 0.01});
    CHECK(fl_lr_schedule_check(&bad) == FL_ERR_INVALID_ARG);
    CHECK_STR_CONTAINS(fl_last_error(), "increasing");
    CHECK(fl_adam(.learning_rate_schedule = &bad) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "Adam: learning_rate: PiecewiseConstantDecay");
}

static void test_early_stopping(void) {
    struct { const char *name; fl_early_stopping_args a; const int *ref; } cases[] = {
        {"patience2", {.patience = 2, .min_delta = 0.01}, ref_es_patience2},
        {"patience0", {.patience = 0}, ref_es_patience0},
        {"baseline", {.patience = 2, .baseline = 0.8, .has_baseline = true}, ref_es_baseline},
        {"start3", {.patience = 1, .start_from_epoch = 3}, ref_es_start3},
        {"restore", {.patience = 3, .restore_best_weights = true}, ref_es_restore},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fl_model *m = tiny(0.05f);
        fl_callback *es = fl_early_stopping_(cases[c].a);
        snap s = {0};
        fl_callback sn = {.user = &s, .on_epoch_end = snapshot};
        fl_history *h = fit(m, 12, true, es, &sn);
        CHECK_MSG(h != NULL, "%s", fl_last_error());
        CHECK_MSG(fl_early_stopping_stopped_epoch(es) == cases[c].ref[0], "%s: stopped at %d, Keras %d", cases[c].name,
                  fl_early_stopping_stopped_epoch(es), cases[c].ref[0]);
        CHECK_MSG(fl_history_epochs(h) == cases[c].ref[1], "%s: %d epochs, Keras %d", cases[c].name,
                  fl_history_epochs(h), cases[c].ref[1]);
        CHECK_MSG(fl_early_stopping_best_epoch(es) == cases[c].ref[2], "%s: best %d, Keras %d", cases[c].name,
                  fl_early_stopping_best_epoch(es), cases[c].ref[2]);
        /* History holds what the callbacks left in the logs */
        CHECK(h && fl_history_get(h, "val_loss") && fl_history_get(h, "val_loss")[1] == 0.9f);
        if (cases[c].a.restore_best_weights) {
            const float *k = fl_tensor_data(fl_layer_weight(fl_model_layer(m, fl_model_num_layers(m) - 1), 0));
            int b = cases[c].ref[2];
            CHECK(s.n == cases[c].ref[1]);
            CHECK_MSG(k[0] == s.k[b][0] && k[1] == s.k[b][1], "restored %g %g, best epoch's %g %g", k[0], k[1],
                      s.k[b][0], s.k[b][1]);
            CHECK(s.k[b][0] != s.k[s.n - 1][0]); /* training moved them since */
        }
        fl_history_free(h);
        fl_callback_free(es);
        fl_model_free(m);
    }
    /* auto mode cannot tell for an unknown key: Keras's ValueError */
    CHECK(fl_early_stopping(.monitor = "val_mystery") == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "val_mystery");
}

static void test_reduce_lr(void) {
    fl_model *m = tiny(0.001f);
    char msg[1024] = {0};
    FILE *out = fmemopen(msg, sizeof msg, "w");
    fl_callback *rl = fl_reduce_lr_on_plateau(.factor = 0.5, .patience = 2, .cooldown = 1, .min_lr = 0.0002,
                                               .min_delta = 0.01, .verbose = true, .out = out);
    fl_history *h = fit(m, 12, true, rl, NULL);
    const float *lr = h ? fl_history_get(h, "learning_rate") : NULL;
    CHECK_MSG(lr != NULL, "no learning_rate in History: %s", fl_last_error());
    for (int e = 0; lr && e < 12; e++)
        CHECK_MSG((double)lr[e] == ref_rlr_lr[e], "epoch %d: learning_rate %.17g, Keras %.17g", e, (double)lr[e],
                  ref_rlr_lr[e]);
    fclose(out);
    /* Keras's message, with the Python float it computed (before float32) */
    CHECK_STR_CONTAINS(msg, "\nEpoch 6: ReduceLROnPlateau reducing learning rate to 0.0005000000237487257.\n");
    fl_history_free(h);
    fl_callback_free(rl);
    fl_model_free(m);
    /* a schedule's learning rate is not settable, as Keras */
    fl_lr_schedule s = fl_exponential_decay(0.1, 10, 0.5);
    m = fl_sequential(fl_input(2), fl_dense(1));
    fl_compile(m, fl_sgd(.learning_rate_schedule = &s), FL_MEAN_SQUARED_ERROR);
    rl = fl_reduce_lr_on_plateau(.patience = -1);
    h = fit(m, 3, true, rl, NULL);
    CHECK(h == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "not settable");
    fl_history_free(h);
    fl_callback_free(rl);
    fl_model_free(m);
    CHECK(fl_reduce_lr_on_plateau(.factor = 1.5) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "factor >= 1.0");
}

static double halve_after_2(int epoch, double lr, void *user) {
    (void)user;
    return epoch < 2 ? lr : lr * 0.5;
}

static void test_scheduler(void) {
    fl_model *m = tiny(0.01f);
    fl_callback *ls = fl_learning_rate_scheduler(halve_after_2, NULL);
    fl_history *h = fit(m, 4, true, ls, NULL);
    const float *lr = h ? fl_history_get(h, "learning_rate") : NULL;
    CHECK(lr != NULL);
    if (lr) {
        CHECK(lr[0] == 0.01f && lr[1] == 0.01f);
        CHECK(lr[2] == (float)(0.01f * 0.5) && lr[3] == (float)((double)(float)(0.01f * 0.5) * 0.5));
    }
    fl_history_free(h);
    fl_callback_free(ls);
    fl_model_free(m);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = calloc(1, 1 << 16);
    size_t n = fread(b, 1, (1 << 16) - 1, f);
    b[n] = 0;
    fclose(f);
    return b;
}

static void test_csv_logger(void) {
    char dir[] = "/tmp/flynn_cb_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char p[256], p2[256];
    snprintf(p, sizeof p, "%s/log.csv", dir);
    snprintf(p2, sizeof p2, "%s/log2.csv", dir);
    fl_model *m = tiny(0.001f);
    fl_callback *rl = fl_reduce_lr_on_plateau(.factor = 0.5, .patience = 2), *csv = fl_csv_logger(p);
    fl_history *h = fit(m, 5, true, rl, csv);
    CHECK(h != NULL);
    fl_history_free(h);
    fl_callback_free(csv);
    char *b = slurp(p);
    CHECK_MSG(b && strcmp(b, ref_csv_val) == 0, "CSVLogger wrote\n%s\nKeras\n%s", b ? b : "(nothing)", ref_csv_val);
    free(b);
    /* no validation: val_ columns of NA; append writes the header once */
    csv = fl_csv_logger(p2, .separator = ';');
    h = fit(m, 2, false, csv, NULL);
    fl_history_free(h);
    fl_callback_free(csv);
    csv = fl_csv_logger(p2, .separator = ';', .append = true);
    h = fit(m, 3, false, csv, NULL);
    fl_history_free(h);
    fl_callback_free(csv);
    b = slurp(p2);
    CHECK_MSG(b && strcmp(b, ref_csv_append) == 0, "CSVLogger (append) wrote\n%s\nKeras\n%s", b ? b : "(nothing)",
              ref_csv_append);
    free(b);
    fl_callback_free(rl);
    fl_model_free(m);
    /* an unwritable file is an error naming it */
    char bad[300];
    snprintf(bad, sizeof bad, "%s/no/such/dir/log.csv", dir);
    m = tiny(0.001f);
    csv = fl_csv_logger(bad);
    h = fit(m, 1, true, csv, NULL);
    CHECK(h == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "no/such/dir/log.csv");
    fl_callback_free(csv);
    fl_model_free(m);
    unlink(p);
    unlink(p2);
    rmdir(dir);
    /* Python's float repr */
    struct { double v; const char *s; } r[] = {{1.0, "1.0"}, {0.1, "0.1"}, {1e-05, "1e-05"}, {0.0001, "0.0001"},
                                               {1e16, "1e+16"}, {123456.5, "123456.5"}, {-2.5e-7, "-2.5e-07"},
                                               {(double)0.001f, "0.0010000000474974513"}, {0.0, "0.0"},
                                               {1e15, "1000000000000000.0"}, {NAN, "nan"}, {-INFINITY, "-inf"}};
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
        char buf[64];
        fl_py_float_repr(r[i].v, buf, sizeof buf);
        CHECK_MSG(strcmp(buf, r[i].s) == 0, "repr(%.17g): %s, Python %s", r[i].v, buf, r[i].s);
    }
}

/* A user callback with every hook: the order of the calls and batch logs. */
typedef struct trace { char s[512]; double last_batch_loss; } trace;
#define TR(t, ...) snprintf((t)->s + strlen((t)->s), sizeof (t)->s - strlen((t)->s), __VA_ARGS__)
static fl_status t_tb(fl_model *m, fl_logs *l, void *u) { (void)m; (void)l; TR((trace *)u, "B"); return FL_OK; }
static fl_status t_te(fl_model *m, fl_logs *l, void *u) { (void)m; TR((trace *)u, "E%d", l->n > 0); return FL_OK; }
static fl_status t_eb(fl_model *m, int e, fl_logs *l, void *u) { (void)m; (void)l; TR((trace *)u, "[%d", e); return FL_OK; }
static fl_status t_ee(fl_model *m, int e, fl_logs *l, void *u) { (void)m; (void)l; TR((trace *)u, "%d]", e); return FL_OK; }
static fl_status t_be(fl_model *m, int64_t b, fl_logs *l, void *u) {
    trace *t = u;
    TR(t, "b%lld", (long long)b);
    t->last_batch_loss = fl_logs_get(l, "loss");
    if (b == 1 && fl_logs_has(l, "stop")) fl_model_stop_training(m);
    return FL_OK;
}
static fl_status add_stop(fl_model *m, int64_t b, fl_logs *l, void *u) { (void)m; (void)b; (void)u; return fl_logs_set(l, "stop", 1); }

static void test_user_callback(void) {
    fl_model *m = tiny(0.01f);
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, 8, 2), *y = fl_tensor_zeros(FL_FLOAT32, 8, 1);
    trace t = {{0}, 0};
    fl_callback cb = {.user = &t, .on_train_begin = t_tb, .on_train_end = t_te, .on_epoch_begin = t_eb,
                      .on_epoch_end = t_ee, .on_batch_end = t_be};
    fl_history *h = fl_fit(m, x, y, .batch_size = 4, .epochs = 2, .verbose = FL_VERBOSE_SILENT,
                           .callbacks = (fl_callback *[]){&cb, NULL});
    CHECK_MSG(strcmp(t.s, "B[0b0b10][1b0b11]E1") == 0, "calls: %s", t.s);
    CHECK(h && t.last_batch_loss == (double)fl_history_get(h, "loss")[1]);
    fl_history_free(h);
    /* stop_training from a batch: the epoch ends there (Keras) */
    t.s[0] = 0;
    fl_callback st = {.on_batch_end = add_stop};
    h = fl_fit(m, x, y, .batch_size = 2, .epochs = 3, .verbose = FL_VERBOSE_SILENT,
               .callbacks = (fl_callback *[]){&st, &cb, NULL});
    CHECK_MSG(strcmp(t.s, "B[0b0b10]E1") == 0, "calls: %s", t.s);
    CHECK(fl_history_epochs(h) == 1);
    fl_history_free(h);
    fl_tensor_free(x);
    fl_tensor_free(y);
    fl_model_free(m);
}

static fl_history *terminate_fit(fl_model *m, fl_callback *tn) {
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, 8, 2), *y = fl_tensor_zeros(FL_FLOAT32, 8, 1);
    float *xp = fl_tensor_data(x);
    xp[9] = NAN; /* sample 4: the third batch of 2 */
    fl_history *h = fl_fit(m, x, y, .batch_size = 2, .epochs = 3, .no_shuffle = true, .no_nan_check = true,
                           .verbose = FL_VERBOSE_SILENT, .callbacks = (fl_callback *[]){tn, NULL});
    fl_tensor_free(x);
    fl_tensor_free(y);
    return h;
}

static void test_terminate_on_nan(void) {
    fl_model *m = tiny(0.01f);
    char buf[256] = {0};
    FILE *out = fmemopen(buf, sizeof buf, "w");
    fl_callback *tn = fl_terminate_on_nan(out);
    fl_history *h = terminate_fit(m, tn);
    fclose(out);
    CHECK(h && fl_history_epochs(h) == 1);
    CHECK_STR_CONTAINS(buf, "Batch 2: Invalid loss, terminating training");
    fl_history_free(h);
    fl_callback_free(tn);
    fl_model_free(m);
}

/* Dense(3 -> 2), MSE, three steps on one batch, as the reference script */
static void opt_case(const char *name, fl_optimizer *o, const float *ref) {
    CHECK_MSG(o != NULL, "%s: %s", name, fl_last_error());
    if (!o) return;
    fl_model *m = fl_sequential(fl_input(3), fl_dense(2));
    fl_compile(m, o, FL_MEAN_SQUARED_ERROR);
    fl_layer *l = fl_model_layer(m, fl_model_num_layers(m) - 1);
    fl_tensor *k = fl_tensor_zeros(FL_FLOAT32, 3, 2), *b = fl_tensor_zeros(FL_FLOAT32, 2);
    for (int i = 0; i < 6; i++) ((float *)fl_tensor_data(k))[i] = (float)i * 0.1f - 0.2f;
    ((float *)fl_tensor_data(b))[0] = 0.05f;
    ((float *)fl_tensor_data(b))[1] = -0.05f;
    fl_layer_set_weight(l, 0, k);
    fl_layer_set_weight(l, 1, b);
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, 4, 3), *y = fl_tensor_zeros(FL_FLOAT32, 4, 2);
    for (int i = 0; i < 12; i++) ((float *)fl_tensor_data(x))[i] = -1.0f + 3.0f * (float)i / 11.0f;
    const float yy[8] = {1, 0, 0, 1, 2, -1, -1, 3};
    memcpy(fl_tensor_data(y), yy, sizeof yy);
    fl_history *h = fl_fit(m, x, y, .batch_size = 4, .epochs = REF_OPT_STEPS, .no_shuffle = true,
                           .verbose = FL_VERBOSE_SILENT);
    CHECK_MSG(h != NULL, "%s: %s", name, fl_last_error());
    const float *kw = fl_tensor_data(fl_layer_weight(l, 0)), *bw = fl_tensor_data(fl_layer_weight(l, 1));
    for (int i = 0; i < 8; i++) {
        float v = i < 6 ? kw[i] : bw[i - 6];
        CHECK_MSG(fabsf(v - ref[i]) <= 1e-4f, "%s: weight %d after %d steps: %.7g, Keras %.7g", name, i,
                  REF_OPT_STEPS, v, ref[i]);
    }
    fl_history_free(h);
    fl_tensor_free(k); fl_tensor_free(b); fl_tensor_free(x); fl_tensor_free(y);
    fl_model_free(m);
}

static void test_clipping_and_schedules(void) {
    fl_lr_schedule exp = fl_exponential_decay(0.1, 1, 0.5);
    fl_lr_schedule cw = fl_cosine_decay(0.01, 4, .warmup_target = 0.1, .warmup_steps = 2);
    fl_lr_schedule pw = fl_piecewise_constant_decay(1, (double[]){1}, (double[]){0.1, 0.01});
    opt_case("sgd_clipnorm", fl_sgd(.learning_rate = 0.1f, .clipnorm = 0.5f), ref_sgd_clipnorm);
    opt_case("adam_clipvalue", fl_adam(.learning_rate = 0.01f, .clipvalue = 0.1f), ref_adam_clipvalue);
    opt_case("rms_gclip", fl_rmsprop(.learning_rate = 0.01f, .global_clipnorm = 0.5f), ref_rms_gclip);
    opt_case("sgdm_gclip", fl_sgd(.learning_rate = 0.1f, .momentum = 0.9f, .global_clipnorm = 0.5f), ref_sgdm_gclip);
    opt_case("adamw_clipnorm", fl_adamw(.learning_rate = 0.01f, .clipnorm = 0.5f), ref_adamw_clipnorm);
    opt_case("adam_exp", fl_adam(.learning_rate_schedule = &exp), ref_adam_exp);
    opt_case("sgd_cos_warm", fl_sgd(.learning_rate_schedule = &cw), ref_sgd_cos_warm);
    opt_case("sgd_pw_clipvalue", fl_sgd(.learning_rate_schedule = &pw, .clipvalue = 0.2f), ref_sgd_pw_clipvalue);
    /* Keras: only one clip */
    CHECK(fl_sgd(.clipnorm = 1.0f, .clipvalue = 1.0f) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "only one of clipnorm");
    CHECK(fl_adam(.global_clipnorm = -1.0f) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "global_clipnorm");
    /* the current learning rate follows the iterations */
    fl_optimizer *o = fl_adam(.learning_rate_schedule = &exp);
    CHECK(fl_optimizer_current_learning_rate(o) == 0.1f && fl_optimizer_schedule(o) != NULL);
    CHECK(fl_optimizer_set_learning_rate(o, 0.5f) == FL_ERR_STATE);
    fl_optimizer_free(o);
}

/* a schedule and a clip survive flynn's own .keras/.h5/.json files, and
 * training continues exactly (the optimizer state without a learning_rate
 * variable, as Keras writes it with a schedule) */
static fl_tensor *train_x(void) {
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, 4, 3);
    for (int i = 0; i < 12; i++) ((float *)fl_tensor_data(x))[i] = -1.0f + 3.0f * (float)i / 11.0f;
    return x;
}
static void test_save_load(void) {
    const char *ext[] = {"keras", "h5", "json"};
    fl_lr_schedule cw = fl_cosine_decay(0.01, 4, .warmup_target = 0.1, .warmup_steps = 2, .alpha = 0.25);
    fl_lr_schedule pw = fl_piecewise_constant_decay(2, (double[]){1, 3}, (double[]){0.1, 0.01, 0.001});
    fl_tensor *x = train_x(), *y = fl_tensor_zeros(FL_FLOAT32, 4, 2);
    for (int e = 0; e < 3; e++)
        for (int v = 0; v < 2; v++) {
            char path[64];
            snprintf(path, sizeof path, "/tmp/flynn_cb_%d_%d.%s", (int)getpid(), v, ext[e]);
            fl_model *m = fl_sequential(fl_input(3), fl_dense(2));
            fl_compile(m, v ? fl_rmsprop(.learning_rate_schedule = &pw, .clipvalue = 0.3f)
                            : fl_adam(.learning_rate_schedule = &cw, .global_clipnorm = 0.7f), FL_MEAN_SQUARED_ERROR);
            fl_history *h = fl_fit(m, x, y, .batch_size = 4, .epochs = 2, .verbose = FL_VERBOSE_SILENT);
            fl_history_free(h);
            CHECK_MSG(fl_save_model(m, path) == FL_OK, "%s: %s", path, fl_last_error());
            fl_model *l = fl_load_model(path);
            CHECK_MSG(l != NULL, "%s: %s", path, fl_last_error());
            if (!l) { fl_model_free(m); continue; }
            const fl_lr_schedule *a = fl_optimizer_schedule(fl_model_optimizer(m)), *b = fl_optimizer_schedule(fl_model_optimizer(l));
            CHECK_MSG(b && a->kind == b->kind && fl_lr_schedule_value(a, 2) == fl_lr_schedule_value(b, 2) &&
                      fl_lr_schedule_value(a, 5) == fl_lr_schedule_value(b, 5), "%s: schedule", path);
            float c1[3], c2[3];
            fl_optimizer_clipping(fl_model_optimizer(m), &c1[0], &c1[1], &c1[2]);
            fl_optimizer_clipping(fl_model_optimizer(l), &c2[0], &c2[1], &c2[2]);
            CHECK_MSG(memcmp(c1, c2, sizeof c1) == 0, "%s: clipping %g %g %g, saved %g %g %g", path, c2[0], c2[1], c2[2],
                      c1[0], c1[1], c1[2]);
            if (e < 2) { /* .json has no weights or state */
                CHECK(fl_optimizer_iterations(fl_model_optimizer(l)) == 2);
                fl_history_free(fl_fit(m, x, y, .batch_size = 4, .epochs = 1, .verbose = FL_VERBOSE_SILENT));
                fl_history_free(fl_fit(l, x, y, .batch_size = 4, .epochs = 1, .verbose = FL_VERBOSE_SILENT));
                fl_layer *la = fl_model_layer(m, fl_model_num_layers(m) - 1), *lb = fl_model_layer(l, fl_model_num_layers(l) - 1);
                CHECK_MSG(memcmp(fl_tensor_data(fl_layer_weight(la, 0)), fl_tensor_data(fl_layer_weight(lb, 0)),
                                 6 * sizeof(float)) == 0, "%s: the step after loading differs", path);
            }
            unlink(path);
            fl_model_free(l);
            fl_model_free(m);
        }
    fl_tensor_free(x);
    fl_tensor_free(y);
}

int main(void) {
    fl_set_num_threads(1);
    test_schedules();
    test_early_stopping();
    test_reduce_lr();
    test_scheduler();
    test_csv_logger();
    test_user_callback();
    test_terminate_on_nan();
    test_clipping_and_schedules();
    test_save_load();
    return check_report("test_callbacks");
}
