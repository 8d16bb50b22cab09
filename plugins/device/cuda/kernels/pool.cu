/* Max and average pooling over NCHW images on the GPU, the window of a
 * phx_conv2d_desc (k = c; padding, stride and dilation as convolutions;
 * positions outside the input, the bottom/right rows and columns the
 * given oh, ow reach past it included, are padding). Forward: one thread
 * per output. Backward gathers, as PyTorch's CUDA pooling does: one
 * thread per input element sums, in f32 and in a fixed order, the
 * gradients of the outputs whose window holds it, so dx is written once,
 * rounded once and the same on every run (no atomics, no scratch). Max
 * pooling's backward reads the argmax of maxpool2d_forward on the same
 * window. */
#include "plugins/device/cuda/kernels/common.cuh"
#include "plugins/device/cuda/kernels/kernels.h"

/* The number of taps of output o's window along one axis that fall
 * inside [0, size). */
__device__ __forceinline__ int64_t pool_inside(int64_t o, int64_t stride, int64_t pad, int64_t dil, int64_t kern,
                                               int64_t size)
{
    int64_t cnt = 0, at = o * stride - pad;
    for (int64_t j = 0; j < kern; j++, at += dil) cnt += at >= 0 && at < size;
    return cnt;
}

/* Output index along one axis whose window reaches input position i at
 * its tap j, or -1. */
__device__ __forceinline__ int64_t pool_out(int64_t i, int64_t j, int64_t stride, int64_t pad, int64_t dil,
                                            int64_t nout)
{
    int64_t t = i + pad - j * dil;
    if (t < 0 || t % stride != 0) return -1;
    t /= stride;
    return t < nout ? t : -1;
}

/* The max of each window: the first maximum (NaN wins over any number,
 * the first NaN over later ones); a window wholly in the padding gives
 * -inf and argmax -1. */
template <int DT>
__global__ void k_maxpool_fwd(phx_conv2d_desc d, int64_t total, const void *x, void *y, int32_t *argmax)
{
    for (int64_t i = px_tid(); i < total; i += px_nthreads()) {
        int64_t ox = i % d.ow, t = i / d.ow, oy = t % d.oh, plane = t / d.oh;
        const int64_t base = plane * d.h * d.w;
        float best = -INFINITY;
        int64_t at = -1;
        for (int64_t ky = 0; ky < d.kh; ky++) {
            int64_t ih = oy * d.stride_h - d.pad_h + ky * d.dil_h;
            if (ih < 0 || ih >= d.h) continue;
            for (int64_t kx = 0; kx < d.kw; kx++) {
                int64_t iw = ox * d.stride_w - d.pad_w + kx * d.dil_w;
                if (iw < 0 || iw >= d.w) continue;
                float v = px_ld<DT>(x, base + ih * d.w + iw);
                if (at < 0 || (best == best && (v > best || v != v))) {
                    best = v;
                    at = ih * d.w + iw;
                }
            }
        }
        px_st<DT>(y, i, best);
        if (argmax) argmax[i] = (int32_t)at;
    }
}

static phx_status pool_check(const char *name, const phx_conv2d_desc *d, phx_dtype dt)
{
    phx_status st = px_check_window(name, d);
    if (st != PHX_OK) return st;
    if (d->k != d->c)
        return phx_error(PHX_EINVAL, "%s: %lld input and %lld output channels, expected the same", name,
                         (long long)d->c, (long long)d->k);
    return px_check_float(name, dt);
}
#define PX_POOL_CHECK(name, d, dt) \
    do { \
        phx_status s_ = pool_check(name, d, dt); \
        if (s_ != PHX_OK) return s_; \
    } while (0)

extern "C" phx_status px_cuda_maxpool2d_forward(int dev, const phx_conv2d_desc *d, const void *x, void *y,
                                                int32_t *argmax, phx_dtype dt)
{
    PX_POOL_CHECK("maxpool2d_forward", d, dt);
    if (d->h * d->w > INT32_MAX)
        return phx_error(PHX_EUNSUPPORTED, "maxpool2d_forward: an input plane of %lldx%lld exceeds the int32 argmax",
                         (long long)d->h, (long long)d->w);
    int64_t total = d->n * d->c * d->oh * d->ow;
    if (total == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    unsigned grid = px_cuda_grid(ctx, total, PX_THREADS, PX_WAVES);
    PX_FLOAT_DISPATCH("maxpool2d_forward", dt,
                      (k_maxpool_fwd<DT><<<grid, PX_THREADS, 0, ctx->stream>>>(*d, total, x, y, argmax)));
    return px_cuda_launched(dev, "maxpool2d_forward");
}

/* MAX: dx = the sum of dy over the outputs whose argmax is this element;
 * else dx = the sum of dy / (the window's divisor) over the outputs whose
 * window holds it (count_include_pad: kh kw, else the positions inside). */
template <int DT, int MAX>
__global__ void k_pool_bwd(phx_conv2d_desc d, int64_t total, int count_include_pad, const int32_t *argmax,
                           const void *dy, void *dx)
{
    for (int64_t i = px_tid(); i < total; i += px_nthreads()) {
        int64_t iw = i % d.w, t = i / d.w, ih = t % d.h, plane = t / d.h;
        const int64_t obase = plane * d.oh * d.ow;
        float acc = 0.0f;
        for (int64_t ky = 0; ky < d.kh; ky++) {
            int64_t oy = pool_out(ih, ky, d.stride_h, d.pad_h, d.dil_h, d.oh);
            if (oy < 0) continue;
            for (int64_t kx = 0; kx < d.kw; kx++) {
                int64_t ox = pool_out(iw, kx, d.stride_w, d.pad_w, d.dil_w, d.ow);
                if (ox < 0) continue;
                int64_t o = obase + oy * d.ow + ox;
                if (MAX) {
                    if (argmax[o] == ih * d.w + iw) acc += px_ld<DT>(dy, o);
                } else {
                    float div = count_include_pad ? (float)(d.kh * d.kw)
                                                  : (float)(pool_inside(oy, d.stride_h, d.pad_h, d.dil_h, d.kh, d.h) *
                                                            pool_inside(ox, d.stride_w, d.pad_w, d.dil_w, d.kw, d.w));
                    acc += px_ld<DT>(dy, o) / div;
                }
            }
        }
        px_st<DT>(dx, i, acc);
    }
}

extern "C" phx_status px_cuda_maxpool2d_backward(int dev, const phx_conv2d_desc *d, const int32_t *argmax,
                                                 const void *dy, void *dx, phx_dtype dt)
{
    PX_POOL_CHECK("maxpool2d_backward", d, dt);
    int64_t total = d->n * d->c * d->h * d->w;
    if (total == 0) return PHX_OK;
    if (!argmax && d->oh * d->ow > 0)
        return phx_error(PHX_EINVAL, "maxpool2d_backward: no argmax, expected maxpool2d_forward's");
    PX_CTX(dev, ctx);
    unsigned grid = px_cuda_grid(ctx, total, PX_THREADS, PX_WAVES);
    PX_FLOAT_DISPATCH("maxpool2d_backward", dt,
                      (k_pool_bwd<DT, 1><<<grid, PX_THREADS, 0, ctx->stream>>>(*d, total, 0, argmax, dy, dx)));
    return px_cuda_launched(dev, "maxpool2d_backward");
}

/* The mean of each window: padding reads as 0 and counts in the divisor
 * with count_include_pad; a window with no divisor gives 0. */
template <int DT>
__global__ void k_avgpool_fwd(phx_conv2d_desc d, int64_t total, int count_include_pad, const void *x, void *y)
{
    for (int64_t i = px_tid(); i < total; i += px_nthreads()) {
        int64_t ox = i % d.ow, t = i / d.ow, oy = t % d.oh, plane = t / d.oh;
        const int64_t base = plane * d.h * d.w;
        float s = 0.0f;
        int64_t cnt = 0;
        for (int64_t ky = 0; ky < d.kh; ky++) {
            int64_t ih = oy * d.stride_h - d.pad_h + ky * d.dil_h;
            if (ih < 0 || ih >= d.h) continue;
            for (int64_t kx = 0; kx < d.kw; kx++) {
                int64_t iw = ox * d.stride_w - d.pad_w + kx * d.dil_w;
                if (iw < 0 || iw >= d.w) continue;
                s += px_ld<DT>(x, base + ih * d.w + iw);
                cnt++;
            }
        }
        int64_t div = count_include_pad ? d.kh * d.kw : cnt;
        px_st<DT>(y, i, div > 0 ? s / (float)div : 0.0f);
    }
}

extern "C" phx_status px_cuda_avgpool2d_forward(int dev, const phx_conv2d_desc *d, int count_include_pad, const void *x,
                                                void *y, phx_dtype dt)
{
    PX_POOL_CHECK("avgpool2d_forward", d, dt);
    int64_t total = d->n * d->c * d->oh * d->ow;
    if (total == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    unsigned grid = px_cuda_grid(ctx, total, PX_THREADS, PX_WAVES);
    PX_FLOAT_DISPATCH("avgpool2d_forward", dt,
                      (k_avgpool_fwd<DT><<<grid, PX_THREADS, 0, ctx->stream>>>(*d, total, count_include_pad, x, y)));
    return px_cuda_launched(dev, "avgpool2d_forward");
}

extern "C" phx_status px_cuda_avgpool2d_backward(int dev, const phx_conv2d_desc *d, int count_include_pad,
                                                 const void *dy, void *dx, phx_dtype dt)
{
    PX_POOL_CHECK("avgpool2d_backward", d, dt);
    int64_t total = d->n * d->c * d->h * d->w;
    if (total == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    unsigned grid = px_cuda_grid(ctx, total, PX_THREADS, PX_WAVES);
    PX_FLOAT_DISPATCH(
        "avgpool2d_backward", dt,
        (k_pool_bwd<DT, 0><<<grid, PX_THREADS, 0, ctx->stream>>>(*d, total, count_include_pad, NULL, dy, dx)));
    return px_cuda_launched(dev, "avgpool2d_backward");
}
