/* A steady-state DataParallel step allocates nothing: replicas, their
 * gradient buffers, the chunk views of input and dy, the gathered output
 * and the pool are made once; steps 3-10 (forward, loss, backward,
 * optimizer step) leave phx_alloc_count() where it was. The input and
 * target are refilled in place each step, as a data loader does. */
#include "phalanx/phalanx.h"
#include "t/tap.h"

enum { B = 37, IN = 24, OUT = 5 };

static phx_module *mlp(void)
{
    phx_rng *r = phx_rng_new(11);
    phx_module *s = phx_sequential_new();
    phx_sequential_add(s, phx_linear_new(IN, 64, true, r));
    phx_sequential_add(s, phx_relu_new());
    phx_sequential_add(s, phx_linear_new(64, 32, true, r));
    phx_sequential_add(s, phx_gelu_new(false));
    phx_sequential_add(s, phx_linear_new(32, OUT, true, r));
    phx_rng_free(r);
    return s;
}

static void check(size_t n, int adamw, phx_loss_kind kind)
{
    phx_module *m = mlp();
    phx_device devs[4] = {phx_cpu(), phx_cpu(), phx_cpu(), phx_cpu()};
    phx_module *dp = phx_dp_new(m, devs, n, NULL);
    phx_optimizer *opt;
    if (adamw) {
        phx_adam_opts o = PHX_ADAMW_OPTS_INIT;
        opt = phx_adam_new(dp, &o);
    } else {
        phx_sgd_opts o = PHX_SGD_OPTS_INIT;
        o.momentum = 0.9;
        opt = phx_sgd_new(dp, &o);
    }
    phx_loss *loss = phx_loss_new(kind, PHX_REDUCE_MEAN);
    int64_t xs[2] = {B, IN}, ys[2] = {B, OUT}, ls = B;
    phx_rng *rng = phx_rng_new(5);
    phx_tensor *x = phx_tensor_new(PHX_F32, 2, xs, phx_cpu());
    phx_tensor *t =
        kind == PHX_LOSS_MSE ? phx_tensor_new(PHX_F32, 2, ys, phx_cpu()) : phx_tensor_zeros(PHX_I64, 1, &ls, phx_cpu());
    int64_t labels[B];
    for (int i = 0; i < B; i++) labels[i] = i % OUT;
    uint64_t start = phx_alloc_count(), before = 0;
    int failed = !dp || !opt || !loss || !x || !t;
    for (int step = 1; step <= 10 && !failed; step++) {
        if (step == 3) before = phx_alloc_count();
        phx_tensor *y;
        float l;
        failed = phx_rng_uniform(rng, x, -1, 1) ||
            (kind == PHX_LOSS_MSE ? phx_rng_normal(rng, t, 0, 1) : phx_tensor_from_host(t, labels)) ||
            phx_optimizer_zero_grad(opt) || phx_module_forward(dp, x, &y) || phx_loss_forward(loss, y, t, &l) ||
            phx_module_backward(dp, phx_loss_grad(loss), NULL) || phx_optimizer_step(opt);
        if (failed) diag("step %d: %s", step, phx_last_error());
    }
    uint64_t grew = phx_alloc_count() - before;
    ok(before > start, "DataParallel(%zu): the counter sees steps 1-2 set up buffers (%llu allocations)", n,
       (unsigned long long)(before - start));
    ok(!failed && grew == 0, "DataParallel(%zu), %s, %s, batch %d: steps 3-10 allocate nothing (%llu allocations)", n,
       adamw ? "AdamW" : "SGD momentum", kind == PHX_LOSS_MSE ? "MSE" : "cross-entropy", B, (unsigned long long)grew);
    phx_tensor_free(x);
    phx_tensor_free(t);
    phx_rng_free(rng);
    phx_loss_free(loss);
    phx_optimizer_free(opt);
    phx_module_free(dp);
    phx_module_free(m);
}

int main(void)
{
    for (size_t n = 1; n <= 4; n++) check(n, n % 2 == 0, n < 3 ? PHX_LOSS_CROSS_ENTROPY : PHX_LOSS_MSE);
    check(2, 0, PHX_LOSS_MSE);
    check(3, 1, PHX_LOSS_CROSS_ENTROPY);
    return done_testing();
}
