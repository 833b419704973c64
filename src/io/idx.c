/*
 * idx.c — fl_load_idx: reads IDX files (the format of MNIST and
 * Fashion-MNIST), raw or gzip-compressed, into a tensor; also the
 * row-limited reader that fl_load_mnist (data.c) uses.
 *
 * The format: two zero bytes, a type code byte, the number of dimensions
 * (one byte), that many big-endian uint32 sizes, then the elements,
 * big-endian and row-major. Type codes and the tensors they give:
 *     0x08 uint8   -> FL_UINT8       0x0C int32   -> FL_INT32
 *     0x09 int8    -> FL_INT32       0x0D float32 -> FL_FLOAT32
 *     0x0B int16   -> FL_INT32       0x0E float64 -> FL_FLOAT32 (rounded)
 *
 * Compression is detected from the content (the gzip magic 1f 8b), never
 * from the file name; zlib reads uncompressed files transparently.
 *
 * Policy, so that a damaged or mislabelled file never loads silently:
 *   - a dimension of 0, more than FL_MAX_DIMS dimensions, or more than 2^31
 *     elements is a corrupt header (FL_ERR_FORMAT);
 *   - data shorter than the header describes is an error ("file ends after
 *     N of M bytes of data");
 *   - data LONGER than the header describes is also an error (trailing
 *     garbage usually means a wrong header or a concatenated file); when
 *     only the first rows are read (fl_idx_load_rows with max_rows), the
 *     rest of a gzip stream is not decompressed and so not checked, while
 *     a raw file's size is always checked;
 *   - a gzip stream that is corrupt, fails its CRC or ends early is an error
 *     carrying zlib's message. Non-gzip bytes after a complete gzip member
 *     are ignored, as gzip(1) does.
 * Every message starts with the file's path.
 */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* open, fstat, mkstemp, fsync, ... under -std=c11 */
#endif
#include "flynn/flynn.h"
#include "core/error.h"
#include "core/tensor.h"
#include "io/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>


#define IDX_MAX_ELEMENTS ((int64_t)1 << 31)
#define IDX_CHUNK_BYTES ((size_t)1 << 24) /* bytes per gzread call */
/* Deflate cannot expand more than 1032:1; a gzip file smaller than
 * data/1032 cannot hold the data, so it is refused before allocating. */
#define DEFLATE_MAX_RATIO 1032

typedef struct idx_reader {
    const char *path;
    gzFile gz;
    bool compressed;
    int64_t file_size; /* -1 when not a regular file */
} idx_reader;

typedef struct idx_type {
    unsigned char code;
    const char *name;
    size_t size; /* bytes per element in the file */
    fl_dtype dtype;
} idx_type;

static const idx_type idx_types[] = {
    {0x08, "uint8", 1, FL_UINT8},   {0x09, "int8", 1, FL_INT32},
    {0x0B, "int16", 2, FL_INT32},   {0x0C, "int32", 4, FL_INT32},
    {0x0D, "float32", 4, FL_FLOAT32}, {0x0E, "float64", 8, FL_FLOAT32},
};

static const idx_type *idx_type_find(unsigned char code) {
    for (size_t i = 0; i < sizeof idx_types / sizeof idx_types[0]; i++)
        if (idx_types[i].code == code) return &idx_types[i];
    return NULL;
}

/* zlib prefixes its messages with the name given to gzdopen ("<fd:3>: ");
 * the path is already in ours, so drop that. */
static const char *zmsg(const char *m) {
    if (m && strncmp(m, "<fd:", 4) == 0) {
        const char *p = strstr(m, ">: ");
        if (p) return p + 3;
    }
    return m ? m : "unknown error";
}

static fl_status stream_error(idx_reader *r) {
    int e = Z_OK;
    const char *m = gzerror(r->gz, &e);
    if (e == Z_ERRNO) return fl_error(FL_ERR_IO, "%s: read error: %s", r->path, strerror(errno));
    if (e == Z_MEM_ERROR) return fl_error(FL_ERR_NOMEM, "%s: out of memory in zlib", r->path);
    if (r->compressed)
        return fl_error(FL_ERR_FORMAT, "%s: corrupt gzip stream (zlib: %s)", r->path, zmsg(m));
    return fl_error(FL_ERR_IO, "%s: read error (zlib: %s)", r->path, zmsg(m));
}

/* Reads up to n bytes. *got receives the count; a short count with FL_OK is
 * the end of the data, and *cut tells whether a gzip stream ended mid-way
 * (the compressed file is truncated) rather than cleanly. */
static fl_status rd(idx_reader *r, void *buf, size_t n, size_t *got, bool *cut) {
    unsigned char *p = buf;
    *got = 0;
    *cut = false;
    while (*got < n) {
        size_t want = n - *got;
        if (want > IDX_CHUNK_BYTES) want = IDX_CHUNK_BYTES;
        int k = gzread(r->gz, p + *got, (unsigned)want);
        if (k < 0) return stream_error(r);
        if (k == 0) break;
        *got += (size_t)k;
    }
    if (*got < n && r->compressed) {
        int e = Z_OK;
        gzerror(r->gz, &e);
        if (e == Z_BUF_ERROR) *cut = true;
        else if (e != Z_OK) return stream_error(r);
    }
    return FL_OK;
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Converts n big-endian elements of type `code` at src into host values at
 * dst. For 4-byte types src == dst (in place, element by element). */
static void convert_be(unsigned char code, const unsigned char *src, void *dst, size_t n) {
    switch (code) {
    case 0x09: {
        int32_t *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = src[i] >= 0x80 ? (int32_t)src[i] - 0x100 : (int32_t)src[i];
        break;
    }
    case 0x0B: {
        int32_t *d = dst;
        for (size_t i = 0; i < n; i++) {
            uint32_t v = (uint32_t)src[2 * i] << 8 | src[2 * i + 1];
            d[i] = v >= 0x8000 ? (int32_t)v - 0x10000 : (int32_t)v;
        }
        break;
    }
    case 0x0C:
    case 0x0D: { /* same bits, host order; memcpy keeps it alias-safe */
        unsigned char *d = dst;
        for (size_t i = 0; i < n; i++) {
            uint32_t v = be32(src + 4 * i);
            memcpy(d + 4 * i, &v, 4);
        }
        break;
    }
    case 0x0E: {
        float *d = dst;
        for (size_t i = 0; i < n; i++) {
            uint64_t v = (uint64_t)be32(src + 8 * i) << 32 | be32(src + 8 * i + 4);
            double x;
            memcpy(&x, &v, sizeof x);
            d[i] = (float)x;
        }
        break;
    }
    default: /* 0x08: bytes as they are */
        break;
    }
}

static void magic_str(const unsigned char m[4], char *buf, size_t n) {
    snprintf(buf, n, "%02x %02x %02x %02x", m[0], m[1], m[2], m[3]);
}

/* Reads and checks the header; fills *type, ndim and dims. */
static fl_status read_header(idx_reader *r, const idx_type **type, int *ndim, int64_t *dims) {
    unsigned char m[4];
    size_t got;
    bool cut;
    char ms[16];
    FL_TRY(rd(r, m, 4, &got, &cut));
    if (got == 0 && !cut)
        return fl_error(FL_ERR_FORMAT, "%s: %s is empty, expected an IDX header", r->path,
                        r->compressed ? "the decompressed data" : "the file");
    if (got < 4)
        return fl_error(FL_ERR_FORMAT, "%s: truncated: file ends after %zu bytes, inside the 4-byte IDX magic%s",
                        r->path, got, cut ? " (gzip stream ends early)" : "");
    magic_str(m, ms, sizeof ms);
    if (m[0] != 0 || m[1] != 0)
        return fl_error(FL_ERR_FORMAT,
                        "%s: not an IDX file: bad magic %s, expected 00 00 <type> <ndim> "
                        "(00 00 08 03 for uint8 images, 00 00 08 01 for uint8 labels)",
                        r->path, ms);
    *type = idx_type_find(m[2]);
    if (!*type)
        return fl_error(FL_ERR_FORMAT,
                        "%s: unsupported IDX type code 0x%02x (magic %s); supported: 0x08 uint8, 0x09 int8, "
                        "0x0b int16, 0x0c int32, 0x0d float32, 0x0e float64",
                        r->path, m[2], ms);
    *ndim = m[3];
    if (*ndim == 0)
        return fl_error(FL_ERR_FORMAT, "%s: IDX header has 0 dimensions (magic %s), expected at least 1",
                        r->path, ms);
    if (*ndim > FL_MAX_DIMS)
        return fl_error(FL_ERR_FORMAT, "%s: too many dimensions: IDX header has %d (magic %s), at most %d are supported",
                        r->path, *ndim, ms, FL_MAX_DIMS);

    unsigned char d[4 * FL_MAX_DIMS];
    size_t want = 4 * (size_t)*ndim;
    FL_TRY(rd(r, d, want, &got, &cut));
    if (got < want)
        return fl_error(FL_ERR_FORMAT, "%s: truncated: file ends inside the IDX header (%zu of %zu bytes of dimensions)%s",
                        r->path, got, want, cut ? " (gzip stream ends early)" : "");
    int64_t n = 1;
    for (int i = 0; i < *ndim; i++) dims[i] = be32(d + 4 * i);
    for (int i = 0; i < *ndim; i++) {
        char sh[160];
        if (dims[i] == 0)
            return fl_error(FL_ERR_FORMAT, "%s: IDX header shape %s has a dimension of 0 (dimension %d)", r->path,
                            fl_shape_str(*ndim, dims, sh, sizeof sh), i);
        if (dims[i] > IDX_MAX_ELEMENTS / n)
            return fl_error(FL_ERR_FORMAT,
                            "%s: IDX header shape %s has more than 2^31 elements, an absurd size (corrupt header?)",
                            r->path, fl_shape_str(*ndim, dims, sh, sizeof sh));
        n *= dims[i];
    }
    return FL_OK;
}

/* What one load reads: the header's type and shape, the shape of the tensor made (fewer rows with max_rows), and
 * the byte counts the size checks and messages use. */
typedef struct idx_plan {
    const idx_type *type;
    int ndim;
    int64_t dims[FL_MAX_DIMS], shape[FL_MAX_DIMS];
    bool all_rows;
    int64_t header, full_bytes, nelem, read_bytes;
} idx_plan;

/* Reads the header and works out the plan; *total_rows (when given) gets the file's row count. */
static fl_status plan_load(idx_reader *r, int64_t max_rows, int64_t *total_rows, idx_plan *p) {
    p->type = NULL;
    p->ndim = 0;
    FL_TRY(read_header(r, &p->type, &p->ndim, p->dims));
    if (total_rows) *total_rows = p->dims[0];
    memcpy(p->shape, p->dims, sizeof p->shape);
    p->all_rows = !(max_rows > 0 && max_rows < p->dims[0]);
    if (!p->all_rows) p->shape[0] = max_rows;
    p->header = 4 + 4 * (int64_t)p->ndim;
    p->full_bytes = fl_shape_prod(p->ndim, p->dims) * (int64_t)p->type->size;
    p->nelem = fl_shape_prod(p->ndim, p->shape);
    p->read_bytes = p->nelem * (int64_t)p->type->size;
    return FL_OK;
}

/* Checks the file's size against the header before allocating: a raw file must match exactly, a gzip file must
 * be large enough to inflate to the data. */
static fl_status check_file_size(const idx_reader *r, const idx_plan *p) {
    if (r->file_size >= 0 && !r->compressed) {
        if (r->file_size < p->header + p->full_bytes)
            return fl_error(FL_ERR_FORMAT, "%s: truncated: file ends after %lld of %lld bytes of data",
                            r->path, (long long)(r->file_size - p->header), (long long)p->full_bytes);
        if (r->file_size > p->header + p->full_bytes)
            return fl_error(FL_ERR_FORMAT,
                            "%s: %lld bytes of trailing data after the %lld bytes of data the IDX header "
                            "describes (wrong header or not an IDX file?)",
                            r->path, (long long)(r->file_size - p->header - p->full_bytes), (long long)p->full_bytes);
    }
    if (r->file_size >= 0 && r->compressed &&
        (p->header + p->read_bytes) / DEFLATE_MAX_RATIO > r->file_size + 64)
        return fl_error(FL_ERR_FORMAT,
                        "%s: truncated: a gzip file of %lld bytes cannot hold the %lld bytes of data its IDX "
                        "header describes",
                        r->path, (long long)r->file_size, (long long)p->read_bytes);
    return FL_OK;
}

/* Reads the elements into t in chunks, converting from big-endian (in place when the sizes match, else through
 * a bounded buffer); data that ends early is an error. */
static fl_status read_elements(idx_reader *r, const idx_plan *p, fl_tensor *t) {
    const idx_type *type = p->type;
    const int64_t nelem = p->nelem;
    const size_t out_size = fl_dtype_size(type->dtype);
    const bool in_place = type->size == out_size;
    const size_t chunk = IDX_CHUNK_BYTES / type->size; /* elements per step */
    unsigned char *tmp = NULL;
    if (!in_place) {
        size_t k = (size_t)nelem < chunk ? (size_t)nelem : chunk;
        tmp = fl_malloc(k * type->size, "IDX read buffer");
        if (!tmp) {
            fl_error_prefix("%s: ", r->path);
            return FL_ERR_NOMEM;
        }
    }
    unsigned char *out = t->data;
    fl_status s = FL_OK;
    for (int64_t done = 0; done < nelem;) {
        size_t k = (size_t)(nelem - done) < chunk ? (size_t)(nelem - done) : chunk;
        unsigned char *dst = out + (size_t)done * out_size;
        unsigned char *buf = in_place ? dst : tmp;
        size_t got;
        bool cut;
        if ((s = rd(r, buf, k * type->size, &got, &cut)) != FL_OK) break;
        if (got < k * type->size) {
            long long have = (long long)(done * (int64_t)type->size + (int64_t)got);
            if (cut)
                s = fl_error(FL_ERR_FORMAT,
                             "%s: truncated: the gzip stream ends early (zlib: unexpected end of file) after %lld "
                             "of %lld bytes of data",
                             r->path, have, (long long)p->full_bytes);
            else
                s = fl_error(FL_ERR_FORMAT, "%s: truncated: file ends after %lld of %lld bytes of data", r->path,
                             have, (long long)p->full_bytes);
            break;
        }
        convert_be(type->code, buf, dst, k);
        done += (int64_t)k;
    }
    free(tmp);
    return s;
}

/* After a whole gzip file, drives zlib to the end of the stream: checks the CRC and the length in the gzip
 * trailer, and finds data beyond what the header says. */
static fl_status check_stream_end(idx_reader *r, const idx_plan *p) {
    unsigned char probe[1];
    size_t got;
    bool cut;
    FL_TRY(rd(r, probe, 1, &got, &cut));
    if (got)
        return fl_error(FL_ERR_FORMAT,
                        "%s: trailing data: the decompressed stream is longer than the %lld bytes of data the "
                        "IDX header describes (wrong header or not an IDX file?)",
                        r->path, (long long)p->full_bytes);
    if (cut)
        return fl_error(FL_ERR_FORMAT,
                        "%s: truncated: the gzip stream ends before its trailer (zlib: unexpected end of file)",
                        r->path);
    return FL_OK;
}

static fl_tensor *load(idx_reader *r, int64_t max_rows, int64_t *total_rows) {
    idx_plan p;
    if (plan_load(r, max_rows, total_rows, &p) != FL_OK) return NULL;
    if (check_file_size(r, &p) != FL_OK) return NULL;
    fl_tensor *t = fl_tensor_new(p.type->dtype, p.ndim, p.shape);
    if (!t) {
        fl_error_prefix("%s: ", r->path);
        return NULL;
    }
    if (read_elements(r, &p, t) != FL_OK || (p.all_rows && r->compressed && check_stream_end(r, &p) != FL_OK)) {
        fl_tensor_free(t);
        return NULL;
    }
    return t;
}

fl_tensor *fl_idx_load_rows(const char *path, int64_t max_rows, int64_t *total_rows) {
    if (!path) return fl_error_null(FL_ERR_INVALID_ARG, "fl_load_idx: path is NULL");
    if (max_rows < 0)
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_load_idx: %s: max_rows is %lld, expected >= 0", path,
                             (long long)max_rows);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fl_error_null(FL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return fl_error_null(FL_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return fl_error_null(FL_ERR_IO, "%s: is a directory, expected an IDX file", path);
    }
    idx_reader r = {.path = path, .file_size = S_ISREG(st.st_mode) ? (int64_t)st.st_size : -1};
    r.gz = gzdopen(fd, "rb");
    if (!r.gz) {
        close(fd);
        return fl_error_null(FL_ERR_NOMEM, "%s: cannot start zlib reader (out of memory)", path);
    }
    gzbuffer(r.gz, 1u << 17);
    /* zlib looks at the first bytes now: gzip iff they are 1f 8b. */
    r.compressed = !gzdirect(r.gz);
    fl_tensor *t = load(&r, max_rows, total_rows);
    gzclose_r(r.gz); /* closes fd; read-side close cannot lose data */
    return t;
}

fl_tensor *fl_load_idx(const char *path) { return fl_idx_load_rows(path, 0, NULL); }
