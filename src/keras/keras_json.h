/*
 * keras_json.h — what the Keras config files (keras_json.c, keras_layers.c,
 * keras_config.c) share: the message context, typed JSON reading and
 * writing (keras_json.c), and the table of layer classes (keras_layers.c).
 * The short names below are macros for fl_kj_* symbols, so the library
 * exports only fl_-prefixed names.
 */
#ifndef FL_IO_KERAS_JSON_H
#define FL_IO_KERAS_JSON_H

#include "keras/keras.h"
#include "core/error.h"

/* ------------------------------------------------------------ messages */

typedef struct kctx {
    const char *src;  /* file name */
    char where[192];  /* "layer 'dense' (Dense)" or "" */
    bool weights_follow; /* the file's weights are loaded after the build: layers leave theirs uninitialized */
} kctx;

#define kfail fl_kj_fail
#define set_where fl_kj_set_where
/* Sets the error "src: layer 'x' (Cls): message" and returns s. */
fl_status kfail(const kctx *c, fl_status s, const char *fmt, ...) FL_PRINTF(3, 4);
void set_where(kctx *c, const char *name, const char *cls);

/* ------------------------------------------------------------ reading */

#define jkey fl_kj_key
#define jhas fl_kj_has
#define jis fl_kj_is
#define jstr fl_kj_str
#define jnum fl_kj_num
#define jtype_name fl_kj_type_name
#define get_int fl_kj_get_int
#define get_num fl_kj_get_num
#define get_bool fl_kj_get_bool
#define get_pair fl_kj_get_pair
#define must_be_null fl_kj_must_be_null
#define check_builtin_object fl_kj_check_builtin_object
#define get_activation fl_kj_get_activation
#define check_dtype fl_kj_check_dtype
#define check_data_format fl_kj_check_data_format
#define get_padding fl_kj_get_padding
#define check_initializers fl_kj_check_initializers
#define get_batch_shape fl_kj_get_batch_shape

json_object *jkey(json_object *o, const char *k);    /* NULL if absent, null or o is not an object */
bool jhas(json_object *o, const char *k);
bool jis(json_object *o, json_type t);
const char *jstr(json_object *o);                    /* NULL unless a string */
bool jnum(json_object *o);
const char *jtype_name(json_object *o);              /* "a list", for messages */
fl_status get_int(const kctx *c, json_object *cfg, const char *key, int64_t def, bool required, int64_t *out);
fl_status get_num(const kctx *c, json_object *cfg, const char *key, double def, bool required, double *out);
fl_status get_bool(const kctx *c, json_object *cfg, const char *key, bool def, bool *out);
/* An integer or a list of two positive integers (kernel_size, strides, ...). */
fl_status get_pair(const kctx *c, json_object *cfg, const char *key, int def, bool required, int *a, int *b);
/* A key whose non-null value changes what the model computes or how it trains. */
fl_status must_be_null(const kctx *c, json_object *cfg, const char *key, const char *what);
fl_status check_builtin_object(const kctx *c, json_object *obj, const char *key);
fl_status get_activation(const kctx *c, json_object *cfg, const char *key, fl_activation *out);
fl_status check_dtype(const kctx *c, json_object *cfg);
fl_status check_data_format(const kctx *c, json_object *cfg);
fl_status get_padding(const kctx *c, json_object *cfg, fl_padding *out);
fl_status check_initializers(const kctx *c, json_object *cfg, const char *const *keys);
/* Per-sample shape from [null, d1, ...]. */
fl_status get_batch_shape(const kctx *c, json_object *v, const char *key, int *ndim, int64_t *shape);

/* ------------------------------------------------------------ writing */

#define jfloat fl_kj_float
#define jint fl_kj_int
#define jbool fl_kj_bool
#define jstring fl_kj_string
#define put fl_kj_put
#define jpair fl_kj_pair
#define jshape fl_kj_shape
#define jobject fl_kj_object
#define dtype_policy fl_kj_dtype_policy
#define initializer fl_kj_initializer

json_object *jfloat(double v);   /* the shortest text that reads back as the same float32 */
json_object *jint(int64_t v);
json_object *jbool(bool v);
json_object *jstring(const char *s);
void put(json_object *o, const char *k, json_object *v);
json_object *jpair(int a, int b);
json_object *jshape(const fl_node *n);  /* [null, d1, ...] */
json_object *jobject(const char *module, const char *cls, json_object *config, bool legacy);
json_object *dtype_policy(void);
json_object *initializer(const char *cls);

/* ------------------------------------------------------------ layer classes
 *
 * One row per Keras layer class that flynn reads and writes (keras_layers.c):
 * the class, its kind, the reader (config -> unnamed layer; NULL and a
 * message through kfail when refused) and the writer (the class's config
 * keys, after the name/trainable/dtype that every layer has). */

typedef struct klayer_extra {
    bool bn;         /* a BatchNormalization: axis to check once built */
    int64_t bn_axis;
} klayer_extra;

typedef struct fl_keras_layer_def { /* a row of keras_layers.c's layer_defs, at its kind */
    fl_layer_kind kind;
    fl_layer *(*from_config)(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x);
    void (*to_config)(const fl_layer *l, json_object *cfg);
    bool build_config;  /* Keras writes a build_config for it */
} fl_keras_layer_def;

const fl_keras_layer_def *fl_keras_layer_by_class(const char *cls); /* NULL: not supported */
const fl_keras_layer_def *fl_keras_layer_by_kind(fl_layer_kind kind);
/* "InputLayer, Dense, ...": every class flynn reads, for messages */
const char *fl_keras_supported_layers(void);

#endif
