/* The loss scaler: PyTorch's GradScaler (torch/cuda/amp/grad_scaler.py and
 * the _amp_update_scale_ kernel of ATen's AmpKernels.cu, 1.13) for one
 * optimizer.
 *
 *   scale_grad: dL/dy *= scale   (same gradients as backward of scale * L)
 *   step:       g *= 1/scale for every gradient, found_inf |= !isfinite(g)
 *               (one unscale_check kernel per parameter, on its device);
 *               optimizer step only when nothing was found; then update:
 *                 found:  scale *= backoff, tracker = 0
 *                 clean:  tracker += 1; when tracker == interval:
 *                         scale *= growth (kept only if finite), tracker = 0
 *
 * The scale is an f32 value as in PyTorch (its _scale is a float32 tensor),
 * so the sequence of scales matches PyTorch's bit for bit. Under DDP the
 * gradients are already all-reduced when step runs, so every rank sees the
 * same verdict. A policy without loss scaling (fp32, bf16) makes every call
 * a no-op except the optimizer step itself. */
#include <float.h>
#include <stdio.h>
#include <math.h>
#include "phalanx/precision.h"
#include "phalanx/plugin/device_v1.h"
#include "src/base/util.h"
#include "src/tensor/tensor-impl.h"
#include "src/precision/precision-impl.h"
#include "src/base/abi.h"

/* Gradients normally live on one device (two with exotic setups); one
 * found_inf flag per device, created at the first step. */
#define PX_SCALER_MAX_DEVICES 8

struct phx_scaler {
    bool enabled;
    float scale; /* f32, like GradScaler._scale */
    int64_t growth_tracker; /* consecutive clean steps since the last change */
    double growth_factor, backoff_factor;
    int64_t growth_interval;
    int n_flags;
    phx_device flag_dev[PX_SCALER_MAX_DEVICES];
    phx_tensor *flag[PX_SCALER_MAX_DEVICES]; /* f32 scalar on flag_dev[i] */
    bool unscaled; /* phx_scaler_unscale ran since the last step */
    int found; /* its verdict */
};

static phx_status check_opts(const phx_scaler_opts *o)
{
    if (!(o->init_scale > 0) || !((float)o->init_scale <= FLT_MAX))
        return phx_error(PHX_EINVAL, "phx_scaler_new: init_scale %g, expected a finite f32 value > 0", o->init_scale);
    if (!(o->growth_factor > 1.0) || !isfinite(o->growth_factor))
        return phx_error(PHX_EINVAL, "phx_scaler_new: growth_factor %g, expected a finite value > 1", o->growth_factor);
    if (!(o->backoff_factor > 0) || !(o->backoff_factor < 1.0))
        return phx_error(PHX_EINVAL, "phx_scaler_new: backoff_factor %g, expected 0 < backoff_factor < 1",
                         o->backoff_factor);
    if (o->growth_interval < 1)
        return phx_error(PHX_EINVAL, "phx_scaler_new: growth_interval %d, expected >= 1", o->growth_interval);
    return PHX_OK;
}

phx_scaler *phx_scaler_new(const phx_precision *p, const phx_scaler_opts *opts)
{
    phx_scaler_opts u = PHX_SCALER_OPTS_INIT, o = PHX_SCALER_OPTS_INIT;
    if (px_abi_in(&u, sizeof u, opts, "phx_scaler_new", "phx_scaler_opts", "PHX_SCALER_OPTS_INIT")) return NULL;
    px_precision_scaler_defaults(p, &o);
    /* 0 keeps the default; anything else (negative too) is checked. */
    if (u.init_scale != 0) o.init_scale = u.init_scale;
    if (u.growth_factor != 0) o.growth_factor = u.growth_factor;
    if (u.backoff_factor != 0) o.backoff_factor = u.backoff_factor;
    if (u.growth_interval != 0) o.growth_interval = u.growth_interval;
    if (check_opts(&o) != PHX_OK) return NULL;
    phx_scaler *s = px_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->enabled = phx_precision_scaling(p);
    s->scale = (float)o.init_scale;
    s->growth_tracker = 0;
    s->growth_factor = o.growth_factor;
    s->backoff_factor = o.backoff_factor;
    s->growth_interval = o.growth_interval;
    return s;
}

void phx_scaler_free(phx_scaler *s)
{
    if (!s) return;
    for (int i = 0; i < s->n_flags; i++) phx_tensor_free(s->flag[i]);
    px_free(s);
}

phx_status phx_scaler_scale_grad(phx_scaler *s, phx_tensor *loss_grad)
{
    if (!s || !loss_grad) return phx_error(PHX_EINVAL, "phx_scaler_scale_grad: %s is NULL", s ? "loss_grad" : "scaler");
    if (!phx_dtype_is_float(phx_tensor_dtype(loss_grad)))
        return phx_error(PHX_EINVAL, "phx_scaler_scale_grad: loss_grad has dtype %s, expected a float dtype",
                         phx_dtype_name(phx_tensor_dtype(loss_grad)));
    if (!s->enabled) return PHX_OK;
    return phx_tensor_axpby(0.0f, NULL, s->scale, loss_grad);
}

/* The found_inf flag on dev; created (once) when dev is first seen. */
static phx_tensor *flag_for(phx_scaler *s, phx_device dev)
{
    for (int i = 0; i < s->n_flags; i++)
        if (phx_device_equal(s->flag_dev[i], dev)) return s->flag[i];
    if (s->n_flags == PX_SCALER_MAX_DEVICES) {
        phx_error(PHX_EUNSUPPORTED, "phx_scaler_step: gradients on more than %d devices", PX_SCALER_MAX_DEVICES);
        return NULL;
    }
    phx_tensor *f = phx_tensor_zeros(PHX_F32, 0, NULL, dev);
    if (!f) return NULL;
    s->flag_dev[s->n_flags] = dev;
    s->flag[s->n_flags++] = f;
    return f;
}

/* Checks every gradient before touching any, so a bad one changes nothing. */
static phx_status check_grads(phx_scaler *s, phx_module *model)
{
    size_t n = phx_module_num_params(model);
    for (size_t i = 0; i < n; i++) {
        phx_tensor *g = phx_param_grad(phx_module_param(model, i));
        if (!g) continue;
        if (phx_tensor_dtype(g) != PHX_F32)
            return phx_error(PHX_EINVAL, "phx_scaler_step: gradient of '%s' has dtype %s, expected f32",
                             phx_module_param_name(model, i), phx_dtype_name(phx_tensor_dtype(g)));
        const phx_device_v1 *tbl = phx_device_table(phx_tensor_device(g));
        if (!tbl) return PHX_ENOTFOUND; /* phx_device_table set the message */
        if (!tbl->kernels || !tbl->kernels->unscale_check)
            return phx_error(PHX_EUNSUPPORTED, "phx_scaler_step: device of '%s' has no unscale_check kernel",
                             phx_module_param_name(model, i));
        if (!flag_for(s, phx_tensor_device(g))) return PHX_ENOMEM;
    }
    return PHX_OK;
}

/* Unscales every gradient by inv_scale; *found = 1 when one is not finite. */
static phx_status unscale_all(phx_scaler *s, phx_module *model, float inv_scale, int *found)
{
    phx_status st;
    for (int i = 0; i < s->n_flags; i++)
        if ((st = phx_tensor_fill(s->flag[i], 0.0)) != PHX_OK) return st;
    size_t n = phx_module_num_params(model);
    for (size_t i = 0; i < n; i++) {
        phx_tensor *g = phx_param_grad(phx_module_param(model, i));
        if (!g || phx_tensor_numel(g) == 0) continue;
        phx_device dev = phx_tensor_device(g);
        phx_tensor *flag = flag_for(s, dev);
        const phx_device_v1 *tbl = phx_device_table(dev);
        st = tbl->kernels->unscale_check(dev.index, phx_tensor_numel(g), px_tensor_ptr(g), inv_scale,
                                         px_tensor_ptr(flag));
        if (st != PHX_OK) return st;
    }
    *found = 0;
    for (int i = 0; i < s->n_flags; i++) {
        double v = 0;
        if ((st = phx_tensor_get(s->flag[i], 0, &v)) != PHX_OK) return st;
        if (v != 0) *found = 1;
    }
    return PHX_OK;
}

/* _amp_update_scale_: the arithmetic is PyTorch's (double factors applied
 * to the f32 scale, the result stored as f32; growth never reaches inf). */
static void update_scale(phx_scaler *s, int found)
{
    if (found) {
        s->scale = (float)((double)s->scale * s->backoff_factor);
        s->growth_tracker = 0;
        return;
    }
    int64_t successful = s->growth_tracker + 1;
    if (successful == s->growth_interval) {
        float grown = (float)((double)s->scale * s->growth_factor);
        if (isfinite(grown)) s->scale = grown;
        s->growth_tracker = 0;
    } else {
        s->growth_tracker = successful;
    }
}

phx_status phx_scaler_step(phx_scaler *s, phx_optimizer *opt, bool *stepped)
{
    if (stepped) *stepped = false;
    if (!s || !opt) return phx_error(PHX_EINVAL, "phx_scaler_step: %s is NULL", s ? "optimizer" : "scaler");
    phx_status st;
    if (!s->enabled) {
        if ((st = phx_optimizer_step(opt)) != PHX_OK) return st;
        if (stepped) *stepped = true;
        return PHX_OK;
    }
    phx_module *model = phx_optimizer_model(opt);
    if (!model) return phx_error(PHX_EINVAL, "phx_scaler_step: optimizer has no model");
    int found = 0;
    if (s->unscaled) {
        found = s->found;
        s->unscaled = false;
    } else {
        if ((st = check_grads(s, model)) != PHX_OK) return st;
        /* GradScaler.unscale_: inv_scale = _scale.double().reciprocal().float() */
        float inv_scale = (float)(1.0 / (double)s->scale);
        if ((st = unscale_all(s, model, inv_scale, &found)) != PHX_OK) return st;
    }
    if (!found) {
        if ((st = phx_optimizer_step(opt)) != PHX_OK) return st;
        if (stepped) *stepped = true;
    }
    update_scale(s, found);
    return PHX_OK;
}

phx_status phx_scaler_unscale(phx_scaler *s, phx_optimizer *opt, bool *found_inf)
{
    if (found_inf) *found_inf = false;
    if (!s || !opt) return phx_error(PHX_EINVAL, "phx_scaler_unscale: %s is NULL", s ? "optimizer" : "scaler");
    if (!s->enabled) return PHX_OK;
    if (s->unscaled) return phx_error(PHX_ESTATE, "phx_scaler_unscale: already called since the last phx_scaler_step");
    phx_module *model = phx_optimizer_model(opt);
    if (!model) return phx_error(PHX_EINVAL, "phx_scaler_unscale: optimizer has no model");
    phx_status st;
    int found = 0;
    if ((st = check_grads(s, model)) != PHX_OK ||
        (st = unscale_all(s, model, (float)(1.0 / (double)s->scale), &found)) != PHX_OK)
        return st;
    s->unscaled = true;
    s->found = found;
    if (found_inf) *found_inf = found != 0;
    return PHX_OK;
}

double phx_scaler_get_scale(const phx_scaler *s)
{
    if (!s || !s->enabled) return 1.0;
    return s->scale;
}

bool px_scaler_enabled(const phx_scaler *s)
{
    return s && s->enabled;
}

int64_t phx_scaler_growth_tracker(const phx_scaler *s)
{
    return s && s->enabled ? s->growth_tracker : 0;
}

const char *px_scaler_check_state(const phx_scaler *s, double scale, int64_t growth_tracker, char *buf, size_t len)
{
    if (!px_scaler_scale_ok(scale)) {
        snprintf(buf, len, "scale %g, expected a finite f32 value > 0", scale);
        return buf;
    }
    /* A tracker at or past the interval would never meet it again (the
     * update compares with ==): the scale would never grow. */
    if (growth_tracker < 0 || growth_tracker >= s->growth_interval) {
        snprintf(buf, len, "growth tracker %lld, expected 0 <= tracker < %lld (the growth interval)",
                 (long long)growth_tracker, (long long)s->growth_interval);
        return buf;
    }
    return NULL;
}

phx_status phx_scaler_set_state(phx_scaler *s, double scale, int64_t growth_tracker)
{
    if (!s) return phx_error(PHX_EINVAL, "phx_scaler_set_state: scaler is NULL");
    char why[160];
    if (px_scaler_check_state(s, scale, growth_tracker, why, sizeof why))
        return phx_error(PHX_EINVAL, "phx_scaler_set_state: %s", why);
    if (!s->enabled) return PHX_OK; /* like GradScaler.load_state_dict when disabled */
    s->scale = (float)scale;
    s->growth_tracker = growth_tracker;
    return PHX_OK;
}
