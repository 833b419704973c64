/*
 * stub_cudalibs.c — stand-ins for cuBLAS and cuDNN (libcublas.so.N,
 * libcublasLt.so.N, libcudnn*.so.9), built in the test tree from this one
 * file under each name, once for CUDA 13 and once for CUDA 12
 * (STUB_CUDA_MAJOR), so that test_doctor.sh and test_gpu_choice.sh walk the
 * cuBLAS and cuDNN checks on a machine that has neither (a fresh CI
 * machine): the loader only loads them and asks their versions, and the
 * CUDA a cuDNN is built for (every CUDA major's cuDNN 9 is libcudnn.so.9).
 * They do nothing else; nothing may run a kernel through them.
 */
#include <stddef.h>

#ifndef STUB_CUDA_MAJOR
#define STUB_CUDA_MAJOR 13
#endif
/* 13.0 / 12.9, as the wheels of each major */
#define STUB_CUDART (STUB_CUDA_MAJOR == 12 ? 12090 : 13000)

int cublasGetVersion_v2(void *handle, int *version) {
    (void)handle;
    if (version) *version = STUB_CUDA_MAJOR * 10000 + (STUB_CUDA_MAJOR == 12 ? 903 : 0);
    return 0;
}
size_t cublasLtGetVersion(void) { return (size_t)STUB_CUDA_MAJOR * 10000; }
size_t cublasLtGetCudartVersion(void) { return STUB_CUDART; }
size_t cudnnGetVersion(void) { return 91000; }
size_t cudnnGetCudartVersion(void) { return STUB_CUDART; }
