/*
 * conv.cl — Conv2D (im2col + GEMM, direct), Conv2DTranspose, DepthwiseConv2D on the GPU, written once for CUDA and OpenCL (dialect.h).
 * (Being moved here from the CUDA plugin: until then its kernels are CUDA's only.)
 */
