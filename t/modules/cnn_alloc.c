/* No allocation in a steady-state CNN training step (as t/train/alloc
 * for the MLP modules): forward through Conv2d (plain, strided, grouped
 * with padding), BatchNorm2d/1d (running statistics updated), ReLU,
 * MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, Flatten and Linear, loss,
 * zero_grad, backward, AdamW step; phx_alloc_count() must not move over
 * steps 3-10, in f32 and with the bf16 policy. */
#include "phalanx/phalanx.h"
#include "t/tap.h"

static void run(const char *what, const phx_precision *prec)
{
    phx_rng *rng = phx_rng_new(3);
    phx_module *m = phx_sequential_new();
    phx_conv2d_opts g = PHX_CONV2D_OPTS_INIT;
    g.groups = 2, g.padding[0] = g.padding[1] = 1, g.stride[0] = g.stride[1] = 2;
    phx_sequential_add(m, phx_conv2d_new(1, 4, 3, 3, NULL, rng));
    phx_sequential_add(m, phx_batchnorm2d_new(4, 1e-5f, 0.1f, true, true));
    phx_sequential_add(m, phx_relu_new());
    phx_sequential_add(m, phx_maxpool2d_new(2, 1, 0));
    phx_sequential_add(m, phx_conv2d_new(4, 6, 3, 3, &g, rng));
    phx_sequential_add(m, phx_avgpool2d_new(2, 1, 1, false));
    phx_sequential_add(m, phx_adaptive_avgpool2d_new(2, 2));
    phx_sequential_add(m, phx_flatten_new());
    phx_sequential_add(m, phx_batchnorm1d_new(24, 1e-5f, -1.0f, true, true));
    phx_sequential_add(m, phx_linear_new(24, 5, true, rng));
    if (prec) phx_module_set_precision(m, prec);
    int64_t xs[4] = {16, 1, 12, 12}, n = 16;
    phx_tensor *x = phx_tensor_new(PHX_F32, 4, xs, phx_cpu()), *y = phx_tensor_new(PHX_I64, 1, &n, phx_cpu());
    phx_rng_normal(rng, x, 0, 1);
    int64_t *lab = phx_tensor_data(y);
    for (int i = 0; i < 16; i++) lab[i] = i % 5;
    phx_optimizer *opt = phx_adam_new(m, NULL);
    phx_loss *loss = phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_MEAN);
    uint64_t before = 0;
    int failed = !opt || !loss || phx_module_num_params(m) != 10;
    for (int s = 1; s <= 10 && !failed; s++) {
        if (s == 3) before = phx_alloc_count();
        phx_tensor *out = NULL;
        float l;
        failed = phx_optimizer_zero_grad(opt) != PHX_OK || phx_module_forward(m, x, &out) != PHX_OK ||
            phx_loss_forward(loss, out, y, &l) != PHX_OK ||
            phx_module_backward(m, phx_loss_grad(loss), NULL) != PHX_OK || phx_optimizer_step(opt) != PHX_OK;
    }
    uint64_t after = phx_alloc_count();
    double tracked = 0;
    phx_tensor_get(phx_module_find_buffer(m, "1.num_batches_tracked"), 0, &tracked);
    ok(!failed && tracked == 10, "%s: 10 steps ran, BatchNorm tracked 10 batches (%s)", what,
       failed ? phx_last_error() : "ok");
    is_int(after - before, 0, "%s: no allocation over steps 3-10", what);
    phx_loss_free(loss);
    phx_optimizer_free(opt);
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_module_free(m);
    phx_rng_free(rng);
}

int main(void)
{
    plan(4);
    run("f32", NULL);
    phx_precision *p = NULL;
    if (phx_precision_new("bf16", &p) == PHX_OK)
        run("bf16", p);
    else
        skip(2, "bf16 policy plugin not found");
    phx_precision_free(p);
    return done_testing();
}
