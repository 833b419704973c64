/*
 * fuzz_keras.c — libFuzzer harness for .keras files (src/keras/keras_file.c:
 * the zip container through libzip, then config.json, then
 * model.weights.h5 through the HDF5 reader): the input is a .keras file,
 * loaded with fl_load_model, once compiled and once with .no_compile.
 * The zip checks each entry's CRC, so mutations reach the JSON and HDF5
 * parts rarely; fuzz_json and fuzz_h5 / fuzz_weights_h5 cover those.
 */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("model.keras", data, size);
    fl_model *m = fl_load_model(path);
    fl_model_free(m);
    if (m) {
        m = fl_load_model(path, .no_compile = true);
        if (!m) fuzz_fail("a .keras file that loads compiled is refused with no_compile");
        fl_model_free(m);
    }
    return 0;
}
