/*
 * fortunes.c — fl_load_fortunes_lang: a text classification data set that
 * every Debian machine can install without the internet: which language a
 * fortune cookie is written in, English, German, Spanish, Italian or Polish.
 *
 * Source: Debian's fortune packages (GPL-2+ or BSD, see each package's
 * /usr/share/doc/PKG/copyright): `fortunes` (English: the category files of
 * fortune-mod 1.99.1 named in en_files below, in DIR itself),
 * `fortunes-de`, `fortunes-es`, `fortunes-it`, `fortunes-pl` (every regular
 * file of DIR/de, DIR/es, DIR/it, DIR/pl). DIR defaults to
 * /usr/share/games/fortunes. Files are cookies separated by lines that hold
 * only "%". scripts/setup.sh installs the packages.
 *
 * Each cookie is cleaned so that only its language tells the classes apart:
 * terminal overstriking (x BACKSPACE x, _ BACKSPACE x) is undone, a first
 * line that is a "#source" tag (the Polish files have them) is dropped,
 * every run of white space becomes one space, and cookies with fewer than 20
 * letters (signatures, ASCII art) or seen before (in any language) are
 * skipped. Files named like ASCII art or banners are left out. The text is
 * decoded as UTF-8 (a byte that is not valid UTF-8 counts as Latin-1) and
 * each character becomes a token: its code point below 256, else 256 + the
 * code point's low byte (the Polish letters), so the vocabulary is 512 and
 * 0 is padding. A cookie keeps its first maxlen characters and is padded
 * with zeros in front (Keras pad_sequences: padding "pre"), so the last step
 * of a recurrent layer sees the text.
 *
 * The classes are balanced: each language keeps as many cookies as the
 * smallest has, picked by a fixed shuffle; all of them are then shuffled
 * (fixed seed) and the last fifth is the test set. x is int32 (N, maxlen),
 * y float32 class indices (N,) in fl_fortunes_lang_name's order.
 */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "flynn/flynn.h"
#include "core/error.h"
#include "core/tensor.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FORT_LANGS 5
#define FORT_MIN_LETTERS 20
#define FORT_MAX_FILE (64 << 20) /* no fortune file is near this: a larger one is not one */

static const char *const lang_names[FORT_LANGS] = {"en", "de", "es", "it", "pl"};

/* The English category files of fortune-mod 1.99.1 (package fortunes and
 * fortunes-min), without ascii-art: DIR also holds other packages' files
 * (fortunes-it and fortunes-br put some at the top level). */
static const char *const en_files[] = {
    "art", "computers", "cookie", "debian", "definitions", "disclaimer", "drugs", "education", "ethnic", "food",
    "fortunes", "goedel", "humorists", "kids", "law", "linux", "linuxcookie", "literature", "love", "magic",
    "medicine", "men-women", "miscellaneous", "news", "paradoxum", "people", "perl", "pets", "platitudes",
    "politics", "pratchett", "riddles", "science", "songs-poems", "sports", "startrek", "tao", "translate-me",
    "wisdom", "work", "zippy",
};

const char *fl_fortunes_lang_name(int label) {
    return label >= 0 && label < FORT_LANGS ? lang_names[label] : NULL;
}

/* ------------------------------------------------------------ samples */

typedef struct {
    int maxlen;
    int32_t *ids[FORT_LANGS]; /* n[l] rows of maxlen tokens */
    int64_t n[FORT_LANGS], cap[FORT_LANGS];
    uint64_t *seen;           /* open-addressing set of text hashes (0 = empty) */
    int64_t seen_n, seen_cap;
    const char *file;         /* for messages */
} fort_ctx;

static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* True when the hash was new (and is now in the set). */
static int seen_add(fort_ctx *c, uint64_t h) {
    if (h == 0) h = 1;
    if (2 * (c->seen_n + 1) > c->seen_cap) {
        int64_t ncap = c->seen_cap ? 2 * c->seen_cap : 4096;
        uint64_t *ns = fl_calloc((size_t)ncap, sizeof *ns, "fortunes: duplicate set");
        if (!ns) return -1;
        for (int64_t i = 0; i < c->seen_cap; i++)
            if (c->seen[i]) {
                int64_t j = (int64_t)(c->seen[i] & (uint64_t)(ncap - 1));
                while (ns[j]) j = (j + 1) & (ncap - 1);
                ns[j] = c->seen[i];
            }
        free(c->seen);
        c->seen = ns;
        c->seen_cap = ncap;
    }
    int64_t j = (int64_t)(h & (uint64_t)(c->seen_cap - 1));
    while (c->seen[j]) {
        if (c->seen[j] == h) return 0;
        j = (j + 1) & (c->seen_cap - 1);
    }
    c->seen[j] = h;
    c->seen_n++;
    return 1;
}

/* One UTF-8 code point from s[0..n) (a byte that does not start a valid
 * sequence is taken as Latin-1); *len gets the bytes used. */
static uint32_t utf8_next(const unsigned char *s, size_t n, size_t *len) {
    unsigned char b = s[0];
    int k = b >= 0xF0 && b < 0xF5 ? 3 : b >= 0xE0 ? 2 : b >= 0xC2 && b < 0xE0 ? 1 : 0;
    if (b < 0x80 || k == 0 || (size_t)k >= n) { *len = 1; return b; }
    uint32_t cp = b & (0x3F >> k);
    for (int i = 1; i <= k; i++) {
        if ((s[i] & 0xC0) != 0x80) { *len = 1; return b; }
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    *len = (size_t)k + 1;
    return cp;
}

static bool is_letter(uint32_t cp) {
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= 0xC0 && cp != 0xD7 && cp != 0xF7);
}

/* Cleans one cookie (text[0..n)) into code points and adds it to language l. */
static fl_status add_cookie(fort_ctx *c, int l, const unsigned char *text, size_t n) {
    /* a first line "#tag" (a source) goes */
    if (n && text[0] == '#') {
        const unsigned char *nl = memchr(text, '\n', n);
        size_t skip = nl ? (size_t)(nl - text) + 1 : n;
        text += skip;
        n -= skip;
    }
    uint32_t buf[4096];
    int m = 0, letters = 0;
    bool space = true; /* drop leading white space */
    for (size_t i = 0; i < n;) {
        size_t len;
        uint32_t cp = utf8_next(text + i, n - i, &len);
        i += len;
        if (cp == '\b') { /* overstriking: the next character replaces the last */
            if (m > 0 && buf[m - 1] != ' ') { if (is_letter(buf[m - 1])) letters--; m--; }
            space = m == 0 || buf[m - 1] == ' ';
            continue;
        }
        if (cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r' || cp == '\f' || cp == '\v' || cp < 0x20) {
            if (!space && m < (int)(sizeof buf / sizeof buf[0])) buf[m++] = ' ';
            space = true;
            continue;
        }
        if (m < (int)(sizeof buf / sizeof buf[0])) {
            buf[m++] = cp;
            letters += is_letter(cp);
        }
        space = false;
    }
    while (m > 0 && buf[m - 1] == ' ') m--;
    if (letters < FORT_MIN_LETTERS) return FL_OK;
    uint64_t h = 0x243f6a8885a308d3ull;
    for (int i = 0; i < m; i++) h = mix64(h ^ buf[i]);
    int fresh = seen_add(c, h);
    if (fresh < 0) return fl_last_status();
    if (!fresh) return FL_OK;
    if (c->n[l] == c->cap[l]) {
        int64_t ncap = c->cap[l] ? 2 * c->cap[l] : 1024;
        int32_t *p = realloc(c->ids[l], (size_t)ncap * (size_t)c->maxlen * sizeof *p);
        if (!p) return fl_error(FL_ERR_NOMEM, "fortunes: out of memory after %lld cookies", (long long)c->n[l]);
        c->ids[l] = p;
        c->cap[l] = ncap;
    }
    int32_t *row = c->ids[l] + (size_t)c->n[l] * (size_t)c->maxlen;
    int keep = m < c->maxlen ? m : c->maxlen, pad = c->maxlen - keep;
    memset(row, 0, (size_t)pad * sizeof *row);
    for (int i = 0; i < keep; i++) row[pad + i] = (int32_t)(buf[i] < 256 ? buf[i] : 256 + (buf[i] & 255));
    c->n[l]++;
    return FL_OK;
}

static fl_status read_file(fort_ctx *c, int l, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return fl_error(FL_ERR_IO, "fortunes: cannot open %s: %s", path, strerror(errno));
    unsigned char *data = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 65536;
            if (cap > FORT_MAX_FILE) {
                fclose(f);
                free(data);
                return fl_error(FL_ERR_FORMAT, "fortunes: %s is larger than %d MiB: not a fortune file", path,
                                FORT_MAX_FILE >> 20);
            }
            unsigned char *p = realloc(data, cap);
            if (!p) { fclose(f); free(data); return fl_error(FL_ERR_NOMEM, "fortunes: reading %s", path); }
            data = p;
        }
        size_t r = fread(data + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    bool err = ferror(f);
    fclose(f);
    if (err) { free(data); return fl_error(FL_ERR_IO, "fortunes: reading %s failed", path); }
    c->file = path;
    fl_status st = FL_OK;
    size_t start = 0;
    for (size_t i = 0; i <= n && st == FL_OK; i++) {
        /* a cookie ends at a line "%" (or the end of the file) */
        bool at_end = i == n;
        bool sep = !at_end && data[i] == '%' && (i == 0 || data[i - 1] == '\n') &&
                   (i + 1 == n || data[i + 1] == '\n' || (data[i + 1] == '\r' && (i + 2 == n || data[i + 2] == '\n')));
        if (!sep && !at_end) continue;
        st = add_cookie(c, l, data + start, i - start);
        if (sep) {
            while (i < n && data[i] != '\n') i++;
            start = i + 1;
        }
    }
    free(data);
    return st;
}

static bool skip_name(const char *name) {
    size_t n = strlen(name);
    return name[0] == '.' || (n > 4 && strcmp(name + n - 4, ".dat") == 0) ||
           (n > 3 && strcmp(name + n - 3, ".u8") == 0) || strstr(name, "ascii") || strstr(name, "banner");
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every regular file (not a link: those repeat others) of dir/sub, in name order. */
static fl_status read_folder(fort_ctx *c, int l, const char *dir, const char *sub) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, sub) >= sizeof path)
        return fl_error(FL_ERR_INVALID_ARG, "fortunes: the folder name %.60s... is too long", dir);
    DIR *d = opendir(path);
    if (!d)
        return fl_error(FL_ERR_IO, "fortunes: cannot open folder %s: %s (install the Debian package fortunes-%s)",
                        path, strerror(errno), sub);
    char **names = NULL;
    size_t nn = 0, cap = 0;
    struct dirent *e;
    fl_status st = FL_OK;
    while ((e = readdir(d))) {
        if (skip_name(e->d_name)) continue;
        if (nn == cap) {
            cap = cap ? 2 * cap : 64;
            char **p = realloc(names, cap * sizeof *p);
            if (!p) { st = fl_error(FL_ERR_NOMEM, "fortunes: listing %s", path); break; }
            names = p;
        }
        if (!(names[nn] = strdup(e->d_name))) { st = fl_error(FL_ERR_NOMEM, "fortunes: listing %s", path); break; }
        nn++;
    }
    closedir(d);
    if (st == FL_OK && nn > 1) qsort(names, nn, sizeof *names, cmp_str); /* names is NULL when nn is 0 */
    int files = 0;
    for (size_t i = 0; i < nn && st == FL_OK; i++) {
        char fp[4096 + 256];
        if ((size_t)snprintf(fp, sizeof fp, "%s/%s", path, names[i]) >= sizeof fp) continue;
        struct stat sb;
        if (lstat(fp, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size == 0) continue;
        st = read_file(c, l, fp);
        files++;
    }
    for (size_t i = 0; i < nn; i++) free(names[i]);
    free(names);
    if (st == FL_OK && files == 0)
        return fl_error(FL_ERR_FORMAT, "fortunes: folder %s holds no fortune files (install the Debian package "
                        "fortunes-%s)", path, sub);
    return st;
}

/* Fisher-Yates over row indices with a fixed stream. */
static void shuffle(int64_t *idx, int64_t n, uint64_t seed) {
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        seed = mix64(seed);
        int64_t j = (int64_t)(seed % (uint64_t)(i + 1));
        int64_t t = idx[i]; idx[i] = idx[j]; idx[j] = t;
    }
}

fl_status fl_load_fortunes_lang(const char *dir, int maxlen, int64_t max_train, int64_t max_test, fl_dataset *out) {
    if (!out) return fl_error(FL_ERR_INVALID_ARG, "fl_load_fortunes_lang: out is NULL");
    memset(out, 0, sizeof *out);
    if (!dir || !*dir) dir = "/usr/share/games/fortunes";
    if (maxlen <= 0 || maxlen > 4096)
        return fl_error(FL_ERR_INVALID_ARG, "fl_load_fortunes_lang: maxlen %d, expected 1..4096", maxlen);
    if (max_train < 0 || max_test < 0)
        return fl_error(FL_ERR_INVALID_ARG, "fl_load_fortunes_lang: max_train/max_test must be >= 0");
    fort_ctx c = {.maxlen = maxlen};
    fl_status st = FL_OK;
    int en = 0;
    for (size_t i = 0; i < sizeof en_files / sizeof en_files[0] && st == FL_OK; i++) {
        char fp[4096];
        if ((size_t)snprintf(fp, sizeof fp, "%s/%s", dir, en_files[i]) >= sizeof fp) break;
        struct stat sb;
        if (lstat(fp, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        st = read_file(&c, 0, fp);
        en++;
    }
    if (st == FL_OK && en == 0)
        st = fl_error(FL_ERR_IO, "fortunes: %s has none of the English fortune files (install the Debian package "
                      "fortunes)", dir);
    for (int l = 1; l < FORT_LANGS && st == FL_OK; l++) st = read_folder(&c, l, dir, lang_names[l]);
    int64_t per = INT64_MAX;
    for (int l = 0; l < FORT_LANGS && st == FL_OK; l++) {
        if (c.n[l] < 10)
            st = fl_error(FL_ERR_FORMAT, "fortunes: only %lld usable cookies in language '%s' under %s",
                          (long long)c.n[l], lang_names[l], dir);
        if (c.n[l] < per) per = c.n[l];
    }
    fl_tensor *x = NULL, *y = NULL;
    int64_t *idx = NULL, *pick = NULL;
    if (st == FL_OK) {
        int64_t total = per * FORT_LANGS, ntest = total / 5, ntrain = total - ntest;
        int64_t kt = max_train && max_train < ntrain ? max_train : ntrain;
        int64_t ks = max_test && max_test < ntest ? max_test : ntest;
        idx = fl_malloc((size_t)total * sizeof *idx, "fortunes: shuffle");
        pick = fl_malloc((size_t)total * sizeof *pick, "fortunes: shuffle");
        int64_t shape_x[2] = {kt, maxlen}, shape_y[1] = {kt};
        if (!idx || !pick) st = fl_last_status();
        /* rows: per language a fixed choice of `per` cookies, then one order of all */
        for (int l = 0; l < FORT_LANGS && st == FL_OK; l++) {
            int64_t *tmp = fl_malloc((size_t)c.n[l] * sizeof *tmp, "fortunes: shuffle");
            if (!tmp) { st = fl_last_status(); break; }
            shuffle(tmp, c.n[l], 1000 + (uint64_t)l);
            for (int64_t i = 0; i < per; i++) pick[l * per + i] = tmp[i];
            free(tmp);
        }
        if (st == FL_OK) shuffle(idx, total, 7);
        for (int part = 0; part < 2 && st == FL_OK; part++) {
            int64_t k = part ? ks : kt, from = part ? ntrain : 0;
            shape_x[0] = shape_y[0] = k;
            x = fl_tensor_new(FL_INT32, 2, shape_x);
            y = fl_tensor_new(FL_FLOAT32, 1, shape_y);
            if (!x || !y) { st = fl_last_status(); break; }
            int32_t *xd = fl_tensor_data(x);
            float *yd = fl_tensor_data(y);
            for (int64_t i = 0; i < k; i++) {
                int64_t r = idx[from + i], l = r / per;
                memcpy(xd + i * maxlen, c.ids[l] + pick[r] * maxlen, (size_t)maxlen * sizeof *xd);
                yd[i] = (float)l;
            }
            if (part) { out->x_test = x; out->y_test = y; } else { out->x_train = x; out->y_train = y; }
            x = y = NULL;
        }
    }
    fl_tensor_free(x);
    fl_tensor_free(y);
    free(idx);
    free(pick);
    for (int l = 0; l < FORT_LANGS; l++) free(c.ids[l]);
    free(c.seen);
    if (st != FL_OK) fl_dataset_free(out);
    return st;
}
