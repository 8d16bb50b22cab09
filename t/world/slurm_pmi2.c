/* A Slurm task started with PMI-2 (srun --mpi=pmi2, MpiDefault=pmi2)
 * while the Open MPI the mpi backend is built on has no PMI-2 support
 * (Debian's): the backend choice leaves mpi out instead of letting
 * MPI_Init abort the job. With PHX_COMM unset the world starts on another
 * backend; PHX_COMM=mpi fails at once naming srun --mpi=pmix and
 * PHX_COMM=gloo; "mpi,threads" takes threads. The same environment
 * without the PMI-2 variables is not touched. A one-task step, so no
 * store is needed. t/slurm/slurm.sh runs the real srun --mpi=pmi2. */
#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"
#include "t/env-util.h"

/* A task of step 0 of job 7, one task, with the given MPI wire-up. */
static void task_env(const char *mpi_type, const char *pmi_rank, const char *pmi_fd)
{
    tu_env("SLURM_PROCID=0", "SLURM_NTASKS=1", "SLURM_LOCALID=0", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0",
           "SLURM_TASKS_PER_NODE=1", "SLURM_STEP_NODELIST=localhost", NULL);
    unsetenv("SLURM_MPI_TYPE");
    unsetenv("PMI_RANK");
    unsetenv("PMI_SIZE");
    unsetenv("PMI_FD");
    unsetenv("PMIX_RANK");
    if (mpi_type) setenv("SLURM_MPI_TYPE", mpi_type, 1);
    if (pmi_rank) setenv("PMI_RANK", pmi_rank, 1), setenv("PMI_SIZE", "1", 1);
    if (pmi_fd) setenv("PMI_FD", pmi_fd, 1);
}

/* phx_comm_init with PHX_COMM = sel (NULL: unset); the backend's name
 * into name ("" on failure). */
static phx_status start(const char *sel, char *name, size_t len)
{
    if (sel)
        setenv("PHX_COMM", sel, 1);
    else
        unsetenv("PHX_COMM");
    phx_comm *c = (phx_comm *)&c; /* not NULL: a failure must leave it */
    phx_status st = phx_comm_init(NULL, &c);
    snprintf(name, len, "%s", st == PHX_OK ? phx_comm_backend(c) : "");
    if (st == PHX_OK) phx_comm_free(c);
    return st;
}

int main(void)
{
#ifdef PX_MPI_PMI2
    skip_all("this Open MPI has PMI-2 support: srun --mpi=pmi2 may use the mpi backend");
#endif
    plan(9);
    char name[64], err[1024];
    setenv("PHX_TIMEOUT", "5", 1);

    task_env("pmi2", "0", "9");
    phx_status st = start("mpi", name, sizeof name);
    snprintf(err, sizeof err, "%s", phx_last_error());
    is_int(st, PHX_EUNSUPPORTED, "srun --mpi=pmi2, PHX_COMM=mpi: PHX_EUNSUPPORTED at once");
    like(err, "srun --mpi=pmix", "the message names srun --mpi=pmix");
    like(err, "PHX_COMM=gloo", "and PHX_COMM=gloo");
    like(err, "PMI-2", "and says why (no PMI-2 support)");

    st = start(NULL, name, sizeof name);
    ok(st == PHX_OK && strcmp(name, "mpi") != 0, "PHX_COMM unset: the world starts, not on mpi (%s, '%s')",
       phx_status_name(st), name);
    if (st) diag("%s", phx_last_error());

    st = start("mpi,threads", name, sizeof name);
    ok(st == PHX_OK && strcmp(name, "threads") == 0, "PHX_COMM=mpi,threads: threads ('%s')", name);
    if (st) diag("%s", phx_last_error());

    /* PMI-2 seen from its variables alone (no SLURM_MPI_TYPE) */
    task_env(NULL, "0", "9");
    st = start("mpi", name, sizeof name);
    ok(st == PHX_EUNSUPPORTED && strstr(phx_last_error(), "--mpi=pmix"),
       "PMI_FD and PMI_RANK without SLURM_MPI_TYPE: refused the same way (%s)", phx_status_name(st));

    /* the same task with PMIx (srun --mpi=pmix) or no MPI at all: untouched */
    task_env("pmix", NULL, NULL);
    setenv("PMIX_RANK", "0", 1);
    st = start("threads", name, sizeof name);
    ok(st == PHX_OK && strcmp(name, "threads") == 0, "srun --mpi=pmix: a selection without mpi is kept ('%s')", name);
    task_env("none", NULL, NULL);
    st = start("mpi", name, sizeof name);
    ok(!strstr(st ? phx_last_error() : "", "--mpi=pmix"),
       "srun --mpi=none, PHX_COMM=mpi: not the PMI-2 refusal (%s: %.80s)", phx_status_name(st),
       st ? phx_last_error() : "");
    return done_testing();
}
