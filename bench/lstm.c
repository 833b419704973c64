/*
 * lstm.c — flynn's LSTM(128) on (batch 64, 80 steps, 64 features), through
 * the public API as a user runs it: Input(80, 64) -> LSTM(128) ->
 * Dense(10, softmax), sparse categorical crossentropy, SGD. Times one
 * epoch of `steps` training steps (fit, after a warm-up epoch) and one
 * predict pass over the same samples; prints ms per batch of 64, forward
 * (predict) and training step (forward + backward + update), the fastest of
 * `reps` runs, as one JSON line for bench/lstm_compare.py.
 *
 * build (after cmake --build build):
 *   cc -O2 -fopenmp -Iinclude -Isrc bench/lstm.c build/libflynn.a \
 *      $(pkg-config --cflags --libs openblas libzip json-c zlib) -lm -o build/bench_lstm
 * usage: build/bench_lstm [steps] [reps] [units] [timesteps] [features] [batch]
 */
#include "flynn/flynn.h"
#include "bench_util.h"

#include <string.h>

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 10, reps = argc > 2 ? atoi(argv[2]) : 3;
    int units = argc > 3 ? atoi(argv[3]) : 128, T = argc > 4 ? atoi(argv[4]) : 80;
    int D = argc > 5 ? atoi(argv[5]) : 64, B = argc > 6 ? atoi(argv[6]) : 64;
    int64_t n = (int64_t)steps * B;
    fl_tensor *x = fl_tensor_new(FL_FLOAT32, 3, (int64_t[]){n, T, D}), *y = fl_tensor_new(FL_FLOAT32, 1, &n);
    float *xb = buf((size_t)(n * T * D), 1), *yd = fl_tensor_data(y);
    memcpy(fl_tensor_data(x), xb, (size_t)(n * T * D) * sizeof(float));
    for (int64_t i = 0; i < n; i++) yd[i] = (float)(i % 10);
    fl_model *m = fl_sequential(fl_input(T, D), fl_lstm(units), fl_dense(10, .activation = FL_SOFTMAX));
    if (!m || fl_compile(m, fl_sgd(.learning_rate = 0.01f), FL_SPARSE_CATEGORICAL_CROSSENTROPY) != FL_OK) {
        fprintf(stderr, "bench_lstm: %s\n", fl_last_error());
        return 1;
    }
    fl_history_free(fl_fit(m, x, y, .batch_size = B, .epochs = 1, .verbose = FL_VERBOSE_SILENT));
    double train = 1e30, pred = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        fl_history *h = fl_fit(m, x, y, .batch_size = B, .epochs = 1, .verbose = FL_VERBOSE_SILENT);
        double t1 = now();
        if (!h) { fprintf(stderr, "bench_lstm: %s\n", fl_last_error()); return 1; }
        fl_history_free(h);
        fl_tensor *p = fl_predict(m, x, .batch_size = B);
        double t2 = now();
        fl_tensor_free(p);
        if (t1 - t0 < train) train = t1 - t0;
        if (t2 - t1 < pred) pred = t2 - t1;
    }
    printf("{\"impl\": \"flynn\", \"units\": %d, \"timesteps\": %d, \"features\": %d, \"batch\": %d, "
           "\"threads\": %d, \"train_ms_per_batch\": %.3f, \"predict_ms_per_batch\": %.3f}\n",
           units, T, D, B, fl_get_num_threads(), 1e3 * train / steps, 1e3 * pred / steps);
    fl_model_free(m);
    fl_tensor_free(x);
    fl_tensor_free(y);
    free(xb);
    return 0;
}
