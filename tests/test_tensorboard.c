/*
 * test_tensorboard.c — fl_tensorboard's event files, read back by a small
 * event-file reader of this test's own (TFRecord frames, their masked
 * CRC-32C, the Event/Summary/TensorProto fields), first proven on files
 * that Keras 3 on TensorFlow wrote (tests/fixtures/tensorboard, made by
 * tools/tensorboard_fixtures.py):
 *   - CRC-32C against published test vectors;
 *   - every record of Keras's files re-encoded by flynn's writer gives the
 *     same bytes (scalars, histograms, the model JSON), and flynn's
 *     histogram of Keras's final weights equals TensorFlow's, bit for bit;
 *   - a short fit: the tags, steps and values equal flynn's History (and
 *     the batch logs, the learning rate, the optimizer's iterations), and
 *     the files' structure (folders, tags, steps, dtypes, shapes, plugins)
 *     equals Keras's for the same model and data sizes;
 *   - errors: an unusable log folder fails fl_fit at train begin, naming it.
 * Usage: test_tensorboard FIXTURES_DIR [--keep OUT] (OUT: flynn's logs and
 * History, for tests/tensorboard_check.py).
 */
#include "check.h"
#include "nn/tfevents.h"

#include <dirent.h>
#include <flynn/flynn.h>
#include <ftw.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------- reader */

typedef struct ev_val {
    double wall;
    int64_t step;
    char tag[160];
    int dtype, ndim;
    int64_t dims[4];
    const uint8_t *content; /* tensor_content, or the string_val */
    size_t clen;
    bool is_string;
    char plugin[40], pcontent[16];
    const uint8_t *rec; /* the whole Event message */
    size_t reclen;
} ev_val;

typedef struct ev_file {
    uint8_t *data;
    size_t len;
    int nrec;
    char version[32], writer[64];
    ev_val vals[256];
    int nvals;
    char err[256]; /* "" when every record and field read well */
} ev_file;

typedef struct pbr { const uint8_t *p, *end; bool bad; } pbr;

static uint64_t rd_varint(pbr *r) {
    uint64_t v = 0;
    for (int s = 0; s < 64; s += 7) {
        if (r->p >= r->end) { r->bad = true; return 0; }
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) return v;
    }
    r->bad = true;
    return 0;
}

/* the next field: its number, wire type, and (wire 2) its bytes, (0/1) its value */
static bool rd_field(pbr *r, int *field, int *wire, pbr *sub, uint64_t *val) {
    if (r->p >= r->end || r->bad) return false;
    uint64_t key = rd_varint(r);
    *field = (int)(key >> 3);
    *wire = (int)(key & 7);
    if (*wire == 0) *val = rd_varint(r);
    else if (*wire == 1) {
        if (r->end - r->p < 8) { r->bad = true; return false; }
        uint64_t v = 0;
        for (int i = 0; i < 8; i++) v |= (uint64_t)r->p[i] << (8 * i);
        r->p += 8;
        *val = v;
    } else if (*wire == 2) {
        uint64_t n = rd_varint(r);
        if (r->bad || n > (uint64_t)(r->end - r->p)) { r->bad = true; return false; }
        *sub = (pbr){r->p, r->p + n, false};
        r->p += n;
    } else if (*wire == 5) {
        if (r->end - r->p < 4) { r->bad = true; return false; }
        r->p += 4;
    } else {
        r->bad = true;
        return false;
    }
    return !r->bad;
}

static void copy_str(char *dst, size_t n, pbr s) {
    size_t len = (size_t)(s.end - s.p);
    if (len >= n) len = n - 1;
    memcpy(dst, s.p, len);
    dst[len] = 0;
}

static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static void parse_tensor(pbr t, ev_val *v, ev_file *f) {
    int fd, w;
    pbr sub;
    uint64_t x;
    while (rd_field(&t, &fd, &w, &sub, &x)) {
        if (fd == 1 && w == 0) v->dtype = (int)x;
        else if (fd == 2 && w == 2) {
            int f2, w2;
            pbr d;
            uint64_t y;
            while (rd_field(&sub, &f2, &w2, &d, &y)) {
                if (f2 != 2 || w2 != 2 || v->ndim >= 4) { snprintf(f->err, sizeof f->err, "odd TensorShapeProto field %d", f2); continue; }
                int f3, w3;
                pbr e;
                uint64_t size = 0;
                while (rd_field(&d, &f3, &w3, &e, &y)) if (f3 == 1 && w3 == 0) size = y;
                v->dims[v->ndim++] = (int64_t)size;
            }
        } else if (fd == 4 && w == 2) { v->content = sub.p; v->clen = (size_t)(sub.end - sub.p); }
        else if (fd == 8 && w == 2) { v->content = sub.p; v->clen = (size_t)(sub.end - sub.p); v->is_string = true; }
        else snprintf(f->err, sizeof f->err, "TensorProto field %d (wire %d) not expected", fd, w);
    }
    if (t.bad) snprintf(f->err, sizeof f->err, "a TensorProto does not parse");
}

static void parse_event(const uint8_t *p, size_t n, ev_file *f) {
    pbr r = {p, p + n, false};
    int fd, w;
    pbr sub;
    uint64_t x;
    double wall = 0;
    int64_t step = 0;
    while (rd_field(&r, &fd, &w, &sub, &x)) {
        if (fd == 1 && w == 1) memcpy(&wall, &x, sizeof wall);
        else if (fd == 2 && w == 0) step = (int64_t)x;
        else if (fd == 3 && w == 2) copy_str(f->version, sizeof f->version, sub);
        else if (fd == 10 && w == 2) {
            int f2, w2;
            pbr s2;
            uint64_t y;
            while (rd_field(&sub, &f2, &w2, &s2, &y)) if (f2 == 1 && w2 == 2) copy_str(f->writer, sizeof f->writer, s2);
        } else if (fd == 5 && w == 2) {
            int f2, w2;
            pbr val;
            uint64_t y;
            while (rd_field(&sub, &f2, &w2, &val, &y)) {
                if (f2 != 1 || w2 != 2 || f->nvals >= 256) { snprintf(f->err, sizeof f->err, "odd Summary field %d", f2); continue; }
                ev_val *v = &f->vals[f->nvals++];
                memset(v, 0, sizeof *v);
                v->wall = wall;
                v->step = step;
                v->rec = p;
                v->reclen = n;
                int f3, w3;
                pbr s3;
                while (rd_field(&val, &f3, &w3, &s3, &y)) {
                    if (f3 == 1 && w3 == 2) copy_str(v->tag, sizeof v->tag, s3);
                    else if (f3 == 8 && w3 == 2) parse_tensor(s3, v, f);
                    else if (f3 == 9 && w3 == 2) {
                        int f4, w4;
                        pbr s4;
                        while (rd_field(&s3, &f4, &w4, &s4, &y)) {
                            if (f4 != 1 || w4 != 2) { snprintf(f->err, sizeof f->err, "SummaryMetadata field %d not expected", f4); continue; }
                            int f5, w5;
                            pbr s5;
                            while (rd_field(&s4, &f5, &w5, &s5, &y)) {
                                if (f5 == 1 && w5 == 2) copy_str(v->plugin, sizeof v->plugin, s5);
                                else if (f5 == 2 && w5 == 2) copy_str(v->pcontent, sizeof v->pcontent, s5);
                            }
                        }
                    } else snprintf(f->err, sizeof f->err, "Summary.Value field %d not expected", f3);
                }
            }
        } else snprintf(f->err, sizeof f->err, "Event field %d (wire %d) not expected", fd, w);
    }
    if (r.bad) snprintf(f->err, sizeof f->err, "an Event does not parse");
}

/* reads every record of path, checking the framing and both CRCs */
static bool ev_read(const char *path, ev_file *f) {
    memset(f, 0, sizeof *f);
    FILE *fp = fopen(path, "rb");
    if (!fp) { snprintf(f->err, sizeof f->err, "cannot open %.200s", path); return false; }
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    f->data = malloc((size_t)len + 1);
    f->len = fread(f->data, 1, (size_t)len, fp);
    fclose(fp);
    size_t off = 0;
    while (off < f->len && !f->err[0]) {
        if (f->len - off < 12) { snprintf(f->err, sizeof f->err, "a truncated record header at %zu", off); break; }
        uint64_t n = 0;
        for (int i = 0; i < 8; i++) n |= (uint64_t)f->data[off + i] << (8 * i);
        if (le32(f->data + off + 8) != fl_crc32c_masked(f->data + off, 8)) {
            snprintf(f->err, sizeof f->err, "record %d: the length's CRC is wrong", f->nrec);
            break;
        }
        if (n > f->len - off - 12 || f->len - off - 12 - n < 4) { snprintf(f->err, sizeof f->err, "record %d is truncated", f->nrec); break; }
        const uint8_t *d = f->data + off + 12;
        if (le32(d + n) != fl_crc32c_masked(d, (size_t)n)) {
            snprintf(f->err, sizeof f->err, "record %d: the data's CRC is wrong", f->nrec);
            break;
        }
        parse_event(d, (size_t)n, f);
        f->nrec++;
        off += 12 + n + 4;
    }
    return !f->err[0];
}

/* the one events file in dir (count: how many there are) */
static bool ev_find(const char *dir, char *out, size_t n, int *count) {
    DIR *d = opendir(dir);
    *count = 0;
    if (!d) return false;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0) {
            if (*count == 0 || strcmp(e->d_name, strrchr(out, '/') + 1) > 0) snprintf(out, n, "%s/%s", dir, e->d_name);
            (*count)++;
        }
    closedir(d);
    return *count > 0;
}

static bool ev_load(const char *dir, ev_file *f) {
    char path[1024];
    int count;
    if (!ev_find(dir, path, sizeof path, &count)) {
        memset(f, 0, sizeof *f);
        snprintf(f->err, sizeof f->err, "no events file in %.200s", dir);
        return false;
    }
    return ev_read(path, f);
}

static const ev_val *ev_get(const ev_file *f, const char *tag, int64_t step) {
    for (int i = 0; i < f->nvals; i++)
        if (strcmp(f->vals[i].tag, tag) == 0 && f->vals[i].step == step) return &f->vals[i];
    return NULL;
}

static float ev_scalar(const ev_val *v) {
    if (!v || v->dtype != FL_TF_DT_FLOAT || v->clen != 4) return NAN;
    uint32_t u = le32(v->content);
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* "tag step dtype shape plugin content", sorted: what the files hold, without the values */
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static char *ev_structure(const ev_file *f) {
    char **lines = malloc(sizeof *lines * (size_t)(f->nvals + 1));
    size_t total = 64;
    for (int i = 0; i < f->nvals; i++) {
        const ev_val *v = &f->vals[i];
        char shape[64] = "";
        for (int k = 0; k < v->ndim; k++) snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", k ? "x" : "", (long long)v->dims[k]);
        lines[i] = malloc(400);
        snprintf(lines[i], 400, "%s step=%lld dtype=%d shape=[%s] %s plugin=%s/%s\n", v->tag, (long long)v->step, v->dtype,
                 shape, v->is_string ? "string_val" : "tensor_content", v->plugin, v->pcontent);
        total += strlen(lines[i]);
    }
    qsort(lines, (size_t)f->nvals, sizeof *lines, cmp_str);
    char *s = malloc(total);
    snprintf(s, total, "version=%s\n", f->version);
    for (int i = 0; i < f->nvals; i++) { strcat(s, lines[i]); free(lines[i]); }
    free(lines);
    return s;
}

/* ------------------------------------------------------------- helpers */

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}
static void rm_rf(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static bool is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* the model and data of tools/tensorboard_fixtures.py (values aside) */
static fl_model *small_model(void) {
    fl_model *m = fl_sequential(fl_input(4), fl_dense(5, .activation = FL_RELU), fl_dense(3, .activation = FL_SOFTMAX));
    if (m) fl_compile(m, fl_adam(.learning_rate = 1e-3f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY);
    return m;
}

static void small_data(fl_tensor **x, fl_tensor **y) {
    *x = fl_tensor_zeros(FL_FLOAT32, 40, 4);
    *y = fl_tensor_zeros(FL_FLOAT32, 40);
    float *xp = fl_tensor_data(*x), *yp = fl_tensor_data(*y);
    for (int i = 0; i < 160; i++) xp[i] = (float)((i * 37 % 101) - 50) / 25.0f;
    for (int i = 0; i < 40; i++) yp[i] = (float)(i * 7 % 3);
}

/* the batch logs a second callback sees (the same logs TensorBoard writes) */
typedef struct batch_rec { int64_t n; float loss[64], acc[64]; } batch_rec;
static fl_status record_batch(fl_model *m, int64_t batch, fl_logs *logs, void *user) {
    (void)m; (void)batch;
    batch_rec *b = user;
    if (b->n < 64) {
        b->loss[b->n] = (float)fl_logs_get(logs, "loss");
        b->acc[b->n] = (float)fl_logs_get(logs, "accuracy");
    }
    b->n++;
    return FL_OK;
}

/* --------------------------------------------------------------- tests */

static void test_crc32c(void) {
    /* RFC 3720 B.4 and the usual check value */
    uint8_t z[32] = {0}, ff[32], inc[32], dec[32];
    for (int i = 0; i < 32; i++) { ff[i] = 0xff; inc[i] = (uint8_t)i; dec[i] = (uint8_t)(31 - i); }
    CHECK(fl_crc32c(0, "123456789", 9) == 0xE3069283u);
    CHECK(fl_crc32c(0, z, 32) == 0x8A9136AAu);
    CHECK(fl_crc32c(0, ff, 32) == 0x62A8AB43u);
    CHECK(fl_crc32c(0, inc, 32) == 0x46DD794Eu);
    CHECK(fl_crc32c(0, dec, 32) == 0x113FDB5Cu);
    CHECK(fl_crc32c(0, "", 0) == 0);
    CHECK(fl_crc32c(fl_crc32c(0, "1234", 4), "56789", 5) == 0xE3069283u); /* continues */
    /* masked as TFRecord does it */
    uint32_t c = 0xE3069283u;
    CHECK(fl_crc32c_masked("123456789", 9) == ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

/* Keras's files: our reader reads them; flynn's encoder reproduces each record */
static void test_keras_files(const char *fx) {
    static const char *const cases[] = {"epoch", "batch2", "noval", "sps"};
    for (int c = 0; c < 4; c++)
        for (int s = 0; s < 2; s++) {
            char dir[1024];
            snprintf(dir, sizeof dir, "%s/%s/%s", fx, cases[c], s ? "validation" : "train");
            if (c == 2 && s == 1) { CHECK_MSG(!is_dir(dir), "%s: Keras made no validation folder without validation", dir); continue; }
            ev_file *f = malloc(sizeof *f);
            CHECK_MSG(ev_load(dir, f), "%s: %s", dir, f->err);
            CHECK_MSG(strcmp(f->version, "brain.Event:2") == 0, "%s: file_version '%s'", dir, f->version);
            CHECK(f->nvals > 0);
            int same = 0;
            for (int i = 0; i < f->nvals; i++) {
                const ev_val *v = &f->vals[i];
                fl_pb ev = {0};
                CHECK(fl_tfevents_encode_tensor(&ev, v->wall, v->step, v->tag, v->dtype, v->ndim, v->dims, v->content,
                                                v->clen, v->is_string, v->plugin, v->pcontent) == FL_OK);
                bool eq = ev.len == v->reclen && memcmp(ev.buf, v->rec, ev.len) == 0;
                CHECK_MSG(eq, "%s: flynn's encoding of '%s' step %lld differs from TensorFlow's (%zu vs %zu bytes)", dir,
                          v->tag, (long long)v->step, ev.len, v->reclen);
                /* the framing too: the record in the file is frame(data) */
                fl_pb fr = {0};
                fl_tfrecord_frame(&fr, v->rec, v->reclen);
                CHECK(memcmp(fr.buf, v->rec - 12, fr.len) == 0);
                same += eq;
                fl_pb_free(&ev);
                fl_pb_free(&fr);
            }
            printf("  Keras %s/%s: %d records, %d summaries re-encoded byte for byte\n", cases[c], s ? "validation" : "train",
                   f->nrec, same);
            free(f->data);
            free(f);
        }
}

/* flynn's histogram of Keras's final weights = TensorFlow's, bit for bit */
static void test_histograms_vs_tf(const char *fx) {
    static const char *const tags[4] = {"sequential/dense/kernel/histogram", "sequential/dense/bias/histogram",
                                        "sequential/dense_1/kernel/histogram", "sequential/dense_1/bias/histogram"};
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/epoch/train", fx);
    ev_file *f = malloc(sizeof *f);
    CHECK_MSG(ev_load(dir, f), "%s: %s", dir, f->err);
    for (int i = 0; i < 4; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/epoch/weights/%d.npy", fx, i);
        fl_tensor *w = fl_load_npy(p);
        CHECK_MSG(w != NULL, "%s: %s", p, fl_last_error());
        const ev_val *v = ev_get(f, tags[i], 2);
        CHECK_MSG(v && v->dtype == FL_TF_DT_DOUBLE && v->clen == 720, "%s: no 30x3 float64 histogram at step 2", tags[i]);
        if (!w || !v || v->clen != 720) { fl_tensor_free(w); continue; }
        double h[90];
        fl_tf_histogram(fl_tensor_data(w), (size_t)fl_tensor_size(w), 30, h);
        CHECK_MSG(memcmp(h, v->content, 720) == 0, "%s: flynn's buckets differ from TensorFlow's", tags[i]);
        fl_tensor_free(w);
    }
    /* the edge cases summary_v2._buckets documents */
    double h[9];
    float one[3] = {2.5f, 2.5f, 2.5f};
    fl_tf_histogram(one, 3, 3, h);
    CHECK(h[0] == 2.5 && h[1] == 2.5 && h[2] == 0 && h[5] == 0 && h[6] == 2.5 && h[7] == 2.5 && h[8] == 3);
    fl_tf_histogram(one, 0, 3, h);
    for (int i = 0; i < 9; i++) CHECK(h[i] == 0);
    float two[4] = {0.0f, 1.0f, 3.0f, NAN};
    fl_tf_histogram(two, 4, 3, h);
    CHECK(h[0] == 0 && h[1] == 1 && h[2] == 1 && h[3] == 1 && h[4] == 2 && h[5] == 1 && h[6] == 2 && h[7] == 3 && h[8] == 1); /* 3 in the last: clamped */
    free(f->data);
    free(f);
}

/* a fit with validation, histograms and batch summaries, checked against History and Keras */
static void test_fit(const char *fx, const char *tmp, const char *keep) {
    static const char *const cases[2] = {"epoch", "batch2"};
    for (int c = 0; c < 2; c++) {
        char dir[1024], sub[1100];
        snprintf(dir, sizeof dir, "%s/%s", keep ? keep : tmp, cases[c]);
        fl_model *m = small_model();
        fl_tensor *x, *y;
        small_data(&x, &y);
        fl_callback *tb = c == 0 ? fl_tensorboard(dir, .histogram_freq = 1) : fl_tensorboard(dir, .histogram_freq = 2, .update_freq = 2);
        CHECK(tb != NULL);
        CHECK(c == 0 ? tb->on_batch_end == NULL : tb->on_batch_end != NULL); /* no per-step wait without batch summaries */
        batch_rec br = {0};
        fl_callback rec = {.user = &br, .on_batch_end = record_batch};
        fl_history *h = fl_fit(m, x, y, .batch_size = 8, .epochs = 3, .validation_split = 0.25f, .verbose = FL_VERBOSE_SILENT,
                               .callbacks = (fl_callback *[]){tb, &rec, NULL});
        CHECK_MSG(h != NULL, "fit: %s", fl_last_error());
        if (!h) { fl_callback_free(tb); fl_model_free(m); fl_tensor_free(x); fl_tensor_free(y); continue; }
        ev_file *tr = malloc(sizeof *tr), *va = malloc(sizeof *va), *ktr = malloc(sizeof *ktr), *kva = malloc(sizeof *kva);
        snprintf(sub, sizeof sub, "%s/train", dir);
        CHECK_MSG(ev_load(sub, tr), "%s: %s", sub, tr->err);
        snprintf(sub, sizeof sub, "%s/validation", dir);
        CHECK_MSG(ev_load(sub, va), "%s: %s", sub, va->err);
        CHECK(strcmp(tr->version, "brain.Event:2") == 0 && strcmp(tr->writer, "flynn") == 0);
        /* the values: History, per epoch */
        static const char *const keys[2] = {"loss", "accuracy"};
        for (int e = 0; e < 3; e++) {
            for (int k = 0; k < 2; k++) {
                char tag[64], vk[64];
                snprintf(tag, sizeof tag, "epoch_%s", keys[k]);
                snprintf(vk, sizeof vk, "val_%s", keys[k]);
                const float *hv = fl_history_get(h, keys[k]), *hvv = fl_history_get(h, vk);
                CHECK_MSG(ev_scalar(ev_get(tr, tag, e)) == hv[e], "train %s epoch %d: %g, History %g", tag, e,
                          (double)ev_scalar(ev_get(tr, tag, e)), (double)hv[e]);
                CHECK_MSG(ev_scalar(ev_get(va, tag, e)) == hvv[e], "validation %s epoch %d: %g, History %s %g", tag, e,
                          (double)ev_scalar(ev_get(va, tag, e)), vk, (double)hvv[e]);
                snprintf(tag, sizeof tag, "evaluation_%s_vs_iterations", keys[k]);
                CHECK_MSG(ev_scalar(ev_get(va, tag, 4 * (e + 1))) == hvv[e], "%s at iteration %d", tag, 4 * (e + 1));
            }
            CHECK(ev_scalar(ev_get(tr, "epoch_learning_rate", e)) == 1e-3f);
        }
        /* batch summaries: every 2nd step from the start of the fit, the running values of the epoch */
        if (c == 1) {
            CHECK(br.n == 12);
            for (int64_t s = 2; s <= 12; s += 2) {
                CHECK_MSG(ev_scalar(ev_get(tr, "batch_loss", s)) == br.loss[s - 1], "batch_loss step %lld", (long long)s);
                CHECK_MSG(ev_scalar(ev_get(tr, "batch_accuracy", s)) == br.acc[s - 1], "batch_accuracy step %lld", (long long)s);
            }
        }
        /* histograms of the last epoch: the weights as they are now */
        for (int l = 1; l <= 2; l++) {
            fl_layer *ly = fl_model_layer(m, l);
            for (int k = 0; k < 2; k++) {
                char tag[128];
                snprintf(tag, sizeof tag, "sequential/%s/%s/histogram", l == 1 ? "dense" : "dense_1", k ? "bias" : "kernel");
                const ev_val *v = ev_get(tr, tag, 2);
                fl_tensor *w = fl_layer_weight(ly, k);
                double hh[90];
                fl_tf_histogram(fl_tensor_data(w), (size_t)fl_tensor_size(w), 30, hh);
                CHECK_MSG(v && v->clen == 720 && memcmp(hh, v->content, 720) == 0, "%s at epoch 2", tag);
                double total = 0;
                for (int b = 0; v && v->clen == 720 && b < 30; b++) { double cnt; memcpy(&cnt, v->content + (b * 3 + 2) * 8, 8); total += cnt; }
                CHECK(total == (double)fl_tensor_size(w));
            }
        }
        /* the model JSON: what fl_model_to_json says */
        const ev_val *g = ev_get(tr, "keras", 0);
        char *json = fl_model_to_json(m);
        CHECK(g && g->is_string && json && g->clen == strlen(json) && memcmp(g->content, json, g->clen) == 0);
        free(json);
        /* the structure: Keras's, for the same model, data sizes and arguments */
        for (int s = 0; s < 2; s++) {
            snprintf(sub, sizeof sub, "%s/%s/%s", fx, cases[c], s ? "validation" : "train");
            ev_file *kf = s ? kva : ktr;
            CHECK_MSG(ev_load(sub, kf), "%s: %s", sub, kf->err);
            char *a = ev_structure(s ? va : tr), *b = ev_structure(kf);
            CHECK_MSG(strcmp(a, b) == 0, "%s/%s: flynn wrote\n%s\nKeras wrote\n%s", cases[c], s ? "validation" : "train", a, b);
            if (strcmp(a, b) == 0)
                printf("  %s/%s: flynn's %d summaries have Keras's tags, steps, dtypes, shapes and plugins\n", cases[c],
                       s ? "validation" : "train", (s ? va : tr)->nvals);
            free(a);
            free(b);
        }
        if (keep) { /* History for tests/tensorboard_check.py: key epoch value, one a line */
            char p[1100];
            snprintf(p, sizeof p, "%s/history.txt", dir);
            FILE *hf = fopen(p, "w");
            for (int k = 0; hf && k < fl_history_num_keys(h); k++)
                for (int e = 0; e < fl_history_epochs(h); e++)
                    fprintf(hf, "%s %d %.9g\n", fl_history_key(h, k), e, (double)fl_history_get(h, fl_history_key(h, k))[e]);
            for (int64_t s = 0; hf && c == 1 && s < br.n; s++) fprintf(hf, "batch %lld %.9g %.9g\n", (long long)s + 1, (double)br.loss[s], (double)br.acc[s]);
            if (hf) fclose(hf);
        }
        ev_file *all[4] = {tr, va, ktr, kva};
        for (int i = 0; i < 4; i++) { free(all[i]->data); free(all[i]); }
        fl_history_free(h);
        fl_callback_free(tb);
        fl_model_free(m);
        fl_tensor_free(x);
        fl_tensor_free(y);
    }
}

/* the histogram tags of a fit with histogram_freq 1, sorted, one a line */
static char *histogram_tags(fl_model *m, const fl_tensor *x, const fl_tensor *y, const char *dir) {
    fl_callback *tb = fl_tensorboard(dir, .histogram_freq = 1, .no_write_graph = true);
    fl_history *h = fl_fit(m, x, y, .batch_size = 4, .epochs = 1, .verbose = FL_VERBOSE_SILENT,
                           .callbacks = (fl_callback *[]){tb, NULL});
    CHECK_MSG(h != NULL, "%s", fl_last_error());
    fl_history_free(h);
    fl_callback_free(tb);
    char sub[1100];
    snprintf(sub, sizeof sub, "%s/train", dir);
    ev_file *f = malloc(sizeof *f);
    CHECK_MSG(ev_load(sub, f), "%s", f->err);
    const char *t[64];
    int n = 0;
    for (int i = 0; i < f->nvals && n < 64; i++)
        if (strstr(f->vals[i].tag, "/histogram")) t[n++] = f->vals[i].tag;
    qsort(t, (size_t)n, sizeof *t, cmp_str);
    char *s = calloc(1, 8192);
    for (int i = 0; i < n; i++) snprintf(s + strlen(s), 8192 - strlen(s), "%s\n", t[i]);
    free(f->data);
    free(f);
    return s;
}

/* histogram tags are Keras 3.15's weight.path (printed by Keras for the same layers) */
static void test_weight_paths(const char *tmp) {
    char dir[1024];
    fl_model *m = fl_sequential(fl_input(5, 4), fl_time_distributed(fl_dense(3)),
                                fl_bidirectional(fl_gru(2, .return_sequences = true)), fl_layer_normalization());
    CHECK_MSG(m != NULL, "%s", fl_last_error());
    if (!m) return;
    fl_compile(m, fl_adam(), FL_MEAN_SQUARED_ERROR);
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, 8, 5, 4), *y = fl_tensor_zeros(FL_FLOAT32, 8, 5, 4);
    snprintf(dir, sizeof dir, "%s/paths_seq", tmp);
    char *got = histogram_tags(m, x, y, dir);
    const char *want = /* Keras: [w.path for l in m.layers for w in l.weights], sorted */
        "sequential/bidirectional/backward_gru/gru_cell/bias/histogram\n"
        "sequential/bidirectional/backward_gru/gru_cell/kernel/histogram\n"
        "sequential/bidirectional/backward_gru/gru_cell/recurrent_kernel/histogram\n"
        "sequential/bidirectional/forward_gru/gru_cell/bias/histogram\n"
        "sequential/bidirectional/forward_gru/gru_cell/kernel/histogram\n"
        "sequential/bidirectional/forward_gru/gru_cell/recurrent_kernel/histogram\n"
        "sequential/layer_normalization/beta/histogram\n"
        "sequential/layer_normalization/gamma/histogram\n"
        "sequential/time_distributed/dense/bias/histogram\n"
        "sequential/time_distributed/dense/kernel/histogram\n";
    CHECK_MSG(strcmp(got, want) == 0, "Sequential histogram tags:\n%s", got);
    free(got);
    fl_model_free(m);
    fl_tensor_free(x);
    fl_tensor_free(y);
    /* Functional: no model name in front */
    fl_sym *in = fl_keras_input(5, 4);
    fl_sym *a = fl_call_n(fl_multi_head_attention(2, 3), in, in);
    fl_sym *o = fl_call(fl_dense(3, .name = "out"), a);
    m = fl_model_new(fl_syms(in), fl_syms(o), "fun");
    CHECK_MSG(m != NULL, "%s", fl_last_error());
    if (!m) return;
    fl_compile(m, fl_adam(), FL_MEAN_SQUARED_ERROR);
    x = fl_tensor_zeros(FL_FLOAT32, 8, 5, 4);
    y = fl_tensor_zeros(FL_FLOAT32, 8, 5, 3);
    snprintf(dir, sizeof dir, "%s/paths_fun", tmp);
    got = histogram_tags(m, x, y, dir);
    want = "multi_head_attention/attention_output/bias/histogram\n"
           "multi_head_attention/attention_output/kernel/histogram\n"
           "multi_head_attention/key/bias/histogram\n"
           "multi_head_attention/key/kernel/histogram\n"
           "multi_head_attention/query/bias/histogram\n"
           "multi_head_attention/query/kernel/histogram\n"
           "multi_head_attention/value/bias/histogram\n"
           "multi_head_attention/value/kernel/histogram\n"
           "out/bias/histogram\n"
           "out/kernel/histogram\n";
    CHECK_MSG(strcmp(got, want) == 0, "Functional histogram tags:\n%s", got);
    free(got);
    fl_model_free(m);
    fl_tensor_free(x);
    fl_tensor_free(y);
}

/* epoch_learning_rate with a schedule: its value at the optimizer's
 * iterations after the epoch (Keras's optimizer.learning_rate); and after
 * ReduceLROnPlateau (before TensorBoard in the list) the reduced rate,
 * where History has the rate before the reduction, as in Keras (3.15 on
 * TensorFlow, the same fit: History 0.1, 0.1, 0.05; TensorBoard 0.1, 0.05, 0.025) */
static void test_learning_rate(const char *tmp) {
    char dir[1024], sub[1100];
    fl_tensor *x, *y;
    small_data(&x, &y);
    fl_lr_schedule sc = fl_exponential_decay(0.01, 3, 0.5);
    fl_model *m = fl_sequential(fl_input(4), fl_dense(3, .activation = FL_SOFTMAX));
    fl_compile(m, fl_adam(.learning_rate_schedule = &sc), FL_SPARSE_CATEGORICAL_CROSSENTROPY);
    snprintf(dir, sizeof dir, "%s/lr_schedule", tmp);
    fl_callback *tb = fl_tensorboard(dir, .no_write_graph = true);
    fl_history *h = fl_fit(m, x, y, .batch_size = 8, .epochs = 3, .verbose = FL_VERBOSE_SILENT,
                           .callbacks = (fl_callback *[]){tb, NULL});
    CHECK(h != NULL);
    ev_file *f = malloc(sizeof *f);
    snprintf(sub, sizeof sub, "%s/train", dir);
    CHECK_MSG(ev_load(sub, f), "%s", f->err);
    for (int e = 0; e < 3; e++) /* 40 samples, batch 8: 5 steps an epoch */
        CHECK_MSG(ev_scalar(ev_get(f, "epoch_learning_rate", e)) == fl_lr_schedule_value(&sc, 5 * (e + 1)),
                  "epoch %d: %g, the schedule at step %d %g", e, (double)ev_scalar(ev_get(f, "epoch_learning_rate", e)),
                  5 * (e + 1), (double)fl_lr_schedule_value(&sc, 5 * (e + 1)));
    CHECK(ev_scalar(ev_get(f, "epoch_learning_rate", 2)) < ev_scalar(ev_get(f, "epoch_learning_rate", 0)));
    free(f->data);
    fl_history_free(h);
    fl_callback_free(tb);
    fl_model_free(m);
    /* ReduceLROnPlateau(patience 1, factor 0.5) on a loss that cannot improve (lr 0 in the first epoch is not
     * possible, so: min_delta 10, no epoch counts as better) */
    m = fl_sequential(fl_input(4), fl_dense(3, .activation = FL_SOFTMAX));
    fl_compile(m, fl_sgd(.learning_rate = 0.1f), FL_SPARSE_CATEGORICAL_CROSSENTROPY);
    snprintf(dir, sizeof dir, "%s/lr_plateau", tmp);
    fl_callback *rl = fl_reduce_lr_on_plateau(.monitor = "loss", .factor = 0.5, .patience = 1, .min_delta = 10);
    tb = fl_tensorboard(dir, .no_write_graph = true);
    h = fl_fit(m, x, y, .batch_size = 8, .epochs = 3, .verbose = FL_VERBOSE_SILENT, .callbacks = (fl_callback *[]){rl, tb, NULL});
    CHECK(h != NULL);
    snprintf(sub, sizeof sub, "%s/train", dir);
    CHECK_MSG(ev_load(sub, f), "%s", f->err);
    /* Keras: ReduceLROnPlateau puts the rate before its reduction into the logs (History), TensorBoard
     * then writes the optimizer's rate, the reduced one (it collects it into a copy of the logs) */
    const float *lr = h ? fl_history_get(h, "learning_rate") : NULL;
    CHECK(lr && lr[0] == 0.1f && lr[1] == 0.1f && lr[2] == 0.05f);
    const float want[3] = {0.1f, 0.05f, 0.025f};
    for (int e = 0; e < 3; e++)
        CHECK_MSG(ev_scalar(ev_get(f, "epoch_learning_rate", e)) == want[e], "epoch %d: %g, expected %g", e,
                  (double)ev_scalar(ev_get(f, "epoch_learning_rate", e)), (double)want[e]);
    /* one epoch_learning_rate per epoch, not two (the logs' key and the optimizer's) */
    int n = 0;
    for (int i = 0; i < f->nvals; i++) n += strcmp(f->vals[i].tag, "epoch_learning_rate") == 0;
    CHECK(n == 3);
    free(f->data);
    free(f);
    fl_history_free(h);
    fl_callback_free(rl);
    fl_callback_free(tb);
    fl_model_free(m);
    fl_tensor_free(x);
    fl_tensor_free(y);
}

/* a second fit with the same callback: new files beside the first (Keras: new writers each fit) */
static void test_refit(const char *tmp) {
    char dir[1024], sub[1100], p[1100];
    snprintf(dir, sizeof dir, "%s/refit", tmp);
    fl_model *m = small_model();
    fl_tensor *x, *y;
    small_data(&x, &y);
    fl_callback *tb = fl_tensorboard(dir);
    for (int k = 0; k < 2; k++) {
        fl_history *h = fl_fit(m, x, y, .batch_size = 8, .epochs = 1, .validation_split = 0.25f,
                               .verbose = FL_VERBOSE_SILENT, .callbacks = (fl_callback *[]){tb, NULL});
        CHECK(h != NULL);
        fl_history_free(h);
    }
    int count;
    snprintf(sub, sizeof sub, "%s/train", dir);
    CHECK(ev_find(sub, p, sizeof p, &count) && count == 2);
    snprintf(sub, sizeof sub, "%s/validation", dir);
    CHECK(ev_find(sub, p, sizeof p, &count) && count == 2);
    ev_file *f = malloc(sizeof *f);
    CHECK_MSG(ev_load(sub, f), "%s", f->err); /* the second fit's: iterations go on (8), epochs start at 0 again */
    CHECK(f->nvals == 4 && ev_get(f, "evaluation_loss_vs_iterations", 8) && ev_get(f, "epoch_loss", 0));
    free(f->data);
    free(f);
    fl_callback_free(tb);
    fl_model_free(m);
    fl_tensor_free(x);
    fl_tensor_free(y);
}

/* a fit whose files must have the structure of Keras's case `name` (tools/tensorboard_fixtures.py) */
static void structure_case(const char *fx, const char *tmp, const char *name, fl_tensorboard_args a, float split) {
    char dir[1024], sub[1100];
    snprintf(dir, sizeof dir, "%s/%s", tmp, name);
    fl_model *m = small_model();
    fl_tensor *x, *y;
    small_data(&x, &y);
    fl_callback *tb = fl_tensorboard_(dir, a);
    fl_history *h = fl_fit(m, x, y, .batch_size = 8, .epochs = 3, .validation_split = split, .verbose = FL_VERBOSE_SILENT,
                           .callbacks = (fl_callback *[]){tb, NULL});
    CHECK_MSG(h != NULL, "%s: %s", name, fl_last_error());
    for (int s = 0; s < 2; s++) {
        snprintf(sub, sizeof sub, "%s/%s", dir, s ? "validation" : "train");
        char ksub[1100];
        snprintf(ksub, sizeof ksub, "%s/%s/%s", fx, name, s ? "validation" : "train");
        if (!is_dir(ksub)) { /* Keras made none (no validation data): neither does flynn */
            CHECK_MSG(!is_dir(sub), "%s: flynn made %s, Keras did not", name, sub);
            continue;
        }
        ev_file *fa = malloc(sizeof *fa), *fb = malloc(sizeof *fb);
        CHECK_MSG(ev_load(sub, fa), "%s", fa->err);
        CHECK_MSG(ev_load(ksub, fb), "%s", fb->err);
        char *sa = ev_structure(fa), *sb = ev_structure(fb);
        CHECK_MSG(strcmp(sa, sb) == 0, "%s/%s: flynn wrote\n%s\nKeras wrote\n%s", name, s ? "validation" : "train", sa, sb);
        if (strcmp(sa, sb) == 0)
            printf("  %s/%s: flynn's %d summaries have Keras's tags, steps, dtypes, shapes and plugins\n", name,
                   s ? "validation" : "train", fa->nvals);
        for (int i = 0; i < fa->nvals; i++) /* steps per second: measured, so only finite and positive */
            if (strstr(fa->vals[i].tag, "steps_per_second"))
                CHECK_MSG(ev_scalar(&fa->vals[i]) > 0 && isfinite(ev_scalar(&fa->vals[i])), "%s step %lld: %g",
                          fa->vals[i].tag, (long long)fa->vals[i].step, (double)ev_scalar(&fa->vals[i]));
        free(sa); free(sb);
        free(fa->data); free(fb->data); free(fa); free(fb);
    }
    fl_history_free(h);
    fl_callback_free(tb);
    fl_model_free(m);
    fl_tensor_free(x);
    fl_tensor_free(y);
}

static void test_errors(const char *tmp) {
    char file[1024], dir[1100];
    snprintf(file, sizeof file, "%s/a_file", tmp);
    FILE *f = fopen(file, "w");
    fputs("x", f);
    fclose(f);
    fl_model *m = small_model();
    fl_tensor *x, *y;
    small_data(&x, &y);
    /* the log folder is a file; a folder below a file */
    for (int k = 0; k < 2; k++) {
        snprintf(dir, sizeof dir, k ? "%s/sub/logs" : "%s", file);
        fl_callback *tb = fl_tensorboard(dir);
        batch_rec br = {0};
        fl_callback count = {.user = &br, .on_batch_end = record_batch};
        fl_history *h = fl_fit(m, x, y, .batch_size = 8, .epochs = 1, .verbose = FL_VERBOSE_SILENT,
                               .callbacks = (fl_callback *[]){tb, &count, NULL});
        CHECK(h == NULL);
        CHECK(br.n == 0); /* failed at train begin, before any step */
        CHECK(fl_last_status() == FL_ERR_IO);
        CHECK_STR_CONTAINS(fl_last_error(), file);
        CHECK_STR_CONTAINS(fl_last_error(), "TensorBoard");
        printf("  log folder %s: %s\n", k ? "below a file" : "is a file", fl_last_error());
        fl_history_free(h);
        fl_callback_free(tb);
    }
    CHECK(fl_tensorboard(NULL, .update_freq = -1) == NULL && fl_last_status() == FL_ERR_INVALID_ARG);
    CHECK(fl_tensorboard("") == NULL);
    fl_callback *dflt = fl_tensorboard(NULL); /* Keras's log_dir="logs"; nothing is made before a fit */
    CHECK(dflt != NULL);
    fl_callback_free(dflt);
    fl_model_free(m);
    fl_tensor_free(x);
    fl_tensor_free(y);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_tensorboard FIXTURES_DIR [--keep OUT]\n");
        return 2;
    }
    const char *fx = argv[1], *keep = argc > 3 && strcmp(argv[2], "--keep") == 0 ? argv[3] : NULL;
    char tmp[] = "/tmp/flynn-tb-XXXXXX";
    if (!mkdtemp(tmp)) { perror("mkdtemp"); return 1; }
    if (keep) rm_rf(keep);
    test_crc32c();
    test_keras_files(fx);
    test_histograms_vs_tf(fx);
    test_fit(fx, tmp, keep);
    test_refit(tmp);
    test_learning_rate(tmp);
    test_weight_paths(tmp);
    /* no validation and write_graph off: no validation folder, no "keras" tag */
    structure_case(fx, tmp, "noval", (fl_tensorboard_args){.no_write_graph = true}, 0.0f);
    structure_case(fx, tmp, "sps", (fl_tensorboard_args){.no_write_graph = true, .write_steps_per_second = true,
                                                          .update_freq = 2}, 0.25f);
    test_errors(tmp);
    rm_rf(tmp);
    return check_report("test_tensorboard");
}
