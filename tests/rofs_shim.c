/*
 * rofs_shim.c — makes one folder read-only for the process, whoever runs it
 * (root included, whom chmod does not stop): while $ROFS_SHIM_DIR is set,
 * every call that would create, write, rename into or remove something
 * under that folder fails with EROFS, as on a read-only mount; reads pass.
 * Everything else goes to the real function (dlsym RTLD_NEXT). Linked into
 * a test program (or LD_PRELOADed), it sits in front of libc, and of the
 * sanitizer's interceptors, which call on to it.
 *
 * Covers: open/open64/openat/openat64 (and the _FORTIFY_SOURCE __open_2
 * forms) with a write or create flag, creat, fopen/fopen64/freopen with a
 * mode other than "r", mkstemp/mkostemp/mkstemps/mkostemps, rename/renameat/
 * renameat2 (either name), link/symlink (the new name), unlink/unlinkat,
 * mkdir/mkdirat, rmdir, truncate. Relative names resolve against the
 * working folder; a name relative to another dirfd is resolved through
 * /proc/self/fd.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* Whether `path` (relative to dirfd) lies in $ROFS_SHIM_DIR. */
static int rofs_hit(int dirfd, const char *path) {
    const char *ro = getenv("ROFS_SHIM_DIR");
    if (!ro || !*ro || !path) return 0;
    char full[PATH_MAX * 2];
    if (path[0] == '/') {
        snprintf(full, sizeof full, "%s", path);
    } else {
        char base[PATH_MAX] = "";
        if (dirfd == AT_FDCWD) {
            if (!getcwd(base, sizeof base)) return 0;
        } else {
            char link[64];
            snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
            ssize_t n = readlink(link, base, sizeof base - 1);
            if (n <= 0) return 0;
            base[n] = 0;
        }
        snprintf(full, sizeof full, "%s/%s", base, path);
    }
    size_t n = strlen(ro);
    while (n > 1 && ro[n - 1] == '/') n--;
    return strncmp(full, ro, n) == 0 && (full[n] == 0 || full[n] == '/');
}

#define REAL(ret, name, ...) \
    static ret (*real_##name)(__VA_ARGS__); \
    if (!real_##name) real_##name = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name)
#define DENY(cond) do { if (cond) { errno = EROFS; return -1; } } while (0)
#define DENY_NULL(cond) do { if (cond) { errno = EROFS; return NULL; } } while (0)

static int writes(int flags) { return (flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND)) != 0; }
static int writes_mode(const char *m) { return m && (m[0] != 'r' || strchr(m, '+')); }

static mode_t mode_arg(int flags, va_list ap) {
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *p, int flags, ...) {
    va_list ap; va_start(ap, flags); mode_t m = mode_arg(flags, ap); va_end(ap);
    DENY(writes(flags) && rofs_hit(AT_FDCWD, p));
    REAL(int, open, const char *, int, ...);
    return real_open(p, flags, m);
}
int open64(const char *p, int flags, ...) {
    va_list ap; va_start(ap, flags); mode_t m = mode_arg(flags, ap); va_end(ap);
    DENY(writes(flags) && rofs_hit(AT_FDCWD, p));
    REAL(int, open64, const char *, int, ...);
    return real_open64(p, flags, m);
}
int openat(int d, const char *p, int flags, ...) {
    va_list ap; va_start(ap, flags); mode_t m = mode_arg(flags, ap); va_end(ap);
    DENY(writes(flags) && rofs_hit(d, p));
    REAL(int, openat, int, const char *, int, ...);
    return real_openat(d, p, flags, m);
}
int openat64(int d, const char *p, int flags, ...) {
    va_list ap; va_start(ap, flags); mode_t m = mode_arg(flags, ap); va_end(ap);
    DENY(writes(flags) && rofs_hit(d, p));
    REAL(int, openat64, int, const char *, int, ...);
    return real_openat64(d, p, flags, m);
}
int __open_2(const char *p, int flags) {
    DENY(writes(flags) && rofs_hit(AT_FDCWD, p));
    REAL(int, __open_2, const char *, int);
    return real___open_2(p, flags);
}
int __open64_2(const char *p, int flags) {
    DENY(writes(flags) && rofs_hit(AT_FDCWD, p));
    REAL(int, __open64_2, const char *, int);
    return real___open64_2(p, flags);
}
int creat(const char *p, mode_t m) {
    DENY(rofs_hit(AT_FDCWD, p));
    REAL(int, creat, const char *, mode_t);
    return real_creat(p, m);
}
FILE *fopen(const char *p, const char *mode) {
    DENY_NULL(writes_mode(mode) && rofs_hit(AT_FDCWD, p));
    REAL(FILE *, fopen, const char *, const char *);
    return real_fopen(p, mode);
}
FILE *fopen64(const char *p, const char *mode) {
    DENY_NULL(writes_mode(mode) && rofs_hit(AT_FDCWD, p));
    REAL(FILE *, fopen64, const char *, const char *);
    return real_fopen64(p, mode);
}
FILE *freopen(const char *p, const char *mode, FILE *f) {
    DENY_NULL(writes_mode(mode) && rofs_hit(AT_FDCWD, p));
    REAL(FILE *, freopen, const char *, const char *, FILE *);
    return real_freopen(p, mode, f);
}
int mkstemp(char *t) {
    DENY(rofs_hit(AT_FDCWD, t));
    REAL(int, mkstemp, char *);
    return real_mkstemp(t);
}
int mkostemp(char *t, int flags) {
    DENY(rofs_hit(AT_FDCWD, t));
    REAL(int, mkostemp, char *, int);
    return real_mkostemp(t, flags);
}
int mkstemps(char *t, int s) {
    DENY(rofs_hit(AT_FDCWD, t));
    REAL(int, mkstemps, char *, int);
    return real_mkstemps(t, s);
}
int mkostemps(char *t, int s, int flags) {
    DENY(rofs_hit(AT_FDCWD, t));
    REAL(int, mkostemps, char *, int, int);
    return real_mkostemps(t, s, flags);
}
int rename(const char *a, const char *b) {
    DENY(rofs_hit(AT_FDCWD, a) || rofs_hit(AT_FDCWD, b));
    REAL(int, rename, const char *, const char *);
    return real_rename(a, b);
}
int renameat(int da, const char *a, int db, const char *b) {
    DENY(rofs_hit(da, a) || rofs_hit(db, b));
    REAL(int, renameat, int, const char *, int, const char *);
    return real_renameat(da, a, db, b);
}
int renameat2(int da, const char *a, int db, const char *b, unsigned fl) {
    DENY(rofs_hit(da, a) || rofs_hit(db, b));
    REAL(int, renameat2, int, const char *, int, const char *, unsigned);
    return real_renameat2(da, a, db, b, fl);
}
int link(const char *a, const char *b) {
    DENY(rofs_hit(AT_FDCWD, b));
    REAL(int, link, const char *, const char *);
    return real_link(a, b);
}
int symlink(const char *a, const char *b) {
    DENY(rofs_hit(AT_FDCWD, b));
    REAL(int, symlink, const char *, const char *);
    return real_symlink(a, b);
}
int unlink(const char *p) {
    DENY(rofs_hit(AT_FDCWD, p));
    REAL(int, unlink, const char *);
    return real_unlink(p);
}
int unlinkat(int d, const char *p, int fl) {
    DENY(rofs_hit(d, p));
    REAL(int, unlinkat, int, const char *, int);
    return real_unlinkat(d, p, fl);
}
int mkdir(const char *p, mode_t m) {
    DENY(rofs_hit(AT_FDCWD, p));
    REAL(int, mkdir, const char *, mode_t);
    return real_mkdir(p, m);
}
int mkdirat(int d, const char *p, mode_t m) {
    DENY(rofs_hit(d, p));
    REAL(int, mkdirat, int, const char *, mode_t);
    return real_mkdirat(d, p, m);
}
int rmdir(const char *p) {
    DENY(rofs_hit(AT_FDCWD, p));
    REAL(int, rmdir, const char *);
    return real_rmdir(p);
}
int truncate(const char *p, off_t len) {
    DENY(rofs_hit(AT_FDCWD, p));
    REAL(int, truncate, const char *, off_t);
    return real_truncate(p, len);
}
