/*
 * fuse.c — fusions decided once: one pass over a graph on its backend (fl_fuse) writes each node's fusion
 * record (fl_node.fuse, core/graph.h), which the planner (core/plan.c), the buffers (core/graph.c) and the
 * ops' forward and backward (ops.c) read; nothing asks again while the graph stands. Each fusion is a row of
 * the table below with the backend entries it needs, as op_table's rows list an op's kernels (a backend
 * without them runs the ops apart); the predicates under it say where in a graph the fusion applies.
 *
 * A new fused kernel: its backend entries (backend.h, a CPU and where it can a CUDA kernel), a row here, a
 * field of fl_fusion and the predicate that fills it in fuse_node, the plan's reading of it where a value or
 * a gradient is no longer written (plan.c), and the op's forward or backward that runs it (ops.c).
 */
#include "ops_internal.h"
#include "math.h"
#include "core/plan.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

/* ------------------------------------------------------------- the fusions */

typedef enum fuse_kind {
    FUSE_CONV_POOL,    /* Conv2D -> MaxPooling2D in one pass, forward and backward (fuse.pool) */
    FUSE_CONV_LEAKY,   /* inference: a LeakyReLU in a folding convolution's epilogue (fuse.fold_act) */
    FUSE_CONV_RES,     /* inference: a residual Add (and its ReLU) formed as Conv2D stores (fuse.res_add) */
    FUSE_BN_RELU,      /* training: BatchNormalization's forward applies the ReLU after it (fuse.relu) */
    FUSE_BN_LEAKY,     /* ... and a LeakyReLU, with its slope */
    FUSE_CONV_BN_BWD,  /* training: Conv2D's backward forms the data gradient of the normalisation after it
                        * (fuse.conv_bn) */
    FUSE_BN_INTO_ADD,  /* training: the Add after a normalisation applies its affine (fuse.add) */
    FUSE_BN_INTO_CONV, /* training: the convolution after a normalisation forms its value as it reads (fuse.conv) */
    FUSE_CONV_DX_GATE, /* training: Conv2D's data gradient stored masked by the fused Add's ReLU (fuse.gate) */
    FUSE_KINDS
} fuse_kind;

/* Fusions that need no backend entry of their own, decided by the graph alone: ZeroPadding2D taken by the
 * convolution after it (fuse.pad, fuse.pad_conv), BatchNormalization folded into the convolution before it in
 * inference (fuse.fold_bn: the normalisation's inference kernel folds the weights) with a ReLU in the
 * convolution's epilogue (fuse.fold_act), an Add's ReLU (fuse.relu on an Add). */

#define ENTRY(f) {#f, offsetof(fl_backend, f), sizeof(((fl_backend *)0)->f)}
typedef struct backend_entry { const char *name; size_t off, size; } backend_entry;
#define FUSE_MAX_ENTRIES 3
typedef struct fuse_row {
    const char *name;
    backend_entry needs[FUSE_MAX_ENTRIES];
} fuse_row;

static const fuse_row fusions[FUSE_KINDS] = {
    [FUSE_CONV_POOL] = {"conv2d+max_pool2d", {ENTRY(conv2d_maxpool_fwd), ENTRY(conv2d_maxpool_bwd)}},
    [FUSE_CONV_LEAKY] = {"conv2d+leaky_relu", {ENTRY(conv_slope)}},
    [FUSE_CONV_RES] = {"conv2d+add", {ENTRY(conv_res)}},
    [FUSE_BN_RELU] = {"batchnorm+relu", {ENTRY(bn_fwd_train_act), ENTRY(bn_bwd_act)}},
    [FUSE_BN_LEAKY] = {"batchnorm+leaky_relu", {ENTRY(bn_fwd_train_act), ENTRY(bn_bwd_act), ENTRY(bn_act_slope)}},
    [FUSE_CONV_BN_BWD] = {"conv2d+batchnorm backward", {ENTRY(bn_bwd_coef), ENTRY(conv2d_bn_bwd)}},
    [FUSE_BN_INTO_ADD] = {"batchnorm into add", {ENTRY(add_affine), ENTRY(bn_fwd_train_act)}},
    [FUSE_BN_INTO_CONV] = {"batchnorm into conv", {ENTRY(conv_pre), ENTRY(bn_fwd_train_act)}},
    [FUSE_CONV_DX_GATE] = {"conv2d dx+relu mask", {ENTRY(conv_dx_gate)}},
};

/* The first entry of fusion i that backend be lacks (an entry is a function or a flag: zero is lacking), or
 * NULL when it has them all. */
static const char *fusion_missing(const fl_backend *be, int i) {
    for (int k = 0; k < FUSE_MAX_ENTRIES && fusions[i].needs[k].name; k++) {
        const unsigned char *p = (const unsigned char *)be + fusions[i].needs[k].off;
        bool set = false;
        for (size_t b = 0; b < fusions[i].needs[k].size; b++) set |= p[b] != 0;
        if (!set) return fusions[i].needs[k].name;
    }
    return NULL;
}

static bool offered(const fl_graph *g, fuse_kind i) { return fusion_missing(g->be, i) == NULL; }

int fl_fusion_count(void) { return FUSE_KINDS; }
const char *fl_fusion_name(int i) { return i >= 0 && i < FUSE_KINDS ? fusions[i].name : NULL; }
const char *fl_fusion_missing(const fl_backend *be, int i) {
    return i >= 0 && i < FUSE_KINDS ? fusion_missing(be, i) : "?";
}

/* ------------------------------------------------------------ the predicates */

static fl_node *fused_bn_relu_train(const fl_graph *g, const fl_node *bn, int *act);
static fl_node *fused_add_relu(const fl_graph *g, const fl_node *add, int *act);

/* The first node after x that reads it, and in *k the input it reads x as (the only one where x has one
 * consumer); NULL if none. */
fl_node *fl_first_reader(const fl_graph *g, const fl_node *x, int *k) {
    for (int i = x->id + 1; i < g->n; i++) {
        fl_node *n = g->nodes[i];
        for (*k = 0; *k < n->nin; (*k)++)
            if (n->in[*k] == x) return n;
    }
    return NULL;
}

/* The max pooling that consumes conv2d node c, when c has no other consumer
 * and the backend runs the two fused; else NULL. */
static fl_node *fused_pool(const fl_graph *g, const fl_node *c) {
    if (!offered(g, FUSE_CONV_POOL) || c->nconsumers != 1) return NULL;
    int k;
    fl_node *n = fl_first_reader(g, c, &k);
    return n && k == 0 && n->op == FL_OP_MAXPOOL ? n : NULL;
}

/* ZeroPadding2D's padding added to that of convolution desc d that reads it (pd: the padding's desc) */
static fl_conv_desc pad_folded(fl_conv_desc d, const fl_conv_desc *pd) {
    d.h = pd->h;
    d.w = pd->w;
    d.pt += pd->pt;
    d.pl += pd->pl;
    return d;
}

/* Whether padding pad before an input of n and zeros after it as far as the windows reach, out windows of k
 * (dilated: its extent) at stride, can be padding pad on both sides with the rest after, as cuDNN takes it (the
 * CUDA backend's conv_plan): the windows reach at least pad past n, or pad on both sides gives out windows too. */
static bool pad_symmetric_ok(int n, int out, int k, int stride, int dil, int pad) {
    const int64_t extent = (int64_t)(k - 1) * dil + 1, after = (int64_t)(out - 1) * stride + extent - n - pad;
    return after >= pad || (n + 2 * (int64_t)pad >= extent && (n + 2 * (int64_t)pad - extent) / stride + 1 == out);
}

static fl_node *pad_into_conv(const fl_graph *g, const fl_node *p) {
    if (p->op != FL_OP_PAD2D || p->nconsumers != 1 || p->is_output || !p->batched) return NULL;
    const fl_conv_desc *pd = &p->conv;
    if (pd->pt < 0 || pd->pl < 0 || pd->oh - pd->h - pd->pt < 0 || pd->ow - pd->w - pd->pl < 0) return NULL;
    int k;
    fl_node *c = fl_first_reader(g, p, &k);
    if (!c || k != 0 || (c->op != FL_OP_CONV2D && c->op != FL_OP_DEPTHWISE_CONV2D)) return NULL;
    const fl_conv_desc d = pad_folded(c->conv, pd);
    return pad_symmetric_ok(d.h, d.oh, d.kh, d.sh, fl_conv_dil_h(&d), d.pt) &&
                   pad_symmetric_ok(d.w, d.ow, d.kw, d.sw, fl_conv_dil_w(&d), d.pl)
               ? c
               : NULL;
}

static fl_node *conv_pad(const fl_graph *g, const fl_node *n) {
    fl_node *p = n->nin > 0 ? n->in[0] : NULL;
    return p && p->op == FL_OP_PAD2D && pad_into_conv(g, p) == n ? p : NULL;
}

static fl_conv_desc conv_desc(const fl_graph *g, const fl_node *n) {
    const fl_node *p = conv_pad(g, n);
    return p ? pad_folded(n->conv, &p->conv) : n->conv;
}

/* BatchNormalization folded into the convolution before it, in inference
 * (PyTorch's fuse_conv_bn_eval, TF's fold_batch_norms): per output channel
 * o, with s = gamma / sqrt(moving_var + eps), the kernel's column o times s
 * and the bias (b - moving_mean) s + beta, both made by the normalisation's
 * own inference kernel (the kernel as rows of output channels, with a zero
 * mean and no beta; the bias as one row). It saves the normalisation's pass
 * over the output (read and write) and costs one over the weights, so it is
 * taken when the batch's output outnumbers the weights twice. A ReLU or
 * ReLU6 that alone reads the normalisation goes into the convolution's
 * epilogue too (fused_relu), saving its pass as well. */
static fl_node *fused_bn(const fl_graph *g, const fl_node *c) {
    if ((c->op != FL_OP_CONV2D && c->op != FL_OP_DEPTHWISE_CONV2D) || c->conv.act != FL_ACT_LINEAR ||
        c->nconsumers != 1 || c->is_output || !c->batched || c->ndim < 2)
        return NULL;
    int k;
    fl_node *n = fl_first_reader(g, c, &k);
    return n && n->op == FL_OP_BATCHNORM && k == 0 && n->in[3] && n->in[4] &&
                   fl_node_size(n->in[3]) == c->shape[c->ndim - 1] ? n : NULL;
}

static int64_t fold_floats(const fl_node *c) { return fl_node_size(c->in[1]) + 3 * c->shape[c->ndim - 1]; }

static fl_node *fused_relu(const fl_graph *g, const fl_node *x, int *act) {
    if (x->nconsumers != 1 || x->is_output) return NULL;
    int k;
    fl_node *n = fl_first_reader(g, x, &k);
    if (!n || k != 0 || n->nin != 1) return NULL;
    if (n->op == FL_OP_ACT && (n->act == FL_ACT_RELU || n->act == FL_ACT_RELU6)) {
        *act = n->act;
        return n;
    }
    if (n->op == FL_OP_PACT && n->pact.code == FL_PACT_RELU && n->pact.a == 0.0f && n->pact.b == 0.0f &&
        (isinf(n->pact.c) || n->pact.c == 6.0f)) {
        *act = isinf(n->pact.c) ? FL_ACT_RELU : FL_ACT_RELU6;
        return n;
    }
    return NULL;
}

/* The LeakyReLU layer (Keras's LeakyReLU, or ReLU with a negative_slope under 1, no threshold or cap) that
 * alone reads x, or NULL */
static fl_node *leaky_reader(const fl_graph *g, const fl_node *x) {
    if (x->nconsumers != 1 || x->is_output) return NULL;
    int k;
    fl_node *n = fl_first_reader(g, x, &k);
    if (!n || k != 0 || n->nin != 1 || n->op != FL_OP_PACT || n->pact.code != FL_PACT_RELU || !(n->pact.a > 0.0f) ||
        !(n->pact.a < 1.0f) || n->pact.b != 0.0f || !(isinf(n->pact.c) && n->pact.c > 0))
        return NULL;
    return n;
}

static float relu_slope(const fl_node *relu) {
    return relu && relu->op == FL_OP_PACT && relu->pact.code == FL_PACT_RELU ? relu->pact.a : 0.0f;
}

/* What a convolution that folds normalisation bn applies in its epilogue: a ReLU or ReLU6
 * (fused_relu), or where the backend takes a slope (conv_slope), a LeakyReLU layer (Keras's
 * LeakyReLU, or ReLU with a negative_slope under 1, no threshold or cap) that alone reads bn, as act
 * FL_ACT_RELU with *slope its negative_slope; NULL if none. */
static fl_node *fused_conv_act(const fl_graph *g, const fl_node *conv, const fl_node *bn, int *act, float *slope) {
    *slope = 0.0f;
    fl_node *n = fused_relu(g, bn, act);
    if (n) return n;
    if (conv->op != FL_OP_CONV2D || !offered(g, FUSE_CONV_LEAKY) || !g->be->conv_slope(&conv->conv)) return NULL;
    if (!(n = leaky_reader(g, bn))) return NULL;
    *act = FL_ACT_RELU;
    *slope = n->pact.a;
    return n;
}

static fl_node *fused_res(const fl_graph *g, const fl_node *conv, fl_node **other, fl_node **out, int *act) {
    if (!offered(g, FUSE_CONV_RES) || conv->op != FL_OP_CONV2D || conv->conv.act != FL_ACT_LINEAR || !conv->batched)
        return NULL;
    const fl_node *v = fused_bn(g, conv);
    float slope;
    if (v && fused_conv_act(g, conv, v, act, &slope)) return NULL; /* the normalisation's ReLU reads it */
    if (!v) v = conv;
    if (v->nconsumers != 1 || v->is_output) return NULL;
    int k;
    fl_node *add = fl_first_reader(g, v, &k);
    if (!add || add->op != FL_OP_ADD || add->nin != 2 || !add->batched) return NULL;
    fl_node *o = add->in[1 - k];
    if (!o || o == v || o->id >= conv->id || !o->batched || fl_node_size(o) != fl_node_size(add)) return NULL;
    *act = FL_ACT_LINEAR;
    fl_node *relu = fused_add_relu(g, add, act);
    *other = o;
    *out = relu ? relu : add;
    return add;
}

static fl_node *bn_into_conv(const fl_graph *g, const fl_node *bn, fl_node **v, int *act) {
    if (bn->op != FL_OP_BATCHNORM || bn->mode || !bn->batched || !offered(g, FUSE_BN_INTO_CONV))
        return NULL;
    *act = FL_ACT_LINEAR;
    fl_node *r = fused_bn_relu_train(g, bn, act), *x = r ? r : (fl_node *)bn;
    if (relu_slope(r) != 0.0f) return NULL; /* d->pre takes ReLU and ReLU6 only */
    if (x->nconsumers != 1 || x->is_output || !x->batched) return NULL;
    int k;
    fl_node *c = fl_first_reader(g, x, &k);
    if (c && c->op == FL_OP_PAD2D && k == 0) c = pad_into_conv(g, c); /* the convolution takes its padding */
    if (!c || (c->op != FL_OP_CONV2D && c->op != FL_OP_DEPTHWISE_CONV2D) || k != 0 || !c->batched) return NULL;
    fl_conv_desc d = conv_desc(g, c);
    d.n = g->batch > 0 ? g->batch : 1;
    if (!g->be->conv_pre(&d, c->op == FL_OP_DEPTHWISE_CONV2D)) return NULL;
    *v = x;
    return c;
}

static fl_node *fused_conv_bn_train(const fl_graph *g, const fl_node *c) {
    if (c->op != FL_OP_CONV2D || c->conv.act != FL_ACT_LINEAR || !c->needs_grad || c->nconsumers != 1 ||
        c->is_output || !c->batched || !offered(g, FUSE_CONV_BN_BWD))
        return NULL;
    int k;
    fl_node *n = fl_first_reader(g, c, &k);
    return n && n->op == FL_OP_BATCHNORM && k == 0 && !n->mode ? n : NULL;
}

static fl_node *fused_bn_relu_train(const fl_graph *g, const fl_node *bn, int *act) {
    if (bn->op != FL_OP_BATCHNORM || bn->mode || !offered(g, FUSE_BN_RELU)) return NULL;
    fl_node *r = fused_relu(g, bn, act);
    if (r || !offered(g, FUSE_BN_LEAKY) || !(r = leaky_reader(g, bn))) return r;
    *act = FL_ACT_RELU; /* with relu_slope(r) */
    return r;
}

/* Training: the Add of two that alone reads normalisation bn, where the backend applies bn's affine as it adds
 * (add_affine): bn's value is then never written, one pass over the activations fewer (a residual block's
 * second normalisation). Its backward reads x and its gradient, not its value, and the Add's reads its own. */
static fl_node *bn_add_reader(const fl_graph *g, const fl_node *bn, int *k) {
    if (bn->op != FL_OP_BATCHNORM || bn->mode || !offered(g, FUSE_BN_INTO_ADD) ||
        bn->nconsumers != 1 || bn->is_output || !bn->batched)
        return NULL;
    fl_node *a = fl_first_reader(g, bn, k);
    return a && a->op == FL_OP_ADD && a->nin == 2 && a->in[0] != a->in[1] && !fl_plan_val_view(a) ? a : NULL;
}

/* (Of two normalisations that an Add alone reads, a projection shortcut's and the block's, the first.) */
static fl_node *bn_into_add(const fl_graph *g, const fl_node *bn) {
    int k, k0;
    fl_node *a = bn_add_reader(g, bn, &k);
    return a && (k == 0 || bn_add_reader(g, a->in[0], &k0) != a) ? a : NULL;
}

static fl_node *fused_add_relu(const fl_graph *g, const fl_node *add, int *act) {
    if (add->op != FL_OP_ADD || add->nin < 2 || !add->batched) return NULL;
    return fused_relu(g, add, act);
}

static fl_node *fused_relu_train(const fl_graph *g, const fl_node *x, int *act) {
    fl_node *r = fused_bn_relu_train(g, x, act);
    return r ? r : fused_add_relu(g, x, act);
}

/* ---------------------------------------------------------------- the pass */

/* Training: the ReLU whose mask the backward of Conv2D n may apply as it stores its data gradient (the
 * backend's conv_dx_gate): the ReLU an Add applies as it adds (fuse.relu, written in the Add's forward), which
 * n reads and, as its first reader, writes the gradient of last; the Add's backward then finds that gradient
 * masked (grad_is_preact). Not where n takes a padding or runs fused with a pooling. */
static fl_node *dx_gate(const fl_graph *g, const fl_node *n) {
    fl_node *r = n->in[0];
    int k;
    if (n->op != FL_OP_CONV2D || !offered(g, FUSE_CONV_DX_GATE) || !r || r->nin != 1 || !r->in[0] ||
        r->in[0]->op != FL_OP_ADD || r->in[0]->fuse.relu != r || r->in[0]->fuse.relu_act != FL_ACT_RELU ||
        n->fuse.pad || n->fuse.pool || fl_first_reader(g, r, &k) != n)
        return NULL;
    return r;
}

/* Node n's record, from the records of the nodes before it (topological order). */
static void fuse_node(const fl_graph *g, fl_node *n) {
    fl_fusion *f = &n->fuse;
    memset(f, 0, sizeof *f);
    f->fold_act_code = f->relu_act = f->res_act = f->conv_act = FL_ACT_LINEAR;
    const bool conv = n->op == FL_OP_CONV2D || n->op == FL_OP_DEPTHWISE_CONV2D || n->op == FL_OP_CONV2D_TRANSPOSE;
    if (conv) {
        f->pad = conv_pad(g, n);
        f->desc = conv_desc(g, n);
    }
    f->pad_conv = pad_into_conv(g, n);
    if (n->op == FL_OP_CONV2D) f->pool = fused_pool(g, n);
    if ((f->fold_bn = fused_bn(g, n))) {
        f->fold_floats = fold_floats(n);
        f->fold_act = fused_conv_act(g, n, f->fold_bn, &f->fold_act_code, &f->fold_slope);
        if (!f->fold_act) {
            f->fold_act_code = FL_ACT_LINEAR;
            f->fold_slope = 0.0f;
        }
    }
    if ((f->relu = fused_relu_train(g, n, &f->relu_act))) f->relu_slope = relu_slope(f->relu);
    else f->relu_act = FL_ACT_LINEAR;
    if (!(f->res_add = fused_res(g, n, &f->res_other, &f->res_out, &f->res_act))) {
        f->res_other = f->res_out = NULL;
        f->res_act = FL_ACT_LINEAR;
    }
    f->conv_bn = fused_conv_bn_train(g, n);
    f->add = bn_into_add(g, n);
    if (!(f->conv = bn_into_conv(g, n, &f->conv_v, &f->conv_act))) {
        f->conv_v = NULL;
        f->conv_act = FL_ACT_LINEAR;
    }
    f->gate = dx_gate(g, n);
}

void fl_fuse(fl_graph *g) {
    for (int i = 0; i < g->n; i++) fuse_node(g, g->nodes[i]);
    g->fused = true;
}

void fl_fuse_current(fl_graph *g) {
    if (!g->fused) fl_fuse(g);
}
