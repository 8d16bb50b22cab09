/* phx-precision-fp16.so: matrix products and activations in f16 with f32
 * accumulation; f32 master weights; dynamic loss scaling with PyTorch's
 * GradScaler defaults (init 65536, x2 after 2000 clean steps, x0.5 on
 * inf/NaN). */
#include "plugins/precision/policy.h"

static const phx_precision_v1 fp16_policy = {
    .compute_dtype = PHX_F16,
    .loss_scaling = 1,
    .init_scale = PX_GRADSCALER_INIT_SCALE,
    .growth_factor = PX_GRADSCALER_GROWTH_FACTOR,
    .backoff_factor = PX_GRADSCALER_BACKOFF_FACTOR,
    .growth_interval = PX_GRADSCALER_GROWTH_INTERVAL,
};

PX_PRECISION_PLUGIN("fp16", 10, "f16 compute, f32 accumulation and master weights, dynamic loss scaling", fp16_policy)
