/* CPU emulator of the CUDA runtime subset skiplm uses (tests/cuda/emu/README in
 * docs/cuda.md): "device" memory is host memory filled with NaN bytes on allocation, so
 * a read of memory nobody wrote shows up as NaN; kernel launches run synchronously. */
#ifndef SK_EMU_CUDA_RUNTIME_API_H
#define SK_EMU_CUDA_RUNTIME_API_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
typedef enum {
    cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9, cudaErrorNotReady = 600, cudaErrorLaunchFailure = 719,
    cudaErrorStreamCaptureUnsupported = 900, cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureImplicit = 906
} cudaError_t;
typedef enum {
    cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4
} cudaMemcpyKind;
typedef enum { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 } cudaFuncAttribute;
typedef enum { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 } cudaDeviceAttr;
struct cudaDeviceProp { char name[256]; size_t totalGlobalMem; int major, minor, multiProcessorCount; };
typedef struct emu_event *cudaEvent_t;
typedef struct emu_stream *cudaStream_t;
typedef struct emu_graph *cudaGraph_t;
typedef struct emu_graph_exec *cudaGraphExec_t;
typedef enum {
    cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1, cudaStreamCaptureModeRelaxed = 2
} cudaStreamCaptureMode;
#define cudaStreamNonBlocking 0x01
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t n);   /* host memory, NaN-filled, remembered as pinned */
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaSetDevice(int d);                 /* devices 0 .. SK_EMU_GPUS-1 (default 1) */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k);
cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                         cudaMemcpyKind k);
cudaError_t cudaMemset(void *p, int v, size_t n);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d);
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b);
cudaError_t cudaEventCreate(cudaEvent_t *e);
#define cudaEventDisableTiming 0x02
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaFuncSetAttribute(const void *f, cudaFuncAttribute a, int v);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int device);
/* Streams and graphs: everything runs synchronously, so a stream only matters for capture.
 * While a stream captures, kernel launches, cudaMemcpyAsync and cuBLAS calls on it are
 * recorded (not run) into the graph; a launch or cuBLAS call on another stream, any
 * synchronous call (cudaMemcpy, cudaMemset, cudaDeviceSynchronize, cudaStreamSynchronize),
 * an allocation or a free, and a cudaMemcpyAsync whose host side is not pinned
 * (cudaMallocHost) is an error that invalidates the capture (stricter than CUDA, which runs a launch on an
 * unrelated stream uncaptured: the step would silently not be in the graph).
 * cudaGraphLaunch runs the recorded operations in order. */
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);   /* nothing to wait for */
/* emulator only: the launch error of the last kernel (set by the launcher) */
void emu_set_error(cudaError_t e);
#ifdef __cplusplus
}
#endif
#endif
