/* Embedding: y[..., :] = W[idx[...], :] for an i64 index tensor, W (num,
 * dim) f32; the output is in the compute dtype. Backward scatter-adds dy's
 * rows into dW (repeated indices sum); indices get no gradient. */
#include "src/modules/transformer-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "phalanx/transformer.h"

typedef struct embedding {
    int64_t num, dim;
    phx_param *w; /* (num, dim) */
    phx_tensor *idx; /* indices of the last forward (retained) */
    px_buf y; /* idx shape + (dim) */
} embedding;

static phx_status emb_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    embedding *E = phx_module_ctx(self);
    if (x->dtype != PHX_I64)
        return phx_error(PHX_EINVAL, "phx_embedding_forward: indices have dtype %s, expected i64",
                         phx_dtype_name(x->dtype));
    if (x->ndim >= PHX_MAX_DIMS)
        return phx_error(PHX_EINVAL, "phx_embedding_forward: indices have %d dims, expected at most %d", x->ndim,
                         PHX_MAX_DIMS - 1);
    phx_device dev = x->storage->device;
    if (!phx_device_equal(dev, E->w->value->storage->device))
        return phx_error(PHX_EINVAL, "phx_embedding_forward: indices and weight are on different devices");
    const phx_kernels_v1 *k = px_device_kernels(dev);
    if (!k) return PHX_ENOTFOUND;
    PX_NEED_SLOT("phx_embedding_forward", dev, k, embedding_forward);
    int64_t shape[PHX_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) shape[i] = x->shape[i];
    shape[x->ndim] = E->dim;
    phx_dtype dt = phx_module_compute_dtype(self);
    phx_tensor *out;
    phx_status st = px_buf_get(&E->y, dt, x->ndim + 1, shape, dev, &out);
    if (st != PHX_OK) return st;
    int64_t bad = -1;
    st = k->embedding_forward(dev.index, x->numel, E->num, E->dim, px_tensor_ptr(x), px_tensor_ptr(E->w->value),
                              px_tensor_ptr(out), dt, &bad);
    if (st != PHX_OK) return st;
    if (bad >= 0) {
        double v = 0;
        (void)phx_tensor_get(x, bad, &v);
        return phx_error(PHX_EINVAL,
                         "phx_embedding_forward: index %lld at position %lld is outside the table of "
                         "%lld rows",
                         (long long)v, (long long)bad, (long long)E->num);
    }
    phx_tensor_retain((phx_tensor *)x);
    phx_tensor_free(E->idx);
    E->idx = (phx_tensor *)x;
    *y = out;
    return PHX_OK;
}

static phx_status emb_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    embedding *E = phx_module_ctx(self);
    if (!E->idx) return phx_error(PHX_ESTATE, "phx_embedding_backward: no forward to differentiate");
    if (!px_dy_fits(dy, E->y.view)) return px_dy_mismatch("phx_embedding_backward", dy, E->y.view);
    phx_device dev = dy->storage->device;
    const phx_kernels_v1 *k = px_device_kernels(dev);
    if (!k) return PHX_ENOTFOUND;
    PX_NEED_SLOT("phx_embedding_backward", dev, k, embedding_backward);
    phx_status st = k->embedding_backward(dev.index, E->idx->numel, E->num, E->dim, px_tensor_ptr(E->idx),
                                          px_tensor_ptr(dy), dy->dtype, px_tensor_ptr(E->w->grad));
    if (st != PHX_OK) return st;
    phx_param_grad_ready(E->w);
    if (dx) *dx = NULL;
    return PHX_OK;
}

static void emb_free(phx_module *self)
{
    embedding *E = phx_module_ctx(self);
    if (!E) return;
    phx_tensor_free(E->idx);
    px_buf_free(&E->y);
    px_free(E);
}

static phx_module *emb_clone(const phx_module *self);

static const phx_module_vtable embedding_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "Embedding",
    .forward = emb_forward,
    .backward = emb_backward,
    .free = emb_free,
    .clone = emb_clone,
};

static phx_module *emb_alloc(int64_t num, int64_t dim)
{
    if (num < 1 || dim < 1) {
        phx_error(PHX_EINVAL, "phx_embedding_new: num %lld and dim %lld must be >= 1", (long long)num, (long long)dim);
        return NULL;
    }
    embedding *E;
    phx_module *m = px_module_alloc(&embedding_vt, sizeof *E, (void **)&E);
    if (!m) return NULL;
    E->num = num;
    E->dim = dim;
    int64_t ws[2] = {num, dim};
    phx_tensor *w = phx_tensor_new(PHX_F32, 2, ws, phx_cpu());
    if (!w || !(E->w = phx_module_add_param(m, "weight", w))) {
        phx_tensor_free(w);
        phx_module_free(m);
        return NULL;
    }
    return m;
}

phx_module *phx_embedding_new(int64_t num, int64_t dim, phx_rng *rng)
{
    phx_rng *own = NULL;
    if (!rng && !(rng = own = phx_rng_new(0))) return NULL;
    phx_module *m = emb_alloc(num, dim);
    if (m && phx_rng_normal(rng, ((embedding *)phx_module_ctx(m))->w->value, 0.0f, 1.0f) != PHX_OK) {
        phx_module_free(m);
        m = NULL;
    }
    phx_rng_free(own);
    return m;
}

static phx_module *emb_clone(const phx_module *self)
{
    const embedding *E = phx_module_ctx(self);
    return px_module_clone_values(emb_alloc(E->num, E->dim), self);
}
