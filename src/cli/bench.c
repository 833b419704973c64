/*
 * bench.c — `flynn bench`: the seed's CPU-versus-GPU experiment in one
 * command. For every device and batch size it builds a fresh built-in model,
 * trains a few warm-up steps, then times one epoch of training (and/or one
 * pass of predict) over the same samples, and reports samples/s, GFLOP/s and
 * the GPU/CPU speedup per batch size as a table, as JSON (for scripts such as
 * bench/compare_cpu.sh; fields in docs/performance.md) and as an SVG chart.
 * Only the public API (flynn/flynn.h) is used; which BLAS the process loaded
 * is read from the dynamic loader, not from flynn.
 *
 * The text models (lstm_text, transformer_text) run on token sequences of
 * the shape `flynn train --data fortunes-lang` gives them (128 steps, a
 * vocabulary of 512, 5 classes): the fortunes data itself, or a synthetic
 * set of the same shape that bench/text_compare.py rebuilds bit for bit for
 * PyTorch and Keras (synth_text below).
 *
 * A model file (--model FILE.keras|.h5|.json: a user's model, or the suite
 * of bench/suite.py) is loaded afresh for every point, compiled as the file
 * says (or Adam and sparse categorical crossentropy when it holds no compile
 * config), and runs on the user's arrays (--data X.npy,Y.npy or FILE.npz) or
 * on synthetic float inputs of its input shape. FLOPs per sample are counted
 * from the graph (fl_model_flops) for every model.
 */
#include <flynn/flynn.h>
#include "core/clock.h"
#include "svg.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BENCH_DEFAULT_DATA "/usr/share/datasets/fashion-mnist"
#define BENCH_MAX_POINTS 32
#define BENCH_TEXT_STEPS 128 /* as flynn train --data fortunes-lang */

enum { DEV_CPU, DEV_GPU, NDEV };
enum { MODE_TRAIN, MODE_PREDICT, NMODE };
static const char *const dev_name[NDEV] = {"cpu", "gpu"};
static const char *const mode_name[NMODE] = {"train", "predict"};

typedef struct bench_opts {
    const char *model, *data, *json, *svg, *precision;
    long samples;
    bool samples_set;
    int batch[BENCH_MAX_POINTS], nbatch;
    bool dev_on[NDEV];
    bool mode_on[NMODE];
    int threads, warmup, repeat;
    unsigned long long seed;
} bench_opts;

/* One measured point; samples_per_s < 0: not measured. */
typedef struct point {
    double seconds, samples_per_s;
    double cores; /* the process's CPU seconds over the wall seconds of the timed call */
    int threads;  /* the threads in use when it ended (fl_num_threads_in_use: fewer where others kept CPUs busy) */
    /* training on a device with graphs: steps captured, captures that failed, steps replayed (the timed epoch) */
    int64_t graph_captures, graph_failures, graph_replays;
} point;

typedef struct device_state {
    bool requested, usable;
    char detail[1024]; /* the device line, or why it cannot be used */
} device_state;

typedef struct bench_run {
    bench_opts o;
    bool file;                      /* --model is a model file */
    char x_path[1024], y_path[1024]; /* file models: --data X.npy,Y.npy (y_path empty: x_path is an .npz) */
    char data_kind[16], data_dir[1024];
    int64_t h, w, c;                /* text: h timesteps, w = c = 0 */
    int64_t vocab;                  /* text: tokens in [0, vocab); 0 for images */
    int classes;
    int64_t n;                      /* training samples used */
    double flops[NMODE];            /* per sample */
    fl_memory_info mem;             /* weights, and the buffers per sample of the batch */
    device_state dev[NDEV];
    point res[NDEV][NMODE][BENCH_MAX_POINTS];
    char cpu_model[256];
    char blas_path[1024];
    fl_blas_info blas;              /* whether the kernels fit the CPU */
} bench_run;

static void usage_bench(FILE *f) {
    fprintf(f,
            "usage: flynn bench [options]\n\n"
            "Times one epoch of training (after a few warm-up steps) of a built-in model for\n"
            "each device and batch size, and prints samples/s, GFLOP/s and the GPU/CPU\n"
            "speedup per batch size. Where the GPU cannot be used it says why and reports\n"
            "the CPU side.\n\n"
            "  --model NAME|FILE      mnist_cnn (default), mlp, lstm_text or transformer_text,\n"
            "                         or a model file (.keras, .h5, .json), compiled as it says\n"
            "                         (else Adam and sparse categorical crossentropy)\n"
            "  --data SPEC            images: fashion-mnist[:DIR] (default, DIR defaults to\n"
            "                         %s), mnist:DIR or cifar10:DIR;\n"
            "                         text models: synthetic (default: 128 tokens of 512, 5\n"
            "                         classes, pre-padded; bench/text_compare.py makes the same)\n"
            "                         or fortunes-lang[:DIR]; model files: X.npy,Y.npy, FILE.npz\n"
            "                         or synthetic (default: uniform [0, 1) floats of the input\n"
            "                         shape, targets to fit the loss; float inputs only)\n"
            "  --samples N            samples per epoch: the first N training samples (default\n"
            "                         20000 images, 4096 sequences, 2048 synthetic samples)\n"
            "  --batch-sizes LIST     comma-separated batch sizes (default 32,64,128,256,512,1024)\n"
            "  --devices LIST         cpu, gpu or cpu,gpu (default cpu,gpu)\n"
            "  --mode M               train (default), predict (inference over the same\n"
            "                         samples) or both\n"
            "  --threads T            CPU threads (default: all cores)\n"
            "  --warmup-steps S       training steps before each timed epoch (default 5)\n"
            "  --repeat R             time each point R times and keep the fastest (default 1)\n"
            "  --precision P          GPU float32 precision: high (TF32) or highest\n"
            "  --seed S               seed for weights, dropout and shuffling (default 0)\n"
            "  --json FILE            also write the results as JSON (`-`: to stdout, and the\n"
            "                         table to stderr)\n"
            "  --svg FILE             also draw the results as an SVG bar chart\n",
            BENCH_DEFAULT_DATA);
}

static int bench_usage_error(const char *msg, const char *arg) {
    fprintf(stderr, "flynn bench: %s%s%s\n(see `flynn bench --help`)\n", msg, arg ? " " : "", arg ? arg : "");
    return 2;
}

static bool parse_int(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static int parse_batches(const char *s, bench_opts *o) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    o->nbatch = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        long v;
        if (!parse_int(t, 1, 1 << 20, &v)) return bench_usage_error("--batch-sizes wants positive integers, got", t);
        if (o->nbatch == BENCH_MAX_POINTS) return bench_usage_error("--batch-sizes: at most 32 sizes, got", s);
        o->batch[o->nbatch++] = (int)v;
    }
    if (o->nbatch == 0) return bench_usage_error("--batch-sizes wants a list such as 32,64,128, got", s);
    return 0;
}

static int parse_devices(const char *s, bench_opts *o) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s", s);
    o->dev_on[DEV_CPU] = o->dev_on[DEV_GPU] = false;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (strcmp(t, "cpu") == 0) o->dev_on[DEV_CPU] = true;
        else if (strcmp(t, "gpu") == 0) o->dev_on[DEV_GPU] = true;
        else return bench_usage_error("--devices wants cpu, gpu or cpu,gpu, got", s);
    }
    if (!o->dev_on[DEV_CPU] && !o->dev_on[DEV_GPU]) return bench_usage_error("--devices wants cpu, gpu or cpu,gpu, got", s);
    return 0;
}

/* Returns 0, 2 on a usage error, -1 for --help. */
static int parse_bench(int argc, char **argv, bench_opts *o) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return -1;
        if (strncmp(a, "--", 2) != 0) return bench_usage_error("unexpected argument", a);
        char key[64];
        const char *eq = strchr(a, '='), *val;
        size_t kl = eq ? (size_t)(eq - a) : strlen(a);
        if (kl >= sizeof key) return bench_usage_error("unknown option", a);
        memcpy(key, a, kl);
        key[kl] = 0;
        if (eq) val = eq + 1;
        else if (i + 1 < argc) val = argv[++i];
        else return bench_usage_error("missing value for", key);
        long v;
        int r = 0;
        if (strcmp(key, "--model") == 0) o->model = val;
        else if (strcmp(key, "--data") == 0) o->data = val;
        else if (strcmp(key, "--json") == 0) o->json = val;
        else if (strcmp(key, "--svg") == 0) o->svg = val;
        else if (strcmp(key, "--precision") == 0) o->precision = val;
        else if (strcmp(key, "--batch-sizes") == 0) r = parse_batches(val, o);
        else if (strcmp(key, "--devices") == 0) r = parse_devices(val, o);
        else if (strcmp(key, "--mode") == 0) {
            o->mode_on[MODE_TRAIN] = strcmp(val, "train") == 0 || strcmp(val, "both") == 0;
            o->mode_on[MODE_PREDICT] = strcmp(val, "predict") == 0 || strcmp(val, "both") == 0;
            if (!o->mode_on[MODE_TRAIN] && !o->mode_on[MODE_PREDICT])
                return bench_usage_error("--mode wants train, predict or both, got", val);
        } else if (strcmp(key, "--samples") == 0) {
            if (!parse_int(val, 1, 1L << 40, &v)) return bench_usage_error("--samples wants a positive integer, got", val);
            o->samples = v;
            o->samples_set = true;
        } else if (strcmp(key, "--threads") == 0) {
            if (!parse_int(val, 0, 4096, &v)) return bench_usage_error("--threads wants an integer in [0, 4096], got", val);
            o->threads = (int)v;
        } else if (strcmp(key, "--warmup-steps") == 0) {
            if (!parse_int(val, 0, 1000000, &v)) return bench_usage_error("--warmup-steps wants an integer >= 0, got", val);
            o->warmup = (int)v;
        } else if (strcmp(key, "--repeat") == 0) {
            if (!parse_int(val, 1, 1000, &v)) return bench_usage_error("--repeat wants an integer in [1, 1000], got", val);
            o->repeat = (int)v;
        } else if (strcmp(key, "--seed") == 0) {
            if (!parse_int(val, 0, __LONG_MAX__, &v)) return bench_usage_error("--seed wants an integer >= 0, got", val);
            o->seed = (unsigned long long)v;
        } else return bench_usage_error("unknown option", key);
        if (r) return r;
    }
    return 0;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static bool is_model_file(const char *s) {
    return ends_with(s, ".keras") || ends_with(s, ".h5") || ends_with(s, ".hdf5") || ends_with(s, ".json");
}

static int parse_bench_data(bench_run *b) {
    const char *spec = b->o.data, *colon = strchr(spec, ':');
    size_t kl = colon ? (size_t)(colon - spec) : strlen(spec);
    b->classes = 10;
    if (b->file) {
        const char *comma = strchr(spec, ',');
        if (strcmp(spec, "synthetic") == 0) {
            snprintf(b->data_kind, sizeof b->data_kind, "synthetic");
        } else if (comma && comma > spec && comma[1]) {
            snprintf(b->data_kind, sizeof b->data_kind, "npy");
            snprintf(b->x_path, sizeof b->x_path, "%.*s", (int)(comma - spec), spec);
            snprintf(b->y_path, sizeof b->y_path, "%s", comma + 1);
        } else if (ends_with(spec, ".npz")) {
            snprintf(b->data_kind, sizeof b->data_kind, "npz");
            snprintf(b->x_path, sizeof b->x_path, "%s", spec);
        } else {
            return bench_usage_error("--data for a model file wants X.npy,Y.npy, FILE.npz or synthetic, got", spec);
        }
        return 0;
    }
    if (fl_builtin_model_is_text(b->o.model)) {
        b->h = BENCH_TEXT_STEPS; b->w = b->c = 0;
        b->vocab = FL_FORTUNES_VOCAB;
        b->classes = FL_FORTUNES_CLASSES;
        if (strcmp(spec, "synthetic") == 0) {
            snprintf(b->data_kind, sizeof b->data_kind, "synthetic");
        } else if (kl == 13 && strncmp(spec, "fortunes-lang", kl) == 0) {
            snprintf(b->data_kind, sizeof b->data_kind, "fortunes-lang");
            snprintf(b->data_dir, sizeof b->data_dir, "%s", colon ? colon + 1 : "/usr/share/games/fortunes");
        } else {
            return bench_usage_error("--data for a text model wants synthetic or fortunes-lang[:DIR], got", spec);
        }
        return 0;
    }
    if (kl == 9 && strncmp(spec, "synthetic", kl) == 0)
        return bench_usage_error("--data synthetic is for the text models (lstm_text, transformer_text); model",
                                 b->o.model);
    if (kl == 13 && strncmp(spec, "fashion-mnist", kl) == 0) {
        snprintf(b->data_kind, sizeof b->data_kind, "fashion-mnist");
        snprintf(b->data_dir, sizeof b->data_dir, "%s", colon ? colon + 1 : BENCH_DEFAULT_DATA);
        b->h = 28; b->w = 28; b->c = 1;
    } else if (kl == 5 && strncmp(spec, "mnist", kl) == 0 && colon) {
        snprintf(b->data_kind, sizeof b->data_kind, "mnist");
        snprintf(b->data_dir, sizeof b->data_dir, "%s", colon + 1);
        b->h = 28; b->w = 28; b->c = 1;
    } else if (kl == 7 && strncmp(spec, "cifar10", kl) == 0 && colon) {
        snprintf(b->data_kind, sizeof b->data_kind, "cifar10");
        snprintf(b->data_dir, sizeof b->data_dir, "%s", colon + 1);
        b->h = 32; b->w = 32; b->c = 3;
    } else {
        return bench_usage_error("--data wants fashion-mnist[:DIR], mnist:DIR or cifar10:DIR, got", spec);
    }
    return 0;
}

/* ------------------------------------------------------- machine facts */

static void read_cpu_model(char *out, size_t n) {
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (!v) break;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        snprintf(out, n, "%s", v);
        out[strcspn(out, "\n")] = 0;
        break;
    }
    fclose(f);
}

static int find_blas(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    bench_run *b = data;
    const char *p = info->dlpi_name, *base = p ? strrchr(p, '/') : NULL;
    base = base ? base + 1 : p;
    if (!base || b->blas_path[0]) return 0;
    if (strstr(base, "blas") || strstr(base, "mkl_rt") || strstr(base, "blis")) {
        char real[1024];
        snprintf(b->blas_path, sizeof b->blas_path, "%s", realpath(p, real) ? real : p);
    }
    return 0;
}

/* Which BLAS the process loaded, and OpenBLAS's own description of itself. */
static void read_blas(bench_run *b) {
    dl_iterate_phdr(find_blas, b);
    if (!b->blas_path[0]) snprintf(b->blas_path, sizeof b->blas_path, "unknown");
    fl_blas_info_get(&b->blas); /* after the first BLAS call, once OpenBLAS has chosen */
}

/* ", OPENBLAS_CORETYPE=X set by flynn: OpenBLAS alone chose Y" or the note on older kernels */
static void blas_remark(const bench_run *b, char *buf, size_t n) {
    const char *fb = getenv("FLYNN_BLAS_FALLBACK"), *ct = getenv("OPENBLAS_CORETYPE");
    if (fb && ct) snprintf(buf, n, "; OPENBLAS_CORETYPE=%s set by flynn (OpenBLAS alone chose %s, older than this CPU)",
                           ct, fb);
    else if (b->blas.weaker) snprintf(buf, n, "; %s", b->blas.note);
    else buf[0] = 0;
}

/* The OpenMP wait policy this process started with (src/cli/omp_setup.c
 * chooses one, and says why, unless the user set one). */
static const char *omp_wait_policy(void) {
    const char *c = getenv("FLYNN_OMP_CHOICE"), *p = getenv("OMP_WAIT_POLICY"), *s = getenv("GOMP_SPINCOUNT");
    if (c && getenv("FLYNN_OMP_SETUP")) return c;
    if (p) return p;
    return s ? "default, GOMP_SPINCOUNT set" : "default (spin, then sleep)";
}

/* ------------------------------------------------------------ measuring */

/* n synthetic sequences of b->h tokens: sample i has 16 + (37 i mod 113)
 * tokens (at most h), pre-padded with zeros as Keras's pad_sequences does,
 * token t of it (t counted from the first real one) is 1 + ((131 i + 17 t)
 * mod (vocab - 1)); its class is i mod classes. bench/text_compare.py makes
 * the same arrays. */
static fl_status synth_text(const bench_run *b, long n, fl_dataset *ds) {
    memset(ds, 0, sizeof *ds);
    const int64_t T = b->h;
    ds->x_train = fl_tensor_new(FL_INT32, 2, (int64_t[]){n, T});
    ds->y_train = fl_tensor_new(FL_FLOAT32, 1, (int64_t[]){n});
    if (!ds->x_train || !ds->y_train) { fl_dataset_free(ds); return FL_ERR_NOMEM; }
    int32_t *x = fl_tensor_data(ds->x_train);
    float *y = fl_tensor_data(ds->y_train);
    for (long i = 0; i < n; i++) {
        int64_t len = 16 + (37 * (int64_t)i) % 113;
        if (len > T) len = T;
        for (int64_t s = 0; s < T; s++) {
            int64_t t = s - (T - len);
            x[i * T + s] = t < 0 ? 0 : (int32_t)(1 + (131 * (int64_t)i + 17 * t) % (b->vocab - 1));
        }
        y[i] = (float)(i % b->classes);
    }
    return FL_OK;
}

/* Synthetic data for a model file: x uniform in [0, 1) of its input shape
 * (a fixed xorshift stream), targets that fit its loss: class indices for
 * sparse categorical crossentropy (per step for a sequence output), one-hot
 * rows for categorical, 0/1 for binary, uniform values otherwise. */
static fl_status synth_for_model(const fl_model *m, long n, fl_dataset *ds) {
    memset(ds, 0, sizeof *ds);
    int64_t xs[FL_MAX_DIMS + 1], ys[FL_MAX_DIMS + 1];
    if (fl_model_num_inputs(m) != 1 || fl_model_num_outputs(m) != 1) {
        fprintf(stderr, "flynn bench: synthetic data is for models with one input and one output; this one has %d "
                "and %d: give --data\n", fl_model_num_inputs(m), fl_model_num_outputs(m));
        return FL_ERR_UNSUPPORTED;
    }
    if (fl_model_input_dtype(m, 0) != FL_FLOAT32) {
        fprintf(stderr, "flynn bench: the model's input is int32 (token indices), whose range synthetic data cannot "
                "guess: give --data X.npy,Y.npy\n");
        return FL_ERR_UNSUPPORTED;
    }
    int xn = fl_model_input_shape(m, 0, xs + 1), yn = fl_model_output_shape(m, 0, ys + 1);
    xs[0] = ys[0] = n;
    fl_loss_kind loss = fl_model_optimizer(m) ? fl_model_loss(m).kind : FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    bool sparse = loss == FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    int64_t classes = ys[yn];
    ds->x_train = fl_tensor_new(FL_FLOAT32, xn + 1, xs);
    ds->y_train = fl_tensor_new(FL_FLOAT32, sparse ? yn : yn + 1, ys);
    if (!ds->x_train || !ds->y_train) { fl_dataset_free(ds); return fl_last_status(); }
    uint64_t r = 0x9E3779B97F4A7C15ull;
    float *x = fl_tensor_data(ds->x_train), *y = fl_tensor_data(ds->y_train);
    for (int64_t i = 0; i < fl_tensor_size(ds->x_train); i++) {
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        x[i] = (float)(r >> 40) / (float)(1 << 24);
    }
    int64_t rows = sparse ? fl_tensor_size(ds->y_train) : fl_tensor_size(ds->y_train) / classes;
    for (int64_t i = 0; i < rows; i++) {
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        int64_t c = (int64_t)((r >> 33) % (uint64_t)classes);
        if (sparse) { y[i] = (float)c; continue; }
        for (int64_t k = 0; k < classes; k++) {
            r ^= r << 13; r ^= r >> 7; r ^= r << 17;
            y[i * classes + k] = loss == FL_LOSS_CATEGORICAL_CROSSENTROPY ? (float)(k == c)
                               : loss == FL_LOSS_BINARY_CROSSENTROPY      ? (float)((r >> 63) & 1)
                                                                          : (float)(r >> 40) / (float)(1 << 24);
        }
    }
    return FL_OK;
}

/* A fresh compiled model on device d. NULL with d's reason set when the
 * device refuses; *fatal when something else failed. */
static fl_model *make_model(bench_run *b, int d, bool *fatal) {
    *fatal = false;
    fl_model *m = b->file ? fl_load_model(b->o.model)
                : b->vocab ? fl_builtin_text_model(b->o.model, b->h, b->vocab, b->classes)
                           : fl_builtin_model(b->o.model, b->h, b->w, b->c, b->classes);
    if (!m) { *fatal = true; return NULL; }
    fl_model_set_seed(m, b->o.seed);
    char why[1024] = "";
    if (fl_model_set_device(m, d == DEV_GPU ? FL_DEVICE_GPU : FL_DEVICE_CPU, why, sizeof why) != FL_OK) {
        snprintf(b->dev[d].detail, sizeof b->dev[d].detail, "%s", fl_last_error());
        b->dev[d].usable = false;
        fl_model_free(m);
        return NULL;
    }
    if (!b->dev[d].detail[0]) snprintf(b->dev[d].detail, sizeof b->dev[d].detail, "%s", why);
    if (b->file && fl_model_optimizer(m)) return m; /* compiled as the file says */
    if (fl_compile(m, fl_adam(.learning_rate = 1e-3f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY) != FL_OK) {
        fl_model_free(m);
        *fatal = true;
        return NULL;
    }
    return m;
}

/* Measures device d at batch size index bi. Returns 0, or 1 on an error. */
static int measure(bench_run *b, int d, int bi, const fl_dataset *ds, const fl_tensor *xw, const fl_tensor *yw) {
    int bs = b->o.batch[bi];
    bool fatal;
    fl_model *m = make_model(b, d, &fatal);
    if (!m) return fatal ? 1 : 0;
    int rc = 0;
    if (b->o.mode_on[MODE_TRAIN]) {
        if (xw) {
            fl_history *h = fl_fit(m, xw, yw, .batch_size = bs, .epochs = 1, .verbose = FL_VERBOSE_SILENT);
            if (!h) { rc = 1; goto done; }
            fl_history_free(h);
        }
        point best = {0, -1, 0, 0, 0, 0, 0};
        for (int r = 0; r < b->o.repeat; r++) {
            double t0 = fl_clock_seconds(), c0 = fl_clock_cpu_seconds();
            fl_history *h = fl_fit(m, ds->x_train, ds->y_train, .batch_size = bs, .epochs = 1,
                                   .verbose = FL_VERBOSE_SILENT);
            double dt = fl_clock_seconds() - t0, cores = dt > 0 ? (fl_clock_cpu_seconds() - c0) / dt : 0;
            if (!h) { rc = 1; goto done; }
            double sps = fl_history_samples_per_second(h);
            if (sps > best.samples_per_s)
                best = (point){(double)b->n / sps, sps, cores, fl_num_threads_in_use(), fl_history_graph_captures(h),
                               fl_history_graph_capture_failures(h), fl_history_graph_replays(h)};
            fl_history_free(h);
        }
        b->res[d][MODE_TRAIN][bi] = best;
    }
    if (b->o.mode_on[MODE_PREDICT]) {
        if (xw) {
            fl_tensor *p = fl_predict(m, xw, .batch_size = bs, .verbose = FL_VERBOSE_SILENT);
            if (!p) { rc = 1; goto done; }
            fl_tensor_free(p);
        }
        point best = {0, -1, 0, 0, 0, 0, 0};
        for (int r = 0; r < b->o.repeat; r++) {
            double t0 = fl_clock_seconds(), c0 = fl_clock_cpu_seconds();
            fl_tensor *p = fl_predict(m, ds->x_train, .batch_size = bs, .verbose = FL_VERBOSE_SILENT);
            double dt = fl_clock_seconds() - t0, cpu = fl_clock_cpu_seconds() - c0;
            if (!p) { rc = 1; goto done; }
            fl_tensor_free(p);
            if (dt > 0 && (double)b->n / dt > best.samples_per_s)
                best = (point){dt, (double)b->n / dt, cpu / dt, fl_num_threads_in_use(), 0, 0, 0};
        }
        b->res[d][MODE_PREDICT][bi] = best;
    }
done:
    fl_model_free(m);
    return rc;
}

/* ------------------------------------------------------------- output */

static const point *pt(const bench_run *b, int d, int mode, int bi) {
    const point *p = &b->res[d][mode][bi];
    return p->samples_per_s > 0 ? p : NULL;
}

/* A device's reason without the library's "the GPU cannot be used: " lead,
 * which "gpu: not usable:" already says. */
static const char *short_reason(const char *r) {
    static const char lead[] = "the GPU cannot be used: ";
    return strncmp(r, lead, sizeof lead - 1) == 0 ? r + sizeof lead - 1 : r;
}

static void print_header(const bench_run *b, FILE *f) {
    fprintf(f, "flynn bench: %s on %lld %s %s, one epoch per point after %d warm-up step%s%s\n", b->o.model,
            (long long)b->n, b->data_kind, b->file ? "samples" : b->vocab ? "sequences" : "images", b->o.warmup, b->o.warmup == 1 ? "" : "s",
            b->o.repeat > 1 ? " (fastest of repeats)" : "");
    fprintf(f, "FLOPs per sample: %.2f M training, %.2f M predict; weights %.2f MB, buffers per sample %.1f KB "
            "training, %.1f KB predict\n", b->flops[MODE_TRAIN] / 1e6, b->flops[MODE_PREDICT] / 1e6,
            (double)b->mem.weight_bytes / 1e6, (double)b->mem.bytes_per_sample / 1e3,
            (double)b->mem.inference_bytes_per_sample / 1e3);
    char remark[512], tw[128];
    blas_remark(b, remark, sizeof remark);
    fl_default_num_threads(tw, sizeof tw);
    fprintf(f, "cpu: %s, %d threads (default: %s); BLAS %s%s%s%s%s; OpenMP wait policy %s\n", b->cpu_model,
            fl_get_num_threads(), tw, b->blas_path, b->blas.core[0] ? " (core " : "", b->blas.core,
            b->blas.core[0] ? ")" : "", remark, omp_wait_policy());
    for (int d = 0; d < NDEV; d++) {
        if (!b->dev[d].requested || (d == DEV_CPU && b->dev[d].usable)) continue;
        if (b->dev[d].usable) fprintf(f, "%s: %s\n", dev_name[d], b->dev[d].detail);
        else fprintf(f, "%s: not usable: %s\n", dev_name[d], short_reason(b->dev[d].detail));
    }
    fprintf(f, "\n%7s  %-7s", "batch", "mode");
    for (int d = 0; d < NDEV; d++)
        if (b->dev[d].usable) fprintf(f, "  %s samples/s  %s GFLOP/s", dev_name[d], dev_name[d]);
    if (b->dev[DEV_CPU].usable && b->dev[DEV_GPU].usable) fprintf(f, "  gpu/cpu");
    fputc('\n', f);
    fflush(f);
}

/* The rows of batch size index bi, printed as soon as they are measured. */
static void print_rows(const bench_run *b, int bi, FILE *f) {
    bool both = b->dev[DEV_CPU].usable && b->dev[DEV_GPU].usable;
    for (int mode = 0; mode < NMODE; mode++) {
        if (!b->o.mode_on[mode]) continue;
        fprintf(f, "%7d  %-7s", b->o.batch[bi], mode_name[mode]);
        for (int d = 0; d < NDEV; d++) {
            if (!b->dev[d].usable) continue;
            const point *p = pt(b, d, mode, bi);
            if (p) fprintf(f, "  %13.0f  %11.1f", p->samples_per_s, p->samples_per_s * b->flops[mode] / 1e9);
            else fprintf(f, "  %13s  %11s", "-", "-");
        }
        if (both) {
            const point *c = pt(b, DEV_CPU, mode, bi), *g = pt(b, DEV_GPU, mode, bi);
            if (c && g) fprintf(f, "  %6.1fx", g->samples_per_s / c->samples_per_s);
            else fprintf(f, "  %7s", "-");
        }
        /* the GPU's training steps: how many ran as a replayed graph (a capture that failed is said) */
        const point *gp = b->dev[DEV_GPU].usable && mode == MODE_TRAIN ? pt(b, DEV_GPU, mode, bi) : NULL;
        if (gp)
            fprintf(f, "  (gpu: %lld of its steps replayed a CUDA graph%s)", (long long)gp->graph_replays,
                    gp->graph_failures ? "; a capture failed: the rest ran eagerly" : "");
        /* the CPU's threads followed the load (fl_num_threads_in_use): say so beside its figure */
        const point *c = b->dev[DEV_CPU].usable ? pt(b, DEV_CPU, mode, bi) : NULL;
        if (c && c->threads > 0 && c->threads < fl_get_num_threads())
            fprintf(f, "  (cpu: %d of %d threads at the end: other processes kept CPUs busy)", c->threads,
                    fl_get_num_threads());
        fputc('\n', f);
    }
    fflush(f);
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch == '\n') fputs("\\n", f);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

static void write_json(const bench_run *b, FILE *f) {
    fprintf(f, "{\n  \"flynn_version\": ");
    json_str(f, fl_version());
    fprintf(f, ",\n  \"model\": ");
    json_str(f, b->o.model);
    fprintf(f, ",\n  \"data\": ");
    json_str(f, b->data_kind);
    if (b->vocab)
        fprintf(f, ",\n  \"input_shape\": [%lld],\n  \"vocab\": %lld,\n  \"classes\": %d,\n", (long long)b->h,
                (long long)b->vocab, b->classes);
    else
        fprintf(f, ",\n  \"input_shape\": [%lld, %lld, %lld],\n  \"classes\": %d,\n", (long long)b->h,
                (long long)b->w, (long long)b->c, b->classes);
    fprintf(f, "  \"samples\": %lld,\n  \"warmup_steps\": %d,\n  \"repeat\": %d,\n  \"seed\": %llu,\n", (long long)b->n,
            b->o.warmup, b->o.repeat, b->o.seed);
    fprintf(f, "  \"threads\": %d,\n", fl_get_num_threads());
    fprintf(f, "  \"omp_wait_policy\": ");
    json_str(f, omp_wait_policy());
    fprintf(f, ",\n");
    fprintf(f, "  \"flops_per_sample\": {\"train\": %.0f, \"predict\": %.0f},\n", b->flops[MODE_TRAIN],
            b->flops[MODE_PREDICT]);
    fprintf(f, "  \"memory\": {\"weight_bytes\": %lld, \"buffer_bytes_per_sample\": %lld, "
            "\"predict_buffer_bytes_per_sample\": %lld},\n", (long long)b->mem.weight_bytes,
            (long long)b->mem.bytes_per_sample, (long long)b->mem.inference_bytes_per_sample);
    fprintf(f, "  \"cpu_model\": ");
    json_str(f, b->cpu_model);
    fprintf(f, ",\n  \"blas\": {\"library\": ");
    json_str(f, b->blas_path);
    fprintf(f, ", \"config\": ");
    json_str(f, b->blas.config);
    fprintf(f, ", \"core\": ");
    json_str(f, b->blas.core);
    fprintf(f, ", \"best_core\": ");
    json_str(f, b->blas.best_core);
    fprintf(f, ", \"older_than_cpu\": %s, \"fallback_chosen_by_openblas\": ", b->blas.weaker ? "true" : "false");
    const char *fb = getenv("FLYNN_BLAS_FALLBACK");
    if (fb) json_str(f, fb);
    else fprintf(f, "null");
    fprintf(f, "},\n  \"devices\": [");
    bool first = true;
    for (int d = 0; d < NDEV; d++) {
        if (!b->dev[d].requested) continue;
        fprintf(f, "%s\n    {\"device\": \"%s\", \"usable\": %s, \"%s\": ", first ? "" : ",", dev_name[d],
                b->dev[d].usable ? "true" : "false", b->dev[d].usable ? "detail" : "reason");
        json_str(f, b->dev[d].detail);
        fputc('}', f);
        first = false;
    }
    fprintf(f, "\n  ],\n  \"results\": [");
    first = true;
    for (int mode = 0; mode < NMODE; mode++)
        for (int bi = 0; bi < b->o.nbatch; bi++)
            for (int d = 0; d < NDEV; d++) {
                const point *p = pt(b, d, mode, bi);
                if (!p) continue;
                fprintf(f,
                        "%s\n    {\"device\": \"%s\", \"mode\": \"%s\", \"batch_size\": %d, \"samples\": %lld, "
                        "\"seconds\": %.6f, \"samples_per_s\": %.2f, \"gflops\": %.3f, \"cpu_cores\": %.3f, "
                        "\"threads_in_use\": %d, \"graph_captures\": %lld, \"graph_capture_failures\": %lld, "
                        "\"graph_replays\": %lld}",
                        first ? "" : ",", dev_name[d], mode_name[mode], b->o.batch[bi], (long long)b->n, p->seconds,
                        p->samples_per_s, p->samples_per_s * b->flops[mode] / 1e9, p->cores, p->threads,
                        (long long)p->graph_captures, (long long)p->graph_failures, (long long)p->graph_replays);
                first = false;
            }
    fprintf(f, "\n  ],\n  \"speedup\": [");
    first = true;
    for (int mode = 0; mode < NMODE; mode++)
        for (int bi = 0; bi < b->o.nbatch && b->o.mode_on[mode]; bi++) {
            const point *c = pt(b, DEV_CPU, mode, bi), *g = pt(b, DEV_GPU, mode, bi);
            fprintf(f, "%s\n    {\"mode\": \"%s\", \"batch_size\": %d, \"gpu_over_cpu\": ", first ? "" : ",",
                    mode_name[mode], b->o.batch[bi]);
            if (c && g) fprintf(f, "%.3f}", g->samples_per_s / c->samples_per_s);
            else fprintf(f, "null}");
            first = false;
        }
    fprintf(f, "\n  ]\n}\n");
}

static void fmt_count(char *buf, size_t n, double v) {
    if (v >= 1e6) snprintf(buf, n, "%.2fM", v / 1e6);
    else if (v >= 1e4) snprintf(buf, n, "%.0fk", v / 1e3);
    else if (v >= 1e3) snprintf(buf, n, "%.1fk", v / 1e3);
    else snprintf(buf, n, "%.0f", v);
}

/* One panel: grouped bars of samples/s per batch size, one bar per device. */
static void svg_panel(FILE *f, const bench_run *b, int mode, double y0) {
    static const char *const color[NDEV] = {"#4C72B0", "#DD8452"};
    const double X0 = 90, W = 640, H = 260, top = y0 + 80;
    char buf[512];
    snprintf(buf, sizeof buf, "flynn bench: %s throughput of %s", mode == MODE_TRAIN ? "training" : "predict",
             b->o.model);
    flynn_svg_text(f, X0 + W / 2, y0 + 24, "middle", 16, "bold", "#222", buf);
    snprintf(buf, sizeof buf, "%s, %lld samples, %.1f MFLOP per sample%s", b->data_kind, (long long)b->n,
             b->flops[mode] / 1e6, mode == MODE_TRAIN ? ", one epoch after warm-up" : "");
    flynn_svg_text(f, X0 + W / 2, y0 + 42, "middle", 12, "normal", "#555", buf);
    double max = 0;
    int ndev = 0;
    for (int d = 0; d < NDEV; d++) {
        if (!b->dev[d].usable) continue;
        ndev++;
        for (int bi = 0; bi < b->o.nbatch; bi++) {
            const point *p = pt(b, d, mode, bi);
            if (p && p->samples_per_s > max) max = p->samples_per_s;
        }
    }
    if (max <= 0) max = 1;
    double step = flynn_nice_step(max * 1.1), ymax = ceil(max * 1.12 / step) * step;
    /* axes and grid */
    for (double v = 0; v <= ymax + step / 2; v += step) {
        double y = top + H - H * v / ymax;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", X0, y, X0 + W, y);
        fmt_count(buf, sizeof buf, v);
        flynn_svg_text(f, X0 - 8, y + 4, "end", 12, "normal", "#444", buf);
    }
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n", X0, top + H, X0 + W, top + H);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n", X0, top, X0, top + H);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"13\" fill=\"#444\" "
               "transform=\"rotate(-90 %.1f %.1f)\">samples/s</text>\n",
            X0 - 62, top + H / 2, X0 - 62, top + H / 2);
    flynn_svg_text(f, X0 + W / 2, top + H + 42, "middle", 13, "normal", "#444", "batch size");
    /* bars */
    double gw = W / b->o.nbatch, bw = (gw * 0.7) / (ndev ? ndev : 1);
    for (int bi = 0; bi < b->o.nbatch; bi++) {
        double gx = X0 + gw * bi + gw * 0.15;
        snprintf(buf, sizeof buf, "%d", b->o.batch[bi]);
        flynn_svg_text(f, X0 + gw * bi + gw / 2, top + H + 18, "middle", 13, "normal", "#222", buf);
        int k = 0;
        for (int d = 0; d < NDEV; d++) {
            if (!b->dev[d].usable) continue;
            const point *p = pt(b, d, mode, bi);
            double x = gx + bw * k++;
            if (!p) continue;
            double hgt = H * p->samples_per_s / ymax;
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", x + 1,
                    top + H - hgt, bw - 2, hgt, color[d]);
            fmt_count(buf, sizeof buf, p->samples_per_s);
            flynn_svg_text(f, x + bw / 2, top + H - hgt - 5, "middle", 11, "normal", "#222", buf);
            if (d == DEV_GPU) {
                const point *c = pt(b, DEV_CPU, mode, bi);
                if (c) {
                    snprintf(buf, sizeof buf, "%.1fx", p->samples_per_s / c->samples_per_s);
                    flynn_svg_text(f, x + bw / 2, top + H - hgt - 19, "middle", 12, "bold", color[d], buf);
                }
            }
        }
    }
    /* legend */
    double lx = X0 + 10, ly = y0 + 62;
    for (int d = 0; d < NDEV; d++) {
        if (!b->dev[d].requested) continue;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"%s/>\n", lx, ly - 10, color[d],
                b->dev[d].usable ? "" : " fill-opacity=\"0.25\"");
        if (d == DEV_CPU)
            snprintf(buf, sizeof buf, "CPU (%d threads)", fl_get_num_threads());
        else
            snprintf(buf, sizeof buf, b->dev[d].usable ? "GPU (label: speed-up over the CPU)" : "GPU: not usable");
        flynn_svg_text(f, lx + 17, ly, "start", 12, "normal", "#222", buf);
        lx += 260;
    }
}

static int write_svg(const bench_run *b, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "flynn bench: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    int npanel = 0;
    for (int mode = 0; mode < NMODE; mode++) npanel += b->o.mode_on[mode];
    const double panel_h = 410, foot = 80;
    double total_h = panel_h * npanel + foot;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"760\" height=\"%.0f\" viewBox=\"0 0 760 %.0f\" "
               "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
            total_h, total_h);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    int k = 0;
    for (int mode = 0; mode < NMODE; mode++)
        if (b->o.mode_on[mode]) svg_panel(f, b, mode, panel_h * k++);
    /* footer: the machine and, where the GPU was not usable, why */
    char buf[1400];
    double y = panel_h * npanel + 16;
    snprintf(buf, sizeof buf, "flynn %s bench - CPU: %s, %d threads, BLAS %s%s%s%s", fl_version(), b->cpu_model,
             fl_get_num_threads(), strrchr(b->blas_path, '/') ? strrchr(b->blas_path, '/') + 1 : b->blas_path,
             b->blas.core[0] ? " (" : "", b->blas.core, b->blas.core[0] ? ")" : "");
    flynn_svg_text(f, 20, y, "start", 11, "normal", "#555", buf);
    if (b->dev[DEV_GPU].requested) {
        const char *det = b->dev[DEV_GPU].detail;
        if (strncmp(det, "device: ", 8) == 0) det += 8;
        snprintf(buf, sizeof buf, "GPU%s: %s", b->dev[DEV_GPU].usable ? "" : " not usable", short_reason(det));
        flynn_svg_wrapped(f, 20, y + 18, 118, b->dev[DEV_GPU].usable ? "#555" : "#a33", buf);
    }
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0) {
        fprintf(stderr, "flynn bench: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- main */

/* The defaults, then the command line and the data spec: 0, 2 on a usage error, -1 for --help. */
static int bench_parse_args(bench_run *b, int argc, char **argv) {
    memset(b, 0, sizeof *b);
    bench_opts *o = &b->o;
    *o = (bench_opts){.model = "mnist_cnn", .data = "fashion-mnist", .samples = 20000, .warmup = 5, .repeat = 1,
                      .batch = {32, 64, 128, 256, 512, 1024}, .nbatch = 6, .dev_on = {true, true},
                      .mode_on = {true, false}};
    int r = parse_bench(argc, argv, o);
    if (r == -1) return -1;
    b->file = is_model_file(o->model);
    if ((fl_builtin_model_is_text(o->model) || b->file) && strcmp(o->data, "fashion-mnist") == 0) o->data = "synthetic";
    if (r) return r;
    return parse_bench_data(b);
}

/* The model once, on the CPU: its FLOPs and memory (and for a file, its shapes, read after the data). */
static int bench_probe_model(bench_run *b, fl_model **probe) {
    const bench_opts *o = &b->o;
    fl_model *m = b->file ? fl_load_model(o->model)
                : b->vocab ? fl_builtin_text_model(o->model, b->h, b->vocab, b->classes)
                           : fl_builtin_model(o->model, b->h, b->w, b->c, b->classes);
    if (!m || fl_model_flops(m, &b->flops[MODE_PREDICT], &b->flops[MODE_TRAIN]) != FL_OK ||
        fl_model_memory(m, &b->mem) != FL_OK) {
        fprintf(stderr, "flynn: error: %s\n", fl_last_error()[0] ? fl_last_error() : "unknown model");
        fl_model_free(m);
        return 1;
    }
    *probe = m;
    return 0;
}

/* --threads and --precision, which apply to the whole process: 0, or 2 on a bad --precision. */
static int bench_apply_settings(const bench_opts *o) {
    if (o->threads) fl_set_num_threads(o->threads);
    if (o->precision && fl_set_matmul_precision(o->precision) != FL_OK)
        return bench_usage_error("--precision wants high or highest, got", o->precision);
    return 0;
}

/* The samples of the data kind parse_bench_data chose (probe: the model a synthetic set is shaped for). */
static fl_status bench_read_samples(bench_run *b, const fl_model *probe, fl_dataset *ds) {
    bench_opts *o = &b->o;
    if (b->vocab && !o->samples_set) o->samples = 4096;
    if (b->file && !o->samples_set) o->samples = 2048;
    fl_status ls = b->file && strcmp(b->data_kind, "synthetic") == 0 ? synth_for_model(probe, o->samples, ds)
                   : strcmp(b->data_kind, "npy") == 0           ? fl_load_npy_xy(b->x_path, b->y_path, ds)
                   : strcmp(b->data_kind, "npz") == 0           ? fl_load_npz_xy(b->x_path, ds, NULL)
                   : strcmp(b->data_kind, "synthetic") == 0     ? synth_text(b, o->samples, ds)
                   : strcmp(b->data_kind, "fortunes-lang") == 0 ? fl_load_fortunes_lang(b->data_dir, (int)b->h,
                                                                                         o->samples, 1, ds)
                   : strcmp(b->data_kind, "cifar10") == 0       ? fl_load_cifar10(b->data_dir, o->samples, 1, ds)
                                                                : fl_load_mnist(b->data_dir, o->samples, 1, ds);
    /* the first --samples of the user's arrays */
    if (ls == FL_OK && b->file && fl_tensor_dim(ds->x_train, 0) > o->samples) {
        fl_tensor *x = fl_tensor_slice(ds->x_train, 0, o->samples), *y = fl_tensor_slice(ds->y_train, 0, o->samples);
        fl_dataset_free(ds);
        ds->x_train = x;
        ds->y_train = y;
        if (!x || !y) ls = fl_last_status();
    }
    return ls;
}

/* The training samples, and a file model's shapes for the header and the JSON; frees the probe either way. */
static int bench_load_data(bench_run *b, fl_model *probe, fl_dataset *ds) {
    fl_status ls = bench_read_samples(b, probe, ds);
    if (b->file) { /* the shape line of the header and the JSON */
        int64_t s[FL_MAX_DIMS];
        int nd = fl_model_input_shape(probe, 0, s);
        b->h = nd > 0 ? s[0] : 0; b->w = nd > 1 ? s[1] : 0; b->c = nd > 2 ? s[2] : 0;
        nd = fl_model_output_shape(probe, 0, s);
        b->classes = nd > 0 ? (int)s[nd - 1] : 0;
    }
    fl_model_free(probe);
    if (ls != FL_OK) {
        fl_dataset_free(ds);
        if (fl_last_error()[0]) fprintf(stderr, "flynn: error: %s\n", fl_last_error());
        return 1;
    }
    b->n = fl_tensor_dim(ds->x_train, 0);
    return 0;
}

/* The CPU and BLAS lines (after the data: OpenBLAS has chosen its core by then), and no point measured yet. */
static void bench_read_machine(bench_run *b) {
    read_cpu_model(b->cpu_model, sizeof b->cpu_model);
    read_blas(b);
    for (int d = 0; d < NDEV; d++)
        for (int mode = 0; mode < NMODE; mode++)
            for (int bi = 0; bi < BENCH_MAX_POINTS; bi++) b->res[d][mode][bi].samples_per_s = -1;
}

/* Which devices can be used, and the line that says so: a trial model on each. 0, or 1 on an error. */
static int bench_check_devices(bench_run *b) {
    int rc = 0;
    for (int d = 0; d < NDEV && rc == 0; d++) {
        b->dev[d].requested = b->dev[d].usable = b->o.dev_on[d];
        if (!b->o.dev_on[d]) continue;
        bool fatal;
        fl_model *m = make_model(b, d, &fatal);
        if (fatal) rc = 1;
        fl_model_free(m);
    }
    return rc;
}

/* When no requested device can be used: says why for each, and true. */
static bool bench_no_device(const bench_run *b) {
    if (b->dev[DEV_CPU].usable || b->dev[DEV_GPU].usable) return false;
    for (int d = 0; d < NDEV; d++)
        if (b->dev[d].requested)
            fprintf(stderr, "flynn bench: %s not usable: %s\n", dev_name[d], short_reason(b->dev[d].detail));
    fprintf(stderr, "flynn bench: no device to measure\n");
    return true;
}

/* Every usable device at batch size index bi, warmed up on the first few batches; its rows printed. */
static int bench_measure_batch(bench_run *b, int bi, const fl_dataset *ds, FILE *out) {
    int64_t nw = (int64_t)b->o.warmup * b->o.batch[bi];
    if (nw > b->n) nw = b->n;
    fl_tensor *xw = nw > 0 ? fl_tensor_slice(ds->x_train, 0, nw) : NULL;
    fl_tensor *yw = nw > 0 ? fl_tensor_slice(ds->y_train, 0, nw) : NULL;
    int rc = nw > 0 && (!xw || !yw) ? 1 : 0;
    for (int d = 0; d < NDEV && rc == 0; d++)
        if (b->dev[d].usable) rc = measure(b, d, bi, ds, xw, yw);
    if (rc == 0) print_rows(b, bi, out);
    fl_tensor_free(xw);
    fl_tensor_free(yw);
    return rc;
}

/* The table's header, then each batch size as it is measured. 0, or 1 on an error. */
static int bench_measure_all(bench_run *b, const fl_dataset *ds, FILE *out) {
    print_header(b, out);
    int rc = 0;
    for (int bi = 0; bi < b->o.nbatch && rc == 0; bi++) rc = bench_measure_batch(b, bi, ds, out);
    return rc;
}

/* --json and --svg, after the table. 0, or 1 when a file cannot be written. */
static int bench_write_outputs(const bench_run *b) {
    const bench_opts *o = &b->o;
    int rc = 0;
    if (o->json) {
        FILE *jf = strcmp(o->json, "-") == 0 ? stdout : fopen(o->json, "w");
        if (!jf) {
            fprintf(stderr, "flynn bench: cannot write %s: %s\n", o->json, strerror(errno));
            rc = 1;
        } else {
            write_json(b, jf);
            if (jf != stdout && fclose(jf) != 0) rc = 1;
            else fflush(stdout);
        }
    }
    if (o->svg && write_svg(b, o->svg) != 0) rc = 1;
    return rc;
}

int flynn_cmd_bench(int argc, char **argv) {
    static bench_run run; /* large; one per process */
    bench_run *b = &run;
    int r = bench_parse_args(b, argc, argv);
    if (r == -1) { usage_bench(stdout); return 0; }
    if (r) return r;
    fl_model *probe;
    if ((r = bench_probe_model(b, &probe))) return r;
    if ((r = bench_apply_settings(&b->o))) { fl_model_free(probe); return r; }
    /* with --json -, the JSON has stdout and the table goes to stderr */
    FILE *out = b->o.json && strcmp(b->o.json, "-") == 0 ? stderr : stdout;
    fl_dataset ds;
    if ((r = bench_load_data(b, probe, &ds))) return r;
    bench_read_machine(b);
    int rc = bench_check_devices(b);
    if (rc == 0 && bench_no_device(b)) { fl_dataset_free(&ds); return 1; }
    if (rc == 0) rc = bench_measure_all(b, &ds, out);
    if (rc) fprintf(stderr, "flynn: error: %s\n", fl_last_error());
    else rc = bench_write_outputs(b);
    fl_dataset_free(&ds);
    return rc;
}
