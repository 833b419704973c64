/*
 * seq.cl — Embedding, the sequence masks, the masked GlobalAveragePooling1D, the loss masks and sample weights on the GPU, written once for CUDA and OpenCL (dialect.h).
 * (Being moved here from the CUDA plugin: until then its kernels are CUDA's only.)
 */
