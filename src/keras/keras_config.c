/*
 * keras_config.c — Keras model configs (JSON) <-> fl_model, with json-c.
 *
 * Reading takes the model config of a Keras 3 .keras file (config.json), of
 * model.to_json(), and of a legacy .h5 file's model_config attribute, in both
 * the Keras 3 dialect and the tf.keras 2 one (InputLayer "batch_input_shape",
 * list-style "inbound_nodes", "dtype" as a string, BatchNormalization "axis"
 * as a list). Sequential models become fl_sequential; Functional ones are
 * rebuilt call by call as Keras's functional_from_config does (each layer's
 * calls in order, deferring a call until its inputs exist), so shared layers,
 * merges and several inputs/outputs come out with Keras's node numbering and
 * layer order.
 *
 * Whatever flynn cannot represent exactly is refused with a message naming
 * the file, the layer and the reason: an unknown or custom class (module not
 * keras, a registered_name), Lambda, channels_first, dilation or groups != 1,
 * regularizers and constraints (they change training), non-float32 dtype
 * policies, inputs of unknown size... Frozen layers (trainable false) load
 * frozen (fl_layer_set_trainable).
 * Initializers only matter for fresh weights: flynn always uses Keras's
 * defaults (GlorotUniform kernels, zero biases, BatchNormalization ones and
 * zeros), and writes those names back.
 *
 * Compile configs (Keras 3 "compile_config", legacy "training_config") map
 * onto fl_compile: Adam, AdamW, SGD and RMSprop with exact hyper-parameters;
 * the four losses (strings or objects, from_logits); the accuracy metrics.
 * Gradient clipping, EMA, loss scaling, gradient accumulation, amsgrad,
 * learning-rate schedules, label smoothing, loss weights and other metrics
 * are refused, since training would silently differ.
 *
 * Writing produces what Keras 3.15 writes: module/registered_name, the
 * DTypePolicy, every config key of each class with its default, and the
 * build_config for the layers that have one.
 */
#include "keras/keras_json.h"
#include "core/tensor.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUPPORTED_LAYERS fl_keras_supported_layers()




static fl_status set_layer_name(const kctx *c, fl_layer *l, const char *name) {
    if (strlen(name) >= sizeof l->name)
        return kfail(c, FL_ERR_UNSUPPORTED, "the name is longer than %zu characters", sizeof l->name - 1);
    strcpy(l->name, name);
    l->user_named = true;
    return FL_OK;
}

/* ------------------------------------------------------------ layers */

/* The common checks of every layer entry: class known and built in, dtype,
 * trainable. */
static fl_status check_entry(const kctx *c, json_object *entry, const char *cls, json_object *cfg) {
    const char *mod = jstr(jkey(entry, "module")), *reg = jstr(jkey(entry, "registered_name"));
    if (strcmp(cls, "Lambda") == 0)
        return kfail(c, FL_ERR_UNSUPPORTED, "Lambda layers hold Python code (marshalled bytecode), which flynn cannot "
                     "run; flynn supports %s", SUPPORTED_LAYERS);
    if ((reg && strcmp(reg, cls) != 0) || (mod && strncmp(mod, "keras", 5) != 0))
        return kfail(c, FL_ERR_UNSUPPORTED, "a custom object (class '%s', registered as '%s', module '%s'); flynn "
                     "only loads built-in Keras layers: %s", cls, reg ? reg : "-", mod ? mod : "-", SUPPORTED_LAYERS);
    if (!jis(cfg, json_type_object)) return kfail(c, FL_ERR_FORMAT, "'config' is %s, expected an object", jtype_name(cfg));
    bool trainable = true; /* false: a frozen layer (layer_from_config) */
    FL_TRY(get_bool(c, cfg, "trainable", true, &trainable));
    if (strcmp(cls, "InputLayer") == 0) return FL_OK; /* its dtype is the data's: input_dtype */
    return check_dtype(c, cfg);
}

/* An InputLayer's dtype: float32, or int32/int64 (indices for Embedding,
 * carried as int32; int64 is written back as int64). */
static fl_status input_dtype(const kctx *c, json_object *cfg, fl_layer *l) {
    json_object *d = jkey(cfg, "dtype");
    const char *name = d ? jstr(d) : "float32";
    if (!name && jis(d, json_type_object)) name = jstr(jkey(jkey(d, "config"), "name"));
    if (!name) return kfail(c, FL_ERR_FORMAT, "'dtype' is %s, expected a dtype name", jtype_name(d));
    if (strcmp(name, "float32") == 0) return FL_OK;
    if (strcmp(name, "int32") == 0 || strcmp(name, "int64") == 0) {
        l->a.shape.dtype = FL_INT32;
        l->a.shape.int64 = name[3] == '6';
        return FL_OK;
    }
    return kfail(c, FL_ERR_UNSUPPORTED, "input dtype '%s' is not supported (flynn takes float32 inputs, and int32 or "
                 "int64 inputs of indices for Embedding)", name);
}

static const char *input_dtype_name(const fl_layer *l) {
    return l->a.shape.dtype == FL_INT32 ? (l->a.shape.int64 ? "int64" : "int32") : "float32";
}

/* A layer (not InputLayer) from its class and config, named. */
static fl_layer *layer_from_config(const kctx *c, const char *cls, json_object *cfg, const char *name,
                                   klayer_extra *x) {
    memset(x, 0, sizeof *x);
    const fl_keras_layer_def *d = fl_keras_layer_by_class(cls);
    if (!d || !d->from_config) {
        if (strcmp(cls, "Sequential") == 0 || strcmp(cls, "Functional") == 0 || strcmp(cls, "Model") == 0)
            return kfail(c, FL_ERR_UNSUPPORTED, "a model used as a layer (nested models) is not supported; flynn "
                         "supports %s", SUPPORTED_LAYERS), NULL;
        return kfail(c, FL_ERR_UNSUPPORTED, "layer class '%s' is not supported; flynn supports %s", cls,
                     SUPPORTED_LAYERS), NULL;
    }
    fl_layer *l = d->from_config(c, cls, cfg, x);
    if (!l) {
        char why[700];
        snprintf(why, sizeof why, "%s", fl_last_error());
        /* the readers' own refusals already name the file and layer */
        if (strncmp(why, c->src, strlen(c->src)) == 0) return NULL;
        return kfail(c, fl_last_status() ? fl_last_status() : FL_ERR_FORMAT, "%s", why), NULL;
    }
    if (set_layer_name(c, l, name) != FL_OK) { fl_layer_free(l); return NULL; }
    bool trainable = true; /* checked by check_entry */
    get_bool(c, cfg, "trainable", true, &trainable);
    l->frozen = !trainable; /* before it is built: its weights are made frozen */
    l->weights_to_come = c->weights_follow;
    return l;
}

static const char *entry_name(json_object *entry, json_object *cfg) {
    const char *n = jstr(jkey(entry, "name"));
    return n ? n : jstr(jkey(cfg, "name"));
}

static fl_status check_bn_axis(const kctx *c0, const fl_layer *l, const klayer_extra *x) {
    if (!x->bn || !l->out) return FL_OK;
    int rank = l->out->ndim; /* batch included */
    if (x->bn_axis == -1 || x->bn_axis == rank - 1) return FL_OK;
    kctx c = *c0;
    set_where(&c, l->name, "BatchNormalization");
    return kfail(&c, FL_ERR_UNSUPPORTED, "axis %lld of a rank-%d input is not supported (flynn normalizes over the "
                 "last axis, -1 or %d)", (long long)x->bn_axis, rank, rank - 1);
}

static fl_status check_model_object(const kctx *c, json_object *mc, const char **cls_out) {
    if (!jis(mc, json_type_object)) return kfail(c, FL_ERR_FORMAT, "the model config is %s, expected an object", jtype_name(mc));
    const char *cls = jstr(jkey(mc, "class_name"));
    if (!cls) return kfail(c, FL_ERR_FORMAT, "the model config has no class_name");
    const char *reg = jstr(jkey(mc, "registered_name")), *mod = jstr(jkey(mc, "module"));
    bool known = strcmp(cls, "Sequential") == 0 || strcmp(cls, "Functional") == 0 || strcmp(cls, "Model") == 0;
    if (!known || (reg && strcmp(reg, cls) != 0) || (mod && strncmp(mod, "keras", 5) != 0))
        return kfail(c, FL_ERR_UNSUPPORTED, "the model is of class '%s' (registered as '%s', module '%s'); flynn loads "
                     "Sequential and Functional models only (not subclassed or custom models)", cls, reg ? reg : "-",
                     mod ? mod : "-");
    *cls_out = cls;
    json_object *cfg = jkey(mc, "config");
    if (!jis(cfg, json_type_object)) return kfail(c, FL_ERR_FORMAT, "the model config has no 'config' object");
    bool trainable = true; /* false: every layer frozen (fl_keras_model_from_config) */
    FL_TRY(get_bool(c, cfg, "trainable", true, &trainable));
    if (!jis(jkey(cfg, "layers"), json_type_array)) return kfail(c, FL_ERR_FORMAT, "the model config has no 'layers' list");
    return FL_OK;
}

/* ------------------------------------------------------------ Sequential */

static fl_model *sequential_from_config(kctx *c, json_object *cfg) {
    json_object *layers = jkey(cfg, "layers");
    size_t n = json_object_array_length(layers);
    const char *mname = jstr(jkey(cfg, "name"));
    if (mname && strlen(mname) >= sizeof ((fl_model *)0)->name)
        return kfail(c, FL_ERR_UNSUPPORTED, "the model name '%.40s...' is longer than 63 characters", mname), NULL;
    fl_layer **ls = fl_calloc(n + 1, sizeof *ls, "layers");
    klayer_extra *ex = fl_calloc(n + 1, sizeof *ex, "layers");
    if (!ls || !ex) { free(ls); free(ex); return NULL; }
    int nl = 0;
    size_t first = 0;
    int ndim = 0;
    int64_t shape[FL_MAX_DIMS];
    const char *in_name = NULL;
    /* the input: an InputLayer entry, else the build shape */
    json_object *e0 = n ? json_object_array_get_idx(layers, 0) : NULL;
    const char *cls0 = jstr(jkey(e0, "class_name"));
    if (cls0 && strcmp(cls0, "InputLayer") == 0) {
        json_object *ic = jkey(e0, "config");
        in_name = jstr(jkey(ic, "name"));
        set_where(c, in_name, "InputLayer");
        json_object *bs = jkey(ic, "batch_shape");
        if (!bs) bs = jkey(ic, "batch_input_shape");
        if (check_entry(c, e0, "InputLayer", ic) != FL_OK ||
            get_batch_shape(c, bs, jkey(ic, "batch_shape") ? "batch_shape" : "batch_input_shape", &ndim, shape) ||
            must_be_null(c, ic, "sparse", "sparse inputs") || must_be_null(c, ic, "ragged", "ragged inputs") ||
            must_be_null(c, ic, "optional", "optional inputs"))
            goto fail;
        first = 1;
    } else {
        c->where[0] = 0;
        json_object *bs = jkey(cfg, "build_input_shape"), *e0c = jkey(e0, "config");
        const char *key = "build_input_shape";
        if (!bs) { bs = jkey(jkey(e0, "build_config"), "input_shape"); key = "build_config.input_shape"; }
        if (!bs) { bs = jkey(e0c, "batch_input_shape"); key = "batch_input_shape"; }
        if (!bs) { bs = jkey(e0c, "batch_shape"); key = "batch_shape"; }
        if (!bs) {
            kfail(c, FL_ERR_UNSUPPORTED, "the Sequential model has no InputLayer and no build shape (it was never "
                  "built), so its input shape is unknown");
            goto fail;
        }
        if (get_batch_shape(c, bs, key, &ndim, shape)) goto fail;
    }
    if (n <= first) {
        c->where[0] = 0;
        kfail(c, FL_ERR_FORMAT, "the Sequential model has no layers");
        goto fail;
    }
    ls[nl] = fl_input_(ndim, shape);
    if (!ls[nl]) { fl_error_prefix("%s: ", c->src); goto fail; }
    nl++;
    if (first && input_dtype(c, jkey(e0, "config"), ls[0])) goto fail;
    if (in_name && set_layer_name(c, ls[0], in_name)) goto fail;
    for (size_t i = first; i < n; i++) {
        json_object *e = json_object_array_get_idx(layers, i);
        const char *cls = jstr(jkey(e, "class_name"));
        json_object *lc = jkey(e, "config");
        const char *name = entry_name(e, lc);
        c->where[0] = 0;
        if (!cls || !name) { kfail(c, FL_ERR_FORMAT, "layer %zu has no class_name or name", i); goto fail; }
        set_where(c, name, cls);
        if (strcmp(cls, "InputLayer") == 0) { kfail(c, FL_ERR_FORMAT, "an InputLayer after the first layer"); goto fail; }
        if (check_entry(c, e, cls, lc)) goto fail;
        ls[nl] = layer_from_config(c, cls, lc, name, &ex[nl]);
        if (!ls[nl]) goto fail;
        nl++;
    }
    fl_model *m = fl_sequential_(ls, nl, mname ? mname : "sequential");
    nl = 0; /* owned by fl_sequential_, also on failure */
    if (!m) { fl_error_prefix("%s: ", c->src); goto fail; }
    for (int i = 0; i < m->nlayers; i++)
        if (check_bn_axis(c, m->layers[i], &ex[i])) { fl_model_free(m); goto fail; }
    free(ls);
    free(ex);
    return m;
fail:
    for (int i = 0; i < nl; i++) fl_layer_free(ls[i]);
    free(ls);
    free(ex);
    return NULL;
}

/* ------------------------------------------------------------ Functional */

typedef struct kref { const char *layer; int64_t node, tensor; } kref;
typedef struct knode {
    int n;
    kref in[FL_NODE_MAX_IN];
    bool masked[FL_NODE_MAX_IN]; /* mask= gave input i's mask: mask[i] */
    kref mask[FL_NODE_MAX_IN];
} knode;
typedef struct kentry {
    const char *name, *cls;
    json_object *entry, *cfg;
    bool input;
    fl_layer *layer;     /* non-input layers */
    int nnodes, done;
    knode *nodes;
    fl_sym **syms;       /* one per node (inputs: syms[0]) */
    klayer_extra ex;
} kentry;

static fl_status parse_ref_list(const kctx *c, json_object *v, kref *r) {
    /* [name, node, tensor(, kwargs)] */
    if (!jis(v, json_type_array) || json_object_array_length(v) < 3 || !jstr(json_object_array_get_idx(v, 0)) ||
        !jis(json_object_array_get_idx(v, 1), json_type_int) || !jis(json_object_array_get_idx(v, 2), json_type_int))
        return kfail(c, FL_ERR_FORMAT, "a tensor reference is %s, expected [layer_name, node_index, tensor_index]",
                     v ? json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN) : "null");
    r->layer = jstr(json_object_array_get_idx(v, 0));
    r->node = json_object_get_int64(json_object_array_get_idx(v, 1));
    r->tensor = json_object_get_int64(json_object_array_get_idx(v, 2));
    if (json_object_array_length(v) >= 4) {
        json_object *kw = json_object_array_get_idx(v, 3);
        if (jis(kw, json_type_object) && json_object_object_length(kw) > 0) {
            json_object_object_foreach(kw, k, val) {
                if (val) return kfail(c, FL_ERR_UNSUPPORTED, "a call with the keyword argument '%s' is not supported", k);
            }
        }
    }
    return FL_OK;
}

/* Collects the __keras_tensor__ references of a Keras 3 call's args, in order. */
static fl_status collect_tensors(const kctx *c, json_object *v, knode *nd) {
    if (jis(v, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(v); i++)
            FL_TRY(collect_tensors(c, json_object_array_get_idx(v, i), nd));
        return FL_OK;
    }
    const char *cn = jstr(jkey(v, "class_name"));
    if (cn && strcmp(cn, "__keras_tensor__") == 0) {
        if (nd->n == FL_NODE_MAX_IN) return kfail(c, FL_ERR_UNSUPPORTED, "a call with more than %d inputs", FL_NODE_MAX_IN);
        return parse_ref_list(c, jkey(jkey(v, "config"), "keras_history"), &nd->in[nd->n++]);
    }
    return kfail(c, FL_ERR_UNSUPPORTED, "a call argument that is not a tensor (%s); flynn supports layer calls on "
                 "tensors only", v ? json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN) : "null");
}

/* keras.ops.not_equal(x, c) of a mask: a tensor and a number; every call of the layer must give the same number. */
static fl_status parse_not_equal_call(const kctx *c, kentry *e, json_object *nd, size_t i, knode *k) {
    json_object *args = jkey(nd, "args"), *cv = jis(args, json_type_array) && json_object_array_length(args) == 2
                                                  ? json_object_array_get_idx(args, 1) : NULL;
    if (!jis(cv, json_type_int) && !jis(cv, json_type_double))
        return kfail(c, FL_ERR_UNSUPPORTED, "NotEqual takes a tensor and a number here (a mask: "
                     "not_equal(x, 0)), not %s", args ? json_object_to_json_string_ext(args, JSON_C_TO_STRING_PLAIN)
                     : "null");
    double v = json_object_get_double(cv);
    if (i > 0 && (float)v != e->layer->a.not_equal)
        return kfail(c, FL_ERR_UNSUPPORTED, "calls of one NotEqual with different constants");
    e->layer->a.not_equal = (float)v;
    return collect_tensors(c, json_object_array_get_idx(args, 0), k);
}

/* mask=: the mask of the first input, or a list (null: the input's own), which Keras 3 writes for a Functional
 * model's masked calls. */
static fl_status parse_call_masks(const kctx *c, json_object *val, knode *k) {
    if (!val) return FL_OK;
    bool list = jis(val, json_type_array);
    size_t nm = list ? json_object_array_length(val) : 1;
    if (nm > FL_NODE_MAX_IN) return kfail(c, FL_ERR_UNSUPPORTED, "a call with %zu masks", nm);
    for (size_t j = 0; j < nm; j++) {
        json_object *mv = list ? json_object_array_get_idx(val, j) : val;
        if (!mv) continue;
        const char *cn = jstr(jkey(mv, "class_name"));
        if (!cn || strcmp(cn, "__keras_tensor__") != 0)
            return kfail(c, FL_ERR_FORMAT, "mask %zu of a call is not a tensor", j);
        FL_TRY(parse_ref_list(c, jkey(jkey(mv, "config"), "keras_history"), &k->mask[j]));
        k->masked[j] = true;
    }
    return FL_OK;
}

/* One keyword argument of call i: applied to the layer or the node where flynn has its meaning, ignored where it
 * changes nothing, refused otherwise. */
static fl_status parse_call_kwarg(const kctx *c, kentry *e, const char *key, json_object *val, size_t i, knode *k) {
    const bool attn = e->layer && (e->layer->kind == FL_L_MHA || e->layer->kind == FL_L_ATTENTION);
    /* Dropout(x, training=False), as keras.applications.MobileNet calls it. Keras 3's
     * Functional passes the model's own training flag over it (active in fit, as
     * flynn's Dropout), so it only needs to be written back */
    if (val && strcmp(key, "training") == 0 && jis(val, json_type_boolean) &&
        !json_object_get_boolean(val) && e->layer &&
        (fl_layer_kind_flags(e->layer->kind) & FL_K_TRAINING)) { /* FL_LAYER_KINDS's column */
        e->layer->inference_call = true;
        return FL_OK;
    }
    /* lstm(x, initial_state=[h, c]): the states are flynn's inputs after x */
    if (strcmp(key, "initial_state") == 0 && e->layer && fl_layer_num_states(e->layer) > 0) {
        if (val) FL_TRY(collect_tensors(c, val, k));
        return FL_OK;
    }
    if (strcmp(key, "mask") == 0) return parse_call_masks(c, val, k);
    if (attn && strcmp(key, "use_causal_mask") == 0 && jis(val, json_type_boolean)) {
        bool on = json_object_get_boolean(val);
        bool *flag = e->layer->kind == FL_L_MHA ? &e->layer->a.mha.use_causal_mask
                                                 : &e->layer->a.att.use_causal_mask;
        if (i > 0 && *flag != on)
            return kfail(c, FL_ERR_UNSUPPORTED, "calls with and without use_causal_mask of one "
                         "layer are not supported");
        *flag = on;
        return FL_OK;
    }
    /* MultiHeadAttention's key= and attention_mask= are taken after the loop, in flynn's input order */
    if (attn && (strcmp(key, "key") == 0 || strcmp(key, "attention_mask") == 0) && val &&
        e->layer->kind == FL_L_MHA)
        return FL_OK;
    if (attn && strcmp(key, "return_attention_scores") == 0 && jis(val, json_type_boolean) &&
        !json_object_get_boolean(val))
        return FL_OK;
    if (val) return kfail(c, FL_ERR_UNSUPPORTED, "a call with the keyword argument '%s' is not supported", key);
    return FL_OK;
}

/* Keras 3's call i: {"args": [...], "kwargs": {...}}. */
static fl_status parse_keras3_call(const kctx *c, kentry *e, json_object *nd, size_t i, knode *k) {
    FL_TRY(collect_tensors(c, jkey(nd, "args"), k));
    json_object *kw = jkey(nd, "kwargs");
    const bool attn = e->layer && (e->layer->kind == FL_L_MHA || e->layer->kind == FL_L_ATTENTION);
    if (!jis(kw, json_type_object)) return FL_OK;
    json_object_object_foreach(kw, key, val) {
        FL_TRY(parse_call_kwarg(c, e, key, val, i, k));
    }
    /* MultiHeadAttention(query, value, key=, attention_mask=): flynn's inputs in that order */
    json_object *kt = jkey(kw, "key"), *mt = jkey(kw, "attention_mask");
    if (attn && e->layer->kind == FL_L_MHA && (kt || mt)) {
        if (kt && k->n != 2)
            return kfail(c, FL_ERR_FORMAT, "a call with key given twice");
        if (kt) FL_TRY(collect_tensors(c, kt, k));
        else if (k->n == 2) k->in[k->n++] = k->in[1]; /* key = value */
        if (mt) FL_TRY(collect_tensors(c, mt, k));
    }
    return FL_OK;
}

/* tf.keras 2's call: [[name, node, tensor, kwargs], ...]. */
static fl_status parse_keras2_call(const kctx *c, json_object *nd, knode *k) {
    size_t m = json_object_array_length(nd);
    if (m > FL_NODE_MAX_IN) return kfail(c, FL_ERR_UNSUPPORTED, "a call with more than %d inputs", FL_NODE_MAX_IN);
    for (size_t j = 0; j < m; j++) FL_TRY(parse_ref_list(c, json_object_array_get_idx(nd, j), &k->in[k->n++]));
    return FL_OK;
}

static fl_status parse_nodes(const kctx *c, kentry *e) {
    json_object *nodes = jkey(e->entry, "inbound_nodes");
    if (!nodes) { e->nnodes = 0; return FL_OK; }
    if (!jis(nodes, json_type_array)) return kfail(c, FL_ERR_FORMAT, "'inbound_nodes' is %s, expected a list", jtype_name(nodes));
    size_t n = json_object_array_length(nodes);
    if (n > 4096) return kfail(c, FL_ERR_UNSUPPORTED, "%zu calls of one layer", n);
    e->nodes = fl_calloc(n + 1, sizeof *e->nodes, "layer calls");
    e->syms = fl_calloc(n + 1, sizeof *e->syms, "layer calls");
    if (!e->nodes || !e->syms) return fl_last_status();
    e->nnodes = (int)n;
    for (size_t i = 0; i < n; i++) {
        json_object *nd = json_object_array_get_idx(nodes, i);
        knode *k = &e->nodes[i];
        if (jis(nd, json_type_object) && e->layer && e->layer->kind == FL_L_NOT_EQUAL)
            FL_TRY(parse_not_equal_call(c, e, nd, i, k));
        else if (jis(nd, json_type_object))
            FL_TRY(parse_keras3_call(c, e, nd, i, k));
        else if (jis(nd, json_type_array))
            FL_TRY(parse_keras2_call(c, nd, k));
        else
            return kfail(c, FL_ERR_FORMAT, "inbound node %zu is %s", i, jtype_name(nd));
        if (k->n == 0) return kfail(c, FL_ERR_FORMAT, "call %zu has no input tensors", i);
    }
    return FL_OK;
}

/* input_layers / output_layers: [[name, node, tensor], ...], one [name, node,
 * tensor], or {"key": [name, node, tensor], ...}. */
static fl_status parse_io(const kctx *c, json_object *v, const char *key, kref *out, int *n) {
    *n = 0;
    if (jis(v, json_type_array) && json_object_array_length(v) >= 1 && jstr(json_object_array_get_idx(v, 0))) {
        *n = 1;
        return parse_ref_list(c, v, &out[0]);
    }
    if (jis(v, json_type_array)) {
        size_t len = json_object_array_length(v);
        if (len < 1 || len > FL_MODEL_MAX_IO)
            return kfail(c, FL_ERR_UNSUPPORTED, "'%s' lists %zu tensors (flynn takes 1 to %d)", key, len, FL_MODEL_MAX_IO);
        for (size_t i = 0; i < len; i++) FL_TRY(parse_ref_list(c, json_object_array_get_idx(v, i), &out[(*n)++]));
        return FL_OK;
    }
    if (jis(v, json_type_object)) {
        json_object_object_foreach(v, k, val) {
            (void)k;
            if (*n == FL_MODEL_MAX_IO) return kfail(c, FL_ERR_UNSUPPORTED, "'%s' lists more than %d tensors", key, FL_MODEL_MAX_IO);
            FL_TRY(parse_ref_list(c, val, &out[(*n)++]));
        }
        if (*n) return FL_OK;
    }
    return kfail(c, FL_ERR_FORMAT, "'%s' is %s, expected a list of [layer_name, node_index, tensor_index]", key,
                 jtype_name(v));
}

static kentry *find_entry(kentry *es, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(es[i].name, name) == 0) return &es[i];
    return NULL;
}

/* The symbolic tensor a reference names, NULL if not made yet (*bad set on an invalid reference). */
static fl_sym *resolve(const kctx *c, kentry *es, int n, const kref *r, fl_status *bad) {
    kentry *t = find_entry(es, n, r->layer);
    if (!t) { *bad = kfail(c, FL_ERR_FORMAT, "a call refers to layer '%s', which the model does not have", r->layer); return NULL; }
    int64_t nn = t->input ? 1 : t->nnodes;
    if (r->node < 0 || r->node >= nn) {
        *bad = kfail(c, FL_ERR_FORMAT, "a call refers to call %lld of layer '%s', which has %lld", (long long)r->node,
                     r->layer, (long long)nn);
        return NULL;
    }
    int no = t->input ? 1 : fl_layer_num_outputs(t->layer);
    if (r->tensor < 0 || r->tensor >= no) {
        *bad = kfail(c, FL_ERR_FORMAT, "a call takes output %lld of layer '%s', which has %d output%s",
                     (long long)r->tensor, r->layer, no, no == 1 ? "" : "s");
        return NULL;
    }
    fl_sym *s = t->syms[r->node];
    if (!s || r->tensor == 0) return s;
    if (!(s = fl_output(s, (int)r->tensor))) *bad = fl_last_status(); /* out of memory */
    return s;
}

static bool sym_reach(fl_sym *s, fl_sym **seen, int *nseen, int cap) {
    for (int i = 0; i < *nseen; i++)
        if (seen[i] == s) return true;
    if (*nseen == cap) return false;
    seen[(*nseen)++] = s;
    for (int i = 0; i < s->nin; i++)
        if (!sym_reach(s->in[i], seen, nseen, cap) || (s->mask[i] && !sym_reach(s->mask[i], seen, nseen, cap)))
            return false;
    return !s->src || sym_reach(s->src, seen, nseen, cap); /* an output > 0 of a call reaches the call */
}

/* The layer entries, each read once: an InputLayer's symbolic input, another layer made from its config with
 * its calls (parse_nodes). Returns non-zero having said why. */
static int read_entries(kctx *c, json_object *layers, kentry *es, int n, int *total_syms) {
    for (int i = 0; i < n; i++) {
        kentry *e = &es[i];
        e->entry = json_object_array_get_idx(layers, i);
        e->cls = jstr(jkey(e->entry, "class_name"));
        e->cfg = jkey(e->entry, "config");
        e->name = entry_name(e->entry, e->cfg);
        c->where[0] = 0;
        if (!e->cls || !e->name) { kfail(c, FL_ERR_FORMAT, "layer %d has no class_name or name", i); return 1; }
        set_where(c, e->name, e->cls);
        for (int k = 0; k < i; k++)
            if (strcmp(es[k].name, e->name) == 0) { kfail(c, FL_ERR_FORMAT, "two layers are named '%s'", e->name); return 1; }
        if (check_entry(c, e->entry, e->cls, e->cfg)) return 1;
        if (strcmp(e->cls, "InputLayer") == 0) {
            int ndim;
            int64_t shape[FL_MAX_DIMS];
            json_object *bs = jkey(e->cfg, "batch_shape");
            const char *key = "batch_shape";
            if (!bs) { bs = jkey(e->cfg, "batch_input_shape"); key = "batch_input_shape"; }
            if (get_batch_shape(c, bs, key, &ndim, shape) || must_be_null(c, e->cfg, "sparse", "sparse inputs") ||
                must_be_null(c, e->cfg, "ragged", "ragged inputs") || must_be_null(c, e->cfg, "optional", "optional inputs"))
                return 1;
            e->input = true;
            e->syms = fl_calloc(1, sizeof *e->syms, "input");
            if (!e->syms) return 1;
            e->syms[0] = fl_keras_input_(ndim, shape, e->name);
            if (!e->syms[0]) { fl_error_prefix("%s: %s: ", c->src, c->where); return 1; }
            if (input_dtype(c, e->cfg, e->syms[0]->layer)) return 1;
            (*total_syms)++;
        } else {
            e->layer = layer_from_config(c, e->cls, e->cfg, e->name, &e->ex);
            if (!e->layer || parse_nodes(c, e)) return 1;
        }
    }
    return 0;
}

/* The calls, as Keras makes them: each layer's in order, deferring a call (and the layer's later ones) until
 * its inputs exist; a call that never can is a cycle. */
static int make_calls(kctx *c, kentry *es, int n, int *total_syms) {
    for (;;) {
        bool progress = false, left = false;
        for (int i = 0; i < n; i++) {
            kentry *e = &es[i];
            if (e->input) continue;
            set_where(c, e->name, e->cls);
            while (e->done < e->nnodes) {
                knode *nd = &e->nodes[e->done];
                fl_sym *ins[FL_NODE_MAX_IN];
                bool ready = true;
                fl_sym *masks[FL_NODE_MAX_IN] = {0};
                for (int k = 0; k < nd->n; k++) {
                    fl_status bad = FL_OK;
                    ins[k] = resolve(c, es, n, &nd->in[k], &bad);
                    if (bad) return 1;
                    if (!ins[k]) ready = false;
                    if (!nd->masked[k]) continue;
                    masks[k] = resolve(c, es, n, &nd->mask[k], &bad);
                    if (bad) return 1;
                    if (!masks[k]) ready = false;
                }
                for (int k = nd->n; k < FL_NODE_MAX_IN; k++)
                    if (nd->masked[k]) { kfail(c, FL_ERR_FORMAT, "a call with more masks than inputs"); return 1; }
                if (!ready) break;
                fl_sym *s = fl_call_n_(e->layer, ins, nd->n);
                if (!s) {
                    if (e->done == 0) e->layer = NULL; /* a failed first call frees its layer */
                    fl_error_prefix("%s: %s: ", c->src, c->where);
                    return 1;
                }
                for (int k = 0; k < nd->n; k++) s->mask[k] = masks[k];
                e->syms[e->done++] = s;
                (*total_syms)++;
                progress = true;
            }
            if (e->done < e->nnodes) left = true;
        }
        if (!left) break;
        if (!progress) {
            for (int i = 0; i < n; i++)
                if (!es[i].input && es[i].done < es[i].nnodes) {
                    set_where(c, es[i].name, es[i].cls);
                    kfail(c, FL_ERR_FORMAT, "call %d waits for a tensor that is never computed (a cycle in the layer "
                          "graph)", es[i].done);
                    break;
                }
            return 1;
        }
    }
    return 0;
}

/* The model's inputs (InputLayers) and outputs, from input_layers and output_layers */
static int model_io(kctx *c, json_object *cfg, kentry *es, int n, fl_sym **ins, int *nin, fl_sym **outs, int *nout) {
    kref iref[FL_MODEL_MAX_IO], oref[FL_MODEL_MAX_IO];
    if (parse_io(c, jkey(cfg, "input_layers"), "input_layers", iref, nin) ||
        parse_io(c, jkey(cfg, "output_layers"), "output_layers", oref, nout))
        return 1;
    for (int i = 0; i < *nin; i++) {
        fl_status bad = FL_OK;
        ins[i] = resolve(c, es, n, &iref[i], &bad);
        if (bad) return 1;
        if (!find_entry(es, n, iref[i].layer)->input) {
            kfail(c, FL_ERR_UNSUPPORTED, "model input %d is layer '%s', which is not an InputLayer", i, iref[i].layer);
            return 1;
        }
    }
    for (int i = 0; i < *nout; i++) {
        fl_status bad = FL_OK;
        outs[i] = resolve(c, es, n, &oref[i], &bad);
        if (bad) return 1;
    }
    return 0;
}

/* Every call must lead to an output: flynn's model owns what the outputs reach. */
static int check_all_used(kctx *c, kentry *es, int n, int total_syms, fl_sym *const *outs, int nout) {
    fl_sym **all;
    const int cap = total_syms * (FL_LAYER_MAX_OUTS + 1); /* each call's outputs > 0 too */
    all = fl_calloc((size_t)cap + 1, sizeof *all, "layer calls");
    if (!all) return 1;
    int nseen = 0;
    for (int i = 0; i < nout; i++) sym_reach(outs[i], all, &nseen, cap);
    for (int i = 0; i < n; i++) {
        int nn = es[i].input ? 1 : es[i].nnodes;
        for (int k = 0; k < nn; k++) {
            bool found = false;
            for (int j = 0; j < nseen && !found; j++) found = all[j] == es[i].syms[k];
            if (!found) {
                set_where(c, es[i].name, es[i].cls);
                kfail(c, FL_ERR_UNSUPPORTED, "call %d does not lead to any model output (unused layers are not "
                      "supported)", k);
                free(all);
                return 1;
            }
        }
        if (nn == 0) {
            set_where(c, es[i].name, es[i].cls);
            kfail(c, FL_ERR_UNSUPPORTED, "the layer is never called (unused layers are not supported)");
            free(all);
            return 1;
        }
    }
    free(all);
    return 0;
}

/* Keras's layer order is the config's: the model's layers in it, and each BatchNormalization's axis checked */
static int order_layers(kctx *c, fl_model *m, kentry *es, int n) {
    if (m->nlayers != n) {
        kfail(c, FL_ERR_FORMAT, "the model has %d layers, the config lists %d", m->nlayers, n);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        int k = i;
        while (k < n && strcmp(m->layers[k]->name, es[i].name) != 0) k++;
        if (k == n) { kfail(c, FL_ERR_FORMAT, "layer '%s' is missing from the model", es[i].name); return 1; }
        fl_layer *t = m->layers[i];
        m->layers[i] = m->layers[k];
        m->layers[k] = t;
    }
    for (int i = 0; i < n; i++) {
        m->layers[i]->index = i;
        if (check_bn_axis(c, m->layers[i], &es[i].ex)) return 1;
    }
    return 0;
}

static fl_model *functional_from_config(kctx *c, json_object *cfg) {
    json_object *layers = jkey(cfg, "layers");
    int n = (int)json_object_array_length(layers);
    const char *mname = jstr(jkey(cfg, "name"));
    fl_model *m = NULL;
    int total_syms = 0;
    if (mname && strlen(mname) >= sizeof ((fl_model *)0)->name)
        return kfail(c, FL_ERR_UNSUPPORTED, "the model name '%.40s...' is longer than 63 characters", mname), NULL;
    if (n < 2) return kfail(c, FL_ERR_FORMAT, "the Functional model has %d layers", n), NULL;
    kentry *es = fl_calloc((size_t)n, sizeof *es, "layers");
    if (!es) return NULL;
    int nin = 0, nout = 0;
    fl_sym *ins[FL_MODEL_MAX_IO], *outs[FL_MODEL_MAX_IO];
    if (read_entries(c, layers, es, n, &total_syms) || make_calls(c, es, n, &total_syms)) goto fail;
    c->where[0] = 0;
    if (model_io(c, cfg, es, n, ins, &nin, outs, &nout) || check_all_used(c, es, n, total_syms, outs, nout)) goto fail;
    m = fl_model_new(ins, nin, outs, nout, mname ? mname : "functional");
    /* fl_model_new owned every layer and call (they are all reachable), also on failure */
    for (int i = 0; i < n; i++) { es[i].layer = NULL; free(es[i].syms); es[i].syms = NULL; free(es[i].nodes); es[i].nodes = NULL; }
    if (!m) { fl_error_prefix("%s: ", c->src); goto fail; }
    if (order_layers(c, m, es, n)) goto fail;
    free(es);
    return m;
fail:
    fl_model_free(m);
    for (int i = 0; i < n; i++) {
        kentry *e = &es[i];
        int nn = e->input ? 1 : e->done;
        if (e->syms)
            for (int k = 0; k < nn; k++) {
                if (e->syms[k] && e->input) fl_layer_free(e->syms[k]->layer);
                for (int j = 0; e->syms[k] && j < FL_LAYER_MAX_OUTS; j++) free(e->syms[k]->outsym[j]);
                free(e->syms[k]);
            }
        fl_layer_free(e->layer);
        free(e->syms);
        free(e->nodes);
    }
    free(es);
    return NULL;
}

/* Reads every layer entry once before building anything, so that a model
 * with several layers flynn cannot load is refused with all of them listed
 * at once: grouped by class and reason, with the count and the first names
 * of each group. Returns FL_OK when at most one layer is refused: the build
 * then reports it in context. */
typedef struct refusal { char cls[64], why[200], names[200]; int count; } refusal;

static fl_status refuse_all_unsupported(const kctx *c0, json_object *cfg) {
    enum { MAX_GROUPS = 24 };
    json_object *layers = jkey(cfg, "layers");
    size_t n = json_object_array_length(layers);
    refusal *rs = fl_calloc(MAX_GROUPS, sizeof *rs, "refusals");
    if (!rs) return fl_last_status();
    int ngroups = 0, bad = 0;
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(layers, i);
        const char *cls = jstr(jkey(e, "class_name"));
        json_object *lc = jkey(e, "config");
        const char *name = entry_name(e, lc);
        if (!cls || !name || strcmp(cls, "InputLayer") == 0) continue;
        kctx c = {.src = c0->src};
        set_where(&c, name, cls);
        klayer_extra x;
        fl_layer *l = NULL;
        if (check_entry(&c, e, cls, lc) == FL_OK) l = layer_from_config(&c, cls, lc, name, &x);
        if (l) { fl_layer_free(l); continue; }
        if (fl_last_status() != FL_ERR_UNSUPPORTED) { fl_clear_error(); continue; } /* broken: reported in context */
        /* the reason alone: without "file: layer 'x' (Cls): " and the list of what flynn supports */
        const char *p = fl_last_error(), *w = strstr(p, c.where);
        if (w) p = w + strlen(c.where) + (w[strlen(c.where)] == ':' ? 2 : 0);
        const char *cut = strstr(p, "; flynn supports ");
        if (!cut) cut = strstr(p, "; flynn only loads");
        char why[200];
        snprintf(why, sizeof why, "%.*s", cut ? (int)(cut - p) : (int)strlen(p), p);
        fl_clear_error();
        bad++;
        int k = 0;
        while (k < ngroups && !(strcmp(rs[k].cls, cls) == 0 && strcmp(rs[k].why, why) == 0)) k++;
        if (k == ngroups) {
            if (ngroups == MAX_GROUPS) continue;
            ngroups++;
            snprintf(rs[k].cls, sizeof rs[k].cls, "%s", cls);
            snprintf(rs[k].why, sizeof rs[k].why, "%s", why);
        }
        size_t len = strlen(rs[k].names);
        if (rs[k].count < 3)
            snprintf(rs[k].names + len, sizeof rs[k].names - len, "%s'%s'", rs[k].count ? ", " : "", name);
        else if (rs[k].count == 3)
            snprintf(rs[k].names + len, sizeof rs[k].names - len, ", ...");
        rs[k].count++;
    }
    fl_status st = FL_OK;
    if (bad >= 2) {
        char list[3000];
        size_t off = 0;
        for (int k = 0; k < ngroups && off < sizeof list; k++)
            off += (size_t)snprintf(list + off, sizeof list - off, "\n  %s, %d layer%s (%s): %s", rs[k].cls,
                                    rs[k].count, rs[k].count > 1 ? "s" : "", rs[k].names, rs[k].why);
        kctx c = {.src = c0->src};
        st = kfail(&c, FL_ERR_UNSUPPORTED, "%d layers cannot be loaded:%s\nflynn supports %s", bad, list,
                   SUPPORTED_LAYERS);
    }
    free(rs);
    return st;
}

fl_model *fl_keras_model_from_config(json_object *mc, const char *src, bool weights_follow) {
    kctx c = {.src = src, .weights_follow = weights_follow};
    const char *cls = NULL;
    if (check_model_object(&c, mc, &cls)) return NULL;
    json_object *cfg = jkey(mc, "config");
    if (refuse_all_unsupported(&c, cfg)) return NULL;
    fl_model *m = strcmp(cls, "Sequential") == 0 ? sequential_from_config(&c, cfg) : functional_from_config(&c, cfg);
    bool trainable = true;
    get_bool(&c, cfg, "trainable", true, &trainable);
    /* Keras: model.trainable = False freezes every layer; True leaves each
     * layer's own flag as its config says */
    if (m && !trainable && fl_model_set_trainable(m, false) != FL_OK) {
        fl_error_prefix("%s: ", src);
        fl_model_free(m);
        return NULL;
    }
    return m;
}

/* ------------------------------------------------------------ compile */

/* keras.optimizers.schedules.* as an optimizer's learning_rate */
static fl_status schedule_from_config(const kctx *c, json_object *v, fl_lr_schedule *out) {
    memset(out, 0, sizeof *out);
    FL_TRY(check_builtin_object(c, v, "learning_rate"));
    const char *cls = jstr(jkey(v, "class_name"));
    json_object *cfg = jkey(v, "config");
    if (!cls) return kfail(c, FL_ERR_FORMAT, "the learning_rate schedule has no class_name");
    fl_lr_schedule_kind k = strcmp(cls, "ExponentialDecay") == 0 ? FL_SCHEDULE_EXPONENTIAL_DECAY
                            : strcmp(cls, "CosineDecay") == 0 ? FL_SCHEDULE_COSINE_DECAY
                            : strcmp(cls, "PiecewiseConstantDecay") == 0 ? FL_SCHEDULE_PIECEWISE_CONSTANT_DECAY
                            : strcmp(cls, "InverseTimeDecay") == 0 ? FL_SCHEDULE_INVERSE_TIME_DECAY : FL_SCHEDULE_NONE;
    if (k == FL_SCHEDULE_NONE)
        return kfail(c, FL_ERR_UNSUPPORTED, "learning_rate schedule '%s' is not supported (flynn has ExponentialDecay, "
                     "CosineDecay, PiecewiseConstantDecay and InverseTimeDecay)", cls);
    out->kind = k;
    if (k == FL_SCHEDULE_PIECEWISE_CONSTANT_DECAY) {
        json_object *b = jkey(cfg, "boundaries"), *vals = jkey(cfg, "values");
        if (!jis(b, json_type_array) || !jis(vals, json_type_array))
            return kfail(c, FL_ERR_FORMAT, "PiecewiseConstantDecay: 'boundaries' and 'values' must be lists");
        size_t nb = json_object_array_length(b), nv = json_object_array_length(vals);
        if (nb < 1 || nb > FL_SCHEDULE_MAX_BOUNDARIES || nv != nb + 1)
            return kfail(c, FL_ERR_UNSUPPORTED, "PiecewiseConstantDecay: %zu boundaries and %zu values; flynn takes 1 to "
                         "%d boundaries and one value more", nb, nv, FL_SCHEDULE_MAX_BOUNDARIES);
        for (size_t i = 0; i <= nb; i++) {
            json_object *x = i < nb ? json_object_array_get_idx(b, i) : NULL, *y = json_object_array_get_idx(vals, i);
            if ((i < nb && !jnum(x)) || !jnum(y))
                return kfail(c, FL_ERR_FORMAT, "PiecewiseConstantDecay: boundaries and values must be numbers (item %zu)", i);
            if (i < nb) out->boundaries[i] = json_object_get_double(x);
            out->values[i] = json_object_get_double(y);
        }
        out->n_boundaries = (int)nb;
    } else {
        FL_TRY(get_num(c, cfg, "initial_learning_rate", 0, true, &out->initial_learning_rate));
        FL_TRY(get_num(c, cfg, "decay_steps", 0, true, &out->decay_steps));
        if (k == FL_SCHEDULE_COSINE_DECAY) {
            FL_TRY(get_num(c, cfg, "alpha", 0, false, &out->alpha));
            FL_TRY(get_num(c, cfg, "warmup_target", 0, false, &out->warmup_target));
            FL_TRY(get_num(c, cfg, "warmup_steps", 0, false, &out->warmup_steps));
        } else {
            FL_TRY(get_num(c, cfg, "decay_rate", 0, true, &out->decay_rate));
            FL_TRY(get_bool(c, cfg, "staircase", false, &out->staircase));
        }
    }
    if (fl_lr_schedule_check(out) != FL_OK) return kfail(c, FL_ERR_FORMAT, "learning_rate: %s", fl_last_error());
    return FL_OK;
}

static json_object *jnumber(double v) { return v == floor(v) && fabs(v) < 9e15 ? jint((int64_t)v) : jfloat(v); }

static json_object *schedule_config(const fl_lr_schedule *s) {
    json_object *c = json_object_new_object();
    if (s->kind == FL_SCHEDULE_PIECEWISE_CONSTANT_DECAY) {
        json_object *b = json_object_new_array(), *v = json_object_new_array();
        for (int i = 0; i < s->n_boundaries; i++) json_object_array_add(b, jnumber(s->boundaries[i]));
        for (int i = 0; i <= s->n_boundaries; i++) json_object_array_add(v, jfloat(s->values[i]));
        put(c, "boundaries", b);
        put(c, "values", v);
    } else {
        put(c, "initial_learning_rate", jfloat(s->initial_learning_rate));
        put(c, "decay_steps", jnumber(s->decay_steps));
        if (s->kind == FL_SCHEDULE_COSINE_DECAY) {
            put(c, "alpha", jfloat(s->alpha));
        } else {
            put(c, "decay_rate", jfloat(s->decay_rate));
            put(c, "staircase", jbool(s->staircase));
        }
    }
    put(c, "name", jstring(fl_lr_schedule_name(s->kind)));
    if (s->kind == FL_SCHEDULE_COSINE_DECAY) {
        put(c, "warmup_target", s->warmup_target != 0.0 ? jfloat(s->warmup_target) : NULL);
        put(c, "warmup_steps", jnumber(s->warmup_steps));
    }
    return jobject("keras.optimizers.schedules", fl_lr_schedule_name(s->kind), c, false);
}

/* clipnorm / clipvalue / global_clipnorm: null, or a number (<= 0: none, as Keras's `if self.clipnorm and self.clipnorm > 0`) */
static fl_status get_clip(const kctx *c, json_object *cfg, const char *key, float *out) {
    double v = 0;
    FL_TRY(get_num(c, cfg, key, 0, false, &v));
    *out = v > 0 ? (float)v : 0.0f;
    return FL_OK;
}

static fl_status optimizer_from_config(const kctx *c, json_object *oc, fl_optimizer **out) {
    const char *cls = jstr(oc);
    json_object *cfg = NULL;
    if (!cls) {
        if (!jis(oc, json_type_object)) return kfail(c, FL_ERR_FORMAT, "the optimizer is %s", jtype_name(oc));
        FL_TRY(check_builtin_object(c, oc, "optimizer"));
        cls = jstr(jkey(oc, "class_name"));
        cfg = jkey(oc, "config");
        if (!cls) return kfail(c, FL_ERR_FORMAT, "the optimizer has no class_name");
    }
    /* tf.keras 2.11+ saves its own optimizers as "Custom>Adam" (registered
     * under the package "Custom"); a user's subclass would have another name */
    if (strncmp(cls, "Custom>", 7) == 0) cls += 7;
    char lc[32];
    size_t i = 0;
    for (; cls[i] && i + 1 < sizeof lc; i++) lc[i] = (char)(cls[i] >= 'A' && cls[i] <= 'Z' ? cls[i] + 32 : cls[i]);
    lc[i] = 0;
    int code = strcmp(lc, "adam") == 0 ? FL_OPT_ADAM : strcmp(lc, "adamw") == 0 ? FL_OPT_ADAMW
             : strcmp(lc, "sgd") == 0  ? FL_OPT_SGD  : strcmp(lc, "rmsprop") == 0 ? FL_OPT_RMSPROP : 0;
    if (!code)
        return kfail(c, FL_ERR_UNSUPPORTED, "optimizer '%s' is not supported (flynn has Adam, AdamW, SGD and RMSprop)", cls);
    /* things that change the update and that flynn does not do */
    static const struct { const char *key, *what; } no[] = {
        {"use_ema", "an exponential moving average of the weights"}, {"loss_scale_factor", "loss scaling"},
        {"amsgrad", "AMSGrad"}};
    for (size_t k = 0; k < sizeof no / sizeof no[0]; k++) FL_TRY(must_be_null(c, cfg, no[k].key, no[k].what));
    int64_t accum = 1;
    FL_TRY(get_int(c, cfg, "gradient_accumulation_steps", 1, false, &accum));
    if (accum > 1) return kfail(c, FL_ERR_UNSUPPORTED, "gradient_accumulation_steps %lld is not supported", (long long)accum);
    double decay = 0;
    FL_TRY(get_num(c, cfg, "decay", 0, false, &decay)); /* tf.keras 2 */
    if (decay != 0) return kfail(c, FL_ERR_UNSUPPORTED, "optimizer decay %g (a learning-rate schedule) is not supported", decay);
    json_object *lrv = jkey(cfg, "learning_rate");
    if (!lrv) lrv = jkey(cfg, "lr");
    fl_lr_schedule sched = {0};
    if (lrv && jis(lrv, json_type_object)) FL_TRY(schedule_from_config(c, lrv, &sched));
    else if (lrv && !jnum(lrv))
        return kfail(c, FL_ERR_FORMAT, "the learning rate is %s, expected a number or a schedule", jtype_name(lrv));
    double lr = lrv && sched.kind == FL_SCHEDULE_NONE ? json_object_get_double(lrv)
                : sched.kind != FL_SCHEDULE_NONE ? (double)fl_lr_schedule_value(&sched, 0)
                : (code == FL_OPT_SGD ? 0.01 : 0.001);
    float clipnorm, clipvalue, gclip;
    FL_TRY(get_clip(c, cfg, "clipnorm", &clipnorm));
    FL_TRY(get_clip(c, cfg, "clipvalue", &clipvalue));
    FL_TRY(get_clip(c, cfg, "global_clipnorm", &gclip));
    /* Keras applies the first that is set: clipnorm, then global_clipnorm, then clipvalue */
    if (clipnorm > 0) gclip = clipvalue = 0;
    else if (gclip > 0) clipvalue = 0;
    double wd = 0;
    json_object *wdv = jkey(cfg, "weight_decay");
    if (wdv && !jnum(wdv)) return kfail(c, FL_ERR_FORMAT, "weight_decay is %s", jtype_name(wdv));
    if (wdv) wd = json_object_get_double(wdv);
    else if (code == FL_OPT_ADAMW && !jhas(cfg, "weight_decay")) wd = 0.004;
    if (code != FL_OPT_ADAMW && wd != 0)
        return kfail(c, FL_ERR_UNSUPPORTED, "%s with weight_decay %g is not supported (use AdamW)", cls, wd);
    if ((!(lr > 0) || !isfinite(lr)) && sched.kind == FL_SCHEDULE_NONE)
        return kfail(c, FL_ERR_FORMAT, "learning_rate %g, expected > 0", lr);
    fl_optimizer *o = NULL;
    if (code == FL_OPT_SGD) {
        double mom;
        bool nest;
        FL_TRY(get_num(c, cfg, "momentum", 0, false, &mom));
        FL_TRY(get_bool(c, cfg, "nesterov", false, &nest));
        if (!(mom >= 0 && mom < 1)) return kfail(c, FL_ERR_FORMAT, "SGD momentum %g, expected [0, 1)", mom);
        o = fl_sgd_((fl_sgd_args){.learning_rate = 0.01f});
        if (o) { o->d.lr = (float)lr; o->d.momentum = (float)mom; o->d.nesterov = nest; }
    } else if (code == FL_OPT_RMSPROP) {
        double rho, mom, eps;
        bool centered;
        FL_TRY(get_num(c, cfg, "rho", 0.9, false, &rho));
        FL_TRY(get_num(c, cfg, "momentum", 0, false, &mom));
        FL_TRY(get_num(c, cfg, "epsilon", 1e-7, false, &eps));
        FL_TRY(get_bool(c, cfg, "centered", false, &centered));
        if (!(rho >= 0 && rho < 1) || !(mom >= 0 && mom < 1) || !(eps >= 0))
            return kfail(c, FL_ERR_FORMAT, "RMSprop rho %g, momentum %g, epsilon %g out of range", rho, mom, eps);
        o = fl_rmsprop_((fl_rmsprop_args){.learning_rate = 0.001f});
        if (o) { o->d.lr = (float)lr; o->d.rho = (float)rho; o->d.momentum = (float)mom; o->d.eps = (float)eps; o->d.centered = centered; }
    } else {
        double b1, b2, eps;
        FL_TRY(get_num(c, cfg, "beta_1", 0.9, false, &b1));
        FL_TRY(get_num(c, cfg, "beta_2", 0.999, false, &b2));
        FL_TRY(get_num(c, cfg, "epsilon", 1e-7, false, &eps));
        if (!(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1) || !(eps >= 0) || !(wd >= 0))
            return kfail(c, FL_ERR_FORMAT, "%s beta_1 %g, beta_2 %g, epsilon %g, weight_decay %g out of range", cls, b1, b2, eps, wd);
        o = code == FL_OPT_ADAM ? fl_adam_((fl_adam_args){.learning_rate = 0.001f}) : fl_adamw_((fl_adam_args){.learning_rate = 0.001f});
        if (o) { o->d.lr = (float)lr; o->d.beta1 = (float)b1; o->d.beta2 = (float)b2; o->d.eps = (float)eps; o->d.weight_decay = (float)wd; }
    }
    if (!o) return fl_last_status();
    if (fl_optimizer_set_extras(o, clipnorm, clipvalue, gclip, &sched) != FL_OK) {
        fl_optimizer_free(o);
        return kfail(c, FL_ERR_FORMAT, "%s", fl_last_error());
    }
    *out = o;
    return FL_OK;
}

static fl_status loss_from_config(const kctx *c, json_object *lv, fl_loss *out) {
    const char *name = jstr(lv);
    json_object *cfg = NULL;
    bool from_logits = false;
    if (jis(lv, json_type_array) && json_object_array_length(lv) == 1) return loss_from_config(c, json_object_array_get_idx(lv, 0), out);
    if (!name) {
        if (!jis(lv, json_type_object))
            return kfail(c, FL_ERR_UNSUPPORTED, "the loss is %s; flynn takes one loss for a model with one output", jtype_name(lv));
        FL_TRY(check_builtin_object(c, lv, "loss"));
        name = jstr(jkey(lv, "class_name"));
        cfg = jkey(lv, "config");
        if (name && strcmp(name, "function") == 0) { name = jstr(cfg); cfg = NULL; }
        if (!name) return kfail(c, FL_ERR_FORMAT, "the loss has no class_name");
        FL_TRY(get_bool(c, cfg, "from_logits", false, &from_logits));
        double ls = 0;
        FL_TRY(get_num(c, cfg, "label_smoothing", 0, false, &ls));
        if (ls != 0) return kfail(c, FL_ERR_UNSUPPORTED, "loss label_smoothing %g is not supported", ls);
        int64_t axis = -1;
        FL_TRY(get_int(c, cfg, "axis", -1, false, &axis));
        if (axis != -1) return kfail(c, FL_ERR_UNSUPPORTED, "loss axis %lld is not supported (only -1)", (long long)axis);
        FL_TRY(must_be_null(c, cfg, "ignore_class", "ignore_class"));
        const char *red = jstr(jkey(cfg, "reduction"));
        if (red && strcmp(red, "sum_over_batch_size") != 0 && strcmp(red, "auto") != 0)
            return kfail(c, FL_ERR_UNSUPPORTED, "loss reduction '%s' is not supported (sum_over_batch_size)", red);
    }
    static const struct { const char *name; fl_loss_kind k; } map[] = {
        {"sparse_categorical_crossentropy", FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY},
        {"SparseCategoricalCrossentropy", FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY},
        {"categorical_crossentropy", FL_LOSS_CATEGORICAL_CROSSENTROPY},
        {"CategoricalCrossentropy", FL_LOSS_CATEGORICAL_CROSSENTROPY},
        {"binary_crossentropy", FL_LOSS_BINARY_CROSSENTROPY},
        {"BinaryCrossentropy", FL_LOSS_BINARY_CROSSENTROPY},
        {"mean_squared_error", FL_LOSS_MEAN_SQUARED_ERROR}, {"mse", FL_LOSS_MEAN_SQUARED_ERROR},
        {"MeanSquaredError", FL_LOSS_MEAN_SQUARED_ERROR}, {"MSE", FL_LOSS_MEAN_SQUARED_ERROR}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(name, map[i].name) == 0) {
            if (from_logits && map[i].k == FL_LOSS_MEAN_SQUARED_ERROR)
                return kfail(c, FL_ERR_FORMAT, "mean_squared_error has no from_logits");
            out->kind = map[i].k;
            out->from_logits = from_logits;
            return FL_OK;
        }
    return kfail(c, FL_ERR_UNSUPPORTED, "loss '%s' is not supported (flynn has sparse_categorical_crossentropy, "
                 "categorical_crossentropy, binary_crossentropy and mean_squared_error)", name);
}

static fl_status metric_from_config(const kctx *c, json_object *mv, fl_metric *out) {
    const char *name = jstr(mv);
    if (!name) {
        if (!jis(mv, json_type_object)) return kfail(c, FL_ERR_UNSUPPORTED, "a metric is %s", jtype_name(mv));
        FL_TRY(check_builtin_object(c, mv, "metrics"));
        name = jstr(jkey(mv, "class_name"));
        json_object *cfg = jkey(mv, "config");
        if (name && strcmp(name, "function") == 0) name = jstr(cfg);
        /* tf.keras 2 saves metrics=["accuracy"] as {"class_name":
         * "MeanMetricWrapper", "config": {"name": "accuracy", "fn":
         * "categorical_accuracy"}} (fn resolved before the labels were
         * seen): the name is what the user asked for, else the function */
        if (name && strcmp(name, "MeanMetricWrapper") == 0) {
            const char *mname = jstr(jkey(cfg, "name")), *fn = jstr(jkey(cfg, "fn"));
            name = mname && (strcmp(mname, "accuracy") == 0 || strcmp(mname, "acc") == 0 ||
                             strstr(mname, "_accuracy") || strcmp(mname, "mae") == 0 || strcmp(mname, "mse") == 0)
                       ? mname : fn;
            if (!name) return kfail(c, FL_ERR_FORMAT, "metric MeanMetricWrapper has neither a known name nor an 'fn'");
        }
        double th = 0.5;
        FL_TRY(get_num(c, cfg, "threshold", 0.5, false, &th));
        if (th != 0.5) return kfail(c, FL_ERR_UNSUPPORTED, "metric threshold %g is not supported (only 0.5)", th);
        if (!name) return kfail(c, FL_ERR_FORMAT, "a metric has no class_name");
    }
    static const struct { const char *name; fl_metric m; } map[] = {
        {"accuracy", FL_ACCURACY}, {"acc", FL_ACCURACY}, {"Accuracy", FL_ACCURACY},
        {"categorical_accuracy", FL_CATEGORICAL_ACCURACY}, {"CategoricalAccuracy", FL_CATEGORICAL_ACCURACY},
        {"sparse_categorical_accuracy", FL_SPARSE_CATEGORICAL_ACCURACY},
        {"SparseCategoricalAccuracy", FL_SPARSE_CATEGORICAL_ACCURACY},
        {"binary_accuracy", FL_BINARY_ACCURACY}, {"BinaryAccuracy", FL_BINARY_ACCURACY},
        {"mae", FL_MAE}, {"mse", FL_MSE}, {"mean_absolute_error", FL_METRIC_MEAN_ABSOLUTE_ERROR},
        {"MeanAbsoluteError", FL_METRIC_MEAN_ABSOLUTE_ERROR}, {"mean_squared_error", FL_METRIC_MEAN_SQUARED_ERROR},
        {"MeanSquaredError", FL_METRIC_MEAN_SQUARED_ERROR}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(name, map[i].name) == 0) { *out = map[i].m; return FL_OK; }
    return kfail(c, FL_ERR_UNSUPPORTED, "metric '%s' is not supported (flynn has accuracy, categorical_accuracy, "
                 "sparse_categorical_accuracy, binary_accuracy, mae / mean_absolute_error and mse / "
                 "mean_squared_error)", name);
}

fl_status fl_keras_compile_from_config(fl_model *m, json_object *cc, const char *src) {
    kctx c = {.src = src};
    snprintf(c.where, sizeof c.where, "compile config");
    if (!jis(cc, json_type_object)) return kfail(&c, FL_ERR_FORMAT, "it is %s, expected an object", jtype_name(cc));
    if (m->noutputs != 1)
        return kfail(&c, FL_ERR_UNSUPPORTED, "model '%s' has %d outputs; flynn compiles and trains models with one "
                     "output (load it without compiling to predict)", m->name, m->noutputs);
    json_object *oc = jkey(cc, "optimizer");
    if (!oc) oc = jkey(cc, "optimizer_config");

    json_object *lw = jkey(cc, "loss_weights");
    if (lw) {
        bool ones = jnum(lw) && json_object_get_double(lw) == 1.0;
        if (jis(lw, json_type_array) && json_object_array_length(lw) == 1) {
            json_object *w = json_object_array_get_idx(lw, 0);
            ones = jnum(w) && json_object_get_double(w) == 1.0;
        }
        if (!ones) return kfail(&c, FL_ERR_UNSUPPORTED, "loss_weights are not supported");
    }
    json_object *wm = jkey(cc, "weighted_metrics");
    if (wm && !(jis(wm, json_type_array) && json_object_array_length(wm) == 0))
        return kfail(&c, FL_ERR_UNSUPPORTED, "weighted_metrics are not supported");
    fl_loss loss = {0};
    if (!jkey(cc, "loss")) return kfail(&c, FL_ERR_UNSUPPORTED, "there is no loss");
    FL_TRY(loss_from_config(&c, jkey(cc, "loss"), &loss));
    fl_metric metrics[FL_MAX_METRICS];
    int nm = 0;
    json_object *mv = jkey(cc, "metrics");
    if (jis(mv, json_type_array) && json_object_array_length(mv) == 1 &&
        jis(json_object_array_get_idx(mv, 0), json_type_array))
        mv = json_object_array_get_idx(mv, 0); /* per-output lists of a one-output model */
    if (mv && !jis(mv, json_type_array)) return kfail(&c, FL_ERR_UNSUPPORTED, "metrics is %s, expected a list", jtype_name(mv));
    for (size_t i = 0; mv && i < json_object_array_length(mv); i++) {
        json_object *e = json_object_array_get_idx(mv, i);
        if (!e) continue;
        if (nm == FL_MAX_METRICS) return kfail(&c, FL_ERR_UNSUPPORTED, "more than %d metrics", FL_MAX_METRICS);
        FL_TRY(metric_from_config(&c, e, &metrics[nm++]));
    }
    fl_optimizer *o = NULL;
    json_object *dflt = NULL;
    if (!oc) oc = dflt = json_object_new_string("rmsprop"); /* Keras's compile() default */
    fl_status s = optimizer_from_config(&c, oc, &o);
    json_object_put(dflt);
    if (s != FL_OK) return s;
    s = fl_compile_(m, o, loss, metrics, nm);
    if (s != FL_OK) fl_error_prefix("%s: compile config: ", src);
    return s;
}


/* The node feeding call `call` of layer l, input k (functional models). */
static const fl_sym *layer_call(const fl_model *m, const fl_layer *l, int call) {
    for (int i = 0; i < m->nsyms; i++)
        if (m->syms[i]->layer == l && m->syms[i]->call == call && !m->syms[i]->src) return m->syms[i];
    return NULL;
}

/* The input nodes of l's first call. */
static int layer_inputs(const fl_model *m, const fl_layer *l, const fl_node **ins) {
    if (!m->functional) {
        if (l->index == 0) return 0;
        ins[0] = m->layers[l->index - 1]->out;
        return 1;
    }
    const fl_sym *s = layer_call(m, l, 0);
    if (!s) return 0;
    for (int i = 0; i < s->nin; i++) ins[i] = s->in[i]->node;
    return s->nin;
}

static json_object *layer_config(const fl_layer *l) {
    json_object *c = json_object_new_object();
    if (l->kind == FL_L_INPUT) {
        put(c, "batch_shape", jshape(l->out));
        put(c, "dtype", jstring(input_dtype_name(l)));
        put(c, "sparse", jbool(false));
        put(c, "ragged", jbool(false));
        put(c, "name", jstring(l->name));
        put(c, "optional", jbool(false));
        return c;
    }
    put(c, "name", jstring(l->name));
    if (fl_layer_kind_is_op(l->kind)) { /* an operation: its name (and Any's axis) only */
        const fl_keras_layer_def *d = fl_keras_layer_by_kind(l->kind);
        if (d && d->to_config) d->to_config(l, c);
        return c;
    }
    put(c, "trainable", jbool(!l->frozen));
    put(c, "dtype", dtype_policy());
    const fl_keras_layer_def *d = fl_keras_layer_by_kind(l->kind);
    if (d && d->to_config) d->to_config(l, c);
    /* Keras 3.15's SpatialDropout2D neither writes nor accepts "trainable" */
    if (l->kind == FL_L_SPATIAL_DROPOUT2D || l->kind == FL_L_SPATIAL_DROPOUT1D) json_object_object_del(c, "trainable");
    return c;
}

/* The layers Keras gives a build_config. */
static bool has_build_config(fl_layer_kind k) {
    const fl_keras_layer_def *d = fl_keras_layer_by_kind(k);
    return d && d->build_config;
}

static json_object *keras_tensor(const fl_sym *s) {
    json_object *h = json_object_new_array();
    json_object_array_add(h, jstring(s->layer->name));
    json_object_array_add(h, jint(s->call));
    json_object_array_add(h, jint(s->index));
    json_object *c = json_object_new_object();
    put(c, "shape", jshape(s->node));
    put(c, "dtype", jstring(s->layer->kind == FL_L_INPUT ? input_dtype_name(s->layer)
                            : fl_layer_kind_is_op(s->layer->kind) ? "bool" : "float32"));
    put(c, "keras_history", h);
    json_object *t = json_object_new_object();
    put(t, "class_name", jstring("__keras_tensor__"));
    put(t, "config", c);
    return t;
}

static json_object *layer_entry(const fl_model *m, const fl_layer *l, bool legacy) {
    const char *module = !fl_layer_kind_is_op(l->kind) ? "keras.layers"
                       : l->kind == FL_L_CONVERT_TO_TENSOR ? "keras.src.ops.core" : "keras.src.ops.numpy";
    json_object *e = jobject(module, fl_layer_kind_class(l->kind), layer_config(l), legacy);
    if (!legacy && has_build_config(l->kind)) {
        const fl_node *ins[FL_NODE_MAX_IN] = {0};
        int n = layer_inputs(m, l, ins);
        json_object *shape, *sd = NULL;
        if (n == 1 && !fl_layer_kind_merges(l->kind)) {
            shape = jshape(ins[0]);
        } else if (n > 1 && fl_layer_num_states(l) > 0) { /* a call with initial_state: Keras's shapes_dict */
            shape = NULL;
            sd = json_object_new_object();
            put(sd, "sequences_shape", jshape(ins[0]));
            json_object *st = json_object_new_array();
            for (int i = 1; i < n; i++) json_object_array_add(st, jshape(ins[i]));
            put(sd, "initial_state_shape", st);
        } else {
            shape = json_object_new_array();
            for (int i = 0; i < n; i++) json_object_array_add(shape, jshape(ins[i]));
        }
        json_object *bc = json_object_new_object();
        if (sd) put(bc, "shapes_dict", sd);
        else put(bc, "input_shape", shape);
        put(e, "build_config", bc);
    }
    if (m->functional) {
        put(e, "name", jstring(l->name));
        json_object *nodes = json_object_new_array();
        /* MHA(query, value, key), logical_or(a, b): positional */
        bool merge = fl_layer_kind_merges(l->kind) && l->kind != FL_L_MHA && !fl_layer_kind_is_op(l->kind);
        for (int call = 0; l->kind != FL_L_INPUT; call++) {
            const fl_sym *s = layer_call(m, l, call);
            if (!s) break;
            json_object *args = json_object_new_array();
            if (merge) {
                json_object *lst = json_object_new_array();
                for (int i = 0; i < s->nin; i++) json_object_array_add(lst, keras_tensor(s->in[i]));
                json_object_array_add(args, lst);
            } else {
                const int na = l->kind == FL_L_MHA ? 3 : fl_layer_num_states(l) > 0 ? 1 : s->nin;
                for (int i = 0; i < s->nin && i < na; i++) json_object_array_add(args, keras_tensor(s->in[i]));
                if (l->kind == FL_L_NOT_EQUAL) json_object_array_add(args, jfloat(l->a.not_equal));
            }
            json_object *nd = json_object_new_object();
            put(nd, "args", args);
            json_object *kw = json_object_new_object();
            if (fl_layer_num_states(l) > 0 && s->nin > 1) { /* initial_state=[h, c] */
                json_object *st = json_object_new_array();
                for (int i = 1; i < s->nin; i++) json_object_array_add(st, keras_tensor(s->in[i]));
                put(kw, "initial_state", st);
            }
            if (l->inference_call) put(kw, "training", jbool(false));
            int nm = 0; /* mask=: one tensor for the first input, else a list */
            for (int i = 0; i < s->nin; i++)
                if (s->mask[i]) nm = i + 1;
            if (nm == 1 && (s->nin == 1 || fl_layer_num_states(l) > 0)) {
                put(kw, "mask", keras_tensor(s->mask[0]));
            } else if (nm > 0) {
                json_object *ml = json_object_new_array();
                for (int i = 0; i < s->nin; i++) json_object_array_add(ml, s->mask[i] ? keras_tensor(s->mask[i]) : NULL);
                put(kw, "mask", ml);
            }
            if (l->kind == FL_L_MHA && s->nin > 3) put(kw, "attention_mask", keras_tensor(s->in[3]));
            if ((l->kind == FL_L_MHA && l->a.mha.use_causal_mask) || (l->kind == FL_L_ATTENTION && l->a.att.use_causal_mask))
                put(kw, "use_causal_mask", jbool(true));
            put(nd, "kwargs", kw);
            json_object_array_add(nodes, nd);
        }
        put(e, "inbound_nodes", nodes);
    }
    return e;
}

static json_object *io_list(const fl_model *m, fl_node *const *nodes, int n) {
    json_object *a = json_object_new_array();
    for (int i = 0; i < n; i++) {
        const fl_sym *s = NULL;
        for (int k = 0; k < m->nsyms && !s; k++)
            if (m->syms[k]->node == nodes[i]) s = m->syms[k];
        json_object *r = json_object_new_array();
        json_object_array_add(r, jstring(s ? s->layer->name : "?"));
        json_object_array_add(r, jint(s ? s->call : 0));
        json_object_array_add(r, jint(s ? s->index : 0));
        json_object_array_add(a, r);
    }
    return a;
}

json_object *fl_keras_model_config(const fl_model *m, bool legacy) {
    json_object *cfg = json_object_new_object();
    json_object *layers = json_object_new_array();
    put(cfg, "name", jstring(m->name));
    put(cfg, "trainable", jbool(!m->frozen));
    if (!m->functional) put(cfg, "dtype", dtype_policy());
    for (int i = 0; i < m->nlayers; i++) json_object_array_add(layers, layer_entry(m, m->layers[i], legacy));
    put(cfg, "layers", layers);
    json_object *mc;
    if (m->functional) {
        put(cfg, "input_layers", io_list(m, m->inputs, m->ninputs));
        put(cfg, "output_layers", io_list(m, m->outputs, m->noutputs));
        mc = json_object_new_object();
        if (!legacy) put(mc, "module", jstring("keras.src.models.functional"));
        put(mc, "class_name", jstring("Functional"));
        put(mc, "config", cfg);
        if (!legacy) {
            put(mc, "registered_name", jstring("Functional"));
            json_object *bc = json_object_new_object();
            put(bc, "input_shape", NULL);
            put(mc, "build_config", bc);
        }
    } else {
        put(cfg, "build_input_shape", jshape(m->input));
        mc = jobject("keras", "Sequential", cfg, legacy);
        if (!legacy) {
            json_object *bc = json_object_new_object();
            put(bc, "input_shape", jshape(m->input));
            put(mc, "build_config", bc);
        }
    }
    if (!legacy) {
        json_object *cc = fl_keras_compile_config(m);
        put(mc, "compile_config", cc ? cc : json_object_new_object());
    }
    return mc;
}

const char *fl_keras_optimizer_name(const fl_optimizer *o) {
    switch (o ? o->code : 0) {
    case FL_OPT_SGD: return "sgd";
    case FL_OPT_ADAM: return "adam";
    case FL_OPT_ADAMW: return "adamw";
    case FL_OPT_RMSPROP: return "rmsprop";
    }
    return "optimizer";
}

static json_object *optimizer_config(const fl_optimizer *o, bool legacy) {
    const fl_opt_desc *d = &o->d;
    json_object *c = json_object_new_object();
    put(c, "name", jstring(fl_keras_optimizer_name(o)));
    const fl_lr_schedule *sched = fl_optimizer_schedule(o);
    put(c, "learning_rate", sched ? schedule_config(sched) : jfloat(d->lr));
    put(c, "weight_decay", o->code == FL_OPT_ADAMW ? jfloat(d->weight_decay) : NULL);
    float cn, cv, gcn;
    fl_optimizer_clipping(o, &cn, &cv, &gcn);
    put(c, "clipnorm", cn > 0 ? jfloat(cn) : NULL);
    put(c, "global_clipnorm", gcn > 0 ? jfloat(gcn) : NULL);
    put(c, "clipvalue", cv > 0 ? jfloat(cv) : NULL);
    put(c, "use_ema", jbool(false));
    put(c, "ema_momentum", jfloat(0.99));
    put(c, "ema_overwrite_frequency", NULL);
    put(c, "loss_scale_factor", NULL);
    put(c, "gradient_accumulation_steps", NULL);
    const char *cls = "Adam";
    switch (o->code) {
    case FL_OPT_SGD:
        cls = "SGD";
        put(c, "momentum", jfloat(d->momentum));
        put(c, "nesterov", jbool(d->nesterov));
        break;
    case FL_OPT_RMSPROP:
        cls = "RMSprop";
        put(c, "rho", jfloat(d->rho));
        put(c, "momentum", jfloat(d->momentum));
        put(c, "epsilon", jfloat(d->eps));
        put(c, "centered", jbool(d->centered));
        break;
    default:
        cls = o->code == FL_OPT_ADAMW ? "AdamW" : "Adam";
        put(c, "beta_1", jfloat(d->beta1));
        put(c, "beta_2", jfloat(d->beta2));
        put(c, "epsilon", jfloat(d->eps));
        put(c, "amsgrad", jbool(false));
        break;
    }
    return jobject("keras.optimizers", cls, c, legacy);
}

static json_object *loss_config(fl_loss l, bool legacy) {
    const char *name = fl_loss_name(l.kind);
    if (!l.from_logits) return jstring(name);
    json_object *c = json_object_new_object();
    put(c, "name", jstring(name));
    put(c, "reduction", jstring("sum_over_batch_size"));
    put(c, "from_logits", jbool(true));
    const char *cls = "SparseCategoricalCrossentropy";
    if (l.kind == FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY) {
        put(c, "ignore_class", NULL);
    } else {
        cls = l.kind == FL_LOSS_CATEGORICAL_CROSSENTROPY ? "CategoricalCrossentropy" : "BinaryCrossentropy";
        put(c, "label_smoothing", jfloat(0.0));
        put(c, "axis", jint(-1));
    }
    return jobject("keras.losses", cls, c, legacy);
}

static json_object *compile_common(const fl_model *m, bool legacy) {
    json_object *c = json_object_new_object();
    put(c, "loss", loss_config(m->loss, legacy));
    put(c, "loss_weights", NULL);
    json_object *mt = NULL;
    if (m->nmetrics) {
        mt = json_object_new_array();
        for (int i = 0; i < m->nmetrics; i++) json_object_array_add(mt, jstring(fl_metric_key(m->metrics[i])));
    }
    put(c, "metrics", mt);
    put(c, "weighted_metrics", NULL);
    put(c, "run_eagerly", jbool(false));
    put(c, "steps_per_execution", jint(1));
    put(c, "jit_compile", jbool(true));
    return c;
}

json_object *fl_keras_compile_config(const fl_model *m) {
    if (!m->compiled || !m->opt) return NULL;
    json_object *c = json_object_new_object();
    put(c, "optimizer", optimizer_config(m->opt, false));
    json_object *rest = compile_common(m, false);
    json_object_object_foreach(rest, k, v) put(c, k, json_object_get(v));
    json_object_put(rest);
    return c;
}

json_object *fl_keras_training_config(const fl_model *m) {
    if (!m->compiled || !m->opt) return NULL;
    json_object *c = compile_common(m, true);
    json_object *oc = optimizer_config(m->opt, true);
    put(c, "optimizer_config", oc);
    return c;
}

char *fl_keras_json_text(json_object *obj) {
    const char *s = json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    if (!s) return fl_error_null(FL_ERR_NOMEM, "out of memory writing JSON");
    size_t n = strlen(s);
    char *out = fl_malloc(n + 1, "JSON text");
    if (out) memcpy(out, s, n + 1);
    return out;
}
