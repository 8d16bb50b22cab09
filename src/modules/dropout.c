/* Dropout: in training, y = x * mask / (1 - p) with mask[i] =
 * philox_uniform(seed, offset + i) >= p; every forward advances offset by
 * numel so each step draws a new mask. In eval mode it is the identity
 * (y is a copy of x in the compute dtype). */
#include "src/modules/module-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"

typedef struct dropout {
    float p;
    uint64_t seed, offset;
    bool masked; /* the last forward applied a mask */
    const phx_tensor *shape; /* y of the last forward (for backward's check) */
    px_buf y;
    px_buf mask; /* bytes, held in an i32 tensor of ceil(n/4) */
    px_buf dx;
} dropout;

static phx_status dropout_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    dropout *d = phx_module_ctx(self);
    phx_status st = px_check_float_input("phx_dropout_forward", x);
    if (st != PHX_OK) return st;
    phx_device dev = x->storage->device;
    const phx_kernels_v1 *k = px_device_kernels(dev);
    if (!k) return PHX_ENOTFOUND;
    phx_dtype dt = phx_module_compute_dtype(self);
    phx_tensor *out;
    if ((st = px_buf_get(&d->y, dt, x->ndim, x->shape, dev, &out)) != PHX_OK) return st;
    d->masked = phx_module_is_training(self) && d->p > 0.0f;
    if (!d->masked) {
        st = x->dtype == dt ? phx_tensor_copy(out, x) : phx_tensor_cast(out, x);
    } else {
        const phx_tensor *xin = x;
        int64_t words = (x->numel + 3) / 4;
        phx_tensor *mask;
        if ((st = px_buf_get(&d->mask, PHX_I32, 1, &words, dev, &mask)) != PHX_OK) return st;
        if (x->dtype != dt) { /* cast into y first, then mask in place */
            if ((st = phx_tensor_cast(out, x)) != PHX_OK) return st;
            xin = out;
        }
        st = k->dropout_forward(dev.index, x->numel, d->p, d->seed, d->offset, px_tensor_ptr(xin), px_tensor_ptr(out),
                                px_tensor_ptr(mask), dt);
        d->offset += (uint64_t)x->numel;
    }
    if (st != PHX_OK) return st;
    d->shape = out;
    *y = out;
    return PHX_OK;
}

static phx_status dropout_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    dropout *d = phx_module_ctx(self);
    if (!d->shape) return phx_error(PHX_ESTATE, "phx_dropout_backward: no forward to differentiate");
    if (!dx) return PHX_OK;
    const phx_tensor *y = d->shape;
    if (!px_dy_fits(dy, y)) return px_dy_mismatch("phx_dropout_backward", dy, y);
    phx_device dev = y->storage->device;
    const phx_kernels_v1 *k = px_device_kernels(dev);
    if (!k) return PHX_ENOTFOUND;
    phx_tensor *g;
    phx_status st = px_buf_get(&d->dx, y->dtype, y->ndim, y->shape, dev, &g);
    if (st != PHX_OK) return st;
    st = dy->dtype == y->dtype ? phx_tensor_copy(g, dy) : phx_tensor_cast(g, dy);
    if (st == PHX_OK && d->masked)
        st = k->dropout_backward(dev.index, y->numel, d->p, px_tensor_ptr(d->mask.view), px_tensor_ptr(g),
                                 px_tensor_ptr(g), y->dtype);
    if (st == PHX_OK) *dx = g;
    return st;
}

static void dropout_free(phx_module *self)
{
    dropout *d = phx_module_ctx(self);
    if (!d) return;
    px_buf_free(&d->y);
    px_buf_free(&d->mask);
    px_buf_free(&d->dx);
    px_free(d);
}

static phx_module *dropout_clone(const phx_module *self);

static const phx_module_vtable dropout_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "Dropout",
    .forward = dropout_forward,
    .backward = dropout_backward,
    .free = dropout_free,
    .set_train = NULL,
    .clone = dropout_clone,
};

phx_module *phx_dropout_new(float p, uint64_t seed)
{
    if (!(p >= 0.0f && p < 1.0f)) {
        phx_error(PHX_EINVAL, "phx_dropout_new: p = %g, expected 0 <= p < 1", (double)p);
        return NULL;
    }
    dropout *d;
    phx_module *m = px_module_alloc(&dropout_vt, sizeof *d, (void **)&d);
    if (m) {
        d->p = p;
        d->seed = seed;
    }
    return m;
}

static phx_module *dropout_clone(const phx_module *self)
{
    const dropout *d = phx_module_ctx(self);
    phx_module *m = phx_dropout_new(d->p, d->seed);
    if (m) ((dropout *)phx_module_ctx(m))->offset = d->offset;
    return m;
}
