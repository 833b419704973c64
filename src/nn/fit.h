/*
 * fit.h — the parts of fit, evaluate and predict (train.c) that live in their own files:
 *   batches.c    the data they take: x, y and the weights checked, the rows as the inputs hold them, and the
 *                batch sources (arrays in memory, on the device where they fit, or a stream) behind fl_batches;
 *   history.c    what fit reports: History and the Keras progress bar;
 *   nonfinite.c  TerminateOnNaN: the first NaN or infinity found and named (a sample, a weight, a layer).
 * Internal to src/nn.
 */
#ifndef FLYNN_NN_FIT_H
#define FLYNN_NN_FIT_H

#include "nn.h"
#include "io/io.h"

#include <stdio.h>

/* floats per sample of the output's last axis: its classes */
static inline int fl_out_classes(const fl_model *m) { return (int)m->output->shape[m->output->ndim - 1]; }

/* ------------------------------------------------------------ batches.c */

/* A data set as the training loop reads it: one array of rows per model
 * input, the targets y (as floats) and the sample weights (one per loss row)
 * on the host, and copies on the device when the backend's memory is not the
 * host's and they all fit, so that a batch is gathered on the device; else
 * every batch is staged through the host. A batch takes the same samples of
 * every array (shuffling permutes the inputs, y and the weights together). */
typedef struct fl_batches {
    int nx;                                  /* inputs */
    fl_node *in[FL_MODEL_MAX_IO];            /* the input nodes the rows go to */
    int64_t n, xrow[FL_MODEL_MAX_IO];        /* samples; floats per sample of each input */
    int64_t yrow, wrow;                      /* floats per sample of y and of the weights (0: none) */
    const float *hx[FL_MODEL_MAX_IO], *hy, *hw;
    float *dx[FL_MODEL_MAX_IO], *dy, *dw;    /* device copies (NULL: host memory, or not resident) */
    bool resident;
    /* a stream instead of hx/hy: batches come from the prefetcher in the order given to fl_batches_begin */
    fl_data_stream *stream;
    fl_prefetch *pf;
    fl_dtype xdt;            /* the stream's x: float32 or int32 */
    bool sparse, check_y;    /* y must hold class indices in [0, classes); y must be finite */
    const float *last_x;     /* the host rows of the last batch (for the NaN check on device backends) */
    double wait;             /* seconds fl_batches_load waited for batches */
} fl_batches;

fl_status fl_check_x(fl_model *m, const fl_tensor *x, const char *what);
fl_status fl_check_x_for(const fl_model *m, const fl_node *in, const fl_tensor *x, const char *what);
fl_status fl_check_xs(fl_model *m, const fl_tensor *const *xs, int nx, const char *what);
const float *fl_x_rows(const fl_model *m, const fl_node *in, const fl_tensor *x, const char *what, float **owned);
bool fl_inputs_rows(const fl_model *m, const fl_tensor *const *xs, int nx, const char *what, const float **rows,
                    float **xo);
void fl_free_rows(float **xo, int nx);
float *fl_prepare_y(const fl_model *m, const fl_tensor *x, const fl_tensor *y, int64_t *y_row, const char *what);
fl_status fl_check_stream(const fl_model *m, const fl_data_stream *s, const char *what, int64_t *y_row);
fl_status fl_prepare_weights(const fl_model *m, const fl_tensor *sw, const float *cw, int ncw, const float *yh,
                             int64_t yrow, int64_t n, const char *what, float **out);

fl_status fl_batches_open(fl_model *m, int nx, fl_node *const *ins, const float *const *hx, const float *hy,
                          int64_t yrow, const float *hw, int64_t wrow, int64_t n, fl_batches *d);
fl_status fl_batches_open_stream(fl_model *m, fl_node *in, fl_data_stream *s, int64_t yrow, int64_t bs,
                                 const fl_fit_args *a, bool check, fl_batches *d);
fl_status fl_batches_begin(fl_batches *d, int epoch, const int64_t *order, int64_t n);
fl_status fl_batches_load(fl_model *m, fl_batches *d, const int64_t *idx, int64_t b);
void fl_batches_end(fl_batches *d);
void fl_batches_close(fl_model *m, fl_batches *d);
fl_batches fl_batches_unweighted(const fl_batches *d);
/* Whether batches are gathered on the device (x then checked once, before training), and the host rows of
 * the last batch's input k (NULL where none are on the host) */
bool fl_batches_gathered_on_device(const fl_model *m);
const float *fl_batches_host_rows(const fl_model *m, const fl_batches *d, int k);

/* ------------------------------------------------------------ history.c */

#define FL_HIST_MAX_KEYS FL_LOGS_MAX_KEYS

struct fl_history {
    int nkeys, epochs, cap;
    char keys[FL_HIST_MAX_KEYS][48];
    float *vals[FL_HIST_MAX_KEYS];
    double seconds, train_seconds, data_seconds;
    int64_t train_samples, train_steps;
    int64_t graph_captures, graph_failures, graph_replays; /* device graphs (train_step) */
};

fl_status fl_history_push_logs(fl_history *h, const fl_logs *logs);

typedef struct fl_progbar {
    FILE *f;
    int mode;            /* FL_VERBOSE_BAR / FL_VERBOSE_EPOCH / SILENT */
    int64_t target;
    double start, last;
    int prev_len;
    const double *data_wait; /* a stream's running wait for batches: shown per step (NULL: not shown) */
} fl_progbar;

int fl_resolve_verbose(fl_verbose v, FILE *f);
bool fl_progbar_due(const fl_progbar *p, bool final);
void fl_progbar_update(fl_progbar *p, int64_t cur, int nkv, char keys[][48], const double *vals, bool final);
void fl_sort_kv(int n, char keys[][48], double *vals);
int fl_stat_kv(const fl_model *m, const double *v, const char *prefix, char keys[][48], double *vals);

/* ---------------------------------------------------------- nonfinite.c */

int64_t fl_first_nonfinite(const float *p, int64_t n);
const char *fl_nonfinite_name(float v);
const char *fl_index_str(int64_t i, int nd, const int64_t *dims, char *buf, size_t n);
fl_status fl_check_x_finite(const fl_model *m, const fl_batches *d, int k, const float *rows, const int64_t *idx,
                            int64_t b, int ep, int epochs, int64_t step, int64_t steps);
bool fl_weights_nonfinite(fl_model *m, float *host, char *why, size_t len);
float *fl_node_scratch(const fl_graph *g, bool *failed);
fl_status fl_nonfinite_loss(fl_model *m, double loss, int ep, int epochs, int64_t from, int64_t step, int64_t steps);

#endif
