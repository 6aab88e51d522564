/* CPU emulator of the NCCL subset skiplm uses (src/cuda/dist_cuda.c), over MPI_COMM_WORLD:
 * linked into the emulator's MPI build (build-cuda-emu-mpi/, make cuda-emu-mpi-test), where
 * "device" memory is host memory that MPI can read. It checks what NCCL would: every rank
 * passes the unique id rank 0 made, the right rank and size, a supported type and op. */
#ifndef SK_EMU_NCCL_H
#define SK_EMU_NCCL_H
#include "cuda_runtime_api.h"
#ifdef __cplusplus
extern "C" {
#endif
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
typedef struct emu_nccl_comm *ncclComm_t;
typedef enum { ncclSuccess = 0, ncclSystemError = 2, ncclInvalidArgument = 4, ncclInvalidUsage = 5 } ncclResult_t;
typedef enum { ncclFloat32 = 7, ncclFloat = 7 } ncclDataType_t;
typedef enum { ncclSum = 0, ncclAvg = 4 } ncclRedOp_t;
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root,
                           ncclComm_t comm, cudaStream_t stream);
/* Groups: calls between start and end are launched together; the emulator runs each call
 * as it comes (blocking MPI, the same order on every rank), and checks the nesting. */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
const char *ncclGetErrorString(ncclResult_t r);
#ifdef __cplusplus
}
#endif
#endif
