/* DataParallel trains exactly like the unwrapped model: with 1, 2, 3 and 4
 * CPU replicas, 20 steps of SGD (momentum, weight decay) and of AdamW on
 * the same batches (sizes 10, 10, 7, ...: uneven chunks, fewer chunks than
 * replicas, a batch-shape change) end at the unwrapped model's parameters
 * within 1e-6 (max |a - b| over a tensor / max |b|). Also: the input
 * gradient, the gradient-ready hooks (once per parameter, after the sum,
 * in the model's order), bitwise repeatability, train/eval propagation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

enum { IN = 20, H1 = 32, H2 = 16, OUT = 4, STEPS = 20, MAXB = 13 };
static const int64_t batch_of[3] = {10, 10, 7};

static phx_module *mlp(void)
{
    phx_rng *r = phx_rng_new(7);
    phx_module *s = phx_sequential_new();
    phx_sequential_add(s, phx_linear_new(IN, H1, true, r));
    phx_sequential_add(s, phx_relu_new());
    phx_sequential_add(s, phx_linear_new(H1, H2, true, r));
    phx_sequential_add(s, phx_tanh_new());
    phx_sequential_add(s, phx_linear_new(H2, OUT, true, r));
    phx_rng_free(r);
    return s;
}

/* Batch `step`: x uniform in [-1, 1) and labels from a fixed LCG. */
static void batch(int step, phx_tensor **x, phx_tensor **y)
{
    int64_t b = batch_of[step % 3], xs[2] = {b, IN};
    float xv[MAXB * IN];
    int64_t yv[MAXB];
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(step + 1);
    for (int64_t i = 0; i < b * IN; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        xv[i] = (float)((double)(s >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    }
    for (int64_t i = 0; i < b; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        yv[i] = (int64_t)((s >> 33) % OUT);
    }
    *x = phx_tensor_from_data(PHX_F32, 2, xs, xv);
    *y = phx_tensor_from_data(PHX_I64, 1, &b, yv);
}

static phx_optimizer *make_opt(phx_module *net, int adamw)
{
    if (adamw) {
        phx_adam_opts o = PHX_ADAMW_OPTS_INIT;
        o.lr = 1e-2;
        return phx_adam_new(net, &o);
    }
    phx_sgd_opts o = PHX_SGD_OPTS_INIT;
    o.lr = 0.1;
    o.momentum = 0.9;
    o.weight_decay = 1e-3;
    return phx_sgd_new(net, &o);
}

/* Trains net (a model or a wrapper) for STEPS steps; 0 on success. */
static int train(phx_module *net, int adamw)
{
    phx_optimizer *opt = make_opt(net, adamw);
    phx_loss *loss = phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_MEAN);
    int rc = 0;
    for (int step = 0; step < STEPS && rc == 0; step++) {
        phx_tensor *x, *t, *y;
        float l;
        batch(step, &x, &t);
        if (phx_optimizer_zero_grad(opt) || phx_module_forward(net, x, &y) || phx_loss_forward(loss, y, t, &l) ||
            phx_module_backward(net, phx_loss_grad(loss), NULL) || phx_optimizer_step(opt)) {
            diag("step %d: %s", step, phx_last_error());
            rc = -1;
        }
        phx_tensor_free(x);
        phx_tensor_free(t);
    }
    phx_loss_free(loss);
    phx_optimizer_free(opt);
    return rc;
}

/* Largest max|a-b|/max|b| over the parameters of a and b. */
static double param_error(phx_module *a, phx_module *b)
{
    double worst = 0;
    for (size_t i = 0; i < phx_module_num_params(b); i++) {
        phx_tensor *ta = phx_param_value(phx_module_param(a, i)), *tb = phx_param_value(phx_module_param(b, i));
        int64_t n = phx_tensor_numel(tb);
        float *va = malloc(sizeof(float) * (size_t)n), *vb = malloc(sizeof(float) * (size_t)n);
        phx_tensor_to_host(ta, va);
        phx_tensor_to_host(tb, vb);
        double diff = 0, mag = 0;
        for (int64_t j = 0; j < n; j++) {
            diff = fmax(diff, fabs((double)va[j] - vb[j]));
            mag = fmax(mag, fabs((double)vb[j]));
        }
        worst = fmax(worst, diff / fmax(mag, 1e-30));
        free(va);
        free(vb);
    }
    return worst;
}

static int bitwise_equal(phx_module *a, phx_module *b)
{
    for (size_t i = 0; i < phx_module_num_params(b); i++) {
        phx_tensor *ta = phx_param_value(phx_module_param(a, i)), *tb = phx_param_value(phx_module_param(b, i));
        size_t nb = phx_tensor_nbytes(tb);
        char *va = malloc(nb), *vb = malloc(nb);
        phx_tensor_to_host(ta, va);
        phx_tensor_to_host(tb, vb);
        int same = memcmp(va, vb, nb) == 0;
        free(va);
        free(vb);
        if (!same) return 0;
    }
    return 1;
}

static phx_module *wrap(phx_module *m, size_t n)
{
    phx_device devs[4] = {phx_cpu(), phx_cpu(), phx_cpu(), phx_cpu()};
    phx_module *dp = phx_dp_new(m, devs, n, NULL);
    if (!dp) diag("phx_dp_new(%zu): %s", n, phx_last_error());
    return dp;
}

static void check_equivalence(int adamw)
{
    const char *name = adamw ? "AdamW" : "SGD";
    phx_module *ref = mlp();
    ok(train(ref, adamw) == 0, "%s: unwrapped model trains %d steps", name, STEPS);
    for (size_t n = 1; n <= 4; n++) {
        phx_module *m = mlp(), *dp = wrap(m, n);
        int trained = dp && train(dp, adamw) == 0;
        double err = trained ? param_error(m, ref) : INFINITY;
        if (!ok(trained && err <= 1e-6, "%s: DataParallel(%zu) after %d steps == unwrapped (error %.2e <= 1e-6)", name,
                n, STEPS, err))
            diag("  %s", phx_last_error());
        if (n == 3) {
            /* Same again: the sum runs in replica order, so the result is bitwise repeatable. */
            phx_module *m2 = mlp(), *dp2 = wrap(m2, n);
            ok(dp2 && train(dp2, adamw) == 0 && bitwise_equal(m2, m),
               "%s: DataParallel(3) twice gives bitwise identical parameters", name);
            phx_module_free(dp2);
            phx_module_free(m2);
        }
        phx_module_free(dp);
        phx_module_free(m);
    }
    phx_module_free(ref);
}

/* Hook bookkeeping: which parameters fired, and their gradient sum then. */
typedef struct hooks {
    phx_param *order[16];
    double sum_at_hook[16];
    int n;
} hooks;

static double tensor_sum(phx_tensor *t)
{
    double s = 0;
    phx_tensor_reduce(t, PHX_SUM, &s);
    return s;
}

static void on_ready(phx_param *p, void *user)
{
    hooks *h = user;
    if (h->n < 16) {
        h->order[h->n] = p;
        h->sum_at_hook[h->n++] = tensor_sum(phx_param_grad(p));
    }
}

static int index_of(phx_module *m, phx_param *p)
{
    for (size_t i = 0; i < phx_module_num_params(m); i++)
        if (phx_module_param(m, i) == p) return (int)i;
    return -1;
}

/* One backward: input gradient and hooks against the unwrapped model. */
static void check_backward_details(void)
{
    phx_module *ref = mlp(), *m = mlp(), *dp = wrap(m, 3);
    phx_loss *loss = phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_MEAN);
    hooks hr = {0}, hd = {0};
    phx_module_set_grad_hook(ref, on_ready, &hr);
    phx_module_set_grad_hook(dp, on_ready, &hd); /* the wrapper's parameters are the model's */
    phx_tensor *x, *t, *yr, *yd, *dxr = NULL, *dxd = NULL;
    float lr, ld;
    batch(0, &x, &t);
    int okr = !phx_module_forward(ref, x, &yr) && !phx_loss_forward(loss, yr, t, &lr) &&
        !phx_module_backward(ref, phx_loss_grad(loss), &dxr);
    int okd = !phx_module_forward(dp, x, &yd) && !phx_loss_forward(loss, yd, t, &ld) &&
        !phx_module_backward(dp, phx_loss_grad(loss), &dxd);
    if (!ok(okr && okd, "forward, loss and backward with an input gradient")) diag("  %s", phx_last_error());
    is_close(ld, lr, 1e-6, "loss of the gathered output == unwrapped loss");
    int dx_ok = dxr && dxd && phx_tensor_same_shape(dxr, dxd);
    double worst = 0;
    for (int64_t i = 0; dx_ok && i < phx_tensor_numel(dxr); i++) {
        double a, b;
        phx_tensor_get(dxd, i, &a);
        phx_tensor_get(dxr, i, &b);
        worst = fmax(worst, fabs(a - b));
    }
    ok(dx_ok && worst <= 1e-6, "input gradient (10, %d) == unwrapped (max diff %.2e)", IN, worst);
    is_int(hd.n, (int)phx_module_num_params(m), "each model parameter's hook fired once");
    int same_order = hd.n == hr.n;
    for (int i = 0; same_order && i < hd.n; i++) same_order = index_of(m, hd.order[i]) == index_of(ref, hr.order[i]);
    ok(same_order, "hooks fire in the unwrapped model's order");
    int final = 1;
    for (int i = 0; i < hd.n; i++)
        final = final && fabs(hd.sum_at_hook[i] - tensor_sum(phx_param_grad(hd.order[i]))) == 0;
    ok(final, "at its hook a gradient already holds the full sum over replicas");
    ok(phx_module_train(dp, false) == PHX_OK && !phx_module_is_training(m), "eval mode reaches the model");
    phx_module_train(dp, true);
    phx_tensor_free(x);
    phx_tensor_free(t);
    phx_loss_free(loss);
    phx_module_free(dp);
    phx_module_free(m);
    phx_module_free(ref);
}

int main(void)
{
    check_equivalence(0);
    check_equivalence(1);
    check_backward_details();
    return done_testing();
}
