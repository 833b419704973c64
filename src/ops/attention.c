/*
 * attention.c — the ops of the sequence layers that normalise and attend:
 * LayerNormalization, scaled dot-product attention (the core of
 * MultiHeadAttention and of Attention: batched GEMMs, a masked softmax and
 * dropout, all through the backend) and RepeatVector; each op's shape rule,
 * forward and backward side by side. Their rows are in ops.c's op table.
 */
#include "ops_internal.h"
#include "math.h"
#include "core/error.h"
#include "core/tensor.h"

#include <string.h>

static const char *sample_str(const fl_node *x, char *buf, size_t len) {
    return fl_shape_str(x->ndim, x->shape, buf, len);
}

/* ----------------------------------------------------- LayerNormalization
 *
 * n->axis: how many trailing axes are normalised together; their product c
 * is the row length, and gamma/beta hold c values. n->mode: rms_scaling. */

static int64_t ln_cols(const fl_node *n) {
    int64_t c = 1;
    for (int i = n->ndim - n->axis; i < n->ndim; i++) c *= n->shape[i];
    return c;
}

fl_node *fl_graph_layernorm(fl_graph *g, const char *name, fl_node *x, fl_node *gamma, fl_node *beta, int64_t c,
                            float eps, bool rms) {
    char s[128];
    /* the trailing axes whose product is c */
    int nax = 0;
    int64_t p = 1;
    while (p < c && nax < x->ndim - 1) p *= x->shape[x->ndim - 1 - nax++];
    if (p != c || nax == 0 || c > INT32_MAX)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (LayerNormalization): %lld values per row are not the last "
                             "axes of input %s", name, (long long)c, sample_str(x, s, sizeof s));
    if ((gamma && fl_node_size(gamma) != c) || (beta && fl_node_size(beta) != c))
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (LayerNormalization): gamma/beta have %lld/%lld values, "
                             "expected %lld", name, (long long)(gamma ? fl_node_size(gamma) : c),
                             (long long)(beta ? fl_node_size(beta) : c), (long long)c);
    if (!(eps >= 0.0f))
        return fl_error_null(FL_ERR_INVALID_ARG, "layer '%s' (LayerNormalization): epsilon %g, expected >= 0", name,
                             eps);
    fl_node *n = fl_graph_new_node(g, FL_OP_LAYERNORM, name);
    if (!n) return NULL;
    n->nin = 3;
    n->in[0] = x; n->in[1] = gamma; n->in[2] = beta;
    if (!fl_op_set_shape(g, n, true, x->ndim - 1, x->shape + 1)) return NULL;
    n->axis = nax;
    n->eps = eps;
    n->mode = rms;
    n->aux_per_sample = (size_t)(fl_node_sample_size(x) / c) * 2 * sizeof(float); /* mean, 1/std per row */
    return n;
}

void fl_layernorm_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    const int64_t c = ln_cols(n);
    g->be->layernorm_fwd(fl_node_size(n) / c, (int)c, n->eps, n->mode, n->in[0]->val,
                         n->in[1] ? n->in[1]->val : NULL, n->in[2] ? n->in[2]->val : NULL, n->val, n->aux);
}

void fl_layernorm_backward(fl_graph *g, fl_node *n) {
    const int64_t c = ln_cols(n);
    float beta = 0.0f;
    float *dx = fl_op_in_grad(n, 0, &beta);
    size_t off = 0;
    float *dgb[2] = {fl_op_weight_grad(n, 1, &off), fl_op_weight_grad(n, 2, &off)};
    if (dx || dgb[0] || dgb[1])
        g->be->layernorm_bwd(fl_node_size(n) / c, (int)c, n->mode, n->in[0]->val, n->in[1] ? n->in[1]->val : NULL,
                             n->aux, n->grad, dx, beta, dgb[0], dgb[1]);
    fl_op_weight_grads_add(g->be, n, 1, 2, dgb);
    fl_op_mark(n, 0); fl_op_mark(n, 1); fl_op_mark(n, 2);
}

/* ------------------------------------------------------------ attention
 *
 * in: q, k, v, query mask, value mask, attention mask (the masks may be
 * NULL), and the Attention layer's learned score weights: [6] the scale,
 * [7] the concat score weight (score_mode "concat" when present), either
 * NULL. aux per sample: the weights P (heads, tq, tk), the scratch for
 * their gradient, with learned weights the unscaled scores, and with dropout
 * the dropped weights and the keep mask. */

static bool mask_fits(const fl_node *m, int64_t a, int64_t b) {
    return !m || (b ? m->ndim == 3 && m->shape[1] == a && m->shape[2] == b : m->ndim == 2 && m->shape[1] == a);
}

fl_node *fl_graph_attention(fl_graph *g, const char *name, fl_node *q, fl_node *k, fl_node *v, fl_node *qmask,
                            fl_node *vmask, fl_node *amask, int heads, float scale, bool causal, float rate,
                            uint64_t stream) {
    char a[128], b[128], c[128];
    if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || k->shape[1] != v->shape[1] || heads < 1 ||
        q->shape[2] != k->shape[2] || q->shape[2] % heads || v->shape[2] % heads)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (attention): query %s, key %s and value %s must be (batch, "
                             "steps, features) with the key's and value's steps equal, the query's and key's "
                             "features equal, and the features divisible by %d heads", name,
                             sample_str(q, a, sizeof a), sample_str(k, b, sizeof b), sample_str(v, c, sizeof c), heads);
    const int64_t tq = q->shape[1], tk = k->shape[1];
    if (!mask_fits(qmask, tq, 0) || !mask_fits(vmask, tk, 0) || !mask_fits(amask, tq, tk))
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (attention): a mask does not fit: expected query mask (batch, "
                             "%lld), value mask (batch, %lld), attention mask (batch, %lld, %lld)", name,
                             (long long)tq, (long long)tk, (long long)tq, (long long)tk);
    if (!(rate >= 0.0f && rate < 1.0f))
        return fl_error_null(FL_ERR_INVALID_ARG, "layer '%s' (attention): dropout %g, expected 0 <= dropout < 1", name,
                             rate);
    if (tq > INT32_MAX || tk > INT32_MAX)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (attention): %lld x %lld steps, too many", name,
                             (long long)tq, (long long)tk);
    fl_node *n = fl_graph_new_node(g, FL_OP_ATTENTION, name);
    if (!n) return NULL;
    n->nin = 6;
    n->in[0] = q; n->in[1] = k; n->in[2] = v; n->in[3] = qmask; n->in[4] = vmask; n->in[5] = amask;
    if (!fl_op_set_shape(g, n, true, 2, (int64_t[]){tq, v->shape[2]})) return NULL;
    n->attn = (fl_attn_desc){.heads = heads, .tq = (int)tq, .tk = (int)tk, .dk = (int)(q->shape[2] / heads),
                             .dv = (int)(v->shape[2] / heads), .scale = scale, .causal = causal};
    n->rate = rate;
    n->stream = stream;
    int64_t w; /* weights per sample */
    if (!fl_mul_checked((int64_t)heads * tq, tk, &w) || w > (INT64_MAX / 16))
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (attention): %d heads x %lld x %lld weights per sample, too many",
                             name, heads, (long long)tq, (long long)tk);
    n->aux_per_sample = (size_t)w * (rate > 0.0f ? 3 * sizeof(float) + 1 : 2 * sizeof(float));
    return n;
}

static bool learned(const fl_node *n) { return n->nin > 6 && (n->in[6] || n->in[7]); }

fl_node *fl_graph_attention_scores(fl_graph *g, fl_node *n, fl_node *scale, fl_node *concat_w) {
    (void)g;
    char a[128], b[128];
    if (n->op != FL_OP_ATTENTION || n->attn.heads != 1 || n->attn.scale != 1.0f)
        return fl_error_null(FL_ERR_INVALID_ARG, "layer '%s' (Attention): learned scores need a one-head, unscaled "
                             "attention", n->name);
    if ((scale && fl_node_size(scale) != 1) || (concat_w && fl_node_size(concat_w) != 1))
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (Attention): scale and concat_score_weight must be scalars "
                             "(shape ())", n->name);
    if (concat_w && n->in[0]->shape[2] != n->in[1]->shape[2])
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (Attention): score_mode \"concat\" adds query %s and key %s: "
                             "their features must be equal", n->name, sample_str(n->in[0], a, sizeof a),
                             sample_str(n->in[1], b, sizeof b));
    if (!scale && !concat_w) return n;
    if (!learned(n)) n->aux_per_sample += (size_t)n->attn.heads * n->attn.tq * n->attn.tk * sizeof(float);
    n->nin = 8;
    n->in[6] = scale;
    n->in[7] = concat_w;
    return n;
}

static int64_t attn_weights(const fl_graph *g, const fl_node *n) {
    return g->batch * n->attn.heads * n->attn.tq * n->attn.tk;
}
static float *attn_p(fl_graph *g, fl_node *n) { (void)g; return (float *)n->aux; }
static float *attn_scratch(fl_graph *g, fl_node *n) { return (float *)n->aux + attn_weights(g, n); }
static float *attn_raw(fl_graph *g, fl_node *n) { return (float *)n->aux + 2 * attn_weights(g, n); }
static float *attn_dropped(fl_graph *g, fl_node *n) {
    return (float *)n->aux + (learned(n) ? 3 : 2) * attn_weights(g, n);
}
static uint8_t *attn_keep(fl_graph *g, fl_node *n) {
    return (uint8_t *)((float *)n->aux + (learned(n) ? 4 : 3) * attn_weights(g, n));
}

/* The GEMM over the (batch, head) blocks of row-major X (rows x cols) in a
 * (batch, steps, heads * d) tensor: block (b, h) at b * steps * heads * d +
 * h * d, leading dimension heads * d. W (batch, heads, tq, tk): block at
 * (b * heads + h) * tq * tk, leading dimension tk. */
typedef struct blk { const float *p; int ld; int64_t so, si; } blk;
static blk seq_blk(const float *p, int steps, int heads, int d) {
    return (blk){p, heads * d, (int64_t)steps * heads * d, d};
}
static blk w_blk(const float *p, const fl_attn_desc *d) {
    return (blk){p, d->tk, (int64_t)d->heads * d->tq * d->tk, (int64_t)d->tq * d->tk};
}
static fl_gemm_desc gemm_desc(const fl_attn_desc *d, int ta, int tb, int m, int nn, int k, float alpha, blk a,
                              blk b, float beta, blk c) {
    return (fl_gemm_desc){.ta = ta, .tb = tb, .m = m, .n = nn, .k = k, .alpha = alpha, .beta = beta, .lda = a.ld,
                          .ldb = b.ld, .ldc = c.ld, .sa = {a.so, a.si}, .sb = {b.so, b.si}, .sc = {c.so, c.si},
                          .nouter = d->n, .ninner = d->heads};
}
static void gemm(fl_graph *g, const fl_attn_desc *d, int ta, int tb, int m, int nn, int k, float alpha, blk a, blk b,
                 float beta, blk c) {
    fl_gemm_desc e = gemm_desc(d, ta, tb, m, nn, k, alpha, a, b, beta, c);
    g->be->gemm_batched(&e, a.p, b.p, (float *)c.p);
}

void fl_attention_forward(fl_graph *g, fl_node *n, bool training) {
    fl_attn_desc d = n->attn;
    d.n = g->batch;
    const float *q = n->in[0]->val, *k = n->in[1]->val, *v = n->in[2]->val;
    float *p = attn_p(g, n);
    const fl_node *sw = learned(n) ? n->in[6] : NULL, *cw = learned(n) ? n->in[7] : NULL;
    if (cw) { /* S = cw * sum tanh(a (q + k)) */
        g->be->attn_concat_fwd(&d, q, k, sw ? sw->val : NULL, attn_raw(g, n));
        g->be->scalar_mul_fwd(attn_weights(g, n), attn_raw(g, n), cw->val, p);
    } else if (sw) { /* S = scale * Q K^T with a learned scale */
        gemm(g, &d, 0, 1, d.tq, d.tk, d.dk, 1.0f, seq_blk(q, d.tq, d.heads, d.dk), seq_blk(k, d.tk, d.heads, d.dk),
             0.0f, w_blk(attn_raw(g, n), &d));
        g->be->scalar_mul_fwd(attn_weights(g, n), attn_raw(g, n), sw->val, p);
    } else if (g->be->attn_fwd_blocked && !(training && n->rate > 0.0f)) {
        /* S = scale * Q K^T, the softmax, O = W V, a (batch, head) block at a time */
        fl_gemm_desc sd = gemm_desc(&d, 0, 1, d.tq, d.tk, d.dk, d.scale, seq_blk(q, d.tq, d.heads, d.dk),
                                    seq_blk(k, d.tk, d.heads, d.dk), 0.0f, w_blk(p, &d));
        fl_gemm_desc pd = gemm_desc(&d, 0, 0, d.tq, d.dv, d.tk, 1.0f, w_blk(p, &d), seq_blk(v, d.tk, d.heads, d.dv),
                                    0.0f, seq_blk(n->val, d.tq, d.heads, d.dv));
        g->be->attn_fwd_blocked(&sd, &pd, &d, q, k, v, n->in[3] ? n->in[3]->val : NULL,
                                n->in[4] ? n->in[4]->val : NULL, n->in[5] ? n->in[5]->val : NULL, p, n->val,
                                !g->no_backward);
        return;
    } else { /* S = scale * Q K^T per (batch, head) */
        gemm(g, &d, 0, 1, d.tq, d.tk, d.dk, d.scale, seq_blk(q, d.tq, d.heads, d.dk), seq_blk(k, d.tk, d.heads, d.dk),
             0.0f, w_blk(p, &d));
    }
    /* then the masked softmax in place */
    g->be->attn_softmax_fwd(&d, n->in[3] ? n->in[3]->val : NULL, n->in[4] ? n->in[4]->val : NULL,
                            n->in[5] ? n->in[5]->val : NULL, p);
    const float *w = p;
    if (training && n->rate > 0.0f) {
        g->be->dropout_fwd(attn_weights(g, n), n->rate, g->seed, fl_dropout_stream(n->stream, g->step),
                           fl_graph_mask_offset(g, (int64_t)n->attn.heads * n->attn.tq * n->attn.tk), p,
                           attn_dropped(g, n), attn_keep(g, n));
        w = attn_dropped(g, n);
    }
    /* O = W V */
    gemm(g, &d, 0, 0, d.tq, d.dv, d.tk, 1.0f, w_blk(w, &d), seq_blk(v, d.tk, d.heads, d.dv), 0.0f,
         seq_blk(n->val, d.tq, d.heads, d.dv));
}

/* Input k's gradient buffer when it wants one: NULL, or its rows x width
 * floats per sample. */
typedef struct gbuf { const float *p; int64_t rows, width; } gbuf;
static gbuf grad_buf(const fl_node *n, int k, int64_t rows, int64_t width) {
    const fl_node *x = n->in[k];
    return (gbuf){x && x->needs_grad ? x->grad : NULL, rows, width};
}
/* Whether two gradient buffers are apart, or one buffer of one layout (one
 * node): then the blocked backward gives each block's rows what the
 * whole-batch calls give them. */
static bool apart_or_same(gbuf a, gbuf b, int64_t batch) {
    if (!a.p || !b.p) return true;
    if (a.p == b.p) return a.rows == b.rows && a.width == b.width;
    return a.p + batch * a.rows * a.width <= b.p || b.p + batch * b.rows * b.width <= a.p;
}

/* The backward one (batch, head) block at a time (the backend's optional
 * attn_bwd_blocked), where it gives the same numbers: no dropout on the
 * weights, no learned scores, and dq, dk, dv apart or one node. Returns
 * false (nothing done) otherwise. */
static bool backward_blocked(fl_graph *g, fl_node *n, const fl_attn_desc *d) {
    if (!g->be->attn_bwd_blocked || n->rate > 0.0f || learned(n)) return false;
    const int64_t hk = (int64_t)d->heads * d->dk, hv = (int64_t)d->heads * d->dv;
    gbuf bq = grad_buf(n, 0, d->tq, hk), bk = grad_buf(n, 1, d->tk, hk), bv = grad_buf(n, 2, d->tk, hv);
    if (!apart_or_same(bq, bk, d->n) || !apart_or_same(bq, bv, d->n) || !apart_or_same(bk, bv, d->n)) return false;
    /* the betas and marks in the order of the whole-batch calls */
    float betav = 0.0f, betaq = 0.0f, betak = 0.0f;
    float *dv = fl_op_in_grad(n, 2, &betav);
    fl_op_mark(n, 2);
    float *dq = fl_op_in_grad(n, 0, &betaq);
    fl_op_mark(n, 0);
    float *dk = fl_op_in_grad(n, 1, &betak);
    fl_op_mark(n, 1);
    const float *q = n->in[0]->val, *k = n->in[1]->val, *v = n->in[2]->val, *dout = n->grad, *p = attn_p(g, n);
    float *gs = attn_scratch(g, n);
    fl_gemm_desc vd = gemm_desc(d, 1, 0, d->tk, d->dv, d->tq, 1.0f, w_blk(p, d), seq_blk(dout, d->tq, d->heads, d->dv),
                                betav, seq_blk(dv, d->tk, d->heads, d->dv));
    fl_gemm_desc gd = gemm_desc(d, 0, 1, d->tq, d->tk, d->dv, 1.0f, seq_blk(dout, d->tq, d->heads, d->dv),
                                seq_blk(v, d->tk, d->heads, d->dv), 0.0f, w_blk(gs, d));
    fl_gemm_desc qd = gemm_desc(d, 0, 0, d->tq, d->dk, d->tk, d->scale, w_blk(gs, d), seq_blk(k, d->tk, d->heads, d->dk),
                                betaq, seq_blk(dq, d->tq, d->heads, d->dk));
    fl_gemm_desc kd = gemm_desc(d, 1, 0, d->tk, d->dk, d->tq, d->scale, w_blk(gs, d), seq_blk(q, d->tq, d->heads, d->dk),
                                betak, seq_blk(dk, d->tk, d->heads, d->dk));
    g->be->attn_bwd_blocked(&vd, &gd, &qd, &kd, d, q, k, v, p, dout, n->in[3] ? n->in[3]->val : NULL,
                            n->in[4] ? n->in[4]->val : NULL, n->in[5] ? n->in[5]->val : NULL, gs, dq, dk, dv);
    return true;
}

/* dV = W^T dO; dW = dO V^T (through the dropout); dS = softmax'(dW);
 * dQ = scale dS K; dK = scale dS^T Q. Each input is marked as soon as it is
 * written, so that q, k, v being one node adds up. */
void fl_attention_backward(fl_graph *g, fl_node *n) {
    fl_attn_desc d = n->attn;
    d.n = g->batch;
    if (backward_blocked(g, n, &d)) return;
    const float *q = n->in[0]->val, *k = n->in[1]->val, *v = n->in[2]->val, *dout = n->grad;
    const float *p = attn_p(g, n), *w = n->rate > 0.0f ? attn_dropped(g, n) : p;
    float *gs = attn_scratch(g, n), beta = 0.0f;
    float *dv = fl_op_in_grad(n, 2, &beta);
    if (dv)
        gemm(g, &d, 1, 0, d.tk, d.dv, d.tq, 1.0f, w_blk(w, &d), seq_blk(dout, d.tq, d.heads, d.dv), beta,
             seq_blk(dv, d.tk, d.heads, d.dv));
    fl_op_mark(n, 2);
    float bq = 0.0f;
    const fl_node *sw = learned(n) ? n->in[6] : NULL, *cw = learned(n) ? n->in[7] : NULL;
    bool need_q = n->in[0]->needs_grad, need_k = n->in[1]->needs_grad;
    bool need_w = (sw && sw->needs_grad) || (cw && cw->needs_grad);
    if (!need_q && !need_k && !need_w) return;
    gemm(g, &d, 0, 1, d.tq, d.tk, d.dv, 1.0f, seq_blk(dout, d.tq, d.heads, d.dv), seq_blk(v, d.tk, d.heads, d.dv),
         0.0f, w_blk(gs, &d));
    if (n->rate > 0.0f) g->be->dropout_bwd(attn_weights(g, n), n->rate, attn_keep(g, n), gs, gs, 0.0f);
    g->be->attn_softmax_bwd(&d, n->in[3] ? n->in[3]->val : NULL, n->in[4] ? n->in[4]->val : NULL,
                            n->in[5] ? n->in[5]->val : NULL, p, gs);
    if (sw || cw) { /* gs: the scores' gradient -> the unscaled ones' (and the scalar weights') */
        size_t off = 0;
        float *dw[2] = {fl_op_weight_grad(n, 6, &off), fl_op_weight_grad(n, 7, &off)};
        const fl_node *outer = cw ? cw : sw;
        g->be->scalar_mul_bwd(attn_weights(g, n), attn_raw(g, n), outer->val, gs, gs, 0.0f, dw[cw ? 1 : 0]);
        if (cw) {
            float b0 = 0.0f, b1 = 0.0f;
            float *dq = fl_op_in_grad(n, 0, &b0);
            if (dq || dw[0]) g->be->attn_concat_bwd(&d, q, k, sw ? sw->val : NULL, gs, 0, dq, b0, dw[0]);
            fl_op_mark(n, 0);
            float *dk = fl_op_in_grad(n, 1, &b1);
            if (dk) g->be->attn_concat_bwd(&d, q, k, sw ? sw->val : NULL, gs, 1, dk, b1, NULL);
            fl_op_mark(n, 1);
        }
        fl_op_weight_grads_add(g->be, n, 6, 7, dw);
        if (cw) return;
        d.scale = 1.0f; /* gs is now the gradient of Q K^T */
    }
    float *dq = fl_op_in_grad(n, 0, &bq);
    if (dq)
        gemm(g, &d, 0, 0, d.tq, d.dk, d.tk, d.scale, w_blk(gs, &d), seq_blk(k, d.tk, d.heads, d.dk), bq,
             seq_blk(dq, d.tq, d.heads, d.dk));
    fl_op_mark(n, 0);
    float bk = 0.0f;
    float *dk = fl_op_in_grad(n, 1, &bk);
    if (dk)
        gemm(g, &d, 1, 0, d.tk, d.dk, d.tq, d.scale, w_blk(gs, &d), seq_blk(q, d.tq, d.heads, d.dk), bk,
             seq_blk(dk, d.tk, d.heads, d.dk));
    fl_op_mark(n, 1);
}

/* Multiply-adds per sample: q k^T and p v per head (cost.c). */
double fl_attention_macs(const fl_node *n) {
    const fl_attn_desc *a = &n->attn;
    return (double)a->heads * a->tq * a->tk * (double)(a->dk + a->dv);
}

/* d(q k^T) -> dq, dk; d(p v) -> dp, dv: two products per forward product, where q, k or v needs a gradient. */
double fl_attention_backward_macs(const fl_node *n, const bool *need, double macs) {
    for (int i = 0; i < 3 && i < n->nin; i++)
        if (n->in[i] && need[n->in[i]->id]) return 2 * macs;
    return 0;
}

/* --------------------------------------------------------- RepeatVector
 *
 * y[b, t, :] = x[b, :]: the concatenation kernels, one block per step. */

fl_node *fl_graph_repeat(fl_graph *g, const char *name, fl_node *x, int64_t reps) {
    char s[128];
    if (x->ndim != 2)
        return fl_error_null(FL_ERR_SHAPE, "layer '%s' (RepeatVector): input %s must be (batch, features)", name,
                             sample_str(x, s, sizeof s));
    if (reps < 1)
        return fl_error_null(FL_ERR_INVALID_ARG, "layer '%s' (RepeatVector): n is %lld, expected >= 1", name,
                             (long long)reps);
    fl_node *n = fl_graph_new_node(g, FL_OP_REPEAT, name);
    if (!n) return NULL;
    n->nin = 1;
    n->in[0] = x;
    if (!fl_op_set_shape(g, n, true, 2, (int64_t[]){reps, x->shape[1]})) return NULL;
    return n;
}

void fl_repeat_forward(fl_graph *g, fl_node *n, bool training) {
    (void)training;
    const int64_t t = n->shape[1], d = n->shape[2];
    for (int64_t i = 0; i < t; i++) g->be->concat_fwd(g->batch, d, t * d, i * d, n->in[0]->val, n->val);
}

void fl_repeat_backward(fl_graph *g, fl_node *n) {
    float beta = 0.0f;
    float *dx = fl_op_in_grad(n, 0, &beta);
    if (!dx) return;
    const int64_t t = n->shape[1], d = n->shape[2];
    for (int64_t i = 0; i < t; i++) g->be->concat_bwd(g->batch, d, t * d, i * d, n->grad, dx, i ? 1.0f : beta);
    fl_op_mark(n, 0);
}
