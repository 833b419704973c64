/*
 * ocl_layout.c — the OpenCL backend's entries for ZeroPadding2D/Cropping2D, UpSampling2D/Resizing, Permute (kernels/layout.cl).
 * (Not on OpenCL yet: the entries stay NULL, and fl_graph_runs_on names them.)
 */
#include "backend/opencl/opencl_internal.h"

void ocl_fill_layout(fl_backend *b) { (void)b; }
