/*
 * step.h — one training step (step.c), what the fit loop calls: see there.
 */
#ifndef FLYNN_NN_STEP_H
#define FLYNN_NN_STEP_H

#include "nn.h"

/* m->stats: the running loss, the metrics, and the count of valid rows of a masked output (kept by
 * loss_mask; Keras's metrics do not use it) */
#define FL_STAT_VALID (1 + FL_MAX_METRICS)
#define FL_STATS (2 + FL_MAX_METRICS)

/* A training step of the full batch size is captured as a device graph after two eager full steps and
 * replayed from then on (step.c); the counts go to the History (fl_history_graph_*). */
typedef struct fl_step_state {
    void *graph;
    int64_t generation;
    int eager_full_steps;
    bool failed;
    int64_t captures, failures, replays;
} fl_step_state;

/* One step on the batch the graph holds; *finite false where the loss was checked and is not finite. full:
 * the batch is of the full size (only those are captured). */
fl_status fl_train_step(fl_model *m, fl_step_state *gs, bool full, bool check, bool *finite);
/* Frees the step's graph. */
void fl_step_state_end(fl_model *m, fl_step_state *gs);

/* The loss and metrics of the batch in the graph into m->stats (and the loss's gradient with grad); the
 * backend's sticky error, named with what ran */
void fl_loss_and_metrics(fl_model *m, bool grad);
fl_status fl_device_status(fl_model *m, const char *what);
/* The output's mask where the loss applies it (Keras: y_pred's _keras_mask weighs the loss), or NULL */
const fl_node *fl_loss_mask_of(const fl_model *m);
/* The graph's and the step's buffers for `batch` samples, training's or (infer) inference's */
fl_status fl_step_reserve(fl_model *m, int64_t batch, bool infer);
/* The running totals: zeroed, and read (averaged over `seen` samples: the loss, then the metrics) */
void fl_step_stats_zero(fl_model *m);
void fl_step_stats_read(fl_model *m, int64_t seen, double *out);
/* Inference: a forward step (batch: what the caller asked for), and the samples per step for batches of bs */
void fl_step_forward(fl_graph *g, int64_t batch);
int64_t fl_infer_step(const fl_model *m, int64_t bs);
/* Samples [0, b) of node n's value into dst (host) */
void fl_step_read(const fl_model *m, const fl_node *n, float *dst, int64_t b);
/* fit's report of the device graphs (verbose 2) and their counts into h */
void fl_step_report(const fl_model *m, const fl_step_state *gs, int mode, fl_history *h);

#endif
