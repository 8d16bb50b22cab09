/* World internals (px_ prefix, not exported): the launcher environment as
 * src/world reads it, and the world phx_spawn gives its threads. Every
 * reader of LOCAL_RANK / LOCAL_WORLD_SIZE and their Open MPI and Slurm
 * counterparts asks here, so they are parsed one way, strictly. */
#ifndef PHX_CORE_WORLD_IMPL_H
#define PHX_CORE_WORLD_IMPL_H

#include <stddef.h>
#include "phalanx/comm.h"

/* The calling thread's rank on this node and the ranks on this node:
 * phx_spawn's thread world inside one of its threads, else the launcher's
 * variables exactly as phx_world_from_env reads them (torchrun's, else
 * Open MPI's, else Slurm's, else 0 of 1). PHX_EINVAL with phx_last_error
 * naming the variable and its value when one is invalid; the outputs are
 * then 0 and 1. Either output may be NULL. */
phx_status px_world_local(int *local_rank, int *local_size);

/* 1 when the launcher's world has ranks on other nodes (its size exceeds
 * the local size), else 0 (also inside phx_spawn's threads). */
int px_world_spans_nodes(void);

/* The CPUs Slurm gave this task (SLURM_CPUS_PER_TASK, srun -c) when this
 * process is a task of a Slurm job step and no torchrun or Open MPI
 * launcher variables are set; 0 otherwise (or when the value is not a
 * number in 1..4096). */
int px_world_slurm_cpus(void);

/* Why the mpi backend cannot start under this launcher, as a sentence;
 * NULL when nothing stands in its way that can be seen before MPI_Init.
 * Today: a Slurm task started with PMI-2 (srun --mpi=pmi2, MpiDefault=pmi2)
 * while the Open MPI found at configure time has no PMI-2 support
 * (PX_MPI_PMI2 unset), where MPI_Init aborts the whole job. */
const char *px_world_mpi_unusable(void);

/* The comm backend selection to use for sel (PHX_COMM or the options'
 * backend, plugin.h's syntax) under this launcher: sel itself, or, when
 * px_world_mpi_unusable says why, one that leaves mpi out: unset becomes
 * "^mpi" (an info log line says why), "^a" becomes "^a,mpi" and "mpi,b"
 * becomes "b", written to buf (len bytes). A selection of mpi alone is
 * PHX_EUNSUPPORTED at once, phx_last_error naming srun --mpi=pmix and
 * PHX_COMM=gloo. *out points at sel, buf or a constant. */
phx_status px_world_comm_selection(const char *sel, char *buf, size_t len, const char **out);

/* MASTER_ADDR (default 127.0.0.1) and MASTER_PORT (default 29500), checked
 * as phx_world_from_env does. */
phx_status px_env_master(char *addr, size_t len, int *port);

/* World set by phx_spawn for each of its threads (rank, size and the
 * one in-process store they share). active is 0 outside such threads. */
typedef struct px_spawn_tls {
    int active;
    int rank, size;
    phx_store *store;
} px_spawn_tls;

/* The calling thread's spawn world (never NULL; .active 0 when none). */
const px_spawn_tls *px_spawn_current(void);

/* A spawned world's failed thread sets PHX_KIT_ABORT_KEY
 * (phalanx/plugin/kit.h) in its store; backends waiting on peers give up
 * when they see it. */

#endif
