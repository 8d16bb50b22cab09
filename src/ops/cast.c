/* Dtype conversion as an operation (phx_to_dtype), and the autocast dtype
 * a forward-only module's forward runs under. */
#include "config.h"
#include "src/ops/ops-impl.h"
#include "src/tensor/device-impl.h"

static phx_status cast_into(phx_tensor *dst, const phx_tensor *src)
{
    const phx_kernels_v1 *k = px_device_kernels(src->storage->device);
    if (!k) return PHX_EDEVICE;
    return k->cast(src->storage->device.index, px_tensor_ptr(dst), dst->dtype, px_tensor_ptr(src), src->dtype,
                   src->numel);
}

static phx_status to_dtype_backward(px_node *n, const phx_tensor *grad, phx_tensor **in_grads)
{
    in_grads[0] = phx_to_dtype(grad, px_node_in_dtype(n, 0));
    return in_grads[0] ? PHX_OK : PHX_ENOMEM;
}

phx_tensor *phx_to_dtype(const phx_tensor *t, phx_dtype dt)
{
    const char *fn = "phx_to_dtype";
    if (px_op_inputs(fn, 1, &t, (const char *const[]){"t"})) return NULL;
    if (!phx_dtype_size(dt)) {
        phx_error(PHX_EINVAL, "%s: dtype %d, expected f32, f16, bf16, i32 or i64", fn, (int)dt);
        return NULL;
    }
    if (t->dtype == dt) return px_scope_own(phx_tensor_retain((phx_tensor *)t));
    phx_tensor *out = px_op_new(fn, dt, t->ndim, t->shape, t->storage->device);
    if (!out) return NULL;
    phx_status st = cast_into(out, t);
    px_node *node = NULL;
    if (!st && phx_dtype_is_float(dt) && phx_dtype_is_float(t->dtype))
        st = px_record("to_dtype", to_dtype_backward, 1, &t, out, &node);
    else if (!st)
        px_mark_nondiff(phx_dtype_is_float(dt) ? "to_dtype (from an integer dtype)" : "to_dtype (to an integer dtype)",
                        1, &t, out);
    if (st) {
        phx_tensor_free(out);
        return NULL;
    }
    return px_scope_own(out);
}

static _Thread_local phx_dtype autocast = PHX_F32;

phx_dtype px_autocast_dtype(void)
{
    return autocast;
}

phx_dtype px_autocast_set(phx_dtype dt)
{
    phx_dtype prev = autocast;
    autocast = dt;
    return prev;
}

const phx_tensor *px_autocast_f32(const phx_tensor *t)
{
    if (!t || autocast == PHX_F32 || t->dtype == PHX_F32 || !phx_dtype_is_float(t->dtype)) return t;
    return phx_to_dtype(t, PHX_F32);
}
