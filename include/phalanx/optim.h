/* Phalanx — optimizers: SGD and Adam/AdamW with PyTorch's formulas. */
#ifndef PHALANX_OPTIM_H
#define PHALANX_OPTIM_H

#include <stdbool.h>
#include <stdint.h>
#include "phalanx/module.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct phx_optimizer phx_optimizer;

/* Optimizer interface, for user optimizers too.
 * step: updates every parameter from its gradient (fp32) and bumps its
 *   version (phx_param_touch).
 * state: lists the named state tensors (e.g. "0.weight.momentum_buffer");
 *   returns their count; names[i]/tensors[i] owned by the optimizer; a state
 *   created lazily must exist after the first step. May be NULL (no state).
 * free: releases ctx.
 * struct_size: PHX_OPTIMIZER_VTABLE_SIZE (doc/maint/abi.md). */
typedef struct phx_optimizer_vtable {
    size_t struct_size; /* PHX_OPTIMIZER_VTABLE_SIZE */
    const char *type_name;
    phx_status (*step)(phx_optimizer *self);
    size_t (*state)(phx_optimizer *self, const char ***names, phx_tensor ***tensors);
    void (*free)(phx_optimizer *self);
} phx_optimizer_vtable;
#define PHX_OPTIMIZER_VTABLE_SIZE sizeof(phx_optimizer_vtable)

/* SGD. Defaults as PyTorch: momentum 0, dampening 0, weight_decay 0, no nesterov. */
typedef struct phx_sgd_opts {
    size_t struct_size; /* sizeof (phx_sgd_opts): PHX_SGD_OPTS_INIT sets it */
    double lr, momentum, dampening, weight_decay;
    bool nesterov;
} phx_sgd_opts;
#define PHX_SGD_OPTS_INIT \
    { \
        .struct_size = sizeof(phx_sgd_opts), .lr = 0.01 \
    }

/* Adam (decoupled = false, default wd 0) and AdamW (decoupled = true,
 * default wd 0.01). betas (0.9, 0.999), eps 1e-8. */
typedef struct phx_adam_opts {
    size_t struct_size; /* sizeof (phx_adam_opts): PHX_ADAM_OPTS_INIT sets it */
    double lr, beta1, beta2, eps, weight_decay;
    bool amsgrad;
    bool decoupled;
} phx_adam_opts;
#define PHX_ADAM_OPTS_INIT \
    { \
        .struct_size = sizeof(phx_adam_opts), .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8 \
    }
#define PHX_ADAMW_OPTS_INIT \
    { \
        .struct_size = sizeof(phx_adam_opts), .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, \
        .weight_decay = 1e-2, .decoupled = true \
    }

/* The initialisers' values as functions (lr for SGD has none in PyTorch:
 * 0.01 here). Deprecated: use PHX_SGD_OPTS_INIT, PHX_ADAM_OPTS_INIT and
 * PHX_ADAMW_OPTS_INIT. */
phx_sgd_opts phx_sgd_defaults(void);
phx_adam_opts phx_adam_defaults(void);
phx_adam_opts phx_adamw_defaults(void);

/* Optimizers over all parameters of model (which must outlive them). NULL
 * with phx_last_error on bad hyper-parameters (lr < 0, nesterov without
 * momentum or with dampening, betas outside [0,1), ...). */
phx_optimizer *phx_sgd_new(phx_module *model, const phx_sgd_opts *o);
phx_optimizer *phx_adam_new(phx_module *model, const phx_adam_opts *o);

/* For user optimizers. */
phx_optimizer *phx_optimizer_new(const phx_optimizer_vtable *vt, void *ctx, phx_module *model);
void *phx_optimizer_ctx(const phx_optimizer *o);
phx_module *phx_optimizer_model(const phx_optimizer *o);

phx_status phx_optimizer_step(phx_optimizer *o);
phx_status phx_optimizer_zero_grad(phx_optimizer *o);
/* Steps taken so far (saved in checkpoints). */
int64_t phx_optimizer_steps(const phx_optimizer *o);
void phx_optimizer_set_steps(phx_optimizer *o, int64_t steps);
/* Named state tensors (see vtable.state); 0 when none. */
size_t phx_optimizer_state(phx_optimizer *o, const char ***names, phx_tensor ***tensors);
double phx_optimizer_lr(const phx_optimizer *o);
phx_status phx_optimizer_set_lr(phx_optimizer *o, double lr);
const char *phx_optimizer_type(const phx_optimizer *o);
void phx_optimizer_free(phx_optimizer *o);

#ifdef __cplusplus
}
#endif
#endif
