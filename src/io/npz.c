/*
 * npz.c — NumPy .npz archives (np.savez, np.savez_compressed): fl_load_npz,
 * fl_arrays_get, fl_arrays_free and fl_load_npz_xy.
 *
 * An .npz is a zip of .npy files, one per array, each named "<key>.npy";
 * np.savez stores them, np.savez_compressed deflates them. The zip is read
 * with the reader the .keras files use (keras_file.c, fl_zip_open_read and
 * fl_zip_read_index over libzip: consistency checked at open, CRC and size
 * of every entry checked when read, a declared size over FL_NPZ_MAX_ENTRY
 * refused before inflating), and each entry is parsed by npy.c from memory.
 * An entry that does not end in ".npy", two entries with the same key, or
 * an archive with no entries is refused, naming the file and the entry.
 *
 * fl_load_npz_xy takes x/y (np.savez(f, x=x, y=y)) or the keras.datasets
 * layout x_train/y_train (+ x_test/y_test, as mnist.npz holds them).
 *
 * fl_save_npz writes what np.savez writes: a zip whose entries "<key>.npy"
 * are stored (not deflated), each the bytes np.save would write (npy.c's
 * fl_npy_emit), in the order of the arrays, dated 1980-01-01 00:00 and with
 * permissions rw------- as NumPy's (zipfile's ZipInfo defaults), so that the
 * same arrays give the same bytes; Zip64 records only where a size, an
 * offset or the count passes the classic format's limits. The zip is written here
 * rather than by libzip so that it streams into the atomic file (atomic.c)
 * without a copy of the arrays: each entry's CRC-32 (zlib) is computed in a
 * first pass over its bytes, then the local header and the bytes follow.
 * fl_npz_writer (io.h) adds the arrays one at a time, so that a caller
 * (`flynn sift DIR --out F.npz`) never holds them all.
 */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "flynn/flynn.h"
#include "core/error.h"
#include "io/io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>
#include <zlib.h>

#define FL_NPZ_MAX_ENTRY ((int64_t)16 << 30) /* 16 GiB per array */

void fl_arrays_free(fl_arrays *a) {
    if (!a) return;
    for (int i = 0; i < a->count; i++) {
        free(a->names ? a->names[i] : NULL);
        fl_tensor_free(a->arrays ? a->arrays[i] : NULL);
    }
    free(a->names);
    free(a->arrays);
    memset(a, 0, sizeof *a);
}

fl_tensor *fl_arrays_get(const fl_arrays *a, const char *name) {
    if (!a || !name) return NULL;
    for (int i = 0; i < a->count; i++)
        if (strcmp(a->names[i], name) == 0) return a->arrays[i];
    return NULL;
}

fl_status fl_load_npz(const char *path, fl_arrays *out) {
    if (!out) return fl_error(FL_ERR_INVALID_ARG, "fl_load_npz: out is NULL");
    memset(out, 0, sizeof *out);
    if (!path) return fl_error(FL_ERR_INVALID_ARG, "fl_load_npz: path is NULL");
    struct zip *za = fl_zip_open_read(path, ".npz");
    if (!za) return fl_last_status();
    fl_status s = FL_OK;
    zip_int64_t n = zip_get_num_entries(za, 0);
    if (n <= 0) {
        s = fl_error(FL_ERR_FORMAT, "%s: the archive holds no arrays, expected .npy entries (np.savez)", path);
        goto done;
    }
    if (n > 1 << 20) {
        s = fl_error(FL_ERR_FORMAT, "%s: %lld entries, more than flynn's limit of %d arrays", path, (long long)n, 1 << 20);
        goto done;
    }
    out->names = calloc((size_t)n, sizeof *out->names);
    out->arrays = calloc((size_t)n, sizeof *out->arrays);
    if (!out->names || !out->arrays) { s = fl_error(FL_ERR_NOMEM, "%s: out of memory for %lld arrays", path, (long long)n); goto done; }
    for (zip_int64_t i = 0; i < n; i++) {
        const char *name = zip_get_name(za, (zip_uint64_t)i, 0);
        size_t nl = name ? strlen(name) : 0;
        if (!name || nl < 5 || strcmp(name + nl - 4, ".npy") != 0) {
            s = fl_error(FL_ERR_FORMAT, "%s: entry %lld '%s' is not a .npy array (an .npz holds only <key>.npy entries, "
                         "as np.savez writes them)", path, (long long)i, name ? name : "?");
            goto done;
        }
        char *data = NULL;
        size_t len = 0;
        if ((s = fl_zip_read_index(za, path, (int64_t)i, FL_NPZ_MAX_ENTRY, &data, &len)) != FL_OK) goto done;
        char what[1024];
        snprintf(what, sizeof what, "%s: array '%.*s'", path, (int)(nl - 4), name);
        fl_tensor *t = fl_npy_load_mem(data, len, what);
        free(data);
        if (!t) { s = fl_last_status(); goto done; }
        char *key = fl_malloc(nl - 3, "array name");
        if (!key) { fl_tensor_free(t); s = FL_ERR_NOMEM; goto done; }
        memcpy(key, name, nl - 4);
        key[nl - 4] = 0;
        if (fl_arrays_get(out, key)) {
            s = fl_error(FL_ERR_FORMAT, "%s: two arrays named '%s'", path, key);
            free(key);
            fl_tensor_free(t);
            goto done;
        }
        out->names[out->count] = key;
        out->arrays[out->count++] = t;
    }
done:
    zip_close(za);
    if (s != FL_OK) fl_arrays_free(out);
    return s;
}

/* Takes t out of a (the caller owns it). */
static fl_tensor *take(fl_arrays *a, const char *name) {
    for (int i = 0; i < a->count; i++)
        if (strcmp(a->names[i], name) == 0) {
            fl_tensor *t = a->arrays[i];
            a->arrays[i] = NULL;
            return t;
        }
    return NULL;
}

fl_status fl_load_npz_xy(const char *path, fl_dataset *out, fl_data_info *info) {
    if (!out) return fl_error(FL_ERR_INVALID_ARG, "fl_load_npz_xy: out is NULL");
    memset(out, 0, sizeof *out);
    if (info) memset(info, 0, sizeof *info);
    fl_arrays a;
    FL_TRY(fl_load_npz(path, &a));
    const char *kx = fl_arrays_get(&a, "x") ? "x" : "x_train", *ky = fl_arrays_get(&a, "x") ? "y" : "y_train";
    fl_status s = FL_OK;
    if (!fl_arrays_get(&a, kx) || !fl_arrays_get(&a, ky)) {
        char keys[512] = "";
        for (int i = 0; i < a.count; i++)
            snprintf(keys + strlen(keys), sizeof keys - strlen(keys), "%s'%s'", i ? ", " : "", a.names[i]);
        s = fl_error(FL_ERR_FORMAT, "%s: expected arrays 'x' and 'y' (np.savez(f, x=x, y=y)) or 'x_train' and "
                     "'y_train' (and optionally 'x_test', 'y_test'); the file holds %s", path, keys);
        goto done;
    }
    out->x_train = take(&a, kx);
    out->y_train = take(&a, ky);
    char wx[1100], wy[1100];
    snprintf(wx, sizeof wx, "%s: '%s'", path, kx);
    snprintf(wy, sizeof wy, "%s: '%s'", path, ky);
    if ((s = fl_data_check_xy(wx, &out->x_train, wy, out->y_train)) != FL_OK) goto done;
    if (strcmp(kx, "x_train") == 0 && (fl_arrays_get(&a, "x_test") || fl_arrays_get(&a, "y_test"))) {
        if (!fl_arrays_get(&a, "x_test") || !fl_arrays_get(&a, "y_test")) {
            s = fl_error(FL_ERR_FORMAT, "%s: holds '%s' without '%s': a test set needs both", path,
                         fl_arrays_get(&a, "x_test") ? "x_test" : "y_test", fl_arrays_get(&a, "x_test") ? "y_test" : "x_test");
            goto done;
        }
        out->x_test = take(&a, "x_test");
        out->y_test = take(&a, "y_test");
        snprintf(wx, sizeof wx, "%s: 'x_test'", path);
        snprintf(wy, sizeof wy, "%s: 'y_test'", path);
        if ((s = fl_data_check_xy(wx, &out->x_test, wy, out->y_test)) != FL_OK) goto done;
    }
    if (info) {
        char a1[128], b1[128];
        snprintf(info->description, sizeof info->description, "%s: x '%s' %s, y '%s' %s", path, kx,
                 fl_tensor_shape_str(out->x_train, a1, sizeof a1), ky, fl_tensor_shape_str(out->y_train, b1, sizeof b1));
        if (out->x_test)
            snprintf(info->description + strlen(info->description), sizeof info->description - strlen(info->description),
                     ", x_test %s", fl_tensor_shape_str(out->x_test, a1, sizeof a1));
    }
done:
    fl_arrays_free(&a);
    if (s != FL_OK) fl_dataset_free(out);
    return s;
}

/* ------------------------------------------------------------ writing */

#define ZIP_MAX32 0xffffffffu /* the classic fields' "see the Zip64 record" values */
#define ZIP_MAX16 0xffffu
/* Where the Zip64 records start: the classic format's limits (tests/CMakeLists.txt builds a test with them
 * lowered, to read the Zip64 layout back without writing 4 GiB). */
#ifndef FL_NPZ_ZIP64_AT
#define FL_NPZ_ZIP64_AT ZIP_MAX32
#endif
#ifndef FL_NPZ_ZIP64_COUNT
#define FL_NPZ_ZIP64_COUNT ZIP_MAX16
#endif

typedef struct npz_entry {
    char *name;            /* "<key>.npy" */
    uint32_t crc;
    uint64_t size, offset; /* the .npy's bytes; where its local header starts */
} npz_entry;

struct fl_npz_writer {
    fl_atomic_file f;
    char *path;
    uint64_t at;      /* bytes written so far */
    npz_entry *e;
    int64_t n, cap;
    int64_t *slots;   /* a hash set of the names (entry index + 1; 0: free), for duplicates */
    int64_t nslots;
};

typedef struct crc_acc {
    uint32_t crc;
    uint64_t size;
} crc_acc;

static fl_status crc_sink(void *user, const void *data, size_t len) {
    crc_acc *c = user;
    const unsigned char *p = data;
    c->size += len;
    while (len > 0) {
        const uInt k = len > (1u << 30) ? (1u << 30) : (uInt)len;
        c->crc = (uint32_t)crc32(c->crc, p, k);
        p += k;
        len -= k;
    }
    return FL_OK;
}

static fl_status out_sink(void *user, const void *data, size_t len) {
    fl_npz_writer *w = user;
    w->at += len;
    return fl_atomic_write(&w->f, data, len);
}

/* A little-endian record built up field by field. */
typedef struct rec {
    unsigned char b[128];
    size_t n;
} rec;
static void put(rec *r, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) r->b[r->n++] = (unsigned char)(v >> (8 * i));
}

static bool ascii(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s >= 0x80) return false;
    return true;
}

/* One entry's local header (central false) or central directory header, then its name and its Zip64 extra
 * field (sizes, and in the directory the offset, where they pass the classic limits). */
static fl_status write_header(fl_npz_writer *w, bool central, const npz_entry *e) {
    const bool big = e->size >= FL_NPZ_ZIP64_AT, far = central && e->offset >= FL_NPZ_ZIP64_AT;
    const int extra = (big ? 16 : 0) + (far ? 8 : 0);
    const size_t nl = strlen(e->name);
    rec r = {.n = 0};
    put(&r, central ? 0x02014b50 : 0x04034b50, 4);
    if (central) put(&r, (3u << 8) | (extra ? 45 : 20), 2); /* made by: Unix, the version below */
    put(&r, extra ? 45 : 20, 2);                            /* needed: 2.0, 4.5 for Zip64 */
    put(&r, ascii(e->name) ? 0 : 1u << 11, 2);              /* bit 11: a UTF-8 name */
    put(&r, 0, 2);                                          /* stored */
    put(&r, 0, 2);                                          /* 00:00:00 */
    put(&r, (1 << 5) | 1, 2);                               /* 1980-01-01 */
    put(&r, e->crc, 4);
    put(&r, big ? ZIP_MAX32 : e->size, 4); /* compressed = uncompressed size */
    put(&r, big ? ZIP_MAX32 : e->size, 4);
    put(&r, nl, 2);
    put(&r, (uint64_t)(extra ? extra + 4 : 0), 2);
    if (central) {
        put(&r, 0, 2);                   /* comment */
        put(&r, 0, 2);                   /* disk */
        put(&r, 0, 2);                   /* internal attributes */
        put(&r, (uint64_t)0600 << 16, 4); /* rw------- (Python's zipfile open('w')) */
        put(&r, far ? ZIP_MAX32 : e->offset, 4);
    }
    FL_TRY(out_sink(w, r.b, r.n));
    FL_TRY(out_sink(w, e->name, nl));
    if (!extra) return FL_OK;
    r.n = 0;
    put(&r, 0x0001, 2);
    put(&r, (uint64_t)extra, 2);
    if (big) put(&r, e->size, 8), put(&r, e->size, 8);
    if (far) put(&r, e->offset, 8);
    return out_sink(w, r.b, r.n);
}

static uint64_t name_hash(const char *s) { /* FNV-1a */
    uint64_t h = 1469598103934665603u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

/* The slot of name in the hash set: its entry's, or the free one where it would go. */
static int64_t name_slot(const fl_npz_writer *w, const char *name) {
    int64_t k = (int64_t)(name_hash(name) & (uint64_t)(w->nslots - 1));
    while (w->slots[k] && strcmp(w->e[w->slots[k] - 1].name, name) != 0) k = (k + 1) & (w->nslots - 1);
    return k;
}

static fl_status grow_names(fl_npz_writer *w) {
    if (2 * (w->n + 1) <= w->nslots) return FL_OK;
    const int64_t ns = w->nslots ? 2 * w->nslots : 64;
    int64_t *slots = fl_calloc((size_t)ns, sizeof *slots, "the archive's names");
    if (!slots) return FL_ERR_NOMEM;
    free(w->slots);
    w->slots = slots;
    w->nslots = ns;
    for (int64_t i = 0; i < w->n; i++) w->slots[name_slot(w, w->e[i].name)] = i + 1;
    return FL_OK;
}

fl_npz_writer *fl_npz_writer_open(const char *path) {
    if (!path || !*path) return fl_error_null(FL_ERR_INVALID_ARG, "the .npz path is NULL or empty");
    fl_npz_writer *w = fl_calloc(1, sizeof *w, "an .npz writer");
    if (!w) return NULL;
    const size_t pl = strlen(path);
    if (!(w->path = fl_malloc(pl + 1, "an .npz writer"))) { free(w); return NULL; }
    memcpy(w->path, path, pl + 1);
    if (fl_atomic_open(&w->f, w->path) != FL_OK) {
        free(w->path);
        free(w);
        return NULL;
    }
    return w;
}

fl_status fl_npz_writer_add(fl_npz_writer *w, const char *name, const fl_tensor *t) {
    if (!w) return fl_error(FL_ERR_INVALID_ARG, "the .npz writer is NULL");
    const char *path = w->path;
    if (!name || !*name)
        return fl_error(FL_ERR_INVALID_ARG, "%s: array %lld has %s name, expected a key", path, (long long)w->n,
                        name ? "an empty" : "no");
    const size_t nl = strlen(name);
    if (nl > 60000)
        return fl_error(FL_ERR_INVALID_ARG, "%s: array %lld's name is %zu bytes long, at most 60000", path,
                        (long long)w->n, nl);
    if (!t) return fl_error(FL_ERR_INVALID_ARG, "%s: array '%s' is NULL", path, name);
    const fl_dtype dt = fl_tensor_dtype(t);
    if (dt != FL_FLOAT32 && dt != FL_INT32 && dt != FL_UINT8)
        return fl_error(FL_ERR_INVALID_ARG, "%s: array '%s' has unknown dtype %d", path, name, (int)dt);
    if (w->n >= w->cap) {
        const int64_t nc = w->cap ? 2 * w->cap : 16;
        npz_entry *e = realloc(w->e, (size_t)nc * sizeof *e);
        if (!e) return fl_error(FL_ERR_NOMEM, "%s: out of memory for %lld arrays", path, (long long)nc);
        w->e = e;
        w->cap = nc;
    }
    FL_TRY(grow_names(w));
    npz_entry *e = &w->e[w->n];
    if (!(e->name = fl_malloc(nl + 5, "an array's name"))) return FL_ERR_NOMEM;
    memcpy(e->name, name, nl);
    memcpy(e->name + nl, ".npy", 5);
    const int64_t slot = name_slot(w, e->name);
    if (w->slots[slot]) {
        free(e->name);
        return fl_error(FL_ERR_INVALID_ARG, "%s: two arrays named '%s', expected distinct keys", path, name);
    }
    char who[1200];
    snprintf(who, sizeof who, "%s: array '%.1000s'", path, name);
    crc_acc c = {0, 0};
    fl_status s = fl_npy_emit(t, who, crc_sink, &c); /* the CRC and the size before the header */
    e->crc = c.crc;
    e->size = c.size;
    e->offset = w->at;
    if (s == FL_OK && (s = write_header(w, false, e)) == FL_OK) {
        const uint64_t start = w->at;
        if ((s = fl_npy_emit(t, who, out_sink, w)) == FL_OK && w->at - start != c.size)
            s = fl_error(FL_ERR_IO, "%s: the array changed while it was written", who);
    }
    if (s != FL_OK) { /* the file is inconsistent now: only abort is left */
        free(e->name);
        return s;
    }
    w->slots[slot] = w->n + 1;
    w->n++;
    return FL_OK;
}

static void writer_free(fl_npz_writer *w) {
    for (int64_t i = 0; i < w->n; i++) free(w->e[i].name);
    free(w->e);
    free(w->slots);
    free(w->path);
    free(w);
}

void fl_npz_writer_abort(fl_npz_writer *w) {
    if (!w) return;
    fl_atomic_abort(&w->f);
    writer_free(w);
}

static fl_status write_directory(fl_npz_writer *w) {
    if (w->n == 0)
        return fl_error(FL_ERR_INVALID_ARG, "%s: no arrays to save, expected at least one", w->path);
    const uint64_t cd_start = w->at, count = (uint64_t)w->n;
    for (int64_t i = 0; i < w->n; i++) FL_TRY(write_header(w, true, &w->e[i]));
    const uint64_t cd_size = w->at - cd_start;
    const bool z64 = count >= FL_NPZ_ZIP64_COUNT || cd_size >= FL_NPZ_ZIP64_AT || cd_start >= FL_NPZ_ZIP64_AT;
    rec r = {.n = 0};
    if (z64) {
        const uint64_t eocd64 = w->at;
        put(&r, 0x06064b50, 4);
        put(&r, 44, 8); /* the record's size after this field */
        put(&r, (3u << 8) | 45, 2);
        put(&r, 45, 2);
        put(&r, 0, 4);
        put(&r, 0, 4);
        put(&r, count, 8);
        put(&r, count, 8);
        put(&r, cd_size, 8);
        put(&r, cd_start, 8);
        put(&r, 0x07064b50, 4); /* the locator */
        put(&r, 0, 4);
        put(&r, eocd64, 8);
        put(&r, 1, 4);
    }
    put(&r, 0x06054b50, 4);
    put(&r, 0, 2);
    put(&r, 0, 2);
    put(&r, z64 ? ZIP_MAX16 : count, 2);
    put(&r, z64 ? ZIP_MAX16 : count, 2);
    put(&r, z64 ? ZIP_MAX32 : cd_size, 4);
    put(&r, z64 ? ZIP_MAX32 : cd_start, 4);
    put(&r, 0, 2);
    return out_sink(w, r.b, r.n);
}

fl_status fl_npz_writer_commit(fl_npz_writer *w) {
    if (!w) return fl_error(FL_ERR_INVALID_ARG, "the .npz writer is NULL");
    fl_status s = write_directory(w);
    if (s == FL_OK) s = fl_atomic_commit(&w->f); /* removes the temporary file itself on failure */
    else fl_atomic_abort(&w->f);
    writer_free(w);
    return s;
}

fl_status fl_save_npz(const fl_arrays *a, const char *path) {
    if (!a) return fl_error(FL_ERR_INVALID_ARG, "fl_save_npz: the arrays are NULL");
    if (!path || !*path) return fl_error(FL_ERR_INVALID_ARG, "fl_save_npz: path is NULL or empty");
    if (a->count <= 0 || !a->names || !a->arrays)
        return fl_error(FL_ERR_INVALID_ARG, "fl_save_npz: %s: no arrays to save (count %d), expected at least one",
                        path, a->count);
    fl_npz_writer *w = fl_npz_writer_open(path);
    fl_status s = w ? FL_OK : fl_last_status();
    for (int i = 0; i < a->count && s == FL_OK; i++) s = fl_npz_writer_add(w, a->names[i], a->arrays[i]);
    if (s == FL_OK) s = fl_npz_writer_commit(w);
    else fl_npz_writer_abort(w);
    if (s != FL_OK) fl_error_prefix("fl_save_npz: ");
    return s;
}
