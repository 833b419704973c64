/*
 * fit_data.c — what `flynn train` and `flynn evaluate` add to the data for
 * fit: the arrays of a model with several inputs from one .npz, named by
 * the model's input names (Keras's fit(x=[a, b], y)), and the sample and
 * class weights (--sample-weight W.npy, --class-weight K=W,...|balanced).
 * Everything goes through the public API (flynn/flynn.h).
 */
#include "fit_data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Takes array `name` out of a (NULL when absent). */
static fl_tensor *take(fl_arrays *a, const char *name) {
    for (int j = 0; j < a->count; j++)
        if (strcmp(a->names[j], name) == 0 && a->arrays[j]) {
            fl_tensor *t = a->arrays[j];
            a->arrays[j] = NULL;
            return t;
        }
    return NULL;
}

/* x as model input i takes it: integers stay integers for an int32 input, float32 stays, the rest becomes float32. */
static fl_tensor *as_input(const char *cmd, const char *path, const char *name, fl_tensor *t, const fl_model *m, int i) {
    bool keep = fl_tensor_dtype(t) == FL_INT32 || fl_tensor_dtype(t) == FL_FLOAT32 ||
                (fl_tensor_dtype(t) == FL_UINT8 && fl_model_input_dtype(m, i) == FL_INT32);
    if (keep) return t;
    fl_tensor *f = fl_to_float(t, 1.0f);
    fl_tensor_free(t);
    if (!f) fprintf(stderr, "flynn %s: error: %s: array '%s': %s\n", cmd, path, name, fl_last_error());
    return f;
}

static void held(const fl_arrays *a, char *buf, size_t n) {
    buf[0] = 0;
    for (int j = 0; j < a->count; j++)
        snprintf(buf + strlen(buf), n - strlen(buf), "%s'%s'", j ? ", " : "", a->names[j]);
}

void flynn_multi_free(flynn_multi *mi) {
    for (int i = 1; i < mi->nx; i++) { fl_tensor_free(mi->x[i]); fl_tensor_free(mi->x_test[i]); }
    memset(mi, 0, sizeof *mi);
}

int flynn_multi_load(const char *cmd, const char *path, const fl_model *m, flynn_multi *mi, fl_dataset *d, char *desc,
                     size_t desc_len) {
    memset(mi, 0, sizeof *mi);
    memset(d, 0, sizeof *d);
    int nx = fl_model_num_inputs(m);
    if (nx > FLYNN_MAX_INPUTS) {
        fprintf(stderr, "flynn %s: error: the model has %d inputs, the command line takes at most %d\n", cmd, nx,
                FLYNN_MAX_INPUTS);
        return 1;
    }
    fl_arrays a;
    if (fl_load_npz(path, &a) != FL_OK) { fprintf(stderr, "flynn %s: error: %s\n", cmd, fl_last_error()); return 1; }
    char have[1024], names[512] = "";
    held(&a, have, sizeof have);
    for (int i = 0; i < nx; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'", i ? ", " : "", fl_model_input_name(m, i));
    mi->nx = nx;
    int rc = 0;
    for (int i = 0; i < nx && rc == 0; i++) {
        const char *name = fl_model_input_name(m, i);
        char tn[300];
        snprintf(tn, sizeof tn, "%s_test", name);
        if (!(mi->x[i] = take(&a, name))) {
            fprintf(stderr, "flynn %s: error: %s: no array for model input %d '%s': a model with %d inputs takes one "
                    "array per input, named as the inputs (%s), and 'y'; the file holds %s\n", cmd, path, i, name, nx,
                    names, have);
            rc = 1;
        } else if (!(mi->x[i] = as_input(cmd, path, name, mi->x[i], m, i))) {
            rc = 1;
        } else if ((mi->x_test[i] = take(&a, tn)) && !(mi->x_test[i] = as_input(cmd, path, tn, mi->x_test[i], m, i))) {
            rc = 1;
        }
    }
    if (rc == 0 && !(d->y_train = take(&a, "y")) && !(d->y_train = take(&a, "y_train"))) {
        fprintf(stderr, "flynn %s: error: %s: no array 'y' (the targets; or 'y_train'); the file holds %s\n", cmd, path,
                have);
        rc = 1;
    }
    d->y_test = rc == 0 ? take(&a, "y_test") : NULL;
    /* a test set: every input's "<input>_test" and y_test, or none of them */
    int ntest = 0;
    for (int i = 0; i < nx; i++) ntest += mi->x_test[i] != NULL;
    if (rc == 0 && (ntest || d->y_test) && (ntest != nx || !d->y_test)) {
        char miss[600] = "";
        for (int i = 0; i < nx; i++)
            if (!mi->x_test[i])
                snprintf(miss + strlen(miss), sizeof miss - strlen(miss), "%s'%s_test'", miss[0] ? ", " : "",
                         fl_model_input_name(m, i));
        if (!d->y_test) snprintf(miss + strlen(miss), sizeof miss - strlen(miss), "%s'y_test'", miss[0] ? ", " : "");
        fprintf(stderr, "flynn %s: error: %s: a test set needs '<input>_test' for every input and 'y_test'; missing %s\n",
                cmd, path, miss);
        rc = 1;
    }
    for (int i = 0; rc == 0 && i < nx; i++) { /* the same N everywhere (fit says which input differs too) */
        int64_t n = fl_tensor_ndim(mi->x[i]) ? fl_tensor_dim(mi->x[i], 0) : 0;
        if (n != fl_tensor_dim(d->y_train, 0)) {
            fprintf(stderr, "flynn %s: error: %s: array '%s' has %lld samples, 'y' has %lld\n", cmd, path,
                    fl_model_input_name(m, i), (long long)n, (long long)fl_tensor_dim(d->y_train, 0));
            rc = 1;
        }
    }
    fl_arrays_free(&a);
    d->x_train = mi->x[0];
    d->x_test = mi->x_test[0];
    if (rc) {
        flynn_multi_free(mi);
        fl_dataset_free(d);
        return rc;
    }
    snprintf(desc, desc_len, "%s: %d inputs (%s) and y", path, nx, names);
    return 0;
}

/* The class of each sample of y, as Keras's class_weight_to_sample_weights
 * finds it: argmax of a one-hot row, else the value rounded half to even.
 * NULL with the message printed when y has no class per sample. */
static int64_t *classes_of(const char *cmd, const fl_tensor *y) {
    int64_t n = fl_tensor_dim(y, 0), per = fl_tensor_size(y) / (n ? n : 1);
    if (fl_tensor_ndim(y) > 2) {
        char b[128];
        fprintf(stderr, "flynn %s: error: --class-weight needs one class per sample; y has shape %s (give "
                "--sample-weight with one weight per step instead)\n", cmd, fl_tensor_shape_str(y, b, sizeof b));
        return NULL;
    }
    fl_tensor *f = fl_to_float(y, 1.0f);
    int64_t *c = f ? malloc((size_t)(n ? n : 1) * sizeof *c) : NULL;
    if (!c) {
        fprintf(stderr, "flynn %s: error: out of memory for the classes of %lld samples\n", cmd, (long long)n);
        fl_tensor_free(f);
        return NULL;
    }
    const float *v = fl_tensor_cdata(f);
    for (int64_t i = 0; i < n; i++) {
        const float *t = v + i * per;
        int64_t k = 0;
        if (per == 1) k = (int64_t)rint((double)t[0]);
        else for (int64_t j = 1; j < per; j++) if (t[j] > t[k]) k = j;
        c[i] = k;
    }
    fl_tensor_free(f);
    return c;
}

static int usage(const char *cmd, const char *msg, const char *arg) {
    fprintf(stderr, "flynn %s: %s %s\n(see `flynn %s --help`)\n", cmd, msg, arg, cmd);
    return 2;
}

static void print_class_weights(const float *cw, int ncw, const char *how) {
    printf("class_weight: {");
    for (int k = 0; k < ncw; k++) printf("%s%d: %.6g", k ? ", " : "", k, (double)cw[k]);
    printf("}%s\n", how);
}

int flynn_fit_weights(const char *cmd, const char *class_weight, const char *sample_weight, const fl_tensor *y,
                      float *cw, int *ncw, fl_tensor **sw, bool quiet) {
    *ncw = 0;
    *sw = NULL;
    if (class_weight && sample_weight)
        return usage(cmd, "give --class-weight or --sample-weight, not both (as Keras); got both:", class_weight);
    if (sample_weight) {
        if (!(*sw = fl_load_npy(sample_weight))) {
            fprintf(stderr, "flynn %s: error: --sample-weight: %s\n", cmd, fl_last_error());
            return 1;
        }
        if (fl_tensor_dtype(*sw) != FL_FLOAT32) {
            fl_tensor *f = fl_to_float(*sw, 1.0f);
            fl_tensor_free(*sw);
            if (!(*sw = f)) { fprintf(stderr, "flynn %s: error: --sample-weight %s: %s\n", cmd, sample_weight, fl_last_error()); return 1; }
        }
        if (!quiet) {
            const float *v = fl_tensor_cdata(*sw);
            int64_t n = fl_tensor_size(*sw);
            double lo = n ? v[0] : 0, hi = lo, sum = 0;
            for (int64_t i = 0; i < n; i++) { lo = v[i] < lo ? v[i] : lo; hi = v[i] > hi ? v[i] : hi; sum += v[i]; }
            char b[128];
            printf("sample_weight: %s, shape %s (min %.6g, mean %.6g, max %.6g)\n", sample_weight,
                   fl_tensor_shape_str(*sw, b, sizeof b), lo, n ? sum / (double)n : 0.0, hi);
        }
        return 0;
    }
    if (!class_weight) return 0;
    if (strcmp(class_weight, "balanced") == 0) { /* sklearn's compute_class_weight("balanced") */
        int64_t *c = classes_of(cmd, y), n = fl_tensor_dim(y, 0);
        if (!c) return 1;
        int64_t top = -1;
        for (int64_t i = 0; i < n; i++) {
            if (c[i] < 0 || c[i] >= FLYNN_MAX_CLASS_WEIGHTS) {
                fprintf(stderr, "flynn %s: error: --class-weight balanced: y[%lld] is class %lld, expected 0..%d\n", cmd,
                        (long long)i, (long long)c[i], FLYNN_MAX_CLASS_WEIGHTS - 1);
                free(c);
                return 1;
            }
            if (c[i] > top) top = c[i];
        }
        int64_t *count = calloc((size_t)top + 2, sizeof *count);
        if (!count) { free(c); fprintf(stderr, "flynn %s: error: out of memory\n", cmd); return 1; }
        for (int64_t i = 0; i < n; i++) count[c[i]]++;
        int present = 0;
        for (int64_t k = 0; k <= top; k++) present += count[k] > 0;
        for (int64_t k = 0; k <= top; k++)
            cw[k] = count[k] ? (float)((double)n / ((double)present * (double)count[k])) : 1.0f;
        *ncw = (int)top + 1;
        free(count);
        free(c);
        if (!quiet) {
            char how[160];
            snprintf(how, sizeof how, " (balanced: n_samples / (n_classes * count) over %lld samples of %d classes)",
                     (long long)n, present);
            print_class_weights(cw, *ncw, how);
        }
        return 0;
    }
    for (int k = 0; k < FLYNN_MAX_CLASS_WEIGHTS; k++) cw[k] = 1.0f;
    const char *p = class_weight;
    while (*p) {
        char *end;
        errno = 0;
        long k = strtol(p, &end, 10);
        if (end == p || *end != '=' || errno || k < 0 || k >= FLYNN_MAX_CLASS_WEIGHTS)
            return usage(cmd, "--class-weight wants CLASS=WEIGHT,... (classes 0, 1, ...) or balanced, got", class_weight);
        p = end + 1;
        float w = strtof(p, &end);
        if (end == p || (*end && *end != ','))
            return usage(cmd, "--class-weight wants CLASS=WEIGHT,... (classes 0, 1, ...) or balanced, got", class_weight);
        cw[k] = w;
        if (k + 1 > *ncw) *ncw = (int)k + 1;
        p = *end ? end + 1 : end;
    }
    if (*ncw == 0) return usage(cmd, "--class-weight wants CLASS=WEIGHT,... or balanced, got", class_weight);
    if (!quiet) print_class_weights(cw, *ncw, " (classes not named: 1)");
    return 0;
}
