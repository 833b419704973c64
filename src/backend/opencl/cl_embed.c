/*
 * cl_embed.c — a build tool: the OpenCL program's source as one C string. It reads a root .cl file and
 * expands its quoted #include lines from the search folders given (each file once: the headers have
 * include guards, and dialect.h must come first), leaving <...> includes in place (the headers keep those
 * under #if !defined(__OPENCL_VERSION__)). It writes a C file defining fl_opencl_source (the text),
 * fl_opencl_source_len and fl_opencl_source_hash (FNV-1a 64 of the text, hex: the kernel cache's key, so
 * that a changed source is never taken from an old cache).
 *
 * usage: cl_embed OUT.c ROOT.cl DIR...
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FILES 256

static char *g_text;
static size_t g_len, g_cap;
static char g_seen[MAX_FILES][1024];
static int g_nseen;
static const char *const *g_dirs;
static int g_ndirs;

static void append(const char *s, size_t n) {
    if (g_len + n + 1 > g_cap) {
        g_cap = (g_len + n + 1) * 2;
        g_text = realloc(g_text, g_cap);
        if (!g_text) { fprintf(stderr, "cl_embed: out of memory\n"); exit(1); }
    }
    memcpy(g_text + g_len, s, n);
    g_len += n;
    g_text[g_len] = 0;
}

static FILE *open_in_dirs(const char *name, char *path, size_t len) {
    for (int i = 0; i < g_ndirs; i++) {
        snprintf(path, len, "%s/%s", g_dirs[i], name);
        FILE *f = fopen(path, "r");
        if (f) return f;
    }
    return NULL;
}

static void expand(const char *path, FILE *f);

/* a quoted include: the file's text the first time, nothing after */
static void include(const char *from, const char *name) {
    for (int i = 0; i < g_nseen; i++)
        if (strcmp(g_seen[i], name) == 0) return;
    if (g_nseen == MAX_FILES) { fprintf(stderr, "cl_embed: more than %d files\n", MAX_FILES); exit(1); }
    snprintf(g_seen[g_nseen++], sizeof g_seen[0], "%s", name);
    char path[2048];
    FILE *f = open_in_dirs(name, path, sizeof path);
    if (!f) { fprintf(stderr, "cl_embed: %s includes \"%s\", found in none of the folders given\n", from, name); exit(1); }
    expand(path, f);
    fclose(f);
}

static void expand(const char *path, FILE *f) {
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        const char *s = line;
        while (*s == ' ' || *s == '\t') s++;
        if (strncmp(s, "#include", 8) == 0) {
            const char *q = strchr(s + 8, '"');
            const char *e = q ? strchr(q + 1, '"') : NULL;
            if (q && e) {
                char name[1024];
                snprintf(name, sizeof name, "%.*s", (int)(e - q - 1), q + 1);
                include(path, name);
                continue;
            }
        }
        append(line, strlen(line));
    }
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: cl_embed OUT.c ROOT.cl DIR...\n"); return 2; }
    g_dirs = (const char *const *)argv + 3;
    g_ndirs = argc - 3;
    FILE *root = fopen(argv[2], "r");
    if (!root) { fprintf(stderr, "cl_embed: cannot read %s\n", argv[2]); return 1; }
    expand(argv[2], root);
    fclose(root);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < g_len; i++) h = (h ^ (unsigned char)g_text[i]) * 1099511628211ull;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
    FILE *out = fopen(tmp, "w");
    if (!out) { fprintf(stderr, "cl_embed: cannot write %s\n", tmp); return 1; }
    fprintf(out, "/* made by cl_embed from %s: do not edit */\n#include <stddef.h>\n", argv[2]);
    fprintf(out, "const char fl_opencl_source[] =\n\"");
    for (size_t i = 0; i < g_len; i++) {
        unsigned char c = (unsigned char)g_text[i];
        if (c == '\n') fputs("\\n\"\n\"", out);
        else if (c == '\\' || c == '"') fprintf(out, "\\%c", c);
        else if (c == '\t') fputs("\\t", out);
        else if (c < 32 || c > 126) fprintf(out, "\\%03o", c);
        else fputc(c, out);
    }
    fprintf(out, "\";\nconst size_t fl_opencl_source_len = %zu;\n", g_len);
    fprintf(out, "const char fl_opencl_source_hash[] = \"%016llx\";\n", (unsigned long long)h);
    if (fclose(out) != 0 || rename(tmp, argv[1]) != 0) { fprintf(stderr, "cl_embed: cannot write %s\n", argv[1]); return 1; }
    return 0;
}
