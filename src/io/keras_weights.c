/*
 * keras_weights.c — the HDF5 side of Keras files, with the HDF5 C library.
 *
 * Two layouts:
 *   Keras 3 (model.weights.h5 inside a .keras, and .weights.h5 files):
 *     /vars                      attribute name = the model's name
 *     /layers/<path>/vars/<i>    layer weights in the layer's order; <path> is
 *                                the class name in snake case, de-duplicated
 *                                in model.layers order ("dense", "dense_1");
 *                                the vars group's attribute name = layer name
 *     /optimizer/vars/<i>        0 = iterations, 1 = learning_rate, then the
 *                                slots (Adam/AdamW: m, v per variable; SGD:
 *                                momentum per variable; RMSprop: every
 *                                velocity, then every momentum, then every
 *                                average_gradient), variables in
 *                                model.trainable_variables order
 *   legacy full-model .h5 (Keras 3 and tf.keras 2 model.save("x.h5")):
 *     attributes model_config, training_config, keras_version, backend
 *     /model_weights             attribute layer_names
 *     /model_weights/<layer>     attribute weight_names; datasets at those
 *                                relative paths ("dense/kernel", "dense/kernel:0")
 *     /optimizer_weights         attribute weight_names, datasets at those paths
 *
 * Files are read into an fl_kstate and checked (every layer's weight count
 * and shapes) before anything is applied; fl_keras_apply_state then checks
 * the optimizer variables against the compiled optimizer before it changes
 * the model. HDF5 images in memory use the core driver (no temporary files).
 * HDF5's own error printing is switched off around every call (and restored)
 * and its error stack becomes the message. HDF5 is not thread-safe in
 * Debian's serial build, so every use is serialised by one mutex.
 */
#include "io/keras.h"
#include "core/error.h"
#include "core/tensor.h"

#include <hdf5.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------ HDF5 guard */

static pthread_mutex_t h5_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long h5_image_counter;

typedef struct h5guard { H5E_auto2_t func; void *data; } h5guard;

static void h5_enter(h5guard *g) {
    pthread_mutex_lock(&h5_lock);
    H5Eget_auto2(H5E_DEFAULT, &g->func, &g->data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    H5Eclear2(H5E_DEFAULT);
}

static void h5_leave(h5guard *g) {
    H5Eclear2(H5E_DEFAULT);
    H5Eset_auto2(H5E_DEFAULT, g->func, g->data);
    pthread_mutex_unlock(&h5_lock);
}

typedef struct walk_buf { char *s; size_t n, len; char last[256]; } walk_buf;

static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *data) {
    (void)n;
    walk_buf *w = data;
    if (!e->desc || !e->desc[0] || strcmp(e->desc, w->last) == 0) return 0;
    snprintf(w->last, sizeof w->last, "%s", e->desc);
    if (w->len + 8 < w->n)
        w->len += (size_t)snprintf(w->s + w->len, w->n - w->len, "%s%s", w->len ? ": " : "", e->desc);
    if (w->len >= w->n) w->len = w->n - 1;
    return 0;
}

/* Sets an error "src: what: HDF5: <the stack's descriptions>". */
static fl_status h5_fail(fl_status s, const char *src, const char *what) {
    char stack[512] = "";
    walk_buf w = {stack, sizeof stack, 0, ""};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_cb, &w);
    H5Eclear2(H5E_DEFAULT);
    return fl_error(s, "%s: %s%s%s", src, what, stack[0] ? ": HDF5: " : "", stack);
}

/* ------------------------------------------------------------ files */

struct fl_h5file {
    hid_t id;
    char src[512];
};

fl_h5file *fl_h5_open(const void *data, size_t len, const char *src) {
    fl_h5file *f = fl_calloc(1, sizeof *f, "HDF5 file");
    if (!f) return NULL;
    snprintf(f->src, sizeof f->src, "%s", src);
    h5guard g;
    h5_enter(&g);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    bool ok = fapl >= 0 && H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) >= 0;
    if (data) {
        char name[64];
        snprintf(name, sizeof name, "flynn-image-%lu", ++h5_image_counter);
        ok = ok && H5Pset_fapl_core(fapl, 1 << 16, 0) >= 0 && H5Pset_file_image(fapl, (void *)data, len) >= 0;
        f->id = ok ? H5Fopen(name, H5F_ACC_RDONLY, fapl) : -1;
    } else {
        f->id = ok ? H5Fopen(src, H5F_ACC_RDONLY, fapl) : -1;
    }
    if (f->id < 0) {
        h5_fail(FL_ERR_FORMAT, src, "not a readable HDF5 file"); /* before any other call clears the stack */
        if (fapl >= 0) H5Pclose(fapl);
        h5_leave(&g);
        free(f);
        return NULL;
    }
    H5Pclose(fapl);
    h5_leave(&g);
    return f;
}

void fl_h5_close(fl_h5file *f) {
    if (!f) return;
    h5guard g;
    h5_enter(&g);
    if (f->id >= 0) H5Fclose(f->id);
    h5_leave(&g);
    free(f);
}

/* --------------------------------------------------- attributes (locked) */

/* Reads a string attribute (scalar or 1-D, fixed or variable length) into a
 * NULL-terminated array of strings. Returns the count, -2 when absent, -1 on
 * error (message set). An empty numeric array (what h5py writes for an empty
 * list) is 0 strings. */
static int read_str_attr(hid_t obj, const char *name, const char *src, char ***out) {
    *out = NULL;
    if (H5Aexists(obj, name) <= 0) return -2;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t t = a >= 0 ? H5Aget_type(a) : -1, sp = a >= 0 ? H5Aget_space(a) : -1;
    int count = -1;
    char what[160];
    snprintf(what, sizeof what, "attribute '%s'", name);
    if (a < 0 || t < 0 || sp < 0) { h5_fail(FL_ERR_FORMAT, src, what); goto done; }
    hssize_t n = H5Sget_simple_extent_npoints(sp);
    if (n < 0 || n > 1000000) { h5_fail(FL_ERR_FORMAT, src, what); goto done; }
    if (H5Tget_class(t) != H5T_STRING) {
        if (n == 0) { count = 0; *out = fl_calloc(1, sizeof(char *), "strings"); if (!*out) count = -1; goto done; }
        fl_error(FL_ERR_FORMAT, "%s: %s is not text", src, what);
        goto done;
    }
    char **res = fl_calloc((size_t)n + 1, sizeof *res, "strings");
    if (!res) goto done;
    if (H5Tis_variable_str(t) > 0) {
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, H5T_VARIABLE);
        H5Tset_cset(mt, H5Tget_cset(t));
        char **v = fl_calloc((size_t)n + 1, sizeof *v, "strings");
        if (v && H5Aread(a, mt, v) >= 0) {
            count = (int)n;
            for (hssize_t i = 0; i < n; i++) {
                res[i] = strdup(v[i] ? v[i] : "");
                if (v[i]) H5free_memory(v[i]);
                if (!res[i]) count = -1;
            }
            if (count < 0) fl_error(FL_ERR_NOMEM, "out of memory reading %s", what);
        } else if (v) {
            h5_fail(FL_ERR_FORMAT, src, what);
        }
        free(v);
        H5Tclose(mt);
    } else {
        size_t sz = H5Tget_size(t);
        char *buf = sz ? fl_malloc((size_t)n * sz + 1, "strings") : NULL;
        hid_t mt = H5Tcopy(t);
        if (buf && H5Aread(a, mt, buf) >= 0) {
            count = (int)n;
            for (hssize_t i = 0; i < n; i++) {
                size_t l = 0;
                const char *p = buf + (size_t)i * sz;
                while (l < sz && p[l]) l++;
                while (l > 0 && p[l - 1] == ' ') l--;
                res[i] = strndup(p, l);
                if (!res[i]) count = -1;
            }
        } else if (buf) {
            h5_fail(FL_ERR_FORMAT, src, what);
        }
        free(buf);
        H5Tclose(mt);
    }
    if (count < 0) {
        for (hssize_t i = 0; i < n; i++) free(res[i]);
        free(res);
    } else {
        *out = res;
    }
done:
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    if (a >= 0) H5Aclose(a);
    return count;
}

static void free_strs(char **s) {
    if (!s) return;
    for (int i = 0; s[i]; i++) free(s[i]);
    free(s);
}

/* A list attribute that Keras may split into name0, name1, ... when large. */
static int read_str_list_attr(hid_t obj, const char *name, const char *src, char ***out) {
    int n = read_str_attr(obj, name, src, out);
    if (n != -2) return n;
    char **all = NULL;
    int total = 0;
    for (int chunk = 0;; chunk++) {
        char key[128];
        snprintf(key, sizeof key, "%s%d", name, chunk);
        char **part = NULL;
        int k = read_str_attr(obj, key, src, &part);
        if (k == -2) break;
        if (k < 0) { free_strs(all); return -1; }
        char **grown = realloc(all, (size_t)(total + k + 1) * sizeof *grown);
        if (!grown) { free_strs(part); free_strs(all); fl_error(FL_ERR_NOMEM, "out of memory"); return -1; }
        all = grown;
        for (int i = 0; i < k; i++) all[total++] = part[i];
        all[total] = NULL;
        free(part);
    }
    if (!all) return -2;
    *out = all;
    return total;
}

char *fl_h5_root_attr(fl_h5file *f, const char *name) {
    h5guard g;
    h5_enter(&g);
    char **s = NULL;
    int n = read_str_attr(f->id, name, f->src, &s);
    h5_leave(&g);
    if (n <= 0) { free_strs(s); if (n == -2 || n == 0) fl_clear_error(); return NULL; }
    char *r = s[0];
    s[0] = NULL;
    for (int i = 1; s[i]; i++) free(s[i]);
    free(s);
    return r;
}

bool fl_h5_is_legacy(fl_h5file *f) {
    h5guard g;
    h5_enter(&g);
    /* a full model: /model_weights; tf.keras save_weights("x.h5"): the same group at the root */
    bool r = H5Lexists(f->id, "model_weights", H5P_DEFAULT) > 0 || H5Aexists(f->id, "layer_names") > 0;
    h5_leave(&g);
    return r;
}

/* ------------------------------------------------------------ reading */

void fl_kstate_free(fl_kstate *s) {
    if (!s) return;
    for (int i = 0; i < s->nvars; i++) free(s->vars[i].data);
    for (int i = 0; i < s->nslots; i++) free(s->slots[i].data);
    free(s->vars);
    free(s->slots);
    memset(s, 0, sizeof *s);
}

static bool link_exists(hid_t loc, const char *path) {
    /* H5Lexists on every component, as HDF5 requires for nested paths */
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf; *p; p++) {
        if (*p != '/' || p == buf) continue;
        *p = 0;
        htri_t e = H5Lexists(loc, buf, H5P_DEFAULT);
        *p = '/';
        if (e <= 0) return false;
    }
    return H5Lexists(loc, buf, H5P_DEFAULT) > 0;
}

/* Reads dataset `name` of loc as float32. With want (ndim >= 0) the shape
 * must equal it; the message then names `who` and both shapes. */
static fl_status read_dataset(hid_t loc, const char *name, const char *src, const char *who, const fl_kvar *want,
                              fl_kvar *out) {
    memset(out, 0, sizeof *out);
    char what[512];
    snprintf(what, sizeof what, "%s (dataset %s)", who, name);
    if (!link_exists(loc, name)) return fl_error(FL_ERR_FORMAT, "%s: %s is missing", src, what);
    hid_t d = H5Dopen2(loc, name, H5P_DEFAULT);
    if (d < 0) return h5_fail(FL_ERR_FORMAT, src, what);
    hid_t sp = H5Dget_space(d), t = H5Dget_type(d);
    fl_status s = FL_OK;
    int nd = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    if (sp < 0 || t < 0 || nd < 0) { s = h5_fail(FL_ERR_FORMAT, src, what); goto done; }
    if (nd > FL_MAX_DIMS) { s = fl_error(FL_ERR_UNSUPPORTED, "%s: %s has %d dimensions", src, what, nd); goto done; }
    H5T_class_t cls = H5Tget_class(t);
    if (cls != H5T_FLOAT && cls != H5T_INTEGER) {
        s = fl_error(FL_ERR_FORMAT, "%s: %s is not numeric (HDF5 type class %d)", src, what, (int)cls);
        goto done;
    }
    hsize_t dims[FL_MAX_DIMS];
    H5Sget_simple_extent_dims(sp, dims, NULL);
    out->ndim = nd;
    int64_t count = 1;
    for (int i = 0; i < nd; i++) {
        out->shape[i] = (int64_t)dims[i];
        if (dims[i] > ((hsize_t)1 << 40) || (count *= (int64_t)dims[i]) > FL_KERAS_MAX_WEIGHTS / 4) {
            s = fl_error(FL_ERR_FORMAT, "%s: %s is larger than %lld bytes", src, what, (long long)FL_KERAS_MAX_WEIGHTS);
            goto done;
        }
    }
    if (want && want->ndim >= 0) {
        bool same = want->ndim == nd;
        for (int i = 0; same && i < nd; i++) same = want->shape[i] == out->shape[i];
        if (!same) {
            char a[128], b[128];
            s = fl_error(FL_ERR_SHAPE, "%s: %s has shape %s, expected %s", src, what,
                         fl_shape_str(nd, out->shape, a, sizeof a), fl_shape_str(want->ndim, want->shape, b, sizeof b));
            goto done;
        }
    }
    out->data = fl_malloc((size_t)count * sizeof(float), "weights");
    if (!out->data) { s = fl_last_status(); goto done; }
    if (count > 0 && H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out->data) < 0) {
        s = h5_fail(FL_ERR_FORMAT, src, what);
        free(out->data);
        out->data = NULL;
    }
done:
    if (t >= 0) H5Tclose(t);
    if (sp >= 0) H5Sclose(sp);
    H5Dclose(d);
    return s;
}

static fl_status read_scalar_i64(hid_t loc, const char *name, const char *src, const char *who, int64_t *v) {
    hid_t d = H5Dopen2(loc, name, H5P_DEFAULT);
    if (d < 0) return h5_fail(FL_ERR_FORMAT, src, who);
    hid_t sp = H5Dget_space(d);
    fl_status s = FL_OK;
    if (sp < 0 || H5Sget_simple_extent_npoints(sp) != 1) s = fl_error(FL_ERR_FORMAT, "%s: %s is not a scalar", src, who);
    else if (H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0) s = h5_fail(FL_ERR_FORMAT, src, who);
    if (sp >= 0) H5Sclose(sp);
    H5Dclose(d);
    return s;
}

static fl_status read_scalar_f32(hid_t loc, const char *name, const char *src, const char *who, float *v) {
    fl_kvar k;
    FL_TRY(read_dataset(loc, name, src, who, NULL, &k));
    int64_t n = fl_shape_prod(k.ndim, k.shape);
    fl_status s = FL_OK;
    if (n != 1) s = fl_error(FL_ERR_FORMAT, "%s: %s is not a scalar", src, who);
    else *v = k.data[0];
    free(k.data);
    return s;
}

static bool is_sequential_input(const fl_model *m, int i) { return !m->functional && i == 0; }

void fl_keras_layer_path(const fl_model *m, int i, char *buf, size_t n) {
    if (is_sequential_input(m, i)) { buf[0] = 0; return; }
    const char *base = fl_layer_kind_base(m->layers[i]->kind);
    int dup = 0;
    for (int k = m->functional ? 0 : 1; k < i; k++)
        if (strcmp(fl_layer_kind_base(m->layers[k]->kind), base) == 0) dup++;
    if (dup) snprintf(buf, n, "%s_%d", base, dup);
    else snprintf(buf, n, "%s", base);
}

static fl_kvar want_of(const fl_node *w) {
    fl_kvar k = {.ndim = w->ndim};
    for (int i = 0; i < w->ndim; i++) k.shape[i] = w->shape[i];
    return k;
}

static int count_links(hid_t g) {
    H5G_info_t info;
    if (H5Gget_info(g, &info) < 0) return -1;
    return (int)info.nlinks;
}

static int total_weights(const fl_model *m) {
    int n = 0;
    for (int i = 0; i < m->nlayers; i++) n += m->layers[i]->nw;
    return n;
}

/* Keras 3 layout: layers/<path>/vars/<i>. */
static fl_status read_keras_layers(hid_t fid, const fl_model *m, const char *src, fl_kstate *st) {
    int v = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const fl_layer *l = m->layers[i];
        if (is_sequential_input(m, i)) continue;
        char kp[96], path[256], who[256];
        fl_keras_layer_path(m, i, kp, sizeof kp);
        snprintf(path, sizeof path, "layers/%s/vars", kp);
        if (!link_exists(fid, path)) { /* Keras 2.13 .keras files */
            char old[256];
            snprintf(old, sizeof old, "_layer_checkpoint_dependencies/%s/vars", kp);
            if (link_exists(fid, old)) snprintf(path, sizeof path, "%s", old);
        }
        if (!link_exists(fid, path)) {
            if (l->nw == 0) continue;
            return fl_error(FL_ERR_FORMAT, "%s: the weights of layer '%s' (%s) are missing (no group /%s)", src, l->name,
                            fl_layer_kind_class(l->kind), path);
        }
        hid_t g = H5Gopen2(fid, path, H5P_DEFAULT);
        if (g < 0) return h5_fail(FL_ERR_FORMAT, src, path);
        int n = count_links(g);
        if (n != l->nw) {
            H5Gclose(g);
            return fl_error(FL_ERR_FORMAT, "%s: layer '%s' (%s) has %d weights, the file has %d in /%s", src, l->name,
                            fl_layer_kind_class(l->kind), l->nw, n, path);
        }
        for (int k = 0; k < l->nw; k++, v++) {
            char ds[16];
            snprintf(ds, sizeof ds, "%d", k);
            snprintf(who, sizeof who, "layer '%s' (%s) weight '%s'", l->name, fl_layer_kind_class(l->kind), l->wname[k]);
            fl_kvar want = want_of(l->w[k]);
            fl_status s = read_dataset(g, ds, src, who, &want, &st->vars[v]);
            if (s != FL_OK) { H5Gclose(g); return s; }
        }
        H5Gclose(g);
    }
    return FL_OK;
}

static fl_status read_keras_optimizer(hid_t fid, const char *src, fl_kstate *st) {
    if (!link_exists(fid, "optimizer/vars")) return FL_OK;
    hid_t g = H5Gopen2(fid, "optimizer/vars", H5P_DEFAULT);
    if (g < 0) return h5_fail(FL_ERR_FORMAT, src, "optimizer/vars");
    int n = count_links(g);
    fl_status s = FL_OK;
    if (n < 1) { H5Gclose(g); return FL_OK; }
    s = read_scalar_i64(g, "0", src, "optimizer iterations (optimizer/vars/0)", &st->iterations);
    if (s == FL_OK && n >= 2) {
        s = read_scalar_f32(g, "1", src, "optimizer learning rate (optimizer/vars/1)", &st->learning_rate);
        st->has_lr = s == FL_OK;
    }
    if (s == FL_OK && n > 2) {
        st->slots = fl_calloc((size_t)(n - 2), sizeof *st->slots, "optimizer state");
        if (!st->slots) s = fl_last_status();
        for (int i = 2; s == FL_OK && i < n; i++) {
            char ds[16], who[64];
            snprintf(ds, sizeof ds, "%d", i);
            snprintf(who, sizeof who, "optimizer variable %d", i);
            s = read_dataset(g, ds, src, who, NULL, &st->slots[i - 2]);
            if (s == FL_OK) st->nslots++;
        }
    }
    H5Gclose(g);
    if (s == FL_OK) st->has_opt = true;
    return s;
}

/* Legacy layout: model_weights/<layer>/<weight name>. */
static fl_status read_legacy_layers(hid_t fid, const fl_model *m, const char *src, fl_kstate *st) {
    const char *where = H5Lexists(fid, "model_weights", H5P_DEFAULT) > 0 ? "model_weights" : "/";
    hid_t mw = H5Gopen2(fid, where, H5P_DEFAULT);
    if (mw < 0) return h5_fail(FL_ERR_FORMAT, src, "group model_weights");
    fl_status s = FL_OK;
    int v = 0;
    for (int i = 0; i < m->nlayers && s == FL_OK; i++) {
        const fl_layer *l = m->layers[i];
        if (l->nw == 0) continue;
        if (H5Lexists(mw, l->name, H5P_DEFAULT) <= 0) {
            s = fl_error(FL_ERR_FORMAT, "%s: the weights of layer '%s' (%s) are missing (no group %s%s%s)", src,
                         l->name, fl_layer_kind_class(l->kind), where[1] ? "/model_weights" : "", "/", l->name);
            break;
        }
        hid_t lg = H5Gopen2(mw, l->name, H5P_DEFAULT);
        if (lg < 0) { s = h5_fail(FL_ERR_FORMAT, src, l->name); break; }
        char **names = NULL;
        int n = read_str_list_attr(lg, "weight_names", src, &names);
        if (n == -2) n = 0;
        if (n >= 0 && n != l->nw)
            s = fl_error(FL_ERR_FORMAT, "%s: layer '%s' (%s) has %d weights, the file has %d in %s/%s", src, l->name,
                         fl_layer_kind_class(l->kind), l->nw, n, where[1] ? "/model_weights" : "", l->name);
        else if (n < 0)
            s = fl_last_status();
        for (int k = 0; s == FL_OK && k < l->nw; k++, v++) {
            char who[256];
            snprintf(who, sizeof who, "layer '%s' (%s) weight '%s'", l->name, fl_layer_kind_class(l->kind), l->wname[k]);
            fl_kvar want = want_of(l->w[k]);
            s = read_dataset(lg, names[k], src, who, &want, &st->vars[v]);
        }
        free_strs(names);
        H5Gclose(lg);
    }
    H5Gclose(mw);
    return s;
}

static fl_status read_legacy_optimizer(hid_t fid, const char *src, fl_kstate *st) {
    if (H5Lexists(fid, "optimizer_weights", H5P_DEFAULT) <= 0) return FL_OK;
    /* tf.keras 2 orders its optimizer weights differently (all m, then all v,
     * named by variable): only Keras 3 files are read */
    char **ver = NULL;
    int nv = read_str_attr(fid, "keras_version", src, &ver);
    bool k3 = nv > 0 && ver[0][0] == '3';
    free_strs(ver);
    if (!k3) { fl_clear_error(); return FL_OK; }
    hid_t og = H5Gopen2(fid, "optimizer_weights", H5P_DEFAULT);
    if (og < 0) return h5_fail(FL_ERR_FORMAT, src, "group optimizer_weights");
    char **names = NULL;
    int n = read_str_list_attr(og, "weight_names", src, &names);
    fl_status s = FL_OK;
    if (n < 0 && n != -2) s = fl_last_status();
    if (s == FL_OK && n >= 1) s = read_scalar_i64(og, names[0], src, "optimizer iterations", &st->iterations);
    if (s == FL_OK && n >= 2) {
        s = read_scalar_f32(og, names[1], src, "optimizer learning rate", &st->learning_rate);
        st->has_lr = s == FL_OK;
    }
    if (s == FL_OK && n > 2) {
        st->slots = fl_calloc((size_t)(n - 2), sizeof *st->slots, "optimizer state");
        if (!st->slots) s = fl_last_status();
        for (int i = 2; s == FL_OK && i < n; i++) {
            char who[300];
            snprintf(who, sizeof who, "optimizer weight '%s'", names[i]);
            s = read_dataset(og, names[i], src, who, NULL, &st->slots[i - 2]);
            if (s == FL_OK) st->nslots++;
        }
    }
    if (s == FL_OK && n >= 1) st->has_opt = true;
    free_strs(names);
    H5Gclose(og);
    return s;
}

fl_status fl_keras_read_state(fl_h5file *f, fl_kformat fmt, const fl_model *m, bool want_optimizer, fl_kstate *out) {
    memset(out, 0, sizeof *out);
    int nw = total_weights(m);
    out->vars = fl_calloc((size_t)nw + 1, sizeof *out->vars, "weights");
    if (!out->vars) return fl_last_status();
    out->nvars = nw;
    h5guard g;
    h5_enter(&g);
    fl_status s = fmt == FL_KFMT_KERAS ? read_keras_layers(f->id, m, f->src, out) : read_legacy_layers(f->id, m, f->src, out);
    if (s == FL_OK && want_optimizer)
        s = fmt == FL_KFMT_KERAS ? read_keras_optimizer(f->id, f->src, out) : read_legacy_optimizer(f->id, f->src, out);
    h5_leave(&g);
    if (s != FL_OK) fl_kstate_free(out);
    return s;
}

/* ------------------------------------------------------------ optimizer slots */

typedef struct kslot { int param; int which; const fl_node *w; } kslot;

/* The optimizer's slot buffers in Keras's order. Returns the count (out may be NULL). */
static int keras_slots(const fl_model *m, kslot *out) {
    const fl_optimizer *o = m->opt;
    if (!o || !o->params) return 0;
    /* trainable variables in model.trainable_variables order */
    int nv = 0;
    int *param = malloc(((size_t)o->nparams + 1) * sizeof *param);
    const fl_node **node = malloc(((size_t)o->nparams + 1) * sizeof *node);
    if (!param || !node) { free(param); free(node); return -1; }
    for (int i = 0; i < m->nlayers; i++) {
        const fl_layer *l = m->layers[i];
        for (int k = 0; k < l->nw; k++) {
            if (!l->w[k]->trainable) continue;
            for (int p = 0; p < o->nparams; p++)
                if (o->params[p].w == l->w[k]->val && nv < o->nparams) { param[nv] = p; node[nv] = l->w[k]; nv++; break; }
        }
    }
    int n = 0;
#define EMIT(P, W, NODE) do { if (out) { out[n].param = (P); out[n].which = (W); out[n].w = (NODE); } n++; } while (0)
    switch (o->code) {
    case FL_OPT_ADAM:
    case FL_OPT_ADAMW:
        for (int v = 0; v < nv; v++) { EMIT(param[v], 0, node[v]); EMIT(param[v], 1, node[v]); }
        break;
    case FL_OPT_SGD:
        if (o->d.momentum != 0.0f)
            for (int v = 0; v < nv; v++) EMIT(param[v], 0, node[v]);
        break;
    case FL_OPT_RMSPROP:
        for (int v = 0; v < nv; v++) EMIT(param[v], 0, node[v]);
        if (o->d.momentum > 0)
            for (int v = 0; v < nv; v++) EMIT(param[v], 1, node[v]);
        if (o->d.centered)
            for (int v = 0; v < nv; v++) EMIT(param[v], 2, node[v]);
        break;
    }
#undef EMIT
    free(param);
    free(node);
    return n;
}

static float *slot_ptr(const fl_optimizer *o, const kslot *s) {
    const fl_param_ref *p = &o->params[s->param];
    return s->which == 0 ? p->s0 : s->which == 1 ? p->s1 : p->s2;
}

fl_status fl_keras_apply_state(fl_model *m, const fl_kstate *st, const char *src, bool require_opt, bool *opt_applied) {
    *opt_applied = false;
    /* check everything first */
    int v = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const fl_layer *l = m->layers[i];
        for (int k = 0; k < l->nw; k++, v++) {
            const fl_kvar *x = &st->vars[v];
            bool same = v < st->nvars && x->data && x->ndim == l->w[k]->ndim;
            for (int d = 0; same && d < x->ndim; d++) same = x->shape[d] == l->w[k]->shape[d];
            if (!same)
                return fl_error(FL_ERR_SHAPE, "%s: the weights read do not fit layer '%s' weight '%s'", src, l->name,
                                l->wname[k]);
        }
    }
    kslot *slots = NULL;
    bool opt_ok = false;
    if (st->has_opt && m->compiled && m->opt) {
        int n = keras_slots(m, NULL);
        if (n < 0) return fl_error(FL_ERR_NOMEM, "out of memory");
        slots = fl_calloc((size_t)n + 1, sizeof *slots, "optimizer state");
        if (!slots) return fl_last_status();
        keras_slots(m, slots);
        if (st->nslots == n) {
            opt_ok = true;
            for (int i = 0; i < n && opt_ok; i++) {
                const fl_node *w = slots[i].w;
                bool same = st->slots[i].ndim == w->ndim && slot_ptr(m->opt, &slots[i]);
                for (int d = 0; same && d < w->ndim; d++) same = st->slots[i].shape[d] == w->shape[d];
                opt_ok = same;
            }
        } else if (st->nslots == 0 && st->iterations == 0) {
            opt_ok = true; /* a Keras optimizer that was never built: fresh state */
            n = 0;
        }
        if (opt_ok && st->iterations < 0) opt_ok = false;
        if (!opt_ok && require_opt) {
            free(slots);
            return fl_error(FL_ERR_FORMAT, "%s: the optimizer state does not fit the compiled %s optimizer: the file "
                            "has %d slot variables, %s needs %d of the trainable weights' shapes", src,
                            fl_optimizer_name(m->opt), st->nslots, fl_optimizer_name(m->opt), n);
        }
    }
    /* apply */
    const fl_backend *be = m->g.be;
    v = 0;
    for (int i = 0; i < m->nlayers; i++) {
        fl_layer *l = m->layers[i];
        for (int k = 0; k < l->nw; k++, v++)
            be->upload(l->w[k]->val, st->vars[v].data, (size_t)fl_node_size(l->w[k]) * sizeof(float));
    }
    if (opt_ok) {
        fl_optimizer *o = m->opt;
        for (int i = 0; i < st->nslots; i++)
            be->upload(slot_ptr(o, &slots[i]), st->slots[i].data, (size_t)fl_node_size(slots[i].w) * sizeof(float));
        o->iterations = st->iterations;
        o->d.step = st->iterations;
        if (st->has_lr && st->learning_rate > 0) o->d.lr = st->learning_rate;
        m->g.step = st->iterations; /* dropout streams continue where they were */
        *opt_applied = true;
    }
    free(slots);
    return FL_OK;
}

/* ------------------------------------------------------------ writing */

static herr_t write_str_attr(hid_t obj, const char *name, const char *const *strs, int n, bool scalar) {
    hid_t sp, t;
    if (!scalar && n == 0) {
        /* h5py writes an empty list as an empty float64 array */
        hsize_t zero = 0;
        sp = H5Screate_simple(1, &zero, NULL);
        hid_t a = H5Acreate2(obj, name, H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
        H5Sclose(sp);
        if (a < 0) return -1;
        return H5Aclose(a);
    }
    t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    hsize_t dim = (hsize_t)n;
    sp = scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &dim, NULL);
    hid_t a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r = a >= 0 ? H5Awrite(a, t, strs) : -1;
    if (a >= 0) H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
    return r;
}

/* Creates dataset `name` (intermediate groups included) under loc. */
static herr_t write_f32(hid_t loc, const char *name, int ndim, const int64_t *shape, const float *data) {
    hsize_t dims[FL_MAX_DIMS];
    for (int i = 0; i < ndim; i++) dims[i] = (hsize_t)shape[i];
    hid_t sp = ndim ? H5Screate_simple(ndim, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    H5Pset_obj_track_times(dcpl, 0); /* no timestamps: the same model gives the same bytes */
    hid_t d = H5Dcreate2(loc, name, H5T_IEEE_F32LE, sp, lcpl, dcpl, H5P_DEFAULT);
    herr_t r = d >= 0 ? H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) : -1;
    if (d >= 0) H5Dclose(d);
    H5Pclose(dcpl);
    H5Pclose(lcpl);
    H5Sclose(sp);
    return r;
}

static herr_t write_i64_scalar(hid_t loc, const char *name, int64_t v) {
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    H5Pset_obj_track_times(dcpl, 0);
    hid_t d = H5Dcreate2(loc, name, H5T_STD_I64LE, sp, lcpl, dcpl, H5P_DEFAULT);
    herr_t r = d >= 0 ? H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v) : -1;
    if (d >= 0) H5Dclose(d);
    H5Pclose(dcpl);
    H5Pclose(lcpl);
    H5Sclose(sp);
    return r;
}

static hid_t make_group(hid_t loc, const char *path) {
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE), gcpl = H5Pcreate(H5P_GROUP_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    H5Pset_obj_track_times(gcpl, 0);
    hid_t g = H5Gcreate2(loc, path, lcpl, gcpl, H5P_DEFAULT);
    H5Pclose(gcpl);
    H5Pclose(lcpl);
    return g;
}

/* Host copies of every weight and slot, taken before HDF5 is entered. */
typedef struct host_copy { float **w; float **s; int nw, ns; kslot *slots; } host_copy;

static void host_free(host_copy *h) {
    for (int i = 0; i < h->nw; i++) free(h->w[i]);
    for (int i = 0; i < h->ns; i++) free(h->s[i]);
    free(h->w);
    free(h->s);
    free(h->slots);
}

static fl_status host_take(fl_model *m, host_copy *h) {
    memset(h, 0, sizeof *h);
    const fl_backend *be = m->g.be;
    int nw = total_weights(m);
    h->w = fl_calloc((size_t)nw + 1, sizeof *h->w, "weights");
    if (!h->w) return fl_last_status();
    for (int i = 0, v = 0; i < m->nlayers; i++)
        for (int k = 0; k < m->layers[i]->nw; k++, v++) {
            const fl_node *w = m->layers[i]->w[k];
            size_t bytes = (size_t)fl_node_size(w) * sizeof(float);
            h->w[v] = fl_malloc(bytes, "weights");
            if (!h->w[v]) { h->nw = v; host_free(h); return fl_last_status(); }
            be->download(h->w[v], w->val, bytes);
            h->nw = v + 1;
        }
    if (m->compiled && m->opt) {
        int ns = keras_slots(m, NULL);
        if (ns < 0) { host_free(h); return fl_error(FL_ERR_NOMEM, "out of memory"); }
        h->slots = fl_calloc((size_t)ns + 1, sizeof *h->slots, "optimizer state");
        h->s = fl_calloc((size_t)ns + 1, sizeof *h->s, "optimizer state");
        if (!h->slots || !h->s) { host_free(h); return fl_last_status(); }
        keras_slots(m, h->slots);
        for (int i = 0; i < ns; i++) {
            size_t bytes = (size_t)fl_node_size(h->slots[i].w) * sizeof(float);
            h->s[i] = fl_malloc(bytes, "optimizer state");
            if (!h->s[i]) { host_free(h); return fl_last_status(); }
            h->ns = i + 1;
            be->download(h->s[i], slot_ptr(m->opt, &h->slots[i]), bytes);
        }
    }
    return FL_OK;
}

static fl_status write_keras_layout(hid_t fid, const fl_model *m, const host_copy *h) {
    const char *mn = m->name;
    hid_t g = make_group(fid, "vars");
    if (g < 0 || write_str_attr(g, "name", &mn, 1, true) < 0) { if (g >= 0) H5Gclose(g); return -1; }
    H5Gclose(g);
    hid_t lg = make_group(fid, "layers");
    if (lg < 0) return -1;
    H5Gclose(lg);
    int v = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const fl_layer *l = m->layers[i];
        if (is_sequential_input(m, i)) continue;
        char kp[96], path[160];
        fl_keras_layer_path(m, i, kp, sizeof kp);
        snprintf(path, sizeof path, "layers/%s/vars", kp);
        hid_t vg = make_group(fid, path);
        const char *ln = l->name;
        if (vg < 0 || write_str_attr(vg, "name", &ln, 1, true) < 0) { if (vg >= 0) H5Gclose(vg); return -1; }
        for (int k = 0; k < l->nw; k++, v++) {
            char ds[16];
            snprintf(ds, sizeof ds, "%d", k);
            if (write_f32(vg, ds, l->w[k]->ndim, l->w[k]->shape, h->w[v]) < 0) { H5Gclose(vg); return -1; }
        }
        H5Gclose(vg);
    }
    if (m->compiled && m->opt) {
        hid_t og = make_group(fid, "optimizer/vars");
        const char *on = fl_keras_optimizer_name(m->opt);
        if (og < 0 || write_str_attr(og, "name", &on, 1, true) < 0 || write_i64_scalar(og, "0", m->opt->iterations) < 0 ||
            write_f32(og, "1", 0, NULL, &m->opt->d.lr) < 0) {
            if (og >= 0) H5Gclose(og);
            return -1;
        }
        for (int i = 0; i < h->ns; i++) {
            char ds[16];
            snprintf(ds, sizeof ds, "%d", i + 2);
            if (write_f32(og, ds, h->slots[i].w->ndim, h->slots[i].w->shape, h->s[i]) < 0) { H5Gclose(og); return -1; }
        }
        H5Gclose(og);
    }
    return 0;
}

static fl_status write_legacy_layout(hid_t fid, const fl_model *m, const host_copy *h) {
    char *cfg_text = NULL, *train_text = NULL;
    json_object *cfg = fl_keras_model_config(m, true);
    json_object *tc = fl_keras_training_config(m);
    cfg_text = cfg ? fl_keras_json_text(cfg) : NULL;
    train_text = tc ? fl_keras_json_text(tc) : NULL;
    json_object_put(cfg);
    json_object_put(tc);
    int r = -1;
    const char *ver = FL_KERAS_FORMAT_VERSION, *backend = "flynn";
    const char **names = NULL;
    if (!cfg_text || (tc && !train_text)) goto done;
    if (write_str_attr(fid, "keras_version", &ver, 1, true) < 0 || write_str_attr(fid, "backend", &backend, 1, true) < 0)
        goto done;
    const char *ct = cfg_text;
    if (write_str_attr(fid, "model_config", &ct, 1, true) < 0) goto done;
    if (train_text) {
        const char *tt = train_text;
        if (write_str_attr(fid, "training_config", &tt, 1, true) < 0) goto done;
    }
    hid_t mw = make_group(fid, "model_weights");
    if (mw < 0) goto done;
    names = calloc((size_t)m->nlayers + 1, sizeof *names);
    int nn = 0;
    for (int i = 0; names && i < m->nlayers; i++)
        if (!is_sequential_input(m, i)) names[nn++] = m->layers[i]->name;
    if (!names || write_str_attr(mw, "layer_names", names, nn, false) < 0 ||
        write_str_attr(mw, "backend", &backend, 1, true) < 0 || write_str_attr(mw, "keras_version", &ver, 1, true) < 0) {
        H5Gclose(mw);
        goto done;
    }
    int v = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const fl_layer *l = m->layers[i];
        if (is_sequential_input(m, i)) continue;
        hid_t lg = make_group(mw, l->name);
        if (lg < 0) { H5Gclose(mw); goto done; }
        char wn[FL_LAYER_MAX_WEIGHTS][160];
        const char *wp[FL_LAYER_MAX_WEIGHTS];
        for (int k = 0; k < l->nw; k++) {
            snprintf(wn[k], sizeof wn[k], "%s/%s", l->name, l->wname[k]);
            wp[k] = wn[k];
        }
        bool ok = write_str_attr(lg, "weight_names", wp, l->nw, false) >= 0;
        for (int k = 0; ok && k < l->nw; k++, v++) ok = write_f32(lg, wn[k], l->w[k]->ndim, l->w[k]->shape, h->w[v]) >= 0;
        H5Gclose(lg);
        if (!ok) { H5Gclose(mw); goto done; }
    }
    hid_t tg = make_group(mw, "top_level_model_weights");
    bool ok = tg >= 0 && write_str_attr(tg, "weight_names", NULL, 0, false) >= 0;
    if (tg >= 0) H5Gclose(tg);
    H5Gclose(mw);
    if (!ok) goto done;
    if (m->compiled && m->opt) {
        hid_t og = make_group(fid, "optimizer_weights");
        if (og < 0) goto done;
        int n = 2 + h->ns;
        char (*on)[192] = calloc((size_t)n, sizeof *on);
        const char **op = calloc((size_t)n, sizeof *op);
        const char *opt = fl_keras_optimizer_name(m->opt);
        static const char *slot_names[3][3] = {{"momentum", "velocity", ""}, {"momentum", "", ""},
                                               {"velocity", "momentum", "average_gradient"}};
        ok = on && op;
        for (int i = 0; ok && i < n; i++) {
            if (i == 0) snprintf(on[i], sizeof on[i], "%s/iteration", opt);
            else if (i == 1) snprintf(on[i], sizeof on[i], "%s/learning_rate", opt);
            else {
                const kslot *s = &h->slots[i - 2];
                int row = m->opt->code == FL_OPT_SGD ? 1 : m->opt->code == FL_OPT_RMSPROP ? 2 : 0;
                const char *ln = "?", *wname = "?";
                for (int li = 0; li < m->nlayers; li++)
                    for (int k = 0; k < m->layers[li]->nw; k++)
                        if (m->layers[li]->w[k] == s->w) { ln = m->layers[li]->name; wname = m->layers[li]->wname[k]; }
                snprintf(on[i], sizeof on[i], "%s/%s_%s_%s", opt, ln, wname, slot_names[row][s->which]);
            }
            op[i] = on[i];
        }
        ok = ok && write_str_attr(og, "weight_names", op, n, false) >= 0 &&
             write_i64_scalar(og, on[0], m->opt->iterations) >= 0 && write_f32(og, on[1], 0, NULL, &m->opt->d.lr) >= 0;
        for (int i = 0; ok && i < h->ns; i++)
            ok = write_f32(og, on[i + 2], h->slots[i].w->ndim, h->slots[i].w->shape, h->s[i]) >= 0;
        free(on);
        free(op);
        H5Gclose(og);
        if (!ok) goto done;
    }
    r = 0;
done:
    free(names);
    free(cfg_text);
    free(train_text);
    return r < 0 ? FL_ERR_IO : FL_OK;
}

fl_status fl_keras_write_h5(fl_model *m, fl_kformat fmt, void **data, size_t *len) {
    *data = NULL;
    *len = 0;
    host_copy h;
    FL_TRY(host_take(m, &h));
    h5guard g;
    h5_enter(&g);
    fl_status s = FL_OK;
    char name[64];
    snprintf(name, sizeof name, "flynn-out-%lu", ++h5_image_counter);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    hid_t fid = -1;
    if (fapl >= 0 && H5Pset_fapl_core(fapl, 1 << 20, 0) >= 0 && H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) >= 0)
        fid = H5Fcreate(name, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    if (fid < 0) {
        s = h5_fail(FL_ERR_IO, "HDF5", "cannot create an in-memory file");
    } else {
        bool ok = fmt == FL_KFMT_KERAS ? write_keras_layout(fid, m, &h) == 0 : write_legacy_layout(fid, m, &h) == FL_OK;
        if (ok && H5Fflush(fid, H5F_SCOPE_GLOBAL) >= 0) {
            ssize_t size = H5Fget_file_image(fid, NULL, 0);
            void *buf = size > 0 ? malloc((size_t)size) : NULL;
            if (buf && H5Fget_file_image(fid, buf, (size_t)size) == size) {
                *data = buf;
                *len = (size_t)size;
            } else {
                free(buf);
                s = buf ? h5_fail(FL_ERR_IO, "HDF5", "cannot take the file image")
                        : fl_error(FL_ERR_NOMEM, "out of memory for the weights file (%zd bytes)", size);
            }
        } else if (fl_last_status() != FL_ERR_NOMEM) {
            s = h5_fail(FL_ERR_IO, "HDF5", "cannot write the weights");
        } else {
            s = FL_ERR_NOMEM;
        }
        H5Fclose(fid);
    }
    h5_leave(&g);
    host_free(&h);
    return s;
}
