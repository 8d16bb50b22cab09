/* Argument checks, result tensors and broadcasting shared by the tensor
 * operations. */
#include "config.h"
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include "src/ops/ops-impl.h"
#include "src/tensor/device-impl.h"

phx_status px_op_inputs(const char *fn, int n, const phx_tensor *const *in, const char *const *names)
{
    for (int i = 0; i < n; i++) {
        if (in[i]) {
            if (px_tensor_live(fn, names[i], in[i]) != PHX_OK) return PHX_ESTATE;
            continue;
        }
        /* The operation that returned NULL said why; keep its words. */
        if (phx_last_error()[0]) return PHX_EINVAL;
        return phx_error(PHX_EINVAL, "%s: %s is NULL", fn, names[i]);
    }
    return PHX_OK;
}

phx_status px_op_same(const char *fn, const char *an, const phx_tensor *a, const char *bn, const phx_tensor *b,
                      bool same_dtype)
{
    if (!phx_device_equal(a->storage->device, b->storage->device)) {
        char da[32], db[32];
        return phx_error(PHX_EINVAL, "%s: %s is on %s, %s on %s, expected one device", fn, an,
                         phx_device_name(a->storage->device, da, sizeof da), bn,
                         phx_device_name(b->storage->device, db, sizeof db));
    }
    if (same_dtype && a->dtype != b->dtype)
        return phx_error(PHX_EINVAL, "%s: %s is %s, %s is %s, expected one dtype (convert one with phx_to_dtype)", fn,
                         an, phx_dtype_name(a->dtype), bn, phx_dtype_name(b->dtype));
    return PHX_OK;
}

phx_status px_op_float(const char *fn, const char *name, const phx_tensor *t)
{
    if (phx_dtype_is_float(t->dtype)) return PHX_OK;
    return phx_error(PHX_EINVAL,
                     "%s: %s is %s, expected f32, f16 or bf16 (phx_to_dtype converts: class indices from "
                     "phx_argmax compare as PHX_F32)",
                     fn, name, phx_dtype_name(t->dtype));
}

phx_status px_op_dim(const char *fn, const phx_tensor *t, int ndim, int dim, int *out)
{
    int d = dim < 0 ? dim + ndim : dim;
    if (ndim == 0) return phx_error(PHX_EINVAL, "%s: dim %d given for a 0-dim tensor, which has no dims", fn, dim);
    if (d < 0 || d >= ndim) {
        char s[64];
        return phx_error(PHX_EINVAL, "%s: dim %d is out of range for a tensor of shape %s (expected %d .. %d)", fn, dim,
                         phx_tensor_shape_str(t, s, sizeof s), -ndim, ndim - 1);
    }
    *out = d;
    return PHX_OK;
}

phx_tensor *px_op_new(const char *fn, phx_dtype dt, int ndim, const int64_t *shape, phx_device dev)
{
    return px_tensor_cached(fn, dt, ndim, shape, dev);
}

const phx_kernels_v1 *px_op_kernels(const char *fn, const phx_tensor *t)
{
    (void)fn;
    return px_device_kernels(t->storage->device);
}

void px_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i];
    }
}

phx_status px_broadcast_shape(const char *fn, const phx_tensor *a, const phx_tensor *b, int *ndim, int64_t *shape)
{
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < n; i++) {
        int ia = a->ndim - n + i, ib = b->ndim - n + i;
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            char sa[64], sb[64];
            return phx_error(PHX_EINVAL,
                             "%s: shapes %s and %s cannot broadcast: dim %d (from the right: %d) has sizes %" PRId64
                             " and %" PRId64 ", expected equal or 1",
                             fn, phx_tensor_shape_str(a, sa, sizeof sa), phx_tensor_shape_str(b, sb, sizeof sb), i,
                             n - i, da, db);
        }
        shape[i] = da == 1 ? db : da;
    }
    *ndim = n;
    return PHX_OK;
}

void px_broadcast_strides(const phx_tensor *t, int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t own[PHX_MAX_DIMS];
    px_contiguous_strides(t->ndim, t->shape, own);
    for (int i = 0; i < ndim; i++) {
        int it = t->ndim - ndim + i;
        strides[i] = (it < 0 || (t->shape[it] == 1 && shape[i] != 1)) ? 0 : own[it];
    }
}
