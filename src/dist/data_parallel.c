/*
 * data_parallel.c — the model-aware half of data-parallel training over
 * MPI: batch shares, gradient and statistics reductions, the weights check.
 * The MPI calls themselves are in mpi.c.
 */
#include "dist/data_parallel.h"
#include "dist/mpi.h"
#include "core/error.h"

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

fl_status fl_dp_reduce_grads(fl_model *m, bool have) {
    const fl_optimizer *o = m->opt;
    /* one all-reduce per weight, in the optimizer's (the graph's) order: the same on every rank */
    for (int i = 0; i < o->nparams; i++) {
        const fl_param_ref *p = &o->params[i];
        if (!have) memset(p->g, 0, (size_t)p->n * sizeof(float));
        if (fl_dist_allreduce_f32(p->g, p->n) != FL_OK) {
            fl_error_prefix("reducing the gradients of weight %d of %d: ", i + 1, o->nparams);
            return fl_last_status();
        }
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
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i]->op == FL_OP_PARAM)
            mine[k++] = hash_bytes(0xcbf29ce484222325ull, g->nodes[i]->val, fl_node_size(g->nodes[i]));
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
            if (fl_dist_allreduce_f32(s->val, sz) != FL_OK) {
                fl_error_prefix("averaging the moving statistics of '%s': ", n->name);
                return fl_last_status();
            }
            for (int64_t j = 0; j < sz; j++) s->val[j] /= (float)fl_dist_size();
        }
    }
    return FL_OK;
}
