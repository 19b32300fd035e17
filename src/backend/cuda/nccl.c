/* backend/cuda/nccl.c: the CUDA backend's tensor-parallel group: an NCCL communicator
 * per rank (one GPU, one thread: docs/tensor-parallel.md says why), made from one
 * unique id, and the collectives on the rank's stream, so a recorded decode step
 * captures them in its CUDA graph like any kernel. NVLink SHARP (multicast) stays off:
 * NCCL_NVLS_ENABLE=0 is put in the environment before the first NCCL call, and nothing
 * here creates CUDA multicast objects (on the shared 2-GPU machine a program using
 * them can take the host's GPUs out of service). */
#include <nccl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "base/err.h"

_Static_assert(sizeof(ncclUniqueId) == TP_ID_BYTES, "TP_ID_BYTES is NCCL's unique id size");

static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;
/* Written, never read, here: NCCL reads it. Before any NCCL call of the process. */
static void nvls_off(void) { setenv("NCCL_NVLS_ENABLE", "0", 1); }

static int nccl_ok(ncclResult_t r, const char *what) {
    if (r == ncclSuccess || r == ncclInProgress) return 0;
    return err_set("nccl %s: %s", what, ncclGetErrorString(r));
}

int cuda_tp_unique_id(backend *b, void *id) {
    (void)b;
    pthread_once(&g_env_once, nvls_off);
    ncclUniqueId u;
    if (nccl_ok(ncclGetUniqueId(&u), "unique id") != 0) return -1;
    memcpy(id, &u, sizeof u);
    return 0;
}

void cuda_use_here(backend *b) { cudaSetDevice(cu(b)->id); }

int cuda_tp_join(backend *b, int rank, int world, void *shared) {
    cuda_backend *c = cu(b);
    pthread_once(&g_env_once, nvls_off);
    if (cudaSetDevice(c->id) != cudaSuccess) return err_set("cuda:%d: cannot make it this rank's device", c->id);
    ncclUniqueId u;
    memcpy(&u, shared, sizeof u);
    ncclComm_t comm = NULL;
    /* one communicator per thread; the group brackets let NCCL set it up as one call */
    ncclGroupStart();
    ncclResult_t r = ncclCommInitRank(&comm, world, u, rank);
    ncclResult_t g = ncclGroupEnd();
    if (nccl_ok(r, "init rank") != 0 || nccl_ok(g, "init rank (group)") != 0) return -1;
    c->nccl = comm;
    b->tp_rank = rank;
    b->tp_world = world;
    return 0;
}

void cuda_tp_leave(cuda_backend *c) {
    if (!c->nccl) return;
    ncclCommDestroy((ncclComm_t)c->nccl);
    c->nccl = NULL;
}

int cuda_nccl_all_reduce(cuda_backend *c, float *x, long n, cudaStream_t st) {
    if (!c->nccl) return 0; /* not in a group: one rank, nothing to add */
    return nccl_ok(ncclAllReduce(x, x, (size_t)n, ncclFloat, ncclSum, (ncclComm_t)c->nccl, st), "all_reduce");
}

int cuda_nccl_gather_cols(cuda_backend *c, float *full, const float *part, int T, int w, int W, void *work,
                          cudaStream_t st) {
    const int world = c->nccl ? c->self->tp_world : 1;
    const size_t chunk = (size_t)T * (size_t)w;
    float *all = c->nccl ? work : (float *)part;
    if (c->nccl && nccl_ok(ncclAllGather(part, all, chunk, ncclFloat, (ncclComm_t)c->nccl, st), "all_gather") != 0)
        return -1;
    if (!full) return 0;
    for (int r = 0; r < world; r++) {
        const long c0 = (long)r * w, n = c0 + w <= W ? w : W - c0;
        if (n <= 0) continue;
        /* rank r's part [T, n] (pitch n) into columns [c0, c0 + n) of full [T, W] */
        if (cudaMemcpy2DAsync(full + c0, (size_t)W * sizeof(float), all + (size_t)r * chunk, (size_t)n * sizeof(float),
                              (size_t)n * sizeof(float), (size_t)T, cudaMemcpyDeviceToDevice, st) != cudaSuccess)
            return err_set("cuda gather_cols: %s", cudaGetErrorString(cudaGetLastError()));
    }
    return 0;
}
