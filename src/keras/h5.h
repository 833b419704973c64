/*
 * h5.h — flynn's own HDF5 reader and writer, on a memory image of the whole
 * file (no libhdf5). It covers the subset that Keras 3 (h5py) and tf.keras 2
 * write; docs/keras-format.md lists it. Every read is bounds-checked against
 * the image, every structure that can chain (B-trees, continuation blocks,
 * heap blocks) is walked with a step bound, and whatever is outside the
 * subset is refused with a message naming the feature:
 *   "HDF5: <src>: <object path>: filter 'szip' (id 4) is not supported".
 *
 * Reading:  superblock v0/v1 (and v2/v3, checksummed), object headers v1/v2
 *           (continuations, checksums), symbol-table groups (v1 B-tree +
 *           SNOD + local heap) and link-message groups (compact, or dense
 *           through link info + fractal heap + v2 B-tree), attributes compact
 *           and dense, fixed and variable-length strings (global heap),
 *           IEEE float32/64 and 8/16/32/64-bit integers of either byte order,
 *           contiguous / compact / chunked (v1 B-tree; layout v4 single
 *           chunk) datasets with the deflate and shuffle filters.
 * Writing:  superblock v0, v1 object headers, symbol-table groups,
 *           contiguous datasets, compact attributes whose strings are
 *           variable-length UTF-8 in one global heap collection (so that a
 *           megabyte model_config is a 16-byte attribute, as h5py writes it).
 */
#ifndef FL_IO_H5_H
#define FL_IO_H5_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Limits of the reader (each one refused with a message when exceeded). */
#define FL_H5_MAX_DEPTH 64          /* groups nested in a path, B-tree levels */
#define FL_H5_MAX_LINKS 100000      /* links of one group */
#define FL_H5_MAX_ATTRS 10000       /* attributes of one object */
#define FL_H5_MAX_MESSAGES 10000    /* header messages of one object (all continuation blocks) */
#define FL_H5_MAX_CHUNKS 10000000   /* chunks of one dataset */
#define FL_H5_MAX_STRING (64 << 20) /* one string (an attribute's text): 64 MiB */
#define FL_H5_MAX_STRINGS 1000000   /* strings in one attribute */
#define FL_H5_MAX_DIMS 32           /* the HDF5 limit */
/* A dataset's declared size is checked against the caller's budget before
 * anything is allocated; its bytes come from the image or from inflating
 * chunks, each bounded by the chunk's declared size. */

typedef struct fl_h5 fl_h5; /* an open image (not copied: keep it alive) */

/* What a dataset or attribute holds. */
typedef enum fl_h5_class { FL_H5_INT = 0, FL_H5_FLOAT = 1, FL_H5_STRING = 3, FL_H5_VLEN = 9 } fl_h5_class;

typedef struct fl_h5_type {
    int cls;          /* fl_h5_class, or another HDF5 class number (refused on read) */
    uint32_t size;    /* bytes of one element */
    bool big_endian, is_signed;
    bool vlen_string; /* FL_H5_VLEN: a variable-length string */
} fl_h5_type;

typedef struct fl_h5_dataset {
    uint64_t addr;      /* object header */
    fl_h5_type type;
    int ndim;           /* 0: scalar */
    uint64_t dims[FL_H5_MAX_DIMS];
    uint64_t npoints;
    char path[256];     /* for messages */
} fl_h5_dataset;

/* Opens an image; NULL with a message ("HDF5: src: ...") when it is not HDF5
 * or its superblock is outside the subset. */
fl_h5 *fl_h5_read_open(const void *data, size_t len, const char *src);
void fl_h5_read_close(fl_h5 *f);
/* A load that reads each dataset once into memory that outlives the reader
 * (a model built for it): the image is the caller's own writable anonymous
 * memory, and from here on the whole pages of each contiguous dataset of
 * 1 MiB or more go back to the system once read (madvise MADV_DONTNEED), so
 * that the image and the weights are not resident together. The same
 * dataset read again (a second hard link) is copied from its first
 * destination, which must still hold it; bytes that overlap a dataset given
 * back are refused (h5py never writes such a file). */
void fl_h5_release_read(fl_h5 *f);
/* The root group's object header address. */
uint64_t fl_h5_root(const fl_h5 *f);
const char *fl_h5_src(const fl_h5 *f);

/* Follows a path of hard links ("a/b/c", relative to the group at loc; ""
 * is loc itself). 1 found (*out set), 0 absent (no message), -1 error. */
int fl_h5_find(fl_h5 *f, uint64_t loc, const char *path, uint64_t *out);
/* The names of a group's links, sorted (a NULL-terminated array; caller
 * frees with fl_h5_free_strings). Returns the count or -1 (path names the
 * group in messages). */
int fl_h5_links(fl_h5 *f, uint64_t group, const char *path, char ***names);
/* A string attribute (scalar or 1-D, fixed or variable length) as a
 * NULL-terminated array of strings, fixed-length ones without their padding.
 * An empty numeric array (h5py's empty list) is 0 strings. Returns the count,
 * -2 when absent (no message), -1 on error. */
int fl_h5_attr_strings(fl_h5 *f, uint64_t obj, const char *name, char ***out);
void fl_h5_free_strings(char **s);

/* The dataset at obj (type and shape); -1 (message) when obj is not one. */
int fl_h5_dataset_open(fl_h5 *f, uint64_t obj, const char *path, fl_h5_dataset *d);
/* Reads every element converted to float32 (as_i64 false) or int64 (true)
 * into out (npoints elements). A declared size above budget_bytes (counted
 * as npoints * the output element size) is refused before anything else. */
int fl_h5_dataset_read(fl_h5 *f, const fl_h5_dataset *d, bool as_i64, void *out, uint64_t budget_bytes);

/* ------------------------------------------------------------ writing */

typedef struct fl_h5w fl_h5w;

fl_h5w *fl_h5w_new(void);
void fl_h5w_free(fl_h5w *w);
/* The group at path below group parent (0 is the root), made with its
 * intermediate groups when absent. Returns its id, or -1. */
int fl_h5w_group(fl_h5w *w, int parent, const char *path);
/* A dataset at path below parent (intermediate groups made): little-endian
 * float32 (is_i64 false) or int64. data is referenced, not copied, unless it
 * is a scalar: keep it alive until fl_h5w_finish. ndim 0 is a scalar. */
int fl_h5w_dataset(fl_h5w *w, int parent, const char *path, bool is_i64, int ndim, const int64_t *shape,
                   const void *data);
/* A UTF-8 variable-length string attribute of object obj: scalar (n == 1) or
 * 1-D; a 1-D list with n == 0 is written as h5py writes an empty list (an
 * empty float64 array). Strings are copied. Returns 0 or -1. */
int fl_h5w_attr_strings(fl_h5w *w, int obj, const char *name, const char *const *s, int n, bool scalar);
/* The whole file image (malloc'ed). Returns 0 or -1 (message set). */
int fl_h5w_finish(fl_h5w *w, void **data, size_t *len);

/* Jenkins lookup3 (hashlittle), the checksum of HDF5 metadata. */
uint32_t fl_h5_lookup3(const void *data, size_t len, uint32_t init);

#endif
