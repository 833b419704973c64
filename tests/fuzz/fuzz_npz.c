/*
 * fuzz_npz.c — libFuzzer harness for the .npz reader (src/io/npz.c over the
 * zip reader of keras_file.c and npy.c from memory): the input is an .npz
 * file, loaded with fl_load_npz and fl_load_npz_xy. What loads must be
 * whole: every array named, and x/y (when they load) of the same length.
 */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = fuzz_file("input.npz", data, size);
    fl_arrays a;
    if (fl_load_npz(p, &a) == FL_OK) {
        for (int i = 0; i < a.count; i++)
            if (!a.names[i] || !a.arrays[i]) fuzz_fail("fl_load_npz returned an unnamed or missing array");
        fl_arrays_free(&a);
    } else if (a.count != 0 || a.names || a.arrays) {
        fuzz_fail("a refused .npz left arrays behind");
    }
    fl_dataset d;
    if (fl_load_npz_xy(p, &d, NULL) == FL_OK) {
        if (!d.x_train || !d.y_train || fl_tensor_dim(d.x_train, 0) != fl_tensor_dim(d.y_train, 0))
            fuzz_fail("fl_load_npz_xy returned x and y of different lengths");
        fl_dataset_free(&d);
    } else if (d.x_train || d.y_train || d.x_test || d.y_test) {
        fuzz_fail("a refused .npz left a data set behind");
    }
    return 0;
}
