/*
 * ocl_norm.c — the OpenCL backend's entries for BatchNormalization, LayerNormalization, Normalization, Softmax(axis), PReLU (kernels/norm.cl).
 * (Not on OpenCL yet: the entries stay NULL, and fl_graph_runs_on names them.)
 */
#include "backend/opencl/opencl_internal.h"

void ocl_fill_norm(fl_backend *b) { (void)b; }
