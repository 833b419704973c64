/*
 * io.h — what the loaders in src/io share with each other (the public entry
 * points are in flynn/flynn.h).
 */
#ifndef FL_IO_H
#define FL_IO_H

#include "flynn/flynn.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* idx.c: at most max_rows rows of dimension 0 (0 = all); *total_rows (may
 * be NULL) receives the file's dimension 0. */
fl_tensor *fl_idx_load_rows(const char *path, int64_t max_rows, int64_t *total_rows);

/* atomic.c: replacing a file atomically (see its header comment). open,
 * write..., then commit (which renames over path) or abort (which removes
 * what was written); every message names path and the system's reason. */
typedef struct fl_atomic_file {
    const char *path;  /* the target */
    char *tmp;         /* the temporary name (NULL while the file is unnamed) */
    int fd;
    bool anonymous;    /* O_TMPFILE: no name until commit */
    mode_t mode;
    size_t written;
} fl_atomic_file;
fl_status fl_atomic_open(fl_atomic_file *f, const char *path);
fl_status fl_atomic_write(fl_atomic_file *f, const void *data, size_t len);
fl_status fl_atomic_commit(fl_atomic_file *f);
void fl_atomic_abort(fl_atomic_file *f);
/* open + write + commit of one buffer. */
fl_status fl_atomic_save(const char *path, const void *data, size_t len);

#endif
