/*
 * test_h5.c — flynn's HDF5 reader and writer (src/keras/h5.c): the fixtures
 * h5py wrote (tools/h5_fixtures.py -> tests/fixtures/h5), every Keras
 * fixture, round trips of what the writer makes, and corrupt images
 * (every truncation, bit flips, bad checksums, a B-tree and a continuation
 * that point to themselves, huge declared sizes): each must be a clean
 * message, never a crash, a leak or a hang (the suite runs it under ASan).
 * Where libhdf5 is installed (FLYNN_TEST_LIBHDF5) it is the independent
 * check: it reads every file flynn writes and every fixture, and must agree
 * with flynn's reader value for value.
 *
 *   test_h5 <tests/fixtures> [<tests/fuzz/regressions/h5>]
 */
#include "keras/h5.h"
#include "keras/keras.h"
#include "check.h"

#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifdef FLYNN_TEST_LIBHDF5
#include <hdf5.h>
#endif

static const char *fixtures;

static void *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
    fclose(f);
    *len = (size_t)n;
    return b;
}

static char *fx(const char *name) {
    static char buf[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/h5/%s", fixtures, name);
    return buf[k];
}

/* An open fixture (image kept alive). */
typedef struct fixture { void *data; size_t len; fl_h5 *f; } fixture;

static fixture open_fx(const char *name) {
    fixture x = {0};
    x.data = slurp(fx(name), &x.len);
    CHECK_MSG(x.data != NULL, "cannot read %s", fx(name));
    if (x.data) x.f = fl_h5_read_open(x.data, x.len, name);
    CHECK_MSG(x.f != NULL, "%s: %s", name, fl_last_error());
    return x;
}

static void close_fx(fixture *x) {
    fl_h5_read_close(x->f);
    free(x->data);
}

/* Reads dataset path as float32 (as_i64 false) or int64; n elements expected. */
static void *read_ds(fl_h5 *f, const char *path, bool as_i64, uint64_t n) {
    uint64_t o;
    int r = fl_h5_find(f, fl_h5_root(f), path, &o);
    CHECK_MSG(r == 1, "%s: find: %d %s", path, r, r < 0 ? fl_last_error() : "");
    if (r != 1) return NULL;
    fl_h5_dataset d;
    if (fl_h5_dataset_open(f, o, path, &d) != 0) { CHECK_MSG(0, "%s: %s", path, fl_last_error()); return NULL; }
    CHECK_MSG(d.npoints == n, "%s: %llu points, expected %llu", path, (unsigned long long)d.npoints, (unsigned long long)n);
    if (d.npoints != n) return NULL;
    void *out = malloc((size_t)n * 8 + 8);
    if (fl_h5_dataset_read(f, &d, as_i64, out, n * (as_i64 ? 8 : 4)) != 0) {
        CHECK_MSG(0, "%s: %s", path, fl_last_error());
        free(out);
        return NULL;
    }
    return out;
}

/* Expects reading dataset path to fail with msg in the message. */
static void refuse_ds(fl_h5 *f, const char *path, const char *msg) {
    uint64_t o;
    int r = fl_h5_find(f, fl_h5_root(f), path, &o);
    fl_h5_dataset d;
    if (r == 1 && fl_h5_dataset_open(f, o, path, &d) == 0) {
        float buf[64];
        r = d.npoints <= 64 ? fl_h5_dataset_read(f, &d, false, buf, sizeof buf) : -1;
        CHECK_MSG(r != 0, "%s: read, expected a refusal (%s)", path, msg);
    }
    CHECK_STR_CONTAINS(fl_last_error(), msg);
}

static char *attr1(fl_h5 *f, uint64_t obj, const char *name) {
    char **s = NULL;
    int n = fl_h5_attr_strings(f, obj, name, &s);
    CHECK_MSG(n >= 1, "attribute %s: %d %s", name, n, n == -1 ? fl_last_error() : "");
    char *r = n >= 1 ? strdup(s[0]) : NULL;
    fl_h5_free_strings(s);
    return r;
}

/* ------------------------------------------------------------ checksum */

static void test_lookup3(void) {
    /* the values of Bob Jenkins' lookup3.c driver */
    CHECK(fl_h5_lookup3("", 0, 0) == 0xdeadbeefu);
    CHECK(fl_h5_lookup3("Four score and seven years ago", 30, 0) == 0x17770551u);
    CHECK(fl_h5_lookup3("Four score and seven years ago", 30, 1) == 0xcd628161u);
}

/* ------------------------------------------------------------ h5py fixtures */

static void test_types(void) {
    fixture x = open_fx("types.h5");
    if (!x.f) { free(x.data); return; }
    const char *orders[] = {"le", "be"};
    for (int o = 0; o < 2; o++) {
        for (int k = 1; k <= 8; k *= 2) {
            for (int u = 0; u < 2; u++) {
                char p[32];
                snprintf(p, sizeof p, "%c%d%s", u ? 'u' : 'i', k, orders[o]);
                int64_t *vi = read_ds(x.f, p, true, 12);
                float *vf = read_ds(x.f, p, false, 12);
                for (int i = 0; vi && vf && i < 12; i++) {
                    int64_t want = (i * 7) % 23 - (u ? 0 : 11);
                    CHECK_MSG(vi[i] == want && vf[i] == (float)want, "%s[%d] = %lld / %g, expected %lld", p, i, (long long)vi[i], vf[i], (long long)want);
                }
                free(vi);
                free(vf);
            }
        }
        for (int k = 4; k <= 8; k *= 2) {
            char p[32];
            snprintf(p, sizeof p, "f%d%s", k, orders[o]);
            float *vf = read_ds(x.f, p, false, 12);
            int64_t *vi = read_ds(x.f, p, true, 12);
            for (int i = 0; vf && vi && i < 12; i++) {
                CHECK_MSG(vf[i] == (float)(i * 0.5 - 3.25), "%s[%d] = %g", p, i, vf[i]);
                CHECK(vi[i] == (int64_t)(i * 0.5 - 3.25));
            }
            free(vf);
            free(vi);
        }
    }
    int64_t *s = read_ds(x.f, "scalar_i8", true, 1);
    CHECK(s && s[0] == -5);
    free(s);
    float *sf = read_ds(x.f, "scalar_f4", false, 1);
    CHECK(sf && sf[0] == 0.25f);
    free(sf);
    free(read_ds(x.f, "empty", false, 0));
    /* the budget is checked before anything is read */
    uint64_t o;
    fl_h5_dataset d;
    CHECK(fl_h5_find(x.f, fl_h5_root(x.f), "f4le", &o) == 1 && fl_h5_dataset_open(x.f, o, "f4le", &d) == 0);
    float buf[12];
    CHECK(fl_h5_dataset_read(x.f, &d, false, buf, 11 * 4) != 0);
    CHECK_STR_CONTAINS(fl_last_error(), "12 elements, more than the 44 bytes expected");
    /* attributes */
    uint64_t root = fl_h5_root(x.f);
    char *v = attr1(x.f, root, "vlen");
    CHECK(v && strcmp(v, "hello") == 0);
    free(v);
    v = attr1(x.f, root, "fixed");
    CHECK(v && strcmp(v, "fixed str") == 0);
    free(v);
    char **l = NULL;
    CHECK(fl_h5_attr_strings(x.f, root, "vlen_list", &l) == 4 && l && strcmp(l[0], "a") == 0 && strcmp(l[1], "bc") == 0 &&
          strcmp(l[2], "") == 0 && strcmp(l[3], "def") == 0 && l[4] == NULL);
    fl_h5_free_strings(l);
    CHECK(fl_h5_attr_strings(x.f, root, "fixed_list", &l) == 3 && l && strcmp(l[0], "x") == 0 && strcmp(l[1], "yz") == 0 &&
          strcmp(l[2], "w") == 0);
    fl_h5_free_strings(l);
    CHECK(fl_h5_attr_strings(x.f, root, "empty_list", &l) == 0 && l && l[0] == NULL);
    fl_h5_free_strings(l);
    CHECK(fl_h5_attr_strings(x.f, root, "absent", &l) == -2 && l == NULL);
    CHECK(fl_h5_attr_strings(x.f, root, "number", &l) == -1);
    CHECK_STR_CONTAINS(fl_last_error(), "attribute 'number'");
    CHECK(fl_h5_find(x.f, root, "g", &o) == 1);
    v = attr1(x.f, o, "name");
    CHECK(v && strcmp(v, "group g") == 0);
    free(v);
    CHECK(fl_h5_find(x.f, root, "g/nothing", &o) == 0);
    close_fx(&x);

    x = open_fx("compact_ds.h5");
    if (x.f) {
        float *c = read_ds(x.f, "compact", false, 6);
        for (int i = 0; c && i < 6; i++) CHECK(c[i] == (float)(i * 0.5 - 3.25));
        free(c);
    }
    close_fx(&x);
}

static void check_floats(fl_h5 *f, const char *path, int n) {
    float *v = read_ds(f, path, false, (uint64_t)n);
    for (int i = 0; v && i < n; i++) CHECK_MSG(v[i] == (float)(i * 0.5 - 3.25), "%s[%d] = %g", path, i, v[i]);
    free(v);
}

static void test_chunked(void) {
    fixture x = open_fx("chunked.h5");
    if (!x.f) { free(x.data); return; }
    check_floats(x.f, "plain", 35);
    check_floats(x.f, "deflate", 35);
    check_floats(x.f, "shuffle_deflate", 35);
    check_floats(x.f, "many", 300);
    int64_t *s = read_ds(x.f, "shuffle_i2", true, 60);
    for (int i = 0; s && i < 60; i++) CHECK(s[i] == (i * 7) % 23 - 11);
    free(s);
    float *sp = read_ds(x.f, "sparse", false, 10);
    for (int i = 0; sp && i < 10; i++) CHECK(sp[i] == (i == 4 ? 1.0f : i == 5 ? 2.0f : 0.0f));
    free(sp);
    refuse_ds(x.f, "lzf", "filter 'lzf' (id 32000) is not supported");
    refuse_ds(x.f, "fletcher", "filter 'fletcher32' (id 3) is not supported");
    close_fx(&x);
}

static void test_groups(void) {
    fixture x = open_fx("groups.h5");
    if (!x.f) { free(x.data); return; }
    uint64_t root = fl_h5_root(x.f), g, o;
    CHECK(fl_h5_find(x.f, root, "many", &g) == 1);
    char **names = NULL;
    int n = fl_h5_links(x.f, g, NULL, &names);
    CHECK_MSG(n == 300, "%d links: %s", n, n < 0 ? fl_last_error() : "");
    for (int i = 0; n == 300 && i < 300; i++) {
        char want[16];
        snprintf(want, sizeof want, "d%03d", i);
        CHECK(strcmp(names[i], want) == 0);
    }
    fl_h5_free_strings(names);
    float *v = read_ds(x.f, "many/d299", false, 1);
    CHECK(v && v[0] == 0.0f);
    free(v);
    CHECK(fl_h5_find(x.f, root, "/a/b/c/d", &o) == 1);
    char *s = attr1(x.f, o, "deep");
    CHECK(s && strcmp(s, "yes") == 0);
    free(s);
    CHECK(fl_h5_find(x.f, root, "soft/d001", &o) == -1);
    CHECK_STR_CONTAINS(fl_last_error(), "soft and external links are not supported");
    close_fx(&x);
}

static void test_latest(void) {
    fixture x = open_fx("latest.h5");
    if (!x.f) { free(x.data); return; }
    uint64_t root = fl_h5_root(x.f), g;
    const char *groups[] = {"dense", "compact", "ordered"};
    int counts[] = {40, 3, 20};
    for (int k = 0; k < 3; k++) {
        char **names = NULL;
        CHECK(fl_h5_find(x.f, root, groups[k], &g) == 1);
        int n = fl_h5_links(x.f, g, NULL, &names);
        CHECK_MSG(n == counts[k], "%s: %d links: %s", groups[k], n, n < 0 ? fl_last_error() : "");
        fl_h5_free_strings(names);
    }
    float *v = read_ds(x.f, "dense/d39", false, 1);
    CHECK(v && v[0] == 0.0f);
    free(v);
    int64_t *iv = read_ds(x.f, "compact/d2", true, 1);
    CHECK(iv && iv[0] == 2);
    free(iv);
    for (int i = 0; i < 30; i++) {
        char name[16], want[32];
        snprintf(name, sizeof name, "attr%02d", i);
        snprintf(want, sizeof want, "value %d", i);
        char *s = attr1(x.f, root, name);
        CHECK_MSG(s && strcmp(s, want) == 0, "%s = %s", name, s ? s : "(null)");
        free(s);
    }
    char **l = NULL;
    char *lg = attr1(x.f, root, "long");
    CHECK(lg && strlen(lg) == 1000 && strspn(lg, "x") == 1000);
    free(lg);
    CHECK(fl_h5_attr_strings(x.f, root, "huge", &l) == -1);
    CHECK_STR_CONTAINS(fl_last_error(), "huge fractal heap objects are not supported");
    check_floats(x.f, "contig", 12);
    check_floats(x.f, "single", 12);
    check_floats(x.f, "ordered/z07", 12);
    refuse_ds(x.f, "farray", "chunk index 'fixed array' (3) is not supported");
    close_fx(&x);

    x = open_fx("v2.h5");
    if (!x.f) { free(x.data); return; }
    check_floats(x.f, "w", 6);
    char **names = NULL;
    CHECK(fl_h5_find(x.f, fl_h5_root(x.f), "t", &g) == 1 && fl_h5_links(x.f, g, NULL, &names) == 12);
    fl_h5_free_strings(names);
    CHECK(fl_h5_attr_strings(x.f, g, "a03", &l) == -1); /* an integer attribute: not text */
    CHECK_STR_CONTAINS(fl_last_error(), "is not text");
    fl_h5_read_close(x.f);
    /* a damaged superblock checksum */
    ((uint8_t *)x.data)[20] ^= 1;
    fl_h5 *bad = fl_h5_read_open(x.data, x.len, "v2.h5");
    CHECK(bad == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "superblock checksum mismatch");
    ((uint8_t *)x.data)[20] ^= 1;
    free(x.data);
}

/* ------------------------------------------------------------ walking everything */

/* Reads every link, dataset and listed attribute below group g (for the
 * corruption tests: the result does not matter, only that it is clean). */
static int walk(fl_h5 *f, uint64_t g, int depth, long *budget) {
    static const char *attrs[] = {"name", "layer_names", "weight_names", "model_config", "keras_version", "vlen", "fixed_list", "attr07", NULL};
    char **s = NULL;
    for (int i = 0; attrs[i]; i++) {
        fl_h5_attr_strings(f, g, attrs[i], &s);
        fl_h5_free_strings(s);
    }
    if (depth > 8 || --*budget < 0) return 0;
    char **names = NULL;
    int n = fl_h5_links(f, g, NULL, &names);
    int bad = n < 0;
    for (int i = 0; i < n; i++) {
        uint64_t o;
        if (fl_h5_find(f, g, names[i], &o) != 1) { bad = 1; continue; }
        fl_h5_dataset d;
        if (fl_h5_dataset_open(f, o, names[i], &d) == 0) {
            if (d.npoints <= 1 << 20) {
                void *buf = malloc((size_t)d.npoints * 8 + 8);
                bad |= fl_h5_dataset_read(f, &d, d.type.cls == FL_H5_INT, buf, d.npoints * 8) != 0;
                free(buf);
            }
        } else {
            bad |= walk(f, o, depth + 1, budget);
        }
    }
    fl_h5_free_strings(names);
    return bad;
}

static int walk_image(const void *data, size_t len) {
    fl_h5 *f = fl_h5_read_open(data, len, "image");
    if (!f) return 1;
    long budget = 2000;
    int bad = walk(f, fl_h5_root(f), 0, &budget);
    fl_h5_read_close(f);
    return bad;
}

/* ------------------------------------------------------------ the writer */

static void *write_sample(size_t *len, int nlinks, const char *big) {
    fl_h5w *w = fl_h5w_new();
    static float a[6] = {1, 2, 3, 4, 5, 6}, lr = 0.125f;
    int g = fl_h5w_group(w, 0, "layers/dense/vars");
    CHECK(g > 0);
    const char *nm = "dense";
    CHECK(fl_h5w_attr_strings(w, g, "name", &nm, 1, true) == 0);
    CHECK(fl_h5w_dataset(w, g, "0", false, 2, (int64_t[]){2, 3}, a) > 0);
    CHECK(fl_h5w_dataset(w, 0, "optimizer/vars/0", true, 0, NULL, &(int64_t){-42}) > 0);
    CHECK(fl_h5w_dataset(w, 0, "optimizer/vars/1", false, 0, NULL, &lr) > 0);
    CHECK(fl_h5w_dataset(w, 0, "optimizer/vars/1", false, 0, NULL, &lr) < 0); /* exists */
    CHECK(fl_h5w_group(w, 0, "optimizer/vars/1/x") < 0);                      /* a dataset is not a group */
    const char *list[] = {"alpha", "", "gamma"};
    CHECK(fl_h5w_attr_strings(w, 0, "list", list, 3, false) == 0);
    CHECK(fl_h5w_attr_strings(w, 0, "empty", NULL, 0, false) == 0);
    if (big) CHECK(fl_h5w_attr_strings(w, 0, "big", &big, 1, true) == 0);
    int many = fl_h5w_group(w, 0, "many");
    for (int i = 0; i < nlinks; i++) {
        char p[32];
        snprintf(p, sizeof p, "n%04d", (i * 37) % nlinks); /* not in order */
        CHECK(fl_h5w_dataset(w, many, p, false, 1, (int64_t[]){1}, &a[i % 6]) > 0);
    }
    void *data = NULL;
    CHECK(fl_h5w_finish(w, &data, len) == 0);
    fl_h5w_free(w);
    return data;
}

static void test_writer(void) {
    size_t big_n = 3 << 20;
    char *big = malloc(big_n + 1);
    for (size_t i = 0; i < big_n; i++) big[i] = (char)('a' + i % 26);
    big[big_n] = 0;
    size_t len;
    void *img = write_sample(&len, 700, big); /* 700 links: 88 symbol nodes, a wider B-tree node */
    fl_h5 *f = img ? fl_h5_read_open(img, len, "written") : NULL;
    CHECK_MSG(f != NULL, "%s", fl_last_error());
    if (f) {
        float *v = read_ds(f, "layers/dense/vars/0", false, 6);
        for (int i = 0; v && i < 6; i++) CHECK(v[i] == (float)(i + 1));
        free(v);
        int64_t *it = read_ds(f, "optimizer/vars/0", true, 1);
        CHECK(it && it[0] == -42);
        free(it);
        float *lr = read_ds(f, "optimizer/vars/1", false, 1);
        CHECK(lr && lr[0] == 0.125f);
        free(lr);
        uint64_t g;
        CHECK(fl_h5_find(f, fl_h5_root(f), "layers/dense/vars", &g) == 1);
        char *s = attr1(f, g, "name");
        CHECK(s && strcmp(s, "dense") == 0);
        free(s);
        s = attr1(f, fl_h5_root(f), "big");
        CHECK(s && strlen(s) == big_n && memcmp(s, big, big_n) == 0);
        free(s);
        char **l = NULL;
        CHECK(fl_h5_attr_strings(f, fl_h5_root(f), "list", &l) == 3 && strcmp(l[1], "") == 0 && strcmp(l[2], "gamma") == 0);
        fl_h5_free_strings(l);
        CHECK(fl_h5_attr_strings(f, fl_h5_root(f), "empty", &l) == 0);
        fl_h5_free_strings(l);
        char **names = NULL;
        CHECK(fl_h5_find(f, fl_h5_root(f), "many", &g) == 1 && fl_h5_links(f, g, NULL, &names) == 700);
        CHECK(names && strcmp(names[0], "n0000") == 0 && strcmp(names[699], "n0699") == 0);
        fl_h5_free_strings(names);
        float *n5 = read_ds(f, "many/n0605", false, 1);
        CHECK(n5 && n5[0] >= 1 && n5[0] <= 6);
        free(n5);
        fl_h5_read_close(f);
    }
    /* deterministic: the same content gives the same bytes */
    size_t len2;
    void *img2 = write_sample(&len2, 700, big);
    CHECK(img2 && len2 == len && memcmp(img, img2, len) == 0);
    free(img2);
    free(img);
    free(big);
}

/* ------------------------------------------------------------ giving a read image back */

/* Resident pages of [p, p + n) (p page-aligned). */
static size_t resident_pages(void *p, size_t n) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), np = (n + page - 1) / page, r = 0;
    unsigned char *v = malloc(np);
    if (!v || mincore(p, n, v) != 0) { free(v); return (size_t)-1; }
    for (size_t i = 0; i < np; i++) r += v[i] & 1;
    free(v);
    return r;
}

/* fl_h5_release_read (a model's fresh load): a large dataset's pages leave memory once read, the same dataset read
 * again is still right (copied from its first read), a small one is left alone, and a dataset whose bytes overlap
 * one given back is refused rather than read as zeros. */
static void test_release(void) {
    const int64_t nb = 1 << 20, nc = 3 << 18; /* 4 MiB and 3 MiB */
    float *b = malloc((size_t)nb * 4), *c = malloc((size_t)nc * 4), small[6] = {1, 2, 3, 4, 5, 6};
    for (int64_t i = 0; i < nb; i++) b[i] = 0.5f * (float)i;
    for (int64_t i = 0; i < nc; i++) c[i] = -0.25f * (float)i - 1.0f;
    fl_h5w *w = fl_h5w_new();
    CHECK(fl_h5w_dataset(w, 0, "big", false, 1, &nb, b) > 0);
    CHECK(fl_h5w_dataset(w, 0, "big2", false, 1, &nc, c) > 0);
    CHECK(fl_h5w_dataset(w, 0, "small", false, 1, (int64_t[]){6}, small) > 0);
    void *data = NULL;
    size_t len = 0;
    CHECK(fl_h5w_finish(w, &data, &len) == 0);
    fl_h5w_free(w);
    if (!data) { free(b); free(c); return; }
    /* where each one's data lies, and big2's address in its layout message */
    const char *pb = memmem(data, len, b + 1, 64), *pc = memmem(data, len, c, 64);
    CHECK(pb && pc);
    uint64_t ob = pb ? (uint64_t)(pb - 4 - (const char *)data) : 0, oc = pc ? (uint64_t)(pc - (const char *)data) : 0;
    char *lc = pc ? memmem(data, len, &oc, 8) : NULL;
    CHECK(lc != NULL);
    for (int pass = 0; pass < 2; pass++) {
        /* pass 1: big2's layout points into big's data */
        void *img = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK(img != MAP_FAILED);
        if (img == MAP_FAILED) break;
        memcpy(img, data, len);
        if (pass == 1 && lc) memcpy((char *)img + (lc - (char *)data), &ob, 8);
        fl_h5 *f = fl_h5_read_open(img, len, "released");
        CHECK_MSG(f != NULL, "%s", fl_last_error());
        if (!f) { munmap(img, len); break; }
        fl_h5_release_read(f);
        size_t before = resident_pages(img, len);
        float *v = read_ds(f, "big", false, (uint64_t)nb);
        CHECK(v && memcmp(v, b, (size_t)nb * 4) == 0);
        size_t after = resident_pages(img, len), page = (size_t)sysconf(_SC_PAGESIZE);
        CHECK_MSG(after + (size_t)nb * 4 / page - 2 <= before, "pass %d: %zu resident pages before big's read, %zu after",
                  pass, before, after);
        float *v2 = read_ds(f, "big", false, (uint64_t)nb); /* its bytes are gone from the image */
        CHECK(v2 && memcmp(v2, b, (size_t)nb * 4) == 0);
        float *s6 = read_ds(f, "small", false, 6);
        CHECK(s6 && memcmp(s6, small, sizeof small) == 0);
        if (pass == 0) {
            float *v3 = read_ds(f, "big2", false, (uint64_t)nc);
            CHECK(v3 && memcmp(v3, c, (size_t)nc * 4) == 0);
            free(v3);
        } else {
            uint64_t o;
            fl_h5_dataset d;
            float *out = malloc((size_t)nc * 4);
            CHECK(fl_h5_find(f, fl_h5_root(f), "big2", &o) == 1 && fl_h5_dataset_open(f, o, "big2", &d) == 0);
            CHECK(out && fl_h5_dataset_read(f, &d, false, out, (uint64_t)nc * 4) != 0);
            CHECK_STR_CONTAINS(fl_last_error(), "overlaps another dataset's");
            free(out);
        }
        free(v);
        free(v2);
        free(s6);
        fl_h5_read_close(f);
        munmap(img, len);
    }
    free(data);
    free(b);
    free(c);
}

/* ------------------------------------------------------------ corruption */

static void test_truncations(void) {
    size_t len;
    void *img = write_sample(&len, 20, NULL);
    if (!img) return;
    CHECK(walk_image(img, len) == 0);
    int failed = 0;
    for (size_t n = 0; n < len; n++) {
        void *cut = malloc(n ? n : 1);
        memcpy(cut, img, n);
        int bad = walk_image(cut, n);
        failed += bad != 0;
        free(cut);
    }
    /* the data is at the end: any cut loses some of it, or more */
    CHECK_MSG(failed == (int)len, "%d of %zu truncations read cleanly", (int)len - failed, len);
    /* every single-bit flip of every byte: no crash, no hang (ASan checks the reads) */
    uint8_t *b = img;
    for (size_t i = 0; i < len; i++)
        for (int bit = 0; bit < 8; bit += 3) {
            b[i] ^= (uint8_t)(1 << bit);
            walk_image(b, len);
            b[i] ^= (uint8_t)(1 << bit);
        }
    free(img);
    /* the h5py fixtures too, every cut of the small ones */
    const char *files[] = {"compact_ds.h5", "v2.h5", NULL};
    for (int k = 0; files[k]; k++) {
        size_t fl;
        void *d = slurp(fx(files[k]), &fl);
        if (!d) continue;
        for (size_t n = 0; n < fl; n += 1) {
            void *cut = malloc(n ? n : 1);
            memcpy(cut, d, n);
            walk_image(cut, n);
            free(cut);
        }
        free(d);
    }
}

static void test_crafted(void) {
    size_t len;
    uint8_t *img = write_sample(&len, 3, NULL);
    if (!img) return;
    /* The root object header is at 96 (v1: 16-byte prefix); its first
     * message is the symbol table message (type 0x11): make it a
     * continuation (0x10) back into the same block. */
    uint8_t *p = malloc(len);
    memcpy(p, img, len);
    CHECK(p[96] == 1 && p[96 + 16] == 0x11);
    p[96 + 16] = 0x10;
    uint64_t blk = 96 + 16, bl = (uint64_t)p[96 + 8] | (uint64_t)p[96 + 9] << 8;
    for (int i = 0; i < 8; i++) { p[96 + 24 + i] = (uint8_t)(blk >> (8 * i)); p[96 + 32 + i] = (uint8_t)(bl >> (8 * i)); }
    fl_h5 *f = fl_h5_read_open(p, len, "loop");
    char **names = NULL;
    CHECK(f && fl_h5_links(f, fl_h5_root(f), NULL, &names) == -1);
    CHECK_STR_CONTAINS(fl_last_error(), "continuation loop");
    fl_h5_read_close(f);
    /* The root group's B-tree node: level 1, its first child itself. */
    memcpy(p, img, len);
    uint64_t bt = 0;
    for (int i = 0; i < 8; i++) bt |= (uint64_t)p[80 + i] << (8 * i); /* superblock root entry scratch: B-tree */
    CHECK(memcmp(p + bt, "TREE", 4) == 0);
    p[bt + 5] = 1;
    for (int i = 0; i < 8; i++) p[bt + 24 + 8 + i] = (uint8_t)(bt >> (8 * i));
    f = fl_h5_read_open(p, len, "btree");
    CHECK(f && fl_h5_links(f, fl_h5_root(f), NULL, &names) == -1);
    CHECK_STR_CONTAINS(fl_last_error(), "(a loop?)");
    fl_h5_read_close(f);
    /* a huge declared shape: the dataspace of layers/dense/vars/0 says 2^40 x 3 */
    memcpy(p, img, len);
    f = fl_h5_read_open(p, len, "huge");
    uint64_t o;
    fl_h5_dataset d;
    if (f && fl_h5_find(f, fl_h5_root(f), "layers/dense/vars/0", &o) == 1) {
        /* the first message of a dataset header is its dataspace: dims at +8 */
        uint8_t *sp = p + o + 16 + 8;
        CHECK(sp[0] == 1 && sp[1] == 2);
        sp[8 + 5] = 1;
        CHECK(fl_h5_dataset_open(f, o, "w", &d) == 0 && d.dims[0] == ((uint64_t)1 << 40) + 2);
        float buf[6];
        CHECK(fl_h5_dataset_read(f, &d, false, buf, sizeof buf) == -1);
        CHECK_STR_CONTAINS(fl_last_error(), "more than the 24 bytes expected");
        /* and with an unbounded budget: the data is not in the file */
        CHECK(fl_h5_dataset_read(f, &d, false, buf, UINT64_MAX) == -1);
        CHECK_STR_CONTAINS(fl_last_error(), "the shape needs");
    } else {
        CHECK_MSG(0, "huge: %s", fl_last_error());
    }
    fl_h5_read_close(f);
    /* not HDF5 at all */
    CHECK(fl_h5_read_open("hello", 5, "text") == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "HDF5: text: no HDF5 signature");
    free(p);
    free(img);
}

/* ------------------------------------------------------------ optimizer slots */

/* A slot declared 2^26 x 8 floats (2 GiB, not in the file): its shape is
 * checked against the compiled optimizer before any slot data is read or
 * allocated (a 23 KB .keras made the old reader allocate 4.2 GB). */
static void test_slot_shapes_first(void) {
    char mp[1024];
    snprintf(mp, sizeof mp, "%s/keras/train_mlp_adam.keras", fixtures);
    fl_model *m = fl_load_model(mp);
    CHECK_MSG(m != NULL, "%s: %s", mp, fl_last_error());
    if (!m) return;
    void *img = NULL;
    size_t len = 0;
    CHECK(fl_keras_write_h5(m, FL_KFMT_KERAS, &img, &len) == FL_OK);
    fl_h5 *r = img ? fl_h5_read_open(img, len, "slots") : NULL;
    uint64_t o;
    if (r && fl_h5_find(r, fl_h5_root(r), "optimizer/vars/2", &o) == 1) {
        uint8_t *sp = (uint8_t *)img + o + 16 + 8; /* the dataspace message: dims at +8 */
        CHECK(sp[0] == 1 && sp[1] == 2);
        memset(sp + 8, 0, 8);
        sp[8 + 3] = 0x04; /* 2^26 x 8 floats: 2 GiB */
        fl_h5file *f = fl_h5_open(img, len, "slots.weights.h5");
        fl_kstate st;
        CHECK_MSG(f && fl_keras_read_state(f, FL_KFMT_KERAS, m, true, false, &st) == FL_OK, "%s", fl_last_error());
        if (f && st.nvars) {
            CHECK(st.has_opt && st.nslots > 0 && st.slots[0].shape[0] == ((int64_t)1 << 26));
            for (int i = 0; i < st.nslots; i++) CHECK_MSG(st.slots[i].data == NULL, "slot %d was read", i);
            bool applied = true;
            CHECK(fl_keras_apply_state(m, &st, "slots.weights.h5", true, &applied) == FL_ERR_FORMAT && !applied);
            CHECK_STR_CONTAINS(fl_last_error(), "the optimizer state does not fit the compiled Adam optimizer");
            CHECK(fl_keras_apply_state(m, &st, "slots.weights.h5", false, &applied) == FL_OK && !applied);
            fl_kstate_free(&st);
        }
        fl_h5_close(f);
    } else {
        CHECK_MSG(0, "optimizer/vars/2: %s", fl_last_error());
    }
    fl_h5_read_close(r);
    free(img);
    fl_model_free(m);
}

/* ------------------------------------------------------------ libhdf5 cross-check */

#ifdef FLYNN_TEST_LIBHDF5
/* libhdf5 1.10.8 leaks 64 bytes opening a dataset whose layout it cannot
 * decode (the fixtures libhdf5 2.0 wrote with libver latest); not flynn's. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libhdf5_serial.so\nleak:libhdf5.so\n"; }

typedef struct xctx { fl_h5 *f; int compared; const char *file; } xctx;

static herr_t cross_attr(hid_t obj, const char *name, const H5A_info_t *info, void *vctx) {
    (void)info;
    xctx *x = vctx;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT), t = H5Aget_type(a), sp = H5Aget_space(a);
    char path[512];
    ssize_t pl = H5Iget_name(obj, path, sizeof path);
    uint64_t o = 0;
    int found = pl > 0 ? fl_h5_find(x->f, fl_h5_root(x->f), path, &o) : -1;
    hssize_t n = H5Sget_simple_extent_npoints(sp);
    if (found == 1 && H5Tget_class(t) == H5T_STRING && n > 0 && n < 100000) {
        char **mine = NULL;
        int k = fl_h5_attr_strings(x->f, o, name, &mine);
        /* a refusal of a feature outside the subset (named in the message) is allowed */
        if (k == -1 && fl_last_status() == FL_ERR_UNSUPPORTED) { printf("  refused %s@%s: %s\n", path, name, fl_last_error()); k = (int)n; mine = NULL; goto next; }
        CHECK_MSG(k == n, "%s: %s@%s: %d strings, libhdf5 %lld: %s", x->file, path, name, k, (long long)n, k < 0 ? fl_last_error() : "");
        if (H5Tis_variable_str(t) > 0) {
            hid_t mt = H5Tcopy(H5T_C_S1);
            H5Tset_size(mt, H5T_VARIABLE);
            char **v = calloc((size_t)n, sizeof *v);
            if (H5Aread(a, mt, v) >= 0)
                for (hssize_t i = 0; k == n && i < n; i++) CHECK_MSG(strcmp(v[i] ? v[i] : "", mine[i]) == 0, "%s: %s@%s[%lld]", x->file, path, name, (long long)i);
            H5Dvlen_reclaim(mt, sp, H5P_DEFAULT, v);
            free(v);
            H5Tclose(mt);
        } else {
            size_t sz = H5Tget_size(t);
            char *buf = calloc((size_t)n, sz + 1);
            if (H5Aread(a, t, buf) >= 0)
                for (hssize_t i = 0; k == n && i < n; i++) {
                    const char *e = buf + (size_t)i * sz;
                    size_t l = strnlen(e, sz);
                    while (l && e[l - 1] == ' ') l--;
                    CHECK_MSG(strlen(mine[i]) == l && memcmp(mine[i], e, l) == 0, "%s: %s@%s[%lld]", x->file, path, name, (long long)i);
                }
            free(buf);
        }
        x->compared++;
    next:
        fl_h5_free_strings(mine);
    }
    H5Sclose(sp);
    H5Tclose(t);
    H5Aclose(a);
    return 0;
}

static herr_t cross_obj(hid_t loc, const char *name, const H5O_info_t *info, void *vctx) {
    xctx *x = vctx;
    hid_t o = H5Oopen(loc, name, H5P_DEFAULT);
    if (o < 0) return 0;
    H5Aiterate2(o, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, cross_attr, x);
    if (info->type == H5O_TYPE_DATASET) {
        hid_t t = H5Dget_type(o), sp = H5Dget_space(o);
        H5T_class_t c = H5Tget_class(t);
        hssize_t n = H5Sget_simple_extent_npoints(sp);
        uint64_t mo;
        fl_h5_dataset d;
        int r = fl_h5_find(x->f, fl_h5_root(x->f), name, &mo);
        if ((c == H5T_FLOAT || c == H5T_INTEGER) && n >= 0 && n < (1 << 26) && r == 1 && fl_h5_dataset_open(x->f, mo, name, &d) == 0) {
            bool i64 = c == H5T_INTEGER;
            void *theirs = malloc((size_t)n * 8 + 8), *mine = malloc((size_t)n * 8 + 8);
            herr_t hr = H5Dread(o, i64 ? H5T_NATIVE_INT64 : H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, theirs);
            int mr = fl_h5_dataset_read(x->f, &d, i64, mine, (uint64_t)n * 8);
            if (hr >= 0 && mr != 0 && fl_last_status() == FL_ERR_UNSUPPORTED) {
                printf("  refused %s: %s\n", name, fl_last_error());
            } else if (hr >= 0) {
                CHECK_MSG(mr == 0, "%s: %s: libhdf5 reads it, flynn: %s", x->file, name, fl_last_error());
                CHECK_MSG(mr != 0 || memcmp(theirs, mine, (size_t)n * (i64 ? 8 : 4)) == 0, "%s: %s: values differ", x->file, name);
                x->compared++;
            }
            free(theirs);
            free(mine);
        } else if (r != 1) {
            CHECK_MSG(0, "%s: %s: libhdf5 finds it, flynn %d: %s", x->file, name, r, fl_last_error());
        }
        H5Sclose(sp);
        H5Tclose(t);
    }
    H5Oclose(o);
    return 0;
}

/* libhdf5 and flynn read the same file: every dataset and string attribute agrees. */
static int cross_check(const char *path, const void *data, size_t len) {
    hid_t fid = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK_MSG(fid >= 0, "libhdf5 cannot open %s", path);
    if (fid < 0) return 0;
    xctx x = {fl_h5_read_open(data, len, path), 0, path};
    CHECK_MSG(x.f != NULL, "%s: %s", path, fl_last_error());
    if (x.f) {
        H5Aiterate2(fid, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, cross_attr, &x);
        H5Ovisit2(fid, H5_INDEX_NAME, H5_ITER_NATIVE, cross_obj, &x, H5O_INFO_BASIC);
    }
    fl_h5_read_close(x.f);
    H5Fclose(fid);
    return x.compared;
}

static void test_libhdf5(void) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    /* every fixture h5py and Keras wrote */
    int files = 0, values = 0;
    const char *dirs[] = {"h5", "keras"};
    for (int k = 0; k < 2; k++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", fixtures, dirs[k]);
        DIR *dp = opendir(dir);
        struct dirent *e;
        while (dp && (e = readdir(dp))) {
            size_t nl = strlen(e->d_name);
            if (nl < 3 || strcmp(e->d_name + nl - 3, ".h5") != 0) continue;
            char p[2048];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            size_t len;
            void *d = slurp(p, &len);
            if (!d) continue;
            values += cross_check(p, d, len);
            files++;
            free(d);
        }
        if (dp) closedir(dp);
    }
    /* every file flynn's writer makes: the sample, and Keras models saved both ways */
    char tmp[] = "/tmp/flynn_h5_XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    char p[256];
    size_t len;
    char *cfg = malloc(300001); /* a ResNet-sized model_config: one global heap object of 300 KB */
    for (int i = 0; i < 300000; i++) cfg[i] = "{\"config\": []}"[i % 14];
    cfg[300000] = 0;
    void *img = write_sample(&len, 700, cfg);
    free(cfg);
    snprintf(p, sizeof p, "%s/sample.h5", tmp);
    FILE *fp = fopen(p, "wb");
    fwrite(img, 1, len, fp);
    fclose(fp);
    values += cross_check(p, img, len);
    files++;
    free(img);
    const char *models[] = {"train_mlp_adam.keras", "func_shared.keras", "batchnorm.keras", "train_bn_rmsprop.keras", NULL};
    for (int i = 0; models[i]; i++) {
        char mp[1024];
        snprintf(mp, sizeof mp, "%s/keras/%s", fixtures, models[i]);
        if (access(mp, R_OK) != 0) continue;
        fl_model *m = fl_load_model(mp);
        CHECK_MSG(m != NULL, "%s: %s", mp, fl_last_error());
        for (int fmt = 0; m && fmt < 2; fmt++) {
            void *data = NULL;
            CHECK(fl_keras_write_h5(m, fmt ? FL_KFMT_LEGACY : FL_KFMT_KERAS, &data, &len) == FL_OK);
            snprintf(p, sizeof p, "%s/%d_%d.h5", tmp, i, fmt);
            fp = fopen(p, "wb");
            fwrite(data, 1, len, fp);
            fclose(fp);
            int c = cross_check(p, data, len);
            CHECK_MSG(c > 2, "%s: only %d values compared", p, c);
            values += c;
            files++;
            /* libhdf5 sees the model's weights */
            hid_t fid = H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT);
            int li = 0;
            while (li < m->nlayers && m->layers[li]->nw == 0) li++;
            if (fid >= 0 && li < m->nlayers) {
                const fl_layer *l = m->layers[li];
                char dp[512];
                if (fmt) snprintf(dp, sizeof dp, "model_weights/%s/%s/%s", l->name, l->name, l->wname[0]);
                else {
                    char kp[96];
                    fl_keras_layer_path(m, li, kp, sizeof kp);
                    snprintf(dp, sizeof dp, "layers/%s/vars/0", kp);
                }
                hid_t ds = H5Dopen2(fid, dp, H5P_DEFAULT);
                CHECK_MSG(ds >= 0, "libhdf5: %s: no %s", p, dp);
                const fl_node *wt = l->w[0];
                int64_t n = fl_node_size(wt);
                float *v = malloc((size_t)n * 4);
                if (ds >= 0 && H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0)
                    CHECK_MSG(memcmp(v, wt->val, (size_t)n * 4) == 0, "%s: %s differs from the model", p, dp);
                else
                    CHECK_MSG(0, "libhdf5 cannot read %s %s", p, dp);
                free(v);
                if (ds >= 0) H5Dclose(ds);
            }
            if (fid >= 0) H5Fclose(fid);
            unlink(p);
            free(data);
        }
        fl_model_free(m);
    }
    snprintf(p, sizeof p, "%s/sample.h5", tmp);
    unlink(p);
    rmdir(tmp);
    H5close(); /* libhdf5 frees its caches (LeakSanitizer) */
    printf("libhdf5 cross-check: %d files, %d datasets and attributes compared\n", files, values);
    CHECK(files >= 30 && values > 500);
}
#endif

/* ------------------------------------------------------------ fuzz regressions */

static void test_regressions(const char *dir) {
    DIR *dp = dir ? opendir(dir) : NULL;
    if (!dp) { printf("no fuzz regression inputs (%s)\n", dir ? dir : "no directory given"); return; }
    struct dirent *e;
    int n = 0;
    while ((e = readdir(dp))) {
        if (e->d_name[0] == '.') continue;
        char p[2048];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        size_t len;
        void *d = slurp(p, &len);
        if (!d) continue;
        walk_image(d, len);
        free(d);
        n++;
    }
    closedir(dp);
    printf("fuzz regression inputs: %d read without a crash\n", n);
}

int main(int argc, char **argv) {
    fixtures = argc > 1 ? argv[1] : "tests/fixtures";
    test_lookup3();
    test_types();
    test_chunked();
    test_groups();
    test_latest();
    test_writer();
    test_release();
    test_crafted();
    test_truncations();
    test_slot_shapes_first();
#ifdef FLYNN_TEST_LIBHDF5
    test_libhdf5();
#else
    printf("libhdf5 cross-check skipped: flynn was configured without libhdf5 (libhdf5-dev) found\n");
#endif
    test_regressions(argc > 2 ? argv[2] : NULL);
    return check_report("test_h5");
}
