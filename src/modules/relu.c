/* ReLU: rectified linear unit, max(x, 0). Forward and backward are the shared
 * elementwise bodies (activation.c) with kind PHX_ACT_RELU. */
#include "src/modules/activation.h"

static const phx_module_vtable relu_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "ReLU",
    .forward = px_act_forward,
    .backward = px_act_backward,
    .free = px_act_free,
    .set_train = NULL,
    .clone = px_act_clone,
};

phx_module *phx_relu_new(void)
{
    return px_act_new(&relu_vt, PHX_ACT_RELU);
}
