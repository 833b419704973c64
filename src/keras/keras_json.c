/*
 * keras_json.c — the JSON vocabulary that every part of the Keras config code
 * shares: reading typed keys with messages that name the file, layer and key
 * (get_int, get_pair, must_be_null, ...), the common checks (dtype policy,
 * data_format, built-in objects), and writing values the way Keras writes
 * them (shortest float32 text, DTypePolicy, initializer objects).
 */
#include "keras/keras_json.h"
#include "core/error.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ messages */


fl_status kfail(const kctx *c, fl_status s, const char *fmt, ...) {
    char msg[3800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fl_error(s, "%s: %s%s%s", c->src, c->where, c->where[0] ? ": " : "", msg);
}

void set_where(kctx *c, const char *name, const char *cls) {
    snprintf(c->where, sizeof c->where, "layer '%.80s' (%.60s)", name ? name : "?", cls ? cls : "?");
}

/* ------------------------------------------------------------ JSON reading */

json_object *fl_keras_parse_json(const char *text, size_t len, const char *src) {
    if (len > (size_t)INT32_MAX)
        return fl_error_null(FL_ERR_FORMAT, "%s: JSON text of %zu bytes is too large", src, len);
    json_tokener *tok = json_tokener_new_ex(128);
    if (!tok) return fl_error_null(FL_ERR_NOMEM, "%s: out of memory parsing JSON", src);
    json_object *o = json_tokener_parse_ex(tok, text, (int)len);
    enum json_tokener_error err = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    const char *why = NULL;
    if (o && err == json_tokener_success) {
        while (end < len && (text[end] == ' ' || text[end] == '\n' || text[end] == '\r' || text[end] == '\t')) end++;
        if (end < len) {
            why = "extra data after the JSON value";
            json_object_put(o);
            o = NULL;
        }
    } else if (err == json_tokener_continue || err == json_tokener_success) {
        why = "unexpected end of the text (truncated JSON)";
        end = len;
        json_object_put(o);
        o = NULL;
    } else {
        why = json_tokener_error_desc(err);
        json_object_put(o);
        o = NULL;
    }
    json_tokener_free(tok);
    if (!o) {
        long line = 1, col = 1;
        for (size_t i = 0; i < end && i < len; i++) {
            if (text[i] == '\n') { line++; col = 1; }
            else col++;
        }
        return fl_error_null(FL_ERR_FORMAT, "%s: invalid JSON: %s at line %ld, column %ld (byte %zu of %zu)", src, why,
                             line, col, end, len);
    }
    return o;
}

json_object *jkey(json_object *o, const char *k) {
    json_object *v = NULL;
    if (o && json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, k, &v)) return v;
    return NULL;
}
bool jhas(json_object *o, const char *k) {
    return o && json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, k, NULL);
}
bool jis(json_object *o, json_type t) { return o && json_object_is_type(o, t); }
const char *jstr(json_object *o) { return jis(o, json_type_string) ? json_object_get_string(o) : NULL; }
bool jnum(json_object *o) { return jis(o, json_type_int) || jis(o, json_type_double); }

const char *jtype_name(json_object *o) {
    if (!o) return "null";
    switch (json_object_get_type(o)) {
    case json_type_boolean: return "a boolean";
    case json_type_double: return "a number";
    case json_type_int: return "an integer";
    case json_type_object: return "an object";
    case json_type_array: return "a list";
    case json_type_string: return "a string";
    default: return "null";
    }
}

fl_status get_int(const kctx *c, json_object *cfg, const char *key, int64_t def, bool required, int64_t *out) {
    json_object *v = jkey(cfg, key);
    if (!v) {
        if (required) return kfail(c, FL_ERR_FORMAT, "'%s' is missing or null, expected an integer", key);
        *out = def;
        return FL_OK;
    }
    if (jis(v, json_type_int)) { *out = json_object_get_int64(v); return FL_OK; }
    if (jis(v, json_type_double)) {
        double d = json_object_get_double(v);
        if (d == floor(d) && fabs(d) < 9e15) { *out = (int64_t)d; return FL_OK; }
    }
    return kfail(c, FL_ERR_FORMAT, "'%s' is %s, expected an integer", key, jtype_name(v));
}

fl_status get_num(const kctx *c, json_object *cfg, const char *key, double def, bool required, double *out) {
    json_object *v = jkey(cfg, key);
    if (!v) {
        if (required) return kfail(c, FL_ERR_FORMAT, "'%s' is missing or null, expected a number", key);
        *out = def;
        return FL_OK;
    }
    if (!jnum(v)) return kfail(c, FL_ERR_FORMAT, "'%s' is %s, expected a number", key, jtype_name(v));
    *out = json_object_get_double(v);
    if (!isfinite(*out)) return kfail(c, FL_ERR_FORMAT, "'%s' is not a finite number", key);
    return FL_OK;
}

fl_status get_bool(const kctx *c, json_object *cfg, const char *key, bool def, bool *out) {
    json_object *v = jkey(cfg, key);
    if (!v) { *out = def; return FL_OK; }
    if (!jis(v, json_type_boolean)) return kfail(c, FL_ERR_FORMAT, "'%s' is %s, expected true or false", key, jtype_name(v));
    *out = json_object_get_boolean(v);
    return FL_OK;
}

/* An integer or a list of two integers (kernel_size, strides, ...). */
fl_status get_pair(const kctx *c, json_object *cfg, const char *key, int def, bool required, int *a, int *b) {
    json_object *v = jkey(cfg, key);
    if (!v) {
        if (required) return kfail(c, FL_ERR_FORMAT, "'%s' is missing or null", key);
        *a = *b = def;
        return FL_OK;
    }
    int64_t x[2];
    if (jis(v, json_type_int)) {
        x[0] = x[1] = json_object_get_int64(v);
    } else if (jis(v, json_type_array) && json_object_array_length(v) == 2 &&
               jis(json_object_array_get_idx(v, 0), json_type_int) && jis(json_object_array_get_idx(v, 1), json_type_int)) {
        x[0] = json_object_get_int64(json_object_array_get_idx(v, 0));
        x[1] = json_object_get_int64(json_object_array_get_idx(v, 1));
    } else {
        return kfail(c, FL_ERR_FORMAT, "'%s' is %s, expected an integer or a list of two integers", key, jtype_name(v));
    }
    if (x[0] <= 0 || x[1] <= 0 || x[0] > (1 << 20) || x[1] > (1 << 20))
        return kfail(c, FL_ERR_FORMAT, "'%s' is [%lld, %lld], expected positive sizes", key, (long long)x[0], (long long)x[1]);
    *a = (int)x[0];
    *b = (int)x[1];
    return FL_OK;
}

/* A key whose non-null value changes what the model computes or how it trains. */
fl_status must_be_null(const kctx *c, json_object *cfg, const char *key, const char *what) {
    json_object *v = jkey(cfg, key);
    if (!v) return FL_OK;
    if (jis(v, json_type_boolean) && !json_object_get_boolean(v)) return FL_OK;
    const char *name = jstr(v) ? jstr(v) : jstr(jkey(v, "class_name"));
    return kfail(c, FL_ERR_UNSUPPORTED, "'%s' is set%s%s%s; flynn does not support %s, and ignoring it would change "
                 "what the model computes or how it trains", key, name ? " (" : "", name ? name : "", name ? ")" : "", what);
}

/* A serialized Keras object that must be built in (no registered custom class). */
fl_status check_builtin_object(const kctx *c, json_object *obj, const char *key) {
    if (!jis(obj, json_type_object)) return FL_OK;
    const char *reg = jstr(jkey(obj, "registered_name")), *mod = jstr(jkey(obj, "module"));
    const char *cls = jstr(jkey(obj, "class_name"));
    if ((reg && strcmp(reg, "function") != 0 && (!cls || strcmp(reg, cls) != 0)) ||
        (mod && strncmp(mod, "keras", 5) != 0))
        return kfail(c, FL_ERR_UNSUPPORTED, "'%s' is a custom object (class '%s', registered as '%s', module '%s'); "
                     "flynn only reads built-in Keras objects", key, cls ? cls : "?", reg ? reg : "-", mod ? mod : "-");
    return FL_OK;
}

fl_status get_activation(const kctx *c, json_object *cfg, const char *key, fl_activation *out) {
    json_object *v = jkey(cfg, key);
    *out = FL_LINEAR;
    if (!v) return FL_OK;
    const char *name = jstr(v);
    if (!name && jis(v, json_type_object)) {
        FL_TRY(check_builtin_object(c, v, key));
        name = jstr(jkey(v, "config"));
        if (!name) name = jstr(jkey(jkey(v, "config"), "name"));
        if (!name) name = jstr(jkey(v, "class_name"));
    }
    if (!name) return kfail(c, FL_ERR_FORMAT, "'%s' is %s, expected an activation name", key, jtype_name(v));
    if (fl_activation_from_name(name, out) == FL_OK) return FL_OK;
    fl_clear_error();
    return kfail(c, FL_ERR_UNSUPPORTED, "activation '%s' is not supported (flynn has %s)", name, fl_activation_list());
}

/* dtype: absent/null, "float32", or a DTypePolicy whose name is float32. */
fl_status check_dtype(const kctx *c, json_object *cfg) {
    json_object *d = jkey(cfg, "dtype");
    if (!d) return FL_OK;
    const char *name = jstr(d);
    if (!name && jis(d, json_type_object)) {
        FL_TRY(check_builtin_object(c, d, "dtype"));
        name = jstr(jkey(jkey(d, "config"), "name"));
    }
    if (!name) return kfail(c, FL_ERR_FORMAT, "'dtype' is %s, expected a dtype policy", jtype_name(d));
    if (strcmp(name, "float32") != 0)
        return kfail(c, FL_ERR_UNSUPPORTED, "dtype policy '%s' is not supported (flynn computes in float32 only)", name);
    return FL_OK;
}

fl_status check_data_format(const kctx *c, json_object *cfg) {
    json_object *v = jkey(cfg, "data_format");
    if (!v) return FL_OK;
    const char *s = jstr(v);
    if (!s) return kfail(c, FL_ERR_FORMAT, "'data_format' is %s, expected a string", jtype_name(v));
    if (strcmp(s, "channels_last") != 0)
        return kfail(c, FL_ERR_UNSUPPORTED, "data_format '%s' is not supported (flynn is channels_last, NHWC)", s);
    return FL_OK;
}

fl_status get_padding(const kctx *c, json_object *cfg, fl_padding *out) {
    json_object *v = jkey(cfg, "padding");
    const char *s = v ? jstr(v) : "valid";
    if (!s) return kfail(c, FL_ERR_FORMAT, "'padding' is %s, expected \"valid\" or \"same\"", jtype_name(v));
    if (strcmp(s, "valid") == 0) *out = FL_VALID;
    else if (strcmp(s, "same") == 0) *out = FL_SAME;
    else return kfail(c, FL_ERR_UNSUPPORTED, "padding '%s' is not supported (valid or same)", s);
    return FL_OK;
}

fl_status check_initializers(const kctx *c, json_object *cfg, const char *const *keys) {
    for (int i = 0; keys[i]; i++) FL_TRY(check_builtin_object(c, jkey(cfg, keys[i]), keys[i]));
    return FL_OK;
}

/* Per-sample shape from [null, d1, ...] (the batch entry may be null or a
 * number; a later null is a None axis: FL_DYNAMIC). */
fl_status get_batch_shape(const kctx *c, json_object *v, const char *key, int *ndim, int64_t *shape) {
    if (!jis(v, json_type_array))
        return kfail(c, FL_ERR_FORMAT, "'%s' is %s, expected a list like [null, 28, 28, 1]", key, jtype_name(v));
    size_t n = json_object_array_length(v);
    if (n < 2 || n > FL_MAX_DIMS)
        return kfail(c, FL_ERR_UNSUPPORTED, "'%s' has %zu dimensions (batch included), flynn takes 2 to %d", key, n,
                     FL_MAX_DIMS);
    json_object *b = json_object_array_get_idx(v, 0);
    if (b && !jis(b, json_type_int))
        return kfail(c, FL_ERR_FORMAT, "'%s': the batch dimension is %s, expected null or an integer", key, jtype_name(b));
    for (size_t i = 1; i < n; i++) {
        json_object *d = json_object_array_get_idx(v, i);
        if (!d) { /* None: any length, bound to the data's when it comes (FL_DYNAMIC) */
            shape[i - 1] = FL_DYNAMIC;
            continue;
        }
        if (!jis(d, json_type_int) || json_object_get_int64(d) <= 0 || json_object_get_int64(d) > ((int64_t)1 << 40))
            return kfail(c, FL_ERR_FORMAT, "'%s': dimension %zu is not a positive integer", key, i);
        shape[i - 1] = json_object_get_int64(d);
    }
    *ndim = (int)n - 1;
    return FL_OK;
}

/* ------------------------------------------------------------ JSON writing */

json_object *jfloat(double v) {
    /* the shortest text that reads back as the same float32, Python style */
    char buf[40];
    float f = (float)v;
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)f);
        if ((float)strtod(buf, NULL) == f) break;
    }
    if (!strpbrk(buf, ".eEni")) strcat(buf, ".0");
    return json_object_new_double_s((double)f, buf);
}
json_object *jint(int64_t v) { return json_object_new_int64(v); }
json_object *jbool(bool v) { return json_object_new_boolean(v); }
json_object *jstring(const char *s) { return json_object_new_string(s); }
void put(json_object *o, const char *k, json_object *v) { json_object_object_add(o, k, v); }
json_object *jpair(int a, int b) {
    json_object *x = json_object_new_array();
    json_object_array_add(x, jint(a));
    json_object_array_add(x, jint(b));
    return x;
}

/* [null, d1, ...] of a node (dimension 0 is the batch; an axis that
 * follows a None input axis is null too, as Keras writes it). */
json_object *jshape(const fl_node *n) {
    json_object *a = json_object_new_array();
    json_object_array_add(a, NULL);
    for (int i = 1; i < n->ndim; i++) json_object_array_add(a, n->dyn & (1u << i) ? NULL : jint(n->shape[i]));
    return a;
}

json_object *jobject(const char *module, const char *cls, json_object *config, bool legacy) {
    json_object *o = json_object_new_object();
    if (!legacy) put(o, "module", jstring(module));
    put(o, "class_name", jstring(cls));
    put(o, "config", config ? config : json_object_new_object());
    if (!legacy) put(o, "registered_name", NULL);
    return o;
}

json_object *dtype_policy(void) {
    json_object *c = json_object_new_object();
    put(c, "name", jstring("float32"));
    json_object *o = json_object_new_object();
    put(o, "module", jstring("keras"));
    put(o, "class_name", jstring("DTypePolicy"));
    put(o, "config", c);
    put(o, "registered_name", NULL);
    return o;
}

json_object *initializer(const char *cls) {
    json_object *c = json_object_new_object();
    if (strcmp(cls, "GlorotUniform") == 0) {
        put(c, "seed", NULL);
        put(c, "input_axes", NULL);
        put(c, "output_axes", NULL);
    }
    json_object *o = json_object_new_object();
    put(o, "module", jstring("keras.initializers"));
    put(o, "class_name", jstring(cls));
    put(o, "config", c);
    put(o, "registered_name", NULL);
    return o;
}
