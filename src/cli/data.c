/*
 * data.c — the user's own data on the `flynn` command line: the --data
 * forms X.npy,Y.npy, FILE.npz, FILE.csv (--label, --categorical) and DIR
 * (a folder of images in class subfolders: --image-size, --color-mode),
 * predict's --input forms, and one-hot labels for a categorical loss.
 * Everything goes through the public API (flynn/flynn.h). The kinds X.npy,Y.npy
 * and DIR also open as streams (flynn train --stream, --augment).
 */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* strtok_r */
#endif
#include "data.h"
#include "files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool ends_with(const char *s, const char *suf) { return flynn_has_suffix_n(s, strlen(s), suf); }

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

const char *flynn_own_kind(const char *spec) {
    const char *comma = strchr(spec, ',');
    if (comma && flynn_has_suffix_n(spec, (size_t)(comma - spec), ".npy") && ends_with(comma + 1, ".npy")) return "npy";
    if (ends_with(spec, ".npz") || ends_with(spec, ".NPZ")) return "npz";
    if (ends_with(spec, ".csv") || ends_with(spec, ".CSV")) return "csv";
    if (is_dir(spec)) return "images";
    return NULL;
}

static int usage(const char *cmd, const char *msg, const char *arg) {
    fprintf(stderr, "flynn %s: %s%s%s\n(see `flynn %s --help`)\n", cmd, msg, arg ? " " : "", arg ? arg : "", cmd);
    return 2;
}

int flynn_own_check_opts(const char *cmd, const char *kind, const flynn_data_opts *o) {
    bool csv = kind && strcmp(kind, "csv") == 0, img = kind && strcmp(kind, "images") == 0;
    if (o->label && !csv) return usage(cmd, "--label is for --data FILE.csv; this --data is", kind ? kind : "a built-in data set");
    if (o->categorical && !csv) return usage(cmd, "--categorical is for --data FILE.csv", NULL);
    if (o->categorical && strcmp(o->categorical, "onehot") && strcmp(o->categorical, "int"))
        return usage(cmd, "--categorical wants onehot or int, got", o->categorical);
    if ((o->image_size || o->color_mode) && !img)
        return usage(cmd, "--image-size and --color-mode are for --data DIR (a folder of images)", NULL);
    return 0;
}

static int parse_size(const char *cmd, const char *v, int *h, int *w) {
    char x;
    if (sscanf(v, "%d%c%d", h, &x, w) != 3 || (x != 'x' && x != 'X' && x != ',') || *h <= 0 || *w <= 0 || *h > 65536 ||
        *w > 65536)
        return usage(cmd, "--image-size wants HEIGHTxWIDTH (e.g. 180x180), got", v);
    return 0;
}

static int parse_color(const char *cmd, const char *v, fl_color_mode *c) {
    if (strcmp(v, "rgb") == 0) *c = FL_COLOR_RGB;
    else if (strcmp(v, "grayscale") == 0) *c = FL_COLOR_GRAYSCALE;
    else if (strcmp(v, "rgba") == 0) *c = FL_COLOR_RGBA;
    else return usage(cmd, "--color-mode wants rgb, grayscale or rgba, got", v);
    return 0;
}

/* The image size and color mode: the options, else the model's input (H, W, C), else (no model: a built-in
 * one, built for the data) the images' own where they all agree, else Keras's 256x256 rgb. note: what the
 * size came from, for the data line ("" where --image-size gave it). */
static int image_shape(const char *cmd, const flynn_data_opts *o, const fl_model *m, const char *dir, int *h, int *w,
                       fl_color_mode *c, char *note, size_t note_len) {
    *h = *w = 256;
    *c = FL_COLOR_RGB;
    snprintf(note, note_len, " (Keras's default size; --image-size to change)");
    int64_t s[FL_MAX_DIMS];
    if (m && fl_model_num_inputs(m) == 1 && fl_model_input_shape(m, 0, s) == 3 && s[0] > 0 && s[1] > 0 &&
        (s[2] == 1 || s[2] == 3 || s[2] == 4)) {
        *h = (int)s[0];
        *w = (int)s[1];
        *c = s[2] == 1 ? FL_COLOR_GRAYSCALE : s[2] == 4 ? FL_COLOR_RGBA : FL_COLOR_RGB;
        snprintf(note, note_len, " (the model's input size; --image-size to change)");
    } else if (!m && !o->image_size) {
        /* issue 43: mnist_cnn on a folder of 28x28 grayscale PNGs at Keras's 256x256 rgb built a 130-million-
         * parameter model that ran 7 s a step */
        int ih, iw;
        fl_color_mode ic;
        bool agree;
        char found[512];
        if (fl_image_directory_shape(dir, &ih, &iw, &ic, &agree, found, sizeof found) != FL_OK) {
            fl_clear_error(); /* Keras's default; reading the folder then names what is wrong with it */
        } else if (agree) {
            *h = ih, *w = iw, *c = ic;
            snprintf(note, note_len, " (the images' own size and colour mode; --image-size and --color-mode to change)");
        } else {
            snprintf(note, note_len, " (Keras's default size: the images differ, %s; --image-size HxW and --color-mode "
                     "to choose)", found);
        }
    }
    if (o->image_size) {
        if (parse_size(cmd, o->image_size, h, w)) return 2;
        note[0] = 0;
    }
    if (o->color_mode && parse_color(cmd, o->color_mode, c)) return 2;
    return 0;
}

int flynn_own_load(const char *cmd, const char *spec, const flynn_data_opts *o, const fl_model *m, uint64_t seed,
                   fl_dataset *out, char *desc, size_t desc_len) {
    const char *kind = flynn_own_kind(spec);
    memset(out, 0, sizeof *out);
    desc[0] = 0;
    int r = flynn_own_check_opts(cmd, kind, o);
    if (r) return r;
    fl_data_info info;
    memset(&info, 0, sizeof info);
    fl_status s;
    if (strcmp(kind, "npy") == 0) {
        char x[4096];
        const char *comma = strchr(spec, ',');
        snprintf(x, sizeof x, "%.*s", (int)(comma - spec), spec);
        s = fl_load_npy_xy(x, comma + 1, out);
        if (s == FL_OK) {
            char a[128], b[128];
            snprintf(desc, desc_len, "x %s %s, y %s %s", x, fl_tensor_shape_str(out->x_train, a, sizeof a), comma + 1,
                     fl_tensor_shape_str(out->y_train, b, sizeof b));
        }
    } else if (strcmp(kind, "npz") == 0) {
        s = fl_load_npz_xy(spec, out, &info);
    } else if (strcmp(kind, "csv") == 0) {
        if (!o->label) return usage(cmd, "--data FILE.csv needs --label COLUMN (the column to predict)", NULL);
        s = fl_load_csv(spec, out, .label = o->label, .categorical_as_int = o->categorical && strcmp(o->categorical, "int") == 0,
                        .info = &info);
    } else {
        int h, w;
        fl_color_mode c;
        char note[768];
        if ((r = image_shape(cmd, o, m, spec, &h, &w, &c, note, sizeof note))) return r;
        s = fl_image_dataset_from_directory(spec, out, .image_size = {h, w}, .color_mode = c, .seed = seed, .info = &info);
        if (s == FL_OK)
            snprintf(info.description + strlen(info.description), sizeof info.description - strlen(info.description),
                     "%s", note);
    }
    if (s != FL_OK) {
        fprintf(stderr, "flynn %s: error: %s\n", cmd, fl_last_error());
        fl_data_info_free(&info);
        return 1;
    }
    if (info.description[0]) snprintf(desc, desc_len, "%s", info.description);
    fl_data_info_free(&info);
    return 0;
}

int flynn_own_stream(const char *cmd, const char *spec, const flynn_data_opts *o, const fl_model *m, uint64_t seed,
                     fl_data_stream **out, char *desc, size_t desc_len) {
    const char *kind = flynn_own_kind(spec);
    *out = NULL;
    desc[0] = 0;
    int r = flynn_own_check_opts(cmd, kind, o);
    if (r) return r;
    if (!kind || (strcmp(kind, "npy") != 0 && strcmp(kind, "images") != 0))
        return usage(cmd, "streaming (--stream, --prefetch, --workers, --augment) reads --data DIR or X.npy,Y.npy; this "
                     "--data is", kind ? kind : "a built-in data set");
    fl_data_stream *s;
    if (strcmp(kind, "npy") == 0) {
        char x[4096];
        const char *comma = strchr(spec, ',');
        snprintf(x, sizeof x, "%.*s", (int)(comma - spec), spec);
        s = fl_npy_stream(x, comma + 1);
    } else {
        int h, w;
        fl_color_mode c;
        char note[768];
        if ((r = image_shape(cmd, o, m, spec, &h, &w, &c, note, sizeof note))) return r;
        s = fl_image_stream_from_directory(spec, .image_size = {h, w}, .color_mode = c, .seed = seed);
        if (s) snprintf(desc, desc_len, "%s", note);
    }
    if (!s) {
        fprintf(stderr, "flynn %s: error: %s\n", cmd, fl_last_error());
        return 1;
    }
    char tail[768];
    snprintf(tail, sizeof tail, "%s", desc);
    snprintf(desc, desc_len, "%s%s", fl_data_stream_description(s), tail);
    *out = s;
    return 0;
}

int flynn_stream_fit_labels(const char *cmd, const fl_model *m, fl_data_stream **s, bool quiet) {
    if (fl_model_loss(m).kind != FL_LOSS_CATEGORICAL_CROSSENTROPY || fl_model_num_outputs(m) != 1) return 0;
    int64_t os[FL_MAX_DIMS], ys[FL_MAX_DIMS];
    if (fl_model_output_shape(m, 0, os) != 1 || os[0] < 2) return 0;
    int ynd = fl_data_stream_y_shape(*s, ys);
    if (!(ynd == 0 || (ynd == 1 && ys[0] == 1))) return 0; /* one-hot already, or targets */
    fl_data_stream *t = fl_data_stream_one_hot(*s, (int)os[0]);
    if (!t) {
        fprintf(stderr, "flynn %s: error: %s\n", cmd, fl_last_error());
        return 1;
    }
    if (!quiet)
        printf("labels: class indices one-hot encoded to (%lld, %d) for categorical_crossentropy (as each batch is read)\n",
               (long long)fl_data_stream_size(t), (int)os[0]);
    *s = t;
    return 0;
}

int flynn_parse_augment(const char *cmd, const char *spec, fl_augment_args *a) {
    memset(a, 0, sizeof *a);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        float fh, fw;
        char x;
        if (strcmp(t, "flip") == 0) a->flip_horizontal = true;
        else if (sscanf(t, "translate=%f%c%f", &fh, &x, &fw) == 3 && (x == 'x' || x == 'X')) {
            a->translate_height = fh;
            a->translate_width = fw;
        } else if (sscanf(t, "translate=%f%c", &fh, &x) == 1) a->translate_height = a->translate_width = fh;
        else return usage(cmd, "--augment wants flip and/or translate=F (or translate=HxW: fractions of the height and "
                          "width), comma-separated, got", spec);
        if (!(a->translate_height >= 0 && a->translate_height < 1 && a->translate_width >= 0 && a->translate_width < 1))
            return usage(cmd, "--augment translate wants fractions in [0, 1), got", spec);
    }
    return 0;
}

int flynn_fit_labels(const char *cmd, const fl_model *m, fl_dataset *d, const char *source, bool quiet) {
    if (fl_model_loss(m).kind != FL_LOSS_CATEGORICAL_CROSSENTROPY || fl_model_num_outputs(m) != 1) return 0;
    int64_t os[FL_MAX_DIMS];
    int ond = fl_model_output_shape(m, 0, os);
    if (ond != 1 || os[0] < 2) return 0;
    const int classes = (int)os[0];
    for (int part = 0; part < 2; part++) {
        fl_tensor **y = part ? &d->y_test : &d->y_train;
        if (!*y) continue;
        int nd = fl_tensor_ndim(*y);
        if (!(nd == 1 || (nd == 2 && fl_tensor_dim(*y, 1) == 1))) continue; /* one-hot already, or targets */
        fl_tensor *oh = fl_one_hot(*y, classes);
        if (!oh) {
            fprintf(stderr, "flynn %s: error: %s%s: the labels are class indices and the loss is categorical_crossentropy "
                    "over %d classes (the model's output): %s\n", cmd, source, part ? " (test set)" : "", classes,
                    fl_last_error());
            return 1;
        }
        if (!quiet && part == 0)
            printf("labels: class indices one-hot encoded to (%lld, %d) for categorical_crossentropy\n",
                   (long long)fl_tensor_dim(oh, 0), classes);
        fl_tensor_free(*y);
        *y = oh;
    }
    return 0;
}

static fl_tensor *as_model_input(const char *cmd, const char *path, fl_tensor *t, const fl_model *m, int i) {
    /* integers stay integers for an int32 input (never rounded through float) */
    bool keep = fl_tensor_dtype(t) == FL_INT32 || (fl_tensor_dtype(t) == FL_UINT8 && fl_model_input_dtype(m, i) == FL_INT32);
    if (keep || fl_tensor_dtype(t) == FL_FLOAT32) return t;
    fl_tensor *f = fl_to_float(t, 1.0f);
    fl_tensor_free(t);
    if (!f) fprintf(stderr, "flynn %s: error: %s: %s\n", cmd, path, fl_last_error());
    return f;
}

fl_tensor *flynn_load_input(const char *cmd, const char *path, const fl_model *m, int i, const flynn_data_opts *o) {
    const char *kind = flynn_own_kind(path);
    fl_tensor *t = NULL;
    if (kind && strcmp(kind, "npz") == 0) {
        fl_arrays a;
        if (fl_load_npz(path, &a) != FL_OK) { fprintf(stderr, "flynn %s: error: %s\n", cmd, fl_last_error()); return NULL; }
        const char *name = fl_model_input_name(m, i);
        char xi[32], arr[32];
        snprintf(xi, sizeof xi, "x%d", i);
        snprintf(arr, sizeof arr, "arr_%d", i);
        const char *keys[5] = {name, fl_model_num_inputs(m) == 1 ? "x" : NULL, xi, arr,
                               a.count == 1 ? a.names[0] : NULL};
        for (int k = 0; k < 5 && !t; k++) {
            if (!keys[k]) continue;
            for (int j = 0; j < a.count; j++)
                if (strcmp(a.names[j], keys[k]) == 0 && a.arrays[j]) { t = a.arrays[j]; a.arrays[j] = NULL; break; }
        }
        if (!t) {
            char have[512] = "";
            for (int j = 0; j < a.count; j++)
                snprintf(have + strlen(have), sizeof have - strlen(have), "%s'%s'", j ? ", " : "", a.names[j]);
            fprintf(stderr, "flynn %s: error: %s: no array for model input %d: expected '%s' (the input's name)%s, "
                    "'x%d' or 'arr_%d'; the file holds %s\n", cmd, path, i, name ? name : "?",
                    fl_model_num_inputs(m) == 1 ? ", 'x'" : "", i, i, have);
        }
        fl_arrays_free(&a);
    } else if (kind && strcmp(kind, "csv") == 0) {
        fl_dataset d;
        fl_data_info info;
        if (fl_load_csv(path, &d, .label = o->label, .categorical_as_int = o->categorical && strcmp(o->categorical, "int") == 0,
                        .info = &info) != FL_OK) {
            fprintf(stderr, "flynn %s: error: %s\n", cmd, fl_last_error());
            return NULL;
        }
        if (strstr(info.description, " 0 categorical") == NULL)
            fprintf(stderr, "flynn %s: note: %s has text columns: their encoding comes from the values in this file "
                    "(sorted), which must be the categories the model was trained with\n", cmd, path);
        t = d.x_train;
        d.x_train = NULL;
        fl_dataset_free(&d);
        fl_data_info_free(&info);
    } else if (kind && strcmp(kind, "images") == 0) {
        int h, w;
        fl_color_mode c;
        char note[768];
        if (image_shape(cmd, o, m, path, &h, &w, &c, note, sizeof note)) return NULL;
        fl_dataset d;
        fl_data_info info;
        if (fl_image_dataset_from_directory(path, &d, .image_size = {h, w}, .color_mode = c, .no_shuffle = true,
                                            .no_labels = true, .info = &info) != FL_OK) {
            fprintf(stderr, "flynn %s: error: %s\n", cmd, fl_last_error());
            return NULL;
        }
        printf("input %s: %lld images at %dx%d (every .jpg/.png under it, sorted by folder, then name: row i of the "
               "predictions is image i; first %s, last %s)\n", path, (long long)info.num_paths, h, w,
               info.file_paths[0], info.file_paths[info.num_paths - 1]);
        t = d.x_train;
        d.x_train = NULL;
        fl_dataset_free(&d);
        fl_data_info_free(&info);
    } else {
        t = fl_load_npy(path);
        if (!t) fprintf(stderr, "flynn %s: error: %s\n", cmd, fl_last_error());
    }
    return t ? as_model_input(cmd, path, t, m, i) : NULL;
}
