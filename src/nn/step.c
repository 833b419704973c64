/*
 * step.c — the device side of fit, evaluate and predict (train.c), which call the backend only through it
 * (and the batches through batches.c): the step's buffers on the backend (targets, row losses, the running
 * totals), the loss and metrics, the forward-only step of inference and its size, and one training step:
 * forward, the loss, backward and the optimizer, with MPI's reductions where the step is a share of a global
 * batch, and, on a backend with device graphs (CUDA), the step captured once and replayed.
 */
#include "nn/step.h"
#include "nn/fit.h"
#include "core/plan.h"
#include "core/tensor.h"
#include "ops/math.h"
#include "ops/ops.h"
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

/* ------------------------------------------------ buffers, loss, inference */

/* The output's mask when the loss applies it: a rank-3 (or more) output
 * whose mask has one value per row of the loss (Keras: the _keras_mask of
 * y_pred weighs the loss). */
const fl_node *fl_loss_mask_of(const fl_model *m) {
    const fl_node *o = m->output, *k = o->mask;
    return k && fl_node_sample_size(k) * fl_out_classes(m) == fl_node_sample_size(o) ? k : NULL;
}

/* How the loss sees the output (see fl_loss_input). */
static int loss_input(const fl_model *m) {
    const fl_node *o = m->output;
    if (m->loss.from_logits) return FL_LI_LOGITS;
    bool ce = m->loss.kind == FL_LOSS_CATEGORICAL_CROSSENTROPY ||
              m->loss.kind == FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    if (ce && o->op == FL_OP_ACT && o->act == FL_ACT_SOFTMAX) return FL_LI_SOFTMAX_FUSED;
    if (m->loss.kind == FL_LOSS_BINARY_CROSSENTROPY && o->act == FL_ACT_SIGMOID && fl_op_preact_grad(o->op))
        return FL_LI_SIGMOID_FUSED;
    return FL_LI_PROBS;
}

/* Makes the step buffers hold `batch` samples, for training or (infer) for
 * forward passes only. */
fl_status fl_step_reserve(fl_model *m, int64_t batch, bool infer) {
    fl_model_weights_ready(m); /* every step reads them */
    FL_TRY(infer ? fl_graph_reserve_infer(&m->g, batch) : fl_graph_reserve(&m->g, batch));
    const fl_backend *be = m->g.be;
    int64_t rows = fl_node_sample_size(m->output) / fl_out_classes(m);
    int64_t tcap = m->g.batch_cap * fl_node_sample_size(m->output);
    if (!m->stats) {
        m->stats = be->alloc(FL_STATS * sizeof(double));
        if (!m->stats) return fl_last_status();
    }
    if (tcap > m->target_cap) {
        be->free(m->target); be->free(m->row_loss); be->free(m->row_score); be->free(m->idx_dev); be->free(m->weight);
        free(m->stage_x); free(m->stage_y); free(m->stage_w);
        m->target = m->row_loss = m->row_score = m->weight = NULL;
        m->idx_dev = NULL;
        m->stage_x = m->stage_y = m->stage_w = NULL;
        m->target_cap = 0;
        m->target = be->alloc((size_t)tcap * sizeof(float));
        m->row_loss = m->target ? be->alloc((size_t)(m->g.batch_cap * rows) * sizeof(float)) : NULL;
        m->row_score = m->row_loss ? be->alloc((size_t)(m->g.batch_cap * rows) * sizeof(float)) : NULL;
        m->weight = m->row_score ? be->alloc((size_t)(m->g.batch_cap * rows) * sizeof(float)) : NULL;
        if (!m->weight) return fl_last_status();
        if (!be->host_memory) {
            /* device backends: batch indices, and host staging for data that stays on the host */
            m->idx_dev = be->alloc((size_t)m->g.batch_cap * sizeof(int64_t));
            int64_t xmax = 0;
            for (int i = 0; i < m->ninputs; i++)
                if (fl_node_sample_size(m->inputs[i]) > xmax) xmax = fl_node_sample_size(m->inputs[i]);
            m->stage_x = fl_malloc((size_t)(m->g.batch_cap * xmax) * sizeof(float), "batch staging");
            m->stage_y = fl_malloc((size_t)tcap * sizeof(float), "batch staging");
            m->stage_w = fl_malloc((size_t)(m->g.batch_cap * rows) * sizeof(float), "batch staging");
            if (!m->idx_dev || !m->stage_x || !m->stage_y || !m->stage_w) return fl_last_status();
        }
        m->target_cap = tcap;
    }
    return FL_OK;
}

/* An asynchronous device error (a failed kernel) surfaces here. */
fl_status fl_device_status(fl_model *m, const char *what) {
    const fl_backend *be = m->g.be;
    if (be->check && be->check() != 0) {
        fl_error_prefix("%s on the %s: ", what, be->name);
        return fl_last_status() != FL_OK ? fl_last_status() : FL_ERR_DEVICE;
    }
    return FL_OK;
}

/* Running totals of loss and metrics live in m->stats (on the device):
 * per-sample averages times the batch size, so that they weight by samples
 * like Keras's trackers. They are read only when something is shown. */
void fl_step_stats_zero(fl_model *m) { m->g.be->zero(m->stats, FL_STATS * sizeof(double)); }

void fl_step_stats_read(fl_model *m, int64_t seen, double *out) {
    double raw[FL_STATS];
    m->g.be->download(raw, m->stats, FL_STATS * sizeof(double));
    for (int i = 0; i <= m->nmetrics; i++) out[i] = raw[i] / (double)(seen > 0 ? seen : 1);
}

/* Loss (+ gradient when training) and metrics for the batch in the graph. */
void fl_loss_and_metrics(fl_model *m, bool grad) {
    const fl_backend *be = m->g.be;
    fl_node *o = m->output;
    int C = fl_out_classes(m);
    int64_t rows = fl_node_size(o) / C;
    int code = m->loss.kind == FL_LOSS_CATEGORICAL_CROSSENTROPY ? FL_LC_CCE
             : m->loss.kind == FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY ? FL_LC_SCCE
             : m->loss.kind == FL_LOSS_BINARY_CROSSENTROPY ? FL_LC_BCE : FL_LC_MSE;
    /* under MPI the mean is over the global batch's rows: the ranks' gradients sum to one process's */
    int64_t grows = m->dist_batch ? rows / m->g.batch * m->dist_batch : rows;
    fl_loss_desc d = {code, loss_input(m), rows, C, 1.0f / (float)grows};
    be->loss(&d, o->val, m->target, m->row_loss, grad ? o->grad : NULL);
    if (grad) {
        o->grad_ready = true;
        o->grad_is_preact = d.input == FL_LI_SOFTMAX_FUSED || d.input == FL_LI_SIGMOID_FUSED;
    }
    const fl_node *mask = fl_loss_mask_of(m);
    /* Keras's apply_mask: the valid rows weigh rows / valid, the others 0 */
    if (mask) be->loss_mask(rows, C, mask->val, m->row_loss, grad ? o->grad : NULL, m->stats + FL_STAT_VALID);
    /* sample weights (Keras's reduce_weighted_values): the weighted row losses are summed and divided by
     * the rows, weighted or not ("sum_over_batch_size"); the compiled metrics stay unweighted, as Keras's
     * `metrics` (its `weighted_metrics` would take the weights) */
    if (m->batch_weighted) be->loss_weight(rows, C, m->weight, m->row_loss, grad ? o->grad : NULL);
    double scale = (double)m->g.batch / (double)rows;
    be->sum_into(rows, m->row_loss, scale, m->stats);
    /* the metrics are not masked: Keras 3.15's compiled metrics do not see y_pred's mask (its
     * train_on_batch reports the accuracy over every step, padding included: train_seq_scce_masked) */
    for (int i = 0; i < m->nmetrics; i++) {
        be->metric(m->metric_codes[i], rows, C, o->val, m->target, m->row_score);
        be->sum_into(rows, m->row_score, scale, m->stats + 1 + i);
    }
}

/* Predict's and evaluate's forward pass: no backward follows. `batch` is the batch the caller asked for
 * (at most the samples there are), whatever step of it runs: what inference's choices that weigh a batch's
 * size (folding a BatchNormalization into its convolution) weigh, so that every step, and the last,
 * shorter batch, compute as the whole batch would. */
void fl_step_forward(fl_graph *g, int64_t batch) {
    fl_threads_follow_load();
    g->no_backward = true;
    g->fold_batch = batch;
    fl_graph_forward(g, false);
    g->fold_batch = 0;
    g->no_backward = false;
}

/* Samples per forward step when predicting in batches of bs. In inference each sample is computed alone,
 * so where the backend gives a budget (infer_budget: the CPU's, twice its threads' L2), a batch whose
 * buffers would not fit runs in steps of fewer samples, each layer's output still in cache when the next
 * reads it. Each step pays a parallel region per layer, so steps go below 32 samples only for samples whose
 * buffers take more than a quarter of the budget, and then to 8 (and two per thread): unet_small's predict
 * at 512 (1.5 MB a sample) ran 1,587 samples/s in steps of 32 and 2,516 in steps of 8, transformer_text's at
 * 128 (344 KB) 33,000-34,700 in steps of 32 and 27,400 in steps of 8. With fewer than two samples per thread
 * a 3x3 convolution leaves Winograd for the direct kernels (mnist_cnn's predictions in steps of 2 differed
 * from whole batches in the last bit). The choices that weigh the batch's size weigh the whole batch
 * (fl_step_forward), so in steps of 4 to 256, ResNet-20's, mnist_cnn's, MobileNetV2's and the U-Net's
 * predictions were the same to the bit as whole batches'. Not for a model with a recurrent layer: its
 * per-step matrix products want the whole batch (lstm_text's predict ran 35,300 samples/s at 16 and 40,600
 * at 512). Every step reads all the weights, so where they outgrow the cache they would stay in between steps
 * (infer_weight_cache: the CPU's L3), the step grows until its buffers are as large as the weights:
 * ResNet50 at 64x64 (94 MB of weights, 1.1 MB of buffers a sample) ran its predict at 128 in steps of 8 at
 * 365 samples/s and in steps of 96 at 495; DenseNet121 at 64x64 (28 MB, in the 32 MB L3) ran 660 in steps of
 * 32 and 517 in steps of 64. It grows within half of what the model memory limit leaves, so that a model that
 * predicted under the limit still does. $FLYNN_INFER_STEP sets it (for benchmarks and tests). */
#define INFER_STEP 32
int64_t fl_infer_step(const fl_model *m, int64_t bs) {
    const char *e = getenv("FLYNN_INFER_STEP");
    if (e && atoll(e) > 0) return atoll(e) < bs ? atoll(e) : bs;
    const fl_graph *g = &m->g;
    const int64_t least = 2 * fl_get_num_threads() > 8 ? 2 * fl_get_num_threads() : 8;
    if (bs <= least || !g->be->infer_budget) return bs;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i]->op == FL_OP_RNN) return bs;
    fl_plan p;
    fl_fuse_current((fl_graph *)g); /* (predict reserved the graph: current already) */
    if (fl_plan_make(g, NULL, 1, true, 1, false, &p) != FL_OK) {
        fl_clear_error(); /* out of memory planning: whole batches, as before */
        return bs;
    }
    const size_t per = p.bytes > 0 ? p.bytes : 1;
    fl_plan_free(&p);
    int64_t step = (int64_t)(g->be->infer_budget() / per);
    if (step >= INFER_STEP) step -= step % INFER_STEP; /* whole multiples of 32 */
    else step = step < 4 ? least : INFER_STEP;
    /* half of what the model memory limit leaves beside the weights (and their gradients and the optimizer's
     * slots, param_bytes): a model that predicted in small steps under the limit still does, whatever the
     * cache (a budget of 12 MiB, 2 MiB of L2 and 3 threads, took a whole batch of 512 past it: issue 42) */
    const int64_t room = (fl_model_bytes_limit() - g->param_bytes) / 2 / (int64_t)per;
    /* every step reads all the weights: where they outgrow the cache they would stay in between steps, each
     * step reads them from memory, and the step grows until its buffers are as large as they are */
    if (g->be->infer_weight_cache) {
        size_t w = 0;
        for (int i = 0; i < g->n; i++)
            if (g->nodes[i]->op == FL_OP_PARAM) w += (size_t)fl_node_size(g->nodes[i]) * sizeof(float);
        const int64_t need = (int64_t)((w + per - 1) / per); /* samples whose buffers match the weights */
        if (w > g->be->infer_weight_cache() && need > step) {
            int64_t ws = (need + INFER_STEP - 1) / INFER_STEP * INFER_STEP;
            if (ws > room) ws = room;
            if (ws > step) step = ws;
        }
    }
    if (room >= 1 && step > room) step = room >= INFER_STEP ? room - room % INFER_STEP : room;
    return step < bs ? step : bs;
}

/* Samples [0, b) of node n's value (b * its sample size floats) into dst on the host. */
void fl_step_read(const fl_model *m, const fl_node *n, float *dst, int64_t b) {
    m->g.be->download(dst, n->val, (size_t)(b * fl_node_sample_size(n)) * sizeof(float));
}

/* fit's line on the device graphs (verbose 2 on a backend that has them), and their counts into h. */
void fl_step_report(const fl_model *m, const fl_step_state *gs, int mode, fl_history *h) {
    h->graph_captures = gs->captures, h->graph_failures = gs->failures, h->graph_replays = gs->replays;
    if (m->g.be->graph_begin && mode == FL_VERBOSE_EPOCH)
        printf("device graphs: %lld step%s captured, %lld replayed, %lld capture%s failed%s\n", (long long)gs->captures,
               gs->captures == 1 ? "" : "s", (long long)gs->replays, (long long)gs->failures,
               gs->failures == 1 ? "" : "s",
               gs->failures ? " (those steps ran eagerly; FLYNN_CUDA_GRAPHS=require makes a failure an error)" : "");
}

