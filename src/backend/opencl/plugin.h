/*
 * plugin.h — the contract between the core (which never links OpenCL) and the OpenCL plugin
 * libflynn_opencl.so: one exported entry point that picks and checks a device, builds the kernels and
 * returns the backend table, one for the device list and the bandwidth test, and what they report back.
 * The host's services (the error function, the fingerprint of backend.h) are the CUDA plugin's
 * (fl_cuda_host, backend/cuda/plugin.h): one loader contract for both plugins.
 */
#ifndef FL_OPENCL_PLUGIN_H
#define FL_OPENCL_PLUGIN_H

#include <stddef.h>

#include "backend/backend.h"
#include "backend/cuda/plugin.h"

#define FL_OPENCL_PLUGIN_ABI 1
#define FL_OPENCL_PLUGIN_ENTRY "fl_opencl_plugin_open"
#define FL_OPENCL_TOOLS_ENTRY "fl_opencl_plugin_tools"

/* How a device is chosen: the first GPU or accelerator; failing that, FL_OPENCL_ANY takes the first device
 * of any kind (PoCL's CPU device included) and FL_OPENCL_GPU_ONLY none (a CPU OpenCL device is never taken
 * by --device auto); index >= 0 (or $FLYNN_OPENCL_DEVICE, a number or part of a device's name) that one. */
enum { FL_OPENCL_ANY = 0, FL_OPENCL_GPU_ONLY = 1 };

/* One OpenCL device, for `flynn devices` and the doctor. */
typedef struct fl_opencl_device_info {
    int index;                       /* across all platforms, in the order listed */
    char platform[128], platform_version[128];
    char name[256], vendor[128], driver[128], version[128], c_version[64];
    int is_gpu;                      /* CL_DEVICE_TYPE_GPU or _ACCELERATOR */
    int compute_units, clock_mhz;
    size_t global_mem, max_alloc, local_mem, max_work_group;
    int fp64, fp16, subgroups;       /* cl_khr_fp64, cl_khr_fp16, cl_khr_subgroups (or OpenCL 2.1's) */
} fl_opencl_device_info;

/* Filled by the plugin, on success and (as far as it got) on failure. */
typedef struct fl_opencl_report {
    fl_opencl_device_info dev;       /* the device taken (or tried) */
    char clblast[64];                /* "CLBlast 1.5.3" */
    int cache_hit;                   /* the kernels came from the on-disk cache */
    double build_seconds;            /* building (or loading) the program */
    char cache_file[1024];           /* where the program's binary is cached ("" when not cached) */
    char reason[768];                /* why the device cannot be used ("" when it can) */
    char failed_check[64];           /* "icd", "platform", "device", "extension", "build", "hello", ... */
} fl_opencl_report;

/* Opens the device chosen by `mode` or `index` (-1: $FLYNN_OPENCL_DEVICE, else the first that `mode`
 * allows); returns the backend, or NULL with rep->reason set. Called once per process. */
typedef const fl_backend *(*fl_opencl_plugin_open_fn)(const fl_cuda_host *host, int mode, int index,
                                                      fl_opencl_report *rep);

/* Entry points beyond the backend (exported as FL_OPENCL_TOOLS_ENTRY; the device list works without an
 * open device, the bandwidth test needs one). */
typedef struct fl_cuda_bw_point fl_opencl_bw_point;
typedef struct fl_opencl_tools {
    int (*device_count)(void);       /* -1 with why when there is no platform at all */
    int (*device_info)(int index, fl_opencl_device_info *out, char *why, size_t why_len);
    int (*bandwidth)(const size_t *sizes, int nsizes, int reps, fl_opencl_bw_point *out, char *why, size_t why_len);
} fl_opencl_tools;
typedef const fl_opencl_tools *(*fl_opencl_tools_fn)(void);

#endif
