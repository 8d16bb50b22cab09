/* SGD with momentum, dampening, Nesterov and weight decay: PyTorch 1.13's
 * formula (torch/optim/sgd.py), one fused kernel call per parameter.
 * State: "<param>.momentum_buffer" when momentum != 0. */
#include <math.h>
#include "core/optim-impl.h"
#include "core/tensor-impl.h"
#include "core/module-impl.h"
#include "core/util.h"

typedef struct sgd {
    phx_sgd_opts o;
    px_slots s;
} sgd;

phx_sgd_opts phx_sgd_defaults(void)
{
    phx_sgd_opts o = {0.01, 0.0, 0.0, 0.0, false};
    return o;
}

static phx_status sgd_step(phx_optimizer *self)
{
    sgd *S = phx_optimizer_ctx(self);
    phx_module *model = phx_optimizer_model(self);
    phx_sgd_hparams h = {(float)phx_optimizer_lr(self), (float)S->o.momentum, (float)S->o.dampening,
                         (float)S->o.weight_decay, S->o.nesterov};
    int first = phx_optimizer_steps(self) == 0;
    for (size_t i = 0; i < S->s.n_params; i++) {
        phx_param *p = S->s.params[i];
        phx_tensor *buf = S->s.n_kinds ? S->s.tensors[i] : NULL;
        phx_status st = px_check_update("phx_sgd_step", model, i, p, buf);
        if (st != PHX_OK)
            return st;
        phx_tensor *v = phx_param_value(p);
        const phx_kernels_v1 *k = px_kernels(v->storage->device);
        if (!k)
            return PHX_ENOTFOUND;
        st = k->sgd_step(v->storage->device.index, v->numel, px_tensor_ptr(v), px_tensor_ptr(phx_param_grad(p)),
                         buf ? px_tensor_ptr(buf) : NULL, &h, first);
        if (st != PHX_OK)
            return st;
        phx_param_touch(p);
    }
    return PHX_OK;
}

static size_t sgd_state(phx_optimizer *self, const char ***names, phx_tensor ***tensors)
{
    sgd *S = phx_optimizer_ctx(self);
    *names = (const char **)S->s.names;
    *tensors = S->s.tensors;
    return S->s.n;
}

static void sgd_free(phx_optimizer *self)
{
    sgd *S = phx_optimizer_ctx(self);
    px_slots_free(&S->s);
    px_free(S);
}

static const phx_optimizer_vtable sgd_vt = {
    /* .type_name = */ "SGD",
    /* .step = */ sgd_step,
    /* .state = */ sgd_state,
    /* .free = */ sgd_free,
};

static bool bad(double v) { return !(v >= 0.0) || isinf(v); }

phx_optimizer *phx_sgd_new(phx_module *model, const phx_sgd_opts *o)
{
    phx_sgd_opts d = phx_sgd_defaults();
    if (!o)
        o = &d;
    if (!model) {
        phx_error(PHX_EINVAL, "phx_sgd_new: model is NULL");
        return NULL;
    }
    if (bad(o->lr) || bad(o->momentum) || bad(o->dampening) || bad(o->weight_decay)) {
        phx_error(PHX_EINVAL, "phx_sgd_new: lr %g, momentum %g, dampening %g, weight_decay %g must be finite and >= 0",
                  o->lr, o->momentum, o->dampening, o->weight_decay);
        return NULL;
    }
    if (o->nesterov && (o->momentum <= 0.0 || o->dampening != 0.0)) {
        phx_error(PHX_EINVAL, "phx_sgd_new: nesterov needs momentum > 0 and dampening 0 (got momentum %g, dampening %g)",
                  o->momentum, o->dampening);
        return NULL;
    }
    sgd *S = px_calloc(1, sizeof *S);
    if (!S)
        return NULL;
    S->o = *o;
    static const char *const kinds[] = {"momentum_buffer"};
    if (px_slots_init(&S->s, model, kinds, o->momentum != 0.0 ? 1 : 0) != PHX_OK) {
        px_free(S);
        return NULL;
    }
    phx_optimizer *opt = phx_optimizer_new(&sgd_vt, S, model);
    if (!opt) {
        px_slots_free(&S->s);
        px_free(S);
        return NULL;
    }
    if (phx_optimizer_set_lr(opt, o->lr) != PHX_OK) {
        phx_optimizer_free(opt);
        return NULL;
    }
    return opt;
}
