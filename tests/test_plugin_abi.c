/*
 * test_plugin_abi.c — a real CUDA plugin (libflynn_cuda.so or
 * libflynn_cuda12.so) refuses a libflynn of another build, before it calls
 * anything of CUDA, so this runs without a GPU: opened with the host's ABI
 * number of another version, or with another backend table fingerprint
 * (FL_BACKEND_ABI), it returns NULL with a reason that says to reinstall;
 * with this build's own it gets past that check (and then fails on this
 * machine for want of a device, with another reason).
 * usage: test_plugin_abi PLUGIN.so
 */
#include "check.h"
#include "backend/cuda/plugin.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static int host_error(int status, const char *fmt, ...) {
    (void)fmt;
    return status;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_plugin_abi PLUGIN.so\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("test_plugin_abi: skipped: %s cannot be opened here (%s)\n", argv[1], dlerror());
        return 77;
    }
    fl_cuda_plugin_open_fn open_fn = (fl_cuda_plugin_open_fn)dlsym(lib, FL_CUDA_PLUGIN_ENTRY);
    CHECK_MSG(open_fn != NULL, "%s has no %s", argv[1], FL_CUDA_PLUGIN_ENTRY);
    if (!open_fn) return check_report("test_plugin_abi");
    fl_cuda_report rep;

    fl_cuda_host other_table = {FL_CUDA_PLUGIN_ABI, "0123456789abcdef", host_error};
    CHECK(open_fn(&other_table, &rep) == NULL);
    CHECK_STR_CONTAINS(rep.reason, "built from another flynn");
    CHECK_STR_CONTAINS(rep.reason, "0123456789abcdef");
    CHECK_STR_CONTAINS(rep.reason, FL_BACKEND_ABI);
    CHECK(strcmp(rep.failed_check, "plugin") == 0);

    fl_cuda_host no_table = {FL_CUDA_PLUGIN_ABI, NULL, host_error};
    CHECK(open_fn(&no_table, &rep) == NULL);
    CHECK_STR_CONTAINS(rep.reason, "built from another flynn");

    fl_cuda_host old_abi = {FL_CUDA_PLUGIN_ABI - 1, FL_BACKEND_ABI, host_error};
    CHECK(open_fn(&old_abi, &rep) == NULL);
    CHECK_STR_CONTAINS(rep.reason, "ABI");
    CHECK_STR_CONTAINS(rep.reason, "reinstall flynn");

    /* this build's own: past the plugin check (no GPU here: it stops at the device, or opens one) */
    fl_cuda_host same = {FL_CUDA_PLUGIN_ABI, FL_BACKEND_ABI, host_error};
    const fl_backend *be = open_fn(&same, &rep);
    CHECK_MSG(be != NULL || strstr(rep.reason, "another flynn") == NULL, "refused its own build: %s", rep.reason);
    CHECK_MSG(be != NULL || strcmp(rep.failed_check, "plugin") != 0, "failed the plugin check: %s", rep.reason);
    printf("test_plugin_abi: %s, table %s; own build: %s\n", argv[1], FL_BACKEND_ABI,
           be ? "opened a device" : rep.reason);
    return check_report("test_plugin_abi");
}
