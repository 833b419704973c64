/*
 * ocl_rnn.c — the OpenCL backend's entries for SimpleRNN, LSTM, GRU: one kernel per step for the gates (ops/rnn_math.h) (kernels/rnn.cl).
 * (Not on OpenCL yet: the entries stay NULL, and fl_graph_runs_on names them.)
 */
#include "backend/opencl/opencl_internal.h"

void ocl_fill_rnn(fl_backend *b) { (void)b; }
