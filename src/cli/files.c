/*
 * files.c — the model-file side of the `flynn` command: `flynn predict FILE`,
 * `flynn convert IN OUT`, `flynn summary FILE`, and the helpers `flynn
 * train` uses for --model FILE, --resume FILE, --save FILE and --checkpoint
 * FILE. Keras files (.keras, .h5, .json + .weights.h5) go through the public
 * API (fl_load_model, fl_save_model, ...).
 */
#include "files.h"
#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool flynn_has_suffix_n(const char *s, size_t n, const char *suf) {
    size_t b = strlen(suf);
    return n >= b && strncmp(s + n - b, suf, b) == 0;
}

static bool has_suffix(const char *s, const char *suf) { return flynn_has_suffix_n(s, strlen(s), suf); }

bool flynn_is_model_file(const char *name) {
    if (!name) return false;
    if (has_suffix(name, ".keras") || has_suffix(name, ".h5") || has_suffix(name, ".hdf5") || has_suffix(name, ".json"))
        return true;
    return strchr(name, '/') != NULL || access(name, F_OK) == 0;
}

static int fail(const char *cmd, const char *what) {
    fprintf(stderr, "flynn %s: error: %s%s%s\n", cmd, what ? what : "", what ? ": " : "", fl_last_error());
    return 1;
}

static int usage_error(const char *cmd, const char *msg, const char *arg) {
    fprintf(stderr, "flynn %s: %s%s%s\n(see `flynn %s --help`)\n", cmd, msg, arg ? " " : "", arg ? arg : "", cmd);
    return 2;
}

fl_model *flynn_load_model_file(const char *cmd, const char *path, const char *weights, bool compile) {
    fl_model *m = fl_load_model(path, .no_compile = !compile);
    if (!m) return NULL;
    return flynn_add_weights(cmd, m, path, weights);
}

fl_model *flynn_add_weights(const char *cmd, fl_model *m, const char *path, const char *weights) {
    if (weights) {
        if (fl_load_weights(m, weights) != FL_OK) {
            fl_model_free(m);
            return NULL;
        }
    } else if (has_suffix(path, ".json")) {
        fprintf(stderr, "flynn %s: note: %s holds no weights: the model starts from fresh weights (give --weights "
                "FILE.weights.h5 to load some)\n", cmd, path);
    }
    return m;
}

fl_model *flynn_load_lenient(const char *cmd, const char *path) {
    fl_model *m = fl_load_model(path);
    if (m) return m;
    char why[1024];
    snprintf(why, sizeof why, "%s", fl_last_error());
    m = fl_load_model(path, .no_compile = true);
    if (!m) return fl_load_model(path); /* fails again: its message is the first reason */
    fprintf(stderr, "flynn %s: note: the model's compile config is left out: %s\n", cmd, why);
    return m;
}

void flynn_print_compile_info(const fl_model *m, FILE *f) {
    const fl_optimizer *o = fl_model_optimizer(m);
    if (!o) return;
    fl_loss l = fl_model_loss(m);
    fprintf(f, " Compiled: %s (learning_rate %g), loss %s%s; %lld optimizer step%s taken\n", fl_optimizer_name(o),
            (double)fl_optimizer_learning_rate(o), fl_loss_name(l.kind), l.from_logits ? " (from_logits)" : "",
            (long long)fl_optimizer_iterations(o), fl_optimizer_iterations(o) == 1 ? "" : "s");
}

/* ------------------------------------------------------------ summary */

static void usage_summary_file(FILE *f) {
    fprintf(f,
            "usage: flynn summary FILE [--weights FILE.weights.h5]\n"
            "       flynn summary [--model NAME] [--data SPEC]\n\n"
            "Prints the Keras summary table of a model file (.keras, .h5 or .json; see\n"
            "docs/keras-files.md), and what it was compiled with. Without FILE it prints\n"
            "the table of a built-in model (mnist_cnn or mlp) for the data set's image\n"
            "shape (default fashion-mnist: 28x28x1, 10 classes).\n\n"
            "  --weights FILE     weights for a .json model (its architecture only)\n");
}

int flynn_cmd_summary_file(int argc, char **argv) {
    const char *path = NULL, *weights = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) { usage_summary_file(stdout); return 0; }
        if (strcmp(argv[i], "--weights") == 0 && i + 1 < argc) weights = argv[++i];
        else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc && !path) path = argv[++i];
        else if (strncmp(argv[i], "--", 2) == 0) return usage_error("summary", "unknown option", argv[i]);
        else if (!path) path = argv[i];
        else return usage_error("summary", "unexpected argument", argv[i]);
    }
    if (!path) return usage_error("summary", "FILE is required", NULL);
    fl_model *m = flynn_load_lenient("summary", path);
    if (!m || !(m = flynn_add_weights("summary", m, path, weights))) return fail("summary", NULL);
    fl_model_summary(m, stdout);
    flynn_print_compile_info(m, stdout);
    fl_model_free(m);
    return 0;
}

/* ------------------------------------------------------------ predict */

static void usage_predict(FILE *f) {
    fprintf(f,
            "usage: flynn predict FILE --input X.npy [--input X2.npy ...] --output Y.npy [options]\n\n"
            "Loads a model file (.keras, .h5, or .json with --weights) and writes its predictions\n"
            "for the samples in X.npy as float32 .npy. X.npy may be float32/float64, or integers\n"
            "(int8 ... int64, uint8 ... uint64): an int32 or int64 model input (token indices for\n"
            "Embedding) takes them as int32 (range-checked, never through float), a float32 input\n"
            "as their float32 values.\n"
            "An input axis the model leaves open (None, as keras.Input(shape=(None,))) takes\n"
            "X.npy of any length there: the model is planned for that length.\n"
            "A model with several inputs takes one --input per input, in the model's order, or\n"
            "one .npz holding them all; one with several outputs takes one --output per output,\n"
            "or one name Y.npy from which Y_0.npy, Y_1.npy, ... are made.\n\n"
            "  --input X              the samples, (N, ...input shape): X.npy; FILE.npz (each\n"
            "                         input by its name, else x, x0, x1 ... or arr_0, arr_1 ...);\n"
            "                         FILE.csv (the feature columns; --label COLUMN is left out);\n"
            "                         or DIR, a folder of images (every .jpg/.png under it, sorted\n"
            "                         by folder then name, resized to the model's input)\n"
            "  --label COLUMN, --categorical C, --image-size HxW, --color-mode M   as for train\n"
            "  --output Y.npy         where the predictions go (written atomically)\n"
            "  --weights FILE         weights for a .json model (a .weights.h5 file)\n"
            "  --batch-size B         batch size (default 32)\n"
            "  --device D             auto (default), cpu or gpu\n"
            "  --threads T            CPU threads (default: all cores)\n");
}

/* What the command line asks of `flynn predict`. */
typedef struct predict_opts {
    const char *path, *weights, *device;
    const char *inputs[16], *outputs[16];
    int nin, nout;
    flynn_data_opts own; /* --label, --categorical, --image-size, --color-mode for CSV and image inputs */
    long bs, threads;
    fl_device_kind dk;
} predict_opts;

/* The options, in the order given: 0, 2 on a usage error, -1 for --help. */
static int predict_parse_args(predict_opts *o, int argc, char **argv) {
    *o = (predict_opts){.bs = 32, .dk = FL_DEVICE_AUTO};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return -1;
        if (strncmp(a, "--", 2) != 0) {
            if (o->path) return usage_error("predict", "unexpected argument", a);
            o->path = a;
            continue;
        }
        if (i + 1 >= argc) return usage_error("predict", "missing value for", a);
        const char *v = argv[++i];
        char *end;
        if (strcmp(a, "--input") == 0) {
            if (o->nin == 16) return usage_error("predict", "too many --input", NULL);
            o->inputs[o->nin++] = v;
        } else if (strcmp(a, "--output") == 0) {
            if (o->nout == 16) return usage_error("predict", "too many --output", NULL);
            o->outputs[o->nout++] = v;
        } else if (strcmp(a, "--weights") == 0) {
            o->weights = v;
        } else if (strcmp(a, "--label") == 0) {
            o->own.label = v;
        } else if (strcmp(a, "--categorical") == 0) {
            o->own.categorical = v;
        } else if (strcmp(a, "--image-size") == 0) {
            o->own.image_size = v;
        } else if (strcmp(a, "--color-mode") == 0) {
            o->own.color_mode = v;
        } else if (strcmp(a, "--device") == 0) {
            o->device = v;
        } else if (strcmp(a, "--batch-size") == 0) {
            o->bs = strtol(v, &end, 10);
            if (*end || o->bs <= 0 || o->bs > (1 << 20))
                return usage_error("predict", "--batch-size wants a positive integer, got", v);
        } else if (strcmp(a, "--threads") == 0) {
            o->threads = strtol(v, &end, 10);
            if (*end || o->threads < 0 || o->threads > 4096)
                return usage_error("predict", "--threads wants an integer, got", v);
        } else {
            return usage_error("predict", "unknown option", a);
        }
    }
    return 0;
}

/* The model, an input and an output are required, and --device is one flynn knows: 0, or 2. */
static int predict_check_args(predict_opts *o) {
    if (!o->path) return usage_error("predict", "FILE (the model) is required", NULL);
    if (o->nin == 0) return usage_error("predict", "--input X.npy is required", NULL);
    if (o->nout == 0) return usage_error("predict", "--output Y.npy is required", NULL);
    if (o->device && strcmp(o->device, "auto") != 0) {
        if (strcmp(o->device, "cpu") == 0) o->dk = FL_DEVICE_CPU;
        else if (strcmp(o->device, "gpu") == 0) o->dk = FL_DEVICE_GPU;
        else return usage_error("predict", "--device wants auto, cpu or gpu, got", o->device);
    }
    return 0;
}

/* One --input per model input (one .npz stands for all), one --output per output or one name: 0, or 2. */
static int predict_match_io(predict_opts *o, const fl_model *m) {
    int mi = fl_model_num_inputs(m), mo = fl_model_num_outputs(m);
    if (o->nin == 1 && mi > 1 && flynn_has_suffix_n(o->inputs[0], strlen(o->inputs[0]), ".npz"))
        for (int i = 1; i < mi && i < 16; i++) o->inputs[o->nin++] = o->inputs[0]; /* one .npz for every input */
    if (o->nin != mi) {
        fprintf(stderr, "flynn predict: error: model %s has %d input%s, %d --input given\n", o->path, mi,
                mi == 1 ? "" : "s", o->nin);
        return 2;
    }
    if (o->nout != mo && o->nout != 1) {
        fprintf(stderr, "flynn predict: error: model %s has %d outputs: give %d --output or one name\n", o->path, mo,
                mo);
        return 2;
    }
    return 0;
}

/* The model on --device: 0, or 1 with the reason. */
static int predict_set_device(const predict_opts *o, fl_model *m) {
    char why[768];
    if (fl_model_set_device(m, o->dk, why, sizeof why) != FL_OK) return fail("predict", "--device");
    return 0;
}

/* Every --input as the tensor its model input takes: 0, or 1 (xs[] holds what was read, for the caller to free). */
static int predict_load_inputs(predict_opts *o, fl_model *m, fl_tensor **xs) {
    for (int i = 0; i < o->nin; i++) {
        /* integers stay integers for an int32 input (never rounded through float) */
        if (!(xs[i] = flynn_load_input("predict", o->inputs[i], m, i, &o->own))) return 1;
    }
    return 0;
}

/* The predictions of every output into ys[]: 0, or 1 naming the --input at fault where the error says which. */
static int predict_run(const predict_opts *o, fl_model *m, fl_tensor **xs, fl_tensor **ys) {
    if (fl_predict_multi(m, (const fl_tensor *const *)xs, o->nin, ys, fl_model_num_outputs(m),
                         .batch_size = (int)o->bs, .verbose = FL_VERBOSE_SILENT) == FL_OK)
        return 0;
    /* "fl_predict_multi (input k): x has shape ...": name the file of input k */
    const char *e = fl_last_error(), *at = strstr(e, "(input ");
    int k = -1;
    if (at && sscanf(at, "(input %d)", &k) == 1 && k >= 0 && k < o->nin) {
        fprintf(stderr, "flynn predict: error: --input %s: %s\n", o->inputs[k], e);
        return 1;
    }
    return fail("predict", NULL);
}

/* Each output to its --output, or to Y_0.npy, Y_1.npy, ... from one name Y.npy; a line for each. 0, or 1. */
static int predict_write_outputs(const predict_opts *o, int mo, fl_tensor *const *ys) {
    for (int k = 0; k < mo; k++) {
        char name[4096];
        if (o->nout == mo) {
            snprintf(name, sizeof name, "%s", o->outputs[k]);
        } else {
            const char *y = o->outputs[0], *dot = has_suffix(y, ".npy") ? y + strlen(y) - 4 : NULL;
            int stem = dot ? (int)(dot - y) : (int)strlen(y);
            snprintf(name, sizeof name, "%.*s_%d.npy", stem, y, k);
        }
        if (fl_save_npy(ys[k], name) != FL_OK) return fail("predict", NULL);
        char shape[128];
        printf("predictions %s written to %s\n", fl_tensor_shape_str(ys[k], shape, sizeof shape), name);
    }
    return 0;
}

int flynn_cmd_predict(int argc, char **argv) {
    predict_opts o;
    int rc = predict_parse_args(&o, argc, argv);
    if (rc == -1) { usage_predict(stdout); return 0; }
    if (rc || (rc = predict_check_args(&o))) return rc;
    if (o.threads) fl_set_num_threads((int)o.threads);
    fl_model *m = flynn_load_model_file("predict", o.path, o.weights, false);
    if (!m) return fail("predict", NULL);
    fl_tensor *xs[16] = {0}, *ys[16] = {0};
    rc = predict_match_io(&o, m);
    if (rc == 0) rc = predict_set_device(&o, m);
    if (rc == 0) rc = predict_load_inputs(&o, m, xs);
    if (rc == 0) rc = predict_run(&o, m, xs, ys);
    if (rc == 0) rc = predict_write_outputs(&o, fl_model_num_outputs(m), ys);
    for (int i = 0; i < 16; i++) { fl_tensor_free(xs[i]); fl_tensor_free(ys[i]); }
    fl_model_free(m);
    return rc;
}

/* ------------------------------------------------------------ convert */

static void usage_convert(FILE *f) {
    fprintf(f,
            "usage: flynn convert IN OUT [--weights FILE.weights.h5]\n\n"
            "Converts a model file between the Keras formats, keeping the architecture, the\n"
            "weights, the compile config and the optimizer state:\n"
            "  .keras   Keras 3 (a zip of config.json, metadata.json and model.weights.h5)\n"
            "  .h5      the legacy HDF5 full-model file (Keras 3 / tf.keras 2)\n"
            "  .json    the architecture (model.to_json()); flynn also writes the weights next\n"
            "           to it as OUT-without-.json + .weights.h5 (not for a .json IN without\n"
            "           --weights: it holds none)\n"
            "OUT is written atomically. For a .json IN, --weights gives its weights.\n");
}

int flynn_cmd_convert(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *weights = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) { usage_convert(stdout); return 0; }
        if (strcmp(argv[i], "--weights") == 0 && i + 1 < argc) weights = argv[++i];
        else if (strncmp(argv[i], "--", 2) == 0) return usage_error("convert", "unknown option", argv[i]);
        else if (!in) in = argv[i];
        else if (!out) out = argv[i];
        else return usage_error("convert", "unexpected argument", argv[i]);
    }
    if (!in || !out) return usage_error("convert", "IN and OUT are required", NULL);
    fl_model *m = flynn_load_lenient("convert", in);
    if (!m || !(m = flynn_add_weights("convert", m, in, weights))) return fail("convert", NULL);
    int rc = 0;
    if (fl_save_model(m, out) != FL_OK) {
        rc = fail("convert", NULL);
    } else if (has_suffix(out, ".json") && has_suffix(in, ".json") && !weights) {
        /* the architecture alone: IN holds no weights, and fresh ones written beside it would pass for trained
         * ones (nor are they made: a 300-million-parameter Dense converts in milliseconds, issue 43) */
        printf("%s -> %s (architecture; %s holds no weights, so none are written: give --weights FILE.weights.h5 "
               "to carry some)\n", in, out, in);
    } else if (has_suffix(out, ".json")) {
        char wpath[4096];
        snprintf(wpath, sizeof wpath, "%.*s.weights.h5", (int)(strlen(out) - 5), out);
        if (fl_save_weights(m, wpath) != FL_OK) rc = fail("convert", NULL);
        else printf("%s -> %s (architecture) and %s (weights)\n", in, out, wpath);
    } else {
        printf("%s -> %s\n", in, out);
    }
    fl_model_free(m);
    return rc;
}
