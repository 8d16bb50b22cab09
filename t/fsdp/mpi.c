/* t/fsdp/equiv's checks on the world of the environment, for mpirun with
 * PHX_COMM=mpi (t/fsdp/mpi.sh) or phxrun across network namespaces with
 * PHX_COMM=gloo (t/fsdp/hybrid_nodes.sh): in one world of N ranks, for the MLP, the
 * BatchNorm CNN, the GPT (a unit per block) and the forward-only MLP,
 * FSDP FULL_SHARD (with and without prefetch) and SHARD_GRAD_OP with a
 * ZeRO-3 AdamW (decay groups, clipping, a GradScaler skipping an inf
 * step, uneven shards) against DDP within 1e-6 after 10 steps, and in a
 * world of 4 hybrid sharding (2 groups of 2 from phx_comm_split). Rank 0
 * prints the TAP, each check counting the failures of every rank; every
 * rank's diagnostics are "#" lines. */
#define FSDP_OWN_MAIN 1
#include "t/fsdp/equiv.c"

int main(void)
{
    (void)rank_main; /* equiv's spawned ranks: a world from the environment here */
    if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("WORLD_SIZE")) {
        printf("1..0 # SKIP run by t/fsdp/mpi.sh under mpirun (a world from the environment)\n");
        return 0;
    }
    phx_comm *c = tu_comm(-1);
    phx_precision *fp16 = NULL;
    if (!c || phx_precision_new("fp16", &fp16) != PHX_OK) {
        printf("Bail out! a world from the environment and the fp16 policy: %s\n", phx_last_error());
        return 1;
    }
    static const job modes[] = {
        {0, PHX_FSDP_FULL_SHARD, false, false},
        {0, PHX_FSDP_FULL_SHARD, true, false},
        {0, PHX_FSDP_SHARD_GRAD_OP, false, false},
    };
    const int n_modes = (int)(sizeof modes / sizeof modes[0]);
    int rank = phx_comm_rank(c), world = phx_comm_size(c), bad = 0;
    bool hybrid = world == 4;
    if (rank == 0) plan(N_MODELS * n_modes + (hybrid ? N_MODELS : 0));
    for (int m = 0; m < N_MODELS; m++)
        for (int k = 0; k < n_modes + (hybrid ? 1 : 0); k++) {
            job jb = k < n_modes ? modes[k] : (job){0, PHX_FSDP_FULL_SHARD, false, true};
            jb.model = m;
            int fails = run_job(c, fp16, &jb);
            double all = sum_across(c, fails);
            if (rank == 0)
                ok(all == 0,
                   "%s, %d ranks: %s, FSDP %s + ZeRO-3 AdamW + GradScaler skipping an inf step: equal to DDP within "
                   "1e-6 after %d steps",
                   phx_comm_backend(c), world, model_names[m], job_name(&jb), STEPS);
            bad += all != 0;
        }
    phx_precision_free(fp16);
    phx_comm_free(c);
    if (rank == 0) return done_testing();
    return bad ? 1 : 0;
}
