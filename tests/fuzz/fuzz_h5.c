/*
 * fuzz_h5.c — libFuzzer harness for legacy full-model .h5 files
 * (src/keras/keras_file.c load_h5, the HDF5 reader in keras_weights.c, the
 * model_config and training_config JSON attributes): the input is an .h5
 * file, loaded with fl_load_model.
 * With libhdf5 1.10 this finds crashes inside libhdf5 itself; its smoke and
 * regression tests are enabled by tests/fuzz/CMakeLists.txt's
 * FLYNN_FUZZ_ENABLED once flynn reads HDF5 with its own reader.
 */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fl_model *m = fl_load_model(fuzz_file("model.h5", data, size));
    fl_model_free(m);
    return 0;
}
