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
