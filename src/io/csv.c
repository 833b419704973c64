/*
 * csv.c — fl_load_csv: a CSV table with a header row into x (float32
 * (N, features)) and y (the label column), as a Keras user would make them
 * with pandas.read_csv and one-hot / integer encoding of the text columns.
 *
 * Parsing (RFC 4180, as pandas' default): fields split at the delimiter;
 * a field that starts with '"' runs to the matching '"', with "" for a
 * quote and delimiters and line breaks inside; records end at \n or \r\n;
 * blank lines are skipped (pandas skip_blank_lines). Every record must have
 * the header's number of fields. Missing values are pandas' default
 * na_values (an empty field, NA, N/A, NaN, null, None, ...), and refused:
 * flynn does not guess a fill value.
 *
 * Columns: a column is numeric when every value parses whole as a number
 * (strtod, surrounding spaces allowed), else categorical with its distinct
 * values sorted (byte order, as Python's sorted()) as categories: one-hot
 * (a column per category) or the category's index. The label column gives
 * y (N,): its numbers, or the index of its value among the sorted distinct
 * values (and the class names in info).
 */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "flynn/flynn.h"
#include "core/error.h"
#include "io/io.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CSV_MAX_BYTES ((int64_t)8 << 30)

typedef struct table {
    char *buf;        /* the unescaped fields, each NUL-terminated */
    size_t *field;    /* offsets into buf: record r, column c at field[r * ncol + c] */
    int64_t *line;    /* the line each record starts on (1-based) */
    int64_t nrec, cap;
    int ncol;
} table;

static void table_free(table *t) {
    free(t->buf);
    free(t->field);
    free(t->line);
}

static const char *cell(const table *t, int64_t r, int c) { return t->buf + t->field[r * t->ncol + c]; }

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return fl_error_null(FL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || S_ISDIR(st.st_mode)) {
        fclose(f);
        return fl_error_null(FL_ERR_IO, "%s: is a folder, expected a CSV file", path);
    }
    if ((int64_t)st.st_size > CSV_MAX_BYTES) {
        fclose(f);
        return fl_error_null(FL_ERR_FORMAT, "%s: %lld bytes, more than flynn's CSV limit of %lld", path,
                             (long long)st.st_size, (long long)CSV_MAX_BYTES);
    }
    size_t n = (size_t)st.st_size;
    char *b = fl_malloc(n + 1, "CSV file");
    if (!b) { fclose(f); return NULL; }
    size_t got = fread(b, 1, n, f);
    bool err = ferror(f);
    fclose(f);
    if (got != n || err) {
        free(b);
        return fl_error_null(FL_ERR_IO, "%s: read error: %s", path, err ? strerror(errno) : "short read");
    }
    b[n] = 0;
    *len = n;
    return b;
}

/* Splits src into records of fields (unescaped into t->buf). The header
 * fixes ncol; every later record must match it. */
static fl_status parse(const char *path, const char *src, size_t n, char delim, table *t) {
    memset(t, 0, sizeof *t);
    t->buf = fl_malloc(n + 1 + n / 1 + 1, "CSV fields"); /* unescaped text + a NUL per field (at most one per byte) */
    if (!t->buf) return FL_ERR_NOMEM;
    size_t o = 0, i = 0;
    int64_t line = 1;
    size_t *rec = NULL;
    int64_t nf = 0, rcap = 0;
    fl_status s = FL_OK;
    if (n >= 3 && (unsigned char)src[0] == 0xEF && (unsigned char)src[1] == 0xBB && (unsigned char)src[2] == 0xBF) i = 3;
    while (i < n) {
        /* a blank line */
        if (src[i] == '\n' || (src[i] == '\r' && i + 1 < n && src[i + 1] == '\n')) {
            i += src[i] == '\r' ? 2 : 1;
            line++;
            continue;
        }
        int64_t rec_line = line;
        nf = 0;
        for (;;) { /* one field */
            if (nf == rcap) {
                rcap = rcap ? 2 * rcap : 16;
                size_t *r2 = realloc(rec, (size_t)rcap * sizeof *rec);
                if (!r2) { s = fl_error(FL_ERR_NOMEM, "%s: out of memory", path); goto done; }
                rec = r2;
            }
            rec[nf++] = o;
            if (i < n && src[i] == '"') {
                int64_t qline = line;
                i++;
                for (;;) {
                    if (i >= n) {
                        s = fl_error(FL_ERR_FORMAT, "%s: line %lld: a quoted field is not closed (no matching '\"' "
                                     "before the end of the file)", path, (long long)qline);
                        goto done;
                    }
                    if (src[i] == '"') {
                        if (i + 1 < n && src[i + 1] == '"') { t->buf[o++] = '"'; i += 2; continue; }
                        i++;
                        break;
                    }
                    if (src[i] == '\n') line++;
                    t->buf[o++] = src[i++];
                }
                /* text after the closing quote up to the delimiter is kept, as pandas does */
                while (i < n && src[i] != delim && src[i] != '\n' && !(src[i] == '\r' && i + 1 < n && src[i + 1] == '\n'))
                    t->buf[o++] = src[i++];
            } else {
                while (i < n && src[i] != delim && src[i] != '\n' && !(src[i] == '\r' && i + 1 < n && src[i + 1] == '\n'))
                    t->buf[o++] = src[i++];
            }
            t->buf[o++] = 0;
            if (i < n && src[i] == delim) { i++; continue; }
            break;
        }
        if (i < n) { i += src[i] == '\r' ? 2 : 1; line++; }
        if (t->nrec == 0 && t->ncol == 0) {
            if (nf > 1 << 20) { s = fl_error(FL_ERR_FORMAT, "%s: the header has %lld columns (at most %d)", path, (long long)nf, 1 << 20); goto done; }
            t->ncol = (int)nf;
        } else if (nf != t->ncol) {
            s = fl_error(FL_ERR_FORMAT, "%s: line %lld has %lld field%s, expected %d (the header's count)", path,
                         (long long)rec_line, (long long)nf, nf == 1 ? "" : "s", t->ncol);
            goto done;
        }
        if (t->nrec == t->cap) {
            int64_t c2 = t->cap ? 2 * t->cap : 64;
            size_t *f2 = realloc(t->field, (size_t)c2 * (size_t)t->ncol * sizeof *f2);
            if (f2) t->field = f2;
            int64_t *l2 = f2 ? realloc(t->line, (size_t)c2 * sizeof *l2) : NULL;
            if (l2) t->line = l2;
            if (!f2 || !l2) { s = fl_error(FL_ERR_NOMEM, "%s: out of memory at line %lld", path, (long long)rec_line); goto done; }
            t->cap = c2;
        }
        memcpy(t->field + t->nrec * t->ncol, rec, (size_t)t->ncol * sizeof *rec);
        t->line[t->nrec++] = rec_line;
    }
    if (t->nrec == 0) s = fl_error(FL_ERR_FORMAT, "%s: empty, expected a header row and data rows", path);
done:
    free(rec);
    if (s != FL_OK) { table_free(t); memset(t, 0, sizeof *t); }
    return s;
}

/* pandas.read_csv's default na_values */
static bool is_missing(const char *v) {
    static const char *na[] = {"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
                               "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"};
    while (*v == ' ' || *v == '\t') v++;
    size_t n = strlen(v);
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
    for (size_t i = 0; i < sizeof na / sizeof na[0]; i++)
        if (strlen(na[i]) == n && strncmp(na[i], v, n) == 0) return true;
    return false;
}

static bool number(const char *v, double *out) {
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (end == v) return false;
    while (*end == ' ' || *end == '\t') end++;
    if (*end) return false;
    *out = d;
    return true;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The sorted distinct values of column c: *cats (pointers into the table). */
static fl_status categories(const table *t, int c, const char ***cats, int64_t *ncat) {
    int64_t n = t->nrec - 1;
    const char **v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) return fl_error(FL_ERR_NOMEM, "out of memory for a column's categories");
    for (int64_t r = 0; r < n; r++) v[r] = cell(t, r + 1, c);
    qsort(v, (size_t)n, sizeof *v, cmp_str);
    int64_t k = 0;
    for (int64_t r = 0; r < n; r++)
        if (k == 0 || strcmp(v[k - 1], v[r]) != 0) v[k++] = v[r];
    *cats = v;
    *ncat = k;
    return FL_OK;
}

static int64_t cat_index(const char **cats, int64_t ncat, const char *v) {
    const char **p = bsearch(&v, cats, (size_t)ncat, sizeof *cats, cmp_str);
    return p ? p - cats : -1;
}

fl_status fl_load_csv_(const char *path, fl_dataset *out, fl_csv_args a) {
    if (!out) return fl_error(FL_ERR_INVALID_ARG, "fl_load_csv: out is NULL");
    memset(out, 0, sizeof *out);
    if (a.info) memset(a.info, 0, sizeof *a.info);
    if (!path) return fl_error(FL_ERR_INVALID_ARG, "fl_load_csv: path is NULL");
    char delim = a.delimiter ? a.delimiter : ',';
    if (delim == '"' || delim == '\n' || delim == '\r')
        return fl_error(FL_ERR_INVALID_ARG, "fl_load_csv: delimiter '%c' cannot separate fields", delim);
    size_t n = 0;
    char *src = read_all(path, &n);
    if (!src) return fl_last_status();
    table t;
    fl_status s = parse(path, src, n, delim, &t);
    free(src);
    if (s != FL_OK) return s;

    const int ncol = t.ncol;
    const int64_t nrow = t.nrec - 1;
    bool *numeric = calloc((size_t)ncol, sizeof *numeric);
    const char ***cats = calloc((size_t)ncol, sizeof *cats);
    int64_t *ncat = calloc((size_t)ncol, sizeof *ncat);
    int label = -1;
    if (!numeric || !cats || !ncat) { s = fl_error(FL_ERR_NOMEM, "%s: out of memory", path); goto done; }
    for (int c = 0; c < ncol; c++) {
        for (int d = 0; d < c; d++)
            if (strcmp(cell(&t, 0, c), cell(&t, 0, d)) == 0) {
                s = fl_error(FL_ERR_FORMAT, "%s: the header names two columns '%s' (columns %d and %d)", path,
                             cell(&t, 0, c), d + 1, c + 1);
                goto done;
            }
        if (a.label && strcmp(cell(&t, 0, c), a.label) == 0) label = c;
    }
    if (a.label && label < 0) {
        char cols[512] = "";
        for (int c = 0; c < ncol && strlen(cols) < sizeof cols - 8; c++)
            snprintf(cols + strlen(cols), sizeof cols - strlen(cols), "%s'%s'", c ? ", " : "", cell(&t, 0, c));
        s = fl_error(FL_ERR_INVALID_ARG, "%s: no column '%s' for the label; the header has %s", path, a.label, cols);
        goto done;
    }
    if (nrow == 0) { s = fl_error(FL_ERR_FORMAT, "%s: the header is followed by no data rows", path); goto done; }
    if (ncol - (label >= 0) == 0) { s = fl_error(FL_ERR_FORMAT, "%s: no feature columns besides the label '%s'", path, a.label); goto done; }
    /* missing values, then each column's kind */
    for (int64_t r = 1; r <= nrow; r++)
        for (int c = 0; c < ncol; c++)
            if (is_missing(cell(&t, r, c))) {
                s = fl_error(FL_ERR_FORMAT, "%s: line %lld, column '%s' (field %d): a missing value ('%s'); expected a "
                             "value (fill or drop the row: flynn does not guess one)", path, (long long)t.line[r],
                             cell(&t, 0, c), c + 1, cell(&t, r, c));
                goto done;
            }
    int64_t features = 0;
    for (int c = 0; c < ncol; c++) {
        double d;
        numeric[c] = true;
        for (int64_t r = 1; r <= nrow && numeric[c]; r++) numeric[c] = number(cell(&t, r, c), &d);
        if (!numeric[c] && (s = categories(&t, c, &cats[c], &ncat[c])) != FL_OK) goto done;
        if (c != label) features += numeric[c] || a.categorical_as_int ? 1 : ncat[c];
    }
    if (features > (int64_t)1 << 24 || nrow > INT64_MAX / 4 / (features ? features : 1)) {
        s = fl_error(FL_ERR_FORMAT, "%s: %lld rows x %lld features is too large", path, (long long)nrow, (long long)features);
        goto done;
    }
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, nrow, features);
    fl_tensor *y = label >= 0 ? fl_tensor_zeros(FL_FLOAT32, nrow) : NULL;
    if (!x || (label >= 0 && !y)) { fl_tensor_free(x); fl_tensor_free(y); s = fl_last_status(); goto done; }
    out->x_train = x;
    out->y_train = y;
    float *xd = fl_tensor_data(x), *yd = y ? fl_tensor_data(y) : NULL;
    for (int64_t r = 0; r < nrow; r++) {
        int64_t k = 0;
        for (int c = 0; c < ncol; c++) {
            const char *v = cell(&t, r + 1, c);
            double d = 0;
            if (numeric[c]) number(v, &d);
            else d = (double)cat_index(cats[c], ncat[c], v);
            if (c == label) { yd[r] = (float)d; continue; }
            if (!numeric[c] && !a.categorical_as_int) {
                xd[r * features + k + (int64_t)d] = 1.0f;
                k += ncat[c];
            } else {
                xd[r * features + k++] = (float)d;
            }
        }
    }
    if (a.info) {
        fl_data_info *in = a.info;
        if (label >= 0 && !numeric[label]) {
            if (ncat[label] > 1 << 20) { s = fl_error(FL_ERR_FORMAT, "%s: label '%s' has %lld distinct values (more than %d classes)", path, a.label, (long long)ncat[label], 1 << 20); goto done; }
            in->class_names = calloc((size_t)ncat[label], sizeof *in->class_names);
            if (!in->class_names) { s = fl_error(FL_ERR_NOMEM, "%s: out of memory", path); goto done; }
            in->num_classes = (int)ncat[label];
            for (int64_t i = 0; i < ncat[label]; i++)
                if (!(in->class_names[i] = strdup(cats[label][i]))) { s = fl_error(FL_ERR_NOMEM, "%s: out of memory", path); goto done; }
        }
        int nnum = 0, ncatc = 0;
        for (int c = 0; c < ncol; c++)
            if (c != label) { if (numeric[c]) nnum++; else ncatc++; }
        char *d = in->description;
        size_t dn = sizeof in->description;
        snprintf(d, dn, "%s: %lld rows; %d numeric and %d categorical column%s%s -> x (%lld, %lld)", path,
                 (long long)nrow, nnum, ncatc, ncatc == 1 ? "" : "s",
                 ncatc == 0 ? "" : a.categorical_as_int ? " (as integer codes)" : " (one-hot)", (long long)nrow,
                 (long long)features);
        for (int c = 0; c < ncol && strlen(d) < dn - 64; c++)
            if (c != label && !numeric[c])
                snprintf(d + strlen(d), dn - strlen(d), "; %s: %lld categories", cell(&t, 0, c), (long long)ncat[c]);
        if (label >= 0) {
            if (numeric[label]) snprintf(d + strlen(d), dn - strlen(d), "; label '%s': numbers", a.label);
            else {
                snprintf(d + strlen(d), dn - strlen(d), "; label '%s': %lld classes (", a.label, (long long)ncat[label]);
                for (int64_t i = 0; i < ncat[label] && strlen(d) < dn - 32; i++)
                    snprintf(d + strlen(d), dn - strlen(d), "%s%lld=%s", i ? ", " : "", (long long)i, cats[label][i]);
                snprintf(d + strlen(d), dn - strlen(d), ")");
            }
        }
    }
done:
    if (s != FL_OK) { fl_dataset_free(out); if (a.info) fl_data_info_free(a.info); }
    for (int c = 0; cats && c < ncol; c++) free(cats[c]);
    free(cats);
    free(ncat);
    free(numeric);
    table_free(&t);
    return s;
}
