/* phx_world_from_env (torchrun, Open MPI, Slurm variables; errors naming
 * the variable and value; the spawned thread's rank wins) and the
 * communicator's argument checks. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"
#include "t/env-util.h"

static phx_world sentinel(void)
{
    phx_world w = PHX_WORLD_INIT;
    memset(&w, 0x5a, sizeof w);
    w.struct_size = sizeof w;
    return w;
}

/* Expects PHX_EINVAL mentioning needle, and *out untouched. */
static void bad(const char *needle, const char *what)
{
    phx_world w = sentinel(), s = sentinel();
    phx_status st = phx_world_from_env(&w);
    is_int(st, PHX_EINVAL, "%s: PHX_EINVAL", what);
    like(phx_last_error(), needle, "%s: message names it", what);
    ok(memcmp(&w, &s, sizeof w) == 0, "%s: the output is untouched", what);
}

static int thread_rank(int rank, void *arg)
{
    int *seen = arg;
    phx_world w = PHX_WORLD_INIT;
    if (phx_world_from_env(&w)) return 1;
    seen[rank] = w.rank * 100 + w.size * 10 + w.local_rank;
    phx_comm *c;
    if (phx_comm_init(NULL, &c)) return 2;
    int r = phx_comm_rank(c) == rank && phx_comm_size(c) == 3 && !strcmp(phx_comm_backend(c), "threads") ? 0 : 3;
    phx_comm_free(c);
    return r;
}

int main(void)
{
    phx_world w = PHX_WORLD_INIT;
    plan(68);

    tu_env(NULL);
    is_int(phx_world_from_env(&w), PHX_OK, "nothing set: ok");
    ok(w.rank == 0 && w.size == 1 && w.local_rank == 0 && w.local_size == 1, "nothing set: a world of one");
    is_str(w.master_addr, "127.0.0.1", "default MASTER_ADDR");
    is_int(w.master_port, 29500, "default MASTER_PORT");

    tu_env("RANK=3", "WORLD_SIZE=8", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=node7", "MASTER_PORT=1234",
           NULL);
    is_int(phx_world_from_env(&w), PHX_OK, "torchrun variables");
    ok(w.rank == 3 && w.size == 8 && w.local_rank == 1 && w.local_size == 2, "torchrun: 3/8, local 1/2");
    ok(!strcmp(w.master_addr, "node7") && w.master_port == 1234, "torchrun: master node7:1234");

    tu_env("RANK=2", "WORLD_SIZE=4", NULL);
    phx_world_from_env(&w);
    ok(w.local_rank == 2 && w.local_size == 4, "no LOCAL_*: the node is the world");

    tu_env("OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_SIZE=6", "OMPI_COMM_WORLD_LOCAL_RANK=2",
           "OMPI_COMM_WORLD_LOCAL_SIZE=3", NULL);
    is_int(phx_world_from_env(&w), PHX_OK, "Open MPI variables");
    ok(w.rank == 5 && w.size == 6 && w.local_rank == 2 && w.local_size == 3, "Open MPI: 5/6, local 2/3");

    tu_env("RANK=1", "WORLD_SIZE=2", "OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_SIZE=6", NULL);
    phx_world_from_env(&w);
    ok(w.rank == 1 && w.size == 2, "torchrun's variables win over Open MPI's");

    tu_env("SLURM_STEP_ID=0", "SLURM_PROCID=4", "SLURM_NTASKS=7", "SLURM_LOCALID=1", "SLURM_TASKS_PER_NODE=3(x2),1",
           "SLURM_NODEID=1", NULL);
    is_int(phx_world_from_env(&w), PHX_OK, "Slurm variables");
    ok(w.rank == 4 && w.size == 7 && w.local_rank == 1 && w.local_size == 3,
       "Slurm: 4/7, local 1/3 (node 1 of 3(x2),1)");
    tu_env("SLURM_STEP_ID=0", "SLURM_PROCID=6", "SLURM_NTASKS=7", "SLURM_LOCALID=0", "SLURM_TASKS_PER_NODE=3(x2),1",
           "SLURM_NODEID=2", NULL);
    phx_world_from_env(&w);
    is_int(w.local_size, 1, "Slurm: the third node has 1 task");

    tu_env("RANK=abc", "WORLD_SIZE=2", NULL);
    bad("RANK='abc'", "non-numeric RANK");
    tu_env("RANK=2", "WORLD_SIZE=2", NULL);
    bad("RANK=2 is not less than WORLD_SIZE=2", "RANK >= WORLD_SIZE");
    tu_env("RANK=0", "WORLD_SIZE=0", NULL);
    bad("WORLD_SIZE='0'", "WORLD_SIZE 0");
    tu_env("RANK=1", NULL);
    bad("RANK is set ('1') but WORLD_SIZE is not", "RANK without WORLD_SIZE");
    tu_env("RANK=0", "WORLD_SIZE=2", "MASTER_PORT=70000", NULL);
    bad("MASTER_PORT='70000'", "MASTER_PORT out of range");
    tu_env("RANK=0", "WORLD_SIZE=2", "MASTER_PORT=", NULL);
    bad("MASTER_PORT=''", "empty MASTER_PORT");
    tu_env("RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2", NULL);
    bad("LOCAL_RANK=2 is not less than the local world size 2", "LOCAL_RANK >= LOCAL_WORLD_SIZE");
    tu_env("OMPI_COMM_WORLD_RANK=-1", "OMPI_COMM_WORLD_SIZE=2", NULL);
    bad("OMPI_COMM_WORLD_RANK='-1'", "negative Open MPI rank");
    tu_env("SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_TASKS_PER_NODE=2(y3)", NULL);
    bad("SLURM_TASKS_PER_NODE='2(y3)'", "malformed SLURM_TASKS_PER_NODE");
    is_int(phx_world_from_env(NULL), PHX_EINVAL, "NULL out is PHX_EINVAL");

    /* inside phx_spawn threads the thread's rank wins over RANK */
    tu_env("RANK=7", "WORLD_SIZE=9", NULL);
    setenv("PHX_COMM", "threads", 1);
    int seen[3] = {-1, -1, -1};
    phx_status st = phx_spawn(3, thread_rank, seen);
    is_int(st, PHX_OK, "phx_spawn threads: every rank joined a threads communicator");
    if (st) diag("%s", phx_last_error());
    ok(seen[0] == 30 && seen[1] == 131 && seen[2] == 232,
       "phx_spawn threads: each thread sees its own rank "
       "(%d %d %d)",
       seen[0], seen[1], seen[2]);
    tu_env_clear();

    /* communicator options and collective arguments (a world of one) */
    phx_comm_opts o = PHX_COMM_OPTS_INIT;
    o.rank = 2;
    o.size = 2;
    phx_comm *c = NULL;
    is_int(phx_comm_init(&o, &c), PHX_EINVAL, "opts rank 2 of 2 is PHX_EINVAL");
    like(phx_last_error(), "rank 2, size 2", "... naming both");
    o = phx_comm_opts_default();
    o.backend = "no-such-backend";
    st = phx_comm_init(&o, &c);
    ok(st == PHX_ENOTFOUND && c == NULL, "an unknown backend is PHX_ENOTFOUND");
    like(phx_last_error(), "no-such-backend", "... naming it");
    o.backend = "threads";
    o.store = NULL;
    is_int(phx_comm_init(&o, &c), PHX_OK, "a world of one on threads");
    is_str(phx_comm_backend(c), "threads", "... backend threads");

    int64_t four = 4, eight = 8;
    phx_tensor *f4 = phx_tensor_zeros(PHX_F32, 1, &four, phx_cpu()),
               *i4 = phx_tensor_zeros(PHX_I32, 1, &four, phx_cpu());
    phx_tensor *f8 = phx_tensor_zeros(PHX_F32, 1, &eight, phx_cpu());
    is_int(phx_comm_allreduce(c, NULL, PHX_SUM, NULL), PHX_EINVAL, "allreduce of NULL is PHX_EINVAL");
    is_int(phx_comm_allreduce(c, f4, (phx_reduce_op)9, NULL), PHX_EINVAL, "reduce op 9 is PHX_EINVAL");
    like(phx_last_error(), "reduce op 9", "... naming it");
    is_int(phx_comm_broadcast(c, f4, 1, NULL), PHX_EINVAL, "broadcast root 1 in a world of 1 is PHX_EINVAL");
    like(phx_last_error(), "root 1", "... naming the root");
    is_int(phx_comm_allgather(c, f4, i4, NULL), PHX_EINVAL, "allgather f32 into i32 is PHX_EINVAL");
    like(phx_last_error(), "expected the same dtype", "... naming the dtypes");
    is_int(phx_comm_allgather(c, f4, f8, NULL), PHX_EINVAL, "allgather 4 into 8 in a world of 1 is PHX_EINVAL");
    like(phx_last_error(), "has 8 elements, expected 1 x 4", "... naming the counts");
    is_int(phx_comm_reduce_scatter(c, f4, f8, PHX_SUM, NULL), PHX_EINVAL, "reduce_scatter 4 into 8 is PHX_EINVAL");
    phx_tensor *v = phx_tensor_view(f8, 2, 1, &four);
    is_int(phx_comm_reduce_scatter(c, f8, v, PHX_SUM, NULL), PHX_EINVAL, "overlapping reduce_scatter is PHX_EINVAL");
    phx_work *wk = (phx_work *)1;
    is_int(phx_comm_allreduce(c, f4, PHX_SUM, &wk), PHX_OK, "async allreduce in a world of one");
    is_int(phx_work_wait(wk, -1), PHX_OK, "... waits ok");
    ok(phx_work_test(wk) == 1, "... and tests complete");
    is_int(phx_work_wait(wk, -1), PHX_OK, "waiting again returns the same status");
    phx_work_free(wk);
    phx_work_free(NULL);
    phx_comm_free(NULL);
    is_int(phx_work_wait(NULL, 1), PHX_OK, "a NULL work (a world of one's) is complete");
    phx_tensor_free(v);
    phx_tensor_free(f4);
    phx_tensor_free(i4);
    phx_tensor_free(f8);
    phx_comm_free(c);
    is_int(phx_spawn(0, thread_rank, NULL), PHX_EINVAL, "phx_spawn of 0 ranks is PHX_EINVAL");
    is_int(phx_spawn(2, NULL, NULL), PHX_EINVAL, "phx_spawn without fn is PHX_EINVAL");
    return done_testing();
}
