/*
 * test_varlen.c — variable-length inputs (an Input axis of FL_DYNAMIC,
 * Keras's None): models predict and train on data of any length, planned
 * again when the length changes, with the same numbers as a model built for
 * that fixed length with the same weights; buffers are kept when they fit;
 * shapes read back as FL_DYNAMIC and the summary shows None; the file round
 * trip keeps the None; a layer whose weights would follow the length
 * (Flatten then Dense) is refused with Keras's error at build time; a
 * length a layer cannot take is refused naming it, the model unchanged.
 * The values against Keras are in test_keras_files (the varlen_* fixtures).
 */
#include "check.h"
#include "nn/nn.h"

#include <flynn/flynn.h>
#include <stdlib.h>
#include <unistd.h>

static fl_tensor *rnd(uint64_t stream, int ndim, const int64_t *shape) {
    fl_tensor *t = fl_tensor_new(FL_FLOAT32, ndim, shape);
    float *d = fl_tensor_data(t);
    for (int64_t i = 0; i < fl_tensor_size(t); i++) d[i] = fl_philox_uniform(7, stream, (uint64_t)i) * 2 - 1;
    return t;
}

/* Token ids in [0, 20), each sequence padded with zeros after a random length. */
static fl_tensor *tokens(uint64_t stream, int64_t n, int64_t t) {
    fl_tensor *x = fl_tensor_new(FL_INT32, 2, (int64_t[]){n, t});
    int32_t *d = fl_tensor_data(x);
    for (int64_t s = 0; s < n; s++) {
        int64_t len = 1 + (int64_t)(fl_philox_uniform(3, stream, (uint64_t)s) * (float)t);
        for (int64_t i = 0; i < t; i++)
            d[s * t + i] = i < len ? 1 + (int32_t)(fl_philox_uniform(5, stream, (uint64_t)(s * t + i)) * 19) : 0;
    }
    return x;
}

static double max_diff(fl_tensor *a, fl_tensor *b) {
    if (!a || !b || fl_tensor_size(a) != fl_tensor_size(b)) return 1e30;
    double m = 0;
    const float *x = fl_tensor_data(a), *y = fl_tensor_data(b);
    for (int64_t i = 0; i < fl_tensor_size(a); i++) m = fmax(m, fabs((double)x[i] - y[i]));
    return m;
}

/* A Conv1D text CNN: Conv1D, MaxPooling1D, Conv1D "same", Cropping1D,
 * UpSampling1D, GlobalMaxPooling1D, Dense. */
static fl_model *cnn(int64_t len) {
    fl_model *m = fl_sequential(fl_input(len, 5), fl_conv1d(6, 3, .activation = FL_RELU), fl_max_pooling1d(2),
                                fl_conv1d(4, 3, .padding = FL_SAME), fl_up_sampling1d(2), fl_cropping1d(.left = 1),
                                fl_global_max_pooling1d(), fl_dense(3, .activation = FL_SOFTMAX));
    CHECK_MSG(m != NULL, "%s", fl_last_error());
    if (m) fl_model_set_seed(m, 11);
    return m;
}

/* Embedding(mask_zero) -> LSTM(return_sequences) -> LayerNormalization ->
 * self-attention -> Dense on rank 3 -> Bidirectional GRU -> TimeDistributed(Dense)
 * -> GlobalAveragePooling1D (masked) -> Dense. */
static fl_model *seq(int64_t len) {
    fl_sym *x = fl_keras_input_dtype(FL_INT32, len);
    fl_sym *e = fl_call(fl_embedding(20, 8, .mask_zero = true), x);
    fl_sym *h = fl_call(fl_lstm(8, .return_sequences = true), e);
    h = fl_call(fl_layer_normalization(), h);
    fl_sym *a = fl_call_n(fl_multi_head_attention(2, 4), h, h);
    h = fl_call(fl_dense(6, .activation = FL_TANH), a);
    h = fl_call(fl_bidirectional(fl_gru(3, .return_sequences = true)), h);
    h = fl_call(fl_time_distributed(fl_dense(4)), h);
    h = fl_call(fl_global_average_pooling1d(), h);
    fl_sym *y = fl_call(fl_dense(2, .activation = FL_SOFTMAX), h);
    fl_model *m = fl_model_new(fl_syms(x), fl_syms(y), "seq");
    CHECK_MSG(m != NULL, "%s", fl_last_error());
    if (m) fl_model_set_seed(m, 5);
    return m;
}

/* Lengths 5, 9, 5 in a row on one model give what fresh models of those
 * fixed lengths give (the same seed: the same weights). */
static void replans(const char *what, fl_model *(*make)(int64_t), bool ints) {
    fl_model *dyn = make(FL_DYNAMIC);
    if (!dyn) return;
    const int64_t lens[] = {5, 9, 5, 12};
    int64_t rebinds0 = dyn->g.rebinds;
    for (int i = 0; i < 4; i++) {
        int64_t t = lens[i];
        fl_tensor *x = ints ? tokens(100 + (uint64_t)t, 7, t) : rnd(100 + (uint64_t)t, 3, (int64_t[]){7, t, 5});
        fl_model *fixed = make(t);
        fl_tensor *yd = fl_predict(dyn, x, .verbose = FL_VERBOSE_SILENT, .batch_size = 4);
        CHECK_MSG(yd != NULL, "%s at length %lld: %s", what, (long long)t, fl_last_error());
        fl_tensor *yf = fixed ? fl_predict(fixed, x, .verbose = FL_VERBOSE_SILENT, .batch_size = 4) : NULL;
        double d = max_diff(yd, yf);
        CHECK_MSG(d <= 1e-6, "%s at length %lld (call %d): the variable-length model differs from the fixed one by %g",
                  what, (long long)t, i + 1, d);
        fl_tensor_free(yd); fl_tensor_free(yf); fl_tensor_free(x);
        fl_model_free(fixed);
    }
    CHECK_MSG(dyn->g.rebinds - rebinds0 == 4, "%s: %lld rebinds for 4 lengths", what,
              (long long)(dyn->g.rebinds - rebinds0));
    /* the same length again: no new plan */
    fl_tensor *x = ints ? tokens(1, 3, 12) : rnd(1, 3, (int64_t[]){3, 12, 5});
    fl_tensor *y = fl_predict(dyn, x, .verbose = FL_VERBOSE_SILENT);
    CHECK(y != NULL && dyn->g.rebinds - rebinds0 == 4);
    fl_tensor_free(x); fl_tensor_free(y);
    fl_model_free(dyn);
}

/* Going to a shorter length keeps the buffers; a longer one makes them anew. */
static void buffers_reused(void) {
    fl_model *m = cnn(FL_DYNAMIC);
    if (!m) return;
    fl_tensor *x9 = rnd(1, 3, (int64_t[]){8, 9, 5}), *x5 = rnd(2, 3, (int64_t[]){8, 5, 5});
    fl_tensor *y = fl_predict(m, x9, .verbose = FL_VERBOSE_SILENT);
    fl_tensor_free(y);
    float *v9 = m->output->val;
    int64_t cap = m->g.batch_cap;
    y = fl_predict(m, x5, .verbose = FL_VERBOSE_SILENT);
    CHECK(y != NULL && m->g.batch_cap == cap && m->output->val == v9);
    fl_tensor_free(y);
    y = fl_predict(m, x9, .verbose = FL_VERBOSE_SILENT); /* the length-9 buffers are still there */
    CHECK(y != NULL && m->g.batch_cap == cap && m->output->val == v9);
    fl_tensor_free(y);
    fl_tensor *x20 = rnd(3, 3, (int64_t[]){8, 20, 5});
    y = fl_predict(m, x20, .verbose = FL_VERBOSE_SILENT);
    CHECK(y != NULL);
    fl_tensor_free(y);
    fl_tensor_free(x9); fl_tensor_free(x5); fl_tensor_free(x20);
    fl_model_free(m);
}

static double weights_diff(fl_model *a, fl_model *b) {
    double worst = 0;
    for (int l = 0; l < fl_model_num_layers(a); l++) {
        fl_layer *la = fl_model_layer(a, l), *lb = fl_model_layer(b, l);
        for (int k = 0; k < fl_layer_num_weights(la); k++)
            worst = fmax(worst, max_diff(fl_layer_weight(la, k), fl_layer_weight(lb, k)));
    }
    return worst;
}

/* Training on length 6, then on length 10 with validation data of length
 * 6 in the same fit, moves the weights as fixed models of each length do
 * (plain SGD: no optimizer state to carry between the fixed models). */
static void trains(void) {
    fl_model *dyn = seq(FL_DYNAMIC), *f6 = seq(6), *f10 = seq(10);
    if (!dyn || !f6 || !f10) { fl_model_free(dyn); fl_model_free(f6); fl_model_free(f10); return; }
    fl_model *ms[3] = {dyn, f6, f10};
    for (int i = 0; i < 3; i++)
        CHECK(fl_compile(ms[i], fl_sgd(.learning_rate = 0.3f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY) == FL_OK);
    fl_tensor *x6 = tokens(7, 16, 6), *x10 = tokens(8, 16, 10);
    fl_tensor *y = fl_tensor_new(FL_INT32, 1, (int64_t[]){16});
    for (int i = 0; i < 16; i++) ((int32_t *)fl_tensor_data(y))[i] = i % 2;
    fl_history *h = fl_fit(dyn, x6, y, .epochs = 2, .batch_size = 8, .verbose = FL_VERBOSE_SILENT);
    CHECK_MSG(h != NULL, "%s", fl_last_error());
    fl_history_free(h);
    fl_history_free(fl_fit(f6, x6, y, .epochs = 2, .batch_size = 8, .verbose = FL_VERBOSE_SILENT));
    CHECK_MSG(weights_diff(dyn, f6) <= 1e-6, "after length 6: %g", weights_diff(dyn, f6));
    CHECK(fl_save_weights(f6, "/tmp/flynn_varlen_w.weights.h5") == FL_OK);
    CHECK(fl_load_weights(f10, "/tmp/flynn_varlen_w.weights.h5") == FL_OK);
    unlink("/tmp/flynn_varlen_w.weights.h5");
    h = fl_fit(dyn, x10, y, .epochs = 2, .batch_size = 8, .verbose = FL_VERBOSE_SILENT, .validation_x = x6,
               .validation_y = y);
    CHECK_MSG(h != NULL, "%s", fl_last_error());
    fl_history_free(fl_fit(f10, x10, y, .epochs = 2, .batch_size = 8, .verbose = FL_VERBOSE_SILENT));
    CHECK_MSG(weights_diff(dyn, f10) <= 1e-6, "after length 10: %g", weights_diff(dyn, f10));
    /* the validation loss is the length-6 model's evaluation of the same weights */
    float r[2] = {0};
    CHECK(fl_save_weights(f10, "/tmp/flynn_varlen_w.weights.h5") == FL_OK);
    CHECK(fl_load_weights(f6, "/tmp/flynn_varlen_w.weights.h5") == FL_OK);
    unlink("/tmp/flynn_varlen_w.weights.h5");
    CHECK(fl_evaluate(f6, x6, y, r, 2, .verbose = FL_VERBOSE_SILENT) == FL_OK);
    const float *vl = h ? fl_history_get(h, "val_loss") : NULL;
    CHECK(vl != NULL);
    if (vl) CHECK_CLOSE(vl[1], r[0], 1e-5, 1e-6);
    fl_history_free(h);
    fl_model_free(dyn); fl_model_free(f6); fl_model_free(f10);
    fl_tensor_free(x6); fl_tensor_free(x10); fl_tensor_free(y);
}

/* A callback that predicts on data of another length in the middle of an
 * epoch: the fit plans its own length again and trains as without it. */
static fl_tensor *g_other;
static fl_status predict_other(fl_model *m, int64_t batch, fl_logs *logs, void *user) {
    (void)batch; (void)logs; (void)user;
    fl_tensor *y = fl_predict(m, g_other, .verbose = FL_VERBOSE_SILENT);
    fl_tensor_free(y);
    return y ? FL_OK : fl_last_status();
}
static void callback_predicts(void) {
    fl_model *a = seq(FL_DYNAMIC), *b = seq(FL_DYNAMIC);
    if (!a || !b) { fl_model_free(a); fl_model_free(b); return; }
    fl_tensor *x = tokens(21, 24, 8), *y = fl_tensor_new(FL_INT32, 1, (int64_t[]){24});
    for (int i = 0; i < 24; i++) ((int32_t *)fl_tensor_data(y))[i] = (i / 3) % 2;
    g_other = tokens(22, 40, 3); /* shorter, and more samples than a batch */
    fl_callback cb = {.on_batch_end = predict_other};
    const float *loss[2] = {0};
    fl_history *h[2];
    fl_model *ms[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        CHECK(fl_compile(ms[i], fl_adam(.learning_rate = 0.01f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY) == FL_OK);
        h[i] = fl_fit(ms[i], x, y, .epochs = 2, .batch_size = 8, .verbose = FL_VERBOSE_SILENT,
                      .callbacks = i ? (fl_callback *const[]){&cb, NULL} : NULL);
        CHECK_MSG(h[i] != NULL, "%s", fl_last_error());
        loss[i] = h[i] ? fl_history_get(h[i], "loss") : NULL;
    }
    if (loss[0] && loss[1]) CHECK_MSG(loss[0][1] == loss[1][1], "loss %.9g, with the callback %.9g", loss[0][1], loss[1][1]);
    CHECK_MSG(weights_diff(a, b) == 0, "the callback's predictions changed training: %g", weights_diff(a, b));
    fl_history_free(h[0]); fl_history_free(h[1]);
    fl_tensor_free(x); fl_tensor_free(y); fl_tensor_free(g_other);
    fl_model_free(a); fl_model_free(b);
}

/* One SGD step on a length-7 batch: the same weights as the fixed model's. */
static void one_step(void) {
    fl_model *dyn = seq(FL_DYNAMIC), *fx = seq(7);
    if (!dyn || !fx) { fl_model_free(dyn); fl_model_free(fx); return; }
    fl_tensor *x = tokens(9, 8, 7), *y = fl_tensor_new(FL_INT32, 1, (int64_t[]){8});
    for (int i = 0; i < 8; i++) ((int32_t *)fl_tensor_data(y))[i] = (i * 7) % 2;
    fl_model *ms[2] = {dyn, fx};
    for (int i = 0; i < 2; i++) {
        CHECK(fl_compile(ms[i], fl_sgd(.learning_rate = 0.5f), FL_SPARSE_CATEGORICAL_CROSSENTROPY) == FL_OK);
        fl_history *h = fl_fit(ms[i], x, y, .epochs = 1, .batch_size = 8, .verbose = FL_VERBOSE_SILENT, .no_shuffle = true);
        CHECK_MSG(h != NULL, "%s", fl_last_error());
        fl_history_free(h);
    }
    double worst = weights_diff(dyn, fx);
    CHECK_MSG(worst <= 1e-6, "after one step the weights differ by %g", worst);
    fl_model_free(dyn); fl_model_free(fx);
    fl_tensor_free(x); fl_tensor_free(y);
}

/* Shapes read back with FL_DYNAMIC, the summary shows None, and a file
 * keeps the None axis. */
static void shapes_and_files(void) {
    fl_model *m = seq(FL_DYNAMIC);
    if (!m) return;
    int64_t s[FL_MAX_DIMS];
    CHECK(fl_model_input_shape(m, 0, s) == 1 && s[0] == FL_DYNAMIC);
    CHECK(fl_model_output_shape(m, 0, s) == 1 && s[0] == 2);
    char path[] = "/tmp/flynn_varlen_XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w+") : NULL;
    CHECK(f != NULL);
    if (f) {
        fl_model_summary(m, f);
        rewind(f);
        char buf[16384];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        CHECK_STR_CONTAINS(buf, "(None, None)");
        CHECK_STR_CONTAINS(buf, "(None, None, 8)");
        CHECK_STR_CONTAINS(buf, "(None, None, 6)");
        fclose(f);
    }
    unlink(path);
    const char *files[] = {"/tmp/flynn_varlen.keras", "/tmp/flynn_varlen.h5"};
    fl_tensor *x = tokens(4, 5, 11);
    fl_tensor *y0 = fl_predict(m, x, .verbose = FL_VERBOSE_SILENT);
    for (int i = 0; i < 2; i++) {
        CHECK_MSG(fl_save_model(m, files[i]) == FL_OK, "%s", fl_last_error());
        fl_model *r = fl_load_model(files[i]);
        CHECK_MSG(r != NULL, "%s: %s", files[i], fl_last_error());
        if (!r) continue;
        CHECK(fl_model_input_shape(r, 0, s) == 1 && s[0] == FL_DYNAMIC);
        fl_tensor *y1 = fl_predict(r, x, .verbose = FL_VERBOSE_SILENT);
        CHECK_MSG(max_diff(y0, y1) == 0, "%s: predictions differ after the round trip", files[i]);
        fl_tensor_free(y1);
        fl_model_free(r);
        unlink(files[i]);
    }
    fl_tensor_free(x); fl_tensor_free(y0);
    fl_model_free(m);
}

/* Refusals: a weight that follows the length (Keras's error), a length too
 * short for the convolutions (the model stays usable), the wrong rank. */
static void refusals(void) {
    fl_model *m = fl_sequential(fl_input(FL_DYNAMIC, 8), fl_flatten(), fl_dense(3, .name = "head"));
    CHECK(m == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "layer 'head' (Dense)");
    CHECK_STR_CONTAINS(fl_last_error(), "Shapes used to initialize variables must be fully-defined (no `None` "
                                        "dimensions). Received: shape=(None, 3) for variable path='head/kernel'");
    fl_model_free(m);
    fl_sym *x = fl_keras_input(FL_DYNAMIC, 4);
    fl_sym *h = fl_call(fl_dense(3, .name = "over_time"), fl_call(fl_permute(2, 1), x));
    m = fl_model_new(fl_syms(x), fl_syms(h), "dense_over_time");
    CHECK(m == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "Received: shape=(None, 3) for variable path='over_time/kernel'");
    fl_model_free(m);
    /* a Reshape to a fixed size runs at one length only */
    m = fl_sequential(fl_input(FL_DYNAMIC, 2), fl_reshape(8), fl_dense(2));
    CHECK(m == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "layer 'reshape'");
    fl_model_free(m);
    /* TimeDistributed around a layer it runs step by step: one graph node per step */
    m = fl_sequential(fl_input(FL_DYNAMIC, 2, 3), fl_time_distributed(fl_flatten(), .name = "td"), fl_dense(2));
    CHECK(m == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "layer 'td' builds other ops for this length of the None axis");
    fl_model_free(m);
    CHECK(fl_input(0, 3) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "expected > 0 or FL_DYNAMIC");

    m = cnn(FL_DYNAMIC);
    if (!m) return;
    fl_tensor *x9 = rnd(1, 3, (int64_t[]){4, 9, 5}), *x3 = rnd(2, 3, (int64_t[]){4, 3, 5}), *bad = rnd(3, 3, (int64_t[]){4, 9, 6});
    fl_tensor *y9 = fl_predict(m, x9, .verbose = FL_VERBOSE_SILENT);
    fl_tensor *y = fl_predict(m, x3, .verbose = FL_VERBOSE_SILENT); /* Conv1D 3 then MaxPooling1D 2: too short */
    CHECK(y == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "fl_predict: model 'sequential' cannot run on inputs of this length");
    CHECK_STR_CONTAINS(fl_last_error(), "(3, 5)");
    y = fl_predict(m, bad, .verbose = FL_VERBOSE_SILENT);
    CHECK(y == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "x has shape (4, 9, 6), model 'sequential' expects (None, None, 5)");
    y = fl_predict(m, x9, .verbose = FL_VERBOSE_SILENT); /* unchanged after the refusals */
    CHECK(y != NULL && max_diff(y, y9) == 0);
    fl_tensor_free(y); fl_tensor_free(y9); fl_tensor_free(x9); fl_tensor_free(x3); fl_tensor_free(bad);
    fl_model_free(m);
}

int main(void) {
    replans("text CNN", cnn, false);
    replans("Embedding + LSTM + attention + Bidirectional GRU", seq, true);
    buffers_reused();
    one_step();
    trains();
    callback_predicts();
    shapes_and_files();
    refusals();
    return check_report("test_varlen");
}
