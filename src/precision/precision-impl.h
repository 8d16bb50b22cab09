/* Precision policy internals shared by src/precision/precision.c and src/precision/scaler.c. */
#ifndef PHX_CORE_PRECISION_IMPL_H
#define PHX_CORE_PRECISION_IMPL_H

#include "phalanx/precision.h"

/* Fills o with the policy's scaler defaults (PyTorch's GradScaler values
 * for NULL). */
void px_precision_scaler_defaults(const phx_precision *p, phx_scaler_opts *o);

/* The one rule for a scaler state (phx_scaler_set_state and the checkpoint
 * loader's plan both use it, the loader before it changes anything): NULL
 * when scale and growth_tracker are acceptable for s, else why not, written
 * into buf. */
const char *px_scaler_check_state(const phx_scaler *s, double scale, int64_t growth_tracker, char *buf, size_t len);

#endif
