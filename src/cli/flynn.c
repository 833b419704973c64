/*
 * flynn.c — the `flynn` command: train, evaluate and summary of the built-in
 * models or of Keras model files (--model/--resume/--save/--checkpoint; the
 * file commands predict, convert and summary FILE are in files.c) on
 * MNIST-style or CIFAR-10 data, on the CPU or (when usable) the GPU.
 * Everything here goes through the public API in flynn/flynn.h.
 */
#include <flynn/flynn.h>

#include "data.h"
#include "dist/mpi.h"
#include "devtools.h"
#include "files.h"
#include "fit_data.h"
#include "omp_setup.h"
#include "plot.h"
#include "sift_cmd.h"
#include "train_callbacks.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_FASHION "/usr/share/datasets/fashion-mnist"

typedef struct opts {
    const char *model, *data, *device, *save_weights, *weights, *verbose, *precision;
    const char *resume, *save, *checkpoint; /* model files (train) */
    const char *class_weight, *sample_weight; /* --class-weight, --sample-weight */
    long samples, test_samples;
    bool samples_given, test_samples_given; /* given on the command line (not the built-in data's defaults) */
    long classes;                /* --classes N: a built-in model's outputs (0: from the labels) */
    int epochs, batch_size, threads;
    unsigned long long seed;
    float validation_split;
    bool no_nan_check;
    bool stream;                 /* --stream: read the data from disk batch by batch */
    int prefetch, workers;       /* --prefetch N (-1: unset), --workers W (0: unset) */
    const char *augment;         /* --augment flip,translate=F */
    long memory_budget;          /* --memory-budget MIB (0: half the machine's memory) */
    flynn_cb_opts cb; /* callbacks, clipping, schedule (train_callbacks.c) */
    flynn_data_opts own; /* --label, --categorical, --image-size, --color-mode */
} opts;

static void usage_main(FILE *f) {
    fprintf(f,
            "flynn %s — Keras-style deep learning in C\n\n"
            "usage: flynn <command> [options]\n\n"
            "commands:\n"
            "  train      train a built-in model or a Keras model file on a data set and report test accuracy\n"
            "  evaluate   evaluate saved weights of a built-in model on the test set\n"
            "  summary    print the Keras summary table of a model file or a built-in model\n"
            "  predict    write a model file's predictions for a .npy input to a .npy file\n"
            "  convert    convert a model file between .keras, .h5 and .json\n"
            "  devices    list the CUDA devices (as deviceQuery)\n"
            "  bandwidth  measure host/device copy bandwidth (as bandwidthTest)\n"
            "  doctor     check step by step whether flynn can use the GPU, and what to fix\n"
            "  plot       draw a training log (CSVLogger / --csv-log CSV) as loss and metric curves (SVG)\n"
            "  bench      time training (and predict) per device and batch size: samples/s, GPU/CPU\n"
            "  sift       SIFT keypoints and descriptors of images (as OpenCV's), to .npz or JSON\n"
            "  match      match two images' SIFT features: ratio test, RANSAC homography, an SVG\n"
            "  version    print the version\n\n"
            "`flynn <command> --help` describes each command's options.\n",
            fl_version());
}

static void usage_train(FILE *f) {
    fprintf(f,
            "usage: flynn train [options]\n\n"
            "Trains a built-in model or a Keras model file, showing a Keras progress bar per\n"
            "epoch, then prints the test accuracy and the training throughput in samples/s.\n\n"
            "  --model NAME|FILE      mnist_cnn (default for images), mlp, lstm_text (default for\n"
            "                         fortunes-lang), transformer_text, or a model file (.keras,\n"
            "                         .h5, .json):\n"
            "                         compiled as the file says, else Adam + sparse categorical\n"
            "                         crossentropy + accuracy\n"
            "  --resume FILE          continue training a saved model (.keras or .h5) with its\n"
            "                         optimizer state: --epochs more epochs, numbered on from the\n"
            "                         file's (exactly as an uninterrupted run with the same options)\n"
            "  --save FILE            save the trained model (.keras, .h5), atomically\n"
            "  --checkpoint FILE      after each epoch, save the model if val_loss improved (loss\n"
            "                         without --validation-split), as Keras ModelCheckpoint\n"
            "                         (save_best_only); FILE may hold {epoch:02d} and {val_loss:.4f}\n"
            "  --data SPEC            fashion-mnist[:DIR] (default, DIR defaults to %s),\n"
            "                         mnist:DIR, cifar10:DIR (CIFAR-10 binary version),\n"
            "                         fortunes-lang[:DIR] (text: which of 5 languages a fortune\n"
            "                         cookie is in, from Debian's fortunes packages; DIR defaults\n"
            "                         to /usr/share/games/fortunes), or your own data (no test\n"
            "                         set unless the file has one: use --validation-split):\n"
            "                           X.npy,Y.npy   arrays: x as it is, y class indices or targets\n"
            "                           FILE.npz      arrays x and y (np.savez(f, x=x, y=y)), or\n"
            "                                         x_train, y_train[, x_test, y_test]; for a\n"
            "                                         model file with several inputs one array per\n"
            "                                         input named as the input, and y (a test set:\n"
            "                                         <input>_test for each input, and y_test)\n"
            "                           FILE.csv      a table with a header; --label COLUMN is y\n"
            "                           DIR           images (.jpg, .png) in one subfolder per class,\n"
            "                                         as keras.utils.image_dataset_from_directory\n"
            "  --label COLUMN         CSV: the column to predict (numbers, or text: classes)\n"
            "  --categorical C        CSV: text feature columns onehot (default) or int\n"
            "  --image-size HxW       images: resize to H x W (default: the model file's input\n"
            "                         size, else 256x256 as Keras)\n"
            "  --color-mode M         images: rgb (default), grayscale or rgba\n"
            "  --stream               DIR, X.npy,Y.npy: read the data from disk batch by batch\n"
            "                         on a background thread instead of into memory (automatic\n"
            "                         when decoded it would exceed --memory-budget); the progress\n"
            "                         line then shows how long each step waited for its batch\n"
            "  --prefetch N           streamed: batches read ahead of the step (default 2; 0: none,\n"
            "                         each batch read when the step asks for it)\n"
            "  --workers W            streamed: threads reading batches (default 1)\n"
            "  --augment A            streamed images, while training: flip (random left-right,\n"
            "                         as keras.layers.RandomFlip(\"horizontal\")) and/or\n"
            "                         translate=F or translate=HxW (RandomTranslation(H, W):\n"
            "                         bilinear, mirrored edges), comma-separated; seeded by --seed\n"
            "  --memory-budget MIB    decoded data larger than this is streamed (default: half\n"
            "                         of this machine's memory)\n"
            "  --samples N            train on the first N training samples (a built-in data set:\n"
            "                         default 20000; your own data: all; 0 = all; an image folder:\n"
            "                         the first N in its shuffled order, as Keras's take(N))\n"
            "  --test-samples N       evaluate on the first N test samples (default 0 = all)\n"
            "  --classes N            a built-in model's classes (default: the largest label + 1)\n"
            "  --epochs E             epochs (default 2)\n"
            "  --batch-size B         batch size (default 128)\n"
            "  --validation-split F   hold out the last fraction F for validation (default 0)\n"
            "  --class-weight SPEC    weigh the loss of each training sample by its class, as Keras\n"
            "                         fit(class_weight=...): 0=1,1=5 (classes not named weigh 1), or\n"
            "                         balanced: n_samples / (n_classes * count) of each class in y\n"
            "                         (scikit-learn's \"balanced\"); the validation data stay unweighted\n"
            "  --sample-weight W.npy  one weight per training sample, (N,), or per step (N, steps) of\n"
            "                         a sequence output, as Keras fit(sample_weight=...); split with\n"
            "                         --validation-split. Loss = sum(w * loss) / batch size; the\n"
            "                         metrics stay unweighted (Keras's compile metrics)\n"
            "  --device D             auto (default: CUDA when usable, else an OpenCL GPU, else the CPU), cpu,\n"
            "                         gpu (CUDA), opencl or opencl:N (`flynn devices` lists N)\n"
            "  --threads T            CPU threads (default: $OMP_NUM_THREADS, else all cores)\n"
            "  --precision P          GPU float32 matmul/conv precision: high (default, TF32\n"
            "                         tensor cores, as TensorFlow) or highest (full float32)\n"
            "  --seed S               seed for weights, dropout and shuffling (default 0)\n"
            "  --verbose V            auto (default: bar on a terminal, one line per epoch otherwise),\n"
            "                         0 (silent), 1 (bar) or 2 (one line per epoch)\n"
            "  --save-weights DIR     save the trained weights as DIR/<layer>.<weight>.npy ('/' in a\n"
            "                         name as '.')\n"
            "  --no-nan-check         train on when the data or the loss holds NaN or inf (by default\n"
            "                         training stops, as Keras TerminateOnNaN, naming the sample or the\n"
            "                         layer, and nothing is saved)\n"
            "%s"
            "\nUnder Open MPI (`mpirun -np N flynn train ...`) the N processes train one model on\n"
            "the CPU, data-parallel: --batch-size is the global batch, split among them, and the\n"
            "steps equal one process's to float rounding; rank 0 alone prints and writes files\n"
            "(docs/scale-out.md).\n",
            DEFAULT_FASHION, flynn_cb_help());
}

static void usage_evaluate(FILE *f) {
    fprintf(f,
            "usage: flynn evaluate --weights DIR [options]\n"
            "       flynn evaluate --model FILE --data SPEC [options]\n\n"
            "Loads weights saved by `flynn train --save-weights DIR` into a built-in model, or a\n"
            "model file (.keras, .h5), and prints loss and accuracy on the test set (your own\n"
            "data: its test set when the file has one, else all of it).\n\n"
            "  --weights DIR          folder of <layer>.<weight>.npy files (built-in models)\n"
            "  --model NAME|FILE      mnist_cnn (default) or mlp: must match the saved weights;\n"
            "                         or a model file, compiled as it says\n"
            "  --data SPEC            as for train (default fashion-mnist; also X.npy,Y.npy,\n"
            "                         FILE.npz, FILE.csv --label COLUMN, DIR of images)\n"
            "  --label, --categorical, --image-size, --color-mode   as for train\n"
            "  --sample-weight W.npy  weigh each sample's loss, as Keras evaluate(sample_weight=...)\n"
            "                         (one weight per evaluated sample)\n"
            "  --test-samples N       first N test images (default 0 = all)\n"
            "  --batch-size B         batch size (default 256)\n"
            "  --device D, --threads T, --verbose V   as for train\n");
}

static void usage_summary(FILE *f) {
    fprintf(f,
            "usage: flynn summary [--model NAME] [--data SPEC]\n"
            "       flynn summary FILE [--weights FILE.weights.h5]\n\n"
            "Prints the Keras summary table of a built-in model (mnist_cnn or mlp) for the\n"
            "data set's image shape (default fashion-mnist: 28x28x1, 10 classes), or of a\n"
            "model file (.keras, .h5, .json) and what it was compiled with.\n");
}

static int die(const char *what) {
    fprintf(stderr, "flynn: error: %s%s%s\n", what ? what : "", what ? ": " : "", fl_last_error());
    return 1;
}

static int bad_usage(const char *cmd, const char *msg, const char *arg) {
    fprintf(stderr, "flynn %s: %s%s%s\n(see `flynn %s --help`)\n", cmd, msg, arg ? " " : "", arg ? arg : "", cmd);
    return 2;
}

static bool parse_long(const char *s, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s) return false;
    *out = v;
    return true;
}

/* Parses --key value / --key=value pairs into o. Returns 0, 2 on error, -1 for --help. */
static int parse(const char *cmd, int argc, char **argv, opts *o) {
    for (int i = 0; i < argc; i++) {
        char key[64];
        const char *a = argv[i], *val = NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return -1;
        if (strcmp(a, "--no-nan-check") == 0 && strcmp(cmd, "train") == 0) { o->no_nan_check = true; continue; }
        if (strcmp(a, "--stream") == 0 && strcmp(cmd, "train") == 0) { o->stream = true; continue; }
        if (strcmp(cmd, "train") == 0) { /* callback, clipping and schedule flags */
            int r = flynn_cb_parse(argc, argv, &i, &o->cb);
            if (r == 1) continue;
            if (r == 2) return 2;
        }
        if (strncmp(a, "--", 2) != 0) return bad_usage(cmd, "unexpected argument", a);
        const char *eq = strchr(a, '=');
        size_t kl = eq ? (size_t)(eq - a) : strlen(a);
        if (kl >= sizeof key) return bad_usage(cmd, "unknown option", a);
        memcpy(key, a, kl);
        key[kl] = 0;
        if (eq) val = eq + 1;
        else if (i + 1 < argc) val = argv[++i];
        else return bad_usage(cmd, "missing value for", key);
        long v = 0;
        bool num = parse_long(val, &v);
        if (strcmp(key, "--model") == 0) o->model = val;
        else if (strcmp(key, "--resume") == 0) o->resume = val;
        else if (strcmp(key, "--save") == 0) o->save = val;
        else if (strcmp(key, "--checkpoint") == 0) o->checkpoint = val;
        else if (strcmp(key, "--data") == 0) o->data = val;
        else if (strcmp(key, "--device") == 0) o->device = val;
        else if (strcmp(key, "--save-weights") == 0) o->save_weights = val;
        else if (strcmp(key, "--weights") == 0) o->weights = val;
        else if (strcmp(key, "--verbose") == 0) o->verbose = val;
        else if (strcmp(key, "--precision") == 0) o->precision = val;
        else if (strcmp(key, "--label") == 0) o->own.label = val;
        else if (strcmp(key, "--categorical") == 0) o->own.categorical = val;
        else if (strcmp(key, "--image-size") == 0) o->own.image_size = val;
        else if (strcmp(key, "--color-mode") == 0) o->own.color_mode = val;
        else if (strcmp(key, "--augment") == 0 && strcmp(cmd, "train") == 0) o->augment = val;
        else if (strcmp(key, "--class-weight") == 0 && strcmp(cmd, "train") == 0) o->class_weight = val;
        else if (strcmp(key, "--sample-weight") == 0 && strcmp(cmd, "summary") != 0) o->sample_weight = val;
        else if (strcmp(key, "--validation-split") == 0) {
            char *end;
            o->validation_split = strtof(val, &end);
            if (*end || end == val || o->validation_split < 0 || o->validation_split >= 1)
                return bad_usage(cmd, "--validation-split wants a number in [0, 1), got", val);
        } else if (!num) {
            if (strcmp(key, "--samples") && strcmp(key, "--test-samples") && strcmp(key, "--epochs") &&
                strcmp(key, "--classes") && strcmp(key, "--batch-size") && strcmp(key, "--threads") && strcmp(key, "--seed") &&
                strcmp(key, "--prefetch") && strcmp(key, "--workers") && strcmp(key, "--memory-budget"))
                return bad_usage(cmd, "unknown option", key);
            return bad_usage(cmd, "expected an integer, got", val);
        } else if (strcmp(key, "--samples") == 0 && v >= 0) o->samples = v, o->samples_given = true;
        else if (strcmp(key, "--test-samples") == 0 && v >= 0) o->test_samples = v, o->test_samples_given = true;
        else if (strcmp(key, "--classes") == 0 && strcmp(cmd, "summary") != 0 && v >= 2 && v <= 1000000) o->classes = v;
        else if (strcmp(key, "--epochs") == 0 && v > 0 && v < 1000000) o->epochs = (int)v;
        else if (strcmp(key, "--batch-size") == 0 && v > 0 && v <= 1 << 20) o->batch_size = (int)v;
        else if (strcmp(key, "--threads") == 0 && v >= 0 && v <= 4096) o->threads = (int)v;
        else if (strcmp(key, "--seed") == 0 && v >= 0) o->seed = (unsigned long long)v;
        else if (strcmp(key, "--prefetch") == 0 && strcmp(cmd, "train") == 0 && v >= 0 && v <= 1024) o->prefetch = (int)v;
        else if (strcmp(key, "--workers") == 0 && strcmp(cmd, "train") == 0 && v >= 1 && v <= 256) o->workers = (int)v;
        else if (strcmp(key, "--memory-budget") == 0 && strcmp(cmd, "train") == 0 && v >= 1) o->memory_budget = v;
        else if (strcmp(key, "--samples") && strcmp(key, "--test-samples") && strcmp(key, "--epochs") &&
                 (strcmp(key, "--classes") || strcmp(cmd, "summary") == 0) && strcmp(key, "--batch-size") && strcmp(key, "--threads") && strcmp(key, "--seed") &&
                 (strcmp(cmd, "train") || (strcmp(key, "--prefetch") && strcmp(key, "--workers") &&
                                            strcmp(key, "--memory-budget"))))
            return bad_usage(cmd, "unknown option", key);
        else return bad_usage(cmd, "value out of range for", key);
    }
    return 0;
}

typedef struct data_info {
    const char *kind;
    char dir[1024], x[1024], y[1024]; /* x, y: the .npy pair of kind "npy" */
    int64_t h, w, c;
    int64_t vocab;                    /* text: tokens in [0, vocab), h steps (w, c unused); 0 for images */
    int classes;
} data_info;

/* The built-in model for the data: a text model for text, else an image model. */
static fl_model *builtin_model(const char *name, const data_info *d) {
    if (d->vocab) return fl_builtin_text_model(name, d->h, d->vocab, d->classes);
    return fl_builtin_model(name, d->h, d->w, d->c, d->classes);
}

#define FORTUNES_STEPS 128

static int parse_data(const char *cmd, const char *spec, data_info *d) {
    const char *colon = strchr(spec, ':');
    size_t kl = colon ? (size_t)(colon - spec) : strlen(spec);
    d->classes = 10;
    d->vocab = 0;
    const char *own = flynn_own_kind(spec);
    if (own) {
        const char *comma = strchr(spec, ',');
        d->kind = own;
        snprintf(d->x, sizeof d->x, "%.*s", comma ? (int)(comma - spec) : (int)strlen(spec), spec);
        snprintf(d->y, sizeof d->y, "%s", comma ? comma + 1 : spec);
        snprintf(d->dir, sizeof d->dir, "%s", spec);
        d->h = d->w = d->c = 0;
        return 0;
    }
    if (kl == 13 && strncmp(spec, "fashion-mnist", kl) == 0) {
        d->kind = "fashion-mnist"; d->h = 28; d->w = 28; d->c = 1;
        snprintf(d->dir, sizeof d->dir, "%s", colon ? colon + 1 : DEFAULT_FASHION);
    } else if (kl == 5 && strncmp(spec, "mnist", kl) == 0 && colon) {
        d->kind = "mnist"; d->h = 28; d->w = 28; d->c = 1;
        snprintf(d->dir, sizeof d->dir, "%s", colon + 1);
    } else if (kl == 7 && strncmp(spec, "cifar10", kl) == 0 && colon) {
        d->kind = "cifar10"; d->h = 32; d->w = 32; d->c = 3;
        snprintf(d->dir, sizeof d->dir, "%s", colon + 1);
    } else if (kl == 13 && strncmp(spec, "fortunes-lang", kl) == 0) {
        d->kind = "fortunes-lang"; d->h = FORTUNES_STEPS; d->w = d->c = 0;
        d->vocab = FL_FORTUNES_VOCAB;
        d->classes = FL_FORTUNES_CLASSES;
        snprintf(d->dir, sizeof d->dir, "%s", colon ? colon + 1 : "/usr/share/games/fortunes");
    } else {
        return bad_usage(cmd, "--data wants fashion-mnist[:DIR], mnist:DIR, cifar10:DIR, fortunes-lang[:DIR], "
                         "X.npy,Y.npy, FILE.npz, FILE.csv or a folder of images (DIR/<class>/*.jpg|png), got", spec);
    }
    return 0;
}

/* Says how many classes a built-in model gets and why, and warns of class indices under the largest that
 * no label has (issue 43: one label of ten classes mistyped as 12 trained a 13-class model without a word). */
static void report_classes(const data_info *d, const float *v, int64_t n, int64_t top, long classes_opt, bool quiet) {
    if (quiet) return;
    if (classes_opt) printf("classes: %d (--classes)\n", d->classes);
    else printf("classes: %d (the largest label, %lld, + 1; --classes N to set)\n", d->classes, (long long)top);
    const int k = d->classes;
    char *seen = calloc((size_t)k, 1);
    if (!seen) return;
    for (int64_t i = 0; i < n; i++) seen[(int64_t)v[i]] = 1;
    int missing = 0;
    char list[256] = "";
    for (int c = 0; c < k; c++) {
        if (seen[c]) continue;
        if (missing++ < 8) {
            const size_t u = strlen(list);
            snprintf(list + u, sizeof list - u, "%s%d", u ? ", " : "", c);
        }
    }
    free(seen);
    if (missing)
        printf("warning: %d of the %d classes ha%s no sample in %s (class%s %s%s): a mistyped label? --classes N sets "
               "the classes\n", missing, k, missing == 1 ? "s" : "ve", d->y[0] ? d->y : d->dir, missing == 1 ? "" : "es",
               list, missing > 8 ? ", ..." : "");
}

/* The built-in models need the image shape and the number of classes: for
 * the user's arrays they come from x's shape (N, H, W[, C]) and y's largest
 * class index, or --classes (classes_opt, 0: none). */
static int npy_builtin_shape(data_info *d, const fl_dataset *data, const char *model, long classes_opt, bool quiet) {
    const fl_tensor *x = data->x_train, *y = data->y_train;
    int nd = fl_tensor_ndim(x);
    if (nd == 2 && strcmp(model, "mlp") == 0) { /* a table: the mlp over (features, 1, 1) */
        int64_t s4[4] = {fl_tensor_dim(x, 0), fl_tensor_dim(x, 1), 1, 1};
        for (int t = 0; t < 2; t++) {
            fl_tensor *xt = t ? data->x_test : data->x_train;
            if (xt && (s4[0] = fl_tensor_dim(xt, 0), fl_tensor_reshape(xt, 4, s4) != FL_OK)) return die(NULL);
        }
        nd = 4;
    }
    if (nd != 3 && nd != 4) {
        char b[128];
        fprintf(stderr, "flynn: error: the built-in models take images (N, H, W) or (N, H, W, C)%s; %s has shape %s "
                "(give --model FILE for other inputs)\n", nd == 2 ? ", and --model mlp a table (N, features)" : "",
                d->x, fl_tensor_shape_str(x, b, sizeof b));
        return 1;
    }
    d->h = fl_tensor_dim(x, 1);
    d->w = fl_tensor_dim(x, 2);
    d->c = nd == 4 ? fl_tensor_dim(x, 3) : 1;
    for (int t = 0; t < 2 && nd == 3; t++) { /* (N, H, W) -> (N, H, W, 1), the built-in models' input */
        fl_tensor *xt = t ? data->x_test : data->x_train;
        int64_t s4[4] = {0, d->h, d->w, 1};
        if (xt && (s4[0] = fl_tensor_dim(xt, 0), fl_tensor_reshape(xt, 4, s4) != FL_OK)) return die(NULL);
    }
    if (fl_tensor_ndim(y) == 2 && fl_tensor_dim(y, 1) > 1 && fl_tensor_dtype(y) == FL_FLOAT32) {
        /* one-hot already (categorical labels): every row one 1 and 0s */
        const float *yv = fl_tensor_cdata(y);
        int64_t rows = fl_tensor_dim(y, 0), k = fl_tensor_dim(y, 1), good = 0;
        for (int64_t i = 0; i < rows; i++) {
            int64_t ones = 0, zeros = 0;
            for (int64_t j = 0; j < k; j++) { ones += yv[i * k + j] == 1.0f; zeros += yv[i * k + j] == 0.0f; }
            good += ones == 1 && zeros == k - 1;
        }
        if (good == rows) {
            d->classes = (int)k;
            if (classes_opt && classes_opt != k) {
                fprintf(stderr, "flynn: error: %s: y is one-hot over %lld classes; --classes %ld disagrees\n", d->dir,
                        (long long)k, classes_opt);
                return 1;
            }
            return 0;
        }
    }
    int64_t n = fl_tensor_size(y), top = -1;
    fl_tensor *f = fl_to_float(y, 1.0f);
    if (!f) return die(NULL);
    const float *v = fl_tensor_data(f);
    for (int64_t i = 0; i < n; i++) {
        if (!(v[i] >= 0) || v[i] != (float)(int64_t)v[i] || v[i] > 1e6f) {
            fprintf(stderr, "flynn: error: %s: y[%lld] = %g is not a class index (0, 1, 2, ...); the built-in models "
                    "are classifiers\n", d->dir, (long long)i, (double)v[i]);
            fl_tensor_free(f);
            return 1;
        }
        if (v[i] > top) top = (int64_t)v[i];
        if (classes_opt && v[i] >= (float)classes_opt) {
            fprintf(stderr, "flynn: error: %s: label y[%lld] is %g, expected an integer in [0, %ld) (--classes %ld)\n",
                    d->dir, (long long)i, (double)v[i], classes_opt, classes_opt);
            fl_tensor_free(f);
            return 1;
        }
    }
    d->classes = classes_opt ? (int)classes_opt : (int)(top < 1 ? 2 : top + 1);
    report_classes(d, v, n, top, classes_opt, quiet);
    fl_tensor_free(f);
    return 0;
}

static fl_status load_data(const data_info *d, long train, long test, fl_dataset *out) {
    if (strcmp(d->kind, "npy") == 0) return fl_load_npy_xy(d->x, d->y, out);
    if (strcmp(d->kind, "cifar10") == 0) return fl_load_cifar10(d->dir, train, test, out);
    if (strcmp(d->kind, "fortunes-lang") == 0) return fl_load_fortunes_lang(d->dir, (int)d->h, train, test, out);
    return fl_load_mnist(d->dir, train, test, out);
}

static int parse_verbose(const char *cmd, const char *v, fl_verbose *out) {
    if (!v || strcmp(v, "auto") == 0) *out = FL_VERBOSE_AUTO;
    else if (strcmp(v, "0") == 0) *out = FL_VERBOSE_SILENT;
    else if (strcmp(v, "1") == 0) *out = FL_VERBOSE_BAR;
    else if (strcmp(v, "2") == 0) *out = FL_VERBOSE_EPOCH;
    else return bad_usage(cmd, "--verbose wants auto, 0, 1 or 2, got", v);
    return 0;
}

static int choose_device(const char *cmd, fl_model *m, const char *dev, const char *precision, bool quiet) {
    if (precision && fl_set_matmul_precision(precision) != FL_OK)
        return bad_usage(cmd, "--precision wants high or highest, got", precision);
    fl_device_kind k;
    if (!dev || strcmp(dev, "auto") == 0) k = FL_DEVICE_AUTO;
    else if (strcmp(dev, "cpu") == 0) k = FL_DEVICE_CPU;
    else if (strcmp(dev, "gpu") == 0) k = FL_DEVICE_GPU;
    else if (strcmp(dev, "opencl") == 0) k = FL_DEVICE_OPENCL;
    else if (strncmp(dev, "opencl:", 7) == 0 && dev[7] >= '0' && dev[7] <= '9' && strspn(dev + 7, "0123456789") == strlen(dev + 7)) {
        k = FL_DEVICE_OPENCL; /* the device of that number in `flynn devices`' OpenCL list */
        setenv("FLYNN_OPENCL_DEVICE", dev + 7, 1);
    } else return bad_usage(cmd, "--device wants auto, cpu, gpu, opencl or opencl:N, got", dev);
    char why[1024];
    if (fl_model_set_device(m, k, why, sizeof why) != FL_OK) {
        fprintf(stderr, "flynn %s: --device %s: %s\n", cmd, dev, fl_last_error());
        return 1;
    }
    if (!quiet) printf("%s\n", why);
    return 0;
}

/* DIR/<layer>.<weight>.npy for layer l's weight k; a '/' in either name
 * (MultiHeadAttention's "query/kernel") becomes a '.', since it would name a
 * folder: multi_head_attention.query.kernel.npy. */
static void weight_file(char *path, size_t len, const char *dir, fl_layer *l, int k) {
    int at = snprintf(path, len, "%s/", dir);
    if (at < 0 || (size_t)at >= len) return;
    snprintf(path + at, len - (size_t)at, "%s.%s.npy", fl_layer_name(l), fl_layer_weight_name(l, k));
    for (char *c = path + at; *c; c++)
        if (*c == '/') *c = '.';
}

/* Saves every weight as DIR/<layer>.<weight>.npy (each file written
 * atomically). On failure, a folder this call made is removed again with
 * the files written into it; in a folder that existed, each file is either
 * its old or its new version. */
static int save_weights(fl_model *m, const char *dir) {
    bool made = mkdir(dir, 0777) == 0;
    if (!made && errno != EEXIST) {
        fprintf(stderr, "flynn: error: cannot save the weights: cannot create the folder %s: %s\n", dir, strerror(errno));
        return 1;
    }
    int written = 0, rc = 0;
    for (int i = 0; i < fl_model_num_layers(m) && rc == 0; i++) {
        fl_layer *l = fl_model_layer(m, i);
        for (int k = 0; k < fl_layer_num_weights(l) && rc == 0; k++) {
            char path[2048];
            weight_file(path, sizeof path, dir, l, k);
            if (fl_save_npy(fl_layer_weight(l, k), path) != FL_OK) rc = die("saving weights");
            else written++;
        }
    }
    if (rc == 0 || !made) return rc;
    for (int i = 0, n = 0; i < fl_model_num_layers(m) && n < written; i++) {
        fl_layer *l = fl_model_layer(m, i);
        for (int k = 0; k < fl_layer_num_weights(l) && n < written; k++, n++) {
            char path[2048];
            weight_file(path, sizeof path, dir, l, k);
            (void)unlink(path);
        }
    }
    if (rmdir(dir) == 0) fprintf(stderr, "flynn: removed the folder %s again (it was made for these weights)\n", dir);
    return rc;
}

static int load_weights(fl_model *m, const char *dir) {
    for (int i = 0; i < fl_model_num_layers(m); i++) {
        fl_layer *l = fl_model_layer(m, i);
        for (int k = 0; k < fl_layer_num_weights(l); k++) {
            char path[2048], a[128], b[128];
            weight_file(path, sizeof path, dir, l, k);
            fl_tensor *t = fl_load_npy(path);
            if (!t) return die("loading weights");
            fl_tensor *w = fl_layer_weight(l, k);
            bool same = fl_tensor_dtype(t) == FL_FLOAT32 && fl_tensor_ndim(t) == fl_tensor_ndim(w);
            for (int d = 0; same && d < fl_tensor_ndim(w); d++) same = fl_tensor_dim(t, d) == fl_tensor_dim(w, d);
            if (!same) {
                fprintf(stderr, "flynn: error: %s holds a %s tensor of shape %s, layer '%s' weight '%s' needs float32 %s\n",
                        path, fl_tensor_dtype(t) == FL_FLOAT32 ? "float32" : "non-float32",
                        fl_tensor_shape_str(t, a, sizeof a), fl_layer_name(l), fl_layer_weight_name(l, k),
                        fl_tensor_shape_str(w, b, sizeof b));
                fl_tensor_free(t);
                return 1;
            }
            fl_status st = fl_layer_set_weight(l, k, t);
            fl_tensor_free(t);
            if (st != FL_OK) return die("loading weights");
        }
    }
    return 0;
}

/* A seed for a model whose weights came from a file: dropout masks and
 * shuffling follow it, the weights stay. */
static fl_status set_seed_keep_weights(fl_model *m, uint64_t seed) {
    int nl = fl_model_num_layers(m), total = 0;
    for (int i = 0; i < nl; i++) total += fl_layer_num_weights(fl_model_layer(m, i));
    fl_tensor **keep = calloc((size_t)total + 1, sizeof *keep);
    if (!keep) return FL_ERR_NOMEM;
    fl_status s = FL_OK;
    int k = 0;
    for (int i = 0; i < nl && s == FL_OK; i++)
        for (int j = 0; j < fl_layer_num_weights(fl_model_layer(m, i)) && s == FL_OK; j++, k++)
            if (!(keep[k] = fl_tensor_clone(fl_layer_weight(fl_model_layer(m, i), j)))) s = fl_last_status();
    if (s == FL_OK) s = fl_model_set_seed(m, seed);
    k = 0;
    for (int i = 0; i < nl && s == FL_OK; i++)
        for (int j = 0; j < fl_layer_num_weights(fl_model_layer(m, i)) && s == FL_OK; j++, k++)
            s = fl_layer_set_weight(fl_model_layer(m, i), j, keep[k]);
    for (int i = 0; i < total; i++) fl_tensor_free(keep[i]);
    free(keep);
    return s;
}

/* A model file's input may be the images flattened (or reshaped): the data
 * follows the model when the sizes agree. */
static int fit_data_to_model(fl_model *m, fl_dataset *d) {
    int64_t shape[FL_MAX_DIMS];
    if (fl_model_num_inputs(m) != 1 || fl_model_num_outputs(m) != 1) {
        fprintf(stderr, "flynn: error: flynn train takes models with one input and one output; this one has %d and %d\n",
                fl_model_num_inputs(m), fl_model_num_outputs(m));
        return 1;
    }
    int nd = fl_model_input_shape(m, 0, shape);
    int64_t want = 1, have = 1;
    bool dynamic = false;
    for (int i = 0; i < nd; i++) want *= shape[i];
    for (int i = 0; i < nd; i++) dynamic |= shape[i] == FL_DYNAMIC;
    for (int i = 1; i < fl_tensor_ndim(d->x_train); i++) have *= fl_tensor_dim(d->x_train, i);
    bool same = nd == fl_tensor_ndim(d->x_train) - 1;
    for (int i = 0; same && i < nd; i++) /* a None axis takes the data's length */
        same = shape[i] == FL_DYNAMIC || shape[i] == fl_tensor_dim(d->x_train, i + 1);
    if (same) return 0;
    char a[128], b[128];
    int64_t ms[FL_MAX_DIMS];
    ms[0] = -1;
    for (int i = 0; i < nd; i++) ms[i + 1] = shape[i];
    snprintf(a, sizeof a, "(");
    for (int i = 0; i < nd; i++)
        if (shape[i] == FL_DYNAMIC) snprintf(a + strlen(a), sizeof a - strlen(a), "%sNone", i ? ", " : "");
        else snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", i ? ", " : "", (long long)shape[i]);
    snprintf(a + strlen(a), sizeof a - strlen(a), ")");
    fl_tensor_shape_str(d->x_train, b, sizeof b);
    if (want != have || dynamic) { /* a None axis: the data's rank must be the model's */
        fprintf(stderr, "flynn: error: the model takes samples of shape %s, the data set's are %s (without the batch)\n",
                a, strchr(b, ',') ? strchr(b, ',') + 2 : b);
        return 1;
    }
    for (int t = 0; t < 2; t++) {
        fl_tensor *x = t == 0 ? d->x_train : d->x_test;
        if (!x) continue;
        ms[0] = fl_tensor_dim(x, 0);
        if (fl_tensor_reshape(x, nd + 1, ms) != FL_OK) return die(NULL);
    }
    return 0;
}

/* After training: the test set's accuracy and loss, or for the user's arrays
 * (no test set) the last epoch's figures. */
static int report_results(fl_model *m, const fl_history *h, const fl_dataset *data, const flynn_multi *mi) {
    int nres = fl_history_num_keys(h);
    if (!data->x_test) {
        printf("final epoch:");
        for (int k = 0; k < nres; k++) {
            const float *v = fl_history_get(h, fl_history_key(h, k));
            printf("%s %s: %.4f", k ? " -" : "", fl_history_key(h, k), v ? (double)v[fl_history_epochs(h) - 1] : 0.0);
        }
        printf("\n");
        return 0;
    }
    float res[1 + 4];
    const fl_tensor *xt[FLYNN_MAX_INPUTS] = {data->x_test};
    int nx = mi->nx > 1 ? mi->nx : 1;
    for (int i = 1; i < nx; i++) xt[i] = mi->x_test[i];
    fl_eval_args ea = {.batch_size = 256, .verbose = FL_VERBOSE_SILENT};
    if ((nx > 1 ? fl_evaluate_multi_(m, xt, nx, data->y_test, res, 5, ea) : fl_evaluate_(m, xt[0], data->y_test, res, 5, ea)) != FL_OK)
        return die("evaluating");
    /* History keys: loss, the metrics, then val_*: the metrics are keys 1.. before any val_ */
    int acc = -1;
    for (int k = 1; k < nres && k < 5; k++) {
        const char *key = fl_history_key(h, k);
        if (strncmp(key, "val_", 4) == 0) break;
        if (acc < 0 && strstr(key, "accuracy")) acc = k;
    }
    if (acc > 0)
        printf("test accuracy: %.4f - test loss: %.4f (%lld test %s)\n", res[acc], res[0],
               (long long)fl_tensor_dim(data->x_test, 0), fl_tensor_ndim(data->x_test) >= 3 ? "images" : "samples");
    else
        printf("test loss: %.4f (%lld test %s)\n", res[0], (long long)fl_tensor_dim(data->x_test, 0),
               fl_tensor_ndim(data->x_test) >= 3 ? "images" : "samples");
    return 0;
}

/* The memory budget in bytes: --memory-budget, else half of the physical memory. */
static double memory_budget(const opts *o) {
    if (o->memory_budget > 0) return (double)o->memory_budget * 1048576.0;
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    return pages > 0 && psize > 0 ? 0.5 * (double)pages * (double)psize : 4.0 * 1073741824.0;
}

/* The user's data for train: arrays in memory (data), or a stream (*st) when asked for (--stream,
 * --prefetch, --workers, --augment) or when X.npy,Y.npy or DIR would take more than the memory budget
 * decoded (said in one line). m: a model file's model (image size), or NULL. */
static int own_train_data(const opts *o, const fl_model *m, fl_dataset *data, fl_data_stream **st, char *desc,
                          size_t dn, bool quiet) {
    const char *kind = flynn_own_kind(o->data);
    bool asked = o->stream || o->augment || o->prefetch >= 0 || o->workers > 0;
    bool can = strcmp(kind, "npy") == 0 || strcmp(kind, "images") == 0;
    *st = NULL;
    if (asked || can) {
        int r = flynn_own_stream("train", o->data, &o->own, m, o->seed, st, desc, dn);
        if (r) return r;
        int64_t xs[FL_MAX_DIMS], row = 1;
        for (int i = 0, nd = fl_data_stream_x_shape(*st, xs); i < nd; i++) row *= xs[i];
        const double bytes = (double)fl_data_stream_size(*st) * (double)row * 4.0, budget = memory_budget(o);
        if (!asked && bytes <= budget) {
            fl_data_stream_free(*st);
            *st = NULL;
        } else if (!asked && !quiet) {
            printf("data: %lld samples would take %.1f GiB decoded, more than the memory budget of %.1f GiB (%s): "
                   "streaming them from disk batch by batch (--stream)\n", (long long)fl_data_stream_size(*st),
                   bytes / 1073741824.0, budget / 1073741824.0,
                   o->memory_budget ? "--memory-budget" : "half of this machine's memory; --memory-budget");
        }
    }
    return *st ? 0 : flynn_own_load("train", o->data, &o->own, m, o->seed, data, desc, dn);
}

/* npy_builtin_shape for a stream: the image shape from the samples ((H, W) read as (H, W, 1); a table as
 * (features, 1, 1) for mlp), the classes from the labels (image folders: the class folders). */
static int stream_builtin_shape(data_info *d, fl_data_stream **st, const char *model, long classes_opt, bool quiet) {
    int64_t xs[FL_MAX_DIMS], ys[FL_MAX_DIMS];
    int nd = fl_data_stream_x_shape(*st, xs);
    if (nd == 1 && strcmp(model, "mlp") == 0) { xs[1] = xs[2] = 1; nd = 3; }
    else if (nd == 2) { xs[2] = 1; nd = 3; }
    if (nd != 3) {
        fprintf(stderr, "flynn: error: the built-in models take images (N, H, W) or (N, H, W, C)%s; %s has samples of "
                "%d dimensions (give --model FILE for other inputs)\n", nd == 1 ? ", and --model mlp a table (N, features)" : "",
                d->x, nd);
        return 1;
    }
    fl_data_stream *t = fl_data_stream_reshape(*st, 3, xs);
    if (!t) return die(NULL);
    *st = t;
    d->h = xs[0];
    d->w = xs[1];
    d->c = xs[2];
    int k = fl_data_stream_num_classes(t), ynd = fl_data_stream_y_shape(t, ys);
    if (k == 0 && ynd == 1 && ys[0] > 1) k = (int)ys[0]; /* one-hot labels */
    if (k == 0) {
        fprintf(stderr, "flynn: error: %s: y holds no class indices (0, 1, 2, ...) or one-hot rows; the built-in models "
                "are classifiers\n", d->y);
        return 1;
    }
    if (classes_opt && classes_opt < k) {
        fprintf(stderr, "flynn: error: %s: the labels have %d classes; --classes %ld is fewer\n", d->y[0] ? d->y : d->dir, k,
                classes_opt);
        return 1;
    }
    d->classes = classes_opt ? (int)classes_opt : k < 2 ? 2 : k;
    if (!quiet) printf("classes: %d (%s)\n", d->classes, classes_opt ? "--classes" : "the labels' classes; --classes N to set");
    return 0;
}

/* fit_data_to_model for a stream: samples of another shape with as many values are reshaped. */
static int stream_fit_model(fl_model *m, fl_data_stream **st) {
    int64_t ms[FL_MAX_DIMS], xs[FL_MAX_DIMS];
    if (fl_model_num_inputs(m) != 1 || fl_model_num_outputs(m) != 1) {
        fprintf(stderr, "flynn: error: flynn train takes models with one input and one output; this one has %d and %d\n",
                fl_model_num_inputs(m), fl_model_num_outputs(m));
        return 1;
    }
    int nd = fl_model_input_shape(m, 0, ms), sd = fl_data_stream_x_shape(*st, xs);
    bool same = nd == sd;
    for (int i = 0; same && i < nd; i++) same = ms[i] == xs[i];
    if (same) return 0;
    fl_data_stream *t = fl_data_stream_reshape(*st, nd, ms);
    if (!t) {
        fprintf(stderr, "flynn: error: the model's input does not fit the data: %s\n", fl_last_error());
        return 1;
    }
    *st = t;
    return 0;
}

/* Under mpirun, once (rank 0 alone prints): that the ranks train one model together, how many, who started
 * them, the global batch and each rank's share, and what sums the gradients, as Horovod and DDP say it
 * (issue 43: the device line read "CPU (1 threads), as requested" and nothing told two cooperating ranks
 * from two copies). */
static void say_data_parallel(const fl_model *m, int batch) {
    const int n = fl_dist_size();
    if (n <= 1) return;
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int lo = batch / n, hi = lo + (batch % n ? 1 : 0);
    char share[64];
    if (lo == hi) snprintf(share, sizeof share, "%d samples a rank", lo);
    else snprintf(share, sizeof share, "%d or %d samples a rank", hi, lo);
    const bool gpu = fl_model_device(m) == FL_DEVICE_GPU;
    printf("data-parallel: %d ranks started by %s%s%s%s, training one model: global batch %d, %s per step; the "
           "gradients are summed %s while backward runs (docs/scale-out.md)\n", n,
           getenv("OMPI_COMM_WORLD_SIZE") ? "Open MPI's mpirun" : "an MPI launcher", local ? " (" : "",
           local ? local : "", local ? " on this host)" : "", batch, share,
           gpu ? "over NCCL, one GPU a rank (a rank takes its host's device OMPI_COMM_WORLD_LOCAL_RANK, or "
                 "FLYNN_CUDA_DEVICE)"
               : "over MPI");
}

/* --plot OUT.svg: the History's curves (plot.c), titled with what was trained. */
static int write_plot(const fl_history *h, int initial_epoch, const char *model, const char *data, const char *path,
                      bool verbose) {
    flynn_plot_data pd;
    char title[512];
    snprintf(title, sizeof title, "flynn train: %s on %s", model, data);
    if (flynn_plot_from_history(h, initial_epoch, &pd) != FL_OK) return die(NULL);
    fl_status s = flynn_plot_write_svg(&pd, title, path);
    flynn_plot_free(&pd);
    if (s != FL_OK) return die("--plot");
    if (verbose) printf("training curves drawn to %s\n", path);
    return 0;
}

/* *t cut to its first n rows, in place (NULL stays NULL); 1 having said why (what) */
static int keep_first(fl_tensor **t, int64_t n, const char *what) {
    if (!*t) return 0;
    fl_tensor *c = fl_tensor_slice(*t, 0, n);
    if (!c) return die(what);
    fl_tensor_free(*t);
    *t = c;
    return 0;
}

/* The first n rows of x, y and the other inputs more[1..nmore) (input 0 is x: fit_data.c) */
static int keep_first_rows(fl_tensor **x, fl_tensor **y, fl_tensor **more, int nmore, int64_t n, const char *what) {
    if (keep_first(x, n, what) || keep_first(y, n, what)) return 1;
    for (int i = 1; i < nmore; i++)
        if (keep_first(&more[i], n, what)) return 1;
    if (nmore > 0) more[0] = *x;
    return 0;
}

/* --samples N and --test-samples N on the user's own data: the first N samples (an image folder's in its
 * shuffled order, as Keras's dataset.take(N)), of every input and the labels; a stream takes its first N.
 * Refused where there is nothing to cut (--test-samples without a test set). Sets *n_before to the training
 * samples before (for --sample-weight) and appends what was taken to desc. Returns 0, or 1/2 with the message
 * printed. (issue 43: --samples 200 trained all 2,000 images of a folder, without a word) */
static int take_own_samples(const opts *o, fl_dataset *data, flynn_multi *mi, fl_data_stream **st, int64_t *n_before,
                            char *desc, size_t dn) {
    *n_before = *st ? fl_data_stream_size(*st) : data->x_train ? fl_tensor_dim(data->x_train, 0) : 0;
    if (o->test_samples_given && o->test_samples > 0 && !data->x_test)
        return bad_usage("train", "--test-samples cuts the test set of the data; this --data has none (give --data "
                         "with a test set, or --validation-split):", o->data);
    if (o->samples_given && o->samples > 0 && o->samples < *n_before) {
        const int64_t n = o->samples;
        if (*st) {
            fl_data_stream *t = fl_data_stream_take(*st, 0, n); /* (a view that keeps what it reads) */
            if (!t) return die("--samples");
            fl_data_stream_free(*st);
            *st = t;
        } else if (keep_first_rows(&data->x_train, &data->y_train, mi->x, mi->nx, n, "--samples")) {
            return 1;
        }
        const size_t u = strlen(desc);
        snprintf(desc + u, dn - u, "; --samples: the first %lld of %lld", (long long)n, (long long)*n_before);
    }
    if (o->test_samples_given && o->test_samples > 0 && data->x_test && o->test_samples < fl_tensor_dim(data->x_test, 0)) {
        const int64_t n = o->test_samples, was = fl_tensor_dim(data->x_test, 0);
        if (keep_first_rows(&data->x_test, &data->y_test, mi->x_test, mi->nx, n, "--test-samples")) return 1;
        const size_t u = strlen(desc);
        snprintf(desc + u, dn - u, "; --test-samples: the first %lld of %lld test samples", (long long)n, (long long)was);
    }
    return 0;
}

/* flynn train, in named steps over one train_run (issue 45: cmd_train was 231 lines): train_setup parses and
 * joins MPI; train_load reads the data and makes or loads the model; train_prepare seeds, compiles and fits
 * the data, labels, weights, augmentation, resumption and callbacks to it; train_fit trains; train_report
 * prints and saves; train_free frees whatever was made. Each returns 0 or the exit code, having said why. */
typedef struct train_run {
    opts o;
    data_info d;
    fl_verbose verbose;
    bool quiet, own, prepared;
    const char *file, *mname;   /* a model file (--model FILE or --resume FILE), and what trains */
    fl_model *m;
    fl_dataset data;
    fl_data_stream *st;         /* the data as a stream (own_train_data), else in data */
    flynn_multi mi;
    int64_t n_before;           /* the training samples before --samples */
    char own_desc[1200];
    fl_augment_args aug;
    fl_history *h;
    fl_checkpoint *ck;
    fl_tensor *sw;
    float cw[FLYNN_MAX_CLASS_WEIGHTS];
    int ncw, initial;
    flynn_cbs cbs;
} train_run;

static int train_setup(train_run *t, int argc, char **argv) {
    opts *o = &t->o;
    *o = (opts){.model = "mnist_cnn", .data = "fashion-mnist", .samples = 20000, .epochs = 2, .batch_size = 128,
                .prefetch = -1};
    const char *default_model = o->model;
    int r = parse("train", argc, argv, o);
    if (r == -1) { usage_train(stdout); return -1; }
    if (r) return r;
    if ((r = parse_data("train", o->data, &t->d))) return r;
    if (t->d.vocab && o->model == default_model) o->model = "lstm_text"; /* text data: the text model */
    if ((r = parse_verbose("train", o->verbose, &t->verbose))) return r;
    t->quiet = t->verbose == FL_VERBOSE_SILENT;
    if (o->threads) fl_set_num_threads(o->threads);
    /* under mpirun (docs/scale-out.md): every rank trains, rank 0 alone prints and writes files */
    if (fl_dist_init() != FL_OK) return die("MPI");
    if (fl_dist_rank() > 0) {
        if (!freopen("/dev/null", "w", stdout)) return die("MPI: rank > 0: /dev/null");
        o->save = o->save_weights = o->checkpoint = NULL;
        o->cb.csv_log = o->cb.tensorboard = o->cb.plot = NULL;
    }
    if (o->resume && flynn_is_model_file(o->model) && strcmp(o->model, "mnist_cnn") != 0)
        return bad_usage("train", "give --model FILE or --resume FILE, not both", NULL);
    t->file = o->resume ? o->resume : flynn_is_model_file(o->model) ? o->model : NULL;
    t->mname = t->file ? t->file : o->model;
    t->own = flynn_own_kind(o->data) != NULL;
    if ((r = flynn_own_check_opts("train", t->own ? t->d.kind : NULL, &o->own))) return r;
    if (o->augment && (r = flynn_parse_augment("train", o->augment, &t->aug))) return r;
    t->aug.seed = o->seed;
    if (!t->own && (o->stream || o->augment || o->prefetch >= 0 || o->workers > 0))
        return bad_usage("train", "--stream, --prefetch, --workers and --augment read your own data (--data DIR or "
                         "X.npy,Y.npy); this --data is", o->data);
    return 0;
}

/* A model file and the user's data for it: its inputs decide how the data is read. */
static int train_load_file(train_run *t) {
    const opts *o = &t->o;
    int r = 0;
    if (!(t->m = flynn_load_model_file("train", t->file, NULL, true))) return die(NULL);
    const int nin = fl_model_num_inputs(t->m);
    if (t->own && nin > 1 && strcmp(t->d.kind, "npz") != 0) {
        fprintf(stderr, "flynn train: error: %s has %d inputs: give --data FILE.npz with one array per input, "
                "named as the inputs, and y\n", t->file, nin);
        return 1;
    }
    if (t->own && nin > 1 && (o->stream || o->augment)) {
        fprintf(stderr, "flynn train: error: %s has %d inputs; --stream and --augment read models with one input\n",
                t->file, nin);
        return 1;
    }
    if (t->own && nin > 1) r = flynn_multi_load("train", o->data, t->m, &t->mi, &t->data, t->own_desc, sizeof t->own_desc);
    else if (t->own) r = own_train_data(o, t->m, &t->data, &t->st, t->own_desc, sizeof t->own_desc, t->quiet);
    if (t->own && !r) r = take_own_samples(o, &t->data, &t->mi, &t->st, &t->n_before, t->own_desc, sizeof t->own_desc);
    if (r) return r;
    if (o->resume && !fl_model_optimizer(t->m)) {
        fprintf(stderr, "flynn: error: --resume %s: the file has no training configuration (it was saved "
                "uncompiled); start from its weights with --model %s\n", t->file, t->file);
        return 1;
    }
    return 0;
}

static int train_load(train_run *t) {
    const opts *o = &t->o;
    int r;
    if (t->own && !t->file) { /* a built-in model, made for the user's data */
        if ((r = own_train_data(o, NULL, &t->data, &t->st, t->own_desc, sizeof t->own_desc, t->quiet))) return r;
        if ((r = take_own_samples(o, &t->data, &t->mi, &t->st, &t->n_before, t->own_desc, sizeof t->own_desc)))
            return r;
        if ((r = t->st ? stream_builtin_shape(&t->d, &t->st, o->model, o->classes, t->quiet)
                       : npy_builtin_shape(&t->d, &t->data, o->model, o->classes, t->quiet)))
            return r;
    }
    if (t->file && (r = train_load_file(t))) return r;
    if (!t->file && !(t->m = builtin_model(o->model, &t->d))) return die(NULL);
    if ((r = choose_device("train", t->m, o->device, o->precision, t->quiet))) return r;
    if (!t->quiet) say_data_parallel(t->m, o->batch_size);
    if (!t->own && load_data(&t->d, o->samples, o->test_samples, &t->data) != FL_OK) return die(NULL);
    if (t->quiet) return 0;
    if (t->st) {
        printf("data: %s: %lld samples, no test set\n", t->own_desc, (long long)fl_data_stream_size(t->st));
    } else if (t->own) {
        printf("data: %s: %lld samples, %s\n", t->own_desc, (long long)fl_tensor_dim(t->data.x_train, 0),
               t->data.x_test ? "and a test set" : "no test set");
    } else {
        printf("data: %s from %s: %lld training and %lld test %s\n", t->d.kind, t->d.dir,
               (long long)fl_tensor_dim(t->data.x_train, 0), (long long)fl_tensor_dim(t->data.x_test, 0),
               t->d.vocab ? "sequences" : "images");
    }
    return 0;
}

/* --resume: the epoch to number from, where the optimizer's steps are whole epochs */
static void train_resume_epoch(train_run *t) {
    const opts *o = &t->o;
    int64_t ntrain = t->st ? fl_data_stream_size(t->st) : fl_tensor_dim(t->data.x_train, 0);
    ntrain = o->validation_split > 0 ? (int64_t)ceil((double)ntrain * (1.0 - o->validation_split)) : ntrain;
    int64_t steps = (ntrain + o->batch_size - 1) / o->batch_size, it = fl_optimizer_iterations(fl_model_optimizer(t->m));
    if (steps > 0 && it % steps == 0) t->initial = (int)(it / steps);
    else if (!t->quiet)
        printf("note: %lld optimizer steps is not a whole number of %lld-step epochs: epochs are numbered from 1\n",
               (long long)it, (long long)steps);
    if (!t->quiet) printf("resuming %s after %lld optimizer steps (epoch %d)\n", t->file, (long long)it, t->initial);
}

static int train_prepare(train_run *t) {
    const opts *o = &t->o;
    fl_model *m = t->m;
    int rc;
    t->prepared = true;
    if (!t->file) fl_model_set_seed(m, o->seed);
    else if (set_seed_keep_weights(m, o->seed) != FL_OK) return die(NULL);
    if (t->file && t->mi.nx <= 1 && (rc = t->st ? stream_fit_model(m, &t->st) : fit_data_to_model(m, &t->data)))
        return rc;
    if (!fl_model_optimizer(m) &&
        fl_compile(m, fl_adam(.learning_rate = 1e-3f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY) != FL_OK)
        return die(NULL);
    if (!t->quiet) {
        fl_model_summary(m, stdout);
        if (t->file) flynn_print_compile_info(m, stdout);
    }
    if ((rc = t->st ? flynn_stream_fit_labels("train", m, &t->st, t->quiet)
                    : flynn_fit_labels("train", m, &t->data, t->d.dir, t->quiet)))
        return rc;
    if (t->st && (o->class_weight || o->sample_weight)) {
        fprintf(stderr, "flynn train: error: --class-weight and --sample-weight weigh data held in memory; this run "
                "streams %s from disk (--stream, or beyond --memory-budget)\n", o->data);
        return 1;
    }
    if (!t->st && (rc = flynn_fit_weights("train", o->class_weight, o->sample_weight, t->data.y_train, t->cw, &t->ncw,
                                          &t->sw, t->quiet)))
        return rc;
    if (t->sw && t->own && fl_tensor_dim(t->sw, 0) == t->n_before && t->n_before > fl_tensor_dim(t->data.y_train, 0)) {
        fl_tensor *s = fl_tensor_slice(t->sw, 0, fl_tensor_dim(t->data.y_train, 0)); /* the samples --samples kept */
        if (!s) return die("--sample-weight");
        fl_tensor_free(t->sw);
        t->sw = s;
    }
    if (t->st && o->augment) {
        fl_data_stream *s = fl_data_stream_augment_(t->st, t->aug);
        if (!s) return die("--augment");
        t->st = s;
        if (!t->quiet)
            printf("augment: while training, on the reading threads:%s%s (seed %llu)\n",
                   t->aug.flip_horizontal ? " random horizontal flip (RandomFlip(\"horizontal\"))" : "",
                   t->aug.translate_height > 0 || t->aug.translate_width > 0 ? " random translation (RandomTranslation)"
                                                                             : "",
                   o->seed);
    }
    if (o->resume) train_resume_epoch(t);
    if (o->checkpoint) {
        const char *mon = o->validation_split > 0 ? "val_loss" : "loss";
        if (o->validation_split <= 0 && !t->quiet)
            printf("note: no --validation-split: --checkpoint keeps the model with the best training loss\n");
        t->ck = fl_model_checkpoint(o->checkpoint, .monitor = mon, .save_best_only = true, .verbose = !t->quiet);
        if (!t->ck) return die("--checkpoint");
    }
    if (flynn_cb_setup(m, &t->o.cb, o->validation_split > 0, !t->quiet, &t->cbs) != FL_OK) return die(NULL);
    return 0;
}

static int train_fit(train_run *t) {
    const opts *o = &t->o;
    fl_fit_args fa = {.batch_size = o->batch_size, .epochs = t->initial + o->epochs, .initial_epoch = t->initial,
                      .validation_split = o->validation_split, .verbose = t->verbose,
                      .on_epoch_end = t->ck ? fl_checkpoint_on_epoch_end : NULL, .user = t->ck,
                      .no_nan_check = o->no_nan_check, .callbacks = t->cbs.list, .sample_weight = t->sw,
                      .class_weight = t->ncw ? t->cw : NULL, .num_class_weights = t->ncw};
    if (t->st) {
        fa.prefetch = o->prefetch < 0 ? 0 : o->prefetch == 0 ? -1 : o->prefetch;
        fa.workers = o->workers;
        t->h = fl_fit_stream_(t->m, t->st, fa);
    } else if (t->mi.nx > 1) {
        const fl_tensor *xs[FLYNN_MAX_INPUTS] = {t->data.x_train};
        for (int i = 1; i < t->mi.nx; i++) xs[i] = t->mi.x[i];
        t->h = fl_fit_multi_(t->m, xs, t->mi.nx, t->data.y_train, fa);
    } else {
        t->h = fl_fit_(t->m, t->data.x_train, t->data.y_train, fa);
    }
    if (!t->h) return die("training");
    if (t->ck && fl_checkpoint_status(t->ck) != FL_OK) {
        fprintf(stderr, "flynn: error: %s\n", fl_checkpoint_error(t->ck));
        return 1;
    }
    return 0;
}

static int train_report(train_run *t) {
    const opts *o = &t->o;
    const fl_model *m = t->m;
    const fl_history *h = t->h;
    int rc;
    if ((rc = report_results(t->m, t->h, &t->data, &t->mi))) return rc;
    if (o->cb.plot && (rc = write_plot(h, t->initial, t->mname, o->data, o->cb.plot, !t->quiet))) return rc;
    char where[96];
    if (fl_model_device(m) == FL_DEVICE_GPU) snprintf(where, sizeof where, "on the GPU");
    else if (fl_model_device(m) == FL_DEVICE_OPENCL) snprintf(where, sizeof where, "on the OpenCL device");
    else snprintf(where, sizeof where, "on the CPU, %d threads", fl_get_num_threads());
    if (fl_dist_size() > 1) /* fit counts every rank's samples: the figure is the global one */
        snprintf(where + strlen(where), sizeof where - strlen(where), "%s, %d ranks together",
                 fl_model_device(m) == FL_DEVICE_GPU ? ", one a rank" : " a rank", fl_dist_size());
    printf("training throughput: %.0f samples/s (%s %s, %sbatch %d, %d epoch%s in %.1fs)\n",
           fl_history_samples_per_second(h), t->mname, where, fl_dist_size() > 1 ? "global " : "", o->batch_size,
           fl_history_epochs(h), fl_history_epochs(h) == 1 ? "" : "s", fl_history_seconds(h));
    if (t->st) {
        const double w = fl_history_data_seconds(h), step = fl_history_step_seconds(h);
        printf("input pipeline: each step waited %.2f ms for its batch (%.0f%% of a %.1f ms step; prefetch %d, %d "
               "worker%s)%s\n", w * 1e3, step > 0 ? 100.0 * w / step : 0.0, step * 1e3,
               o->prefetch < 0 ? 2 : o->prefetch, o->workers > 0 ? o->workers : 1, o->workers > 1 ? "s" : "",
               step > 0 && w > 0.1 * step ? ": the data is the bottleneck (more --workers or --prefetch?)" : "");
    }
    if (t->ck && fl_checkpoint_saves(t->ck) > 0)
        printf("best model (%s %.4f) saved to %s\n", o->validation_split > 0 ? "val_loss" : "loss",
               fl_checkpoint_best(t->ck), fl_checkpoint_last_path(t->ck));
    if (o->save_weights && (rc = save_weights(t->m, o->save_weights)) != 0) return rc;
    if (o->save_weights) printf("weights saved to %s\n", o->save_weights);
    if (o->save) {
        if (fl_save_model(t->m, o->save) != FL_OK) return die(NULL);
        printf("model saved to %s\n", o->save);
    }
    return 0;
}

static void train_free(train_run *t, int rc) {
    if (t->prepared) flynn_cb_report(&t->cbs, &t->o.cb, rc == 0 && !t->quiet);
    flynn_cb_free(&t->cbs);
    fl_checkpoint_free(t->ck);
    fl_history_free(t->h);
    fl_tensor_free(t->sw);
    flynn_multi_free(&t->mi);
    fl_dataset_free(&t->data);
    fl_data_stream_free(t->st);
    fl_model_free(t->m);
    free(t);
}

static int cmd_train(int argc, char **argv) {
    train_run *t = calloc(1, sizeof *t);
    if (!t) return die("out of memory");
    int rc = train_setup(t, argc, argv);
    if (rc == -1) rc = 0; /* --help */
    else if (rc == 0 && (rc = train_load(t)) == 0 && (rc = train_prepare(t)) == 0 && (rc = train_fit(t)) == 0)
        rc = train_report(t);
    train_free(t, rc);
    return rc;
}

static int cmd_evaluate(int argc, char **argv) {
    opts o = {.model = "mnist_cnn", .data = "fashion-mnist", .batch_size = 256};
    int r = parse("evaluate", argc, argv, &o);
    if (r == -1) { usage_evaluate(stdout); return 0; }
    if (r) return r;
    const bool file = flynn_is_model_file(o.model) && strcmp(o.model, "mnist_cnn") != 0 && strcmp(o.model, "mlp") != 0;
    if (!o.weights && !file) return bad_usage("evaluate", "--weights DIR (or --model FILE) is required", NULL);
    data_info d;
    if ((r = parse_data("evaluate", o.data, &d))) return r;
    const bool own = flynn_own_kind(o.data) != NULL;
    if ((r = flynn_own_check_opts("evaluate", own ? d.kind : NULL, &o.own))) return r;
    fl_verbose verbose;
    if ((r = parse_verbose("evaluate", o.verbose, &verbose))) return r;
    if (o.threads) fl_set_num_threads(o.threads);
    fl_dataset data = {0};
    flynn_multi mi = {0};
    char own_desc[1200] = "";
    fl_model *m = NULL;
    if (file) {
        if (!(m = flynn_load_model_file("evaluate", o.model, o.weights, true))) return die(NULL);
        if (own && fl_model_num_inputs(m) > 1 && strcmp(d.kind, "npz") != 0) {
            fprintf(stderr, "flynn evaluate: error: %s has %d inputs: give --data FILE.npz with one array per input, "
                    "named as the inputs, and y\n", o.model, fl_model_num_inputs(m));
            fl_model_free(m);
            return 1;
        }
        if (own && fl_model_num_inputs(m) > 1) r = flynn_multi_load("evaluate", o.data, m, &mi, &data, own_desc, sizeof own_desc);
        else if (own) r = flynn_own_load("evaluate", o.data, &o.own, m, o.seed, &data, own_desc, sizeof own_desc);
        if (own && r) {
            fl_model_free(m);
            return r;
        }
    } else {
        if (own && (r = flynn_own_load("evaluate", o.data, &o.own, NULL, o.seed, &data, own_desc, sizeof own_desc)))
            return r;
        if (own && (r = npy_builtin_shape(&d, &data, o.model, o.classes, true))) { fl_dataset_free(&data); return r; }
        if (!(m = builtin_model(o.model, &d))) { fl_dataset_free(&data); return die(NULL); }
    }
    if ((r = choose_device("evaluate", m, o.device, o.precision, verbose == FL_VERBOSE_SILENT)) ||
        (!file && (r = load_weights(m, o.weights)))) {
        fl_model_free(m);
        fl_dataset_free(&data);
        return r;
    }
    if (!own && load_data(&d, 1, o.test_samples, &data) != FL_OK) { fl_model_free(m); return die(NULL); }
    /* own data: its test set when it has one, else all of it */
    fl_tensor *ex = data.x_test ? data.x_test : data.x_train, *ey = data.x_test ? data.y_test : data.y_train;
    int rc = 0;
    float res[16];
    fl_tensor *sw = NULL;
    if (!fl_model_optimizer(m) && fl_compile(m, fl_adam(), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY) != FL_OK) {
        rc = die(NULL);
        goto done;
    }
    if (own && verbose != FL_VERBOSE_SILENT)
        printf("data: %s: evaluating on %s (%lld samples)\n", own_desc, data.x_test ? "its test set" : "all of it",
               (long long)fl_tensor_dim(ex, 0));
    if (file && mi.nx <= 1 && (rc = fit_data_to_model(m, &data))) goto done;
    if ((rc = flynn_fit_labels("evaluate", m, &data, d.dir, verbose == FL_VERBOSE_SILENT))) goto done;
    ex = data.x_test ? data.x_test : data.x_train;
    ey = data.x_test ? data.y_test : data.y_train;
    if ((rc = flynn_fit_weights("evaluate", NULL, o.sample_weight, ey, NULL, &(int){0}, &sw, verbose == FL_VERBOSE_SILENT)))
        goto done;
    for (int i = 0; i < 16; i++) res[i] = NAN;
    const fl_tensor *exs[FLYNN_MAX_INPUTS] = {ex};
    for (int i = 1; i < mi.nx; i++) exs[i] = data.x_test ? mi.x_test[i] : mi.x[i];
    fl_eval_args ea = {.batch_size = o.batch_size, .verbose = verbose, .sample_weight = sw};
    if ((mi.nx > 1 ? fl_evaluate_multi_(m, exs, mi.nx, ey, res, 16, ea) : fl_evaluate_(m, ex, ey, res, 16, ea)) != FL_OK) {
        rc = die(NULL);
    } else if (!file) {
        printf("test accuracy: %.4f - test loss: %.4f (%lld test %s)\n", res[1], res[0], (long long)fl_tensor_dim(ex, 0),
               own ? "samples" : "images");
    } else {
        printf("loss: %.4f", res[0]);
        const char *name;
        for (int i = 1; i < 16 && !isnan(res[i]) && (name = fl_model_metric_name(m, i - 1)); i++)
            printf(" - %s: %.4f", name, res[i]);
        printf(" (%lld samples)\n", (long long)fl_tensor_dim(ex, 0));
    }
done:
    fl_tensor_free(sw);
    flynn_multi_free(&mi);
    fl_dataset_free(&data);
    fl_model_free(m);
    return rc;
}

static int cmd_summary(int argc, char **argv) {
    if (argc > 0 && strncmp(argv[0], "--", 2) != 0) return flynn_cmd_summary_file(argc, argv);
    for (int i = 0; i + 1 < argc; i++)
        if (strcmp(argv[i], "--model") == 0 && flynn_is_model_file(argv[i + 1])) return flynn_cmd_summary_file(argc, argv);
    opts o = {.model = "mnist_cnn", .data = "fashion-mnist"};
    int r = parse("summary", argc, argv, &o);
    if (r == -1) { usage_summary(stdout); return 0; }
    if (r) return r;
    data_info d;
    if ((r = parse_data("summary", o.data, &d))) return r;
    fl_model *m = builtin_model(o.model, &d);
    if (!m) return die(NULL);
    fl_model_summary(m, stdout);
    fl_model_free(m);
    return 0;
}


int main(int argc, char **argv) {
    flynn_omp_setup(argv);
    if (argc < 2) { usage_main(stderr); return 2; }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) { usage_main(stdout); return 0; }
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) { printf("flynn %s\n", fl_version()); return 0; }
    if (strcmp(cmd, "train") == 0) {
        int rc = cmd_train(argc - 2, argv + 2);
        fl_dist_end(rc); /* under MPI: a failed rank stops the others (MPI_Abort), not a hang */
        return rc;
    }
    if (strcmp(cmd, "evaluate") == 0) return cmd_evaluate(argc - 2, argv + 2);
    if (strcmp(cmd, "summary") == 0) return cmd_summary(argc - 2, argv + 2);
    if (strcmp(cmd, "predict") == 0) return flynn_cmd_predict(argc - 2, argv + 2);
    if (strcmp(cmd, "convert") == 0) return flynn_cmd_convert(argc - 2, argv + 2);
    if (strcmp(cmd, "devices") == 0) return flynn_cmd_devices(argc - 2, argv + 2);
    if (strcmp(cmd, "bandwidth") == 0) return flynn_cmd_bandwidth(argc - 2, argv + 2);
    if (strcmp(cmd, "doctor") == 0) return flynn_cmd_doctor(argc - 2, argv + 2);
    if (strcmp(cmd, "plot") == 0) return flynn_cmd_plot(argc - 2, argv + 2);
    if (strcmp(cmd, "bench") == 0) { int flynn_cmd_bench(int, char **); return flynn_cmd_bench(argc - 2, argv + 2); }
    if (strcmp(cmd, "sift") == 0) return flynn_cmd_sift(argc - 2, argv + 2);
    if (strcmp(cmd, "match") == 0) return flynn_cmd_match(argc - 2, argv + 2);
    fprintf(stderr, "flynn: unknown command '%s'\n\n", cmd);
    usage_main(stderr);
    return 2;
}
