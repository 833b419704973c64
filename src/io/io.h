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

/* npz.c: an .npz written one array at a time (fl_save_npz is open, add
 * each, commit). open starts the atomic file (atomic.c); add writes the
 * array at once (a copy is not kept: t may be freed after), refusing an
 * empty or repeated name or another dtype; commit writes the directory and
 * renames the file over path; abort (after any failure, also of add)
 * removes what was written. commit and abort free the writer. Messages
 * name path and the array. */
typedef struct fl_npz_writer fl_npz_writer;
fl_npz_writer *fl_npz_writer_open(const char *path);
fl_status fl_npz_writer_add(fl_npz_writer *w, const char *name, const fl_tensor *t);
fl_status fl_npz_writer_commit(fl_npz_writer *w);
void fl_npz_writer_abort(fl_npz_writer *w);

/* npy.c: the bytes np.save writes for t (the v1.0 header, then the data
 * little-endian), handed to sink in pieces (fl_save_npy's file, an .npz
 * entry); `who` names t in messages. The first failing sink call's status
 * is returned. */
typedef fl_status (*fl_npy_sink)(void *user, const void *data, size_t len);
fl_status fl_npy_emit(const fl_tensor *t, const char *who, fl_npy_sink sink, void *user);

/* npy.c: an .npy file's header (the stream reads its rows itself): the
 * data starts at byte `offset`, nelem elements of elem_size bytes in the
 * file, loaded as dtype; fl_npy_convert turns n elements of that `kind`
 * into dtype (same rules and messages as fl_load_npy; returns the index of
 * a value out of int32's range, its text in bad, or -1). */
typedef struct fl_npy_layout {
    int ndim;
    int64_t shape[FL_MAX_DIMS];
    int64_t nelem, offset;
    size_t elem_size;
    fl_dtype dtype;
    int kind;
    char descr[48];
} fl_npy_layout;
#include <stdio.h>
fl_status fl_npy_read_layout(FILE *f, const char *path, int64_t file_size, fl_npy_layout *L);
int64_t fl_npy_convert(int kind, const void *src, void *dst, size_t n, char *bad, size_t badn);

/* images.c: an image folder's files as keras.utils.image_dataset_from_directory
 * lists, shuffles and splits them (no pixel read yet), shared by the
 * in-memory loader and the stream. Part 0 is what x_train holds (the subset
 * asked for), part 1 the validation files of subset "both". */
typedef struct fl_image_index {
    int64_t n;                  /* every file listed, in Keras's order */
    char **paths;
    int *labels;                /* class index of each file (0 with no_labels) */
    int64_t first[2], count[2]; /* the parts: paths[first[p] .. first[p] + count[p]) */
    int num_classes;
    char **class_names;
    int height, width, channels;
    fl_label_mode label_mode;
    bool no_labels;
    char description[1024];
} fl_image_index;
/* who: the public function, for messages. */
fl_status fl_image_index_build(const char *dir, fl_image_dataset_args a, const char *who, fl_image_index *ix);
void fl_image_index_free(fl_image_index *ix);
/* One file decoded and resized to float32 (oh, ow, ch) at dst; the message names the path. */
fl_status fl_image_read_into(const char *path, int ch, int oh, int ow, float *dst);
/* A label as label_mode stores it: one float, or a one-hot row of `classes`. */
void fl_image_label_into(fl_label_mode lm, int classes, int label, float *y);

/* stream.c: one (h, w, c) image in place as fl_data_stream_augment
 * transforms it for a draw (flip; shift dy, dx in pixels). scratch: h*w*c
 * floats. (Tested against Keras's affine_transform: test_stream.) */
void fl_augment_image(float *img, float *scratch, int h, int w, int c, bool flip, float dy, float dx);

/* stream.c: the prefetcher behind fl_fit_stream (train.c). It reads the
 * batches of one pass (an epoch, or an evaluation) in a given sample
 * order, on `workers` threads, up to `depth` batches ahead of the batch
 * the caller holds; depth 0 reads each batch on the caller's thread when
 * asked (no prefetch). A read error stops the pass at that batch: next()
 * returns it, with the stream's message, when the caller reaches it. */
typedef struct fl_prefetch fl_prefetch;
fl_prefetch *fl_prefetch_open(fl_data_stream *s, int64_t batch_size, int depth, int workers);
/* Starts a pass over order[0..n) in batches of batch_size; epoch goes to
 * the stream's reads (-1: evaluation, no augmentation). Ends any pass
 * still running. */
fl_status fl_prefetch_begin(fl_prefetch *p, int epoch, const int64_t *order, int64_t n);
/* The next batch: x (b rows of the stream's x dtype, 4 bytes each) and y
 * (b rows of floats, or NULL); valid until the next call or fl_prefetch_end.
 * *waited: seconds this call blocked (or read, with depth 0). */
fl_status fl_prefetch_next(fl_prefetch *p, void **x, float **y, int64_t *b, double *waited);
/* Stops the workers (a read in flight finishes first) and joins them. */
void fl_prefetch_end(fl_prefetch *p);
void fl_prefetch_close(fl_prefetch *p);

#endif
