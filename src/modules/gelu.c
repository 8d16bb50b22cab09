/* GELU: x * Phi(x) with the exact erf (PyTorch's approximate='none'), or
 * the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 * (approximate='tanh'). Bodies shared with the other activations. */
#include "src/modules/activation.h"

static const phx_module_vtable gelu_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "GELU",
    .forward = px_act_forward,
    .backward = px_act_backward,
    .free = px_act_free,
    .set_train = NULL,
    .clone = px_act_clone,
};

phx_module *phx_gelu_new(bool tanh_approx)
{
    return px_act_new(&gelu_vt, tanh_approx ? PHX_ACT_GELU_TANH : PHX_ACT_GELU);
}
