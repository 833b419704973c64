/* consumer.c — the smallest flynn program a user would build against an
 * installed flynn: define, compile and train a model on a toy problem. */
#include <flynn/flynn.h>
#include <stdio.h>

int main(void) {
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, 64, 2), *y = fl_tensor_zeros(FL_FLOAT32, 64);
    float *xd = fl_tensor_data(x), *yd = fl_tensor_data(y);
    for (int i = 0; i < 64; i++) {
        xd[2 * i] = (float)(i % 8) / 8.0f;
        xd[2 * i + 1] = (float)(i / 8) / 8.0f;
        yd[i] = (float)(xd[2 * i] > xd[2 * i + 1]);
    }
    fl_model *m = fl_sequential(fl_input(2), fl_dense(16, .activation = FL_RELU), fl_dense(2, .activation = FL_SOFTMAX));
    if (!m || fl_compile(m, fl_adam(.learning_rate = 0.01f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY)) {
        fprintf(stderr, "%s\n", fl_last_error());
        return 1;
    }
    fl_history *h = fl_fit(m, x, y, .epochs = 30, .batch_size = 16, .verbose = FL_VERBOSE_SILENT);
    if (!h) { fprintf(stderr, "%s\n", fl_last_error()); return 1; }
    printf("flynn %s: accuracy %.2f after %d epochs\n", fl_version(), fl_history_get(h, "accuracy")[29], 30);
    fl_history_free(h);
    fl_model_free(m);
    fl_tensor_free(x);
    fl_tensor_free(y);
    return 0;
}
