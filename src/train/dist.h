/* Internal collectives of data parallelism (src/train/dist.c): what the trainer and the
 * CUDA backend call inside a step. Each is a copy (or nothing) in one process. The public
 * part (init, rank, size, agree, abort, ...) is in skiplm_train.h. */
#ifndef SK_DIST_INTERNAL_H
#define SK_DIST_INTERNAL_H
#include "skiplm_train.h"

/* This rank's index among the ranks on its node, and their number (0 and 1 without MPI):
 * which GPU a rank takes. */
int sk_dist_local_rank(void);
int sk_dist_local_size(void);
int sk_dist_built_with_mpi(void);
/* In-place sums / mean over the ranks. */
int sk_dist_sum_f64(double *x, int n);
int sk_dist_mean_f32(float *x, size_t n);
/* Reduce-scatter in place: afterwards x[starts[r] .. starts[r+1]) of rank r holds the mean
 * over the ranks of that range; the rest of x is clobbered (starts has size+1 entries). */
int sk_dist_reduce_scatter_mean(float *x, const size_t *starts);
/* All-gather in place: rank r contributes x[starts[r] .. starts[r+1]). */
int sk_dist_allgather_f32(float *x, const size_t *starts);
/* Gather the shards (each rank's x_shard of starts[r+1]-starts[r] floats) into full on root. */
int sk_dist_gather_f32(const float *x_shard, float *full, const size_t *starts, int root);
int sk_dist_bcast(void *buf, size_t bytes, int root);
#endif
