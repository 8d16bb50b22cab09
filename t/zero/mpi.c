/* t/zero/equiv's checks on the world of the environment, for mpirun with
 * PHX_COMM=mpi (t/zero/mpi.sh): in one world of N ranks, for the MLP, the
 * BatchNorm CNN and the GPT, ZeRO-1 and ZeRO-2 against DDP within 1e-6
 * after 10 AdamW steps (decay groups, clipping, a GradScaler skipping an
 * inf step; the MLP's shards uneven at 2, 3 and 4 ranks), ZeRO-1/2 with
 * no_sync accumulation, ZeRO-1 without DDP bitwise equal to a plain
 * AdamW, and in a world of 4 hybrid sharding (2 groups of 2 made by
 * phx_comm_split) against DDP within 1e-6. Rank 0 prints the TAP, each
 * check counting the failures of every rank; every rank's diagnostics are
 * "#" lines. */
#define ZERO_OWN_MAIN 1
#include "t/zero/equiv.c"

/* One check: the job on every rank, its failures summed over the world. */
static int check_job(phx_comm *c, const phx_precision *fp16, const job *jb, const char *what)
{
    int fails = jb->model < 0 ? run_alone(c) : run_job(c, fp16, jb);
    double all = sum_across(c, fails);
    if (phx_comm_rank(c) == 0) ok(all == 0, "mpi, %d ranks: %s", phx_comm_size(c), what);
    return all != 0;
}

int main(void)
{
    (void)rank_main; /* equiv's spawned ranks: a world from the environment here */
    if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("WORLD_SIZE")) {
        printf("1..0 # SKIP run by t/zero/mpi.sh under mpirun (a world from the environment)\n");
        return 0;
    }
    phx_comm *c = tu_comm(-1);
    phx_precision *fp16 = NULL;
    if (!c || phx_precision_new("fp16", &fp16) != PHX_OK) {
        printf("Bail out! a world from the environment and the fp16 policy: %s\n", phx_last_error());
        return 1;
    }
    int rank = phx_comm_rank(c), world = phx_comm_size(c), bad = 0;
    bool hybrid = world == 4;
    if (rank == 0) plan(N_MODELS * 2 + 2 + 1 + (hybrid ? N_MODELS * 2 : 0));
    char what[256];
    for (int m = 0; m < N_MODELS; m++)
        for (int stage = 1; stage <= 2; stage++) {
            job jb = {m, stage, false, false};
            snprintf(what, sizeof what,
                     "%s, ZeRO-%d AdamW (decay groups) + GradScaler skipping an inf step: equal to DDP within 1e-6 "
                     "after %d steps, state of the shard only",
                     model_names[m], stage, STEPS);
            bad += check_job(c, fp16, &jb, what);
        }
    for (int stage = 1; stage <= 2; stage++) {
        job jb = {M_MLP, stage, true, false};
        snprintf(what, sizeof what, "MLP, ZeRO-%d, a micro-batch accumulated under no_sync: equal to DDP within 1e-6",
                 stage);
        bad += check_job(c, fp16, &jb, what);
    }
    job alone = {-1, 1, false, false};
    snprintf(what, sizeof what, "ZeRO-1 without DDP: %d AdamW steps bitwise equal to a plain AdamW", STEPS);
    bad += check_job(c, fp16, &alone, what);
    for (int m = 0; hybrid && m < N_MODELS; m++)
        for (int stage = 1; stage <= 2; stage++) {
            job jb = {m, stage, false, true};
            snprintf(what, sizeof what,
                     "%s, hybrid ZeRO-%d (shard within 2 groups of 2 from phx_comm_split, replicate across): equal "
                     "to DDP within 1e-6 after %d AdamW steps",
                     model_names[m], stage, STEPS);
            bad += check_job(c, fp16, &jb, what);
        }
    phx_precision_free(fp16);
    phx_comm_free(c);
    if (rank == 0) return done_testing();
    return bad ? 1 : 0;
}
