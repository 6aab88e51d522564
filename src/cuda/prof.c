/* GPU time per op (bench --profile): while on, every kernel launch checked with K(), every
 * GEMM (sk_cu_gemm, sk_cu_linear and a layer's backward in model_cuda.c) and every attention
 * call is put between two CUDA events on the stream, named after the call; the report waits
 * for the device, reads the event pairs and adds them up per op. Regions nest (the bf16
 * rounding of an operand not already in bf16, inside its GEMM): each op is given
 * its own time, its nested regions' time taken out, so the rounding shows as cu_to_bf16 and
 * the GEMM as the cuBLAS call alone. The events cost about a microsecond of host time each,
 * so a profiled step may run slower than an unprofiled one: the report prints both. */
#include "cuda_internal.h"
#include <stdlib.h>
#include <string.h>

enum { MAX_DEPTH = 16 };
/* name is set when the region ends (NULL: never ended, e.g. an error return inside) */
typedef struct { const char *name; cudaEvent_t a, b; int parent; double ms; } prof_rec;
static struct {
    int on, n, cap, lost, depth, skip;
    int open[MAX_DEPTH];              /* indices of the open regions, outermost first */
    prof_rec *r;
} P;

void sk_cuda_profile_start(void) { P.on = 1; P.n = 0; P.lost = 0; P.depth = 0; P.skip = 0; }
int sk_cu_prof_on(void) { return P.on; }

static int grow(void) {
    int cap = P.cap ? 2 * P.cap : 1024;
    prof_rec *r = realloc(P.r, (size_t)cap * sizeof *r);
    if (!r) return -1;
    P.r = r;
    for (int i = P.cap; i < cap; i++) {
        if (cudaEventCreate(&r[i].a) != cudaSuccess) return -1;
        if (cudaEventCreate(&r[i].b) != cudaSuccess) { cudaEventDestroy(r[i].a); return -1; }
        P.cap = i + 1;
    }
    return 0;
}

/* A region that cannot be recorded (too deep, no events) is skipped with everything nested
 * in it: skip counts the open skipped levels. */
void sk_cu_prof_begin(void) {
    if (!P.on) return;
    if (P.skip || P.depth == MAX_DEPTH || (P.n == P.cap && grow())) { P.skip++; P.lost++; return; }
    prof_rec *r = &P.r[P.n];
    r->name = NULL;
    r->ms = 0;
    r->parent = P.depth ? P.open[P.depth - 1] : -1;
    P.open[P.depth++] = P.n++;
    cudaEventRecord(r->a, 0);
}

void sk_cu_prof_end(const char *name) {
    if (!P.on) return;
    if (P.skip) { P.skip--; return; }
    if (P.depth == 0) return;
    prof_rec *r = &P.r[P.open[--P.depth]];
    cudaEventRecord(r->b, 0);
    r->name = name;
}

/* the op's name: a call's text up to its '(' ("cu_gelu_forward(a->...)" -> "cu_gelu_forward") */
static void op_name(const char *s, char *out, size_t n) {
    size_t k = strcspn(s, "(");
    if (k >= n) k = n - 1;
    memcpy(out, s, k);
    out[k] = 0;
}

typedef struct { char op[64]; int calls; double ms; } prof_op;
static int by_ms(const void *a, const void *b) {
    double x = ((const prof_op *)a)->ms, y = ((const prof_op *)b)->ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void release(void) {
    for (int i = 0; i < P.cap; i++) { cudaEventDestroy(P.r[i].a); cudaEventDestroy(P.r[i].b); }
    free(P.r);
    P.r = NULL; P.cap = P.n = 0;
}

int sk_cuda_profile_report(FILE *f, int steps, double step_ms, double profiled_step_ms) {
    P.on = 0;
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) { release(); return sk_cu_fail(e, "cudaDeviceSynchronize (profile)", __FILE__, __LINE__); }
    prof_op *ops = calloc((size_t)(P.n ? P.n : 1), sizeof *ops);
    if (!ops) { release(); return sk_error(SK_ENOMEM, "out of memory"); }
    int n_ops = 0;
    double total = 0;
    int n_done = 0;
    for (int i = 0; i < P.n; i++) {                 /* each region's time, then its parent's share out */
        float ms = 0;
        if (!P.r[i].name) continue;
        if ((e = cudaEventElapsedTime(&ms, P.r[i].a, P.r[i].b)) != cudaSuccess) {
            free(ops); release();
            return sk_cu_fail(e, "cudaEventElapsedTime (profile)", __FILE__, __LINE__);
        }
        P.r[i].ms += ms;
        if (P.r[i].parent >= 0) P.r[P.r[i].parent].ms -= ms;
    }
    for (int i = 0; i < P.n; i++) {
        if (!P.r[i].name) continue;
        char op[64];
        op_name(P.r[i].name, op, sizeof op);
        int k = 0;
        while (k < n_ops && strcmp(ops[k].op, op)) k++;
        if (k == n_ops) snprintf(ops[n_ops++].op, sizeof ops[0].op, "%s", op);
        ops[k].calls++;
        ops[k].ms += P.r[i].ms;
        total += P.r[i].ms;
        n_done++;
    }
    qsort(ops, (size_t)n_ops, sizeof *ops, by_ms);
    const double s = steps > 0 ? steps : 1;
    fprintf(f, "profile: GPU time per op over %d step%s (CUDA events around each launch; a profiled step "
            "took %.2f ms, an unprofiled one %.2f ms)\n", steps, steps == 1 ? "" : "s", profiled_step_ms, step_ms);
    fprintf(f, "  %-36s %10s %10s %7s\n", "op", "calls/step", "ms/step", "share");
    for (int k = 0; k < n_ops; k++)
        fprintf(f, "  %-36s %10.1f %10.3f %6.1f%%\n", ops[k].op, ops[k].calls / s, ops[k].ms / s,
                profiled_step_ms > 0 ? 100.0 * ops[k].ms / s / profiled_step_ms : 0.0);
    fprintf(f, "  %-36s %10.1f %10.3f %6.1f%%  (the rest: copies, host work, gaps between launches)\n",
            "all recorded ops", n_done / s, total / s, profiled_step_ms > 0 ? 100.0 * total / s / profiled_step_ms : 0.0);
    if (P.lost) fprintf(f, "  (%d regions not recorded: no memory for more events)\n", P.lost);
    free(ops);
    release();
    return SK_OK;
}
