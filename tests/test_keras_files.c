/*
 * test_keras_files.c — Keras model files against real Keras 3.15: every
 * fixture of tests/fixtures/keras (written by tools/keras_fixtures.py, listed
 * in its manifest.json) loads from each format it comes in (.keras, .h5,
 * .json + .weights.h5) and predicts what Keras predicted; the training
 * fixtures take one step as Keras did and continue from Keras's saved
 * optimizer state as Keras does; save -> load round-trips every fixture
 * through .keras, .h5 and .json + .weights.h5 bit for bit; the bad_* files
 * and hand-made configs are refused with the promised messages, nothing
 * half-loaded; saving is atomic; the checkpoint callback and an interrupted
 * + resumed run match an uninterrupted one.
 *
 * usage: test_keras_files FIXTURE_DIR
 */
#include "check.h"

#include <flynn/flynn.h>
#include "nn/nn.h" /* fl_model: its graph's fused-path counters */
#include "keras/keras.h" /* fl_keras_kind_row_class */
#include <json-c/json.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *dir;
static int min_fixtures = 10; /* fixtures the manifest must list */
static char tmpdir[256];
static json_object *manifest;
static double tol_pred_r = 1e-5, tol_pred_a = 1e-6, tol_step_r = 1e-4, tol_step_a = 1e-6;

static const char *P(const char *name) {
    static char buf[8][1024];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}
static const char *T(const char *name) {
    static char buf[8][1024];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static json_object *jget(json_object *o, const char *k) {
    json_object *v = NULL;
    return o && json_object_object_get_ex(o, k, &v) ? v : NULL;
}
static const char *jstr(json_object *o, const char *k) {
    json_object *v = jget(o, k);
    return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/* ------------------------------------------------------------ comparisons */

typedef struct errs { double abs, rel; } errs;

/* |got - want| <= atol + rtol*|want| everywhere; tracks the largest errors. */
static bool close_all(const fl_tensor *got, const fl_tensor *want, double rtol, double atol, errs *e, const char *what) {
    check_count++;
    char a[64], b[64];
    bool same = fl_tensor_ndim(got) == fl_tensor_ndim(want);
    for (int i = 0; same && i < fl_tensor_ndim(got); i++) same = fl_tensor_dim(got, i) == fl_tensor_dim(want, i);
    if (!same) {
        check_failures++;
        fprintf(stderr, "%s: shape %s, expected %s\n", what, fl_tensor_shape_str(got, a, sizeof a),
                fl_tensor_shape_str(want, b, sizeof b));
        return false;
    }
    const float *g = fl_tensor_cdata(got), *w = fl_tensor_cdata(want);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < fl_tensor_size(got); i++) {
        double d = fabs((double)g[i] - (double)w[i]);
        if (d > e->abs) e->abs = d;
        double r = d / (fabs((double)w[i]) > 1e-30 ? fabs((double)w[i]) : 1e-30);
        if (fabs((double)w[i]) > 1e-3 && r > e->rel) e->rel = r;
        if (!(d <= atol + rtol * fabs((double)w[i]))) { if (first < 0) first = i; bad++; }
    }
    if (bad) {
        check_failures++;
        fprintf(stderr, "%s: %lld of %lld values differ beyond rtol %g atol %g; first at %lld: %.9g vs %.9g\n", what,
                (long long)bad, (long long)fl_tensor_size(got), rtol, atol, (long long)first, g[first], w[first]);
    }
    return bad == 0;
}

static bool bit_equal(const fl_tensor *a, const fl_tensor *b) {
    if (!a || !b || fl_tensor_ndim(a) != fl_tensor_ndim(b) || fl_tensor_size(a) != fl_tensor_size(b)) return false;
    for (int i = 0; i < fl_tensor_ndim(a); i++)
        if (fl_tensor_dim(a, i) != fl_tensor_dim(b, i)) return false;
    return memcmp(fl_tensor_cdata(a), fl_tensor_cdata(b), (size_t)fl_tensor_size(a) * 4) == 0;
}

/* ------------------------------------------------------------ fixture io */

typedef struct io { int n; fl_tensor *t[8]; } io;

static void io_free(io *x) {
    for (int i = 0; i < x->n; i++) fl_tensor_free(x->t[i]);
    x->n = 0;
}

static bool io_load(json_object *list, io *x) {
    x->n = 0;
    for (size_t i = 0; list && i < json_object_array_length(list) && i < 8; i++) {
        fl_tensor *t = fl_load_npy(P(json_object_get_string(json_object_array_get_idx(list, i))));
        CHECK_MSG(t != NULL, "%s", fl_last_error());
        if (!t) return false;
        if (fl_tensor_dtype(t) != FL_FLOAT32 && fl_tensor_dtype(t) != FL_INT32) { /* int32/int64: token indices */
            fl_tensor *f = fl_to_float(t, 1.0f);
            fl_tensor_free(t);
            t = f;
        }
        x->t[x->n++] = t;
    }
    return x->n > 0;
}

static bool predict(fl_model *m, const io *x, io *y) {
    y->n = fl_model_num_outputs(m);
    fl_status s = fl_predict_multi(m, (const fl_tensor *const *)x->t, x->n, y->t, y->n, .verbose = FL_VERBOSE_SILENT);
    CHECK_MSG(s == FL_OK, "predict: %s", fl_last_error());
    if (s != FL_OK) y->n = 0;
    return s == FL_OK;
}

/* A fixture of a model with a None (variable-length) axis has a second
 * batch of another length (files x_b, y_b): every comparison predicts it
 * too, after the first, so that the model is planned anew for it. */
static const io *g_xb, *g_yb;

static void compare_one(fl_model *m, const io *x, const io *want, const char *name, const char *how, errs *worst);
static void compare_predictions(fl_model *m, const io *x, const io *want, const char *name, const char *how, errs *worst) {
    compare_one(m, x, want, name, how, worst);
    if (g_xb && g_xb->n && g_yb && g_yb->n) {
        char h2[64];
        snprintf(h2, sizeof h2, "%s, length 2", how);
        compare_one(m, g_xb, g_yb, name, h2, worst);
    }
}

static void compare_one(fl_model *m, const io *x, const io *want, const char *name, const char *how, errs *worst) {
    io got = {0};
    if (!predict(m, x, &got)) return;
    errs e = {0, 0};
    char what[256];
    CHECK_MSG(got.n == want->n, "%s via %s: %d outputs, Keras %d", name, how, got.n, want->n);
    for (int i = 0; i < got.n && i < want->n; i++) {
        snprintf(what, sizeof what, "%s via %s, output %d", name, how, i);
        close_all(got.t[i], want->t[i], tol_pred_r, tol_pred_a, &e, what);
    }
    printf("  %-24s %-16s predictions: max abs err %.3g, max rel err %.3g\n", name, how, e.abs, e.rel);
    if (e.abs > worst->abs) worst->abs = e.abs;
    if (e.rel > worst->rel) worst->rel = e.rel;
    io_free(&got);
}

static char *summary_text(fl_model *m) {
    FILE *f = tmpfile();
    fl_model_summary(m, f);
    long n = ftell(f);
    rewind(f);
    char *s = calloc((size_t)n + 1, 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = 0;
    fclose(f);
    return s;
}

/* Every weight of a and b bit-identical. */
static bool same_weights(fl_model *a, fl_model *b) {
    if (fl_model_num_layers(a) != fl_model_num_layers(b)) return false;
    for (int i = 0; i < fl_model_num_layers(a); i++) {
        fl_layer *la = fl_model_layer(a, i), *lb = fl_model_layer(b, i);
        if (strcmp(fl_layer_name(la), fl_layer_name(lb)) != 0 || fl_layer_num_weights(la) != fl_layer_num_weights(lb))
            return false;
        for (int k = 0; k < fl_layer_num_weights(la); k++)
            if (!bit_equal(fl_layer_weight(la, k), fl_layer_weight(lb, k))) return false;
    }
    return true;
}

static bool same_compile(fl_model *a, fl_model *b) {
    const fl_optimizer *oa = fl_model_optimizer(a), *ob = fl_model_optimizer(b);
    if (!oa || !ob) return !oa && !ob;
    return strcmp(fl_optimizer_name(oa), fl_optimizer_name(ob)) == 0 &&
           fl_optimizer_iterations(oa) == fl_optimizer_iterations(ob) &&
           fl_optimizer_learning_rate(oa) == fl_optimizer_learning_rate(ob) &&
           fl_model_loss(a).kind == fl_model_loss(b).kind && fl_model_loss(a).from_logits == fl_model_loss(b).from_logits;
}

/* save m to each format, load it back: same weights, summary, compile state, predictions */
static void round_trip(fl_model *m, const io *x, const char *name) {
    io ref = {0};
    if (!predict(m, x, &ref)) return;
    char *sum = summary_text(m);
    static const char *exts[] = {".keras", ".h5", ".json"};
    for (int e = 0; e < 3; e++) {
        char fn[600], wfn[600];
        snprintf(fn, sizeof fn, "%s/rt_%s%s", tmpdir, name, exts[e]);
        snprintf(wfn, sizeof wfn, "%s/rt_%s.weights.h5", tmpdir, name);
        CHECK_MSG(fl_save_model(m, fn) == FL_OK, "%s: save %s: %s", name, exts[e], fl_last_error());
        if (e == 2) CHECK_MSG(fl_save_weights(m, wfn) == FL_OK, "%s: save_weights: %s", name, fl_last_error());
        fl_model *b = fl_load_model(fn);
        CHECK_MSG(b != NULL, "%s: reload %s: %s", name, exts[e], fl_last_error());
        if (!b) continue;
        if (e == 2) CHECK_MSG(fl_load_weights(b, wfn) == FL_OK, "%s: load_weights: %s", name, fl_last_error());
        CHECK_MSG(same_weights(m, b), "%s: weights differ after %s round trip", name, exts[e]);
        char *sb = summary_text(b);
        CHECK_MSG(strcmp(sum, sb) == 0, "%s: summary differs after %s round trip:\n%s\nvs\n%s", name, exts[e], sum, sb);
        free(sb);
        CHECK_MSG(same_compile(m, b), "%s: compile state differs after %s round trip", name, exts[e]);
        io got = {0};
        if (predict(b, x, &got)) {
            bool eq = got.n == ref.n;
            for (int i = 0; eq && i < got.n; i++) eq = bit_equal(got.t[i], ref.t[i]);
            CHECK_MSG(eq, "%s: predictions differ after %s round trip", name, exts[e]);
        }
        io_free(&got);
        fl_model_free(b);
        unlink(fn);
    }
    /* the JSON text round-trips to the same text */
    char *j1 = fl_model_to_json(m);
    fl_model *c = j1 ? fl_model_from_json(j1) : NULL;
    char *j2 = c ? fl_model_to_json(c) : NULL;
    CHECK_MSG(j1 && j2 && strcmp(j1, j2) == 0, "%s: to_json -> from_json -> to_json changed the text", name);
    free(j1);
    free(j2);
    fl_model_free(c);
    free(sum);
    io_free(&ref);
}

/* ------------------------------------------------------------ training */

static fl_tensor *load_train_y(const char *file) {
    fl_tensor *t = fl_load_npy(P(file));
    CHECK_MSG(t != NULL, "%s", fl_last_error());
    return t;
}

/* step list items: {"layer","weight","file"} objects or [layer, weight, file] lists */
static void item(json_object *it, const char **layer, const char **weight, const char **file) {
    if (json_object_is_type(it, json_type_array)) {
        *layer = json_object_get_string(json_object_array_get_idx(it, 0));
        *weight = json_object_get_string(json_object_array_get_idx(it, 1));
        *file = json_object_get_string(json_object_array_get_idx(it, 2));
    } else {
        *layer = jstr(it, "layer");
        *weight = jstr(it, "weight");
        *file = jstr(it, "file");
    }
}

static fl_tensor *weight_of(fl_model *m, const char *layer, const char *weight) {
    fl_layer *l = fl_model_get_layer(m, layer);
    if (!l) return NULL;
    for (int k = 0; k < fl_layer_num_weights(l); k++)
        if (strcmp(fl_layer_weight_name(l, k), weight) == 0) return fl_layer_weight(l, k);
    return NULL;
}

static void compare_weights(fl_model *m, json_object *list, const char *name, const char *what, double rtol, double atol,
                            errs *e) {
    for (size_t i = 0; list && i < json_object_array_length(list); i++) {
        const char *ln, *wn, *fn;
        item(json_object_array_get_idx(list, i), &ln, &wn, &fn);
        fl_tensor *want = fl_load_npy(P(fn)), *got = weight_of(m, ln, wn);
        CHECK_MSG(want && got, "%s %s: %s/%s: %s", name, what, ln, wn, fl_last_error());
        char w[256];
        snprintf(w, sizeof w, "%s %s %s/%s", name, what, ln, wn);
        if (want && got) close_all(got, want, rtol, atol, e, w);
        fl_tensor_free(want);
    }
}

static void one_step(fl_model *m, const fl_tensor *x, const fl_tensor *y, int bs, const char *name) {
    fl_history *h = fl_fit(m, x, y, .batch_size = bs, .epochs = 1, .no_shuffle = true, .verbose = FL_VERBOSE_SILENT);
    CHECK_MSG(h != NULL, "%s: fit: %s", name, fl_last_error());
    fl_history_free(h);
}

/* The loss and metric Keras's train_on_batch reported for the step (its
 * forward pass, before the update) against fl_evaluate on the same batch:
 * the same numbers where training and inference compute the same forward
 * (no Dropout, no BatchNormalization). This checks the reductions, among
 * them the output's mask weighing loss and metrics (Keras's apply_mask). */
static void step1_logs(fl_model *m, json_object *tr, const fl_tensor *x, const fl_tensor *y, int bs, const char *name) {
    json_object *logs = jget(tr, "logs_step1"), *lv = jget(tr, "loss_value_step1");
    if (!lv) return;
    for (int i = 0; i < fl_model_num_layers(m); i++) {
        const fl_layer *l = fl_model_layer(m, i);
        const char *c = fl_layer_class(l);
        if (strcmp(c, "Dropout") == 0 || strcmp(c, "BatchNormalization") == 0) return;
        for (int k = 0; k < fl_layer_num_weights(l); k++) /* TimeDistributed(BatchNormalization) */
            if (strstr(fl_layer_weight_name(l, k), "moving_mean")) return;
    }
    float r[1 + FL_MAX_METRICS] = {0};
    CHECK_MSG(fl_evaluate(m, x, y, r, 1 + FL_MAX_METRICS, .batch_size = bs, .verbose = FL_VERBOSE_SILENT) == FL_OK,
              "%s: evaluate: %s", name, fl_last_error());
    CHECK_MSG(fabs(r[0] - json_object_get_double(lv)) <= 1e-5 + 1e-4 * fabs(json_object_get_double(lv)),
              "%s: loss before the step %.7g, Keras's train_on_batch %.7g", name, r[0], json_object_get_double(lv));
    json_object_object_foreach(logs, k, v) { /* one metric: "accuracy" and the like */
        CHECK_MSG(fabs(r[1] - json_object_get_double(v)) <= 1e-5, "%s: %s before the step %.7g, Keras's %.7g", name, k,
                  r[1], json_object_get_double(v));
        break;
    }
}

static void training_fixture(json_object *fx, const char *name) {
    json_object *tr = jget(fx, "training"), *files = jget(fx, "files");
    if (!tr) return;
    const char *tx = jstr(tr, "train_x") ? jstr(tr, "train_x") : jstr(files, "train_x");
    const char *ty = jstr(tr, "train_y") ? jstr(tr, "train_y") : jstr(files, "train_y");
    int bs = json_object_get_int(jget(tr, "batch_size"));
    fl_tensor *x = fl_load_npy(P(tx)), *y = load_train_y(ty);
    CHECK(x && y && bs > 0);
    if (!x || !y || bs <= 0) { fl_tensor_free(x); fl_tensor_free(y); return; }
    errs e1 = {0, 0}, e2 = {0, 0};
    /* 1. M.keras (compiled, before the step): one step -> Keras's step-1 weights */
    fl_model *m = fl_load_model(P(jstr(files, "keras")));
    CHECK_MSG(m != NULL, "%s: %s", name, fl_last_error());
    if (!m) goto out;
    CHECK_MSG(fl_model_optimizer(m) != NULL, "%s: M.keras came back uncompiled", name);
    step1_logs(m, tr, x, y, bs, name);
    one_step(m, x, y, bs, name);
    if (strcmp(name, "train_mnist_cnn_adam") == 0) /* the step went through the fused Conv(ReLU) -> Conv -> MaxPool backward */
        CHECK_MSG(m->g.fused_conv_pool_bwd == 1 && m->g.fused_relu_mask_bwd == 1,
                  "%s: the fused Conv -> MaxPool backward ran %lld times (%lld with the ReLU mask), expected once with it",
                  name, (long long)m->g.fused_conv_pool_bwd, (long long)m->g.fused_relu_mask_bwd);
    compare_weights(m, jget(tr, "step1_weights"), name, "step 1", tol_step_r, tol_step_a, &e1);
    /* ... and flynn's own state saved after the step continues like Keras's */
    CHECK(fl_save_model(m, T("after_flynn.keras")) == FL_OK);
    CHECK(fl_save_model(m, T("after_flynn.h5")) == FL_OK);
    fl_model_free(m);
    /* 2. the step-1 weights file holds exactly the step-1 weights */
    if (jstr(files, "step1_weights_h5")) {
        m = fl_load_model(P(jstr(files, "keras")));
        CHECK_MSG(m && fl_load_weights(m, P(jstr(files, "step1_weights_h5"))) == FL_OK, "%s: %s", name, fl_last_error());
        if (m) {
            errs ez = {0, 0};
            compare_weights(m, jget(tr, "step1_weights"), name, "step1.weights.h5", 0, 0, &ez);
            CHECK_MSG(fl_optimizer_iterations(fl_model_optimizer(m)) == 1,
                      "%s: load_weights did not restore the optimizer iterations", name);
        }
        fl_model_free(m);
    }
    /* 3. resume: M_after.keras (Keras's optimizer state) -> one more step -> Keras's step 2 */
    const char *resumes[3] = {jstr(files, "after_keras"), "after_flynn.keras", "after_flynn.h5"};
    for (int r = 0; r < 3; r++) {
        if (!resumes[r]) continue;
        m = fl_load_model(r == 0 ? P(resumes[r]) : T(resumes[r]));
        CHECK_MSG(m != NULL, "%s: %s: %s", name, resumes[r], fl_last_error());
        if (!m) continue;
        CHECK_MSG(fl_optimizer_iterations(fl_model_optimizer(m)) == 1, "%s: %s: iterations %lld, expected 1", name,
                  resumes[r], (long long)fl_optimizer_iterations(fl_model_optimizer(m)));
        one_step(m, x, y, bs, name);
        errs e = {0, 0};
        compare_weights(m, jget(tr, "step2_weights"), name, r == 0 ? "step 2 (from M_after.keras)" : "step 2 (from flynn's save)",
                        tol_step_r, tol_step_a, r == 0 ? &e2 : &e);
        fl_model_free(m);
    }
    printf("  %-24s %-16s step 1: max abs err %.3g, rel %.3g; step 2 after resume: max abs err %.3g, rel %.3g\n", name,
           "training", e1.abs, e1.rel, e2.abs, e2.rel);
out:
    fl_tensor_free(x);
    fl_tensor_free(y);
}

static void fixtures(void) {
    json_object *list = jget(manifest, "fixtures");
    errs worst = {0, 0};
    int n = 0;
    for (size_t i = 0; list && i < json_object_array_length(list); i++) {
        json_object *fx = json_object_array_get_idx(list, i), *files = jget(fx, "files");
        const char *name = jstr(fx, "name");
        io x = {0}, y = {0};
        if (!io_load(jget(files, "x"), &x) || !io_load(jget(files, "y"), &y)) { io_free(&x); io_free(&y); continue; }
        io xb = {0}, yb = {0};
        if (jget(files, "x_b") && (!io_load(jget(files, "x_b"), &xb) || !io_load(jget(files, "y_b"), &yb)))
            CHECK_MSG(false, "%s: the second batch (x_b, y_b) does not load", name);
        g_xb = &xb;
        g_yb = &yb;
        n++;
        fl_model *first = NULL;
        if (jstr(files, "keras")) {
            fl_model *m = fl_load_model(P(jstr(files, "keras")));
            CHECK_MSG(m != NULL, "%s.keras: %s", name, fl_last_error());
            if (m) compare_predictions(m, &x, &y, name, ".keras", &worst);
            first = m;
        }
        if (jstr(files, "h5")) {
            fl_model *m = fl_load_model(P(jstr(files, "h5")));
            CHECK_MSG(m != NULL, "%s.h5: %s", name, fl_last_error());
            if (m) compare_predictions(m, &x, &y, name, ".h5", &worst);
            if (m && strcmp(name, "tf2_seq_cnn") == 0) { /* tf.keras 2's training_config: Custom>Adam, MeanMetricWrapper */
                const fl_optimizer *o = fl_model_optimizer(m);
                CHECK_MSG(o && strcmp(fl_optimizer_name(o), "Adam") == 0 && fabsf(fl_optimizer_learning_rate(o) - 1e-3f) < 1e-9f,
                          "tf2_seq_cnn.h5: the compile config (Adam, learning rate 1e-3) was not restored");
                CHECK(fl_model_loss(m).kind == FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY);
            }
            if (!first) first = m;
            else fl_model_free(m);
        }
        if (jstr(files, "json")) {
            fl_model *m = fl_load_model(P(jstr(files, "json")));
            CHECK_MSG(m != NULL, "%s.json: %s", name, fl_last_error());
            if (m && jstr(files, "weights_h5")) {
                CHECK_MSG(fl_load_weights(m, P(jstr(files, "weights_h5"))) == FL_OK, "%s.weights.h5: %s", name, fl_last_error());
                compare_predictions(m, &x, &y, name, ".json+.weights.h5", &worst);
            }
            fl_model_free(m);
        }
        if (first) {
            /* the formats the fixture does not come in: flynn writes them, flynn reads them back */
            round_trip(first, &x, name);
            char fn[600], wfn[600];
            snprintf(fn, sizeof fn, "%s/conv_%s.h5", tmpdir, name);
            if (fl_save_model(first, fn) == FL_OK) {
                fl_model *m = fl_load_model(fn);
                if (m) compare_predictions(m, &x, &y, name, "flynn .h5", &worst);
                CHECK(m != NULL);
                fl_model_free(m);
            }
            snprintf(fn, sizeof fn, "%s/conv_%s.json", tmpdir, name);
            snprintf(wfn, sizeof wfn, "%s/conv_%s.weights.h5", tmpdir, name);
            if (fl_save_model(first, fn) == FL_OK && fl_save_weights(first, wfn) == FL_OK) {
                fl_model *m = fl_load_model(fn);
                CHECK(m && fl_load_weights(m, wfn) == FL_OK);
                if (m) compare_predictions(m, &x, &y, name, "flynn .json+w", &worst);
                fl_model_free(m);
            }
        }
        fl_model_free(first);
        training_fixture(fx, name);
        io_free(&x);
        io_free(&y);
        io_free(&xb);
        io_free(&yb);
        g_xb = g_yb = NULL;
    }
    CHECK_MSG(n >= min_fixtures, "only %d fixtures found in %s/manifest.json, expected at least %d", n, dir,
              min_fixtures);
    printf("fixtures: %d, worst prediction error: abs %.3g, rel %.3g\n", n, worst.abs, worst.rel);
}

/* ------------------------------------- several inputs, sample and class weights */

/* One weighted fixture: M.keras (compiled, before the step) evaluates the
 * batch as Keras did (with the sample weights, and without), and one
 * fl_fit_multi step with the same sample_weight or class_weight gives
 * Keras's step-1 weights. sw_as: the sample weights to give (NULL: none). */
static void weighted_step(json_object *fx, const char *name, fl_tensor **xs, int nx, const fl_tensor *y,
                          const fl_tensor *sw_as, const float *cw, int ncw, const char *how, errs *e) {
    fl_model *m = fl_load_model(P(jstr(jget(fx, "files"), "keras")));
    CHECK_MSG(m != NULL, "%s: %s", name, fl_last_error());
    if (!m) return;
    const fl_tensor *const *cxs = (const fl_tensor *const *)xs;
    float r[1 + FL_MAX_METRICS] = {0};
    const char *parts[2] = {"evaluate", "evaluate_unweighted"};
    for (int k = 0; k < 2; k++) {
        json_object *want = jget(fx, parts[k]);
        CHECK_MSG(fl_evaluate_multi(m, cxs, nx, y, r, 1 + FL_MAX_METRICS, .batch_size = 8, .verbose = FL_VERBOSE_SILENT,
                                    .sample_weight = k == 0 ? sw_as : NULL) == FL_OK,
                  "%s %s: %s: %s", name, how, parts[k], fl_last_error());
        double wl = json_object_get_double(jget(want, "loss")), wa = json_object_get_double(jget(want, "accuracy"));
        CHECK_MSG(fabs(r[0] - wl) <= 1e-6 + 1e-5 * fabs(wl), "%s %s: %s loss %.7g, Keras %.7g", name, how, parts[k],
                  r[0], wl);
        /* Keras 3.15's evaluate counts only the mask's valid steps in the accuracy of a masked output (its
         * train_on_batch, and flynn, every step): the loss is compared there, not the accuracy */
        if (!json_object_get_boolean(jget(fx, "evaluate_accuracy_masked")))
            CHECK_MSG(fabs(r[1] - wa) <= 1e-6, "%s %s: %s accuracy %.7g, Keras %.7g", name, how, parts[k], r[1], wa);
    }
    fl_history *h = fl_fit_multi(m, cxs, nx, y, .batch_size = 8, .epochs = 1, .no_shuffle = true,
                                 .verbose = FL_VERBOSE_SILENT, .sample_weight = sw_as, .class_weight = cw,
                                 .num_class_weights = ncw);
    CHECK_MSG(h != NULL, "%s %s: fit: %s", name, how, fl_last_error());
    if (h) { /* the step's loss, before the update, as Keras's train_on_batch reported it */
        double want = json_object_get_double(jget(fx, "loss_value_step1")), got = fl_history_get(h, "loss")[0];
        CHECK_MSG(fabs(got - want) <= 1e-6 + 1e-5 * fabs(want), "%s %s: the step's loss %.7g, Keras %.7g", name, how,
                  got, want);
    }
    fl_history_free(h);
    compare_weights(m, jget(fx, "step1_weights"), name, how, tol_step_r, tol_step_a, e);
    fl_model_free(m);
}

static void weighted_fixtures(void) {
    json_object *list = jget(manifest, "weighted");
    int n = 0;
    errs worst = {0, 0};
    for (size_t i = 0; list && i < json_object_array_length(list); i++) {
        json_object *fx = json_object_array_get_idx(list, i), *files = jget(fx, "files"), *xl = jget(files, "x");
        const char *name = jstr(fx, "name");
        fl_tensor *xs[8] = {0}, *y = fl_load_npy(P(jstr(files, "y"))), *sw = NULL;
        int nx = (int)json_object_array_length(xl);
        bool ok = y != NULL && nx >= 1 && nx <= 8;
        for (int k = 0; ok && k < nx; k++) ok = (xs[k] = fl_load_npy(P(json_object_get_string(json_object_array_get_idx(xl, k))))) != NULL;
        if (ok && jstr(files, "sample_weight")) ok = (sw = fl_load_npy(P(jstr(files, "sample_weight")))) != NULL;
        CHECK_MSG(ok, "%s: %s", name, fl_last_error());
        float cw[16];
        int ncw = 0;
        json_object *cwj = jget(fx, "class_weight");
        if (cwj && json_object_is_type(cwj, json_type_object)) {
            json_object_object_foreach(cwj, key, val) {
                int k = atoi(key);
                CHECK(k >= 0 && k < 16);
                if (k < 0 || k >= 16) continue;
                while (ncw <= k) cw[ncw++] = 1.0f;
                cw[k] = (float)json_object_get_double(val);
            }
        }
        if (ok) {
            n++;
            errs e = {0, 0};
            weighted_step(fx, name, xs, nx, y, sw, ncw ? cw : NULL, ncw, "step 1", &e);
            if (sw && fl_tensor_ndim(sw) == 2 && fl_tensor_dim(sw, 1) == 1) {
                /* (N, 1) on a sequence output: flynn takes (N,) as the same */
                fl_tensor *flat = fl_tensor_clone(sw);
                int64_t s1[1] = {fl_tensor_dim(sw, 0)};
                CHECK(flat && fl_tensor_reshape(flat, 1, s1) == FL_OK);
                if (flat) weighted_step(fx, name, xs, nx, y, flat, NULL, 0, "step 1, sample_weight (N,)", &e);
                fl_tensor_free(flat);
            }
            printf("  %-26s %d input%s, %s: step 1 max abs err %.3g, rel %.3g\n", name, nx, nx == 1 ? "" : "s",
                   sw ? "sample_weight" : ncw ? "class_weight" : "no weights", e.abs, e.rel);
            if (e.abs > worst.abs) worst.abs = e.abs;
            if (e.rel > worst.rel) worst.rel = e.rel;
        }
        for (int k = 0; k < nx && k < 8; k++) fl_tensor_free(xs[k]);
        fl_tensor_free(y);
        fl_tensor_free(sw);
    }
    CHECK_MSG(n >= 8, "only %d weighted fixtures in %s/manifest.json, expected 8 (tools/keras_fixtures.py WEIGHTED)", n, dir);
    printf("weighted fixtures: %d, worst step error: abs %.3g, rel %.3g\n", n, worst.abs, worst.rel);
}

/* ------------------------------------------------------------ refusals */

/* Loads path (or JSON text) and expects NULL with every fragment in the message. */
static void expect_refused(const char *path, const char *json, const char *const *frags) {
    fl_clear_error();
    /* HDF5, libzip and json-c must not print anything themselves */
    fflush(stderr);
    int saved = dup(2);
    FILE *cap = tmpfile();
    dup2(fileno(cap), 2);
    fl_model *m = path ? fl_load_model(path) : fl_model_from_json(json);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    long printed = ftell(cap) > 0 ? ftell(cap) : (fseek(cap, 0, SEEK_END), ftell(cap));
    fclose(cap);
    const char *what = path ? path : "JSON";
    CHECK_MSG(m == NULL, "%s: loaded, expected a refusal", what);
    CHECK_MSG(printed == 0, "%s: %ld bytes printed on stderr by a library", what, printed);
    fl_model_free(m);
    const char *msg = fl_last_error();
    for (int i = 0; frags[i]; i++) CHECK_MSG(strstr(msg, frags[i]) != NULL, "%s: message \"%s\" lacks \"%s\"", what, msg, frags[i]);
    if (m == NULL) printf("  refused %-40.40s %s\n", path ? strrchr(path, '/') + 1 : "(JSON)", msg);
}

static void bad_fixtures(void) {
    json_object *list = jget(manifest, "bad");
    int n = 0;
    for (size_t i = 0; list && i < json_object_array_length(list); i++) {
        json_object *b = json_object_array_get_idx(list, i);
        const char *file = jstr(b, "file"), *reason = jstr(b, "reason");
        const char *frags[6] = {file, NULL};
        if (strcmp(reason, "custom_layer") == 0) { frags[1] = "custom object"; frags[2] = "ScaleByTwo"; frags[3] = "built-in Keras layers"; }
        else if (strcmp(reason, "lambda_layer") == 0) { frags[1] = "Lambda"; frags[2] = "Python code"; }
        else if (strcmp(reason, "unsupported_layer") == 0) { frags[1] = "UnitNormalization"; frags[2] = "not supported"; frags[3] = "Dense, Conv2D"; }
        else if (strcmp(reason, "many_unsupported") == 0) { frags[1] = "5 layers cannot be loaded"; frags[2] = "Conv2DTranspose, 2 layers ('conv2d_transpose', 'conv2d_transpose_1')"; frags[3] = "Resizing, 1 layer"; }
        else if (strcmp(reason, "truncated_zip") == 0 || strcmp(reason, "not_a_zip") == 0) { frags[1] = "zip"; }
        else if (strcmp(reason, "invalid_json") == 0) { frags[1] = "config.json"; frags[2] = "invalid JSON"; frags[3] = "line 1, column"; }
        else if (strcmp(reason, "wrong_shape") == 0) { frags[1] = "layer 'dense' (Dense) weight 'kernel'"; frags[2] = "has shape (6, 5), expected (5, 6)"; }
        else if (strcmp(reason, "missing_weights") == 0) { frags[1] = "dense_1"; frags[2] = "missing"; }
        else if (strcmp(reason, "zip_bomb") == 0) { frags[1] = "config.json declares"; frags[2] = "limit"; frags[3] = "before inflating"; }
        else { frags[1] = NULL; }
        expect_refused(P(file), NULL, frags);
        n++;
    }
    CHECK(n >= 8);
}

/* A small valid Sequential config with one Dense layer whose config gets `extra`. */
static char *config_with(const char *cls, const char *layer_cfg) {
    static const char *fmt =
        "{\"module\":\"keras\",\"class_name\":\"Sequential\",\"config\":{\"name\":\"s\",\"trainable\":true,\"layers\":["
        "{\"module\":\"keras.layers\",\"class_name\":\"InputLayer\",\"config\":{\"batch_shape\":[null,6,6,2],"
        "\"dtype\":\"float32\",\"name\":\"in\"},\"registered_name\":null},"
        "{\"module\":\"keras.layers\",\"class_name\":\"%s\",\"config\":{\"name\":\"layer\",\"trainable\":true%s},"
        "\"registered_name\":null}]}}";
    char *s = malloc(strlen(fmt) + strlen(cls) + strlen(layer_cfg) + 1);
    sprintf(s, fmt, cls, layer_cfg);
    return s;
}

static void config_refusals(void) {
    static const struct { const char *cls, *cfg; const char *frag[3]; } cases[] = {
        {"Conv2D", ",\"filters\":2,\"kernel_size\":[3,3],\"data_format\":\"channels_first\"", {"'layer' (Conv2D)", "channels_first"}},
        {"Conv2D", ",\"filters\":2,\"kernel_size\":3,\"strides\":2,\"dilation_rate\":[2,2]", {"'layer' (Conv2D)", "strides (2, 2) with dilation_rate (2, 2)"}},
        {"Conv2D", ",\"filters\":2,\"kernel_size\":3,\"groups\":3", {"'layer' (Conv2D)", "groups is 3", "dividing filters 2"}},
        {"Conv2D", ",\"filters\":4,\"kernel_size\":3,\"groups\":4", {"'layer' (Conv2D)", "not divisible by groups 4"}},
        {"Resizing", ",\"height\":3,\"width\":3,\"interpolation\":\"bicubic\"", {"'layer' (Resizing)", "interpolation 'bicubic'"}},
        {"Resizing", ",\"height\":3,\"width\":3,\"antialias\":true", {"'layer' (Resizing)", "antialias"}},
        {"Resizing", ",\"height\":3,\"width\":3,\"pad_to_aspect_ratio\":true,\"fill_value\":1.5", {"'layer' (Resizing)", "fill_value 1.5"}},
        {"Resizing", ",\"height\":3,\"width\":3,\"data_format\":\"channels_first\"", {"'layer' (Resizing)", "channels_first"}},
        {"Conv2D", ",\"filters\":2,\"kernel_size\":3,\"kernel_regularizer\":{\"module\":\"keras.regularizers\",\"class_name\":\"L2\",\"config\":{\"l2\":0.01}}", {"kernel_regularizer", "(L2)"}},
        {"Dense", ",\"units\":3,\"kernel_constraint\":{\"class_name\":\"MaxNorm\",\"config\":{}}", {"'layer' (Dense)", "kernel_constraint"}},
        {"Dense", ",\"units\":3,\"activity_regularizer\":{\"class_name\":\"L1\",\"config\":{}}", {"activity_regularizer"}},
        {"Dense", ",\"units\":3,\"activation\":\"mish\"", {"activation 'mish'", "not supported"}},
        {"Dense", ",\"units\":3,\"dtype\":{\"module\":\"keras\",\"class_name\":\"DTypePolicy\",\"config\":{\"name\":\"mixed_float16\"}}", {"mixed_float16"}},
        {"Dense", ",\"units\":3,\"trainable\":\"no\"", {"'layer' (Dense)", "'trainable' is a string, expected true or false"}},
        {"Dense", ",\"units\":3,\"kernel_initializer\":{\"module\":\"my\",\"class_name\":\"Mine\",\"registered_name\":\"x>Mine\",\"config\":{}}", {"kernel_initializer", "custom object"}},
        {"BatchNormalization", ",\"axis\":1", {"(BatchNormalization)", "axis 1"}},
        {"BatchNormalization", ",\"renorm\":true", {"renorm"}},
        {"Dropout", ",\"rate\":0.5,\"noise_shape\":[4,1,1,2]", {"noise_shape", "across the batch"}},
        {"Conv1D", ",\"filters\":2,\"kernel_size\":[3],\"padding\":\"full\"", {"'layer' (Conv1D)", "padding 'full'"}},
        {"Conv1D", ",\"filters\":2,\"kernel_size\":3,\"strides\":2,\"dilation_rate\":[2]", {"'layer' (Conv1D)", "strides 2 with dilation_rate 2"}},
        {"UpSampling2D", ",\"size\":[2,2],\"interpolation\":\"bicubic\"", {"'layer' (UpSampling2D)", "interpolation 'bicubic'"}},
        {"UpSampling2D", ",\"size\":2,\"data_format\":\"channels_first\"", {"'layer' (UpSampling2D)", "channels_first"}},
        {"Conv2DTranspose", ",\"filters\":2,\"kernel_size\":3,\"output_padding\":[1,1]", {"'layer' (Conv2DTranspose)", "output_padding"}},
        {"Conv2DTranspose", ",\"filters\":2,\"kernel_size\":3,\"dilation_rate\":[2,2]", {"'layer' (Conv2DTranspose)", "dilation_rate (2, 2)"}},
        {"Permute", ",\"dims\":[1,1,2]", {"'layer' (Permute)", "permutation"}},
        {"Permute", ",\"dims\":[2,1]", {"'layer' (Permute)", "2 entries"}},
        {"ConvLSTM2D", ",\"filters\":3", {"layer class 'ConvLSTM2D' is not supported", "Concatenate"}},
        {"GRU", ",\"units\":3,\"recurrent_dropout\":1.5", {"'layer' (GRU)", "recurrent_dropout is 1.5"}},
        {"SimpleRNN", ",\"units\":3,\"stateful\":true", {"'layer' (SimpleRNN)", "stateful=True"}},
        {"LSTM", ",\"units\":3,\"activation\":\"gelu\"", {"'layer' (LSTM)", "activation 'gelu'"}},
        {"LSTM", ",\"units\":3,\"recurrent_regularizer\":{\"class_name\":\"L2\",\"config\":{}}", {"recurrent_regularizer"}},
        {"Bidirectional", ",\"merge_mode\":\"max\",\"layer\":{\"class_name\":\"LSTM\",\"config\":{\"units\":2}}", {"'layer' (Bidirectional)", "merge_mode is max"}},
        {"Bidirectional", ",\"layer\":{\"class_name\":\"Dense\",\"config\":{\"units\":2}}", {"'layer' (Bidirectional)", "is a Dense"}},
        {"Embedding", ",\"input_dim\":5,\"output_dim\":2,\"embeddings_regularizer\":{\"module\":\"keras.regularizers\",\"class_name\":\"L2\",\"config\":{\"l2\":0.01}}", {"'layer' (Embedding)", "embeddings_regularizer"}},
        {"Embedding", ",\"input_dim\":5,\"output_dim\":2,\"embeddings_constraint\":{\"class_name\":\"NonNeg\",\"config\":{}}", {"'layer' (Embedding)", "embeddings_constraint"}},
        {"Embedding", ",\"input_dim\":5,\"output_dim\":2,\"lora_rank\":4", {"'layer' (Embedding)", "LoRA"}},
        {"Embedding", ",\"input_dim\":5,\"output_dim\":2,\"sparse\":true", {"'layer' (Embedding)", "sparse"}},
        {"Embedding", ",\"input_dim\":0,\"output_dim\":2", {"'layer' (Embedding)", "input_dim 0"}},
        {"Masking", ",\"mask_value\":\"x\"", {"'layer' (Masking)", "mask_value"}},
        {"Lambda", ",\"function\":{}", {"Lambda", "Python code"}},
        {"Sequential", ",\"layers\":[]", {"nested models"}},
        {"Dense", "", {"'units' is missing"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *j = config_with(cases[i].cls, cases[i].cfg);
        const char *fr[5] = {cases[i].frag[0], cases[i].frag[1], cases[i].frag[2], NULL, NULL};
        expect_refused(NULL, j, fr);
        free(j);
    }
    /* model-level and input refusals */
    /* a None axis loads (Dense on the rank-3 sequence); Flatten then Dense on one is Keras's build error */
    const char *unknown_dim = "{\"class_name\":\"Sequential\",\"config\":{\"name\":\"s\",\"layers\":[{\"class_name\":"
                              "\"InputLayer\",\"config\":{\"batch_shape\":[null,null,3],\"name\":\"in\"}},{\"class_name\":"
                              "\"Dense\",\"config\":{\"name\":\"d\",\"units\":2}}]}}";
    fl_model *dm = fl_model_from_json(unknown_dim);
    int64_t dsh[FL_MAX_DIMS];
    CHECK_MSG(dm != NULL, "%s", fl_last_error());
    CHECK(dm && fl_model_input_shape(dm, 0, dsh) == 2 && dsh[0] == FL_DYNAMIC && dsh[1] == 3);
    CHECK(dm && fl_model_output_shape(dm, 0, dsh) == 2 && dsh[0] == FL_DYNAMIC && dsh[1] == 2);
    fl_model_free(dm);
    const char *flat_dim = "{\"class_name\":\"Sequential\",\"config\":{\"name\":\"s\",\"layers\":[{\"class_name\":"
                           "\"InputLayer\",\"config\":{\"batch_shape\":[null,null,3],\"name\":\"in\"}},{\"class_name\":"
                           "\"Flatten\",\"config\":{\"name\":\"f\"}},{\"class_name\":"
                           "\"Dense\",\"config\":{\"name\":\"d\",\"units\":2}}]}}";
    expect_refused(NULL, flat_dim, (const char *[]){"layer 'd' (Dense)", "Received: shape=(None, 2) for variable path='d/kernel'",
                                                    NULL});
    const char *custom_model = "{\"module\":\"my_models\",\"class_name\":\"MyModel\",\"registered_name\":\"x>MyModel\","
                               "\"config\":{\"layers\":[]}}";
    expect_refused(NULL, custom_model, (const char *[]){"MyModel", "Sequential and Functional", NULL});
    expect_refused(NULL, "{\"class_name\": \"Sequential\", \"config\": {\"layers\": [}",
                   (const char *[]){"invalid JSON", "line 1, column", NULL});
    expect_refused(NULL, "{\"class_name\": \"Sequential\"", (const char *[]){"invalid JSON", "truncated", NULL});
    expect_refused(NULL, "{\"class_name\": \"Sequential\", \"config\": {\"layers\": []}} trailing",
                   (const char *[]){"extra data", NULL});
    /* a functional graph that refers to a layer it does not have */
    const char *dangling =
        "{\"class_name\":\"Functional\",\"config\":{\"name\":\"f\",\"layers\":["
        "{\"class_name\":\"InputLayer\",\"name\":\"a\",\"config\":{\"batch_shape\":[null,3],\"name\":\"a\"},\"inbound_nodes\":[]},"
        "{\"class_name\":\"Dense\",\"name\":\"d\",\"config\":{\"name\":\"d\",\"units\":2},\"inbound_nodes\":[[[\"zz\",0,0,{}]]]}],"
        "\"input_layers\":[[\"a\",0,0]],\"output_layers\":[[\"d\",0,0]]}}";
    expect_refused(NULL, dangling, (const char *[]){"layer 'd' (Dense)", "'zz'", NULL});
    /* compile configs flynn cannot honour */
    static const char *bad_compile[][2] = {
        {"{\"optimizer\":{\"class_name\":\"Adam\",\"config\":{\"learning_rate\":0.001,\"use_ema\":true}},\"loss\":\"mse\"}", "moving average"},
        {"{\"optimizer\":{\"class_name\":\"Adam\",\"config\":{\"learning_rate\":0.001,\"clipnorm\":\"big\"}},\"loss\":\"mse\"}", "'clipnorm' is a string"},
        {"{\"optimizer\":{\"class_name\":\"Adam\",\"config\":{\"learning_rate\":{\"class_name\":\"CosineDecayRestarts\",\"config\":{}}}},\"loss\":\"mse\"}", "schedule 'CosineDecayRestarts' is not supported"},
        {"{\"optimizer\":{\"class_name\":\"Adagrad\",\"config\":{}},\"loss\":\"mse\"}", "optimizer 'Adagrad'"},
        {"{\"optimizer\":\"adam\",\"loss\":\"mae\"}", "loss 'mae'"},
        {"{\"optimizer\":\"adam\",\"loss\":\"mse\",\"metrics\":[\"auc\"]}", "metric 'auc'"},
        {"{\"optimizer\":{\"class_name\":\"Adam\",\"config\":{\"learning_rate\":{\"class_name\":\"ExponentialDecay\",\"config\":{}}}},\"loss\":\"mse\"}", "'initial_learning_rate' is missing"},
        {"{\"optimizer\":{\"class_name\":\"SGD\",\"config\":{\"learning_rate\":{\"class_name\":\"ExponentialDecay\",\"config\":{\"initial_learning_rate\":0.1,\"decay_steps\":0,\"decay_rate\":0.5}}}},\"loss\":\"mse\"}", "decay_steps 0"},
    };
    /* a Functional model whose GlobalAveragePooling1D takes the mask of an Embedding(mask_zero) + Masking
     * through Add: Keras 3.15 wrote the mask as ops (NotEqual, Any, LogicalOr) and a mask= call argument
     * (tests/fixtures/keras_extra/functional_mask_ops.json, its config.json): loaded, and written back */
    {
        FILE *f = fopen(P("../keras_extra/functional_mask_ops.json"), "rb");
        CHECK(f != NULL);
        if (f) {
            static char js[65536];
            size_t n = fread(js, 1, sizeof js - 1, f);
            js[n] = 0;
            fclose(f);
            /* loads now: the operations are layers of flynn's, the masks given to the calls */
            fl_model *mm = fl_model_from_json(js);
            CHECK_MSG(mm != NULL, "functional_mask_ops.json: %s", fl_last_error());
            char *back = mm ? fl_model_to_json(mm) : NULL;
            CHECK(back && strstr(back, "\"LogicalOr\"") && strstr(back, "\"mask\""));
            fl_model *again = back ? fl_model_from_json(back) : NULL;
            CHECK_MSG(again != NULL, "functional_mask_ops.json written back: %s", fl_last_error());
            free(back);
            fl_model_free(again);
            fl_model_free(mm);
        }
    }
    /* InputLayer dtypes: int32/int64 are token indices for Embedding; others are refused, as are int
     * inputs into anything but Embedding (and the misleading "dtype policy 'int32'" message is gone) */
    static const char *const in_fmt =
        "{\"class_name\":\"Sequential\",\"config\":{\"name\":\"s\",\"layers\":[{\"class_name\":\"InputLayer\","
        "\"config\":{\"batch_shape\":[null,3],\"dtype\":\"%s\",\"name\":\"in\"}},{\"class_name\":\"%s\",\"config\":"
        "{\"name\":\"d\",%s}}]}}";
    char ij[1024];
    snprintf(ij, sizeof ij, in_fmt, "uint8", "Embedding", "\"input_dim\":4,\"output_dim\":2");
    expect_refused(NULL, ij, (const char *[]){"InputLayer", "input dtype 'uint8' is not supported", NULL});
    snprintf(ij, sizeof ij, in_fmt, "int32", "Dense", "\"units\":2");
    expect_refused(NULL, ij, (const char *[]){"layer 'd' (Dense) receives the int32 input", NULL});
    for (int k = 0; k < 2; k++) {
        snprintf(ij, sizeof ij, in_fmt, k ? "int64" : "int32", "Embedding", "\"input_dim\":4,\"output_dim\":2");
        fl_model *im = fl_model_from_json(ij);
        CHECK_MSG(im != NULL && fl_model_input_dtype(im, 0) == FL_INT32, "InputLayer %s: %s", k ? "int64" : "int32",
                  fl_last_error());
        char *back = im ? fl_model_to_json(im) : NULL;
        CHECK(back && strstr(back, k ? "\"dtype\":\"int64\"" : "\"dtype\":\"int32\""));
        free(back);
        fl_model_free(im);
    }
    for (size_t i = 0; i < sizeof bad_compile / sizeof bad_compile[0]; i++) {
        char j[2048];
        snprintf(j, sizeof j,
                 "{\"class_name\":\"Sequential\",\"config\":{\"name\":\"s\",\"layers\":[{\"class_name\":\"InputLayer\","
                 "\"config\":{\"batch_shape\":[null,3],\"name\":\"in\"}},{\"class_name\":\"Dense\",\"config\":{\"name\":"
                 "\"d\",\"units\":2}}]},\"compile_config\":%s}", bad_compile[i][0]);
        expect_refused(NULL, j, (const char *[]){"compile config", bad_compile[i][1], NULL});
        fl_model *m = fl_model_from_json(j, .no_compile = true);
        CHECK_MSG(m != NULL && fl_model_optimizer(m) == NULL, "no_compile: %s", fl_last_error());
        fl_model_free(m);
    }
}

/* A truncated .h5 and a damaged weights image: HDF5's error stack becomes the message. */
static void damaged_files(void) {
    fl_model *m = fl_load_model(P("func_shared.h5"));
    CHECK_MSG(m != NULL, "%s", fl_last_error());
    if (!m) return;
    CHECK(fl_save_model(m, T("full.h5")) == FL_OK);
    CHECK(fl_save_model(m, T("full.keras")) == FL_OK);
    FILE *f = fopen(T("full.h5"), "rb");
    char *buf = malloc(1 << 20);
    size_t n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    f = fopen(T("cut.h5"), "wb");
    fwrite(buf, 1, n / 2, f);
    fclose(f);
    expect_refused(T("cut.h5"), NULL, (const char *[]){"cut.h5", "HDF5: ", NULL});
    /* weights-only file given to fl_load_model */
    CHECK(fl_save_weights(m, T("w.weights.h5")) == FL_OK);
    expect_refused(T("w.weights.h5"), NULL, (const char *[]){"no model_config", "fl_load_weights", NULL});
    /* nothing half-loaded: a failing fl_load_weights leaves every weight as it was */
    fl_model *a = fl_load_model(P("func_shared.keras"));
    fl_model *orig = fl_load_model(P("func_shared.keras"));
    if (a && orig) {
        fl_layer *l = fl_model_get_layer(a, "shared");
        CHECK(fl_load_weights(a, P("bad_wrong_shape.keras")) != FL_OK);
        CHECK(same_weights(a, orig));
        CHECK(l != NULL);
        CHECK(fl_load_weights(a, T("cut.h5")) != FL_OK);
        CHECK(same_weights(a, orig));
    }
    fl_model_free(a);
    fl_model_free(orig);
    fl_model_free(m);
    free(buf);
}

/* ------------------------------------------------------------ atomic saving */

static int count_tmp(const char *d) {
    DIR *dp = opendir(d);
    int n = 0;
    struct dirent *e;
    while (dp && (e = readdir(dp)))
        if (strstr(e->d_name, ".tmp.")) n++;
    if (dp) closedir(dp);
    return n;
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    char *b = malloc(*n + 1);
    if (fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

static void atomic_saving(void) {
    fl_model *m = fl_load_model(P("conv_basic.keras"));
    CHECK_MSG(m != NULL, "%s", fl_last_error());
    if (!m) return;
    const char *target = T("keep.keras");
    CHECK(fl_save_model(m, target) == FL_OK);
    size_t n0 = 0, n1 = 0;
    char *before = slurp(target, &n0);
    /* a write that fails half-way (file size limit): the old file stays, no temporary file is left */
    struct rlimit old, small;
    getrlimit(RLIMIT_FSIZE, &old);
    small = old;
    small.rlim_cur = 2000;
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &small);
    fl_status s = fl_save_model(m, target);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK_MSG(s == FL_ERR_IO, "save under a 2000-byte file size limit: %s", fl_status_name(s));
    CHECK_STR_CONTAINS(fl_last_error(), "keep.keras");
    char *after = slurp(target, &n1);
    CHECK_MSG(before && after && n0 == n1 && memcmp(before, after, n0) == 0, "the old file changed on a failed save");
    CHECK_MSG(count_tmp(tmpdir) == 0, "a temporary file was left behind");
    free(before);
    free(after);
    /* a folder that does not exist, and a name that is a folder */
    CHECK(fl_save_model(m, T("no/such/dir/x.keras")) == FL_ERR_IO);
    CHECK_STR_CONTAINS(fl_last_error(), "no/such/dir/x.keras");
    mkdir(T("adir.keras"), 0777);
    CHECK(fl_save_model(m, T("adir.keras")) == FL_ERR_IO);
    CHECK_MSG(count_tmp(tmpdir) == 0, "a temporary file was left behind after a failed rename");
    rmdir(T("adir.keras"));
    /* a read-only folder: chmod 0555 for a normal user, and for everyone
     * (root ignores permissions) a read-only mount as tests/rofs_shim.c
     * makes one, linked into this program: writes under $ROFS_SHIM_DIR fail
     * with EROFS; each format (.keras, .h5, .json, .weights.h5) */
    const char *names[4] = {"ro/x.keras", "ro/x.h5", "ro/x.json", "ro/x.weights.h5"};
    for (int how = 0; how < 2; how++) {
        if (how == 0 && geteuid() == 0) {
            printf("SKIP read-only folder by chmod: root ignores permissions (the EROFS case below runs)\n");
            continue;
        }
        mkdir(T("ro"), 0777);
        for (int k = 0; k < 4; k++) {
            fl_status sv = k == 3 ? fl_save_weights(m, T(names[k])) : fl_save_model(m, T(names[k]));
            CHECK_MSG(sv == FL_OK, "%s: %s", names[k], fl_last_error());
        }
        if (how == 0) chmod(T("ro"), 0555);
        else setenv("ROFS_SHIM_DIR", T("ro"), 1);
        if (how == 1) { /* the shim is in front of libc */
            FILE *probe = fopen(T("ro/probe"), "w");
            CHECK_MSG(probe == NULL && errno == EROFS, "rofs_shim does not make %s read-only", T("ro"));
            if (probe) fclose(probe);
        }
        for (int k = 0; k < 4; k++) {
            size_t a = 0, b = 0;
            char *pre = slurp(T(names[k]), &a);
            fl_status sv = k == 3 ? fl_save_weights(m, T(names[k])) : fl_save_model(m, T(names[k]));
            CHECK_MSG(sv == FL_ERR_IO, "saving %s in a read-only folder (%s): %s", names[k],
                      how ? "EROFS" : "chmod 0555", fl_status_name(sv));
            CHECK_STR_CONTAINS(fl_last_error(), names[k]);
            if (how == 1) CHECK_STR_CONTAINS(fl_last_error(), strerror(EROFS));
            char *post = slurp(T(names[k]), &b);
            CHECK_MSG(pre && post && a == b && memcmp(pre, post, a) == 0, "%s changed on a failed save", names[k]);
            free(pre);
            free(post);
        }
        CHECK(count_tmp(T("ro")) == 0);
        unsetenv("ROFS_SHIM_DIR");
        chmod(T("ro"), 0777);
        for (int k = 0; k < 4; k++) unlink(T(names[k]));
        rmdir(T("ro"));
    }
    /* names */
    CHECK(fl_save_model(m, T("x.weights.h5")) == FL_ERR_INVALID_ARG);
    CHECK(fl_save_model(m, T("x.bin")) == FL_ERR_INVALID_ARG);
    CHECK(fl_save_weights(m, T("x.h5")) == FL_ERR_INVALID_ARG);
    unlink(target);
    fl_model_free(m);
}

/* ------------------------------------------------------------ checkpoint and resume */

static fl_model *small_model(void) {
    fl_model *m = fl_sequential(fl_input(8), fl_dense(16, .activation = FL_RELU), fl_dropout(0.25f),
                                fl_dense(3, .activation = FL_SOFTMAX));
    fl_model_set_seed(m, 11);
    fl_compile(m, fl_adam(.learning_rate = 0.01f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY);
    return m;
}

static void make_data(fl_tensor **x, fl_tensor **y) {
    *x = fl_tensor_zeros(FL_FLOAT32, 120, 8);
    *y = fl_tensor_zeros(FL_FLOAT32, 120);
    float *xd = fl_tensor_data(*x), *yd = fl_tensor_data(*y);
    for (int i = 0; i < 120; i++) {
        float s = 0;
        for (int k = 0; k < 8; k++) { xd[i * 8 + k] = fl_philox_uniform(5, 1, (uint64_t)(i * 8 + k)) * 2 - 1; s += xd[i * 8 + k] * (float)(k - 3); }
        yd[i] = s > 1 ? 2 : s > -1 ? 1 : 0;
    }
}

static void checkpoint_and_resume(void) {
    fl_tensor *x, *y;
    make_data(&x, &y);
    /* ModelCheckpoint(save_best_only) on val_loss */
    fl_model *m = small_model();
    fl_checkpoint *ck = fl_model_checkpoint(T("best.keras"), .save_best_only = true);
    fl_checkpoint *every = fl_model_checkpoint(T("ep{epoch:02d}-{loss:.3f}.keras"));
    CHECK(ck && every);
    fl_history *h = fl_fit(m, x, y, .batch_size = 16, .epochs = 6, .validation_split = 0.25f, .verbose = FL_VERBOSE_SILENT,
                           .on_epoch_end = fl_checkpoint_on_epoch_end, .user = ck);
    CHECK_MSG(h != NULL, "%s", fl_last_error());
    if (h) {
        const float *vl = fl_history_get(h, "val_loss");
        float best = vl[0];
        for (int e = 1; e < fl_history_epochs(h); e++) best = vl[e] < best ? vl[e] : best;
        CHECK(fl_checkpoint_status(ck) == FL_OK);
        CHECK(fl_checkpoint_saves(ck) >= 1);
        CHECK_CLOSE(fl_checkpoint_best(ck), best, 0, 0);
        /* the saved model is the best epoch's: its validation loss is the best one */
        fl_model *b = fl_load_model(T("best.keras"));
        CHECK_MSG(b != NULL, "%s", fl_last_error());
        if (b) {
            fl_tensor *vx = fl_tensor_slice(x, 90, 30), *vy = fl_tensor_slice(y, 90, 30);
            float r[2];
            CHECK(fl_evaluate(b, vx, vy, r, 2, .verbose = FL_VERBOSE_SILENT) == FL_OK);
            CHECK_CLOSE(r[0], best, 1e-6, 1e-7);
            fl_tensor_free(vx);
            fl_tensor_free(vy);
        }
        fl_model_free(b);
    }
    fl_history_free(h);
    /* every epoch, with placeholders in the name */
    h = fl_fit(m, x, y, .batch_size = 16, .epochs = 2, .verbose = FL_VERBOSE_SILENT,
               .on_epoch_end = fl_checkpoint_on_epoch_end, .user = every);
    CHECK(h && fl_checkpoint_saves(every) == 2);
    CHECK_STR_CONTAINS(fl_checkpoint_last_path(every), "ep02-");
    fl_history_free(h);
    fl_checkpoint_free(ck);
    fl_checkpoint_free(every);
    fl_model_free(m);
    /* a save that fails stops training with the reason */
    m = small_model();
    ck = fl_model_checkpoint(T("no/such/dir/c.keras"));
    h = fl_fit(m, x, y, .batch_size = 16, .epochs = 3, .verbose = FL_VERBOSE_SILENT,
               .on_epoch_end = fl_checkpoint_on_epoch_end, .user = ck);
    CHECK(h && fl_history_epochs(h) == 1 && fl_checkpoint_status(ck) == FL_ERR_IO);
    CHECK_STR_CONTAINS(fl_checkpoint_error(ck), "no/such/dir/c.keras");
    fl_history_free(h);
    fl_checkpoint_free(ck);
    fl_model_free(m);
    CHECK(fl_model_checkpoint("x.keras", .monitor = "val_f1") == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "FL_CHECKPOINT_MIN");
    CHECK(fl_model_checkpoint("x.txt") == NULL);

    /* interrupted + resumed == uninterrupted, bit for bit (shuffling, dropout, Adam state), for a
     * seeded model: the seed is not part of a Keras file, so it is set again, then the weights and
     * optimizer state are loaded (fl_model_set_seed re-initialises the weights) */
    static const char *exts[] = {".keras", ".h5"};
    for (int e = 0; e < 2; e++) {
        fl_model *full = small_model(), *part = small_model();
        fl_history *h1 = fl_fit(full, x, y, .batch_size = 16, .epochs = 3, .verbose = FL_VERBOSE_SILENT);
        fl_history *h2 = fl_fit(part, x, y, .batch_size = 16, .epochs = 2, .verbose = FL_VERBOSE_SILENT);
        char fn[600];
        snprintf(fn, sizeof fn, "%s/resume%s", tmpdir, exts[e]);
        CHECK(fl_save_model(part, fn) == FL_OK);
        fl_model *res = fl_load_model(fn);
        CHECK_MSG(res != NULL, "%s", fl_last_error());
        if (res) {
            CHECK(fl_model_set_seed(res, 11) == FL_OK);
            CHECK_MSG(fl_load_weights(res, fn) == FL_OK, "%s", fl_last_error());
            CHECK(fl_optimizer_iterations(fl_model_optimizer(res)) == 16); /* 2 epochs of 8 steps */
            fl_history *h3 = fl_fit(res, x, y, .batch_size = 16, .epochs = 3, .initial_epoch = 2, .verbose = FL_VERBOSE_SILENT);
            CHECK(h3 != NULL);
            CHECK_MSG(same_weights(full, res), "seeded run resumed from %s: weights differ from an uninterrupted run", exts[e]);
            fl_history_free(h3);
        }
        fl_history_free(h1);
        fl_history_free(h2);
        fl_model_free(full);
        fl_model_free(part);
        fl_model_free(res);
    }
    fl_tensor_free(x);
    fl_tensor_free(y);
}

/* Seed 0 models resume bit-identically (the seed is not in Keras files). */
static void exact_resume(void) {
    fl_tensor *x, *y;
    make_data(&x, &y);
    static const char *exts[] = {".keras", ".h5"};
    for (int e = 0; e < 2; e++) {
        fl_model *full = fl_sequential(fl_input(8), fl_dense(16, .activation = FL_RELU), fl_dropout(0.25f),
                                       fl_batch_normalization(), fl_dense(3, .activation = FL_SOFTMAX));
        fl_model *part = fl_sequential(fl_input(8), fl_dense(16, .activation = FL_RELU), fl_dropout(0.25f),
                                       fl_batch_normalization(), fl_dense(3, .activation = FL_SOFTMAX));
        fl_compile(full, fl_adam(.learning_rate = 0.01f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY);
        fl_compile(part, fl_adam(.learning_rate = 0.01f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY);
        fl_history *h1 = fl_fit(full, x, y, .batch_size = 16, .epochs = 3, .verbose = FL_VERBOSE_SILENT);
        fl_history *h2 = fl_fit(part, x, y, .batch_size = 16, .epochs = 1, .verbose = FL_VERBOSE_SILENT);
        char fn[600];
        snprintf(fn, sizeof fn, "%s/exact%s", tmpdir, exts[e]);
        CHECK(fl_save_model(part, fn) == FL_OK);
        fl_model *res = fl_load_model(fn);
        CHECK_MSG(res != NULL, "%s", fl_last_error());
        if (res) {
            CHECK(fl_optimizer_iterations(fl_model_optimizer(res)) == 8);
            fl_history *h3 = fl_fit(res, x, y, .batch_size = 16, .epochs = 3, .initial_epoch = 1, .verbose = FL_VERBOSE_SILENT);
            CHECK(h3 != NULL);
            CHECK_MSG(same_weights(full, res), "resumed from %s: weights differ from an uninterrupted run", exts[e]);
            CHECK(fl_optimizer_iterations(fl_model_optimizer(res)) == 24);
            fl_history_free(h3);
        }
        fl_history_free(h1);
        fl_history_free(h2);
        fl_model_free(full);
        fl_model_free(part);
        fl_model_free(res);
    }
    fl_tensor_free(x);
    fl_tensor_free(y);
}

/* A functional model built in C (shared layer, merges, two inputs and outputs) round-trips too. */
static void functional_round_trip(void) {
    fl_sym *a = fl_keras_input_named("a", 6), *b = fl_keras_input_named("b", 4, 4, 1);
    fl_layer *shared = fl_dense(5, .activation = FL_TANH);
    fl_sym *fb = fl_call(fl_flatten(), b);
    fl_sym *pb = fl_call(fl_dense(6), fb);
    fl_sym *s1 = fl_call(shared, a), *s2 = fl_call(shared, pb);
    fl_sym *add = fl_call_n(fl_add(), s1, s2), *mul = fl_call_n(fl_multiply(), s1, s2);
    fl_sym *cat = fl_call_n(fl_concatenate(), add, mul, s2);
    fl_sym *o1 = fl_call(fl_dense(3, .activation = FL_SOFTMAX, .name = "cls"), cat);
    fl_sym *o2 = fl_call(fl_dense(1, .name = "reg"), add);
    fl_model *m = fl_model_new(fl_syms(a, b), fl_syms(o1, o2), "two_heads");
    CHECK_MSG(m != NULL, "%s", fl_last_error());
    if (!m) return;
    io x = {2, {fl_tensor_zeros(FL_FLOAT32, 5, 6), fl_tensor_zeros(FL_FLOAT32, 5, 4, 4, 1)}};
    for (int i = 0; i < 2; i++) {
        float *d = fl_tensor_data(x.t[i]);
        for (int64_t k = 0; k < fl_tensor_size(x.t[i]); k++) d[k] = fl_philox_uniform(3, (uint64_t)i, (uint64_t)k) - 0.5f;
    }
    round_trip(m, &x, "c_functional");
    io_free(&x);
    fl_model_free(m);
}

/* One row per kind (issue 45): every layer kind has its Keras class, its default-name base, its build, and
 * a Keras reader/writer row whose class is the kind's, so that a kind added to FL_LAYER_KINDS without its
 * rows fails here, not in a user's model. */
static void test_kind_rows(void) {
    for (int k = 0; k < FL_L_COUNT; k++) {
        const char *cls = fl_layer_kind_class((fl_layer_kind)k);
        CHECK_MSG(cls && strcmp(cls, "?") != 0, "layer kind %d has no Keras class", k);
        CHECK_MSG(fl_layer_kind_base((fl_layer_kind)k) && strcmp(fl_layer_kind_base((fl_layer_kind)k), "?") != 0,
                  "layer kind %d (%s) has no default-name base", k, cls);
        CHECK_MSG(fl_layer_kind_builds((fl_layer_kind)k), "layer kind %d (%s) has no build function", k, cls);
        const char *row = fl_keras_kind_row_class((fl_layer_kind)k);
        CHECK_MSG(row != NULL, "layer kind %d (%s) has no row in keras_layers.c's layer_defs", k, cls);
        CHECK_MSG(!row || strcmp(row, cls) == 0, "layer kind %d: its Keras row reads '%s', the kind's class is '%s'", k,
                  row, cls);
    }
}

int main(int argc, char **argv) {
    test_kind_rows();
    dir = argc > 1 ? argv[1] : "tests/fixtures/keras";
    /* --fixtures-only N: a folder of model files only (tests/fixtures/tf_keras,
     * written by tf.keras 2 itself): their predictions and round trips, at
     * least N of them; the other parts need tools/keras_fixtures.py's folder */
    const bool fixtures_only = argc > 3 && strcmp(argv[2], "--fixtures-only") == 0;
    if (fixtures_only) min_fixtures = atoi(argv[3]);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/flynn_keras_test.XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    char mpath[1024];
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    manifest = json_object_from_file(mpath);
    if (!manifest) {
        fprintf(stderr, "cannot read %s (run tools/keras_fixtures.py)\n", mpath);
        return 1;
    }
    json_object *tol = jget(manifest, "tolerance");
    if (jget(tol, "predictions")) {
        tol_pred_r = json_object_get_double(jget(jget(tol, "predictions"), "rtol"));
        tol_pred_a = json_object_get_double(jget(jget(tol, "predictions"), "atol"));
    }
    if (jget(tol, "step_weights")) {
        tol_step_r = json_object_get_double(jget(jget(tol, "step_weights"), "rtol"));
        tol_step_a = json_object_get_double(jget(jget(tol, "step_weights"), "atol"));
    }
    fixtures();
    if (!fixtures_only) {
        weighted_fixtures();
        bad_fixtures();
        config_refusals();
        damaged_files();
        atomic_saving();
        checkpoint_and_resume();
        exact_resume();
        functional_round_trip();
    }
    json_object_put(manifest);
    /* leave nothing behind */
    DIR *dp = opendir(tmpdir);
    struct dirent *e;
    while (dp && (e = readdir(dp))) {
        if (e->d_name[0] == '.') continue;
        char p[1300];
        snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
        unlink(p);
    }
    if (dp) closedir(dp);
    rmdir(tmpdir);
    return check_report("test_keras_files");
}
