/*
 * error.c — the thread-local last error (status + message) behind
 * fl_last_error(), and allocation helpers that report what failed.
 */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local fl_status tl_status = FL_OK;
static _Thread_local char tl_msg[4096];

/* the version is written once, in flynn.h (CMakeLists.txt reads it from there) */
#define FL_STR_(x) #x
#define FL_STR(x) FL_STR_(x)
const char *fl_version(void) {
    return FL_STR(FLYNN_VERSION_MAJOR) "." FL_STR(FLYNN_VERSION_MINOR) "." FL_STR(FLYNN_VERSION_PATCH);
}

const char *fl_last_error(void) { return tl_msg; }
fl_status fl_last_status(void) { return tl_status; }
void fl_clear_error(void) { tl_status = FL_OK; tl_msg[0] = 0; }

const char *fl_status_name(fl_status s) {
    switch (s) {
    case FL_OK: return "FL_OK";
    case FL_ERR_INVALID_ARG: return "FL_ERR_INVALID_ARG";
    case FL_ERR_SHAPE: return "FL_ERR_SHAPE";
    case FL_ERR_IO: return "FL_ERR_IO";
    case FL_ERR_FORMAT: return "FL_ERR_FORMAT";
    case FL_ERR_NOMEM: return "FL_ERR_NOMEM";
    case FL_ERR_DEVICE: return "FL_ERR_DEVICE";
    case FL_ERR_UNSUPPORTED: return "FL_ERR_UNSUPPORTED";
    case FL_ERR_STATE: return "FL_ERR_STATE";
    case FL_ERR_NONFINITE: return "FL_ERR_NONFINITE";
    }
    return "FL_ERR_UNKNOWN";
}

static void set_v(fl_status s, const char *fmt, va_list ap) {
    tl_status = s;
    vsnprintf(tl_msg, sizeof tl_msg, fmt, ap);
}

fl_status fl_error(fl_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_v(s, fmt, ap);
    va_end(ap);
    return s;
}

void *fl_error_null(fl_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_v(s, fmt, ap);
    va_end(ap);
    return NULL;
}

void fl_error_prefix(const char *fmt, ...) {
    char pre[512], old[sizeof tl_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, tl_msg, sizeof old);
    snprintf(tl_msg, sizeof tl_msg, "%.500s%.3500s", pre, old);
}

void *fl_malloc(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) fl_error(FL_ERR_NOMEM, "out of memory allocating %zu bytes for %s", bytes, what);
    return p;
}

void *fl_calloc(size_t n, size_t size, const char *what) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) fl_error(FL_ERR_NOMEM, "out of memory allocating %zu x %zu bytes for %s", n, size, what);
    return p;
}

void *fl_malloc_aligned_to(size_t bytes, size_t align, const char *what) {
    void *p = NULL;
    size_t sz = (bytes + align - 1) & ~(align - 1);
    if (posix_memalign(&p, align, sz ? sz : align) != 0) {
        fl_error(FL_ERR_NOMEM, "out of memory allocating %zu bytes for %s", bytes, what);
        return NULL;
    }
    return p;
}

void *fl_malloc_aligned(size_t bytes, const char *what) { return fl_malloc_aligned_to(bytes, 64, what); }

void fl_free_aligned(void *p) { free(p); }
