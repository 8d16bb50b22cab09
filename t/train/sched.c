/* Training-loop tools against PyTorch 1.13 (t/ref/gpt_sched.safetensors
 * from bench/torch/gpt.py): learning rates of warmup + cosine (as
 * LambdaLR), cosine without warmup (CosineAnnealingLR), step decay
 * (StepLR) and a callback (LambdaLR with the same function) over 14
 * steps within 1e-6; clip_grad_norm of three gradients (total and clipped
 * values within 1e-6); a schedule resumed from a checkpoint continues
 * where it stopped; clipping under the fp16 scaler after
 * phx_scaler_unscale (and a skipped step on inf); per-parameter weight
 * decay; and the errors. */
#include <unistd.h>
#include "t/gpt-util.h"

static double lambda(int64_t s, void *user)
{
    (void)user;
    if (s < 3) return (double)(s + 1) / 3.0;
    double p = fmin(1.0, (double)(s - 3) / 9.0);
    return 0.1 + 0.9 * 0.5 * (1.0 + cos(M_PI * p));
}

static phx_module *one_param(void)
{
    return phx_linear_new(1, 1, false, NULL);
}

/* max relative difference of the schedule's first n rates from want */
static double rates(const phx_schedule_opts *so, const phx_tensor *want, int n)
{
    phx_module *m = one_param();
    phx_sgd_opts o = PHX_SGD_OPTS_INIT;
    o.lr = 1.0;
    phx_optimizer *opt = phx_sgd_new(m, &o);
    phx_schedule *s = phx_schedule_new(opt, so);
    double e = s ? 0 : INFINITY;
    const float *w = want ? phx_tensor_data(want) : NULL;
    for (int i = 0; s && w && i < n; i++) {
        double lr;
        if (phx_schedule_apply(s, &lr) != PHX_OK || phx_optimizer_step(opt) != PHX_OK) {
            e = INFINITY;
            break;
        }
        e = fmax(e, fabs(lr - w[i]) / fmax(1e-3, fabs(w[i])));
    }
    phx_schedule_free(s);
    phx_optimizer_free(opt);
    phx_module_free(m);
    return e;
}

static void schedules(const gu_file *f)
{
    phx_schedule_opts cosw = {.struct_size = sizeof(phx_schedule_opts),
                              .kind = PHX_SCHED_WARMUP_COSINE,
                              .warmup_steps = 3,
                              .total_steps = 12,
                              .min_lr = 0.1};
    phx_schedule_opts cos0 = {.struct_size = sizeof(phx_schedule_opts),
                              .kind = PHX_SCHED_WARMUP_COSINE,
                              .warmup_steps = 0,
                              .total_steps = 10,
                              .min_lr = 0.01};
    phx_schedule_opts stp = {
        .struct_size = sizeof(phx_schedule_opts), .kind = PHX_SCHED_STEP, .step_size = 3, .gamma = 0.5};
    phx_schedule_opts cb = {.struct_size = sizeof(phx_schedule_opts), .kind = PHX_SCHED_CALLBACK, .fn = lambda};
    double e;
    e = rates(&cosw, gu_get(f, "lambda"), 14);
    ok(e <= 1e-6, "warmup 3 + cosine to 0.1 over 12 steps = LambdaLR (max rel %.2g)", e);
    e = rates(&cos0, gu_get(f, "cosine"), 11);
    ok(e <= 1e-6,
       "cosine without warmup (T 10, min 0.01) = CosineAnnealingLR over steps 0-10 (max rel %.2g; "
       "from T on it is held at min where PyTorch's climbs again)",
       e);
    e = rates(&stp, gu_get(f, "step"), 14);
    ok(e <= 1e-6, "step decay (3, 0.5) = StepLR (max rel %.2g)", e);
    e = rates(&cb, gu_get(f, "lambda"), 14);
    ok(e <= 1e-6, "a callback = LambdaLR with the same function (max rel %.2g)", e);
}

static void clipping(const gu_file *f)
{
    /* parameters of the script's shapes (4, 5), (7) and (3, 3): three Embedding tables */
    phx_module *m = phx_sequential_new();
    phx_sequential_add(m, phx_embedding_new(4, 5, NULL));
    phx_sequential_add(m, phx_embedding_new(7, 1, NULL));
    phx_sequential_add(m, phx_embedding_new(3, 3, NULL));
    for (int i = 0; i < 3; i++) {
        phx_tensor *g = gu_get(f, "grad.%d", i), *pg = phx_param_grad(phx_module_param(m, (size_t)i));
        int64_t n = phx_tensor_numel(g);
        phx_tensor *v = phx_tensor_view(g, 0, phx_tensor_ndim(pg), phx_tensor_shape(pg));
        if (!v || n != phx_tensor_numel(pg) || phx_tensor_copy(pg, v) != PHX_OK) diag("grad.%d does not fit", i);
        phx_tensor_free(v);
    }
    double norm = 0;
    phx_status st = phx_clip_grad_norm(m, 1.0, &norm);
    double want = ((float *)phx_tensor_data(gu_get(f, "norm")))[0];
    ok(st == PHX_OK && fabs(norm - want) <= 1e-6 * want, "clip_grad_norm total %.7f = clip_grad_norm_'s %.7f", norm,
       want);
    double e = 0;
    for (int i = 0; i < 3; i++)
        e = fmax(e, gu_max_rel(phx_param_grad(phx_module_param(m, (size_t)i)), gu_get(f, "clipped.%d", i)));
    ok(e <= 1e-6, "clipped gradients = PyTorch's (max rel %.2g)", e);
    double again = 0;
    phx_clip_grad_norm(m, 1.0, &again);
    ok(fabs(again - 1.0) <= 1e-5, "after clipping the total norm is max_norm (%.7f)", again);
    ok(phx_clip_grad_norm(m, 0.0, NULL) == PHX_EINVAL, "max_norm 0 is PHX_EINVAL");
    like(phx_last_error(), "max_norm 0, expected finite and > 0", "... naming the value");
    phx_module_free(m);
}

/* A schedule continues from a checkpoint: the step is the optimizer's. */
static void resume(void)
{
    phx_module *m = one_param();
    phx_adam_opts o = PHX_ADAMW_OPTS_INIT;
    o.lr = 0.5;
    phx_optimizer *opt = phx_adam_new(m, &o);
    phx_schedule_opts so = {.struct_size = sizeof(phx_schedule_opts),
                            .kind = PHX_SCHED_WARMUP_COSINE,
                            .warmup_steps = 2,
                            .total_steps = 10,
                            .min_lr = 0.05};
    phx_schedule *s = phx_schedule_new(opt, &so);
    double lr = 0;
    for (int i = 0; i < 6; i++) {
        phx_schedule_apply(s, &lr);
        phx_optimizer_step(opt);
    }
    char path[] = "/tmp/phx-gpt-sched-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    phx_status st = phx_checkpoint_save(path, m, opt, NULL, NULL, 0);
    phx_module *m2 = one_param();
    phx_adam_opts o2 = o;
    phx_optimizer *opt2 = phx_adam_new(m2, &o2);
    phx_schedule *s2 = phx_schedule_new(opt2, &so);
    if (st == PHX_OK) st = phx_checkpoint_load(path, m2, opt2, NULL);
    unlink(path);
    double a = 0, b = 0;
    phx_schedule_apply(s, &a);
    phx_schedule_apply(s2, &b);
    ok(st == PHX_OK && a == b && a == phx_schedule_lr(s, 6),
       "a schedule resumed from a checkpoint continues at step 6 (lr %.6g = %.6g)", b, a);
    phx_schedule_free(s);
    phx_schedule_free(s2);
    phx_optimizer_free(opt);
    phx_optimizer_free(opt2);
    phx_module_free(m);
    phx_module_free(m2);
}

/* Clipping under fp16 loss scaling: unscale first, clip, step. */
static void scaled(void)
{
    phx_precision *p = NULL;
    if (phx_precision_new("fp16", &p) != PHX_OK) {
        skip(4, "no fp16 policy plugin");
        return;
    }
    phx_module *m = one_param();
    phx_tensor *w = phx_param_value(phx_module_param(m, 0)), *g = phx_param_grad(phx_module_param(m, 0));
    phx_sgd_opts o = PHX_SGD_OPTS_INIT;
    o.lr = 1.0;
    phx_optimizer *opt = phx_sgd_new(m, &o);
    phx_scaler *sc = phx_scaler_new(p, NULL);
    phx_tensor_fill(w, 0.0);
    phx_tensor_fill(g, 3.0 * 65536.0); /* a scaled gradient of 3 */
    bool inf = true, stepped = false;
    double norm = 0, v = 0;
    phx_status st = phx_scaler_unscale(sc, opt, &inf);
    if (st == PHX_OK) st = phx_clip_grad_norm(m, 1.0, &norm);
    if (st == PHX_OK) st = phx_scaler_step(sc, opt, &stepped);
    phx_tensor_get(w, 0, &v);
    ok(st == PHX_OK && !inf && fabs(norm - 3.0) < 1e-6 && stepped && fabs(v + 1.0) < 1e-5,
       "fp16: unscale, clip (norm %.4f of the unscaled gradient), step: weight %.6f = -lr * 1", norm, v);
    ok(phx_scaler_unscale(sc, opt, NULL) == PHX_OK && phx_scaler_unscale(sc, opt, NULL) == PHX_ESTATE,
       "fp16: a second unscale before the step is PHX_ESTATE");
    phx_scaler_step(sc, opt, NULL);
    phx_tensor_fill(g, INFINITY);
    st = phx_scaler_unscale(sc, opt, &inf);
    norm = 0;
    phx_clip_grad_norm(m, 1.0, &norm);
    double gv = 0;
    phx_tensor_get(g, 0, &gv);
    ok(st == PHX_OK && inf && isinf(norm) && isinf(gv), "fp16: inf found by unscale; clipping leaves it (norm inf)");
    double before = 0, after = 0;
    phx_tensor_get(w, 0, &before);
    phx_scaler_step(sc, opt, &stepped);
    phx_tensor_get(w, 0, &after);
    ok(!stepped && before == after, "... and the step is skipped on the unscale's verdict");
    phx_scaler_free(sc);
    phx_optimizer_free(opt);
    phx_module_free(m);
    phx_precision_free(p);
}

static void groups_and_errors(void)
{
    phx_module *m = phx_linear_new(2, 2, true, NULL);
    phx_adam_opts o = PHX_ADAMW_OPTS_INIT;
    o.lr = 0.1;
    o.weight_decay = 0.5;
    phx_optimizer *opt = phx_adam_new(m, &o);
    size_t kept = 99;
    ok(phx_adam_decay_matrices_only(opt, &kept) == PHX_OK && kept == 1, "Linear: the weight keeps decay, the bias not");
    /* zero gradients: AdamW's update is the decay alone, p *= 1 - lr wd */
    phx_tensor *b = phx_param_value(phx_module_param(m, 1)), *wt = phx_param_value(phx_module_param(m, 0));
    double b0, w0, b1, w1;
    phx_tensor_get(b, 0, &b0);
    phx_tensor_get(wt, 0, &w0);
    phx_optimizer_step(opt);
    phx_tensor_get(b, 0, &b1);
    phx_tensor_get(wt, 0, &w1);
    ok(b1 == b0 && fabs(w1 - w0 * (1 - 0.1 * 0.5)) < 1e-7, "a step with zero gradients decays the weight only");
    ok(phx_adam_set_weight_decay(opt, 2, 0.1) == PHX_EINVAL, "phx_adam_set_weight_decay: index out of range");
    like(phx_last_error(), "parameter 2, the model has 2", "... naming both");
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    phx_optimizer *sgd = phx_sgd_new(m, &so);
    ok(phx_adam_decay_matrices_only(sgd, NULL) == PHX_EINVAL, "weight-decay groups on SGD are PHX_EINVAL");
    like(phx_last_error(), "optimizer is SGD, expected Adam or AdamW", "... naming the type");
    phx_schedule_opts bad = {
        .struct_size = sizeof(phx_schedule_opts), .kind = PHX_SCHED_WARMUP_COSINE, .warmup_steps = 5, .total_steps = 5};
    ok(phx_schedule_new(opt, &bad) == NULL, "cosine with total_steps <= warmup_steps is refused");
    like(phx_last_error(), "total_steps > warmup_steps", "... saying what is expected");
    phx_optimizer_free(sgd);
    phx_optimizer_free(opt);
    phx_module_free(m);
}

int main(void)
{
    plan(4 + 5 + 1 + 4 + 8);
    gu_file f;
    if (!gu_read(&f, "gpt_sched.safetensors")) {
        skip(9, "no reference data");
    } else {
        schedules(&f);
        clipping(&f);
        gu_free(&f);
    }
    resume();
    scaled();
    groups_and_errors();
    return done_testing();
}
