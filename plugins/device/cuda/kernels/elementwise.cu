/* Elementwise kernels on the GPU: cast, fill, axpby, mul, bias_add.
 * Same results as kernels/cpu (cast.c, elementwise.c): the arithmetic is
 * the same f32 operations in the same order (the plugin is built with
 * -fmad=false, so no contraction into FMA either). Vectorised in groups
 * of 8 elements (16-byte loads) when every pointer is 16-byte aligned;
 * the tail, or everything when unaligned, goes element by element. */
#include "plugins/device/cuda/kernels/common.cuh"
#include "plugins/device/cuda/kernels/kernels.h"

/* ---- cast */

template <int S, int D> __global__ void k_cast_ff(int64_t n, int64_t ng, const void *src, void *dst)
{
    for (int64_t g = px_tid(); g < ng; g += px_nthreads()) {
        float v[PX_G];
        px_ld8<S>(src, g, v);
        px_st8<D>(dst, g, v);
    }
    for (int64_t i = ng * PX_G + px_tid(); i < n; i += px_nthreads()) px_st<D>(dst, i, px_ld<S>(src, i));
}

/* one side integer: CPU rules (truncate and saturate to int, NaN -> 0;
 * int -> f32 rounds once, then to f16/bf16; i64 -> i32 wraps) */
__device__ __forceinline__ double px_ld_any(const void *p, int dt, int64_t i)
{
    switch (dt) {
    case PHX_I32: return (double)((const int32_t *)p)[i];
    case PHX_I64: return (double)((const int64_t *)p)[i];
    case PHX_F16: return (double)px_ld<PHX_F16>(p, i);
    case PHX_BF16: return (double)px_ld<PHX_BF16>(p, i);
    default: return (double)px_ld<PHX_F32>(p, i);
    }
}

__global__ void k_cast_int(int64_t n, const void *src, int st, void *dst, int dt)
{
    for (int64_t i = px_tid(); i < n; i += px_nthreads()) {
        if (dt == PHX_I64 && st == PHX_I32) {
            ((int64_t *)dst)[i] = ((const int32_t *)src)[i];
        } else if (dt == PHX_I32 && st == PHX_I64) {
            ((int32_t *)dst)[i] = (int32_t)(uint32_t)((const int64_t *)src)[i];
        } else if (dt == PHX_I32) {
            ((int32_t *)dst)[i] = px_f2i32(px_ld_any(src, st, i));
        } else if (dt == PHX_I64) {
            ((int64_t *)dst)[i] = px_f2i64(px_ld_any(src, st, i));
        } else {
            float v = st == PHX_I64 ? (float)((const int64_t *)src)[i] : (float)((const int32_t *)src)[i];
            if (dt == PHX_F16)
                px_st<PHX_F16>(dst, i, v);
            else if (dt == PHX_BF16)
                px_st<PHX_BF16>(dst, i, v);
            else
                px_st<PHX_F32>(dst, i, v);
        }
    }
}

static int valid(phx_dtype dt)
{
    return dt >= PHX_F32 && dt <= PHX_I64;
}

extern "C" phx_status px_cuda_cast(int dev, void *dst, phx_dtype dt, const void *src, phx_dtype st, int64_t n)
{
    PX_CHECK_N("cast", n);
    if (!valid(dt) || !valid(st))
        return phx_error(PHX_EINVAL, "cast: dtypes %d -> %d, expected f32, f16, bf16, i32 or i64", (int)st, (int)dt);
    if (n == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    if (dt == st) {
        if (dst == src) return PHX_OK;
        cudaError_t e =
            cudaMemcpyAsync(dst, src, (size_t)n * phx_dtype_size(dt), cudaMemcpyDeviceToDevice, ctx->stream);
        return px_cuda_error(e, dev, "cast: cudaMemcpyAsync");
    }
    if (phx_dtype_is_float(dt) && phx_dtype_is_float(st)) {
        int64_t ng = px_nvec(n, PX_G, src, dst);
        unsigned grid = px_cuda_grid(ctx, ng ? ng : n, PX_THREADS, PX_WAVES);
        PX_FLOAT_DISPATCH_AS(
            "cast", st, S,
            PX_FLOAT_DISPATCH_AS("cast", dt, D,
                                 (k_cast_ff<S, D><<<grid, PX_THREADS, 0, ctx->stream>>>(n, ng, src, dst))));
    } else {
        k_cast_int<<<px_cuda_grid(ctx, n, PX_THREADS, PX_WAVES), PX_THREADS, 0, ctx->stream>>>(n, src, st, dst, dt);
    }
    return px_cuda_launched(dev, "cast");
}

/* ---- fill: the host makes the element's bit pattern (as the CPU does),
 * the kernel stores it in 16-byte vectors. */

__global__ void k_fill(int64_t nbytes, int64_t nvec, uint4 pattern, void *dst, int elt)
{
    for (int64_t v = px_tid(); v < nvec; v += px_nthreads()) ((uint4 *)dst)[v] = pattern;
    const unsigned char *pb = (const unsigned char *)&pattern;
    for (int64_t b = nvec * 16 + px_tid() * elt; b < nbytes; b += px_nthreads() * elt)
        for (int j = 0; j < elt; j++) ((unsigned char *)dst)[b + j] = pb[j];
}

extern "C" phx_status px_cuda_fill(int dev, void *dst, phx_dtype dt, int64_t n, double value)
{
    PX_CHECK_N("fill", n);
    union {
        uint4 v;
        unsigned char b[16];
        float f[4];
        uint16_t h[8];
        int32_t i[4];
        int64_t l[2];
    } pat;
    switch (dt) {
    case PHX_F32:
        for (int j = 0; j < 4; j++) pat.f[j] = (float)value;
        break;
    case PHX_F16:
        for (int j = 0; j < 8; j++) pat.h[j] = phx_f32_to_f16((float)value);
        break;
    case PHX_BF16:
        for (int j = 0; j < 8; j++) pat.h[j] = phx_f32_to_bf16((float)value);
        break;
    case PHX_I32:
        for (int j = 0; j < 4; j++) pat.i[j] = px_f2i32(value);
        break;
    case PHX_I64:
        for (int j = 0; j < 2; j++) pat.l[j] = px_f2i64(value);
        break;
    default: return phx_error(PHX_EINVAL, "fill: dtype %d, expected f32, f16, bf16, i32 or i64", (int)dt);
    }
    if (n == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    int elt = (int)phx_dtype_size(dt);
    int64_t nbytes = n * elt;
    int same = 1;
    for (int j = 1; j < 16; j++) same &= pat.b[j] == pat.b[0];
    if (same) { /* zeros and the like: the copy engine's memset */
        cudaError_t e = cudaMemsetAsync(dst, pat.b[0], (size_t)nbytes, ctx->stream);
        return px_cuda_error(e, dev, "fill: cudaMemsetAsync");
    }
    int64_t nvec = px_aligned16(dst) ? nbytes / 16 : 0;
    k_fill<<<px_cuda_grid(ctx, nvec ? nvec : n, PX_THREADS, PX_WAVES), PX_THREADS, 0, ctx->stream>>>(nbytes, nvec,
                                                                                                     pat.v, dst, elt);
    return px_cuda_launched(dev, "fill");
}

/* ---- axpby: y <- alpha x + beta y; BLAS rule: beta 0 never reads y.
 * mode 0: x NULL, beta 0 (zeros); 1: x NULL (beta y); 2: beta 0 (alpha x);
 * 3: beta 1 (alpha x + y); 4: general. */

template <int MODE> __device__ __forceinline__ float px_axpby1(float alpha, float x, float beta, float y)
{
    if (MODE == 0) return 0.0f;
    if (MODE == 1) return beta * y;
    if (MODE == 2) return alpha * x;
    if (MODE == 3) return alpha * x + y;
    return alpha * x + beta * y;
}

template <int XD, int YD, int MODE>
__global__ void k_axpby(int64_t n, int64_t ng, float alpha, const void *x, float beta, void *y)
{
    const bool rx = MODE >= 2, ry = MODE == 1 || MODE >= 3;
    for (int64_t g = px_tid(); g < ng; g += px_nthreads()) {
        float a[PX_G], b[PX_G];
        if (rx) px_ld8<XD>(x, g, a);
        if (ry) px_ld8_rw<YD>(y, g, b);
#pragma unroll
        for (int j = 0; j < PX_G; j++) b[j] = px_axpby1<MODE>(alpha, rx ? a[j] : 0.0f, beta, ry ? b[j] : 0.0f);
        px_st8<YD>(y, g, b);
    }
    for (int64_t i = ng * PX_G + px_tid(); i < n; i += px_nthreads()) {
        float a = rx ? px_ld<XD>(x, i) : 0.0f, b = ry ? px_ld<YD>(y, i) : 0.0f;
        px_st<YD>(y, i, px_axpby1<MODE>(alpha, a, beta, b));
    }
}

template <int XD, int YD>
static void axpby_launch(px_cuda_ctx *ctx, int64_t n, float alpha, const void *x, float beta, void *y)
{
    int64_t ng = px_nvec(n, PX_G, x, y);
    unsigned grid = px_cuda_grid(ctx, ng ? ng : n, PX_THREADS, PX_WAVES);
    cudaStream_t s = ctx->stream;
    if (!x && beta == 0.0f)
        k_axpby<XD, YD, 0><<<grid, PX_THREADS, 0, s>>>(n, ng, alpha, x, beta, y);
    else if (!x)
        k_axpby<XD, YD, 1><<<grid, PX_THREADS, 0, s>>>(n, ng, alpha, x, beta, y);
    else if (beta == 0.0f)
        k_axpby<XD, YD, 2><<<grid, PX_THREADS, 0, s>>>(n, ng, alpha, x, beta, y);
    else if (beta == 1.0f)
        k_axpby<XD, YD, 3><<<grid, PX_THREADS, 0, s>>>(n, ng, alpha, x, beta, y);
    else
        k_axpby<XD, YD, 4><<<grid, PX_THREADS, 0, s>>>(n, ng, alpha, x, beta, y);
}

extern "C" phx_status px_cuda_axpby(int dev, int64_t n, float alpha, const void *x, phx_dtype xdt, float beta, void *y,
                                    phx_dtype ydt)
{
    PX_CHECK_N("axpby", n);
    if (!x) xdt = ydt;
    PX_CHECK_FLOAT("axpby", xdt);
    PX_CHECK_FLOAT("axpby", ydt);
    if (n == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    PX_FLOAT_DISPATCH_AS("axpby", xdt, X,
                         PX_FLOAT_DISPATCH_AS("axpby", ydt, Y, (axpby_launch<X, Y>(ctx, n, alpha, x, beta, y))));
    return px_cuda_launched(dev, "axpby");
}

/* ---- mul */

template <int DT> __global__ void k_mul(int64_t n, int64_t ng, const void *a, const void *b, void *out)
{
    for (int64_t g = px_tid(); g < ng; g += px_nthreads()) {
        float u[PX_G], v[PX_G];
        px_ld8<DT>(a, g, u);
        px_ld8<DT>(b, g, v);
#pragma unroll
        for (int j = 0; j < PX_G; j++) u[j] = u[j] * v[j];
        px_st8<DT>(out, g, u);
    }
    for (int64_t i = ng * PX_G + px_tid(); i < n; i += px_nthreads())
        px_st<DT>(out, i, px_ld<DT>(a, i) * px_ld<DT>(b, i));
}

extern "C" phx_status px_cuda_mul(int dev, int64_t n, const void *a, const void *b, void *out, phx_dtype dt)
{
    PX_CHECK_N("mul", n);
    PX_CHECK_FLOAT("mul", dt);
    if (n == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    int64_t ng = px_nvec(n, PX_G, a, b, out);
    unsigned grid = px_cuda_grid(ctx, ng ? ng : n, PX_THREADS, PX_WAVES);
    PX_FLOAT_DISPATCH("mul", dt, (k_mul<DT><<<grid, PX_THREADS, 0, ctx->stream>>>(n, ng, a, b, out)));
    return px_cuda_launched(dev, "mul");
}

/* ---- bias_add: y[r, c] += bias[c]; groups of 8 never straddle a row
 * when cols is a multiple of 8. */

template <int DT> __global__ void k_bias_add(int64_t n, int64_t ng, int64_t cols, void *y, const float *bias)
{
    for (int64_t g = px_tid(); g < ng; g += px_nthreads()) {
        float v[PX_G];
        px_ld8_rw<DT>(y, g, v);
        int64_t c = (g * PX_G) % cols;
#pragma unroll
        for (int j = 0; j < PX_G; j++) v[j] = v[j] + bias[c + j];
        px_st8<DT>(y, g, v);
    }
    for (int64_t i = ng * PX_G + px_tid(); i < n; i += px_nthreads()) px_st<DT>(y, i, px_ld<DT>(y, i) + bias[i % cols]);
}

extern "C" phx_status px_cuda_bias_add(int dev, int64_t rows, int64_t cols, void *y, phx_dtype dt, const float *bias)
{
    PX_CHECK_N("bias_add", rows);
    PX_CHECK_N("bias_add", cols);
    PX_CHECK_FLOAT("bias_add", dt);
    int64_t n = rows * cols;
    if (n == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    int64_t ng = cols % PX_G == 0 ? px_nvec(n, PX_G, y) : 0;
    unsigned grid = px_cuda_grid(ctx, ng ? ng : n, PX_THREADS, PX_WAVES);
    PX_FLOAT_DISPATCH("bias_add", dt, (k_bias_add<DT><<<grid, PX_THREADS, 0, ctx->stream>>>(n, ng, cols, y, bias)));
    return px_cuda_launched(dev, "bias_add");
}
