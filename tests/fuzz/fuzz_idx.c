/*
 * fuzz_idx.c — libFuzzer harness for the IDX loader (src/io/idx.c): the input
 * is an IDX file, raw or gzip-compressed, loaded whole with fl_load_idx and
 * again row-limited (fl_idx_load_rows, as fl_load_mnist reads it) with a
 * row count taken from the input's last byte.
 * Property: no crash, no leak; a tensor that loads has the shape's size.
 */
#include "fuzz.h"
#include "io/io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("input-idx3-ubyte", data, size);
    fl_tensor *t = fl_load_idx(path);
    if (t) {
        int64_t n = 1;
        for (int i = 0; i < fl_tensor_ndim(t); i++) n *= fl_tensor_dim(t, i);
        if (n != fl_tensor_size(t)) fuzz_fail("fl_load_idx: the tensor's size is not the product of its shape");
    }
    if (size > 0) {
        int64_t total = -1, rows = 1 + data[size - 1] % 3;
        fl_tensor *r = fl_idx_load_rows(path, rows, &total);
        if (r && (fl_tensor_dim(r, 0) > rows || fl_tensor_dim(r, 0) > total))
            fuzz_fail("fl_idx_load_rows: more rows than asked for or than the file holds");
        if (r && t && fl_tensor_dim(t, 0) != total)
            fuzz_fail("fl_idx_load_rows: total_rows differs from what fl_load_idx read");
        fl_tensor_free(r);
    }
    fl_tensor_free(t);
    return 0;
}
