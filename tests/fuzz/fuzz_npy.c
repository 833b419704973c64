/*
 * fuzz_npy.c — libFuzzer harness for the NumPy .npy loader (src/io/npy.c):
 * the input is a .npy file, loaded with fl_load_npy. What loads is saved
 * with fl_save_npy and loaded again, and must come back identical (shape,
 * dtype and bytes): what flynn writes, flynn reads.
 */
#include "fuzz.h"

static size_t dtype_size(fl_dtype d) { return d == FL_UINT8 ? 1 : 4; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fl_tensor *t = fl_load_npy(fuzz_file("input.npy", data, size));
    if (!t) return 0;
    const char *out = fuzz_path("resaved.npy");
    if (fl_save_npy(t, out) != FL_OK) fuzz_fail("fl_save_npy refused a tensor fl_load_npy made");
    fl_tensor *u = fl_load_npy(out);
    if (!u) fuzz_fail("fl_load_npy refused what fl_save_npy wrote");
    if (fl_tensor_dtype(u) != fl_tensor_dtype(t) || fl_tensor_ndim(u) != fl_tensor_ndim(t))
        fuzz_fail("npy round trip changed the dtype or the number of dimensions");
    for (int i = 0; i < fl_tensor_ndim(t); i++)
        if (fl_tensor_dim(u, i) != fl_tensor_dim(t, i)) fuzz_fail("npy round trip changed the shape");
    size_t bytes = (size_t)fl_tensor_size(t) * dtype_size(fl_tensor_dtype(t));
    if (bytes && memcmp(fl_tensor_cdata(t), fl_tensor_cdata(u), bytes) != 0)
        fuzz_fail("npy round trip changed the data");
    fl_tensor_free(u);
    fl_tensor_free(t);
    return 0;
}
