/*
 * stub_libcuda.c — a stand-in for the NVIDIA driver library (libcuda.so.1)
 * so that CI, which has no GPU and no driver, can walk the GPU checks past
 * the driver: cuDriverGetVersion reports $STUB_CUDA_VERSION (default 13000,
 * CUDA 13.0) and cuInit answers CUDA_ERROR_NO_DEVICE (100), as a driver
 * without a usable device would. With $STUB_CUDA_CC (e.g. 61) cuInit
 * succeeds and device 0 reports that compute capability, for the loader's
 * choice of plugin by architecture; nothing else works then either.
 */
#include <stdlib.h>

int cuDriverGetVersion(int *version) {
    const char *e = getenv("STUB_CUDA_VERSION");
    *version = e ? atoi(e) : 13000;
    return 0;
}

int cuInit(unsigned int flags) {
    (void)flags;
    const char *cc = getenv("STUB_CUDA_CC");
    return cc && atoi(cc) > 0 ? 0 : 100; /* CUDA_ERROR_NO_DEVICE */
}

int cuDeviceGet(int *dev, int ordinal) {
    if (ordinal != 0) return 101; /* CUDA_ERROR_INVALID_DEVICE */
    *dev = 0;
    return 0;
}

int cuDeviceGetAttribute(int *value, int attribute, int dev) {
    const char *cc = getenv("STUB_CUDA_CC");
    int c = cc ? atoi(cc) : 0;
    if (c <= 0 || dev != 0) return 100;
    if (attribute == 75) { *value = c / 10; return 0; } /* COMPUTE_CAPABILITY_MAJOR */
    if (attribute == 76) { *value = c % 10; return 0; } /* COMPUTE_CAPABILITY_MINOR */
    return 1; /* CUDA_ERROR_INVALID_VALUE */
}
