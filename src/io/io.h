/*
 * io.h — what the loaders in src/io share with each other (the public entry
 * points are in flynn/flynn.h).
 */
#ifndef FL_IO_H
#define FL_IO_H

#include "flynn/flynn.h"

/* idx.c: at most max_rows rows of dimension 0 (0 = all); *total_rows (may
 * be NULL) receives the file's dimension 0. */
fl_tensor *fl_idx_load_rows(const char *path, int64_t max_rows, int64_t *total_rows);

#endif
