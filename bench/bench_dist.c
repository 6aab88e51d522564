/* Cost of the data-parallel gradient reduction alone (no compute), to bound what overlapping
 * it with the backward pass could gain (docs/distributed.md).
 *
 *   make MPI=1 build-mpi/bench/bench_dist
 *   mpirun -np 2 build-mpi/bench/bench_dist [floats ...]
 *
 * For each size: ms per sk_dist_mean_f32 (reduce-scatter + all-gather, what a step of plain
 * data parallelism does) and per reduce-scatter + all-gather of ZeRO-1's shards, median of 20
 * after 3 warm-ups, a barrier before each call so that no rank's wait for another is counted. */
#include "skiplm.h"
#include "train/dist.h"
#include <stdio.h>
#include <stdlib.h>
#ifdef SK_HAVE_MPI
#include <mpi.h>
#endif

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void barrier(void) {
#ifdef SK_HAVE_MPI
    if (sk_dist_size() > 1) MPI_Barrier(MPI_COMM_WORLD);
#endif
}

int main(int argc, char **argv) {
    if (sk_dist_init()) { fprintf(stderr, "%s\n", sk_last_error()); return 1; }
    int W = sk_dist_size(), r = sk_dist_rank();
    size_t def[] = {60000, 800000, 3200000, 12800000};
    int ns = argc > 1 ? argc - 1 : 4;
    if (r == 0) printf("ranks %d\n%12s %14s %14s %10s\n", W, "floats", "mean ms", "zero1 ms", "GB/s(mean)");
    for (int k = 0; k < ns; k++) {
        size_t n = argc > 1 ? (size_t)strtoull(argv[k + 1], NULL, 10) : def[k];
        float *x = malloc(n * sizeof *x);
        size_t starts[65];
        for (int i = 0; i <= W && i < 65; i++) starts[i] = n / W * i + (i == W ? n % W : 0);
        for (size_t i = 0; i < n; i++) x[i] = (float)(i % 97) * 0.01f;
        double t_mean[20], t_zero[20];
        for (int it = -3; it < 20; it++) {
            barrier();
            double t0 = sk_now();
            sk_dist_mean_f32(x, n);
            double t1 = sk_now();
            barrier();
            double t2 = sk_now();
            sk_dist_reduce_scatter_mean(x, starts);
            sk_dist_allgather_f32(x, starts);
            double t3 = sk_now();
            if (it >= 0) { t_mean[it] = (t1 - t0) * 1e3; t_zero[it] = (t3 - t2) * 1e3; }
        }
        qsort(t_mean, 20, sizeof(double), cmp_d);
        qsort(t_zero, 20, sizeof(double), cmp_d);
        if (r == 0) printf("%12zu %14.3f %14.3f %10.2f\n", n, t_mean[10], t_zero[10], n * 4.0 / (t_mean[10] * 1e-3) / 1e9);
        free(x);
    }
    sk_dist_finalize();
    return 0;
}
