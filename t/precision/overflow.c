/* fp16 overflow in the forward pass: batches whose input is scaled by 1e5
 * do not fit f16 (max 65504), so their loss and gradients are inf/NaN. The
 * scaler must skip exactly those steps, back the scale off, grow it again
 * over the clean steps that follow, and never let a NaN into the weights;
 * the run must end where a run that never saw those batches ends. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

enum { BATCH = 64, IN = 10, HID = 16, STEPS = 40 };

/* Steps whose batch is scaled by 1e5. */
static int poisoned(int step)
{
    return step >= 10 && step < 13;
}

static phx_module *make_model(const phx_precision *p)
{
    phx_rng *rng = phx_rng_new(7);
    phx_module *m = phx_sequential_new();
    phx_sequential_add(m, phx_linear_new(IN, HID, true, rng));
    phx_sequential_add(m, phx_relu_new());
    phx_sequential_add(m, phx_linear_new(HID, 1, true, rng));
    phx_rng_free(rng);
    if (phx_module_set_precision(m, p) != PHX_OK) {
        printf("Bail out! set_precision: %s\n", phx_last_error());
        exit(1);
    }
    return m;
}

static int all_finite(phx_module *m)
{
    for (size_t i = 0; i < phx_module_num_params(m); i++) {
        phx_tensor *v = phx_param_value(phx_module_param(m, i));
        const float *d = phx_tensor_data(v);
        for (int64_t j = 0; j < phx_tensor_numel(v); j++)
            if (!isfinite(d[j])) return 0;
    }
    return 1;
}

typedef struct run_result {
    int skipped_poisoned, skipped_clean, nan_weights, errors;
    double scale_before, scale_after_poison, final_scale, first_loss, last_loss;
    float w[HID * IN];
} run_result;

/* Trains STEPS steps on fixed data; with_poison: the poisoned steps see the
 * batch scaled by 1e5, else they are left out entirely. */
static void run(const phx_precision *p, int with_poison, int growth_interval, run_result *r)
{
    memset(r, 0, sizeof *r);
    phx_module *m = make_model(p);
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.01;
    phx_optimizer *opt = phx_sgd_new(m, &so);
    phx_scaler_opts o = {sizeof(phx_scaler_opts), 0, 0, 0, growth_interval};
    phx_scaler *s = phx_scaler_new(p, &o);
    phx_loss *mse = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    int64_t xs[2] = {BATCH, IN}, ys[2] = {BATCH, 1};
    phx_tensor *x = phx_tensor_new(PHX_F32, 2, xs, phx_cpu()), *big = phx_tensor_new(PHX_F32, 2, xs, phx_cpu());
    phx_tensor *t = phx_tensor_new(PHX_F32, 2, ys, phx_cpu());
    phx_rng *data = phx_rng_new(3);
    phx_rng_normal(data, x, 0, 1);
    phx_rng_normal(data, t, 0, 1);
    phx_tensor_copy(big, x);
    phx_tensor_axpby(0, NULL, 1e5f, big);
    for (int step = 0; step < STEPS; step++) {
        if (poisoned(step) && !with_poison) continue;
        if (step == 10) r->scale_before = phx_scaler_get_scale(s);
        phx_tensor *y;
        float loss;
        bool stepped = false;
        phx_status st = phx_optimizer_zero_grad(opt);
        if (!st) st = phx_module_forward(m, poisoned(step) ? big : x, &y);
        if (!st) st = phx_loss_forward(mse, y, t, &loss);
        if (!st) st = phx_scaler_scale_grad(s, phx_loss_grad(mse));
        if (!st) st = phx_module_backward(m, phx_loss_grad(mse), NULL);
        if (!st) st = phx_scaler_step(s, opt, &stepped);
        if (st && r->errors++ == 0) diag("step %d: %s", step, phx_last_error());
        if (step == 0) r->first_loss = loss;
        if (!poisoned(step)) r->last_loss = loss;
        if (!stepped) poisoned(step) ? r->skipped_poisoned++ : r->skipped_clean++;
        if (step == 12) r->scale_after_poison = phx_scaler_get_scale(s);
        r->nan_weights += !all_finite(m);
    }
    r->final_scale = phx_scaler_get_scale(s);
    phx_tensor_to_host(phx_param_value(phx_module_find_param(m, "0.weight")), r->w);
    phx_rng_free(data);
    phx_tensor_free(x);
    phx_tensor_free(big);
    phx_tensor_free(t);
    phx_loss_free(mse);
    phx_scaler_free(s);
    phx_optimizer_free(opt);
    phx_module_free(m);
}

/* 1 when the forward of the poisoned batch has a finite output. */
static int forward_finite(const phx_precision *p)
{
    phx_module *m = make_model(p);
    int64_t xs[2] = {BATCH, IN};
    phx_tensor *x = phx_tensor_new(PHX_F32, 2, xs, phx_cpu()), *y = NULL;
    phx_rng *data = phx_rng_new(3);
    phx_rng_normal(data, x, 0, 1);
    phx_tensor_axpby(0, NULL, 1e5f, x);
    double sum = NAN;
    if (phx_module_forward(m, x, &y) == PHX_OK) phx_tensor_reduce(y, PHX_SUM, &sum);
    phx_rng_free(data);
    phx_tensor_free(x);
    phx_module_free(m);
    return isfinite(sum);
}

int main(void)
{
    plan(11);
    phx_precision *fp16 = NULL;
    if (phx_precision_new("fp16", &fp16) != PHX_OK) {
        printf("Bail out! %s\n", phx_last_error());
        return 1;
    }
    /* Growth every 4 clean steps: the scale backs off on the poison and
     * climbs again (to where clean batches overflow now and then, too). */
    run_result a, b, c;
    run(fp16, 1, 4, &a);
    is_int(a.errors, 0, "training ran without errors");
    is_int(a.skipped_poisoned, 3, "the three batches scaled by 1e5 overflow f16 and their steps are skipped");
    is_int(a.nan_weights, 0, "no NaN or inf ever reaches the weights");
    ok(a.scale_after_poison == a.scale_before / 8, "the scale backed off three times (%g -> %g)", a.scale_before,
       a.scale_after_poison);
    ok(a.final_scale >= a.scale_before,
       "the scale recovered over the clean steps (%g, was %g before; %d clean "
       "steps skipped on the way)",
       a.final_scale, a.scale_before, a.skipped_clean);
    ok(isfinite(a.last_loss) && a.last_loss < a.first_loss, "the loss went down (%.4f -> %.4f)", a.first_loss,
       a.last_loss);

    /* Without growth the scale stays a power of two and f16 scaling is
     * exact: a run with the poisoned steps must end where a run that never
     * saw them ends. */
    run(fp16, 1, 1000, &b);
    run(fp16, 0, 1000, &c);
    is_int(b.errors + c.errors + b.skipped_clean + c.skipped_clean, 0,
           "runs without growth: no error, no clean step skipped");
    is_int(b.skipped_poisoned, 3, "and the three poisoned steps skipped");
    double worst = 0;
    for (int i = 0; i < HID * IN; i++) worst = fmax(worst, fabs(b.w[i] - c.w[i]) / fmax(1e-3, fabs(c.w[i])));
    ok(worst <= 1e-5, "weights equal those of a run that never saw the poisoned batches (max rel diff %.2g)", worst);

    /* The overflow is in the f16 forward: the same batch is finite in f32. */
    phx_precision *fp32 = NULL;
    phx_precision_new("fp32", &fp32);
    is_int(forward_finite(fp32), 1, "fp32: the forward of the batch scaled by 1e5 is finite");
    is_int(forward_finite(fp16), 0, "fp16: the forward of the batch scaled by 1e5 is not");
    phx_precision_free(fp32);
    phx_precision_free(fp16);
    return done_testing();
}
