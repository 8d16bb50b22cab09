/* Tensor operations: argument checks with messages naming both sides,
 * then dispatch through the device's kernel table. */
#include "config.h"
#include <inttypes.h>
#include <string.h>
#include "src/tensor/device-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "src/autograd/autograd-impl.h"
#include "kernels/math.h"

static phx_status need(const char *fn, const char *what, const phx_tensor *t)
{
    if (!t) return phx_error(PHX_EINVAL, "%s: %s is NULL", fn, what);
    if (px_tensor_live(fn, what, t) != PHX_OK) return PHX_ESTATE;
    /* A parameter of an FSDP model outside its unit's use holds no memory. */
    if (t->numel && !t->storage->data)
        return phx_error(PHX_ESTATE,
                         "%s: %s holds no memory (a parameter or gradient of an FSDP-sharded model outside its "
                         "unit's forward and backward; phx_fsdp_gather_full makes them readable)",
                         fn, what);
    return PHX_OK;
}

/* The device table of t's device (never fails for a live tensor). */
static const phx_device_v1 *dev(const phx_tensor *t)
{
    return phx_device_table(t->storage->device);
}

static phx_status same_numel(const char *fn, const char *an, const phx_tensor *a, const char *bn, const phx_tensor *b)
{
    if (a->numel == b->numel) return PHX_OK;
    char sa[64], sb[64];
    return phx_error(PHX_EINVAL, "%s: %s %s has %" PRId64 " elements, %s %s has %" PRId64 ", expected equal", fn, an,
                     phx_tensor_shape_str(a, sa, sizeof sa), a->numel, bn, phx_tensor_shape_str(b, sb, sizeof sb),
                     b->numel);
}

static phx_status same_device(const char *fn, const char *an, const phx_tensor *a, const char *bn, const phx_tensor *b)
{
    if (phx_device_equal(a->storage->device, b->storage->device)) return PHX_OK;
    char da[32], db[32];
    return phx_error(PHX_EINVAL, "%s: %s is on %s, %s on %s, expected one device", fn, an,
                     phx_device_name(a->storage->device, da, sizeof da), bn,
                     phx_device_name(b->storage->device, db, sizeof db));
}

static phx_status is_float(const char *fn, const char *an, const phx_tensor *a)
{
    if (phx_dtype_is_float(a->dtype)) return PHX_OK;
    return phx_error(PHX_EINVAL, "%s: %s is %s, expected f32, f16 or bf16", fn, an, phx_dtype_name(a->dtype));
}

phx_status phx_tensor_copy(phx_tensor *dst, const phx_tensor *src)
{
    px_tensor_bump_version(dst); /* an in-place write: saved copies go stale */
    const char *fn = "phx_tensor_copy";
    phx_status st;
    if ((st = need(fn, "dst", dst)) || (st = need(fn, "src", src))) return st;
    if (dst->dtype != src->dtype)
        return phx_error(PHX_EINVAL, "%s: dst is %s, src is %s, expected one dtype (use phx_tensor_cast)", fn,
                         phx_dtype_name(dst->dtype), phx_dtype_name(src->dtype));
    if ((st = same_numel(fn, "dst", dst, "src", src))) return st;
    size_t bytes = phx_tensor_nbytes(src);
    void *d = px_tensor_ptr(dst);
    const void *s = px_tensor_ptr(src);
    if (!bytes || d == s) return PHX_OK;
    phx_device dd = dst->storage->device, sd = src->storage->device;
    if (dd.kind == PHX_DEVICE_CPU && sd.kind == PHX_DEVICE_CPU) return dev(dst)->copy_d2d(0, d, 0, s, bytes);
    if (sd.kind == PHX_DEVICE_CPU) return dev(dst)->copy_h2d(dd.index, d, s, bytes);
    if (dd.kind == PHX_DEVICE_CPU) return dev(src)->copy_d2h(sd.index, d, s, bytes);
    return dev(dst)->copy_d2d(dd.index, d, sd.index, s, bytes);
}

phx_status phx_tensor_to_host(const phx_tensor *t, void *host)
{
    phx_status st = need("phx_tensor_to_host", "t", t);
    if (st) return st;
    size_t bytes = phx_tensor_nbytes(t);
    if (!bytes) return PHX_OK;
    if (!host) return phx_error(PHX_EINVAL, "phx_tensor_to_host: host is NULL for %zu bytes", bytes);
    return dev(t)->copy_d2h(t->storage->device.index, host, px_tensor_ptr(t), bytes);
}

phx_status phx_tensor_from_host(phx_tensor *t, const void *host)
{
    px_tensor_bump_version(t); /* an in-place write: saved copies go stale */
    phx_status st = need("phx_tensor_from_host", "t", t);
    if (st) return st;
    size_t bytes = phx_tensor_nbytes(t);
    if (!bytes) return PHX_OK;
    if (!host) return phx_error(PHX_EINVAL, "phx_tensor_from_host: host is NULL for %zu bytes", bytes);
    return dev(t)->copy_h2d(t->storage->device.index, px_tensor_ptr(t), host, bytes);
}

phx_status phx_tensor_cast(phx_tensor *dst, const phx_tensor *src)
{
    px_tensor_bump_version(dst); /* an in-place write: saved copies go stale */
    const char *fn = "phx_tensor_cast";
    phx_status st;
    if ((st = need(fn, "dst", dst)) || (st = need(fn, "src", src))) return st;
    if ((st = same_numel(fn, "dst", dst, "src", src)) || (st = same_device(fn, "dst", dst, "src", src))) return st;
    return dev(dst)->kernels->cast(dst->storage->device.index, px_tensor_ptr(dst), dst->dtype, px_tensor_ptr(src),
                                   src->dtype, src->numel);
}

phx_status phx_tensor_fill(phx_tensor *t, double value)
{
    px_tensor_bump_version(t); /* an in-place write: saved copies go stale */
    phx_status st = need("phx_tensor_fill", "t", t);
    if (st) return st;
    return dev(t)->kernels->fill(t->storage->device.index, px_tensor_ptr(t), t->dtype, t->numel, value);
}

phx_status phx_tensor_axpby(float alpha, const phx_tensor *x, float beta, phx_tensor *y)
{
    px_tensor_bump_version(y); /* an in-place write: saved copies go stale */
    const char *fn = "phx_tensor_axpby";
    phx_status st;
    if ((st = need(fn, "y", y)) || (st = is_float(fn, "y", y))) return st;
    if (x &&
        ((st = need(fn, "x", x)) || (st = is_float(fn, "x", x)) || (st = same_numel(fn, "x", x, "y", y)) ||
         (st = same_device(fn, "x", x, "y", y))))
        return st;
    return dev(y)->kernels->axpby(y->storage->device.index, y->numel, alpha, x ? px_tensor_ptr(x) : NULL,
                                  x ? x->dtype : y->dtype, beta, px_tensor_ptr(y), y->dtype);
}

phx_status phx_tensor_reduce(const phx_tensor *t, phx_reduce_op op, double *out)
{
    phx_status st = need("phx_tensor_reduce", "t", t);
    if (st) return st;
    if (!out) return phx_error(PHX_EINVAL, "phx_tensor_reduce: out is NULL");
    return dev(t)->kernels->reduce(t->storage->device.index, op, t->numel, px_tensor_ptr(t), t->dtype, out);
}

phx_status phx_gemm(bool trans_a, bool trans_b, float alpha, const phx_tensor *a, const phx_tensor *b, float beta,
                    phx_tensor *c)
{
    const char *fn = "phx_gemm";
    phx_status st;
    if ((st = need(fn, "A", a)) || (st = need(fn, "B", b)) || (st = need(fn, "C", c))) return st;
    char sa[64], sb[64], sc[64];
    phx_tensor_shape_str(a, sa, sizeof sa);
    phx_tensor_shape_str(b, sb, sizeof sb);
    phx_tensor_shape_str(c, sc, sizeof sc);
    if (a->ndim != 2 || b->ndim != 2 || c->ndim != 2)
        return phx_error(PHX_EINVAL, "%s: A %s, B %s, C %s, expected 2-D tensors", fn, sa, sb, sc);
    if (a->dtype != b->dtype || !phx_dtype_is_float(a->dtype) || !phx_dtype_is_float(c->dtype))
        return phx_error(PHX_EINVAL, "%s: A is %s, B %s, C %s, expected A and B of one float dtype, C float", fn,
                         phx_dtype_name(a->dtype), phx_dtype_name(b->dtype), phx_dtype_name(c->dtype));
    if ((st = same_device(fn, "A", a, "B", b)) || (st = same_device(fn, "A", a, "C", c))) return st;
    int64_t m = trans_a ? a->shape[1] : a->shape[0], k = trans_a ? a->shape[0] : a->shape[1];
    int64_t kb = trans_b ? b->shape[1] : b->shape[0], n = trans_b ? b->shape[0] : b->shape[1];
    if (k != kb)
        return phx_error(PHX_EINVAL,
                         "%s: op(A) is (%" PRId64 ", %" PRId64 "), op(B) (%" PRId64 ", %" PRId64
                         "): inner dims %" PRId64 " and %" PRId64 " differ (A %s%s, B %s%s)",
                         fn, m, k, kb, n, k, kb, sa, trans_a ? "^T" : "", sb, trans_b ? "^T" : "");
    if (c->shape[0] != m || c->shape[1] != n)
        return phx_error(PHX_EINVAL, "%s: C is %s, expected (%" PRId64 ", %" PRId64 ") = rows of op(A), cols of op(B)",
                         fn, sc, m, n);
    int64_t lda = a->shape[1] > 1 ? a->shape[1] : 1, ldb = b->shape[1] > 1 ? b->shape[1] : 1;
    int64_t ldc = n > 1 ? n : 1;
    return dev(c)->kernels->gemm(c->storage->device.index, trans_a, trans_b, m, n, k, alpha, px_tensor_ptr(a), lda,
                                 px_tensor_ptr(b), ldb, a->dtype, beta, px_tensor_ptr(c), ldc, c->dtype);
}

phx_status phx_tensor_get(const phx_tensor *t, int64_t index, double *out)
{
    phx_status st = need("phx_tensor_get", "t", t);
    if (st) return st;
    if (!out) return phx_error(PHX_EINVAL, "phx_tensor_get: out is NULL");
    if (index < 0 || index >= t->numel)
        return phx_error(PHX_EINVAL, "phx_tensor_get: index %" PRId64 ", expected 0 <= index < %" PRId64, index,
                         t->numel);
    size_t es = phx_dtype_size(t->dtype);
    unsigned char raw[8];
    st = dev(t)->copy_d2h(t->storage->device.index, raw, (char *)px_tensor_ptr(t) + (size_t)index * es, es);
    if (st) return st;
    uint16_t h;
    float f;
    int32_t i32;
    int64_t i64;
    switch (t->dtype) {
    case PHX_F32:
        memcpy(&f, raw, 4);
        *out = f;
        break;
    case PHX_F16:
        memcpy(&h, raw, 2);
        *out = phx_f16_to_f32(h);
        break;
    case PHX_BF16:
        memcpy(&h, raw, 2);
        *out = phx_bf16_to_f32(h);
        break;
    case PHX_I32:
        memcpy(&i32, raw, 4);
        *out = i32;
        break;
    case PHX_I64:
        memcpy(&i64, raw, 8);
        *out = (double)i64;
        break;
    }
    return PHX_OK;
}
