/* What the built-in modules share beyond the buffers of module.c: their
 * context allocation, the forward-to-backward state (px_io), the check of
 * dy against the last forward's output, and the tail of a clone. */
#include <stdio.h>
#include "src/modules/module-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"

phx_module *px_module_alloc(const phx_module_vtable *vt, size_t ctx_size, void **ctx)
{
    void *c = px_calloc(1, ctx_size);
    if (!c) return NULL;
    phx_module *m = phx_module_new(vt, c);
    if (!m) {
        px_free(c);
        return NULL;
    }
    *ctx = c;
    return m;
}

phx_status px_io_forward(px_io *io, const phx_tensor *x, phx_dtype dt, int64_t last, const phx_tensor **xin,
                         phx_tensor **out)
{
    phx_status st = px_as_dtype(&io->xc, x, dt, xin);
    if (st != PHX_OK) return st;
    if (last < 0) return px_buf_get(&io->y, dt, x->ndim, x->shape, x->storage->device, out);
    return px_buf_like(&io->y, dt, x, last, out);
}

void px_io_keep(px_io *io, const phx_tensor *xin)
{
    phx_tensor_retain((phx_tensor *)xin);
    phx_tensor_free(io->x);
    io->x = (phx_tensor *)xin;
}

phx_status px_io_backward(px_io *io, const phx_tensor *dy, const phx_tensor **g, phx_tensor **d)
{
    const phx_tensor *x = io->x;
    phx_status st = px_as_dtype(&io->dyc, dy, x->dtype, g);
    if (st != PHX_OK) return st;
    return px_buf_get(&io->dx, x->dtype, x->ndim, x->shape, x->storage->device, d);
}

void px_io_free(px_io *io)
{
    phx_tensor_free(io->x);
    io->x = NULL;
    px_buf_free(&io->xc);
    px_buf_free(&io->y);
    px_buf_free(&io->dyc);
    px_buf_free(&io->dx);
}

bool px_dy_fits(const phx_tensor *dy, const phx_tensor *out)
{
    return phx_dtype_is_float(dy->dtype) && phx_tensor_same_shape(dy, out);
}

phx_status px_dy_mismatch(const char *who, const phx_tensor *dy, const phx_tensor *out)
{
    char a[64], b[64];
    return phx_error(PHX_EINVAL, "%s: dy is %s %s, output of the last forward was %s", who, phx_dtype_name(dy->dtype),
                     phx_tensor_shape_str(dy, a, sizeof a), phx_tensor_shape_str(out, b, sizeof b));
}

phx_module *px_module_clone_values(phx_module *clone, const phx_module *self)
{
    if (!clone || (self->n_params == 0 && self->n_buffers == 0)) return clone;
    if ((self->n_params && phx_module_to(clone, self->params[0]->value->storage->device) != PHX_OK) ||
        px_module_copy_params(clone, self) != PHX_OK || px_module_copy_buffers(clone, self) != PHX_OK) {
        phx_module_free(clone);
        return NULL;
    }
    return clone;
}

const phx_tensor *px_weight_operand(px_buf *wc, uint64_t *wc_version, phx_param *w, phx_dtype dt, phx_status *st)
{
    phx_tensor *v = w->value;
    *st = PHX_OK;
    if (dt == PHX_F32) return v;
    phx_tensor *c;
    bool fresh = wc->view && wc->view->dtype == dt && phx_device_equal(wc->view->storage->device, v->storage->device);
    if ((*st = px_buf_get(wc, dt, v->ndim, v->shape, v->storage->device, &c)) != PHX_OK) return NULL;
    if (!fresh || *wc_version != phx_param_version(w)) {
        if ((*st = phx_tensor_cast(c, v)) != PHX_OK) return NULL;
        *wc_version = phx_param_version(w);
    }
    return c;
}

phx_status px_check_same_device(const char *who, const phx_tensor *x, const phx_tensor *w)
{
    if (phx_device_equal(x->storage->device, w->storage->device)) return PHX_OK;
    char a[32], b[32];
    return phx_error(PHX_EINVAL, "%s: input on %s, weights on %s", who, phx_device_name(x->storage->device, a, sizeof a),
                     phx_device_name(w->storage->device, b, sizeof b));
}

phx_param *px_add_filled_param(phx_module *m, const char *name, int64_t dim, double v)
{
    phx_tensor *t = phx_tensor_new(PHX_F32, 1, &dim, phx_cpu());
    phx_param *p = NULL;
    if (t && phx_tensor_fill(t, v) == PHX_OK) p = phx_module_add_param(m, name, t);
    if (!p) phx_tensor_free(t);
    return p;
}
