/* phx_world_from_env under Slurm: MASTER_ADDR from the step's first node
 * when unset, host lists in their several forms, and a batch script (more
 * than one task but no SLURM_PROCID) told to use srun at once instead of
 * running as a world of one or waiting for ranks nobody started. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"
#include "t/env-util.h"

/* A task of a 4-task step on two nodes, whose node list is `list`. */
static const char *first_host(const char *var, const char *list)
{
    static phx_world w = PHX_WORLD_INIT;
    char kv[256];
    snprintf(kv, sizeof kv, "%s=%s", var, list);
    tu_env("SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_LOCALID=1",
           "SLURM_TASKS_PER_NODE=2(x2)", "SLURM_NODEID=1", kv, NULL);
    if (phx_world_from_env(&w) != PHX_OK) return phx_last_error();
    return w.master_addr;
}

int main(void)
{
    plan(20);
    /* First, before anything resolves the thread budget: srun -c 1 with
     * one task per node gets 1 thread, not cores / 1. */
    tu_env("SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0",
           "SLURM_TASKS_PER_NODE=1(x2)", "SLURM_NODEID=0", "SLURM_CPUS_PER_TASK=1", NULL);
    is_int(phx_num_threads(), 1, "srun -c 1: 1 thread (SLURM_CPUS_PER_TASK), not cores / tasks on the node");
    phx_world w = PHX_WORLD_INIT;
    is_str(first_host("SLURM_STEP_NODELIST", "gpu[07-08]"), "gpu07", "the step's first node, zero padding kept");
    phx_status st = phx_world_from_env(&w);
    ok(st == PHX_OK && w.rank == 3 && w.size == 4 && w.local_rank == 1 && w.local_size == 2 && w.master_port == 29500,
       "... with the task's rank 3 of 4, local 1 of 2, port 29500 (%d)", w.master_port);
    is_str(first_host("SLURM_NODELIST", "node1,node2"), "node1", "a plain list");
    is_str(first_host("SLURM_JOB_NODELIST", "a[3,5-6],b1"), "a3", "a range list with single numbers");
    is_str(first_host("SLURM_NODELIST", "r[1-2]-n[01-04]"), "r1-n01", "two ranges in one name");
    is_str(first_host("SLURM_NODELIST", "login-node"), "login-node", "a single host");
    like(first_host("SLURM_NODELIST", "node[x1-2]"), "SLURM_NODELIST='node[x1-2]': expected a Slurm host list",
         "an unreadable list names the variable");

    tu_env("SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_TASKS_PER_NODE=1(x2)",
           "SLURM_NODEID=0", "SLURM_STEP_NODELIST=gpu[07-08]", "SLURM_NODELIST=cpu[1-9]", "MASTER_ADDR=10.1.2.3", NULL);
    ok(phx_world_from_env(&w) == PHX_OK && !strcmp(w.master_addr, "10.1.2.3"), "MASTER_ADDR wins over the node list");
    setenv("SLURM_STEP_NODELIST", "gpu[07-08]", 1);
    unsetenv("MASTER_ADDR");
    ok(phx_world_from_env(&w) == PHX_OK && !strcmp(w.master_addr, "gpu07"), "the step's list wins over the job's (%s)",
       w.master_addr);

    tu_env("SLURM_JOB_ID=77", "SLURM_NTASKS=2", "SLURM_NODELIST=gpu[07-08]", NULL);
    is_int(phx_world_from_env(&w), PHX_EINVAL, "a batch script with SLURM_NTASKS=2 and no SLURM_PROCID: an error");
    like(phx_last_error(),
         "SLURM_NTASKS=2 in job 77 but no SLURM_STEP_ID: this is the batch script (or an salloc shell), not one "
         "of the job's tasks; start the ranks with srun",
         "... telling to start the ranks with srun");
    /* what Slurm 22.05's sbatch -n 2 gives the batch script (seen in t/slurm/slurm.sh) */
    tu_env("SLURM_JOB_ID=78", "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0", "SLURM_NTASKS=2",
           "SLURM_TASKS_PER_NODE=2", "SLURM_JOB_NODELIST=gpu07", NULL);
    is_int(phx_world_from_env(&w), PHX_EINVAL, "the batch script with SLURM_PROCID=0 but no SLURM_STEP_ID: an error");
    like(phx_last_error(), "start the ranks with srun", "... naming srun");
    tu_env("SLURM_JOB_ID=78", "SLURM_STEP_ID=4294967291", "SLURM_PROCID=0", "SLURM_NTASKS=2", NULL);
    is_int(phx_world_from_env(&w), PHX_EINVAL, "the batch step's own id (0xfffffffb) is not a task's step");
    tu_env("SLURM_JOB_ID=77", "SLURM_NTASKS=1", "SLURM_NODELIST=gpu07", NULL);
    ok(phx_world_from_env(&w) == PHX_OK && w.size == 1 && !strcmp(w.master_addr, "127.0.0.1"),
       "a one-task batch script is a world of one on 127.0.0.1");
    tu_env("SLURM_JOB_ID=77", "SLURM_NTASKS=2", "RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=h", NULL);
    ok(phx_world_from_env(&w) == PHX_OK && w.rank == 1 && w.size == 2, "phxrun inside a batch script: RANK wins");
    tu_env("SLURM_STEP_ID=3", "SLURM_PROCID=1", "SLURM_NTASKS=4", "SLURM_LOCALID=1", "SLURM_TASKS_PER_NODE=4",
           "SLURM_NODEID=0", NULL);
    ok(phx_world_from_env(&w) == PHX_OK && !strcmp(w.master_addr, "127.0.0.1") && w.rank == 1,
       "a task without a node list: 127.0.0.1");
    /* a count past int was truncated: 4294967298 read as 2, silently */
    tu_env("SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_TASKS_PER_NODE=4294967298",
           NULL);
    is_int(phx_world_from_env(&w), PHX_EINVAL, "SLURM_TASKS_PER_NODE=4294967298: an error");
    like(phx_last_error(), "SLURM_TASKS_PER_NODE='4294967298'", "... naming the variable");
    return done_testing();
}
