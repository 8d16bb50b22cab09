/* Broadcasting elementwise kernels of the tensor API on the GPU: binary
 * (a op b), unary (op(x; alpha, beta)) and where (cond ? a : b). Inputs
 * are read through their strides (0 where broadcast, nd.cuh), outputs
 * are contiguous; one thread per output element, f32 math on f32, f16
 * and bf16 values, one rounding into the dtype. Built without FMA
 * contraction and with IEEE division and square root, so +, -, *, /,
 * max, min, the comparisons, affine, clamp, sqrt and 1/x give the CPU's
 * results bit for bit; exp is math.h's phx_expf, as on the CPU; log and
 * pow are CUDA's (within 2 ulp of glibc's). */
#include "plugins/device/cuda/kernels/nd.cuh"
#include "plugins/device/cuda/kernels/kernels.h"

__device__ __forceinline__ float px_binop(int op, float a, float b)
{
    switch (op) {
    case PHX_BIN_ADD: return a + b;
    case PHX_BIN_SUB: return a - b;
    case PHX_BIN_MUL: return a * b;
    case PHX_BIN_DIV: return a / b;
    case PHX_BIN_POW: return powf(a, b);
    case PHX_BIN_MAX: return a > b || a != a ? a : b; /* a NaN operand wins, b on ties (the CPU's rule) */
    case PHX_BIN_MIN: return a < b || a != a ? a : b;
    case PHX_BIN_EQ: return a == b ? 1.0f : 0.0f;
    case PHX_BIN_NE: return a != b ? 1.0f : 0.0f;
    case PHX_BIN_LT: return a < b ? 1.0f : 0.0f;
    case PHX_BIN_LE: return a <= b ? 1.0f : 0.0f;
    case PHX_BIN_GT: return a > b ? 1.0f : 0.0f;
    default: return a >= b ? 1.0f : 0.0f; /* PHX_BIN_GE */
    }
}

__device__ __forceinline__ float px_unop(int op, float x, float alpha, float beta)
{
    switch (op) {
    case PHX_UN_NEG: return -x;
    case PHX_UN_EXP: return phx_expf(x);
    case PHX_UN_LOG: return logf(x);
    case PHX_UN_SQRT: return sqrtf(x);
    case PHX_UN_RSQRT: return 1.0f / sqrtf(x);
    case PHX_UN_ABS: return fabsf(x);
    case PHX_UN_SIGN: return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x; /* ±0 and NaN stay */
    case PHX_UN_AFFINE: return alpha * x + beta;
    case PHX_UN_POW: return powf(x, alpha);
    case PHX_UN_CLAMP: {
        float v = x; /* a NaN x fails both tests and stays NaN */
        if (alpha == alpha && v < alpha) v = alpha;
        if (beta == beta && v > beta) v = beta;
        return v;
    }
    case PHX_UN_RECIP: return 1.0f / x;
    case PHX_UN_EQ: return x == alpha ? 1.0f : 0.0f;
    case PHX_UN_NE: return x != alpha ? 1.0f : 0.0f;
    case PHX_UN_LT: return x < alpha ? 1.0f : 0.0f;
    case PHX_UN_LE: return x <= alpha ? 1.0f : 0.0f;
    case PHX_UN_GT: return x > alpha ? 1.0f : 0.0f;
    case PHX_UN_GE: return x >= alpha ? 1.0f : 0.0f;
    default: return x * x; /* PHX_UN_SQUARE */
    }
}

/* ---- binary: operands 0 out, 1 a, 2 b */

template <int DT> __global__ void k_binary(int op, px_nd d, int64_t n, void *out, const void *a, const void *b)
{
    for (int64_t i = px_tid(); i < n; i += px_nthreads()) {
        int64_t off[3];
        px_nd_at<3>(d, i, off);
        px_st<DT>(out, off[0], px_binop(op, px_ld<DT>(a, off[1]), px_ld<DT>(b, off[2])));
    }
}

extern "C" phx_status px_cuda_binary(int dev, int op, phx_dtype dt, int ndim, const int64_t *shape, void *out,
                                     const void *a, const int64_t *a_strides, const void *b, const int64_t *b_strides)
{
    if (op < PHX_BIN_ADD || op > PHX_BIN_GE)
        return phx_error(PHX_EINVAL, "binary: op %d, expected a phx_binary_op", op);
    PX_CHECK_FLOAT("binary", dt);
    if (ndim > 0 && (!a_strides || !b_strides))
        return phx_error(PHX_EINVAL, "binary: %d dims and no strides for %s", ndim, a_strides ? "b" : "a");
    const int64_t *strides[3] = {NULL, a_strides, b_strides};
    px_nd d = {};
    int64_t n = 0;
    phx_status st = px_nd_make("binary", ndim, shape, 3, strides, &d, &n);
    if (st != PHX_OK || n == 0) return st;
    PX_CTX(dev, ctx);
    unsigned grid = px_cuda_grid(ctx, n, PX_THREADS, PX_WAVES);
    PX_FLOAT_DISPATCH("binary", dt, (k_binary<DT><<<grid, PX_THREADS, 0, ctx->stream>>>(op, d, n, out, a, b)));
    return px_cuda_launched(dev, "binary");
}

/* ---- unary: flat, y may be x */

template <int DT> __global__ void k_unary(int op, int64_t n, void *y, const void *x, float alpha, float beta)
{
    for (int64_t i = px_tid(); i < n; i += px_nthreads()) px_st<DT>(y, i, px_unop(op, px_ld<DT>(x, i), alpha, beta));
}

extern "C" phx_status px_cuda_unary(int dev, int op, phx_dtype dt, int64_t n, void *y, const void *x, float alpha,
                                    float beta)
{
    if (op < PHX_UN_NEG || op > PHX_UN_SQUARE)
        return phx_error(PHX_EINVAL, "unary: op %d, expected a phx_unary_op", op);
    PX_CHECK_FLOAT("unary", dt);
    PX_CHECK_N("unary", n);
    if (n == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    unsigned grid = px_cuda_grid(ctx, n, PX_THREADS, PX_WAVES);
    PX_FLOAT_DISPATCH("unary", dt, (k_unary<DT><<<grid, PX_THREADS, 0, ctx->stream>>>(op, n, y, x, alpha, beta)));
    return px_cuda_launched(dev, "unary");
}

/* ---- where: operands 0 out, 1 cond, 2 a, 3 b; a, b and out (float
 * dtypes) are moved as words: the CPU's values, which go through f32 and
 * back (NaN payloads aside); cond is tested for != 0 in its own dtype (a NaN is != 0; -0.0
 * is not) */

__device__ __forceinline__ bool px_nonzero(const void *p, int cdt, int64_t i)
{
    switch (cdt) {
    case PHX_F32: return ((const float *)p)[i] != 0.0f;
    case PHX_F16:
    case PHX_BF16: return (((const uint16_t *)p)[i] & 0x7fffu) != 0;
    case PHX_I32: return ((const int32_t *)p)[i] != 0;
    default: return ((const int64_t *)p)[i] != 0;
    }
}

template <int BYTES>
__global__ void k_where(px_nd d, int64_t n, void *out, const void *cond, int cdt, const void *a, const void *b)
{
    typedef typename px_word<BYTES>::T T;
    for (int64_t i = px_tid(); i < n; i += px_nthreads()) {
        int64_t off[4];
        px_nd_at<4>(d, i, off);
        ((T *)out)[off[0]] = px_nonzero(cond, cdt, off[1]) ? ((const T *)a)[off[2]] : ((const T *)b)[off[3]];
    }
}

extern "C" phx_status px_cuda_where(int dev, phx_dtype dt, int ndim, const int64_t *shape, void *out, const void *cond,
                                    phx_dtype cdt, const int64_t *c_strides, const void *a, const int64_t *a_strides,
                                    const void *b, const int64_t *b_strides)
{
    PX_CHECK_FLOAT("where", dt);
    if (phx_dtype_size(cdt) == 0)
        return phx_error(PHX_EINVAL, "where: condition dtype %d, expected f32, f16, bf16, i32 or i64", (int)cdt);
    if (ndim > 0 && (!c_strides || !a_strides || !b_strides))
        return phx_error(PHX_EINVAL, "where: %d dims and no strides for %s", ndim,
                         !c_strides       ? "cond"
                             : !a_strides ? "a"
                                          : "b");
    const int64_t *strides[4] = {NULL, c_strides, a_strides, b_strides};
    px_nd d = {};
    int64_t n = 0;
    phx_status st = px_nd_make("where", ndim, shape, 4, strides, &d, &n);
    if (st != PHX_OK || n == 0) return st;
    PX_CTX(dev, ctx);
    unsigned grid = px_cuda_grid(ctx, n, PX_THREADS, PX_WAVES);
    PX_BYTES_DISPATCH("where", dt,
                      (k_where<BYTES><<<grid, PX_THREADS, 0, ctx->stream>>>(d, n, out, cond, (int)cdt, a, b)));
    return px_cuda_launched(dev, "where");
}
