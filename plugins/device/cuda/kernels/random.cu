/* Philox-based kernels on the GPU: dropout forward/backward and the
 * uniform and normal fills. Number k of the stream is word k mod 4 of
 * Philox block k/4 (kernels/math.h), so each thread computes one block and
 * uses its four words for the elements that need them: the values equal
 * the CPU's (kernels/cpu/dropout.c, rng.c) for any offset. */
#include "plugins/device/cuda/kernels/common.cuh"
#include "plugins/device/cuda/kernels/kernels.h"

/* Thread t handles stream block b0 + t: elements i with offset + i in
 * [4 b, 4 b + 4). */
template <int DT>
__global__ void k_dropout_fwd(int64_t n, float p, uint64_t seed, uint64_t offset, uint64_t b0, uint64_t nblocks,
                              const void *x, void *y, uint8_t *mask)
{
    float scale = phx_dropout_scale(p);
    for (uint64_t t = (uint64_t)px_tid(); t < nblocks; t += (uint64_t)px_nthreads()) {
        uint64_t b = b0 + t;
        uint32_t w[4];
        phx_philox_block(seed, b, w);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int64_t i = (int64_t)(4 * b + (uint64_t)j - offset);
            if (4 * b + (uint64_t)j < offset || i >= n) continue;
            int keep = phx_dropout_keep(phx_u32_to_uniform(w[j]), p);
            if (mask) mask[i] = (uint8_t)keep;
            px_st<DT>(y, i, keep ? px_ld<DT>(x, i) * scale : 0.0f);
        }
    }
}

static phx_status check_p(const char *name, float p)
{
    if (!(p >= 0.0f && p <= 1.0f)) return phx_error(PHX_EINVAL, "%s: p=%g, expected 0 <= p <= 1", name, (double)p);
    return PHX_OK;
}

extern "C" phx_status px_cuda_dropout_forward(int dev, int64_t n, float p, uint64_t seed, uint64_t offset,
                                              const void *x, void *y, uint8_t *mask, phx_dtype dt)
{
    PX_CHECK_N("dropout_forward", n);
    if (check_p("dropout_forward", p) != PHX_OK) return PHX_EINVAL;
    PX_CHECK_FLOAT("dropout_forward", dt);
    if (n == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    uint64_t b0 = offset >> 2, b1 = (offset + (uint64_t)n - 1) >> 2, nb = b1 - b0 + 1;
    unsigned grid = px_cuda_grid(ctx, (int64_t)nb, PX_THREADS, PX_WAVES);
    PX_FLOAT_DISPATCH(
        "dropout_forward", dt,
        (k_dropout_fwd<DT><<<grid, PX_THREADS, 0, ctx->stream>>>(n, p, seed, offset, b0, nb, x, y, mask)));
    return px_cuda_launched(dev, "dropout_forward");
}

template <int DT>
__global__ void k_dropout_bwd(int64_t n, int64_t ng, float scale, const uint8_t *mask, const void *dy, void *dx)
{
    for (int64_t g = px_tid(); g < ng; g += px_nthreads()) {
        float d[PX_G];
        uint2 mw = __ldg((const uint2 *)mask + g);
        const uint8_t *m = (const uint8_t *)&mw;
        px_ld8<DT>(dy, g, d);
#pragma unroll
        for (int j = 0; j < PX_G; j++) d[j] = m[j] ? d[j] * scale : 0.0f;
        px_st8<DT>(dx, g, d);
    }
    for (int64_t i = ng * PX_G + px_tid(); i < n; i += px_nthreads())
        px_st<DT>(dx, i, mask[i] ? px_ld<DT>(dy, i) * scale : 0.0f);
}

extern "C" phx_status px_cuda_dropout_backward(int dev, int64_t n, float p, const uint8_t *mask, const void *dy,
                                               void *dx, phx_dtype dt)
{
    PX_CHECK_N("dropout_backward", n);
    if (check_p("dropout_backward", p) != PHX_OK) return PHX_EINVAL;
    if (!mask && n > 0) return phx_error(PHX_EINVAL, "dropout_backward: mask is NULL, expected forward's mask");
    PX_CHECK_FLOAT("dropout_backward", dt);
    if (n == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    int64_t ng = px_nvec(n, PX_G, mask, dy, dx);
    unsigned grid = px_cuda_grid(ctx, ng ? ng : n, PX_THREADS, PX_WAVES);
    float scale = phx_dropout_scale(p);
    PX_FLOAT_DISPATCH("dropout_backward", dt,
                      (k_dropout_bwd<DT><<<grid, PX_THREADS, 0, ctx->stream>>>(n, ng, scale, mask, dy, dx)));
    return px_cuda_launched(dev, "dropout_backward");
}

/* ---- uniform: element i = lo + (hi - lo) u(offset + i) */

template <int DT>
__global__ void k_uniform(void *dst, int64_t n, uint64_t seed, uint64_t offset, uint64_t b0, uint64_t nblocks, float lo,
                          float span)
{
    for (uint64_t t = (uint64_t)px_tid(); t < nblocks; t += (uint64_t)px_nthreads()) {
        uint64_t b = b0 + t;
        uint32_t w[4];
        phx_philox_block(seed, b, w);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int64_t i = (int64_t)(4 * b + (uint64_t)j - offset);
            if (4 * b + (uint64_t)j < offset || i >= n) continue;
            px_st<DT>(dst, i, lo + span * phx_u32_to_uniform(w[j]));
        }
    }
}

extern "C" phx_status px_cuda_rng_uniform(int dev, void *dst, phx_dtype dt, int64_t n, uint64_t seed, uint64_t offset,
                                          float lo, float hi)
{
    PX_CHECK_N("rng_uniform", n);
    if (!(lo <= hi))
        return phx_error(PHX_EINVAL, "rng_uniform: range [%g, %g), expected lo <= hi", (double)lo, (double)hi);
    PX_CHECK_FLOAT("rng_uniform", dt);
    if (n == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    uint64_t b0 = offset >> 2, b1 = (offset + (uint64_t)n - 1) >> 2, nb = b1 - b0 + 1;
    unsigned grid = px_cuda_grid(ctx, (int64_t)nb, PX_THREADS, PX_WAVES);
    float span = hi - lo;
    PX_FLOAT_DISPATCH("rng_uniform", dt,
                      (k_uniform<DT><<<grid, PX_THREADS, 0, ctx->stream>>>(dst, n, seed, offset, b0, nb, lo, span)));
    return px_cuda_launched(dev, "rng_uniform");
}

/* ---- normal: element i from numbers k = offset + 2i and k + 1 (the
 * same block unless k mod 4 == 3) */

template <int DT> __global__ void k_normal(void *dst, int64_t n, uint64_t seed, uint64_t offset, float mean, float std)
{
    for (int64_t i = px_tid(); i < n; i += px_nthreads()) {
        uint64_t k = offset + 2 * (uint64_t)i;
        uint32_t w[4];
        phx_philox_block(seed, k >> 2, w);
        uint32_t r1 = w[k & 3u], r2;
        if ((k & 3u) != 3u) {
            r2 = w[(k & 3u) + 1];
        } else {
            phx_philox_block(seed, (k + 1) >> 2, w);
            r2 = w[0];
        }
        float u1 = phx_u32_to_uniform(r1), u2 = phx_u32_to_uniform(r2);
        px_st<DT>(dst, i, mean + std * phx_box_muller(u1, u2));
    }
}

extern "C" phx_status px_cuda_rng_normal(int dev, void *dst, phx_dtype dt, int64_t n, uint64_t seed, uint64_t offset,
                                         float mean, float std)
{
    PX_CHECK_N("rng_normal", n);
    if (!(std >= 0.0f)) return phx_error(PHX_EINVAL, "rng_normal: std=%g, expected >= 0", (double)std);
    PX_CHECK_FLOAT("rng_normal", dt);
    if (n == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    unsigned grid = px_cuda_grid(ctx, n, PX_THREADS, PX_WAVES);
    PX_FLOAT_DISPATCH("rng_normal", dt,
                      (k_normal<DT><<<grid, PX_THREADS, 0, ctx->stream>>>(dst, n, seed, offset, mean, std)));
    return px_cuda_launched(dev, "rng_normal");
}
