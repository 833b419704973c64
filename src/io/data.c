/*
 * data.c — the dataset side of the data API: fl_load_mnist (MNIST and
 * Fashion-MNIST from their four IDX files), fl_dataset_free, and the two
 * label/feature helpers fl_to_float and fl_one_hot, fl_load_npy_xy and the
 * x/y check the other array loaders share (fl_data_check_xy), and
 * fl_data_info_free.
 *
 * fl_load_mnist looks for each of train-images-idx3-ubyte,
 * train-labels-idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte
 * as "<name>.gz" first, then "<name>" (idx.c detects compression from the
 * content). Images must be (N, 28, 28) uint8 and labels (N,) uint8 with the
 * same N and values 0..9. With max_train/max_test only the first rows are
 * read (and a gzip file is only decompressed that far). Output: x float32
 * (N, 28, 28, 1) = byte / 255 (Keras' x.astype("float32") / 255), y float32
 * (N,). Every loader here leaves *out empty (all NULL) on error.
 */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* open, fstat, mkstemp, fsync, ... under -std=c11 */
#endif
#include "flynn/flynn.h"
#include "core/error.h"
#include "core/tensor.h"
#include "io/io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


#define MNIST_HINT \
    "install the Debian package dataset-fashion-mnist (Fashion-MNIST in /usr/share/datasets/fashion-mnist)"
#define MNIST_FILES \
    "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte"

void fl_dataset_free(fl_dataset *d) {
    if (!d) return;
    fl_tensor_free(d->x_train);
    fl_tensor_free(d->y_train);
    fl_tensor_free(d->x_test);
    fl_tensor_free(d->y_test);
    memset(d, 0, sizeof *d);
}

static bool is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && !S_ISDIR(st.st_mode);
}

/* The path of dir/name.gz or else dir/name, whichever exists first; NULL
 * with the error set when neither does. */
static char *find_file(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    bool slash = a > 0 && dir[a - 1] != '/';
    char *p = fl_malloc(a + slash + b + 4, "file path");
    if (!p) return NULL;
    memcpy(p, dir, a);
    if (slash) p[a] = '/';
    memcpy(p + a + slash, name, b);
    memcpy(p + a + slash + b, ".gz", 4);
    if (is_file(p)) return p;
    p[a + slash + b] = 0;
    if (is_file(p)) return p;
    free(p);
    struct stat st;
    const char *why = stat(dir, &st) != 0 ? " (the folder does not exist)"
                      : !S_ISDIR(st.st_mode) ? " (it is not a folder)" : "";
    return fl_error_null(FL_ERR_IO,
                         "fl_load_mnist: neither %s.gz nor %s found in %s%s; expected the four MNIST / "
                         "Fashion-MNIST files " MNIST_FILES ", each optionally gzipped (.gz); hint: " MNIST_HINT,
                         name, name, dir, why);
}

static fl_status bad_shape(const char *path, const fl_tensor *t, const char *expected) {
    char sh[160];
    return fl_error(FL_ERR_FORMAT, "fl_load_mnist: %s holds %s %s, expected %s", path, fl_dtype_name(t->dtype),
                    fl_shape_str(t->ndim, t->shape, sh, sizeof sh), expected);
}

/* One split: images and labels -> x (N, 28, 28, 1), y (N,). */
static fl_status load_split(const char *dir, const char *img_name, const char *lbl_name, int64_t max, fl_tensor **xo,
                            fl_tensor **yo) {
    fl_status s = FL_OK;
    char *ip = NULL, *lp = NULL;
    fl_tensor *img = NULL, *lbl = NULL, *x = NULL, *y = NULL;
    int64_t n_img = 0, n_lbl = 0;

    if (!(ip = find_file(dir, img_name)) || !(lp = find_file(dir, lbl_name))) goto fail;
    if (!(img = fl_idx_load_rows(ip, max, &n_img))) goto fail_prefix;
    if (img->dtype != FL_UINT8 || img->ndim != 3 || img->shape[1] != 28 || img->shape[2] != 28) {
        bad_shape(ip, img, "uint8 images (N, 28, 28)");
        goto fail;
    }
    if (!(lbl = fl_idx_load_rows(lp, max, &n_lbl))) goto fail_prefix;
    if (lbl->dtype != FL_UINT8 || lbl->ndim != 1) {
        bad_shape(lp, lbl, "uint8 labels (N,)");
        goto fail;
    }
    if (n_img != n_lbl) {
        fl_error(FL_ERR_FORMAT, "fl_load_mnist: %s has %lld images but %s has %lld labels", ip, (long long)n_img, lp,
                 (long long)n_lbl);
        goto fail;
    }
    const int64_t n = img->shape[0];
    const unsigned char *lv = lbl->data;
    for (int64_t i = 0; i < n; i++)
        if (lv[i] > 9) {
            fl_error(FL_ERR_FORMAT, "fl_load_mnist: %s: label %lld is %u, expected 0..9", lp, (long long)i, lv[i]);
            goto fail;
        }
    if (!(x = fl_tensor_zeros(FL_FLOAT32, n, 28, 28, 1)) || !(y = fl_tensor_zeros(FL_FLOAT32, n))) goto fail;
    const unsigned char *iv = img->data;
    float *xd = x->data, *yd = y->data;
    for (int64_t i = 0; i < n * 784; i++) xd[i] = (float)iv[i] / 255.0f;
    for (int64_t i = 0; i < n; i++) yd[i] = (float)lv[i];
    *xo = x;
    *yo = y;
    goto out;
fail_prefix:
    fl_error_prefix("fl_load_mnist: ");
fail:
    s = fl_last_status() != FL_OK ? fl_last_status() : FL_ERR_NOMEM;
    fl_tensor_free(x);
    fl_tensor_free(y);
out:
    free(ip);
    free(lp);
    fl_tensor_free(img);
    fl_tensor_free(lbl);
    return s;
}

fl_status fl_load_mnist(const char *dir, int64_t max_train, int64_t max_test, fl_dataset *out) {
    if (!out) return fl_error(FL_ERR_INVALID_ARG, "fl_load_mnist: out is NULL");
    memset(out, 0, sizeof *out);
    if (!dir || !*dir) return fl_error(FL_ERR_INVALID_ARG, "fl_load_mnist: dir is NULL or empty; hint: " MNIST_HINT);
    if (max_train < 0 || max_test < 0)
        return fl_error(FL_ERR_INVALID_ARG, "fl_load_mnist: max_train %lld / max_test %lld, expected >= 0 (0 = all)",
                        (long long)max_train, (long long)max_test);
    fl_status s = load_split(dir, "train-images-idx3-ubyte", "train-labels-idx1-ubyte", max_train, &out->x_train,
                             &out->y_train);
    if (s == FL_OK)
        s = load_split(dir, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", max_test, &out->x_test, &out->y_test);
    if (s != FL_OK) fl_dataset_free(out);
    return s;
}

fl_tensor *fl_to_float(const fl_tensor *t, float scale) {
    if (!t) return fl_error_null(FL_ERR_INVALID_ARG, "fl_to_float: tensor is NULL");
    fl_tensor *o = fl_tensor_new(FL_FLOAT32, t->ndim, t->shape);
    if (!o) return NULL;
    const int64_t n = fl_tensor_size(t);
    float *d = o->data;
    switch (t->dtype) {
    case FL_UINT8: {
        const uint8_t *s = t->data;
        for (int64_t i = 0; i < n; i++) d[i] = (float)s[i] * scale;
        break;
    }
    case FL_INT32: {
        const int32_t *s = t->data;
        for (int64_t i = 0; i < n; i++) d[i] = (float)s[i] * scale;
        break;
    }
    case FL_FLOAT32: {
        const float *s = t->data;
        for (int64_t i = 0; i < n; i++) d[i] = s[i] * scale;
        break;
    }
    }
    return o;
}

fl_tensor *fl_one_hot(const fl_tensor *labels, int num_classes) {
    if (!labels) return fl_error_null(FL_ERR_INVALID_ARG, "fl_one_hot: labels is NULL");
    if (num_classes <= 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_one_hot: num_classes is %d, expected > 0", num_classes);
    if (!(labels->ndim == 1 || (labels->ndim == 2 && labels->shape[1] == 1))) {
        char sh[160];
        return fl_error_null(FL_ERR_SHAPE, "fl_one_hot: labels have shape %s, expected (N,) or (N, 1)",
                             fl_shape_str(labels->ndim, labels->shape, sh, sizeof sh));
    }
    const int64_t n = labels->shape[0];
    if (n > INT64_MAX / num_classes / 4)
        return fl_error_null(FL_ERR_SHAPE, "fl_one_hot: %lld x %d is too large", (long long)n, num_classes);
    fl_tensor *o = fl_tensor_zeros(FL_FLOAT32, n, (int64_t)num_classes);
    if (!o) return NULL;
    float *d = o->data;
    for (int64_t i = 0; i < n; i++) {
        int64_t c;
        switch (labels->dtype) {
        case FL_UINT8: c = ((const uint8_t *)labels->data)[i]; break;
        case FL_INT32: c = ((const int32_t *)labels->data)[i]; break;
        default: {
            float v = ((const float *)labels->data)[i];
            if (!(v >= 0.0f && v < (float)num_classes && v == floorf(v))) {
                fl_tensor_free(o);
                return fl_error_null(FL_ERR_INVALID_ARG,
                                     "fl_one_hot: label %lld is %g, expected an integer in [0, %d)", (long long)i,
                                     (double)v, num_classes);
            }
            c = (int64_t)v;
        }
        }
        if (c < 0 || c >= num_classes) {
            fl_tensor_free(o);
            return fl_error_null(FL_ERR_INVALID_ARG, "fl_one_hot: label %lld is %lld, expected an integer in [0, %d)",
                                 (long long)i, (long long)c, num_classes);
        }
        d[i * num_classes + c] = 1.0f;
    }
    return o;
}

fl_status fl_data_check_xy(const char *what_x, fl_tensor **xp, const char *what_y, const fl_tensor *y) {
    fl_tensor *x = *xp;
    char a[160], b[160];
    if (x->ndim < 1 || y->ndim < 1 || x->shape[0] != y->shape[0] || x->shape[0] == 0)
        return fl_error(FL_ERR_FORMAT,
                        "x and y must hold the same number of samples (dimension 0, at least 1): %s has shape %s "
                        "(%lld samples), %s has shape %s (%lld)",
                        what_x, fl_shape_str(x->ndim, x->shape, a, sizeof a), x->ndim ? (long long)x->shape[0] : 0LL,
                        what_y, fl_shape_str(y->ndim, y->shape, b, sizeof b), y->ndim ? (long long)y->shape[0] : 0LL);
    if (x->dtype == FL_UINT8) { /* integers stay integers: int32 (a float input converts them exactly) */
        fl_tensor *c = fl_tensor_new(FL_INT32, x->ndim, x->shape);
        if (!c) return fl_last_status();
        for (int64_t i = 0; i < fl_tensor_size(x); i++) ((int32_t *)c->data)[i] = ((const uint8_t *)x->data)[i];
        fl_tensor_free(x);
        *xp = c;
    }
    return FL_OK;
}

fl_status fl_load_npy_xy(const char *x_path, const char *y_path, fl_dataset *out) {
    if (!out) return fl_error(FL_ERR_INVALID_ARG, "fl_load_npy_xy: out is NULL");
    memset(out, 0, sizeof *out);
    if (!x_path || !y_path) return fl_error(FL_ERR_INVALID_ARG, "fl_load_npy_xy: a path is NULL");
    fl_tensor *x = fl_load_npy(x_path);
    if (!x) return fl_last_status();
    fl_tensor *y = fl_load_npy(y_path);
    if (!y) { fl_tensor_free(x); return fl_last_status(); }
    fl_status s = fl_data_check_xy(x_path, &x, y_path, y);
    if (s != FL_OK) {
        fl_error_prefix("fl_load_npy_xy: ");
        fl_tensor_free(x);
        fl_tensor_free(y);
        return s;
    }
    out->x_train = x;
    out->y_train = y;
    return FL_OK;
}

void fl_data_info_free(fl_data_info *info) {
    if (!info) return;
    for (int i = 0; i < info->num_classes && info->class_names; i++) free(info->class_names[i]);
    for (int64_t i = 0; i < info->num_paths && info->file_paths; i++) free(info->file_paths[i]);
    free(info->class_names);
    free(info->file_paths);
    memset(info, 0, sizeof *info);
}
