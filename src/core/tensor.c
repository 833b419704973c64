/*
 * tensor.c — host tensors: creation, views, slices, reshape and shape
 * printing. Device buffers live in the backends; this is what users hold.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sysconf(_SC_PHYS_PAGES) */
#endif
#include "tensor.h"
#include "error.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

size_t fl_dtype_size(fl_dtype d) {
    switch (d) {
    case FL_FLOAT32: return 4;
    case FL_INT32: return 4;
    case FL_UINT8: return 1;
    }
    return 0;
}

const char *fl_dtype_name(fl_dtype d) {
    switch (d) {
    case FL_FLOAT32: return "float32";
    case FL_INT32: return "int32";
    case FL_UINT8: return "uint8";
    }
    return "unknown";
}

int64_t fl_shape_prod(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

bool fl_shape_numel_checked(int ndim, const int64_t *shape, int64_t *out) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || !fl_mul_checked(n, shape[i], &n)) return false;
    *out = n;
    return true;
}

bool fl_bytes_checked(int64_t numel, size_t elem, int64_t *out) {
    int64_t b;
    if (numel < 0 || elem > (size_t)INT64_MAX || !fl_mul_checked(numel, (int64_t)elem, &b)) return false;
    if ((uint64_t)b > (uint64_t)SIZE_MAX) return false;
    *out = b;
    return true;
}

/* ------------------------------------------------------- the memory budget */

/* 0: not set (the environment or the default applies). */
static int64_t g_max_model_bytes = 0;

fl_status fl_set_max_model_bytes(int64_t bytes) {
    if (bytes < 0)
        return fl_error(FL_ERR_INVALID_ARG, "fl_set_max_model_bytes: %lld, expected > 0 (or 0 for the default)",
                        (long long)bytes);
    __atomic_store_n(&g_max_model_bytes, bytes, __ATOMIC_RELAXED);
    return FL_OK;
}

/* "16G", "512M", "1048576": binary suffixes K, M, G, T (an optional "iB"/"B"). */
static bool parse_bytes(const char *s, int64_t *out) {
    char *end;
    if (!s || !isdigit((unsigned char)*s)) return false;
    unsigned long long v = strtoull(s, &end, 10);
    int shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift && (end[0] == 'i' || end[0] == 'I') && (end[1] == 'B' || end[1] == 'b')) end += 2;
    else if (end[0] == 'B' || end[0] == 'b') end++;
    if (*end || v == 0 || v > (unsigned long long)(INT64_MAX >> shift)) return false;
    *out = (int64_t)(v << shift);
    return true;
}

/* Physical memory, or the cgroup's (a container's) limit when it is lower. */
static int64_t usable_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    int64_t mem = pages > 0 && page > 0 ? (int64_t)pages * page : (int64_t)8 << 30;
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "r");
    if (f) {
        long long v;
        if (fscanf(f, "%lld", &v) == 1 && v > 0 && v < mem) mem = v;
        fclose(f);
    }
    return mem;
}

int64_t fl_model_bytes_limit(void) {
    int64_t v = __atomic_load_n(&g_max_model_bytes, __ATOMIC_RELAXED);
    if (v > 0) return v;
    if (parse_bytes(getenv("FLYNN_MAX_MODEL_BYTES"), &v)) return v;
    return usable_memory() / 2;
}

int64_t fl_get_max_model_bytes(void) { return fl_model_bytes_limit(); }

const char *fl_bytes_str(int64_t bytes, char *buf, size_t n) {
    const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 6) { v /= 1024; u++; }
    if (u == 0) snprintf(buf, n, "%lld bytes", (long long)bytes);
    else snprintf(buf, n, "%.1f %s", v, unit[u]);
    return buf;
}

const char *fl_shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t off = 0;
    if (n == 0) return buf;
    off += (size_t)snprintf(buf + off, n - off, "(");
    for (int i = 0; i < ndim && off < n; i++) {
        if (shape[i] < 0)
            off += (size_t)snprintf(buf + off, n - off, "%sNone", i ? ", " : "");
        else
            off += (size_t)snprintf(buf + off, n - off, "%s%lld", i ? ", " : "", (long long)shape[i]);
    }
    if (off < n) off += (size_t)snprintf(buf + off, n - off, ndim == 1 ? ",)" : ")");
    return buf;
}

static fl_status check_shape(fl_dtype dtype, int ndim, const int64_t *shape) {
    if (fl_dtype_size(dtype) == 0) return fl_error(FL_ERR_INVALID_ARG, "tensor: unknown dtype %d", (int)dtype);
    if (ndim < 0 || ndim > FL_MAX_DIMS)
        return fl_error(FL_ERR_INVALID_ARG, "tensor: %d dimensions, expected 0 to %d", ndim, FL_MAX_DIMS);
    if (ndim > 0 && !shape) return fl_error(FL_ERR_INVALID_ARG, "tensor: shape is NULL");
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0) return fl_error(FL_ERR_INVALID_ARG, "tensor: dimension %d is %lld, expected >= 0", i, (long long)shape[i]);
    int64_t numel, bytes;
    if (!fl_shape_numel_checked(ndim, shape, &numel) || !fl_bytes_checked(numel, fl_dtype_size(dtype), &bytes)) {
        char b[160];
        return fl_error(FL_ERR_SHAPE, "tensor: shape %s has more elements than a 64-bit size can count",
                        fl_shape_str(ndim, shape, b, sizeof b));
    }
    return FL_OK;
}

fl_tensor *fl_tensor_new(fl_dtype dtype, int ndim, const int64_t *shape) {
    if (check_shape(dtype, ndim, shape) != FL_OK) return NULL;
    fl_tensor *t = fl_calloc(1, sizeof *t, "tensor");
    if (!t) return NULL;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    size_t bytes = (size_t)fl_shape_prod(ndim, shape) * fl_dtype_size(dtype);
    t->data = fl_malloc_aligned(bytes, "tensor data");
    if (!t->data) { free(t); return NULL; }
    memset(t->data, 0, bytes);
    t->owns = true;
    return t;
}

fl_tensor *fl_tensor_view(fl_dtype dtype, int ndim, const int64_t *shape, void *data) {
    if (check_shape(dtype, ndim, shape) != FL_OK) return NULL;
    fl_tensor *t = fl_calloc(1, sizeof *t, "tensor view");
    if (!t) return NULL;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->data = data;
    t->owns = false;
    return t;
}

void fl_tensor_free(fl_tensor *t) {
    if (!t) return;
    if (t->owns) fl_free_aligned(t->data);
    free(t);
}

fl_tensor *fl_tensor_clone(const fl_tensor *t) {
    if (!t) return fl_error_null(FL_ERR_INVALID_ARG, "fl_tensor_clone: tensor is NULL");
    fl_tensor *c = fl_tensor_new(t->dtype, t->ndim, t->shape);
    if (c) memcpy(c->data, t->data, (size_t)fl_tensor_size(t) * fl_dtype_size(t->dtype));
    return c;
}

fl_tensor *fl_tensor_slice(const fl_tensor *t, int64_t start, int64_t count) {
    if (!t) return fl_error_null(FL_ERR_INVALID_ARG, "fl_tensor_slice: tensor is NULL");
    if (t->ndim < 1) return fl_error_null(FL_ERR_SHAPE, "fl_tensor_slice: a scalar has no rows");
    if (start < 0 || count < 0 || start > t->shape[0] || count > t->shape[0] - start)
        return fl_error_null(FL_ERR_SHAPE, "fl_tensor_slice: %lld rows from row %lld: outside dimension 0 of size %lld",
                             (long long)count, (long long)start, (long long)t->shape[0]);
    int64_t shape[FL_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[0] = count;
    fl_tensor *s = fl_tensor_new(t->dtype, t->ndim, shape);
    if (!s) return NULL;
    size_t row = (size_t)fl_shape_prod(t->ndim - 1, t->shape + 1) * fl_dtype_size(t->dtype);
    memcpy(s->data, (const char *)t->data + (size_t)start * row, (size_t)count * row);
    return s;
}

fl_status fl_tensor_reshape(fl_tensor *t, int ndim, const int64_t *shape) {
    if (!t) return fl_error(FL_ERR_INVALID_ARG, "fl_tensor_reshape: tensor is NULL");
    FL_TRY(check_shape(t->dtype, ndim, shape));
    int64_t numel;
    if (!fl_shape_numel_checked(ndim, shape, &numel) || numel != fl_tensor_size(t)) {
        char a[128], b[128];
        return fl_error(FL_ERR_SHAPE, "fl_tensor_reshape: cannot reshape %s into %s (different sizes)",
                        fl_shape_str(t->ndim, t->shape, a, sizeof a), fl_shape_str(ndim, shape, b, sizeof b));
    }
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    return FL_OK;
}

fl_dtype fl_tensor_dtype(const fl_tensor *t) { return t->dtype; }
int fl_tensor_ndim(const fl_tensor *t) { return t->ndim; }
int64_t fl_tensor_dim(const fl_tensor *t, int axis) {
    if (axis < 0) axis += t->ndim;
    if (axis < 0 || axis >= t->ndim) return -1;
    return t->shape[axis];
}
int64_t fl_tensor_size(const fl_tensor *t) { return fl_shape_prod(t->ndim, t->shape); }
void *fl_tensor_data(fl_tensor *t) { return t->data; }
const void *fl_tensor_cdata(const fl_tensor *t) { return t->data; }
const char *fl_tensor_shape_str(const fl_tensor *t, char *buf, size_t n) {
    return fl_shape_str(t->ndim, t->shape, buf, n);
}
