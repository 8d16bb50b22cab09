/* Losses on the GPU: mse (sum or mean) and cross entropy / nll (mean over
 * rows), as kernels/cpu/loss.c: per-element pieces from kernels/math.h,
 * the loss accumulated in double, gradients f32. Loss sums go through
 * per-block (mse) or per-row (cross entropy) partials summed in a fixed
 * order, so results are deterministic. A bad label is found by a first
 * kernel; the compute kernel then writes nothing (as on the CPU, a bad
 * label changes nothing) and the caller learns the row. */
#include "plugins/device/cuda/kernels/common.cuh"
#include "plugins/device/cuda/kernels/kernels.h"

#define PX_LOSS_BLOCKS_MAX 1024

template <int DT>
__global__ void k_mse_part(int64_t n, const void *y, const float *t, float scale, float *grad, double *part)
{
    __shared__ double sh[32];
    double s = 0.0;
    for (int64_t i = px_tid(); i < n; i += px_nthreads()) {
        float v = px_ld<DT>(y, i);
        s += (double)phx_mse_term(v, t[i]);
        if (grad) grad[i] = phx_mse_grad(v, t[i], scale);
    }
    s = px_block_sum(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

/* one block: loss[0] <- (sum of nparts partials) / div */
__global__ void k_sum_parts(int nparts, const double *part, double div, float *loss)
{
    __shared__ double sh[32];
    double s = 0.0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) s += part[i];
    s = px_block_sum(s, sh);
    if (threadIdx.x == 0) *loss = (float)(s / div);
}

extern "C" phx_status px_cuda_mse(int dev, int64_t n, const void *y, phx_dtype dt, const float *target, int mean,
                                  float *loss, float *grad)
{
    PX_CHECK_N("mse", n);
    PX_CHECK_FLOAT("mse", dt);
    if (!loss && !grad) return PHX_OK;
    PX_CTX(dev, ctx);
    float scale = mean ? 1.0f / (float)n : 1.0f; /* n = 0 with mean: NaN loss, as torch */
    unsigned grid = px_cuda_grid(ctx, n, PX_THREADS, 4);
    if (grid > PX_LOSS_BLOCKS_MAX) grid = PX_LOSS_BLOCKS_MAX;
    double *part;
    phx_status st = px_cuda_scratch(ctx, grid * sizeof(double), (void **)&part);
    if (st != PHX_OK) return st;
    PX_FLOAT_DISPATCH("mse", dt,
                      (k_mse_part<DT><<<grid, PX_THREADS, 0, ctx->stream>>>(n, y, target, scale, grad, part)));
    if (loss) k_sum_parts<<<1, PX_THREADS, 0, ctx->stream>>>((int)grid, part, mean ? (double)n : 1.0, loss);
    return px_cuda_launched(dev, "mse");
}

/* ---- cross entropy */

#define PX_NO_BAD 0x7f7f7f7f7f7f7f7full /* cudaMemsetAsync(0x7f): no row is that large */

__global__ void k_check_labels(int64_t rows, int64_t classes, const int64_t *labels, unsigned long long *bad)
{
    for (int64_t r = px_tid(); r < rows; r += px_nthreads())
        if (labels[r] < 0 || labels[r] >= classes) atomicMin(bad, (unsigned long long)r);
}

/* One group of G threads per row (G = 32: a warp; G = 256: the block). */
template <int G> __device__ __forceinline__ float px_group_sum(float v, float *sh)
{
    if (G == 32) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        return v;
    }
    return px_block_sumf(v, sh);
}

template <int G> __device__ __forceinline__ float px_group_max(float v, float *sh)
{
    if (G == 32) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
        return v;
    }
    return px_block_maxf(v, sh);
}

template <int DT, int G, int LOGP>
__global__ void k_xent_rows(int64_t rows, int64_t classes, const void *x, const int64_t *labels, float scale,
                            float *grad, const unsigned long long *bad, double *row_loss)
{
    __shared__ float sh[32];
    if (*bad != PX_NO_BAD) return; /* a bad label: write nothing */
    const int per_block = PX_THREADS / G;
    int lane = threadIdx.x % G;
    /* every thread of a block runs the same number of iterations, so the
     * block-wide reductions (G = 256) see all threads */
    for (int64_t r0 = (int64_t)blockIdx.x * per_block; r0 < rows; r0 += (int64_t)gridDim.x * per_block) {
        int64_t r = r0 + threadIdx.x / G;
        bool live = r < rows;
        int64_t o = r * classes, label = live ? labels[r] : 0;
        float *g = grad && live ? grad + o : NULL;
        if (LOGP) {
            if (g)
                for (int64_t j = lane; j < classes; j += G) g[j] = phx_nll_grad(j == label, scale);
            if (live && lane == 0) row_loss[r] = -(double)px_ld<DT>(x, o + label);
            continue;
        }
        float mx = -INFINITY;
        if (live)
            for (int64_t j = lane; j < classes; j += G) {
                float v = px_ld<DT>(x, o + j);
                mx = v > mx ? v : mx;
            }
        mx = px_group_max<G>(mx, sh);
        /* shifted terms (x - mx, log s), as the CPU and torch's log_softmax;
         * the gradient row holds exp(x - mx) between the passes. The CPU's
         * phx_expf (not CUDA's expf, 2 ulp): the same bits per element */
        float s = 0.0f;
        if (live)
            for (int64_t j = lane; j < classes; j += G) {
                float e = phx_expf(px_ld<DT>(x, o + j) - mx);
                if (g) g[j] = e;
                s += e;
            }
        s = px_group_sum<G>(s, sh);
        float inv = 1.0f / s;
        if (g)
            for (int64_t j = lane; j < classes; j += G) g[j] = phx_softmax_grad(g[j], inv, j == label, scale);
        if (live && lane == 0) row_loss[r] = (double)logf(s) - (double)(px_ld<DT>(x, o + label) - mx);
    }
}

/* one block: loss[0] <- sum of row losses / rows, unless a label was bad */
__global__ void k_xent_total(int64_t rows, const double *row_loss, const unsigned long long *bad, float *loss)
{
    __shared__ double sh[32];
    if (*bad != PX_NO_BAD) return;
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) s += row_loss[i];
    s = px_block_sum(s, sh);
    if (threadIdx.x == 0) *loss = (float)(s / (double)rows); /* rows = 0: NaN, as torch */
}

template <int DT, int G>
static void xent_launch(px_cuda_ctx *ctx, unsigned grid, int64_t rows, int64_t classes, const void *x,
                        const int64_t *labels, int logp, float scale, float *grad, const unsigned long long *bad,
                        double *row_loss)
{
    if (logp)
        k_xent_rows<DT, G, 1>
            <<<grid, PX_THREADS, 0, ctx->stream>>>(rows, classes, x, labels, scale, grad, bad, row_loss);
    else
        k_xent_rows<DT, G, 0>
            <<<grid, PX_THREADS, 0, ctx->stream>>>(rows, classes, x, labels, scale, grad, bad, row_loss);
}

extern "C" phx_status px_cuda_cross_entropy(int dev, int64_t rows, int64_t classes, const void *logits, phx_dtype dt,
                                            const int64_t *labels, int log_probs, float *loss, float *grad,
                                            int64_t *bad_label_host)
{
    const char *name = log_probs ? "nll" : "cross_entropy";
    PX_CHECK_N(name, rows);
    if (classes < 1) return phx_error(PHX_EINVAL, "%s: %lld classes, expected >= 1", name, (long long)classes);
    PX_CHECK_FLOAT(name, dt);
    if (bad_label_host) *bad_label_host = -1;
    PX_CTX(dev, ctx);
    /* scratch: [bad row flag, pad to 256 B][row losses] */
    unsigned char *scr;
    phx_status st = px_cuda_scratch(ctx, 256 + (size_t)(rows > 0 ? rows : 1) * sizeof(double), (void **)&scr);
    if (st != PHX_OK) return st;
    unsigned long long *bad = (unsigned long long *)scr;
    double *row_loss = (double *)(scr + 256);
    cudaError_t e = cudaMemsetAsync(bad, 0x7f, 8, ctx->stream); /* PX_NO_BAD */
    if (e != cudaSuccess) return px_cuda_error(e, dev, "cross_entropy: cudaMemsetAsync");
    if (rows > 0)
        k_check_labels<<<px_cuda_grid(ctx, rows, PX_THREADS, 2), PX_THREADS, 0, ctx->stream>>>(rows, classes, labels,
                                                                                               bad);
    float scale = 1.0f / (float)rows;
    int small = classes <= 1024;
    int64_t per_block = small ? PX_THREADS / 32 : 1;
    unsigned grid = px_cuda_grid(ctx, (rows + per_block - 1) / per_block, 1, 16);
    if (rows > 0) {
        if (small)
            PX_FLOAT_DISPATCH(
                name, dt,
                (xent_launch<DT, 32>(ctx, grid, rows, classes, logits, labels, log_probs, scale, grad, bad, row_loss)));
        else
            PX_FLOAT_DISPATCH(name, dt,
                              (xent_launch<DT, PX_THREADS>(ctx, grid, rows, classes, logits, labels, log_probs, scale,
                                                           grad, bad, row_loss)));
    }
    if (loss) k_xent_total<<<1, PX_THREADS, 0, ctx->stream>>>(rows, row_loss, bad, loss);
    if ((st = px_cuda_launched(dev, name)) != PHX_OK) return st;
    if (!bad_label_host || rows == 0) return PHX_OK;
    /* the caller wants to know now: read the flag (synchronises) */
    unsigned long long *host;
    if ((st = px_cuda_host_small(ctx, (void **)&host)) != PHX_OK) return st;
    e = cudaMemcpyAsync(host, bad, 8, cudaMemcpyDeviceToHost, ctx->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(ctx->stream);
    if (e != cudaSuccess) return px_cuda_error(e, dev, "cross_entropy: reading the label check");
    if (host[0] == PX_NO_BAD) return PHX_OK;
    int64_t row = (int64_t)host[0];
    *bad_label_host = row;
    int64_t label = 0;
    e = cudaMemcpyAsync(host, labels + row, 8, cudaMemcpyDeviceToHost, ctx->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(ctx->stream);
    if (e == cudaSuccess) memcpy(&label, host, 8);
    return phx_error(PHX_EINVAL, "%s: label %lld at row %lld, expected 0 <= label < %lld", name, (long long)label,
                     (long long)row, (long long)classes);
}
