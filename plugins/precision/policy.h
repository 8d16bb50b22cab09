/* Shared shape of the three precision-policy plugins: each file fills a
 * phx_precision_v1 (pure data) and exports it through phx_plugin_v1 with a
 * probe that always accepts (a policy is arithmetic, usable everywhere)
 * and returns the policy's priority. fp32 has the highest priority, so it
 * is the policy chosen when PHX_PRECISION names none. */
#ifndef PHX_PLUGIN_PRECISION_POLICY_H
#define PHX_PLUGIN_PRECISION_POLICY_H

#include "config.h"
#include "phalanx/plugin.h"
#include "phalanx/plugin/precision_v1.h"

/* PyTorch's GradScaler defaults (torch/cuda/amp/grad_scaler.py). */
#define PX_GRADSCALER_INIT_SCALE 65536.0
#define PX_GRADSCALER_GROWTH_FACTOR 2.0
#define PX_GRADSCALER_BACKOFF_FACTOR 0.5
#define PX_GRADSCALER_GROWTH_INTERVAL 2000

/* Defines the probe and the exported descriptor of policy `name_` whose
 * vtable is the static object `vt_`. */
#define PX_PRECISION_PLUGIN(name_, priority_, description_, vt_) \
    static int px_probe(const phx_probe_ctx *ctx, char *why, size_t why_len) \
    { \
        (void)ctx; \
        (void)why; \
        (void)why_len; \
        return (priority_); \
    } \
    PHX_PLUGIN_EXPORT const phx_plugin_desc phx_plugin_v1 = \
        PHX_PLUGIN_DESC_INIT(PHX_PLUGIN_PRECISION, name_, PACKAGE_VERSION, description_, px_probe, &(vt_));

#endif
