/* No allocation in a steady-state training step: loader batch, forward
 * through every built-in module, loss, zero_grad, backward with hooks,
 * optimizer step. phx_alloc_count() (every host allocation libphalanx
 * makes, tensors included) must not move over steps 3-10, for SGD with
 * momentum and Adam (amsgrad), in f32 and with the bf16 policy. */
#include "phalanx/phalanx.h"
#include "t/tap.h"

static void hook(phx_param *p, void *user)
{
    (void)p;
    (*(int *)user)++;
}

static void run(const char *what, bool adam, const phx_precision *prec)
{
    phx_rng *rng = phx_rng_new(3);
    phx_module *m = phx_sequential_new();
    phx_sequential_add(m, phx_linear_new(12, 16, true, rng));
    phx_sequential_add(m, phx_layernorm_new(16, 1e-5f, true));
    phx_sequential_add(m, phx_gelu_new(false));
    phx_sequential_add(m, phx_dropout_new(0.1f, 1));
    phx_sequential_add(m, phx_linear_new(16, 16, true, rng));
    phx_sequential_add(m, phx_relu_new());
    phx_sequential_add(m, phx_linear_new(16, 8, false, rng));
    phx_sequential_add(m, phx_tanh_new());
    phx_sequential_add(m, phx_linear_new(8, 8, true, rng));
    phx_sequential_add(m, phx_sigmoid_new());
    phx_sequential_add(m, phx_linear_new(8, 4, true, rng));
    if (prec) phx_module_set_precision(m, prec);
    int calls = 0;
    phx_module_set_grad_hook(m, hook, &calls);
    int64_t xs[2] = {64, 12}, n = 64;
    phx_tensor *x = phx_tensor_new(PHX_F32, 2, xs, phx_cpu()), *y = phx_tensor_new(PHX_I64, 1, &n, phx_cpu());
    phx_rng_normal(rng, x, 0, 1);
    int64_t *lab = phx_tensor_data(y);
    for (int i = 0; i < 64; i++) lab[i] = i % 4;
    phx_loader *ld = phx_loader_new(x, y, 4, true, 11, false, NULL, 0);
    phx_optimizer *opt;
    if (adam) {
        phx_adam_opts o = PHX_ADAMW_OPTS_INIT;
        o.amsgrad = true;
        opt = phx_adam_new(m, &o);
    } else {
        phx_sgd_opts o = PHX_SGD_OPTS_INIT;
        o.momentum = 0.9, o.nesterov = true, o.weight_decay = 1e-4;
        opt = phx_sgd_new(m, &o);
    }
    phx_loss *loss = phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_MEAN);
    uint64_t before = 0;
    int failed = 0;
    for (int s = 1; s <= 10; s++) {
        if (s == 3) before = phx_alloc_count();
        phx_tensor *xb, *yb, *out;
        float l;
        failed |= phx_loader_next(ld, &xb, &yb) != 1;
        failed |= phx_optimizer_zero_grad(opt) != PHX_OK;
        failed |= phx_module_forward(m, xb, &out) != PHX_OK;
        failed |= phx_loss_forward(loss, out, yb, &l) != PHX_OK;
        failed |= phx_module_backward(m, phx_loss_grad(loss), NULL) != PHX_OK;
        failed |= phx_optimizer_step(opt) != PHX_OK;
    }
    uint64_t after = phx_alloc_count();
    ok(!failed, "%s: 10 steps ran (%s)", what, phx_last_error());
    is_int(after - before, 0, "%s: no allocation over steps 3-10", what);
    is_int(calls, 10 * 11, "%s: every parameter's hook fired once per step", what);
    phx_loss_free(loss);
    phx_optimizer_free(opt);
    phx_loader_free(ld);
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_module_free(m);
    phx_rng_free(rng);
}

int main(void)
{
    plan(13);
    uint64_t c0 = phx_alloc_count();
    int64_t one = 1;
    phx_tensor_free(phx_tensor_new(PHX_F32, 1, &one, phx_cpu()));
    ok(phx_alloc_count() > c0, "the counter sees a tensor allocation");
    run("f32 SGD", false, NULL);
    run("f32 AdamW amsgrad", true, NULL);
    phx_precision *p = NULL;
    if (phx_precision_new("bf16", &p) == PHX_OK) {
        run("bf16 SGD", false, p);
        run("bf16 AdamW amsgrad", true, p);
    } else {
        skip(6, "bf16 policy plugin not found");
    }
    phx_precision_free(p);
    return done_testing();
}
