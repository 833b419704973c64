/*
 * kernels.cl — the OpenCL program of libflynn_opencl.so: the dialect, the per-element formulas every
 * backend shares, and the kernel families that CUDA compiles too (src/backend/kernels/). cl_embed expands
 * it into one string at build time; the plugin builds it at first use and caches the binary per device.
 */
#include "backend/kernels/dialect.h"
#include "ops/math.h"
#include "backend/kernels/act.cl"
#include "backend/kernels/merge.cl"
#include "backend/kernels/reduce.cl"
#include "backend/kernels/loss.cl"
#include "backend/kernels/conv.cl"
#include "backend/kernels/pool.cl"
#include "backend/kernels/layout.cl"
#include "backend/kernels/norm.cl"
#include "backend/kernels/seq.cl"
#include "backend/kernels/attention.cl"
#include "backend/kernels/rnn.cl"
#include "backend/kernels/optim.cl"
