/*
 * ocl_conv.c — the OpenCL backend's entries for Conv2D (im2col + GEMM, direct), Conv2DTranspose, DepthwiseConv2D (kernels/conv.cl).
 * (Not on OpenCL yet: the entries stay NULL, and fl_graph_runs_on names them.)
 */
#include "backend/opencl/opencl_internal.h"

void ocl_fill_conv(fl_backend *b) { (void)b; }
