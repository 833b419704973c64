/*
 * files.h — the model-file commands of the `flynn` tool (files.c): predict,
 * convert, summary FILE, and what `flynn train` uses for model files.
 */
#ifndef FLYNN_CLI_FILES_H
#define FLYNN_CLI_FILES_H

#include <flynn/flynn.h>

#include <stdio.h>

int flynn_cmd_predict(int argc, char **argv);
int flynn_cmd_convert(int argc, char **argv);
int flynn_cmd_summary_file(int argc, char **argv);

/* Whether a --model value names a file rather than a built-in model. */
bool flynn_is_model_file(const char *name);
/* Do the first n characters of s end in suf? */
bool flynn_has_suffix_n(const char *s, size_t n, const char *suf);
/* Loads a model file (compiled from its compile config when compile), then
 * the weights file when given; NULL with fl_last_error() on failure. */
fl_model *flynn_load_model_file(const char *cmd, const char *path, const char *weights, bool compile);
/* Loads the weights file into m when given (a note when a .json model stays
 * with fresh weights); frees m and returns NULL on failure. */
fl_model *flynn_add_weights(const char *cmd, fl_model *m, const char *path, const char *weights);
/* fl_load_model, and when only the compile config is in the way (an
 * optimizer or loss flynn lacks, several outputs), the model without it and a
 * note on stderr saying why. */
fl_model *flynn_load_lenient(const char *cmd, const char *path);
/* " Compiled: Adam (learning_rate 0.001), loss ...; N optimizer steps taken" */
void flynn_print_compile_info(const fl_model *m, FILE *f);

#endif
