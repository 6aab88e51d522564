/* Data parallelism: the few MPI collectives the trainer needs, behind sk_dist_*.
 *
 * Built with -DSK_HAVE_MPI (make MPI=1) this calls MPI on MPI_COMM_WORLD; otherwise (and
 * in an MPI build started without mpirun) it is one process: rank 0 of 1, every
 * collective a copy or nothing. All MPI code of skiplm is in this file.
 *
 * Every reduction is a reduce-scatter followed by an all-gather, never MPI_Allreduce on
 * floats: each element is then summed by exactly one rank and copied to the others, so
 * the replicas hold identical bits whatever algorithm the library picks. MPI counts are
 * int: a shard of more than INT_MAX floats is refused with a message. */
#include "train/dist.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef SK_HAVE_MPI
#include <mpi.h>
#endif

static int g_rank = 0, g_size = 1, g_local_rank = 0, g_local_size = 1;
static double g_comm_s = 0;

int sk_dist_built_with_mpi(void) {
#ifdef SK_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

int sk_dist_rank(void) { return g_rank; }
int sk_dist_size(void) { return g_size; }
int sk_dist_local_rank(void) { return g_local_rank; }
int sk_dist_local_size(void) { return g_local_size; }
double sk_dist_comm_seconds(void) { return g_comm_s; }

#ifdef SK_HAVE_MPI
static int g_inited = 0;

/* Started by a launcher (Open MPI, MPICH/Hydra, PMIx, Slurm's srun with PMI)? */
static int launched(void) {
    const char *v[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "SKIPLM_MPI"};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (getenv(v[i])) return 1;
    return 0;
}
#endif

int sk_dist_init(void) {
#ifdef SK_HAVE_MPI
    if (g_inited || !launched()) return SK_OK;
    int ok = 0, prov;
    MPI_Initialized(&ok);
    if (!ok && MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &prov) != MPI_SUCCESS)
        return sk_error(SK_EIO, "MPI_Init failed");
    g_inited = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    MPI_Comm node;                      /* the ranks sharing this node's memory */
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_rank(node, &g_local_rank);
        MPI_Comm_size(node, &g_local_size);
        MPI_Comm_free(&node);
    }
#endif
    return SK_OK;
}

void sk_dist_finalize(void) {
#ifdef SK_HAVE_MPI
    if (g_inited) { MPI_Finalize(); g_inited = 0; }
#endif
    g_rank = 0; g_size = 1; g_local_rank = 0; g_local_size = 1;
}

void sk_dist_abort(int status) {
    fflush(stdout); fflush(stderr);
#ifdef SK_HAVE_MPI
    if (g_inited && g_size > 1) MPI_Abort(MPI_COMM_WORLD, status);
#endif
    exit(status);
}

#ifdef SK_HAVE_MPI
#define TIMED(call) do { double t0_ = sk_now(); call; g_comm_s += sk_now() - t0_; } while (0)

static int shard_counts(const size_t *starts, int *counts, int *displs) {
    for (int r = 0; r < g_size; r++) {
        size_t c = starts[r + 1] - starts[r];
        if (starts[r + 1] < starts[r] || c > INT_MAX || starts[r] > INT_MAX)
            return sk_error(SK_EINVAL, "distributed: shard %d of %zu floats at %zu is beyond MPI's int counts", r, c, starts[r]);
        counts[r] = (int)c; displs[r] = (int)starts[r];
    }
    return SK_OK;
}

#endif

int sk_dist_agree(int rc) {
#ifdef SK_HAVE_MPI
    if (g_size > 1) {
        int mine = rc ? g_rank : g_size, first;
        TIMED(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
        if (first == g_size) return SK_OK;
        struct { int code; char msg[1536]; } e;
        memset(&e, 0, sizeof e);
        if (g_rank == first) { e.code = rc; snprintf(e.msg, sizeof e.msg, "%s", sk_last_error()); }
        TIMED(MPI_Bcast(&e, (int)sizeof e, MPI_BYTE, first, MPI_COMM_WORLD));
        return sk_error(e.code, "rank %d: %s", first, e.msg);
    }
#endif
    return rc;
}

int sk_dist_sum_f64(double *x, int n) {
#ifdef SK_HAVE_MPI
    /* doubles of a few values: the order of an MPI_SUM over 2..N ranks may differ by rank,
     * so gather everything and add in rank order on every rank */
    if (g_size > 1) {
        double *all = malloc((size_t)n * g_size * sizeof *all);
        if (!all) return sk_error(SK_ENOMEM, "out of memory");
        TIMED(MPI_Allgather(x, n, MPI_DOUBLE, all, n, MPI_DOUBLE, MPI_COMM_WORLD));
        for (int i = 0; i < n; i++) {
            double s = 0;
            for (int r = 0; r < g_size; r++) s += all[(size_t)r * n + i];
            x[i] = s;
        }
        free(all);
    }
#endif
    (void)x; (void)n;
    return SK_OK;
}

int sk_dist_max_f64(double *x, int n) {
#ifdef SK_HAVE_MPI
    if (g_size > 1) TIMED(MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
#endif
    (void)x; (void)n;
    return SK_OK;
}

int sk_dist_reduce_scatter_mean(float *x, const size_t *starts) {
#ifdef SK_HAVE_MPI
    if (g_size > 1) {
        int counts[g_size], displs[g_size];
        int rc = shard_counts(starts, counts, displs);
        if (rc) return rc;
        /* in place: MPI leaves this rank's block at the start of x; move it to its range */
        TIMED(MPI_Reduce_scatter(MPI_IN_PLACE, x, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
        float *mine = x + starts[g_rank];
        if (starts[g_rank]) memmove(mine, x, (size_t)counts[g_rank] * sizeof *x);
        const float inv = 1.0f / (float)g_size;
        for (int i = 0; i < counts[g_rank]; i++) mine[i] *= inv;
    }
#endif
    (void)x; (void)starts;
    return SK_OK;
}

int sk_dist_allgather_f32(float *x, const size_t *starts) {
#ifdef SK_HAVE_MPI
    if (g_size > 1) {
        int counts[g_size], displs[g_size];
        int rc = shard_counts(starts, counts, displs);
        if (rc) return rc;
        TIMED(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, counts, displs, MPI_FLOAT, MPI_COMM_WORLD));
    }
#endif
    (void)x; (void)starts;
    return SK_OK;
}

int sk_dist_gather_f32(const float *x_shard, float *full, const size_t *starts, int root) {
#ifdef SK_HAVE_MPI
    if (g_size > 1) {
        int counts[g_size], displs[g_size];
        int rc = shard_counts(starts, counts, displs);
        if (rc) return rc;
        TIMED(MPI_Gatherv(x_shard, counts[g_rank], MPI_FLOAT, full, counts, displs, MPI_FLOAT, root, MPI_COMM_WORLD));
        return SK_OK;
    }
#endif
    (void)root;
    memcpy(full + starts[0], x_shard, (starts[1] - starts[0]) * sizeof *full);
    return SK_OK;
}

int sk_dist_mean_f32(float *x, size_t n) {
#ifdef SK_HAVE_MPI
    if (g_size > 1) {
        size_t starts[g_size + 1];
        for (int r = 0; r <= g_size; r++) starts[r] = n / g_size * r + ((size_t)r < n % g_size ? (size_t)r : n % g_size);
        int rc = sk_dist_reduce_scatter_mean(x, starts);
        return rc ? rc : sk_dist_allgather_f32(x, starts);
    }
#endif
    (void)x; (void)n;
    return SK_OK;
}

int sk_dist_allgather_f64(const double *mine, double *all, const int *counts, const int *displs) {
#ifdef SK_HAVE_MPI
    if (g_size > 1) {
        TIMED(MPI_Allgatherv(mine, counts[g_rank], MPI_DOUBLE, all, counts, displs, MPI_DOUBLE, MPI_COMM_WORLD));
        return SK_OK;
    }
#endif
    memcpy(all + displs[0], mine, (size_t)counts[0] * sizeof *all);
    return SK_OK;
}

int sk_dist_bcast(void *buf, size_t bytes, int root) {
#ifdef SK_HAVE_MPI
    if (g_size > 1) {
        if (bytes > INT_MAX) return sk_error(SK_EINVAL, "distributed: broadcast of %zu bytes is beyond MPI's int counts", bytes);
        TIMED(MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD));
    }
#endif
    (void)buf; (void)bytes; (void)root;
    return SK_OK;
}
