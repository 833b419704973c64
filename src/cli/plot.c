/*
 * plot.c — `flynn plot HISTORY.csv` and `flynn train --plot OUT.svg`: the
 * loss and metric curves per epoch as one SVG (plot.h).
 *
 * Layout, top to bottom: the title and a line saying what x is; then one
 * panel per metric family: "loss" first, then each other key with its
 * "val_" twin in the order of the columns, then "learning_rate" (or "lr") in
 * a smaller panel. A panel draws the training key solid and val_<key> dashed
 * in the panel's colour, with round markers on every epoch while there are
 * at most MARKERS_MAX of them; an epoch whose value is NaN, inf or missing
 * (CSVLogger's "NA") breaks the line there, an epoch between two such stays
 * a lone marker, and a note under the panel says which epochs. A key the
 * plot does not know is simply another family with its own panel; one
 * that is NA on every row (CSVLogger's val_ columns without validation
 * data) is left out.
 *
 * The chart is meant to be read by tests as well as people: each panel is a
 * <g class="panel" data-family=...>, the curves are <polyline class="series"
 * data-key=...>, markers <circle class="marker" data-key=...>, and the tick
 * labels <text class="xtick|ytick"> stand next to <line class="xgrid|ygrid">.
 */
#include "plot.h"
#include "svg.h"
#include "core/error.h"
#include "io/io.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ST_NUM = 0, ST_NAN, ST_PINF, ST_NINF, ST_MISSING };

#define MARKERS_MAX 60

void flynn_plot_free(flynn_plot_data *d) {
    if (!d) return;
    for (int i = 0; i < d->nseries; i++) {
        free(d->s[i].key);
        free(d->s[i].v);
        free(d->s[i].state);
    }
    free(d->s);
    free(d->epoch);
    memset(d, 0, sizeof *d);
}

/* ------------------------------------------------------------ reading CSV */

typedef struct csv_reader {
    const char *path;
    char *buf;
    size_t len, pos;
    int line;       /* line of the next character, from 1 */
    char sep;
} csv_reader;

static void free_fields(char **fields, int n) {
    for (int i = 0; i < n; i++) free(fields[i]);
}

/* One record's fields (csv.excel: "" inside quotes is one quote; a quoted
 * field may span lines). Returns the number of fields, 0 at the end of the
 * file, -1 on a quote left open (err set). *line_out: the record's line. */
static int csv_record(csv_reader *r, char ***fields, int *cap, int *line_out, char *err, size_t errn) {
    if (r->pos >= r->len) return 0;
    *line_out = r->line;
    int nf = 0;
    size_t fcap = 64, fl = 0;
    char *f = malloc(fcap);
    if (!f) { snprintf(err, errn, "%s: out of memory", r->path); return -1; }
    bool quoted = false, was_quoted = false, end = false;
    while (!end) {
        int c = r->pos < r->len ? (unsigned char)r->buf[r->pos++] : EOF;
        if (quoted) {
            if (c == EOF) {
                free(f);
                free_fields(*fields, nf);
                snprintf(err, errn, "%s line %d, column %d: a quote opened here is never closed", r->path, *line_out,
                         nf + 1);
                return -1;
            }
            if (c == '\n') r->line++;
            if (c == '"') {
                if (r->pos < r->len && r->buf[r->pos] == '"') r->pos++;
                else { quoted = false; continue; }
            }
        } else if (c == '"' && fl == 0 && !was_quoted) {
            quoted = was_quoted = true;
            continue;
        } else if (c == r->sep || c == '\n' || c == EOF || (c == '\r' && (r->pos >= r->len || r->buf[r->pos] == '\n'))) {
            if (c == '\r') r->pos++, c = '\n';
            if (c == '\n') r->line++;
            if (nf >= *cap) {
                int nc = *cap ? *cap * 2 : 16;
                char **p = realloc(*fields, (size_t)nc * sizeof *p);
                if (!p) { free(f); free_fields(*fields, nf); snprintf(err, errn, "%s: out of memory", r->path); return -1; }
                *fields = p;
                *cap = nc;
            }
            f[fl] = 0;
            (*fields)[nf++] = f;
            if (c != r->sep) { end = true; break; }
            fcap = 64;
            fl = 0;
            was_quoted = false;
            if (!(f = malloc(fcap))) { free_fields(*fields, nf); snprintf(err, errn, "%s: out of memory", r->path); return -1; }
            continue;
        }
        if (fl + 2 > fcap) {
            char *p = realloc(f, fcap *= 2);
            if (!p) { free(f); free_fields(*fields, nf); snprintf(err, errn, "%s: out of memory", r->path); return -1; }
            f = p;
        }
        f[fl++] = (char)c;
    }
    return nf;
}

/* A value as CSVLogger writes it (Python's repr of a float: 0.25, nan, inf,
 * -inf, 1e-05) or "NA" / "" for a key the epoch did not have. */
static bool parse_value(const char *s, double *v, unsigned char *state) {
    while (*s == ' ') s++;
    if (!*s || strcmp(s, "NA") == 0) { *v = NAN; *state = ST_MISSING; return true; }
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (end == s) return false;
    while (*end == ' ') end++;
    if (*end) return false;
    *v = x;
    *state = isnan(x) ? ST_NAN : isinf(x) ? (x > 0 ? ST_PINF : ST_NINF) : ST_NUM;
    return true;
}

static int grow_rows(flynn_plot_data *d, int *cap) {
    if (d->n < *cap) return 0;
    int nc = *cap ? *cap * 2 : 64;
    double *e = realloc(d->epoch, (size_t)nc * sizeof *e);
    if (!e) return 1;
    d->epoch = e;
    for (int k = 0; k < d->nseries; k++) {
        double *v = realloc(d->s[k].v, (size_t)nc * sizeof *v);
        if (!v) return 1;
        d->s[k].v = v;
        unsigned char *st = realloc(d->s[k].state, (size_t)nc);
        if (!st) return 1;
        d->s[k].state = st;
    }
    *cap = nc;
    return 0;
}

int flynn_plot_read_csv(const char *path, char sep, flynn_plot_data *d, char *err, size_t errn) {
    memset(d, 0, sizeof *d);
    FILE *fp = fopen(path, "rb");
    if (!fp) { snprintf(err, errn, "cannot read %s: %s", path, strerror(errno)); return 1; }
    csv_reader r = {.path = path, .line = 1, .sep = sep ? sep : ','};
    size_t cap = 0;
    for (;;) {
        if (r.len + 65536 > cap) {
            char *p = realloc(r.buf, cap = cap * 2 + 65536);
            if (!p) { fclose(fp); free(r.buf); snprintf(err, errn, "%s: out of memory", path); return 1; }
            r.buf = p;
        }
        size_t got = fread(r.buf + r.len, 1, cap - r.len, fp);
        r.len += got;
        if (got == 0) break;
    }
    bool bad = ferror(fp);
    int saved = errno;
    fclose(fp);
    r.buf[r.len] = 0; /* the header's text for messages */
    if (bad) { free(r.buf); snprintf(err, errn, "cannot read %s: %s", path, strerror(saved)); return 1; }
    if (r.len >= 3 && memcmp(r.buf, "\xEF\xBB\xBF", 3) == 0) r.pos = 3; /* a UTF-8 byte order mark */

    char **fields = NULL;
    int fcap = 0, line = 0, rc = 1, rowcap = 0, ecol = -1;
    int nh = csv_record(&r, &fields, &fcap, &line, err, errn);
    if (nh < 0) goto out;
    if (nh == 0 || (nh == 1 && !fields[0][0])) {
        snprintf(err, errn, "%s: empty; expected a Keras CSVLogger file whose first line is epoch,<keys...>", path);
        if (nh) free_fields(fields, nh);
        goto out;
    }
    for (int i = 0; i < nh; i++)
        if (strcmp(fields[i], "epoch") == 0) { ecol = i; break; }
    if (ecol < 0) {
        char head[200];
        const char *h0 = r.buf + (r.len >= 3 && memcmp(r.buf, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0);
        size_t hl = strcspn(h0, "\r\n");
        snprintf(head, sizeof head, "%.*s%s", (int)(hl < 150 ? hl : 150), h0, hl < 150 ? "" : "...");
        snprintf(err, errn, "%s line %d: no 'epoch' column in the header \"%s\"; expected a Keras CSVLogger file "
                 "(epoch,<keys...>)%s", path, line, head,
                 strchr(head, r.sep) ? "" : " (a different separator? see --separator)");
        free_fields(fields, nh);
        goto out;
    }
    if (!(d->s = calloc((size_t)nh, sizeof *d->s))) { free_fields(fields, nh); snprintf(err, errn, "%s: out of memory", path); goto out; }
    int *col_of = calloc((size_t)nh, sizeof *col_of);
    if (!col_of) { free_fields(fields, nh); snprintf(err, errn, "%s: out of memory", path); goto out; }
    for (int i = 0; i < nh; i++) {
        if (i == ecol) { free(fields[i]); continue; }
        col_of[d->nseries] = i;
        d->s[d->nseries++].key = fields[i];
    }
    int header_line = line;
    d->from_csv = true;
    for (;;) {
        int nf = csv_record(&r, &fields, &fcap, &line, err, errn);
        if (nf < 0) break;
        if (nf == 0) {
            if (d->n == 0) snprintf(err, errn, "%s: a header (line %d) but no epochs", path, header_line), nf = -1;
            else rc = 0;
            break;
        }
        if (nf == 1 && !fields[0][0]) { free_fields(fields, nf); continue; } /* a blank line */
        if (nf != nh) {
            snprintf(err, errn, "%s line %d: %d field%s, expected %d as in the header (line %d)", path, line, nf,
                     nf == 1 ? "" : "s", nh, header_line);
            free_fields(fields, nf);
            break;
        }
        if (grow_rows(d, &rowcap)) { free_fields(fields, nf); snprintf(err, errn, "%s: out of memory", path); break; }
        double e;
        unsigned char st;
        if (!parse_value(fields[ecol], &e, &st) || st != ST_NUM || e != floor(e) || e < 0 || e > 1e9) {
            snprintf(err, errn, "%s line %d, column %d (epoch): \"%.40s\" is not an epoch number (expected 0, 1, 2, ...)",
                     path, line, ecol + 1, fields[ecol]);
            free_fields(fields, nf);
            break;
        }
        d->epoch[d->n] = e + 1; /* Keras writes epochs from 0; the plot counts from 1 as its progress bar */
        bool ok = true;
        for (int k = 0; k < d->nseries && ok; k++) {
            int c = col_of[k];
            if (!parse_value(fields[c], &d->s[k].v[d->n], &d->s[k].state[d->n])) {
                snprintf(err, errn, "%s line %d, column %d (%s): \"%.40s\" is not a number (expected a number, nan, inf "
                         "or NA)", path, line, c + 1, d->s[k].key, fields[c]);
                ok = false;
            }
        }
        free_fields(fields, nf);
        if (!ok) break;
        d->n++;
    }
    free(col_of);
out:
    free(fields);
    free(r.buf);
    if (rc) flynn_plot_free(d);
    return rc;
}

/* ------------------------------------------------------------ from History */

fl_status flynn_plot_from_history(const fl_history *h, int initial_epoch, flynn_plot_data *d) {
    memset(d, 0, sizeof *d);
    int n = fl_history_epochs(h), nk = fl_history_num_keys(h);
    if (n <= 0) return fl_error(FL_ERR_INVALID_ARG, "--plot: the History holds no epochs");
    d->n = n;
    if (!(d->epoch = malloc((size_t)n * sizeof *d->epoch)) || !(d->s = calloc((size_t)(nk ? nk : 1), sizeof *d->s))) {
        flynn_plot_free(d);
        return fl_error(FL_ERR_NOMEM, "--plot: out of memory");
    }
    for (int i = 0; i < n; i++) d->epoch[i] = initial_epoch + i + 1;
    for (int k = 0; k < nk; k++) {
        const char *key = fl_history_key(h, k);
        const float *v = fl_history_get(h, key);
        flynn_plot_series *s = &d->s[d->nseries++];
        size_t kl = strlen(key) + 1;
        if (!(s->key = malloc(kl)) || !(s->v = malloc((size_t)n * sizeof *s->v)) || !(s->state = malloc((size_t)n))) {
            flynn_plot_free(d);
            return fl_error(FL_ERR_NOMEM, "--plot: out of memory");
        }
        memcpy(s->key, key, kl);
        for (int i = 0; i < n; i++) {
            double x = v[i];
            s->v[i] = x;
            s->state[i] = isnan(x) ? ST_NAN : isinf(x) ? (x > 0 ? ST_PINF : ST_NINF) : ST_NUM;
        }
    }
    return FL_OK;
}

/* ------------------------------------------------------------ drawing */

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

typedef struct family {
    const char *name;
    int train, val;  /* series indices, -1 when absent */
    bool small;      /* learning rate: a smaller panel */
} family;

static bool is_lr(const char *name) { return strcmp(name, "learning_rate") == 0 || strcmp(name, "lr") == 0; }

static const char *base_name(const char *key) { return strncmp(key, "val_", 4) == 0 && key[4] ? key + 4 : key; }

static bool all_missing(const flynn_plot_data *d, const flynn_plot_series *s) {
    for (int i = 0; i < d->n; i++)
        if (s->state[i] != ST_MISSING) return false;
    return true;
}

/* Families in drawing order: loss, the rest by first column, learning rate.
 * A column that is NA throughout is left out: CSVLogger writes val_ columns
 * of NA for a run without validation data. */
static int make_families(const flynn_plot_data *d, family *fam) {
    int nf = 0;
    for (int pass = 0; pass < 3; pass++)
        for (int k = 0; k < d->nseries; k++) {
            if (all_missing(d, &d->s[k])) continue;
            const char *b = base_name(d->s[k].key);
            int want = strcmp(b, "loss") == 0 ? 0 : is_lr(b) ? 2 : 1;
            if (want != pass) continue;
            int f = 0;
            while (f < nf && strcmp(fam[f].name, b) != 0) f++;
            if (f == nf) fam[nf++] = (family){.name = b, .train = -1, .val = -1, .small = pass == 2};
            if (b != d->s[k].key) { if (fam[f].val < 0) fam[f].val = k; }
            else if (fam[f].train < 0) fam[f].train = k;
        }
    return nf;
}

/* A tick label: as many decimals as the step needs (0.00095, not 0.00095
 * and 0.001 side by side), %g for huge values or tiny steps. */
static void fmt_tick(char *buf, size_t n, double v, double step) {
    if (fabs(v) < step * 1e-9) v = 0;
    if (fabs(v) >= 1e6 || step < 1e-5) { snprintf(buf, n, "%.3g", v); return; }
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (fabs(step * pow(10, dec) - round(step * pow(10, dec))) > 1e-6) dec++; /* 0.25 */
    if (dec > 8) dec = 8;
    snprintf(buf, n, "%.*f", dec, v);
}

static void note_epochs(char *buf, size_t n, const flynn_plot_data *d, const flynn_plot_series *s, int state,
                        const char *what) {
    int count = 0;
    size_t len = strlen(buf);
    for (int i = 0; i < d->n; i++) {
        if (s->state[i] != state) continue;
        if (count < 6 && len < n) {
            len += (size_t)snprintf(buf + len, n - len, "%s%s %.0f", count ? "," : len ? "; " : "",
                                    count ? "" : what, d->epoch[i]);
        }
        count++;
    }
    if (count > 6 && len < n) snprintf(buf + len, n - len, " and %d more", count - 6);
}

typedef struct axis {
    double lo, hi, step;
} axis;

/* Pixels of a value inside a frame [a, b]: PAD pixels kept clear at both
 * ends so that markers at the first and last epoch stay off the frame. */
enum { PAD = 8 };
static double to_px(const axis *ax, double v, double a, double b) {
    double pad = b > a ? PAD : -PAD;
    return a + pad + (b - a - 2 * pad) * (v - ax->lo) / (ax->hi - ax->lo);
}

static axis y_axis(const flynn_plot_data *d, const family *f) {
    double lo = INFINITY, hi = -INFINITY;
    int keys[2] = {f->train, f->val};
    for (int j = 0; j < 2; j++) {
        if (keys[j] < 0) continue;
        const flynn_plot_series *s = &d->s[keys[j]];
        for (int i = 0; i < d->n; i++)
            if (s->state[i] == ST_NUM) {
                if (s->v[i] < lo) lo = s->v[i];
                if (s->v[i] > hi) hi = s->v[i];
            }
    }
    if (lo > hi) lo = 0, hi = 1; /* no finite value at all */
    if (hi - lo <= fabs(hi) * 1e-9) { /* one value */
        double pad = fabs(hi) > 0 ? fabs(hi) * 0.1 : 1;
        lo -= pad, hi += pad;
    }
    axis a = {.step = flynn_nice_step(hi - lo)};
    a.lo = floor(lo / a.step + 1e-9) * a.step;
    a.hi = ceil(hi / a.step - 1e-9) * a.step;
    if (a.hi <= a.lo) a.hi = a.lo + a.step;
    return a;
}

static axis x_axis(const flynn_plot_data *d) {
    double lo = d->epoch[0], hi = d->epoch[0];
    for (int i = 1; i < d->n; i++) {
        if (d->epoch[i] < lo) lo = d->epoch[i];
        if (d->epoch[i] > hi) hi = d->epoch[i];
    }
    axis a = {.lo = lo, .hi = hi};
    if (hi == lo) a.lo -= 0.5, a.hi += 0.5;
    a.step = a.hi - a.lo <= 12 ? 1 : flynn_nice_step(a.hi - a.lo); /* every epoch of a short run */
    if (a.step < 1) a.step = 1;
    else if (a.step != floor(a.step)) a.step = floor(a.step); /* 2.5 -> 2: epochs are whole */
    return a;
}

enum { SVG_W = 800, X0 = 86, PW = 670, TITLE_H = 58, HEAD_H = 30, PH = 210, PH_SMALL = 110, FOOT_H = 44 };

static int panel_notes(const flynn_plot_data *d, const family *f, char notes[][512]) {
    int nn = 0;
    int keys[2] = {f->train, f->val};
    for (int j = 0; j < 2; j++) {
        if (keys[j] < 0) continue;
        const flynn_plot_series *s = &d->s[keys[j]];
        static const char *const what[] = {NULL, "NaN at epoch", "inf at epoch", "-inf at epoch", "no value (NA) at epoch"};
        char buf[400];
        snprintf(buf, sizeof buf, "%s: ", s->key);
        size_t start = strlen(buf);
        for (int st = ST_NAN; st <= ST_MISSING; st++) note_epochs(buf + start, sizeof buf - start, d, s, st, what[st]);
        if (buf[start]) snprintf(notes[nn++], 512, "%s (not drawn: the line breaks there)", buf);
    }
    return nn;
}

static double panel_height(const flynn_plot_data *d, const family *f) {
    char notes[2][512];
    return HEAD_H + (f->small ? PH_SMALL : PH) + FOOT_H + 15 * panel_notes(d, f, notes) + 14;
}

static void draw_series(FILE *f, const flynn_plot_data *d, int k, bool val, const char *color, const axis *xa,
                        const axis *ya, double top, double ph) {
    const flynn_plot_series *s = &d->s[k];
    const double sw = d->n > 300 ? 1.5 : 2;
    bool markers = d->n <= MARKERS_MAX;
#define PX(i) to_px(xa, d->epoch[i], X0, X0 + PW)
#define PY(i) to_px(ya, s->v[i], top + ph, top)
    int seg = 0;
    for (int i = 0; i < d->n;) {
        if (s->state[i] != ST_NUM) { i++; continue; }
        int j = i;
        while (j < d->n && s->state[j] == ST_NUM) j++;
        if (j - i >= 2) {
            fprintf(f, "<polyline class=\"series\" data-key=\"");
            flynn_svg_escape(f, s->key);
            fprintf(f, "\" data-segment=\"%d\" fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\" "
                       "stroke-linejoin=\"round\"%s points=\"",
                    seg, color, sw, val ? " stroke-dasharray=\"7 4\"" : "");
            for (int t = i; t < j; t++) fprintf(f, "%s%.2f,%.2f", t > i ? " " : "", PX(t), PY(t));
            fputs("\"/>\n", f);
        }
        for (int t = i; t < j; t++)
            if (markers || j - i == 1) { /* a lone epoch is a point, whatever the count */
                fprintf(f, "<circle class=\"marker\" data-key=\"");
                flynn_svg_escape(f, s->key);
                fprintf(f, "\" cx=\"%.2f\" cy=\"%.2f\" r=\"%.1f\" fill=\"%s\" stroke=\"%s\" stroke-width=\"1.5\"/>\n",
                        PX(t), PY(t), val ? 3.0 : 3.5, val ? "white" : color, color);
            }
        seg++;
        i = j;
    }
#undef PX
#undef PY
}

static void draw_panel(FILE *f, const flynn_plot_data *d, const family *fam, const char *color, const axis *xa,
                       double y0) {
    const double ph = fam->small ? PH_SMALL : PH, top = y0 + HEAD_H;
    char buf[256];
    axis ya = y_axis(d, fam);
    fputs("<g class=\"panel\" data-family=\"", f);
    flynn_svg_escape(f, fam->name);
    fputs("\">\n", f);
    flynn_svg_text_c(f, "panel-title", X0, y0 + 20, "start", 14, "bold", "#222", fam->name);
    /* legend, right-aligned in the panel's head */
    double lx = X0 + PW;
    int keys[2] = {fam->val, fam->train};
    for (int j = 0; j < 2; j++) {
        if (keys[j] < 0) continue;
        const char *key = d->s[keys[j]].key;
        double tw = 7.0 * (double)strlen(key) + 8;
        lx -= tw;
        flynn_svg_text_c(f, "legend", lx, y0 + 20, "start", 12, "normal", "#222", key);
        lx -= 30;
        fprintf(f, "<line class=\"legend-line\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                   "stroke-width=\"2\"%s/>\n",
                lx, y0 + 16, lx + 24, y0 + 16, color, j == 0 ? " stroke-dasharray=\"7 4\"" : "");
        lx -= 14;
    }
    /* y grid and labels */
    int nt = (int)floor((ya.hi - ya.lo) / ya.step + 0.5);
    for (int t = 0; t <= nt; t++) {
        double v = ya.lo + t * ya.step, y = to_px(&ya, v, top + ph, top);
        fprintf(f, "<line class=\"ygrid\" x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"#e4e4e4\"/>\n", X0, y,
                X0 + PW, y);
        fmt_tick(buf, sizeof buf, v, ya.step);
        flynn_svg_text_c(f, "ytick", X0 - 8, y + 4, "end", 11, "normal", "#444", buf);
    }
    /* x grid and labels */
    for (double e = ceil(xa->lo / xa->step) * xa->step; e <= xa->hi + 1e-9; e += xa->step) {
        double x = to_px(xa, e, X0, X0 + PW);
        fprintf(f, "<line class=\"xgrid\" x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#efefef\"/>\n", x, top,
                x, top + ph);
        snprintf(buf, sizeof buf, "%.0f", e);
        flynn_svg_text_c(f, "xtick", x, top + ph + 16, "middle", 11, "normal", "#444", buf);
    }
    fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n", X0, top, PW, ph);
    flynn_svg_text(f, X0 + PW / 2.0, top + ph + 34, "middle", 12, "normal", "#444", "epoch");
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\" fill=\"#444\" "
               "transform=\"rotate(-90 %.1f %.1f)\">",
            X0 - 62.0, top + ph / 2, X0 - 62.0, top + ph / 2);
    flynn_svg_escape(f, fam->name);
    fputs("</text>\n", f);
    if (fam->val >= 0) draw_series(f, d, fam->val, true, color, xa, &ya, top, ph);
    if (fam->train >= 0) draw_series(f, d, fam->train, false, color, xa, &ya, top, ph);
    char notes[2][512];
    int nn = panel_notes(d, fam, notes);
    for (int i = 0; i < nn; i++) flynn_svg_text_c(f, "note", X0, top + ph + FOOT_H + 15 * i + 6, "start", 11, "normal", "#a33", notes[i]);
    fputs("</g>\n", f);
}

fl_status flynn_plot_write_svg(const flynn_plot_data *d, const char *title, const char *path) {
    if (!d || d->n <= 0) return fl_error(FL_ERR_INVALID_ARG, "%s: nothing to plot (no epochs)", path);
    family *fam = calloc((size_t)(d->nseries ? d->nseries : 1), sizeof *fam);
    if (!fam) return fl_error(FL_ERR_NOMEM, "%s: out of memory", path);
    int nf = make_families(d, fam);
    double total = TITLE_H + 20;
    for (int i = 0; i < nf; i++) total += panel_height(d, &fam[i]);
    char *mem = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&mem, &len);
    if (!f) { free(fam); return fl_error(FL_ERR_NOMEM, "%s: out of memory", path); }
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\" viewBox=\"0 0 %d %.0f\" "
               "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
            SVG_W, total, SVG_W, total);
    fputs("<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n", f);
    flynn_svg_text_c(f, "title", SVG_W / 2.0, 26, "middle", 16, "bold", "#222", title);
    char buf[256];
    axis xa = x_axis(d);
    snprintf(buf, sizeof buf, "%d epoch%s, counted from 1%s; train solid, validation dashed", d->n, d->n == 1 ? "" : "s",
             d->from_csv ? " (the CSV's epoch column + 1)" : "");
    flynn_svg_text_c(f, "subtitle", SVG_W / 2.0, 46, "middle", 12, "normal", "#555", buf);
    if (nf == 0) flynn_svg_text_c(f, "note", X0, TITLE_H + 20, "start", 12, "normal", "#a33",
                                  "no columns besides epoch: nothing to draw");
    double y = TITLE_H;
    for (int i = 0; i < nf; i++) {
        draw_panel(f, d, &fam[i], palette[i % (int)(sizeof palette / sizeof palette[0])], &xa, y);
        y += panel_height(d, &fam[i]);
    }
    fputs("</svg>\n", f);
    free(fam);
    if (fclose(f) != 0 || !mem) { free(mem); return fl_error(FL_ERR_NOMEM, "%s: out of memory", path); }
    fl_status s = fl_atomic_save(path, mem, len);
    free(mem);
    return s;
}

/* ------------------------------------------------------------ flynn plot */

static void usage(FILE *f) {
    fprintf(f,
            "usage: flynn plot HISTORY.csv [-o OUT.svg] [--title TEXT] [--separator C]\n\n"
            "Draws the loss and metric curves per epoch of a training log, as Keras's CSVLogger\n"
            "or `flynn train --csv-log FILE` write it (header epoch,<keys...>), into one SVG that\n"
            "a browser shows: a panel per metric family (loss, then each metric, learning_rate\n"
            "small and last; any other column gets its own panel), x = epoch counted from 1 (the\n"
            "CSV's epoch column + 1, as Keras's progress bar counts), training solid and val_*\n"
            "dashed in the same colour. NaN, inf and NA values leave a gap and a note.\n"
            "`flynn train ... --plot OUT.svg` draws the same chart from the run's History.\n\n"
            "  -o, --output OUT.svg   where to write (default: HISTORY with .svg for .csv)\n"
            "  --title TEXT           the chart's title (default: the CSV's file name)\n"
            "  --separator C          the field separator (default ',', as CSVLogger's)\n\n"
            "Exit status: 0 written, 1 the CSV is unreadable or malformed (the message names the\n"
            "file, line and column) or the SVG cannot be written, 2 bad usage.\n");
}

static int bad_usage(const char *msg, const char *arg) {
    fprintf(stderr, "flynn plot: %s%s%s\n(see `flynn plot --help`)\n", msg, arg ? " " : "", arg ? arg : "");
    return 2;
}

int flynn_cmd_plot(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *title = NULL;
    char sep = ',';
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { usage(stdout); return 0; }
        const char *val = NULL;
        int which = strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0 ? 1
                  : strcmp(a, "--title") == 0 ? 2 : strcmp(a, "--separator") == 0 ? 3 : 0;
        if (!which && strncmp(a, "--output=", 9) == 0) which = 1, val = a + 9;
        else if (!which && strncmp(a, "--title=", 8) == 0) which = 2, val = a + 8;
        else if (!which && strncmp(a, "--separator=", 12) == 0) which = 3, val = a + 12;
        if (which) {
            if (!val) {
                if (i + 1 >= argc) return bad_usage("missing value for", a);
                val = argv[++i];
            }
            if (which == 1) out = val;
            else if (which == 2) title = val;
            else {
                if (strcmp(val, "\\t") == 0 || strcmp(val, "tab") == 0) val = "\t";
                if (strlen(val) != 1 || *val == '"' || *val == '\n' || *val == '\r')
                    return bad_usage("--separator wants one character (or tab), got", val);
                sep = *val;
            }
            continue;
        }
        if (a[0] == '-' && a[1]) return bad_usage("unknown option", a);
        if (in) return bad_usage("one HISTORY.csv at a time; also got", a);
        in = a;
    }
    if (!in) return bad_usage("missing HISTORY.csv (a Keras CSVLogger or `flynn train --csv-log` file)", NULL);
    char *def = NULL;
    if (!out) {
        size_t n = strlen(in);
        if (!(def = malloc(n + 5))) return bad_usage("out of memory", NULL);
        memcpy(def, in, n + 1);
        if (n > 4 && (strcmp(def + n - 4, ".csv") == 0 || strcmp(def + n - 4, ".CSV") == 0)) def[n - 4] = 0;
        strcat(def, ".svg");
        out = def;
    }
    if (strcmp(out, in) == 0) { free(def); return bad_usage("the output would replace the input:", out); }
    flynn_plot_data d;
    char err[1024];
    int rc = 0;
    if (flynn_plot_read_csv(in, sep, &d, err, sizeof err) != 0) {
        fprintf(stderr, "flynn plot: %s\n", err);
        free(def);
        return 1;
    }
    if (flynn_plot_write_svg(&d, title ? title : in, out) != FL_OK) {
        fprintf(stderr, "flynn plot: %s\n", fl_last_error());
        rc = 1;
    } else {
        printf("%d epoch%s, %d column%s plotted to %s\n", d.n, d.n == 1 ? "" : "s", d.nseries, d.nseries == 1 ? "" : "s",
               out);
    }
    flynn_plot_free(&d);
    free(def);
    return rc;
}
