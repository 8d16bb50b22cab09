/* Losses as tensor operations: cross_entropy and mse_loss values and
 * gradients against PyTorch 1.13 (t/ref/ops_math.txt) and central
 * differences; the result is a 0-dim f32 tensor; two losses summed and
 * backpropagated once; errors. */
#include "t/ops/gradcheck.h"

static phx_tensor *run(void *ctx, int k, phx_tensor *const *in)
{
    (void)k;
    if (!strcmp(ctx, "cross_entropy")) return phx_cross_entropy(in[0], in[1]);
    return phx_mse_loss(in[0], in[1]);
}

int main(void)
{
    gc_ref *r = gc_ref_load("ops_math.txt");
    if (!r) return ok(0, "reference data loads"), done_testing();
    gc_ref_run(r, "cross_entropy", run, (void *)"cross_entropy", 1e-5, 1e-6, 1);
    gc_ref_run(r, "mse_loss", run, (void *)"mse_loss", 1e-5, 1e-6, 1);

    const gc_ref_case *c = gc_ref_case_find(r, "cross_entropy");
    phx_tensor *x = gc_ref_tensor_new(gc_ref_get(c, "in", "a")), *t = gc_ref_tensor_new(gc_ref_get(c, "in", "target"));
    phx_tensor_set_requires_grad(x, true);
    phx_scope *s = phx_scope_begin();
    phx_tensor *l1 = phx_cross_entropy(x, t), *l2 = phx_mse_loss(x, phx_mul_scalar(x, 0.5));
    ok(l1 && phx_tensor_ndim(l1) == 0 && phx_tensor_dtype(l1) == PHX_F32, "cross_entropy gives a 0-dim f32 tensor");
    phx_tensor *sum = phx_add(l1, l2);
    phx_status st = sum ? phx_backward(sum) : PHX_EINVAL;
    /* d/dx [ce(x) + mean((x - x/2)^2)] = ce grad + x / (2 numel): both
     * operands of mse carry x */
    const gc_ref_tensor *gce = gc_ref_get(c, "grad", "a"); /* of sum(ce * w) */
    double wce = gc_ref_get(c, "w", "w")->v[0];
    const phx_tensor *g = phx_tensor_grad(x);
    double worst = st == PHX_OK && g ? 0 : 1;
    for (int64_t i = 0; !worst && i < 20; i++) {
        double gv, xv;
        phx_tensor_get(g, i, &gv), phx_tensor_get(x, i, &xv);
        worst = fmax(worst, fabs(gv - (gce->v[i] / wce + xv / 40.0)));
    }
    ok(worst < 1e-6, "two losses summed and backpropagated once (worst error %g)", worst);
    phx_scope_end(s);

    /* f16 logits: the loss as f32's on the same values, the gradient in f16 */
    phx_tensor *xh = phx_tensor_new(PHX_F16, 2, phx_tensor_shape(x), phx_cpu());
    phx_tensor *x32 = phx_tensor_new(PHX_F32, 2, phx_tensor_shape(x), phx_cpu());
    phx_tensor_cast(xh, x), phx_tensor_cast(x32, xh);
    phx_tensor_set_requires_grad(xh, true), phx_tensor_set_requires_grad(x32, true);
    s = phx_scope_begin();
    phx_tensor *lh = phx_cross_entropy(xh, t), *l32 = phx_cross_entropy(x32, t);
    double vh = 0, v32 = 1, gworst = 1;
    if (lh && l32 && !phx_backward(lh) && !phx_backward(l32)) {
        phx_tensor_get(lh, 0, &vh), phx_tensor_get(l32, 0, &v32);
        const phx_tensor *gh = phx_tensor_grad(xh), *g32 = phx_tensor_grad(x32);
        gworst = gh && phx_tensor_dtype(gh) == PHX_F16 ? 0 : 1;
        for (int64_t i = 0; !gworst && i < 20; i++) {
            double u, v;
            phx_tensor_get(gh, i, &u), phx_tensor_get(g32, i, &v);
            gworst = fmax(gworst, fabs(u - v));
        }
    }
    ok(lh && phx_tensor_dtype(lh) == PHX_F32 && fabs(vh - v32) < 1e-6 && gworst < 1e-3,
       "f16 logits: f32 loss %g as f32's %g; f16 gradient within %g", vh, v32, gworst);
    phx_scope_end(s);
    phx_tensor_free(xh), phx_tensor_free(x32);

    int64_t bad_t[1] = {4};
    int64_t tv[4] = {1, 0, 9, 2};
    phx_tensor *tb = phx_tensor_from_data(PHX_I64, 1, bad_t, tv);
    s = phx_scope_begin();
    ok(!phx_cross_entropy(x, tb) && strstr(phx_last_error(), "9") && strstr(phx_last_error(), "row 2"),
       "a target outside the classes is refused: %s", phx_last_error());
    ok(!phx_cross_entropy(x, x) && strstr(phx_last_error(), "i64"), "a float target is refused: %s", phx_last_error());
    ok(!phx_mse_loss(x, t) && phx_last_error()[0], "mse of (4,5) against i64 (4) is refused: %s", phx_last_error());
    phx_scope_end(s);
    phx_tensor_free(tb), phx_tensor_free(x), phx_tensor_free(t);
    gc_ref_free(r);
    return done_testing();
}
