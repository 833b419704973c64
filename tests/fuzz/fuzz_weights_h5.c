/*
 * fuzz_weights_h5.c — libFuzzer harness for Keras 3 .weights.h5 files
 * (fl_load_weights: the HDF5 reader and the Keras 3 / legacy weight layouts
 * in keras_weights.c): the input is a weights file, loaded into one fixed
 * model, a compiled Adam MLP built from the fixture
 * tests/fixtures/keras/train_mlp_adam.json (its weights file and the
 * model.weights.h5 of its .keras are the seeds).
 * Property: no crash, no leak, and a refused file leaves the model's
 * weights as they were.
 */
#include "fuzz.h"

#ifndef FLYNN_FUZZ_FIXTURES
#define FLYNN_FUZZ_FIXTURES "tests/fixtures/keras"
#endif

static fl_model *model;

static fl_model *fixture_model(void) {
    const char *dir = getenv("FLYNN_FUZZ_FIXTURES");
    char path[1024];
    snprintf(path, sizeof path, "%s/train_mlp_adam.json", dir && *dir ? dir : FLYNN_FUZZ_FIXTURES);
    fl_model *m = fl_load_model(path);
    if (!m) {
        fprintf(stderr, "fuzz_weights_h5: cannot build the fixed model: %s (set FLYNN_FUZZ_FIXTURES to "
                "tests/fixtures/keras)\n", fl_last_error());
        abort();
    }
    return m;
}

/* All of the model's weights, one after the other, into buf (at most cap
 * floats); returns how many. */
static size_t weights_copy(float *buf, size_t cap) {
    size_t n = 0;
    for (int i = 0; i < fl_model_num_layers(model); i++) {
        fl_layer *l = fl_model_layer(model, i);
        for (int j = 0; j < fl_layer_num_weights(l); j++) {
            fl_tensor *w = fl_layer_weight(l, j);
            size_t k = (size_t)fl_tensor_size(w);
            if (n + k > cap) fuzz_die("the fixed model has more weights than the harness expects", NULL);
            memcpy(buf + n, fl_tensor_cdata(w), k * sizeof(float));
            n += k;
        }
    }
    return n;
}

#define MAX_WEIGHTS 4096
static float before[MAX_WEIGHTS], after[MAX_WEIGHTS];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!model) model = fixture_model();
    const char *path = fuzz_file("input.weights.h5", data, size);
    size_t n = weights_copy(before, MAX_WEIGHTS);
    if (fl_load_weights(model, path) != FL_OK) {
        if (weights_copy(after, MAX_WEIGHTS) != n || memcmp(before, after, n * sizeof(float)) != 0)
            fuzz_fail("fl_load_weights failed but changed the model's weights");
    }
    return 0;
}
