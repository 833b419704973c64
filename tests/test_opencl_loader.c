/*
 * test_opencl_loader.c — the OpenCL plugin's failures, each one line that names the reason (issue 46, "Bad
 * input and failure"). One case per process (the plugin opens once per process), chosen by argv[1]; ctest
 * sets the environment of each (tests/CMakeLists.txt):
 *   missing     FLYNN_OPENCL_PLUGIN names no file: the reason says the plugin is missing and what installs it
 *   notplugin   it names a library without the entry point
 *   disabled    FLYNN_DISABLE_OPENCL=1
 *   noindex     FLYNN_OPENCL_DEVICE=99: no such device
 *   noname      FLYNN_OPENCL_DEVICE=a name no device has
 *   cpuonly     the device is a CPU (PoCL): fl_opencl_backend(gpu_only) refuses it, (any) takes it
 *   cache_write   the kernels are built (the cache folder emptied first) and stored; the test breaks the file
 *   cache_rebuilt the broken file is not used: the kernels are built anew
 * Exits 77 (skipped) where a case needs an OpenCL device and there is none.
 */
#include "check.h"

#include "device/opencl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void expect_reason(const char *want) {
    char why[2048];
    const fl_backend *be = fl_opencl_backend(0, why, sizeof why);
    CHECK_MSG(be == NULL, "the backend opened, expected the reason '%s'", want);
    CHECK_MSG(strstr(why, want) != NULL, "reason '%s' does not say '%s'", why, want);
    printf("reason: %s\n", why);
}

int main(int argc, char **argv) {
    const char *c = argc > 1 ? argv[1] : "";
    if (strcmp(c, "missing") == 0) expect_reason("is missing): install ocl-icd-opencl-dev");
    else if (strcmp(c, "notplugin") == 0) expect_reason("is not a flynn OpenCL plugin");
    else if (strcmp(c, "disabled") == 0) expect_reason("FLYNN_DISABLE_OPENCL is set");
    else if (strcmp(c, "noindex") == 0 || strcmp(c, "noname") == 0 || strcmp(c, "cpuonly") == 0) {
        char why[2048];
        int n = fl_opencl_state_get()->tools ? fl_opencl_state_get()->tools->device_count() : -1;
        if (n <= 0) { printf("SKIP: no OpenCL device to test against\n"); return 77; }
        if (strcmp(c, "noindex") == 0) expect_reason("no OpenCL device 99");
        else if (strcmp(c, "noname") == 0) expect_reason("no OpenCL device's name contains it");
        else {
            const fl_opencl_state *s = fl_opencl_state_get();
            if (!s->backend || s->rep.dev.is_gpu) { printf("SKIP: the first device is not a CPU one\n"); return 77; }
            CHECK_MSG(fl_opencl_backend(1, why, sizeof why) == NULL, "--device auto would take the CPU device %s",
                      s->rep.dev.name);
            CHECK_MSG(strstr(why, "which --device auto never takes") != NULL, "reason: %s", why);
            CHECK(fl_opencl_backend(0, why, sizeof why) != NULL);
            printf("auto refuses: %s\n", why);
        }
    } else if (strcmp(c, "cache_write") == 0 || strcmp(c, "cache_rebuilt") == 0) {
        const fl_opencl_state *s = fl_opencl_state_get();
        if (!s->backend) { printf("SKIP: %s\n", s->reason); return 77; }
        printf("kernels %s in %.2f s (%s)\n", s->rep.cache_hit ? "from the cache" : "built", s->rep.build_seconds,
               s->rep.cache_file);
        CHECK_MSG(!s->rep.cache_hit, "the kernels came from a cache file that %s",
                  c[6] == 'w' ? "the test had removed" : "the test had broken");
        /* cache_write: break the binary the open just stored, for cache_rebuilt, which must build anew */
        FILE *f = c[6] == 'w' ? fopen(s->rep.cache_file, "r+b") : NULL;
        CHECK_MSG(c[6] != 'w' || f != NULL, "no cache file was written at %s", s->rep.cache_file);
        if (f) { fseek(f, 64, SEEK_SET); fputs("not a program binary, not a program binary", f); fclose(f); }
    } else {
        fprintf(stderr, "usage: test_opencl_loader missing|notplugin|disabled|noindex|noname|cpuonly|cache_write|cache_rebuilt\n");
        return 2;
    }
    return check_report("test_opencl_loader");
}
