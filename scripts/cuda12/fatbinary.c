/*
 * fatbinary.c — a stand-in for the CUDA toolkit's `fatbinary` program, for
 * the CUDA 12 plugin built with clang from pip wheels (scripts/setup.sh
 * --cuda12; docs/gpu.md, "Building the CUDA 12 plugin"). PyPI has no
 * fatbinary for CUDA 12, only NVIDIA's library for the same job, nvFatbin
 * (nvidia-nvfatbin-cu12). clang runs
 *
 *   fatbinary -64 --create OUT --image=profile=sm_75,file=A.cubin
 *             --image=profile=compute_75,file=A.s ...
 *
 * and this program does exactly that with nvFatbin: each sm_XX image is
 * added as a cubin, each compute_XX image as PTX for architecture XX.
 * Fatbins are written uncompressed, so that every CUDA 12 driver reads them.
 * Any other option is an error that names it: a silent partial fatbin
 * would fail only on the GPU.
 */
#include <nvFatbin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
            if (fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
            else { buf[n] = 0; *len = (size_t)n; }
        }
    }
    fclose(f);
    return buf;
}

static int check(nvFatbinResult r, const char *what, const char *arg) {
    if (r == NVFATBIN_SUCCESS) return 0;
    fprintf(stderr, "fatbinary (nvFatbin): %s%s%s: %s\n", what, arg ? " " : "", arg ? arg : "", nvFatbinGetErrorString(r));
    return 1;
}

int main(int argc, char **argv) {
    const char *out = NULL;
    const char *opts[] = {"-64", "-compress=false"};
    nvFatbinHandle h = NULL;
    if (check(nvFatbinCreate(&h, opts, 2), "nvFatbinCreate", NULL)) return 1;
    int images = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-64") == 0) continue;
        if (strcmp(a, "--create") == 0 && i + 1 < argc) { out = argv[++i]; continue; }
        if (strncmp(a, "--create=", 9) == 0) { out = a + 9; continue; }
        if (strncmp(a, "--image=profile=", 16) == 0) {
            /* --image=profile=sm_75,file=PATH or profile=compute_75 */
            const char *prof = a + 16, *comma = strchr(prof, ','), *file = comma ? strstr(comma, "file=") : NULL;
            if (!comma || !file) { fprintf(stderr, "fatbinary: cannot read %s (expected profile=sm_XX,file=PATH)\n", a); return 2; }
            char arch[16];
            int ptx = strncmp(prof, "compute_", 8) == 0;
            int sm = strncmp(prof, "sm_", 3) == 0;
            const char *num = prof + (ptx ? 8 : 3);
            size_t nl = (size_t)(comma - num);
            if ((!ptx && !sm) || nl == 0 || nl >= sizeof arch) {
                fprintf(stderr, "fatbinary: unknown profile in %s (expected sm_XX or compute_XX)\n", a);
                return 2;
            }
            memcpy(arch, num, nl);
            arch[nl] = 0;
            size_t len = 0;
            char *code = slurp(file + 5, &len);
            if (!code) { fprintf(stderr, "fatbinary: cannot read %s\n", file + 5); return 1; }
            nvFatbinResult r = ptx ? nvFatbinAddPTX(h, code, len + 1, arch, file + 5, "")
                                   : nvFatbinAddCubin(h, code, len, arch, file + 5);
            free(code);
            if (check(r, ptx ? "adding the PTX" : "adding the cubin", file + 5)) return 1;
            images++;
            continue;
        }
        fprintf(stderr, "fatbinary: unsupported option %s (this is flynn's nvFatbin stand-in, scripts/cuda12/fatbinary.c)\n", a);
        return 2;
    }
    if (!out || images == 0) { fprintf(stderr, "fatbinary: usage: fatbinary -64 --create OUT --image=profile=sm_XX,file=F ...\n"); return 2; }
    size_t n = 0;
    if (check(nvFatbinSize(h, &n), "nvFatbinSize", NULL)) return 1;
    void *buf = malloc(n);
    if (!buf || check(nvFatbinGet(h, buf), "nvFatbinGet", NULL)) return 1;
    FILE *f = fopen(out, "wb");
    if (!f || fwrite(buf, 1, n, f) != n || fclose(f) != 0) { fprintf(stderr, "fatbinary: cannot write %s\n", out); return 1; }
    free(buf);
    nvFatbinDestroy(&h);
    return 0;
}
