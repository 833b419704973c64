/*
 * plugin.h — the contract between the core (which never links CUDA) and the
 * CUDA plugin libflynn_cuda.so: one exported entry point that checks the
 * device and returns the backend table, and what it reports back. Plain C,
 * compiled by both the C compiler and nvcc.
 */
#ifndef FL_CUDA_PLUGIN_H
#define FL_CUDA_PLUGIN_H

#include <stdarg.h>
#include <stddef.h>

#include "backend/backend.h"

#define FL_CUDA_PLUGIN_ABI 1
#define FL_CUDA_PLUGIN_ENTRY "fl_cuda_plugin_open"
/* The CUDA version this flynn is built for: the driver must support it. */
#define FL_CUDA_BUILD_MAJOR 13

/* What the core lends the plugin (the plugin links nothing of the core, so
 * that it works with a static libflynn too). */
typedef struct fl_cuda_host {
    int abi;
    /* sets the thread's flynn error, returns s */
    int (*error)(int status, const char *fmt, ...);
} fl_cuda_host;

/* Filled by the plugin, on success and (as far as it got) on failure. */
typedef struct fl_cuda_report {
    char device_name[256];
    int cc_major, cc_minor;          /* compute capability */
    int multiprocessors;
    size_t total_mem, free_mem;
    int driver_version;              /* CUDA version the driver supports, e.g. 13000 */
    int runtime_version;             /* cudart the plugin carries (static), e.g. 13000 */
    int cublas_version;              /* e.g. 130100 */
    size_t cudnn_version;            /* runtime cudnnGetVersion(), e.g. 91900 */
    size_t cudnn_built;              /* CUDNN_VERSION the plugin was compiled with */
    char archs[128];                 /* compiled cubins and PTX, e.g. "sm_75 ... sm_120 + compute_120 PTX" */
    char reason[768];                /* why the GPU cannot be used ("" when it can) */
    char failed_check[64];           /* which check failed */
} fl_cuda_report;

/* Opens device 0 (or $FLYNN_CUDA_DEVICE): returns the backend, or NULL with
 * rep->reason set. Called once per process. */
typedef const fl_backend *(*fl_cuda_plugin_open_fn)(const fl_cuda_host *host, fl_cuda_report *rep);

#endif
