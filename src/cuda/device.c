/* The device, below the device model and its data parallelism: CUDA and cuBLAS errors as
 * sk_error messages naming the call, file and line; kernel launch checks; device and host
 * (pinned) allocation with messages that name what, how much and what is free; device
 * info. model_cuda.c, dist_cuda.c and infer_cuda.c build on it; it calls none of them. */
#include "cuda_internal.h"
#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------------ errors */

int sk_cu_fail(cudaError_t e, const char *what, const char *file, int line) {
    return sk_error(SK_EIO, "CUDA: %s failed at %s:%d: %s (%s)", what, file, line, cudaGetErrorString(e),
                    cudaGetErrorName(e));
}
int sk_cu_blas_fail(cublasStatus_t s, const char *what, const char *file, int line) {
    return sk_error(SK_EIO, "cuBLAS: %s failed at %s:%d: %s", what, file, line, cublasGetStatusString(s));
}

/* SKIPLM_CUDA_SYNC=1: synchronise after every kernel (debugging: names the failing one) */
static int sync_each(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("SKIPLM_CUDA_SYNC"); v = e && *e && *e != '0'; }
    return v;
}
int sk_cu_sync_each(void) { return sync_each(); }
int sk_cu_kcheck(const char *name, const char *file, int line) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && sync_each()) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) return sk_cu_fail(e, name, file, line);
    return SK_OK;
}

int sk_cuda_sync(void) {
    CU(cudaDeviceSynchronize());
    return SK_OK;
}

int sk_cuda_memory(size_t *used, size_t *total) {
    size_t fr = 0, tot = 0;
    CU(cudaMemGetInfo(&fr, &tot));
    *used = tot - fr; *total = tot;
    return SK_OK;
}

int sk_cuda_device_info(char *buf, size_t n) {
    int count = 0, dev = 0;
    CU(cudaGetDeviceCount(&count));
    if (count < 1) return sk_error(SK_EIO, "CUDA: no GPU found");
    CU(cudaGetDevice(&dev));
    struct cudaDeviceProp pr;
    CU(cudaGetDeviceProperties(&pr, dev));
    snprintf(buf, n, "%s, %.1f GiB, sm_%d%d, %d SMs", pr.name, pr.totalGlobalMem / 1073741824.0, pr.major, pr.minor,
             pr.multiProcessorCount);
    return SK_OK;
}

/* cudaMalloc with a message that names what and how much, and the free memory */
int sk_cu_alloc(void *p, size_t bytes, const char *what) {
    void **pp = (void **)p;
    *pp = NULL;
    if (bytes == 0) return SK_OK;
    cudaError_t e = cudaMalloc(pp, bytes);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaGetLastError();
        cudaMemGetInfo(&fr, &tot);
        *pp = NULL;
        return sk_error(SK_ENOMEM, "CUDA: %s needs %zu bytes (%.2f GiB) but the GPU has %.2f GiB free of %.2f GiB (%s)",
                        what, bytes, bytes / 1073741824.0, fr / 1073741824.0, tot / 1073741824.0, cudaGetErrorString(e));
    }
    return SK_OK;
}

int sk_cu_alloc_host(void *p, size_t bytes, const char *what) {
    void **pp = (void **)p;
    *pp = NULL;
    if (bytes == 0) return SK_OK;
    cudaError_t e = cudaMallocHost(pp, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        *pp = NULL;
        return sk_error(SK_ENOMEM, "CUDA: %s needs %zu bytes (%.2f GiB) of pinned host memory (%s)", what, bytes,
                        bytes / 1073741824.0, cudaGetErrorString(e));
    }
    return SK_OK;
}
