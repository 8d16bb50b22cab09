/* phx-precision-fp32.so: everything in f32, no loss scaling. The default
 * policy (highest probe priority). */
#include "plugins/precision/policy.h"

static const phx_precision_v1 fp32_policy = {
    .compute_dtype = PHX_F32,
    .loss_scaling = 0,
    .init_scale = 1.0,
    .growth_factor = PX_GRADSCALER_GROWTH_FACTOR,
    .backoff_factor = PX_GRADSCALER_BACKOFF_FACTOR,
    .growth_interval = PX_GRADSCALER_GROWTH_INTERVAL,
};

PX_PRECISION_PLUGIN("fp32", 100, "f32 compute, no loss scaling (default)", fp32_policy)
