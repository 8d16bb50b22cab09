/* DDP with uneven inputs (phx_ddp_join_begin/end): 3 ranks train on 10, 7
 * and 4 batches; every rank ends with the parameters PyTorch 1.13's
 * `with model.join(divide_by_initial_world_size=...)` gives (1e-6
 * relative; reference data and final parameters from bench/torch/ddp_join.py
 * in t/ref/ddp_join.safetensors), for both settings, on threads and on
 * gloo processes, and nothing hangs. */
#include "t/tap.h"
#include "t/ddp-util.h"

static const int batches[3] = {10, 7, 4};
static const char *const names[4] = {"0.weight", "0.bias", "2.weight", "2.bias"};
static tu_ref ref; /* the reference file */

static int rank_main(int rank, void *arg)
{
    int div = *(int *)arg, fails = 0;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    static const int64_t sizes[] = {5, 8, 3};
    phx_module *model = tu_mlp(sizes, 3, 7 + (uint64_t)rank);
    for (size_t i = 0; i < 4; i++) {
        phx_tensor *init = tu_ref_find(&ref, "init.%s", names[i]);
        if (!init || phx_tensor_copy(phx_param_value(phx_module_param(model, i)), init) != PHX_OK) return 1;
    }
    phx_module *ddp = phx_ddp_new(model, c, NULL);
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.1;
    phx_optimizer *opt = ddp ? phx_sgd_new(ddp, &so) : NULL;
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_status st = opt && loss ? phx_ddp_join_begin(ddp, div) : PHX_ENOMEM;
    for (int i = 0; i < batches[rank] && st == PHX_OK; i++) {
        phx_tensor *x = tu_ref_find(&ref, "x.%d.%d", rank, i), *y = tu_ref_find(&ref, "y.%d.%d", rank, i);
        st = x && y ? tu_step(ddp, opt, loss, x, y) : PHX_ENOTFOUND;
    }
    if (st == PHX_OK) st = phx_ddp_join_end(ddp);
    if (st != PHX_OK) {
        printf("# rank %d: %s\n", rank, phx_last_error());
        fails++;
    }
    double worst = 0;
    for (size_t i = 0; i < 4 && !fails; i++) {
        phx_tensor *want = tu_ref_find(&ref, "div%d.%s", div, names[i]);
        double e = want ? tu_rel(phx_param_value(phx_module_param(model, i)), want) : INFINITY;
        worst = fmax(worst, e);
    }
    if (!fails && !(worst <= 1e-6)) {
        printf("# rank %d: final parameters differ from torch's by %.3g (relative)\n", rank, worst);
        fails++;
    } else if (!fails && rank == 0) {
        printf("# divide_by_initial_world_size=%s: max relative difference to torch %.3g\n", div ? "true" : "false",
               worst);
    }
    fflush(stdout);
    phx_loss_free(loss);
    phx_optimizer_free(opt);
    phx_module_free(ddp);
    phx_module_free(model);
    phx_comm_free(c);
    return fails;
}

int main(void)
{
    const char *top = getenv("top_srcdir");
    char path[1024];
    snprintf(path, sizeof path, "%s/t/ref/ddp_join.safetensors", top ? top : ".");
    if (phx_safetensors_read(path, &ref.names, &ref.t, &ref.n) != PHX_OK) {
        printf("1..0 # SKIP %s\n", phx_last_error());
        return 0;
    }
    plan(4);
    for (int div = 1; div >= 0; div--)
        tu_spawn_both(3, rank_main, &div,
                      "ranks with 10, 7 and 4 batches under join (divide_by_initial_world_size=%s): every rank "
                      "ends with torch's parameters",
                      div ? "true" : "false");
    return done_testing();
}
