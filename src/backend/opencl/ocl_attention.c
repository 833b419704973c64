/*
 * ocl_attention.c — the OpenCL backend's entries for the attention scores, their masked softmax and the learned score scales (kernels/attention.cl).
 * (Not on OpenCL yet: the entries stay NULL, and fl_graph_runs_on names them.)
 */
#include "backend/opencl/opencl_internal.h"

void ocl_fill_attention(fl_backend *b) { (void)b; }
