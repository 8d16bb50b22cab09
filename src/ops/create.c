/* Creation: arange, full, rand, randn, eye. Nothing is recorded. arange
 * and eye are computed on the host in double, converted once to the
 * dtype and copied to the device (no kernel slot: they are made once, not
 * per step); full is the device's fill kernel; rand/randn are phx_rng's
 * draws on the device. */
#include "config.h"
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include "src/base/util.h"
#include "src/ops/ops-impl.h"

/* A new tensor holding vals (numel of shape, double) converted to dt, on
 * dev, handed to the scope; NULL with phx_last_error naming fn. The
 * values go to a CPU tensor of f32 (float dtypes) or dt, then through
 * the cast kernel and a copy where dt or dev differ. */
static phx_tensor *from_doubles(const char *fn, const double *vals, phx_dtype dt, int ndim, const int64_t *shape,
                                phx_device dev)
{
    phx_dtype hdt = phx_dtype_is_float(dt) ? PHX_F32 : dt;
    phx_tensor *t = px_op_new(fn, dt, ndim, shape, dev);
    phx_tensor *h = t ? phx_tensor_new(hdt, ndim, shape, phx_cpu()) : NULL, *c = NULL;
    phx_status st = h ? PHX_OK : PHX_ENOMEM;
    if (!st) {
        void *p = phx_tensor_data(h);
        for (int64_t i = 0; i < h->numel; i++) {
            if (hdt == PHX_I32)
                ((int32_t *)p)[i] = (int32_t)vals[i];
            else if (hdt == PHX_I64)
                ((int64_t *)p)[i] = (int64_t)vals[i];
            else
                ((float *)p)[i] = (float)vals[i];
        }
        if (hdt == dt)
            st = phx_tensor_copy(t, h);
        else if (dev.kind == PHX_DEVICE_CPU)
            st = phx_tensor_cast(t, h);
        else {
            c = phx_tensor_new(dt, ndim, shape, phx_cpu());
            st = c ? phx_tensor_cast(c, h) : PHX_ENOMEM;
            if (!st) st = phx_tensor_copy(t, c);
        }
    }
    phx_tensor_free(h);
    phx_tensor_free(c);
    if (st) {
        phx_tensor_free(t);
        return NULL;
    }
    return px_scope_own(t);
}

phx_tensor *phx_arange(double start, double end, double step, phx_dtype dt, phx_device dev)
{
    const char *fn = "phx_arange";
    if (!phx_dtype_is_float(dt)) { /* torch: integer aranges take integer bounds */
        start = trunc(start);
        end = trunc(end);
        step = trunc(step);
    }
    if (!isfinite(start) || !isfinite(end) || !isfinite(step) || step == 0 || (step > 0 && end < start) ||
        (step < 0 && end > start)) {
        phx_error(PHX_EINVAL,
                  "%s: start %g, end %g, step %g: expected finite bounds and a nonzero step whose sign goes from "
                  "start towards end",
                  fn, start, end, step);
        return NULL;
    }
    double count = ceil((end - start) / step);
    if (count > (double)(INT64_MAX / 8)) {
        phx_error(PHX_EINVAL, "%s: start %g, end %g, step %g give %g elements, too many", fn, start, end, step, count);
        return NULL;
    }
    int64_t n = (int64_t)count;
    double *v = px_malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) {
        phx_error(PHX_ENOMEM, "%s: out of memory for %" PRId64 " values", fn, n);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) v[i] = start + (double)i * step;
    phx_tensor *t = from_doubles(fn, v, dt, 1, &n, dev);
    px_free(v);
    return t;
}

phx_tensor *phx_full(int ndim, const int64_t *shape, double value, phx_dtype dt, phx_device dev)
{
    const char *fn = "phx_full";
    phx_tensor *t = px_op_new(fn, dt, ndim, shape, dev);
    if (t && phx_tensor_fill(t, value) != PHX_OK) {
        phx_tensor_free(t);
        t = NULL;
    }
    return px_scope_own(t);
}

static phx_tensor *draw(const char *fn, int normal, int ndim, const int64_t *shape, phx_rng *rng, phx_dtype dt,
                        phx_device dev)
{
    if (!rng) {
        phx_error(PHX_EINVAL, "%s: rng is NULL", fn);
        return NULL;
    }
    if (!phx_dtype_is_float(dt)) {
        phx_error(PHX_EINVAL, "%s: dtype %s, expected f32, f16 or bf16", fn, phx_dtype_name(dt));
        return NULL;
    }
    phx_tensor *t = px_op_new(fn, dt, ndim, shape, dev);
    if (t && (normal ? phx_rng_normal(rng, t, 0.0f, 1.0f) : phx_rng_uniform(rng, t, 0.0f, 1.0f)) != PHX_OK) {
        phx_tensor_free(t);
        t = NULL;
    }
    return px_scope_own(t);
}

phx_tensor *phx_rand(int ndim, const int64_t *shape, phx_rng *rng, phx_dtype dt, phx_device dev)
{
    return draw("phx_rand", 0, ndim, shape, rng, dt, dev);
}

phx_tensor *phx_randn(int ndim, const int64_t *shape, phx_rng *rng, phx_dtype dt, phx_device dev)
{
    return draw("phx_randn", 1, ndim, shape, rng, dt, dev);
}

phx_tensor *phx_eye(int64_t n, int64_t m, phx_dtype dt, phx_device dev)
{
    const char *fn = "phx_eye";
    if (m == -1) m = n;
    if (n < 0 || m < 0 || (n && m > INT64_MAX / 8 / n)) {
        phx_error(PHX_EINVAL, "%s: (%" PRId64 ", %" PRId64 "), expected sizes >= 0 (m -1: n)", fn, n, m);
        return NULL;
    }
    int64_t s[2] = {n, m};
    double *v = px_calloc((size_t)(n * m > 0 ? n * m : 1), sizeof *v);
    if (!v) {
        phx_error(PHX_ENOMEM, "%s: out of memory for %" PRId64 " x %" PRId64 " values", fn, n, m);
        return NULL;
    }
    for (int64_t i = 0; i < n && i < m; i++) v[i * m + i] = 1.0;
    phx_tensor *t = from_doubles(fn, v, dt, 2, s, dev);
    px_free(v);
    return t;
}
