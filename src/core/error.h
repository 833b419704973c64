/*
 * error.h — internal error reporting: every failing call sets a status and a
 * message (printf-style) that fl_last_error() returns; the helpers below keep
 * call sites to one line.
 */
#ifndef FL_ERROR_H
#define FL_ERROR_H

#include "flynn/flynn.h"

#if defined(__GNUC__)
#define FL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define FL_PRINTF(a, b)
#endif

/* Sets the thread's error and returns `s`, so that `return fl_error(...)` works. */
fl_status fl_error(fl_status s, const char *fmt, ...) FL_PRINTF(2, 3);
/* Same, returning NULL for functions that return pointers. */
void *fl_error_null(fl_status s, const char *fmt, ...) FL_PRINTF(2, 3);
/* Prepends context ("loading model.keras: ") to the current message. */
void fl_error_prefix(const char *fmt, ...) FL_PRINTF(1, 2);

/* malloc/calloc that set FL_ERR_NOMEM with what was being allocated. */
void *fl_malloc(size_t bytes, const char *what);
void *fl_calloc(size_t n, size_t size, const char *what);
/* 64-byte aligned, for SIMD kernels; free with fl_free_aligned. */
void *fl_malloc_aligned(size_t bytes, const char *what);
/* The same on an `align`-byte boundary (a power of two, >= 64), the size rounded up to it. */
void *fl_malloc_aligned_to(size_t bytes, size_t align, const char *what);
void fl_free_aligned(void *p);

#define FL_TRY(expr) do { fl_status fl__s = (expr); if (fl__s != FL_OK) return fl__s; } while (0)

#endif
