/* Whole-tensor reductions into a host double: sum and avg accumulate in
 * double; max and min propagate NaN (as torch.max). */
#include "config.h"
#include <math.h>
#include "kernels/cpu/cpu.h"

PX_INLINE double px_ld_d(const void *p, int dt, int64_t i)
{
    switch (dt) {
    case PHX_I32: return (double)((const int32_t *)p)[i];
    case PHX_I64: return (double)((const int64_t *)p)[i];
    default: return (double)px_ld(p, dt, i);
    }
}

PX_INLINE double px_reduce_loop(int op, int64_t n, const void *x, int dt)
{
    if (op == PHX_SUM || op == PHX_AVG) {
        double acc[4] = {0, 0, 0, 0};
        int64_t i = 0;
        for (; i + 4 <= n; i += 4)
            for (int j = 0; j < 4; j++) acc[j] += px_ld_d(x, dt, i + j);
        double s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        for (; i < n; i++) s += px_ld_d(x, dt, i);
        return op == PHX_AVG ? s / (double)n : s;
    }
    double r = px_ld_d(x, dt, 0);
    for (int64_t i = 1; i < n; i++) {
        double v = px_ld_d(x, dt, i);
        if (v != v) return v;
        r = op == PHX_MAX ? (v > r ? v : r) : (v < r ? v : r);
    }
    return r;
}

#define PX_ANY_DISPATCH(dt, CALL) \
    switch (dt) { \
    case PHX_F32: { \
        enum { DT = PHX_F32 }; \
        CALL; \
        break; \
    } \
    case PHX_F16: { \
        enum { DT = PHX_F16 }; \
        CALL; \
        break; \
    } \
    case PHX_BF16: { \
        enum { DT = PHX_BF16 }; \
        CALL; \
        break; \
    } \
    case PHX_I32: { \
        enum { DT = PHX_I32 }; \
        CALL; \
        break; \
    } \
    case PHX_I64: { \
        enum { DT = PHX_I64 }; \
        CALL; \
        break; \
    } \
    default: return phx_error(PHX_EINVAL, "reduce: dtype %d, expected f32, f16, bf16, i32 or i64", (int)dt); \
    }

PX_CLONES phx_status px_cpu_reduce(int dev, phx_reduce_op op, int64_t n, const void *x, phx_dtype dt, double *out_host)
{
    (void)dev;
    PX_CHECK_N("reduce", n);
    if (op < PHX_SUM || op > PHX_MIN)
        return phx_error(PHX_EINVAL, "reduce: op %d, expected sum, avg, max or min", (int)op);
    if (n == 0) {
        if (op == PHX_MAX || op == PHX_MIN)
            return phx_error(PHX_EINVAL, "reduce: %s of an empty tensor, expected at least one element",
                             op == PHX_MAX ? "max" : "min");
        *out_host = op == PHX_SUM ? 0.0 : NAN;
        return PHX_OK;
    }
    double r = 0.0;
    PX_ANY_DISPATCH(dt, r = px_reduce_loop(op, n, x, DT));
    *out_host = r;
    return PHX_OK;
}
