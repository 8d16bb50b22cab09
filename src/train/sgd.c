/* SGD with momentum, dampening, Nesterov and weight decay: PyTorch 1.13's
 * formula (torch/optim/sgd.py), one fused kernel call per parameter.
 * State: "<param>.momentum_buffer" when momentum != 0. */
#include <stddef.h>
#include "src/train/optim-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "src/base/abi.h"

typedef struct sgd {
    px_slots s; /* first: the shared px_slots_* slots reach it */
    phx_sgd_opts o;
} sgd;
_Static_assert(offsetof(sgd, s) == 0, "px_slots_optimizer_new needs the slots first");

phx_sgd_opts phx_sgd_defaults(void)
{
    phx_sgd_opts o = PHX_SGD_OPTS_INIT;
    return o;
}

typedef struct sgd_args {
    phx_sgd_hparams h;
    int first;
} sgd_args;

static phx_status sgd_update(const phx_kernels_v1 *k, int dev, int64_t n, float *p, const float *g,
                             phx_tensor *const *state, size_t n_state, const void *arg)
{
    const sgd_args *a = arg;
    return k->sgd_step(dev, n, p, g, n_state ? px_tensor_ptr(state[0]) : NULL, &a->h, a->first);
}

static phx_status sgd_step(phx_optimizer *self)
{
    sgd *S = phx_optimizer_ctx(self);
    sgd_args a = {{(float)phx_optimizer_lr(self), (float)S->o.momentum, (float)S->o.dampening, (float)S->o.weight_decay,
                   S->o.nesterov},
                  phx_optimizer_steps(self) == 0};
    return px_slots_step(&S->s, "phx_sgd_step", phx_optimizer_model(self), sgd_update, &a);
}

static const phx_optimizer_vtable sgd_vt = {
    .struct_size = PHX_OPTIMIZER_VTABLE_SIZE,
    .type_name = "SGD",
    .step = sgd_step,
    .state = px_slots_state,
    .free = px_slots_free_ctx,
};

phx_optimizer *phx_sgd_new(phx_module *model, const phx_sgd_opts *o)
{
    if (!model) {
        px_error_null("phx_sgd_new", "model");
        return NULL;
    }
    phx_sgd_opts d = PHX_SGD_OPTS_INIT;
    if (px_abi_in(&d, sizeof d, o, "phx_sgd_new", "phx_sgd_opts", "PHX_SGD_OPTS_INIT")) return NULL;
    o = &d;
    const px_hparam h[] = {
        {"lr", o->lr}, {"momentum", o->momentum}, {"dampening", o->dampening}, {"weight_decay", o->weight_decay}};
    if (px_hparams_check("phx_sgd_new", h, PX_ARRAY_LEN(h)) != PHX_OK) return NULL;
    if (o->nesterov && (o->momentum <= 0.0 || o->dampening != 0.0)) {
        phx_error(PHX_EINVAL,
                  "phx_sgd_new: nesterov needs momentum > 0 and dampening 0 (got momentum %g, dampening %g)",
                  o->momentum, o->dampening);
        return NULL;
    }
    sgd *S = px_calloc(1, sizeof *S);
    if (!S) return NULL;
    S->o = *o;
    static const char *const kinds[] = {"momentum_buffer"};
    return px_slots_optimizer_new(&sgd_vt, &S->s, model, kinds, o->momentum != 0.0 ? 1 : 0, o->lr);
}
