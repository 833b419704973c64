/*
 * ocl_seq.c — the OpenCL backend's entries for Embedding, the sequence masks, the masked GlobalAveragePooling1D, the loss masks and sample weights (kernels/seq.cl).
 * (Not on OpenCL yet: the entries stay NULL, and fl_graph_runs_on names them.)
 */
#include "backend/opencl/opencl_internal.h"

void ocl_fill_seq(fl_backend *b) { (void)b; }
