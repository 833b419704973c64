/*
 * stub_cudalibs.c — stand-ins for cuBLAS and cuDNN (libcublas.so.13,
 * libcublasLt.so.13, libcudnn*.so.9), built in the test tree from this one
 * file under each name, so that test_doctor.sh walks the cuBLAS and cuDNN
 * checks on a machine that has neither (a fresh CI machine): the doctor
 * only loads them and asks their version. They do nothing else; nothing
 * may run a kernel through them.
 */
#include <stddef.h>

int cublasGetVersion_v2(void *handle, int *version) {
    (void)handle;
    if (version) *version = 130000;
    return 0;
}
size_t cublasLtGetVersion(void) { return 130000; }
size_t cudnnGetVersion(void) { return 91000; }
