/* Data parallelism for the device model (an MPI build: make cuda MPI=1): each rank drives
 * one GPU, and after the micro-steps the trainer replaces every rank's gradients by their
 * mean (sk_train_backend.grads_mean), so every replica takes the same AdamW step.
 *
 * The mean runs through NCCL when the build found it (-DSKIPLM_NCCL): one ncclAllReduce
 * (ncclAvg) over the device gradient buffer, GPU to GPU. Without NCCL, or with
 * SKIPLM_NCCL=0 in the environment, it goes through host memory: the gradients are copied
 * to a pinned buffer, averaged with sk_dist_mean_f32 (MPI reduce-scatter + all-gather, the
 * CPU trainer's code) and copied back. Either way every rank ends with the same bits. */
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

int sk_cuda_grads_mean(sk_cuda_model *cm) {
    if (sk_dist_size() <= 1) return SK_OK;
    if (!cm->grads) return sk_error(SK_EINVAL, "CUDA: an inference-only device model has no gradients to average");
    const size_t n = cm->m->n_params;
#ifdef SKIPLM_NCCL
    if (cm->nccl) {
        NCCL(ncclAllReduce(cm->grads, cm->grads, n, ncclFloat, ncclAvg, (ncclComm_t)cm->nccl, 0));
        return SK_OK;
    }
#endif
    if (!cm->grads_h) return sk_error(SK_EINVAL, "CUDA: sk_cuda_dist_init was not called before the gradient mean");
    CU(cudaMemcpy(cm->grads_h, cm->grads, n * sizeof(float), cudaMemcpyDeviceToHost));
    TRY(sk_dist_mean_f32(cm->grads_h, n));
    CU(cudaMemcpy(cm->grads, cm->grads_h, n * sizeof(float), cudaMemcpyHostToDevice));
    return SK_OK;
}

void sk_cu_dist_free(sk_cuda_model *cm) {
#ifdef SKIPLM_NCCL
    if (cm->nccl) ncclCommDestroy((ncclComm_t)cm->nccl);
#endif
    cm->nccl = NULL;
    if (cm->grads_h) cudaFreeHost(cm->grads_h);
    cm->grads_h = NULL;
}
