/*
 * plan.c — the lifetimes of a graph's batch buffers, and their offsets in
 * one arena (plan.h says what is shared when).
 *
 * Time runs over one step of a graph of N nodes: before the forward
 * (inputs loaded) -1, forward of node i at i, the loss at N, backward of
 * node i at 2N - i, and the caller's reads after backward at 2N + 1. A
 * buffer lives over [first write, last read]; two buffers may share bytes
 * when those intervals do not meet.
 *
 * What reads or writes a buffer outside its node and the node's consumers (the fusions: each node's fusion
 * record, fl_fusion, which src/ops/fuse.c writes before planning):
 *  - a Reshape is a view: its value (and, as its input's only consumer,
 *    its gradient) is its input's, which lives as long as both;
 *  - an RNN's forward writes its final-state nodes' values, and its
 *    backward reads their gradients;
 *  - a MaxPooling2D fused into the Conv2D before it (fuse.pool) has
 *    its value and aux written by the convolution's forward, and its
 *    backward writes the gradient of the convolution's input;
 *  - in inference, a BatchNormalization folded into the convolution before
 *    it (fuse.fold_bn) has its value written by the convolution's forward,
 *    and so has a ReLU that alone reads it (fuse.fold_act);
 *  - a ReLU that alone reads an Add (fuse.relu) has its value
 *    written by the Add's forward; in training, its gradient is read by
 *    the Add's backward;
 *  - in inference, an Add that a Conv2D before it may form as it stores
 *    (fuse.res_add) has its value, or its ReLU's, in the buffer of the
 *    input the convolution gives it (the convolution's value, or the
 *    normalisation's it folds), which lives as long as both: the
 *    convolution writes it there, or the Add adds in place;
 *  - in training, a ReLU (or LeakyReLU) that alone reads a BatchNormalization
 *    (fuse.relu) has its gradient read by the
 *    normalisation's backward;
 *  - in training, a BatchNormalization whose data gradient the Conv2D
 *    before it forms (fuse.conv_bn) has its gradient, or its
 *    fused ReLU's, read by the convolution's backward;
 *  - in training, a BatchNormalization whose affine the Add that alone
 *    reads it applies (fuse.add) has no value: nothing writes or
 *    reads it;
 *  - in training, a BatchNormalization whose affine (and ReLU) the Conv2D
 *    that alone reads it forms as it reads its input (fuse.conv)
 *    has no value, nor has the ReLU; the ReLU's gradient stays;
 *  - in training, a BatchNormalization or an Add whose ReLU is fused into
 *    it (relu_fused_into) writes the ReLU's value, and its backward reads
 *    the ReLU's gradient: it has no gradient, and no value but for an Add
 *    of three or more (the sum so far);
 *  - a ZeroPadding2D whose padding the convolution that alone reads it
 *    takes (fuse.pad_conv) has neither value nor gradient: the
 *    convolution reads its input, and its backward writes that input's
 *    gradient;
 *  - in training, a BatchNormalization that alone feeds a two-input Add
 *    has no gradient of its own where the Add's backward writes the Add's
 *    other input's gradient first and that input's other readers add into
 *    it only after the normalisation's gradient has been read for the last
 *    time (grad_shared): both gradients are the Add's (masked by its fused
 *    ReLU), written once in one buffer, which lives as long as both;
 *  - in training, an input of a two-input Add whose gradient the Add's
 *    backward writes first (written_first) has its gradient in the buffer
 *    of the gradient the Add reads, its own or its fused ReLU's, which no
 *    one reads after it: the Add masks it there in place, or finds it
 *    masked by the convolution that wrote it last (ops.c gated_relu), and
 *    copies nothing. Along a ResNet's stage every Add's gradients, their
 *    ReLUs' and their inputs' take turns in one buffer;
 *  - the model's outputs (and any node nothing reads) are read after the
 *    forward (predict, the loss) and written by the loss.
 */
#include "plan.h"
#include "error.h"
#include "tensor.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------- placement */

typedef struct placed { size_t off, end; int64_t lo, hi; } placed;

typedef struct item { size_t bytes; int64_t lo; int i; } item;

static int by_size(const void *a, const void *b) { /* largest first, then earliest, then by index */
    const item *p = a, *q = b;
    if (p->bytes != q->bytes) return p->bytes > q->bytes ? -1 : 1;
    if (p->lo != q->lo) return p->lo < q->lo ? -1 : 1;
    return p->i < q->i ? -1 : p->i > q->i;
}

static int by_off(const void *a, const void *b) {
    const placed *p = a, *q = b;
    return p->off < q->off ? -1 : p->off > q->off;
}

size_t fl_plan_place(int n, const int64_t *lo, const int64_t *hi, const size_t *bytes, size_t *off, bool *overflow) {
    *overflow = false;
    if (n <= 0) return 0;
    item *order = malloc((size_t)n * sizeof *order);
    placed *done = malloc((size_t)n * sizeof *done), *meet = malloc((size_t)n * sizeof *meet);
    size_t total = 0;
    if (!order || !done || !meet) { /* no room to plan: every buffer apart */
        for (int i = 0; i < n; i++) {
            off[i] = total;
            if (__builtin_add_overflow(total, bytes[i], &total)) *overflow = true;
        }
        free(order); free(done); free(meet);
        return total;
    }
    int nd = 0;
    for (int i = 0; i < n; i++) order[i] = (item){bytes[i], lo[i], i};
    qsort(order, (size_t)n, sizeof *order, by_size);
    for (int r = 0; r < n; r++) {
        int i = order[r].i;
        if (!bytes[i]) { off[i] = 0; continue; }
        /* the buffers already placed whose lifetimes meet this one's, by offset */
        int nm = 0;
        for (int k = 0; k < nd; k++)
            if (done[k].lo <= hi[i] && lo[i] <= done[k].hi) meet[nm++] = done[k];
        qsort(meet, (size_t)nm, sizeof *meet, by_off);
        /* the smallest gap between them that holds it, else after the last */
        size_t at = 0, best = SIZE_MAX, best_gap = SIZE_MAX;
        for (int k = 0; k < nm; k++) {
            if (meet[k].off > at && meet[k].off - at >= bytes[i] && meet[k].off - at < best_gap) {
                best = at;
                best_gap = meet[k].off - at;
            }
            if (meet[k].end > at) at = meet[k].end;
        }
        if (best == SIZE_MAX) best = at;
        size_t end;
        if (__builtin_add_overflow(best, bytes[i], &end)) { *overflow = true; end = SIZE_MAX; }
        off[i] = best;
        done[nd++] = (placed){best, end, lo[i], hi[i]};
        if (end > total) total = end;
    }
    free(order); free(done); free(meet);
    return total;
}

/* ---------------------------------------------------------- lifetimes */

static size_t round_up(size_t v, size_t a, bool *overflow) {
    if (a <= 1) return v;
    size_t r;
    if (__builtin_add_overflow(v, a - 1, &r)) { *overflow = true; return SIZE_MAX; }
    return r / a * a;
}

static size_t mul_size(int64_t a, int64_t b, bool *overflow) {
    size_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow((size_t)a, (size_t)b, &r)) { *overflow = true; return SIZE_MAX; }
    return r;
}

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

void fl_plan_free(fl_plan *p) {
    free(p->val); free(p->grad); free(p->aux); free(p->vbytes); free(p->abytes);
    memset(p, 0, sizeof *p);
}

bool fl_plan_val_view(const fl_node *n) { return n->op == FL_OP_RESHAPE; }
bool fl_plan_grad_view(const fl_node *n) { return n->op == FL_OP_RESHAPE && n->in[0]->nconsumers == 1; }

/* Training: a normalisation or an Add whose ReLU is fused into it (fuse.relu)
 * writes the ReLU's value, and its backward reads the ReLU's gradient: its own gradient
 * is never written or read, and neither is its value, but for an Add of three or more, which sums into it. */
static bool relu_fused_into(const fl_graph *g, const fl_node *n) {
    (void)g;
    return (n->op == FL_OP_BATCHNORM || n->op == FL_OP_ADD) && n->fuse.relu;
}

/* Training: the value of a normalisation, or of the ReLU fused after it, that the convolution after it forms
 * as it reads its input (fuse.conv). */
static bool conv_forms(const fl_graph *g, const fl_node *n) {
    (void)g;
    const fl_node *bn = n->op == FL_OP_BATCHNORM ? n : n->nin == 1 ? n->in[0] : NULL;
    return bn && bn->fuse.conv && bn->fuse.conv_v == n;
}

/* The earliest time the backward may write (or add into) the gradient of an input of reader c: c's backward,
 * or that of the convolution that takes c's padding (fuse.pad_conv), or that of the max pooling fused
 * after that convolution (fuse.pool), which form it. */
static int64_t grad_write(const fl_graph *g, const fl_node *c) {
    int64_t t = c->id;
    const fl_node *conv = c->op == FL_OP_PAD2D ? c->fuse.pad_conv : c;
    if (conv && conv->id > t) t = conv->id;
    const fl_node *pool = conv && conv->op == FL_OP_CONV2D ? conv->fuse.pool : NULL;
    if (pool && pool->id > t) t = pool->id;
    return 2 * (int64_t)g->n - t;
}

/* Training: whether normalisation s may take the gradient buffer of o, the other input of the two-input Add a
 * that alone reads s. add_backward writes the Add's gradient into the first input's buffer and copies it into
 * the second's; in one buffer it writes it once. That needs o's other readers to write theirs only after s's
 * gradient was last read (its backward, or the convolution's that forms its data gradient: hi), which is after a
 * wrote it (so a writes o's first). Not where either is an output (the loss writes it), where
 * s's backward could write into its own gradient (only a normalisation's is known not to), nor where either
 * buffer is not planned as its own (a view, a fused ReLU's). */
/* The earliest time a reader of o other than a writes o's gradient (INT64_MAX: none) */
static int64_t other_write(const fl_graph *g, const fl_node *a, const fl_node *o) {
    int64_t t = INT64_MAX;
    for (int i = 0; i < g->n; i++) {
        const fl_node *c = g->nodes[i];
        if (c == a || c->op == FL_OP_PARAM) continue;
        for (int k = 0; k < c->nin; k++)
            if (c->in[k] == o) t = MIN(t, grad_write(g, c));
    }
    return t;
}

static bool grad_shared(const fl_graph *g, const fl_node *a, const fl_node *s, const fl_node *o, const int64_t *hi,
                        const bool *own) {
    if (a->op != FL_OP_ADD || a->nin != 2 || !a->batched || s == o || s->op != FL_OP_BATCHNORM ||
        s->nconsumers != 1 || s->is_output || o->is_output || !s->batched || !o->batched || o->op == FL_OP_PARAM ||
        !own[3 * s->id + 1] || !own[3 * o->id + 1] || fl_node_size(s) != fl_node_size(o))
        return false;
    return other_write(g, a, o) > hi[3 * s->id + 1]; /* s is read after a writes: so a writes first too */
}

/* Training: whether the backward of Add a writes the gradient of its input o first, so that o's gradient may
 * start in the buffer of the gradient the Add reads, which nothing reads after it: every other reader of o
 * writes o's later. */
static bool written_first(const fl_graph *g, const fl_node *a, const fl_node *o, const bool *own) {
    if (!o->batched || o->op == FL_OP_PARAM || o->is_output || !own[3 * o->id + 1] ||
        fl_node_size(o) != fl_node_size(a))
        return false;
    return other_write(g, a, o) > 2 * (int64_t)g->n - a->id;
}

/* Node i's gradient in node j's buffer, which then lives as long as both */
static void share_grad(int i, int j, int64_t *lo, int64_t *hi, bool *own, size_t *bytes, int *shared) {
    lo[3 * j + 1] = MIN(lo[3 * j + 1], lo[3 * i + 1]);
    hi[3 * j + 1] = MAX(hi[3 * j + 1], hi[3 * i + 1]);
    own[3 * i + 1] = false;
    bytes[3 * i + 1] = 0;
    shared[i] = j;
}

/* The plan in named steps over one plan_ctx (issue 45: fl_plan_make was 187 lines): each buffer's lifetime
 * (a value, a gradient and an aux per node at [3i], [3i+1], [3i+2]) from its writer and readers, stretched
 * for views, the residual Adds a convolution forms and the gradients that share a buffer; which buffers a
 * node owns; then the placement. */
typedef struct plan_ctx {
    const fl_graph *g;
    const bool *need;
    bool infer, fixed;
    int64_t batch, END;
    size_t align;
    fl_plan *p;
    int64_t *lo, *hi;
    size_t *bytes, *off;
    bool *own;
    int *alias, *shared;
} plan_ctx;
#define NEED(n) (pc->need ? pc->need[(n)->id] : (n)->needs_grad)

/* every batched node's sizes, and where its forward writes its value and aux and (training) its gradient */
static void plan_writers(plan_ctx *pc) {
    const fl_graph *g = pc->g;
    const bool infer = pc->infer;
    const int N = pc->g->n;
    int64_t *lo = pc->lo, *hi = pc->hi;
    fl_plan *p = pc->p;
    const int64_t END = pc->END, batch = pc->batch;
    const size_t align = pc->align;
    const bool fixed = pc->fixed;
    for (int i = 0; i < N; i++) {
        const fl_node *n = g->nodes[i];
        p->val[i] = p->grad[i] = p->aux[i] = FL_PLAN_NONE;
        lo[3 * i] = lo[3 * i + 1] = lo[3 * i + 2] = INT64_MAX;
        hi[3 * i] = hi[3 * i + 1] = hi[3 * i + 2] = INT64_MIN;
        if (n->op == FL_OP_PARAM || !n->batched) continue;
        p->vbytes[i] = round_up(mul_size(mul_size(batch, fl_node_sample_size(n), &p->overflow), sizeof(float),
                                         &p->overflow), align, &p->overflow);
        size_t a = mul_size(batch, (int64_t)n->aux_per_sample, &p->overflow);
        if (fixed && __builtin_add_overflow(a, n->aux_fixed, &a)) p->overflow = true;
        p->abytes[i] = round_up(a, align, &p->overflow);
        /* where the forward writes the value (and aux) */
        int64_t w = n->op == FL_OP_INPUT ? -1 : n->op == FL_OP_RNN_STATE ? n->in[0]->id : i;
        if (infer) {
            lo[3 * i] = w;
            hi[3 * i] = n->nconsumers == 0 || n->is_output ? END : w; /* readers extend it below */
            lo[3 * i + 2] = w;
            hi[3 * i + 2] = i;
        } else {
            lo[3 * i] = lo[3 * i + 2] = -1;
            hi[3 * i] = hi[3 * i + 2] = END;
            if (NEED(n)) {
                /* written first by the loss or its last consumer's backward, read last by its own backward
                 * (an input's: by the caller) */
                lo[3 * i + 1] = n->nconsumers == 0 || n->is_output ? N : INT64_MAX;
                hi[3 * i + 1] = n->op == FL_OP_INPUT ? END : 2 * (int64_t)N - i;
                if (n->op == FL_OP_RNN_STATE) hi[3 * i + 1] = 2 * (int64_t)N - n->in[0]->id; /* the RNN reads it */
            }
        }
    }
}

/* the readers stretch the lifetimes, fused ones included (the folded normalisation, the Add's ReLU, the padding read by its convolution, the pooling its convolution writes) */
static void plan_readers(plan_ctx *pc) {
    const fl_graph *g = pc->g;
    const bool infer = pc->infer;
    const int N = pc->g->n;
    int64_t *lo = pc->lo, *hi = pc->hi;
    for (int i = 0; i < N; i++) { /* readers */
        const fl_node *c = g->nodes[i];
        if (c->op == FL_OP_PARAM) continue;
        for (int k = 0; k < c->nin; k++) {
            const fl_node *x = c->in[k];
            if (!x || x->op == FL_OP_PARAM || !x->batched) continue;
            if (infer) hi[3 * x->id] = MAX(hi[3 * x->id], i);
            else if (NEED(x) && NEED(c)) lo[3 * x->id + 1] = MIN(lo[3 * x->id + 1], grad_write(g, c));
        }
        const fl_node *bn = infer ? c->fuse.fold_bn : NULL;
        if (bn) { /* folded: the convolution writes its output, or its ReLU's */
            const fl_node *an = c->fuse.fold_act;
            lo[3 * bn->id] = MIN(lo[3 * bn->id], i);
            if (an) lo[3 * an->id] = MIN(lo[3 * an->id], i);
        }
        const fl_node *ar = infer && c->op == FL_OP_ADD ? c->fuse.relu : NULL;
        if (ar) lo[3 * ar->id] = MIN(lo[3 * ar->id], i); /* the Add writes its ReLU's value */
        const fl_node *br = !infer && NEED(c) ? c->fuse.relu : NULL;
        if (br && NEED(br)) hi[3 * br->id + 1] = MAX(hi[3 * br->id + 1], 2 * (int64_t)N - i);
        const fl_node *cb = !infer && NEED(c) ? c->fuse.conv_bn : NULL;
        if (cb) { /* the convolution's backward reads the normalisation's gradient, or its ReLU's */
            const fl_node *cr = cb->fuse.relu;
            if (NEED(cb)) hi[3 * cb->id + 1] = MAX(hi[3 * cb->id + 1], 2 * (int64_t)N - i);
            if (cr && NEED(cr)) hi[3 * cr->id + 1] = MAX(hi[3 * cr->id + 1], 2 * (int64_t)N - i);
        }
        /* in inference the convolution reads the padding's input; in training its backward (or the fused
         * pooling's) writes that input's gradient, which grad_write gives the padding as its reader */
        const fl_node *pad = infer ? c->fuse.pad : NULL;
        if (pad && pad->in[0] && pad->in[0]->op != FL_OP_PARAM && pad->in[0]->batched)
            hi[3 * pad->in[0]->id] = MAX(hi[3 * pad->in[0]->id], i);
        /* inference: the convolution's forward writes the pooling's value and aux (in training, the pooling's
         * backward writes the convolution's input gradient: grad_write) */
        const fl_node *pool = infer && c->op == FL_OP_CONV2D ? c->fuse.pool : NULL;
        if (pool) {
            lo[3 * pool->id] = MIN(lo[3 * pool->id], i);
            lo[3 * pool->id + 2] = MIN(lo[3 * pool->id + 2], i);
        }
    }
}

/* views: their input's buffer lives as long as both (later views first, for chains) */
static void plan_views(plan_ctx *pc) {
    const fl_graph *g = pc->g;
    const bool infer = pc->infer;
    const int N = pc->g->n;
    int64_t *lo = pc->lo, *hi = pc->hi;
    for (int i = N - 1; i >= 0; i--) {
        const fl_node *v = g->nodes[i];
        if (v->op == FL_OP_PARAM || !v->batched) continue;
        int s = v->nin > 0 && v->in[0] ? v->in[0]->id : -1;
        if (fl_plan_val_view(v) && s >= 0) {
            lo[3 * s] = MIN(lo[3 * s], lo[3 * i]);
            hi[3 * s] = MAX(hi[3 * s], hi[3 * i]);
        }
        if (!infer && NEED(v) && fl_plan_grad_view(v) && s >= 0) {
            lo[3 * s + 1] = MIN(lo[3 * s + 1], lo[3 * i + 1]);
            hi[3 * s + 1] = MAX(hi[3 * s + 1], hi[3 * i + 1]);
        }
    }
}

/* inference: a residual Add a convolution forms writes into its other input's buffer */
static void plan_residual_aliases(plan_ctx *pc) {
    const fl_graph *g = pc->g;
    const bool infer = pc->infer;
    const int N = pc->g->n;
    int64_t *lo = pc->lo, *hi = pc->hi;
    int *alias = pc->alias;
    /* inference: an Add that a convolution may form as it stores (fuse.res_add) writes its value, or its
     * ReLU's, into the buffer of the input that convolution gives it: the convolution writes it there in a step
     * where it forms the Add, and where it does not (a normalisation not folded at this batch) the Add adds in
     * place, element by element */
    for (int i = 0; infer && i < N; i++) alias[i] = -1;
    for (int i = 0; infer && i < N; i++) {
        const fl_node *add = g->nodes[i]->fuse.res_add, *o = g->nodes[i]->fuse.res_other,
                      *out = g->nodes[i]->fuse.res_out;
        if (!add) continue;
        const int v = add->in[0] == o ? add->in[1]->id : add->in[0]->id, r = out->id;
        lo[3 * v] = MIN(lo[3 * v], lo[3 * r]);
        hi[3 * v] = MAX(hi[3 * v], hi[3 * r]);
        alias[r] = v;
    }
}

/* which buffers each node owns, and their sizes */
static void plan_owners(plan_ctx *pc) {
    const fl_graph *g = pc->g;
    const bool infer = pc->infer;
    const int N = pc->g->n;
    int64_t *lo = pc->lo, *hi = pc->hi;
    fl_plan *p = pc->p;
    bool *own = pc->own;
    size_t *bytes = pc->bytes;
    const int *alias = pc->alias;
    for (int i = 0; i < N; i++) {
        const fl_node *n = g->nodes[i];
        if (n->op == FL_OP_PARAM || !n->batched) continue;
        const bool fused = !infer && relu_fused_into(g, n), unwritten = fused && (n->op != FL_OP_ADD || n->nin == 2);
        const bool padded_by_conv = n->fuse.pad_conv != NULL;
        own[3 * i] = !fl_plan_val_view(n) && !padded_by_conv && (!alias || alias[i] < 0) &&
                     (infer || (!unwritten && !n->fuse.add && !conv_forms(g, n)));
        own[3 * i + 1] = !infer && NEED(n) && !fl_plan_grad_view(n) && !fused && !padded_by_conv;
        own[3 * i + 2] = p->abytes[i] > 0;
        if (own[3 * i + 1] && lo[3 * i + 1] > hi[3 * i + 1]) lo[3 * i + 1] = hi[3 * i + 1]; /* never written */
        for (int k = 0; k < 3; k++)
            if (own[3 * i + k]) bytes[3 * i + k] = k == 2 ? p->abytes[i] : p->vbytes[i];
    }
}

/* training: gradients that share a buffer through an Add (grad_shared, written_first) */
static void plan_shared_grads(plan_ctx *pc) {
    const fl_graph *g = pc->g;
    const int N = pc->g->n;
    int64_t *lo = pc->lo, *hi = pc->hi;
    bool *own = pc->own;
    size_t *bytes = pc->bytes;
    int *shared = pc->shared;
    /* training: a normalisation's gradient in the buffer of the other input of the Add after it (grad_shared) */
    for (int i = 0; shared && i < N; i++) shared[i] = -1;
    for (int i = 0; shared && i < N; i++) {
        const fl_node *a = g->nodes[i];
        if (a->op != FL_OP_ADD || a->nin != 2 || !NEED(a) || !a->in[0] || !a->in[1]) continue;
        for (int k = 1; k >= 0; k--) {
            const fl_node *s = a->in[k], *o = a->in[1 - k];
            if (!NEED(s) || !NEED(o) || shared[o->id] >= 0 || !grad_shared(g, a, s, o, hi, own)) continue;
            share_grad(s->id, o->id, lo, hi, own, bytes, shared);
            break;
        }
    }
    /* training: the input of a two-input Add whose gradient the Add's backward writes first (written_first) in
     * the buffer of the gradient the Add reads (its own, or its fused ReLU's), which the Add then masks in place
     * or finds masked (ops.c gated_relu): nothing is copied */
    for (int i = 0; shared && i < N; i++) {
        const fl_node *a = g->nodes[i];
        if (a->op != FL_OP_ADD || a->nin != 2 || !NEED(a) || !a->batched || !a->in[0] || a->in[0] == a->in[1])
            continue;
        const fl_node *t = relu_fused_into(g, a) ? a->fuse.relu : a;
        if (!t || !NEED(t) || t->is_output || t->nconsumers == 0 || !own[3 * t->id + 1]) continue; /* not the loss's */
        for (int k = 0; k < 2; k++) {
            const fl_node *o = a->in[k];
            if (!o || !NEED(o) || shared[o->id] >= 0 || !written_first(g, a, o, own)) continue;
            share_grad(o->id, t->id, lo, hi, own, bytes, shared);
            break;
        }
    }
}

/* the placement, and each node's offsets */
static void plan_place(plan_ctx *pc) {
    const int N = pc->g->n;
    fl_plan *p = pc->p;
    const bool *own = pc->own;
    const size_t *off = pc->off;
    const int *alias = pc->alias, *shared = pc->shared;
    bool over = false;
    p->bytes = fl_plan_place(3 * N, pc->lo, pc->hi, pc->bytes, pc->off, &over);
    p->overflow |= over;
    for (int i = 0; i < N; i++) {
        if (own[3 * i]) p->val[i] = off[3 * i]; /* an empty buffer: offset 0, not NULL */
        else if (alias && alias[i] >= 0) p->val[i] = off[3 * alias[i]];
        if (own[3 * i + 1]) p->grad[i] = off[3 * i + 1];
        else if (shared && shared[i] >= 0) { /* a normalisation's may go through the Add's input to the Add's */
            int r = shared[i];
            while (shared[r] >= 0) r = shared[r];
            p->grad[i] = off[3 * r + 1];
        }
        if (own[3 * i + 2]) p->aux[i] = off[3 * i + 2];
    }
}
#undef NEED

fl_status fl_plan_make(const fl_graph *g, const bool *need, int64_t batch, bool infer, size_t align, bool fixed,
                       fl_plan *p) {
    memset(p, 0, sizeof *p);
    if (!g->fused) /* the fusions decide which values and gradients are written: they must be g's (fl_fuse) */
        return fl_error(FL_ERR_STATE, "internal: planning a graph whose fusion records are not current (call "
                        "fl_fuse_current first)");
    const int N = g->n;
    const size_t cnt = (size_t)(N > 0 ? N : 1);
    p->val = malloc(cnt * sizeof(size_t));
    p->grad = malloc(cnt * sizeof(size_t));
    p->aux = malloc(cnt * sizeof(size_t));
    p->vbytes = calloc(cnt, sizeof(size_t));
    p->abytes = calloc(cnt, sizeof(size_t));
    plan_ctx pc = {g, need, infer, fixed, batch, 2 * (int64_t)N + 1, align, p, calloc(3 * cnt, sizeof(int64_t)),
                   calloc(3 * cnt, sizeof(int64_t)), calloc(3 * cnt, sizeof(size_t)), malloc(3 * cnt * sizeof(size_t)),
                   calloc(3 * cnt, sizeof(bool)), infer ? malloc(cnt * sizeof(int)) : NULL,
                   !infer ? malloc(cnt * sizeof(int)) : NULL};
    if (!p->val || !p->grad || !p->aux || !p->vbytes || !p->abytes || !pc.lo || !pc.hi || !pc.bytes || !pc.off ||
        !pc.own || (infer && !pc.alias) || (!infer && !pc.shared)) {
        free(pc.lo); free(pc.hi); free(pc.bytes); free(pc.off); free(pc.own); free(pc.alias); free(pc.shared);
        fl_plan_free(p);
        return fl_error(FL_ERR_NOMEM, "out of memory planning the batch buffers");
    }
    plan_writers(&pc);
    plan_readers(&pc);
    plan_views(&pc);
    if (infer) plan_residual_aliases(&pc);
    plan_owners(&pc);
    if (!infer) plan_shared_grads(&pc);
    plan_place(&pc);
    free(pc.lo); free(pc.hi); free(pc.bytes); free(pc.off); free(pc.own); free(pc.alias); free(pc.shared);
    return FL_OK;
}
