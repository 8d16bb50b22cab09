/* phx-precision-bf16.so: matrix products and activations in bf16 with f32
 * accumulation; f32 master weights. bf16 has f32's exponent range, so no
 * loss scaling (the scaler's calls are no-ops). */
#include "plugins/precision/policy.h"

static const phx_precision_v1 bf16_policy = {
    .compute_dtype = PHX_BF16,
    .loss_scaling = 0,
    .init_scale = 1.0,
    .growth_factor = PX_GRADSCALER_GROWTH_FACTOR,
    .backoff_factor = PX_GRADSCALER_BACKOFF_FACTOR,
    .growth_interval = PX_GRADSCALER_GROWTH_INTERVAL,
};

PX_PRECISION_PLUGIN("bf16", 20, "bf16 compute, f32 accumulation and master weights, no loss scaling", bf16_policy)
