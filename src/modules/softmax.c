/* Softmax and LogSoftmax over the last dim (nn.Softmax(dim=-1),
 * nn.LogSoftmax(dim=-1)): f32 math, output in the compute dtype;
 * backward works from the output. */
#include "src/modules/transformer-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "phalanx/transformer.h"

typedef struct softmax {
    int log;
    px_io io; /* y of the last forward; dx */
    bool have;
} softmax;

static phx_status sm_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    softmax *S = phx_module_ctx(self);
    const char *who = S->log ? "phx_log_softmax_forward" : "phx_softmax_forward";
    phx_status st = px_check_float_input(who, x);
    if (st != PHX_OK) return st;
    if (x->ndim < 1 || x->shape[x->ndim - 1] < 1)
        return phx_error(PHX_EINVAL, "%s: input has no last dim to normalise over", who);
    phx_device dev = x->storage->device;
    const phx_kernels_v1 *k = px_device_kernels(dev);
    if (!k) return PHX_ENOTFOUND;
    PX_NEED_SLOT(who, dev, k, softmax_forward);
    phx_dtype dt = phx_module_compute_dtype(self);
    const phx_tensor *xin;
    phx_tensor *out;
    if ((st = px_io_forward(&S->io, x, dt, -1, &xin, &out)) != PHX_OK) return st;
    int64_t cols = x->shape[x->ndim - 1];
    st = k->softmax_forward(dev.index, x->numel / cols, cols, 1.0f, 0, S->log, px_tensor_ptr(xin), px_tensor_ptr(out),
                            dt);
    if (st != PHX_OK) return st;
    S->have = true;
    *y = out;
    return PHX_OK;
}

static phx_status sm_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    softmax *S = phx_module_ctx(self);
    const char *who = S->log ? "phx_log_softmax_backward" : "phx_softmax_backward";
    if (!S->have) return phx_error(PHX_ESTATE, "%s: no forward to differentiate", who);
    if (!dx) return PHX_OK;
    const phx_tensor *y = S->io.y.view;
    if (!px_dy_fits(dy, y)) return px_dy_mismatch(who, dy, y);
    phx_device dev = y->storage->device;
    const phx_kernels_v1 *k = px_device_kernels(dev);
    if (!k) return PHX_ENOTFOUND;
    PX_NEED_SLOT(who, dev, k, softmax_backward);
    const phx_tensor *g;
    phx_tensor *d;
    phx_status st = px_as_dtype(&S->io.dyc, dy, y->dtype, &g);
    if (st == PHX_OK) st = px_buf_get(&S->io.dx, y->dtype, y->ndim, y->shape, dev, &d);
    if (st != PHX_OK) return st;
    int64_t cols = y->shape[y->ndim - 1];
    st = k->softmax_backward(dev.index, y->numel / cols, cols, 1.0f, 0, S->log, px_tensor_ptr(y), px_tensor_ptr(g),
                             px_tensor_ptr(d), y->dtype);
    if (st == PHX_OK) *dx = d;
    return st;
}

static void sm_free(phx_module *self)
{
    softmax *S = phx_module_ctx(self);
    if (!S) return;
    px_io_free(&S->io);
    px_free(S);
}

static phx_module *sm_clone(const phx_module *self);

static const phx_module_vtable softmax_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "Softmax",
    .forward = sm_forward,
    .backward = sm_backward,
    .free = sm_free,
    .clone = sm_clone,
};

static const phx_module_vtable log_softmax_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "LogSoftmax",
    .forward = sm_forward,
    .backward = sm_backward,
    .free = sm_free,
    .clone = sm_clone,
};

static phx_module *sm_new(int log)
{
    softmax *S;
    phx_module *m = px_module_alloc(log ? &log_softmax_vt : &softmax_vt, sizeof *S, (void **)&S);
    if (m) S->log = log;
    return m;
}

phx_module *phx_softmax_new(void)
{
    return sm_new(0);
}
phx_module *phx_log_softmax_new(void)
{
    return sm_new(1);
}

static phx_module *sm_clone(const phx_module *self)
{
    return sm_new(((const softmax *)phx_module_ctx(self))->log);
}
