/*
 * test_graph_replay.c — the training loop's device-graph protocol (train.c:
 * capture after two eager full steps, replay, eager partial batches in
 * between, fallback when capture fails), checked on the CPU with a fake
 * backend: the CPU backend's table plus graph entries that record the calls
 * made between graph_begin and graph_end and replay them on graph_launch.
 * A replay reads the optimizer step and the dropout step from the counters
 * the launch is given, as the CUDA backend's captured kernels read them from
 * the device. So a fit with graphs must equal a fit without them exactly
 * (the same CPU kernels in the same order), and every launch must carry the
 * counters of the step it replays, also after the eager partial batch that
 * ends each epoch (500 samples, batch 64: 7 full steps and one of 52); with
 * sample weights, the replayed steps weigh each batch as eager ones do.
 */
#include "check.h"

#include "core/error.h"
#include "nn/nn.h"
#include "ops/math.h"

#include <flynn/flynn.h>
#include <stdlib.h>
#include <string.h>

static const fl_backend *CPU;
static fl_backend fake;

/* ------------------------------------------------ recording and replay */

enum { C_COPY, C_ZERO, C_ACCUMULATE, C_DENSE_FWD, C_DENSE_BWD, C_ACT_FWD, C_ACT_BWD, C_DROPOUT_FWD, C_DROPOUT_BWD,
       C_LOSS, C_LOSS_WEIGHT, C_METRIC, C_SUM_INTO, C_OPTIMIZER };

/* One recorded call: its code and its arguments (descriptors by value). */
typedef struct call {
    int op;
    fl_dense_desc dd;
    fl_loss_desc ld;
    fl_opt_desc od;
    const fl_param_ref *params;
    const void *in[4];
    void *out[4];
    int64_t n, rows, off;
    int i0, i1;
    float f0, f1;
    double s;
    uint64_t seed, stream;
} call;

typedef struct fake_graph {
    call *calls;
    int n, cap;
    int64_t cap_gstep; /* the graph step the captured dropout streams were made for */
} fake_graph;

static fake_graph *g_rec;   /* the graph being recorded, NULL when running eagerly */
static int g_unknown_calls; /* calls while recording that the fake cannot record */
static int64_t g_applied;   /* optimizer steps that really ran (eagerly or replayed) */
/* what the test arranges */
static bool g_fail_begin, g_fail_end;
/* what the test observes */
#define MAX_LAUNCHES 64
static int g_nlaunch, g_nbegin, g_ngraphs_live, g_nrecorded;
static int64_t g_launch_opt[MAX_LAUNCHES], g_launch_gstep[MAX_LAUNCHES], g_launch_truth[MAX_LAUNCHES];

static call *rec(int op) {
    if (g_rec->n == g_rec->cap) {
        g_rec->cap = g_rec->cap ? 2 * g_rec->cap : 64;
        g_rec->calls = realloc(g_rec->calls, (size_t)g_rec->cap * sizeof(call));
    }
    call *c = &g_rec->calls[g_rec->n++];
    memset(c, 0, sizeof *c);
    c->op = op;
    g_nrecorded++;
    return c;
}

static void run_call(const call *c, int64_t opt_step, int64_t gstep, int64_t cap_gstep) {
    switch (c->op) {
    case C_COPY: CPU->copy(c->out[0], c->in[0], (size_t)c->n); break;
    case C_ZERO: CPU->zero(c->out[0], (size_t)c->n); break;
    case C_ACCUMULATE: CPU->accumulate(c->n, c->in[0], c->out[0], c->f0); break;
    case C_DENSE_FWD: CPU->dense_fwd(&c->dd, c->in[0], c->in[1], c->in[2], c->out[0]); break;
    case C_DENSE_BWD:
        CPU->dense_bwd(&c->dd, c->in[0], c->in[1], c->in[2], c->out[0], c->out[1], c->f0, c->out[2], c->out[3]);
        break;
    case C_ACT_FWD: CPU->act_fwd(c->i0, c->rows, c->i1, c->in[0], c->out[0]); break;
    case C_ACT_BWD: CPU->act_bwd(c->i0, c->rows, c->i1, c->in[0], c->in[1], c->in[2], c->out[0], c->f0); break;
    case C_DROPOUT_FWD: {
        /* as k_dropout_fwd under a graph: back to the layer's base stream, then the replayed step's */
        uint64_t stream = fl_dropout_stream(fl_dropout_stream(c->stream, cap_gstep), gstep);
        CPU->dropout_fwd(c->n, c->f0, c->seed, stream, c->off, c->in[0], c->out[0], c->out[1]);
        break;
    }
    case C_DROPOUT_BWD: CPU->dropout_bwd(c->n, c->f0, c->in[0], c->in[1], c->out[0], c->f1); break;
    case C_LOSS: CPU->loss(&c->ld, c->in[0], c->in[1], c->out[0], c->out[1]); break;
    case C_LOSS_WEIGHT: CPU->loss_weight(c->rows, c->i0, c->in[0], c->out[0], c->out[1]); break;
    case C_METRIC: CPU->metric(c->i0, c->rows, c->i1, c->in[0], c->in[1], c->out[0]); break;
    case C_SUM_INTO: CPU->sum_into(c->n, c->in[0], c->s, c->out[0]); break;
    case C_OPTIMIZER: {
        /* as k_optimizer under a graph: the step is the count done before it, plus one */
        fl_opt_desc d = c->od;
        d.step = opt_step + 1;
        CPU->optimizer_step(&d, c->params, c->i0);
        g_applied++;
        break;
    }
    }
}

/* The table's entries: recorded while a graph is being captured, else run. */
static void f_copy(void *dst, const void *src, size_t bytes) {
    if (!g_rec) { CPU->copy(dst, src, bytes); return; }
    call *c = rec(C_COPY);
    c->out[0] = dst; c->in[0] = src; c->n = (int64_t)bytes;
}
static void f_zero(void *dst, size_t bytes) {
    if (!g_rec) { CPU->zero(dst, bytes); return; }
    call *c = rec(C_ZERO);
    c->out[0] = dst; c->n = (int64_t)bytes;
}
static void f_accumulate(int64_t n, const float *src, float *dst, float beta) {
    if (!g_rec) { CPU->accumulate(n, src, dst, beta); return; }
    call *c = rec(C_ACCUMULATE);
    c->n = n; c->in[0] = src; c->out[0] = dst; c->f0 = beta;
}
static void f_dense_fwd(const fl_dense_desc *d, const float *x, const float *w, const float *b, float *y) {
    if (!g_rec) { CPU->dense_fwd(d, x, w, b, y); return; }
    call *c = rec(C_DENSE_FWD);
    c->dd = *d; c->in[0] = x; c->in[1] = w; c->in[2] = b; c->out[0] = y;
}
static void f_dense_bwd(const fl_dense_desc *d, const float *x, const float *w, const float *y, float *dy, float *dx,
                        float dx_beta, float *dw, float *db) {
    if (!g_rec) { CPU->dense_bwd(d, x, w, y, dy, dx, dx_beta, dw, db); return; }
    call *c = rec(C_DENSE_BWD);
    c->dd = *d; c->in[0] = x; c->in[1] = w; c->in[2] = y;
    c->out[0] = dy; c->out[1] = dx; c->out[2] = dw; c->out[3] = db; c->f0 = dx_beta;
}
static void f_act_fwd(int act, int64_t rows, int cols, const float *x, float *y) {
    if (!g_rec) { CPU->act_fwd(act, rows, cols, x, y); return; }
    call *c = rec(C_ACT_FWD);
    c->i0 = act; c->rows = rows; c->i1 = cols; c->in[0] = x; c->out[0] = y;
}
static void f_act_bwd(int act, int64_t rows, int cols, const float *x, const float *y, const float *dy, float *dx,
                      float beta) {
    if (!g_rec) { CPU->act_bwd(act, rows, cols, x, y, dy, dx, beta); return; }
    call *c = rec(C_ACT_BWD);
    c->i0 = act; c->rows = rows; c->i1 = cols; c->in[0] = x; c->in[1] = y; c->in[2] = dy; c->out[0] = dx; c->f0 = beta;
}
static void f_dropout_fwd(int64_t n, float rate, uint64_t seed, uint64_t stream, int64_t offset, const float *x,
                          float *y, uint8_t *mask) {
    if (!g_rec) { CPU->dropout_fwd(n, rate, seed, stream, offset, x, y, mask); return; }
    call *c = rec(C_DROPOUT_FWD);
    c->n = n; c->f0 = rate; c->seed = seed; c->stream = stream; c->off = offset; c->in[0] = x; c->out[0] = y;
    c->out[1] = mask;
}
static void f_dropout_bwd(int64_t n, float rate, const uint8_t *mask, const float *dy, float *dx, float beta) {
    if (!g_rec) { CPU->dropout_bwd(n, rate, mask, dy, dx, beta); return; }
    call *c = rec(C_DROPOUT_BWD);
    c->n = n; c->f0 = rate; c->in[0] = mask; c->in[1] = dy; c->out[0] = dx; c->f1 = beta;
}
static void f_loss(const fl_loss_desc *d, const float *pred, const float *target, float *row_loss, float *grad) {
    if (!g_rec) { CPU->loss(d, pred, target, row_loss, grad); return; }
    call *c = rec(C_LOSS);
    c->ld = *d; c->in[0] = pred; c->in[1] = target; c->out[0] = row_loss; c->out[1] = grad;
}
static void f_loss_weight(int64_t rows, int cols, const float *w, float *row_loss, float *grad) {
    if (!g_rec) { CPU->loss_weight(rows, cols, w, row_loss, grad); return; }
    call *c = rec(C_LOSS_WEIGHT);
    c->rows = rows; c->i0 = cols; c->in[0] = w; c->out[0] = row_loss; c->out[1] = grad;
}
static void f_metric(int code, int64_t rows, int cols, const float *pred, const float *target, float *score) {
    if (!g_rec) { CPU->metric(code, rows, cols, pred, target, score); return; }
    call *c = rec(C_METRIC);
    c->i0 = code; c->rows = rows; c->i1 = cols; c->in[0] = pred; c->in[1] = target; c->out[0] = score;
}
static void f_sum_into(int64_t n, const float *x, double scale, double *acc) {
    if (!g_rec) { CPU->sum_into(n, x, scale, acc); return; }
    call *c = rec(C_SUM_INTO);
    c->n = n; c->in[0] = x; c->s = scale; c->out[0] = acc;
}
static void f_optimizer_step(const fl_opt_desc *d, const fl_param_ref *params, int np) {
    if (!g_rec) { CPU->optimizer_step(d, params, np); g_applied++; return; }
    call *c = rec(C_OPTIMIZER);
    c->od = *d; c->params = params; c->i0 = np; /* the optimizer's table: it lives as long as the binding */
}
/* a kernel the fake does not record: it would run at capture instead of replay */
static void f_gather_rows(const float *src, const int64_t *idx, int64_t n, int64_t row, float *dst) {
    if (g_rec) g_unknown_calls++;
    CPU->gather_rows(src, idx, n, row, dst);
}
static void f_upload(void *dst, const void *src, size_t bytes) {
    if (g_rec) g_unknown_calls++;
    CPU->upload(dst, src, bytes);
}

static int f_graph_begin(int64_t opt_step, int64_t graph_step) {
    g_nbegin++;
    CHECK(!g_rec);
    if (g_fail_begin) {
        fl_error(FL_ERR_DEVICE, "fake: capture cannot start");
        return 1;
    }
    g_rec = calloc(1, sizeof *g_rec);
    g_rec->cap_gstep = graph_step;
    return 0;
}
static void *f_graph_end(void) {
    fake_graph *g = g_rec;
    g_rec = NULL;
    if (g_fail_end) { /* as a capture that failed while recording, leaving a message behind */
        fl_error(FL_ERR_DEVICE, "fake: a call failed during capture");
        free(g->calls);
        free(g);
        return NULL;
    }
    g_ngraphs_live++;
    return g;
}
static int f_graph_launch(void *graph, int64_t opt_step, int64_t graph_step) {
    fake_graph *g = graph;
    if (g_nlaunch < MAX_LAUNCHES) {
        g_launch_opt[g_nlaunch] = opt_step;
        g_launch_gstep[g_nlaunch] = graph_step;
        g_launch_truth[g_nlaunch] = g_applied;
    }
    g_nlaunch++;
    for (int i = 0; i < g->n; i++) run_call(&g->calls[i], opt_step, graph_step, g->cap_gstep);
    return 0;
}
static void f_graph_free(void *graph) {
    fake_graph *g = graph;
    g_ngraphs_live--;
    free(g->calls);
    free(g);
}

static void fake_init(void) {
    CPU = fl_backend_cpu();
    fake = *CPU;
    fake.name = "cpu (fake graphs)";
    fake.copy = f_copy;
    fake.zero = f_zero;
    fake.accumulate = f_accumulate;
    fake.dense_fwd = f_dense_fwd;
    fake.dense_bwd = f_dense_bwd;
    fake.act_fwd = f_act_fwd;
    fake.act_bwd = f_act_bwd;
    fake.dropout_fwd = f_dropout_fwd;
    fake.dropout_bwd = f_dropout_bwd;
    fake.loss = f_loss;
    fake.loss_weight = f_loss_weight;
    fake.metric = f_metric;
    fake.sum_into = f_sum_into;
    fake.optimizer_step = f_optimizer_step;
    fake.gather_rows = f_gather_rows;
    fake.upload = f_upload;
    fake.graph_begin = f_graph_begin;
    fake.graph_end = f_graph_end;
    fake.graph_launch = f_graph_launch;
    fake.graph_free = f_graph_free;
}

/* -------------------------------------------------------------- the fits */

enum { N = 500, BATCH = 64, EPOCHS = 2, FEATURES = 20, CLASSES = 5 };

typedef struct result {
    float loss[EPOCHS], acc[EPOCHS];
    float *kernel; /* the first Dense kernel after training */
    int64_t nkernel;
    int64_t iterations;
    int64_t captures, failures, replays; /* the History's (fl_history_graph_*) */
} result;

/* Dense, Dropout (the graph step matters), Dense softmax, Adam (the
 * optimizer step matters), on data from a fixed seed; be: NULL = the CPU. */
static bool train(const fl_backend *be, const fl_tensor *x, const fl_tensor *y, const fl_tensor *sw, result *r) {
    fl_model *m = fl_sequential(fl_input(FEATURES), fl_dense(32, .activation = FL_RELU, .name = "hidden"),
                                fl_dropout(0.3f), fl_dense(CLASSES, .activation = FL_SOFTMAX));
    CHECK(m != NULL);
    if (!m) return false;
    fl_model_set_seed(m, 7);
    if (be) m->g.be = be; /* the fake shares the CPU's memory: the weights stay where they are */
    CHECK(fl_compile(m, fl_adam(.learning_rate = 0.01f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY) == FL_OK);
    fl_clear_error();
    fl_history *h = fl_fit(m, x, y, .batch_size = BATCH, .epochs = EPOCHS, .verbose = FL_VERBOSE_SILENT,
                           .sample_weight = sw);
    CHECK_MSG(h != NULL, "fit: %s", fl_last_error());
    CHECK_MSG(fl_last_status() == FL_OK, "fit succeeded but left an error set: %s", fl_last_error());
    bool ok = h != NULL;
    if (ok) {
        memcpy(r->loss, fl_history_get(h, "loss"), sizeof r->loss);
        memcpy(r->acc, fl_history_get(h, "accuracy"), sizeof r->acc);
        fl_tensor *k = fl_layer_weight(fl_model_get_layer(m, "hidden"), 0);
        r->nkernel = fl_tensor_size(k);
        r->kernel = malloc((size_t)r->nkernel * sizeof(float));
        memcpy(r->kernel, fl_tensor_data(k), (size_t)r->nkernel * sizeof(float));
        r->iterations = fl_optimizer_iterations(m->opt);
        r->captures = fl_history_graph_captures(h);
        r->failures = fl_history_graph_capture_failures(h);
        r->replays = fl_history_graph_replays(h);
    }
    fl_history_free(h);
    m->g.be = CPU;
    fl_model_free(m);
    return ok;
}

static void same_training(const char *what, const result *a, const result *b) {
    for (int e = 0; e < EPOCHS; e++) {
        CHECK_MSG(a->loss[e] == b->loss[e], "%s: epoch %d loss %.9g, without graphs %.9g", what, e + 1, a->loss[e],
                  b->loss[e]);
        CHECK_MSG(a->acc[e] == b->acc[e], "%s: epoch %d accuracy %.9g, without graphs %.9g", what, e + 1, a->acc[e],
                  b->acc[e]);
    }
    CHECK(a->nkernel == b->nkernel);
    int64_t diff = 0;
    for (int64_t i = 0; i < a->nkernel && i < b->nkernel; i++) diff += a->kernel[i] != b->kernel[i];
    CHECK_MSG(diff == 0, "%s: %lld of %lld kernel weights differ from training without graphs", what, (long long)diff,
              (long long)a->nkernel);
    CHECK_MSG(a->iterations == b->iterations, "%s: %lld optimizer iterations, without graphs %lld", what,
              (long long)a->iterations, (long long)b->iterations);
}

static void reset_observations(void) {
    g_nlaunch = g_nbegin = g_ngraphs_live = g_nrecorded = g_unknown_calls = 0;
    g_applied = 0;
}

int main(void) {
    fake_init();
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, N, FEATURES), *y = fl_tensor_zeros(FL_FLOAT32, N);
    float *xd = fl_tensor_data(x), *yd = fl_tensor_data(y);
    for (int i = 0; i < N; i++) {
        int cls = (int)(fl_philox_u32(11, 1, (uint64_t)i) % CLASSES);
        yd[i] = (float)cls;
        for (int j = 0; j < FEATURES; j++)
            xd[i * FEATURES + j] = (float)(fl_philox_u32(11, 2, (uint64_t)(i * FEATURES + j)) % 1000) / 1000.0f +
                                   (j % CLASSES == cls ? 0.5f : 0.0f);
    }

    result plain = {0}, graphs = {0}, failed_end = {0}, failed_begin = {0};
    bool ok = train(NULL, x, y, NULL, &plain);

    /* 1. captured and replayed: every launch carries the counters of its step */
    reset_observations();
    ok = train(&fake, x, y, NULL, &graphs) && ok;
    const int steps = (N + BATCH - 1) / BATCH, full = N / BATCH; /* 8 steps: 7 full, the last of 52 */
    /* epoch 1: steps 0, 1 eager, 2 captured (and launched), 3..6 replayed, 7 eager (partial);
     * epoch 2: 8..14 replayed, 15 eager (partial) */
    int64_t expect[MAX_LAUNCHES];
    int nexpect = 0;
    for (int e = 0; e < EPOCHS; e++)
        for (int s = e == 0 ? 2 : 0; s < full; s++) expect[nexpect++] = (int64_t)e * steps + s;
    CHECK_MSG(g_nbegin == 1, "%d captures, expected 1", g_nbegin);
    CHECK_MSG(g_nlaunch == nexpect, "%d launches, expected %d", g_nlaunch, nexpect);
    CHECK_MSG(g_unknown_calls == 0, "%d calls while capturing that the fake does not record", g_unknown_calls);
    CHECK(g_nrecorded > 0);
    CHECK_MSG(g_ngraphs_live == 0, "%d graphs not freed after fit", g_ngraphs_live);
    for (int i = 0; i < g_nlaunch && i < nexpect; i++) {
        CHECK_MSG(g_launch_opt[i] == expect[i] && g_launch_opt[i] == g_launch_truth[i],
                  "launch %d: optimizer step %lld, expected %lld (%lld steps applied before it)", i,
                  (long long)g_launch_opt[i], (long long)expect[i], (long long)g_launch_truth[i]);
        CHECK_MSG(g_launch_gstep[i] == expect[i], "launch %d: graph (dropout) step %lld, expected %lld", i,
                  (long long)g_launch_gstep[i], (long long)expect[i]);
    }
    CHECK_MSG(g_applied == (int64_t)EPOCHS * steps, "%lld optimizer steps ran, expected %d", (long long)g_applied,
              EPOCHS * steps);
    if (ok) same_training("replayed", &graphs, &plain);
    CHECK_MSG(graphs.captures == 1 && graphs.failures == 0 && graphs.replays == nexpect && plain.replays == 0 &&
                  plain.captures == 0,
              "the History counts %lld captures, %lld failed, %lld replays (expected 1, 0, %d; the CPU %lld, %lld)",
              (long long)graphs.captures, (long long)graphs.failures, (long long)graphs.replays, nexpect,
              (long long)plain.captures, (long long)plain.replays);

    /* 2. capture fails after recording: the step runs eagerly, the error is cleared, no capture again */
    reset_observations();
    g_fail_end = true;
    ok = train(&fake, x, y, NULL, &failed_end) && ok;
    g_fail_end = false;
    CHECK(g_nbegin == 1 && g_nlaunch == 0 && g_ngraphs_live == 0);
    if (ok) same_training("capture failed", &failed_end, &plain);
    CHECK_MSG(failed_end.captures == 0 && failed_end.failures == 1 && failed_end.replays == 0,
              "a failed capture: the History counts %lld captures, %lld failed, %lld replays", (long long)failed_end.captures,
              (long long)failed_end.failures, (long long)failed_end.replays);

    /* 3. capture cannot start */
    reset_observations();
    g_fail_begin = true;
    ok = train(&fake, x, y, NULL, &failed_begin) && ok;
    g_fail_begin = false;
    CHECK(g_nbegin == 1 && g_nlaunch == 0 && g_nrecorded == 0);
    if (ok) same_training("capture not started", &failed_begin, &plain);
    CHECK(failed_begin.failures == 1 && failed_begin.replays == 0);

    /* 4. FLYNN_CUDA_GRAPHS=require: a failed capture stops fit with the reason (issue 44: "graphs = no graphs"
     * could pass with graphs never running); a capture that works trains as before */
    setenv("FLYNN_CUDA_GRAPHS", "require", 1);
    for (int k = 0; k < 3; k++) {
        reset_observations();
        g_fail_end = k == 1;
        g_fail_begin = k == 2;
        fl_model *m = fl_sequential(fl_input(FEATURES), fl_dense(8, .activation = FL_RELU),
                                    fl_dense(CLASSES, .activation = FL_SOFTMAX));
        CHECK(m && fl_compile(m, fl_adam(), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY) == FL_OK);
        m->g.be = &fake;
        fl_history *h = fl_fit(m, x, y, .batch_size = BATCH, .epochs = 1, .verbose = FL_VERBOSE_SILENT);
        if (k == 0) CHECK_MSG(h && fl_history_graph_replays(h) > 0, "require, capture works: %s", fl_last_error());
        else {
            CHECK_MSG(!h && fl_last_status() == FL_ERR_DEVICE, "require, capture fails at its %s: fit returned %p",
                      k == 1 ? "end" : "start", (void *)h);
            CHECK_STR_CONTAINS(fl_last_error(), "FLYNN_CUDA_GRAPHS=require, but");
            CHECK_STR_CONTAINS(fl_last_error(), k == 1 ? "fake: a call failed during capture" : "fake: capture cannot start");
        }
        fl_history_free(h);
        m->g.be = CPU;
        fl_model_free(m);
    }
    g_fail_end = g_fail_begin = false;
    unsetenv("FLYNN_CUDA_GRAPHS");

    /* sample weights: the replayed steps weigh the loss rows of the batch gathered for them */
    {
        fl_tensor *sw = fl_tensor_zeros(FL_FLOAT32, N);
        for (int i = 0; i < N; i++) ((float *)fl_tensor_data(sw))[i] = (float)(i % 5) * 0.5f;
        result wplain = {0}, wgraphs = {0};
        reset_observations();
        bool wok = train(NULL, x, y, sw, &wplain);
        reset_observations();
        wok = train(&fake, x, y, sw, &wgraphs) && wok;
        CHECK_MSG(g_nlaunch > 0 && g_unknown_calls == 0, "weighted: %d launches, %d calls not recorded", g_nlaunch,
                  g_unknown_calls);
        if (wok) {
            same_training("replayed with sample weights", &wgraphs, &wplain);
            CHECK_MSG(wplain.loss[0] != plain.loss[0], "the sample weights changed nothing: loss %.9g", wplain.loss[0]);
        }
        free(wplain.kernel); free(wgraphs.kernel);
        fl_tensor_free(sw);
    }

    /* 4. TerminateOnNaN with captured steps: the loss cannot be read after
     * each step, so the epoch's running loss is checked when it is read (at
     * the epoch's end here), and the diagnosis still names the layer */
    reset_observations();
    {
        fl_model *m = fl_sequential(fl_input(FEATURES), fl_dense(32, .activation = FL_RELU, .name = "hidden"),
                                    fl_dense(CLASSES, .activation = FL_SOFTMAX, .name = "out"));
        m->g.be = &fake;
        CHECK(fl_compile(m, fl_sgd(.learning_rate = 1e30f), FL_SPARSE_CATEGORICAL_CROSSENTROPY) == FL_OK);
        fl_clear_error();
        fl_history *h = fl_fit(m, x, y, .batch_size = BATCH, .epochs = EPOCHS, .verbose = FL_VERBOSE_SILENT);
        CHECK(h == NULL);
        CHECK(fl_last_status() == FL_ERR_NONFINITE);
        CHECK_STR_CONTAINS(fl_last_error(), "epoch 1/2, between steps 1 and 8/8: the sparse_categorical_crossentropy loss is");
        CHECK_STR_CONTAINS(fl_last_error(), "layer '");
        CHECK(g_nbegin == 1); /* the check did not stop capture */
        printf("(diagnosis with captured steps: %s)\n", fl_last_error());
        fl_history_free(h);
        m->g.be = CPU;
        fl_model_free(m);
    }

    /* 5. variable-length sequences (Input(shape=(None, 4))): training on
     * length 6 with validation data of length 3 plans the graph for each in
     * turn every epoch; a captured step belongs to one plan (the generation),
     * so each epoch captures anew after two eager steps instead of replaying
     * a step captured before the plan changed; the numbers are those of
     * training without graphs */
    {
        const int n = 128, bs = 32, nv = 16, epochs = 3;
        fl_tensor *sx = fl_tensor_zeros(FL_FLOAT32, n, 6, 4), *sy = fl_tensor_zeros(FL_FLOAT32, n, 6);
        fl_tensor *vx = fl_tensor_zeros(FL_FLOAT32, nv, 3, 4), *vy = fl_tensor_zeros(FL_FLOAT32, nv, 3);
        for (int64_t i = 0; i < fl_tensor_size(sx); i++) ((float *)fl_tensor_data(sx))[i] = fl_philox_uniform(3, 1, (uint64_t)i);
        for (int64_t i = 0; i < fl_tensor_size(sy); i++) ((float *)fl_tensor_data(sy))[i] = (float)(fl_philox_u32(3, 2, (uint64_t)i) % 3);
        for (int64_t i = 0; i < fl_tensor_size(vx); i++) ((float *)fl_tensor_data(vx))[i] = fl_philox_uniform(3, 3, (uint64_t)i);
        for (int64_t i = 0; i < fl_tensor_size(vy); i++) ((float *)fl_tensor_data(vy))[i] = (float)(fl_philox_u32(3, 4, (uint64_t)i) % 3);
        float loss[2][3] = {{0}}, vloss[2][3] = {{0}}, w[2][32];
        for (int k = 0; k < 2; k++) {
            reset_observations();
            fl_model *m = fl_sequential(fl_input(FL_DYNAMIC, 4), fl_dense(8, .activation = FL_RELU, .name = "hidden"),
                                        fl_dense(3, .activation = FL_SOFTMAX));
            CHECK_MSG(m != NULL, "%s", fl_last_error());
            if (!m) break;
            fl_model_set_seed(m, 3);
            if (k) m->g.be = &fake;
            CHECK(fl_compile(m, fl_adam(.learning_rate = 0.01f), FL_SPARSE_CATEGORICAL_CROSSENTROPY) == FL_OK);
            fl_history *h = fl_fit(m, sx, sy, .batch_size = bs, .epochs = epochs, .verbose = FL_VERBOSE_SILENT,
                                   .validation_x = vx, .validation_y = vy);
            CHECK_MSG(h != NULL, "variable-length fit: %s", fl_last_error());
            if (h) {
                memcpy(loss[k], fl_history_get(h, "loss"), sizeof loss[k]);
                memcpy(vloss[k], fl_history_get(h, "val_loss"), sizeof vloss[k]);
            }
            memcpy(w[k], fl_tensor_data(fl_layer_weight(fl_model_get_layer(m, "hidden"), 0)), sizeof w[k]);
            if (k) {
                CHECK_MSG(g_nbegin == epochs, "variable length: %d captures, expected one an epoch (%d)", g_nbegin, epochs);
                CHECK_MSG(g_nlaunch == 2 * epochs, "variable length: %d launches, expected %d", g_nlaunch, 2 * epochs);
                CHECK(g_unknown_calls == 0 && g_ngraphs_live == 0);
            }
            fl_history_free(h);
            m->g.be = CPU;
            fl_model_free(m);
        }
        CHECK_MSG(memcmp(loss[0], loss[1], sizeof loss[0]) == 0 && memcmp(vloss[0], vloss[1], sizeof vloss[0]) == 0 &&
                  memcmp(w[0], w[1], sizeof w[0]) == 0,
                  "variable length: replayed training differs (loss %.9g vs %.9g, val_loss %.9g vs %.9g)", loss[1][2],
                  loss[0][2], vloss[1][2], vloss[0][2]);
        fl_tensor_free(sx); fl_tensor_free(sy); fl_tensor_free(vx); fl_tensor_free(vy);
    }

    printf("epoch losses without graphs %.6f %.6f, replayed %.6f %.6f; %d launches\n", plain.loss[0], plain.loss[1],
           graphs.loss[0], graphs.loss[1], nexpect);
    free(plain.kernel); free(graphs.kernel); free(failed_end.kernel); free(failed_begin.kernel);
    fl_tensor_free(x);
    fl_tensor_free(y);
    return check_report("test_graph_replay");
}
