/* Adam and AdamW (decoupled weight decay), with amsgrad: PyTorch 1.13's
 * formulas (torch/optim/adam.py, adamw.py), one fused kernel call per
 * parameter. State: "<param>.exp_avg", "<param>.exp_avg_sq" and, with
 * amsgrad, "<param>.max_exp_avg_sq"; the step count is the optimizer's. */
#include <stddef.h>
#include <string.h>
#include "phalanx/schedule.h"
#include "src/train/optim-impl.h"
#include "src/modules/module-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "src/base/abi.h"

typedef struct adam {
    px_slots s; /* first: the shared px_slots_* slots reach it */
    phx_adam_opts o;
    float *wd; /* per-parameter weight decay (groups); NULL: o.weight_decay for all */
} adam;
_Static_assert(offsetof(adam, s) == 0, "px_slots_optimizer_new needs the slots first");

phx_adam_opts phx_adam_defaults(void)
{
    phx_adam_opts o = PHX_ADAM_OPTS_INIT;
    return o;
}

phx_adam_opts phx_adamw_defaults(void)
{
    phx_adam_opts o = PHX_ADAMW_OPTS_INIT;
    return o;
}

typedef struct adam_args {
    phx_adam_hparams h;
    int64_t step;
    const adam *A;
} adam_args;

static phx_status adam_update(const phx_kernels_v1 *k, int dev, int64_t n, float *p, const float *g,
                              phx_tensor *const *state, size_t n_state, const void *arg)
{
    const adam_args *a = arg;
    phx_adam_hparams h = a->h;
    if (a->A->wd) /* state points into the slots' tensors: parameter (state - tensors) / n_state */
        h.weight_decay = a->A->wd[(size_t)(state - a->A->s.tensors) / n_state];
    return k->adam_step(dev, n, p, g, px_tensor_ptr(state[0]), px_tensor_ptr(state[1]),
                        n_state > 2 ? px_tensor_ptr(state[2]) : NULL, &h, a->step);
}

static phx_status adam_step(phx_optimizer *self)
{
    adam *A = phx_optimizer_ctx(self);
    adam_args a = {{(float)phx_optimizer_lr(self), (float)A->o.beta1, (float)A->o.beta2, (float)A->o.eps,
                    (float)A->o.weight_decay, A->o.amsgrad, A->o.decoupled},
                   phx_optimizer_steps(self) + 1,
                   A};
    return px_slots_step(&A->s, "phx_adam_step", phx_optimizer_model(self), adam_update, &a);
}

static void adam_free(phx_optimizer *self)
{
    adam *A = phx_optimizer_ctx(self);
    px_free(A->wd);
    px_slots_free_ctx(self);
}

static const phx_optimizer_vtable adam_vt = {
    .struct_size = PHX_OPTIMIZER_VTABLE_SIZE,
    .type_name = "Adam",
    .step = adam_step,
    .state = px_slots_state,
    .free = adam_free,
};

static const phx_optimizer_vtable adamw_vt = {
    .struct_size = PHX_OPTIMIZER_VTABLE_SIZE,
    .type_name = "AdamW",
    .step = adam_step,
    .state = px_slots_state,
    .free = adam_free,
};

phx_optimizer *phx_adam_new(phx_module *model, const phx_adam_opts *o)
{
    if (!model) {
        px_error_null("phx_adam_new", "model");
        return NULL;
    }
    phx_adam_opts d = PHX_ADAM_OPTS_INIT;
    if (px_abi_in(&d, sizeof d, o, "phx_adam_new", "phx_adam_opts", "PHX_ADAM_OPTS_INIT")) return NULL;
    o = &d;
    const px_hparam h[] = {{"lr", o->lr}, {"eps", o->eps}, {"weight_decay", o->weight_decay}};
    if (px_hparams_check("phx_adam_new", h, PX_ARRAY_LEN(h)) != PHX_OK) return NULL;
    if (!(o->beta1 >= 0.0 && o->beta1 < 1.0) || !(o->beta2 >= 0.0 && o->beta2 < 1.0)) {
        phx_error(PHX_EINVAL, "phx_adam_new: betas (%g, %g) must lie in [0, 1)", o->beta1, o->beta2);
        return NULL;
    }
    adam *A = px_calloc(1, sizeof *A);
    if (!A) return NULL;
    A->o = *o;
    static const char *const kinds[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    return px_slots_optimizer_new(o->decoupled ? &adamw_vt : &adam_vt, &A->s, model, kinds, o->amsgrad ? 3 : 2, o->lr);
}

/* ---- parameter groups (weight decay per parameter) -------------------- */

static phx_status adam_of(phx_optimizer *opt, const char *who, adam **out)
{
    const char *type = phx_optimizer_type(opt);
    if (!opt || (strcmp(type, "Adam") != 0 && strcmp(type, "AdamW") != 0))
        return phx_error(PHX_EINVAL, "%s: optimizer is %s, expected Adam or AdamW", who, opt ? type : "NULL");
    adam *A = phx_optimizer_ctx(opt);
    if (!A->wd) {
        A->wd = px_calloc(A->s.n_params ? A->s.n_params : 1, sizeof *A->wd);
        if (!A->wd) return PHX_ENOMEM;
        for (size_t i = 0; i < A->s.n_params; i++) A->wd[i] = (float)A->o.weight_decay;
    }
    *out = A;
    return PHX_OK;
}

phx_status phx_adam_set_weight_decay(phx_optimizer *opt, size_t i, double wd)
{
    adam *A;
    phx_status st = adam_of(opt, "phx_adam_set_weight_decay", &A);
    if (st != PHX_OK) return st;
    if (i >= A->s.n_params)
        return phx_error(PHX_EINVAL, "phx_adam_set_weight_decay: parameter %zu, the model has %zu", i, A->s.n_params);
    if (!px_hparam_ok(wd))
        return phx_error(PHX_EINVAL, "phx_adam_set_weight_decay: weight_decay %g must be finite and >= 0", wd);
    A->wd[i] = (float)wd;
    return PHX_OK;
}

phx_status phx_adam_decay_matrices_only(phx_optimizer *opt, size_t *n_decayed)
{
    adam *A;
    phx_status st = adam_of(opt, "phx_adam_decay_matrices_only", &A);
    if (st != PHX_OK) return st;
    size_t kept = 0;
    for (size_t i = 0; i < A->s.n_params; i++) {
        const phx_param *p = A->s.params[i];
        bool decay = phx_param_value(p)->ndim >= 2 && strcmp(phx_module_type(p->owner), "Embedding") != 0;
        A->wd[i] = decay ? (float)A->o.weight_decay : 0.0f;
        kept += decay;
    }
    if (n_decayed) *n_decayed = kept;
    return PHX_OK;
}
