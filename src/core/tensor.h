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
int64_t fl_shape_prod(int ndim, const int64_t *shape);

#endif
