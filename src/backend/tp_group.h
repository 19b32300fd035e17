/* backend/tp_group.h: the host-memory group the CPU backend's collectives run over
 * when the ranks of a tensor-parallel model are threads of one process (the CPU
 * multi-rank mode, docs/tensor-parallel.md): each rank publishes its buffer, a
 * barrier, every rank reads all of them. A GPU group is an NCCL communicator
 * instead (backend/cuda/nccl.c). */
#ifndef CELER_TP_GROUP_H
#define CELER_TP_GROUP_H
#include <pthread.h>
#include <stddef.h>

#define TP_MAX_RANKS 64   /* CELER_TP's bound (docs/limits.md) */

typedef struct tp_host_group_s {
    int world;
    pthread_barrier_t bar;
    const float *part[TP_MAX_RANKS];  /* what each rank published for the collective in flight */
    float *tmp[TP_MAX_RANKS];         /* each rank's sum before it overwrites its buffer */
    size_t tmp_cap[TP_MAX_RANKS];     /* floats */
} tp_host_group;

/* NULL with a message. */
tp_host_group *tp_host_group_new(int world);
void tp_host_group_free(tp_host_group *g);
/* Every rank waits for the others. */
void tp_host_barrier(tp_host_group *g);
#endif
