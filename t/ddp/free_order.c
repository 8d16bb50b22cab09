/* A wrapper holds a reference to its model: DataParallel and DDP keep
 * training after the program freed the model first, and freeing them in
 * either order releases everything once (the sanitizer build and valgrind
 * see any use after free or leak). */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "phalanx/phalanx.h"
#include "t/tap.h"
#include "t/ddp-util.h"

/* One SGD step of net on a fixed batch; returns the loss (NAN on error). */
static float step(phx_module *net, phx_optimizer *opt)
{
    int64_t xs[2] = {8, 6}, ys[2] = {8, 3};
    phx_tensor *x = phx_tensor_new(PHX_F32, 2, xs, phx_cpu()), *y = phx_tensor_new(PHX_F32, 2, ys, phx_cpu());
    phx_rng *r = phx_rng_new(7);
    phx_loss *mse = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_tensor *out;
    float loss = NAN;
    if (x && y && r && mse && phx_rng_normal(r, x, 0, 1) == PHX_OK && phx_rng_normal(r, y, 0, 1) == PHX_OK &&
        phx_optimizer_zero_grad(opt) == PHX_OK && phx_module_forward(net, x, &out) == PHX_OK &&
        phx_loss_forward(mse, out, y, &loss) == PHX_OK &&
        phx_module_backward(net, phx_loss_grad(mse), NULL) == PHX_OK && phx_optimizer_step(opt) == PHX_OK)
        ;
    else
        loss = NAN;
    phx_loss_free(mse);
    phx_rng_free(r);
    phx_tensor_free(x);
    phx_tensor_free(y);
    return loss;
}

static phx_module *mlp(void)
{
    phx_rng *r = phx_rng_new(1);
    phx_module *m = phx_sequential_new();
    phx_sequential_add(m, phx_linear_new(6, 5, true, r));
    phx_sequential_add(m, phx_relu_new());
    phx_sequential_add(m, phx_linear_new(5, 3, true, r));
    phx_rng_free(r);
    return m;
}

static void test_dp(int model_first)
{
    phx_module *model = mlp();
    phx_module *dp = phx_dp_new(model, NULL, 0, NULL);
    ok(dp != NULL, "DataParallel over %d CPU replicas", phx_num_threads());
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.1;
    phx_optimizer *opt = phx_sgd_new(dp, &so);
    float l1 = step(dp, opt);
    if (model_first) phx_module_free(model); /* the program's reference only */
    float l2 = step(dp, opt), l3 = step(dp, opt);
    ok(isfinite(l1) && isfinite(l3) && l3 < l1, "%s: training goes on (%.4f %.4f %.4f)",
       model_first ? "model freed first" : "wrapper freed first", l1, l2, l3);
    is_int(phx_module_num_params(dp), 4, "the wrapper still lists the model's parameters");
    phx_optimizer_free(opt);
    phx_module_free(dp);
    if (!model_first) {
        ok(phx_module_num_params(model) == 4 && !strcmp(phx_module_param_name(model, 0), "0.weight"),
           "the model outlives its freed wrapper");
        phx_module_free(model);
    }
}

static int ddp_rank(int rank, void *arg)
{
    int model_first = *(int *)arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    phx_module *model = mlp();
    phx_module *ddp = phx_ddp_new(model, c, NULL);
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.1;
    phx_optimizer *opt = ddp ? phx_sgd_new(ddp, &so) : NULL;
    int bad = !opt;
    float l1 = opt ? step(ddp, opt) : NAN;
    if (model_first) phx_module_free(model);
    float l3 = NAN;
    if (opt) {
        step(ddp, opt);
        l3 = step(ddp, opt);
    }
    bad |= !(isfinite(l1) && isfinite(l3) && l3 < l1);
    phx_optimizer_free(opt);
    phx_module_free(ddp);
    if (!model_first) phx_module_free(model);
    phx_comm_free(c);
    return bad;
}

int main(void)
{
    setenv("PHX_NUM_THREADS", "2", 1);
    test_dp(1);
    test_dp(0);
    for (int model_first = 1; model_first >= 0; model_first--)
        tu_spawn_both(2, ddp_rank, &model_first, "DDP, %s freed first: trains and frees cleanly",
                      model_first ? "model" : "wrapper");
    return done_testing();
}
