/*
 * attention.cl — the attention scores, their masked softmax and the learned score scales on the GPU, written once for CUDA and OpenCL (dialect.h).
 * (Being moved here from the CUDA plugin: until then its kernels are CUDA's only.)
 */
