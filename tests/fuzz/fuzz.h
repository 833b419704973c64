/*
 * fuzz.h — what the fuzz harnesses in tests/fuzz share: the libFuzzer entry
 * points' prototypes, a private temporary folder per process, and writing
 * one input into a named file there (flynn's loaders take paths; the file
 * name's ending matters to fl_load_model, so each harness picks a name).
 *
 * The folder is $FLYNN_FUZZ_TMPDIR, else a new flynn-fuzz-XXXXXX under
 * /dev/shm (memory, so a write costs microseconds) or $TMPDIR or /tmp. It is
 * removed at a normal exit; a crash leaves it (a few small files) behind.
 * A failure here is the harness's, not flynn's: it aborts with a message.
 */
#ifndef FL_FUZZ_H
#define FL_FUZZ_H

#include "flynn/flynn.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_FILES 32

static struct {
    char dir[512];
    bool own_dir;
    int nfiles;
    char files[FUZZ_MAX_FILES][600];
} fuzz_tmp;

static inline void fuzz_cleanup(void) {
    for (int i = fuzz_tmp.nfiles - 1; i >= 0; i--) /* files, then the folders made before them */
        if (unlink(fuzz_tmp.files[i]) != 0) rmdir(fuzz_tmp.files[i]);
    fuzz_tmp.nfiles = 0;
    if (fuzz_tmp.own_dir) rmdir(fuzz_tmp.dir);
    fuzz_tmp.own_dir = false;
}

static inline void fuzz_die(const char *what, const char *path) {
    fprintf(stderr, "fuzz harness: %s %s\n", what, path ? path : "");
    abort();
}

/* The process's temporary folder, made at the first call. */
static inline const char *fuzz_dir(void) {
    if (fuzz_tmp.dir[0]) return fuzz_tmp.dir;
    const char *given = getenv("FLYNN_FUZZ_TMPDIR");
    if (given && *given) {
        snprintf(fuzz_tmp.dir, sizeof fuzz_tmp.dir, "%s", given);
        return fuzz_tmp.dir;
    }
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    snprintf(fuzz_tmp.dir, sizeof fuzz_tmp.dir, "%s/flynn-fuzz-XXXXXX", base);
    if (!mkdtemp(fuzz_tmp.dir)) fuzz_die("cannot make a temporary folder like", fuzz_tmp.dir);
    fuzz_tmp.own_dir = true;
    atexit(fuzz_cleanup);
    return fuzz_tmp.dir;
}

/* The path of `name` in the temporary folder, remembered for the cleanup. */
static inline const char *fuzz_path(const char *name) {
    const char *dir = fuzz_dir();
    static char path[600];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path) fuzz_die("path too long:", name);
    int i = 0;
    while (i < fuzz_tmp.nfiles && strcmp(fuzz_tmp.files[i], path) != 0) i++;
    if (i == fuzz_tmp.nfiles) {
        if (i == FUZZ_MAX_FILES) fuzz_die("too many temporary files, at", path);
        memcpy(fuzz_tmp.files[fuzz_tmp.nfiles++], path, sizeof path);
    }
    return path;
}

/* Makes the folder `name` in the temporary folder (once); returns its path. */
static inline const char *fuzz_mkdir(const char *name) {
    const char *path = fuzz_path(name);
    struct stat st;
    if (stat(path, &st) != 0 && mkdir(path, 0700) != 0) fuzz_die("cannot make the folder", path);
    return path;
}

/* Writes data into the temporary folder as `name`; returns its path (valid
 * until the next call). */
static inline const char *fuzz_file(const char *name, const uint8_t *data, size_t size) {
    const char *path = fuzz_path(name);
    FILE *f = fopen(path, "wb");
    if (!f) fuzz_die("cannot write", path);
    if ((size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) fuzz_die("cannot write", path);
    return path;
}

/* A property flynn must keep broke: print the input's story and abort, so
 * that libFuzzer saves the input like a crash. */
static inline void fuzz_fail(const char *what) {
    fprintf(stderr, "fuzz harness: %s (flynn says: %s)\n", what, fl_last_error());
    abort();
}

#endif
