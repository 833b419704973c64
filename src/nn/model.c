/*
 * model.c — Sequential models: building the graph from a list of layers with
 * Keras's default layer names, the summary() table, parameter counts, seeds,
 * layer lookup and the choice of device.
 */
#include "nn.h"
#include "device/gpu.h"
#include "device/opencl.h"
#include "core/error.h"
#include "core/tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void free_step_buffers(fl_model *m);
static fl_status build_calls(fl_model *m, fl_graph *g);
static fl_status probe_lengths(fl_model *m);
static const char *probe_note(const fl_model *m);

/* The outputs (and a masked output's mask, which the loss reads) are read
 * after the forward: inference's buffers keep their values (plan.h). */
static void mark_outputs(fl_model *m) {
    for (int i = 0; i < m->noutputs; i++) {
        m->outputs[i]->is_output = true;
        if (m->outputs[i]->mask) m->outputs[i]->mask->is_output = true;
    }
}

static int cmp_layer(const void *a, const void *b);

/* Keras names layers when they are made: "dense", "dense_1", ... in the
 * order the layers were constructed (which may differ from the call order). */
static void default_names(fl_model *m) {
    int counts[FL_L_COUNT] = {0};
    fl_layer **byorder = malloc((size_t)m->nlayers * sizeof *byorder);
    if (byorder) {
        memcpy(byorder, m->layers, (size_t)m->nlayers * sizeof *byorder);
        qsort(byorder, (size_t)m->nlayers, sizeof *byorder, cmp_layer);
    }
    for (int i = 0; i < m->nlayers; i++) {
        fl_layer *l = byorder ? byorder[i] : m->layers[i];
        if (l->user_named) continue;
        int c = counts[l->kind]++;
        if (c == 0) snprintf(l->name, sizeof l->name, "%s", fl_layer_kind_base(l->kind));
        else snprintf(l->name, sizeof l->name, "%s_%d", fl_layer_kind_base(l->kind), c);
    }
    free(byorder);
}

/* ------------------------------------------------ building the graph */

/* Builds every call of the model's layers into g: a Sequential's chain, or
 * a functional model's calls in topological order (each sym's node and
 * outputs set). The Input layers build for their bound shapes. The one
 * place a model's graph is made: at creation, and again for each new
 * length of a None axis (rebuild). */
static fl_status build_calls(fl_model *m, fl_graph *g) {
    if (!m->functional) {
        fl_node *x = NULL;
        for (int i = 0; i < m->nlayers; i++) {
            fl_layer *l = m->layers[i];
            if (fl_layer_num_outputs(l) > 1) /* Keras's Sequential cannot chain a list of outputs either */
                return fl_error(FL_ERR_UNSUPPORTED, "layer '%s' (%s) has %d outputs (return_state or merge_mode "
                                "None); use it in a functional model (fl_call, fl_output)", l->name,
                                fl_layer_kind_class(l->kind), fl_layer_num_outputs(l));
            x = fl_layer_build(l, g, &x, i == 0 ? 0 : 1, m->seed);
            if (!x) return fl_last_status();
        }
        return FL_OK;
    }
    for (int k = 0; k < m->nsyms; k++) {
        fl_sym *s = m->syms[k];
        if (s->src) { /* output `index` of a call built before it (created later) */
            s->call = s->src->call;
            s->node = s->src->outs[s->index];
            continue;
        }
        fl_node *xs[FL_NODE_MAX_IN], *own[FL_NODE_MAX_IN];
        for (int i = 0; i < s->nin; i++) xs[i] = s->in[i]->node;
        /* masks given to the call stand for the inputs' own while it is built (its ops take them) */
        for (int i = 0; i < s->nin; i++) own[i] = xs[i]->mask;
        for (int i = 0; i < s->nin; i++)
            if (s->mask[i]) xs[i]->mask = s->mask[i]->node;
        s->call = s->layer->ncalls;
        s->node = fl_layer_build(s->layer, g, xs, s->nin, m->seed);
        for (int i = 0; i < s->nin; i++) xs[i]->mask = own[i];
        if (!s->node) return fl_last_status();
        for (int i = 0; i < s->layer->nouts; i++) s->outs[i] = s->layer->outs[i];
    }
    return FL_OK;
}

/* A layer and the layers it wraps (TimeDistributed, Bidirectional), into out[]. */
static int layer_tree(fl_layer *l, fl_layer **out, int n, int cap) {
    if (!l || n >= cap) return n;
    out[n++] = l;
    if (l->kind == FL_L_TIME_DISTRIBUTED) n = layer_tree(l->a.td.inner, out, n, cap);
    if (l->kind == FL_L_BIDIRECTIONAL) {
        n = layer_tree(l->a.bidi.fwd, out, n, cap);
        n = layer_tree(l->a.bidi.bwd, out, n, cap);
    }
    return n;
}

/* Builds the graph again for the Input layers' bound shapes into a scratch
 * graph whose layers take their existing weights, and moves the new shapes
 * onto the model's graph (fl_graph_rebind). What the build writes into the
 * layers and calls (their output nodes, call counts) is put back as it
 * was: the model's nodes keep their identity. On failure nothing changes. */
static fl_status rebuild(fl_model *m) {
    int cap = 4 * m->nlayers + 4, nt = 0;
    fl_layer **tree = fl_calloc((size_t)cap, sizeof *tree, "layer list");
    fl_layer *saved = tree ? fl_calloc((size_t)cap, sizeof *saved, "layer copies") : NULL;
    fl_sym *ssaved = saved && m->nsyms ? fl_calloc((size_t)m->nsyms, sizeof *ssaved, "call copies") : NULL;
    if (!saved || (m->nsyms && !ssaved)) { free(tree); free(saved); return fl_last_status(); }
    for (int i = 0; i < m->nlayers; i++) nt = layer_tree(m->layers[i], tree, nt, cap);
    for (int i = 0; i < nt; i++) saved[i] = *tree[i];
    for (int k = 0; k < m->nsyms; k++) ssaved[k] = *m->syms[k];
    for (int i = 0; i < m->nlayers; i++) m->layers[i]->ncalls = 0;
    fl_graph s;
    fl_graph_init(&s, m->g.be);
    s.seed = m->g.seed;
    s.param_bytes = m->g.param_bytes;
    s.adopting = true;
    s.bytes_limit = fl_model_bytes_limit();
    fl_status st = build_calls(m, &s);
    for (int i = 0; i < nt; i++) *tree[i] = saved[i];
    for (int k = 0; k < m->nsyms; k++) *m->syms[k] = ssaved[k];
    free(tree); free(saved); free(ssaved);
    if (st != FL_OK) {
        fl_graph_scratch_free(&m->g, &s);
        return st;
    }
    FL_TRY(fl_graph_rebind(&m->g, &s));
    double *stats = m->stats; /* the running totals of a fit under way (a callback predicting) stay */
    m->stats = NULL;
    free_step_buffers(m); /* sized for the old shapes: made again on the next step */
    m->stats = stats;
    return FL_OK;
}

/* Does an input have a None axis? (m->in_layers[0..ninputs) set) */
static bool any_dynamic(const fl_model *m) {
    for (int i = 0; i < m->ninputs; i++) {
        const fl_layer *l = m->in_layers[i];
        for (int d = 0; d < l->a.shape.ndim; d++)
            if (l->a.shape.shape[d] == FL_DYNAMIC) return true;
    }
    return false;
}

/* For the first build, when it failed: the length the None axes had, which
 * its message shows in place of None. */
static const char *probe_note(const fl_model *m) {
    static _Thread_local char note[64];
    if (!any_dynamic(m)) return "";
    snprintf(note, sizeof note, "(with the None input axes at length %d) ", FL_PROBE_LENGTH_A);
    return note;
}

/* A model with None input axes, built at length A: built again at B, which
 * marks the dimensions that follow the length and refuses a layer whose
 * weights would (Keras's error for a variable on a None dimension). */
static fl_status probe_lengths(fl_model *m) {
    if (!any_dynamic(m)) return FL_OK;
    for (int i = 0; i < m->ninputs; i++) {
        fl_layer *l = m->in_layers[i];
        for (int d = 0; d < l->a.shape.ndim; d++)
            if (l->a.shape.shape[d] == FL_DYNAMIC) l->a.shape.bound[d] = FL_PROBE_LENGTH_B;
    }
    fl_status st = rebuild(m);
    if (st == FL_OK) m->dynamic = true;
    else if (st != FL_ERR_SHAPE || !strstr(fl_last_error(), "fully-defined")) /* not Keras's own message */
        fl_error_prefix("(with the None input axes at length %d) ", FL_PROBE_LENGTH_B);
    return st;
}

fl_status fl_model_bind(fl_model *m, const fl_tensor *const *xs, int nx, const char *what) {
    if (!m->dynamic) return FL_OK;
    int64_t want[FL_MODEL_MAX_IO][FL_MAX_DIMS];
    bool change = false;
    for (int i = 0; i < m->ninputs; i++) {
        const fl_layer *l = m->in_layers[i];
        memcpy(want[i], l->a.shape.bound, sizeof want[i]);
        if (i >= nx || !xs[i] || xs[i]->ndim != l->a.shape.ndim + 1) continue; /* the shape check says what is wrong */
        for (int d = 0; d < l->a.shape.ndim; d++)
            if (l->a.shape.shape[d] == FL_DYNAMIC && xs[i]->shape[d + 1] > 0) want[i][d] = xs[i]->shape[d + 1];
        change |= memcmp(want[i], l->a.shape.bound, sizeof want[i]) != 0;
    }
    if (!change) return FL_OK;
    int64_t old[FL_MODEL_MAX_IO][FL_MAX_DIMS];
    for (int i = 0; i < m->ninputs; i++) {
        memcpy(old[i], m->in_layers[i]->a.shape.bound, sizeof old[i]);
        memcpy(m->in_layers[i]->a.shape.bound, want[i], sizeof want[i]);
    }
    fl_status st = rebuild(m);
    if (st == FL_OK) return FL_OK;
    for (int i = 0; i < m->ninputs; i++) memcpy(m->in_layers[i]->a.shape.bound, old[i], sizeof old[i]);
    char a[160];
    fl_layer *l0 = m->in_layers[0];
    fl_error_prefix("%s: model '%s' cannot run on inputs of this length (input '%s' bound to %s): ", what, m->name,
                    l0->name, fl_shape_str(l0->a.shape.ndim, want[0], a, sizeof a));
    return st;
}

fl_model *fl_sequential_(fl_layer *const *layers, int n, const char *name) {
    fl_model *m = NULL;
    for (int i = 0; i < n; i++) {
        if (!layers[i]) {
            /* keep the constructor's message: it says what was wrong */
            char why[768];
            snprintf(why, sizeof why, "%s", fl_last_error());
            for (int k = 0; k < n; k++) fl_layer_free(layers[k]);
            return fl_error_null(fl_last_status() ? fl_last_status() : FL_ERR_INVALID_ARG,
                                 "fl_sequential: layer %d could not be created: %s", i, why[0] ? why : "(NULL layer)");
        }
    }
    if (n < 2 || layers[0]->kind != FL_L_INPUT) {
        for (int k = 0; k < n; k++) fl_layer_free(layers[k]);
        return fl_error_null(FL_ERR_INVALID_ARG,
                             "fl_sequential: the first layer must be fl_input(...) followed by at least one layer");
    }
    for (int i = 1; i < n; i++)
        if (layers[i]->kind == FL_L_INPUT) {
            for (int k = 0; k < n; k++) fl_layer_free(layers[k]);
            return fl_error_null(FL_ERR_INVALID_ARG, "fl_sequential: layer %d is a second fl_input", i);
        }
    m = fl_calloc(1, sizeof *m, "model");
    if (!m) goto fail_layers;
    m->layers = fl_calloc((size_t)n, sizeof *m->layers, "model layers");
    if (!m->layers) { free(m); goto fail_layers; }
    memcpy(m->layers, layers, (size_t)n * sizeof *layers);
    m->nlayers = n;
    snprintf(m->name, sizeof m->name, "%s", name ? name : "sequential");
    for (int i = 0; i < n; i++) m->layers[i]->index = i;
    default_names(m);
    /* layer names must be unique, as in Keras */
    for (int i = 0; i < n; i++)
        for (int k = 0; k < i; k++)
            if (strcmp(m->layers[i]->name, m->layers[k]->name) == 0) {
                fl_error(FL_ERR_INVALID_ARG, "fl_sequential: two layers are named '%s' (layers %d and %d)",
                         m->layers[i]->name, k, i);
                fl_model_free(m);
                return NULL;
            }
    fl_graph_init(&m->g, fl_backend_cpu());
    m->device = FL_DEVICE_CPU;
    m->in_layers[0] = m->layers[0];
    m->ninputs = 1;
    if (build_calls(m, &m->g) != FL_OK) {
        fl_error_prefix("fl_sequential: %s", probe_note(m));
        fl_model_free(m);
        return NULL;
    }
    m->input = m->layers[0]->out;
    m->output = m->layers[n - 1]->out;
    m->ninputs = m->noutputs = 1;
    m->inputs[0] = m->input;
    m->outputs[0] = m->output;
    mark_outputs(m);
    fl_graph_finalize(&m->g);
    if (probe_lengths(m) != FL_OK) {
        fl_error_prefix("fl_sequential: ");
        fl_model_free(m);
        return NULL;
    }
    return m;
fail_layers:
    for (int k = 0; k < n; k++) fl_layer_free(layers[k]);
    return NULL;
}

/* ------------------------------------------------------ functional */

static _Thread_local int64_t g_sym_order;

int fl_model_input_dtype(const fl_model *m, int i) {
    if (!m || i < 0 || i >= m->ninputs) return -1;
    return m->inputs[i]->int_val ? FL_INT32 : FL_FLOAT32;
}

fl_sym *fl_keras_input_(int ndim, const int64_t *shape, const char *name) {
    return fl_keras_input_dtype_(FL_FLOAT32, ndim, shape, name);
}

fl_sym *fl_keras_input_dtype_(fl_dtype dtype, int ndim, const int64_t *shape, const char *name) {
    fl_layer *l = fl_input_dtype_(dtype, ndim, shape);
    if (!l) return NULL;
    if (name && *name) {
        if (strlen(name) >= sizeof l->name) {
            fl_layer_free(l);
            return fl_error_null(FL_ERR_INVALID_ARG, "Input: name '%.40s...' is too long", name);
        }
        strcpy(l->name, name);
        l->user_named = true;
    }
    fl_sym *s = fl_calloc(1, sizeof *s, "symbolic tensor");
    if (!s) { fl_layer_free(l); return NULL; }
    s->layer = l;
    s->order = ++g_sym_order;
    return s;
}

/* A layer that no call has used yet is freed when its first call fails,
 * so that a failed chain of fl_call leaks nothing. */
static fl_sym *call_failed(fl_layer *layer) {
    if (layer && layer->ncalls == 0 && layer->kind != FL_L_INPUT) fl_layer_free(layer);
    return NULL;
}

fl_sym *fl_call_n_(fl_layer *layer, fl_sym *const *inputs, int n) {
    if (!layer) {
        if (fl_last_status() == FL_OK) fl_error(FL_ERR_INVALID_ARG, "fl_call: layer is NULL");
        return NULL; /* keep the constructor's message */
    }
    if (layer->kind == FL_L_INPUT) {
        fl_error(FL_ERR_INVALID_ARG, "fl_call: an InputLayer cannot be called; use fl_keras_input");
        return call_failed(layer);
    }
    if (n < 1 || n > FL_NODE_MAX_IN) {
        fl_error(FL_ERR_INVALID_ARG, "fl_call: %d inputs, expected 1 to %d", n, FL_NODE_MAX_IN);
        return call_failed(layer);
    }
    for (int i = 0; i < n; i++)
        if (!inputs[i]) {
            if (fl_last_status() == FL_OK) fl_error(FL_ERR_INVALID_ARG, "fl_call: input %d is NULL", i);
            return call_failed(layer); /* an earlier call failed: its message stays */
        }
    fl_sym *s = fl_calloc(1, sizeof *s, "symbolic tensor");
    if (!s) return call_failed(layer);
    layer->ncalls++; /* counts calls until fl_model_new builds them */
    s->layer = layer;
    s->nin = n;
    for (int i = 0; i < n; i++) s->in[i] = inputs[i];
    s->order = ++g_sym_order;
    return s;
}

fl_sym *fl_output(fl_sym *call, int index) {
    if (!call) {
        if (fl_last_status() == FL_OK) fl_error(FL_ERR_INVALID_ARG, "fl_output: the call is NULL");
        return NULL; /* keep the failed call's message */
    }
    if (call->src)
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_output: the tensor is already output %d of a call of layer '%s'; "
                             "pass the call itself", call->index, call->layer->name);
    int n = fl_layer_num_outputs(call->layer);
    if (index < 0 || index >= n)
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_output: layer '%s' (%s) has %d output%s, there is no output %d%s",
                             call->layer->name[0] ? call->layer->name : "unnamed", fl_layer_kind_class(call->layer->kind),
                             n, n == 1 ? "" : "s", index,
                             n == 1 && fl_layer_num_states(call->layer) ? " (its final states need return_state)" : "");
    if (index == 0) return call;
    if (call->outsym[index]) return call->outsym[index];
    fl_sym *s = fl_calloc(1, sizeof *s, "symbolic tensor");
    if (!s) return NULL;
    s->layer = call->layer;
    s->src = call;
    s->index = index;
    s->order = ++g_sym_order;
    return call->outsym[index] = s;
}

/* the call a tensor is an output of */
static fl_sym *call_of(fl_sym *s) { return s->src ? s->src : s; }

static int cmp_sym(const void *a, const void *b) {
    const fl_sym *x = *(fl_sym *const *)a, *y = *(fl_sym *const *)b;
    return x->order < y->order ? -1 : x->order > y->order;
}
static int cmp_layer(const void *a, const void *b) {
    const fl_layer *x = *(fl_layer *const *)a, *y = *(fl_layer *const *)b;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Every symbolic tensor the outputs depend on (marked, appended to out). */
static fl_status collect(fl_sym *s, fl_sym ***out, int *n, int *cap) {
    if (s->mark) return FL_OK;
    s->mark = true;
    if (*n == *cap) {
        int c = *cap ? *cap * 2 : 32;
        fl_sym **p = realloc(*out, (size_t)c * sizeof *p);
        if (!p) return fl_error(FL_ERR_NOMEM, "out of memory collecting the model's layers");
        *out = p;
        *cap = c;
    }
    (*out)[(*n)++] = s;
    for (int i = 0; i < s->nin; i++) FL_TRY(collect(s->in[i], out, n, cap));
    for (int i = 0; i < s->nin; i++)
        if (s->mask[i]) FL_TRY(collect(s->mask[i], out, n, cap));
    if (s->src) FL_TRY(collect(s->src, out, n, cap)); /* a call's outputs go with it */
    for (int i = 0; i < FL_LAYER_MAX_OUTS; i++)
        if (s->outsym[i]) FL_TRY(collect(s->outsym[i], out, n, cap));
    return FL_OK;
}

/* Keras lists a functional model's layers as keras.src.ops.function.map_graph
 * does: a depth-first walk from each output in turn (inputs in call order)
 * numbers each layer when it first reaches it and lists the calls as it
 * finishes them; then, from the outputs back, each call gets a depth (the
 * longest path to an output, raised to the deepest depth its layer already
 * has, which a shared layer passes on to its inputs); layers go deepest
 * first, ties in the walk's numbering. The weights of a Keras file are
 * stored by this order, so it has to be exact. */
static int sym_index(fl_sym *const *all, int n, const fl_sym *s) {
    for (int k = 0; k < n; k++)
        if (all[k] == s) return k;
    return -1;
}
static int layer_index(fl_layer *const *layers, int nl, const fl_layer *l) {
    for (int k = 0; k < nl; k++)
        if (layers[k] == l) return k;
    return -1;
}

typedef struct keras_walk {
    fl_sym **all; int n;
    fl_layer **layers; int nl;
    int *state;      /* per call: 0 new, 1 in progress, 2 finished */
    int *post;       /* calls in finishing order */
    int npost;
    int *first;      /* per layer: walk number, -1 before it is reached */
    int next;
} keras_walk;

static void keras_dfs(keras_walk *w, fl_sym *s) {
    s = call_of(s);
    int k = sym_index(w->all, w->n, s);
    if (k < 0 || w->state[k] != 0) return;
    int li = layer_index(w->layers, w->nl, s->layer);
    if (li >= 0 && w->first[li] < 0) w->first[li] = w->next++;
    w->state[k] = 1;
    for (int i = 0; i < s->nin; i++) keras_dfs(w, s->in[i]);
    for (int i = 0; i < s->nin; i++) /* then the call's keyword tensors, as Keras flattens them */
        if (s->mask[i]) keras_dfs(w, s->mask[i]);
    w->state[k] = 2;
    w->post[w->npost++] = k;
}

typedef struct layer_key { fl_layer *l; int depth, index; } layer_key;
static int cmp_key(const void *a, const void *b) {
    const layer_key *x = a, *y = b;
    if (x->depth != y->depth) return y->depth - x->depth;
    return x->index - y->index;
}

static void order_like_keras(fl_layer **layers, int nl, fl_sym **all, int n, fl_sym *const *outputs, int nout) {
    keras_walk w = {all, n, layers, nl, calloc((size_t)n + 1, sizeof(int)), calloc((size_t)n + 1, sizeof(int)), 0,
                    malloc(((size_t)nl + 1) * sizeof(int)), 0};
    int *node_depth = calloc((size_t)n + 1, sizeof(int)), *layer_depth = calloc((size_t)nl + 1, sizeof(int));
    layer_key *keys = calloc((size_t)nl + 1, sizeof *keys);
    if (!w.state || !w.post || !w.first || !node_depth || !layer_depth || !keys) goto done; /* creation order stays */
    for (int i = 0; i < nl; i++) w.first[i] = -1;
    for (int o = 0; o < nout; o++) keras_dfs(&w, outputs[o]);
    for (int p = w.npost - 1; p >= 0; p--) {
        int k = w.post[p];
        int li = layer_index(layers, nl, all[k]->layer);
        int depth = node_depth[k];
        if (li >= 0 && layer_depth[li] > depth) depth = layer_depth[li];
        if (li >= 0) layer_depth[li] = depth;
        node_depth[k] = depth;
        for (int i = 0; i < 2 * all[k]->nin; i++) { /* the inputs, then the masks given */
            fl_sym *in = i < all[k]->nin ? all[k]->in[i] : all[k]->mask[i - all[k]->nin];
            int pk = in ? sym_index(all, n, call_of(in)) : -1;
            if (pk >= 0 && node_depth[pk] < depth + 1) node_depth[pk] = depth + 1;
        }
    }
    for (int i = 0; i < nl; i++) {
        keys[i].l = layers[i];
        keys[i].depth = layer_depth[i];
        keys[i].index = w.first[i] < 0 ? (1 << 30) + i : w.first[i];
    }
    qsort(keys, (size_t)nl, sizeof *keys, cmp_key);
    for (int i = 0; i < nl; i++) layers[i] = keys[i].l;
done:
    free(w.state); free(w.post); free(w.first); free(node_depth); free(layer_depth); free(keys);
}

/* On failure fl_model_new frees what it was given: every symbolic tensor
 * reachable from the inputs and outputs, and their layers. */
static void discard(fl_sym *const *inputs, int nin, fl_sym *const *outputs, int nout) {
    fl_sym **all = NULL;
    int n = 0, cap = 0;
    for (int i = 0; i < nout; i++)
        if (outputs[i] && collect(outputs[i], &all, &n, &cap) != FL_OK) break;
    for (int i = 0; i < nin; i++)
        if (inputs[i] && collect(inputs[i], &all, &n, &cap) != FL_OK) break;
    for (int k = 0; k < n; k++) {
        fl_layer *l = all[k]->layer;
        bool first = true; /* free each layer once */
        for (int j = 0; j < k; j++) first &= all[j]->layer != l;
        if (first) all[k]->layer = l; else all[k]->layer = NULL;
    }
    for (int k = 0; k < n; k++) {
        if (all[k]->layer) fl_layer_free(all[k]->layer);
        free(all[k]);
    }
    free(all);
}

/* Checks the counts, that every input and output was made, and that the inputs are fl_keras_input's. */
static fl_status check_model_args(fl_sym *const *inputs, int nin, fl_sym *const *outputs, int nout) {
    if (nin < 1 || nout < 1 || nin > FL_MODEL_MAX_IO || nout > FL_MODEL_MAX_IO)
        return fl_error(FL_ERR_INVALID_ARG, "fl_model_new: %d inputs and %d outputs, expected 1 to %d of each", nin,
                        nout, FL_MODEL_MAX_IO);
    /* a NULL is usually a failed call before: keep its message and say where it went */
    for (int i = 0; i < nin; i++)
        if (!inputs[i]) {
            if (fl_last_status() == FL_OK) fl_error(FL_ERR_INVALID_ARG, "fl_model_new: input %d is NULL", i);
            fl_error_prefix("fl_model_new: input %d could not be made: ", i);
            return fl_last_status();
        }
    for (int i = 0; i < nout; i++)
        if (!outputs[i]) {
            if (fl_last_status() == FL_OK) fl_error(FL_ERR_INVALID_ARG, "fl_model_new: output %d is NULL", i);
            fl_error_prefix("fl_model_new: output %d could not be made: ", i);
            return fl_last_status();
        }
    for (int i = 0; i < nin; i++)
        if (inputs[i]->layer->kind != FL_L_INPUT || inputs[i]->nin != 0)
            return fl_error(FL_ERR_INVALID_ARG, "fl_model_new: input %d is not an fl_keras_input", i);
    return FL_OK;
}

/* Collects (and marks) every symbolic tensor the outputs depend on into *all, then checks that each input is used
 * and that nothing depends on an input the model was not given. */
static fl_status collect_graph(fl_sym *const *inputs, int nin, fl_sym *const *outputs, int nout, fl_sym ***all,
                               int *n, int *cap) {
    for (int i = 0; i < nout; i++) FL_TRY(collect(outputs[i], all, n, cap));
    for (int i = 0; i < nin; i++)
        if (!inputs[i]->mark)
            return fl_error(FL_ERR_INVALID_ARG, "fl_model_new: input %d ('%s') is not used by any output", i,
                            inputs[i]->layer->name[0] ? inputs[i]->layer->name : "unnamed");
    for (int k = 0; k < *n; k++) {
        if ((*all)[k]->layer->kind != FL_L_INPUT) continue;
        bool given = false;
        for (int i = 0; i < nin; i++) given |= inputs[i] == (*all)[k];
        if (!given)
            return fl_error(FL_ERR_INVALID_ARG,
                            "fl_model_new: the outputs depend on an input that is not in the model's inputs");
    }
    return FL_OK;
}

/* Sorts the tensors into creation order and lists their layers, once each, in that order; NULL when out of memory. */
static fl_layer **distinct_layers(fl_sym **all, int n, int *nl_out) {
    qsort(all, (size_t)n, sizeof *all, cmp_sym);
    fl_layer **layers = fl_calloc((size_t)n, sizeof *layers, "model layers");
    int nl = 0;
    if (!layers) return NULL;
    for (int k = 0; k < n; k++) {
        bool seen = false;
        for (int j = 0; j < nl; j++) seen |= layers[j] == all[k]->layer;
        if (!seen) layers[nl++] = all[k]->layer;
    }
    *nl_out = nl;
    return layers;
}

/* Hands the layers and tensors to m, names the unnamed layers and refuses two layers of one name. */
static fl_status fill_model(fl_model *m, fl_layer **layers, int nl, fl_sym **all, int n, const char *name) {
    m->layers = layers;
    m->nlayers = nl;
    m->syms = all;
    m->nsyms = n;
    m->functional = true;
    snprintf(m->name, sizeof m->name, "%s", name ? name : "functional");
    for (int i = 0; i < nl; i++) { layers[i]->index = i; layers[i]->ncalls = 0; }
    default_names(m);
    for (int i = 0; i < nl; i++)
        for (int k = 0; k < i; k++)
            if (strcmp(layers[i]->name, layers[k]->name) == 0)
                return fl_error(FL_ERR_INVALID_ARG, "fl_model_new: two layers are named '%s'", layers[i]->name);
    return FL_OK;
}

/* Builds the model's graph from the calls, on the CPU, and checks the lengths it gives. */
static fl_status build_model_graph(fl_model *m, fl_sym *const *inputs, int nin, fl_sym *const *outputs, int nout) {
    fl_graph_init(&m->g, fl_backend_cpu());
    m->device = FL_DEVICE_CPU;
    for (int k = 0; k < m->nsyms; k++) m->syms[k]->mark = false;
    for (int i = 0; i < nin; i++) m->in_layers[i] = inputs[i]->layer;
    m->ninputs = nin;
    fl_status s = build_calls(m, &m->g);
    if (s != FL_OK) {
        fl_error_prefix("fl_model_new: %s", probe_note(m));
        return s;
    }
    m->ninputs = nin;
    m->noutputs = nout;
    for (int i = 0; i < nin; i++) m->inputs[i] = inputs[i]->node;
    for (int i = 0; i < nout; i++) m->outputs[i] = outputs[i]->node;
    m->input = m->inputs[0];
    m->output = m->outputs[0];
    mark_outputs(m);
    fl_graph_finalize(&m->g);
    if ((s = probe_lengths(m)) != FL_OK) fl_error_prefix("fl_model_new: ");
    return s;
}

fl_model *fl_model_new(fl_sym *const *inputs, int nin, fl_sym *const *outputs, int nout, const char *name) {
    fl_sym **all = NULL;
    int n = 0, cap = 0, nl = 0;
    if (check_model_args(inputs, nin, outputs, nout) != FL_OK) goto discard_all;
    if (collect_graph(inputs, nin, outputs, nout, &all, &n, &cap) != FL_OK) goto fail_unmark;
    fl_layer **layers = distinct_layers(all, n, &nl);
    if (!layers) goto fail_unmark;
    order_like_keras(layers, nl, all, n, outputs, nout);
    fl_model *m = fl_calloc(1, sizeof *m, "model");
    if (!m) { free(layers); goto fail_unmark; }
    /* from here m owns the layers and tensors: its free releases them */
    if (fill_model(m, layers, nl, all, n, name) != FL_OK || build_model_graph(m, inputs, nin, outputs, nout) != FL_OK) {
        fl_model_free(m);
        return NULL;
    }
    return m;
fail_unmark:
    for (int k = 0; k < n; k++) all[k]->mark = false;
    free(all);
discard_all:
    discard(inputs, nin > 0 && nin <= FL_MODEL_MAX_IO ? nin : 0, outputs, nout > 0 && nout <= FL_MODEL_MAX_IO ? nout : 0);
    return NULL;
}

int fl_model_num_inputs(const fl_model *m) { return m ? m->ninputs : 0; }
int fl_model_num_outputs(const fl_model *m) { return m ? m->noutputs : 0; }

static int node_shape(const fl_node *n, int64_t *shape) {
    for (int i = 1; i < n->ndim; i++) shape[i - 1] = n->dyn & (1u << i) ? FL_DYNAMIC : n->shape[i];
    return n->ndim - 1;
}
int fl_model_input_shape(const fl_model *m, int i, int64_t *shape) {
    if (!m || i < 0 || i >= m->ninputs) return -1;
    return node_shape(m->inputs[i], shape);
}
const char *fl_model_input_name(const fl_model *m, int i) {
    if (!m || i < 0 || i >= m->ninputs) return NULL;
    return m->inputs[i]->name;
}
int fl_model_output_shape(const fl_model *m, int i, int64_t *shape) {
    if (!m || i < 0 || i >= m->noutputs) return -1;
    return node_shape(m->outputs[i], shape);
}

void fl_model_free(fl_model *m) {
    if (!m) return;
    const fl_backend *be = m->g.be;
    if (be) free_step_buffers(m);
    fl_optimizer_free(m->opt);
    for (int i = 0; i < m->nlayers; i++) fl_layer_free(m->layers[i]);
    free(m->layers);
    for (int i = 0; i < m->nsyms; i++) free(m->syms[i]);
    free(m->syms);
    fl_graph_free(&m->g);
    free(m);
}

fl_status fl_model_set_seed(fl_model *m, uint64_t seed) {
    if (!m) return fl_error(FL_ERR_INVALID_ARG, "fl_model_set_seed: model is NULL");
    m->seed = seed;
    m->g.seed = seed;
    for (int i = 0; i < m->nlayers; i++) { /* initialized again, when next read (fl_layer_weights_ready) */
        if (!m->layers[i]->g) continue;
        m->layers[i]->init_pending = true;
        m->layers[i]->init_seed = seed;
    }
    return FL_OK;
}

void fl_model_weights_ready(fl_model *m) {
    if (!m) return;
    for (int i = 0; i < m->nlayers; i++) fl_layer_weights_ready(m->layers[i]);
}

static int64_t count(const fl_model *m, int which /* 0 all, 1 trainable, 2 non-trainable */) {
    int64_t t = 0;
    for (int i = 0; i < m->nlayers; i++)
        for (int k = 0; k < m->layers[i]->nw; k++) {
            fl_node *w = m->layers[i]->w[k];
            if (which == 0 || (which == 1) == w->trainable) t += fl_node_size(w);
        }
    return t;
}

int64_t fl_model_count_params(const fl_model *m) { return m ? count(m, 0) : 0; }
int64_t fl_model_count_trainable_params(const fl_model *m) { return m ? count(m, 1) : 0; }

fl_status fl_model_set_trainable(fl_model *m, bool trainable) {
    if (!m) return fl_error(FL_ERR_INVALID_ARG, "fl_model_set_trainable: model is NULL");
    for (int i = 0; i < m->nlayers; i++) FL_TRY(fl_layer_set_trainable(m->layers[i], trainable));
    m->frozen = !trainable;
    return FL_OK;
}

static const char *thousands(int64_t v, char *buf, size_t n) {
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%lld", (long long)v);
    size_t len = strlen(tmp), o = 0;
    for (size_t i = 0; i < len && o + 1 < n; i++) {
        if (i > 0 && (len - i) % 3 == 0 && tmp[0] != '-') buf[o++] = ',';
        buf[o++] = tmp[i];
    }
    buf[o] = 0;
    return buf;
}

/* Keras's readable_memory_size: 1024 steps, two decimals. */
static const char *mem_size(double bytes, char *buf, size_t n) {
    static const char *u[] = {"B", "KB", "MB", "GB", "TB", "PB"};
    int i = 0;
    while (i < 5 && bytes / 1024.0 >= 1.0) { bytes /= 1024.0; i++; }
    snprintf(buf, n, "%.2f %s", bytes, u[i]);
    return buf;
}

/* ---- the summary table, drawn as Keras 3 (rich) draws it for an 80-column
 * console, which is what it prints to a file or a pipe ---- */

static int utf8_cols(const char *s, size_t len) {
    int c = 0;
    for (size_t i = 0; i < len; i++) if (((unsigned char)s[i] & 0xC0) != 0x80) c++;
    return c;
}

#define CELL_LINES 8
typedef struct cell { char line[CELL_LINES][160]; int n; } cell;

/* Greedy word wrap at spaces; a word longer than the width is cut with "…". */
static void wrap(const char *text, int width, cell *c) {
    c->n = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", text);
    char *save = NULL;
    char cur[160] = "";
    for (char *w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        char word[160];
        if ((int)strlen(w) > width) snprintf(word, sizeof word, "%.*s…", width - 1, w);
        else snprintf(word, sizeof word, "%s", w);
        int cl = utf8_cols(cur, strlen(cur)), wl = utf8_cols(word, strlen(word));
        if (cur[0] && cl + 1 + wl <= width) {
            size_t l = strlen(cur), wlen = strlen(word);
            if (l + 1 + wlen < sizeof cur) {
                cur[l] = ' ';
                memcpy(cur + l + 1, word, wlen + 1);
            }
        } else {
            if (cur[0] && c->n < CELL_LINES) snprintf(c->line[c->n++], sizeof c->line[0], "%s", cur);
            snprintf(cur, sizeof cur, "%s", word);
        }
    }
    if (c->n < CELL_LINES) snprintf(c->line[c->n++], sizeof c->line[0], "%s", cur);
}

typedef struct table { int ncol; const int *w; const bool *right; FILE *f; } table;

static void rule(const table *t, const char *l, const char *mid, const char *r, const char *h) {
    fputs(l, t->f);
    for (int c = 0; c < t->ncol; c++) {
        for (int i = 0; i < t->w[c]; i++) fputs(h, t->f);
        fputs(c < t->ncol - 1 ? mid : r, t->f);
    }
    fputc('\n', t->f);
}

static void row(const table *t, const char *bar, const char *const *texts) {
    cell cells[4];
    int lines = 1;
    for (int c = 0; c < t->ncol; c++) {
        wrap(texts[c], t->w[c] - 2, &cells[c]);
        if (cells[c].n > lines) lines = cells[c].n;
    }
    for (int ln = 0; ln < lines; ln++) {
        fputs(bar, t->f);
        for (int c = 0; c < t->ncol; c++) {
            const char *s = ln < cells[c].n ? cells[c].line[ln] : "";
            int pad = t->w[c] - 2 - utf8_cols(s, strlen(s));
            fputc(' ', t->f);
            if (t->right[c]) for (int i = 0; i < pad; i++) fputc(' ', t->f);
            fputs(s, t->f);
            if (!t->right[c]) for (int i = 0; i < pad; i++) fputc(' ', t->f);
            fputc(' ', t->f);
            fputs(bar, t->f);
        }
        fputc('\n', t->f);
    }
}

/* Keras treats a functional model as "sequential-like" (no Connected-to
 * column) when it is a plain chain: one input, no merges, no shared layers. */
static bool sequential_like(const fl_model *m) {
    if (!m->functional) return true;
    if (m->ninputs != 1 || m->noutputs != 1) return false;
    for (int i = 0; i < m->nsyms; i++) {
        if (m->syms[i]->nin > 1 || m->syms[i]->call > 0 || m->syms[i]->src) return false;
        int uses = 0;
        for (int k = 0; k < m->nsyms; k++)
            for (int j = 0; j < m->syms[k]->nin; j++) uses += m->syms[k]->in[j] == m->syms[i];
        if (uses > 1) return false;
    }
    return true;
}

fl_status fl_model_summary(const fl_model *m, void *out) {
    if (!m) return fl_error(FL_ERR_INVALID_ARG, "fl_model_summary: model is NULL");
    FILE *f = out ? (FILE *)out : stdout;
    static const int w3[3] = {33, 24, 15}, w4[4] = {21, 19, 12, 19};
    static const bool r3[3] = {false, false, true}, r4[4] = {false, false, true, false};
    bool seq = sequential_like(m);
    table t = {seq ? 3 : 4, seq ? w3 : w4, seq ? r3 : r4, f};
    fprintf(f, "Model: \"%s\"\n", m->name);
    rule(&t, "┏", "┳", "┓", "━");
    static const char *head[4] = {"Layer (type)", "Output Shape", "Param #", "Connected to"};
    row(&t, "┃", head);
    rule(&t, "┡", "╇", "┩", "━");
    bool first = true;
    for (int i = m->functional ? 0 : 1; i < m->nlayers; i++) { /* Sequential does not list its InputLayer */
        const fl_layer *l = m->layers[i];
        if (!first) rule(&t, "├", "┼", "┤", "─");
        first = false;
        char shape[128], params[32], name[160], conn[512] = "";
        /* a call with several outputs: Keras lists their shapes */
        size_t so = 0;
        for (int k = 0; k < (l->nouts > 1 ? l->nouts : 1) && so < sizeof shape; k++) {
            const fl_node *o = l->nouts > 1 ? l->outs[k] : l->out;
            int64_t sh[FL_MAX_DIMS];
            char one[96];
            memcpy(sh, o->shape, sizeof sh);
            sh[0] = -1;
            for (int d = 1; d < o->ndim; d++) /* a None axis's length: None, as Keras */
                if (o->dyn & (1u << d)) sh[d] = -1;
            fl_shape_str(o->ndim, sh, one, sizeof one);
            so += (size_t)snprintf(shape + so, sizeof shape - so, "%s%s%s%s", k == 0 && l->nouts > 1 ? "[" : "",
                                   k ? ", " : "", one, l->nouts > 1 && k == l->nouts - 1 ? "]" : "");
        }
        int64_t np = 0;
        for (int k = 0; k < l->nw; k++) np += fl_node_size(l->w[k]);
        thousands(np, params, sizeof params);
        snprintf(name, sizeof name, "%s (%s)", l->name, fl_layer_kind_class(l->kind));
        if (!seq) {
            size_t o2 = 0;
            for (int k = 0; k < m->nsyms; k++) {
                const fl_sym *sy = m->syms[k];
                if (sy->layer != l) continue;
                for (int j = 0; j < sy->nin && o2 + 64 < sizeof conn; j++)
                    o2 += (size_t)snprintf(conn + o2, sizeof conn - o2, "%s%s[%d][%d]", o2 ? ", " : "",
                                           sy->in[j]->layer->name, sy->in[j]->call, sy->in[j]->index);
            }
            if (!conn[0]) snprintf(conn, sizeof conn, "-");
        }
        const char *cells[4] = {name, shape, params, conn};
        row(&t, "│", cells);
    }
    rule(&t, "└", "┴", "┘", "─");
    char a[32], b[32];
    int64_t total = count(m, 0), tr = count(m, 1), nt = count(m, 2);
    fprintf(f, " Total params: %s (%s)\n", thousands(total, a, sizeof a), mem_size((double)total * 4, b, sizeof b));
    fprintf(f, " Trainable params: %s (%s)\n", thousands(tr, a, sizeof a), mem_size((double)tr * 4, b, sizeof b));
    fprintf(f, " Non-trainable params: %s (%s)\n", thousands(nt, a, sizeof a), mem_size((double)nt * 4, b, sizeof b));
    return FL_OK;
}

int fl_model_num_layers(const fl_model *m) { return m ? m->nlayers : 0; }
fl_layer *fl_model_layer(const fl_model *m, int i) {
    if (!m || i < 0 || i >= m->nlayers)
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_model_layer: index %d out of range (%d layers)", i,
                             m ? m->nlayers : 0);
    return m->layers[i];
}
fl_layer *fl_model_get_layer(const fl_model *m, const char *name) {
    if (!m || !name) return fl_error_null(FL_ERR_INVALID_ARG, "fl_model_get_layer: NULL argument");
    for (int i = 0; i < m->nlayers; i++)
        if (strcmp(m->layers[i]->name, name) == 0) return m->layers[i];
    return fl_error_null(FL_ERR_INVALID_ARG, "model '%s' has no layer named '%s'", m->name, name);
}

/* Frees the training-step buffers (they are re-made on the next step). */
static void free_step_buffers(fl_model *m) {
    const fl_backend *be = m->g.be;
    be->free(m->target); be->free(m->row_loss); be->free(m->row_score); be->free(m->stats); be->free(m->idx_dev);
    be->free(m->weight);
    free(m->stage_x); free(m->stage_y); free(m->stage_w);
    m->target = m->row_loss = m->row_score = m->weight = m->stage_w = NULL;
    m->stats = NULL;
    m->idx_dev = NULL;
    m->stage_x = m->stage_y = NULL;
    m->target_cap = 0;
}

static fl_status move_to(fl_model *m, const fl_backend *to) {
    if (m->g.be == to) return FL_OK;
    fl_model_weights_ready(m); /* (initialized where they are, then copied) */
    free_step_buffers(m);
    FL_TRY(fl_graph_migrate(&m->g, to));
    if (m->opt) FL_TRY(fl_optimizer_migrate(m->opt, &m->g));
    for (int i = 0; i < m->nlayers; i++)
        for (int k = 0; k < m->layers[i]->nw; k++) {
            fl_tensor_free(m->layers[i]->wview[k]);
            m->layers[i]->wview[k] = NULL;
        }
    return FL_OK;
}

/* "CPU (2 threads)", with what limits the threads (a cgroup quota) and OpenBLAS kernels older than the CPU */
static void cpu_line(char *buf, size_t n) {
    char tw[128] = "";
    fl_default_num_threads(tw, sizeof tw);
    fl_blas_info bi;
    fl_blas_info_get(&bi);
    snprintf(buf, n, "CPU (%d threads%s%s%s%s)", fl_get_num_threads(), strncmp(tw, "cgroup", 6) == 0 ? ": " : "",
             strncmp(tw, "cgroup", 6) == 0 ? tw : "", bi.weaker ? "; " : "", bi.weaker ? bi.note : "");
}

/* "OpenCL device 0: NVIDIA GeForce ... (NVIDIA CUDA, driver 550.54, OpenCL 3.0 CUDA)" */
static void opencl_line(char *buf, size_t n) {
    const fl_opencl_device_info *d = &fl_opencl_state_get()->rep.dev;
    snprintf(buf, n, "OpenCL device %d: %.200s (%.100s, driver %.100s, %.100s)%s", d->index, d->name, d->platform,
             d->driver, d->version, d->is_gpu ? "" : " - a CPU device, as requested");
}

/* The accelerator a kind takes, when it can run this graph: CUDA for GPU, OpenCL for OPENCL, CUDA and then
 * an OpenCL GPU for AUTO; NULL with every reason why not (and the kind it would have been in *took) */
static const fl_backend *pick_accelerator(const fl_graph *g, fl_device_kind kind, fl_device_kind *took, char *why,
                                          size_t len) {
    char cuda[1536] = "", ocl[1536] = "";
    const fl_backend *be = NULL;
    if (kind != FL_DEVICE_OPENCL) {
        be = fl_gpu_backend(cuda, sizeof cuda);
        if (be && !fl_graph_runs_on(g, be, cuda, sizeof cuda)) be = NULL;
        if (be || kind == FL_DEVICE_GPU) {
            *took = FL_DEVICE_GPU;
            snprintf(why, len, "%s", cuda);
            return be;
        }
    }
    be = fl_opencl_backend(kind == FL_DEVICE_AUTO, ocl, sizeof ocl);
    if (be && !fl_graph_runs_on(g, be, ocl, sizeof ocl)) be = NULL;
    *took = FL_DEVICE_OPENCL;
    if (kind == FL_DEVICE_OPENCL) snprintf(why, len, "%s", ocl);
    else snprintf(why, len, "%.1000s; OpenCL: %.1000s", cuda, ocl);
    return be;
}

fl_status fl_model_set_device(fl_model *m, fl_device_kind kind, char *why, size_t why_len) {
    if (!m) return fl_error(FL_ERR_INVALID_ARG, "fl_model_set_device: model is NULL");
    if (kind != FL_DEVICE_AUTO && kind != FL_DEVICE_CPU && kind != FL_DEVICE_GPU && kind != FL_DEVICE_OPENCL)
        return fl_error(FL_ERR_INVALID_ARG, "fl_model_set_device: %d is not an fl_device_kind", (int)kind);
    char reason[2100] = "", line[1024], cpu[640];
    if (kind == FL_DEVICE_CPU) {
        FL_TRY(move_to(m, fl_backend_cpu()));
        m->device = FL_DEVICE_CPU;
        if (why) {
            cpu_line(cpu, sizeof cpu);
            snprintf(why, why_len, "device: %s, as requested", cpu);
        }
        return FL_OK;
    }
    fl_device_kind took = kind;
    const fl_backend *acc = pick_accelerator(&m->g, kind, &took, reason, sizeof reason);
    if (acc) {
        FL_TRY(move_to(m, acc));
        m->device = took;
        if (took == FL_DEVICE_GPU) fl_gpu_describe(line, sizeof line);
        else opencl_line(line, sizeof line);
        if (why) snprintf(why, why_len, "device: %s%s", took == FL_DEVICE_GPU ? "GPU " : "", line);
        return FL_OK;
    }
    if (kind == FL_DEVICE_GPU) return fl_error(FL_ERR_DEVICE, "the GPU cannot be used: %s", reason);
    if (kind == FL_DEVICE_OPENCL) return fl_error(FL_ERR_DEVICE, "OpenCL cannot be used: %s", reason);
    FL_TRY(move_to(m, fl_backend_cpu()));
    m->device = FL_DEVICE_CPU;
    if (why) {
        cpu_line(cpu, sizeof cpu);
        snprintf(why, why_len, "device: %s; GPU not used: %s", cpu, reason);
    }
    return FL_OK;
}

fl_device_kind fl_model_device(const fl_model *m) { return m ? m->device : FL_DEVICE_CPU; }
