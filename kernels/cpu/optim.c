/* Fused optimizer updates (formulas in kernels/math.h) and the
 * GradScaler's unscale + non-finite check. Parameters, gradients and
 * state are f32. */
#include "config.h"
#include "kernels/cpu/cpu.h"

PX_CLONES phx_status px_cpu_sgd_step(int dev, int64_t n, float *p, const float *g, float *momentum_buf,
                                     const phx_sgd_hparams *h, int step_first)
{
    (void)dev;
    PX_CHECK_N("sgd_step", n);
    if (!h) return phx_error(PHX_EINVAL, "sgd_step: hparams is NULL");
    if (h->momentum != 0.0f && !momentum_buf && n > 0)
        return phx_error(PHX_EINVAL, "sgd_step: momentum %g needs a momentum buffer, got NULL", (double)h->momentum);
    float lr = h->lr, mom = h->momentum, damp = h->dampening, wd = h->weight_decay;
    int nest = h->nesterov;
    if (mom == 0.0f) {
        float dummy;
        for (int64_t i = 0; i < n; i++) phx_sgd_update(&p[i], g[i], &dummy, lr, 0.0f, damp, wd, nest, step_first);
    } else {
        for (int64_t i = 0; i < n; i++)
            phx_sgd_update(&p[i], g[i], &momentum_buf[i], lr, mom, damp, wd, nest, step_first);
    }
    return PHX_OK;
}

PX_CLONES phx_status px_cpu_adam_step(int dev, int64_t n, float *p, const float *g, float *m, float *v, float *vmax,
                                      const phx_adam_hparams *h, int64_t step)
{
    (void)dev;
    PX_CHECK_N("adam_step", n);
    if (!h) return phx_error(PHX_EINVAL, "adam_step: hparams is NULL");
    if (step < 1) return phx_error(PHX_EINVAL, "adam_step: step %lld, expected >= 1", (long long)step);
    if (h->amsgrad && !vmax && n > 0) return phx_error(PHX_EINVAL, "adam_step: amsgrad needs vmax, got NULL");
    phx_adam_coef c =
        phx_adam_coef_make(h->lr, h->beta1, h->beta2, h->eps, h->weight_decay, h->amsgrad, h->decoupled, step);
    if (c.amsgrad)
        for (int64_t i = 0; i < n; i++) phx_adam_update(&c, &p[i], g[i], &m[i], &v[i], &vmax[i]);
    else
        for (int64_t i = 0; i < n; i++) phx_adam_update(&c, &p[i], g[i], &m[i], &v[i], NULL);
    return PHX_OK;
}

PX_CLONES phx_status px_cpu_unscale_check(int dev, int64_t n, float *g, float inv_scale, float *found_inf)
{
    (void)dev;
    PX_CHECK_N("unscale_check", n);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        float v = g[i] * inv_scale;
        g[i] = v;
        bad |= !phx_isfinite(v);
    }
    if (bad && found_inf) *found_inf = 1.0f;
    return PHX_OK;
}
