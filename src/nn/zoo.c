/*
 * zoo.c — the built-in models the `flynn` command, the tests and the
 * benchmarks train, written with the public API exactly as a user would.
 */
#include "flynn/flynn.h"
#include "core/error.h"

#include <string.h>

static const char *const names[] = {"mnist_cnn", "mlp", NULL};

const char *const *fl_builtin_model_names(void) { return names; }

fl_model *fl_builtin_model(const char *name, int64_t h, int64_t w, int64_t c, int classes) {
    if (!name) return fl_error_null(FL_ERR_INVALID_ARG, "fl_builtin_model: name is NULL");
    if (classes < 2) return fl_error_null(FL_ERR_INVALID_ARG, "fl_builtin_model: %d classes, expected >= 2", classes);
    if (strcmp(name, "mnist_cnn") == 0)
        return fl_sequential(
            fl_input(h, w, c),
            fl_conv2d(32, 3, .activation = FL_RELU),
            fl_conv2d(64, 3, .activation = FL_RELU),
            fl_max_pooling2d(2),
            fl_dropout(0.25f),
            fl_flatten(),
            fl_dense(128, .activation = FL_RELU),
            fl_dropout(0.5f),
            fl_dense(classes, .activation = FL_SOFTMAX));
    if (strcmp(name, "mlp") == 0)
        return fl_sequential(
            fl_input(h, w, c),
            fl_flatten(),
            fl_dense(512, .activation = FL_RELU),
            fl_dropout(0.2f),
            fl_dense(512, .activation = FL_RELU),
            fl_dropout(0.2f),
            fl_dense(classes, .activation = FL_SOFTMAX));
    return fl_error_null(FL_ERR_INVALID_ARG, "unknown model '%s' (built-in models: mnist_cnn, mlp)", name);
}
