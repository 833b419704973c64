/*
 * images.c — images from files: fl_load_image (one file) and
 * fl_image_dataset_from_directory (keras.utils.image_dataset_from_directory
 * into memory), decoded with libjpeg-turbo and libpng the way TensorFlow's
 * tf.io.decode_image does, so that the pixels equal Keras's.
 *
 * Decoding (by content, not by name, as TensorFlow):
 *   PNG   palette -> RGB, gray < 8 bits -> 8 bits, tRNS -> alpha; alpha added
 *         (255) or stripped to fit the channels; 16 bits -> 8 by dropping the
 *         low byte (png_set_strip_16, as TensorFlow); RGB -> gray by libpng's
 *         rgb_to_gray with TensorFlow's weights; gray -> RGB by copying.
 *   JPEG  libjpeg's own color conversion to JCS_GRAYSCALE or JCS_RGB with
 *         TensorFlow's settings (fancy upsampling, JDCT_IFAST: the same
 *         pixels as TensorFlow's decoder, where JDCT_ISLOW differs by <= 6);
 *         rgba is refused, as Keras refuses it ("JPEG does not support 4
 *         channels").
 *   BMP, GIF: listed (Keras's extensions) but refused when read.
 * A corrupt or truncated file is refused with its path and the decoder's
 * reason; nothing in a file can make the decoders write out of bounds
 * (libpng and libjpeg report through longjmp, caught here).
 *
 * Resizing: TensorFlow's ResizeBilinear with half_pixel_centers (what
 * tf.image.resize(method="bilinear") runs, no antialias), in float32 and in
 * its order of operations, so the result matches to float rounding.
 *
 * File order: Keras's index_directory. Class folders are the sorted
 * non-hidden subfolders; each is walked to any depth (os.walk: folders
 * sorted by path, files sorted by name), keeping names that end in .bmp,
 * .gif, .jpeg, .jpg or .png in any case. With shuffle, the list is permuted
 * as numpy.random.RandomState(seed).shuffle does (MT19937 and its bounded
 * draws by masked rejection), so the validation split holds the same files
 * as Keras's. Keras's tf.data then shuffles the samples again inside a
 * buffer, which flynn does not (fit shuffles every epoch anyway).
 */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "flynn/flynn.h"
#include "core/error.h"
#include "io/io.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define IMG_MAX_SIDE 65536
#define IMG_MAX_PIXELS ((int64_t)1 << 25) /* 33.5 million pixels (e.g. 5792x5792): a damaged header cannot ask for gigabytes */
#define IMG_MAX_FILE ((int64_t)1 << 30)

/* ------------------------------------------------------------ reading a file */

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return fl_error_null(FL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return fl_error_null(FL_ERR_IO, "%s: not a regular file", path);
    }
    if ((int64_t)st.st_size > IMG_MAX_FILE) {
        fclose(f);
        return fl_error_null(FL_ERR_FORMAT, "%s: %lld bytes, more than flynn's limit for an image", path, (long long)st.st_size);
    }
    size_t n = (size_t)st.st_size;
    unsigned char *b = fl_malloc(n ? n : 1, "image file");
    if (!b) { fclose(f); return NULL; }
    size_t got = fread(b, 1, n, f);
    bool err = ferror(f);
    fclose(f);
    if (got != n || err) { free(b); return fl_error_null(FL_ERR_IO, "%s: read error: %s", path, err ? strerror(errno) : "short read"); }
    *len = n;
    return b;
}

static int mode_channels(fl_color_mode m) { return m == FL_COLOR_GRAYSCALE ? 1 : m == FL_COLOR_RGBA ? 4 : 3; }

#ifdef FLYNN_HAVE_IMAGES
#include <jpeglib.h>
#include <png.h>

/* ------------------------------------------------------------ PNG */

typedef struct png_src { const unsigned char *p; size_t n, at; } png_src;
typedef struct png_err { jmp_buf jb; char msg[200]; } png_err;

static void png_read_mem(png_structp png, png_bytep out, png_size_t len) {
    png_src *s = png_get_io_ptr(png);
    if (len > s->n - s->at) png_error(png, "the file ends early (truncated)");
    memcpy(out, s->p + s->at, len);
    s->at += len;
}
static void png_on_error(png_structp png, png_const_charp msg) {
    png_err *e = png_get_error_ptr(png);
    snprintf(e->msg, sizeof e->msg, "%s", msg);
    longjmp(e->jb, 1);
}
static void png_on_warning(png_structp png, png_const_charp msg) { (void)png; (void)msg; }

/* -> uint8 (h, w, ch) in *out */
static fl_status decode_png(const char *path, const unsigned char *data, size_t len, int ch, unsigned char **out,
                            int *ho, int *wo) {
    png_err err;
    err.msg[0] = 0;
    png_src src = {data, len, 0};
    unsigned char *volatile pix = NULL;
    png_bytep *volatile rows = NULL;
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &err, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) {
        png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
        return fl_error(FL_ERR_NOMEM, "%s: out of memory for the PNG decoder", path);
    }
    if (setjmp(err.jb)) {
        png_destroy_read_struct(&png, &info, NULL);
        free(pix);
        free(rows);
        return fl_error(FL_ERR_FORMAT, "%s: not a readable PNG image: %s", path, err.msg[0] ? err.msg : "libpng error");
    }
    png_set_read_fn(png, &src, png_read_mem);
    png_set_user_limits(png, IMG_MAX_SIDE, IMG_MAX_SIDE);
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    int bit_depth = png_get_bit_depth(png, info), color = png_get_color_type(png, info);
    if ((int64_t)w * h > IMG_MAX_PIXELS) png_error(png, "more pixels than flynn's limit");
    /* tensorflow/core/lib/png/png_io.cc CommonInitDecode, in its order */
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    bool trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
    if (trns) png_set_tRNS_to_alpha(png);
    bool has_alpha = (color & PNG_COLOR_MASK_ALPHA) != 0;
    if ((ch & 1) == 0) {
        if (!has_alpha && !trns) png_set_add_alpha(png, 0xff, PNG_FILLER_AFTER);
    } else if (has_alpha || trns) {
        png_set_strip_alpha(png);
    }
    if (bit_depth > 8) png_set_strip_16(png);
    bool is_gray = !(color & PNG_COLOR_MASK_COLOR);
    if (ch <= 2 && !is_gray) png_set_rgb_to_gray(png, 1, 0.299, 0.587);
    if (ch > 2 && is_gray) png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if ((int)png_get_channels(png, info) != ch || png_get_rowbytes(png, info) != (size_t)w * ch)
        png_error(png, "unexpected channel layout after conversion");
    pix = fl_malloc((size_t)h * w * ch, "PNG pixels");
    rows = fl_malloc((size_t)h * sizeof *rows, "PNG rows");
    if (!pix || !rows) png_error(png, "out of memory");
    for (png_uint_32 y = 0; y < h; y++) rows[y] = pix + (size_t)y * w * ch;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    *out = pix;
    *ho = (int)h;
    *wo = (int)w;
    return FL_OK;
}

/* ------------------------------------------------------------ JPEG */

typedef struct jpeg_err { struct jpeg_error_mgr mgr; jmp_buf jb; char msg[JMSG_LENGTH_MAX]; } jpeg_err;

static void jpeg_on_error(j_common_ptr c) {
    jpeg_err *e = (jpeg_err *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jb, 1);
}
static void jpeg_on_message(j_common_ptr c, int level) { (void)c; (void)level; }

static fl_status decode_jpeg(const char *path, const unsigned char *data, size_t len, int ch, unsigned char **out,
                             int *ho, int *wo) {
    if (ch == 4)
        return fl_error(FL_ERR_UNSUPPORTED, "%s: a JPEG image has no alpha channel: color_mode rgba takes PNG images "
                        "only (Keras refuses it too: \"JPEG does not support 4 channels\")", path);
    struct jpeg_decompress_struct cinfo;
    jpeg_err err;
    unsigned char *volatile pix = NULL;
    cinfo.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = jpeg_on_error;
    err.mgr.emit_message = jpeg_on_message;
    err.msg[0] = 0;
    if (setjmp(err.jb)) {
        jpeg_destroy_decompress(&cinfo);
        free(pix);
        return fl_error(FL_ERR_FORMAT, "%s: not a readable JPEG image: %s", path, err.msg[0] ? err.msg : "libjpeg error");
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, (unsigned char *)data, (unsigned long)len);
    jpeg_read_header(&cinfo, TRUE);
    /* tensorflow/core/lib/jpeg/jpeg_mem.cc: fancy upsampling and tf.io.decode_image's default DCT, the
     * integer-fast one (JDCT_ISLOW differs from TensorFlow's pixels by up to 6; JDCT_IFAST gives the
     * same bytes, measured on tests/fixtures/data/images). CMYK is refused below. */
    cinfo.out_color_space = ch == 1 ? JCS_GRAYSCALE : JCS_RGB;
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
        snprintf(err.msg, sizeof err.msg, "CMYK JPEG images are not supported (convert it to RGB)");
        longjmp(err.jb, 1);
    }
    cinfo.do_fancy_upsampling = TRUE;
    cinfo.dct_method = JDCT_IFAST;
    if ((int64_t)cinfo.image_width * cinfo.image_height > IMG_MAX_PIXELS || cinfo.image_width > IMG_MAX_SIDE ||
        cinfo.image_height > IMG_MAX_SIDE) {
        snprintf(err.msg, sizeof err.msg, "%ux%u: more pixels than flynn's limit", cinfo.image_width, cinfo.image_height);
        longjmp(err.jb, 1);
    }
    jpeg_start_decompress(&cinfo);
    if (cinfo.output_components != ch) {
        snprintf(err.msg, sizeof err.msg, "decoded to %d channels, expected %d", cinfo.output_components, ch);
        longjmp(err.jb, 1);
    }
    const size_t stride = (size_t)cinfo.output_width * ch;
    pix = fl_malloc(stride * cinfo.output_height, "JPEG pixels");
    if (!pix) {
        snprintf(err.msg, sizeof err.msg, "out of memory");
        longjmp(err.jb, 1);
    }
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = pix + stride * cinfo.output_scanline;
        if (jpeg_read_scanlines(&cinfo, &row, 1) != 1) {
            snprintf(err.msg, sizeof err.msg, "no data at row %u", cinfo.output_scanline);
            longjmp(err.jb, 1);
        }
    }
    *ho = (int)cinfo.output_height;
    *wo = (int)cinfo.output_width;
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    *out = pix;
    return FL_OK;
}

bool fl_image_support(void) { return true; }

#define NO_IMAGES_WHY ""
#else
bool fl_image_support(void) { return false; }
#define NO_IMAGES_WHY                                                                                                   \
    "this flynn was built without image support (libjpeg-turbo and libpng were not found at build time: install "   \
    "libjpeg62-turbo-dev and libpng-dev, e.g. with scripts/setup.sh, and rebuild)"
#endif

/* Decodes by content -> uint8 (h, w, ch). */
static fl_status decode(const char *path, int ch, unsigned char **pix, int *h, int *w) {
    size_t len = 0;
    unsigned char *data = slurp(path, &len);
    if (!data) return fl_last_status();
    fl_status s;
    if (len >= 8 && memcmp(data, "\x89PNG\r\n\x1a\n", 8) == 0) {
#ifdef FLYNN_HAVE_IMAGES
        s = decode_png(path, data, len, ch, pix, h, w);
#else
        s = fl_error(FL_ERR_UNSUPPORTED, "%s: cannot read a PNG image: " NO_IMAGES_WHY, path);
#endif
    } else if (len >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) {
#ifdef FLYNN_HAVE_IMAGES
        s = decode_jpeg(path, data, len, ch, pix, h, w);
#else
        s = fl_error(FL_ERR_UNSUPPORTED, "%s: cannot read a JPEG image: " NO_IMAGES_WHY, path);
#endif
    } else if (len >= 2 && data[0] == 'B' && data[1] == 'M') {
        s = fl_error(FL_ERR_UNSUPPORTED, "%s: BMP images are not supported (flynn reads JPEG and PNG; convert it)", path);
    } else if (len >= 4 && memcmp(data, "GIF8", 4) == 0) {
        s = fl_error(FL_ERR_UNSUPPORTED, "%s: GIF images are not supported (flynn reads JPEG and PNG; convert it)", path);
    } else {
        s = fl_error(FL_ERR_FORMAT, "%s: not an image: %s; expected a JPEG (FF D8 FF) or PNG (89 50 4E 47) file", path,
                     len == 0 ? "the file is empty" : "unknown content");
    }
    free(data);
    return s;
}

/* ------------------------------------------------------------ resizing */

/* tensorflow/core/kernels/image/resize_bilinear_op.cc, half_pixel_centers */
typedef struct lerp_w { int64_t lo, hi; float t; } lerp_w;

static void weights(int64_t out, int64_t in, lerp_w *w) {
    const float scale = (float)in / (float)out;
    for (int64_t i = 0; i < out; i++) {
        const float v = ((float)i + 0.5f) * scale - 0.5f;
        const float f = floorf(v);
        w[i].lo = f > 0 ? (int64_t)f : 0;
        w[i].hi = (int64_t)ceilf(v) < in - 1 ? (int64_t)ceilf(v) : in - 1;
        w[i].t = v - f;
    }
}

static fl_status resize_into(const unsigned char *src, int h, int w, int ch, int oh, int ow, float *dst) {
    if (oh == h && ow == w) { /* the same size: the pixels as they are (what the weights below give, exactly) */
        const size_t n = (size_t)h * w * ch;
        for (size_t i = 0; i < n; i++) dst[i] = (float)src[i];
        return FL_OK;
    }
    lerp_w *ys = malloc((size_t)oh * sizeof *ys), *xs = malloc((size_t)ow * sizeof *xs);
    if (!ys || !xs) { free(ys); free(xs); return fl_error(FL_ERR_NOMEM, "out of memory for a resize"); }
    weights(oh, h, ys);
    weights(ow, w, xs);
    for (int y = 0; y < oh; y++) {
        const unsigned char *r0 = src + (size_t)ys[y].lo * w * ch, *r1 = src + (size_t)ys[y].hi * w * ch;
        for (int x = 0; x < ow; x++)
            for (int c = 0; c < ch; c++) {
                const float tl = r0[xs[x].lo * ch + c], tr = r0[xs[x].hi * ch + c];
                const float bl = r1[xs[x].lo * ch + c], br = r1[xs[x].hi * ch + c];
                const float top = tl + (tr - tl) * xs[x].t;
                const float bottom = bl + (br - bl) * xs[x].t;
                dst[((size_t)y * ow + x) * ch + c] = top + (bottom - top) * ys[y].t;
            }
    }
    free(ys);
    free(xs);
    return FL_OK;
}

fl_tensor *fl_load_image(const char *path, fl_color_mode mode, int height, int width) {
    if (!path) return fl_error_null(FL_ERR_INVALID_ARG, "fl_load_image: path is NULL");
    if (mode < FL_COLOR_RGB || mode > FL_COLOR_RGBA) return fl_error_null(FL_ERR_INVALID_ARG, "fl_load_image: unknown color mode %d", (int)mode);
    if (height < 0 || width < 0) return fl_error_null(FL_ERR_INVALID_ARG, "fl_load_image: size %dx%d, expected >= 0", height, width);
    const int ch = mode_channels(mode);
    unsigned char *pix = NULL;
    int h = 0, w = 0;
    if (decode(path, ch, &pix, &h, &w) != FL_OK) return NULL;
    int oh = height && width ? height : h, ow = height && width ? width : w;
    fl_tensor *t = fl_tensor_zeros(FL_FLOAT32, oh, ow, ch);
    if (t && resize_into(pix, h, w, ch, oh, ow, fl_tensor_data(t)) != FL_OK) { fl_tensor_free(t); t = NULL; }
    free(pix);
    return t;
}

/* ------------------------------------------------------------ the file list */

typedef struct entry { char *root, *name; int label; } entry;
typedef struct list { entry *e; int64_t n, cap; } list;

static bool image_name(const char *n) {
    static const char *ext[] = {".bmp", ".gif", ".jpeg", ".jpg", ".png"};
    size_t l = strlen(n);
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
        size_t k = strlen(ext[i]);
        if (l < k) continue;
        bool same = true;
        for (size_t j = 0; j < k && same; j++) same = tolower((unsigned char)n[l - k + j]) == ext[i][j];
        if (same) return true;
    }
    return false;
}

static char *join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    bool slash = la && a[la - 1] != '/';
    char *p = malloc(la + slash + lb + 1);
    if (!p) return NULL;
    memcpy(p, a, la);
    if (slash) p[la] = '/';
    memcpy(p + la + slash, b, lb + 1);
    return p;
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The sorted names in dir (without . and ..); NULL + error when unreadable. */
static char **list_dir(const char *dir, int64_t *n) {
    DIR *d = opendir(dir);
    if (!d) return fl_error_null(FL_ERR_IO, "%s: cannot read the folder: %s", dir, strerror(errno));
    char **v = NULL;
    int64_t k = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        if (k == cap) {
            cap = cap ? 2 * cap : 32;
            char **v2 = realloc(v, (size_t)cap * sizeof *v);
            if (!v2) break;
            v = v2;
        }
        if (!(v[k] = strdup(de->d_name))) break;
        k++;
    }
    bool oom = de != NULL;
    closedir(d);
    if (oom) {
        for (int64_t i = 0; i < k; i++) free(v[i]);
        free(v);
        return fl_error_null(FL_ERR_NOMEM, "%s: out of memory listing the folder", dir);
    }
    if (k) qsort(v, (size_t)k, sizeof *v, cmp_cstr);
    *n = k;
    return v ? v : calloc(1, sizeof *v);
}

static void free_names(char **v, int64_t n) {
    for (int64_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* os.walk(root) without following links: every image file with its folder. */
static fl_status walk(const char *root, int label, list *l, int depth) {
    if (depth > 64) return fl_error(FL_ERR_FORMAT, "%s: folders nested more than 64 deep", root);
    int64_t n = 0;
    char **names = list_dir(root, &n);
    if (!names) return fl_last_status();
    fl_status s = FL_OK;
    for (int64_t i = 0; i < n && s == FL_OK; i++) {
        char *p = join(root, names[i]);
        struct stat st, lst;
        if (!p) { s = fl_error(FL_ERR_NOMEM, "out of memory"); break; }
        bool isdir = stat(p, &st) == 0 && S_ISDIR(st.st_mode);
        bool islink = lstat(p, &lst) == 0 && S_ISLNK(lst.st_mode);
        if (isdir) {
            if (!islink) s = walk(p, label, l, depth + 1);
        } else if (image_name(names[i])) {
            if (l->n == l->cap) {
                int64_t c2 = l->cap ? 2 * l->cap : 256;
                entry *e2 = realloc(l->e, (size_t)c2 * sizeof *e2);
                if (!e2) { s = fl_error(FL_ERR_NOMEM, "out of memory listing images"); free(p); break; }
                l->e = e2;
                l->cap = c2;
            }
            entry *e = &l->e[l->n];
            e->root = strdup(root);
            e->name = strdup(names[i]);
            e->label = label;
            if (!e->root || !e->name) { free(e->root); free(e->name); s = fl_error(FL_ERR_NOMEM, "out of memory"); }
            else l->n++;
        }
        free(p);
    }
    free_names(names, n);
    return s;
}

static int cmp_entry(const void *a, const void *b) {
    const entry *x = a, *y = b;
    int c = strcmp(x->root, y->root);
    return c ? c : strcmp(x->name, y->name);
}

/* ------------------------------------------------------------ NumPy's legacy shuffle */

typedef struct mt19937 { uint32_t s[624]; int i; } mt19937;

static void mt_seed(mt19937 *m, uint32_t seed) {
    m->s[0] = seed;
    for (int i = 1; i < 624; i++) m->s[i] = 1812433253u * (m->s[i - 1] ^ (m->s[i - 1] >> 30)) + (uint32_t)i;
    m->i = 624;
}

static uint32_t mt_next(mt19937 *m) {
    if (m->i >= 624) {
        for (int k = 0; k < 624; k++) {
            uint32_t y = (m->s[k] & 0x80000000u) | (m->s[(k + 1) % 624] & 0x7fffffffu);
            m->s[k] = m->s[(k + 397) % 624] ^ (y >> 1) ^ (y & 1 ? 0x9908b0dfu : 0);
        }
        m->i = 0;
    }
    uint32_t y = m->s[m->i++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

/* numpy random_interval(max) for max < 2^32: masked rejection sampling */
static uint32_t mt_interval(mt19937 *m, uint32_t max) {
    if (max == 0) return 0;
    uint32_t mask = max;
    mask |= mask >> 1; mask |= mask >> 2; mask |= mask >> 4; mask |= mask >> 8; mask |= mask >> 16;
    uint32_t v;
    while ((v = mt_next(m) & mask) > max) {}
    return v;
}

/* RandomState(seed).shuffle(list) */
static void np_shuffle(entry *e, int64_t n, uint64_t seed) {
    mt19937 m;
    mt_seed(&m, (uint32_t)seed);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = mt_interval(&m, (uint32_t)i);
        entry t = e[i];
        e[i] = e[j];
        e[j] = t;
    }
}

/* ------------------------------------------------------------ the data set */

/* One image file -> float32 (oh, ow, ch) at dst: what fl_image_dataset_from_directory stores per sample. */
fl_status fl_image_read_into(const char *path, int ch, int oh, int ow, float *dst) {
    unsigned char *pix = NULL;
    int h = 0, w = 0;
    fl_status s = decode(path, ch, &pix, &h, &w);
    if (s == FL_OK) s = resize_into(pix, h, w, ch, oh, ow, dst);
    free(pix);
    return s;
}

/* Writes sample i's label (class `label`) into y: one value, or a one-hot row of `classes`. */
void fl_image_label_into(fl_label_mode lm, int classes, int label, float *y) {
    if (lm == FL_LABEL_CATEGORICAL) {
        for (int c = 0; c < classes; c++) y[c] = 0.0f;
        y[label] = 1.0f;
    } else {
        y[0] = (float)label;
    }
}

static fl_status load_part(const char *dir, const fl_image_index *ix, int part, fl_tensor **xo, fl_tensor **yo) {
    const int64_t n = ix->count[part], first = ix->first[part];
    const int oh = ix->height, ow = ix->width, ch = ix->channels, classes = ix->num_classes;
    const fl_label_mode lm = ix->label_mode;
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, n, oh, ow, ch);
    fl_tensor *y = lm == FL_LABEL_CATEGORICAL ? fl_tensor_zeros(FL_FLOAT32, n, classes)
                   : lm == FL_LABEL_BINARY    ? fl_tensor_zeros(FL_FLOAT32, n, 1)
                                              : fl_tensor_zeros(FL_FLOAT32, n);
    if (!x || !y) {
        fl_tensor_free(x);
        fl_tensor_free(y);
        return fl_error(FL_ERR_NOMEM, "%s: %lld images of %dx%dx%d do not fit in memory (%.1f GiB): stream them "
                        "instead (fl_image_stream_from_directory, flynn train --stream)", dir, (long long)n, oh, ow, ch,
                        (double)n * oh * ow * ch * 4 / (1 << 30));
    }
    float *xd = fl_tensor_data(x), *yd = fl_tensor_data(y);
    const int64_t yrow = lm == FL_LABEL_CATEGORICAL ? classes : 1;
    for (int64_t i = 0; i < n; i++) {
        fl_status s = fl_image_read_into(ix->paths[first + i], ch, oh, ow, xd + (size_t)i * oh * ow * ch);
        if (s != FL_OK) {
            fl_error_prefix("image %lld of %lld: ", (long long)(i + 1), (long long)n);
            fl_tensor_free(x);
            fl_tensor_free(y);
            return s;
        }
        fl_image_label_into(lm, classes, ix->labels[first + i], yd + i * yrow);
    }
    *xo = x;
    *yo = y;
    return FL_OK;
}

void fl_image_index_free(fl_image_index *ix) {
    if (!ix) return;
    for (int64_t i = 0; i < ix->n && ix->paths; i++) free(ix->paths[i]);
    for (int c = 0; c < ix->num_classes && ix->class_names; c++) free(ix->class_names[c]);
    free(ix->paths);
    free(ix->labels);
    free(ix->class_names);
    memset(ix, 0, sizeof *ix);
}

/* fl_image_index_build's arguments once checked, with Keras's defaults filled in. */
typedef struct index_args {
    int oh, ow, ch;
    int subset; /* 0 all, 1 training, 2 validation, 3 both */
} index_args;

/* Checks the arguments and fills in the defaults (256x256); every message names `who`. */
static fl_status check_index_args(const char *dir, const fl_image_dataset_args *a, const char *who, index_args *p) {
    if (!dir || !*dir) return fl_error(FL_ERR_INVALID_ARG, "%s: dir is NULL or empty", who);
    const int oh = a->image_size[0] ? a->image_size[0] : 256, ow = a->image_size[1] ? a->image_size[1] : 256;
    if (oh <= 0 || ow <= 0 || oh > IMG_MAX_SIDE || ow > IMG_MAX_SIDE)
        return fl_error(FL_ERR_INVALID_ARG, "%s: image_size %dx%d, expected 1..%d each", who, a->image_size[0],
                        a->image_size[1], IMG_MAX_SIDE);
    if (a->color_mode < FL_COLOR_RGB || a->color_mode > FL_COLOR_RGBA)
        return fl_error(FL_ERR_INVALID_ARG, "%s: unknown color_mode %d", who, (int)a->color_mode);
    if (a->label_mode < FL_LABEL_INT || a->label_mode > FL_LABEL_BINARY)
        return fl_error(FL_ERR_INVALID_ARG, "%s: unknown label_mode %d", who, (int)a->label_mode);
    if (!(a->validation_split >= 0 && a->validation_split < 1))
        return fl_error(FL_ERR_INVALID_ARG, "%s: validation_split %g, expected in [0, 1)", who,
                        (double)a->validation_split);
    int subset = 0;
    if (a->subset) {
        if (strcmp(a->subset, "training") == 0) subset = 1;
        else if (strcmp(a->subset, "validation") == 0) subset = 2;
        else if (strcmp(a->subset, "both") == 0) subset = 3;
        else return fl_error(FL_ERR_INVALID_ARG, "%s: subset '%s', expected \"training\", \"validation\" or \"both\"",
                             who, a->subset);
        if (a->validation_split <= 0)
            return fl_error(FL_ERR_INVALID_ARG, "%s: subset '%s' needs a validation_split (as Keras)", who, a->subset);
    } else if (a->validation_split > 0) {
        return fl_error(FL_ERR_INVALID_ARG, "%s: validation_split %g needs a subset (\"training\", \"validation\" or "
                        "\"both\"), as Keras", who, (double)a->validation_split);
    }
    if (a->no_labels && a->label_mode != FL_LABEL_INT)
        return fl_error(FL_ERR_INVALID_ARG, "%s: no_labels with a label_mode", who);
    p->oh = oh;
    p->ow = ow;
    p->ch = mode_channels(a->color_mode);
    p->subset = subset;
    return FL_OK;
}

/* Lists the images into l: one class per subfolder of dir (named in subs), or with no_labels dir itself, as Keras.
 * Frees subs; the class names go to ix even on failure, so that fl_image_index_free releases them. */
static fl_status collect_images(const char *dir, bool no_labels, char **subs, int64_t nsub, list *l,
                                fl_image_index *ix) {
    char **classes = calloc((size_t)(nsub ? nsub : 1), sizeof *classes);
    int ncls = 0;
    fl_status s = classes ? FL_OK : fl_error(FL_ERR_NOMEM, "out of memory");
    if (no_labels && s == FL_OK) s = walk(dir, 0, l, 0); /* Keras: index from the folder itself */
    for (int64_t i = 0; i < nsub && s == FL_OK && !no_labels; i++) {
        char *p = join(dir, subs[i]);
        struct stat st;
        if (!p) { s = fl_error(FL_ERR_NOMEM, "out of memory"); break; }
        if (subs[i][0] != '.' && stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            classes[ncls] = subs[i];
            subs[i] = NULL;
            s = walk(p, ncls, l, 0);
            ncls++;
        }
        free(p);
    }
    free_names(subs, nsub);
    ix->class_names = classes;
    ix->num_classes = ncls;
    return s;
}

/* Refuses a folder that gives nothing to load: no class folders, binary labels without 2 classes, no images. */
static fl_status check_found(const char *dir, const fl_image_dataset_args *a, int ncls, int64_t nimages) {
    if (ncls == 0 && !a->no_labels)
        return fl_error(FL_ERR_FORMAT, "%s: no class subfolders: expected one folder per class holding its images "
                        "(DIR/<class>/<image>.jpg|.png), as keras.utils.image_dataset_from_directory", dir);
    if (a->label_mode == FL_LABEL_BINARY && ncls != 2)
        return fl_error(FL_ERR_INVALID_ARG, "%s: label_mode binary needs exactly 2 classes, found %d subfolders", dir,
                        ncls);
    if (nimages == 0) {
        if (a->no_labels)
            return fl_error(FL_ERR_FORMAT, "%s: no images found; allowed formats: .bmp, .gif, .jpeg, .jpg, .png "
                            "(flynn decodes JPEG and PNG)", dir);
        return fl_error(FL_ERR_FORMAT, "%s: no images found in its %d class folder%s; allowed formats: .bmp, .gif, "
                        ".jpeg, .jpg, .png (flynn decodes JPEG and PNG)", dir, ncls, ncls == 1 ? "" : "s");
    }
    return FL_OK;
}

/* Puts the images in Keras's order: per class sorted by folder, then name, then shuffled unless no_shuffle. */
static void order_images(list *l, const fl_image_dataset_args *a) {
    /* each class's files are contiguous already */
    for (int64_t i = 0; i < l->n;) {
        int64_t j = i;
        while (j < l->n && l->e[j].label == l->e[i].label) j++;
        qsort(l->e + i, (size_t)(j - i), sizeof *l->e, cmp_entry);
        i = j;
    }
    if (!a->no_shuffle) np_shuffle(l->e, l->n, a->seed);
}

/* Splits n images into training and validation as Keras does and records the kept parts in ix. */
static fl_status split_parts(const char *dir, const fl_image_dataset_args *a, int subset, int64_t n,
                             fl_image_index *ix, int64_t *ntrain_out, int64_t *nval_out) {
    int64_t ntrain = n, nval = 0;
    /* Keras: int(validation_split * len(samples)) in float64; the float32 split is first taken back to the
     * decimal the user wrote (0.7f is 0.699999988: times 10 it would give 6, Python's 0.7 * 10 gives 7) */
    char split_text[32];
    snprintf(split_text, sizeof split_text, "%.7g", (double)a->validation_split);
    nval = (int64_t)(strtod(split_text, NULL) * (double)n);
    if (subset) {
        ntrain = n - nval;
        if ((subset != 2 && ntrain == 0) || (subset != 1 && nval == 0))
            return fl_error(FL_ERR_FORMAT, "%s: %lld images and validation_split %g leave no %s images", dir,
                            (long long)n, (double)a->validation_split,
                            subset != 2 && ntrain == 0 ? "training" : "validation");
    }
    ix->first[0] = subset == 2 ? ntrain : 0;
    ix->count[0] = subset == 2 ? nval : ntrain;
    ix->first[1] = ntrain;
    ix->count[1] = subset == 3 ? nval : 0;
    *ntrain_out = ntrain;
    *nval_out = nval;
    return FL_OK;
}

/* Copies each image's path (folder/name) and label into ix; ix->n counts those copied, for the cleanup. */
static fl_status fill_paths(const list *l, fl_image_index *ix) {
    ix->paths = calloc((size_t)l->n, sizeof *ix->paths);
    ix->labels = calloc((size_t)l->n, sizeof *ix->labels);
    if (!ix->paths || !ix->labels) return fl_error(FL_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < l->n; i++) {
        if (!(ix->paths[i] = join(l->e[i].root, l->e[i].name))) return fl_error(FL_ERR_NOMEM, "out of memory");
        ix->labels[i] = l->e[i].label;
        ix->n = i + 1;
    }
    return FL_OK;
}

/* Writes the summary line that is shown to the user: counts, classes, image size and the split. */
static void describe_index(fl_image_index *ix, const char *dir, int subset, int64_t n, int64_t ntrain, int64_t nval) {
    const int ncls = ix->num_classes, ch = ix->channels;
    char *d = ix->description;
    size_t dn = sizeof ix->description;
    if (ix->no_labels) snprintf(d, dn, "%s: %lld images (no labels)", dir, (long long)n);
    else snprintf(d, dn, "%s: %lld images in %d classes (", dir, (long long)n, ncls);
    for (int c = 0; c < ncls && strlen(d) < dn - 64; c++)
        snprintf(d + strlen(d), dn - strlen(d), "%s%d=%s", c ? ", " : "", c, ix->class_names[c]);
    snprintf(d + strlen(d), dn - strlen(d), "%s, %dx%d %s", ix->no_labels ? "" : ")", ix->height, ix->width,
             ch == 1 ? "grayscale" : ch == 3 ? "rgb" : "rgba");
    if (subset)
        snprintf(d + strlen(d), dn - strlen(d), "; %lld for training, %lld for validation%s", (long long)ntrain,
                 (long long)nval, subset == 1 ? " (training kept)" : subset == 2 ? " (validation kept)" : "");
}

fl_status fl_image_index_build(const char *dir, fl_image_dataset_args a, const char *who, fl_image_index *ix) {
    memset(ix, 0, sizeof *ix);
    index_args p = {0};
    FL_TRY(check_index_args(dir, &a, who, &p));
    int64_t nsub = 0;
    char **subs = list_dir(dir, &nsub);
    if (!subs) return fl_last_status();
    list l = {0};
    int64_t ntrain = 0, nval = 0;
    fl_status s = collect_images(dir, a.no_labels, subs, nsub, &l, ix);
    if (s == FL_OK) s = check_found(dir, &a, ix->num_classes, l.n);
    if (s == FL_OK) {
        order_images(&l, &a);
        s = split_parts(dir, &a, p.subset, l.n, ix, &ntrain, &nval);
    }
    if (s == FL_OK) s = fill_paths(&l, ix);
    if (s == FL_OK) {
        ix->height = p.oh;
        ix->width = p.ow;
        ix->channels = p.ch;
        ix->label_mode = a.label_mode;
        ix->no_labels = a.no_labels;
        describe_index(ix, dir, p.subset, l.n, ntrain, nval);
    }
    for (int64_t i = 0; i < l.n; i++) { free(l.e[i].root); free(l.e[i].name); }
    free(l.e);
    if (s != FL_OK) fl_image_index_free(ix);
    return s;
}

fl_status fl_image_dataset_from_directory_(const char *dir, fl_dataset *out, fl_image_dataset_args a) {
    if (!out) return fl_error(FL_ERR_INVALID_ARG, "fl_image_dataset_from_directory: out is NULL");
    memset(out, 0, sizeof *out);
    if (a.info) memset(a.info, 0, sizeof *a.info);
    fl_image_index ix;
    FL_TRY(fl_image_index_build(dir, a, "fl_image_dataset_from_directory", &ix));
    fl_status s = load_part(dir, &ix, 0, &out->x_train, &out->y_train);
    if (s == FL_OK && a.no_labels) { fl_tensor_free(out->y_train); out->y_train = NULL; }
    if (s == FL_OK && ix.count[1]) {
        s = load_part(dir, &ix, 1, &out->x_test, &out->y_test);
        if (s == FL_OK && a.no_labels) { fl_tensor_free(out->y_test); out->y_test = NULL; }
    }
    if (s == FL_OK && a.info) {
        fl_data_info *in = a.info;
        const int64_t np = ix.count[0] + ix.count[1];
        in->num_classes = ix.num_classes;
        in->class_names = ix.class_names;
        ix.class_names = NULL;
        ix.num_classes = 0;
        snprintf(in->description, sizeof in->description, "%s", ix.description);
        in->file_paths = calloc((size_t)np, sizeof *in->file_paths);
        if (!in->file_paths) s = fl_error(FL_ERR_NOMEM, "out of memory");
        for (int64_t i = 0; s == FL_OK && i < np; i++) {
            int64_t k = i < ix.count[0] ? ix.first[0] + i : ix.first[1] + (i - ix.count[0]);
            in->file_paths[i] = ix.paths[k];
            ix.paths[k] = NULL;
            in->num_paths = i + 1;
        }
    }
    if (s != FL_OK) { fl_dataset_free(out); if (a.info) fl_data_info_free(a.info); }
    fl_image_index_free(&ix);
    return s;
}
