/*
 * opencl.c — loading the OpenCL plugin (libflynn_opencl.so, next to libflynn, or $FLYNN_OPENCL_PLUGIN) and
 * opening its device, once per process. libflynn links nothing of OpenCL: without the plugin, the ICD
 * loader or a driver, the reason says which is missing and what installs it.
 */
#include "device/opencl.h"
#include "device/gpu.h"
#include "core/error.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static fl_opencl_state g_state;
static pthread_once_t g_load_once = PTHREAD_ONCE_INIT, g_open_once = PTHREAD_ONCE_INIT;
static fl_opencl_plugin_open_fn g_open;

/* the plugin and its device list, without opening a device (nothing is built) */
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
    g_open = (fl_opencl_plugin_open_fn)dlsym(h, FL_OPENCL_PLUGIN_ENTRY);
    fl_opencl_tools_fn tools = (fl_opencl_tools_fn)dlsym(h, FL_OPENCL_TOOLS_ENTRY);
    if (!g_open || !tools) {
        g_open = NULL;
        snprintf(s->reason, sizeof s->reason, "%.900s is not a flynn OpenCL plugin (no %s)", s->plugin_file,
                 FL_OPENCL_PLUGIN_ENTRY);
        return;
    }
    s->tools = tools();
}

/* the device: chosen, its kernels built (or read from the cache) and a test kernel run */
static void open_device(void) {
    pthread_once(&g_load_once, load);
    fl_opencl_state *s = &g_state;
    if (!g_open) return;
    fl_cuda_host host = {FL_CUDA_PLUGIN_ABI, FL_BACKEND_ABI, fl_plugin_host_error};
    s->backend = g_open(&host, FL_OPENCL_ANY, -1, &s->rep);
    if (!s->backend) snprintf(s->reason, sizeof s->reason, "%.767s", s->rep.reason);
}

const fl_opencl_state *fl_opencl_state_get(void) {
    pthread_once(&g_open_once, open_device);
    return &g_state;
}

const fl_opencl_state *fl_opencl_plugin_get(void) {
    pthread_once(&g_load_once, load);
    return &g_state;
}

/* Whether --device auto could take an OpenCL device, from the device list alone: the one
 * $FLYNN_OPENCL_DEVICE names (by number or name), else any GPU or accelerator. */
static bool gpu_listed(const fl_opencl_state *s, char *why, size_t len) {
    int n = s->tools->device_count();
    const char *e = getenv("FLYNN_OPENCL_DEVICE");
    char cpus[512] = "";
    for (int i = 0; i < n; i++) {
        fl_opencl_device_info d;
        char w[256];
        if (s->tools->device_info(i, &d, w, sizeof w) != 0) continue;
        if (e && *e) {
            char *end;
            long v = strtol(e, &end, 10);
            if (*end == 0 ? v != i : strstr(d.name, e) == NULL) continue;
        }
        if (d.is_gpu) return true;
        size_t l = strlen(cpus);
        snprintf(cpus + l, sizeof cpus - l, "%s%.200s", l ? ", " : "", d.name);
    }
    if (why) {
        if (n < 0) snprintf(why, len, "no OpenCL platform is installed (no ICD in /etc/OpenCL/vendors)");
        else if (!cpus[0]) snprintf(why, len, "no OpenCL device%s%s", e && *e ? " matches FLYNN_OPENCL_DEVICE=" : "",
                                    e && *e ? e : "");
        else snprintf(why, len, "no OpenCL GPU: the OpenCL device(s) found are CPUs (%s), which --device auto never "
                      "takes; ask for one with --device opencl", cpus);
    }
    return false;
}

const fl_backend *fl_opencl_backend(int gpu_only, char *why, size_t why_len) {
    const fl_opencl_state *p = fl_opencl_plugin_get();
    if (!p->tools) {
        if (why) snprintf(why, why_len, "%s", p->reason);
        return NULL;
    }
    /* --device auto opens (and builds the kernels for) an OpenCL device only where a GPU is listed */
    if (gpu_only && !p->backend && !gpu_listed(p, why, why_len)) return NULL;
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

/* ------------------------------------------------------------ the doctor's checks */

const char *const fl_opencl_check_order[FL_OPENCL_CHECKS] = {"plugin", "icd", "clblast", "platform", "device",
                                                              "extension", "build", "hello"};

static const char *check_remedy(const char *name, const char *reason) {
    if (strcmp(name, "plugin") == 0)
        return strstr(reason, "FLYNN_DISABLE_OPENCL") ? "unset FLYNN_DISABLE_OPENCL"
               : "install ocl-icd-opencl-dev, opencl-headers and libclblast-dev and build flynn again "
                 "(scripts/setup.sh does both)";
    if (strcmp(name, "icd") == 0) return "install the OpenCL ICD loader: apt-get install ocl-icd-libopencl1";
    if (strcmp(name, "clblast") == 0) return "install CLBlast: apt-get install libclblast1";
    if (strcmp(name, "platform") == 0)
        return "install your GPU's OpenCL driver: nvidia-opencl-icd (NVIDIA), mesa-opencl-icd or ROCm (AMD), "
               "intel-opencl-icd (Intel); pocl-opencl-icd runs OpenCL on the CPU";
    if (strcmp(name, "device") == 0) return "see `flynn devices` for the OpenCL devices, and set FLYNN_OPENCL_DEVICE "
                                            "(or --device opencl:N) to one of them";
    if (strcmp(name, "extension") == 0) return "this device cannot run flynn's kernels: choose another (`flynn devices`)";
    return "the driver failed flynn's kernels: update it, and report it with `flynn doctor --json`";
}

/* where the plugin's load failed (state without tools) */
static const char *load_failure(const char *reason) {
    if (strstr(reason, "libOpenCL")) return "icd";
    if (strstr(reason, "clblast")) return "clblast";
    return "plugin";
}

static void check_detail(const fl_opencl_state *s, const char *name, char *out, size_t len) {
    const fl_opencl_device_info *d = &s->rep.dev;
    if (strcmp(name, "plugin") == 0) snprintf(out, len, "%s", s->plugin_file);
    else if (strcmp(name, "icd") == 0) snprintf(out, len, "the OpenCL ICD loader (libOpenCL.so.1) is loaded");
    else if (strcmp(name, "clblast") == 0) snprintf(out, len, "%s is loaded (the matrix products)", s->rep.clblast);
    else if (strcmp(name, "platform") == 0)
        snprintf(out, len, "%d OpenCL device(s) on the installed platforms", s->tools ? s->tools->device_count() : 0);
    else if (strcmp(name, "device") == 0)
        snprintf(out, len, "device %d: %.200s (%.100s, driver %.100s, %.100s), a %s", d->index, d->name, d->platform,
                 d->driver, d->version, d->is_gpu ? "GPU" : "CPU device: --device opencl uses it, --device auto not");
    else if (strcmp(name, "extension") == 0)
        snprintf(out, len, "cl_khr_fp64%s%s", d->fp16 ? ", cl_khr_fp16" : "", d->subgroups ? ", subgroups" : "");
    else if (strcmp(name, "build") == 0)
        snprintf(out, len, "flynn's kernels %s in %.2f s%s%.900s", s->rep.cache_hit ? "read from the cache" : "built",
                 s->rep.build_seconds, s->rep.cache_file[0] ? ": " : "", s->rep.cache_file);
    else snprintf(out, len, "a test kernel ran and its results are right");
}

int fl_opencl_checks(fl_gpu_check *out) {
    const fl_opencl_state *s = fl_opencl_state_get();
    const char *failed = s->backend ? "" : !s->tools ? load_failure(s->reason)
                         : s->rep.failed_check[0] ? s->rep.failed_check : "device";
    int reached = 1;
    for (int i = 0; i < FL_OPENCL_CHECKS; i++) {
        fl_gpu_check *c = &out[i];
        memset(c, 0, sizeof *c);
        snprintf(c->name, sizeof c->name, "%s", fl_opencl_check_order[i]);
        if (!reached) {
            c->status = FL_GPU_SKIP;
            snprintf(c->detail, sizeof c->detail, "not checked: an earlier check failed");
        } else if (strcmp(failed, c->name) == 0) {
            c->status = FL_GPU_FAIL;
            snprintf(c->detail, sizeof c->detail, "%.1000s", s->reason);
            snprintf(c->remedy, sizeof c->remedy, "%s", check_remedy(c->name, s->reason));
            reached = 0;
        } else {
            c->status = FL_GPU_PASS;
            check_detail(s, c->name, c->detail, sizeof c->detail);
        }
    }
    return FL_OPENCL_CHECKS;
}
