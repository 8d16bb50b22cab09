/* Phalanx — losses. Loss and its gradient are computed in fp32. */
#ifndef PHALANX_LOSS_H
#define PHALANX_LOSS_H

#include "phalanx/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum phx_loss_kind { PHX_LOSS_MSE = 0, PHX_LOSS_CROSS_ENTROPY = 1, PHX_LOSS_NLL = 2 } phx_loss_kind;
/* PHX_REDUCE_NONE (no reduction, one loss per position) is for
 * phx_cross_entropy_ex (phalanx/ops.h); phx_loss_new refuses it. */
typedef enum phx_reduction { PHX_REDUCE_MEAN = 0, PHX_REDUCE_SUM = 1, PHX_REDUCE_NONE = 2 } phx_reduction;

typedef struct phx_loss phx_loss;

/* A loss object owns the gradient buffer it writes (reused across calls).
 * cross_entropy and nll support PHX_REDUCE_MEAN only (EINVAL otherwise). */
phx_loss *phx_loss_new(phx_loss_kind kind, phx_reduction red);
void phx_loss_free(phx_loss *l);

/* Computes the loss of prediction y against target and the gradient
 * dL/dy (f32, shape of y; read it with phx_loss_grad).
 *  mse:           y (N, ...) float, target same shape f32.
 *  cross_entropy: y logits (N, C) float, target (N) i64 labels in [0, C);
 *                 also y (N, ..., C) with target (N, ...): classes last,
 *                 the mean over every position (PyTorch's
 *                 F.cross_entropy(y.view(-1, C), target.view(-1))).
 *  nll:           y log-probabilities (N, C), target (N) i64.
 * Errors (EINVAL) name the shapes; a label out of range names its index. */
phx_status phx_loss_forward(phx_loss *l, const phx_tensor *y, const phx_tensor *target, float *loss);
/* Gradient of the last phx_loss_forward (owned by l), or NULL before. */
phx_tensor *phx_loss_grad(const phx_loss *l);

#ifdef __cplusplus
}
#endif
#endif
