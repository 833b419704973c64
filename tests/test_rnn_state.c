/*
 * test_rnn_state.c — layer calls with several outputs and the recurrent
 * layers' states in the C API (fl_output, initial states as fl_call_n's
 * later inputs): what the outputs hold, that the states' gradients reach
 * the layers that made them, shared layers' per-call states, Bidirectional
 * merge_mode None, the file round trip, the summary's tensor indices, and
 * the refusals with their messages. The values against Keras are in
 * test_keras_files (rnn_seq2seq, rnn_states, train_rnn_states_sgd); the
 * op's gradients in test_ops (test_rnn_st).
 */
#include "check.h"

#include <flynn/flynn.h>
#include <stdlib.h>
#include <unistd.h>

static fl_tensor *rnd(uint64_t stream, int ndim, const int64_t *shape) {
    fl_tensor *t = fl_tensor_new(FL_FLOAT32, ndim, shape);
    float *d = fl_tensor_data(t);
    for (int64_t i = 0; i < fl_tensor_size(t); i++) d[i] = fl_philox_uniform(7, stream, (uint64_t)i) * 2 - 1;
    return t;
}

static double max_diff(fl_tensor *a, fl_tensor *b) {
    double m = fl_tensor_size(a) == fl_tensor_size(b) ? 0 : 1e30;
    const float *x = fl_tensor_data(a), *y = fl_tensor_data(b);
    for (int64_t i = 0; m < 1e30 && i < fl_tensor_size(a); i++) m = fmax(m, fabs((double)x[i] - y[i]));
    return m;
}

/* An LSTM returning sequences and states: h is the last step's output, and
 * a second call of the same layer has states of its own. */
static void outputs_hold_states(void) {
    fl_sym *a = fl_keras_input(5, 3), *b = fl_keras_input(5, 3);
    fl_layer *lstm = fl_lstm(4, .return_sequences = true, .return_state = true);
    fl_sym *ca = fl_call(lstm, a), *cb = fl_call(lstm, b);
    CHECK(fl_output(ca, 0) == ca && fl_output(ca, 1) == fl_output(ca, 1) && fl_output(ca, 1) != fl_output(cb, 1));
    fl_model *m = fl_model_new(fl_syms(a, b), fl_syms(ca, fl_output(ca, 1), fl_output(ca, 2), fl_output(cb, 1)), "states");
    CHECK_MSG(m != NULL, "%s", fl_last_error());
    if (!m) return;
    int64_t sh[4];
    CHECK(fl_model_num_outputs(m) == 4 && fl_model_output_shape(m, 1, sh) == 1 && sh[0] == 4);
    fl_tensor *xa = rnd(1, 3, (int64_t[]){6, 5, 3}), *xb = rnd(2, 3, (int64_t[]){6, 5, 3}), *ys[4] = {0};
    const fl_tensor *xs[2] = {xa, xb};
    CHECK(fl_predict_multi(m, xs, 2, ys, 4, .verbose = FL_VERBOSE_SILENT) == FL_OK);
    const float *y = fl_tensor_data(ys[0]), *h = fl_tensor_data(ys[1]), *c = fl_tensor_data(ys[2]), *hb = fl_tensor_data(ys[3]);
    double d = 0, cmax = 0, other = 0;
    for (int s = 0; s < 6; s++)
        for (int j = 0; j < 4; j++) {
            d = fmax(d, fabs(y[(s * 5 + 4) * 4 + j] - h[s * 4 + j]));
            cmax = fmax(cmax, fabs(c[s * 4 + j]));
            other = fmax(other, fabs(hb[s * 4 + j] - h[s * 4 + j]));
        }
    CHECK_MSG(d == 0, "h differs from the last step's output by %g", d);
    CHECK_MSG(cmax > 1e-3 && other > 1e-3, "c is %g at most, the second call's h differs by %g", cmax, other);
    /* the summary names the tensor each call takes */
    char path[] = "/tmp/flynn_rnn_state_XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w+") : NULL;
    CHECK(f != NULL);
    if (f) {
        fl_model *m2 = NULL;
        fl_sym *x = fl_keras_input(5, 3), *e = fl_call(fl_gru(4, .return_state = true), x);
        fl_sym *o = fl_call(fl_dense(2), fl_output(e, 1));
        m2 = fl_model_new(fl_syms(x), fl_syms(o), "summary");
        CHECK(m2 && fl_model_summary(m2, f) == FL_OK);
        char buf[8192] = "";
        rewind(f);
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        CHECK_STR_CONTAINS(buf, "gru[0][1]");
        CHECK_STR_CONTAINS(buf, "[(None, 4),"); /* the wrapped cell of "[(None, 4), (None, 4)]", as Keras */
        fclose(f);
        unlink(path);
        fl_model_free(m2);
    }
    for (int i = 0; i < 4; i++) fl_tensor_free(ys[i]);
    fl_tensor_free(xa);
    fl_tensor_free(xb);
    fl_model_free(m);
}

/* keras.io's lstm_seq2seq, trained on one input (the decoder reads the same
 * sequence): the encoder reaches the loss only through its states, so one
 * step changes its weights only if their gradients flow back. Saved and
 * loaded, it predicts the same. */
static void seq2seq_trains_and_round_trips(void) {
    fl_sym *x = fl_keras_input(5, 3);
    fl_layer *enc_l = fl_lstm(4, .return_state = true, .name = "encoder");
    fl_sym *enc = fl_call(enc_l, x);
    fl_sym *dec = fl_call_n(fl_lstm(4, .return_sequences = true, .return_state = true), x, fl_output(enc, 1),
                            fl_output(enc, 2));
    fl_sym *y = fl_call(fl_dense(3, .activation = FL_SOFTMAX), dec);
    fl_model *m = fl_model_new(fl_syms(x), fl_syms(y), "seq2seq");
    CHECK_MSG(m != NULL, "%s", fl_last_error());
    if (!m) return;
    CHECK(fl_compile(m, fl_sgd(.learning_rate = 0.5f), FL_SPARSE_CATEGORICAL_CROSSENTROPY) == FL_OK);
    fl_tensor *tx = rnd(3, 3, (int64_t[]){8, 5, 3}), *ty = fl_tensor_new(FL_FLOAT32, 2, (int64_t[]){8, 5});
    for (int i = 0; i < 40; i++) ((float *)fl_tensor_data(ty))[i] = (float)(i % 3);
    int64_t n = fl_tensor_size(fl_layer_weight(enc_l, 0));
    float *before = malloc((size_t)n * sizeof(float));
    memcpy(before, fl_tensor_data(fl_layer_weight(enc_l, 0)), (size_t)n * sizeof(float));
    fl_history *h = fl_fit(m, tx, ty, .batch_size = 8, .epochs = 1, .verbose = FL_VERBOSE_SILENT);
    CHECK_MSG(h != NULL, "%s", fl_last_error());
    fl_history_free(h);
    const float *after = fl_tensor_data(fl_layer_weight(enc_l, 0));
    double moved = 0;
    for (int64_t i = 0; i < n; i++) moved = fmax(moved, fabs(after[i] - before[i]));
    CHECK_MSG(moved > 1e-4, "the encoder's kernel moved by %g: no gradient through its states", moved);
    free(before);
    char path[] = "/tmp/flynn_rnn_state_XXXXXX.keras";
    int fd = mkstemps(path, 6);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    CHECK(fl_save_model(m, path) == FL_OK);
    fl_model *m2 = fl_load_model(path);
    CHECK_MSG(m2 != NULL, "%s", fl_last_error());
    if (m2) {
        fl_tensor *p1 = fl_predict(m, tx, .verbose = FL_VERBOSE_SILENT), *p2 = fl_predict(m2, tx, .verbose = FL_VERBOSE_SILENT);
        CHECK(p1 && p2 && max_diff(p1, p2) == 0);
        fl_tensor_free(p1);
        fl_tensor_free(p2);
        fl_model_free(m2);
    }
    unlink(path);
    fl_tensor_free(tx);
    fl_tensor_free(ty);
    fl_model_free(m);
}

/* Bidirectional merge_mode None: y_f and y_b are the halves of the
 * concatenating wrapper's output (the same seed makes the same weights). */
static void bidirectional_merge_none(void) {
    fl_tensor *xt = rnd(4, 3, (int64_t[]){5, 6, 2}), *outs[3] = {0};
    fl_sym *x = fl_keras_input(6, 2);
    fl_sym *b = fl_call(fl_bidirectional(fl_gru(3, .return_sequences = true), .merge_mode = FL_MERGE_NONE), x);
    fl_model *m = fl_model_new(fl_syms(x), fl_syms(b, fl_output(b, 1)), "none");
    fl_sym *x2 = fl_keras_input(6, 2);
    fl_model *mc = fl_model_new(fl_syms(x2), fl_syms(fl_call(fl_bidirectional(fl_gru(3, .return_sequences = true)), x2)),
                                "concat");
    CHECK_MSG(m && mc, "%s", fl_last_error());
    if (m && mc) {
        fl_model_set_seed(m, 5);
        fl_model_set_seed(mc, 5);
        const fl_tensor *xs[1] = {xt};
        CHECK(fl_predict_multi(m, xs, 1, outs, 2, .verbose = FL_VERBOSE_SILENT) == FL_OK);
        outs[2] = fl_predict(mc, xt, .verbose = FL_VERBOSE_SILENT);
        CHECK(outs[0] && outs[1] && outs[2]);
        double d = outs[2] ? 0 : 1;
        for (int r = 0; outs[2] && r < 30; r++)
            for (int j = 0; j < 3; j++) {
                d = fmax(d, fabs(((float *)fl_tensor_data(outs[0]))[r * 3 + j] - ((float *)fl_tensor_data(outs[2]))[r * 6 + j]));
                d = fmax(d, fabs(((float *)fl_tensor_data(outs[1]))[r * 3 + j] - ((float *)fl_tensor_data(outs[2]))[r * 6 + 3 + j]));
            }
        CHECK_MSG(d == 0, "merge_mode None differs from the halves of concat by %g", d);
    }
    for (int i = 0; i < 3; i++) fl_tensor_free(outs[i]);
    fl_tensor_free(xt);
    fl_model_free(m);
    fl_model_free(mc);
}

static void refusals(void) {
    fl_sym *x = fl_keras_input(5, 3), *c = fl_call(fl_lstm(4, .return_state = true, .name = "enc"), x);
    CHECK(fl_output(c, 3) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "fl_output: layer 'enc' (LSTM) has 3 outputs, there is no output 3");
    CHECK(fl_output(fl_output(c, 1), 1) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "pass the call itself");
    fl_sym *x2 = fl_keras_input(5, 3), *g = fl_call(fl_gru(4, .name = "plain"), x2);
    CHECK(fl_output(g, 1) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "layer 'plain' (GRU) has 1 output, there is no output 1 (its final states need "
                                        "return_state)");
    fl_model_free(fl_model_new(fl_syms(x2), fl_syms(g), "plain")); /* frees its calls */
    /* an LSTM given h but not c */
    fl_sym *d = fl_call_n(fl_lstm(4, .name = "dec"), x, fl_output(c, 1));
    CHECK(fl_model_new(fl_syms(x), fl_syms(d), "m") == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "layer 'dec' (LSTM) takes one input, or one input and its 2 initial states "
                                        "(initial_state: h, c), it was given 2");
    /* a state of the wrong size */
    x = fl_keras_input(5, 3);
    fl_sym *h5 = fl_call(fl_dense(5), fl_call(fl_flatten(), x));
    d = fl_call_n(fl_gru(4, .name = "g4"), x, h5);
    CHECK(fl_model_new(fl_syms(x), fl_syms(d), "m") == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "layer 'g4' (GRU): initial state h has shape (None, 5), expected (batch, 4)");
    /* Sequential cannot chain several outputs (nor can Keras's) */
    CHECK(fl_sequential(fl_input(5, 3), fl_lstm(4, .return_state = true, .name = "s")) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "layer 's' (LSTM) has 3 outputs (return_state or merge_mode None); use it in "
                                        "a functional model");
}

int main(void) {
    outputs_hold_states();
    seq2seq_trains_and_round_trips();
    bidirectional_merge_none();
    refusals();
    return check_report("test_rnn_state");
}
