/* Elementwise activations: forward and backward through the device's
 * act_forward / act_backward kernels, in the module's compute dtype. */
#include <stdio.h>
#include "src/modules/activation.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"

typedef struct act {
    phx_activation kind;
    px_io io; /* y = act(x) */
} act;

phx_module *px_act_new(const phx_module_vtable *vt, phx_activation kind)
{
    act *a;
    phx_module *m = px_module_alloc(vt, sizeof *a, (void **)&a);
    if (m) a->kind = kind;
    return m;
}

phx_status px_act_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    act *a = phx_module_ctx(self);
    const char *who = phx_module_type(self);
    phx_status st = px_check_float_input(who, x);
    if (st != PHX_OK) return st;
    const phx_kernels_v1 *k = px_device_kernels(x->storage->device);
    if (!k) return PHX_ENOTFOUND;
    phx_dtype dt = phx_module_compute_dtype(self);
    const phx_tensor *xin;
    phx_tensor *out;
    if ((st = px_io_forward(&a->io, x, dt, -1, &xin, &out)) != PHX_OK) return st;
    st = k->act_forward(x->storage->device.index, a->kind, x->numel, px_tensor_ptr(xin), px_tensor_ptr(out), dt);
    if (st != PHX_OK) return st;
    px_io_keep(&a->io, xin);
    *y = out;
    return PHX_OK;
}

phx_status px_act_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    act *a = phx_module_ctx(self);
    const char *who = phx_module_type(self);
    if (!a->io.x) return phx_error(PHX_ESTATE, "%s backward: no forward to differentiate", who);
    if (!dx) return PHX_OK; /* no parameters: nothing else to produce */
    const phx_tensor *x = a->io.x;
    if (!px_dy_fits(dy, x)) {
        char w[64];
        snprintf(w, sizeof w, "%s backward", who);
        return px_dy_mismatch(w, dy, x);
    }
    const phx_kernels_v1 *k = px_device_kernels(x->storage->device);
    if (!k) return PHX_ENOTFOUND;
    const phx_tensor *g;
    phx_tensor *d;
    phx_status st;
    if ((st = px_io_backward(&a->io, dy, &g, &d)) != PHX_OK) return st;
    st = k->act_backward(x->storage->device.index, a->kind, x->numel, px_tensor_ptr(x), px_tensor_ptr(a->io.y.view),
                         px_tensor_ptr(g), px_tensor_ptr(d), x->dtype);
    if (st == PHX_OK) *dx = d;
    return st;
}

void px_act_free(phx_module *self)
{
    act *a = phx_module_ctx(self);
    if (!a) return;
    px_io_free(&a->io);
    px_free(a);
}

phx_module *px_act_clone(const phx_module *self)
{
    const act *a = phx_module_ctx(self);
    return px_act_new(phx_module_vtable_of(self), a->kind);
}
