/*
 * mpi_fit.c — the helper of tests/test_mpi.sh: trains a small model on
 * synthetic data (the same under any launch) and writes every weight, in
 * layer order, as raw float32 to a file; run plainly it is one process,
 * under mpirun fl_fit runs data-parallel. `mpi_fit compare A B TOL` then
 * says whether two such files are bit-identical, and their norm-wise
 * relative difference ||A - B|| / ||A||, and fails above TOL.
 *   mpi_fit train MODEL OPT SAMPLES BATCH EPOCHS OUT
 *     MODEL: mlp (Dense 64-64-10), cnn (mnist_cnn's layers without Dropout, 12x12x1) or
 *            bn (the mlp with a BatchNormalization: its batch statistics are each rank's share's,
 *            so it runs, and its ranks agree, but it does not equal one process)
 *            mlpsw, mlpcw: the mlp with a sample_weight per sample, or a class_weight per class
 *            (the weighted loss rows are divided by the global batch, as one process's)
 *            Random masks: each rank draws for its rows of the batch what one process draws for them
 *            (fl_graph.row_offset), so these equal one process too:
 *            mlpdrop (the mlp with Dropout(0.3) after each hidden Dense), cnndrop (the cnn with
 *            mnist_cnn's Dropout(0.25) and Dropout(0.5), and a SpatialDropout2D(0.2), a noise_shape,
 *            after the first convolution), rnndrop (8 steps of 8 features: LSTM(16) with dropout 0.2
 *            and recurrent_dropout 0.3, then GRU(12) with recurrent_dropout 0.25, then Dense(10)),
 *            attndrop (self-attention over those steps: MultiHeadAttention(2 heads, key_dim 4,
 *            dropout 0.3), global average pooling, Dense(10))
 *     OPT: sgd (momentum 0.9) or adam
 */
#include <flynn/flynn.h>
#include "dist/mpi.h"
#include "nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* MPI_FIT_FAKE_DEVICE: the CPU's kernels behind a table that says its
 * memory is not the host's, so that fl_fit takes the device paths of data
 * parallel training (NCCL through the library that FLYNN_NCCL_LIB names:
 * tests/stub_nccl.c sums over MPI on these host buffers), counting the
 * communication stream's forks and joins */
static fl_backend fake_device;
static int forks, joins;
static int fake_stream;
static void *fake_fork(void) { forks++; return &fake_stream; }
static void fake_join(void) { joins++; }

static int fail(const char *what) {
    fprintf(stderr, "mpi_fit: %s: %s\n", what, fl_last_error());
    return 1;
}

static float *read_all(const char *path, long *n) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "mpi_fit: cannot open %s\n", path); return NULL; }
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *p = malloc((size_t)bytes + 4);
    *n = bytes / 4;
    if (!p || fread(p, 4, (size_t)*n, f) != (size_t)*n) { fclose(f); free(p); return NULL; }
    fclose(f);
    return p;
}

static int compare(const char *a, const char *b, double tol) {
    long na, nb;
    float *pa = read_all(a, &na), *pb = read_all(b, &nb);
    if (!pa || !pb || na != nb || na == 0) {
        fprintf(stderr, "mpi_fit: %s and %s: %ld and %ld floats\n", a, b, pa ? na : -1, pb ? nb : -1);
        return 1;
    }
    /* the norm-wise relative difference ||a - b|| / ||a||, and the largest element-wise one */
    double d2 = 0, a2 = 0, worst = 0;
    long at = 0, differ = 0;
    for (long i = 0; i < na; i++) {
        double d = (double)pa[i] - pb[i];
        if (memcmp(&pa[i], &pb[i], 4) != 0) differ++;
        d2 += d * d;
        a2 += (double)pa[i] * pa[i];
        if (fabs(d) > worst) { worst = fabs(d); at = i; }
    }
    double rel = sqrt(d2 / (a2 > 0 ? a2 : 1));
    printf("%ld weights: %s; %ld differ; relative difference (2-norm) %.3g; largest %.3g (weight %ld: %.9g vs %.9g)\n",
           na, differ ? "not bit-identical" : "bit-identical", differ, rel, worst, at, pa[at], pb[at]);
    free(pa);
    free(pb);
    return rel <= tol ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "compare") == 0) return compare(argv[2], argv[3], atof(argv[4]));
    if (argc != 8 || strcmp(argv[1], "train") != 0) {
        fprintf(stderr, "usage: mpi_fit train mlp|mlpsw|mlpcw|mlpdrop|cnn|cnndrop|rnndrop|attndrop|bn sgd|adam SAMPLES "
                        "BATCH EPOCHS OUT\n"
                        "       mpi_fit compare A B TOL\n");
        return 2;
    }
    const char *model = argv[2], *opt = argv[3], *out = argv[7];
    int n = atoi(argv[4]), batch = atoi(argv[5]), epochs = atoi(argv[6]);
    bool cnndrop = strcmp(model, "cnndrop") == 0, cnn = cnndrop || strcmp(model, "cnn") == 0;
    int side = cnn ? 12 : 8;
    bool bn = strcmp(model, "bn") == 0, seq = strcmp(model, "rnndrop") == 0 || strcmp(model, "attndrop") == 0;
    fl_model *m;
    if (strcmp(model, "attndrop") == 0) {
        fl_sym *in = fl_keras_input(side, side);
        fl_sym *a = fl_call_n(fl_multi_head_attention(2, 4, .dropout = 0.3f), in, in);
        fl_sym *y_ = fl_call(fl_dense(10, .activation = FL_SOFTMAX), fl_call(fl_global_average_pooling1d(), a));
        m = fl_model_new(fl_syms(in), fl_syms(y_), "attndrop");
    } else if (seq)
        m = fl_sequential(fl_input(side, side),
                          fl_lstm(16, .dropout = 0.2f, .recurrent_dropout = 0.3f, .return_sequences = true),
                          fl_gru(12, .recurrent_dropout = 0.25f), fl_dense(10, .activation = FL_SOFTMAX));
    else if (strcmp(model, "mlpdrop") == 0)
        m = fl_sequential(fl_input(side, side, 1), fl_flatten(), fl_dense(64, .activation = FL_RELU), fl_dropout(0.3f),
                          fl_dense(64, .activation = FL_RELU), fl_dropout(0.3f), fl_dense(10, .activation = FL_SOFTMAX));
    else if (cnndrop)
        m = fl_sequential(fl_input(side, side, 1), fl_conv2d(32, 3, .activation = FL_RELU), fl_spatial_dropout2d(0.2f),
                          fl_conv2d(64, 3, .activation = FL_RELU), fl_max_pooling2d(2), fl_dropout(0.25f),
                          fl_flatten(), fl_dense(128, .activation = FL_RELU), fl_dropout(0.5f),
                          fl_dense(10, .activation = FL_SOFTMAX));
    else if (bn)
        m = fl_sequential(fl_input(side, side, 1), fl_flatten(), fl_dense(64, .activation = FL_RELU),
                          fl_batch_normalization(), fl_dense(10, .activation = FL_SOFTMAX));
    else if (cnn)
        m = fl_sequential(fl_input(side, side, 1), fl_conv2d(32, 3, .activation = FL_RELU),
                          fl_conv2d(64, 3, .activation = FL_RELU), fl_max_pooling2d(2), fl_flatten(),
                          fl_dense(128, .activation = FL_RELU), fl_dense(10, .activation = FL_SOFTMAX));
    else
        m = fl_sequential(fl_input(side, side, 1), fl_flatten(), fl_dense(64, .activation = FL_RELU),
                          fl_dense(64, .activation = FL_RELU), fl_dense(10, .activation = FL_SOFTMAX));
    if (!m) return fail("model");
    fl_model_set_seed(m, 7);
    if (getenv("MPI_FIT_FAKE_DEVICE")) { /* before compile: the optimizer binds to the graph's backend */
        fake_device = *fl_backend_cpu();
        fake_device.name = "fake-device";
        fake_device.host_memory = 0;
        fake_device.comm_stream_fork = fake_fork;
        fake_device.comm_stream_join = fake_join;
        m->g.be = &fake_device;
    }
    fl_optimizer *o = strcmp(opt, "adam") == 0 ? fl_adam(.learning_rate = 1e-3f)
                                               : fl_sgd(.learning_rate = 0.05f, .momentum = 0.9f);
    if (fl_compile(m, o, FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY) != FL_OK) return fail("compile");
    fl_tensor *x = seq ? fl_tensor_zeros(FL_FLOAT32, n, side, side) : fl_tensor_zeros(FL_FLOAT32, n, side, side, 1),
              *y = fl_tensor_zeros(FL_FLOAT32, n);
    if (!x || !y) return fail("data");
    float *px = fl_tensor_data(x), *py = fl_tensor_data(y);
    uint32_t s = 12345;
    for (int i = 0; i < n; i++) { /* the label is the brightest of 10 bands of the image */
        float band[10] = {0};
        for (int j = 0; j < side * side; j++) {
            s = s * 1664525u + 1013904223u;
            px[(long)i * side * side + j] = (float)(s >> 8) / 16777216.0f;
            band[j % 10] += px[(long)i * side * side + j];
        }
        int best = 0;
        for (int c = 1; c < 10; c++) if (band[c] > band[best]) best = c;
        py[i] = (float)best;
    }
    fl_tensor *sw = NULL;
    static const float cw[10] = {2.0f, 0.5f, 1.0f, 3.0f, 0.0f, 1.5f, 1.0f, 0.25f, 1.0f, 2.5f};
    const bool weigh_classes = strcmp(model, "mlpcw") == 0;
    if (strcmp(model, "mlpsw") == 0) {
        if (!(sw = fl_tensor_zeros(FL_FLOAT32, n))) return fail("sample weights");
        for (int i = 0; i < n; i++) ((float *)fl_tensor_data(sw))[i] = (float)(i % 7) * 0.5f;
    }
    fl_history *h = fl_fit(m, x, y, .batch_size = batch, .epochs = epochs, .verbose = FL_VERBOSE_SILENT,
                           .sample_weight = sw, .class_weight = weigh_classes ? cw : NULL,
                           .num_class_weights = weigh_classes ? 10 : 0);
    fl_tensor_free(sw);
    if (!h) return fail("fit");
    if (fl_dist_rank() == 0) {
        FILE *f = fopen(out, "wb");
        if (!f) { fprintf(stderr, "mpi_fit: cannot write %s\n", out); return 1; }
        for (int l = 0; l < fl_model_num_layers(m); l++) {
            fl_layer *L = fl_model_layer(m, l);
            for (int k = 0; k < fl_layer_num_weights(L); k++) {
                fl_tensor *w = fl_layer_weight(L, k);
                fwrite(fl_tensor_data(w), 4, (size_t)fl_tensor_size(w), f);
            }
        }
        fclose(f);
        const float *loss = fl_history_get(h, "loss");
        printf("%s %s: %d ranks, loss %.9g after %d epochs\n", model, opt, fl_dist_size(), loss[epochs - 1], epochs);
        if (m->g.be == &fake_device) printf("fake device: %d forks and %d joins of the communication stream\n", forks, joins);
    }
    fl_history_free(h);
    fl_tensor_free(x);
    fl_tensor_free(y);
    fl_model_free(m);
    return 0;
}
