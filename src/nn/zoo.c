/*
 * zoo.c — the built-in models the `flynn` command, the tests and the
 * benchmarks train, written with the public API exactly as a user would.
 */
#include "flynn/flynn.h"
#include "core/error.h"

#include <stdint.h>
#include <string.h>

static const char *const names[] = {"mnist_cnn", "mlp", "lstm_text", "transformer_text", NULL};
static const char *const text_names[] = {"lstm_text", "transformer_text", NULL};

bool fl_builtin_model_is_text(const char *name) {
    for (int i = 0; name && text_names[i]; i++)
        if (strcmp(name, text_names[i]) == 0) return true;
    return false;
}

const char *const *fl_builtin_model_names(void) { return names; }

fl_model *fl_builtin_model(const char *name, int64_t h, int64_t w, int64_t c, int classes) {
    if (!name) return fl_error_null(FL_ERR_INVALID_ARG, "fl_builtin_model: name is NULL");
    if (classes < 2) return fl_error_null(FL_ERR_INVALID_ARG, "fl_builtin_model: %d classes, expected >= 2", classes);
    if (fl_builtin_model_is_text(name))
        return fl_error_null(FL_ERR_INVALID_ARG, "model '%s' is a text model: it takes token sequences (flynn: --data "
                             "fortunes-lang or X.npy,Y.npy with integer x; C: fl_builtin_text_model), not images", name);
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
    return fl_error_null(FL_ERR_INVALID_ARG, "unknown model '%s' (built-in models: mnist_cnn, mlp, lstm_text, transformer_text)", name);
}

fl_model *fl_builtin_text_model(const char *name, int64_t steps, int64_t vocab, int classes) {
    if (!name) return fl_error_null(FL_ERR_INVALID_ARG, "fl_builtin_text_model: name is NULL");
    if (classes < 2)
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_builtin_text_model: %d classes, expected >= 2", classes);
    if (steps < 1 || vocab < 2 || vocab > INT32_MAX)
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_builtin_text_model: %lld steps and a vocabulary of %lld, "
                             "expected >= 1 and 2..2^31-1", (long long)steps, (long long)vocab);
    if (strcmp(name, "lstm_text") == 0)
        return fl_sequential(
            fl_input_dtype(FL_INT32, steps),
            fl_embedding((int)vocab, 32, .mask_zero = true),
            fl_lstm(64),
            fl_dense(classes, .activation = FL_SOFTMAX));
    if (strcmp(name, "transformer_text") == 0) {
        /* keras.io's "Text classification with Transformer" block, with a
         * Conv1D over the embeddings in place of its position embedding (which
         * needs a custom layer): the convolution gives each step its
         * neighbours, the attention the whole sequence */
        fl_sym *x = fl_keras_input_dtype(FL_INT32, steps);
        fl_sym *e = fl_call(fl_embedding((int)vocab, 32), x);
        fl_sym *c = fl_call(fl_conv1d(32, 3, .padding = FL_SAME, .activation = FL_RELU), e);
        fl_sym *a = fl_call_n(fl_multi_head_attention(2, 16), c, c);
        fl_sym *h = fl_call(fl_layer_normalization(.epsilon = 1e-6f), fl_call_n(fl_add(), c, a));
        fl_sym *f = fl_call(fl_dense(32), fl_call(fl_dense(64, .activation = FL_RELU), h));
        fl_sym *h2 = fl_call(fl_layer_normalization(.epsilon = 1e-6f), fl_call_n(fl_add(), h, f));
        fl_sym *p = fl_call(fl_dropout(0.1f), fl_call(fl_global_average_pooling1d(), h2));
        fl_sym *y = fl_call(fl_dense(classes, .activation = FL_SOFTMAX), p);
        return fl_model_new(fl_syms(x), fl_syms(y), "transformer_text");
    }
    bool known = false;
    for (int i = 0; names[i]; i++) known |= strcmp(name, names[i]) == 0;
    if (!known)
        return fl_error_null(FL_ERR_INVALID_ARG, "unknown model '%s' (built-in models: mnist_cnn, mlp, lstm_text, transformer_text)", name);
    return fl_error_null(FL_ERR_INVALID_ARG, "model '%s' is an image model: it takes images (N, H, W, C), not token "
                         "sequences; the built-in text model is lstm_text", name);
}
