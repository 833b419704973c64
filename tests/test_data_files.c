/*
 * test_data_files.c — the user's own data files (src/io/npz.c, csv.c,
 * images.c) against what NumPy and Keras make of the same files:
 *   npz     .npz files written by np.savez / np.savez_compressed
 *           (tools/data_fixtures.py), and refused ones
 *   csv     small tables written here, with the arrays a Keras user gets from
 *           pandas + one-hot encoding, worked out by hand
 *   images  keras.utils.image_dataset_from_directory (Keras 3 on TensorFlow)
 *           on tests/fixtures/data/images/tree: pixels (decoded: PNG and JPEG
 *           exact; resized: within 1e-4), labels and the file order
 * Usage: test_data_files FIXTURES (tests/fixtures/data)
 */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "flynn/flynn.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];
static const char *fixtures;

static const char *tmp_file(const char *name, const char *text, size_t len) {
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "wb");
    if (!f) { perror(p); exit(2); }
    fwrite(text, 1, len, f);
    fclose(f);
    return p;
}
#define TMP_TEXT(name, text) tmp_file((name), (text), strlen(text))

static const char *fx(const char *rel) {
    static char p[2][1024];
    static int k;
    k ^= 1;
    snprintf(p[k], sizeof p[k], "%s/%s", fixtures, rel);
    return p[k];
}

static const float *fdata(const fl_tensor *t) { return fl_tensor_cdata(t); }

static bool shape_is(const fl_tensor *t, int nd, const int64_t *s) {
    if (!t || fl_tensor_ndim(t) != nd) return false;
    for (int i = 0; i < nd; i++) if (fl_tensor_dim(t, i) != s[i]) return false;
    return true;
}
#define SHAPE(t, ...) shape_is((t), (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

/* ------------------------------------------------------------ NPZ */

static void test_npz(void) {
    fl_arrays a;
    CHECK(fl_load_npz(fx("npz/xy_stored.npz"), &a) == FL_OK);
    CHECK(a.count == 2 && strcmp(a.names[0], "x") == 0 && strcmp(a.names[1], "y") == 0);
    const fl_tensor *x = fl_arrays_get(&a, "x"), *y = fl_arrays_get(&a, "y");
    CHECK(SHAPE(x, 5, 3) && fl_tensor_dtype(x) == FL_FLOAT32);
    for (int i = 0; x && i < 15; i++) CHECK(fdata(x)[i] == 0.5f * (float)i);
    CHECK(SHAPE(y, 5) && fl_tensor_dtype(y) == FL_INT32); /* int64 -> int32 */
    CHECK(y && ((const int32_t *)fl_tensor_cdata(y))[2] == 2);
    CHECK(fl_arrays_get(&a, "z") == NULL);
    fl_arrays_free(&a);

    /* deflated (np.savez_compressed); uint8 x widened to int32 as fl_load_npy_xy does */
    fl_dataset d;
    fl_data_info info;
    CHECK(fl_load_npz_xy(fx("npz/xy_deflated.npz"), &d, &info) == FL_OK);
    CHECK(SHAPE(d.x_train, 4, 2, 2) && fl_tensor_dtype(d.x_train) == FL_INT32);
    CHECK(d.x_train && ((const int32_t *)fl_tensor_cdata(d.x_train))[15] == 15);
    CHECK(SHAPE(d.y_train, 4) && fdata(d.y_train)[2] == 3.25f && d.x_test == NULL);
    CHECK_STR_CONTAINS(info.description, "x 'x' (4, 2, 2)");
    fl_dataset_free(&d);

    /* the keras.datasets layout: x_train ... y_test */
    CHECK(fl_load_npz_xy(fx("npz/keras_layout.npz"), &d, NULL) == FL_OK);
    CHECK(SHAPE(d.x_train, 3, 2, 2) && SHAPE(d.y_train, 3) && SHAPE(d.x_test, 2, 2, 2) && SHAPE(d.y_test, 2));
    fl_dataset_free(&d);

    /* np.savez(f, x, y): arr_0, arr_1 -> refused, naming what the file holds */
    CHECK(fl_load_npz_xy(fx("npz/positional.npz"), &d, NULL) != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "expected arrays 'x' and 'y'");
    CHECK_STR_CONTAINS(fl_last_error(), "'arr_0', 'arr_1'");
    CHECK(d.x_train == NULL);
    /* x and y of different lengths */
    CHECK(fl_load_npz_xy(fx("npz/lengths.npz"), &d, NULL) != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "lengths.npz: 'x' has shape (5, 3) (5 samples)");
    CHECK_STR_CONTAINS(fl_last_error(), "'y' has shape (4,) (4)");

    /* several inputs, by name */
    CHECK(fl_load_npz(fx("npz/two_inputs.npz"), &a) == FL_OK);
    CHECK(a.count == 3 && SHAPE(fl_arrays_get(&a, "image"), 3, 2, 2, 1) && SHAPE(fl_arrays_get(&a, "meta"), 3, 2));
    fl_arrays_free(&a);

    /* damaged archives: every byte of a small one flipped in turn, and every truncation; never a crash */
    FILE *f = fopen(fx("npz/xy_deflated.npz"), "rb");
    CHECK(f != NULL);
    if (!f) return;
    unsigned char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    int refused = 0, loaded = 0;
    for (size_t i = 0; i < n; i++) {
        buf[i] ^= 0x5a;
        const char *p = tmp_file("flip.npz", (const char *)buf, n);
        if (fl_load_npz_xy(p, &d, NULL) == FL_OK) { loaded++; fl_dataset_free(&d); }
        else { refused++; CHECK_STR_CONTAINS(fl_last_error(), "flip.npz"); }
        buf[i] ^= 0x5a;
    }
    printf("npz: %zu one-byte corruptions: %d refused, %d loaded (bytes the zip does not check)\n", n, refused, loaded);
    CHECK(refused > (int)n / 2);
    for (size_t k = 0; k < n; k += 7) {
        const char *p = tmp_file("cut.npz", (const char *)buf, k);
        CHECK(fl_load_npz_xy(p, &d, NULL) != FL_OK);
    }
    CHECK(fl_load_npz_xy(TMP_TEXT("text.npz", "x,y\n1,2\n"), &d, NULL) != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "not a .npz zip archive");
}

/* ------------------------------------------------------------ CSV */

static void test_csv(void) {
    fl_dataset d;
    fl_data_info info;
    /* numbers, a text column one-hot (sorted categories), quoted fields with the delimiter, a quote and a
     * line break inside, CRLF, a blank line, a text label -> class indices in sorted order */
    const char *p = TMP_TEXT("pets.csv",
                             "weight,color,\"name, full\",kind\r\n"
                             "4.5,red,\"Tom, the \"\"cat\"\"\",cat\r\n"
                             "\n"
                             "30,blue,\"Rex\nII\",dog\r\n"
                             " 3.25 ,red,Fish,fish\n"
                             "1e1,green,Tom,cat\n");
    CHECK(fl_load_csv(p, &d, .label = "kind", .info = &info) == FL_OK);
    /* features: weight, color=blue, color=green, color=red, then name's 4 sorted values:
     * "Fish", "Rex\nII", "Tom", "Tom, the \"cat\"" */
    CHECK(SHAPE(d.x_train, 4, 8) && SHAPE(d.y_train, 4));
    const float want[4][8] = {{4.5f, 0, 0, 1, 0, 0, 0, 1}, {30, 1, 0, 0, 0, 1, 0, 0}, {3.25f, 0, 0, 1, 1, 0, 0, 0},
                              {10, 0, 1, 0, 0, 0, 1, 0}};
    for (int r = 0; d.x_train && r < 4; r++)
        for (int c = 0; c < 8; c++) CHECK_MSG(fdata(d.x_train)[r * 8 + c] == want[r][c], "row %d col %d", r, c);
    const float wy[4] = {0, 1, 2, 0}; /* cat, dog, fish */
    for (int r = 0; d.y_train && r < 4; r++) CHECK(fdata(d.y_train)[r] == wy[r]);
    CHECK(info.num_classes == 3 && strcmp(info.class_names[2], "fish") == 0);
    CHECK_STR_CONTAINS(info.description, "1 numeric and 2 categorical columns (one-hot) -> x (4, 8)");
    CHECK_STR_CONTAINS(info.description, "label 'kind': 3 classes (0=cat, 1=dog, 2=fish)");
    fl_data_info_free(&info);
    fl_dataset_free(&d);
    /* categorical as integers, a numeric label */
    CHECK(fl_load_csv(p, &d, .label = "weight", .categorical_as_int = true) == FL_OK);
    CHECK(SHAPE(d.x_train, 4, 3) && d.x_train && fdata(d.x_train)[0] == 2 && fdata(d.x_train)[1] == 3 &&
          fdata(d.x_train)[2] == 0 && fdata(d.y_train)[1] == 30);
    fl_dataset_free(&d);
    /* no label: every column a feature; ';' as the delimiter */
    CHECK(fl_load_csv(TMP_TEXT("semi.csv", "a;b\n1;2\n3;4\n"), &d, .delimiter = ';') == FL_OK);
    CHECK(SHAPE(d.x_train, 2, 2) && d.y_train == NULL && fdata(d.x_train)[3] == 4);
    fl_dataset_free(&d);

    /* refused, with the file, the line and what was expected */
    CHECK(fl_load_csv(TMP_TEXT("ragged.csv", "a,b,c\n1,2,3\n4,5\n"), &d, .label = "c") != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "ragged.csv: line 3 has 2 fields, expected 3 (the header's count)");
    CHECK(fl_load_csv(TMP_TEXT("missing.csv", "a,b\n1,2\n3,\n"), &d, .label = "b") != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "missing.csv: line 3, column 'b' (field 2): a missing value");
    CHECK(fl_load_csv(TMP_TEXT("na.csv", "a,b\n1,2\nNA,3\n"), &d, .label = "b") != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "line 3, column 'a' (field 1): a missing value ('NA')");
    CHECK(fl_load_csv(TMP_TEXT("nolabel.csv", "a,b\n1,2\n"), &d, .label = "species") != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "no column 'species' for the label; the header has 'a', 'b'");
    CHECK(fl_load_csv(TMP_TEXT("quote.csv", "a,b\n1,\"2\n"), &d, .label = "b") != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "quote.csv: line 2: a quoted field is not closed");
    CHECK(fl_load_csv(TMP_TEXT("empty.csv", ""), &d) != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "empty.csv: empty");
    CHECK(fl_load_csv(TMP_TEXT("header.csv", "a,b\n"), &d, .label = "b") != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "no data rows");
    CHECK(fl_load_csv(TMP_TEXT("dup.csv", "a,a\n1,2\n"), &d) != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "two columns 'a'");
    CHECK(fl_load_csv(fx("no-such.csv"), &d) != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "no-such.csv: cannot open");
    CHECK(d.x_train == NULL && d.y_train == NULL);
}

/* ------------------------------------------------------------ images */

static fl_tensor *ref(const char *npz, const char *key, fl_arrays *keep) {
    if (fl_load_npz(fx(npz), keep) != FL_OK) { fprintf(stderr, "%s\n", fl_last_error()); return NULL; }
    return fl_arrays_get(keep, key);
}

static bool is_jpeg(const char *path) { const char *e = strrchr(path, '.'); return e && (strcmp(e, ".jpg") == 0 || strcmp(e, ".jpeg") == 0); }

/* Compares flynn's x with Keras's, image by image: PNG within tol_png, JPEG within tol_jpeg (max abs). */
static void compare_images(const char *what, const fl_tensor *x, const fl_tensor *rx, char **paths, double tol_png,
                           double tol_jpeg, double *max_png, double *max_jpeg) {
    CHECK_MSG(x && rx && fl_tensor_size(x) == fl_tensor_size(rx), "%s: shapes", what);
    if (!x || !rx || fl_tensor_size(x) != fl_tensor_size(rx)) return;
    int64_t n = fl_tensor_dim(x, 0), per = fl_tensor_size(x) / n;
    for (int64_t i = 0; i < n; i++) {
        double m = 0;
        for (int64_t k = 0; k < per; k++) {
            double dd = fabs((double)fdata(x)[i * per + k] - (double)fdata(rx)[i * per + k]);
            if (dd > m) m = dd;
        }
        bool jpg = is_jpeg(paths[i]);
        double *mx = jpg ? max_jpeg : max_png;
        if (m > *mx) *mx = m;
        CHECK_MSG(m <= (jpg ? tol_jpeg : tol_png), "%s: image %lld (%s) differs from Keras's by %g", what, (long long)i,
                  paths[i], m);
    }
}

static char **read_lines(const char *path, int *n) {
    FILE *f = fopen(path, "r");
    char **v = calloc(256, sizeof *v), line[1024];
    *n = 0;
    while (f && fgets(line, sizeof line, f) && *n < 256) {
        line[strcspn(line, "\n")] = 0;
        v[(*n)++] = strdup(line);
    }
    if (f) fclose(f);
    return v;
}

static void test_images(void) {
    if (!fl_image_support()) {
        printf("images: SKIPPED: this build has no image support (libjpeg-turbo / libpng not found)\n");
        fl_dataset d;
        CHECK(fl_image_dataset_from_directory(fx("images/tree"), &d, .image_size = {8, 8}, .no_shuffle = true) != FL_OK);
        CHECK_STR_CONTAINS(fl_last_error(), "built without image support");
        return;
    }
    struct { const char *name, *tree; fl_image_dataset_args a; } cases[] = {
        {"rgb_8x8", "images/tree", {.image_size = {8, 8}, .no_shuffle = true}},
        {"gray_5x7", "images/tree", {.image_size = {5, 7}, .color_mode = FL_COLOR_GRAYSCALE, .no_shuffle = true,
                                     .label_mode = FL_LABEL_CATEGORICAL}},
        {"png_rgba_12x10", "images/tree_png", {.image_size = {12, 10}, .color_mode = FL_COLOR_RGBA, .no_shuffle = true}},
        {"shuffle_seed7_train", "images/tree", {.image_size = {6, 6}, .seed = 7, .validation_split = 0.25f, .subset = "training"}},
        {"shuffle_seed7_val", "images/tree", {.image_size = {6, 6}, .seed = 7, .validation_split = 0.25f, .subset = "validation"}},
    };
    double max_png = 0, max_jpeg = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fl_dataset d;
        fl_data_info info;
        fl_image_dataset_args a = cases[c].a;
        a.info = &info;
        char tree[1024], npz[256], txt[256];
        snprintf(tree, sizeof tree, "%s", fx(cases[c].tree));
        fl_status s = fl_image_dataset_from_directory_(tree, &d, a);
        CHECK_MSG(s == FL_OK, "%s: %s", cases[c].name, fl_last_error());
        if (s != FL_OK) continue;
        snprintf(npz, sizeof npz, "images/ref_%s.npz", cases[c].name);
        snprintf(txt, sizeof txt, "images/ref_%s.paths.txt", cases[c].name);
        int np = 0;
        char **paths = read_lines(fx(txt), &np);
        CHECK_MSG(np == info.num_paths, "%s: %d paths from Keras, %lld from flynn", cases[c].name, np, (long long)info.num_paths);
        for (int i = 0; i < np && i < info.num_paths; i++) {
            const char *mine = info.file_paths[i] + strlen(tree) + 1;
            CHECK_MSG(strcmp(mine, paths[i]) == 0, "%s: file %d is %s in flynn, %s in Keras", cases[c].name, i, mine, paths[i]);
        }
        CHECK(info.num_classes == (strcmp(cases[c].tree, "images/tree") == 0 ? 3 : 3));
        fl_arrays ra, rb;
        fl_tensor *rx = ref(npz, "x", &ra), *ry = fl_arrays_get(&ra, "y");
        (void)rb;
        compare_images(cases[c].name, d.x_train, rx, paths, 1e-4, 1e-4, &max_png, &max_jpeg);
        CHECK_MSG(ry && fl_tensor_size(ry) == fl_tensor_size(d.y_train), "%s: labels' shape", cases[c].name);
        for (int64_t i = 0; ry && i < fl_tensor_size(ry) && i < fl_tensor_size(d.y_train); i++)
            CHECK_MSG(fdata(ry)[i] == fdata(d.y_train)[i], "%s: label element %lld", cases[c].name, (long long)i);
        fl_arrays_free(&ra);
        for (int i = 0; i < np; i++) free(paths[i]);
        free(paths);
        fl_data_info_free(&info);
        fl_dataset_free(&d);
    }
    /* every image at its own size (no resize): the decoders alone */
    fl_arrays r;
    double dec_png = 0, dec_jpeg = 0;
    int64_t jpeg_off = 0, jpeg_px = 0;
    CHECK(fl_load_npz(fx("images/ref_decode.npz"), &r) == FL_OK);
    for (int i = 0; i < r.count; i++) {
        int ch = r.names[i][1] - '0';
        const char *rel = r.names[i] + 3;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", fx("images/tree"), rel);
        fl_tensor *t = fl_load_image(path, ch == 1 ? FL_COLOR_GRAYSCALE : ch == 4 ? FL_COLOR_RGBA : FL_COLOR_RGB, 0, 0);
        CHECK_MSG(t && fl_tensor_size(t) == fl_tensor_size(r.arrays[i]), "%s: %s", r.names[i], fl_last_error());
        if (!t || fl_tensor_size(t) != fl_tensor_size(r.arrays[i])) { fl_tensor_free(t); continue; }
        double m = 0;
        for (int64_t k = 0; k < fl_tensor_size(t); k++) {
            double dd = fabs((double)fdata(t)[k] - (double)fdata(r.arrays[i])[k]);
            if (dd > m) m = dd;
            if (is_jpeg(rel)) { jpeg_px++; jpeg_off += dd > 0; }
        }
        if (is_jpeg(rel)) { if (m > dec_jpeg) dec_jpeg = m; }
        else {
            if (m > dec_png) dec_png = m;
            CHECK_MSG(m == 0, "%s: PNG decoded differently from TensorFlow (max %g)", r.names[i], m);
        }
        fl_tensor_free(t);
    }
    fl_arrays_free(&r);
    printf("images: against Keras/TensorFlow: PNG max |diff| %g decoded, %g resized; JPEG max |diff| %g decoded "
           "(%lld of %lld values differ), %g resized\n", dec_png, max_png, dec_jpeg, (long long)jpeg_off,
           (long long)jpeg_px, max_jpeg);
    CHECK(dec_jpeg == 0); /* libjpeg-turbo with TensorFlow's settings: the same bytes (JDCT_ISLOW would differ by 6) */

    /* bad data: named file, never a crash */
    char dir[512], sub[600];
    snprintf(dir, sizeof dir, "%s/imgs", tmpdir);
    snprintf(sub, sizeof sub, "%s/a", dir);
    mkdir(dir, 0700);
    mkdir(sub, 0700);
    fl_dataset d;
    snprintf(sub, sizeof sub, "%s/b", dir);
    mkdir(sub, 0700);
    CHECK(fl_image_dataset_from_directory(dir, &d, .image_size = {4, 4}) != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "no images found in its 2 class folders");
    /* a truncated PNG and a JPEG with a damaged body */
    FILE *f = fopen(fx("images/tree/cats/c01.png"), "rb");
    unsigned char buf[8192];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    char p[700];
    snprintf(p, sizeof p, "imgs/a/x.png");
    tmp_file(p, (const char *)buf, n / 2);
    CHECK(fl_image_dataset_from_directory(dir, &d, .image_size = {4, 4}) != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "imgs/a/x.png: not a readable PNG image");
    CHECK_STR_CONTAINS(fl_last_error(), "image 1 of 1");
    /* every prefix and many one-byte flips of a PNG and a JPEG: refused or decoded, never a crash */
    const char *srcs[2] = {"images/tree/cats/c01.png", "images/tree/cats/c03.jpg"};
    for (int k = 0; k < 2; k++) {
        f = fopen(fx(srcs[k]), "rb");
        n = f ? fread(buf, 1, sizeof buf, f) : 0;
        if (f) fclose(f);
        int ok = 0, bad = 0;
        for (size_t cut = 0; cut < n; cut += 3) {
            fl_tensor *t = fl_load_image(tmp_file(k ? "cut.jpg" : "cut.png", (const char *)buf, cut), FL_COLOR_RGB, 5, 5);
            if (t) ok++; else bad++;
            fl_tensor_free(t);
        }
        for (size_t i = 0; i < n; i += 2) {
            buf[i] ^= 0xff;
            fl_tensor *t = fl_load_image(tmp_file(k ? "flip.jpg" : "flip.png", (const char *)buf, n), FL_COLOR_RGB, 5, 5);
            if (t) ok++; else bad++;
            fl_tensor_free(t);
            buf[i] ^= 0xff;
        }
        printf("images: %s: %d damaged copies refused, %d decoded anyway\n", srcs[k], bad, ok);
        CHECK(bad > 0);
    }
    snprintf(p, sizeof p, "imgs/a/x.png");
    TMP_TEXT(p, "GIF89a....");
    CHECK(fl_image_dataset_from_directory(dir, &d, .image_size = {4, 4}) != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "x.png: GIF images are not supported");
    /* JPEG with rgba: refused as Keras refuses it */
    CHECK(fl_image_dataset_from_directory(fx("images/tree"), &d, .image_size = {4, 4}, .color_mode = FL_COLOR_RGBA,
                                          .no_shuffle = true) != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "cats/c03.jpg: a JPEG image has no alpha channel");
    /* arguments as Keras checks them */
    CHECK(fl_image_dataset_from_directory(fx("images/tree"), &d, .validation_split = 0.2f) != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "needs a subset");
    CHECK(fl_image_dataset_from_directory(fx("images/tree"), &d, .label_mode = FL_LABEL_BINARY) != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "exactly 2 classes, found 3");
    /* subset "both": training then validation, as the two Keras subsets */
    fl_data_info info;
    CHECK(fl_image_dataset_from_directory(fx("images/tree"), &d, .image_size = {6, 6}, .seed = 7,
                                          .validation_split = 0.25f, .subset = "both", .info = &info) == FL_OK);
    CHECK(SHAPE(d.x_train, 8, 6, 6, 3) && SHAPE(d.x_test, 2, 6, 6, 3) && info.num_paths == 10);
    CHECK(info.num_paths == 10 && strstr(info.file_paths[8], "dogs/d03.png"));
    fl_data_info_free(&info);
    fl_dataset_free(&d);
    /* Keras's int(0.7 * 10) = 7 validation files (0.7f * 10 in float32 would give 6) */
    CHECK(fl_image_dataset_from_directory(fx("images/tree"), &d, .image_size = {2, 2}, .validation_split = 0.7f,
                                          .subset = "validation") == FL_OK);
    CHECK(SHAPE(d.x_train, 7, 2, 2, 3));
    fl_dataset_free(&d);
    /* labels=None: every image under the folder, hidden folders too (os.walk), no y */
    CHECK(fl_image_dataset_from_directory(fx("images/tree"), &d, .image_size = {4, 4}, .no_shuffle = true,
                                          .no_labels = true, .info = &info) == FL_OK);
    CHECK(SHAPE(d.x_train, 11, 4, 4, 3) && d.y_train == NULL && info.num_classes == 0 && info.num_paths == 11);
    CHECK(info.num_paths == 11 && strstr(info.file_paths[0], "tree/.hidden/h01.png"));
    fl_data_info_free(&info);
    fl_dataset_free(&d);
}

/* fl_image_info reads an image's size and channels from its header: the size the decoder gives, for every
 * fixture (JPEG, PNG of each colour type, a 16-bit one), and fl_image_directory_shape says whether a folder's
 * images agree (issue 43). */
static void test_image_headers(void) {
    static const char *files[] = {"images/tree/cats/c01.png", "images/tree/cats/c02.PNG", "images/tree/cats/c03.jpg",
                                  "images/tree/cats/deep/c04.png", "images/tree/dogs/d01.jpeg", "images/tree/dogs/d02.png",
                                  "images/tree/dogs/d03.png", "images/tree/dogs/d04.png", "images/tree/fish/f01.png",
                                  "images/tree/fish/f02.jpg"};
    static const int want_c[] = {3, 1, 3, 4, 1, 3, 3, 2, 3, 3}; /* c01 RGB, c02 gray, c04 RGBA, d01 a gray JPEG, d04 gray+alpha */
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        int h = 0, w = 0, c = 0;
        CHECK_MSG(fl_image_info(fx(files[i]), &h, &w, &c) == FL_OK, "%s: %s", files[i], fl_last_error());
        CHECK_MSG(c == want_c[i], "%s: %d channels, expected %d", files[i], c, want_c[i]);
        if (!fl_image_support()) continue;
        fl_tensor *t = fl_load_image(fx(files[i]), FL_COLOR_RGB, 0, 0);
        CHECK_MSG(t && fl_tensor_dim(t, 0) == h && fl_tensor_dim(t, 1) == w, "%s: header %dx%d, decoded %lldx%lld",
                  files[i], h, w, t ? (long long)fl_tensor_dim(t, 0) : -1LL, t ? (long long)fl_tensor_dim(t, 1) : -1LL);
        fl_tensor_free(t);
    }
    int h, w, c;
    CHECK(fl_image_info(fx("images/tree/cats/notes.txt"), &h, &w, &c) != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "notes.txt: not a JPEG (FF D8 FF) or PNG");
    char p[512];
    snprintf(p, sizeof p, "%s/short.png", tmpdir); /* a PNG signature and nothing after it */
    FILE *f = fopen(p, "wb");
    if (f) { fwrite("\x89PNG\r\n\x1a\n", 1, 8, f); fclose(f); }
    CHECK(fl_image_info(p, &h, &w, &c) != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "short.png: not a readable PNG image: no IHDR chunk");
    snprintf(p, sizeof p, "%s/short.jpg", tmpdir); /* a JPEG start and an APP0 segment, no frame */
    f = fopen(p, "wb");
    if (f) { fwrite("\xff\xd8\xff\xe0\x00\x04" "ab" "\xff\xd9", 1, 10, f); fclose(f); }
    CHECK(fl_image_info(p, &h, &w, &c) != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "short.jpg: not a readable JPEG image: no frame header");
    fl_color_mode m;
    bool agree = true;
    char found[256];
    CHECK(fl_image_directory_shape(fx("images/tree"), &h, &w, &m, &agree, found, sizeof found) == FL_OK);
    CHECK_MSG(!agree && strstr(found, "1 9x11 rgb, 1 4x4 grayscale"), "tree: agree %d, found %s", agree, found);
    /* one class folder of two copies of the same 8x8 RGBA PNG */
    snprintf(p, sizeof p, "%s/same", tmpdir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/same/k", tmpdir);
    mkdir(p, 0755);
    for (int k = 0; k < 2; k++) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "cp '%s' '%s/same/k/%d.png'", fx("images/tree/cats/deep/c04.png"), tmpdir, k);
        CHECK(system(cmd) == 0);
    }
    snprintf(p, sizeof p, "%s/same", tmpdir);
    CHECK(fl_image_directory_shape(p, &h, &w, &m, &agree, found, sizeof found) == FL_OK);
    CHECK_MSG(agree && h == 8 && w == 8 && m == FL_COLOR_RGBA && strcmp(found, "2 8x8 rgba") == 0,
              "same: agree %d, %dx%d mode %d, found %s", agree, h, w, (int)m, found);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: test_data_files FIXTURES (tests/fixtures/data)\n"); return 2; }
    fixtures = argv[1];
    snprintf(tmpdir, sizeof tmpdir, "%s/flynn-data-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 2; }
    test_npz();
    test_csv();
    test_images();
    test_image_headers();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_report("test_data_files");
}
