/*
 * test_fit_weights.c — fl_fit_multi / fl_evaluate_multi (a model with
 * several inputs) and fit's sample_weight and class_weight: the semantics
 * that follow from Keras's (weights of 1 change nothing, a weight of 2 is
 * the gradient doubled, class_weight is the sample_weight of each sample's
 * class, a zero weight drops a sample from the sum but not from the
 * divisor, validation_split splits the weights and leaves class weights to
 * training, shuffling and the split take the same samples of every input)
 * and the refusals, each naming what and where. The numbers against Keras
 * itself are in test_keras_files (tools/keras_fixtures.py WEIGHTED).
 */
#include "check.h"

#include <flynn/flynn.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N = 40, F = 5, C = 3 };

static fl_tensor *randn(uint64_t seed, int64_t n, int64_t f) {
    fl_tensor *t = fl_tensor_zeros(FL_FLOAT32, n, f);
    float *v = fl_tensor_data(t);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n * f; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    return t;
}

static fl_tensor *labels(int64_t n) {
    fl_tensor *y = fl_tensor_zeros(FL_INT32, n);
    int32_t *v = fl_tensor_data(y);
    for (int64_t i = 0; i < n; i++) v[i] = (int32_t)((i * 7 + i / 3) % C);
    return y;
}

static fl_tensor *weights(int64_t n, float base) {
    fl_tensor *w = fl_tensor_zeros(FL_FLOAT32, n);
    float *v = fl_tensor_data(w);
    for (int64_t i = 0; i < n; i++) v[i] = base;
    return w;
}

static fl_model *mlp(float lr, fl_loss loss) {
    fl_model *m = fl_sequential(fl_input(F), fl_dense(6, .activation = FL_TANH), fl_dense(C, .activation = FL_SOFTMAX));
    fl_model_set_seed(m, 5);
    fl_compile(m, fl_sgd(.learning_rate = lr), loss, FL_ACCURACY);
    return m;
}

/* Largest |a - b| over every weight of two models of the same layers. */
static double weight_diff(fl_model *a, fl_model *b) {
    double d = 0;
    for (int i = 0; i < fl_model_num_layers(a); i++)
        for (int k = 0; k < fl_layer_num_weights(fl_model_layer(a, i)); k++) {
            const fl_tensor *wa = fl_layer_weight(fl_model_layer(a, i), k), *wb = fl_layer_weight(fl_model_layer(b, i), k);
            const float *pa = fl_tensor_cdata(wa), *pb = fl_tensor_cdata(wb);
            for (int64_t j = 0; j < fl_tensor_size(wa); j++) d = fmax(d, fabs((double)pa[j] - pb[j]));
        }
    return d;
}

static void semantics(void) {
    fl_tensor *x = randn(1, N, F), *y = labels(N), *ones = weights(N, 1.0f), *twos = weights(N, 2.0f);
    /* weights of 1 change nothing; a weight of 2 is SGD at twice the learning rate (both exact in float) */
    fl_model *plain = mlp(0.1f, FL_SPARSE_CATEGORICAL_CROSSENTROPY), *one = mlp(0.1f, FL_SPARSE_CATEGORICAL_CROSSENTROPY);
    fl_model *two = mlp(0.1f, FL_SPARSE_CATEGORICAL_CROSSENTROPY), *fast = mlp(0.2f, FL_SPARSE_CATEGORICAL_CROSSENTROPY);
    fl_history *h[4] = {
        fl_fit(plain, x, y, .batch_size = 8, .epochs = 2, .verbose = FL_VERBOSE_SILENT),
        fl_fit(one, x, y, .batch_size = 8, .epochs = 2, .verbose = FL_VERBOSE_SILENT, .sample_weight = ones),
        fl_fit(two, x, y, .batch_size = 8, .epochs = 2, .verbose = FL_VERBOSE_SILENT, .sample_weight = twos),
        fl_fit(fast, x, y, .batch_size = 8, .epochs = 2, .verbose = FL_VERBOSE_SILENT)};
    for (int i = 0; i < 4; i++) CHECK_MSG(h[i] != NULL, "fit %d: %s", i, fl_last_error());
    CHECK_MSG(weight_diff(plain, one) == 0, "sample_weight 1: weights differ by %g", weight_diff(plain, one));
    CHECK_MSG(weight_diff(two, fast) == 0, "sample_weight 2 vs twice the learning rate: %g", weight_diff(two, fast));
    /* evaluate: weights of 2 double the loss and leave the accuracy */
    float r1[2], r2[2], r0[2];
    CHECK(fl_evaluate(plain, x, y, r1, 2, .verbose = FL_VERBOSE_SILENT) == FL_OK);
    CHECK(fl_evaluate(plain, x, y, r2, 2, .verbose = FL_VERBOSE_SILENT, .sample_weight = twos) == FL_OK);
    CHECK_CLOSE(r2[0], 2.0 * r1[0], 1e-6, 0);
    CHECK_MSG(r2[1] == r1[1], "the compiled accuracy is unweighted (Keras's metrics): %g vs %g", r2[1], r1[1]);
    /* zero weights: the sum drops those samples, the divisor does not (sum_over_batch_size) */
    fl_tensor *half = weights(N, 1.0f), *xh = randn(1, N / 2, F), *yh = labels(N / 2);
    for (int i = N / 2; i < N; i++) ((float *)fl_tensor_data(half))[i] = 0.0f;
    memcpy(fl_tensor_data(xh), fl_tensor_cdata(x), sizeof(float) * (N / 2) * F);
    CHECK(fl_evaluate(plain, x, y, r0, 2, .verbose = FL_VERBOSE_SILENT, .sample_weight = half, .batch_size = 8) == FL_OK);
    CHECK(fl_evaluate(plain, xh, yh, r1, 2, .verbose = FL_VERBOSE_SILENT, .batch_size = 8) == FL_OK);
    CHECK_CLOSE(r0[0], r1[0] / 2.0, 1e-6, 1e-7);
    /* class_weight is the sample_weight of each sample's class; one-hot y by its argmax */
    fl_tensor *sw = weights(N, 1.0f), *yo = fl_one_hot(y, C);
    const float cw[3] = {0.5f, 3.0f, 1.25f};
    for (int i = 0; i < N; i++) ((float *)fl_tensor_data(sw))[i] = cw[((const int32_t *)fl_tensor_cdata(y))[i]];
    fl_model *a = mlp(0.1f, FL_SPARSE_CATEGORICAL_CROSSENTROPY), *b = mlp(0.1f, FL_SPARSE_CATEGORICAL_CROSSENTROPY);
    fl_model *c = mlp(0.1f, FL_CATEGORICAL_CROSSENTROPY), *d = mlp(0.1f, FL_CATEGORICAL_CROSSENTROPY);
    fl_history *ha = fl_fit(a, x, y, .batch_size = 8, .verbose = FL_VERBOSE_SILENT, .class_weight = cw, .num_class_weights = 3);
    fl_history *hb = fl_fit(b, x, y, .batch_size = 8, .verbose = FL_VERBOSE_SILENT, .sample_weight = sw);
    fl_history *hc = fl_fit(c, x, yo, .batch_size = 8, .verbose = FL_VERBOSE_SILENT, .class_weight = cw, .num_class_weights = 3);
    fl_history *hd = fl_fit(d, x, yo, .batch_size = 8, .verbose = FL_VERBOSE_SILENT, .sample_weight = sw);
    CHECK_MSG(ha && hb && hc && hd, "%s", fl_last_error());
    CHECK_MSG(weight_diff(a, b) == 0, "class_weight vs its sample_weight (sparse): %g", weight_diff(a, b));
    CHECK_MSG(weight_diff(c, d) == 0, "class_weight vs its sample_weight (one-hot): %g", weight_diff(c, d));
    /* a class without a weight weighs 1: {0: 0.5} alone is (0.5, 1, 1) */
    fl_model *e = mlp(0.1f, FL_SPARSE_CATEGORICAL_CROSSENTROPY), *f = mlp(0.1f, FL_SPARSE_CATEGORICAL_CROSSENTROPY);
    const float cw1[1] = {0.5f}, cw3[3] = {0.5f, 1.0f, 1.0f};
    fl_history *he = fl_fit(e, x, y, .batch_size = 8, .verbose = FL_VERBOSE_SILENT, .class_weight = cw1, .num_class_weights = 1);
    fl_history *hf = fl_fit(f, x, y, .batch_size = 8, .verbose = FL_VERBOSE_SILENT, .class_weight = cw3, .num_class_weights = 3);
    CHECK_MSG(he && hf && weight_diff(e, f) == 0, "a class missing from class_weight weighs 1: %s", fl_last_error());
    /* validation_split: the sample weights are split with x and y; class weights stay with training */
    fl_model *g = mlp(0.1f, FL_SPARSE_CATEGORICAL_CROSSENTROPY);
    fl_history *hg = fl_fit(g, x, y, .batch_size = 8, .verbose = FL_VERBOSE_SILENT, .sample_weight = twos,
                            .validation_split = 0.25f);
    fl_tensor *xv = randn(1, 10, F), *yv = labels(10), *wv = weights(10, 2.0f);
    memcpy(fl_tensor_data(xv), (const float *)fl_tensor_cdata(x) + 30 * F, sizeof(float) * 10 * F);
    memcpy(fl_tensor_data(yv), (const int32_t *)fl_tensor_cdata(y) + 30, sizeof(int32_t) * 10);
    CHECK(hg && fl_evaluate(g, xv, yv, r0, 2, .verbose = FL_VERBOSE_SILENT, .sample_weight = wv) == FL_OK);
    if (hg) CHECK_CLOSE(fl_history_get(hg, "val_loss")[0], r0[0], 1e-6, 1e-7);
    fl_model *k = mlp(0.1f, FL_SPARSE_CATEGORICAL_CROSSENTROPY);
    fl_history *hk = fl_fit(k, x, y, .batch_size = 8, .verbose = FL_VERBOSE_SILENT, .class_weight = cw,
                            .num_class_weights = 3, .validation_split = 0.25f);
    CHECK(hk && fl_evaluate(k, xv, yv, r0, 2, .verbose = FL_VERBOSE_SILENT) == FL_OK);
    if (hk) CHECK_CLOSE(fl_history_get(hk, "val_loss")[0], r0[0], 1e-6, 1e-7);
    fl_history *all[] = {h[0], h[1], h[2], h[3], ha, hb, hc, hd, he, hf, hg, hk};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) fl_history_free(all[i]);
    fl_model *ms[] = {plain, one, two, fast, a, b, c, d, e, f, g, k};
    for (size_t i = 0; i < sizeof ms / sizeof *ms; i++) fl_model_free(ms[i]);
    fl_tensor *ts[] = {x, y, ones, twos, half, xh, yh, sw, yo, xv, yv, wv};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) fl_tensor_free(ts[i]);
}

/* Two inputs concatenated into a Dense are one input of the concatenated
 * features: fl_fit_multi (shuffled, validation_split) trains the two-input
 * model exactly as fl_fit trains the one-input model with the same weights. */
static void two_inputs(void) {
    fl_sym *ia = fl_keras_input_named("left", 3), *ib = fl_keras_input_named("right", 2);
    fl_sym *o = fl_call(fl_dense(C, .activation = FL_SOFTMAX, .name = "head"), fl_call_n(fl_concatenate(), ia, ib));
    fl_model *two = fl_model_new(fl_syms(ia, ib), fl_syms(o), NULL);
    fl_model *one = fl_sequential(fl_input(5), fl_dense(C, .activation = FL_SOFTMAX, .name = "head"));
    CHECK_MSG(two && one, "%s", fl_last_error());
    if (!two || !one) return;
    fl_model_set_seed(two, 9);
    fl_model_set_seed(one, 9);
    fl_layer *lt = fl_model_get_layer(two, "head"), *lo = fl_model_get_layer(one, "head");
    for (int k = 0; k < 2; k++) CHECK(fl_layer_set_weight(lo, k, fl_layer_weight(lt, k)) == FL_OK);
    fl_compile(two, fl_sgd(.learning_rate = 0.1f, .momentum = 0.9f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY);
    fl_compile(one, fl_sgd(.learning_rate = 0.1f, .momentum = 0.9f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY);
    fl_tensor *x = randn(3, N, 5), *xa = fl_tensor_zeros(FL_FLOAT32, N, 3), *xb = fl_tensor_zeros(FL_FLOAT32, N, 2);
    fl_tensor *y = labels(N), *sw = weights(N, 1.0f);
    for (int i = 0; i < N; i++) {
        memcpy((float *)fl_tensor_data(xa) + i * 3, (const float *)fl_tensor_cdata(x) + i * 5, 3 * sizeof(float));
        memcpy((float *)fl_tensor_data(xb) + i * 2, (const float *)fl_tensor_cdata(x) + i * 5 + 3, 2 * sizeof(float));
        ((float *)fl_tensor_data(sw))[i] = (float)(i % 4) * 0.5f;
    }
    const fl_tensor *xs[2] = {xa, xb};
    fl_history *ht = fl_fit_multi(two, xs, 2, y, .batch_size = 8, .epochs = 3, .validation_split = 0.2f,
                                  .verbose = FL_VERBOSE_SILENT, .sample_weight = sw);
    fl_history *ho = fl_fit(one, x, y, .batch_size = 8, .epochs = 3, .validation_split = 0.2f,
                            .verbose = FL_VERBOSE_SILENT, .sample_weight = sw);
    CHECK_MSG(ht && ho, "%s", fl_last_error());
    if (ht && ho) {
        for (int e = 0; e < 3; e++) {
            CHECK_CLOSE(fl_history_get(ht, "loss")[e], fl_history_get(ho, "loss")[e], 1e-6, 1e-7);
            CHECK_CLOSE(fl_history_get(ht, "val_loss")[e], fl_history_get(ho, "val_loss")[e], 1e-6, 1e-7);
        }
        for (int k = 0; k < 2; k++) {
            const float *a = fl_tensor_cdata(fl_layer_weight(lt, k)), *b = fl_tensor_cdata(fl_layer_weight(lo, k));
            for (int64_t j = 0; j < fl_tensor_size(fl_layer_weight(lt, k)); j++) CHECK_CLOSE(a[j], b[j], 1e-5, 1e-6);
        }
    }
    float rt[2], ro[2];
    CHECK(fl_evaluate_multi(two, xs, 2, y, rt, 2, .verbose = FL_VERBOSE_SILENT, .sample_weight = sw) == FL_OK);
    CHECK(fl_evaluate(one, x, y, ro, 2, .verbose = FL_VERBOSE_SILENT, .sample_weight = sw) == FL_OK);
    CHECK_CLOSE(rt[0], ro[0], 1e-6, 1e-7);
    CHECK_CLOSE(rt[1], ro[1], 0, 1e-7);
    /* refusals that name the input */
    float r[2];
    CHECK(fl_evaluate(two, xa, y, r, 2, .verbose = FL_VERBOSE_SILENT) != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "has 2 inputs ('left', 'right'), given 1 array: give one array per input");
    const fl_tensor *swapped[2] = {xb, xa};
    CHECK(fl_fit_multi(two, swapped, 2, y, .verbose = FL_VERBOSE_SILENT) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "fl_fit_multi, input 0 'left': x has shape (40, 2), model '");
    fl_tensor *short_b = fl_tensor_zeros(FL_FLOAT32, N - 1, 2);
    const fl_tensor *ragged[2] = {xa, short_b};
    CHECK(fl_fit_multi(two, ragged, 2, y, .verbose = FL_VERBOSE_SILENT) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "input 1 'right' has 39 samples, input 0 'left' has 40");
    const fl_tensor *vxs[2] = {xa, xb};
    CHECK(fl_fit_multi(two, xs, 2, y, .verbose = FL_VERBOSE_SILENT, .validation_xs = vxs) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "validation_xs and validation_y must be given together");
    fl_history *hv = fl_fit_multi(two, xs, 2, y, .verbose = FL_VERBOSE_SILENT, .validation_xs = vxs, .validation_y = y,
                                  .validation_sample_weight = sw);
    CHECK_MSG(hv && fl_history_get(hv, "val_loss") != NULL, "%s", fl_last_error());
    fl_history_free(hv);
    fl_history_free(ht);
    fl_history_free(ho);
    fl_tensor *ts[] = {x, xa, xb, y, sw, short_b};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) fl_tensor_free(ts[i]);
    fl_model_free(two);
    fl_model_free(one);
}

static void refusals(void) {
    fl_tensor *x = randn(1, N, F), *y = labels(N), *w = weights(N, 1.0f), *short_w = weights(N - 2, 1.0f);
    fl_model *m = mlp(0.1f, FL_SPARSE_CATEGORICAL_CROSSENTROPY);
    CHECK(fl_fit(m, x, y, .verbose = FL_VERBOSE_SILENT, .sample_weight = short_w) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "fl_fit: sample_weight has shape (38,), expected (40,): one weight per sample of x");
    ((float *)fl_tensor_data(w))[11] = -1.0f;
    CHECK(fl_fit(m, x, y, .verbose = FL_VERBOSE_SILENT, .sample_weight = w) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "fl_fit: sample_weight[11] is -1: a weight must be finite and >= 0");
    ((float *)fl_tensor_data(w))[11] = NAN;
    float r[2];
    CHECK(fl_evaluate(m, x, y, r, 2, .verbose = FL_VERBOSE_SILENT, .sample_weight = w) != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "fl_evaluate: sample_weight[11] is nan");
    ((float *)fl_tensor_data(w))[11] = 1.0f;
    const float cw5[5] = {1, 1, 1, 1, 2}, cwneg[2] = {1, -0.5f};
    CHECK(fl_fit(m, x, y, .verbose = FL_VERBOSE_SILENT, .class_weight = cw5, .num_class_weights = 5) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "class_weight has weights for classes 0..4, but model '");
    CHECK_STR_CONTAINS(fl_last_error(), "output has 3 classes (0..2)");
    CHECK(fl_fit(m, x, y, .verbose = FL_VERBOSE_SILENT, .class_weight = cwneg, .num_class_weights = 2) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "class_weight[1] is -0.5: a weight must be finite and >= 0");
    CHECK(fl_fit(m, x, y, .verbose = FL_VERBOSE_SILENT, .class_weight = cw5, .num_class_weights = 2, .sample_weight = w) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "give sample_weight or class_weight, not both");
    CHECK(fl_fit(m, x, y, .verbose = FL_VERBOSE_SILENT, .validation_sample_weight = w) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "validation_sample_weight without validation data");
    CHECK(fl_predict(m, x, .sample_weight = w) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "fl_predict: sample_weight is for fl_evaluate");
    /* binary: classes 0 and 1 for one sigmoid unit */
    fl_model *bm = fl_sequential(fl_input(F), fl_dense(1, .activation = FL_SIGMOID));
    fl_compile(bm, fl_sgd(), FL_BINARY_CROSSENTROPY, FL_ACCURACY);
    fl_tensor *yb = fl_tensor_zeros(FL_FLOAT32, N, 1);
    for (int i = 0; i < N; i++) ((float *)fl_tensor_data(yb))[i] = (float)(i % 2);
    const float cw2[2] = {0.3f, 2.5f}, cw3[3] = {1, 1, 1};
    fl_history *h = fl_fit(bm, x, yb, .verbose = FL_VERBOSE_SILENT, .class_weight = cw2, .num_class_weights = 2);
    CHECK_MSG(h != NULL, "binary class_weight: %s", fl_last_error());
    fl_history_free(h);
    CHECK(fl_fit(bm, x, yb, .verbose = FL_VERBOSE_SILENT, .class_weight = cw3, .num_class_weights = 3) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "output has 2 classes (0..1)");
    /* a sequence output: sample weights (N,), (N, steps); class_weight refused with the remedy */
    fl_model *s = fl_sequential(fl_input(4, F), fl_dense(C, .activation = FL_SOFTMAX));
    fl_compile(s, fl_sgd(), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY);
    fl_tensor *xs = randn(2, N, 4 * F), *ys = fl_tensor_zeros(FL_INT32, N, 4), *ws = fl_tensor_zeros(FL_FLOAT32, N, 4);
    int64_t sh[3] = {N, 4, F};
    fl_tensor_reshape(xs, 3, sh);
    for (int i = 0; i < N * 4; i++) { ((int32_t *)fl_tensor_data(ys))[i] = i % C; ((float *)fl_tensor_data(ws))[i] = 1.0f; }
    h = fl_fit(s, xs, ys, .verbose = FL_VERBOSE_SILENT, .sample_weight = ws);
    CHECK_MSG(h != NULL, "(N, steps) weights: %s", fl_last_error());
    fl_history_free(h);
    h = fl_fit(s, xs, ys, .verbose = FL_VERBOSE_SILENT, .sample_weight = w);
    CHECK_MSG(h != NULL, "(N,) weights on a sequence output: %s", fl_last_error());
    fl_history_free(h);
    fl_tensor *w3 = weights(N * 3, 1.0f);
    int64_t s3[2] = {N, 3};
    fl_tensor_reshape(w3, 2, s3);
    CHECK(fl_fit(s, xs, ys, .verbose = FL_VERBOSE_SILENT, .sample_weight = w3) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "sample_weight has shape (40, 3), expected (40,) (one weight a sample) or (40, 4)");
    CHECK(fl_fit(s, xs, ys, .verbose = FL_VERBOSE_SILENT, .class_weight = cw3, .num_class_weights = 3) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "class_weight needs one class per sample");
    fl_model *ms[] = {m, bm, s};
    for (size_t i = 0; i < 3; i++) fl_model_free(ms[i]);
    fl_tensor *ts[] = {x, y, w, short_w, yb, xs, ys, ws, w3};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) fl_tensor_free(ts[i]);
}

int main(void) {
    fl_set_num_threads(1);
    semantics();
    two_inputs();
    refusals();
    return check_report("test_fit_weights");
}
