/* DataParallel and module buffers, as PyTorch's replicate(): each forward
 * starts every replica from the model's buffers, and only replica 0's
 * updates (BatchNorm's running statistics) are kept, written straight
 * into the model's tensors when replica 0 lives on the model's device. */
#include "src/dp/dp-impl.h"
#include "src/modules/module-impl.h"
#include "src/tensor/tensor-impl.h"

phx_status px_dp_buffers_share(px_dp *d)
{
    px_dp_rep *r = &d->reps[0];
    size_t n = phx_module_num_buffers(d->model);
    if (r->m == d->model || n == 0 || !r->shares) return PHX_OK;
    if (phx_module_num_buffers(r->m) != n)
        return phx_error(PHX_EINTERNAL, "phx_dp_new: replica 0 has %zu buffers, the model %zu",
                         phx_module_num_buffers(r->m), n);
    for (size_t i = 0; i < n; i++) {
        px_buffer *b = px_module_buffer_holder(r->m, i);
        phx_tensor *mt = phx_module_buffer(d->model, i);
        phx_tensor_retain(mt);
        phx_tensor_free(b->t);
        b->t = mt;
    }
    r->buffers_shared = true;
    return PHX_OK;
}

static phx_status copy_all(phx_module *dst, const phx_module *src)
{
    size_t n = phx_module_num_buffers(src);
    for (size_t i = 0; i < n; i++) {
        phx_tensor *t = phx_module_buffer(dst, i), *s = phx_module_buffer(src, i);
        if (t == s) continue;
        phx_status st = phx_tensor_copy(t, s);
        if (st != PHX_OK) return st;
    }
    return PHX_OK;
}

phx_status px_dp_buffers_in(px_dp *d)
{
    if (phx_module_num_buffers(d->model) == 0) return PHX_OK;
    for (size_t i = 0; i < d->n; i++) {
        px_dp_rep *r = &d->reps[i];
        if (r->m == d->model || r->buffers_shared) continue;
        phx_status st = copy_all(r->m, d->model);
        if (st != PHX_OK) return st;
    }
    return PHX_OK;
}

phx_status px_dp_buffers_out(px_dp *d)
{
    px_dp_rep *r = &d->reps[0];
    if (r->m == d->model || r->buffers_shared || phx_module_num_buffers(d->model) == 0) return PHX_OK;
    return copy_all(d->model, r->m);
}
