/* DDP equivalence: N ranks with batch b each end, after 20 steps, with the
 * parameters of one process trained on the concatenated batch of N*b
 * (1e-6 relative), for N = 1..4, SGD (momentum) and AdamW, one bucket and
 * many small buckets, on the threads backend and on gloo (processes); and
 * every rank's parameters are bitwise equal to every other rank's after
 * every step. Each rank trains the reference itself and reports through
 * its return value; the parent prints the TAP lines. Under mpirun the
 * program is one rank of the world mpirun started (t/ddp/mpi.sh). */
#include "t/tap.h"
#include "t/ddp-util.h"

#define STEPS 20
#define BATCH 6 /* per rank */

static const int64_t sizes[] = {12, 16, 16, 4};
enum { OPT_SGD, OPT_ADAMW };

typedef struct config {
    const char *name;
    int opt;
    size_t first_cap, cap; /* 0: defaults */
    size_t min_buckets;
} config;

static const config configs[] = {
    {"SGD momentum, default caps", OPT_SGD, 0, 0, 1},
    {"AdamW, default caps", OPT_ADAMW, 0, 0, 1},
    {"SGD momentum, 16/128-byte caps", OPT_SGD, 16, 128, 4},
    {"AdamW, 16/128-byte caps", OPT_ADAMW, 16, 128, 4},
};
#define N_CONFIGS (sizeof configs / sizeof configs[0])

static phx_optimizer *make_opt(phx_module *m, int kind)
{
    if (kind == OPT_SGD) {
        phx_sgd_opts o = PHX_SGD_OPTS_INIT;
        o.lr = 0.05;
        o.momentum = 0.9;
        return phx_sgd_new(m, &o);
    }
    phx_adam_opts o = PHX_ADAMW_OPTS_INIT;
    o.lr = 0.01;
    return phx_adam_new(m, &o);
}

/* Returns the number of failed checks on this rank. */
static int run_config(phx_comm *c, const config *cf)
{
    int rank = phx_comm_rank(c), world = phx_comm_size(c), fails = 0;
    /* Ranks start from different weights: the broadcast must fix that. */
    phx_module *model = tu_mlp(sizes, 4, 1000 + (uint64_t)rank);
    phx_module *ref = tu_mlp(sizes, 4, 1000);
    phx_ddp_opts o = PHX_DDP_OPTS_INIT;
    o.first_bucket_bytes = cf->first_cap;
    o.bucket_bytes = cf->cap;
    phx_module *ddp = phx_ddp_new(model, c, &o);
    if (!ddp) {
        printf("# rank %d: phx_ddp_new: %s\n", rank, phx_last_error());
        return 1;
    }
    if (phx_ddp_num_buckets(ddp) < cf->min_buckets) {
        printf("# rank %d: %s: %zu buckets, expected >= %zu\n", rank, cf->name, phx_ddp_num_buckets(ddp),
               cf->min_buckets);
        fails++;
    }
    tu_side d = {ddp, make_opt(ddp, cf->opt), phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN), tu_new2(BATCH, sizes[0]),
                 tu_new2(BATCH, sizes[3])};
    tu_side r = {ref, make_opt(ref, cf->opt), phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN),
                 tu_new2((int64_t)BATCH * world, sizes[0]), tu_new2((int64_t)BATCH * world, sizes[3])};
    double worst = 0;
    for (int s = 0; s < STEPS && fails == 0; s++) {
        if (tu_step_both(s, rank, &d, &r) != PHX_OK) {
            printf("# rank %d: step %d: %s\n", rank, s, phx_last_error());
            fails++;
            break;
        }
        if (!tu_same_bits_across(c, ddp)) {
            printf("# rank %d: %s: parameters differ across ranks after step %d\n", rank, cf->name, s);
            fails++;
        }
        double e = tu_max_rel(ddp, ref);
        worst = e > worst ? e : worst;
    }
    double e = tu_max_rel(ddp, ref);
    if (!(e <= 1e-6)) {
        printf("# rank %d of %d: %s: after %d steps max relative difference to one process on the "
               "whole batch is %.3g (> 1e-6)\n",
               rank, world, cf->name, STEPS, e);
        fails++;
    } else if (rank == 0) {
        printf("# world %d, %s: %zu bucket(s), max relative difference %.3g (worst step %.3g)\n", world, cf->name,
               phx_ddp_num_buckets(ddp), e, worst);
    }
    fflush(stdout);
    tu_side_free(&d); /* the DDP wrapper before the model it wraps */
    tu_side_free(&r);
    phx_module_free(model);
    return fails;
}

static int rank_main(int rank, void *arg)
{
    (void)arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    int fails = 0;
    for (size_t k = 0; k < N_CONFIGS; k++) fails += run_config(c, &configs[k]);
    phx_comm_free(c);
    return fails ? 1 : 0;
}

int main(void)
{
    /* Under mpirun: one world from the environment (PHX_COMM names the
     * backend); the exit status says, rank 0 prints the "# world" lines. */
    if (getenv("OMPI_COMM_WORLD_RANK")) return rank_main(atoi(getenv("OMPI_COMM_WORLD_RANK")), NULL);
    const char *backends[] = {"threads", "gloo"};
    plan(8);
    for (int b = 0; b < 2; b++) {
#ifndef HAVE_GLOO
        if (b == 1) {
            skip(4, "built without Gloo");
            continue;
        }
#endif
        for (int n = 1; n <= 4; n++) {
            phx_status st = tu_spawn(backends[b], n, rank_main, NULL);
            ok(st == PHX_OK,
               "%s, %d rank(s): SGD and AdamW, 1 and many buckets: equal to one process on "
               "the %d-row batch, bitwise equal across ranks",
               backends[b], n, n * BATCH);
            if (st != PHX_OK) diag("%s", phx_last_error());
        }
    }
    return done_testing();
}
