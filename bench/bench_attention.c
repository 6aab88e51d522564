/* Attention benchmark: fused forward + backward on contiguous (B, H, L, D) tensors.
 * Prints time, GFLOP/s and peak resident memory (getrusage).
 *   make bench-attention && ./build/bench/bench_attention [B H L D causal iters threads]
 * default: 1 12 16384 64 1 1 (all OpenMP threads).
 * FLOPs are the usual algorithmic count: forward 4*B*H*L^2*D, backward 10*B*H*L^2*D
 * (2.5x forward), halved when causal. The kernels actually do 9 tile GEMMs instead of 7
 * (the backward recomputes S and dP in both its dq pass and its dk/dv pass). */
#include "skiplm.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static double peak_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;   /* Linux: KiB */
}

int main(int argc, char **argv) {
    int B = argc > 1 ? atoi(argv[1]) : 1, H = argc > 2 ? atoi(argv[2]) : 12;
    int L = argc > 3 ? atoi(argv[3]) : 16384, D = argc > 4 ? atoi(argv[4]) : 64;
    int causal = argc > 5 ? atoi(argv[5]) : 1, iters = argc > 6 ? atoi(argv[6]) : 1;
    if (argc > 7) omp_set_num_threads(atoi(argv[7]));
    size_t n = (size_t)B * H * L * D;
    float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *out = malloc(n * 4);
    float *dout = malloc(n * 4), *dq = calloc(n, 4), *dk = calloc(n, 4), *dv = calloc(n, 4);
    float *lse = malloc((size_t)B * H * L * 4);
    if (!q || !k || !v || !out || !dout || !dq || !dk || !dv || !lse) { fprintf(stderr, "out of memory\n"); return 1; }
    unsigned long long s = 1;
    float *all[] = {q, k, v, dout};
    for (int a = 0; a < 4; a++)
        for (size_t i = 0; i < n; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            all[a][i] = (float)((double)(s >> 40) / (double)(1ULL << 24) * 2.0 - 1.0);
        }
    sk_attn at;
    sk_attn_init_bhld(&at, B, H, L, L, D, q, k, v, out);
    at.is_causal = causal;
    at.lse = lse;
    double tf = 1e30, tb = 1e30;
    for (int it = 0; it < iters; it++) {
        double t0 = now();
        if (sk_attn_forward(&at)) { fprintf(stderr, "%s\n", sk_last_error()); return 1; }
        double t1 = now();
        if (sk_attn_backward(&at, dout, dq, dk, dv)) { fprintf(stderr, "%s\n", sk_last_error()); return 1; }
        double t2 = now();
        if (t1 - t0 < tf) tf = t1 - t0;
        if (t2 - t1 < tb) tb = t2 - t1;
    }
    double f = 4.0 * B * H * (double)L * L * D * (causal ? 0.5 : 1.0);
    double tensors = 8.0 * n * 4 / (1 << 20);
    printf("attention B=%d H=%d L=%d D=%d causal=%d threads=%d\n", B, H, L, D, causal, omp_get_max_threads());
    printf("forward   %8.3f s  %7.1f GFLOP/s\n", tf, f / tf * 1e-9);
    printf("backward  %8.3f s  %7.1f GFLOP/s\n", tb, 2.5 * f / tb * 1e-9);
    printf("fwd+bwd   %8.3f s  %7.1f GFLOP/s\n", tf + tb, 3.5 * f / (tf + tb) * 1e-9);
    printf("peak RSS  %8.1f MiB (q,k,v,out,dout,dq,dk,dv alone: %.1f MiB; an Lq x Lk score matrix per head would be %.1f MiB)\n",
           peak_mib(), tensors, (double)L * L * 4 / (1 << 20));
    free(q); free(k); free(v); free(out); free(dout); free(dq); free(dk); free(dv); free(lse);
    return 0;
}
