/*
 * optim.cl — the optimizers' update (ops/math.h's formulas) and gradient clipping on the GPU, written once for CUDA and OpenCL (dialect.h).
 * (Being moved here from the CUDA plugin: until then its kernels are CUDA's only.)
 */
