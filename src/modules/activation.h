/* Shared machinery of the elementwise activation modules (relu, gelu,
 * tanh, sigmoid): each file declares its vtable and constructor, the
 * forward/backward bodies live here once (internal). */
#ifndef PHX_CORE_MODULES_ACTIVATION_H
#define PHX_CORE_MODULES_ACTIVATION_H

#include "src/modules/module-impl.h"

phx_module *px_act_new(const phx_module_vtable *vt, phx_activation kind);
/* y = act(x) in the compute dtype; keeps x and y for backward. */
phx_status px_act_forward(phx_module *self, const phx_tensor *x, phx_tensor **y);
/* dx = dy * act'(x). */
phx_status px_act_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx);
void px_act_free(phx_module *self);
phx_module *px_act_clone(const phx_module *self);
#endif
