/* BatchNorm over NCHW activations on the GPU, viewed as x (n, c, hw):
 * per-channel statistics and sums in f32, one block per channel
 * (grid-stride over channels); apply and the dx pass are flat grid-stride
 * loops. Per-element formulas (invstd, y, dx) from kernels/math.h, the
 * ones the CPU kernels use. The mean and variance come from two passes
 * over x shifted by the channel's first element, so a large common offset
 * costs no precision (as layernorm.cu). */
#include "plugins/device/cuda/kernels/common.cuh"
#include "plugins/device/cuda/kernels/kernels.h"

#define PX_BN_THREADS 256

static int bn_threads(int64_t m)
{
    return m >= PX_BN_THREADS ? PX_BN_THREADS : (int)((m + 31) / 32 * 32);
}

static phx_status bn_check(const char *name, int64_t n, int64_t c, int64_t hw, phx_dtype dt)
{
    if (n < 0 || c < 0 || hw < 0)
        return phx_error(PHX_EINVAL, "%s: x (%lld, %lld, %lld), expected sizes >= 0", name, (long long)n, (long long)c,
                         (long long)hw);
    return px_check_float(name, dt);
}
#define PX_BN_CHECK(name, n, c, hw, dt) \
    do { \
        phx_status s_ = bn_check(name, n, c, hw, dt); \
        if (s_ != PHX_OK) return s_; \
    } while (0)

template <int DT> __global__ void k_bn_stats(int64_t n, int64_t c, int64_t hw, const void *x, float *mean, float *var)
{
    __shared__ float sh[32];
    int64_t m = n * hw;
    float inv_m = 1.0f / (float)m;
    for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
        float x0 = px_ld<DT>(x, ch * hw);
        float s = 0.0f;
        for (int64_t i = threadIdx.x; i < m; i += blockDim.x) s += px_ld<DT>(x, px_chan_at(i, ch, c, hw)) - x0;
        float d = px_block_sumf(s, sh) * inv_m;
        float v = 0.0f;
        for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
            float e = (px_ld<DT>(x, px_chan_at(i, ch, c, hw)) - x0) - d;
            v += e * e;
        }
        v = px_block_sumf(v, sh) * inv_m;
        if (threadIdx.x == 0) {
            mean[ch] = x0 + d;
            var[ch] = v;
        }
    }
}

extern "C" phx_status px_cuda_batchnorm_stats(int dev, int64_t n, int64_t c, int64_t hw, const void *x, phx_dtype dt,
                                              float *mean, float *var)
{
    PX_BN_CHECK("batchnorm_stats", n, c, hw, dt);
    if (c == 0) return PHX_OK;
    if (n * hw == 0)
        return phx_error(PHX_EINVAL, "batchnorm_stats: x (%lld, %lld, %lld) has no values per channel", (long long)n,
                         (long long)c, (long long)hw);
    PX_CTX(dev, ctx);
    unsigned grid = px_cuda_grid(ctx, c, 1, 16);
    int threads = bn_threads(n * hw);
    PX_FLOAT_DISPATCH("batchnorm_stats", dt,
                      (k_bn_stats<DT><<<grid, threads, 0, ctx->stream>>>(n, c, hw, x, mean, var)));
    return px_cuda_launched(dev, "batchnorm_stats");
}

template <int DT>
__global__ void k_bn_apply(int64_t total, int64_t c, int64_t hw, const void *x, const float *mean, const float *var,
                           float eps, const float *w, const float *b, void *y)
{
    for (int64_t i = px_tid(); i < total; i += px_nthreads()) {
        int64_t ch = (i / hw) % c;
        float istd = phx_bn_invstd(var[ch], eps);
        px_st<DT>(y, i, phx_bn_apply(px_ld<DT>(x, i), mean[ch], istd, w ? w[ch] : 1.0f, b ? b[ch] : 0.0f));
    }
}

extern "C" phx_status px_cuda_batchnorm_apply(int dev, int64_t n, int64_t c, int64_t hw, const void *x,
                                              const float *mean, const float *var, float eps, const float *w,
                                              const float *b, void *y, phx_dtype dt)
{
    PX_BN_CHECK("batchnorm_apply", n, c, hw, dt);
    if (!(eps >= 0.0f)) return phx_error(PHX_EINVAL, "batchnorm_apply: eps=%g, expected >= 0", (double)eps);
    int64_t total = n * c * hw;
    if (total == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    unsigned grid = px_cuda_grid(ctx, total, PX_THREADS, PX_WAVES);
    PX_FLOAT_DISPATCH("batchnorm_apply", dt,
                      (k_bn_apply<DT><<<grid, PX_THREADS, 0, ctx->stream>>>(total, c, hw, x, mean, var, eps, w, b, y)));
    return px_cuda_launched(dev, "batchnorm_apply");
}

/* Per channel: sum dy and sum dy (x - mean), then the weight and bias
 * gradients from them. */
template <int DT>
__global__ void k_bn_bwd_reduce(int64_t n, int64_t c, int64_t hw, const void *x, const void *dy, const float *mean,
                                const float *var, float eps, float *sum_dy, float *sum_dy_xmu, float *dw, float *db)
{
    __shared__ float sh[32];
    int64_t m = n * hw;
    for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
        float mu = mean[ch];
        float s = 0.0f, sx = 0.0f;
        for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
            int64_t at = px_chan_at(i, ch, c, hw);
            float g = px_ld<DT>(dy, at);
            s += g;
            sx += g * (px_ld<DT>(x, at) - mu);
        }
        s = px_block_sumf(s, sh);
        sx = px_block_sumf(sx, sh);
        if (threadIdx.x == 0) {
            if (sum_dy) sum_dy[ch] = s;
            if (sum_dy_xmu) sum_dy_xmu[ch] = sx;
            if (dw) dw[ch] += sx * phx_bn_invstd(var[ch], eps);
            if (db) db[ch] += s;
        }
    }
}

extern "C" phx_status px_cuda_batchnorm_backward_reduce(int dev, int64_t n, int64_t c, int64_t hw, const void *x,
                                                        const void *dy, phx_dtype dt, const float *mean,
                                                        const float *var, float eps, float *sum_dy, float *sum_dy_xmu,
                                                        float *dw, float *db)
{
    PX_BN_CHECK("batchnorm_backward_reduce", n, c, hw, dt);
    if (!(eps >= 0.0f)) return phx_error(PHX_EINVAL, "batchnorm_backward_reduce: eps=%g, expected >= 0", (double)eps);
    if (c == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    unsigned grid = px_cuda_grid(ctx, c, 1, 16);
    int threads = n * hw > 0 ? bn_threads(n * hw) : 32;
    PX_FLOAT_DISPATCH("batchnorm_backward_reduce", dt,
                      (k_bn_bwd_reduce<DT><<<grid, threads, 0, ctx->stream>>>(n, c, hw, x, dy, mean, var, eps, sum_dy,
                                                                              sum_dy_xmu, dw, db)));
    return px_cuda_launched(dev, "batchnorm_backward_reduce");
}

/* sum_dy NULL: fixed statistics, dx = dy istd w (x and mean unread). */
template <int DT>
__global__ void k_bn_bwd_apply(int64_t total, int64_t c, int64_t hw, const void *x, const void *dy, const float *mean,
                               const float *var, float eps, const float *w, const float *sum_dy,
                               const float *sum_dy_xmu, float inv_count, void *dx)
{
    for (int64_t i = px_tid(); i < total; i += px_nthreads()) {
        int64_t ch = (i / hw) % c;
        float istd = phx_bn_invstd(var[ch], eps);
        float scale = istd * (w ? w[ch] : 1.0f);
        float g = px_ld<DT>(dy, i);
        float r = sum_dy
            ? phx_bn_dx(g, px_ld<DT>(x, i) - mean[ch], istd, sum_dy[ch] * inv_count, sum_dy_xmu[ch] * inv_count, scale)
            : g * scale;
        px_st<DT>(dx, i, r);
    }
}

extern "C" phx_status px_cuda_batchnorm_backward_apply(int dev, int64_t n, int64_t c, int64_t hw, const void *x,
                                                       const void *dy, phx_dtype dt, const float *mean,
                                                       const float *var, float eps, const float *w, const float *sum_dy,
                                                       const float *sum_dy_xmu, double count, void *dx)
{
    PX_BN_CHECK("batchnorm_backward_apply", n, c, hw, dt);
    if (!(eps >= 0.0f)) return phx_error(PHX_EINVAL, "batchnorm_backward_apply: eps=%g, expected >= 0", (double)eps);
    if (!sum_dy != !sum_dy_xmu)
        return phx_error(PHX_EINVAL, "batchnorm_backward_apply: sum_dy %s and sum_dy_xmu %s, expected both or neither",
                         sum_dy ? "given" : "NULL", sum_dy_xmu ? "given" : "NULL");
    if (sum_dy && !(count > 0))
        return phx_error(PHX_EINVAL, "batchnorm_backward_apply: count %g, expected > 0 with batch statistics", count);
    int64_t total = n * c * hw;
    if (total == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    float inv_count = sum_dy ? (float)(1.0 / count) : 0.0f;
    unsigned grid = px_cuda_grid(ctx, total, PX_THREADS, PX_WAVES);
    PX_FLOAT_DISPATCH("batchnorm_backward_apply", dt,
                      (k_bn_bwd_apply<DT><<<grid, PX_THREADS, 0, ctx->stream>>>(total, c, hw, x, dy, mean, var, eps, w,
                                                                                sum_dy, sum_dy_xmu, inv_count, dx)));
    return px_cuda_launched(dev, "batchnorm_backward_apply");
}
