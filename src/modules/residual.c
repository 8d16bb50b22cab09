/* Residual: y = x + fn(x), backward dx = dy + dfn/dx (dy). x and fn's
 * output are added in the compute dtype (x is cast when it differs). */
#include "src/modules/transformer-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "phalanx/transformer.h"

typedef struct residual {
    phx_module *fn;
    px_buf xc; /* x in the compute dtype */
    px_buf y;
    px_buf dyc; /* dy in y's dtype */
    px_buf dx;
    bool have;
} residual;

static phx_status res_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    residual *R = phx_module_ctx(self);
    phx_status st = px_check_float_input("phx_residual_forward", x);
    if (st != PHX_OK) return st;
    phx_tensor *f;
    if ((st = phx_module_forward(R->fn, x, &f)) != PHX_OK) return st;
    if (!phx_tensor_same_shape(f, x)) {
        char a[64], b[64];
        return phx_error(PHX_EINVAL, "phx_residual_forward: fn (%s) maps %s to %s, expected the input's shape",
                         phx_module_type(R->fn), phx_tensor_shape_str(x, a, sizeof a),
                         phx_tensor_shape_str(f, b, sizeof b));
    }
    phx_device dev = x->storage->device;
    const phx_kernels_v1 *k = px_device_kernels(dev);
    if (!k) return PHX_ENOTFOUND;
    PX_NEED_SLOT("phx_residual_forward", dev, k, add);
    phx_dtype dt = f->dtype;
    const phx_tensor *xin;
    phx_tensor *out;
    if ((st = px_as_dtype(&R->xc, x, dt, &xin)) != PHX_OK ||
        (st = px_buf_get(&R->y, dt, x->ndim, x->shape, dev, &out)) != PHX_OK)
        return st;
    if ((st = k->add(dev.index, x->numel, px_tensor_ptr(xin), px_tensor_ptr(f), px_tensor_ptr(out), dt)) != PHX_OK)
        return st;
    R->have = true;
    *y = out;
    return PHX_OK;
}

static phx_status res_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    residual *R = phx_module_ctx(self);
    if (!R->have) return phx_error(PHX_ESTATE, "phx_residual_backward: no forward to differentiate");
    const phx_tensor *y = R->y.view;
    if (!px_dy_fits(dy, y)) return px_dy_mismatch("phx_residual_backward", dy, y);
    phx_tensor *df = NULL;
    phx_status st = phx_module_backward(R->fn, dy, dx ? &df : NULL);
    if (st != PHX_OK || !dx) return st;
    phx_device dev = y->storage->device;
    const phx_kernels_v1 *k = px_device_kernels(dev);
    if (!k) return PHX_ENOTFOUND;
    const phx_tensor *g, *dfc;
    phx_tensor *d;
    if ((st = px_as_dtype(&R->dyc, dy, y->dtype, &g)) != PHX_OK ||
        (st = px_buf_get(&R->dx, y->dtype, y->ndim, y->shape, dev, &d)) != PHX_OK)
        return st;
    if (!df || !px_dy_fits(df, y))
        return phx_error(PHX_EINVAL, "phx_residual_backward: fn (%s) gave no input gradient of the input's shape",
                         phx_module_type(R->fn));
    dfc = df;
    if (df->dtype != y->dtype) { /* cast fn's gradient into dx, then add dy in place */
        if ((st = phx_tensor_cast(d, df)) != PHX_OK) return st;
        dfc = d;
    }
    st = k->add(dev.index, y->numel, px_tensor_ptr(g), px_tensor_ptr(dfc), px_tensor_ptr(d), y->dtype);
    if (st == PHX_OK) *dx = d;
    return st;
}

static void res_free(phx_module *self)
{
    residual *R = phx_module_ctx(self);
    if (!R) return;
    px_buf_free(&R->xc);
    px_buf_free(&R->y);
    px_buf_free(&R->dyc);
    px_buf_free(&R->dx);
    px_free(R);
}

static phx_module *res_clone(const phx_module *self);

static const phx_module_vtable residual_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "Residual",
    .forward = res_forward,
    .backward = res_backward,
    .free = res_free,
    .clone = res_clone,
};

phx_module *phx_residual_new(phx_module *fn)
{
    if (!fn) {
        px_error_null("phx_residual_new", "fn");
        return NULL;
    }
    residual *R;
    phx_module *m = px_module_alloc(&residual_vt, sizeof *R, (void **)&R);
    if (!m) {
        phx_module_free(fn);
        return NULL;
    }
    if (phx_module_add_child(m, "fn", fn) != PHX_OK) {
        if (!fn->parent) phx_module_free(fn);
        phx_module_free(m);
        return NULL;
    }
    R->fn = fn;
    return m;
}

static phx_module *res_clone(const phx_module *self)
{
    const residual *R = phx_module_ctx(self);
    phx_module *fn = phx_module_clone(R->fn);
    return fn ? phx_residual_new(fn) : NULL;
}
