/* CPU emulator of the CUDA runtime, cuBLAS SGEMM and the kernel execution model, enough to
 * run skiplm's CUDA sources (src/cuda/) and their parity test without a GPU
 * (make cuda-emu-test). It checks the logic (indexing, shared-memory layout, barriers,
 * reductions, the GEMM operand mapping, the host orchestration); it says nothing about
 * speed, and a real GPU's memory model and warp scheduling are only approximated:
 *   - the threads of a block are fibers (ucontext stacks, setjmp/longjmp switches) run
 *     in turn in one OS thread; a thread runs until it reaches __syncthreads(), a warp
 *     shuffle or its end; a barrier opens when every live thread of the block (warp) has
 *     reached it; a barrier that can never open (divergence) aborts;
 *   - SK_EMU_ORDER=reverse runs blocks and threads in the other order (races show);
 *   - device memory and dynamic shared memory start as NaN bytes; cudaMemGetInfo reports
 *     this process's cudaMalloc bytes as used, of 8 GiB (pinned host memory not counted);
 *   - cublasSgemm / cublasGemmEx (fp32 or bf16 A/B, fp32 or bf16 C) / cublasSgemv are
 *     column-major references with cuBLAS's argument checks. */
#include "cuda_runtime_api.h"
#include "cublas_v2.h"
#include "sk_cuda_emu.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <ucontext.h>
#include <unordered_map>
#include <vector>

/* ---------------------------------------------------------------- runtime */

static cudaError_t g_err = cudaSuccess;
extern "C" void emu_set_error(cudaError_t e) { if (g_err == cudaSuccess) g_err = e; }

/* stream capture: the stream being captured (or none), the operations recorded so far, and
 * whether something broke the capture (reported by cudaStreamEndCapture) */
struct emu_stream { unsigned flags; };
struct emu_graph { std::vector<std::function<void()>> ops; };
struct emu_graph_exec { std::vector<std::function<void()>> ops; };
static cudaStream_t g_capturing = nullptr;
static emu_graph *g_capture = nullptr;
static cudaError_t g_capture_err = cudaSuccess;
/* a call that may not happen while a stream captures: breaks the capture, returns the error */
static cudaError_t capture_violation(const char *what) {
    fprintf(stderr, "emu: %s while a stream is being captured into a graph\n", what);
    if (g_capture_err == cudaSuccess) g_capture_err = cudaErrorStreamCaptureInvalidated;
    return cudaErrorStreamCaptureUnsupported;
}
/* Runs op now, records it when s is the capturing stream, or refuses it (another stream
 * while one captures). */
static cudaError_t on_stream(cudaStream_t s, const char *what, std::function<void()> op) {
    if (g_capturing && s == g_capturing) { g_capture->ops.push_back(std::move(op)); return cudaSuccess; }
    if (g_capturing) return capture_violation(what);
    op();
    return cudaSuccess;
}

/* device allocations and their sizes, for cudaMemGetInfo */
static std::mutex g_mem_mu;
static std::unordered_map<void *, size_t> g_mem;
static size_t g_mem_used;
static const size_t EMU_MEM_TOTAL = (size_t)8 << 30;

static void *emu_alloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (p) memset(p, 0xff, n);        /* NaN floats: reads of unwritten memory show */
    return p;
}
static std::map<const char *, size_t> g_pinned;   /* cudaMallocHost blocks, for async copies */
static bool is_pinned(const void *p, size_t n) {
    std::lock_guard<std::mutex> lk(g_mem_mu);
    auto it = g_pinned.upper_bound((const char *)p);
    if (it == g_pinned.begin()) return false;
    --it;
    return (const char *)p + n <= it->first + it->second;
}
extern "C" cudaError_t cudaMalloc(void **p, size_t n) {
    if (g_capturing) return capture_violation("cudaMalloc");
    *p = emu_alloc(n);
    if (!*p) return cudaErrorMemoryAllocation;
    std::lock_guard<std::mutex> lk(g_mem_mu);
    g_mem[*p] = n;
    g_mem_used += n;
    return cudaSuccess;
}
extern "C" cudaError_t cudaFree(void *p) {
    if (g_capturing) return capture_violation("cudaFree");
    if (!p) return cudaSuccess;
    {
        std::lock_guard<std::mutex> lk(g_mem_mu);
        auto it = g_mem.find(p);
        if (it == g_mem.end()) return cudaErrorInvalidValue;   /* not from cudaMalloc */
        g_mem_used -= it->second;
        g_mem.erase(it);
    }
    free(p);
    return cudaSuccess;
}
extern "C" cudaError_t cudaMallocHost(void **p, size_t n) {
    if (g_capturing) return capture_violation("cudaMallocHost");
    *p = emu_alloc(n);
    if (!*p) return cudaErrorMemoryAllocation;
    std::lock_guard<std::mutex> lk(g_mem_mu);
    g_pinned[(const char *)*p] = n;
    return cudaSuccess;
}
extern "C" cudaError_t cudaFreeHost(void *p) {
    if (g_capturing) return capture_violation("cudaFreeHost");
    if (!p) return cudaSuccess;
    {
        std::lock_guard<std::mutex> lk(g_mem_mu);
        if (!g_pinned.erase((const char *)p)) return cudaErrorInvalidValue;
    }
    free(p);
    return cudaSuccess;
}
/* SK_EMU_GPUS=n (default 1) emulated devices, all the same memory; the current one is remembered */
static int emu_devices(void) {
    const char *v = getenv("SK_EMU_GPUS");
    int n = v ? atoi(v) : 1;
    return n < 1 ? 1 : n;
}
static int g_device = 0;
extern "C" cudaError_t cudaSetDevice(int d) {
    if (d < 0 || d >= emu_devices()) return cudaErrorInvalidValue;
    g_device = d;
    return cudaSuccess;
}
extern "C" cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) {
    if (g_capturing) return capture_violation("cudaMemcpy");
    if (n) memmove(d, s, n);
    return cudaSuccess;
}
extern "C" cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t st) {
    /* in a graph the host side must be pinned: the copy happens at each replay */
    if (g_capturing && st == g_capturing && ((k == cudaMemcpyHostToDevice && !is_pinned(s, n)) ||
                                             (k == cudaMemcpyDeviceToHost && !is_pinned(d, n))))
        return capture_violation("cudaMemcpyAsync with pageable host memory");
    return on_stream(st, "cudaMemcpyAsync on another stream", [=]() { if (n) memmove(d, s, n); });
}
extern "C" cudaError_t cudaMemcpy2D(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, cudaMemcpyKind) {
    if (g_capturing) return capture_violation("cudaMemcpy2D");
    if (w > dp || w > sp) return cudaErrorInvalidValue;
    for (size_t r = 0; r < h; r++) memcpy((char *)d + r * dp, (const char *)s + r * sp, w);
    return cudaSuccess;
}
extern "C" cudaError_t cudaMemset(void *p, int v, size_t n) {
    if (g_capturing) return capture_violation("cudaMemset");
    memset(p, v, n);
    return cudaSuccess;
}
extern "C" cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t st) {
    return on_stream(st, "cudaMemsetAsync on another stream", [=]() { memset(p, v, n); });
}
extern "C" cudaError_t cudaDeviceSynchronize(void) {
    if (g_capturing) return capture_violation("cudaDeviceSynchronize");
    return g_err;
}
extern "C" cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    *s = new emu_stream{flags};
    return cudaSuccess;
}
extern "C" cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (g_capturing == s) return cudaErrorInvalidValue;
    delete s;
    return cudaSuccess;
}
extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t) {
    if (g_capturing) return capture_violation("cudaStreamSynchronize");
    return g_err;
}
extern "C" cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
    if (!s || g_capturing) return cudaErrorInvalidValue;   /* not the legacy stream; one at a time */
    g_capturing = s;
    g_capture = new emu_graph;
    g_capture_err = cudaSuccess;
    return cudaSuccess;
}
extern "C" cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    if (s != g_capturing) return cudaErrorInvalidValue;
    cudaError_t e = g_capture_err;
    g_capturing = nullptr;
    if (e != cudaSuccess) { delete g_capture; g_capture = nullptr; *g = nullptr; return e; }
    *g = g_capture;
    g_capture = nullptr;
    return cudaSuccess;
}
extern "C" cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long) {
    if (!g) return cudaErrorInvalidValue;
    *e = new emu_graph_exec{g->ops};
    return cudaSuccess;
}
extern "C" cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t) {
    if (g_capturing) return capture_violation("cudaGraphLaunch");
    for (auto &op : e->ops) op();
    return cudaSuccess;
}
extern "C" cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
    if (!e) return cudaErrorInvalidValue;
    if (g_capturing && s != g_capturing) return capture_violation("cudaStreamWaitEvent on another stream");
    return cudaSuccess;
}
extern "C" cudaError_t cudaGraphDestroy(cudaGraph_t g) { delete g; return cudaSuccess; }
extern "C" cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) { delete e; return cudaSuccess; }
extern "C" cudaError_t cudaGetLastError(void) { cudaError_t e = g_err; g_err = cudaSuccess; return e; }
extern "C" cudaError_t cudaPeekAtLastError(void) { return g_err; }
extern "C" const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    default: return "unspecified launch failure";
    }
}
extern "C" const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    default: return "cudaErrorLaunchFailure";
    }
}
extern "C" cudaError_t cudaGetDeviceCount(int *n) { *n = emu_devices(); return cudaSuccess; }
extern "C" cudaError_t cudaGetDevice(int *d) { *d = g_device; return cudaSuccess; }
extern "C" cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CPU emulator (tests/cuda/emu)");
    p->totalGlobalMem = (size_t)8 << 30; p->major = 9; p->minor = 0; p->multiProcessorCount = 1;
    return cudaSuccess;
}
extern "C" cudaError_t cudaMemGetInfo(size_t *f, size_t *t) {
    std::lock_guard<std::mutex> lk(g_mem_mu);
    *t = EMU_MEM_TOTAL;
    *f = g_mem_used < EMU_MEM_TOTAL ? EMU_MEM_TOTAL - g_mem_used : 0;
    return cudaSuccess;
}
/* events: everything runs synchronously, so an event records the host clock when it is
 * recorded; elapsed time between two is the emulator's own (slow) time, and NotReady
 * for an event never recorded, as on the GPU */
struct emu_event { double t; int recorded; };
static double emu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
extern "C" cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = new emu_event{0.0, 0}; return cudaSuccess; }
extern "C" cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { return cudaEventCreate(e); }
extern "C" cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
extern "C" cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (g_capturing) return capture_violation("cudaEventRecord");      /* bench --profile: no graphs */
    (void)s;
    e->t = emu_now();
    e->recorded = 1;
    return cudaSuccess;
}
extern "C" cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
extern "C" cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    if (!a->recorded || !b->recorded) return cudaErrorNotReady;
    *ms = (float)((b->t - a->t) * 1e3);
    return cudaSuccess;
}

/* a block's shared memory limit: an H100's, or SK_EMU_SMEM_OPTIN bytes (a smaller GPU: a
 * launch that asks for more fails, as on such a GPU) */
static size_t smem_limit(void) {
    const char *e = getenv("SK_EMU_SMEM_OPTIN");
    const long v = e && *e ? atol(e) : 0;
    return v > 0 && (size_t)v < 227 * 1024 ? (size_t)v : 227 * 1024;
}
extern "C" cudaError_t cudaFuncSetAttribute(const void *, cudaFuncAttribute, int v) {
    return v < 0 || (size_t)v > smem_limit() ? cudaErrorInvalidValue : cudaSuccess;
}
extern "C" cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int) {
    if (a != cudaDevAttrMaxSharedMemoryPerBlockOptin) return cudaErrorInvalidValue;
    *v = (int)smem_limit();
    return cudaSuccess;
}

/* ------------------------------------------------------------------ cuBLAS */

struct emu_blas { int mode; cudaStream_t stream; };
extern "C" cublasStatus_t cublasCreate(cublasHandle_t *h) { *h = new emu_blas{0, nullptr}; return CUBLAS_STATUS_SUCCESS; }
extern "C" cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) { h->stream = s; return CUBLAS_STATUS_SUCCESS; }
extern "C" cublasStatus_t cublasSetWorkspace(cublasHandle_t, void *, size_t) { return CUBLAS_STATUS_SUCCESS; }
/* a checked call's work: run now, or recorded when the handle's stream captures */
static cublasStatus_t blas_on_stream(cublasHandle_t h, std::function<void()> op) {
    return on_stream(h->stream, "a cuBLAS call on another stream", std::move(op)) == cudaSuccess
               ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}
extern "C" cublasStatus_t cublasDestroy(cublasHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
extern "C" cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) { h->mode = (int)m; return CUBLAS_STATUS_SUCCESS; }
extern "C" const char *cublasGetStatusString(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : s == CUBLAS_STATUS_NOT_SUPPORTED ? "CUBLAS_STATUS_NOT_SUPPORTED"
           : s == CUBLAS_STATUS_EXECUTION_FAILED ? "CUBLAS_STATUS_EXECUTION_FAILED" : "CUBLAS_STATUS_INVALID_VALUE";
}
/* C (m x n, ldc) = alpha op(A) op(B) + beta C, column-major, accumulated in double; C is not
 * read when beta == 0. A and B are fp32 or bf16 (raw bits: the high half of a float). */
static float emu_elem(const void *X, int bf16, size_t i) {
    if (!bf16) return ((const float *)X)[i];
    uint32_t u = (uint32_t)((const uint16_t *)X)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* fp32 -> bf16 bits, round to nearest even (NaN stays NaN), as cuBLAS writes a bf16 C */
static uint16_t emu_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static cublasStatus_t emu_gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                               float alpha, const void *A, int a16, int lda, const void *B, int b16, int ldb,
                               float beta, void *C, int c16, int ldc) {
    if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (lda < (ta == CUBLAS_OP_N ? (m > 1 ? m : 1) : (k > 1 ? k : 1))) return CUBLAS_STATUS_INVALID_VALUE;
    if (ldb < (tb == CUBLAS_OP_N ? (k > 1 ? k : 1) : (n > 1 ? n : 1))) return CUBLAS_STATUS_INVALID_VALUE;
    if (ldc < (m > 1 ? m : 1)) return CUBLAS_STATUS_INVALID_VALUE;
    return blas_on_stream(h, [=]() {
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int p = 0; p < k; p++) {
                float a = emu_elem(A, a16, ta == CUBLAS_OP_N ? i + (size_t)p * lda : p + (size_t)i * lda);
                float b = emu_elem(B, b16, tb == CUBLAS_OP_N ? p + (size_t)j * ldb : j + (size_t)p * ldb);
                s += (double)a * b;
            }
            const size_t ci = i + (size_t)j * ldc;
            const double c = beta == 0.0f ? 0.0 : (double)emu_elem(C, c16, ci);
            const float r = beta == 0.0f ? (float)(alpha * s) : (float)(alpha * s + beta * c);
            if (c16) ((uint16_t *)C)[ci] = emu_bf16(r);
            else ((float *)C)[ci] = r;
        }
    });
}
extern "C" cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                      const float *alpha, const float *A, int lda, const float *B, int ldb,
                                      const float *beta, float *C, int ldc) {
    return emu_gemm(h, ta, tb, m, n, k, *alpha, A, 0, lda, B, 0, ldb, *beta, C, 0, ldc);
}
extern "C" cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                       const void *alpha, const void *A, cudaDataType_t at, int lda, const void *B,
                                       cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct, int ldc,
                                       cublasComputeType_t compute, cublasGemmAlgo_t) {
    /* fp32 or bf16 A and B, fp32 or bf16 C (bf16 C only with bf16 A and B, as cuBLAS's table
     * of supported type combinations has it), fp32 compute */
    if (compute != CUBLAS_COMPUTE_32F || (ct != CUDA_R_32F && ct != CUDA_R_16BF) ||
        (at != CUDA_R_32F && at != CUDA_R_16BF) || (bt != CUDA_R_32F && bt != CUDA_R_16BF) ||
        (ct == CUDA_R_16BF && (at != CUDA_R_16BF || bt != CUDA_R_16BF)))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return emu_gemm(h, ta, tb, m, n, k, *(const float *)alpha, A, at == CUDA_R_16BF, lda, B, bt == CUDA_R_16BF, ldb,
                    *(const float *)beta, C, ct == CUDA_R_16BF, ldc);
}

/* y = alpha op(A) x + beta y, A column-major (m x n, lda); y is not read when beta == 0 */
extern "C" cublasStatus_t cublasSgemv(cublasHandle_t h, cublasOperation_t trans, int m, int n, const float *alpha_p,
                                      const float *A, int lda, const float *x, int incx, const float *beta_p, float *y,
                                      int incy) {
    if (m < 0 || n < 0 || lda < (m > 1 ? m : 1) || incx == 0 || incy == 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (incx < 0 || incy < 0) return CUBLAS_STATUS_INVALID_VALUE;     /* not used by skiplm */
    const float alpha = *alpha_p, beta = *beta_p;      /* host scalars: read at the call */
    return blas_on_stream(h, [=]() {
        int ny = trans == CUBLAS_OP_N ? m : n, nx = trans == CUBLAS_OP_N ? n : m;
        for (int i = 0; i < ny; i++) {
            double s = 0;
            for (int p = 0; p < nx; p++) {
                float a = trans == CUBLAS_OP_N ? A[i + (size_t)p * lda] : A[p + (size_t)i * lda];
                s += (double)a * x[(size_t)p * incx];
            }
            float *c = &y[(size_t)i * incy];
            *c = beta == 0.0f ? (float)(alpha * s) : (float)(alpha * s + beta * (double)*c);
        }
    });
}

/* ------------------------------------------------------------- the blocks */

/* Under ASan (make cuda-emu-san-test) every switch between the scheduler's stack and a
 * fiber's is announced, so that ASan knows which stack is live (no false reports on the
 * fibers' stacks, and use-after-return still checked on them). */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#else
#define ASAN_POISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#define ASAN_UNPOISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
static inline void __sanitizer_start_switch_fiber(void **, const void *, size_t) {}
static inline void __sanitizer_finish_switch_fiber(void *, const void **, size_t *) {}
#endif

enum { READY, AT_BLOCK, AT_WARP, DONE };
/* A fiber per thread slot, made once (makecontext) and kept: a finished thread parks at the
 * end of its loop and runs the next block's body when resumed. Switches are setjmp /
 * longjmp (no signal mask, so no system call; swapcontext makes two per switch and was
 * 85% of the emulator's time); ucontext only starts each fiber the first time. */
struct Fiber { ucontext_t boot; void *jb[5]; int state, started; void *fake_stack; };

dim3 emu_blockIdx, emu_blockDim, emu_gridDim;
static void *g_sched[5];
/* GCC's __builtin_setjmp / __builtin_longjmp: registers and stack pointer only, and not
 * intercepted by ASan (whose longjmp hook unpoisons the whole stack and makes a system
 * call, 40% of the time under make cuda-emu-san-test); the fiber annotations tell ASan
 * about the stack switch instead. The jump is in its own function, as the builtins ask. */
static void __attribute__((noinline, no_sanitize_address)) jump_to(void **buf) { __builtin_longjmp(buf, 1); }
static std::vector<Fiber> g_fib;
static int g_cur = 0;
static const std::function<void()> *g_body;
static char *g_stacks = nullptr;
static const size_t STACK = 256 << 10;
static const int MAX_THREADS = 1024;
static const size_t SMEM_MAX = 227 * 1024;
static unsigned char g_smem[SMEM_MAX + 128];  /* a block's dynamic shared memory, 128-aligned in it */
static unsigned char *g_smem_base;
static double g_slots[MAX_THREADS];
static uint64_t g_lane[MAX_THREADS * 8];      /* the mma / ldmatrix operands of each thread */
static const void *g_sched_stack;               /* the scheduler's stack, for ASan */
static size_t g_sched_stack_size;
static void *g_sched_fake;

extern "C++" unsigned emu_tid(void) { return (unsigned)g_cur; }
double *emu_warp_slots(void) { return g_slots; }
uint64_t *emu_lane_scratch(void) { return g_lane; }

/* Shared-memory hazards the fiber schedule cannot show. Warps run in lockstep here (every
 * warp to its next warp-collective call, then the next round), so a warp that overwrites a
 * tile another warp is still reading (a missing __syncthreads) would read right on the
 * emulator and wrong on a GPU. So the tile reads of ldmatrix are stamped with their warp and
 * barrier interval (per 16-byte granule), and a tile write (cp.async, sts32) to a granule that
 * another warp read in the same interval aborts. */
static uint64_t g_rd_stamp[SMEM_MAX / 16];     /* (block serial << 32) + barrier interval of the last read */
static int g_rd_warp[SMEM_MAX / 16];           /* its warp, or -1 for several */
static uint64_t g_block_serial = 0, g_interval = 0;
static uint64_t stamp_now(void) { return (g_block_serial << 32) + g_interval; }
static bool granules(const void *p, int bytes, size_t &g0, size_t &g1) {
    const uintptr_t a = (uintptr_t)p, base = (uintptr_t)g_smem_base;
    if (a < base || a + (uintptr_t)bytes > base + SMEM_MAX) return false;   /* not shared memory */
    g0 = (a - base) / 16; g1 = (a - base + (uintptr_t)bytes - 1) / 16;
    return true;
}
void emu_smem_read(const void *p, int bytes) {
    size_t g0, g1;
    if (!granules(p, bytes, g0, g1)) return;
    const uint64_t now = stamp_now();
    const int w = (int)(emu_tid() / 32);
    for (size_t g = g0; g <= g1; g++) {
        if (g_rd_stamp[g] == now && g_rd_warp[g] != w) g_rd_warp[g] = -1;
        else if (g_rd_stamp[g] != now) { g_rd_stamp[g] = now; g_rd_warp[g] = w; }
    }
}
void emu_smem_write(void *p, int bytes, const char *what) {
    size_t g0, g1;
    if (!granules(p, bytes, g0, g1)) return;
    const uint64_t now = stamp_now();
    const int w = (int)(emu_tid() / 32);
    for (size_t g = g0; g <= g1; g++)
        if (g_rd_stamp[g] == now && g_rd_warp[g] != w) {
            fprintf(stderr, "emu: %s by thread %u of block (%u, %u, %u) overwrites shared memory (byte %zu) that "
                    "another warp read since the last __syncthreads: a missing barrier\n", what, emu_tid(),
                    emu_blockIdx.x, emu_blockIdx.y, emu_blockIdx.z, g * 16);
            abort();
        }
}

/* cp.async: each thread's copies in flight, with the group they belong to (the thread's
 * count of commits when it issued them). Stricter than the hardware, where a copy lands at
 * some point before the wait: the destination reads as NaN from the issue until the wait
 * that covers its group, when the source is read and copied; copies whose group was never
 * committed, or that no wait covered, never land. */
struct CpOp { void *dst; const void *src; int bytes; unsigned group; };
static std::vector<CpOp> g_cp[MAX_THREADS];
static unsigned g_cp_commits[MAX_THREADS];
void emu_cp_async(void *dst, const void *src, int bytes) {
    if ((uintptr_t)dst % (unsigned)bytes || (uintptr_t)src % (unsigned)bytes) {
        fprintf(stderr, "emu: cp.async of %d bytes from %p to %p: addresses not aligned\n", bytes, src, dst);
        abort();
    }
    const unsigned t = emu_tid();
    emu_smem_write(dst, bytes, "cp.async");
    memset(dst, 0xff, (size_t)bytes);
    g_cp[t].push_back(CpOp{dst, src, bytes, g_cp_commits[t]});
}
void emu_cp_commit(void) { g_cp_commits[emu_tid()]++; }
void emu_cp_wait(int n) {
    const unsigned t = emu_tid(), done = g_cp_commits[t] >= (unsigned)n ? g_cp_commits[t] - (unsigned)n : 0;
    std::vector<CpOp> &q = g_cp[t];
    size_t k = 0;
    for (const CpOp &op : q) {
        if (op.group < done) memcpy(op.dst, op.src, (size_t)op.bytes);
        else q[k++] = op;
    }
    q.resize(k);
}
static void cp_reset(int nt) {
    for (int t = 0; t < nt; t++) { g_cp[t].clear(); g_cp_commits[t] = 0; }
    g_block_serial++;
    g_interval = 0;
}
void *emu_dyn_smem(void) { return g_smem_base; }

/* the launch's dynamic shared memory: 128-byte aligned, as on the GPU, NaN until written;
 * under ASan the bytes past its size are poisoned (a read past the end is reported) */
static void smem_reset(size_t smem) {
    static size_t poisoned_for = (size_t)-1;  /* the size the poisoning is set for */
    uintptr_t a = (uintptr_t)g_smem;
    g_smem_base = g_smem + ((128 - a % 128) % 128);
    if (smem != poisoned_for) {
        ASAN_UNPOISON_MEMORY_REGION(g_smem, sizeof g_smem);
        ASAN_POISON_MEMORY_REGION(g_smem, (size_t)(g_smem_base - g_smem));
        ASAN_POISON_MEMORY_REGION(g_smem_base + smem, (size_t)(g_smem + sizeof g_smem - (g_smem_base + smem)));
        poisoned_for = smem;
    }
    memset(g_smem_base, 0xff, smem);
}

/* The two switch functions are not instrumented: ASan would call its longjmp hook before
 * the (noreturn) jump. */
#define EMU_SWITCH __attribute__((no_sanitize_address))
static EMU_SWITCH void yield_to_sched(int state) {
    Fiber &f = g_fib[g_cur];
    f.state = state;
    __sanitizer_start_switch_fiber(&f.fake_stack, g_sched_stack, g_sched_stack_size);
    if (!__builtin_setjmp(f.jb)) jump_to(g_sched);
    __sanitizer_finish_switch_fiber(f.fake_stack, nullptr, nullptr);
}
void emu_syncthreads(void) { yield_to_sched(AT_BLOCK); }
void emu_syncwarp(void) { yield_to_sched(AT_WARP); }

static void fiber_main(void) {
    __sanitizer_finish_switch_fiber(nullptr, &g_sched_stack, &g_sched_stack_size);
    for (;;) {                        /* one block's body per turn, then park */
        (*g_body)();
        yield_to_sched(DONE);
    }
}

/* run thread t until it reaches a barrier or its end */
static EMU_SWITCH void resume(int t) {
    Fiber &f = g_fib[t];
    g_cur = t;
    __sanitizer_start_switch_fiber(&g_sched_fake, g_stacks + (size_t)t * STACK, STACK);
    if (!__builtin_setjmp(g_sched)) {
        if (f.started) jump_to(f.jb);
        f.started = 1;
        setcontext(&f.boot);          /* first run of this fiber: fiber_main on its stack */
    }
    __sanitizer_finish_switch_fiber(g_sched_fake, nullptr, nullptr);
}

/* SK_EMU_ORDER=reverse runs the blocks of a grid, and the threads of each barrier interval,
 * from the last to the first. Between two barriers a race-free kernel gives the same bits in any order; a data
 * race on shared or global memory (a thread reading what another writes in the same
 * interval, a block reading what another block of the grid writes) reads the other value, often the NaN the memory started as, in one of the two
 * orders. make cuda-emu-san-test runs this way, make cuda-emu-test the forward way. */
static int thread_order_reverse(void) {
    static int rev = -1;
    if (rev < 0) {
        const char *v = getenv("SK_EMU_ORDER");
        rev = v && !strcmp(v, "reverse");
        if (v && !rev && strcmp(v, "forward")) {
            fprintf(stderr, "emu: SK_EMU_ORDER=%s: expected forward or reverse\n", v);
            abort();
        }
    }
    return rev;
}

static void run_block(int nt) {
    const int rev = thread_order_reverse();
    for (int t = 0; t < nt; t++) g_fib[t].state = READY;
    for (;;) {
        bool ran = false;
        for (int i = 0; i < nt; i++) {
            int t = rev ? nt - 1 - i : i;
            if (g_fib[t].state != READY) continue;
            resume(t);
            ran = true;
        }
        int done = 0, at_block = 0;
        for (int t = 0; t < nt; t++) { done += g_fib[t].state == DONE; at_block += g_fib[t].state == AT_BLOCK; }
        if (done == nt) return;
        bool released = false;
        for (int w0 = 0; w0 < nt; w0 += 32) {                 /* warp barriers */
            int live = 0, at = 0;
            for (int t = w0; t < w0 + 32 && t < nt; t++) { live += g_fib[t].state != DONE; at += g_fib[t].state == AT_WARP; }
            if (live > 0 && at == live) {
                for (int t = w0; t < w0 + 32 && t < nt; t++) if (g_fib[t].state == AT_WARP) g_fib[t].state = READY;
                released = true;
            }
        }
        if (at_block > 0 && at_block + done == nt) {           /* block barrier */
            for (int t = 0; t < nt; t++) if (g_fib[t].state == AT_BLOCK) g_fib[t].state = READY;
            g_interval++;
            released = true;
        }
        if (!ran && !released) {
            fprintf(stderr, "emu: barrier deadlock in block (%u, %u, %u): %d threads at __syncthreads, %d done, "
                    "the others at a warp shuffle (divergent barrier)\n", emu_blockIdx.x, emu_blockIdx.y,
                    emu_blockIdx.z, at_block, done);
            abort();
        }
    }
}

static void run_grid(dim3 grid, dim3 block, size_t smem, const std::function<void()> &body);

/* a launch is checked at once, then run, or recorded when its stream captures */
void emu_launch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, const std::function<void()> &body) {
    int nt = (int)(block.x * block.y * block.z);
    if (block.y != 1 || block.z != 1 || nt < 1 || nt > MAX_THREADS || grid.x < 1 || grid.y < 1 || grid.z < 1 ||
        grid.y > 65535 || grid.z > 65535 || smem > SMEM_MAX || smem > smem_limit()) {
        fprintf(stderr, "emu: bad launch: grid (%u, %u, %u), block %d, smem %zu\n", grid.x, grid.y, grid.z, nt, smem);
        emu_set_error(cudaErrorInvalidConfiguration);
        return;
    }
    cudaError_t e = on_stream(stream, "a kernel launch on another stream",
                              [grid, block, smem, b = body]() { run_grid(grid, block, smem, b); });
    if (e != cudaSuccess) emu_set_error(e);
}

static void run_grid(dim3 grid, dim3 block, size_t smem, const std::function<void()> &body) {
    const int nt = (int)(block.x * block.y * block.z);
    if (!g_stacks) {
        g_stacks = (char *)malloc((size_t)MAX_THREADS * STACK);
        g_fib.resize(MAX_THREADS);
        if (!g_stacks) { fprintf(stderr, "emu: out of memory for fiber stacks\n"); abort(); }
        for (int t = 0; t < MAX_THREADS; t++) {
            Fiber &f = g_fib[t];
            getcontext(&f.boot);
            f.boot.uc_stack.ss_sp = g_stacks + (size_t)t * STACK;
            f.boot.uc_stack.ss_size = STACK;
            f.boot.uc_link = nullptr;     /* fiber_main never returns */
            makecontext(&f.boot, fiber_main, 0);
            f.started = 0;
        }
    }
    g_body = &body;
    emu_gridDim = grid; emu_blockDim = block;
    const int rev = thread_order_reverse();               /* blocks in reverse order too */
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                emu_blockIdx = rev ? dim3(grid.x - 1 - x, grid.y - 1 - y, grid.z - 1 - z) : dim3(x, y, z);
                smem_reset(smem);
                cp_reset(nt);
                run_block(nt);
            }
}
