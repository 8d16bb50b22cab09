/* Tests of phx_world_from_env: the launchers' variables, cleared and set
 * as one environment per case. */
#ifndef PHX_T_ENV_UTIL_H
#define PHX_T_ENV_UTIL_H
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every variable phx_world_from_env reads (torchrun, Open MPI, Slurm). */
static const char *const tu_env_vars[] = {"RANK",
                                          "WORLD_SIZE",
                                          "LOCAL_RANK",
                                          "LOCAL_WORLD_SIZE",
                                          "MASTER_ADDR",
                                          "MASTER_PORT",
                                          "OMPI_COMM_WORLD_RANK",
                                          "OMPI_COMM_WORLD_SIZE",
                                          "OMPI_COMM_WORLD_LOCAL_RANK",
                                          "OMPI_COMM_WORLD_LOCAL_SIZE",
                                          "SLURM_PROCID",
                                          "SLURM_NTASKS",
                                          "SLURM_LOCALID",
                                          "SLURM_TASKS_PER_NODE",
                                          "SLURM_NODEID",
                                          "SLURM_JOB_ID",
                                          "SLURM_STEP_ID",
                                          "SLURM_CPUS_PER_TASK",
                                          "SLURM_STEP_NODELIST",
                                          "SLURM_JOB_NODELIST",
                                          "SLURM_NODELIST",
                                          NULL};

static inline void tu_env_clear(void)
{
    for (int i = 0; tu_env_vars[i]; i++) unsetenv(tu_env_vars[i]);
}

/* Sets "NAME=value" pairs (NULL-terminated), after clearing all. */
static inline void tu_env(const char *first, ...)
{
    tu_env_clear();
    va_list ap;
    va_start(ap, first);
    for (const char *kv = first; kv; kv = va_arg(ap, const char *)) {
        char name[64];
        const char *eq = strchr(kv, '=');
        snprintf(name, sizeof name, "%.*s", (int)(eq - kv), kv);
        setenv(name, eq + 1, 1);
    }
    va_end(ap);
}
#endif
