/*
 * mpi.h — MPI for data-parallel training, loaded at run time: Open MPI's
 * libmpi.so.40 is opened with dlopen when the process was started by
 * mpirun (OMPI_COMM_WORLD_SIZE or PMI_SIZE in the environment), so a flynn
 * built and run without MPI works unchanged. One process-wide
 * communicator (MPI_COMM_WORLD), like the backend registry the only
 * process-global state: MPI itself is initialised once per process.
 */
#ifndef FLYNN_DIST_MPI_H
#define FLYNN_DIST_MPI_H

#include "flynn/flynn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True when the environment says an MPI launcher started this process
 * with more than one rank (OMPI_COMM_WORLD_SIZE, else PMI_SIZE). */
bool fl_dist_launched(void);

/* Initialises MPI once when launched (idempotent; FL_OK and one rank
 * otherwise). An error names the library, the call and what to install. */
fl_status fl_dist_init(void);

/* This process's rank and the number of ranks (0 and 1 without MPI). */
int fl_dist_rank(void);
int fl_dist_size(void);

/* Element-wise sums over all ranks, in place; every rank gets the same bits
 * (Open MPI's reduction order is fixed for a given rank count). */
fl_status fl_dist_allreduce_f32(float *buf, int64_t n);
fl_status fl_dist_allreduce_f64(double *buf, int64_t n);
/* Non-blocking sums (MPI_Iallreduce, in place): started in the same order
 * on every rank, then progressed by fl_dist_progress and finished by
 * fl_dist_wait_all. n is at most INT_MAX elements. A request is Open MPI's
 * MPI_Request (a pointer). */
typedef void *fl_dist_req;
fl_status fl_dist_iallreduce_f32(float *buf, int64_t n, fl_dist_req *req);
/* Lets MPI move the started reductions along (MPI_Testall; Open MPI
 * progresses non-blocking collectives only inside MPI calls). */
fl_status fl_dist_progress(int n, fl_dist_req *reqs);
fl_status fl_dist_wait_all(int n, fl_dist_req *reqs);
/* Rank `root`'s bytes to every rank. */
fl_status fl_dist_bcast(void *buf, size_t bytes, int root);
fl_status fl_dist_barrier(void);

/* Ends MPI: MPI_Finalize when status is 0, else MPI_Abort(status), which
 * stops the other ranks too (a rank that failed alone would leave them
 * waiting in a collective forever). Registered with atexit (as 0) at init;
 * a no-op without MPI or when already ended. */
void fl_dist_end(int status);

/* For `flynn doctor`: whether libmpi can be opened and its version
 * (MPI_Get_library_version's first line), without initialising MPI.
 * Returns false with the reason in buf when it cannot. */
bool fl_dist_probe(char *buf, size_t n);

#endif
