/* examples/resnet's model (forward-only blocks) against PyTorch 1.13:
 * loaded with torch's initial state_dict (t/ref/resnet_parity.safetensors,
 * bench/torch/resnet.py parity), 10 SGD-momentum steps (lr 0.05, momentum
 * 0.9, batch 8) give torch's per-step float32 losses within 1e-5, and the
 * same within 1e-4 of torch's float64 run; then the same model
 * differentiated with retain_graph and a second backward refused; a
 * steady-state step allocates nothing. */
#include <math.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"
#include "t/gpt-util.h"
#include "examples/resnet-model.h"

/* Parameters and buffers named "p.<name>" into m; -1 when one is missing. */
static int load_state(const gu_file *f, phx_module *m)
{
    if (gu_load(f, m, "p.") < 0) return -1;
    for (size_t i = 0; i < phx_module_num_buffers(m); i++) {
        phx_tensor *t = gu_get(f, "p.%s", phx_module_buffer_name(m, i));
        if (!t || phx_tensor_copy(phx_module_buffer(m, i), t) != PHX_OK) {
            diag("cannot load buffer %s: %s", phx_module_buffer_name(m, i), t ? phx_last_error() : "missing");
            return -1;
        }
    }
    return 0;
}

int main(void)
{
    gu_file f;
    if (!gu_read(&f, "resnet_parity.safetensors")) {
        printf("Bail out! t/ref/resnet_parity.safetensors unreadable\n");
        return 1;
    }
    plan(6);
    phx_rng *rng = phx_rng_new(0);
    phx_module *m = resnet_new(rng);
    ok(m && load_state(&f, m) == 0, "torch's state_dict loads into the model (%zu parameters, %zu buffers)",
       m ? phx_module_num_params(m) : 0, m ? phx_module_num_buffers(m) : 0);
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.05;
    so.momentum = 0.9;
    phx_optimizer *opt = phx_sgd_new(m, &so);
    const phx_tensor *want = gu_get(&f, "loss"), *want64 = gu_get(&f, "loss64");
    double worst = 0, worst64 = 0;
    int failed = !opt || !want || !want64;
    for (int s = 0; s < 10 && !failed; s++) {
        phx_scope *sc = phx_scope_begin();
        phx_tensor *y = NULL;
        failed = phx_optimizer_zero_grad(opt) != PHX_OK || phx_module_forward(m, gu_get(&f, "x.%d", s), &y) != PHX_OK;
        phx_tensor *loss = failed ? NULL : phx_cross_entropy(y, gu_get(&f, "y.%d", s));
        double l = NAN, w, w64;
        failed = failed || !loss || phx_tensor_get(loss, 0, &l) != PHX_OK || phx_backward(loss) != PHX_OK ||
            phx_optimizer_step(opt) != PHX_OK;
        phx_tensor_get(want, s, &w);
        phx_tensor_get(want64, s, &w64);
        double e = fabs(l - w), e64 = fabs(l - w64);
        diag("step %d: loss %.7f, torch %.7f (f64 %.7f): |diff| %.2g", s, l, w, w64, e);
        worst = e > worst || isnan(e) ? e : worst;
        worst64 = e64 > worst64 || isnan(e64) ? e64 : worst64;
        phx_scope_end(sc);
    }
    if (failed) diag("%s", phx_last_error());
    ok(!failed, "10 training steps ran");
    ok(!failed && worst <= 1e-5, "per-step losses equal torch's float32 within 1e-5 (max %.3g)", worst);
    ok(!failed && worst64 <= 1e-4, "and torch's float64 within 1e-4 (max %.3g)", worst64);

    /* retain_graph: two backwards through one graph accumulate twice. */
    phx_scope *sc = phx_scope_begin();
    phx_tensor *y = NULL;
    phx_optimizer_zero_grad(opt);
    phx_module_forward(m, gu_get(&f, "x.0"), &y);
    phx_tensor *loss = phx_cross_entropy(y, gu_get(&f, "y.0"));
    phx_tensor *g = phx_param_grad(phx_module_find_param(m, "fc.bias"));
    double g1 = NAN, g2 = NAN;
    phx_status s1 = phx_backward_retain(loss, NULL, true);
    phx_tensor_get(g, 3, &g1);
    phx_status s2 = phx_backward(loss);
    phx_tensor_get(g, 3, &g2);
    phx_status s3 = phx_backward(loss);
    ok(s1 == PHX_OK && s2 == PHX_OK && fabs(g2 - 2 * g1) <= 1e-6 * fabs(g1) + 1e-9 && s3 == PHX_ESTATE,
       "retain_graph allows a second backward (fc.bias grad %.6g then %.6g), a third is refused: %s", g1, g2,
       phx_last_error());
    phx_scope_end(sc);

    /* Steady state: forward, loss, backward and SGD allocate nothing (the
     * convolutions' scratch, the 1x1 stride-2 projections' subsampled
     * image included, is kept from the first steps). */
    uint64_t before = 0;
    failed = 0;
    for (int s = 0; s < 8 && !failed; s++) {
        if (s == 3) before = phx_alloc_count();
        phx_scope *sc2 = phx_scope_begin();
        phx_tensor *y2 = NULL;
        failed = phx_optimizer_zero_grad(opt) != PHX_OK || phx_module_forward(m, gu_get(&f, "x.%d", s), &y2) != PHX_OK;
        phx_tensor *l2 = failed ? NULL : phx_cross_entropy(y2, gu_get(&f, "y.%d", s));
        failed = failed || !l2 || phx_backward(l2) != PHX_OK || phx_optimizer_step(opt) != PHX_OK;
        phx_scope_end(sc2);
    }
    uint64_t after = phx_alloc_count();
    ok(!failed && after == before, "8 more steps ran; steps 4-8 allocate nothing (%llu allocations)%s",
       (unsigned long long)(after - before), failed ? phx_last_error() : "");

    phx_optimizer_free(opt);
    phx_module_free(m);
    phx_rng_free(rng);
    gu_free(&f);
    return done_testing();
}
