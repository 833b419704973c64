/*
 * test_io.c — tests of the data loaders: IDX (raw, gzip, every error),
 * .npy (round trips, hand-written headers, refusals, atomic saving),
 * CIFAR-10 and MNIST folders built from fake files, fl_to_float and
 * fl_one_hot. All fixtures are written to a fresh mkdtemp folder under /tmp
 * that is removed at the end; the real Fashion-MNIST is used only when
 * /usr/share/datasets/fashion-mnist is installed.
 */
#if !defined(_GNU_SOURCE) && !defined(_XOPEN_SOURCE)
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */
#endif
#include "flynn/flynn.h"
#include "check.h"

#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

static char tmpdir[256];

/* A path in the fixture folder, in one of 8 rotating buffers. */
static const char *P(const char *name) {
    static char bufs[8][512];
    static int k = 0;
    char *b = bufs[k++ & 7];
    snprintf(b, sizeof bufs[0], "%s/%s", tmpdir, name);
    return b;
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(2);
    }
    if (n && fwrite(data, 1, n, f) != n) {
        perror(path);
        exit(2);
    }
    fclose(f);
}

static void write_gz(const char *path, const void *data, size_t n) {
    gzFile g = gzopen(path, "wb");
    if (!g || (n && gzwrite(g, data, (unsigned)n) != (int)n) || gzclose(g) != Z_OK) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
}

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)sz + 1);
    *n = fread(b, 1, (size_t)sz, f);
    fclose(f);
    return b;
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* Files in tmpdir (or a subfolder) whose name contains ".tmp.". */
static int count_temp_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".tmp.")) n++;
    closedir(d);
    return n;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

/* The expected error: status, and the message contains a and b ("" for none).
 * Build with -DTEST_IO_VERBOSE to print every message checked. */
#ifdef TEST_IO_VERBOSE
#define SHOW_ERR() printf("  [%s] %s\n", fl_status_name(fl_last_status()), fl_last_error())
#else
#define SHOW_ERR() ((void)0)
#endif
#define CHECK_ERR(status, a, b) do { SHOW_ERR(); \
    CHECK_MSG(fl_last_status() == (status), "status %s, expected %s; message: %s", \
              fl_status_name(fl_last_status()), fl_status_name(status), fl_last_error()); \
    CHECK_STR_CONTAINS(fl_last_error(), (a)); \
    CHECK_STR_CONTAINS(fl_last_error(), (b)); } while (0)

/* ------------------------------------------------------------------ IDX */

/* An IDX file image: header for (type, dims) followed by `data`. */
static unsigned char *idx_bytes(int type, int ndim, const uint32_t *dims, const void *data, size_t data_bytes,
                                size_t *n) {
    size_t h = 4 + 4 * (size_t)ndim;
    unsigned char *b = malloc(h + data_bytes + 1);
    b[0] = 0, b[1] = 0, b[2] = (unsigned char)type, b[3] = (unsigned char)ndim;
    for (int i = 0; i < ndim; i++) {
        b[4 + 4 * i] = (unsigned char)(dims[i] >> 24);
        b[5 + 4 * i] = (unsigned char)(dims[i] >> 16);
        b[6 + 4 * i] = (unsigned char)(dims[i] >> 8);
        b[7 + 4 * i] = (unsigned char)dims[i];
    }
    if (data_bytes) memcpy(b + h, data, data_bytes);
    *n = h + data_bytes;
    return b;
}

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8),
    p[3] = (unsigned char)v;
}

static void check_u8_pattern(fl_tensor *t, int64_t d0, int64_t d1, int64_t d2) {
    CHECK(t != NULL);
    if (!t) return;
    CHECK(fl_tensor_dtype(t) == FL_UINT8);
    CHECK(fl_tensor_ndim(t) == 3);
    CHECK(fl_tensor_dim(t, 0) == d0 && fl_tensor_dim(t, 1) == d1 && fl_tensor_dim(t, 2) == d2);
    const uint8_t *v = fl_tensor_cdata(t);
    int bad = 0;
    for (int64_t i = 0; i < d0 * d1 * d2; i++) bad += v[i] != (uint8_t)(i * 7 + 3);
    CHECK(bad == 0);
}

static void test_idx(void) {
    uint8_t px[3 * 2 * 4];
    for (int i = 0; i < 24; i++) px[i] = (uint8_t)(i * 7 + 3);
    const uint32_t dims[3] = {3, 2, 4};
    size_t n;
    unsigned char *img = idx_bytes(0x08, 3, dims, px, sizeof px, &n);
    const size_t img_n = n;
    fl_tensor *t;

    /* raw, gzip, gzip without a .gz name, raw with a .gz name */
    write_bytes(P("u8.idx"), img, n);
    write_gz(P("u8.idx.gz"), img, n);
    write_gz(P("u8-compressed-noext"), img, n);
    write_bytes(P("raw-named.gz"), img, n);
    const char *ok_files[] = {"u8.idx", "u8.idx.gz", "u8-compressed-noext", "raw-named.gz"};
    for (int i = 0; i < 4; i++) {
        fl_clear_error();
        t = fl_load_idx(P(ok_files[i]));
        CHECK_MSG(t != NULL, "%s: %s", ok_files[i], fl_last_error());
        check_u8_pattern(t, 3, 2, 4);
        fl_tensor_free(t);
    }

    /* int32, float32 (big-endian), and the converted int8 / int16 / float64 */
    {
        const int32_t iv[6] = {-1, 0, 1, 2147483647, -2147483647 - 1, 123456};
        unsigned char d[24];
        for (int i = 0; i < 6; i++) put_be32(d + 4 * i, (uint32_t)iv[i]);
        const uint32_t dd[2] = {2, 3};
        unsigned char *b = idx_bytes(0x0C, 2, dd, d, sizeof d, &n);
        write_gz(P("i32.idx.gz"), b, n);
        free(b);
        t = fl_load_idx(P("i32.idx.gz"));
        CHECK_MSG(t != NULL, "%s", fl_last_error());
        if (t) {
            CHECK(fl_tensor_dtype(t) == FL_INT32 && fl_tensor_ndim(t) == 2 && fl_tensor_dim(t, 1) == 3);
            const int32_t *v = fl_tensor_cdata(t);
            for (int i = 0; i < 6; i++) CHECK(v[i] == iv[i]);
        }
        fl_tensor_free(t);

        const float fv[3] = {1.5f, -0.25f, 3.0e38f};
        for (int i = 0; i < 3; i++) {
            uint32_t u;
            memcpy(&u, &fv[i], 4);
            put_be32(d + 4 * i, u);
        }
        const uint32_t d3[1] = {3};
        b = idx_bytes(0x0D, 1, d3, d, 12, &n);
        write_bytes(P("f32.idx"), b, n);
        free(b);
        t = fl_load_idx(P("f32.idx"));
        CHECK_MSG(t != NULL, "%s", fl_last_error());
        if (t) {
            CHECK(fl_tensor_dtype(t) == FL_FLOAT32 && fl_tensor_dim(t, 0) == 3);
            const float *v = fl_tensor_cdata(t);
            for (int i = 0; i < 3; i++) CHECK(v[i] == fv[i]);
        }
        fl_tensor_free(t);

        const unsigned char i8[3] = {0x80, 0x7f, 0xff}; /* -128, 127, -1 */
        b = idx_bytes(0x09, 1, d3, i8, 3, &n);
        write_bytes(P("i8.idx"), b, n);
        free(b);
        t = fl_load_idx(P("i8.idx"));
        CHECK(t && fl_tensor_dtype(t) == FL_INT32);
        if (t) {
            const int32_t *v = fl_tensor_cdata(t);
            CHECK(v[0] == -128 && v[1] == 127 && v[2] == -1);
        }
        fl_tensor_free(t);

        const unsigned char i16[6] = {0x80, 0x00, 0x7f, 0xff, 0xff, 0xfe}; /* -32768, 32767, -2 */
        b = idx_bytes(0x0B, 1, d3, i16, 6, &n);
        write_bytes(P("i16.idx"), b, n);
        free(b);
        t = fl_load_idx(P("i16.idx"));
        CHECK(t && fl_tensor_dtype(t) == FL_INT32);
        if (t) {
            const int32_t *v = fl_tensor_cdata(t);
            CHECK(v[0] == -32768 && v[1] == 32767 && v[2] == -2);
        }
        fl_tensor_free(t);

        const double f8[2] = {0.1, -1e300};
        unsigned char d8[16];
        for (int i = 0; i < 2; i++) {
            uint64_t u;
            memcpy(&u, &f8[i], 8);
            put_be32(d8 + 8 * i, (uint32_t)(u >> 32));
            put_be32(d8 + 8 * i + 4, (uint32_t)u);
        }
        const uint32_t d2[1] = {2};
        b = idx_bytes(0x0E, 1, d2, d8, 16, &n);
        write_bytes(P("f64.idx"), b, n);
        free(b);
        t = fl_load_idx(P("f64.idx"));
        CHECK(t && fl_tensor_dtype(t) == FL_FLOAT32);
        if (t) {
            const float *v = fl_tensor_cdata(t);
            CHECK(v[0] == 0.1f && isinf(v[1]) && v[1] < 0);
        }
        fl_tensor_free(t);
    }

    /* missing file */
    fl_clear_error();
    CHECK(fl_load_idx(P("no-such-file")) == NULL);
    CHECK_ERR(FL_ERR_IO, P("no-such-file"), "No such file");

    /* a directory */
    fl_clear_error();
    CHECK(fl_load_idx(tmpdir) == NULL);
    CHECK_ERR(FL_ERR_IO, tmpdir, "directory");

    /* empty file */
    write_bytes(P("empty.idx"), "", 0);
    fl_clear_error();
    CHECK(fl_load_idx(P("empty.idx")) == NULL);
    CHECK_ERR(FL_ERR_FORMAT, P("empty.idx"), "empty");

    /* wrong magic: prints the bytes found and what was expected */
    write_bytes(P("zip.idx"), "PK\x03\x04 not an idx file", 20);
    fl_clear_error();
    CHECK(fl_load_idx(P("zip.idx")) == NULL);
    CHECK_ERR(FL_ERR_FORMAT, P("zip.idx"), "magic 50 4b 03 04");
    CHECK_STR_CONTAINS(fl_last_error(), "expected 00 00");

    /* unsupported type code, too many / zero dimensions, dimension 0, absurd size */
    {
        unsigned char *b = idx_bytes(0x0A, 3, dims, px, sizeof px, &n);
        write_bytes(P("type0a.idx"), b, n);
        free(b);
        fl_clear_error();
        CHECK(fl_load_idx(P("type0a.idx")) == NULL);
        CHECK_ERR(FL_ERR_FORMAT, P("type0a.idx"), "unsupported IDX type code 0x0a");

        const uint32_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 2};
        b = idx_bytes(0x08, 9, nine, "ab", 2, &n);
        write_bytes(P("ninedims.idx"), b, n);
        free(b);
        fl_clear_error();
        CHECK(fl_load_idx(P("ninedims.idx")) == NULL);
        CHECK_ERR(FL_ERR_FORMAT, P("ninedims.idx"), "too many dimensions");

        b = idx_bytes(0x08, 0, NULL, "a", 1, &n);
        write_bytes(P("zerodims.idx"), b, n);
        free(b);
        fl_clear_error();
        CHECK(fl_load_idx(P("zerodims.idx")) == NULL);
        CHECK_ERR(FL_ERR_FORMAT, P("zerodims.idx"), "0 dimensions");

        const uint32_t z[3] = {3, 0, 4};
        b = idx_bytes(0x08, 3, z, NULL, 0, &n);
        write_bytes(P("dim0.idx"), b, n);
        free(b);
        fl_clear_error();
        CHECK(fl_load_idx(P("dim0.idx")) == NULL);
        CHECK_ERR(FL_ERR_FORMAT, P("dim0.idx"), "dimension of 0");

        const uint32_t huge[2] = {65536, 65537};
        b = idx_bytes(0x08, 2, huge, px, sizeof px, &n);
        write_bytes(P("huge.idx"), b, n);
        write_gz(P("huge.idx.gz"), b, n);
        free(b);
        fl_clear_error();
        CHECK(fl_load_idx(P("huge.idx")) == NULL);
        CHECK_ERR(FL_ERR_FORMAT, P("huge.idx"), "2^31");
        fl_clear_error();
        CHECK(fl_load_idx(P("huge.idx.gz")) == NULL);
        CHECK_ERR(FL_ERR_FORMAT, P("huge.idx.gz"), "2^31");

        /* large but legal shape in a tiny gzip file: refused before allocating */
        const uint32_t big[2] = {60000, 20000};
        b = idx_bytes(0x08, 2, big, px, sizeof px, &n);
        write_gz(P("big-tiny.idx.gz"), b, n);
        free(b);
        fl_clear_error();
        CHECK(fl_load_idx(P("big-tiny.idx.gz")) == NULL);
        CHECK_ERR(FL_ERR_FORMAT, P("big-tiny.idx.gz"), "truncated");
    }

    /* truncated: raw data, raw header, gzip data */
    write_bytes(P("trunc.idx"), img, img_n - 14); /* 10 of 24 data bytes */
    fl_clear_error();
    CHECK(fl_load_idx(P("trunc.idx")) == NULL);
    CHECK_ERR(FL_ERR_FORMAT, P("trunc.idx"), "truncated");
    CHECK_STR_CONTAINS(fl_last_error(), "file ends after 10 of 24 bytes of data");

    write_gz(P("trunc-data.idx.gz"), img, img_n - 14); /* a complete gzip of a short IDX */
    fl_clear_error();
    CHECK(fl_load_idx(P("trunc-data.idx.gz")) == NULL);
    CHECK_ERR(FL_ERR_FORMAT, P("trunc-data.idx.gz"), "ends after 10 of 24 bytes of data");

    write_bytes(P("trunc-header.idx"), img, 9);
    fl_clear_error();
    CHECK(fl_load_idx(P("trunc-header.idx")) == NULL);
    CHECK_ERR(FL_ERR_FORMAT, P("trunc-header.idx"), "inside the IDX header");

    /* a gzip file cut in the middle of its compressed stream */
    {
        enum { N = 20000 };
        unsigned char *big = malloc(N);
        uint32_t s = 12345;
        for (int i = 0; i < N; i++) {
            s = s * 1103515245u + 12345u;
            big[i] = (unsigned char)(s >> 24);
        }
        const uint32_t d1[1] = {N};
        size_t bn;
        unsigned char *b = idx_bytes(0x08, 1, d1, big, N, &bn);
        write_gz(P("full.idx.gz"), b, bn);
        size_t gn;
        unsigned char *gz = read_all(P("full.idx.gz"), &gn);
        write_bytes(P("cut.idx.gz"), gz, gn / 2);
        fl_clear_error();
        CHECK(fl_load_idx(P("cut.idx.gz")) == NULL);
        CHECK_ERR(FL_ERR_FORMAT, P("cut.idx.gz"), "truncated");
        CHECK_STR_CONTAINS(fl_last_error(), "gzip stream ends early");

        /* all data there, but the 8-byte trailer (CRC, length) missing */
        write_bytes(P("notrailer.idx.gz"), gz, gn - 8);
        fl_clear_error();
        CHECK(fl_load_idx(P("notrailer.idx.gz")) == NULL);
        CHECK_ERR(FL_ERR_FORMAT, P("notrailer.idx.gz"), "truncated");

        /* a wrong CRC */
        gz[gn - 8] ^= 0x55;
        write_bytes(P("badcrc.idx.gz"), gz, gn);
        fl_clear_error();
        CHECK(fl_load_idx(P("badcrc.idx.gz")) == NULL);
        CHECK_ERR(FL_ERR_FORMAT, P("badcrc.idx.gz"), "corrupt gzip stream (zlib: incorrect data check)");

        /* only the first rows (what fl_load_mnist does with max_train) */
        t = fl_load_idx(P("full.idx.gz"));
        CHECK(t && fl_tensor_dim(t, 0) == N && memcmp(fl_tensor_cdata(t), big, N) == 0);
        fl_tensor_free(t);
        free(gz);
        free(b);
        free(big);
    }

    /* corrupt gzip: a valid gzip header, then garbage */
    {
        unsigned char bad[26] = {0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0, 0x00, 0x03};
        memset(bad + 10, 0xff, 16);
        write_bytes(P("corrupt.idx.gz"), bad, sizeof bad);
        fl_clear_error();
        CHECK(fl_load_idx(P("corrupt.idx.gz")) == NULL);
        CHECK_ERR(FL_ERR_FORMAT, P("corrupt.idx.gz"), "corrupt gzip stream (zlib: ");
        CHECK_STR_CONTAINS(fl_last_error(), "invalid block type");

        unsigned char method[26] = {0x1f, 0x8b, 0x07}; /* unknown compression method */
        write_bytes(P("method.idx.gz"), method, sizeof method);
        fl_clear_error();
        CHECK(fl_load_idx(P("method.idx.gz")) == NULL);
        CHECK_ERR(FL_ERR_FORMAT, P("method.idx.gz"), "corrupt gzip stream");
    }

    /* trailing data is an error (raw and gzip) */
    {
        unsigned char *b = malloc(img_n + 3);
        memcpy(b, img, img_n);
        memcpy(b + img_n, "xyz", 3);
        write_bytes(P("trailing.idx"), b, img_n + 3);
        write_gz(P("trailing.idx.gz"), b, img_n + 3);
        free(b);
        fl_clear_error();
        CHECK(fl_load_idx(P("trailing.idx")) == NULL);
        CHECK_ERR(FL_ERR_FORMAT, P("trailing.idx"), "3 bytes of trailing data");
        fl_clear_error();
        CHECK(fl_load_idx(P("trailing.idx.gz")) == NULL);
        CHECK_ERR(FL_ERR_FORMAT, P("trailing.idx.gz"), "trailing data");
    }

    fl_clear_error();
    CHECK(fl_load_idx(NULL) == NULL);
    CHECK(fl_last_status() == FL_ERR_INVALID_ARG);
    free(img);
}

/* ------------------------------------------------------------------ NPY */

/* A hand-written .npy: magic, version, header text as given (no padding
 * added unless pad), then data. */
static void write_npy(const char *path, int major, const char *header, const void *data, size_t data_bytes) {
    size_t hl = strlen(header);
    size_t pre = major == 1 ? 10 : 12;
    unsigned char *b = malloc(pre + hl + data_bytes + 1);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major, b[7] = 0;
    if (major == 1) {
        b[8] = (unsigned char)hl, b[9] = (unsigned char)(hl >> 8);
    } else {
        b[8] = (unsigned char)hl, b[9] = (unsigned char)(hl >> 8), b[10] = (unsigned char)(hl >> 16),
        b[11] = (unsigned char)(hl >> 24);
    }
    memcpy(b + pre, header, hl);
    if (data_bytes) memcpy(b + pre + hl, data, data_bytes);
    write_bytes(path, b, pre + hl + data_bytes);
    free(b);
}

static void le_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8), p[2] = (unsigned char)(v >> 16),
    p[3] = (unsigned char)(v >> 24);
}
static void le_u64(unsigned char *p, uint64_t v) {
    le_u32(p, (uint32_t)v);
    le_u32(p + 4, (uint32_t)(v >> 32));
}

static void check_npy_layout(const char *path, const char *expect_header, size_t data_bytes) {
    size_t n;
    unsigned char *b = read_all(path, &n);
    CHECK(b != NULL);
    if (!b) return;
    CHECK(n >= 10 && memcmp(b, "\x93NUMPY\x01\x00", 8) == 0);
    size_t off = 10 + (size_t)(b[8] | b[9] << 8);
    CHECK_MSG(off % 64 == 0, "data offset %zu is not a multiple of 64", off);
    CHECK(n == off + data_bytes);
    CHECK(b[off - 1] == '\n');
    b[off - 1] = 0;
    if (expect_header) CHECK_MSG(strcmp((char *)b + 10, expect_header) == 0, "header [%s]", (char *)b + 10);
    free(b);
}

static void test_npy(void) {
    fl_tensor *t, *u;

    /* round trip, each dtype; the header is byte-for-byte np.save's */
    t = fl_tensor_zeros(FL_FLOAT32, 2, 3);
    float *fv = fl_tensor_data(t);
    for (int i = 0; i < 6; i++) fv[i] = (float)i * 1.25f - 2.0f;
    fv[5] = NAN;
    CHECK(fl_save_npy(t, P("f32.npy")) == FL_OK);
    check_npy_layout(P("f32.npy"),
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
                     "                                                          ",
                     24);
    u = fl_load_npy(P("f32.npy"));
    CHECK_MSG(u != NULL, "%s", fl_last_error());
    if (u) {
        CHECK(fl_tensor_dtype(u) == FL_FLOAT32 && fl_tensor_ndim(u) == 2 && fl_tensor_dim(u, 0) == 2 &&
              fl_tensor_dim(u, 1) == 3);
        const float *v = fl_tensor_cdata(u);
        for (int i = 0; i < 5; i++) CHECK(v[i] == fv[i]);
        CHECK(isnan(v[5]));
    }
    fl_tensor_free(u);
    fl_tensor_free(t);

    t = fl_tensor_zeros(FL_INT32, 5);
    int32_t *iv = fl_tensor_data(t);
    const int32_t ivs[5] = {0, -1, 2147483647, -2147483647 - 1, 42};
    memcpy(iv, ivs, sizeof ivs);
    CHECK(fl_save_npy(t, P("i32.npy")) == FL_OK);
    check_npy_layout(P("i32.npy"), NULL, 20);
    u = fl_load_npy(P("i32.npy"));
    CHECK(u && fl_tensor_dtype(u) == FL_INT32 && fl_tensor_ndim(u) == 1 && fl_tensor_dim(u, 0) == 5);
    if (u) CHECK(memcmp(fl_tensor_cdata(u), ivs, sizeof ivs) == 0);
    fl_tensor_free(u);
    fl_tensor_free(t);

    t = fl_tensor_zeros(FL_UINT8, 2, 2, 2, 1, 1, 1, 1, 3); /* 8 dimensions */
    uint8_t *bv = fl_tensor_data(t);
    for (int i = 0; i < 24; i++) bv[i] = (uint8_t)(250 + i);
    CHECK(fl_save_npy(t, P("u8.npy")) == FL_OK);
    check_npy_layout(P("u8.npy"), NULL, 24);
    u = fl_load_npy(P("u8.npy"));
    CHECK(u && fl_tensor_dtype(u) == FL_UINT8 && fl_tensor_ndim(u) == 8 && fl_tensor_dim(u, 7) == 3);
    if (u) CHECK(memcmp(fl_tensor_cdata(u), bv, 24) == 0);
    fl_tensor_free(u);
    fl_tensor_free(t);

    /* a scalar (shape ()) and an empty array */
    t = fl_tensor_new(FL_FLOAT32, 0, NULL);
    *(float *)fl_tensor_data(t) = 3.5f;
    CHECK(fl_save_npy(t, P("scalar.npy")) == FL_OK);
    check_npy_layout(P("scalar.npy"), "{'descr': '<f4', 'fortran_order': False, 'shape': (), }"
                                      "                                                              ", 4);
    u = fl_load_npy(P("scalar.npy"));
    CHECK(u && fl_tensor_ndim(u) == 0 && fl_tensor_size(u) == 1 && *(const float *)fl_tensor_cdata(u) == 3.5f);
    fl_tensor_free(u);
    fl_tensor_free(t);
    t = fl_tensor_zeros(FL_FLOAT32, 0, 3);
    CHECK(fl_save_npy(t, P("empty.npy")) == FL_OK);
    u = fl_load_npy(P("empty.npy"));
    CHECK(u && fl_tensor_ndim(u) == 2 && fl_tensor_dim(u, 0) == 0 && fl_tensor_dim(u, 1) == 3);
    fl_tensor_free(u);

    /* atomic: no temp files left; overwriting keeps the mode; a new file gets 0666 & ~umask */
    CHECK(count_temp_files(tmpdir) == 0);
    struct stat st;
    CHECK(stat(P("f32.npy"), &st) == 0 && (st.st_mode & 0777) == 0644); /* umask 022 set in main */
    CHECK(chmod(P("f32.npy"), 0640) == 0);
    CHECK(fl_save_npy(t, P("f32.npy")) == FL_OK);
    CHECK(stat(P("f32.npy"), &st) == 0 && (st.st_mode & 0777) == 0640);
    u = fl_load_npy(P("f32.npy"));
    CHECK(u && fl_tensor_dim(u, 0) == 0);
    fl_tensor_free(u);
    umask(027);
    CHECK(fl_save_npy(t, P("umask027.npy")) == FL_OK);
    umask(022);
    if (stat("/proc/self/status", &st) == 0) /* where the umask is read from */
        CHECK(stat(P("umask027.npy"), &st) == 0 && (st.st_mode & 0777) == 0640);

    /* saving into a folder that does not exist, or over a folder, fails cleanly */
    fl_clear_error();
    CHECK(fl_save_npy(t, P("no-such-dir/x.npy")) == FL_ERR_IO);
    CHECK_ERR(FL_ERR_IO, P("no-such-dir/x.npy"), "No such file or directory");
    CHECK(!exists(P("no-such-dir")));
    CHECK(mkdir(P("a-dir.npy"), 0755) == 0);
    fl_clear_error();
    CHECK(fl_save_npy(t, P("a-dir.npy")) == FL_ERR_IO);
    CHECK_ERR(FL_ERR_IO, P("a-dir.npy"), "it is a folder"); /* refused before writing */
    CHECK(count_temp_files(tmpdir) == 0);
    fl_clear_error();
    CHECK(fl_save_npy(NULL, P("x.npy")) == FL_ERR_INVALID_ARG);
    CHECK(fl_save_npy(t, NULL) == FL_ERR_INVALID_ARG);
    fl_tensor_free(t);
    CHECK(count_temp_files(tmpdir) == 0);

    /* hand-written headers: versions 2.0 / 3.0, odd but valid formatting */
    {
        unsigned char d[16];
        const float f[4] = {1, -2, 3.5f, 1e-3f};
        for (int i = 0; i < 4; i++) {
            uint32_t x;
            memcpy(&x, &f[i], 4);
            le_u32(d + 4 * i, x);
        }
        const char *headers[] = {
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }    \n",
            "{\"shape\":(2,2,),\"fortran_order\":False,\"descr\":\"<f4\"}",
            "{ 'fortran_order' : False ,\t'shape' : ( 2 , 2 ) , 'descr' : '<f4' , }\n",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 2L), }\n",
        };
        for (int v = 1; v <= 3; v++)
            for (int h = 0; h < 4; h++) {
                write_npy(P("hand.npy"), v, headers[h], d, sizeof d);
                fl_clear_error();
                u = fl_load_npy(P("hand.npy"));
                CHECK_MSG(u != NULL, "version %d header %d: %s", v, h, fl_last_error());
                if (u) {
                    CHECK(fl_tensor_dtype(u) == FL_FLOAT32 && fl_tensor_ndim(u) == 2 && fl_tensor_dim(u, 1) == 2);
                    CHECK(memcmp(fl_tensor_cdata(u), f, sizeof f) == 0);
                }
                fl_tensor_free(u);
            }
    }

    /* '<f8' -> float32 */
    {
        unsigned char d[24];
        const double x[3] = {1.5, -2.25, 1e300};
        for (int i = 0; i < 3; i++) {
            uint64_t b;
            memcpy(&b, &x[i], 8);
            le_u64(d + 8 * i, b);
        }
        write_npy(P("f8.npy"), 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }\n", d, sizeof d);
        u = fl_load_npy(P("f8.npy"));
        CHECK(u && fl_tensor_dtype(u) == FL_FLOAT32 && fl_tensor_dim(u, 0) == 3);
        if (u) {
            const float *v = fl_tensor_cdata(u);
            CHECK(v[0] == 1.5f && v[1] == -2.25f && isinf(v[2]));
        }
        fl_tensor_free(u);
    }

    /* '<i8' -> int32, and its overflow */
    {
        unsigned char d[32];
        const int64_t x[4] = {-5, 7, 2147483647, -2147483647 - 1};
        for (int i = 0; i < 4; i++) le_u64(d + 8 * i, (uint64_t)x[i]);
        write_npy(P("i8.npy"), 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 2), }\n", d, sizeof d);
        u = fl_load_npy(P("i8.npy"));
        CHECK(u && fl_tensor_dtype(u) == FL_INT32);
        if (u) {
            const int32_t *v = fl_tensor_cdata(u);
            for (int i = 0; i < 4; i++) CHECK(v[i] == x[i]);
        }
        fl_tensor_free(u);
        le_u64(d + 16, (uint64_t)2147483648LL);
        write_npy(P("i8big.npy"), 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }\n", d, sizeof d);
        fl_clear_error();
        CHECK(fl_load_npy(P("i8big.npy")) == NULL);
        CHECK_ERR(FL_ERR_UNSUPPORTED, P("i8big.npy"), "element 2 is 2147483648, which does not fit in int32");
        le_u64(d + 16, (uint64_t)-2147483649LL);
        write_npy(P("i8neg.npy"), 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }\n", d, sizeof d);
        fl_clear_error();
        CHECK(fl_load_npy(P("i8neg.npy")) == NULL);
        CHECK_ERR(FL_ERR_UNSUPPORTED, P("i8neg.npy"), "-2147483649");
    }

    /* '<u4' with and without overflow, '|i1', '|b1', '<i4', '<i2' */
    {
        unsigned char d[8];
        le_u32(d, 7), le_u32(d + 4, 2147483647u);
        write_npy(P("u4.npy"), 1, "{'descr': '<u4', 'fortran_order': False, 'shape': (2,), }\n", d, 8);
        u = fl_load_npy(P("u4.npy"));
        CHECK(u && fl_tensor_dtype(u) == FL_INT32 && ((const int32_t *)fl_tensor_cdata(u))[1] == 2147483647);
        fl_tensor_free(u);
        le_u32(d + 4, 0x80000000u);
        write_npy(P("u4big.npy"), 1, "{'descr': '<u4', 'fortran_order': False, 'shape': (2,), }\n", d, 8);
        fl_clear_error();
        CHECK(fl_load_npy(P("u4big.npy")) == NULL);
        CHECK_ERR(FL_ERR_UNSUPPORTED, P("u4big.npy"), "2147483648");

        const unsigned char i1[3] = {0x80, 0x7f, 0xff};
        write_npy(P("i1.npy"), 1, "{'descr': '|i1', 'fortran_order': False, 'shape': (3,), }\n", i1, 3);
        u = fl_load_npy(P("i1.npy"));
        CHECK(u && fl_tensor_dtype(u) == FL_INT32);
        if (u) {
            const int32_t *v = fl_tensor_cdata(u);
            CHECK(v[0] == -128 && v[1] == 127 && v[2] == -1);
        }
        fl_tensor_free(u);

        const unsigned char b1[3] = {0, 1, 1};
        write_npy(P("b1.npy"), 1, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }\n", b1, 3);
        u = fl_load_npy(P("b1.npy"));
        CHECK(u && fl_tensor_dtype(u) == FL_UINT8);
        if (u) CHECK(memcmp(fl_tensor_cdata(u), b1, 3) == 0);
        fl_tensor_free(u);

        le_u32(d, (uint32_t)-9), le_u32(d + 4, 9);
        write_npy(P("i4.npy"), 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }\n", d, 8);
        u = fl_load_npy(P("i4.npy"));
        CHECK(u && fl_tensor_dtype(u) == FL_INT32 && ((const int32_t *)fl_tensor_cdata(u))[0] == -9);
        fl_tensor_free(u);

        const unsigned char i2[4] = {0x00, 0x80, 0xff, 0x7f}; /* -32768, 32767 */
        write_npy(P("i2.npy"), 1, "{'descr': '<i2', 'fortran_order': False, 'shape': (2,), }\n", i2, 4);
        u = fl_load_npy(P("i2.npy"));
        CHECK(u && ((const int32_t *)fl_tensor_cdata(u))[0] == -32768 && ((const int32_t *)fl_tensor_cdata(u))[1] == 32767);
        fl_tensor_free(u);
    }

    /* refusals, each naming the file and the problem */
    {
        unsigned char d[64] = {0};
        struct {
            const char *name;
            int major;
            const char *header;
            size_t data;
            fl_status status;
            const char *phrase;
        } bad[] = {
            {"fortran.npy", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16, FL_ERR_UNSUPPORTED,
             "fortran_order is True"},
            {"bigendian.npy", 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8, FL_ERR_UNSUPPORTED,
             "big-endian"},
            {"complex.npy", 1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16, FL_ERR_UNSUPPORTED,
             "unsupported dtype descr '<c8'"},
            {"object.npy", 1, "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", 16, FL_ERR_UNSUPPORTED,
             "object arrays"},
            {"struct.npy", 1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8,
             FL_ERR_UNSUPPORTED, "structured"},
            {"ninedims.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 4,
             FL_ERR_UNSUPPORTED, "too many dimensions"},
            {"truncated.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (10,), }", 12, FL_ERR_FORMAT,
             "truncated: file ends after 12 of 40 bytes of data"},
            {"noshape.npy", 1, "{'descr': '<f4', 'fortran_order': False}", 4, FL_ERR_FORMAT, "missing key 'shape'"},
            {"extrakey.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), 'x': 1}", 4, FL_ERR_FORMAT,
             "unexpected key 'x'"},
            {"dupkey.npy", 1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': ()}", 4,
             FL_ERR_FORMAT, "duplicate key 'descr'"},
            {"badbool.npy", 1, "{'descr': '<f4', 'fortran_order': 0, 'shape': ()}", 4, FL_ERR_FORMAT,
             "'fortran_order' is not True or False"},
            {"negdim.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}", 4, FL_ERR_FORMAT,
             "negative dimension"},
            {"garbage.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} junk", 4, FL_ERR_FORMAT,
             "malformed .npy header"},
            {"noclose.npy", 1, "{'descr': '<f4, 'fortran_order': False, 'shape': (1,)", 4, FL_ERR_FORMAT,
             "malformed .npy header"},
            {"version4.npy", 4, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 4, FL_ERR_UNSUPPORTED,
             "format version 4.0"},
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            write_npy(P(bad[i].name), bad[i].major == 4 ? 2 : bad[i].major, bad[i].header, d, bad[i].data);
            if (bad[i].major == 4) { /* patch the version byte */
                size_t n;
                unsigned char *b = read_all(P(bad[i].name), &n);
                b[6] = 4;
                write_bytes(P(bad[i].name), b, n);
                free(b);
            }
            fl_clear_error();
            u = fl_load_npy(P(bad[i].name));
            CHECK_MSG(u == NULL, "%s loaded", bad[i].name);
            fl_tensor_free(u);
            CHECK_ERR(bad[i].status, P(bad[i].name), bad[i].phrase);
        }

        write_bytes(P("badmagic.npy"), "\x93NUMPX\x01\x00\x10\x00{}", 12);
        fl_clear_error();
        CHECK(fl_load_npy(P("badmagic.npy")) == NULL);
        CHECK_ERR(FL_ERR_FORMAT, P("badmagic.npy"), "bad magic 93 4e 55 4d 50 58");
        write_bytes(P("zip.npy"), "PK\x03\x04\x14\x00\x00\x00", 8);
        fl_clear_error();
        CHECK(fl_load_npy(P("zip.npy")) == NULL);
        CHECK_ERR(FL_ERR_FORMAT, P("zip.npy"), ".npz");
        write_bytes(P("short.npy"), "\x93NUMPY\x01", 7);
        fl_clear_error();
        CHECK(fl_load_npy(P("short.npy")) == NULL);
        CHECK_ERR(FL_ERR_FORMAT, P("short.npy"), "truncated");
        write_bytes(P("hdrcut.npy"), "\x93NUMPY\x01\x00\x40\x00{'descr'", 17);
        fl_clear_error();
        CHECK(fl_load_npy(P("hdrcut.npy")) == NULL);
        CHECK_ERR(FL_ERR_FORMAT, P("hdrcut.npy"), "file ends inside the .npy header");
        write_bytes(P("empty-file.npy"), "", 0);
        fl_clear_error();
        CHECK(fl_load_npy(P("empty-file.npy")) == NULL);
        CHECK_ERR(FL_ERR_FORMAT, P("empty-file.npy"), "empty");
        fl_clear_error();
        CHECK(fl_load_npy(P("missing.npy")) == NULL);
        CHECK_ERR(FL_ERR_IO, P("missing.npy"), "No such file");
        fl_clear_error();
        CHECK(fl_load_npy(NULL) == NULL);
        CHECK(fl_last_status() == FL_ERR_INVALID_ARG);
    }
}

/* ---------------------------------------------------------------- CIFAR */

/* Pixel (record r, channel c, position p) of the fake CIFAR files. */
static uint8_t cifar_px(int file, int r, int c, int p) { return (uint8_t)(file * 31 + r * 17 + c * 85 + p * 3); }

static void write_cifar(const char *path, int file, int records, int bad_label_at) {
    size_t n = (size_t)records * 3073;
    unsigned char *b = malloc(n);
    for (int r = 0; r < records; r++) {
        unsigned char *rec = b + (size_t)r * 3073;
        rec[0] = r == bad_label_at ? 10 : (uint8_t)((file + r) % 10);
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < 1024; p++) rec[1 + c * 1024 + p] = cifar_px(file, r, c, p);
    }
    write_bytes(path, b, n);
    free(b);
}

/* x rows [row0, row0+count) hold file `file`'s records from 0. */
static void check_cifar_rows(const fl_tensor *x, const fl_tensor *y, int64_t row0, int file, int count) {
    const float *xv = fl_tensor_cdata(x), *yv = fl_tensor_cdata(y);
    int bad = 0, badl = 0;
    for (int r = 0; r < count; r++) {
        badl += yv[row0 + r] != (float)((file + r) % 10);
        for (int h = 0; h < 32; h++)
            for (int w = 0; w < 32; w++)
                for (int c = 0; c < 3; c++) {
                    float v = xv[(((row0 + r) * 32 + h) * 32 + w) * 3 + c];
                    bad += v != (float)cifar_px(file, r, c, h * 32 + w) / 255.0f;
                }
    }
    CHECK_MSG(bad == 0, "%d pixels differ", bad);
    CHECK(badl == 0);
}

static void test_cifar(void) {
    char dir[512], sub[600];
    snprintf(dir, sizeof dir, "%s/cifar", tmpdir);
    mkdir(dir, 0755);
    char p[700];
    snprintf(p, sizeof p, "%s/data_batch_1.bin", dir);
    write_cifar(p, 1, 3, -1);
    snprintf(p, sizeof p, "%s/data_batch_2.bin", dir);
    write_cifar(p, 2, 4, -1);
    snprintf(p, sizeof p, "%s/test_batch.bin", dir);
    write_cifar(p, 0, 2, -1);

    fl_dataset d;
    fl_status s = fl_load_cifar10(dir, 3, 0, &d);
    CHECK_MSG(s == FL_OK, "%s", fl_last_error());
    if (s == FL_OK) {
        CHECK(fl_tensor_ndim(d.x_train) == 4 && fl_tensor_dim(d.x_train, 0) == 3 && fl_tensor_dim(d.x_train, 1) == 32 &&
              fl_tensor_dim(d.x_train, 2) == 32 && fl_tensor_dim(d.x_train, 3) == 3);
        CHECK(fl_tensor_ndim(d.y_train) == 1 && fl_tensor_dim(d.y_train, 0) == 3);
        CHECK(fl_tensor_dim(d.x_test, 0) == 2 && fl_tensor_dim(d.y_test, 0) == 2);
        CHECK(fl_tensor_dtype(d.x_train) == FL_FLOAT32 && fl_tensor_dtype(d.y_test) == FL_FLOAT32);
        check_cifar_rows(d.x_train, d.y_train, 0, 1, 3);
        check_cifar_rows(d.x_test, d.y_test, 0, 0, 2);
    }
    fl_dataset_free(&d);
    CHECK(d.x_train == NULL && d.y_train == NULL && d.x_test == NULL && d.y_test == NULL);
    fl_dataset_free(&d); /* twice is fine */
    fl_dataset_free(NULL);

    /* across batches: 3 from batch 1, 2 from batch 2; max_test 1 */
    s = fl_load_cifar10(dir, 5, 1, &d);
    CHECK_MSG(s == FL_OK, "%s", fl_last_error());
    if (s == FL_OK) {
        CHECK(fl_tensor_dim(d.x_train, 0) == 5 && fl_tensor_dim(d.x_test, 0) == 1);
        check_cifar_rows(d.x_train, d.y_train, 0, 1, 3);
        check_cifar_rows(d.x_train, d.y_train, 3, 2, 2);
        check_cifar_rows(d.x_test, d.y_test, 0, 0, 1);
    }
    fl_dataset_free(&d);

    /* everything (max 0) wants all five batches */
    d.x_train = d.y_test = (fl_tensor *)&d; /* garbage the loader must clear */
    fl_clear_error();
    s = fl_load_cifar10(dir, 0, 0, &d);
    CHECK(s == FL_ERR_IO);
    snprintf(p, sizeof p, "%s/data_batch_3.bin", dir);
    CHECK_ERR(FL_ERR_IO, p, "No such file");
    CHECK_STR_CONTAINS(fl_last_error(), "data_batch_1.bin, data_batch_2.bin, data_batch_3.bin");
    CHECK_STR_CONTAINS(fl_last_error(), "test_batch.bin");
    CHECK(d.x_train == NULL && d.y_train == NULL && d.x_test == NULL && d.y_test == NULL);

    /* the subfolder cifar-10-batches-bin */
    snprintf(sub, sizeof sub, "%s/cifar2", tmpdir);
    mkdir(sub, 0755);
    snprintf(p, sizeof p, "%s/cifar2/cifar-10-batches-bin", tmpdir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/cifar2/cifar-10-batches-bin/data_batch_1.bin", tmpdir);
    write_cifar(p, 1, 3, -1);
    snprintf(p, sizeof p, "%s/cifar2/cifar-10-batches-bin/test_batch.bin", tmpdir);
    write_cifar(p, 0, 2, -1);
    s = fl_load_cifar10(sub, 2, 2, &d);
    CHECK_MSG(s == FL_OK, "%s", fl_last_error());
    if (s == FL_OK) {
        CHECK(fl_tensor_dim(d.x_train, 0) == 2 && fl_tensor_dim(d.x_test, 0) == 2);
        check_cifar_rows(d.x_train, d.y_train, 0, 1, 2);
    }
    fl_dataset_free(&d);

    /* a label > 9 names the file and the record */
    snprintf(p, sizeof p, "%s/cifar2/cifar-10-batches-bin/data_batch_1.bin", tmpdir);
    write_cifar(p, 1, 3, 1);
    fl_clear_error();
    CHECK(fl_load_cifar10(sub, 3, 0, &d) == FL_ERR_FORMAT);
    CHECK_ERR(FL_ERR_FORMAT, p, "record 1 has label 10");
    CHECK(d.x_train == NULL && d.y_train == NULL && d.x_test == NULL && d.y_test == NULL);

    /* a size that is not a multiple of 3073 */
    {
        size_t n = 3073 * 2 + 5;
        unsigned char *b = calloc(1, n);
        write_bytes(p, b, n);
        free(b);
        fl_clear_error();
        CHECK(fl_load_cifar10(sub, 1, 0, &d) == FL_ERR_FORMAT);
        CHECK_ERR(FL_ERR_FORMAT, p, "not a multiple of the 3073-byte");
        CHECK(d.x_train == NULL);
        b = calloc(1, 3074 * 3);
        write_bytes(p, b, 3074 * 3);
        free(b);
        fl_clear_error();
        CHECK(fl_load_cifar10(sub, 1, 0, &d) == FL_ERR_FORMAT);
        CHECK_ERR(FL_ERR_FORMAT, p, "CIFAR-100");
    }

    /* a missing test file, a missing folder, bad arguments */
    snprintf(p, sizeof p, "%s/test_batch.bin", dir);
    remove(p);
    fl_clear_error();
    CHECK(fl_load_cifar10(dir, 2, 0, &d) == FL_ERR_IO);
    CHECK_ERR(FL_ERR_IO, p, "expected the CIFAR-10 binary version");
    CHECK(d.x_train == NULL && d.y_train == NULL);
    snprintf(p, sizeof p, "%s/no-cifar-here", tmpdir);
    fl_clear_error();
    CHECK(fl_load_cifar10(p, 1, 1, &d) == FL_ERR_IO);
    CHECK_ERR(FL_ERR_IO, p, "folder does not exist");
    CHECK(fl_load_cifar10(dir, -1, 0, &d) == FL_ERR_INVALID_ARG);
    CHECK(fl_load_cifar10(NULL, 0, 0, &d) == FL_ERR_INVALID_ARG);
    CHECK(fl_load_cifar10(dir, 0, 0, NULL) == FL_ERR_INVALID_ARG);
}

/* ---------------------------------------------------------------- MNIST */

static uint8_t mnist_px(int split, int i, int p) { return (uint8_t)(split * 101 + i * 13 + p); }

/* Writes images (n, h, 28) and labels (n_lbl,) for a split; gz chooses
 * "<name>.gz" or the raw "<name>". */
static void write_mnist_split(const char *dir, int split, int n, int h, int n_lbl, int bad_label, bool gz) {
    const char *img = split == 0 ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte";
    const char *lbl = split == 0 ? "train-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte";
    char p[700];
    size_t sz;
    uint8_t *px = malloc((size_t)n * h * 28);
    for (int i = 0; i < n; i++)
        for (int q = 0; q < h * 28; q++) px[(size_t)i * h * 28 + q] = mnist_px(split, i, q);
    const uint32_t di[3] = {(uint32_t)n, (uint32_t)h, 28};
    unsigned char *b = idx_bytes(0x08, 3, di, px, (size_t)n * h * 28, &sz);
    snprintf(p, sizeof p, "%s/%s%s", dir, img, gz ? ".gz" : "");
    if (gz) write_gz(p, b, sz);
    else write_bytes(p, b, sz);
    free(b);
    free(px);
    uint8_t lb[64];
    for (int i = 0; i < n_lbl; i++) lb[i] = (uint8_t)((i * 3 + split) % 10);
    if (bad_label >= 0) lb[bad_label] = 10;
    const uint32_t dl[1] = {(uint32_t)n_lbl};
    b = idx_bytes(0x08, 1, dl, lb, (size_t)n_lbl, &sz);
    snprintf(p, sizeof p, "%s/%s%s", dir, lbl, gz ? ".gz" : "");
    if (gz) write_gz(p, b, sz);
    else write_bytes(p, b, sz);
    free(b);
}

static void check_mnist(const fl_tensor *x, const fl_tensor *y, int split, int n) {
    CHECK(fl_tensor_dtype(x) == FL_FLOAT32 && fl_tensor_ndim(x) == 4 && fl_tensor_dim(x, 0) == n &&
          fl_tensor_dim(x, 1) == 28 && fl_tensor_dim(x, 2) == 28 && fl_tensor_dim(x, 3) == 1);
    CHECK(fl_tensor_dtype(y) == FL_FLOAT32 && fl_tensor_ndim(y) == 1 && fl_tensor_dim(y, 0) == n);
    const float *xv = fl_tensor_cdata(x), *yv = fl_tensor_cdata(y);
    int bad = 0;
    for (int i = 0; i < n; i++)
        for (int q = 0; q < 784; q++) bad += xv[i * 784 + q] != (float)mnist_px(split, i, q) / 255.0f;
    CHECK_MSG(bad == 0, "%d pixels differ", bad);
    for (int i = 0; i < n; i++) CHECK(yv[i] == (float)((i * 3 + split) % 10));
}

static void test_mnist(void) {
    char dir[512], p[700];
    snprintf(dir, sizeof dir, "%s/mnist", tmpdir);
    mkdir(dir, 0755);
    write_mnist_split(dir, 0, 5, 28, 5, -1, true);
    write_mnist_split(dir, 1, 4, 28, 4, -1, false); /* the test split uncompressed */

    fl_dataset d;
    fl_status s = fl_load_mnist(dir, 0, 0, &d);
    CHECK_MSG(s == FL_OK, "%s", fl_last_error());
    if (s == FL_OK) {
        check_mnist(d.x_train, d.y_train, 0, 5);
        check_mnist(d.x_test, d.y_test, 1, 4);
        const float *xv = fl_tensor_cdata(d.x_train);
        float lo = 1, hi = 0;
        for (int i = 0; i < 5 * 784; i++) lo = fminf(lo, xv[i]), hi = fmaxf(hi, xv[i]);
        CHECK(lo >= 0.0f && hi <= 1.0f && hi == 1.0f); /* the pattern reaches 255 */
    }
    fl_dataset_free(&d);

    s = fl_load_mnist(dir, 3, 2, &d);
    CHECK_MSG(s == FL_OK, "%s", fl_last_error());
    if (s == FL_OK) {
        check_mnist(d.x_train, d.y_train, 0, 3);
        check_mnist(d.x_test, d.y_test, 1, 2);
    }
    fl_dataset_free(&d);
    s = fl_load_mnist(dir, 1000, 1000, &d); /* more than there is: all */
    CHECK(s == FL_OK && fl_tensor_dim(d.x_train, 0) == 5 && fl_tensor_dim(d.x_test, 0) == 4);
    fl_dataset_free(&d);

    /* a missing folder: names it, the files, and the Debian hint */
    snprintf(p, sizeof p, "%s/no-mnist-here", tmpdir);
    d.x_test = (fl_tensor *)&d;
    fl_clear_error();
    CHECK(fl_load_mnist(p, 0, 0, &d) == FL_ERR_IO);
    CHECK_ERR(FL_ERR_IO, p, "train-images-idx3-ubyte.gz");
    CHECK_STR_CONTAINS(fl_last_error(), "t10k-labels-idx1-ubyte");
    CHECK_STR_CONTAINS(fl_last_error(),
                       "install the Debian package dataset-fashion-mnist (Fashion-MNIST in /usr/share/datasets/fashion-mnist)");
    CHECK(d.x_train == NULL && d.y_train == NULL && d.x_test == NULL && d.y_test == NULL);

    /* one file missing */
    snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte", dir);
    rename(p, P("saved-labels"));
    fl_clear_error();
    CHECK(fl_load_mnist(dir, 0, 0, &d) == FL_ERR_IO);
    CHECK_ERR(FL_ERR_IO, dir, "neither t10k-labels-idx1-ubyte.gz nor t10k-labels-idx1-ubyte");
    CHECK(d.x_train == NULL && d.y_train == NULL);
    rename(P("saved-labels"), p);

    /* a label of 10, different counts, a wrong image shape, a corrupt file */
    write_mnist_split(dir, 1, 4, 28, 4, 2, false);
    fl_clear_error();
    CHECK(fl_load_mnist(dir, 0, 0, &d) == FL_ERR_FORMAT);
    CHECK_ERR(FL_ERR_FORMAT, p, "label 2 is 10");
    CHECK(d.x_train == NULL);
    write_mnist_split(dir, 1, 4, 28, 3, -1, false);
    fl_clear_error();
    CHECK(fl_load_mnist(dir, 2, 2, &d) == FL_ERR_FORMAT); /* checked on the file counts, even when cut */
    CHECK_ERR(FL_ERR_FORMAT, "has 4 images but", "has 3 labels");
    write_mnist_split(dir, 1, 4, 27, 4, -1, false);
    fl_clear_error();
    CHECK(fl_load_mnist(dir, 0, 0, &d) == FL_ERR_FORMAT);
    CHECK_ERR(FL_ERR_FORMAT, "(4, 27, 28)", "expected uint8 images (N, 28, 28)");
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte", dir);
    write_bytes(p, "garbage!", 8);
    fl_clear_error();
    CHECK(fl_load_mnist(dir, 0, 0, &d) == FL_ERR_FORMAT);
    CHECK_ERR(FL_ERR_FORMAT, p, "magic");
    CHECK(d.x_train == NULL && d.y_train == NULL && d.x_test == NULL && d.y_test == NULL);
    CHECK(fl_load_mnist(dir, 0, -1, &d) == FL_ERR_INVALID_ARG);
    CHECK(fl_load_mnist(NULL, 0, 0, &d) == FL_ERR_INVALID_ARG);
    CHECK(fl_load_mnist(dir, 0, 0, NULL) == FL_ERR_INVALID_ARG);

    /* the real Fashion-MNIST, when installed */
    struct stat st;
    if (stat(FASHION_DIR, &st) != 0) {
        printf("test_io: note: %s is absent, skipping the real Fashion-MNIST check "
               "(install the Debian package dataset-fashion-mnist)\n", FASHION_DIR);
        return;
    }
    s = fl_load_mnist(FASHION_DIR, 100, 50, &d);
    CHECK_MSG(s == FL_OK, "%s", fl_last_error());
    if (s == FL_OK) {
        CHECK(fl_tensor_dim(d.x_train, 0) == 100 && fl_tensor_dim(d.x_train, 1) == 28 &&
              fl_tensor_dim(d.x_train, 2) == 28 && fl_tensor_dim(d.x_train, 3) == 1);
        CHECK(fl_tensor_dim(d.y_train, 0) == 100 && fl_tensor_dim(d.x_test, 0) == 50 && fl_tensor_dim(d.y_test, 0) == 50);
        const float *y = fl_tensor_cdata(d.y_train), *x = fl_tensor_cdata(d.x_train);
        int bad = 0, seen[10] = {0};
        for (int i = 0; i < 100; i++) {
            bad += !(y[i] >= 0 && y[i] < 10 && y[i] == floorf(y[i]));
            if (!bad) seen[(int)y[i]] = 1;
        }
        CHECK(bad == 0);
        int classes = 0;
        for (int i = 0; i < 10; i++) classes += seen[i];
        CHECK(classes >= 5); /* 100 Fashion-MNIST labels cover most classes */
        float lo = 1, hi = 0;
        for (int i = 0; i < 100 * 784; i++) lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]);
        CHECK(lo >= 0.0f && hi <= 1.0f && hi > 0.5f);
    }
    fl_dataset_free(&d);
    /* the files themselves: 60000 training and 10000 test labels */
    fl_tensor *t = fl_load_idx(FASHION_DIR "/train-labels-idx1-ubyte.gz");
    CHECK_MSG(t && fl_tensor_ndim(t) == 1 && fl_tensor_dim(t, 0) == 60000, "%s", fl_last_error());
    if (t) {
        const uint8_t *v = fl_tensor_cdata(t);
        int bad = 0;
        for (int i = 0; i < 60000; i++) bad += v[i] > 9;
        CHECK(bad == 0);
    }
    fl_tensor_free(t);
    t = fl_load_idx(FASHION_DIR "/t10k-images-idx3-ubyte.gz");
    CHECK_MSG(t && fl_tensor_dtype(t) == FL_UINT8 && fl_tensor_ndim(t) == 3 && fl_tensor_dim(t, 0) == 10000 &&
                  fl_tensor_dim(t, 1) == 28 && fl_tensor_dim(t, 2) == 28,
              "%s", fl_last_error());
    fl_tensor_free(t);
}

/* ------------------------------------------------ fl_to_float, fl_one_hot */

static void test_convert(void) {
    fl_tensor *u8 = fl_tensor_zeros(FL_UINT8, 2, 2);
    uint8_t *b = fl_tensor_data(u8);
    b[0] = 0, b[1] = 51, b[2] = 255, b[3] = 128;
    fl_tensor *f = fl_to_float(u8, 1.0f / 255.0f);
    CHECK(f && fl_tensor_dtype(f) == FL_FLOAT32 && fl_tensor_ndim(f) == 2 && fl_tensor_dim(f, 1) == 2);
    if (f) {
        const float *v = fl_tensor_cdata(f);
        CHECK_CLOSE(v[0], 0.0, 0, 0);
        CHECK_CLOSE(v[1], 0.2, 1e-6, 0);
        CHECK_CLOSE(v[2], 1.0, 1e-6, 0);
        CHECK_CLOSE(v[3], 128.0 / 255.0, 1e-6, 0);
    }
    fl_tensor_free(f);

    fl_tensor *i32 = fl_tensor_zeros(FL_INT32, 3);
    int32_t *iv = fl_tensor_data(i32);
    iv[0] = -3, iv[1] = 0, iv[2] = 1000000;
    f = fl_to_float(i32, 2.0f);
    CHECK(f && fl_tensor_ndim(f) == 1);
    if (f) {
        const float *v = fl_tensor_cdata(f);
        CHECK(v[0] == -6.0f && v[1] == 0.0f && v[2] == 2000000.0f);
    }
    fl_tensor_free(f);

    fl_tensor *f32 = fl_tensor_zeros(FL_FLOAT32, 1, 2);
    ((float *)fl_tensor_data(f32))[1] = 3.0f;
    f = fl_to_float(f32, 0.5f);
    CHECK(f && f != f32 && ((const float *)fl_tensor_cdata(f))[1] == 1.5f);
    fl_tensor_free(f);
    fl_clear_error();
    CHECK(fl_to_float(NULL, 1.0f) == NULL && fl_last_status() == FL_ERR_INVALID_ARG);

    /* one-hot from uint8 (N,), int32 (N, 1) and float32 labels */
    fl_tensor *l8 = fl_tensor_zeros(FL_UINT8, 3);
    uint8_t *lb = fl_tensor_data(l8);
    lb[0] = 0, lb[1] = 2, lb[2] = 1;
    fl_tensor *oh = fl_one_hot(l8, 3);
    CHECK(oh && fl_tensor_dtype(oh) == FL_FLOAT32 && fl_tensor_ndim(oh) == 2 && fl_tensor_dim(oh, 0) == 3 &&
          fl_tensor_dim(oh, 1) == 3);
    if (oh) {
        const float *v = fl_tensor_cdata(oh);
        const float want[9] = {1, 0, 0, 0, 0, 1, 0, 1, 0};
        CHECK(memcmp(v, want, sizeof want) == 0);
    }
    fl_tensor_free(oh);

    fl_tensor *l32 = fl_tensor_zeros(FL_INT32, 2, 1);
    int32_t *li = fl_tensor_data(l32);
    li[0] = 4, li[1] = 0;
    oh = fl_one_hot(l32, 5);
    CHECK(oh && fl_tensor_dim(oh, 0) == 2 && fl_tensor_dim(oh, 1) == 5);
    if (oh) CHECK(((const float *)fl_tensor_cdata(oh))[4] == 1.0f && ((const float *)fl_tensor_cdata(oh))[5] == 1.0f);
    fl_tensor_free(oh);

    fl_tensor *lf = fl_tensor_zeros(FL_FLOAT32, 2);
    float *lfv = fl_tensor_data(lf);
    lfv[0] = 1.0f, lfv[1] = 9.0f;
    oh = fl_one_hot(lf, 10);
    CHECK(oh && ((const float *)fl_tensor_cdata(oh))[1] == 1.0f && ((const float *)fl_tensor_cdata(oh))[19] == 1.0f);
    fl_tensor_free(oh);

    /* out of range and non-integer labels: the index and value are named */
    fl_clear_error();
    li[0] = 0, li[1] = 5;
    CHECK(fl_one_hot(l32, 5) == NULL);
    CHECK_ERR(FL_ERR_INVALID_ARG, "label 1 is 5", "[0, 5)");
    li[1] = -1;
    fl_clear_error();
    CHECK(fl_one_hot(l32, 5) == NULL);
    CHECK_ERR(FL_ERR_INVALID_ARG, "label 1 is -1", "");
    fl_clear_error();
    CHECK(fl_one_hot(l8, 2) == NULL);
    CHECK_ERR(FL_ERR_INVALID_ARG, "label 1 is 2", "[0, 2)");
    lfv[1] = 1.5f;
    fl_clear_error();
    CHECK(fl_one_hot(lf, 10) == NULL);
    CHECK_ERR(FL_ERR_INVALID_ARG, "label 1 is 1.5", "integer");
    lfv[1] = NAN;
    fl_clear_error();
    CHECK(fl_one_hot(lf, 10) == NULL);
    CHECK_ERR(FL_ERR_INVALID_ARG, "label 1 is", "");
    fl_clear_error();
    CHECK(fl_one_hot(u8, 3) == NULL); /* (2, 2) */
    CHECK_ERR(FL_ERR_SHAPE, "(2, 2)", "expected (N,) or (N, 1)");
    fl_clear_error();
    CHECK(fl_one_hot(l8, 0) == NULL);
    CHECK(fl_last_status() == FL_ERR_INVALID_ARG);
    CHECK(fl_one_hot(NULL, 3) == NULL);

    fl_tensor_free(u8);
    fl_tensor_free(i32);
    fl_tensor_free(f32);
    fl_tensor_free(l8);
    fl_tensor_free(l32);
    fl_tensor_free(lf);
}

/* fl_load_fortunes_lang on a small fortune folder made here: the cookie
 * separator, the cleaning (overstriking, a "#source" first line, white
 * space, too few letters, duplicates across files and languages), links
 * and .dat files left out, UTF-8 and Latin-1 tokens, pre-padding and
 * truncation, balanced classes, and the errors for a missing language. */
static void fort_write(const char *rel, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/fortunes/%s", tmpdir, rel);
    FILE *f = fopen(p, "wb");
    CHECK_MSG(f != NULL, "cannot write %s", p);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* n cookies "<word> number k is a sentence in this language" (>= 20 letters). */
static void fort_lang(const char *rel, const char *word, int n, const char *extra) {
    char *buf = malloc(65536);
    size_t off = 0;
    for (int k = 0; k < n; k++)
        off += (size_t)snprintf(buf + off, 65536 - off, "%s number %d is a sentence\nin this   language\n%%\n", word, k);
    snprintf(buf + off, 65536 - off, "%s", extra);
    fort_write(rel, buf);
    free(buf);
}

static void test_fortunes(void) {
    char d[512], p[600];
    snprintf(d, sizeof d, "%s/fortunes", tmpdir);
    mkdir(d, 0755);
    const char *langs[] = {"de", "es", "it", "pl"};
    for (int i = 0; i < 4; i++) { snprintf(p, sizeof p, "%s/%s", d, langs[i]); mkdir(p, 0755); }
    /* English: 14 cookies in two category files + one with overstriking, one
     * too short, one duplicate; a file that is not an English category
     * (another package's) is not read */
    fort_lang("fortunes", "english", 12, "B\bBo\bol\bld\bd _\bu_\bn_\bd_\be_\br_\bl_\bi_\bn_\be_\bd letters here\n%\nshort\n%\n"
              "english number 3 is a sentence in this language\n%\n");
    fort_lang("science", "scientific", 2, "");
    fort_lang("brasil", "portuguese", 50, "");
    /* German: 11, Latin-1 and UTF-8 umlauts; a .dat and a link repeat nothing */
    fort_lang("de/zitate", "deutsch", 10, "Gr\xc3\xbc\xc3\x9f" "e aus M\xfc" "nchen, lieber Leser dieser Zeilen\n%\n");
    fort_lang("de/zitate.dat", "datfile", 30, "");
    snprintf(p, sizeof p, "%s/de/link", d);
    CHECK(symlink("zitate", p) == 0);
    fort_lang("es/vida.fortunes", "espanol", 13, "");
    fort_lang("it/adams", "italiano", 12, "");
    /* Polish: a "#source" line is dropped; a code point above 255 */
    fort_lang("pl/7thguard", "polski", 10, "#7thguard\nZa\xc5\xbc\xc3\xb3\xc5\x82\xc4\x87 g\xc4\x99\xc5\x9bl\xc4\x85 ja\xc5\xba\xc5\x84 jeszcze raz\n%\n");
    fort_lang("pl/ascii-art", "asciiart", 30, "");
    fl_dataset ds;
    fl_status st = fl_load_fortunes_lang(d, 40, 0, 0, &ds);
    CHECK_MSG(st == FL_OK, "fortunes: %s", fl_last_error());
    if (st != FL_OK) return;
    /* smallest language: 11 (de: 10 + the umlaut one; pl: 10 + the tagged one) -> 55 rows, 11 test */
    CHECK_MSG(fl_tensor_dim(ds.x_train, 0) == 44 && fl_tensor_dim(ds.x_test, 0) == 11, "rows %lld + %lld",
              (long long)fl_tensor_dim(ds.x_train, 0), (long long)fl_tensor_dim(ds.x_test, 0));
    CHECK(fl_tensor_dtype(ds.x_train) == FL_INT32 && fl_tensor_dim(ds.x_train, 1) == 40);
    int count[5] = {0};
    bool bold = false, umlaut = false, latin1 = false, polish = false, tag = false, other = false, padded = false;
    for (int part = 0; part < 2; part++) {
        fl_tensor *x = part ? ds.x_test : ds.x_train, *y = part ? ds.y_test : ds.y_train;
        const int32_t *xd = fl_tensor_data(x);
        const float *yd = fl_tensor_data(y);
        for (int64_t i = 0; i < fl_tensor_dim(x, 0); i++) {
            int l = (int)yd[i];
            CHECK(l >= 0 && l < 5);
            count[l]++;
            char s[48] = {0};
            int k = 0, first = -1;
            for (int t = 0; t < 40; t++) {
                int32_t v = xd[i * 40 + t];
                CHECK(v >= 0 && v < FL_FORTUNES_VOCAB);
                if (v && first < 0) first = t;
                if (first >= 0) CHECK_MSG(v != 0, "padding only in front");
                if (v && k < 47) s[k++] = v < 128 ? (char)v : '~';
                latin1 |= v == 0xFC;
                polish |= v == 256 + (0x17C & 255);
                umlaut |= v == 0xDF;
            }
            padded |= first > 0;
            bold |= strncmp(s, "Bold underlined letters", 23) == 0;
            tag |= strstr(s, "7thguard") != NULL;
            other |= strstr(s, "portuguese") || strstr(s, "datfile") || strstr(s, "asciiart") || strstr(s, "short");
            CHECK_MSG(!strstr(s, "  ") && s[0] != ' ', "white space collapsed: '%s'", s);
        }
    }
    for (int l = 0; l < 5; l++) CHECK_MSG(count[l] == 11, "language %s: %d rows", fl_fortunes_lang_name(l), count[l]);
    CHECK_MSG(bold && umlaut && latin1 && polish && padded, "bold %d umlaut %d latin1 %d polish %d padded %d", bold,
              umlaut, latin1, polish, padded);
    CHECK_MSG(!tag && !other, "a #source line or a file that is not read got in");
    CHECK(strcmp(fl_fortunes_lang_name(4), "pl") == 0 && fl_fortunes_lang_name(5) == NULL);
    fl_dataset_free(&ds);
    /* caps, and a truncated row keeps the first characters */
    CHECK(fl_load_fortunes_lang(d, 6, 7, 3, &ds) == FL_OK);
    CHECK(fl_tensor_dim(ds.x_train, 0) == 7 && fl_tensor_dim(ds.x_test, 0) == 3);
    if (ds.x_train) {
        const int32_t *xd = fl_tensor_data(ds.x_train);
        CHECK_MSG(xd[0] != 0 && xd[5] != 0, "a long cookie fills all maxlen tokens");
    }
    fl_dataset_free(&ds);
    /* errors: bad maxlen, a missing language folder, a folder without fortunes */
    CHECK(fl_load_fortunes_lang(d, 0, 0, 0, &ds) != FL_OK && strstr(fl_last_error(), "maxlen 0"));
    snprintf(p, sizeof p, "%s/it/adams", d);
    remove(p);
    CHECK(fl_load_fortunes_lang(d, 40, 0, 0, &ds) != FL_OK);
    CHECK_MSG(strstr(fl_last_error(), "/it") && strstr(fl_last_error(), "fortunes-it"), "%s", fl_last_error());
    CHECK(ds.x_train == NULL && ds.y_test == NULL);
    snprintf(p, sizeof p, "%s/it", d);
    rmdir(p);
    CHECK(fl_load_fortunes_lang(d, 40, 0, 0, &ds) != FL_OK && strstr(fl_last_error(), "cannot open folder"));
    CHECK(fl_load_fortunes_lang(tmpdir, 40, 0, 0, &ds) != FL_OK && strstr(fl_last_error(), "English"));
}

int main(void) {
    umask(022);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/flynn-test-io.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    test_idx();
    test_npy();
    test_cifar();
    test_mnist();
    test_convert();
    test_fortunes();
    if (check_failures == 0) nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    else printf("test_io: fixtures kept in %s\n", tmpdir);
    return check_report("test_io");
}
