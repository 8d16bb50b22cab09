/* Precision policy internals shared by src/precision/precision.c and src/precision/scaler.c
 * (the scale rule also by src/zero/zero-ckpt.c). */
#ifndef PHX_CORE_PRECISION_IMPL_H
#define PHX_CORE_PRECISION_IMPL_H

#include <float.h>
#include <stdbool.h>
#include "phalanx/precision.h"

/* Fills o with the policy's scaler defaults (PyTorch's GradScaler values
 * for NULL). */
void px_precision_scaler_defaults(const phx_precision *p, phx_scaler_opts *o);

/* A loss scale a scaler can hold: a finite f32 value > 0 (compared as
 * doubles: converting an out-of-range double to float is undefined
 * behaviour, 1e300, and a value below FLT_TRUE_MIN becomes 0). */
static inline bool px_scaler_scale_ok(double scale)
{
    return scale > 0 && scale <= FLT_MAX && (float)scale > 0;
}
/* Whether s scales (its policy has loss scaling: fp16). */
bool px_scaler_enabled(const phx_scaler *s);
/* The message of a checkpoint whose scaler state a disabled scaler saved
 * (scale 1) loaded into one that scales: PyTorch's GradScaler refuses
 * that state too. */
#define PX_SCALER_DISABLED_STATE \
    "the scaler state was saved by a scaler that does not scale (an fp32 or bf16 run, scale 1): it would set " \
    "this fp16 scaler's scale to 1; load without the scaler to start from its initial scale"

/* The one rule for a scaler state (phx_scaler_set_state and the checkpoint
 * loader's plan both use it, the loader before it changes anything): NULL
 * when scale and growth_tracker are acceptable for s, else why not, written
 * into buf. */
const char *px_scaler_check_state(const phx_scaler *s, double scale, int64_t growth_tracker, char *buf, size_t len);

#endif
