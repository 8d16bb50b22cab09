/* Phalanx — communicators, the world from the environment, and spawn. */
#ifndef PHALANX_COMM_H
#define PHALANX_COMM_H

#include <stdbool.h>
#include "phalanx/tensor.h"
#include "phalanx/store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct phx_comm phx_comm;
typedef struct phx_work phx_work;

/* The world as torchrun (or Open MPI, or Slurm) describes it. */
typedef struct phx_world {
    size_t struct_size; /* sizeof (phx_world): PHX_WORLD_INIT sets it */
    int rank, size; /* RANK, WORLD_SIZE */
    int local_rank, local_size; /* LOCAL_RANK, LOCAL_WORLD_SIZE */
    char master_addr[256]; /* MASTER_ADDR (default 127.0.0.1) */
    int master_port; /* MASTER_PORT (default 29500) */
} phx_world;
#define PHX_WORLD_INIT \
    { \
        .struct_size = sizeof(phx_world) \
    }

/* Reads RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/MASTER_ADDR/MASTER_PORT,
 * else OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK(/LOCAL_SIZE), else
 * SLURM_PROCID/NTASKS/LOCALID; none at all is a world of one (rank 0).
 * Inside phx_spawn's threads the thread's own rank is used. PHX_EINVAL
 * names the variable and its value (non-numeric, rank >= size, port out of
 * 1..65535, ...). */
phx_status phx_world_from_env(phx_world *out);

typedef struct phx_comm_opts {
    size_t struct_size; /* sizeof (phx_comm_opts): PHX_COMM_OPTS_INIT sets it */
    const char *backend; /* NULL: PHX_COMM, else highest probe priority */
    int rank, size; /* size <= 0: both from phx_world_from_env */
    int local_rank, local_size; /* local_size <= 0: the world (local_rank = rank) */
    const char *master_addr; /* NULL: from the world */
    int master_port; /* <= 0: from the world */
    double timeout_s; /* <= 0: PHX_TIMEOUT, default 600 */
    phx_store *store; /* optional: rendezvous here instead of TCP */
    phx_device device; /* where collective buffers live (cpu default) */
} phx_comm_opts;
#define PHX_COMM_OPTS_INIT \
    { \
        .struct_size = sizeof(phx_comm_opts) \
    }

/* PHX_COMM_OPTS_INIT's values: everything from the environment, CPU
 * buffers. Deprecated: use PHX_COMM_OPTS_INIT. */
phx_comm_opts phx_comm_opts_default(void);

/* Joins the world: rendezvous through the store, load the backend plugin,
 * init it. NULL opts = defaults. Errors name the variable, backend or
 * peer at fault; PHX_ETIMEOUT when peers do not arrive within timeout. */
phx_status phx_comm_init(const phx_comm_opts *opts, phx_comm **out);
/* Finalizes the backend. NULL is a no-op. */
void phx_comm_free(phx_comm *c);
int phx_comm_rank(const phx_comm *c);
int phx_comm_size(const phx_comm *c);
const char *phx_comm_backend(const phx_comm *c);
phx_device phx_comm_device(const phx_comm *c);
double phx_comm_timeout(const phx_comm *c);

/* phx_comm_split's color for a rank that joins no group. */
#define PHX_COMM_SPLIT_UNDEFINED (-1)

/* Process groups (MPI_Comm_split, torch.distributed.new_group): the ranks
 * of c that pass the same color >= 0 form one new communicator, ranked by
 * key, then by their rank in c; *sub receives it. color
 * PHX_COMM_SPLIT_UNDEFINED: this rank joins none and *sub is NULL (which,
 * like any NULL communicator, reads as a world of one: do not issue the
 * group's collectives there). Collective over c: every rank of c calls it,
 * in the same place in its sequence of collectives on c, and it waits for
 * what was issued on c before. The group is a full communicator on c's
 * backend (and device and timeout): every collective, phx_work, PHX_TIMEOUT
 * and failures naming ranks (messages add each group rank's rank in the
 * world). Every backend: the plugin's split slot (mpi: MPI_Comm_split;
 * nccl: ncclCommSplit), else a new instance of the backend over the
 * group's ranks meeting in the store under a prefix of its own (threads,
 * gloo); a plugin that makes its own world without a split slot gives
 * PHX_EUNSUPPORTED. Groups may be split again.
 * Freeing: phx_comm_free in any order (a group keeps what it shares with
 * c, the store, until the last is freed), but in the same order on every
 * rank where the backend's free is collective (mpi), and every group
 * before the process exits. Collectives on several communicators: see
 * doc/guide/comm.md, "Process groups". Errors: PHX_EINVAL for a NULL sub, a
 * color below -1, a communicator already freed; then *sub is NULL and c
 * is unchanged. A failed exchange (a dead or late rank) is the
 * collective's PHX_EPEER / PHX_ETIMEOUT. c NULL (a world of one): *sub is
 * NULL, a world of one, whatever the color. */
phx_status phx_comm_split(phx_comm *c, int color, int key, phx_comm **sub);

/* A NULL communicator is a world of one, so a program written for many
 * ranks runs alone unchanged: rank 0, size 1, backend "none"; its
 * collectives check their arguments and keep (allreduce, broadcast) or
 * copy (allgather, reduce_scatter) their input, and leave *work NULL,
 * which phx_work_wait, phx_work_test and phx_work_free take as complete.
 * (phx_comm_rank and phx_comm_size of NULL are 0 and 1.)
 *
 * Collectives. Every rank must issue the same collectives in the same
 * order with the same counts and dtypes; they complete in issue order.
 * work == NULL: blocking (waits up to the comm's timeout). Otherwise *work
 * receives a handle to wait on / test and free. Tensors must stay alive
 * and untouched until the work completes. */
phx_status phx_comm_allreduce(phx_comm *c, phx_tensor *t, phx_reduce_op op, phx_work **work);
phx_status phx_comm_broadcast(phx_comm *c, phx_tensor *t, int root, phx_work **work);
/* out has size * numel(in) elements: rank r's input lands at offset r*numel(in). */
phx_status phx_comm_allgather(phx_comm *c, const phx_tensor *in, phx_tensor *out, phx_work **work);
/* in has size * numel(out) elements; rank r gets the reduction of block r. */
phx_status phx_comm_reduce_scatter(phx_comm *c, const phx_tensor *in, phx_tensor *out, phx_reduce_op op,
                                   phx_work **work);
phx_status phx_comm_barrier(phx_comm *c, phx_work **work);

/* NULL (a world of one's work) is complete: PHX_OK.
 * Waits for completion up to timeout_s (< 0: the comm's timeout plus 2 s,
 * so the backend's own timeout, which names the peer, is what fails). Returns
 * the collective's status (PHX_EPEER/PHX_ETIMEOUT name the peer when
 * known). Waiting again on a completed work returns the same status. */
phx_status phx_work_wait(phx_work *w, double timeout_s);
/* 1 when complete (successfully or not), 0 while pending. */
int phx_work_test(phx_work *w);
/* Releases the handle; waits first if the work is still pending. */
void phx_work_free(phx_work *w);

/* mp.spawn: runs fn(rank, arg) for rank 0..n-1 in n processes, or in n
 * threads of this process when the backend chosen by PHX_COMM is
 * "threads". Ranks see RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE (threads:
 * through phx_world_from_env) and MASTER_ADDR=127.0.0.1 with a free
 * MASTER_PORT unless set. fn returns 0 on success. PHX_EPEER names the
 * first rank that returned non-zero, exited or died by a signal. */
phx_status phx_spawn(int n, int (*fn)(int rank, void *arg), void *arg);

#ifdef __cplusplus
}
#endif
#endif
