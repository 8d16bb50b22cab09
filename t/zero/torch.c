/* ZeRO-1 against torch 1.13's ZeroRedundancyOptimizer (AdamW, two weight
 * decay groups) under DDP on 2 ranks: t/ref/zero1.safetensors, made by
 * bench/torch/zero1.py, holds the start, every rank's batches, the final
 * parameters and the consolidated optimizer state. Here both ranks start
 * from other weights (DDP broadcasts rank 0's, loaded from the file), train
 * the same 10 steps, and must end within 1e-6 of torch's parameters, with
 * a consolidated state within 1e-6 of torch's; on threads and gloo. */
#include "t/tap.h"
#include "t/ddp-util.h"
#include "t/gpt-util.h"

#define STEPS 10
static const int64_t sizes[] = {5, 8, 3};
static gu_file ref;

static phx_optimizer *make_adamw(phx_module *m, void *arg)
{
    (void)arg;
    phx_adam_opts o = PHX_ADAMW_OPTS_INIT;
    o.lr = 1e-2;
    o.weight_decay = 0.1;
    phx_optimizer *opt = phx_adam_new(m, &o);
    if (opt && phx_adam_decay_matrices_only(opt, NULL) != PHX_OK) {
        phx_optimizer_free(opt);
        return NULL;
    }
    return opt;
}

static int rank_main(int rank, void *arg)
{
    (void)arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    int fails = 0;
    phx_module *m = tu_mlp(sizes, 3, 50 + (uint64_t)rank);
    if (rank == 0 && gu_load(&ref, m, "init.") < 0) fails++;
    phx_module *ddp = phx_ddp_new(m, c, NULL);
    phx_optimizer *z = ddp ? phx_zero_optimizer_new(ddp, c, make_adamw, NULL, NULL) : NULL;
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    if (!z) {
        printf("# rank %d: setup: %s\n", rank, phx_last_error());
        fails++;
    }
    for (int s = 0; s < STEPS && !fails; s++) {
        phx_status st = tu_step(ddp, z, loss, gu_get(&ref, "x.%d.%d", rank, s), gu_get(&ref, "y.%d.%d", rank, s));
        if (st != PHX_OK) {
            printf("# rank %d: step %d: %s\n", rank, s, phx_last_error());
            fails++;
        }
    }
    double ep = 0, es = 0;
    phx_status cs = fails ? PHX_EINVAL : phx_zero_consolidate(z, 0);
    if (!fails) {
        for (size_t i = 0; i < phx_module_num_params(m); i++)
            ep = fmax(ep,
                      gu_max_rel(phx_param_value(phx_module_param(m, i)),
                                 gu_get(&ref, "final.%s", phx_module_param_name(m, i))));
        const char **names;
        phx_tensor **ts;
        size_t n = rank == 0 ? phx_optimizer_state(z, &names, &ts) : 0;
        for (size_t i = 0; i < n; i++) es = fmax(es, gu_max_rel(ts[i], gu_get(&ref, "state.%s", names[i])));
        if (rank == 0 && n != 8) es = INFINITY;
    }
    if (cs != PHX_OK || !(ep <= 1e-6) || !(es <= 1e-6)) {
        printf("# rank %d: parameters %.3g, state %.3g from torch's (bound 1e-6)%s%s\n", rank, ep, es,
               cs != PHX_OK ? ": " : "", cs != PHX_OK ? phx_last_error() : "");
        fails++;
    } else if (rank == 0) {
        printf("# parameters within %.3g of torch's, consolidated state within %.3g\n", ep, es);
    }
    fflush(stdout);
    phx_loss_free(loss);
    phx_optimizer_free(z);
    phx_module_free(ddp);
    phx_module_free(m);
    phx_comm_free(c);
    return fails ? 1 : 0;
}

int main(void)
{
    plan(2);
    if (!gu_read(&ref, "zero1.safetensors")) {
        skip(2, "no reference t/ref/zero1.safetensors (bench/torch/zero1.py makes it)");
        return done_testing();
    }
    tu_spawn_both(2, rank_main, NULL,
                  "ZeRO-1 AdamW (decay groups) under DDP: parameters and consolidated state within 1e-6 of torch "
                  "1.13's ZeroRedundancyOptimizer after %d steps",
                  STEPS);
    gu_free(&ref);
    return done_testing();
}
