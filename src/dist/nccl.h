/*
 * nccl.h — NCCL for data-parallel training on GPUs, loaded at run time:
 * libnccl.so.2 is opened with dlopen (from $FLYNN_NCCL_LIB, the system's
 * search path, the CUDA toolkit, or the nvidia-nccl-cu12/cu13 wheels of any
 * Python environment: the places the CUDA loader looks), so flynn links no
 * NCCL and runs unchanged without it. One communicator over the MPI ranks
 * (mpi.h): rank 0's NCCL id reaches the others through MPI. The reductions
 * run on the stream the backend gives (its comm_stream_fork), in place on
 * device memory.
 */
#ifndef FLYNN_DIST_NCCL_H
#define FLYNN_DIST_NCCL_H

#include "flynn/flynn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Opens libnccl and makes the communicator over the MPI ranks (idempotent;
 * MPI must be initialised, with more than one rank). An error names the
 * library or call that failed and what to install. */
fl_status fl_nccl_init(void);

/* Element-wise sum over the ranks of device buffer buf (n floats), in place,
 * queued on `stream` (a cudaStream_t; NULL: the default stream). Grouped
 * calls (fl_nccl_group_begin/end) are launched together. */
fl_status fl_nccl_allreduce_f32(float *buf, int64_t n, void *stream);
fl_status fl_nccl_group_begin(void);
fl_status fl_nccl_group_end(void);
/* An error that a queued reduction hit (a peer died, a network failure):
 * ncclCommGetAsyncError. */
fl_status fl_nccl_check(void);

/* Destroys the communicator (ncclCommAbort when status is not 0: a failed
 * rank must not wait for the others). A no-op when none was made. */
void fl_nccl_end(int status);

/* For `flynn doctor`: whether libnccl can be opened, from where, and its
 * version, without touching a GPU. False with the reason in buf when not. */
bool fl_nccl_probe(char *buf, size_t n);

#endif
