/*
 * data_parallel.c — the model-aware half of data-parallel training over
 * MPI: batch shares, gradient and statistics reductions, the weights check.
 * The MPI calls themselves are in mpi.c; on a device backend the gradients
 * go through NCCL (nccl.c) on the backend's communication stream, and the
 * small reductions (loss totals, moving statistics, the weights' hashes)
 * through MPI on host copies.
 */
#include "dist/data_parallel.h"
#include "dist/mpi.h"
#include "dist/nccl.h"
#include "core/clock.h"
#include "core/error.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fl_dp_share(int64_t b, int64_t *lo, int64_t *cnt) {
    int64_t r = fl_dist_rank(), n = fl_dist_size(), base = b / n, rem = b % n;
    *cnt = base + (r < rem ? 1 : 0);
    *lo = r * base + (r < rem ? r : rem);
}

fl_status fl_dp_reduce_stats(const double *before, double *stats, int n) {
    double d[64];
    if (n > 64) return fl_error(FL_ERR_INVALID_ARG, "fl_dp_reduce_stats: %d totals, at most 64", n);
    for (int i = 0; i < n; i++) d[i] = stats[i] - before[i];
    FL_TRY(fl_dist_allreduce_f64(d, n));
    for (int i = 0; i < n; i++) stats[i] = before[i] + d[i];
    return FL_OK;
}

/* The buckets of one plan: weights j (the optimizer's index, which is the
 * graph's order of the trainable weights) from nparams - 1 down to 0, cut
 * into runs of about `cap` floats: bucket b holds first[b] and the
 * count[b] - 1 weights below it. */
struct fl_dp_buckets {
    const fl_param_ref *params; /* the plan's key: the optimizer's binding and the graph's shape */
    const fl_backend *be;       /* device (not host memory): buffers there, sums through NCCL */
    bool device;
    int nparams, nnodes;
    int64_t generation;
    int *node_param;            /* graph node index -> weight j, or -1 */
    int *bucket_of;             /* weight j -> its bucket */
    int nb, *first, *count, *left;
    int64_t *len;               /* floats in bucket b */
    float **buf;                /* its packed gradients (NULL for a bucket of one weight: reduced in place) */
    fl_dist_req *req;
    int started;                /* buckets 0..started-1 are on their way */
    bool overlap;
    fl_status err;
    double wait_s;
    int64_t steps, early, total; /* buckets started during backward, buckets started */
};

void fl_dp_buckets_free(fl_model *m) {
    struct fl_dp_buckets *d = m->dp;
    if (!d) return;
    m->g.on_param_grad = NULL;
    m->g.on_param_ctx = NULL;
    for (int b = 0; b < d->nb; b++)
        if (d->buf[b]) { if (d->device) d->be->free(d->buf[b]); else free(d->buf[b]); }
    free(d->buf); free(d->len); free(d->req); free(d->first); free(d->count); free(d->left);
    free(d->bucket_of); free(d->node_param);
    free(d);
    m->dp = NULL;
}

void fl_dp_buckets_end(fl_model *m) {
    const struct fl_dp_buckets *d = m->dp;
    if (d && getenv("FLYNN_DP_STATS") && fl_dist_rank() == 0)
        fprintf(stderr, "flynn: data parallel: %lld steps waited %.3f ms each for the gradients' sums after "
                "backward; %lld of %lld buckets started during backward\n", (long long)d->steps,
                d->steps ? 1e3 * d->wait_s / (double)d->steps : 0.0, (long long)d->early, (long long)d->total);
    fl_dp_buckets_free(m);
}

static bool env_off(const char *name) {
    const char *v = getenv(name);
    return v && strcmp(v, "0") == 0;
}

/* Makes the plan for the optimizer's binding and the graph as they are. */
static fl_status plan(fl_model *m) {
    const fl_optimizer *o = m->opt;
    struct fl_dp_buckets *d = m->dp;
    if (d && d->params == o->params && d->nparams == o->nparams && d->nnodes == m->g.n &&
        d->generation == m->g.generation)
        return FL_OK;
    double wait = d ? d->wait_s : 0.0;
    int64_t steps = d ? d->steps : 0, early = d ? d->early : 0, total = d ? d->total : 0;
    fl_dp_buckets_free(m);
    d = fl_calloc(1, sizeof *d, "gradient buckets");
    if (!d) return fl_last_status();
    m->dp = d;
    d->wait_s = wait;
    d->steps = steps;
    d->early = early;
    d->total = total;
    d->params = o->params;
    d->be = m->g.be;
    d->device = !m->g.be->host_memory;
    d->nparams = o->nparams;
    d->nnodes = m->g.n;
    d->generation = m->g.generation;
    d->overlap = !env_off("FLYNN_DP_OVERLAP");
    const char *kb = getenv("FLYNN_DP_BUCKET_KB");
    int64_t cap = (kb && atoll(kb) > 0 ? atoll(kb) : 1024) * 1024 / (int64_t)sizeof(float);
    const int np = o->nparams > 0 ? o->nparams : 1;
    d->node_param = fl_calloc((size_t)(m->g.n > 0 ? m->g.n : 1), sizeof(int), "gradient buckets");
    d->bucket_of = fl_calloc((size_t)np, sizeof(int), "gradient buckets");
    d->first = fl_calloc((size_t)np, sizeof(int), "gradient buckets");
    d->count = fl_calloc((size_t)np, sizeof(int), "gradient buckets");
    d->left = fl_calloc((size_t)np, sizeof(int), "gradient buckets");
    d->len = fl_calloc((size_t)np, sizeof(int64_t), "gradient buckets");
    d->buf = fl_calloc((size_t)np, sizeof(float *), "gradient buckets");
    d->req = fl_calloc((size_t)np, sizeof(fl_dist_req), "gradient buckets");
    if (!d->node_param || !d->bucket_of || !d->first || !d->count || !d->left || !d->len || !d->buf || !d->req)
        return fl_last_status();
    /* the trainable weights in graph order are the optimizer's, j = 0, 1, ... (fl_optimizer_bind) */
    int j = 0;
    for (int i = 0; i < m->g.n; i++) {
        const fl_node *n = m->g.nodes[i];
        d->node_param[i] = n->op == FL_OP_PARAM && n->trainable ? j++ : -1;
    }
    if (j != o->nparams)
        return fl_error(FL_ERR_STATE, "gradient buckets: %d trainable weights in the graph, the optimizer has %d", j,
                        o->nparams);
    for (j = o->nparams - 1; j >= 0; j--) { /* backward finishes them from the last */
        int b = d->nb;
        if (b > 0 && d->len[b - 1] + o->params[j].n <= cap) b--;
        else d->first[d->nb++] = j;
        d->bucket_of[j] = b;
        d->count[b]++;
        d->len[b] += o->params[j].n;
    }
    for (int b = 0; b < d->nb; b++) {
        if (d->len[b] > INT_MAX)
            return fl_error(FL_ERR_UNSUPPORTED, "gradient buckets: a weight of %lld elements; MPI counts are int",
                            (long long)d->len[b]);
        size_t bytes = (size_t)d->len[b] * sizeof(float);
        if (d->count[b] > 1 && !(d->buf[b] = d->device ? d->be->alloc(bytes) : fl_malloc(bytes, "gradient bucket")))
            return fl_last_status();
    }
    return FL_OK;
}

static void start(struct fl_dp_buckets *d, int b) {
    float *buf = d->buf[b] ? d->buf[b] : d->params[d->first[b]].g; /* one weight: its gradient, in place */
    if (d->buf[b]) {
        float *p = buf;
        for (int k = 0; k < d->count[b]; k++) {
            const fl_param_ref *w = &d->params[d->first[b] - k];
            if (d->device) d->be->copy(p, w->g, (size_t)w->n * sizeof(float));
            else memcpy(p, w->g, (size_t)w->n * sizeof(float));
            p += w->n;
        }
    }
    if (d->err == FL_OK && d->device) /* queued after the packing, beside the rest of backward */
        d->err = fl_nccl_allreduce_f32(buf, d->len[b], d->be->comm_stream_fork());
    else if (d->err == FL_OK)
        d->err = fl_dist_iallreduce_f32(buf, d->len[b], &d->req[b]);
    d->started = b + 1;
}

static void on_param_grad(void *ctx, int i) {
    struct fl_dp_buckets *d = ctx;
    const int j = i < d->nnodes ? d->node_param[i] : -1;
    if (j < 0) return;
    const int b = d->bucket_of[j];
    if (--d->left[b] > 0) return;
    /* backward passes every weight, from the last, so the buckets complete in
     * order; starting any earlier one first keeps the collectives in the same
     * order on every rank even if that ever changed */
    while (d->started <= b) {
        start(d, d->started);
        d->early++;
    }
    if (d->err == FL_OK && !d->device) d->err = fl_dist_progress(d->started, d->req);
}

fl_status fl_dp_open_device(const fl_model *m) {
    if (m->g.be->host_memory) return FL_OK;
    if (strcmp(m->g.be->name, "opencl") == 0) /* NCCL sums CUDA memory only */
        return fl_error(FL_ERR_DEVICE, "model '%s' on OpenCL over %d ranks: data-parallel training runs on the CPU "
                        "(MPI) or on CUDA GPUs (NCCL), not yet on OpenCL: use --device cpu or --device gpu", m->name,
                        fl_dist_size());
    if (fl_nccl_init() == FL_OK) return FL_OK;
    fl_error_prefix("model '%s' on the %s over %d ranks: ", m->name, m->g.be->name, fl_dist_size());
    return fl_last_status();
}

fl_status fl_dp_grads_begin(fl_model *m) {
    FL_TRY(plan(m));
    struct fl_dp_buckets *d = m->dp;
    d->started = 0;
    d->err = FL_OK;
    for (int b = 0; b < d->nb; b++) d->left[b] = d->count[b];
    m->g.on_param_grad = d->overlap ? on_param_grad : NULL;
    m->g.on_param_ctx = d->overlap ? d : NULL;
    return FL_OK;
}

fl_status fl_dp_reduce_grads(fl_model *m, bool have) {
    const fl_optimizer *o = m->opt;
    struct fl_dp_buckets *d = m->dp;
    m->g.on_param_grad = NULL;
    m->g.on_param_ctx = NULL;
    const fl_backend *be = m->g.be;
    const bool device = !be->host_memory;
    if (!have) /* no share of this batch: zeros, in the same buckets and order as the others */
        for (int i = 0; i < o->nparams; i++) be->zero(o->params[i].g, (size_t)o->params[i].n * sizeof(float));
    const double t0 = fl_clock_seconds();
    if (!d || !d->overlap || d->params != o->params) {
        /* one all-reduce per weight, in the optimizer's (the graph's) order: the same on every rank */
        fl_status st = device ? fl_nccl_group_begin() : FL_OK;
        void *stream = device ? be->comm_stream_fork() : NULL;
        for (int i = 0; i < o->nparams && st == FL_OK; i++) {
            st = device ? fl_nccl_allreduce_f32(o->params[i].g, o->params[i].n, stream)
                        : fl_dist_allreduce_f32(o->params[i].g, o->params[i].n);
            if (st != FL_OK) fl_error_prefix("reducing the gradients of weight %d of %d: ", i + 1, o->nparams);
        }
        if (device) {
            fl_status end = fl_nccl_group_end();
            be->comm_stream_join();
            if (st == FL_OK) st = end;
        }
        if (st != FL_OK) return st;
    } else {
        d->total += d->nb;
        while (d->started < d->nb) start(d, d->started);
        if (d->device) {
            d->be->comm_stream_join(); /* the optimizer's step waits for the sums on the device */
            if (d->err == FL_OK) d->err = fl_nccl_check();
        } else if (d->err == FL_OK) {
            d->err = fl_dist_wait_all(d->nb, d->req);
        }
        if (d->err != FL_OK) {
            fl_error_prefix("reducing the gradients (%d buckets): ", d->nb);
            return d->err;
        }
        for (int b = 0; b < d->nb; b++) {
            const float *p = d->buf[b];
            for (int k = 0; p && k < d->count[b]; k++) {
                const fl_param_ref *w = &d->params[d->first[b] - k];
                if (d->device) d->be->copy(w->g, p, (size_t)w->n * sizeof(float));
                else memcpy(w->g, p, (size_t)w->n * sizeof(float));
                p += w->n;
            }
        }
    }
    if (d) {
        d->wait_s += fl_clock_seconds() - t0;
        d->steps++;
    }
    return FL_OK;
}

/* FNV-1a over the bytes of a float buffer */
static uint64_t hash_bytes(uint64_t h, const float *p, int64_t n) {
    const unsigned char *b = (const unsigned char *)p;
    for (int64_t i = 0; i < n * (int64_t)sizeof(float); i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

fl_status fl_dp_check_weights(fl_model *m, const char *when) {
    if (fl_dist_size() < 2) return FL_OK;
    const fl_graph *g = &m->g;
    int np = 0;
    for (int i = 0; i < g->n; i++) np += g->nodes[i]->op == FL_OP_PARAM;
    uint64_t *mine = fl_malloc((size_t)(np + 1) * sizeof(uint64_t), "weight hashes");
    uint64_t *root = fl_malloc((size_t)(np + 1) * sizeof(uint64_t), "weight hashes");
    if (!mine || !root) { free(mine); free(root); return fl_last_status(); }
    int k = 0;
    for (int i = 0; i < g->n; i++) {
        const fl_node *w = g->nodes[i];
        if (w->op != FL_OP_PARAM) continue;
        float *host = g->be->host_memory ? w->val : fl_malloc((size_t)fl_node_size(w) * sizeof(float) + 1, "weight copy");
        if (!host) { free(mine); free(root); return fl_last_status(); }
        if (host != w->val) g->be->download(host, w->val, (size_t)fl_node_size(w) * sizeof(float));
        mine[k++] = hash_bytes(0xcbf29ce484222325ull, host, fl_node_size(w));
        if (host != w->val) free(host);
    }
    memcpy(root, mine, (size_t)np * sizeof(uint64_t));
    fl_status s = fl_dist_bcast(root, (size_t)np * sizeof(uint64_t), 0);
    int bad = -1;
    for (int i = 0; s == FL_OK && i < np && bad < 0; i++)
        if (root[i] != mine[i]) bad = i;
    /* every rank learns whether any differs, so that all fail together */
    double nbad = bad >= 0 ? 1.0 : 0.0;
    if (s == FL_OK) s = fl_dist_allreduce_f64(&nbad, 1);
    if (s == FL_OK && nbad > 0) {
        const fl_node *w = NULL;
        for (int i = 0, j = 0; bad >= 0 && i < g->n; i++)
            if (g->nodes[i]->op == FL_OP_PARAM && j++ == bad) w = g->nodes[i];
        s = w ? fl_error(FL_ERR_STATE, "%s: rank %d's weight of '%s' differs from rank 0's (the ranks diverged: a "
                         "non-deterministic step?)", when, fl_dist_rank(), w->name)
              : fl_error(FL_ERR_STATE, "%s: %.0f rank(s) hold weights that differ from rank 0's", when, nbad);
    }
    free(mine);
    free(root);
    return s;
}

fl_status fl_dp_average_moving_stats(fl_model *m) {
    if (fl_dist_size() < 2) return FL_OK;
    const fl_graph *g = &m->g;
    for (int i = 0; i < g->n; i++) {
        const fl_node *n = g->nodes[i];
        if (n->op != FL_OP_BATCHNORM || n->mode == 1) continue; /* frozen: the statistics did not move */
        for (int k = 3; k <= 4 && k < n->nin; k++) {
            fl_node *s = n->in[k];
            int64_t sz = fl_node_size(s);
            size_t bytes = (size_t)sz * sizeof(float);
            float *host = g->be->host_memory ? s->val : fl_malloc(bytes + 1, "moving statistics");
            if (!host) return fl_last_status();
            if (host != s->val) g->be->download(host, s->val, bytes);
            fl_status st = fl_dist_allreduce_f32(host, sz);
            for (int64_t j = 0; j < sz; j++) host[j] /= (float)fl_dist_size();
            if (host != s->val) {
                if (st == FL_OK) g->be->upload(s->val, host, bytes);
                free(host);
            }
            if (st != FL_OK) {
                fl_error_prefix("averaging the moving statistics of '%s': ", n->name);
                return st;
            }
        }
    }
    return FL_OK;
}
