/*
 * mnist_cnn.c — the Keras mnist_cnn example written with flynn's C API:
 * load Fashion-MNIST, define the model, train, evaluate.
 *
 *   mnist_cnn [DATA_DIR] [TRAIN_SAMPLES] [EPOCHS] [SEED]
 *
 * DATA_DIR defaults to /usr/share/datasets/fashion-mnist (Debian package
 * dataset-fashion-mnist).
 */
#include <flynn/flynn.h>

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
    long samples = argc > 2 ? atol(argv[2]) : 20000;
    int epochs = argc > 3 ? atoi(argv[3]) : 2;
    const char *seed = argc > 4 ? argv[4] : NULL; /* default: the model's own seed */

    fl_dataset data;
    if (fl_load_mnist(dir, samples, 0, &data) != FL_OK) {
        fprintf(stderr, "error: %s\n", fl_last_error());
        return 1;
    }

    fl_model *model = fl_sequential(
        fl_input(28, 28, 1),
        fl_conv2d(32, 3, .activation = FL_RELU),
        fl_conv2d(64, 3, .activation = FL_RELU),
        fl_max_pooling2d(2),
        fl_dropout(0.25f),
        fl_flatten(),
        fl_dense(128, .activation = FL_RELU),
        fl_dropout(0.5f),
        fl_dense(10, .activation = FL_SOFTMAX));
    if (model && seed) fl_model_set_seed(model, strtoull(seed, NULL, 10)); /* before compile: initial weights */
    if (!model || fl_compile(model, fl_adam(.learning_rate = 1e-3f), FL_SPARSE_CATEGORICAL_CROSSENTROPY,
                             FL_ACCURACY) != FL_OK) {
        fprintf(stderr, "error: %s\n", fl_last_error());
        fl_dataset_free(&data);
        return 1;
    }
    fl_model_summary(model, NULL);

    fl_history *h = fl_fit(model, data.x_train, data.y_train, .batch_size = 128, .epochs = epochs,
                           .validation_split = 0.1f);
    float results[2];
    if (!h || fl_evaluate(model, data.x_test, data.y_test, results, 2, .batch_size = 256) != FL_OK) {
        fprintf(stderr, "error: %s\n", fl_last_error());
        fl_history_free(h);
        fl_model_free(model);
        fl_dataset_free(&data);
        return 1;
    }
    printf("test loss: %.4f - test accuracy: %.4f - %.0f samples/s\n", results[0], results[1],
           fl_history_samples_per_second(h));

    fl_history_free(h);
    fl_model_free(model);
    fl_dataset_free(&data);
    return 0;
}
