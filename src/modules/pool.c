/* MaxPool2d, AvgPool2d and AdaptiveAvgPool2d (for output sizes that
 * divide the input's: an AvgPool2d with kernel = stride = input / output)
 * and Flatten. Pooling reads NCHW in the compute dtype and has no
 * parameters. */
#include <string.h>
#include "src/modules/module-impl.h"
#include "src/autograd/autograd-impl.h"
#include "src/modules/cnn-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "phalanx/cnn.h"

enum { POOL_MAX, POOL_AVG, POOL_ADAPTIVE };

typedef struct pool {
    int kind;
    int64_t k, stride, pad; /* adaptive: k, stride = the output size */
    bool count_include_pad;
    px_io io;
    px_buf argmax; /* i32 (N, C, OH, OW) */
    phx_conv2d_desc d;
} pool;

static const char *pool_who(const pool *P)
{
    static const char *names[] = {"phx_maxpool2d_forward", "phx_avgpool2d_forward", "phx_adaptive_avgpool2d_forward"};
    return names[P->kind];
}

static phx_status pool_desc(const pool *P, const phx_tensor *x, phx_conv2d_desc *d)
{
    const char *who = pool_who(P);
    if (x->ndim != 4) {
        char s[64];
        return phx_error(PHX_EINVAL, "%s: input is %s, expected (N, C, H, W)", who,
                         phx_tensor_shape_str(x, s, sizeof s));
    }
    *d = (phx_conv2d_desc){.n = x->shape[0],
                           .c = x->shape[1],
                           .h = x->shape[2],
                           .w = x->shape[3],
                           .k = x->shape[1],
                           .kh = P->k,
                           .kw = P->k,
                           .stride_h = P->stride,
                           .stride_w = P->stride,
                           .pad_h = P->pad,
                           .pad_w = P->pad,
                           .dil_h = 1,
                           .dil_w = 1,
                           .groups = x->shape[1]};
    if (P->kind == POOL_ADAPTIVE) {
        int64_t oh = P->k, ow = P->stride;
        if (d->h % oh || d->w % ow)
            return phx_error(PHX_EUNSUPPORTED,
                             "%s: output %lldx%lld does not divide the input %lldx%lld (only "
                             "sizes that divide it are supported)",
                             who, (long long)oh, (long long)ow, (long long)d->h, (long long)d->w);
        d->kh = d->stride_h = d->h / oh, d->kw = d->stride_w = d->w / ow, d->pad_h = d->pad_w = 0;
    }
    return px_window_out(who, d);
}

static phx_status pool_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    pool *P = phx_module_ctx(self);
    phx_conv2d_desc d;
    phx_status st = px_check_float_input(pool_who(P), x);
    if (st != PHX_OK || (st = pool_desc(P, x, &d)) != PHX_OK) return st;
    phx_device dev = x->storage->device;
    const phx_kernels_v1 *k = px_device_kernels(dev);
    if (!k) return PHX_ENOTFOUND;
    PX_NEED_SLOT(pool_who(P), dev, k, avgpool2d_forward);
    phx_dtype dt = phx_module_compute_dtype(self);
    int64_t shape[4] = {d.n, d.c, d.oh, d.ow};
    const phx_tensor *xin;
    phx_tensor *out, *am = NULL;
    if ((st = px_as_dtype(&P->io.xc, x, dt, &xin)) != PHX_OK ||
        (st = px_buf_get(&P->io.y, dt, 4, shape, dev, &out)) != PHX_OK)
        return st;
    if (P->kind == POOL_MAX) {
        if ((st = px_buf_get(&P->argmax, PHX_I32, 4, shape, dev, &am)) != PHX_OK) return st;
        st = k->maxpool2d_forward(dev.index, &d, px_tensor_ptr(xin), px_tensor_ptr(out), px_tensor_ptr(am), dt);
    } else {
        st = k->avgpool2d_forward(dev.index, &d, P->kind == POOL_ADAPTIVE || P->count_include_pad, px_tensor_ptr(xin),
                                  px_tensor_ptr(out), dt);
    }
    if (st != PHX_OK) return st;
    P->d = d;
    px_io_keep(&P->io, xin);
    *y = out;
    return PHX_OK;
}

static phx_status pool_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    pool *P = phx_module_ctx(self);
    if (!P->io.x) return phx_error(PHX_ESTATE, "phx_pool2d_backward: no forward to differentiate");
    if (!px_dy_fits(dy, P->io.y.view)) return px_dy_mismatch("phx_pool2d_backward", dy, P->io.y.view);
    if (!dx) return PHX_OK;
    const phx_tensor *x = P->io.x, *g;
    phx_device dev = x->storage->device;
    const phx_kernels_v1 *k = px_device_kernels(dev);
    if (!k) return PHX_ENOTFOUND;
    phx_tensor *d;
    phx_status st = px_io_backward(&P->io, dy, &g, &d);
    if (st != PHX_OK) return st;
    if (P->kind == POOL_MAX)
        st = k->maxpool2d_backward(dev.index, &P->d, px_tensor_ptr(P->argmax.view), px_tensor_ptr(g), px_tensor_ptr(d),
                                   x->dtype);
    else
        st = k->avgpool2d_backward(dev.index, &P->d, P->kind == POOL_ADAPTIVE || P->count_include_pad, px_tensor_ptr(g),
                                   px_tensor_ptr(d), x->dtype);
    if (st == PHX_OK) *dx = d;
    return st;
}

static void pool_free(phx_module *self)
{
    pool *P = phx_module_ctx(self);
    if (!P) return;
    px_io_free(&P->io);
    px_buf_free(&P->argmax);
    px_free(P);
}

static phx_module *pool_clone(const phx_module *self);

static const phx_module_vtable max_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "MaxPool2d",
    .forward = pool_forward,
    .backward = pool_backward,
    .free = pool_free,
    .clone = pool_clone,
};
static const phx_module_vtable avg_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "AvgPool2d",
    .forward = pool_forward,
    .backward = pool_backward,
    .free = pool_free,
    .clone = pool_clone,
};
static const phx_module_vtable adaptive_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "AdaptiveAvgPool2d",
    .forward = pool_forward,
    .backward = pool_backward,
    .free = pool_free,
    .clone = pool_clone,
};

static phx_module *pool_new(int kind, int64_t k, int64_t stride, int64_t pad, bool cip)
{
    static const phx_module_vtable *vts[] = {&max_vt, &avg_vt, &adaptive_vt};
    pool *P;
    phx_module *m = px_module_alloc(vts[kind], sizeof *P, (void **)&P);
    if (!m) return NULL;
    P->kind = kind, P->k = k, P->stride = stride, P->pad = pad, P->count_include_pad = cip;
    return m;
}

static phx_module *window_pool(int kind, const char *who, int64_t kernel, int64_t stride, int64_t padding, bool cip)
{
    if (stride == 0) stride = kernel;
    if (kernel < 1 || stride < 1 || padding < 0 || 2 * padding > kernel) {
        phx_error(PHX_EINVAL,
                  "%s: kernel %lld, stride %lld, padding %lld: expected kernel, stride >= 1 and padding "
                  "at most half the kernel",
                  who, (long long)kernel, (long long)stride, (long long)padding);
        return NULL;
    }
    return pool_new(kind, kernel, stride, padding, cip);
}

phx_module *phx_maxpool2d_new(int64_t kernel, int64_t stride, int64_t padding)
{
    return window_pool(POOL_MAX, "phx_maxpool2d_new", kernel, stride, padding, false);
}

phx_module *phx_avgpool2d_new(int64_t kernel, int64_t stride, int64_t padding, bool count_include_pad)
{
    return window_pool(POOL_AVG, "phx_avgpool2d_new", kernel, stride, padding, count_include_pad);
}

phx_module *phx_adaptive_avgpool2d_new(int64_t oh, int64_t ow)
{
    if (oh < 1 || ow < 1) {
        phx_error(PHX_EINVAL, "phx_adaptive_avgpool2d_new: output %lldx%lld, expected >= 1", (long long)oh,
                  (long long)ow);
        return NULL;
    }
    return pool_new(POOL_ADAPTIVE, oh, ow, 0, true);
}

static phx_module *pool_clone(const phx_module *self)
{
    const pool *P = phx_module_ctx(self);
    return pool_new(P->kind, P->k, P->stride, P->pad, P->count_include_pad);
}

/* ---- Flatten: views, no copies ---- */

typedef struct flatten {
    phx_tensor *y, *dx; /* views of the last input and gradient */
    int ndim;
    int64_t shape[PHX_MAX_DIMS]; /* of the last input */
} flatten;

static phx_status flat_view(phx_tensor **slot, const phx_tensor *t, int ndim, const int64_t *shape)
{
    phx_status st = px_module_keep_slot(slot); /* the last call's output, kept */
    if (st != PHX_OK) return st;
    phx_tensor *v = *slot;
    if (v && v->storage == t->storage && v->offset == t->offset && v->ndim == ndim &&
        memcmp(v->shape, shape, (size_t)ndim * sizeof *shape) == 0 && v->dtype == t->dtype)
        return PHX_OK;
    if (!(v = px_tensor_view(t, 0, ndim, shape))) return PHX_ENOMEM;
    phx_tensor_free(*slot);
    *slot = v;
    return PHX_OK;
}

static phx_status flatten_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    flatten *F = phx_module_ctx(self);
    if (x->ndim < 1) return phx_error(PHX_EINVAL, "phx_flatten_forward: a scalar input, expected (N, ...)");
    int64_t n = x->shape[0], shape[2] = {n, n ? x->numel / n : 0};
    phx_status st = flat_view(&F->y, x, 2, shape);
    if (st != PHX_OK) return st;
    F->ndim = x->ndim;
    memcpy(F->shape, x->shape, sizeof F->shape);
    *y = F->y;
    return PHX_OK;
}

static phx_status flatten_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    flatten *F = phx_module_ctx(self);
    if (!F->y) return phx_error(PHX_ESTATE, "phx_flatten_backward: no forward to differentiate");
    if (!px_dy_fits(dy, F->y)) return px_dy_mismatch("phx_flatten_backward", dy, F->y);
    if (!dx) return PHX_OK;
    phx_status st = flat_view(&F->dx, dy, F->ndim, F->shape);
    if (st == PHX_OK) *dx = F->dx;
    return st;
}

static void flatten_free(phx_module *self)
{
    flatten *F = phx_module_ctx(self);
    if (!F) return;
    phx_tensor_free(F->y);
    phx_tensor_free(F->dx);
    px_free(F);
}

static phx_module *flatten_clone(const phx_module *self)
{
    (void)self;
    return phx_flatten_new();
}

static const phx_module_vtable flatten_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "Flatten",
    .forward = flatten_forward,
    .backward = flatten_backward,
    .free = flatten_free,
    .clone = flatten_clone,
};

phx_module *phx_flatten_new(void)
{
    flatten *F;
    return px_module_alloc(&flatten_vt, sizeof *F, (void **)&F);
}
