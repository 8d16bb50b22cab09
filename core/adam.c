/* Adam and AdamW (decoupled weight decay), with amsgrad: PyTorch 1.13's
 * formulas (torch/optim/adam.py, adamw.py), one fused kernel call per
 * parameter. State: "<param>.exp_avg", "<param>.exp_avg_sq" and, with
 * amsgrad, "<param>.max_exp_avg_sq"; the step count is the optimizer's. */
#include <math.h>
#include "core/optim-impl.h"
#include "core/tensor-impl.h"
#include "core/module-impl.h"
#include "core/util.h"

typedef struct adam {
    phx_adam_opts o;
    px_slots s;
} adam;

phx_adam_opts phx_adam_defaults(void)
{
    phx_adam_opts o = {1e-3, 0.9, 0.999, 1e-8, 0.0, false, false};
    return o;
}

phx_adam_opts phx_adamw_defaults(void)
{
    phx_adam_opts o = {1e-3, 0.9, 0.999, 1e-8, 1e-2, false, true};
    return o;
}

static phx_status adam_step(phx_optimizer *self)
{
    adam *A = phx_optimizer_ctx(self);
    phx_module *model = phx_optimizer_model(self);
    phx_adam_hparams h = {(float)phx_optimizer_lr(self), (float)A->o.beta1, (float)A->o.beta2, (float)A->o.eps,
                          (float)A->o.weight_decay, A->o.amsgrad, A->o.decoupled};
    int64_t step = phx_optimizer_steps(self) + 1;
    size_t nk = A->s.n_kinds;
    for (size_t i = 0; i < A->s.n_params; i++) {
        phx_param *p = A->s.params[i];
        phx_tensor **st_t = A->s.tensors + i * nk;
        phx_status st = px_check_update("phx_adam_step", model, i, p, st_t[0]);
        if (st != PHX_OK)
            return st;
        phx_tensor *v = phx_param_value(p);
        const phx_kernels_v1 *k = px_kernels(v->storage->device);
        if (!k)
            return PHX_ENOTFOUND;
        st = k->adam_step(v->storage->device.index, v->numel, px_tensor_ptr(v), px_tensor_ptr(phx_param_grad(p)),
                          px_tensor_ptr(st_t[0]), px_tensor_ptr(st_t[1]), nk > 2 ? px_tensor_ptr(st_t[2]) : NULL,
                          &h, step);
        if (st != PHX_OK)
            return st;
        phx_param_touch(p);
    }
    return PHX_OK;
}

static size_t adam_state(phx_optimizer *self, const char ***names, phx_tensor ***tensors)
{
    adam *A = phx_optimizer_ctx(self);
    *names = (const char **)A->s.names;
    *tensors = A->s.tensors;
    return A->s.n;
}

static void adam_free(phx_optimizer *self)
{
    adam *A = phx_optimizer_ctx(self);
    px_slots_free(&A->s);
    px_free(A);
}

static const phx_optimizer_vtable adam_vt = {
    /* .type_name = */ "Adam",
    /* .step = */ adam_step,
    /* .state = */ adam_state,
    /* .free = */ adam_free,
};

static const phx_optimizer_vtable adamw_vt = {
    /* .type_name = */ "AdamW",
    /* .step = */ adam_step,
    /* .state = */ adam_state,
    /* .free = */ adam_free,
};

static bool bad(double v) { return !(v >= 0.0) || isinf(v); }

phx_optimizer *phx_adam_new(phx_module *model, const phx_adam_opts *o)
{
    phx_adam_opts d = phx_adam_defaults();
    if (!o)
        o = &d;
    if (!model) {
        phx_error(PHX_EINVAL, "phx_adam_new: model is NULL");
        return NULL;
    }
    if (bad(o->lr) || bad(o->eps) || bad(o->weight_decay)) {
        phx_error(PHX_EINVAL, "phx_adam_new: lr %g, eps %g, weight_decay %g must be finite and >= 0", o->lr, o->eps,
                  o->weight_decay);
        return NULL;
    }
    if (!(o->beta1 >= 0.0 && o->beta1 < 1.0) || !(o->beta2 >= 0.0 && o->beta2 < 1.0)) {
        phx_error(PHX_EINVAL, "phx_adam_new: betas (%g, %g) must lie in [0, 1)", o->beta1, o->beta2);
        return NULL;
    }
    adam *A = px_calloc(1, sizeof *A);
    if (!A)
        return NULL;
    A->o = *o;
    static const char *const kinds[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    if (px_slots_init(&A->s, model, kinds, o->amsgrad ? 3 : 2) != PHX_OK) {
        px_free(A);
        return NULL;
    }
    phx_optimizer *opt = phx_optimizer_new(o->decoupled ? &adamw_vt : &adam_vt, A, model);
    if (!opt) {
        px_slots_free(&A->s);
        px_free(A);
        return NULL;
    }
    if (phx_optimizer_set_lr(opt, o->lr) != PHX_OK) {
        phx_optimizer_free(opt);
        return NULL;
    }
    return opt;
}
