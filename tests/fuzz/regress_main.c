/*
 * regress_main.c — runs a fuzz harness without libFuzzer: main() calls the
 * harness's LLVMFuzzerTestOneInput on every file named on the command line
 * and on every file in every folder named there (not recursive), in sorted
 * order, so that the regression inputs in tests/fuzz/regressions/<harness>
 * and the seed corpus run in the ordinary (ASan) build as a ctest.
 * A crash is the sanitizer's report and a non-zero exit; a missing path or
 * a run with no input at all is an error (exit 2), never a silent pass.
 */
#include "fuzz.h"

#include <dirent.h>

/* weak: only harnesses that need setup define it */
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "fuzz regress: cannot open %s\n", path); return -1; }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (!buf) { fprintf(stderr, "fuzz regress: out of memory reading %s\n", path); return -1; }
    /* an exact-size copy, so that ASan sees reads past the input's end */
    uint8_t *exact = malloc(n ? n : 1);
    memcpy(exact, buf, n);
    free(buf);
    fprintf(stderr, "fuzz regress: %s (%zu bytes)\n", path, n);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    int ran = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) { fprintf(stderr, "fuzz regress: %s does not exist\n", argv[i]); return 2; }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i]) != 0) return 2;
            ran++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) { fprintf(stderr, "fuzz regress: cannot read the folder %s\n", argv[i]); return 2; }
        char **names = NULL;
        size_t n = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue; /* ., .., .gitkeep */
            names = realloc(names, (n + 1) * sizeof *names);
            names[n++] = strdup(e->d_name);
        }
        closedir(d);
        if (n > 1) qsort(names, n, sizeof *names, cmp);
        for (size_t k = 0; k < n; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], names[k]);
            if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                if (run_file(path) != 0) return 2;
                ran++;
            }
            free(names[k]);
        }
        free(names);
    }
    if (ran == 0) { fprintf(stderr, "fuzz regress: no input files given\n"); return 2; }
    printf("fuzz regress: %d inputs ran without a crash\n", ran);
    return 0;
}
