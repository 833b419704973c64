/*
 * svg.c — SVG helpers shared by the `flynn` tool's charts (svg.h).
 */
#include "svg.h"

#include <math.h>
#include <string.h>

void flynn_svg_escape(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

void flynn_svg_text_c(FILE *f, const char *cls, double x, double y, const char *anchor, int size, const char *weight,
                      const char *fill, const char *s) {
    fputs("<text", f);
    if (cls) fprintf(f, " class=\"%s\"", cls);
    fprintf(f, " x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\" font-weight=\"%s\" fill=\"%s\">", x, y,
            anchor, size, weight, fill);
    flynn_svg_escape(f, s);
    fputs("</text>\n", f);
}

double flynn_svg_wrapped(FILE *f, double x, double y, int width, const char *fill, const char *s) {
    char line[256];
    if (width > (int)sizeof line - 1) width = (int)sizeof line - 1;
    while (*s) {
        int n = (int)strlen(s);
        if (n > width) {
            n = width;
            while (n > width / 2 && s[n] != ' ') n--;
            if (s[n] != ' ') n = width;
        }
        snprintf(line, sizeof line, "%.*s", n, s);
        flynn_svg_text(f, x, y, "start", 11, "normal", fill, line);
        y += 14;
        s += n;
        while (*s == ' ') s++;
    }
    return y;
}

double flynn_nice_step(double span) {
    if (!(span > 0) || !isfinite(span)) return 1;
    double raw = span / 5, p = pow(10, floor(log10(raw))), m = raw / p;
    return p * (m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10);
}
