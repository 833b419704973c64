/*
 * fuzz_h5_reader.c — libFuzzer harness for flynn's HDF5 reader (src/keras/h5.c) alone:
 * opens the input as an HDF5 image and reads everything it can reach (every
 * link, the string attributes Keras files use, every dataset as float32 and
 * int64), as keras_weights.c would. Crashes found become regression inputs
 * in tests/fuzz/regressions/h5_reader/ (replayed by fuzz_regress_h5_reader)
 * and tests/fuzz/regressions/h5/ (also read by test_h5) under ASan.
 *
 * Built by tests/fuzz/CMakeLists.txt as the harness h5_reader (seeds: the
 * fixtures' .h5 files and the model.weights.h5 inside the .keras ones); run it
 * long with tools/fuzz_long.sh h5_reader SECONDS.
 */
#include "keras/h5.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void walk(fl_h5 *f, uint64_t g, int depth, long *budget) {
    static const char *attrs[] = {"name", "layer_names", "weight_names", "model_config", "training_config",
                                  "keras_version", "backend", NULL};
    char **s = NULL;
    for (int i = 0; attrs[i]; i++) {
        fl_h5_attr_strings(f, g, attrs[i], &s);
        fl_h5_free_strings(s);
    }
    if (depth > 8 || --*budget < 0) return;
    char **names = NULL;
    int n = fl_h5_links(f, g, NULL, &names);
    for (int i = 0; i < n && i < 16; i++) {
        uint64_t o;
        if (fl_h5_find(f, g, names[i], &o) != 1) continue;
        fl_h5_dataset d;
        if (fl_h5_dataset_open(f, o, names[i], &d) == 0) {
            if (d.npoints <= (1 << 16)) {
                void *buf = malloc((size_t)d.npoints * 8 + 8);
                fl_h5_dataset_read(f, &d, false, buf, d.npoints * 4);
                fl_h5_dataset_read(f, &d, true, buf, d.npoints * 8);
                free(buf);
            }
        } else {
            walk(f, o, depth + 1, budget);
        }
    }
    fl_h5_free_strings(names);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fl_h5 *f = fl_h5_read_open(data, size, "fuzz");
    if (!f) return 0;
    long budget = 32;
    walk(f, fl_h5_root(f), 0, &budget);
    fl_h5_read_close(f);
    return 0;
}
