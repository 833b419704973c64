/*
 * gpu.h — the GPU checks and the CUDA backend they load (gpu.c): the
 * ordered list of checks with what each found, for the one-line reason and
 * for a doctor that prints them all.
 */
#ifndef FL_DEVICE_H
#define FL_DEVICE_H

#include "flynn/flynn.h"
#include "backend/backend.h"
#include "backend/cuda/plugin.h"

enum { FL_GPU_PASS = 0, FL_GPU_FAIL = 1, FL_GPU_SKIP = 2 };
#define FL_GPU_MAX_CHECKS 16

typedef struct fl_gpu_check {
    char name[32];       /* "driver", "libcuda", "cublas", "cudnn", "plugin", "device", ... */
    int status;          /* FL_GPU_PASS / FAIL / SKIP */
    char detail[1024];   /* what was found */
    char remedy[512];    /* what to do (on FAIL) */
} fl_gpu_check;

typedef struct fl_gpu_state {
    fl_gpu_check checks[FL_GPU_MAX_CHECKS];
    int nchecks;
    char reason[1536];           /* why the GPU is not used ("" when it is) */
    int driver_cuda;             /* cuDriverGetVersion, 0 if unknown */
    char driver_kind[16];        /* "native", "wsl2" or "" (none found) */
    char container[32];          /* "docker", "podman", "kubernetes", ... or "" */
    char driver_module[64];      /* the kernel module's version ("580.65.06"), "" if unknown */
    char libcuda_file[1024];
    int device_cc;               /* the device's compute capability (86 = 8.6) as the driver reports it, 0 if unknown */
    int plugin_cuda;             /* the CUDA major of the chosen plugin (13, 12), 0 before the choice */
    char plugin_choice[768];     /* why that plugin: "the driver supports CUDA 12.8: taking ..." */
    char plugin_choice_short[256]; /* the same for the device line */
    int cublas_found;            /* cublasGetVersion of the library taken, e.g. 120903 */
    size_t cudnn_found;          /* cudnnGetVersion of the library taken, e.g. 92800 */
    size_t cudnn_cudart;         /* the CUDA it was built for (cudnnGetCudartVersion), e.g. 12090 */
    char cublas_file[1024], cudnn_file[1024], plugin_file[1024];
    fl_cuda_report rep;
    const fl_backend *backend;   /* NULL when the GPU is not usable */
    const fl_cuda_tools *tools;  /* device query and bandwidth (with the backend) */
} fl_gpu_state;

/* The checks `flynn doctor` reports, in order (those the loader did not
 * reach are SKIP). */
extern const char *const fl_gpu_check_order[];
extern const int fl_gpu_check_count;
/* The doctor's last checks, run on a usable GPU: free memory, and a small
 * convolution and matrix product on the GPU compared with the CPU. */
int fl_gpu_check_memory(char *detail, size_t len, char *remedy, size_t rlen);
int fl_gpu_check_hello(char *detail, size_t len);

/* Runs the checks once per process and returns their result. */
const fl_gpu_state *fl_gpu_state_get(void);
/* The CUDA backend, or NULL with the reason in why. */
const fl_backend *fl_gpu_backend(char *why, size_t why_len);
/* "NVIDIA H200 (compute capability 9.0, 139.8 GiB), driver CUDA 13.0, ..." */
void fl_gpu_describe(char *out, size_t len);
/* The folder the plugins are installed in (libflynn's, or the program's it is linked into), and the
 * error function the core lends them (fl_cuda_host.error). */
void fl_plugin_dir(char *out, size_t len);
int fl_plugin_host_error(int status, const char *fmt, ...);
/* The folders searched for the CUDA libraries ("" = the system's search). */
int fl_cuda_search_dirs(char dirs[][512], int max);

/* The CUDA plugins flynn knows, newest first: the file installed next to
 * libflynn, the CUDA major it is built with, and the oldest NVIDIA driver
 * that supports that major (NVIDIA's minor version compatibility table:
 * CUDA 13.x needs >= 580, CUDA 12.x >= 525). */
typedef struct fl_cuda_plugin_kind {
    int cuda_major;
    const char *file;
    int min_driver;
    int min_cc;          /* the oldest compute capability it has code for (75 = 7.5) */
} fl_cuda_plugin_kind;
extern const fl_cuda_plugin_kind fl_cuda_plugins[];
extern const int fl_cuda_plugin_count;

#endif
