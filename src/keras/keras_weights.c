/*
 * keras_weights.c — the HDF5 side of Keras files, through flynn's own HDF5
 * reader and writer (keras/h5.h; no libhdf5).
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
 * and shapes) before anything is applied. Every dataset's shape is checked
 * against what the model needs before its data is read, optimizer slots
 * included (count and shapes against the compiled optimizer), so loading
 * allocates at most the file image plus the model's weights and optimizer
 * state once (plus two chunk buffers for a compressed dataset);
 * fl_keras_apply_state then applies everything or nothing. A model built for
 * the load (fl_load_model) has its weights read straight into it (direct):
 * a failed load frees it, so there is nothing to keep.
 */
#include "keras/keras.h"
#include "keras/h5.h"
#include "core/error.h"
#include "core/tensor.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------ files */

struct fl_h5file {
    fl_h5 *r;
    void *own; /* the image when read from a path */
    char src[512];
};

fl_h5file *fl_h5_open(const void *data, size_t len, const char *src) {
    fl_h5file *f = fl_calloc(1, sizeof *f, "HDF5 file");
    if (!f) return NULL;
    snprintf(f->src, sizeof f->src, "%s", src);
    if (!data) {
        FILE *fp = fopen(src, "rb");
        struct stat st;
        if (!fp || fstat(fileno(fp), &st) != 0) {
            fl_error(FL_ERR_IO, "cannot open %s: %s", src, strerror(errno));
            if (fp) fclose(fp);
            free(f);
            return NULL;
        }
        if ((int64_t)st.st_size > FL_KERAS_MAX_WEIGHTS) {
            fl_error(FL_ERR_FORMAT, "%s: %lld bytes, more than the limit of %lld", src, (long long)st.st_size,
                     (long long)FL_KERAS_MAX_WEIGHTS);
            fclose(fp);
            free(f);
            return NULL;
        }
        len = (size_t)st.st_size;
        f->own = fl_malloc(len ? len : 1, "HDF5 file");
        if (!f->own || fread(f->own, 1, len, fp) != len) {
            if (f->own) fl_error(FL_ERR_IO, "cannot read %s: %s", src, ferror(fp) ? strerror(errno) : "short read");
            fclose(fp);
            free(f->own);
            free(f);
            return NULL;
        }
        fclose(fp);
        data = f->own;
    }
    f->r = fl_h5_read_open(data, len, src);
    if (!f->r) {
        free(f->own);
        free(f);
        return NULL;
    }
    return f;
}

void fl_h5_release_as_read(fl_h5file *f) { fl_h5_release_read(f->r); }

void fl_h5_close(fl_h5file *f) {
    if (!f) return;
    fl_h5_read_close(f->r);
    free(f->own);
    free(f);
}

/* ------------------------------------------------------------ attributes */

/* A string attribute: count, -2 when absent, -1 on error (message set). */
static int read_str_attr(fl_h5file *f, uint64_t obj, const char *name, char ***out) {
    return fl_h5_attr_strings(f->r, obj, name, out);
}

static void free_strs(char **s) { fl_h5_free_strings(s); }

/* A list attribute that Keras may split into name0, name1, ... when large. */
static int read_str_list_attr(fl_h5file *f, uint64_t obj, const char *name, char ***out) {
    int n = read_str_attr(f, obj, name, out);
    if (n != -2) return n;
    char **all = NULL;
    int total = 0;
    for (int chunk = 0;; chunk++) {
        char key[128];
        snprintf(key, sizeof key, "%s%d", name, chunk);
        char **part = NULL;
        int k = read_str_attr(f, obj, key, &part);
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
    char **s = NULL;
    int n = read_str_attr(f, fl_h5_root(f->r), name, &s);
    if (n <= 0) { free_strs(s); if (n == -2 || n == 0) fl_clear_error(); return NULL; }
    char *r = s[0];
    s[0] = NULL;
    for (int i = 1; s[i]; i++) free(s[i]);
    free(s);
    return r;
}

bool fl_h5_is_legacy(fl_h5file *f) {
    /* a full model: /model_weights; tf.keras save_weights("x.h5"): the same group at the root */
    uint64_t o;
    if (fl_h5_find(f->r, fl_h5_root(f->r), "model_weights", &o) == 1) return true;
    char **s = NULL;
    int n = read_str_attr(f, fl_h5_root(f->r), "layer_names", &s);
    free_strs(s);
    fl_clear_error();
    return n >= 0;
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


/* ------------------------------------------------------------ reading */

void fl_kstate_free(fl_kstate *s) {
    if (!s) return;
    for (int i = 0; i < s->nvars; i++)
        if (!s->vars[i].borrowed) free(s->vars[i].data);
    for (int i = 0; i < s->nslots; i++) free(s->slots[i].data);
    free(s->vars);
    free(s->slots);
    memset(s, 0, sizeof *s);
}

/* 1 found, 0 absent, -1 error (message set). */
static int find(fl_h5file *f, uint64_t loc, const char *path, uint64_t *out) { return fl_h5_find(f->r, loc, path, out); }

/* The shape of dataset `name` of loc, with the message naming `who`. */
static fl_status open_dataset(fl_h5file *f, uint64_t loc, const char *name, const char *who, fl_h5_dataset *d,
                              fl_kvar *shape) {
    const char *src = f->src;
    uint64_t obj;
    int r = find(f, loc, name, &obj);
    if (r < 0) return fl_last_status();
    if (r == 0) return fl_error(FL_ERR_FORMAT, "%s: %s (dataset %s) is missing", src, who, name);
    char what[512];
    snprintf(what, sizeof what, "%s (dataset %s)", who, name);
    if (fl_h5_dataset_open(f->r, obj, what, d) != 0) return fl_last_status();
    if (d->type.cls != FL_H5_FLOAT && d->type.cls != FL_H5_INT)
        return fl_error(FL_ERR_FORMAT, "%s: %s is not numeric (HDF5 type class %d)", src, what, d->type.cls);
    if (d->ndim > FL_MAX_DIMS) return fl_error(FL_ERR_UNSUPPORTED, "%s: %s has %d dimensions", src, what, d->ndim);
    memset(shape, 0, sizeof *shape);
    shape->ndim = d->ndim;
    for (int i = 0; i < d->ndim; i++) {
        if (d->dims[i] > ((uint64_t)1 << 40) || d->npoints > (uint64_t)FL_KERAS_MAX_WEIGHTS / 4)
            return fl_error(FL_ERR_FORMAT, "%s: %s is larger than %lld bytes", src, what, (long long)FL_KERAS_MAX_WEIGHTS);
        shape->shape[i] = (int64_t)d->dims[i];
    }
    return FL_OK;
}

static bool same_shape(const fl_kvar *a, const fl_kvar *b) {
    bool same = a->ndim == b->ndim;
    for (int i = 0; same && i < a->ndim; i++) same = a->shape[i] == b->shape[i];
    return same;
}

/* Reads the data of an opened dataset as float32 into out->data. */
static fl_status read_data(fl_h5file *f, const fl_h5_dataset *d, fl_kvar *out) {
    int64_t count = fl_shape_prod(out->ndim, out->shape);
    float *data = out->into ? out->into : fl_malloc((size_t)(count > 0 ? count : 1) * sizeof(float), "weights");
    if (!data) return fl_last_status();
    if (count > 0 && fl_h5_dataset_read(f->r, d, false, data, (uint64_t)count * sizeof(float)) != 0) {
        if (!out->into) free(data);
        return fl_last_status();
    }
    out->data = data;
    out->borrowed = out->into != NULL;
    return FL_OK;
}

/* Reads dataset `name` of loc as float32. With want (ndim >= 0) the shape
 * must equal it, checked before anything is allocated; the message then
 * names `who` and both shapes. */
static fl_status read_dataset(fl_h5file *f, uint64_t loc, const char *name, const char *who, const fl_kvar *want,
                              fl_kvar *out) {
    memset(out, 0, sizeof *out);
    fl_h5_dataset d;
    FL_TRY(open_dataset(f, loc, name, who, &d, out));
    if (want && want->ndim >= 0 && !same_shape(out, want)) {
        char a[128], b[128];
        return fl_error(FL_ERR_SHAPE, "%s: %s (dataset %s) has shape %s, expected %s", f->src, who, name,
                        fl_shape_str(out->ndim, out->shape, a, sizeof a), fl_shape_str(want->ndim, want->shape, b, sizeof b));
    }
    out->into = want && want->ndim >= 0 ? want->into : NULL; /* (only once the shape is the weight's) */
    return read_data(f, &d, out);
}

/* A one-element dataset as int64 (as_int) or float32 into *v. */
static fl_status read_scalar(fl_h5file *f, uint64_t loc, const char *name, const char *who, bool as_int, void *v) {
    fl_h5_dataset d;
    fl_kvar k;
    FL_TRY(open_dataset(f, loc, name, who, &d, &k));
    if (d.npoints != 1) return fl_error(FL_ERR_FORMAT, "%s: %s is not a scalar", f->src, who);
    size_t size = as_int ? sizeof(int64_t) : sizeof(float);
    return fl_h5_dataset_read(f->r, &d, as_int, v, size) == 0 ? FL_OK : fl_last_status();
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

/* The shape weight w needs; direct: read into w itself */
static fl_kvar want_of(const fl_node *w, bool direct) {
    fl_kvar k = {.ndim = w->ndim, .into = direct ? w->val : NULL};
    for (int i = 0; i < w->ndim; i++) k.shape[i] = w->shape[i];
    return k;
}

static int count_links(fl_h5file *f, uint64_t g, const char *path) {
    char **names = NULL;
    int n = fl_h5_links(f->r, g, path, &names);
    free_strs(names);
    return n;
}

static int total_weights(const fl_model *m) {
    int n = 0;
    for (int i = 0; i < m->nlayers; i++) n += m->layers[i]->nw;
    return n;
}

/* The weights of a layer made of Keras sub-layers (MultiHeadAttention's
 * query_dense ..., TimeDistributed's layer): weight k at
 * layers/<kp>/<wsub[k]>/vars/<widx[k]>, each sub-group holding exactly the
 * weights flynn has there. */
static fl_status read_sub_weights(fl_h5file *f, uint64_t own, const char *kp, const fl_layer *l, bool direct,
                                  fl_kvar *out) {
    (void)own;
    uint64_t root = fl_h5_root(f->r);
    for (int k = 0; k < l->nw; k++) {
        char path[256], ds[16], who[256];
        snprintf(path, sizeof path, "layers/%s/%s/vars", kp, l->wsub[k]);
        uint64_t g;
        int r = find(f, root, path, &g);
        if (r < 0) return fl_last_status();
        if (r == 0)
            return fl_error(FL_ERR_FORMAT, "%s: the weights of layer '%s' (%s) are missing (no group /%s)", f->src,
                            l->name, fl_layer_kind_class(l->kind), path);
        if (k == 0 || strcmp(l->wsub[k - 1], l->wsub[k]) != 0) {
            int want = 0;
            for (int j = 0; j < l->nw; j++) want += strcmp(l->wsub[j], l->wsub[k]) == 0;
            int n = count_links(f, g, path);
            if (n < 0) return fl_last_status();
            if (n != want)
                return fl_error(FL_ERR_FORMAT, "%s: layer '%s' (%s) has %d weights in %s, the file has %d in /%s",
                                f->src, l->name, fl_layer_kind_class(l->kind), want, l->wsub[k], n, path);
        }
        snprintf(ds, sizeof ds, "%d", l->widx[k]);
        snprintf(who, sizeof who, "layer '%s' (%s) weight '%s'", l->name, fl_layer_kind_class(l->kind), l->wname[k]);
        fl_kvar want = want_of(l->w[k], direct);
        FL_TRY(read_dataset(f, g, ds, who, &want, &out[k]));
    }
    return FL_OK;
}

/* Where Keras 3 keeps a layer's weights below layers/<path>/: one vars
 * group, or, for layers that own sublayers, one per sublayer ("cell/vars"
 * for SimpleRNN, LSTM, GRU; Bidirectional's "forward_layer/cell/vars" and
 * "backward_layer/cell/vars"), each holding count weights from first on.
 * Returns the number of groups. */
typedef struct kgroup { const char *sub; int first, count; } kgroup;
static int keras_var_groups(const fl_layer *l, kgroup *g) {
    switch (l->kind) {
    case FL_L_SIMPLE_RNN: case FL_L_LSTM: case FL_L_GRU:
        g[0] = (kgroup){"cell/", 0, l->nw};
        return 1;
    case FL_L_BIDIRECTIONAL:
        g[0] = (kgroup){"forward_layer/cell/", 0, l->nw / 2};
        g[1] = (kgroup){"backward_layer/cell/", l->nw / 2, l->nw - l->nw / 2};
        return 2;
    default:
        g[0] = (kgroup){"", 0, l->nw};
        return 1;
    }
}

/* The legacy .h5 name of weight k: "<layer>/<weight>", and for recurrent
 * layers Keras's "<layer>/<cell>/<weight>" ("lstm/lstm_cell/kernel",
 * "bidirectional/forward_lstm/lstm_cell/kernel"). */
static void legacy_weight_name(const fl_layer *l, int k, char *buf, size_t len) {
    const fl_layer *r = l->kind == FL_L_BIDIRECTIONAL ? (k < l->nw / 2 ? l->a.bidi.fwd : l->a.bidi.bwd) : l;
    const char *w = l->wname[k], *slash = strchr(w, '/');
    if (slash && l->kind == FL_L_BIDIRECTIONAL) w = slash + 1; /* "forward/kernel"; MultiHeadAttention keeps "query/kernel" */
    const char *cell = r->kind == FL_L_LSTM ? "lstm_cell" : r->kind == FL_L_GRU ? "gru_cell" : "simple_rnn_cell";
    if (l->kind == FL_L_BIDIRECTIONAL) snprintf(buf, len, "%s/%s/%s/%s", l->name, r->name, cell, w);
    else if (r->kind == FL_L_SIMPLE_RNN || r->kind == FL_L_LSTM || r->kind == FL_L_GRU)
        snprintf(buf, len, "%s/%s/%s", l->name, cell, w);
    else snprintf(buf, len, "%s/%s", l->name, w);
}

/* Keras 3's weight.path: the legacy name, under the model's name in a
 * Sequential model ("sequential/dense/kernel"; a Functional model's weights
 * are "dense/kernel"), as Keras 3.15 builds a Sequential's layers in its scope. */
void fl_keras_weight_path(const fl_model *m, int i, int k, char *buf, size_t n) {
    char w[256];
    legacy_weight_name(m->layers[i], k, w, sizeof w);
    if (m->functional) snprintf(buf, n, "%s", w);
    else snprintf(buf, n, "%s/%s", m->name, w);
}

/* Keras 3 layout: layers/<path>/vars/<i>. */
static fl_status read_keras_layers(fl_h5file *f, const fl_model *m, fl_kstate *st) {
    const char *src = f->src;
    uint64_t root = fl_h5_root(f->r);
    int v = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const fl_layer *l = m->layers[i];
        if (is_sequential_input(m, i) || fl_layer_kind_is_op(l->kind)) continue; /* operations: no group */
        char kp[96], path[256], who[256];
        fl_keras_layer_path(m, i, kp, sizeof kp);
        if (l->nw > 0 && l->wsub[0]) { /* sub-layers' weights (MultiHeadAttention, TimeDistributed) */
            FL_TRY(read_sub_weights(f, 0, kp, l, st->direct, &st->vars[v]));
            v += l->nw;
            continue;
        }
        kgroup grp[2];
        int ng = keras_var_groups(l, grp);
        for (int gi = 0; gi < ng; gi++) {
            snprintf(path, sizeof path, "layers/%s/%svars", kp, grp[gi].sub);
            uint64_t g;
            int r = find(f, root, path, &g);
            if (r == 0) { /* Keras 2.13 .keras files */
                char old[256];
                snprintf(old, sizeof old, "_layer_checkpoint_dependencies/%s/%svars", kp, grp[gi].sub);
                r = find(f, root, old, &g);
                if (r == 1) snprintf(path, sizeof path, "%s", old);
            }
            if (r < 0) return fl_last_status();
            if (r == 0) {
                if (grp[gi].count == 0) continue;
                return fl_error(FL_ERR_FORMAT, "%s: the weights of layer '%s' (%s) are missing (no group /%s)", src,
                                l->name, fl_layer_kind_class(l->kind), path);
            }
            int n = count_links(f, g, path);
            if (n < 0) return fl_last_status();
            if (n != grp[gi].count)
                return fl_error(FL_ERR_FORMAT, "%s: layer '%s' (%s) has %d weights, the file has %d in /%s", src,
                                l->name, fl_layer_kind_class(l->kind), grp[gi].count, n, path);
            for (int k = grp[gi].first; k < grp[gi].first + grp[gi].count; k++, v++) {
                char ds[16];
                snprintf(ds, sizeof ds, "%d", k - grp[gi].first);
                snprintf(who, sizeof who, "layer '%s' (%s) weight '%s'", l->name, fl_layer_kind_class(l->kind),
                         l->wname[k]);
                fl_kvar want = want_of(l->w[k], st->direct);
                FL_TRY(read_dataset(f, g, ds, who, &want, &st->vars[v]));
            }
        }
    }
    return FL_OK;
}

/* The slot datasets names[0..n-1] of loc: their shapes first, checked
 * against the compiled optimizer's slots (count and shapes); their data only
 * when every one fits. A mismatch is left for fl_keras_apply_state to report
 * (or skip), with the shapes read and no data. */
static fl_status read_slots(fl_h5file *f, const fl_model *m, uint64_t loc, char **names, int n, bool legacy,
                            fl_kstate *st) {
    if (n <= 0) return FL_OK;
    st->slots = fl_calloc((size_t)n, sizeof *st->slots, "optimizer state");
    if (!st->slots) return fl_last_status();
    fl_h5_dataset *d = fl_calloc((size_t)n, sizeof *d, "optimizer state");
    if (!d) return fl_last_status();
    int ns = m->compiled && m->opt ? keras_slots(m, NULL) : 0;
    kslot *slots = ns > 0 ? fl_calloc((size_t)ns, sizeof *slots, "optimizer state") : NULL;
    fl_status s = ns < 0 ? fl_error(FL_ERR_NOMEM, "out of memory") : ns > 0 && !slots ? fl_last_status() : FL_OK;
    if (s == FL_OK && slots) keras_slots(m, slots);
    bool fits = ns == n;
    for (int i = 0; s == FL_OK && i < n; i++) {
        char who[300];
        if (legacy) snprintf(who, sizeof who, "optimizer weight '%s'", names[i]);
        else snprintf(who, sizeof who, "optimizer variable %d", i + 2);
        s = open_dataset(f, loc, names[i], who, &d[i], &st->slots[i]);
        if (s == FL_OK) st->nslots++;
        if (s == FL_OK && fits) {
            fl_kvar want = want_of(slots[i].w, false); /* (slots: copies, applied only if all fit) */
            fits = same_shape(&st->slots[i], &want);
        }
    }
    for (int i = 0; s == FL_OK && fits && i < n; i++) s = read_data(f, &d[i], &st->slots[i]);
    free(slots);
    free(d);
    return s;
}

static fl_status read_keras_optimizer(fl_h5file *f, const fl_model *m, fl_kstate *st) {
    uint64_t g;
    int r = find(f, fl_h5_root(f->r), "optimizer/vars", &g);
    if (r <= 0) return r < 0 ? fl_last_status() : FL_OK;
    int n = count_links(f, g, "optimizer/vars");
    if (n < 0) return fl_last_status();
    if (n < 1) return FL_OK;
    /* with a learning-rate schedule Keras has no learning_rate variable: the slots follow the iterations */
    int first = m->opt && fl_optimizer_schedule(m->opt) ? 1 : 2;
    fl_status s = read_scalar(f, g, "0", "optimizer iterations (optimizer/vars/0)", true, &st->iterations);
    if (s == FL_OK && n >= 2 && first == 2) {
        s = read_scalar(f, g, "1", "optimizer learning rate (optimizer/vars/1)", false, &st->learning_rate);
        st->has_lr = s == FL_OK;
    }
    if (s == FL_OK && n > first) {
        char **names = fl_calloc((size_t)n, sizeof *names, "optimizer state");
        char (*buf)[16] = fl_calloc((size_t)n, sizeof *buf, "optimizer state");
        if (!names || !buf) s = fl_last_status();
        for (int i = first; s == FL_OK && i < n; i++) {
            snprintf(buf[i], sizeof buf[i], "%d", i);
            names[i - first] = buf[i];
        }
        if (s == FL_OK) s = read_slots(f, m, g, names, n - first, false, st);
        free(names);
        free(buf);
    }
    if (s == FL_OK) st->has_opt = true;
    return s;
}

/* Legacy layout: model_weights/<layer>/<weight name>. */
static fl_status read_legacy_layers(fl_h5file *f, const fl_model *m, fl_kstate *st) {
    const char *src = f->src;
    uint64_t root = fl_h5_root(f->r), mw;
    int r = find(f, root, "model_weights", &mw);
    if (r < 0) return fl_last_status();
    const char *where = r == 1 ? "model_weights" : "/";
    if (r == 0) mw = root;
    fl_status s = FL_OK;
    int v = 0;
    for (int i = 0; i < m->nlayers && s == FL_OK; i++) {
        const fl_layer *l = m->layers[i];
        if (l->nw == 0) continue;
        uint64_t lg;
        int e = find(f, mw, l->name, &lg);
        if (e < 0) return fl_last_status();
        if (e == 0) {
            s = fl_error(FL_ERR_FORMAT, "%s: the weights of layer '%s' (%s) are missing (no group %s%s%s)", src,
                         l->name, fl_layer_kind_class(l->kind), where[1] ? "/model_weights" : "", "/", l->name);
            break;
        }
        char **names = NULL;
        int n = read_str_list_attr(f, lg, "weight_names", &names);
        if (n == -2) n = 0;
        if (n >= 0 && n != l->nw)
            s = fl_error(FL_ERR_FORMAT, "%s: layer '%s' (%s) has %d weights, the file has %d in %s/%s", src, l->name,
                         fl_layer_kind_class(l->kind), l->nw, n, where[1] ? "/model_weights" : "", l->name);
        else if (n < 0)
            s = fl_last_status();
        for (int k = 0; s == FL_OK && k < l->nw; k++, v++) {
            char who[256];
            snprintf(who, sizeof who, "layer '%s' (%s) weight '%s'", l->name, fl_layer_kind_class(l->kind), l->wname[k]);
            fl_kvar want = want_of(l->w[k], st->direct);
            s = read_dataset(f, lg, names[k], who, &want, &st->vars[v]);
        }
        free_strs(names);
    }
    return s;
}

static fl_status read_legacy_optimizer(fl_h5file *f, const fl_model *m, fl_kstate *st) {
    uint64_t root = fl_h5_root(f->r), og;
    int r = find(f, root, "optimizer_weights", &og);
    if (r <= 0) return r < 0 ? fl_last_status() : FL_OK;
    /* tf.keras 2 orders its optimizer weights differently (all m, then all v,
     * named by variable): only Keras 3 files are read */
    char **ver = NULL;
    int nv = read_str_attr(f, root, "keras_version", &ver);
    bool k3 = nv > 0 && ver[0][0] == '3';
    free_strs(ver);
    if (!k3) { fl_clear_error(); return FL_OK; }
    char **names = NULL;
    int n = read_str_list_attr(f, og, "weight_names", &names);
    fl_status s = FL_OK;
    if (n < 0 && n != -2) s = fl_last_status();
    if (s == FL_OK && n >= 1) s = read_scalar(f, og, names[0], "optimizer iterations", true, &st->iterations);
    /* ".../learning_rate": absent with a learning-rate schedule */
    size_t l1 = n >= 2 ? strlen(names[1]) : 0;
    int first = l1 >= 13 && strcmp(names[1] + l1 - 13, "learning_rate") == 0 ? 2 : 1;
    if (s == FL_OK && n >= 2 && first == 2) {
        s = read_scalar(f, og, names[1], "optimizer learning rate", false, &st->learning_rate);
        st->has_lr = s == FL_OK;
    }
    if (s == FL_OK && n > first) s = read_slots(f, m, og, names + first, n - first, true, st);
    if (s == FL_OK && n >= 1) st->has_opt = true;
    free_strs(names);
    return s;
}

fl_status fl_keras_read_state(fl_h5file *f, fl_kformat fmt, const fl_model *m, bool want_optimizer, bool direct,
                              fl_kstate *out) {
    memset(out, 0, sizeof *out);
    out->direct = direct && m->g.be->host_memory;
    int nw = total_weights(m);
    out->vars = fl_calloc((size_t)nw + 1, sizeof *out->vars, "weights");
    if (!out->vars) return fl_last_status();
    out->nvars = nw;
    fl_status s = fmt == FL_KFMT_KERAS ? read_keras_layers(f, m, out) : read_legacy_layers(f, m, out);
    if (s == FL_OK && want_optimizer)
        s = fmt == FL_KFMT_KERAS ? read_keras_optimizer(f, m, out) : read_legacy_optimizer(f, m, out);
    if (s != FL_OK) fl_kstate_free(out);
    return s;
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
                bool same = st->slots[i].data && st->slots[i].ndim == w->ndim && slot_ptr(m->opt, &slots[i]);
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
            if (st->vars[v].data != l->w[k]->val) /* (read straight into it: direct) */
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


/* ------------------------------------------------------------ writing */

static int write_str_attr(fl_h5w *w, int obj, const char *name, const char *const *strs, int n, bool scalar) {
    return fl_h5w_attr_strings(w, obj, name, strs, n, scalar);
}

static int write_f32(fl_h5w *w, int loc, const char *name, int ndim, const int64_t *shape, const float *data) {
    return fl_h5w_dataset(w, loc, name, false, ndim, shape, data) < 0 ? -1 : 0;
}

static int write_i64_scalar(fl_h5w *w, int loc, const char *name, int64_t v) {
    return fl_h5w_dataset(w, loc, name, true, 0, NULL, &v) < 0 ? -1 : 0;
}

static int write_keras_layout(fl_h5w *w, const fl_model *m, const host_copy *h) {
    const char *mn = m->name;
    int g = fl_h5w_group(w, 0, "vars");
    if (g < 0 || write_str_attr(w, g, "name", &mn, 1, true) < 0) return -1;
    if (fl_h5w_group(w, 0, "layers") < 0) return -1;
    int v = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const fl_layer *l = m->layers[i];
        if (is_sequential_input(m, i) || fl_layer_kind_is_op(l->kind)) continue; /* operations: no group */
        char kp[96], path[160];
        fl_keras_layer_path(m, i, kp, sizeof kp);
        if (l->nw > 0 && l->wsub[0]) { /* sub-layers' weights (MultiHeadAttention, TimeDistributed) */
            snprintf(path, sizeof path, "layers/%s/vars", kp);
            int vg = fl_h5w_group(w, 0, path);
            const char *ln = l->name;
            if (vg < 0 || write_str_attr(w, vg, "name", &ln, 1, true) < 0) return -1;
            if (l->kind == FL_L_MHA) { /* Keras's empty sub-objects too */
                char sub[224];
                snprintf(sub, sizeof sub, "layers/%s/_dropout_layer/vars", kp);
                if (fl_h5w_group(w, 0, sub) < 0) return -1;
                snprintf(sub, sizeof sub, "layers/%s/_softmax/vars", kp);
                if (fl_h5w_group(w, 0, sub) < 0) return -1;
            }
            for (int k = 0; k < l->nw; k++, v++) {
                char ds[16];
                int at = vg;
                snprintf(ds, sizeof ds, "%d", l->wsub[k] ? l->widx[k] : k);
                if (l->wsub[k]) {
                    char sub[224];
                    snprintf(sub, sizeof sub, "layers/%s/%s/vars", kp, l->wsub[k]);
                    at = fl_h5w_group(w, 0, sub);
                    if (at < 0) return -1;
                }
                if (write_f32(w, at, ds, l->w[k]->ndim, l->w[k]->shape, h->w[v]) < 0) return -1;
            }
            continue;
        }
        kgroup grp[2];
        int ng = keras_var_groups(l, grp);
        if (grp[0].sub[0]) { /* the layer's own (empty) vars and its sublayers', named as Keras does */
            snprintf(path, sizeof path, "layers/%s/vars", kp);
            int vg = fl_h5w_group(w, 0, path);
            const char *ln = l->name;
            if (vg < 0 || write_str_attr(w, vg, "name", &ln, 1, true) < 0) return -1;
        }
        for (int gi = 0; gi < ng; gi++) {
            const fl_layer *r = l->kind == FL_L_BIDIRECTIONAL ? (gi ? l->a.bidi.bwd : l->a.bidi.fwd) : l;
            if (l->kind == FL_L_BIDIRECTIONAL) {
                snprintf(path, sizeof path, "layers/%s/%s_layer/vars", kp, gi ? "backward" : "forward");
                int vg = fl_h5w_group(w, 0, path);
                const char *ln = r->name;
                if (vg < 0 || write_str_attr(w, vg, "name", &ln, 1, true) < 0) return -1;
            }
            snprintf(path, sizeof path, "layers/%s/%svars", kp, grp[gi].sub);
            int vg = fl_h5w_group(w, 0, path);
            const char *ln = !grp[gi].sub[0] ? l->name : r->kind == FL_L_LSTM ? "lstm_cell"
                             : r->kind == FL_L_GRU ? "gru_cell" : "simple_rnn_cell";
            if (vg < 0 || write_str_attr(w, vg, "name", &ln, 1, true) < 0) return -1;
            for (int k = grp[gi].first; k < grp[gi].first + grp[gi].count; k++, v++) {
                char ds[16];
                snprintf(ds, sizeof ds, "%d", k - grp[gi].first);
                if (write_f32(w, vg, ds, l->w[k]->ndim, l->w[k]->shape, h->w[v]) < 0) return -1;
            }
        }
    }
    if (m->compiled && m->opt) {
        int og = fl_h5w_group(w, 0, "optimizer/vars");
        const char *on = fl_keras_optimizer_name(m->opt);
        /* with a learning-rate schedule Keras has no learning_rate variable */
        int first = fl_optimizer_schedule(m->opt) ? 1 : 2;
        if (og < 0 || write_str_attr(w, og, "name", &on, 1, true) < 0 || write_i64_scalar(w, og, "0", m->opt->iterations) < 0 ||
            (first == 2 && write_f32(w, og, "1", 0, NULL, &m->opt->d.lr) < 0))
            return -1;
        for (int i = 0; i < h->ns; i++) {
            char ds[16];
            snprintf(ds, sizeof ds, "%d", i + first);
            if (write_f32(w, og, ds, h->slots[i].w->ndim, h->slots[i].w->shape, h->s[i]) < 0) return -1;
        }
    }
    return 0;
}

static int write_legacy_layout(fl_h5w *w, const fl_model *m, const host_copy *h) {
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
    char (*on)[192] = NULL;
    const char **op = NULL;
    if (!cfg_text || (tc && !train_text)) { fl_error(FL_ERR_NOMEM, "out of memory writing the model config"); goto done; }
    if (write_str_attr(w, 0, "keras_version", &ver, 1, true) < 0 || write_str_attr(w, 0, "backend", &backend, 1, true) < 0)
        goto done;
    const char *ct = cfg_text;
    if (write_str_attr(w, 0, "model_config", &ct, 1, true) < 0) goto done;
    if (train_text) {
        const char *tt = train_text;
        if (write_str_attr(w, 0, "training_config", &tt, 1, true) < 0) goto done;
    }
    int mw = fl_h5w_group(w, 0, "model_weights");
    if (mw < 0) goto done;
    names = calloc((size_t)m->nlayers + 1, sizeof *names);
    if (!names) { fl_error(FL_ERR_NOMEM, "out of memory"); goto done; }
    int nn = 0;
    for (int i = 0; i < m->nlayers; i++)
        if (!is_sequential_input(m, i) && !fl_layer_kind_is_op(m->layers[i]->kind)) names[nn++] = m->layers[i]->name;
    if (write_str_attr(w, mw, "layer_names", names, nn, false) < 0 || write_str_attr(w, mw, "backend", &backend, 1, true) < 0 ||
        write_str_attr(w, mw, "keras_version", &ver, 1, true) < 0)
        goto done;
    int v = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const fl_layer *l = m->layers[i];
        if (is_sequential_input(m, i) || fl_layer_kind_is_op(l->kind)) continue; /* operations: no group */
        int lg = fl_h5w_group(w, mw, l->name);
        if (lg < 0) goto done;
        char wn[FL_LAYER_MAX_WEIGHTS][256];
        const char *wp[FL_LAYER_MAX_WEIGHTS];
        for (int k = 0; k < l->nw; k++) {
            legacy_weight_name(l, k, wn[k], sizeof wn[k]);
            wp[k] = wn[k];
        }
        if (write_str_attr(w, lg, "weight_names", wp, l->nw, false) < 0) goto done;
        for (int k = 0; k < l->nw; k++, v++)
            if (write_f32(w, lg, wn[k], l->w[k]->ndim, l->w[k]->shape, h->w[v]) < 0) goto done;
    }
    int tg = fl_h5w_group(w, mw, "top_level_model_weights");
    if (tg < 0 || write_str_attr(w, tg, "weight_names", NULL, 0, false) < 0) goto done;
    if (m->compiled && m->opt) {
        int og = fl_h5w_group(w, 0, "optimizer_weights");
        if (og < 0) goto done;
        int first = fl_optimizer_schedule(m->opt) ? 1 : 2; /* no learning_rate variable with a schedule */
        int n = first + h->ns;
        on = calloc((size_t)n, sizeof *on);
        op = calloc((size_t)n, sizeof *op);
        const char *opt = fl_keras_optimizer_name(m->opt);
        static const char *slot_names[3][3] = {{"momentum", "velocity", ""}, {"momentum", "", ""},
                                               {"velocity", "momentum", "average_gradient"}};
        if (!on || !op) { fl_error(FL_ERR_NOMEM, "out of memory"); goto done; }
        for (int i = 0; i < n; i++) {
            if (i == 0) snprintf(on[i], sizeof on[i], "%s/iteration", opt);
            else if (i == 1 && first == 2) snprintf(on[i], sizeof on[i], "%s/learning_rate", opt);
            else {
                const kslot *s = &h->slots[i - first];
                int row = m->opt->code == FL_OPT_SGD ? 1 : m->opt->code == FL_OPT_RMSPROP ? 2 : 0;
                const char *ln = "?", *wname = "?";
                for (int li = 0; li < m->nlayers; li++)
                    for (int k = 0; k < m->layers[li]->nw; k++)
                        if (m->layers[li]->w[k] == s->w) { ln = m->layers[li]->name; wname = m->layers[li]->wname[k]; }
                snprintf(on[i], sizeof on[i], "%s/%s_%s_%s", opt, ln, wname, slot_names[row][s->which]);
            }
            op[i] = on[i];
        }
        if (write_str_attr(w, og, "weight_names", op, n, false) < 0 || write_i64_scalar(w, og, on[0], m->opt->iterations) < 0 ||
            (first == 2 && write_f32(w, og, on[1], 0, NULL, &m->opt->d.lr) < 0))
            goto done;
        for (int i = 0; i < h->ns; i++)
            if (write_f32(w, og, on[i + first], h->slots[i].w->ndim, h->slots[i].w->shape, h->s[i]) < 0) goto done;
    }
    r = 0;
done:
    free(on);
    free(op);
    free(names);
    free(cfg_text);
    free(train_text);
    return r;
}

fl_status fl_keras_write_h5(fl_model *m, fl_kformat fmt, void **data, size_t *len) {
    *data = NULL;
    *len = 0;
    host_copy h;
    FL_TRY(host_take(m, &h));
    fl_h5w *w = fl_h5w_new();
    fl_status s = FL_OK;
    if (!w) s = fl_last_status();
    else if ((fmt == FL_KFMT_KERAS ? write_keras_layout(w, m, &h) : write_legacy_layout(w, m, &h)) != 0 ||
             fl_h5w_finish(w, data, len) != 0)
        s = fl_last_status() != FL_OK ? fl_last_status() : fl_error(FL_ERR_IO, "HDF5: cannot write the weights");
    fl_h5w_free(w);
    host_free(&h);
    return s;
}
