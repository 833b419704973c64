/*
 * keras_file.c — the public model-file functions (flynn.h, "model files"):
 * fl_load_model, fl_save_model, fl_load_weights, fl_save_weights,
 * fl_model_to_json and fl_model_from_json, and the containers around the
 * JSON (keras_config.c) and HDF5 (keras_weights.c) parts:
 *
 *   .keras        a zip (libzip) of metadata.json, config.json and
 *                 model.weights.h5, stored uncompressed as Keras writes it
 *   .h5 / .hdf5   a legacy full-model HDF5 file
 *   .weights.h5   Keras 3 weights only
 *   .json         model.to_json(): the architecture (and compile config)
 *
 * Limits: a zip entry's declared uncompressed size is checked before it is
 * inflated (config.json and metadata.json at most FL_KERAS_MAX_CONFIG,
 * 64 MiB; model.weights.h5 at most FL_KERAS_MAX_WEIGHTS, 4 GiB), and the
 * bytes read must match it. A .json file is at most 64 MiB, an .h5 file
 * 4 GiB. The zip's consistency is checked when it is opened and each entry's
 * CRC when it is read.
 *
 * The zip reader is shared with the .npz files (npz.c) through io.h:
 * fl_zip_open_read and fl_zip_read_index.
 *
 * Loading builds a new model and frees it on any error; fl_load_weights
 * reads and checks everything before it changes the model. Saving builds
 * the whole file in memory, then writes it atomically (src/io/atomic.c):
 * an unnamed or "<path>.tmp.<pid>.<suffix>" file in the same folder, fsync,
 * rename over <path>, fsync of the folder. On failure the temporary file is
 * removed and <path> keeps what it held; temporary files of killed runs are
 * removed by the next save to <path>.
 */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "keras/keras.h"
#include "io/io.h"
#include "core/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zip.h>

/* ------------------------------------------------------------ paths */

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    if (a < b) return false;
    for (size_t i = 0; i < b; i++) {
        char x = s[a - b + i], y = suffix[i];
        if (x >= 'A' && x <= 'Z') x = (char)(x + 32);
        if (x != y) return false;
    }
    return true;
}

typedef enum kind { K_UNKNOWN = 0, K_KERAS, K_H5, K_WEIGHTS_H5, K_JSON } kind;

static kind kind_of_name(const char *path) {
    if (ends_with(path, ".keras")) return K_KERAS;
    if (ends_with(path, ".weights.h5")) return K_WEIGHTS_H5;
    if (ends_with(path, ".h5") || ends_with(path, ".hdf5")) return K_H5;
    if (ends_with(path, ".json")) return K_JSON;
    return K_UNKNOWN;
}

/* By content: zip, HDF5 or JSON. */
static kind kind_of_content(const char *path) {
    unsigned char b[8] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return K_UNKNOWN;
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    if (n >= 4 && memcmp(b, "PK\x03\x04", 4) == 0) return K_KERAS;
    if (n >= 8 && memcmp(b, "\x89HDF\r\n\x1a\n", 8) == 0) return K_H5;
    for (size_t i = 0; i < n; i++) {
        if (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') continue;
        return b[i] == '{' ? K_JSON : K_UNKNOWN;
    }
    return K_UNKNOWN;
}

/* Reads a whole file, refusing more than limit bytes. */
static char *read_file(const char *path, int64_t limit, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return fl_error_null(FL_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return fl_error_null(FL_ERR_IO, "%s is not a regular file", path);
    }
    if ((int64_t)st.st_size > limit) {
        fclose(f);
        return fl_error_null(FL_ERR_FORMAT, "%s: %lld bytes, more than the limit of %lld", path, (long long)st.st_size,
                             (long long)limit);
    }
    size_t n = (size_t)st.st_size;
    char *buf = fl_malloc(n + 1, "file contents");
    if (!buf) { fclose(f); return NULL; }
    size_t got = fread(buf, 1, n, f);
    bool err = ferror(f);
    fclose(f);
    if (got != n || err) {
        free(buf);
        return fl_error_null(FL_ERR_IO, "cannot read %s: %s", path, err ? strerror(errno) : "short read");
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

/* Writes data to path atomically (src/io/atomic.c). */
static fl_status atomic_write(const char *path, const void *data, size_t len) {
    return fl_atomic_save(path, data, len);
}

/* ------------------------------------------------------------ zip */

static fl_status zip_fail_as(const char *path, const char *what, zip_error_t *ze, const char *format) {
    int code = zip_error_code_zip(ze);
    fl_status s = code == ZIP_ER_NOENT || code == ZIP_ER_OPEN || code == ZIP_ER_READ ? FL_ERR_IO : FL_ERR_FORMAT;
    char hint[96] = "";
    if (code == ZIP_ER_NOZIP || code == ZIP_ER_INCONS)
        snprintf(hint, sizeof hint, " (not a %s zip archive, or a truncated or damaged one)", format);
    return fl_error(s, "%s: %s: %s%s", path, what, zip_error_strerror(ze), hint);
}

static fl_status zip_fail(const char *path, const char *what, zip_error_t *ze) {
    return zip_fail_as(path, what, ze, ".keras");
}

/* Reads entry `name`, checking its declared size against limit before inflating. */
static fl_status zip_entry(zip_t *za, const char *path, const char *name, int64_t limit, char **data, size_t *len) {
    *data = NULL;
    zip_int64_t idx = zip_name_locate(za, name, 0);
    if (idx < 0) return fl_error(FL_ERR_FORMAT, "%s: not a Keras model file: the archive has no %s", path, name);
    return fl_zip_read_index(za, path, (int64_t)idx, limit, data, len);
}

fl_status fl_zip_read_index(struct zip *za, const char *path, int64_t idx, int64_t limit, char **data, size_t *len) {
    *data = NULL;
    const char *name = zip_get_name(za, (zip_uint64_t)idx, 0);
    if (!name) return zip_fail(path, "entry name", zip_get_error(za));
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(za, (zip_uint64_t)idx, 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE))
        return zip_fail(path, name, zip_get_error(za));
    if ((int64_t)st.size > limit || st.size > (zip_uint64_t)INT64_MAX)
        return fl_error(FL_ERR_FORMAT, "%s: %s declares %llu bytes uncompressed, more than flynn's limit of %lld "
                        "(%lld MiB); refused before inflating it (a zip bomb?)", path, name,
                        (unsigned long long)st.size, (long long)limit, (long long)(limit >> 20));
    zip_file_t *zf = zip_fopen_index(za, (zip_uint64_t)idx, 0);
    if (!zf) return zip_fail(path, name, zip_get_error(za));
    size_t n = (size_t)st.size;
    char *buf = fl_malloc(n + 1, name);
    if (!buf) { zip_fclose(zf); return FL_ERR_NOMEM; }
    size_t got = 0;
    fl_status s = FL_OK;
    while (got < n) {
        zip_int64_t r = zip_fread(zf, buf + got, n - got);
        if (r < 0) { s = zip_fail(path, name, zip_file_get_error(zf)); break; }
        if (r == 0) break;
        got += (size_t)r;
    }
    if (s == FL_OK && got != n)
        s = fl_error(FL_ERR_FORMAT, "%s: %s holds %zu bytes, its header declares %zu (a damaged archive)", path, name,
                     got, n);
    if (s == FL_OK) {
        char extra;
        zip_int64_t r = zip_fread(zf, &extra, 1);
        if (r < 0) s = zip_fail(path, name, zip_file_get_error(zf));
        else if (r > 0)
            s = fl_error(FL_ERR_FORMAT, "%s: %s holds more than the %zu bytes its header declares (a damaged archive)",
                         path, name, n);
    }
    zip_fclose(zf);
    if (s != FL_OK) { free(buf); return s; }
    buf[n] = 0;
    *data = buf;
    *len = n;
    return FL_OK;
}

struct zip *fl_zip_open_read(const char *path, const char *format) {
    int err = 0;
    zip_t *za = zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &err);
    if (!za) {
        zip_error_t ze;
        zip_error_init_with_code(&ze, err);
        if (err == ZIP_ER_NOENT) fl_error(FL_ERR_IO, "cannot open %s: no such file", path);
        else zip_fail_as(path, "cannot read the archive", &ze, format);
        zip_error_fini(&ze);
    }
    return za;
}

static zip_t *zip_open_read(const char *path) { return fl_zip_open_read(path, ".keras"); }

typedef struct zentry { const char *name; const void *data; size_t len; } zentry;

/* A zip archive of the entries, stored uncompressed (as Keras writes them), in memory. */
static fl_status zip_build(const zentry *es, int n, void **out, size_t *out_len) {
    *out = NULL;
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_buffer_create(NULL, 0, 0, &ze);
    if (!src) { fl_status s = fl_error(FL_ERR_NOMEM, "zip: %s", zip_error_strerror(&ze)); zip_error_fini(&ze); return s; }
    zip_source_keep(src);
    zip_t *za = zip_open_from_source(src, ZIP_TRUNCATE, &ze);
    fl_status s = FL_OK;
    if (!za) {
        s = fl_error(FL_ERR_IO, "zip: %s", zip_error_strerror(&ze));
        goto done;
    }
    time_t now = time(NULL);
    for (int i = 0; i < n; i++) {
        zip_source_t *es_src = zip_source_buffer(za, es[i].data, es[i].len, 0);
        zip_int64_t idx = es_src ? zip_file_add(za, es[i].name, es_src, ZIP_FL_ENC_UTF_8 | ZIP_FL_OVERWRITE) : -1;
        if (idx < 0) {
            if (es_src) zip_source_free(es_src);
            s = fl_error(FL_ERR_IO, "zip: adding %s: %s", es[i].name, zip_strerror(za));
            zip_discard(za);
            goto done;
        }
        zip_set_file_compression(za, (zip_uint64_t)idx, ZIP_CM_STORE, 0);
        zip_file_set_mtime(za, (zip_uint64_t)idx, now, 0);
    }
    if (zip_close(za) != 0) {
        s = fl_error(FL_ERR_IO, "zip: %s", zip_strerror(za));
        zip_discard(za);
        goto done;
    }
    if (zip_source_open(src) != 0 || zip_source_seek(src, 0, SEEK_END) != 0) {
        s = fl_error(FL_ERR_IO, "zip: %s", zip_error_strerror(zip_source_error(src)));
        goto done;
    }
    zip_int64_t size = zip_source_tell(src);
    void *buf = size > 0 ? malloc((size_t)size) : NULL;
    if (!buf || zip_source_seek(src, 0, SEEK_SET) != 0 || zip_source_read(src, buf, (zip_uint64_t)size) != size) {
        s = buf ? fl_error(FL_ERR_IO, "zip: %s", zip_error_strerror(zip_source_error(src)))
                : fl_error(FL_ERR_NOMEM, "out of memory for the archive");
        free(buf);
        zip_source_close(src);
        goto done;
    }
    zip_source_close(src);
    *out = buf;
    *out_len = (size_t)size;
done:
    zip_source_free(src);
    zip_error_fini(&ze);
    return s;
}

/* ------------------------------------------------------------ loading */

static bool nonempty_object(json_object *o) {
    return o && json_object_is_type(o, json_type_object) && json_object_object_length(o) > 0;
}

/* Model from a model config; compiled from cc when given and wanted. weights_follow: load_state reads every
 * weight next (and the model is freed if it fails), so they are not initialized first (about half of a VGG16
 * load's time: a host buffer, values and an upload per weight, then page faults over all of them). */
static fl_model *model_from(json_object *config, json_object *cc, bool compile, const char *src, bool weights_follow) {
    fl_model *m = fl_keras_model_from_config(config, src, weights_follow);
    if (!m) return NULL;
    if (compile && nonempty_object(cc) && fl_keras_compile_from_config(m, cc, src) != FL_OK) {
        fl_model_free(m);
        return NULL;
    }
    return m;
}

/* direct: m was built for this load (and is freed if it fails): its weights are read straight into it */
static fl_status load_state(fl_model *m, fl_h5file *h5, fl_kformat fmt, const char *src, bool require_opt,
                            bool direct) {
    fl_kstate st;
    if (direct) fl_h5_release_as_read(h5); /* the image (ours) need not stay resident beside the weights */
    FL_TRY(fl_keras_read_state(h5, fmt, m, m->compiled, direct, &st));
    bool applied = false;
    fl_status s = fl_keras_apply_state(m, &st, src, require_opt, &applied);
    fl_kstate_free(&st);
    return s;
}

static fl_model *load_keras(const char *path, bool compile) {
    zip_t *za = zip_open_read(path);
    if (!za) return NULL;
    char *cfg = NULL, *w = NULL;
    size_t cl = 0, wl = 0;
    fl_model *m = NULL;
    json_object *root = NULL;
    fl_h5file *h5 = NULL;
    if (zip_entry(za, path, "config.json", FL_KERAS_MAX_CONFIG, &cfg, &cl) != FL_OK) goto done;
    if (zip_name_locate(za, "model.weights.h5", 0) < 0 && zip_name_locate(za, "model.weights.json", 0) >= 0) {
        fl_error(FL_ERR_UNSUPPORTED, "%s: the weights are sharded (model.weights.json); flynn reads single "
                 "model.weights.h5 files", path);
        goto done;
    }
    if (zip_entry(za, path, "model.weights.h5", FL_KERAS_MAX_WEIGHTS, &w, &wl) != FL_OK) goto done;
    zip_close(za);
    za = NULL;
    char src[1100];
    snprintf(src, sizeof src, "%s (config.json)", path);
    if (!(root = fl_keras_parse_json(cfg, cl, src))) goto done;
    if (!(m = model_from(root, json_object_object_get(root, "compile_config"), compile, path, true))) goto done;
    snprintf(src, sizeof src, "%s (model.weights.h5)", path);
    if (!(h5 = fl_h5_open(w, wl, src)) || load_state(m, h5, FL_KFMT_KERAS, src, true, true) != FL_OK) {
        fl_model_free(m);
        m = NULL;
    }
done:
    if (za) zip_discard(za);
    fl_h5_close(h5);
    json_object_put(root);
    free(cfg);
    free(w);
    return m;
}

static fl_model *load_h5(const char *path, bool compile) {
    struct stat st;
    if (stat(path, &st) != 0) return fl_error_null(FL_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    if ((int64_t)st.st_size > FL_KERAS_MAX_WEIGHTS)
        return fl_error_null(FL_ERR_FORMAT, "%s: %lld bytes, more than the limit of %lld", path,
                             (long long)st.st_size, (long long)FL_KERAS_MAX_WEIGHTS);
    fl_h5file *h5 = fl_h5_open(NULL, 0, path);
    if (!h5) return NULL;
    fl_model *m = NULL;
    json_object *root = NULL, *tc = NULL;
    char *cfg = fl_h5_root_attr(h5, "model_config"), *train = NULL;
    if (!cfg) {
        if (fl_last_status() == FL_OK)
            fl_error(FL_ERR_FORMAT, "%s: no model_config attribute: not a full-model .h5 file (a weights-only file "
                     "goes to fl_load_weights)", path);
        goto done;
    }
    char src[1100];
    snprintf(src, sizeof src, "%s (model_config)", path);
    if (!(root = fl_keras_parse_json(cfg, strlen(cfg), src))) goto done;
    if (compile && (train = fl_h5_root_attr(h5, "training_config"))) {
        snprintf(src, sizeof src, "%s (training_config)", path);
        if (!(tc = fl_keras_parse_json(train, strlen(train), src))) goto done;
    }
    if (!(m = model_from(root, tc, compile, path, true))) goto done;
    if (!fl_h5_is_legacy(h5)) {
        fl_error(FL_ERR_FORMAT, "%s: the file has a model_config but no model_weights group", path);
        fl_model_free(m);
        m = NULL;
        goto done;
    }
    if (load_state(m, h5, FL_KFMT_LEGACY, path, true, true) != FL_OK) {
        fl_model_free(m);
        m = NULL;
    }
done:
    json_object_put(root);
    json_object_put(tc);
    free(cfg);
    free(train);
    fl_h5_close(h5);
    return m;
}

static fl_model *load_json_text(const char *text, size_t len, const char *src, bool compile) {
    json_object *root = fl_keras_parse_json(text, len, src);
    if (!root) return NULL;
    fl_model *m = model_from(root, json_object_object_get(root, "compile_config"), compile, src, false);
    json_object_put(root);
    return m;
}

fl_model *fl_load_model_(const char *path, fl_load_args a) {
    if (!path || !*path) return fl_error_null(FL_ERR_INVALID_ARG, "fl_load_model: path is NULL or empty");
    if (access(path, R_OK) != 0) return fl_error_null(FL_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    kind k = kind_of_name(path);
    kind c = kind_of_content(path);
    if (c != K_UNKNOWN && !(c == K_H5 && (k == K_H5 || k == K_WEIGHTS_H5))) k = c;
    bool compile = !a.no_compile;
    switch (k) {
    case K_KERAS: return load_keras(path, compile);
    case K_H5:
    case K_WEIGHTS_H5: return load_h5(path, compile);
    case K_JSON: {
        size_t len = 0;
        char *text = read_file(path, FL_KERAS_MAX_CONFIG, &len);
        if (!text) return NULL;
        fl_model *m = load_json_text(text, len, path, compile);
        free(text);
        return m;
    }
    default:
        return fl_error_null(FL_ERR_FORMAT, "%s: not a Keras model file (expected a .keras zip, an HDF5 .h5 file or "
                             "a .json model config)", path);
    }
}

fl_model *fl_model_from_json_(const char *json, fl_load_args a) {
    if (!json) return fl_error_null(FL_ERR_INVALID_ARG, "fl_model_from_json: text is NULL");
    return load_json_text(json, strlen(json), "model JSON", !a.no_compile);
}

char *fl_model_to_json(const fl_model *m) {
    if (!m) return fl_error_null(FL_ERR_INVALID_ARG, "fl_model_to_json: model is NULL");
    json_object *c = fl_keras_model_config(m, false);
    if (!c) return fl_error_null(FL_ERR_NOMEM, "out of memory writing the model config");
    char *s = fl_keras_json_text(c);
    json_object_put(c);
    return s;
}

fl_status fl_load_weights(fl_model *m, const char *path) {
    if (!m || !path) return fl_error(FL_ERR_INVALID_ARG, "fl_load_weights: NULL argument");
    if (access(path, R_OK) != 0) return fl_error(FL_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    fl_model_weights_ready(m); /* a weight the file does not hold keeps its initial value */
    kind k = kind_of_content(path);
    fl_h5file *h5 = NULL;
    char *w = NULL;
    char src[1100];
    snprintf(src, sizeof src, "%s", path);
    if (k == K_KERAS) { /* Keras's load_weights takes a .keras file too */
        zip_t *za = zip_open_read(path);
        if (!za) return fl_last_status();
        size_t wl = 0;
        fl_status s = zip_entry(za, path, "model.weights.h5", FL_KERAS_MAX_WEIGHTS, &w, &wl);
        zip_discard(za);
        if (s != FL_OK) return s;
        snprintf(src, sizeof src, "%s (model.weights.h5)", path);
        h5 = fl_h5_open(w, wl, src);
    } else if (k == K_H5) {
        struct stat st;
        if (stat(path, &st) == 0 && (int64_t)st.st_size > FL_KERAS_MAX_WEIGHTS)
            return fl_error(FL_ERR_FORMAT, "%s: %lld bytes, more than the limit of %lld", path, (long long)st.st_size,
                            (long long)FL_KERAS_MAX_WEIGHTS);
        h5 = fl_h5_open(NULL, 0, path);
    } else {
        return fl_error(FL_ERR_FORMAT, "%s: not a weights file (expected HDF5 .weights.h5 / .h5, or .keras)", path);
    }
    if (!h5) { free(w); return fl_last_status(); }
    fl_status s = load_state(m, h5, fl_h5_is_legacy(h5) ? FL_KFMT_LEGACY : FL_KFMT_KERAS, src, false, false);
    fl_h5_close(h5);
    free(w);
    if (s != FL_OK) fl_error_prefix("fl_load_weights: ");
    return s;
}

/* ------------------------------------------------------------ saving */

static fl_status save_keras(fl_model *m, const char *path) {
    void *h5 = NULL, *zipbuf = NULL;
    size_t h5len = 0, ziplen = 0;
    char *cfg = NULL;
    fl_status s = fl_keras_write_h5(m, FL_KFMT_KERAS, &h5, &h5len);
    if (s == FL_OK) {
        json_object *c = fl_keras_model_config(m, false);
        cfg = c ? fl_keras_json_text(c) : NULL;
        json_object_put(c);
        if (!cfg) s = fl_last_status() ? fl_last_status() : FL_ERR_NOMEM;
    }
    char meta[256];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    snprintf(meta, sizeof meta,
             "{\"keras_version\": \"%s\", \"date_saved\": \"%04d-%02d-%02d@%02d:%02d:%02d\", \"saved_by\": \"flynn %s\"}",
             FL_KERAS_FORMAT_VERSION, tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             fl_version());
    if (s == FL_OK) {
        zentry es[3] = {{"metadata.json", meta, strlen(meta)}, {"config.json", cfg, strlen(cfg)},
                        {"model.weights.h5", h5, h5len}};
        s = zip_build(es, 3, &zipbuf, &ziplen);
    }
    if (s == FL_OK) s = atomic_write(path, zipbuf, ziplen);
    free(h5);
    free(cfg);
    free(zipbuf);
    return s;
}

static fl_status save_h5(fl_model *m, const char *path, fl_kformat fmt) {
    void *h5 = NULL;
    size_t len = 0;
    fl_status s = fl_keras_write_h5(m, fmt, &h5, &len);
    if (s == FL_OK) s = atomic_write(path, h5, len);
    free(h5);
    return s;
}

fl_status fl_save_model(fl_model *m, const char *path) {
    if (!m || !path || !*path) return fl_error(FL_ERR_INVALID_ARG, "fl_save_model: NULL model or empty path");
    fl_status s;
    switch (kind_of_name(path)) { /* (the weights are initialized where they are pending; a .json holds none) */
    case K_KERAS: fl_model_weights_ready(m); s = save_keras(m, path); break;
    case K_H5: fl_model_weights_ready(m); s = save_h5(m, path, FL_KFMT_LEGACY); break;
    case K_JSON: {
        char *text = fl_model_to_json(m);
        if (!text) return fl_last_status();
        s = atomic_write(path, text, strlen(text));
        free(text);
        break;
    }
    case K_WEIGHTS_H5:
        return fl_error(FL_ERR_INVALID_ARG, "fl_save_model: %s is a weights-only name; use fl_save_weights, or a "
                        ".keras or .h5 name for the whole model", path);
    default:
        return fl_error(FL_ERR_INVALID_ARG, "fl_save_model: %s: the name must end in .keras (Keras 3), .h5 (legacy "
                        "HDF5) or .json (the architecture only)", path);
    }
    if (s != FL_OK) fl_error_prefix("fl_save_model: ");
    return s;
}

fl_status fl_save_weights(fl_model *m, const char *path) {
    if (!m || !path) return fl_error(FL_ERR_INVALID_ARG, "fl_save_weights: NULL argument");
    if (!ends_with(path, ".weights.h5"))
        return fl_error(FL_ERR_INVALID_ARG, "fl_save_weights: %s: the name must end in .weights.h5 (as Keras requires)",
                        path);
    fl_model_weights_ready(m);
    fl_status s = save_h5(m, path, FL_KFMT_KERAS);
    if (s != FL_OK) fl_error_prefix("fl_save_weights: ");
    return s;
}

/* ------------------------------------------------------------ accessors */

const fl_optimizer *fl_model_optimizer(const fl_model *m) { return m && m->compiled ? m->opt : NULL; }
const char *fl_model_metric_name(const fl_model *m, int i) {
    return m && m->compiled && i >= 0 && i < m->nmetrics ? fl_metric_key(m->metrics[i]) : NULL;
}
fl_loss fl_model_loss(const fl_model *m) { return m && m->compiled ? m->loss : (fl_loss){0}; }
float fl_optimizer_learning_rate(const fl_optimizer *o) { return o ? o->d.lr : 0.0f; }
