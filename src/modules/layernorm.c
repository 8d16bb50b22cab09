/* LayerNorm over the last dim: y = (x - mean) * rstd * w + b with the
 * biased variance and eps inside the square root (PyTorch's LayerNorm).
 * Statistics are f32 whatever the compute dtype; x and y are in the compute
 * dtype; w, b and their gradients are f32. */
#include "src/modules/module-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"

typedef struct layernorm {
    int64_t dim;
    float eps;
    phx_param *w, *b; /* (dim) each, or NULL without affine */
    px_io io; /* x, y, dx (rows, dim) */
    px_buf mean, rstd; /* (rows) f32 */
} layernorm;

static phx_status ln_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    layernorm *L = phx_module_ctx(self);
    phx_status st = px_check_float_input("phx_layernorm_forward", x);
    if (st != PHX_OK) return st;
    if (x->ndim < 1 || x->shape[x->ndim - 1] != L->dim)
        return phx_error(PHX_EINVAL, "phx_layernorm_forward: input's last dim is %lld, layer normalizes %lld",
                         (long long)(x->ndim ? x->shape[x->ndim - 1] : 0), (long long)L->dim);
    phx_device dev = x->storage->device;
    if (L->w && !phx_device_equal(dev, L->w->value->storage->device))
        return phx_error(PHX_EINVAL, "phx_layernorm_forward: input and weights are on different devices");
    const phx_kernels_v1 *k = px_device_kernels(dev);
    if (!k) return PHX_ENOTFOUND;
    phx_dtype dt = phx_module_compute_dtype(self);
    int64_t rows = x->numel / L->dim;
    const phx_tensor *xin;
    phx_tensor *out, *mean, *rstd;
    if ((st = px_io_forward(&L->io, x, dt, -1, &xin, &out)) != PHX_OK ||
        (st = px_buf_get(&L->mean, PHX_F32, 1, &rows, dev, &mean)) != PHX_OK ||
        (st = px_buf_get(&L->rstd, PHX_F32, 1, &rows, dev, &rstd)) != PHX_OK)
        return st;
    st = k->layernorm_forward(dev.index, rows, L->dim, L->eps, px_tensor_ptr(xin),
                              L->w ? px_tensor_ptr(L->w->value) : NULL, L->b ? px_tensor_ptr(L->b->value) : NULL,
                              px_tensor_ptr(out), px_tensor_ptr(mean), px_tensor_ptr(rstd), dt);
    if (st != PHX_OK) return st;
    px_io_keep(&L->io, xin);
    *y = out;
    return PHX_OK;
}

/* Gradients in PyTorch's autograd order: weight, then bias. */
static phx_status ln_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    layernorm *L = phx_module_ctx(self);
    if (!L->io.x) return phx_error(PHX_ESTATE, "phx_layernorm_backward: no forward to differentiate");
    const phx_tensor *x = L->io.x;
    if (!px_dy_fits(dy, x)) return px_dy_mismatch("phx_layernorm_backward", dy, x);
    phx_device dev = x->storage->device;
    const phx_kernels_v1 *k = px_device_kernels(dev);
    if (!k) return PHX_ENOTFOUND;
    const phx_tensor *g;
    phx_tensor *d;
    phx_status st;
    if ((st = px_io_backward(&L->io, dy, &g, &d)) != PHX_OK) return st;
    st = k->layernorm_backward(
        dev.index, x->numel / L->dim, L->dim, px_tensor_ptr(x), L->w ? px_tensor_ptr(L->w->value) : NULL,
        px_tensor_ptr(L->mean.view), px_tensor_ptr(L->rstd.view), px_tensor_ptr(g), px_tensor_ptr(d),
        L->w ? px_tensor_ptr(L->w->grad) : NULL, L->b ? px_tensor_ptr(L->b->grad) : NULL, x->dtype);
    if (st != PHX_OK) return st;
    if (L->w) phx_param_grad_ready(L->w);
    if (L->b) phx_param_grad_ready(L->b);
    if (dx) *dx = d;
    return PHX_OK;
}

static void ln_free(phx_module *self)
{
    layernorm *L = phx_module_ctx(self);
    if (!L) return;
    px_io_free(&L->io);
    px_buf_free(&L->mean);
    px_buf_free(&L->rstd);
    px_free(L);
}

static phx_module *ln_clone(const phx_module *self);

static const phx_module_vtable layernorm_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "LayerNorm",
    .forward = ln_forward,
    .backward = ln_backward,
    .free = ln_free,
    .set_train = NULL,
    .clone = ln_clone,
};

phx_module *phx_layernorm_new(int64_t dim, float eps, bool affine)
{
    if (dim <= 0 || !(eps >= 0.0f)) {
        phx_error(PHX_EINVAL, "phx_layernorm_new: dim %lld must be > 0 and eps %g >= 0", (long long)dim, (double)eps);
        return NULL;
    }
    layernorm *L;
    phx_module *m = px_module_alloc(&layernorm_vt, sizeof *L, (void **)&L);
    if (!m) return NULL;
    L->dim = dim;
    L->eps = eps;
    if (affine && (!(L->w = px_add_filled_param(m, "weight", dim, 1.0)) || !(L->b = px_add_filled_param(m, "bias", dim, 0.0)))) {
        phx_module_free(m);
        return NULL;
    }
    return m;
}

static phx_module *ln_clone(const phx_module *self)
{
    const layernorm *L = phx_module_ctx(self);
    return px_module_clone_values(phx_layernorm_new(L->dim, L->eps, L->w != NULL), self);
}
