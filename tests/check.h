/*
 * check.h — the tiny assertion kit every test program uses: CHECK* macros
 * print the file, line and values of a failed check and count it; a test's
 * main() ends with `return check_report("name");`, which exits non-zero when
 * anything failed. ctest runs each program and prints the summary.
 */
#ifndef FL_TEST_CHECK_H
#define FL_TEST_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_failures = 0, check_count = 0;

#define CHECK(cond) do { check_count++; if (!(cond)) { check_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)

#define CHECK_MSG(cond, ...) do { check_count++; if (!(cond)) { check_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

/* |a - b| <= atol + rtol * |b| */
#define CHECK_CLOSE(a, b, rtol, atol) do { double ca_ = (a), cb_ = (b); check_count++; \
    if (!(fabs(ca_ - cb_) <= (atol) + (rtol) * fabs(cb_))) { check_failures++; \
    fprintf(stderr, "%s:%d: CHECK_CLOSE failed: %s = %.9g, %s = %.9g\n", __FILE__, __LINE__, #a, ca_, #b, cb_); } } while (0)

#define CHECK_STR_CONTAINS(hay, needle) do { const char *h_ = (hay); check_count++; \
    if (!h_ || !strstr(h_, (needle))) { check_failures++; \
    fprintf(stderr, "%s:%d: expected \"%s\" to contain \"%s\"\n", __FILE__, __LINE__, h_ ? h_ : "(null)", (needle)); } } while (0)

static inline int check_report(const char *name) {
    printf("%s: %d checks, %d failed\n", name, check_count, check_failures);
    return check_failures ? 1 : 0;
}

#endif
