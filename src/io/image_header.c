/*
 * image_header.c — what an image file is, read from its header without
 * decoding it (as PIL's Image.open(path).size): fl_image_info for one file
 * and fl_image_directory_shape for a folder as
 * fl_image_dataset_from_directory lists it, so that a caller can take the
 * images' own size and colour mode (flynn train with a built-in model on a
 * folder of 28x28 grayscale PNGs) instead of Keras's 256x256 RGB default.
 *
 * PNG: the IHDR chunk (width, height, colour type: gray 1 channel, gray +
 * alpha 2, RGB and palette 3, RGBA 4). JPEG: the first start-of-frame
 * marker (SOF0-SOF15 but DHT, JPG and DAC), found by walking the segments'
 * lengths (an Exif thumbnail is an APP1 segment, skipped whole). Needs no
 * libpng or libjpeg: a build without them still says what a file is.
 */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "flynn/flynn.h"
#include "core/error.h"
#include "io/io.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned be16(const unsigned char *p) { return (unsigned)p[0] << 8 | p[1]; }
static unsigned long be32(const unsigned char *p) {
    return (unsigned long)p[0] << 24 | (unsigned long)p[1] << 16 | (unsigned long)p[2] << 8 | p[3];
}

static fl_status png_header(const char *path, FILE *f, int *h, int *w, int *ch) {
    unsigned char b[26]; /* the signature, then IHDR: length, "IHDR", width, height, depth, colour type */
    if (fseek(f, 0, SEEK_SET) != 0 || fread(b, 1, sizeof b, f) != sizeof b || memcmp(b + 12, "IHDR", 4) != 0)
        return fl_error(FL_ERR_FORMAT, "%s: not a readable PNG image: no IHDR chunk at its start", path);
    const unsigned long wd = be32(b + 16), ht = be32(b + 20);
    static const int channels[7] = {1, 0, 3, 3, 2, 0, 4}; /* by colour type; 1 and 5 are not PNG's */
    const int ct = b[25];
    if (wd == 0 || ht == 0 || wd > 65536 || ht > 65536 || ct > 6 || !channels[ct])
        return fl_error(FL_ERR_FORMAT, "%s: not a readable PNG image: IHDR gives %lux%lu, colour type %d", path, wd, ht,
                        ct);
    *w = (int)wd, *h = (int)ht, *ch = channels[ct];
    return FL_OK;
}

static fl_status jpeg_header(const char *path, FILE *f, int *h, int *w, int *ch) {
    unsigned char m[2], seg[8];
    if (fseek(f, 2, SEEK_SET) != 0) return fl_error(FL_ERR_IO, "%s: cannot seek", path);
    for (int guard = 0; guard < 4096; guard++) {
        if (fread(m, 1, 2, f) != 2) break;
        while (m[0] == 0xFF && m[1] == 0xFF) { /* fill bytes */
            m[1] = 0;
            if (fread(m + 1, 1, 1, f) != 1) break;
            m[0] = 0xFF;
        }
        if (m[0] != 0xFF) break;
        const int k = m[1];
        if (k == 0xD8 || (k >= 0xD0 && k <= 0xD7) || k == 0x01) continue; /* markers without a segment */
        if (k == 0xD9 || k == 0xDA) break;                                 /* the end, or the scan before a frame */
        unsigned char l[2];
        if (fread(l, 1, 2, f) != 2 || be16(l) < 2) break;
        const unsigned len = be16(l);
        if (k >= 0xC0 && k <= 0xCF && k != 0xC4 && k != 0xC8 && k != 0xCC) {
            if (len < 8 || fread(seg, 1, 6, f) != 6) break;
            const unsigned ht = be16(seg + 1), wd = be16(seg + 3), nc = seg[5];
            if (ht == 0 || wd == 0 || (nc != 1 && nc != 3 && nc != 4)) break;
            *h = (int)ht, *w = (int)wd, *ch = nc == 1 ? 1 : 3; /* CMYK (4) is refused when decoded */
            return FL_OK;
        }
        if (fseek(f, (long)len - 2, SEEK_CUR) != 0) break;
    }
    return fl_error(FL_ERR_FORMAT, "%s: not a readable JPEG image: no frame header (SOF marker) before its data", path);
}

fl_status fl_image_info(const char *path, int *height, int *width, int *channels) {
    if (!path || !height || !width || !channels)
        return fl_error(FL_ERR_INVALID_ARG, "fl_image_info: path, height, width and channels must not be NULL");
    FILE *f = fopen(path, "rb");
    if (!f) return fl_error(FL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    unsigned char sig[8] = {0};
    const size_t got = fread(sig, 1, sizeof sig, f);
    fl_status s;
    if (got == 8 && memcmp(sig, "\x89PNG\r\n\x1a\n", 8) == 0) s = png_header(path, f, height, width, channels);
    else if (got >= 3 && sig[0] == 0xFF && sig[1] == 0xD8 && sig[2] == 0xFF) s = jpeg_header(path, f, height, width, channels);
    else
        s = fl_error(FL_ERR_FORMAT, "%s: not a JPEG (FF D8 FF) or PNG (89 50 4E 47) image%s", path,
                     got == 0 ? ": the file is empty" : "");
    fclose(f);
    return s;
}

static fl_color_mode mode_of(int channels) {
    return channels <= 2 ? FL_COLOR_GRAYSCALE : channels == 4 ? FL_COLOR_RGBA : FL_COLOR_RGB;
}
static const char *mode_name(fl_color_mode m) {
    return m == FL_COLOR_GRAYSCALE ? "grayscale" : m == FL_COLOR_RGBA ? "rgba" : "rgb";
}

typedef struct shape_count { int h, w; fl_color_mode mode; int64_t n; } shape_count;

fl_status fl_image_directory_shape(const char *dir, int *height, int *width, fl_color_mode *mode, bool *agree,
                                   char *found, size_t found_len) {
    if (!height || !width || !mode || !agree)
        return fl_error(FL_ERR_INVALID_ARG, "fl_image_directory_shape: height, width, mode and agree must not be NULL");
    if (found && found_len) found[0] = 0;
    fl_image_index ix;
    FL_TRY(fl_image_index_build(dir, (fl_image_dataset_args){.no_shuffle = true}, "fl_image_directory_shape", &ix));
    enum { KINDS = 8 };
    shape_count seen[KINDS] = {{0, 0, FL_COLOR_RGB, 0}};
    int kinds = 0;
    int64_t other = 0;
    fl_status s = FL_OK;
    for (int64_t i = 0; i < ix.n && s == FL_OK; i++) {
        int h, w, c;
        if ((s = fl_image_info(ix.paths[i], &h, &w, &c)) != FL_OK) break;
        const fl_color_mode m = mode_of(c);
        int k = 0;
        while (k < kinds && !(seen[k].h == h && seen[k].w == w && seen[k].mode == m)) k++;
        if (k < kinds) seen[k].n++;
        else if (kinds < KINDS) seen[kinds++] = (shape_count){h, w, m, 1};
        else other++;
    }
    fl_image_index_free(&ix);
    if (s != FL_OK) return s;
    /* the commonest first (a stable order: insertion order among equals) */
    for (int a = 1; a < kinds; a++)
        for (int b = a; b > 0 && seen[b].n > seen[b - 1].n; b--) {
            shape_count t = seen[b];
            seen[b] = seen[b - 1];
            seen[b - 1] = t;
        }
    *height = seen[0].h, *width = seen[0].w, *mode = seen[0].mode;
    *agree = kinds == 1;
    if (found && found_len) {
        for (int k = 0; k < kinds; k++) {
            const size_t u = strlen(found);
            snprintf(found + u, found_len - u, "%s%lld %dx%d %s", k ? ", " : "", (long long)seen[k].n, seen[k].h,
                     seen[k].w, mode_name(seen[k].mode));
        }
        if (other) {
            const size_t u = strlen(found);
            snprintf(found + u, found_len - u, ", %lld of other sizes", (long long)other);
        }
    }
    return FL_OK;
}
