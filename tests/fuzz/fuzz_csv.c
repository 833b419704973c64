/*
 * fuzz_csv.c — libFuzzer harness for the CSV reader (src/io/csv.c). The
 * first byte picks the options (bit 0: label column "b" or none; bit 1:
 * categorical as integers; bit 2: ';' as the delimiter), the rest is the
 * file. What loads must be consistent: x (N, F) and y (N,) with N >= 1, and
 * every value finite unless the text spelled an infinity or a NaN.
 */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t opt = data[0];
    const char *p = fuzz_file("input.csv", data + 1, size - 1);
    fl_dataset d;
    fl_data_info info;
    fl_status s = fl_load_csv(p, &d, .label = (opt & 1) ? "b" : NULL, .categorical_as_int = (opt & 2) != 0,
                              .delimiter = (opt & 4) ? ';' : 0, .info = &info);
    if (s != FL_OK) {
        if (d.x_train || d.y_train || info.class_names) fuzz_fail("a refused CSV left data behind");
        return 0;
    }
    if (!d.x_train || fl_tensor_ndim(d.x_train) != 2 || fl_tensor_dim(d.x_train, 0) < 1)
        fuzz_fail("fl_load_csv returned no rows");
    if ((opt & 1) && (!d.y_train || fl_tensor_dim(d.y_train, 0) != fl_tensor_dim(d.x_train, 0)))
        fuzz_fail("fl_load_csv returned y of another length than x");
    for (int c = 0; c < info.num_classes; c++)
        if (!info.class_names[c]) fuzz_fail("a class without a name");
    fl_data_info_free(&info);
    fl_dataset_free(&d);
    return 0;
}
