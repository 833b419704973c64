/*
 * fault_shim.c — an LD_PRELOAD library that makes file writing fail inside
 * one folder, so that tests can show what flynn does on a full disk or in a
 * read-only folder without root privileges, mounts or /dev/full:
 *
 *   FAULT_DIR=/abs/folder   the folder (and what is below it) that fails
 *   FAULT_MODE=enospc       files opened for writing there fail with ENOSPC
 *                           once FAULT_BYTES (default 0) bytes have been
 *                           written to them in all; FAULT_OP=write (default),
 *                           fsync or close picks the call that fails
 *   FAULT_MODE=notmpfile    open(O_TMPFILE) there fails with EOPNOTSUPP, as on
 *                           a file system without unnamed files
 *   FAULT_MODE=erofs|eacces creating, opening for writing, renaming, linking,
 *                           removing and making folders there fail with
 *                           EROFS or EACCES (works as root too: root ignores
 *                           permission bits, the shim does not)
 *
 * It wraps open/openat (and their 64 forms), write/pwrite, fsync/fdatasync,
 * close, mkdir, rename, linkat and unlink: the calls flynn's atomic writer
 * (src/io/atomic.c) makes. Nothing else changes.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define MAX_FD 4096
static bool tracked[MAX_FD];
static long long budget_used;

static const char *env(const char *k) { const char *v = getenv(k); return v && *v ? v : NULL; }

static int mode_errno(void) {
    const char *m = env("FAULT_MODE");
    if (!m) return 0;
    if (strcmp(m, "erofs") == 0) return EROFS;
    if (strcmp(m, "eacces") == 0) return EACCES;
    return 0;
}
static bool enospc_mode(void) { const char *m = env("FAULT_MODE"); return m && strcmp(m, "enospc") == 0; }
static bool op_is(const char *op) {
    const char *o = env("FAULT_OP");
    return strcmp(o ? o : "write", op) == 0;
}

/* Is path (relative to dirfd's folder or the cwd) at or below FAULT_DIR? */
static bool under(int dirfd, const char *path) {
    const char *dir = env("FAULT_DIR");
    if (!dir || !path) return false;
    char full[8192];
    if (path[0] == '/') {
        snprintf(full, sizeof full, "%s", path);
    } else {
        char base[4096];
        if (dirfd == AT_FDCWD || dirfd < 0) {
            if (!getcwd(base, sizeof base)) return false;
        } else {
            char proc[64];
            snprintf(proc, sizeof proc, "/proc/self/fd/%d", dirfd);
            ssize_t n = readlink(proc, base, sizeof base - 1);
            if (n < 0) return false;
            base[n] = 0;
        }
        snprintf(full, sizeof full, "%s/%s", base, path);
    }
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/') dl--;
    if (strncmp(full, dir, dl) != 0) return false;
    char c = full[dl];
    return c == 0 || c == '/' || (c == '.' && (full[dl + 1] == 0 || full[dl + 1] == '/'));
}

static bool writes(int flags) {
    return (flags & O_ACCMODE) != O_RDONLY || (flags & O_CREAT) || (flags & O_TRUNC)
#ifdef O_TMPFILE
           || (flags & O_TMPFILE) == O_TMPFILE
#endif
        ;
}

static int do_openat(int dirfd, const char *path, int flags, mode_t mode, bool at) {
    static int (*real_openat)(int, const char *, int, ...);
    static int (*real_open)(const char *, int, ...);
    if (!real_openat) real_openat = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
    if (!real_open) real_open = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
    bool hit = writes(flags) && under(at ? dirfd : AT_FDCWD, path);
    int e = mode_errno();
    if (hit && e) { errno = e; return -1; }
#ifdef O_TMPFILE
    const char *m = env("FAULT_MODE");
    if (hit && m && strcmp(m, "notmpfile") == 0 && (flags & O_TMPFILE) == O_TMPFILE) { errno = EOPNOTSUPP; return -1; }
#endif
    int fd = at ? real_openat(dirfd, path, flags, mode) : real_open(path, flags, mode);
    if (fd >= 0 && fd < MAX_FD) tracked[fd] = hit && enospc_mode();
    return fd;
}

static mode_t va_mode(int flags, va_list ap) {
    bool need = (flags & O_CREAT)
#ifdef O_TMPFILE
                || (flags & O_TMPFILE) == O_TMPFILE
#endif
        ;
    return need ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...) {
    va_list ap; va_start(ap, flags); mode_t m = va_mode(flags, ap); va_end(ap);
    return do_openat(AT_FDCWD, path, flags, m, false);
}
int open64(const char *path, int flags, ...) {
    va_list ap; va_start(ap, flags); mode_t m = va_mode(flags, ap); va_end(ap);
    return do_openat(AT_FDCWD, path, flags, m, false);
}
int openat(int dirfd, const char *path, int flags, ...) {
    va_list ap; va_start(ap, flags); mode_t m = va_mode(flags, ap); va_end(ap);
    return do_openat(dirfd, path, flags, m, true);
}
int openat64(int dirfd, const char *path, int flags, ...) {
    va_list ap; va_start(ap, flags); mode_t m = va_mode(flags, ap); va_end(ap);
    return do_openat(dirfd, path, flags, m, true);
}

/* How many of n bytes may still be written before the disk is "full". */
static ssize_t allowance(int fd, size_t n) {
    if (fd < 0 || fd >= MAX_FD || !tracked[fd] || !op_is("write")) return (ssize_t)n;
    const char *b = env("FAULT_BYTES");
    long long limit = b ? atoll(b) : 0, left = limit - budget_used;
    if (left <= 0) return -1;
    return (ssize_t)((long long)n < left ? (long long)n : left);
}

ssize_t write(int fd, const void *buf, size_t n) {
    static ssize_t (*real)(int, const void *, size_t);
    if (!real) real = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    ssize_t k = allowance(fd, n);
    if (k < 0) { errno = ENOSPC; return -1; }
    ssize_t w = real(fd, buf, (size_t)k);
    if (w > 0 && fd < MAX_FD && fd >= 0 && tracked[fd]) budget_used += w;
    return w;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real) real = (ssize_t (*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    ssize_t k = allowance(fd, n);
    if (k < 0) { errno = ENOSPC; return -1; }
    ssize_t w = real(fd, buf, (size_t)k, off);
    if (w > 0 && fd < MAX_FD && fd >= 0 && tracked[fd]) budget_used += w;
    return w;
}
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) { return pwrite(fd, buf, n, off); }

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    if (fd >= 0 && fd < MAX_FD && tracked[fd] && op_is("fsync")) { errno = ENOSPC; return -1; }
    return real(fd);
}
int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    if (fd >= 0 && fd < MAX_FD && tracked[fd] && op_is("fsync")) { errno = ENOSPC; return -1; }
    return real(fd);
}

int close(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "close");
    bool fail = fd >= 0 && fd < MAX_FD && tracked[fd] && op_is("close");
    if (fd >= 0 && fd < MAX_FD) tracked[fd] = false;
    int r = real(fd); /* the descriptor is released either way, as the kernel does */
    if (fail) { errno = ENOSPC; return -1; }
    return r;
}

int mkdir(const char *path, mode_t mode) {
    static int (*real)(const char *, mode_t);
    if (!real) real = (int (*)(const char *, mode_t))dlsym(RTLD_NEXT, "mkdir");
    int e = mode_errno();
    if (e && under(AT_FDCWD, path)) { errno = e; return -1; }
    return real(path, mode);
}

int rename(const char *a, const char *b) {
    static int (*real)(const char *, const char *);
    if (!real) real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    int e = mode_errno();
    if (e && (under(AT_FDCWD, a) || under(AT_FDCWD, b))) { errno = e; return -1; }
    return real(a, b);
}

int linkat(int fa, const char *a, int fb, const char *b, int flags) {
    static int (*real)(int, const char *, int, const char *, int);
    if (!real) real = (int (*)(int, const char *, int, const char *, int))dlsym(RTLD_NEXT, "linkat");
    int e = mode_errno();
    if (e && under(fb, b)) { errno = e; return -1; }
    return real(fa, a, fb, b, flags);
}

int unlink(const char *path) {
    static int (*real)(const char *);
    if (!real) real = (int (*)(const char *))dlsym(RTLD_NEXT, "unlink");
    int e = mode_errno();
    if (e && under(AT_FDCWD, path)) { errno = e; return -1; }
    return real(path);
}
