/* DataParallel under a mixed-precision policy: phx_module_set_precision on
 * the wrapper reaches the model and every replica (at the next forward),
 * the gathered output has the compute dtype, and after an optimizer step
 * the replicas' low-precision weight copies are refreshed -- also on a
 * replica that sat idle for a small batch in between (a stale copy would
 * leave its rows where they were before the large step). */
#include <math.h>
#include <stdlib.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

enum { B = 11, IN = 16, OUT = 4 };

static phx_module *mlp(void)
{
    phx_rng *r = phx_rng_new(21);
    phx_module *s = phx_sequential_new();
    phx_sequential_add(s, phx_linear_new(IN, 32, true, r));
    phx_sequential_add(s, phx_relu_new());
    phx_sequential_add(s, phx_linear_new(32, OUT, true, r));
    phx_rng_free(r);
    return s;
}

static double max_abs_diff(const phx_tensor *a, const phx_tensor *b)
{
    double e = 0;
    for (int64_t i = 0; i < phx_tensor_numel(b); i++) {
        double u, v;
        phx_tensor_get(a, i, &u);
        phx_tensor_get(b, i, &v);
        e = fmax(e, fabs(u - v));
    }
    return e;
}

static double max_abs(const phx_tensor *a)
{
    double e = 0;
    for (int64_t i = 0; i < phx_tensor_numel(a); i++) {
        double u;
        phx_tensor_get(a, i, &u);
        e = fmax(e, fabs(u));
    }
    return e;
}

int main(void)
{
    phx_precision *p = NULL;
    if (phx_precision_new("bf16", &p) != PHX_OK) skip_all("the bf16 precision plugin is not available");
    plan(8);
    phx_module *ref = mlp(), *m = mlp();
    phx_device devs[3] = {phx_cpu(), phx_cpu(), phx_cpu()};
    phx_module *dp = phx_dp_new(m, devs, 3, NULL);
    ok(dp && phx_module_set_precision(ref, p) == PHX_OK && phx_module_set_precision(dp, p) == PHX_OK,
       "bf16 set on the reference and on the wrapper");

    int64_t xs[2] = {B, IN}, ts[2] = {B, OUT};
    phx_tensor *x = phx_tensor_new(PHX_F32, 2, xs, phx_cpu()), *t = phx_tensor_new(PHX_F32, 2, ts, phx_cpu());
    phx_rng *rng = phx_rng_new(4);
    phx_rng_uniform(rng, x, -1, 1);
    phx_rng_normal(rng, t, 0, 3);
    phx_tensor *yr, *yd;
    ok(phx_module_forward(ref, x, &yr) == PHX_OK && phx_module_forward(dp, x, &yd) == PHX_OK, "forward");
    is_int(phx_module_compute_dtype(m), PHX_BF16, "the model now computes in bf16");
    is_int(phx_tensor_dtype(yd), PHX_BF16, "the gathered output is bf16");
    double e0 = max_abs_diff(yd, yr);
    ok(e0 <= 1e-2 * fmax(1.0, max_abs(yr)), "output == unwrapped bf16 output (max diff %.2e)", e0);

    /* One large SGD step on both; a forward of 2 rows through the wrapper
     * (replicas 0 and 1 run, replica 2 idles); then all rows again. */
    int64_t s2[2] = {2, IN};
    phx_tensor *x2 = phx_tensor_new(PHX_F32, 2, s2, phx_cpu());
    phx_rng_uniform(rng, x2, -1, 1);
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 1.0;
    phx_optimizer * or = phx_sgd_new(ref, &so), *od = phx_sgd_new(dp, &so);
    phx_loss *lr = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN), *ld = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    float l;
    double before = max_abs(yr);
    phx_tensor *y0 = phx_tensor_new(PHX_BF16, 2, ts, phx_cpu());
    phx_tensor_copy(y0, yr);
    ok(!phx_loss_forward(lr, yr, t, &l) && !phx_module_backward(ref, phx_loss_grad(lr), NULL) &&
           !phx_optimizer_step(or) && !phx_loss_forward(ld, yd, t, &l) &&
           !phx_module_backward(dp, phx_loss_grad(ld), NULL) && !phx_optimizer_step(od) &&
           !phx_module_forward(dp, x2, &yd) && !phx_module_forward(ref, x, &yr) && !phx_module_forward(dp, x, &yd),
       "a step with lr 1, a forward of 2 rows, a forward of all %d rows", B);
    double moved = max_abs_diff(yr, y0), e1 = max_abs_diff(yd, yr);
    ok(moved > 0.1 * fmax(1.0, before), "the step moved the output (by %.3g)", moved);
    ok(e1 <= 1e-2 * fmax(1.0, max_abs(yr)),
       "every replica refreshed its bf16 weights, the one idle for the 2 rows too: output == unwrapped (max diff %.2e)",
       e1);

    phx_tensor_free(y0);
    phx_tensor_free(x2);
    phx_loss_free(lr);
    phx_loss_free(ld);
    phx_optimizer_free(or);
    phx_optimizer_free(od);
    phx_rng_free(rng);
    phx_tensor_free(x);
    phx_tensor_free(t);
    phx_module_free(dp);
    phx_module_free(m);
    phx_module_free(ref);
    phx_precision_free(p);
    return done_testing();
}
