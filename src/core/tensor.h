/*
 * tensor.h — the layout of fl_tensor, a dense row-major host array, shared by
 * the library's own files (the public header keeps it opaque).
 */
#ifndef FL_TENSOR_H
#define FL_TENSOR_H

#include "flynn/flynn.h"

struct fl_tensor {
    fl_dtype dtype;
    int ndim;
    int64_t shape[FL_MAX_DIMS];
    void *data;
    bool owns; /* false for views onto model weights */
};

size_t fl_dtype_size(fl_dtype d);
const char *fl_dtype_name(fl_dtype d);
/* A tensor that borrows `data` (freed with fl_tensor_free, data untouched). */
fl_tensor *fl_tensor_view(fl_dtype dtype, int ndim, const int64_t *shape, void *data);
/* Writes "(a, b, c)" for a shape; NULL-terminated into buf. */
const char *fl_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);
/* The product of a shape that is known to be valid (checked when it was made). */
int64_t fl_shape_prod(int ndim, const int64_t *shape);

/* Checked size arithmetic: every element count and byte size computed from a
 * shape that came from outside (a model file, a data file, a user's call)
 * goes through these. Each returns false on overflow (or a negative
 * operand for the counts), and writes *out only on success. */
static inline bool fl_mul_checked(int64_t a, int64_t b, int64_t *out) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}
static inline bool fl_add_checked(int64_t a, int64_t b, int64_t *out) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}
/* Elements of a shape: false when a dimension is negative or the product overflows. */
bool fl_shape_numel_checked(int ndim, const int64_t *shape, int64_t *out);
/* numel * elem as a byte count: false when it overflows int64 (or size_t). */
bool fl_bytes_checked(int64_t numel, size_t elem, int64_t *out);

/* The largest size of one dimension of a graph node: kernels index an
 * axis with int. */
#define FL_MAX_DIM ((int64_t)INT32_MAX)

/* The memory budget of one model (fl_set_max_model_bytes, $FLYNN_MAX_MODEL_BYTES,
 * default half of physical memory): its weights, gradients and batch buffers. */
int64_t fl_model_bytes_limit(void);
/* "12.0 GiB" into buf. */
const char *fl_bytes_str(int64_t bytes, char *buf, size_t n);

#endif
