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

/* keras_file.c: the zip reader (libzip) that .keras and .npz files share.
 * fl_zip_open_read opens path read-only with its consistency checked (a
 * message naming path and `format`, e.g. ".npz", when it is no zip);
 * fl_zip_read_index reads entry idx whole (stored or deflated), refusing a
 * declared size over limit before inflating, checking the CRC and that the
 * bytes read match the declared size; *data is NUL-terminated, free() it. */
struct zip;
struct zip *fl_zip_open_read(const char *path, const char *format);
fl_status fl_zip_read_index(struct zip *za, const char *path, int64_t idx, int64_t limit, char **data, size_t *len);

/* data.c: checks that x and y hold the same number of samples (at least
 * one; the message names what_x, what_y and both shapes) and widens a uint8
 * x to int32 in place (*xp replaced). */
fl_status fl_data_check_xy(const char *what_x, fl_tensor **xp, const char *what_y, const fl_tensor *y);

/* npy.c: a .npy file held in memory (an .npz entry); `name` for messages. */
fl_tensor *fl_npy_load_mem(const void *data, size_t len, const char *name);

#endif
