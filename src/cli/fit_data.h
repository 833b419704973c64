/*
 * fit_data.h — what `flynn train` and `flynn evaluate` add to the data for
 * fit (fit_data.c): the arrays of a model with several inputs from one .npz
 * (named by the model's input names), and the sample and class weights
 * (--sample-weight, --class-weight).
 */
#ifndef FLYNN_CLI_FIT_DATA_H
#define FLYNN_CLI_FIT_DATA_H

#include <flynn/flynn.h>

#include <stdbool.h>

#define FLYNN_MAX_INPUTS 16
#define FLYNN_MAX_CLASS_WEIGHTS 4096

/* The arrays of a model with several inputs: x[i] for input i (the .npz's
 * array named as the input), y; x_test[i] ("<input>_test") and y_test when
 * the file has them. d.x_train/x_test alias x[0]/x_test[0], and d owns them
 * and y (fl_dataset_free(&d)); flynn_multi_free frees the other inputs. */
typedef struct flynn_multi {
    int nx;
    fl_tensor *x[FLYNN_MAX_INPUTS], *x_test[FLYNN_MAX_INPUTS];
} flynn_multi;

/* Loads path (an .npz) for model m (several inputs) into mi and d (x_train =
 * input 0, y_train, x_test/y_test); desc gets one line on what was read.
 * Returns 0, or 1 with the message printed (which array is missing). */
int flynn_multi_load(const char *cmd, const char *path, const fl_model *m, flynn_multi *mi, fl_dataset *d, char *desc,
                     size_t desc_len);
void flynn_multi_free(flynn_multi *mi);

/* --class-weight SPEC (K=W,K=W... or "balanced") and --sample-weight W.npy
 * for y (the training targets, n samples): fills cw[0..*ncw) (classes without
 * a weight: 1) or *sw (a new tensor), and prints the weights in one line
 * unless quiet. Returns 0, 1 (error printed) or 2 (usage). */
int flynn_fit_weights(const char *cmd, const char *class_weight, const char *sample_weight, const fl_tensor *y,
                      float *cw, int *ncw, fl_tensor **sw, bool quiet);

#endif
