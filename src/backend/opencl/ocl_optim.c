/*
 * ocl_optim.c — the OpenCL backend's entries for the optimizers' update (ops/math.h's formulas) and gradient clipping (kernels/optim.cl).
 * (Not on OpenCL yet: the entries stay NULL, and fl_graph_runs_on names them.)
 */
#include "backend/opencl/opencl_internal.h"

void ocl_fill_optim(fl_backend *b) { (void)b; }
