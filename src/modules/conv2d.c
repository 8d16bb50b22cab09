/* Conv2d: PyTorch's nn.Conv2d on NCHW inputs (cross-correlation), the
 * conv2d_* kernels of ABI 1.2. The weight is used in the compute dtype
 * through px_weight_operand (cast once per optimizer step); gradients
 * are f32. */
#include <math.h>
#include <string.h>
#include "src/modules/module-impl.h"
#include "src/modules/cnn-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "phalanx/cnn.h"
#include "src/base/abi.h"

typedef struct conv2d {
    int64_t in, out, kh, kw;
    phx_conv2d_opts o;
    phx_param *w, *b;
    px_io io; /* x, dx (N, in, H, W); y (N, out, OH, OW) */
    phx_conv2d_desc d; /* of the last forward */
    px_buf wc;
    uint64_t wc_version;
} conv2d;

phx_conv2d_opts phx_conv2d_opts_default(void)
{
    phx_conv2d_opts o = PHX_CONV2D_OPTS_INIT;
    return o;
}

/* The window of x for this layer: padding "same" pads dil (k - 1) in
 * all, the smaller half at the top/left. */
static phx_status conv_desc(const conv2d *C, const phx_tensor *x, phx_conv2d_desc *d)
{
    const char *who = "phx_conv2d_forward";
    phx_status st = px_check_nchw(who, x, C->in, "in_channels");
    if (st != PHX_OK) return st;
    int64_t ph = C->o.padding[0], pw = C->o.padding[1];
    if (C->o.padding_same) ph = C->o.dilation[0] * (C->kh - 1) / 2, pw = C->o.dilation[1] * (C->kw - 1) / 2;
    *d = (phx_conv2d_desc){.n = x->shape[0],
                           .c = C->in,
                           .h = x->shape[2],
                           .w = x->shape[3],
                           .k = C->out,
                           .kh = C->kh,
                           .kw = C->kw,
                           .stride_h = C->o.stride[0],
                           .stride_w = C->o.stride[1],
                           .pad_h = ph,
                           .pad_w = pw,
                           .dil_h = C->o.dilation[0],
                           .dil_w = C->o.dilation[1],
                           .groups = C->o.groups};
    if (C->o.padding_same) {
        d->oh = d->h, d->ow = d->w;
        return PHX_OK;
    }
    return px_window_out(who, d);
}

static phx_status conv_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    conv2d *C = phx_module_ctx(self);
    phx_status st = px_check_float_input("phx_conv2d_forward", x);
    phx_conv2d_desc d;
    if (st != PHX_OK || (st = conv_desc(C, x, &d)) != PHX_OK ||
        (st = px_check_same_device("phx_conv2d_forward", x, C->w->value)) != PHX_OK)
        return st;
    phx_device dev = x->storage->device;
    const phx_kernels_v1 *k = px_device_kernels(dev);
    if (!k) return PHX_ENOTFOUND;
    PX_NEED_SLOT("phx_conv2d_forward", dev, k, conv2d_forward);
    phx_dtype dt = phx_module_compute_dtype(self);
    const phx_tensor *xin, *w;
    phx_tensor *out;
    int64_t shape[4] = {d.n, d.k, d.oh, d.ow};
    if ((st = px_as_dtype(&C->io.xc, x, dt, &xin)) != PHX_OK ||
        (st = px_buf_get(&C->io.y, dt, 4, shape, dev, &out)) != PHX_OK ||
        !(w = px_weight_operand(&C->wc, &C->wc_version, C->w, dt, &st)))
        return st;
    st = k->conv2d_forward(dev.index, &d, px_tensor_ptr(xin), px_tensor_ptr(w),
                           C->b ? px_tensor_ptr(C->b->value) : NULL, px_tensor_ptr(out), dt);
    if (st != PHX_OK) return st;
    C->d = d;
    px_io_keep(&C->io, xin);
    *y = out;
    return PHX_OK;
}

/* Gradients in autograd's order: weight, bias; dx last. */
static phx_status conv_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    conv2d *C = phx_module_ctx(self);
    if (!C->io.x) return phx_error(PHX_ESTATE, "phx_conv2d_backward: no forward to differentiate");
    if (!px_dy_fits(dy, C->io.y.view)) return px_dy_mismatch("phx_conv2d_backward", dy, C->io.y.view);
    const phx_tensor *x = C->io.x;
    phx_device dev = x->storage->device;
    const phx_kernels_v1 *k = px_device_kernels(dev);
    if (!k) return PHX_ENOTFOUND;
    const phx_tensor *g, *w;
    phx_tensor *d;
    phx_status st = px_io_backward(&C->io, dy, &g, &d);
    if (st != PHX_OK) return st;
    st = k->conv2d_backward_weight(dev.index, &C->d, px_tensor_ptr(x), px_tensor_ptr(g), px_tensor_ptr(C->w->grad),
                                   C->b ? px_tensor_ptr(C->b->grad) : NULL, x->dtype);
    if (st != PHX_OK) return st;
    phx_param_grad_ready(C->w);
    if (C->b) phx_param_grad_ready(C->b);
    if (!dx) return PHX_OK;
    if (!(w = px_weight_operand(&C->wc, &C->wc_version, C->w, x->dtype, &st))) return st;
    st = k->conv2d_backward_data(dev.index, &C->d, px_tensor_ptr(g), px_tensor_ptr(w), px_tensor_ptr(d), x->dtype);
    if (st == PHX_OK) *dx = d;
    return st;
}

static void conv_free(phx_module *self)
{
    conv2d *C = phx_module_ctx(self);
    if (!C) return;
    px_io_free(&C->io);
    px_buf_free(&C->wc);
    px_free(C);
}

static phx_module *conv_clone(const phx_module *self);

static const phx_module_vtable conv2d_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "Conv2d",
    .forward = conv_forward,
    .backward = conv_backward,
    .free = conv_free,
    .set_train = NULL,
    .clone = conv_clone,
};

static phx_status check_opts(int64_t in, int64_t out, int64_t kh, int64_t kw, const phx_conv2d_opts *o)
{
    const char *who = "phx_conv2d_new";
    if (in < 1 || out < 1 || kh < 1 || kw < 1)
        return phx_error(PHX_EINVAL, "%s: in_channels %lld, out_channels %lld, kernel %lldx%lld: expected >= 1", who,
                         (long long)in, (long long)out, (long long)kh, (long long)kw);
    if (o->stride[0] < 1 || o->stride[1] < 1 || o->dilation[0] < 1 || o->dilation[1] < 1 || o->padding[0] < 0 ||
        o->padding[1] < 0)
        return phx_error(PHX_EINVAL, "%s: stride (%lld, %lld), padding (%lld, %lld), dilation (%lld, %lld): expected "
                         "stride and dilation >= 1, padding >= 0", who, (long long)o->stride[0],
                         (long long)o->stride[1], (long long)o->padding[0], (long long)o->padding[1],
                         (long long)o->dilation[0], (long long)o->dilation[1]);
    if (o->groups < 1 || in % o->groups || out % o->groups)
        return phx_error(PHX_EINVAL, "%s: groups %lld must divide in_channels %lld and out_channels %lld", who,
                         (long long)o->groups, (long long)in, (long long)out);
    if (o->padding_same && (o->stride[0] != 1 || o->stride[1] != 1))
        return phx_error(PHX_EINVAL, "%s: padding='same' is not supported for strided convolutions (stride %lld, %lld)",
                         who, (long long)o->stride[0], (long long)o->stride[1]);
    return PHX_OK;
}

/* A Conv2d of checked options whose parameters are drawn from rng, or
 * left undrawn when rng is NULL (a clone copies the original's). */
static phx_module *conv_make(int64_t in, int64_t out, int64_t kh, int64_t kw, const phx_conv2d_opts *o, phx_rng *rng)
{
    conv2d *C;
    phx_module *m = px_module_alloc(&conv2d_vt, sizeof *C, (void **)&C);
    if (!m) return NULL;
    C->in = in, C->out = out, C->kh = kh, C->kw = kw, C->o = *o;
    C->wc_version = UINT64_MAX;
    float bound = 1.0f / sqrtf((float)(in / o->groups * kh * kw)); /* 1 / sqrt(fan_in) */
    int64_t ws[4] = {out, in / o->groups, kh, kw};
    if (!(C->w = px_add_uniform_param(m, "weight", 4, ws, bound, rng)) ||
        (o->bias && !(C->b = px_add_uniform_param(m, "bias", 1, &out, bound, rng)))) {
        phx_module_free(m);
        return NULL;
    }
    return m;
}

phx_module *phx_conv2d_new(int64_t in_channels, int64_t out_channels, int64_t kh, int64_t kw,
                           const phx_conv2d_opts *opts, phx_rng *rng)
{
    phx_conv2d_opts o = PHX_CONV2D_OPTS_INIT;
    if (px_abi_in(&o, sizeof o, opts, "phx_conv2d_new", "phx_conv2d_opts", "PHX_CONV2D_OPTS_INIT")) return NULL;
    if (check_opts(in_channels, out_channels, kh, kw, &o) != PHX_OK) return NULL;
    phx_rng *own = NULL;
    if (!rng && !(rng = own = phx_rng_new(0))) return NULL;
    phx_module *m = conv_make(in_channels, out_channels, kh, kw, &o, rng);
    phx_rng_free(own);
    return m;
}

static phx_module *conv_clone(const phx_module *self)
{
    const conv2d *C = phx_module_ctx(self);
    return px_module_clone_values(conv_make(C->in, C->out, C->kh, C->kw, &C->o, NULL), self);
}
