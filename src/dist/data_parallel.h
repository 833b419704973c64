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

/* What model m's ranks need before training: on a device backend NCCL, which every rank opens (or all stop
 * with the reason, naming the model and the device); nothing on the host's. */
fl_status fl_dp_open_device(const fl_model *m);

/* Sums every trainable weight's gradient over the ranks (each rank's is
 * already divided by the global batch, so the sum is the global batch's
 * gradient). `have` false: this rank had no samples, its gradients are
 * taken as 0. On a device backend the sums are NCCL's (fl_nccl_init first),
 * queued on the backend's communication stream (comm_stream_fork) and
 * joined to the compute stream before the optimizer's step.
 *
 * The sums overlap the backward pass, as PyTorch's DDP does: the weights
 * are grouped, in reverse graph order (the order backward finishes them),
 * into buckets of about FLYNN_DP_BUCKET_KB KiB (default 1024; a weight
 * larger than that is a bucket of its own), and a bucket's MPI_Iallreduce
 * starts as soon as backward has passed its last weight (the graph's
 * on_param_grad hook, set by fl_dp_grads_begin). fl_dp_reduce_grads then
 * starts what is left and waits for all. FLYNN_DP_OVERLAP=0: one blocking
 * all-reduce per weight after backward (the same sums). Every rank starts
 * the same buckets in the same order. */
fl_status fl_dp_grads_begin(fl_model *m);
fl_status fl_dp_reduce_grads(fl_model *m, bool have);
/* Frees the buckets (fl_fit's end and its failures). */
void fl_dp_buckets_free(fl_model *m);
/* fl_fit's end: with FLYNN_DP_STATS set, rank 0 prints the mean wait for
 * the gradients' sums after backward (the communication not hidden) and
 * how many buckets started during backward; then frees the buckets. */
void fl_dp_buckets_end(fl_model *m);

/* BatchNormalization's moving mean and variance, which each rank moved
 * with its own share's statistics, replaced by their mean over the ranks
 * (tf.distribute's ON_READ variables with MEAN aggregation), so that
 * validation and the saved model see one value. Frozen layers are left. */
fl_status fl_dp_average_moving_stats(fl_model *m);

/* Fails (naming the first rank and weight that differ) unless every rank
 * holds the bits of rank 0's weights. */
fl_status fl_dp_check_weights(fl_model *m, const char *when);

#endif
