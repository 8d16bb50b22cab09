/* Transformer kernels on the GPU, with the contracts of the appended
 * slots (include/phalanx/plugin/device_v1.h) and the math of the CPU
 * kernels (kernels/cpu/attention.c, embedding.c, residual.c):
 * softmax / log-softmax over rows with the causal mask (one warp per
 * row, f32 math), embedding gather (indices checked first: a bad one is
 * reported synchronously and nothing is written) and scatter-add
 * (atomicAdd: repeated indices sum in an unspecified order, so the
 * table's gradient may differ in the last bits run to run, as PyTorch's
 * default CUDA embedding backward), residual add, and the sum of squares
 * (f64 per-block partials summed in a fixed order). */
#include "plugins/device/cuda/kernels/common.cuh"
#include "plugins/device/cuda/kernels/kernels.h"

#define PX_ROWS_PER_BLOCK (PX_THREADS / 32)
#define PX_SQ_BLOCKS_MAX 1024

__device__ __forceinline__ float px_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float px_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

template <int DT>
__global__ void k_softmax_fwd(int64_t rows, int64_t cols, float scale, int causal, int lg, const void *x, void *y)
{
    int lane = threadIdx.x & 31;
    for (int64_t r = (int64_t)blockIdx.x * PX_ROWS_PER_BLOCK + (threadIdx.x >> 5); r < rows;
         r += (int64_t)gridDim.x * PX_ROWS_PER_BLOCK) {
        int64_t o = r * cols, lim = causal ? r % cols + 1 : cols;
        float mx = -INFINITY;
        for (int64_t c = lane; c < lim; c += 32) mx = fmaxf(mx, scale * px_ld<DT>(x, o + c));
        mx = px_warp_max(mx);
        float s = 0.0f;
        for (int64_t c = lane; c < lim; c += 32) s += expf(scale * px_ld<DT>(x, o + c) - mx);
        s = px_warp_sum(s);
        float ls = logf(s), inv = 1.0f / s;
        for (int64_t c = lane; c < cols; c += 32) {
            float v;
            if (c >= lim)
                v = lg ? -INFINITY : 0.0f;
            else
                v = lg ? scale * px_ld<DT>(x, o + c) - mx - ls : expf(scale * px_ld<DT>(x, o + c) - mx) * inv;
            px_st<DT>(y, o + c, v);
        }
    }
}

template <int DT>
__global__ void k_softmax_bwd(int64_t rows, int64_t cols, float scale, int causal, int lg, const void *y,
                              const void *dy, void *dx)
{
    int lane = threadIdx.x & 31;
    for (int64_t r = (int64_t)blockIdx.x * PX_ROWS_PER_BLOCK + (threadIdx.x >> 5); r < rows;
         r += (int64_t)gridDim.x * PX_ROWS_PER_BLOCK) {
        int64_t o = r * cols, lim = causal ? r % cols + 1 : cols;
        float acc = 0.0f;
        for (int64_t c = lane; c < lim; c += 32)
            acc += lg ? px_ld<DT>(dy, o + c) : px_ld<DT>(y, o + c) * px_ld<DT>(dy, o + c);
        acc = px_warp_sum(acc); /* every lane has read its dy before any writes dx */
        for (int64_t c = lane; c < cols; c += 32) {
            float v = 0.0f;
            if (c < lim) {
                float yy = px_ld<DT>(y, o + c), d = px_ld<DT>(dy, o + c);
                v = lg ? scale * (d - expf(yy) * acc) : scale * yy * (d - acc);
            }
            px_st<DT>(dx, o + c, v);
        }
    }
}

static phx_status rows_check(const char *name, int64_t rows, int64_t cols, phx_dtype dt)
{
    PX_CHECK_N(name, rows);
    if (cols < 1) return phx_error(PHX_EINVAL, "%s: %lld columns, expected >= 1", name, (long long)cols);
    PX_CHECK_FLOAT(name, dt);
    return PHX_OK;
}

extern "C" phx_status px_cuda_softmax_forward(int dev, int64_t rows, int64_t cols, float scale, int causal, int log,
                                              const void *x, void *y, phx_dtype dt)
{
    phx_status st = rows_check("softmax_forward", rows, cols, dt);
    if (st != PHX_OK || rows == 0) return st;
    PX_CTX(dev, ctx);
    unsigned grid = px_cuda_grid(ctx, (rows + PX_ROWS_PER_BLOCK - 1) / PX_ROWS_PER_BLOCK, 1, 16);
    PX_FLOAT_DISPATCH("softmax_forward", dt,
                      (k_softmax_fwd<DT><<<grid, PX_THREADS, 0, ctx->stream>>>(rows, cols, scale, causal, log, x, y)));
    return px_cuda_launched(dev, "softmax_forward");
}

extern "C" phx_status px_cuda_softmax_backward(int dev, int64_t rows, int64_t cols, float scale, int causal, int log,
                                               const void *y, const void *dy, void *dx, phx_dtype dt)
{
    phx_status st = rows_check("softmax_backward", rows, cols, dt);
    if (st != PHX_OK || rows == 0) return st;
    PX_CTX(dev, ctx);
    unsigned grid = px_cuda_grid(ctx, (rows + PX_ROWS_PER_BLOCK - 1) / PX_ROWS_PER_BLOCK, 1, 16);
    PX_FLOAT_DISPATCH(
        "softmax_backward", dt,
        (k_softmax_bwd<DT><<<grid, PX_THREADS, 0, ctx->stream>>>(rows, cols, scale, causal, log, y, dy, dx)));
    return px_cuda_launched(dev, "softmax_backward");
}

/* ---- embedding */

#define PX_NO_BAD 0x7f7f7f7f7f7f7f7full /* cudaMemsetAsync(0x7f): no position is that large */

__global__ void k_emb_check(int64_t n, int64_t num, const int64_t *idx, unsigned long long *bad)
{
    for (int64_t i = px_tid(); i < n; i += px_nthreads())
        if (idx[i] < 0 || idx[i] >= num) atomicMin(bad, (unsigned long long)i);
}

template <int DT> __global__ void k_emb_fwd(int64_t n, int64_t dim, const int64_t *idx, const float *w, void *y)
{
    for (int64_t e = px_tid(); e < n * dim; e += px_nthreads()) {
        int64_t i = e / dim, j = e - i * dim;
        px_st<DT>(y, e, w[idx[i] * dim + j]);
    }
}

template <int DT> __global__ void k_emb_bwd(int64_t n, int64_t dim, const int64_t *idx, const void *dy, float *dw)
{
    for (int64_t e = px_tid(); e < n * dim; e += px_nthreads()) {
        int64_t i = e / dim, j = e - i * dim;
        atomicAdd(dw + idx[i] * dim + j, px_ld<DT>(dy, e));
    }
}

static phx_status emb_check(const char *name, int64_t n, int64_t num, int64_t dim, phx_dtype dt)
{
    PX_CHECK_N(name, n);
    if (num < 1 || dim < 1)
        return phx_error(PHX_EINVAL, "%s: table (%lld, %lld), expected both sizes >= 1", name, (long long)num,
                         (long long)dim);
    PX_CHECK_FLOAT(name, dt);
    return PHX_OK;
}

extern "C" phx_status px_cuda_embedding_forward(int dev, int64_t n, int64_t num, int64_t dim, const int64_t *idx,
                                                const float *w, void *y, phx_dtype dt, int64_t *bad_host)
{
    phx_status st = emb_check("embedding_forward", n, num, dim, dt);
    if (st != PHX_OK) return st;
    *bad_host = -1;
    if (n == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    unsigned long long *bad, *host;
    if ((st = px_cuda_scratch(ctx, 8, (void **)&bad)) != PHX_OK ||
        (st = px_cuda_host_small(ctx, (void **)&host)) != PHX_OK)
        return st;
    cudaError_t e = cudaMemsetAsync(bad, 0x7f, 8, ctx->stream);
    if (e != cudaSuccess) return px_cuda_error(e, dev, "embedding_forward: cudaMemsetAsync");
    k_emb_check<<<px_cuda_grid(ctx, n, PX_THREADS, 2), PX_THREADS, 0, ctx->stream>>>(n, num, idx, bad);
    if ((st = px_cuda_launched(dev, "embedding_forward")) != PHX_OK) return st;
    e = cudaMemcpyAsync(host, bad, 8, cudaMemcpyDeviceToHost, ctx->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(ctx->stream);
    if (e != cudaSuccess) return px_cuda_error(e, dev, "embedding_forward: reading the index check");
    if (host[0] != PX_NO_BAD) {
        *bad_host = (int64_t)host[0];
        return PHX_OK;
    }
    unsigned grid = px_cuda_grid(ctx, n * dim, PX_THREADS, 4);
    PX_FLOAT_DISPATCH("embedding_forward", dt,
                      (k_emb_fwd<DT><<<grid, PX_THREADS, 0, ctx->stream>>>(n, dim, idx, w, y)));
    return px_cuda_launched(dev, "embedding_forward");
}

extern "C" phx_status px_cuda_embedding_backward(int dev, int64_t n, int64_t num, int64_t dim, const int64_t *idx,
                                                 const void *dy, phx_dtype dt, float *dw)
{
    phx_status st = emb_check("embedding_backward", n, num, dim, dt);
    if (st != PHX_OK || n == 0) return st;
    PX_CTX(dev, ctx);
    unsigned grid = px_cuda_grid(ctx, n * dim, PX_THREADS, 4);
    PX_FLOAT_DISPATCH("embedding_backward", dt,
                      (k_emb_bwd<DT><<<grid, PX_THREADS, 0, ctx->stream>>>(n, dim, idx, dy, dw)));
    return px_cuda_launched(dev, "embedding_backward");
}

/* ---- residual add and the sum of squares */

template <int DT> __global__ void k_add(int64_t n, const void *a, const void *b, void *out)
{
    for (int64_t i = px_tid(); i < n; i += px_nthreads()) px_st<DT>(out, i, px_ld<DT>(a, i) + px_ld<DT>(b, i));
}

extern "C" phx_status px_cuda_add(int dev, int64_t n, const void *a, const void *b, void *out, phx_dtype dt)
{
    PX_CHECK_N("add", n);
    PX_CHECK_FLOAT("add", dt);
    if (n == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    unsigned grid = px_cuda_grid(ctx, n, PX_THREADS, 4);
    PX_FLOAT_DISPATCH("add", dt, (k_add<DT><<<grid, PX_THREADS, 0, ctx->stream>>>(n, a, b, out)));
    return px_cuda_launched(dev, "add");
}

template <int DT> __global__ void k_sumsq_part(int64_t n, const void *x, double *part)
{
    __shared__ double sh[32];
    double s = 0.0;
    for (int64_t i = px_tid(); i < n; i += px_nthreads()) {
        double v = px_ld<DT>(x, i);
        s += v * v;
    }
    s = px_block_sum(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void k_sumsq_final(int nparts, const double *part, double *out)
{
    __shared__ double sh[32];
    double s = 0.0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) s += part[i];
    s = px_block_sum(s, sh);
    if (threadIdx.x == 0) *out = s;
}

extern "C" phx_status px_cuda_sum_squares(int dev, int64_t n, const void *x, phx_dtype dt, double *out_host)
{
    PX_CHECK_N("sum_squares", n);
    PX_CHECK_FLOAT("sum_squares", dt);
    *out_host = 0.0;
    if (n == 0) return PHX_OK;
    PX_CTX(dev, ctx);
    unsigned grid = px_cuda_grid(ctx, n, PX_THREADS, 4);
    if (grid > PX_SQ_BLOCKS_MAX) grid = PX_SQ_BLOCKS_MAX;
    double *part, *host;
    phx_status st = px_cuda_scratch(ctx, (grid + 1) * sizeof(double), (void **)&part);
    if (st == PHX_OK) st = px_cuda_host_small(ctx, (void **)&host);
    if (st != PHX_OK) return st;
    PX_FLOAT_DISPATCH("sum_squares", dt, (k_sumsq_part<DT><<<grid, PX_THREADS, 0, ctx->stream>>>(n, x, part)));
    k_sumsq_final<<<1, PX_THREADS, 0, ctx->stream>>>((int)grid, part, part + grid);
    if ((st = px_cuda_launched(dev, "sum_squares")) != PHX_OK) return st;
    cudaError_t e = cudaMemcpyAsync(host, part + grid, sizeof(double), cudaMemcpyDeviceToHost, ctx->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(ctx->stream);
    if (e != cudaSuccess) return px_cuda_error(e, dev, "sum_squares: reading the result");
    *out_host = host[0];
    return PHX_OK;
}
