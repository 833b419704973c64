/*
 * ocl_pool.c — the OpenCL backend's entries for the poolings (max, average, global average) (kernels/pool.cl).
 * (Not on OpenCL yet: the entries stay NULL, and fl_graph_runs_on names them.)
 */
#include "backend/opencl/opencl_internal.h"

void ocl_fill_pool(fl_backend *b) { (void)b; }
