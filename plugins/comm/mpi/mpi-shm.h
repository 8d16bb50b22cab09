/* The mpi plugin's intra-node all-reduce through one shared window
 * (MPI_Win_allocate_shared), for worlds whose ranks all share one node.
 * Internal to plugins/comm/mpi (px_ prefix). */
#ifndef PHX_PLUGINS_COMM_MPI_SHM_H
#define PHX_PLUGINS_COMM_MPI_SHM_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include "phalanx/tensor.h"

typedef struct px_shm px_shm;

/* Collective over comm (every rank of it must share memory with the
 * others, which the caller checks): allocates the window. NULL with a
 * message in why[0..len) when it cannot. */
px_shm *px_shm_new(MPI_Comm comm, char *why, size_t len);

/* Collective: frees the window. NULL is a no-op. */
void px_shm_free(px_shm *s);

/* In-place all-reduce of count elements of dt at buf, every rank the
 * same call in the same order. Each element is reduced by one rank, in
 * rank order, f16/bf16 in f32 rounded once, and copied to the others:
 * every rank gets bitwise the same result. avg divides by the world
 * size. Waits on the other ranks without a timeout: the plugin's
 * watchdog ends a stuck call. 0, or -1 when another rank issued another
 * count, dtype or reduction (then why gets phx_kit_desync_text, naming
 * collective seq, and buf is untouched). */
int px_shm_allreduce(px_shm *s, void *buf, int64_t count, phx_dtype dt, phx_reduce_op op, uint64_t seq, char *why,
                     size_t len);

#endif
