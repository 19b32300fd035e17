/* backend/tp_group.c: the host-memory group of the CPU multi-rank mode
 * (backend/tp_group.h). */
#include "backend/tp_group.h"

#include <stdlib.h>

#include "base/err.h"
#include "base/mem.h"

tp_host_group *tp_host_group_new(int world) {
    if (world < 1 || world > TP_MAX_RANKS) {
        err_set("tensor-parallel group of %d ranks (1..%d)", world, TP_MAX_RANKS);
        return NULL;
    }
    tp_host_group *g = mem_calloc(1, sizeof *g, "tensor-parallel group");
    if (!g) return NULL;
    g->world = world;
    if (pthread_barrier_init(&g->bar, NULL, (unsigned)world) != 0) {
        free(g);
        err_set("tensor-parallel group: cannot make a barrier of %d threads", world);
        return NULL;
    }
    return g;
}

void tp_host_group_free(tp_host_group *g) {
    if (!g) return;
    pthread_barrier_destroy(&g->bar);
    for (int r = 0; r < TP_MAX_RANKS; r++) free(g->tmp[r]);
    free(g);
}

void tp_host_barrier(tp_host_group *g) { pthread_barrier_wait(&g->bar); }
