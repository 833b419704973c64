/*
 * step.c — one training step, the unit the fit loop (train.c) calls: forward, the loss and metrics, backward
 * and the optimizer, with MPI's reductions where the step is a share of a global batch; and, on a backend
 * with device graphs (CUDA), the step captured once and replayed (issue 45: the training loop captured
 * graphs itself).
 */
#include "nn/step.h"
#include "nn.h"
#include "core/error.h"
#include "dist/data_parallel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A training step of the full batch size is captured as a device graph
 * (where the backend has graphs) after two ordinary steps, so that the
 * first-call work (algorithm searches, allocations) is done, and replayed
 * from then on; any change of buffers (the generation) captures anew. If
 * capture fails, the step runs as usual and capture is not tried again.
 * What differs from step to step inside a replayed step, the optimizer's
 * step (Adam's t) and the dropout streams' step, is handed to every launch
 * from the host's counters: steps run eagerly between replays (the partial
 * last batch of each epoch) advance those, and the replay must see it. */

/* FLYNN_CUDA_GRAPHS=require: a capture that fails is an error, not a quiet eager step, so that a run meant
 * to measure or check graphs cannot pass with graphs never running (issue 44). ("0": no graphs, the CUDA
 * backend's graph_begin refuses.) */
static bool graphs_required(void) {
    const char *e = getenv("FLYNN_CUDA_GRAPHS");
    return e && strcmp(e, "require") == 0;
}

static fl_status capture_failed(const fl_model *m, const char *what) {
    char why[512];
    snprintf(why, sizeof why, "%s", fl_last_error()); /* (fl_error writes the buffer fl_last_error reads) */
    return fl_error(FL_ERR_DEVICE, "fl_fit: FLYNN_CUDA_GRAPHS=require, but %s a training step of model '%s' as a "
                    "%s graph failed%s%s", what, m->name, m->g.be->name, why[0] ? ": " : "", why);
}

/* One step; with `check` (host-memory backends without step capture only:
 * it reads the running loss), false without an update when the loss came
 * out non-finite. */
static bool run_step(fl_model *m, bool check) {
    const fl_backend *be = m->g.be;
    fl_threads_follow_load();
    fl_graph_clear_grads(&m->g);
    bool have = !m->dist_batch || m->dist_share > 0; /* under MPI a rank can have no share of a last batch */
    double before[FL_STATS], now[FL_STATS];
    if (m->dist_batch) be->download(before, m->stats, sizeof before);
    if (have) {
        fl_graph_forward(&m->g, true);
        fl_loss_and_metrics(m, true);
    }
    /* under MPI: the global batch's totals on every rank, so that every rank takes the same decisions */
    if (m->dist_batch) {
        be->download(now, m->stats, sizeof now);
        if (fl_dp_reduce_stats(before, now, FL_STATS) != FL_OK) return false;
        be->upload(m->stats, now, sizeof now);
        if (check && !isfinite(now[0])) return false;
    } else if (check && !isfinite(m->stats[0])) { /* the CPU's eager steps: host memory */
        return false;
    }
    /* under MPI the gradients' sums start during backward (fl_dp_grads_begin's buckets) */
    if (m->dist_batch && fl_dp_grads_begin(m) != FL_OK) return false;
    if (have) fl_graph_backward(&m->g);
    if (m->dist_batch && fl_dp_reduce_grads(m, have) != FL_OK) return false;
    fl_optimizer_step(m->opt);
    return true;
}

fl_status fl_train_step(fl_model *m, fl_step_state *gs, bool full, bool check, bool *finite) {
    const fl_backend *be = m->g.be;
    *finite = true;
    if (m->dist_batch || (check && be->host_memory && !be->graph_begin)) { /* the CPU: the loss is read after each step */
        fl_clear_error();
        *finite = run_step(m, check);
        return *finite || fl_last_status() == FL_OK ? FL_OK : fl_last_status(); /* an MPI error */
    }
    /* a captured step bakes in the masks' row offset, so only whole batches are
     * captured or replayed (MPI's shares run eagerly, above, on the CPU) */
    if (m->g.row_offset != 0)
        return fl_error(FL_ERR_UNSUPPORTED, "fl_fit: a share of a batch from row %lld on the %s backend: device "
                        "graphs replay whole batches only", (long long)m->g.row_offset, be->name);
    if (gs->graph && full && gs->generation == m->g.generation) {
        if (be->graph_set_learning_rate) be->graph_set_learning_rate(fl_optimizer_lr_at(m->opt, m->opt->iterations));
        if (be->graph_launch(gs->graph, m->opt->iterations, m->g.step) != 0)
            return fl_device_status(m, "replaying a training step");
        gs->replays++;
        fl_optimizer_count_step(m->opt);
        return FL_OK;
    }
    if (gs->graph && gs->generation != m->g.generation) {
        be->graph_free(gs->graph);
        gs->graph = NULL;
        gs->eager_full_steps = 0;
    }
    bool capture = be->graph_begin && !gs->graph && !gs->failed && full && gs->eager_full_steps >= 2;
    int64_t it0 = m->opt->iterations;
    if (capture && be->graph_begin(it0, m->g.step) != 0) {
        capture = false;
        gs->failed = true;
        gs->failures++;
        if (graphs_required()) return capture_failed(m, "beginning to capture");
        fl_clear_error(); /* no graph is no error: the step runs as usual */
    }
    run_step(m, false);
    if (full) gs->eager_full_steps++;
    if (!capture) return FL_OK;
    void *g = be->graph_end();
    if (!g) { /* the step was recorded but not run: run it now */
        gs->failed = true;
        gs->failures++;
        if (graphs_required()) return capture_failed(m, "capturing");
        m->opt->iterations = it0;
        fl_clear_error(); /* whatever failed while recording was about the capture */
        run_step(m, false);
        return FL_OK;
    }
    gs->graph = g;
    gs->generation = m->g.generation;
    if (be->graph_set_learning_rate) be->graph_set_learning_rate(fl_optimizer_lr_at(m->opt, it0));
    gs->captures++;
    if (be->graph_launch(g, it0, m->g.step) != 0) return fl_device_status(m, "running a captured training step");
    gs->replays++;
    return FL_OK;
}



void fl_step_state_end(fl_model *m, fl_step_state *gs) {
    if (gs->graph) m->g.be->graph_free(gs->graph);
    gs->graph = NULL;
}
