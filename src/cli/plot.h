/*
 * plot.h — training curves as SVG (plot.c): `flynn plot HISTORY.csv` reads
 * what Keras's CSVLogger or `flynn train --csv-log` wrote, `flynn train
 * --plot OUT.svg` draws the run's History. One panel per metric family
 * (loss first, then each metric, learning_rate last and small), x = epoch
 * counted from 1, train solid and val_* dashed in the same colour.
 */
#ifndef FLYNN_CLI_PLOT_H
#define FLYNN_CLI_PLOT_H

#include <flynn/flynn.h>

#include <stddef.h>

typedef struct flynn_plot_series {
    char *key;       /* "loss", "val_accuracy", ... */
    double *v;       /* one value per row; NaN where missing or not finite */
    unsigned char *state; /* per row: 0 a number, 1 NaN, 2 +inf, 3 -inf, 4 missing (NA, empty) */
} flynn_plot_series;

typedef struct flynn_plot_data {
    int n;                   /* rows (epochs) */
    double *epoch;           /* the epoch of each row, counted from 1 */
    bool from_csv;           /* read from a CSV (whose epochs count from 0) */
    int nseries;
    flynn_plot_series *s;
} flynn_plot_data;

/* Reads a CSVLogger file (header "epoch,<keys...>", its epoch column counted
 * from 0 as Keras writes it; fields separated by sep, csv.excel quoting).
 * 0, or 1 with a message naming the file, line and column in err. */
int flynn_plot_read_csv(const char *path, char sep, flynn_plot_data *d, char *err, size_t errn);
/* The History of a fit that started at initial_epoch (0 unless resumed).
 * FL_OK or the error (its message set). */
fl_status flynn_plot_from_history(const fl_history *h, int initial_epoch, flynn_plot_data *d);
/* Draws d as an SVG titled `title` and writes it atomically to path.
 * FL_OK or the error (its message names path). */
fl_status flynn_plot_write_svg(const flynn_plot_data *d, const char *title, const char *path);
void flynn_plot_free(flynn_plot_data *d);

int flynn_cmd_plot(int argc, char **argv);

#endif
