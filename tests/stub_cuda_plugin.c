/*
 * stub_cuda_plugin.c — a stand-in for a flynn CUDA plugin, built once as
 * libflynn_cuda.so (CUDA 13) and once as libflynn_cuda12.so (CUDA 12), each
 * linked against the stub cuBLAS of its major without a RUNPATH: it loads
 * only when the loader has preloaded that cuBLAS by absolute path, as it
 * must for the real plugins. test_gpu_choice.sh uses them to check which
 * plugin the loader takes for each driver.
 *
 * By default it answers as a driver without a device would. With
 * STUB_PLUGIN_CPU=1 it returns flynn's CPU backend under a fake device name,
 * and a device query of one fake device, so that the whole path a working
 * GPU takes (the device line, doctor's memory and hello checks, `flynn
 * devices`, exit code 0) runs on a machine without one.
 */
#include "backend/cuda/plugin.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef STUB_CUDA_MAJOR
#define STUB_CUDA_MAJOR 13
#endif

int cublasGetVersion_v2(void *handle, int *version);

static fl_backend g_table;
static const fl_backend *g_cpu;

/* the CUDA backend keeps its own convolution workspace (callers pass NULL);
 * the CPU's needs one */
static void stub_conv2d_fwd(const fl_conv_desc *d, const float *x, const float *w, const float *b, float *y, void *ws) {
    void *own = ws ? NULL : malloc(g_cpu->conv_workspace(d, 0) + 64);
    g_cpu->conv2d_fwd(d, x, w, b, y, ws ? ws : own);
    free(own);
}

static void stub_mem_info(size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = (size_t)6 << 30;
    *total_bytes = (size_t)8 << 30;
}

__attribute__((visibility("default"))) const fl_backend *fl_cuda_plugin_open(const fl_cuda_host *host,
                                                                             fl_cuda_report *rep) {
    (void)host;
    memset(rep, 0, sizeof *rep);
    snprintf(rep->archs, sizeof rep->archs, "stub (CUDA %d)", STUB_CUDA_MAJOR);
    rep->runtime_version = STUB_CUDA_MAJOR == 12 ? 12090 : 13000;
    int (*drv)(int *) = (int (*)(int *))dlsym(RTLD_DEFAULT, "cuDriverGetVersion");
    if (drv) drv(&rep->driver_version);
    cublasGetVersion_v2(NULL, &rep->cublas_version);
    const char *cpu = getenv("STUB_PLUGIN_CPU");
    const fl_backend *(*cpu_table)(void) = (const fl_backend *(*)(void))dlsym(RTLD_DEFAULT, "fl_backend_cpu");
    if (!cpu || strcmp(cpu, "1") != 0 || !cpu_table) {
        snprintf(rep->failed_check, sizeof rep->failed_check, "device");
        snprintf(rep->reason, sizeof rep->reason, "the driver sees no CUDA device (stub CUDA %d plugin)",
                 STUB_CUDA_MAJOR);
        return NULL;
    }
    g_cpu = cpu_table();
    g_table = *g_cpu;
    g_table.mem_info = stub_mem_info;
    g_table.conv2d_fwd = stub_conv2d_fwd;
    snprintf(rep->device_name, sizeof rep->device_name, "Stub GPU (CUDA %d plugin, CPU kernels)", STUB_CUDA_MAJOR);
    rep->cc_major = 9;
    rep->multiprocessors = 1;
    stub_mem_info(&rep->free_mem, &rep->total_mem);
    /* the headers of the build (9.19) and the library found; STUB_CUDNN_RUNTIME: an older one */
    const char *rt = getenv("STUB_CUDNN_RUNTIME");
    rep->cudnn_built = 91900;
    rep->cudnn_version = rt && *rt ? (size_t)strtoul(rt, NULL, 10) : 91900;
    return &g_table;
}

static int stub_device_count(void) { return 1; }

static int stub_device_info(int index, fl_cuda_device_info *o, char *why, size_t why_len) {
    (void)why;
    (void)why_len;
    memset(o, 0, sizeof *o);
    o->index = index;
    snprintf(o->name, sizeof o->name, "Stub GPU (CUDA %d plugin, CPU kernels)", STUB_CUDA_MAJOR);
    snprintf(o->uuid, sizeof o->uuid, "GPU-00000000-0000-0000-0000-000000000000");
    o->cc_major = 9;
    o->multiprocessors = 1;
    o->warp_size = 32;
    stub_mem_info(&o->free_mem, &o->total_mem);
    o->runnable = 1;
    snprintf(o->runnable_why, sizeof o->runnable_why, "stub");
    return 0;
}

static const fl_cuda_tools g_tools = {stub_device_count, stub_device_info, NULL};

__attribute__((visibility("default"))) const fl_cuda_tools *fl_cuda_plugin_tools(void) { return &g_tools; }
