/* Elementwise activations: forward and backward through the device's
 * act_forward / act_backward kernels, in the module's compute dtype. */
#include "core/modules/activation.h"
#include "core/tensor-impl.h"
#include "core/util.h"

typedef struct act {
    phx_activation kind;
    phx_tensor *x;        /* input of the last forward, compute dtype (retained) */
    px_buf xc;            /* input cast to the compute dtype */
    px_buf y;             /* act(x) */
    px_buf dyc;           /* dy cast to the compute dtype */
    px_buf dx;
} act;

phx_module *px_act_new(const phx_module_vtable *vt, phx_activation kind)
{
    act *a = px_calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->kind = kind;
    phx_module *m = phx_module_new(vt, a);
    if (!m)
        px_free(a);
    return m;
}

phx_status px_act_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    act *a = phx_module_ctx(self);
    const char *who = phx_module_type(self);
    phx_status st = px_check_float_input(who, x);
    if (st != PHX_OK)
        return st;
    const phx_kernels_v1 *k = px_kernels(x->storage->device);
    if (!k)
        return PHX_ENOTFOUND;
    phx_dtype dt = phx_module_compute_dtype(self);
    const phx_tensor *xin;
    phx_tensor *out;
    if ((st = px_as_dtype(&a->xc, x, dt, &xin)) != PHX_OK ||
        (st = px_buf_get(&a->y, dt, x->ndim, x->shape, x->storage->device, &out)) != PHX_OK)
        return st;
    st = k->act_forward(x->storage->device.index, a->kind, x->numel, px_tensor_ptr(xin), px_tensor_ptr(out), dt);
    if (st != PHX_OK)
        return st;
    phx_tensor_retain((phx_tensor *)xin);
    phx_tensor_free(a->x);
    a->x = (phx_tensor *)xin;
    *y = out;
    return PHX_OK;
}

phx_status px_act_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    act *a = phx_module_ctx(self);
    const char *who = phx_module_type(self);
    if (!a->x)
        return phx_error(PHX_ESTATE, "%s backward: no forward to differentiate", who);
    if (!dx)
        return PHX_OK; /* no parameters: nothing else to produce */
    const phx_tensor *x = a->x;
    char s1[64], s2[64];
    if (!phx_dtype_is_float(dy->dtype) || !phx_tensor_same_shape(dy, x))
        return phx_error(PHX_EINVAL, "%s backward: dy is %s %s, output of the last forward was %s", who,
                         phx_dtype_name(dy->dtype), phx_tensor_shape_str(dy, s1, sizeof s1),
                         phx_tensor_shape_str(x, s2, sizeof s2));
    const phx_kernels_v1 *k = px_kernels(x->storage->device);
    if (!k)
        return PHX_ENOTFOUND;
    const phx_tensor *g;
    phx_tensor *d;
    phx_status st;
    if ((st = px_as_dtype(&a->dyc, dy, x->dtype, &g)) != PHX_OK ||
        (st = px_buf_get(&a->dx, x->dtype, x->ndim, x->shape, x->storage->device, &d)) != PHX_OK)
        return st;
    st = k->act_backward(x->storage->device.index, a->kind, x->numel, px_tensor_ptr(x), px_tensor_ptr(a->y.view),
                         px_tensor_ptr(g), px_tensor_ptr(d), x->dtype);
    if (st == PHX_OK)
        *dx = d;
    return st;
}

void px_act_free(phx_module *self)
{
    act *a = phx_module_ctx(self);
    if (!a)
        return;
    phx_tensor_free(a->x);
    px_buf_free(&a->xc);
    px_buf_free(&a->y);
    px_buf_free(&a->dyc);
    px_buf_free(&a->dx);
    px_free(a);
}

phx_module *px_act_clone(const phx_module *self)
{
    const act *a = phx_module_ctx(self);
    return px_act_new(phx_module_vtable_of(self), a->kind);
}
