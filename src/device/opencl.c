/*
 * opencl.c — loading the OpenCL plugin (libflynn_opencl.so, next to libflynn, or $FLYNN_OPENCL_PLUGIN) and
 * opening its device, once per process. libflynn links nothing of OpenCL: without the plugin, the ICD
 * loader or a driver, the reason says which is missing and what installs it.
 */
#include "device/opencl.h"
#include "device/gpu.h"
#include "core/error.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static fl_opencl_state g_state;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void load(void) {
    fl_opencl_state *s = &g_state;
    const char *off = getenv("FLYNN_DISABLE_OPENCL");
    if (off && *off && strcmp(off, "0") != 0) {
        snprintf(s->reason, sizeof s->reason, "FLYNN_DISABLE_OPENCL is set");
        return;
    }
    const char *pl = getenv("FLYNN_OPENCL_PLUGIN");
    if (pl && *pl) snprintf(s->plugin_file, sizeof s->plugin_file, "%s", pl);
    else {
        char dir[900];
        fl_plugin_dir(dir, sizeof dir);
        snprintf(s->plugin_file, sizeof s->plugin_file, "%s/libflynn_opencl.so", dir);
    }
    if (access(s->plugin_file, F_OK) != 0) {
        snprintf(s->reason, sizeof s->reason, "flynn was built without its OpenCL plugin (%.900s is missing): install "
                 "ocl-icd-opencl-dev, opencl-headers and libclblast-dev (scripts/setup.sh does) and build again, "
                 "or set FLYNN_OPENCL_PLUGIN to its path", s->plugin_file);
        return;
    }
    void *h = dlopen(s->plugin_file, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(s->reason, sizeof s->reason, "the OpenCL plugin %.900s does not load: %.600s%s", s->plugin_file,
                 e ? e : "?", e && strstr(e, "libOpenCL") ? " (install the ICD loader: apt-get install ocl-icd-libopencl1)"
                 : e && strstr(e, "clblast") ? " (install CLBlast: apt-get install libclblast1)" : "");
        return;
    }
    fl_opencl_plugin_open_fn open_fn = (fl_opencl_plugin_open_fn)dlsym(h, FL_OPENCL_PLUGIN_ENTRY);
    fl_opencl_tools_fn tools = (fl_opencl_tools_fn)dlsym(h, FL_OPENCL_TOOLS_ENTRY);
    if (!open_fn || !tools) {
        snprintf(s->reason, sizeof s->reason, "%.900s is not a flynn OpenCL plugin (no %s)", s->plugin_file,
                 FL_OPENCL_PLUGIN_ENTRY);
        return;
    }
    s->tools = tools();
    fl_cuda_host host = {FL_CUDA_PLUGIN_ABI, FL_BACKEND_ABI, fl_plugin_host_error};
    s->backend = open_fn(&host, FL_OPENCL_ANY, -1, &s->rep);
    if (!s->backend) snprintf(s->reason, sizeof s->reason, "%.767s", s->rep.reason);
}

const fl_opencl_state *fl_opencl_state_get(void) {
    pthread_once(&g_once, load);
    return &g_state;
}

const fl_backend *fl_opencl_backend(int gpu_only, char *why, size_t why_len) {
    const fl_opencl_state *s = fl_opencl_state_get();
    if (!s->backend) {
        if (why) snprintf(why, why_len, "%s", s->reason);
        return NULL;
    }
    if (gpu_only && !s->rep.dev.is_gpu) {
        if (why)
            snprintf(why, why_len, "the OpenCL device is a CPU (%.200s, %.100s), which --device auto never takes",
                     s->rep.dev.name, s->rep.dev.platform);
        return NULL;
    }
    return s->backend;
}
