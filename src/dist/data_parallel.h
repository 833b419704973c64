/*
 * data_parallel.h — data-parallel training over MPI (see mpi.h), the parts
 * that know the model: how a global batch is shared among the ranks, the
 * reduction of the step's gradients and of the running loss/metric totals,
 * and the check that every rank ends with the same weights. fl_fit calls
 * these; nothing here runs without mpirun (one rank: no-ops).
 */
#ifndef FLYNN_DIST_DATA_PARALLEL_H
#define FLYNN_DIST_DATA_PARALLEL_H

#include "nn/nn.h"

/* Rank r's contiguous share [*lo, *lo + *cnt) of a global batch of b
 * samples: b / size each, the first b % size ranks one more (a rank may
 * get none when b < size). */
void fl_dp_share(int64_t b, int64_t *lo, int64_t *cnt);

/* stats = before + the sum over ranks of (stats - before): the running
 * totals of the whole global batch on every rank. */
fl_status fl_dp_reduce_stats(const double *before, double *stats, int n);

/* Sums every trainable weight's gradient over the ranks (each rank's is
 * already divided by the global batch, so the sum is the global batch's
 * gradient). `have` false: this rank had no samples, its gradients are
 * taken as 0. Host-memory backends only. */
fl_status fl_dp_reduce_grads(fl_model *m, bool have);

/* BatchNormalization's moving mean and variance, which each rank moved
 * with its own share's statistics, replaced by their mean over the ranks
 * (tf.distribute's ON_READ variables with MEAN aggregation), so that
 * validation and the saved model see one value. Frozen layers are left. */
fl_status fl_dp_average_moving_stats(fl_model *m);

/* Fails (naming the first rank and weight that differ) unless every rank
 * holds the bits of rank 0's weights. */
fl_status fl_dp_check_weights(fl_model *m, const char *when);

#endif
