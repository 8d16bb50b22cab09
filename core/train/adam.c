/* Adam and AdamW (decoupled weight decay), with amsgrad: PyTorch 1.13's
 * formulas (torch/optim/adam.py, adamw.py), one fused kernel call per
 * parameter. State: "<param>.exp_avg", "<param>.exp_avg_sq" and, with
 * amsgrad, "<param>.max_exp_avg_sq"; the step count is the optimizer's. */
#include <stddef.h>
#include "core/train/optim-impl.h"
#include "core/tensor/tensor-impl.h"
#include "core/base/util.h"

typedef struct adam {
    px_slots s;              /* first: the shared px_slots_* slots reach it */
    phx_adam_opts o;
} adam;
_Static_assert(offsetof(adam, s) == 0, "px_slots_optimizer_new needs the slots first");

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

typedef struct adam_args {
    phx_adam_hparams h;
    int64_t step;
} adam_args;

static phx_status adam_update(const phx_kernels_v1 *k, int dev, int64_t n, float *p, const float *g,
                              phx_tensor *const *state, size_t n_state, const void *arg)
{
    const adam_args *a = arg;
    return k->adam_step(dev, n, p, g, px_tensor_ptr(state[0]), px_tensor_ptr(state[1]),
                        n_state > 2 ? px_tensor_ptr(state[2]) : NULL, &a->h, a->step);
}

static phx_status adam_step(phx_optimizer *self)
{
    adam *A = phx_optimizer_ctx(self);
    adam_args a = {{(float)phx_optimizer_lr(self), (float)A->o.beta1, (float)A->o.beta2, (float)A->o.eps,
                    (float)A->o.weight_decay, A->o.amsgrad, A->o.decoupled},
                   phx_optimizer_steps(self) + 1};
    return px_slots_step(&A->s, "phx_adam_step", phx_optimizer_model(self), adam_update, &a);
}

static const phx_optimizer_vtable adam_vt = {
    .type_name = "Adam",
    .step = adam_step,
    .state = px_slots_state,
    .free = px_slots_free_ctx,
};

static const phx_optimizer_vtable adamw_vt = {
    .type_name = "AdamW",
    .step = adam_step,
    .state = px_slots_state,
    .free = px_slots_free_ctx,
};

phx_optimizer *phx_adam_new(phx_module *model, const phx_adam_opts *o)
{
    phx_adam_opts d = phx_adam_defaults();
    if (!o)
        o = &d;
    if (!model) {
        px_error_null("phx_adam_new", "model");
        return NULL;
    }
    const px_hparam h[] = {{"lr", o->lr}, {"eps", o->eps}, {"weight_decay", o->weight_decay}};
    if (px_hparams_check("phx_adam_new", h, PX_ARRAY_LEN(h)) != PHX_OK)
        return NULL;
    if (!(o->beta1 >= 0.0 && o->beta1 < 1.0) || !(o->beta2 >= 0.0 && o->beta2 < 1.0)) {
        phx_error(PHX_EINVAL, "phx_adam_new: betas (%g, %g) must lie in [0, 1)", o->beta1, o->beta2);
        return NULL;
    }
    adam *A = px_calloc(1, sizeof *A);
    if (!A)
        return NULL;
    A->o = *o;
    static const char *const kinds[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    return px_slots_optimizer_new(o->decoupled ? &adamw_vt : &adam_vt, &A->s, model, kinds, o->amsgrad ? 3 : 2,
                                  o->lr);
}
