/*
 * tfevents.c — TensorBoard event files, written by hand (no protobuf
 * library): CRC-32C, the TFRecord framing, a protobuf encoder for the few
 * messages used, and the events TensorFlow 2's summary writer writes, byte
 * for byte in the fields that TensorBoard reads (tensorflow/core/util/
 * event.proto, framework/summary.proto, tensor.proto, tensor_shape.proto):
 *
 *   Event          wall_time 1 (double), step 2 (int64), file_version 3,
 *                  summary 5, source_metadata 10 { writer 1 }
 *   Summary        value 1 (repeated)
 *   Summary.Value  tag 1, tensor 8, metadata 9
 *   SummaryMetadata plugin_data 1 { plugin_name 1, content 2 }
 *   TensorProto    dtype 1, tensor_shape 2 { dim 2 { size 1 } },
 *                  tensor_content 4 (little-endian values), string_val 8
 *
 * A scalar is a float32 tensor of shape [] (plugin "scalars"), a histogram a
 * float64 [buckets, 3] tensor (plugin "histograms"), as tf.summary.scalar and
 * tf.summary.histogram write them; fields at their default (step 0, empty
 * plugin content) are left out, as protobuf serializes them.
 */
#include "nn/tfevents.h"
#include "core/error.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------- CRC-32C */

/* bitwise, 8 rounds a byte: the files are small and written once an epoch */
uint32_t fl_crc32c(uint32_t crc, const void *data, size_t n) {
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

uint32_t fl_crc32c_masked(const void *data, size_t n) {
    uint32_t c = fl_crc32c(0, data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ------------------------------------------------------------ protobuf */

void fl_pb_free(fl_pb *b) {
    free(b->buf);
    memset(b, 0, sizeof *b);
}

void fl_pb_raw(fl_pb *b, const void *data, size_t n) {
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        uint8_t *p = realloc(b->buf, cap);
        if (!p) { b->oom = true; return; }
        b->buf = p;
        b->cap = cap;
    }
    if (n) memcpy(b->buf + b->len, data, n);
    b->len += n;
}

void fl_pb_varint(fl_pb *b, uint64_t v) {
    uint8_t t[10];
    int n = 0;
    do {
        t[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) t[n] |= 0x80;
        n++;
    } while (v);
    fl_pb_raw(b, t, (size_t)n);
}

void fl_pb_key(fl_pb *b, int field, int wire) { fl_pb_varint(b, (uint64_t)field << 3 | (uint64_t)wire); }

void fl_pb_uint(fl_pb *b, int field, uint64_t v) {
    fl_pb_key(b, field, 0);
    fl_pb_varint(b, v);
}

static void put_le(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

void fl_pb_double(fl_pb *b, int field, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    uint8_t t[8];
    put_le(t, u, 8);
    fl_pb_key(b, field, 1);
    fl_pb_raw(b, t, 8);
}

void fl_pb_bytes(fl_pb *b, int field, const void *data, size_t n) {
    fl_pb_key(b, field, 2);
    fl_pb_varint(b, n);
    fl_pb_raw(b, data, n);
}

void fl_pb_message(fl_pb *b, int field, const fl_pb *msg) {
    if (msg->oom) b->oom = true;
    fl_pb_bytes(b, field, msg->buf, msg->len);
}

void fl_tfrecord_frame(fl_pb *out, const void *data, size_t n) {
    uint8_t h[12], t[4];
    put_le(h, n, 8);
    put_le(h + 8, fl_crc32c_masked(h, 8), 4);
    put_le(t, fl_crc32c_masked(data, n), 4);
    fl_pb_raw(out, h, 12);
    fl_pb_raw(out, data, n);
    fl_pb_raw(out, t, 4);
}

/* ------------------------------------------------------------ histogram */

/* tensorboard/plugins/histogram/summary_v2.py _buckets: width = (max - min)
 * / buckets, bucket floor((x - min) / width) clamped to the last, edges
 * min + width * i with the last edge max itself. Non-finite values are left
 * out (TensorFlow would spoil every bucket with them). */
void fl_tf_histogram(const float *data, size_t n, int buckets, double *out) {
    memset(out, 0, (size_t)buckets * 3 * sizeof *out);
    double lo = INFINITY, hi = -INFINITY;
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        double x = (double)data[i];
        if (!isfinite(x)) continue;
        if (x < lo) lo = x;
        if (x > hi) hi = x;
        count++;
    }
    if (count == 0 || buckets <= 0) return;
    double range = hi - lo;
    if (range == 0) {
        for (int k = 0; k < buckets; k++) out[k * 3] = out[k * 3 + 1] = hi;
        out[(buckets - 1) * 3 + 2] = (double)count;
        return;
    }
    double width = range / (double)buckets;
    for (size_t i = 0; i < n; i++) {
        double x = (double)data[i];
        if (!isfinite(x)) continue;
        double f = floor((x - lo) / width);
        int k = f >= (double)(buckets - 1) ? buckets - 1 : (int)f;
        out[k * 3 + 2] += 1.0;
    }
    for (int k = 0; k < buckets; k++) {
        out[k * 3] = lo + width * (double)k;
        out[k * 3 + 1] = k + 1 == buckets ? hi : lo + width * (double)(k + 1);
    }
}

/* --------------------------------------------------------------- events */

fl_status fl_tfevents_encode_tensor(fl_pb *out, double wall_time, int64_t step, const char *tag, int dtype,
                                    int ndim, const int64_t *shape, const void *content, size_t content_len,
                                    bool content_is_string, const char *plugin, const char *plugin_content) {
    fl_pb shp = {0}, dim = {0}, tensor = {0}, pd = {0}, meta = {0}, value = {0}, summary = {0};
    for (int i = 0; i < ndim; i++) {
        dim.len = 0;
        fl_pb_uint(&dim, 1, (uint64_t)shape[i]);
        fl_pb_message(&shp, 2, &dim);
    }
    fl_pb_uint(&tensor, 1, (uint64_t)dtype);
    fl_pb_message(&tensor, 2, &shp); /* present even when empty (a scalar's shape), as TF writes it */
    fl_pb_bytes(&tensor, content_is_string ? 8 : 4, content, content_len);
    fl_pb_bytes(&pd, 1, plugin, strlen(plugin));
    if (plugin_content && *plugin_content) fl_pb_bytes(&pd, 2, plugin_content, strlen(plugin_content));
    fl_pb_message(&meta, 1, &pd);
    fl_pb_bytes(&value, 1, tag, strlen(tag));
    fl_pb_message(&value, 8, &tensor);
    fl_pb_message(&value, 9, &meta);
    fl_pb_message(&summary, 1, &value);
    fl_pb_double(out, 1, wall_time);
    if (step != 0) fl_pb_uint(out, 2, (uint64_t)step);
    fl_pb_message(out, 5, &summary);
    bool oom = out->oom;
    fl_pb_free(&shp); fl_pb_free(&dim); fl_pb_free(&tensor); fl_pb_free(&pd);
    fl_pb_free(&meta); fl_pb_free(&value); fl_pb_free(&summary);
    if (oom) return fl_error(FL_ERR_NOMEM, "TensorBoard: out of memory encoding the event for '%s'", tag);
    return FL_OK;
}

struct fl_tfevents {
    int fd;      /* -1 once closed */
    char *path;
    fl_pb pending; /* framed records not yet written (write(2) itself, so that every error has its errno) */
    bool failed;
};

const char *fl_tfevents_path(const fl_tfevents *w) { return w ? w->path : ""; }

static double wall_clock(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

static fl_status write_event(fl_tfevents *w, const fl_pb *ev) {
    if (ev->oom) return fl_error(FL_ERR_NOMEM, "TensorBoard: out of memory writing %s", w->path);
    fl_tfrecord_frame(&w->pending, ev->buf, ev->len);
    if (w->pending.oom) {
        w->failed = true;
        return fl_error(FL_ERR_NOMEM, "TensorBoard: out of memory writing %s", w->path);
    }
    return w->pending.len >= (1u << 16) ? fl_tfevents_flush(w) : FL_OK;
}

/* mkdir -p: each missing folder of the path made, an existing one used */
static fl_status make_dirs(const char *dir) {
    size_t n = strlen(dir);
    char *p = fl_malloc(n + 1, "TensorBoard log folder name");
    if (!p) return fl_last_status();
    memcpy(p, dir, n + 1);
    fl_status st = FL_OK;
    for (size_t i = 1; i <= n && st == FL_OK; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char c = p[i];
        p[i] = 0;
        struct stat sb;
        if (stat(p, &sb) == 0) {
            if (!S_ISDIR(sb.st_mode))
                st = fl_error(FL_ERR_IO, "TensorBoard: cannot use %s as a log folder: it exists and is not a folder", p);
        } else if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            st = fl_error(FL_ERR_IO, "TensorBoard: cannot create the log folder %s: %s", p, strerror(errno));
        }
        p[i] = c;
    }
    free(p);
    return st;
}

fl_tfevents *fl_tfevents_open(const char *dir) {
    if (!dir || !*dir) return fl_error_null(FL_ERR_INVALID_ARG, "TensorBoard: the log folder name is empty");
    if (make_dirs(dir) != FL_OK) return NULL;
    fl_tfevents *w = fl_calloc(1, sizeof *w, "TensorBoard writer");
    if (!w) return NULL;
    w->fd = -1;
    char host[256] = "localhost";
    if (gethostname(host, sizeof host) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    size_t cap = strlen(dir) + strlen(host) + 96;
    if (!(w->path = fl_malloc(cap, "TensorBoard file name"))) { free(w); return NULL; }
    long long secs = (long long)time(NULL);
    int err = 0;
    for (int k = 0; k < 1000 && w->fd < 0; k++) { /* TF's counter: a free name, never an existing file */
        snprintf(w->path, cap, "%s%sevents.out.tfevents.%010lld.%s.%ld.%d.v2", dir, dir[strlen(dir) - 1] == '/' ? "" : "/",
                 secs, host, (long)getpid(), k);
        w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        err = errno;
        if (w->fd < 0 && err != EEXIST) break;
    }
    if (w->fd < 0) {
        fl_error(FL_ERR_IO, "TensorBoard: cannot create %s: %s", w->path, strerror(err));
        free(w->path);
        free(w);
        return NULL;
    }
    fl_pb ev = {0}, src = {0};
    fl_pb_double(&ev, 1, wall_clock());
    fl_pb_bytes(&ev, 3, "brain.Event:2", 13);
    fl_pb_bytes(&src, 1, "flynn", 5);
    fl_pb_message(&ev, 10, &src);
    fl_status st = write_event(w, &ev);
    fl_pb_free(&ev);
    fl_pb_free(&src);
    if (st == FL_OK) st = fl_tfevents_flush(w);
    if (st != FL_OK) {
        close(w->fd);
        unlink(w->path);
        fl_pb_free(&w->pending);
        free(w->path);
        free(w);
        return NULL;
    }
    return w;
}

static fl_status write_tensor(fl_tfevents *w, const char *tag, int64_t step, int dtype, int ndim, const int64_t *shape,
                              const void *content, size_t len, bool is_string, const char *plugin,
                              const char *plugin_content) {
    if (!w || w->fd < 0) return fl_error(FL_ERR_STATE, "TensorBoard: the events file is closed");
    if (w->failed) return fl_error(FL_ERR_IO, "TensorBoard: an earlier write to %s failed", w->path);
    fl_pb ev = {0};
    fl_status st = fl_tfevents_encode_tensor(&ev, wall_clock(), step, tag, dtype, ndim, shape, content, len, is_string,
                                             plugin, plugin_content);
    if (st == FL_OK) st = write_event(w, &ev);
    fl_pb_free(&ev);
    return st;
}

fl_status fl_tfevents_scalar(fl_tfevents *w, const char *tag, int64_t step, float value) {
    uint32_t u;
    memcpy(&u, &value, sizeof u);
    uint8_t c[4];
    put_le(c, u, 4);
    return write_tensor(w, tag, step, FL_TF_DT_FLOAT, 0, NULL, c, 4, false, "scalars", NULL);
}

#define TF_HISTOGRAM_BUCKETS 30 /* tf.summary.histogram's DEFAULT_BUCKET_COUNT */

fl_status fl_tfevents_histogram(fl_tfevents *w, const char *tag, int64_t step, const float *data, size_t n) {
    double h[TF_HISTOGRAM_BUCKETS * 3];
    uint8_t c[sizeof h];
    fl_tf_histogram(data, n, TF_HISTOGRAM_BUCKETS, h);
    for (size_t i = 0; i < TF_HISTOGRAM_BUCKETS * 3; i++) {
        uint64_t u;
        memcpy(&u, &h[i], sizeof u);
        put_le(c + 8 * i, u, 8);
    }
    const int64_t shape[2] = {TF_HISTOGRAM_BUCKETS, 3};
    return write_tensor(w, tag, step, FL_TF_DT_DOUBLE, 2, shape, c, sizeof c, false, "histograms", NULL);
}

fl_status fl_tfevents_string(fl_tfevents *w, const char *tag, int64_t step, const char *s, const char *plugin,
                             const char *plugin_content) {
    return write_tensor(w, tag, step, FL_TF_DT_STRING, 0, NULL, s, strlen(s), true, plugin, plugin_content);
}

fl_status fl_tfevents_flush(fl_tfevents *w) {
    if (!w || w->fd < 0) return FL_OK;
    if (w->failed) return fl_error(FL_ERR_IO, "TensorBoard: an earlier write to %s failed", w->path);
    size_t off = 0;
    while (off < w->pending.len) {
        ssize_t r = write(w->fd, w->pending.buf + off, w->pending.len - off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            w->failed = true;
            return fl_error(FL_ERR_IO, "TensorBoard: cannot write %s: %s", w->path, strerror(r < 0 ? errno : EIO));
        }
        off += (size_t)r;
    }
    w->pending.len = 0;
    return FL_OK;
}

fl_status fl_tfevents_close(fl_tfevents *w) {
    if (!w) return FL_OK;
    fl_status st = FL_OK;
    if (w->fd >= 0) {
        bool failed_before = w->failed;
        st = failed_before ? FL_OK : fl_tfevents_flush(w);
        if (close(w->fd) != 0 && st == FL_OK && !failed_before)
            st = fl_error(FL_ERR_IO, "TensorBoard: cannot write %s: %s", w->path, strerror(errno));
    }
    fl_pb_free(&w->pending);
    free(w->path);
    free(w);
    return st;
}
