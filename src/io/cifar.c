/*
 * cifar.c — fl_load_cifar10: the CIFAR-10 binary version
 * (cifar-10-binary.tar.gz) into float32 tensors.
 *
 * The folder holds data_batch_1.bin ... data_batch_5.bin (training, 10000
 * records each) and test_batch.bin, either directly or in the subfolder
 * cifar-10-batches-bin that the archive unpacks to. A record is one label
 * byte (0..9) then 3072 pixel bytes: the 32x32 red plane, then green, then
 * blue, each row-major. Output: x float32 (N, 32, 32, 3) channels-last in
 * [0, 1] (byte / 255, as Keras' x.astype("float32") / 255), y float32 (N,).
 *
 * Batches are read in order only while more training records are wanted,
 * so max_train = 3 touches data_batch_1.bin alone, and a batch may hold any
 * number of records. A file must be a non-empty multiple of 3073 bytes and
 * every label read must be 0..9. max_train/max_test larger than the data
 * keep all of it. On any error *out is left empty (all NULL).
 */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* open, fstat, mkstemp, fsync, ... under -std=c11 */
#endif
#include "flynn/flynn.h"
#include "core/error.h"
#include "core/tensor.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CIFAR_PIXELS 3072
#define CIFAR_RECORD (1 + CIFAR_PIXELS)
#define CIFAR_CHUNK 1024 /* records per fread */
#define CIFAR_SUBDIR "cifar-10-batches-bin"
#define CIFAR_TRAIN_FILES 5

static const char *const train_names[CIFAR_TRAIN_FILES] = {
    "data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin",
};
static const char *const test_name = "test_batch.bin";

/* "dir/name" in a new buffer (NULL and FL_ERR_NOMEM on failure). */
static char *join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    bool slash = a > 0 && dir[a - 1] != '/';
    char *p = fl_malloc(a + slash + b + 1, "file path");
    if (!p) return NULL;
    memcpy(p, dir, a);
    if (slash) p[a] = '/';
    memcpy(p + a + slash, name, b + 1);
    return p;
}

static bool exists_as(const char *dir, const char *name, bool want_dir) {
    char *p = join(dir, name);
    if (!p) return false;
    struct stat st;
    bool ok = stat(p, &st) == 0 && (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
    free(p);
    return ok;
}

typedef struct cifar_part {
    char *path;
    FILE *f;
    int64_t take; /* records to read from the start of the file */
} cifar_part;

static void parts_close(cifar_part *p, int n) {
    for (int i = 0; i < n; i++) {
        if (p[i].f) fclose(p[i].f);
        free(p[i].path);
        p[i].path = NULL;
        p[i].f = NULL;
    }
}

/* Opens base/name and checks its size; sets part->take to at most `want`
 * records (want 0: all). */
static fl_status open_part(const char *dir, const char *base, const char *name, int64_t want, cifar_part *part) {
    part->path = join(base, name);
    if (!part->path) return FL_ERR_NOMEM;
    part->f = fopen(part->path, "rb");
    if (!part->f) {
        int e = errno;
        struct stat st;
        const char *why = stat(dir, &st) != 0 ? " (the folder does not exist)" : "";
        const char *hint = "";
        if (exists_as(base, "data_batch_1", false) || exists_as(dir, "cifar-10-batches-py", true))
            hint = "; this folder has the Python (pickle) version, flynn reads the binary version";
        return fl_error(FL_ERR_IO,
                        "fl_load_cifar10: cannot open %s: %s%s; expected the CIFAR-10 binary version "
                        "(cifar-10-binary.tar.gz) in %s or %s/" CIFAR_SUBDIR
                        ": data_batch_1.bin, data_batch_2.bin, data_batch_3.bin, data_batch_4.bin, "
                        "data_batch_5.bin and test_batch.bin%s",
                        part->path, strerror(e), why, dir, dir, hint);
    }
    struct stat st;
    if (fstat(fileno(part->f), &st) != 0)
        return fl_error(FL_ERR_IO, "fl_load_cifar10: cannot stat %s: %s", part->path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return fl_error(FL_ERR_IO, "fl_load_cifar10: %s is not a regular file", part->path);
    int64_t size = (int64_t)st.st_size;
    if (size == 0) return fl_error(FL_ERR_FORMAT, "fl_load_cifar10: %s is empty", part->path);
    if (size % CIFAR_RECORD != 0)
        return fl_error(FL_ERR_FORMAT,
                        "fl_load_cifar10: %s: size %lld bytes is not a multiple of the %d-byte CIFAR-10 record "
                        "(1 label byte + 3072 pixel bytes)%s",
                        part->path, (long long)size, CIFAR_RECORD,
                        size % (CIFAR_RECORD + 1) == 0 ? "; it is a multiple of 3074: the CIFAR-100 binary version?" : "");
    int64_t records = size / CIFAR_RECORD;
    part->take = want > 0 && want < records ? want : records;
    return FL_OK;
}

/* Reads parts[0..n) into new tensors x (N, 32, 32, 3) and y (N,). */
static fl_status read_parts(cifar_part *parts, int n, fl_tensor **xo, fl_tensor **yo) {
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += parts[i].take;
    fl_status s = FL_ERR_NOMEM;
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, total, 32, 32, 3);
    fl_tensor *y = fl_tensor_zeros(FL_FLOAT32, total);
    unsigned char *buf = fl_malloc((size_t)CIFAR_CHUNK * CIFAR_RECORD, "CIFAR-10 read buffer");
    if (!x || !y || !buf) goto fail;
    float *xd = x->data, *yd = y->data;
    int64_t row = 0;
    for (int i = 0; i < n; i++) {
        for (int64_t r = 0; r < parts[i].take;) {
            size_t k = parts[i].take - r < CIFAR_CHUNK ? (size_t)(parts[i].take - r) : CIFAR_CHUNK;
            size_t got = fread(buf, CIFAR_RECORD, k, parts[i].f);
            if (got < k) {
                if (ferror(parts[i].f))
                    s = fl_error(FL_ERR_IO, "fl_load_cifar10: read error in %s: %s", parts[i].path, strerror(errno));
                else
                    s = fl_error(FL_ERR_FORMAT, "fl_load_cifar10: %s: truncated: file ends at record %lld of %lld",
                             parts[i].path, (long long)(r + (int64_t)got), (long long)parts[i].take);
                goto fail;
            }
            for (size_t j = 0; j < k; j++, row++) {
                const unsigned char *rec = buf + j * CIFAR_RECORD;
                if (rec[0] > 9) {
                    s = fl_error(FL_ERR_FORMAT, "fl_load_cifar10: %s: record %lld has label %u, expected 0..9",
                             parts[i].path, (long long)(r + (int64_t)j), rec[0]);
                    goto fail;
                }
                yd[row] = (float)rec[0];
                const unsigned char *px = rec + 1;
                float *dst = xd + row * CIFAR_PIXELS;
                for (int p = 0; p < 1024; p++) { /* CHW -> HWC */
                    dst[3 * p + 0] = (float)px[p] / 255.0f;
                    dst[3 * p + 1] = (float)px[1024 + p] / 255.0f;
                    dst[3 * p + 2] = (float)px[2048 + p] / 255.0f;
                }
            }
            r += (int64_t)k;
        }
    }
    free(buf);
    *xo = x;
    *yo = y;
    return FL_OK;
fail:
    free(buf);
    fl_tensor_free(x);
    fl_tensor_free(y);
    return s;
}

fl_status fl_load_cifar10(const char *dir, int64_t max_train, int64_t max_test, fl_dataset *out) {
    if (!out) return fl_error(FL_ERR_INVALID_ARG, "fl_load_cifar10: out is NULL");
    memset(out, 0, sizeof *out);
    if (!dir || !*dir) return fl_error(FL_ERR_INVALID_ARG, "fl_load_cifar10: dir is NULL or empty");
    if (max_train < 0 || max_test < 0)
        return fl_error(FL_ERR_INVALID_ARG, "fl_load_cifar10: max_train %lld / max_test %lld, expected >= 0 (0 = all)",
                        (long long)max_train, (long long)max_test);

    char *sub = NULL;
    const char *base = dir;
    if (!exists_as(dir, train_names[0], false) && !exists_as(dir, test_name, false) &&
        exists_as(dir, CIFAR_SUBDIR, true)) {
        sub = join(dir, CIFAR_SUBDIR);
        if (!sub) return FL_ERR_NOMEM;
        base = sub;
    }

    cifar_part train[CIFAR_TRAIN_FILES] = {{0}}, test = {0};
    int n_train = 0;
    fl_status s = FL_OK;
    int64_t want = max_train; /* 0: everything */
    for (int i = 0; i < CIFAR_TRAIN_FILES; i++) {
        s = open_part(dir, base, train_names[i], want, &train[n_train]);
        n_train++;
        if (s != FL_OK) goto done;
        if (max_train > 0) {
            want -= train[n_train - 1].take;
            if (want == 0) break;
        }
    }
    if ((s = open_part(dir, base, test_name, max_test, &test)) != FL_OK) goto done;

    if ((s = read_parts(train, n_train, &out->x_train, &out->y_train)) != FL_OK) goto done;
    if ((s = read_parts(&test, 1, &out->x_test, &out->y_test)) != FL_OK) goto done;

done:
    parts_close(train, n_train);
    parts_close(&test, 1);
    free(sub);
    if (s != FL_OK) fl_dataset_free(out);
    return s;
}
