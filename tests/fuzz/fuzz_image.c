/*
 * fuzz_image.c — libFuzzer harness for the image decoders (src/io/images.c:
 * libpng and libjpeg-turbo, caught errors, the bilinear resize). The first
 * byte picks the color mode and whether to resize; the rest is the file
 * (PNG or JPEG, told by content). What decodes has the shape asked for.
 */
#include "fuzz.h"

/* Whether every value is a pixel in 0..255 (NaN is not). Without coverage instrumentation: a JPEG of a
 * few hundred bytes can declare 111 x 65324 pixels, and 22 million instrumented compares took 13-26 s,
 * past libFuzzer's -timeout=10 (fuzz_image's smoke run found one, now tests/fuzz/regressions/image). */
#if defined(__clang__)
#define FUZZ_NO_COVERAGE __attribute__((no_sanitize("coverage"), noinline))
#else
#define FUZZ_NO_COVERAGE /* gcc builds the regression runner, which is not instrumented */
#endif
FUZZ_NO_COVERAGE static bool pixels_in_range(const float *v, int64_t n) {
    bool ok = true;
    for (int64_t i = 0; i < n; i++) ok &= v[i] >= 0.0f && v[i] <= 255.0f;
    return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || !fl_image_support()) return 0;
    const fl_color_mode mode = (fl_color_mode)(data[0] % 3);
    const int side = (data[0] >> 2) & 1 ? 5 : 0;
    fl_tensor *t = fl_load_image(fuzz_file("input.img", data + 1, size - 1), mode, side, side);
    if (!t) return 0;
    const int ch = mode == FL_COLOR_GRAYSCALE ? 1 : mode == FL_COLOR_RGBA ? 4 : 3;
    if (fl_tensor_ndim(t) != 3 || fl_tensor_dim(t, 2) != ch || (side && (fl_tensor_dim(t, 0) != side || fl_tensor_dim(t, 1) != side)))
        fuzz_fail("fl_load_image returned another shape than asked");
    if (!pixels_in_range(fl_tensor_cdata(t), fl_tensor_size(t))) fuzz_fail("a pixel outside 0..255");
    fl_tensor_free(t);
    return 0;
}
