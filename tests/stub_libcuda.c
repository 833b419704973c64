/*
 * stub_libcuda.c — a stand-in for the NVIDIA driver library (libcuda.so.1)
 * so that CI, which has no GPU and no driver, can walk the GPU checks past
 * the driver: cuDriverGetVersion reports $STUB_CUDA_VERSION (default 13000,
 * CUDA 13.0) and cuInit answers CUDA_ERROR_NO_DEVICE (100), as a driver
 * without a usable device would.
 */
#include <stdlib.h>

int cuDriverGetVersion(int *version) {
    const char *e = getenv("STUB_CUDA_VERSION");
    *version = e ? atoi(e) : 13000;
    return 0;
}

int cuInit(unsigned int flags) {
    (void)flags;
    return 100; /* CUDA_ERROR_NO_DEVICE */
}
