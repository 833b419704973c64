/*
 * npy.c — fl_load_npy and fl_save_npy: NumPy's .npy array files.
 *
 * Reading takes format versions 1.0, 2.0 and 3.0: the magic "\x93NUMPY",
 * two version bytes, the header length (uint16 in 1.0, uint32 after), then
 * a Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': ...}
 * parsed here without Python: any key order, either quote, any whitespace,
 * trailing commas, and the "3L" integers of Python 2 era files. Element
 * types (little-endian; byte order is irrelevant for 1-byte types):
 *     f4 -> FL_FLOAT32          f8 -> FL_FLOAT32 (rounded; beyond range: inf)
 *     u1 -> FL_UINT8            b1 -> FL_UINT8 (0 or 1)
 *     i1, i2, u2, i4 -> FL_INT32
 *     u4, i8, u8 -> FL_INT32, an error if a value does not fit in int32
 * Refused, each with a message naming the file and the problem:
 * fortran_order True, big-endian data, other types (structured, object,
 * complex, strings, float16, ...), more than FL_MAX_DIMS dimensions, a bad
 * magic or version, a malformed header and data shorter than the shape.
 * Bytes after the data are ignored, as NumPy does.
 *
 * fl_npy_load_mem (io.h) reads the same from memory: an .npz entry;
 * fl_npy_read_layout and fl_npy_convert (io.h) give stream.c the header and
 * the element conversion, to read rows of a file larger than memory.
 *
 * Writing uses format 1.0 and the bytes np.save writes: descr '<f4', '<i4'
 * or '|u1' by dtype, the same header text and padding (the data starts at
 * a multiple of 64 bytes). It is atomic (src/io/atomic.c): the file is
 * written to an unnamed or "<path>.tmp.<pid>.<suffix>" file in the same
 * directory, fsync'ed, then renamed over <path>; on any failure the
 * temporary file is removed, <path> is untouched and the message names it. A new file gets mode 0666 & ~umask as np.save's
 * would; an existing file keeps its mode. The bytes come from fl_npy_emit
 * (io.h), which npz.c's writer feeds into its archive entries too.
 */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* open, fstat, mkstemp, fsync, ... under -std=c11 */
#endif
#include "flynn/flynn.h"
#include "core/error.h"
#include "core/tensor.h"
#include "io/io.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_ALIGN 64
#define NPY_MAX_HEADER (1u << 20) /* NumPy itself refuses > 10000 by default */
#define NPY_CHUNK_BYTES ((size_t)1 << 24)

/* ------------------------------------------------------------ byte order */

static bool host_is_le(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const unsigned char *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

static void put_le32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

/* ------------------------------------------------------------ types */

typedef enum npy_kind { K_F4, K_F8, K_U1, K_B1, K_I1, K_I2, K_U2, K_I4, K_U4, K_I8, K_U8 } npy_kind;

typedef struct npy_type {
    const char *code; /* descr without the byte-order character */
    size_t size;      /* bytes per element in the file */
    fl_dtype dtype;   /* what it loads as */
    npy_kind kind;
} npy_type;

static const npy_type npy_types[] = {
    {"f4", 4, FL_FLOAT32, K_F4}, {"f8", 8, FL_FLOAT32, K_F8}, {"u1", 1, FL_UINT8, K_U1},
    {"b1", 1, FL_UINT8, K_B1},   {"i1", 1, FL_INT32, K_I1},   {"i2", 2, FL_INT32, K_I2},
    {"u2", 2, FL_INT32, K_U2},   {"i4", 4, FL_INT32, K_I4},   {"u4", 4, FL_INT32, K_U4},
    {"i8", 8, FL_INT32, K_I8},   {"u8", 8, FL_INT32, K_U8},
};
#define NPY_SUPPORTED "'<f4', '<f8', '|u1', '|b1', '|i1', '<i2', '<u2', '<i4', '<u4', '<i8', '<u8'"

/* Converts n little-endian elements at src into dst (the tensor's dtype).
 * For same-size kinds src == dst. Returns the index of the first value that
 * does not fit in int32 (its text in bad), or -1. */
static int64_t convert_le(npy_kind k, const unsigned char *src, void *dst, size_t n, char *bad, size_t badn) {
    int32_t *di = dst;
    switch (k) {
    case K_U1:
        break;
    case K_B1: {
        unsigned char *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = src[i] != 0;
        break;
    }
    case K_F4:
    case K_I4:
        if (!host_is_le())
            for (size_t i = 0; i < n; i++) {
                uint32_t v = le32(src + 4 * i);
                memcpy((unsigned char *)dst + 4 * i, &v, 4);
            }
        break;
    case K_F8: {
        float *d = dst;
        for (size_t i = 0; i < n; i++) {
            uint64_t v = le64(src + 8 * i);
            double x;
            memcpy(&x, &v, sizeof x);
            d[i] = (float)x;
        }
        break;
    }
    case K_I1:
        for (size_t i = 0; i < n; i++) di[i] = src[i] >= 0x80 ? (int32_t)src[i] - 0x100 : (int32_t)src[i];
        break;
    case K_I2:
        for (size_t i = 0; i < n; i++) {
            uint32_t v = (uint32_t)src[2 * i] | (uint32_t)src[2 * i + 1] << 8;
            di[i] = v >= 0x8000 ? (int32_t)v - 0x10000 : (int32_t)v;
        }
        break;
    case K_U2:
        for (size_t i = 0; i < n; i++) di[i] = (int32_t)((uint32_t)src[2 * i] | (uint32_t)src[2 * i + 1] << 8);
        break;
    case K_U4:
        for (size_t i = 0; i < n; i++) {
            uint32_t v = le32(src + 4 * i);
            if (v > INT32_MAX) {
                snprintf(bad, badn, "%lu", (unsigned long)v);
                return (int64_t)i;
            }
            di[i] = (int32_t)v;
        }
        break;
    case K_I8:
        for (size_t i = 0; i < n; i++) {
            uint64_t u = le64(src + 8 * i);
            /* two's complement without implementation-defined casts */
            int64_t v = u > (uint64_t)INT64_MAX ? -(int64_t)(~u) - 1 : (int64_t)u;
            if (v > INT32_MAX || v < INT32_MIN) {
                snprintf(bad, badn, "%lld", (long long)v);
                return (int64_t)i;
            }
            di[i] = (int32_t)v;
        }
        break;
    case K_U8:
        for (size_t i = 0; i < n; i++) {
            uint64_t v = le64(src + 8 * i);
            if (v > INT32_MAX) {
                snprintf(bad, badn, "%llu", (unsigned long long)v);
                return (int64_t)i;
            }
            di[i] = (int32_t)v;
        }
        break;
    }
    return -1;
}

/* ------------------------------------------------------- header parsing */

typedef struct npy_header {
    char descr[48];
    bool fortran;
    int ndim;
    int64_t shape[FL_MAX_DIMS];
    bool has_descr, has_fortran, has_shape;
} npy_header;

typedef struct cursor {
    const char *path;
    const char *s; /* the header text (NUL-terminated) */
    size_t n, i;
} cursor;

/* The header as printable text for messages, at most ~160 characters. */
static const char *excerpt(const char *s, size_t n, char *buf, size_t bn) {
    size_t o = 0;
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == '\t')) n--;
    for (size_t i = 0; i < n && o + 5 < bn; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i >= 160) {
            o += (size_t)snprintf(buf + o, bn - o, "...");
            break;
        }
        if (c >= 0x20 && c < 0x7f) buf[o++] = (char)c;
        else o += (size_t)snprintf(buf + o, bn - o, "\\x%02x", c);
    }
    buf[o] = 0;
    return buf;
}

static fl_status bad_header(cursor *c, const char *what) {
    char ex[256];
    return fl_error(FL_ERR_FORMAT, "%s: malformed .npy header: %s at offset %zu in \"%s\"", c->path, what, c->i,
                    excerpt(c->s, c->n, ex, sizeof ex));
}

static void skip_ws(cursor *c) {
    while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' || c->s[c->i] == '\r'))
        c->i++;
}

static bool peek(cursor *c, char ch) { return c->i < c->n && c->s[c->i] == ch; }

/* A Python string literal ('...' or "...", optional u/b prefix) into out. */
static fl_status parse_string(cursor *c, char *out, size_t outn, const char *what) {
    char msg[96];
    if (c->i + 1 < c->n && (c->s[c->i] == 'u' || c->s[c->i] == 'b') && (c->s[c->i + 1] == '\'' || c->s[c->i + 1] == '"'))
        c->i++;
    if (!(peek(c, '\'') || peek(c, '"'))) {
        snprintf(msg, sizeof msg, "expected a quoted string for %s", what);
        return bad_header(c, msg);
    }
    char q = c->s[c->i++];
    size_t o = 0;
    while (c->i < c->n && c->s[c->i] != q) {
        char ch = c->s[c->i++];
        if (ch == '\\' && c->i < c->n) ch = c->s[c->i++];
        if (o + 1 >= outn) {
            snprintf(msg, sizeof msg, "%s is too long", what);
            return bad_header(c, msg);
        }
        out[o++] = ch;
    }
    if (c->i >= c->n) {
        snprintf(msg, sizeof msg, "unterminated string in %s", what);
        return bad_header(c, msg);
    }
    c->i++;
    out[o] = 0;
    return FL_OK;
}

static bool match_word(cursor *c, const char *w) {
    size_t k = strlen(w);
    if (c->n - c->i < k || strncmp(c->s + c->i, w, k) != 0) return false;
    if (c->i + k < c->n && (isalnum((unsigned char)c->s[c->i + k]) || c->s[c->i + k] == '_')) return false;
    c->i += k;
    return true;
}

/* (2, 3) / (5,) / () / [2, 3]; Python 2's "3L" accepted. */
static fl_status parse_shape(cursor *c, npy_header *h) {
    char close;
    if (peek(c, '(')) close = ')';
    else if (peek(c, '[')) close = ']';
    else return bad_header(c, "expected a tuple for 'shape'");
    c->i++;
    h->ndim = 0;
    for (;;) {
        skip_ws(c);
        if (peek(c, close)) break;
        if (c->i >= c->n || !isdigit((unsigned char)c->s[c->i])) {
            if (peek(c, '-')) return bad_header(c, "negative dimension in 'shape'");
            return bad_header(c, "expected a non-negative integer in 'shape'");
        }
        int64_t v = 0;
        while (c->i < c->n && isdigit((unsigned char)c->s[c->i])) {
            if (v > (INT64_MAX - 9) / 10) return bad_header(c, "dimension too large in 'shape'");
            v = v * 10 + (c->s[c->i++] - '0');
        }
        if (peek(c, 'L') || peek(c, 'l')) c->i++;
        if (h->ndim == FL_MAX_DIMS) {
            char sh[200];
            return fl_error(FL_ERR_UNSUPPORTED, "%s: too many dimensions: the .npy shape has more than %d (it begins %s)",
                            c->path, FL_MAX_DIMS, fl_shape_str(h->ndim, h->shape, sh, sizeof sh));
        }
        h->shape[h->ndim++] = v;
        skip_ws(c);
        if (peek(c, ',')) {
            c->i++;
            continue;
        }
        if (peek(c, close)) break;
        return bad_header(c, "expected ',' or the end of 'shape'");
    }
    c->i++;
    return FL_OK;
}

static fl_status parse_header(cursor *c, npy_header *h) {
    memset(h, 0, sizeof *h);
    skip_ws(c);
    if (!peek(c, '{')) return bad_header(c, "expected '{'");
    c->i++;
    for (;;) {
        char key[32];
        skip_ws(c);
        if (peek(c, '}')) break;
        FL_TRY(parse_string(c, key, sizeof key, "a key"));
        skip_ws(c);
        if (!peek(c, ':')) return bad_header(c, "expected ':' after a key");
        c->i++;
        skip_ws(c);
        if (strcmp(key, "descr") == 0) {
            if (h->has_descr) return bad_header(c, "duplicate key 'descr'");
            if (peek(c, '[') || peek(c, '('))
                return fl_error(FL_ERR_UNSUPPORTED,
                                "%s: structured arrays (descr is a list of fields) are not supported; "
                                "supported types: " NPY_SUPPORTED, c->path);
            FL_TRY(parse_string(c, h->descr, sizeof h->descr, "'descr'"));
            h->has_descr = true;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (h->has_fortran) return bad_header(c, "duplicate key 'fortran_order'");
            if (match_word(c, "True")) h->fortran = true;
            else if (match_word(c, "False")) h->fortran = false;
            else return bad_header(c, "'fortran_order' is not True or False");
            h->has_fortran = true;
        } else if (strcmp(key, "shape") == 0) {
            if (h->has_shape) return bad_header(c, "duplicate key 'shape'");
            FL_TRY(parse_shape(c, h));
            h->has_shape = true;
        } else {
            char msg[96];
            snprintf(msg, sizeof msg, "unexpected key '%s' (expected 'descr', 'fortran_order', 'shape')", key);
            return bad_header(c, msg);
        }
        skip_ws(c);
        if (peek(c, ',')) {
            c->i++;
            continue;
        }
        if (peek(c, '}')) break;
        return bad_header(c, "expected ',' or '}'");
    }
    c->i++;
    skip_ws(c);
    while (c->i < c->n && c->s[c->i] == 0) c->i++; /* some writers pad with NULs */
    skip_ws(c);
    if (c->i != c->n) return bad_header(c, "unexpected text after '}'");
    if (!h->has_descr) return bad_header(c, "missing key 'descr'");
    if (!h->has_fortran) return bad_header(c, "missing key 'fortran_order'");
    if (!h->has_shape) return bad_header(c, "missing key 'shape'");
    return FL_OK;
}

static const npy_type *resolve_descr(const char *path, const char *descr) {
    char order = descr[0];
    const char *code = descr;
    if (order == '<' || order == '>' || order == '|' || order == '=') code++;
    else order = 0;
    const npy_type *ty = NULL;
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
        if (strcmp(code, npy_types[i].code) == 0) ty = &npy_types[i];
    if (!ty && strcmp(code, "?") == 0) ty = &npy_types[3]; /* '?' is bool */
    if (!ty) {
        if (strcmp(code, "O") == 0)
            return fl_error_null(FL_ERR_UNSUPPORTED, "%s: object arrays ('%s', pickled Python objects) are not supported",
                                 path, descr);
        return fl_error_null(FL_ERR_UNSUPPORTED, "%s: unsupported dtype descr '%s'; supported: " NPY_SUPPORTED, path,
                             descr);
    }
    if (ty->size > 1) {
        if (order == '>')
            return fl_error_null(FL_ERR_UNSUPPORTED,
                                 "%s: big-endian data (descr '%s') is not supported; convert it with "
                                 "a.astype('<%s') before np.save",
                                 path, descr, ty->code);
        if (order != '<')
            return fl_error_null(FL_ERR_UNSUPPORTED,
                                 "%s: descr '%s' does not state little-endian byte order ('<%s' expected)", path,
                                 descr, ty->code);
    }
    return ty;
}

/* ------------------------------------------------------------ loading */

static fl_status read_exact(FILE *f, const char *path, void *buf, size_t n, size_t *got) {
    *got = fread(buf, 1, n, f);
    if (*got < n && ferror(f)) return fl_error(FL_ERR_IO, "%s: read error: %s", path, strerror(errno));
    return FL_OK;
}

fl_status fl_npy_read_layout(FILE *f, const char *path, int64_t file_size, fl_npy_layout *L) {
    unsigned char pre[12];
    size_t got;
    if (read_exact(f, path, pre, 10, &got) != FL_OK) return fl_last_status();
    if (got < NPY_MAGIC_LEN || memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) != 0) {
        if (got == 0) return fl_error(FL_ERR_FORMAT, "%s: file is empty, expected a .npy file", path);
        char found[40] = "";
        for (size_t i = 0; i < got && i < 6; i++) snprintf(found + 3 * i, sizeof found - 3 * i, "%02x ", pre[i]);
        size_t flen = strlen(found);
        if (flen > 0) found[flen - 1] = 0; /* drop the trailing space */
        const char *hint = "";
        if (got >= 4 && memcmp(pre, "PK\x03\x04", 4) == 0)
            hint = " (this is a zip archive: a .npz holds .npy files, unzip it first)";
        else if (got >= 2 && pre[0] == 0x1f && pre[1] == 0x8b)
            hint = " (this is gzip-compressed: gunzip it first)";
        return fl_error(FL_ERR_FORMAT, "%s: not a .npy file: bad magic %s, expected 93 4e 55 4d 50 59 (\"\\x93NUMPY\")%s",
                        path, found, hint);
    }
    if (got < 10) return fl_error(FL_ERR_FORMAT, "%s: truncated: file ends inside the .npy preamble (%zu bytes)", path, got);
    int major = pre[6], minor = pre[7];
    if (!((major == 1 || major == 2 || major == 3) && minor == 0))
        return fl_error(FL_ERR_UNSUPPORTED, "%s: .npy format version %d.%d is not supported (1.0, 2.0 and 3.0 are)",
                        path, major, minor);
    size_t hlen;
    int64_t pre_len = 10;
    if (major == 1) {
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    } else {
        if (read_exact(f, path, pre + 10, 2, &got) != FL_OK) return fl_last_status();
        if (got < 2) return fl_error(FL_ERR_FORMAT, "%s: truncated: file ends inside the .npy preamble", path);
        hlen = le32(pre + 8);
        pre_len = 12;
    }
    if (hlen > NPY_MAX_HEADER)
        return fl_error(FL_ERR_FORMAT, "%s: .npy header length %zu is absurd (more than %u bytes; corrupt file?)",
                        path, hlen, NPY_MAX_HEADER);
    char *text = fl_malloc(hlen + 1, ".npy header");
    if (!text) return fl_last_status();
    if (read_exact(f, path, text, hlen, &got) != FL_OK) {
        free(text);
        return fl_last_status();
    }
    if (got < hlen) {
        free(text);
        return fl_error(FL_ERR_FORMAT, "%s: truncated: file ends inside the .npy header (%zu of %zu bytes)", path,
                        got, hlen);
    }
    text[hlen] = 0;
    npy_header h;
    cursor c = {.path = path, .s = text, .n = hlen, .i = 0};
    fl_status st = parse_header(&c, &h);
    free(text);
    if (st != FL_OK) return fl_last_status();

    const npy_type *ty = resolve_descr(path, h.descr);
    if (!ty) return fl_last_status();
    if (h.fortran)
        return fl_error(FL_ERR_UNSUPPORTED,
                        "%s: fortran_order is True (column-major data) and is not supported; save a C-ordered "
                        "copy with np.save(path, np.ascontiguousarray(a))",
                        path);
    int64_t nelem = 1;
    for (int i = 0; i < h.ndim; i++) {
        if (h.shape[i] != 0 && nelem > (INT64_MAX / 8) / h.shape[i]) {
            char sh[160];
            return fl_error(FL_ERR_FORMAT, "%s: .npy shape %s is absurdly large (corrupt header?)", path,
                            fl_shape_str(h.ndim, h.shape, sh, sizeof sh));
        }
        nelem *= h.shape[i];
    }
    const int64_t data_bytes = nelem * (int64_t)ty->size;
    const int64_t offset = pre_len + (int64_t)hlen;
    if (file_size >= 0 && file_size - offset < data_bytes)
        return fl_error(FL_ERR_FORMAT, "%s: truncated: file ends after %lld of %lld bytes of data", path,
                        (long long)(file_size - offset), (long long)data_bytes);
    if ((uint64_t)data_bytes > SIZE_MAX / 2)
        return fl_error(FL_ERR_NOMEM, "%s: %lld bytes of data do not fit in memory", path, (long long)data_bytes);

    memset(L, 0, sizeof *L);
    L->ndim = h.ndim;
    memcpy(L->shape, h.shape, sizeof L->shape);
    L->nelem = nelem;
    L->offset = offset;
    L->elem_size = ty->size;
    L->dtype = ty->dtype;
    L->kind = (int)ty->kind;
    snprintf(L->descr, sizeof L->descr, "%s", h.descr);
    return FL_OK;
}

int64_t fl_npy_convert(int kind, const void *src, void *dst, size_t n, char *bad, size_t badn) {
    return convert_le((npy_kind)kind, src, dst, n, bad, badn);
}

static fl_tensor *load(FILE *f, const char *path, int64_t file_size) {
    fl_npy_layout L;
    if (fl_npy_read_layout(f, path, file_size, &L) != FL_OK) return NULL;
    const npy_type ty_ = {NULL, L.elem_size, L.dtype, (npy_kind)L.kind}, *ty = &ty_;
    const int64_t nelem = L.nelem, data_bytes = nelem * (int64_t)ty->size;
    size_t got;
    npy_header h;
    h.ndim = L.ndim;
    memcpy(h.shape, L.shape, sizeof h.shape);
    memcpy(h.descr, L.descr, sizeof h.descr);
    fl_tensor *t = fl_tensor_new(ty->dtype, h.ndim, h.shape);
    if (!t) {
        fl_error_prefix("%s: ", path);
        return NULL;
    }
    const size_t out_size = fl_dtype_size(ty->dtype);
    const bool in_place = out_size == ty->size;
    const size_t chunk = NPY_CHUNK_BYTES / ty->size;
    unsigned char *tmp = NULL;
    if (!in_place && nelem > 0) {
        size_t k = (size_t)nelem < chunk ? (size_t)nelem : chunk;
        tmp = fl_malloc(k * ty->size, ".npy read buffer");
        if (!tmp) {
            fl_error_prefix("%s: ", path);
            fl_tensor_free(t);
            return NULL;
        }
    }
    unsigned char *out = t->data;
    for (int64_t done = 0; done < nelem;) {
        size_t k = (size_t)(nelem - done) < chunk ? (size_t)(nelem - done) : chunk;
        unsigned char *dst = out + (size_t)done * out_size;
        unsigned char *buf = in_place ? dst : tmp;
        if (read_exact(f, path, buf, k * ty->size, &got) != FL_OK) goto fail;
        if (got < k * ty->size) {
            fl_error(FL_ERR_FORMAT, "%s: truncated: file ends after %lld of %lld bytes of data", path,
                     (long long)(done * (int64_t)ty->size + (int64_t)got), (long long)data_bytes);
            goto fail;
        }
        char bad[32];
        int64_t b = convert_le(ty->kind, buf, dst, k, bad, sizeof bad);
        if (b >= 0) {
            fl_error(FL_ERR_UNSUPPORTED, "%s: element %lld is %s, which does not fit in int32 ('%s' data loads as int32)",
                     path, (long long)(done + b), bad, h.descr);
            goto fail;
        }
        done += (int64_t)k;
    }
    free(tmp);
    return t;
fail:
    free(tmp);
    fl_tensor_free(t);
    return NULL;
}

fl_tensor *fl_load_npy(const char *path) {
    if (!path) return fl_error_null(FL_ERR_INVALID_ARG, "fl_load_npy: path is NULL");
    FILE *f = fopen(path, "rb");
    if (!f) return fl_error_null(FL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    int64_t size = -1;
    if (fstat(fileno(f), &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            fclose(f);
            return fl_error_null(FL_ERR_IO, "%s: is a directory, expected a .npy file", path);
        }
        if (S_ISREG(st.st_mode)) size = (int64_t)st.st_size;
    }
    fl_tensor *t = load(f, path, size);
    fclose(f);
    return t;
}

fl_tensor *fl_npy_load_mem(const void *data, size_t len, const char *name) {
    if (len == 0) return fl_error_null(FL_ERR_FORMAT, "%s: is empty, expected a .npy array", name);
    FILE *f = fmemopen((void *)data, len, "rb");
    if (!f) return fl_error_null(FL_ERR_NOMEM, "%s: cannot read it from memory: %s", name, strerror(errno));
    fl_tensor *t = load(f, name, (int64_t)len);
    fclose(f);
    return t;
}

/* ------------------------------------------------------------ saving */

/* Writes the .npy header np.save would write for t into buf; returns its
 * length (a multiple of 64), or 0 if it does not fit. */
static size_t make_header(const fl_tensor *t, const char *descr, char *buf, size_t bn) {
    char shape[FL_MAX_DIMS * 24 + 8];
    fl_shape_str(t->ndim, t->shape, shape, sizeof shape);
    char dict[sizeof shape + 128];
    int len = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    if (len < 0 || (size_t)len >= sizeof dict) return 0;
    if (t->ndim > 0) { /* NumPy leaves room to grow dimension 0 in place */
        char d0[24];
        int k = snprintf(d0, sizeof d0, "%lld", (long long)t->shape[0]);
        for (int i = k; i < 21 && (size_t)len + 1 < sizeof dict; i++) dict[len++] = ' ';
        dict[len] = 0;
    }
    size_t hlen = (size_t)len + 1; /* + '\n' */
    size_t pad = NPY_ALIGN - ((NPY_MAGIC_LEN + 4 + hlen) % NPY_ALIGN);
    size_t total = NPY_MAGIC_LEN + 4 + hlen + pad;
    if (total > bn || hlen + pad > 0xffff) return 0;
    memcpy(buf, NPY_MAGIC, NPY_MAGIC_LEN);
    buf[6] = 1;
    buf[7] = 0;
    buf[8] = (char)((hlen + pad) & 0xff);
    buf[9] = (char)((hlen + pad) >> 8);
    memcpy(buf + 10, dict, (size_t)len);
    memset(buf + 10 + len, ' ', pad);
    buf[total - 1] = '\n';
    return total;
}

/* t's data as np.save writes it (little-endian), to sink in pieces. */
static fl_status emit_data(const fl_tensor *t, fl_npy_sink sink, void *user) {
    size_t es = fl_dtype_size(t->dtype);
    size_t n = (size_t)fl_tensor_size(t);
    if (n == 0) return FL_OK;
    if (es == 1 || host_is_le()) return sink(user, t->data, n * es);
    unsigned char buf[4096]; /* big-endian host: write little-endian */
    const unsigned char *src = t->data;
    for (size_t i = 0; i < n;) {
        size_t k = n - i < sizeof buf / 4 ? n - i : sizeof buf / 4;
        for (size_t j = 0; j < k; j++) {
            uint32_t v;
            memcpy(&v, src + 4 * (i + j), 4);
            put_le32(buf + 4 * j, v);
        }
        FL_TRY(sink(user, buf, 4 * k));
        i += k;
    }
    return FL_OK;
}

fl_status fl_npy_emit(const fl_tensor *t, const char *who, fl_npy_sink sink, void *user) {
    const char *descr = t->dtype == FL_FLOAT32 ? "<f4" : t->dtype == FL_INT32 ? "<i4" : t->dtype == FL_UINT8 ? "|u1" : NULL;
    if (!descr) return fl_error(FL_ERR_INVALID_ARG, "%s: unknown dtype %d", who, (int)t->dtype);
    char header[512];
    size_t hsize = make_header(t, descr, header, sizeof header);
    if (!hsize) return fl_error(FL_ERR_INVALID_ARG, "%s: cannot build the header", who);
    FL_TRY(sink(user, header, hsize));
    return emit_data(t, sink, user);
}

static fl_status atomic_sink(void *f, const void *data, size_t len) { return fl_atomic_write(f, data, len); }

fl_status fl_save_npy(const fl_tensor *t, const char *path) {
    if (!t) return fl_error(FL_ERR_INVALID_ARG, "fl_save_npy: tensor is NULL");
    if (!path || !*path) return fl_error(FL_ERR_INVALID_ARG, "fl_save_npy: path is NULL or empty");
    if (t->dtype != FL_FLOAT32 && t->dtype != FL_INT32 && t->dtype != FL_UINT8)
        return fl_error(FL_ERR_INVALID_ARG, "fl_save_npy: %s: unknown dtype %d", path, (int)t->dtype);
    fl_atomic_file f;
    fl_status s = fl_atomic_open(&f, path);
    if (s == FL_OK) {
        if ((s = fl_npy_emit(t, path, atomic_sink, &f)) == FL_OK)
            s = fl_atomic_commit(&f); /* removes the temporary file itself on failure */
        else
            fl_atomic_abort(&f);
    }
    if (s != FL_OK) fl_error_prefix("fl_save_npy: ");
    return s;
}
