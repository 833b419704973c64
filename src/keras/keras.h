/*
 * keras.h — what the three Keras-file sources share (the public entry points
 * are in flynn/flynn.h, "model files"):
 *
 *   keras_config.c   model config JSON <-> fl_model (Sequential, Functional),
 *                    compile config <-> optimizer/loss/metrics
 *   keras_weights.c  the HDF5 layouts: Keras 3 (.keras / .weights.h5) and the
 *                    legacy full-model .h5, read into a staging area first
 *                    (through h5.c, flynn's own HDF5 reader and writer)
 *   keras_file.c     the zip container, size limits, atomic saving and the
 *                    public fl_load_model / fl_save_model / ... functions
 *
 * Loading never changes a model until everything was read and checked: the
 * weights and optimizer state go into an fl_kstate first, and are applied
 * only when all of them fit.
 */
#ifndef FL_IO_KERAS_H
#define FL_IO_KERAS_H

#include "nn/nn.h"

#include <json-c/json.h>

/* Limits, checked against a zip entry's declared size before inflating it. */
#define FL_KERAS_MAX_CONFIG ((int64_t)64 << 20)   /* config.json, metadata.json, .json files: 64 MiB */
#define FL_KERAS_MAX_WEIGHTS ((int64_t)4 << 30)   /* model.weights.h5 and .h5 files: 4 GiB */

/* The version of the Keras file format flynn writes (and was tested with). */
#define FL_KERAS_FORMAT_VERSION "3.15.1"

/* ------------------------------------------------------ keras_config.c */

/* Parses JSON text; on error the message names src, json-c's reason and the
 * line:column (byte offset) where parsing stopped. */
json_object *fl_keras_parse_json(const char *text, size_t len, const char *src);

/* Builds an uncompiled model from a model config ({"class_name":
 * "Sequential"|"Functional"|"Model", "config": {...}}, Keras 3 or tf.keras 2
 * dialect). Weights are freshly initialised, or with weights_follow left
 * zero for a load that reads every one of them next (it frees the model if
 * that fails). Refuses (NULL, message naming src, the layer and the reason)
 * whatever flynn cannot represent exactly. */
fl_model *fl_keras_model_from_config(json_object *model_config, const char *src, bool weights_follow);

/* Compiles m from a Keras 3 compile_config or a legacy training_config
 * (optimizer under "optimizer" or "optimizer_config"). */
fl_status fl_keras_compile_from_config(fl_model *m, json_object *compile_config, const char *src);

/* The model config as Keras 3.15 writes it. legacy: the form of a legacy .h5
 * file's model_config attribute (no module/registered_name/build_config). */
json_object *fl_keras_model_config(const fl_model *m, bool legacy);
/* compile_config (Keras 3) of a compiled model; NULL when not compiled. */
json_object *fl_keras_compile_config(const fl_model *m);
/* training_config of a legacy .h5 file; NULL when not compiled. */
json_object *fl_keras_training_config(const fl_model *m);

/* Compact JSON text of obj (a new string, caller frees). */
char *fl_keras_json_text(json_object *obj);

/* Keras's default name of the model's optimizer ("adam", "sgd", ...). */
const char *fl_keras_optimizer_name(const fl_optimizer *o);

/* ------------------------------------------------------ keras_weights.c */

typedef struct fl_kvar {
    int ndim;
    int64_t shape[FL_MAX_DIMS];
    float *data;     /* host copy; or the weight itself, where it was read into it (borrowed) */
    float *into;     /* where read_data writes (a model's weight in host memory), or NULL: a copy of its own */
    bool borrowed;   /* data is into: not freed with the state */
} fl_kvar;

/* Weights and optimizer state read from a file, not yet applied. */
typedef struct fl_kstate {
    int nvars;            /* every layer weight, m->layers order, each layer's order */
    fl_kvar *vars;
    bool has_opt;         /* optimizer variables were found */
    int64_t iterations;
    float learning_rate;
    bool has_lr;
    int nslots;           /* optimizer slot variables in Keras order */
    fl_kvar *slots;
    bool direct;          /* the weights were read into the model (fl_keras_read_state) */
} fl_kstate;

void fl_kstate_free(fl_kstate *s);

typedef enum fl_kformat {
    FL_KFMT_KERAS = 0, /* Keras 3: layers/<path>/vars/<i>, optimizer/vars/<i> */
    FL_KFMT_LEGACY,    /* legacy .h5: model_weights/<layer>/<weight name>, optimizer_weights */
} fl_kformat;

/* An HDF5 file in memory, read by flynn's own reader (keras/h5.h). */
typedef struct fl_h5file fl_h5file;
/* Opens an HDF5 image (referenced, not copied: keep it until fl_h5_close)
 * or, with data NULL, reads the file at src (at most FL_KERAS_MAX_WEIGHTS). */
fl_h5file *fl_h5_open(const void *data, size_t len, const char *src);
void fl_h5_close(fl_h5file *f);
/* A fresh load's reader: the image is the load's own memory, and each large
 * dataset's pages go back to the system once read (fl_h5_release_read). */
void fl_h5_release_as_read(fl_h5file *f);
/* A string attribute of the root group (model_config, training_config,
 * keras_version); NULL (no error) when absent. Caller frees. */
char *fl_h5_root_attr(fl_h5file *f, const char *name);
/* Whether the file looks like a legacy full-model .h5 (model_weights group). */
bool fl_h5_is_legacy(fl_h5file *f);

/* Reads the weights of every layer of m (refusing a missing group, a wrong
 * count or shape), and the optimizer variables when present and
 * want_optimizer (shapes checked later, against the compiled optimizer).
 * direct: each weight is read straight into m's weight (host memory), after
 * its shape was checked; for a model built for this load and freed if it
 * fails, so that a load holds the weights once, not also a copy (VGG16 at
 * 64x64: 152 MB). Else every weight is a copy, and m is left alone. */
fl_status fl_keras_read_state(fl_h5file *f, fl_kformat fmt, const fl_model *m, bool want_optimizer, bool direct,
                              fl_kstate *out);

/* Applies st to m: every layer weight, then (when st->has_opt, m is compiled
 * and the optimizer's variables match in number and shapes, as Keras
 * requires) iterations, learning rate and slots; *opt_applied says whether.
 * A mismatch is an error with require_opt (nothing applied), else the
 * optimizer state is skipped as Keras's load_weights does. Checks everything
 * before changing anything. */
fl_status fl_keras_apply_state(fl_model *m, const fl_kstate *st, const char *src, bool require_opt, bool *opt_applied);

/* Writes m's weights (and, when compiled, its optimizer state) as an HDF5
 * image in the given layout. legacy also writes model_config, keras_version,
 * backend and training_config attributes. The image is malloc'ed. */
fl_status fl_keras_write_h5(fl_model *m, fl_kformat fmt, void **data, size_t *len);

/* The group name Keras 3 gives layer i of m in model.weights.h5 (class-based,
 * de-duplicated: "dense", "dense_1", ...); "" for a Sequential's InputLayer. */
void fl_keras_layer_path(const fl_model *m, int i, char *buf, size_t n);

/* Keras 3's weight.path of weight k of layer i ("sequential/dense/kernel",
 * "lstm/lstm_cell/recurrent_kernel"), as TensorBoard's histogram tags use it. */
void fl_keras_weight_path(const fl_model *m, int i, int k, char *buf, size_t n);

/* keras_layers.c: the Keras class of a layer kind's reader/writer row, NULL without one */
const char *fl_keras_kind_row_class(fl_layer_kind kind);

#endif
