/* What the built-in modules share beyond the buffers of module.c: their
 * context allocation, the forward-to-backward state (px_io), the check of
 * dy against the last forward's output, and the tail of a clone. */
#include <stdio.h>
#include "core/modules/module-impl.h"
#include "core/tensor/tensor-impl.h"
#include "core/base/util.h"

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
    if (!clone || self->n_params == 0) return clone;
    if (phx_module_to(clone, self->params[0]->value->storage->device) != PHX_OK ||
        px_module_copy_params(clone, self) != PHX_OK) {
        phx_module_free(clone);
        return NULL;
    }
    return clone;
}
