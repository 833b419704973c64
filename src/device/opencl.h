/*
 * opencl.h — the OpenCL backend as the core sees it (opencl.c): the plugin libflynn_opencl.so, loaded at
 * run time like the CUDA one, the device it opened, and why not when it could not.
 */
#ifndef FL_DEVICE_OPENCL_H
#define FL_DEVICE_OPENCL_H

#include "backend/backend.h"
#include "backend/opencl/plugin.h"
#include "device/gpu.h"

typedef struct fl_opencl_state {
    char plugin_file[1024];
    fl_opencl_report rep;
    char reason[2048];                /* why no OpenCL device is used ("" when one is) */
    const fl_backend *backend;        /* NULL when none is usable */
    const fl_opencl_tools *tools;     /* the device list (whenever the plugin loads) and the bandwidth test */
} fl_opencl_state;

/* Loads the plugin and opens a device once per process ($FLYNN_OPENCL_DEVICE picks one; a GPU is preferred,
 * else the first device, PoCL's CPU device included); $FLYNN_DISABLE_OPENCL turns it off. */
const fl_opencl_state *fl_opencl_state_get(void);
/* The plugin and its device list (tools) only: no device is opened and nothing is built. */
const fl_opencl_state *fl_opencl_plugin_get(void);
/* The OpenCL backend, or NULL with the reason in why (gpu_only: refuse a CPU device, as --device auto does,
 * and open none unless the device list shows a GPU). */
const fl_backend *fl_opencl_backend(int gpu_only, char *why, size_t why_len);

/* The doctor's OpenCL checks, in fl_opencl_check_order (plugin, icd, clblast, platform, device, extension,
 * build, hello), from opening the device as --device opencl does: each PASS with what it found, the first
 * failure with its remedy, SKIP after it. Fills FL_OPENCL_CHECKS entries of out. */
#define FL_OPENCL_CHECKS 8
extern const char *const fl_opencl_check_order[FL_OPENCL_CHECKS];
int fl_opencl_checks(fl_gpu_check *out);

#endif
