/* Linear: y = x W^T + b over the last dim of x.
 *
 * With compute dtype D != f32 the layer keeps a D copy of W, refreshed only
 * when the parameter's version changed (once per optimizer step), runs the
 * products on D operands with f32 accumulation and stores y in D. Weight
 * and bias gradients are f32. With f32 there is no extra copy. */
#include <math.h>
#include <string.h>
#include "src/modules/module-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"

typedef struct linear {
    int64_t in, out;
    phx_param *w; /* (out, in) */
    phx_param *b; /* (out) or NULL */
    px_io io; /* x, dx (rows, in); y (rows, out) */
    px_buf wc; /* (out, in) W in the compute dtype */
    uint64_t wc_version; /* version of W that wc holds; UINT64_MAX: none */
} linear;

static const phx_tensor *weight_operand(linear *L, phx_dtype dt, phx_status *st)
{
    return px_weight_operand(&L->wc, &L->wc_version, L->w, dt, st);
}

static phx_status linear_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    linear *L = phx_module_ctx(self);
    phx_status st = px_check_float_input("phx_linear_forward", x);
    if (st != PHX_OK) return st;
    if (x->ndim < 1 || x->shape[x->ndim - 1] != L->in)
        return phx_error(PHX_EINVAL, "phx_linear_forward: input has %lld features, layer expects %lld",
                         (long long)(x->ndim ? x->shape[x->ndim - 1] : 0), (long long)L->in);
    phx_device dev = x->storage->device;
    if ((st = px_check_same_device("phx_linear_forward", x, L->w->value)) != PHX_OK) return st;
    const phx_kernels_v1 *k = px_device_kernels(dev);
    if (!k) return PHX_ENOTFOUND;
    phx_dtype dt = phx_module_compute_dtype(self);
    const phx_tensor *xin, *w;
    phx_tensor *out;
    if ((st = px_io_forward(&L->io, x, dt, L->out, &xin, &out)) != PHX_OK || !(w = weight_operand(L, dt, &st)))
        return st;
    int64_t rows = L->in ? x->numel / L->in : 0;
    st = k->gemm(dev.index, 0, 1, rows, L->out, L->in, 1.0f, px_tensor_ptr(xin), L->in, px_tensor_ptr(w), L->in, dt,
                 0.0f, px_tensor_ptr(out), L->out, dt);
    if (st == PHX_OK && L->b)
        st = k->bias_add(dev.index, rows, L->out, px_tensor_ptr(out), dt, px_tensor_ptr(L->b->value));
    if (st != PHX_OK) return st;
    px_io_keep(&L->io, xin);
    *y = out;
    return PHX_OK;
}

/* Gradients come out as PyTorch's autograd produces them (bias, then
 * weight), each announced as soon as it is final; dx last. */
static phx_status linear_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    linear *L = phx_module_ctx(self);
    if (!L->io.x) return phx_error(PHX_ESTATE, "phx_linear_backward: no forward to differentiate");
    const phx_tensor *x = L->io.x;
    if (!phx_dtype_is_float(dy->dtype) || dy->ndim != x->ndim || dy->numel != x->numel / (L->in ? L->in : 1) * L->out ||
        dy->shape[dy->ndim - 1] != L->out)
        return px_dy_mismatch("phx_linear_backward", dy, L->io.y.view);
    phx_device dev = x->storage->device;
    const phx_kernels_v1 *k = px_device_kernels(dev);
    if (!k) return PHX_ENOTFOUND;
    phx_dtype dt = x->dtype;
    int64_t rows = x->numel / (L->in ? L->in : 1);
    const phx_tensor *g;
    phx_status st = px_as_dtype(&L->io.dyc, dy, dt, &g);
    if (st != PHX_OK) return st;
    if (L->b) {
        st = k->bias_grad(dev.index, rows, L->out, px_tensor_ptr(g), dt, 1.0f, px_tensor_ptr(L->b->grad));
        if (st != PHX_OK) return st;
        phx_param_grad_ready(L->b);
    }
    /* dW (out, in) += dy^T (out, rows) x (rows, in) */
    st = k->gemm(dev.index, 1, 0, L->out, L->in, rows, 1.0f, px_tensor_ptr(g), L->out, px_tensor_ptr(x), L->in, dt,
                 1.0f, px_tensor_ptr(L->w->grad), L->in, PHX_F32);
    if (st != PHX_OK) return st;
    phx_param_grad_ready(L->w);
    if (!dx) return PHX_OK;
    const phx_tensor *w = weight_operand(L, dt, &st);
    phx_tensor *d;
    if (!w || (st = px_buf_like(&L->io.dx, dt, x, L->in, &d)) != PHX_OK) return st;
    /* dx (rows, in) = dy (rows, out) W (out, in) */
    st = k->gemm(dev.index, 0, 0, rows, L->in, L->out, 1.0f, px_tensor_ptr(g), L->out, px_tensor_ptr(w), L->in, dt,
                 0.0f, px_tensor_ptr(d), L->in, dt);
    if (st == PHX_OK) *dx = d;
    return st;
}

static void linear_free(phx_module *self)
{
    linear *L = phx_module_ctx(self);
    if (!L) return;
    px_io_free(&L->io);
    px_buf_free(&L->wc);
    px_free(L);
}

static phx_module *linear_clone(const phx_module *self);

static const phx_module_vtable linear_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "Linear",
    .forward = linear_forward,
    .backward = linear_backward,
    .free = linear_free,
    .set_train = NULL,
    .clone = linear_clone,
};

/* A Linear with uninitialised parameters. */
static phx_module *linear_alloc(int64_t in, int64_t out, bool bias)
{
    linear *L;
    phx_module *m = px_module_alloc(&linear_vt, sizeof *L, (void **)&L);
    if (!m) return NULL;
    L->in = in;
    L->out = out;
    L->wc_version = UINT64_MAX;
    int64_t ws[2] = {out, in};
    phx_tensor *w = phx_tensor_new(PHX_F32, 2, ws, phx_cpu());
    if (!w || !(L->w = phx_module_add_param(m, "weight", w))) {
        phx_tensor_free(w);
        phx_module_free(m);
        return NULL;
    }
    if (bias) {
        phx_tensor *b = phx_tensor_new(PHX_F32, 1, &out, phx_cpu());
        if (!b || !(L->b = phx_module_add_param(m, "bias", b))) {
            phx_tensor_free(b);
            phx_module_free(m);
            return NULL;
        }
    }
    return m;
}

phx_module *phx_linear_new(int64_t in_features, int64_t out_features, bool bias, phx_rng *rng)
{
    if (in_features <= 0 || out_features <= 0) {
        phx_error(PHX_EINVAL, "phx_linear_new: in_features %lld and out_features %lld must be > 0",
                  (long long)in_features, (long long)out_features);
        return NULL;
    }
    phx_rng *own = NULL;
    if (!rng && !(rng = own = phx_rng_new(0))) return NULL;
    phx_module *m = linear_alloc(in_features, out_features, bias);
    if (m) {
        /* kaiming_uniform_(a=sqrt(5)): gain sqrt(2/(1+5)), bound gain*sqrt(3/in) = 1/sqrt(in). */
        linear *L = phx_module_ctx(m);
        float bound = (float)(1.0 / sqrt((double)in_features));
        if (phx_rng_uniform(rng, L->w->value, -bound, bound) != PHX_OK ||
            (L->b && phx_rng_uniform(rng, L->b->value, -bound, bound) != PHX_OK)) {
            phx_module_free(m);
            m = NULL;
        }
    }
    phx_rng_free(own);
    return m;
}

static phx_module *linear_clone(const phx_module *self)
{
    const linear *L = phx_module_ctx(self);
    return px_module_clone_values(linear_alloc(L->in, L->out, L->b != NULL), self);
}
