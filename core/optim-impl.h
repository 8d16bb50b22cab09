/* Helpers shared by the built-in optimizers (internal). */
#ifndef PHX_CORE_OPTIM_IMPL_H
#define PHX_CORE_OPTIM_IMPL_H

#include "phalanx/optim.h"

/* The parameters an optimizer updates and its per-parameter state tensors
 * ("<param>.<kind>"), created zero-filled at construction on each
 * parameter's device so that a checkpoint can be loaded before the first
 * step and no step allocates. tensors[i * n_kinds + k]. */
typedef struct px_slots {
    size_t n_params;
    phx_param **params;
    size_t n_kinds;
    size_t n;              /* n_params * n_kinds */
    char **names;
    phx_tensor **tensors;
} px_slots;

phx_status px_slots_init(px_slots *s, phx_module *model, const char *const *kinds, size_t n_kinds);
void px_slots_free(px_slots *s);
/* Checks that p's value and gradient can be updated by a fused kernel. */
phx_status px_check_update(const char *who, const phx_module *model, size_t i, const phx_param *p,
                           const phx_tensor *state);
#endif
