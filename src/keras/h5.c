/*
 * h5.c — flynn's HDF5 reader and writer on memory images (see h5.h for the
 * subset; docs/keras-format.md for the limits). Structures follow the HDF5
 * file format specification 3.0; every field is read through a cursor that
 * refuses to leave its region, so a corrupt file is a message, never a read
 * outside the image.
 */
#include "keras/h5.h"
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#define UNDEF UINT64_MAX

/* ------------------------------------------------------------ checksum */

#define ROT(x, k) (((x) << (k)) | ((x) >> (32 - (k))))

uint32_t fl_h5_lookup3(const void *data, size_t len, uint32_t init) {
    const uint8_t *k = data;
    uint32_t a, b, c;
    a = b = c = 0xdeadbeef + (uint32_t)len + init;
    while (len > 12) {
        a += k[0] + ((uint32_t)k[1] << 8) + ((uint32_t)k[2] << 16) + ((uint32_t)k[3] << 24);
        b += k[4] + ((uint32_t)k[5] << 8) + ((uint32_t)k[6] << 16) + ((uint32_t)k[7] << 24);
        c += k[8] + ((uint32_t)k[9] << 8) + ((uint32_t)k[10] << 16) + ((uint32_t)k[11] << 24);
        a -= c; a ^= ROT(c, 4); c += b;
        b -= a; b ^= ROT(a, 6); a += c;
        c -= b; c ^= ROT(b, 8); b += a;
        a -= c; a ^= ROT(c, 16); c += b;
        b -= a; b ^= ROT(a, 19); a += c;
        c -= b; c ^= ROT(b, 4); b += a;
        len -= 12;
        k += 12;
    }
    switch (len) {
    case 12: c += (uint32_t)k[11] << 24; /* fall through */
    case 11: c += (uint32_t)k[10] << 16; /* fall through */
    case 10: c += (uint32_t)k[9] << 8; /* fall through */
    case 9: c += k[8]; /* fall through */
    case 8: b += (uint32_t)k[7] << 24; /* fall through */
    case 7: b += (uint32_t)k[6] << 16; /* fall through */
    case 6: b += (uint32_t)k[5] << 8; /* fall through */
    case 5: b += k[4]; /* fall through */
    case 4: a += (uint32_t)k[3] << 24; /* fall through */
    case 3: a += (uint32_t)k[2] << 16; /* fall through */
    case 2: a += (uint32_t)k[1] << 8; /* fall through */
    case 1: a += k[0]; break;
    case 0: return c;
    }
    c ^= b; c -= ROT(b, 14);
    a ^= c; a -= ROT(c, 11);
    b ^= a; b -= ROT(a, 25);
    c ^= b; c -= ROT(b, 16);
    a ^= c; a -= ROT(c, 4);
    b ^= a; b -= ROT(a, 14);
    c ^= b; c -= ROT(b, 24);
    return c;
}

/* ------------------------------------------------------------ the image */

/* A contiguous dataset whose pages went back to the system once read (fl_h5_release_read). */
typedef struct h5_released {
    uint64_t lo, hi;  /* its data's extent in the image */
    uint64_t obj;     /* its object header: the same dataset read again (a second hard link) */
    const void *out;  /* where the first read put it */
    uint64_t bytes;
    bool as_i64;
} h5_released;

struct fl_h5 {
    const uint8_t *p;
    size_t len;
    uint64_t base; /* addresses are relative to it */
    int so, sl;    /* sizes of offsets and lengths */
    uint64_t root;
    bool release;  /* fl_h5_release_read */
    h5_released *rel;
    int nrel, caprel;
    char src[512];
};

const char *fl_h5_src(const fl_h5 *f) { return f->src; }
uint64_t fl_h5_root(const fl_h5 *f) { return f->root; }

FL_PRINTF(4, 5) static int fail(fl_h5 *f, fl_status s, const char *path, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (path && *path) fl_error(s, "HDF5: %s: %s: %s", f->src, path, msg);
    else fl_error(s, "HDF5: %s: %s", f->src, msg);
    return -1;
}
#define BAD(f, path, ...) fail(f, FL_ERR_FORMAT, path, __VA_ARGS__)
#define UNSUP(f, path, ...) fail(f, FL_ERR_UNSUPPORTED, path, __VA_ARGS__)

/* The n bytes at file address addr, or NULL when they are not all in the image. */
static const uint8_t *at(const fl_h5 *f, uint64_t addr, uint64_t n) {
    if (addr == UNDEF || addr > (uint64_t)f->len || f->base > (uint64_t)f->len - addr) return NULL;
    uint64_t off = f->base + addr;
    if (n > (uint64_t)f->len - off) return NULL;
    return f->p + off;
}

/* A cursor over one region; reading past its end sets bad and yields zeros. */
typedef struct cur { const uint8_t *p, *end; bool bad; int so, sl; } cur;

static cur cur_at(const fl_h5 *f, uint64_t addr, uint64_t n) {
    const uint8_t *p = at(f, addr, n);
    cur c = {p, p ? p + n : NULL, p == NULL, f->so, f->sl};
    return c;
}
static cur cur_mem(const uint8_t *p, size_t n, const fl_h5 *f) {
    cur c = {p, p + n, false, f->so, f->sl};
    return c;
}
/* From addr to the end of the image. */
static cur cur_from(const fl_h5 *f, uint64_t addr) {
    const uint8_t *p = at(f, addr, 0);
    cur c = {p, p ? f->p + f->len : NULL, p == NULL, f->so, f->sl};
    return c;
}
static size_t left(const cur *c) { return c->bad ? 0 : (size_t)(c->end - c->p); }
static const uint8_t *take(cur *c, uint64_t n) {
    if (c->bad || n > (uint64_t)(c->end - c->p)) { c->bad = true; return NULL; }
    const uint8_t *r = c->p;
    c->p += n;
    return r;
}
static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint64_t un(cur *c, int n) {
    const uint8_t *p = take(c, (uint64_t)n);
    return p ? le(p, n) : 0;
}
static unsigned u8(cur *c) { return (unsigned)un(c, 1); }
static unsigned u16(cur *c) { return (unsigned)un(c, 2); }
static uint32_t u32(cur *c) { return (uint32_t)un(c, 4); }
static uint64_t addr_of(cur *c) {
    uint64_t v = un(c, c->so);
    if (c->so < 8 && v == (((uint64_t)1 << (8 * c->so)) - 1)) v = UNDEF;
    return v;
}
static uint64_t len_of(cur *c) { return un(c, c->sl); }
static bool sig(cur *c, const char *s) {
    const uint8_t *p = take(c, 4);
    return p && memcmp(p, s, 4) == 0;
}
static int ilog2(uint64_t v) {
    int r = -1;
    while (v) { v >>= 1; r++; }
    return r;
}

/* Checks the lookup3 checksum stored right after the n bytes at p. */
static bool sum_ok(const uint8_t *p, size_t n) { return fl_h5_lookup3(p, n, 0) == (uint32_t)le(p + n, 4); }

fl_h5 *fl_h5_read_open(const void *data, size_t len, const char *src) {
    fl_h5 *f = fl_calloc(1, sizeof *f, "HDF5 reader");
    if (!f) return NULL;
    f->p = data;
    f->len = data ? len : 0;
    snprintf(f->src, sizeof f->src, "%s", src ? src : "(memory)");
    /* the superblock is at 0, 512, 1024, 2048, ... */
    size_t sb = SIZE_MAX;
    for (size_t o = 0; o + 8 <= f->len; o = o ? o * 2 : 512)
        if (memcmp(f->p + o, "\x89HDF\r\n\x1a\n", 8) == 0) { sb = o; break; }
    if (sb == SIZE_MAX) { BAD(f, NULL, "no HDF5 signature: not an HDF5 file"); free(f); return NULL; }
    cur c = cur_mem(f->p + sb + 8, f->len - sb - 8, f);
    unsigned ver = u8(&c);
    if (ver == 0 || ver == 1) {
        take(&c, 4); /* free-space, root group, reserved, shared header versions */
        f->so = (int)u8(&c);
        f->sl = (int)u8(&c);
        take(&c, 1);
        c.so = f->so;
        c.sl = f->sl;
        if (!c.bad && (f->so != 2 && f->so != 4 && f->so != 8)) goto badsize;
        if (!c.bad && (f->sl != 2 && f->sl != 4 && f->sl != 8)) goto badsize;
        take(&c, 4 + 4); /* group K's, consistency flags */
        if (ver == 1) take(&c, 4);
        f->base = addr_of(&c);
        addr_of(&c); /* free space */
        addr_of(&c); /* end of file */
        addr_of(&c); /* driver info */
        addr_of(&c); /* root symbol table entry: link name offset */
        f->root = addr_of(&c);
        take(&c, 8 + 16);
    } else if (ver == 2 || ver == 3) {
        f->so = (int)u8(&c);
        f->sl = (int)u8(&c);
        c.so = f->so;
        c.sl = f->sl;
        if (!c.bad && (f->so != 2 && f->so != 4 && f->so != 8)) goto badsize;
        if (!c.bad && (f->sl != 2 && f->sl != 4 && f->sl != 8)) goto badsize;
        u8(&c);
        f->base = addr_of(&c);
        addr_of(&c); /* superblock extension */
        addr_of(&c); /* end of file */
        f->root = addr_of(&c);
        if (!c.bad && left(&c) >= 4 && !sum_ok(f->p + sb, (size_t)(c.p - (f->p + sb)))) {
            BAD(f, NULL, "superblock checksum mismatch");
            free(f);
            return NULL;
        }
        take(&c, 4);
    } else {
        UNSUP(f, NULL, "superblock version %u is not supported (0-3 are)", ver);
        free(f);
        return NULL;
    }
    if (c.bad) { BAD(f, NULL, "truncated superblock (%zu bytes)", f->len); free(f); return NULL; }
    if (f->base == UNDEF) f->base = 0;
    f->base += sb == 0 || f->base >= sb ? 0 : sb; /* a user block: addresses are from the superblock */
    if (!at(f, f->root, 4)) { BAD(f, NULL, "the root group's address %llu is outside the file", (unsigned long long)f->root); free(f); return NULL; }
    return f;
badsize:
    UNSUP(f, NULL, "offset/length sizes %d/%d are not supported (2, 4 or 8)", f->so, f->sl);
    free(f);
    return NULL;
}

void fl_h5_read_close(fl_h5 *f) {
    if (f) free(f->rel);
    free(f);
}

void fl_h5_release_read(fl_h5 *f) { f->release = true; }

/* Large datasets only: a page-sized syscall is not worth it, and the list stays short (at most the image's MiBs).
 * The fuzz build takes every dataset into the list (and gives back whatever whole pages one spans), so that the
 * fuzzers' small files take this path. */
#ifdef FLYNN_FUZZ_BUILD
#define H5_RELEASE_MIN ((uint64_t)1)
#else
#define H5_RELEASE_MIN ((uint64_t)1 << 20)
#endif

/* Before a read of `bytes` at [lo, hi) for dataset obj, with datasets given back: 1 to read it from the image, 0
 * when it was copied from the first read of the same dataset, -1 (message) when its bytes overlap a dataset given
 * back (no file h5py writes has that; its bytes are gone). */
static int released_check(fl_h5 *f, const fl_h5_dataset *d, uint64_t lo, uint64_t hi, bool as_i64, void *out) {
    for (int i = 0; i < f->nrel; i++) {
        const h5_released *r = &f->rel[i];
        if (r->obj == d->addr && r->lo == lo && r->hi == hi && r->as_i64 == as_i64 &&
            r->bytes == d->npoints * (as_i64 ? 8 : 4)) {
            memcpy(out, r->out, (size_t)r->bytes);
            return 0;
        }
        if (lo < r->hi && r->lo < hi)
            return BAD(f, d->path, "its data (%llu bytes at %llu) overlaps another dataset's", (unsigned long long)(hi - lo),
                       (unsigned long long)lo);
    }
    return 1;
}

/* After a read of a contiguous dataset's data at p: its whole pages go back to the system (MADV_DONTNEED: the
 * image is the caller's own anonymous memory, fl_h5_release_read), and the read is remembered. */
static void release_data(fl_h5 *f, const fl_h5_dataset *d, const uint8_t *p, uint64_t lo, uint64_t hi, bool as_i64,
                         const void *out) {
    if (hi - lo < H5_RELEASE_MIN) return;
    if (f->nrel == f->caprel) {
        int cap = f->caprel ? 2 * f->caprel : 64;
        h5_released *n = realloc(f->rel, (size_t)cap * sizeof *n);
        if (!n) return; /* not given back: only memory is lost, nothing read */
        f->rel = n;
        f->caprel = cap;
    }
    f->rel[f->nrel++] = (h5_released){lo, hi, d->addr, out, d->npoints * (as_i64 ? 8 : 4), as_i64};
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1), b = ((uintptr_t)p + (hi - lo)) & ~(page - 1);
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

void fl_h5_free_strings(char **s) {
    if (!s) return;
    for (int i = 0; s[i]; i++) free(s[i]);
    free(s);
}

/* ------------------------------------------------------------ object headers */

enum {
    M_NIL = 0, M_DATASPACE = 1, M_LINFO = 2, M_DATATYPE = 3, M_FILL_OLD = 4, M_FILL = 5, M_LINK = 6, M_LAYOUT = 8,
    M_GINFO = 10, M_FILTERS = 11, M_ATTR = 12, M_CONT = 16, M_STAB = 17, M_AINFO = 21,
};

typedef struct hmsg { unsigned type, flags; const uint8_t *p; size_t size; } hmsg;
typedef struct hobj { hmsg *m; int n, cap; } hobj;

static void obj_free(hobj *o) { free(o->m); memset(o, 0, sizeof *o); }

static int obj_add(fl_h5 *f, hobj *o, unsigned type, unsigned flags, const uint8_t *p, size_t size, const char *path) {
    if (o->n >= FL_H5_MAX_MESSAGES) return BAD(f, path, "more than %d header messages", FL_H5_MAX_MESSAGES);
    if (o->n == o->cap) {
        int cap = o->cap ? o->cap * 2 : 16;
        hmsg *m = realloc(o->m, (size_t)cap * sizeof *m);
        if (!m) { fl_error(FL_ERR_NOMEM, "out of memory reading %s", path); return -1; }
        o->m = m;
        o->cap = cap;
    }
    o->m[o->n++] = (hmsg){type, flags, p, size};
    return 0;
}

#define MAX_BLOCKS 4096 /* header chunks of one object: continuation loops end here */

/* Reads every message of the object header at addr (both versions, every
 * continuation block). Message data points into the image. */
static int obj_read(fl_h5 *f, uint64_t addr, const char *path, hobj *o) {
    memset(o, 0, sizeof *o);
    uint64_t blk_addr[MAX_BLOCKS], blk_len[MAX_BLOCKS];
    int nblk = 0, done = 0;
    int version;
    bool corder = false; /* v2: messages carry a creation order */
    cur c = cur_at(f, addr, 16);
    if (c.bad) return BAD(f, path, "object header at %llu is outside the file", (unsigned long long)addr);
    if (memcmp(c.p, "OHDR", 4) == 0) {
        version = 2;
        c = cur_from(f, addr);
        take(&c, 4);
        unsigned v = u8(&c), flags = u8(&c);
        if (v != 2) return UNSUP(f, path, "object header version %u is not supported", v);
        corder = flags & 0x04;
        if (flags & 0x20) take(&c, 16);
        if (flags & 0x10) take(&c, 4);
        uint64_t size0 = un(&c, 1 << (flags & 3));
        if (c.bad || size0 > left(&c) || left(&c) - size0 < 4)
            return BAD(f, path, "truncated object header (chunk 0 of %llu bytes)", (unsigned long long)size0);
        const uint8_t *start = at(f, addr, 0);
        if (!sum_ok(start, (size_t)(c.p - start) + size0)) return BAD(f, path, "object header checksum mismatch");
        blk_addr[0] = addr + (uint64_t)(c.p - start);
        blk_len[0] = size0;
        nblk = 1;
    } else {
        version = 1;
        unsigned v = u8(&c);
        if (v != 1) return UNSUP(f, path, "object header version %u is not supported (1 and 2 are)", v);
        take(&c, 1 + 2 + 4);
        uint32_t hsize = u32(&c);
        blk_addr[0] = addr + 16;
        blk_len[0] = hsize;
        nblk = 1;
    }
    int rc = 0;
    while (done < nblk && rc == 0) {
        uint64_t ba = blk_addr[done], bl = blk_len[done];
        bool first = done == 0;
        done++;
        c = cur_at(f, ba, bl);
        if (c.bad) { rc = BAD(f, path, "object header block at %llu (%llu bytes) is outside the file", (unsigned long long)ba, (unsigned long long)bl); break; }
        if (version == 2) {
            if (!first) {
                if (bl < 8 || !sig(&c, "OCHK")) { rc = BAD(f, path, "continuation block without its OCHK signature"); break; }
                if (!sum_ok(c.p - 4, (size_t)bl - 4)) { rc = BAD(f, path, "continuation block checksum mismatch"); break; }
                c.end -= 4;
            }
        }
        for (;;) {
            size_t hdr = version == 1 ? 8 : corder ? 6 : 4;
            if (left(&c) < hdr) break;
            unsigned type, flags;
            size_t size;
            if (version == 1) {
                type = u16(&c);
                size = u16(&c);
                flags = u8(&c);
                take(&c, 3);
            } else {
                type = u8(&c);
                size = u16(&c);
                flags = u8(&c);
                if (corder) take(&c, 2);
            }
            const uint8_t *data = take(&c, size);
            if (!data) { rc = BAD(f, path, "header message (type %u, %zu bytes) runs past its block", type, size); break; }
            if (version == 1) take(&c, ((size + 7) & ~(size_t)7) - size), c.bad = false;
            if (type == M_CONT) {
                cur m = cur_mem(data, size, f);
                uint64_t ca = addr_of(&m), cl = len_of(&m);
                if (m.bad) { rc = BAD(f, path, "truncated continuation message"); break; }
                for (int i = 0; i < nblk; i++)
                    if (blk_addr[i] == ca) { rc = BAD(f, path, "object header continuation loop (block %llu again)", (unsigned long long)ca); break; }
                if (rc) break;
                if (nblk == MAX_BLOCKS) { rc = BAD(f, path, "more than %d object header blocks", MAX_BLOCKS); break; }
                blk_addr[nblk] = ca;
                blk_len[nblk++] = cl;
                continue;
            }
            if (type == M_NIL) continue;
            if ((rc = obj_add(f, o, type, flags, data, size, path)) != 0) break;
        }
    }
    if (rc) obj_free(o);
    return rc;
}

static const hmsg *obj_find(const hobj *o, unsigned type) {
    for (int i = 0; i < o->n; i++)
        if (o->m[i].type == type) return &o->m[i];
    return NULL;
}

/* ------------------------------------------------------------ fractal heaps */

typedef struct fheap {
    unsigned id_len, width, max_heap_bits, cur_rows;
    uint32_t max_man;
    uint64_t start_block, max_direct, root;
    int off_size, len_size, max_direct_rows;
    bool dblock_sums;
} fheap;

static int limit_enc_size(uint64_t v) { return (v ? ilog2(v) : 0) / 8 + 1; }

static int fheap_open(fl_h5 *f, uint64_t addr, const char *path, fheap *h) {
    memset(h, 0, sizeof *h);
    cur c = cur_from(f, addr);
    if (c.bad) return BAD(f, path, "fractal heap at %llu is outside the file", (unsigned long long)addr);
    const uint8_t *start = c.p;
    if (!sig(&c, "FRHP")) return BAD(f, path, "fractal heap without its FRHP signature");
    if (u8(&c) != 0) return UNSUP(f, path, "fractal heap version is not 0");
    h->id_len = u16(&c);
    unsigned filter_len = u16(&c);
    unsigned flags = u8(&c);
    h->max_man = u32(&c);
    len_of(&c); addr_of(&c); len_of(&c); addr_of(&c);
    for (int i = 0; i < 8; i++) len_of(&c);
    h->width = u16(&c);
    h->start_block = len_of(&c);
    h->max_direct = len_of(&c);
    h->max_heap_bits = u16(&c);
    u16(&c); /* starting rows */
    h->root = addr_of(&c);
    h->cur_rows = u16(&c);
    if (c.bad || left(&c) < 4) return BAD(f, path, "truncated fractal heap header");
    if (filter_len) return UNSUP(f, path, "filtered fractal heaps are not supported");
    if (!sum_ok(start, (size_t)(c.p - start))) return BAD(f, path, "fractal heap header checksum mismatch");
    h->dblock_sums = flags & 2;
    if (h->width == 0 || h->start_block == 0 || (h->start_block & (h->start_block - 1)) || h->max_direct < h->start_block ||
        (h->max_direct & (h->max_direct - 1)) || h->max_heap_bits == 0 || h->max_heap_bits > 64 || (h->width & (h->width - 1)))
        return BAD(f, path, "fractal heap with an impossible doubling table (width %u, blocks %llu..%llu)", h->width,
                   (unsigned long long)h->start_block, (unsigned long long)h->max_direct);
    h->off_size = (h->max_heap_bits + 7) / 8;
    int a = (ilog2(h->max_direct) + 7) / 8, b = limit_enc_size(h->max_man);
    h->len_size = a < b ? a : b;
    h->max_direct_rows = ilog2(h->max_direct) - ilog2(h->start_block) + 2;
    return 0;
}

static uint64_t row_block(const fheap *h, int r) { return r == 0 ? h->start_block : h->start_block << (r - 1); }

/* The object a heap ID names: *p and *n (inside the image). */
static int fheap_get(fl_h5 *f, const fheap *h, const uint8_t *id, size_t idlen, const char *path, const uint8_t **p,
                     size_t *n) {
    if (idlen < 1) return BAD(f, path, "empty fractal heap ID");
    unsigned type = (id[0] >> 4) & 3;
    if ((id[0] >> 6) != 0) return UNSUP(f, path, "fractal heap ID version %u", id[0] >> 6);
    if (type == 2) { /* tiny: in the ID itself */
        size_t l = idlen <= 18 ? (size_t)(id[0] & 15) + 1 : idlen >= 2 ? (((size_t)(id[0] & 15) << 8) | id[1]) + 1 : 0;
        size_t o = idlen <= 18 ? 1 : 2;
        if (o + l > idlen) return BAD(f, path, "tiny heap object longer than its ID");
        *p = id + o;
        *n = l;
        return 0;
    }
    if (type != 0) return UNSUP(f, path, "huge fractal heap objects are not supported");
    if (1 + (size_t)h->off_size + (size_t)h->len_size > idlen) return BAD(f, path, "heap ID shorter than its fields");
    uint64_t off = le(id + 1, h->off_size), len = le(id + 1 + h->off_size, h->len_size);
    uint64_t block = h->root;
    int rows = (int)h->cur_rows;
    uint64_t boff = 0, bsize = h->start_block;
    for (int depth = 0; rows > 0; depth++) { /* descend indirect blocks */
        if (depth > FL_H5_MAX_DEPTH) return BAD(f, path, "fractal heap deeper than %d levels", FL_H5_MAX_DEPTH);
        cur c = cur_at(f, block, 5 + (uint64_t)f->so + (uint64_t)h->off_size);
        if (c.bad || !sig(&c, "FHIB")) return BAD(f, path, "fractal heap indirect block at %llu is missing or not one", (unsigned long long)block);
        u8(&c);
        addr_of(&c);
        uint64_t ib_off = le(take(&c, (uint64_t)h->off_size), h->off_size);
        if (off < ib_off) return BAD(f, path, "heap object offset %llu outside its block", (unsigned long long)off);
        uint64_t rel = off - ib_off;
        int r = 0;
        uint64_t row_off = 0;
        while (r < rows && rel >= row_off + (uint64_t)h->width * row_block(h, r)) {
            row_off += (uint64_t)h->width * row_block(h, r);
            r++;
            if (r > 64) break;
        }
        if (r >= rows) return BAD(f, path, "heap object offset %llu beyond the heap", (unsigned long long)off);
        uint64_t bs = row_block(h, r), col = (rel - row_off) / bs;
        uint64_t k = (uint64_t)r * h->width + col;
        cur e = cur_at(f, block + 5 + (uint64_t)f->so + (uint64_t)h->off_size + k * (uint64_t)f->so, (uint64_t)f->so);
        uint64_t child = addr_of(&e);
        if (e.bad || child == UNDEF) return BAD(f, path, "heap object offset %llu in an unallocated block", (unsigned long long)off);
        boff = ib_off + row_off + col * bs;
        if (r < h->max_direct_rows) { block = child; bsize = bs; rows = 0; break; }
        block = child;
        rows = ilog2(bs) - ilog2(h->start_block * h->width) + 1;
        if (rows <= 0 || rows > 64) return BAD(f, path, "fractal heap indirect block with %d rows", rows);
    }
    cur d = cur_at(f, block, 5 + (uint64_t)f->so + (uint64_t)h->off_size);
    if (d.bad || !sig(&d, "FHDB")) return BAD(f, path, "fractal heap direct block at %llu is missing or not one", (unsigned long long)block);
    u8(&d);
    addr_of(&d);
    uint64_t db_off = le(take(&d, (uint64_t)h->off_size), h->off_size);
    if (db_off != boff) return BAD(f, path, "fractal heap direct block offset %llu, expected %llu", (unsigned long long)db_off, (unsigned long long)boff);
    if (off < boff || off - boff > bsize || len > bsize - (off - boff)) return BAD(f, path, "heap object (offset %llu, %llu bytes) outside its block", (unsigned long long)off, (unsigned long long)len);
    const uint8_t *q = at(f, block + (off - boff), len);
    if (!q) return BAD(f, path, "heap object outside the file");
    *p = q;
    *n = (size_t)len;
    return 0;
}

/* ------------------------------------------------------------ v2 B-trees */

typedef int (*bt2_cb)(fl_h5 *f, const uint8_t *rec, size_t size, void *ctx);

typedef struct bt2 {
    unsigned type, rec_size, depth;
    uint32_t node_size;
    int max_nrec_size, cum_size[FL_H5_MAX_DEPTH + 1];
    long budget;
} bt2;

static int bt2_node(fl_h5 *f, bt2 *t, uint64_t addr, unsigned nrec, unsigned depth, const char *path, bt2_cb cb, void *ctx) {
    if (--t->budget < 0 || (t->budget -= nrec) < 0) return BAD(f, path, "v2 B-tree with more than %d nodes and records (a loop?)", FL_H5_MAX_LINKS);
    cur c = cur_at(f, addr, t->node_size);
    if (c.bad) return BAD(f, path, "v2 B-tree node at %llu is outside the file", (unsigned long long)addr);
    const uint8_t *start = c.p;
    if (!sig(&c, depth ? "BTIN" : "BTLF")) return BAD(f, path, "v2 B-tree node without its %s signature", depth ? "BTIN" : "BTLF");
    u8(&c);
    if (u8(&c) != t->type) return BAD(f, path, "v2 B-tree node of another type");
    const uint8_t *recs = take(&c, (uint64_t)nrec * t->rec_size);
    if (!recs) return BAD(f, path, "v2 B-tree node with %u records overflows its %u bytes", nrec, t->node_size);
    const uint8_t *kids = c.p;
    size_t psize = (size_t)f->so + (size_t)t->max_nrec_size + (depth > 1 ? (size_t)t->cum_size[depth - 1] : 0);
    if (depth) take(&c, (uint64_t)(nrec + 1) * psize);
    if (c.bad || left(&c) < 4) return BAD(f, path, "v2 B-tree node overflows its %u bytes", t->node_size);
    if (!sum_ok(start, (size_t)(c.p - start))) return BAD(f, path, "v2 B-tree node checksum mismatch");
    for (unsigned i = 0; i <= nrec; i++) {
        if (depth) {
            cur k = cur_mem(kids + i * psize, psize, f);
            uint64_t ca = addr_of(&k);
            unsigned cn = (unsigned)un(&k, t->max_nrec_size);
            int rc = bt2_node(f, t, ca, cn, depth - 1, path, cb, ctx);
            if (rc) return rc;
        }
        if (i < nrec) {
            int rc = cb(f, recs + (size_t)i * t->rec_size, t->rec_size, ctx);
            if (rc) return rc;
        }
    }
    return 0;
}

static int bt2_walk(fl_h5 *f, uint64_t addr, unsigned type, const char *path, bt2_cb cb, void *ctx) {
    bt2 t = {.type = type, .budget = FL_H5_MAX_LINKS};
    cur c = cur_at(f, addr, 4 + 1 + 1 + 4 + 2 + 2 + 1 + 1 + (uint64_t)f->so + 2 + (uint64_t)f->sl + 4);
    if (c.bad) return BAD(f, path, "v2 B-tree header at %llu is outside the file", (unsigned long long)addr);
    const uint8_t *start = c.p;
    if (!sig(&c, "BTHD") || u8(&c) != 0) return BAD(f, path, "v2 B-tree header without its BTHD signature");
    if (u8(&c) != type) return BAD(f, path, "v2 B-tree of type %u, expected %u", start[5], type);
    t.node_size = u32(&c);
    t.rec_size = u16(&c);
    t.depth = u16(&c);
    u8(&c); u8(&c);
    uint64_t root = addr_of(&c);
    unsigned root_n = u16(&c);
    len_of(&c);
    if (!sum_ok(start, (size_t)(c.p - start))) return BAD(f, path, "v2 B-tree header checksum mismatch");
    if (t.depth > FL_H5_MAX_DEPTH) return BAD(f, path, "v2 B-tree of depth %u", t.depth);
    if (t.rec_size == 0 || t.node_size < 10 + t.rec_size) return BAD(f, path, "v2 B-tree with %u-byte nodes and %u-byte records", t.node_size, t.rec_size);
    if (root == UNDEF) return 0;
    /* field sizes of the child pointers, as the library computes them */
    uint64_t max0 = (t.node_size - 10) / t.rec_size, cum = max0;
    t.max_nrec_size = limit_enc_size(max0);
    t.cum_size[0] = 0;
    for (unsigned d = 1; d <= t.depth; d++) {
        uint64_t ps = (uint64_t)f->so + (uint64_t)t.max_nrec_size + (uint64_t)t.cum_size[d - 1];
        if (t.node_size < 10 + ps) return BAD(f, path, "v2 B-tree nodes too small for depth %u", t.depth);
        uint64_t maxd = (t.node_size - (10 + ps)) / (t.rec_size + ps);
        cum = (maxd + 1) * cum + maxd;
        t.cum_size[d] = limit_enc_size(cum);
    }
    return bt2_node(f, &t, root, root_n, t.depth, path, cb, ctx);
}

/* ------------------------------------------------------------ links */

/* Called for each link: name (not NUL-terminated), its object (UNDEF for
 * soft and external links). Return nonzero to stop. */
typedef int (*link_cb)(fl_h5 *f, const char *name, size_t nlen, uint64_t obj, void *ctx);

static int link_msg(fl_h5 *f, const uint8_t *p, size_t n, const char *path, link_cb cb, void *ctx) {
    cur c = cur_mem(p, n, f);
    unsigned v = u8(&c), flags = u8(&c);
    if (v != 1) return UNSUP(f, path, "link message version %u", v);
    unsigned type = (flags & 8) ? u8(&c) : 0;
    if (flags & 4) take(&c, 8);
    if (flags & 16) u8(&c);
    uint64_t nl = un(&c, 1 << (flags & 3));
    const uint8_t *name = take(&c, nl);
    uint64_t obj = type == 0 ? addr_of(&c) : UNDEF;
    if (c.bad || nl == 0) return BAD(f, path, "truncated link message");
    return cb(f, (const char *)name, (size_t)nl, obj, ctx);
}

typedef struct dense_ctx { fheap h; const char *path; link_cb lcb; void *ctx; int kind; void *actx; } dense_ctx;

static int dense_link_rec(fl_h5 *f, const uint8_t *rec, size_t size, void *vctx) {
    dense_ctx *d = vctx;
    const uint8_t *p;
    size_t n;
    if (size < 4 || fheap_get(f, &d->h, rec + 4, size - 4, d->path, &p, &n)) return size < 4 ? BAD(f, d->path, "short link record") : -1;
    return link_msg(f, p, n, d->path, d->lcb, d->ctx);
}

typedef struct btree1 { long budget; } btree1;

/* Symbol-table groups: the v1 B-tree (type 0) of SNOD nodes. */
static int stab_node(fl_h5 *f, btree1 *bt, uint64_t addr, int level, const uint8_t *heap, uint64_t heap_size,
                     const char *path, link_cb cb, void *ctx) {
    if (--bt->budget < 0) return BAD(f, path, "group B-tree with more than %d nodes and links (a loop?)", FL_H5_MAX_LINKS);
    cur c = cur_at(f, addr, 8 + 2 * (uint64_t)f->so);
    if (c.bad || !sig(&c, "TREE")) return BAD(f, path, "group B-tree node at %llu is missing or not one", (unsigned long long)addr);
    unsigned type = u8(&c), lvl = u8(&c), n = u16(&c);
    if (type != 0) return BAD(f, path, "group B-tree node of type %u", type);
    if (level >= 0 && (int)lvl != level) return BAD(f, path, "group B-tree node at level %u, expected %d (a loop?)", lvl, level);
    if (lvl > FL_H5_MAX_DEPTH) return BAD(f, path, "group B-tree deeper than %d", FL_H5_MAX_DEPTH);
    c = cur_at(f, addr + 8 + 2 * (uint64_t)f->so, (uint64_t)n * (uint64_t)(f->sl + f->so) + (uint64_t)f->sl);
    if (c.bad) return BAD(f, path, "group B-tree node with %u entries runs past the file", n);
    for (unsigned i = 0; i < n; i++) {
        len_of(&c);
        uint64_t child = addr_of(&c);
        int rc;
        if (lvl > 0) {
            rc = stab_node(f, bt, child, (int)lvl - 1, heap, heap_size, path, cb, ctx);
        } else {
            if (--bt->budget < 0) return BAD(f, path, "group B-tree with more than %d nodes and links (a loop?)", FL_H5_MAX_LINKS);
            cur s = cur_at(f, child, 8);
            if (s.bad || !sig(&s, "SNOD")) return BAD(f, path, "symbol table node at %llu is missing or not one", (unsigned long long)child);
            u8(&s); u8(&s);
            unsigned ns = u16(&s);
            uint64_t esz = 2 * (uint64_t)f->so + 24;
            if ((bt->budget -= ns) < 0) return BAD(f, path, "group B-tree with more than %d nodes and links (a loop?)", FL_H5_MAX_LINKS);
            s = cur_at(f, child + 8, ns * esz);
            if (s.bad) return BAD(f, path, "symbol table node with %u entries runs past the file", ns);
            rc = 0;
            for (unsigned k = 0; k < ns && !rc; k++) {
                uint64_t noff = un(&s, f->so), obj = addr_of(&s);
                take(&s, 24);
                if (noff >= heap_size) return BAD(f, path, "link name offset %llu outside the local heap", (unsigned long long)noff);
                const char *nm = (const char *)heap + noff;
                size_t nl = strnlen(nm, (size_t)(heap_size - noff));
                if (nl == (size_t)(heap_size - noff)) return BAD(f, path, "unterminated link name in the local heap");
                rc = cb(f, nm, nl, obj, ctx);
            }
        }
        if (rc) return rc;
    }
    return 0;
}

/* Calls cb for every link of the group whose header is o. */
static int group_iter(fl_h5 *f, const hobj *o, const char *path, link_cb cb, void *ctx) {
    const hmsg *st = obj_find(o, M_STAB);
    if (st) {
        cur c = cur_mem(st->p, st->size, f);
        uint64_t bt = addr_of(&c), ha = addr_of(&c);
        cur h = cur_at(f, ha, 8 + 2 * (uint64_t)f->sl + (uint64_t)f->so);
        if (c.bad || h.bad || !sig(&h, "HEAP")) return BAD(f, path, "symbol table without its local heap");
        take(&h, 4);
        uint64_t dsize = len_of(&h);
        len_of(&h);
        uint64_t daddr = addr_of(&h);
        const uint8_t *heap = at(f, daddr, dsize);
        if (!heap) return BAD(f, path, "local heap data (%llu bytes at %llu) outside the file", (unsigned long long)dsize, (unsigned long long)daddr);
        btree1 b = {FL_H5_MAX_LINKS};
        return stab_node(f, &b, bt, -1, heap, dsize, path, cb, ctx);
    }
    const hmsg *li = obj_find(o, M_LINFO);
    if (li) {
        cur c = cur_mem(li->p, li->size, f);
        u8(&c);
        unsigned flags = u8(&c);
        if (flags & 1) take(&c, 8);
        uint64_t heap = addr_of(&c), name_bt = addr_of(&c);
        if (c.bad) return BAD(f, path, "truncated link info message");
        if (heap != UNDEF) {
            dense_ctx d = {.path = path, .lcb = cb, .ctx = ctx};
            if (fheap_open(f, heap, path, &d.h)) return -1;
            return bt2_walk(f, name_bt, 5, path, dense_link_rec, &d);
        }
    }
    for (int i = 0; i < o->n; i++)
        if (o->m[i].type == M_LINK) {
            int rc = link_msg(f, o->m[i].p, o->m[i].size, path, cb, ctx);
            if (rc) return rc;
        }
    return 0;
}

static bool is_group(const hobj *o) { return obj_find(o, M_STAB) || obj_find(o, M_LINFO) || obj_find(o, M_LINK) || !obj_find(o, M_LAYOUT); }

typedef struct find_ctx { const char *name; size_t nlen; uint64_t obj; int found; } find_ctx;

static int find_cb(fl_h5 *f, const char *name, size_t nlen, uint64_t obj, void *vctx) {
    (void)f;
    find_ctx *c = vctx;
    if (nlen == c->nlen && memcmp(name, c->name, nlen) == 0) { c->obj = obj; c->found = 1; return 1; }
    return 0;
}

int fl_h5_find(fl_h5 *f, uint64_t loc, const char *path, uint64_t *out) {
    uint64_t cur_obj = loc;
    const char *p = path;
    char where[512] = "";
    size_t wl = 0;
    for (int depth = 0;; depth++) {
        while (*p == '/') p++;
        if (!*p) break;
        if (depth >= FL_H5_MAX_DEPTH) return BAD(f, path, "path deeper than %d groups", FL_H5_MAX_DEPTH);
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        hobj o;
        if (obj_read(f, cur_obj, wl ? where : "/", &o)) return -1;
        find_ctx c = {p, n, UNDEF, 0};
        int rc = group_iter(f, &o, wl ? where : "/", find_cb, &c);
        obj_free(&o);
        if (rc < 0) return -1;
        if (wl < sizeof where - 1) wl += (size_t)snprintf(where + wl, sizeof where - wl, "/%.*s", (int)n, p);
        if (wl >= sizeof where) wl = sizeof where - 1;
        if (!c.found) return 0;
        if (c.obj == UNDEF) return UNSUP(f, where, "soft and external links are not supported");
        cur_obj = c.obj;
        p += n;
    }
    *out = cur_obj;
    return 1;
}

typedef struct list_ctx { char **names; int n, cap; const char *path; } list_ctx;

static int list_cb(fl_h5 *f, const char *name, size_t nlen, uint64_t obj, void *vctx) {
    (void)obj;
    list_ctx *c = vctx;
    if (c->n >= FL_H5_MAX_LINKS) return BAD(f, c->path, "more than %d links", FL_H5_MAX_LINKS);
    if (c->n + 1 >= c->cap) {
        int cap = c->cap ? c->cap * 2 : 16;
        char **g = realloc(c->names, (size_t)cap * sizeof *g);
        if (!g) { fl_error(FL_ERR_NOMEM, "out of memory listing %s", c->path); return -1; }
        c->names = g;
        c->cap = cap;
    }
    c->names[c->n] = strndup(name, nlen);
    if (!c->names[c->n]) { fl_error(FL_ERR_NOMEM, "out of memory listing %s", c->path); return -1; }
    c->names[++c->n] = NULL;
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int fl_h5_links(fl_h5 *f, uint64_t group, const char *path, char ***names) {
    *names = NULL;
    hobj o;
    if (!path || !*path) path = "group";
    if (obj_read(f, group, path, &o)) return -1;
    list_ctx c = {.path = path};
    int rc = group_iter(f, &o, path, list_cb, &c);
    obj_free(&o);
    if (rc) { fl_h5_free_strings(c.names); return -1; }
    if (!c.names) {
        c.names = calloc(1, sizeof *c.names);
        if (!c.names) { fl_error(FL_ERR_NOMEM, "out of memory"); return -1; }
    }
    qsort(c.names, (size_t)c.n, sizeof *c.names, cmp_str);
    *names = c.names;
    return c.n;
}

/* ------------------------------------------------------------ types and shapes */

static const char *class_name(int cls) {
    static const char *n[] = {"fixed-point", "floating-point", "time", "string", "bitfield", "opaque",
                              "compound", "reference", "enum", "variable-length", "array"};
    return cls >= 0 && cls < 11 ? n[cls] : "unknown";
}

static int parse_type(fl_h5 *f, cur *c, const char *path, fl_h5_type *t, int depth) {
    memset(t, 0, sizeof *t);
    unsigned cv = u8(c);
    unsigned b0 = u8(c), b1 = u8(c);
    u8(c);
    t->cls = (int)(cv & 15);
    t->size = u32(c);
    if (c->bad) return BAD(f, path, "truncated datatype");
    switch (t->cls) {
    case FL_H5_INT: {
        unsigned off = u16(c), prec = u16(c);
        t->big_endian = b0 & 1;
        t->is_signed = b0 & 8;
        if (c->bad) return BAD(f, path, "truncated integer datatype");
        if ((t->size != 1 && t->size != 2 && t->size != 4 && t->size != 8) || off != 0 || prec != t->size * 8)
            return UNSUP(f, path, "datatype: %u-byte integer with %u bits at offset %u is not supported", t->size, prec, off);
        return 0;
    }
    case FL_H5_FLOAT: {
        unsigned off = u16(c), prec = u16(c), eloc = u8(c), esz = u8(c), mloc = u8(c), msz = u8(c);
        uint32_t bias = u32(c);
        if (c->bad) return BAD(f, path, "truncated floating-point datatype");
        if (b0 & 0x40) return UNSUP(f, path, "datatype: VAX byte order is not supported");
        t->big_endian = b0 & 1;
        bool ieee4 = t->size == 4 && prec == 32 && eloc == 23 && esz == 8 && mloc == 0 && msz == 23 && bias == 127;
        bool ieee8 = t->size == 8 && prec == 64 && eloc == 52 && esz == 11 && mloc == 0 && msz == 52 && bias == 1023;
        if (off != 0 || !(ieee4 || ieee8) || (b1 & 0xff) != (t->size == 4 ? 31u : 63u))
            return UNSUP(f, path, "datatype: %u-byte floating point that is not IEEE float32/float64", t->size);
        return 0;
    }
    case FL_H5_STRING:
        if (t->size == 0) return BAD(f, path, "fixed-length string of size 0");
        return 0;
    case FL_H5_VLEN: {
        unsigned kind = b0 & 15;
        if (kind != 1) return UNSUP(f, path, "datatype: variable-length sequences are not supported (only strings)");
        t->vlen_string = true;
        if (depth > 4) return BAD(f, path, "nested datatypes");
        fl_h5_type base;
        if (parse_type(f, c, path, &base, depth + 1)) return -1;
        if (t->size != 4 + (uint32_t)f->so + 4) return BAD(f, path, "variable-length string of element size %u", t->size);
        return 0;
    }
    default:
        return UNSUP(f, path, "datatype class %s (%d) is not supported", class_name(t->cls), t->cls);
    }
}

typedef struct space { int ndim; uint64_t dims[FL_H5_MAX_DIMS]; uint64_t npoints; } space;

static int parse_space(fl_h5 *f, cur *c, const char *path, space *s) {
    memset(s, 0, sizeof *s);
    unsigned v = u8(c), nd = u8(c), flags = u8(c), type = 1;
    if (v == 1) take(c, 5);
    else if (v == 2) type = u8(c);
    else return UNSUP(f, path, "dataspace version %u", v);
    if (c->bad) return BAD(f, path, "truncated dataspace");
    if (nd > FL_H5_MAX_DIMS) return BAD(f, path, "dataspace of %u dimensions", nd);
    s->ndim = (int)nd;
    s->npoints = 1;
    bool overflow = false;
    for (unsigned i = 0; i < nd; i++) {
        s->dims[i] = len_of(c);
        if (s->dims[i] && s->npoints > UINT64_MAX / s->dims[i]) overflow = true;
        s->npoints *= s->dims[i];
    }
    if (flags & 1) take(c, (uint64_t)nd * (uint64_t)f->sl);
    if (c->bad) return BAD(f, path, "truncated dataspace");
    if (overflow || s->npoints > ((uint64_t)1 << 48)) return BAD(f, path, "dataspace of more than 2^48 elements");
    if (v == 2 && type == 2) { s->ndim = 0; s->npoints = 0; }
    return 0;
}

/* ------------------------------------------------------------ global heap, strings */

/* Where the last object was found: strings are stored in order, so the
 * next lookup starts there (and wraps around once). */
typedef struct ghint { uint64_t coll; size_t off; } ghint;

static int gheap_get(fl_h5 *f, uint64_t coll, uint32_t index, const char *path, const uint8_t **p, uint64_t *n, ghint *h) {
    cur c = cur_at(f, coll, 8 + (uint64_t)f->sl);
    if (c.bad || !sig(&c, "GCOL")) return BAD(f, path, "global heap collection at %llu is missing or not one", (unsigned long long)coll);
    take(&c, 4);
    uint64_t size = len_of(&c);
    size_t hdr = 8 + (size_t)f->sl;
    if (size < hdr) return BAD(f, path, "global heap collection of %llu bytes", (unsigned long long)size);
    cur all = cur_at(f, coll, size);
    if (all.bad) return BAD(f, path, "global heap collection (%llu bytes) runs past the file", (unsigned long long)size);
    size_t start = h->coll == coll && h->off >= hdr && h->off < size ? h->off : hdr;
    for (int pass = 0; pass < 2; pass++) {
        c = all;
        take(&c, pass ? hdr : start);
        while (left(&c) >= 8 + (size_t)f->sl) {
            if (pass && (size_t)(c.p - all.p) >= start) break;
            unsigned idx = u16(&c);
            take(&c, 6);
            uint64_t osz = len_of(&c);
            if (idx == 0) break;
            const uint8_t *d = take(&c, osz);
            if (!d) return BAD(f, path, "global heap object %u (%llu bytes) overflows its collection", idx, (unsigned long long)osz);
            take(&c, ((osz + 7) & ~(uint64_t)7) - osz);
            c.bad = false;
            if (idx == index) {
                *p = d;
                *n = osz;
                h->coll = coll;
                h->off = (size_t)(c.p - all.p);
                return 0;
            }
        }
        if (start == hdr) break;
    }
    return BAD(f, path, "global heap object %u not found", index);
}

/* Decodes n string elements of type t at data into res[]. */
static int read_strings(fl_h5 *f, const fl_h5_type *t, const uint8_t *data, uint64_t n, const char *path, char **res) {
    ghint hint = {UNDEF, 0};
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *e = data + i * t->size;
        const char *s;
        size_t l;
        if (t->cls == FL_H5_STRING) {
            s = (const char *)e;
            l = strnlen(s, t->size);
            while (l > 0 && s[l - 1] == ' ') l--;
        } else {
            cur c = cur_mem(e, t->size, f);
            uint32_t slen = u32(&c);
            uint64_t coll = addr_of(&c);
            uint32_t idx = u32(&c);
            if (slen > FL_H5_MAX_STRING) return BAD(f, path, "string of %u bytes (the limit is %d)", slen, FL_H5_MAX_STRING);
            if (slen == 0) {
                s = "";
                l = 0;
            } else {
                const uint8_t *p = NULL;
                uint64_t on = 0;
                if (gheap_get(f, coll, idx, path, &p, &on, &hint)) return -1;
                if (on < slen) return BAD(f, path, "string of %u bytes in a heap object of %llu", slen, (unsigned long long)on);
                s = (const char *)p;
                l = strnlen(s, slen);
            }
        }
        if (l > FL_H5_MAX_STRING) return BAD(f, path, "string longer than %d bytes", FL_H5_MAX_STRING);
        res[i] = strndup(s, l);
        if (!res[i]) { fl_error(FL_ERR_NOMEM, "out of memory reading %s", path); return -1; }
    }
    return 0;
}

/* ------------------------------------------------------------ attributes */

typedef struct attr_ctx { const char *name; const char *path; char ***out; int result; fheap h; } attr_ctx;

static int attr_msg(fl_h5 *f, const uint8_t *p, size_t n, attr_ctx *a) {
    cur c = cur_mem(p, n, f);
    unsigned v = u8(&c), flags = u8(&c), nsz = u16(&c), tsz = u16(&c), ssz = u16(&c);
    if (v == 3) u8(&c);
    if (c.bad || v < 1 || v > 3) return v < 1 || v > 3 ? UNSUP(f, a->path, "attribute message version %u", v) : BAD(f, a->path, "truncated attribute");
    uint64_t pad = v == 1 ? 7 : 0;
    const uint8_t *nm = take(&c, (nsz + pad) & ~pad);
    if (!nm || nsz == 0) return BAD(f, a->path, "truncated attribute name");
    size_t nl = strnlen((const char *)nm, nsz);
    if (strlen(a->name) != nl || memcmp(nm, a->name, nl) != 0) return 0;
    char where[600];
    snprintf(where, sizeof where, "%s attribute '%s'", a->path, a->name);
    if (flags & 3) return UNSUP(f, where, "shared datatypes/dataspaces in attributes are not supported");
    const uint8_t *tp = take(&c, (tsz + pad) & ~pad), *sp = take(&c, (ssz + pad) & ~pad);
    if (!tp || !sp) return BAD(f, where, "truncated attribute");
    fl_h5_type t;
    space s;
    cur tc = cur_mem(tp, tsz, f), sc = cur_mem(sp, ssz, f);
    if (parse_type(f, &tc, where, &t, 0) || parse_space(f, &sc, where, &s)) return -1;
    if (s.ndim > 1) return UNSUP(f, where, "a %d-D attribute (strings are scalar or 1-D)", s.ndim);
    if (t.cls != FL_H5_STRING && t.cls != FL_H5_VLEN) {
        if (s.npoints == 0) { /* h5py's empty list */
            *a->out = calloc(1, sizeof(char *));
            if (!*a->out) { fl_error(FL_ERR_NOMEM, "out of memory"); return -1; }
            a->result = 0;
            return 1;
        }
        return BAD(f, where, "is not text (datatype class %s)", class_name(t.cls));
    }
    if (s.npoints > FL_H5_MAX_STRINGS) return BAD(f, where, "%llu strings (the limit is %d)", (unsigned long long)s.npoints, FL_H5_MAX_STRINGS);
    if (s.npoints * t.size > left(&c)) return BAD(f, where, "data (%llu x %u bytes) runs past the attribute", (unsigned long long)s.npoints, t.size);
    char **res = calloc((size_t)s.npoints + 1, sizeof *res);
    if (!res) { fl_error(FL_ERR_NOMEM, "out of memory reading %s", where); return -1; }
    if (read_strings(f, &t, c.p, s.npoints, where, res)) { fl_h5_free_strings(res); return -1; }
    *a->out = res;
    a->result = (int)s.npoints;
    return 1;
}

static int dense_attr_rec(fl_h5 *f, const uint8_t *rec, size_t size, void *vctx) {
    attr_ctx *a = vctx;
    const uint8_t *p;
    size_t n;
    if (size < 9) return BAD(f, a->path, "short attribute record");
    /* the record ends with the lookup3 hash of the name: skip the others unread */
    if ((uint32_t)le(rec + size - 4, 4) != fl_h5_lookup3(a->name, strlen(a->name), 0)) return 0;
    char where[300];
    snprintf(where, sizeof where, "attribute '%s'", a->name);
    if (fheap_get(f, &a->h, rec, size - 9, where, &p, &n)) return -1;
    return attr_msg(f, p, n, a);
}

int fl_h5_attr_strings(fl_h5 *f, uint64_t obj, const char *name, char ***out) {
    *out = NULL;
    hobj o;
    char what[300];
    snprintf(what, sizeof what, "attribute '%s'", name);
    if (obj_read(f, obj, what, &o)) return -1;
    attr_ctx a = {.name = name, .path = "", .out = out, .result = -2};
    int rc = 0, seen = 0;
    for (int i = 0; i < o.n && rc == 0; i++)
        if (o.m[i].type == M_ATTR) {
            if (++seen > FL_H5_MAX_ATTRS) { rc = BAD(f, NULL, "more than %d attributes", FL_H5_MAX_ATTRS); break; }
            rc = attr_msg(f, o.m[i].p, o.m[i].size, &a);
        }
    const hmsg *ai = obj_find(&o, M_AINFO);
    if (rc == 0 && ai) {
        cur c = cur_mem(ai->p, ai->size, f);
        u8(&c);
        unsigned flags = u8(&c);
        if (flags & 1) take(&c, 2);
        uint64_t heap = addr_of(&c), bt = addr_of(&c);
        if (c.bad) rc = BAD(f, NULL, "truncated attribute info message");
        else if (heap != UNDEF) rc = fheap_open(f, heap, "attributes", &a.h) ? -1 : bt2_walk(f, bt, 8, "attributes", dense_attr_rec, &a);
    }
    obj_free(&o);
    if (rc < 0) { fl_h5_free_strings(*out); *out = NULL; return -1; }
    return a.result;
}

/* ------------------------------------------------------------ datasets */

int fl_h5_dataset_open(fl_h5 *f, uint64_t obj, const char *path, fl_h5_dataset *d) {
    memset(d, 0, sizeof *d);
    snprintf(d->path, sizeof d->path, "%s", path);
    d->addr = obj;
    hobj o;
    if (obj_read(f, obj, path, &o)) return -1;
    const hmsg *tm = obj_find(&o, M_DATATYPE), *sm = obj_find(&o, M_DATASPACE), *lm = obj_find(&o, M_LAYOUT);
    int rc = 0;
    if (!tm || !sm || !lm) rc = BAD(f, path, "is not a dataset (a %s)", is_group(&o) ? "group" : "named datatype");
    else if ((tm->flags | sm->flags) & 2) rc = UNSUP(f, path, "shared (committed) datatypes are not supported");
    if (!rc) {
        cur tc = cur_mem(tm->p, tm->size, f), sc = cur_mem(sm->p, sm->size, f);
        space s;
        rc = parse_type(f, &tc, path, &d->type, 0);
        if (!rc) rc = parse_space(f, &sc, path, &s);
        if (!rc) {
            d->ndim = s.ndim;
            memcpy(d->dims, s.dims, sizeof d->dims);
            d->npoints = s.npoints;
        }
    }
    obj_free(&o);
    return rc;
}

/* Converts n elements of type t at src to float or int64 at out. */
static int convert(fl_h5 *f, const fl_h5_type *t, const uint8_t *src, uint64_t n, bool as_i64, void *out, const char *path) {
    static const union { uint16_t u; uint8_t b[2]; } host = {1};
    bool host_le = host.b[0] == 1;
    if (t->cls != FL_H5_INT && t->cls != FL_H5_FLOAT) return BAD(f, path, "is not numeric (datatype class %s)", class_name(t->cls));
    if (!as_i64 && t->cls == FL_H5_FLOAT && t->size == 4 && t->big_endian != host_le) {
        memcpy(out, src, (size_t)n * 4);
        return 0;
    }
    float *of = out;
    int64_t *oi = out;
    unsigned sz = t->size;
    for (uint64_t i = 0; i < n; i++, src += sz) {
        uint64_t raw = 0;
        if (t->big_endian) for (unsigned k = 0; k < sz; k++) raw = raw << 8 | src[k];
        else raw = le(src, (int)sz);
        double v;
        int64_t iv = 0;
        bool isint = t->cls == FL_H5_INT;
        if (isint) {
            if (t->is_signed && sz < 8 && (raw >> (sz * 8 - 1)) & 1) raw |= ~(uint64_t)0 << (sz * 8);
            iv = t->is_signed ? (int64_t)raw : (raw > INT64_MAX ? INT64_MAX : (int64_t)raw);
            v = t->is_signed ? (double)(int64_t)raw : (double)raw;
        } else if (sz == 4) {
            uint32_t r32 = (uint32_t)raw;
            float x;
            memcpy(&x, &r32, 4);
            v = x;
        } else {
            memcpy(&v, &raw, 8);
        }
        if (as_i64) oi[i] = isint ? iv : (v != v ? 0 : v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v);
        else of[i] = (float)v;
    }
    return 0;
}

typedef struct filt { unsigned id, flags; } filt;
typedef struct pipeline { int n; filt f[8]; } pipeline;

static int parse_filters(fl_h5 *f, const hmsg *m, const char *path, pipeline *pl) {
    memset(pl, 0, sizeof *pl);
    if (!m) return 0;
    cur c = cur_mem(m->p, m->size, f);
    unsigned v = u8(&c), n = u8(&c);
    if (v == 1) take(&c, 6);
    else if (v != 2) return UNSUP(f, path, "filter pipeline version %u", v);
    if (n > 8) return BAD(f, path, "%u filters (at most 8)", n);
    for (unsigned i = 0; i < n; i++) {
        unsigned id = u16(&c), nl = (v == 1 || id >= 256) ? u16(&c) : 0, flags = u16(&c), nv = u16(&c);
        const uint8_t *name = take(&c, v == 1 ? (nl + 7u) & ~7u : nl);
        take(&c, (uint64_t)nv * 4);
        if (v == 1 && (nv & 1)) take(&c, 4);
        if (c.bad) return BAD(f, path, "truncated filter pipeline");
        if (id != 1 && id != 2) {
            static const char *known[] = {"", "deflate", "shuffle", "fletcher32", "szip", "nbit", "scaleoffset"};
            char nm[64];
            if (id <= 6) snprintf(nm, sizeof nm, "%s", known[id]);
            else if (id == 32000) snprintf(nm, sizeof nm, "lzf");
            else if (id == 32001) snprintf(nm, sizeof nm, "blosc");
            else if (name && nl) snprintf(nm, sizeof nm, "%.*s", (int)strnlen((const char *)name, nl), (const char *)name);
            else snprintf(nm, sizeof nm, "unknown");
            return UNSUP(f, path, "filter '%s' (id %u) is not supported (deflate and shuffle are)", nm, id);
        }
        pl->f[pl->n++] = (filt){id, flags};
    }
    return 0;
}

typedef struct chunked {
    const fl_h5_dataset *d;
    pipeline pl;
    int rank;
    uint64_t cd[FL_H5_MAX_DIMS]; /* chunk dims */
    uint64_t chunk_bytes;
    uint8_t *buf, *buf2;
    bool as_i64;
    uint8_t *out;
    size_t osz;
    long budget, nchunks, max_chunks;
} chunked;

/* Undoes the filters (in reverse order) of one chunk; the result in *res. */
static int unfilter(fl_h5 *f, chunked *k, const uint8_t *src, uint64_t n, uint32_t mask, const uint8_t **res) {
    const char *path = k->d->path;
    const uint8_t *cur_p = src;
    uint64_t cur_n = n;
    for (int i = k->pl.n - 1; i >= 0; i--) {
        if (mask & (1u << i)) continue;
        uint8_t *dst = cur_p == k->buf ? k->buf2 : k->buf;
        if (k->pl.f[i].id == 1) {
            z_stream z;
            memset(&z, 0, sizeof z);
            if (inflateInit(&z) != Z_OK) return BAD(f, path, "zlib initialisation failed");
            uint64_t done = 0;
            int zr = Z_OK;
            const uint8_t *in = cur_p;
            uint64_t in_left = cur_n;
            while (zr == Z_OK) {
                unsigned ia = in_left > (1u << 30) ? 1u << 30 : (unsigned)in_left;
                uint64_t out_left = k->chunk_bytes - done;
                unsigned oa = out_left > (1u << 30) ? 1u << 30 : (unsigned)out_left;
                z.next_in = (Bytef *)in;
                z.avail_in = ia;
                z.next_out = dst + done;
                z.avail_out = oa;
                zr = inflate(&z, Z_NO_FLUSH);
                in += ia - z.avail_in;
                in_left -= ia - z.avail_in;
                done += oa - z.avail_out;
                if (zr == Z_OK && z.avail_out == 0 && done == k->chunk_bytes) {
                    /* full: the stream must end here */
                    unsigned char extra;
                    z.next_out = &extra;
                    z.avail_out = 1;
                    z.next_in = (Bytef *)in;
                    z.avail_in = in_left > (1u << 30) ? 1u << 30 : (unsigned)in_left;
                    zr = inflate(&z, Z_NO_FLUSH);
                    if (z.avail_out == 0) zr = Z_DATA_ERROR;
                    break;
                }
                if (zr == Z_BUF_ERROR || (zr == Z_OK && ia == 0)) { zr = Z_DATA_ERROR; break; }
            }
            inflateEnd(&z);
            if (zr != Z_STREAM_END) return BAD(f, path, "a deflate chunk is corrupt or inflates past its %llu bytes", (unsigned long long)k->chunk_bytes);
            cur_n = done;
        } else { /* shuffle: bytes of each element grouped by position */
            unsigned es = k->d->type.size;
            uint64_t ne = cur_n / es;
            if (es > 1 && ne > 1) {
                for (unsigned b = 0; b < es; b++)
                    for (uint64_t e = 0; e < ne; e++) dst[e * es + b] = cur_p[b * ne + e];
                memcpy(dst + ne * es, cur_p + ne * es, (size_t)(cur_n - ne * es));
            } else {
                memcpy(dst, cur_p, (size_t)cur_n);
            }
        }
        cur_p = dst;
    }
    if (cur_n != k->chunk_bytes) return BAD(f, path, "a chunk holds %llu bytes, expected %llu", (unsigned long long)cur_n, (unsigned long long)k->chunk_bytes);
    *res = cur_p;
    return 0;
}

/* Copies the part of one chunk (at element offsets off) inside the dataset. */
static int place_chunk(fl_h5 *f, chunked *k, const uint64_t *off, uint64_t caddr, uint64_t csize, uint32_t mask) {
    const fl_h5_dataset *d = k->d;
    int r = k->rank;
    for (int i = 0; i < r; i++)
        if (off[i] % k->cd[i] || off[i] >= (d->dims[i] ? d->dims[i] : 1))
            return BAD(f, d->path, "chunk at offset %llu of dimension %d does not fit the dataset", (unsigned long long)off[i], i);
    if (++k->nchunks > k->max_chunks) return BAD(f, d->path, "more chunks than the dataset's %ld (a loop, or chunks listed twice)", k->max_chunks);
    const uint8_t *src = at(f, caddr, csize);
    if (!src) return BAD(f, d->path, "chunk (%llu bytes at %llu) outside the file", (unsigned long long)csize, (unsigned long long)caddr);
    for (int i = 0; i < f->nrel; i++)
        if (caddr < f->rel[i].hi && f->rel[i].lo < caddr + csize)
            return BAD(f, d->path, "a chunk (%llu bytes at %llu) overlaps another dataset's data", (unsigned long long)csize,
                       (unsigned long long)caddr);
    bool filtered = false;
    for (int i = 0; i < k->pl.n; i++) filtered |= !(mask & (1u << i));
    if (filtered) {
        if (unfilter(f, k, src, csize, mask, &src)) return -1;
    } else if (csize < k->chunk_bytes) {
        return BAD(f, d->path, "chunk of %llu bytes, expected %llu", (unsigned long long)csize, (unsigned long long)k->chunk_bytes);
    }
    /* rows along the last dimension */
    unsigned es = d->type.size;
    uint64_t idx[FL_H5_MAX_DIMS] = {0};
    uint64_t row = r ? k->cd[r - 1] : 1, rown = r ? d->dims[r - 1] - off[r - 1] : 1;
    if (rown > row) rown = row;
    for (;;) {
        uint64_t so = 0, dof = 0;
        bool inside = true;
        for (int i = 0; i < r; i++) {
            so = so * k->cd[i] + idx[i];
            dof = dof * d->dims[i] + off[i] + idx[i];
            if (off[i] + idx[i] >= d->dims[i]) inside = false;
        }
        if (inside && convert(f, &d->type, src + so * es, rown, k->as_i64, k->out + dof * k->osz, d->path)) return -1;
        int i = r - 2;
        for (; i >= 0; i--) {
            if (++idx[i] < k->cd[i]) break;
            idx[i] = 0;
        }
        if (i < 0) break;
    }
    return 0;
}

/* The v1 B-tree (type 1) of a chunked dataset. */
static int chunk_node(fl_h5 *f, chunked *k, uint64_t addr, int level) {
    const char *path = k->d->path;
    if (--k->budget < 0) return BAD(f, path, "chunk B-tree has more nodes than the dataset has chunks (a loop?)");
    cur c = cur_at(f, addr, 8 + 2 * (uint64_t)f->so);
    if (c.bad || !sig(&c, "TREE")) return BAD(f, path, "chunk B-tree node at %llu is missing or not one", (unsigned long long)addr);
    unsigned type = u8(&c), lvl = u8(&c), n = u16(&c);
    if (type != 1) return BAD(f, path, "chunk B-tree node of type %u", type);
    if (level >= 0 && (int)lvl != level) return BAD(f, path, "chunk B-tree node at level %u, expected %d (a loop?)", lvl, level);
    if (lvl > FL_H5_MAX_DEPTH) return BAD(f, path, "chunk B-tree deeper than %d", FL_H5_MAX_DEPTH);
    uint64_t ksize = 8 + 8 * (uint64_t)(k->rank + 1);
    c = cur_at(f, addr + 8 + 2 * (uint64_t)f->so, (uint64_t)n * (ksize + (uint64_t)f->so) + ksize);
    if (c.bad) return BAD(f, path, "chunk B-tree node with %u entries runs past the file", n);
    for (unsigned i = 0; i < n; i++) {
        uint32_t csize = u32(&c), mask = u32(&c);
        uint64_t off[FL_H5_MAX_DIMS + 1];
        for (int j = 0; j <= k->rank; j++) off[j] = un(&c, 8);
        uint64_t child = addr_of(&c);
        int rc = lvl > 0 ? chunk_node(f, k, child, (int)lvl - 1) : place_chunk(f, k, off, child, csize, mask);
        if (rc) return rc;
    }
    return 0;
}

/* Where a dataset's data lie, as its data layout message gives it. */
typedef struct layout {
    unsigned cls;                     /* 0 compact, 1 contiguous, 2 chunked */
    uint64_t btree, single;           /* chunked: the v1 B-tree, or the one chunk of a v4 single-chunk index */
    uint64_t single_size;
    uint32_t single_mask;
    const uint8_t *data;              /* compact: the bytes inside the message */
    uint64_t dsize, daddr;            /* compact and contiguous: the size and address of the data */
} layout;

/* Decodes the data layout message (versions 1 to 5) into *L, and a chunked layout's rank and chunk dimensions
 * into k. */
static int parse_layout(fl_h5 *f, const fl_h5_dataset *d, const hmsg *lm, uint64_t raw, chunked *k, layout *L) {
    const char *path = d->path;
    *L = (layout){.btree = UNDEF, .single = UNDEF, .daddr = UNDEF};
    cur c = cur_mem(lm->p, lm->size, f);
    unsigned v = u8(&c);
    if (v == 1 || v == 2) {
        unsigned nd = u8(&c);
        L->cls = u8(&c);
        take(&c, 5);
        if (L->cls != 0) L->daddr = addr_of(&c);
        if (nd > FL_H5_MAX_DIMS + 1 || nd == 0) return BAD(f, path, "data layout of %u dimensions", nd);
        uint64_t prod = 1;
        for (unsigned i = 0; i < nd; i++) {
            uint64_t x = u32(&c);
            if (L->cls == 2 && i < nd - 1) k->cd[i] = x;
            prod *= x ? x : 1;
        }
        k->rank = (int)nd - 1;
        if (L->cls == 2) { L->btree = L->daddr; u32(&c); }
        else if (L->cls == 0) { L->dsize = u32(&c); L->data = take(&c, L->dsize); }
        else L->dsize = raw;
    } else if (v >= 3 && v <= 5) { /* v5 (HDF5 2.0, libver latest) encodes these classes as v4 */
        L->cls = u8(&c);
        if (L->cls == 0) { L->dsize = u16(&c); L->data = take(&c, L->dsize); }
        else if (L->cls == 1) { L->daddr = addr_of(&c); L->dsize = len_of(&c); }
        else if (L->cls == 2 && v == 3) {
            unsigned nd = u8(&c);
            L->btree = addr_of(&c);
            if (nd < 1 || nd > FL_H5_MAX_DIMS + 1) return BAD(f, path, "chunked layout of %u dimensions", nd);
            k->rank = (int)nd - 1;
            for (unsigned i = 0; i < nd; i++) { uint64_t x = u32(&c); if (i < nd - 1) k->cd[i] = x; }
        } else if (L->cls == 2) {
            unsigned flags = u8(&c), nd = u8(&c), enc = u8(&c);
            if (nd < 1 || nd > FL_H5_MAX_DIMS + 1 || enc < 1 || enc > 8)
                return BAD(f, path, "chunked layout of %u dimensions", nd);
            k->rank = (int)nd - 1;
            for (unsigned i = 0; i < nd; i++) { uint64_t x = un(&c, (int)enc); if (i < nd - 1) k->cd[i] = x; }
            unsigned index = u8(&c);
            if (index != 1) {
                static const char *names[] = {"", "single chunk", "implicit", "fixed array", "extensible array", "v2 B-tree"};
                return UNSUP(f, path, "chunk index '%s' (%u) is not supported (layout v4 reads single-chunk datasets; "
                             "write with h5py's default libver)", index <= 5 ? names[index] : "unknown", index);
            }
            if (flags & 2) { L->single_size = len_of(&c); L->single_mask = u32(&c); }
            L->single = addr_of(&c);
            if (!(flags & 2)) { /* no filters: the size is the chunk dimensions times the element size */
                L->single_size = 1;
                for (int i = 0; i < k->rank; i++) L->single_size *= k->cd[i];
                L->single_size *= d->type.size;
            }
        } else {
            return UNSUP(f, path, "data layout class %u (virtual datasets) is not supported", L->cls);
        }
    } else {
        return UNSUP(f, path, "data layout version %u", v);
    }
    if (c.bad) return BAD(f, path, "truncated data layout");
    return 0;
}

/* Reads a compact or contiguous dataset: the raw bytes in one piece, converted to out. */
static int read_unchunked(fl_h5 *f, const fl_h5_dataset *d, const layout *L, int nfilters, uint64_t raw, bool as_i64,
                          void *out) {
    const char *path = d->path;
    size_t osz = as_i64 ? 8 : 4;
    const uint8_t *data = L->data;
    int rc;
    if (nfilters) return BAD(f, path, "filters on a dataset that is not chunked");
    if (raw == 0) return 0;
    if (L->cls == 1 && L->daddr == UNDEF) { /* never written: fill value */
        memset(out, 0, (size_t)(d->npoints * osz));
        return 0;
    }
    if (L->dsize < raw)
        return BAD(f, path, "%llu bytes of data, the shape needs %llu", (unsigned long long)L->dsize,
                   (unsigned long long)raw);
    if (L->cls == 1) data = at(f, L->daddr, raw);
    if (!data) return BAD(f, path, "data (%llu bytes) outside the file", (unsigned long long)raw);
    if (L->cls == 1 && f->release && (rc = released_check(f, d, L->daddr, L->daddr + raw, as_i64, out)) != 1)
        return rc;
    rc = convert(f, &d->type, data, d->npoints, as_i64, out, path);
    if (rc == 0 && L->cls == 1 && f->release) release_data(f, d, data, L->daddr, L->daddr + raw, as_i64, out);
    return rc;
}

/* Checks the chunk shape against the dataset and sets the chunk size, the chunk count and the B-tree's node budget. */
static int size_chunks(fl_h5 *f, const fl_h5_dataset *d, uint64_t raw, chunked *k) {
    const char *path = d->path;
    if (k->rank != d->ndim) return BAD(f, path, "chunks of rank %d for a dataset of rank %d", k->rank, d->ndim);
    uint64_t cb = d->type.size;
    for (int i = 0; i < k->rank; i++) {
        if (k->cd[i] == 0) return BAD(f, path, "chunk dimension %d is 0", i);
        if (k->cd[i] > ((uint64_t)1 << 32) || cb > UINT64_MAX / k->cd[i]) return BAD(f, path, "chunk too large");
        cb *= k->cd[i];
    }
    if (cb > raw + ((uint64_t)1 << 20))
        return BAD(f, path, "chunks of %llu bytes for %llu bytes of data (the limit is the data + 1 MiB)",
                   (unsigned long long)cb, (unsigned long long)raw);
    k->chunk_bytes = cb;
    uint64_t nch = 1;
    for (int i = 0; i < k->rank; i++) {
        nch *= (d->dims[i] + k->cd[i] - 1) / k->cd[i];
        if (nch > FL_H5_MAX_CHUNKS) return BAD(f, path, "more than %d chunks", FL_H5_MAX_CHUNKS);
    }
    k->max_chunks = (long)nch;
    k->budget = (long)nch + 1000;
    return 0;
}

/* Reads a chunked dataset into out (zeros where no chunk was written), through two chunk buffers when filtered. */
static int read_chunks(fl_h5 *f, chunked *k, const layout *L, void *out) {
    const fl_h5_dataset *d = k->d;
    int rc = 0;
    memset(out, 0, (size_t)(d->npoints * k->osz));
    if (d->npoints == 0) return 0;
    if (k->pl.n) {
        k->buf = fl_malloc((size_t)k->chunk_bytes, "HDF5 chunk");
        k->buf2 = k->buf ? fl_malloc((size_t)k->chunk_bytes, "HDF5 chunk") : NULL;
        if (!k->buf2) rc = -1;
    }
    if (rc == 0 && L->single != UNDEF) {
        uint64_t zero[FL_H5_MAX_DIMS] = {0};
        rc = place_chunk(f, k, zero, L->single, L->single_size, L->single_mask);
    } else if (rc == 0 && L->btree != UNDEF) {
        rc = chunk_node(f, k, L->btree, -1);
    }
    free(k->buf);
    free(k->buf2);
    return rc;
}

/* Reads the data of the dataset whose object header is o, by its layout and filters. */
static int read_by_layout(fl_h5 *f, const fl_h5_dataset *d, const hobj *o, bool as_i64, void *out) {
    const char *path = d->path;
    size_t osz = as_i64 ? 8 : 4;
    uint64_t raw = d->npoints * d->type.size;
    const hmsg *lm = obj_find(o, M_LAYOUT);
    pipeline pl;
    if (!lm) return BAD(f, path, "no data layout message");
    if (parse_filters(f, obj_find(o, M_FILTERS), path, &pl)) return -1;
    chunked k = {.d = d, .pl = pl, .as_i64 = as_i64, .out = out, .osz = osz, .budget = 1000000};
    layout L;
    int rc = parse_layout(f, d, lm, raw, &k, &L);
    if (rc) return rc;
    if (L.btree == UNDEF && L.single == UNDEF && k.rank == 0 && L.cls == 2) {
        memset(out, 0, (size_t)(d->npoints * osz));
        return 0;
    }
    if (L.cls != 2) return read_unchunked(f, d, &L, pl.n, raw, as_i64, out);
    if ((rc = size_chunks(f, d, raw, &k))) return rc;
    return read_chunks(f, &k, &L, out);
}

int fl_h5_dataset_read(fl_h5 *f, const fl_h5_dataset *d, bool as_i64, void *out, uint64_t budget_bytes) {
    const char *path = d->path;
    size_t osz = as_i64 ? 8 : 4;
    if (d->npoints > budget_bytes / osz)
        return BAD(f, path, "%llu elements, more than the %llu bytes expected", (unsigned long long)d->npoints, (unsigned long long)budget_bytes);
    if (d->type.cls != FL_H5_INT && d->type.cls != FL_H5_FLOAT) return BAD(f, path, "is not numeric (datatype class %s)", class_name(d->type.cls));
    hobj o;
    if (obj_read(f, d->addr, path, &o)) return -1;
    int rc = read_by_layout(f, d, &o, as_i64, out);
    obj_free(&o);
    return rc;
}

/* ------------------------------------------------------------ writing */

/* The file written: superblock v0 (96 bytes), then for every object its v1
 * header (and for a group its B-tree node, local heap and symbol nodes),
 * then one global heap collection with every string, then the raw data. */

#define W_LEAF_K 4 /* a symbol node holds 2K = 8 links, as libhdf5's default */

typedef struct wattr { char *name; bool empty_list, scalar; int n; char **s; uint32_t *idx; } wattr;

typedef struct wnode {
    char *name;
    int parent;
    bool is_group, is_i64;
    int ndim;
    uint64_t dims[FL_H5_MAX_DIMS], bytes;
    const void *data;
    uint8_t small[8];
    wattr *attrs;
    int nattrs;
    int *kids, nkids;
    /* layout */
    uint64_t oh, oh_size, bt, heap, heap_data, heap_size, snod, data_addr;
    int nsnod;
    uint64_t *name_off; /* per kid, sorted order */
} wnode;

struct fl_h5w {
    wnode *n;
    int count, cap;
    int nstrings;
    uint64_t gheap, gheap_size;
    unsigned int_k;
};

static wnode *wnew(fl_h5w *w, int parent, const char *name, size_t nl, bool group) {
    if (w->count == w->cap) {
        int cap = w->cap ? w->cap * 2 : 32;
        wnode *n = realloc(w->n, (size_t)cap * sizeof *n);
        if (!n) return fl_error_null(FL_ERR_NOMEM, "out of memory writing HDF5");
        w->n = n;
        w->cap = cap;
    }
    wnode *x = &w->n[w->count];
    memset(x, 0, sizeof *x);
    x->name = strndup(name, nl);
    x->parent = parent;
    x->is_group = group;
    if (!x->name) return fl_error_null(FL_ERR_NOMEM, "out of memory writing HDF5");
    if (parent >= 0) {
        wnode *p = &w->n[parent];
        int *k = realloc(p->kids, (size_t)(p->nkids + 1) * sizeof *k);
        if (!k) { free(x->name); return fl_error_null(FL_ERR_NOMEM, "out of memory writing HDF5"); }
        p->kids = k;
        p->kids[p->nkids++] = w->count;
    }
    w->count++;
    return x;
}

fl_h5w *fl_h5w_new(void) {
    fl_h5w *w = fl_calloc(1, sizeof *w, "HDF5 writer");
    if (w && !wnew(w, -1, "", 0, true)) { free(w); return NULL; }
    return w;
}

void fl_h5w_free(fl_h5w *w) {
    if (!w) return;
    for (int i = 0; i < w->count; i++) {
        wnode *x = &w->n[i];
        for (int a = 0; a < x->nattrs; a++) {
            for (int k = 0; k < x->attrs[a].n; k++) free(x->attrs[a].s[k]);
            free(x->attrs[a].s);
            free(x->attrs[a].idx);
            free(x->attrs[a].name);
        }
        free(x->attrs);
        free(x->kids);
        free(x->name);
        free(x->name_off);
    }
    free(w->n);
    free(w);
}

static int wkid(fl_h5w *w, int parent, const char *name, size_t nl) {
    for (int i = 0; i < w->n[parent].nkids; i++) {
        int k = w->n[parent].kids[i];
        if (strlen(w->n[k].name) == nl && memcmp(w->n[k].name, name, nl) == 0) return k;
    }
    return -1;
}

/* Walks path below parent, making groups; the last component is made a
 * group when last_group, else returned as (name, len) for the caller. */
static int wpath(fl_h5w *w, int parent, const char *path, bool last_group, const char **last, size_t *last_len) {
    int g = parent;
    const char *p = path;
    for (;;) {
        while (*p == '/') p++;
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        const char *rest = p + n;
        while (*rest == '/') rest++;
        if (n == 0) return g;
        if (!*rest && !last_group) { *last = p; *last_len = n; return g; }
        int k = wkid(w, g, p, n);
        if (k < 0) {
            if (!wnew(w, g, p, n, true)) return -1;
            k = w->count - 1;
        } else if (!w->n[k].is_group) {
            fl_error(FL_ERR_INVALID_ARG, "HDF5 writer: '%.*s' in '%s' is a dataset, not a group", (int)n, p, path);
            return -1;
        }
        g = k;
        p = rest;
        if (!*p) return g;
    }
}

int fl_h5w_group(fl_h5w *w, int parent, const char *path) {
    if (parent < 0 || parent >= w->count || !w->n[parent].is_group) return fl_error(FL_ERR_INVALID_ARG, "HDF5 writer: bad parent"), -1;
    return wpath(w, parent, path, true, NULL, NULL);
}

int fl_h5w_dataset(fl_h5w *w, int parent, const char *path, bool is_i64, int ndim, const int64_t *shape, const void *data) {
    if (parent < 0 || parent >= w->count || !w->n[parent].is_group || ndim < 0 || ndim > FL_H5_MAX_DIMS)
        return fl_error(FL_ERR_INVALID_ARG, "HDF5 writer: bad dataset '%s'", path), -1;
    const char *name = NULL;
    size_t nl = 0;
    int g = wpath(w, parent, path, false, &name, &nl);
    if (g < 0) return -1;
    if (!name) return fl_error(FL_ERR_INVALID_ARG, "HDF5 writer: empty dataset name"), -1;
    if (wkid(w, g, name, nl) >= 0) return fl_error(FL_ERR_INVALID_ARG, "HDF5 writer: '%s' exists", path), -1;
    wnode *x = wnew(w, g, name, nl, false);
    if (!x) return -1;
    x->is_i64 = is_i64;
    x->ndim = ndim;
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return fl_error(FL_ERR_INVALID_ARG, "HDF5 writer: negative dimension in '%s'", path), -1;
        x->dims[i] = (uint64_t)shape[i];
        n *= x->dims[i];
    }
    x->bytes = n * (is_i64 ? 8 : 4);
    if (x->bytes <= sizeof x->small) {
        if (x->bytes) memcpy(x->small, data, (size_t)x->bytes);
        x->data = NULL;
    } else {
        x->data = data;
    }
    return w->count - 1;
}

int fl_h5w_attr_strings(fl_h5w *w, int obj, const char *name, const char *const *s, int n, bool scalar) {
    if (obj < 0 || obj >= w->count || n < 0 || (scalar && n != 1)) return fl_error(FL_ERR_INVALID_ARG, "HDF5 writer: bad attribute '%s'", name), -1;
    wnode *x = &w->n[obj];
    wattr *a = realloc(x->attrs, (size_t)(x->nattrs + 1) * sizeof *a);
    if (!a) return fl_error(FL_ERR_NOMEM, "out of memory writing HDF5"), -1;
    x->attrs = a;
    a = &x->attrs[x->nattrs];
    memset(a, 0, sizeof *a);
    a->name = strdup(name);
    a->scalar = scalar;
    a->empty_list = !scalar && n == 0;
    a->s = calloc((size_t)n + 1, sizeof *a->s);
    a->idx = calloc((size_t)n + 1, sizeof *a->idx);
    bool ok = a->name && a->s && a->idx;
    for (int i = 0; ok && i < n; i++) ok = (a->s[i] = strdup(s[i] ? s[i] : "")) != NULL;
    a->n = n;
    x->nattrs++;
    if (!ok) return fl_error(FL_ERR_NOMEM, "out of memory writing HDF5"), -1;
    return 0;
}

/* Sizes of the messages written (each padded to 8 in a v1 header). */
#define PAD8(x) (((x) + 7) & ~(uint64_t)7)
enum { DT_F32 = 20, DT_I64 = 12, DT_VSTR = 20, DT_F64 = 20 };

static uint64_t space_size(int ndim) { return 8 + 8 * (uint64_t)ndim; }

static uint64_t attr_size(const wattr *a) {
    int nd = a->scalar ? 0 : 1;
    uint64_t data = a->empty_list ? 0 : 16 * (uint64_t)a->n;
    return 16 + PAD8(strlen(a->name) + 1) + PAD8(a->empty_list ? DT_F64 : DT_VSTR) + PAD8(space_size(nd)) + data;
}

static uint64_t btree_size(unsigned k) { return 8 + 2 * 8 + 2 * (uint64_t)k * 8 + (2 * (uint64_t)k + 1) * 8; }
#define SNOD_SIZE (8 + 2 * W_LEAF_K * 40)

static int cmp_kid_ctx_sort(const void *a, const void *b, void *ctx) {
    const fl_h5w *w = ctx;
    return strcmp(w->n[*(const int *)a].name, w->n[*(const int *)b].name);
}

/* little-endian stores */
static void st(uint8_t *p, uint64_t v, int n) { for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i)); }

static uint8_t *put_msg(uint8_t *p, unsigned type, uint64_t size) {
    st(p, type, 2);
    st(p + 2, size, 2);
    return p + 8;
}

static void put_space(uint8_t *p, int ndim, const uint64_t *dims) {
    p[0] = 1;
    p[1] = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++) st(p + 8 + 8 * i, dims[i], 8);
}

static void put_float_type(uint8_t *p, int size) {
    p[0] = 0x11;
    p[1] = 0x20;
    p[2] = size == 4 ? 31 : 63;
    st(p + 4, (uint64_t)size, 4);
    st(p + 8, 0, 2);
    st(p + 10, (uint64_t)size * 8, 2);
    p[12] = size == 4 ? 23 : 52;
    p[13] = size == 4 ? 8 : 11;
    p[14] = 0;
    p[15] = size == 4 ? 23 : 52;
    st(p + 16, size == 4 ? 127 : 1023, 4);
}

static void put_int_type(uint8_t *p, int size, bool is_signed) {
    p[0] = 0x10;
    p[1] = is_signed ? 8 : 0;
    st(p + 4, (uint64_t)size, 4);
    st(p + 10, (uint64_t)size * 8, 2);
}

static void put_vstr_type(uint8_t *p) {
    p[0] = 0x19;
    p[1] = 0x01; /* string, null-terminated padding */
    p[2] = 0x01; /* UTF-8 */
    st(p + 4, 16, 4);
    put_int_type(p + 8, 1, false);
}

/* The writer's two passes (issue 45: one 229-line function): h5w_layout gives every object its address and
 * the file its size; then the superblock, the global heap of the attributes' strings, and each object: its
 * header (a group's symbol table, a dataset's space, type, fill, layout and data), its attributes, and a
 * group's links (local heap, symbol nodes, B-tree). */
static int h5w_layout(fl_h5w *w, uint64_t *end) {
    uint64_t pos = 96;
    unsigned maxsnod = 1;
    for (int i = 0; i < w->count; i++) {
        wnode *x = &w->n[i];
        if (x->is_group) {
            int ns = (x->nkids + 2 * W_LEAF_K - 1) / (2 * W_LEAF_K);
            x->nsnod = ns;
            if ((unsigned)ns > maxsnod) maxsnod = (unsigned)ns;
        }
    }
    w->int_k = maxsnod > 32 ? (maxsnod + 1) / 2 : 16;
    w->nstrings = 0;
    uint64_t gh_bytes = 0;
    for (int i = 0; i < w->count; i++) {
        wnode *x = &w->n[i];
        uint64_t sz = 16;
        for (int a = 0; a < x->nattrs; a++) {
            uint64_t as = attr_size(&x->attrs[a]);
            if (as - 8 > 65535)
                return fl_error(FL_ERR_UNSUPPORTED, "HDF5 writer: attribute '%s' of '%s' has %d strings: its header "
                                "message would exceed 64 KiB", x->attrs[a].name, x->name, x->attrs[a].n), -1;
            sz += as;
            for (int k = 0; k < x->attrs[a].n; k++) {
                x->attrs[a].idx[k] = (uint32_t)(++w->nstrings);
                gh_bytes += 16 + PAD8(strlen(x->attrs[a].s[k]));
            }
        }
        if (x->is_group) sz += 8 + 16;
        else sz += (8 + PAD8(space_size(x->ndim))) + (8 + PAD8(x->is_i64 ? DT_I64 : DT_F32)) + (8 + 8) + (8 + 24);
        x->oh = pos;
        x->oh_size = sz;
        pos += sz;
        if (x->is_group) {
            x->bt = pos;
            pos += btree_size(w->int_k);
            uint64_t hd = 8;
            for (int k = 0; k < x->nkids; k++) hd += PAD8(strlen(w->n[x->kids[k]].name) + 1);
            x->heap = pos;
            x->heap_data = pos + 32;
            x->heap_size = hd;
            pos += 32 + hd;
            x->snod = pos;
            pos += (uint64_t)x->nsnod * SNOD_SIZE;
        }
    }
    if (w->nstrings > 65535) return fl_error(FL_ERR_UNSUPPORTED, "HDF5 writer: more than 65535 strings"), -1;
    w->gheap = pos;
    w->gheap_size = 16 + gh_bytes;
    if (w->gheap_size < 4096) w->gheap_size = 4096;
    pos += w->gheap_size;
    for (int i = 0; i < w->count; i++) {
        wnode *x = &w->n[i];
        if (x->is_group) continue;
        x->data_addr = x->bytes ? pos : UNDEF;
        pos += x->bytes;
    }
    if (pos > (uint64_t)SIZE_MAX / 2) return fl_error(FL_ERR_NOMEM, "HDF5 writer: %llu bytes", (unsigned long long)pos), -1;
    *end = pos;
    return 0;
}

static void h5w_superblock(const fl_h5w *w, uint8_t *b, uint64_t pos) {
    memcpy(b, "\x89HDF\r\n\x1a\n", 8);
    b[13] = 8;
    b[14] = 8;
    st(b + 16, W_LEAF_K, 2);
    st(b + 18, w->int_k, 2);
    st(b + 24, 0, 8);         /* base */
    st(b + 32, UNDEF, 8);     /* free space */
    st(b + 40, pos, 8);       /* end of file */
    st(b + 48, UNDEF, 8);     /* driver info */
    st(b + 56, 0, 8);         /* root entry: name offset */
    st(b + 64, w->n[0].oh, 8);
    st(b + 72, 1, 4);         /* cache: symbol table */
    st(b + 80, w->n[0].bt, 8);
    st(b + 88, w->n[0].heap, 8);
}

static void h5w_global_heap(const fl_h5w *w, uint8_t *b) {
    uint8_t *g = b + w->gheap;
    memcpy(g, "GCOL", 4);
    g[4] = 1;
    st(g + 8, w->gheap_size, 8);
    uint8_t *gp = g + 16;
    for (int i = 0; i < w->count; i++)
        for (int a = 0; a < w->n[i].nattrs; a++) {
            const wattr *at_ = &w->n[i].attrs[a];
            for (int k = 0; k < at_->n; k++) {
                size_t l = strlen(at_->s[k]);
                st(gp, at_->idx[k], 2);
                st(gp + 8, l, 8);
                memcpy(gp + 16, at_->s[k], l);
                gp += 16 + PAD8(l);
            }
        }
    uint64_t free_space = w->gheap_size - (uint64_t)(gp - g);
    if (free_space >= 16) st(gp + 8, free_space, 8);
}

/* x's object header but its attributes; returns where they go */
static uint8_t *h5w_object_header(uint8_t *b, const wnode *x) {
    uint8_t *p = b + x->oh;
    int nmsg = x->nattrs + (x->is_group ? 1 : 4);
    p[0] = 1;
    st(p + 2, (uint64_t)nmsg, 2);
    st(p + 4, 1, 4);
    st(p + 8, x->oh_size - 16, 4);
    p += 16;
    if (x->is_group) {
        p = put_msg(p, M_STAB, 16);
        st(p, x->bt, 8);
        st(p + 8, x->heap, 8);
        p += 16;
    } else {
        uint64_t ss = PAD8(space_size(x->ndim));
        p = put_msg(p, M_DATASPACE, ss);
        put_space(p, x->ndim, x->dims);
        p += ss;
        uint64_t ts = PAD8(x->is_i64 ? DT_I64 : DT_F32);
        p = put_msg(p, M_DATATYPE, ts);
        p[-4] = 1; /* constant */
        if (x->is_i64) put_int_type(p, 8, true);
        else put_float_type(p, 4);
        p += ts;
        p = put_msg(p, M_FILL, 8);
        p[-4] = 1;
        p[0] = 2; /* version 2, allocation late, written if set, undefined */
        p[1] = 2;
        p[2] = 2;
        p[3] = 0;
        p += 8;
        p = put_msg(p, M_LAYOUT, 24);
        p[0] = 3;
        p[1] = 1; /* contiguous */
        st(p + 2, x->data_addr, 8);
        st(p + 10, x->bytes, 8);
        p += 24;
        if (x->bytes) {
            const uint8_t *src = x->data ? x->data : x->small;
            static const union { uint16_t u; uint8_t c[2]; } host = {1};
            if (host.c[0] == 1) {
                memcpy(b + x->data_addr, src, (size_t)x->bytes);
            } else {
                unsigned es = x->is_i64 ? 8 : 4;
                for (uint64_t e = 0; e < x->bytes; e += es)
                    for (unsigned k = 0; k < es; k++) b[x->data_addr + e + k] = src[e + es - 1 - k];
            }
        }
    }
    return p;
}

static void h5w_attributes(const fl_h5w *w, uint8_t *p, const wnode *x) {
    for (int a = 0; a < x->nattrs; a++) {
        const wattr *at_ = &x->attrs[a];
        uint64_t as = attr_size(at_);
        p = put_msg(p, M_ATTR, as - 8);
        size_t nl = strlen(at_->name) + 1;
        uint64_t dt = at_->empty_list ? DT_F64 : DT_VSTR;
        int nd = at_->scalar ? 0 : 1;
        p[0] = 1;
        st(p + 2, nl, 2);
        st(p + 4, dt, 2);
        st(p + 6, space_size(nd), 2);
        p += 8;
        memcpy(p, at_->name, nl);
        p += PAD8(nl);
        if (at_->empty_list) put_float_type(p, 8);
        else put_vstr_type(p);
        p += PAD8(dt);
        uint64_t dim = (uint64_t)at_->n;
        put_space(p, nd, &dim);
        p += PAD8(space_size(nd));
        for (int k = 0; !at_->empty_list && k < at_->n; k++, p += 16) {
            st(p, strlen(at_->s[k]), 4);
            st(p + 4, w->gheap, 8);
            st(p + 12, at_->idx[k], 4);
        }
    }
}

/* a group's links sorted by name, its local heap, symbol nodes and B-tree */
static int h5w_group_links(fl_h5w *w, uint8_t *b, wnode *x) {
    if (x->nkids) qsort_r(x->kids, (size_t)x->nkids, sizeof *x->kids, cmp_kid_ctx_sort, w);
    uint8_t *h = b + x->heap;
    memcpy(h, "HEAP", 4);
    st(h + 8, x->heap_size, 8);
    st(h + 16, 1, 8); /* no free block */
    st(h + 24, x->heap_data, 8);
    x->name_off = calloc((size_t)x->nkids + 1, sizeof *x->name_off);
    if (!x->name_off) return fl_error(FL_ERR_NOMEM, "out of memory writing HDF5"), -1;
    uint64_t ho = 8;
    for (int k = 0; k < x->nkids; k++) {
        const char *nm = w->n[x->kids[k]].name;
        x->name_off[k] = ho;
        memcpy(b + x->heap_data + ho, nm, strlen(nm));
        ho += PAD8(strlen(nm) + 1);
    }
    uint8_t *t = b + x->bt;
    memcpy(t, "TREE", 4);
    t[4] = 0;
    t[5] = 0;
    st(t + 6, (uint64_t)x->nsnod, 2);
    st(t + 8, UNDEF, 8);
    st(t + 16, UNDEF, 8);
    uint8_t *kp = t + 24;
    st(kp, 0, 8); /* key 0: "" */
    kp += 8;
    for (int s = 0; s < x->nsnod; s++) {
        int first = s * 2 * W_LEAF_K, last = first + 2 * W_LEAF_K;
        if (last > x->nkids) last = x->nkids;
        uint64_t sa = x->snod + (uint64_t)s * SNOD_SIZE;
        st(kp, sa, 8);
        st(kp + 8, x->name_off[last - 1], 8);
        kp += 16;
        uint8_t *sn = b + sa;
        memcpy(sn, "SNOD", 4);
        sn[4] = 1;
        st(sn + 6, (uint64_t)(last - first), 2);
        uint8_t *e = sn + 8;
        for (int k = first; k < last; k++, e += 40) {
            const wnode *kid = &w->n[x->kids[k]];
            st(e, x->name_off[k], 8);
            st(e + 8, kid->oh, 8);
            if (kid->is_group) {
                st(e + 16, 1, 4);
                st(e + 24, kid->bt, 8);
                st(e + 32, kid->heap, 8);
            }
        }
    }
    return 0;
}

int fl_h5w_finish(fl_h5w *w, void **data, size_t *len) {
    *data = NULL;
    *len = 0;
    uint64_t pos;
    if (h5w_layout(w, &pos) != 0) return -1;
    uint8_t *b = fl_calloc(1, (size_t)pos, "HDF5 file image");
    if (!b) return -1;
    h5w_superblock(w, b, pos);
    h5w_global_heap(w, b);
    for (int i = 0; i < w->count; i++) {
        wnode *x = &w->n[i];
        h5w_attributes(w, h5w_object_header(b, x), x);
        if (x->is_group && h5w_group_links(w, b, x) != 0) {
            free(b);
            return -1;
        }
    }
    *data = b;
    *len = (size_t)pos;
    return 0;
}
