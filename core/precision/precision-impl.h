/* Precision policy internals shared by core/precision/precision.c and core/precision/scaler.c. */
#ifndef PHX_CORE_PRECISION_IMPL_H
#define PHX_CORE_PRECISION_IMPL_H

#include "phalanx/precision.h"

/* Fills o with the policy's scaler defaults (PyTorch's GradScaler values
 * for NULL). */
void px_precision_scaler_defaults(const phx_precision *p, phx_scaler_opts *o);

#endif
