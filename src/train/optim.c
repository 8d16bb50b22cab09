/* The generic optimizer object: a vtable + context over a model's
 * parameters, the step counter and the learning rate. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "src/train/optim-impl.h"
#include "src/modules/module-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "src/base/abi.h"

struct phx_optimizer {
    const phx_optimizer_vtable *vt; /* &vtab */
    phx_optimizer_vtable vtab; /* the author's table in this library's layout */
    void *ctx;
    phx_module *model;
    int64_t steps;
    double lr;
};

phx_optimizer *phx_optimizer_new(const phx_optimizer_vtable *vt, void *ctx, phx_module *model)
{
    phx_optimizer_vtable own;
    memset(&own, 0, sizeof own);
    if (vt && px_abi_in(&own, sizeof own, vt, "phx_optimizer_new", "phx_optimizer_vtable", "PHX_OPTIMIZER_VTABLE_SIZE"))
        return NULL;
    return px_optimizer_new_adapted(vt ? &own : NULL, ctx, model);
}

phx_optimizer *px_optimizer_new_adapted(const phx_optimizer_vtable *vt, void *ctx, phx_module *model)
{
    if (!vt || !vt->step || !vt->free || !model) {
        phx_error(PHX_EINVAL, "phx_optimizer_new: %s",
                  !model ? "model is NULL" : "vtable lacks a required slot (step, free)");
        return NULL;
    }
    phx_optimizer *o = px_calloc(1, sizeof *o);
    if (!o) return NULL;
    o->vtab = *vt;
    o->vt = &o->vtab;
    o->ctx = ctx;
    o->model = model;
    return o;
}

void *phx_optimizer_ctx(const phx_optimizer *o)
{
    return o ? o->ctx : NULL;
}
phx_module *phx_optimizer_model(const phx_optimizer *o)
{
    return o ? o->model : NULL;
}
int64_t phx_optimizer_steps(const phx_optimizer *o)
{
    return o ? o->steps : 0;
}
void phx_optimizer_set_steps(phx_optimizer *o, int64_t steps)
{
    if (o && steps >= 0) o->steps = steps;
}
double phx_optimizer_lr(const phx_optimizer *o)
{
    return o ? o->lr : 0.0;
}
const char *phx_optimizer_type(const phx_optimizer *o)
{
    return o && o->vt->type_name ? o->vt->type_name : "?";
}

phx_status phx_optimizer_set_lr(phx_optimizer *o, double lr)
{
    if (!o) return phx_error(PHX_EINVAL, "phx_optimizer_set_lr: optimizer is NULL");
    if (!px_hparam_ok(lr))
        return phx_error(PHX_EINVAL, "phx_optimizer_set_lr: lr = %g, expected a finite value >= 0", lr);
    o->lr = lr;
    return PHX_OK;
}

phx_status phx_optimizer_step(phx_optimizer *o)
{
    if (!o) return phx_error(PHX_EINVAL, "phx_optimizer_step: optimizer is NULL");
    phx_status st = o->vt->step(o);
    if (st == PHX_OK) o->steps++;
    return st;
}

phx_status phx_optimizer_zero_grad(phx_optimizer *o)
{
    if (!o) return phx_error(PHX_EINVAL, "phx_optimizer_zero_grad: optimizer is NULL");
    return phx_module_zero_grad(o->model);
}

size_t phx_optimizer_state(phx_optimizer *o, const char ***names, phx_tensor ***tensors)
{
    if (!o || !o->vt->state || !names || !tensors) return 0;
    return o->vt->state(o, names, tensors);
}

void phx_optimizer_free(phx_optimizer *o)
{
    if (!o) return;
    o->vt->free(o);
    px_free(o);
}

/* ---- shared by SGD and Adam ------------------------------------------ */

void px_slots_free(px_slots *s)
{
    for (size_t i = 0; i < s->n; i++) {
        if (s->names) px_free(s->names[i]);
        if (s->tensors) phx_tensor_free(s->tensors[i]);
    }
    px_free(s->names);
    px_free(s->tensors);
    px_free(s->params);
    memset(s, 0, sizeof *s);
}

phx_status px_slots_init(px_slots *s, phx_module *model, const char *const *kinds, size_t n_kinds)
{
    memset(s, 0, sizeof *s);
    size_t np = phx_module_num_params(model);
    s->params = px_calloc(np ? np : 1, sizeof *s->params);
    size_t total = np * n_kinds;
    s->names = px_calloc(total > 0 ? total : 1, sizeof *s->names);
    s->tensors = px_calloc(total > 0 ? total : 1, sizeof *s->tensors);
    if (!s->params || !s->names || !s->tensors) {
        px_slots_free(s);
        return PHX_ENOMEM;
    }
    s->n_params = np;
    s->n_kinds = n_kinds;
    s->n = np * n_kinds;
    for (size_t i = 0; i < np; i++) {
        phx_param *p = phx_module_param(model, i);
        s->params[i] = p;
        const char *pn = phx_module_param_name(model, i);
        phx_tensor *v = phx_param_value(p);
        for (size_t k = 0; k < n_kinds; k++) {
            size_t len = strlen(pn) + strlen(kinds[k]) + 2;
            char *nm = px_malloc(len);
            phx_tensor *t = phx_tensor_zeros(PHX_F32, v->ndim, v->shape, v->storage->device);
            s->names[i * n_kinds + k] = nm;
            s->tensors[i * n_kinds + k] = t;
            if (!nm || !t) {
                px_slots_free(s);
                return PHX_ENOMEM;
            }
            snprintf(nm, len, "%s.%s", pn, kinds[k]);
        }
    }
    return PHX_OK;
}

phx_status px_check_update(const char *who, const phx_module *model, size_t i, const phx_param *p,
                           const phx_tensor *state)
{
    const phx_tensor *v = phx_param_value(p), *g = phx_param_grad(p);
    if (v->dtype != PHX_F32 || g->dtype != PHX_F32 || v->numel != g->numel ||
        !phx_device_equal(v->storage->device, g->storage->device) ||
        (state && (state->numel != v->numel || !phx_device_equal(v->storage->device, state->storage->device))))
        return phx_error(PHX_EINVAL, "%s: parameter '%s' changed shape, dtype or device since the optimizer was made",
                         who, phx_module_param_name(model, i));
    return PHX_OK;
}

phx_status px_slots_step(const px_slots *s, const char *who, const phx_module *model, px_update_fn update,
                         const void *arg)
{
    size_t nk = s->n_kinds;
    for (size_t i = 0; i < s->n_params; i++) {
        phx_param *p = s->params[i];
        phx_tensor *const *state = nk ? s->tensors + i * nk : NULL;
        phx_status st = px_check_update(who, model, i, p, state ? state[0] : NULL);
        if (st != PHX_OK) return st;
        phx_tensor *v = phx_param_value(p);
        const phx_kernels_v1 *k = px_device_kernels(v->storage->device);
        if (!k) return PHX_ENOTFOUND;
        st = update(k, v->storage->device.index, v->numel, px_tensor_ptr(v), px_tensor_ptr(phx_param_grad(p)), state,
                    nk, arg);
        if (st != PHX_OK) return st;
        phx_param_touch(p);
    }
    return PHX_OK;
}

phx_optimizer *px_slots_optimizer_new(const phx_optimizer_vtable *vt, px_slots *ctx, phx_module *model,
                                      const char *const *kinds, size_t n_kinds, double lr)
{
    if (px_slots_init(ctx, model, kinds, n_kinds) != PHX_OK) {
        px_free(ctx);
        return NULL;
    }
    phx_optimizer *opt = phx_optimizer_new(vt, ctx, model);
    if (!opt) {
        px_slots_free(ctx);
        px_free(ctx);
        return NULL;
    }
    if (phx_optimizer_set_lr(opt, lr) != PHX_OK) {
        phx_optimizer_free(opt);
        return NULL;
    }
    return opt;
}

size_t px_slots_state(phx_optimizer *self, const char ***names, phx_tensor ***tensors)
{
    px_slots *s = phx_optimizer_ctx(self);
    *names = (const char **)s->names;
    *tensors = s->tensors;
    return s->n;
}

void px_slots_free_ctx(phx_optimizer *self)
{
    px_slots *s = phx_optimizer_ctx(self);
    px_slots_free(s);
    px_free(s);
}

phx_status px_hparams_check(const char *fn, const px_hparam *h, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!px_hparam_ok(h[i].value))
            return phx_error(PHX_EINVAL, "%s: %s %g must be finite and >= 0", fn, h[i].name, h[i].value);
    return PHX_OK;
}
