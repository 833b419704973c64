/*
 * keras_layers.c — every Keras layer class flynn reads and writes, one row
 * each at the end of this file: how its config becomes a flynn layer
 * (refusing, with the key and the reason, whatever flynn cannot compute
 * exactly) and how a flynn layer's config is written, with every key Keras
 * 3.15 writes for that class. The model structure around the layers
 * (Sequential, Functional, names, calls) is keras_config.c's.
 */
#include "keras/keras_json.h"

#include <math.h>
#include <pthread.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kinit[] = {"kernel_initializer", "bias_initializer", NULL};

/* The regularizer/constraint keys of a layer with a kernel and a bias. */
static fl_status check_kernel_extras(const kctx *c, json_object *cfg) {
    if (check_initializers(c, cfg, kinit) || must_be_null(c, cfg, "kernel_regularizer", "weight regularizers") ||
        must_be_null(c, cfg, "bias_regularizer", "weight regularizers") ||
        must_be_null(c, cfg, "activity_regularizer", "activity regularizers") ||
        must_be_null(c, cfg, "kernel_constraint", "weight constraints") ||
        must_be_null(c, cfg, "bias_constraint", "weight constraints") || must_be_null(c, cfg, "lora_rank", "LoRA"))
        return fl_last_status();
    return FL_OK;
}

static void put_kernel_extras(json_object *c, bool activity) {
    put(c, "kernel_initializer", initializer("GlorotUniform"));
    put(c, "bias_initializer", initializer("Zeros"));
    put(c, "kernel_regularizer", NULL);
    put(c, "bias_regularizer", NULL);
    if (activity) put(c, "activity_regularizer", NULL);
    put(c, "kernel_constraint", NULL);
    put(c, "bias_constraint", NULL);
}

/* ---------------------------------------------------------------- Dense */

static fl_layer *dense_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    int64_t units;
    bool use_bias;
    fl_activation act;
    if (get_int(c, cfg, "units", 0, true, &units) || get_bool(c, cfg, "use_bias", true, &use_bias) ||
        get_activation(c, cfg, "activation", &act) || check_kernel_extras(c, cfg) ||
        must_be_null(c, cfg, "quantization_config", "quantized layers"))
        return NULL;
    if (units <= 0 || units > INT32_MAX) return kfail(c, FL_ERR_FORMAT, "units is %lld", (long long)units), NULL;
    return fl_dense_((fl_dense_args){.units = (int)units, .activation = act, .no_bias = !use_bias});
}

static void dense_to(const fl_layer *l, json_object *c) {
    const fl_dense_args *a = &l->a.dense;
    put(c, "units", jint(a->units));
    put(c, "activation", jstring(fl_activation_name(a->activation)));
    put(c, "use_bias", jbool(!a->no_bias));
    put_kernel_extras(c, false);
    put(c, "quantization_config", NULL);
}

/* --------------------------------------------------------------- Conv2D */

static fl_layer *conv2d_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    int64_t filters, groups;
    int kh, kw, sh, sw, dh, dw;
    bool use_bias;
    fl_activation act;
    fl_padding pad;
    if (get_int(c, cfg, "filters", 0, true, &filters) || get_pair(c, cfg, "kernel_size", 0, true, &kh, &kw) ||
        get_pair(c, cfg, "strides", 1, false, &sh, &sw) || get_padding(c, cfg, &pad) || check_data_format(c, cfg) ||
        get_pair(c, cfg, "dilation_rate", 1, false, &dh, &dw) || get_int(c, cfg, "groups", 1, false, &groups) ||
        get_activation(c, cfg, "activation", &act) || get_bool(c, cfg, "use_bias", true, &use_bias) ||
        check_kernel_extras(c, cfg))
        return NULL;
    if (filters <= 0 || filters > INT32_MAX) return kfail(c, FL_ERR_FORMAT, "filters is %lld", (long long)filters), NULL;
    if (groups <= 0 || groups > INT32_MAX || filters % groups)
        return kfail(c, FL_ERR_FORMAT, "groups is %lld, expected > 0 and dividing filters %lld", (long long)groups,
                     (long long)filters), NULL;
    return fl_conv2d_((fl_conv2d_args){.filters = (int)filters, .kernel_h = kh, .kernel_w = kw, .stride_h = sh,
                                       .stride_w = sw, .padding = pad, .dilation_h = dh, .dilation_w = dw,
                                       .groups = (int)groups, .activation = act, .no_bias = !use_bias});
}

static void conv2d_to(const fl_layer *l, json_object *c) {
    const fl_conv2d_args *a = &l->a.conv;
    put(c, "filters", jint(a->filters));
    put(c, "kernel_size", jpair(a->kernel_h, a->kernel_w));
    put(c, "strides", jpair(a->stride_h, a->stride_w));
    put(c, "padding", jstring(a->padding == FL_SAME ? "same" : "valid"));
    put(c, "data_format", jstring("channels_last"));
    put(c, "dilation_rate", jpair(a->dilation_h, a->dilation_w));
    put(c, "groups", jint(a->groups));
    put(c, "activation", jstring(fl_activation_name(a->activation)));
    put(c, "use_bias", jbool(!a->no_bias));
    put_kernel_extras(c, true);
}

/* ---------------------------------------------------------------- Conv1D */

static fl_layer *conv1d_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x);
static void conv1d_to(const fl_layer *l, json_object *c);

/* ---------------------------------------- DepthwiseConv2D, SeparableConv2D */

/* The keys the two classes share: kernel_size .. use_bias, the
 * depthwise/bias initializers, regularizers and constraints. */
static fl_status depthwise_common(const kctx *c, json_object *cfg, int *kh, int *kw, int *sh, int *sw, fl_padding *pad,
                                  int *dm, int *dh, int *dw, fl_activation *act, bool *use_bias) {
    static const char *const init[] = {"depthwise_initializer", "bias_initializer", NULL};
    int64_t m;
    if (get_int(c, cfg, "depth_multiplier", 1, false, &m) || get_pair(c, cfg, "kernel_size", 0, true, kh, kw) ||
        get_pair(c, cfg, "strides", 1, false, sh, sw) || get_padding(c, cfg, pad) || check_data_format(c, cfg) ||
        get_pair(c, cfg, "dilation_rate", 1, false, dh, dw) || get_activation(c, cfg, "activation", act) ||
        get_bool(c, cfg, "use_bias", true, use_bias) || check_initializers(c, cfg, init) ||
        must_be_null(c, cfg, "depthwise_regularizer", "weight regularizers") ||
        must_be_null(c, cfg, "bias_regularizer", "weight regularizers") ||
        must_be_null(c, cfg, "activity_regularizer", "activity regularizers") ||
        must_be_null(c, cfg, "depthwise_constraint", "weight constraints") ||
        must_be_null(c, cfg, "bias_constraint", "weight constraints"))
        return fl_last_status();
    if (m <= 0 || m > INT32_MAX) return kfail(c, FL_ERR_FORMAT, "depth_multiplier is %lld", (long long)m);
    *dm = (int)m;
    return FL_OK;
}

static fl_layer *depthwise2d_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)x;
    int kh = 0, kw = 0, sh = 1, sw = 1, dm = 1, dh = 1, dw = 1;
    fl_padding pad;
    fl_activation act;
    bool use_bias;
    if (depthwise_common(c, cfg, &kh, &kw, &sh, &sw, &pad, &dm, &dh, &dw, &act, &use_bias)) return NULL;
    if (strcmp(cls, "DepthwiseConv2D") == 0)
        return fl_depthwise_conv2d_((fl_depthwise_conv2d_args){.kernel_h = kh, .kernel_w = kw, .stride_h = sh,
                                                               .stride_w = sw, .padding = pad, .depth_multiplier = dm,
                                                               .dilation_h = dh, .dilation_w = dw, .activation = act,
                                                               .no_bias = !use_bias});
    static const char *const pinit[] = {"pointwise_initializer", NULL};
    int64_t filters;
    if (get_int(c, cfg, "filters", 0, true, &filters) || check_initializers(c, cfg, pinit) ||
        must_be_null(c, cfg, "pointwise_regularizer", "weight regularizers") ||
        must_be_null(c, cfg, "pointwise_constraint", "weight constraints"))
        return NULL;
    if (filters <= 0 || filters > INT32_MAX) return kfail(c, FL_ERR_FORMAT, "filters is %lld", (long long)filters), NULL;
    return fl_separable_conv2d_((fl_separable_conv2d_args){.filters = (int)filters, .kernel_h = kh, .kernel_w = kw,
                                                           .stride_h = sh, .stride_w = sw, .padding = pad,
                                                           .depth_multiplier = dm, .dilation_h = dh,
                                                           .dilation_w = dw, .activation = act,
                                                           .no_bias = !use_bias});
}

/* Keras 3.15's get_config, in its order. */
static void depthwise2d_to(const fl_layer *l, json_object *c) {
    const bool sep = l->kind == FL_L_SEPARABLE2D;
    const fl_depthwise_conv2d_args *d = &l->a.dw;
    const fl_separable_conv2d_args *s = &l->a.sep;
    put(c, "depth_multiplier", jint(sep ? s->depth_multiplier : d->depth_multiplier));
    if (sep) put(c, "filters", jint(s->filters));
    put(c, "kernel_size", sep ? jpair(s->kernel_h, s->kernel_w) : jpair(d->kernel_h, d->kernel_w));
    put(c, "strides", sep ? jpair(s->stride_h, s->stride_w) : jpair(d->stride_h, d->stride_w));
    put(c, "padding", jstring((sep ? s->padding : d->padding) == FL_SAME ? "same" : "valid"));
    put(c, "data_format", jstring("channels_last"));
    put(c, "dilation_rate", sep ? jpair(s->dilation_h, s->dilation_w) : jpair(d->dilation_h, d->dilation_w));
    put(c, "activation", jstring(fl_activation_name(sep ? s->activation : d->activation)));
    put(c, "use_bias", jbool(!(sep ? s->no_bias : d->no_bias)));
    put(c, "depthwise_initializer", initializer("GlorotUniform"));
    if (sep) put(c, "pointwise_initializer", initializer("GlorotUniform"));
    put(c, "bias_initializer", initializer("Zeros"));
    put(c, "depthwise_regularizer", NULL);
    if (sep) put(c, "pointwise_regularizer", NULL);
    put(c, "bias_regularizer", NULL);
    put(c, "activity_regularizer", NULL);
    put(c, "depthwise_constraint", NULL);
    if (sep) put(c, "pointwise_constraint", NULL);
    put(c, "bias_constraint", NULL);
}

/* -------------------------------------------- MaxPooling2D, AveragePooling2D */

static fl_layer *pool2d_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)x;
    int ph, pw, sh, sw;
    fl_padding pad;
    if (get_pair(c, cfg, "pool_size", 2, false, &ph, &pw) || check_data_format(c, cfg) || get_padding(c, cfg, &pad))
        return NULL;
    if (get_pair(c, cfg, "strides", 0, false, &sh, &sw)) return NULL;
    if (!jkey(cfg, "strides")) { sh = ph; sw = pw; }
    fl_pool2d_args a = {.pool_h = ph, .pool_w = pw, .stride_h = sh, .stride_w = sw, .padding = pad};
    return cls[0] == 'M' ? fl_max_pooling2d_(a) : fl_average_pooling2d_(a);
}

static void pool2d_to(const fl_layer *l, json_object *c) {
    const fl_pool2d_args *a = &l->a.pool;
    put(c, "pool_size", jpair(a->pool_h, a->pool_w));
    put(c, "padding", jstring(a->padding == FL_SAME ? "same" : "valid"));
    put(c, "strides", jpair(a->stride_h, a->stride_w));
    put(c, "data_format", jstring("channels_last"));
}

/* --------------------------------------- the global poolings, 2D and 1D */

static fl_layer *global_pool_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)x;
    bool keepdims;
    if (check_data_format(c, cfg) || get_bool(c, cfg, "keepdims", false, &keepdims)) return NULL;
    fl_global_pool_args a = {.keepdims = keepdims};
    const fl_keras_layer_def *d = fl_keras_layer_by_class(cls);
    switch (d->kind) {
    case FL_L_GMP: return fl_global_max_pooling2d_(a);
    case FL_L_GAP1D: return fl_global_average_pooling1d_(a);
    case FL_L_GMP1D: return fl_global_max_pooling1d_(a);
    default: return fl_global_average_pooling2d_(a);
    }
}

static void global_pool_to(const fl_layer *l, json_object *c) {
    put(c, "data_format", jstring("channels_last"));
    put(c, "keepdims", jbool(l->a.gpool.keepdims));
}

/* ------------------------------------------ MaxPooling1D, AveragePooling1D */

/* An integer or a list of one integer (Keras 3 writes pool_size [2]). */
static fl_status get_one(const kctx *c, json_object *cfg, const char *key, int def, int *out) {
    json_object *v = jkey(cfg, key);
    if (jis(v, json_type_array) && json_object_array_length(v) == 1) v = json_object_array_get_idx(v, 0);
    int64_t n = def;
    if (v && !jis(v, json_type_int))
        return kfail(c, FL_ERR_FORMAT, "'%s' is %s, expected an integer or a list of one integer", key, jtype_name(v));
    if (v) n = json_object_get_int64(v);
    if (n <= 0 || n > (1 << 20)) return kfail(c, FL_ERR_FORMAT, "'%s' is %lld, expected a positive size", key, (long long)n);
    *out = (int)n;
    return FL_OK;
}

static json_object *jone(int n) {
    json_object *a = json_object_new_array();
    json_object_array_add(a, jint(n));
    return a;
}

static fl_layer *pool1d_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)x;
    int k = 2, s = 0;
    fl_padding pad;
    if (get_one(c, cfg, "pool_size", 2, &k) || check_data_format(c, cfg) || get_padding(c, cfg, &pad) ||
        get_one(c, cfg, "strides", k, &s))
        return NULL;
    fl_pool1d_args a = {.pool_size = k, .strides = s, .padding = pad};
    return cls[0] == 'M' ? fl_max_pooling1d_(a) : fl_average_pooling1d_(a);
}

static void pool1d_to(const fl_layer *l, json_object *c) {
    const fl_pool1d_args *a = &l->a.pool1d;
    put(c, "pool_size", jone(a->pool_size));
    put(c, "padding", jstring(a->padding == FL_SAME ? "same" : "valid"));
    put(c, "strides", jone(a->strides));
    put(c, "data_format", jstring("channels_last"));
}

/* -------------------------------------------------------- Flatten, Reshape */

static fl_layer *flatten_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    if (check_data_format(c, cfg)) return NULL;
    return fl_flatten_((fl_name_args){0});
}

static void flatten_to(const fl_layer *l, json_object *c) {
    (void)l;
    put(c, "data_format", jstring("channels_last"));
}

static fl_layer *reshape_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    json_object *t = jkey(cfg, "target_shape");
    int64_t shape[FL_MAX_DIMS];
    size_t n = jis(t, json_type_array) ? json_object_array_length(t) : 0;
    if (n < 1 || n > FL_MAX_DIMS - 1)
        return kfail(c, FL_ERR_FORMAT, "'target_shape' is %s with %zu entries, expected a list of 1 to %d sizes",
                     jtype_name(t), n, FL_MAX_DIMS - 1), NULL;
    for (size_t i = 0; i < n; i++) {
        json_object *d = json_object_array_get_idx(t, i);
        if (!jis(d, json_type_int))
            return kfail(c, FL_ERR_FORMAT, "'target_shape' entry %zu is %s, expected an integer", i, jtype_name(d)), NULL;
        shape[i] = json_object_get_int64(d);
    }
    return fl_reshape_((int)n, shape);
}

static void reshape_to(const fl_layer *l, json_object *c) {
    json_object *t = json_object_new_array();
    for (int i = 0; i < l->a.shape.ndim; i++) json_object_array_add(t, jint(l->a.shape.shape[i]));
    put(c, "target_shape", t);
}

/* ---------------------------------------------------------------- Dropout */

/* noise_shape: null, or [null, d1, ...] with each d null (the input's
 * size) or a size (1 to share one decision along that axis). */
static fl_status get_noise_shape(const kctx *c, json_object *cfg, int64_t *noise) {
    json_object *v = jkey(cfg, "noise_shape");
    if (!v) return FL_OK;
    size_t n = jis(v, json_type_array) ? json_object_array_length(v) : 0;
    if (n < 2 || n > FL_MAX_DIMS)
        return kfail(c, FL_ERR_FORMAT, "'noise_shape' is %s, expected null or a list like [null, 1, 1, 1]",
                     json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
    if (json_object_array_get_idx(v, 0))
        return kfail(c, FL_ERR_UNSUPPORTED, "'noise_shape' shares decisions across the batch (its first entry is not "
                     "null); flynn draws them per sample");
    for (size_t i = 1; i < n; i++) {
        json_object *d = json_object_array_get_idx(v, i);
        if (d && (!jis(d, json_type_int) || json_object_get_int64(d) <= 0 || json_object_get_int64(d) > ((int64_t)1 << 40)))
            return kfail(c, FL_ERR_FORMAT, "'noise_shape' entry %zu is not null or a positive size", i);
        noise[i - 1] = d ? json_object_get_int64(d) : 0;
    }
    return FL_OK;
}

static fl_layer *dropout_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)x;
    double rate;
    int64_t seed;
    fl_dropout_args a = {0};
    bool spatial = strcmp(cls, "SpatialDropout2D") == 0, spatial1 = strcmp(cls, "SpatialDropout1D") == 0;
    if (get_num(c, cfg, "rate", 0, true, &rate) || get_int(c, cfg, "seed", 0, false, &seed) ||
        (spatial ? check_data_format(c, cfg) : spatial1 ? FL_OK : get_noise_shape(c, cfg, a.noise_shape)))
        return NULL;
    if (seed < 0) return kfail(c, FL_ERR_FORMAT, "seed %lld is negative", (long long)seed), NULL;
    a.rate = (float)rate;
    a.seed = (uint64_t)seed;
    return spatial ? fl_spatial_dropout2d_(a) : spatial1 ? fl_spatial_dropout1d_(a) : fl_dropout_(a);
}

static void dropout_to(const fl_layer *l, json_object *c) {
    put(c, "rate", jfloat(l->a.dropout.rate));
    put(c, "seed", l->a.dropout.seed ? jint((int64_t)(l->a.dropout.seed & INT64_MAX)) : NULL);
    if (l->kind == FL_L_SPATIAL_DROPOUT2D) {
        put(c, "data_format", jstring("channels_last"));
        return;
    }
    if (l->kind == FL_L_SPATIAL_DROPOUT1D) return;
    /* as many entries as the input has axes: known once built */
    int nd = l->out ? l->out->ndim - 1 : 0;
    bool any = false;
    for (int i = 0; i < FL_MAX_DIMS - 1; i++) any |= l->a.dropout.noise_shape[i] != 0;
    json_object *v = NULL;
    if (any && nd > 0) {
        v = json_object_new_array();
        json_object_array_add(v, NULL);
        for (int i = 0; i < nd; i++)
            json_object_array_add(v, l->a.dropout.noise_shape[i] ? jint(l->a.dropout.noise_shape[i]) : NULL);
    }
    put(c, "noise_shape", v);
}

/* ----------------------------------------------------- BatchNormalization */

static fl_layer *batchnorm_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls;
    static const char *const binit[] = {"beta_initializer", "gamma_initializer", "moving_mean_initializer",
                                        "moving_variance_initializer", NULL};
    double momentum, eps;
    bool center, scale, renorm;
    json_object *ax = jkey(cfg, "axis");
    if (get_num(c, cfg, "momentum", 0.99, false, &momentum) || get_num(c, cfg, "epsilon", 1e-3, false, &eps) ||
        get_bool(c, cfg, "center", true, &center) || get_bool(c, cfg, "scale", true, &scale) ||
        get_bool(c, cfg, "renorm", false, &renorm) || check_initializers(c, cfg, binit) ||
        must_be_null(c, cfg, "beta_regularizer", "weight regularizers") ||
        must_be_null(c, cfg, "gamma_regularizer", "weight regularizers") ||
        must_be_null(c, cfg, "beta_constraint", "weight constraints") ||
        must_be_null(c, cfg, "gamma_constraint", "weight constraints"))
        return NULL;
    if (renorm) return kfail(c, FL_ERR_UNSUPPORTED, "renorm true (batch renormalization) is not supported"), NULL;
    x->bn = true;
    x->bn_axis = -1;
    if (jis(ax, json_type_array) && json_object_array_length(ax) == 1 &&
        jis(json_object_array_get_idx(ax, 0), json_type_int))
        x->bn_axis = json_object_get_int64(json_object_array_get_idx(ax, 0));
    else if (jis(ax, json_type_int))
        x->bn_axis = json_object_get_int64(ax);
    else if (ax)
        return kfail(c, FL_ERR_UNSUPPORTED, "axis %s is not supported (flynn normalizes over the last axis only)",
                     json_object_to_json_string(ax)), NULL;
    if (!(momentum >= 0 && momentum < 1) || !(eps > 0))
        return kfail(c, FL_ERR_FORMAT, "momentum %g must be in [0, 1) and epsilon %g > 0", momentum, eps), NULL;
    fl_layer *l = fl_batch_normalization_((fl_batch_norm_args){.no_center = !center, .no_scale = !scale});
    if (l) { l->a.bn.momentum = (float)momentum; l->a.bn.epsilon = (float)eps; }
    return l;
}

static void batchnorm_to(const fl_layer *l, json_object *c) {
    const fl_batch_norm_args *a = &l->a.bn;
    put(c, "axis", jint(-1));
    put(c, "momentum", jfloat(a->momentum));
    put(c, "epsilon", jfloat(a->epsilon));
    put(c, "center", jbool(!a->no_center));
    put(c, "scale", jbool(!a->no_scale));
    put(c, "beta_initializer", initializer("Zeros"));
    put(c, "gamma_initializer", initializer("Ones"));
    put(c, "moving_mean_initializer", initializer("Zeros"));
    put(c, "moving_variance_initializer", initializer("Ones"));
    put(c, "beta_regularizer", NULL);
    put(c, "gamma_regularizer", NULL);
    put(c, "beta_constraint", NULL);
    put(c, "gamma_constraint", NULL);
    put(c, "synchronized", jbool(false));
    put(c, "renorm", jbool(false));
    put(c, "renorm_clipping", NULL);
    put(c, "renorm_momentum", jfloat(0.99));
}

/* ------------------------------------------------------------- Activation */

static fl_layer *activation_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    fl_activation act;
    if (!jkey(cfg, "activation")) return kfail(c, FL_ERR_FORMAT, "'activation' is missing"), NULL;
    if (get_activation(c, cfg, "activation", &act)) return NULL;
    return fl_activation_layer_((fl_activation_args){.activation = act});
}

static void activation_to(const fl_layer *l, json_object *c) {
    put(c, "activation", jstring(fl_activation_name(l->a.act.activation)));
}

/* ------------------------------------------------ Add, Multiply, Concatenate */

static fl_layer *merge_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)c; (void)cfg; (void)x;
    switch (fl_keras_layer_by_class(cls)->kind) {
    case FL_L_ADD: return fl_add_((fl_name_args){0});
    case FL_L_MULTIPLY: return fl_multiply_((fl_name_args){0});
    case FL_L_SUBTRACT: return fl_subtract_((fl_name_args){0});
    case FL_L_AVERAGE: return fl_average_((fl_name_args){0});
    case FL_L_MAXIMUM: return fl_maximum_((fl_name_args){0});
    default: return fl_minimum_((fl_name_args){0});
    }
}

static fl_layer *concatenate_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    int64_t axis;
    if (get_int(c, cfg, "axis", -1, false, &axis)) return NULL;
    if (axis == 0) return kfail(c, FL_ERR_UNSUPPORTED, "axis 0 (the batch) is not supported"), NULL;
    if (axis < -FL_MAX_DIMS || axis >= FL_MAX_DIMS)
        return kfail(c, FL_ERR_FORMAT, "axis %lld is out of range", (long long)axis), NULL;
    return fl_concatenate_((fl_concat_args){.axis = (int)axis});
}

static void concatenate_to(const fl_layer *l, json_object *c) { put(c, "axis", jint(l->a.concat.axis)); }

/* ---------------------------------------------- ZeroPadding2D, Cropping2D */

/* n, [a, b] (symmetric per axis) or [[top, bottom], [left, right]]. */
static fl_status get_sides(const kctx *c, json_object *cfg, const char *key, int dflt, int s[4]) {
    json_object *v = jkey(cfg, key);
    int64_t t[4] = {dflt, dflt, dflt, dflt};
    bool ok = true;
    if (!v) {
    } else if (jis(v, json_type_int)) {
        t[0] = t[1] = t[2] = t[3] = json_object_get_int64(v);
    } else if (jis(v, json_type_array) && json_object_array_length(v) == 2) {
        for (int a = 0; a < 2 && ok; a++) {
            json_object *e = json_object_array_get_idx(v, a);
            if (jis(e, json_type_int)) {
                t[2 * a] = t[2 * a + 1] = json_object_get_int64(e);
            } else if (jis(e, json_type_array) && json_object_array_length(e) == 2 &&
                       jis(json_object_array_get_idx(e, 0), json_type_int) &&
                       jis(json_object_array_get_idx(e, 1), json_type_int)) {
                t[2 * a] = json_object_get_int64(json_object_array_get_idx(e, 0));
                t[2 * a + 1] = json_object_get_int64(json_object_array_get_idx(e, 1));
            } else {
                ok = false;
            }
        }
    } else {
        ok = false;
    }
    if (!ok)
        return kfail(c, FL_ERR_FORMAT, "'%s' is %s, expected an integer, [rows, columns] or [[top, bottom], [left, "
                     "right]]", key, v ? json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN) : "null");
    for (int i = 0; i < 4; i++) {
        if (t[i] < 0 || t[i] > (1 << 20))
            return kfail(c, FL_ERR_FORMAT, "'%s' has %lld, expected a size from 0 to %d", key, (long long)t[i], 1 << 20);
        s[i] = (int)t[i];
    }
    return FL_OK;
}

static fl_layer *padding2d_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)x;
    bool crop = strcmp(cls, "Cropping2D") == 0;
    int s[4];
    if (check_data_format(c, cfg) || get_sides(c, cfg, crop ? "cropping" : "padding", crop ? 0 : 1, s)) return NULL;
    /* all four explicit: a side of 0 must stay 0 (see fl_padding2d_args) */
    fl_layer *l = crop ? fl_cropping2d_((fl_padding2d_args){0}) : fl_zero_padding2d_((fl_padding2d_args){0});
    if (l) {
        l->a.pad.top = s[0]; l->a.pad.bottom = s[1]; l->a.pad.left = s[2]; l->a.pad.right = s[3];
    }
    return l;
}

static void padding2d_to(const fl_layer *l, json_object *c) {
    const fl_padding2d_args *a = &l->a.pad;
    json_object *v = json_object_new_array();
    json_object_array_add(v, jpair(a->top, a->bottom));
    json_object_array_add(v, jpair(a->left, a->right));
    put(c, l->kind == FL_L_CROPPING2D ? "cropping" : "padding", v);
    put(c, "data_format", jstring("channels_last"));
}

/* ZeroPadding1D "padding", Cropping1D "cropping": an integer or [left, right]. */
static fl_layer *padding1d_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)x;
    bool crop = strcmp(cls, "Cropping1D") == 0;
    const char *key = crop ? "cropping" : "padding";
    json_object *v = jkey(cfg, key);
    int64_t t[2] = {1, 1};
    bool ok = true;
    if (jis(v, json_type_int)) {
        t[0] = t[1] = json_object_get_int64(v);
    } else if (jis(v, json_type_array) && json_object_array_length(v) == 2) {
        for (int i = 0; i < 2; i++) {
            json_object *e = json_object_array_get_idx(v, i);
            ok = ok && jis(e, json_type_int);
            if (ok) t[i] = json_object_get_int64(e);
        }
    } else if (v) {
        ok = false;
    }
    if (!ok || t[0] < 0 || t[1] < 0 || t[0] > (1 << 24) || t[1] > (1 << 24))
        return kfail(c, FL_ERR_FORMAT, "'%s' is %s, expected a size >= 0 or [left, right]", key,
                     v ? json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN) : "null"), NULL;
    if (!crop && check_data_format(c, cfg)) return NULL;
    fl_layer *l = crop ? fl_cropping1d_((fl_padding1d_args){0}) : fl_zero_padding1d_((fl_padding1d_args){0});
    if (l) { l->a.pad.top = (int)t[0]; l->a.pad.bottom = (int)t[1]; } /* explicit: a side of 0 stays 0 */
    return l;
}

static void padding1d_to(const fl_layer *l, json_object *c) {
    put(c, l->kind == FL_L_CROPPING1D ? "cropping" : "padding", jpair(l->a.pad.top, l->a.pad.bottom));
    if (l->kind == FL_L_ZEROPAD1D) put(c, "data_format", jstring("channels_last"));
}

static fl_layer *upsample1d_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    int size = 2;
    if (get_one(c, cfg, "size", 2, &size)) return NULL;
    return fl_up_sampling1d_((fl_up_sampling1d_args){.size = size});
}

static void upsample1d_to(const fl_layer *l, json_object *c) { put(c, "size", jint(l->a.up.size_h)); }

static fl_layer *conv1d_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    int64_t filters, groups;
    int k = 0, s = 1, d = 1;
    bool use_bias;
    fl_activation act;
    const char *pad = jstr(jkey(cfg, "padding"));
    if (jkey(cfg, "padding") && !pad) return kfail(c, FL_ERR_FORMAT, "'padding' is not a string"), NULL;
    if (get_int(c, cfg, "filters", 0, true, &filters) || get_one(c, cfg, "kernel_size", 0, &k) ||
        get_one(c, cfg, "strides", 1, &s) || check_data_format(c, cfg) || get_one(c, cfg, "dilation_rate", 1, &d) ||
        get_int(c, cfg, "groups", 1, false, &groups) || get_activation(c, cfg, "activation", &act) ||
        get_bool(c, cfg, "use_bias", true, &use_bias) || check_kernel_extras(c, cfg))
        return NULL;
    fl_padding p = !pad || strcmp(pad, "valid") == 0 ? FL_VALID : strcmp(pad, "same") == 0 ? FL_SAME
                 : strcmp(pad, "causal") == 0 ? FL_CAUSAL : (fl_padding)-1;
    if ((int)p < 0) return kfail(c, FL_ERR_UNSUPPORTED, "padding '%s' is not supported (valid, same or causal)", pad), NULL;
    if (filters <= 0 || filters > INT32_MAX) return kfail(c, FL_ERR_FORMAT, "filters is %lld", (long long)filters), NULL;
    if (groups <= 0 || groups > INT32_MAX || filters % groups)
        return kfail(c, FL_ERR_FORMAT, "groups is %lld, expected > 0 and dividing filters %lld", (long long)groups,
                     (long long)filters), NULL;
    return fl_conv1d_((fl_conv1d_args){.filters = (int)filters, .kernel_size = k, .strides = s, .padding = p,
                                       .dilation_rate = d, .groups = (int)groups, .activation = act,
                                       .no_bias = !use_bias});
}

static void conv1d_to(const fl_layer *l, json_object *c) {
    const fl_conv1d_args *a = &l->a.conv1d;
    put(c, "filters", jint(a->filters));
    put(c, "kernel_size", jone(a->kernel_size));
    put(c, "strides", jone(a->strides));
    put(c, "padding", jstring(a->padding == FL_SAME ? "same" : a->padding == FL_CAUSAL ? "causal" : "valid"));
    put(c, "data_format", jstring("channels_last"));
    put(c, "dilation_rate", jone(a->dilation_rate));
    put(c, "groups", jint(a->groups));
    put(c, "activation", jstring(fl_activation_name(a->activation)));
    put(c, "use_bias", jbool(!a->no_bias));
    put_kernel_extras(c, true);
}

/* ------------------------------------- ReLU, LeakyReLU, ELU, PReLU, Softmax */

static fl_layer *relu_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    double mx = 0, slope, thr;
    bool has_max = jkey(cfg, "max_value") != NULL;
    if ((has_max && get_num(c, cfg, "max_value", 0, true, &mx)) || get_num(c, cfg, "negative_slope", 0, false, &slope) ||
        get_num(c, cfg, "threshold", 0, false, &thr))
        return NULL;
    if (mx < 0 || slope < 0 || thr < 0)
        return kfail(c, FL_ERR_FORMAT, "max_value %g, negative_slope %g, threshold %g: expected each >= 0", mx, slope,
                     thr), NULL;
    fl_layer *l = fl_relu_layer_((fl_relu_args){.negative_slope = (float)slope, .threshold = (float)thr});
    if (l) l->a.pact.c = has_max ? (float)mx : INFINITY; /* max_value 0.0 stays 0 */
    return l;
}

static void relu_to(const fl_layer *l, json_object *c) {
    put(c, "max_value", isinf(l->a.pact.c) ? NULL : jfloat(l->a.pact.c));
    put(c, "negative_slope", jfloat(l->a.pact.a));
    put(c, "threshold", jfloat(l->a.pact.b));
}

static fl_layer *leaky_relu_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    double slope;
    /* tf.keras 2 wrote "alpha" */
    const char *key = !jkey(cfg, "negative_slope") && jkey(cfg, "alpha") ? "alpha" : "negative_slope";
    if (get_num(c, cfg, key, 0.3, false, &slope)) return NULL;
    if (slope < 0) return kfail(c, FL_ERR_FORMAT, "%s %g, expected >= 0", key, slope), NULL;
    fl_layer *l = fl_leaky_relu_((fl_leaky_relu_args){0});
    if (l) l->a.pact.a = (float)slope; /* 0 stays 0 */
    return l;
}

static void leaky_relu_to(const fl_layer *l, json_object *c) { put(c, "negative_slope", jfloat(l->a.pact.a)); }

static fl_layer *elu_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    double alpha;
    if (get_num(c, cfg, "alpha", 1.0, false, &alpha)) return NULL;
    fl_layer *l = fl_elu_layer_((fl_elu_args){0});
    if (l) l->a.pact.a = (float)alpha; /* 0 stays 0 */
    return l;
}

static void elu_to(const fl_layer *l, json_object *c) { put(c, "alpha", jfloat(l->a.pact.a)); }

static fl_layer *prelu_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    static const char *const pinit[] = {"alpha_initializer", NULL};
    if (check_initializers(c, cfg, pinit) || must_be_null(c, cfg, "alpha_regularizer", "weight regularizers") ||
        must_be_null(c, cfg, "alpha_constraint", "weight constraints"))
        return NULL;
    fl_prelu_args a = {0};
    json_object *v = jkey(cfg, "shared_axes");
    size_t n = jis(v, json_type_array) ? json_object_array_length(v) : 0;
    if (v && jis(v, json_type_int)) {
        a.shared_axes[0] = (int)json_object_get_int64(v);
        n = 0;
        if (a.shared_axes[0] < 1 || a.shared_axes[0] >= FL_MAX_DIMS)
            return kfail(c, FL_ERR_FORMAT, "shared_axes %d, expected 1 to %d", a.shared_axes[0], FL_MAX_DIMS - 1), NULL;
    } else if (v && (!jis(v, json_type_array) || n >= FL_MAX_DIMS)) {
        return kfail(c, FL_ERR_FORMAT, "'shared_axes' is %s, expected null or a list of axes", jtype_name(v)), NULL;
    }
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(v, i);
        int64_t ax = jis(e, json_type_int) ? json_object_get_int64(e) : -1;
        if (ax < 1 || ax >= FL_MAX_DIMS)
            return kfail(c, FL_ERR_UNSUPPORTED, "'shared_axes' entry %zu is %s, expected an axis from 1 to %d", i,
                         json_object_to_json_string(e), FL_MAX_DIMS - 1), NULL;
        a.shared_axes[i] = (int)ax;
    }
    return fl_prelu_(a);
}

static void prelu_to(const fl_layer *l, json_object *c) {
    put(c, "alpha_initializer", initializer("Zeros"));
    put(c, "alpha_regularizer", NULL);
    put(c, "alpha_constraint", NULL);
    json_object *v = NULL;
    for (int i = 0; i < FL_MAX_DIMS && l->a.prelu.shared_axes[i]; i++) {
        if (!v) v = json_object_new_array();
        json_object_array_add(v, jint(l->a.prelu.shared_axes[i]));
    }
    put(c, "shared_axes", v);
}

/* An integer axis, or a list of one (Softmax; Normalization: [] and null
 * are axis=None, *none set). */
static fl_status get_one_axis(const kctx *c, json_object *cfg, const char *key, int *axis, bool *none) {
    json_object *v = jkey(cfg, key);
    if (none) *none = false;
    if (jis(v, json_type_array) && json_object_array_length(v) == 1) v = json_object_array_get_idx(v, 0);
    else if (none && (!v || (jis(v, json_type_array) && json_object_array_length(v) == 0))) { *none = true; return FL_OK; }
    if (!v) { *axis = -1; return FL_OK; }
    if (!jis(v, json_type_int))
        return kfail(c, FL_ERR_UNSUPPORTED, "'%s' is %s; flynn takes one axis", key,
                     json_object_to_json_string_ext(jkey(cfg, key), JSON_C_TO_STRING_PLAIN));
    int64_t a = json_object_get_int64(v);
    if (a == 0) return kfail(c, FL_ERR_UNSUPPORTED, "'%s' 0 (the batch) is not supported", key);
    if (a < -(FL_MAX_DIMS - 1) || a >= FL_MAX_DIMS) return kfail(c, FL_ERR_FORMAT, "'%s' %lld is out of range", key, (long long)a);
    *axis = (int)a;
    return FL_OK;
}

static fl_layer *softmax_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    int axis = -1;
    if (get_one_axis(c, cfg, "axis", &axis, NULL)) return NULL;
    return fl_softmax_layer_((fl_softmax_args){.axis = axis});
}

static void softmax_to(const fl_layer *l, json_object *c) { put(c, "axis", jint(l->a.softmax.axis)); }

/* --------------------------------------------- Rescaling, Normalization */

static fl_layer *rescaling_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    double scale, offset;
    json_object *sv = jkey(cfg, "scale"), *ov = jkey(cfg, "offset");
    if ((sv && !jnum(sv)) || (ov && !jnum(ov)))
        return kfail(c, FL_ERR_UNSUPPORTED, "scale %s and offset %s: flynn takes numbers only (no per-channel lists)",
                     sv ? json_object_to_json_string_ext(sv, JSON_C_TO_STRING_PLAIN) : "null",
                     ov ? json_object_to_json_string_ext(ov, JSON_C_TO_STRING_PLAIN) : "null"), NULL;
    if (get_num(c, cfg, "scale", 0, true, &scale) || get_num(c, cfg, "offset", 0, false, &offset)) return NULL;
    return fl_rescaling_((fl_rescaling_args){.scale = (float)scale, .offset = (float)offset});
}

static void rescaling_to(const fl_layer *l, json_object *c) {
    put(c, "scale", jfloat(l->a.pact.a));
    put(c, "offset", jfloat(l->a.pact.b));
}

/* mean/variance: null (adapted), a number or a flat list of numbers. */
static fl_status get_values(const kctx *c, json_object *cfg, const char *key, float **out, int *n) {
    json_object *v = jkey(cfg, key);
    *out = NULL;
    *n = 0;
    if (!v) return FL_OK;
    size_t len = jis(v, json_type_array) ? json_object_array_length(v) : 1;
    if (!jnum(v) && (!jis(v, json_type_array) || len == 0 || len > (1 << 24)))
        return kfail(c, FL_ERR_UNSUPPORTED, "'%s' is %s, expected null, a number or a list of numbers", key, jtype_name(v));
    *out = fl_malloc(len * sizeof(float), "Normalization values");
    if (!*out) return fl_last_status();
    for (size_t i = 0; i < len; i++) {
        json_object *e = jnum(v) ? v : json_object_array_get_idx(v, i);
        if (!jnum(e)) {
            free(*out);
            *out = NULL;
            return kfail(c, FL_ERR_UNSUPPORTED, "'%s' entry %zu is %s, expected a number (a flat list)", key, i,
                         jtype_name(e));
        }
        (*out)[i] = (float)json_object_get_double(e);
    }
    *n = (int)len;
    return FL_OK;
}

static fl_layer *normalization_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    int axis = -1, nm = 0, nv = 0;
    bool none, invert;
    float *mean = NULL, *var = NULL;
    fl_layer *l = NULL;
    if (get_one_axis(c, cfg, "axis", &axis, &none) || get_bool(c, cfg, "invert", false, &invert) ||
        get_values(c, cfg, "mean", &mean, &nm) || get_values(c, cfg, "variance", &var, &nv))
        goto done;
    if (nm != nv) {
        kfail(c, FL_ERR_FORMAT, "'mean' has %d values and 'variance' %d, expected the same (or both null)", nm, nv);
        goto done;
    }
    l = fl_normalization_((fl_normalization_args){.axis = axis, .axis_none = none, .mean = mean, .variance = var,
                                                  .size = nm, .invert = invert});
done:
    free(mean);
    free(var);
    return l;
}

static json_object *jvalues(const float *v, int n) {
    if (n == 1) return jfloat(v[0]);
    json_object *a = json_object_new_array();
    for (int i = 0; i < n; i++) json_object_array_add(a, jfloat(v[i]));
    return a;
}

static void normalization_to(const fl_layer *l, json_object *c) {
    json_object *ax = json_object_new_array();
    if (!l->a.norm.axis_none) json_object_array_add(ax, jint(l->a.norm.axis));
    put(c, "axis", ax);
    put(c, "invert", jbool(l->a.norm.invert));
    put(c, "mean", l->a.norm.size ? jvalues(l->a.norm.mean, l->a.norm.size) : NULL);
    put(c, "variance", l->a.norm.size ? jvalues(l->a.norm.variance, l->a.norm.size) : NULL);
}

/* ---------------------------------------------------------- UpSampling2D */

static fl_layer *upsample2d_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    int sh, sw;
    const char *interp = jstr(jkey(cfg, "interpolation"));
    if (jkey(cfg, "interpolation") && !interp) return kfail(c, FL_ERR_FORMAT, "'interpolation' is not a string"), NULL;
    if (get_pair(c, cfg, "size", 2, false, &sh, &sw) || check_data_format(c, cfg)) return NULL;
    fl_interpolation mode = FL_NEAREST;
    if (interp && strcmp(interp, "bilinear") == 0) mode = FL_BILINEAR;
    else if (interp && strcmp(interp, "nearest") != 0)
        return kfail(c, FL_ERR_UNSUPPORTED, "interpolation '%s' is not supported (only \"nearest\" and \"bilinear\")",
                     interp), NULL;
    return fl_up_sampling2d_((fl_up_sampling2d_args){.size_h = sh, .size_w = sw, .interpolation = mode});
}

static void upsample2d_to(const fl_layer *l, json_object *c) {
    const fl_up_sampling2d_args *a = &l->a.up;
    put(c, "size", jpair(a->size_h, a->size_w));
    put(c, "data_format", jstring("channels_last"));
    put(c, "interpolation", jstring(a->interpolation == FL_BILINEAR ? "bilinear" : "nearest"));
}

/* -------------------------------------------------------------- Resizing */

static fl_layer *resizing_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    int64_t h, w;
    bool crop, pad, antialias;
    double fill;
    const char *interp = jstr(jkey(cfg, "interpolation")), *fill_mode = jstr(jkey(cfg, "fill_mode"));
    if (jkey(cfg, "interpolation") && !interp) return kfail(c, FL_ERR_FORMAT, "'interpolation' is not a string"), NULL;
    if (jkey(cfg, "fill_mode") && !fill_mode) return kfail(c, FL_ERR_FORMAT, "'fill_mode' is not a string"), NULL;
    if (get_int(c, cfg, "height", 0, true, &h) || get_int(c, cfg, "width", 0, true, &w) || check_data_format(c, cfg) ||
        get_bool(c, cfg, "crop_to_aspect_ratio", false, &crop) || get_bool(c, cfg, "pad_to_aspect_ratio", false, &pad) ||
        get_num(c, cfg, "fill_value", 0, false, &fill) || get_bool(c, cfg, "antialias", false, &antialias))
        return NULL;
    if (h <= 0 || h > INT32_MAX || w <= 0 || w > INT32_MAX)
        return kfail(c, FL_ERR_FORMAT, "height %lld and width %lld, expected > 0", (long long)h, (long long)w), NULL;
    if (interp && strcmp(interp, "bilinear") != 0 && strcmp(interp, "nearest") != 0)
        return kfail(c, FL_ERR_UNSUPPORTED, "interpolation '%s' is not supported (only \"bilinear\" and \"nearest\")",
                     interp), NULL;
    if (antialias)
        return kfail(c, FL_ERR_UNSUPPORTED, "antialias=True is not supported (only False, Keras's default)"), NULL;
    if (fill_mode && strcmp(fill_mode, "constant") != 0)
        return kfail(c, FL_ERR_UNSUPPORTED, "fill_mode '%s' is not supported (only \"constant\", as Keras)",
                     fill_mode), NULL;
    if (pad && fill != 0)
        return kfail(c, FL_ERR_UNSUPPORTED, "pad_to_aspect_ratio with fill_value %g is not supported (only 0)", fill),
               NULL;
    if (crop && pad)
        return kfail(c, FL_ERR_FORMAT, "crop_to_aspect_ratio and pad_to_aspect_ratio, expected at most one"), NULL;
    return fl_resizing_((fl_resizing_args){.height = (int)h, .width = (int)w,
                                           .nearest = interp && strcmp(interp, "nearest") == 0,
                                           .crop_to_aspect_ratio = crop, .pad_to_aspect_ratio = pad});
}

static void resizing_to(const fl_layer *l, json_object *c) {
    const fl_resizing_args *a = &l->a.resize;
    put(c, "data_format", jstring("channels_last"));
    put(c, "height", jint(a->height));
    put(c, "width", jint(a->width));
    put(c, "interpolation", jstring(a->nearest ? "nearest" : "bilinear"));
    put(c, "crop_to_aspect_ratio", jbool(a->crop_to_aspect_ratio));
    put(c, "pad_to_aspect_ratio", jbool(a->pad_to_aspect_ratio));
    put(c, "fill_mode", jstring("constant"));
    put(c, "fill_value", jfloat(0.0));
    put(c, "antialias", jbool(false));
}

/* ------------------------------------------------------- Conv2DTranspose */

static fl_layer *conv2d_transpose_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    int64_t filters;
    int kh, kw, sh, sw, dh, dw;
    bool use_bias;
    fl_activation act;
    fl_padding pad;
    if (get_int(c, cfg, "filters", 0, true, &filters) || get_pair(c, cfg, "kernel_size", 0, true, &kh, &kw) ||
        get_pair(c, cfg, "strides", 1, false, &sh, &sw) || get_padding(c, cfg, &pad) || check_data_format(c, cfg) ||
        get_pair(c, cfg, "dilation_rate", 1, false, &dh, &dw) || get_activation(c, cfg, "activation", &act) ||
        get_bool(c, cfg, "use_bias", true, &use_bias) || check_kernel_extras(c, cfg) ||
        must_be_null(c, cfg, "output_padding", "an output_padding (only None, Keras's default)"))
        return NULL;
    if (dh != 1 || dw != 1)
        return kfail(c, FL_ERR_UNSUPPORTED, "dilation_rate (%d, %d) is not supported (only 1)", dh, dw), NULL;
    if (filters <= 0 || filters > INT32_MAX) return kfail(c, FL_ERR_FORMAT, "filters is %lld", (long long)filters), NULL;
    return fl_conv2d_transpose_((fl_conv2d_args){.filters = (int)filters, .kernel_h = kh, .kernel_w = kw,
                                                 .stride_h = sh, .stride_w = sw, .padding = pad, .activation = act,
                                                 .no_bias = !use_bias});
}

static void conv2d_transpose_to(const fl_layer *l, json_object *c) {
    const fl_conv2d_args *a = &l->a.conv;
    put(c, "filters", jint(a->filters));
    put(c, "kernel_size", jpair(a->kernel_h, a->kernel_w));
    put(c, "strides", jpair(a->stride_h, a->stride_w));
    put(c, "padding", jstring(a->padding == FL_SAME ? "same" : "valid"));
    put(c, "output_padding", NULL);
    put(c, "data_format", jstring("channels_last"));
    put(c, "dilation_rate", jpair(1, 1));
    put(c, "activation", jstring(fl_activation_name(a->activation)));
    put(c, "use_bias", jbool(!a->no_bias));
    put_kernel_extras(c, true);
}

/* --------------------------------------------------------------- Permute */

static fl_layer *permute_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    json_object *t = jkey(cfg, "dims");
    int dims[FL_MAX_DIMS];
    size_t n = jis(t, json_type_array) ? json_object_array_length(t) : 0;
    if (n < 1 || n > FL_MAX_DIMS - 1)
        return kfail(c, FL_ERR_FORMAT, "'dims' is %s with %zu entries, expected a list of 1 to %d axes", jtype_name(t),
                     n, FL_MAX_DIMS - 1), NULL;
    for (size_t i = 0; i < n; i++) {
        json_object *d = json_object_array_get_idx(t, i);
        if (!jis(d, json_type_int) || json_object_get_int64(d) < 1 || json_object_get_int64(d) > (int64_t)n)
            return kfail(c, FL_ERR_FORMAT, "'dims' entry %zu is %s, expected an axis from 1 to %zu", i,
                         d ? json_object_to_json_string(d) : "null", n), NULL;
        dims[i] = (int)json_object_get_int64(d);
        for (size_t k = 0; k < i; k++)
            if (dims[k] == dims[i])
                return kfail(c, FL_ERR_FORMAT, "'dims' names axis %d twice, expected a permutation of 1..%zu",
                             dims[i], n), NULL;
    }
    return fl_permute_((int)n, dims);
}

static void permute_to(const fl_layer *l, json_object *c) {
    json_object *t = json_object_new_array();
    for (int i = 0; i < l->a.perm.ndim; i++) json_object_array_add(t, jint(l->a.perm.dims[i]));
    put(c, "dims", t);
}

/* ------------------------------------------------ SimpleRNN, LSTM, GRU */

/* Every key Keras 3.15 writes for the three classes (and Keras 2's
 * implementation/time_major): read, or refused where it changes the result. */
static fl_layer *rnn_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)x;
    static const char *const init[] = {"kernel_initializer", "recurrent_initializer", "bias_initializer", NULL};
    const fl_keras_layer_def *def = fl_keras_layer_by_class(cls);
    const bool lstm = def->kind == FL_L_LSTM, gru = def->kind == FL_L_GRU;
    int64_t units, impl;
    bool seq, state, back, stateful, unroll, zero, use_bias, ufb = true, ra = true, tm;
    double drop, rdrop;
    fl_activation act = FL_TANH, ract = FL_SIGMOID;
    if (get_int(c, cfg, "units", 0, true, &units) || get_bool(c, cfg, "return_sequences", false, &seq) ||
        get_bool(c, cfg, "return_state", false, &state) || get_bool(c, cfg, "go_backwards", false, &back) ||
        get_bool(c, cfg, "stateful", false, &stateful) || get_bool(c, cfg, "unroll", false, &unroll) ||
        get_bool(c, cfg, "zero_output_for_mask", false, &zero) || get_bool(c, cfg, "use_bias", true, &use_bias) ||
        (jhas(cfg, "activation") && get_activation(c, cfg, "activation", &act)) ||
        ((lstm || gru) && jhas(cfg, "recurrent_activation") && get_activation(c, cfg, "recurrent_activation", &ract)) ||
        (lstm && get_bool(c, cfg, "unit_forget_bias", true, &ufb)) || (gru && get_bool(c, cfg, "reset_after", true, &ra)) ||
        get_num(c, cfg, "dropout", 0, false, &drop) || get_num(c, cfg, "recurrent_dropout", 0, false, &rdrop) ||
        get_int(c, cfg, "implementation", 2, false, &impl) || get_bool(c, cfg, "time_major", false, &tm) ||
        check_initializers(c, cfg, init) || must_be_null(c, cfg, "kernel_regularizer", "weight regularizers") ||
        must_be_null(c, cfg, "recurrent_regularizer", "weight regularizers") ||
        must_be_null(c, cfg, "bias_regularizer", "weight regularizers") ||
        must_be_null(c, cfg, "activity_regularizer", "activity regularizers") ||
        must_be_null(c, cfg, "kernel_constraint", "weight constraints") ||
        must_be_null(c, cfg, "recurrent_constraint", "weight constraints") ||
        must_be_null(c, cfg, "bias_constraint", "weight constraints"))
        return NULL;
    (void)unroll; (void)impl; /* the same maths either way */
    if (units <= 0 || units > INT32_MAX) return kfail(c, FL_ERR_FORMAT, "units is %lld", (long long)units), NULL;
    if (tm) return kfail(c, FL_ERR_UNSUPPORTED, "time_major=True is not supported (flynn's sequences are batch-major)"), NULL;
    if (stateful)
        return kfail(c, FL_ERR_UNSUPPORTED, "stateful=True is not supported (flynn keeps no state between batches)"), NULL;
    if (!(rdrop >= 0.0 && rdrop < 1.0))
        return kfail(c, FL_ERR_FORMAT, "recurrent_dropout is %g, expected 0 <= recurrent_dropout < 1", rdrop), NULL;
    if (!(drop >= 0.0 && drop < 1.0)) return kfail(c, FL_ERR_FORMAT, "dropout is %g, expected 0 <= dropout < 1", drop), NULL;
    fl_rnn_args a = {.units = (int)units, .activation = act, .recurrent_activation = ract,
                     .activation_linear = act == FL_LINEAR, .recurrent_linear = ract == FL_LINEAR,
                     .no_bias = !use_bias, .no_unit_forget_bias = !ufb, .no_reset_after = !ra, .dropout = (float)drop,
                     .recurrent_dropout = (float)rdrop, .return_sequences = seq, .go_backwards = back, .zero_output_for_mask = zero, .unroll = unroll,
                     .return_state = state};
    return lstm ? fl_lstm_(a) : gru ? fl_gru_(a) : fl_simple_rnn_(a);
}

static json_object *orthogonal_init(void) {
    json_object *o = initializer("Orthogonal");
    json_object *c = jkey(o, "config");
    put(c, "seed", NULL);
    put(c, "gain", jfloat(1.0));
    return o;
}

/* Keras 3.15's get_config, in its order; zero: zero_output_for_mask as
 * written (Bidirectional's layers: return_sequences) */
static void rnn_keys_to(const fl_layer *l, json_object *c, bool zero) {
    const fl_rnn_args *a = &l->a.rnn;
    const bool lstm = l->kind == FL_L_LSTM, gru = l->kind == FL_L_GRU;
    put(c, "return_sequences", jbool(a->return_sequences));
    put(c, "return_state", jbool(a->return_state));
    put(c, "go_backwards", jbool(a->go_backwards));
    put(c, "stateful", jbool(false));
    put(c, "unroll", jbool(a->unroll));
    put(c, "zero_output_for_mask", jbool(zero));
    put(c, "units", jint(a->units));
    put(c, "activation", jstring(fl_activation_name(a->activation)));
    if (lstm || gru) put(c, "recurrent_activation", jstring(fl_activation_name(a->recurrent_activation)));
    put(c, "use_bias", jbool(!a->no_bias));
    put(c, "kernel_initializer", initializer("GlorotUniform"));
    put(c, "recurrent_initializer", orthogonal_init());
    put(c, "bias_initializer", initializer("Zeros"));
    if (lstm) put(c, "unit_forget_bias", jbool(!a->no_unit_forget_bias));
    put(c, "kernel_regularizer", NULL);
    put(c, "recurrent_regularizer", NULL);
    put(c, "bias_regularizer", NULL);
    put(c, "activity_regularizer", NULL);
    put(c, "kernel_constraint", NULL);
    put(c, "recurrent_constraint", NULL);
    put(c, "bias_constraint", NULL);
    put(c, "dropout", jfloat(a->dropout));
    put(c, "recurrent_dropout", jfloat(a->recurrent_dropout));
    if (gru) put(c, "reset_after", jbool(!a->no_reset_after));
    if (lstm || gru) put(c, "seed", NULL);
}

static void rnn_to(const fl_layer *l, json_object *c) { rnn_keys_to(l, c, l->a.rnn.zero_output_for_mask); }

/* -------------------------------------------------------- Bidirectional */

/* One of the wrapped layers: {"class_name": ..., "config": {...}}. */
static fl_layer *wrapped_from(const kctx *c, json_object *o, const char *key) {
    const char *cls = jstr(jkey(o, "class_name"));
    json_object *cfg = jkey(o, "config");
    if (!jis(o, json_type_object) || !cls || !jis(cfg, json_type_object))
        return kfail(c, FL_ERR_FORMAT, "'%s' is %s, expected a layer object with class_name and config", key,
                     jtype_name(o)), NULL;
    const fl_keras_layer_def *d = fl_keras_layer_by_class(cls);
    if (!d || (d->kind != FL_L_SIMPLE_RNN && d->kind != FL_L_LSTM && d->kind != FL_L_GRU))
        return kfail(c, FL_ERR_UNSUPPORTED, "'%s' is a %s; flynn's Bidirectional wraps SimpleRNN, LSTM and GRU", key,
                     cls), NULL;
    bool trainable;
    if (check_builtin_object(c, o, key) || get_bool(c, cfg, "trainable", true, &trainable) || check_dtype(c, cfg))
        return NULL;
    if (!trainable) return kfail(c, FL_ERR_UNSUPPORTED, "'%s' is frozen (trainable false); flynn trains every layer", key), NULL;
    klayer_extra x;
    fl_layer *l = d->from_config(c, cls, cfg, &x);
    if (!l) {
        char why[600];
        snprintf(why, sizeof why, "%s", fl_last_error());
        if (strncmp(why, c->src, strlen(c->src)) == 0) return NULL;
        return kfail(c, fl_last_status() ? fl_last_status() : FL_ERR_FORMAT, "'%s': %s", key, why), NULL;
    }
    const char *name = jstr(jkey(cfg, "name"));
    if (name && strlen(name) < sizeof l->name) {
        strcpy(l->name, name);
        l->user_named = true;
    }
    return l;
}

static fl_layer *bidirectional_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    json_object *mm = jkey(cfg, "merge_mode");
    const char *mode = jstr(mm);
    fl_merge_mode m;
    if (jhas(cfg, "merge_mode") && !mm) m = FL_MERGE_NONE; /* two outputs, forward then backward */
    else if (!mm || (mode && strcmp(mode, "concat") == 0)) m = FL_MERGE_CONCAT;
    else if (mode && strcmp(mode, "sum") == 0) m = FL_MERGE_SUM;
    else if (mode && strcmp(mode, "mul") == 0) m = FL_MERGE_MUL;
    else if (mode && strcmp(mode, "ave") == 0) m = FL_MERGE_AVE;
    else return kfail(c, FL_ERR_FORMAT, "merge_mode is %s, expected concat, sum, mul, ave or null",
                      mode ? mode : jtype_name(mm)), NULL;
    fl_layer *fwd = wrapped_from(c, jkey(cfg, "layer"), "layer");
    if (!fwd) return NULL;
    fl_layer *bwd = NULL;
    if (jkey(cfg, "backward_layer") && !(bwd = wrapped_from(c, jkey(cfg, "backward_layer"), "backward_layer"))) {
        fl_layer_free(fwd);
        return NULL;
    }
    return fl_bidirectional_(fwd, (fl_bidirectional_args){.merge_mode = m, .backward_layer = bwd});
}

static json_object *wrapped_to(const fl_layer *w, bool zero) {
    json_object *c = json_object_new_object();
    put(c, "name", jstring(w->name));
    put(c, "trainable", jbool(true));
    put(c, "dtype", dtype_policy());
    rnn_keys_to(w, c, zero);
    return jobject("keras.layers", fl_layer_kind_class(w->kind), c, false);
}

static void bidirectional_to(const fl_layer *l, json_object *c) {
    static const char *modes[] = {"concat", "sum", "mul", "ave"};
    const bool zero = l->a.bidi.fwd->a.rnn.return_sequences; /* Keras forces it so */
    put(c, "merge_mode", l->a.bidi.merge_mode == FL_MERGE_NONE ? NULL : jstring(modes[l->a.bidi.merge_mode]));
    put(c, "layer", wrapped_to(l->a.bidi.fwd, zero));
    put(c, "backward_layer", wrapped_to(l->a.bidi.bwd, zero));
}

/* ---------------------------------------------------- Embedding, Masking */

static fl_layer *embedding_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    static const char *const init[] = {"embeddings_initializer", NULL};
    int64_t in, out;
    bool mask_zero;
    json_object *len = jkey(cfg, "input_length"); /* tf.keras 2: the sequence length, informative only */
    if (get_int(c, cfg, "input_dim", 0, true, &in) || get_int(c, cfg, "output_dim", 0, true, &out) ||
        get_bool(c, cfg, "mask_zero", false, &mask_zero) || check_initializers(c, cfg, init) ||
        must_be_null(c, cfg, "embeddings_regularizer", "weight regularizers") ||
        must_be_null(c, cfg, "activity_regularizer", "activity regularizers") ||
        must_be_null(c, cfg, "embeddings_constraint", "weight constraints") ||
        must_be_null(c, cfg, "lora_rank", "LoRA") || must_be_null(c, cfg, "quantization_config", "quantized layers") ||
        (len && !json_object_is_type(len, json_type_null) && !jis(len, json_type_int) &&
         kfail(c, FL_ERR_FORMAT, "'input_length' is %s, expected a number or null", jtype_name(len))))
        return NULL;
    bool sparse = false;
    if (get_bool(c, cfg, "sparse", false, &sparse)) return NULL;
    if (sparse)
        return kfail(c, FL_ERR_UNSUPPORTED, "sparse is true (sparse gradients for the table); flynn computes dense "
                     "ones"), NULL;
    if (in <= 0 || in > INT32_MAX || out <= 0 || out > INT32_MAX)
        return kfail(c, FL_ERR_FORMAT, "input_dim %lld and output_dim %lld, expected 1 to %d", (long long)in,
                     (long long)out, INT32_MAX), NULL;
    return fl_embedding_((fl_embedding_args){.input_dim = (int)in, .output_dim = (int)out, .mask_zero = mask_zero});
}

static void embedding_to(const fl_layer *l, json_object *c) {
    const fl_embedding_args *a = &l->a.emb;
    put(c, "input_dim", jint(a->input_dim));
    put(c, "output_dim", jint(a->output_dim));
    json_object *init = initializer("RandomUniform");
    json_object *ic = jkey(init, "config");
    put(ic, "seed", NULL);
    put(ic, "minval", jfloat(-0.05));
    put(ic, "maxval", jfloat(0.05));
    put(c, "embeddings_initializer", init);
    put(c, "embeddings_regularizer", NULL);
    put(c, "activity_regularizer", NULL);
    put(c, "embeddings_constraint", NULL);
    put(c, "mask_zero", jbool(a->mask_zero));
    put(c, "quantization_config", NULL);
}

static fl_layer *masking_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    double v;
    if (get_num(c, cfg, "mask_value", 0.0, false, &v)) return NULL;
    return fl_masking_((fl_masking_args){.mask_value = (float)v});
}

static void masking_to(const fl_layer *l, json_object *c) { put(c, "mask_value", jfloat(l->a.masking.mask_value)); }

/* The mask operations of a Functional model (NotEqual, Any, LogicalOr,
 * LogicalAnd): NotEqual's constant comes with its call (keras_config.c). */
static fl_layer *mask_op_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)x;
    const fl_keras_layer_def *d = fl_keras_layer_by_class(cls);
    if (d->kind == FL_L_ANY) {
        json_object *ax = jkey(cfg, "axis");
        bool keep = false;
        if (get_bool(c, cfg, "keepdims", false, &keep)) return NULL;
        if (!jis(ax, json_type_int) || json_object_get_int64(ax) != -1 || keep)
            return kfail(c, FL_ERR_UNSUPPORTED, "Any over axis %s%s: flynn computes a mask's Any over the last axis "
                         "(axis -1, keepdims false)", ax ? json_object_to_json_string_ext(ax, JSON_C_TO_STRING_PLAIN)
                         : "null", keep ? " with keepdims" : ""), NULL;
    }
    return fl_mask_op_layer(d->kind, 0.0f, NULL);
}

static void mask_op_to(const fl_layer *l, json_object *c) {
    if (l->kind == FL_L_CONVERT_TO_TENSOR) {
        put(c, "dtype", NULL);
        put(c, "sparse", NULL);
        put(c, "ragged", NULL);
    }
    if (l->kind != FL_L_ANY) return;
    put(c, "axis", jint(-1));
    put(c, "keepdims", jbool(false));
}

/* ------------------------------------------------------------- the table */

/* ------------------------------------------ sequences: normalisation, attention */

static fl_layer *layernorm_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    static const char *const init[] = {"beta_initializer", "gamma_initializer", NULL};
    double eps;
    bool center, scale, rms;
    if (get_num(c, cfg, "epsilon", 1e-3, false, &eps) || get_bool(c, cfg, "center", true, &center) ||
        get_bool(c, cfg, "scale", true, &scale) || get_bool(c, cfg, "rms_scaling", false, &rms) ||
        check_initializers(c, cfg, init) || must_be_null(c, cfg, "beta_regularizer", "weight regularizers") ||
        must_be_null(c, cfg, "gamma_regularizer", "weight regularizers") ||
        must_be_null(c, cfg, "beta_constraint", "weight constraints") ||
        must_be_null(c, cfg, "gamma_constraint", "weight constraints"))
        return NULL;
    fl_layer_normalization_args a = {.epsilon = (float)eps, .no_center = !center, .no_scale = !scale,
                                     .rms_scaling = rms};
    json_object *ax = jkey(cfg, "axis");
    if (jis(ax, json_type_int)) {
        a.axis = (int)json_object_get_int64(ax);
    } else if (jis(ax, json_type_array) && json_object_array_length(ax) >= 1 &&
               json_object_array_length(ax) < FL_MAX_DIMS) {
        for (size_t i = 0; i < json_object_array_length(ax); i++) {
            json_object *v = json_object_array_get_idx(ax, i);
            int64_t k = jis(v, json_type_int) ? json_object_get_int64(v) : 0;
            if (k == 0 || k < -(FL_MAX_DIMS - 1) || k >= FL_MAX_DIMS)
                return kfail(c, FL_ERR_UNSUPPORTED, "axis %s: expected non-batch axes",
                             json_object_to_json_string(ax)), NULL;
            a.axes[i] = (int)k;
        }
    } else if (ax) {
        return kfail(c, FL_ERR_FORMAT, "axis is %s, expected an int or a list of ints", jtype_name(ax)), NULL;
    }
    if (a.axis == 0 && !a.axes[0] && ax) return kfail(c, FL_ERR_UNSUPPORTED, "axis 0 (the batch) is not supported"), NULL;
    if (!(eps > 0)) return kfail(c, FL_ERR_FORMAT, "epsilon %g, expected > 0", eps), NULL;
    return fl_layer_normalization_(a);
}

static void layernorm_to(const fl_layer *l, json_object *c) {
    const fl_layer_normalization_args *a = &l->a.ln;
    if (a->axes[0]) {
        json_object *ax = json_object_new_array();
        for (int i = 0; i < FL_MAX_DIMS && a->axes[i]; i++) json_object_array_add(ax, jint(a->axes[i]));
        put(c, "axis", ax);
    } else {
        put(c, "axis", jint(a->axis));
    }
    put(c, "epsilon", jfloat(a->epsilon));
    put(c, "center", jbool(!a->no_center));
    put(c, "scale", jbool(!a->no_scale));
    put(c, "rms_scaling", jbool(a->rms_scaling));
    put(c, "beta_initializer", initializer("Zeros"));
    put(c, "gamma_initializer", initializer("Ones"));
    put(c, "beta_regularizer", NULL);
    put(c, "gamma_regularizer", NULL);
    put(c, "beta_constraint", NULL);
    put(c, "gamma_constraint", NULL);
}

/* An int or a one-int list (output_shape), 0 when null. */
static fl_status get_int_or_one(const kctx *c, json_object *cfg, const char *key, int64_t *out) {
    json_object *v = jkey(cfg, key);
    *out = 0;
    if (!v) return FL_OK;
    if (jis(v, json_type_array) && json_object_array_length(v) == 1) v = json_object_array_get_idx(v, 0);
    if (!jis(v, json_type_int) || json_object_get_int64(v) <= 0 || json_object_get_int64(v) > INT32_MAX)
        return kfail(c, FL_ERR_UNSUPPORTED, "%s %s is not supported (an int > 0, or null)", key,
                     json_object_to_json_string(jkey(cfg, key)));
    *out = json_object_get_int64(v);
    return FL_OK;
}

static fl_status get_seed(const kctx *c, json_object *cfg, uint64_t *seed) {
    int64_t v;
    *seed = 0;
    if (!jkey(cfg, "seed")) return FL_OK;
    FL_TRY(get_int(c, cfg, "seed", 0, false, &v));
    *seed = (uint64_t)v;
    return FL_OK;
}

static fl_layer *mha_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    int64_t heads, kd, vd, out;
    double dropout;
    bool use_bias, gate;
    uint64_t seed;
    if (get_int(c, cfg, "num_heads", 0, true, &heads) || get_int(c, cfg, "key_dim", 0, true, &kd) ||
        get_int(c, cfg, "value_dim", 0, false, &vd) || get_num(c, cfg, "dropout", 0, false, &dropout) ||
        get_bool(c, cfg, "use_bias", true, &use_bias) || get_bool(c, cfg, "use_gate", false, &gate) ||
        get_int_or_one(c, cfg, "output_shape", &out) || check_kernel_extras(c, cfg) ||
        must_be_null(c, cfg, "sliding_window", "sliding-window attention") || get_seed(c, cfg, &seed))
        return NULL;
    if (gate) return kfail(c, FL_ERR_UNSUPPORTED, "use_gate true is not supported"), NULL;
    json_object *ax = jkey(cfg, "attention_axes");
    if (ax && !(jis(ax, json_type_array) && json_object_array_length(ax) == 1 &&
                jis(json_object_array_get_idx(ax, 0), json_type_int) &&
                json_object_get_int64(json_object_array_get_idx(ax, 0)) == 1) &&
        !(jis(ax, json_type_int) && json_object_get_int64(ax) == 1))
        return kfail(c, FL_ERR_UNSUPPORTED, "attention_axes %s is not supported (flynn attends over the sequence "
                     "axis of (batch, steps, features) inputs: null or [1])", json_object_to_json_string(ax)), NULL;
    if (heads <= 0 || heads > INT32_MAX || kd <= 0 || kd > INT32_MAX || vd < 0 || vd > INT32_MAX)
        return kfail(c, FL_ERR_FORMAT, "num_heads %lld, key_dim %lld, value_dim %lld: expected > 0", (long long)heads,
                     (long long)kd, (long long)vd), NULL;
    return fl_multi_head_attention_((fl_multi_head_attention_args){
        .num_heads = (int)heads, .key_dim = (int)kd, .value_dim = (int)vd, .dropout = (float)dropout,
        .no_bias = !use_bias, .output_shape = (int)out, .seed = seed});
}

static void mha_to(const fl_layer *l, json_object *c) {
    const fl_multi_head_attention_args *a = &l->a.mha;
    put(c, "num_heads", jint(a->num_heads));
    put(c, "key_dim", jint(a->key_dim));
    put(c, "value_dim", jint(a->value_dim));
    put(c, "dropout", jfloat(a->dropout));
    put(c, "use_bias", jbool(!a->no_bias));
    put(c, "use_gate", jbool(false));
    if (a->output_shape) {
        json_object *o = json_object_new_array();
        json_object_array_add(o, jint(a->output_shape));
        put(c, "output_shape", o);
    } else {
        put(c, "output_shape", NULL);
    }
    json_object *ax = json_object_new_array();
    json_object_array_add(ax, jint(1));
    put(c, "attention_axes", ax);
    put(c, "sliding_window", NULL);
    put_kernel_extras(c, true);
    put(c, "seed", a->seed ? jint((int64_t)a->seed) : NULL);
}

static fl_layer *attention_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    bool use_scale;
    double dropout;
    uint64_t seed;
    if (get_bool(c, cfg, "use_scale", false, &use_scale) || get_num(c, cfg, "dropout", 0, false, &dropout) ||
        get_seed(c, cfg, &seed))
        return NULL;
    const char *mode = jstr(jkey(cfg, "score_mode"));
    if (mode && strcmp(mode, "dot") != 0 && strcmp(mode, "concat") != 0)
        return kfail(c, FL_ERR_FORMAT, "score_mode is \"%s\", expected \"dot\" or \"concat\"", mode), NULL;
    return fl_attention_layer_((fl_attention_args){.dropout = (float)dropout, .seed = seed, .use_scale = use_scale,
                                                   .score_mode = mode});
}

static void attention_to(const fl_layer *l, json_object *c) {
    put(c, "use_scale", jbool(l->a.att.use_scale));
    put(c, "score_mode", jstring(l->a.att.score_concat ? "concat" : "dot"));
    put(c, "dropout", jfloat(l->a.att.dropout));
    put(c, "seed", l->a.att.seed ? jint((int64_t)l->a.att.seed) : NULL);
}

static fl_layer *repeat_vector_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls; (void)x;
    int64_t n;
    if (get_int(c, cfg, "n", 0, true, &n)) return NULL;
    if (n <= 0 || n > INT32_MAX) return kfail(c, FL_ERR_FORMAT, "n is %lld, expected > 0", (long long)n), NULL;
    return fl_repeat_vector_((int)n, (fl_name_args){0});
}

static void repeat_vector_to(const fl_layer *l, json_object *c) { put(c, "n", jint(l->a.repeat)); }

/* TimeDistributed: the wrapped layer's own config, read by its class's row. */
static fl_layer *time_distributed_from(const kctx *c, const char *cls, json_object *cfg, klayer_extra *x) {
    (void)cls;
    json_object *lo = jkey(cfg, "layer");
    const char *icls = jstr(jkey(lo, "class_name"));
    json_object *icfg = jkey(lo, "config");
    if (!icls || !jis(icfg, json_type_object))
        return kfail(c, FL_ERR_FORMAT, "'layer' is %s, expected a layer object with class_name and config",
                     jtype_name(lo)), NULL;
    const fl_keras_layer_def *d = fl_keras_layer_by_class(icls);
    if (!d || !d->from_config)
        return kfail(c, FL_ERR_UNSUPPORTED, "the wrapped layer's class '%s' is not supported", icls), NULL;
    fl_layer *in = d->from_config(c, icls, icfg, x);
    if (!in) return NULL;
    const char *iname = jstr(jkey(icfg, "name"));
    if (iname && strlen(iname) < sizeof in->name) { strcpy(in->name, iname); in->user_named = true; }
    return fl_time_distributed_(in, (fl_name_args){0});
}

static void time_distributed_to(const fl_layer *l, json_object *c) {
    const fl_layer *in = l->a.td.inner;
    json_object *ic = json_object_new_object();
    put(ic, "name", jstring(in->name));
    put(ic, "trainable", jbool(true));
    put(ic, "dtype", dtype_policy());
    const fl_keras_layer_def *d = fl_keras_layer_by_kind(in->kind);
    if (d && d->to_config) d->to_config(in, ic);
    put(c, "layer", jobject("keras.layers", fl_layer_kind_class(in->kind), ic, false));
}

/* One row per layer kind, at its kind (its Keras class is FL_LAYER_KINDS's, src/nn/nn.h): read, write,
 * build_config */
#define ROW(k, from, to, build) [FL_L_##k] = {FL_L_##k, from, to, build}
static const fl_keras_layer_def layer_defs[FL_L_COUNT] = {
    ROW(INPUT, NULL, NULL, false), /* read and written with the model structure */
    ROW(DENSE, dense_from, dense_to, true),
    ROW(CONV2D, conv2d_from, conv2d_to, true),
    ROW(MAXPOOL, pool2d_from, pool2d_to, false),
    ROW(AVGPOOL, pool2d_from, pool2d_to, false),
    ROW(GAP, global_pool_from, global_pool_to, false),
    ROW(FLATTEN, flatten_from, flatten_to, true),
    ROW(RESHAPE, reshape_from, reshape_to, false),
    ROW(DROPOUT, dropout_from, dropout_to, false),
    ROW(SPATIAL_DROPOUT2D, dropout_from, dropout_to, false),
    ROW(BATCHNORM, batchnorm_from, batchnorm_to, true),
    ROW(ACTIVATION, activation_from, activation_to, false),
    ROW(ADD, merge_from, NULL, true),
    ROW(MULTIPLY, merge_from, NULL, true),
    ROW(CONCATENATE, concatenate_from, concatenate_to, true),
    ROW(ZEROPAD2D, padding2d_from, padding2d_to, true),
    ROW(CROPPING2D, padding2d_from, padding2d_to, true),
    ROW(GMP, global_pool_from, global_pool_to, false),
    ROW(GAP1D, global_pool_from, global_pool_to, false),
    ROW(GMP1D, global_pool_from, global_pool_to, false),
    ROW(MAXPOOL1D, pool1d_from, pool1d_to, false),
    ROW(AVGPOOL1D, pool1d_from, pool1d_to, false),
    ROW(CONV1D, conv1d_from, conv1d_to, true),
    ROW(SUBTRACT, merge_from, NULL, true),
    ROW(AVERAGE, merge_from, NULL, true),
    ROW(MAXIMUM, merge_from, NULL, true),
    ROW(MINIMUM, merge_from, NULL, true),
    ROW(RELU, relu_from, relu_to, false),
    ROW(LEAKY_RELU, leaky_relu_from, leaky_relu_to, false),
    ROW(ELU, elu_from, elu_to, false),
    ROW(PRELU, prelu_from, prelu_to, true),
    ROW(SOFTMAX, softmax_from, softmax_to, false),
    ROW(RESCALING, rescaling_from, rescaling_to, true),
    ROW(NORMALIZATION, normalization_from, normalization_to, true),
    ROW(DEPTHWISE2D, depthwise2d_from, depthwise2d_to, true),
    ROW(SEPARABLE2D, depthwise2d_from, depthwise2d_to, true),
    ROW(UPSAMPLE2D, upsample2d_from, upsample2d_to, true),
    ROW(CONV2D_TRANSPOSE, conv2d_transpose_from, conv2d_transpose_to, true),
    ROW(PERMUTE, permute_from, permute_to, true),
    ROW(RESIZING, resizing_from, resizing_to, true),
    ROW(LAYERNORM, layernorm_from, layernorm_to, true),
    ROW(MHA, mha_from, mha_to, false),
    ROW(ATTENTION, attention_from, attention_to, true),
    ROW(REPEAT_VECTOR, repeat_vector_from, repeat_vector_to, true),
    ROW(TIME_DISTRIBUTED, time_distributed_from, time_distributed_to, true),
    ROW(ZEROPAD1D, padding1d_from, padding1d_to, true),
    ROW(CROPPING1D, padding1d_from, padding1d_to, true),
    ROW(UPSAMPLE1D, upsample1d_from, upsample1d_to, true),
    ROW(SPATIAL_DROPOUT1D, dropout_from, dropout_to, false),
    ROW(NOT_EQUAL, mask_op_from, mask_op_to, false),
    ROW(ANY, mask_op_from, mask_op_to, false),
    ROW(LOGICAL_OR, mask_op_from, mask_op_to, false),
    ROW(LOGICAL_AND, mask_op_from, mask_op_to, false),
    ROW(CONVERT_TO_TENSOR, mask_op_from, mask_op_to, false),
    ROW(SIMPLE_RNN, rnn_from, rnn_to, true),
    ROW(LSTM, rnn_from, rnn_to, true),
    ROW(GRU, rnn_from, rnn_to, true),
    ROW(BIDIRECTIONAL, bidirectional_from, bidirectional_to, true),
    ROW(EMBEDDING, embedding_from, embedding_to, true),
    ROW(MASKING, masking_from, masking_to, false),
};
/* kind's row, NULL where it has none (a row's kind is its index: a missing one is all zeros) */
const fl_keras_layer_def *fl_keras_layer_by_kind(fl_layer_kind kind) {
    return (unsigned)kind < FL_L_COUNT && layer_defs[kind].kind == kind ? &layer_defs[kind] : NULL;
}

const fl_keras_layer_def *fl_keras_layer_by_class(const char *cls) {
    for (int k = 0; cls && k < FL_L_COUNT; k++)
        if (fl_keras_layer_by_kind((fl_layer_kind)k) && strcmp(fl_layer_kind_class((fl_layer_kind)k), cls) == 0)
            return &layer_defs[k];
    return NULL;
}

/* The Keras class of kind's row in layer_defs, NULL without one (test_keras_files: one row per kind). */
const char *fl_keras_kind_row_class(fl_layer_kind kind) {
    return fl_keras_layer_by_kind(kind) ? fl_layer_kind_class(kind) : NULL;
}

static char supported[4096];
static pthread_once_t supported_once = PTHREAD_ONCE_INIT;

static void make_supported(void) {
    size_t off = 0;
    for (int k = 0; k < FL_L_COUNT && off < sizeof supported; k++)
        if (fl_keras_layer_by_kind((fl_layer_kind)k))
            off += (size_t)snprintf(supported + off, sizeof supported - off, "%s%s", off ? ", " : "",
                                    fl_layer_kind_class((fl_layer_kind)k));
}

const char *fl_keras_supported_layers(void) {
    pthread_once(&supported_once, make_supported);
    return supported;
}
