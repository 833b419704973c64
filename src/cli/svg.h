/*
 * svg.h — small SVG drawing helpers shared by the `flynn` tool's charts:
 * `flynn bench --svg` (bench.c) and `flynn plot` / `flynn train --plot` (plot.c).
 */
#ifndef FLYNN_CLI_SVG_H
#define FLYNN_CLI_SVG_H

#include <stdio.h>

/* <text> at (x, y) with the text XML-escaped; anchor start|middle|end. `cls`
 * (may be NULL) becomes a class attribute, for tests that read the chart. */
void flynn_svg_text_c(FILE *f, const char *cls, double x, double y, const char *anchor, int size, const char *weight,
                      const char *fill, const char *s);
#define flynn_svg_text(f, x, y, anchor, size, weight, fill, s) flynn_svg_text_c(f, NULL, x, y, anchor, size, weight, fill, s)
/* Text over several lines of at most `width` characters, broken at blanks,
 * 14 px apart; returns the y below the last line. */
double flynn_svg_wrapped(FILE *f, double x, double y, int width, const char *fill, const char *s);
/* Writes s XML-escaped (for attribute values and text). */
void flynn_svg_escape(FILE *f, const char *s);
/* A "nice" axis step (1, 2, 2.5 or 5 times a power of ten) for about 5
 * ticks over a range of `span`. */
double flynn_nice_step(double span);

#endif
