/*
 * device.c — deciding whether the GPU can be used, without linking CUDA: the
 * checks run in the order a person would debug them (driver, libcuda, the
 * flynn CUDA plugin) and stop at the first failure with a one-line reason.
 */
#include "error.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PLUGIN_NAME "libflynn_cuda.so"

fl_status fl_gpu_probe(char *why, size_t why_len) {
    char buf[512];
    if (!why) { why = buf; why_len = sizeof buf; }
    why[0] = 0;
    const char *force = getenv("FLYNN_DISABLE_GPU");
    if (force && *force && strcmp(force, "0") != 0) {
        snprintf(why, why_len, "FLYNN_DISABLE_GPU is set");
        return fl_error(FL_ERR_DEVICE, "%s", why);
    }
    if (access("/proc/driver/nvidia/version", R_OK) != 0 && access("/dev/nvidia0", F_OK) != 0) {
        snprintf(why, why_len,
                 "no NVIDIA driver is loaded (/proc/driver/nvidia/version and /dev/nvidia0 are missing): "
                 "no NVIDIA GPU here, or its driver is not installed");
        return fl_error(FL_ERR_DEVICE, "%s", why);
    }
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda) {
        snprintf(why, why_len, "the NVIDIA driver library libcuda.so.1 cannot be loaded (%s): reinstall the driver",
                 dlerror());
        return fl_error(FL_ERR_DEVICE, "%s", why);
    }
    dlclose(cuda);
    const char *path = getenv("FLYNN_CUDA_PLUGIN");
    void *plugin = dlopen(path && *path ? path : PLUGIN_NAME, RTLD_NOW | RTLD_LOCAL);
    if (!plugin) {
        snprintf(why, why_len, "the flynn CUDA plugin %s cannot be loaded (%s): this build of flynn has no CUDA backend",
                 path && *path ? path : PLUGIN_NAME, dlerror());
        return fl_error(FL_ERR_DEVICE, "%s", why);
    }
    dlclose(plugin);
    return FL_OK;
}
