/*
 * test_limits.c — what flynn does with hostile or broken input instead of
 * crashing or filling memory: sizes from a model file checked against the
 * memory budget (fl_set_max_model_bytes, $FLYNN_MAX_MODEL_BYTES), shape
 * arithmetic that would overflow 64 bits, NaN and infinities in the training
 * data or the loss (TerminateOnNaN, on by default), and bad training arrays.
 * Every case is refused before anything large is allocated, with a message
 * naming the layer, the sample or the step.
 */
#include "check.h"

#include <flynn/flynn.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GiB ((int64_t)1 << 30)

/* A Keras Sequential JSON of one input and the given layers (JSON objects). */
static char *seq_json(const char *batch_shape, const char *layers) {
    static char buf[8192];
    snprintf(buf, sizeof buf,
             "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"m\", \"layers\": ["
             "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": %s, \"name\": \"in\"}}%s%s]}}",
             batch_shape, layers[0] ? ", " : "", layers);
    return buf;
}

static void expect_refused(const char *json, fl_status status, const char *const *needles) {
    fl_clear_error();
    fl_model *m = fl_model_from_json(json, .no_compile = true);
    CHECK_MSG(m == NULL, "model was accepted: %s", json);
    CHECK_MSG(fl_last_status() == status, "status %s, expected %s (%s)", fl_status_name(fl_last_status()),
              fl_status_name(status), fl_last_error());
    for (int i = 0; needles[i]; i++) CHECK_STR_CONTAINS(fl_last_error(), needles[i]);
    fl_model_free(m);
}

/* ----------------------------------------------------- checked shapes */

static void test_shape_overflow(void) {
    /* the budget out of the way: overflow must be caught by itself */
    CHECK(fl_set_max_model_bytes(INT64_MAX) == FL_OK);

    /* Reshape to [2^61 + 1, 8]: the product wraps to 8 in 64 bits */
    expect_refused(seq_json("[null, 8]", "{\"class_name\": \"Reshape\", \"config\": {\"name\": \"rs\", "
                                          "\"target_shape\": [2305843009213693953, 8]}}"),
                   FL_ERR_SHAPE, (const char *[]){"layer 'rs' (Reshape)", "2305843009213693953", NULL});
    /* ... and with -1 inferred */
    expect_refused(seq_json("[null, 8]", "{\"class_name\": \"Reshape\", \"config\": {\"name\": \"rs\", "
                                          "\"target_shape\": [2305843009213693953, 8, -1]}}"),
                   FL_ERR_SHAPE, (const char *[]){"layer 'rs' (Reshape)", NULL});

    /* Dense whose units * inputs * 4 bytes overflows 64 bits */
    expect_refused(seq_json("[null, 2147483647]",
                            "{\"class_name\": \"Dense\", \"config\": {\"name\": \"huge\", \"units\": 2147483647}}"),
                   FL_ERR_SHAPE, (const char *[]){"layer 'huge'", "(2147483647, 2147483647)", "64-bit", NULL});

    /* Conv2D whose output, 2^30 x 2^30 x 8 values, overflows int64 */
    expect_refused(seq_json("[null, 1073741824, 1073741824, 1]",
                            "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"cv\", \"filters\": 8, "
                            "\"kernel_size\": [1, 1], \"padding\": \"same\"}}"),
                   FL_ERR_SHAPE, (const char *[]){"layer 'cv' (op conv2d)", "(None, 1073741824, 1073741824, 8)", NULL});

    /* an input dimension beyond what the kernels index */
    expect_refused(seq_json("[null, 4294967296, 1]", "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"f\"}}"),
                   FL_ERR_SHAPE,
                   (const char *[]){"layer 'in'", "4294967296", "expected 1 to 2147483647", NULL});

    /* Conv2DTranspose whose strides make the output more than 2^31 rows */
    expect_refused(seq_json("[null, 65536, 4, 1]",
                            "{\"class_name\": \"Conv2DTranspose\", \"config\": {\"name\": \"up\", \"filters\": 1, "
                            "\"kernel_size\": [1, 1], \"strides\": [65536, 1]}}"),
                   FL_ERR_SHAPE, (const char *[]){"layer 'up'", NULL});

    /* tensors: a shape whose byte size overflows, and a wrapping reshape */
    fl_clear_error();
    int64_t big[] = {(int64_t)1 << 40, (int64_t)1 << 40};
    CHECK(fl_tensor_new(FL_FLOAT32, 2, big) == NULL);
    CHECK(fl_last_status() == FL_ERR_SHAPE);
    CHECK_STR_CONTAINS(fl_last_error(), "(1099511627776, 1099511627776)");
    fl_tensor *t = fl_tensor_zeros(FL_FLOAT32, 8);
    int64_t wrap[] = {((int64_t)1 << 61) + 1, 8};
    CHECK(fl_tensor_reshape(t, 2, wrap) == FL_ERR_SHAPE);
    CHECK(fl_tensor_dim(t, 0) == 8 && fl_tensor_ndim(t) == 1);
    CHECK(fl_tensor_slice(t, INT64_MAX, 2) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "outside dimension 0");
    fl_tensor_free(t);
    CHECK(fl_set_max_model_bytes(0) == FL_OK);
}

/* ------------------------------------------------------ memory budget */

static void test_budget(void) {
    /* the 2.6 KB file: a 50M-unit Dense, 8.6 GB, now refused by name */
    const char *dense50m = seq_json("[null, 42]", "{\"class_name\": \"Dense\", \"config\": {\"name\": \"big\", "
                                                  "\"units\": 50000000}}");
    char json[8192];
    snprintf(json, sizeof json, "%s", dense50m);
    CHECK(fl_set_max_model_bytes(1 * GiB) == FL_OK);
    CHECK(fl_get_max_model_bytes() == 1 * GiB);
    expect_refused(json, FL_ERR_NOMEM,
                   (const char *[]){"layer 'big'", "(42, 50000000)", "15.6 GiB", "1.0 GiB", "FLYNN_MAX_MODEL_BYTES",
                                    "fl_set_max_model_bytes", NULL});

    /* the environment, when no limit is set by the call */
    CHECK(fl_set_max_model_bytes(0) == FL_OK);
    setenv("FLYNN_MAX_MODEL_BYTES", "64M", 1);
    CHECK(fl_get_max_model_bytes() == 64 << 20);
    expect_refused(json, FL_ERR_NOMEM, (const char *[]){"layer 'big'", "64.0 MiB", NULL});
    setenv("FLYNN_MAX_MODEL_BYTES", "1GiB", 1);
    CHECK(fl_get_max_model_bytes() == GiB);
    setenv("FLYNN_MAX_MODEL_BYTES", "lots", 1); /* not a size: the default */
    int64_t def = fl_get_max_model_bytes();
    unsetenv("FLYNN_MAX_MODEL_BYTES");
    CHECK(def == fl_get_max_model_bytes() && def > 0);
    CHECK(fl_set_max_model_bytes(-1) == FL_ERR_INVALID_ARG);

    /* activations: an image model refused per sample, by the layer */
    CHECK(fl_set_max_model_bytes(256 << 20) == FL_OK);
    expect_refused(seq_json("[null, 4096, 4096, 1]",
                            "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"wide\", \"filters\": 64, "
                            "\"kernel_size\": [3, 3], \"padding\": \"same\"}}"),
                   FL_ERR_NOMEM, (const char *[]){"layer 'wide'", "per sample", "256.0 MiB", NULL});

    /* a batch: the weights fit, a batch of 4096 samples does not */
    CHECK(fl_set_max_model_bytes(8 << 20) == FL_OK);
    fl_model *m = fl_sequential(fl_input(1000), fl_dense(64, .activation = FL_RELU, .name = "hidden"),
                                fl_dense(2, .activation = FL_SOFTMAX));
    CHECK(m != NULL);
    if (m) {
        CHECK(fl_compile(m, fl_sgd(), FL_SPARSE_CATEGORICAL_CROSSENTROPY) == FL_OK);
        fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, 4096, 1000);
        fl_tensor *y = fl_tensor_zeros(FL_FLOAT32, 4096);
        fl_clear_error();
        fl_history *h = fl_fit(m, x, y, .batch_size = 4096, .verbose = FL_VERBOSE_SILENT);
        CHECK(h == NULL);
        CHECK(fl_last_status() == FL_ERR_NOMEM);
        CHECK_STR_CONTAINS(fl_last_error(), "batch size 4096");
        CHECK_STR_CONTAINS(fl_last_error(), "8.0 MiB");
        CHECK_STR_CONTAINS(fl_last_error(), "(4096, 1000)"); /* the input: the largest buffer */
        fl_history_free(h);
        /* a batch that fits still trains */
        h = fl_fit(m, x, y, .batch_size = 64, .verbose = FL_VERBOSE_SILENT);
        CHECK_MSG(h != NULL, "%s", fl_last_error());
        fl_history_free(h);
        fl_tensor_free(x);
        fl_tensor_free(y);
        fl_model_free(m);
    }
    /* the optimizer's slots count too: Adam's two slots of 1M weights */
    CHECK(fl_set_max_model_bytes(12 << 20) == FL_OK);
    m = fl_sequential(fl_input(1024), fl_dense(1024, .name = "d"));
    CHECK(m != NULL);
    if (m) {
        fl_clear_error();
        CHECK(fl_compile(m, fl_adam(), FL_MEAN_SQUARED_ERROR) == FL_ERR_NOMEM);
        CHECK_STR_CONTAINS(fl_last_error(), "optimizer Adam");
        CHECK(fl_compile(m, fl_sgd(), FL_MEAN_SQUARED_ERROR) == FL_OK);
        fl_model_free(m);
    }
    CHECK(fl_set_max_model_bytes(0) == FL_OK);
}

/* ------------------------------------------------------ NaN and inf */

/* A tiny classifier and a learnable data set: 64 samples of 4x4x1. */
static fl_model *small_model(void) {
    fl_model *m = fl_sequential(fl_input(4, 4, 1), fl_conv2d(4, 3, .activation = FL_RELU, .name = "conv"),
                                fl_flatten(), fl_dense(3, .activation = FL_SOFTMAX, .name = "out"));
    if (m) fl_compile(m, fl_adam(), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY);
    return m;
}

static void small_data(fl_tensor **x, fl_tensor **y) {
    *x = fl_tensor_zeros(FL_FLOAT32, 64, 4, 4, 1);
    *y = fl_tensor_zeros(FL_FLOAT32, 64);
    float *xd = fl_tensor_data(*x), *yd = fl_tensor_data(*y);
    for (int i = 0; i < 64; i++) {
        yd[i] = (float)(i % 3);
        for (int j = 0; j < 16; j++) xd[i * 16 + j] = (float)((i * 7 + j * 3) % 11) / 11.0f + (float)(i % 3);
    }
}

static void test_nan_data(void) {
    fl_tensor *x, *y;
    small_data(&x, &y);
    float *xd = fl_tensor_data(x);
    const float bad[] = {NAN, INFINITY, -INFINITY};
    const char *names[] = {"NaN", "inf", "-inf"};
    for (int k = 0; k < 3; k++) {
        fl_model *m = small_model();
        xd[37 * 16 + 9] = bad[k]; /* sample 37, row 2, column 1 */
        fl_clear_error();
        fl_history *h = fl_fit(m, x, y, .batch_size = 8, .epochs = 2, .verbose = FL_VERBOSE_SILENT);
        CHECK(h == NULL);
        CHECK(fl_last_status() == FL_ERR_NONFINITE);
        char want[64];
        snprintf(want, sizeof want, "x[37] holds %s at feature 9 (index (2, 1, 0)", names[k]);
        CHECK_STR_CONTAINS(fl_last_error(), want);
        CHECK_STR_CONTAINS(fl_last_error(), "epoch 1/2, step ");
        CHECK_STR_CONTAINS(fl_last_error(), "no_nan_check");
        fl_history_free(h);
        fl_model_free(m);
        xd[37 * 16 + 9] = 0.5f;
    }
    /* the opt-out trains on (as Keras without TerminateOnNaN) */
    xd[5] = NAN;
    fl_model *m = small_model();
    fl_history *h = fl_fit(m, x, y, .batch_size = 8, .epochs = 1, .verbose = FL_VERBOSE_SILENT, .no_nan_check = true);
    CHECK_MSG(h != NULL, "%s", fl_last_error());
    fl_history_free(h);
    fl_model_free(m);
    xd[5] = 0.5f;

    /* non-finite targets of a regression: found before training */
    fl_model *r = fl_sequential(fl_input(4, 4, 1), fl_flatten(), fl_dense(2, .name = "reg"));
    CHECK(fl_compile(r, fl_sgd(), FL_MEAN_SQUARED_ERROR) == FL_OK);
    fl_tensor *yr = fl_tensor_zeros(FL_FLOAT32, 64, 2);
    ((float *)fl_tensor_data(yr))[2 * 50 + 1] = NAN;
    fl_clear_error();
    h = fl_fit(r, x, yr, .verbose = FL_VERBOSE_SILENT);
    CHECK(h == NULL);
    CHECK(fl_last_status() == FL_ERR_NONFINITE);
    CHECK_STR_CONTAINS(fl_last_error(), "y[50] holds NaN at target 1");
    fl_history_free(h);
    fl_model_free(r);
    fl_tensor_free(yr);
    fl_tensor_free(x);
    fl_tensor_free(y);
}

static void test_nan_loss(void) {
    fl_tensor *x, *y;
    small_data(&x, &y);
    /* a learning rate that overflows the weights in the first update: the
     * second step's loss is not finite, and the weights are named */
    fl_model *m = fl_sequential(fl_input(4, 4, 1), fl_flatten(), fl_dense(8, .activation = FL_RELU, .name = "hidden"),
                                fl_dense(3, .activation = FL_SOFTMAX, .name = "out"));
    CHECK(fl_compile(m, fl_sgd(.learning_rate = 1e38f), FL_SPARSE_CATEGORICAL_CROSSENTROPY) == FL_OK);
    fl_clear_error();
    fl_history *h = fl_fit(m, x, y, .batch_size = 8, .epochs = 3, .verbose = FL_VERBOSE_SILENT);
    CHECK(h == NULL);
    CHECK(fl_last_status() == FL_ERR_NONFINITE);
    CHECK_STR_CONTAINS(fl_last_error(), "epoch 1/3, step ");
    CHECK_STR_CONTAINS(fl_last_error(), "sparse_categorical_crossentropy loss is");
    CHECK_STR_CONTAINS(fl_last_error(), "layer '");
    fprintf(stderr, "(diagnosis: %s)\n", fl_last_error());
    fl_history_free(h);
    fl_model_free(m);

    /* finite weights and inputs whose product overflows float32: the layer
     * whose output is not finite is named */
    fl_tensor *xb = fl_tensor_zeros(FL_FLOAT32, 4, 4, 4, 1);
    fl_tensor *yb = fl_tensor_zeros(FL_FLOAT32, 4, 2);
    for (int i = 0; i < 64; i++) ((float *)fl_tensor_data(xb))[i] = 3e38f;
    fl_model *r = fl_sequential(fl_input(4, 4, 1), fl_flatten(), fl_dense(2, .name = "sum"));
    CHECK(fl_compile(r, fl_sgd(), FL_MEAN_SQUARED_ERROR) == FL_OK);
    /* kernel of ones: 16 * 3e38 overflows */
    fl_tensor *k = fl_tensor_zeros(FL_FLOAT32, 16, 2);
    for (int i = 0; i < 32; i++) ((float *)fl_tensor_data(k))[i] = 1.0f;
    CHECK_MSG(fl_layer_set_weight(fl_model_get_layer(r, "sum"), 0, k) == FL_OK, "%s", fl_last_error());
    fl_clear_error();
    h = fl_fit(r, xb, yb, .batch_size = 4, .verbose = FL_VERBOSE_SILENT);
    CHECK(h == NULL);
    CHECK(fl_last_status() == FL_ERR_NONFINITE);
    CHECK_STR_CONTAINS(fl_last_error(), "epoch 1/1, step 1/1: the mean_squared_error loss is inf");
    CHECK_STR_CONTAINS(fl_last_error(), "layer 'sum' (op dense) is the first whose output is not finite: inf");
    CHECK_STR_CONTAINS(fl_last_error(), "before the update");
    /* the weights are untouched by the refused step */
    fl_tensor *k2 = fl_layer_weight(fl_model_get_layer(r, "sum"), 0);
    CHECK(k2 && ((const float *)fl_tensor_cdata(k2))[0] == 1.0f);
    fl_history_free(h);
    fl_model_free(r);
    fl_tensor_free(k);
    fl_tensor_free(xb);
    fl_tensor_free(yb);
    fl_tensor_free(x);
    fl_tensor_free(y);
}

/* After epoch 1 (and its checkpoint), a weight turns NaN: epoch 2 stops at
 * its first step naming the weight, and the checkpoint stays loadable. */
static bool checkpoint_then_poison(fl_model *m, int epoch, const fl_history *h, void *ck) {
    bool go = fl_checkpoint_on_epoch_end(m, epoch, h, ck);
    fl_layer *l = fl_model_get_layer(m, "conv");
    fl_tensor *w = fl_tensor_clone(fl_layer_weight(l, 0));
    ((float *)fl_tensor_data(w))[5] = NAN;
    fl_layer_set_weight(l, 0, w);
    fl_tensor_free(w);
    return go;
}

static void test_nan_keeps_checkpoint(void) {
    fl_tensor *x, *y;
    small_data(&x, &y);
    fl_model *m = small_model();
    char path[] = "/tmp/flynn-test-limits-XXXXXX";
    CHECK(mkdtemp(path) != NULL);
    char file[128];
    snprintf(file, sizeof file, "%s/best.keras", path);
    fl_checkpoint *ck = fl_model_checkpoint(file, .monitor = "loss");
    fl_clear_error();
    fl_history *h = fl_fit(m, x, y, .batch_size = 16, .epochs = 3, .verbose = FL_VERBOSE_SILENT,
                           .on_epoch_end = checkpoint_then_poison, .user = ck);
    CHECK(h == NULL);
    CHECK(fl_last_status() == FL_ERR_NONFINITE);
    CHECK_STR_CONTAINS(fl_last_error(), "epoch 2/3, at its end: ");
    CHECK_STR_CONTAINS(fl_last_error(), "layer 'conv' has a weight of shape (3, 3, 1, 4) holding NaN at index (0, 1, 0, 1)");
    CHECK(fl_checkpoint_saves(ck) == 1);
    fl_model *back = fl_load_model(file);
    CHECK_MSG(back != NULL, "%s", fl_last_error());
    if (back) {
        const float *k = fl_tensor_cdata(fl_layer_weight(fl_model_get_layer(back, "conv"), 0));
        CHECK(isfinite(k[5]));
    }
    fl_model_free(back);
    fl_checkpoint_free(ck);
    fl_history_free(h);
    fl_model_free(m);
    remove(file);
    rmdir(path);
    fl_tensor_free(x);
    fl_tensor_free(y);
}

/* ------------------------------------------------------ bad arrays */

static void test_bad_arrays(void) {
    fl_tensor *x, *y;
    small_data(&x, &y);
    fl_model *m = small_model();
    fl_history *h;
    /* a label out of range names its index */
    ((float *)fl_tensor_data(y))[41] = 12;
    fl_clear_error();
    CHECK((h = fl_fit(m, x, y, .verbose = FL_VERBOSE_SILENT)) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "y[41] = 12 is not a class index in [0, 3)");
    ((float *)fl_tensor_data(y))[41] = NAN;
    CHECK((h = fl_fit(m, x, y, .verbose = FL_VERBOSE_SILENT)) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "y[41] = nan is not a class index");
    ((float *)fl_tensor_data(y))[41] = 1;
    /* x and y of different lengths */
    fl_tensor *y2 = fl_tensor_slice(y, 0, 63);
    CHECK((h = fl_fit(m, x, y2, .verbose = FL_VERBOSE_SILENT)) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "x has 64 samples but y has shape (63,)");
    fl_tensor_free(y2);
    /* a wrong sample shape and a wrong dtype */
    fl_tensor *x2 = fl_tensor_zeros(FL_FLOAT32, 64, 4, 5, 1);
    CHECK((h = fl_fit(m, x2, y, .verbose = FL_VERBOSE_SILENT)) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "x has shape (64, 4, 5, 1), model 'sequential");
    CHECK_STR_CONTAINS(fl_last_error(), "expects (None, 4, 4, 1)");
    fl_tensor_free(x2);
    fl_tensor *x3 = fl_tensor_zeros(FL_UINT8, 64, 4, 4, 1);
    CHECK((h = fl_fit(m, x3, y, .verbose = FL_VERBOSE_SILENT)) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "x is uint8, expected float32");
    fl_tensor_free(x3);
    fl_model_free(m);
    fl_tensor_free(x);
    fl_tensor_free(y);
}

int main(void) {
    test_shape_overflow();
    test_budget();
    test_nan_data();
    test_nan_loss();
    test_nan_keeps_checkpoint();
    test_bad_arrays();
    return check_report("test_limits");
}
