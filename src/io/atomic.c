/*
 * atomic.c — replacing a file atomically, for every file flynn writes
 * (model files, weights, .npy): the old file stays whole until the new one
 * is complete and on disk, and a crash at any moment leaves no debris.
 *
 *   1. Temporary files that earlier, killed processes left in the target's
 *      folder ("<name>.tmp.<pid>.<6 hex digits>" whose pid is no longer
 *      running) are removed, so that they never accumulate.
 *   2. The data goes to an unnamed file in the target's folder (Linux
 *      O_TMPFILE): a crash while writing leaves nothing. Where the file
 *      system cannot do that, to "<path>.tmp.<pid>.<suffix>" (step 1 cleans
 *      it up after a crash).
 *   3. fsync, then the unnamed file gets the temporary name (linkat) and is
 *      renamed over <path>; the folder is fsync'ed. A crash between linkat
 *      and rename is the only one that leaves a temporary file.
 * Any failure (a full disk, a read-only folder) removes the temporary file
 * and is reported naming <path> and the system's reason.
 *
 * Files are opened with open(2) and written with write(2), never through
 * stdio, so that tests can inject faults with an LD_PRELOAD shim
 * (tests/fault_shim.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_TMPFILE, linkat */
#endif
#include "io/io.h"
#include "core/error.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static mode_t current_umask(void) {
    mode_t m = 022;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return m;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        unsigned v;
        if (sscanf(line, "Umask: %o", &v) == 1) { m = (mode_t)v; break; }
    }
    fclose(f);
    return m;
}

/* The folder of path ("." when it has none) into dir[n]; false if too long. */
static bool dir_of(const char *path, char *dir, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash) return snprintf(dir, n, ".") < (int)n;
    size_t len = slash == path ? 1 : (size_t)(slash - path);
    if (len + 1 > n) return false;
    memcpy(dir, path, len);
    dir[len] = 0;
    return true;
}

/* The pid in a name that ends in ".tmp.<pid>.<6 hex digits>" (the names
 * temp_name makes), or 0. */
static long temp_owner(const char *n) {
    size_t len = strlen(n);
    if (len < 14) return 0;
    const char *hex = n + len - 6;
    for (int i = 0; i < 6; i++)
        if (!((hex[i] >= '0' && hex[i] <= '9') || (hex[i] >= 'a' && hex[i] <= 'f'))) return 0;
    if (hex[-1] != '.') return 0;
    const char *d = hex - 1;
    while (d > n && d[-1] >= '0' && d[-1] <= '9') d--;
    if (d == hex - 1 || d - n < 5 || strncmp(d - 5, ".tmp.", 5) != 0) return 0;
    return strtol(d, NULL, 10);
}

/* Step 1: removes the temporary files in dir whose process is gone (those
 * of any target there: a target saved once, at the end of a run, would
 * otherwise keep the debris of every run killed before that save). */
static void clean_stale(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long pid = temp_owner(e->d_name);
        if (pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* running (or not ours to judge) */
        (void)unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

/* "<path>.tmp.<pid>.<6 hex digits>" into a fresh buffer. */
static char *temp_name(const char *path, unsigned salt) {
    size_t n = strlen(path) + 40;
    char *t = fl_malloc(n, "temporary file name");
    if (!t) return NULL;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned r = ((unsigned)ts.tv_nsec ^ (unsigned)getpid() * 2654435761u ^ salt * 40503u) & 0xffffffu;
    snprintf(t, n, "%s.tmp.%ld.%06x", path, (long)getpid(), r);
    return t;
}

fl_status fl_atomic_open(fl_atomic_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->path = path;
    char dir[4096];
    if (!dir_of(path, dir, sizeof dir)) return fl_error(FL_ERR_IO, "cannot write %s: the path is too long", path);
    clean_stale(dir);
    struct stat st;
    bool exists = stat(path, &st) == 0;
    if (exists && S_ISDIR(st.st_mode)) return fl_error(FL_ERR_IO, "cannot write %s: it is a folder", path);
    f->mode = exists && S_ISREG(st.st_mode) ? (st.st_mode & 07777) : (0666 & ~current_umask());
#ifdef O_TMPFILE
    if (access("/proc/self/fd", X_OK) == 0) {
        f->fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
        if (f->fd >= 0) {
            f->anonymous = true;
            (void)fchmod(f->fd, f->mode); /* best effort: a file system without modes is fine */
            return FL_OK;
        }
        /* no O_TMPFILE here (EOPNOTSUPP, EISDIR, EINVAL): a named file; a
         * read-only or full folder fails the same way below */
    }
#endif
    for (unsigned salt = 0; salt < 100; salt++) {
        free(f->tmp);
        if (!(f->tmp = temp_name(path, salt))) return fl_last_status();
        f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (f->fd >= 0) {
            (void)fchmod(f->fd, f->mode);
            return FL_OK;
        }
        if (errno != EEXIST) break;
    }
    int e = errno;
    free(f->tmp);
    f->tmp = NULL;
    return fl_error(FL_ERR_IO, "cannot write %s: cannot create a file in the folder %s: %s", path, dir, strerror(e));
}

fl_status fl_atomic_write(fl_atomic_file *f, const void *data, size_t len) {
    const char *p = data;
    while (len > 0) {
        ssize_t w = write(f->fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            return fl_error(FL_ERR_IO, "cannot write %s: %s", f->path, w < 0 ? strerror(errno) : "no progress writing");
        p += w;
        len -= (size_t)w;
        f->written += (size_t)w;
    }
    return FL_OK;
}

void fl_atomic_abort(fl_atomic_file *f) {
    if (f->fd >= 0) close(f->fd);
    if (f->tmp) unlink(f->tmp);
    free(f->tmp);
    f->tmp = NULL;
    f->fd = -1;
}

fl_status fl_atomic_commit(fl_atomic_file *f) {
    const char *path = f->path;
    fl_status s = FL_OK;
    if (fsync(f->fd) != 0 && errno != EINVAL && errno != ENOTSUP)
        s = fl_error(FL_ERR_IO, "cannot write %s: fsync: %s", path, strerror(errno));
    if (s == FL_OK && f->anonymous) {
        /* give the unnamed file its temporary name, then rename it over path */
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", f->fd);
        for (unsigned salt = 0; salt < 100; salt++) {
            free(f->tmp);
            if (!(f->tmp = temp_name(path, salt))) { s = fl_last_status(); break; }
            if (linkat(AT_FDCWD, proc, AT_FDCWD, f->tmp, AT_SYMLINK_FOLLOW) == 0) break;
            int e = errno;
            free(f->tmp);
            f->tmp = NULL;
            if (e != EEXIST) {
                s = fl_error(FL_ERR_IO, "cannot write %s: cannot name the new file: %s", path, strerror(e));
                break;
            }
        }
        if (s == FL_OK && !f->tmp) s = fl_error(FL_ERR_IO, "cannot write %s: no free temporary name", path);
    }
    if (close(f->fd) != 0 && s == FL_OK) s = fl_error(FL_ERR_IO, "cannot write %s: close: %s", path, strerror(errno));
    f->fd = -1;
    if (s == FL_OK && rename(f->tmp, path) != 0) s = fl_error(FL_ERR_IO, "cannot write %s: rename: %s", path, strerror(errno));
    if (s != FL_OK) {
        fl_atomic_abort(f);
        return s;
    }
    free(f->tmp);
    f->tmp = NULL;
    char dir[4096];
    if (dir_of(path, dir, sizeof dir)) { /* make the rename itself durable (best effort) */
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
    }
    return FL_OK;
}

fl_status fl_atomic_save(const char *path, const void *data, size_t len) {
    fl_atomic_file f;
    FL_TRY(fl_atomic_open(&f, path));
    fl_status s = fl_atomic_write(&f, data, len);
    if (s != FL_OK) {
        fl_atomic_abort(&f);
        return s;
    }
    return fl_atomic_commit(&f);
}
