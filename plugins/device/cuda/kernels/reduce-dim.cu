/* Reductions along one dimension on the GPU: reduce_dim (sum, mean, max,
 * min with their positions, logsumexp) and softmax_dim / its backward,
 * over x viewed as (outer, n, inner). Each output (o, i) belongs to a
 * group of G lanes that walk the n values x[o, j, i] with j = lane,
 * lane + G, ..., in f32, and then combine across the group by shuffles:
 * G = 32 (a warp) when inner is 1 or there are too few outputs to fill
 * the device, so the lanes read neighbouring values; G = 1 (a thread per
 * output, neighbouring threads on neighbouring i) otherwise. No atomics
 * and a fixed order: results are the same from run to run; sums differ
 * from the CPU's only by summation order. Max and min propagate NaN (the
 * first NaN's position is the index) and keep the first position on
 * ties, like the CPU; exponentials are math.h's phx_expf, as on the
 * CPU. */
#include "plugins/device/cuda/kernels/common.cuh"
#include "plugins/device/cuda/kernels/kernels.h"

/* outputs (outer * inner) below which warps are used whatever inner is */
#define PX_FEW_OUTPUTS 1024

/* the group size for a shape; the launch takes it as a template constant */
static int group_of(int64_t outer, int64_t inner)
{
    return inner == 1 || outer * inner < PX_FEW_OUTPUTS ? 32 : 1;
}

template <int G> __device__ __forceinline__ float px_group_sum(float v)
{
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* the larger of two, a NaN winning (NaN-propagating max for logsumexp) */
__device__ __forceinline__ float px_max_nan(float a, float b)
{
    return a != a ? a : b != b ? b : (b > a ? b : a);
}

template <int G> __device__ __forceinline__ float px_group_max_nan(float v)
{
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) v = px_max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

template <int G> __device__ __forceinline__ float px_group_max(float v)
{
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Whether (bv, bj) beats (av, aj) for max (MAXOP) or min: a NaN beats a
 * number; between equals (two NaN included), the smaller position; j < 0
 * is "no value yet". */
template <bool MAXOP> __device__ __forceinline__ bool px_beats(float bv, int64_t bj, float av, int64_t aj)
{
    if (bj < 0) return false;
    if (aj < 0) return true;
    bool an = av != av, bn = bv != bv;
    if (an || bn) return bn && (!an || bj < aj);
    if (MAXOP ? bv > av : bv < av) return true;
    return bv == av && bj < aj;
}

/* The outputs of the calling group: w runs over outer * inner. The loop
 * bound is the same for every lane of a group, so whole warps shuffle. */
#define PX_FOR_OUTPUT(G, outer, inner, w) \
    for (int64_t w = px_tid() / (G); w < (outer) * (inner); w += px_nthreads() / (G))

template <int DT, int G>
__global__ void k_reduce_dim(int op, int64_t outer, int64_t n, int64_t inner, const void *x, void *y, int64_t *idx)
{
    int lane = G == 1 ? 0 : (int)(threadIdx.x & (G - 1));
    PX_FOR_OUTPUT(G, outer, inner, w)
    {
        int64_t o = w / inner, i = w - o * inner, base = o * n * inner + i;
        float r;
        if (op == PHX_RED_MAX || op == PHX_RED_MIN) {
            float v = 0.0f;
            int64_t at = -1;
            for (int64_t j = lane; j < n; j += G) {
                float u = px_ld<DT>(x, base + j * inner);
                if (op == PHX_RED_MAX ? px_beats<true>(u, j, v, at) : px_beats<false>(u, j, v, at)) v = u, at = j;
            }
#pragma unroll
            for (int s = G / 2; s > 0; s >>= 1) {
                float u = __shfl_xor_sync(0xffffffffu, v, s);
                int64_t j = __shfl_xor_sync(0xffffffffu, (long long)at, s);
                if (op == PHX_RED_MAX ? px_beats<true>(u, j, v, at) : px_beats<false>(u, j, v, at)) v = u, at = j;
            }
            r = v;
            if (idx && lane == 0) idx[w] = at;
        } else if (op == PHX_RED_LOGSUMEXP) {
            float m = -INFINITY;
            for (int64_t j = lane; j < n; j += G) m = px_max_nan(m, px_ld<DT>(x, base + j * inner));
            m = px_group_max_nan<G>(m);
            if (m != m || m == INFINITY || m == -INFINITY) {
                r = m; /* NaN, an infinite value, or all -inf (n = 0 too) */
            } else {
                float s = 0.0f;
                for (int64_t j = lane; j < n; j += G) s += phx_expf(px_ld<DT>(x, base + j * inner) - m);
                r = m + logf(px_group_sum<G>(s));
            }
        } else {
            float s = 0.0f;
            for (int64_t j = lane; j < n; j += G) s += px_ld<DT>(x, base + j * inner);
            s = px_group_sum<G>(s);
            r = op == PHX_RED_MEAN ? s / (float)n : s;
        }
        if (lane == 0) px_st<DT>(y, w, r);
    }
}

/* The launch of KERNEL<DT, G> with one group per output (at most
 * PX_WAVES blocks per multiprocessor; the loops cover the rest). */
#define PX_GROUP_LAUNCH(name, ctx, dt, outer, inner, KERNEL, ARGS) \
    do { \
        int64_t nout_ = (outer) * (inner); \
        if (group_of(outer, inner) == 32) { \
            unsigned grid_ = px_cuda_grid(ctx, (nout_ + PX_THREADS / 32 - 1) / (PX_THREADS / 32), 1, PX_WAVES); \
            PX_FLOAT_DISPATCH(name, dt, (KERNEL<DT, 32><<<grid_, PX_THREADS, 0, (ctx)->stream>>> ARGS)); \
        } else { \
            unsigned grid_ = px_cuda_grid(ctx, nout_, PX_THREADS, PX_WAVES); \
            PX_FLOAT_DISPATCH(name, dt, (KERNEL<DT, 1><<<grid_, PX_THREADS, 0, (ctx)->stream>>> ARGS)); \
        } \
    } while (0)

static phx_status dims_check(const char *name, int64_t outer, int64_t n, int64_t inner, phx_dtype dt)
{
    if (outer < 0 || n < 0 || inner < 0)
        return phx_error(PHX_EINVAL, "%s: layout (%lld, %lld, %lld), expected sizes >= 0", name, (long long)outer,
                         (long long)n, (long long)inner);
    if (outer > 0 && inner > 0 && n > INT64_MAX / outer / inner)
        return phx_error(PHX_EINVAL, "%s: layout (%lld, %lld, %lld), more than 2^63 elements", name, (long long)outer,
                         (long long)n, (long long)inner);
    PX_CHECK_FLOAT(name, dt);
    return PHX_OK;
}

extern "C" phx_status px_cuda_reduce_dim(int dev, int op, phx_dtype dt, int64_t outer, int64_t n, int64_t inner,
                                         const void *x, void *y, int64_t *idx)
{
    if (op < PHX_RED_SUM || op > PHX_RED_LOGSUMEXP)
        return phx_error(PHX_EINVAL, "reduce_dim: op %d, expected a phx_reduce_dim_op", op);
    phx_status st = dims_check("reduce_dim", outer, n, inner, dt);
    if (st != PHX_OK) return st;
    if (n == 0 && (op == PHX_RED_MAX || op == PHX_RED_MIN))
        return phx_error(PHX_EINVAL, "reduce_dim: max/min over an empty dim");
    if (outer == 0 || inner == 0) return PHX_OK;
    if (op != PHX_RED_MAX && op != PHX_RED_MIN) idx = NULL;
    PX_CTX(dev, ctx);
    PX_GROUP_LAUNCH("reduce_dim", ctx, dt, outer, inner, k_reduce_dim, (op, outer, n, inner, x, y, idx));
    return px_cuda_launched(dev, "reduce_dim");
}

/* ---- softmax over the middle dim; y may be x: a lane reads each of its
 * values before writing it, and the group's sums are complete (the
 * shuffles) before any lane writes */

template <int DT, int G>
__global__ void k_softmax_dim(int lg, int64_t outer, int64_t n, int64_t inner, const void *x, void *y)
{
    int lane = G == 1 ? 0 : (int)(threadIdx.x & (G - 1));
    PX_FOR_OUTPUT(G, outer, inner, w)
    {
        int64_t o = w / inner, i = w - o * inner, base = o * n * inner + i;
        float mx = -INFINITY;
        for (int64_t j = lane; j < n; j += G) mx = fmaxf(mx, px_ld<DT>(x, base + j * inner));
        mx = px_group_max<G>(mx);
        float s = 0.0f;
        for (int64_t j = lane; j < n; j += G) s += phx_expf(px_ld<DT>(x, base + j * inner) - mx);
        s = px_group_sum<G>(s);
        float ls = logf(s), inv = 1.0f / s;
        for (int64_t j = lane; j < n; j += G) {
            float v = px_ld<DT>(x, base + j * inner) - mx;
            px_st<DT>(y, base + j * inner, lg ? v - ls : phx_expf(v) * inv);
        }
    }
}

/* dx <- y (dy - sum y dy) (softmax) or dy - exp(y) sum dy (log_softmax) */
template <int DT, int G>
__global__ void k_softmax_dim_bwd(int lg, int64_t outer, int64_t n, int64_t inner, const void *y, const void *dy,
                                  void *dx)
{
    int lane = G == 1 ? 0 : (int)(threadIdx.x & (G - 1));
    PX_FOR_OUTPUT(G, outer, inner, w)
    {
        int64_t o = w / inner, i = w - o * inner, base = o * n * inner + i;
        float acc = 0.0f;
        for (int64_t j = lane; j < n; j += G) {
            int64_t e = base + j * inner;
            acc += lg ? px_ld<DT>(dy, e) : px_ld<DT>(y, e) * px_ld<DT>(dy, e);
        }
        acc = px_group_sum<G>(acc);
        for (int64_t j = lane; j < n; j += G) {
            int64_t e = base + j * inner;
            float yy = px_ld<DT>(y, e), d = px_ld<DT>(dy, e);
            px_st<DT>(dx, e, lg ? d - phx_expf(yy) * acc : yy * (d - acc));
        }
    }
}

extern "C" phx_status px_cuda_softmax_dim(int dev, int log, phx_dtype dt, int64_t outer, int64_t n, int64_t inner,
                                          const void *x, void *y)
{
    phx_status st = dims_check("softmax_dim", outer, n, inner, dt);
    if (st != PHX_OK || outer == 0 || n == 0 || inner == 0) return st;
    PX_CTX(dev, ctx);
    PX_GROUP_LAUNCH("softmax_dim", ctx, dt, outer, inner, k_softmax_dim, (log, outer, n, inner, x, y));
    return px_cuda_launched(dev, "softmax_dim");
}

extern "C" phx_status px_cuda_softmax_dim_backward(int dev, int log, phx_dtype dt, int64_t outer, int64_t n,
                                                   int64_t inner, const void *y, const void *dy, void *dx)
{
    phx_status st = dims_check("softmax_dim_backward", outer, n, inner, dt);
    if (st != PHX_OK || outer == 0 || n == 0 || inner == 0) return st;
    PX_CTX(dev, ctx);
    PX_GROUP_LAUNCH("softmax_dim_backward", ctx, dt, outer, inner, k_softmax_dim_bwd,
                    (log, outer, n, inner, y, dy, dx));
    return px_cuda_launched(dev, "softmax_dim_backward");
}
