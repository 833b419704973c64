/*
 * graph.c — graph bookkeeping: finding which nodes need gradients, allocating
 * the buffers for a batch size (as plan.c places them), moving the weights to
 * another backend, and rebinding shapes. It reads each node's fusion record
 * (fl_fusion) and asks the ops nothing: making nodes, deciding the fusions
 * (src/ops/fuse.c) and running forward and backward (src/ops/run.c) are the
 * ops' (src/ops/).
 */
#include "graph.h"
#include "plan.h"
#include "error.h"
#include "tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fl_graph_init(fl_graph *g, const fl_backend *be) {
    memset(g, 0, sizeof *g);
    g->be = be;
}

/* The buffers in use (reserve's), left NULL */
static void free_current(fl_graph *g) {
    for (int i = 0; i < g->n; i++) {
        fl_node *n = g->nodes[i];
        if (n->op == FL_OP_PARAM) continue;
        if (n->gscratch) g->be->free(n->gscratch);
        n->val = n->grad = NULL; /* slices of the arena */
        n->aux = NULL;
        n->gscratch = NULL;
        n->vbytes = n->abytes = 0;
    }
    if (g->arena) g->be->free(g->arena);
    g->arena = NULL;
    g->arena_bytes = 0;
    if (g->ws) g->be->free(g->ws);
    g->ws = NULL;
    g->ws_bytes = 0;
    if (g->fold) g->be->free(g->fold);
    g->fold = NULL;
    g->fold_bytes = 0;
    g->batch_cap = 0;
    g->infer = false;
    g->omits = false;
}

/* The other mode's buffers (g->kept) */
static void free_kept(fl_graph *g) {
    fl_graph_bufs *k = &g->kept;
    if (!k->node) return;
    for (int i = 0; i < g->n; i++)
        if (k->node[i].gscratch) g->be->free(k->node[i].gscratch);
    if (k->arena) g->be->free(k->arena);
    if (k->ws) g->be->free(k->ws);
    if (k->fold) g->be->free(k->fold);
    free(k->node);
    memset(k, 0, sizeof *k);
}

static void free_batched(fl_graph *g) {
    free_current(g);
    free_kept(g);
}

/* Exchanges the buffers in use with the kept ones (the same nodes) */
static void swap_kept(fl_graph *g) {
    fl_graph_bufs *k = &g->kept;
    for (int i = 0; i < g->n; i++) {
        fl_node *n = g->nodes[i];
        if (n->op == FL_OP_PARAM) continue;
        fl_node_bufs b = k->node[i];
        k->node[i] = (fl_node_bufs){n->val, n->grad, n->aux, n->gscratch, n->vbytes, n->abytes, n->val_view,
                                    n->grad_view};
        n->val = b.val; n->grad = b.grad; n->aux = b.aux; n->gscratch = b.gscratch;
        n->vbytes = b.vbytes; n->abytes = b.abytes; n->val_view = b.val_view; n->grad_view = b.grad_view;
    }
    fl_graph_bufs c = {k->node, g->arena, g->ws, g->fold, g->arena_bytes, g->ws_bytes, g->fold_bytes, g->batch_cap,
                       g->infer, g->omits};
    g->arena = k->arena; g->ws = k->ws; g->fold = k->fold;
    g->arena_bytes = k->arena_bytes; g->ws_bytes = k->ws_bytes; g->fold_bytes = k->fold_bytes;
    g->batch_cap = k->batch_cap; g->infer = k->infer; g->omits = k->omits;
    *k = c;
    g->batch = g->batch_cap;
    g->generation++;
}

/* Moves the buffers in use into g->kept (whatever was kept is freed), by a swap with an empty set, which
 * leaves the nodes' buffers NULL and the graph's empty; out of memory, frees them instead */
static void keep_current(fl_graph *g) {
    free_kept(g);
    fl_node_bufs *nb = calloc((size_t)(g->n > 0 ? g->n : 1), sizeof *nb);
    if (!nb) {
        free_current(g);
        return;
    }
    g->kept = (fl_graph_bufs){.node = nb};
    swap_kept(g);
}

void fl_graph_free(fl_graph *g) {
    if (!g->nodes) return;
    free_batched(g);
    for (int i = 0; i < g->n; i++) {
        fl_node *n = g->nodes[i];
        if (n->op == FL_OP_PARAM) {
            if (n->val) g->be->free(n->val);
            if (n->grad) g->be->free(n->grad);
        }
        free(n);
    }
    free(g->nodes);
    memset(g, 0, sizeof *g);
}

int64_t fl_node_sample_size(const fl_node *n) {
    int64_t s = 1;
    for (int i = n->batched ? 1 : 0; i < n->ndim; i++) s *= n->shape[i];
    return s;
}

int64_t fl_node_size(const fl_node *n) {
    int64_t s = 1;
    for (int i = 0; i < n->ndim; i++) s *= n->shape[i];
    return s;
}

bool fl_node_grad_rule(const fl_node *n, const bool *need) {
    if (n->op == FL_OP_PARAM) return n->trainable;
    if (n->op == FL_OP_INPUT) return n->force_grad;
    if (n->op == FL_OP_SEQ_MASK) return false; /* a mask is never differentiated */
    for (int k = 0; k < n->nin; k++)
        if (n->in[k] && (need ? need[n->in[k]->id] : n->in[k]->needs_grad)) return true;
    return false;
}

void fl_graph_finalize(fl_graph *g) {
    g->fused = false; /* the fusion records follow the consumers and gradients counted here */
    for (int i = 0; i < g->n; i++) {
        fl_node *n = g->nodes[i];
        n->nconsumers = 0;
        n->needs_grad = fl_node_grad_rule(n, NULL);
    }
    for (int i = 0; i < g->n; i++)
        for (int k = 0; k < g->nodes[i]->nin; k++)
            if (g->nodes[i]->in[k]) g->nodes[i]->in[k]->nconsumers++;
    /* a weight used by several calls (a shared layer) sums their gradients:
     * the later calls write theirs to scratch first */
    for (int i = 0; i < g->n; i++) {
        fl_node *n = g->nodes[i];
        n->gscratch_bytes = 0;
        bool shared = false;
        size_t floats = 0;
        for (int k = 1; k < n->nin && k <= n->weight_inputs; k++) /* the op's weights (its row in ops.c) */
            if (n->in[k]) {
                shared |= n->in[k]->nconsumers > 1;
                floats += (size_t)fl_node_size(n->in[k]);
            }
        if (shared) n->gscratch_bytes = floats * sizeof(float);
    }
}

fl_status fl_graph_set_trainable(fl_graph *g, fl_node *w, bool trainable) {
    if (w->op != FL_OP_PARAM) return fl_error(FL_ERR_INVALID_ARG, "layer '%s': not a weight", w->name);
    if (trainable && !w->grad) {
        size_t bytes = (size_t)fl_node_size(w) * sizeof(float);
        int64_t total;
        if (!fl_add_checked(g->param_bytes, (int64_t)bytes, &total) || total > fl_model_bytes_limit()) {
            char a[48];
            return fl_error(FL_ERR_NOMEM, "layer '%s': the gradient of a weight made trainable would take the model "
                            "past flynn's model memory limit of %s (raise it with $FLYNN_MAX_MODEL_BYTES)", w->name,
                            fl_bytes_str(fl_model_bytes_limit(), a, sizeof a));
        }
        if (!(w->grad = fl_backend_alloc_zeroed(g->be, bytes))) return fl_last_status();
        g->param_bytes = total;
    }
    w->trainable = trainable;
    return FL_OK;
}

void fl_graph_refinalize(fl_graph *g) {
    free_batched(g);
    fl_graph_finalize(g);
    g->generation++;
    g->trainable_gen++;
}

/* The plan of the batch buffers of `batch` samples (plan.h), checked with
 * the weights against the memory budget before anything is allocated; the
 * refusal names the batch size and the layer with the largest buffers. */
static fl_status plan_within_budget(const fl_graph *g, int64_t batch, bool infer, fl_plan *p) {
    FL_TRY(fl_plan_make(g, NULL, batch, infer, FL_ARENA_ALIGN, true, p));
    int64_t total = g->param_bytes, big = -1, limit = fl_model_bytes_limit();
    const fl_node *bn = NULL;
    bool overflow = p->overflow || p->bytes > INT64_MAX || !fl_add_checked(total, (int64_t)p->bytes, &total);
    for (int i = 0; i < g->n; i++) {
        const fl_node *n = g->nodes[i];
        if (n->op == FL_OP_PARAM || !n->batched) continue;
        if (!infer && !overflow) overflow = !fl_add_checked(total, (int64_t)n->gscratch_bytes, &total);
        size_t b = (p->val[i] != FL_PLAN_NONE ? p->vbytes[i] : 0) + (p->grad[i] != FL_PLAN_NONE ? p->vbytes[i] : 0) +
                   p->abytes[i];
        if ((int64_t)b > big) { big = (int64_t)b; bn = n; }
    }
    if (!overflow && total <= limit) return FL_OK;
    fl_plan_free(p);
    char a[160], b[48], c[48];
    int64_t s[FL_MAX_DIMS];
    if (bn) { memcpy(s, bn->shape, sizeof s); s[0] = batch; }
    return fl_error(FL_ERR_NOMEM,
                    "batch size %lld: the model's weights and %s buffers would take more than flynn's model memory "
                    "limit of %s (raise it with $FLYNN_MAX_MODEL_BYTES or fl_set_max_model_bytes, or use a smaller "
                    "batch); the largest buffers are layer '%s' (op %s) output %s, %s", (long long)batch,
                    infer ? "inference's" : "training's", fl_bytes_str(limit, c, sizeof c), bn ? bn->name : "?",
                    bn ? bn->op_name : "?", bn ? fl_shape_str(bn->ndim, s, a, sizeof a) : "?",
                    overflow ? "more than a 64-bit size can count" : fl_bytes_str(big, b, sizeof b));
}

/* Whether the buffers in use (the other mode's) and plan p's fit the memory budget together, with the weights
 * and training's gradient scratch */
static bool both_within_budget(const fl_graph *g, const fl_plan *p) {
    int64_t total = g->param_bytes;
    bool ok = p->bytes <= INT64_MAX && g->arena_bytes <= INT64_MAX && fl_add_checked(total, (int64_t)p->bytes, &total);
    ok = ok && fl_add_checked(total, (int64_t)g->arena_bytes, &total);
    for (int i = 0; ok && i < g->n; i++)
        if (g->nodes[i]->op != FL_OP_PARAM && g->nodes[i]->batched)
            ok = fl_add_checked(total, (int64_t)g->nodes[i]->gscratch_bytes, &total);
    return ok && total <= fl_model_bytes_limit();
}

/* The workspace node n's convolution needs for `batch` samples (its fusion record's descriptor), or 0. */
static size_t conv_workspace(const fl_graph *g, const fl_node *n, int64_t batch, bool infer) {
    if (n->op != FL_OP_CONV2D && n->op != FL_OP_CONV2D_TRANSPOSE) return 0;
    fl_conv_desc d = n->fuse.desc;
    d.n = batch;
    return g->be->conv_workspace(&d, !infer && n->needs_grad);
}

static fl_status reserve(fl_graph *g, int64_t batch, bool infer) {
    fl_plan p;
    FL_TRY(plan_within_budget(g, batch, infer, &p));
    /* the other mode's buffers are kept (training's while inference runs, and back) where the budget holds both;
     * this mode's are made anew */
    if (g->arena && g->infer != infer && both_within_budget(g, &p)) keep_current(g);
    else free_current(g);
    if (g->kept.node && g->kept.infer == infer) free_kept(g); /* this mode's, too small for the batch */
    size_t ws = 0, fold = 0;
    if (!(g->arena = g->be->alloc(p.bytes > FL_ARENA_ALIGN ? p.bytes : FL_ARENA_ALIGN))) goto fail;
    g->arena_bytes = p.bytes;
    char *base = g->arena;
    for (int i = 0; i < g->n; i++) {
        fl_node *n = g->nodes[i];
        if (n->op == FL_OP_PARAM || !n->batched) continue;
        n->val_view = fl_plan_val_view(n);
        n->grad_view = fl_plan_grad_view(n);
        if (p.val[i] != FL_PLAN_NONE) n->val = (float *)(base + p.val[i]);
        else if (!n->val_view) g->omits = true;
        if (p.grad[i] != FL_PLAN_NONE) n->grad = (float *)(base + p.grad[i]);
        if (p.aux[i] != FL_PLAN_NONE) n->aux = base + p.aux[i];
        n->vbytes = p.vbytes[i];
        n->abytes = p.abytes[i];
        if (!infer && n->gscratch_bytes && !(n->gscratch = g->be->alloc(n->gscratch_bytes))) goto fail;
        size_t w = conv_workspace(g, n, batch, infer);
        if (w > ws) ws = w;
        if (n->fuse.fold_bn) { /* predict and evaluate fold the normalisation into the weights */
            size_t f = (size_t)n->fuse.fold_floats * sizeof(float);
            if (f > fold) fold = f;
        }
    }
    /* views point at their input's buffers (inputs come first in topo order) */
    for (int i = 0; i < g->n; i++) {
        fl_node *n = g->nodes[i];
        if (n->val_view) n->val = n->in[0]->val;
        if (n->grad_view && !infer) n->grad = n->in[0]->grad;
    }
    if (ws) {
        g->ws = g->be->alloc(ws);
        if (!g->ws) goto fail;
        g->ws_bytes = ws;
    }
    if (fold) {
        if (!(g->fold = g->be->alloc(fold))) goto fail;
        g->fold_bytes = fold;
    }
    fl_plan_free(&p);
    g->batch_cap = batch;
    g->batch = batch;
    g->infer = infer;
    g->generation++;
    return FL_OK;
fail:
    fl_plan_free(&p);
    fl_error_prefix("allocating buffers for batch size %lld: ", (long long)batch);
    free_batched(g);
    return fl_last_status();
}

/* The buffers for `batch` samples, training's or (infer) inference's: grown, or switched to the other mode's
 * kept ones where they hold it (fl_graph_reserve and fl_graph_reserve_infer, src/ops/run.c, which make the
 * fusion records current first). */
fl_status fl_graph_reserve_buffers(fl_graph *g, int64_t batch, bool infer) {
    if (!g->fused)
        return fl_error(FL_ERR_STATE, "internal: the graph's fusion records are not current (fl_fuse after "
                        "fl_graph_finalize, a migration or a rebind)");
    if (g->ws_recheck) { /* a rebind kept the buffers: the convolutions' workspace for the new sizes too? */
        g->ws_recheck = false;
        size_t ws = 0;
        for (int i = 0; g->arena && i < g->n; i++) {
            size_t w = conv_workspace(g, g->nodes[i], g->batch_cap, g->infer);
            if (w > ws) ws = w;
        }
        if (ws > g->ws_bytes) free_batched(g);
    }
    if (!infer) {
        if (batch <= g->batch_cap && !g->infer) return FL_OK;
        if (g->kept.node && !g->kept.infer && batch <= g->kept.batch_cap) {
            swap_kept(g);
            return FL_OK;
        }
        return reserve(g, batch, false);
    }
    /* inference runs in training's buffers where they hold every value (they hold more than it needs), else
     * in its own: training's plan leaves no value to a normalisation or a ReLU that a neighbour forms as it
     * reads (plan.h), and an inference forward writes them */
    if (batch <= g->batch_cap && (g->infer || !g->omits)) return FL_OK;
    if (g->kept.node && g->kept.infer && batch <= g->kept.batch_cap) {
        swap_kept(g);
        return FL_OK;
    }
    return reserve(g, batch, true);
}

void fl_graph_set_batch(fl_graph *g, int64_t batch) {
    g->batch = batch;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i]->batched) g->nodes[i]->shape[0] = batch;
}

void fl_graph_clear_grads(fl_graph *g) {
    for (int i = 0; i < g->n; i++) {
        g->nodes[i]->grad_ready = false;
        g->nodes[i]->grad_is_preact = false;
    }
}

fl_status fl_graph_migrate(fl_graph *g, const fl_backend *to) {
    const fl_backend *from = g->be;
    if (from == to) return FL_OK;
    /* allocate everything first, so that a failure changes nothing */
    int np = 0;
    for (int i = 0; i < g->n; i++) np += g->nodes[i]->op == FL_OP_PARAM;
    float **nv = fl_calloc((size_t)(np ? np : 1), sizeof *nv, "migration");
    float **ng = fl_calloc((size_t)(np ? np : 1), sizeof *ng, "migration");
    bool ok = nv && ng;
    for (int i = 0, k = 0; ok && i < g->n; i++) {
        fl_node *n = g->nodes[i];
        if (n->op != FL_OP_PARAM) continue;
        size_t bytes = (size_t)fl_node_size(n) * sizeof(float);
        ok = (nv[k] = to->alloc(bytes)) != NULL;
        if (ok && n->grad) ok = (ng[k] = to->alloc(bytes)) != NULL;
        k++;
    }
    if (!ok) {
        for (int k = 0; nv && ng && k < np; k++) { if (nv[k]) to->free(nv[k]); if (ng[k]) to->free(ng[k]); }
        free(nv); free(ng);
        fl_error_prefix("moving the model's weights to the %s: ", to->name);
        return fl_last_status();
    }
    free_batched(g);
    for (int i = 0, k = 0; i < g->n; i++) {
        fl_node *n = g->nodes[i];
        if (n->op != FL_OP_PARAM) continue;
        size_t bytes = (size_t)fl_node_size(n) * sizeof(float);
        float *host = malloc(bytes ? bytes : 1);
        if (host) {
            from->download(host, n->val, bytes);
            to->upload(nv[k], host, bytes);
            free(host);
        } else {
            to->zero(nv[k], bytes); /* tiny parameter tensors: practically unreachable */
        }
        if (ng[k]) to->zero(ng[k], bytes);
        from->free(n->val);
        if (n->grad) from->free(n->grad);
        n->val = nv[k];
        n->grad = ng[k];
        k++;
    }
    free(nv); free(ng);
    g->be = to;
    g->fused = false; /* fusions are the backend's */
    g->generation++;
    return FL_OK;
}

/* ------------------------------------------------------------ rebinding */

fl_status fl_graph_append(fl_graph *g, fl_node *n) {
    if (g->n == g->cap) {
        int cap = g->cap ? g->cap * 2 : 32;
        fl_node **nn = realloc(g->nodes, (size_t)cap * sizeof *nn);
        if (!nn) return fl_error(FL_ERR_NOMEM, "out of memory growing the graph");
        g->nodes = nn;
        g->cap = cap;
    }
    g->nodes[g->n++] = n;
    return FL_OK;
}

fl_status fl_graph_adopt(fl_graph *s, fl_node *w) {
    return fl_graph_append(s, w); /* its id stays g's: the node is g's */
}

/* A node of the scratch graph that is g's own (an adopted weight). */
static bool owned_by(const fl_graph *g, const fl_node *n) {
    return n && n->id >= 0 && n->id < g->n && g->nodes[n->id] == n;
}

void fl_graph_scratch_free(fl_graph *g, fl_graph *s) {
    for (int i = 0; i < s->n; i++) {
        fl_node *n = s->nodes[i];
        if (owned_by(g, n)) continue;
        if (n->val) s->be->free(n->val); /* weights made by the build itself (Normalization's constants) */
        if (n->grad) s->be->free(n->grad);
        free(n);
    }
    free(s->nodes);
    s->nodes = NULL;
    s->n = s->cap = 0;
}

/* The node of g at the position that scratch node p has (p may be g's). */
static fl_node *counterpart(const fl_graph *g, const fl_node *p) {
    return p && p->id >= 0 && p->id < g->n ? g->nodes[p->id] : NULL;
}

static bool same_ref(const fl_graph *g, const fl_node *old, const fl_node *p) {
    return old ? counterpart(g, p) == old : p == NULL;
}

/* The first difference between g's structure and s's, as a message; NULL when they match. */
static const char *structure_differs(const fl_graph *g, const fl_graph *s, int *at) {
    const int common = s->n < g->n ? s->n : g->n;
    for (int i = 0; i < common; i++) {
        const fl_node *o = g->nodes[i], *n = s->nodes[i];
        *at = i;
        if (owned_by(g, n) ? n != o : n->id != i) return "its nodes in another order";
        if (n->op != o->op || n->nin != o->nin || n->batched != o->batched) return "other ops";
        for (int k = 0; k < o->nin; k++)
            if (!same_ref(g, o->in[k], n->in[k])) return "its ops on other inputs";
        if (!same_ref(g, o->mask, n->mask) || !same_ref(g, o->rnn_state[0], n->rnn_state[0]) ||
            !same_ref(g, o->rnn_state[1], n->rnn_state[1]))
            return "other masks or states";
        if (o->op == FL_OP_PARAM && n != o) { /* a constant made by the build: the same shape */
            bool same = n->ndim == o->ndim;
            for (int d = 0; same && d < o->ndim; d++) same = n->shape[d] == o->shape[d];
            if (!same) return "a constant of another shape";
        }
    }
    *at = common;
    return s->n != g->n ? "a different number of graph nodes" : NULL;
}

fl_status fl_graph_rebind(fl_graph *g, fl_graph *s) {
    int at = 0;
    const char *why = structure_differs(g, s, &at);
    if (why) {
        const fl_node *n = at < g->n ? g->nodes[at] : at < s->n ? s->nodes[at] : NULL;
        const char *name = n && n->name ? n->name : "?"; /* the layer's: it outlives the scratch nodes */
        fl_graph_scratch_free(g, s);
        return fl_error(FL_ERR_UNSUPPORTED, "layer '%s' builds %s for this length of the None axis than for the "
                        "length it was built with (it unrolls or specialises on the length); flynn cannot run it "
                        "on variable-length inputs: give the Input a fixed length", name, why);
    }
    /* do the buffers for the reserved batch hold the new sizes? */
    bool fit = g->batch_cap > 0;
    for (int i = 0; fit && i < g->n; i++) {
        const fl_node *o = g->nodes[i], *n = s->nodes[i];
        if (o->op == FL_OP_PARAM || !o->batched) continue;
        int64_t elems, bytes, aux;
        if (!fl_mul_checked(g->batch_cap, fl_node_sample_size(n), &elems) ||
            !fl_bytes_checked(elems, sizeof(float), &bytes) ||
            !fl_bytes_checked(g->batch_cap, n->aux_per_sample, &aux) || !fl_add_checked(aux, (int64_t)n->aux_fixed, &aux)) {
            fit = false;
            break;
        }
        bool owns = !o->val_view || (!g->infer && o->needs_grad && !o->grad_view); /* a buffer of its own */
        if (owns && (size_t)bytes > o->vbytes) fit = false;
        if ((size_t)aux > o->abytes) fit = false;
    }
    for (int i = 0; i < g->n; i++) {
        fl_node *o = g->nodes[i], *n = s->nodes[i];
        if (o->op == FL_OP_PARAM) continue;
        fl_node keep = *o;
        *o = *n;
        o->id = keep.id;
        for (int k = 0; k < o->nin; k++) o->in[k] = counterpart(g, n->in[k]);
        o->mask = counterpart(g, n->mask);
        o->rnn_state[0] = counterpart(g, n->rnn_state[0]);
        o->rnn_state[1] = counterpart(g, n->rnn_state[1]);
        /* what the buffers and the caller set stays */
        o->val = keep.val; o->grad = keep.grad; o->aux = keep.aux; o->gscratch = keep.gscratch;
        o->vbytes = keep.vbytes; o->abytes = keep.abytes;
        o->val_view = keep.val_view; o->grad_view = keep.grad_view;
        o->force_grad = keep.force_grad;
        o->is_output = keep.is_output;
        o->dyn = keep.dyn;
        for (int d = 1; d < o->ndim; d++) /* a dimension that moved follows the length */
            if (d < keep.ndim && keep.shape[d] != o->shape[d]) o->dyn |= 1u << d;
    }
    g->sample_bytes = s->sample_bytes;
    fl_graph_scratch_free(g, s);
    int64_t batch = g->batch;
    fl_graph_finalize(g);
    free_kept(g); /* sized for the old shapes */
    if (!fit) free_batched(g);
    g->ws_recheck = fit; /* the convolutions' workspaces for the new sizes: once their records are (reserve) */
    fl_graph_set_batch(g, batch);
    g->generation++; /* shapes are part of a captured step: capture anew */
    g->rebinds++;
    return FL_OK;
}
