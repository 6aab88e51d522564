/* The NCCL emulator (tests/cuda/emu/nccl.h) over MPI_COMM_WORLD. A unique id is a magic
 * string and rank 0's process id; ncclCommInitRank compares every rank's id with rank 0's,
 * so a rank that did not receive the broadcast id fails as with NCCL. ncclAllReduce sums
 * with MPI_Allreduce and, for ncclAvg, divides the sum by the number of ranks (NCCL may
 * round differently: it can pre-multiply each term by 1/n). ncclReduce and ncclBroadcast
 * are MPI_Reduce and MPI_Bcast with NCCL's argument checks (root in range, recv used on the
 * root only for a reduce); groups nest as NCCL's do. */
#include "nccl.h"
#include <mpi.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct emu_nccl_comm { int rank, size; };

static const char MAGIC[] = "skiplm-emu-nccl";

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "%s:%ld", MAGIC, (long)getpid());
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    int ok = 0, r, n;
    MPI_Initialized(&ok);
    if (!ok) return ncclInvalidUsage;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    ncclUniqueId root = id;
    MPI_Bcast(&root, (int)sizeof root, MPI_BYTE, 0, MPI_COMM_WORLD);
    int mine = rank == r && nranks == n && !memcmp(&root, &id, sizeof id) && !strncmp(id.internal, MAGIC, strlen(MAGIC));
    int all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) return ncclInvalidArgument;
    struct emu_nccl_comm *c = malloc(sizeof *c);
    if (!c) return ncclSystemError;
    c->rank = rank; c->size = nranks;
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) { free(comm); return ncclSuccess; }

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
    (void)stream;
    if (!comm || type != ncclFloat32 || (op != ncclSum && op != ncclAvg) || count > INT_MAX) return ncclInvalidArgument;
    if (MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
        return ncclSystemError;
    if (op == ncclAvg)
        for (size_t i = 0; i < count; i++) ((float *)recv)[i] /= (float)comm->size;
    return ncclSuccess;
}

static int group_depth;

ncclResult_t ncclGroupStart(void) { group_depth++; return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) {
    if (group_depth <= 0) return ncclInvalidUsage;
    group_depth--;
    return ncclSuccess;
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream) {
    (void)stream;
    if (!comm || type != ncclFloat32 || (op != ncclSum && op != ncclAvg) || count > INT_MAX || root < 0 ||
        root >= comm->size || !send || (comm->rank == root && !recv))
        return ncclInvalidArgument;
    const int is_root = comm->rank == root;
    if (MPI_Reduce(is_root && send == recv ? MPI_IN_PLACE : send, is_root ? recv : NULL, (int)count, MPI_FLOAT,
                   MPI_SUM, root, MPI_COMM_WORLD) != MPI_SUCCESS)
        return ncclSystemError;
    if (is_root && op == ncclAvg)
        for (size_t i = 0; i < count; i++) ((float *)recv)[i] /= (float)comm->size;
    return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root,
                           ncclComm_t comm, cudaStream_t stream) {
    (void)stream;
    if (!comm || type != ncclFloat32 || count > INT_MAX || root < 0 || root >= comm->size || !recv ||
        (comm->rank == root && !send))
        return ncclInvalidArgument;
    if (comm->rank == root && send != recv) memcpy(recv, send, count * sizeof(float));
    if (MPI_Bcast(recv, (int)count, MPI_FLOAT, root, MPI_COMM_WORLD) != MPI_SUCCESS) return ncclSystemError;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclSystemError: return "unhandled system error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    }
    return "unknown result";
}
