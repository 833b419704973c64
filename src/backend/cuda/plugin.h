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

/* 2: fl_cuda_host carries the backend table's fingerprint */
#define FL_CUDA_PLUGIN_ABI 2
/* The fingerprint of backend.h and this header (CMake's SHA-256 of both),
 * the same in libflynn and the plugins of one build. */
#ifndef FL_BACKEND_ABI
#define FL_BACKEND_ABI "unset"
#endif
#define FL_CUDA_PLUGIN_ENTRY "fl_cuda_plugin_open"
/* The CUDA version this flynn is built for: the driver must support it. */
#define FL_CUDA_BUILD_MAJOR 13

/* What the core lends the plugin (the plugin links nothing of the core, so
 * that it works with a static libflynn too). */
typedef struct fl_cuda_host {
    int abi;
    const char *backend_abi; /* FL_BACKEND_ABI of the libflynn that opens the plugin */
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

/* What deviceQuery prints, for one device. */
typedef struct fl_cuda_device_info {
    int index;
    char name[256];
    char uuid[64];                   /* GPU-xxxxxxxx-xxxx-... */
    int cc_major, cc_minor;
    int multiprocessors, cuda_cores; /* cores: SMs x cores per SM for the architecture (0 if unknown) */
    int clock_khz, mem_clock_khz;    /* SM and memory clocks */
    int mem_bus_width;               /* bits */
    double peak_bandwidth_gbs;       /* 2 x memory clock x bus width / 8 */
    size_t total_mem, free_mem;
    int l2_bytes;
    size_t shared_per_block, shared_per_sm;
    int regs_per_block, regs_per_sm;
    int warp_size, max_threads_per_block, max_threads_per_sm;
    int max_block[3], max_grid[3];
    int ecc, pci_domain, pci_bus, pci_device;
    int async_engines;               /* concurrent copy engines */
    int runnable;                    /* this build has code (cubin or PTX) it can run */
    char runnable_why[256];
} fl_cuda_device_info;

/* One bandwidth measurement: bytes per copy, GB/s (1e9 bytes/s). */
typedef struct fl_cuda_bw_point { size_t bytes; double h2d, d2h, d2d; } fl_cuda_bw_point;

/* Entry points beyond the backend, for `flynn devices` and `flynn bandwidth`
 * (exported as "fl_cuda_plugin_tools"; valid after a successful open). */
typedef struct fl_cuda_tools {
    int (*device_count)(void);
    /* 0 on success; else fills why */
    int (*device_info)(int index, fl_cuda_device_info *out, char *why, size_t why_len);
    /* copies of each size `reps` times on `device`; pinned or pageable host
     * memory; 0 on success */
    int (*bandwidth)(int device, int pinned, const size_t *sizes, int nsizes, int reps, fl_cuda_bw_point *out,
                     char *why, size_t why_len);
} fl_cuda_tools;
#define FL_CUDA_TOOLS_ENTRY "fl_cuda_plugin_tools"
typedef const fl_cuda_tools *(*fl_cuda_tools_fn)(void);

#endif
