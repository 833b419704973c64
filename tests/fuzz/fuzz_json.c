/*
 * fuzz_json.c — libFuzzer harness for model JSON (src/keras/keras_json.c,
 * keras_config.c, keras_layers.c): the input is the text of model.to_json()
 * (a model config, maybe with a compile config), given to fl_model_from_json.
 * What loads is written back with fl_model_to_json, which must load again
 * and give the same JSON text: what flynn writes, flynn reads.
 */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    fl_model *m = fl_model_from_json(text);
    free(text);
    if (!m) return 0;
    char *again = fl_model_to_json(m);
    if (!again) fuzz_fail("fl_model_to_json failed on a model fl_model_from_json made");
    fl_model *m2 = fl_model_from_json(again);
    if (!m2) {
        fprintf(stderr, "JSON flynn wrote: %s\n", again);
        fuzz_fail("fl_model_from_json refused what fl_model_to_json wrote");
    }
    char *third = fl_model_to_json(m2);
    if (!third || strcmp(third, again) != 0) {
        fprintf(stderr, "first:  %s\nsecond: %s\n", again, third ? third : "(NULL)");
        fuzz_fail("the JSON of a reloaded model differs from the JSON it was loaded from");
    }
    free(third);
    free(again);
    fl_model_free(m2);
    fl_model_free(m);
    return 0;
}
