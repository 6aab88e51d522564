/* Data parallelism for the device model (an MPI build: make cuda MPI=1): each rank drives
 * one GPU, and after the micro-steps the trainer replaces every rank's gradients by their
 * mean (sk_train_backend.grads_mean), so every replica takes the same AdamW step.
 *
 * The mean runs through NCCL when the build found it (-DSKIPLM_NCCL): one ncclAllReduce
 * (ncclAvg) over the device gradient buffer, GPU to GPU. Without NCCL, or with
 * SKIPLM_NCCL=0 in the environment, it goes through host memory: the gradients are copied
 * to a pinned buffer, averaged with sk_dist_mean_f32 (MPI reduce-scatter + all-gather, the
 * CPU trainer's code) and copied back. Either way every rank ends with the same bits.
 *
 * ZeRO-1 (sk_cuda_shard, --zero 1): the trainer's shards, span-aligned and so of unequal
 * sizes. The mean is a reduce-scatter: one ncclReduce (ncclAvg) per rank onto the owner of
 * that range, grouped (ncclReduceScatter wants equal counts); AdamW updates the owned range
 * with the owned 1/W of m and v; then every range is broadcast from its owner (grouped
 * ncclBroadcast: an all-gather of unequal counts). Through host memory the same steps are
 * sk_dist_reduce_scatter_mean and sk_dist_allgather_f32, the CPU trainer's ZeRO. */
#include "cuda_internal.h"
#include <stdlib.h>
#include <string.h>
#ifdef SKIPLM_NCCL
#include <nccl.h>
#define NCCL(call) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess) \
    return sk_error(SK_EIO, "NCCL: %s failed: %s (%s:%d)", #call, ncclGetErrorString(r_), __FILE__, __LINE__); } while (0)
#endif

int sk_cuda_select_device(void) {
    int n = 0;
    CU(cudaGetDeviceCount(&n));
    if (n < 1) return sk_error(SK_EIO, "CUDA: no GPU is visible");
    CU(cudaSetDevice(sk_dist_local_rank() % n));
    return SK_OK;
}

int sk_cuda_nccl_enabled(void) {
#ifdef SKIPLM_NCCL
    const char *v = getenv("SKIPLM_NCCL");
    return !(v && !strcmp(v, "0"));
#else
    return 0;
#endif
}

#ifdef SKIPLM_NCCL
static int nccl_init(sk_cuda_model *cm) {
    const int W = sk_dist_size(), rank = sk_dist_rank();
    int n = 0;
    CU(cudaGetDeviceCount(&n));
    if (sk_dist_local_size() > n)
        return sk_error(SK_EINVAL, "NCCL: %d ranks on this node but %d GPUs visible (one GPU per rank; or "
                        "SKIPLM_NCCL=0 to average through host memory)", sk_dist_local_size(), n);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    int rc = SK_OK;
    if (rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) rc = sk_error(SK_EIO, "NCCL: ncclGetUniqueId failed: %s", ncclGetErrorString(r));
    }
    TRY(sk_dist_agree(rc));
    TRY(sk_dist_bcast(&id, sizeof id, 0));
    ncclComm_t comm;
    NCCL(ncclCommInitRank(&comm, W, id, rank));
    cm->nccl = comm;
    return SK_OK;
}
#endif

int sk_cuda_dist_init(sk_cuda_model *cm) {
    int rc = SK_OK;
    if (sk_dist_size() > 1) {
#ifdef SKIPLM_NCCL
        if (sk_cuda_nccl_enabled() && !cm->nccl) rc = nccl_init(cm);
#endif
        if (!rc && !sk_cuda_nccl_enabled() && !cm->grads_h)
            rc = sk_cu_alloc_host(&cm->grads_h, cm->m->n_params * sizeof(float), "the host copy of the gradients");
    }
    return sk_dist_agree(rc);
}

static int need_dist(const sk_cuda_model *cm) {
    if (!cm->grads) return sk_error(SK_EINVAL, "CUDA: an inference-only device model has no gradients to average");
    if (!cm->nccl && !cm->grads_h)
        return sk_error(SK_EINVAL, "CUDA: sk_cuda_dist_init was not called before the gradient mean");
    return SK_OK;
}

int sk_cuda_grads_mean(sk_cuda_model *cm) {
    if (sk_dist_size() <= 1) return SK_OK;
    TRY(need_dist(cm));
    const size_t n = cm->m->n_params;
    const size_t *st = cm->z_starts;
#ifdef SKIPLM_NCCL
    if (cm->nccl) {
        ncclComm_t comm = (ncclComm_t)cm->nccl;
        if (!cm->zero) {
            NCCL(ncclAllReduce(cm->grads, cm->grads, n, ncclFloat, ncclAvg, comm, 0));
            return SK_OK;
        }
        NCCL(ncclGroupStart());
        for (int r = 0; r < sk_dist_size(); r++)
            if (st[r + 1] > st[r]) {
                ncclResult_t e = ncclReduce(cm->grads + st[r], cm->grads + st[r], st[r + 1] - st[r], ncclFloat,
                                            ncclAvg, r, comm, 0);
                if (e != ncclSuccess) { ncclGroupEnd(); NCCL(e); }
            }
        NCCL(ncclGroupEnd());
        return SK_OK;
    }
#endif
    CU(cudaMemcpy(cm->grads_h, cm->grads, n * sizeof(float), cudaMemcpyDeviceToHost));
    if (!cm->zero) {
        TRY(sk_dist_mean_f32(cm->grads_h, n));
        CU(cudaMemcpy(cm->grads, cm->grads_h, n * sizeof(float), cudaMemcpyHostToDevice));
    } else {
        TRY(sk_dist_reduce_scatter_mean(cm->grads_h, st));
        CU(cudaMemcpy(cm->grads + cm->z_base, cm->grads_h + cm->z_base, cm->z_n * sizeof(float), cudaMemcpyHostToDevice));
    }
    return SK_OK;
}

int sk_cu_params_allgather(sk_cuda_model *cm) {
    TRY(need_dist(cm));
    const size_t *st = cm->z_starts;
#ifdef SKIPLM_NCCL
    if (cm->nccl) {
        ncclComm_t comm = (ncclComm_t)cm->nccl;
        NCCL(ncclGroupStart());
        for (int r = 0; r < sk_dist_size(); r++)
            if (st[r + 1] > st[r]) {
                ncclResult_t e = ncclBroadcast(cm->params + st[r], cm->params + st[r], st[r + 1] - st[r], ncclFloat,
                                               r, comm, 0);
                if (e != ncclSuccess) { ncclGroupEnd(); NCCL(e); }
            }
        NCCL(ncclGroupEnd());
        return SK_OK;
    }
#endif
    /* the gradients are spent: their host buffer carries the parameters */
    CU(cudaMemcpy(cm->grads_h + cm->z_base, cm->params + cm->z_base, cm->z_n * sizeof(float), cudaMemcpyDeviceToHost));
    TRY(sk_dist_allgather_f32(cm->grads_h, st));
    CU(cudaMemcpy(cm->params, cm->grads_h, cm->m->n_params * sizeof(float), cudaMemcpyHostToDevice));
    return SK_OK;
}

/* The shards must be the trainer's view of this model's spans: ranges that tile the buffer,
 * span runs that tile the spans, each range starting at its first span's offset. */
static int check_shards(const sk_cuda_model *cm, const cu_span *sp, const size_t *starts, const int *counts,
                        const int *displs, int W) {
    const size_t n = cm->m->n_params;
    if (starts[0] != 0 || starts[W] != n)
        return sk_error(SK_EINVAL, "CUDA ZeRO: the shards run from %zu to %zu, not over the %zu parameters",
                        starts[0], starts[W], n);
    for (int r = 0; r < W; r++) {
        if (starts[r + 1] < starts[r] || counts[r] < 0 || displs[r] != (r ? displs[r - 1] + counts[r - 1] : 0))
            return sk_error(SK_EINVAL, "CUDA ZeRO: shard %d is out of order", r);
        if (r > 0 && counts[r] > 0 && sp[displs[r]].offset != starts[r])
            return sk_error(SK_EINVAL, "CUDA ZeRO: shard %d starts at %zu, not at its first span (%zu)", r, starts[r],
                            sp[displs[r]].offset);
        for (int k = displs[r]; k < displs[r] + counts[r]; k++)
            if (sp[k].offset < starts[r] || sp[k].offset + sp[k].n > starts[r + 1])
                return sk_error(SK_EINVAL, "CUDA ZeRO: span %d is not inside shard %d", k, r);
    }
    if (displs[W - 1] + counts[W - 1] != cm->n_spans)
        return sk_error(SK_EINVAL, "CUDA ZeRO: the shards hold %d spans, the model %d", displs[W - 1] + counts[W - 1],
                        cm->n_spans);
    return SK_OK;
}

int sk_cuda_shard(sk_cuda_model *cm, const size_t *starts, const int *span_counts, const int *span_displs) {
    const int W = sk_dist_size(), rank = sk_dist_rank();
    if (!cm->grads) return sk_error(SK_EINVAL, "CUDA: an inference-only device model has no AdamW state to shard");
    if (W < 2) return sk_error(SK_EINVAL, "CUDA ZeRO: one process has nothing to shard over");
    if (cm->zero) return sk_error(SK_EINVAL, "CUDA ZeRO: the AdamW state is already sharded");
    free(cm->z_starts); free(cm->z_counts); free(cm->z_displs);
    cudaFree(cm->z_spans);
    cm->z_spans = NULL;
    cu_span *sp = malloc((size_t)(cm->n_spans ? cm->n_spans : 1) * sizeof *sp);
    cm->z_starts = malloc((size_t)(W + 1) * sizeof *cm->z_starts);
    cm->z_counts = malloc((size_t)W * sizeof(int));
    cm->z_displs = malloc((size_t)W * sizeof(int));
    if (!sp || !cm->z_starts || !cm->z_counts || !cm->z_displs) { free(sp); return sk_error(SK_ENOMEM, "out of memory"); }
    int rc = SK_OK;
    if (cm->n_spans && cudaMemcpy(sp, cm->spans, (size_t)cm->n_spans * sizeof *sp, cudaMemcpyDeviceToHost) != cudaSuccess)
        rc = sk_error(SK_EIO, "CUDA: cudaMemcpy(spans): %s", cudaGetErrorString(cudaGetLastError()));
    if (!rc) rc = check_shards(cm, sp, starts, span_counts, span_displs, W);
    if (rc) { free(sp); return rc; }
    memcpy(cm->z_starts, starts, (size_t)(W + 1) * sizeof *starts);
    memcpy(cm->z_counts, span_counts, (size_t)W * sizeof(int));
    memcpy(cm->z_displs, span_displs, (size_t)W * sizeof(int));
    cm->z_base = starts[rank];
    cm->z_n = starts[rank + 1] - starts[rank];
    cm->z_s_lo = span_displs[rank];
    cm->z_n_spans = span_counts[rank];
    for (int k = 0; k < cm->z_n_spans; k++) sp[cm->z_s_lo + k].offset -= cm->z_base;
    rc = sk_cu_alloc(&cm->z_spans, (size_t)cm->z_n_spans * sizeof(cu_span), "this rank's parameter spans");
    if (!rc && cm->z_n_spans &&
        cudaMemcpy(cm->z_spans, sp + cm->z_s_lo, (size_t)cm->z_n_spans * sizeof *sp, cudaMemcpyHostToDevice) != cudaSuccess)
        rc = sk_error(SK_EIO, "CUDA: cudaMemcpy(spans): %s", cudaGetErrorString(cudaGetLastError()));
    free(sp);
    if (rc) return rc;
    /* m and v: this rank's range only (zeros; the trainer pushes its state next) */
    cudaFree(cm->mom); cudaFree(cm->vel);
    cm->mom = cm->vel = NULL;
    TRY(sk_cu_alloc(&cm->mom, cm->z_n * sizeof(float), "AdamW's m (this rank's shard)"));
    TRY(sk_cu_alloc(&cm->vel, cm->z_n * sizeof(float), "AdamW's v (this rank's shard)"));
    if (cm->z_n) {
        CU(cudaMemset(cm->mom, 0, cm->z_n * sizeof(float)));
        CU(cudaMemset(cm->vel, 0, cm->z_n * sizeof(float)));
    }
    cm->zero = 1;
    return SK_OK;
}

void sk_cu_dist_free(sk_cuda_model *cm) {
#ifdef SKIPLM_NCCL
    if (cm->nccl) ncclCommDestroy((ncclComm_t)cm->nccl);
#endif
    cm->nccl = NULL;
    if (cm->grads_h) cudaFreeHost(cm->grads_h);
    cm->grads_h = NULL;
    cudaFree(cm->z_spans);
    free(cm->z_starts); free(cm->z_counts); free(cm->z_displs);
    cm->z_spans = NULL; cm->z_starts = NULL; cm->z_counts = cm->z_displs = NULL;
    cm->zero = 0;
}
