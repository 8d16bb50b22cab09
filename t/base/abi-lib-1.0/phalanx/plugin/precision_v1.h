/* Phalanx — frozen precision-policy plugin vtable, ABI 1 (data only). */
#ifndef PHALANX_PLUGIN_PRECISION_V1_H
#define PHALANX_PLUGIN_PRECISION_V1_H

#include "phalanx/plugin.h"
#include "phalanx/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct phx_precision_v1 {
    phx_dtype compute_dtype; /* matrix-product operands, activations */
    int loss_scaling; /* 1: dynamic loss scaling */
    double init_scale; /* GradScaler defaults: 65536 */
    double growth_factor; /* 2.0 */
    double backoff_factor; /* 0.5 */
    int growth_interval; /* 2000 */
} phx_precision_v1;

#ifdef __cplusplus
}
#endif
#endif
