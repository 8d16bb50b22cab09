/* Helpers shared by the built-in optimizers (internal). */
#ifndef PHX_CORE_OPTIM_IMPL_H
#define PHX_CORE_OPTIM_IMPL_H

#include <math.h>
#include <stdbool.h>
#include "phalanx/optim.h"
#include "phalanx/plugin/device_v1.h"

/* The parameters an optimizer updates and its per-parameter state tensors
 * ("<param>.<kind>"), created zero-filled at construction on each
 * parameter's device so that a checkpoint can be loaded before the first
 * step and no step allocates. tensors[i * n_kinds + k]. */
typedef struct px_slots {
    size_t n_params;
    phx_param **params;
    size_t n_kinds;
    size_t n; /* n_params * n_kinds */
    char **names;
    phx_tensor **tensors;
} px_slots;

phx_status px_slots_init(px_slots *s, phx_module *model, const char *const *kinds, size_t n_kinds);
void px_slots_free(px_slots *s);
/* Checks that p's value and gradient can be updated by a fused kernel. */
phx_status px_check_update(const char *who, const phx_module *model, size_t i, const phx_param *p,
                           const phx_tensor *state);

/* A hyperparameter that must be finite and >= 0 (NaN is not). */
static inline bool px_hparam_ok(double v)
{
    return v >= 0.0 && !isinf(v);
}

/* A named hyper-parameter, for px_hparams_check. */
typedef struct px_hparam {
    const char *name;
    double value;
} px_hparam;

/* PHX_EINVAL naming the first hyper-parameter that is not finite and >= 0
 * ("fn: weight_decay -0.1 must be finite and >= 0"); PHX_OK when all are. */
phx_status px_hparams_check(const char *fn, const px_hparam *h, size_t n);

/* One parameter's fused update: p and g hold n f32 on device index dev of
 * kernel table k; state: the parameter's n_state state tensors in kinds
 * order (NULL when n_state is 0); arg: the optimizer's step arguments. */
typedef phx_status (*px_update_fn)(const phx_kernels_v1 *k, int dev, int64_t n, float *p, const float *g,
                                   phx_tensor *const *state, size_t n_state, const void *arg);

/* A step over every parameter of s in order: px_check_update (who names
 * the caller in errors), update, then phx_param_touch. Stops at the first
 * failure. */
phx_status px_slots_step(const px_slots *s, const char *who, const phx_module *model, px_update_fn update,
                         const void *arg);

/* Optimizers whose context is a px_calloc'ed struct that begins with its
 * px_slots share the rest of their plumbing:
 * - px_slots_optimizer_new initialises the slots in ctx with kinds[0..n_kinds),
 *   makes the optimizer of vt over model with ctx and sets its learning
 *   rate. It owns ctx from the call on: on failure (NULL, phx_last_error
 *   set) ctx and its slots are freed.
 * - px_slots_state and px_slots_free_ctx fill vt's .state and .free. */
phx_optimizer *px_slots_optimizer_new(const phx_optimizer_vtable *vt, px_slots *ctx, phx_module *model,
                                      const char *const *kinds, size_t n_kinds, double lr);
size_t px_slots_state(phx_optimizer *self, const char ***names, phx_tensor ***tensors);
void px_slots_free_ctx(phx_optimizer *self);
/* phx_optimizer_new for a vtable already in this library's layout. */
phx_optimizer *px_optimizer_new_adapted(const phx_optimizer_vtable *vt, void *ctx, phx_module *model);

#endif
