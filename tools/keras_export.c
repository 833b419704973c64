/*
 * keras_export.c — writes models built and trained in flynn as Keras files,
 * for tools/keras_check_flynn_files.py (the reverse-direction check: real
 * Keras loads what flynn wrote). Built by `cmake --build build --target
 * keras-roundtrip`, not by the plain build.
 *
 * usage: keras_export OUTDIR
 *
 * For each model NAME it writes NAME.keras, NAME.h5, NAME.json and
 * NAME.weights.h5, the inputs NAME_x<i>.npy and flynn's predictions
 * NAME_y<i>.npy; for a compiled model it first trains a few steps (so the
 * files carry optimizer state), then also writes the training batch
 * NAME_train_x.npy / NAME_train_y.npy and the weights flynn has after one
 * more step on it, NAME_next_<layer>_<weight>.npy, for Keras to reproduce
 * from the saved optimizer state. models.txt lists "NAME INPUTS OUTPUTS
 * TRAINED BATCH STEPS" per line (STEPS: optimizer steps taken before saving).
 */
#include <flynn/flynn.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *out;
static FILE *list;

static fl_tensor *rnd(uint64_t stream, int ndim, const int64_t *shape, float scale) {
    fl_tensor *t = fl_tensor_new(FL_FLOAT32, ndim, shape);
    float *d = fl_tensor_data(t);
    for (int64_t i = 0; i < fl_tensor_size(t); i++) d[i] = (fl_philox_uniform(2024, stream, (uint64_t)i) * 2 - 1) * scale;
    return t;
}

/* A batch of n samples for input i of m (a None axis: `len` steps). */
static fl_tensor *input_for_len(fl_model *m, int i, int64_t n, uint64_t stream, int64_t len) {
    int64_t shape[FL_MAX_DIMS + 1];
    int nd = fl_model_input_shape(m, i, shape + 1);
    shape[0] = n;
    for (int d = 1; d <= nd; d++)
        if (shape[d] == FL_DYNAMIC) shape[d] = len;
    if (fl_model_input_dtype(m, i) == FL_INT32) { /* token indices in [0, 6): 0 is padding for mask_zero */
        fl_tensor *t = fl_tensor_new(FL_INT32, nd + 1, shape);
        for (int64_t k = 0; k < fl_tensor_size(t); k++)
            ((int32_t *)fl_tensor_data(t))[k] = (int32_t)(fl_philox_u32(2024, stream, (uint64_t)k) % 6u);
        return t;
    }
    return rnd(stream, nd + 1, shape, 1.5f);
}
/* Trained on sequences of 9 steps, predicted on 7: another length than the
 * graph last had, for a model with a None axis. */
static fl_tensor *input_for(fl_model *m, int i, int64_t n, uint64_t stream) {
    return input_for_len(m, i, n, stream, stream < 300 ? 9 : 7);
}

static void check(fl_status s, const char *what) {
    if (s != FL_OK) {
        fprintf(stderr, "keras_export: %s: %s\n", what, fl_last_error());
        exit(1);
    }
}

static const char *path(const char *name, const char *suffix) {
    static char buf[4][2048];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s%s", out, name, suffix);
    return buf[k];
}

/* Targets for the model's loss: class indices, one-hot, 0/1 or values. */
static fl_tensor *targets(fl_model *m, int64_t n, uint64_t stream) {
    fl_loss l = fl_model_loss(m);
    int64_t shape[FL_MAX_DIMS + 1];
    int nd = fl_model_output_shape(m, 0, shape + 1);
    int64_t c = shape[nd];
    shape[0] = n;
    for (int d = 1; d <= nd; d++)
        if (shape[d] == FL_DYNAMIC) shape[d] = 9; /* the training batch's steps (input_for) */
    fl_tensor *y;
    if (l.kind == FL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY) { /* one index per output row: (n, steps) for a sequence */
        int64_t rows = n;
        for (int d = 1; d < nd; d++) rows *= shape[d];
        y = fl_tensor_new(FL_INT32, nd, shape);
        for (int64_t i = 0; i < rows; i++) ((int32_t *)fl_tensor_data(y))[i] = (int32_t)(fl_philox_u32(7, stream, (uint64_t)i) % (uint32_t)c);
    } else if (l.kind == FL_LOSS_CATEGORICAL_CROSSENTROPY) {
        y = fl_tensor_new(FL_FLOAT32, nd + 1, shape);
        for (int64_t i = 0; i < n; i++) ((float *)fl_tensor_data(y))[i * c + fl_philox_u32(7, stream, (uint64_t)i) % (uint32_t)c] = 1;
    } else if (l.kind == FL_LOSS_BINARY_CROSSENTROPY) {
        y = fl_tensor_new(FL_FLOAT32, nd + 1, shape);
        for (int64_t i = 0; i < fl_tensor_size(y); i++) ((float *)fl_tensor_data(y))[i] = (float)(fl_philox_u32(7, stream, (uint64_t)i) & 1);
    } else {
        y = rnd(stream + 99, nd + 1, shape, 1.0f);
    }
    return y;
}

static void export_model(const char *name, fl_model *m, int train_steps, int batch) {
    if (!m) check(FL_ERR_INVALID_ARG, name);
    int ni = fl_model_num_inputs(m), no = fl_model_num_outputs(m);
    bool trained = fl_model_optimizer(m) != NULL;
    fl_tensor *tx = NULL, *ty = NULL;
    if (trained) {
        tx = input_for(m, 0, batch, 100);
        ty = targets(m, batch, 200);
        for (int s = 0; s < train_steps; s++) {
            fl_history *h = fl_fit(m, tx, ty, .batch_size = batch, .epochs = 1, .no_shuffle = true, .verbose = FL_VERBOSE_SILENT);
            if (!h) check(fl_last_status(), "fit");
            fl_history_free(h);
        }
    }
    check(fl_save_model(m, path(name, ".keras")), "save .keras");
    check(fl_save_model(m, path(name, ".h5")), "save .h5");
    check(fl_save_model(m, path(name, ".json")), "save .json");
    check(fl_save_weights(m, path(name, ".weights.h5")), "save .weights.h5");
    fl_tensor *xs[8] = {0}, *ys[8] = {0};
    for (int i = 0; i < ni; i++) {
        xs[i] = input_for(m, i, 5, 300 + (uint64_t)i);
        char suf[32];
        snprintf(suf, sizeof suf, "_x%d.npy", i);
        check(fl_save_npy(xs[i], path(name, suf)), "save x");
    }
    check(fl_predict_multi(m, (const fl_tensor *const *)xs, ni, ys, no, .verbose = FL_VERBOSE_SILENT), "predict");
    for (int i = 0; i < no; i++) {
        char suf[32];
        snprintf(suf, sizeof suf, "_y%d.npy", i);
        check(fl_save_npy(ys[i], path(name, suf)), "save y");
    }
    if (trained) {
        check(fl_save_npy(tx, path(name, "_train_x.npy")), "save train x");
        check(fl_save_npy(ty, path(name, "_train_y.npy")), "save train y");
        fl_history *h = fl_fit(m, tx, ty, .batch_size = batch, .epochs = 1, .no_shuffle = true, .verbose = FL_VERBOSE_SILENT);
        if (!h) check(fl_last_status(), "fit");
        fl_history_free(h);
        for (int i = 0; i < fl_model_num_layers(m); i++) {
            fl_layer *l = fl_model_layer(m, i);
            for (int k = 0; k < fl_layer_num_weights(l); k++) {
                char suf[300];
                snprintf(suf, sizeof suf, "_next_%s_%s.npy", fl_layer_name(l), fl_layer_weight_name(l, k));
                for (char *c = suf; *c; c++) /* "query/kernel" (a sub-layer's weight) -> "query_kernel" */
                    if (*c == '/') *c = '_';
                check(fl_save_npy(fl_layer_weight(l, k), path(name, suf)), "save next weights");
            }
        }
    }
    fprintf(list, "%s %d %d %d %d %d\n", name, ni, no, trained ? 1 : 0, batch, train_steps);
    printf("keras_export: %-22s %d input(s), %d output(s)%s\n", name, ni, no, trained ? ", compiled and trained" : "");
    for (int i = 0; i < 8; i++) { fl_tensor_free(xs[i]); fl_tensor_free(ys[i]); }
    fl_tensor_free(tx);
    fl_tensor_free(ty);
    fl_model_free(m);
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: keras_export OUTDIR\n"); return 2; }
    out = argv[1];
    list = fopen(path("models", ".txt"), "w");
    if (!list) { perror(out); return 1; }

    /* Sequential CNN: conv (same/valid, non-square, strides), BN, pools, Adam, sparse CE */
    fl_model *m = fl_sequential(fl_input(9, 8, 2), fl_conv2d(4, 3, .padding = FL_SAME, .activation = FL_RELU),
                                fl_batch_normalization(), fl_max_pooling2d(2),
                                fl_conv2d(3, .kernel_h = 2, .kernel_w = 3, .strides = 1, .no_bias = true, .activation = FL_TANH),
                                fl_average_pooling2d(2, .padding = FL_SAME), fl_flatten(),
                                fl_dense(6, .activation = FL_GELU), fl_dense(4, .activation = FL_SOFTMAX));
    fl_model_set_seed(m, 1);
    check(fl_compile(m, fl_adam(.learning_rate = 0.01f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY), "compile");
    export_model("seq_cnn_adam", m, 3, 8);

    /* ZeroPadding2D (symmetric, per side) and Cropping2D around convolutions; the later activations */
    m = fl_sequential(fl_input(7, 6, 2), fl_zero_padding2d(1), fl_conv2d(3, 3, .strides = 2, .activation = FL_SILU),
                      fl_zero_padding2d(.bottom = 1, .right = 1), fl_conv2d(4, 2, .activation = FL_RELU6),
                      fl_cropping2d(.top = 1, .left = 1), fl_flatten(), fl_dense(5, .activation = FL_HARD_SILU),
                      fl_dense(5, .activation = FL_SELU), fl_activation_layer(FL_SOFTPLUS),
                      fl_dense(3, .activation = FL_SOFTMAX));
    fl_model_set_seed(m, 7);
    check(fl_compile(m, fl_adam(.learning_rate = 0.01f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY), "compile");
    export_model("seq_pad_crop_adam", m, 3, 8);

    /* Conv1D (causal, same with stride), the 1D and global poolings */
    m = fl_sequential(fl_input(12, 3), fl_conv1d(4, 3, .padding = FL_CAUSAL, .activation = FL_RELU),
                      fl_max_pooling1d(2), fl_conv1d(5, 2, .strides = 2, .padding = FL_SAME, .no_bias = true),
                      fl_average_pooling1d(2, .padding = FL_SAME), fl_global_max_pooling1d(.keepdims = true),
                      fl_flatten(), fl_dense(3, .activation = FL_SOFTMAX));
    fl_model_set_seed(m, 9);
    check(fl_compile(m, fl_adam(.learning_rate = 0.01f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY), "compile");
    export_model("seq_conv1d_adam", m, 3, 8);
    /* an encoder-decoder: strided Conv2D down; Conv2DTranspose (same, and valid
     * with a stride above the kernel), nearest and bilinear UpSampling2D up;
     * Permute (axes swapped, then channels first and back) */
    m = fl_sequential(fl_input(8, 6, 2), fl_conv2d(4, 3, .strides = 2, .padding = FL_SAME, .activation = FL_RELU),
                      fl_conv2d_transpose(3, 3, .strides = 2, .padding = FL_SAME, .activation = FL_TANH),
                      fl_up_sampling2d(.size_h = 2, .size_w = 3, .interpolation = FL_BILINEAR), fl_permute(2, 1, 3),
                      fl_conv2d_transpose(2, .kernel_h = 2, .kernel_w = 1, .stride_h = 1, .stride_w = 2, .no_bias = true),
                      fl_up_sampling2d(2), fl_permute(3, 1, 2), fl_permute(2, 3, 1),
                      fl_conv2d(2, 3, .strides = 3, .activation = FL_RELU), fl_flatten(),
                      fl_dense(3, .activation = FL_SOFTMAX));
    fl_model_set_seed(m, 11);
    check(fl_compile(m, fl_adam(.learning_rate = 0.01f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY), "compile");
    export_model("seq_deconv_adam", m, 3, 8);
    m = fl_sequential(fl_input(6, 5, 2), fl_conv2d(3, 3, .activation = FL_TANH), fl_global_max_pooling2d(.keepdims = true),
                      fl_global_average_pooling2d(), fl_dense(2));
    fl_model_set_seed(m, 10);
    export_model("seq_global_pools", m, 0, 0);
    /* The activation and preprocessing layers with parameters, trained with Adam: Rescaling,
     * Normalization adapted (weights set here), given per index and given as scalars
     * (axis=None, and inverted), ReLU with all options, PReLU shared and per element,
     * LeakyReLU, ELU, Softmax on a middle axis */
    {
        fl_layer *norm = fl_normalization();
        m = fl_sequential(fl_input(5, 4, 3), fl_rescaling(2.0f, .offset = -0.5f), norm,
                          fl_normalization(.axis = 1, .mean = (const float[]){0.1f, -0.2f, 0.3f, 0, 0.5f},
                                           .variance = (const float[]){1, 2, 0.5f, 4, 1.5f}, .size = 5),
                          fl_conv2d(4, 2, .padding = FL_SAME),
                          fl_relu_layer(1.5f, .negative_slope = 0.1f, .threshold = 0.2f),
                          fl_prelu(.shared_axes = {1, 2}), fl_leaky_relu(), fl_conv2d(4, 2), fl_elu_layer(0.7f),
                          fl_prelu(), fl_softmax_layer(.axis = 1), fl_flatten(), fl_dense(6), fl_relu_layer(6.0f),
                          fl_normalization(.axis_none = true, .mean = (const float[]){0.5f},
                                           .variance = (const float[]){2.0f}, .size = 1),
                          fl_normalization(.invert = true, .axis_none = true, .mean = (const float[]){0.1f},
                                           .variance = (const float[]){1.5f}, .size = 1),
                          fl_dense(3, .activation = FL_SOFTMAX));
        fl_model_set_seed(m, 8);
        const float mean[3] = {0.2f, -0.1f, 0.4f}, var[3] = {1.5f, 0.7f, 2.0f};
        fl_tensor *w = fl_layer_weight(norm, 0); /* views: writes change the model */
        if (w) memcpy(fl_tensor_data(w), mean, sizeof mean);
        w = fl_layer_weight(norm, 1);
        if (w) memcpy(fl_tensor_data(w), var, sizeof var);
        w = fl_layer_weight(norm, 2);
        if (w) *(float *)fl_tensor_data(w) = 20;
        check(fl_compile(m, fl_adam(.learning_rate = 0.01f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY),
              "compile");
        export_model("seq_param_layers_adam", m, 3, 8);
    }
    /* DepthwiseConv2D (depth_multiplier 1 and 2, strides, non-square kernel,
     * no bias) and SeparableConv2D (fused and separate activations) */
    m = fl_sequential(fl_input(9, 8, 3), fl_depthwise_conv2d(3, .depth_multiplier = 2, .activation = FL_RELU6),
                      fl_depthwise_conv2d(.kernel_h = 2, .kernel_w = 3, .strides = 2, .padding = FL_SAME,
                                          .no_bias = true),
                      fl_separable_conv2d(5, 3, .padding = FL_SAME, .activation = FL_TANH),
                      fl_separable_conv2d(4, 2, .stride_h = 2, .depth_multiplier = 2, .no_bias = true,
                                          .activation = FL_SILU),
                      fl_flatten(), fl_dense(3, .activation = FL_SOFTMAX));
    fl_model_set_seed(m, 11);
    check(fl_compile(m, fl_adam(.learning_rate = 0.01f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY), "compile");
    export_model("seq_depthwise_adam", m, 3, 8);
    /* dilated and grouped Conv2D (groups == channels: the depthwise form),
     * dilated DepthwiseConv2D and SeparableConv2D, a bilinear Resizing;
     * SGD (a step proportional to the gradient: tiny gradients stay tiny) */
    m = fl_sequential(fl_input(8, 8, 4),
                      fl_conv2d(6, 3, .dilation_rate = 2, .padding = FL_SAME, .groups = 2, .activation = FL_TANH),
                      fl_depthwise_conv2d(3, .dilation_rate = 2, .activation = FL_TANH), fl_resizing(6, 5),
                      fl_conv2d(6, 3, .strides = 2, .groups = 3, .activation = FL_TANH),
                      fl_conv2d(12, 2, .padding = FL_SAME, .groups = 6),
                      fl_separable_conv2d(4, 2, .dilation_h = 1, .dilation_w = 2, .padding = FL_SAME,
                                          .activation = FL_RELU),
                      fl_flatten(), fl_dense(3, .activation = FL_SOFTMAX));
    fl_model_set_seed(m, 12);
    check(fl_compile(m, fl_sgd(.learning_rate = 0.1f, .momentum = 0.9f), FL_SPARSE_CATEGORICAL_CROSSENTROPY,
                     FL_ACCURACY), "compile");
    export_model("seq_dilated_grouped_sgd", m, 3, 8);
    /* Conv1D dilated: causal and grouped, same */
    m = fl_sequential(fl_input(12, 4),
                      fl_conv1d(6, 3, .dilation_rate = 2, .padding = FL_CAUSAL, .groups = 2, .activation = FL_RELU),
                      fl_conv1d(4, 2, .dilation_rate = 3, .padding = FL_SAME, .activation = FL_TANH), fl_flatten(),
                      fl_dense(3, .activation = FL_SOFTMAX));
    fl_model_set_seed(m, 13);
    check(fl_compile(m, fl_sgd(.learning_rate = 0.1f, .momentum = 0.9f), FL_SPARSE_CATEGORICAL_CROSSENTROPY,
                     FL_ACCURACY), "compile");
    export_model("seq_conv1d_dilated_sgd", m, 3, 8);
    /* Resizing: bilinear, nearest, cropped and padded to the aspect ratio */
    m = fl_sequential(fl_input(6, 8, 3), fl_resizing(9, 5), fl_resizing(4, 7, .nearest = true),
                      fl_resizing(5, 5, .crop_to_aspect_ratio = true), fl_resizing(3, 6, .pad_to_aspect_ratio = true),
                      fl_conv2d(2, 2, .activation = FL_TANH), fl_flatten(), fl_dense(2));
    fl_model_set_seed(m, 14);
    check(fl_compile(m, fl_sgd(.learning_rate = 0.05f), FL_MEAN_SQUARED_ERROR), "compile");
    export_model("seq_resizing_sgd", m, 2, 6);
    /* recurrent layers: LSTM sequences, GRU both forms, go_backwards,
     * SimpleRNN, Bidirectional (default and explicit backward layer) */
    m = fl_sequential(fl_input(6, 3), fl_lstm(5, .return_sequences = true),
                      fl_bidirectional(fl_gru(4, .return_sequences = true), .merge_mode = FL_MERGE_SUM),
                      fl_gru(3, .no_reset_after = true, .go_backwards = true, .return_sequences = true),
                      fl_bidirectional(fl_simple_rnn(3), .backward_layer = fl_lstm(3, .go_backwards = true)),
                      fl_dense(3, .activation = FL_SOFTMAX));
    fl_model_set_seed(m, 15);
    check(fl_compile(m, fl_adam(.learning_rate = 0.01f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY), "compile");
    export_model("seq_rnn_adam", m, 3, 8);
    /* recurrent_dropout (with dropout: one mask per gate) in LSTM, a
     * Bidirectional GRU (reset_after False) and SimpleRNN, trained: Keras
     * reads the rates and predicts as flynn (no masks in inference) */
    m = fl_sequential(fl_input(6, 3), fl_lstm(5, .dropout = 0.2f, .recurrent_dropout = 0.3f, .return_sequences = true),
                      fl_bidirectional(fl_gru(3, .recurrent_dropout = 0.25f, .no_reset_after = true,
                                              .return_sequences = true)),
                      fl_simple_rnn(3, .dropout = 0.1f, .recurrent_dropout = 0.5f),
                      fl_dense(3, .activation = FL_SOFTMAX));
    fl_model_set_seed(m, 16);
    check(fl_compile(m, fl_adam(.learning_rate = 0.01f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY), "compile");
    export_model("seq_rnn_recurrent_dropout_adam", m, 2, 8);

    /* text: int32 tokens, Embedding(mask_zero), the masked mean, a sigmoid head, BCE (IMDB-style) */
    m = fl_sequential(fl_input_dtype(FL_INT32, 7), fl_embedding(6, 4, .mask_zero = true), fl_global_average_pooling1d(),
                      fl_dense(1, .activation = FL_SIGMOID));
    fl_model_set_seed(m, 21);
    check(fl_compile(m, fl_adam(.learning_rate = 0.01f), FL_BINARY_CROSSENTROPY, FL_BINARY_ACCURACY), "compile");
    export_model("seq_text_fasttext_adam", m, 2, 8);

    /* a per-step softmax on a masked sequence: mask_zero's mask weighs the loss and the accuracy */
    m = fl_sequential(fl_input_dtype(FL_INT32, 5), fl_embedding(6, 3, .mask_zero = true),
                      fl_dense(4, .activation = FL_SOFTMAX));
    fl_model_set_seed(m, 22);
    check(fl_compile(m, fl_sgd(.learning_rate = 0.1f, .momentum = 0.5f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY),
          "compile");
    export_model("seq_text_per_step_sgd", m, 2, 8);

    /* MLP: centered RMSprop with momentum, categorical CE, BN after Dense, leaky relu, elu */
    m = fl_sequential(fl_input(7), fl_dense(8, .activation = FL_LEAKY_RELU, .no_bias = true),
                      fl_batch_normalization(.momentum = 0.9f, .epsilon = 0.01f), fl_activation_layer(.activation = FL_ELU),
                      fl_dense(3, .activation = FL_SOFTMAX));
    fl_model_set_seed(m, 2);
    check(fl_compile(m, fl_rmsprop(.learning_rate = 0.01f, .momentum = 0.5f, .centered = true), FL_CATEGORICAL_CROSSENTROPY,
                     FL_CATEGORICAL_ACCURACY), "compile");
    export_model("seq_mlp_rmsprop", m, 2, 6);

    /* SGD with Nesterov momentum, MSE, GAP and a Reshape */
    m = fl_sequential(fl_input(12), fl_reshape(2, 2, 3), fl_conv2d(5, 2, .padding = FL_SAME, .activation = FL_SIGMOID),
                      fl_global_average_pooling2d(), fl_dense(2));
    fl_model_set_seed(m, 3);
    check(fl_compile(m, fl_sgd(.learning_rate = 0.1f, .momentum = 0.9f, .nesterov = true), FL_MEAN_SQUARED_ERROR), "compile");
    export_model("seq_sgd_mse", m, 2, 8);

    /* AdamW, binary CE from logits */
    m = fl_sequential(fl_input(6), fl_dense(5, .activation = FL_TANH), fl_dense(1));
    fl_model_set_seed(m, 4);
    check(fl_compile(m, fl_adamw(.learning_rate = 0.01f), fl_binary_crossentropy(.from_logits = true), FL_BINARY_ACCURACY),
          "compile");
    export_model("seq_adamw_logits", m, 2, 8);

    /* plain SGD, sparse CE from logits (no slots) */
    m = fl_sequential(fl_input(5), fl_dense(4, .activation = FL_RELU), fl_dense(3));
    fl_model_set_seed(m, 5);
    check(fl_compile(m, fl_sgd(.learning_rate = 0.05f), fl_sparse_categorical_crossentropy(.from_logits = true)), "compile");
    export_model("seq_sgd_plain", m, 2, 6);

    /* inference only: Dropout, every activation layer, uncompiled */
    m = fl_sequential(fl_input(4, 4, 3), fl_conv2d(2, 1), fl_dropout(0.4f), fl_flatten(),
                      fl_dense(5, .activation = FL_ELU), fl_activation_layer(.activation = FL_GELU),
                      fl_activation_layer(.activation = FL_LEAKY_RELU), fl_dense(3, .activation = FL_SIGMOID));
    fl_model_set_seed(m, 6);
    export_model("seq_dropout_infer", m, 0, 0);

    /* Functional, one input and output, branches + merges + BN, trained with Adam: checks
     * that the optimizer variables of a functional model are in Keras's order. (A layer
     * shared by two calls is exported for inference only, in func_two_heads: flynn's
     * backward pass does not yet sum a shared layer's weight gradients over its calls.) */
    {
        fl_sym *x = fl_keras_input_named("x", 6);
        fl_sym *a = fl_call(fl_dense(6, .activation = FL_TANH), x);
        fl_sym *b = fl_call(fl_dense(6, .activation = FL_RELU), x);
        /* no bias: BatchNormalization below cancels its gradient, which is then rounding
         * noise that Adam's normalised step would turn into a visible difference */
        fl_sym *c = fl_call(fl_dense(6, .no_bias = true), b);
        fl_sym *s = fl_call_n(fl_add(), a, c);
        fl_sym *p = fl_call_n(fl_multiply(), a, b);
        fl_sym *cat = fl_call_n(fl_concatenate(), s, p, x);
        fl_sym *bn = fl_call(fl_batch_normalization(), cat);
        fl_sym *y = fl_call(fl_dense(3, .activation = FL_SOFTMAX, .name = "probs"), bn);
        m = fl_model_new(fl_syms(x), fl_syms(y), "func_merge_adam");
        fl_model_set_seed(m, 7);
        check(fl_compile(m, fl_adam(.learning_rate = 0.02f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY), "compile");
        export_model("func_merge_adam", m, 3, 8);
    }
    /* Functional, two inputs of different ranks, two outputs, a layer used twice, uncompiled */
    {
        fl_sym *v = fl_keras_input_named("vec", 6), *img = fl_keras_input_named("img", 6, 6, 1);
        fl_sym *f = fl_call(fl_conv2d(2, 3, .activation = FL_RELU), img);
        f = fl_call(fl_max_pooling2d(2), f);
        f = fl_call(fl_flatten(), f);
        fl_layer *proj = fl_dense(5, .activation = FL_RELU);
        fl_sym *h1 = fl_call(proj, v);
        fl_sym *h2 = fl_call(proj, fl_call(fl_dense(6), f));
        fl_sym *c = fl_call_n(fl_concatenate(.axis = -1), h1, h2);
        fl_sym *o1 = fl_call(fl_dense(3, .activation = FL_SOFTMAX, .name = "cls"), c);
        fl_sym *o2 = fl_call(fl_dense(1, .name = "reg"), fl_call_n(fl_add(), h1, h2));
        m = fl_model_new(fl_syms(v, img), fl_syms(o1, o2), "func_two_heads");
        fl_model_set_seed(m, 8);
        export_model("func_two_heads", m, 0, 0);
    }
    /* A causal Transformer block: MultiHeadAttention (its sub-layer weights;
     * self- and cross-attention), LayerNormalization, TimeDistributed(Dense),
     * Dense on a sequence, RepeatVector; SGD. (No Attention layer: Keras
     * 3.15 cannot read the legacy .h5 of one, its own included.) */
    {
        fl_sym *x = fl_keras_input_named("seq", 6, 8);
        fl_sym *a = fl_call_n(fl_multi_head_attention(2, 4, .use_causal_mask = true), x, x);
        fl_sym *h = fl_call(fl_layer_normalization(), fl_call_n(fl_add(), x, a));
        h = fl_call(fl_time_distributed(fl_dense(8, .activation = FL_RELU)), h);
        fl_sym *r = fl_call(fl_repeat_vector(6), fl_call(fl_dense(8), fl_call(fl_global_average_pooling1d(), x)));
        h = fl_call_n(fl_multi_head_attention(1, 5, .no_bias = true), h, r);
        h = fl_call(fl_dense(4, .activation = FL_TANH), h);
        fl_sym *o = fl_call(fl_dense(3, .activation = FL_SOFTMAX), fl_call(fl_flatten(), h));
        m = fl_model_new(fl_syms(x), fl_syms(o), "transformer_block");
        fl_model_set_seed(m, 10);
        check(fl_compile(m, fl_sgd(.learning_rate = 0.1f, .momentum = 0.9f), FL_SPARSE_CATEGORICAL_CROSSENTROPY,
                         FL_ACCURACY), "compile");
        export_model("transformer_block", m, 2, 8);
    }
    /* keras.io's lstm_seq2seq (fixed lengths): the encoder's final states
     * (return_state, fl_output) start the decoder (initial_state), whose h
     * is a second output; uncompiled (two inputs) */
    {
        fl_sym *enc_in = fl_keras_input_named("encoder_inputs", 7, 5), *dec_in = fl_keras_input_named("decoder_inputs", 6, 3);
        fl_sym *enc = fl_call(fl_lstm(4, .return_state = true), enc_in);
        fl_sym *dec = fl_call_n(fl_lstm(4, .return_sequences = true, .return_state = true), dec_in, fl_output(enc, 1),
                                fl_output(enc, 2));
        fl_sym *y = fl_call(fl_dense(3, .activation = FL_SOFTMAX), dec);
        m = fl_model_new(fl_syms(enc_in, dec_in), fl_syms(y, fl_output(dec, 1)), "rnn_seq2seq");
        fl_model_set_seed(m, 23);
        export_model("func_rnn_seq2seq", m, 0, 0);
    }
    /* the states' gradients in training: an encoder reached only through its
     * states, a backwards decoder from them, Bidirectional merge_mode None
     * with return_state, a GRU from a backward state; SGD */
    {
        fl_sym *x = fl_keras_input_named("seq", 5, 3);
        fl_sym *enc = fl_call(fl_lstm(4, .return_state = true), x);
        fl_sym *dec = fl_call_n(fl_lstm(4, .return_sequences = true, .return_state = true, .go_backwards = true), x,
                                fl_output(enc, 1), fl_output(enc, 2));
        fl_sym *bi = fl_call(fl_bidirectional(fl_gru(4, .return_sequences = true, .return_state = true),
                                              .merge_mode = FL_MERGE_NONE), dec);
        fl_sym *s = fl_call_n(fl_add(), bi, fl_output(bi, 1));
        fl_sym *g = fl_call_n(fl_gru(4, .return_sequences = true, .no_reset_after = true), s, fl_output(bi, 3));
        fl_sym *y = fl_call(fl_dense(3, .activation = FL_SOFTMAX), g);
        m = fl_model_new(fl_syms(x), fl_syms(y), "rnn_states_sgd");
        fl_model_set_seed(m, 24);
        check(fl_compile(m, fl_sgd(.learning_rate = 0.1f, .momentum = 0.9f), FL_SPARSE_CATEGORICAL_CROSSENTROPY,
                         FL_ACCURACY), "compile");
        export_model("func_rnn_states_sgd", m, 2, 8);
    }
    /* the built-in mnist_cnn, as `flynn train` makes it */
    m = fl_builtin_model("mnist_cnn", 12, 12, 1, 10);
    fl_model_set_seed(m, 9);
    check(fl_compile(m, fl_adam(.learning_rate = 1e-3f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY), "compile");
    /* its Dropout makes training random in both libraries: compare inference only */
    export_model("builtin_mnist_cnn", m, 2, 16);
    /* transfer learning: a frozen convolution and BatchNormalization (inference
     * mode in training too), a trainable head; Keras must read them frozen */
    m = fl_sequential(fl_input(7, 7, 2), fl_conv2d(4, 3, .name = "base_conv"), fl_batch_normalization(.name = "base_bn"),
                      fl_activation_layer(FL_RELU), fl_global_average_pooling2d(), fl_dense(3, .activation = FL_SOFTMAX));
    fl_model_set_seed(m, 10);
    check(fl_layer_set_trainable(fl_model_get_layer(m, "base_conv"), false), "freeze");
    check(fl_layer_set_trainable(fl_model_get_layer(m, "base_bn"), false), "freeze");
    check(fl_compile(m, fl_sgd(.learning_rate = 0.1f, .momentum = 0.9f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY),
          "compile");
    export_model("seq_frozen_sgd", m, 2, 8);
    /* variable-length inputs (None axes), trained in flynn on 9 steps and
     * predicted on 7: a text model (Embedding(mask_zero), LSTM sequences,
     * self-attention, LayerNormalization, Dense on rank 3, the masked mean)
     * and a Conv1D tagger over float features (per-step softmax) */
    {
        fl_sym *x = fl_keras_input_dtype(FL_INT32, FL_DYNAMIC);
        fl_sym *h = fl_call(fl_lstm(6, .return_sequences = true), fl_call(fl_embedding(6, 5, .mask_zero = true), x));
        h = fl_call(fl_layer_normalization(), fl_call_n(fl_multi_head_attention(2, 3), h, h));
        h = fl_call(fl_global_average_pooling1d(), fl_call(fl_dense(4, .activation = FL_TANH), h));
        m = fl_model_new(fl_syms(x), fl_syms(fl_call(fl_dense(3, .activation = FL_SOFTMAX), h)), "varlen_text");
        fl_model_set_seed(m, 12);
        check(fl_compile(m, fl_adam(.learning_rate = 0.01f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY), "compile");
        export_model("func_varlen_text_adam", m, 2, 8);
    }
    m = fl_sequential(fl_input(FL_DYNAMIC, 3), fl_conv1d(4, 3, .padding = FL_SAME, .activation = FL_RELU),
                      fl_bidirectional(fl_gru(3, .return_sequences = true)), fl_dense(2, .activation = FL_SOFTMAX));
    fl_model_set_seed(m, 13);
    check(fl_compile(m, fl_sgd(.learning_rate = 0.1f, .momentum = 0.9f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY),
          "compile");
    export_model("seq_varlen_tagger_sgd", m, 2, 8);
    fclose(list);
    return 0;
}
