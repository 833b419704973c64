/*
 * stream.c — data sets read from disk batch by batch (fl_data_stream) and
 * the prefetcher that reads them on background threads while a training
 * step runs (fl_prefetch, io.h, used by fl_fit_stream in train.c).
 *
 * A stream is a small table: the sample count and shapes, and read(epoch,
 * idx[0..b), x, y), which may run on several threads at once. Kinds:
 *   images   fl_image_stream_from_directory: images.c's file index (the same
 *            listing, shuffle and split as fl_image_dataset_from_directory)
 *            and images.c's decoder, one file per sample when read;
 *   npy      fl_npy_stream: rows of x read with pread at their offset (the
 *            file is never read whole; the page cache does the rest), y kept
 *            in memory (small: N labels);
 *   user     fl_data_stream_new: the caller's read function;
 *   map      fl_data_stream_augment / fl_data_stream_one_hot: another stream's
 *            samples, flipped and translated, or their labels one-hot;
 *   view     fl_data_stream_take: a range of another stream's samples.
 * Views and maps hold a reference to the stream they read (refs).
 *
 * The prefetcher keeps depth + 1 batch buffers in a ring: batch k goes to
 * slot k % (depth + 1). Workers take batch numbers in order and fill their
 * slot once the caller has released the batch that used it before; the
 * caller waits for slot k to hold batch k. So batches arrive in order
 * whatever the number of workers, and at most depth batches are read ahead
 * of the one the step uses. A failed read marks its slot; no worker takes a
 * later batch, and the caller gets the error when it reaches that batch.
 * fl_prefetch_end sets `stop`, wakes every worker and joins them: a worker
 * finishes the read in flight (one batch) and exits, so nothing hangs on an
 * early stop or an error.
 */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "core/clock.h"
#include "flynn/flynn.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "io/io.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct fl_data_stream {
    int64_t n;
    int xnd, ynd; /* ynd -1: no y */
    int64_t xs[FL_MAX_DIMS], ys[FL_MAX_DIMS];
    int64_t xrow, yrow; /* elements per sample */
    fl_dtype xdt;
    int classes;
    char **class_names; /* borrowed from the kind's data (NULL: none) */
    char desc[1100];
    fl_status (*read)(fl_data_stream *s, int epoch, const int64_t *idx, int64_t b, void *x, float *y);
    void (*destroy)(fl_data_stream *s);
    void *impl;
    atomic_int refs;
};

static fl_data_stream *stream_alloc(int64_t n, int xnd, const int64_t *xs, fl_dtype xdt, int ynd, const int64_t *ys) {
    fl_data_stream *s = fl_calloc(1, sizeof *s, "stream");
    if (!s) return NULL;
    s->n = n;
    s->xnd = xnd;
    s->ynd = ynd;
    s->xdt = xdt;
    s->xrow = s->yrow = 1;
    for (int i = 0; i < xnd; i++) s->xrow *= (s->xs[i] = xs[i]);
    for (int i = 0; i < ynd; i++) s->yrow *= (s->ys[i] = ys[i]);
    if (ynd < 0) s->yrow = 0;
    atomic_init(&s->refs, 1);
    return s;
}

static fl_status check_idx(const fl_data_stream *s, const int64_t *idx, int64_t b, const char *what) {
    for (int64_t i = 0; i < b; i++)
        if (idx[i] < 0 || idx[i] >= s->n)
            return fl_error(FL_ERR_INVALID_ARG, "%s: sample %lld asked for, the stream has %lld (0..%lld)", what,
                            (long long)idx[i], (long long)s->n, (long long)s->n - 1);
    return FL_OK;
}

int64_t fl_data_stream_size(const fl_data_stream *s) { return s ? s->n : 0; }
int fl_data_stream_x_shape(const fl_data_stream *s, int64_t *shape) {
    if (!s) return 0;
    if (shape) memcpy(shape, s->xs, (size_t)s->xnd * sizeof *shape);
    return s->xnd;
}
fl_dtype fl_data_stream_x_dtype(const fl_data_stream *s) { return s ? s->xdt : FL_FLOAT32; }
int fl_data_stream_y_shape(const fl_data_stream *s, int64_t *shape) {
    if (!s) return -1;
    if (shape && s->ynd > 0) memcpy(shape, s->ys, (size_t)s->ynd * sizeof *shape);
    return s->ynd;
}
int fl_data_stream_num_classes(const fl_data_stream *s) { return s ? s->classes : 0; }
const char *fl_data_stream_class_name(const fl_data_stream *s, int i) {
    return s && s->class_names && i >= 0 && i < s->classes ? s->class_names[i] : NULL;
}
const char *fl_data_stream_description(const fl_data_stream *s) { return s ? s->desc : ""; }

fl_status fl_data_stream_read(fl_data_stream *s, int epoch, const int64_t *idx, int64_t b, void *x, float *y) {
    if (!s || !idx || !x) return fl_error(FL_ERR_INVALID_ARG, "fl_data_stream_read: NULL argument");
    if (b < 0) return fl_error(FL_ERR_INVALID_ARG, "fl_data_stream_read: %lld samples, expected >= 0", (long long)b);
    if (y && s->ynd < 0) return fl_error(FL_ERR_INVALID_ARG, "fl_data_stream_read: y asked for, the stream has no labels");
    FL_TRY(check_idx(s, idx, b, "fl_data_stream_read"));
    return s->read(s, epoch, idx, b, x, y);
}

void fl_data_stream_free(fl_data_stream *s) {
    if (!s || atomic_fetch_sub(&s->refs, 1) != 1) return;
    if (s->destroy) s->destroy(s);
    free(s);
}

/* ------------------------------------------------------------ images */

typedef struct image_impl {
    fl_image_index ix;
    int64_t first;
} image_impl;

static fl_status image_read(fl_data_stream *s, int epoch, const int64_t *idx, int64_t b, void *x, float *y) {
    (void)epoch;
    image_impl *im = s->impl;
    const fl_image_index *ix = &im->ix;
    for (int64_t i = 0; i < b; i++) {
        const int64_t k = im->first + idx[i];
        fl_status st = fl_image_read_into(ix->paths[k], ix->channels, ix->height, ix->width, (float *)x + i * s->xrow);
        if (st != FL_OK) {
            fl_error_prefix("image %lld of %lld: ", (long long)idx[i] + 1, (long long)s->n);
            return st;
        }
        if (y) fl_image_label_into(ix->label_mode, ix->num_classes, ix->labels[k], y + i * s->yrow);
    }
    return FL_OK;
}

static void image_destroy(fl_data_stream *s) {
    image_impl *im = s->impl;
    fl_image_index_free(&im->ix);
    free(im);
}

fl_data_stream *fl_image_stream_from_directory_(const char *dir, fl_image_dataset_args a) {
    const char *who = "fl_image_stream_from_directory";
    if (a.subset && strcmp(a.subset, "both") == 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: subset \"both\" makes two data sets: open one stream with subset "
                             "\"training\" and one with \"validation\"", who);
    if (a.info) return fl_error_null(FL_ERR_INVALID_ARG, "%s: .info is for the in-memory loader; the stream tells its "
                                     "classes (fl_data_stream_class_name) and description itself", who);
    image_impl *im = fl_calloc(1, sizeof *im, "image stream");
    if (!im) return NULL;
    if (fl_image_index_build(dir, a, who, &im->ix) != FL_OK) { free(im); return NULL; }
    const fl_image_index *ix = &im->ix;
    int64_t xs[3] = {ix->height, ix->width, ix->channels}, ys[1] = {ix->num_classes};
    int ynd = ix->no_labels ? -1 : ix->label_mode == FL_LABEL_INT ? 0 : 1;
    if (ix->label_mode == FL_LABEL_BINARY) ys[0] = 1;
    im->first = ix->first[0];
    fl_data_stream *s = stream_alloc(ix->count[0], 3, xs, FL_FLOAT32, ynd, ys);
    if (!s) { fl_image_index_free(&im->ix); free(im); return NULL; }
    s->impl = im;
    s->read = image_read;
    s->destroy = image_destroy;
    s->classes = ix->num_classes;
    s->class_names = ix->class_names;
    snprintf(s->desc, sizeof s->desc, "%s, read from disk per batch", ix->description);
    return s;
}

/* ------------------------------------------------------------ .npy rows */

typedef struct npy_impl {
    char *path;
    int fd;
    fl_npy_layout L;
    int64_t row_bytes;
    float *y; /* n * yrow, or NULL */
} npy_impl;

static fl_status npy_read(fl_data_stream *s, int epoch, const int64_t *idx, int64_t b, void *x, float *y) {
    (void)epoch;
    npy_impl *p = s->impl;
    const size_t rb = (size_t)p->row_bytes;
    const bool direct = p->L.elem_size == 4; /* f4, i4: the file's bytes are x's (little-endian hosts) */
    unsigned char *tmp = direct ? NULL : fl_malloc(rb ? rb : 1, ".npy row buffer");
    if (!direct && !tmp) return fl_last_status();
    fl_status st = FL_OK;
    for (int64_t i = 0; i < b && st == FL_OK; i++) {
        unsigned char *dst = (unsigned char *)x + (size_t)i * (size_t)s->xrow * 4;
        unsigned char *buf = direct ? dst : tmp;
        const off_t at = (off_t)(p->L.offset + idx[i] * p->row_bytes);
        size_t got = 0;
        while (got < rb) {
            ssize_t r = pread(p->fd, buf + got, rb - got, at + (off_t)got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                st = fl_error(FL_ERR_IO, "%s: row %lld: %s", p->path, (long long)idx[i],
                              r < 0 ? strerror(errno) : "the file ends early (was it truncated while training?)");
                break;
            }
            got += (size_t)r;
        }
        if (st != FL_OK) break;
        char bad[32];
        int64_t at_bad;
        if (p->L.dtype == FL_UINT8) { /* u1, b1: bytes, widened to int32 (as fl_load_npy_xy) */
            fl_npy_convert(p->L.kind, buf, buf, (size_t)s->xrow, bad, sizeof bad);
            for (int64_t j = 0; j < s->xrow; j++) ((int32_t *)dst)[j] = buf[j];
        } else if ((at_bad = fl_npy_convert(p->L.kind, buf, dst, (size_t)s->xrow, bad, sizeof bad)) >= 0) {
            st = fl_error(FL_ERR_UNSUPPORTED, "%s: row %lld, element %lld is %s, which does not fit in int32 ('%s' data "
                          "loads as int32)", p->path, (long long)idx[i], (long long)at_bad, bad, p->L.descr);
        }
    }
    free(tmp);
    if (st == FL_OK && y)
        for (int64_t i = 0; i < b; i++)
            memcpy(y + i * s->yrow, p->y + idx[i] * s->yrow, (size_t)s->yrow * sizeof(float));
    return st;
}

static void npy_destroy(fl_data_stream *s) {
    npy_impl *p = s->impl;
    if (p->fd >= 0) close(p->fd);
    free(p->path);
    free(p->y);
    free(p);
}

fl_data_stream *fl_npy_stream(const char *x_path, const char *y_path) {
    if (!x_path) return fl_error_null(FL_ERR_INVALID_ARG, "fl_npy_stream: x_path is NULL");
    npy_impl *p = fl_calloc(1, sizeof *p, ".npy stream");
    if (!p) return NULL;
    p->fd = -1;
    fl_tensor *yt = NULL;
    fl_data_stream *s = NULL;
    FILE *f = NULL;
    if (!(p->path = strdup(x_path))) { fl_error(FL_ERR_NOMEM, "out of memory"); goto fail; }
    if ((p->fd = open(x_path, O_RDONLY | O_CLOEXEC)) < 0) {
        fl_error(FL_ERR_IO, "%s: cannot open: %s", x_path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(p->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        fl_error(FL_ERR_IO, "%s: not a regular file, expected a .npy file", x_path);
        goto fail;
    }
    int fd2 = dup(p->fd);
    if (fd2 < 0 || !(f = fdopen(fd2, "rb"))) {
        if (fd2 >= 0) close(fd2);
        fl_error(FL_ERR_IO, "%s: %s", x_path, strerror(errno));
        goto fail;
    }
    fl_status rs = fl_npy_read_layout(f, x_path, (int64_t)st.st_size, &p->L);
    fclose(f);
    if (rs != FL_OK) goto fail;
    if (p->L.ndim < 1 || p->L.shape[0] < 1) {
        char sh[160];
        fl_error(FL_ERR_FORMAT, "%s: shape %s, expected (N, ...) with at least one sample", x_path,
                 fl_shape_str(p->L.ndim, p->L.shape, sh, sizeof sh));
        goto fail;
    }
    const int64_t n = p->L.shape[0];
    p->row_bytes = p->L.nelem / n * (int64_t)p->L.elem_size;
    int ynd = -1;
    int64_t ys[FL_MAX_DIMS] = {0};
    int classes = 0;
    if (y_path) {
        if (!(yt = fl_load_npy(y_path))) goto fail;
        if (yt->ndim < 1 || yt->shape[0] != n) {
            char a[160], b[160];
            fl_error(FL_ERR_FORMAT, "x and y must hold the same number of samples (dimension 0): %s has shape %s (%lld "
                     "samples), %s has shape %s", x_path, fl_shape_str(p->L.ndim, p->L.shape, a, sizeof a), (long long)n,
                     y_path, fl_shape_str(yt->ndim, yt->shape, b, sizeof b));
            goto fail;
        }
        ynd = yt->ndim - 1;
        memcpy(ys, yt->shape + 1, (size_t)ynd * sizeof *ys);
        fl_tensor *yf = fl_to_float(yt, 1.0f);
        if (!yf) goto fail;
        int64_t cnt = fl_tensor_size(yf);
        p->y = fl_malloc((size_t)cnt * sizeof(float), "labels");
        if (p->y) memcpy(p->y, fl_tensor_data(yf), (size_t)cnt * sizeof(float));
        fl_tensor_free(yf);
        if (!p->y) goto fail;
        bool ints = cnt == n; /* (N,) or (N, 1) class indices: the number of classes is max + 1 */
        float most = -1;
        for (int64_t i = 0; ints && i < cnt; i++) {
            ints = p->y[i] >= 0 && p->y[i] == floorf(p->y[i]) && p->y[i] < 1e6f;
            if (p->y[i] > most) most = p->y[i];
        }
        if (ints) classes = (int)most + 1;
    }
    int64_t xs[FL_MAX_DIMS];
    memcpy(xs, p->L.shape + 1, (size_t)(p->L.ndim - 1) * sizeof *xs);
    s = stream_alloc(n, p->L.ndim - 1, xs, p->L.dtype == FL_FLOAT32 ? FL_FLOAT32 : FL_INT32, ynd, ys);
    if (!s) goto fail;
    s->impl = p;
    s->read = npy_read;
    s->destroy = npy_destroy;
    s->classes = classes;
    char a[160];
    snprintf(s->desc, sizeof s->desc, "x %s %s (%s, %.1f MiB, read by rows from disk)%s%s", x_path,
             fl_shape_str(p->L.ndim, p->L.shape, a, sizeof a), p->L.descr,
             (double)p->L.nelem * (double)p->L.elem_size / (1 << 20), y_path ? ", y " : "", y_path ? y_path : "");
    fl_tensor_free(yt);
    return s;
fail:
    fl_error_prefix("fl_npy_stream: ");
    fl_tensor_free(yt);
    npy_destroy(&(fl_data_stream){.impl = p});
    return NULL;
}

/* ------------------------------------------------------------ user streams */

typedef struct user_impl {
    fl_stream_read_fn read;
    void (*free_user)(void *);
    void *user;
} user_impl;

static fl_status user_read(fl_data_stream *s, int epoch, const int64_t *idx, int64_t b, void *x, float *y) {
    user_impl *u = s->impl;
    fl_clear_error();
    fl_status st = u->read(u->user, epoch, idx, b, x, y);
    if (st != FL_OK && fl_last_status() == FL_OK) fl_error(st, "the stream's read function failed (status %d)", (int)st);
    return st;
}

static void user_destroy(fl_data_stream *s) {
    user_impl *u = s->impl;
    if (u->free_user) u->free_user(u->user);
    free(u);
}

fl_data_stream *fl_data_stream_new(int64_t n, int x_ndim, const int64_t *x_shape, fl_dtype x_dtype, int y_ndim,
                                   const int64_t *y_shape, fl_stream_read_fn read, void (*free_user)(void *),
                                   void *user) {
    if (!read) return fl_error_null(FL_ERR_INVALID_ARG, "fl_data_stream_new: read is NULL");
    if (n < 1) return fl_error_null(FL_ERR_INVALID_ARG, "fl_data_stream_new: %lld samples, expected >= 1", (long long)n);
    if (x_ndim < 0 || x_ndim >= FL_MAX_DIMS || y_ndim < -1 || y_ndim >= FL_MAX_DIMS || (x_ndim && !x_shape) ||
        (y_ndim > 0 && !y_shape))
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_data_stream_new: sample ranks x %d, y %d, expected 0..%d (y -1: no "
                             "labels) with their shapes", x_ndim, y_ndim, FL_MAX_DIMS - 1);
    if (x_dtype != FL_FLOAT32 && x_dtype != FL_INT32)
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_data_stream_new: x is %s, expected float32 or int32",
                             fl_dtype_name(x_dtype));
    for (int i = 0; i < x_ndim; i++)
        if (x_shape[i] < 1) return fl_error_null(FL_ERR_INVALID_ARG, "fl_data_stream_new: x dimension %d is %lld", i + 1, (long long)x_shape[i]);
    for (int i = 0; i < y_ndim; i++)
        if (y_shape[i] < 1) return fl_error_null(FL_ERR_INVALID_ARG, "fl_data_stream_new: y dimension %d is %lld", i + 1, (long long)y_shape[i]);
    user_impl *u = fl_calloc(1, sizeof *u, "stream");
    fl_data_stream *s = u ? stream_alloc(n, x_ndim, x_shape, x_dtype, y_ndim, y_shape) : NULL;
    if (!s) { free(u); return NULL; }
    *u = (user_impl){read, free_user, user};
    s->impl = u;
    s->read = user_read;
    s->destroy = user_destroy;
    snprintf(s->desc, sizeof s->desc, "%lld samples from a user stream", (long long)n);
    return s;
}

/* ------------------------------------------------------------ views */

typedef struct view_impl { fl_data_stream *base; int64_t start; } view_impl;

static fl_status view_read(fl_data_stream *s, int epoch, const int64_t *idx, int64_t b, void *x, float *y) {
    view_impl *v = s->impl;
    int64_t *j = fl_malloc((size_t)(b ? b : 1) * sizeof *j, "sample indices");
    if (!j) return fl_last_status();
    for (int64_t i = 0; i < b; i++) j[i] = v->start + idx[i];
    fl_status st = v->base->read(v->base, epoch, j, b, x, y);
    free(j);
    return st;
}

static void view_destroy(fl_data_stream *s) {
    view_impl *v = s->impl;
    fl_data_stream_free(v->base);
    free(v);
}

fl_data_stream *fl_data_stream_take(fl_data_stream *s, int64_t start, int64_t count) {
    if (!s) return fl_error_null(FL_ERR_INVALID_ARG, "fl_data_stream_take: stream is NULL");
    if (start < 0 || count < 1 || start > s->n - count)
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_data_stream_take: samples [%lld, %lld) of a stream of %lld",
                             (long long)start, (long long)(start + count), (long long)s->n);
    view_impl *v = fl_calloc(1, sizeof *v, "stream view");
    fl_data_stream *t = v ? stream_alloc(count, s->xnd, s->xs, s->xdt, s->ynd, s->ys) : NULL;
    if (!t) { free(v); return NULL; }
    atomic_fetch_add(&s->refs, 1);
    *v = (view_impl){s, start};
    t->impl = v;
    t->read = view_read;
    t->destroy = view_destroy;
    t->classes = s->classes;
    t->class_names = s->class_names;
    snprintf(t->desc, sizeof t->desc, "samples %lld..%lld of %.1000s", (long long)start, (long long)(start + count - 1), s->desc);
    return t;
}

fl_data_stream *fl_data_stream_reshape(fl_data_stream *s, int ndim, const int64_t *shape) {
    if (!s) return fl_error_null(FL_ERR_INVALID_ARG, "fl_data_stream_reshape: stream is NULL");
    int64_t k = 1;
    for (int i = 0; i < ndim && shape; i++) k *= shape[i] > 0 ? shape[i] : -1;
    char a[160], b[160];
    if (ndim < 0 || ndim >= FL_MAX_DIMS || (ndim && !shape) || k != s->xrow)
        return fl_error_null(FL_ERR_SHAPE, "fl_data_stream_reshape: samples of shape %s cannot become %s (%lld values each)",
                             fl_shape_str(s->xnd, s->xs, a, sizeof a), shape ? fl_shape_str(ndim, shape, b, sizeof b) : "?",
                             (long long)s->xrow);
    fl_data_stream *t = fl_data_stream_take(s, 0, s->n);
    if (!t) return NULL;
    fl_data_stream_free(s); /* taken over: the view holds it now */
    t->xnd = ndim;
    memcpy(t->xs, shape, (size_t)ndim * sizeof *shape);
    snprintf(t->desc, sizeof t->desc, "%.1100s", s->desc);
    return t;
}

/* ------------------------------------------------------------ maps: augmentation, one-hot */

typedef struct map_impl {
    fl_data_stream *base;
    fl_augment_args aug;
    bool augment;
    int one_hot; /* classes, 0: labels as they are */
} map_impl;

/* TensorFlow's ImageProjectiveTransform "reflect" coordinate (d c b a | a b c d | d c b a), clamped to [0, len - 1]. */
static float reflect_coord(float in, int len) {
    if (len <= 1) return 0;
    const float sz2 = 2.0f * (float)len;
    if (in < 0) {
        if (in < -sz2) in = sz2 * (float)(int)(-in / sz2) + in;
        in = in < -(float)len ? in + sz2 : -in - 1.0f;
    } else if (in > (float)len - 1) {
        in -= sz2 * (float)(int)(in / sz2);
        if (in >= (float)len) in = sz2 - in - 1.0f;
    }
    return in < 0 ? 0 : in > (float)len - 1 ? (float)len - 1 : in;
}

static float pixel_or_zero(const float *img, int h, int w, int c, int y, int x, int k) {
    return y >= 0 && y < h && x >= 0 && x < w ? img[((size_t)y * w + x) * c + k] : 0.0f;
}

/* One (h, w, c) sample in place: flip, then translate by (dy, dx) pixels, bilinear (TensorFlow's order of
 * operations), mirrored at the edges. scratch: h * w * c floats. */
void fl_augment_image(float *img, float *scratch, int h, int w, int c, bool flip, float dy, float dx) {
    if (flip)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w / 2; x++)
                for (int k = 0; k < c; k++) {
                    float *a = img + ((size_t)y * w + x) * c + k, *b = img + ((size_t)y * w + (w - 1 - x)) * c + k;
                    float t = *a; *a = *b; *b = t;
                }
    if (dy == 0 && dx == 0) return;
    memcpy(scratch, img, (size_t)h * w * c * sizeof(float));
    for (int y = 0; y < h; y++) {
        const float iy = reflect_coord((float)y - dy, h), y0 = floorf(iy), y1 = y0 + 1;
        for (int x = 0; x < w; x++) {
            const float ix = reflect_coord((float)x - dx, w), x0 = floorf(ix), x1 = x0 + 1;
            for (int k = 0; k < c; k++) {
                const float v00 = pixel_or_zero(scratch, h, w, c, (int)y0, (int)x0, k);
                const float v01 = pixel_or_zero(scratch, h, w, c, (int)y0, (int)x1, k);
                const float v10 = pixel_or_zero(scratch, h, w, c, (int)y1, (int)x0, k);
                const float v11 = pixel_or_zero(scratch, h, w, c, (int)y1, (int)x1, k);
                const float top = (x1 - ix) * v00 + (ix - x0) * v01, bottom = (x1 - ix) * v10 + (ix - x0) * v11;
                img[((size_t)y * w + x) * c + k] = (y1 - iy) * top + (iy - y0) * bottom;
            }
        }
    }
}

#define FL_AUGMENT_STREAM 0x4155474d454e54ull /* "AUGMENT" */

static fl_status map_read(fl_data_stream *s, int epoch, const int64_t *idx, int64_t b, void *x, float *y) {
    map_impl *m = s->impl;
    fl_data_stream *base = m->base;
    float *yb = NULL;
    if (y && m->one_hot) {
        if (!(yb = fl_malloc((size_t)(b ? b : 1) * sizeof(float), "labels"))) return fl_last_status();
    }
    fl_status st = base->read(base, epoch, idx, b, x, m->one_hot ? yb : y);
    if (st == FL_OK && y && m->one_hot) {
        for (int64_t i = 0; i < b && st == FL_OK; i++) {
            const float v = yb[i];
            if (!(v >= 0 && v < (float)m->one_hot && v == floorf(v))) {
                st = fl_error(FL_ERR_INVALID_ARG, "sample %lld: label %g is not a class index in [0, %d) (the model's "
                              "classes, for categorical_crossentropy)", (long long)idx[i], (double)v, m->one_hot);
                break;
            }
            for (int c = 0; c < m->one_hot; c++) y[i * m->one_hot + c] = 0.0f;
            y[i * m->one_hot + (int)v] = 1.0f;
        }
    }
    free(yb);
    if (st != FL_OK || !m->augment || epoch < 0) return st;
    const int h = (int)s->xs[0], w = (int)s->xs[1], c = (int)s->xs[2];
    float *scratch = fl_malloc((size_t)s->xrow * sizeof(float), "augmentation buffer");
    if (!scratch) return fl_last_status();
    const fl_augment_args *a = &m->aug;
    for (int64_t i = 0; i < b; i++) {
        fl_philox4 r = fl_philox_block(a->seed, FL_AUGMENT_STREAM ^ ((uint64_t)(uint32_t)epoch << 56), (uint64_t)idx[i]);
        const bool flip = a->flip_horizontal && fl_u32_to_unit(r.v[0]) <= 0.5f; /* Keras: uniform <= 0.5 */
        const float dy = a->translate_height > 0
                             ? (-a->translate_height + 2 * a->translate_height * fl_u32_to_unit(r.v[1])) * (float)h : 0;
        const float dx = a->translate_width > 0
                             ? (-a->translate_width + 2 * a->translate_width * fl_u32_to_unit(r.v[2])) * (float)w : 0;
        fl_augment_image((float *)x + i * s->xrow, scratch, h, w, c, flip, dy, dx);
    }
    free(scratch);
    return FL_OK;
}

static void map_destroy(fl_data_stream *s) {
    map_impl *m = s->impl;
    fl_data_stream_free(m->base);
    free(m);
}

static fl_data_stream *map_new(fl_data_stream *s, const map_impl *cfg) {
    map_impl *m = fl_calloc(1, sizeof *m, "stream map");
    int64_t ys[1] = {cfg->one_hot};
    fl_data_stream *t = m ? stream_alloc(s->n, s->xnd, s->xs, s->xdt, cfg->one_hot ? 1 : s->ynd,
                                         cfg->one_hot ? ys : s->ys) : NULL;
    if (!t) { free(m); return NULL; }
    *m = *cfg;
    m->base = s; /* taken over */
    t->impl = m;
    t->read = map_read;
    t->destroy = map_destroy;
    t->classes = s->classes ? s->classes : cfg->one_hot;
    t->class_names = s->class_names;
    snprintf(t->desc, sizeof t->desc, "%s", s->desc);
    return t;
}

fl_data_stream *fl_data_stream_augment_(fl_data_stream *s, fl_augment_args a) {
    if (!s) return fl_error_null(FL_ERR_INVALID_ARG, "fl_data_stream_augment: stream is NULL");
    if (s->xnd != 3 || s->xdt != FL_FLOAT32) {
        char sh[160];
        return fl_error_null(FL_ERR_SHAPE, "fl_data_stream_augment: samples of shape %s (%s), expected float32 images "
                             "(height, width, channels)", fl_shape_str(s->xnd, s->xs, sh, sizeof sh),
                             fl_dtype_name(s->xdt));
    }
    if (!(a.translate_height >= 0 && a.translate_height < 1 && a.translate_width >= 0 && a.translate_width < 1))
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_data_stream_augment: translate %g x %g, expected fractions in [0, 1)",
                             (double)a.translate_height, (double)a.translate_width);
    map_impl cfg = {.aug = a, .augment = true};
    fl_data_stream *t = map_new(s, &cfg);
    if (t) {
        size_t l = strlen(t->desc);
        snprintf(t->desc + l, sizeof t->desc - l, "; augmented:%s%s", a.flip_horizontal ? " random horizontal flip" : "",
                 a.translate_height > 0 || a.translate_width > 0 ? " random translation" : "");
    }
    return t;
}

fl_data_stream *fl_data_stream_one_hot(fl_data_stream *s, int classes) {
    if (!s) return fl_error_null(FL_ERR_INVALID_ARG, "fl_data_stream_one_hot: stream is NULL");
    if (classes < 1) return fl_error_null(FL_ERR_INVALID_ARG, "fl_data_stream_one_hot: %d classes, expected >= 1", classes);
    if (!(s->ynd == 0 || (s->ynd == 1 && s->ys[0] == 1))) {
        char sh[160];
        return fl_error_null(FL_ERR_SHAPE, "fl_data_stream_one_hot: labels of shape %s per sample, expected one class "
                             "index per sample", s->ynd < 0 ? "(none)" : fl_shape_str(s->ynd, s->ys, sh, sizeof sh));
    }
    map_impl cfg = {.one_hot = classes};
    return map_new(s, &cfg);
}

/* ------------------------------------------------------------ the prefetcher */

typedef struct slot {
    void *x;
    float *y;
    int64_t batch, b; /* which batch it holds (-1: none) and its size */
    fl_status status;
    char msg[1024];
} slot;

struct fl_prefetch {
    fl_data_stream *s;
    int64_t bs;
    int depth, workers, nslots, nthreads;
    slot *slots;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t ready, space;
    /* the pass */
    int epoch;
    const int64_t *order;
    int64_t n, nbatches;
    int64_t taken;    /* batches handed to workers */
    int64_t released; /* batches the caller is done with */
    int64_t next_out; /* the batch next() returns next */
    int64_t held;     /* the batch the caller holds, -1: none */
    bool stop, failed;
};

static void read_batch(fl_prefetch *p, int64_t k, slot *sl) {
    const int64_t first = k * p->bs, b = p->n - first < p->bs ? p->n - first : p->bs;
    sl->b = b;
    fl_clear_error();
    sl->status = p->s->read(p->s, p->epoch, p->order + first, b, sl->x, sl->y);
    if (sl->status != FL_OK) snprintf(sl->msg, sizeof sl->msg, "%s", fl_last_error());
}

static void *worker(void *arg) {
    fl_prefetch *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && !p->failed && p->taken < p->nbatches && p->taken >= p->released + p->nslots)
            pthread_cond_wait(&p->space, &p->mu);
        if (p->stop || p->failed || p->taken >= p->nbatches) break;
        const int64_t k = p->taken++;
        slot *sl = &p->slots[k % p->nslots];
        pthread_mutex_unlock(&p->mu);
        read_batch(p, k, sl);
        pthread_mutex_lock(&p->mu);
        sl->batch = k;
        if (sl->status != FL_OK) p->failed = true;
        pthread_cond_broadcast(&p->ready);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

void fl_prefetch_end(fl_prefetch *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->space);
    pthread_cond_broadcast(&p->ready);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nthreads; i++) pthread_join(p->threads[i], NULL);
    p->nthreads = 0;
}

void fl_prefetch_close(fl_prefetch *p) {
    if (!p) return;
    fl_prefetch_end(p);
    for (int i = 0; i < p->nslots && p->slots; i++) { free(p->slots[i].x); free(p->slots[i].y); }
    free(p->slots);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->ready);
    pthread_cond_destroy(&p->space);
    free(p);
}

fl_prefetch *fl_prefetch_open(fl_data_stream *s, int64_t batch_size, int depth, int workers) {
    if (!s || batch_size < 1 || depth < 0 || workers < 1)
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_prefetch_open: stream %p, batch %lld, depth %d, workers %d",
                             (void *)s, (long long)batch_size, depth, workers);
    fl_prefetch *p = fl_calloc(1, sizeof *p, "prefetcher");
    if (!p) return NULL;
    p->s = s;
    p->bs = batch_size;
    p->depth = depth;
    p->workers = depth ? workers : 0;
    p->nslots = depth + 1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->ready, NULL);
    pthread_cond_init(&p->space, NULL);
    p->slots = fl_calloc((size_t)p->nslots, sizeof *p->slots, "prefetch ring");
    p->threads = fl_calloc((size_t)(p->workers ? p->workers : 1), sizeof *p->threads, "prefetch threads");
    bool ok = p->slots && p->threads;
    for (int i = 0; ok && i < p->nslots; i++) {
        p->slots[i].x = fl_malloc((size_t)(batch_size * s->xrow) * 4, "prefetch batch (x)");
        p->slots[i].y = s->yrow ? fl_malloc((size_t)(batch_size * s->yrow) * sizeof(float), "prefetch batch (y)") : NULL;
        ok = p->slots[i].x && (!s->yrow || p->slots[i].y);
        p->slots[i].batch = -1;
    }
    if (!ok) {
        fl_prefetch_close(p);
        return NULL;
    }
    return p;
}

fl_status fl_prefetch_begin(fl_prefetch *p, int epoch, const int64_t *order, int64_t n) {
    fl_prefetch_end(p);
    FL_TRY(check_idx(p->s, order, n, "fl_prefetch"));
    p->epoch = epoch;
    p->order = order;
    p->n = n;
    p->nbatches = (n + p->bs - 1) / p->bs;
    p->taken = p->released = p->next_out = 0;
    p->held = -1;
    p->stop = p->failed = false;
    for (int i = 0; i < p->nslots; i++) p->slots[i].batch = -1;
    for (int i = 0; i < p->workers; i++) {
        int e = pthread_create(&p->threads[i], NULL, worker, p);
        if (e != 0) {
            fl_prefetch_end(p);
            return fl_error(FL_ERR_STATE, "fl_prefetch: cannot start a reading thread: %s", strerror(e));
        }
        p->nthreads++;
    }
    return FL_OK;
}

fl_status fl_prefetch_next(fl_prefetch *p, void **x, float **y, int64_t *b, double *waited) {
    double t0 = fl_clock_seconds();
    if (p->next_out >= p->nbatches)
        return fl_error(FL_ERR_STATE, "fl_prefetch: batch %lld asked for, the pass has %lld", (long long)p->next_out + 1,
                        (long long)p->nbatches);
    const int64_t k = p->next_out;
    slot *sl = &p->slots[k % p->nslots];
    if (p->workers == 0) { /* no prefetch: read now, on this thread */
        read_batch(p, k, sl);
        sl->batch = k;
    } else {
        pthread_mutex_lock(&p->mu);
        if (p->held >= 0) { /* the caller is done with the batch it held: its slot may be refilled */
            p->released = p->held + 1;
            p->held = -1;
            pthread_cond_broadcast(&p->space);
        }
        while (sl->batch != k) pthread_cond_wait(&p->ready, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
    *waited = fl_clock_seconds() - t0;
    if (sl->status != FL_OK) return fl_error(sl->status, "%s", sl->msg);
    p->held = k;
    p->next_out++;
    *x = sl->x;
    *y = sl->y;
    *b = sl->b;
    return FL_OK;
}
