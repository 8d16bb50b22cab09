/* Everything a checkpoint load may change, as bytes: the model's
 * parameters, the optimizer's state tensors and step count, the scaler's
 * scale and growth tracker. Tests compare two snapshots to show that a
 * failed load changed nothing (t/data/ckpt_fail, t/fuzz/checkpoint).
 * Header-only. */
#ifndef PHX_T_CKPT_SNAPSHOT_H
#define PHX_T_CKPT_SNAPSHOT_H

#include <stdint.h>
#include <string.h>
#include "phalanx/phalanx.h"

/* Writes the snapshot to out (when not NULL); returns its size. */
static inline size_t ckpt_snapshot(phx_module *model, phx_optimizer *opt, phx_scaler *scaler, uint8_t *out)
{
    size_t k = 0;
    for (size_t i = 0; i < phx_module_num_params(model); i++) {
        phx_tensor *t = phx_param_value(phx_module_param(model, i));
        if (out) phx_tensor_to_host(t, out + k);
        k += phx_tensor_nbytes(t);
    }
    const char **names;
    phx_tensor **ts;
    size_t ns = phx_optimizer_state(opt, &names, &ts);
    for (size_t i = 0; i < ns; i++) {
        if (out) phx_tensor_to_host(ts[i], out + k);
        k += phx_tensor_nbytes(ts[i]);
    }
    int64_t steps = phx_optimizer_steps(opt), tracker = phx_scaler_growth_tracker(scaler);
    double scale = phx_scaler_get_scale(scaler);
    if (out) {
        memcpy(out + k, &steps, 8);
        memcpy(out + k + 8, &tracker, 8);
        memcpy(out + k + 16, &scale, 8);
    }
    return k + 24;
}
#endif
