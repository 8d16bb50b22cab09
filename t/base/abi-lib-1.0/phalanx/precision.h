/* Phalanx — precision policies (fp32, fp16, bf16 plugins) and the loss
 * scaler (PyTorch's GradScaler rules). */
#ifndef PHALANX_PRECISION_H
#define PHALANX_PRECISION_H

#include <stdbool.h>
#include <stdint.h>
#include "phalanx/tensor.h"
#include "phalanx/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct phx_precision phx_precision;
typedef struct phx_scaler phx_scaler;

/* Loads the policy plugin by name, or from PHX_PRECISION when name is NULL
 * (default "fp32"). An unknown or unusable name is PHX_ENOTFOUND listing
 * the available policies. Caller owns the result. */
phx_status phx_precision_new(const char *name, phx_precision **out);
/* NULL is a no-op. */
void phx_precision_free(phx_precision *p);
/* The plugin's name ("fp16"), owned by the plugin; "fp32" for NULL. */
const char *phx_precision_name(const phx_precision *p);
/* Dtype of matrix-product operands and stored activations (PHX_F32 for
 * NULL, which stands for fp32 everywhere). */
phx_dtype phx_precision_dtype(const phx_precision *p);
/* true when the policy uses dynamic loss scaling (fp16); false for NULL. */
bool phx_precision_scaling(const phx_precision *p);

typedef struct phx_scaler_opts {
    double init_scale; /* 0: policy default (65536) */
    double growth_factor; /* 0: 2.0 */
    double backoff_factor; /* 0: 0.5 */
    int growth_interval; /* 0: 2000 */
} phx_scaler_opts;

/* A scaler for policy p (NULL opts = the policy's defaults; a zero field
 * keeps its default). With a policy that needs no scaling every call below
 * is a no-op apart from the step. NULL with PHX_EINVAL naming the option
 * for init_scale not a finite f32 > 0, growth_factor <= 1, backoff_factor
 * outside (0, 1), growth_interval < 0. Caller owns the result. */
phx_scaler *phx_scaler_new(const phx_precision *p, const phx_scaler_opts *opts);
/* NULL is a no-op. */
void phx_scaler_free(phx_scaler *s);
/* Multiplies the loss gradient (e.g. phx_loss_grad) by the current scale. */
phx_status phx_scaler_scale_grad(phx_scaler *s, phx_tensor *loss_grad);
/* Unscales the gradients of opt's parameters (after any DDP all-reduce:
 * call phx_ddp_finish_backward first or use the DDP module's backward),
 * checks them for inf/NaN, steps the optimizer when all are finite and
 * skips it otherwise, then updates the scale. *stepped (may be NULL) tells
 * which. */
phx_status phx_scaler_step(phx_scaler *s, phx_optimizer *opt, bool *stepped);
/* GradScaler.unscale_: unscales the gradients of opt's parameters now and
 * checks them for inf/NaN (*found_inf, may be NULL), so that they can be
 * clipped (phx_clip_grad_norm) before phx_scaler_step, which then neither
 * unscales again nor checks again: it steps or skips on this verdict.
 * PHX_ESTATE when called twice before a step. A no-op without scaling. */
phx_status phx_scaler_unscale(phx_scaler *s, phx_optimizer *opt, bool *found_inf);
/* Current scale (an f32 value, as PyTorch's); 1 without scaling. */
double phx_scaler_get_scale(const phx_scaler *s);
/* Clean steps since the scale last changed; 0 without scaling. */
int64_t phx_scaler_growth_tracker(const phx_scaler *s);
/* Restores state (checkpoints). PHX_EINVAL for scale <= 0 or not finite
 * (in f32), or a tracker outside [0, growth_interval); nothing changes
 * then. Without scaling the values are checked and ignored. */
phx_status phx_scaler_set_state(phx_scaler *s, double scale, int64_t growth_tracker);

#ifdef __cplusplus
}
#endif
#endif
