/* Gradient-norm clipping (torch.nn.utils.clip_grad_norm_, norm_type 2):
 * one sum_squares kernel per gradient, f64 total, then one scale per
 * gradient when the total exceeds max_norm. */
#include <math.h>
#include "phalanx/schedule.h"
#include "src/tensor/device-impl.h"
#include "src/tensor/tensor-impl.h"

phx_status phx_clip_grad_norm(phx_module *model, double max_norm, double *total_norm)
{
    if (!model) return phx_error(PHX_EINVAL, "phx_clip_grad_norm: model is NULL");
    if (!(max_norm > 0.0) || isinf(max_norm))
        return phx_error(PHX_EINVAL, "phx_clip_grad_norm: max_norm %g, expected finite and > 0", max_norm);
    size_t n = phx_module_num_params(model);
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        phx_tensor *g = phx_param_grad(phx_module_param(model, i));
        if (!g || g->numel == 0) continue;
        const phx_kernels_v1 *k = px_device_kernels(g->storage->device);
        if (!k) return PHX_ENOTFOUND;
        PX_NEED_SLOT("phx_clip_grad_norm", g->storage->device, k, sum_squares);
        double s = 0.0;
        phx_status st = k->sum_squares(g->storage->device.index, g->numel, px_tensor_ptr(g), g->dtype, &s);
        if (st != PHX_OK) return st;
        sum += s;
    }
    double total = sqrt(sum);
    if (total_norm) *total_norm = total;
    if (!isfinite(total)) return PHX_OK;
    /* PyTorch: clip_coef = max_norm / (total + 1e-6), applied when < 1 */
    float coef = (float)(max_norm / (total + 1e-6));
    if (!(coef < 1.0f)) return PHX_OK;
    for (size_t i = 0; i < n; i++) {
        phx_tensor *g = phx_param_grad(phx_module_param(model, i));
        if (!g || g->numel == 0) continue;
        phx_status st = phx_tensor_axpby(0.0f, NULL, coef, g);
        if (st != PHX_OK) return st;
    }
    return PHX_OK;
}
