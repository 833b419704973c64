/*
 * data.h — the user's own data on the `flynn` command line (data.c): the
 * --data forms X.npy,Y.npy, FILE.npz, FILE.csv and DIR (images), their
 * options, predict's --input forms, and fitting class-index labels to a
 * categorical loss.
 */
#ifndef FLYNN_CLI_DATA_H
#define FLYNN_CLI_DATA_H

#include <flynn/flynn.h>

#include <stdbool.h>
#include <stddef.h>

typedef struct flynn_data_opts {
    const char *label;        /* --label COLUMN (CSV) */
    const char *categorical;  /* --categorical onehot|int (CSV) */
    const char *image_size;   /* --image-size HxW (images) */
    const char *color_mode;   /* --color-mode rgb|grayscale|rgba (images) */
} flynn_data_opts;

/* "npy" (X.npy,Y.npy), "npz", "csv", "images" (a folder), or NULL when spec
 * is none of the user's own forms. */
const char *flynn_own_kind(const char *spec);

/* Loads spec (of kind flynn_own_kind) into out; m (may be NULL) gives an
 * image folder its size and color mode when the options do not. desc gets
 * one line on what was read. Returns 0, 1 (error printed) or 2 (usage). */
int flynn_own_load(const char *cmd, const char *spec, const flynn_data_opts *o, const fl_model *m, uint64_t seed,
                   fl_dataset *out, char *desc, size_t desc_len);

/* Checks the options against the data kind (e.g. --label only for CSV);
 * 0, or 2 after a usage message. */
int flynn_own_check_opts(const char *cmd, const char *kind, const flynn_data_opts *o);

/* When m's loss is categorical_crossentropy and y (and y_test) hold class
 * indices (N,) or (N, 1) while the model's output has C > 1 columns: y
 * becomes one-hot (N, C) and one line says so (unless quiet). A label out of
 * [0, C) is an error naming the sample. Returns 0 or 1 (error printed). */
int flynn_fit_labels(const char *cmd, const fl_model *m, fl_dataset *d, const char *source, bool quiet);

/* Opens spec (X.npy,Y.npy or DIR, the kinds that stream) as a stream,
 * images at the size and color mode flynn_own_load would use; desc gets one
 * line. Returns 0, 1 (error printed) or 2 (usage). */
int flynn_own_stream(const char *cmd, const char *spec, const flynn_data_opts *o, const fl_model *m, uint64_t seed,
                     fl_data_stream **out, char *desc, size_t desc_len);

/* flynn_fit_labels for a stream: class indices one-hot for a
 * categorical_crossentropy model (*s replaced by the one-hot stream). */
int flynn_stream_fit_labels(const char *cmd, const fl_model *m, fl_data_stream **s, bool quiet);

/* --augment flip,translate=F[xF]: the augmentation arguments; 0 or 2 (usage). */
int flynn_parse_augment(const char *cmd, const char *spec, fl_augment_args *a);

/* predict's --input: X.npy, FILE.npz (model input i by its name, else x, x<i>,
 * arr_<i>, or the file's only array), FILE.csv (features; --label dropped)
 * or DIR (every image under it, at the model's input size, in sorted file
 * order: Keras's labels=None). NULL with
 * the message printed. */
fl_tensor *flynn_load_input(const char *cmd, const char *path, const fl_model *m, int i, const flynn_data_opts *o);

#endif
