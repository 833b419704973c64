/*
 * test_stream.c — data streams (src/io/stream.c) and fl_fit_stream:
 *   - an image-folder stream yields exactly the samples of
 *     fl_image_dataset_from_directory with the same arguments (pixels,
 *     labels, order, split), and an .npy stream those of fl_load_npy_xy;
 *   - the prefetcher hands out batches in the pass's order whatever its depth
 *     and worker count, carries a read error to the batch that failed, and
 *     stops cleanly mid-pass;
 *   - fl_fit_stream trains bit for bit as fl_fit on the same samples and
 *     seed (History and weights), with and without prefetch;
 *   - an unreadable image mid-epoch stops fit naming it; an early stop ends
 *     the readers; augmentation is deterministic, flips exactly, and
 *     translates as TensorFlow's reflect/bilinear transform.
 * Usage: test_stream FIXTURES_DATA_DIR (tests/fixtures/data).
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "io/io.h"

#include <flynn/flynn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *fixtures;
static char tmpdir[256];

static const char *fx(const char *rel) {
    static char buf[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", fixtures, rel);
    return buf[k];
}

static const char *tmp(const char *rel) {
    static char buf[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, rel);
    return buf[k];
}

/* Reads samples order[0..n) of s in batches of bs and compares them with rows of x and y. */
static void compare_stream(const char *what, fl_data_stream *s, const fl_tensor *x, const fl_tensor *y) {
    const int64_t n = fl_data_stream_size(s);
    CHECK_MSG(n == fl_tensor_dim(x, 0), "%s: %lld samples, loader %lld", what, (long long)n, (long long)fl_tensor_dim(x, 0));
    if (n != fl_tensor_dim(x, 0)) return;
    const int64_t xrow = fl_tensor_size(x) / n, yrow = y ? fl_tensor_size(y) / n : 0;
    int64_t *order = malloc((size_t)n * sizeof *order);
    for (int64_t i = 0; i < n; i++) order[i] = (i * 7 + 3) % n; /* any order: 7 is prime to the sizes used */
    float *xb = malloc((size_t)(n * xrow) * sizeof(float)), *yb = malloc((size_t)(n * (yrow ? yrow : 1)) * sizeof(float));
    CHECK_MSG(fl_data_stream_read(s, 0, order, n, xb, yrow ? yb : NULL) == FL_OK, "%s: %s", what, fl_last_error());
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const void *xr = (const char *)fl_tensor_data((fl_tensor *)x) + (size_t)(order[i] * xrow) * 4;
        if (memcmp(xb + i * xrow, xr, (size_t)xrow * 4) != 0) bad++;
        if (yrow && memcmp(yb + i * yrow, (const float *)fl_tensor_data((fl_tensor *)y) + order[i] * yrow,
                           (size_t)yrow * 4) != 0)
            bad++;
    }
    CHECK_MSG(bad == 0, "%s: %d samples differ from the in-memory loader's", what, bad);
    free(order);
    free(xb);
    free(yb);
}

static void test_image_stream(void) {
    if (!fl_image_support()) { printf("images: SKIPPED (no image support in this build)\n"); return; }
    struct { const char *name; fl_image_dataset_args a; } cases[] = {
        {"rgb 8x8 sorted", {.image_size = {8, 8}, .no_shuffle = true}},
        {"gray 5x7 categorical", {.image_size = {5, 7}, .color_mode = FL_COLOR_GRAYSCALE, .label_mode = FL_LABEL_CATEGORICAL}},
        {"seed 7 training", {.image_size = {6, 6}, .seed = 7, .validation_split = 0.25f, .subset = "training"}},
        {"seed 7 validation", {.image_size = {6, 6}, .seed = 7, .validation_split = 0.25f, .subset = "validation"}},
        {"no labels", {.image_size = {4, 4}, .no_labels = true, .no_shuffle = true}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fl_dataset d;
        fl_image_dataset_args a = cases[c].a;
        CHECK_MSG(fl_image_dataset_from_directory_(fx("images/tree"), &d, a) == FL_OK, "%s", fl_last_error());
        fl_data_stream *s = fl_image_stream_from_directory_(fx("images/tree"), a);
        CHECK_MSG(s != NULL, "%s: %s", cases[c].name, fl_last_error());
        if (s && d.x_train) {
            int64_t xs[FL_MAX_DIMS];
            CHECK(fl_data_stream_x_shape(s, xs) == 3 && xs[0] == a.image_size[0] && xs[1] == a.image_size[1]);
            CHECK(fl_data_stream_y_shape(s, NULL) == (a.no_labels ? -1 : fl_tensor_ndim(d.y_train) - 1));
            CHECK(a.no_labels || fl_data_stream_num_classes(s) == 3);
            CHECK(a.no_labels || strcmp(fl_data_stream_class_name(s, 1), "dogs") == 0);
            compare_stream(cases[c].name, s, d.x_train, d.y_train);
        }
        fl_data_stream_free(s);
        fl_dataset_free(&d);
    }
    CHECK(fl_image_stream_from_directory(fx("images/tree"), .validation_split = 0.2f, .subset = "both") == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "\"training\"");
    CHECK(fl_image_stream_from_directory(fx("no/such/folder")) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "no/such/folder");
}

static fl_tensor *ramp(fl_dtype dt, int nd, const int64_t *shape, int mod) {
    fl_tensor *t = fl_tensor_new(dt, nd, shape);
    for (int64_t i = 0; i < fl_tensor_size(t); i++) {
        int v = (int)((i * 2654435761u) % (uint32_t)mod);
        if (dt == FL_FLOAT32) ((float *)fl_tensor_data(t))[i] = (float)v * 0.25f - 3.0f;
        else if (dt == FL_INT32) ((int32_t *)fl_tensor_data(t))[i] = v - 5;
        else ((uint8_t *)fl_tensor_data(t))[i] = (uint8_t)v;
    }
    return t;
}

static void test_npy_stream(void) {
    const fl_dtype dts[3] = {FL_FLOAT32, FL_INT32, FL_UINT8};
    int64_t ys[1] = {37};
    fl_tensor *y = ramp(FL_INT32, 1, ys, 3);
    for (int64_t i = 0; i < 37; i++) ((int32_t *)fl_tensor_data(y))[i] = (int32_t)(i % 4);
    CHECK(fl_save_npy(y, tmp("y.npy")) == FL_OK);
    for (int k = 0; k < 3; k++) {
        int64_t xs[3] = {37, 3, 5};
        fl_tensor *x = ramp(dts[k], 3, xs, 200);
        CHECK(fl_save_npy(x, tmp("x.npy")) == FL_OK);
        fl_dataset d;
        CHECK_MSG(fl_load_npy_xy(tmp("x.npy"), tmp("y.npy"), &d) == FL_OK, "%s", fl_last_error());
        fl_data_stream *s = fl_npy_stream(tmp("x.npy"), tmp("y.npy"));
        CHECK_MSG(s != NULL, "%s", fl_last_error());
        if (s) {
            CHECK(fl_data_stream_x_dtype(s) == fl_tensor_dtype(d.x_train));
            CHECK(fl_data_stream_num_classes(s) == 4);
            fl_tensor *yf = fl_to_float(d.y_train, 1.0f);
            compare_stream(fl_dtype_name(dts[k]), s, d.x_train, yf);
            fl_tensor_free(yf);
        }
        fl_data_stream_free(s);
        fl_dataset_free(&d);
        fl_tensor_free(x);
    }
    /* x and y of different lengths */
    int64_t xs2[2] = {36, 2};
    fl_tensor *x2 = ramp(FL_FLOAT32, 2, xs2, 9);
    CHECK(fl_save_npy(x2, tmp("x36.npy")) == FL_OK);
    CHECK(fl_npy_stream(tmp("x36.npy"), tmp("y.npy")) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "same number of samples");
    /* a file cut short after the stream opened it: the read names the file and the row */
    fl_data_stream *s = fl_npy_stream(tmp("x36.npy"), NULL);
    CHECK(s && fl_data_stream_y_shape(s, NULL) == -1);
    CHECK(truncate(tmp("x36.npy"), 128 + 8 * 30) == 0);
    int64_t idx[2] = {3, 33};
    float xb[4];
    CHECK(s && fl_data_stream_read(s, 0, idx, 2, xb, NULL) == FL_ERR_IO);
    CHECK_STR_CONTAINS(fl_last_error(), "x36.npy: row 33");
    int64_t out[1] = {36};
    CHECK(s && fl_data_stream_read(s, 0, out, 1, xb, NULL) == FL_ERR_INVALID_ARG);
    fl_data_stream_free(s);
    fl_tensor_free(x2);
    fl_tensor_free(y);
}

/* ------------------------------------------------------------ the prefetcher */

typedef struct counting { int64_t fail_at; int reads; } counting;

/* x[j] = 10 * sample + j, y = sample; fails on sample fail_at */
static fl_status counting_read(void *user, int epoch, const int64_t *idx, int64_t b, void *x, float *y) {
    counting *c = user;
    (void)epoch;
    __atomic_add_fetch(&c->reads, 1, __ATOMIC_RELAXED);
    for (int64_t i = 0; i < b; i++) {
        if (idx[i] == c->fail_at) {
            fl_clear_error();
            return FL_ERR_FORMAT; /* the stream names it: "status 4" */
        }
        for (int j = 0; j < 3; j++) ((float *)x)[i * 3 + j] = (float)(10 * idx[i] + j);
        if (y) y[i] = (float)idx[i];
    }
    return FL_OK;
}

static void test_prefetch(void) {
    counting c = {-1, 0};
    int64_t xs[1] = {3};
    fl_data_stream *s = fl_data_stream_new(103, 1, xs, FL_FLOAT32, 0, NULL, counting_read, NULL, &c);
    CHECK(s != NULL);
    int64_t order[103];
    for (int i = 0; i < 103; i++) order[i] = (i * 31 + 5) % 103;
    const int depth[4] = {0, 1, 3, 8}, workers[4] = {1, 1, 3, 2};
    for (int k = 0; k < 4; k++) {
        fl_prefetch *p = fl_prefetch_open(s, 8, depth[k], workers[k]);
        CHECK(p != NULL);
        for (int pass = 0; pass < 2; pass++) { /* a prefetcher serves several passes */
            CHECK(fl_prefetch_begin(p, pass, order, 103) == FL_OK);
            int bad = 0, nb = 0;
            for (int64_t first = 0; first < 103; first += 8) {
                void *x;
                float *y;
                int64_t b;
                double w;
                if (fl_prefetch_next(p, &x, &y, &b, &w) != FL_OK) { bad++; break; }
                nb++;
                if (b != (103 - first < 8 ? 103 - first : 8)) bad++;
                for (int64_t i = 0; i < b; i++)
                    if (y[i] != (float)order[first + i] || ((float *)x)[i * 3 + 2] != (float)(10 * order[first + i] + 2))
                        bad++;
            }
            CHECK_MSG(bad == 0 && nb == 13, "depth %d workers %d: %d wrong batches of %d", depth[k], workers[k], bad, nb);
            fl_prefetch_end(p);
        }
        /* stopped after two batches of a pass: the workers blocked on a full ring exit */
        CHECK(fl_prefetch_begin(p, 2, order, 103) == FL_OK);
        void *x;
        float *y;
        int64_t b;
        double w;
        CHECK(fl_prefetch_next(p, &x, &y, &b, &w) == FL_OK && fl_prefetch_next(p, &x, &y, &b, &w) == FL_OK);
        usleep(2000);
        fl_prefetch_end(p);
        /* a read error reaches the caller at its batch, the earlier batches intact */
        c.fail_at = order[45]; /* batch 5 (0-based) */
        CHECK(fl_prefetch_begin(p, 3, order, 103) == FL_OK);
        int ok = 0;
        fl_status st = FL_OK;
        while ((st = fl_prefetch_next(p, &x, &y, &b, &w)) == FL_OK) ok++;
        CHECK_MSG(ok == 5 && st == FL_ERR_FORMAT, "depth %d: %d batches before the error (5 expected), status %d",
                  depth[k], ok, (int)st);
        CHECK_STR_CONTAINS(fl_last_error(), "read function failed");
        CHECK(fl_prefetch_next(p, &x, &y, &b, &w) == FL_ERR_FORMAT); /* asked again: the same error, no hang */
        fl_prefetch_end(p);
        c.fail_at = -1;
        fl_prefetch_close(p);
    }
    fl_data_stream_free(s);
}

/* ------------------------------------------------------------ fit on a stream */

static fl_model *mlp(int in, int classes) {
    fl_model *m = fl_sequential(fl_input(in), fl_dense(16, .activation = FL_RELU), fl_dropout(0.2),
                                fl_dense(classes, .activation = FL_SOFTMAX));
    fl_model_set_seed(m, 11);
    fl_compile(m, fl_adam(.learning_rate = 0.01f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY);
    return m;
}

static int weights_differ(fl_model *a, fl_model *b) {
    int bad = 0;
    for (int l = 0; l < fl_model_num_layers(a); l++)
        for (int w = 0; w < fl_layer_num_weights(fl_model_layer(a, l)); w++) {
            fl_tensor *ta = fl_layer_weight(fl_model_layer(a, l), w), *tb = fl_layer_weight(fl_model_layer(b, l), w);
            if (memcmp(fl_tensor_data(ta), fl_tensor_data(tb), (size_t)fl_tensor_size(ta) * 4) != 0) bad++;
        }
    return bad;
}

static int history_differs(const fl_history *a, const fl_history *b) {
    if (!a || !b || fl_history_epochs(a) != fl_history_epochs(b) || fl_history_num_keys(a) != fl_history_num_keys(b))
        return 1;
    int bad = 0;
    for (int k = 0; k < fl_history_num_keys(a); k++) {
        const float *va = fl_history_get(a, fl_history_key(a, k)), *vb = fl_history_get(b, fl_history_key(a, k));
        if (!vb || memcmp(va, vb, (size_t)fl_history_epochs(a) * sizeof(float)) != 0) bad++;
    }
    return bad;
}

static void test_fit_equal(void) {
    int64_t xs[2] = {203, 6}, ys[1] = {203};
    fl_tensor *x = ramp(FL_FLOAT32, 2, xs, 97), *y = ramp(FL_INT32, 1, ys, 3);
    for (int64_t i = 0; i < 203; i++) { /* a learnable rule */
        const float *r = (const float *)fl_tensor_data(x) + i * 6;
        ((int32_t *)fl_tensor_data(y))[i] = r[0] + r[1] > 0 ? 2 : r[2] > 0 ? 1 : 0;
    }
    CHECK(fl_save_npy(x, tmp("fx.npy")) == FL_OK && fl_save_npy(y, tmp("fy.npy")) == FL_OK);
    fl_model *ref = mlp(6, 3);
    fl_history *hr = fl_fit(ref, x, y, .batch_size = 16, .epochs = 3, .validation_split = 0.2f, .verbose = FL_VERBOSE_SILENT);
    CHECK_MSG(hr != NULL, "%s", fl_last_error());
    const int prefetch[3] = {-1, 0, 5}, workers[3] = {0, 1, 3};
    for (int k = 0; k < 3; k++) {
        fl_data_stream *s = fl_npy_stream(tmp("fx.npy"), tmp("fy.npy"));
        fl_model *m = mlp(6, 3);
        fl_history *h = fl_fit_stream(m, s, .batch_size = 16, .epochs = 3, .validation_split = 0.2f,
                                      .verbose = FL_VERBOSE_SILENT, .prefetch = prefetch[k], .workers = workers[k]);
        CHECK_MSG(h != NULL, "%s", fl_last_error());
        CHECK_MSG(history_differs(h, hr) == 0, "prefetch %d workers %d: History differs from fl_fit's", prefetch[k], workers[k]);
        CHECK_MSG(weights_differ(m, ref) == 0, "prefetch %d workers %d: weights differ from fl_fit's", prefetch[k], workers[k]);
        CHECK(h && fl_history_steps(h) == 3 * 11 && fl_history_data_seconds(h) >= 0);
        fl_history_free(h);
        fl_model_free(m);
        fl_data_stream_free(s);
    }
    /* validation data as a stream, as validation_x/y */
    {
        int64_t vx[2] = {40, 6}, vy[1] = {40};
        fl_tensor *xv = ramp(FL_FLOAT32, 2, vx, 31), *yv = ramp(FL_INT32, 1, vy, 3);
        for (int64_t i = 0; i < 40; i++) ((int32_t *)fl_tensor_data(yv))[i] = (int32_t)(i * 7 % 3);
        CHECK(fl_save_npy(xv, tmp("vx.npy")) == FL_OK && fl_save_npy(yv, tmp("vy.npy")) == FL_OK);
        fl_model *a = mlp(6, 3), *b = mlp(6, 3);
        fl_history *ha = fl_fit(a, x, y, .batch_size = 32, .epochs = 2, .validation_x = xv, .validation_y = yv,
                                .verbose = FL_VERBOSE_SILENT);
        fl_data_stream *s = fl_npy_stream(tmp("fx.npy"), tmp("fy.npy")), *sv = fl_npy_stream(tmp("vx.npy"), tmp("vy.npy"));
        fl_history *hb = fl_fit_stream(b, s, .batch_size = 32, .epochs = 2, .validation_stream = sv,
                                       .verbose = FL_VERBOSE_SILENT);
        CHECK_MSG(hb != NULL, "%s", fl_last_error());
        CHECK(history_differs(ha, hb) == 0 && weights_differ(a, b) == 0);
        CHECK(hb && fl_history_get(hb, "val_accuracy") != NULL);
        fl_history_free(ha);
        fl_history_free(hb);
        fl_model_free(a);
        fl_model_free(b);
        fl_data_stream_free(s);
        fl_data_stream_free(sv);
        fl_tensor_free(xv);
        fl_tensor_free(yv);
    }
    /* wrong shapes are refused before training */
    {
        fl_data_stream *s = fl_npy_stream(tmp("fx.npy"), tmp("fy.npy"));
        fl_model *m = fl_sequential(fl_input(7), fl_dense(3, .activation = FL_SOFTMAX));
        fl_compile(m, fl_adam(), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY);
        CHECK(fl_fit_stream(m, s, .verbose = FL_VERBOSE_SILENT) == NULL);
        CHECK_STR_CONTAINS(fl_last_error(), "samples have shape (6,), model");
        fl_model_free(m);
        fl_data_stream_free(s);
    }
    fl_history_free(hr);
    fl_model_free(ref);
    fl_tensor_free(x);
    fl_tensor_free(y);
}

static fl_model *small_cnn(int classes, int loss_categorical) {
    fl_model *m = fl_sequential(fl_input(8, 8, 3), fl_rescaling(1.0f / 255), fl_conv2d(4, 3, .activation = FL_RELU),
                                fl_max_pooling2d(2), fl_flatten(), fl_dense(classes, .activation = FL_SOFTMAX));
    fl_model_set_seed(m, 5);
    fl_compile(m, fl_adam(.learning_rate = 0.01f),
               loss_categorical ? FL_CATEGORICAL_CROSSENTROPY : FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY);
    return m;
}

static void test_fit_images(void) {
    if (!fl_image_support()) return;
    for (int cat = 0; cat < 2; cat++) {
        fl_dataset d;
        fl_label_mode lm = cat ? FL_LABEL_CATEGORICAL : FL_LABEL_INT;
        CHECK(fl_image_dataset_from_directory(fx("images/tree"), &d, .image_size = {8, 8}, .seed = 3,
                                              .label_mode = lm) == FL_OK);
        fl_model *a = small_cnn(3, cat), *b = small_cnn(3, cat);
        fl_history *ha = fl_fit(a, d.x_train, d.y_train, .batch_size = 3, .epochs = 3, .verbose = FL_VERBOSE_SILENT);
        fl_data_stream *s = fl_image_stream_from_directory(fx("images/tree"), .image_size = {8, 8}, .seed = 3,
                                                           .label_mode = lm);
        fl_history *hb = fl_fit_stream(b, s, .batch_size = 3, .epochs = 3, .verbose = FL_VERBOSE_SILENT, .workers = 2);
        CHECK_MSG(ha && hb, "%s", fl_last_error());
        CHECK_MSG(history_differs(ha, hb) == 0 && weights_differ(a, b) == 0,
                  "images (%s): fit on the stream differs from fit in memory", cat ? "categorical" : "int");
        fl_history_free(ha);
        fl_history_free(hb);
        fl_model_free(a);
        fl_model_free(b);
        fl_data_stream_free(s);
        fl_dataset_free(&d);
    }
    /* class indices one-hot on the stream = fl_one_hot on the arrays */
    {
        fl_dataset d;
        CHECK(fl_image_dataset_from_directory(fx("images/tree"), &d, .image_size = {8, 8}, .seed = 3) == FL_OK);
        fl_tensor *oh = fl_one_hot(d.y_train, 3);
        fl_data_stream *s = fl_data_stream_one_hot(fl_image_stream_from_directory(fx("images/tree"), .image_size = {8, 8},
                                                                                  .seed = 3), 3);
        CHECK(s != NULL);
        if (s) compare_stream("one-hot", s, d.x_train, oh);
        CHECK(fl_data_stream_one_hot(s, 2) == NULL); /* one-hot already */
        int64_t all[10];
        for (int i = 0; i < 10; i++) all[i] = i;
        fl_data_stream *s2 = fl_data_stream_one_hot(fl_image_stream_from_directory(fx("images/tree"), .image_size = {8, 8},
                                                                                   .seed = 3), 2);
        float xb[10 * 192], yb[20];
        CHECK(s2 && fl_data_stream_read(s2, 0, all, fl_data_stream_size(s2), xb, yb) == FL_ERR_INVALID_ARG);
        CHECK_STR_CONTAINS(fl_last_error(), "not a class index in [0, 2)");
        fl_data_stream_free(s2);
        fl_tensor_free(oh);
        fl_data_stream_free(s);
        fl_dataset_free(&d);
    }
}

/* ------------------------------------------------------------ errors and early stops */

static int copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    if (!a || !b) { if (a) fclose(a); if (b) fclose(b); return -1; }
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, n, b);
    fclose(a);
    return fclose(b);
}

static void test_bad_image_mid_epoch(void) {
    if (!fl_image_support()) return;
    /* a folder of 2 classes x 6 images with one damaged JPEG */
    const char *cls[2] = {"cats", "dogs"};
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/bad", tmpdir);
    mkdir(dir, 0755);
    for (int c = 0; c < 2; c++) {
        snprintf(path, sizeof path, "%s/%s", dir, cls[c]);
        mkdir(path, 0755);
        for (int i = 0; i < 6; i++) {
            snprintf(path, sizeof path, "%s/%s/i%d.jpg", dir, cls[c], i);
            CHECK(copy_file(fx(c ? "images/tree/dogs/d01.jpeg" : "images/tree/cats/c03.jpg"), path) == 0);
        }
    }
    snprintf(path, sizeof path, "%s/dogs/i4.jpg", dir);
    FILE *f = fopen(path, "wb");
    fputs("\xff\xd8\xff this is no JPEG", f);
    fclose(f);
    fl_dataset d;
    CHECK(fl_image_dataset_from_directory(dir, &d, .image_size = {8, 8}) != FL_OK); /* in memory: at load */
    for (int pf = -1; pf <= 3; pf += 4) {
        fl_data_stream *s = fl_image_stream_from_directory(dir, .image_size = {8, 8});
        CHECK(s != NULL);
        fl_model *m = small_cnn(2, 0);
        fl_history *h = fl_fit_stream(m, s, .batch_size = 2, .epochs = 2, .verbose = FL_VERBOSE_SILENT, .prefetch = pf,
                                      .workers = 2);
        CHECK(h == NULL);
        CHECK_STR_CONTAINS(fl_last_error(), "epoch 1/2, step ");
        CHECK_STR_CONTAINS(fl_last_error(), "bad/dogs/i4.jpg: not a readable JPEG image");
        fl_model_free(m);
        fl_data_stream_free(s);
    }
}

static fl_status stop_at_step_2(fl_model *m, int64_t batch, fl_logs *logs, void *user) {
    (void)logs;
    (void)user;
    if (batch == 1) fl_model_stop_training(m);
    return FL_OK;
}

static void test_early_stop(void) {
    counting c = {-1, 0};
    int64_t xs[1] = {3};
    fl_data_stream *s = fl_data_stream_new(400, 1, xs, FL_FLOAT32, 0, NULL, counting_read, NULL, &c);
    fl_model *m = fl_sequential(fl_input(3), fl_dense(400, .activation = FL_SOFTMAX));
    fl_compile(m, fl_sgd(), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY);
    fl_callback cb = {.on_batch_end = stop_at_step_2};
    fl_callback *cbs[2] = {&cb, NULL};
    fl_history *h = fl_fit_stream(m, s, .batch_size = 4, .epochs = 5, .verbose = FL_VERBOSE_SILENT, .prefetch = 6,
                                  .workers = 3, .callbacks = cbs, .no_nan_check = true);
    CHECK_MSG(h != NULL, "%s", fl_last_error());
    CHECK(h && fl_history_epochs(h) == 1 && fl_history_steps(h) == 2);
    /* the readers stopped: at most the ring (7 batches) and the three in flight were read, not the epoch's 100 */
    CHECK_MSG(c.reads <= 2 + 7 + 3, "%d batches read for a 2-step epoch", c.reads);
    fl_history_free(h);
    /* EarlyStopping on a stream: stops after the epochs it says, History as long */
    fl_callback *es = fl_early_stopping(.monitor = "loss", .patience = 0, .min_delta = 100);
    cbs[0] = es;
    h = fl_fit_stream(m, s, .batch_size = 50, .epochs = 6, .verbose = FL_VERBOSE_SILENT, .callbacks = cbs,
                      .no_nan_check = true);
    CHECK_MSG(h && fl_history_epochs(h) == 2, "EarlyStopping: %d epochs", h ? fl_history_epochs(h) : -1);
    fl_history_free(h);
    fl_callback_free(es);
    fl_model_free(m);
    fl_data_stream_free(s);
}

/* ------------------------------------------------------------ augmentation */

static void test_augment(void) {
    if (!fl_image_support()) return;
    fl_dataset d;
    CHECK(fl_image_dataset_from_directory(fx("images/tree"), &d, .image_size = {6, 5}, .no_shuffle = true) == FL_OK);
    const int64_t n = fl_tensor_dim(d.x_train, 0), row = 6 * 5 * 3;
    const float *ref = fl_tensor_data(d.x_train);
    int64_t *all = malloc((size_t)n * sizeof *all);
    for (int64_t i = 0; i < n; i++) all[i] = i;
    float *a = malloc((size_t)(n * row) * 4), *b = malloc((size_t)(n * row) * 4);
    /* flip only: each sample is itself or its mirror; about half flipped; the same seed the same choice */
    fl_data_stream *s = fl_data_stream_augment(fl_image_stream_from_directory(fx("images/tree"), .image_size = {6, 5},
                                                                              .no_shuffle = true),
                                               .flip_horizontal = true, .seed = 9);
    CHECK(s != NULL);
    int flipped = 0, wrong = 0, changed = 0;
    for (int ep = 0; ep < 4; ep++) {
        CHECK(fl_data_stream_read(s, ep, all, n, a, NULL) == FL_OK);
        for (int64_t i = 0; i < n; i++) {
            bool same = memcmp(a + i * row, ref + i * row, (size_t)row * 4) == 0, mirror = true;
            for (int y = 0; y < 6; y++)
                for (int x = 0; x < 5; x++)
                    for (int c = 0; c < 3; c++)
                        mirror &= a[i * row + (y * 5 + x) * 3 + c] == ref[i * row + (y * 5 + 4 - x) * 3 + c];
            if (!same && !mirror) wrong++;
            if (!same) flipped++;
        }
        /* read again in two batches of another split, as two workers would: the same images */
        CHECK(fl_data_stream_read(s, ep, all, 3, b, NULL) == FL_OK &&
              fl_data_stream_read(s, ep, all + 3, n - 3, b + 3 * row, NULL) == FL_OK);
        if (memcmp(a, b, (size_t)(n * row) * 4) != 0) changed++;
    }
    CHECK_MSG(wrong == 0, "%d flipped samples are not mirror images", wrong);
    CHECK_MSG(flipped > n && flipped < 3 * n, "%d of %lld samples flipped over 4 epochs", flipped, (long long)(4 * n));
    CHECK(changed == 0);
    CHECK(fl_data_stream_read(s, -1, all, n, a, NULL) == FL_OK); /* evaluation: unchanged */
    CHECK(memcmp(a, ref, (size_t)(n * row) * 4) == 0);
    fl_data_stream_free(s);
    /* translation: the draw from Philox, then TensorFlow's reflect + bilinear (reference below, in double) */
    const float th = 0.4f, tw = 0.3f;
    s = fl_data_stream_augment(fl_image_stream_from_directory(fx("images/tree"), .image_size = {6, 5}, .no_shuffle = true),
                               .translate_height = th, .translate_width = tw, .seed = 4);
    CHECK(s && fl_data_stream_read(s, 2, all, n, a, NULL) == FL_OK);
    double worst = 0;
    int moved = 0;
    for (int64_t i = 0; i < n; i++) {
        fl_philox4 r = fl_philox_block(4, 0x4155474d454e54ull ^ ((uint64_t)2 << 56), (uint64_t)i);
        double dy = (-th + 2 * th * fl_u32_to_unit(r.v[1])) * 6, dx = (-tw + 2 * tw * fl_u32_to_unit(r.v[2])) * 5;
        if (fabs(dx) > 0.5 || fabs(dy) > 0.5) moved++;
        for (int y = 0; y < 6; y++)
            for (int x = 0; x < 5; x++) {
                /* mirror (d c b a | a b c d): coordinate -0.5 .. len - 0.5 maps back into the image */
                double sy = y - dy, sx = x - dx;
                if (sy < 0) sy = -sy - 1;
                if (sy > 5) sy = 2 * 6 - sy - 1;
                if (sx < 0) sx = -sx - 1;
                if (sx > 4) sx = 2 * 5 - sx - 1;
                sy = sy < 0 ? 0 : sy > 5 ? 5 : sy;
                sx = sx < 0 ? 0 : sx > 4 ? 4 : sx;
                int y0 = (int)floor(sy), x0 = (int)floor(sx);
                double fy = sy - y0, fx2 = sx - x0;
                for (int c = 0; c < 3; c++) {
                    double v00 = ref[i * row + (y0 * 5 + x0) * 3 + c];
                    double v01 = x0 + 1 < 5 ? ref[i * row + (y0 * 5 + x0 + 1) * 3 + c] : 0;
                    double v10 = y0 + 1 < 6 ? ref[i * row + ((y0 + 1) * 5 + x0) * 3 + c] : 0;
                    double v11 = x0 + 1 < 5 && y0 + 1 < 6 ? ref[i * row + ((y0 + 1) * 5 + x0 + 1) * 3 + c] : 0;
                    double want = (1 - fy) * ((1 - fx2) * v00 + fx2 * v01) + fy * ((1 - fx2) * v10 + fx2 * v11);
                    double got = a[i * row + (y * 5 + x) * 3 + c];
                    if (fabs(got - want) > worst) worst = fabs(got - want);
                }
            }
    }
    CHECK_MSG(worst < 1e-3, "translation differs from the reference by %g", worst);
    CHECK(moved > 0);
    fl_data_stream_free(s);
    /* the transform itself against Keras 3 on TensorFlow (tools/augment_fixture.py): RandomFlip's flip, then
     * affine_transform with RandomTranslation's matrix, bilinear, fill_mode "reflect" */
    fl_arrays ref_t;
    CHECK_MSG(fl_load_npz(fx("augment/translate.npz"), &ref_t) == FL_OK, "%s", fl_last_error());
    fl_tensor *tx = fl_arrays_get(&ref_t, "x"), *tflip = fl_arrays_get(&ref_t, "flip"), *tdy = fl_arrays_get(&ref_t, "dy");
    fl_tensor *tdx = fl_arrays_get(&ref_t, "dx"), *tout = fl_arrays_get(&ref_t, "out");
    CHECK(tx && tflip && tdy && tdx && tout && fl_tensor_ndim(tx) == 4);
    if (tx && tflip && tdy && tdx && tout) {
        const int th2 = (int)fl_tensor_dim(tx, 1), tw2 = (int)fl_tensor_dim(tx, 2), tc = (int)fl_tensor_dim(tx, 3);
        const int64_t trow = (int64_t)th2 * tw2 * tc;
        float *scratch = malloc((size_t)trow * 4);
        double tworst = 0;
        for (int64_t i = 0; i < fl_tensor_dim(tx, 0); i++) {
            float *img = (float *)fl_tensor_data(tx) + i * trow;
            fl_augment_image(img, scratch, th2, tw2, tc, ((int32_t *)fl_tensor_data(tflip))[i] != 0,
                             ((float *)fl_tensor_data(tdy))[i], ((float *)fl_tensor_data(tdx))[i]);
            for (int64_t k = 0; k < trow; k++) {
                double e = fabs(img[k] - ((float *)fl_tensor_data(tout))[i * trow + k]);
                if (e > tworst) tworst = e;
            }
        }
        printf("augment vs Keras affine_transform: max |diff| %g\n", tworst);
        CHECK_MSG(tworst <= 1e-4, "augmentation differs from Keras's affine_transform by %g (of 0..255)", tworst);
        free(scratch);
    }
    fl_arrays_free(&ref_t);
    /* not images: refused */
    int64_t xs[1] = {3};
    counting c = {-1, 0};
    fl_data_stream *u = fl_data_stream_new(5, 1, xs, FL_FLOAT32, 0, NULL, counting_read, NULL, &c);
    CHECK(fl_data_stream_augment(u, .flip_horizontal = true) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "(height, width, channels)");
    fl_data_stream_free(u);
    free(all);
    free(a);
    free(b);
    fl_dataset_free(&d);
}

int main(int argc, char **argv) {
    fixtures = argc > 1 ? argv[1] : "tests/fixtures/data";
    snprintf(tmpdir, sizeof tmpdir, "/tmp/flynn_test_stream_XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    test_image_stream();
    test_npy_stream();
    test_prefetch();
    test_fit_equal();
    test_fit_images();
    test_bad_image_mid_epoch();
    test_early_stop();
    test_augment();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_report("test_stream");
}
